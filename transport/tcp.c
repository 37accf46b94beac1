/*
 * TCP backend. One thread per stream moves bytes so that the caller's disk
 * I/O overlaps the wire: on the sender a writer per stream (sendmsg of header
 * + payload, MSG_NOSIGNAL) and a monitor on stream 0 that catches the
 * receiver's verdict, early or late; on the receiver a reader per stream.
 *
 * Each receiving stream may hold at most `quota` buffers. Messages of one
 * stream arrive in increasing offset order, so a consumer that reorders by
 * offset always finds the buffer it waits for: the stream that carries it
 * has released everything it delivered before it.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "common/log.h"
#include "transport/tp_int.h"

#define HS_TIMEOUT_MS 5000
#define SOCK_BUF      (4 << 20)

struct tcp_stream {
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
	int verdict_seen;
	int verdict;               /* receiver's status */
	struct tp_session *s;
};

static struct tcp *T(struct tp_session *s) { return s->be; }

static void set_err(struct tcp *t, int err)
{
	if (!t->err)
		t->err = err;
	pthread_cond_broadcast(&t->cv);
}

/* --- plain I/O helpers --- */

/* A receive timeout (SO_RCVTIMEO, during the handshake) is a timeout. */
static int read_full(int fd, void *buf, size_t len)
{
	int rc = io_read_full(fd, buf, len);
	return rc == -EAGAIN ? -ETIMEDOUT : rc;
}

