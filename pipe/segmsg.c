/*
 * rdpipe's language: segments as the user writes them ("[user@]host:command",
 * a command that may start with <, > or >>), and the four messages between
 * the controller and a segment (SETUP, READY, GO, DONE), encoded and decoded
 * field by field. Layouts: docs/protocol.md, "rdpipe segments".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/rsh.h"
#include "common/wire.h"
#include "pipe/pipe_int.h"

#define SEG_MAGIC    0x52445053u   /* "RDPS" */
#define SEG_VERSION  1

/* --- segments as written: [user@]host:command --- */

enum pipe_op pipe_op_of(const char *cmd, const char **arg)
{
	while (*cmd == ' ' || *cmd == '\t')
		cmd++;
	enum pipe_op op = PIPE_CMD;
	if (cmd[0] == '<') {
		op = PIPE_FROM;
		cmd++;
	} else if (cmd[0] == '>' && cmd[1] == '>') {
		op = PIPE_APPEND;
		cmd += 2;
	} else if (cmd[0] == '>') {
		op = PIPE_TO;
		cmd++;
	}
	while (op != PIPE_CMD && (*cmd == ' ' || *cmd == '\t'))
		cmd++;
	if (arg)
		*arg = cmd;
	return op;
}

int pipe_spec_parse(const char *s, int i, struct pipe_spec *sp)
{
	/* user@ counts only before the first ':' (a command may hold '@') */
	const char *colon, *h = s, *at = strchr(s, '@'), *c1 = strchr(s, ':');
	if (at && c1 && at < c1)
		h = at + 1;
	if (*h == '[') {
		const char *e = strchr(h, ']');
		if (!e || e[1] != ':') {
			log_err("segment %d '%s': an IPv6 address goes in brackets: [addr]:command",
			        i, s);
			return -EINVAL;
		}
		colon = e + 1;
		sp->addr = strndup(h + 1, (size_t)(e - h - 1));
	} else {
		colon = strchr(h, ':');
		if (!colon || colon == h) {
			log_err("segment %d '%s' names no host: write HOST:COMMAND", i, s);
			return -EINVAL;
		}
		sp->addr = strndup(h, (size_t)(colon - h));
	}
	sp->host = strndup(s, (size_t)(colon - s));
	sp->cmd = strdup(colon + 1);
	if (!sp->host || !sp->addr || !sp->cmd)
		return -ENOMEM;
	const char *arg;
	sp->op = pipe_op_of(sp->cmd, &arg);
	if (!*arg) {
		log_err("segment %d '%s': %s", i, s, sp->op == PIPE_CMD ? "the command is empty"
		        : "the operator needs a file name");
		return -EINVAL;
	}
	return 0;
}

/* --- the four segment messages --- */

/* Send what w holds as one frame of the given type, and free it. */
static int send_frame(struct ctl *c, uint8_t type, struct wire_wr *w)
{
	int rc = w->bad ? -ENOMEM : ctl_send(c, type, w->buf, w->len);
	free(w->buf);
	return rc;
}

int pipe_setup_send(struct ctl *c, const struct pipe_setup *s)
{
	struct wire_wr w = { 0 };
	wr_u32(&w, SEG_MAGIC);
	wr_u8(&w, SEG_VERSION);
	wr_u8(&w, s->index);
	wr_u8(&w, s->count);
	wr_u8(&w, s->kind);
	wr_u8(&w, s->streams);
	wr_bytes(&w, s->key, TP_KEY_LEN);
	wr_str16(&w, s->cmd);
	wr_str16(&w, s->label);
	return send_frame(c, CTL_SEG_SETUP, &w);
}

int pipe_setup_decode(const uint8_t *b, size_t n, struct pipe_setup *s)
{
	struct wire_rd r = { b, b + n, 0 };
	memset(s, 0, sizeof *s);
	if (rd_u32(&r) != SEG_MAGIC)
		return -EPROTO;
	if (rd_u8(&r) != SEG_VERSION)
		return -EPROTONOSUPPORT;
	s->index = rd_u8(&r);
	s->count = rd_u8(&r);
	s->kind = rd_u8(&r);
	s->streams = rd_u8(&r);
	const uint8_t *k = rd_take(&r, TP_KEY_LEN);
	s->cmd = rd_str16(&r);
	s->label = rd_str16(&r);
	if (r.bad || r.p != r.end || !s->index || s->index > s->count || s->kind > TP_RDMA ||
	    !s->streams || s->streams > TP_MAX_STREAMS || !s->cmd || !s->label || !*s->cmd) {
		free(s->cmd);
		free(s->label);
		s->cmd = s->label = NULL;
		return -EPROTO;
	}
	memcpy(s->key, k, TP_KEY_LEN);
	return 0;
}

