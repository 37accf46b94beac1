/*
 * Backups (-b, --backup-dir, --suffix), as rsync makes them: a file of DST
 * that this run replaces or deletes is kept as NAME~ beside it (--suffix),
 * or under --backup-dir at the same relative path (no suffix unless one is
 * given), the directories made as needed. A replaced file is first linked
 * to its backup and only then is the new file renamed over it; a deleted
 * one is renamed to its backup. So a crash at any moment leaves the old
 * file or the new one, and maybe a backup: never nothing.
 *
 * Paths below the backup directory come from the sender's manifest: every
 * directory is made and opened beneath the backup directory's fd
 * (sync_open_beneath), never through a symlink.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "sync/recv/recv_int.h"

int recv_backup_start(struct rstate *s)
{
	const struct sync_opts *o = s->r->o;
	const char *bd = o->backup_dir;
	s->bfd = -1;
	s->bsuffix = o->backup_suffix ? o->backup_suffix : bd ? "" : "~";
	if (!(s->r->flags & SYNC_F_BACKUP) || !bd)
		return 0;
	/* inside DST (relative, no ".."): kept from --delete, as rsync's
	 * protect rule for it */
	if (bd[0] != '/' && !strstr(bd, "..")) {
		const char *p = bd;
		while (p[0] == '.' && p[1] == '/')
			p += 2;
		size_t n = strlen(p);
		while (n && p[n - 1] == '/')
			n--;
		if (n && !(s->bprotect = strndup(p, n)))
			return -ENOMEM;
	}
	if (s->r->flags & SYNC_F_DRYRUN)
		return 0;
	if (bd[0] != '/') {   /* in or near DST: never through a symlink the sender made */
		if ((s->bfd = sync_dir_beneath(s->root, bd, 1)) < 0)
			log_err("%s/%s: cannot open the backup directory: %s%s", s->root_path, bd,
			        strerror(-s->bfd), s->bfd == -ENOTDIR
			        ? " (or a symlink on the way, not followed)" : "");
		return s->bfd < 0 ? s->bfd : 0;
	}
	int rc = sync_mkpath(bd);
	if (rc == 0 && (s->bfd = open(bd, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		rc = -errno;
		log_err("%s: cannot open the backup directory: %s", bd, strerror(errno));
	}
	return rc;
}

int recv_backup_protected(const struct rstate *s, const char *path)
{
	const char *b = s->bprotect;
	size_t n = b ? strlen(b) : 0;
	if (b && !strncmp(path, b, n) && (path[n] == '/' || !path[n]))
		return 1;
	/* -b without --backup-dir: rsync's "P *~": backups are not deleted */
	if (!(s->r->flags & SYNC_F_BACKUP) || s->r->o->backup_dir)
		return 0;
	size_t pl = strlen(path), sl = strlen(s->bsuffix);
	return sl && pl > sl && !strcmp(path + pl - sl, s->bsuffix);
}

/* The directory the backup of path goes into, made as needed: under
 * --backup-dir, the same relative directory; else path's own (dup of
 * dirfd). -1 with errno. */
static int backup_parent(struct rstate *s, int dirfd, const char *path)
{
	if (s->bfd < 0)
		return dup(dirfd);
	int fd = dup(s->bfd);
	const char *p = path, *slash;
	while (fd >= 0 && (slash = strchr(p, '/'))) {
		char comp[256];
		size_t n = (size_t)(slash - p);
		if (n >= sizeof comp) {
			close(fd);
			errno = ENAMETOOLONG;
			return -1;
		}
		memcpy(comp, p, n);
		comp[n] = '\0';
		if (mkdirat(fd, comp, 0777) < 0 && errno != EEXIST) {
			int err = errno;
			close(fd);
			errno = err;
			return -1;
		}
		int next = sync_open_beneath(fd, comp, O_RDONLY | O_DIRECTORY);
		int err = errno;
		close(fd);
		errno = err;
		fd = next;
		p = slash + 1;
	}
	return fd;
}

/* Link name (in dirfd) as bname (in bd), over whatever bname is. */
static int link_over(int dirfd, const char *name, int bd, const char *bname)
{
	if (linkat(dirfd, name, bd, bname, 0) == 0)
		return 0;
	if (errno != EEXIST)
		return -1;
	char tmp[IDX_TEMP_NAME_LEN + 1];
	for (int tries = 0; tries < 5; tries++) {
		idx_temp_name(tmp);
		if (linkat(dirfd, name, bd, tmp, 0) == 0) {
			if (renameat(bd, tmp, bd, bname) == 0)
				return 0;
			int err = errno;
			unlinkat(bd, tmp, 0);
			errno = err;
			return -1;
		}
		if (errno != EEXIST)
			break;
	}
	return -1;
}

int recv_backup(struct rstate *s, int dirfd, const char *name, const char *path, int move)
{
	char bname[512];
	if ((size_t)snprintf(bname, sizeof bname, "%s%s", name, s->bsuffix) >= 256) {
		recv_fail(s, path, "cannot back up (the backup's name is too long)", ENAMETOOLONG);
		return -1;
	}
	int bd = backup_parent(s, dirfd, path);
	int rc = bd < 0 ? -1 : move ? renameat(dirfd, name, bd, bname)
	                            : link_over(dirfd, name, bd, bname);
	int err = errno;
	if (bd >= 0)
		close(bd);
	if (rc < 0 && err == ENOENT && bd >= 0)
		return 0;   /* nothing there any more: nothing to keep */
	if (rc < 0) {
		recv_fail(s, path, err == EXDEV ? "cannot back up (--backup-dir must be on DST's "
		          "filesystem)" : "cannot back up", err);
		return -1;
	}
	STAT_ADD(s->actions, 1);
	return 0;
}
