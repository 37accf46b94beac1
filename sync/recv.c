/*
 * The receiving side of a sync: scan DST, read the sender's manifest, plan,
 * take the data, and make DST the copy. Every file is written to a temp file
 * (IDX_TEMP_PREFIX...) in its target directory, each chunk is checked against
 * the sender's digest on arrival, and only a complete, verified file with its
 * metadata is renamed into place: a crash leaves the old file or the new one.
 *
 * Paths come from the peer: the manifest decoder has checked their syntax;
 * here every parent must be a directory of the manifest, and directories are
 * opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) from DST's root,
 * so nothing is ever written through a symlink or outside DST.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <linux/openat2.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/sync_int.h"

struct rfile {
	int fd;              /* temp file, -1 when not open */
	int dirfd;
	char tmp[32];
	uint32_t need, got;  /* messages (chunks) */
	uint8_t *seen;       /* one byte per chunk */
	int failed, done;
	int claimed;         /* small files: a writer thread has it */
};

struct rstate {
	struct role *r;
	int root;
	char *root_path;
	struct idx_manifest sm, dm;
	struct idx_scan_opts so;
	int32_t *fetch;          /* sm index -> files index, or -1 */
	struct rfile *files;
	uint32_t nfiles;
	uint8_t *written;        /* sm index -> content written this run */
	FILE *log;               /* itemized changes */
	char *logbuf;
	size_t loglen;
	uint64_t sender_errors;
	uint32_t shift;          /* sender index = our index + shift */
	uint64_t actions;        /* changes made to DST (0: its index is current) */
	pthread_mutex_t mu;      /* files[], written[], res: the main thread (chunks)
	                            and the unpacker (small files) share them */
	char *cdir;              /* the last parent directory opened for data, */
	int cfd;                 /* and its fd (files arrive directory by directory) */
	struct sync_result *res;
	mode_t umask;
};

static int open_beneath(int root, const char *path, int flags)
{
	if (!*path)
		return dup(root);
	struct open_how how = { .flags = (uint64_t)(flags | O_CLOEXEC),
	                        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
	                                   RESOLVE_NO_MAGICLINKS };
	return (int)syscall(SYS_openat2, root, path, &how, sizeof how);
}

/* Open the directory holding path; *name points at its last component. */
static int open_parent(int root, const char *path, const char **name)
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
	int fd = open_beneath(root, dir, O_RDONLY | O_DIRECTORY);
	free(dir);
	return fd;
}

static void itemize(struct rstate *s, const char *code, const struct idx_entry *e)
{
	char shown[4096];
	if (!s->log)
		return;
	fprintf(s->log, "%s %s%s\n", code, log_path(shown, sizeof shown, e->path),
	        e->type == IDX_DIR ? "/" : "");
}

/* res counters: bumped by the main thread and the archive's writer threads */
#define STAT_ADD(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED)

static void fail_path(struct rstate *s, const char *path, const char *what, int err)
{
	char shown[4096];
	log_err("%s: %s: %s", log_path(shown, sizeof shown, path), what, strerror(err));
	STAT_ADD(s->res->errors, 1);
}

#define GONE 0x80   /* dm entry flag: removed from DST by this run */

/* Remove path from DST, recursively if it is a directory of dm. */
static int remove_path(struct rstate *s, const char *path)
{
	size_t len = strlen(path);
	for (size_t i = s->dm.n; i-- > 0;) {
		const char *p = s->dm.e[i].path;
		if (strncmp(p, path, len) != 0 || (p[len] != '/' && p[len] != '\0'))
			continue;
		s->dm.e[i].flags |= GONE;
		s->actions++;
		const char *name;
		int d = open_parent(s->root, p, &name);
		if (d < 0)
			return -errno;
		int rc = unlinkat(d, name, s->dm.e[i].type == IDX_DIR ? AT_REMOVEDIR : 0);
		int err = errno;
		close(d);
		if (rc < 0 && err != ENOENT) {
			fail_path(s, p, "cannot remove", err);
			return -err;
		}
	}
	return 0;
}

/* Metadata on an open file or directory (before it is renamed into place). */
static void apply_meta_fd(struct rstate *s, int fd, const struct idx_entry *e)
{
	unsigned f = s->r->flags;
	s->actions++;
	if ((f & SYNC_F_OWNER) && geteuid() == 0 && fchown(fd, e->uid, e->gid) < 0)
		fail_path(s, e->path, "cannot set owner", errno);
	mode_t mode = (f & SYNC_F_PERMS) ? e->mode : (e->mode & 0777 & ~s->umask);
	if (e->type == IDX_DIR && !(f & SYNC_F_PERMS))
		mode = 0777 & ~s->umask;
	if (fchmod(fd, mode) < 0)
		fail_path(s, e->path, "cannot set mode", errno);
	if (f & SYNC_F_TIMES) {
		struct timespec ts[2] = { { 0, UTIME_OMIT },
		                          { e->mtime_ns / 1000000000, e->mtime_ns % 1000000000 } };
		if (futimens(fd, ts) < 0)
			fail_path(s, e->path, "cannot set times", errno);
	}
}

static void random_tmp(char *buf, size_t cap)
{
	uint8_t r[8];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		memset(r, 0x5a, sizeof r);   /* O_EXCL still guards the name */
	snprintf(buf, cap, "%s%02x%02x%02x%02x%02x%02x", IDX_TEMP_PREFIX, r[0], r[1], r[2], r[3],
	         r[4], r[5]);
}

