/*
 * Small files travel as one tar (ustar) stream made and read with libarchive,
 * cut into transport messages with id SYNC_ARCHIVE_ID and off = the byte
 * offset in the stream. Thousands of small files then cost a few large
 * messages instead of one message (and one round of bookkeeping) each.
 *
 * An entry's name is the sender's manifest index in decimal, never a path:
 * where the data goes is decided by the receiver from the manifest it has
 * already checked, so nothing in the archive can name a location (which is
 * stronger than libarchive's secure-extraction flags, and why the receiver
 * does not use archive_write_disk). Then '.' and, in 32 hex digits, the
 * tag of what the sender read (sync_entry_tag(): its XXH3-128, keyed with
 * the run's archive key): a small file's hash travels with it, as the
 * manifest has none (sync_nohash_below()), and cannot be made for other
 * data by anyone without the key, which went over ssh. Sizes are checked
 * against the manifest, and every file's hash is computed while it is
 * written and its tag compared with the one it came with.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "common/crypto.h"
#include "common/iopool.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/archive/larchive.h"
#include "sync/archive/archive.h"

#define UNPACK_WRITERS_MAX IO_POOL_AUTO_MAX   /* threads creating and writing files */
#define UNPACK_QUEUE     64         /* entries read ahead of the writers */
#define UNPACK_BATCH     16         /* entries handed over under one lock */
#define UNPACK_MAX_ENTRY SYNC_SMALL /* the archive holds only small files */

void sync_entry_tag(const uint8_t key[SYNC_AKEY_LEN], uint64_t index, uint64_t size,
                    const uint8_t hash[IDX_HASH_LEN], uint8_t tag[SYNC_TAG_LEN])
{
	uint8_t m[16 + IDX_HASH_LEN];
	put_u64(m, index);
	put_u64(m + 8, size);
	memcpy(m + 16, hash, IDX_HASH_LEN);
	if (cr_blake2b(tag, SYNC_TAG_LEN, m, sizeof m, key, SYNC_AKEY_LEN) < 0)
		abort();   /* (only without memory for OpenSSL's MAC state) */
}

/* --- sending --- */

struct packer {
	struct archive *a;
	struct archive_entry *e;   /* one, cleared for each file */
	uint8_t key[SYNC_AKEY_LEN];
	struct tp_session *ts;
	struct tp_msg *cur;
	uint64_t off;         /* stream offset where cur starts */
	int err;
};

static int flush_cur(struct packer *p)
{
	if (!p->cur || p->cur->len == 0)
		return 0;
	p->cur->id = SYNC_ARCHIVE_ID;
	p->cur->off = p->off;
	p->off += p->cur->len;
	int rc = tp_msg_send(p->ts, p->cur);
	p->cur = NULL;
	return rc;
}

static la_ssize_t pack_write(struct archive *a, void *ctx, const void *buf, size_t len)
{
	struct packer *p = ctx;
	const uint8_t *b = buf;
	size_t left = len;
	while (left) {
		if (!p->cur) {
			int rc = tp_msg_get(p->ts, &p->cur);
			if (rc < 0) {
				p->err = rc;
				p->cur = NULL;
				sym_archive_set_error(a, -rc, "transport: %s", strerror(-rc));
				return -1;
			}
			p->cur->len = 0;
		}
		size_t n = p->cur->cap - p->cur->len < left ? p->cur->cap - p->cur->len : left;
		memcpy((uint8_t *)p->cur->data + p->cur->len, b, n);
		p->cur->len += (uint32_t)n;
		b += n;
		left -= n;
		if (p->cur->len == p->cur->cap && (p->err = flush_cur(p)) < 0) {
			sym_archive_set_error(a, -p->err, "transport: %s", strerror(-p->err));
			return -1;
		}
	}
	return (la_ssize_t)len;
}

