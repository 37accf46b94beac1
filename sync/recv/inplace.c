/*
 * --inplace, --append, --append-verify: DST's file is written where it is,
 * no temp file, for users who cannot afford to rewrite a 500 GiB file to
 * change a few chunks (rsync's options, rsync's meaning). What they give up
 * is said in rdcp(1): while a file is being written, and after a run that
 * failed mid-way, DST holds a mix of old and new. Only chunks that verified
 * against the sender's digests are written; chunks DST already has are not
 * touched at all.
 *
 * --append sends only what lies past DST's old end, trusting the prefix as
 * rsync does: the chunk holding the old end goes as block delta (its
 * blocks DST has whole are compared by digest, the rest sent; blocks.c),
 * and every chunk written is verified whole. A DST file as long or longer
 * is left alone. --append-verify first checks
 * the prefix chunks against the sender's digests (DST's come from its
 * index) and refuses the file when they differ. DST's index then holds
 * the digests of what is on disk: under --append, its own for the prefix
 * (append_row(), the row hook), never the sender's for bytes nobody compared.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "sync/recv/recv_int.h"

/* The --append map: every full chunk of DST's old file is kept (checked
 * first with --append-verify), the rest is sent. 0, -1 (refused: said),
 * -ENOMEM. */
static int append_map(struct rstate *s, const struct idx_entry *e, const struct idx_entry *d,
                      struct rfile *f)
{
	uint32_t n = chunk_count(e->size), keep = (uint32_t)(d->size / IDX_CHUNK_SIZE);
	int verify = (s->r->flags & SYNC_F_APPEND_VERIFY) != 0;
	for (uint32_t k = 0; verify && k < keep; k++) {
		if (!(d->flags & IDX_F_UNSTABLE) &&
		    !memcmp(chunk_digest(e, k), chunk_digest(d, k), IDX_HASH_LEN))
			continue;
		char shown[4096];
		log_err("%s: its first %llu bytes in DST differ from the sender's (chunk %u): not "
		        "appended (--append-verify); it is left as it was",
		        log_path(shown, sizeof shown, e->path),
		        (unsigned long long)d->size, k);
		STAT_ADD(s->res->errors, 1);
		return -1;
	}
	chunk_map_free(&f->map);
	f->need = n - keep;
	f->unchecked = verify ? 0 : keep;
	if (!d->size || e->size < SYNC_SMALL)
		return 0;   /* nothing to keep, or a small file (whole, in the
		               archive: never a chunk list) */
	if (!(f->map.how = malloc(n)))
		return -ENOMEM;
	f->map.n = f->map.filled = n;
	for (uint32_t k = 0; k < n; k++)
		f->map.how[k] = k < keep ? CH_HAVE : CH_WHOLE;
	return 0;
}

int recv_inplace_plan(struct rstate *s, size_t i, const struct idx_entry *d, struct rfile *f)
{
	unsigned fl = s->r->flags;
	const struct idx_entry *e = &s->sm.e[i];
	if (!(fl & (SYNC_F_INPLACE | SYNC_F_APPEND)) || !d || d->type != IDX_REG ||
	    (d->flags & GONE))
		return 0;   /* a new file: through a temp file, invisible until whole */
	if (fl & SYNC_F_APPEND) {
		if (d->size >= e->size)
			return 1;   /* as rsync: nothing to append */
		int rc = append_map(s, e, d, f);
		if (rc)
			return rc;
	}
	f->inplace = 1;
	f->basis = d;   /* what the scan saw: checked when it is opened */
	return 0;
}

static int inplace_open(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	const char *name = strrchr(e->path, '/');
	name = name ? name + 1 : e->path;
	/* the directory was opened beneath DST's root; the file itself must
	 * not be a symlink planted since the scan */
	f->fd = openat(f->dirfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);   /* blocks.c reads */
	struct stat st;
	if (f->fd < 0 || fstat(f->fd, &st) < 0) {
		recv_fail(s, e->path, "cannot open to write in place", errno);
		return -1;
	}
	const struct idx_entry *d = f->basis;
	int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if (!S_ISREG(st.st_mode) || st.st_ino != d->ino || (uint64_t)st.st_size != d->size ||
	    mt != d->mtime_ns) {
		char shown[4096];
		log_err("%s: changed in DST since the scan: not written in place; it is left "
		        "as it is (the next run updates it)", log_path(shown, sizeof shown, e->path));
		STAT_ADD(s->res->errors, 1);
		return -1;
	}
	f->opened_inplace = 1;
	return 0;
}

const char *recv_left_as(const struct rfile *f, int written)
{
	return f->inplace && written ? "DST's file was partly rewritten in place and is now "
	                               "damaged; re-run to repair"
	                             : "it is left as it was";
}

static void inplace_finish(struct rstate *s, size_t i, struct rfile *f)
{
	const struct idx_entry *e = &s->sm.e[i];
	if (ftruncate(f->fd, (off_t)e->size) < 0) {
		recv_fail(s, e->path, "cannot cut to its new size", errno);
	} else {
		if (f->map.how)   /* the chunks left as they were */
			STAT_ADD(s->res->matched, e->size - chunk_map_bytes(&f->map, e->size));
		recv_apply_fd(s, f->fd, e, RECV_NEW_INODE, NULL);
		int err = close(f->fd) < 0 ? errno : 0;
		f->fd = -1;
		if (err)
			recv_fail(s, e->path, "write failed", err);
		else
			recv_landed(s, i, f);
	}
	recv_drop_file(f);
}

/* The index row of what --append left on disk for sender entry e, into n
 * (a copy of e): the f->unchecked chunks kept unread have DST's digests as
 * its scan read them, the rest the sender's, each verified as it came;
 * n->chunks is then malloc'd, the caller's. 0 (n->chunks untouched when
 * there was nothing unchecked), 1 when DST's digests are not known (no row
 * may vouch for the file), -ENOMEM. */
static int append_row(const struct rfile *f, const struct idx_entry *e, struct idx_entry *n)
{
	const struct idx_entry *d = f->basis;
	if (!f->unchecked)
		return 0;   /* every chunk verified against the sender's digests */
	if (!d || !e->nchunks || f->unchecked >= e->nchunks ||
	    (d->flags & (IDX_F_UNSTABLE | IDX_F_NOHASH | IDX_F_ASSUMED)))
		return 1;
	uint8_t *c = malloc((size_t)e->nchunks * IDX_HASH_LEN);
	if (!c)
		return -ENOMEM;
	memcpy(c, e->chunks, (size_t)e->nchunks * IDX_HASH_LEN);
	for (uint32_t k = 0; k < f->unchecked; k++)
		memcpy(c + (size_t)k * IDX_HASH_LEN, chunk_digest(d, k), IDX_HASH_LEN);
	n->chunks = c;
	idx_hash_combine(c, e->nchunks, n->hash);
	return 0;
}

/* DST's file itself: chunks written where they belong once verified, the
 * file cut to size at the end (recv_inplace_plan() chose it). */
const struct recv_write_ops recv_write_inplace = {
	.open = inplace_open,
	.finish = inplace_finish,
	.row = append_row,
};
