/* Writes the seed corpus of fuzz_receiver (tests/fuzz/corpus/receiver/):
 * inputs in the format of receiver_input.h, each named after what it
 * plays, among them issue 36's item 1 (a file of 2^54 + 8 MiB, whose
 * 32-bit chunk count is 2, then chunk 100000 of it). The same program
 * writes the same bytes. Usage: seed_receiver OUTDIR. Build it by hand:
 *   cc -std=c11 -D_GNU_SOURCE -I. tests/fuzz/seed_receiver.c build/librdcp.a \
 *      $(pkg-config --libs libxxhash sqlite3 libarchive libsodium libibverbs \
 *      librdmacm libacl) -ldl -lpthread -o build/seed_receiver */
#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "tests/fuzz/receiver_input.h"

struct buf {
	uint8_t *b;
	size_t n, cap;
};

static void put(struct buf *o, const void *p, size_t n)
{
	if (o->n + n > o->cap) {
		o->cap = (o->n + n) * 2;
		if (!(o->b = realloc(o->b, o->cap)))
			exit(1);
	}
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

static void u8(struct buf *o, uint8_t v)
{
	put(o, &v, 1);
}

static void u64(struct buf *o, uint64_t v)
{
	uint8_t b[8];
	put_u64(b, v);
	put(o, b, 8);
}

/* An entry of a structured manifest: its size by table index, or raw. */
static void ent(struct buf *o, uint8_t type, uint64_t size, uint8_t fill)
{
	size_t k = 0;
	while (k < RI_NSIZES && ri_sizes[k] != size)
		k++;
	u8(o, type);
	u8(o, k < RI_NSIZES ? (uint8_t)k : RI_SIZE_RAW);
	u8(o, fill);
	if (k == RI_NSIZES)
		u64(o, size);
}

/* A data message: id, offset (kind in the top bits), len bytes of `how`. */
static void msg(struct buf *o, uint64_t id, uint64_t off, uint32_t len, uint8_t how)
{
	uint8_t b[4];
	u8(o, 0);
	u64(o, id);
	u64(o, off);
	put_u32(b, len);
	put(o, b, 4);
	u8(o, how);
}

/* A raw manifest section (RI_F_RAW): the n entries e encoded as a sender
 * would (with nohash_below), for inputs the structured form cannot make.
 * 0 or -1. */
static int raw_manifest(struct buf *o, const struct idx_entry *e, size_t n,
                        uint32_t nohash_below)
{
	struct idx_manifest m = { .nohash_below = nohash_below };
	uint8_t *enc, b[4];
	size_t len;
	for (size_t k = 0; k < n; k++)
		if (idx_manifest_add(&m, &e[k]) < 0)
			return -1;
	int rc = idx_manifest_encode(&m, &enc, &len);
	idx_manifest_free(&m);
	if (rc < 0)
		return -1;
	u8(o, RI_F_RAW);
	put_u32(b, (uint32_t)len);
	put(o, b, 4);
	put(o, enc, len);
	free(enc);
	return 0;
}

/* A message whose payload is the given bytes. */
static void msg_bytes(struct buf *o, uint64_t id, uint64_t off, const void *p, uint32_t len)
{
	msg(o, id, off, len, 1);
	put(o, p, len);
}

/* The archive as a sender makes it (sync/archive/pack.c: pax, entries named
 * "<index>.<tag>", the tag under the run's key, all zeros here), of files
 * that are all `fill`, cut into pieces of at most 4000 bytes. */
struct afile {
	uint32_t index;
	uint64_t size;
	uint8_t fill;
};

static la_ssize_t awrite(struct archive *a, void *ctx, const void *p, size_t n)
{
	(void)a;
	put(ctx, p, n);
	return (la_ssize_t)n;
}

static void archive(struct buf *o, const struct afile *fs, size_t n)
{
	struct buf t = { 0 };
	uint8_t key[SYNC_AKEY_LEN] = { 0 };
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_set_bytes_per_block(a, 0);
	archive_write_open2(a, &t, NULL, awrite, NULL, NULL);
	for (size_t i = 0; i < n; i++) {
		uint8_t *data = malloc(fs[i].size + 1), h[IDX_HASH_LEN], tag[SYNC_TAG_LEN];
		char name[16 + 2 * SYNC_TAG_LEN];
		memset(data, fs[i].fill, fs[i].size);
		idx_hash_buf(data, fs[i].size, h);
		sync_entry_tag(key, fs[i].index, fs[i].size, h, tag);
		int at = snprintf(name, sizeof name, "%u.", fs[i].index);
		for (int k = 0; k < SYNC_TAG_LEN; k++, at += 2)
			snprintf(name + at, 3, "%02x", tag[k]);
		struct archive_entry *e = archive_entry_new();
		archive_entry_set_pathname(e, name);
		archive_entry_set_filetype(e, AE_IFREG);
		archive_entry_set_perm(e, 0600);
		archive_entry_set_size(e, (la_int64_t)fs[i].size);
		archive_write_header(a, e);
		archive_write_data(a, data, fs[i].size);
		archive_write_finish_entry(a);
		archive_entry_free(e);
		free(data);
	}
	archive_write_close(a);
	archive_write_free(a);
	for (size_t off = 0; off < t.n; off += 4000) {
		size_t k = t.n - off < 4000 ? t.n - off : 4000;
		uint8_t b[2];
		u8(o, 0x80);
		put_u16(b, (uint16_t)k);
		put(o, b, 2);
		put(o, t.b + off, k);
	}
	free(t.b);
}

static const char *outdir;

static void save(struct buf *o, const char *name)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", outdir, name);
	FILE *f = fopen(p, "wb");
	if (!f || fwrite(o->b, 1, o->n, f) != o->n || fclose(f))
		exit(1);
	free(o->b);
	*o = (struct buf){ 0 };
}

