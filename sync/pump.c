/*
 * Pumps: a byte stream (a pipe, or a file read/written with parallel
 * positioned I/O) into or out of a transport session. Used by rdsend,
 * rdrecv and rdpipe. Message ids are 0; offsets are byte offsets.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "common/log.h"
#include "sync/sync.h"

#define IO_THREADS 4

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A file we may use pread/pwrite on (not a pipe, not O_APPEND). */
static int positional(int fd)
{
	struct stat st;
	int fl = fcntl(fd, F_GETFL);
	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && fl >= 0 && !(fl & O_APPEND);
}

/* Mark a failure as ours (file I/O), not the transport's. */
static int local_err(struct pump_stats *st, int rc)
{
	st->local = 1;
	return rc;
}

/* --- a small pool of I/O threads working on (msg, fd, offset) jobs --- */

struct job {
	struct tp_msg *m;
	uint64_t off;      /* file offset */
	uint32_t want;     /* bytes to read (reads) */
	int done, err;
	int owned;         /* writes: the pool frees the job and releases m */
	struct job *next;
};

struct iopool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *todo, *todo_tail;
	int fd, writing, stop;
	int err;                 /* first error of an owned job */
	struct tp_session *s;    /* writes: where to release buffers */
	pthread_t th[IO_THREADS];
	int nth;
};

static void *io_main(void *arg)
{
	struct iopool *p = arg;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->todo && !p->stop)
			pthread_cond_wait(&p->cv, &p->mu);
		if (!p->todo)
			break;
		struct job *j = p->todo;
		p->todo = j->next;
		if (!p->todo)
			p->todo_tail = NULL;
		pthread_mutex_unlock(&p->mu);
		int err = 0;
		uint8_t *buf = j->m->data;
		uint32_t len = p->writing ? j->m->len : j->want, got = 0;
		while (got < len) {
			ssize_t n = p->writing
			        ? pwrite(p->fd, buf + got, len - got, (off_t)(j->off + got))
			        : pread(p->fd, buf + got, len - got, (off_t)(j->off + got));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				err = n < 0 ? errno : p->writing ? EIO : ENODATA;
				break;
			}
			got += (uint32_t)n;
		}
		if (!p->writing)
			j->m->len = got;
		if (j->owned) {
			/* done with the buffer: straight back to the transport, so
			 * the stream it came from can take the next message */
			tp_msg_release(p->s, j->m);
			free(j);
			j = NULL;
		}
		pthread_mutex_lock(&p->mu);
		if (j) {
			j->err = err;
			j->done = 1;
		} else if (err && !p->err) {
			p->err = err;
		}
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static int io_start(struct iopool *p, int fd, int writing)
{
	memset(p, 0, sizeof *p);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->fd = fd;
	p->writing = writing;
	for (; p->nth < IO_THREADS; p->nth++)
		if (pthread_create(&p->th[p->nth], NULL, io_main, p))
			break;
	return p->nth ? 0 : -EAGAIN;
}

