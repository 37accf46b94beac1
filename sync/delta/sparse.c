/*
 * -S, sparse files: 64 KiB blocks of zeros travel as a bit in a mask, not
 * as bytes, and are left as holes on the receiver (VM images: a 50 GiB
 * image with 2 GiB of data moves 2 GiB and allocates 2 GiB). A chunk the
 * sender's filesystem reports as a hole (SEEK_DATA) is not even read.
 *
 * A SYNC_MSG_SPARSE message: the chunk's non-zero blocks in order, then a
 * u64 mask of which blocks they are (bit b: block b, 64 KiB at b * 64 KiB
 * of the chunk, the last one shorter). The receiver verifies the chunk as
 * it would be with zeros in the other blocks, against the chunk's digest,
 * before it writes anything.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/io.h"
#include "common/wire.h"
#include "sync/delta/delta.h"

static const uint8_t zeros[SYNC_BLOCK_SIZE];

uint32_t sparse_pack(uint8_t *buf, uint32_t len)
{
	uint32_t n = nblocks(len), out = 0;
	uint64_t mask = 0;
	for (uint32_t b = 0; b < n; b++) {
		uint32_t bl = block_len(len, b);
		uint8_t *p = buf + (size_t)b * SYNC_BLOCK_SIZE;
		if (!memcmp(p, zeros, bl))
			continue;
		if (out != (size_t)b * SYNC_BLOCK_SIZE)
			memmove(buf + out, p, bl);   /* ascending: never over what is left */
		out += bl;
		mask |= UINT64_C(1) << b;
	}
	if (out == len)
		return 0;   /* no block of zeros: whole */
	put_u64(buf + out, mask);
	return out + 8;
}

int sparse_check(const void *data, uint32_t mlen, uint64_t len, uint64_t *mask)
{
	if (mlen < 8)
		return -1;
	uint32_t n = nblocks(len);
	uint64_t sum = 0;
	*mask = get_u64((const uint8_t *)data + mlen - 8);
	if (n < 64 && (*mask >> n))
		return -1;
	for (uint32_t b = 0; b < n; b++)
		if (*mask & (UINT64_C(1) << b))
			sum += block_len(len, b);
	return sum == (uint64_t)mlen - 8 ? 0 : -1;
}

void sparse_hash(const void *data, uint64_t len, uint64_t mask, uint8_t out[IDX_HASH_LEN])
{
	XXH3_state_t *st = XXH3_createState();
	const uint8_t *p = data;
	XXH3_128bits_reset(st);
	for (uint32_t b = 0; b < nblocks(len); b++) {
		uint32_t bl = block_len(len, b);
		if (mask & (UINT64_C(1) << b)) {
			XXH3_128bits_update(st, p, bl);
			p += bl;
		} else {
			XXH3_128bits_update(st, zeros, bl);
		}
	}
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
	memcpy(out, c.digest, IDX_HASH_LEN);
	XXH3_freeState(st);
}

int sparse_write(int fd, const void *data, uint64_t off, uint64_t len, uint64_t mask, int punch)
{
	const uint8_t *p = data;
	for (uint32_t b = 0; b < nblocks(len); b++) {
		uint32_t bl = block_len(len, b);
		uint64_t at = off + (uint64_t)b * SYNC_BLOCK_SIZE;
		int rc = 0;
		if (mask & (UINT64_C(1) << b)) {
			rc = io_pwrite_full(fd, p, bl, at);
			p += bl;
		} else if (punch && fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		                              (off_t)at, bl) < 0) {
			rc = io_pwrite_full(fd, zeros, bl, at);   /* no holes here: zeros */
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}
