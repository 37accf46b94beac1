/*
 * The receiver's metadata: what the sender's entries become here (owners
 * by name, --chown, --chmod, which xattrs count), before the plan compares
 * them with DST's; and setting owner, mode, ACLs, xattrs and mtime on what
 * it writes, in that order: chown clears setuid bits and file
 * capabilities, so the mode and the xattrs come after it; an ACL's mask is
 * the mode's group bits, so the ACL comes after the mode (and its base
 * entries are made from the mode, so the two agree).
 */
#include <acl/libacl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/acl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "sync/recv/recv_int.h"

/* The access ACL's base entries from the mode (which --chmod may have
 * changed): owner, mask (or group) and other. */
static void acl_from_mode_bits(struct idx_extra *x, uint32_t mode)
{
	int has_mask = 0;
	for (uint16_t i = 0; i < x->nacl; i++)
		has_mask |= x->acl[i].tag == IDX_ACL_MASK;
	for (uint16_t i = 0; i < x->nacl; i++) {
		struct idx_ace *a = &x->acl[i];
		if (a->tag == IDX_ACL_USER_OBJ)
			a->perm = (uint8_t)((mode >> 6) & 7);
		else if (a->tag == (has_mask ? IDX_ACL_MASK : IDX_ACL_GROUP_OBJ))
			a->perm = (uint8_t)((mode >> 3) & 7);
		else if (a->tag == IDX_ACL_OTHER)
			a->perm = (uint8_t)(mode & 7);
	}
}

/* x with only the xattrs of user.* (for a side that did not read the
 * others); x itself when it has no others. NULL with *err on no memory. */
static struct idx_extra *user_xattrs_only(struct idx_extra *x, int *err)
{
	uint32_t off = 0, keep = 0, vlen;
	uint16_t n = 0;
	const char *name;
	size_t nlen;
	const uint8_t *v;
	while (idx_xattr_next(x, &off, &name, &nlen, &v, &vlen))
		if (nlen >= 5 && !memcmp(name, "user.", 5)) {
			keep += 5 + (uint32_t)nlen + vlen;
			n++;
		}
	if (!x || n == x->nxattrs)
		return x;
	struct idx_extra *y = idx_extra_new(x->nacl, x->ndacl, keep);
	if (!y) {
		*err = -ENOMEM;
		return x;
	}
	if (x->nacl)
		memcpy(y->acl, x->acl, x->nacl * sizeof *x->acl);
	if (x->ndacl)
		memcpy(y->dacl, x->dacl, x->ndacl * sizeof *x->dacl);
	uint8_t *p = y->xattrs;
	for (off = 0; idx_xattr_next(x, &off, &name, &nlen, &v, &vlen);)
		if (nlen >= 5 && !memcmp(name, "user.", 5)) {
			size_t item = 5 + nlen + vlen;
			memcpy(p, name - 1, item);   /* the item starts at its length byte */
			p += item;
		}
	y->nxattrs = n;
	free(x);
	return y;
}

/* Both sides' xattrs of the namespaces both read: all but system.* when
 * both ran as root, else user.* only (so a root receiver neither removes
 * nor counts a trusted.* attribute a user's sender could not see). */
static int common_xattrs(struct rstate *s)
{
	int err = 0;
	s->xattr_all = (s->sm.flags & IDX_MF_XATTRS_ALL) && (s->dm.flags & IDX_MF_XATTRS_ALL);
	if (s->xattr_all)
		return 0;
	for (int side = 0; side < 2; side++) {
		struct idx_manifest *m = side ? &s->dm : &s->sm;
		for (size_t i = 0; i < m->n && !err; i++)
			if (m->e[i].x && m->e[i].x->nxattrs)
				m->e[i].x = user_xattrs_only(m->e[i].x, &err);
	}
	return err;
}

