/*
 * transport: move messages of bytes between two processes over RDMA
 * (librdmacm + libibverbs) or TCP, behind one API. Knows nothing of files.
 *
 * A session is N parallel streams (TCP connections or RDMA queue pairs) to
 * one peer. Data flows one way, from the connecting side (the sender) to the
 * listening side (the receiver); the receiver answers with a verdict at the
 * end. Every message carries (id, off, len), so the receiver can place it
 * whichever stream delivered it; messages of one stream arrive in order,
 * messages of different streams in any order.
 *
 * Buffers come from a pool allocated and (for RDMA) registered once per
 * session: the sender fills a buffer it got from tp_msg_get() and hands it to
 * tp_msg_send(); the receiver gets buffers from tp_msg_recv() and gives them
 * back with tp_msg_release(). Several messages are in flight at once.
 *
 * Every data connection is authenticated (HMAC-SHA-256 challenge-response,
 * both ways, with a key derived from a shared secret) before any payload is
 * accepted. With tp_opts.encrypt (TCP only) every message after that is
 * also sealed: encrypted and authenticated (AES-256-GCM or
 * ChaCha20-Poly1305), under keys of this run only. See docs/protocol.md and
 * docs/transport.md.
 *
 * Conventions: functions return 0 or a negative errno code and print what
 * failed to stderr. The calls on one session must come from one thread at a
 * time, except tp_msg_release(), which any thread may call at any time (so
 * I/O threads can give buffers back as soon as they are done with them).
 * Errors of note:
 *   -EACCES       the peer failed authentication (or we did: wrong key)
 *   -ENODEV       RDMA asked for, but no RDMA device serves that address
 *   -ECONNREFUSED / -ETIMEDOUT  nobody listening (after retrying), or
 *                 tp_accept()'s own timeout passed without a sender
 *   -ETIME        the I/O timeout (tp_opts.io_timeout_ms): nothing moved on
 *                 the session for that long (the peer is stopped or stuck)
 *   -ECONNRESET   the peer went away mid-stream
 *   -EPROTO       the peer sent something that is not our protocol, a sealed
 *                 message failed authentication (tampered with on the way),
 *                 or the two sides disagree about tp_opts.encrypt (each side
 *                 says which)
 *   -EINVAL       options that cannot work together (tp_opts_check())
 *   -ENOMEM       out of memory, or the memlock limit is too low for the pool
 */
#ifndef RDCP_TRANSPORT_H
#define RDCP_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#define TP_KEY_LEN        32
#define TP_MAX_STREAMS    16
#define TP_DEF_MSG_SIZE   (1u << 20)
#define TP_DEF_POOL_SIZE  (32u << 20)
#define TP_TCP_DEF_STREAMS 2
#define TP_MAX_MSG_SIZE   (16u << 20)

enum tp_kind { TP_AUTO = 0, TP_TCP, TP_RDMA };

struct tp_opts {
	enum tp_kind kind;
	/* 1..TP_MAX_STREAMS, chosen by the sender; 0: the backend's default,
	 * TP_TCP_DEF_STREAMS over TCP (the receiver's copies out of the socket
	 * are then spread over two threads), one queue pair over RDMA (the NIC
	 * does the copying) */
	int streams;
	uint32_t msg_size;         /* payload bytes per message; 0: default */
	size_t pool_size;          /* buffer bytes per session; 0: default */
	int connect_timeout_ms;    /* keep retrying a refused connect; 0: 10 s */
	/*
	 * I/O timeout; 0: none. A session call that waits this long while
	 * nothing moves on the session (no byte sent or received, no buffer
	 * given back) fails with -ETIME, and so does every later call: the
	 * receiver in tp_msg_recv(); the sender in tp_msg_get(), tp_msg_send()
	 * (RDMA: waiting for a credit) and tp_finish() (waiting for the
	 * verdict). Time the caller spends outside the transport is not
	 * counted against it, but a sender whose own input is silent for longer
	 * makes the receiver time out: there are no keep-alives.
	 */
	int io_timeout_ms;
	/*
	 * Listener only: NULL, anyone may connect; else a numeric IPv4 or IPv6
	 * address, and only connections from it (v4-mapped forms match their
	 * IPv4 address) get a handshake; others are closed at once with a line
	 * on stderr. Copied by tp_listen(); an unparsable one is -EINVAL there.
	 */
	const char *peer_addr;
	int verbose;               /* -1: not even the TCP fallback notice */
	/* Seal every message (AEAD; key per run, stream and direction) on TCP.
	 * Both ends must say the same, or the handshake fails on both (-EPROTO).
	 * RDMA does not encrypt: TP_RDMA with encrypt is -EINVAL, and TP_AUTO
	 * with encrypt uses TCP only (listens on TCP only). */
	int encrypt;
	uint8_t key[TP_KEY_LEN];   /* from tp_key_derive() */
	/* Sender: at most this many payload bytes per second over all streams
	 * (a pacer in tp_msg_send(), which sleeps before a message until the
	 * bytes so far, this one included, fit the rate); 0: no limit. */
	uint64_t rate;
	/* Sender: asked between connect attempts while nobody listens; nonzero
	 * means the far side is gone (the receiver's control channel hung up,
	 * say) and nobody will: tp_connect() then stops at once with
	 * -ECONNABORTED and says nothing (the caller knows why). NULL: retry
	 * until connect_timeout_ms. */
	int (*gone)(void *arg);
	void *gone_arg;
};

