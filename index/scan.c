/* idx_scan(): open the index, walk the tree, bring the index up to date. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "index/idx_int.h"

static int64_t now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The default index of root, or of root's entry `only` when only it is
 * scanned (a different tree: its paths start with only/), into *out; NULL
 * when the cache directory cannot be used. 0 or -ENOMEM. */
static int default_path_for(const char *root, const char *only, char **out)
{
	char *real = realpath(root, NULL), *key = NULL;
	int rc = -ENOMEM;
	*out = NULL;
	if (real && !only) {
		const char *name = strrchr(real, '/');
		rc = idx_cache_file(real, name[1] ? name + 1 : "root", out);
	} else if (real && asprintf(&key, "%s//%s", real, only) >= 0) {
		rc = idx_cache_file(key, only, out);
		free(key);
	}
	free(real);
	return rc;
}

char *idx_default_path(const char *root)
{
	char *out;
	return default_path_for(root, NULL, &out) == 0 ? out : NULL;
}

/* What the index records as its tree: the real path, plus //only. */
static const char *key_of(const char *real, const char *only, char *buf, size_t cap)
{
	if (!only)
		return real;
	snprintf(buf, cap, "%s//%s", real, only);
	return buf;
}

int idx_db_open_tree(const char *root, const struct idx_scan_opts *opts, struct idx_db **db)
{
	char keybuf[8192];
	*db = NULL;
	if (opts->no_index)
		return 0;
	char *real = realpath(root, NULL), *dbpath = NULL;
	int rc = -ENOMEM;
	if (opts->index_path)
		dbpath = strdup(opts->index_path);
	else if (default_path_for(root, opts->only, &dbpath) == 0 && !dbpath)
		rc = 0;   /* no cache directory: said once already */
	if (real && dbpath)
		rc = idx_db_open(dbpath, key_of(real, opts->only, keybuf, sizeof keybuf), db);
	free(real);
	free(dbpath);
	return rc;
}

int idx_forget(const char *root, const struct idx_scan_opts *opts, const char *path)
{
	struct idx_db *db = NULL;
	int rc = idx_db_open_tree(root, opts, &db);
	if (rc == 0 && db)
		rc = idx_db_forget(db, path);
	idx_db_close(db);
	return rc;
}

int idx_note_get(const char *root, const struct idx_scan_opts *opts, const char *key,
                 char **val)
{
	struct idx_db *db = NULL;
	*val = NULL;
	int rc = idx_db_open_tree(root, opts, &db);
	if (rc == 0 && db)
		rc = idx_db_note_get(db, key, val);
	idx_db_close(db);
	return rc;
}

int idx_note_set(const char *root, const struct idx_scan_opts *opts, const char *key,
                 const char *val)
{
	struct idx_db *db = NULL;
	int rc = idx_db_open_tree(root, opts, &db);
	if (rc == 0 && db)
		rc = idx_db_note_set(db, key, val);
	idx_db_close(db);
	return rc;
}

