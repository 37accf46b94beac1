/*
 * The tree walker. Directories are read with fdopendir() and their entries
 * stat'ed with fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW): no path is ever
 * resolved twice and no symlink is followed. Work is shared by a few threads:
 * a stack of open directories, and a queue of chunks of large files so that
 * one big file keeps every core hashing.
 *
 * The previous index is loaded on a thread of its own while the walk runs.
 * A regular file met before it is there waits, with its directory kept
 * open, until it is: then the file's hash is taken from the index or the
 * file is read, through the same directory descriptor.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "index/walk_int.h"

static char *join_path(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);
	if (!p)
		return NULL;
	if (a) {
		memcpy(p, dir, a);
		p[a++] = '/';
	}
	memcpy(p + a, name, b + 1);
	return p;
}

static int is_ready(struct walker *w)
{
	return __atomic_load_n(&w->ready, __ATOMIC_ACQUIRE);
}

static void wait_ready(struct walker *w)
{
	if (is_ready(w))
		return;
	pthread_mutex_lock(&w->mu);
	while (!w->ready)
		pthread_cond_wait(&w->ready_cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

/* The previous index is there: every walker may use it from now on. */
static void set_ready(struct walker *w, int load_rc)
{
	pthread_mutex_lock(&w->mu);
	if (load_rc < 0)
		w->nomem = 1;
	w->old = &w->prev->old;
	w->trust_before = w->prev->trust_before_ns;
	__atomic_store_n(&w->ready, 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&w->ready_cv);
	pthread_cond_broadcast(&w->cv);   /* owners of parked directories */
	pthread_mutex_unlock(&w->mu);
}

static void *loader_main(void *arg)
{
	struct walker *w = arg;
	const char *late = getenv("RDCP_TEST_INDEX_LATE");   /* tests: ms */
	if (late)
		usleep((useconds_t)atoi(late) * 1000);
	set_ready(w, w->prev->load(w->prev));
	return NULL;
}

static void walk_dir(struct worker *wk, int fd, const char *path, int depth);

static void push_dir(struct worker *wk, int fd, char *path, int depth)
{
	struct walker *w = wk->w;
	pthread_mutex_lock(&w->mu);
	if (w->nstack < STACK_MAX) {
		w->stack[w->nstack++] = (struct dirjob){ fd, path, depth };
		pthread_cond_signal(&w->cv);
		pthread_mutex_unlock(&w->mu);
		return;
	}
	pthread_mutex_unlock(&w->mu);
	walk_dir(wk, fd, path, depth);   /* enough queued: go depth-first ourselves */
	free(path);
}

/* The xattrs and ACLs of e (name in dfd). A failure is said and counted,
 * and e goes without them (got 0: the receiver leaves its own alone);
 * -ENOENT when e vanished (said and counted). */
static int read_extra(struct worker *wk, int dfd, const char *name, struct idx_entry *e)
{
	char shown[512];
	int rc = idx_read_extra(dfd, name, e, wk->w->meta);
	wk->st.extra_read++;
	if (rc == 0)
		return 0;
	if (rc == -ENOENT) {
		log_warn("%s: vanished during the scan", log_path(shown, sizeof shown, e->path));
		wk->st.vanished++;
		return rc;
	}
	wk->st.errors++;
	log_err("%s: cannot read its %s: %s", log_path(shown, sizeof shown, e->path),
	        wk->w->meta == IDX_SCAN_XATTRS ? "xattrs" : wk->w->meta == IDX_SCAN_ACLS
	        ? "ACLs" : "xattrs and ACLs",
	        rc == -E2BIG ? "over rdcp's bounds (64 KiB a value, 1 MiB an entry, 8191 "
	        "ACL entries)" : strerror(-rc));
	e->got = 0;
	return 0;
}

/* How one_entry() takes an entry: found in a directory being listed, a
 * root of opts->roots, or a directory above one (recorded only). */
enum { ENT_FOUND, ENT_ROOT, ENT_ABOVE };

/* Stat entry name of dfd into st; -1 (said, counted) when it cannot be:
 * vanished, unreadable, or a path asked for that is not there. */
