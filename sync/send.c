/* The sending side of a sync: scan SRC, send the manifest, then the data of
 * what the receiver asks for: large files one message per 4 MiB chunk, read
 * ahead by a few I/O threads (common/iopool.h, as rdsend's pump reads), and
 * small files, read ahead in batches by the same threads, packed into one
 * archive stream (pack.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/exitcode.h"
#include "common/io.h"
#include "common/iopool.h"
#include "common/log.h"
#include "common/rsh.h"
#include "common/wire.h"
#include "sync/sync_int.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

/* The name of a directory SRC given without a trailing '/' ("A", "x/A"),
 * or NULL: "A/", "A/.", ".", "..", "/" say "its contents" outright. */
static char *mirror_name(const char *src)
{
	size_t len = strlen(src);
	if (!len || src[len - 1] == '/')
		return NULL;
	const char *base = strrchr(src, '/');
	base = base ? base + 1 : src;
	if (!strcmp(base, ".") || !strcmp(base, "..") || strlen(base) > 255)
		return NULL;
	return strdup(base);
}

/* The manifest, with the names of its owners unless --numeric-ids (as
 * rsync), then the sender's count of unreadable entries and the run's
 * archive key (made here, into akey); *bytes: its size. */
static int send_manifest(struct role *r, struct idx_manifest *m, uint64_t errors,
                         struct sync_result *res, uint8_t akey[SYNC_AKEY_LEN], double t0)
{
	struct ctl *c = r->ctl;
	uint8_t *buf;
	size_t len;
	int rc = 0;
	if (!(r->flags & SYNC_F_NUMERIC_IDS) && (r->flags & (SYNC_F_OWNER | SYNC_F_ACLS)))
		rc = sync_names_collect(m);
	m->nohash_below = sync_nohash_below(r);
	if (rc < 0 || (rc = idx_manifest_encode(m, &buf, &len)) < 0)
		return rc;
	double t1 = clock_s();
	res->flist_bytes = len;
	/* as rsync: at least 1 ms, so that 0 means "no file list" */
	res->flist_gen_us = t1 - t0 > 1e-3 ? (uint64_t)((t1 - t0) * 1e6) : 1000;
	for (size_t off = 0; off < len && rc == 0; off += CTL_FRAME_MAX) {
		size_t n = len - off < CTL_FRAME_MAX ? len - off : CTL_FRAME_MAX;
		rc = ctl_send(c, CTL_MANIFEST, buf + off, n);
	}
	free(buf);
	res->flist_xfer_us = (uint64_t)((clock_s() - t1) * 1e6);
	struct manifest_end_msg me = { .errors = errors, .gen_us = res->flist_gen_us,
	                               .xfer_us = res->flist_xfer_us };
	uint8_t e[MANIFEST_END_LEN];
	if (!rc)
		rc = cr_random(akey, SYNC_AKEY_LEN);
	memcpy(me.akey, akey, SYNC_AKEY_LEN);
	manifest_end_encode(e, &me);
	rc = rc ? rc : ctl_send(c, CTL_MANIFEST_END, e, sizeof e);
	explicit_bzero(e, sizeof e);
	explicit_bzero(me.akey, sizeof me.akey);
	return rc;
}

/* The directory of the last file sent, kept open: files go directory by
 * directory, so most opens are one component. */
struct dircache {
	char *dir;
	int fd;
	int root;   /* what dir is under (several SRCs: several roots) */
};

static int open_file(struct dircache *c, int root, const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return sync_open_beneath(root, path, O_RDONLY);
	size_t n = (size_t)(slash - path);
	if (!c->dir || c->root != root || strlen(c->dir) != n || strncmp(c->dir, path, n)) {
		c->root = root;
		free(c->dir);
		if (c->fd >= 0)
			close(c->fd);
		c->dir = strndup(path, n);
		c->fd = c->dir ? sync_open_beneath(root, c->dir, O_RDONLY | O_DIRECTORY) : -1;
	}
	return c->fd < 0 ? -1 : sync_open_beneath(c->fd, slash + 1, O_RDONLY);
}

/* Is the file open on fd, as fstat(2) gave st, still the one the scan saw
 * (e): 1, or that file grown in place (the same inode, larger): 2? A live
 * tree's files grow while they are sent (a recording, a log): the part the
 * scan saw is sent, read only up to its size, and checked against the
 * scan's hashes as it is read (a large file's chunks: send_next(); a small
 * file's whole: held_still()), so a part rewritten as it grew is caught
 * here, not sent. A file the scan did not read (IDX_F_NOHASH) has no hash:
 * its first e->size bytes are sent as they are read, as rsync sends what
 * it reads. 0: neither. */
static int same_or_grown(const struct stat *st, const struct idx_entry *e)
{
	if (!S_ISREG(st->st_mode) || (uint64_t)st->st_size < e->size)
		return 0;
	if ((uint64_t)st->st_size == e->size)
		return 1;
	return st->st_dev == e->dev && st->st_ino == e->ino ? 2 : 0;
}

/* Open a planned file and check it is still what the scan saw, or that
 * file grown (same_or_grown(), into *grown if not NULL); -1 (with a
 * warning) if it vanished or changed, -2 if it cannot be read. */
static int open_planned(struct dircache *dc, int root, const struct idx_entry *e,
                        struct sync_fails *fails, int *grown)
{
	char shown[4096];
	int fd = open_file(dc, root, e->path);
	struct stat st;
	int same = fd >= 0 && fstat(fd, &st) == 0 ? same_or_grown(&st, e) : 0;
	if (grown)
		*grown = same == 2;
	if (same)
		return fd;
	int err = fd < 0 ? errno : 0;
	int gone = fd >= 0 || err == ENOENT || err == ENOTDIR || err == ELOOP;
	const char *why = err == ENOENT ? "vanished since the scan"
	                  : fd < 0 ? strerror(err) : "changed since the scan; not sent";
	log_warn("%s: %s", log_path(shown, sizeof shown, e->path), why);
	sync_fails_add(fails, e->path, why, gone);
	if (fd >= 0)
		close(fd);
	return gone ? -1 : -2;   /* -2: a real error (EACCES, EIO...), not a change */
}

#define READ_AHEAD_MAX 8   /* chunks read ahead of the one being sent */
#define FILES_IN_FLIGHT 4  /* large files sent at once, at most */

/* A chunk of a large file on its way from the disk (common/iopool.h). */
struct chunk_rd {
	struct io_job j;
	struct tp_msg *m;
	uint32_t file;       /* manifest index */
	int last;            /* the file's last chunk: its fd is closed with it */
	int hole;            /* -S: all of it is a hole (not read) */
	int sparse;          /* -S: zero blocks left out of the message */
	int fromfile;        /* not read: sent from the page cache (sendfile) */
	const uint8_t *rec;  /* CH_BLOCKS: the receiver's block record */
	uint32_t len;        /* its bytes */
	const uint8_t *want; /* its digest, taken unread under --append
	                        (IDX_F_ASSUMED), or of a file that grew since
	                        the scan: checked as it is read */
	int stale;           /* and it was not what was read */
};

/* The receiver's frames while we send: its lines (CTL_LOG) printed as they
 * come, its landed count (CTL_PROGRESS) for --progress; any other frame (its
 * DONE or ERROR) is kept in ctl->buf for await_done(). */
