/*
 * After the data, what the receiver does to DST as a whole (land.c has
 * each file's landing): the metadata of what did not change and of the
 * directories (set once their contents are done), deletions (--delete and
 * its timings, held back after any error), the sweep of rdcp's own temp
 * files a crash left, and DST's index saved with the hashes of what landed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "sync/recv/recv_int.h"

/* Mark the directory (in sm) holding path as touched. */
static void touch_parent(struct rstate *s, const char *path, uint8_t *touched)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, (size_t)(slash - path)) : strdup("");
	const struct idx_entry *p = dir ? idx_manifest_find(&s->sm, dir) : NULL;
	if (p)
		touched[p - s->sm.e] = 1;
	free(dir);
}

/* Metadata of e, which DST has (what: as recv_apply_fd()). */
static void fix_one(struct rstate *s, const struct idx_entry *e, unsigned what)
{
	const char *shown = *e->path ? e->path : ".";
	if (e->type == IDX_LNK) {
		const char *name;
		int pd = recv_open_parent(s->root, e->path, &name);
		if (pd < 0) {
			recv_fail(s, e->path, "cannot open its directory", errno);
			return;
		}
		recv_apply_link(s, pd, name, e, what);
		close(pd);
		return;
	}
	int special = e->type != IDX_REG && e->type != IDX_DIR;
	int fd = sync_open_beneath(s->root, e->path, special ? O_PATH : O_RDONLY |
	                           (e->type == IDX_DIR ? O_DIRECTORY : O_NONBLOCK));
	if (fd < 0) {
		recv_fail(s, shown, "cannot open to set metadata", errno);
		return;
	}
	struct stat st;   /* owner and mode set only where they differ (a
	                     directory that had a file written: only its mtime) */
	if (special)
		recv_apply_special(s, fd, e, what);
	else
		recv_apply_fd(s, fd, e, what, fstat(fd, &st) == 0 ? &st : NULL);
	close(fd);
}

/* Metadata of files whose content was already right, then of directories,
 * deepest first (writing into a directory changes its mtime): only those
 * that are new, differ, or had entries written or removed this run. */
void recv_fix_meta(struct rstate *s)
{
	if (s->r->flags & SYNC_F_DRYRUN)
		return;
	uint8_t *touched = calloc(s->sm.n ? s->sm.n : 1, 1);
	if (!touched)
		return;
	for (size_t k = 0; k < s->sm.n; k++)
		if (s->written[k])
			touch_parent(s, s->sm.e[k].path, touched);
	for (size_t k = 0; k < s->dm.n; k++)
		if (s->dm.e[k].flags & GONE)
			touch_parent(s, s->dm.e[k].path, touched);
	unsigned df = recv_diff_flags(s);
	for (size_t k = s->sm.n; k-- > 0;) {
		const struct idx_entry *e = &s->sm.e[k];
		if (e->type == IDX_SOCK || (e->type != IDX_DIR && s->written[k]) ||
		    (!*e->path && s->keep_root_meta))
			continue;
		const struct idx_entry *d = idx_manifest_find(&s->dm, e->path);
		/* a file whose content did not arrive keeps its old metadata too:
		 * the new mtime on old content would hide it from the next run;
		 * links and specials made this run have theirs already */
		if (e->type != IDX_DIR && s->change[k] != IDX_META)
			continue;
		if (e->type == IDX_DIR && d && d->type == IDX_DIR && !(d->flags & GONE) &&
		    !touched[k] && !s->written[k] && s->change[k] != IDX_META)
			continue;
		if (e->type == IDX_DIR && !recv_dir_ours(s, e->path))
			continue;   /* a ranked run: its window's to set */
		if (e->type == IDX_DIR && d && !touched[k] && !s->written[k] &&
		    recv_window_top(s, e->path))
			continue;   /* set, or said why not, in its parent's window */
		if (e->type == IDX_REG && (s->r->flags & SYNC_F_HARDLINKS) && e->hlink &&
		    e->hlink != k + 1)
			continue;
		/* what of ACLs and xattrs differs (a new directory: everything) */
		unsigned what = d && d->type == e->type && !(d->flags & GONE)
		                ? idx_meta_changes(e, d, df) : RECV_NEW_INODE;
		uint64_t errors = s->res->errors;
		fix_one(s, e, what);
		if (e->type == IDX_REG && s->res->errors == errors)   /* dirs: said in the plan */
			recv_item(s, '.', e, recv_item_bits(s, e, d, 0));
	}
	free(touched);
}

