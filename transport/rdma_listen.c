/*
 * RDMA backend, the listener. A connect request with our private data starts
 * a candidate session (or joins the one its session id names); its streams
 * are accepted, get HELLO once established, and the candidate is handed out
 * when every stream has authenticated. Up to CAND_MAX candidates are
 * assembled at once, each with a deadline of its own, all moved on without
 * blocking by tp_accept()'s poll loop: a connect request with foreign private
 * data is rejected at once, a candidate that fails AUTH, goes away or stays
 * silent is dropped, and none of them stops the real sender's session.
 * A candidate holds a registered pool, so there are few; when all slots are
 * taken the oldest goes.
 *
 * Ids of refused requests are destroyed after their event is acked, and a
 * candidate is freed only while no event of its ids is held (librdmacm's
 * rdma_destroy_id() waits for those acks).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/wire.h"
#include "transport/rdma_int.h"

#define CAND_MAX   ((TP_RDMA_POLL_MAX - 1) / 2)   /* sessions assembled at once */
/* A wrong-key candidate stays until its AUTH_FAIL is out (the send completed:
 * on a reliable connection, the sender has it) or the sender left; at most
 * this long. Not a fixed short wait: freeing the queue pair before the send
 * went drops it, and the sender then sees a reset (exit 10), not the wrong
 * key (15); an emulated RDMA device under load can take far longer than
 * 200 ms to send it. A dying candidate is the first to give its slot to a
 * new request, so waiting costs no one else. */
#define LINGER_MS  TP_HS_MS
#define WHO_LEN    80

struct cand {
	struct tp_session *s;    /* NULL: free slot */
	int64_t due;
	int established;
	int migrated;            /* its CM events come on its own channel */
	int dying;               /* failed: freed at due, or once its AUTH_FAIL is out */
	char who[WHO_LEN];
};

struct tp_rdma_listener {
	struct rdma_event_channel *ec;
	struct rdma_cm_id *id;
	struct tp_opts o;
	struct tp_gate *gate;
	struct cand c[CAND_MAX];
};

