/*
 * Reading an entry's extended attributes and POSIX ACLs (-X, -A) from disk.
 *
 * An entry is read through "/proc/self/fd/DIRFD/NAME" with the l*xattr
 * calls: the directory is the one the walker opened (nothing above it is
 * resolved again) and the last component is never followed; the root of a
 * scan, which is open, through its fd. One llistxattr per entry lists both
 * the xattrs and whether an ACL is there (system.posix_acl_access,
 * system.posix_acl_default), so an entry without either costs that one
 * call. ACLs are read with libacl, which follows a symlink: the entry is
 * stat'ed again after it and must be the same inode.
 */
#include <acl/libacl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/acl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/wire.h"
#include "index/idx_int.h"

#define LIST_MAX 65536   /* Linux's XATTR_LIST_MAX: every name of one inode */

/* libacl's ACL into out (room for IDX_ACL_MAX), sorted; *n entries.
 * 0 or -errno. */
static int to_aces(acl_t acl, struct idx_ace *out, uint16_t *n)
{
	acl_entry_t ae;
	*n = 0;
	for (int w = ACL_FIRST_ENTRY; acl_get_entry(acl, w, &ae) == 1; w = ACL_NEXT_ENTRY) {
		acl_tag_t tag;
		acl_permset_t ps;
		if (*n == IDX_ACL_MAX || acl_get_tag_type(ae, &tag) < 0 ||
		    acl_get_permset(ae, &ps) < 0)
			return *n == IDX_ACL_MAX ? -E2BIG : -errno;
		struct idx_ace *a = &out[(*n)++];
		a->id = 0;
		a->perm = (uint8_t)((acl_get_perm(ps, ACL_READ) == 1 ? 4 : 0) |
		                    (acl_get_perm(ps, ACL_WRITE) == 1 ? 2 : 0) |
		                    (acl_get_perm(ps, ACL_EXECUTE) == 1 ? 1 : 0));
		switch (tag) {
		case ACL_USER_OBJ:  a->tag = IDX_ACL_USER_OBJ; break;
		case ACL_GROUP_OBJ: a->tag = IDX_ACL_GROUP_OBJ; break;
		case ACL_MASK:      a->tag = IDX_ACL_MASK; break;
		case ACL_OTHER:     a->tag = IDX_ACL_OTHER; break;
		case ACL_USER:
		case ACL_GROUP: {
			void *q = acl_get_qualifier(ae);
			if (!q)
				return -errno;
			a->tag = tag == ACL_USER ? IDX_ACL_USER : IDX_ACL_GROUP;
			a->id = tag == ACL_USER ? (uint32_t)*(uid_t *)q : (uint32_t)*(gid_t *)q;
			acl_free(q);
			break;
		}
		default:
			return -EINVAL;
		}
	}
	idx_acl_sort(out, *n);
	return 0;
}

/* The ACL of type at path into out; *n 0 when there is none (or, for the
 * access ACL, when it says no more than the mode). 0 or -errno. */
static int read_acl(const char *path, acl_type_t type, struct idx_ace *out, uint16_t *n)
{
	*n = 0;
	acl_t acl = acl_get_file(path, type);
	if (!acl)
		return errno == ENOTSUP || errno == ENODATA ? 0 : -errno;
	int rc = to_aces(acl, out, n);
	acl_free(acl);
	int has_mask = 0;
	for (uint16_t i = 0; i < *n; i++)
		has_mask |= out[i].tag == IDX_ACL_MASK;
	if (rc == 0 && type == ACL_TYPE_ACCESS && !has_mask)
		*n = 0;   /* a minimal ACL is the mode, which every entry carries */
	return rc;
}

/* What to read: an entry by path (its last component not followed), or
 * an open directory by its fd (the root of the scan). */
struct src {
	const char *path;
	int fd;   /* -1: path */
};

static ssize_t s_list(const struct src *s, char *b, size_t n)
{
	return s->fd >= 0 ? flistxattr(s->fd, b, n) : llistxattr(s->path, b, n);
}

static ssize_t s_get(const struct src *s, const char *name, void *b, size_t n)
{
	return s->fd >= 0 ? fgetxattr(s->fd, name, b, n) : lgetxattr(s->path, name, b, n);
}

