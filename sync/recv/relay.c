/*
 * A fan-out receiver (--relay, sync/fanout/fanout.c): besides taking what it needs,
 * it forwards every data message, as it comes, to the next host of the
 * chain, so the source sends each chunk once. The client says where the
 * next host listens in CTL_RELAY, after our CTL_DATA; we connect to it while
 * we wait for our own sender, and answer how that went.
 *
 * A next host that dies is stepped over: CTL_RELAY also names the host
 * after it, which keeps its listener open for that (RELAY_F_REJOIN). We
 * dial it and go on forwarding from where we are; it takes the new session
 * in place of the broken one (take.c, rejoin()). What was on its way through
 * the dead host is lost: the re-linked host marks the gap down the chain
 * (SYNC_GAP_ID), each host after it drops an archive that is not whole yet,
 * and a host that ends with files incomplete says so with exit 10; the
 * client's second round sends it only what it still lacks. A host whose
 * feed is lost for good marks the gap and ends its next host's stream
 * cleanly (take.c), so the hosts after it do not wait in turn.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/wire.h"
#include "sync/recv/recv_int.h"

struct dial {
	struct ctl_data cd;
	struct tp_opts o;
	struct tp_session *ts;
	int rc;
};

static void *dial_main(void *arg)
{
	struct dial *d = arg;
	d->rc = tp_connect(d->cd.addr, d->cd.port, &d->o, &d->ts);
	return NULL;
}

struct relay {
	struct dial d;            /* the next host */
	int has_next;
	struct ctl_data alt;      /* the host after it: where to re-link */
	int has_alt, relinked;
	int rejoin;               /* a host two before may re-link to us */
	int hop_ms;               /* CTL_RELAY's limit for our hop (0: none) */
	pthread_t th;
	int dialing;
};

int relay_begin(struct rstate *s)
{
	struct role *r = s->r;
	uint8_t type;
	size_t n;
	if (!r->o || !r->o->relay)
		return 0;
	int rc = sync_recv(r, "client", &type, &n);
	if (rc < 0)
		return rc;
	if (type == CTL_ERROR) {
		s->res->code = sync_peer_error(r->ctl, n, "the sender gave up: ");
		return -ECONNABORTED;
	}
	if (type != CTL_RELAY)
		return recv_reject(s, "the client sent a message of type %u instead of where "
		                   "to forward the data", type);
	struct relay *rl = calloc(1, sizeof *rl);
	if (!rl)
		return -ENOMEM;
	struct relay_msg rm;
	const char *why;
	if (relay_msg_decode(r->ctl->buf, n, &rm, &why) < 0) {
		explicit_bzero(&rm, sizeof rm);
		free(rl);
		return recv_reject(s, "the client's message of where to forward the data %s", why);
	}
	rl->rejoin = !!(rm.flags & RELAY_F_REJOIN);
	rl->has_next = rm.has_next;
	rl->has_alt = rm.has_alt;
	rl->d.cd = rm.next;
	rl->alt = rm.alt;
	rl->hop_ms = (int)rm.hop_ms;
	explicit_bzero(&rm, sizeof rm);
	s->relay = rl;
	if (!rl->has_next)
		return 0;   /* the last host of the chain */
	rl->d.o = r->tp;
	/* One stream per hop: a relay forwards messages in the order they
	 * came, which over several upstream streams is not each stream's
	 * offset order that the next host's per-stream buffer quota relies on
	 * (measured: --streams 4 hung a 3-host chain), and a re-link's gap
	 * mark could be overtaken by a repeat */
	rl->d.o.streams = 1;
	tp_key_derive(rl->d.cd.key, 32, rl->d.o.key);
	explicit_bzero(rl->d.cd.key, sizeof rl->d.cd.key);
	rl->d.o.msg_size = SYNC_MSG_SIZE;
	rl->d.o.pool_size = SYNC_POOL_SIZE;
	/* the client's shorter limit for this hop: down the chain each host's
	 * is shorter than the one before it, so when a link goes silent (no
	 * reset) the host right before it gives up first and re-links, while
	 * the hosts before it, and the sender, still wait (hub.c, hop_ms()) */
	rl->d.o.io_timeout_ms = rl->hop_ms ? rl->hop_ms : r->timeout * 1000;
	if (r->o->contimeout > 0)   /* else the transport's 10 s */
		rl->d.o.connect_timeout_ms = r->o->contimeout * 1000;
	rl->d.o.verbose = -1;
	/* side by side with the wait for our own sender: each host of the
	 * chain dials the next while it is dialled */
	if (pthread_create(&rl->th, NULL, dial_main, &rl->d) == 0) {
		rl->dialing = 1;
	} else {
		dial_main(&rl->d);
	}
	return 0;
}