/* open_parent() with a one-entry cache: during the data phase no directory
 * changes, and consecutive files mostly share their directory. */
static int open_parent_cached(struct rstate *s, const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;
	if (s->cdir && strlen(s->cdir) == n && !strncmp(s->cdir, path, n))
		return dup(s->cfd);
	const char *name;
	int fd = open_parent(s->root, path, &name);
	if (fd < 0)
		return fd;
	free(s->cdir);
	if (s->cfd >= 0)
		close(s->cfd);
	s->cdir = strndup(path, n);
	s->cfd = s->cdir ? dup(fd) : -1;
	if (s->cfd < 0) {
		free(s->cdir);
		s->cdir = NULL;
	}
	return fd;
}

/* The temp file in f->dirfd (already open). */
static int create_temp(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	/* An unnamed file in the target directory (O_TMPFILE): nothing of it
	 * can be seen, or be left behind, until it is linked in whole. Where
	 * the filesystem cannot, a named temp file. */
	f->tmp[0] = 0;
	f->fd = openat(f->dirfd, ".", O_WRONLY | O_TMPFILE | O_CLOEXEC, 0600);
	for (int tries = 0; f->fd < 0 && tries < 5; tries++) {
		random_tmp(f->tmp, sizeof f->tmp);
		f->fd = openat(f->dirfd, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		               0600);
		if (f->fd >= 0 || errno != EEXIST)
			break;
	}
	if (f->fd < 0) {
		fail_path(s, e->path, "cannot create a temp file", errno);
		close(f->dirfd);
		f->dirfd = -1;
		return -1;
	}
	/* size multi-chunk files up front (chunks land in any order) */
	if (e->nchunks && ftruncate(f->fd, (off_t)e->size) < 0) {
		fail_path(s, e->path, "cannot size the temp file", errno);
		return -1;
	}
	return 0;
}

static int open_temp(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	f->dirfd = open_parent_cached(s, e->path);
	if (f->dirfd < 0) {
		fail_path(s, e->path, "cannot open its directory", errno);
		return -1;
	}
	return create_temp(s, e, f);
}

static void drop_file(struct rfile *f)
{
	if (f->fd >= 0) {
		close(f->fd);
		if (f->tmp[0])
			unlinkat(f->dirfd, f->tmp, 0);
	}
	if (f->dirfd >= 0)
		close(f->dirfd);
	f->fd = f->dirfd = -1;
	free(f->seen);
	f->seen = NULL;
}

/* Give an unnamed (O_TMPFILE) file a name: its own when that is free (a new
 * file: one directory entry written, no rename), else a temp name for the
 * caller to rename over the file it replaces. 1: in place, 0: linked as
 * f->tmp, -1: error (errno). */
static int link_in(struct rfile *f, const char *name)
{
	char proc[40];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
	if (linkat(AT_FDCWD, proc, f->dirfd, name, AT_SYMLINK_FOLLOW) == 0)
		return 1;
	if (errno != EEXIST)
		return -1;
	for (int tries = 0; tries < 5; tries++) {
		random_tmp(f->tmp, sizeof f->tmp);
		if (linkat(AT_FDCWD, proc, f->dirfd, f->tmp, AT_SYMLINK_FOLLOW) == 0)
			return 0;
		if (errno != EEXIST)
			break;
	}
	f->tmp[0] = 0;
	return -1;
}

/* All chunks in and verified: metadata, then into place. */
static void finish_file(struct rstate *s, size_t i, struct rfile *f)
{
	const struct idx_entry *e = &s->sm.e[i];
	const char *name = strrchr(e->path, '/');
	name = name ? name + 1 : e->path;
	apply_meta_fd(s, f->fd, e);
	int linked = f->tmp[0] ? 0 : link_in(f, name);   /* 1: it is in place */
	int cerr = close(f->fd) < 0 ? errno : 0;
	f->fd = -1;
	if (linked < 0) {
		fail_path(s, e->path, "cannot link into place", errno);
	} else if (cerr) {
		fail_path(s, e->path, "write failed", cerr);
		unlinkat(f->dirfd, linked ? name : f->tmp, 0);   /* new: nothing was there */
	} else if (!linked && renameat(f->dirfd, f->tmp, f->dirfd, name) < 0) {
		fail_path(s, e->path, "cannot rename into place", errno);
		unlinkat(f->dirfd, f->tmp, 0);
	} else {
		f->done = 1;
		s->written[i] = 1;
		STAT_ADD(s->res->files, 1);
	}
	close(f->dirfd);
	f->dirfd = -1;
	free(f->seen);
	f->seen = NULL;
}

