/*
 * What changed in a local tree, for rdcp --sync --watch (sync/watch.h).
 *
 * inotify watches one directory per watch, so every directory gets one at
 * the start, and a directory that appears (made, or moved in) gets one,
 * with all below it, when its event comes. A thread drains the events as
 * they come, whatever the sync is doing, so the kernel's queue does not
 * overflow while a batch is sent.
 *
 * When events are lost or cannot be had, a rescan stands in for them, and
 * the index makes it cheap (what did not change is stat'ed, not read):
 * - a directory that cannot be watched (the watch limit, EACCES): it and
 *   all below it are polled every poll_s (w->unw, cut back to ancestors
 *   past SYNC_WATCH_MAX_UNWATCHED), each poll trying its watch again;
 * - a batch past SYNC_WATCH_MAX_PATHS: cut back to ancestors, as deep as
 *   the cap allows (a storm in one directory rescans that directory);
 * - the queue overflowing (IN_Q_OVERFLOW): the whole tree, as the kernel
 *   does not say which directories lost events.
 *
 * A path in a batch stands for the entry and all below it: the sync scans
 * each as a root, and a root that is gone is deleted at DST (--delete).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "sync/watch_int.h"

#define MASK (IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | \
              IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

/* dir + "/" + name, or name under the root. NULL: out of memory. */
char *watch_join(const char *dir, const char *name)
{
	size_t dl = strlen(dir), nl = strlen(name);
	char *p = malloc(dl + nl + 2);
	if (!p)
		return NULL;
	if (dl) {
		memcpy(p, dir, dl);
		p[dl++] = '/';
	}
	memcpy(p + dl, name, nl + 1);
	return p;
}

/* Record a changed path; the caller holds mu. */
void watch_changed(struct sync_watch *w, const char *path)
{
	long long now = clock_ms();
	if (!w->whole && !w->pend.n)
		w->first_ms = now;
	w->last_ms = now;
	if (w->whole)
		goto out;
	/* too many: cut back to their ancestors, so that a storm in one
	 * directory is a rescan of that directory, not of the tree (the
	 * whole tree when out of memory, or when even that is too many) */
	int cut = w->pend.n < w->max_paths ? 0 : watch_pset_cap(&w->pend, w->max_paths / 2);
	if (cut != 0 || watch_pset_add(&w->pend, path) < 0) {
		watch_pset_clear(&w->pend);
		w->whole = 1;
	}
out:
	pthread_cond_broadcast(&w->cv);
}

void watch_lost(struct sync_watch *w)
{
	pthread_mutex_lock(&w->mu);
	if (!w->whole && !w->pend.n)
		w->first_ms = clock_ms();
	watch_pset_clear(&w->pend);
	w->whole = 1;
	w->last_ms = clock_ms();
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* Remember wd's directory (a directory met again under a new name, after a
 * rename, keeps its descriptor and takes the new name). */
static int set_dir(struct sync_watch *w, int wd, const char *rel)
{
	if ((size_t)wd >= w->ndirs) {
		size_t n = w->ndirs ? w->ndirs : 1024;
		while (n <= (size_t)wd)
			n *= 2;
		char **d = realloc(w->dirs, n * sizeof *d);
		if (!d)
			return -ENOMEM;
		memset(d + w->ndirs, 0, (n - w->ndirs) * sizeof *d);
		w->dirs = d;
		w->ndirs = n;
	}
	char *copy = strdup(rel);
	if (!copy)
		return -ENOMEM;
	if (!w->dirs[wd])
		__atomic_add_fetch(&w->nwatched, 1, __ATOMIC_RELAXED);
	free(w->dirs[wd]);
	w->dirs[wd] = copy;
	return 0;
}

/* rel and all below it have no watch: polled from now on (every poll_s;
 * past SYNC_WATCH_MAX_UNWATCHED cut back to ancestors). Out of memory, or
 * cut back to the root: the whole tree is polled. */
static void unwatched(struct sync_watch *w, const char *rel)
{
	pthread_mutex_lock(&w->mu);
	int cut = w->unw.n < SYNC_WATCH_MAX_UNWATCHED ? 0 :
	          watch_pset_cap(&w->unw, SYNC_WATCH_MAX_UNWATCHED / 2);
	if (cut != 0 || watch_pset_add(&w->unw, rel) < 0) {
		watch_pset_clear(&w->unw);
		w->poll_all = 1;
	}
	pthread_cond_broadcast(&w->cv);   /* sync_watch_next() waits for the poll */
	pthread_mutex_unlock(&w->mu);
}

