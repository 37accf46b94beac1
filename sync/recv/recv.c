/*
 * The receiving side of a sync, phase by phase: (1) READY says what the
 * sender sends, and DST's root is chosen; (2) DST is scanned with its index;
 * (3) the sender's manifest is read and checked; (4) the plan (plan.c) is
 * made and sent; (5) the data is taken (take.c); (6) links, deletions,
 * metadata and the index (land.c, finish.c; --delete's guard: mirror.c).
 * The result goes back in DONE.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "common/mem.h"
#include "common/wire.h"
#include "sync/archive/larchive.h"
#include "sync/recv/recv_int.h"

int recv_reject(struct rstate *s, const char *fmt, ...)
{
	if (__atomic_exchange_n(&s->rejected, 1, __ATOMIC_RELAXED))
		return -EPROTO;   /* the first reason was said */
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	log_err("%s", msg);
	return -EPROTO;
}

/* A parent of every entry must be a directory of the manifest. */
static int check_tree(struct rstate *s, const struct idx_manifest *m)
{
	char *buf = malloc(IDX_PATH_MAX + 1);
	char shown[300];
	int rc = 0;
	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < m->n && rc == 0; i++) {
		const char *slash = strrchr(m->e[i].path, '/');
		if (!slash)
			continue;
		size_t n = (size_t)(slash - m->e[i].path);
		memcpy(buf, m->e[i].path, n);
		buf[n] = '\0';
		const struct idx_entry *p = idx_manifest_find(m, buf);
		if (!p || p->type != IDX_DIR)
			rc = recv_reject(s, "the sender's file list has an entry %s: '%s'",
			                 !p ? "whose parent directory it does not have"
			                 : p->type == IDX_LNK ? "under a symlink"
			                 : "under something that is not a directory",
			                 log_path(shown, sizeof shown, m->e[i].path));
	}
	free(buf);
	return rc;
}

/* The sender's whole manifest (len bytes at all) decoded into s->sm and
 * checked. 0, -EPROTO (said) or -ENOMEM. */
static int take_manifest(struct rstate *s, const uint8_t *all, size_t len)
{
	struct idx_why why;
	s->res->flist_bytes = len;
	int rc = idx_manifest_decode(all, len, &s->sm, &why);
	if (rc == -EBADMSG)
		rc = recv_reject(s, "the sender's file list %s", why.text);
	else if (rc < 0)
		log_err("the sender's file list %s", why.text);
	else if (s->sm.nohash_below > sync_nohash_below(s->r))
		rc = recv_reject(s, "the sender's file list has no hashes of files under "
		                 "%u KiB (%s)", s->sm.nohash_below >> 10,
		                 (s->r->flags & SYNC_F_CHECKSUM)
		                 ? "-c compares every hash" : "only small files may go without");
	else
		rc = check_tree(s, &s->sm);
	return rc;
}

/* Read the manifest frames. */
static int read_manifest(struct rstate *s)
{
	struct ctl *c = s->r->ctl;
	uint8_t *all = NULL;
	size_t len = 0, cap = 0;
	int rc;
	for (;;) {
		uint8_t type;
		size_t n;
		if ((rc = sync_recv(s->r, "sender", &type, &n)) < 0)
			break;
		if (type == CTL_ERROR) {
			rc = -ECANCELED;
			s->res->code = sync_peer_error(c, n, "the sender failed: ");
			break;
		}
		struct manifest_end_msg me;
		if (type == CTL_MANIFEST_END && manifest_end_decode(c->buf, n, &me) == 0) {
			s->sender_errors = me.errors;
			s->sender_vanished = me.vanished;
			memcpy(s->akey, me.akey, SYNC_AKEY_LEN);
			explicit_bzero(me.akey, SYNC_AKEY_LEN);
			explicit_bzero(c->buf, n);
			/* the sender's figures, for --stats (shown, never acted on) */
			s->res->flist_gen_us = me.gen_us;
			s->res->flist_xfer_us = me.xfer_us;
			rc = 0;
			break;
		}
		if (type != CTL_MANIFEST) {
			rc = recv_reject(s, "the sender sent a message of type %u and %zu bytes in "
			                 "its file list", type, n);
			break;
		}
		if ((uint64_t)len + n > ((uint64_t)4 << 30) || len + n < len) {
			rc = recv_reject(s, "the sender's file list is over 4 GiB");
			break;
		}
		if (!n)
			continue;   /* an empty part: nothing to keep */
		if (len + n > cap) {   /* doubling, huge pages past 2 MiB (common/mem.h) */
			size_t want = cap ? cap : 65536;
			while (want < len + n)
				want = want > SIZE_MAX / 2 ? len + n : want * 2;
			uint8_t *b = mem_grow(all, want);
			if (!b) {
				rc = -ENOMEM;
				break;
			}
			all = b;
			cap = want;
		}
		memcpy(all + len, c->buf, n);
		len += n;
	}
	rsh_narrow_pipe(c->in);   /* what comes now is small */
	if (rc == 0)
		rc = take_manifest(s, all, len);
	free(all);
	return rc;
}

