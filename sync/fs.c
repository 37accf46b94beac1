/* Opening paths beneath a tree's root, never through a symlink. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "sync/sync_int.h"

int sync_open_beneath(int root, const char *path, int flags)
{
	if (!*path)
		return dup(root);
	struct open_how how = { .flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
	                        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
	                                   RESOLVE_NO_MAGICLINKS };
	return (int)syscall(SYS_openat2, root, path, &how, sizeof how);
}

int sync_dir_beneath(int root, const char *rel, int make)
{
	char *p = strdup(rel), *save = NULL;
	int fd = p ? dup(root) : -1, err = p ? 0 : ENOMEM;
	for (char *c = p ? strtok_r(p, "/", &save) : NULL; c && fd >= 0;
	     c = strtok_r(NULL, "/", &save)) {
		if (!strcmp(c, "."))
			continue;
		if (make && strcmp(c, "..") && mkdirat(fd, c, 0777) < 0 && errno != EEXIST)
			err = errno;
		int next = err ? -1 : openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && !err)
			err = errno == ELOOP ? ENOTDIR : errno;   /* a symlink: not followed */
		close(fd);
		fd = next;
	}
	free(p);
	if (fd < 0 || err) {
		if (fd >= 0)
			close(fd);
		return -(err ? err : errno);
	}
	return fd;
}

int sync_mkpath(const char *path)
{
	char *p = strdup(path);
	if (!p)
		return -ENOMEM;
	int rc = 0;
	for (char *c = p + 1; rc == 0; c++) {
		if (*c != '/' && *c)
			continue;
		char was = *c;
		*c = '\0';
		if (mkdir(p, 0777) < 0 && errno != EEXIST) {
			rc = -errno;
			log_err("%s: cannot create (--mkpath): %s", p, strerror(errno));
		}
		*c = was;
		if (!was)
			break;
	}
	free(p);
	return rc;
}
