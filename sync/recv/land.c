/*
 * Landing: everything the receiver does to DST. Files are written to a temp
 * file in their target directory (unnamed, O_TMPFILE, where the filesystem
 * can; else a name from idx_temp_name(), which only rdcp's own temp
 * files can pass idx_is_temp_name()'s check with) and linked or renamed into place
 * only when complete, verified and with their metadata: a crash leaves the
 * old file or the new one. Links, fifos and devices go through a temp name
 * too. After the data: finish.c (metadata, deletions, the index).
 *
 * Paths come from the peer: the manifest decoder has checked their syntax,
 * every parent is a directory of the manifest (recv.c), and directories are
 * opened with sync_open_beneath() from DST's root, so nothing is ever
 * written through a symlink or outside DST.
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

/* The directory of sm that could not be made at or above path: its
 * index, or -1. Under fail_mu. */
static ssize_t failed_at(const struct rstate *s, const char *path)
{
	if (!s->nodir)
		return -1;
	char *p = strdup(path);
	ssize_t at = -1;
	for (char *slash = p; p && at < 0 && slash;) {
		const struct idx_entry *e = idx_manifest_find(&s->sm, p);
		if (e && s->nodir[e - s->sm.e].failed)
			at = e - s->sm.e;
		if ((slash = strrchr(p, '/')))
			*slash = '\0';
	}
	free(p);
	return at;
}

/* Directory path could not be made (said, unless quiet): what fails below
 * it from now on is counted, and said at the end. Under fail_mu. */
static void mark_failed_dir(struct rstate *s, const char *path, int quiet)
{
	const struct idx_entry *e = idx_manifest_find(&s->sm, path);
	if (!s->nodir && e)
		s->nodir = calloc(s->sm.n, sizeof *s->nodir);
	if (!s->nodir || !e)
		return;   /* (then each failure below it is said) */
	s->nodir[e - s->sm.e].failed = 1;
	s->nodir[e - s->sm.e].quiet = (uint8_t)quiet;
}

void recv_fail(struct rstate *s, const char *path, const char *what, int err)
{
	char shown[4096];
	STAT_ADD(s->res->errors, 1);
	pthread_mutex_lock(&s->fail_mu);
	ssize_t below = failed_at(s, path);
	if (below >= 0) {
		s->nodir[below].below++;   /* said once for the directory, counted here */
		pthread_mutex_unlock(&s->fail_mu);
		return;
	}
	/* a full disk is said once, naming the first file it stopped: every
	 * writer after it (up to 8 at once) meets the same */
	int full = err == ENOSPC || err == EDQUOT;
	int quiet = full && s->full_said;
	if (!quiet)
		log_err("%s: %s: %s%s", log_path(shown, sizeof shown, path), what, strerror(err),
		        err == ENAMETOOLONG ? " (a sync handles paths up to 4096 bytes)" : "");
	s->full_said |= full;
	if (s->res->fails) {   /* --json */
		char why[SYNC_FAIL_WHY_MAX + 1];
		snprintf(why, sizeof why, "%s: %s", what, strerror(err));
		sync_fails_add(s->res->fails, path, why, 0);
	}
	if (!strcmp(what, RECV_NO_DIR))
		mark_failed_dir(s, path, quiet);
	pthread_mutex_unlock(&s->fail_mu);
}

void recv_fail_end(struct rstate *s)
{
	char shown[4096];
	pthread_mutex_lock(&s->fail_mu);
	for (size_t k = 0; s->nodir && k < s->sm.n; k++)
		if (s->nodir[k].below && !s->nodir[k].quiet)   /* (a full disk: said once) */
			log_err("%s: %llu entries below it were not written either",
			        log_path(shown, sizeof shown, s->sm.e[k].path),
			        (unsigned long long)s->nodir[k].below);
	free(s->nodir);
	s->nodir = NULL;
	pthread_mutex_unlock(&s->fail_mu);
}

/* Open the directory holding path; *name points at its last component. */
int recv_open_parent(int root, const char *path, const char **name)
{
	const char *slash = strrchr(path, '/');
	if (!slash) {
		*name = path;
		return dup(root);
	}
	*name = slash + 1;
	char *dir = strndup(path, (size_t)(slash - path));
	if (!dir)
		return -1;
	int fd = sync_open_beneath(root, dir, O_RDONLY | O_DIRECTORY);
	free(dir);
	return fd;
}