int packer_open(struct packer **out, struct tp_session *ts, const uint8_t key[SYNC_AKEY_LEN])
{
	if (larchive_load() < 0)
		return -ENOSYS;   /* said */
	struct packer *p = calloc(1, sizeof *p);
	if (!p || !(p->a = sym_archive_write_new()) || !(p->e = sym_archive_entry_new())) {
		if (p && p->a)
			sym_archive_write_free(p->a);
		free(p);
		return -ENOMEM;
	}
	p->ts = ts;
	memcpy(p->key, key, SYNC_AKEY_LEN);
	/* ustar: every entry fits it (a name of at most 43 bytes, a size
	 * under SYNC_SMALL), and its writer formats the header from the
	 * entry as it is; pax's clones each entry and converts its name to
	 * UTF-8 and back, a fifth of the packer's time on small files */
	sym_archive_write_set_format_ustar(p->a);
	sym_archive_write_set_bytes_per_block(p->a, 0);   /* no padding: stream it */
	if (sym_archive_write_open2(p->a, p, NULL, pack_write, NULL, NULL) != ARCHIVE_OK) {
		log_err("archive: %s", sym_archive_error_string(p->a));
		sym_archive_write_free(p->a);
		sym_archive_entry_free(p->e);
		free(p);
		return -EIO;
	}
	*out = p;
	return 0;
}

int packer_add(struct packer *p, uint32_t index, const void *data, uint64_t size,
               const uint8_t hash[IDX_HASH_LEN])
{
	static const char hex[] = "0123456789abcdef";
	char name[16 + 2 * SYNC_TAG_LEN], digits[10];
	uint8_t tag[SYNC_TAG_LEN];
	struct archive_entry *e = sym_archive_entry_clear(p->e);
	sync_entry_tag(p->key, index, size, hash, tag);
	int nd = 0, at = 0;
	uint32_t v = index;
	do
		digits[nd++] = (char)('0' + v % 10);
	while ((v /= 10));
	while (nd)
		name[at++] = digits[--nd];
	name[at++] = '.';
	for (int k = 0; k < SYNC_TAG_LEN; k++) {
		name[at++] = hex[tag[k] >> 4];
		name[at++] = hex[tag[k] & 15];
	}
	name[at] = '\0';
	sym_archive_entry_set_pathname(e, name);
	sym_archive_entry_set_filetype(e, AE_IFREG);
	sym_archive_entry_set_perm(e, 0600);
	sym_archive_entry_set_size(e, (la_int64_t)size);
	/* the entry is finished (its padding written) now, not at the next
	 * header: a message sent early (packer_flush()) then ends with whole
	 * entries, and the receiver writes its last file without waiting for
	 * the next message */
	int rc = sym_archive_write_header(p->a, e) == ARCHIVE_OK &&
	         sym_archive_write_data(p->a, data, size) == (la_ssize_t)size &&
	         sym_archive_write_finish_entry(p->a) == ARCHIVE_OK ? 0 : -EIO;
	if (rc < 0 && !p->err)
		log_err("archive: %s", sym_archive_error_string(p->a));
	return p->err ? p->err : rc;
}

int packer_flush(struct packer *p)
{
	if (!p->err)
		p->err = flush_cur(p);
	return p->err;
}

uint64_t packer_bytes(const struct packer *p)
{
	return p->off + (p->cur ? p->cur->len : 0);
}

int packer_close(struct packer *p, int ok)
{
	int rc = p->err;
	if (ok && !rc && sym_archive_write_close(p->a) != ARCHIVE_OK)
		rc = p->err ? p->err : -EIO;
	if (ok && !rc)
		rc = flush_cur(p);
	/* a stream given up is not finished: archive_write_free() would close
	 * it, writing its end blocks through pack_write() into a buffer that
	 * is back in the pool, or into a new one never sent nor put back */
	if (!ok || rc)
		sym_archive_write_fail(p->a);
	if (p->cur)
		tp_msg_put(p->ts, p->cur);
	p->cur = NULL;
	sym_archive_write_free(p->a);
	sym_archive_entry_free(p->e);
	explicit_bzero(p->key, sizeof p->key);
	free(p);
	return rc;
}

/* --- receiving --- */

/* A message of the stream: waiting for the reader, then libarchive's to
 * read, and shared with the jobs whose data lie in it. */
struct held {
	struct tp_msg *m;
	struct held *next;
	int refs;               /* the reader's, and one per job in it */
};

/* One archive entry, for a writer thread: its data in the message it came
 * in (most entries: no copy), or, when it spans messages, a copy. */
struct job {
	uint64_t idx, size;
	uint8_t tag[SYNC_TAG_LEN];    /* of what the sender read, as its name says */
	const uint8_t *data;
	struct held *in;        /* data lie in in->m; NULL: data is the job's */
	uint64_t len;
	int ok;                 /* read whole and in order */
	struct job *next;
};

