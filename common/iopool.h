/*
 * A small pool of threads doing positioned reads and writes (pread/pwrite),
 * so that several chunks of one file, or of several files, are on their way
 * to or from the disk at once. rdsend/rdrecv's pumps (pipe/) and the sync
 * sender (sync/) read files into transport buffers with it; rdrecv writes
 * with it.
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

struct io_job {
	int fd;
	int write;            /* 1: pwrite buf, 0: pread into buf */
	void *buf;
	uint32_t len;         /* bytes to move */
	uint64_t off;         /* file offset */
	/* results */
	uint32_t got;         /* bytes moved; a read stops short at end of file */
	int err;              /* 0, or the errno of the failing call */
	/* optional: called on the I/O thread when the job ends */
	void (*complete)(struct io_job *j, void *ctx);
	void *ctx;
	/* the pool's */
	int done;
	struct io_job *next;
};

struct io_pool;

/* Start `threads` I/O threads (1..IO_POOL_MAX_THREADS). 0 or -errno. */
int  io_pool_start(struct io_pool **p, int threads);
/* Queue j (FIFO). Any thread. */
void io_pool_submit(struct io_pool *p, struct io_job *j);
/* Wait until j (one without a callback) has ended. */
void io_pool_wait(struct io_pool *p, struct io_job *j);
/* Finish every queued job, stop the threads, free the pool. NULL is a no-op. */
void io_pool_stop(struct io_pool *p);

#endif