/* Rename the sender's top name `from` to `to` in every path (cp -r A B when
 * B does not exist yet). Order is kept: the prefix is common to all. */
static int map_top(struct rstate *s, struct idx_manifest *m, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to);
	for (size_t i = 0; i < m->n; i++) {
		char *p = m->e[i].path, shown[300];
		if (strncmp(p, from, fl) != 0 || (p[fl] != '/' && p[fl] != '\0'))
			return recv_reject(s, "the sender's file list has an entry outside the "
			                   "name it sends: '%s'", log_path(shown, sizeof shown, p));
		char *n = malloc(tl + strlen(p + fl) + 1);
		if (!n)
			return -ENOMEM;
		memcpy(n, to, tl);
		strcpy(n + tl, p + fl);
		free(p);
		m->e[i].path = n;
	}
	return 0;
}

/* Drop the sender's root entry (its parent directory is not ours to copy). */
static void drop_root(struct idx_manifest *m)
{
	if (m->n == 0 || *m->e[0].path)
		return;
	free(m->e[0].path);
	free(m->e[0].link);
	free(m->e[0].chunks);
	free(m->e[0].x);
	memmove(m->e, m->e + 1, (m->n - 1) * sizeof *m->e);
	m->n--;
	for (size_t i = 0; i < m->n; i++)
		if (m->e[i].hlink)
			m->e[i].hlink--;
}

/* Where DST's root is and what the sender's top name becomes. */
static int choose_root(struct rstate *s, int named, int is_dir, const char *top,
                       char **only, char **mapto)
{
	const char *dst = s->r->path;
	int dry = s->r->flags & SYNC_F_DRYRUN;
	struct stat st;
	int exists = stat(dst, &st) == 0, isdir = exists && S_ISDIR(st.st_mode);
	if (!exists && errno != ENOENT) {
		/* rsync's words and exit (3): a parent not searchable, not a dir */
		int err = errno;
		log_err("%s: cannot stat destination: %s", dst, strerror(err));
		return -err;
	}
	size_t len = strlen(dst);
	int slash = len > 1 && dst[len - 1] == '/';
	*only = *mapto = NULL;
	int mkpath = (s->r->flags & SYNC_F_MKPATH) && !dry;
	if (named && is_dir && exists && !isdir) {
		/* rsync -r A file: refused (3), never the file replaced by A */
		log_err("%s: not a directory: refusing to replace this file with the directory "
		        "'%s' (remove it, or name another DST)", dst, top);
		return -ENOTDIR;
	}
	if (!named || isdir || slash) {
		if (!exists && mkpath && sync_mkpath(dst) < 0)
			return -EIO;
		if (!exists && !dry && !mkpath && mkdir(dst, 0777) < 0) {
			int err = errno;
			if (err == EEXIST && s->r->o && s->r->o->ranked) {
				/* another rank's receiver made it a moment ago: its */
				exists = stat(dst, &st) == 0;
				isdir = exists && S_ISDIR(st.st_mode);
			} else if (err != EEXIST) {
				/* as rsync: exit 11 (its parent is missing: --mkpath makes it) */
				log_err("%s: cannot create: %s%s", dst, strerror(err),
				        err == ENOENT ? " (--mkpath creates missing parents)" : "");
				return -EIO;
			}
		}
		if (exists && !isdir) {
			log_err("%s: not a directory", dst);
			return -ENOTDIR;
		}
		if (!exists) {   /* as rsync, which says so with -v and -i */
			s->root_made = 1;
			recv_item_created_root(s, dst);
		}
		s->root_path = strdup(dst);
		if (named)
			*only = strdup(top);
		return s->root_path ? 0 : -ENOMEM;
	}
	/* DST names the copy itself: its parent is the root */
	char *copy = strdup(dst), *cut = strrchr(copy, '/');
	const char *base = cut ? cut + 1 : copy;
	if (cut == copy)
		s->root_path = strdup("/");
	else if (cut) {
		*cut = '\0';
		s->root_path = strdup(copy);
	} else
		s->root_path = strdup(".");
	*only = strdup(base);
	*mapto = strdup(base);
	free(copy);
	if (mkpath && s->root_path && access(s->root_path, F_OK) < 0 &&
	    sync_mkpath(s->root_path) < 0)
		return -EIO;
	if (!exists && is_dir && s->root_path && stat(s->root_path, &st) < 0) {
		/* rsync -r A nodir/A: mkdir DST failed, exit 11 */
		int err = errno;
		log_err("%s: cannot create: %s%s", dst, strerror(err),
		        err == ENOENT ? " (--mkpath creates missing parents)" : "");
		return -EIO;
	}
	return *only && s->root_path ? 0 : -ENOMEM;
}

