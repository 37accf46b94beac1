/*
 * The receiver's plan: what each entry of the sender's manifest needs. What
 * "changed" means is index/'s idx_diff() (one rule set for the project),
 * given the run's options: rsync's quick check (size and mtime) or, with -c,
 * content hashes; permissions, times and owners only when they are kept.
 * What the sync adds on top is its own: hard-link followers are linked to
 * their leader, not compared, and a type change removes the old entry.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/mem.h"
#include "sync/recv/recv_int.h"

/* Is path one of the window's directories (a root) or an entry of one? */
static int window_owns(const struct rstate *s, const char *path)
{
	const char *sl = strrchr(path, '/');
	char *parent = strndup(path, sl ? (size_t)(sl - path) : 0);
	const struct idx_root *r = NULL;
	int own = 0;
	if (!parent)
		return 1;   /* (out of memory: as before) */
	if (bsearch(&(struct idx_root){ .path = path }, s->roots, s->nroots, sizeof *s->roots,
	            recv_root_cmp))
		own = 1;
	else if (*path && (r = bsearch(&(struct idx_root){ .path = parent }, s->roots,
	                               s->nroots, sizeof *s->roots, recv_root_cmp)))
		own = r->depth == 1;
	free(parent);
	return own;
}

/* Is DST's directory d as a ranked run's pass 1 left sender entry e, not
 * as root: its mode (-p: the sender's; else less the umask) with u+wx
 * added (meta.c), which pass 2 sets? */
static int pass1_mode(const struct rstate *s, const struct idx_entry *e,
                      const struct idx_entry *d)
{
	mode_t m = recv_mode_of(s, e) & 07777;
	return s->r->o && s->r->o->ranked == 1 && geteuid() != 0 && d && d->type == IDX_DIR &&
	       (m & (S_IWUSR | S_IXUSR)) != (S_IWUSR | S_IXUSR) &&
	       (d->mode & 07777) == (m | S_IWUSR | S_IXUSR);
}

/* s->diff and s->change[]: how each sender entry differs from DST's. */
static int classify(struct rstate *s)
{
	int rc = idx_diff(&s->sm, &s->dm, recv_diff_flags(s), &s->diff);
	if (rc < 0)
		return rc;
	s->change = calloc(s->sm.n ? s->sm.n : 1, 1);
	if (!s->change)
		return -ENOMEM;
	for (size_t k = 0; k < s->diff.n; k++)
		if (s->diff.c[k].src)
			s->change[s->diff.c[k].src - s->sm.e] = (uint8_t)s->diff.c[k].kind;
	/* a ranked run: the directories above a window's own, and all those
	 * of a run of big files, are other windows' to set (made here if
	 * missing, as those of --files-from), else every rank would set and
	 * name them */
	for (size_t i = 0; s->r->o && s->r->o->ranked && i < s->sm.n; i++)
		if (s->change[i] == IDX_META && s->sm.e[i].type == IDX_DIR &&
		    !recv_dir_ours(s, s->sm.e[i].path))
			s->change[i] = 0;
	/* a split file's part: its metadata is the join's to set and say */
	for (size_t i = 0; s->r->o && s->r->o->ranked_split > 0 && i < s->sm.n; i++)
		if (s->change[i] == IDX_META && s->sm.e[i].type == IDX_REG)
			s->change[i] = 0;
	return 0;
}

int recv_window_top(const struct rstate *s, const char *path)
{
	const struct sync_opts *o = s->r->o;
	if (!o || !o->windows || o->ranked || !*path || !recv_window_dir(s, path))
		return 0;   /* (a ranked run's windows run in any order, and its
		               pass 2 sets the modes of read-only directories) */
	/* and its parent's window is another (a window of several directories
	 * may hold a parent and its child: the child, an entry of its parent,
	 * is set here) */
	const char *sl = strrchr(path, '/');
	char *parent = strndup(path, sl ? (size_t)(sl - path) : 0);
	if (!parent)
		return 0;   /* (out of memory: set, and said, here too) */
	int other = !recv_window_dir(s, parent);
	free(parent);
	return other;
}

int recv_dir_ours(const struct rstate *s, const char *path)
{
	const struct sync_opts *o = s->r->o;
	if (!o || !o->ranked)
		return 1;
	return o->windows && window_owns(s, path);
}