/* The directories holding a protected entry are not deleted either. */
static void keep_parents(struct rstate *s, const char *path)
{
	char *p = strdup(path);
	for (char *slash; p && (slash = strrchr(p, '/'));) {
		*slash = '\0';
		struct idx_entry *d = (struct idx_entry *)idx_manifest_find(&s->dm, p);
		if (d)
			d->flags |= KEPT;
	}
	free(p);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* --windows: is DST's path an entry of one of the window's directories
 * (not one of them, nor one above them: those are their parents'
 * windows' to delete), and not one that appeared in SRC since the scan? */
static int in_window(const struct rstate *s, const char *path)
{
	const char *sl = strrchr(path, '/');
	char *parent = strndup(path, sl ? (size_t)(sl - path) : 0);
	const struct idx_root *r = parent && s->nroots
	                           ? bsearch(&(struct idx_root){ .path = parent }, s->roots,
	                                     s->nroots, sizeof *s->roots, recv_root_cmp)
	                           : NULL;
	int in = r && r->depth == 1;
	free(parent);
	return in && !(s->nkept && bsearch(&path, s->kept, s->nkept, sizeof *s->kept, str_cmp));
}

/* Is DST's path part of what the sender sent: is its nearest ancestor in
 * the sender's manifest a directory of it? Several named SRCs (rdcp -r A B
 * DST) send no root: the rest of DST is not theirs to delete, as rsync. */
static int in_transfer(const struct rstate *s, const char *path)
{
	if (s->r->o && s->r->o->windows)
		return in_window(s, path);
	char *p = strdup(path);
	int in = 0;
	while (p) {
		char *slash = strrchr(p, '/');
		if (slash)
			*slash = '\0';
		else
			*p = '\0';
		const struct idx_entry *e = idx_manifest_find(&s->sm, p);
		if (e || !*p) {
			in = e && e->type == IDX_DIR;
			break;
		}
	}
	free(p);
	return in;
}

/* Delete DST's entry d (its children went first), or, in a dry run, say
 * it would be. */
static void delete_one(struct rstate *s, struct idx_entry *d);

struct dname {
	char *name;
	uint8_t type;   /* enum idx_type, as lstat says */
};

static uint8_t type_of(mode_t m)
{
	return S_ISDIR(m) ? IDX_DIR : S_ISLNK(m) ? IDX_LNK : S_ISFIFO(m) ? IDX_FIFO :
	       S_ISCHR(m) ? IDX_CHR : S_ISBLK(m) ? IDX_BLK : S_ISSOCK(m) ? IDX_SOCK : IDX_REG;
}

static int dname_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dname *)a)->name, ((const struct dname *)b)->name);
}

/* --windows: a directory only in DST, whose entries the scan (one level
 * deep) did not look at: them first, deepest first, each as --delete
 * would (filters protect, -b keeps, -n and -i say), then it. The names of
 * one directory at a time; nothing is followed (each level opened beneath
 * DST, no symlink). */
