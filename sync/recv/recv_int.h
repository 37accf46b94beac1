/*
 * Private to the receiving side of a sync (sync/recv/recv.c and the files of its
 * phases). The receiver scans DST, reads the sender's manifest (recv.c),
 * plans (plan.c), takes the data (take.c), and lands every file through a
 * temp file (land.c), then links, deletions, metadata and its index
 * (finish.c).
 *
 * Threads: the main thread takes chunks and hands them to I/O threads,
 * which verify and write them (take.c); the archive's writer threads land
 * small files. They share files[], written[] and the result counters: the
 * counters are bumped with STAT_ADD, the rest under rstate.mu, and a file
 * claimed by one writer is that writer's alone.
 */
#ifndef RDCP_SYNC_RECV_INT_H
#define RDCP_SYNC_RECV_INT_H

#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "sync/archive/archive.h"
#include "sync/delta/delta.h"
#include "sync/fanout/tee.h"
#include "sync/select/select.h"
#include "sync/sync_int.h"
#include "sync/wire/proto.h"

#define RECV_BASIS_BAD (-2)

/* A file being received. */
/* What the index keeps of a stat (a struct stat is 144 bytes). */
struct recv_st {
	uint64_t dev, ino, size;
	int64_t mtime_ns, ctime_ns;
	uint32_t nlink, mode, uid, gid;
};

/* A directory that could not be made: failures below it are counted, not
 * said one by one. */
struct recv_nodir {
	uint64_t below;      /* failures below it */
	uint8_t failed;      /* it could not be made */
	uint8_t quiet;       /* ... for a full disk, said once for the run:
	                        nor is what failed below it */
};

/* A one-entry cache of the last parent directory opened for data: files
 * arrive directory by directory, and no directory changes meanwhile. */
struct recv_dircache {
	char *dir;           /* its path, relative to DST */
	int fd;              /* -1: empty */
};

struct rstate;
struct rfile;

/* How a planned file is written, chosen at plan time (want_file() in
 * plan.c, into rfile.ops), as rdma-core picks a provider's ops: into an
 * unnamed or temp file linked or renamed into place (land.c), DST's file
 * itself (--inplace, --append: inplace.c), or a named temp recorded chunk
 * by chunk (--partial: partial.c). land.c and take.c call only these, so
 * no option's file is called from the core, and a new way to write (a live
 * file appended in place) is one more table. */
struct recv_write_ops {
	/* f->fd opened to write e's data into (f->dirfd is open): 0, or -1
	 * (said) */
	int  (*open)(struct rstate *s, const struct idx_entry *e, struct rfile *f);
	/* chunk k is verified and written (NULL: nothing to note) */
	void (*verified)(struct rstate *s, struct rfile *f, uint32_t k, const uint8_t *digest);
	/* every asked-for chunk is in: metadata, then into place; calls
	 * recv_landed() once it is, and recv_drop_file() */
	void (*finish)(struct rstate *s, size_t i, struct rfile *f);
	/* f is in place (NULL: nothing more) */
	void (*landed)(struct rstate *s, struct rfile *f);
	/* f is given up with its fd open: 1 keeps the fd and the file (a
	 * --partial temp, stored at the end), 0 closes it and removes a temp
	 * (NULL: 0) */
	int  (*keep)(const struct rfile *f);
	/* DST's index row of landed sender entry e, into n (a copy of e), when
	 * what is on disk is not all the sender's: 0 (n->chunks malloc'd if
	 * changed: the caller's), 1 when no row may vouch for it, -ENOMEM
	 * (NULL: the sender's row is the truth, as every chunk was verified) */
	int  (*row)(const struct rfile *f, const struct idx_entry *e, struct idx_entry *n);
};
extern const struct recv_write_ops recv_write_temp;      /* land.c */
extern const struct recv_write_ops recv_write_inplace;   /* inplace.c */
extern const struct recv_write_ops recv_write_partial;   /* partial.c */
extern const struct recv_write_ops recv_write_split;     /* split.c */
/* land.c's temp file, for the tables that differ from it in a step: open
 * (O_TMPFILE, else a named temp) and finish (linked or renamed into place,
 * over DST's old file, a backup first with -b). */
