/*
 * RDMA backend: librdmacm sets connections up (InfiniBand, RoCE, iWARP
 * alike), libibverbs moves the data with SEND/RECV on RC queue pairs.
 *
 * Memory: one pool per session (payloads, page-aligned) plus a header array
 * and control slots, each registered ONCE when the session is made. A data
 * message is two SGEs: its 32-byte header slot and its payload buffer, so the
 * sender reads file data straight into registered memory and the receiver
 * hands out the very buffer the NIC wrote.
 *
 * Flow control: the receiver posts `quota` receive buffers per stream and
 * announces them (HELLO.credits); the sender spends one credit per message
 * and gets them back in CREDIT messages (or the credits field of any header)
 * as the receiver re-posts released buffers. Credits are returned in batches
 * and always before the receiver blocks, so neither side can wait on the
 * other forever. Sends are signalled: each completion frees one buffer.
 *
 * No threads: all progress happens inside the API calls, which poll the CQ
 * (poll; arm; poll again; only then block on the channel, acking events in
 * batches) and watch the CM channel for the peer going away.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/wire.h"
#include "transport/tp_int.h"

#define CTL_SLOTS   8                          /* per stream, each direction */
#define CTL_LEN     (TP_HDR_LEN + TP_CTRL_MAX)
#define PD_MAGIC    0x5244434du                /* "RDCM": connect private data */
#define PD_LEN      16
#define EV_ACK_BATCH 16

enum wr_kind { WR_SEND_DATA = 1, WR_SEND_CTL, WR_RECV_DATA, WR_RECV_CTL };

static uint64_t wr_id(enum wr_kind k, int stream, uint32_t idx)
{
	return (uint64_t)k << 56 | (uint64_t)stream << 48 | idx;
}

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

static struct rdma *R(struct tp_session *s) { return s->be; }
#define R_NSTREAMS(r) ((r)->nstreams)

static void set_err(struct rdma *r, int err)
{
	if (!r->err)
		r->err = err;
}

int tp_rdma_available(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (l)
		ibv_free_device_list(l);
	return n > 0;
}

static uint8_t *ctl_slot(struct rdma *r, int stream, int send, int slot)
{
	return r->ctl + ((size_t)stream * 2 * CTL_SLOTS + (send ? CTL_SLOTS : 0) + (size_t)slot) * CTL_LEN;
}

/* --- memory --- */

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

/* --- posting --- */

static int post_recv_data(struct tp_session *s, int stream, int i)
{
	struct rdma *r = R(s);
	struct tp_buf *b = &s->bufs[i];
	struct ibv_sge sg[2] = {
		{ (uintptr_t)b->hdr, TP_HDR_LEN, r->hmr->lkey },
		{ (uintptr_t)b->m.data, s->msg_size, r->mr->lkey },
	};
	struct ibv_recv_wr wr = { .wr_id = wr_id(WR_RECV_DATA, stream, (uint32_t)i),
	                          .sg_list = sg, .num_sge = 2 }, *bad;
	b->owner = stream;
	int rc = ibv_post_recv(r->st[stream].id->qp, &wr, &bad);
	return rc ? -rc : 0;
}

static int post_recv_ctl(struct rdma *r, int stream, int slot)
{
	struct ibv_sge sg = { (uintptr_t)ctl_slot(r, stream, 0, slot), CTL_LEN, r->cmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id(WR_RECV_CTL, stream, (uint32_t)slot),
	                          .sg_list = &sg, .num_sge = 1 }, *bad;
	int rc = ibv_post_recv(r->st[stream].id->qp, &wr, &bad);
	return rc ? -rc : 0;
}

/* Send a control message on stream (if a slot is free: else -EAGAIN).
 * Any credits we owe the peer ride along. */
