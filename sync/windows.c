/*
 * Windows: a large tree synced in rounds of whole directories, so that
 * neither end holds the whole tree's file list, plan and index rows at
 * once (rsync's incremental recursion does this by directory too). The
 * client lists SRC's directories depth first (a directory before those
 * below it; names only, getdents, no stat), cuts them into windows of
 * about SYNC_WINDOW entries, and sends each window as a round over the one
 * login: FILES with each directory as "dir/" ("/" for SRC itself), which
 * both scans take one level deep (--windows: idx_root depth 1, its
 * entries, not below). Each window is a whole run of its directories:
 * their entries created, sent, deleted (--delete), their metadata set;
 * its files that changed as they were read go again in rounds of their
 * own (client_retry()). A directory is made in its parent's window before
 * its own comes. Memory then follows the window, not the tree; a single
 * directory of more entries than a window is one window of its own.
 *
 * Not windowed (one round, as before): a tree that fits one window, -H
 * (a hard-link group crosses directories), --files-from, --max-delete (a
 * limit for the whole run), per-directory filter files (-F, dir-merge: a
 * bad one must fail the run before DST changes), several SRCs, SRC not a
 * directory's contents, pulling (the far side lists SRC). docs/sync.md,
 * "Windows".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "sync/client_int.h"
#include "sync/select/select.h"
#include "sync/wire/proto.h"

/* One directory being listed: its subdirectories, in name order, the next
 * to go into. */
struct frame {
	char *path;          /* "" for SRC itself (its own copy) */
	char **sub;          /* names */
	size_t nsub, next;
};

struct wplan {
	int root;            /* SRC, open */
	dev_t dev;           /* -x: SRC's filesystem */
	int one_fs;
	struct filter *filter;   /* SRC's --exclude rules, or NULL */
	size_t limit;        /* entries per window */
	struct frame *st;    /* the depth-first stack */
	size_t nst, capst;
	int started, done;
	/* the window being filled, then given out */
	char **w;
	size_t nw, capw;
	size_t entries;
	/* a directory listed but not yet in a window (it did not fit) */
	char *held;
	size_t held_n;
	unsigned number;     /* windows given out */
	/* a ranked run's rank 0 (client_windows_all()): regular files of at
	 * least big_min bytes (0: none looked at), which the ranks share by
	 * size, apart from their directories' windows */
	uint64_t big_min;
	struct wset *big;
	size_t capbig;
	int ro_dirs;   /* and a directory it listed lacks u+wx (0555) */
	/* a ranked run's (sync/ranks.c): this rank's windows, made by rank 0,
	 * given out in turn instead of listed */
	const struct wset *given;
	size_t gnext;
};

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *dir, const char *name)
{
	char *p;
	if (!*dir)
		return strdup(name);
	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* Is name (in dir, path its path) a directory to go into? */
static int descend(struct wplan *p, int dfd, const struct dirent *de, const char *path)
{
	struct stat st;
	if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
		return 0;
	if (de->d_type == DT_UNKNOWN || p->one_fs) {
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
			return 0;
		if (p->one_fs && st.st_dev != p->dev)
			return 0;   /* -x: recorded by its parent's scan, not entered */
	}
	return !p->filter || !sync_filter_skip(path, 1, p->filter);
}

/* A ranked run's rank 0: name (in dir, path its path) into p->big when
 * it is a regular file of at least p->big_min bytes that the filters
 * send. 0 or -ENOMEM. */
static int big_file(struct wplan *p, int dfd, const struct dirent *de, const char *path)
{
	struct stat st;
	if (de->d_type != DT_REG && de->d_type != DT_UNKNOWN)
		return 0;
	if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size < p->big_min)
		return 0;
	if (p->filter && sync_filter_skip(path, 0, p->filter))
		return 0;
	struct wset *b = p->big;
	if (b->n == p->capbig) {
		size_t c = p->capbig ? 2 * p->capbig : 16;
		struct wwin *g = realloc(b->w, c * sizeof *g);
		if (!g)
			return -ENOMEM;
		b->w = g;
		p->capbig = c;
	}
	struct wwin *w = &b->w[b->n];
	*w = (struct wwin){ .entries = (uint64_t)st.st_size, .number = (unsigned)b->n + 1 };
	if (!(w->dirs = malloc(sizeof *w->dirs)) || !(w->dirs[0] = strdup(path))) {
		free(w->dirs);
		return -ENOMEM;
	}
	w->ndirs = 1;
	b->n++;
	return 0;
}

