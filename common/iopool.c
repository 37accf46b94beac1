/* Positioned reads and writes on a few threads (common/iopool.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/iopool.h"

struct io_pool {
	pthread_mutex_t mu;
	pthread_cond_t cv;     /* work queued, or stop */
	pthread_cond_t done;   /* a waited-for job ended */
	struct io_job *todo, *tail;
	int stop;
	pthread_t th[IO_POOL_MAX_THREADS];
	int nth;
};

void io_job_run(struct io_job *j)
{
	uint8_t *buf = j->buf;
	j->got = 0;
	j->err = 0;
	while (j->got < j->len) {
		ssize_t n = j->write ? pwrite(j->fd, buf + j->got, j->len - j->got,
		                              (off_t)(j->off + j->got))
		                     : pread(j->fd, buf + j->got, j->len - j->got,
		                             (off_t)(j->off + j->got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			j->err = errno;
		else if (n == 0 && j->write)
			j->err = EIO;
		if (n <= 0)
			break;   /* a read of 0: end of file, got says how far */
		j->got += (uint32_t)n;
	}
}

static void *io_main(void *arg)
{
	struct io_pool *p = arg;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->todo && !p->stop)
			pthread_cond_wait(&p->cv, &p->mu);
		struct io_job *j = p->todo;
		if (!j)
			break;   /* stopping, and nothing left */
		p->todo = j->next;
		if (!p->todo)
			p->tail = NULL;
		pthread_mutex_unlock(&p->mu);
		if (j->work)
			j->work(j);
		else
			io_job_run(j);
		if (j->complete) {
			j->complete(j, j->ctx);   /* j is the callback's now */
			pthread_mutex_lock(&p->mu);
			continue;
		}
		pthread_mutex_lock(&p->mu);
		j->done = 1;
		pthread_cond_broadcast(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int io_pool_threads(int streams)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int n = cores > 0 && cores < IO_POOL_AUTO_MAX ? (int)cores : IO_POOL_AUTO_MAX;
	n = streams > n ? streams : n;
	return n < 2 ? 2 : n > IO_POOL_AUTO_MAX ? IO_POOL_AUTO_MAX : n;
}

int io_pool_start(struct io_pool **out, int threads)
{
	if (threads < 1 || threads > IO_POOL_MAX_THREADS)
		return -EINVAL;
	struct io_pool *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	pthread_cond_init(&p->done, NULL);
	for (; p->nth < threads; p->nth++)
		if (pthread_create(&p->th[p->nth], NULL, io_main, p))
			break;
	if (!p->nth) {
		io_pool_stop(p);
		return -EAGAIN;
	}
	*out = p;
	return 0;
}

void io_pool_submit(struct io_pool *p, struct io_job *j)
{
	j->next = NULL;
	j->done = 0;
	pthread_mutex_lock(&p->mu);
	if (p->tail)
		p->tail->next = j;
	else
		p->todo = j;
	p->tail = j;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void io_pool_wait(struct io_pool *p, struct io_job *j)
{
	pthread_mutex_lock(&p->mu);
	while (!j->done)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

int io_pool_done(struct io_pool *p, struct io_job *j)
{
	pthread_mutex_lock(&p->mu);
	int done = j->done;
	pthread_mutex_unlock(&p->mu);
	return done;
}

void io_pool_stop(struct io_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nth; i++)
		pthread_join(p->th[i], NULL);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