struct unpacker {
	pthread_t th;
	/* writers: files are created and written by two threads per core (4
	 * to 8), so the filesystem's per-file work (inode allocation, metadata,
	 * linking into the directory) of one file overlaps another's */
	pthread_t wth[UNPACK_WRITERS_MAX];
	int nw;                 /* started */
	int share;              /* writers asked for (set before they start) */
	pthread_cond_t jcv, room;
	struct job *jobs, *jtail;
	int njobs, jdone;
	int idle;               /* writers waiting for jobs */
	/* the reader's entries not yet handed over: a lock and a wake-up per
	 * batch, not per file, unless a writer has nothing to do */
	struct job *mine, *mtail;
	int nmine;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct held *held;      /* sorted by offset, waiting for the reader */
	uint64_t want;          /* next stream offset the reader needs */
	int eof;                /* no more messages will come */
	int cut;                /* nor will the rest of the stream (a gap) */
	int err;
	struct held *inuse;     /* the reader's current buffer */
	struct tp_session *ts;
	const struct unpack_ops *ops;
	void *ctx;
	uint8_t *buf;
	uint8_t key[SYNC_AKEY_LEN];   /* the run's archive key: entry tags */
};

/* Done with a message: back to the transport (tests: the caller's). */
static void release(struct unpacker *u, struct tp_msg *m)
{
	if (u->ts)
		tp_msg_release(u->ts, m);
}

/* One user of h fewer: the last one gives its message back. Any thread. */
static void held_put(struct unpacker *u, struct held *h)
{
	if (__atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		release(u, h->m);
		free(h);
	}
}

static void job_free(struct unpacker *u, struct job *j)
{
	if (j->in)
		held_put(u, j->in);
	else
		free((void *)j->data);
	free(j);
}

/* The stream is not what a sender sends: one line, through the ops. */
__attribute__((format(printf, 2, 3)))
static int damaged(struct unpacker *u, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	u->ops->damaged(u->ctx, msg);
	return -EPROTO;
}

void unpacker_push(struct unpacker *u, struct tp_msg *m)
{
	struct held *h = malloc(sizeof *h);
	pthread_mutex_lock(&u->mu);
	if (!h || u->err) {
		if (!u->err)
			__atomic_store_n(&u->err, -ENOMEM, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&u->mu);
		free(h);
		release(u, m);   /* a failed reader drops the rest */
		return;
	}
	struct held **pp = &u->held;
	while (*pp && (*pp)->m->off < m->off)
		pp = &(*pp)->next;
	h->m = m;
	h->next = *pp;
	*pp = h;
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
}

static int hand_over(struct unpacker *u, int force);

/* libarchive's read callback: the next piece of the stream, in order. */
static la_ssize_t unpack_read(struct archive *a, void *ctx, const void **buf)
{
	struct unpacker *u = ctx;
	(void)a;
	if (u->inuse) {
		held_put(u, u->inuse);   /* libarchive is done with it */
		u->inuse = NULL;
	}
	pthread_mutex_lock(&u->mu);
	if (!(u->held && u->held->m->off == u->want) && u->nmine) {
		/* about to wait for the wire: the writers get what is read */
		pthread_mutex_unlock(&u->mu);
		hand_over(u, 1);   /* an error shows in u->err */
		pthread_mutex_lock(&u->mu);
	}
	while (!(u->held && u->held->m->off == u->want) && !u->eof && !u->err && !u->cut)
		pthread_cond_wait(&u->cv, &u->mu);
	la_ssize_t n = 0;
	if (u->held && u->held->m->off == u->want && !u->err && !u->cut) {
		struct held *h = u->held;
		u->held = h->next;
		h->next = NULL;
		h->refs = 1;
		u->inuse = h;
		*buf = h->m->data;
		n = h->m->len;
		u->want += (uint64_t)n;
	}
	pthread_mutex_unlock(&u->mu);
	return n;   /* 0: the stream ended (or failed) */
}

