/*
 * --watch=fanotify (and --watch past inotify's limit, as root): one
 * FAN_MARK_FILESYSTEM mark with FAN_REPORT_DFID_NAME instead of a watch per
 * directory. Each event names a directory by its file handle and an entry
 * in it; the directory is opened by handle, its path read back from
 * /proc/self/fd, and the entry kept when it lies under the tree.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <unistd.h>

#include "sync/watch_int.h"

/* fanotify: one mark for the filesystem that holds the tree (its events
 * come with the directory's file handle and the entry's name). 0, or -1
 * with errno (not root, a filesystem without handles, an old kernel). */
int watch_fan_open(struct sync_watch *w)
{
	const uint64_t mask = FAN_CREATE | FAN_DELETE | FAN_MODIFY | FAN_CLOSE_WRITE |
	                      FAN_ATTRIB | FAN_MOVED_FROM | FAN_MOVED_TO | FAN_ONDIR;
	int err;
	if (!(w->real = realpath(w->root, NULL)))
		return -1;
	w->rlen = strlen(w->real);
	if ((w->ffd = fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_DFID_NAME | FAN_CLOEXEC |
	                            FAN_NONBLOCK, O_RDONLY | O_CLOEXEC)) < 0 ||
	    (w->mfd = open(w->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    fanotify_mark(w->ffd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, mask, AT_FDCWD,
	                  w->root) < 0) {
		err = errno;
		if (w->ffd >= 0)
			close(w->ffd);
		if (w->mfd >= 0)
			close(w->mfd);
		w->ffd = w->mfd = -1;
		errno = err;
		return -1;
	}
	return 0;
}

/* The path under the tree of entry name in the directory of handle fh,
 * recorded as changed; nothing when it is outside the tree (the mark sees
 * the whole filesystem) or its directory is gone (the parent's event says). */
static void fan_entry(struct sync_watch *w, struct file_handle *fh, const char *name)
{
	char lnk[64], dir[PATH_MAX];
	int dfd = open_by_handle_at(w->mfd, fh, O_PATH | O_CLOEXEC);
	if (dfd < 0)
		return;
	snprintf(lnk, sizeof lnk, "/proc/self/fd/%d", dfd);
	ssize_t n = readlink(lnk, dir, sizeof dir - 1);
	close(dfd);
	if (n <= 0)
		return;
	dir[n] = '\0';
	size_t dl = (size_t)n, tail = sizeof " (deleted)" - 1;
	if (strncmp(dir, w->real, w->rlen) || (dir[w->rlen] && dir[w->rlen] != '/') ||
	    (dl > tail && !strcmp(dir + dl - tail, " (deleted)")))
		return;
	const char *rel = dir[w->rlen] ? dir + w->rlen + 1 : "";
	char *path = strcmp(name, ".") ? watch_join(rel, name) : strdup(rel);
	if (!path) {
		watch_lost(w);
		return;
	}
	pthread_mutex_lock(&w->mu);
	watch_changed(w, path);
	pthread_mutex_unlock(&w->mu);
	free(path);
}

/* The events in buf (len bytes). Their records are not 8-byte aligned
 * one after another (a name pads to 4): each is copied out, never read in
 * place through a struct pointer. */
void watch_fan_take(struct sync_watch *w, const char *buf, size_t len)
{
	struct fanotify_event_metadata md;
	struct fanotify_event_info_fid fid;
	struct file_handle fh0;
	for (size_t off = 0; off + sizeof md <= len; off += md.event_len) {
		memcpy(&md, buf + off, sizeof md);
		if (md.event_len < sizeof md || md.metadata_len < sizeof md ||
		    md.event_len > len - off)
			return;
		if (md.vers != FANOTIFY_METADATA_VERSION || (md.mask & FAN_Q_OVERFLOW)) {
			watch_lost(w);   /* events were dropped (or cannot be read) */
			continue;
		}
		size_t end = off + md.event_len;
		for (size_t p = off + md.metadata_len; p + sizeof fid + sizeof fh0 <= end;
		     p += fid.hdr.len) {
			memcpy(&fid, buf + p, sizeof fid);
			if (fid.hdr.len < sizeof fid + sizeof fh0 || fid.hdr.len > end - p)
				break;
			if (fid.hdr.info_type != FAN_EVENT_INFO_TYPE_DFID_NAME)
				continue;
			memcpy(&fh0, buf + p + sizeof fid, sizeof fh0);
			size_t at = p + sizeof fid + sizeof fh0, rec_end = p + fid.hdr.len;
			if (fh0.handle_bytes > MAX_HANDLE_SZ || fh0.handle_bytes >= rec_end - at)
				continue;
			const char *name = buf + at + fh0.handle_bytes;
			if (!memchr(name, '\0', rec_end - (at + fh0.handle_bytes)))
				continue;
			union {
				struct file_handle fh;
				char b[sizeof(struct file_handle) + MAX_HANDLE_SZ];
			} h;
			memcpy(&h, buf + p + sizeof fid, sizeof fh0 + fh0.handle_bytes);
			fan_entry(w, &h.fh, name);
		}
	}
}