static int stat_entry(struct worker *wk, int dfd, const char *name, const char *path,
                      int how, struct stat *st)
{
	char shown[512];
	if (fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) == 0)
		return 0;
	if (how != ENT_FOUND && errno == ENOENT && wk->w->roots_optional)
		return -1;
	if (how == ENT_FOUND && errno == ENOENT) {
		log_warn("%s: vanished during the scan", log_path(shown, sizeof shown, path));
		wk->st.vanished++;
		return -1;
	}
	if (how != ENT_FOUND)
		log_err("%s: %s (a path asked for)", log_path(shown, sizeof shown, path),
		        strerror(errno));
	else
		log_err("%s: cannot stat: %s", log_path(shown, sizeof shown, path), strerror(errno));
	wk->st.errors++;
	return -1;
}

/* What entry ei of wk's manifest holds: a directory to list (depth > 0),
 * a link's target, a file's hash (taken from old, the index's row, when
 * the file did not change). An entry that cannot be read is said,
 * counted and dropped again; a directory that cannot be opened stays
 * (its contents are the error). */
static void take_content(struct worker *wk, int dfd, const char *name, size_t ei,
                         int depth, const struct idx_entry *old)
{
	char shown[512];
	struct idx_entry *e = &wk->out.e[ei];
	int rc = 0;
	switch (e->type) {
	case IDX_DIR: {
		if (depth == 0)
			break;
		int cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (cfd < 0) {
			rc = -errno;
			break;
		}
		char *path = strdup(e->path);
		if (!path) {
			close(cfd);
			wk->w->nomem = 1;
			break;
		}
		push_dir(wk, cfd, path, depth);   /* (may walk it here: e is stale after) */
		return;
	}
	case IDX_LNK: {
		char buf[IDX_LINK_MAX + 1];
		ssize_t n = readlinkat(dfd, name, buf, sizeof buf);
		if (n < 0 || n > IDX_LINK_MAX) {
			rc = n < 0 ? -errno : -ENAMETOOLONG;
			break;
		}
		buf[n] = '\0';
		e->link = strdup(buf);
		if (!e->link)
			wk->w->nomem = 1;
		return;
	}
	case IDX_REG:
		if (e->size > IDX_SIZE_MAX) {   /* (a sparse file can claim that much) */
			rc = -EFBIG;
			break;
		}
		if (walk_reuse_hash(wk->w, e, old)) {
			wk->st.reused++;
			return;
		}
		/* not read: whoever needs it hashes it (once settled: below) */
		if (wk->w->lazy_all) {
			e->flags |= IDX_F_NOHASH;
			return;
		}
		if (e->size < wk->w->lazy_below &&
		    (wk->w->lazy_any ||
		     (e->ctime_ns < wk->w->settled_ns && e->dev == wk->w->root_dev))) {
			e->flags |= IDX_F_NOHASH;
			return;
		}
		rc = walk_hash_file(wk, dfd, name, ei);
		break;
	default:
		return;
	}
	if (rc == 0)
		return;
	if (rc == -ENOENT) {   /* gone since it was listed (renamed, deleted) */
		log_warn("%s: vanished during the scan", log_path(shown, sizeof shown, e->path));
		wk->st.vanished++;
	} else if (rc == -EFBIG) {
		log_err("%s: %llu bytes, over rdcp's limit of 16 PiB a file",
		        log_path(shown, sizeof shown, e->path), (unsigned long long)e->size);
		wk->st.errors++;
	} else {
		log_err("%s: %s", log_path(shown, sizeof shown, e->path), strerror(-rc));
		wk->st.errors++;
	}
	if (e->type != IDX_DIR)
		walk_drop_entry(wk, ei);   /* an unreadable file is not in the manifest */
}

/* Keep entry ei (a regular file) for when the previous index is there, in
 * *pk, the record of the directory being listed (made on first use). -1
 * when no more directories may be kept open: wait for the index instead. */
static int park(struct worker *wk, struct parked **pk, size_t ei)
{
	struct walker *w = wk->w;
	struct parked *p = *pk;
	if (!p) {
		pthread_mutex_lock(&w->mu);
		int room = w->nparked < w->park_max;
		w->nparked += room;
		pthread_mutex_unlock(&w->mu);
		if (!room)
			return -1;
		if (!(p = calloc(1, sizeof *p))) {
			pthread_mutex_lock(&w->mu);
			w->nparked--;
			pthread_mutex_unlock(&w->mu);
			return -1;
		}
		*pk = p;
	}
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 16;
		size_t *v = realloc(p->ent, cap * sizeof *v);
		if (!v)
			return -1;
		p->ent = v;
		p->cap = cap;
	}
	p->ent[p->n++] = ei;
	return 0;
}

