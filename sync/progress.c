/* --progress: one live line on a terminal, redrawn at most 5 times a second. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "sync/sync_int.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void progress_start(struct progress *p, int wanted, uint64_t bytes, uint64_t files)
{
	p->on = wanted && isatty(STDERR_FILENO);
	p->t0 = p->last = now_s();
	p->total_bytes = bytes;
	p->total_files = files;
}

void progress_update(struct progress *p, uint64_t bytes, uint64_t files, int final)
{
	if (!p->on)
		return;
	double t = now_s();
	if (!final && t - p->last < 0.2)
		return;
	p->last = t;
	double rate = t > p->t0 ? (double)bytes / (t - p->t0) : 0;
	char b1[16], b2[16], eta[16] = "--:--";
	if (rate > 0 && p->total_bytes >= bytes) {
		unsigned s = (unsigned)((double)(p->total_bytes - bytes) / rate);
		snprintf(eta, sizeof eta, "%u:%02u", s / 60, s % 60);
	}
	fprintf(stderr, "\r%10s / %-10s %8.1f MB/s  %llu/%llu files  ETA %s   ",
	        log_bytes(b1, bytes), log_bytes(b2, p->total_bytes), rate / 1e6,
	        (unsigned long long)files, (unsigned long long)p->total_files, eta);
	if (final)
		fputc('\n', stderr);
	fflush(stderr);
}