int tp_rdma_listen(const char *addr, uint16_t port, const struct tp_opts *o,
                   struct tp_gate *g, struct tp_rdma_listener **out)
{
	struct tp_rdma_listener *l = calloc(1, sizeof *l);
	struct addrinfo hints = { .ai_family = addr ? AF_UNSPEC : AF_INET,
	                          .ai_flags = AI_PASSIVE }, *res = NULL;
	char ps[8];
	snprintf(ps, sizeof ps, "%u", port);
	int rc = -ENOMEM;
	if (!l)
		return rc;
	l->o = *o;
	l->o.peer_addr = NULL;   /* the gate has it */
	l->gate = g;
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
		log_err("RDMA listen on %s port %u: %s", addr ? addr : "*", port, strerror(errno));
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

uint16_t tp_rdma_listener_port(struct tp_rdma_listener *l)
{
	return ntohs(rdma_get_src_port(l->id));
}

static void cand_free(struct cand *c)
{
	tp_rdma_session_free(c->s);
	memset(c, 0, sizeof *c);
}

void tp_rdma_listener_free(struct tp_rdma_listener *l)
{
	if (!l)
		return;
	for (int i = 0; i < CAND_MAX; i++)
		cand_free(&l->c[i]);
	if (l->id)
		rdma_destroy_id(l->id);
	if (l->ec)
		rdma_destroy_event_channel(l->ec);
	free(l);
}

/* --- candidates --- */

/* Say why c failed and mark it for freeing (never here: an event of one of
 * its ids may be held). A wrong key lingers so that AUTH_FAIL leaves. */
static void cand_fail(struct tp_rdma_listener *l, struct cand *c, int rc)
{
	if (c->dying)
		return;
	if (rc == -EACCES)
		tp_gate_drop(l->gate, "rejected an RDMA connection from %s: it does not know "
		             "the key", c->who);
	else
		tp_gate_drop(l->gate, "dropped an RDMA connection from %s: %s", c->who,
		             rc == -EPROTO ? "not an rdcp sender" :
		             rc == -ETIMEDOUT ? "its session did not authenticate in time" :
		             rc == -ECONNRESET ? "it went away during the handshake" :
		             rc == -EBUSY ? "too many senders at once (the oldest goes)" :
		             strerror(-rc));
	c->dying = 1;
	c->due = clock_ms() + (rc == -EACCES ? LINGER_MS : 0);
}

static struct cand *cand_of_session(struct tp_rdma_listener *l, uint64_t session)
{
	for (int i = 0; i < CAND_MAX; i++)
		if (l->c[i].s && !l->c[i].dying && R(l->c[i].s)->session == session)
			return &l->c[i];
	return NULL;
}

static struct cand *cand_of_id(struct tp_rdma_listener *l, struct rdma_cm_id *id)
{
	for (int i = 0; i < CAND_MAX; i++)
		for (int k = 0; l->c[i].s && k < l->c[i].s->nstreams; k++)
			if (R(l->c[i].s)->st[k].id == id)
				return &l->c[i];
	return NULL;
}

/* A free slot, or the oldest candidate's (freed: called for a request of a
 * new id, so no event of its ids is held). */
static struct cand *cand_slot(struct tp_rdma_listener *l)
{
	struct cand *oldest = &l->c[0];
	for (int i = 0; i < CAND_MAX; i++) {
		if (!l->c[i].s)
			return &l->c[i];
		if (l->c[i].dying || l->c[i].due < oldest->due)
			oldest = &l->c[i];
	}
	cand_fail(l, oldest, -EBUSY);
	cand_free(oldest);
	return oldest;
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

/* A new candidate for the session pd names, on the device of id. If its
 * pool cannot be registered while another candidate holds one, that one
 * goes and we try once more; if it still fails, that is our problem (the
 * memlock limit), not the peer's: the error is returned. */
static int cand_new(struct tp_rdma_listener *l, const struct conn_pd *pd,
                    struct rdma_cm_id *id, const char *who, struct cand **out)
{
	struct cand *c = cand_slot(l);
	uint32_t msg = l->o.msg_size ? l->o.msg_size : TP_DEF_MSG_SIZE;
	int nbufs = tp_pool_count(&l->o, pd->streams, msg);
	for (int attempt = 0;; attempt++) {
		struct tp_session *s = tp_rdma_session_new(&l->o, 0);
		if (!s)
			return -ENOMEM;
		struct rdma *r = R(s);
		r->session = pd->session;
		r->quota = nbufs / pd->streams;
		s->nstreams = r->nstreams = pd->streams;
		int rc = tp_rdma_resources(s, id->verbs, pd->streams, nbufs, msg);
		if (rc == 0) {
			c->s = s;
			c->due = clock_ms() + TP_GROUP_MS;
			snprintf(c->who, sizeof c->who, "%s", who);
			*out = c;
			return 0;
		}
		tp_rdma_session_free(s);
		struct cand *other = NULL;
		for (int i = 0; i < CAND_MAX; i++)
			if (l->c[i].s && &l->c[i] != c)
				other = &l->c[i];
		if (attempt > 0 || !other)
			return rc;
		cand_fail(l, other, -EBUSY);
		cand_free(other);
	}
}

/* Accept the request of id as stream `index` of c's session: its queue pair,
 * its receive buffers, rdma_accept(). The session owns id from here on. */
static int accept_stream(struct cand *c, struct rdma_cm_event *ev, int index)
{
	struct tp_session *s = c->s;
	struct rdma *r = R(s);
	struct rstream *st = &r->st[index];
	st->id = ev->id;
	ev->id->context = st;
	int rc = tp_rdma_make_qp(s, ev->id, CTL_SLOTS + 2, r->quota + 2);
	for (int k = 0; rc == 0 && k < r->quota; k++)
		rc = tp_rdma_post_recv_data(s, index, index * r->quota + k);
	/* the buffers beyond streams * quota stay unused on the receiver */
	struct rdma_conn_param cp = {
		.responder_resources = ev->param.conn.initiator_depth,
		.initiator_depth = ev->param.conn.responder_resources,
		.retry_count = 7, .rnr_retry_count = 7,
	};
	if (rc == 0 && rdma_accept(ev->id, &cp))
		rc = -errno;
	return rc;
}

/*
 * A connect request: refused (not the allowed peer, not our private data,
 * not fitting its session), or a stream of a candidate, new or not. Sets
 * *destroy when the request's id is ours to destroy after the ack. 0, or an
 * error that is ours (see cand_new()).
 */
static int on_request(struct tp_rdma_listener *l, struct rdma_cm_event *ev, int *destroy)
{
	struct rdma_cm_id *id = ev->id;
	struct sockaddr *peer = rdma_get_peer_addr(id);
	char who[WHO_LEN];
	struct conn_pd pd;
	struct cand *c;
	int rc = 0;
	tp_addr_name(peer, who, sizeof who);
	if (!tp_gate_allows(l->gate, peer)) {
		tp_gate_drop(l->gate, "refused an RDMA connection from %s: not the allowed peer", who);
		goto reject;
	}
	if (pd_get(ev->param.conn.private_data, ev->param.conn.private_data_len, &pd) < 0) {
		tp_gate_drop(l->gate, "dropped an RDMA connection from %s: not an rdcp sender", who);
		goto reject;
	}
	if (!(c = cand_of_session(l, pd.session)) && (rc = cand_new(l, &pd, id, who, &c)) < 0)
		goto reject;
	struct rdma *r = R(c->s);
	if (pd.streams != c->s->nstreams || r->st[pd.index].id || id->verbs != r->ctx) {
		tp_gate_drop(l->gate, "dropped an RDMA connection from %s: not part of its "
		             "session (stream count, index or device)", who);
		goto reject;
	}
	if ((rc = accept_stream(c, ev, pd.index)) < 0)
		cand_fail(l, c, rc);   /* it owns id now */
	return 0;
reject:
	rdma_reject(id, NULL, 0);
	*destroy = 1;
	return rc;
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

/* An event on the listener's channel (every stream's, until its candidate
 * has all its streams and moves them to a channel of its own). */
static int on_event(struct tp_rdma_listener *l, struct rdma_cm_event *ev, int *destroy)
{
	struct cand *c;
	int rc;
	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		return on_request(l, ev, destroy);
	case RDMA_CM_EVENT_ESTABLISHED:
		if ((c = cand_of_id(l, ev->id)) && !c->dying) {
			c->established++;
			if ((rc = on_established(c->s, ev->id->context)) < 0)
				cand_fail(l, c, rc);
		}
		return 0;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_DISCONNECTED:
		if ((c = cand_of_id(l, ev->id))) {
			cand_fail(l, c, -ECONNRESET);
			c->due = clock_ms();   /* gone: nothing waits for its AUTH_FAIL */
		}
		return 0;
	default:
		return 0;
	}
}

/* Every stream is established: the candidate gets a channel of its own, so
 * its DISCONNECTED events reach it once it is a session. */
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

static int ctl_sends_out(struct tp_session *s)
{
	for (int i = 0; i < s->nstreams; i++)
		if (R(s)->st[i].ctl_busy)
			return 0;
	return 1;
}

/* Move a candidate on; 1 with *out once all its streams authenticated. */
static int cand_step(struct tp_rdma_listener *l, struct cand *c, struct tp_session **out)
{
	if (!c->s)
		return 0;
	int rc = tp_rdma_pump(c->s);
	int64_t now = clock_ms();
	if (!c->dying && rc < 0)
		cand_fail(l, c, rc);
	else if (!c->dying && now >= c->due)
		cand_fail(l, c, -ETIMEDOUT);
	if (c->dying) {
		/* its AUTH_FAIL is out, or the sender left (a migrated candidate
		 * hears it on its own channel), or it is time */
		if (now >= c->due || ctl_sends_out(c->s) || R(c->s)->peer_gone)
			cand_free(c);
		return 0;
	}
	struct tp_session *s = c->s;
	if (c->established == s->nstreams && !c->migrated) {
		if ((rc = own_channel(s)) < 0) {
			cand_fail(l, c, rc);
			return 0;
		}
		c->migrated = 1;
	}
	int authed = 0;
	for (int i = 0; i < s->nstreams; i++)
		authed += R(s)->st[i].authed;
	if (!c->migrated || authed < s->nstreams)
		return 0;
	*out = s;
	memset(c, 0, sizeof *c);
	return 1;
}

int tp_rdma_poll_fds(struct tp_rdma_listener *l, struct pollfd *p, int64_t *due)
{
	int n = 0;
	p[n++] = (struct pollfd){ l->ec->fd, POLLIN, 0 };
	for (int i = 0; i < CAND_MAX; i++) {
		struct cand *c = &l->c[i];
		if (!c->s)
			continue;
		p[n++] = (struct pollfd){ R(c->s)->cc->fd, POLLIN, 0 };
		if (R(c->s)->ec)
			p[n++] = (struct pollfd){ R(c->s)->ec->fd, POLLIN, 0 };
		if (c->due < *due)
			*due = c->due;
	}
	return n;
}

int tp_rdma_poll_step(struct tp_rdma_listener *l, const struct pollfd *p, int n,
                      struct tp_session **out)
{
	struct rdma_cm_event *ev;
	(void)n;   /* every candidate is pumped anyway: it is cheap */
	while ((p[0].revents & POLLIN) && rdma_get_cm_event(l->ec, &ev) == 0) {
		struct rdma_cm_id *id = ev->id;
		int destroy = 0, rc = on_event(l, ev, &destroy);
		rdma_ack_cm_event(ev);
		if (destroy)
			rdma_destroy_id(id);
		if (rc < 0)
			return rc;
	}
	for (int i = 0; i < CAND_MAX; i++) {
		int rc = cand_step(l, &l->c[i], out);
		if (rc != 0)
			return rc;
	}
	return 0;
}
