/*
 * A ranked run's split files (sync/ranks.c): a file too large for one
 * rank's share is cut into N ranges of whole chunks, and N ranks send one
 * each, through their own receivers, into one temp file in the file's
 * directory. Its name comes from the job's token, the file's hash in the
 * manifest and its path (idx_temp_name_of()), so every receiver of the
 * same version opens the same one (a part or join whose scan saw the file
 * otherwise, written meanwhile, opens another: the join then finds none
 * and fails, rather than land a mix), and it is a temp name: scans pass
 * it over, and a window of its directory removes it when a run left it.
 *
 * A part run (--ranked=part:K/N:JOB) plans range K of each file as a
 * single run plans the file (the chunks DST's old version has are copied
 * from it, the others asked for and checked as they come) and takes the
 * rest as in the temp already; it writes its range and leaves the temp,
 * neither linked nor removed. Once every rank's part landed, the join
 * (--ranked=join:JOB) plans each file with every chunk in the temp: it
 * asks for nothing, and the temp lands as any named temp does (metadata,
 * rename over the old file, DST's index row of the sender's digests).
 * A part that failed means no join (the ranks decide): the file goes whole
 * in its directory's window.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "sync/recv/recv_int.h"

void recv_split_temp(uint64_t job, const struct idx_entry *e, char out[IDX_TEMP_NAME_LEN + 1])
{
	uint64_t seed = XXH3_64bits_withSeed(e->hash, IDX_HASH_LEN, job);
	idx_temp_name_of(out, XXH3_64bits_withSeed(e->path, strlen(e->path), seed));
}

int recv_split_plan(struct rstate *s, size_t i, struct rfile *f)
{
	const struct sync_opts *o = s->r->o;
	const struct idx_entry *e = &s->sm.e[i];
	uint32_t n = chunk_count(e->size), a = 0, b = 0;
	if (!o || !o->ranked_split || n < 2 || (s->r->flags & SYNC_F_DRYRUN))
		return 0;
	if (o->ranked_split > 0)
		chunk_part(n, (uint32_t)o->ranked_split - 1, o->ranked_nparts, &a, &b);
	if (!f->map.how) {   /* every chunk asked for, as without DST's old file */
		if (!(f->map.how = malloc(n)))
			return -ENOMEM;
		memset(f->map.how, CH_WHOLE, n);
		f->map.n = f->map.filled = n;
	}
	if (!(f->intemp = calloc(n, 1)))
		return -ENOMEM;
	f->need = 0;
	for (uint32_t k = 0; k < n; k++) {
		if (k < a || k >= b) {   /* another rank's range, or (the join) all */
			f->map.how[k] = CH_HAVE;
			f->intemp[k] = 1;
		}
		f->need += f->map.how[k] != CH_HAVE;
	}
	f->split = 1;
	return 0;
}

/* The shared temp: made by whichever part comes first, the size of the
 * file; the join's must be there, a regular file of that size, this
 * user's, with no other name. */
static int split_open(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	int join = s->r->o->ranked_split < 0;
	struct stat st;
	recv_split_temp(s->r->o->ranked_job, e, f->tmp);
	/* (O_NONBLOCK: a FIFO planted by that name fails, not hangs the job) */
	f->fd = openat(f->dirfd, f->tmp, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC |
	               (join ? 0 : O_CREAT), 0600);
	int err = errno;
	if (f->fd >= 0) {
		err = 0;
		if (fstat(f->fd, &st) < 0)
			err = errno;
		else if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != geteuid() ||
		         (join && (uint64_t)st.st_size != e->size))
			err = EEXIST;   /* not the temp the parts make */
		else if ((uint64_t)st.st_size < e->size && ftruncate(f->fd, (off_t)e->size) < 0)
			err = errno;
		else if (fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) & ~O_NONBLOCK) < 0)
			err = errno;   /* (its writes blocking, as any file's) */
	}
	if (f->fd >= 0 && err) {
		close(f->fd);
		f->fd = -1;
	}
	if (f->fd < 0) {
		f->tmp[0] = 0;   /* not ours to remove */
		recv_fail(s, e->path, join ? "cannot open the temp its parts were written into"
		                           : "cannot open the temp its parts are written into", err);
		return -1;
	}
	if (!join)
		f->tmp[0] = 0;   /* a part never removes it: the other parts' too */
	return 0;
}

/* A part: its range written (and the chunks DST's old file gives copied
 * in), the temp left for the join. */
static void split_finish(struct rstate *s, size_t i, struct rfile *f)
{
	const struct idx_entry *e = &s->sm.e[i];
	if (s->r->o->ranked_split < 0) {
		recv_temp_finish(s, i, f);   /* the join: the temp lands */
		return;
	}
	int err = f->map.how && recv_fill_basis(s, e, f) < 0 ? -1 : 0;   /* said */
	if (!err && close(f->fd) < 0)
		err = errno;
	else if (err)
		close(f->fd);
	f->fd = -1;
	if (err > 0)
		recv_fail(s, e->path, "write failed", err);
	if (err)
		f->failed = 1;
	else
		f->done = 1;   /* not landed: no file, no row, no metadata */
	recv_drop_file(f);
}

const struct recv_write_ops recv_write_split = {
	.open = split_open,
	.finish = split_finish,
};
