/* The public API: backend selection (listen, accept, connect) and dispatch
 * of the per-session calls to the backend's tp_ops. */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "transport/tp_int.h"

struct tp_listener {
	struct tp_tcp_listener *tcp;     /* NULL when not listening on TCP */
	struct tp_rdma_listener *rdma;   /* NULL when not listening on RDMA */
	struct tp_gate gate;             /* shared: the allowed peer, the drop count */
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
	l->port = port;
	int rc = tp_gate_init(&l->gate, o->peer_addr);
	if (rc < 0)
		goto fail;
	/* TCP first: with port 0 it picks the port, and RDMA takes the same */
	if (o->kind != TP_RDMA) {
		if ((rc = tp_tcp_listen(addr, port, o, &l->gate, &l->tcp)) < 0)
			goto fail;
		l->port = tp_tcp_listener_port(l->tcp);
	}
	/* an encrypting receiver takes TCP senders only */
	if (o->kind == TP_RDMA || (o->kind == TP_AUTO && !o->encrypt && tp_rdma_available())) {
		rc = tp_rdma_listen(addr, l->port, o, &l->gate, &l->rdma);
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

/* poll()'s timeout until due (INT64_MAX: none). */
static int poll_ms(int64_t due)
{
	if (due == INT64_MAX)
		return -1;
	int64_t left = due - clock_ms();
	return left < 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
}

/*
 * One poll loop over both backends' listeners and every connection in its
 * handshake: each moves on as its socket or channel allows, each with its
 * own deadline, so no peer waits behind another. Pending handshakes stay in
 * the listener between calls.
 */
int tp_accept(struct tp_listener *l, int timeout_ms, struct tp_session **out)
{
	int64_t end = timeout_ms < 0 ? INT64_MAX : clock_ms() + timeout_ms;
	for (;;) {
		struct pollfd p[TP_TCP_POLL_MAX + TP_RDMA_POLL_MAX];
		int64_t due = end;
		int nt = l->tcp ? tp_tcp_poll_fds(l->tcp, p, &due) : 0;
		int nr = l->rdma ? tp_rdma_poll_fds(l->rdma, p + nt, &due) : 0;
		int rc = poll(p, (nfds_t)(nt + nr), poll_ms(due));
		if (rc < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; rc < 0 && i < nt + nr; i++)
			p[i].revents = 0;
		if (l->tcp && (rc = tp_tcp_poll_step(l->tcp, p, nt, out)) != 0)
			return rc < 0 ? rc : 0;
		if (l->rdma && (rc = tp_rdma_poll_step(l->rdma, p + nt, nr, out)) != 0)
			return rc < 0 ? rc : 0;
		if (clock_ms() >= end)
			return -ETIMEDOUT;
	}
}

uint16_t tp_listener_port(const struct tp_listener *l)
{
	return l->port;
}

void tp_listener_free(struct tp_listener *l)
{
	if (!l)
		return;
	tp_tcp_listener_free(l->tcp);
	tp_rdma_listener_free(l->rdma);
	tp_gate_done(&l->gate);
	free(l);
}

static int connect_kind(const char *host, uint16_t port, const struct tp_opts *o,
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
	/* each notice once a process: a sync in windows (or --watch's rounds)
	 * connects again and again, and a cron job mails every line */
	static int said_encrypt, said_tcp;
	if (o->encrypt) {   /* TP_AUTO: RDMA does not encrypt */
		if (o->verbose >= 0 && tp_rdma_available() &&
		    !__atomic_exchange_n(&said_encrypt, 1, __ATOMIC_RELAXED))
			log_err("--encrypt: using TCP, not RDMA (the RDMA path does not encrypt)");
		return tp_tcp_connect(host, port, o, out);
	}
	if (o->kind == TP_RDMA)
		return tp_rdma_connect(host, port, o, out);
	int rc = tp_rdma_available() ? tp_rdma_connect(host, port, o, out) : -ENODEV;
	if (rc != -ENODEV)
		return rc;
	if (o->verbose >= 0 &&   /* rdpipe (-1) reports each hop's transport itself */
	    !__atomic_exchange_n(&said_tcp, 1, __ATOMIC_RELAXED))
		log_err("no RDMA device reaches %s: using TCP", host);
	return tp_tcp_connect(host, port, o, out);
}

int tp_connect(const char *host, uint16_t port, const struct tp_opts *o,
               struct tp_session **out)
{
	int rc = connect_kind(host, port, o, out);
	if (rc == 0 && o->rate) {
		(*out)->rate = o->rate;
		(*out)->pace_next = 0;
		pthread_mutex_init(&(*out)->pace_mu, NULL);
	}
	return rc;
}

/* --bwlimit: a virtual clock. Each message moves the time at which the
 * bytes sent so far fit the rate by len / rate; the sender sleeps until
 * then before it sends, so no prefix of the run is faster than the rate.
 * Time left idle (the sender waiting for its disk) is not saved up. */
static void pace(struct tp_session *s, uint32_t len)
{
	double now = clock_s();
	pthread_mutex_lock(&s->pace_mu);
	if (s->pace_next < now)
		s->pace_next = now;
	s->pace_next += (double)len / (double)s->rate;
	double until = s->pace_next;
	pthread_mutex_unlock(&s->pace_mu);
	while (now < until) {
		double d = until - now;
		struct timespec w = { (time_t)d, (long)((d - (double)(time_t)d) * 1e9) };
		nanosleep(&w, NULL);
		now = clock_s();
	}
}

int tp_msg_get(struct tp_session *s, struct tp_msg **m)
{
	struct tp_buf *b;
	int rc = s->ops->get(s, &b);
	if (rc == 0) {
		b->m.len = 0;
		b->m.id = b->m.off = 0;
		b->m.file_fd = -1;
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
	if (m->len > m->cap || (m->file_fd >= 0 && !tp_sends_files(s))) {
		tp_msg_put(s, m);
		return -EINVAL;
	}
	tp_hdr_put(b->hdr, &(struct tp_hdr){ .type = TP_DATA, .len = m->len,
	                                     .id = m->id, .off = m->off });
	if (s->rate)
		pace(s, m->len);
	return s->ops->send(s, b);
}

void tp_msg_put(struct tp_session *s, struct tp_msg *m)
{
	tp_buf_drop_file(buf_of(m));
	s->ops->put(s, buf_of(m));
}

void tp_buf_drop_file(struct tp_buf *b)
{
	if (b->m.file_fd >= 0)
		close(b->m.file_fd);
	b->m.file_fd = -1;
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

uint32_t tp_msg_cap(const struct tp_session *s)
{
	return s->msg_size;
}

int tp_streams(const struct tp_session *s)
{
	return s->nstreams;
}

int tp_sends_files(const struct tp_session *s)
{
	return s->ops->files && s->cipher == TP_CIPHER_NONE;
}

int tp_peer_status(const struct tp_session *s)
{
	return s->peer_status;
}

const char *tp_cipher_name(const struct tp_session *s)
{
	return tp_cipher_str(s->cipher);
}
