/*
 * A fan-out host's tee (sync/fanout/tee.h): the next host dialled while we
 * wait for our own sender, every data message copied to it as it comes,
 * a dead next host stepped over once by dialling the one after it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "sync/fanout/tee.h"

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

struct tee {
	struct dial d;            /* the next host */
	int has_next;
	struct ctl_data alt;      /* the host after it: where to re-link */
	int has_alt, relinked;
	int rejoin;               /* a host two before may re-link to us */
	int hop_ms;               /* CTL_RELAY's limit for our hop (0: none) */
	pthread_t th;
	int dialing;
	struct tp_session *down;   /* every data message is forwarded here */
	int down_err;              /* it failed: no more forwarding */
};

int tee_open(struct tee **out, struct relay_msg *rm, const struct tp_opts *base,
             int io_timeout_ms, int connect_ms)
{
	struct tee *rl = calloc(1, sizeof *rl);
	*out = rl;
	if (!rl) {
		explicit_bzero(rm, sizeof *rm);
		return -ENOMEM;
	}
	rl->rejoin = !!(rm->flags & RELAY_F_REJOIN);
	rl->has_next = rm->has_next;
	rl->has_alt = rm->has_alt;
	rl->d.cd = rm->next;
	rl->alt = rm->alt;
	rl->hop_ms = (int)rm->hop_ms;
	explicit_bzero(rm, sizeof *rm);
	if (!rl->has_next)
		return 0;   /* the last host of the chain */
	rl->d.o = *base;
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
	rl->d.o.io_timeout_ms = rl->hop_ms ? rl->hop_ms : io_timeout_ms;
	if (connect_ms > 0)   /* else the transport's 10 s */
		rl->d.o.connect_timeout_ms = connect_ms;
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

int tee_rejoinable(const struct tee *t)
{
	return t && t->rejoin;
}

int tee_linked(struct tee *rl)
{
	int rc = 0;
	if (rl && rl->dialing) {
		pthread_join(rl->th, NULL);
		rl->dialing = 0;
	}
	if (rl && rl->has_next) {
		rc = rl->d.rc;
		rl->down = rl->d.ts;
		if (rc < 0) {
			char shown[300];
			log_err("cannot forward the data to the next host (%s port %u): %s",
			        log_path(shown, sizeof shown, rl->d.cd.addr), rl->d.cd.port,
			        strerror(-rc));
		}
	}
	return rc;
}

int tee_forwarding(const struct tee *t)
{
	return t && t->down && !t->down_err;
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
static int relink(struct tee *rl, int why)
{
	char shown[300];
	if (!rl || !rl->has_alt || rl->relinked || why == -EMSGSIZE || why == -EPROTO ||
	    why == -ENOSPC || why == -EDQUOT || why == -ENOMEM || why == -EACCES)
		return -1;
	rl->relinked = 1;
	log_err("forwarding the data to the next host failed: %s; going on with the host "
	        "after it (%s port %u)", strerror(-why),
	        log_path(shown, sizeof shown, rl->alt.addr), rl->alt.port);
	tp_close(rl->down);
	rl->down = NULL;
	struct tp_opts o = rl->d.o;
	o.connect_timeout_ms = 2000;   /* it listens already: a refusal means it is gone */
	tp_key_derive(rl->alt.key, 32, o.key);
	explicit_bzero(rl->alt.key, sizeof rl->alt.key);
	int rc = tp_connect(rl->alt.addr, rl->alt.port, &o, &rl->down);
	explicit_bzero(o.key, sizeof o.key);
	if (rc < 0) {   /* (the transport said why, naming it) */
		rl->down = NULL;
		rl->down_err = rc;
		return -1;
	}
	return 0;
}

void tee_forward(struct tee *rl, const struct tp_msg *m)
{
	if (!tee_forwarding(rl))
		return;
	int rc = forward_one(rl->down, m);
	if (rc < 0 && relink(rl, rc) == 0)
		rc = forward_one(rl->down, m);
	if (rc < 0 && !rl->down_err) {   /* the client retries the hosts after us */
		rl->down_err = rc;
		log_err("forwarding the data to the next host failed: %s", strerror(-rc));
	}
}

void tee_gap(struct tee *t)
{
	static uint8_t zero;
	struct tp_msg m = { .data = &zero, .len = 1, .cap = 1, .id = SYNC_GAP_ID };
	tee_forward(t, &m);
}

void tee_close(struct tee *rl, int ok)
{
	if (!rl)
		return;
	if (rl->down && ok && !rl->down_err) {
		int rc = tp_finish(rl->down);
		if (rc < 0 && relink(rl, rc) == 0)
			rc = tp_finish(rl->down);   /* the host after it: its stream's end */
		if (rc < 0)
			rl->down_err = rc;   /* its own report says why */
	}
	tp_close(rl->down);
	rl->down = NULL;
	if (rl->dialing)
		pthread_join(rl->th, NULL);
	explicit_bzero(&rl->alt, sizeof rl->alt);
	free(rl);
}
