/*
 * One entry of the walk (walk.c drives it): its stat as the index keeps it,
 * what the previous index may vouch for without a read (an unchanged file's
 * hash and extras; under --append a grown file's old whole chunks), and
 * the hash of what must be read: a small file at once, a large one chunk by
 * chunk through the walker's queue, so one big file keeps every core busy.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/io.h"
#include "common/log.h"
#include "index/walk_int.h"

/* Entry i of wk's manifest is not part of the scan after all. */
void walk_drop_entry(struct worker *wk, size_t i)
{
	struct idx_entry *e = &wk->out.e[i];
	free(e->path);
	free(e->link);
	free(e->chunks);
	free(e->x);
	if (i + 1 == wk->out.n) {
		wk->out.n--;
		return;
	}
	*e = (struct idx_entry){ 0 };   /* a hole, left out by gather() */
}

void walk_fill_meta(struct idx_entry *e, const struct stat *st)
{
	e->size = S_ISREG(st->st_mode) ? (uint64_t)st->st_size : 0;
	e->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	e->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
	e->dev = st->st_dev;
	e->ino = st->st_ino;
	e->rdev = st->st_rdev;
	e->nlink = (uint32_t)st->st_nlink;
	e->mode = st->st_mode & 07777;
	e->uid = st->st_uid;
	e->gid = st->st_gid;
	switch (st->st_mode & S_IFMT) {
	case S_IFREG:  e->type = IDX_REG;  break;
	case S_IFDIR:  e->type = IDX_DIR;  break;
	case S_IFLNK:  e->type = IDX_LNK;  break;
	case S_IFIFO:  e->type = IDX_FIFO; break;
	case S_IFCHR:  e->type = IDX_CHR;  break;
	case S_IFBLK:  e->type = IDX_BLK;  break;
	default:       e->type = IDX_SOCK; break;
	}
}

static int same_stat(const struct stat *a, const struct stat *b)
{
	return a->st_size == b->st_size && a->st_ino == b->st_ino &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	       a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int same_print(const struct idx_entry *o, const struct idx_entry *e)
{
	return o->type == e->type && o->size == e->size && o->ino == e->ino &&
	       o->mtime_ns == e->mtime_ns && o->ctime_ns == e->ctime_ns;
}

/* The previous index's row of e, if e provably did not change since it
 * was read: same type, size, inode, mtime and ctime (which any write,
 * xattr or ACL change moves), and not within the clock tick of that scan
 * (a row stamped then may predate a write that left the timestamps equal:
 * read again, as git does). Else the row of opts->known with that print,
 * which its own index vouched for by the same test (idx_dirs_rows()). */
const struct idx_entry *walk_unchanged(const struct walker *w, const struct idx_entry *e)
{
	const struct idx_entry *o = idx_manifest_find(w->old, e->path);
	if (o && same_print(o, e) && o->mtime_ns < w->trust_before &&
	    o->ctime_ns < w->trust_before)
		return o;
	o = w->known ? idx_manifest_find(w->known, e->path) : NULL;
	return o && same_print(o, e) ? o : NULL;
}

/* Under trust_prefix: the previous row of a file that grew (same inode,
 * at least one whole chunk then, not in the clock tick of its scan), or
 * else its row in opts->grown_hint, whose whole chunks' digests are taken
 * unread. */
static const struct idx_entry *grown_from(const struct walker *w, const struct idx_entry *e)
{
	if (!w->trust_prefix || e->type != IDX_REG)
		return NULL;
	const struct idx_entry *o = idx_manifest_find(w->old, e->path);
	if (o && o->type == IDX_REG && o->ino == e->ino && o->size < e->size &&
	    o->size >= IDX_CHUNK_SIZE && o->mtime_ns < w->trust_before &&
	    o->ctime_ns < w->trust_before)
		return o;
	/* no row the index could keep: what an earlier scan of ours read */
	o = w->hint ? idx_manifest_find(w->hint, e->path) : NULL;
	if (o && o->type == IDX_REG && o->ino == e->ino && o->size < e->size &&
	    o->size >= IDX_CHUNK_SIZE && (o->nchunks ? o->chunks && o->nchunks >= o->size /
	                                  IDX_CHUNK_SIZE : o->size == IDX_CHUNK_SIZE))
		return o;
	return NULL;
}

/* Take xattrs and ACLs from the previous index if the entry provably did
 * not change and they were read as this scan reads them. What an earlier
 * scan read is kept even when this one reads nothing (so a scan without -X
 * does not rewrite every row that has xattrs). 1 when taken. */
int walk_reuse_extra(const struct walker *w, struct idx_entry *e, const struct idx_entry *o)
{
	if (!o || (w->want_got && o->got != w->want_got))
		return 0;
	int err = 0;
	e->x = idx_extra_dup(o->x, &err);
	if (err)
		return 0;
	e->got = o->got;
	return 1;
}

/* Does the filesystem at fd stamp ctimes with this machine's clock, and
 * does fstat see every write at once? Local ones do. A network filesystem
 * stamps with the server's clock and may answer fstat from a cache, and a
 * FUSE one does what its daemon does: their files are always read by the
 * scan (idx_scan_opts.lazy_below does not apply). */
int walk_stamps_locally(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0)
		return 0;
	switch ((unsigned long)sf.f_type) {
	case 0xEF53:       /* ext2, ext3, ext4 */
	case 0x58465342:   /* XFS */
	case 0x9123683E:   /* btrfs */
	case 0x01021994:   /* tmpfs */
	case 0x858458F6:   /* ramfs */
	case 0xF2F52010:   /* f2fs */
	case 0x2FC12FC1:   /* ZFS */
	case 0x794C7630:   /* overlayfs */
	case 0xCA451A4E:   /* bcachefs */
		return 1;
	default:
		return 0;
	}
}