/* One message: a chunk of file (id - 1) at off. */
static int take_chunk(struct rstate *s, struct tp_msg *m)
{
	if (m->id <= s->shift || m->id - s->shift > s->sm.n || s->fetch[m->id - 1 - s->shift] < 0)
		return -EPROTO;
	size_t i = (size_t)(m->id - 1 - s->shift);
	const struct idx_entry *e = &s->sm.e[i];
	struct rfile *f = &s->files[s->fetch[i]];
	uint64_t k = m->off / IDX_CHUNK_SIZE;
	uint64_t want = e->size - m->off < IDX_CHUNK_SIZE ? e->size - m->off : IDX_CHUNK_SIZE;
	/* small files come only in the archive (whose writer threads own them) */
	if (e->size < SYNC_SMALL || m->off % IDX_CHUNK_SIZE || m->off >= e->size ||
	    m->len != want || k >= f->need)
		return -EPROTO;
	if (f->failed || f->done)
		return 0;
	if (f->seen && f->seen[k])
		return -EPROTO;   /* the same chunk twice */
	uint8_t h[IDX_HASH_LEN];
	idx_hash_buf(m->data, m->len, h);
	const uint8_t *expect = e->nchunks ? e->chunks + k * IDX_HASH_LEN : e->hash;
	if (memcmp(h, expect, IDX_HASH_LEN) != 0) {
		char shown[4096];
		log_err("%s: chunk %llu does not match the sender's hash: the file changed "
		        "while it was sent, or was damaged in transit; it is left as it was",
		        log_path(shown, sizeof shown, e->path), (unsigned long long)k);
		STAT_ADD(s->res->errors, 1);
		f->failed = 1;
		drop_file(f);
		return 0;
	}
	if (f->fd < 0 && open_temp(s, e, f) < 0) {
		f->failed = 1;
		drop_file(f);
		return 0;
	}
	for (uint32_t done = 0; done < m->len;) {
		ssize_t n = pwrite(f->fd, (uint8_t *)m->data + done, m->len - done,
		                   (off_t)(m->off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fail_path(s, e->path, "write failed", n < 0 ? errno : EIO);
			f->failed = 1;
			drop_file(f);
			return errno == ENOSPC ? -ENOSPC : 0;
		}
		done += (uint32_t)n;
	}
	if (f->seen)
		f->seen[k] = 1;
	STAT_ADD(s->res->bytes, m->len);
	if (++f->got == f->need)
		finish_file(s, i, f);
	return 0;
}

/* A parent of every entry must be a directory of the manifest. */
static int check_tree(const struct idx_manifest *m)
{
	char *buf = malloc(IDX_PATH_MAX + 1);
	int rc = 0;
	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < m->n && rc == 0; i++) {
		const char *slash = strrchr(m->e[i].path, '/');
		if (!slash)
			continue;
		size_t n = (size_t)(slash - m->e[i].path);
		memcpy(buf, m->e[i].path, n);
		buf[n] = '\0';
		const struct idx_entry *p = idx_manifest_find(m, buf);
		if (!p || p->type != IDX_DIR)
			rc = -EPROTO;
	}
	free(buf);
	return rc;
}

/* Read the manifest frames. */
static int read_manifest(struct rstate *s)
{
	struct ctl *c = s->r->ctl;
	uint8_t *all = NULL;
	size_t len = 0;
	int rc;
	for (;;) {
		uint8_t type;
		size_t n;
		if ((rc = ctl_recv(c, &type, &n)) < 0)
			break;
		if (type == CTL_ERROR) {
			rc = -ECANCELED;
			log_err("the sender failed: %s", (char *)c->buf + 4);
			s->res->code = n >= 4 ? get_u32(c->buf) : RD_EXIT_PROTO;
			break;
		}
		if (type == CTL_MANIFEST_END && n == 8) {
			s->sender_errors = get_u64(c->buf);
			rc = 0;
			break;
		}
		if (type != CTL_MANIFEST || len + n > ((size_t)4 << 30)) {
			rc = -EPROTO;
			break;
		}
		uint8_t *b = realloc(all, len + n);
		if (!b) {
			rc = -ENOMEM;
			break;
		}
		all = b;
		memcpy(all + len, c->buf, n);
		len += n;
	}
	if (rc == 0 && (idx_manifest_decode(all, len, &s->sm) < 0 || check_tree(&s->sm) < 0))
		rc = -EPROTO;
	free(all);
	return rc;
}

/* Does DST's entry need new content from the sender? */
static int content_differs(const struct rstate *s, const struct idx_entry *a,
                           const struct idx_entry *b)
{
	if (a->size != b->size)
		return 1;
	if (s->r->flags & SYNC_F_CHECKSUM)
		return memcmp(a->hash, b->hash, IDX_HASH_LEN) != 0;
	/* rsync's quick check: same size and mtime is the same file */
	return a->mtime_ns != b->mtime_ns;
}

static int meta_differs(const struct rstate *s, const struct idx_entry *a,
                        const struct idx_entry *b)
{
	unsigned f = s->r->flags;
	if ((f & SYNC_F_PERMS) && a->type != IDX_LNK && a->mode != b->mode)
		return 1;
	if ((f & SYNC_F_OWNER) && geteuid() == 0 && (a->uid != b->uid || a->gid != b->gid))
		return 1;
	if ((f & SYNC_F_TIMES) && a->type == IDX_REG && a->mtime_ns != b->mtime_ns)
		return 1;
	return 0;
}

/* Decide, for every sender entry, what to do; remove what is in the way;
 * create directories. Fills fetch[] and the itemized log. */
