/* Fuzz target: the manifest decoder (peer input). With clang
 * -fsanitize=fuzzer this is a libFuzzer target (make fuzz); otherwise it is
 * linked with replay.c and make check replays the stored corpus. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "index/index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idx_manifest m = { 0 };
	struct idx_why why;
	int rc = idx_manifest_decode(data, size, &m, &why);
	if (rc < 0) {
		/* a rejection says why, on one printable line */
		if ((rc != -EBADMSG && rc != -ENOMEM) || !why.text[0])
			abort();
		for (const char *c = why.text; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				abort();
	}
	if (rc == 0) {
		/* whatever decodes must encode back to the same bytes */
		uint8_t *buf;
		size_t len;
		if (idx_manifest_encode(&m, &buf, &len) != 0 || len != size)
			abort();
		for (size_t i = 0; i < len; i++)
			if (buf[i] != data[i])
				abort();
		free(buf);
	}
	idx_manifest_free(&m);
	return 0;
}
