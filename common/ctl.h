/*
 * The control channel: length-prefixed, typed frames over a pair of fds (the
 * remote shell's pipes, or a socketpair for a local run). rdcp's sync
 * (sync/) and rdpipe's segments (pipe/) each speak their own messages over
 * it; the type numbers of both live here so that one registry says which
 * byte means what (docs/protocol.md).
 *
 * Conventions: 0 or a negative errno. Frames are bounded by CTL_FRAME_MAX;
 * a received payload is followed by 8 zero bytes, so its text can be printed
 * and a short ERROR read at buf + 4 stays in bounds.
 */
#ifndef RDCP_COMMON_CTL_H
#define RDCP_COMMON_CTL_H

#include <stddef.h>
#include <stdint.h>

#define CTL_MAGIC     0x52444353u   /* "RDCS" */
#define CTL_VERSION   11          /* of the sync's messages (HELLO carries it) */
#define CTL_FRAME_MAX (16u << 20)   /* manifests cross in parts of this */

enum ctl_type {
	CTL_HELLO = 1,      /* client -> server: who does what, options */
	CTL_READY,          /* server -> client: scanned, ready */
	CTL_ERROR,          /* either way: u32 exit code, message; then close */
	CTL_MANIFEST,       /* sender -> receiver: a part of the encoded manifest */
	CTL_MANIFEST_END,   /* sender -> receiver: u64 scan errors, archive key (32),
	                       u64 list generation and transfer times (us) */
	CTL_PLAN,           /* receiver -> sender: u32 count, u32 indices */
	CTL_DATA,           /* receiver -> sender: u16 port, 32-byte key, address */
	CTL_DONE,           /* receiver -> sender: results (see sync_result) */
	CTL_LOG,            /* receiver -> sender: itemized lines for the user */
	/* rdpipe (pipe/): controller <-> one segment */
	CTL_SEG_SETUP,      /* controller -> segment: what to run, the key */
	CTL_SEG_READY,      /* segment -> controller: u16 port it listens on */
	CTL_SEG_GO,         /* controller -> segment: u16 port, address of the next */
	CTL_SEG_DONE,       /* segment -> controller: results (see pipe/segmsg.c) */
	/* sync, version 2 */
	CTL_SENT,           /* sender -> receiver, after the data: u64 planned
	                       files it could not send, u64 of them unreadable
	                       (the rest vanished or changed) */
	CTL_NOOP,           /* either way: nothing (keep-alive under --timeout);
	                       ctl_recv() skips it */
	CTL_LANDED,         /* receiver -> sender, --remove-source-files: u32
	                       count, u32 manifest indices of what DST holds */
	CTL_FILES,          /* client -> server, after HELLO: a part of the
	                       --files-from list; an empty part ends it */
	/* sync, version 4 */
	CTL_PROGRESS,       /* receiver -> sender, during the data: u64 files
	                       landed, u64 their bytes (the sender's --progress) */
	/* sync, version 5 */
	CTL_CHUNKS,         /* receiver -> sender, after PLAN: which chunks of
	                       a planned file to send, and how (sync/delta/chunks.c) */
	CTL_CHUNKS_END,     /* receiver -> sender: no more CHUNKS (empty) */
	/* sync fan-out (rdcp SRC h1:DST h2:DST ...), a receiver run with --relay */
	CTL_RELAY,          /* client -> receiver, after its DATA: where to forward
	                       the data (u16 port, secret, address; empty: last);
	                       receiver -> client: u32 how that went (an errno) */
	/* sync, version 8 */
	CTL_FAILED,         /* the far side -> client, with --json (not a fan-out's):
	                       what failed there (sync/fails.c); a receiver sends
	                       it before DONE, a sender after SENT */
	/* sync --watch (a receiver given --watch only) */
	CTL_ROUND,          /* client -> server, after a round's end: another
	                       round follows (empty), its paths in FILES */
	/* sync, version 9 (a receiver given --rounds) */
	CTL_RETRY,          /* receiver -> sender, after SENT: u32 count, u32
	                       manifest indices of files whose data did not
	                       match the file list (changed as they were sent):
	                       the client sends them again in a round; version
	                       10: also a far sender -> client, right after SENT */
	/* sync, version 10 */
	CTL_ASREAD,         /* a far sender -> client, after SENT and RETRY: as
	                       RETRY, the files it sent as read (they never stood
	                       still), for -v and --json */
	/* sync, version 11: --windows (sync/windows.c), with --delete */
	CTL_WCHECK,         /* sender -> receiver, after SENT (after PLAN when
	                       it is empty): the entries that appeared in the
	                       window's directories since its scan, which the
	                       receiver must not delete */
	CTL_LAST = CTL_WCHECK,
};

struct ctl {
	int in, out;
	uint8_t *buf;       /* last frame's payload */
	size_t cap;
	int timeout_ms;     /* 0: wait forever; see ctl_set_timeout() */
	struct ctl_ka *ka;  /* the keep-alive thread, with a timeout */
	long long rx_ms;    /* CLOCK_MONOTONIC ms of the last frame received */
	uint64_t tx_bytes, rx_bytes;   /* frames sent and received, headers included */
};

/* Send one frame. 0 or -errno. */
int ctl_send(struct ctl *c, uint8_t type, const void *payload, size_t len);
/* Receive one frame into c->buf (NOOPs are skipped); *type and *len out.
 * -EPROTO on a frame over CTL_FRAME_MAX or of an unknown type: then *type is
 * 0 and c->buf holds the *len bytes read instead (the header, and what came
 * at once after it: text a remote shell printed, say). -ECONNRESET when the
 * peer closed, -ETIME when nothing came for the timeout. */
int ctl_recv(struct ctl *c, uint8_t *type, size_t *len);
/* Without waiting: 1 with a frame (not a NOOP) in c->buf when one has come,
 * 0 when none has, or an error (as ctl_recv's). */
int ctl_poll(struct ctl *c, uint8_t *type, size_t *len);
/* Milliseconds since the last frame (NOOPs included) came, or since the
 * timeout was set. */
long long ctl_idle_ms(const struct ctl *c);
/* n bytes of what was not a frame, for a message: printable ASCII as is,
 * the rest as \ooo, at most cap - 1 characters. Returns out. */
char *ctl_junk_text(const uint8_t *junk, size_t n, char *out, size_t cap);
/* The same junk as what a remote shell printed: its text up to the first
 * byte that is not (where rdcp's own protocol begins), newlines, tabs and
 * escapes written \n, \t, \e, and "..." when more followed. Returns out. */
char *ctl_shell_text(const uint8_t *junk, size_t n, char *out, size_t cap);
/* 1 when the peer has hung up (its end closed: the far process ended),
 * without reading what it may have sent before; else 0. Takes a struct
 * ctl * as void *, to serve as tp_opts.gone. */
int ctl_gone(void *c);
/* Send CTL_ERROR with an exit code and a message. */
void ctl_error(struct ctl *c, int code, const char *msg);
/* Stop the keep-alive thread, free the buffer (not the fds). */
void ctl_free(struct ctl *c);
/* From now on, a send or receive in which no byte moves for timeout_ms
 * fails with -ETIME (0: never), and a thread sends NOOP when nothing else
 * was sent for a quarter of that, so the peer's timeout holds while we
 * work. Makes the fds non-blocking; ctl_send() becomes thread-safe. */
int ctl_set_timeout(struct ctl *c, int timeout_ms);

#endif
