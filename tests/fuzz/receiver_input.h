/*
 * The input of fuzz_receiver.c, shared with its seed generator
 * (seed_receiver.c), which writes the stored corpus from it. One input is
 * one sender as the receiver meets it, stage after stage:
 *
 *   u8 flags           RI_F_*
 *   the manifest       RI_F_RAW: u32 length, that many bytes as sent.
 *                      Else u8 n (at most RI_MAX_ENTRIES), n entries of
 *                      u8 type (RI_T_* | RI_T_IN_DIR: inside the last
 *                      directory before it), u8 size (an index into
 *                      ri_sizes[], or RI_SIZE_RAW: a u64 follows), u8 fill
 *                      (every byte of its content); ri_manifest() makes
 *                      the encoded manifest a sender would send for them
 *                      (every digest right for that content, a huge file's
 *                      as an attacker would give them).
 *   DST's old files    RI_F_DST: u8 d (at most 8), d pairs of u8 entry
 *                      (of the decoded manifest, modulo its size), u8 size
 *                      (ri_sizes[] of at most RI_DST_MAX): zeros, there
 *                      before the run (chunk maps, CTL_CHUNKS, blocks)
 *   the data stream    until the input ends, at most RI_MAX_MSGS records:
 *                      u8 op < 0x80: one data message: u64 id, u64 off
 *                      (its kind in the top two bits), u32 len, u8 how
 *                      (0: len zero bytes, 1: the next len bytes of the
 *                      input, else len bytes of that value);
 *                      op >= 0x80: u16 len, then len bytes of the
 *                      small-file archive stream (unpacked at its end).
 */
#ifndef RDCP_TESTS_FUZZ_RECEIVER_INPUT_H
#define RDCP_TESTS_FUZZ_RECEIVER_INPUT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "sync/archive/archive.h"
#include "sync/delta/delta.h"
#include "sync/sync_int.h"

enum {
	RI_F_SPARSE = 1,     /* -S: sparse messages are taken */
	RI_F_WHOLE = 2,      /* -W: no chunk maps */
	RI_F_RAW = 4,        /* the manifest's bytes as they are */
	RI_F_DST = 8,        /* DST holds old files */
	RI_F_DELETE = 16,    /* --delete at the end */
	RI_F_CHECKSUM = 32,  /* -c: every hash in the manifest */
	RI_F_RELAY = 64,     /* a fan-out host (--relay): others' data passes */
	RI_F_INPLACE = 128,  /* --inplace: DST's old files written in place */
};

enum { RI_T_REG, RI_T_DIR, RI_T_LNK, RI_T_IN_DIR = 0x80 };

#define RI_MAX_ENTRIES 32
#define RI_MAX_MSGS    64
#define RI_SIZE_RAW    0xff
#define RI_DST_MAX     ((uint64_t)16 << 20)
#define RI_MAX_DIGESTS 4096   /* chunk digests the builder writes at most */

#define RI_MIB ((uint64_t)1 << 20)
/* File sizes at every limit of the format and the geometry. */
static const uint64_t ri_sizes[] = {
	0, 1, 100000, SYNC_SMALL - 1, SYNC_SMALL,
	IDX_CHUNK_SIZE - 1, IDX_CHUNK_SIZE, IDX_CHUNK_SIZE + 1, 2 * IDX_CHUNK_SIZE + 1,
	3 * IDX_CHUNK_SIZE,
	/* chunk counts around 2^32 (a 32-bit count wraps) */
	((uint64_t)1 << 54) - IDX_CHUNK_SIZE, ((uint64_t)1 << 54) - 1, (uint64_t)1 << 54,
	((uint64_t)1 << 54) + 1, ((uint64_t)1 << 54) + 8 * RI_MIB,
	((uint64_t)1 << 54) + 8 * RI_MIB + 1,
	/* the format's bound, and past it */
	(uint64_t)1 << 60, ((uint64_t)1 << 60) + 1, UINT64_MAX,
};
#define RI_NSIZES (sizeof ri_sizes / sizeof ri_sizes[0])

/* One entry of a structured manifest. */
struct ri_entry {
	char path[64];
	uint8_t type;
	uint64_t size;
	uint8_t fill;
};

static int ri_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ri_entry *)a)->path, ((const struct ri_entry *)b)->path);
}

/* Digest of chunk k (of len bytes) of a file that is all fill. buf: one
 * chunk of scratch, *buf_fill what it holds now (-1: not yet set). */
static void ri_chunk_digest(uint8_t *buf, int *buf_fill, uint8_t fill, uint64_t len,
                            uint8_t out[IDX_HASH_LEN])
{
	static uint8_t whole[256][IDX_HASH_LEN], known[256];   /* full chunks, by fill */
	if (len == IDX_CHUNK_SIZE && known[fill]) {
		memcpy(out, whole[fill], IDX_HASH_LEN);
		return;
	}
	if (len == IDX_CHUNK_SIZE)
		known[fill] = 1;
	if (*buf_fill != fill) {
		memset(buf, fill, IDX_CHUNK_SIZE);
		*buf_fill = fill;
	}
	idx_hash_buf(buf, (size_t)len, out);
	if (len == IDX_CHUNK_SIZE)
		memcpy(whole[fill], out, IDX_HASH_LEN);
}

/* The encoded manifest of the n entries at ents (sorted here, a root
 * added first); nohash_below as the sender sets it. An entry whose chunk
 * digests would be more than RI_MAX_DIGESTS is left out (the decoder's
 * length check is the raw mode's to meet). 0 or -1. */
/* A size the encoder refuses, and the stand-in it was encoded with. */
struct ri_big {
	uint64_t size, stand_in;
};

/* Write size over the big-endian stand-in in buf, where it occurs once
 * (else the entry keeps its stand-in: a harmless miss). */
