/*
 * RDMA backend, connection management: librdmacm sets connections up
 * (InfiniBand, RoCE, iWARP alike). Here: the device check, a session's verbs
 * resources (PD, CQ, the pool and the control slots, each registered once)
 * and their teardown, queue pairs, the listener, accept (connect requests,
 * HELLO, waiting for every AUTH) and connect (resolve, connect, AUTH).
 * The data path is in rdma_data.c.
 *
 * The connect request carries 16 bytes of private data (magic, version,
 * stream count, stream index, session id) so the receiver can size its pool
 * before the first AUTH arrives; it is not trusted for anything else.
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

#define PD_MAGIC    0x5244434du                /* "RDCM": connect private data */
#define PD_LEN      16

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
static int rdma_resources(struct tp_session *s, struct ibv_context *ctx, int streams,
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

static int make_qp(struct tp_session *s, struct rdma_cm_id *id, int send_wr, int recv_wr)
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

static struct tp_session *session_new(const struct tp_opts *o, int sender)
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

static void session_free(struct tp_session *s)
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

/* --- receiver side --- */

struct tp_rdma_listener {
	struct rdma_event_channel *ec;
	struct rdma_cm_id *id;
};

int tp_rdma_listen(const char *addr, uint16_t port, struct tp_rdma_listener **out)
{
	struct tp_rdma_listener *l = calloc(1, sizeof *l);
	struct addrinfo hints = { .ai_family = AF_INET, .ai_flags = AI_PASSIVE }, *res = NULL;
	char ps[8];
	snprintf(ps, sizeof ps, "%u", port);
	int rc = -ENOMEM;
	if (!l)
		return rc;
	if (!(l->ec = rdma_create_event_channel())) {
		rc = -ENODEV;
		log_err("RDMA is not available here (%s): is an RDMA driver loaded? "
		        "(rdma link show)", strerror(errno));
		goto fail;
	}
	fcntl(l->ec->fd, F_SETFL, fcntl(l->ec->fd, F_GETFL) | O_NONBLOCK);
	if (getaddrinfo(addr, ps, &hints, &res)) {
		rc = -EINVAL;
		log_err("RDMA listen: cannot resolve %s", addr ? addr : "*");
		goto fail;
	}
	if (rdma_create_id(l->ec, &l->id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(l->id, res->ai_addr) || rdma_listen(l->id, 64)) {
		rc = -errno;
		log_err("RDMA listen on port %u: %s", port, strerror(errno));
		goto fail;
	}
	freeaddrinfo(res);
	*out = l;
	return 0;
fail:
	if (res)
		freeaddrinfo(res);
	tp_rdma_listener_free(l);
	return rc;
}

int tp_rdma_listener_fd(struct tp_rdma_listener *l)
{
	return l->ec->fd;
}

uint16_t tp_rdma_listener_port(struct tp_rdma_listener *l)
{
	return ntohs(rdma_get_src_port(l->id));
}

void tp_rdma_listener_free(struct tp_rdma_listener *l)
{
	if (!l)
		return;
	if (l->id)
		rdma_destroy_id(l->id);
	if (l->ec)
		rdma_destroy_event_channel(l->ec);
	free(l);
}

struct conn_pd {
	uint16_t streams, index;
	uint64_t session;
};

static int pd_get(const void *p, size_t len, struct conn_pd *c)
{
	const uint8_t *b = p;
	if (!b || len < PD_LEN || get_u32(b) != PD_MAGIC || get_u16(b + 4) != TP_PROTO_VER)
		return -EPROTO;
	c->streams = b[6];
	c->index = b[7];
	c->session = get_u64(b + 8);
	if (c->streams < 1 || c->streams > TP_MAX_STREAMS || c->index >= c->streams)
		return -EPROTO;
	return 0;
}

/* A connect request for a session being assembled: set its stream up. */
static int accept_stream(struct tp_session **sp, const struct tp_opts *o,
                         struct rdma_cm_event *ev, int *want)
{
	struct conn_pd c;
	struct rdma_cm_id *id = ev->id;
	if (pd_get(ev->param.conn.private_data, ev->param.conn.private_data_len, &c) < 0) {
		rdma_reject(id, NULL, 0);
		return 0;   /* not one of ours: ignore it */
	}
	struct tp_session *s = *sp;
	if (!s) {
		if (!(s = session_new(o, 0)))
			return -ENOMEM;
		struct rdma *r = R(s);
		uint32_t msg = o->msg_size ? o->msg_size : TP_DEF_MSG_SIZE;
		int nbufs = tp_pool_count(o, c.streams, msg);
		r->session = c.session;
		r->quota = nbufs / c.streams;
		s->nstreams = c.streams;
		r->nstreams = c.streams;
		*want = c.streams;
		*sp = s;
		int rc = rdma_resources(s, id->verbs, c.streams, nbufs, msg);
		if (rc < 0) {
			rdma_reject(id, NULL, 0);
			return rc;
		}
	}
	struct rdma *r = R(s);
	if (c.session != r->session || c.streams != s->nstreams || r->st[c.index].id ||
	    id->verbs != r->ctx) {
		rdma_reject(id, NULL, 0);
		return 0;
	}
	struct rstream *st = &r->st[c.index];
	st->id = id;
	id->context = st;
	int rc = make_qp(s, id, CTL_SLOTS + 2, r->quota + 2);
	if (rc < 0)
		return rc;
	for (int k = 0; k < r->quota; k++)
		if ((rc = tp_rdma_post_recv_data(s, c.index, c.index * r->quota + k)) < 0)
			return rc;
	/* the buffers beyond streams * quota stay unused on the receiver */
	struct rdma_conn_param cp = {
		.responder_resources = ev->param.conn.initiator_depth,
		.initiator_depth = ev->param.conn.responder_resources,
		.retry_count = 7, .rnr_retry_count = 7,
	};
	if (rdma_accept(id, &cp)) {
		log_err("RDMA accept: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/* A stream is up: send it our HELLO (challenge and credits). */
static int on_established(struct tp_session *s, struct rstream *st)
{
	struct rdma *r = R(s);
	uint8_t hb[TP_HELLO_LEN];
	st->established = 1;
	tp_hs_hello(&st->hello, s->msg_size, (uint32_t)r->quota);
	tp_hello_put(hb, &st->hello);
	return tp_rdma_send_ctl(r, (int)(st - r->st), TP_HELLO, 0, 0, hb, TP_HELLO_LEN);
}

/* Phase 1 of accept: connections. Events for all streams come on the
 * listener's channel until every stream of one session is established.
 * *sp is the session being assembled (NULL until the first connect request),
 * set also when this fails, for the caller to free. */
static int accept_streams(struct tp_rdma_listener *l, const struct tp_opts *o,
                          int timeout_ms, struct tp_session **sp)
{
	int want = 0, established = 0, rc = 0;
	while (want == 0 || established < want) {
		struct rdma_cm_event *ev;
		rc = next_event(l->ec, want ? 10000 : timeout_ms, &ev);
		if (rc < 0)
			return rc;
		struct rstream *st = ev->id->context;
		struct tp_session *s = *sp;
		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			rc = accept_stream(sp, o, ev, &want);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (st && s && st >= R(s)->st && st < R(s)->st + TP_MAX_STREAMS) {
				established++;
				rc = on_established(s, st);
			}
			break;
		case RDMA_CM_EVENT_REJECTED:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_DISCONNECTED:
			if (s)
				rc = -ECONNRESET;
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The session gets a channel of its own for DISCONNECTED events. */
static int own_channel(struct tp_session *s)
{
	struct rdma *r = R(s);
	if (!(r->ec = rdma_create_event_channel()))
		return -errno;
	r->own_ec = 1;
	fcntl(r->ec->fd, F_SETFL, fcntl(r->ec->fd, F_GETFL) | O_NONBLOCK);
	for (int i = 0; i < s->nstreams; i++)
		if (rdma_migrate_id(r->st[i].id, r->ec))
			return -errno;
	return 0;
}

/* Phase 2 of accept: every stream authenticates before any payload is taken. */
static int await_auth(struct tp_session *s)
{
	struct rdma *r = R(s);
	for (;;) {
		int authed = 0;
		for (int i = 0; i < s->nstreams; i++)
			authed += r->st[i].authed;
		if (authed == s->nstreams)
			return 0;
		int rc = tp_rdma_progress(s, 1, 5000);
		if (rc == 0)
			rc = -ETIMEDOUT;
		if (rc < 0)
			return rc;
	}
}

/* Accept failed with rc: say why, and free the half-made session s. */
static void accept_failed(struct tp_session *s, int rc)
{
	if (rc == -EACCES)
		log_err("rejected an RDMA connection: the sender does not know the key");
	else if (rc == -EPROTO)
		log_err("dropped an RDMA connection: not an rdcp sender");
	else if (rc != -ETIMEDOUT || s)
		log_err("RDMA accept: %s", strerror(-rc));
	if (s && R(s) && R(s)->err == 0 && rc == -EACCES) {
		/* let AUTH_FAIL reach the sender before we disconnect */
		tp_rdma_progress(s, 1, 200);
	}
	session_free(s);
}

int tp_rdma_accept(struct tp_rdma_listener *l, const struct tp_opts *o, int timeout_ms,
                   struct tp_session **out)
{
	struct tp_session *s = NULL;
	int rc = accept_streams(l, o, timeout_ms, &s);
	if (rc == 0)
		rc = own_channel(s);
	if (rc == 0)
		rc = await_auth(s);
	if (rc < 0) {
		accept_failed(s, rc);
		return rc;
	}
	*out = s;
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
		rc = rdma_resources(s, st->id->verbs, s->nstreams,
		                    tp_pool_count(o, s->nstreams, msg), msg);
		if (rc < 0)
			return rc;
	} else if (st->id->verbs != r->ctx) {
		log_err("%s: the streams resolve to different RDMA devices", host);
		return -EINVAL;
	}
	if ((rc = make_qp(s, st->id, s->nbufs + CTL_SLOTS + 2, CTL_SLOTS + 2)) < 0)
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
	int64_t deadline = tp_now_ms() + (o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000);
	int rc;
	for (;;) {
		struct tp_session *s = session_new(o, 1);
		if (!s) {
			rc = -ENOMEM;
			break;
		}
		struct rdma *r = R(s);
		s->nstreams = o->streams > 0 ? o->streams : 1;
		r->nstreams = s->nstreams;
		tp_random(&r->session, sizeof r->session);
		if (!(r->ec = rdma_create_event_channel())) {
			session_free(s);
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
		session_free(s);
		if (rc != -ECONNREFUSED || tp_now_ms() >= deadline)
			break;
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
	} else if (rc != -ENOMEM) {   /* registration failures said why already */
		log_err("cannot connect to %s port %u over RDMA: %s", host, port,
		        rc == -EPROTO ? "the peer does not speak the rdcp protocol"
		                      : strerror(-rc));
	}
	return rc;
}