/* READY (n bytes at b) into m: what it sends, checked (kind, one plain
 * name when named, none else). 0 or -EPROTO (said). */
static int ready_check(struct rstate *s, uint8_t type, const uint8_t *b, size_t n,
                       struct ready_msg *m)
{
	char shown[300];
	if (type != CTL_READY)
		return recv_reject(s, "the sender's first message is not READY (type %u)", type);
	int rc = ready_decode(b, n, m);
	if (rc == -EPROTO)
		return recv_reject(s, "the sender's READY is malformed (%zu bytes)", n);
	const char *name = m->name;
	size_t l = m->name_len;
	log_path(shown, sizeof shown, name);
	if (m->kind > READY_MIRROR || m->is_dir > 1)
		return recv_reject(s, "the sender's READY has flags out of range");
	if (m->kind == READY_CONTENTS && l)
		return recv_reject(s, "the sender's READY names '%s' but sends a directory's "
		                   "contents", shown);
	if (m->kind == READY_CONTENTS)
		return 0;
	if (l == 0)
		return recv_reject(s, "the sender's READY says it sends one entry but names none");
	if (memchr(name, '\0', l < READY_NAME_MAX ? l : READY_NAME_MAX))
		return recv_reject(s, "the sender's top name has a NUL byte: '%s'", shown);
	if (rc == -ENAMETOOLONG)
		return recv_reject(s, "the sender's top name is over 255 bytes: '%s'", shown);
	if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return recv_reject(s, "the sender's top name is not one plain name: '%s'", shown);
	return 0;
}

/* 1. What the sender sends: a directory's contents, or one named entry
 * (READY); then where DST's root is. */
static int read_ready(struct rstate *s)
{
	struct ctl *c = s->r->ctl;
	uint8_t type;
	size_t n;
	int rc = sync_recv(s->r, "sender", &type, &n);
	if (rc == 0 && type == CTL_ERROR && n == 4) {
		/* a sender that said why itself (a client, or a fan-out's
		 * source): a far receiver would only repeat it under its name */
		s->res->code = sync_peer_code(c, n);
		return -ECANCELED;
	}
	if (rc == 0 && type == CTL_ERROR) {
		s->res->code = sync_peer_error(c, n, "");
		if (s->res->code == RD_EXIT_PARTIAL)
			s->res->errors = 1;   /* its SRC failed (--json: one error, unnamed) */
		return -ECANCELED;
	}
	struct ready_msg m;
	if (rc < 0 || (rc = ready_check(s, type, c->buf, n, &m)) < 0)
		return rc;
	s->named = m.kind == READY_NAMED;
	s->mirror = m.kind == READY_MIRROR;
	s->top = strndup(m.name, m.name_len);
	if (!s->top)
		return -ENOMEM;
	if ((rc = choose_root(s, s->named, m.is_dir, s->top, &s->only, &s->mapto)) < 0)
		s->res->code = rc == -EIO ? RD_EXIT_FILEIO : RD_EXIT_SELECT;
	return rc;
}

/* The scan's options: the filter rules (when both sides exclude the same
 * paths, excluded files of DST are neither compared nor deleted, nor even
 * scanned; else --delete asks the rules, with DST's dir-merge files, path
 * by path), --files-from's paths, -x. 0 or -ENOMEM. */
static int scan_opts(struct rstate *s)
{
	const struct sync_opts *o = s->r->o;
	int rc;
	s->so.only = s->only;
	s->so.one_fs = o->one_fs;
	s->so.meta = sync_scan_meta(s->r->flags);
	s->so.no_index = o->no_index;   /* --no-index: both sides */
	/* DST's small files are compared by size and mtime, never read (with
	 * -c, lazy_below is 0): their rows would only cost a load at every scan
	 * and a write at every save (docs/index.md) */
	s->so.lazy_below = sync_nohash_below(s->r);
	s->so.lazy_any = 1;
	if (o->nrules) {
		if ((rc = sync_filter_open(&s->filter, o, SYNC_RM_RECEIVER, s->root,
		                           s->only ? "" : NULL)) < 0)
			return rc;
		if ((s->filter_scanned = sync_filter_simple(o))) {
			s->so.skip = sync_filter_skip;
			s->so.skip_ctx = s->filter;
		}
	}
	if (o->files_from) {
		if ((rc = sync_files_roots(o, &s->roots, &s->nroots)) < 0)
			return rc;
		s->so.roots = s->roots;
		s->so.nroots = s->nroots;
		s->so.roots_optional = 1;
		/* rsync sets DST's own metadata only when the list names "."; a
		 * --watch round's DST is the mirror of SRC: its root's too */
		s->keep_root_meta = !o->round;
		for (size_t i = 0; i < s->nroots; i++)
			s->keep_root_meta &= *s->roots[i].path != '\0';
		if (o->windows && s->nroots)   /* by path: --delete looks them up */
			qsort(s->roots, s->nroots, sizeof *s->roots, recv_root_cmp);
	}
	return 0;
}