int recv_dircache_get(struct recv_dircache *c, int root, const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;
	if (c->fd >= 0 && strlen(c->dir) == n && !strncmp(c->dir, path, n))
		return c->fd;
	const char *name;
	int fd = recv_open_parent(root, path, &name);
	char *dir = fd >= 0 ? strndup(path, n) : NULL;
	if (fd >= 0 && !dir) {
		close(fd);
		errno = ENOMEM;
		return -1;
	}
	if (fd < 0)
		return -1;   /* the cache keeps the last good one */
	recv_dircache_free(c);
	c->dir = dir;
	c->fd = fd;
	return fd;
}

void recv_dircache_free(struct recv_dircache *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->dir);
	c->dir = NULL;
	c->fd = -1;
}

int recv_open_parent_cached(struct rstate *s, const char *path)
{
	int fd = recv_dircache_get(&s->dirc, s->root, path);
	return fd < 0 ? -1 : dup(fd);
}

/* Remove path from DST, recursively if it is a directory of dm. */
/* --windows: what is below DST's directory path, which the scan (one
 * level deep) did not look at, removed, deepest first (-b: files kept as
 * backups); nothing followed (each level opened beneath DST), one
 * directory open at a time. 0, or -errno (said). */
static int remove_below(struct rstate *s, const char *path)
{
	int fd = sync_open_beneath(s->root, path, O_RDONLY | O_DIRECTORY);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	char **v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	if (!d) {
		rc = -errno;
		if (fd >= 0)
			close(fd);
		if (rc == -ENOENT)
			return 0;
		recv_fail(s, path, "cannot remove", -rc);
		return rc;
	}
	for (struct dirent *de; rc == 0 && (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			size_t c = cap ? 2 * cap : 32;
			char **g = realloc(v, c * sizeof *g);
			if (!g) {
				rc = -ENOMEM;
				break;
			}
			v = g;
			cap = c;
		}
		if (!(v[n] = strdup(de->d_name)))
			rc = -ENOMEM;
		else
			n++;
	}
	closedir(d);
	if (rc < 0)
		recv_fail(s, path, "cannot remove", -rc);
	for (size_t k = 0; rc == 0 && k < n; k++) {
		struct stat st;
		char *p;
		if (asprintf(&p, "%s/%s", path, v[k]) < 0) {
			rc = -ENOMEM;
			break;
		}
		const char *name;
		int pd = recv_open_parent(s->root, p, &name);
		if (pd < 0 || fstatat(pd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (pd >= 0)
				close(pd);
			free(p);
			continue;   /* gone meanwhile */
		}
		int dir = S_ISDIR(st.st_mode);
		if (dir && (rc = remove_below(s, p)) < 0) {
			close(pd);
			free(p);
			break;
		}
		if (!dir && (s->r->flags & SYNC_F_BACKUP))
			rc = recv_backup(s, pd, name, p, 1) < 0 ? -EIO : 0;   /* said */
		else if (unlinkat(pd, name, dir ? AT_REMOVEDIR : 0) < 0 && errno != ENOENT) {
			rc = -errno;
			recv_fail(s, p, "cannot remove", errno);
		}
		close(pd);
		free(p);
	}
	while (n)
		free(v[--n]);
	free(v);
	return rc;
}

int recv_remove(struct rstate *s, const char *path)
{
	size_t len = strlen(path);
	for (size_t i = s->dm.n; i-- > 0;) {
		const char *p = s->dm.e[i].path;
		if (strncmp(p, path, len) != 0 || (p[len] != '/' && p[len] != '\0'))
			continue;
		const char *name;
		int rc, err;
		if (s->dm.e[i].type == IDX_DIR && s->r->o && s->r->o->windows &&
		    (rc = remove_below(s, p)) < 0)
			return rc;
		int d = recv_open_parent(s->root, p, &name);
		if (d < 0)
			return -errno;
		/* GONE only once it is: an entry still there (its backup failed)
		 * must not be replaced later as if nothing were in the way */
		if ((s->r->flags & SYNC_F_BACKUP) && s->dm.e[i].type != IDX_DIR) {
			rc = recv_backup(s, d, name, p, 1);   /* said if it failed */
			close(d);
			if (rc < 0)
				return -EIO;
		} else {
			rc = unlinkat(d, name, s->dm.e[i].type == IDX_DIR ? AT_REMOVEDIR : 0);
			err = errno;
			close(d);
			if (rc < 0 && err != ENOENT) {
				recv_fail(s, p, "cannot remove", err);
				return -err;
			}
		}
		s->dm.e[i].flags |= GONE;
		STAT_ADD(s->actions, 1);
	}
	return 0;
}

/* Tests: $RDCP_TEST_NO_TMPFILE set makes every file take the named-temp
 * road, as on a filesystem without O_TMPFILE. */
static int no_tmpfile = -1;

/* fallocate() of len bytes at off, again when a signal cut it short. */
static int falloc(int fd, uint64_t off, uint64_t len)
{
	int rc;
	do
		rc = fallocate(fd, 0, (off_t)off, (off_t)len);
	while (rc < 0 && errno == EINTR);
	return rc;
}

/* Room for a large file before its first byte is written: on a disk too
 * full for it, it fails now, with its one line, and leaves the room to the
 * files that fit (without it, every file in flight takes part of the space
 * and none of them lands). Only what will be written into the temp: not
 * the chunks that come from DST's old file (a reflink costs no room). Not
 * with -S (its holes stay holes), nor for a small file (written whole at
 * once). A filesystem that cannot reserve goes on without. 0, or -1
 * (said). */
static int reserve(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	if (e->size < SYNC_SMALL || (s->r->flags & SYNC_F_SPARSE))
		return 0;
	int rc = 0;
	uint64_t want = 0;
	if (!f->map.how) {
		want = e->size;
		rc = falloc(f->fd, 0, e->size);
	}
	for (uint32_t k = 0; f->map.how && k < f->map.n && rc == 0;) {
		uint32_t end = k;   /* a run of chunks to be written, at once */
		while (end < f->map.n && f->map.how[end] != CH_HAVE)
			end++;
		uint64_t off = (uint64_t)k * IDX_CHUNK_SIZE;
		uint64_t to = (uint64_t)end * IDX_CHUNK_SIZE < e->size
		              ? (uint64_t)end * IDX_CHUNK_SIZE : e->size;
		if (to > off) {
			want += to - off;
			rc = falloc(f->fd, off, to - off);
		}
		k = end + 1;
	}
	int err = errno;   /* (before the formatting below can change it) */
	if (rc == 0 || err == EOPNOTSUPP || err == ENOSYS)
		return 0;
	char what[64], b[16];
	snprintf(what, sizeof what, "no room for its %s", log_bytes(b, want));
	recv_fail(s, e->path, what, err);
	return -1;
}

static const struct recv_write_ops *ops_of(const struct rfile *f)
{
	return f->ops ? f->ops : &recv_write_temp;
}

/* What the file's data is written into, in f->dirfd (already open). */
int recv_create_temp(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	f->tmp[0] = f->resume ? f->tmp[0] : 0;
	return ops_of(f)->open(s, e, f);
}

/* An unnamed file in the target directory (O_TMPFILE): nothing of it can
 * be seen, or be left behind, until it is linked in whole. Where the
 * filesystem cannot, a named temp file. */
int recv_temp_open(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	if (no_tmpfile < 0)
		no_tmpfile = getenv("RDCP_TEST_NO_TMPFILE") != NULL;
	/* unnamed, it can have its mode from the start (a named temp is the
	 * user's alone until it is complete) */
	f->fd = no_tmpfile ? -1 : openat(f->dirfd, ".", O_WRONLY | O_TMPFILE | O_CLOEXEC,
	                                 recv_mode_of(s, e) & 0777);
	for (int tries = 0; f->fd < 0 && tries < 5; tries++) {
		idx_temp_name(f->tmp);
		f->fd = openat(f->dirfd, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		               0600);
		if (f->fd >= 0 || errno != EEXIST)
			break;
	}
	if (f->fd < 0) {
		recv_fail(s, e->path, "cannot create a temp file", errno);
		if (!f->dir_lent)
			close(f->dirfd);
		f->dirfd = -1;
		f->dir_lent = 0;
		return -1;
	}
	if (reserve(s, e, f) < 0)
		return -1;
	/* size multi-chunk files up front (chunks land in any order); with -S
	 * any file: its zero blocks at the end are never written */
	if ((e->nchunks || (s->r->flags & SYNC_F_SPARSE)) &&
	    ftruncate(f->fd, (off_t)e->size) < 0) {
		recv_fail(s, e->path, "cannot size the temp file", errno);
		return -1;
	}
	return 0;
}

int recv_open_temp(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	f->dirfd = recv_open_parent_cached(s, e->path);
	if (f->dirfd < 0) {
		recv_fail(s, e->path, "cannot open its directory", errno);
		return -1;
	}
	return recv_create_temp(s, e, f);
}

void recv_drop_file(struct rfile *f)
{
	const struct recv_write_ops *ops = ops_of(f);
	if (f->fd >= 0 && ops->keep && ops->keep(f)) {
		/* --partial: kept, with its fd, for recv_partial_end() to store */
	} else if (f->fd >= 0) {
		close(f->fd);
		if (f->tmp[0])
			unlinkat(f->dirfd, f->tmp, 0);
		f->fd = -1;
	}
	if (f->dirfd >= 0 && !f->dir_lent)
		close(f->dirfd);
	if (f->bfd >= 0)
		close(f->bfd);
	f->dirfd = -1;
	f->dir_lent = 0;
	f->bfd = f->bfd == RECV_BASIS_BAD ? RECV_BASIS_BAD : -1;
	free(f->seen);
	f->seen = NULL;
	f->nseen = 0;
	free(f->bhave);
	f->bhave = NULL;
	chunk_map_free(&f->map);
}

/* What the index keeps of st. */
void recv_st_of(struct recv_st *r, const struct stat *st)
{
	*r = (struct recv_st){
		.dev = st->st_dev, .ino = st->st_ino, .size = (uint64_t)st->st_size,
		.mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
		.ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec,
		.nlink = (uint32_t)st->st_nlink, .mode = st->st_mode, .uid = st->st_uid,
		.gid = st->st_gid,
	};
}

/* linkat() of an open file: by the fd itself where we may (AT_EMPTY_PATH
 * needs CAP_DAC_READ_SEARCH), else through /proc/self/fd, whose lookup costs
 * a path walk and a permission check per file. */
static int link_fd(int fd, int dirfd, const char *name)
{
	static int by_fd = 1;
	if (__atomic_load_n(&by_fd, __ATOMIC_RELAXED)) {
		if (linkat(fd, "", dirfd, name, AT_EMPTY_PATH) == 0)
			return 0;
		if (errno != EPERM && errno != ENOENT && errno != EINVAL)
			return -1;
		__atomic_store_n(&by_fd, 0, __ATOMIC_RELAXED);
	}
	char proc[40];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW);
}