/* List directory path: its entries counted into *n, its subdirectories
 * pushed as a frame. A directory that cannot be read is counted as one
 * entry and not entered: its window's scan says why. 0 or -ENOMEM. */
static int list_dir(struct wplan *p, const char *path, size_t *n)
{
	struct frame f = { .path = strdup(path) };
	*n = 1;
	if (!f.path)
		return -ENOMEM;
	int dfd = *path ? openat(p->root, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
	                : dup(p->root);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	struct stat st;
	if (!d && dfd >= 0)
		close(dfd);
	if (d && p->big_min && !p->ro_dirs && geteuid() != 0 && fstat(dfd, &st) == 0)
		p->ro_dirs = (st.st_mode & (S_IWUSR | S_IXUSR)) != (S_IWUSR | S_IXUSR);
	size_t cap = 0;
	for (struct dirent *de; d && (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		(*n)++;
		char *sp = join(path, de->d_name);
		if (!sp)
			goto nomem;
		if (p->big_min && big_file(p, dirfd(d), de, sp) < 0) {
			free(sp);
			goto nomem;
		}
		if (!descend(p, dirfd(d), de, sp)) {
			free(sp);
			continue;
		}
		free(sp);
		if (f.nsub == cap) {
			size_t c = cap ? 2 * cap : 16;
			char **g = realloc(f.sub, c * sizeof *g);
			if (!g)
				goto nomem;
			f.sub = g;
			cap = c;
		}
		if (!(f.sub[f.nsub] = strdup(de->d_name)))
			goto nomem;
		f.nsub++;
	}
	if (d)
		closedir(d);
	if (f.nsub)
		qsort(f.sub, f.nsub, sizeof *f.sub, name_cmp);
	if (p->nst == p->capst) {
		size_t c = p->capst ? 2 * p->capst : 16;
		struct frame *g = realloc(p->st, c * sizeof *g);
		if (!g) {
			d = NULL;
			goto nomem;
		}
		p->st = g;
		p->capst = c;
	}
	p->st[p->nst++] = f;
	return 0;
nomem:
	if (d)
		closedir(d);
	for (size_t i = 0; i < f.nsub; i++)
		free(f.sub[i]);
	free(f.sub);
	free(f.path);
	return -ENOMEM;
}

/* The next directory depth first, listed: *path (malloc'd, the window's)
 * and its entries in *n. 1, 0 when there is none, -ENOMEM. */
static int next_dir(struct wplan *p, char **path, size_t *n)
{
	if (!p->started) {
		p->started = 1;
		char *top = strdup("");
		if (!top)
			return -ENOMEM;
		*path = top;
		if (list_dir(p, top, n) < 0) {
			free(top);
			return -ENOMEM;
		}
		return 1;
	}
	while (p->nst) {
		struct frame *f = &p->st[p->nst - 1];
		if (f->next < f->nsub) {
			char *sp = join(f->path, f->sub[f->next]);
			free(f->sub[f->next]);
			f->next++;
			if (!sp)
				return -ENOMEM;
			if (list_dir(p, sp, n) < 0) {
				free(sp);
				return -ENOMEM;
			}
			*path = sp;
			return 1;
		}
		free(f->sub);
		free(f->path);
		p->nst--;
	}
	return 0;
}

/* path (malloc'd) into the window, its n entries counted; freed when it
 * cannot be. 0 or -ENOMEM. */
static int add_to_window(struct wplan *p, char *path, size_t n)
{
	if (p->nw == p->capw) {
		size_t c = p->capw ? 2 * p->capw : 64;
		char **g = realloc(p->w, c * sizeof *g);
		if (!g) {
			free(path);
			return -ENOMEM;
		}
		p->w = g;
		p->capw = c;
	}
	/* FILES' form: "dir/", "/" for SRC itself (sync/select/files.c) */
	size_t l = strlen(path);
	char *e = realloc(path, l + 2);
	if (!e) {
		free(path);
		return -ENOMEM;
	}
	e[l] = '/';
	e[l + 1] = '\0';
	p->w[p->nw++] = e;
	p->entries += n;
	return 0;
}

static void free_window(struct wplan *p)
{
	for (size_t i = 0; i < p->nw; i++)
		free(p->w[i]);
	p->nw = 0;
	p->entries = 0;
}

/* The next of the windows given: 1, 0 when none is left, -ENOMEM. */
static int fill_given(struct wplan *p)
{
	const struct wset *g = p->given;
	if (p->gnext >= g->n)
		return 0;
	const struct wwin *w = &g->w[p->gnext++];
	for (size_t i = 0; i < w->ndirs; i++) {
		size_t l = strlen(w->dirs[i]);   /* FILES' form already ("dir/") */
		char *d = strdup(w->dirs[i]);
		if (!d || l == 0)
			return free(d), -ENOMEM;
		d[l - 1] = '\0';   /* as listed; add_to_window() puts the '/' back */
		int rc = add_to_window(p, d, 0);
		if (rc < 0)
			return rc;
	}
	p->entries = w->entries;
	p->number = w->number;
	return p->nw > 0;
}

/* Fill the next window: directories until about p->limit entries (at
 * least one). 1: a window in p->w, 0: none left, -ENOMEM. */
static int fill(struct wplan *p)
{
	free_window(p);
	if (p->given)
		return fill_given(p);
	if (p->held) {
		int rc = add_to_window(p, p->held, p->held_n);
		p->held = NULL;
		if (rc < 0)
			return rc;
	}
	while (!p->done) {
		char *path;
		size_t n;
		int rc = next_dir(p, &path, &n);
		if (rc < 0)
			return rc;
		if (rc == 0) {
			p->done = 1;
			break;
		}
		if (p->nw && p->entries + n > p->limit) {
			p->held = path;   /* the next window's first */
			p->held_n = n;
			break;
		}
		if ((rc = add_to_window(p, path, n)) < 0)
			return rc;
	}
	if (p->nw)
		p->number++;
	return p->nw > 0;
}

int client_window_goes_on(uint32_t code)
{
	return code == RD_EXIT_OK || code == RD_EXIT_PARTIAL || code == RD_EXIT_VANISHED;
}

static size_t window_limit(void)
{
	/* RDCP_TEST_WINDOW: the tests' small windows (a few entries each) */
	const char *t = getenv("RDCP_TEST_WINDOW");
	long v = t ? strtol(t, NULL, 10) : 0;
	return v > 0 ? (size_t)v : SYNC_WINDOW;
}

void client_windows_free(struct wplan *p)
{
	if (!p)
		return;
	free_window(p);
	free(p->w);
	free(p->held);
	while (p->nst) {
		struct frame *f = &p->st[--p->nst];
		for (size_t i = f->next; i < f->nsub; i++)
			free(f->sub[i]);
		free(f->sub);
		free(f->path);
	}
	free(p->st);
	sync_filter_free(p->filter);
	if (p->root >= 0)
		close(p->root);
	free(p);
}

int client_windows_ok(const struct sync_opts *o, const struct role *r)
{
	for (int i = 0; i < o->nrules; i++)
		if (o->rules[i].kind == SYNC_R_DIRMERGE)
			return 0;   /* a bad filter file deep down must fail the run
			               before DST changes, as it does in one round */
	return r->retry && r->nsrc == 1 && (o->flags & SYNC_F_RECURSIVE) &&
	       !(o->flags & SYNC_F_HARDLINKS) && !o->files_from && o->max_delete < 0 &&
	       !o->watch;
}

int client_windows_open(struct sync_opts *o, const char *src, struct wplan **out)
{
	struct wplan *p = calloc(1, sizeof *p);
	struct stat st;
	int rc = -ENOMEM;
	*out = NULL;
	if (!p)
		return rc;
	p->limit = window_limit();
	p->one_fs = o->one_fs;
	p->root = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->root < 0 || fstat(p->root, &st) < 0) {
		client_windows_free(p);
		return 0;   /* the run's scan says why */
	}
	p->dev = st.st_dev;
	if (o->nrules && sync_filter_open(&p->filter, o, SYNC_RM_SENDER, p->root, NULL) < 0) {
		client_windows_free(p);
		return 0;   /* (said) the run's own scan fails the same way */
	}
	rc = fill(p);
	if (rc <= 0 || (p->done && !p->held)) {   /* it fits one window: no windows */
		client_windows_free(p);
		return rc < 0 ? rc : 0;
	}
	o->windows = 1;
	o->files_from = "-";
	o->files = p->w;
	o->nfiles = p->nw;
	*out = p;
	return 0;
}

/* wset's windows: w->dirs (FILES' form) grown by one, path taken. */
static int wwin_add(struct wwin *w, size_t *cap, char *path, size_t n)
{
	if (w->ndirs == *cap) {
		size_t c = *cap ? 2 * *cap : 16;
		char **g = realloc(w->dirs, c * sizeof *g);
		if (!g)
			return -ENOMEM;
		w->dirs = g;
		*cap = c;
	}
	size_t l = strlen(path);
	char *e = realloc(path, l + 2);
	if (!e)
		return -ENOMEM;
	e[l] = '/';
	e[l + 1] = '\0';
	w->dirs[w->ndirs++] = e;
	w->entries += n;
	return 0;
}

void client_wset_free(struct wset *s)
{
	for (size_t i = 0; i < s->n; i++) {
		for (size_t k = 0; k < s->w[i].ndirs; k++)
			free(s->w[i].dirs[k]);
		free(s->w[i].dirs);
	}
	free(s->w);
	*s = (struct wset){ 0 };
}

int client_windows_all(const struct sync_opts *o, const char *src, size_t ways,
                       uint64_t big_min, struct wset *out, struct wset *big)
{
	struct wplan *p = calloc(1, sizeof *p);
	struct stat st;
	char **path = NULL;
	size_t *n = NULL, nd = 0, capd = 0, total = 0;
	int rc = -ENOMEM;
	*out = (struct wset){ 0 };
	*big = (struct wset){ 0 };
	if (!p)
		return rc;
	p->big_min = big_min;
	p->big = big;
	p->one_fs = o->one_fs;
	p->root = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->root < 0 || fstat(p->root, &st) < 0) {
		rc = -errno;
		goto out;
	}
	p->dev = st.st_dev;
	if (o->nrules && sync_filter_open(&p->filter, o, SYNC_RM_SENDER, p->root, NULL) < 0) {
		rc = -EINVAL;   /* said */
		goto out;
	}
	for (;;) {   /* every directory, depth first, and its entries */
		char *d;
		size_t k;
		if ((rc = next_dir(p, &d, &k)) <= 0)
			break;
		if (nd == capd) {
			size_t c = capd ? 2 * capd : 256;
			char **g = realloc(path, c * sizeof *g);
			size_t *h = g ? realloc(n, c * sizeof *h) : NULL;
			if (g)
				path = g;
			if (!h) {
				free(d);
				rc = -ENOMEM;
				break;
			}
			n = h;
			capd = c;
		}
		path[nd] = d;
		n[nd++] = k;
		total += k;
	}
	if (rc < 0)
		goto out;
	/* about four windows a rank, so that one slow window does not hold
	 * the run; none larger than a single run's */
	size_t limit = window_limit();
	if (!getenv("RDCP_TEST_WINDOW")) {
		limit = total / (4 * (ways ? ways : 1));
		limit = limit < 1000 ? 1000 : limit > SYNC_WINDOW ? SYNC_WINDOW : limit;
	}
	size_t cap = 0, capw = 0;
	for (size_t i = 0; i < nd; i++) {
		struct wwin *w = out->n ? &out->w[out->n - 1] : NULL;
		if (!w || (w->ndirs && w->entries + n[i] > limit)) {
			if (out->n == capw) {
				size_t c = capw ? 2 * capw : 64;
				struct wwin *g = realloc(out->w, c * sizeof *g);
				if (!g) {
					rc = -ENOMEM;
					goto out;
				}
				out->w = g;
				capw = c;
			}
			w = &out->w[out->n++];
			*w = (struct wwin){ .number = (unsigned)out->n };
			cap = 0;
		}
		if ((rc = wwin_add(w, &cap, path[i], n[i])) < 0)
			goto out;
		path[i] = NULL;
	}
	out->ro_dirs = p->ro_dirs;
	rc = 0;
out:
	for (size_t i = 0; i < nd; i++)
		free(path[i]);
	free(path);
	free(n);
	client_windows_free(p);
	if (rc < 0) {
		client_wset_free(out);
		client_wset_free(big);
	}
	return rc;
}

