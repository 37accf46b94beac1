/*
 * --partial: resume a large file cut off mid-transfer. Its temp file is a
 * named one (an unnamed O_TMPFILE dies with the process) and the receiver
 * records it in DST's index (index/partial.c): the temp's name and inode,
 * and per chunk whether it verified and against which digest. The record
 * is stored when the temp is made, then every 32 verified chunks or every
 * half second, each time after fdatasync() of the temp, so it never claims
 * what is not on disk; and at the end of a run that did not finish it.
 *
 * The next run with --partial finds the record by the file's path, checks
 * the temp is still that inode, and does not ask again for a chunk that
 * verified there with the digest the sender has now: a source that changed
 * meanwhile gets its changed chunks sent. Records no run reuses, and every
 * record when a run is without --partial, go with their temps (found by
 * record and inode, never by name alone).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/io.h"
#include "common/log.h"
#include "sync/recv/recv_int.h"

#define REC_EVERY_CHUNKS 32
#define REC_EVERY_S 0.5   /* what a killed receiver loses, at most */

void recv_partial_load(struct rstate *s)
{
	if ((s->r->flags & SYNC_F_DRYRUN) ||
	    idx_partials_open(s->root_path, &s->so, &s->parts) < 0 || !s->parts)
		return;
	if (idx_partials_load(s->parts, &s->prec, &s->nprec) < 0 ||
	    !(s->pclaimed = calloc(s->nprec ? s->nprec : 1, 1))) {
		idx_partials_free_list(s->prec, s->nprec);
		free(s->prec);
		s->prec = NULL;
		s->nprec = 0;
	}
}

/* The length of dir's part of path (0: the root), or -1 if path is not
 * directly in dir. */
static int in_dir(const char *path, const char *dir)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;
	return strlen(dir) == n && !strncmp(path, dir, n);
}

int recv_partial_kept(const struct rstate *s, const char *dir, const char *name, uint64_t ino)
{
	if (!(s->r->flags & SYNC_F_PARTIAL))
		return 0;
	for (size_t k = 0; k < s->nprec; k++)
		if (!strcmp(s->prec[k].tmp, name) && s->prec[k].ino == ino &&
		    in_dir(s->prec[k].path, dir))
			return 1;
	return 0;
}

