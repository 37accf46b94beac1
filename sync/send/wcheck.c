/*
 * --windows with --delete: before the receiver deletes in a window's
 * directories, what appeared in them since the window's scan (CTL_WCHECK).
 * A directory renamed away before the scan and back after it (or any
 * entry made meanwhile) is in SRC though the scan did not see it: the
 * receiver must not delete DST's entry of that name. In one round the
 * reads of the renamed directory's files find them gone, and nothing is
 * deleted; with windows those reads may come in a later window, after
 * this one's deletions. A directory whose mtime and ctime are those its
 * scan saw has had no entry made, removed or renamed since: only a
 * changed one is listed again (names only).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/wire.h"
#include "sync/send/send_int.h"

static int64_t ns_of(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Root directory path of the scan as it is now: 1 when it may hold
 * entries its scan did not see, else 0. Changed at or after the scan's
 * stamp (the kernel's coarse clock), its times as scanned vouch for
 * nothing: a rename back in the same tick leaves them as they were. */
static int changed(int root, const char *path, const struct idx_entry *e, int64_t stamp)
{
	struct stat st;
	if (e->mtime_ns >= stamp || e->ctime_ns >= stamp)
		return 1;
	if ((*path ? fstatat(root, path, &st, AT_SYMLINK_NOFOLLOW) : fstat(root, &st)) < 0)
		return errno != ENOENT;   /* gone: nothing in it to keep */
	return !S_ISDIR(st.st_mode) || (uint64_t)st.st_ino != e->ino ||
	       (uint64_t)st.st_dev != e->dev || ns_of(st.st_mtim) != e->mtime_ns ||
	       ns_of(st.st_ctim) != e->ctime_ns;
}

/* The names in directory path that m does not hold, into w (all: past
 * WCHECK_MAX_BYTES). */
static void list_new(int root, const char *path, const struct idx_manifest *m,
                     struct wire_wr *w, uint32_t *count, int *all)
{
	int fd = *path ? openat(root, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
	               : dup(root);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		*all = errno != ENOENT;   /* cannot tell: keep everything */
		return;
	}
	char p[IDX_PATH_MAX + 1];
	for (struct dirent *de; !*all && (de = readdir(d));) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		int l = snprintf(p, sizeof p, "%s%s%s", path, *path ? "/" : "", de->d_name);
		if (l < 0 || (size_t)l >= sizeof p || idx_manifest_find(m, p))
			continue;
		if (w->len + 2 + (size_t)l > WCHECK_MAX_BYTES) {
			*all = 1;
			break;
		}
		wr_u16(w, (uint16_t)l);
		wr_bytes(w, p, (size_t)l);
		(*count)++;
	}
	closedir(d);
}

int send_wcheck(struct ctl *c, const char *src, const struct idx_manifest *m,
                int64_t stamp_ns, const struct idx_root *roots, size_t nroots)
{
	struct wire_wr w = { 0 };
	uint32_t count = 0;
	int all = 0;
	int root = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	wr_u8(&w, 0);
	wr_u32(&w, 0);
	if (root < 0)
		all = 1;
	for (size_t i = 0; !all && i < nroots; i++) {
		const struct idx_entry *e = idx_manifest_find(m, roots[i].path);
		if (roots[i].depth == 1 && e && e->type == IDX_DIR &&
		    changed(root, roots[i].path, e, stamp_ns))
			list_new(root, roots[i].path, m, &w, &count, &all);
	}
	if (root >= 0)
		close(root);
	if (w.bad) {
		free(w.buf);
		return -ENOMEM;
	}
	if (all) {   /* the receiver deletes nothing in this window */
		w.len = 5;
		count = 0;
	}
	w.buf[0] = all ? WCHECK_ALL : 0;
	put_u32(w.buf + 1, count);
	int rc = ctl_send(c, CTL_WCHECK, w.buf, w.len);
	free(w.buf);
	return rc;
}
