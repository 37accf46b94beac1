/*
 * A fan-out host's tee (--relay): every data message it receives is also
 * forwarded, as it comes, to the next host of the chain, so the source
 * sends each chunk once. The receiving room calls it from its data loop
 * (recv/take.c) and knows only this header; the tee knows nothing of the
 * receiver (its state, its files): a session, messages, and where the
 * next host and the one after it listen (CTL_RELAY).
 *
 * A next host that dies is stepped over: the tee dials the host after it
 * once (it keeps its listener open for that, RELAY_F_REJOIN) and goes on
 * forwarding from where it is.
 */
#ifndef RDCP_SYNC_TEE_H
#define RDCP_SYNC_TEE_H

#include "sync/wire/proto.h"
#include "transport/transport.h"

struct tee;

/* A tee for CTL_RELAY's rm (its keys are wiped from rm): the next host
 * dialled on a thread of its own, side by side with the wait for our own
 * sender, with base's transport options (one stream per hop), the hop's
 * limit (rm->hop_ms, else io_timeout_ms) and connect_ms (0: the
 * transport's). *out NULL for the last host of a chain (nothing to dial).
 * 0 or -ENOMEM. */
int  tee_open(struct tee **out, struct relay_msg *rm, const struct tp_opts *base,
              int io_timeout_ms, int connect_ms);
/* A host two before us may re-link to us (keep the listener). */
int  tee_rejoinable(const struct tee *t);
/* Wait for the dial: 0, or its error (said, naming the next host). */
int  tee_linked(struct tee *t);
/* Forwarding still works (a next host, no failure so far). */
int  tee_forwarding(const struct tee *t);
/* A copy of m to the next host (re-linking once past a dead one); a
 * failure is said once and ends forwarding. */
void tee_forward(struct tee *t, const struct tp_msg *m);
/* The gap mark (SYNC_GAP_ID): the stream lost data on its way. */
void tee_gap(struct tee *t);
/* The stream's end (ok: finished cleanly down the chain too), then the
 * tee freed. NULL: nothing. */
void tee_close(struct tee *t, int ok);

#endif
