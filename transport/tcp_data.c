/*
 * TCP backend, the data path: framing (header + payload per message) and the
 * session. One thread per stream moves bytes so that the caller's disk
 * I/O overlaps the wire: on the sender a writer per stream (sendmsg of header
 * + payload, MSG_NOSIGNAL) and a monitor on stream 0 that catches the
 * receiver's verdict, early or late; on the receiver a reader per stream.
 * Connections are made and authenticated in tcp_conn.c.
 *
 * The I/O timeout (tp_opts.io_timeout_ms): every byte a stream thread moves,
 * and every buffer the receiver's consumer gives back, is progress
 * (last_io); a caller waiting in get, recv or finish while nothing has
 * moved for that long gets -ETIME, and the session is dead from then on.
 *
 * An encrypted session (tp_opts.encrypt) seals every DATA, END and VERDICT
 * on the stream's own thread (seal.c): in place in the pool buffer, the
 * header authenticated with it, the tag sent after the payload. So the
 * streams seal and open in parallel, and nothing is copied. The tag's
 * bytes count as progress like the rest.
 *
 * Each receiving stream may hold at most `quota` buffers. Messages of one
 * stream arrive in increasing offset order, so a consumer that reorders by
 * offset always finds the buffer it waits for: the stream that carries it
 * has released everything it delivered before it.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/tcp_int.h"

struct tcp_stream {
	/* sealed sessions: [0] sender to receiver (DATA, END), [1] receiver to
	 * sender (VERDICT, stream 0 only); each used by one thread */
	struct tp_seal seal[2];
	int fd;
	pthread_t th;
	int th_live;
	int qhead, qtail, qlen;    /* sender: buffers to write */
	int used;                  /* receiver: buffers held from this stream */
	uint64_t msgs, bytes;
	int done;                  /* sender: END written; receiver: END read */
};

struct tcp {
	struct tcp_stream st[TP_MAX_STREAMS];
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int free_head;
	int ready_head, ready_tail;
	int ended;                 /* receiver: streams that ended cleanly */
	int err;                   /* first error, negative errno */
	int ending;                /* sender: tp_finish() asked for END */
	int quota;
	pthread_t mon;
	int mon_live;
	int mon_done;              /* the monitor has its verdict, or its error */
	int verdict_seen;
	int verdict;               /* receiver's status */
	int io_ms;                 /* the I/O timeout; 0: none */
	int64_t last_io;           /* clock_ms() of the last progress (atomic) */
	int sealed;                /* every message is sealed (seal[] is set) */
	struct tp_session *s;
};

#define OVERSLEPT_MS 500   /* a timed wait this late: we were not running */

static struct tcp *T(struct tp_session *s) { return s->be; }

static void set_err(struct tcp *t, int err)
{
	if (!t->err)
		t->err = err;
	pthread_cond_broadcast(&t->cv);
}

/* Something moved: bytes on the wire, or a buffer given back. */
static void touch(struct tcp *t)
{
	if (t && t->io_ms)
		__atomic_store_n(&t->last_io, clock_ms(), __ATOMIC_RELAXED);
}

/*
 * Wait on t->cv (t->mu held) unless nothing has moved for the I/O timeout;
 * *since: when the caller began to wait (the time before is not ours to
 * count). 0, or -ETIME once the timeout has passed, which also ends the
 * session. A wait that returns far later than asked means this process did
 * not run (SIGSTOP, a suspended machine): its threads get a fresh period to
 * catch up with what arrived meanwhile, rather than a timeout at once.
 */
static int wait_io(struct tcp *t, int64_t *since)
{
	if (!t->io_ms) {
		pthread_cond_wait(&t->cv, &t->mu);
		return 0;
	}
	int64_t last = __atomic_load_n(&t->last_io, __ATOMIC_RELAXED);
	int64_t due = (last > *since ? last : *since) + t->io_ms;
	if (clock_ms() >= due) {
		set_err(t, -ETIME);
		return -ETIME;
	}
	struct timespec ts = { (time_t)(due / 1000), (long)(due % 1000) * 1000000 };
	pthread_cond_timedwait(&t->cv, &t->mu, &ts);
	int64_t now = clock_ms();
	if (now > due + OVERSLEPT_MS)
		*since = now;
	return 0;
}