/* Give an unnamed (O_TMPFILE) file a name: its own when that is free (a new
 * file: one directory entry written, no rename), else a temp name for the
 * caller to rename over the file it replaces (at once when DST had one
 * there at the plan: no link that would fail first). 1: in place, 0:
 * linked as f->tmp, -1: error (errno). */
static int link_in(struct rfile *f, const char *name)
{
	for (int tries = f->existed ? 1 : 0; tries < 6; tries++) {
		const char *as = name;
		if (tries) {   /* name is taken: a temp name, renamed over it later */
			idx_temp_name(f->tmp);
			as = f->tmp;
		}
		if (link_fd(f->fd, f->dirfd, as) == 0)
			return tries == 0;
		if (errno != EEXIST)
			break;
	}
	f->tmp[0] = 0;
	return -1;
}

/* All chunks in and verified: metadata, then into place. */
void recv_finish_file(struct rstate *s, size_t i, struct rfile *f)
{
	ops_of(f)->finish(s, i, f);
}

void recv_temp_finish(struct rstate *s, size_t i, struct rfile *f)
{
	const struct idx_entry *e = &s->sm.e[i];
	const char *name = strrchr(e->path, '/');
	name = name ? name + 1 : e->path;
	if (f->map.how && recv_fill_basis(s, e, f) < 0) {   /* said */
		f->failed = 1;
		recv_drop_file(f);
		return;
	}
	struct stat st;   /* unnamed: made by us just now, its owner and mode as made */
	recv_apply_fd(s, f->fd, e, RECV_NEW_INODE,
	              !f->tmp[0] && fstat(f->fd, &st) == 0 ? &st : NULL);
	int linked = f->tmp[0] ? 0 : link_in(f, name);   /* 1: it is in place */
	/* as it stays: the index's (a file without a hash gets no row) */
	int keep = linked == 1 && !e->hlink && !(e->flags & IDX_F_NOHASH);
	if (keep && fstat(f->fd, &st) == 0) {
		recv_st_of(&f->st, &st);
		f->st_ok = 1;
	}
	int cerr = close(f->fd) < 0 ? errno : 0;
	f->fd = -1;
	if (linked < 0) {
		recv_fail(s, e->path, "cannot link into place", errno);
	} else if (cerr) {
		recv_fail(s, e->path, "write failed", cerr);
		unlinkat(f->dirfd, linked ? name : f->tmp, 0);   /* new: nothing was there */
	} else if (!linked && f->existed && (s->r->flags & SYNC_F_BACKUP) &&
	           recv_backup(s, f->dirfd, name, e->path, 0) < 0) {
		unlinkat(f->dirfd, f->tmp, 0);   /* the old file stays, unreplaced */
	} else if (!linked && renameat(f->dirfd, f->tmp, f->dirfd, name) < 0) {
		recv_fail(s, e->path, "cannot rename into place", errno);
		unlinkat(f->dirfd, f->tmp, 0);
	} else {
		recv_landed(s, i, f);
	}
	recv_drop_file(f);
}

