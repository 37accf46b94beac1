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

#include "common/log.h"
#include "common/wire.h"
#include "sync/delta/delta.h"

/* A chunk goes whole when more than this share of its bytes differ. */
#define BLOCKS_MAX_SHARE 0.75

uint64_t blocks_rec(const struct idx_entry *e, uint32_t k, const uint8_t *buf, uint64_t have,
                    uint8_t *rec)
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

