/* Private to transport/: what the TCP and RDMA backends share: the wire
 * messages and handshake (msg.c), the session and its buffer pool (pool.c),
 * and the backends' entry points that session.c dispatches to. */
#ifndef RDCP_TP_INT_H
#define RDCP_TP_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "common/clock.h"
#include "transport/transport.h"

#define TP_HDR_LEN     32
#define TP_NONCE_LEN   32
#define TP_MAC_LEN     32
#define TP_PROTO_MAGIC 0x52445450u   /* "RDTP" */
#define TP_PROTO_VER   1
#define TP_HELLO_LEN   (4 + 2 + 2 + 4 + 4 + TP_NONCE_LEN)
#define TP_AUTH_LEN    (2 + 2 + 2 + 2 + 8 + TP_NONCE_LEN + TP_MAC_LEN)
#define TP_AUTHOK_LEN  TP_MAC_LEN
#define TP_CTRL_MAX    128           /* largest control message payload */
#define TP_TAG_LEN     16            /* AEAD tag after each sealed message */
#define TP_SEAL_NONCE_LEN 12         /* stream index (4) || sequence (8) */

/* HELLO flags: what the receiver wants and can do. */
#define TP_HF_ENCRYPT  0x0001u       /* it seals its streams: the sender must too */
#define TP_HF_AESGCM   0x0002u       /* it can do AES-256-GCM (with TP_HF_ENCRYPT) */

/* AUTH cipher: what the sender seals with (0: it does not encrypt). */
enum tp_cipher { TP_CIPHER_NONE = 0, TP_CIPHER_AESGCM = 1, TP_CIPHER_CHACHA = 2 };

enum tp_type {
	TP_DATA = 1,      /* payload: len bytes for (id, off) */
	TP_CREDIT = 2,    /* RDMA: `credits` more receive buffers are posted */
	TP_END = 3,       /* this stream is done: id = messages, off = bytes */
	TP_VERDICT = 4,   /* receiver to sender: id = 0 or an errno value */
	TP_HELLO = 16,    /* receiver to sender, first: challenge */
	TP_AUTH = 17,     /* sender to receiver: response + challenge */
	TP_AUTH_OK = 18,  /* receiver to sender: its response */
	TP_AUTH_FAIL = 19,
};

struct tp_hdr {
	uint8_t type;
	uint32_t len;
	uint64_t id, off;
	uint32_t credits;
};

void tp_hdr_put(uint8_t *p, const struct tp_hdr *h);
/* 0, or -EPROTO if p is not a header of ours (reserved bits, type). */
int  tp_hdr_get(const uint8_t *p, struct tp_hdr *h);

struct tp_hello {
	uint32_t max_msg;      /* largest payload the receiver takes */
	uint32_t credits;      /* receive buffers per stream (RDMA) */
	uint16_t flags;        /* TP_HF_*; 0 from tp_hs_hello() */
	uint8_t nonce[TP_NONCE_LEN];
};

struct tp_auth {
	uint16_t streams, index;
	uint16_t cipher;       /* enum tp_cipher */
	uint16_t hflags;       /* not in AUTH: the HELLO flags its MACs cover */
	uint64_t session;
	uint8_t nonce[TP_NONCE_LEN];
	uint8_t mac[TP_MAC_LEN];
};

void tp_hello_put(uint8_t *p, const struct tp_hello *h);
int  tp_hello_get(const uint8_t *p, size_t len, struct tp_hello *h);
void tp_auth_put(uint8_t *p, const struct tp_auth *a);
int  tp_auth_get(const uint8_t *p, size_t len, struct tp_auth *a);

/* The sender's proof: MAC over both nonces and the stream identity. */
void tp_auth_mac(const uint8_t key[TP_KEY_LEN], const uint8_t ns[TP_NONCE_LEN],
                 const struct tp_auth *a, uint8_t out[TP_MAC_LEN]);
/* The receiver's proof, bound to the sender's nonce and the session. */
void tp_authok_mac(const uint8_t key[TP_KEY_LEN], const uint8_t ns[TP_NONCE_LEN],
                   const struct tp_auth *a, uint8_t out[TP_MAC_LEN]);
/* Constant-time; 0 if equal. */
int  tp_mac_verify(const uint8_t a[TP_MAC_LEN], const uint8_t b[TP_MAC_LEN]);
void tp_random(void *buf, size_t len);

/* Handshake steps shared by both backends (pure: no I/O). */
/* Receiver: fill a HELLO (flags 0: the caller may set them). */
void tp_hs_hello(struct tp_hello *h, uint32_t max_msg, uint32_t credits);
/* Sender: given the HELLO payload, build the AUTH payload (TP_AUTH_LEN).
 * encrypt: the sender seals its streams; the cipher it picks (from the
 * HELLO's flags and this CPU) is in a->cipher. It answers even when the
 * receiver disagrees (so the receiver learns it too): check tp_hs_agree(). */
