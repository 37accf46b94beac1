/* Private to sync/: the two roles of a sync run. */
#ifndef RDCP_SYNC_INT_H
#define RDCP_SYNC_INT_H

#include <stdio.h>
#include <sys/types.h>

#include "index/index.h"
#include "common/ctl.h"
#include "sync/sync.h"

#define SYNC_MSG_SIZE  ((uint32_t)IDX_CHUNK_SIZE)   /* one message = one chunk */
/* Files smaller than this go in the archive stream (tuned with
 * benchmarks/threshold.sh; build with -DSYNC_SMALL=N to try another). */
#ifndef SYNC_SMALL
#define SYNC_SMALL     ((uint64_t)64 << 10)
#endif
#define SYNC_ARCHIVE_ID UINT64_MAX           /* message id of the archive stream */
#define SYNC_POOL_SIZE ((size_t)32 << 20)   /* 8 chunks in flight; RSS target */

/* What a side needs to play its role. */
struct role {
	struct ctl *ctl;
	const char *path;          /* SRC for the sender, DST for the receiver */
	unsigned flags;            /* SYNC_F_* */
	struct tp_opts tp;
	const char *connect_addr;  /* sender: where the receiver listens */
	const char *announce_addr; /* receiver: address to tell the sender ("" none) */
	const char *listen_addr;   /* receiver: the address to listen on (NULL: all) */
	const char *allow_addr;    /* receiver: the only sender address (NULL: any) */
	int is_client;             /* prints its own log lines */
	int verbose;
	int progress;              /* client: --progress */
	const struct sync_rule *rules;
	int nrules;
	int timeout;               /* --timeout, seconds of I/O inactivity (0: none) */
	uint64_t frames;           /* control frames received (sync_recv) */
	const struct sync_opts *o; /* every option of the run (sync/opts.c) */
};

/* sync/ids.c: the sender's names for the uids and gids of m (owners and
 * named ACL entries; never 0), each looked up once, into m->names (rsync's
 * user and group lists). 0 or -ENOMEM. */
int  sync_names_collect(struct idx_manifest *m);

/* sync/chmod.c: --chmod (rsync's syntax). parse: 0, -EINVAL for a string
 * rsync would refuse, -ENOMEM; umask_bits: for items without u/g/o/a.
 * apply: the mode (07777 bits) of an entry, a directory or not. */
struct sync_chmod;
int  sync_chmod_parse(const char *arg, uint32_t umask_bits, struct sync_chmod **out);
uint32_t sync_chmod_apply(const struct sync_chmod *ch, uint32_t mode, int is_dir);
void sync_chmod_free(struct sync_chmod *ch);

/* sync/pack.c: small files as one tar stream over the transport */
struct packer;
int  packer_open(struct packer **p, struct tp_session *ts);
int  packer_add(struct packer *p, uint32_t index, const void *data, uint64_t size);
uint64_t packer_bytes(const struct packer *p);
/* ok: finish the archive and send the rest; else just drop it */
int  packer_close(struct packer *p, int ok);

struct unpack_ops {
	/* entry `index` of size bytes: an fd to write it to, -1 to skip it,
	 * -EPROTO if the entry cannot be one the sender should send */
	int  (*open)(void *ctx, uint64_t index, uint64_t size);
	/* written: err 0 when all of it was, EPROTO for a malformed entry, else
	 * the write's errno; hash of what came; got bytes. A negative return
	 * (e.g. -ENOSPC) stops the unpacker: the rest is dropped. */
	int  (*close)(void *ctx, uint64_t index, int err, const uint8_t *hash, uint64_t got);
	/* the stream is not what the sender should send: msg, one line */
	void (*damaged)(void *ctx, const char *msg);
};
struct unpacker;
/* ts NULL (tests): messages are not released, they stay the caller's. */
int  unpacker_start(struct unpacker **u, struct tp_session *ts,
                    const struct unpack_ops *ops, void *ctx);
/* Main thread: a message of the archive stream (the unpacker releases it). */
void unpacker_push(struct unpacker *u, struct tp_msg *m);
/* Main thread: the unpacker's error so far (0 while all is well). */
int  unpacker_error(struct unpacker *u);
/* After the last message: wait for the unpacker; 0 or an error. */
int  unpacker_finish(struct unpacker *u);

struct progress {
	int on;
	double t0, last;
	uint64_t total_bytes, total_files;
};
/* --progress on a terminal (silent otherwise): totals, then updates. */
void progress_start(struct progress *p, int wanted, uint64_t bytes, uint64_t files);
void progress_update(struct progress *p, uint64_t bytes, uint64_t files, int final);

/* sync/fs.c: open path beneath root (an fd of a tree's root) without
 * following any symlink or leaving the tree; "" is root itself (a dup). */
int sync_open_beneath(int root, const char *path, int flags);
/* sync/fs.c: lock the tree at rootfd for this run (writer: exclusive, the
 * receiver; else shared, the sender), never waiting. 0, or -EWOULDBLOCK when
 * another run holds it (said, naming path), or another error (said). */
int sync_lock(int rootfd, const char *path, int writer);

/* idx_scan_opts.skip for the role's --exclude/--include rules (ctx: role) */
int sync_filter_skip(const char *path, int is_dir, void *ctx);

struct sync_result {
	uint32_t code;             /* exit code */
	uint64_t files, bytes, deleted, errors, meta;
	const char *transport;     /* local only: "rdma" or "tcp" if data moved */
};

int sync_sender(struct role *r, struct sync_result *res);
/* The server's body; local: forked by a local run's client (loopback). */
int sync_serve(int local);
int sync_receiver(struct role *r, struct sync_result *res);

enum { ROLE_SENDER = 1, ROLE_RECEIVER = 2 };

/* Send the HELLO that gives the server its role, with o's options. */
int  hello_send(struct ctl *c, int role, const struct sync_opts *o, const char *path,
                const char *addr);
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
int  result_get(const uint8_t *p, struct sync_result *r);
#define RESULT_LEN (4 + 5 * 8)

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

/* The next control frame from the peer, who plays `peer` ("sender" or
 * "receiver"). A frame header that is not one is said in one line: for the
 * client's first frame, rsync's hint that the remote shell printed
 * something (its first bytes shown; -EPROTONOSUPPORT, exit 2), else the
 * bytes seen (-EPROTO). Other results as ctl_recv(). */
int sync_recv(struct role *r, const char *peer, uint8_t *type, size_t *n);
/* A CTL_ERROR of n bytes in c->buf: its text after prefix on one line,
 * control characters escaped. Returns its exit code, RD_EXIT_PROTO when it
 * is not 1..255. */
uint32_t sync_peer_error(const struct ctl *c, size_t n, const char *prefix);

#endif
