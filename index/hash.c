/* Content hash definition (docs/index.md) and file hashing helpers. */
#include <errno.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "index/idx_int.h"

void idx_hash_buf(const void *buf, size_t len, uint8_t out[IDX_HASH_LEN])
{
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits(buf, len));
	memcpy(out, c.digest, IDX_HASH_LEN);
}

void idx_hash_combine(const uint8_t *chunks, uint32_t n, uint8_t out[IDX_HASH_LEN])
{
	idx_hash_buf(chunks, (size_t)n * IDX_HASH_LEN, out);
}

uint32_t idx_nchunks(uint64_t size)
{
	if (size <= IDX_CHUNK_SIZE)
		return 0;
	return (uint32_t)((size + IDX_CHUNK_SIZE - 1) / IDX_CHUNK_SIZE);
}

int idx_hash_range(int fd, uint64_t off, uint64_t len, uint8_t *buf, size_t cap,
                   uint8_t out[IDX_HASH_LEN], uint64_t *got)
{
	XXH3_state_t st;
	XXH3_INITSTATE(&st);
	XXH3_128bits_reset(&st);
	uint64_t done = 0;
	while (done < len) {
		size_t want = len - done < cap ? (size_t)(len - done) : cap;
		ssize_t n = pread(fd, buf, want, (off_t)(off + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;   /* shrank under us: the caller sees *got < len */
		XXH3_128bits_update(&st, buf, (size_t)n);
		done += (uint64_t)n;
	}
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
	memcpy(out, c.digest, IDX_HASH_LEN);
	*got = done;
	return 0;
}