/* Is err a directory gone or replaced (its parent's event says), not one
 * that is there without a watch? */
static int gone(int err)
{
	return err == ENOENT || err == ENOTDIR || err == ELOOP;
}

/* Watch one directory. 0; 1 when it is gone or not a directory (any
 * more); -1 when it cannot be (at the limit, not ours to read, out of
 * memory): then it and all below it are polled (said once). */
static int watch_one(struct sync_watch *w, const char *rel)
{
	char *full = watch_join(w->root, rel);
	int wd = full ? inotify_add_watch(w->ifd, *rel ? full : w->root, MASK) : -1;
	int err = full ? errno : ENOMEM;
	free(full);
	if (wd >= 0 && set_dir(w, wd, rel) == 0)
		return 0;
	w->err = err = wd >= 0 ? ENOMEM : err;
	if (gone(err))
		return 1;
	unwatched(w, rel);
	if (w->opening || w->said)
		return -1;   /* sync_watch_open() says it, and may turn to fanotify */
	w->said = 1;
	if (err == ENOSPC)
		log_warn("--watch: more directories under %s than inotify may watch "
		         "(/proc/sys/fs/inotify/max_user_watches): those without a watch, "
		         "and all below them, are rescanned every %d s (%s first)", w->root,
		         w->poll_s, *rel ? rel : ".");
	else
		log_warn("--watch: cannot watch %s under %s (%s): it and any other without "
		         "a watch, and all below them, are rescanned every %d s",
		         *rel ? rel : ".", w->root, strerror(err), w->poll_s);
	return -1;
}

/* Watch rel and every directory below it (iteratively: a deep tree does
 * not grow the stack). 0, or -1 when some could not be watched (those
 * are polled: watch_one()). */
static int watch_tree(struct sync_watch *w, const char *rel)
{
	size_t n = 0, cap = 64;
	char **stack = malloc(cap * sizeof *stack);
	int rc = 0;
	if (!stack || !(stack[n++] = strdup(rel))) {
		free(stack);
		unwatched(w, rel);
		return -1;
	}
	while (n) {
		char *dir = stack[--n];
		int one = watch_one(w, dir);
		DIR *d = NULL;
		if (one < 0)
			rc = -1;
		if (one == 0) {
			char *full = watch_join(w->root, dir);
			int fd = full ? open(*dir ? full : w->root,
			                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
			int err = full ? errno : ENOMEM;
			free(full);
			if (fd >= 0 && !(d = fdopendir(fd))) {
				err = errno;
				close(fd);
			}
			if (!d && !gone(err)) {
				unwatched(w, dir);   /* out of fds or memory: what is below it */
				rc = -1;
			}
		}
		for (struct dirent *de; d && (de = readdir(d));) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			struct stat st;
			if (de->d_type != DT_DIR &&
			    (de->d_type != DT_UNKNOWN ||
			     fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			     !S_ISDIR(st.st_mode)))
				continue;
			if (n == cap) {
				char **s = realloc(stack, 2 * cap * sizeof *s);
				if (s) {
					stack = s;
					cap *= 2;
				}
			}
			if (n == cap || !(stack[n] = watch_join(dir, de->d_name))) {
				unwatched(w, dir);   /* out of memory: polled whole */
				rc = -1;
				break;
			}
			n++;
		}
		if (d)
			closedir(d);
		free(dir);
	}
	free(stack);
	return rc;
}

/* Remove the watches of rel and every directory below it. */
static void unwatch_tree(struct sync_watch *w, const char *rel)
{
	for (size_t wd = 0; wd < w->ndirs; wd++) {
		const char *d = w->dirs[wd];
		if (!d || !*rel || (strcmp(d, rel) && !watch_under(d, rel)))
			continue;
		inotify_rm_watch(w->ifd, (int)wd);   /* its IN_IGNORED comes, and is dropped */
		free(w->dirs[wd]);
		w->dirs[wd] = NULL;
		__atomic_sub_fetch(&w->nwatched, 1, __ATOMIC_RELAXED);
	}
}

