/*
 * TCP backend, the sender's connection set-up: connect every stream
 * (retrying while nobody listens, each attempt bounded by the deadline, so a
 * black-holed address cannot hang us), then authenticate it (each reply
 * within TP_HS_MS). The listener is in tcp_listen.c; the session and its
 * threads in tcp_data.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/tcp_int.h"

/* One connect() that gives up at the deadline (at least a second). */
static int connect_by(int fd, const struct sockaddr *sa, socklen_t len, int64_t deadline)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	int rc = connect(fd, sa, len) == 0 ? 0 : -errno;
	if (rc == -EINPROGRESS) {
		int64_t left = deadline - clock_ms();
		struct pollfd p = { fd, POLLOUT, 0 };
		int n;
		do
			n = poll(&p, 1, left < 1000 ? 1000 : left > INT32_MAX ? INT32_MAX : (int)left);
		while (n < 0 && errno == EINTR);
		int err = 0;
		socklen_t el = sizeof err;
		if (n == 0)
			rc = -ETIMEDOUT;
		else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
			rc = -errno;
		else
			rc = -err;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return rc;
}

/* Connect one stream, retrying while nobody listens (until deadline, or
 * until o->gone says nobody will). */
static int connect_one(const char *host, uint16_t port, const struct tp_opts *o,
                       int64_t deadline, int *out)
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
			tp_tcp_tune(fd);
			if ((rc = connect_by(fd, ai->ai_addr, ai->ai_addrlen, deadline)) == 0) {
				freeaddrinfo(res);
				*out = fd;
				return 0;
			}
			close(fd);
		}
		if ((rc != -ECONNREFUSED && rc != -ENETUNREACH) || clock_ms() >= deadline)
			break;
		if (o->gone && o->gone(o->gone_arg)) {
			rc = -ECONNABORTED;
			break;
		}
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	freeaddrinfo(res);
	return rc;
}

/* The sender's half of the handshake on stream i of n; *msg_size is lowered
 * to what the receiver takes, and *hs is what it settled (nonces, cipher).
 * Each reply must come within TP_HS_MS. -EPROTONOSUPPORT: we and the
 * receiver disagree about encrypting (said by the caller). */
static int client_handshake(int fd, const struct tp_opts *o, uint64_t session, int n,
                            int i, uint32_t *msg_size, struct tp_hs *hs)
{
	struct tp_hdr hd;
	struct tp_hello *h = &hs->h;
	struct tp_auth *a = &hs->a;
	uint8_t buf[TP_CTRL_MAX], ans[TP_AUTH_LEN];
	tp_tcp_set_timeout(fd, TP_HS_MS);
	int rc = tp_tcp_read_ctl(fd, &hd, buf);
	if (rc == 0 && hd.type != TP_HELLO)
		rc = -EPROTO;
	if (rc == 0)
		rc = tp_hs_answer(o->key, buf, hd.len, session, n, i, o->encrypt, h, a, ans);
	if (rc == 0)
		rc = tp_tcp_send_ctl(fd, TP_AUTH, 0, 0, ans, TP_AUTH_LEN);
	if (rc == 0)   /* after AUTH, so that the receiver can say it too */
		rc = tp_hs_agree(h->flags, a->cipher);
	if (rc == 0)
		rc = tp_tcp_read_ctl(fd, &hd, buf);
	if (rc == 0 && hd.type == TP_AUTH_FAIL)
		rc = -EACCES;
	else if (rc == 0 && hd.type != TP_AUTH_OK)
		rc = -EPROTO;
	if (rc == 0 && tp_hs_confirm(o->key, h, a, buf, hd.len) < 0)
		rc = -EACCES;
	if (rc == 0 && h->max_msg < *msg_size)
		*msg_size = h->max_msg;
	return rc;
}

int tp_tcp_connect(const char *host, uint16_t port, const struct tp_opts *o,
                   struct tp_session **out)
{
	int fds[TP_MAX_STREAMS], n = o->streams > 0 ? o->streams : TP_TCP_DEF_STREAMS;
	int rc = 0, i;
	struct tp_hs hs[TP_MAX_STREAMS];
	uint64_t session;
	uint32_t msg_size = o->msg_size ? o->msg_size : TP_DEF_MSG_SIZE;
	int64_t deadline = clock_ms() + (o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000);
	tp_random(&session, sizeof session);
	for (i = 0; i < n; i++) {
		rc = connect_one(host, port, o, deadline, &fds[i]);
		if (rc < 0) {
			if (rc != -ECONNABORTED)   /* (o->gone: the caller says why) */
				log_err("cannot connect to %s port %u: %s", host, port,
				        strerror(-rc));
			break;
		}
		rc = client_handshake(fds[i], o, session, n, i, &msg_size, &hs[i]);
		if (rc < 0) {
			if (rc == -EPROTONOSUPPORT) {
				char peer[NI_MAXHOST + 64];
				snprintf(peer, sizeof peer, "the receiver at %s port %u", host, port);
				tp_seal_mismatch(peer, o->encrypt);
				rc = -EPROTO;
			} else if (rc == -EACCES)
				log_err("%s port %u: authentication failed: the two sides do not "
				        "have the same key", host, port);
			else if (rc == -ECONNRESET)
				log_err("%s port %u: the receiver closed the connection during "
				        "the handshake (it ended, is overloaded, or this host is not "
				        "its allowed peer)", host, port);
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
	return tp_tcp_session(fds, hs, n, 1, msg_size, o, out);
}
