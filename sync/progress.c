/*
 * --progress: one live line on a terminal, redrawn at most 5 times a
 * second, in rsync's style: bytes, percent, the current rate (over the last
 * second, not the average), elapsed time, ETA, files landed of the total.
 * The last line (final) shows the average rate and the whole time.
 */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "sync/sync_int.h"

void progress_start(struct progress *p, const struct role *r, uint64_t bytes, uint64_t files)
{
	p->on = r->progress && isatty(STDERR_FILENO) && !(r->o && r->o->quiet);
	p->human = r->o ? r->o->human : 0;
	p->t0 = p->last = clock_s();
	p->total_bytes = bytes;
	p->total_files = files;
	p->ns = 0;
}

/* "h:mm:ss" */
static char *hms(char b[24], double s)
{
	unsigned long t = s > 0 && s < 1e9 ? (unsigned long)s : 0;
	snprintf(b, 24, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
	return b;
}

/* rsync's rate: "%7.2f" in kB/s, MB/s or GB/s (powers of 1024) */
static char *rate_text(char b[24], double rate)
{
	const char *unit = "kB/s";
	rate /= 1024;
	if (rate >= 1024) {
		rate /= 1024;
		unit = "MB/s";
	}
	if (rate >= 1024) {
		rate /= 1024;
		unit = "GB/s";
	}
	snprintf(b, 24, "%7.2f%s", rate, unit);
	return b;
}

/* Bytes per second over about the last second of samples. */
static double current_rate(struct progress *p, double t, uint64_t bytes)
{
	int pick = -1;
	for (int k = 0; k < p->ns; k++)
		if (t - p->st[k] >= 1.0 && (pick < 0 || p->st[k] > p->st[pick]))
			pick = k;
	if (pick < 0)   /* under a second of history: the oldest sample */
		for (int k = 0; k < p->ns; k++)
			if (pick < 0 || p->st[k] < p->st[pick])
				pick = k;
	double dt = pick < 0 ? t - p->t0 : t - p->st[pick];
	uint64_t from = pick < 0 ? 0 : p->sb[pick];
	/* keep the newest PROGRESS_SAMPLES, replacing the oldest */
	int slot = p->ns < PROGRESS_SAMPLES ? p->ns++ : 0;
	for (int k = 0; k < p->ns && p->ns == PROGRESS_SAMPLES; k++)
		if (p->st[k] < p->st[slot])
			slot = k;
	p->st[slot] = t;
	p->sb[slot] = bytes;
	return dt > 0 && bytes >= from ? (double)(bytes - from) / dt : 0;
}

void progress_update(struct progress *p, uint64_t bytes, uint64_t files, int final)
{
	if (!p->on)
		return;
	double t = clock_s();
	if (!final && t - p->last < 0.2)
		return;
	p->last = t;
	double rate = final ? (t > p->t0 ? (double)bytes / (t - p->t0) : 0)
	                    : current_rate(p, t, bytes);
	char b1[SYNC_NUM_LEN], r[24], el[24], eta[24] = "-:--:--";
	unsigned pct = p->total_bytes ? (unsigned)(bytes * 100 / p->total_bytes) : 100;
	if (rate > 0 && p->total_bytes >= bytes)
		hms(eta, (double)(p->total_bytes - bytes) / rate);
	fprintf(stderr, "\r%15s %3u%% %s  %s", sync_num(b1, bytes, p->human), pct > 100 ? 100 : pct,
	        rate_text(r, rate), hms(el, t - p->t0));
	if (!final)
		fprintf(stderr, " ETA %s", eta);
	/* the line is on a terminal (progress_start): erase to its end, or a
	 * shorter line would leave the tail of a longer one behind */
	fprintf(stderr, "  (%llu/%llu files)\033[K", (unsigned long long)files,
	        (unsigned long long)p->total_files);
	if (final)
		fputc('\n', stderr);
	fflush(stderr);
}
