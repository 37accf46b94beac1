/*
 * sync/wire/: the control messages of a run (docs/protocol.md) that have a
 * fixed form: HELLO, READY, MANIFEST_END, SENT, PROGRESS, DONE's result,
 * CTL_DATA and CTL_RELAY, each a struct with an encoder and a decoder of
 * peer input. The frames themselves are common/ctl.h's.
 */
#ifndef RDCP_SYNC_PROTO_H
#define RDCP_SYNC_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "sync/sync_int.h"

enum { ROLE_SENDER = 1, ROLE_RECEIVER = 2 };

/* READY's first byte: what the sender sends (docs/protocol.md) */
enum { READY_CONTENTS = 0,   /* a directory's contents ("A/", "."), no name */
       READY_NAMED = 1,      /* one named entry, the name given */
       READY_MIRROR = 2 };   /* --sync of "A" (no trailing '/'): A's contents,
                                its name given for --delete's check */
#define READY_NAME_MAX 255   /* one name */

/* The fixed control messages (docs/protocol.md), each a struct with an
 * encoder into a buffer of its length and a decoder of peer input: 0, or
 * -EPROTO when the bytes are not one (the caller says why, naming the
 * peer). The frame is sent and received by the caller (ctl_send()). */

/* READY, sender -> receiver: what is sent, a directory's contents or one
 * named entry (u8 kind, u8 is dir, u16 name length, the name). */
struct ready_msg {
	uint8_t kind;        /* READY_*; the decoder leaves range checks to the caller */
	uint8_t is_dir;
	uint16_t name_len;   /* at most READY_NAME_MAX when encoded */
	char name[READY_NAME_MAX + 1];   /* NUL-terminated (may hold NULs of its own) */
};
/* The encoded length: 4 + name_len. The decoder: -ENAMETOOLONG for a
 * well-formed READY whose name is over READY_NAME_MAX (name_len says how
 * long; name holds its start, for the message). */
size_t ready_encode(uint8_t b[4 + READY_NAME_MAX], const struct ready_msg *m);
int    ready_decode(const uint8_t *b, size_t n, struct ready_msg *m);

/* MANIFEST_END, sender -> receiver: u64 entries the scan could not read,
 * the run's archive key, u64 list generation and transfer times (us), u64
 * entries that vanished while the scan looked at them. */
struct manifest_end_msg {
	uint64_t errors;
	uint8_t akey[SYNC_AKEY_LEN];
	uint64_t gen_us, xfer_us;
	uint64_t vanished;
};
#define MANIFEST_END_LEN (8 + SYNC_AKEY_LEN + 16 + 8)
void manifest_end_encode(uint8_t b[MANIFEST_END_LEN], const struct manifest_end_msg *m);
int  manifest_end_decode(const uint8_t *b, size_t n, struct manifest_end_msg *m);

/* SENT, sender -> receiver after the data: u64 planned files not sent,
 * u64 of them unreadable (the rest vanished or changed), u64 of them
 * changed as they were read and sent again in a round of their own (the
 * client's); unreadable + retried never over not sent. Version 10: u64
 * files sent as read (they never stood still), a far sender's listed in
 * CTL_ASREAD next. */
struct sent_msg {
	uint64_t unsent, unreadable, retried, as_read;
};
#define SENT_LEN 32
void sent_encode(uint8_t b[SENT_LEN], const struct sent_msg *m);
int  sent_decode(const uint8_t *b, size_t n, struct sent_msg *m);

/* WCHECK, sender -> receiver under --windows with --delete (not
 * --delete-before), after SENT, or after PLAN when the plan is empty:
 * u8 flags, u32 count, then count paths (u16 length + bytes, each a path
 * relative to SRC): what appeared in the window's directories since its
 * scan (renamed back, made), which the receiver must not delete. With
 * WCHECK_ALL (too many to list) it deletes nothing in the window. */
#define WCHECK_ALL 1u
#define WCHECK_MAX_BYTES ((size_t)1 << 20)   /* of paths: past it, WCHECK_ALL */
/* Decode peer input into a sorted list of malloc'd paths (*v, *n; the
 * caller frees them): -EPROTO (*why) unless well formed. */
int  wcheck_decode(const uint8_t *b, size_t n, unsigned *flags, char ***v, size_t *nv,
                   const char **why);

/* PROGRESS, receiver -> sender during the data: u64 files landed, u64
 * their bytes (the sender's --progress). */
struct progress_msg {
	uint64_t files, bytes;
};
#define PROGRESS_LEN 16
void progress_encode(uint8_t b[PROGRESS_LEN], const struct progress_msg *m);
int  progress_decode(const uint8_t *b, size_t n, struct progress_msg *m);

/* Send the HELLO that gives the server its role, with o's options; paths:
 * its path, and for a sender the other SRCs (npath in all). 0 or an
 * error (said when the arguments do not fit). */
int  hello_send(struct ctl *c, int role, const struct sync_opts *o, const char *const *paths,
                int npath, const char *addr);
/* The HELLO a server receives (docs/protocol.md), decoded from peer input. */
struct hello {
	int role;
	char *path, *addr;
	int argc;          /* argv[0] "rdcp", then the options (not parsed yet) */
	char **argv;
	const char *why;   /* -EPROTO: what is wrong, "it has ..." */
};
#define HELLO_MAX_ARGS 10000
/* 0, -EPROTO if malformed (h->why says why), -EPROTONOSUPPORT for another
 * version. */
int  hello_decode(const uint8_t *buf, size_t len, struct hello *h);
void hello_free(struct hello *h);

/* DONE payload. result_get: 0, or -EPROTO for an exit code over 255 (then
 * r->code is RD_EXIT_PROTO). */
void result_put(uint8_t *p, const struct sync_result *r);
/* A fan-out's sums: r's DONE counts (not its code) added to to's. */
void result_add(struct sync_result *to, const struct sync_result *r);
int  result_get(const uint8_t *p, struct sync_result *r);
#define RESULT_LEN (4 + (6 + 2 * SYNC_KINDS) * 8)

/* CTL_DATA: where the sender connects, and the session's secret. */
struct ctl_data {
	uint16_t port;
	char key[33];       /* 32 hex characters */
	char addr[256];     /* "" when the sender should use its own idea */
	const char *why;    /* -EPROTO: what is wrong, "has ..." */
};
/* Decode peer input: -EPROTO unless the port is set, the key is 32 hex
 * characters and the address is at most 255 bytes without NUL. */
int ctl_data_decode(const uint8_t *buf, size_t len, struct ctl_data *d);

/* CTL_RELAY, client -> a fan-out host: u8 flags, then the next host's
 * CTL_DATA and the one after it's, each as u16 length + bytes (length 0:
 * none). The second is where to re-link when the next host dies. */
#define RELAY_F_REJOIN 1u   /* a host two before us may re-link to us */
#define RELAY_F_HOP_MS 2u   /* a u32 follows the two parts: hop_ms */
struct relay_msg {
	unsigned flags;
	int has_next, has_alt;
	struct ctl_data next, alt;
	uint32_t hop_ms;   /* RELAY_F_HOP_MS: the I/O timeout of our hop to the
	                      next host, shorter than the one before us (0: --timeout's) */
};
/* Decode peer input: -EPROTO (m->next.why or m->alt.why, or "is ..." in
 * why) unless well formed; an alternative needs a next host. */
int relay_msg_decode(const uint8_t *buf, size_t len, struct relay_msg *m, const char **why);

#endif
