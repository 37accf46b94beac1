/* Private to the RDMA backend: the session state shared by rdma_conn.c
 * (set-up, connect and teardown), rdma_listen.c (the listener) and
 * rdma_data.c (the data path). */
#ifndef RDCP_RDMA_INT_H
#define RDCP_RDMA_INT_H

#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>

#include "transport/tp_int.h"

#define CTL_SLOTS   8                          /* per stream, each direction */
#define CTL_LEN     (TP_HDR_LEN + TP_CTRL_MAX)

/* The connect request's private data: magic "RDCM" (4), version (2), stream
 * count (1), stream index (1), session id (8). It lets the receiver size its
 * pool before the first AUTH arrives; it is not trusted for anything else. */
#define PD_MAGIC    0x5244434du
#define PD_LEN      16

struct rstream {
	struct rdma_cm_id *id;
	int credits;          /* sender: messages we may still send */
	int pending;          /* receiver: buffers re-posted, not yet announced */
	int ctl_busy;         /* control send slots in flight (bitmask) */
	uint64_t msgs, bytes;
	int ended;
	int established;
	int authed;
	struct tp_hello hello;   /* our challenge (receiver) / theirs (sender) */
	struct tp_auth auth;
};

struct rdma {
	struct rdma_event_channel *ec;
	int own_ec;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_mr *mr, *hmr, *cmr;
	uint8_t *ctl;                 /* [stream][recv slots | send slots][CTL_LEN] */
	struct rstream st[TP_MAX_STREAMS];
	int sender;
	int quota;                    /* receiver: buffers per stream */
	int free_head;
	int ready_head, ready_tail;
	int ended;
	int err;
	int unacked;
	int verdict_seen, verdict;
	int peer_gone;      /* DISCONNECTED seen; the CQ may still hold its last words */
	int rr;
	int nstreams;
	uint64_t session;
	/* released buffers, from any thread, re-posted by the progress loop */
	pthread_mutex_t rel_mu;
	int rel_head;
	int efd;
};

static inline struct rdma *R(struct tp_session *s) { return s->be; }

/* --- rdma_data.c --- */

/* The operations of an RDMA session (tp_session.ops). */
extern const struct tp_ops tp_rdma_ops;

/* Post receive buffer i of the pool on stream (receiver, data messages). */
int  tp_rdma_post_recv_data(struct tp_session *s, int stream, int i);
/* Post control receive slot `slot` of stream (sender). */
int  tp_rdma_post_recv_ctl(struct rdma *r, int stream, int slot);
/* Send a control message on stream (if a slot is free: else -EAGAIN).
 * Any credits we owe the peer ride along. */
int  tp_rdma_send_ctl(struct rdma *r, int stream, uint8_t type, uint64_t id,
                      uint64_t off, const void *payload, uint32_t len);
/*
 * Make progress: handle completions. If there were none and block is set,
 * wait (timeout_ms, -1 forever) until at least one is handled.
 * Returns the number handled (0 only on timeout) or a negative error.
 */
int  tp_rdma_progress(struct tp_session *s, int block, int timeout_ms);
/*
 * Progress without blocking, for a session being set up whose channels the
 * listener's poll loop watches: take the channel events (CQ and, if it has
 * one, CM), handle every completion, re-arm the CQ. The number handled, or
 * the session's error.
 */
int  tp_rdma_pump(struct tp_session *s);

/* --- rdma_conn.c --- */

/* Tear down the backend state of s (its pool stays: tp_pool_free()). */
void tp_rdma_close(struct tp_session *s);
/* A session with its backend state (no verbs resources yet); NULL: no memory. */
struct tp_session *tp_rdma_session_new(const struct tp_opts *o, int sender);
/* tp_rdma_close() and the pool; NULL is a no-op. */
void tp_rdma_session_free(struct tp_session *s);
/* Verbs resources for a session on ctx: PD, CQ (armed), pool, registrations.
 * 0, or a negative error (said why: e.g. the memlock limit). */
int  tp_rdma_resources(struct tp_session *s, struct ibv_context *ctx, int streams,
                       int nbufs, uint32_t msg_size);
/* An RC queue pair on id with these work request caps. */
int  tp_rdma_make_qp(struct tp_session *s, struct rdma_cm_id *id, int send_wr, int recv_wr);

#endif