static int send_ctl(struct rdma *r, int stream, uint8_t type, uint64_t id, uint64_t off,
                    const void *payload, uint32_t len)
{
	struct rstream *st = &r->st[stream];
	int slot = 0;
	while (slot < CTL_SLOTS && (st->ctl_busy & (1 << slot)))
		slot++;
	if (slot == CTL_SLOTS)
		return -EAGAIN;
	uint8_t *p = ctl_slot(r, stream, 1, slot);
	tp_hdr_put(p, &(struct tp_hdr){ .type = type, .len = len, .id = id, .off = off,
	                                .credits = (uint32_t)st->pending });
	if (len)
		memcpy(p + TP_HDR_LEN, payload, len);
	struct ibv_sge sg = { (uintptr_t)p, TP_HDR_LEN + len, r->cmr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id(WR_SEND_CTL, stream, (uint32_t)slot),
	                          .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
	                          .send_flags = IBV_SEND_SIGNALED }, *bad;
	int rc = ibv_post_send(st->id->qp, &wr, &bad);
	if (rc)
		return -rc;
	st->pending = 0;
	st->ctl_busy |= 1 << slot;
	return 0;
}

/* --- completions --- */

static void on_recv_data(struct tp_session *s, int stream, int i, uint32_t byte_len)
{
	struct rdma *r = R(s);
	struct rstream *st = &r->st[stream];
	struct tp_buf *b = &s->bufs[i];
	struct tp_hdr h;
	if (byte_len < TP_HDR_LEN || tp_hdr_get(b->hdr, &h) < 0 ||
	    h.len != byte_len - TP_HDR_LEN || h.len > s->msg_size) {
		set_err(r, -EPROTO);
		return;
	}
	switch (h.type) {
	case TP_DATA:
		if (!st->authed)
			break;   /* no payload before authentication: dropped below */
		b->m.len = h.len;
		b->m.id = h.id;
		b->m.off = h.off;
		b->m.stream = stream;
		st->msgs++;
		st->bytes += h.len;
		b->next = -1;
		if (r->ready_tail < 0)
			r->ready_head = i;
		else
			s->bufs[r->ready_tail].next = i;
		r->ready_tail = i;
		return;
	case TP_AUTH: {
		uint8_t ok[TP_MAC_LEN];
		int rc = st->authed ? -EPROTO
		         : tp_hs_check(s->key, &st->hello, b->m.data, h.len, &st->auth, ok);
		if (rc == 0 && st->auth.session != r->session)
			rc = -EPROTO;
		if (rc == 0) {
			st->authed = 1;
			st->pending++;   /* this buffer goes straight back */
			post_recv_data(s, stream, i);
			rc = send_ctl(r, stream, TP_AUTH_OK, 0, 0, ok, TP_MAC_LEN);
			if (rc < 0)
				set_err(r, rc);
			return;
		}
		if (rc == -EACCES)
			send_ctl(r, stream, TP_AUTH_FAIL, 0, 0, NULL, 0);
		set_err(r, rc);
		return;
	}
	case TP_END:
		if (!st->authed || h.id != st->msgs || h.off != st->bytes) {
			set_err(r, -EPROTO);
			return;
		}
		st->ended = 1;
		r->ended++;
		post_recv_data(s, stream, i);
		return;
	default:
		break;
	}
	set_err(r, -EPROTO);
}

static void on_recv_ctl(struct tp_session *s, int stream, int slot, uint32_t byte_len)
{
	struct rdma *r = R(s);
	struct rstream *st = &r->st[stream];
	uint8_t *p = ctl_slot(r, stream, 0, slot);
	struct tp_hdr h;
	if (byte_len < TP_HDR_LEN || tp_hdr_get(p, &h) < 0 || h.len != byte_len - TP_HDR_LEN ||
	    h.credits > 4096) {
		set_err(r, -EPROTO);
		return;
	}
	st->credits += (int)h.credits;
	switch (h.type) {
	case TP_HELLO:
		if (tp_hello_get(p + TP_HDR_LEN, h.len, &st->hello) < 0 || st->established > 1)
			set_err(r, -EPROTO);
		else {
			st->established = 2;   /* HELLO seen */
			st->credits = (int)st->hello.credits;
		}
		break;
	case TP_AUTH_OK:
		if (tp_hs_confirm(s->key, &st->hello, &st->auth, p + TP_HDR_LEN, h.len) < 0)
			set_err(r, -EACCES);
		else
			st->authed = 1;
		break;
	case TP_AUTH_FAIL:
		set_err(r, -EACCES);
		break;
	case TP_CREDIT:
		break;
	case TP_VERDICT:
		if (h.id >= 4096) {
			set_err(r, -EPROTO);
			break;
		}
		r->verdict_seen = 1;
		r->verdict = (int)h.id;
		s->peer_status = (int)h.id;
		if (h.id)
			set_err(r, -(int)h.id);
		break;
	default:
		set_err(r, -EPROTO);
	}
	if (post_recv_ctl(r, stream, slot) < 0)
		set_err(r, -EIO);
}

