/* Private to sync/: the two roles of a sync run. */
#ifndef RDCP_SYNC_INT_H
#define RDCP_SYNC_INT_H

#include <pthread.h>
#include <stdio.h>
#include <sys/types.h>

#include "index/index.h"
#include "common/ctl.h"
#include "sync/sync.h"

/* One message = one chunk (with room for an ASREAD chunk's tag). */
#define SYNC_MSG_SIZE  ((uint32_t)IDX_CHUNK_SIZE + 64)
/* Files smaller than this go in the archive stream (tuned with
 * benchmarks/threshold.sh; build with -DSYNC_SMALL=N to try another). */
#ifndef SYNC_SMALL
#define SYNC_SMALL     ((uint64_t)64 << 10)
#endif
#define SYNC_ARCHIVE_ID UINT64_MAX           /* message id of the archive stream */
/* A fan-out host's mark, forwarded down the chain: the stream before it
 * lost data (a host before died and the chain was re-linked around it);
 * an archive of small files not yet whole is dropped from here on. Empty. */
#define SYNC_GAP_ID    (UINT64_MAX - 1)
/* --watch, one stream: a round's data ends, its session stays. Empty. */
#define SYNC_ROUND_END_ID (UINT64_MAX - 2)
#define SYNC_KEEP_IDLE_MS 60000   /* not kept longer idle: a NAT may drop it */
#define SYNC_POOL_SIZE ((size_t)8 * (SYNC_MSG_SIZE + 4096))   /* 8 chunks (pages); RSS */

/* sync/fails.c: --json's bounded list of failed and vanished entries. */
#define SYNC_FAILS_MAX 100
#define SYNC_FAIL_PATH_MAX 4096
#define SYNC_FAIL_WHY_MAX 255
struct sync_fail {
	char *path, *why;
	int vanished;
};
struct sync_fails {
	pthread_mutex_t mu;
	unsigned n;
	struct sync_fail e[SYNC_FAILS_MAX];
};
/* NULL when out of memory; sync_fails_free(NULL) is a no-op. */
struct sync_fails *sync_fails_new(void);
void sync_fails_free(struct sync_fails *f);
/* Note path's failure (why: the reason, vanished: it changed or vanished
 * in SRC); past SYNC_FAILS_MAX, or with f NULL (no --json), nothing. Any
 * thread. */
void sync_fails_add(struct sync_fails *f, const char *path, const char *why, int vanished);
/* f as a CTL_FAILED frame's body (malloc'd, *len bytes); NULL: no memory. */
uint8_t *sync_fails_encode(struct sync_fails *f, size_t *len);
/* A peer's CTL_FAILED (hostile input) into f (NULL: only checked).
 * 0, or -EPROTO with *why saying what is wrong. */
int sync_fails_take(struct sync_fails *f, const uint8_t *b, size_t n, const char **why);
/* f as a JSON array of {"path", "reason", "vanished"}. */
void sync_fails_json(FILE *out, const struct sync_fails *f);

struct role {
	struct ctl *ctl;
	const char *path;          /* SRC for the sender, DST for the receiver */
	const char *const *srcs;   /* sender: every SRC (srcs[0] is path) */
	int nsrc;                  /* sender: how many; 1 unless rdcp A B... DST */
	unsigned flags;            /* SYNC_F_* */
	struct tp_opts tp;
	const char *connect_addr;  /* sender: where the receiver listens */
	const char *announce_addr; /* receiver: address to tell the sender ("" none) */
	const char *listen_addr;   /* receiver: the address to listen on (NULL: all) */
	const char *allow_addr;    /* receiver: the only sender address (NULL: any) */
	int is_client;             /* prints its own log lines */
	int local;                 /* server: forked by a local run's client */
	int verbose;
	int progress;              /* client: --progress */
	int timeout;               /* --timeout, seconds of I/O inactivity (0: none) */
	uint64_t frames;           /* control frames received (sync_recv) */
	const struct sync_opts *o; /* every option of the run (sync/opts.c) */
	struct sync_fails *fails;  /* --json, not a fan-out's host: what failed */
	int all_hashes;            /* sender: every hash in the manifest (a fan-out:
	                              no host may make small files for the next) */
	int rounds;                /* sender: the receiver was offered rounds
	                              (--rounds: it may ask for files again) */
	struct sync_paths *retry;  /* NULL: none. Files changed as read, for the
	                              client's next round: a (far) sender's, and
	                              a receiving client's own */
	struct tp_session **keep;  /* --watch: a one-stream session kept here, */
	long long keep_ms;         /* since (clock_ms(); the receiver's) */
	struct sync_paths *as_read;  /* files sent as read (they changed as read:
	                              SYNC_MSG_ASREAD), the sender's or a far
	                              one's (after SENT) */
};

