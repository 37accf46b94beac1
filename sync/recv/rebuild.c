/*
 * Block delta, the receiver's side (delta/blocks.c has the records and the
 * sender's packing): at plan time, a record of 64 KiB block digests for
 * each changed chunk DST's old file has (CTL_CHUNKS); as a SYNC_MSG_BLOCKS
 * message comes, the chunk rebuilt from its blocks and the old file's,
 * then verified against the chunk digest like any other.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/recv/recv_int.h"

/* Scratch space for one chunk (the main thread's). */
static uint8_t *scratch(struct rstate *s)
{
	if (!s->scratch)
		s->scratch = malloc(IDX_CHUNK_SIZE);
	return s->scratch;
}

int recv_blocks_plan(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	const struct idx_entry *d = f->basis;
	uint32_t have = 0;
	/* a fan-out (--relay): the blocks would be made against this host's old
	 * file, and every host of the chain gets the same message */
	if (!f->map.how || !d || f->intemp || (s->r->flags & SYNC_F_DRYRUN) || s->r->o->relay)
		return 0;
	for (uint32_t k = 0; k < f->map.n; k++)
		have += f->map.how[k] == CH_HAVE;
	if (!have && f->map.n != 1 && !(s->r->flags & SYNC_F_APPEND))
		return 0;
	uint8_t *buf = scratch(s);
	int in = buf ? recv_basis(s, e, f) : -1;
	if (!buf)
		return -ENOMEM;
	if (in < 0)
		return 0;   /* said; the file fails when it lands */
	for (uint32_t k = 0; k < f->map.n; k++) {
		uint64_t off = (uint64_t)k * IDX_CHUNK_SIZE;
		if (f->map.how[k] != CH_WHOLE || off >= d->size)
			continue;
		size_t got;
		uint8_t rec[SYNC_BLOCK_REC];
		if (io_pread_full(in, buf, chunk_len(d->size, k), off, &got) < 0 || got == 0 ||
		    !blocks_rec(e, k, buf, (uint64_t)got, rec))
			continue;
		uint8_t *nb = realloc(f->map.blocks, (size_t)(f->map.nblocks + 1) * SYNC_BLOCK_REC);
		if (!nb || (!f->bhave && !(f->bhave = calloc(f->map.n, sizeof *f->bhave)))) {
			if (nb)
				f->map.blocks = nb;
			return -ENOMEM;
		}
		f->map.blocks = nb;
		memcpy(nb + (size_t)f->map.nblocks++ * SYNC_BLOCK_REC, rec, SYNC_BLOCK_REC);
		f->map.how[k] = CH_BLOCKS;
		f->bhave[k] = get_u64(rec);
	}
	return 0;
}

int recv_blocks_chunk(struct rstate *s, struct rfile *f, const struct idx_entry *e,
                      uint32_t k, const struct tp_msg *m, uint64_t mask, uint8_t **chunk)
{
	uint64_t off = (uint64_t)k * IDX_CHUNK_SIZE, len = chunk_len(e->size, k);
	uint8_t *buf = scratch(s);
	const uint8_t *p = m->data;
	/* in place, the old blocks are in the file being written (checked when
	 * it was opened; our own writes change it since) */
	int in = !buf ? -1 : f->inplace && f->fd >= 0 ? f->fd : recv_basis(s, e, f);
	if (in < 0)
		return buf ? -1 : -ENOMEM;
	for (uint32_t b = 0; b < nblocks(len); b++) {
		uint64_t at = (uint64_t)b * SYNC_BLOCK_SIZE;
		uint32_t bl = block_len(len, b);
		if (mask >> b & 1) {
			memcpy(buf + at, p, bl);
			p += bl;
		} else {
			size_t got;
			int rc = io_pread_full(in, buf + at, bl, off + at, &got);
			if (rc < 0 || got != bl) {
				recv_fail(s, e->path, "cannot read its unchanged blocks from the old "
				          "file", rc < 0 ? -rc : EIO);
				return -1;
			}
		}
	}
	STAT_ADD(s->res->matched, len - (m->len - 8));
	*chunk = buf;
	return 0;
}