static void on_wc(struct tp_session *s, const struct ibv_wc *wc)
{
	struct rdma *r = R(s);
	int kind = (int)(wc->wr_id >> 56), stream = (int)(wc->wr_id >> 48) & 0xff;
	uint32_t idx = (uint32_t)wc->wr_id;
	if (wc->status != IBV_WC_SUCCESS) {
		if (wc->status == IBV_WC_WR_FLUSH_ERR)
			set_err(r, -ECONNRESET);   /* the queue pair is being torn down */
		else if (!r->err) {
			log_err("RDMA stream %d: %s", stream, ibv_wc_status_str(wc->status));
			set_err(r, wc->status == IBV_WC_RETRY_EXC_ERR ||
			           wc->status == IBV_WC_RNR_RETRY_EXC_ERR ? -ECONNRESET : -EIO);
		}
		return;
	}
	switch (kind) {
	case WR_SEND_DATA:
		s->bufs[idx].next = r->free_head;
		r->free_head = (int)idx;
		break;
	case WR_SEND_CTL:
		r->st[stream].ctl_busy &= ~(1 << idx);
		break;
	case WR_RECV_DATA:
		on_recv_data(s, stream, (int)idx, wc->byte_len);
		break;
	case WR_RECV_CTL:
		on_recv_ctl(s, stream, (int)idx, wc->byte_len);
		break;
	}
}

static int poll_cq(struct tp_session *s)
{
	struct rdma *r = R(s);
	struct ibv_wc wc[16];
	int n, total = 0;
	while ((n = ibv_poll_cq(r->cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++)
			on_wc(s, &wc[i]);
		total += n;
	}
	if (n < 0)
		set_err(r, -EIO);
	return total;
}

static void on_cm_event(struct rdma *r, struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		/* after the verdict (sender) or every END (receiver) it is just
		 * the peer closing; before, it is the peer going away */
		r->peer_gone = 1;   /* judged by progress() once the CQ is drained */
		break;
	default:
		break;
	}
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait once for the CQ channel or the CM channel; handle what woke us. */
static int wait_once(struct rdma *r, int timeout_ms)
{
	struct pollfd p[3] = { { r->cc->fd, POLLIN, 0 }, { r->ec->fd, POLLIN, 0 },
	                       { r->efd, POLLIN, 0 } };
	int rc = poll(p, 3, timeout_ms);
	if (rc < 0 && errno != EINTR)
		return -errno;
	if (p[0].revents & POLLIN) {
		struct ibv_cq *cq;
		void *ctx;
		while (ibv_get_cq_event(r->cc, &cq, &ctx) == 0)
			if (++r->unacked >= EV_ACK_BATCH) {
				ibv_ack_cq_events(r->cq, (unsigned)r->unacked);
				r->unacked = 0;
			}
	}
	if (p[1].revents & POLLIN) {
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(r->ec, &ev) == 0) {
			on_cm_event(r, ev);
			rdma_ack_cm_event(ev);
		}
	}
	return (p[2].revents & POLLIN) ? 1 : 0;
}

static void send_credit_batch(struct rdma *r, int stream)
{
	int batch = r->quota / 4 > 0 ? r->quota / 4 : 1;
	if (r->st[stream].pending >= batch)
		send_ctl(r, stream, TP_CREDIT, 0, 0, NULL, 0);   /* -EAGAIN: later */
}

