/*
 * The receiver's data phase: one transport session from the sender. Large
 * files come as chunks, each checked here and handed to I/O threads that
 * hash it against the sender's chunk digest and write it at its offset into
 * the file's temp file, several chunks at once; small files
 * come inside one archive stream, which the unpacker (pack.c) writes on its
 * own threads. A file is landed (land.c) when all of it is in and verified.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/io.h"
#include "common/iopool.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/recv/recv_int.h"

/* Chunk k (want bytes) as message m of kind: well formed? 0, or the
 * rejection. *mask: which blocks a SPARSE message holds. */
static int check_kind(struct rstate *s, const struct rfile *f, const struct tp_msg *m,
                      unsigned kind, uint64_t k, uint64_t want, const char *shown,
                      uint64_t *mask)
{
	if (kind == SYNC_MSG_BLOCKS && f->failed)
		return 0;   /* its map is gone; what comes is dropped */
	if (kind == SYNC_MSG_BLOCKS) {   /* the same layout as SPARSE's */
		uint64_t all = want > 63 * (uint64_t)SYNC_BLOCK_SIZE ? ~UINT64_C(0)
		               : (UINT64_C(1) << ((want + SYNC_BLOCK_SIZE - 1) / SYNC_BLOCK_SIZE)) - 1;
		if (!f->map.how || f->map.how[k] != CH_BLOCKS)
			return recv_reject(s, "the sender sent chunk %llu of '%s' by blocks, which "
			                   "was not asked for", (unsigned long long)k, shown);
		if (sparse_check(m->data, m->len, want, mask) < 0 ||
		    (all & ~*mask & ~f->bhave[k]))
			return recv_reject(s, "the sender sent chunk %llu of '%s' by blocks that do "
			                   "not add up (%u bytes, or blocks we do not have left out)",
			                   (unsigned long long)k, shown, m->len);
		return 0;
	}
	if (kind == SYNC_MSG_SPARSE && (s->r->flags & SYNC_F_SPARSE)) {
		if (sparse_check(m->data, m->len, want, mask) < 0)
			return recv_reject(s, "the sender sent chunk %llu of '%s' as a sparse "
			                   "message whose blocks do not add up (%u bytes)",
			                   (unsigned long long)k, shown, m->len);
		return 0;
	}
	if (kind == SYNC_MSG_ASREAD) {   /* whole, then its tag */
		if (m->len != want + SYNC_TAG_LEN)
			return recv_reject(s, "the sender sent chunk %llu of '%s' as read with %u "
			                   "bytes, not %llu", (unsigned long long)k, shown, m->len,
			                   (unsigned long long)(want + SYNC_TAG_LEN));
		return 0;
	}
	if (kind != SYNC_MSG_WHOLE)
		return recv_reject(s, "the sender sent chunk %llu of '%s' as a message of "
		                   "unknown kind %u", (unsigned long long)k, shown, kind);
	if (m->len != want)
		return recv_reject(s, "the sender sent chunk %llu of '%s' with %u bytes, not %llu",
		                   (unsigned long long)k, shown, m->len, (unsigned long long)want);
	return 0;
}

/* The verified chunk (data, len bytes; a SPARSE message's blocks) into f
 * at off. 0 or -errno. */
static int write_chunk(const struct rfile *f, const uint8_t *data, uint32_t len, unsigned kind,
                       uint64_t off, uint64_t want, uint64_t mask)
{
	if (kind == SYNC_MSG_SPARSE)   /* a file that held data there: punched */
		return sparse_write(f->fd, data, off, want, mask, f->inplace || f->resume);
	return io_pwrite_full(f->fd, data, len, off);
}

/* Which planned file and chunk message m is for: *i, and its offset
 * (without the kind). 0, 1 for a chunk another host of a fan-out asked for
 * (--relay: dropped here), or the rejection. shown: the file's path. */