static void delete_below(struct rstate *s, const char *path)
{
	int fd = sync_open_beneath(s->root, path, O_RDONLY | O_DIRECTORY);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dname *v = NULL;
	size_t n = 0, cap = 0;
	int err = 0;
	if (!d) {
		if (fd >= 0)
			close(fd);
		recv_fail(s, path, "cannot list to delete", errno);
		return;
	}
	for (struct dirent *de; !err && (de = readdir(d));) {
		struct stat st;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			size_t c = cap ? 2 * cap : 32;
			struct dname *g = realloc(v, c * sizeof *g);
			if (!g) {
				err = ENOMEM;
				break;
			}
			v = g;
			cap = c;
		}
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;   /* gone meanwhile */
		if (!(v[n].name = strdup(de->d_name)))
			err = ENOMEM;
		else
			v[n++].type = type_of(st.st_mode);
	}
	closedir(d);   /* (one directory open at a time, however deep) */
	if (err)   /* said; what is left keeps the directory (ENOTEMPTY) */
		recv_fail(s, path, "cannot list to delete", err);
	/* reverse order, as the diff's: deepest first, as rsync lists them */
	if (n)
		qsort(v, n, sizeof *v, dname_cmp);
	for (size_t k = n; k-- > 0;) {
		char *p;
		if (asprintf(&p, "%s/%s", path, v[k].name) < 0)
			continue;
		struct idx_entry e = { .path = p, .type = v[k].type };
		if (!err && !idx_is_temp_name(v[k].name) && !recv_backup_protected(s, p) &&
		    !(s->filter && sync_filter_protects(s->filter, p, v[k].type == IDX_DIR)))
			delete_one(s, &e);
		free(p);
	}
	while (n)
		free(v[--n].name);
	free(v);
}

static void delete_one(struct rstate *s, struct idx_entry *d)
{
	unsigned f = s->r->flags;
	if (d->type == IDX_DIR && s->r->o && s->r->o->windows)
		delete_below(s, d->path);   /* what the scan did not look at */
	if (f & SYNC_F_DRYRUN) {
		recv_item_deleted(s, d);
		s->res->deleted++;
		s->res->removed[sync_kind(d->type)]++;
		return;
	}
	const char *name;
	int pd = recv_open_parent(s->root, d->path, &name);
	int gone = 0, err = 0;
	if (pd >= 0 && (f & SYNC_F_BACKUP) && d->type != IDX_DIR)
		gone = recv_backup(s, pd, name, d->path, 1) == 0;   /* kept, or said */
	else if (pd < 0 || unlinkat(pd, name, d->type == IDX_DIR ? AT_REMOVEDIR : 0) < 0)
		err = errno;
	else
		gone = 1;
	if (pd >= 0)
		close(pd);
	if (err == ENOTEMPTY && d->type == IDX_DIR)
		return;   /* it holds what the scan left out (excluded files, a run's
		             own temp files): kept, as rsync keeps it, not an error */
	if (gone || err == ENOENT) {   /* not when it is still there (its backup failed) */
		d->flags |= GONE;
		STAT_ADD(s->actions, 1);
	}
	if (err && err != ENOENT)
		recv_fail(s, d->path, "cannot delete", err);
	if (gone) {
		recv_item_deleted(s, d);
		s->res->deleted++;
		s->res->removed[sync_kind(d->type)]++;
	}
}

