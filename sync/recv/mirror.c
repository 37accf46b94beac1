/*
 * The delete trap's rule (rdcp(1), "--sync --delete A DST"): SRC named
 * without a trailing '/' goes with --delete only into a DST that is empty
 * or missing, is named as SRC is, or that rdcp made a mirror of a SRC of
 * that name (DST's index keeps the note, naming DST by device, inode and
 * birth time). Anything else is refused before DST changes, whatever
 * names the two share.
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
#include "sync/recv/recv_int.h"

/* DST's last name as written ("x/backup/" and "x/backup/." are "backup"),
 * or the real directory's for ".", ".." and "/". malloc'd; NULL: ENOMEM. */
static char *dst_name(const char *dst, const char *root_path)
{
	char *p = strdup(dst);
	size_t len = p ? strlen(p) : 0;
	while (len > 1 && (p[len - 1] == '/' || (p[len - 1] == '.' && p[len - 2] == '/')))
		p[--len] = '\0';
	const char *base = p ? strrchr(p, '/') : NULL;
	base = base ? base + 1 : p;
	if (base && *base && strcmp(base, ".") && strcmp(base, "..")) {
		memmove(p, base, strlen(base) + 1);
		return p;
	}
	free(p);
	char *real = realpath(root_path, NULL);
	if (!real)
		return strdup(dst);   /* (shown as written; no name matches it) */
	base = strrchr(real, '/');
	p = strdup(base && base[1] ? base + 1 : real);
	free(real);
	return p;
}

/* The index note naming the SRC a DST was made a mirror of:
 * "MAJOR:MINOR:INO:BIRTH:NAME", the DST directory's own identity and SRC's
 * name, so that a
 * directory removed and made again under the same path is not taken for
 * the mirror rdcp made. */
#define MIRROR_NOTE "mirror_of"

/* The names in directory root, as they are on disk (not as the scan, which
 * filters and --files-from narrow, saw them), but rdcp's own temp names;
 * UINT64_MAX when it cannot be listed. */
static uint64_t top_names(int root)
{
	int fd = dup(root);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return UINT64_MAX;
	}
	uint64_t n = 0;
	struct dirent *de;
	rewinddir(d);
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		     !idx_is_temp_name(de->d_name);
	closedir(d);
	return n;
}

/* The note's value for the DST directory open at root and SRC's name:
 * malloc'd, or NULL. A directory removed and made again often gets the
 * freed inode number back: its birth time (where the filesystem keeps one)
 * tells the two apart. */
static char *mirror_note(int root, const char *top)
{
	struct statx sx;
	char *v = NULL;
	if (statx(root, "", AT_EMPTY_PATH, STATX_INO | STATX_BTIME, &sx) < 0)
		return NULL;
	int born = (sx.stx_mask & STATX_BTIME) != 0;
	if (asprintf(&v, "%u:%u:%llu:%lld.%u:%s", sx.stx_dev_major, sx.stx_dev_minor,
	             (unsigned long long)sx.stx_ino, born ? (long long)sx.stx_btime.tv_sec : 0,
	             born ? sx.stx_btime.tv_nsec : 0, top) < 0)
		return NULL;
	return v;
}

/*
 * rsync's habit, `--sync --delete A backup/` meaning backup/A, would delete
 * everything of backup/ that is not in A. A SRC named without a trailing
 * '/' (READY_MIRROR) into a DST that has entries is a mirror refresh only
 * when DST bears SRC's name (A into x/A) or when rdcp made DST a mirror of
 * a SRC of that name (it was empty then: DST's index keeps the note); else
 * refused before anything changes (exit 3), whatever names they share.
 * 0 or -EEXIST (said).
 */
int recv_check_mirror(struct rstate *s)
{
	unsigned fl = s->r->flags;
	if (!s->mirror || s->root < 0)
		return 0;   /* contents asked outright, or a dry run into nothing */
	if (s->r->o && s->r->o->windows && s->r->o->round)
		return 0;   /* --windows: the first window's verdict is the run's (a
		               later one finds DST filled by the first) */
	uint64_t top = top_names(s->root);
	char *mine = mirror_note(s->root, s->top);
	if (!top) {
		/* a new mirror: the note lets the next runs --delete (one that
		 * cannot be stored costs them only a refusal, said then) */
		if (!(fl & SYNC_F_DRYRUN) && mine)
			(void)idx_note_set(s->root_path, &s->so, MIRROR_NOTE, mine);
		free(mine);
		return 0;
	}
	if (!(fl & SYNC_F_DELETE)) {
		free(mine);
		return 0;
	}
	char *name = dst_name(s->r->path, s->root_path), *note = NULL;
	int ok = name && !strcmp(name, s->top);
	if (!ok && mine && idx_note_get(s->root_path, &s->so, MIRROR_NOTE, &note) == 0 && note)
		ok = !strcmp(note, mine);
	free(note);
	free(mine);
	if (ok) {
		free(name);
		return 0;
	}
	const char *dst = s->r->path;
	size_t dl = strlen(dst);
	char shown[300], src[300];
	log_path(shown, sizeof shown, dst);
	log_path(src, sizeof src, s->top);
	log_err("refusing --sync --delete: SRC '%s' has no trailing '/' and DST '%s' (%llu "
	        "entr%s) is neither named '%s' nor a mirror rdcp made of %s, so all it holds "
	        "that %s does not would be deleted. To copy %s into it, write DST as '%s%s%s'; "
	        "to make '%s' a mirror of %s's contents, write SRC as '%s/'",
	        src, shown, (unsigned long long)top, top == 1 ? "y" : "ies", src, src, src,
	        src, shown, dl && dst[dl - 1] == '/' ? "" : "/", src, shown, src, src);
	free(name);
	s->res->code = RD_EXIT_SELECT;
	return -EEXIST;
}