#define WATCH_KEEP 4   /* DATA, then DONE or ERROR: never more than two */
struct watch {
	struct role *r;
	struct progress pg;
	uint64_t landed;         /* files the receiver has landed */
	struct kept {            /* frames read early, in order, for next_frame() */
		uint8_t type;
		size_t n;
		uint8_t *buf;    /* payload and its 8 zero bytes */
	} kept[WATCH_KEEP];
	int nkept;
	int stop;                /* the channel failed, or no room to keep more */
	double next;             /* when to look again */
};

/* What is being sent: small files into the archive, large ones chunk by
 * chunk, interleaved so both kinds are on the wire at the same time. The
 * chunks are read ahead by the I/O pool's threads (across file boundaries,
 * so several files can be in flight) and sent in order. */
struct sendq {
	struct tp_session *ts;
	struct dircache dc;
	int root;
	const struct srcset *ss;       /* several SRCs: each entry's own root */
	const struct idx_manifest *m;
	struct sync_result *res;
	struct watch *w;
	uint64_t changed, big_bytes;   /* changed: vanished or changed since the scan */
	uint64_t failed;               /* could not be read (EACCES, EIO...) */
	uint32_t files_done;
	struct io_pool *io;
	struct chunk_rd ring[READ_AHEAD_MAX];
	int head, count, depth;
	const uint32_t *big;     /* large files, in plan order */
	const struct chunk_map **bmap;   /* each one's chunk map */
	uint32_t nb, bi;         /* how many; the next one to open */
	/* the files being queued, chunk by chunk in turn, so that the receiver
	 * writes several files at once (one file's writes queue on its inode) */
	struct openf {
		int fd;          /* -1: the slot is free */
		uint32_t bi;     /* which large file */
		uint64_t off;    /* its next chunk */
		uint64_t end;    /* the end of its last chunk to send */
		uint32_t brec;   /* its next block record (CTL_CHUNKS) */
		int grown;       /* it grew since the scan (same_or_grown()) */
	} slot[FILES_IN_FLIGHT];
	int nslots, cur;
	uint8_t *bad;            /* index -> its read failed: its chunks are
	                            dropped (the receiver sees it incomplete) */
	uint8_t *sent;           /* --remove-source-files: index -> sent whole */
	int sparse;              /* -S: zero blocks as a mask, holes not read */
	int files;               /* the transport sends file ranges (plain TCP) */
	const char *root_path;   /* SRC (one SRC): its index, to forget a row */
	const uint8_t *akey;     /* the archive key: entry tags */
	struct idx_scan_opts iso;
};

/* The directory entry i's path is relative to. */
static int root_of(const struct sendq *q, uint32_t i)
{
	return q->ss->n ? srcs_root(q->ss, i) : q->root;
}

/* The end of the last chunk of a file of size bytes that cm asks for
 * (cm->how NULL: all of them); 0 when it asks for none. */
static uint64_t map_end(const struct chunk_map *cm, uint64_t size)
{
	if (!cm->how)
		return size;
	for (uint32_t k = cm->n; k-- > 0;)
		if (cm->how[k] != CH_HAVE)
			return (uint64_t)(k + 1) * IDX_CHUNK_SIZE < size
			       ? (uint64_t)(k + 1) * IDX_CHUNK_SIZE : size;
	return 0;
}

/* Open the next large file into slot o; 0 when it is open, -1 when there
 * is nothing of it to read (it could not be opened, or the receiver has
 * every chunk of it): the caller moves on. */