/* Release p, a parked directory's record, and its descriptor. */
static void unpark(struct walker *w, struct parked *p)
{
	if (p->d)
		closedir(p->d);
	free(p->ent);
	free(p);
	pthread_mutex_lock(&w->mu);
	w->nparked--;
	pthread_cond_broadcast(&w->cv);   /* the last one lets idle walkers go */
	pthread_mutex_unlock(&w->mu);
}

/* The index is there: finish the files parked in p, then release it. */
static void drain(struct worker *wk, struct parked *p)
{
	struct walker *w = wk->w;
	int dfd = dirfd(p->d);
	for (size_t k = 0; k < p->n; k++) {
		size_t ei = p->ent[k];
		struct idx_entry *e = &wk->out.e[ei];
		const char *slash = strrchr(e->path, '/');
		const struct idx_entry *old = walk_unchanged(w, e);
		walk_reuse_extra(w, e, old);   /* (a scan that reads them never parks) */
		take_content(wk, dfd, slash ? slash + 1 : e->path, ei, 0, old);
	}
	unpark(w, p);
}

/* Record entry name of directory dfd (path dpath); a directory is listed
 * `depth` levels down (0: not at all). A regular file met before the
 * previous index is there is parked in *pk (NULL: it waits for it). */
static void one_entry(struct worker *wk, int dfd, const char *dpath, const char *name,
                      int depth, int how, struct parked **pk)
{
	struct walker *w = wk->w;
	struct stat st;
	char *path = join_path(dpath, name);
	if (!path) {
		w->nomem = 1;
		return;
	}
	if (stat_entry(wk, dfd, name, path, how, &st) < 0) {
		free(path);
		return;
	}
	if (how != ENT_ABOVE && w->skip && w->skip(path, S_ISDIR(st.st_mode), w->skip_ctx)) {
		free(path);   /* filtered out: not recorded, not descended */
		return;
	}
	if (S_ISDIR(st.st_mode) && w->one_fs && st.st_dev != w->root_dev) {
		if (w->one_fs > 1) {   /* -xx: mount points left out */
			free(path);
			return;
		}
		depth = 0;   /* -x: the mount point, empty (its own metadata), as rsync */
	}
	if (how == ENT_ABOVE)
		depth = 0;
	struct idx_entry *e = idx_manifest_push(&wk->out);
	if (!e) {
		w->nomem = 1;
		free(path);
		return;
	}
	e->path = path;   /* the entry's now */
	size_t ei = wk->out.n - 1;
	walk_fill_meta(e, &st);
	const struct idx_entry *old = NULL;
	int late = !is_ready(w);
	if (late && e->type == IDX_REG) {
		if (pk && park(wk, pk, ei) == 0)
			return;
		wait_ready(w);
		late = 0;
	}
	if (late) {
		/* (a scan that reads xattrs waits for the index before it starts) */
		__atomic_store_n(&w->late_extra, 1, __ATOMIC_RELAXED);
	} else {
		old = walk_unchanged(w, e);
		if (!walk_reuse_extra(w, e, old) && w->meta && read_extra(wk, dfd, name, e) < 0) {
			walk_drop_entry(wk, ei);   /* vanished */
			return;
		}
	}
	take_content(wk, dfd, name, ei, depth, old);
}