int pipe_ready_send(struct ctl *c, uint16_t port, const char *addr)
{
	struct wire_wr w = { 0 };
	wr_u16(&w, port);
	wr_str16(&w, addr);
	return send_frame(c, CTL_SEG_READY, &w);
}

int pipe_ready_decode(const uint8_t *b, size_t n, uint16_t *port, char *addr, size_t cap)
{
	struct wire_rd r = { b, b + n, 0 };
	*port = rd_u16(&r);
	char *a = rd_str16(&r);
	/* peer input: an IP literal or nothing, never a name to resolve */
	int bad = r.bad || r.p != r.end || !a || strlen(a) >= cap || !*port ||
	          (*a && !rsh_is_ip(a));
	if (!bad)
		snprintf(addr, cap, "%s", a);
	free(a);
	return bad ? -EPROTO : 0;
}

int pipe_go_send(struct ctl *c, uint16_t port, const char *addr)
{
	struct wire_wr w = { 0 };
	wr_u16(&w, port);
	wr_str16(&w, addr);
	return send_frame(c, CTL_SEG_GO, &w);
}

int pipe_go_decode(const uint8_t *b, size_t n, char *addr, size_t cap, uint16_t *port)
{
	struct wire_rd r = { b, b + n, 0 };
	*port = rd_u16(&r);
	char *next = rd_str16(&r);
	int bad = r.bad || r.p != r.end || !next || !*next || strlen(next) >= cap || !*port;
	if (!bad)
		snprintf(addr, cap, "%s", next);
	free(next);
	return bad ? -EPROTO : 0;
}

int pipe_done_send(struct ctl *c, const struct pipe_done *d)
{
	struct wire_wr w = { 0 };
	wr_u32(&w, (uint32_t)d->status);
	wr_u32(&w, (uint32_t)d->in_rc);
	wr_u32(&w, (uint32_t)d->out_rc);
	wr_u64(&w, d->in_bytes);
	wr_u64(&w, d->in_usec);
	wr_str16(&w, d->kind);
	wr_str16(&w, d->msg);
	return send_frame(c, CTL_SEG_DONE, &w);
}

int pipe_done_decode(const uint8_t *b, size_t n, struct pipe_done *d)
{
	struct wire_rd r = { b, b + n, 0 };
	d->status = (int32_t)rd_u32(&r);
	d->in_rc = (int32_t)rd_u32(&r);
	d->out_rc = (int32_t)rd_u32(&r);
	d->in_bytes = rd_u64(&r);
	d->in_usec = rd_u64(&r);
	char *k = rd_str16(&r), *m = rd_str16(&r);
	/* a status is what a shell reports: -1 (none), 0..255; the transport
	 * is one we know, or none (no input connection was made) */
	int bad = r.bad || r.p != r.end || !k || !m || d->status < PIPE_NO_STATUS ||
	          d->status > 255 || d->in_rc > 0 || d->out_rc > 0 ||
	          (strcmp(k, "rdma") && strcmp(k, "tcp") && *k);
	if (!bad) {
		snprintf(d->kind, sizeof d->kind, "%s", k);
		log_path(d->msg, sizeof d->msg, m);   /* remote text: escaped for the terminal */
	}
	free(k);
	free(m);
	return bad ? -EPROTO : 0;
}

int pipe_msg_check(uint8_t type, const uint8_t *b, size_t n)
{
	struct pipe_setup su;
	struct pipe_done d;
	char addr[256];
	uint16_t port;
	switch (type) {
	case CTL_SEG_SETUP:
		if (pipe_setup_decode(b, n, &su) < 0)
			return -EPROTO;
		free(su.cmd);
		free(su.label);
		return 0;
	case CTL_SEG_GO:
		return pipe_go_decode(b, n, addr, sizeof addr, &port);
	case CTL_SEG_DONE:
		return pipe_done_decode(b, n, &d);
	default:
		return -EPROTO;
	}
}