int recv_root_cmp(const void *a, const void *b)
{
	return strcmp(((const struct idx_root *)a)->path, ((const struct idx_root *)b)->path);
}

/* Directory path gets u+wx while the run's entries land, when this user
 * owns it and it lacks them (recorded in s->tweaked, once). */
static void tweak_one(struct rstate *s, const char *path)
{
	struct stat st;
	for (size_t j = 0; j < s->ntweaked; j++)
		if (!strcmp(s->tweaked[j].path, path))
			return;
	int fd = *path ? sync_open_beneath(s->root, path, O_RDONLY | O_DIRECTORY) : dup(s->root);
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
	    (st.st_mode & (S_IWUSR | S_IXUSR)) != (S_IWUSR | S_IXUSR) &&
	    (s->tweaked[s->ntweaked].path = strdup(path)) &&
	    fchmod(fd, (st.st_mode & 07777) | S_IWUSR | S_IXUSR) == 0)
		s->tweaked[s->ntweaked++].mode = st.st_mode & 07777;
	else if (s->tweaked[s->ntweaked].path) {
		free(s->tweaked[s->ntweaked].path);
		s->tweaked[s->ntweaked].path = NULL;
	}
	close(fd);
}

/* --windows, not as root: a directory of the window is one its parent's
 * window made and, with -p, gave its mode: read only (0555, a Go module
 * cache's) it would take none of its own entries. Each such directory
 * this user owns gets u+w while the window's entries land (as rsync
 * tweaks a directory it writes into); untweak() puts the mode back. A
 * ranked run's files (its big files, a split file's parts and its join:
 * no windows) are as a window's entries: their directories, read only in
 * DST since an earlier run, are tweaked too. */
static void tweak(struct rstate *s)
{
	const struct sync_opts *o = s->r->o;
	int files = o && o->ranked && !o->windows;
	if (!o || !(o->windows || files) || geteuid() == 0 || (s->r->flags & SYNC_F_DRYRUN) ||
	    !(s->tweaked = calloc(s->nroots ? s->nroots : 1, sizeof *s->tweaked)))
		return;
	for (size_t i = 0; i < s->nroots; i++) {
		const char *p = s->roots[i].path, *sl = strrchr(p, '/');
		char *dir;
		if (!files) {
			if (s->roots[i].depth == 1)
				tweak_one(s, p);
		} else if ((dir = strndup(p, sl ? (size_t)(sl - p) : 0))) {
			tweak_one(s, dir);
			free(dir);
		}
	}
}

/* The tweaked directories' modes: the sender's with -p, else their own.
 * In a ranked run's pass 1 before a pass 2 (--ranked=later), with u+wx:
 * another rank may still make entries in it, and pass 2 sets the mode
 * (sync/ranks.c); its files (not windows) with -p leave it to their
 * directory's window, which sets it after them. */
static void untweak(struct rstate *s)
{
	const struct sync_opts *o = s->r->o;
	int keep = o && o->ranked && !o->windows && (s->r->flags & SYNC_F_PERMS);
	for (size_t i = 0; i < s->ntweaked; i++) {
		const char *p = s->tweaked[i].path;
		const struct idx_entry *e = idx_manifest_find(&s->sm, p);
		mode_t m = (s->r->flags & SYNC_F_PERMS) && e && e->type == IDX_DIR
		           ? (mode_t)e->mode : s->tweaked[i].mode;
		if (o && o->ranked == 2)
			m |= S_IWUSR | S_IXUSR;
		int fd = keep ? -1 : *p ? sync_open_beneath(s->root, p, O_RDONLY | O_DIRECTORY)
		                        : dup(s->root);
		if (fd >= 0 && fchmod(fd, m) < 0)
			recv_fail(s, p, "cannot set the mode", errno);
		if (fd >= 0)
			close(fd);
		free(s->tweaked[i].path);
	}
	free(s->tweaked);
	s->tweaked = NULL;
	s->ntweaked = 0;
}

