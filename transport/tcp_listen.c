/*
 * TCP backend, the listener: every connection is a small non-blocking
 * handshake (HELLO out, AUTH in, AUTH_OK or AUTH_FAIL out) with a deadline
 * of its own, all of them moved on together by tp_accept()'s poll loop, so
 * a silent, slow, garbage-sending or wrong-key peer costs only itself.
 * Authenticated connections are grouped by the session they name; a
 * session is handed out once all its streams are in. Strangers can make us
 * do one HELLO and one HMAC each, hold at most HS_MAX sockets for at most
 * TP_HS_MS each, and when the table is full the oldest handshake goes (a
 * real sender answers within a round trip, a squatter never does).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/tcp_int.h"

#define HS_MAX       (TP_TCP_POLL_MAX - 1)   /* handshakes in progress at once */
#define GROUP_MAX    4                       /* sessions being assembled at once */
#define ACCEPT_BURST 64                      /* connections taken per wake-up */
#define WHO_LEN      80                      /* "address port N" */

struct hs {                    /* one connection in its handshake */
	int fd;                    /* -1: free slot */
	int64_t due;
	int replied;               /* AUTH_OK / AUTH_FAIL queued in out */
	int fail;                  /* it was AUTH_FAIL: close once it is out */
	size_t out_len, out_off, in_len;
	struct tp_hello hello;
	struct tp_auth auth;
	uint8_t out[TP_HDR_LEN + TP_HELLO_LEN];
	uint8_t in[TP_HDR_LEN + TP_AUTH_LEN];
	char who[WHO_LEN];
};

struct group {                 /* the authenticated streams of one session */
	int n;                     /* streams it has; 0: free slot */
	int have;
	uint64_t session;
	int64_t due;
	int fds[TP_MAX_STREAMS];
	struct tp_hs hs[TP_MAX_STREAMS];   /* what each stream's handshake settled */
};

struct tp_tcp_listener {
	int fd;
	struct tp_opts o;
	uint32_t msg_size;
	struct tp_gate *gate;
	struct hs hs[HS_MAX];
	int polled[HS_MAX];        /* pollfd k + 1 is hs[polled[k]] */
	struct group g[GROUP_MAX];
};

/* Every data connection: no Nagle delay, 4 MiB socket buffers. */
void tp_tcp_tune(int fd)
{
	int one = 1, buf = 4 << 20;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

/* The socket: dual-stack on every address when addr is NULL. */
static int listen_socket(const char *addr, uint16_t port, int *out)
{
	char ps[8];
	struct addrinfo hints = { .ai_family = addr ? AF_UNSPEC : AF_INET6,
	                          .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *res, *ai;
	snprintf(ps, sizeof ps, "%u", port);
	int rc = getaddrinfo(addr, ps, &hints, &res);
	if (rc) {
		log_err("listen on %s port %u: %s", addr ? addr : "*", port, gai_strerror(rc));
		return -EINVAL;
	}
	int err = -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		int one = 1, zero = 0;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (!addr && ai->ai_family == AF_INET6)   /* v4 and v6 in one socket */
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0) {
			freeaddrinfo(res);
			*out = fd;
			return 0;
		}
		err = -errno;
		close(fd);
	}
	freeaddrinfo(res);
	log_err("listen on %s TCP port %u: %s", addr ? addr : "*", port, strerror(-err));
	return err;
}

int tp_tcp_listen(const char *addr, uint16_t port, const struct tp_opts *o,
                  struct tp_gate *g, struct tp_tcp_listener **out)
{
	struct tp_tcp_listener *l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	int rc = listen_socket(addr, port, &l->fd);
	if (rc < 0) {
		free(l);
		return rc;
	}
	l->o = *o;
	l->o.peer_addr = NULL;   /* the gate has it; the caller's string may go */
	l->msg_size = o->msg_size ? o->msg_size : TP_DEF_MSG_SIZE;
	l->gate = g;
	for (int i = 0; i < HS_MAX; i++)
		l->hs[i].fd = -1;
	*out = l;
	return 0;
}

