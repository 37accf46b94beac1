/* Fuzz target: the sync HELLO a server decodes from its client. */
#include <stdint.h>
#include <stdlib.h>

#include "sync/sync_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hello h;
	if (hello_decode(data, size, &h) == 0) {
		if (!h.path || !*h.path || h.nrules < 0 || (h.nrules && !h.rules))
			abort();
		for (int i = 0; i < h.nrules; i++)
			if (!h.rules[i].pattern || !*h.rules[i].pattern)
				abort();
		hello_free(&h);
	}
	return 0;
}