struct tp_msg {
	void *data;        /* payload */
	uint32_t cap;      /* bytes available at data (sender) */
	uint32_t len;      /* bytes used */
	uint64_t id;       /* what the bytes belong to (the caller's choice) */
	uint64_t off;      /* where they go in it */
	int stream;        /* which stream carried it (receiver; informative) */
	/* Sender, only where tp_sends_files(): the payload is len bytes of this
	 * file at file_off, sent from the page cache (sendfile(2), no copy in
	 * user space) instead of data. The transport closes the fd once the
	 * message is sent or dropped. tp_msg_get() sets it to -1: data. */
	int file_fd;
	uint64_t file_off;
};

struct tp_session;
struct tp_listener;

/* -EINVAL (after saying why) if these options cannot work together:
 * encrypt with TP_RDMA. tp_listen() and tp_connect() check it too; call it
 * while parsing options to fail as a usage error. */
int  tp_opts_check(const struct tp_opts *o);

/* Derive the session key from a secret string. */
void tp_key_derive(const char *secret, size_t len, uint8_t key[TP_KEY_LEN]);

/* Listen on port (0: the kernel picks) at addr (NULL: every address, IPv4
 * and IPv6; else that address only, numeric or a name, for TCP and RDMA).
 * TP_AUTO listens on RDMA where a device exists and on TCP always. */
int  tp_listen(const char *addr, uint16_t port, const struct tp_opts *o,
               struct tp_listener **out);
/* The port listened on (the one picked, when tp_listen() was given 0). */
uint16_t tp_listener_port(const struct tp_listener *l);
/*
 * Wait (timeout_ms < 0: forever) for one sender's authenticated session.
 * Every connection is handshaken at once, side by side, each with a short
 * deadline of its own; one that is not the allowed peer, not rdcp, does not
 * know the key, stays silent or is too slow is closed and reported on
 * stderr (the first three one line each, the rest counted by
 * tp_listener_free()), and the wait goes on: a stranger never ends it. A
 * session of N streams is handed out once all N authenticated; others may
 * be assembled meanwhile. Returns 0 with *out; -ETIMEDOUT when timeout_ms
 * passed (connections in their handshake stay for the next call); -EPROTO
 * when a sender that knows the key disagrees about tp_opts.encrypt (said on
 * stderr: only a key holder can end the wait so); or an error of ours
 * (e.g. -ENOMEM: the pool cannot be registered).
 */
int  tp_accept(struct tp_listener *l, int timeout_ms, struct tp_session **out);
/* Close the listener and every connection still in its handshake; one line
 * on stderr for the dropped connections not reported one by one. */
void tp_listener_free(struct tp_listener *l);

/* Connect o->streams streams to host:port. TP_AUTO tries RDMA when an RDMA
 * device serves the route to host, else TCP (with a one-line notice). */
int  tp_connect(const char *host, uint16_t port, const struct tp_opts *o,
                struct tp_session **out);

/* Sender: a free buffer (waits while all are in flight). */
int  tp_msg_get(struct tp_session *s, struct tp_msg **m);
/* Sender: send m (m->len bytes, may be 0) and give the buffer back. */
int  tp_msg_send(struct tp_session *s, struct tp_msg *m);
/* Sender: put back a buffer without sending it. */
void tp_msg_put(struct tp_session *s, struct tp_msg *m);
/* Sender: end every stream, then wait for the receiver's verdict.
 * Returns 0 if the receiver took everything, else its error or ours. */
int  tp_finish(struct tp_session *s);

/* Receiver: next message; returns 0 with *m, 1 at the clean end of every
 * stream, or a negative error. */
