/*
 * Private to the walker (walk.c: directories, threads, the walk; entry.c:
 * one entry's stat, what the index vouches for, its hash).
 */
#ifndef RDCP_INDEX_WALK_INT_H
#define RDCP_INDEX_WALK_INT_H

#include <dirent.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "index/idx_int.h"

#define HASH_BUF     (1u << 20)  /* per-thread read buffer */
#define STACK_MAX    256         /* queued open directories before recursing */
#define BIG_OPEN_MAX 64          /* large files queued before hashing inline */
#define PARK_MAX     1024        /* directories kept open waiting for the index */

struct bigfile {
	struct bigfile *next;   /* in the chunk queue */
	int fd;
	uint32_t nchunks, next_chunk, left;
	uint8_t *chunks;
	struct stat st;         /* as opened, to notice change while reading */
	int worker;             /* whose manifest holds the entry */
	size_t entry;           /* index into that manifest */
	int unstable;
};

struct dirjob {
	int fd;
	char *path;
	int depth;      /* levels of entries to list: -1 all, 1 this one only */
};

/* A directory whose regular files wait for the previous index. */
struct parked {
	struct parked *next;
	DIR *d;
	size_t n, cap;
	size_t *ent;        /* the files: indices into the worker's manifest */
};

struct walker;

struct worker {
	struct walker *w;
	int id;
	pthread_t tid;
	struct idx_manifest out;
	struct parked *parked;  /* its directories waiting for the index */
	struct idx_stats st;
	uint8_t *buf;
};

struct walker {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_cond_t ready_cv;            /* the previous index is there */
	struct dirjob *stack;
	size_t nstack;
	struct bigfile *bq_head, *bq_tail;  /* files with chunks not yet taken */
	size_t nbig_open;
	struct bigfile **big;               /* every large file, for finishing */
	size_t nbig, capbig;
	int active;                         /* threads holding a work item */
	int nomem;
	struct idx_prev *prev;
	int ready;                          /* prev is loaded (atomic) */
	int late_extra;                     /* entries recorded before it was */
	size_t nparked, park_max;           /* directories waiting for it */
	const struct idx_manifest *old;     /* prev->old, once ready */
	const char *only;
	int (*skip)(const char *path, int is_dir, void *ctx);
	void *skip_ctx;
	unsigned meta;                      /* IDX_SCAN_*: xattrs, ACLs */
	unsigned want_got;                  /* what reading them gives (IDX_GOT_*) */
	int one_fs, roots_optional;
	int trust_prefix;                   /* opts->trust_prefix (--append) */
	const struct idx_manifest *hint;    /* opts->grown_hint */
	const struct idx_manifest *known;   /* opts->known */
	uint64_t lazy_below;                /* opts->lazy_below */
	int lazy_any;                       /* opts->lazy_any */
	int lazy_all;                       /* opts->lazy_all */
	int64_t settled_ns;                 /* ... for files of older ctimes */
	dev_t root_dev;
	int64_t trust_before;
	struct worker *workers;
};

/* entry.c. drop: entry i of wk's manifest out again (it could not be read).
 * fill_meta: e's stat fields from st. unchanged: e's previous row when the
 * index may vouch for it unread, else NULL; reuse_extra: its xattrs and
 * ACLs taken from that row (1), or not (0); reuse_hash: its hash too (1).
 * stamps_locally: the filesystem at fd stamps ctimes with this machine's
 * clock (a settled file need not be read). hash_file: entry ei (name in
 * dfd) read and hashed, a large one queued chunk by chunk; 0 or -errno.
 * hash_chunk, finish_big: a queued chunk, and the file once all are done. */
void walk_drop_entry(struct worker *wk, size_t i);
void walk_fill_meta(struct idx_entry *e, const struct stat *st);
const struct idx_entry *walk_unchanged(const struct walker *w, const struct idx_entry *e);
int  walk_reuse_extra(const struct walker *w, struct idx_entry *e, const struct idx_entry *o);
int  walk_reuse_hash(const struct walker *w, struct idx_entry *e, const struct idx_entry *o);
int  walk_stamps_locally(int fd);
int  walk_hash_file(struct worker *wk, int dfd, const char *name, size_t ei);
void walk_hash_chunk(struct worker *wk, struct bigfile *b, uint32_t k);
void walk_finish_big(struct bigfile *b);

#endif
