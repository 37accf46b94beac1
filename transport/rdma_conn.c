/*
 * RDMA backend, connection management: librdmacm sets connections up
 * (InfiniBand, RoCE, iWARP alike). Here: the device check, a session's verbs
 * resources (PD, CQ, the pool and the control slots, each registered once)
 * and their teardown, queue pairs, and connect (resolve, connect, AUTH).
 * The listener is in rdma_listen.c, the data path in rdma_data.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/wire.h"
#include "transport/rdma_int.h"


int tp_rdma_available(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (l)
		ibv_free_device_list(l);
	return n > 0;
}

/* --- a session: verbs resources, queue pairs, teardown --- */

static struct ibv_mr *reg(struct rdma *r, void *p, size_t len, const char *what)
{
	struct ibv_mr *mr = ibv_reg_mr(r->pd, p, len, IBV_ACCESS_LOCAL_WRITE);
	if (mr)
		return mr;
	int e = errno;
	struct rlimit rl;
	char lim[32] = "unlimited", need[16];
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		snprintf(lim, sizeof lim, "%llu KiB", (unsigned long long)rl.rlim_cur / 1024);
	log_bytes(need, len);
	if (e == ENOMEM || e == EPERM || e == EAGAIN)
		log_err("cannot register %s of %s with the RDMA device: %s; the locked-memory "
		        "limit (ulimit -l) is %s and at least %s more is needed: raise it "
		        "(ulimit -l unlimited, or memlock in /etc/security/limits.conf) or "
		        "use a smaller pool", need, what, strerror(e), lim, need);
	else
		log_err("cannot register %s of %s with the RDMA device: %s", need, what, strerror(e));
	return NULL;
}

/* Verbs resources for a session on ctx: PD, CQ, pool, registrations. */
int tp_rdma_resources(struct tp_session *s, struct ibv_context *ctx, int streams,
                          int nbufs, uint32_t msg_size)
{
	struct rdma *r = R(s);
	int rc = tp_pool_init(s, nbufs, msg_size);
	if (rc < 0)
		return rc;
	r->ctx = ctx;
	r->ctl = calloc((size_t)streams * 2 * CTL_SLOTS, CTL_LEN);
	if (!r->ctl)
		return -ENOMEM;
	int cqe = streams * (nbufs + 4 * CTL_SLOTS) + 16;
	if (!(r->pd = ibv_alloc_pd(ctx)) || !(r->cc = ibv_create_comp_channel(ctx)) ||
	    !(r->cq = ibv_create_cq(ctx, cqe, NULL, r->cc, 0))) {
		log_err("RDMA device %s: cannot allocate a protection domain or completion "
		        "queue: %s", ibv_get_device_name(ctx->device), strerror(errno));
		return -ENOMEM;
	}
	fcntl(r->cc->fd, F_SETFL, fcntl(r->cc->fd, F_GETFL) | O_NONBLOCK);
	if (!(r->mr = reg(r, s->mem, s->mem_len, "data buffers")) ||
	    !(r->hmr = reg(r, s->hdrs, (size_t)nbufs * TP_HDR_LEN, "headers")) ||
	    !(r->cmr = reg(r, r->ctl, (size_t)streams * 2 * CTL_SLOTS * CTL_LEN, "control slots")))
		return -ENOMEM;
	if (ibv_req_notify_cq(r->cq, 0))
		return -EIO;
	r->free_head = -1;
	for (int i = nbufs - 1; i >= 0; i--) {
		s->bufs[i].next = r->free_head;
		r->free_head = i;
	}
	return 0;
}

int tp_rdma_make_qp(struct tp_session *s, struct rdma_cm_id *id, int send_wr, int recv_wr)
{
	struct rdma *r = R(s);
	struct ibv_qp_init_attr a = {
		.send_cq = r->cq, .recv_cq = r->cq, .qp_type = IBV_QPT_RC,
		/* rxe refuses 0 here; hardware would round it up and hide the bug */
		.cap = { .max_send_wr = (uint32_t)send_wr, .max_recv_wr = (uint32_t)recv_wr,
		         .max_send_sge = 2, .max_recv_sge = 2 },
	};
	if (rdma_create_qp(id, r->pd, &a)) {
		log_err("cannot create an RDMA queue pair: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/* The tp_ops close of an RDMA session (also the unwinding of a half-made
 * one): disconnect, then free what rdma_resources() and session_new() made. */
void tp_rdma_close(struct tp_session *s)
{
	struct rdma *r = R(s);
	if (!r)
		return;
	for (int i = 0; i < TP_MAX_STREAMS; i++)
		if (r->st[i].id && r->st[i].established)
			rdma_disconnect(r->st[i].id);
	for (int i = 0; i < TP_MAX_STREAMS; i++)
		if (r->st[i].id) {
			if (r->st[i].id->qp)
				rdma_destroy_qp(r->st[i].id);
			rdma_destroy_id(r->st[i].id);
		}
	if (r->unacked && r->cq)
		ibv_ack_cq_events(r->cq, (unsigned)r->unacked);
	if (r->mr)
		ibv_dereg_mr(r->mr);
	if (r->hmr)
		ibv_dereg_mr(r->hmr);
	if (r->cmr)
		ibv_dereg_mr(r->cmr);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->cc)
		ibv_destroy_comp_channel(r->cc);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->own_ec && r->ec)
		rdma_destroy_event_channel(r->ec);
	close(r->efd);
	pthread_mutex_destroy(&r->rel_mu);
	free(r->ctl);
	free(r);
	s->be = NULL;
}

