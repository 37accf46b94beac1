/*
 * sync/delta/: what both sides agree on to send less than whole files:
 * chunk maps (CTL_CHUNKS) and their geometry, the block records of block
 * delta and the sender's packing of a chunk against one, -S's sparse
 * payloads, and the reflink copy of a range. Both the sending and the
 * receiving rooms include this; it includes neither.
 */
#ifndef RDCP_SYNC_DELTA_H
#define RDCP_SYNC_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "sync/sync_int.h"

/* chunks.c: chunk-level transfers (docs/protocol.md, CTL_CHUNKS).
 * For a changed file DST already has, the receiver compares its own chunk
 * digests (from its index) with the sender's and asks only for the chunks
 * that differ; the others come from the old file (the basis). */
enum {
	CH_HAVE = 0,     /* not sent: the receiver takes it from its basis */
	CH_WHOLE = 1,    /* sent whole */
	CH_BLOCKS = 2,   /* block digests follow: only the blocks that differ */
	CH_KINDS
};
#define SYNC_BLOCK_SIZE   ((uint32_t)64 << 10)
#define SYNC_CHUNK_BLOCKS ((uint32_t)(IDX_CHUNK_SIZE / SYNC_BLOCK_SIZE))   /* 64 */
/* A CH_BLOCKS chunk's record in CTL_CHUNKS: u64 mask of the blocks the
 * receiver has at that offset, then one u64 digest per block (XXH3-64). */
#define SYNC_BLOCK_REC    (8 + 8 * SYNC_CHUNK_BLOCKS)
/* Chunks described by one CTL_CHUNKS frame, at most (64 GiB of a file). */
#define SYNC_CHUNKS_PER_FRAME 16384u

/* Data messages: a chunk's offset carries its kind in the top two bits. */
#define SYNC_OFF_MASK   ((UINT64_C(1) << 62) - 1)
#define SYNC_MSG_KIND(off) ((unsigned)((off) >> 62))
enum {
	SYNC_MSG_WHOLE = 0,    /* the chunk's bytes */
	SYNC_MSG_BLOCKS = 1,   /* the blocks that differ, then their u64 mask:
	                          the rest is the receiver's basis */
	SYNC_MSG_SPARSE = 2,   /* the blocks that are not zeros, then their u64
	                          mask: the rest is zeros (-S: holes) */
	SYNC_MSG_ASREAD = 3,   /* the chunk's bytes as the sender read them, not
	                          the scan's, then their tag (chunk_tag()) */
};
/* The tag of an ASREAD chunk: keyed BLAKE2b-128 (the run's archive key) of
 * the message's id, its off with the kind bits, and the XXH3-128 of its
 * bytes. The receiver takes that digest for the chunk's instead of the
 * manifest's; no one on the data path can make one. (An archive entry's
 * tag, sync_entry_tag(), covers a size below 64 KiB where this has an off
 * of at least 3 << 62: neither passes for the other.) */
void chunk_tag(const uint8_t key[SYNC_AKEY_LEN], uint64_t id, uint64_t off,
               const uint8_t hash[IDX_HASH_LEN], uint8_t tag[SYNC_TAG_LEN]);

/* sparse.c: -S. pack: the read chunk buf of len bytes as a
 * SYNC_MSG_SPARSE payload in place (its non-zero 64 KiB blocks, then their
 * mask); its new length, or 0 when no block is zeros (send it whole).
 * check: a SPARSE payload of mlen bytes for a chunk of len bytes is well
 * formed (peer input): 0, or -1. hash: the chunk it stands for, with zeros
 * in the blocks not in mask. write: its blocks at off of fd; the others
 * are left alone (a fresh temp file: holes), or with punch (a file that
 * held data there) punched out, else written as zeros. 0 or -errno. */
uint32_t sparse_pack(uint8_t *buf, uint32_t len);
/* blocks.c, the sender: the read chunk buf of len bytes as a
 * SYNC_MSG_BLOCKS payload in place, given the receiver's block record rec
 * (its blocks that differ, then their mask); its new length, or 0 (buf
 * untouched) when it is better sent whole (frugal: only when every block
 * differs; the link is what costs, as under --append). */
uint32_t blocks_pack(uint8_t *buf, uint32_t len, const uint8_t *rec, int frugal);
int  sparse_check(const void *data, uint32_t mlen, uint64_t len, uint64_t *mask);
void sparse_hash(const void *data, uint64_t len, uint64_t mask, uint8_t out[IDX_HASH_LEN]);
int  sparse_write(int fd, const void *data, uint64_t off, uint64_t len, uint64_t mask, int punch);

