/* Private to the sending room of a sync (sync/send/: send.c the run,
 * sendq.c the data of a plan read and sent, sources.c the SRCs, remove.c
 * --remove-source-files). The receiving room never includes this, and this
 * includes nothing of the receiving room. */
#ifndef RDCP_SYNC_SEND_INT_H
#define RDCP_SYNC_SEND_INT_H

#include <stdint.h>

#include "index/index.h"
#include "sync/archive/archive.h"
#include "sync/delta/delta.h"
#include "sync/select/select.h"
#include "sync/sync_int.h"
#include "sync/wire/proto.h"

struct tp_session;
struct srcset;
struct sync_result;
struct chunk_map;

struct sendq_args {
	struct tp_session *ts;
	int root;                      /* SRC's directory (one SRC), else -1 */
	const struct srcset *ss;       /* several SRCs: each entry's own root */
	const struct idx_manifest *m;  /* what the scan saw, as sent */
	struct sync_result *res;       /* bytes sent, --json's failures */
	uint8_t *sent;                 /* --remove-source-files: index -> sent whole */
	int sparse;                    /* -S: zero blocks as a mask, holes not read */
	int append;                    /* --append: a grown file's last chunk as
	                                  the blocks past DST's end, never whole */
	int files;                     /* the transport sends file ranges (plain TCP) */
	const char *root_path;         /* SRC (one SRC): its index, to forget a row */
	const uint8_t *akey;           /* the archive key: entry tags */
	struct idx_scan_opts iso;      /* how SRC's index was opened */
	struct idx_manifest *grown;    /* --watch --append's memo (send.c), or NULL */
	struct sync_paths *retry;      /* files found changed as read: listed for
	                                  another round instead of said (or NULL) */
	struct sync_paths *as_read;    /* the last round: rewritten large files
	                                  go as read, listed here (or NULL) */
	/* the caller's: the plan's bytes and files at the start, then the
	 * bytes sent so far after each step */
	void (*start)(void *ctx, uint64_t total, uint32_t files);
	void (*tick)(void *ctx, uint64_t bytes);
	void *ctx;
};

/* Send the nplan planned files (manifest indexes, each with its chunk
 * map) over a->ts. *changed: those not sent because they vanished or
 * changed since the scan (each said); *failed: those that could not be
 * read. 0 or an error (the transport's, or -ENOMEM). */
int sendq_run(const struct sendq_args *a, const uint32_t *plan, const struct chunk_map *maps,
              uint32_t nplan, uint64_t *changed, uint64_t *failed);

/* sources.c: the sender's SRCs. src_split: SRC as the root to scan
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

/* remove.c: --remove-source-files on the sender. landed_take: one
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

/* grown.c, --watch --append's memo. remember: after a round's scan (m, its
 * stamp, its roots: NULL for the whole tree), keep the rows of large files
 * the index could not keep, and drop what the scan covered. forget: path's
 * row leaves it (its old part was found changed: read whole next time). */
void send_remember_grown(struct idx_manifest *memo, const struct idx_manifest *m,
                         int64_t stamp, const struct idx_root *roots, size_t nroots);
void send_grown_forget(struct idx_manifest *memo, const char *path);

/* wcheck.c: --windows with --delete, the window's data sent: CTL_WCHECK,
 * what appeared in its directories (roots of depth 1, m the scan of SRC)
 * since the scan, for the receiver not to delete. 0 or an error. */
int send_wcheck(struct ctl *c, const char *src, const struct idx_manifest *m,
                int64_t stamp_ns, const struct idx_root *roots, size_t nroots);

#endif
