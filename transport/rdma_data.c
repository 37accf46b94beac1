/*
 * RDMA backend, the data path: libibverbs moves the data with SEND/RECV on
 * RC queue pairs; the connections are set up in rdma_conn.c.
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
 * batches) and watch the CM channel for the peer going away. With an I/O
 * timeout (tp_opts.io_timeout_ms), a call that waits that long without a
 * single completion or released buffer ends the session with -ETIME.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/rdma_int.h"

#define EV_ACK_BATCH 16
#define R_NSTREAMS(r) ((r)->nstreams)

enum wr_kind { WR_SEND_DATA = 1, WR_SEND_CTL, WR_RECV_DATA, WR_RECV_CTL };

static uint64_t wr_id(enum wr_kind k, int stream, uint32_t idx)
{
	return (uint64_t)k << 56 | (uint64_t)stream << 48 | idx;
}

static void set_err(struct rdma *r, int err)
{
	if (!r->err)
		r->err = err;
}

static uint8_t *ctl_slot(struct rdma *r, int stream, int send, int slot)
{
	return r->ctl + ((size_t)stream * 2 * CTL_SLOTS + (send ? CTL_SLOTS : 0) + (size_t)slot) * CTL_LEN;
}

/* --- posting --- */

int tp_rdma_post_recv_data(struct tp_session *s, int stream, int i)
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

int tp_rdma_post_recv_ctl(struct rdma *r, int stream, int slot)
{
	struct ibv_sge sg = { (uintptr_t)ctl_slot(r, stream, 0, slot), CTL_LEN, r->cmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id(WR_RECV_CTL, stream, (uint32_t)slot),
	                          .sg_list = &sg, .num_sge = 1 }, *bad;
	int rc = ibv_post_recv(r->st[stream].id->qp, &wr, &bad);
	return rc ? -rc : 0;
}

/* Send a control message on stream (if a slot is free: else -EAGAIN).
 * Any credits we owe the peer ride along. */
int tp_rdma_send_ctl(struct rdma *r, int stream, uint8_t type, uint64_t id, uint64_t off,
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
			tp_rdma_post_recv_data(s, stream, i);
			rc = tp_rdma_send_ctl(r, stream, TP_AUTH_OK, 0, 0, ok, TP_MAC_LEN);
			if (rc < 0)
				set_err(r, rc);
			return;
		}
		if (rc == -EACCES)
			tp_rdma_send_ctl(r, stream, TP_AUTH_FAIL, 0, 0, NULL, 0);
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
		tp_rdma_post_recv_data(s, stream, i);
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
	if (tp_rdma_post_recv_ctl(r, stream, slot) < 0)
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
		r->peer_gone = 1;   /* judged by tp_rdma_progress() once the CQ is drained */
		break;
	default:
		break;
	}
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
		tp_rdma_send_ctl(r, stream, TP_CREDIT, 0, 0, NULL, 0);   /* -EAGAIN: later */
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
		if (tp_rdma_post_recv_data(s, stream, i) < 0) {
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
int tp_rdma_progress(struct tp_session *s, int block, int timeout_ms)
{
	struct rdma *r = R(s);
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : clock_ms() + timeout_ms;
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
		int64_t left = deadline == INT64_MAX ? -1 : deadline - clock_ms();
		if (deadline != INT64_MAX && left <= 0)
			return 0;
		int rc = wait_once(r, (int)(left > INT32_MAX ? INT32_MAX : left));
		if (rc < 0)
			return rc;
		if (rc > 0 && !r->sender && (n = drain_released(s)) > 0)
			return n;   /* a buffer came back: caller rechecks */
	}
}

int tp_rdma_pump(struct tp_session *s)
{
	struct rdma *r = R(s);
	struct ibv_cq *cq;
	struct rdma_cm_event *ev;
	void *ctx;
	while (ibv_get_cq_event(r->cc, &cq, &ctx) == 0)
		if (++r->unacked >= EV_ACK_BATCH) {
			ibv_ack_cq_events(r->cq, (unsigned)r->unacked);
			r->unacked = 0;
		}
	while (r->ec && rdma_get_cm_event(r->ec, &ev) == 0) {
		on_cm_event(r, ev);
		rdma_ack_cm_event(ev);
	}
	int n = poll_cq(s);
	if (ibv_req_notify_cq(r->cq, 0))
		set_err(r, -EIO);
	n += poll_cq(s);   /* what came between the poll and the arm */
	if (r->peer_gone && !r->err)
		set_err(r, -ECONNRESET);
	return r->err ? r->err : n;
}

/* Block until something happens on the session; with an I/O timeout, a
 * wait in which nothing at all happened for that long ends it (-ETIME). */
static int wait_progress(struct tp_session *s)
{
	int ms = s->io_timeout_ms > 0 ? s->io_timeout_ms : -1;
	int rc = tp_rdma_progress(s, 1, ms);
	if (rc == 0 && ms > 0) {
		set_err(R(s), -ETIME);
		return -ETIME;
	}
	return rc < 0 ? rc : 0;
}

/* --- the session operations (tp_ops) --- */

static int rdma_get(struct tp_session *s, struct tp_buf **out)
{
	struct rdma *r = R(s);
	while (r->free_head < 0) {
		int rc = wait_progress(s);
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
		int rc = wait_progress(s);
		if (rc < 0)
			return rc;
	}
}

static int rdma_send(struct tp_session *s, struct tp_buf *b)
{
	struct rdma *r = R(s);
	int i = 0, rc = tp_rdma_progress(s, 0, 0);   /* pick up credits and free buffers */
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
		int rc = 0;
		while (!r->err && (st->credits <= 0 ||
		       (rc = tp_rdma_send_ctl(r, i, TP_END, st->msgs, st->bytes, NULL, 0)) == -EAGAIN))
			if ((rc = wait_progress(s)) < 0)
				return rc;
		if (r->err)
			return r->err;
		if (rc < 0)
			return rc;
		st->credits--;
	}
	while (!r->verdict_seen && !r->err) {
		int rc = wait_progress(s);
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
			tp_rdma_send_ctl(r, i, TP_CREDIT, 0, 0, NULL, 0);   /* -EAGAIN: next time */
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
		int rc = wait_progress(s);
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
	while ((rc = tp_rdma_send_ctl(r, 0, TP_VERDICT, (uint64_t)status, 0, NULL, 0)) == -EAGAIN)
		if (tp_rdma_progress(s, 1, 1000) <= 0)
			break;
	/* wait until it is on the wire (its send completes) */
	for (int k = 0; k < 50 && r->st[0].ctl_busy && !r->err; k++)
		tp_rdma_progress(s, 1, 100);
	if (!r->err)
		r->err = err;
	return rc;
}

const struct tp_ops tp_rdma_ops = {
	.name = "rdma",
	.send = rdma_send, .get = rdma_get, .put = rdma_put, .finish = rdma_finish,
	.recv = rdma_recv, .release = rdma_release, .verdict = rdma_verdict,
	.close = tp_rdma_close,
};
