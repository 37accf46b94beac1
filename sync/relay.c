/*
 * A fan-out receiver (--relay, sync/fanout.c): besides taking what it needs,
 * it forwards every data message, as it comes, to the next host of the
 * chain, so the source sends each chunk once. The client says where the
 * next host listens in CTL_RELAY, after our CTL_DATA; we connect to it while
 * we wait for our own sender, and answer how that went. A next host that
 * fails or goes away is let go: we finish our own part, and the client
 * retries the hosts after it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/wire.h"
#include "sync/recv_int.h"

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
	struct dial d;
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
	if (n == 0)
		return 0;   /* the last host of the chain */
	struct relay *rl = calloc(1, sizeof *rl);
	if (!rl)
		return -ENOMEM;
	if (ctl_data_decode(r->ctl->buf, n, &rl->d.cd) < 0 || !rl->d.cd.addr[0]) {
		free(rl);
		return recv_reject(s, "the client's message of where to forward the data is "
		                   "malformed");
	}
	rl->d.o = r->tp;
	tp_key_derive(rl->d.cd.key, 32, rl->d.o.key);
	explicit_bzero(rl->d.cd.key, sizeof rl->d.cd.key);
	rl->d.o.msg_size = SYNC_MSG_SIZE;
	rl->d.o.pool_size = SYNC_POOL_SIZE;
	rl->d.o.io_timeout_ms = r->timeout * 1000;
	rl->d.o.verbose = -1;
	/* side by side with the wait for our own sender: each host of the
	 * chain dials the next while it is dialled */
	if (pthread_create(&rl->th, NULL, dial_main, &rl->d) == 0) {
		rl->dialing = 1;
	} else {
		dial_main(&rl->d);
	}
	s->relay = rl;
	return 0;
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
	if (rl) {
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

void relay_forward(struct rstate *s, const struct tp_msg *m)
{
	struct tp_msg *d;
	if (!s->down || s->down_err)
		return;
	int rc = tp_msg_get(s->down, &d);
	if (rc == 0 && m->len > d->cap) {
		tp_msg_put(s->down, d);
		rc = -EMSGSIZE;
	}
	if (rc == 0) {
		memcpy(d->data, m->data, m->len);
		d->len = m->len;
		d->id = m->id;
		d->off = m->off;
		rc = tp_msg_send(s->down, d);
	}
	if (rc < 0) {   /* the next host is gone: the client retries it and the rest */
		s->down_err = rc;
		log_err("forwarding the data to the next host failed: %s", strerror(-rc));
	}
}

void relay_end(struct rstate *s, int ok)
{
	if (s->down && ok && !s->down_err) {
		int rc = tp_finish(s->down);
		if (rc < 0)
			s->down_err = rc;   /* its own report says why */
	}
	tp_close(s->down);
	s->down = NULL;
	if (s->relay && s->relay->dialing)
		pthread_join(s->relay->th, NULL);
	free(s->relay);
	s->relay = NULL;
}