static int64_t ns_of(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* How DST's filesystem keeps an mtime, tried once a run on DST's root
 * (then put back as it was): exFAT over FUSE drops an mtime set without
 * an atime (UTIME_OMIT) and keeps whole seconds, FAT keeps 2 s, NTFS
 * 100 ns. Without this every file there differs in time at every run and
 * is sent again. Sets s->times_atime and s->mtime_step. */
static void probe_times(struct rstate *s)
{
	/* Linux's own filesystems that keep nanoseconds are not asked (the
	 * probe moves the root's ctime) */
	static const unsigned long exact[] = { 0xEF53 /* ext2-4 */, 0x58465342 /* xfs */,
	                                       0x9123683E /* btrfs */, 0x01021994 /* tmpfs */,
	                                       0x2FC12FC1 /* zfs */, 0xF2F52010 /* f2fs */,
	                                       0x794C7630 /* overlay */ };
	struct stat st0, st;
	struct statfs fs;
	s->mtime_step = 1;
	if (!(s->r->flags & SYNC_F_TIMES) || (s->r->flags & SYNC_F_DRYRUN) || s->root < 0 ||
	    fstatfs(s->root, &fs) < 0 || fstat(s->root, &st0) < 0)
		return;
	for (size_t k = 0; k < sizeof exact / sizeof *exact; k++)
		if ((unsigned long)fs.f_type == exact[k])
			return;
	/* an odd second well before the root's own mtime, with all the
	 * nanoseconds there can be: any rounding shows, and none gives back
	 * the time the root had */
	struct timespec want = { (st0.st_mtim.tv_sec - 10) | 1, 999999999 };
	struct timespec ts[2] = { { 0, UTIME_OMIT }, want };
	if (futimens(s->root, ts) < 0 || fstat(s->root, &st) < 0)
		return;   /* not ours to set: the run says so where it sets one */
	int64_t off = ns_of(want) - ns_of(st.st_mtim);
	if (off >= 2000000000 || off <= -2000000000) {
		ts[0] = st0.st_atim;   /* not kept (or set to now): with the atime, then */
		if (futimens(s->root, ts) < 0 || fstat(s->root, &st) < 0)
			return;
		int64_t off2 = ns_of(want) - ns_of(st.st_mtim);
		s->times_atime = off2 < 2000000000 && off2 > -2000000000;
		off = off2;
	}
	/* kept to a step of 10^k ns (or FAT's 2 s), rounded down; or up, by
	 * the few that round up (or to the nearest: those are not matched) */
	s->mtime_up = off < 0;
	off = off < 0 ? -off : off;
	int64_t step = 1;
	while (step < 1000000000 && off >= step)
		step *= 10;
	if (off >= step)
		step = 2000000000;
	if (off >= step) {
		char shown[300];
		log_warn("%s: its filesystem does not keep modification times (set, they read back "
		         "unchanged): every run will find its files changed and send them again",
		         log_path(shown, sizeof shown, s->root_path));
		step = 1;
	}
	s->mtime_step = step;
	ts[0] = st0.st_atim;
	ts[1] = st0.st_mtim;
	futimens(s->root, ts);   /* the root as it was */
}

/* t as DST's filesystem keeps it: down (or up) to its step (pre-1970
 * times too). */
static int64_t kept_time(const struct rstate *s, int64_t t)
{
	int64_t r = t % s->mtime_step;
	t -= r < 0 ? r + s->mtime_step : r;
	return s->mtime_up && r ? t + s->mtime_step : t;
}

int recv_prepare_meta(struct rstate *s)
{
	const struct sync_opts *o = s->r->o;
	unsigned f = s->r->flags;
	int rc = sync_map_ids(&s->sm, f, o ? o->chown : NULL, &s->set_uid, &s->set_gid);
	if (rc < 0)
		return rc;
	if (o && o->chmod && (rc = sync_chmod_parse(o->chmod, s->umask, &s->chmod)) < 0) {
		log_err("--chmod: '%s' is not a mode rdcp understands", o->chmod);
		return rc;
	}
	probe_times(s);
	for (size_t i = 0; i < s->sm.n; i++) {
		struct idx_entry *e = &s->sm.e[i];
		/* compared with DST's as it will keep them: a re-run finds them
		 * the same (rsync's --modify-window, found by itself) */
		if (s->mtime_step > 1)
			e->mtime_ns = kept_time(s, e->mtime_ns);
		if (s->chmod && e->type != IDX_LNK)
			e->mode = sync_chmod_apply(s->chmod, e->mode, e->type == IDX_DIR);
		if (e->x && e->x->nacl)
			acl_from_mode_bits(e->x, e->mode);
	}
	return (f & SYNC_F_XATTRS) ? common_xattrs(s) : 0;
}

int recv_extra_same(struct rstate *s, int fd, const struct stat *st, const struct idx_entry *e)
{
	unsigned f = s->r->flags, meta = sync_scan_meta(f);
	if (!meta)
		return 1;
	struct idx_entry t = { .path = e->path, .type = e->type, .ino = st->st_ino };
	int err = 0;
	if (idx_read_extra_fd(fd, &t, meta) < 0)
		return 0;
	if ((f & SYNC_F_XATTRS) && !s->xattr_all && t.x)
		t.x = user_xattrs_only(t.x, &err);
	unsigned df = ((f & SYNC_F_XATTRS) ? IDX_DIFF_XATTRS : 0) |
	              ((f & SYNC_F_ACLS) ? IDX_DIFF_ACLS : 0) | IDX_DIFF_NO_PERMS | IDX_DIFF_NO_TIMES;
	int same = !err && idx_meta_changes(e, &t, df) == 0;
	free(t.x);
	return same;
}

unsigned recv_diff_flags(const struct rstate *s)
{
	unsigned f = s->r->flags, df = 0;
	if (!(f & SYNC_F_CHECKSUM))
		df |= IDX_DIFF_QUICK;
	if (!(f & SYNC_F_PERMS))
		df |= IDX_DIFF_NO_PERMS;
	df |= (f & SYNC_F_TIMES) ? IDX_DIFF_MTIME_DIRS : IDX_DIFF_NO_TIMES;
	if (s->set_uid)
		df |= IDX_DIFF_UID;
	if (s->set_gid)
		df |= IDX_DIFF_GID;
	if (f & SYNC_F_XATTRS)
		df |= IDX_DIFF_XATTRS;
	if (f & SYNC_F_ACLS)
		df |= IDX_DIFF_ACLS;
	return df;
}

/* --- setting them --- */

/* What to set xattrs and ACLs on: an open fd, or a path (of a symlink,
 * not followed, or "/proc/self/fd/N" of an O_PATH descriptor, followed). */
struct target {
	int fd;             /* -1: use path */
	const char *path;
	int nofollow;
};

static ssize_t t_list(const struct target *t, char *b, size_t n)
{
	return t->fd >= 0 ? flistxattr(t->fd, b, n) : t->nofollow ? llistxattr(t->path, b, n)
	                                                           : listxattr(t->path, b, n);
}

static ssize_t t_get(const struct target *t, const char *name, void *b, size_t n)
{
	return t->fd >= 0 ? fgetxattr(t->fd, name, b, n)
	       : t->nofollow ? lgetxattr(t->path, name, b, n) : getxattr(t->path, name, b, n);
}

static int t_set(const struct target *t, const char *name, const void *v, size_t n)
{
	return t->fd >= 0 ? fsetxattr(t->fd, name, v, n, 0)
	       : t->nofollow ? lsetxattr(t->path, name, v, n, 0) : setxattr(t->path, name, v, n, 0);
}

static int t_remove(const struct target *t, const char *name)
{
	return t->fd >= 0 ? fremovexattr(t->fd, name)
	       : t->nofollow ? lremovexattr(t->path, name) : removexattr(t->path, name);
}

/* 1 when x has an xattr called name. */
static int has_xattr(const struct idx_extra *x, const char *name)
{
	uint32_t off = 0, vlen;
	const char *n;
	size_t nlen, want = strlen(name);
	const uint8_t *v;
	while (idx_xattr_next(x, &off, &n, &nlen, &v, &vlen))
		if (nlen == want && !memcmp(n, name, nlen))
			return 1;
	return 0;
}

/* DST's xattrs of e made the sender's: those it lacks removed (of the
 * namespaces both sides read), the others set. */
static void set_xattrs(struct rstate *s, const struct target *t, const struct idx_entry *e)
{
	/* most have none (a new file): a small buffer first, Linux's most
	 * (64 KiB of names) only when they do not fit */
	char small[1024], *list = small, name[IDX_XATTR_NAME_MAX + 1];
	ssize_t len = t_list(t, small, sizeof small - 1);
	if (len < 0 && errno == ERANGE && (list = malloc(65536 + 1)))
		len = t_list(t, list, 65536);
	if (len < 0 && errno != ENOTSUP && errno != EOPNOTSUPP) {
		recv_fail(s, *e->path ? e->path : ".", "cannot list xattrs", list ? errno : ENOMEM);
		len = 0;
	}
	if (len > 0)
		list[len] = '\0';
	for (ssize_t i = 0; i < len; i += (ssize_t)strlen(list + i) + 1) {
		const char *nm = list + i;
		if (*nm && idx_xattr_in_scope(nm, s->xattr_all) && !has_xattr(e->x, nm) &&
		    t_remove(t, nm) < 0 && errno != ENODATA)
			recv_fail(s, *e->path ? e->path : ".", "cannot remove an xattr", errno);
	}
	if (list != small)
		free(list);
	uint32_t off = 0, vlen;
	const char *n;
	size_t nlen;
	const uint8_t *v;
	while (idx_xattr_next(e->x, &off, &n, &nlen, &v, &vlen)) {
		memcpy(name, n, nlen);
		name[nlen] = '\0';
		if (!idx_xattr_in_scope(name, s->xattr_all))
			continue;
		if (t_set(t, name, v, vlen) < 0) {
			char what[300];
			snprintf(what, sizeof what, "cannot set xattr %s", name);
			recv_fail(s, *e->path ? e->path : ".", what, errno);
		}
	}
}

/* libacl's form of n entries; NULL with errno. */
static acl_t to_acl(const struct idx_ace *a, uint16_t n)
{
	static const acl_tag_t tags[] = { 0, ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_GROUP,
	                                  ACL_MASK, ACL_OTHER };
	acl_t acl = acl_init(n);
	for (uint16_t i = 0; acl && i < n; i++) {
		acl_entry_t ae;
		acl_permset_t ps;
		uid_t uid = a[i].id;
		gid_t gid = a[i].id;
		if (acl_create_entry(&acl, &ae) < 0 || acl_set_tag_type(ae, tags[a[i].tag]) < 0 ||
		    (a[i].tag == IDX_ACL_USER && acl_set_qualifier(ae, &uid) < 0) ||
		    (a[i].tag == IDX_ACL_GROUP && acl_set_qualifier(ae, &gid) < 0) ||
		    acl_get_permset(ae, &ps) < 0 || acl_clear_perms(ps) < 0 ||
		    ((a[i].perm & 4) && acl_add_perm(ps, ACL_READ) < 0) ||
		    ((a[i].perm & 2) && acl_add_perm(ps, ACL_WRITE) < 0) ||
		    ((a[i].perm & 1) && acl_add_perm(ps, ACL_EXECUTE) < 0)) {
			int err = errno;
			acl_free(acl);
			errno = err;
			return NULL;
		}
	}
	return acl;
}

/* Set (n entries) or remove (n 0) the ACL of type on t; fdpath names t's
 * inode for the calls libacl only has by path. 0 or -1 with errno. */
static int set_one_acl(const struct target *t, const char *fdpath, acl_type_t type,
                       const struct idx_ace *a, uint16_t n)
{
	const char *xname = type == ACL_TYPE_ACCESS ? "system.posix_acl_access"
	                                            : "system.posix_acl_default";
	if (!n) {   /* none: remove one only if there is one */
		if (t_get(t, xname, NULL, 0) < 0)
			return errno == ENODATA || errno == ENOTSUP || errno == EOPNOTSUPP ? 0 : -1;
		return type == ACL_TYPE_DEFAULT ? acl_delete_def_file(fdpath) : t_remove(t, xname);
	}
	acl_t acl = to_acl(a, n);
	if (!acl)
		return -1;
	int rc = type == ACL_TYPE_ACCESS && t->fd >= 0 ? acl_set_fd(t->fd, acl)
	         : acl_set_file(fdpath, type, acl);
	int err = errno;
	acl_free(acl);
	errno = err;
	return rc;
}

/* DST's ACLs of e made the sender's (after the mode: see the top). */
static void set_acls(struct rstate *s, const struct target *t, const char *fdpath,
                     const struct idx_entry *e, mode_t mode)
{
	const struct idx_extra *x = e->x;
	const char *p = *e->path ? e->path : ".";
	int had = x && x->nacl;
	if (set_one_acl(t, fdpath, ACL_TYPE_ACCESS, had ? x->acl : NULL, had ? x->nacl : 0) < 0)
		recv_fail(s, p, "cannot set its ACL", errno);
	else if (!had && t->fd >= 0 && fchmod(t->fd, mode) < 0)
		recv_fail(s, p, "cannot set mode", errno);   /* the mask was the group bits */
	if (e->type == IDX_DIR &&
	    set_one_acl(t, fdpath, ACL_TYPE_DEFAULT, x ? x->dacl : NULL, x ? x->ndacl : 0) < 0)
		recv_fail(s, p, "cannot set its default ACL", errno);
}

/* chown's ids for e: -1 for what is not ours to set. */
static void owner_ids(const struct rstate *s, const struct idx_entry *e, uid_t *u, gid_t *g)
{
	*u = s->set_uid && e->uid != IDX_ID_NONE ? (uid_t)e->uid : (uid_t)-1;
	*g = s->set_gid && e->gid != IDX_ID_NONE ? (gid_t)e->gid : (gid_t)-1;
}

static struct timespec mtime_of(const struct idx_entry *e)
{
	return (struct timespec){ e->mtime_ns / 1000000000, e->mtime_ns % 1000000000 };
}

/* e's mtime on fd (name NULL) or on name in fd (flags: AT_SYMLINK_NOFOLLOW),
 * with the atime it has where DST's filesystem drops an mtime set alone.
 * 0 or -1 with errno. */
static int set_mtime(const struct rstate *s, int fd, const char *name, int flags,
                     const struct idx_entry *e)
{
	struct timespec ts[2] = { { 0, UTIME_OMIT }, mtime_of(e) };
	struct stat st;
	if (s->times_atime && fstatat(fd, name ? name : "", &st, name ? flags : AT_EMPTY_PATH) == 0)
		ts[0] = st.st_atim;
	return name ? utimensat(fd, name, ts, flags) : futimens(fd, ts);
}

mode_t recv_mode_of(const struct rstate *s, const struct idx_entry *e)
{
	/* without -p, as rsync: the source's mode less the umask */
	return (s->r->flags & SYNC_F_PERMS) ? e->mode : (e->mode & 0777 & ~s->umask);
}

void recv_apply_fd(struct rstate *s, int fd, const struct idx_entry *e, unsigned what,
                   const struct stat *now)
{
	unsigned f = s->r->flags;
	const char *p = *e->path ? e->path : ".";
	uid_t u;
	gid_t g;
	STAT_ADD(s->actions, 1);
	owner_ids(s, e, &u, &g);
	if (now && u == now->st_uid)   /* what the inode already is stays */
		u = (uid_t)-1;
	if (now && g == now->st_gid)
		g = (gid_t)-1;
	int own = u != (uid_t)-1 || g != (gid_t)-1;
	if (own && fchown(fd, u, g) < 0)
		recv_fail(s, p, "cannot set owner", errno);
	/* a chown clears setuid and setgid: the mode after it */
	mode_t mode = recv_mode_of(s, e);
	/* a ranked run's pass 1, not as root: a read-only directory (0555)
	 * would keep another rank's window from making its entries in it
	 * (sync/ranks.c); pass 2 sets its mode */
	if (e->type == IDX_DIR && s->r->o && s->r->o->ranked == 2 && geteuid() != 0)
		mode |= S_IWUSR | S_IXUSR;
	if ((!now || own || (now->st_mode & 07777) != mode) && fchmod(fd, mode) < 0)
		recv_fail(s, p, "cannot set mode", errno);
	struct target t = { fd, NULL, 0 };
	char fdpath[40];
	snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
	if ((f & SYNC_F_ACLS) && (what & IDX_M_ACL) && (e->got & IDX_GOT_ACLS))
		set_acls(s, &t, fdpath, e, mode);
	if ((f & SYNC_F_XATTRS) && (what & IDX_M_XATTR) && (e->got & IDX_GOT_XATTRS))
		set_xattrs(s, &t, e);
	if ((f & SYNC_F_TIMES) && set_mtime(s, fd, NULL, 0, e) < 0)
		recv_fail(s, p, "cannot set times", errno);
}

void recv_apply_link(struct rstate *s, int pd, const char *name, const struct idx_entry *e,
                     unsigned what)
{
	unsigned f = s->r->flags;
	uid_t u;
	gid_t g;
	STAT_ADD(s->actions, 1);
	owner_ids(s, e, &u, &g);
	if ((u != (uid_t)-1 || g != (gid_t)-1) &&
	    fchownat(pd, name, u, g, AT_SYMLINK_NOFOLLOW) < 0)
		recv_fail(s, e->path, "cannot set owner", errno);
	if ((f & SYNC_F_XATTRS) && (what & IDX_M_XATTR) && (e->got & IDX_GOT_XATTRS)) {
		char path[IDX_TEMP_NAME_LEN + 300];
		if (snprintf(path, sizeof path, "/proc/self/fd/%d/%s", pd, name) < (int)sizeof path) {
			struct target t = { -1, path, 1 };
			set_xattrs(s, &t, e);
		}
	}
	if ((f & SYNC_F_TIMES) && set_mtime(s, pd, name, AT_SYMLINK_NOFOLLOW, e) < 0)
		recv_fail(s, e->path, "cannot set times", errno);
}

void recv_apply_special(struct rstate *s, int opath_fd, const struct idx_entry *e,
                        unsigned what)
{
	unsigned f = s->r->flags;
	char fdpath[40];
	uid_t u;
	gid_t g;
	snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", opath_fd);
	STAT_ADD(s->actions, 1);
	owner_ids(s, e, &u, &g);
	if ((u != (uid_t)-1 || g != (gid_t)-1) &&
	    fchownat(opath_fd, "", u, g, AT_EMPTY_PATH) < 0)
		recv_fail(s, e->path, "cannot set owner", errno);
	mode_t mode = recv_mode_of(s, e);
	if (chmod(fdpath, mode) < 0)
		recv_fail(s, e->path, "cannot set mode", errno);
	struct target t = { -1, fdpath, 0 };
	if ((f & SYNC_F_ACLS) && (what & IDX_M_ACL) && (e->got & IDX_GOT_ACLS)) {
		set_acls(s, &t, fdpath, e, mode);
		if (!(e->x && e->x->nacl) && chmod(fdpath, mode) < 0)
			recv_fail(s, e->path, "cannot set mode", errno);
	}
	if ((f & SYNC_F_XATTRS) && (what & IDX_M_XATTR) && (e->got & IDX_GOT_XATTRS))
		set_xattrs(s, &t, e);
	if ((f & SYNC_F_TIMES) && set_mtime(s, AT_FDCWD, fdpath, 0, e) < 0)
		recv_fail(s, e->path, "cannot set times", errno);
}