static void take_event(struct sync_watch *w, const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW) {
		/* events were dropped, and the kernel does not say whose: a lost
		 * one may be in any watched directory (a file written leaves its
		 * directory's mtime alone), so nothing narrower than the whole
		 * tree is sure. Every directory again (one already watched keeps
		 * its descriptor; one made meanwhile gets its watch), then the
		 * whole tree: the index keeps that to a stat per unchanged entry */
		(void)watch_tree(w, "");
		watch_lost(w);
		return;
	}
	if (ev->wd < 0 || (size_t)ev->wd >= w->ndirs || !w->dirs[ev->wd])
		return;
	if (ev->mask & IN_IGNORED) {   /* its directory is gone, or unwatched */
		free(w->dirs[ev->wd]);
		w->dirs[ev->wd] = NULL;
		__atomic_sub_fetch(&w->nwatched, 1, __ATOMIC_RELAXED);
		return;
	}
	const char *dir = w->dirs[ev->wd];
	char *path = ev->len && *ev->name ? watch_join(dir, ev->name) : strdup(dir);
	if (!path) {
		watch_lost(w);
		return;
	}
	/* a directory moved away (out of the tree, or to a name its MOVED_TO
	 * watches again): its watches, and those below it, go, so that its
	 * events are not taken for paths it no longer has */
	if ((ev->mask & IN_ISDIR) && (ev->mask & IN_MOVED_FROM))
		unwatch_tree(w, path);
	/* a directory made or moved in: watch it and all below it first, then
	 * say it changed (what was made in it before its watch is in its scan;
	 * what cannot be watched is polled from now on) */
	if ((ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO)))
		(void)watch_tree(w, path);
	pthread_mutex_lock(&w->mu);
	watch_changed(w, path);
	pthread_mutex_unlock(&w->mu);
	free(path);
}

static void *reader_main(void *arg)
{
	struct sync_watch *w = arg;
	char buf[64 << 10] __attribute__((aligned(8)));
	int fd = w->ffd >= 0 ? w->ffd : w->ifd;
	pthread_mutex_lock(&w->mu);   /* started: sync_watch_open() may return */
	w->ready = 1;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	for (;;) {
		struct pollfd p[2] = { { fd, POLLIN, 0 }, { w->wake, POLLIN, 0 } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		pthread_mutex_lock(&w->quiet);
		ssize_t got = read(fd, buf, sizeof buf);
		if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
			pthread_mutex_unlock(&w->quiet);
			continue;
		}
		if (got <= 0) {
			log_err("--watch: reading %s's events: %s; the tree is rescanned every "
			        "%d s from now on", w->ffd >= 0 ? "fanotify" : "inotify",
			        got < 0 ? strerror(errno) : "end of file", w->poll_s);
			pthread_mutex_lock(&w->mu);
			w->poll_all = 1;
			pthread_mutex_unlock(&w->mu);
			watch_lost(w);
			pthread_mutex_unlock(&w->quiet);
			break;
		}
		if (w->ffd >= 0) {
			watch_fan_take(w, buf, (size_t)got);
		} else {
			for (char *p2 = buf; p2 < buf + got;) {
				const struct inotify_event *ev = (const struct inotify_event *)(void *)p2;
				take_event(w, ev);
				p2 += sizeof *ev + ev->len;
			}
		}
		pthread_mutex_unlock(&w->quiet);
	}
	return NULL;
}

