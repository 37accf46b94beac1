/* The sender's data (sync/send/send_int.h): the planned files read and sent,
 * large files one message per 4 MiB chunk, read ahead by a few I/O threads
 * (common/iopool.h, as rdsend's pump reads), and small files, read ahead
 * in batches by the same threads, packed into one archive stream
 * (pack.c). Every file is checked on the way to be the one the scan saw,
 * or that file grown, or (a small one) rewritten in place and read again
 * until it stands still. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/io.h"
#include "common/iopool.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/send/send_int.h"
#include "sync/send/send_int.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

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
 * file's whole: read_small()), so a part rewritten as it grew is caught
 * there, not sent. A file the scan did not read (IDX_F_NOHASH) has no hash:
 * its first e->size bytes are sent as read once it stood still during a
 * read, as rsync sends what it reads. 0: neither. */
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
 * warning) if it vanished or changed, -2 if it cannot be read; -6, unsaid,
 * when it is there but changed and say_changed is 0 (another round takes
 * it: changed_file()). */
static int open_planned(struct dircache *dc, int root, const struct idx_entry *e,
                        struct sync_fails *fails, int *grown, int say_changed)
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
	if (fd >= 0 && !say_changed) {
		close(fd);
		return -6;
	}
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
	int frugal;          /* --append: only the blocks the receiver lacks */
	int fromfile;        /* not read: sent from the page cache (sendfile) */
	const uint8_t *rec;  /* CH_BLOCKS: the receiver's block record */
	uint32_t len;        /* its bytes */
	const uint8_t *want; /* its digest, taken unread under --append
	                        (IDX_F_ASSUMED), or of a file that grew since
	                        the scan: checked as it is read */
	int stale;           /* and it was not what was read */
	const uint8_t *akey; /* set: one not what the scan saw goes as read
	                        (SYNC_MSG_ASREAD, tagged with this key) */
	int asread;          /* and this one does */
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
	const struct sendq_args *a;    /* the caller's hooks */
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
	int append;              /* --append: blocks_pack()'s frugal */
	int files;               /* the transport sends file ranges (plain TCP) */
	const char *root_path;   /* SRC (one SRC): its index, to forget a row */
	const uint8_t *akey;     /* the archive key: entry tags */
	struct idx_scan_opts iso;
	struct idx_manifest *grown;   /* a_args' */
	struct sync_paths *retry;     /* a_args' */
	struct sync_paths *as_read;   /* a_args' */
	uint8_t *asr;                 /* as_read: index -> a chunk went as read */
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

/* A planned file found changed as it was read (there still, but not what
 * the scan saw): counted, and said, unless another round will send it as
 * it then is (q->retry: the client's list). */
