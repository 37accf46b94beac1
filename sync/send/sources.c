/*
 * The sender's SRC operands. One SRC is a root to scan and, unless its
 * contents are meant (a trailing '/'), the one name sent from it. Several
 * (rdcp -r A B/ C DST) are each scanned that way and merged into one
 * manifest, as rsync merges its file list: a SRC without a trailing '/'
 * adds its name, one with it adds its contents, and the receiver sees one
 * directory's contents. Every entry's path is relative to its own SRC's
 * root, so the merged manifest only has to remember which SRC an entry
 * came from (srcs_root()) to read it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "sync/send/send_int.h"

int sync_src_contents(const char *src, unsigned flags)
{
	size_t len = strlen(src);
	struct stat st;
	return len && stat(src, &st) == 0 && S_ISDIR(st.st_mode) &&
	       ((flags & SYNC_F_MIRROR) || src[len - 1] == '/' ||
	        (len >= 2 && !strcmp(src + len - 2, "/.")) || !strcmp(src, "."));
}

int src_split(const char *src, unsigned flags, char **root, char **only, int *is_dir)
{
	size_t len = strlen(src);
	struct stat st;
	if (stat(src, &st) < 0) {
		int err = errno;
		log_err("%s: %s", src, strerror(err));
		return -err;
	}
	*is_dir = S_ISDIR(st.st_mode);
	if (*is_dir && !(flags & (SYNC_F_RECURSIVE | SYNC_F_MIRROR))) {
		log_err("%s: is a directory (use -r)", src);
		return -EISDIR;
	}
	int contents = *is_dir && ((flags & SYNC_F_MIRROR) || src[len - 1] == '/' ||
	               (len >= 2 && !strcmp(src + len - 2, "/.")) || !strcmp(src, "."));
	*only = NULL;
	if (contents) {
		*root = strdup(src);
		return *root ? 0 : -ENOMEM;
	}
	char *copy = strdup(src);
	if (!copy)
		return -ENOMEM;
	while (len > 1 && copy[len - 1] == '/')
		copy[--len] = '\0';
	char *cut = strrchr(copy, '/');
	*only = strdup(cut ? cut + 1 : copy);
	*root = cut == copy ? strdup("/") : cut ? (*cut = '\0', strdup(copy)) : strdup(".");
	free(copy);
	return *only && *root ? 0 : -ENOMEM;
}

/* An entry with the SRC it came from, while the lists are merged. */
struct tagged {
	struct idx_entry e;
	uint32_t src;
};

static int cmp_tagged(const void *a, const void *b)
{
	const struct tagged *x = a, *y = b;
	int c = strcmp(x->e.path, y->e.path);
	return c ? c : (x->src > y->src) - (x->src < y->src);
}

static void entry_free(struct idx_entry *e)
{
	free(e->path);
	free(e->link);
	free(e->chunks);
	free(e->x);
}

/* SRC k: lock it, scan it, and move its entries onto *all. 0, or a negative
 * errno when it cannot be used (said; counted by the caller). */
static int scan_one(struct role *r, struct srcset *ss, int k, struct tagged **all,
                    size_t *n, size_t *cap, uint64_t *errors, unsigned *mflags)
{
	struct idx_scan_opts so = { 0 };
	struct idx_manifest m = { 0 };
	struct idx_stats st;
	char *only = NULL;
	/* not --sync's "a directory's contents" for each: several SRCs merged
	 * into one DST would mirror none of them, and --delete would empty DST
	 * of all else (rdcp --sync --delete A B backup/); as rsync, a SRC
	 * without a trailing '/' adds its name, and --delete stays inside it */
	int is_dir, rc = src_split(r->srcs[k], r->flags & ~(unsigned)SYNC_F_MIRROR,
	                           &ss->root[k], &only, &is_dir);
	if (rc < 0)
		return rc;
	so.only = only;
	so.one_fs = r->o->one_fs;
	so.meta = sync_scan_meta(r->flags);
	so.trust_prefix = sync_trust_prefix(r->flags);
	so.lazy_below = sync_nohash_below(r);
	so.no_index = r->o->no_index;   /* --no-index: both sides */
	int fd = open(ss->root[k], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct filter *flt = NULL;   /* the rules, with this SRC's dir-merge files */
	if (fd >= 0 && r->o->nrules && sync_filter_open(&flt, r->o, SYNC_RM_SENDER, fd,
	                                                only ? "" : NULL) == 0) {
		so.skip = sync_filter_skip;
		so.skip_ctx = flt;
	}
	/* a named directory: its own tree; a named file: the directory it is
	 * read from */
	int lockfd = fd >= 0 && only && is_dir ? sync_open_beneath(fd, only, O_RDONLY | O_DIRECTORY)
	           : fd >= 0 ? dup(fd) : -1;
	struct sync_lock *lock = NULL;
	if (fd < 0)
		rc = -errno;
	else if (lockfd >= 0)
		rc = sync_lock(lockfd, r->srcs[k], only && !is_dir ? SYNC_LOCK_INSIDE :
		               SYNC_LOCK_READ, 0, &lock);
	if (lockfd >= 0)
		close(lockfd);
	if (rc == 0 && r->o->nrules && !flt)
		rc = -ENOMEM;
	if (rc == 0)
		rc = idx_scan(ss->root[k], &so, &m, &st);
	if (rc == 0 && sync_filter_error(flt))
		rc = -EINVAL;   /* a dir-merge file it cannot use (said) */
	sync_filter_free(flt);
	ss->only[k] = only;
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		sync_unlock(lock);
		idx_manifest_free(&m);
		return rc;
	}
	ss->fd[k] = fd;
	ss->lock[k] = lock;
	*errors += st.errors + st.vanished;   /* (several SRCs: as errors) */
	*mflags = m.flags;   /* what every scan read (xattrs, ACLs): the same */
	for (size_t i = 0; i < m.n; i++) {
		if (so.only && !*m.e[i].path) {   /* a named SRC's parent is not sent */
			entry_free(&m.e[i]);
			continue;
		}
		if (*n == *cap) {
			size_t c = *cap ? *cap * 2 : 256;
			struct tagged *t = realloc(*all, c * sizeof *t);
			if (!t) {
				for (; i < m.n; i++)
					entry_free(&m.e[i]);
				free(m.e);
				return -ENOMEM;
			}
			*all = t;
			*cap = c;
		}
		(*all)[(*n)++] = (struct tagged){ m.e[i], (uint32_t)k };
	}
	free(m.e);   /* its entries are ours now */
	return 0;
}