static void walk_dir(struct worker *wk, int fd, const char *path, int depth)
{
	char shown[512];
	DIR *d = fdopendir(fd);
	if (!d) {
		log_err("%s: cannot read directory: %s",
		        log_path(shown, sizeof shown, *path ? path : "."), strerror(errno));
		wk->st.errors++;
		close(fd);
		return;
	}
	struct parked *pk = NULL;
	struct dirent *de;
	errno = 0;
	while ((de = readdir(d))) {
		const char *n = de->d_name;
		if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')))
			continue;
		if (!*path && wk->w->only && strcmp(n, wk->w->only) != 0)
			continue;
		if (n[0] == '.' && idx_is_temp_name(n)) {
			wk->st.temps++;   /* debris of an interrupted sync */
			continue;
		}
		one_entry(wk, fd, path, n, depth < 0 ? -1 : depth - 1, ENT_FOUND, &pk);
		errno = 0;
	}
	if (errno) {
		log_err("%s: reading directory: %s",
		        log_path(shown, sizeof shown, *path ? path : "."), strerror(errno));
		wk->st.errors++;
	}
	if (!pk) {
		closedir(d);
		return;
	}
	pk->d = d;
	if (pk->n && !is_ready(wk->w)) {
		pk->next = wk->parked;   /* kept open for the index */
		wk->parked = pk;
	} else if (pk->n) {
		drain(wk, pk);   /* it came meanwhile: now, while the directory is hot */
	} else {
		unpark(wk->w, pk);
	}
}

/* opts->roots: each root, and the directories above it (recorded, not
 * listed, not filtered). A root's directories are queued for the threads.
 * Runs before the threads start. */
static void seed_roots(struct worker *wk, int root_fd, const struct idx_scan_opts *opts)
{
	char shown[512];
	for (size_t i = 0; i < opts->nroots; i++) {
		const struct idx_root *r = &opts->roots[i];
		char *p = strdup(r->path), *comp = p;
		int dfd = dup(root_fd);
		if (!p || dfd < 0) {
			wk->w->nomem = 1;
			free(p);
			if (dfd >= 0)
				close(dfd);
			return;
		}
		if (!*p) {   /* the root itself: recorded by the caller */
			char *top = strdup("");
			if (r->depth && top)
				push_dir(wk, dfd, top, r->depth);
			else {
				free(top);
				close(dfd);
			}
			free(p);
			continue;
		}
		for (char *slash; dfd >= 0 && (slash = strchr(comp, '/'));) {
			*slash = '\0';
			if (comp > p)
				comp[-1] = '\0';
			one_entry(wk, dfd, comp > p ? p : "", comp, 0, ENT_ABOVE, NULL);
			if (comp > p)
				comp[-1] = '/';
			int nfd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (nfd < 0 && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) &&
			    opts->roots_optional) {
				/* not there, or no longer a directory (a file, a
				 * symlink): nothing below it either */
			} else if (nfd < 0) {
				log_err("%s: %s (a directory above a path asked for)",
				        log_path(shown, sizeof shown, p), strerror(errno));
				wk->st.errors++;
			}
			close(dfd);
			dfd = nfd;
			*slash = '/';
			comp = slash + 1;
		}
		if (dfd >= 0) {
			if (comp > p)
				comp[-1] = '\0';
			one_entry(wk, dfd, comp > p ? p : "", comp, r->depth, ENT_ROOT, NULL);
			close(dfd);
		}
		free(p);
	}
}