/* Is rec's temp still there, the same inode, in e's directory? */
static int temp_there(struct rstate *s, const struct idx_partial *rec)
{
	const char *name;
	int pd = recv_open_parent(s->root, rec->path, &name);
	struct stat st;
	int ok = pd >= 0 && fstatat(pd, rec->tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	         S_ISREG(st.st_mode) && (uint64_t)st.st_ino == rec->ino;
	if (pd >= 0)
		close(pd);
	return ok;
}

/* rec's temp opened for reading, or -1. */
static int open_temp(struct rstate *s, const struct idx_partial *rec)
{
	const char *name;
	int pd = recv_open_parent(s->root, rec->path, &name);
	if (pd < 0)
		return -1;
	int fd = openat(pd, rec->tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	close(pd);
	return fd;
}

/* Does chunk k of the temp still hold what it verified against? The record
 * only says what was on disk when it was stored: the temp may have been
 * written to since (same inode), and a stale chunk must not land. */
static int still_there(int fd, uint64_t size, uint32_t k, const uint8_t *want, uint8_t *buf)
{
	uint64_t len = chunk_len(size, k);
	uint8_t h[IDX_HASH_LEN];
	size_t got;
	if (fd < 0 || io_pread_full(fd, buf, len, (uint64_t)k * IDX_CHUNK_SIZE, &got) < 0 ||
	    got != len)
		return 0;
	idx_hash_buf(buf, len, h);
	return !memcmp(h, want, IDX_HASH_LEN);
}

/* Which chunks of rec's temp e can keep: into f->intemp and f's map. The
 * number kept, or -ENOMEM. */
static int64_t reuse(struct rstate *s, const struct idx_entry *e, const struct idx_partial *rec,
                     struct rfile *f)
{
	uint32_t n = chunk_count(e->size);
	int64_t kept = 0;
	if (!(f->intemp = calloc(n, 1)))
		return -ENOMEM;
	if (!f->map.how) {
		if (!(f->map.how = malloc(n)))
			return -ENOMEM;
		memset(f->map.how, CH_WHOLE, n);
		f->map.n = f->map.filled = n;
	}
	uint8_t *buf = malloc(IDX_CHUNK_SIZE);
	if (!buf)
		return -ENOMEM;
	int fd = open_temp(s, rec);
	for (uint32_t k = 0; k < n && k < rec->n; k++) {
		if (!rec->done[k] || chunk_len(rec->size, k) != chunk_len(e->size, k) ||
		    memcmp(rec->digest + (size_t)k * IDX_HASH_LEN, chunk_digest(e, k), IDX_HASH_LEN) ||
		    !still_there(fd, e->size, k, chunk_digest(e, k), buf))
			continue;
		f->intemp[k] = 1;
		f->map.how[k] = CH_HAVE;
		STAT_ADD(s->res->matched, chunk_len(e->size, k));
		kept++;
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	f->need = 0;
	for (uint32_t k = 0; k < n; k++)
		f->need += f->map.how[k] != CH_HAVE;
	return kept;
}

int recv_partial_plan(struct rstate *s, size_t i, struct rfile *f)
{
	const struct idx_entry *e = &s->sm.e[i];
	if (!(s->r->flags & SYNC_F_PARTIAL) || (s->r->flags & SYNC_F_DRYRUN) || f->inplace ||
	    e->size < SYNC_SMALL || !s->parts)
		return 0;
	f->track = 1;
	for (size_t k = 0; k < s->nprec; k++) {
		struct idx_partial *rec = &s->prec[k];
		if (strcmp(rec->path, e->path) || s->pclaimed[k] || !temp_there(s, rec))
			continue;
		int64_t kept = reuse(s, e, rec, f);
		if (kept < 0)
			return (int)kept;
		if (kept == 0)
			break;   /* nothing in it is of use: swept, a new one is made */
		s->pclaimed[k] = 1;
		f->resume = 1;
		memcpy(f->tmp, rec->tmp, sizeof f->tmp);
		break;
	}
	return 0;
}

void recv_partial_sweep(struct rstate *s)
{
	for (size_t k = 0; k < s->nprec; k++) {
		struct idx_partial *rec = &s->prec[k];
		if (s->pclaimed[k] || !recv_temp_ours(s, rec->path, 0))
			continue;   /* (a later window's, another rank's: theirs) */
		const char *name;
		int pd = recv_open_parent(s->root, rec->path, &name);
		struct stat st;
		if (pd >= 0 && fstatat(pd, rec->tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode) && (uint64_t)st.st_ino == rec->ino)
			unlinkat(pd, rec->tmp, 0);
		if (pd >= 0)
			close(pd);
		idx_partial_del(s->parts, rec->path);
	}
}

/* Store f's record (after its verified chunks are on disk). */
static void store(struct rstate *s, struct rfile *f)
{
	if (!f->rec || f->fd < 0)
		return;
	if (f->rec_dirty && fdatasync(f->fd) < 0)
		return;   /* not on disk: not claimed */
	idx_partial_put(s->parts, f->rec);
	f->rec_dirty = 0;
	f->rec_t = clock_s();
}

/* The record of f's temp (fd open), with what it holds already. */
static int record(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	struct stat st;
	uint32_t n = chunk_count(e->size);
	struct idx_partial *r = calloc(1, sizeof *r);
	if (!r || fstat(f->fd, &st) < 0 || !(r->path = strdup(e->path)) ||
	    !(r->done = calloc(n, 1)) || !(r->digest = calloc(n, IDX_HASH_LEN))) {
		if (r)
			idx_partials_free_list(r, 1);
		free(r);
		return -ENOMEM;
	}
	memcpy(r->tmp, f->tmp, sizeof r->tmp);
	r->ino = (uint64_t)st.st_ino;
	r->size = e->size;
	r->n = n;
	for (uint32_t k = 0; f->intemp && k < n; k++)
		if (f->intemp[k]) {
			r->done[k] = 1;
			memcpy(r->digest + (size_t)k * IDX_HASH_LEN, chunk_digest(e, k), IDX_HASH_LEN);
		}
	f->rec = r;
	store(s, f);
	return 0;
}

/* An earlier run's temp, opened again: still the recorded inode. */
static int reopen(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	struct stat st;
	f->fd = openat(f->dirfd, f->tmp, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	const struct idx_partial *rec = NULL;
	for (size_t k = 0; k < s->nprec && !rec; k++)
		if (s->pclaimed[k] && !strcmp(s->prec[k].path, e->path))
			rec = &s->prec[k];
	if (f->fd >= 0 && fstat(f->fd, &st) == 0 && rec && (uint64_t)st.st_ino == rec->ino &&
	    ftruncate(f->fd, (off_t)e->size) == 0)
		return 0;
	recv_fail(s, e->path, "cannot reopen the partial file of an earlier run", errno ? errno
	          : ESTALE);
	return -1;
}

static int partial_temp(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	if (f->resume) {
		if (reopen(s, e, f) < 0)
			return -1;
	} else {
		for (int tries = 0; tries < 5; tries++) {
			idx_temp_name(f->tmp);
			f->fd = openat(f->dirfd, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
			               O_CLOEXEC, 0600);
			if (f->fd >= 0 || errno != EEXIST)
				break;
		}
		if (f->fd < 0 || ftruncate(f->fd, (off_t)e->size) < 0) {
			recv_fail(s, e->path, "cannot create a temp file", errno);
			return -1;
		}
	}
	if (record(s, e, f) < 0) {
		recv_fail(s, e->path, "cannot record its partial file", ENOMEM);
		return -1;
	}
	return 0;
}

static void partial_verified(struct rstate *s, struct rfile *f, uint32_t k,
                             const uint8_t *digest)
{
	if (!f->rec || k >= f->rec->n)
		return;
	f->rec->done[k] = 1;
	memcpy(f->rec->digest + (size_t)k * IDX_HASH_LEN, digest, IDX_HASH_LEN);
	if (++f->rec_dirty >= REC_EVERY_CHUNKS || clock_s() - f->rec_t >= REC_EVERY_S)
		store(s, f);
}

static void partial_landed(struct rstate *s, struct rfile *f)
{
	if (!f->rec)
		return;
	idx_partial_del(s->parts, f->rec->path);
	idx_partials_free_list(f->rec, 1);
	free(f->rec);
	f->rec = NULL;
}

static int partial_keep(const struct rfile *f)
{
	return !f->done;   /* the temp stays, recorded, for the next run */
}

/* A named temp, an earlier run's or new, its verified chunks recorded (not
 * reserved: what stays of a cut-off run holds only what came); landed
 * through the temp file's link or rename (recv_partial_plan() chose it). */
const struct recv_write_ops recv_write_partial = {
	.open = partial_temp,
	.verified = partial_verified,
	.finish = recv_temp_finish,
	.landed = partial_landed,
	.keep = partial_keep,
};

void recv_partial_end(struct rstate *s)
{
	for (uint32_t k = 0; k < s->nfiles; k++) {
		struct rfile *f = &s->files[k];
		if (f->rec && !f->done)
			store(s, f);
		if (f->track && !f->done && f->fd >= 0) {   /* the temp stays, recorded */
			close(f->fd);
			f->fd = -1;
		}
		if (f->rec) {
			idx_partials_free_list(f->rec, 1);
			free(f->rec);
			f->rec = NULL;
		}
		free(f->intemp);
		f->intemp = NULL;
	}
	idx_partials_free_list(s->prec, s->nprec);
	free(s->prec);
	free(s->pclaimed);
	s->prec = NULL;
	s->pclaimed = NULL;
	s->nprec = 0;
	idx_partials_close(s->parts);
	s->parts = NULL;
}