/* Sorted by path, one entry per path, as rsync's clean_flist(): of the same
 * path from several SRCs, a directory wins over what is not one, else the
 * first SRC's; directories of the same path merge their contents. */
static int merge(struct srcset *ss, struct tagged *all, size_t n, struct idx_manifest *m)
{
	qsort(all, n, sizeof *all, cmp_tagged);
	m->e = malloc((n ? n : 1) * sizeof *m->e);
	ss->of = malloc((n ? n : 1) * sizeof *ss->of);
	if (!m->e || !ss->of) {
		for (size_t i = 0; i < n; i++)
			entry_free(&all[i].e);
		return -ENOMEM;
	}
	m->n = 0;
	m->cap = n ? n : 1;
	for (size_t i = 0, j; i < n; i = j) {
		size_t keep = i;
		for (j = i + 1; j < n && !strcmp(all[j].e.path, all[i].e.path); j++)
			if (all[j].e.type == IDX_DIR && all[keep].e.type != IDX_DIR)
				keep = j;
		for (size_t k = i; k < j; k++)
			if (k != keep)
				entry_free(&all[k].e);
		ss->of[m->n] = all[keep].src;
		m->e[m->n++] = all[keep].e;
	}
	idx_manifest_sort(m);   /* already in order: this groups hard links anew */
	return 0;
}

int srcs_scan(struct role *r, struct srcset *ss, struct idx_manifest *m, uint64_t *errors)
{
	struct tagged *all = NULL;
	size_t n = 0, cap = 0;
	unsigned mflags = 0;
	ss->n = r->nsrc;
	ss->no_index = r->o->no_index;
	ss->root = calloc((size_t)ss->n, sizeof *ss->root);
	ss->only = calloc((size_t)ss->n, sizeof *ss->only);
	ss->fd = malloc((size_t)ss->n * sizeof *ss->fd);
	ss->lock = calloc((size_t)ss->n, sizeof *ss->lock);
	if (!ss->root || !ss->only || !ss->fd || !ss->lock)
		return -ENOMEM;
	for (int k = 0; k < ss->n; k++)
		ss->fd[k] = -1;
	for (int k = 0; k < ss->n; k++) {
		int rc = scan_one(r, ss, k, &all, &n, &cap, errors, &mflags);
		if (rc == -ENOMEM || rc == -EWOULDBLOCK) {
			for (size_t i = 0; i < n; i++)
				entry_free(&all[i].e);
			free(all);
			return rc;
		}
		if (rc < 0)   /* as rsync: said, counted (exit 23), the others go on */
			(*errors)++;
	}
	int rc = merge(ss, all, n, m);
	m->flags = mflags;
	free(all);
	return rc;
}

int srcs_root(const struct srcset *ss, size_t i)
{
	return ss->fd[ss->of[i]];
}

int srcs_forget(const struct srcset *ss, size_t i, const char *path)
{
	uint32_t k = ss->of[i];
	struct idx_scan_opts o = { .only = ss->only[k], .no_index = ss->no_index };
	return idx_forget(ss->root[k], &o, path);
}

void srcs_free(struct srcset *ss)
{
	for (int k = 0; k < ss->n; k++) {
		if (ss->root)
			free(ss->root[k]);
		if (ss->only)
			free(ss->only[k]);
		if (ss->fd && ss->fd[k] >= 0)
			close(ss->fd[k]);
		if (ss->lock)
			sync_unlock(ss->lock[k]);
	}
	free(ss->root);
	free(ss->only);
	free(ss->fd);
	free(ss->lock);
	free(ss->of);
	memset(ss, 0, sizeof *ss);
}
