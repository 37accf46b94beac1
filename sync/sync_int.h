/* Private to sync/: the two roles of a sync run. */
#ifndef RDCP_SYNC_INT_H
#define RDCP_SYNC_INT_H

#include <pthread.h>
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
/* A fan-out host's mark, forwarded down the chain: the stream before it
 * lost data (a host before died and the chain was re-linked around it);
 * an archive of small files not yet whole is dropped from here on. Empty. */
#define SYNC_GAP_ID    (UINT64_MAX - 1)
#define SYNC_POOL_SIZE ((size_t)32 << 20)   /* 8 chunks in flight; RSS target */

/* What a side needs to play its role. */
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
/* f as one CTL_FAILED frame. 0 or a ctl_send() error. */
int sync_fails_send(struct ctl *c, struct sync_fails *f);
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
	int all_hashes;            /* sender: every hash in the manifest (the
	                              fan-out's: a host must not be able to make
	                              small files for the hosts after it) */
};

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
 * data (sync/pack.c). Not with -c, which compares the hashes, nor from a
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

/* sync/chmod.c: --chmod (rsync's syntax). parse: 0, -EINVAL for a string
 * rsync would refuse, -ENOMEM; umask_bits: for items without u/g/o/a.
 * apply: the mode (07777 bits) of an entry, a directory or not. */
struct sync_chmod;
int  sync_chmod_parse(const char *arg, uint32_t umask_bits, struct sync_chmod **out);
uint32_t sync_chmod_apply(const struct sync_chmod *ch, uint32_t mode, int is_dir);
void sync_chmod_free(struct sync_chmod *ch);

/* sync/chunks.c: chunk-level transfers (docs/protocol.md, CTL_CHUNKS).
 * For a changed file DST already has, the receiver compares its own chunk
 * digests (from its index) with the sender's and asks only for the chunks
 * that differ; the others come from the old file (the basis). */
enum {
	CH_HAVE = 0,     /* not sent: the receiver takes it from its basis */
	CH_WHOLE = 1,    /* sent whole */
	CH_BLOCKS = 2,   /* block digests follow: only the blocks that differ */
	CH_KINDS
};
#define SYNC_BLOCK_SIZE   ((uint32_t)64 << 10)
#define SYNC_CHUNK_BLOCKS ((uint32_t)(IDX_CHUNK_SIZE / SYNC_BLOCK_SIZE))   /* 64 */
/* A CH_BLOCKS chunk's record in CTL_CHUNKS: u64 mask of the blocks the
 * receiver has at that offset, then one u64 digest per block (XXH3-64). */
#define SYNC_BLOCK_REC    (8 + 8 * SYNC_CHUNK_BLOCKS)
/* Chunks described by one CTL_CHUNKS frame, at most (64 GiB of a file). */
#define SYNC_CHUNKS_PER_FRAME 16384u

/* Data messages: a chunk's offset carries its kind in the top two bits. */
#define SYNC_OFF_MASK   ((UINT64_C(1) << 62) - 1)
#define SYNC_MSG_KIND(off) ((unsigned)((off) >> 62))
enum {
	SYNC_MSG_WHOLE = 0,    /* the chunk's bytes */
	SYNC_MSG_BLOCKS = 1,   /* the blocks that differ, then their u64 mask:
	                          the rest is the receiver's basis */
	SYNC_MSG_SPARSE = 2,   /* the blocks that are not zeros, then their u64
	                          mask: the rest is zeros (-S: holes) */
};

/* sync/sparse.c: -S. pack: the read chunk buf of len bytes as a
 * SYNC_MSG_SPARSE payload in place (its non-zero 64 KiB blocks, then their
 * mask); its new length, or 0 when no block is zeros (send it whole).
 * check: a SPARSE payload of mlen bytes for a chunk of len bytes is well
 * formed (peer input): 0, or -1. hash: the chunk it stands for, with zeros
 * in the blocks not in mask. write: its blocks at off of fd; the others
 * are left alone (a fresh temp file: holes), or with punch (a file that
 * held data there) punched out, else written as zeros. 0 or -errno. */