static void ri_patch_size(uint8_t *buf, size_t len, uint64_t stand_in, uint64_t size)
{
	uint8_t pat[8], *at = NULL;
	for (int i = 0; i < 8; i++)
		pat[i] = (uint8_t)(stand_in >> (56 - 8 * i));
	for (size_t o = 0; o + 8 <= len; o++) {
		if (memcmp(buf + o, pat, 8))
			continue;
		if (at)
			return;   /* twice: not sure which */
		at = buf + o;
	}
	for (int i = 0; at && i < 8; i++)
		at[i] = (uint8_t)(size >> (56 - 8 * i));
}

static int ri_manifest(struct ri_entry *ents, size_t n, uint32_t nohash_below,
                       uint8_t **out, size_t *outlen)
{
	struct ri_big big[RI_MAX_ENTRIES];
	size_t nbig = 0;
	static uint8_t *buf;
	static int buf_fill = -1;
	struct idx_manifest m = { 0 };
	int rc = -1;
	if (!buf && !(buf = malloc(IDX_CHUNK_SIZE)))
		return -1;
	qsort(ents, n, sizeof *ents, ri_cmp);
	m.nohash_below = nohash_below;
	struct idx_entry root = { .path = "", .type = IDX_DIR, .mode = 0755,
	                          .mtime_ns = 1500000000000000000ll };
	if (idx_manifest_add(&m, &root) < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct ri_entry *r = &ents[i];
		struct idx_entry e = { .path = (char *)r->path, .type = r->type, .mode = 0644,
		                       .mtime_ns = 1500000000000000000ll + (int64_t)i };
		uint8_t *chunks = NULL;
		if (r->type == IDX_DIR)
			e.mode = 0755;
		if (r->type == IDX_LNK)
			e.link = "t";
		if (r->type == IDX_REG) {
			/* the encoder will not write a size over IDX_SIZE_MAX: such a
			 * file goes in under a stand-in of the same 32-bit (wrapped)
			 * chunk count, its size mod 2^54, and the real size is
			 * written over it after encoding, as a lying sender would */
			e.size = r->size > IDX_SIZE_MAX ? r->size & (((uint64_t)1 << 54) - 1)
			         : r->size;
			if (e.size > IDX_SIZE_MAX)   /* the top 4 MiB below 2^54: wraps to 0 */
				e.size -= IDX_SIZE_MAX;
			if (r->size > IDX_SIZE_MAX && nbig < RI_MAX_ENTRIES)
				big[nbig++] = (struct ri_big){ r->size, e.size };
			e.nchunks = idx_nchunks(e.size);
			if (e.nchunks > RI_MAX_DIGESTS)
				continue;
			uint32_t nd = e.nchunks ? e.nchunks : 1;
			if (!(chunks = malloc((size_t)nd * IDX_HASH_LEN)))
				goto out;
			for (uint32_t k = 0; k < nd; k++) {
				uint64_t off = (uint64_t)k * IDX_CHUNK_SIZE;
				uint64_t len = e.size - off < IDX_CHUNK_SIZE ? e.size - off
				               : IDX_CHUNK_SIZE;
				ri_chunk_digest(buf, &buf_fill, r->fill, len,
				                chunks + (size_t)k * IDX_HASH_LEN);
			}
			if (e.nchunks) {
				idx_hash_combine(chunks, e.nchunks, e.hash);
				e.chunks = chunks;
			} else {
				memcpy(e.hash, chunks, IDX_HASH_LEN);
			}
			if (e.size < nohash_below)
				e.flags |= IDX_F_NOHASH;
		}
		int added = idx_manifest_add(&m, &e);
		free(chunks);
		if (added < 0)
			goto out;
	}
	rc = idx_manifest_encode(&m, out, outlen) < 0 ? -1 : 0;
	for (size_t b = 0; rc == 0 && b < nbig; b++)
		ri_patch_size(*out, *outlen, big[b].stand_in, big[b].size);
out:
	idx_manifest_free(&m);
	return rc;
}

/* The entries of a structured manifest at *p (left bytes), advanced. */
static size_t ri_entries(const uint8_t **p, size_t *left, struct ri_entry *ents)
{
	size_t n = 0;
	if (*left < 1)
		return 0;
	size_t want = **p;
	(*p)++, (*left)--;
	const char *dir = NULL;
	for (size_t i = 0; i < want && n < RI_MAX_ENTRIES && *left >= 3; i++) {
		uint8_t t = (*p)[0], sz = (*p)[1], fill = (*p)[2];
		*p += 3, *left -= 3;
		uint64_t size = 0;
		if (sz == RI_SIZE_RAW && *left >= 8) {
			size = (uint64_t)(*p)[0] << 56 | (uint64_t)(*p)[1] << 48 |
			       (uint64_t)(*p)[2] << 40 | (uint64_t)(*p)[3] << 32 |
			       (uint64_t)(*p)[4] << 24 | (uint64_t)(*p)[5] << 16 |
			       (uint64_t)(*p)[6] << 8 | (*p)[7];
			*p += 8, *left -= 8;
		} else {
			size = ri_sizes[sz % RI_NSIZES];
		}
		struct ri_entry *e = &ents[n];
		unsigned kind = t & 3;
		e->type = kind == RI_T_DIR ? IDX_DIR : kind == RI_T_LNK ? IDX_LNK : IDX_REG;
		e->size = size;
		e->fill = fill;
		if ((t & RI_T_IN_DIR) && dir && strlen(dir) < 40)
			snprintf(e->path, sizeof e->path, "%.40s/b%02zu", dir, i);
		else
			snprintf(e->path, sizeof e->path, "a%02zu", i);
		if (e->type == IDX_DIR)
			dir = e->path;
		n++;
	}
	return n;
}

#endif