/* A writer: create, write and hash one file; the ops say where and judge. */
static void write_job(struct unpacker *u, struct job *j)
{
	int fd = u->ops->open(u->ctx, j->idx, j->size);
	if (fd == -EPROTO) {
		pthread_mutex_lock(&u->mu);
		if (!u->err)
			__atomic_store_n(&u->err, -EPROTO, __ATOMIC_RELAXED);
		pthread_cond_broadcast(&u->cv);
		pthread_cond_broadcast(&u->room);
		pthread_mutex_unlock(&u->mu);
		return;
	}
	if (fd < 0)
		return;   /* the ops gave up on this file and said why */
	XXH128_canonical_t c;
	uint8_t tag[SYNC_TAG_LEN];
	XXH128_canonicalFromHash(&c, XXH3_128bits(j->data, j->len));
	sync_entry_tag(u->key, j->idx, j->len, c.digest, tag);
	int err = !j->ok || j->len != j->size ? EPROTO :
	          !cr_equal(tag, j->tag, SYNC_TAG_LEN) ? EBADMSG : 0;
	for (uint64_t w = 0; !err && w < j->len;) {
		ssize_t n = write(fd, j->data + w, j->len - w);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			err = n < 0 ? errno : EIO;
		else
			w += (uint64_t)n;
	}
	int rc = u->ops->close(u->ctx, j->idx, err, c.digest, j->len);
	if (rc < 0) {   /* e.g. the disk is full: no point in the rest */
		pthread_mutex_lock(&u->mu);
		if (!u->err)
			__atomic_store_n(&u->err, rc, __ATOMIC_RELAXED);
		pthread_cond_broadcast(&u->cv);
		pthread_cond_broadcast(&u->room);
		pthread_mutex_unlock(&u->mu);
	}
}

static void *writer_main(void *arg)
{
	struct unpacker *u = arg;
	pthread_mutex_lock(&u->mu);
	for (;;) {
		while (!u->jobs && !u->jdone) {
			__atomic_add_fetch(&u->idle, 1, __ATOMIC_RELAXED);
			pthread_cond_wait(&u->jcv, &u->mu);
			__atomic_sub_fetch(&u->idle, 1, __ATOMIC_RELAXED);
		}
		if (!u->jobs)
			break;
		/* a writer's share of what is queued (the others get the rest) */
		struct job *first = u->jobs, *last = first;
		int n = 1;
		for (; n < (u->njobs + u->share - 1) / u->share && n < UNPACK_BATCH; n++)
			last = last->next;
		u->jobs = last->next;
		last->next = NULL;
		if (!u->jobs)
			u->jtail = NULL;
		u->njobs -= n;
		pthread_cond_signal(&u->room);
		pthread_mutex_unlock(&u->mu);
		for (struct job *j = first, *next; j; j = next) {
			next = j->next;
			if (__atomic_load_n(&u->err, __ATOMIC_RELAXED) >= 0)
				write_job(u, j);
			job_free(u, j);
		}
		pthread_mutex_lock(&u->mu);
	}
	pthread_mutex_unlock(&u->mu);
	if (u->ops->writer_end)
		u->ops->writer_end(u->ctx);
	return NULL;
}

/* The reader's batch to the writers: when it is full, when a writer waits,
 * or (force) at the end. Waits while the queue is full. */
static int hand_over(struct unpacker *u, int force)
{
	if (!u->nmine || (!force && u->nmine < UNPACK_BATCH &&
	                  !__atomic_load_n(&u->idle, __ATOMIC_RELAXED)))
		return 0;
	pthread_mutex_lock(&u->mu);
	while (u->njobs >= UNPACK_QUEUE && !u->err)
		pthread_cond_wait(&u->room, &u->mu);
	int err = u->err < 0 ? u->err : 0;
	if (!err) {
		if (u->jtail)
			u->jtail->next = u->mine;
		else
			u->jobs = u->mine;
		u->jtail = u->mtail;
		u->njobs += u->nmine;
		u->mine = u->mtail = NULL;
		u->nmine = 0;
		if (u->idle)
			pthread_cond_broadcast(&u->jcv);
	}
	pthread_mutex_unlock(&u->mu);
	return err;
}

/* The reader's batch, dropped after an error. */
static void drop_mine(struct unpacker *u)
{
	while (u->mine) {
		struct job *j = u->mine;
		u->mine = j->next;
		job_free(u, j);
	}
	u->mtail = NULL;
	u->nmine = 0;
}

/* No more entries: the writers finish what is queued (or drop it after an
 * error) and end. */
static void stop_writers(struct unpacker *u)
{
	pthread_mutex_lock(&u->mu);
	u->jdone = 1;
	pthread_cond_broadcast(&u->jcv);
	pthread_mutex_unlock(&u->mu);
	for (int i = 0; i < u->nw; i++)
		pthread_join(u->wth[i], NULL);
}