uint32_t sparse_pack(uint8_t *buf, uint32_t len);
/* sync/blocks.c, the sender: the read chunk buf of len bytes as a
 * SYNC_MSG_BLOCKS payload in place, given the receiver's block record rec
 * (its blocks that differ, then their mask); its new length, or 0 (buf
 * untouched) when it is better sent whole (frugal: only when every block
 * differs; the link is what costs, as under --append). */
uint32_t blocks_pack(uint8_t *buf, uint32_t len, const uint8_t *rec, int frugal);
int  sparse_check(const void *data, uint32_t mlen, uint64_t len, uint64_t *mask);
void sparse_hash(const void *data, uint64_t len, uint64_t mask, uint8_t out[IDX_HASH_LEN]);
int  sparse_write(int fd, const void *data, uint64_t off, uint64_t len, uint64_t mask, int punch);

/* One planned file's chunk map. how NULL: every chunk whole (no map sent). */
struct chunk_map {
	uint32_t n;          /* the sender's chunks (idx_nchunks(size)) */
	uint32_t filled;     /* decoded so far (the sender, frame by frame) */
	uint8_t *how;        /* CH_* per chunk */
	uint8_t *blocks;     /* SYNC_BLOCK_REC per CH_BLOCKS chunk, in order */
	uint32_t nblocks;
};
void chunk_map_free(struct chunk_map *cm);
/* Chunks of a file of size bytes (1 for 1..IDX_CHUNK_SIZE; idx_nchunks()
 * counts digests, 0 for one chunk). */
static inline uint32_t chunk_count(uint64_t size)
{
	return (uint32_t)((size + IDX_CHUNK_SIZE - 1) / IDX_CHUNK_SIZE);
}
/* The bytes of a file of size bytes that cm asks to be sent (--progress's
 * total): all of them without a map. */
uint64_t chunk_map_bytes(const struct chunk_map *cm, uint64_t size);
/* Digest of chunk k of e (e->hash for a file of one chunk). */
const uint8_t *chunk_digest(const struct idx_entry *e, uint32_t k);
/* The receiver: cm as CTL_CHUNKS frames for sender index idx. 0 or an error. */
int  chunks_send(struct ctl *c, uint32_t idx, const struct chunk_map *cm);
/* The sender: one CTL_CHUNKS payload (peer input) into maps[] (one per
 * plan position of plan[], which is increasing, for manifest m). 0, or
 * -EPROTO with *why (a phrase: "asks for ...") */
int  chunks_decode(const uint8_t *b, size_t n, const struct idx_manifest *m,
                   const uint32_t *plan, uint32_t nplan, struct chunk_map *maps,
                   const char **why);
/* The sender at CTL_CHUNKS_END: every map that was begun was finished.
 * 0 or -EPROTO with *why. */
int  chunks_complete(const struct chunk_map *maps, uint32_t nplan, const char **why);
/* Copy [off, off + len) of in to the same offset of out: a reflink
 * (FICLONERANGE) where the filesystem can, else copy_file_range(), else
 * read and write. 0 or -errno. */
int  copy_range(int in, int out, uint64_t off, uint64_t len);

/* sync/pack.c: small files as one tar stream over the transport */
struct packer;
/* The run's archive key: random, made by the sender, sent to the receiver
 * in MANIFEST_END over the control channel (ssh). An archive entry's name
 * carries the tag of what the sender read, keyed with it: nothing on the
 * data path can make one for other data. */
#define SYNC_AKEY_LEN 32
#define SYNC_TAG_LEN  16
/* keyed BLAKE2b-128 of the entry's manifest index, size and XXH3-128 */
void sync_entry_tag(const uint8_t key[SYNC_AKEY_LEN], uint64_t index, uint64_t size,
                    const uint8_t hash[IDX_HASH_LEN], uint8_t tag[SYNC_TAG_LEN]);
int  packer_open(struct packer **p, struct tp_session *ts, const uint8_t key[SYNC_AKEY_LEN]);
int  packer_add(struct packer *p, uint32_t index, const void *data, uint64_t size,
                const uint8_t hash[IDX_HASH_LEN]);