static int send_full(int fd, const void *hdr, const void *payload, size_t len)
{
	struct iovec iov[2] = { { (void *)hdr, TP_HDR_LEN }, { (void *)payload, len } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
	while (mh.msg_iovlen) {
		ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EPIPE ? -ECONNRESET : -errno;
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

static int send_ctl(int fd, uint8_t type, uint64_t id, uint64_t off,
                    const void *payload, uint32_t len)
{
	uint8_t h[TP_HDR_LEN];
	tp_hdr_put(h, &(struct tp_hdr){ .type = type, .len = len, .id = id, .off = off });
	return send_full(fd, h, payload, len);
}

/* Read one control message (header + small payload). */
static int read_ctl(int fd, struct tp_hdr *h, uint8_t *payload)
{
	uint8_t hb[TP_HDR_LEN];
	int rc = read_full(fd, hb, sizeof hb);
	if (rc < 0)
		return rc;
	if (tp_hdr_get(hb, h) < 0 || h->type == TP_DATA || h->len > TP_CTRL_MAX)
		return -EPROTO;
	return h->len ? read_full(fd, payload, h->len) : 0;
}

static void set_timeout(int fd, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

static void tune(int fd)
{
	int one = 1, buf = SOCK_BUF;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
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
		if (t->err)
			break;
		int i = list_pop(s, &st->qhead, &st->qtail);
		if (i < 0) {   /* ending and nothing queued: END */
			uint64_t msgs = st->msgs, bytes = st->bytes;
			pthread_mutex_unlock(&t->mu);
			int rc = send_ctl(st->fd, TP_END, msgs, bytes, NULL, 0);
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
		int rc = send_full(st->fd, b->hdr, b->m.data, b->m.len);
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
	uint8_t p[TP_CTRL_MAX];
	int rc = read_ctl(t->st[0].fd, &h, p);
	pthread_mutex_lock(&t->mu);
	if (rc == 0 && h.type == TP_VERDICT && h.id < 4096) {
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
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
	return NULL;
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
		int rc = read_full(st->fd, hb, sizeof hb);
		if (rc == 0 && tp_hdr_get(hb, &h) < 0)
			rc = -EPROTO;
		if (rc == 0 && h.type == TP_END) {
			if (h.id != st->msgs || h.off != st->bytes)
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
		rc = read_full(st->fd, b->m.data, h.len);
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
	pthread_mutex_lock(&t->mu);
	while (t->free_head < 0 && !t->err)
		pthread_cond_wait(&t->cv, &t->mu);
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
	int rc = t->err;
	if (rc) {
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
	while (!t->verdict_seen && !t->err)
		pthread_cond_wait(&t->cv, &t->mu);
	int rc = t->err ? t->err : -t->verdict;
	pthread_mutex_unlock(&t->mu);
	return rc;
}

static int tcp_recv(struct tp_session *s, struct tp_buf **out)
{
	struct tcp *t = T(s);
	pthread_mutex_lock(&t->mu);
	while (t->ready_head < 0 && t->ended < s->nstreams && !t->err)
		pthread_cond_wait(&t->cv, &t->mu);
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
	t->st[b->owner].used--;
	list_push(s, &t->free_head, NULL, (int)(b - s->bufs));
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

static int tcp_verdict(struct tp_session *s, int status)
{
	struct tcp *t = T(s);
	int rc = send_ctl(t->st[0].fd, TP_VERDICT, (uint64_t)status, 0, NULL, 0);
	if (status) {
		/* Stop the readers; let the sender read the verdict before our
		 * close would reset the connection under it. */
		pthread_mutex_lock(&t->mu);
		set_err(t, -ECANCELED);
		pthread_mutex_unlock(&t->mu);
		for (int i = 0; i < s->nstreams; i++)
			shutdown(t->st[i].fd, SHUT_WR);
		struct pollfd p = { t->st[0].fd, POLLIN, 0 };
		char junk[65536];
		for (int k = 0; k < 200 && poll(&p, 1, 10) >= 0; k++)
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
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
	s->be = NULL;
}

static const struct tp_ops tcp_ops = {
	.name = "tcp",
	.send = tcp_send, .get = tcp_get, .put = tcp_put, .finish = tcp_finish,
	.recv = tcp_recv, .release = tcp_release, .verdict = tcp_verdict,
	.close = tcp_close,
};

/* Make the session for fds[0..n) and start its threads. */
static int tcp_session(const int *fds, int n, int sender, uint32_t msg_size,
                       const struct tp_opts *o, struct tp_session **out)
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
	t->s = s;
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	t->free_head = t->ready_head = t->ready_tail = -1;
	for (int i = 0; i < TP_MAX_STREAMS; i++) {
		t->st[i].fd = i < n ? fds[i] : -1;
		t->st[i].qhead = t->st[i].qtail = -1;
	}
	int nbufs = tp_pool_count(o, n, msg_size);
	int rc = tp_pool_init(s, nbufs, msg_size);
	if (rc < 0)
		goto fail;
	for (int i = nbufs - 1; i >= 0; i--)
		list_push(s, &t->free_head, NULL, i);
	t->quota = nbufs / n;
	for (int i = 0; i < n; i++) {
		set_timeout(fds[i], 0);
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

/* --- connection set-up --- */

int tp_tcp_listen(const char *addr, uint16_t port, int *out)
{
	char ps[8];
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
	                          .ai_flags = AI_PASSIVE }, *res, *ai;
	snprintf(ps, sizeof ps, "%u", port);
	if (!addr) {
		hints.ai_family = AF_INET6;   /* dual-stack: v4 and v6 in one socket */
	}
	int rc = getaddrinfo(addr, ps, &hints, &res);
	if (rc) {
		log_err("listen on %s port %u: %s", addr ? addr : "*", port, gai_strerror(rc));
		return -EINVAL;
	}
	int err = 0;
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		int one = 1, zero = 0;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (ai->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) {
			freeaddrinfo(res);
			*out = fd;
			return 0;
		}
		err = -errno;
		close(fd);
	}
	freeaddrinfo(res);
	log_err("listen on TCP port %u: %s", port, strerror(-err));
	return err;
}

static int wait_readable(int fd, int timeout_ms)
{
	struct pollfd p = { fd, POLLIN, 0 };
	int rc;
	do
		rc = poll(&p, 1, timeout_ms);
	while (rc < 0 && errno == EINTR);
	return rc < 0 ? -errno : rc == 0 ? -ETIMEDOUT : 0;
}

static void peer_name(int fd, char *buf, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	char h[NI_MAXHOST] = "?", p[NI_MAXSERV] = "?";
	if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
		getnameinfo((struct sockaddr *)&ss, len, h, sizeof h, p, sizeof p,
		            NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(buf, cap, "%s port %s", h, p);
}

/* Receiver half of the handshake on a fresh connection. */
static int server_handshake(int fd, const struct tp_opts *o, uint32_t msg_size,
                            struct tp_auth *a)
{
	struct tp_hello h;
	struct tp_hdr hd;
	uint8_t buf[TP_CTRL_MAX], ok[TP_MAC_LEN];
	tp_hs_hello(&h, msg_size, 0);
	tp_hello_put(buf, &h);
	set_timeout(fd, HS_TIMEOUT_MS);
	int rc = send_ctl(fd, TP_HELLO, 0, 0, buf, TP_HELLO_LEN);
	if (rc == 0)
		rc = read_ctl(fd, &hd, buf);
	if (rc == 0 && hd.type != TP_AUTH)
		rc = -EPROTO;
	if (rc == 0)
		rc = tp_hs_check(o->key, &h, buf, hd.len, a, ok);
	if (rc == -EACCES)
		send_ctl(fd, TP_AUTH_FAIL, 0, 0, NULL, 0);
	else if (rc == 0)
		rc = send_ctl(fd, TP_AUTH_OK, 0, 0, ok, TP_MAC_LEN);
	return rc;
}

int tp_tcp_accept(int lfd, const struct tp_opts *o, int timeout_ms,
                  struct tp_session **out)
{
	int fds[TP_MAX_STREAMS], have = 0, want = 0, rc = 0;
	uint64_t session = 0;
	uint32_t msg_size = o->msg_size ? o->msg_size : TP_DEF_MSG_SIZE;
	while (have == 0 || have < want) {
		/* after the first stream, the others must follow promptly */
		rc = wait_readable(lfd, have ? 10000 : timeout_ms);
		if (rc < 0)
			break;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		tune(fd);
		char who[NI_MAXHOST + 32];
		peer_name(fd, who, sizeof who);
		struct tp_auth a;
		rc = server_handshake(fd, o, msg_size, &a);
		if (rc < 0) {
			close(fd);
			if (rc == -EACCES) {
				log_err("rejected a connection from %s: it does not know the key", who);
				break;
			}
			log_warn("dropped a connection from %s: %s", who,
			         rc == -EPROTO ? "not an rdcp sender" : strerror(-rc));
			rc = 0;
			continue;
		}
		if (have == 0) {
			session = a.session;
			want = a.streams;
		} else if (a.session != session || a.streams != want || fds[a.index] >= 0) {
			log_warn("dropped a connection from %s: not part of this session", who);
			close(fd);
			continue;
		}
		if (have == 0)
			for (int i = 0; i < TP_MAX_STREAMS; i++)
				fds[i] = -1;
		fds[a.index] = fd;
		have++;
	}
	if (rc < 0 || have < want) {
		for (int i = 0; i < TP_MAX_STREAMS && have; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		return rc < 0 ? rc : -ETIMEDOUT;
	}
	struct tp_opts ro = *o;
	return tcp_session(fds, want, 0, msg_size, &ro, out);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Connect one stream, retrying while nobody listens (until deadline). */
static int connect_one(const char *host, uint16_t port, int64_t deadline, int *out)
{
	char ps[8];
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	snprintf(ps, sizeof ps, "%u", port);
	int g = getaddrinfo(host, ps, &hints, &res);
	if (g) {
		log_err("%s: %s", host, gai_strerror(g));
		return -EHOSTUNREACH;
	}
	int rc;
	for (;;) {
		rc = -ECONNREFUSED;
		for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
			int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
			if (fd < 0) {
				rc = -errno;
				continue;
			}
			tune(fd);
			if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
				freeaddrinfo(res);
				*out = fd;
				return 0;
			}
			rc = -errno;
			close(fd);
		}
		if ((rc != -ECONNREFUSED && rc != -ENETUNREACH) || now_ms() >= deadline)
			break;
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	freeaddrinfo(res);
	return rc;
}

int tp_tcp_connect(const char *host, uint16_t port, const struct tp_opts *o,
                   struct tp_session **out)
{
	int fds[TP_MAX_STREAMS], n = o->streams > 0 ? o->streams : 1, rc = 0, i;
	uint64_t session;
	uint32_t msg_size = o->msg_size ? o->msg_size : TP_DEF_MSG_SIZE;
	int64_t deadline = now_ms() + (o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000);
	tp_random(&session, sizeof session);
	for (i = 0; i < n; i++) {
		rc = connect_one(host, port, deadline, &fds[i]);
		if (rc < 0) {
			log_err("cannot connect to %s port %u: %s", host, port, strerror(-rc));
			break;
		}
		struct tp_hdr hd;
		struct tp_hello h;
		struct tp_auth a;
		uint8_t buf[TP_CTRL_MAX], ans[TP_AUTH_LEN];
		set_timeout(fds[i], HS_TIMEOUT_MS);
		rc = read_ctl(fds[i], &hd, buf);
		if (rc == 0 && hd.type != TP_HELLO)
			rc = -EPROTO;
		if (rc == 0)
			rc = tp_hs_answer(o->key, buf, hd.len, session, n, i, &h, &a, ans);
		if (rc == 0)
			rc = send_ctl(fds[i], TP_AUTH, 0, 0, ans, TP_AUTH_LEN);
		if (rc == 0)
			rc = read_ctl(fds[i], &hd, buf);
		if (rc == 0 && hd.type == TP_AUTH_FAIL)
			rc = -EACCES;
		else if (rc == 0 && hd.type != TP_AUTH_OK)
			rc = -EPROTO;
		if (rc == 0 && tp_hs_confirm(o->key, &h, &a, buf, hd.len) < 0)
			rc = -EACCES;
		if (rc == 0 && h.max_msg < msg_size)
			msg_size = h.max_msg;
		if (rc < 0) {
			if (rc == -EACCES)
				log_err("%s port %u: authentication failed: the two sides do not "
				        "have the same key", host, port);
			else if (rc == -ECONNRESET && i == 0)
				log_err("%s port %u: the receiver closed the connection during "
				        "the handshake (wrong key, or busy with another sender)", host, port);
			else
				log_err("%s port %u: handshake failed: %s", host, port,
				        rc == -EPROTO ? "the peer does not speak the rdcp protocol"
				                      : strerror(-rc));
			close(fds[i]);
			break;
		}
	}
	if (rc < 0) {
		while (i-- > 0)
			close(fds[i]);
		return rc;
	}
	return tcp_session(fds, n, 1, msg_size, o, out);
}