#define MIB ((uint64_t)1 << 20)
#define CH IDX_CHUNK_SIZE
#define BIG_54 (((uint64_t)1 << 54) + 8 * MIB)

int main(int argc, char **argv)
{
	struct buf o = { 0 };
	if (argc != 2)
		return 2;
	outdir = argv[1];

	/* issue 36 item 1: a file of 2^54 + 8 MiB (a 32-bit chunk count of
	 * 2, seen[] of 2 bytes), then chunk 100000 of it, whole and right in
	 * length: take_chunk() wrote seen[100000] */
	u8(&o, 0);
	u8(&o, 1);
	ent(&o, RI_T_REG, BIG_54, 0);
	msg(&o, 2, 100000 * CH, (uint32_t)CH, 0);
	save(&o, "item1-chunk-count-wraps");

	/* its sibling: a size of exactly 2^60, a count of 0 (one chunk), its
	 * one chunk's digest that of 4 MiB of zeros: a 4 MiB file landed */
	u8(&o, 0);
	u8(&o, 1);
	ent(&o, RI_T_REG, (uint64_t)1 << 60, 0);
	msg(&o, 2, 0, (uint32_t)CH, 0);
	save(&o, "size-2p60-one-chunk");

	/* found by libFuzzer on this target: a size of 2^54 - 1 has 2^32
	 * chunks, a chunk map of 0 (chunk_count() wraps) when DST has an old
	 * file to reuse: nothing is asked for, and DST's 12 MiB file is
	 * replaced by an empty one that no hash checked */
	u8(&o, RI_F_DST);
	u8(&o, 1);
	ent(&o, RI_T_REG, ((uint64_t)1 << 54) - 1, 0);
	u8(&o, 1);
	u8(&o, 0), u8(&o, 9);
	save(&o, "dst-chunk-map-wraps");

	/* an ordinary run: a directory, files in and out of it, large ones
	 * in chunks (each once, one out of order), small ones in the archive,
	 * an empty one, a symlink */
	u8(&o, 0);
	u8(&o, 8);
	ent(&o, RI_T_DIR, 0, 0);                       /* a00 */
	ent(&o, RI_T_REG | RI_T_IN_DIR, 100000, 'm');  /* a00/b01, in chunks */
	ent(&o, RI_T_REG | RI_T_IN_DIR, 1, 'x');       /* a00/b02, archive */
	ent(&o, RI_T_REG, CH + 1, 0);                  /* a03: 2 chunks */
	ent(&o, RI_T_REG, 0, 0);                       /* a04: empty */
	ent(&o, RI_T_LNK, 0, 0);                       /* a05 */
	ent(&o, RI_T_REG, SYNC_SMALL - 1, 'y');        /* a06, archive */
	ent(&o, RI_T_REG, 2 * CH + 1, 'z');            /* a07: 3 chunks */
	/* sorted: "" a00 a00/b01 a00/b02 a03 a04 a05 a06 a07 (ids 1..9) */
	msg(&o, 3, 0, 100000, 'm');
	msg(&o, 5, CH, 1, 0);
	msg(&o, 5, 0, (uint32_t)CH, 0);
	msg(&o, 9, 2 * CH, 1, 'z');
	msg(&o, 9, 0, (uint32_t)CH, 'z');
	msg(&o, 9, CH, (uint32_t)CH, 'z');
	{
		const struct afile fs[] = { { 3, 1, 'x' }, { 7, SYNC_SMALL - 1, 'y' } };
		archive(&o, fs, 2);
	}
	save(&o, "plain-run");

	/* the same manifest in raw mode, for the mutator to work on bytes */
	{
		struct ri_entry ents[RI_MAX_ENTRIES];
		uint8_t desc[] = { 4, RI_T_DIR, 0, 0, RI_T_REG | RI_T_IN_DIR, 2, 'm',
		                   RI_T_REG, 7, 0, RI_T_LNK, 0, 0 };
		const uint8_t *p = desc;
		size_t left = sizeof desc, len;
		uint8_t *enc, b[4];
		size_t n = ri_entries(&p, &left, ents);
		if (ri_manifest(ents, n, (uint32_t)(SYNC_SMALL & ~(uint64_t)1023), &enc, &len) < 0)
			return 1;
		u8(&o, RI_F_RAW);
		put_u32(b, (uint32_t)len);
		put(&o, b, 4);
		put(&o, enc, len);
		free(enc);
		msg(&o, 3, 0, 100000, 'm');
		msg(&o, 4, 0, (uint32_t)CH, 0);
		msg(&o, 4, CH, 1, 0);
		save(&o, "raw-manifest");
	}

	/* a large file whose hash is not its chunk digests' (libFuzzer's find
	 * from raw-manifest): its chunks verify, and the receiver once landed
	 * it with that hash for DST's index; the decoder refuses it now */
	{
		uint8_t *zeros = calloc(1, CH), digests[2 * IDX_HASH_LEN];
		if (!zeros)
			return 1;
		idx_hash_buf(zeros, CH, digests);
		idx_hash_buf(zeros, 1, digests + IDX_HASH_LEN);
		struct idx_entry e[] = {
			{ .path = "", .type = IDX_DIR, .mode = 0755 },
			{ .path = "a", .type = IDX_REG, .size = CH + 1, .mode = 0644,
			  .nchunks = 2, .chunks = digests },
		};
		idx_hash_combine(digests, 2, e[1].hash);
		e[1].hash[0] ^= 1;
		if (raw_manifest(&o, e, 2, (uint32_t)(SYNC_SMALL & ~(uint64_t)1023)) < 0)
			return 1;
		msg(&o, 2, 0, (uint32_t)CH, 0);
		msg(&o, 2, CH, 1, 0);
		save(&o, "hash-not-chunks");
		free(zeros);
	}

	/* DST has an older file: 8 MiB of zeros where 12 MiB of zeros come
	 * (two chunks kept, one asked for: a chunk map, CTL_CHUNKS), and one
	 * of 4 MiB + 1 where 4 MiB + 1 of 'q' come (nothing to reuse: whole) */
	u8(&o, RI_F_DST);
	u8(&o, 2);
	ent(&o, RI_T_REG, 3 * CH, 0);                  /* a00, id 2 */
	ent(&o, RI_T_REG, CH + 1, 'q');                /* a01, id 3 */
	u8(&o, 2);
	u8(&o, 0), u8(&o, 8);                          /* a00: 2 chunks + 1 */
	u8(&o, 1), u8(&o, 7);                          /* a01: 4 MiB + 1 */
	msg(&o, 2, 2 * CH, (uint32_t)CH, 0);
	msg(&o, 2, 2 * CH, (uint32_t)CH, 0);           /* twice */
	save(&o, "dst-delta-repeat");

	/* the same as a fan-out host (--relay) and with --inplace: DST's old
	 * file written in place */
	u8(&o, RI_F_DST | RI_F_RELAY);
	u8(&o, 2);
	ent(&o, RI_T_REG, 3 * CH, 0);
	ent(&o, RI_T_REG, CH + 1, 'q');
	u8(&o, 1);
	u8(&o, 0), u8(&o, 8);
	msg(&o, 2, 2 * CH, (uint32_t)CH, 0);
	msg(&o, 3, 0, (uint32_t)CH, 'q');
	msg(&o, 3, CH, 1, 'q');
	save(&o, "relay");
	u8(&o, RI_F_DST | RI_F_INPLACE);
	u8(&o, 1);
	ent(&o, RI_T_REG, 3 * CH, 0);
	u8(&o, 1);
	u8(&o, 0), u8(&o, 8);
	msg(&o, 2, 2 * CH, (uint32_t)CH, 0);
	save(&o, "inplace");

	/* -S: a chunk of zeros as a sparse message (no blocks, a zero mask) */
	{
		uint8_t mask[8] = { 0 };
		u8(&o, RI_F_SPARSE);
		u8(&o, 1);
		ent(&o, RI_T_REG, 2 * CH + 1, 0);
		msg_bytes(&o, 2, ((uint64_t)SYNC_MSG_SPARSE << 62) | 0, mask, 8);
		msg_bytes(&o, 2, ((uint64_t)SYNC_MSG_SPARSE << 62) | CH, mask, 8);
		msg(&o, 2, 2 * CH, 1, 0);
		save(&o, "sparse");
	}

	/* every size of the table the decoder takes (up to 2^60) in one
	 * manifest (those with more digests than the builder writes are left
	 * out), and messages at the limits:
	 * ids 0, past the list, the archive's; offsets at the end, past it,
	 * off the chunk boundary, the mask's top; every kind; lengths 0 and
	 * one past the chunk */
	u8(&o, RI_F_DELETE | RI_F_SPARSE);
	u8(&o, (uint8_t)(RI_NSIZES - 2));
	for (size_t k = 0; k < RI_NSIZES - 2; k++)
		ent(&o, RI_T_REG, ri_sizes[k], 0);
	msg(&o, 0, 0, 0, 0);
	msg(&o, 1000, 0, 1, 0);
	msg(&o, UINT64_MAX, 0, 1, 0);
	msg(&o, 9, CH - 1, 1, 0);
	msg(&o, 9, 3 * CH, 1, 0);
	msg(&o, 9, SYNC_OFF_MASK, 1, 0);
	msg(&o, 9, (uint64_t)3 << 62, 1, 0);
	msg(&o, 9, 0, 0, 0);
	msg(&o, 9, 0, (uint32_t)CH + 1, 0);
	save(&o, "limits-all-sizes");

	/* the same sizes one at a time, each with a chunk at its last
	 * chunk-aligned offset and one at chunk 2^32 (where a 32-bit index
	 * wraps to 0) */
	for (size_t k = 0; k < RI_NSIZES; k++) {
		char name[64];
		uint64_t sz = ri_sizes[k];
		uint64_t last = sz ? (sz - 1) / CH * CH : 0;
		uint64_t len = sz - last < CH ? sz - last : CH;
		u8(&o, 0);
		u8(&o, 1);
		ent(&o, RI_T_REG, sz, 0);
		msg(&o, 2, last & SYNC_OFF_MASK, (uint32_t)len, 0);
		msg(&o, 2, ((uint64_t)1 << 32) * CH, (uint32_t)CH, 0);
		snprintf(name, sizeof name, "size-%02zu", k);
		save(&o, name);
	}

	/* a manifest the receiver must refuse between stages: an entry under
	 * a symlink (check_tree) */
	{
		struct idx_entry e[] = {
			{ .path = "", .type = IDX_DIR, .mode = 0755 },
			{ .path = "l", .type = IDX_LNK, .mode = 0777, .link = "/etc" },
			{ .path = "l/passwd", .type = IDX_REG, .size = 10, .mode = 0644,
			  .flags = IDX_F_NOHASH },
		};
		if (raw_manifest(&o, e, 3, 64 << 10) < 0)
			return 1;
		const struct afile fs[] = { { 2, 10, 'p' } };
		archive(&o, fs, 1);
		save(&o, "entry-under-symlink");
	}
	return 0;
}