/* --windows with --delete (not before): what appeared in SRC since the
 * window's scan, from the sender (CTL_WCHECK), before anything is deleted. */
static int read_wcheck(struct rstate *s)
{
	unsigned del = s->r->flags & (SYNC_F_DELETE | SYNC_F_DELETE_BEFORE);
	if (!s->r->o || !s->r->o->windows || del != SYNC_F_DELETE)
		return 0;
	uint8_t type;
	size_t n;
	unsigned flags;
	const char *why;
	int rc = sync_recv(s->r, "sender", &type, &n);
	if (rc < 0)
		return rc;
	if (type == CTL_ERROR) {
		s->res->code = sync_peer_error(s->r->ctl, n, "the sender failed: ");
		return -ECANCELED;
	}
	if (type != CTL_WCHECK)
		return recv_reject(s, "the sender sent a message of type %u where its window's "
		                   "check was due", type);
	rc = wcheck_decode(s->r->ctl->buf, n, &flags, &s->kept, &s->nkept, &why);
	if (rc == -EPROTO)
		return recv_reject(s, "the sender's window check %s", why);
	s->kept_all = (flags & WCHECK_ALL) != 0;
	return rc;
}

/* 2. Our side, scanned while the sender scans its own. */
static int scan_dst(struct rstate *s)
{
	struct role *r = s->r;
	struct idx_stats st;
	s->root = open(s->root_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->root < 0 && !(errno == ENOENT && (r->flags & SYNC_F_DRYRUN))) {
		int err = errno;
		log_err("%s: %s", s->root_path, strerror(err));
		s->res->code = RD_EXIT_SELECT;
		return -err;
	}
	if (scan_opts(s) < 0) {
		s->res->code = RD_EXIT_FILEIO;
		return -ENOMEM;
	}
	if (s->root < 0)
		return 0;   /* a dry run into nothing */
	/* one writer per tree, and none above or inside it (a dry run writes
	 * nothing); the receivers of a ranked run (--ranked) write DST
	 * together, sharing its flock, each with a writer's marks: every other
	 * run is still kept from it, above it and inside it (sync/lock.c) */
	int rc = (r->flags & SYNC_F_DRYRUN) ? 0 :
	         sync_lock(s->root, s->root_path, r->o && r->o->ranked ? SYNC_LOCK_RANKED
	                       : SYNC_LOCK_WRITE, r->o ? r->o->ranked_job : 0, &s->lock);
	if (rc < 0) {
		s->res->code = rc == -EWOULDBLOCK ? RD_EXIT_LOCKED : RD_EXIT_SELECT;
		return rc;
	}
	rc = idx_scan(s->root_path, &s->so, &s->dm, &st);
	if (rc < 0) {
		s->res->code = RD_EXIT_SELECT;
		return rc;
	}
	s->scan_stored = st.stored;
	s->dst_stamp = st.stamp_ns;
	recv_partial_load(s);   /* before the temps go: --partial may reuse some */
	if (st.temps && !(r->flags & SYNC_F_DRYRUN))
		recv_clean_temps(s);
	return 0;
}

/* 3. Their manifest, in our names. */
static int name_manifest(struct rstate *s)
{
	int rc;
	if (!s->named)
		return 0;
	s->shift = s->sm.n && !*s->sm.e[0].path;
	drop_root(&s->sm);
	if (s->mapto && strcmp(s->top, s->mapto) && (rc = map_top(s, &s->sm, s->top, s->mapto)) < 0)
		return rc;
	if (s->root >= 0)
		drop_root(&s->dm);   /* the parent directory is not part of the copy */
	return 0;
}

/* 4. The plan (directories made, obstacles removed), and what to fetch
 * told to the sender; *send_n: how many files (none in a dry run). */
