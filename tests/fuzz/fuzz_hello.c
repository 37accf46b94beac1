/* Fuzz target: the sync HELLO a server decodes from its client. */
#include <stdint.h>
#include <stdlib.h>

#include "sync/wire/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hello h;
	if (hello_decode(data, size, &h) == 0) {
		if (!h.path || !*h.path || !h.addr || h.argc < 1 || h.argv[h.argc])
			abort();
		static struct sync_args a;   /* and what the server does with it */
		sync_args_init(&a);
		a.mode = SYNC_MODE_FAR;
		if (sync_args_parse(h.argc, h.argv, &a) < 0 && a.noperands < 0)
			abort();
		sync_opts_free(&a.o);
		hello_free(&h);
	}
	return 0;
}