static int plan(struct rstate *s, uint32_t **want, uint32_t *nwant)
{
	unsigned f = s->r->flags;
	int dry = f & SYNC_F_DRYRUN;
	*want = calloc(s->sm.n ? s->sm.n : 1, sizeof **want);
	s->fetch = malloc((s->sm.n ? s->sm.n : 1) * sizeof *s->fetch);
	s->files = calloc(s->sm.n ? s->sm.n : 1, sizeof *s->files);
	s->written = calloc(s->sm.n ? s->sm.n : 1, 1);
	if (!*want || !s->fetch || !s->files || !s->written)
		return -ENOMEM;
	*nwant = 0;
	for (size_t i = 0; i < s->sm.n; i++) {
		const struct idx_entry *e = &s->sm.e[i];
		const struct idx_entry *d = idx_manifest_find(&s->dm, e->path);
		s->fetch[i] = -1;
		if (d && d->type != e->type) {
			itemize(s, e->type == IDX_DIR ? "cd+++++++++" : "*replacing ", d);
			if (!dry && remove_path(s, d->path) < 0)
				continue;
			d = NULL;
		}
		if (e->type == IDX_DIR) {
			if (!d && *e->path) {
				itemize(s, "cd+++++++++", e);
				if (!dry) {
					const char *name;
					int pd = open_parent(s->root, e->path, &name);
					if (pd < 0 || mkdirat(pd, name, 0700) < 0)
						fail_path(s, e->path, "cannot create directory", errno);
					else {
						s->written[i] = 1;
						s->actions++;
					}
					if (pd >= 0)
						close(pd);
				}
			}
			continue;
		}
		if (e->type != IDX_REG)
			continue;   /* links and specials after the data */
		if ((f & SYNC_F_HARDLINKS) && e->hlink && e->hlink != i + 1)
			continue;   /* a follower: linked to its leader later */
		if (d && !content_differs(s, e, d)) {
			if (meta_differs(s, e, d)) {
				itemize(s, ".f..t.p....", e);
				s->res->meta++;
			}
			continue;
		}
		itemize(s, d ? ">f.st......" : ">f+++++++++", e);
		struct rfile *rf = &s->files[s->nfiles];
		rf->fd = rf->dirfd = -1;
		rf->need = e->nchunks ? e->nchunks : 1;
		if (e->nchunks && !(rf->seen = calloc(e->nchunks, 1)))
			return -ENOMEM;
		s->fetch[i] = (int32_t)s->nfiles++;
		if (e->size == 0) {   /* nothing to send: make it now */
			if (!dry && open_temp(s, e, rf) == 0)
				finish_file(s, i, rf);
			s->fetch[i] = -1;
			continue;
		}
		(*want)[(*nwant)++] = (uint32_t)i;
	}
	return 0;
}

/* Symlinks, hard links, fifos and devices: made after the data. */
static void make_links(struct rstate *s)
{
	unsigned f = s->r->flags;
	for (size_t i = 0; i < s->sm.n; i++) {
		const struct idx_entry *e = &s->sm.e[i];
		const struct idx_entry *d = idx_manifest_find(&s->dm, e->path);
		int follower = e->type == IDX_REG && (f & SYNC_F_HARDLINKS) && e->hlink &&
		               e->hlink != i + 1;
		if (e->type == IDX_REG && !follower)
			continue;
		if (e->type == IDX_DIR || e->type == IDX_SOCK)
			continue;
		if (d && d->type == e->type) {
			if (e->type == IDX_LNK && !strcmp(d->link, e->link))
				continue;
			if (follower && d->ino == idx_manifest_find(&s->dm, s->sm.e[e->hlink - 1].path)->ino)
				continue;
			if ((e->type == IDX_FIFO || e->type == IDX_CHR || e->type == IDX_BLK) &&
			    d->rdev == e->rdev)
				continue;
		}
		itemize(s, e->type == IDX_LNK ? "cL+++++++++" : follower ? "hf+++++++++" : "cD+++++++++", e);
		if (f & SYNC_F_DRYRUN)
			continue;
		const char *name;
		char tmp[32];
		int pd = open_parent(s->root, e->path, &name);
		if (pd < 0) {
			fail_path(s, e->path, "cannot open its directory", errno);
			continue;
		}
		random_tmp(tmp, sizeof tmp);
		int rc;
		if (e->type == IDX_LNK)
			rc = symlinkat(e->link, pd, tmp);
		else if (follower) {
			int ld = -1;
			const char *lname;
			if (!s->written[e->hlink - 1] &&
			    !idx_manifest_find(&s->dm, s->sm.e[e->hlink - 1].path)) {
				errno = ENOENT;
				rc = -1;
			} else {
				ld = open_parent(s->root, s->sm.e[e->hlink - 1].path, &lname);
				rc = ld < 0 ? -1 : linkat(ld, lname, pd, tmp, 0);
			}
			if (ld >= 0)
				close(ld);
		} else if (e->type == IDX_FIFO)
			rc = mkfifoat(pd, tmp, 0600);
		else if (geteuid() == 0)
			rc = mknodat(pd, tmp, (e->type == IDX_CHR ? S_IFCHR : S_IFBLK) | 0600, e->rdev);
		else {
			close(pd);
			continue;   /* devices need root, as with rsync */
		}
		if (rc < 0) {
			fail_path(s, e->path, "cannot create", errno);
			close(pd);
			continue;
		}
		if (e->type == IDX_LNK) {
			if ((f & SYNC_F_OWNER) && geteuid() == 0)
				fchownat(pd, tmp, e->uid, e->gid, AT_SYMLINK_NOFOLLOW);
			if (f & SYNC_F_TIMES) {
				struct timespec ts[2] = { { 0, UTIME_OMIT },
				        { e->mtime_ns / 1000000000, e->mtime_ns % 1000000000 } };
				utimensat(pd, tmp, ts, AT_SYMLINK_NOFOLLOW);
			}
		} else if (!follower) {
			int fd = openat(pd, tmp, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
			if (fd >= 0) {
				apply_meta_fd(s, fd, e);
				close(fd);
			}
		}
		if (renameat(pd, tmp, pd, name) < 0) {
			fail_path(s, e->path, "cannot rename into place", errno);
			unlinkat(pd, tmp, 0);
		} else {
			s->written[i] = 1;
			s->actions++;
		}
		close(pd);
	}
}

/* Metadata of files whose content was already right, then of directories,
 * deepest first (writing into a directory changes its mtime). */
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

static int dir_meta_differs(const struct rstate *s, const struct idx_entry *a,
                            const struct idx_entry *b)
{
	unsigned f = s->r->flags;
	return ((f & SYNC_F_PERMS) && a->mode != b->mode) ||
	       ((f & SYNC_F_TIMES) && a->mtime_ns != b->mtime_ns) ||
	       ((f & SYNC_F_OWNER) && geteuid() == 0 && (a->uid != b->uid || a->gid != b->gid));
}

/* Metadata of files whose content was already right, then of directories,
 * deepest first (writing into a directory changes its mtime): only those
 * that are new, differ, or had entries written or removed this run. */
static void fix_meta(struct rstate *s)
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
	for (size_t k = s->sm.n; k-- > 0;) {
		const struct idx_entry *e = &s->sm.e[k];
		if (e->type != IDX_DIR && (e->type != IDX_REG || s->written[k]))
			continue;
		const struct idx_entry *d = idx_manifest_find(&s->dm, e->path);
		if (e->type == IDX_REG && (!d || d->type != IDX_REG || !meta_differs(s, e, d)))
			continue;
		if (e->type == IDX_DIR && d && d->type == IDX_DIR && !(d->flags & GONE) &&
		    !touched[k] && !s->written[k] && !dir_meta_differs(s, e, d))
			continue;
		if (e->type == IDX_REG && (s->r->flags & SYNC_F_HARDLINKS) && e->hlink &&
		    e->hlink != k + 1)
			continue;
		int fd = open_beneath(s->root, e->path, O_RDONLY | O_NOFOLLOW |
		                      (e->type == IDX_DIR ? O_DIRECTORY : O_NONBLOCK));
		if (fd < 0) {
			fail_path(s, *e->path ? e->path : ".", "cannot open to set metadata", errno);
			continue;
		}
		apply_meta_fd(s, fd, e);
		close(fd);
	}
	free(touched);
}