static int open_next(struct sendq *q, struct openf *o)
{
	uint32_t i = q->big[q->bi];
	const struct idx_entry *e = &q->m->e[i];
	*o = (struct openf){ .bi = q->bi++ };
	o->end = map_end(q->bmap[o->bi], e->size);
	o->fd = open_planned(&q->dc, root_of(q, i), e, q->res->fails, &o->grown);
	if (o->fd >= 0 && o->end == 0) {   /* it is all in DST's old version */
		close(o->fd);
		o->fd = -1;
		if (q->sent)
			q->sent[i] = 1;
	} else if (o->fd < 0) {
		*(o->fd == -2 ? &q->failed : &q->changed) += 1;
		o->fd = -1;
	}
	if (o->fd >= 0) {
		posix_fadvise(o->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
		return 0;
	}
	q->files_done++;
	return -1;
}

/* The next file to take a chunk of, in turn, opening one into a free
 * slot; NULL when every large file is queued. */
static struct openf *next_file(struct sendq *q)
{
	for (int t = 0; t < q->nslots; t++) {
		int k = (q->cur + t) % q->nslots;
		struct openf *o = &q->slot[k];
		while (o->fd < 0 && q->bi < q->nb && open_next(q, o) < 0)
			;
		if (o->fd >= 0) {
			q->cur = (k + 1) % q->nslots;
			return o;
		}
	}
	return NULL;
}

/* Large files left to send: queued, open or not opened yet. */
static int big_left(const struct sendq *q)
{
	for (int k = 0; k < q->nslots; k++)
		if (q->slot[k].fd >= 0)
			return 1;
	return q->count || q->bi < q->nb;
}

/* -S: is [off, off + len) of fd all hole (no data up to its end)? */
static int in_hole(int fd, uint64_t off, uint32_t len)
{
	off_t d = lseek(fd, (off_t)off, SEEK_DATA);
	return (d < 0 && errno == ENXIO) || (d >= 0 && (uint64_t)d >= off + len);
}

/* The message for a chunk read into c->m: whole, or the blocks the
 * receiver lacks (CH_BLOCKS), or with -S its non-zero blocks (a hole:
 * none). Sets the kind in off's top bits. */
static void shape(struct chunk_rd *c)
{
	c->m->len = c->len;
	c->m->off = c->j.off;
	uint32_t n = 0;
	unsigned kind = SYNC_MSG_SPARSE;
	if (c->hole) {
		put_u64(c->m->data, 0);   /* no block: the mask alone */
		n = 8;
	} else if (c->rec && (n = blocks_pack(c->m->data, c->len, c->rec))) {
		kind = SYNC_MSG_BLOCKS;
	} else if (c->sparse) {
		n = sparse_pack(c->m->data, c->len);
	}
	if (n) {
		c->m->len = n;
		c->m->off |= (uint64_t)kind << 62;
	}
}

/* On an I/O thread: read the chunk, then shape its message (the block
 * digests and zero tests of several chunks run at once). */
static void read_chunk(struct io_job *j)
{
	struct chunk_rd *c = (struct chunk_rd *)j;
	io_job_run(j);
	if (j->err || j->got != j->len)
		return;
	if (c->want) {
		uint8_t h[IDX_HASH_LEN];
		idx_hash_buf(c->m->data, c->len, h);
		c->stale = memcmp(h, c->want, IDX_HASH_LEN) != 0;
	}
	shape(c);
}

/* Queue reads of the next chunks while the ring has room. 0 or an error. */
static int queue_reads(struct sendq *q)
{
	struct openf *o;
	while (q->count < q->depth && (o = next_file(q))) {
		const struct idx_entry *e = &q->m->e[q->big[o->bi]];
		const struct chunk_map *cm = q->bmap[o->bi];
		while (cm->how && cm->how[o->off / IDX_CHUNK_SIZE] == CH_HAVE)
			o->off += IDX_CHUNK_SIZE;   /* DST has it (map_end: one is left) */
		struct chunk_rd *c = &q->ring[(q->head + q->count) % q->depth];
		int rc = tp_msg_get(q->ts, &c->m);
		if (rc < 0)
			return rc;
		uint64_t left = e->size - o->off;
		uint32_t len = (uint32_t)(left < IDX_CHUNK_SIZE ? left : IDX_CHUNK_SIZE);
		c->len = len;
		c->hole = q->sparse && in_hole(o->fd, o->off, len);
		c->rec = cm->how && cm->how[o->off / IDX_CHUNK_SIZE] == CH_BLOCKS
		         ? cm->blocks + (size_t)o->brec++ * SYNC_BLOCK_REC : NULL;
		/* a hole is not read: a job of no bytes keeps the ring's order */
		c->sparse = q->sparse;
		/* a chunk whose digest --append took unread is read and checked
		 * here (the receiver would refuse it, run after run) */
		uint32_t k = (uint32_t)(o->off / IDX_CHUNK_SIZE);
		c->want = ((e->flags & IDX_F_ASSUMED) || o->grown) && !c->hole
		          ? (e->nchunks ? e->chunks + (size_t)k * IDX_HASH_LEN : e->hash) : NULL;
		c->stale = 0;
		/* a whole chunk over plain TCP is not read here: the kernel sends
		 * it from the page cache (the receiver checks its digest) */
		c->fromfile = q->files && !c->hole && !c->rec && !q->sparse && !c->want;
		c->j = (struct io_job){ .fd = o->fd, .buf = c->m->data,
		                        .len = c->hole || c->fromfile ? 0 : len,
		                        .off = o->off, .work = read_chunk };
		c->file = q->big[o->bi];
		c->last = o->off + len >= o->end;
		o->off += len;
		if (c->last)   /* the fd is the last chunk's to close */
			o->fd = -1;
		io_pool_submit(q->io, &c->j);
		q->count++;
	}
	return 0;
}

/* Wait for the oldest chunk read and send it (or drop it, when its file
 * could not be read whole). 0 or an error; with drop set, nothing is sent. */
static int send_next(struct sendq *q, int drop)
{
	struct chunk_rd *c = &q->ring[q->head];
	io_pool_wait(q->io, &c->j);
	q->head = (q->head + 1) % q->depth;
	q->count--;
	const struct idx_entry *e = &q->m->e[c->file];
	int rc = 0;
	if (!drop && !q->bad[c->file] && (c->j.err || c->j.got != c->j.len)) {
		char shown[4096];
		const char *why = c->j.err ? strerror(c->j.err) : "shrank while being sent";
		log_warn("%s: %s; not sent", log_path(shown, sizeof shown, e->path), why);
		sync_fails_add(q->res->fails, e->path, why, !c->j.err);
		*(c->j.err ? &q->failed : &q->changed) += 1;
		q->bad[c->file] = 1;
	}
	if (!drop && !q->bad[c->file] && c->stale && !(e->flags & IDX_F_ASSUMED)) {
		/* grown since the scan, and the part the scan saw rewritten */
		char shown[4096];
		log_warn("%s: changed while being sent; not sent",
		         log_path(shown, sizeof shown, e->path));
		sync_fails_add(q->res->fails, e->path, "changed while being sent", 1);
		q->changed++;
		q->bad[c->file] = 1;
	}
	if (!drop && !q->bad[c->file] && c->stale) {
		char shown[4096];
		log_warn("%s: its old part changed, which --append took unread from SRC's "
		         "index; not sent (the next run reads it whole)",
		         log_path(shown, sizeof shown, e->path));
		q->changed++;
		q->bad[c->file] = 1;
		/* (several SRCs: a run without --append reads it whole) */
		if (!q->ss->n && idx_forget(q->root_path, &q->iso, e->path) < 0)
			log_warn("%s: SRC's index still vouches for it: run once without "
			         "--append", log_path(shown, sizeof shown, e->path));
	}
	if (!drop && !q->bad[c->file] && c->fromfile &&
	    (c->m->file_fd = fcntl(c->j.fd, F_DUPFD_CLOEXEC, 0)) < 0) {
		char shown[4096];
		c->m->file_fd = -1;   /* no fd left: read it here */
		size_t got;
		int err = io_pread_full(c->j.fd, c->m->data, c->len, c->j.off, &got);
		if (err < 0 || got != c->len) {
			log_warn("%s: %s; not sent", log_path(shown, sizeof shown, e->path),
			         err < 0 ? strerror(-err) : "shrank while being sent");
			*(err < 0 ? &q->failed : &q->changed) += 1;   /* as send_next() counts */
			q->bad[c->file] = 1;
		}
	}
	if (c->fromfile)
		c->m->file_off = c->j.off;
	if (drop || q->bad[c->file]) {
		tp_msg_put(q->ts, c->m);
	} else {
		c->m->id = (uint64_t)c->file + 1;
		uint32_t data = SYNC_MSG_KIND(c->m->off) ? c->m->len - 8 : c->m->len;
		if ((rc = tp_msg_send(q->ts, c->m)) == 0) {
			q->res->bytes += data;
			q->big_bytes += data;
		}
	}
	if (c->last) {
		close(c->j.fd);
		q->files_done++;
		if (q->sent && !drop && !q->bad[c->file] && rc == 0)
			q->sent[c->file] = 1;
	}
	return rc;
}

/* Small files are read ahead in batches on the I/O threads (a cold tree
 * is read with several files in flight; the packing thread only packs),
 * one hand-off per batch, not per file. */
#define SMALL_BATCHES     4            /* batches read ahead */
#define SMALL_BATCH_FILES 32           /* files per batch, at most */
#define SMALL_BATCH_BYTES (512u << 10) /* their bytes, at most (one file: any) */

struct small_rd {
	struct io_job j;                  /* its work: read_small() */
	const struct sendq *q;
	const uint32_t *idx;              /* its files: manifest indexes */
	uint32_t n, next;                 /* how many; the next one to pack */
	uint32_t at[SMALL_BATCH_FILES];   /* where each one's bytes are in buf */
	int st[SMALL_BATCH_FILES];        /* 0: read whole; -1: vanished or changed
	                                     (said); -2: unreadable (said);
	                                     -3: shrank while read; -4: not read
	                                     (the run had failed); -5: not the
	                                     hash the index gave (said) */
	uint8_t hash[SMALL_BATCH_FILES][IDX_HASH_LEN];   /* of what was read */
	uint8_t reread[SMALL_BATCH_FILES];   /* 1: read whole, rewritten since
	                                        the scan at its size (sent as read) */
	uint8_t *buf;
	const int *stop;                  /* set: the run failed, read no more */
};

struct smallq {
	struct small_rd b[SMALL_BATCHES];
	int head, count;
	int stop;                         /* written before io_pool_stop() only */
	const uint32_t *small;            /* small files, in plan order */
	uint32_t ns, si;                  /* how many; the next one to batch */
};

/* Is what was just read of a small file (its first e->size bytes, hash;
 * z: its stat after the read; still: it stood still during the read) the
 * file the scan saw (e), which is what the manifest told the receiver?
 * Its hash, if the scan had it (for a file that grew: of the part the scan
 * saw). Else (it was not read: IDX_F_NOHASH) its stat: such a file was
 * settled when scanned (ctime a minute old, IDX_SETTLED_S), and any write
 * since, one during the read included, stamps it with a later ctime; one
 * that only grew it (same inode, larger) is taken as read when it stood
 * still during the read, as rsync takes what it reads. */
static int scanned_bytes(const struct idx_entry *e, const uint8_t *hash, const struct stat *z,
                         int still)
{
	if (!(e->flags & IDX_F_NOHASH))
		return !memcmp(hash, e->hash, IDX_HASH_LEN);
	if (z->st_dev != e->dev || z->st_ino != e->ino)
		return 0;
	if ((uint64_t)z->st_size > e->size)
		return still;
	return (uint64_t)z->st_size == e->size &&
	       (int64_t)z->st_mtim.tv_sec * 1000000000 + z->st_mtim.tv_nsec == e->mtime_ns &&
	       (int64_t)z->st_ctim.tv_sec * 1000000000 + z->st_ctim.tv_nsec == e->ctime_ns;
}

#define REREAD_TRIES 4   /* reads of a small file that moves while read */

static int stat_same(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Read a small file's first e->size bytes into buf and hash them, its stat
 * after the read into *z: 0 when the file stood still during the read
 * (the same stat before and after), 1 when it moved, -3 when it came short
 * (shrank), else -errno. */
static int read_once(int fd, const struct idx_entry *e, uint8_t *buf,
                     uint8_t hash[IDX_HASH_LEN], struct stat *z)
{
	struct stat a;
	size_t got;
	if (fstat(fd, &a) < 0)
		return -errno;
	int rc = io_pread_full(fd, buf, (size_t)e->size, 0, &got);
	if (rc < 0)
		return rc;
	if (got != e->size)
		return -3;
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits(buf, e->size));
	memcpy(hash, c.digest, IDX_HASH_LEN);
	if (fstat(fd, z) < 0)
		return -errno;
	return stat_same(&a, z) ? 0 : 1;
}

/* On an I/O thread: open, check, read and hash a batch's files, in order,
 * with a directory cache of its own (files come directory by directory).
 * A file whose bytes are not the ones the scan saw was rewritten since:
 * read again (a few tries, a moment apart) until two reads in a row during
 * which it stood still, the same inode at the scanned size, give the same
 * bytes (a stat's stamps can stay put through writes within one clock
 * tick), and that is sent, as read (as rsync sends what it reads; its tag
 * is of those bytes). One that never stands still, another file in its
 * place (a hard link's leader renamed over would land that file under
 * its links), or one at another size, is named and not sent; so is one
 * whose hash the manifest gave the receiver (-c, a fan-out), which would
 * refuse other bytes. */
static void read_small(struct io_job *j)
{
	struct small_rd *b = (struct small_rd *)j;
	struct dircache dc = { .fd = -1 };
	for (uint32_t k = 0; k < b->n; k++) {
		const struct idx_entry *e = &b->q->m->e[b->idx[k]];
		if (__atomic_load_n(b->stop, __ATOMIC_RELAXED)) {
			b->st[k] = -4;
			continue;
		}
		int fd = open_planned(&dc, root_of(b->q, b->idx[k]), e, b->q->res->fails, NULL);
		if (fd < 0) {
			b->st[k] = fd;
			continue;
		}
		char shown[4096];
		uint8_t prev[IDX_HASH_LEN];
		int have_prev = 0;
		b->reread[k] = 0;
		for (int t = 0;; t++) {
			struct stat z;
			int rc = read_once(fd, e, b->buf + b->at[k], b->hash[k], &z);
			b->st[k] = rc == -3 ? -3 : rc < 0 ? -2 : 0;
			if (rc < 0) {
				if (rc != -3)
					log_warn("%s: %s; not sent",
					         log_path(shown, sizeof shown, e->path), strerror(-rc));
				break;
			}
			if (scanned_bytes(e, b->hash[k], &z, rc == 0))
				break;   /* what the scan saw (or that file, grown) */
			/* rewritten in place at its size, still now: sent as read
			 * once two reads agree, unless the receiver has the scan's
			 * hash of it (-c, a fan-out) */
			int again = rc == 0 && (uint64_t)z.st_size == e->size && z.st_dev == e->dev &&
			            z.st_ino == e->ino && e->size < b->q->m->nohash_below;
			if (again && have_prev && !memcmp(prev, b->hash[k], IDX_HASH_LEN)) {
				b->reread[k] = 1;
				break;
			}
			have_prev = again;
			memcpy(prev, b->hash[k], IDX_HASH_LEN);
			if (t + 1 == REREAD_TRIES) {
				log_warn("%s: changed while being sent; not sent",
				         log_path(shown, sizeof shown, e->path));
				sync_fails_add(b->q->res->fails, e->path, "changed while being sent", 1);
				b->st[k] = (e->flags & IDX_F_NOHASH) ? -1 : -5;
				break;
			}
			usleep(10000u << (2 * t));   /* 10, 40, 160 ms */
		}
		close(fd);
	}
	if (dc.fd >= 0)
		close(dc.fd);
	free(dc.dir);
}

/* Queue batches while there is room and small files to read. */
static void small_fill(struct sendq *q, struct smallq *sq)
{
	while (sq->count < SMALL_BATCHES && sq->si < sq->ns) {
		struct small_rd *b = &sq->b[(sq->head + sq->count) % SMALL_BATCHES];
		uint64_t bytes = 0;
		b->idx = sq->small + sq->si;
		b->n = b->next = 0;
		while (b->n < SMALL_BATCH_FILES && sq->si < sq->ns) {
			uint64_t size = q->m->e[sq->small[sq->si]].size;
			if (b->n && bytes + size > SMALL_BATCH_BYTES)
				break;
			b->at[b->n++] = (uint32_t)bytes;
			bytes += size;
			sq->si++;
		}
		b->q = q;
		b->stop = &sq->stop;
		b->j = (struct io_job){ .fd = -1, .work = read_small };
		io_pool_submit(q->io, &b->j);
		sq->count++;
	}
}

static int small_left(const struct smallq *sq)
{
	return sq->count || sq->si < sq->ns;
}

/* SRC's index forgets entry i's row: its content is not the row's hash,
 * whatever its stat says, so the next scan reads it. */
static void forget_row(struct sendq *q, uint32_t i, const struct idx_entry *e)
{
	if ((q->ss->n ? srcs_forget(q->ss, i, e->path)
	              : idx_forget(q->root_path, &q->iso, e->path)) < 0) {
		char shown[4096];
		log_warn("%s: SRC's index could not forget it; the next run may say so "
		         "again", log_path(shown, sizeof shown, e->path));
	}
}

/* The next small file into the archive, its batch read first if need be.
 * 0 or an error. */
static int pack_one(struct sendq *q, struct packer *pk, struct smallq *sq)
{
	small_fill(q, sq);
	struct small_rd *b = &sq->b[sq->head];
	/* about to wait for the disk: what is packed goes now, so the receiver
	 * writes while this side reads (a run of a few hundred changed files
	 * fits in one message, which would otherwise wait for the last one) */
	if (b->next == 0 && !io_pool_done(q->io, &b->j)) {
		int rc = packer_flush(pk);
		if (rc < 0)
			return rc;
		io_pool_wait(q->io, &b->j);
	}
	uint32_t k = b->next++, i = b->idx[k];
	const struct idx_entry *e = &q->m->e[i];
	int rc = 0;
	q->files_done++;
	if (b->st[k] == 0 && (rc = packer_add(pk, i, b->buf + b->at[k], e->size,
	                                      b->hash[k])) == 0) {
		q->res->bytes += e->size;
		if (q->sent)
			q->sent[i] = 1;
		/* sent as re-read: the row's hash is not of what it holds now */
		if (b->reread[k] && !(e->flags & IDX_F_NOHASH))
			forget_row(q, i, e);
	} else if (b->st[k] == -5) {
		q->changed++;
		/* its stat is the row's, its content not (a write that stamped
		 * nothing): the next scan reads it */
		forget_row(q, i, e);
	} else if (b->st[k] == -3) {
		char shown[4096];
		log_warn("%s: shrank while being sent; not sent",
		         log_path(shown, sizeof shown, e->path));
		sync_fails_add(q->res->fails, e->path, "shrank while being sent", 1);
		q->changed++;
	} else if (b->st[k] < 0) {
		*(b->st[k] == -2 ? &q->failed : &q->changed) += 1;
	}
	if (b->next == b->n) {
		sq->head = (sq->head + 1) % SMALL_BATCHES;
		sq->count--;
		if (rc == 0)
			small_fill(q, sq);
	}
	return rc;
}

/* Small files first in the archive until it is ahead of the large files'
 * bytes, then a large chunk, and so on. 0 or an error. */
static void watch_peer(struct watch *w);

static int send_mixed(struct sendq *q, struct packer *pk, struct smallq *sq)
{
	int rc = 0;
	while (rc == 0 && (small_left(sq) || big_left(q))) {
		if (small_left(sq) && (!big_left(q) || packer_bytes(pk) <= q->big_bytes)) {
			rc = pack_one(q, pk, sq);
		} else if ((rc = queue_reads(q)) == 0 && q->count) {
			rc = send_next(q, 0);
		}
		watch_peer(q->w);
		progress_update(&q->w->pg, q->res->bytes, q->w->landed, 0);
	}
	return rc;
}

static int send_all(struct sendq *q, const uint32_t *plan, const struct chunk_map *maps,
                    uint32_t nplan, struct role *r)
{
	uint32_t *small = malloc((size_t)(nplan ? nplan : 1) * 4);
	uint32_t *big = malloc((size_t)(nplan ? nplan : 1) * 4);
	const struct chunk_map **bmap = malloc((size_t)(nplan ? nplan : 1) * sizeof *bmap);
	uint32_t ns = 0;
	uint64_t total = 0, small_bytes = 0;
	struct packer *pk = NULL;
	int rc = small && big && bmap ? 0 : -ENOMEM;
	for (uint32_t k = 0; k < nplan && rc == 0; k++) {
		const struct idx_entry *e = &q->m->e[plan[k]];
		total += chunk_map_bytes(&maps[k], e->size);
		if (e->size < SYNC_SMALL) {
			small[ns++] = plan[k];
			small_bytes += e->size;
		} else {
			bmap[q->nb] = &maps[k];
			big[q->nb++] = plan[k];
		}
	}
	q->big = big;
	q->bmap = bmap;
	int threads = io_pool_threads(tp_streams(q->ts));
	q->nslots = threads < FILES_IN_FLIGHT ? threads : FILES_IN_FLIGHT;
	for (int k = 0; k < FILES_IN_FLIGHT; k++)
		q->slot[k].fd = -1;
	if (rc == 0 && !(q->bad = calloc(q->m->n ? q->m->n : 1, 1)))
		rc = -ENOMEM;
	/* read ahead, but leave buffers for the archive and the wire */
	int bufs = (int)(tp_pool_bytes(q->ts) / SYNC_MSG_SIZE);
	q->depth = bufs - 3 < 1 ? 1 : bufs - 3 > READ_AHEAD_MAX ? READ_AHEAD_MAX : bufs - 3;
	struct smallq sq = { .small = small, .ns = ns };
	size_t batch = SMALL_BATCH_BYTES > SYNC_SMALL ? SMALL_BATCH_BYTES : SYNC_SMALL;
	if (batch > small_bytes)
		batch = small_bytes ? (size_t)small_bytes : 1;   /* a few small files */
	for (int k = 0; k < SMALL_BATCHES && ns && rc == 0; k++)
		if (!(sq.b[k].buf = malloc(batch)))
			rc = -ENOMEM;
	if (rc == 0 && (q->nb || ns))
		rc = io_pool_start(&q->io, threads);
	if (rc == 0 && ns)
		rc = packer_open(&pk, q->ts, q->akey);
	progress_start(&q->w->pg, r, total, nplan);
	if (rc == 0)
		rc = send_mixed(q, pk, &sq);
	if (rc)   /* the batches queued read no more */
		__atomic_store_n(&sq.stop, 1, __ATOMIC_RELAXED);
	while (q->count)
		send_next(q, 1);   /* after an error: let the reads in flight end */
	for (int k = 0; k < FILES_IN_FLIGHT; k++)
		if (q->slot[k].fd >= 0)
			close(q->slot[k].fd);
	io_pool_stop(q->io);   /* and the small files' batches in flight */
	for (int k = 0; k < SMALL_BATCHES; k++)
		free(sq.b[k].buf);
	if (pk) {
		int prc = packer_close(pk, rc == 0);
		if (rc == 0)
			rc = prc;
	}
	free(small);
	free(big);
	free(bmap);
	free(q->bad);
	return rc;
}

/* The receiver's itemized lines (CTL_LOG) on stdout: its control
 * characters other than newlines escaped, so a peer cannot drive our
 * terminal (the receiver's own lines are escaped already). */
static void print_log(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if ((p[i] < 0x20 && p[i] != '\n' && p[i] != '\t') || p[i] == 0x7f)
			printf("\\%03o", p[i]);
		else
			putchar(p[i]);
	}
}