uint64_t packer_bytes(const struct packer *p);
/* Send what the current message holds now, full or not. 0 or -errno. */
int  packer_flush(struct packer *p);
/* ok: finish the archive and send the rest; else just drop it */
int  packer_close(struct packer *p, int ok);

struct unpack_ops {
	/* entry `index` of size bytes: an fd to write it to, -1 to skip it,
	 * -EPROTO if the entry cannot be one the sender should send */
	int  (*open)(void *ctx, uint64_t index, uint64_t size);
	/* written: err 0 when all of it was, EPROTO for a malformed entry,
	 * EBADMSG when what came does not match the tag it came with, else
	 * the write's errno; hash of what came; got bytes. A negative return
	 * (e.g. -ENOSPC) stops the unpacker: the rest is dropped. */
	int  (*close)(void *ctx, uint64_t index, int err, const uint8_t *hash, uint64_t got);
	/* the stream is not what the sender should send: msg, one line */
	void (*damaged)(void *ctx, const char *msg);
	/* optional: a writer thread is done (after its last close) */
	void (*writer_end)(void *ctx);
};
struct unpacker;
/* ts NULL (tests): messages are not released, they stay the caller's. */
int  unpacker_start(struct unpacker **u, struct tp_session *ts,
                    const uint8_t key[SYNC_AKEY_LEN], const struct unpack_ops *ops,
                    void *ctx);
/* Main thread: a message of the archive stream (the unpacker releases it). */
void unpacker_push(struct unpacker *u, struct tp_msg *m);
/* Main thread: the unpacker's error so far (0 while all is well). */
int  unpacker_error(struct unpacker *u);
/* After the last message: wait for the unpacker; 0 or an error. */
int  unpacker_finish(struct unpacker *u);
/* Main thread: the stream lost data before the archive was whole: the
 * reader stops where the hole begins, quietly; the entries it read whole
 * are still written, the rest left for the next run (unpacker_finish():
 * -ECONNRESET; nothing changes once it has ended). */
void unpacker_abandon(struct unpacker *u);

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
 * another error (said). */
enum sync_lock_mode { SYNC_LOCK_WRITE, SYNC_LOCK_READ, SYNC_LOCK_INSIDE };
struct sync_lock;
int sync_lock(int dirfd, const char *path, enum sync_lock_mode mode, struct sync_lock **out);
void sync_unlock(struct sync_lock *l);   /* NULL: nothing */
/* sync/lock.c: before a local run forks its other side: both sides' locks
 * share one open of the host's lock file, so the run does not meet itself
 * when its SRC holds its DST. */
void sync_lock_share(void);

/* sync/rules.c: rsync's filter rule syntax. */
/* Parse one rule. dflt '-' or '+': text is a pattern of --exclude or
 * --include (or "- PAT", "+ PAT", "!"); 'E' or 'I': an exclude or include
 * pattern as it is (a merge file's line under '-' or '+'); 0: the full
 * --filter syntax.
 * inherit: SYNC_RM_* given to the rule (a merge file's sides). 0, or -1
 * with why; r->pattern is then NULL. A merge rule is SYNC_R_MERGE. */
int  sync_rule_parse(const char *text, int dflt, unsigned inherit, struct sync_rule *r,
                     char *why, size_t cap);
/* The rule as --filter text that parses back to it (into buf). */
const char *sync_rule_text(const struct sync_rule *r, char *buf, size_t cap);
/* Add rule text to o's list (a clear empties it). The client (far 0) reads
 * merge files here and forwards each resulting rule (sync/opts.c); the far
 * side refuses merge rules. from names the source in messages. 0 or -1
 * (said, with the rule). */
int  sync_rules_add(struct sync_opts *o, const char *text, int dflt, const char *from,
                    int far);
/* Every line of the file at path ('-': stdin, once) as a rule; *code: the
 * exit code after a failure (11 when it cannot be read, as rsync). */
int  sync_rules_file(struct sync_opts *o, const char *path, int dflt, unsigned inherit,
                     int far, int depth, int *code);
/* The whole file ('-': stdin, once per run: else errno EBUSY) in a malloc'd
 * NUL-terminated buffer. 0, or -1 with errno. */
