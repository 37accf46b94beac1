/* Private to sync/: the two roles of a sync run. */
#ifndef RDCP_SYNC_INT_H
#define RDCP_SYNC_INT_H

#include <stdio.h>
#include <sys/types.h>

#include "index/index.h"
#include "sync/ctl.h"
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
	int is_client;             /* prints its own log lines */
	int verbose;
	int progress;              /* client: --progress */
	const struct sync_rule *rules;
	int nrules;
};

/* sync/rsh.c: run `rsh host words...` (rsh split on blanks, NULL: "ssh")
 * with pipes to its stdin (*to) and from its stdout (*from); its pid, or -1
 * with errno. */
pid_t rsh_spawn(const char *rsh, const char *host, const char *const *words, int *to,
                int *from);

/* sync/pipeline.c: decode one rdpipe segment message (SEG_SETUP, SEG_GO or
 * SEG_DONE) as its receiver would; 0 if it would take it, else -EPROTO.
 * For the fuzz target. */
int pipe_msg_check(uint8_t type, const uint8_t *buf, size_t len);

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
	/* written: ok when all of it was; hash of what came; got bytes */
	void (*close)(void *ctx, uint64_t index, int ok, const uint8_t *hash, uint64_t got);
};
struct unpacker;
int  unpacker_start(struct unpacker **u, struct tp_session *ts,
                    const struct unpack_ops *ops, void *ctx);
/* Main thread: a message of the archive stream (the unpacker releases it). */
void unpacker_push(struct unpacker *u, struct tp_msg *m);
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

/* idx_scan_opts.skip for the role's --exclude/--include rules (ctx: role) */
int sync_filter_skip(const char *path, int is_dir, void *ctx);

struct sync_result {
	uint32_t code;             /* exit code */
	uint64_t files, bytes, deleted, errors, meta;
	const char *transport;     /* local only: "rdma" or "tcp" if data moved */
};

int sync_sender(struct role *r, struct sync_result *res);
int sync_receiver(struct role *r, struct sync_result *res);

enum { ROLE_SENDER = 1, ROLE_RECEIVER = 2 };

/* The HELLO a server receives (docs/protocol.md), decoded from peer input. */
struct hello {
	int role, streams, nrules;
	unsigned flags;
	enum tp_kind kind;
	char *path, *addr;
	struct sync_rule *rules;
};
/* 0, -EPROTO if malformed, -EPROTONOSUPPORT for another version. */
int  hello_decode(const uint8_t *buf, size_t len, struct hello *h);
void hello_free(struct hello *h);

/* DONE payload */
void result_put(uint8_t *p, const struct sync_result *r);
void result_get(const uint8_t *p, struct sync_result *r);
#define RESULT_LEN (4 + 5 * 8)

#endif
