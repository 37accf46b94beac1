/*
 * Shared by fuzz_chunk.c and fuzz_unpack.c: a receiver (sync/recv/recv_int.h)
 * planned against a fixed manifest into a fresh temp directory, as if the
 * sender's file list had arrived and the plan had gone out; then the fuzz
 * input plays the sender's data. Afterwards the directory must hold only
 * entries of the manifest, and every regular file exactly its content
 * (only verified data lands, and only where the manifest says).
 *
 * The manifest (index: message id - 1; archive entry name = index):
 *   0 ""     root          4 "d/s" 100 x 'x'       7 "t"  3000 x 'y'
 *   1 "big"  4 MiB + 1000 zeros (2 chunks)         8 "x"  65536 zeros
 *   2 "d"    directory     5 "e"   empty           (large: in chunks)
 *   3 "d/m"  100000 zeros  6 "l"   symlink
 */
#ifndef RDCP_TESTS_FUZZ_RECV_FIXTURE_H
#define RDCP_TESTS_FUZZ_RECV_FIXTURE_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sync/recv/recv_int.h"

#define FX_BIG ((uint64_t)IDX_CHUNK_SIZE + 1000)

static struct idx_manifest fx_m;
static uint8_t *fx_zeros;   /* SYNC_MSG_SIZE zero bytes */
/* Each entry's digests as made: a chunk sent as read (SYNC_MSG_ASREAD)
 * replaces its digest in the receiver's manifest, which every run shares. */
static uint8_t (*fx_hash)[IDX_HASH_LEN], **fx_chunks;

static void fx_add(const char *path, uint8_t type, uint64_t size, int fill)
{
	struct idx_entry e = { .path = (char *)path, .type = type, .size = size,
	                       .mode = type == IDX_DIR ? 0755 : 0644,
	                       .mtime_ns = 1500000000000000000ll };
	uint8_t *chunks = NULL;
	if (type == IDX_LNK)
		e.link = "elsewhere";
	if (type == IDX_REG && size > IDX_CHUNK_SIZE) {
		e.nchunks = idx_nchunks(size);
		chunks = malloc((size_t)e.nchunks * IDX_HASH_LEN);
		for (uint32_t k = 0; k < e.nchunks; k++) {
			uint64_t off = (uint64_t)k * IDX_CHUNK_SIZE;
			uint64_t n = size - off < IDX_CHUNK_SIZE ? size - off : IDX_CHUNK_SIZE;
			idx_hash_buf(fx_zeros, n, chunks + k * IDX_HASH_LEN);
		}
		idx_hash_combine(chunks, e.nchunks, e.hash);
		e.chunks = chunks;
	} else if (type == IDX_REG) {
		uint8_t *b = malloc(size + 1);
		memset(b, fill, size);
		idx_hash_buf(b, size, e.hash);
		free(b);
	}
	if (idx_manifest_add(&fx_m, &e) < 0)
		abort();
	free(chunks);
}

static void fx_init(void)
{
	if (fx_zeros)
		return;
	fx_zeros = calloc(1, SYNC_MSG_SIZE);
	fx_add("", IDX_DIR, 0, 0);
	fx_add("big", IDX_REG, FX_BIG, 0);
	fx_add("d", IDX_DIR, 0, 0);
	fx_add("d/m", IDX_REG, 100000, 0);
	fx_add("d/s", IDX_REG, 100, 'x');
	fx_add("e", IDX_REG, 0, 0);
	fx_add("l", IDX_LNK, 0, 0);
	fx_add("t", IDX_REG, 3000, 'y');
	fx_add("x", IDX_REG, 65536, 0);
	fx_add("z", IDX_REG, 50, 'z');   /* without a hash, as a sender sends small files */
	fx_m.e[fx_m.n - 1].flags |= IDX_F_NOHASH;
	fx_m.nohash_below = 64 << 10;
	fx_hash = calloc(fx_m.n, sizeof *fx_hash);
	fx_chunks = calloc(fx_m.n, sizeof *fx_chunks);
	if (!fx_hash || !fx_chunks)
		abort();
	for (size_t i = 0; i < fx_m.n; i++) {
		const struct idx_entry *e = &fx_m.e[i];
		memcpy(fx_hash[i], e->hash, IDX_HASH_LEN);
		if (e->nchunks && !(fx_chunks[i] = malloc((size_t)e->nchunks * IDX_HASH_LEN)))
			abort();
		if (e->nchunks)
			memcpy(fx_chunks[i], e->chunks, (size_t)e->nchunks * IDX_HASH_LEN);
	}
}

