/*
 * The receiver's data phase: one transport session from the sender. Large
 * files come as chunks, each hashed on arrival against the sender's chunk
 * digest and written at its offset into the file's temp file; small files
 * come inside one archive stream, which the unpacker (pack.c) writes on its
 * own threads. A file is landed (land.c) when all of it is in and verified.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/log.h"
#include "common/wire.h"
#include "sync/recv_int.h"

/* One message: a chunk of file (id - 1) at off. */
static int take_chunk(struct rstate *s, struct tp_msg *m)
{
	if (m->id <= s->shift || m->id - s->shift > s->sm.n || s->fetch[m->id - 1 - s->shift] < 0)
		return -EPROTO;
	size_t i = (size_t)(m->id - 1 - s->shift);
	const struct idx_entry *e = &s->sm.e[i];
	struct rfile *f = &s->files[s->fetch[i]];
	uint64_t k = m->off / IDX_CHUNK_SIZE;
	uint64_t want = e->size - m->off < IDX_CHUNK_SIZE ? e->size - m->off : IDX_CHUNK_SIZE;
	/* small files come only in the archive (whose writer threads own them) */
	if (e->size < SYNC_SMALL || m->off % IDX_CHUNK_SIZE || m->off >= e->size ||
	    m->len != want || k >= f->need)
		return -EPROTO;
	if (f->failed || f->done)
		return 0;
	if (f->seen && f->seen[k])
		return -EPROTO;   /* the same chunk twice */
	uint8_t h[IDX_HASH_LEN];
	idx_hash_buf(m->data, m->len, h);
	const uint8_t *expect = e->nchunks ? e->chunks + k * IDX_HASH_LEN : e->hash;
	if (memcmp(h, expect, IDX_HASH_LEN) != 0) {
		char shown[4096];
		log_err("%s: chunk %llu does not match the sender's hash: the file changed "
		        "while it was sent, or was damaged in transit; it is left as it was",
		        log_path(shown, sizeof shown, e->path), (unsigned long long)k);
		STAT_ADD(s->res->errors, 1);
		f->failed = 1;
		recv_drop_file(f);
		return 0;
	}
	if (f->fd < 0 && recv_open_temp(s, e, f) < 0) {
		f->failed = 1;
		recv_drop_file(f);
		return 0;
	}
	for (uint32_t done = 0; done < m->len;) {
		ssize_t n = pwrite(f->fd, (uint8_t *)m->data + done, m->len - done,
		                   (off_t)(m->off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			recv_fail(s, e->path, "write failed", n < 0 ? errno : EIO);
			f->failed = 1;
			recv_drop_file(f);
			return errno == ENOSPC ? -ENOSPC : 0;
		}
		done += (uint32_t)n;
	}
	if (f->seen)
		f->seen[k] = 1;
	STAT_ADD(s->res->bytes, m->len);
	if (++f->got == f->need)
		recv_finish_file(s, i, f);
	return 0;
}

/* The unpacker's side: small files out of the archive stream. */
static int unpack_open(void *ctx, uint64_t index, uint64_t size)
{
	struct rstate *s = ctx;
	if (index < s->shift || index - s->shift >= s->sm.n)
		return -EPROTO;
	size_t i = (size_t)(index - s->shift);
	const struct idx_entry *e = &s->sm.e[i];
	if (s->fetch[i] < 0 || e->size != size || size >= SYNC_SMALL || size == 0)
		return -EPROTO;
	struct rfile *f = &s->files[s->fetch[i]];
	int fd = -1;   /* stays -1 for a file that failed before */
	/* under the lock: claim the file and get its directory (a cache shared
	 * with the other writer); the file itself is made without it */
	pthread_mutex_lock(&s->mu);
	if (f->claimed) {
		fd = -EPROTO;   /* sent twice */
	} else if (!f->failed) {
		f->claimed = 1;
		f->dirfd = recv_open_parent_cached(s, e->path);
		fd = 0;
	}
	pthread_mutex_unlock(&s->mu);
	if (fd < 0)
		return fd;   /* -EPROTO, or -1: it failed before */
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
	if (!err && !memcmp(hash, e->hash, IDX_HASH_LEN)) {
		STAT_ADD(s->res->bytes, got);
		f->got = f->need;
		recv_finish_file(s, i, f);
		return 0;
	}
	f->failed = 1;
	recv_drop_file(f);
	if (err && err != EPROTO) {
		recv_fail(s, e->path, "cannot write", err);
		return err == ENOSPC || err == EDQUOT ? -err : 0;
	}
	log_err("%s: %s; it is left as it was", log_path(shown, sizeof shown, e->path),
	        err ? "came malformed in the stream of small files"
	            : "does not match the sender's hash (changed while sent, or "
	              "damaged in transit)");
	STAT_ADD(s->res->errors, 1);
	return 0;
}

static const struct unpack_ops unpack_ops = { unpack_open, unpack_close };

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
	int rc = tp_listen(NULL, 0, &o, &l);
	if (rc < 0)
		return rc;
	/* port, secret, and the address to use */
	size_t alen = strlen(r->announce_addr);
	uint8_t msg[2 + 32 + 256];
	put_u16(msg, tp_listener_port(l));
	memcpy(msg + 2, key, 32);
	memcpy(msg + 34, r->announce_addr, alen > 255 ? 255 : alen);
	rc = ctl_send(r->ctl, CTL_DATA, msg, 34 + (alen > 255 ? 255 : alen));
	explicit_bzero(key, sizeof key);
	for (int waited = 0; rc == 0; waited++) {
		rc = tp_accept(l, 500, ts);
		if (rc != -ETIMEDOUT)
			break;
		uint8_t type;
		size_t n;
		int got = ctl_poll(r->ctl, &type, &n);
		if (got != 0) {   /* a frame now, or the channel closed */
			if (got > 0 && type == CTL_ERROR && n >= 4) {
				log_err("the sender gave up: %s", (char *)r->ctl->buf + 4);
				s->res->code = get_u32(r->ctl->buf);
			}
			rc = -ECONNABORTED;
			break;
		}
		rc = waited < 60 ? 0 : -ETIMEDOUT;   /* 30 s in all */
	}
	tp_listener_free(l);
	return rc;
}

