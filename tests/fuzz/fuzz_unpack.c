/* Fuzz target: the receiver's unpacker (sync/archive/pack.c and take.c's ops, via
 * recv_fuzz_archive): the input is the whole small-file archive stream, cut
 * into messages, against a fixed manifest (recv_fixture.h), written into a
 * temp directory by the writer threads. Whatever comes, only verified
 * content may land, and only at the manifest's paths. */
#include <stdint.h>
#include <stdlib.h>

#include "tests/fuzz/recv_fixture.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fixture f;
	fx_start(&f);
	int rc = recv_fuzz_archive(&f.s, data, size);
	if (rc != 0 && rc != -EPROTO && rc != -ENOMEM)
		abort();
	fx_end(&f);
	return 0;
}