int  tp_hs_answer(const uint8_t key[TP_KEY_LEN], const uint8_t *hello, size_t len,
                  uint64_t session, int streams, int index, int encrypt,
                  struct tp_hello *h, struct tp_auth *a, uint8_t out[TP_AUTH_LEN]);
/* Receiver: check an AUTH payload; on success fill the AUTH_OK payload.
 * -EACCES wrong MAC, -EPROTO malformed, -EPROTONOSUPPORT an authentic
 * sender that does not encrypt when h->flags says we do, or the reverse. */
int  tp_hs_check(const uint8_t key[TP_KEY_LEN], const struct tp_hello *h,
                 const uint8_t *auth, size_t len, struct tp_auth *a,
                 uint8_t okmac[TP_MAC_LEN]);
/* 0 if HELLO flags and AUTH cipher agree; -EPROTONOSUPPORT if one side
 * encrypts and the other does not; -EPROTO for a cipher not offered. */
int  tp_hs_agree(uint16_t hflags, uint16_t cipher);
/* Sender: check the AUTH_OK payload. */
int  tp_hs_confirm(const uint8_t key[TP_KEY_LEN], const struct tp_hello *h,
                   const struct tp_auth *a, const uint8_t *ok, size_t len);

/* What one connection's handshake settled: both nonces, the stream's
 * identity and its cipher. An encrypted stream's keys come from it. */
struct tp_hs {
	struct tp_hello h;
	struct tp_auth a;
};

/* --- sealing (seal.c): authenticated encryption of a TCP stream --- */

enum tp_dir { TP_DIR_S2R = 1, TP_DIR_R2S = 2 };

/* One direction of one stream: its key, the stream index in its nonces and
 * the next message's sequence number. Used by one thread at a time. */
struct tp_seal {
	uint8_t key[TP_KEY_LEN];   /* this direction's (a plain value: copyable) */
	int cipher;          /* enum tp_cipher, never TP_CIPHER_NONE */
	uint32_t stream;
	uint64_t seq;
};

/* HELLO flags for a receiver that does (encrypt != 0) or does not seal. */
uint16_t tp_seal_offer(int encrypt);
/* The sender's cipher for these HELLO flags: AES-256-GCM when both CPUs
 * have it, else ChaCha20-Poly1305 (IETF). */
int  tp_seal_pick(uint16_t hflags);
/* "AES-256-GCM", "ChaCha20-Poly1305", or NULL for TP_CIPHER_NONE. */
const char *tp_cipher_str(int cipher);
/* Derive the key of direction dir of the stream of this handshake from the
 * session key and both nonces (docs/protocol.md); the sequence starts at 0. */
void tp_seal_init(struct tp_seal *k, const uint8_t key[TP_KEY_LEN],
                  const struct tp_hs *hs, enum tp_dir dir);
/* Encrypt p[0..len) in place; the header (TP_HDR_LEN bytes, as sent) is
 * authenticated too. The tag goes to tag. Advances the sequence. */
void tp_seal(struct tp_seal *k, const uint8_t *hdr, uint8_t *p, uint32_t len,
             uint8_t tag[TP_TAG_LEN]);
/* Check and decrypt in place what tp_seal() made as the next message of
 * this direction. 0, or -EBADMSG (p is then garbage) if anything differs:
 * header, payload, tag, key, stream or position in the stream. */
int  tp_unseal(struct tp_seal *k, const uint8_t *hdr, uint8_t *p, uint32_t len,
               const uint8_t tag[TP_TAG_LEN]);
void tp_seal_wipe(struct tp_seal *k);
/* Say that the peer (e.g. "the receiver at HOST port P") and we disagree
 * about encrypting; we = our setting. */
void tp_seal_mismatch(const char *peer, int we);

/* --- sessions --- */

struct tp_buf {
	struct tp_msg m;
	uint8_t *hdr;        /* TP_HDR_LEN bytes, separate from the payload */
	int next;            /* free list / queue link */
	int owner;           /* stream whose quota it counts against (receiver) */
};

/* b's file (tp_msg.file_fd), if any, closed: the message is sent or dropped. */
void tp_buf_drop_file(struct tp_buf *b);

struct tp_ops {
	const char *name;
	int files;   /* send() takes messages of a file range (tp_msg.file_fd) */
	int  (*send)(struct tp_session *s, struct tp_buf *b);
	int  (*get)(struct tp_session *s, struct tp_buf **b);
	void (*put)(struct tp_session *s, struct tp_buf *b);
	int  (*finish)(struct tp_session *s);
	int  (*recv)(struct tp_session *s, struct tp_buf **b);
	void (*release)(struct tp_session *s, struct tp_buf *b);
	int  (*verdict)(struct tp_session *s, int status);
	void (*close)(struct tp_session *s);
};