static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	struct walker *w = wk->w;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		struct bigfile *b = w->bq_head;
		if (b) {
			/* Chunks first: they finish files and release descriptors. */
			uint32_t k = b->next_chunk++;
			if (b->next_chunk == b->nchunks) {
				w->bq_head = b->next;
				if (!w->bq_head)
					w->bq_tail = NULL;
			}
			w->active++;
			pthread_mutex_unlock(&w->mu);
			walk_hash_chunk(wk, b, k);
			pthread_mutex_lock(&w->mu);
			if (--b->left == 0) {
				walk_finish_big(b);
				w->nbig_open--;
			}
			w->active--;
			continue;
		}
		if (wk->parked && w->ready) {
			struct parked *p = wk->parked;
			wk->parked = NULL;
			w->active++;
			pthread_mutex_unlock(&w->mu);
			while (p) {
				struct parked *next = p->next;
				drain(wk, p);
				p = next;
			}
			pthread_mutex_lock(&w->mu);
			w->active--;
			continue;
		}
		if (w->nstack) {
			struct dirjob j = w->stack[--w->nstack];
			w->active++;
			pthread_mutex_unlock(&w->mu);
			walk_dir(wk, j.fd, j.path, j.depth);
			free(j.path);
			pthread_mutex_lock(&w->mu);
			w->active--;
			continue;
		}
		if (w->active == 0 && w->nparked == 0)
			break;   /* (parked files may still queue chunks) */
		pthread_cond_wait(&w->cv, &w->mu);
	}
	pthread_cond_broadcast(&w->cv);   /* wake the others: nothing is left */
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Move every worker's entries into out and set the hashes of large files. */
static int gather(struct walker *w, int threads, struct idx_manifest *out,
                  struct idx_stats *st)
{
	for (size_t i = 0; i < w->nbig; i++) {
		struct bigfile *b = w->big[i];
		struct idx_entry *e = &w->workers[b->worker].out.e[b->entry];
		e->chunks = b->chunks;
		e->nchunks = b->nchunks;
		idx_hash_combine(b->chunks, b->nchunks, e->hash);
		if (b->unstable)
			e->flags |= IDX_F_UNSTABLE;
		free(b);
	}
	w->nbig = 0;
	/* The largest worker's array becomes the manifest's, so only the
	 * other entries are copied (and its own, once, if it must grow: into
	 * a block huge pages can back). Each 4 KiB page touched for the first
	 * time costs more than the copy itself (docs/index.md, "Memory"). */
	int big = 0;
	size_t total = out->n;
	for (int t = 0; t < threads; t++) {
		total += w->workers[t].out.n;
		if (w->workers[t].out.n > w->workers[big].out.n)
			big = t;
	}
	struct idx_manifest *b = &w->workers[big].out;
	size_t head = out->n;   /* the roots, added before the walk: kept first */
	if (total > b->cap && idx_manifest_reserve(b, total) < 0)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < b->n; i++)   /* squeeze out its holes */
		if (b->e[i].path)
			b->e[n++] = b->e[i];
	if (n && head)
		memmove(b->e + head, b->e, n * sizeof *b->e);
	if (head)
		memcpy(b->e, out->e, head * sizeof *b->e);
	free(out->e);
	out->e = b->e;
	out->cap = b->cap;
	out->n = head + n;
	*b = (struct idx_manifest){ 0 };
	for (int t = 0; t < threads; t++) {
		struct worker *wk = &w->workers[t];
		for (size_t i = 0; i < wk->out.n; i++)
			if (wk->out.e[i].path)
				out->e[out->n++] = wk->out.e[i];
		free(wk->out.e);
		wk->out = (struct idx_manifest){ 0 };
		st->hashed += wk->st.hashed;
		st->hashed_bytes += wk->st.hashed_bytes;
		st->reused += wk->st.reused;
		st->extra_read += wk->st.extra_read;
		st->errors += wk->st.errors;
		st->vanished += wk->st.vanished;
		st->temps += wk->st.temps;
	}
	return 0;
}

/* Directories that may be kept open waiting for the index: what the
 * descriptor limit leaves beside the walk's own (STACK_MAX queued, large
 * files, one per level of a thread's own descent). */
static size_t park_room(void)
{
	const char *t = getenv("RDCP_TEST_PARK_MAX");   /* tests */
	if (t && *t)
		return (size_t)strtoul(t, NULL, 10);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (rl.rlim_cur == RLIM_INFINITY)
		return PARK_MAX;
	rlim_t room = rl.rlim_cur > 1024 ? (rl.rlim_cur - 512) / 2 : 0;
	return room < PARK_MAX ? (size_t)room : PARK_MAX;
}

/* Entries other than regular files recorded before the index was there
 * take their xattrs and ACLs from it now, as the walk would have
 * (out->e from first on: the walk's; out is not sorted yet). */
static void late_extras(struct walker *w, struct idx_manifest *out, size_t first)
{
	for (size_t i = first; i < out->n; i++) {
		struct idx_entry *e = &out->e[i];
		if (e->type != IDX_REG && !e->got)
			walk_reuse_extra(w, e, walk_unchanged(w, e));
	}
}