/* Re-post what other threads released; returns how many. */
static int drain_released(struct tp_session *s)
{
	struct rdma *r = R(s);
	uint64_t junk;
	if (read(r->efd, &junk, sizeof junk) < 0 && errno != EAGAIN)
		return 0;
	pthread_mutex_lock(&r->rel_mu);
	int i = r->rel_head;
	r->rel_head = -1;
	pthread_mutex_unlock(&r->rel_mu);
	int n = 0;
	while (i >= 0) {
		int next = s->bufs[i].next, stream = s->bufs[i].owner;
		if (post_recv_data(s, stream, i) < 0) {
			set_err(r, -EIO);
		} else {
			r->st[stream].pending++;
			send_credit_batch(r, stream);
		}
		i = next;
		n++;
	}
	return n;
}

/*
 * Make progress: handle completions. If there were none and block is set,
 * wait (timeout_ms, -1 forever) until at least one is handled.
 * Returns the number handled (0 only on timeout) or a negative error.
 */
static int progress(struct tp_session *s, int block, int timeout_ms)
{
	struct rdma *r = R(s);
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : now_ms() + timeout_ms;
	for (;;) {
		int n = poll_cq(s) + (r->sender ? 0 : drain_released(s));
		/* a peer that closed after its verdict (sender) or after every END
		 * (receiver) just closed; before that, it went away. Its verdict can
		 * be in the CQ when the CM event is read, so this comes after the poll */
		if (r->peer_gone && !r->err &&
		    (r->sender ? !r->verdict_seen : r->ended < R_NSTREAMS(r)))
			set_err(r, -ECONNRESET);
		if (n || !block || r->err)
			return r->err ? r->err : n;
		/* Notification is one-shot and fires only for completions after
		 * the arm: arm, then poll again before sleeping. A wake-up may be
		 * stale (an event for completions already polled): loop. */
		if (ibv_req_notify_cq(r->cq, 0))
			return -EIO;
		n = poll_cq(s);
		if (n || r->err)
			return r->err ? r->err : n;
		int64_t left = deadline == INT64_MAX ? -1 : deadline - now_ms();
		if (deadline != INT64_MAX && left <= 0)
			return 0;
		int rc = wait_once(r, (int)(left > INT32_MAX ? INT32_MAX : left));
		if (rc < 0)
			return rc;
		if (rc > 0 && !r->sender)
			return drain_released(s);   /* a buffer came back: caller rechecks */
	}
}

/* --- data path --- */

static int rdma_get(struct tp_session *s, struct tp_buf **out)
{
	struct rdma *r = R(s);
	while (r->free_head < 0) {
		int rc = progress(s, 1, -1);
		if (rc < 0)
			return rc;
	}
	if (r->err)
		return r->err;
	int i = r->free_head;
	r->free_head = s->bufs[i].next;
	*out = &s->bufs[i];
	return 0;
}

static void rdma_put(struct tp_session *s, struct tp_buf *b)
{
	struct rdma *r = R(s);
	b->next = r->free_head;
	r->free_head = (int)(b - s->bufs);
}

/* Sender: a stream with a credit, round robin; waits for one. */
static int pick_stream(struct tp_session *s, int *out)
{
	struct rdma *r = R(s);
	for (;;) {
		if (r->err)
			return r->err;
		for (int k = 0; k < s->nstreams; k++) {
			int i = (r->rr + k) % s->nstreams;
			if (r->st[i].credits > 0) {
				r->rr = i + 1;
				*out = i;
				return 0;
			}
		}
		int rc = progress(s, 1, -1);
		if (rc < 0)
			return rc;
	}
}