int sync_watch_open(struct sync_watch **out, const char *root, int how, int poll_s)
{
	struct sync_watch *w = calloc(1, sizeof *w);
	*out = NULL;
	if (!w || !(w->root = strdup(root))) {
		free(w);
		return -ENOMEM;
	}
	w->how = how;
	w->poll_s = poll_s > 0 ? poll_s : SYNC_WATCH_POLL_S;
	w->ifd = w->wake = w->ffd = w->mfd = -1;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&w->mu, NULL);
	pthread_mutex_init(&w->quiet, NULL);
	w->poll_at = clock_ms() + 1000LL * w->poll_s;
	const char *t = getenv("RDCP_TEST_WATCH_MAX_PATHS");   /* tests: a storm's cut */
	w->max_paths = t && strtoul(t, NULL, 10) >= 2 ? strtoul(t, NULL, 10)
	               : SYNC_WATCH_MAX_PATHS;
	if (how == SYNC_WATCH_POLL) {
		*out = w;
		return 0;
	}
	int err = 0, one = 0;
	w->opening = 1;
	if ((w->wake = eventfd(0, EFD_CLOEXEC)) < 0) {
		err = errno;
	} else if (how == SYNC_WATCH_FANOTIFY) {
		if (watch_fan_open(w) < 0) {
			err = errno;
			log_err("--watch=fanotify: cannot watch %s: %s (fanotify needs root and a "
			        "filesystem that gives file handles; --watch uses inotify)", root,
			        strerror(err));
			sync_watch_close(w);
			return -err;
		}
	} else if ((w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) {
		err = errno;
	} else if ((one = watch_one(w, "")) > 0 || (one < 0 && w->err != ENOSPC)) {
		err = w->err ? w->err : ENOTDIR;   /* past the limit, the root is polled */
	}
	if (err) {
		log_err("--watch: cannot watch %s: %s", root, strerror(err));
		sync_watch_close(w);
		return -err;
	}
	if (w->ifd >= 0 && (one < 0 || watch_tree(w, "") < 0)) {
		if (watch_fan_open(w) == 0) {   /* as root, fanotify sees them all */
			if (w->err == ENOSPC)
				log_warn("--watch: more directories under %s than inotify may watch "
				         "(%s): using fanotify (one mark for its filesystem) instead",
				         root, strerror(w->err));
			else
				log_warn("--watch: cannot watch every directory under %s with inotify "
				         "(%s): using fanotify (one mark for its filesystem) instead",
				         root, strerror(w->err));
			close(w->ifd);   /* and with it every watch */
			w->ifd = -1;
			for (size_t i = 0; i < w->ndirs; i++) {
				free(w->dirs[i]);
				w->dirs[i] = NULL;
			}
			w->nwatched = 0;
			watch_pset_clear(&w->unw);
			w->poll_all = 0;
		} else {
			if (w->poll_all)
				log_warn("--watch: cannot watch every directory under %s (%s): the "
				         "tree is also rescanned every %d s", root, strerror(w->err),
				         w->poll_s);
			else
				log_warn("--watch: cannot watch every directory under %s (%s): those "
				         "without a watch (%zu, with all below them) are rescanned "
				         "every %d s", root, strerror(w->err), w->unw.n, w->poll_s);
			w->said = 1;
		}
	}
	w->opening = 0;
	int perr = pthread_create(&w->th, NULL, reader_main, w);
	if (perr) {
		log_err("--watch: cannot start its thread: %s", strerror(perr));
		sync_watch_close(w);
		return -EAGAIN;
	}
	w->started = 1;
	/* the thread's start done (a sanitizer's allocations too) before the
	 * caller forks: a fork amid them would copy their locks held */
	pthread_mutex_lock(&w->mu);
	while (!w->ready)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
	*out = w;
	return 0;
}

/* The pending paths as a batch, sorted, none under another. mu held. */
static void take_batch(struct sync_watch *w, struct sync_watch_batch *b)
{
	*b = (struct sync_watch_batch){ .whole = w->whole, .first_ms = w->first_ms };
	if (!w->whole && w->pend.n) {
		size_t n;
		char **v = watch_pset_take(&w->pend, &n);
		if (!v) {
			b->whole = 1;
		} else {
			/* a path the wire cannot carry (over 4096 bytes, under a deep
			 * enough root): its longest ancestor that it can */
			for (size_t i = 0; i < n; i++) {
				char *sl = v[i];
				if (strlen(v[i]) <= SYNC_WATCH_PATH_MAX)
					continue;
				v[i][SYNC_WATCH_PATH_MAX] = '\0';
				sl = strrchr(v[i], '/');
				*(sl ? sl : v[i]) = '\0';
			}
			b->paths = v;
			b->n = watch_paths_tidy(v, n);   /* those under another: in its scan */
			b->whole = b->n == 1 && !*v[0];   /* the root itself */
		}
	}
	watch_pset_clear(&w->pend);
	if (b->whole)   /* a poll's due then, not before (a batch of paths is not one) */
		w->poll_at = clock_ms() + 1000LL * w->poll_s;
	w->whole = 0;
}

static void wait_until(struct sync_watch *w, long long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	long long d = ms - clock_ms();
	if (d <= 0)
		return;
	ts.tv_sec += d / 1000;
	ts.tv_nsec += (d % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&w->cv, &w->mu, &ts);
}

/* The subtrees without a watch into the pending set, each given another
 * try at its watches first (some may have been freed since): one that
 * gets them is not polled again, its events come from now on and this
 * scan covers what came before. mu held; dropped while the watches are
 * added, under quiet (the event thread's, the only other that adds). */
static void poll_unwatched(struct sync_watch *w)
{
	size_t n;
	char **v = watch_pset_take(&w->unw, &n);
	if (!v) {
		watch_pset_clear(&w->pend);
		w->whole = 1;
		return;
	}
	pthread_mutex_unlock(&w->mu);
	pthread_mutex_lock(&w->quiet);
	for (size_t i = 0; i < n; i++)
		(void)watch_tree(w, v[i]);   /* what still fails is unwatched again */
	pthread_mutex_unlock(&w->quiet);
	pthread_mutex_lock(&w->mu);
	for (size_t i = 0; i < n; i++) {
		watch_changed(w, v[i]);
		free(v[i]);
	}
	free(v);
}

