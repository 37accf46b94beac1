/*
 * Private to a ranked run (sync/ranks.c and the files it is cut into):
 * what every rank holds, and the steps other files take. ranks.c runs
 * the job (the passes, the report); rkhold.c checks that every rank sees
 * one SRC and that the DSTs are one tree, and holds DST for the job;
 * rksplit.c sends the files too large for one rank in ranges.
 */
#ifndef RDCP_SYNC_RANKS_INT_H
#define RDCP_SYNC_RANKS_INT_H

#include <sys/types.h>

#include "sync/client_int.h"
#include "sync/mpi/mpi.h"
#include "sync/wire/proto.h"

#define HOST_LEN 64

/* What each rank tells the others after a pass (an allgather). */
struct rk_rec {
	int32_t code;
	uint32_t windows;
	uint8_t done[RESULT_LEN];   /* the receivers' counts, as in DONE */
	uint64_t vanished, total_size, entries[SYNC_KINDS];
	uint64_t flist_bytes, ctl_tx, ctl_rx, wire, hashed;
	uint64_t rows_in;           /* index rows taken from other nodes (rkindex.c) */
	double secs;
	char transport[8];
	char host[HOST_LEN];
};

struct ranked {
	struct rk_mpi m;
	const char **dst;   /* the DSTs, in the order given */
	const char **addr;  /* --hosts' data addresses (NULL: none given) */
	int ndst;
	char *hosts_buf;    /* --hosts: the DSTs' strings */
	struct wset all, mine;    /* the windows; this rank's */
	struct wset big, mine_big;   /* the big files; this rank's */
	struct wset split;           /* the big files too large for a rank's share:
	                                each rank sends a range of each */
	int *owner;           /* the rank of each window of all */
	struct rk_shards *sh; /* the index's shards (rkindex.c) */
	struct rk_rec *rec;   /* size of them, the last pass's */
	uint64_t job;         /* the job's token, rank 0's: DST's lock keeps other jobs out */
	char ranked[2][48];   /* --ranked=JOB, --ranked=later:JOB */
	/* SRC has a directory without u+wx (0555): pass 1 gives each u+wx,
	 * so that other ranks' windows can make their entries in it, and a
	 * pass 2 sets the modes (without --delete too) */
	int ro_dirs;
	/* this rank's hold on its DST for the whole job (hold_dst()): a lock
	 * here, or a holder on DST's host and the pipe that keeps it */
	struct sync_lock *held;
	pid_t holder;
	int hold_fd;
};

/* ranks.c: one run of files (n paths, --files-from) to this rank's DST
 * in pass 1; a split file's run says what ("part:K/N", "join"; NULL:
 * none), split as sync_opts.ranked_split: the exit code, the counts in
 * *res. merge_run: b's counts and failures into a's (b's failures
 * first). worse: the worst of two codes, as windows merge theirs. */
int  rk_run_files(struct ranked *k, const struct sync_opts *o, char **files, size_t n,
                  const char *what, int split, struct sync_result *res,
                  struct sync_fails **fails, struct sync_paths *as_read);
void rk_merge_run(struct sync_result *a, struct sync_fails **af, struct sync_result *b,
                  struct sync_fails *bf);
int  rk_worse(int have, int code);

/* rkhold.c: does every rank see SRC, the same tree (0, or the exit code,
 * said by rank 0)? Are the DSTs one tree (a witness made in the first,
 * looked for in the others)? This rank's DST held for the job (hold_end:
 * let go). Each collective: every rank calls it. */
int  rk_check_src(struct ranked *k, const char *src);
int  rk_check_dst(struct ranked *k, const struct sync_opts *o);
int  rk_hold_dst(struct ranked *k, const struct sync_opts *o);
void rk_hold_end(struct ranked *k);

/* rksplit.c: the big files too large for one rank's share, out of k->big
 * into k->split (0 or -ENOMEM); then, collective, each sent in ranges,
 * one a rank, and joined (the exit code; counts and failures in *res,
 * *fails). */
int  rk_pick_split(struct ranked *k, const struct sync_opts *o);
int  rk_split_files(struct ranked *k, const struct sync_opts *o, struct sync_result *res,
                    struct sync_fails **fails, struct sync_paths *as_read);

/* rkindex.c: one logical index of SRC over the nodes' own, each
 * directory homed on a node by its path. pull, before pass 1: the rows
 * of this rank's windows' directories that their homes have and it has
 * not (known: them, for the scans); bigs, after the big files: each
 * one's rows to its directory's window; push, after the passes: the
 * directories whose rows now differ from their homes' (ran: only if this
 * rank's windows all ran). Each collective; MPI failing aborts. */
int  rk_shards_pull(struct ranked *k, const char *src);
int  rk_shards_bigs(struct ranked *k);
int  rk_shards_push(struct ranked *k, int ran);
const struct idx_manifest *rk_shards_known(const struct ranked *k);
uint64_t rk_shards_rows_in(const struct ranked *k);
void rk_shards_free(struct ranked *k);

#endif
