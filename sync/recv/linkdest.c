/*
 * --link-dest=DIR (up to 20, in order), as rsync: a file the plan would
 * fetch is, when DIR holds the same file at the same relative path, hard-
 * linked from there instead (nightly snapshots: what did not change takes
 * no space and no transfer). "The same" is rsync's: the quick check (size
 * and mtime) or, with -c, the content (every chunk digest of the sender's
 * manifest), and every attribute the run keeps (permissions with -p, the
 * mtime with -t, owner as root with -o, the group with -g (or --chown),
 * xattrs with -X, ACLs with -A), since a link shares them. A relative DIR
 * is relative to DST's root, as rsync's.
 *
 * Paths come from the sender's manifest: the file in DIR is reached with
 * sync_open_beneath() from DIR's fd, never through a symlink, and the link
 * made is checked to be the inode that was compared.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io.h"
#include "common/log.h"
#include "sync/recv/recv_int.h"

void recv_link_dest_start(struct rstate *s)
{
	const struct sync_opts *o = s->r->o;
	s->nld = 0;
	for (int k = 0; o && k < o->nlink_dest; k++) {
		const char *d = o->link_dest[k];
		/* relative: under DST, never through a symlink the sender made */
		int fd = d[0] == '/' ? open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
		                     : sync_dir_beneath(s->root, d, 0);
		if (fd < 0)   /* as rsync: said, and the run goes on without it */
			log_warn("--link-dest %s%s%s: %s (not used)", d[0] == '/' ? "" : s->root_path,
			         d[0] == '/' ? "" : "/", d, strerror(d[0] == '/' ? errno : -fd));
		else
			s->ldfd[s->nld++] = fd;
	}
}

/* Does the file open as fd hold e's content, chunk by chunk? */
static int same_content(int fd, const struct idx_entry *e)
{
	size_t cap = e->size < IDX_CHUNK_SIZE ? (size_t)e->size : (size_t)IDX_CHUNK_SIZE;
	uint8_t *buf = malloc(cap ? cap : 1), h[IDX_HASH_LEN];
	int same = buf != NULL;
	for (uint64_t off = 0, k = 0; same && off < e->size; off += cap, k++) {
		size_t want = e->size - off < cap ? (size_t)(e->size - off) : cap;
		size_t n;
		same = io_pread_full(fd, buf, want, off, &n) == 0 && n == want;
		idx_hash_buf(buf, same ? want : 0, h);
		same = same &&
		       !memcmp(h, e->nchunks ? e->chunks + k * IDX_HASH_LEN : e->hash, IDX_HASH_LEN);
	}
	free(buf);
	return same;
}

/* Is st (DIR's file at e's path, open as fd) the same file as e? */
static int same_file(struct rstate *s, int fd, const struct stat *st,
                     const struct idx_entry *e)
{
	unsigned f = s->r->flags;
	int64_t mt = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	if (!S_ISREG(st->st_mode) || (uint64_t)st->st_size != e->size)
		return 0;
	if ((f & SYNC_F_PERMS) && (st->st_mode & 07777) != e->mode)
		return 0;
	if ((s->set_uid && e->uid != IDX_ID_NONE && st->st_uid != e->uid) ||
	    (s->set_gid && e->gid != IDX_ID_NONE && st->st_gid != e->gid))
		return 0;
	if (((f & SYNC_F_TIMES) || !(f & SYNC_F_CHECKSUM)) && mt != e->mtime_ns)
		return 0;
	if (!recv_extra_same(s, fd, st, e))
		return 0;
	return !(f & SYNC_F_CHECKSUM) || same_content(fd, e);
}

/* DIR k's file at e's path: open (read-only, beneath DIR), its stat. */
static int open_in(const struct rstate *s, int k, const char *path, struct stat *st)
{
	int fd = sync_open_beneath(s->ldfd[k], path, O_RDONLY | O_NONBLOCK);
	if (fd >= 0 && fstat(fd, st) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Link DIR k's file (inode ino) as name in pd: under a temp name, checked,
 * then renamed into place (over the old file, kept first with -b). */
static int link_from(struct rstate *s, int k, const struct idx_entry *e, ino_t ino, int pd,
                     const char *name, int exists)
{
	const char *lname;
	struct stat st;
	char tmp[IDX_TEMP_NAME_LEN + 1];
	int ld = recv_open_parent(s->ldfd[k], e->path, &lname);
	if (ld < 0)
		return -1;
	idx_temp_name(tmp);
	int rc = linkat(ld, lname, pd, tmp, 0);
	close(ld);
	if (rc < 0)
		return -1;   /* e.g. EXDEV: DIR on another filesystem; sent instead */
	if (fstatat(pd, tmp, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_ino != ino ||
	    (exists && (s->r->flags & SYNC_F_BACKUP) && recv_backup(s, pd, name, e->path, 0) < 0) ||
	    renameat(pd, tmp, pd, name) < 0) {
		unlinkat(pd, tmp, 0);   /* swapped since it was compared, or no room */
		return -1;
	}
	return 0;
}

int recv_link_dest(struct rstate *s, size_t i, int exists)
{
	const struct idx_entry *e = &s->sm.e[i];
	for (int k = 0; k < s->nld; k++) {
		struct stat st;
		int fd = open_in(s, k, e->path, &st);
		if (fd < 0)
			continue;
		int same = same_file(s, fd, &st, e);
		close(fd);
		if (!same)
			continue;
		if (s->r->flags & SYNC_F_DRYRUN)
			return 1;
		const char *name;
		int pd = recv_open_parent(s->root, e->path, &name);
		int rc = pd < 0 ? -1 : link_from(s, k, e, st.st_ino, pd, name, exists);
		if (pd >= 0)
			close(pd);
		if (rc == 0) {
			s->written[i] = 1;
			STAT_ADD(s->actions, 1);
			return 1;
		}
	}
	return 0;
}
