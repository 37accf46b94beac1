/*
 * Private to the client's files (client.c, one run; rounds.c, --watch's
 * loop): the operands, the far side's start, the interrupt thread.
 */
#ifndef RDCP_SYNC_CLIENT_INT_H
#define RDCP_SYNC_CLIENT_INT_H

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/types.h>

#include "sync/sync_int.h"

struct sync_watch;

struct endpoint {
	char *host;   /* NULL: local */
	char *path;
};

struct interrupt {
	sigset_t set;
	pid_t far;
	struct ctl *c;
	int fired;   /* the run is being stopped: its result is 20, not its own */
	/* --watch: a signal between two rounds ends the watch cleanly (exit 0);
	 * one during a round (busy) stops it as above */
	pthread_mutex_t mu;
	struct sync_watch *watch;
	int busy, stopping;
	sem_t started;   /* the thread runs: a fork from now copies no lock of
	                    its start (--watch forks after it) */
};

/* The far side started with the remote shell on host, or forked for a
 * local run, its control channel in c; the pid, or -1 (said). */
pid_t client_spawn_remote(const struct sync_opts *o, const char *host, struct ctl *c);
pid_t client_spawn_local(struct ctl *c);
/* --contimeout S: the far side's first word (or the remote shell's end or
 * junk) within S seconds. 0, or -ETIME (said). */
int   client_await_login(const struct sync_opts *o, const char *host, const struct ctl *c);
/* Wait for the far side pid (failed: it is stopped if it does not end by
 * itself); 1 when we killed it (its status is then ours), else 0. */
int   client_reap(pid_t pid, int *status, int failed);
/* SIGINT, SIGTERM, SIGHUP to a thread of their own, which stops the far
 * side (or, between --watch rounds, the watch). Returns once it runs. */
void  client_catch_interrupts(struct interrupt *in);
/* The process's interrupt thread for its runs (client_run()), started on
 * the first call; its far side -1 between runs. */
struct interrupt *client_interrupts(void);
/* -v: the files sent as read (they never stood still), named, one a line
 * (as_read made unique). */
void  client_say_as_read(const struct sync_opts *o, struct sync_paths *as_read);
/* Our role, after the HELLO that gives the far side its own. */
int   client_play(const struct sync_opts *o, struct role *r, struct endpoint *src,
                  struct endpoint *dst, const char *remote, struct sync_result *res);
/* Send the files that changed as they were read again, in rounds of
 * their own (up to three); what still changes stays in retry. */
int   client_retry(struct sync_opts *o, struct role *r, struct sync_result *res,
                   struct sync_paths *retry, struct sync_paths *as_read, int pull);

/* windows.c: a large tree in windows of directories (about SYNC_WINDOW
 * entries each, one level deep), a round each over the one login. */
#define SYNC_WINDOW 100000
struct wplan;
/* May this run go by windows (push or local, one SRC's contents, -r, no
 * -H, --files-from, --max-delete)? */
int   client_windows_ok(const struct sync_opts *o, const struct role *r);
/* List SRC's directories up to the first window: when the tree needs more
 * than one, *out is the plan and o's file list (o->files, --windows) the
 * first window's; else *out is NULL and o is as it was. 0 or -ENOMEM. */
int   client_windows_open(struct sync_opts *o, const char *src, struct wplan **out);
/* The windows after the first, each a round (and its rounds of changed
 * files), their results added to res; what still changed left in retry.
 * 0 or an error. */
int   client_windows_rest(struct sync_opts *o, struct role *r, struct sync_result *res,
                          struct sync_paths *retry, struct sync_paths *as_read,
                          struct wplan *p);
void  client_windows_free(struct wplan *p);
/* A ranked run's windows (sync/ranks.c): rank 0 lists SRC's directories
 * and cuts them into windows for ways ranks (about four each); each rank
 * runs those it is given. */
struct wwin {
	char **dirs;         /* FILES' form: "dir/", "/" for SRC itself; a big
	                        file's: its path, alone */
	size_t ndirs;
	uint64_t entries;    /* as listed; a big file's: its size */
	unsigned number;     /* 1.. in the listing's order */
};
struct wset {
	struct wwin *w;
	size_t n;
	int ro_dirs;   /* client_windows_all()'s out: a directory lacks u+wx */
};
/* Every window of SRC into out, and into big each regular file of at
 * least big_min bytes (0: none), a "window" of its own path and size
 * (still in its directory's window too). 0, or -errno (said when a
 * filter is bad). */
int   client_windows_all(const struct sync_opts *o, const char *src, size_t ways,
                         uint64_t big_min, struct wset *out, struct wset *big);
void  client_wset_free(struct wset *s);
/* As client_windows_open(), the windows those of mine (kept by the caller
 * until client_windows_free()); *out NULL when mine is empty. */
int   client_windows_given(struct sync_opts *o, const struct wset *mine, struct wplan **out);
/* Does the next window come after a window (or run) that ended with code?
 * After 0, 23 and 24 only. */
int   client_window_goes_on(uint32_t code);
/* One run, push, pull or local, to its end: the exit code, its counts in
 * *res, its failures and the files sent as read in *fails and *as_read
 * (the caller frees them); nothing reported. given: a ranked run's windows
 * (NULL: the run makes its own). */
int   client_run(struct sync_opts *o, const struct wset *given, struct sync_result *res,
                 struct sync_fails **fails, struct sync_paths *as_read);
/* ranks.c: is this process a rank of mpirun's? Then sync_ranks()
 * runs the sync as one of them (first_dst: as sync_fanout()'s). */
int   sync_ranked(void);
int   sync_ranks(struct sync_opts *o, int first_dst);
/* rounds.c: what --watch needs (nsrc SRCs; dst the first DST, for the
 * message), said before anything starts. 0 or an exit code. */
int   client_watch_check(const struct sync_opts *o, const struct endpoint *src, int nsrc,
                         const struct endpoint *dst);
/* rounds.c: rdcp --sync --watch SRC/ [host:]DST. The exit code. */
int   sync_watch_client(struct sync_opts *o, const struct endpoint *src,
                        const struct endpoint *dst, const char **paths);

#endif