static int plan_and_ask(struct rstate *s, uint32_t *send_n)
{
	if (s->root < 0)
		s->root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);   /* dry run into nothing */
	int rc = recv_backup_start(s);
	if (rc < 0) {
		s->res->code = RD_EXIT_FILEIO;
		return rc;
	}
	recv_link_dest_start(s);
	if ((rc = recv_plan(s, &s->want, &s->nwant)) < 0)
		return rc;
	/* small files come in the archive: without libarchive (said), stop
	 * before any data lands, not at the first archive message (a fan-out
	 * host forwards what it cannot unpack) */
	for (uint32_t k = 0; k < s->nwant && !(s->r->flags & SYNC_F_DRYRUN) && !s->r->o->relay;
	     k++)
		if (s->sm.e[s->want[k]].size < SYNC_SMALL) {
			if (larchive_load() < 0) {
				s->res->code = RD_EXIT_FILEIO;
				return -ENOSYS;
			}
			break;
		}
	recv_partial_sweep(s);   /* earlier runs' temps nothing reuses */
	/* --delete-before: room made before any data comes (the sender waits
	 * for the plan); what the sender could not read is known, what will
	 * fail later cannot be */
	if (s->r->flags & SYNC_F_DELETE_BEFORE)
		recv_delete_extra(s);
	uint8_t *pl = malloc(4 + (size_t)s->nwant * 4);
	if (!pl)
		return -ENOMEM;
	*send_n = (s->r->flags & SYNC_F_DRYRUN) ? 0 : s->nwant;
	put_u32(pl, *send_n);
	for (uint32_t k = 0; k < *send_n; k++)
		put_u32(pl + 4 + 4 * k, s->want[k] + s->shift);
	rc = ctl_send(s->r->ctl, CTL_PLAN, pl, 4 + (size_t)*send_n * 4);
	free(pl);
	if (rc == 0)
		rc = recv_send_chunks(s, *send_n);   /* of files DST has: what changed */
	if (rc == 0)
		recv_log_start(s);   /* the lines may go now: PLAN went first */
	return rc;
}

/* Pulling (we are the client): after SENT, the sender's frames of type
 * (CTL_RETRY: files it will send again in the next round; CTL_ASREAD:
 * files it sent as read), want entries in all (peer input: each one of
 * the manifest's regular files, ascending), onto list. 0 or an error
 * (said). */
static int take_sender_list(struct rstate *s, uint8_t want_type, uint64_t want,
                            struct sync_paths *list)
{
	const char *what = want_type == CTL_RETRY ? "to send again" : "sent as read";
	uint64_t got = 0;
	int64_t prev = -1;
	if (!list)
		return recv_reject(s, "the sender listed %llu files %s, which was not offered",
		                   (unsigned long long)want, what);
	while (got < want) {
		uint8_t type;
		size_t n;
		int rc = sync_recv(s->r, "sender", &type, &n);
		if (rc < 0)
			return rc;
		const uint8_t *b = s->r->ctl->buf;
		if (type != want_type || n < 4 || n % 4 || (n - 4) / 4 != get_u32(b) ||
		    get_u32(b) == 0 || get_u32(b) > want - got)
			return recv_reject(s, "the sender's list of files %s is malformed (type %u, "
			                   "%zu bytes)", what, type, n);
		for (uint32_t k = 0, cnt = get_u32(b); k < cnt; k++) {
			uint32_t i = get_u32(b + 4 + 4 * k);
			if (i < s->shift || i - s->shift >= s->sm.n || (int64_t)i <= prev ||
			    s->sm.e[i - s->shift].type != IDX_REG)
				return recv_reject(s, "the sender lists entry %u %s, which is not a file "
				                   "of its list, or not in order", i, what);
			prev = i;
			sync_paths_add(list, s->sm.e[i - s->shift].path);
		}
		got += get_u32(b);
	}
	return 0;
}

/* After the data: CTL_SENT, the count of planned files the sender could
 * not send. Files that stopped short beyond that count are our errors. */
