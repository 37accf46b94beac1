/*
 * A fan-out receiver (--relay, sync/fanout/fanout.c): besides taking what it needs,
 * it forwards every data message, as it comes, to the next host of the
 * chain (the tee, sync/fanout/tee.h), so the source sends each chunk once.
 * Here is the receiver's side of that conversation: the client says where
 * the next host listens in CTL_RELAY, after our CTL_DATA; the tee dials it
 * while we wait for our own sender, and we answer how that went.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/wire.h"
#include "sync/fanout/tee.h"
#include "sync/recv/recv_int.h"

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
	struct relay_msg rm;
	const char *why;
	if (relay_msg_decode(r->ctl->buf, n, &rm, &why) < 0) {
		explicit_bzero(&rm, sizeof rm);
		return recv_reject(s, "the client's message of where to forward the data %s", why);
	}
	struct tp_opts base = r->tp;
	rc = tee_open(&s->tee, &rm, &base, r->timeout * 1000,
	              r->o->contimeout > 0 ? r->o->contimeout * 1000 : 0);
	explicit_bzero(base.key, sizeof base.key);
	return rc;
}

int relay_linked(struct rstate *s)
{
	if (!s->r->o || !s->r->o->relay)
		return 0;
	int rc = tee_linked(s->tee);
	uint8_t st[4];
	put_u32(st, (uint32_t)-rc);
	return recv_ctl_send(s, CTL_RELAY, st, sizeof st);
}