static int find_chunk(struct rstate *s, const struct tp_msg *m, size_t *i, uint64_t *off,
                      char shown[300])
{
	if (m->id <= s->shift || m->id - s->shift > s->sm.n)
		return recv_reject(s, "the sender sent data for file id %llu, which its file list "
		                   "does not have", (unsigned long long)m->id);
	*i = (size_t)(m->id - 1 - s->shift);
	const struct idx_entry *e = &s->sm.e[*i];
	log_path(shown, 300, e->path);
	if (s->fetch[*i] < 0 && s->r->o->relay)
		return 1;   /* for another host of the fan-out: forwarded, not ours */
	if (s->fetch[*i] < 0)
		return recv_reject(s, "the sender sent a chunk of '%s', which was not asked for",
		                   shown);
	const struct rfile *f = &s->files[s->fetch[*i]];
	/* small files come only in the archive (whose writer threads own them) */
	if (e->size < SYNC_SMALL)
		return recv_reject(s, "the sender sent a chunk of the small file '%s' (small "
		                   "files come in the archive)", shown);
	*off = m->off & SYNC_OFF_MASK;
	if (*off >= e->size || *off % IDX_CHUNK_SIZE)
		return recv_reject(s, "the sender sent a chunk of '%s' at offset %llu, %s", shown,
		                   (unsigned long long)*off, *off >= e->size ? "past its end"
		                   : "not on a chunk boundary");
	/* The chunk's number indexes this file's maps: checked against each
	 * map's own length, not only against the size they were made for. */
	uint64_t k = *off / IDX_CHUNK_SIZE;
	if ((f->seen && k >= f->nseen) || (f->map.how && k >= f->map.n))
		return recv_reject(s, "the sender sent chunk %llu of '%s', past its %u chunks",
		                   (unsigned long long)k, shown, chunk_count(e->size));
	/* a fan-out's chunk this host has, or of a file it has all of (its map
	 * is gone): another host's */
	if (s->r->o->relay && ((f->map.how && f->map.how[k] == CH_HAVE) ||
	                       f->done || f->failed))
		return 1;
	if (f->map.how && f->map.how[k] == CH_HAVE)
		return recv_reject(s, "the sender sent chunk %llu of '%s', which was not asked "
		                   "for (DST has it)", (unsigned long long)(*off / IDX_CHUNK_SIZE),
		                   shown);
	return 0;
}

/* A chunk on its way to the disk: verified against the sender's digest,
 * then written. WHOLE and SPARSE chunks go to the I/O threads, several at
 * once; a BLOCKS chunk is rebuilt and written on the receiving thread,
 * which owns the scratch buffer it is rebuilt in. */
struct cjob {
	struct io_job j;
	struct rstate *s;
	struct tp_session *ts;   /* NULL: m is the caller's (fuzz) */
	struct tp_msg *m;
	size_t i;                /* sm index */
	unsigned kind;
	uint32_t k;              /* chunk */
	uint64_t off, want, mask;
	const uint8_t *data;     /* what is verified and written */
	uint32_t len;
	int bad;                 /* its digest did not match */
	uint8_t asread[IDX_HASH_LEN];   /* an ASREAD chunk's digest, vouched
	                                   for by its tag: the chunk's now */
};

/* f failed: left as it was. Its temp goes once no chunk of it is on its
 * way to the disk (under s->mu). */
static void fail_file(struct rfile *f)
{
	f->failed = 1;
	if (!f->inflight)
		recv_drop_file(f);
}

/* Writes into one file take turns here rather than on its inode's lock,
 * where the kernel spins (measured: 6% of both cores on a 4 GiB tmpfs
 * copy); the digests are still made in parallel. By file, striped. */
#define WRITE_LOCKS 16
static pthread_mutex_t write_mu[WRITE_LOCKS] = {
	[0 ... WRITE_LOCKS - 1] = PTHREAD_MUTEX_INITIALIZER
};

/* Verify c, then write it (any thread, without s->mu: the file's fd stays
 * open while a chunk of it is in flight). */
static void chunk_io(struct io_job *j)
{
	struct cjob *c = (struct cjob *)j;
	const struct rfile *f = &c->s->files[c->s->fetch[c->i]];
	uint8_t h[IDX_HASH_LEN];
	if (c->kind == SYNC_MSG_SPARSE)
		sparse_hash(c->data, c->want, c->mask, h);
	else
		idx_hash_buf(c->data, c->len, h);
	j->err = 0;
	if (c->kind == SYNC_MSG_ASREAD) {
		/* the bytes as the sender read them (the file changed since its
		 * scan): the tag, not the manifest, says they are what it sent */
		uint8_t tag[SYNC_TAG_LEN];
		chunk_tag(c->s->akey, c->m->id, c->m->off, h, tag);
		c->bad = !cr_equal(tag, c->data + c->len, SYNC_TAG_LEN);
		memcpy(c->asread, h, IDX_HASH_LEN);
	} else {
		c->bad = memcmp(h, chunk_digest(&c->s->sm.e[c->i], c->k), IDX_HASH_LEN) != 0;
	}
	if (!c->bad) {
		pthread_mutex_t *mu = &write_mu[(size_t)c->s->fetch[c->i] % WRITE_LOCKS];
		pthread_mutex_lock(mu);
		j->err = -write_chunk(f, c->data, c->len, c->kind, c->off, c->want, c->mask);
		pthread_mutex_unlock(mu);
	}
}

