/*
 * Private to pipe/: what rdpipe's controller (pipe/pipeline.c) and its
 * segments (pipe/segment.c) share: a segment as written, and the four
 * segment messages (pipe/segmsg.c; docs/protocol.md, "rdpipe segments").
 *
 * Encoders send one frame on a control channel: 0 or a negative errno.
 * Decoders read a frame's payload as hostile input: 0 or -EPROTO (SETUP:
 * also -EPROTONOSUPPORT for another version); they bound every length, and
 * what they return is the caller's to free only where said.
 */
#ifndef RDCP_PIPE_INT_H
#define RDCP_PIPE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common/ctl.h"
#include "pipe/pipe.h"

#define PIPE_NO_STATUS   (-1)      /* DONE: the segment ran no command */
#define PIPE_GRACE_MS    2000      /* teardown: time to leave before SIGKILL */
#define PIPE_CONNECT_MS  30000     /* a hop's connect timeout */

/* A segment as written: "[user@]host:command" or "[user@][v6addr]:command". */
struct pipe_spec {
	char *host;         /* as given, for the remote shell */
	char *addr;         /* the host without user@ and [], for data connections */
	char *cmd;          /* everything after the ':' */
	enum pipe_op op;
};

/* Parse segment number i (1-based, for messages) into sp, whose strings the
 * caller frees (also after a failure: what was made so far). 0, -EINVAL
 * after saying why on stderr, or -ENOMEM. */
int pipe_spec_parse(const char *s, int i, struct pipe_spec *sp);

/* SETUP, controller -> segment: what to run, with which key. */
struct pipe_setup {
	uint8_t index, count, kind, streams;
	uint8_t key[TP_KEY_LEN];
	char *cmd, *label;
};
int pipe_setup_send(struct ctl *c, const struct pipe_setup *s);
/* On success s->cmd and s->label are the caller's to free; on failure both
 * are NULL. */
int pipe_setup_decode(const uint8_t *b, size_t n, struct pipe_setup *s);

/* READY, segment -> controller: the port (not 0) it listens on, and the
 * address the controller's ssh reached it on (common/rsh.h
 * rsh_server_addr(): an IP literal, or "" when unknown). decode: -EPROTO
 * unless addr is "" or an IP literal that fits in cap bytes with its NUL. */
int pipe_ready_send(struct ctl *c, uint16_t port, const char *addr);
int pipe_ready_decode(const uint8_t *b, size_t n, uint16_t *port, char *addr, size_t cap);

/* GO, controller -> segment: where the next listener is (port not 0, an
 * address that is not empty and fits in cap bytes with its NUL). */
int pipe_go_send(struct ctl *c, uint16_t port, const char *addr);
int pipe_go_decode(const uint8_t *b, size_t n, char *addr, size_t cap, uint16_t *port);

/* DONE, segment -> controller: its results. */
struct pipe_done {
	int32_t status;     /* PIPE_NO_STATUS, or 0..255: exit code, 128 + signal */
	int32_t in_rc, out_rc;   /* each hop: 0 or -errno */
	uint64_t in_bytes, in_usec;
	char kind[8];       /* the input hop's transport: rdma, tcp, or "" */
	char msg[256];      /* the first failure; decoded: escaped for a terminal */
};
int pipe_done_send(struct ctl *c, const struct pipe_done *d);
int pipe_done_decode(const uint8_t *b, size_t n, struct pipe_done *d);

/* Decode one rdpipe segment message (CTL_SEG_SETUP, CTL_SEG_GO or
 * CTL_SEG_DONE) as its receiver would; 0 if it would take it, else -EPROTO.
 * For the fuzz target. */
int pipe_msg_check(uint8_t type, const uint8_t *buf, size_t len);

#endif