/* A list of paths (sync/fails.c). add: 0 or -ENOMEM (the list is then
 * marked lost: whoever reads it must not trust it to be whole). */
struct sync_paths {
	char **v;
	size_t n, cap;
	int lost;
};
int  sync_paths_add(struct sync_paths *p, const char *path);
void sync_paths_free(struct sync_paths *p);
/* Sorted, each path once. */
void sync_paths_unique(struct sync_paths *p);
/* sync/send/sources.c: SRC is a directory whose contents are sent (its
 * paths are relative to it): 1, else 0. */
int  sync_src_contents(const char *src, unsigned flags);

/* What a scan reads besides (idx_scan_opts.meta) for the run's flags. */
static inline unsigned sync_scan_meta(unsigned flags)
{
	return ((flags & SYNC_F_XATTRS) ? IDX_SCAN_XATTRS : 0) |
	       ((flags & SYNC_F_ACLS) ? IDX_SCAN_ACLS : 0);
}

/* The sender's scan under --append (not --append-verify) trusts what the
 * receiver will: a grown file's old part, whose digests it takes from its
 * index unread (idx_scan_opts.trust_prefix), as rsync reads only what it
 * appends. */
static inline int sync_trust_prefix(unsigned flags)
{
	return (flags & SYNC_F_APPEND) && !(flags & SYNC_F_APPEND_VERIFY);
}

/* Small files are not read by a scan (idx_scan_opts.lazy_below) and go
 * without their hash in the manifest (idx_manifest.nohash_below): the
 * sender hashes each as it reads it to send, and its hash travels with its
 * data (sync/archive/pack.c). Not with -c, which compares the hashes, nor from a
 * fan-out's sender (role.all_hashes). */
static inline uint32_t sync_nohash_below(const struct role *r)
{
	uint64_t n = SYNC_SMALL & ~(uint64_t)1023;
	return (r->flags & SYNC_F_CHECKSUM) || r->all_hashes ? 0
	       : n > IDX_NOHASH_MAX ? IDX_NOHASH_MAX : (uint32_t)n;
}

/* sync/ids.c: the sender's names for the uids and gids of m (owners and
 * named ACL entries; never 0), each looked up once, into m->names (rsync's
 * user and group lists). 0 or -ENOMEM. */
int  sync_names_collect(struct idx_manifest *m);
/* sync/ids.c, the receiver: the sender's uids and gids (owners, ACL
 * entries) of sm made ours: by name unless --numeric-ids (sm->names),
 * --chown's (chown_arg), and as non-root IDX_ID_NONE for a group we are not
 * in; *set_uid, *set_gid: owners are ours to set. 0, -EINVAL (--chown
 * names no one here; said), -ENOMEM. */
int  sync_map_ids(struct idx_manifest *sm, unsigned flags, const char *chown_arg,
                  int *set_uid, int *set_gid);
/* Sort ACL entries; a second entry of one (tag, id) is dropped. */
void sync_acl_canon(struct idx_ace *a, uint16_t *n);

/* The run's archive key: random, made by the sender, sent to the receiver
 * in MANIFEST_END over the control channel (ssh). An archive entry's name
 * carries the tag of what the sender read, keyed with it: nothing on the
 * data path can make one for other data. */
#define SYNC_AKEY_LEN 32
#define SYNC_TAG_LEN  16