void recv_delete_extra(struct rstate *s)
{
	unsigned f = s->r->flags;
	if (!(f & SYNC_F_DELETE))
		return;
	/* as rclone: after any error, nothing is deleted (an entry that vanished
	 * or moved while the sender read it may have been seen under a name
	 * that is no longer its own) */
	uint64_t bad = s->sender_errors + s->unsent + s->res->errors + s->nmismatch;
	if (bad && s->r->o && s->r->o->take_rounds && !s->sender_errors &&
	    !s->res->errors && s->retried == s->unsent)
		return;   /* files changed as they were read: the client's next round
		             (a whole one) sends them, then deletes, or says why not */
	if (bad) {
		log_err("not deleting anything: %llu entries could not be read, sent or "
		        "written (see the messages above)", (unsigned long long)bad);
		return;
	}
	if (s->sender_vanished) {   /* its directory, as the scan saw it, may be short */
		log_warn("not deleting anything: %llu entries vanished while the sender "
		         "scanned them (see above)", (unsigned long long)s->sender_vanished);
		return;
	}
	if (s->gap_short)
		return;   /* a fan-out host short of data: its next round deletes (said) */
	if (s->kept_all) {   /* --windows: too much appeared in SRC to list */
		log_warn("not deleting anything in this window: its directories in SRC changed "
		         "while it was sent; the next run deletes");
		return;
	}
	/* deepest first: what the diff found only in DST, in reverse order */
	long long max = s->r->o ? s->r->o->max_delete : -1;
	for (size_t k = s->diff.n; k-- > 0;) {
		if (s->diff.c[k].kind != IDX_REMOVED)
			continue;
		struct idx_entry *d = (struct idx_entry *)s->diff.c[k].dst;
		if (!*d->path || (d->flags & (GONE | KEPT)) || !in_transfer(s, d->path) ||
		    recv_backup_protected(s, d->path))
			continue;
		if (s->filter && !s->filter_scanned &&
		    sync_filter_protects(s->filter, d->path, d->type == IDX_DIR)) {
			keep_parents(s, d->path);   /* excluded here: kept, and its directories */
			continue;
		}
		if (sync_filter_error(s->filter)) {   /* a dir-merge file of DST (said) */
			log_err("not deleting anything: a filter file of the destination could "
			        "not be used");
			STAT_ADD(s->res->errors, 1);
			return;
		}
		if (max >= 0 && s->res->deleted >= (uint64_t)max) {
			s->del_skipped++;   /* --max-delete: the rest stays (exit 25) */
			continue;
		}
		delete_one(s, d);
	}
	if (s->del_skipped)   /* rsync's words */
		log_err("Deletions stopped due to --max-delete limit (%llu skipped)",
		        (unsigned long long)s->del_skipped);
}

int recv_window_dir(const struct rstate *s, const char *dir)
{
	const struct idx_root *r = bsearch(&(struct idx_root){ .path = dir }, s->roots,
	                                   s->nroots, sizeof *s->roots, recv_root_cmp);
	return r && r->depth == 1;
}

int recv_temp_ours(const struct rstate *s, const char *path, int is_dir)
{
	const struct sync_opts *o = s->r->o;
	if (o && o->windows) {   /* a window: in its own directories only */
		if (is_dir)
			return recv_window_dir(s, path);
		const char *sl = strrchr(path, '/');
		char *parent = strndup(path, sl ? (size_t)(sl - path) : 0);
		int in = parent && recv_window_dir(s, parent);
		free(parent);
		return in;
	}
	if (o && o->ranked)   /* a ranked run's big files: their own temps */
		return !is_dir && idx_manifest_find(&s->sm, path) != NULL;
	return 1;
}

/* Remove the temp files an interrupted run left in the directories we know:
 * only names that pass idx_is_temp_name()'s check, and only what this user
 * owns and is not a directory (rdcp makes no temp directories). */
void recv_clean_temps(struct rstate *s)
{
	uid_t me = geteuid();
	for (size_t i = 0; i < s->dm.n; i++) {
		if (s->dm.e[i].type != IDX_DIR || !recv_temp_ours(s, s->dm.e[i].path, 1))
			continue;
		int fd = sync_open_beneath(s->root, s->dm.e[i].path, O_RDONLY | O_DIRECTORY);
		DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
		struct dirent *de;
		struct stat st;
		while (d && (de = readdir(d)))
			if (de->d_name[0] == '.' && idx_is_temp_name(de->d_name) &&
			    fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    !recv_partial_kept(s, s->dm.e[i].path, de->d_name, st.st_ino) &&
			    !S_ISDIR(st.st_mode) && st.st_uid == me)
				unlinkat(fd, de->d_name, 0);
		if (d)
			closedir(d);
		else if (fd >= 0)
			close(fd);
	}
}