int client_windows_given(struct sync_opts *o, const struct wset *mine, struct wplan **out)
{
	struct wplan *p = calloc(1, sizeof *p);
	*out = NULL;
	if (!p)
		return -ENOMEM;
	p->root = -1;
	p->given = mine;
	int rc = fill(p);
	if (rc <= 0) {
		client_windows_free(p);
		return rc;
	}
	o->windows = 1;
	o->files_from = "-";
	o->files = p->w;
	o->nfiles = p->nw;
	*out = p;
	return 0;
}

static int add_path(char ***v, size_t *n, size_t *cap, const char *s, size_t l)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 64;
		char **g = realloc(*v, c * sizeof *g);
		if (!g)
			return -ENOMEM;
		*v = g;
		*cap = c;
	}
	if (!((*v)[*n] = strndup(s, l)))
		return -ENOMEM;
	(*n)++;
	return 0;
}

static int in_sorted(char **v, size_t n, const char *s)
{
	return n && bsearch(&s, v, n, sizeof *v, name_cmp) != NULL;
}

/* Entries of a later window's file list that an earlier window listed
 * already: each directory of it whose parent is not in it (an entry of
 * its parent's window) and those above it, "" included (recorded with
 * every window below them), each once. A window is a run of directories
 * depth first: one whose parent is not in it has no ancestor in it. */