/* One planned file's chunk map. how NULL: every chunk whole (no map sent). */
struct chunk_map {
	uint32_t n;          /* the sender's chunks (idx_nchunks(size)) */
	uint32_t filled;     /* decoded so far (the sender, frame by frame) */
	uint8_t *how;        /* CH_* per chunk */
	uint8_t *blocks;     /* SYNC_BLOCK_REC per CH_BLOCKS chunk, in order */
	uint32_t nblocks;
};
void chunk_map_free(struct chunk_map *cm);
/* Chunks of a file of size bytes (1 for 1..IDX_CHUNK_SIZE; idx_nchunks()
 * counts digests, 0 for one chunk). */
static inline uint32_t chunk_count(uint64_t size)
{
	return (uint32_t)((size + IDX_CHUNK_SIZE - 1) / IDX_CHUNK_SIZE);
}
/* The bytes of a file of size bytes that cm asks to be sent (--progress's
 * total): all of them without a map. */
uint64_t chunk_map_bytes(const struct chunk_map *cm, uint64_t size);
/* Digest of chunk k of e (e->hash for a file of one chunk). */
const uint8_t *chunk_digest(const struct idx_entry *e, uint32_t k);
/* The receiver: cm as CTL_CHUNKS frames for sender index idx. 0 or an error. */
int  chunks_send(struct ctl *c, uint32_t idx, const struct chunk_map *cm);
/* The sender: one CTL_CHUNKS payload (peer input) into maps[] (one per
 * plan position of plan[], which is increasing, for manifest m). 0, or
 * -EPROTO with *why (a phrase: "asks for ...") */
int  chunks_decode(const uint8_t *b, size_t n, const struct idx_manifest *m,
                   const uint32_t *plan, uint32_t nplan, struct chunk_map *maps,
                   const char **why);
/* The sender at CTL_CHUNKS_END: every map that was begun was finished.
 * 0 or -EPROTO with *why. */
int  chunks_complete(const struct chunk_map *maps, uint32_t nplan, const char **why);
/* Copy [off, off + len) of in to the same offset of out: a reflink
 * (FICLONERANGE) where the filesystem can, else copy_file_range(), else
 * read and write. 0 or -errno. */
int  copy_range(int in, int out, uint64_t off, uint64_t len);


/* A ranked run's split file of nchunks chunks (sync/ranks.c): part k of
 * n is chunks [*a, *b), empty when the file has fewer chunks than parts. */
static inline void chunk_part(uint32_t nchunks, uint32_t k, uint32_t n, uint32_t *a, uint32_t *b)
{
	uint64_t per = ((uint64_t)nchunks + n - 1) / n, lo = (uint64_t)k * per;
	*a = (uint32_t)(lo < nchunks ? lo : nchunks);
	*b = (uint32_t)(lo + per < nchunks ? lo + per : nchunks);
}

/* The geometry: chunk k of a file of size bytes, its length (0 past the
 * end); the 64 KiB blocks of a chunk of len bytes, their count and block
 * b's length. */
static inline uint64_t chunk_len(uint64_t size, uint32_t k)
{
	uint64_t off = (uint64_t)k * IDX_CHUNK_SIZE;
	return off >= size ? 0 : size - off < IDX_CHUNK_SIZE ? size - off : IDX_CHUNK_SIZE;
}
static inline uint32_t nblocks(uint64_t len)
{
	return (uint32_t)((len + SYNC_BLOCK_SIZE - 1) / SYNC_BLOCK_SIZE);
}
static inline uint32_t block_len(uint64_t len, uint32_t b)
{
	uint64_t off = (uint64_t)b * SYNC_BLOCK_SIZE;
	return (uint32_t)(len - off < SYNC_BLOCK_SIZE ? len - off : SYNC_BLOCK_SIZE);
}
/* blocks.c, the receiver's record of chunk k of e from its old file (have
 * bytes of it read into buf, rec SYNC_BLOCK_REC bytes): the blocks it has
 * whole at that offset and their digests. The mask. */
uint64_t blocks_rec(const struct idx_entry *e, uint32_t k, const uint8_t *buf, uint64_t have,
                    uint8_t *rec);

#endif
