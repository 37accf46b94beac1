/*
 * Block delta: finer than 4 MiB where it pays. For a changed chunk whose
 * range DST's old file has, the receiver sends a block record in CTL_CHUNKS:
 * which 64 KiB blocks it has there and their XXH3-64 digests (read from the
 * old file at plan time: the cost, one read of each changed chunk). The
 * sender hashes the blocks of the chunk it read and sends only those that
 * differ, then their mask (a SYNC_MSG_BLOCKS message), or the chunk whole
 * when most differ. The receiver rebuilds the chunk from those blocks and
 * its old file's, and writes it only if it matches the chunk digest: a
 * 4 KiB write costs about one block on the wire, not a chunk.
 *
 * Used for a file with at least one unchanged chunk, or of one chunk (a
 * file rewritten through is cheaper sent whole than read twice), not with
 * -W. Under --append it is the chunk that holds DST's old end: its blocks
 * up to there are compared, the rest sent, so a file that grew costs its
 * new bytes and one block, not the chunk again (--watch of a recording).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/io.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/recv_int.h"

/* A chunk goes whole when more than this share of its bytes differ. */
#define BLOCKS_MAX_SHARE 0.75

static uint64_t chunk_len(uint64_t size, uint32_t k)
{
	uint64_t off = (uint64_t)k * IDX_CHUNK_SIZE;
	return off >= size ? 0 : size - off < IDX_CHUNK_SIZE ? size - off : IDX_CHUNK_SIZE;
}

static uint32_t block_len(uint64_t len, uint32_t b)
{
	uint64_t off = (uint64_t)b * SYNC_BLOCK_SIZE;
	return (uint32_t)(len - off < SYNC_BLOCK_SIZE ? len - off : SYNC_BLOCK_SIZE);
}

static uint32_t nblocks(uint64_t len)
{
	return (uint32_t)((len + SYNC_BLOCK_SIZE - 1) / SYNC_BLOCK_SIZE);
}

/* The record of chunk k of e from the old file in (have bytes of it read
 * into buf): the blocks it has whole at that offset. Their mask. */
static uint64_t make_rec(const struct idx_entry *e, uint32_t k, const uint8_t *buf,
                         uint64_t have, uint8_t *rec)
{
	uint64_t len = chunk_len(e->size, k), mask = 0;
	memset(rec, 0, SYNC_BLOCK_REC);
	for (uint32_t b = 0; b < nblocks(len); b++) {
		uint64_t at = (uint64_t)b * SYNC_BLOCK_SIZE;
		uint32_t bl = block_len(len, b);
		if (at + bl > have)
			break;
		mask |= UINT64_C(1) << b;
		put_u64(rec + 8 + 8 * b, XXH3_64bits(buf + at, bl));
	}
	put_u64(rec, mask);
	return mask;
}

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
		    !make_rec(e, k, buf, (uint64_t)got, rec))
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

uint32_t blocks_pack(uint8_t *buf, uint32_t len, const uint8_t *rec, int frugal)
{
	uint64_t have = get_u64(rec), mask = 0, size = 0;
	for (uint32_t b = 0; b < nblocks(len); b++) {
		uint32_t bl = block_len(len, b);
		if ((have >> b & 1) &&
		    XXH3_64bits(buf + (size_t)b * SYNC_BLOCK_SIZE, bl) == get_u64(rec + 8 + 8 * b))
			continue;   /* the receiver has it */
		mask |= UINT64_C(1) << b;
		size += bl;
	}
	if (size > (frugal ? len - 1 : BLOCKS_MAX_SHARE * len))
		return 0;   /* whole: cheaper than the receiver's reads */
	uint32_t out = 0;
	for (uint32_t b = 0; b < nblocks(len); b++) {
		uint32_t bl = block_len(len, b);
		if (!(mask >> b & 1))
			continue;
		if (out != (size_t)b * SYNC_BLOCK_SIZE)   /* ascending: never over what is left */
			memmove(buf + out, buf + (size_t)b * SYNC_BLOCK_SIZE, bl);
		out += bl;
	}
	put_u64(buf + out, mask);
	return out + 8;
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
