/* Diff two sorted manifests into new / content / metadata / removed / type.
 * These are the rules a sync plans by (sync/plan.c): one definition of
 * "changed" for the whole project. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"

static int push(struct idx_diff *d, enum idx_change_kind k,
                const struct idx_entry *s, const struct idx_entry *t)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		struct idx_change *c = realloc(d->c, cap * sizeof *c);
		if (!c)
			return -ENOMEM;
		d->c = c;
		d->cap = cap;
	}
	d->c[d->n++] = (struct idx_change){ k, s, t };
	return 0;
}

static int content_differs(const struct idx_entry *s, const struct idx_entry *t,
                           unsigned flags)
{
	switch (s->type) {
	case IDX_REG:
		if (s->size != t->size)
			return 1;
		if (flags & IDX_DIFF_QUICK)   /* rsync's quick check */
			return s->mtime_ns != t->mtime_ns;
		return memcmp(s->hash, t->hash, IDX_HASH_LEN) != 0;
	case IDX_LNK:
		return strcmp(s->link ? s->link : "", t->link ? t->link : "") != 0;
	case IDX_CHR:
	case IDX_BLK:
		return s->rdev != t->rdev;
	default:
		return 0;
	}
}

unsigned idx_meta_changes(const struct idx_entry *s, const struct idx_entry *t,
                          unsigned flags)
{
	unsigned m = 0;
	if (!(flags & IDX_DIFF_NO_PERMS) && s->type != IDX_LNK && s->mode != t->mode)
		m |= IDX_M_PERMS;   /* a symlink's mode means nothing on Linux */
	if ((flags & IDX_DIFF_UID) && s->uid != IDX_ID_NONE && s->uid != t->uid)
		m |= IDX_M_UID;
	if ((flags & IDX_DIFF_GID) && s->gid != IDX_ID_NONE && s->gid != t->gid)
		m |= IDX_M_GID;
	/* what src has read is compared; a dst that did not read it differs */
	if ((flags & IDX_DIFF_XATTRS) && (s->got & IDX_GOT_XATTRS) &&
	    (!(t->got & IDX_GOT_XATTRS) || !idx_extra_same_xattrs(s->x, t->x)))
		m |= IDX_M_XATTR;
	if ((flags & IDX_DIFF_ACLS) && (s->got & IDX_GOT_ACLS) && s->type != IDX_LNK &&
	    (!(t->got & IDX_GOT_ACLS) || !idx_extra_same_acls(s->x, t->x)))
		m |= IDX_M_ACL;
	if (!(flags & IDX_DIFF_NO_TIMES) && (s->type != IDX_DIR || (flags & IDX_DIFF_MTIME_DIRS)) &&
	    s->mtime_ns != t->mtime_ns)
		m |= IDX_M_TIME;
	return m;
}

int idx_diff(const struct idx_manifest *src, const struct idx_manifest *dst,
             unsigned flags, struct idx_diff *out)
{
	size_t i = 0, j = 0;
	memset(out, 0, sizeof *out);
	while (i < src->n || j < dst->n) {
		int c = i == src->n ? 1 : j == dst->n ? -1
		        : strcmp(src->e[i].path, dst->e[j].path);
		int rc = 0;
		if (c < 0) {
			rc = push(out, IDX_NEW, &src->e[i++], NULL);
		} else if (c > 0) {
			rc = push(out, IDX_REMOVED, NULL, &dst->e[j++]);
		} else {
			const struct idx_entry *s = &src->e[i++], *t = &dst->e[j++];
			if (s->type != t->type)
				rc = push(out, IDX_TYPE, s, t);
			else if (content_differs(s, t, flags))
				rc = push(out, IDX_CONTENT, s, t);
			else if (idx_meta_changes(s, t, flags))
				rc = push(out, IDX_META, s, t);
		}
		if (rc < 0) {
			idx_diff_free(out);
			return rc;
		}
	}
	return 0;
}

void idx_diff_free(struct idx_diff *d)
{
	if (!d)
		return;
	free(d->c);
	memset(d, 0, sizeof *d);
}

const char *idx_change_name(enum idx_change_kind k)
{
	switch (k) {
	case IDX_NEW: return "new";
	case IDX_CONTENT: return "content";
	case IDX_META: return "metadata";
	case IDX_REMOVED: return "removed";
	case IDX_TYPE: return "type";
	}
	return "?";
}

const char *idx_type_name(enum idx_type t)
{
	switch (t) {
	case IDX_REG: return "file";
	case IDX_DIR: return "dir";
	case IDX_LNK: return "symlink";
	case IDX_FIFO: return "fifo";
	case IDX_CHR: return "chardev";
	case IDX_BLK: return "blockdev";
	case IDX_SOCK: return "socket";
	}
	return "?";
}