/* A frame of the receiver's that needs no answer: its lines, its landed
 * count. 1 if it was one (taken), else 0. */
static int take_news(struct watch *w, uint8_t type, size_t n)
{
	if (type == CTL_LOG) {
		print_log(w->r->ctl->buf, n);
		fflush(stdout);
		return 1;
	}
	struct progress_msg pm;
	if (type == CTL_PROGRESS && progress_decode(w->r->ctl->buf, n, &pm) == 0) {
		w->landed = pm.files;
		return 1;
	}
	return 0;
}

/* The receiver's CTL_FAILED (--json), which comes right before its DONE,
 * into r->fails. 0 or -EPROTO (said): malformed, or not asked for. */
static int take_failed(struct role *r, size_t n)
{
	const char *why = "came though --json was not asked for";
	if (!r->fails || sync_fails_take(r->fails, r->ctl->buf, n, &why) < 0) {
		log_err("the receiver's list of failed files %s", why);
		return -EPROTO;
	}
	return 0;
}

/* While sending: what the receiver said meanwhile, without waiting (at most
 * every 20 ms). A frame that is not news is kept for await_done(). */
static void watch_peer(struct watch *w)
{
	double t = clock_s();
	if (!w || w->stop || t < w->next)
		return;
	w->next = t + 0.02;
	uint8_t type;
	size_t n;
	int rc = 0;
	while (w->nkept < WATCH_KEEP && (rc = ctl_poll(w->r->ctl, &type, &n)) == 1) {
		if (take_news(w, type, n))
			continue;
		/* a copy: the lines after it may come before it is wanted */
		struct kept *k = &w->kept[w->nkept];
		if (!(k->buf = malloc(n + 8))) {
			rc = -ENOMEM;
			break;
		}
		memcpy(k->buf, w->r->ctl->buf, n + 8);
		k->type = type;
		k->n = n;
		w->nkept++;
	}
	if (rc < 0 || w->nkept == WATCH_KEEP)   /* the next read sees the failure */
		w->stop = 1;
}