/* --- framing: a message is its header, then its payload --- */

/* Read len bytes; each read is progress for t (may be NULL). A receive
 * timeout (SO_RCVTIMEO, during the handshake) is a timeout. */
static int read_io(struct tcp *t, int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		if (n == 0)
			return -ECONNRESET;
		touch(t);
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_full(int fd, void *buf, size_t len)
{
	return read_io(NULL, fd, buf, len);
}

static int sock_err(int err)
{
	return err == EPIPE ? -ECONNRESET : err == EAGAIN ? -ETIMEDOUT : -err;
}

/* Header, payload (len may be 0) and, when sealed, the tag (else NULL), in
 * one sendmsg (or more; flags: MSG_MORE when more of it follows); each is
 * progress for t (may be NULL). */
static int send_io_f(struct tcp *t, int fd, const void *hdr, const void *payload, size_t len,
                     const uint8_t *tag, int flags)
{
	struct iovec iov[3] = { { (void *)hdr, TP_HDR_LEN } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 1 };
	if (len)
		iov[mh.msg_iovlen++] = (struct iovec){ (void *)payload, len };
	if (tag)
		iov[mh.msg_iovlen++] = (struct iovec){ (void *)tag, TP_TAG_LEN };
	while (mh.msg_iovlen) {
		ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | flags);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sock_err(errno);
		touch(t);
		while (n > 0 && mh.msg_iovlen) {
			size_t take = (size_t)n < mh.msg_iov->iov_len ? (size_t)n : mh.msg_iov->iov_len;
			mh.msg_iov->iov_base = (uint8_t *)mh.msg_iov->iov_base + take;
			mh.msg_iov->iov_len -= take;
			n -= (ssize_t)take;
			if (mh.msg_iov->iov_len == 0) {
				mh.msg_iov++;
				mh.msg_iovlen--;
			}
		}
	}
	return 0;
}

static int send_io(struct tcp *t, int fd, const void *hdr, const void *payload, size_t len,
                   const uint8_t *tag)
{
	return send_io_f(t, fd, hdr, payload, len, tag, 0);
}

/* The header, then len bytes of file `in` at off straight from its page
 * cache (sendfile). A file that shrank or cannot be read is made up with
 * zeros: the framing holds and the receiver's digest check fails that
 * file alone. 0 or a socket error. */