static int read_sent(struct rstate *s)
{
	struct ctl *c = s->r->ctl;
	uint8_t type = CTL_SENT;
	size_t n = sizeof s->early_sent;
	const uint8_t *b = s->early_sent;
	if (!s->has_early_sent) {   /* (it came while a re-link was awaited) */
		int rc = sync_recv(s->r, "sender", &type, &n);
		if (rc < 0)
			return rc;
		b = c->buf;
	}
	if (type == CTL_ERROR) {
		s->res->code = sync_peer_error(c, n, "the sender failed: ");
		return -ECANCELED;
	}
	struct sent_msg sm;
	int rc0;
	if (type != CTL_SENT || sent_decode(b, n, &sm) < 0)
		return recv_reject(s, "the sender's report after the data is malformed (type %u, "
		                   "%zu bytes)", type, n);
	s->unsent = sm.unsent;
	s->retried = sm.retried;
	uint64_t unread = sm.unreadable;
	if (s->gap && s->incomplete) {
		/* past a gap the sender's counts (of every host's files) cannot
		 * tell what was lost from what vanished: the client's next round
		 * sends what is still missing, and says what vanished */
		s->gap_short = s->incomplete;
		s->unsent = 0;
		log_err("%llu files did not come whole: data on its way here was lost with the "
		        "host that failed before this one", (unsigned long long)s->gap_short);
		return 0;
	}
	if (s->r->o->relay) {   /* a fan-out's counts are of every host's files */
		s->unsent = s->unsent < s->incomplete ? s->unsent : s->incomplete;
		unread = unread < s->unsent ? unread : s->unsent;
	}
	/* what could not be read is an error (23), not a vanished file (24) */
	STAT_ADD(s->res->errors, unread);
	s->res->vanished = s->unsent - unread;   /* --json */
	/* pulling: the files it will send again (rounds), those it sent as read */
	if (s->retried && s->r->is_client &&
	    (rc0 = take_sender_list(s, CTL_RETRY, s->retried, s->r->retry)) < 0)
		return rc0;
	if (sm.as_read && s->r->is_client && sm.as_read > s->nfiles)
		return recv_reject(s, "the sender says it sent %llu files as read, of %u planned",
		                   (unsigned long long)sm.as_read, s->nfiles);
	if (sm.as_read && s->r->is_client &&
	    (rc0 = take_sender_list(s, CTL_ASREAD, sm.as_read, s->r->as_read)) < 0)
		return rc0;
	if (s->r->fails && s->r->is_client) {   /* --json: the sender's list follows */
		const char *why;
		int rc = sync_recv(s->r, "sender", &type, &n);
		if (rc < 0)
			return rc;
		if (type != CTL_FAILED || sync_fails_take(s->r->fails, c->buf, n, &why) < 0)
			return recv_reject(s, "the sender's list of failed files is malformed (type "
			                   "%u, %zu bytes)", type, n);
	}
	if (s->incomplete > s->unsent) {
		log_err("%llu files came incomplete, but the sender reported %llu it could "
		        "not send; they are left as they were",
		        (unsigned long long)s->incomplete, (unsigned long long)s->unsent);
		STAT_ADD(s->res->errors, s->incomplete - s->unsent);
	}
	return 0;
}

/* The scan of DST, on a thread of its own while the main thread reads the
 * sender's manifest: the sender writes it right after its own scan, and a
 * receiver that read nothing until its scan ended would stall it (past
 * --timeout, on a large tree). */
struct dst_scan {
	struct rstate *s;
	int rc;
};

static void *scan_main(void *arg)
{
	struct dst_scan *d = arg;
	d->rc = scan_dst(d->s);
	return NULL;
}

/* 2 and 3 side by side. */
static int scan_and_read(struct rstate *s)
{
	struct dst_scan d = { s, 0 };
	pthread_t th;
	int threaded = pthread_create(&th, NULL, scan_main, &d) == 0;
	if (!threaded)
		d.rc = scan_dst(s);
	int rc = read_manifest(s);
	if (threaded)
		pthread_join(th, NULL);
	if (d.rc < 0)
		return d.rc;   /* our side first: DST unusable, locked */
	if (rc == 0 && (rc = name_manifest(s)) == 0)
		sync_count_entries(s->res, &s->sm, 0);   /* --stats, --json */
	return rc;
}

static int receive(struct rstate *s)
{
	uint32_t send_n;
	int rc;
	if ((rc = read_ready(s)) < 0 || (rc = scan_and_read(s)) < 0 ||
	    (rc = recv_check_mirror(s)) < 0)
		return rc;
	if ((rc = recv_prepare_meta(s)) < 0) {
		s->res->code = rc == -EINVAL ? RD_EXIT_USAGE : 0;
		return rc;
	}
	tweak(s);   /* before the plan makes anything in the window's directories */
	if ((rc = plan_and_ask(s, &send_n)) < 0)
		return rc;
	/* 5. the data, and what the sender could not send */
	if (send_n && (rc = recv_take(s, s->want, s->nwant)) < 0) {
		if (rc == -EACCES)
			s->res->code = RD_EXIT_AUTH;
		return rc;
	}
	if (send_n && (rc = read_sent(s)) < 0)
		return rc;
	if ((rc = read_wcheck(s)) < 0)
		return rc;
	if ((rc = recv_send_retry(s)) < 0)   /* --rounds: what changed as sent */
		return rc;
	/* 6. links, deletions, metadata, and the index for next time */
	recv_make_links(s);
	if (!(s->r->flags & SYNC_F_DELETE_BEFORE))
		recv_delete_extra(s);   /* after the data, --delete-after and -during too */
	recv_fix_meta(s);
	untweak(s);
	if ((s->r->flags & SYNC_F_REMOVE_SOURCE) && !(s->r->flags & SYNC_F_DRYRUN))
		recv_send_landed(s);
	/* the scan stored what DST held; only a changed DST needs it again.
	 * Not when that store failed: the save compares with the scan's
	 * entries, which the index would then not hold (its older rows, some
	 * the scan would not trust, would stay under a new stamp). After a
	 * scan of some paths (--files-from, a --watch round) only their rows
	 * change: every other row is one that scan kept, older than its stamp,
	 * so the save's later stamp vouches for nothing unchecked */
	if (!(s->r->flags & SYNC_F_DRYRUN) && s->actions && s->scan_stored)
		recv_save_index(s);
	return 0;
}