/* The receiver's DONE: its result. 0, or -EPROTO (said). */
static int take_result(const uint8_t *p, struct sync_result *res)
{
	if (result_get(p, res) == 0)
		return 0;
	log_err("the receiver's result has an exit code over 255 (%u)", get_u32(p));
	return -EPROTO;
}

/* The receiver's next frame: the one watch_peer() kept, if any, else the
 * next to come (as sync_recv()). */
static int next_frame(struct watch *w, uint8_t *type, size_t *n)
{
	if (!w->nkept)
		return sync_recv(w->r, "receiver", type, n);
	struct kept k = w->kept[0];
	memmove(w->kept, w->kept + 1, (size_t)--w->nkept * sizeof k);
	*type = k.type;
	*n = k.n;
	memcpy(w->r->ctl->buf, k.buf, k.n + 8);   /* came from it: it only grows */
	free(k.buf);
	return 0;
}

/* Read CTL_LOG lines (printing them) and CTL_LANDED (removing what it
 * names, rm) until the receiver's CTL_DONE; w (may be NULL): frames
 * watch_peer() kept come first. */
static int await_done(struct role *r, struct sync_result *res, struct src_remover *rm,
                      struct watch *w)
{
	struct watch none = { .r = r };
	if (!w)
		w = &none;
	for (;;) {
		uint8_t type;
		size_t n;
		int rc = next_frame(w, &type, &n);
		if (rc < 0)
			return rc;
		if (take_news(w, type, n))
			continue;
		if (type == CTL_LANDED) {
			if ((rc = landed_take(rm, r->ctl->buf, n)) < 0)
				return rc;
			continue;
		}
		if (type == CTL_ERROR) {
			res->code = sync_peer_error(r->ctl, n, "");
			return -ECANCELED;
		}
		if (type == CTL_FAILED) {   /* --json: the receiver's list, then DONE */
			if ((rc = take_failed(r, n)) < 0)
				return rc;
			continue;
		}
		if (type != CTL_DONE || n != RESULT_LEN) {
			log_err("the receiver's final result is malformed (type %u, %zu bytes)", type, n);
			return -EPROTO;
		}
		uint64_t vanished = res->errors;
		if ((rc = take_result(r->ctl->buf, res)) < 0)
			return rc;
		if (vanished && !res->code)
			res->code = RD_EXIT_VANISHED;
		fflush(stdout);
		return 0;
	}
}

