/*
 * pipe: byte streams between hosts. The pumps (pipe/pump.c) move a stream
 * (a pipe, or a file with parallel positioned I/O) into or out of one
 * transport session: they are rdsend and rdrecv. rdpipe builds on them: a
 * UNIX pipeline whose segments run on hosts, each hop one authenticated
 * transport session (pipe/pipeline.c, the controller; pipe/segment.c, the
 * far side; pipe/segmsg.c, the segments' syntax and messages). docs/pipe.md.
 *
 * Depends on transport/ and common/; nothing here knows of sync/ or index/.
 * Conventions as elsewhere: 0 or a negative errno; messages on stderr.
 * What pipe/pipeline.c and pipe/segment.c share is in pipe/pipe_int.h.
 */
#ifndef RDCP_PIPE_H
#define RDCP_PIPE_H

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

/* The documented exit code (common/exitcode.h) for a pump result. */
int pump_exit_code(int rc, const struct pump_stats *st);
/* One line on stderr: why a pump failed (nothing if it already said so). */
void pump_report_error(int rc, const struct pump_stats *st, const struct tp_session *s,
                       int sender);

/* --- rdpipe: a pipeline of commands on hosts --- */

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

#endif
