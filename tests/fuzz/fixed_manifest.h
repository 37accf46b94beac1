/* Shared by fuzz targets that check peer input against a fixed file list
 * (fuzz_chunks.c, fuzz_fanplan.c): entries added by path, type and size. */
#ifndef RDCP_TESTS_FUZZ_FIXED_MANIFEST_H
#define RDCP_TESTS_FUZZ_FIXED_MANIFEST_H

#include <stdlib.h>

#include "index/index.h"

static void fm_add(struct idx_manifest *m, const char *path, uint8_t type, uint64_t size)
{
	struct idx_entry e = { .path = (char *)path, .type = type, .size = size };
	if (idx_manifest_add(m, &e) < 0)
		abort();
}

#endif