int relay_rejoinable(const struct rstate *s)
{
	return s->relay && s->relay->rejoin;
}

int relay_linked(struct rstate *s)
{
	struct relay *rl = s->relay;
	if (!s->r->o || !s->r->o->relay)
		return 0;
	int rc = 0;
	if (rl && rl->dialing) {
		pthread_join(rl->th, NULL);
		rl->dialing = 0;
	}
	if (rl && rl->has_next) {
		rc = rl->d.rc;
		s->down = rl->d.ts;
		if (rc < 0) {
			char shown[300];
			log_err("cannot forward the data to the next host (%s port %u): %s",
			        log_path(shown, sizeof shown, rl->d.cd.addr), rl->d.cd.port,
			        strerror(-rc));
		}
	}
	uint8_t st[4];
	put_u32(st, (uint32_t)-rc);
	return recv_ctl_send(s, CTL_RELAY, st, sizeof st);
}

/* A copy of m into session ts. 0 or -errno. */
static int forward_one(struct tp_session *ts, const struct tp_msg *m)
{
	struct tp_msg *d;
	int rc = tp_msg_get(ts, &d);
	if (rc == 0 && m->len > d->cap) {
		tp_msg_put(ts, d);
		rc = -EMSGSIZE;
	}
	if (rc == 0) {
		memcpy(d->data, m->data, m->len);
		d->len = m->len;
		d->id = m->id;
		d->off = m->off;
		rc = tp_msg_send(ts, d);
	}
	return rc;
}

/* The next host failed us (why): dial the one after it, once, and make it
 * our next. Not when the next host is alive and said why it stopped (its
 * disk is full, our data broke its protocol), nor for our own lack of
 * memory. 0, or -1 (said). */
static int relink(struct rstate *s, int why)
{
	struct relay *rl = s->relay;
	char shown[300];
	if (!rl || !rl->has_alt || rl->relinked || why == -EMSGSIZE || why == -EPROTO ||
	    why == -ENOSPC || why == -EDQUOT || why == -ENOMEM || why == -EACCES)
		return -1;
	rl->relinked = 1;
	log_err("forwarding the data to the next host failed: %s; going on with the host "
	        "after it (%s port %u)", strerror(-why),
	        log_path(shown, sizeof shown, rl->alt.addr), rl->alt.port);
	tp_close(s->down);
	s->down = NULL;
	struct tp_opts o = rl->d.o;
	o.connect_timeout_ms = 2000;   /* it listens already: a refusal means it is gone */
	tp_key_derive(rl->alt.key, 32, o.key);
	explicit_bzero(rl->alt.key, sizeof rl->alt.key);
	int rc = tp_connect(rl->alt.addr, rl->alt.port, &o, &s->down);
	explicit_bzero(o.key, sizeof o.key);
	if (rc < 0) {   /* (the transport said why, naming it) */
		s->down = NULL;
		s->down_err = rc;
		return -1;
	}
	return 0;
}

void relay_forward(struct rstate *s, const struct tp_msg *m)
{
	if (!s->down || s->down_err)
		return;
	int rc = forward_one(s->down, m);
	if (rc < 0 && relink(s, rc) == 0)
		rc = forward_one(s->down, m);
	if (rc < 0 && !s->down_err) {   /* the client retries the hosts after us */
		s->down_err = rc;
		log_err("forwarding the data to the next host failed: %s", strerror(-rc));
	}
}

void relay_gap(struct rstate *s)
{
	static uint8_t zero;
	struct tp_msg m = { .data = &zero, .len = 1, .cap = 1, .id = SYNC_GAP_ID };
	relay_forward(s, &m);
}

void relay_end(struct rstate *s, int ok)
{
	if (s->down && ok && !s->down_err) {
		int rc = tp_finish(s->down);
		if (rc < 0 && relink(s, rc) == 0)
			rc = tp_finish(s->down);   /* the host after it: its stream's end */
		if (rc < 0)
			s->down_err = rc;   /* its own report says why */
	}
	tp_close(s->down);
	s->down = NULL;
	if (s->relay && s->relay->dialing)
		pthread_join(s->relay->th, NULL);
	if (s->relay)
		explicit_bzero(&s->relay->alt, sizeof s->relay->alt);
	free(s->relay);
	s->relay = NULL;
}