static void changed_file(struct sendq *q, const struct idx_entry *e, const char *why)
{
	q->changed++;
	if (q->retry && sync_paths_add(q->retry, e->path) == 0)
		return;
	char shown[4096];
	log_warn("%s: %s; not sent", log_path(shown, sizeof shown, e->path), why);
	sync_fails_add(q->res->fails, e->path, why, 1);
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
	o->fd = open_planned(&q->dc, root_of(q, i), e, q->res->fails, &o->grown, !q->retry);
	if (o->fd >= 0 && o->end == 0) {   /* it is all in DST's old version */
		close(o->fd);
		o->fd = -1;
		if (q->sent)
			q->sent[i] = 1;
	} else if (o->fd == -6) {
		changed_file(q, e, "changed since the scan");
		o->fd = -1;
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
	} else if (c->rec && (n = blocks_pack(c->m->data, c->len, c->rec, c->frugal))) {
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
		if (c->stale && c->akey) {   /* as read, whole, with its tag */
			c->m->len = c->len + SYNC_TAG_LEN;
			c->m->off = c->j.off | (uint64_t)SYNC_MSG_ASREAD << 62;
			chunk_tag(c->akey, (uint64_t)c->file + 1, c->m->off, h,
			          (uint8_t *)c->m->data + c->len);
			c->stale = 0;
			c->asread = 1;
			return;
		}
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
		/* the last round reads a hole too: it may have been data at the
		 * scan (then it goes as read, its zeros whole) */
		c->hole = q->sparse && !q->as_read && in_hole(o->fd, o->off, len);
		c->rec = cm->how && cm->how[o->off / IDX_CHUNK_SIZE] == CH_BLOCKS
		         ? cm->blocks + (size_t)o->brec++ * SYNC_BLOCK_REC : NULL;
		/* a hole is not read: a job of no bytes keeps the ring's order */
		c->sparse = q->sparse;
		c->frugal = q->append;
		/* a chunk whose digest --append took unread is read and checked
		 * here (the receiver would refuse it, run after run) */
		uint32_t k = (uint32_t)(o->off / IDX_CHUNK_SIZE);
		/* the last round: every chunk is checked, and one that is not the
		 * scan's goes as read (not a file --append took partly unread, nor
		 * a hard link's leader, whose links keep the scan's hash) */
		c->akey = q->as_read && !(e->flags & IDX_F_ASSUMED) && !e->hlink ? q->akey : NULL;
		c->want = ((e->flags & IDX_F_ASSUMED) || o->grown || c->akey) && !c->hole
		          ? chunk_digest(e, k) : NULL;
		c->stale = c->asread = 0;
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
	if (!drop && !q->bad[c->file] && c->j.err) {
		char shown[4096];
		const char *why = strerror(c->j.err);
		log_warn("%s: %s; not sent", log_path(shown, sizeof shown, e->path), why);
		sync_fails_add(q->res->fails, e->path, why, 0);
		q->failed++;
		q->bad[c->file] = 1;
	}
	if (!drop && !q->bad[c->file] && c->j.got != c->j.len) {
		changed_file(q, e, "shrank while being sent");
		q->bad[c->file] = 1;
	}
	if (!drop && !q->bad[c->file] && c->stale && !(e->flags & IDX_F_ASSUMED)) {
		/* grown since the scan, and the part the scan saw rewritten */
		changed_file(q, e, "changed while being sent");
		q->bad[c->file] = 1;
	}
	if (!drop && !q->bad[c->file] && c->stale) {
		char shown[4096];
		changed_file(q, e, "its old part changed, which --append took unread from SRC's "
		             "index (the next run reads it whole)");
		q->bad[c->file] = 1;
		/* (several SRCs: a run without --append reads it whole) */
		if (!q->ss->n && idx_forget(q->root_path, &q->iso, e->path) < 0)
			log_warn("%s: SRC's index still vouches for it: run once without "
			         "--append", log_path(shown, sizeof shown, e->path));
		if (q->grown)   /* nor may the watch's memo */
			send_grown_forget(q->grown, e->path);
	}
	if (!drop && !q->bad[c->file] && c->fromfile &&
	    (c->m->file_fd = fcntl(c->j.fd, F_DUPFD_CLOEXEC, 0)) < 0) {
		char shown[4096];
		c->m->file_fd = -1;   /* no fd left: read it here */
		size_t got;
		int err = io_pread_full(c->j.fd, c->m->data, c->len, c->j.off, &got);
		if (err < 0) {
			log_warn("%s: %s; not sent", log_path(shown, sizeof shown, e->path),
			         strerror(-err));
			q->failed++;   /* as send_next() counts */
			q->bad[c->file] = 1;
		} else if (got != c->len) {
			changed_file(q, e, "shrank while being sent");
			q->bad[c->file] = 1;
		}
	}
	if (!drop && !q->bad[c->file] && c->asread)
		q->asr[c->file] = 1;   /* listed once it is all sent */
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
		if (q->asr && q->asr[c->file] && !drop && !q->bad[c->file] && rc == 0)
			sync_paths_add(q->as_read, e->path);
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
	                                     (the run had failed); -5: never
	                                     stood still; -6: changed since the
	                                     scan (these three: changed_file()) */
	uint8_t hash[SMALL_BATCH_FILES][IDX_HASH_LEN];   /* of what was read */
	uint8_t reread[SMALL_BATCH_FILES];   /* 1: read whole, rewritten since
	                                        the scan at its size (sent as read);
	                                        2: and it never stood still */
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

/* Read a small file's first e->size bytes into buf and hash them, taking
 * its stat before into *a if a is not NULL: 0, -3 when it came short
 * (shrank), else -errno. */
static int read_once(int fd, const struct idx_entry *e, uint8_t *buf,
                     uint8_t hash[IDX_HASH_LEN], struct stat *a)
{
	size_t got;
	if (a && fstat(fd, a) < 0)
		return -errno;
	int rc = io_pread_full(fd, buf, (size_t)e->size, 0, &got);
	if (rc < 0)
		return rc;
	if (got != e->size)
		return -3;
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits(buf, e->size));
	memcpy(hash, c.digest, IDX_HASH_LEN);
	return 0;
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
		int fd = open_planned(&dc, root_of(b->q, b->idx[k]), e, b->q->res->fails, NULL,
		                      !b->q->retry);
		if (fd < 0) {
			b->st[k] = fd;
			continue;
		}
		char shown[4096];
		uint8_t prev[IDX_HASH_LEN];
		int have_prev = 0;
		b->reread[k] = 0;
		for (int t = 0;; t++) {
			/* the first read takes no stat before it (most files are
			 * what the scan saw): a later one must show it stood still */
			struct stat a, z;
			int rc = read_once(fd, e, b->buf + b->at[k], b->hash[k], t ? &a : NULL);
			if (rc == 0 && !(e->flags & IDX_F_NOHASH) &&
			    !memcmp(b->hash[k], e->hash, IDX_HASH_LEN)) {
				b->st[k] = 0;   /* what the scan saw (or that file, grown) */
				break;
			}
			if (rc == 0 && fstat(fd, &z) < 0)
				rc = -errno;
			b->st[k] = rc == -3 ? -3 : rc < 0 ? -2 : 0;
			if (rc < 0) {
				if (rc != -3)
					log_warn("%s: %s; not sent",
					         log_path(shown, sizeof shown, e->path), strerror(-rc));
				break;
			}
			int still = t && stat_same(&a, &z);
			if (scanned_bytes(e, b->hash[k], &z, still))
				break;
			/* rewritten in place at its size, still now: sent as read
			 * once two reads agree, unless the receiver has the scan's
			 * hash of it (-c, a fan-out) */
			int again = still && (uint64_t)z.st_size == e->size && z.st_dev == e->dev &&
			            z.st_ino == e->ino && e->size < b->q->m->nohash_below;
			if (again && have_prev && !memcmp(prev, b->hash[k], IDX_HASH_LEN)) {
				b->reread[k] = 1;
				break;
			}
			have_prev = again;
			memcpy(prev, b->hash[k], IDX_HASH_LEN);
			if (t + 1 == REREAD_TRIES) {
				/* the last round: the last read goes as read, as rsync's
				 * would (its tag is of those bytes), when the receiver
				 * has no hash of it to refuse them by */
				int as_read = b->q->as_read && (uint64_t)z.st_size == e->size &&
				              z.st_dev == e->dev && z.st_ino == e->ino &&
				              e->size < b->q->m->nohash_below && !e->hlink;
				b->reread[k] = as_read ? 2 : 0;
				b->st[k] = as_read ? 0 : -5;   /* -5: said on the main thread
				                                  (changed_file()) */
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
		if (b->reread[k] == 2)
			sync_paths_add(q->as_read, e->path);
	} else if (b->st[k] == -5) {
		changed_file(q, e, "changed while being sent");
		/* its stat may be the row's, its content not (a write that
		 * stamped nothing): the next scan reads it */
		if (!(e->flags & IDX_F_NOHASH))
			forget_row(q, i, e);
	} else if (b->st[k] == -3) {
		changed_file(q, e, "shrank while being sent");
	} else if (b->st[k] == -6) {
		changed_file(q, e, "changed since the scan");
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
static int send_mixed(struct sendq *q, struct packer *pk, struct smallq *sq)
{
	int rc = 0;
	while (rc == 0 && (small_left(sq) || big_left(q))) {
		if (small_left(sq) && (!big_left(q) || packer_bytes(pk) <= q->big_bytes)) {
			rc = pack_one(q, pk, sq);
		} else if ((rc = queue_reads(q)) == 0 && q->count) {
			rc = send_next(q, 0);
		}
		q->a->tick(q->a->ctx, q->res->bytes);
	}
	return rc;
}

static int send_all(struct sendq *q, const uint32_t *plan, const struct chunk_map *maps,
                    uint32_t nplan)
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
	if (rc == 0 && q->as_read && !(q->asr = calloc(q->m->n ? q->m->n : 1, 1)))
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
	q->a->start(q->a->ctx, total, nplan);
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
	free(q->asr);
	return rc;
}

int sendq_run(const struct sendq_args *a, const uint32_t *plan, const struct chunk_map *maps,
              uint32_t nplan, uint64_t *changed, uint64_t *failed)
{
	struct sendq q = { .ts = a->ts, .dc = { NULL, -1, -1 }, .root = a->root, .ss = a->ss,
	                   .m = a->m, .res = a->res, .a = a, .sent = a->sent,
	                   .sparse = a->sparse, .append = a->append, .files = a->files,
	                   .root_path = a->root_path, .akey = a->akey, .iso = a->iso,
	                   .grown = a->grown, .retry = a->retry, .as_read = a->as_read };
	int rc = send_all(&q, plan, maps, nplan);
	free(q.dc.dir);
	if (q.dc.fd >= 0)
		close(q.dc.fd);
	*changed = q.changed;
	*failed = q.failed;
	return rc;
}