/* The names of s's xattrs into *list (malloc'd), *len bytes; a filesystem
 * without xattrs has none. 0 or -errno. */
static int list_names(const struct src *s, char **list, ssize_t *len)
{
	char small[1024];
	*list = NULL;
	*len = s_list(s, small, sizeof small);
	if (*len < 0 && (errno == ENOTSUP || errno == EOPNOTSUPP)) {
		*len = 0;
		return 0;
	}
	if (*len >= 0) {
		*list = malloc((size_t)*len + 1);
		if (!*list)
			return -ENOMEM;
		memcpy(*list, small, (size_t)*len);
		return 0;
	}
	if (errno != ERANGE)
		return -errno;
	/* more than fits: as much room as Linux ever lists (names changing
	 * under us could outgrow a measured size) */
	*list = malloc(LIST_MAX + 1);
	if (!*list)
		return -ENOMEM;
	*len = s_list(s, *list, LIST_MAX);
	return *len < 0 ? -errno : 0;
}

/* Append the value of name to w as an xattr item; *total counts the bytes
 * against IDX_XATTR_TOTAL_MAX. 0, 1 when the attribute vanished, or -errno. */
static int add_xattr(const struct src *s, const char *name, struct wire_wr *w, size_t *total)
{
	size_t nlen = strlen(name);
	if (nlen > IDX_XATTR_NAME_MAX)
		return -ENAMETOOLONG;
	for (int tries = 0; tries < 3; tries++) {
		ssize_t vlen = s_get(s, name, NULL, 0);
		if (vlen < 0)
			return errno == ENODATA ? 1 : -errno;
		if ((size_t)vlen > IDX_XATTR_VALUE_MAX || *total + nlen + (size_t)vlen > IDX_XATTR_TOTAL_MAX)
			return -E2BIG;
		uint8_t *v = malloc((size_t)vlen + 1);
		if (!v)
			return -ENOMEM;
		ssize_t got = s_get(s, name, v, (size_t)vlen);
		if (got < 0) {
			int err = errno;
			free(v);
			if (err == ERANGE)
				continue;   /* it grew between the two calls */
			return err == ENODATA ? 1 : -err;
		}
		wr_u8(w, (uint8_t)nlen);
		wr_bytes(w, name, nlen);
		wr_u32(w, (uint32_t)got);
		wr_bytes(w, v, (size_t)got);
		*total += nlen + (size_t)got;
		free(v);
		return w->bad ? -ENOMEM : 0;
	}
	return -EAGAIN;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The xattr items of path (names in scope, sorted) into w; *n of them.
 * *acl, *dacl: whether path has an access, a default ACL. 0 or -errno. */
static int read_xattrs(const struct src *s, int want_x, int all, struct wire_wr *w,
                       uint16_t *n, int *acl, int *dacl)
{
	char *list;
	ssize_t len;
	int rc = list_names(s, &list, &len);
	*n = 0;
	*acl = *dacl = 0;
	if (rc < 0)
		return rc;
	size_t cap = 0;
	char **names = NULL;
	for (ssize_t i = 0; i < len; i += (ssize_t)strlen(list + i) + 1)
		cap++;
	if (cap && !(names = malloc(cap * sizeof *names))) {
		free(list);
		return -ENOMEM;
	}
	size_t k = 0;
	list[len] = '\0';
	for (ssize_t i = 0; i < len; i += (ssize_t)strlen(list + i) + 1) {
		const char *nm = list + i;
		if (!strcmp(nm, "system.posix_acl_access"))
			*acl = 1;
		else if (!strcmp(nm, "system.posix_acl_default"))
			*dacl = 1;
		else if (want_x && *nm && idx_xattr_in_scope(nm, all))
			names[k++] = list + i;
	}
	if (k > 1)
		qsort(names, k, sizeof *names, cmp_str);
	size_t total = 0;
	for (size_t i = 0; i < k && rc >= 0; i++) {
		if (*n == UINT16_MAX) {
			rc = -E2BIG;
			break;
		}
		rc = add_xattr(s, names[i], w, &total);
		if (rc == 0)
			(*n)++;
	}
	free(names);
	free(list);
	return rc < 0 ? rc : 0;
}

/* The ACLs of path when listed (acl, dacl), into *acl_out / *dacl_out
 * (malloc'd, *na / *nd entries). 0 or -errno. */
static int read_acls(const char *path, int acl, int dacl, int is_dir,
                     struct idx_ace **acl_out, uint16_t *na,
                     struct idx_ace **dacl_out, uint16_t *nd)
{
	int rc = 0;
	*na = *nd = 0;
	*acl_out = *dacl_out = NULL;
	if ((acl && !(*acl_out = malloc(IDX_ACL_MAX * sizeof **acl_out))) ||
	    (dacl && is_dir && !(*dacl_out = malloc(IDX_ACL_MAX * sizeof **dacl_out))))
		return -ENOMEM;
	if (acl)
		rc = read_acl(path, ACL_TYPE_ACCESS, *acl_out, na);
	if (rc == 0 && dacl && is_dir)
		rc = read_acl(path, ACL_TYPE_DEFAULT, *dacl_out, nd);
	return rc;
}

unsigned idx_got_for(unsigned want)
{
	static int root = -1;   /* geteuid() once: this runs per file */
	int r = __atomic_load_n(&root, __ATOMIC_RELAXED);
	if (r < 0)
		__atomic_store_n(&root, r = geteuid() == 0, __ATOMIC_RELAXED);
	unsigned got = 0;
	if (want & IDX_SCAN_XATTRS)
		got |= IDX_GOT_XATTRS | (r ? IDX_GOT_XATTRS_ALL : 0);
	if (want & IDX_SCAN_ACLS)
		got |= IDX_GOT_ACLS;
	return got;
}

int idx_read_extra(int dfd, const char *name, struct idx_entry *e, unsigned want)
{
	char path[IDX_PATH_MAX + 64];
	int all = (idx_got_for(want) & IDX_GOT_XATTRS_ALL) != 0;
	if (name)
		snprintf(path, sizeof path, "/proc/self/fd/%d/%s", dfd, name);
	else
		snprintf(path, sizeof path, "/proc/self/fd/%d", dfd);
	struct wire_wr w = { 0 };
	struct idx_ace *acl = NULL, *dacl = NULL;
	uint16_t nx = 0, na = 0, nd = 0;
	int has_acl = 0, has_dacl = 0;
	struct src src = { path, name ? -1 : dfd };
	int rc = read_xattrs(&src, (want & IDX_SCAN_XATTRS) != 0, all, &w, &nx, &has_acl,
	                     &has_dacl);
	/* ACLs: never of symlinks (Linux has none), and only when listed */
	if (!(want & IDX_SCAN_ACLS) || e->type == IDX_LNK)
		has_acl = has_dacl = 0;
	if (rc == 0 && (has_acl || has_dacl)) {
		rc = read_acls(path, has_acl, has_dacl, e->type == IDX_DIR, &acl, &na, &dacl, &nd);
		/* libacl followed the name: it must still be what was stat'ed */
		struct stat st;
		if (rc == 0 && (name ? fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW)
		                     : fstat(dfd, &st)) == 0 && st.st_ino != e->ino)
			rc = -EAGAIN;
	}
	free(e->x);
	e->x = NULL;
	if (rc == 0 && (nx || na || nd)) {
		e->x = idx_extra_new(na, nd, (uint32_t)w.len);
		if (!e->x) {
			rc = -ENOMEM;
		} else {
			e->x->nxattrs = nx;
			if (w.len)
				memcpy(e->x->xattrs, w.buf, w.len);
			if (na)
				memcpy(e->x->acl, acl, na * sizeof *acl);
			if (nd)
				memcpy(e->x->dacl, dacl, nd * sizeof *dacl);
		}
	}
	if (rc == 0)
		e->got = idx_got_for(want);
	free(w.buf);
	free(acl);
	free(dacl);
	return rc;
}

int idx_read_extra_fd(int fd, struct idx_entry *e, unsigned meta)
{
	return idx_read_extra(fd, NULL, e, meta);
}
