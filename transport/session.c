/* The public API: backend selection (listen, accept, connect) and dispatch
 * of the per-session calls to the backend's tp_ops. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/tp_int.h"

struct tp_listener {
	int tcp_fd;                      /* -1 when not listening on TCP */
	struct tp_rdma_listener *rdma;   /* NULL when not listening on RDMA */
	struct tp_opts o;
	uint16_t port;
};

int tp_opts_check(const struct tp_opts *o)
{
	if (o->encrypt && o->kind == TP_RDMA) {
		log_err("--encrypt works over TCP only (the RDMA path does not encrypt): "
		        "use --transport tcp or auto");
		return -EINVAL;
	}
	return 0;
}

int tp_listen(const char *addr, uint16_t port, const struct tp_opts *o,
              struct tp_listener **out)
{
	if (tp_opts_check(o) < 0)
		return -EINVAL;
	struct tp_listener *l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	l->tcp_fd = -1;
	l->o = *o;
	l->port = port;
	int rc = 0;
	/* TCP first: with port 0 it picks the port, and RDMA takes the same */
	if (o->kind != TP_RDMA) {
		rc = tp_tcp_listen(addr, port, &l->tcp_fd);
		if (rc < 0)
			goto fail;
		struct sockaddr_storage ss;
		socklen_t len = sizeof ss;
		if (getsockname(l->tcp_fd, (struct sockaddr *)&ss, &len) == 0)
			l->port = ntohs(ss.ss_family == AF_INET6
			                ? ((struct sockaddr_in6 *)&ss)->sin6_port
			                : ((struct sockaddr_in *)&ss)->sin_port);
	}
	/* an encrypting receiver takes TCP senders only */
	if (o->kind == TP_RDMA || (o->kind == TP_AUTO && !o->encrypt && tp_rdma_available())) {
		rc = tp_rdma_listen(addr, l->port, &l->rdma);
		if (rc < 0 && o->kind == TP_RDMA)
			goto fail;
		if (rc == 0 && l->port == 0)
			l->port = tp_rdma_listener_port(l->rdma);
		rc = 0;
	}
	*out = l;
	return 0;
fail:
	tp_listener_free(l);
	return rc;
}

int tp_accept(struct tp_listener *l, int timeout_ms, struct tp_session **out)
{
	if (!l->rdma)
		return tp_tcp_accept(l->tcp_fd, &l->o, timeout_ms, out);
	if (l->tcp_fd < 0)
		return tp_rdma_accept(l->rdma, &l->o, timeout_ms, out);
	/* both: whichever kind of sender comes first */
	struct pollfd p[2] = { { l->tcp_fd, POLLIN, 0 },
	                       { tp_rdma_listener_fd(l->rdma), POLLIN, 0 } };
	int rc;
	do
		rc = poll(p, 2, timeout_ms);
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		return -errno;
	if (rc == 0)
		return -ETIMEDOUT;
	if (p[1].revents)
		return tp_rdma_accept(l->rdma, &l->o, timeout_ms, out);
	return tp_tcp_accept(l->tcp_fd, &l->o, timeout_ms, out);
}

uint16_t tp_listener_port(const struct tp_listener *l)
{
	return l->port;
}

void tp_listener_free(struct tp_listener *l)
{
	if (!l)
		return;
	if (l->tcp_fd >= 0)
		close(l->tcp_fd);
	tp_rdma_listener_free(l->rdma);
	free(l);
}

int tp_connect(const char *host, uint16_t port, const struct tp_opts *o,
               struct tp_session **out)
{
	if (o->streams < 0 || o->streams > TP_MAX_STREAMS) {
		log_err("streams: expected 1..%d, got %d", TP_MAX_STREAMS, o->streams);
		return -EINVAL;
	}
	if (tp_opts_check(o) < 0)
		return -EINVAL;
	if (o->kind == TP_TCP)
		return tp_tcp_connect(host, port, o, out);
	if (o->encrypt) {   /* TP_AUTO: RDMA does not encrypt */
		if (o->verbose >= 0 && tp_rdma_available())
			log_err("--encrypt: using TCP, not RDMA (the RDMA path does not encrypt)");
		return tp_tcp_connect(host, port, o, out);
	}
	if (o->kind == TP_RDMA)
		return tp_rdma_connect(host, port, o, out);
	int rc = tp_rdma_available() ? tp_rdma_connect(host, port, o, out) : -ENODEV;
	if (rc != -ENODEV)
		return rc;
	if (o->verbose >= 0)   /* rdpipe (-1) reports each hop's transport itself */
		log_err("no RDMA device reaches %s: using TCP", host);
	return tp_tcp_connect(host, port, o, out);
}

int tp_msg_get(struct tp_session *s, struct tp_msg **m)
{
	struct tp_buf *b;
	int rc = s->ops->get(s, &b);
	if (rc == 0) {
		b->m.len = 0;
		b->m.id = b->m.off = 0;
		*m = &b->m;
	}
	return rc;
}

static struct tp_buf *buf_of(struct tp_msg *m)
{
	return (struct tp_buf *)((char *)m - offsetof(struct tp_buf, m));
}

int tp_msg_send(struct tp_session *s, struct tp_msg *m)
{
	struct tp_buf *b = buf_of(m);
	if (m->len > m->cap) {
		s->ops->put(s, b);
		return -EINVAL;
	}
	tp_hdr_put(b->hdr, &(struct tp_hdr){ .type = TP_DATA, .len = m->len,
	                                     .id = m->id, .off = m->off });
	return s->ops->send(s, b);
}

void tp_msg_put(struct tp_session *s, struct tp_msg *m)
{
	s->ops->put(s, buf_of(m));
}

int tp_finish(struct tp_session *s)
{
	return s->ops->finish(s);
}

int tp_msg_recv(struct tp_session *s, struct tp_msg **m)
{
	struct tp_buf *b;
	int rc = s->ops->recv(s, &b);
	if (rc == 0)
		*m = &b->m;
	return rc;
}

void tp_msg_release(struct tp_session *s, struct tp_msg *m)
{
	s->ops->release(s, buf_of(m));
}

int tp_verdict(struct tp_session *s, int status)
{
	return s->ops->verdict(s, status);
}

void tp_close(struct tp_session *s)
{
	if (!s)
		return;
	s->ops->close(s);
	tp_pool_free(s);
	free(s);
}

const char *tp_kind_name(const struct tp_session *s)
{
	return s->ops->name;
}

size_t tp_pool_bytes(const struct tp_session *s)
{
	return s->mem_len;
}

int tp_streams(const struct tp_session *s)
{
	return s->nstreams;
}

int tp_peer_status(const struct tp_session *s)
{
	return s->peer_status;
}

const char *tp_cipher_name(const struct tp_session *s)
{
	return tp_cipher_str(s->cipher);
}