static uint64_t counted_before(const struct wplan *p)
{
	char **r = NULL, **v = NULL;
	size_t nr = 0, capr = 0, n = 0, cap = 0, k = 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < p->nw; i++)
		rc = add_path(&r, &nr, &capr, p->w[i], strlen(p->w[i]) - 1);
	if (rc == 0 && nr)
		qsort(r, nr, sizeof *r, name_cmp);
	for (size_t i = 0; rc == 0 && i < nr; i++) {
		size_t l = strlen(r[i]);
		if (!l)
			continue;   /* SRC itself: the first window's */
		char *sl = memrchr(r[i], '/', l);
		char *parent = strndup(r[i], sl ? (size_t)(sl - r[i]) : 0);
		if (!parent) {
			rc = -ENOMEM;
			break;
		}
		int inside = in_sorted(r, nr, parent);
		free(parent);
		while (!inside && rc == 0) {   /* it, then each above it */
			rc = add_path(&v, &n, &cap, r[i], l);
			if (!l)
				break;
			sl = memrchr(r[i], '/', l);
			l = sl ? (size_t)(sl - r[i]) : 0;
		}
	}
	if (rc == 0 && n) {
		qsort(v, n, sizeof *v, name_cmp);
		for (size_t i = 0; i < n; i++)
			k += !i || strcmp(v[i], v[i - 1]);
	}
	while (n)
		free(v[--n]);
	while (nr)
		free(r[--nr]);
	free(v);
	free(r);
	return k;
}