/* mkdirat(pd, name, 0700), in a ranked run not as root also where pd is
 * read only: another rank's window may have given a directory above this
 * window's its mode (0555, a Go module cache's) before this window makes
 * a directory in it. As rsync does with a directory it writes into, this
 * user's own gets u+wx for the mkdir and its mode back at once; its own
 * window sets its metadata after it made its entries (this one among
 * them, EEXIST then). -1 with errno, or 0. */
static int mkdir_in(const struct rstate *s, int pd, const char *name)
{
	struct stat st;
	if (mkdirat(pd, name, 0700) == 0)
		return 0;
	if (errno != EACCES)
		return -1;
	if (!s->r->o || !s->r->o->ranked || geteuid() == 0 || fstat(pd, &st) < 0 ||
	    st.st_uid != geteuid()) {
		errno = EACCES;
		return -1;
	}
	int rc = -1, err = EACCES;
	for (int tries = 0; rc < 0 && err == EACCES && tries < 3; tries++) {
		mode_t m = st.st_mode & 07777;
		if ((m & (S_IWUSR | S_IXUSR)) == (S_IWUSR | S_IXUSR)) {   /* another rank's tweak */
			rc = mkdirat(pd, name, 0700);
		} else if (fchmod(pd, m | S_IWUSR | S_IXUSR) == 0) {
			rc = mkdirat(pd, name, 0700);
			/* its mode back (in a pass 1 before a pass 2, u+wx stays:
			 * pass 2 sets it); failing, its window sets it */
			if (s->r->o->ranked != 2)
				(void)fchmod(pd, m);
		}
		err = rc < 0 ? errno : 0;
		if (rc < 0 && err == EACCES && fstat(pd, &st) < 0)
			break;   /* (a rank's tweak ended between: again, as it is now) */
	}
	errno = err;
	return rc;
}

/* A directory whose metadata changes, said. Not a ranked run's pass 2
 * setting the mode pass 1 gave u+wx: nothing changes for the user (a
 * single run makes it with its mode at once). */
static void item_dir(struct rstate *s, const struct idx_entry *e, const struct idx_entry *d)
{
	unsigned bits = recv_item_bits(s, e, d, 0);
	if (pass1_mode(s, e, d) && (bits & ~(unsigned)SYNC_ITEM_PERMS) == 0)
		return;
	recv_item(s, '.', e, bits);
}