void recv_landed(struct rstate *s, size_t i, struct rfile *f)
{
	const struct idx_entry *e = &s->sm.e[i];
	f->done = 1;
	s->written[i] = 1;
	if (ops_of(f)->landed)
		ops_of(f)->landed(s, f);
	if (!f->existed)
		STAT_ADD(s->res->created[SYNC_K_REG], 1);
	recv_item(s, '>', e, recv_item_bits(s, e, f->existed ? idx_manifest_find(&s->dm,
	          e->path) : NULL, 1));
	STAT_ADD(s->res->files, 1);   /* after its line: --progress counts landed files */
}

const struct recv_write_ops recv_write_temp = {
	.open = recv_temp_open,
	.finish = recv_temp_finish,
};

/* Is sender entry i (a link, special or hard-link follower) already what
 * DST has? */
static int link_current(const struct rstate *s, size_t i, int follower)
{
	const struct idx_entry *e = &s->sm.e[i];
	const struct idx_entry *d = idx_manifest_find(&s->dm, e->path);
	if (!d || d->type != e->type || (d->flags & GONE))
		return 0;
	if (follower) {   /* the same inode as its leader's (a sync-only rule:
	                     link identity is not a property of one entry) */
		const struct idx_entry *l = idx_manifest_find(&s->dm, s->sm.e[e->hlink - 1].path);
		return l && d->ino == l->ino;
	}
	return s->change[i] != IDX_CONTENT;   /* same target, same device number */
}

