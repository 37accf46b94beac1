/*
 * --watch's status line: on a terminal (stderr), between rounds, redrawn
 * once a second: rounds so far, data bytes sent and the rate of the last
 * few seconds, the last round's lag (the age of its oldest change when it
 * landed) and how long ago, and the changes waiting for the next batch:
 *
 *   watch: 812 rounds, 1.21GB sent, 45.02MB/s, lag 0.05 s (0 s ago), 3 pending
 * Erased while a round runs, so that -v's lines are printed on lines of
 * their own; a message between rounds erases it first (log_line_shown()).
 * Drawn only while rdcp is the terminal's foreground job.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "sync/sync_int.h"
#include "sync/watch.h"

#define RATE_SAMPLES 6   /* the rate: over the last ~5 s */

struct sync_wstatus {
	struct sync_watch *w;
	int human;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop, busy, shown;
	unsigned rounds;
	uint64_t bytes;
	double lag_s, landed;    /* the last round's lag, and when it ended */
	double st[RATE_SAMPLES];
	uint64_t sb[RATE_SAMPLES];
	unsigned ns;
	double rate;
	int running;             /* the thread has started (a fork may follow) */
};

/* A sample of the bytes sent, once a second: the rate over the last
 * RATE_SAMPLES - 1 seconds. */
static void sample(struct sync_wstatus *s, double t)
{
	unsigned slot = s->ns++ % RATE_SAMPLES;
	s->st[slot] = t;
	s->sb[slot] = s->bytes;
	unsigned old = s->ns < RATE_SAMPLES ? 0 : s->ns % RATE_SAMPLES;
	double dt = t - s->st[old];
	s->rate = dt > 0 ? (double)(s->bytes - s->sb[old]) / dt : 0;
}

/* Under s->mu, and never while a round runs (busy): the round's fork then
 * copies no lock this holds (stderr's). Cut to the terminal's width: a
 * line that wrapped could not be drawn over. */
static void draw(struct sync_wstatus *s)
{
	/* not from the background: the shell's line, or SIGTTOU under tostop */
	if (tcgetpgrp(STDERR_FILENO) != getpgrp())
		return;
	double t = clock_s();
	int human = s->human ? s->human : 2;   /* compact: 1.50M, as -hh */
	char b[SYNC_NUM_LEN], r[SYNC_NUM_LEN], line[256];
	long n = sync_watch_pending(s->w);
	int len = snprintf(line, sizeof line, "watch: %u round%s, %sB sent, %sB/s", s->rounds,
	                   s->rounds == 1 ? "" : "s", sync_num(b, s->bytes, human),
	                   sync_num(r, (uint64_t)s->rate, human));
	if (s->lag_s >= 0 && len < (int)sizeof line)
		len += snprintf(line + len, sizeof line - (size_t)len,
		                ", lag %.2f s (%.0f s ago)", s->lag_s, t - s->landed);
	if (len < (int)sizeof line) {
		if (n < 0)
			snprintf(line + len, sizeof line - (size_t)len, ", a rescan pending");
		else
			snprintf(line + len, sizeof line - (size_t)len, ", %ld pending", n);
	}
	struct winsize ws;
	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 &&
	    ws.ws_col <= sizeof line)
		line[ws.ws_col - 1] = '\0';
	fprintf(stderr, "\r%s\033[K", line);
	fflush(stderr);
	s->shown = 1;
	log_line_shown(1);
}

static void *status_main(void *arg)
{
	struct sync_wstatus *s = arg;
	pthread_mutex_lock(&s->mu);
	s->running = 1;
	pthread_cond_broadcast(&s->cv);
	while (!s->stop) {
		sample(s, clock_s());
		if (!s->busy)
			draw(s);
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 1;
		while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

struct sync_wstatus *sync_wstatus_start(struct sync_watch *w, int human, int quiet)
{
	if (quiet || !isatty(STDERR_FILENO))
		return NULL;
	struct sync_wstatus *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;   /* no line: nothing else depends on it */
	s->w = w;
	s->human = human;
	s->lag_s = -1;
	s->busy = 1;   /* the first, whole sync is a round too */
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->mu, NULL);
	if (pthread_create(&s->th, NULL, status_main, s) != 0) {
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return NULL;
	}
	/* started before the first round forks (ASan's allocator, as for the
	 * watch's own thread, must not be copied mid-start) */
	pthread_mutex_lock(&s->mu);
	while (!s->running)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return s;
}

/* Erase the line (under s->mu). */
static void erase(struct sync_wstatus *s)
{
	if (s->shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		s->shown = 0;
		log_line_shown(0);
	}
}

void sync_wstatus_busy(struct sync_wstatus *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->busy = 1;
	erase(s);
	pthread_mutex_unlock(&s->mu);
}

void sync_wstatus_round(struct sync_wstatus *s, unsigned long long bytes, double lag_s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->rounds++;
	s->bytes += bytes;
	if (lag_s >= 0) {
		s->lag_s = lag_s;
		s->landed = clock_s();
	}
	s->busy = 0;
	draw(s);
	pthread_mutex_unlock(&s->mu);
}

void sync_wstatus_stop(struct sync_wstatus *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	erase(s);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->th, NULL);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
