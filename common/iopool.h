/*
 * A small pool of threads doing positioned reads and writes (pread/pwrite),
 * so that several chunks of one file, or of several files, are on their way
 * to or from the disk at once. rdsend/rdrecv's pumps (pipe/) and the sync
 * sender (sync/) read files into transport buffers with it; rdrecv writes
 * with it, and the sync receiver verifies and writes chunks on it.
 *
 * Rules: a job is the caller's memory. io_pool_submit() queues it; it ends
 * either by io_pool_wait() (jobs without a completion callback) or by its
 * callback, which runs on the I/O thread and may free the job. The pool
 * never touches a job after its callback was called.
 */
#ifndef RDCP_COMMON_IOPOOL_H
#define RDCP_COMMON_IOPOOL_H

#include <stdint.h>

#define IO_POOL_MAX_THREADS 16
#define IO_POOL_AUTO_MAX    8   /* io_pool_threads()'s cap */

struct io_job {
	int fd;
	int write;            /* 1: pwrite buf, 0: pread into buf */
	void *buf;
	uint32_t len;         /* bytes to move */
	uint64_t off;         /* file offset */
	/* results */
	uint32_t got;         /* bytes moved; a read stops short at end of file */
	int err;              /* 0, or the errno of the failing call */
	/* optional: the job's own work instead of the pread/pwrite (it may
	 * call io_job_run() for them), e.g. a read and then a digest */
	void (*work)(struct io_job *j);
	/* optional: called on the I/O thread when the job ends */
	void (*complete)(struct io_job *j, void *ctx);
	void *ctx;
	/* the pool's */
	int done;
	struct io_job *next;
};

struct io_pool;

/* Threads for a transfer over `streams` streams: one per core, at least
 * one per stream and at least 2 (a read or write waiting on the disk must
 * not stop the rest), at most IO_POOL_AUTO_MAX. */
int  io_pool_threads(int streams);
/* Start `threads` I/O threads (1..IO_POOL_MAX_THREADS). 0 or -errno. */
int  io_pool_start(struct io_pool **p, int threads);
/* Queue j (FIFO). Any thread. */
void io_pool_submit(struct io_pool *p, struct io_job *j);
/* Wait until j (one without a callback) has ended. */
void io_pool_wait(struct io_pool *p, struct io_job *j);
/* Whether j (one without a callback) has ended: io_pool_wait() would not wait. */
int  io_pool_done(struct io_pool *p, struct io_job *j);
/* The positioned read or write of j, as the pool runs it: sets got, err. */
void io_job_run(struct io_job *j);
/* Finish every queued job, stop the threads, free the pool. NULL is a no-op. */
void io_pool_stop(struct io_pool *p);

#endif
