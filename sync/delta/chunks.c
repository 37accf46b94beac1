/*
 * Chunk maps on the wire (CTL_CHUNKS, docs/protocol.md) and the copy of
 * unchanged ranges from a file's old version. The receiver tells the sender,
 * per planned file DST already has, which of its 4 MiB chunks to send and
 * how; the sender decodes that as peer input: every index must be one it
 * was asked for, every map arrive in order, whole and once.
 *
 * CTL_CHUNKS: u32 sender index, u32 first chunk, u32 count, count bytes of
 * CH_* (one per chunk), then a SYNC_BLOCK_REC for each CH_BLOCKS among them.
 */
#include <errno.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/io.h"
#include "common/wire.h"
#include "sync/archive/archive.h"
#include "sync/delta/delta.h"

void chunk_tag(const uint8_t key[SYNC_AKEY_LEN], uint64_t id, uint64_t off,
               const uint8_t hash[IDX_HASH_LEN], uint8_t tag[SYNC_TAG_LEN])
{
	/* the archive entry's MAC, over (id, off) where an entry has (index,
	 * size): an off with the kind bits is never an entry's size */
	sync_entry_tag(key, id, off, hash, tag);
}

void chunk_map_free(struct chunk_map *cm)
{
	free(cm->how);
	free(cm->blocks);
	memset(cm, 0, sizeof *cm);
}

const uint8_t *chunk_digest(const struct idx_entry *e, uint32_t k)
{
	return e->nchunks ? e->chunks + (size_t)k * IDX_HASH_LEN : e->hash;
}

uint64_t chunk_map_bytes(const struct chunk_map *cm, uint64_t size)
{
	if (!cm->how)
		return size;
	uint64_t n = 0;
	for (uint32_t k = 0; k < cm->n; k++) {
		uint64_t off = (uint64_t)k * IDX_CHUNK_SIZE;
		if (cm->how[k] != CH_HAVE)
			n += size - off < IDX_CHUNK_SIZE ? size - off : IDX_CHUNK_SIZE;
	}
	return n;
}

int chunks_send(struct ctl *c, uint32_t idx, const struct chunk_map *cm)
{
	size_t cap = 12 + SYNC_CHUNKS_PER_FRAME * (1 + (size_t)SYNC_BLOCK_REC);
	uint8_t *b = malloc(cap);
	if (!b)
		return -ENOMEM;
	int rc = 0;
	uint32_t rec = 0;   /* the next block record */
	for (uint32_t first = 0; first < cm->n && rc == 0; first += SYNC_CHUNKS_PER_FRAME) {
		uint32_t cnt = cm->n - first < SYNC_CHUNKS_PER_FRAME ? cm->n - first
		                                                     : SYNC_CHUNKS_PER_FRAME;
		put_u32(b, idx);
		put_u32(b + 4, first);
		put_u32(b + 8, cnt);
		memcpy(b + 12, cm->how + first, cnt);
		size_t len = 12 + cnt;
		for (uint32_t k = first; k < first + cnt; k++) {
			if (cm->how[k] != CH_BLOCKS)
				continue;
			memcpy(b + len, cm->blocks + (size_t)rec++ * SYNC_BLOCK_REC, SYNC_BLOCK_REC);
			len += SYNC_BLOCK_REC;
		}
		rc = ctl_send(c, CTL_CHUNKS, b, len);
	}
	free(b);
	return rc;
}

static int bad(const char **why, const char *what)
{
	*why = what;
	return -EPROTO;
}