/* Make entry e as tmp in pd: a symlink, a hard link to its leader, a fifo
 * or a device. 0, -1 with errno, 1 when it is not ours to make, or 2 for a
 * hard link whose leader never arrived (its failure, or the sender's word
 * that it vanished or changed, was counted and said: not one more). */
static int make_entry(struct rstate *s, const struct idx_entry *e, int follower, int pd,
                      const char *tmp)
{
	if (e->type == IDX_LNK)
		return symlinkat(e->link, pd, tmp);
	if (e->type == IDX_FIFO)
		return mkfifoat(pd, tmp, 0600);
	if (!follower) {
		if (geteuid() != 0)
			return 1;   /* devices need root, as with rsync */
		return mknodat(pd, tmp, (e->type == IDX_CHR ? S_IFCHR : S_IFBLK) | 0600, e->rdev);
	}
	const struct idx_entry *leader = &s->sm.e[e->hlink - 1];
	if (!s->written[e->hlink - 1] && !idx_manifest_find(&s->dm, leader->path))
		return 2;   /* the leader never arrived: its failure was counted */
	const char *lname;
	int ld = recv_open_parent(s->root, leader->path, &lname);
	if (ld < 0)
		return -1;
	int rc = linkat(ld, lname, pd, tmp, 0);
	int err = errno;
	close(ld);
	errno = err;
	return rc;
}

