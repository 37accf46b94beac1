/* Opening paths beneath a tree's root, never through a symlink. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

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
