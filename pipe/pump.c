/*
 * Pumps: a byte stream (a pipe, or a file read/written with parallel
 * positioned I/O on common/iopool.h's threads) into or out of a transport
 * session. Used by rdsend, rdrecv and rdpipe. Message ids are 0; offsets
 * are byte offsets.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/exitcode.h"
#include "common/io.h"
#include "common/iopool.h"
#include "common/log.h"
#include "pipe/pipe.h"

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

#define IO_THREADS 4
#define READ_DEPTH 16   /* reads in flight: more than the threads, so none idles */

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
	off_t cur = lseek(fd, 0, SEEK_CUR);
	uint64_t size = (uint64_t)sb.st_size, base = cur > 0 ? (uint64_t)cur : 0, next = base;
	struct io_job jobs[READ_DEPTH];
	struct tp_msg *msgs[READ_DEPTH];
	int head = 0, count = 0, rc = 0, depth = 0;
	struct io_pool *p;
	if (io_pool_start(&p, IO_THREADS) < 0)
		return -EAGAIN;
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (;;) {
		/* keep READ_DEPTH reads in flight, but never all of the pool's
		 * buffers: the oldest is sent only once it is read, and a get
		 * waits for a buffer the wire gives back */
		while (rc == 0 && count < (depth ? depth : 1) && next < size) {
			int k = (head + count) % READ_DEPTH;
			if ((rc = tp_msg_get(s, &msgs[k])) < 0)
				break;
			struct tp_msg *m = msgs[k];
			if (!depth) {
				size_t bufs = tp_pool_bytes(s) / m->cap;
				depth = bufs > READ_DEPTH ? READ_DEPTH : bufs > 1 ? (int)bufs - 1 : 1;
			}
			uint32_t want = size - next < m->cap ? (uint32_t)(size - next) : m->cap;
			jobs[k] = (struct io_job){ .fd = fd, .buf = m->data, .len = want, .off = next };
			m->off = next - base;
			next += want;
			io_pool_submit(p, &jobs[k]);
			count++;
		}
		if (count == 0)
			break;
		struct io_job *j = &jobs[head];
		struct tp_msg *m = msgs[head];
		io_pool_wait(p, j);
		head = (head + 1) % READ_DEPTH;
		count--;
		if (rc == 0 && (j->err || j->got != j->len)) {
			log_err("reading %s: %s", name,
			        j->err ? strerror(j->err) : "the file shrank while being sent");
			rc = local_err(st, -(j->err ? j->err : ENODATA));
		}
		if (rc < 0) {
			tp_msg_put(s, m);
			continue;   /* drain the reads in flight */
		}
		m->len = j->got;
		st->bytes += m->len;
		rc = tp_msg_send(s, m);
	}
	io_pool_stop(p);
	return rc;
}

int pump_send(struct tp_session *s, int fd, const char *name, struct pump_stats *st)
{
	memset(st, 0, sizeof *st);
	double t0 = clock_s();
	int rc = positional(fd) ? send_file(s, fd, name, st) : send_pipe(s, fd, name, st);
	if (rc == 0)
		rc = tp_finish(s);
	st->seconds = clock_s() - t0;
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
			if (rc == 0)   /* bytes handed on in full */
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

/* A write of recv_file(): the job owns its message. */
struct wjob {
	struct io_job j;
	struct tp_msg *m;
	struct tp_session *s;
	int *err;            /* the first write error, shared */
};

/* On the I/O thread: the buffer goes straight back to the transport, so
 * the stream it came from can take the next message. */
static void write_done(struct io_job *j, void *ctx)
{
	struct wjob *w = ctx;
	int zero = 0;
	if (j->err)
		__atomic_compare_exchange_n(w->err, &zero, j->err, 0, __ATOMIC_RELAXED,
		                            __ATOMIC_RELAXED);
	tp_msg_release(w->s, w->m);
	free(w);
}

/* Writes into the one file take turns here rather than on its inode's
 * lock, where the kernel spins (as the sync receiver's, sync/recv/take.c):
 * measured on a 4 GiB tmpfs copy, 17% of the samples in
 * rwsem_spin_on_owner and the writes themselves three times slower. The
 * I/O threads still give each buffer back as soon as it is written. */
static pthread_mutex_t write_mu = PTHREAD_MUTEX_INITIALIZER;

static void write_turn(struct io_job *j)
{
	pthread_mutex_lock(&write_mu);
	io_job_run(j);
	pthread_mutex_unlock(&write_mu);
}

/* To a regular file: pwrite at each message's offset, IO_THREADS at once. */
static int recv_file(struct tp_session *s, int fd, const char *name, struct pump_stats *st)
{
	off_t base = lseek(fd, 0, SEEK_CUR);
	struct io_pool *p;
	int rc, err = 0;
	if (base < 0)
		base = 0;
	if (io_pool_start(&p, IO_THREADS) < 0)
		return -EAGAIN;
	for (;;) {
		struct tp_msg *m;
		rc = tp_msg_recv(s, &m);
		if (rc != 0)
			break;
		struct wjob *w = malloc(sizeof *w);
		if (!w) {
			tp_msg_release(s, m);
			rc = local_err(st, -ENOMEM);
			break;
		}
		*w = (struct wjob){ .j = { .fd = fd, .write = 1, .buf = m->data, .len = m->len,
		                           .off = (uint64_t)base + m->off, .work = write_turn,
		                           .complete = write_done },
		                    .m = m, .s = s, .err = &err };
		w->j.ctx = w;
		if (m->off + m->len > st->bytes)
			st->bytes = m->off + m->len;
		io_pool_submit(p, &w->j);
		if (__atomic_load_n(&err, __ATOMIC_RELAXED))
			break;
	}
	io_pool_stop(p);   /* finishes every queued write */
	if (err && rc >= 0) {
		log_err("writing %s: %s", name, strerror(err));
		rc = local_err(st, -err);
	}
	return rc;
}

int pump_recv(struct tp_session *s, int fd, const char *name, struct pump_stats *st)
{
	memset(st, 0, sizeof *st);
	double t0 = clock_s();
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
	st->seconds = clock_s() - t0;
	if (rc == 1) {
		tp_verdict(s, 0);
		return 0;
	}
	if (st->local)
		tp_verdict(s, -rc);   /* tell the sender why we stop */
	return rc;
}

int pump_exit_code(int rc, const struct pump_stats *st)
{
	if (rc < 0 && st && st->local)
		return RD_EXIT_FILEIO;
	return rd_exit_code(rc);
}

void pump_report_error(int rc, const struct pump_stats *st, const struct tp_session *s,
                       int sender)
{
	if (!st->local)   /* a local failure was reported where it happened */
		tp_report_failure(rc, st->bytes, s, sender);
}