static int send_file_io(struct tcp *t, int fd, const void *hdr, int in, uint64_t off,
                        size_t len)
{
	static const uint8_t zeros[64 << 10];
	int rc = send_io_f(t, fd, hdr, NULL, 0, NULL, MSG_MORE);
	int readable = 1;
	while (rc == 0 && len) {
		size_t want = len < sizeof zeros ? len : sizeof zeros;
		off_t o = (off_t)off;
		ssize_t n = readable ? sendfile(fd, in, &o, len) : send(fd, zeros, want, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && readable && errno != EPIPE && errno != EAGAIN && errno != ECONNRESET &&
		    errno != ENOTCONN && errno != ETIMEDOUT) {
			readable = 0;   /* the file's error (EIO...), not the socket's */
			continue;
		}
		if (n < 0)
			return sock_err(errno);
		if (n == 0) {
			readable = 0;   /* end of file: it shrank */
			continue;
		}
		touch(t);
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return rc;
}

/* One control message: header + len bytes of payload. */
int tp_tcp_send_ctl(int fd, uint8_t type, uint64_t id, uint64_t off,
                    const void *payload, uint32_t len)
{
	uint8_t h[TP_HDR_LEN];
	tp_hdr_put(h, &(struct tp_hdr){ .type = type, .len = len, .id = id, .off = off });
	return send_io(NULL, fd, h, payload, len, NULL);
}

/* END or VERDICT (no payload), sealed with k unless k is NULL; progress for t. */
static int send_end(struct tcp *t, int fd, struct tp_seal *k, uint8_t type, uint64_t id,
                    uint64_t off)
{
	uint8_t h[TP_HDR_LEN], tag[TP_TAG_LEN];
	tp_hdr_put(h, &(struct tp_hdr){ .type = type, .id = id, .off = off });
	if (k)
		tp_seal(k, h, NULL, 0, tag);
	return send_io(t, fd, h, NULL, 0, k ? tag : NULL);
}

/* Read the tag after a sealed message (what, from `from`; progress for t)
 * and open it in place: 0, a read error, or -EPROTO after saying it failed
 * authentication. */
static int open_msg(struct tcp *t, int fd, struct tp_seal *k, const uint8_t *hdr, uint8_t *p,
                    uint32_t len, const char *what, const char *from)
{
	uint8_t tag[TP_TAG_LEN];
	int rc = read_io(t, fd, tag, sizeof tag);
	if (rc < 0)
		return rc;
	if (tp_unseal(k, hdr, p, len, tag) < 0) {
		log_err("%s failed authentication (tampered with, or not from the %s): "
		        "stream %u, message %llu", what, from, (unsigned)k->stream,
		        (unsigned long long)k->seq);
		return -EPROTO;
	}
	return 0;
}

/* Read one control message (header + small payload). */
int tp_tcp_read_ctl(int fd, struct tp_hdr *h, uint8_t *payload)
{
	uint8_t hb[TP_HDR_LEN];
	int rc = read_full(fd, hb, sizeof hb);
	if (rc < 0)
		return rc;
	if (tp_hdr_get(hb, h) < 0 || h->type == TP_DATA || h->len > TP_CTRL_MAX)
		return -EPROTO;
	return h->len ? read_full(fd, payload, h->len) : 0;
}

/* Receive and send timeouts (SO_RCVTIMEO, SO_SNDTIMEO) in ms; 0: none. */
void tp_tcp_set_timeout(int fd, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* --- the session --- */

static int list_pop(struct tp_session *s, int *head, int *tail)
{
	int i = *head;
	if (i >= 0) {
		*head = s->bufs[i].next;
		if (tail && *head < 0)
			*tail = -1;
	}
	return i;
}

static void list_push(struct tp_session *s, int *head, int *tail, int i)
{
	s->bufs[i].next = -1;
	if (!tail) {
		s->bufs[i].next = *head;
		*head = i;
	} else if (*tail < 0) {
		*head = *tail = i;
	} else {
		s->bufs[*tail].next = i;
		*tail = i;
	}
}

struct thr_arg {
	struct tcp *t;
	int i;
};

static void *writer_main(void *arg)
{
	struct thr_arg *a = arg;
	struct tcp *t = a->t;
	struct tp_session *s = t->s;
	struct tcp_stream *st = &t->st[a->i];
	free(a);
	pthread_mutex_lock(&t->mu);
	for (;;) {
		while (st->qhead < 0 && !t->ending && !t->err)
			pthread_cond_wait(&t->cv, &t->mu);
		if (t->err) {   /* nothing more goes out: the queued files close */
			for (int i = st->qhead; i >= 0; i = s->bufs[i].next)
				tp_buf_drop_file(&s->bufs[i]);
			break;
		}
		int i = list_pop(s, &st->qhead, &st->qtail);
		if (i < 0) {   /* ending and nothing queued: END */
			uint64_t msgs = st->msgs, bytes = st->bytes;
			pthread_mutex_unlock(&t->mu);
			int rc = send_end(t, st->fd, t->sealed ? &st->seal[0] : NULL, TP_END, msgs, bytes);
			pthread_mutex_lock(&t->mu);
			if (rc < 0)
				set_err(t, rc);
			st->done = 1;
			pthread_cond_broadcast(&t->cv);
			break;
		}
		st->qlen--;
		pthread_mutex_unlock(&t->mu);
		struct tp_buf *b = &s->bufs[i];
		uint8_t tag[TP_TAG_LEN];
		if (t->sealed)   /* here, so that the streams seal in parallel */
			tp_seal(&st->seal[0], b->hdr, b->m.data, b->m.len, tag);
		int rc = b->m.file_fd >= 0
		         ? send_file_io(t, st->fd, b->hdr, b->m.file_fd, b->m.file_off, b->m.len)
		         : send_io(t, st->fd, b->hdr, b->m.data, b->m.len, t->sealed ? tag : NULL);
		tp_buf_drop_file(b);
		pthread_mutex_lock(&t->mu);
		if (rc < 0)
			set_err(t, rc);
		st->msgs++;
		st->bytes += b->m.len;
		list_push(s, &t->free_head, NULL, i);
		pthread_cond_broadcast(&t->cv);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

/* Sender: wait for the receiver's verdict on stream 0, whenever it comes. */
static void *monitor_main(void *arg)
{
	struct tcp *t = arg;
	struct tp_hdr h;
	uint8_t hb[TP_HDR_LEN];
	int fd = t->st[0].fd;
	int rc = read_io(t, fd, hb, sizeof hb);
	if (rc == 0 && (tp_hdr_get(hb, &h) < 0 || h.type != TP_VERDICT))
		rc = -EPROTO;   /* a verdict has no payload: tp_hdr_get() checked */
	if (rc == 0 && t->sealed)
		rc = open_msg(t, fd, &t->st[0].seal[1], hb, NULL, 0, "the receiver's verdict",
		              "receiver");
	pthread_mutex_lock(&t->mu);
	if (rc == 0 && h.id < 4096) {
		t->verdict_seen = 1;
		t->verdict = (int)h.id;
		t->s->peer_status = (int)h.id;
		if (h.id)
			set_err(t, -(int)h.id);
	} else if (rc == 0) {
		set_err(t, -EPROTO);
	} else if (!t->verdict_seen) {
		set_err(t, rc);
	}
	t->mon_done = 1;
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

/* Sender: the connection broke while the receiver's verdict may be on its
 * way (a receiver that stopped on its side says why, then closes): give
 * the monitor up to 1 s to read it, so that the caller can say why rather
 * than "went away". t->mu held. */
static void await_verdict(struct tcp *t)
{
	int64_t due = clock_ms() + 1000;
	while (t->mon_live && !t->mon_done && (t->err == -EPIPE || t->err == -ECONNRESET) &&
	       clock_ms() < due) {
		struct timespec ts = { (time_t)(due / 1000), (long)(due % 1000) * 1000000 };
		pthread_cond_timedwait(&t->cv, &t->mu, &ts);
	}
}

static void *reader_main(void *arg)
{
	struct thr_arg *a = arg;
	struct tcp *t = a->t;
	struct tp_session *s = t->s;
	int idx = a->i;
	struct tcp_stream *st = &t->st[idx];
	free(a);
	for (;;) {
		uint8_t hb[TP_HDR_LEN];
		struct tp_hdr h;
		int rc = read_io(t, st->fd, hb, sizeof hb);
		if (rc == 0 && tp_hdr_get(hb, &h) < 0)
			rc = -EPROTO;
		if (rc == 0 && h.type == TP_END) {
			if (t->sealed)
				rc = open_msg(t, st->fd, &st->seal[0], hb, NULL, 0, "the end of a stream",
				              "sender");
			if (rc == 0 && (h.id != st->msgs || h.off != st->bytes))
				rc = -EPROTO;   /* lost or extra messages: cannot happen on TCP */
			pthread_mutex_lock(&t->mu);
			if (rc < 0)
				set_err(t, rc);
			else
				t->ended++;
			st->done = 1;
			pthread_cond_broadcast(&t->cv);
			pthread_mutex_unlock(&t->mu);
			return NULL;
		}
		if (rc == 0 && (h.type != TP_DATA || h.len > s->msg_size))
			rc = -EPROTO;
		if (rc < 0) {
			pthread_mutex_lock(&t->mu);
			set_err(t, rc);
			pthread_mutex_unlock(&t->mu);
			return NULL;
		}
		pthread_mutex_lock(&t->mu);
		while ((st->used >= t->quota || t->free_head < 0) && !t->err)
			pthread_cond_wait(&t->cv, &t->mu);
		if (t->err) {
			pthread_mutex_unlock(&t->mu);
			return NULL;
		}
		int i = list_pop(s, &t->free_head, NULL);
		st->used++;
		pthread_mutex_unlock(&t->mu);
		struct tp_buf *b = &s->bufs[i];
		rc = read_io(t, st->fd, b->m.data, h.len);
		if (rc == 0 && t->sealed)
			rc = open_msg(t, st->fd, &st->seal[0], hb, b->m.data, h.len, "a data message",
			              "sender");
		b->m.len = h.len;
		b->m.id = h.id;
		b->m.off = h.off;
		b->m.stream = idx;
		b->owner = idx;
		st->msgs++;
		st->bytes += h.len;
		pthread_mutex_lock(&t->mu);
		if (rc < 0) {
			set_err(t, rc);
			pthread_mutex_unlock(&t->mu);
			return NULL;
		}
		list_push(s, &t->ready_head, &t->ready_tail, i);
		pthread_cond_broadcast(&t->cv);
		pthread_mutex_unlock(&t->mu);
	}
}

static int tcp_get(struct tp_session *s, struct tp_buf **out)
{
	struct tcp *t = T(s);
	int64_t since = clock_ms();
	pthread_mutex_lock(&t->mu);
	while (t->free_head < 0 && !t->err)
		wait_io(t, &since);
	if (t->err)
		await_verdict(t);
	int rc = t->err;
	if (!rc)
		*out = &s->bufs[list_pop(s, &t->free_head, NULL)];
	pthread_mutex_unlock(&t->mu);
	return rc;
}

static void tcp_put(struct tp_session *s, struct tp_buf *b)
{
	struct tcp *t = T(s);
	pthread_mutex_lock(&t->mu);
	list_push(s, &t->free_head, NULL, (int)(b - s->bufs));
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

static int tcp_send(struct tp_session *s, struct tp_buf *b)
{
	struct tcp *t = T(s);
	pthread_mutex_lock(&t->mu);
	if (t->err)
		await_verdict(t);
	int rc = t->err;
	if (rc) {
		tp_buf_drop_file(b);
		list_push(s, &t->free_head, NULL, (int)(b - s->bufs));
		pthread_mutex_unlock(&t->mu);
		return rc;
	}
	int best = 0;   /* the stream with the shortest queue */
	for (int i = 1; i < s->nstreams; i++)
		if (t->st[i].qlen < t->st[best].qlen)
			best = i;
	list_push(s, &t->st[best].qhead, &t->st[best].qtail, (int)(b - s->bufs));
	t->st[best].qlen++;
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
	return 0;
}

static int tcp_finish(struct tp_session *s)
{
	struct tcp *t = T(s);
	pthread_mutex_lock(&t->mu);
	t->ending = 1;
	pthread_cond_broadcast(&t->cv);
	/* the verdict comes after every END; an early one is an error */
	int64_t since = clock_ms();
	while (!t->verdict_seen && !t->err)
		wait_io(t, &since);
	if (t->err)
		await_verdict(t);
	int rc = t->err ? t->err : -t->verdict;
	pthread_mutex_unlock(&t->mu);
	return rc;
}

static int tcp_recv(struct tp_session *s, struct tp_buf **out)
{
	struct tcp *t = T(s);
	int64_t since = clock_ms();
	pthread_mutex_lock(&t->mu);
	while (t->ready_head < 0 && t->ended < s->nstreams && !t->err)
		wait_io(t, &since);
	int rc;
	if (t->err)
		rc = t->err;
	else if (t->ready_head >= 0) {
		*out = &s->bufs[list_pop(s, &t->ready_head, &t->ready_tail)];
		rc = 0;
	} else
		rc = 1;
	pthread_mutex_unlock(&t->mu);
	return rc;
}

static void tcp_release(struct tp_session *s, struct tp_buf *b)
{
	struct tcp *t = T(s);
	pthread_mutex_lock(&t->mu);
	touch(t);
	t->st[b->owner].used--;
	list_push(s, &t->free_head, NULL, (int)(b - s->bufs));
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

static int tcp_verdict(struct tp_session *s, int status)
{
	struct tcp *t = T(s);
	int rc = send_end(t, t->st[0].fd, t->sealed ? &t->st[0].seal[1] : NULL, TP_VERDICT,
	                  (uint64_t)status, 0);
	if (status) {
		/* Stop the readers; let the sender read the verdict before our
		 * close would reset the connection under it. */
		pthread_mutex_lock(&t->mu);
		set_err(t, -ECANCELED);
		pthread_mutex_unlock(&t->mu);
		for (int i = 0; i < s->nstreams; i++)
			shutdown(t->st[i].fd, SHUT_WR);
		/* until the sender, which stops once it has the verdict, closes;
		 * at most 2 s: a count of reads would end sooner when much is
		 * still on its way, and our close would then reset the
		 * connection, the verdict unread (its sender saw "went away") */
		struct pollfd p = { t->st[0].fd, POLLIN, 0 };
		char junk[65536];
		int64_t end = clock_ms() + 2000;
		for (int64_t left; (left = end - clock_ms()) > 0 && poll(&p, 1, (int)left) >= 0;)
			if ((p.revents & POLLIN) && read(t->st[0].fd, junk, sizeof junk) <= 0)
				break;
	}
	return rc;
}

static void tcp_close(struct tp_session *s)
{
	struct tcp *t = T(s);
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	set_err(t, -ECANCELED);
	pthread_mutex_unlock(&t->mu);
	for (int i = 0; i < s->nstreams; i++)
		if (t->st[i].fd >= 0)
			shutdown(t->st[i].fd, SHUT_RDWR);
	for (int i = 0; i < s->nstreams; i++)
		if (t->st[i].th_live)
			pthread_join(t->st[i].th, NULL);
	if (t->mon_live)
		pthread_join(t->mon, NULL);
	for (int i = 0; i < s->nstreams; i++)
		if (t->st[i].fd >= 0)
			close(t->st[i].fd);
	for (int i = 0; i < TP_MAX_STREAMS; i++) {
		tp_seal_wipe(&t->st[i].seal[0]);
		tp_seal_wipe(&t->st[i].seal[1]);
	}
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
	s->be = NULL;
}

static const struct tp_ops tcp_ops = {
	.name = "tcp",
	.files = 1,
	.send = tcp_send, .get = tcp_get, .put = tcp_put, .finish = tcp_finish,
	.recv = tcp_recv, .release = tcp_release, .verdict = tcp_verdict,
	.close = tcp_close,
};

/* Make the session for fds[0..n) and start its threads. */
int tp_tcp_session(const int *fds, const struct tp_hs *hs, int n, int sender,
                   uint32_t msg_size, const struct tp_opts *o, struct tp_session **out)
{
	struct tp_session *s = calloc(1, sizeof *s);
	struct tcp *t = calloc(1, sizeof *t);
	if (!s || !t) {
		free(s);
		free(t);
		return -ENOMEM;
	}
	s->ops = &tcp_ops;
	s->be = t;
	s->nstreams = n;
	s->verbose = o->verbose;
	s->io_timeout_ms = o->io_timeout_ms > 0 ? o->io_timeout_ms : 0;
	t->s = s;
	t->io_ms = s->io_timeout_ms;
	t->last_io = clock_ms();
	pthread_mutex_init(&t->mu, NULL);
	pthread_condattr_t ca;   /* timed waits on the monotonic clock */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
	t->free_head = t->ready_head = t->ready_tail = -1;
	for (int i = 0; i < TP_MAX_STREAMS; i++) {
		t->st[i].fd = i < n ? fds[i] : -1;
		t->st[i].qhead = t->st[i].qtail = -1;
	}
	/* the handshake checked that every stream agrees with our setting */
	s->cipher = hs[0].a.cipher;
	t->sealed = s->cipher != TP_CIPHER_NONE;
	for (int i = 0; i < n && t->sealed; i++) {
		tp_seal_init(&t->st[i].seal[0], o->key, &hs[i], TP_DIR_S2R);
		tp_seal_init(&t->st[i].seal[1], o->key, &hs[i], TP_DIR_R2S);
	}
	int nbufs = tp_pool_count(o, n, msg_size);
	int rc = tp_pool_init(s, nbufs, msg_size);
	if (rc < 0)
		goto fail;
	for (int i = nbufs - 1; i >= 0; i--)
		list_push(s, &t->free_head, NULL, i);
	t->quota = nbufs / n;
	for (int i = 0; i < n; i++) {
		tp_tcp_set_timeout(fds[i], 0);
		struct thr_arg *a = malloc(sizeof *a);
		if (!a) {
			rc = -ENOMEM;
			goto fail;
		}
		*a = (struct thr_arg){ t, i };
		if (pthread_create(&t->st[i].th, NULL, sender ? writer_main : reader_main, a)) {
			free(a);
			rc = -EAGAIN;
			goto fail;
		}
		t->st[i].th_live = 1;
	}
	if (sender) {
		if (pthread_create(&t->mon, NULL, monitor_main, t)) {
			rc = -EAGAIN;
			goto fail;
		}
		t->mon_live = 1;
	}
	*out = s;
	return 0;
fail:
	tcp_close(s);   /* closes the fds too */
	tp_pool_free(s);
	free(s);
	return rc;
}