/* The receiver's new index: what it holds now, hashes it can vouch for.
 * A small file the manifest has no hash of (IDX_F_NOHASH: without -c) gets
 * no row, as its scan left it unread: nothing needs its hash until a -c
 * run, whose scan reads it (docs/index.md, "Files not read"). */
void recv_save_index(struct rstate *s)
{
	/* now's entries are copies of sm's and dm's, their strings still
	 * theirs (only the array is now's: no copy of 50,000 paths) */
	struct idx_manifest now = { 0 };
	uint8_t **own = NULL;   /* digests made here (--append), now's to free */
	size_t nown = 0;
	if (idx_manifest_reserve(&now, s->sm.n) < 0 || !(own = calloc(s->sm.n + 1, sizeof *own))) {
		free(now.e);
		return;   /* the next scan hashes what this run wrote */
	}
	size_t j = 0;   /* dm and sm are both sorted by path: walked together */
	for (size_t i = 0; i < s->sm.n; i++) {
		const struct idx_entry *e = &s->sm.e[i];
		const struct rfile *f = s->fetch[i] >= 0 ? &s->files[s->fetch[i]] : NULL;
		struct stat st;
		if (e->type == IDX_REG && !s->written[i] && f && f->opened_inplace)
			continue;   /* failed while written in place: the next scan reads it */
		if (e->type == IDX_REG && !s->written[i]) {
			/* untouched by this run: its row is what the scan saw and
			 * stored (a change since shows at the next scan's stat) */
			int c = 1;
			while (j < s->dm.n && (c = strcmp(s->dm.e[j].path, e->path)) < 0)
				j++;
			if (j < s->dm.n && c == 0 && s->dm.e[j].type == IDX_REG)
				now.e[now.n++] = s->dm.e[j];
			continue;
		}
		if (e->type == IDX_REG && (e->flags & IDX_F_NOHASH))
			continue;   /* no row, so no stat (idx_db_store() keeps none) */
		struct recv_st r;
		if (f && f->st_ok) {   /* its writer's stat as it landed */
			r = f->st;
		} else {
			if (*e->path ? fstatat(s->root, e->path, &st, AT_SYMLINK_NOFOLLOW) < 0
			             : fstat(s->root, &st) < 0)
				continue;
			recv_st_of(&r, &st);
		}
		if ((e->type == IDX_REG) != S_ISREG(r.mode))
			continue;
		struct idx_entry n = *e;
		n.x = NULL;   /* xattrs and ACLs as set are not vouched for: read next time */
		n.got = 0;
		n.dev = r.dev;
		n.ino = r.ino;
		n.nlink = r.nlink;
		n.size = S_ISREG(r.mode) ? r.size : 0;
		n.mode = r.mode & 07777;
		n.uid = r.uid;
		n.gid = r.gid;
		n.mtime_ns = r.mtime_ns;
		n.ctime_ns = r.ctime_ns;
		/* --append kept DST's own start: the row has the digests of
		 * what is on disk, or is no row at all (its hash unknown) */
		/* a basis changed in the clock tick of our scan may have changed
		 * again unseen: its digests are not ours to vouch for */
		const struct idx_entry *b = f ? f->basis : NULL;
		int racy = b && (b->mtime_ns >= s->dst_stamp || b->ctime_ns >= s->dst_stamp);
		int rc = f && f->ops && f->ops->row ? racy ? 1 : f->ops->row(f, e, &n) : 0;
		if (rc < 0)
			break;   /* ENOMEM: what is stored so far is true */
		if (rc > 0)
			n.flags |= IDX_F_NOHASH;
		if (n.chunks != e->chunks)
			own[nown++] = n.chunks;
		now.e[now.n++] = n;
	}
	idx_manifest_sort(&now);
	idx_save(s->root_path, &s->so, &s->dm, &now);
	while (nown)
		free(own[--nown]);
	free(own);
	free(now.e);   /* the entries' strings are sm's and dm's */
}