uint16_t tp_tcp_listener_port(const struct tp_tcp_listener *l)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	if (getsockname(l->fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
	                                      : ((struct sockaddr_in *)&ss)->sin_port);
}

static void group_close(struct group *g)
{
	for (int i = 0; i < g->n; i++)
		if (g->fds[i] >= 0)
			close(g->fds[i]);
	g->n = 0;
}

void tp_tcp_listener_free(struct tp_tcp_listener *l)
{
	if (!l)
		return;
	for (int i = 0; i < HS_MAX; i++)
		if (l->hs[i].fd >= 0)
			close(l->hs[i].fd);
	for (int i = 0; i < GROUP_MAX; i++)
		group_close(&l->g[i]);
	close(l->fd);
	free(l);
}

/* --- one handshake --- */

static void hs_drop(struct tp_tcp_listener *l, struct hs *h, int rc)
{
	if (rc == -EACCES)
		tp_gate_drop(l->gate, "rejected a connection from %s: it does not know the key",
		             h->who);
	else
		tp_gate_drop(l->gate, "dropped a connection from %s: %s", h->who,
		             rc == -EPROTO ? "not an rdcp sender" :
		             rc == -ETIMEDOUT ? "no answer to the handshake in time" :
		             rc == -ECONNRESET ? "it closed the connection during the handshake" :
		             rc == -EBUSY ? "too many handshakes at once (the oldest goes)" :
		             strerror(-rc));
	close(h->fd);
	h->fd = -1;
}

/* A fresh connection: queue its HELLO. */
static void hs_start(struct tp_tcp_listener *l, struct hs *h, int fd, const char *who)
{
	memset(h, 0, sizeof *h);
	h->fd = fd;
	h->due = clock_ms() + TP_HS_MS;
	snprintf(h->who, sizeof h->who, "%s", who);
	tp_tcp_tune(fd);
	tp_hs_hello(&h->hello, l->msg_size, 0);
	h->hello.flags = tp_seal_offer(l->o.encrypt);
	tp_hdr_put(h->out, &(struct tp_hdr){ .type = TP_HELLO, .len = TP_HELLO_LEN });
	tp_hello_put(h->out + TP_HDR_LEN, &h->hello);
	h->out_len = TP_HDR_LEN + TP_HELLO_LEN;
}