struct tp_session *tp_rdma_session_new(const struct tp_opts *o, int sender)
{
	struct tp_session *s = calloc(1, sizeof *s);
	struct rdma *r = calloc(1, sizeof *r);
	if (!s || !r) {
		free(s);
		free(r);
		return NULL;
	}
	s->ops = &tp_rdma_ops;
	s->be = r;
	s->verbose = o->verbose;
	s->io_timeout_ms = o->io_timeout_ms > 0 ? o->io_timeout_ms : 0;
	memcpy(s->key, o->key, TP_KEY_LEN);
	r->sender = sender;
	r->free_head = r->ready_head = r->ready_tail = r->rel_head = -1;
	pthread_mutex_init(&r->rel_mu, NULL);
	r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->efd < 0) {
		pthread_mutex_destroy(&r->rel_mu);
		free(r);
		free(s);
		return NULL;
	}
	return s;
}

void tp_rdma_session_free(struct tp_session *s)
{
	if (!s)
		return;
	tp_rdma_close(s);
	tp_pool_free(s);
	free(s);
}

/* Wait for the next CM event on ec (timeout_ms); caller acks it. */
static int next_event(struct rdma_event_channel *ec, int timeout_ms, struct rdma_cm_event **ev)
{
	struct pollfd p = { ec->fd, POLLIN, 0 };
	int rc;
	do
		rc = poll(&p, 1, timeout_ms);
	while (rc < 0 && errno == EINTR);
	if (rc == 0)
		return -ETIMEDOUT;
	if (rc < 0 || rdma_get_cm_event(ec, ev))
		return -errno;
	return 0;
}

/* --- sender side --- */

static int resolve(struct rdma_event_channel *ec, struct rdma_cm_id *id,
                   struct sockaddr *dst, const char *host)
{
	struct rdma_cm_event *ev;
	if (rdma_resolve_addr(id, NULL, dst, 2000))
		return errno == ENODEV || errno == EADDRNOTAVAIL ? -ENODEV : -errno;
	int rc = next_event(ec, 5000, &ev);
	if (rc < 0)
		return rc;
	int e = ev->event;
	rdma_ack_cm_event(ev);
	if (e != RDMA_CM_EVENT_ADDR_RESOLVED)
		return -ENODEV;   /* no RDMA device reaches host */
	if (rdma_resolve_route(id, 2000))
		return -errno;
	if ((rc = next_event(ec, 5000, &ev)) < 0)
		return rc;
	e = ev->event;
	rdma_ack_cm_event(ev);
	(void)host;
	return e == RDMA_CM_EVENT_ROUTE_RESOLVED ? 0 : -ENODEV;
}

/* Connect stream i of s; -ECONNREFUSED when nobody listens. */
static int connect_stream(struct tp_session *s, const struct tp_opts *o, int i,
                          struct sockaddr *dst, const char *host)
{
	struct rdma *r = R(s);
	struct rstream *st = &r->st[i];
	struct rdma_cm_event *ev;
	int rc;
	if (rdma_create_id(r->ec, &st->id, st, RDMA_PS_TCP))
		return -errno;
	if ((rc = resolve(r->ec, st->id, dst, host)) < 0)
		return rc;
	if (!r->ctx) {
		uint32_t msg = o->msg_size ? o->msg_size : TP_DEF_MSG_SIZE;
		rc = tp_rdma_resources(s, st->id->verbs, s->nstreams,
		                    tp_pool_count(o, s->nstreams, msg), msg);
		if (rc < 0)
			return rc;
	} else if (st->id->verbs != r->ctx) {
		log_err("%s: the streams resolve to different RDMA devices", host);
		return -EINVAL;
	}
	if ((rc = tp_rdma_make_qp(s, st->id, s->nbufs + CTL_SLOTS + 2, CTL_SLOTS + 2)) < 0)
		return rc;
	for (int k = 0; k < CTL_SLOTS; k++)
		if ((rc = tp_rdma_post_recv_ctl(r, i, k)) < 0)
			return rc;
	uint8_t pd[PD_LEN] = { 0 };
	put_u32(pd, PD_MAGIC);
	put_u16(pd + 4, TP_PROTO_VER);
	pd[6] = (uint8_t)s->nstreams;
	pd[7] = (uint8_t)i;
	put_u64(pd + 8, r->session);
	struct rdma_conn_param cp = { .private_data = pd, .private_data_len = PD_LEN,
	                              .responder_resources = 1, .initiator_depth = 1,
	                              .retry_count = 7, .rnr_retry_count = 7 };
	if (rdma_connect(st->id, &cp))
		return -errno;
	if ((rc = next_event(r->ec, 10000, &ev)) < 0)
		return rc;
	int e = ev->event;
	rdma_ack_cm_event(ev);
	if (e == RDMA_CM_EVENT_REJECTED)
		return -ECONNREFUSED;
	if (e != RDMA_CM_EVENT_ESTABLISHED)
		return -ECONNREFUSED;
	st->established = 1;
	return 0;
}