static void make_dir(struct rstate *s, size_t i)
{
	const struct idx_entry *e = &s->sm.e[i];
	if (s->r->flags & SYNC_F_DRYRUN) {
		STAT_ADD(s->res->created[SYNC_K_DIR], 1);
		recv_item(s, 'c', e, SYNC_ITEM_NEW);
		return;
	}
	const char *name;
	struct stat st;
	int pd = recv_open_parent(s->root, e->path, &name);
	int rc = pd < 0 ? -1 : mkdir_in(s, pd, name);
	int err = errno;
	if (rc < 0 && pd >= 0 && err == EEXIST && s->r->o && s->r->o->ranked &&
	    fstatat(pd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
		/* a ranked run: another rank's receiver made it a moment ago, for
		 * a window of its below this one; its metadata is ours to set */
		s->written[i] = 1;
		close(pd);
		return;
	}
	if (rc < 0) {
		if (s->mapto && !strcmp(e->path, s->mapto) && !s->res->code) {
			/* DST itself (rdcp -r A DST): as rsync, exit 11, nothing more */
			log_err("%s: cannot create: %s", s->r->path, strerror(err));
			s->res->code = RD_EXIT_FILEIO;
		} else {
			recv_fail(s, e->path, RECV_NO_DIR, err);
		}
	} else {
		s->written[i] = 1;
		STAT_ADD(s->actions, 1);
		STAT_ADD(s->res->created[SYNC_K_DIR], 1);
		recv_item(s, 'c', e, SYNC_ITEM_NEW);
	}
	if (pd >= 0)
		close(pd);
}

/* Regular file i needs its content: a slot in files[], or made at once
 * when it is empty. 0, or -ENOMEM. */
static int want_file(struct rstate *s, size_t i, const struct idx_entry *d, uint32_t *want,
                     uint32_t *nwant)
{
	const struct idx_entry *e = &s->sm.e[i];
	if (s->nfiles >= s->nfiles_cap) {   /* recv_plan() counted them: a bug */
		log_err("%s: internal error: more files to fetch than planned", e->path);
		return -EOVERFLOW;
	}
	struct rfile *rf = &s->files[s->nfiles];
	rf->fd = rf->dirfd = rf->bfd = -1;
	rf->existed = d != NULL;
	rf->need = e->nchunks ? e->nchunks : 1;
	if (e->nchunks && !(rf->seen = calloc(e->nchunks, 1)))
		return -ENOMEM;
	rf->nseen = rf->seen ? e->nchunks : 0;
	/* a new file DST holds under another name (renamed, copied): from it */
	const struct idx_entry *from = d ? NULL : recv_moved_find(s, e);
	if (recv_chunk_plan(s, i, d ? d : from, rf) < 0)   /* DST's old version: only what changed */
		return -ENOMEM;
	int rc = recv_inplace_plan(s, i, d, rf);   /* --inplace, --append */
	if (rc != 0) {   /* left alone (1), or refused (-1: said) */
		recv_drop_file(rf);
		s->change[i] = SKIPPED;
		return rc == -ENOMEM ? rc : 0;
	}
	if (recv_split_plan(s, i, rf) < 0 ||    /* a ranked run's split file: a range */
	    (!rf->split && recv_partial_plan(s, i, rf) < 0) ||   /* --partial: an earlier run's temp */
	    recv_blocks_plan(s, e, rf) < 0)      /* changed chunks: by 64 KiB blocks */
		return -ENOMEM;
	rf->ops = rf->split ? &recv_write_split : rf->inplace ? &recv_write_inplace
	          : rf->track ? &recv_write_partial : &recv_write_temp;
	if (s->r->flags & SYNC_F_DRYRUN) {   /* else said when it lands (land.c) */
		recv_item(s, '>', e, recv_item_bits(s, e, d, 1));
		s->res->files++;   /* would be: as rsync -n --stats counts them */
		s->res->created[SYNC_K_REG] += !d;
	}
	s->fetch[i] = (int32_t)s->nfiles++;
	if (e->size == 0 || rf->need == 0) {   /* nothing to send: make it now */
		if (!(s->r->flags & SYNC_F_DRYRUN) && recv_open_temp(s, e, rf) == 0)
			recv_finish_file(s, i, rf);
		s->fetch[i] = -1;
		return 0;
	}
	want[(*nwant)++] = (uint32_t)i;
	return 0;
}

static int64_t sec_of(int64_t ns)
{
	return ns / 1000000000 - (ns % 1000000000 < 0);
}

/* Is sender entry e (DST's d, or NULL) one the options leave alone? rsync's
 * -u (DST's file is newer), --ignore-existing (DST has it, unless both are
 * directories), --min-size and --max-size (regular files out of range:
 * not sent, but not deleted either). */
static int left_alone(const struct sync_opts *o, const struct idx_entry *e,
                      const struct idx_entry *d)
{
	if ((o->flags & SYNC_F_IGNORE_EXISTING) && d && !(e->type == IDX_DIR && d->type == IDX_DIR))
		return 1;
	if (e->type != IDX_REG)
		return 0;
	if ((o->min_size >= 0 && e->size < (uint64_t)o->min_size) ||
	    (o->max_size >= 0 && e->size > (uint64_t)o->max_size))
		return 1;
	/* rsync compares whole seconds here */
	return (o->flags & SYNC_F_UPDATE) && d && d->type == IDX_REG &&
	       sec_of(d->mtime_ns) > sec_of(e->mtime_ns);
}

/* Does DST's directory path hold anything? The manifest says, but under
 * --windows (a scan one level deep) only the directory itself does. */
static int has_entries(const struct rstate *s, const struct idx_manifest *m, const char *path)
{
	if (s->r->o && s->r->o->windows) {
		int fd = sync_open_beneath(s->root, path, O_RDONLY | O_DIRECTORY);
		DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
		struct dirent *de;
		int any = 0;
		if (!d) {
			if (fd >= 0)
				close(fd);
			return errno != ENOENT;   /* unknown: as if full */
		}
		while (!any && (de = readdir(d)))
			any = strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
		closedir(d);
		return any;
	}
	size_t n = strlen(path);
	for (size_t k = 0; k < m->n; k++)
		if (!strncmp(m->e[k].path, path, n) && m->e[k].path[n] == '/')
			return 1;
	return 0;
}

int recv_plan(struct rstate *s, uint32_t **want, uint32_t *nwant)
{
	unsigned f = s->r->flags;
	size_t n = s->sm.n ? s->sm.n : 1;
	*nwant = 0;
	int rc = classify(s);
	if (rc < 0)
		return rc;
	/* a slot in files[] only for a regular file that differs: a re-run
	 * that changes nothing holds none (280 bytes each) */
	size_t nf = 1;
	for (size_t i = 0; i < s->sm.n; i++)
		nf += s->sm.e[i].type == IDX_REG && s->change[i];
	*want = calloc(n, sizeof **want);
	s->fetch = malloc(n * sizeof *s->fetch);
	s->files = calloc(nf, sizeof *s->files);
	s->nfiles_cap = (uint32_t)nf;
	s->written = calloc(n, 1);
	if (!*want || !s->fetch || !s->files || !s->written)
		return -ENOMEM;
	mem_hint_huge(s->files, nf * sizeof *s->files);
	if (s->root_made && !(s->sm.n && !*s->sm.e[0].path))
		STAT_ADD(s->res->created[SYNC_K_DIR], 1);   /* DST, made for a list
		                                               without it (a ranked
		                                               run's big files) */
	for (size_t i = 0; i < s->sm.n && rc == 0; i++) {
		const struct idx_entry *e = &s->sm.e[i];
		const struct idx_entry *d = idx_manifest_find(&s->dm, e->path);
		s->fetch[i] = -1;
		if (*e->path && left_alone(s->r->o, e, d)) {
			s->change[i] = SKIPPED;
			continue;
		}
		if (s->change[i] == IDX_TYPE && d->type == IDX_DIR && *d->path &&
		    !(f & (SYNC_F_DELETE | SYNC_F_FORCE)) && s->r->o && s->r->o->ranked == 2 &&
		    has_entries(s, &s->dm, d->path)) {
			s->change[i] = SKIPPED;   /* a ranked run's pass 2 replaces it */
			continue;
		}
		if (s->change[i] == IDX_TYPE && d->type == IDX_DIR && *d->path &&
		    !(f & (SYNC_F_DELETE | SYNC_F_FORCE)) && has_entries(s, &s->dm, d->path)) {
			/* as rsync: a full directory gives way only to --delete or --force */
			recv_fail(s, d->path, "is a non-empty directory here: not replaced by the "
			          "sender's non-directory without --delete or --force", ENOTEMPTY);
			s->change[i] = SKIPPED;
			continue;
		}
		if (s->change[i] == IDX_TYPE) {   /* as rsync: e's line says it is new */
			if (!(f & SYNC_F_DRYRUN) && recv_remove(s, d->path) < 0) {
				s->change[i] = SKIPPED;   /* in the way still (said): left alone */
				continue;
			}
			d = NULL;
		}
		if (e->type == IDX_DIR) {
			if (!*e->path && (s->root_made || !d)) {   /* DST itself, made now */
				STAT_ADD(s->res->created[SYNC_K_DIR], 1);
				recv_item(s, 'c', e, SYNC_ITEM_NEW);
			} else if (!d)
				make_dir(s, i);
			else if (d && s->change[i] == IDX_META &&   /* set at the end (finish.c) */
			         !recv_window_top(s, e->path))
				item_dir(s, e, d);
			if (s->res->code)
				return -EIO;   /* DST itself could not be made */
			continue;
		}
		if (e->type != IDX_REG)
			continue;   /* links and specials after the data */
		if ((f & SYNC_F_HARDLINKS) && e->hlink && e->hlink != i + 1)
			continue;   /* a follower: linked to its leader later */
		if (d && s->change[i] != IDX_CONTENT) {
			if (s->change[i] == IDX_META) {   /* said when set (finish.c) */
				if (f & SYNC_F_DRYRUN)
					recv_item(s, '.', e, recv_item_bits(s, e, d, 0));
				s->res->meta++;
			}
			continue;
		}
		if (s->nld && recv_link_dest(s, i, d != NULL))
			continue;   /* the same file in a --link-dest DIR: linked */
		rc = want_file(s, i, d, *want, nwant);
	}
	return rc;
}