/* The sender's run. */
struct sstate {
	struct role *r;
	struct sync_result *res;
	struct idx_manifest m;
	char *root, *only;       /* where SRC is scanned; the one name sent */
	struct srcset ss;        /* several SRCs (ss.n > 1), else ss.n is 0 */
	uint32_t *plan, nplan;   /* what the receiver asked for */
	struct chunk_map *maps;  /* per plan position: which chunks (CTL_CHUNKS) */
	struct watch w;          /* the receiver, while we send */
	struct tp_session *ts;
	struct sync_lock *lock;  /* SRC's, for the run */
	uint8_t *sent;           /* --remove-source-files: index -> sent whole */
	struct src_remover rm;
	struct filter *filter;   /* the filter rules, on our side */
	struct idx_root *roots;  /* --files-from */
	size_t nroots;
	uint8_t akey[SYNC_AKEY_LEN];   /* the run's archive key (MANIFEST_END) */
};

/* The scan's options: filter rules, --files-from, -x. 0 or -ENOMEM. */
static int scan_opts(struct sstate *s, struct idx_scan_opts *so)
{
	const struct sync_opts *o = s->r->o;
	int rc;
	so->only = s->only;
	so->one_fs = o->one_fs;
	so->meta = sync_scan_meta(s->r->flags);
	so->trust_prefix = sync_trust_prefix(s->r->flags);
	so->lazy_below = sync_nohash_below(s->r);
	so->no_index = o->no_index;   /* --no-index: both sides */
	if (o->nrules) {
		int fd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rc = fd < 0 ? -errno : sync_filter_open(&s->filter, o, SYNC_RM_SENDER, fd,
		                                        s->only ? "" : NULL);
		if (fd >= 0)
			close(fd);
		if (rc < 0)
			return rc;
		so->skip = sync_filter_skip;
		so->skip_ctx = s->filter;
	}
	if (o->files_from) {
		if ((rc = sync_files_roots(o, &s->roots, &s->nroots)) < 0)
			return rc;
		so->roots = s->roots;
		so->nroots = s->nroots;
	}
	return 0;
}

/* Several SRCs: READY for a directory's contents, then their entries,
 * merged (sources.c), as one manifest. */
static int scan_many(struct sstate *s)
{
	uint64_t errors = 0;
	const struct ready_msg rm = { .kind = READY_CONTENTS, .is_dir = 1 };
	uint8_t ready[4 + READY_NAME_MAX];
	double t0 = clock_s();
	int rc = ctl_send(s->r->ctl, CTL_READY, ready, ready_encode(ready, &rm));
	if (rc == 0 && (rc = srcs_scan(s->r, &s->ss, &s->m, &errors)) < 0) {
		int code = rc == -EWOULDBLOCK ? RD_EXIT_LOCKED : RD_EXIT_SELECT;
		ctl_error(s->r->ctl, code, rc == -EWOULDBLOCK ? "a source is being written by "
		          "another rdcp" : "the sources cannot be scanned");
		s->res->code = code;
		return rc;
	}
	if (rc == 0)
		sync_count_entries(s->res, &s->m, 0);   /* --stats, --json */
	return rc ? rc : send_manifest(s->r, &s->m, errors, s->res, s->akey, t0);
}