/* After every stream is connected: HELLO in, AUTH out, on each; then every
 * AUTH_OK (the receiver checks AUTHs once all streams are up). */
static int authenticate(struct tp_session *s)
{
	struct rdma *r = R(s);
	int rc;
	for (int i = 0; i < s->nstreams; i++) {
		struct rstream *st = &r->st[i];
		while (st->established < 2 && !r->err)
			if ((rc = tp_rdma_progress(s, 1, 5000)) <= 0)
				return rc < 0 ? rc : -ETIMEDOUT;
		if (r->err)
			return r->err;
		uint8_t ans[TP_AUTH_LEN], hb[TP_HELLO_LEN];
		tp_hello_put(hb, &st->hello);
		if ((rc = tp_hs_answer(s->key, hb, TP_HELLO_LEN, r->session, s->nstreams, i, 0,
		                       &st->hello, &st->auth, ans)) < 0)
			return rc;
		if ((rc = tp_rdma_send_ctl(r, i, TP_AUTH, 0, 0, ans, TP_AUTH_LEN)) < 0)
			return rc;
		st->credits--;
	}
	for (int i = 0; i < s->nstreams; i++)
		while (!r->st[i].authed && !r->err)
			if ((rc = tp_rdma_progress(s, 1, 5000)) <= 0)
				return rc < 0 ? rc : -ETIMEDOUT;
	return r->err;
}

int tp_rdma_connect(const char *host, uint16_t port, const struct tp_opts *o,
                    struct tp_session **out)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;
	char ps[8];
	snprintf(ps, sizeof ps, "%u", port);
	int g = getaddrinfo(host, ps, &hints, &res);
	if (g) {
		log_err("%s: %s", host, gai_strerror(g));
		return -EHOSTUNREACH;
	}
	int64_t deadline = clock_ms() + (o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000);
	int rc;
	for (;;) {
		struct tp_session *s = tp_rdma_session_new(o, 1);
		if (!s) {
			rc = -ENOMEM;
			break;
		}
		struct rdma *r = R(s);
		s->nstreams = o->streams > 0 ? o->streams : 1;
		r->nstreams = s->nstreams;
		tp_random(&r->session, sizeof r->session);
		if (!(r->ec = rdma_create_event_channel())) {
			tp_rdma_session_free(s);
			rc = -ENODEV;
			break;
		}
		r->own_ec = 1;
		fcntl(r->ec->fd, F_SETFL, fcntl(r->ec->fd, F_GETFL) | O_NONBLOCK);
		rc = 0;
		for (int i = 0; i < s->nstreams && rc == 0; i++)
			rc = connect_stream(s, o, i, res->ai_addr, host);
		if (rc == 0)
			rc = authenticate(s);
		if (rc == 0) {
			freeaddrinfo(res);
			*out = s;
			return 0;
		}
		tp_rdma_session_free(s);
		if (rc != -ECONNREFUSED || clock_ms() >= deadline)
			break;
		if (o->gone && o->gone(o->gone_arg)) {
			rc = -ECONNABORTED;
			break;
		}
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	freeaddrinfo(res);
	if (rc == -ENODEV) {
		if (o->kind == TP_RDMA)
			log_err("%s: no RDMA device reaches this address (rdma link show; "
			        "is the address on an RDMA-capable interface?)", host);
	} else if (rc == -EACCES) {
		log_err("%s port %u: authentication failed: the two sides do not have the "
		        "same key", host, port);
	} else if (rc != -ENOMEM && rc != -ECONNABORTED) {
		/* (registration failures said why already; o->gone: the caller) */
		log_err("cannot connect to %s port %u over RDMA: %s", host, port,
		        rc == -EPROTO ? "the peer does not speak the rdcp protocol"
		                      : strerror(-rc));
	}
	return rc;
}
