/*
 * A ranked run's split files, the ranks' side (sync/ranks.c; the
 * receivers' is recv/split.c): before N ranks each send a range of a file
 * too large for one rank's share, its digests must be in every rank's
 * index of SRC, else each rank's scan would read the whole file to hash
 * it. So the ranks look at the files through their indexes (a scan of
 * those files that reads none: idx_scan_opts.lazy_all); where any rank
 * has no hash of one, each hashes its own range of it (or gives the
 * digests its index has), the ranks put theirs together (an allgather),
 * and each rank whose index lacked the row stores it (idx_save). A file
 * one rank saw at another size, time or inode, or that changed while a
 * rank read it, is not split: its directory's window sends it whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/io.h"
#include "common/log.h"
#include "index/index.h"
#include "sync/delta/delta.h"
#include "sync/ranks_int.h"

/* What a rank saw of a file (an allgather). */
struct look {
	uint8_t there, warm;   /* scanned; its hash from the index */
	uint64_t size, ino;
	int64_t mtime_ns, ctime_ns;
};

static int same_look(const struct look *a, const struct look *b)
{
	return a->there && b->there && a->size == b->size && a->ino == b->ino &&
	       a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

static int path_cmp(const void *a, const void *b)
{
	return strcmp(((const struct idx_root *)a)->path, ((const struct idx_root *)b)->path);
}

/* The digests of chunks [a, b) of path in SRC (root) into out, read now;
 * 0, or -1 when it is not as l saw it, before or after. */
static int hash_range(int root, const char *path, const struct look *l, uint32_t a, uint32_t b,
                      uint8_t *out, uint8_t *buf)
{
	struct stat st;
	int fd = root < 0 ? -1 : io_open_read(root, path);
	if (fd < 0)
		return -1;
	int rc = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == l->size &&
	         (uint64_t)st.st_ino == l->ino &&
	         fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0 ? 0 : -1;
	posix_fadvise(fd, (off_t)a * IDX_CHUNK_SIZE, (off_t)(b - a) * IDX_CHUNK_SIZE,
	              POSIX_FADV_SEQUENTIAL);
	for (uint32_t k = a; rc == 0 && k < b; k++) {
		uint64_t len = chunk_len(l->size, k);
		size_t got;
		if (io_pread_full(fd, buf, len, (uint64_t)k * IDX_CHUNK_SIZE, &got) < 0 || got != len)
			rc = -1;
		else
			idx_hash_buf(buf, len, out + (size_t)(k - a) * IDX_HASH_LEN);
	}
	/* and it did not change meanwhile */
	if (rc == 0 && (fstat(fd, &st) < 0 || (uint64_t)st.st_size != l->size ||
	                (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec != l->mtime_ns ||
	                (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec != l->ctime_ns))
		rc = -1;
	close(fd);
	return rc;
}

/* Every rank at once (m), before the ranks send their ranges of
 * the files in f (paths and sizes, as rank 0 listed them): each file's
 * digests into every rank's index of SRC (read a range a rank, where an
 * index had none); ok[i] 1 when f's file i may be split (every rank saw
 * it at one size, time and inode, and read its range so), the same on
 * every rank; mine[i] what this rank saw of it. 0, or -1 (out of memory,
 * MPI failed: the caller aborts). */
static int split_prepare(const struct rk_mpi *m, const struct sync_opts *o, struct wset *f, int *ok,
                         struct look *mine)
{
	size_t n = f->n, N = (size_t)m->size, me = (size_t)m->rank;
	struct idx_root *roots = calloc(n, sizeof *roots);
	struct look *all = calloc(n * N, sizeof *all);
	struct idx_manifest m0 = { 0 }, now = { 0 };
	struct idx_stats st;
	const struct idx_entry **e = calloc(n, sizeof *e);
	size_t *off = calloc(n + 1, sizeof *off);   /* each file's digests in a rank's share */
	uint8_t *hashed = calloc(n ? n : 1, 1);     /* some rank had no hash of it */
	uint8_t *dig = NULL, *alld = NULL, *buf = NULL;
	int rc = -1, root = -1;
	if (!roots || !all || !e || !off || !hashed)
		goto out;   /* (an allgather missed: the caller aborts every rank) */
	for (size_t i = 0; i < n; i++)
		roots[i] = (struct idx_root){ .path = f->w[i].dirs[0], .depth = 0 };
	qsort(roots, n, sizeof *roots, path_cmp);
	struct idx_scan_opts so = { .roots = roots, .nroots = n, .roots_optional = 1,
		                    .lazy_all = 1, .meta = sync_scan_meta(o->flags),
		                    .one_fs = o->one_fs };
	if (idx_scan(o->src, &so, &m0, &st) < 0)
		m0 = (struct idx_manifest){ 0 };   /* (said): nothing there, none split */
	for (size_t i = 0; i < n; i++) {
		e[i] = idx_manifest_find(&m0, f->w[i].dirs[0]);
		if (!e[i] || e[i]->type != IDX_REG || e[i]->size != f->w[i].entries)
			continue;
		mine[i] = (struct look){ .there = 1, .size = e[i]->size, .ino = e[i]->ino,
			                 .mtime_ns = e[i]->mtime_ns, .ctime_ns = e[i]->ctime_ns,
			                 .warm = !(e[i]->flags & IDX_F_NOHASH) &&
			                         e[i]->nchunks == chunk_count(e[i]->size) };
	}
	if (m->allgather(mine, n * sizeof *mine, all) < 0)
		goto out;
	/* each rank's share of the digests: its range of each file */
	uint32_t a, b;
	for (size_t i = 0; i < n; i++) {
		uint32_t nc = chunk_count(f->w[i].entries), per = (uint32_t)((nc + N - 1) / N);
		off[i + 1] = off[i] + 1 + (size_t)per * IDX_HASH_LEN;   /* a byte: got */
	}
	if (!(dig = calloc(off[n] ? off[n] : 1, 1)) || !(alld = malloc(N * (off[n] ? off[n] : 1))) ||
	    !(buf = malloc(IDX_CHUNK_SIZE)))
		goto out;
	root = open(o->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);   /* (-1: no range read) */
	for (size_t i = 0; i < n; i++) {
		int same = 1, warm = 1;
		for (size_t r = 0; r < N; r++) {
			same &= same_look(&all[r * n + i], &all[i]);
			warm &= all[r * n + i].warm;
		}
		ok[i] = same;
		hashed[i] = same && !warm;
		if (!hashed[i])
			continue;   /* not split; or every index has its digests */
		chunk_part(chunk_count(mine[i].size), (uint32_t)me, (uint32_t)N, &a, &b);
		uint8_t *d = dig + off[i];
		if (mine[i].warm)
			memcpy(d + 1, e[i]->chunks + (size_t)a * IDX_HASH_LEN, (size_t)(b - a) * IDX_HASH_LEN);
		d[0] = mine[i].warm || a == b ||
		       hash_range(root, f->w[i].dirs[0], &mine[i], a, b, d + 1, buf) == 0;
	}
	if (m->allgather(dig, off[n] ? off[n] : 1, alld) < 0)
		goto out;
	rc = 0;
	/* a file some rank could not read as every rank saw it is not split
	 * (every rank decides alike: from the same bytes) */
	for (size_t i = 0; i < n; i++)
		for (size_t r = 0; r < N && ok[i] && hashed[i]; r++)
			ok[i] = alld[r * off[n] + off[i]];
	/* every rank's digests together; stored where this index had none */
	int store = 0;
	for (size_t k = 0; k < m0.n; k++) {
		struct idx_entry c = m0.e[k];
		size_t i = 0;
		while (i < n && (e[i] != &m0.e[k] || !ok[i] || mine[i].warm))
			i++;
		uint8_t *chunks = NULL;
		if (i < n) {
			uint32_t nc = chunk_count(mine[i].size);
			if ((chunks = malloc((size_t)nc * IDX_HASH_LEN))) {
				for (size_t r = 0; r < N; r++) {
					chunk_part(nc, (uint32_t)r, (uint32_t)N, &a, &b);
					memcpy(chunks + (size_t)a * IDX_HASH_LEN, alld + r * off[n] + off[i] + 1,
					       (size_t)(b - a) * IDX_HASH_LEN);
				}
				c.chunks = chunks;
				c.nchunks = nc;
				idx_hash_combine(chunks, nc, c.hash);
				c.flags &= ~(uint32_t)IDX_F_NOHASH;
				store = store < 0 ? store : 1;
			} else {
				store = -1;   /* (its part run's scan then hashes it whole) */
			}
		}
		if (idx_manifest_add(&now, &c) < 0)
			store = -1;
		free(chunks);
	}
	if (store > 0 && idx_save(o->src, &so, &m0, &now) < 0)
		log_warn("%s: the split files' digests could not be stored in its index; each "
		         "rank hashes them whole", o->src);
out:
	if (root >= 0)
		close(root);
	idx_manifest_free(&m0);
	idx_manifest_free(&now);
	free(buf);
	free(alld);
	free(dig);
	free(off);
	free(hashed);
	free(e);
	free(all);
	free(roots);
	return rc;
}

/* A file of this size and more, larger than a rank's share of the big
 * files, is split: each rank sends a range of its chunks (rk_split_files()).
 * RDCP_TEST_SPLIT: the tests' small files. */
#define RK_SPLIT ((uint64_t)1 << 30)

static uint64_t split_min(void)
{
	const char *t = getenv("RDCP_TEST_SPLIT");
	long long v = t ? strtoll(t, NULL, 10) : 0;
	return v > 0 ? (uint64_t)v : RK_SPLIT;
}

/* Why files are not split under o (NULL: they may be): what writes DST's
 * file itself or reads every file, a run without an index (each rank's
 * scan would read the whole file), a hard link from --link-dest (no temp
 * to join), a source removed once its file landed. */
static const char *no_split(const struct sync_opts *o)
{
	if (o->flags & (SYNC_F_INPLACE | SYNC_F_APPEND | SYNC_F_APPEND_VERIFY | SYNC_F_SPARSE |
	                SYNC_F_CHECKSUM | SYNC_F_REMOVE_SOURCE))
		return "an option";
	return o->no_index ? "--no-index" : o->nlink_dest ? "--link-dest" : NULL;
}

/* The big files to split, out of k->big into k->split (every rank alike:
 * the same list). 0, or -ENOMEM. */
int rk_pick_split(struct ranked *k, const struct sync_opts *o)
{
	uint64_t total = 0, min = split_min();
	size_t n = k->big.n, nb = 0;
	for (size_t i = 0; i < n; i++)
		total += k->big.w[i].entries;
	k->split = (struct wset){ .w = malloc((n ? n : 1) * sizeof *k->split.w) };
	if (!k->split.w)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint64_t size = k->big.w[i].entries;
		if (k->m.size > 1 && !no_split(o) && size >= min && size > total / (uint64_t)k->m.size &&
		    chunk_count(size) >= 2)
			k->split.w[k->split.n++] = k->big.w[i];
		else
			k->big.w[nb++] = k->big.w[i];
	}
	k->big.n = nb;
	return 0;
}

/* The split files (collective: every rank calls it): their digests in
 * every rank's index (split.c), then each rank's range of each (a part
 * run, --ranked=part:K/N:JOB: its receiver writes that range into the
 * file's shared temp), and once every rank's part run ended with 0, the
 * joins (--ranked=join:JOB: file i is rank i mod N's): each temp lands.
 * A part that failed means no join: the files go whole in their
 * directories' windows, after the barrier. The exit code; counts and
 * failures in *res and *fails. */
int rk_split_files(struct ranked *k, const struct sync_opts *o, struct sync_result *res,
                       struct sync_fails **fails, struct sync_paths *as_read)
{
	size_t n = k->split.n, nf = 0;
	int N = k->m.size, me = k->m.rank, code = 0;
	int *ok = calloc(n, sizeof *ok);
	char **files = calloc(n, sizeof *files), arg[64];
	int32_t mine[2], *codes = calloc((size_t)N, sizeof mine);   /* code, still */
	struct look *look = calloc(n ? n : 1, sizeof *look);
	if (!ok || !files || !codes || !look || split_prepare(&k->m, o, &k->split, ok, look) < 0)
		k->m.abort(RD_EXIT_FILEIO);   /* (out of memory, or MPI failed: said) */
	uint32_t a, b;
	for (size_t i = 0; i < n; i++) {
		chunk_part(chunk_count(k->split.w[i].entries), (uint32_t)me, (uint32_t)N, &a, &b);
		if (ok[i] && a < b)
			files[nf++] = k->split.w[i].dirs[0];
	}
	if (nf) {
		snprintf(arg, sizeof arg, "part:%d/%d", me, N);
		code = rk_run_files(k, o, files, nf, arg, me + 1, res, fails, as_read);
	}
	const char *fail = getenv("RDCP_TEST_SPLIT_FAIL");   /* tests: this rank's parts fail */
	if (fail && atoi(fail) == me && !code) {
		log_err("(test) rank %d: its parts fail", me);
		code = RD_EXIT_PARTIAL;
	}
	/* and every split file as this rank first saw it: its part run's
	 * scan then took the digests all ranks put together (a file written
	 * meanwhile may have had its range sent as another version; the
	 * temp's name, from the file's hash, keeps the join from another's) */
	int32_t still = 1;
	int root = open(o->src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (size_t i = 0; i < n && still; i++) {
		struct stat st;
		struct look l = look[i];
		if (!ok[i])
			continue;
		if (root >= 0 && fstatat(root, k->split.w[i].dirs[0], &st, AT_SYMLINK_NOFOLLOW) == 0)
			l = (struct look){ .there = 1, .size = (uint64_t)st.st_size,
				           .ino = (uint64_t)st.st_ino,
				           .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 +
				                       st.st_mtim.tv_nsec,
				           .ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 +
				                       st.st_ctim.tv_nsec };
		else
			l.there = 0;
		still = same_look(&l, &look[i]);
	}
	if (root >= 0)
		close(root);
	mine[0] = code;
	mine[1] = still;
	if (k->m.allgather(mine, sizeof mine, codes) < 0)
		k->m.abort(RD_EXIT_PROTO);
	int bad = 0;
	while (bad < N && codes[2 * bad] == 0 && codes[2 * bad + 1])
		bad++;
	nf = 0;
	for (size_t i = 0; i < n; i++)
		if (ok[i] && (int)(i % (size_t)N) == me)
			files[nf++] = k->split.w[i].dirs[0];
	if (bad == N && nf) {
		struct sync_result jr = { 0 };
		struct sync_fails *jf = NULL;
		code = rk_worse(code, rk_run_files(k, o, files, nf, "join", -1, &jr, &jf, as_read));
		rk_merge_run(res, fails, &jr, jf);
	} else if (bad < N && me == 0 && codes[2 * bad]) {
		log_warn("split files: rank %d's parts ended with code %d; each goes whole in "
		         "its directory's window", bad, codes[2 * bad]);
	} else if (bad < N && me == 0) {
		log_warn("split files: one changed while rank %d sent its part; each goes whole "
		         "in its directory's window", bad);
	}
	free(look);
	free(codes);
	free(files);
	free(ok);
	return code;
}