/* READY, the scan of SRC and the manifest. */
static int scan_and_send(struct sstate *s)
{
	struct role *r = s->r;
	struct idx_scan_opts so = { 0 };
	struct idx_stats st;
	int is_dir = 0, rc;
	if (r->nsrc > 1)
		return scan_many(s);
	rc = r->o->files_from ? sync_files_root(r->path, &s->root, &is_dir)
	                      : src_split(r->path, r->flags, &s->root, &s->only, &is_dir);
	if (rc < 0) {
		/* as rsync: a SRC that cannot be stat'ed is a file that failed
		 * (23); one that is not what the options need is unusable (3) */
		uint32_t code = r->o->files_from || rc == -EISDIR || rc == -ENOMEM
		                ? RD_EXIT_SELECT : RD_EXIT_PARTIAL;
		/* we said why; a far receiver prints nothing more (no text) */
		ctl_error(r->ctl, (int)code, r->is_client ? "" : "the source cannot be used "
		          "(see above)");
		s->res->code = code;
		if (code == RD_EXIT_PARTIAL) {   /* --json: the entry that failed */
			s->res->errors = 1;
			sync_fails_add(s->res->fails, r->path, strerror(-rc), 0);
		}
		return rc;
	}
	/* --sync of a directory named without a trailing '/': its contents,
	 * but its name goes along (READY_MIRROR) so that a receiver told to
	 * --delete can refuse a DST that has nothing in common with it */
	char *base = NULL;
	if (!s->only && is_dir && (r->flags & SYNC_F_MIRROR))
		base = mirror_name(r->path);
	const char *name = s->only ? s->only : base ? base : "";
	size_t tl = strlen(name);
	struct ready_msg rm = { .kind = s->only ? READY_NAMED : base ? READY_MIRROR
	                                                          : READY_CONTENTS,
	                        .is_dir = (uint8_t)is_dir,
	                        .name_len = (uint16_t)(tl > READY_NAME_MAX ? READY_NAME_MAX : tl) };
	memcpy(rm.name, name, rm.name_len);
	free(base);
	uint8_t ready[4 + READY_NAME_MAX];
	if ((rc = ctl_send(r->ctl, CTL_READY, ready, ready_encode(ready, &rm))) < 0)
		return rc;
	/* not while another run writes into SRC: what we read would be a mix */
	int lockfd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (lockfd >= 0 && s->only && is_dir) {   /* one named entry: its own tree */
		int fd = sync_open_beneath(lockfd, s->only, O_RDONLY | O_DIRECTORY);
		close(lockfd);
		lockfd = fd;
	}
	if (lockfd >= 0) {   /* a named file: the directory it is read from */
		rc = sync_lock(lockfd, s->root, s->only && !is_dir ? SYNC_LOCK_INSIDE :
		               SYNC_LOCK_READ, &s->lock);
		close(lockfd);
	}
	if (lockfd >= 0 && rc < 0) {
		int code = rc == -EWOULDBLOCK ? RD_EXIT_LOCKED : RD_EXIT_SELECT;
		ctl_error(r->ctl, code, rc == -EWOULDBLOCK ? "the source is being written "
		          "(see above)" : "the source cannot be locked (see above)");
		s->res->code = code;
		return rc;
	}
	double t0 = clock_s();
	if ((rc = scan_opts(s, &so)) < 0 || (rc = idx_scan(s->root, &so, &s->m, &st)) < 0) {
		ctl_error(r->ctl, RD_EXIT_SELECT, "the source cannot be scanned");
		s->res->code = RD_EXIT_SELECT;
		return rc;
	}
	if ((rc = sync_filter_error(s->filter)) != 0) {   /* a dir-merge file (said) */
		ctl_error(r->ctl, rc, "the sender could not use a dir-merge filter file "
		          "(see above)");
		s->res->code = (uint32_t)rc;
		return -ECANCELED;
	}
	sync_count_entries(s->res, &s->m, s->only != NULL);   /* --stats, --json */
	return send_manifest(r, &s->m, st.errors, s->res, s->akey, t0);
}

/* After the plan: which chunks of the files DST has an old version of
 * (CTL_CHUNKS), until CTL_CHUNKS_END. 0 or an error. */
static int read_chunks(struct sstate *s)
{
	struct ctl *c = s->r->ctl;
	const char *why = NULL;
	if (!(s->maps = calloc(s->nplan ? s->nplan : 1, sizeof *s->maps)))
		return -ENOMEM;
	for (;;) {
		uint8_t type;
		size_t n;
		int rc = sync_recv(s->r, "receiver", &type, &n);
		if (rc < 0)
			return rc;
		if (type == CTL_CHUNKS_END && n == 0)
			rc = chunks_complete(s->maps, s->nplan, &why);
		else if (type == CTL_CHUNKS)
			rc = chunks_decode(c->buf, n, &s->m, s->plan, s->nplan, s->maps, &why);
		else
			rc = -EPROTO, why = "is missing: another message came instead";
		if (rc == -EPROTO)
			log_err("the receiver's list of chunks to send %s", why);
		if (rc < 0 || type == CTL_CHUNKS_END)
			return rc;
	}
}

/* The receiver's plan: which entries to send. 0, 1 when the receiver gave
 * up before the data (its result is in res), or an error. */
static int read_plan(struct sstate *s)
{
	struct ctl *c = s->r->ctl;
	uint8_t type;
	size_t n;
	int rc = sync_recv(s->r, "receiver", &type, &n);
	if (rc < 0)
		return rc;
	if (type == CTL_ERROR) {
		s->res->code = sync_peer_error(c, n, "");
		return 1;
	}
	if (type == CTL_DONE && n == RESULT_LEN)
		return (rc = take_result(c->buf, s->res)) < 0 ? rc : 1;
	if (type == CTL_LOG || type == CTL_FAILED) {   /* its reasons, then its DONE */
		if (type == CTL_LOG)
			print_log(c->buf, n);
		else if ((rc = take_failed(s->r, n)) < 0)
			return rc;
		rc = await_done(s->r, s->res, &s->rm, NULL);
		return rc < 0 ? rc : 1;
	}
	if (type != CTL_PLAN || n < 4 || (n - 4) / 4 != get_u32(c->buf) || n % 4) {
		log_err("the receiver's plan is malformed (type %u, %zu bytes)", type, n);
		return -EPROTO;
	}
	s->nplan = get_u32(c->buf);
	s->plan = malloc((size_t)(s->nplan ? s->nplan : 1) * 4);
	if (!s->plan)
		return -ENOMEM;
	for (uint32_t k = 0; k < s->nplan; k++) {
		uint32_t i = s->plan[k] = get_u32(c->buf + 4 + 4 * k);
		char shown[300];
		if (i >= s->m.n)
			log_err("the receiver's plan asks for entry %u of a file list of %zu", i,
			        s->m.n);
		else if (s->m.e[i].type != IDX_REG)
			log_err("the receiver's plan asks for entry %u ('%s'), which is not a "
			        "regular file", i, log_path(shown, sizeof shown, s->m.e[i].path));
		else if (k && i <= s->plan[k - 1])   /* once each: no file sent twice */
			log_err("the receiver's plan asks for entry %u again or out of order "
			        "(after %u)", i, s->plan[k - 1]);
		else
			continue;
		return -EPROTO;
	}
	rc = read_chunks(s);
	rsh_narrow_pipe(s->r->ctl->in);   /* what comes now is small */
	return rc;
}

/* Where and how to connect, from the receiver (or why it cannot); then the
 * data session. 0, 1 when the receiver failed before the data, or an error. */