/* Write what is queued; 0 when all is out, 1 would block, or an error. */
static int hs_write(struct hs *h)
{
	while (h->out_off < h->out_len) {
		ssize_t n = send(h->fd, h->out + h->out_off, h->out_len - h->out_off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? 1 : errno == EPIPE ? -ECONNRESET : -errno;
		h->out_off += (size_t)n;
	}
	return 0;
}

/* Read the AUTH (header, then its fixed-size payload; nothing beyond it):
 * 0 when it is all in, 1 would block, or an error. */
static int hs_read(struct hs *h)
{
	for (;;) {
		size_t want = h->in_len < TP_HDR_LEN ? TP_HDR_LEN : sizeof h->in;
		if (h->in_len == want)
			return 0;
		ssize_t n = recv(h->fd, h->in + h->in_len, want - h->in_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? 1 : -errno;
		if (n == 0)
			return -ECONNRESET;
		h->in_len += (size_t)n;
		struct tp_hdr hd;   /* tp_hdr_get() holds an AUTH to its exact length */
		if (h->in_len == TP_HDR_LEN && (tp_hdr_get(h->in, &hd) < 0 || hd.type != TP_AUTH))
			return -EPROTO;
	}
}

/* Move a handshake on as far as its socket allows without blocking.
 * 0: waiting; 1: authenticated (h->auth names the stream); < 0: failed,
 * -EPROTONOSUPPORT for an authentic sender that disagrees with us about
 * encrypting (nothing is sent back: it knows, having seen our HELLO). */
static int hs_advance(struct tp_tcp_listener *l, struct hs *h)
{
	for (;;) {
		int rc = hs_write(h);
		if (rc != 0)
			return rc > 0 ? 0 : rc;
		if (h->replied)
			return h->fail ? -EACCES : 1;
		if ((rc = hs_read(h)) != 0)
			return rc > 0 ? 0 : rc;
		uint8_t ok[TP_MAC_LEN];
		rc = tp_hs_check(l->o.key, &h->hello, h->in + TP_HDR_LEN, TP_AUTH_LEN, &h->auth, ok);
		if (rc < 0 && rc != -EACCES)
			return rc;
		h->fail = rc == -EACCES;
		h->replied = 1;
		tp_hdr_put(h->out, &(struct tp_hdr){ .type = h->fail ? TP_AUTH_FAIL : TP_AUTH_OK,
		                                     .len = h->fail ? 0 : TP_MAC_LEN });
		memcpy(h->out + TP_HDR_LEN, ok, TP_MAC_LEN);
		h->out_off = 0;
		h->out_len = TP_HDR_LEN + (h->fail ? 0 : TP_MAC_LEN);
	}
}

/* --- sessions being assembled --- */

static struct group *group_for(struct tp_tcp_listener *l, const struct tp_auth *a)
{
	struct group *oldest = &l->g[0];
	for (int i = 0; i < GROUP_MAX; i++)
		if (l->g[i].n && l->g[i].session == a->session)
			return &l->g[i];
	for (int i = 0; i < GROUP_MAX; i++) {
		if (!l->g[i].n) {
			oldest = &l->g[i];
			break;
		}
		if (l->g[i].due < oldest->due)
			oldest = &l->g[i];
	}
	if (oldest->n) {
		tp_gate_drop(l->gate, "dropped an incomplete session of %d stream%s: more "
		             "than %d senders at once", oldest->n, oldest->n == 1 ? "" : "s",
		             GROUP_MAX);
		group_close(oldest);
	}
	oldest->n = a->streams;
	oldest->have = 0;
	oldest->session = a->session;
	oldest->due = clock_ms() + TP_GROUP_MS;
	for (int i = 0; i < TP_MAX_STREAMS; i++)
		oldest->fds[i] = -1;
	return oldest;
}

/* An authenticated connection joins its session; the group, or NULL. */
static struct group *hs_join(struct tp_tcp_listener *l, struct hs *h)
{
	struct group *g = group_for(l, &h->auth);
	if (g->n != h->auth.streams || g->fds[h->auth.index] >= 0) {
		tp_gate_drop(l->gate, "dropped a connection from %s: not part of its session "
		             "(stream count or index)", h->who);
		close(h->fd);
		h->fd = -1;
		return NULL;
	}
	g->fds[h->auth.index] = h->fd;
	g->hs[h->auth.index] = (struct tp_hs){ h->hello, h->auth };
	g->have++;
	h->fd = -1;
	return g;
}

/* A complete group becomes the session (which owns the fds, even on failure). */
static int group_done(struct tp_tcp_listener *l, struct group *g, struct tp_session **out)
{
	for (int i = 0; i < g->n; i++)
		fcntl(g->fds[i], F_SETFL, fcntl(g->fds[i], F_GETFL) & ~O_NONBLOCK);
	int n = g->n;
	g->n = 0;
	int rc = tp_tcp_session(g->fds, g->hs, n, 0, l->msg_size, &l->o, out);
	return rc < 0 ? rc : 1;
}

/* Advance one handshake; 1 with *out when it completed a session. Only a
 * sender that knows the key can make it fail (-EPROTO): one that does not
 * agree with us about encrypting is a mistake to stop at, not a stranger. */
static int hs_step(struct tp_tcp_listener *l, struct hs *h, struct tp_session **out)
{
	int rc = hs_advance(l, h);
	if (rc == -EPROTONOSUPPORT) {
		char peer[WHO_LEN + 16];
		snprintf(peer, sizeof peer, "the sender at %s", h->who);
		tp_seal_mismatch(peer, l->o.encrypt);
		close(h->fd);
		h->fd = -1;
		return -EPROTO;
	}
	if (rc < 0) {
		hs_drop(l, h, rc);
		return 0;
	}
	struct group *g = rc == 1 ? hs_join(l, h) : NULL;
	return g && g->have == g->n ? group_done(l, g, out) : 0;
}

/* The handshake that began first (NULL: none). */
static struct hs *hs_oldest(struct tp_tcp_listener *l)
{
	struct hs *oldest = NULL;
	for (int i = 0; i < HS_MAX; i++)
		if (l->hs[i].fd >= 0 && (!oldest || l->hs[i].due < oldest->due))
			oldest = &l->hs[i];
	return oldest;
}

/* A slot for a new handshake: a free one, or the oldest one's. */
static struct hs *hs_slot(struct tp_tcp_listener *l)
{
	for (int i = 0; i < HS_MAX; i++)
		if (l->hs[i].fd < 0)
			return &l->hs[i];
	struct hs *oldest = hs_oldest(l);
	hs_drop(l, oldest, -EBUSY);
	return oldest;
}

/* Take the connections waiting in the backlog. */
static int accept_new(struct tp_tcp_listener *l, struct tp_session **out)
{
	for (int k = 0; k < ACCEPT_BURST; k++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof ss;
		int fd = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (fd < 0 && (errno == EMFILE || errno == ENFILE) && hs_oldest(l)) {
			/* out of fds: the oldest handshake makes room (else the
			 * backlog stays readable and the poll loop would spin) */
			hs_drop(l, hs_oldest(l), -EBUSY);
			continue;
		}
		if (fd < 0)
			return 0;   /* EAGAIN */
		char who[WHO_LEN];
		tp_addr_name((struct sockaddr *)&ss, who, sizeof who);
		if (!tp_gate_allows(l->gate, (struct sockaddr *)&ss)) {
			tp_gate_drop(l->gate, "refused a connection from %s: not the allowed peer", who);
			close(fd);
			continue;
		}
		struct hs *h = hs_slot(l);
		hs_start(l, h, fd, who);
		int rc = hs_step(l, h, out);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int tp_tcp_poll_fds(struct tp_tcp_listener *l, struct pollfd *p, int64_t *due)
{
	int n = 0;
	p[n++] = (struct pollfd){ l->fd, POLLIN, 0 };
	for (int i = 0; i < HS_MAX; i++) {
		struct hs *h = &l->hs[i];
		if (h->fd < 0)
			continue;
		l->polled[n - 1] = i;
		p[n++] = (struct pollfd){ h->fd, h->out_off < h->out_len ? POLLOUT : POLLIN, 0 };
		if (h->due < *due)
			*due = h->due;
	}
	for (int i = 0; i < GROUP_MAX; i++)
		if (l->g[i].n && l->g[i].due < *due)
			*due = l->g[i].due;
	return n;
}

int tp_tcp_poll_step(struct tp_tcp_listener *l, const struct pollfd *p, int n,
                     struct tp_session **out)
{
	int rc;
	for (int k = 1; k < n; k++) {
		struct hs *h = &l->hs[l->polled[k - 1]];
		if (p[k].revents && h->fd == p[k].fd && (rc = hs_step(l, h, out)) != 0)
			return rc;
	}
	int64_t now = clock_ms();
	for (int i = 0; i < HS_MAX; i++)
		if (l->hs[i].fd >= 0 && now >= l->hs[i].due)
			hs_drop(l, &l->hs[i], -ETIMEDOUT);
	for (int i = 0; i < GROUP_MAX; i++) {
		struct group *g = &l->g[i];
		if (g->n && now >= g->due) {
			tp_gate_drop(l->gate, "dropped a session: %d of its %d streams came within "
			             "%d s", g->have, g->n, TP_GROUP_MS / 1000);
			group_close(g);
		}
	}
	return (p[0].revents & POLLIN) ? accept_new(l, out) : 0;
}