static void rstate_free(struct rstate *s)
{
	if (s->tweaked)
		untweak(s);   /* a window that failed: its directories as they were */
	explicit_bzero(s->akey, sizeof s->akey);
	for (uint32_t k = 0; k < s->nfiles; k++) {
		if (s->files[k].fd >= 0 || s->files[k].dirfd >= 0 || s->files[k].bfd >= 0)
			recv_drop_file(&s->files[k]);
		free(s->files[k].seen);
		free(s->files[k].bhave);
		chunk_map_free(&s->files[k].map);
	}
	free(s->logbuf);
	free(s->mismatch);
	free(s->want);
	free(s->fetch);
	free(s->files);
	free(s->written);
	free(s->change);
	idx_diff_free(&s->diff);
	free(s->only);
	free(s->mapto);
	free(s->top);
	free(s->root_path);
	recv_dircache_free(&s->dirc);
	free(s->scratch);
	free(s->moved);
	sync_chmod_free(s->chmod);
	sync_filter_free(s->filter);
	sync_files_roots_free(s->roots, s->nroots);
	while (s->nkept)
		free(s->kept[--s->nkept]);
	free(s->kept);
	free(s->bprotect);
	if (s->bfd >= 0)
		close(s->bfd);
	for (int k = 0; k < s->nld; k++)
		close(s->ldfd[k]);
	if (s->root >= 0)
		close(s->root);
	sync_unlock(s->lock);
	idx_manifest_free(&s->sm);
	idx_manifest_free(&s->dm);
}

int sync_receiver(struct role *r, struct sync_result *res)
{
	struct rstate s = { .r = r, .root = -1, .res = res, .dirc = { NULL, -1 }, .bfd = -1,
	                    .mu = PTHREAD_MUTEX_INITIALIZER,
	                    .fail_mu = PTHREAD_MUTEX_INITIALIZER,
	                    .log_mu = PTHREAD_MUTEX_INITIALIZER,
	                    .ctl_mu = PTHREAD_MUTEX_INITIALIZER };
	memset(res, 0, sizeof *res);
	res->fails = r->fails;
	s.umask = umask(022);
	umask(s.umask);
	recv_log_init(&s);
	int rc = receive(&s);
	recv_fail_end(&s);
	if (rc < 0 && !res->code)
		res->code = rd_exit_code(rc);
	/* as rsync: an error is 23; files that vanished on the way, alone, 24 */
	STAT_ADD(res->errors, s.sender_errors);   /* what the sender could not read */
	STAT_ADD(res->vanished, s.sender_vanished + s.nmismatch);   /* --json */
	/* pulling with rounds: what vanished, not what goes again (exit 24
	 * whatever the rounds land) */
	res->gone = s.sender_vanished + (s.unsent > s.retried ? s.unsent - s.retried : 0);
	if (!res->code && s.gap_short)
		res->code = RD_EXIT_CONN;   /* lost on the way: a fan-out retries it */
	else if (!res->code && s.full_said)
		res->code = RD_EXIT_FILEIO;   /* as rsync: a file did not fit, the rest landed */
	else if (!res->code && res->errors)
		res->code = RD_EXIT_PARTIAL;
	else if (!res->code && (s.unsent || s.sender_vanished || s.nmismatch))
		res->code = RD_EXIT_VANISHED;
	else if (!res->code && s.del_skipped)
		res->code = RD_EXIT_DEL_LIMIT;   /* rsync's order: 23, 24, then 25 */
	recv_log_end(&s);
	uint8_t done[RESULT_LEN];
	const char *transport = res->transport;
	result_put(done, res);
	res->transport = transport;
	/* a stalled peer would stall this too; but a fan-out host's data may
	 * come from another host that died, and its client wants to know */
	if ((rc != -ECONNRESET && rc != -ETIME) || r->o->relay) {
		size_t n;
		uint8_t *b = r->fails && !r->is_client ? sync_fails_encode(r->fails, &n) : NULL;
		if (b)   /* --json: what failed here, first */
			ctl_send(r->ctl, CTL_FAILED, b, n);
		free(b);
		ctl_send(r->ctl, CTL_DONE, done, sizeof done);
	}
	res->ctl_tx = r->ctl->tx_bytes;
	res->ctl_rx = r->ctl->rx_bytes;
	recv_partial_end(&s);
	rstate_free(&s);
	return res->code;
}

int recv_fuzz_manifest(struct rstate *s, const uint8_t *b, size_t len)
{
	return take_manifest(s, b, len);
}
