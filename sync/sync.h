/*
 * sync: what runs on top of index/ and transport/. Today: the pumps that
 * move a byte stream (a pipe or a file) through a transport session, used by
 * rdsend, rdrecv and rdpipe.
 *
 * Conventions as elsewhere: 0 or a negative errno; messages on stderr.
 */
#ifndef RDCP_SYNC_H
#define RDCP_SYNC_H

#include <stdint.h>

#include "transport/transport.h"

struct pump_stats {
	uint64_t bytes;
	double seconds;
	int local;        /* the failure was ours (file I/O), not the link's */
};

/*
 * Send everything readable from fd (name is for messages), then end the
 * session and wait for the receiver's verdict. A regular file is read with
 * parallel positioned reads from its current offset to its end; anything
 * else is read sequentially, each message filled before it is sent.
 */
int pump_send(struct tp_session *s, int fd, const char *name, struct pump_stats *st);

/*
 * Receive the whole stream into fd and send the verdict. A regular file (not
 * O_APPEND) is written with parallel pwrite at each message's offset and cut
 * to the received length; anything else gets the bytes in order.
 */
int pump_recv(struct tp_session *s, int fd, const char *name, struct pump_stats *st);

/* --- a sync run: rdcp [OPTIONS] SRC DST --- */

enum {
	SYNC_F_RECURSIVE = 1 << 0,   /* -r: directories too */
	SYNC_F_MIRROR    = 1 << 1,   /* --sync: DST becomes a mirror of SRC's contents */
	SYNC_F_PERMS     = 1 << 2,   /* -a: permissions */
	SYNC_F_TIMES     = 1 << 3,   /* -a: modification times (ns) */
	SYNC_F_OWNER     = 1 << 4,   /* -a as root: owner and group */
	SYNC_F_HARDLINKS = 1 << 5,   /* -H */
	SYNC_F_DELETE    = 1 << 6,   /* --delete */
	SYNC_F_DRYRUN    = 1 << 7,   /* -n */
	SYNC_F_CHECKSUM  = 1 << 8,   /* -c: compare content hashes, not size+mtime */
	SYNC_F_ITEMIZE   = 1 << 9,   /* -v or -n: report each change */
	SYNC_F_ALL       = (1 << 10) - 1,
};

/* --exclude / --include, in command-line order (rules in sync/filter.c) */
struct sync_rule {
	int include;
	const char *pattern;
};

struct sync_opts {
	const char *src, *dst;      /* local paths or [user@]host:path */
	const struct sync_rule *rules;
	int nrules;
	unsigned flags;             /* SYNC_F_* */
	int verbose;
	int progress;               /* --progress: a live line on a terminal */
	const char *rsh;            /* remote shell, default "ssh" */
	const char *rdcp_path;      /* the remote rdcp, default "rdcp" */
	const char *data_addr;      /* address for data connections (see rdcp.1) */
	struct tp_opts tp;          /* kind, streams */
};

/* Run a sync from the client side; returns the exit code (common/exitcode.h). */
int sync_client(const struct sync_opts *o);
/* The far side (rdcp --server): control channel on stdin/stdout. */
int sync_server(void);

/* --- rdpipe: a pipeline of commands on hosts (sync/pipeline.c) --- */

/* What a segment's command starts with: nothing, <, > or >> */
enum pipe_op { PIPE_CMD, PIPE_FROM, PIPE_TO, PIPE_APPEND };

struct pipe_opts {
	const char *const *segs;    /* "[user@]host:command", in pipeline order */
	int nsegs;
	const char *rsh;            /* remote shell, default "ssh" */
	const char *rdpipe_path;    /* the remote rdpipe, default "rdpipe" */
	int verbose;                /* -v: each hop's bandwidth at the end */
	int dry_run;                /* -n: print what would run */
	struct tp_opts tp;          /* kind, streams (the key is made per run) */
};

/* Run the pipeline; returns the exit code (see rdpipe.1). */
int pipe_run(const struct pipe_opts *o);
/* The far side of one segment (rdpipe --segment): control on stdin/stdout. */
int pipe_segment(void);
/* The operator a segment's command starts with; *arg: what follows it. */
enum pipe_op pipe_op_of(const char *cmd, const char **arg);

/* --- helpers for the programs' command lines --- */

/*
 * The key: KEY as given, or with KEY "-" the contents of key_file (first
 * line) if set, else $RDCP_KEY, so it stays out of ps. Returns 0 or -EINVAL
 * (after saying what is missing).
 */
int sync_key(const char *arg, const char *key_file, uint8_t key[TP_KEY_LEN]);
/* "64M", "1g", "4096": bytes. 0 or -EINVAL. */
int sync_parse_size(const char *s, uint64_t *out);
/* "rdma", "tcp", "auto". 0 or -EINVAL. */
int sync_parse_kind(const char *s, enum tp_kind *k);
/* Command-line options the programs share. Each says what is wrong and
 * returns -EINVAL on a bad value. */
int sync_opt_streams(const char *arg, int *streams);         /* -P 1..16 */
int sync_opt_transport(const char *arg, enum tp_kind *kind); /* --transport */
/* --pool (pool != 0) or --msg-size into o */
int sync_opt_size(const char *arg, int pool, struct tp_opts *o);

/* The documented exit code (common/exitcode.h) for a pump result. */
int sync_exit_code(int rc, const struct pump_stats *st);
/* One line on stderr: why a transfer failed, from the sender's view or not. */
void sync_report_error(int rc, const struct pump_stats *st, struct tp_session *s,
                       int sender);
/* -v: bytes, time, bandwidth, transport, streams, pool size. */
void sync_report_bw(const char *prog, const struct pump_stats *st, struct tp_session *s);

#endif