#define PROGRESS_SAMPLES 8
struct progress {
	int on, human;
	double t0, last;
	uint64_t total_bytes, total_files;
	double st[PROGRESS_SAMPLES];     /* recent (time, bytes): the current rate */
	uint64_t sb[PROGRESS_SAMPLES];
	int ns;
};
struct role;
/* --progress (r->progress) on a terminal, silent otherwise (or with -q):
 * the totals, then updates with the bytes moved and the files landed. */
void progress_start(struct progress *p, const struct role *r, uint64_t bytes, uint64_t files);
void progress_update(struct progress *p, uint64_t bytes, uint64_t files, int final);

/* sync/fs.c: open path beneath root (an fd of a tree's root) without
 * following any symlink or leaving the tree; "" is root itself (a dup). */
int sync_open_beneath(int root, const char *path, int flags);
/* sync/fs.c: mkdir -p path (--mkpath); 0 or a negative errno (said). */
int sync_mkpath(const char *path);
/* sync/fs.c: the directory rel (relative, ".." allowed: the user's choice)
 * under root, one component at a time, never through a symlink (a peer may
 * have planted one in the tree); made as needed when make is set. An fd,
 * or -errno (-ENOTDIR for a symlink on the way). */
int sync_dir_beneath(int root, const char *rel, int make);
/* sync/lock.c: lock the tree at dirfd for this run, never waiting: as its
 * writer (the receiver: no other run at it, above it or inside it), as its
 * reader (the sender: no run writing into it, above it or inside it), or
 * reading one file in it (no run writing into it or above it). 0 and *out
 * (sync_unlock() it; the locks go when the process goes), or -EWOULDBLOCK
 * when another run is in the way (said, naming path and the other tree), or
 * another error (said). RANKED: job, the ranked job's token (or 0). */
enum sync_lock_mode { SYNC_LOCK_WRITE, SYNC_LOCK_READ, SYNC_LOCK_INSIDE, SYNC_LOCK_RANKED };
struct sync_lock;
int sync_lock(int dirfd, const char *path, enum sync_lock_mode mode, uint64_t job,
              struct sync_lock **out);
void sync_unlock(struct sync_lock *l);   /* NULL: nothing */
/* sync/lock.c: before a local run forks its other side: both sides' locks
 * share one open of the host's lock file (SRC may hold DST). */
void sync_lock_share(void);

/* sync/opts.c: forward "--filter=text" to the far side. 0 or -1. */
int  sync_opts_forward_rule(struct sync_opts *o, const char *text);

/* Entries by kind, as rsync's --stats counts them. */
enum { SYNC_K_REG, SYNC_K_DIR, SYNC_K_LINK, SYNC_K_DEV, SYNC_K_SPECIAL, SYNC_KINDS };

struct sync_result {
	uint32_t code;             /* exit code */
	/* the receiver's counts, carried in DONE: files landed, their bytes,
	 * entries deleted, errors (the sender's unreadable entries included),
	 * metadata-only updates; entries created and deleted by kind */
	uint64_t files, bytes, deleted, errors, meta;
	uint64_t created[SYNC_KINDS], removed[SYNC_KINDS];
	uint64_t matched;          /* bytes of changed files reused from DST's old
	                              versions, not sent (rsync's "Matched data") */
	/* this side's own, for the report (not in DONE) */
	uint64_t vanished;         /* files that vanished or changed while being
	                              sent: the sender's count (exit 24) */
	uint64_t gone;             /* the sender, with rounds: entries that vanished
	                              (its scan's, its reads'), not those listed to
	                              go again */
	struct sync_fails *fails;  /* --json: the role's list (struct role) */
	const struct sync_paths *as_read;   /* --json's: files sent as read */
	const char *transport;     /* "rdma" or "tcp" if data moved */
	uint64_t entries[SYNC_KINDS], total_size;   /* the sender's file list */
	uint64_t flist_bytes;      /* the file list's encoded size */
	uint64_t flist_gen_us;     /* the sender's: its scan and encoding (rsync's */
	uint64_t flist_xfer_us;    /* "File list generation/transfer time") */
	uint64_t ctl_tx, ctl_rx;   /* control channel bytes */
	unsigned round;            /* --watch: the round (0: the first, whole) */
	int whole;                 /* --watch: the round scanned the whole tree */
	double lag_s;              /* --watch: its oldest change's age when it
	                              landed, seconds (-1: none) */
	int we_sent;               /* this side was the sender */
	uint64_t wire, hashed;     /* the sender: data bytes sent; bytes its scan read */
	int hosts;                 /* a fan-out's: hosts (bytes: all of theirs) */
};