int idx_walk(int root_fd, struct idx_prev *prev, int threads,
             const struct idx_scan_opts *opts, struct idx_manifest *out,
             struct idx_stats *st)
{
	struct walker w = { .prev = prev, .only = opts->only, .skip = opts->skip,
	                    .skip_ctx = opts->skip_ctx,
	                    .meta = opts->meta, .want_got = idx_got_for(opts->meta) };
	int rc = 0, loader = 0;
	size_t first = out->n;
	pthread_t ltid;
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	pthread_cond_init(&w.ready_cv, NULL);
	w.stack = calloc(STACK_MAX, sizeof *w.stack);
	w.workers = calloc((size_t)threads, sizeof *w.workers);
	if (!w.stack || !w.workers) {
		rc = -ENOMEM;
		goto out;
	}
	/* The index loads while the walk runs, unless this scan reads xattrs
	 * (every entry would wait for it) or no directory may wait open. */
	w.park_max = park_room();
	if (!prev->load)
		set_ready(&w, 0);
	else if (opts->meta || !w.park_max || pthread_create(&ltid, NULL, loader_main, &w))
		set_ready(&w, prev->load(prev));
	else
		loader = 1;
	struct stat rst;
	if (fstat(root_fd, &rst) == 0)
		w.root_dev = rst.st_dev;
	w.one_fs = opts->one_fs;
	w.roots_optional = opts->roots_optional;
	w.trust_prefix = opts->trust_prefix;
	w.hint = opts->grown_hint;
	w.known = opts->no_index ? NULL : opts->known;   /* --no-index: nothing trusted */
	w.lazy_any = opts->lazy_any;
	w.lazy_all = opts->lazy_all;
	w.lazy_below = w.lazy_any || walk_stamps_locally(root_fd) ? opts->lazy_below : 0;
	struct timespec now;
	const char *settle = getenv("RDCP_TEST_SETTLED_S");   /* tests: seconds */
	int settle_s = settle ? atoi(settle) : IDX_SETTLED_S;
	clock_gettime(CLOCK_REALTIME_COARSE, &now);
	w.settled_ns = ((int64_t)now.tv_sec - (settle_s < 0 ? 0 : settle_s)) * 1000000000 +
	               now.tv_nsec;
	for (int t = 0; t < threads; t++) {
		w.workers[t].w = &w;
		w.workers[t].id = t;
		if (!(w.workers[t].buf = malloc(HASH_BUF)))
			rc = -ENOMEM;
	}
	if (rc == 0 && opts->roots) {
		seed_roots(&w.workers[0], root_fd, opts);   /* before any thread runs */
	} else if (rc == 0) {
		int dfd = dup(root_fd);
		char *top = strdup("");
		if (dfd < 0 || !top) {
			rc = dfd < 0 ? -errno : -ENOMEM;
			if (dfd >= 0)
				close(dfd);
			free(top);
		} else {
			w.stack[w.nstack++] = (struct dirjob){ dfd, top, -1 };
		}
	}
	int started = 0;
	for (int t = 0; t < threads && rc == 0; t++) {
		if (pthread_create(&w.workers[t].tid, NULL, worker_main, &w.workers[t]) != 0) {
			rc = -ENOMEM;
			break;
		}
		started++;
	}
	for (int t = 0; t < started; t++)
		pthread_join(w.workers[t].tid, NULL);
	if (loader)
		pthread_join(ltid, NULL);
	if (started == 0)
		for (size_t i = 0; i < w.nstack; i++) {
			close(w.stack[i].fd);
			free(w.stack[i].path);
		}
	if (started == 0)   /* (directories parked by an inline walk of the roots) */
		for (int t = 0; t < threads; t++)
			for (struct parked *p = w.workers[t].parked, *next; p; p = next) {
				next = p->next;
				unpark(&w, p);
			}
	if (rc == 0 && w.nomem)
		rc = -ENOMEM;
	if (rc == 0)
		rc = gather(&w, threads, out, st);
	if (rc == 0 && w.late_extra)
		late_extras(&w, out, first);
	for (int t = 0; t < threads; t++) {
		free(w.workers[t].buf);
		idx_manifest_free(&w.workers[t].out);
	}
out:
	if (rc && w.big)
		for (size_t i = 0; i < w.nbig; i++) {
			free(w.big[i]->chunks);
			free(w.big[i]);
		}
	free(w.big);
	free(w.stack);
	free(w.workers);
	pthread_cond_destroy(&w.cv);
	pthread_cond_destroy(&w.ready_cv);
	pthread_mutex_destroy(&w.mu);
	return rc;
}