int  recv_temp_open(struct rstate *s, const struct idx_entry *e, struct rfile *f);
void recv_temp_finish(struct rstate *s, size_t i, struct rfile *f);

struct rfile {
	const struct recv_write_ops *ops;   /* how it is written (NULL: not planned) */
	int fd;              /* temp file, -1 when not open */
	int dirfd;
	uint8_t dir_lent;    /* dirfd is a small-file writer thread's, not to close */
	char tmp[IDX_TEMP_NAME_LEN + 1];   /* its name, when it has one (not O_TMPFILE) */
	uint32_t need, got;  /* messages (chunks): to come, verified and written */
	uint32_t taken;      /* accepted (some may be on their way to the disk) */
	uint32_t inflight;   /* on the I/O threads: its fd and temp stay */
	uint8_t *seen;       /* one byte per chunk, nseen of them */
	uint32_t nseen;
	/* flags are bytes, not ints or bit-fields: one slot per file to
	 * fetch (a million small files: a million slots), and threads set
	 * them apart, a byte each (a bit-field's neighbours would race) */
	uint8_t failed, done;
	uint8_t asread;      /* a chunk came as the sender read it (its digest
	                        replaced the manifest's): the file's hash anew */
	uint8_t claimed;     /* small files: a writer thread has it */
	uint8_t existed;     /* DST had a file by that name (for -v's line) */
	uint8_t st_ok;       /* st: the file as landed, for the index */
	struct recv_st st;
	/* chunk-level transfer (delta.c): what is asked for, and the old file
	 * the rest comes from */
	struct chunk_map map;            /* map.how NULL: every chunk is sent */
	const struct idx_entry *basis;   /* DST's entry (dm) when map.how is set */
	int bfd;                         /* the basis, open (-1: not yet;
	                                    RECV_BASIS_BAD: it changed, said) */
	uint8_t inplace;     /* --inplace, --append: fd is DST's file itself */
	uint32_t unchecked;  /* --append: DST's first chunks kept, never compared
	                        with the sender's (inplace.c; its index row) */
	uint8_t opened_inplace;   /* ... opened for writing: until it lands,
	                             DST may hold a mix of old and new (no
	                             index row) */
	/* --partial (partial.c): the temp is named and recorded in the index */
	uint8_t track;       /* record its verified chunks */
	uint8_t resume;      /* tmp names an earlier run's temp, reused */
	uint8_t split;       /* a ranked run's split file: a range of it, or
	                        the join (split.c) */
	uint8_t *intemp;     /* per chunk: already in that temp (CH_HAVE) */
	uint64_t *bhave;     /* per CH_BLOCKS chunk: the blocks the basis has */
	struct idx_partial *rec;   /* the record as stored */
	uint32_t rec_dirty;  /* chunks verified since it was stored */
	double rec_t;        /* when it was stored */
};