/* sync/report.c: what the user sees (rsync's formats). */
#define SYNC_NUM_LEN 32
/* n as rsync prints it: human 0 "1,234,567", 1 (-h) "1.23M", 2 (-hh) in
 * powers of 1024. Returns buf. */
char *sync_num(char buf[SYNC_NUM_LEN], uint64_t n, int human);
/* Itemized change bits: rsync's YXcstpoguax columns after the first two. */
enum {
	SYNC_ITEM_NEW      = 1 << 0,   /* "+++++++++" */
	SYNC_ITEM_SUM      = 1 << 1,   /* c: checksum (-c), link target, device number */
	SYNC_ITEM_SIZE     = 1 << 2,   /* s */
	SYNC_ITEM_TIME     = 1 << 3,   /* t */
	SYNC_ITEM_TIME_NOW = 1 << 4,   /* T: set to the transfer time (no -t) */
	SYNC_ITEM_PERMS    = 1 << 5,   /* p */
	SYNC_ITEM_OWNER    = 1 << 6,   /* o */
	SYNC_ITEM_GROUP    = 1 << 7,   /* g */
	SYNC_ITEM_ACL      = 1 << 8,   /* a */
	SYNC_ITEM_XATTR    = 1 << 9,   /* x */
};
#define SYNC_ITEM_LEN 12
/* "YXcstpoguax": how ('>' received, '<' sent, 'c' created, 'h' hard link,
 * '.' attributes only), type (sync_item_type()), bits. Returns out. */
char *sync_item_code(char out[SYNC_ITEM_LEN], char how, char type, unsigned bits);
char sync_item_type(int idx_type);
/* The bits for sender entry e against DST's d (NULL: new) under the run's
 * flags; own: owners are kept (root); sent: its content is transferred.
 * ACLs and xattrs are for the caller to add (the receiver adds them, and
 * the owners, by its rules: sync/recv/itemize.c). */
unsigned sync_item_bits(const struct idx_entry *e, const struct idx_entry *d, unsigned flags,
                        int own, int sent);
int  sync_kind(int idx_type);   /* SYNC_K_* */
/* Count m's entries into res->entries and total_size (skip_root: not "") */
void sync_count_entries(struct sync_result *res, const struct idx_manifest *m, int skip_root);
/* The client: -v's first line; returns the start time for sync_report(). */
double sync_report_begin(const struct sync_opts *o, int client_sends);
/* The client, at the end: -v's summary, --stats, --json (code is the exit
 * code the process returns). Returns code. */
int  sync_report(const struct sync_opts *o, const struct sync_result *res, int code, double t0);

/* sync/report.c: sync_report(), with --json's key ("hosts" of a fan-out,
 * "ranks") and its array (JSON text, may be NULL); a string as JSON text. */
int  sync_report_hosts(const struct sync_opts *o, const struct sync_result *res, int code,
                       double t0, const char *key, const char *array_json);
void sync_json_str(FILE *f, const char *s);

/* sync/client.c: "[user@]host:path" (no '/' before the ':') into *host and
 * *path, else a local path (*host NULL). 0 or -ENOMEM. */
int  sync_parse_endpoint(const char *arg, char **host, char **path);

int sync_sender(struct role *r, struct sync_result *res);
/* The server's body; local: forked by a local run's client (loopback). */
int sync_serve(int local);
int sync_receiver(struct role *r, struct sync_result *res);

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
/* Its exit code alone, said by nobody (1..255, else 12). */
uint32_t sync_peer_code(const struct ctl *c, size_t n);

#endif
