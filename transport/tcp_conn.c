/*
 * TCP backend, connection set-up: the dual-stack listener, accept (each
 * connection authenticated, then grouped into the session it names) and
 * connect (every stream, retrying while nobody listens, then authenticated).
 * The session and its threads are in tcp_data.c.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/tcp_int.h"

#define HS_TIMEOUT_MS 5000
#define SOCK_BUF      (4 << 20)

/* Every data connection: no Nagle delay, 4 MiB socket buffers. */
static void tune(int fd)
{
	int one = 1, buf = SOCK_BUF;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
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
                            struct tp_hs *hs)
{
	struct tp_hello h;
	struct tp_auth *a = &hs->a;
	struct tp_hdr hd;
	uint8_t buf[TP_CTRL_MAX], ok[TP_MAC_LEN];
	tp_hs_hello(&h, msg_size, 0);
	h.flags = tp_seal_offer(o->encrypt);
	hs->h = h;
	tp_hello_put(buf, &h);
	tp_tcp_set_timeout(fd, HS_TIMEOUT_MS);
	int rc = tp_tcp_send_ctl(fd, TP_HELLO, 0, 0, buf, TP_HELLO_LEN);
	if (rc == 0)
		rc = tp_tcp_read_ctl(fd, &hd, buf);
	if (rc == 0 && hd.type != TP_AUTH)
		rc = -EPROTO;
	if (rc == 0)
		rc = tp_hs_check(o->key, &h, buf, hd.len, a, ok);
	if (rc == -EACCES)
		tp_tcp_send_ctl(fd, TP_AUTH_FAIL, 0, 0, NULL, 0);
	else if (rc == 0)
		rc = tp_tcp_send_ctl(fd, TP_AUTH_OK, 0, 0, ok, TP_MAC_LEN);
	return rc;
}

int tp_tcp_accept(int lfd, const struct tp_opts *o, int timeout_ms,
                  struct tp_session **out)
{
	int fds[TP_MAX_STREAMS], have = 0, want = 0, rc = 0;
	struct tp_hs hs[TP_MAX_STREAMS], one;
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
		rc = server_handshake(fd, o, msg_size, &one);
		struct tp_auth a = one.a;
		if (rc < 0) {
			close(fd);
			if (rc == -EACCES) {
				log_err("rejected a connection from %s: it does not know the key", who);
				break;
			}
			if (rc == -EPROTONOSUPPORT) {   /* it knows the key: a real mistake */
				char peer[NI_MAXHOST + 64];
				snprintf(peer, sizeof peer, "the sender at %s", who);
				tp_seal_mismatch(peer, o->encrypt);
				rc = -EPROTO;
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
		hs[a.index] = one;
		have++;
	}
	if (rc < 0 || have < want) {
		for (int i = 0; i < TP_MAX_STREAMS && have; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		return rc < 0 ? rc : -ETIMEDOUT;
	}
	struct tp_opts ro = *o;
	return tp_tcp_session(fds, hs, want, 0, msg_size, &ro, out);
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
		if ((rc != -ECONNREFUSED && rc != -ENETUNREACH) || tp_now_ms() >= deadline)
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
	struct tp_hs hs[TP_MAX_STREAMS];
	uint64_t session;
	uint32_t msg_size = o->msg_size ? o->msg_size : TP_DEF_MSG_SIZE;
	int64_t deadline = tp_now_ms() + (o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000);
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
		tp_tcp_set_timeout(fds[i], HS_TIMEOUT_MS);
		rc = tp_tcp_read_ctl(fds[i], &hd, buf);
		if (rc == 0 && hd.type != TP_HELLO)
			rc = -EPROTO;
		if (rc == 0)
			rc = tp_hs_answer(o->key, buf, hd.len, session, n, i, o->encrypt, &h, &a, ans);
		if (rc == 0)
			rc = tp_tcp_send_ctl(fds[i], TP_AUTH, 0, 0, ans, TP_AUTH_LEN);
		if (rc == 0)   /* after AUTH, so that the receiver can say it too */
			rc = tp_hs_agree(h.flags, a.cipher);
		if (rc == 0)
			rc = tp_tcp_read_ctl(fds[i], &hd, buf);
		if (rc == 0 && hd.type == TP_AUTH_FAIL)
			rc = -EACCES;
		else if (rc == 0 && hd.type != TP_AUTH_OK)
			rc = -EPROTO;
		if (rc == 0 && tp_hs_confirm(o->key, &h, &a, buf, hd.len) < 0)
			rc = -EACCES;
		if (rc == 0 && h.max_msg < msg_size)
			msg_size = h.max_msg;
		if (rc < 0) {
			if (rc == -EPROTONOSUPPORT) {
				char peer[NI_MAXHOST + 64];
				snprintf(peer, sizeof peer, "the receiver at %s port %u", host, port);
				tp_seal_mismatch(peer, o->encrypt);
				rc = -EPROTO;
			} else if (rc == -EACCES)
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
		hs[i] = (struct tp_hs){ h, a };
	}
	if (rc < 0) {
		while (i-- > 0)
			close(fds[i]);
		return rc;
	}
	return tp_tcp_session(fds, hs, n, 1, msg_size, o, out);
}