int  sync_read_list(const char *path, struct sync_opts *o, char **buf, size_t *len);
/* The next line of [*p, end) that is not empty or a '#'/';' comment, NUL
 * terminated in place (NL, CR or CR LF end a line); NULL at the end.
 * *lineno counts the lines passed. */
char *sync_next_line(char **p, char *end, int *lineno);
/* sync/opts.c: forward "--filter=text" to the far side. 0 or -1. */
int  sync_opts_forward_rule(struct sync_opts *o, const char *text);

/* sync/files.c: --files-from. */
#define SYNC_FILES_MAX ((size_t)1 << 24)   /* entries in a list */
/* The client: read the list at path ('-': stdin), normalized as rsync
 * does, into o->files. 0 or -1 (said, naming the file). */
int  sync_files_read(struct sync_opts *o, const char *path);
/* The client: o->files as CTL_FILES frames, the last one empty. */
int  sync_files_send(struct ctl *c, const struct sync_opts *o);
/* One CTL_FILES payload (peer input) appended to o->files: 1 when it had
 * entries, 0 for the empty one that ends the list, -EPROTO with *why when
 * malformed (or -ENOMEM). */
int  sync_files_decode(const uint8_t *buf, size_t len, struct sync_opts *o, const char **why);
/* The server: the client's whole list into o->files. 0 or an error (said). */
int  sync_files_recv(struct role *r, struct sync_opts *o);
/* The sender's SRC with --files-from: a directory, scanned as a whole
 * (its contents are sent). 0 or an error (said). */
int  sync_files_root(const char *src, char **root, int *is_dir);
/* The scan's roots for o->files (depth from -r and each trailing "/");
 * free with sync_files_roots_free(). 0 or -ENOMEM. */
int  sync_files_roots(const struct sync_opts *o, struct idx_root **roots, size_t *n);
void sync_files_roots_free(struct idx_root *roots, size_t n);

/* sync/filter.c: the rules applied to a tree's paths during a scan. */
struct filter;
/* side: SYNC_RM_SENDER or SYNC_RM_RECEIVER; root: the tree whose dir-merge
 * files are read (an fd, dup'ed; -1: none); skip_file_dir: a directory
 * whose dir-merge files are not read (NULL: none). 0 or -ENOMEM. */
int  sync_filter_open(struct filter **f, const struct sync_opts *o, int side, int root,
                      const char *skip_file_dir);
/* idx_scan_opts.skip (ctx: a struct filter): 1 when path is excluded.
 * Thread-safe. */
int  sync_filter_skip(const char *path, int is_dir, void *ctx);
/* 1 when path, or a directory above it, is excluded on f's side (for
 * --delete: kept). */
int  sync_filter_protects(struct filter *f, const char *path, int is_dir);
/* The exit code of the first dir-merge file that could not be used
 * (said), 0 when none. */
int  sync_filter_error(const struct filter *f);
void sync_filter_free(struct filter *f);
/* 1 when both sides exclude exactly the same paths (no dir-merge file, no
 * side modifiers, no --delete-excluded): the receiver may then leave
 * excluded paths out of its scan of DST. */
int  sync_filter_simple(const struct sync_opts *o);

/* Entries by kind, as rsync's --stats counts them. */
enum { SYNC_K_REG, SYNC_K_DIR, SYNC_K_LINK, SYNC_K_DEV, SYNC_K_SPECIAL, SYNC_KINDS };

/* sync/sources.c: the sender's SRCs. src_split: SRC as the root to scan
 * and, unless its contents are meant, the one name (*only) sent from it;
 * 0 or a negative errno (said). */
int src_split(const char *src, unsigned flags, char **root, char **only, int *is_dir);
/* Several SRCs, merged into one manifest of a directory's contents (as
 * rsync merges its file list): each SRC is locked (shared) and scanned; one
 * that cannot be used is said and counted in *errors with the scans'
 * unreadable entries, and the others go on. 0, or -ENOMEM, or
 * -EWOULDBLOCK when a SRC is being written by another run (said). */