static void delete_extra(struct rstate *s)
{
	unsigned f = s->r->flags;
	if (!(f & SYNC_F_DELETE))
		return;
	if (s->sender_errors) {
		log_err("not deleting anything: the sender could not read %llu entries "
		        "(see its messages)", (unsigned long long)s->sender_errors);
		STAT_ADD(s->res->errors, 1);
		return;
	}
	for (size_t i = s->dm.n; i-- > 0;) {
		const struct idx_entry *d = &s->dm.e[i];
		if (!*d->path || (d->flags & GONE) || idx_manifest_find(&s->sm, d->path))
			continue;
		if (s->log) {
			char shown[4096];
			fprintf(s->log, "*deleting   %s%s\n", log_path(shown, sizeof shown, d->path),
			        d->type == IDX_DIR ? "/" : "");
		}
		s->res->deleted++;
		if (f & SYNC_F_DRYRUN)
			continue;
		s->dm.e[i].flags |= GONE;
		s->actions++;
		const char *name;
		int pd = open_parent(s->root, d->path, &name);
		if (pd < 0 || unlinkat(pd, name, d->type == IDX_DIR ? AT_REMOVEDIR : 0) < 0)
			if (errno != ENOENT)
				fail_path(s, d->path, "cannot delete", errno);
		if (pd >= 0)
			close(pd);
	}
}

/* The receiver's new index: what it holds now, hashes it can vouch for. */
static void save_index(struct rstate *s)
{
	struct idx_manifest now = { 0 };
	for (size_t i = 0; i < s->sm.n; i++) {
		const struct idx_entry *e = &s->sm.e[i];
		struct stat st;
		if (e->type == IDX_REG && !s->written[i]) {
			/* untouched by this run: its row is what the scan saw and
			 * stored (a change since shows at the next scan's stat) */
			const struct idx_entry *d = idx_manifest_find(&s->dm, e->path);
			if (d && d->type == IDX_REG)
				idx_manifest_add(&now, d);
			continue;
		}
		if (*e->path ? fstatat(s->root, e->path, &st, AT_SYMLINK_NOFOLLOW) < 0
		             : fstat(s->root, &st) < 0)
			continue;
		struct idx_entry n = *e;
		n.dev = st.st_dev;
		n.ino = st.st_ino;
		n.nlink = (uint32_t)st.st_nlink;
		n.size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
		n.mode = st.st_mode & 07777;
		n.uid = st.st_uid;
		n.gid = st.st_gid;
		n.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		n.ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
		if ((e->type == IDX_REG) != S_ISREG(st.st_mode))
			continue;
		idx_manifest_add(&now, &n);
	}
	idx_manifest_sort(&now);
	idx_save(s->root_path, &s->so, &s->dm, &now);
	idx_manifest_free(&now);
}