int idx_save(const char *root, const struct idx_scan_opts *opts,
             const struct idx_manifest *prev, const struct idx_manifest *now)
{
	if (opts->no_index)
		return 0;
	/* Let the filesystem clock pass the newest change (one tick, a few ms):
	 * rows changed in the tick of the stamp would count as racy and be
	 * hashed again (see docs/index.md). */
	int64_t newest = 0;
	for (size_t i = 0; i < now->n; i++)
		if (now->e[i].ctime_ns > newest)
			newest = now->e[i].ctime_ns;
	for (int k = 0; k < 100 && now_ns(CLOCK_REALTIME_COARSE) <= newest; k++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	struct idx_db *db = NULL;
	int rc = idx_db_open_tree(root, opts, &db);
	if (rc == 0 && db)
		rc = idx_db_store(db, prev, now, opts->roots ? IDX_DB_KEPT_REST : 0,
		                  now_ns(CLOCK_REALTIME_COARSE));
	idx_db_close(db);
	return rc;
}

static int root_cmp(const void *a, const void *b)
{
	return strcmp(((const struct idx_root *)a)->path, ((const struct idx_root *)b)->path);
}

/* The depth of root `path` in the sorted roots (r, n), or -2 when it is
 * not one of them. */
static int root_depth(const struct idx_root *r, size_t n, const char *path)
{
	const struct idx_root *f = bsearch(&(struct idx_root){ .path = path }, r, n, sizeof *r,
	                                   root_cmp);
	return f ? f->depth : -2;
}

/* Whether a scan of the sorted roots (r, n) saw path, or would have: a
 * root, an entry of a root of depth 1, anything below one of depth -1. */
static int covered(const struct idx_root *r, size_t n, const char *path)
{
	if (root_depth(r, n, path) != -2)
		return 1;
	char up[IDX_PATH_MAX + 1];
	size_t len = strlen(path);
	if (len > IDX_PATH_MAX)
		return 0;
	memcpy(up, path, len + 1);
	for (int parent = 1;; parent = 0) {
		char *slash = strrchr(up, '/');
		if (slash)
			*slash = 0;
		else
			up[0] = 0;   /* the root: "" */
		int d = root_depth(r, n, up);
		if (d == -1 || (d == 1 && parent))
			return 1;
		if (!slash)
			return 0;
	}
}

/*
 * A scan of some roots brings up to date the rows of what it saw, and
 * only those: the previous rows it is compared with (into *view, entries
 * shared with old) are those of paths under a root, or that it recorded
 * (the directories above a root). The rest stay, except a row the last
 * scan could not vouch for (changed in or after its clock tick, which only
 * a later scan's check of it makes trustworthy): the new scan_ns would
 * vouch for it unchecked, so it goes too, and its file is hashed the next
 * time it is scanned, as it would have been. *kept: the rows that stay.
 */
static int partial_view(const struct idx_scan_opts *opts, const struct idx_prev *p,
                        const struct idx_manifest *out, struct idx_manifest *view,
                        uint64_t *kept)
{
	size_t n = 0;
	struct idx_root *r = malloc((opts->nroots ? opts->nroots : 1) * sizeof *r);
	uint8_t *in = malloc(p->old.n ? p->old.n : 1);
	if (!r || !in) {
		free(r);
		free(in);
		return -ENOMEM;
	}
	/* sorted, each path once with the widest of its depths */
	memcpy(r, opts->roots, opts->nroots * sizeof *r);
	qsort(r, opts->nroots, sizeof *r, root_cmp);
	for (size_t i = 0; i < opts->nroots; i++) {
		if (n && !strcmp(r[n - 1].path, r[i].path)) {
			int d = r[i].depth, w = r[n - 1].depth;
			r[n - 1].depth = d == -1 || w == -1 ? -1 : d > w ? d : w;
		} else {
			r[n++] = r[i];
		}
	}
	/* the racy test first: it is the cheap one */
	size_t nin = 0;
	for (size_t i = 0; i < p->old.n; i++) {
		const struct idx_entry *o = &p->old.e[i];
		in[i] = o->mtime_ns >= p->trust_before_ns || o->ctime_ns >= p->trust_before_ns ||
		        covered(r, n, o->path) || idx_manifest_find(out, o->path);
		nin += in[i];
	}
	free(r);
	int rc = idx_manifest_reserve(view, nin);
	for (size_t i = 0; rc == 0 && i < p->old.n; i++)
		if (in[i])
			view->e[view->n++] = p->old.e[i];
	free(in);
	*kept = (p->total > p->old.n ? p->total : p->old.n) - nin;
	return rc;
}

/* Many directories may be open at once while walking: use the hard limit. */
static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void count(struct idx_stats *st, const struct idx_manifest *m)
{
	for (size_t i = 0; i < m->n; i++) {
		const struct idx_entry *e = &m->e[i];
		st->entries++;
		switch (e->type) {
		case IDX_REG: st->files++; st->bytes += e->size; break;
		case IDX_DIR: st->dirs++; break;
		case IDX_LNK: st->symlinks++; break;
		default: st->other++; break;
		}
	}
}

/* The previous index of a scan, and where it is kept: opened and loaded
 * by the walker's loader thread (load_prev()), stored by the scan after. */
struct prev {
	struct idx_prev p;   /* first: the walker's view */
	const char *root, *real;
	const struct idx_scan_opts *opts;
	char *dbpath;
	struct idx_db *db;
};

/* Open the index of root (unless opts->no_index) into *db and load what it
 * holds into old. Only a lack of memory is an error: without a usable index
 * (*db stays NULL) the scan goes on and hashes every file. */
static int open_index(const char *root, const char *real, const struct idx_scan_opts *opts,
                      char **dbpath, struct idx_db **db, struct idx_manifest *old,
                      uint64_t *total, int64_t *last_scan)
{
	char keybuf[8192];
	if (opts->no_index)
		return 0;
	if (opts->index_path) {
		if (!(*dbpath = strdup(opts->index_path)))
			return -ENOMEM;
	} else {
		int rc = default_path_for(root, opts->only, dbpath);
		if (rc < 0 || !*dbpath)
			return rc;   /* no cache directory: said once already */
	}
	if (idx_db_open(*dbpath, key_of(real, opts->only, keybuf, sizeof keybuf), db) < 0) {
		log_warn("going on without an index: every file will be hashed");
		return 0;
	}
	if (idx_db_load(*db, old, last_scan, total, opts->roots, opts->nroots) < 0) {
		/* unreadable rows mid-way: start again from an empty index */
		if (idx_db_reset(*db, "damaged") < 0) {
			idx_db_close(*db);
			*db = NULL;
		}
	}
	return 0;
}

static int load_prev(struct idx_prev *p)
{
	struct prev *c = (struct prev *)p;
	return open_index(c->root, c->real, c->opts, &c->dbpath, &c->db, &p->old, &p->total,
	                  &p->trust_before_ns);
}

/* Threads to walk with: opts->threads, else one per CPU; 1..64. */
static int walk_threads(const struct idx_scan_opts *opts)
{
	int threads = opts->threads > 0 ? opts->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (threads < 1)
		threads = 1;
	if (threads > 64)
		threads = 64;
	return threads;
}

/* Add the root itself to out, as the directory with the empty path, with
 * its xattrs and ACLs when asked (a failure to read them is said and
 * counted; the root then goes without). */
static int add_root(struct idx_manifest *out, int fd, const struct stat *rst,
                    unsigned meta, const char *root, struct idx_stats *st)
{
	int rc = idx_manifest_add(out, &(struct idx_entry){ .path = "" });
	if (rc < 0)
		return rc;
	struct idx_entry *r = &out->e[out->n - 1];
	r->type = IDX_DIR;
	r->mode = rst->st_mode & 07777;
	r->uid = rst->st_uid;
	r->gid = rst->st_gid;
	r->mtime_ns = (int64_t)rst->st_mtim.tv_sec * 1000000000 + rst->st_mtim.tv_nsec;
	r->ctime_ns = (int64_t)rst->st_ctim.tv_sec * 1000000000 + rst->st_ctim.tv_nsec;
	r->dev = rst->st_dev;
	r->ino = rst->st_ino;
	r->nlink = (uint32_t)rst->st_nlink;
	if (meta)
		st->extra_read++;
	if (meta && (rc = idx_read_extra(fd, NULL, r, meta)) < 0) {
		log_err("%s: cannot read its xattrs or ACLs: %s", root, strerror(-rc));
		st->errors++;
		r->got = 0;
	}
	return rc == -ENOMEM ? rc : 0;
}

/* Drop entries recorded twice (sorted: they are neighbours), then link
 * the hard-link groups again by the new indices. */
static void dedupe(struct idx_manifest *m)
{
	if (idx_manifest_drop_dups(m))
		idx_manifest_sort(m);
}

int idx_scan(const char *root, const struct idx_scan_opts *opts,
             struct idx_manifest *out, struct idx_stats *st)
{
	struct prev pv = { .p.load = opts->no_index ? NULL : load_prev, .root = root,
	                   .opts = opts };
	char *real = NULL;
	int64_t t0 = now_ns(CLOCK_MONOTONIC);
	int rc;

	memset(st, 0, sizeof *st);
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		log_err("%s: %s", root, errno == ENOTDIR ? "not a directory" : strerror(errno));
		return rc;
	}
	struct stat rst;
	real = realpath(root, NULL);
	if (fstat(fd, &rst) < 0 || !real) {
		rc = -errno;
		log_err("%s: %s", root, strerror(errno));
		goto out;
	}
	raise_nofile();
	pv.real = real;
	/* The kernel stamps files with the coarse clock: a file written after
	 * this instant gets a timestamp >= it. */
	int64_t scan_start = now_ns(CLOCK_REALTIME_COARSE);
	st->stamp_ns = scan_start;
	int threads = walk_threads(opts);
	rc = add_root(out, fd, &rst, opts->meta, root, st);
	if (rc < 0)
		goto out;
	rc = idx_walk(fd, &pv.p, threads, opts, out, st);   /* loads the index meanwhile */
	if (rc < 0) {
		log_err("%s: scan failed: %s", root, strerror(-rc));
		goto out;
	}
	/* ours is held now, never removed from under us; and after the walk,
	 * which may be of a tree that holds the cache (a home directory) */
	if (pv.db && !opts->index_path)
		idx_cache_autoprune();
	idx_manifest_sort(out);
	if (opts->roots)
		dedupe(out);   /* a directory above several roots, a root twice */
	out->flags = idx_got_for(opts->meta);   /* IDX_MF_* are IDX_GOT_* */
	count(st, out);
	/* the index is written only after a complete walk: a failed scan leaves
	 * the previous index as it was; a scan of some roots writes only what
	 * it saw (partial_view()) */
	if (pv.db) {
		struct idx_manifest view = { 0 };
		uint64_t kept = 0;
		int src = opts->roots ? partial_view(opts, &pv.p, out, &view, &kept) : 0;
		if (src == 0)
			src = idx_db_store(pv.db, opts->roots ? &view : &pv.p.old, out, kept,
			                   scan_start);
		free(view.e);   /* the entries are old's */
		if (src < 0)
			log_warn("index %s was not updated; the next scan will hash more",
			         pv.dbpath);
		st->stored = src == 0;
	}
out:
	st->seconds = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
	idx_db_close(pv.db);
	idx_manifest_free(&pv.p.old);
	free(pv.dbpath);
	free(real);
	close(fd);
	if (rc < 0)
		idx_manifest_free(out);
	return rc;
}