struct rstate {
	struct role *r;
	int root;
	char *root_path;
	struct sync_lock *lock;       /* DST's, for the run */
	struct idx_manifest sm, dm;   /* the sender's entries, ours */
	struct idx_scan_opts so;
	struct idx_diff diff;    /* sm against dm, by index/'s rules */
	uint8_t *change;         /* sm index -> enum idx_change_kind, 0: the same */
	int32_t *fetch;          /* sm index -> files index, or -1 */
	struct rfile *files;
	uint32_t nfiles, nfiles_cap;   /* files[]: used, allocated */
	uint8_t *written;        /* sm index -> written (or made) this run */
	/* lines for the user (itemize.c): any thread adds, the log thread
	 * prints or sends them */
	int out;                 /* RECV_OUT_* */
	char mark;               /* '>' received; '<' when a client sent (push) */
	pthread_mutex_t log_mu;  /* logbuf */
	pthread_cond_t log_cv;
	pthread_t log_th;
	int log_on, log_stop, log_landed;
	char *logbuf;
	size_t loglen, logcap;
	uint64_t landed_said;    /* files landed, as last told the sender */
	pthread_mutex_t ctl_mu;  /* frames the receiver sends while it runs */
	uint64_t sender_errors;  /* entries the sender's scan could not read */
	uint64_t sender_vanished;   /* entries gone while its scan looked */
	int64_t dst_stamp;       /* our scan's stamp (idx_stats.stamp_ns) */
	uint8_t akey[SYNC_AKEY_LEN];   /* the run's archive key (MANIFEST_END) */
	uint64_t unsent;         /* planned files the sender could not send */
	uint64_t retried;        /* of them, sent again in another round (SENT) */
	uint32_t *mismatch;      /* --rounds: sender indices of files whose data
	                            did not match the list (changed as sent),
	                            for CTL_RETRY; under mu */
	uint32_t nmismatch, capmismatch;
	uint64_t incomplete;     /* files whose data stopped short */
	int werr;                /* ENOSPC or EDQUOT from an I/O thread: stop */
	/* --relay (relay.c): the next host of a fan-out's chain */
	struct tee *tee;         /* what we receive, forwarded (fanout/tee.h) */
	int relay_err;           /* we failed, but go on forwarding */
	struct tp_listener *standby;   /* kept for a re-link (RELAY_F_REJOIN) */
	struct tp_session *old_ts;     /* the feed that re-link replaced */
	int round_end;           /* --watch: the stream's round ended with
	                            SYNC_ROUND_END_ID: the session is kept */
	int gap;                 /* the stream lost data on the way (re-linked):
	                            the archive is dropped from there on */
	uint64_t gap_short;      /* files incomplete for that: exit 10, retried */
	uint8_t early_sent[SENT_LEN];   /* the sender's SENT, come during that wait */
	int has_early_sent;
	uint32_t shift;          /* sender index = our index + shift */
	uint64_t actions;        /* changes made to DST (0: its index is current) */
	pthread_mutex_t mu;      /* files[], written[]: see above */
	struct recv_dircache dirc;   /* for recv_open_parent_cached() */
	struct sync_result *res;
	mode_t umask;
	/* what READY said, and the run's shape */
	int named;               /* one named entry, not a directory's contents */
	int mirror;              /* READY_MIRROR: contents of a directory named top */
	int root_made;           /* DST's root did not exist: made (or would be) */
	char *top;               /* the sender's top name */
	char *only, *mapto;      /* our scan's only name; what top becomes */
	uint32_t *want, nwant;   /* sm indices the plan fetches */
	pthread_mutex_t fail_mu; /* nodir, full_said (recv_fail) */
	struct recv_nodir *nodir;   /* per sm entry, once a directory could not be made */
	int rejected;            /* recv_reject() has said why */
	struct filter *filter;   /* the filter rules on our side, if any */
	int filter_scanned;      /* 1: applied by the scan (excluded paths are
	                            not in dm); 0: --delete asks it per path */
	struct idx_root *roots;  /* --files-from */
	size_t nroots;
	/* --windows with --delete: the sender's CTL_WCHECK, what appeared in
	 * SRC's directories since the window's scan (sorted): not deleted;
	 * kept_all: nothing is */
	char **kept;
	size_t nkept;
	int kept_all;
	/* --windows, not as root: the window's directories that DST had read
	 * only, given u+w while their entries land (their modes as they were,
	 * or the sender's with -p, at the end) */
	struct tweak { char *path; mode_t mode; } *tweaked;
	size_t ntweaked;
	/* (roots sorted by path under --windows: recv_root_cmp()) */
	int full_said;           /* a full disk was said (recv_fail): once a run */
	/* how DST's filesystem keeps mtimes (meta.c, probed once a run) */
	int times_atime;         /* an mtime set alone is dropped: give the atime too */
	int64_t mtime_step;      /* kept to this many ns (1: exactly) */
	int mtime_up;            /* ... rounded up, not down */
	int scan_stored;         /* DST's index holds what its scan saw (dm): the
	                            save after the data starts from it */
	int keep_root_meta;      /* DST's own metadata is left as it is */
	int bfd;                 /* --backup-dir, open (-1: none) */
	char *bprotect;          /* --backup-dir as a path of DST, if it is one */
	const char *bsuffix;     /* the backups' suffix */
	int ldfd[SYNC_MAX_LINK_DEST];   /* --link-dest directories, open */
	int nld;
	uint64_t del_skipped;    /* deletions --max-delete stopped (exit 25) */
	/* metadata (meta.c, ids.c) */
	struct sync_chmod *chmod;   /* --chmod, parsed */
	int set_uid, set_gid;    /* owners are ours to set (root, -o/-g, --chown) */
	int xattr_all;           /* both sides read xattrs of every namespace
	                            but system.* (as root), else user.* only */
	/* --partial (partial.c): the records of earlier runs' temps */
	struct idx_partials *parts;
	struct idx_partial *prec;
	size_t nprec;
	uint8_t *pclaimed;       /* per record: reused by this run */
	uint8_t *scratch;        /* a chunk rebuilt from blocks (rebuild.c) */
	/* moved.c: DST's files that may give another path its content */
	const struct idx_entry **moved;
	size_t nmoved;
	int moved_built;
};