/* Every message until the end of the stream: chunks taken here, the
 * archive's handed to the unpacker. 1 at the clean end, or an error. */
static int take_all(struct rstate *s, struct tp_session *ts, struct progress *pg)
{
	struct unpacker *up = NULL;
	int rc;
	for (;;) {
		struct tp_msg *m;
		rc = tp_msg_recv(ts, &m);
		if (rc != 0)
			break;
		if (m->id == SYNC_ARCHIVE_ID) {
			if (!up && (rc = unpacker_start(&up, ts, &unpack_ops, s)) < 0) {
				tp_msg_release(ts, m);
				break;
			}
			unpacker_push(up, m);   /* it releases m */
			if ((rc = unpacker_error(up)) < 0)
				break;   /* the disk is full: stop, the sender hears why */
			continue;
		}
		pthread_mutex_lock(&s->mu);
		rc = take_chunk(s, m);
		pthread_mutex_unlock(&s->mu);
		tp_msg_release(ts, m);
		progress_update(pg, s->res->bytes, s->res->files, 0);
		if (rc < 0)
			break;
	}
	if (up) {
		int urc = unpacker_finish(up);
		if (urc < 0 && rc >= 0)
			rc = urc;
	}
	return rc;
}

/* The stream ended cleanly: a file it did not complete is left as it was.
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
	int rc = accept_sender(s, &ts);
	if (rc < 0)
		return rc;
	s->res->bytes = 0;
	s->res->transport = tp_kind_name(ts);
	struct progress pg;
	uint64_t total = 0;
	for (uint32_t k = 0; k < nwant; k++)
		total += s->sm.e[want[k]].size;
	progress_start(&pg, s->r->progress, total, nwant);
	rc = take_all(s, ts, &pg);
	progress_update(&pg, s->res->bytes, s->res->files, 1);
	if (rc == 1) {
		rc = 0;
		drop_incomplete(s, want, nwant);
		tp_verdict(ts, 0);
	} else if (rc == -ENOSPC || rc == -EPROTO) {
		tp_verdict(ts, -rc);
	}
	tp_close(ts);
	return rc;
}