static int rdma_send(struct tp_session *s, struct tp_buf *b)
{
	struct rdma *r = R(s);
	int i = 0, rc = progress(s, 0, 0);   /* pick up credits and free buffers */
	if (rc >= 0)
		rc = pick_stream(s, &i);
	if (rc < 0) {
		rdma_put(s, b);
		return rc;
	}
	struct ibv_sge sg[2] = {
		{ (uintptr_t)b->hdr, TP_HDR_LEN, r->hmr->lkey },
		{ (uintptr_t)b->m.data, b->m.len, r->mr->lkey },
	};
	struct ibv_send_wr wr = { .wr_id = wr_id(WR_SEND_DATA, i, (uint32_t)(b - s->bufs)),
	                          .sg_list = sg, .num_sge = b->m.len ? 2 : 1,
	                          .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	rc = ibv_post_send(r->st[i].id->qp, &wr, &bad);
	if (rc) {
		rdma_put(s, b);
		log_err("RDMA post send: %s", strerror(rc));
		return -rc;
	}
	r->st[i].credits--;
	r->st[i].msgs++;
	r->st[i].bytes += b->m.len;
	return 0;
}

static int rdma_finish(struct tp_session *s)
{
	struct rdma *r = R(s);
	for (int i = 0; i < s->nstreams; i++) {
		struct rstream *st = &r->st[i];
		int rc;
		while (!r->err && (st->credits <= 0 ||
		       (rc = send_ctl(r, i, TP_END, st->msgs, st->bytes, NULL, 0)) == -EAGAIN))
			if ((rc = progress(s, 1, -1)) < 0)
				return rc;
		if (r->err)
			return r->err;
		if (rc < 0)
			return rc;
		st->credits--;
	}
	while (!r->verdict_seen && !r->err) {
		int rc = progress(s, 1, -1);
		if (rc < 0)
			return rc;
	}
	return r->err ? r->err : -r->verdict;
}

/* Receiver: announce re-posted buffers on every stream that has some. */
static void flush_credits(struct rdma *r, int nstreams, int min)
{
	for (int i = 0; i < nstreams; i++)
		if (r->st[i].pending >= min && r->st[i].pending > 0 && !r->st[i].ended)
			send_ctl(r, i, TP_CREDIT, 0, 0, NULL, 0);   /* -EAGAIN: next time */
}

static int rdma_recv(struct tp_session *s, struct tp_buf **out)
{
	struct rdma *r = R(s);
	for (;;) {
		if (r->err)
			return r->err;
		if (r->ready_head >= 0) {
			int i = r->ready_head;
			r->ready_head = s->bufs[i].next;
			if (r->ready_head < 0)
				r->ready_tail = -1;
			*out = &s->bufs[i];
			return 0;
		}
		if (r->ended == s->nstreams)
			return 1;
		drain_released(s);
		flush_credits(r, s->nstreams, 1);   /* never sleep owing credits */
		int rc = progress(s, 1, -1);
		if (rc < 0)
			return rc;
	}
}

/* Any thread: queue the buffer for re-posting by the progress loop. */
static void rdma_release(struct tp_session *s, struct tp_buf *b)
{
	struct rdma *r = R(s);
	uint64_t one = 1;
	pthread_mutex_lock(&r->rel_mu);
	b->next = r->rel_head;
	r->rel_head = (int)(b - s->bufs);
	pthread_mutex_unlock(&r->rel_mu);
	if (write(r->efd, &one, sizeof one) < 0)
		set_err(r, -EIO);
}

static int rdma_verdict(struct tp_session *s, int status)
{
	struct rdma *r = R(s);
	int rc;
	int err = r->err;
	r->err = 0;
	while ((rc = send_ctl(r, 0, TP_VERDICT, (uint64_t)status, 0, NULL, 0)) == -EAGAIN)
		if (progress(s, 1, 1000) <= 0)
			break;
	/* wait until it is on the wire (its send completes) */
	for (int k = 0; k < 50 && r->st[0].ctl_busy && !r->err; k++)
		progress(s, 1, 100);
	if (!r->err)
		r->err = err;
	return rc;
}

static void rdma_close(struct tp_session *s)
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

static const struct tp_ops rdma_ops = {
	.name = "rdma",
	.send = rdma_send, .get = rdma_get, .put = rdma_put, .finish = rdma_finish,
	.recv = rdma_recv, .release = rdma_release, .verdict = rdma_verdict,
	.close = rdma_close,
};

static struct tp_session *session_new(const struct tp_opts *o, int sender)
{
	struct tp_session *s = calloc(1, sizeof *s);
	struct rdma *r = calloc(1, sizeof *r);
	if (!s || !r) {
		free(s);
		free(r);
		return NULL;
	}
	s->ops = &rdma_ops;
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
	rdma_close(s);
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
		if ((rc = post_recv_data(s, c.index, c.index * r->quota + k)) < 0)
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

int tp_rdma_accept(struct tp_rdma_listener *l, const struct tp_opts *o, int timeout_ms,
                   struct tp_session **out)
{
	struct tp_session *s = NULL;
	int want = 0, established = 0, rc = 0;
	/* Phase 1: connections. Events for all streams come on the listener's
	 * channel until they are established. */
	while (want == 0 || established < want) {
		struct rdma_cm_event *ev;
		rc = next_event(l->ec, want ? 10000 : timeout_ms, &ev);
		if (rc < 0)
			goto fail;
		struct rstream *st = ev->id->context;
		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			rc = accept_stream(&s, o, ev, &want);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (st && s && st >= R(s)->st && st < R(s)->st + TP_MAX_STREAMS) {
				st->established = 1;
				established++;
				struct rdma *r = R(s);
				uint8_t hb[TP_HELLO_LEN];
				tp_hs_hello(&st->hello, s->msg_size, (uint32_t)r->quota);
				tp_hello_put(hb, &st->hello);
				rc = send_ctl(r, (int)(st - r->st), TP_HELLO, 0, 0, hb, TP_HELLO_LEN);
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
			goto fail;
	}
	/* The session gets a channel of its own for DISCONNECTED events. */
	struct rdma *r = R(s);
	if (!(r->ec = rdma_create_event_channel())) {
		rc = -errno;
		goto fail;
	}
	r->own_ec = 1;
	fcntl(r->ec->fd, F_SETFL, fcntl(r->ec->fd, F_GETFL) | O_NONBLOCK);
	for (int i = 0; i < s->nstreams; i++)
		if (rdma_migrate_id(r->st[i].id, r->ec)) {
			rc = -errno;
			goto fail;
		}
	/* Phase 2: every stream authenticates before any payload is taken. */
	for (;;) {
		int authed = 0;
		for (int i = 0; i < s->nstreams; i++)
			authed += r->st[i].authed;
		if (authed == s->nstreams)
			break;
		rc = progress(s, 1, 5000);
		if (rc == 0)
			rc = -ETIMEDOUT;
		if (rc < 0)
			goto fail;
	}
	*out = s;
	return 0;
fail:
	if (rc == -EACCES)
		log_err("rejected an RDMA connection: the sender does not know the key");
	else if (rc == -EPROTO)
		log_err("dropped an RDMA connection: not an rdcp sender");
	else if (rc != -ETIMEDOUT || s)
		log_err("RDMA accept: %s", strerror(-rc));
	if (s && R(s) && R(s)->err == 0 && rc == -EACCES) {
		/* let AUTH_FAIL reach the sender before we disconnect */
		progress(s, 1, 200);
	}
	session_free(s);
	return rc;
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
		if ((rc = post_recv_ctl(r, i, k)) < 0)
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
			if ((rc = progress(s, 1, 5000)) <= 0)
				return rc < 0 ? rc : -ETIMEDOUT;
		if (r->err)
			return r->err;
		uint8_t ans[TP_AUTH_LEN], hb[TP_HELLO_LEN];
		tp_hello_put(hb, &st->hello);
		if ((rc = tp_hs_answer(s->key, hb, TP_HELLO_LEN, r->session, s->nstreams, i,
		                       &st->hello, &st->auth, ans)) < 0)
			return rc;
		if ((rc = send_ctl(r, i, TP_AUTH, 0, 0, ans, TP_AUTH_LEN)) < 0)
			return rc;
		st->credits--;
	}
	for (int i = 0; i < s->nstreams; i++)
		while (!r->st[i].authed && !r->err)
			if ((rc = progress(s, 1, 5000)) <= 0)
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
	int64_t deadline = now_ms() + (o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 10000);
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
		if (rc != -ECONNREFUSED || now_ms() >= deadline)
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