/* res counters: bumped by the main thread and the archive's writer threads */
#define STAT_ADD(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_RELAXED)

#define GONE 0x80   /* dm entry flag: removed from DST by this run */
#define KEPT 0x40   /* dm entry flag: holds an entry the filter protects */
#define SKIPPED 0x40   /* change[] value: left alone (-u, --ignore-existing,
                          --min-size, --max-size), as if the same */

/* recv.c: the sender broke the protocol: the first time in the run, say
 * how in one line (fmt is the whole message, naming the sender, peer
 * strings escaped); later calls, from any thread, say nothing (the first
 * reason is the one that counts). Returns -EPROTO. */
int  recv_reject(struct rstate *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* plan.c: decide, for every sender entry, what to do; remove what is in
 * the way; create directories. *want: the sm indices to fetch. */
int  recv_plan(struct rstate *s, uint32_t **want, uint32_t *nwant);

/* delta.c: chunk-level transfers on the receiving side. plan: for sm entry
 * i, which DST has as d (NULL: not), decide which chunks to ask for (f->map,
 * f->need); 0 or -ENOMEM. send: the maps of the planned files (CTL_CHUNKS),
 * then CTL_CHUNKS_END. basis: f's old file, open and checked to be what the
 * scan saw (-1: said, counted). fill: every chunk not asked for, copied
 * from the basis into f->fd; 0 or -1 (said, counted). */
int  recv_chunk_plan(struct rstate *s, size_t i, const struct idx_entry *d, struct rfile *f);
/* moved.c: a DST file (dm) with new file e's content, not rewritten by this
 * run, to build e from (recv_chunk_plan() with it as d), or NULL. */
const struct idx_entry *recv_moved_find(struct rstate *s, const struct idx_entry *e);
int  recv_send_chunks(struct rstate *s, uint32_t send_n);
int  recv_basis(struct rstate *s, const struct idx_entry *e, struct rfile *f);
int  recv_fill_basis(struct rstate *s, const struct idx_entry *e, struct rfile *f);

/* rebuild.c: block delta. plan: for f's changed chunks that its basis has
 * (after the other plans), block records (CH_BLOCKS, f->bhave); 0 or
 * -ENOMEM. chunk: chunk k of a BLOCKS message m (its layout checked, mask
 * its blocks) rebuilt with the basis's other blocks into *chunk (scratch,
 * until the next call); 0, -1 (said), -ENOMEM. */
int  recv_blocks_plan(struct rstate *s, const struct idx_entry *e, struct rfile *f);
int  recv_blocks_chunk(struct rstate *s, struct rfile *f, const struct idx_entry *e,
                       uint32_t k, const struct tp_msg *m, uint64_t mask, uint8_t **chunk);

/* inplace.c: --inplace, --append, --append-verify. plan: for sm entry i
 * that DST has as the regular file d, after recv_chunk_plan(): 0 (f set
 * up, f->inplace when DST's file is written in place), 1 to leave it
 * alone (--append: DST's is as long), -1 refused (said, counted), or
 * -ENOMEM. Its files are written by recv_write_inplace: open DST's file
 * for writing, checked to be what the scan saw; finish: cut to size,
 * metadata, done. */
int  recv_inplace_plan(struct rstate *s, size_t i, const struct idx_entry *d, struct rfile *f);
/* The end of a line saying f failed: "it is left as it was", or, for a
 * file written in place once anything of it was written (written), that
 * DST's file is now damaged. */
const char *recv_left_as(const struct rfile *f, int written);

/* partial.c: --partial. load: the records of DST's index (before its temps
 * are cleaned); kept: 1 when the temp name in directory dir is a recorded
 * one (that inode) this run may reuse (recv_clean_temps leaves it). plan: for sm entry
 * i, reuse an earlier run's temp (chunks it verified that still match the
 * sender's are not asked for) and record this one; 0 or -ENOMEM. sweep:
 * after the plan, remove the temps (by inode) and records nothing reuses.
 * Its files are written by recv_write_partial: a temp named, reused or
 * new, recorded; each verified chunk noted and stored every 32 chunks or
 * half second after fdatasync; landed: the record goes; given up: the temp
 * kept. end: the run is over: what is still in flight is stored, for the
 * next run. */
void recv_partial_load(struct rstate *s);
int  recv_partial_kept(const struct rstate *s, const char *dir, const char *name, uint64_t ino);
int  recv_partial_plan(struct rstate *s, size_t i, struct rfile *f);
void recv_partial_sweep(struct rstate *s);
void recv_partial_end(struct rstate *s);

/* split.c: a ranked run's split files (--ranked=part:K/N:JOB, join:JOB).
 * temp: the shared temp's name of e (its path and hash) in job. plan:
 * for sm entry i (a
 * file of two chunks or more), every chunk outside this part's range
 * (chunk_part(); the join: every chunk) is in the temp already; f->split
 * set; 0 or -ENOMEM. Written by recv_write_split. */
void recv_split_temp(uint64_t job, const struct idx_entry *e, char out[IDX_TEMP_NAME_LEN + 1]);
int  recv_split_plan(struct rstate *s, size_t i, struct rfile *f);

/* take.c: receive the planned files' data over the transport. */
int  recv_take(struct rstate *s, const uint32_t *want, uint32_t nwant);

/* meta.c: the sender's entries made what DST should hold (sync_map_ids(),
 * --chmod, ACL base entries from the mode, the xattrs both sides read,
 * mtimes as DST's filesystem keeps them); before the plan. 0 or an error
 * (said). */
int  recv_prepare_meta(struct rstate *s);
/* 1 when the open file fd (st its stat) has the xattrs and ACLs e should
 * have, as far as the run keeps them (-X, -A; else 1): --link-dest. */
int  recv_extra_same(struct rstate *s, int fd, const struct stat *st, const struct idx_entry *e);
/* idx_diff() flags for this run's options. */
unsigned recv_diff_flags(const struct rstate *s);
/* Owner, mode, ACLs, xattrs and mtime of e on what DST has: an open file
 * or directory (fd), a symlink (name in pd), a fifo or device (an O_PATH
 * fd). what: which of IDX_M_ACL, IDX_M_XATTR to set (a new inode: both);
 * the rest is always set. Failures are recv_fail()ed. */
#define RECV_NEW_INODE (IDX_M_ACL | IDX_M_XATTR)
/* now: fd's stat when known (a new file as created): owner and mode are
 * set only where they differ. */
void recv_apply_fd(struct rstate *s, int fd, const struct idx_entry *e, unsigned what,
                   const struct stat *now);
/* The mode e gets in DST (-p: the source's, else less the umask). */
mode_t recv_mode_of(const struct rstate *s, const struct idx_entry *e);
void recv_apply_link(struct rstate *s, int pd, const char *name, const struct idx_entry *e,
                     unsigned what);
void recv_apply_special(struct rstate *s, int opath_fd, const struct idx_entry *e,
                        unsigned what);
/* itemize.c: the user's lines. */
enum { RECV_OUT_NONE, RECV_OUT_NAMES, RECV_OUT_CODES };
/* s->out and s->mark from the options. */
void recv_log_init(struct rstate *s);
/* The bits of sender entry e against d (DST's, NULL or removed: new);
 * sent: its content is transferred. */
unsigned recv_item_bits(const struct rstate *s, const struct idx_entry *e,
                        const struct idx_entry *d, int sent);
/* e's line once its change is done: how '>' (received; '<' in a push),
 * 'c', 'h' or '.'; bits from recv_item_bits(). Any thread. */
void recv_item(struct rstate *s, char how, const struct idx_entry *e, unsigned bits);
void recv_item_deleted(struct rstate *s, const struct idx_entry *d);
/* DST's root was made ("created directory DST", as rsync). */
void recv_item_created_root(struct rstate *s, const char *path);
/* Start the log thread (after PLAN: the sender reads a LOG before it as
 * the receiver's failure); recv_log_end() stops it and flushes the rest. */
void recv_log_start(struct rstate *s);
void recv_log_end(struct rstate *s);
/* relay.c, --relay: begin: after CTL_DATA, read CTL_RELAY and open the
 * tee, which dials the next host on a thread (0, or an error; not
 * relaying: 0). linked: after the sender is accepted, how that dial went,
 * told to the client in CTL_RELAY (0 or a send error). The data loop
 * (take.c) then calls the tee (sync/fanout/tee.h) itself. */
int  relay_begin(struct rstate *s);
int  relay_linked(struct rstate *s);
/* ctl_send() under ctl_mu. */
int  recv_ctl_send(struct rstate *s, uint8_t type, const void *p, size_t n);

/* land.c: put things into DST. */
/* One line: path, what failed, why; counted in res->errors. After a
 * directory could not be made (what == RECV_NO_DIR), failures at and below
 * it are only counted, and recv_fail_end() says how many. A full disk (ENOSPC,
 * EDQUOT) is said once a run, by the first to meet it; the run's exit is
 * then 11. Any thread. */
#define RECV_NO_DIR "cannot create directory"
void recv_fail(struct rstate *s, const char *path, const char *what, int err);
void recv_fail_end(struct rstate *s);
/* The directory holding path; *name: its last component. -1 with errno. */
int  recv_open_parent(int root, const char *path, const char **name);
/* The directory holding path through cache c: c's fd, which stays c's
 * (valid until c moves on or is freed). -1 with errno. */
int  recv_dircache_get(struct recv_dircache *c, int root, const char *path);
void recv_dircache_free(struct recv_dircache *c);
/* recv_open_parent() through s's cache, a dup() of its fd for the caller
 * to close (call under s->mu when threads run). */
int  recv_open_parent_cached(struct rstate *s, const char *path);
/* Remove path from DST, recursively if it is a directory of dm. */
int  recv_remove(struct rstate *s, const char *path);
/* A temp file for e in f->dirfd (already open); f->fd. 0 or -1 (reported). */
int  recv_create_temp(struct rstate *s, const struct idx_entry *e, struct rfile *f);
/* recv_create_temp() in the directory of e, opened through the cache. */
int  recv_open_temp(struct rstate *s, const struct idx_entry *e, struct rfile *f);
/* Every chunk of sm entry i is in and verified: metadata, then into place. */
void recv_finish_file(struct rstate *s, size_t i, struct rfile *f);
/* f, sm entry i, is in place: said, counted. */
void recv_landed(struct rstate *s, size_t i, struct rfile *f);
/* Close and forget f's temp file and directory. */
void recv_drop_file(struct rfile *f);
/* After the data: symlinks, hard links, fifos and devices. */
void recv_make_links(struct rstate *s);
/* mirror.c: with --delete, SRC named without '/' goes only into a DST that
 * is empty, named as SRC, or its mirror; else exit 3 before DST changes.
 * 0 or -EEXIST (said). */
int  recv_check_mirror(struct rstate *s);
/* landed.c, --rounds: CTL_RETRY with the files whose data did not match
 * the list (the client sends them again). 0 or an error. */
int  recv_send_retry(struct rstate *s);
/* What the index keeps of st (a landed file's stat, recv_st). */
void recv_st_of(struct recv_st *r, const struct stat *st);
/* finish.c, after the data. --delete: what DST has and the sender has not. */
void recv_delete_extra(struct rstate *s);
/* Metadata of unchanged files, then directories, deepest first. */
void recv_fix_meta(struct rstate *s);
/* Temp files an interrupted run left (named ones, in known directories). */
void recv_clean_temps(struct rstate *s);
/* The receiver's index: what it holds now, with the hashes it verified. */
void recv_save_index(struct rstate *s);

/* backup.c: -b, --backup-dir, --suffix. start: before the plan, open (and
 * make) the backup directory; 0 or an error (said). */
int  recv_backup_start(struct rstate *s);
/* Keep DST's path (name in dirfd) as its backup before this run replaces
 * it (move 0: linked, the caller renames over it) or deletes it (move 1:
 * renamed). 0 (also when nothing is there), or -1 (said, counted): then it
 * must be neither replaced nor deleted. Any thread. */
int  recv_backup(struct rstate *s, int dirfd, const char *name, const char *path, int move);
/* 1 when --delete must leave path alone: the backup directory, or with -b
 * alone a name ending in the suffix (rsync's protect rules). */
int  recv_backup_protected(const struct rstate *s, const char *path);
/* recv.c: idx_root by path (s->roots are sorted so under --windows). */
int  recv_root_cmp(const void *a, const void *b);
/* plan.c: are directory path's metadata this receiver's to set? Not in a
 * ranked run (--ranked) but its window's own (its roots and their
 * entries); in a run of big files, none. Else all. */
int  recv_dir_ours(const struct rstate *s, const char *path);
/* finish.c: is dir one of the window's own directories (a depth-1 root)? */
int  recv_window_dir(const struct rstate *s, const char *dir);
/* plan.c: is directory path one of a window's own directories (--windows,
 * not a ranked run) other than SRC's top, whose parent is not one of them?
 * Its parent's window made it, set its metadata and said so, or said why
 * not: its own window sets them again only when it wrote or removed
 * entries in it (the mtime that moves), and says nothing of them (a
 * failure said once, not once a window). */
int  recv_window_top(const struct rstate *s, const char *path);
/* finish.c: may this receiver clean path's temps (a directory's) or sweep
 * its --partial record (a file's)? Under --windows only in the window's
 * own directories (a later window, another rank's, may be writing
 * there); a ranked run's big files only their own; else all. */
int  recv_temp_ours(const struct rstate *s, const char *path, int is_dir);

/* linkdest.c: --link-dest. start: before the plan, open each DIR (one
 * that cannot be opened is said and left out). recv_link_dest: sm entry i,
 * which the plan would fetch (exists: DST has a file by its name), hard-
 * linked from the first DIR holding the same file; 1 when it was (or, in a
 * dry run, would be), 0 when it must be fetched. */
void recv_link_dest_start(struct rstate *s);
int  recv_link_dest(struct rstate *s, size_t i, int exists);

/* landed.c: --remove-source-files: tell the sender (CTL_LANDED) which of
 * its non-directories DST now holds, landed this run or already there. */
void recv_send_landed(struct rstate *s);

/* For the fuzz targets (tests/fuzz/fuzz_chunk.c, fuzz_unpack.c,
 * fuzz_receiver.c): the receiver's phases without a network.
 * recv_fuzz_manifest: len bytes at b as the sender's whole manifest,
 * decoded into s->sm and checked as read_manifest() does (0, -EPROTO said,
 * -ENOMEM). The data phase, on an rstate the test planned with recv_plan():
 * recv_fuzz_chunk: one message as take_chunk() takes it from the transport
 * (0, or -EPROTO for one the sender should not send). recv_fuzz_archive:
 * stream as the whole small-file archive, through the unpacker and its
 * writer threads; 0 or an error. */
int  recv_fuzz_manifest(struct rstate *s, const uint8_t *b, size_t len);
int  recv_fuzz_chunk(struct rstate *s, struct tp_msg *m);
int  recv_fuzz_archive(struct rstate *s, const uint8_t *stream, size_t len);

#endif
