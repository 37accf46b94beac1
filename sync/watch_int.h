/*
 * Private to the watch (watch.c: inotify, the batches; fanwatch.c:
 * fanotify's mark and its events; wpaths.c: the sets of paths). The
 * client knows only watch.h.
 */
#ifndef RDCP_SYNC_WATCH_INT_H
#define RDCP_SYNC_WATCH_INT_H

#include <pthread.h>
#include <stddef.h>

#include "sync/watch.h"

/* The pending paths: a set (open addressing, FNV-1a), so that a file
 * written a thousand times is one entry. */
struct pset {
	char **slot;
	size_t cap, n;   /* cap: a power of two, at most half full */
};

struct sync_watch {
	char *root;
	int how, poll_s;
	int ifd, wake;           /* inotify; an eventfd that stops the thread */
	int ffd, mfd;            /* fanotify instead: its fd; the tree's root,
	                            open (open_by_handle_at()'s mount) */
	char *real;              /* fanotify: the root's real path */
	size_t rlen;
	char **dirs;             /* watch descriptor -> its directory ("" root) */
	size_t ndirs;            /* slots in dirs */
	size_t nwatched;
	int said;                /* a watch that could not be added, said */
	int opening;             /* in sync_watch_open(): it says the limit */
	int err;                 /* watch_one()'s last failure */
	pthread_t th;
	int started;
	pthread_mutex_t quiet;   /* held while the watches change (dirs): by
	                            the thread as it takes events, by
	                            sync_watch_next() as it tries unw again;
	                            sync_watch_hold() (a fork) waits for it */
	pthread_mutex_t mu;      /* the rest */
	pthread_cond_t cv;
	struct pset pend;        /* at most max_paths (SYNC_WATCH_MAX_PATHS) */
	size_t max_paths;
	struct pset unw;         /* roots of the subtrees no watch covers
	                            (inotify): polled, at most
	                            SYNC_WATCH_MAX_UNWATCHED */
	int poll_all;            /* poll the whole tree: no events any more,
	                            or unw out of memory or cut to the root */
	int whole, stop, ready;
	long long first_ms, last_ms, poll_at;
	long long hold_until;    /* no batch before (sync_watch_again()) */
};

/* wpaths.c. Add path to p (copied): 0, or -ENOMEM. */
int    watch_pset_add(struct pset *p, const char *path);
void   watch_pset_clear(struct pset *p);
/* p's paths moved into a new array (*n of them), p left empty; NULL when
 * out of memory (p as it was). */
char **watch_pset_take(struct pset *p, size_t *n);
/* Cut p to at most cap paths, each cut to an ancestor only as far as it
 * must be (the deepest first): 0; 1 when that is the root alone (the
 * whole tree); -ENOMEM (p as it was). */
int    watch_pset_cap(struct pset *p, size_t cap);
/* Is path strictly under dir ("" holds everything)? */
int    watch_under(const char *path, const char *dir);
/* v sorted so that an entry's descendants follow it, duplicates and those
 * under another freed: how many are left (v's first ones). */
size_t watch_paths_tidy(char **v, size_t n);
/* A tidy v cut to at most cap paths, as watch_pset_cap(): how many are
 * left (the rest freed), still tidy. */
size_t watch_paths_cap(char **v, size_t n, size_t cap);

/* path (relative to the root) changed: into the pending set (under w->mu). */
void  watch_changed(struct sync_watch *w, const char *path);
/* Events were lost (or could not be kept): the next batch is the whole tree. */
void  watch_lost(struct sync_watch *w);
/* dir "/" name, malloc'd ("" dir: name); NULL when out of memory. */
char *watch_join(const char *dir, const char *name);
/* fanwatch.c: one fanotify mark for the filesystem that holds the tree.
 * 0, or -1 with errno (not root, a filesystem without handles, an old
 * kernel). take: the events in buf (len bytes) into the pending set. */
int   watch_fan_open(struct sync_watch *w);
void  watch_fan_take(struct sync_watch *w, const char *buf, size_t len);

#endif
