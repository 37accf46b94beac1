/*
 * sync/watch.c: what changed in a local tree (rdcp --sync --watch). A
 * thread reads the kernel's events (inotify, one watch per directory) as
 * they come and keeps the paths they name; sync_watch_next() hands them out
 * in batches, once the tree has been quiet for a moment (or a batch has
 * waited long enough). --watch=fanotify (root) takes the events of the
 * whole filesystem from one mark instead, keeping those under the tree
 * (also what --watch turns to when some directory cannot be watched, e.g.
 * past inotify's limit). Where neither can be had, the directories without
 * a watch are a batch every poll_s seconds (each one and all below it).
 * --watch=poll[:S] has no events: every S seconds the whole tree is one
 * batch (the index makes a rescan cheap). Lost events (a queue overflow)
 * are the whole tree; a batch too big is cut back to ancestors.
 *
 * Used by the client's watch loops (rounds.c; fanout/live.c for a fan-out)
 * only; it knows nothing of the wire. Paths are relative to the root,
 * without "./"; "" is the root.
 */
#ifndef RDCP_SYNC_WATCH_H
#define RDCP_SYNC_WATCH_H

#include <stddef.h>

enum { SYNC_WATCH_EVENTS = 1, SYNC_WATCH_POLL = 2, SYNC_WATCH_FANOTIFY = 3 };

#define SYNC_WATCH_POLL_S    2       /* --watch=poll's default period */
#define SYNC_WATCH_QUIET_MS  20      /* a batch goes once nothing came for this */
#define SYNC_WATCH_AGE_MS    200     /* or once its first change is this old */
#define SYNC_WATCH_MAX_PATHS 50000   /* a bigger batch is cut to ancestors */
#define SYNC_WATCH_MAX_UNWATCHED 1024 /* more subtrees without a watch: cut
                                        to ancestors (the root: the tree) */
#define SYNC_WATCH_PATH_MAX  4096    /* a longer path goes as its ancestor */

struct sync_watch;

struct sync_watch_batch {
	char **paths;       /* changed entries (each one's whole subtree), sorted,
	                       none under another; owned */
	size_t n;
	int whole;          /* the whole tree (events lost, or poll) */
	long long first_ms; /* clock_ms() of the batch's oldest change */
};

/* Watch the tree at root (how: SYNC_WATCH_*; poll_s: poll's period). Adds
 * a watch to every directory now, before the first sync, so nothing that
 * changes during it is missed. 0, or a negative errno (said). */
int sync_watch_open(struct sync_watch **w, const char *root, int how, int poll_s);
/* The next batch: waits for changes, then for the quiet moment. 0 with a
 * batch; 1 when sync_watch_stop() was called. */
int sync_watch_next(struct sync_watch *w, struct sync_watch_batch *b);
/* The same, but also back at clock_ms() until (0: never) with no batch:
 * 2 then (a fan-out's host that is down is tried again on time). */
int sync_watch_next_by(struct sync_watch *w, struct sync_watch_batch *b, long long until);
/* b's paths (or the whole tree) are pending again, not handed out before
 * delay_ms from now: a round that failed for some of its files. */
void sync_watch_again(struct sync_watch *w, const struct sync_watch_batch *b, int delay_ms);
/* Wake sync_watch_next() for good (a signal's thread may call it). */
void sync_watch_stop(struct sync_watch *w);
void sync_watch_batch_free(struct sync_watch_batch *b);
void sync_watch_close(struct sync_watch *w);
/* Hold the event thread between two reads of events (1), or let it go on
 * (0): a fork() (a local run's far side) then copies no lock it holds,
 * the allocator's included. */
void sync_watch_hold(struct sync_watch *w, int hold);
/* Changes waiting for the next batch: paths, or -1 for the whole tree
 * (the status line). */
long sync_watch_pending(struct sync_watch *w);
/* How many directories are watched (inotify), and with what, for -v. */
size_t sync_watch_dirs(const struct sync_watch *w);
const char *sync_watch_how(const struct sync_watch *w);

/*
 * The status line (sync/wstatus.c): on stderr when it is a terminal and not
 * quiet, else NULL (and the calls below do nothing). Between rounds it is
 * redrawn once a second; busy() erases it as a round begins, round()
 * counts the round's bytes and lag (< 0: none) and draws it again.
 */
struct sync_wstatus;
struct sync_wstatus *sync_wstatus_start(struct sync_watch *w, int human, int quiet);
void sync_wstatus_busy(struct sync_wstatus *s);
void sync_wstatus_round(struct sync_wstatus *s, unsigned long long bytes, double lag_s);
void sync_wstatus_stop(struct sync_wstatus *s);

#endif