int client_windows_rest(struct sync_opts *o, struct role *r, struct sync_result *res,
                        struct sync_paths *retry, struct sync_paths *as_read,
                        struct wplan *p)
{
	struct sync_paths left = *retry;   /* what still changed, window by window */
	int rc = 0;
	uint64_t gone = res->vanished;
	*retry = (struct sync_paths){ 0 };
	if (p->given && p->gnext == 1) {
		/* a rank's first window: its directories' parents (SRC's "" at
		 * least) are other windows' entries, here counted again */
		uint64_t twice = counted_before(p);
		res->entries[SYNC_K_DIR] -= twice < res->entries[SYNC_K_DIR] ? twice
		                            : res->entries[SYNC_K_DIR];
	}
	for (;;) {
		int more_dirs = fill(p);
		if (more_dirs <= 0) {
			if (more_dirs < 0) {
				log_err("listing the directories of SRC: %s", strerror(-more_dirs));
				rc = more_dirs;
			}
			break;
		}
		o->files = p->w;
		o->nfiles = p->nw;
		o->files_from = "-";
		o->round = 1;
		if (o->verbose > 1 && !o->json && !o->quiet)
			printf("window %u: %zu directories, %zu entries\n", p->number, p->nw,
			       p->entries);
		struct sync_result more = { 0 };
		uint8_t last = 0;
		rc = ctl_send(r->ctl, CTL_ROUND, &last, 1);
		if (rc == 0)
			rc = sync_files_send(r->ctl, o);
		if (rc == 0)
			sync_sender(r, &more);
		o->round = 0;
		if (rc == 0 && client_window_goes_on(more.code))
			rc = client_retry(o, r, &more, retry, as_read, 0);
		/* what still changed: named at the end; the next window's rounds
		 * are its own files' */
		for (size_t i = 0; rc == 0 && i < retry->n; i++)
			rc = sync_paths_add(&left, retry->v[i]);
		sync_paths_free(retry);
		uint64_t twice = counted_before(p);
		more.entries[SYNC_K_DIR] -= twice < more.entries[SYNC_K_DIR] ? twice
		                            : more.entries[SYNC_K_DIR];
		for (int k = 0; k < SYNC_KINDS; k++)
			res->entries[k] += more.entries[k];
		res->total_size += more.total_size;
		res->flist_bytes += more.flist_bytes;
		res->flist_gen_us += more.flist_gen_us;
		res->flist_xfer_us += more.flist_xfer_us;
		result_add(res, &more);
		res->wire += more.wire;
		res->hashed += more.hashed;
		res->ctl_tx += more.ctl_tx;
		res->ctl_rx += more.ctl_rx;
		gone += more.vanished;
		/* the worst: a code that stops the run over any, an error (23)
		 * over a vanished file (24) */
		if (more.code && (!res->code || res->code == RD_EXIT_VANISHED ||
		                  !client_window_goes_on(more.code)))
			res->code = more.code;
		if (more.transport)
			res->transport = more.transport;
		if (rc < 0 || !client_window_goes_on(more.code))
			break;   /* refused (said), a full disk, the far side gone: no
			            more windows, as a run stops */
	}
	*retry = left;
	res->vanished = gone;
	if (!res->code && gone)
		res->code = RD_EXIT_VANISHED;
	o->files = NULL;
	o->nfiles = 0;
	o->files_from = NULL;
	return rc;
}