static int connect_data(struct sstate *s)
{
	struct role *r = s->r;
	uint8_t type;
	size_t n;
	int rc;
	while ((rc = next_frame(&s->w, &type, &n)) == 0 && take_news(&s->w, type, n))
		;
	if (rc < 0)
		return rc;
	if (type == CTL_DONE && n == RESULT_LEN)
		return (rc = take_result(r->ctl->buf, s->res)) < 0 ? rc : 1;
	if (type == CTL_ERROR) {
		s->res->code = sync_peer_error(r->ctl, n, "");
		return 1;
	}
	if (type == CTL_FAILED) {   /* --json: what failed, then its DONE */
		if ((rc = take_failed(r, n)) < 0 || (rc = await_done(r, s->res, &s->rm, &s->w)) < 0)
			return rc;
		return 1;
	}
	struct ctl_data cd;
	if (type != CTL_DATA) {
		log_err("the receiver sent a message of type %u instead of where to connect", type);
		return -EPROTO;
	}
	if (ctl_data_decode(r->ctl->buf, n, &cd) < 0) {
		log_err("the receiver's data-connection message %s", cd.why);
		return -EPROTO;
	}
	/* the client: its --data-addr, else the address the server says its
	 * ssh was reached on (an IP literal, nothing else: peer input), else
	 * the ssh host. The server: the client's --data-addr, else its own idea. */
	const char *addr = *cd.addr ? cd.addr : r->connect_addr;
	if (r->is_client && r->o && r->o->data_addr) {
		addr = r->connect_addr;
	} else if (r->is_client && *cd.addr && !rsh_is_ip(cd.addr)) {
		char shown[300];
		log_err("the receiver's data-connection message has an address that is not an "
		        "IP address: '%s'", log_path(shown, sizeof shown, cd.addr));
		return -EPROTO;
	}
	struct tp_opts o = r->tp;
	tp_key_derive(cd.key, 32, o.key);
	explicit_bzero(cd.key, sizeof cd.key);
	o.msg_size = SYNC_MSG_SIZE;
	o.pool_size = SYNC_POOL_SIZE;
	o.io_timeout_ms = r->timeout * 1000;
	if (r->o && r->o->contimeout > 0)   /* else the transport's 10 s */
		o.connect_timeout_ms = r->o->contimeout * 1000;
	o.rate = r->o ? r->o->bwlimit : 0;   /* --bwlimit: paced over all streams */
	rc = tp_connect(addr, cd.port, &o, &s->ts);
	if (rc == -ETIMEDOUT && r->timeout > 0)
		rc = -ETIME;   /* it listened, then went silent: --timeout's case */
	if (rc < 0) {
		char why[400];
		snprintf(why, sizeof why, "cannot open the data connection to %s port %u", addr,
		         cd.port);
		/* the one we can fix: the address (a receiver that answered and
		 * then closed was reached: the transport said why, in one line) */
		if (r->is_client && rc != -ETIME && rc != -ECONNRESET)
			log_err("%s: %s (if the far side is reached at another address, such as "
			        "its IPoIB or RoCE address, give it with --data-addr)", why,
			        strerror(-rc));
		ctl_error(r->ctl, rd_exit_code(rc), why);
	}
	return rc;
}

/* For tests: with $RDCP_TEST_PAUSE naming a path, create it and wait until
 * it is removed (60 s at most), so a test can change SRC between the scan
 * and the reads, as a busy tree does. Nothing else reads the variable. */
static void test_pause(struct watch *w)
{
	const char *p = getenv("RDCP_TEST_PAUSE");
	int fd = p && *p ? open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600) : -1;
	if (fd < 0)
		return;
	close(fd);
	for (int i = 0; i < 6000 && access(p, F_OK) == 0; i++) {
		usleep(10000);
		watch_peer(w);   /* the receiver's lines meanwhile */
	}
}

/* The planned files over the data session, then the receiver's verdict. */
static int send_data(struct sstate *s)
{
	int rootfd = s->ss.n ? -1 : open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0 && !s->ss.n)
		return -errno;
	struct sendq q = { .ts = s->ts, .dc = { NULL, -1, -1 }, .root = rootfd, .ss = &s->ss,
	                   .m = &s->m, .res = s->res, .w = &s->w,
	                   .sent = s->sent, .sparse = (s->r->flags & SYNC_F_SPARSE) != 0,
	                   .files = tp_sends_files(s->ts), .root_path = s->root, .akey = s->akey,
	                   .iso = { .only = s->only, .no_index = s->r->o->no_index } };
	int rc = send_all(&q, s->plan, s->maps, s->nplan, s->r);
	free(q.dc.dir);
	if (q.dc.fd >= 0)
		close(q.dc.fd);
	if (rootfd >= 0)
		close(rootfd);
	if (rc == 0)
		rc = tp_finish(s->ts);
	if (rc < 0) {
		/* a receiver whose disk is full has said so, naming the file:
		 * once is enough */
		int full = tp_peer_status(s->ts) == ENOSPC || tp_peer_status(s->ts) == EDQUOT;
		if (!full)
			tp_report_failure(rc, s->res->bytes, s->ts, 1);
		return rc;
	}
	/* what could not be sent, before the receiver decides on deletions */
	uint8_t sent[SENT_LEN];
	sent_encode(sent, &(struct sent_msg){ .unsent = q.changed + q.failed,
	                                      .unreadable = q.failed });
	s->res->errors = q.changed;   /* await_done turns this into exit 24 */
	s->res->vanished = q.changed;   /* --json's: the receiver's DONE has no such count */
	s->res->wire = s->res->bytes;   /* before the receiver's count replaces it */
	rc = ctl_send(s->r->ctl, CTL_SENT, sent, sizeof sent);
	if (rc == 0 && s->r->fails && !s->r->is_client)   /* --json: what failed here */
		rc = sync_fails_send(s->r->ctl, s->r->fails);
	return rc;
}

static int sender_run(struct sstate *s)
{
	int rc = scan_and_send(s);
	if (rc == -ECONNRESET && read_plan(s) == 1)
		return 1;   /* the receiver stopped early: its reason came first */
	if (rc < 0 || (rc = read_plan(s)) != 0)
		return rc;
	/* --remove-source-files: what the receiver may say landed (remove.c) */
	/* never in a dry run: a receiver that says otherwise is refused */
	s->rm = (struct src_remover){ .on = (s->r->flags & SYNC_F_REMOVE_SOURCE) &&
	                                    !(s->r->flags & SYNC_F_DRYRUN),
	                              .m = &s->m, .plan = s->plan, .nplan = s->nplan,
	                              .root = -1, .ss = &s->ss, .last = -1 };
	if (s->rm.on && !s->ss.n)
		s->rm.root = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->rm.on && !(s->rm.sent = s->sent = calloc(s->m.n ? s->m.n : 1, 1)))
		return -ENOMEM;
	if (s->nplan) {
		test_pause(&s->w);
		if ((rc = connect_data(s)) != 0 || (rc = send_data(s)) < 0)
			return rc;
	}
	rc = await_done(s->r, s->res, &s->rm, &s->w);
	progress_update(&s->w.pg, s->res->bytes, s->res->files, 1);
	s->res->transport = s->ts ? tp_kind_name(s->ts) : NULL;
	if (s->rm.errors && !s->res->code)
		s->res->code = RD_EXIT_PARTIAL;   /* a source file could not be removed */
	return rc;
}

int sync_sender(struct role *r, struct sync_result *res)
{
	struct sstate s = { .r = r, .res = res, .rm = { .root = -1 },
	                    .w = { .r = r } };
	memset(res, 0, sizeof *res);
	res->fails = r->fails;
	int rc = sender_run(&s);
	res->we_sent = 1;
	res->ctl_tx = r->ctl->tx_bytes;
	res->ctl_rx = r->ctl->rx_bytes;
	if (rc < 0 && !res->code)
		res->code = rd_exit_code(rc);
	tp_close(s.ts);
	for (int k = 0; k < s.w.nkept; k++)
		free(s.w.kept[k].buf);
	sync_unlock(s.lock);
	for (uint32_t k = 0; s.maps && k < s.nplan; k++)
		chunk_map_free(&s.maps[k]);
	free(s.maps);
	free(s.plan);
	free(s.sent);
	if (s.rm.root >= 0)
		close(s.rm.root);
	free(s.root);
	free(s.only);
	sync_filter_free(s.filter);
	sync_files_roots_free(s.roots, s.nroots);
	srcs_free(&s.ss);
	explicit_bzero(s.akey, sizeof s.akey);
	idx_manifest_free(&s.m);
	return res->code;
}