/* Take the hash from the previous index if the file provably did not
 * change (o: walk_unchanged()'s answer) and its digests were read (or taken
 * unread, by a scan that trusts them: IDX_F_ASSUMED). */
int walk_reuse_hash(const struct walker *w, struct idx_entry *e, const struct idx_entry *o)
{
	if (!o || o->type != IDX_REG || ((o->flags & IDX_F_ASSUMED) && !w->trust_prefix))
		return 0;
	if (o->nchunks) {
		e->chunks = malloc((size_t)o->nchunks * IDX_HASH_LEN);
		if (!e->chunks)
			return 0;
		memcpy(e->chunks, o->chunks, (size_t)o->nchunks * IDX_HASH_LEN);
		e->nchunks = o->nchunks;
	}
	memcpy(e->hash, o->hash, IDX_HASH_LEN);
	e->flags |= o->flags & IDX_F_ASSUMED;
	return 1;
}

static void queue_big(struct walker *w, struct bigfile *b)
{
	pthread_mutex_lock(&w->mu);
	if (w->nbig == w->capbig) {
		size_t cap = w->capbig ? w->capbig * 2 : 64;
		struct bigfile **nb = realloc(w->big, cap * sizeof *nb);
		if (!nb) {
			w->nomem = 1;
			pthread_mutex_unlock(&w->mu);
			close(b->fd);
			free(b->chunks);
			free(b);
			return;
		}
		w->big = nb;
		w->capbig = cap;
	}
	w->big[w->nbig++] = b;
	b->next = NULL;
	if (w->bq_tail)
		w->bq_tail->next = b;
	else
		w->bq_head = b;
	w->bq_tail = b;
	w->nbig_open++;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* Hash chunk k of b. Called without the lock. */
void walk_hash_chunk(struct worker *wk, struct bigfile *b, uint32_t k)
{
	uint64_t off = (uint64_t)k * IDX_CHUNK_SIZE;
	uint64_t len = (uint64_t)b->st.st_size - off;
	if (len > IDX_CHUNK_SIZE)
		len = IDX_CHUNK_SIZE;
	uint64_t got = 0;
	uint8_t *out = b->chunks + (size_t)k * IDX_HASH_LEN;
	if (idx_hash_range(b->fd, off, len, wk->buf, HASH_BUF, out, &got) < 0 || got != len) {
		b->unstable = 1;   /* read error or shrank: not a hash to trust */
		memset(out, 0, IDX_HASH_LEN);   /* (nor one left unwritten) */
	}
	wk->st.hashed_bytes += got;
}

/* The last chunk of b is done: see whether the file held still. */
void walk_finish_big(struct bigfile *b)
{
	struct stat now;
	if (fstat(b->fd, &now) < 0 || !same_stat(&now, &b->st))
		b->unstable = 1;
	close(b->fd);
	b->fd = -1;
}

/* Hash a regular file opened from dfd into e (small files inline; large ones
 * are queued chunk by chunk). Returns 0, or -errno if it cannot be read. */
int walk_hash_file(struct worker *wk, int dfd, const char *name, size_t ei)
{
	struct idx_entry *e = &wk->out.e[ei];
	struct walker *w = wk->w;
	int fd = io_open_read(dfd, name);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int rc = errno ? -errno : -EAGAIN;
		close(fd);
		return rc;   /* swapped for something else since fstatat */
	}
	walk_fill_meta(e, &st);   /* what we read is what we describe */
	wk->st.hashed++;
	e->flags |= IDX_F_HASHED;
	uint32_t n = idx_nchunks(e->size);
	if (n == 0) {
		uint64_t got;
		int rc = idx_hash_range(fd, 0, e->size, wk->buf, HASH_BUF, e->hash, &got);
		struct stat after;
		if (rc < 0 || got != e->size || fstat(fd, &after) < 0 || !same_stat(&st, &after))
			e->flags |= IDX_F_UNSTABLE;
		wk->st.hashed_bytes += got;
		close(fd);
		return 0;
	}
	struct bigfile *b = calloc(1, sizeof *b);
	uint8_t *chunks = malloc((size_t)n * IDX_HASH_LEN);
	if (!b || !chunks) {
		free(b);
		free(chunks);
		close(fd);
		return -ENOMEM;
	}
	/* --append: the old size's whole chunks as the index has them */
	const struct idx_entry *o = grown_from(w, e);
	uint32_t keep = o ? (uint32_t)(o->size / IDX_CHUNK_SIZE) : 0;
	if (keep) {
		memcpy(chunks, o->nchunks ? o->chunks : o->hash, (size_t)keep * IDX_HASH_LEN);
		e->flags |= IDX_F_ASSUMED;
	}
	*b = (struct bigfile){ .fd = fd, .nchunks = n, .next_chunk = keep, .left = n - keep,
	                       .chunks = chunks, .st = st, .worker = wk->id, .entry = ei };
	pthread_mutex_lock(&w->mu);
	int inline_hash = w->nbig_open >= BIG_OPEN_MAX;   /* (keep < n: it grew) */
	pthread_mutex_unlock(&w->mu);
	if (!inline_hash) {
		queue_big(w, b);
		return 0;
	}
	/* Too many large files open already: hash this one here. */
	for (uint32_t k = keep; k < n; k++)
		walk_hash_chunk(wk, b, k);
	walk_finish_big(b);
	pthread_mutex_lock(&w->mu);
	if (w->nbig == w->capbig) {
		size_t cap = w->capbig ? w->capbig * 2 : 64;
		struct bigfile **nb = realloc(w->big, cap * sizeof *nb);
		if (nb) {
			w->big = nb;
			w->capbig = cap;
		}
	}
	if (w->nbig < w->capbig)
		w->big[w->nbig++] = b;
	else
		w->nomem = 1;
	pthread_mutex_unlock(&w->mu);
	return 0;
}