/* Metadata on the new entry tmp in pd (a follower shares its leader's). */
static void entry_meta(struct rstate *s, const struct idx_entry *e, int follower, int pd,
                       const char *tmp)
{
	if (e->type == IDX_LNK) {
		recv_apply_link(s, pd, tmp, e, RECV_NEW_INODE);
	} else if (!follower) {
		/* a path, never opened for I/O: a device's driver is not asked */
		int fd = openat(pd, tmp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0) {
			recv_apply_special(s, fd, e, RECV_NEW_INODE);
			close(fd);
		}
	}
}

/* tmp in pd over name (old: what DST had there), backed up first with -b.
 * 1 when in place; else tmp is gone (and a failure said). */
static int rename_over(struct rstate *s, int pd, const char *tmp, const char *name,
                       const char *path, const struct idx_entry *old)
{
	if ((s->r->flags & SYNC_F_BACKUP) && old && !(old->flags & GONE) &&
	    old->type != IDX_DIR && recv_backup(s, pd, name, path, 0) < 0) {
		unlinkat(pd, tmp, 0);
		return 0;
	}
	if (renameat(pd, tmp, pd, name) < 0) {
		recv_fail(s, path, "cannot rename into place", errno);
		unlinkat(pd, tmp, 0);
		return 0;
	}
	return 1;
}

/* Symlinks, hard links, fifos and devices: made after the data, each under
 * a temp name and renamed over whatever is there. */
void recv_make_links(struct rstate *s)
{
	unsigned f = s->r->flags;
	for (size_t i = 0; i < s->sm.n; i++) {
		const struct idx_entry *e = &s->sm.e[i];
		int follower = e->type == IDX_REG && (f & SYNC_F_HARDLINKS) && e->hlink &&
		               e->hlink != i + 1;
		if ((e->type == IDX_REG && !follower) || e->type == IDX_DIR || e->type == IDX_SOCK ||
		    s->change[i] == SKIPPED)
			continue;
		if (link_current(s, i, follower))
			continue;
		const struct idx_entry *d = idx_manifest_find(&s->dm, e->path);
		unsigned bits = recv_item_bits(s, e, d, 0);
		char how = follower ? 'h' : 'c';
		if (f & SYNC_F_DRYRUN) {
			recv_item(s, how, e, bits);
			if (bits & SYNC_ITEM_NEW)
				s->res->created[sync_kind(e->type)]++;
			continue;
		}
		const char *name;
		char tmp[IDX_TEMP_NAME_LEN + 1];
		int pd = recv_open_parent(s->root, e->path, &name);
		if (pd < 0) {
			recv_fail(s, e->path, "cannot open its directory", errno);
			continue;
		}
		/* where DST has nothing, the entry is made under its own name (it
		 * has no content to be seen half-written); else under a temp name,
		 * renamed over the old one */
		const struct idx_entry *old = idx_manifest_find(&s->dm, e->path);
		int fresh = !old || (old->flags & GONE);
		int rc = fresh ? make_entry(s, e, follower, pd, name) : -1;
		if (!fresh || (rc < 0 && errno == EEXIST)) {
			fresh = 0;
			idx_temp_name(tmp);
			rc = make_entry(s, e, follower, pd, tmp);
		}
		if (rc < 0)
			recv_fail(s, e->path, "cannot create", errno);
		if (rc != 0) {
			close(pd);
			continue;
		}
		entry_meta(s, e, follower, pd, fresh ? name : tmp);
		if (fresh || rename_over(s, pd, tmp, name, e->path, old)) {
			s->written[i] = 1;
			STAT_ADD(s->actions, 1);
			if (bits & SYNC_ITEM_NEW)
				STAT_ADD(s->res->created[sync_kind(e->type)], 1);
			recv_item(s, how, e, bits);
		}
		close(pd);
	}
}