struct tp_session {
	const struct tp_ops *ops;
	int nstreams;
	uint32_t msg_size;
	int verbose;
	struct tp_buf *bufs;
	int nbufs;
	uint8_t *mem;        /* page-aligned payloads, nbufs * msg_size */
	uint8_t *hdrs;       /* nbufs * TP_HDR_LEN */
	size_t mem_len;
	uint8_t key[TP_KEY_LEN];
	int cipher;          /* enum tp_cipher: how the streams are sealed */
	int peer_status;     /* the receiver's verdict, when it was an error */
	int io_timeout_ms;   /* tp_opts.io_timeout_ms: a wait with no progress this long fails */
	void *be;            /* backend state */
	uint64_t rate;       /* tp_opts.rate: bytes/s sent, 0: no limit */
	double pace_next;    /* monotonic seconds: when the bytes sent so far fit the rate */
	pthread_mutex_t pace_mu;
};

/* --- the buffer pool (pool.c) --- */

/* Allocate nbufs buffers of msg_size bytes (page-aligned payloads). */
int  tp_pool_init(struct tp_session *s, int nbufs, uint32_t msg_size);
void tp_pool_free(struct tp_session *s);
/* Buffers for a session of these options: total count, at least 2 per stream. */
int  tp_pool_count(const struct tp_opts *o, int streams, uint32_t msg_size);

/* --- the listener's gate (gate.c) --- */

#define TP_GATE_LOG_MAX 3    /* dropped connections logged one line each */

struct tp_gate {
	int restricted;          /* only `peer` may connect */
	uint8_t peer[16];        /* IPv6, or IPv4 as v4-mapped */
	unsigned logged, quiet;  /* drops reported, and only counted */
};

/* peer_addr NULL: anyone; else a numeric address. 0 or -EINVAL (said why). */
int  tp_gate_init(struct tp_gate *g, const char *peer_addr);
/* 1 if a connection from sa may start a handshake. */
int  tp_gate_allows(const struct tp_gate *g, const struct sockaddr *sa);
/* Report a dropped connection: one line for the first TP_GATE_LOG_MAX, then
 * only counted. */
void tp_gate_drop(struct tp_gate *g, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* One line for the drops only counted so far (if any). */
void tp_gate_done(struct tp_gate *g);
/* "10.0.0.1 port 4711" (v4-mapped addresses shown as IPv4). */
void tp_addr_name(const struct sockaddr *sa, char *buf, size_t cap);

/*
 * --- backends: tcp_listen.c, tcp_conn.c, rdma_listen.c, rdma_conn.c ---
 *
 * A listener is driven by tp_accept()'s poll loop: *_poll_fds() fills the
 * pollfds it needs (at most *_POLL_MAX) and lowers *due to its next
 * deadline; after poll(), *_poll_step() moves every pending connection on
 * without blocking and returns 1 with *out when one session is complete and
 * authenticated, 0 to keep waiting, or a negative error that is not one
 * stranger's fault (the peers' failures are dropped and reported via the
 * gate; only a sender that knows the key but disagrees about encrypting,
 * TCP, ends the wait: -EPROTO).
 */
#define TP_HS_MS        5000    /* one connection's handshake, either side */
#define TP_GROUP_MS     10000   /* the rest of a session's streams, after its first */

struct tp_tcp_listener;
#define TP_TCP_POLL_MAX 65
int  tp_tcp_listen(const char *addr, uint16_t port, const struct tp_opts *o,
                   struct tp_gate *g, struct tp_tcp_listener **out);
uint16_t tp_tcp_listener_port(const struct tp_tcp_listener *l);
int  tp_tcp_poll_fds(struct tp_tcp_listener *l, struct pollfd *p, int64_t *due);
int  tp_tcp_poll_step(struct tp_tcp_listener *l, const struct pollfd *p, int n,
                      struct tp_session **out);
void tp_tcp_listener_free(struct tp_tcp_listener *l);
int  tp_tcp_connect(const char *host, uint16_t port, const struct tp_opts *o,
                    struct tp_session **out);

struct tp_rdma_listener;
#define TP_RDMA_POLL_MAX 5
int  tp_rdma_available(void);
int  tp_rdma_listen(const char *addr, uint16_t port, const struct tp_opts *o,
                    struct tp_gate *g, struct tp_rdma_listener **out);
uint16_t tp_rdma_listener_port(struct tp_rdma_listener *l);
int  tp_rdma_poll_fds(struct tp_rdma_listener *l, struct pollfd *p, int64_t *due);
int  tp_rdma_poll_step(struct tp_rdma_listener *l, const struct pollfd *p, int n,
                       struct tp_session **out);
void tp_rdma_listener_free(struct tp_rdma_listener *l);
/* -ENODEV when no RDMA device serves the route to host. */
int  tp_rdma_connect(const char *host, uint16_t port, const struct tp_opts *o,
                     struct tp_session **out);

#endif