int sync_watch_next(struct sync_watch *w, struct sync_watch_batch *b)
{
	return sync_watch_next_by(w, b, 0);
}

/* (wait_until() to the earlier of ms and until, when until is set) */
static void wait_by(struct sync_watch *w, long long ms, long long until)
{
	wait_until(w, until && until < ms ? until : ms);
}

int sync_watch_next_by(struct sync_watch *w, struct sync_watch_batch *b, long long until)
{
	int polls = w->how == SYNC_WATCH_POLL;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		if (w->stop) {
			pthread_mutex_unlock(&w->mu);
			return 1;
		}
		long long now = clock_ms();
		int polled = polls || w->poll_all || w->unw.n;
		if (polled && now >= w->poll_at) {
			/* due, whatever is pending: a busy tree does not starve it */
			long long first = w->whole || w->pend.n ? w->first_ms : now;
			if (polls || w->poll_all) {
				watch_pset_clear(&w->pend);
				w->whole = 1;
			} else {
				poll_unwatched(w);
			}
			w->first_ms = w->last_ms = first < now - SYNC_WATCH_AGE_MS ? first
			                           : now - SYNC_WATCH_AGE_MS;
			w->poll_at = now + 1000LL * w->poll_s;
			continue;
		}
		long long due = -1;
		if (w->whole || w->pend.n) {
			due = w->last_ms + SYNC_WATCH_QUIET_MS;
			if (due > w->first_ms + SYNC_WATCH_AGE_MS)
				due = w->first_ms + SYNC_WATCH_AGE_MS;
			if (due < w->hold_until)
				due = w->hold_until;
			if (now >= due)
				break;
		} else if (polled) {
			due = w->poll_at;
		}
		if (until && now >= until) {   /* the caller's time came first */
			pthread_mutex_unlock(&w->mu);
			*b = (struct sync_watch_batch){ 0 };
			return 2;
		}
		if (due >= 0)
			wait_by(w, due, until);
		else if (until)
			wait_until(w, until);
		else
			pthread_cond_wait(&w->cv, &w->mu);
	}
	take_batch(w, b);
	pthread_mutex_unlock(&w->mu);
	return 0;
}

void sync_watch_again(struct sync_watch *w, const struct sync_watch_batch *b, int delay_ms)
{
	long long now = clock_ms();
	pthread_mutex_lock(&w->mu);
	if (!w->whole && !w->pend.n)
		w->first_ms = now;
	if (b->whole) {
		watch_pset_clear(&w->pend);
		w->whole = 1;
	}
	for (size_t i = 0; i < b->n; i++)
		watch_changed(w, b->paths[i]);
	w->last_ms = now;
	w->hold_until = now + delay_ms;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void sync_watch_stop(struct sync_watch *w)
{
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	if (w->wake >= 0) {
		uint64_t one = 1;
		(void)!write(w->wake, &one, sizeof one);
	}
}

void sync_watch_batch_free(struct sync_watch_batch *b)
{
	for (size_t i = 0; i < b->n; i++)
		free(b->paths[i]);
	free(b->paths);
	*b = (struct sync_watch_batch){ 0 };
}

void sync_watch_hold(struct sync_watch *w, int hold)
{
	if (hold)
		pthread_mutex_lock(&w->quiet);
	else
		pthread_mutex_unlock(&w->quiet);
}

long sync_watch_pending(struct sync_watch *w)
{
	pthread_mutex_lock(&w->mu);
	long n = w->whole ? -1 : (long)w->pend.n;
	pthread_mutex_unlock(&w->mu);
	return n;
}

size_t sync_watch_dirs(const struct sync_watch *w)
{
	return __atomic_load_n(&w->nwatched, __ATOMIC_RELAXED);
}

const char *sync_watch_how(const struct sync_watch *w)
{
	return w->ffd >= 0 ? "fanotify" : w->ifd >= 0 ? "inotify" : "poll";
}

void sync_watch_close(struct sync_watch *w)
{
	if (!w)
		return;
	sync_watch_stop(w);
	if (w->started)
		pthread_join(w->th, NULL);
	if (w->ifd >= 0)
		close(w->ifd);
	if (w->ffd >= 0)
		close(w->ffd);
	if (w->mfd >= 0)
		close(w->mfd);
	free(w->real);
	if (w->wake >= 0)
		close(w->wake);
	for (size_t i = 0; i < w->ndirs; i++)
		free(w->dirs[i]);
	free(w->dirs);
	watch_pset_clear(&w->pend);
	watch_pset_clear(&w->unw);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	pthread_mutex_destroy(&w->quiet);
	free(w->root);
	free(w);
}
