/*
 * --remove-source-files, as rsync: once the receiver has landed a file (or
 * found DST already holding it), the sender removes it from SRC: every
 * non-directory (regular files, symlinks, specials), never a directory,
 * and not one that changed since the scan (type, size, mtime, device or
 * inode differ).
 *
 * The receiver says which entries in CTL_LANDED (docs/protocol.md, and
 * recv/landed.c), after everything landed and before DONE. That is peer input, and here it can
 * make us delete: an index must be in the manifest we sent, not a
 * directory, given once and in order, and, if it was planned (the receiver
 * asked for its data), one we sent whole. Anything else is a protocol
 * error and nothing more is removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/wire.h"
#include "sync/send/send_int.h"

static int in_plan(const struct src_remover *rm, uint32_t i)
{
	uint32_t lo = 0, hi = rm->nplan;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (rm->plan[mid] == i)
			return 1;
		if (rm->plan[mid] < i)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

static int type_of(mode_t m)
{
	return S_ISREG(m) ? IDX_REG : S_ISDIR(m) ? IDX_DIR : S_ISLNK(m) ? IDX_LNK :
	       S_ISFIFO(m) ? IDX_FIFO : S_ISCHR(m) ? IDX_CHR : S_ISBLK(m) ? IDX_BLK : IDX_SOCK;
}

/* Remove entry e (under root), unless it changed since the scan (another
 * file in its place included: a hard link's leader renamed over). */
static void remove_one(struct src_remover *rm, int root, const struct idx_entry *e)
{
	char shown[4096];
	const char *slash = strrchr(e->path, '/'), *name = slash ? slash + 1 : e->path;
	char *dir = slash ? strndup(e->path, (size_t)(slash - e->path)) : strdup("");
	int pd = dir ? sync_open_beneath(root, dir, O_RDONLY | O_DIRECTORY) : -1;
	struct stat st;
	free(dir);
	log_path(shown, sizeof shown, e->path);
	int rc = pd < 0 ? -1 : fstatat(pd, name, &st, AT_SYMLINK_NOFOLLOW);
	int64_t mt = rc ? 0 : (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if (rc < 0) {
		log_warn("%s: cannot remove the source file: %s", shown, strerror(errno));
	} else if (type_of(st.st_mode) != e->type || mt != e->mtime_ns ||
	           st.st_dev != (dev_t)e->dev || st.st_ino != (ino_t)e->ino ||
	           (e->type == IDX_REG && (uint64_t)st.st_size != e->size)) {
		log_warn("%s: changed since it was sent; the source file is not removed", shown);
	} else if (unlinkat(pd, name, 0) < 0) {
		log_warn("%s: cannot remove the source file: %s", shown, strerror(errno));
		rm->errors++;
	} else {
		rm->removed++;
	}
	if (pd >= 0)
		close(pd);
}

int landed_take(struct src_remover *rm, const uint8_t *b, size_t n)
{
	char shown[300];
	if (!rm->on) {
		log_err("the receiver confirmed files landed, which was not asked for "
		        "(no --remove-source-files, or a dry run)");
		return -EPROTO;
	}
	if (n < 4 || n % 4 || (n - 4) / 4 != get_u32(b)) {
		log_err("the receiver's list of files landed is malformed (%zu bytes)", n);
		return -EPROTO;
	}
	for (uint32_t k = 0, cnt = get_u32(b); k < cnt; k++) {
		uint32_t i = get_u32(b + 4 + 4 * k);
		const struct idx_entry *e = i < rm->m->n ? &rm->m->e[i] : NULL;
		if (!e)
			log_err("the receiver says entry %u landed, of a file list of %zu", i,
			        rm->m->n);
		else if ((int64_t)i <= rm->last)
			log_err("the receiver says entry %u landed again or out of order", i);
		else if (e->type == IDX_DIR)
			log_err("the receiver says the directory '%s' landed (directories are not "
			        "removed)", log_path(shown, sizeof shown, e->path));
		else if (in_plan(rm, i) && !rm->sent[i])
			log_err("the receiver says '%s' landed, which was not sent whole",
			        log_path(shown, sizeof shown, e->path));
		else {
			rm->last = i;
			remove_one(rm, rm->ss && rm->ss->n ? srcs_root(rm->ss, i) : rm->root, e);
			continue;
		}
		return -EPROTO;
	}
	return 0;
}