/* The unpacker's side: small files out of the archive stream. */
static int unpack_open(void *ctx, uint64_t index, uint64_t size)
{
	struct rstate *s = ctx;
	if (index < s->shift || index - s->shift >= s->sm.n)
		return -EPROTO;
	size_t i = (size_t)(index - s->shift);
	const struct idx_entry *e = &s->sm.e[i];
	if (s->fetch[i] < 0 || e->size != size || size >= SYNC_SMALL || size == 0)
		return -EPROTO;
	struct rfile *f = &s->files[s->fetch[i]];
	int fd = -1;   /* stays -1 for a file that failed before */
	/* under the lock: claim the file and get its directory (a cache shared
	 * with the other writer); the file itself is made without it */
	pthread_mutex_lock(&s->mu);
	if (f->claimed) {
		fd = -EPROTO;   /* sent twice */
	} else if (!f->failed) {
		f->claimed = 1;
		f->dirfd = open_parent_cached(s, e->path);
		fd = 0;
	}
	pthread_mutex_unlock(&s->mu);
	if (fd < 0)
		return fd;   /* -EPROTO, or -1: it failed before */
	if (f->dirfd < 0) {
		fail_path(s, e->path, "cannot open its directory", errno);
		f->failed = 1;
		return -1;
	}
	if (create_temp(s, e, f) < 0) {
		f->failed = 1;
		drop_file(f);
		return -1;
	}
	return f->fd;
}

static void unpack_close(void *ctx, uint64_t index, int ok, const uint8_t *hash, uint64_t got)
{
	struct rstate *s = ctx;
	size_t i = (size_t)(index - s->shift);
	const struct idx_entry *e = &s->sm.e[i];
	struct rfile *f = &s->files[s->fetch[i]];
	char shown[4096];
	/* the file is this writer's alone since unpack_open() claimed it */
	if (ok && !memcmp(hash, e->hash, IDX_HASH_LEN)) {
		STAT_ADD(s->res->bytes, got);
		f->got = f->need;
		finish_file(s, i, f);
	} else {
		log_err("%s: %s; it is left as it was", log_path(shown, sizeof shown, e->path),
		        ok ? "does not match the sender's hash (changed while sent, or "
		             "damaged in transit)" : "could not be written");
		STAT_ADD(s->res->errors, 1);
		f->failed = 1;
		drop_file(f);
	}
}

static const struct unpack_ops unpack_ops = { unpack_open, unpack_close };

/* Receive the data of the planned files over the transport. */
static int transfer(struct rstate *s, const uint32_t *want, uint32_t nwant)
{
	struct role *r = s->r;
	struct tp_listener *l;
	struct tp_session *ts = NULL;
	struct tp_opts o = r->tp;
	char key[33];
	uint8_t raw[16];
	if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
		return -EIO;
	for (int i = 0; i < 16; i++)
		snprintf(key + 2 * i, 3, "%02x", raw[i]);
	tp_key_derive(key, 32, o.key);
	o.msg_size = SYNC_MSG_SIZE;
	o.pool_size = SYNC_POOL_SIZE;
	int rc = tp_listen(NULL, 0, &o, &l);
	if (rc < 0)
		return rc;
	/* port, secret (a fresh one per run), and the address to use */
	size_t alen = strlen(r->announce_addr);
	uint8_t msg[2 + 32 + 256];
	put_u16(msg, tp_listener_port(l));
	memcpy(msg + 2, key, 32);
	memcpy(msg + 34, r->announce_addr, alen > 255 ? 255 : alen);
	rc = ctl_send(r->ctl, CTL_DATA, msg, 34 + (alen > 255 ? 255 : alen));
	/* Wait for the sender's data connection, but not for a sender that
	 * gave up: it says so (or vanishes) on the control channel. */
	for (int waited = 0; rc == 0; waited++) {
		rc = tp_accept(l, 500, &ts);
		if (rc != -ETIMEDOUT)
			break;
		struct pollfd pf = { r->ctl->in, POLLIN, 0 };
		if (poll(&pf, 1, 0) > 0) {
			uint8_t type;
			size_t n;
			if (ctl_recv(r->ctl, &type, &n) == 0 && type == CTL_ERROR && n >= 4) {
				log_err("the sender gave up: %s", (char *)r->ctl->buf + 4);
				s->res->code = get_u32(r->ctl->buf);
			}
			rc = -ECONNABORTED;
			break;
		}
		rc = waited < 60 ? 0 : -ETIMEDOUT;   /* 30 s in all */
	}
	tp_listener_free(l);
	explicit_bzero(key, sizeof key);
	if (rc < 0)
		return rc;
	s->res->bytes = 0;
	s->res->transport = tp_kind_name(ts);
	struct progress pg;
	uint64_t total = 0;
	for (uint32_t k = 0; k < nwant; k++)
		total += s->sm.e[want[k]].size;
	progress_start(&pg, r->progress, total, nwant);
	struct unpacker *up = NULL;
	for (;;) {
		struct tp_msg *m;
		rc = tp_msg_recv(ts, &m);
		if (rc != 0)
			break;
		if (m->id == SYNC_ARCHIVE_ID) {
			if (!up && (rc = unpacker_start(&up, ts, &unpack_ops, s)) < 0) {
				tp_msg_release(ts, m);
				break;
			}
			unpacker_push(up, m);   /* it releases m */
			continue;
		}
		pthread_mutex_lock(&s->mu);
		rc = take_chunk(s, m);
		pthread_mutex_unlock(&s->mu);
		tp_msg_release(ts, m);
		progress_update(&pg, s->res->bytes, s->res->files, 0);
		if (rc < 0)
			break;
	}
	if (up) {
		int urc = unpacker_finish(up);
		if (urc < 0 && rc >= 0)
			rc = urc;
	}
	progress_update(&pg, s->res->bytes, s->res->files, 1);
	if (rc == 1) {
		rc = 0;
		for (uint32_t k = 0; k < nwant; k++) {
			struct rfile *f = &s->files[s->fetch[want[k]]];
			if (!f->done && !f->failed) {
				char shown[4096];
				log_err("%s: incomplete (%u of %u chunks came): the sender could not "
				        "read all of it; it is left as it was",
				        log_path(shown, sizeof shown, s->sm.e[want[k]].path), f->got, f->need);
				STAT_ADD(s->res->errors, 1);
				drop_file(f);
			}
		}
		tp_verdict(ts, 0);
	} else if (rc == -ENOSPC || rc == -EPROTO) {
		tp_verdict(ts, -rc);
	}
	tp_close(ts);
	return rc;
}