/* Note manifest index i for CTL_RETRY (under s->mu). 0 or -ENOMEM. */
static int mismatch_add(struct rstate *s, uint32_t i)
{
	if (s->nmismatch == s->capmismatch) {
		uint32_t cap = s->capmismatch ? 2 * s->capmismatch : 16;
		uint32_t *v = realloc(s->mismatch, cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		s->mismatch = v;
		s->capmismatch = cap;
	}
	s->mismatch[s->nmismatch++] = i + s->shift;
	return 0;
}

/* c is verified and written, or not: count it, land its file when it was
 * the last. Under s->mu. */
static void chunk_end(struct cjob *c)
{
	struct rstate *s = c->s;
	const struct idx_entry *e = &s->sm.e[c->i];
	struct rfile *f = &s->files[s->fetch[c->i]];
	char shown[300];
	f->inflight--;
	if (f->failed) {
		/* another chunk of it failed meanwhile: already said */
	} else if (c->bad && c->kind != SYNC_MSG_ASREAD && s->r->o && s->r->o->take_rounds &&
	           !f->inplace &&
	           !s->r->o->relay && mismatch_add(s, c->i) == 0) {
		/* changed as it was sent: the client sends it again, as it then
		 * is, in a round of its own (CTL_RETRY); its temp goes */
		fail_file(f);
	} else if (c->bad) {
		/* in place, the chunks written before it (or on their way now)
		 * are in DST's file */
		log_err("%s: chunk %u does not match %s; %s",
		        log_path(shown, sizeof shown, e->path), c->k,
		        c->kind == SYNC_MSG_ASREAD ? "the tag it came with (damaged or altered in "
		        "transit)" : "the sender's hash: the file changed while it was sent, or "
		        "was damaged in transit", recv_left_as(f, f->got || f->inflight));
		STAT_ADD(s->res->errors, 1);
		fail_file(f);
	} else if (c->j.err) {
		recv_fail(s, e->path, "write failed", c->j.err);
		if (c->j.err == ENOSPC || c->j.err == EDQUOT)   /* the run stops */
			__atomic_store_n(&s->werr, c->j.err, __ATOMIC_RELAXED);
		fail_file(f);
	} else {
		STAT_ADD(s->res->bytes, c->kind == SYNC_MSG_WHOLE ? c->m->len
		         : c->kind == SYNC_MSG_ASREAD ? c->len : c->m->len - 8);
		if (c->kind == SYNC_MSG_ASREAD) {
			/* its digest from now on, for the file's hash and DST's index
			 * (only this chunk's verifier reads this slot) */
			memcpy((uint8_t *)chunk_digest(e, c->k), c->asread, IDX_HASH_LEN);
			f->asread = 1;
		}
		if (f->ops && f->ops->verified)
			f->ops->verified(s, f, c->k, chunk_digest(e, c->k));
		if (++f->got == f->need && f->asread && e->nchunks)   /* its hash anew */
			idx_hash_combine(e->chunks, e->nchunks, (uint8_t *)e->hash);
		if (f->got == f->need)
			recv_finish_file(s, c->i, f);
	}
	if (f->failed && !f->inflight)
		recv_drop_file(f);
}

/* On the I/O thread, once chunk_io() is done: its buffer goes back to the
 * transport. */
static void chunk_done(struct io_job *j, void *ctx)
{
	struct cjob *c = ctx;
	pthread_mutex_lock(&c->s->mu);
	chunk_end(c);
	pthread_mutex_unlock(&c->s->mu);
	if (c->ts)
		tp_msg_release(c->ts, c->m);
	free(c);
	(void)j;
}

/* Message m, a chunk: checked, then (*out) a job for the I/O threads that
 * owns m from now on, or NULL when it was taken here or dropped. 0, or an
 * error (-EPROTO: rejected, said). Under s->mu. */
static int take_chunk(struct rstate *s, struct tp_session *ts, struct tp_msg *m,
                      struct cjob **out)
{
	char shown[300];
	size_t i = 0;
	uint64_t off = 0;
	*out = NULL;
	int found = find_chunk(s, m, &i, &off, shown);
	if (found)
		return found < 0 ? -EPROTO : 0;
	const struct idx_entry *e = &s->sm.e[i];
	struct rfile *f = &s->files[s->fetch[i]];
	struct cjob c = { .s = s, .ts = ts, .m = m, .i = i, .kind = SYNC_MSG_KIND(m->off),
	                  .k = (uint32_t)(off / IDX_CHUNK_SIZE), .off = off,
	                  .data = m->data, .len = m->len };
	c.want = e->size - off < IDX_CHUNK_SIZE ? e->size - off : IDX_CHUNK_SIZE;
	if (check_kind(s, f, m, c.kind, c.k, c.want, shown, &c.mask) < 0)
		return -EPROTO;
	if (c.kind == SYNC_MSG_ASREAD && e->hlink)   /* its links keep the list's hash */
		return recv_reject(s, "the sender sent chunk %u of '%s', a hard link, as read",
		                   c.k, shown);
	if (c.kind == SYNC_MSG_ASREAD)
		c.len = (uint32_t)c.want;   /* the tag follows */
	/* every chunk came (or this one did), or a one-chunk file's only chunk
	 * came and failed: a chunk of a file that failed later is still news */
	if (f->done || f->taken >= f->need || (f->seen && f->seen[c.k]) ||
	    (!e->nchunks && f->failed))
		return s->gap ? 0   /* a re-linked stream may repeat what came before */
		       : recv_reject(s, "the sender sent chunk %u of '%s' twice", c.k, shown);
	f->taken++;
	if (f->seen)
		f->seen[c.k] = 1;
	if (f->failed)
		return 0;
	if (c.kind == SYNC_MSG_BLOCKS) {   /* rebuilt with the old file's blocks */
		uint8_t *data;
		int rc = recv_blocks_chunk(s, f, e, c.k, m, c.mask, &data);
		if (rc < 0) {
			fail_file(f);
			return rc == -ENOMEM ? rc : 0;
		}
		c.data = data;
		c.len = (uint32_t)c.want;
	}
	if (f->fd < 0 && recv_open_temp(s, e, f) < 0) {
		fail_file(f);
		return 0;
	}
	f->inflight++;
	if (c.kind == SYNC_MSG_BLOCKS) {   /* its data is the scratch buffer's */
		chunk_io(&c.j);
		chunk_end(&c);
		return c.j.err == ENOSPC || c.j.err == EDQUOT ? -c.j.err : 0;
	}
	if (!(*out = malloc(sizeof c))) {
		f->inflight--;
		return -ENOMEM;
	}
	**out = c;
	(*out)->j = (struct io_job){ .work = chunk_io, .complete = chunk_done, .ctx = *out };
	return 0;
}

/* Each small-file writer thread's own directory cache, lent to the files
 * it makes, which do not close it: a dup() and a close() per file less than
 * the shared cache (recv_open_parent_cached()) costs. */
static __thread struct recv_dircache wdir = { NULL, -1 };

static void unpack_writer_end(void *ctx)
{
	(void)ctx;
	recv_dircache_free(&wdir);
}

/* The unpacker's side: small files out of the archive stream. */
static int unpack_open(void *ctx, uint64_t index, uint64_t size)
{
	struct rstate *s = ctx;
	char shown[300];
	if (index < s->shift || index - s->shift >= s->sm.n)
		return recv_reject(s, "the sender's archive has an entry for file %llu, which its "
		                   "file list does not have", (unsigned long long)index);
	size_t i = (size_t)(index - s->shift);
	const struct idx_entry *e = &s->sm.e[i];
	if (s->fetch[i] < 0 && s->r->o->relay)
		return -1;   /* for another host of the fan-out */
	if (s->fetch[i] < 0)
		return recv_reject(s, "the sender's archive has an entry for '%s', which was not "
		                   "asked for", log_path(shown, sizeof shown, e->path));
	if (e->size >= SYNC_SMALL)
		return recv_reject(s, "the sender's archive has an entry for the large file '%s' "
		                   "(large files come in chunks)", log_path(shown, sizeof shown, e->path));
	if (e->size != size)
		return recv_reject(s, "the sender's archive has %llu bytes for '%s', which has "
		                   "%llu", (unsigned long long)size, log_path(shown, sizeof shown, e->path),
		                   (unsigned long long)e->size);
	struct rfile *f = &s->files[s->fetch[i]];
	/* claimed once, by one writer: the file is then this thread's alone */
	if (__atomic_exchange_n(&f->claimed, 1, __ATOMIC_ACQ_REL))
		return recv_reject(s, "the sender's archive has '%s' twice",
		                   log_path(shown, sizeof shown, e->path));   /* -EPROTO */
	if (__atomic_load_n(&f->failed, __ATOMIC_ACQUIRE))
		return -1;   /* it failed before */
	f->dirfd = recv_dircache_get(&wdir, s->root, e->path);
	f->dir_lent = f->dirfd >= 0;
	if (f->dirfd < 0) {
		recv_fail(s, e->path, "cannot open its directory", errno);
		f->failed = 1;
		return -1;
	}
	if (recv_create_temp(s, e, f) < 0) {
		f->failed = 1;
		recv_drop_file(f);
		return -1;
	}
	return f->fd;
}

static int unpack_close(void *ctx, uint64_t index, int err, const uint8_t *hash, uint64_t got)
{
	struct rstate *s = ctx;
	size_t i = (size_t)(index - s->shift);
	const struct idx_entry *e = &s->sm.e[i];
	struct rfile *f = &s->files[s->fetch[i]];
	char shown[4096];
	/* the file is this writer's alone since unpack_open() claimed it */
	int nohash = (e->flags & IDX_F_NOHASH) != 0;
	if (!err && (nohash || !memcmp(hash, e->hash, IDX_HASH_LEN))) {
		STAT_ADD(s->res->bytes, got);
		f->got = f->need;
		recv_finish_file(s, i, f);
		return 0;
	}
	f->failed = 1;
	recv_drop_file(f);
	if (err && err != EPROTO && err != EBADMSG) {
		recv_fail(s, e->path, "cannot write", err);   /* a full disk: said once */
		return err == ENOSPC || err == EDQUOT ? -err : 0;
	}
	/* (a malformed entry or a bad tag is found before it is written; a
	 * hash that does not match, only after) */
	log_err("%s: %s; %s", log_path(shown, sizeof shown, e->path),
	        err == EPROTO ? "came malformed in the stream of small files"
	        : err ? "does not match the tag it came with (damaged or altered in transit)"
	              : "does not match the sender's hash (changed while sent, or "
	                "damaged in transit)", recv_left_as(f, !err));
	STAT_ADD(s->res->errors, 1);
	return 0;
}

static void unpack_damaged(void *ctx, const char *msg)
{
	recv_reject(ctx, "%s", msg);
}

static const struct unpack_ops unpack_ops = { unpack_open, unpack_close, unpack_damaged,
                                              unpack_writer_end };

/* Wait on l for the sender's session, in waits of 500 ms (at most
 * `waits`, or --timeout's limit), but not for a sender that gave up: it
 * says so (or vanishes) on the control channel. rejoining: the sender may
 * have ended meanwhile (its SENT is kept for read_sent(); anything else
 * ends the wait, without a line).
 * 0 with *ts, or an error. */
static int wait_sender(struct rstate *s, struct tp_listener *l, int waits,
                       int rejoining, struct tp_session **ts)
{
	struct role *r = s->r;
	int rc = 0;
	for (int waited = 0; rc == 0; waited++) {
		rc = tp_accept(l, 500, ts);
		if (rc != -ETIMEDOUT)
			break;
		uint8_t type;
		size_t n;
		int got = ctl_poll(r->ctl, &type, &n);
		if (got != 0) {   /* a frame now, or the channel closed */
			rc = got < 0 ? got : 0;
			if (rc == 0 && rejoining && type == CTL_SENT && n == sizeof s->early_sent &&
			    !s->has_early_sent) {
				/* the sender is done, the host stepping over is not: kept */
				memcpy(s->early_sent, r->ctl->buf, n);
				s->has_early_sent = 1;
				rc = waited < waits ? 0 : -ETIMEDOUT;
				continue;
			}
			if (rc == 0 && type == CTL_ERROR)
				s->res->code = sync_peer_error(r->ctl, n, "the sender gave up: ");
			else if (rc == 0 && !rejoining)
				rc = recv_reject(s, "the sender sent a message of type %u instead of "
				                 "connecting", type);
			rc = rc == -EPROTO ? rc : -ECONNABORTED;
			break;
		}
		if (r->timeout > 0 && ctl_idle_ms(r->ctl) >= (long long)r->timeout * 1000)
			rc = -ETIME;
		else
			rc = waited < waits ? 0 : -ETIMEDOUT;
	}
	return rc;
}

/* Listen for the sender's data connection on a port the kernel picks, tell
 * the sender where and the secret (fresh per run), and wait for it, but not
 * for a sender that gave up: it says so (or vanishes) on the control
 * channel. 0 with *ts, or an error. */
static int accept_sender(struct rstate *s, struct tp_session **ts)
{
	struct role *r = s->r;
	struct tp_listener *l;
	struct tp_opts o = r->tp;
	char key[33];
	uint8_t raw[16];
	if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
		return -EIO;
	for (int i = 0; i < 16; i++)
		snprintf(key + 2 * i, 3, "%02x", raw[i]);
	tp_key_derive(key, 32, o.key);
	o.msg_size = SYNC_MSG_SIZE;
	o.pool_size = SYNC_POOL_SIZE;
	o.io_timeout_ms = r->timeout * 1000;
	o.peer_addr = r->allow_addr;
	int rc = tp_listen(r->listen_addr, 0, &o, &l);
	if (rc < 0)
		return rc;
	/* port, secret, and the address to use */
	size_t alen = strlen(r->announce_addr);
	uint8_t msg[2 + 32 + 256];
	put_u16(msg, tp_listener_port(l));
	memcpy(msg + 2, key, 32);
	memcpy(msg + 34, r->announce_addr, alen > 255 ? 255 : alen);
	rc = recv_ctl_send(s, CTL_DATA, msg, 34 + (alen > 255 ? 255 : alen));
	explicit_bzero(key, sizeof key);
	if (rc == 0)
		rc = relay_begin(s);   /* --relay: where the next host listens */
	if (rc == 0)
		rc = wait_sender(s, l, 60, 0, ts);   /* 30 s in all */
	if (rc == 0 && tee_rejoinable(s->tee))
		s->standby = l;   /* a host two before us may come instead (relay.c) */
	else
		tp_listener_free(l);
	return rc;
}

/* Our feed broke (rc) and the host two before us may step over the one
 * that failed (relay.c): its session in place of the broken one, within
 * 10 s. 0 with *ts (the broken one is kept in s->old_ts, for the messages
 * still held), or rc. */
static int rejoin(struct rstate *s, int rc, struct tp_session **ts)
{
	struct tp_session *nts;
	struct tp_listener *l = s->standby;
	s->standby = NULL;   /* once */
	int got = wait_sender(s, l, 20, 1, &nts);
	tp_listener_free(l);
	if (got < 0)
		return rc;
	log_err("the host before this one stopped sending (%s); the data comes on from the "
	        "one before it, and what was lost on the way is sent again later",
	        strerror(-rc));
	s->old_ts = *ts;
	*ts = nts;
	return 0;
}

/* A fan-out host (--relay) that fails on its own side (its disk is full)
 * still forwards what comes, for the hosts after it: 1 (rc kept in
 * s->relay_err) while it has a next host; else 0, stop. */
static int relay_on(struct rstate *s, int rc)
{
	if (!tee_forwarding(s->tee) || rc == -EPROTO)
		return 0;
	s->relay_err = rc;
	return 1;
}

/* The stream lost data on its way (a fan-out's host before us died): an
 * archive not yet whole is dropped, and so is the rest of it (it cannot
 * be read across a hole); the hosts after us hear it first. */
static void mark_gap(struct rstate *s, struct unpacker *up)
{
	if (s->gap)
		return;
	s->gap = 1;
	tee_gap(s->tee);
	if (up)
		unpacker_abandon(up);   /* (nothing, if it had ended) */
}

/* Every message until the end of the stream: chunks taken here, the
 * archive's handed to the unpacker. 1 at the clean end, or an error.
 * *ts: the session, which a re-link replaces. */
static int take_all(struct rstate *s, struct tp_session **tsp, struct progress *pg)
{
	struct unpacker *up = NULL;
	struct io_pool *io = NULL;   /* the chunks' verifying and writing threads */
	struct tp_session *ts = *tsp;
	int rc;
	for (;;) {
		struct tp_msg *m;
		rc = tp_msg_recv(ts, &m);
		if (rc == -EPROTO)
			recv_reject(s, "the sender's data connection broke the protocol (a message "
			            "over 4 MiB, a bad header, or a miscounted end)");
		if (rc < 0 && rc != -EPROTO && s->standby && rejoin(s, rc, tsp) == 0) {
			ts = *tsp;   /* --relay: the host two before us stepped over */
			mark_gap(s, up);
			continue;
		}
		if (rc != 0)
			break;
		if (m->id == SYNC_GAP_ID && s->r->o->relay) {
			mark_gap(s, up);   /* forwards the mark */
			tp_msg_release(ts, m);
			continue;
		}
		if (m->id == SYNC_ROUND_END_ID && s->r->keep && tp_streams(ts) == 1 && !m->len) {
			tp_msg_release(ts, m);   /* --watch: the round's end; the session */
			s->round_end = 1;        /* stays for the next round */
			rc = 1;
			break;
		}
		tee_forward(s->tee, m);   /* --relay: the next host's copy first */
		if (s->relay_err || (m->id == SYNC_ARCHIVE_ID && s->gap)) {
			tp_msg_release(ts, m);   /* we failed, or it is not whole: only forwarding */
			continue;
		}
		if (m->id == SYNC_ARCHIVE_ID) {
			if (!up && (rc = unpacker_start(&up, ts, s->akey, &unpack_ops, s)) < 0) {
				tp_msg_release(ts, m);
				if (relay_on(s, rc))
					continue;   /* no libarchive here: the next hosts get it */
				break;
			}
			unpacker_push(up, m);   /* it releases m */
			if ((rc = unpacker_error(up)) < 0 && !relay_on(s, rc))
				break;   /* the disk is full: stop, the sender hears why */
			progress_update(pg, s->res->bytes, s->res->files, 0);
			continue;
		}
		struct cjob *c;
		pthread_mutex_lock(&s->mu);
		rc = take_chunk(s, ts, m, &c);
		pthread_mutex_unlock(&s->mu);
		if (c && !io && (rc = io_pool_start(&io, io_pool_threads(tp_streams(ts)))) < 0) {
			free(c);
			c = NULL;
		}
		if (c)
			io_pool_submit(io, &c->j);   /* it releases m */
		else
			tp_msg_release(ts, m);
		progress_update(pg, s->res->bytes, s->res->files, 0);
		int werr = __atomic_load_n(&s->werr, __ATOMIC_RELAXED);
		if (rc >= 0 && werr)
			rc = -werr;   /* the disk is full: stop, the sender hears why */
		if (rc < 0 && !relay_on(s, rc))
			break;
	}
	/* stopped before the stream's end (a full disk, a rejection, a lost
	 * connection): the archive's reader stops where it is, quietly; the
	 * rest of the archive never came, which is not the sender's damage */
	if (rc < 0 && up)
		unpacker_abandon(up);
	io_pool_stop(io);   /* every chunk on its way is written and counted */
	int werr = __atomic_load_n(&s->werr, __ATOMIC_RELAXED);
	if (rc >= 0 && werr && !s->relay_err && !relay_on(s, -werr))
		rc = -werr;   /* (a write that failed after the last message came) */
	if (up) {
		int urc = unpacker_finish(up);
		if (urc == -ECONNRESET && s->gap)
			urc = 0;   /* dropped after a gap: its files count as incomplete */
		if (urc < 0 && rc >= 0 && !s->relay_err && !relay_on(s, urc))
			rc = urc;
	}
	return rc;
}

/* Our feed is over (clean: it ended whole): it is closed, with the one a
 * re-link replaced, and then the next host's stream (--relay) ends, after
 * our sender has our verdict. A feed lost for good is marked as a gap
 * first and the next host's stream still ends cleanly, so that it
 * finishes with what it has rather than wait for a re-link no one makes. */
static void end_feed(struct rstate *s, struct tp_session *ts, int clean)
{
	tp_close(ts);
	tp_close(s->old_ts);
	s->old_ts = NULL;
	tp_listener_free(s->standby);
	s->standby = NULL;
	if (!clean && tee_forwarding(s->tee)) {
		tee_gap(s->tee);
		clean = 1;
	}
	tee_close(s->tee, clean);
	s->tee = NULL;
}

/* The stream ended cleanly: a file it did not complete is left as it was
 * (in place: with what of it was written; DST's index keeps no row of it).
 * The sender says in CTL_SENT how many it could not send (and why, on its
 * side); recv.c counts any beyond that as errors. */
static void drop_incomplete(struct rstate *s, const uint32_t *want, uint32_t nwant)
{
	for (uint32_t k = 0; k < nwant; k++) {
		struct rfile *f = &s->files[s->fetch[want[k]]];
		if (f->done || f->failed)
			continue;
		s->incomplete++;
		recv_drop_file(f);
	}
}

int recv_take(struct rstate *s, const uint32_t *want, uint32_t nwant)
{
	struct tp_session *ts = NULL;
	int rc;
	if (s->r->keep && *s->r->keep && clock_ms() - s->r->keep_ms > SYNC_KEEP_IDLE_MS) {
		tp_close(*s->r->keep);   /* idle too long to trust (a NAT may have */
		*s->r->keep = NULL;      /* dropped it): the sender gets a new one */
	}
	if (s->r->keep && *s->r->keep) {
		/* --watch: the session of the round before goes on (DATA of a port
		 * 0 alone says so); it is ours again, or closed, after this round */
		uint8_t again[2] = { 0, 0 };
		ts = *s->r->keep;
		*s->r->keep = NULL;
		rc = recv_ctl_send(s, CTL_DATA, again, sizeof again);
	} else {
		rc = accept_sender(s, &ts);
	}
	int lrc = relay_linked(s);   /* --relay: our next host, whether we have a sender or not */
	if (rc == 0 && lrc < 0)
		rc = lrc;
	if (rc < 0) {
		end_feed(s, ts, 0);
		return rc;
	}
	s->res->bytes = 0;
	s->res->transport = tp_kind_name(ts);
	struct progress pg;
	uint64_t total = 0;
	for (uint32_t k = 0; k < nwant; k++)
		total += chunk_map_bytes(&s->files[s->fetch[want[k]]].map, s->sm.e[want[k]].size);
	progress_start(&pg, s->r, total, nwant);
	rc = take_all(s, &ts, &pg);
	int clean = rc == 1;   /* the whole stream came (and went on) */
	progress_update(&pg, s->res->bytes, s->res->files, 1);
	if (s->round_end) {
		/* the stream reached its round's end: kept for the next round, no
		 * verdict (a write that failed after it is this round's error,
		 * in DONE) */
		drop_incomplete(s, want, nwant);
		*s->r->keep = ts;
		ts = NULL;
		s->r->keep_ms = clock_ms();
		rc = rc == 1 ? 0 : rc;
	} else if (rc == 1) {
		/* a fan-out host that failed on its side took the stream for the
		 * next one: its sender hears all is well, the client why not */
		rc = s->relay_err;
		drop_incomplete(s, want, nwant);
		tp_verdict(ts, 0);
	} else if (rc == -ENOSPC || rc == -EPROTO) {
		tp_verdict(ts, -rc);
	}
	end_feed(s, ts, clean);
	return rc;
}

int recv_fuzz_chunk(struct rstate *s, struct tp_msg *m)
{
	struct cjob *c;
	pthread_mutex_lock(&s->mu);
	int rc = take_chunk(s, NULL, m, &c);
	pthread_mutex_unlock(&s->mu);
	if (c) {   /* as an I/O thread would */
		chunk_io(&c->j);
		chunk_done(&c->j, c);
		rc = __atomic_load_n(&s->werr, __ATOMIC_RELAXED);
		rc = rc ? -rc : 0;
	}
	return rc;
}

int recv_fuzz_archive(struct rstate *s, const uint8_t *stream, size_t len)
{
	enum { PIECE = 16 << 10 };   /* several messages, as on the wire */
	size_t nm = len / PIECE + 1;
	struct tp_msg *m = calloc(nm, sizeof *m);
	struct unpacker *up;
	int rc = m ? unpacker_start(&up, NULL, s->akey, &unpack_ops, s) : -ENOMEM;
	if (rc < 0) {
		free(m);
		return rc;
	}
	for (size_t k = 0; k < nm; k++) {
		size_t off = k * PIECE, n = len - off < PIECE ? len - off : PIECE;
		m[k] = (struct tp_msg){ .data = (void *)(stream + off), .len = (uint32_t)n,
		                        .cap = (uint32_t)n, .id = SYNC_ARCHIVE_ID, .off = off };
		unpacker_push(up, &m[k]);
	}
	rc = unpacker_finish(up);
	free(m);
	return rc;
}