struct srcset {
	int n;
	char **root;       /* per SRC: the directory its entries' paths are under */
	char **only;       /* per SRC: the one name it sends (NULL: its contents) */
	int no_index;      /* --no-index */
	int *fd;           /* per SRC: root open for reading */
	struct sync_lock **lock;   /* per SRC: its lock (NULL: none) */
	uint32_t *of;      /* manifest index -> SRC */
};
int  srcs_scan(struct role *r, struct srcset *ss, struct idx_manifest *m, uint64_t *errors);
/* The directory fd that manifest entry i's path is relative to (-1 when
 * its SRC could not be opened: it has no entries then). */
int  srcs_root(const struct srcset *ss, size_t i);
void srcs_free(struct srcset *ss);
/* Drop the index row of manifest entry i (at path) from its SRC's index.
 * 0 or a negative errno. */
int  srcs_forget(const struct srcset *ss, size_t i, const char *path);

/* sync/remove.c: --remove-source-files on the sender. landed_take: one
 * CTL_LANDED frame (peer input, checked as docs/protocol.md says) and the
 * removals it asks for; 0, or -EPROTO (said: nothing more is removed). */
struct src_remover {
	int on;                          /* --remove-source-files */
	const struct idx_manifest *m;    /* the manifest we sent */
	const uint32_t *plan;            /* the receiver's plan (increasing) */
	uint32_t nplan;
	const uint8_t *sent;             /* manifest index -> sent whole */
	int root;                        /* one SRC: its root */
	const struct srcset *ss;         /* several SRCs (ss->n > 1) */
	int64_t last;                    /* the last index taken; -1 at first */
	uint64_t removed, errors;
};
int landed_take(struct src_remover *rm, const uint8_t *b, size_t n);

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
	struct sync_fails *fails;  /* --json: the role's list (struct role) */
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
	uint64_t wire;             /* the sender: data bytes it sent */
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
 * the owners, by its rules: sync/itemize.c). */
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

/* sync/report.c: sync_report(), with --json's "hosts" array (JSON text,
 * may be NULL) for a fan-out; a string as JSON text. */
int  sync_report_hosts(const struct sync_opts *o, const struct sync_result *res, int code,
                       double t0, const char *hosts_json);
void sync_json_str(FILE *f, const char *s);

/* sync/client.c: "[user@]host:path" (no '/' before the ':') into *host and
 * *path, else a local path (*host NULL). 0 or -ENOMEM. */
int  sync_parse_endpoint(const char *arg, char **host, char **path);

/* sync/fanout.c: rdcp SRC... host1:DST host2:DST ... (DSTs from operand
 * first_dst on, srcs[first_dst..nsrc-1] then dst), or --hosts=FILE:DST
 * (every operand a SRC). The exit code. */
struct fan_target {
	char *label;       /* host:path, for messages */
	char *host, *path; /* [user@]host; the path there */
	char *data_addr;   /* --hosts' second column, or NULL */
	char ip[64];       /* what the name (or data_addr) resolves to, or "" */
	int skip;          /* 1: named twice; 2: SRC itself */
};
int  sync_fanout(struct sync_opts *o, int first_dst);

int sync_sender(struct role *r, struct sync_result *res);
/* The server's body; local: forked by a local run's client (loopback). */
int sync_serve(int local);
int sync_receiver(struct role *r, struct sync_result *res);

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
 * the run's archive key, u64 list generation and transfer times (us). */
struct manifest_end_msg {
	uint64_t errors;
	uint8_t akey[SYNC_AKEY_LEN];
	uint64_t gen_us, xfer_us;
};
#define MANIFEST_END_LEN (8 + SYNC_AKEY_LEN + 16)
void manifest_end_encode(uint8_t b[MANIFEST_END_LEN], const struct manifest_end_msg *m);
int  manifest_end_decode(const uint8_t *b, size_t n, struct manifest_end_msg *m);

/* SENT, sender -> receiver after the data: u64 planned files not sent,
 * u64 of them unreadable (the rest vanished or changed); never more
 * unreadable than not sent. */
struct sent_msg {
	uint64_t unsent, unreadable;
};
#define SENT_LEN 16
void sent_encode(uint8_t b[SENT_LEN], const struct sent_msg *m);
int  sent_decode(const uint8_t *b, size_t n, struct sent_msg *m);

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