/* Clean temp files an interrupted run left in the directories we know. */
static void clean_temps(struct rstate *s)
{
	for (size_t i = 0; i < s->dm.n; i++) {
		if (s->dm.e[i].type != IDX_DIR)
			continue;
		int fd = open_beneath(s->root, s->dm.e[i].path, O_RDONLY | O_DIRECTORY);
		DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
		struct dirent *de;
		while (d && (de = readdir(d)))
			if (!strncmp(de->d_name, IDX_TEMP_PREFIX, sizeof IDX_TEMP_PREFIX - 1))
				unlinkat(fd, de->d_name, 0);
		if (d)
			closedir(d);
		else if (fd >= 0)
			close(fd);
	}
}

/* Rename the sender's top name `from` to `to` in every path (cp -r A B when
 * B does not exist yet). Order is kept: the prefix is common to all. */
static int map_top(struct idx_manifest *m, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to);
	for (size_t i = 0; i < m->n; i++) {
		char *p = m->e[i].path;
		if (strncmp(p, from, fl) != 0 || (p[fl] != '/' && p[fl] != '\0'))
			return -EPROTO;   /* everything must be under the top name */
		char *n = malloc(tl + strlen(p + fl) + 1);
		if (!n)
			return -ENOMEM;
		memcpy(n, to, tl);
		strcpy(n + tl, p + fl);
		free(p);
		m->e[i].path = n;
	}
	return 0;
}

/* Drop the sender's root entry (its parent directory is not ours to copy). */
static void drop_root(struct idx_manifest *m)
{
	if (m->n == 0 || *m->e[0].path)
		return;
	free(m->e[0].path);
	free(m->e[0].link);
	free(m->e[0].chunks);
	memmove(m->e, m->e + 1, (m->n - 1) * sizeof *m->e);
	m->n--;
	for (size_t i = 0; i < m->n; i++)
		if (m->e[i].hlink)
			m->e[i].hlink--;
}

/* Where DST's root is and what the sender's top name becomes. */
static int choose_root(struct rstate *s, int named, int is_dir, const char *top,
                       char **only, char **mapto)
{
	const char *dst = s->r->path;
	int dry = s->r->flags & SYNC_F_DRYRUN;
	struct stat st;
	int exists = stat(dst, &st) == 0, isdir = exists && S_ISDIR(st.st_mode);
	size_t len = strlen(dst);
	int slash = len > 1 && dst[len - 1] == '/';
	*only = *mapto = NULL;
	if (!named || isdir || slash) {
		if (!exists && !dry && mkdir(dst, 0777) < 0 && errno != EEXIST) {
			log_err("%s: cannot create: %s", dst, strerror(errno));
			return -errno;
		}
		if (exists && !isdir) {
			log_err("%s: not a directory", dst);
			return -ENOTDIR;
		}
		s->root_path = strdup(dst);
		if (named)
			*only = strdup(top);
		return s->root_path ? 0 : -ENOMEM;
	}
	/* DST names the copy itself: its parent is the root */
	char *copy = strdup(dst), *cut = strrchr(copy, '/');
	const char *base = cut ? cut + 1 : copy;
	if (cut == copy)
		s->root_path = strdup("/");
	else if (cut) {
		*cut = '\0';
		s->root_path = strdup(copy);
	} else
		s->root_path = strdup(".");
	*only = strdup(base);
	*mapto = strdup(base);
	free(copy);
	if (exists && is_dir && !isdir) {
		/* replacing a file by a directory: the plan handles the type change */
	}
	return *only && s->root_path ? 0 : -ENOMEM;
}

static void send_log(struct rstate *s)
{
	if (!s->log)
		return;
	fclose(s->log);
	s->log = NULL;
	if (s->r->is_client) {
		fwrite(s->logbuf, 1, s->loglen, stdout);
		fflush(stdout);
		return;
	}
	for (size_t off = 0; off < s->loglen; off += CTL_FRAME_MAX) {
		size_t n = s->loglen - off < CTL_FRAME_MAX ? s->loglen - off : CTL_FRAME_MAX;
		ctl_send(s->r->ctl, CTL_LOG, s->logbuf + off, n);
	}
}