static void io_submit(struct iopool *p, struct job *j)
{
	pthread_mutex_lock(&p->mu);
	j->next = NULL;
	j->done = j->err = 0;
	if (p->todo_tail)
		p->todo_tail->next = j;
	else
		p->todo = j;
	p->todo_tail = j;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

static void io_wait(struct iopool *p, struct job *j)
{
	pthread_mutex_lock(&p->mu);
	while (!j->done)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

static void io_stop(struct iopool *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nth; i++)
		pthread_join(p->th[i], NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
}

/* --- sending --- */

/* Fill m from a pipe: keep reading until full or EOF (a pipe read returns at
 * most 64 KiB; sending each would make tiny messages). */
static int fill_from_pipe(int fd, struct tp_msg *m, int *eof)
{
	uint8_t *p = m->data;
	m->len = 0;
	while (m->len < m->cap) {
		ssize_t n = read(fd, p + m->len, m->cap - m->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0) {
			*eof = 1;
			break;
		}
		m->len += (uint32_t)n;
	}
	return 0;
}

static int send_pipe(struct tp_session *s, int fd, const char *name, struct pump_stats *st)
{
	uint64_t off = 0;
	int eof = 0;
	while (!eof) {
		struct tp_msg *m;
		int rc = tp_msg_get(s, &m);
		if (rc < 0)
			return rc;
		if ((rc = fill_from_pipe(fd, m, &eof)) < 0) {
			log_err("reading %s: %s", name, strerror(-rc));
			tp_msg_put(s, m);
			return local_err(st, rc);
		}
		if (m->len == 0) {
			tp_msg_put(s, m);
			break;
		}
		m->off = off;
		off += m->len;
		if ((rc = tp_msg_send(s, m)) < 0)
			return rc;
		st->bytes = off;
	}
	return 0;
}

/* Read a regular file with IO_THREADS parallel preads; send in order. */
static int send_file(struct tp_session *s, int fd, const char *name, struct pump_stats *st)
{
	struct stat sb;
	if (fstat(fd, &sb) < 0)
		return local_err(st, -errno);
	uint64_t size = (uint64_t)sb.st_size, next = lseek(fd, 0, SEEK_CUR) > 0
	                ? (uint64_t)lseek(fd, 0, SEEK_CUR) : 0;
	uint64_t base = next;
	enum { DEPTH = 16 };
	struct job jobs[DEPTH] = { 0 };
	int head = 0, count = 0, rc = 0;
	struct iopool p;
	if (io_start(&p, fd, 0) < 0)
		return -EAGAIN;
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (;;) {
		/* keep DEPTH reads in flight */
		while (rc == 0 && count < DEPTH && next < size) {
			struct tp_msg *m;
			if ((rc = tp_msg_get(s, &m)) < 0)
				break;
			struct job *j = &jobs[(head + count) % DEPTH];
			j->m = m;
			j->off = next;
			j->want = size - next < m->cap ? (uint32_t)(size - next) : m->cap;
			m->off = next - base;
			next += j->want;
			io_submit(&p, j);
			count++;
		}
		if (count == 0)
			break;
		struct job *j = &jobs[head];
		io_wait(&p, j);
		head = (head + 1) % DEPTH;
		count--;
		if (rc == 0 && (j->err || j->m->len != j->want)) {
			log_err("reading %s: %s", name, j->err == ENODATA || !j->err
			        ? "the file shrank while being sent" : strerror(j->err));
			rc = local_err(st, -(j->err ? j->err : ENODATA));
		}
		if (rc < 0) {
			tp_msg_put(s, j->m);
			continue;   /* drain the reads in flight */
		}
		st->bytes += j->m->len;
		rc = tp_msg_send(s, j->m);
	}
	io_stop(&p);
	return rc;
}

int pump_send(struct tp_session *s, int fd, const char *name, struct pump_stats *st)
{
	memset(st, 0, sizeof *st);
	double t0 = now_s();
	int rc = positional(fd) ? send_file(s, fd, name, st) : send_pipe(s, fd, name, st);
	if (rc == 0)
		rc = tp_finish(s);
	st->seconds = now_s() - t0;
	return rc;
}

/* --- receiving --- */

/* To a pipe: in offset order, holding early messages (sorted list). */
static int recv_pipe(struct tp_session *s, int fd, const char *name, struct pump_stats *st)
{
	struct held { struct tp_msg *m; struct held *next; } *held = NULL;
	uint64_t want = 0;
	int rc;
	for (;;) {
		struct tp_msg *m;
		rc = tp_msg_recv(s, &m);
		if (rc != 0)
			break;
		struct held *h = malloc(sizeof *h), **pp = &held;
		if (!h) {
			tp_msg_release(s, m);
			rc = local_err(st, -ENOMEM);
			break;
		}
		while (*pp && (*pp)->m->off < m->off)
			pp = &(*pp)->next;
		h->m = m;
		h->next = *pp;
		*pp = h;
		while (held && held->m->off == want) {
			h = held;
			held = h->next;
			if (rc == 0 && (rc = io_write_full(fd, h->m->data, h->m->len)) < 0) {
				if (rc != -EPIPE)   /* a reader that left: the caller judges */
					log_err("writing %s: %s", name, strerror(-rc));
				rc = local_err(st, rc);
			}
			want += h->m->len;
			st->bytes = want;
			tp_msg_release(s, h->m);
			free(h);
		}
		if (rc < 0)
			break;
	}
	if (rc == 1 && held) {
		log_err("the stream has a hole at byte %llu", (unsigned long long)want);
		rc = -EPROTO;
	}
	while (held) {
		struct held *h = held;
		held = h->next;
		tp_msg_release(s, h->m);
		free(h);
	}
	return rc;
}

/* To a regular file: pwrite at each message's offset, IO_THREADS at once.
 * The writer threads release each buffer themselves when it is written. */
static int recv_file(struct tp_session *s, int fd, const char *name, struct pump_stats *st)
{
	off_t base = lseek(fd, 0, SEEK_CUR);
	struct iopool p;
	int rc;
	if (base < 0)
		base = 0;
	if (io_start(&p, fd, 1) < 0)
		return -EAGAIN;
	p.s = s;
	for (;;) {
		struct tp_msg *m;
		rc = tp_msg_recv(s, &m);
		if (rc != 0)
			break;
		struct job *j = calloc(1, sizeof *j);
		if (!j) {
			tp_msg_release(s, m);
			rc = local_err(st, -ENOMEM);
			break;
		}
		j->m = m;
		j->off = (uint64_t)base + m->off;
		j->owned = 1;
		if (m->off + m->len > st->bytes)
			st->bytes = m->off + m->len;
		io_submit(&p, j);
		pthread_mutex_lock(&p.mu);
		int err = p.err;
		pthread_mutex_unlock(&p.mu);
		if (err)
			break;
	}
	io_stop(&p);   /* finishes every queued write */
	if (p.err && rc >= 0) {
		log_err("writing %s: %s", name, strerror(p.err));
		rc = local_err(st, -p.err);
	}
	return rc;
}

int pump_recv(struct tp_session *s, int fd, const char *name, struct pump_stats *st)
{
	memset(st, 0, sizeof *st);
	double t0 = now_s();
	int file = positional(fd);
	int rc = file ? recv_file(s, fd, name, st) : recv_pipe(s, fd, name, st);
	if (rc == 1 && file) {
		/* what we wrote is the whole file */
		off_t end = lseek(fd, 0, SEEK_CUR);
		if (ftruncate(fd, (end > 0 ? end : 0) + (off_t)st->bytes) < 0 && errno != EINVAL) {
			log_err("writing %s: %s", name, strerror(errno));
			rc = local_err(st, -errno);
		}
		/* leave the offset after what we wrote, as write(2) would have: a
		 * shared stdout (`{ rdrecv ...; echo; } >f`) goes on from there */
		if (end >= 0)
			lseek(fd, end + (off_t)st->bytes, SEEK_SET);
	}
	st->seconds = now_s() - t0;
	if (rc == 1) {
		tp_verdict(s, 0);
		return 0;
	}
	if (st->local)
		tp_verdict(s, -rc);   /* tell the sender why we stop */
	return rc;
}