int  tp_msg_recv(struct tp_session *s, struct tp_msg **m);
/* Receiver, any thread: done with m; its buffer goes back to the peer. */
void tp_msg_release(struct tp_session *s, struct tp_msg *m);
/* Receiver: tell the sender how it went (0, or a positive errno value). */
int  tp_verdict(struct tp_session *s, int status);

void tp_close(struct tp_session *s);

/* "rdma" or "tcp" */
const char *tp_kind_name(const struct tp_session *s);
/* Bytes of buffer memory this session holds (registered, for RDMA). */
size_t tp_pool_bytes(const struct tp_session *s);
/* The payload bytes one message may hold: the asked msg_size, or less when
 * the receiver takes less (its handshake's, over TCP). */
uint32_t tp_msg_cap(const struct tp_session *s);
int tp_streams(const struct tp_session *s);
/* Sender: 1 when messages may name a file range (tp_msg.file_fd): plain
 * TCP. RDMA sends from registered memory, and a sealed stream seals the
 * bytes in its buffer. */
int tp_sends_files(const struct tp_session *s);
/* Sender: the errno value the receiver reported it failed with, else 0. */
int tp_peer_status(const struct tp_session *s);
/* "AES-256-GCM" or "ChaCha20-Poly1305" when the session is sealed, else NULL. */
const char *tp_cipher_name(const struct tp_session *s);

/* --- for the programs' command lines and reports (transport/cli.c) --- */

/*
 * The key: KEY as given, or with KEY "-" the contents of key_file (first
 * line) if set, else $RDCP_KEY, so it stays out of ps. Returns 0 or -EINVAL
 * (after saying what is missing).
 */
int tp_opt_key(const char *arg, const char *key_file, uint8_t key[TP_KEY_LEN]);
/* "64M", "1g", "4096": bytes. 0 or -EINVAL. */
int tp_parse_size(const char *s, uint64_t *out);
/* "rdma", "tcp", "auto". 0 or -EINVAL. */
int tp_parse_kind(const char *s, enum tp_kind *k);
/* Options the programs share. Each says what is wrong and returns -EINVAL
 * on a bad value. */
int tp_opt_streams(const char *arg, int *streams);         /* 1..TP_MAX_STREAMS */
int tp_opt_transport(const char *arg, enum tp_kind *kind); /* --transport */
/* --pool (pool != 0) or --msg-size into o */
int tp_opt_size(const char *arg, int pool, struct tp_opts *o);
/* Whole seconds (0 or more) into milliseconds, e.g. --timeout; name is the
 * option, for the message. */
int tp_opt_seconds(const char *name, const char *arg, int *ms);
/* A PORT operand: min..65535 into *port. 0, or -EINVAL (said). */
int tp_opt_port(const char *arg, unsigned min, uint16_t *port);

/* The long options rdsend and rdrecv share: their getopt_long() codes
 * (a program's own start at TP_OPT_NEXT), table entries (<getopt.h>) and
 * handler. */
enum { TP_OPT_TRANSPORT = 256, TP_OPT_KEYFILE, TP_OPT_ENCRYPT, TP_OPT_POOL, TP_OPT_MSG,
       TP_OPT_TIMEOUT, TP_OPT_NEXT };
#define TP_CLI_OPTIONS \
	{ "transport", required_argument, NULL, TP_OPT_TRANSPORT }, \
	{ "key-file", required_argument, NULL, TP_OPT_KEYFILE }, \
	{ "encrypt", no_argument, NULL, TP_OPT_ENCRYPT }, \
	{ "pool", required_argument, NULL, TP_OPT_POOL }, \
	{ "msg-size", required_argument, NULL, TP_OPT_MSG }, \
	{ "timeout", required_argument, NULL, TP_OPT_TIMEOUT }
/* Option c (arg: its value) into o, --key-file's name into *key_file.
 * 1 taken, 0 not one of them, -EINVAL a bad value (said). */
int tp_cli_opt(int c, const char *arg, struct tp_opts *o, const char **key_file);

/* One line on stderr: why a transfer failed after `bytes`, as the sender
 * (sender != 0) or the receiver sees it (the receiver's verdict, the I/O
 * timeout, the peer gone, ...); s may be NULL. */
void tp_report_failure(int rc, uint64_t bytes, const struct tp_session *s, int sender);
/* -v: bytes, time, bandwidth, transport, streams, pool size, cipher. */
void tp_report_bw(const char *prog, uint64_t bytes, double seconds,
                  const struct tp_session *s);

#endif