/* The fixture's digests as made (a run may have replaced some). */
static void fx_restore(void)
{
	for (size_t i = 0; i < fx_m.n; i++) {
		struct idx_entry *e = &fx_m.e[i];
		memcpy(e->hash, fx_hash[i], IDX_HASH_LEN);
		if (e->nchunks)
			memcpy(e->chunks, fx_chunks[i], (size_t)e->nchunks * IDX_HASH_LEN);
	}
}

struct fixture {
	char dir[256];
	struct role r;
	struct sync_result res;
	struct rstate s;
};

/* A fresh directory and a receiver planned into it. */
static void fx_start(struct fixture *f)
{
	fx_init();
	fx_restore();
	memset(f, 0, sizeof *f);
	snprintf(f->dir, sizeof f->dir, "%s/rdcp-fuzz-XXXXXX",
	         getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(f->dir))
		abort();
	static struct sync_args args;   /* the defaults of a plain run */
	sync_args_init(&args);
	args.o.flags = SYNC_F_RECURSIVE;
	f->r.flags = SYNC_F_RECURSIVE;
	f->r.o = &args.o;
	f->s.r = &f->r;
	f->s.res = &f->res;
	f->s.dirc.fd = -1;
	f->s.umask = 022;
	f->s.sm = fx_m;   /* shared, never freed: the plan only reads it */
	pthread_mutex_init(&f->s.mu, NULL);
	f->s.root = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f->s.root < 0 || recv_plan(&f->s, &f->s.want, &f->s.nwant) < 0)
		abort();
}

static const char *fx_base;

/* Every entry must be one of the manifest's, of its type, with its content. */
static int fx_check_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)flag;
	(void)ftw;
	const char *rel = path + strlen(fx_base);
	if (*rel == '/')
		rel++;
	if (!*rel)
		return 0;
	const struct idx_entry *e = idx_manifest_find(&fx_m, rel);
	if (!e || (S_ISDIR(st->st_mode) != (e->type == IDX_DIR)))
		abort();   /* written where the manifest has nothing, or a temp left */
	if (S_ISREG(st->st_mode)) {
		if (e->type != IDX_REG || (uint64_t)st->st_size != e->size)
			abort();
		int fd = open(path, O_RDONLY);
		uint8_t h[IDX_HASH_LEN], *chunks = NULL;
		uint8_t *buf = malloc(IDX_CHUNK_SIZE);
		if (fd < 0 || !buf)
			abort();
		uint32_t n = e->nchunks ? e->nchunks : 1;
		chunks = malloc((size_t)n * IDX_HASH_LEN);
		for (uint32_t k = 0; k < n; k++) {
			ssize_t got = pread(fd, buf, IDX_CHUNK_SIZE, (off_t)k * (off_t)IDX_CHUNK_SIZE);
			if (got < 0)
				abort();
			idx_hash_buf(buf, (size_t)got, chunks + k * IDX_HASH_LEN);
		}
		if (e->nchunks)
			idx_hash_combine(chunks, n, h);
		else
			memcpy(h, chunks, IDX_HASH_LEN);
		/* content that was not verified (of a file whose hash came with
		 * its data, any: what the sender read is the truth) */
		if (!(e->flags & IDX_F_NOHASH) && memcmp(h, e->hash, IDX_HASH_LEN))
			abort();
		close(fd);
		free(buf);
		free(chunks);
	}
	return 0;
}

static int fx_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Check what landed, free the receiver, remove the directory. */
static void fx_end(struct fixture *f)
{
	struct rstate *s = &f->s;
	for (uint32_t k = 0; k < s->nfiles; k++) {
		if (s->files[k].fd >= 0 || s->files[k].dirfd >= 0)
			recv_drop_file(&s->files[k]);
		free(s->files[k].seen);
	}
	fx_base = f->dir;
	nftw(f->dir, fx_check_one, 16, FTW_PHYS);
	free(s->want);
	free(s->fetch);
	free(s->files);
	free(s->written);
	free(s->change);
	free(s->moved);
	free(s->mismatch);
	idx_diff_free(&s->diff);
	recv_dircache_free(&s->dirc);
	close(s->root);
	pthread_mutex_destroy(&s->mu);
	nftw(f->dir, fx_rm, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
