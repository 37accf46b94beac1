/* Fuzz target: CTL_CHUNKS payloads (the receiver's chunk lists, peer input)
 * as the sender decodes them (sync/delta/chunks.c), against a fixed file list
 * and plan. The input is a series of frames, each a u16 length and that
 * many bytes, then chunks_complete() as at CTL_CHUNKS_END. Whatever is
 * accepted must be a consistent map of a planned large file: in order,
 * never past the file's chunks, with one block record per CH_BLOCKS
 * chunk; every refusal says why. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "sync/delta/delta.h"
#include "tests/fuzz/fixed_manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct idx_manifest fm;

/* The map of a planned file, as far as it was given, holds together. */
static void check(const struct chunk_map *cm, const struct idx_entry *e)
{
	if (!cm->n)
		return;
	if (cm->n != chunk_count(e->size) || cm->filled > cm->n || !cm->how)
		abort();
	uint32_t nb = 0;
	for (uint32_t k = 0; k < cm->filled; k++) {
		if (cm->how[k] >= CH_KINDS)
			abort();
		nb += cm->how[k] == CH_BLOCKS;
	}
	if (nb != cm->nblocks)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fm.n) {
		fm_add(&fm, "", IDX_DIR, 0);
		fm_add(&fm, "big", IDX_REG, 9u << 20);     /* 3 chunks, the last short */
		fm_add(&fm, "small", IDX_REG, 100);        /* in the archive: no map */
		fm_add(&fm, "mid", IDX_REG, 100000);       /* one chunk */
		fm_add(&fm, "huge", IDX_REG, (uint64_t)70 << 30);   /* over one frame's chunks */
	}
	static const uint32_t plan[] = { 1, 2, 3, 4 };
	struct chunk_map maps[4] = { { 0 } };
	const char *why = NULL;
	int rc = 0;
	while (size >= 2 && rc == 0) {
		size_t n = get_u16(data);
		data += 2;
		size -= 2;
		n = n < size ? n : size;
		why = NULL;
		rc = chunks_decode(data, n, &fm, plan, 4, maps, &why);
		data += n;
		size -= n;
	}
	if (rc == 0)
		rc = chunks_complete(maps, 4, &why);
	if ((rc == -EPROTO && !why) || (rc < 0 && rc != -EPROTO && rc != -ENOMEM))
		abort();
	for (int k = 0; k < 4; k++) {
		check(&maps[k], &fm.e[plan[k]]);
		if (plan[k] == 2 && maps[k].n)
			abort();   /* a small file never has a map */
		chunk_map_free(&maps[k]);
	}
	return 0;
}