/* libarchive could not read on: say so, unless a writer stopped the stream
 * (and said why) or it ends where the sender stopped. */
static int stream_damaged(struct unpacker *u, struct archive *a)
{
	pthread_mutex_lock(&u->mu);
	int err = u->err < 0 ? u->err : u->cut ? -ECONNRESET : 0;
	pthread_mutex_unlock(&u->mu);
	if (err < 0)
		return err;
	char shown[200];
	const char *why = sym_archive_error_string(a);
	return damaged(u, "the sender's archive of small files is damaged: %s",
	               log_path(shown, sizeof shown, why ? why : "unreadable"));
}

/* 32 lowercase hex digits, and nothing after them, into out. 0 or -1. */
static int hex_tag(const char *s, uint8_t out[SYNC_TAG_LEN])
{
	for (int k = 0; k < 2 * SYNC_TAG_LEN; k++) {
		int c = (unsigned char)s[k];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (v < 0)
			return -1;
		out[k / 2] = (uint8_t)(k % 2 ? out[k / 2] | v : v << 4);
	}
	return s[2 * SYNC_TAG_LEN] ? -1 : 0;
}

/* The reader: one entry into memory, queued for a writer. */
static int extract_entry(struct unpacker *u, struct archive *a, struct archive_entry *e)
{
	const char *name = sym_archive_entry_pathname(e);
	char *end, shown[200];
	uint8_t tag[SYNC_TAG_LEN];
	errno = 0;
	unsigned long long idx = name ? strtoull(name, &end, 10) : 0;
	if (!name || !*name || errno || *name < '0' || *name > '9' || *end != '.' ||
	    hex_tag(end + 1, tag) < 0)
		return damaged(u, "the sender's archive has an entry that is not named by a file "
		               "index and tag: '%s'", log_path(shown, sizeof shown, name ? name : ""));
	if (sym_archive_entry_filetype(e) != AE_IFREG)
		return damaged(u, "the sender's archive has an entry that is not a regular file: "
		               "'%s'", log_path(shown, sizeof shown, name));
	if (!sym_archive_entry_size_is_set(e) || sym_archive_entry_size(e) < 0 ||
	    (uint64_t)sym_archive_entry_size(e) > UNPACK_MAX_ENTRY)
		return damaged(u, "the sender's archive has an entry of %lld bytes for file %llu "
		               "(small files are under %llu bytes)", (long long)sym_archive_entry_size(e), idx,
		               (unsigned long long)UNPACK_MAX_ENTRY);
	struct job *j = calloc(1, sizeof *j);
	uint64_t size = (uint64_t)sym_archive_entry_size(e);
	if (!j)
		return -ENOMEM;
	j->idx = idx;
	j->size = size;
	memcpy(j->tag, tag, SYNC_TAG_LEN);
	j->ok = 1;
	uint8_t *copy = NULL;
	for (;;) {
		const void *blk;
		size_t len;
		la_int64_t off;
		int r = sym_archive_read_data_block(a, &blk, &len, &off);
		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK) {
			job_free(u, j);
			return stream_damaged(u, a);
		}
		/* sparse, out of order or longer than said: not ours */
		if ((uint64_t)off != j->len || len > size - j->len) {
			job_free(u, j);
			return damaged(u, "the sender's archive has a sparse or overlong entry for "
			               "file %llu", idx);
		}
		if (!len)
			continue;
		const struct held *h = u->inuse;
		const uint8_t *b = blk;
		if (len == size && h && b >= (const uint8_t *)h->m->data &&
		    b + len <= (const uint8_t *)h->m->data + h->m->len) {
			/* the whole entry in the reader's message: shared, not copied */
			__atomic_add_fetch(&u->inuse->refs, 1, __ATOMIC_RELAXED);
			j->in = u->inuse;
			j->data = b;
			j->len = len;
			continue;
		}
		if (!copy && !(j->data = copy = malloc(size))) {
			job_free(u, j);
			return -ENOMEM;
		}
		memcpy(copy + j->len, blk, len);
		j->len += len;
	}
	if (j->len != size) {   /* holes at the end: sparse */
		job_free(u, j);
		return damaged(u, "the sender's archive has a sparse or overlong entry for file %llu",
		               idx);
	}
	if (u->mtail)
		u->mtail->next = j;
	else
		u->mine = j;
	u->mtail = j;
	u->nmine++;
	return hand_over(u, 0);
}

