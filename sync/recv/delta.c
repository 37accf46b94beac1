/*
 * Chunk-level transfers, the receiving side. A file whose content changed
 * and that DST already has is compared chunk by chunk: DST's chunk digests
 * come from its index (a file the scan found changing is not trusted, and
 * is fetched whole), the sender's from its manifest. Only chunks that
 * differ are asked for (CTL_CHUNKS); the others are copied from the old
 * file into the temp file (a reflink where the filesystem can), so DST
 * still holds the old file or the new one, never a mix. A grown file sends
 * its new bytes and its last old chunk.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "sync/recv/recv_int.h"

/* Can e be built from DST's d? Its digests must be trusted, and the run
 * must want deltas (-W: whole files, as rsync). */
static int delta_ok(const struct rstate *s, const struct idx_entry *e,
                    const struct idx_entry *d)
{
	return d && d->type == IDX_REG &&
	       !(d->flags & (GONE | IDX_F_UNSTABLE | IDX_F_NOHASH)) &&
	       d->size > 0 && e->size >= SYNC_SMALL && !(s->r->flags & SYNC_F_WHOLE);
}

int recv_chunk_plan(struct rstate *s, size_t i, const struct idx_entry *d, struct rfile *f)
{
	const struct idx_entry *e = &s->sm.e[i];
	f->bfd = -1;
	if (!delta_ok(s, e, d))
		return 0;
	uint32_t n = chunk_count(e->size), dn = chunk_count(d->size), have = 0;
	uint8_t *how = malloc(n ? n : 1);
	if (!how)
		return -ENOMEM;
	for (uint32_t k = 0; k < n; k++) {
		uint64_t len = chunk_len(e->size, k);
		int same = k < dn && chunk_len(d->size, k) == len &&
		           !memcmp(chunk_digest(e, k), chunk_digest(d, k), IDX_HASH_LEN);
		how[k] = same ? CH_HAVE : CH_WHOLE;
		have += same;
	}
	if (!have && n > 1) {   /* nothing to reuse: the whole file, as before */
		free(how);
		return 0;
	}
	f->map = (struct chunk_map){ .n = n, .filled = n, .how = how };
	f->basis = d;
	f->need = n - have;
	return 0;
}

int recv_send_chunks(struct rstate *s, uint32_t send_n)
{
	int rc = 0;
	for (uint32_t k = 0; k < send_n && rc == 0; k++) {
		uint32_t i = s->want[k];
		const struct rfile *f = &s->files[s->fetch[i]];
		if (f->map.how)
			rc = chunks_send(s->r->ctl, i + s->shift, &f->map);
	}
	return rc ? rc : ctl_send(s->r->ctl, CTL_CHUNKS_END, NULL, 0);
}

int recv_basis(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	const struct idx_entry *d = f->basis;
	struct stat st;
	if (f->bfd == RECV_BASIS_BAD)
		return -1;   /* said once */
	/* opened once, checked at every use: it must not change under us from
	 * the plan (block records) to the landing (the chunks copied) */
	/* (its own old version, or a file it was renamed or copied from) */
	int fd = f->bfd >= 0 ? f->bfd : sync_open_beneath(s->root, d->path, O_RDONLY);
	if (fd < 0) {
		recv_fail(s, e->path, strcmp(d->path, e->path)
		          ? "cannot open the file it was renamed or copied from"
		          : "cannot open the old file to reuse its unchanged chunks", errno);
		return -1;
	}
	f->bfd = -1;
	int64_t mt = 0;
	if (fstat(fd, &st) == 0)
		mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if (!S_ISREG(st.st_mode) || st.st_ino != d->ino || (uint64_t)st.st_size != d->size ||
	    mt != d->mtime_ns) {
		char shown[4096];
		log_err("%s: changed in DST since the scan: its unchanged chunks cannot be "
		        "reused; it is left as it is (the next run updates it)",
		        log_path(shown, sizeof shown, e->path));
		STAT_ADD(s->res->errors, 1);
		close(fd);
		f->bfd = RECV_BASIS_BAD;
		return -1;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	return f->bfd = fd;
}

/* Chunk k comes from the basis (not sent, not already in the temp). */
static int from_basis(const struct rfile *f, uint32_t k)
{
	return f->map.how[k] == CH_HAVE && !(f->intemp && f->intemp[k]);
}

int recv_fill_basis(struct rstate *s, const struct idx_entry *e, struct rfile *f)
{
	for (uint32_t k = 0; k < f->map.n;) {
		if (!from_basis(f, k)) {
			k++;
			continue;
		}
		int in = recv_basis(s, e, f);   /* opened once, when first needed */
		if (in < 0)
			return -1;
		uint32_t end = k;   /* a run of chunks kept: one copy */
		while (end < f->map.n && from_basis(f, end))
			end++;
		uint64_t off = (uint64_t)k * IDX_CHUNK_SIZE;
		uint64_t len = (uint64_t)end * IDX_CHUNK_SIZE > e->size
		               ? e->size - off : (uint64_t)(end - k) * IDX_CHUNK_SIZE;
		int rc = copy_range(in, f->fd, off, len);
		if (rc < 0) {
			recv_fail(s, e->path, "cannot copy its unchanged chunks from the old file",
			          -rc);
			return -1;
		}
		STAT_ADD(s->res->matched, len);
		k = end;
	}
	/* and it did not change while it was copied */
	return f->bfd >= 0 && recv_basis(s, e, f) < 0 ? -1 : 0;
}