int sync_receiver(struct role *r, struct sync_result *res)
{
	struct rstate s = { .r = r, .root = -1, .res = res, .cfd = -1,
	                    .mu = PTHREAD_MUTEX_INITIALIZER };
	uint32_t *want = NULL, nwant = 0;
	char *only = NULL, *mapto = NULL, *top = NULL;
	uint8_t type;
	size_t n;
	int rc;
	memset(res, 0, sizeof *res);
	s.umask = umask(022);
	umask(s.umask);
	if (r->flags & SYNC_F_ITEMIZE)
		s.log = open_memstream(&s.logbuf, &s.loglen);

	/* 1. what the sender sends: a directory's contents, or one named entry */
	rc = ctl_recv(r->ctl, &type, &n);
	if (rc == 0 && type == CTL_ERROR) {
		log_err("%s", (char *)r->ctl->buf + 4);
		res->code = n >= 4 ? get_u32(r->ctl->buf) : RD_EXIT_PROTO;
		rc = -ECANCELED;
		goto out;
	}
	if (rc == 0 && (type != CTL_READY || n < 4 || n != 4 + (size_t)get_u16(r->ctl->buf + 2)))
		rc = -EPROTO;
	if (rc < 0)
		goto out;
	int named = r->ctl->buf[0], is_dir = r->ctl->buf[1];
	top = strndup((char *)r->ctl->buf + 4, get_u16(r->ctl->buf + 2));
	if (!top || (named && idx_path_check(top, strlen(top)) < 0) || strchr(top, '/')) {
		rc = -EPROTO;
		goto out;
	}
	if ((rc = choose_root(&s, named, is_dir, top, &only, &mapto)) < 0) {
		res->code = RD_EXIT_SELECT;
		goto out;
	}

	/* 2. our side, scanned while the sender scans its own */
	s.so.only = only;
	if (r->nrules) {   /* excluded files of DST are neither compared nor deleted */
		s.so.skip = sync_filter_skip;
		s.so.skip_ctx = r;
	}
	struct idx_stats st;
	s.root = open(s.root_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s.root < 0 && !(errno == ENOENT && (r->flags & SYNC_F_DRYRUN))) {
		log_err("%s: %s", s.root_path, strerror(errno));
		res->code = RD_EXIT_SELECT;
		rc = -errno;
		goto out;
	}
	if (s.root >= 0 && (rc = idx_scan(s.root_path, &s.so, &s.dm, &st)) < 0) {
		res->code = RD_EXIT_SELECT;
		goto out;
	}
	if (st.temps && !(r->flags & SYNC_F_DRYRUN) && s.root >= 0)
		clean_temps(&s);

	/* 3. their manifest, in our names */
	if ((rc = read_manifest(&s)) < 0)
		goto out;
	if (named) {
		s.shift = s.sm.n && !*s.sm.e[0].path;
		drop_root(&s.sm);
		if (mapto && strcmp(top, mapto) && (rc = map_top(&s.sm, top, mapto)) < 0)
			goto out;
	}
	if (named && s.root >= 0)
		drop_root(&s.dm);   /* the parent directory is not part of the copy */

	/* 4. the plan: what to fetch; directories made, obstacles removed */
	if (s.root < 0)
		s.root = open("/", O_RDONLY | O_DIRECTORY);   /* dry run into nothing */
	if ((rc = plan(&s, &want, &nwant)) < 0)
		goto out;
	uint8_t *pl = malloc(4 + (size_t)nwant * 4);
	if (!pl) {
		rc = -ENOMEM;
		goto out;
	}
	uint32_t send_n = (r->flags & SYNC_F_DRYRUN) ? 0 : nwant;
	put_u32(pl, send_n);
	for (uint32_t k = 0; k < send_n; k++)
		put_u32(pl + 4 + 4 * k, want[k] + s.shift);
	rc = ctl_send(r->ctl, CTL_PLAN, pl, 4 + (size_t)send_n * 4);
	free(pl);
	if (rc < 0)
		goto out;

	/* 5. the data */
	if (send_n && (rc = transfer(&s, want, nwant)) < 0) {
		if (rc == -EACCES)
			res->code = RD_EXIT_AUTH;
		goto out;
	}
	/* 6. links, deletions, metadata, and the index for next time */
	make_links(&s);
	delete_extra(&s);
	fix_meta(&s);
	/* the scan stored what DST held; only a changed DST needs it again */
	if (!(r->flags & SYNC_F_DRYRUN) && s.actions)
		save_index(&s);
	rc = 0;
out:
	if (rc < 0 && !res->code)
		res->code = rd_exit_code(rc);
	if (!res->code && (res->errors || s.sender_errors))
		res->code = RD_EXIT_PARTIAL;
	send_log(&s);
	uint8_t done[RESULT_LEN];
	const char *transport = res->transport;
	result_put(done, res);
	res->transport = transport;
	if (rc != -ECONNRESET)
		ctl_send(r->ctl, CTL_DONE, done, sizeof done);
	for (uint32_t k = 0; k < s.nfiles; k++) {
		if (s.files[k].fd >= 0 || s.files[k].dirfd >= 0)
			drop_file(&s.files[k]);
		free(s.files[k].seen);
	}
	if (s.log)
		fclose(s.log);
	free(s.logbuf);
	free(want);
	free(s.fetch);
	free(s.files);
	free(s.written);
	free(only);
	free(mapto);
	free(top);
	free(s.root_path);
	free(s.cdir);
	if (s.cfd >= 0)
		close(s.cfd);
	if (s.root >= 0)
		close(s.root);
	idx_manifest_free(&s.sm);
	idx_manifest_free(&s.dm);
	return res->code;
}