static void *unpack_main(void *arg)
{
	struct unpacker *u = arg;
	struct archive *a = sym_archive_read_new();
	int rc = -ENOMEM;
	if (a) {
		sym_archive_read_support_format_tar(a);
		rc = sym_archive_read_open2(a, u, NULL, unpack_read, NULL, NULL) == ARCHIVE_OK
		     ? 0 : -EPROTO;
		struct archive_entry *e;
		int r;
		if (rc < 0)
			rc = stream_damaged(u, a);
		while (rc == 0 && (r = sym_archive_read_next_header(a, &e)) != ARCHIVE_EOF)
			rc = r == ARCHIVE_OK || r == ARCHIVE_WARN ? extract_entry(u, a, e)
			     : stream_damaged(u, a);
		sym_archive_read_free(a);
	}
	/* the entries read whole are written, also when the stream was cut */
	if (rc == 0 || rc == -ECONNRESET) {
		int hrc = hand_over(u, 1);
		rc = rc ? rc : hrc;
	}
	drop_mine(u);
	if (u->inuse) {
		held_put(u, u->inuse);
		u->inuse = NULL;
	}
	stop_writers(u);
	pthread_mutex_lock(&u->mu);
	if (rc < 0 && !u->err)
		__atomic_store_n(&u->err, rc, __ATOMIC_RELAXED);
	/* from here on, whatever still comes is released at once */
	while (u->held) {
		struct held *h = u->held;
		u->held = h->next;
		release(u, h->m);
		free(h);
	}
	if (!u->err)
		__atomic_store_n(&u->err, 1, __ATOMIC_RELAXED);   /* done: later pushes are dropped */
	pthread_mutex_unlock(&u->mu);
	return NULL;
}

int unpacker_start(struct unpacker **out, struct tp_session *ts,
                   const uint8_t key[SYNC_AKEY_LEN], const struct unpack_ops *ops, void *ctx)
{
	if (larchive_load() < 0)
		return -ENOSYS;   /* said */
	struct unpacker *u = calloc(1, sizeof *u);
	if (!u)
		return -ENOMEM;
	memcpy(u->key, key, SYNC_AKEY_LEN);
	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->cv, NULL);
	pthread_cond_init(&u->jcv, NULL);
	pthread_cond_init(&u->room, NULL);
	u->ts = ts;
	u->ops = ops;
	u->ctx = ctx;
	/* two per core: a writer waiting for the disk (the metadata of a cold
	 * tree, the block bitmaps a replaced file's blocks go back to) leaves
	 * its core to another (500 files replaced in a cold 50,000-file tree:
	 * 0.18-0.21 s with two writers, 0.12-0.13 s with four; a full copy of
	 * it no slower, 2.70-2.82 s against 2.73-3.31 s; eight made it slower) */
	u->share = 2 * io_pool_threads(1);
	if (u->share > UNPACK_WRITERS_MAX)
		u->share = UNPACK_WRITERS_MAX;
	for (; u->nw < u->share; u->nw++)
		if (pthread_create(&u->wth[u->nw], NULL, writer_main, u))
			break;
	if (!u->nw || pthread_create(&u->th, NULL, unpack_main, u)) {
		stop_writers(u);
		explicit_bzero(u->key, sizeof u->key);
		free(u);
		return -EAGAIN;
	}
	*out = u;
	return 0;
}

int unpacker_error(struct unpacker *u)
{
	pthread_mutex_lock(&u->mu);
	int err = u->err < 0 ? u->err : 0;
	pthread_mutex_unlock(&u->mu);
	return err;
}

void unpacker_abandon(struct unpacker *u)
{
	pthread_mutex_lock(&u->mu);
	u->cut = 1;   /* the reader stops where the hole begins, quietly */
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
}

int unpacker_finish(struct unpacker *u)
{
	pthread_mutex_lock(&u->mu);
	u->eof = 1;
	pthread_cond_broadcast(&u->cv);
	pthread_mutex_unlock(&u->mu);
	pthread_join(u->th, NULL);
	int rc = u->err == 1 ? 0 : u->err;
	pthread_cond_destroy(&u->cv);
	pthread_cond_destroy(&u->jcv);
	pthread_cond_destroy(&u->room);
	pthread_mutex_destroy(&u->mu);
	explicit_bzero(u->key, sizeof u->key);
	free(u);
	return rc;
}