/* The plan position of manifest index idx, or -1. */
static int64_t plan_pos(const uint32_t *plan, uint32_t nplan, uint32_t idx)
{
	uint32_t lo = 0, hi = nplan;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (plan[mid] == idx)
			return mid;
		if (plan[mid] < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Grow cm for cnt more chunks, nrec more block records. 0 or -ENOMEM. */
static int map_room(struct chunk_map *cm, uint32_t nrec)
{
	if (!cm->how && !(cm->how = malloc(cm->n)))
		return -ENOMEM;
	if (!nrec)
		return 0;
	uint8_t *nb = realloc(cm->blocks, (size_t)(cm->nblocks + nrec) * SYNC_BLOCK_REC);
	if (!nb)
		return -ENOMEM;
	cm->blocks = nb;
	return 0;
}

int chunks_decode(const uint8_t *b, size_t n, const struct idx_manifest *m,
                  const uint32_t *plan, uint32_t nplan, struct chunk_map *maps,
                  const char **why)
{
	if (n < 12)
		return bad(why, "is shorter than its header");
	uint32_t idx = get_u32(b), first = get_u32(b + 4), cnt = get_u32(b + 8);
	int64_t pos = plan_pos(plan, nplan, idx);
	if (pos < 0)
		return bad(why, "names a file that was not planned");
	const struct idx_entry *e = &m->e[idx];
	struct chunk_map *cm = &maps[pos];
	uint32_t total = chunk_count(e->size);
	if (e->size < SYNC_SMALL)
		return bad(why, "names a small file (those come whole, in the archive)");
	if (cm->n && cm->filled == cm->n)
		return bad(why, "describes a file twice");
	if (first != cm->filled)
		return bad(why, "skips or repeats chunks of a file");
	if (cnt == 0 || cnt > SYNC_CHUNKS_PER_FRAME || cnt > total - first)
		return bad(why, "has a chunk count out of range");
	if (n < 12 + (size_t)cnt)
		return bad(why, "is shorter than its chunk list");
	uint32_t nrec = 0;
	for (uint32_t k = 0; k < cnt; k++) {
		if (b[12 + k] >= CH_KINDS)
			return bad(why, "has an unknown chunk kind");
		nrec += b[12 + k] == CH_BLOCKS;
	}
	if (n != 12 + (size_t)cnt + (size_t)nrec * SYNC_BLOCK_REC)
		return bad(why, "has a length that does not match its chunk list");
	const uint8_t *rec = b + 12 + cnt;
	for (uint32_t k = 0; k < cnt; k++) {
		if (b[12 + k] != CH_BLOCKS)
			continue;
		uint32_t nb = nblocks(chunk_len(e->size, first + k));
		if (nb < 64 && (get_u64(rec) >> nb))
			return bad(why, "has blocks past the end of a chunk");
		rec += SYNC_BLOCK_REC;
	}
	cm->n = total;
	if (map_room(cm, nrec) < 0)
		return -ENOMEM;
	memcpy(cm->how + first, b + 12, cnt);
	if (nrec)   /* (blocks is NULL until the first record) */
		memcpy(cm->blocks + (size_t)cm->nblocks * SYNC_BLOCK_REC, b + 12 + cnt,
		       (size_t)nrec * SYNC_BLOCK_REC);
	cm->nblocks += nrec;
	cm->filled += cnt;
	return 0;
}

int chunks_complete(const struct chunk_map *maps, uint32_t nplan, const char **why)
{
	for (uint32_t k = 0; k < nplan; k++)
		if (maps[k].n && maps[k].filled != maps[k].n)
			return bad(why, "ended with a file's chunk list half given");
	return 0;
}

/* The last resort: through a buffer. */
static int copy_rw(int in, int out, uint64_t off, uint64_t len)
{
	enum { BUF = 1 << 20 };
	uint8_t *buf = malloc(BUF);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	while (len && rc == 0) {
		size_t want = len < BUF ? (size_t)len : BUF;
		ssize_t got = pread(in, buf, want, (off_t)off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			rc = got < 0 ? -errno : -ENODATA;   /* shorter than it said */
			break;
		}
		rc = io_pwrite_full(out, buf, (size_t)got, off);
		off += (uint64_t)got;
		len -= (uint64_t)got;
	}
	free(buf);
	return rc;
}

int copy_range(int in, int out, uint64_t off, uint64_t len)
{
	struct file_clone_range fcr = { .src_fd = in, .src_offset = off, .src_length = len,
	                                .dest_offset = off };
	if (ioctl(out, FICLONERANGE, &fcr) == 0)
		return 0;
	loff_t ioff = (loff_t)off, ooff = (loff_t)off;
	while (len) {
		ssize_t n = copy_file_range(in, &ioff, out, &ooff, (size_t)len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP ||
		              errno == EINVAL))
			return copy_rw(in, out, (uint64_t)ioff, len);
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;   /* the old file is shorter than its index says */
		len -= (uint64_t)n;
	}
	return 0;
}
