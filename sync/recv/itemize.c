/*
 * The receiver's lines for the user, as rsync prints them: with -i an
 * itemized change ("YXcstpoguax name"), with -v the name alone. A line is
 * made when its change is done (a file once it is in place, never for one
 * that failed) and reaches the user at most ~100 ms later: the log thread
 * prints it (the receiver is the client) or sends it in CTL_LOG frames,
 * with a CTL_PROGRESS count for the sender's --progress.
 *
 * Threads: recv_item() and friends from any thread (the main thread, the
 * archive's writers); the buffer is under log_mu. While the log thread
 * runs, every control frame the receiver sends goes through
 * recv_ctl_send(), so frames never interleave.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/wire.h"
#include "sync/recv/recv_int.h"

#define LOG_EVERY_MS 100

void recv_log_init(struct rstate *s)
{
	const struct sync_opts *o = s->r->o;
	s->out = !o || o->quiet || o->json ? RECV_OUT_NONE
	         : o->itemize ? RECV_OUT_CODES : o->verbose ? RECV_OUT_NAMES : RECV_OUT_NONE;
	/* rsync: '<' when the client sent to a remote receiver (a push) */
	s->mark = !s->r->is_client && !s->r->local ? '<' : '>';
}

/* Append text to the buffer (log_mu held). */
static void put_locked(struct rstate *s, const char *p, size_t n)
{
	if (s->loglen + n > s->logcap) {
		size_t cap = s->logcap ? s->logcap * 2 : 4096;
		while (cap < s->loglen + n)
			cap *= 2;
		char *b = realloc(s->logbuf, cap);
		if (!b)
			return;   /* a line lost to memory pressure, not the run */
		s->logbuf = b;
		s->logcap = cap;
	}
	memcpy(s->logbuf + s->loglen, p, n);
	s->loglen += n;
}

/* A name for a line: control characters as rsync writes them, \#ooo. */
static size_t esc(char *out, size_t cap, const char *p)
{
	size_t o = 0;
	for (; *p && o + 6 < cap; p++) {
		unsigned char c = (unsigned char)*p;
		if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(out + o, cap - o, "\\#%03o", c);
		else
			out[o++] = (char)c;
	}
	out[o] = '\0';
	return o;
}

static void add_line(struct rstate *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void add_line(struct rstate *s, const char *fmt, ...)
{
	char small[1024], *line = small;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof small) {
		if (!(line = malloc((size_t)n + 1)))
			return;
		va_start(ap, fmt);
		vsnprintf(line, (size_t)n + 1, fmt, ap);
		va_end(ap);
	}
	pthread_mutex_lock(&s->log_mu);
	put_locked(s, line, (size_t)n);
	pthread_mutex_unlock(&s->log_mu);
	if (line != small)
		free(line);
}

unsigned recv_item_bits(const struct rstate *s, const struct idx_entry *e,
                        const struct idx_entry *d, int sent)
{
	unsigned f = s->r->flags;
	if (d && (d->flags & GONE))
		d = NULL;   /* removed by this run (a type change): e is new */
	unsigned b = sync_item_bits(e, d, f, 0, sent);
	if (d) {   /* o, g, a, x: by the plan's rules (owners as they are set) */
		unsigned df = (recv_diff_flags(s) & (IDX_DIFF_OWNER | IDX_DIFF_XATTRS | IDX_DIFF_ACLS)) |
		              IDX_DIFF_NO_PERMS | IDX_DIFF_NO_TIMES;
		unsigned m = idx_meta_changes(e, d, df);
		b |= (m & IDX_M_UID ? SYNC_ITEM_OWNER : 0) | (m & IDX_M_GID ? SYNC_ITEM_GROUP : 0) |
		     (m & IDX_M_ACL ? SYNC_ITEM_ACL : 0) | (m & IDX_M_XATTR ? SYNC_ITEM_XATTR : 0);
	}
	if (e->type == IDX_LNK)
		b &= SYNC_ITEM_NEW | SYNC_ITEM_SUM;   /* a link is made anew: its target */
	return b;
}

void recv_item(struct rstate *s, char how, const struct idx_entry *e, unsigned bits)
{
	if (s->out == RECV_OUT_NONE)
		return;
	if (how == '>')
		how = s->mark;
	/* -v names what is sent or made, and directories whose time is set */
	if (s->out == RECV_OUT_NAMES && how == '.' &&
	    !(e->type == IDX_DIR && (bits & SYNC_ITEM_TIME)))
		return;
	size_t cap = 4 * strlen(e->path) + 4 * (e->link ? strlen(e->link) : 0) + 64;
	const char *leader = NULL;
	if (how == 'h' && e->hlink)
		leader = s->sm.e[e->hlink - 1].path;
	cap += leader ? 4 * strlen(leader) : 0;
	char *name = malloc(cap), code[SYNC_ITEM_LEN];
	if (!name)
		return;
	size_t o = *e->path ? esc(name, cap, e->path) : (size_t)snprintf(name, cap, ".");
	if (e->type == IDX_DIR)
		name[o++] = '/', name[o] = '\0';
	if (e->type == IDX_LNK && e->link) {
		o += (size_t)snprintf(name + o, cap - o, " -> ");
		o += esc(name + o, cap - o, e->link);
	} else if (leader) {
		o += (size_t)snprintf(name + o, cap - o, " => ");
		o += esc(name + o, cap - o, leader);
	}
	if (s->out == RECV_OUT_CODES)
		add_line(s, "%s %s\n", sync_item_code(code, how, sync_item_type(e->type), bits), name);
	else
		add_line(s, "%s\n", name);
	free(name);
}

void recv_item_deleted(struct rstate *s, const struct idx_entry *d)
{
	if (s->out == RECV_OUT_NONE)
		return;
	size_t cap = 4 * strlen(d->path) + 8;
	char *name = malloc(cap);
	if (!name)
		return;
	esc(name, cap, d->path);
	add_line(s, "%s%s%s\n", s->out == RECV_OUT_CODES ? "*deleting   " : "deleting ", name,
	         d->type == IDX_DIR ? "/" : "");
	free(name);
}

void recv_item_created_root(struct rstate *s, const char *path)
{
	if (s->out == RECV_OUT_NONE)
		return;
	size_t cap = 4 * strlen(path) + 8;
	char *name = malloc(cap);
	if (!name)
		return;
	size_t n = esc(name, cap, path);
	while (n > 1 && name[n - 1] == '/')   /* as rsync: "d/" is said "d" */
		name[--n] = '\0';
	add_line(s, "created directory %s\n", name);
	free(name);
}

int recv_ctl_send(struct rstate *s, uint8_t type, const void *p, size_t n)
{
	pthread_mutex_lock(&s->ctl_mu);
	int rc = ctl_send(s->r->ctl, type, p, n);
	pthread_mutex_unlock(&s->ctl_mu);
	return rc;
}

/* Print or send what is buffered, and the landed count; log_mu held on
 * entry and exit, released while writing (a slow reader must not stall the
 * threads that add lines). */
static void flush_locked(struct rstate *s)
{
	char *buf = s->logbuf;
	size_t len = s->loglen;
	s->logbuf = NULL;
	s->loglen = s->logcap = 0;
	uint64_t files = __atomic_load_n(&s->res->files, __ATOMIC_RELAXED);
	uint64_t bytes = __atomic_load_n(&s->res->bytes, __ATOMIC_RELAXED);
	int landed = !s->r->is_client && s->log_landed && files != s->landed_said;
	pthread_mutex_unlock(&s->log_mu);
	if (len && s->r->is_client) {
		fwrite(buf, 1, len, stdout);
		fflush(stdout);
	}
	for (size_t off = 0; len && !s->r->is_client && off < len; off += CTL_FRAME_MAX) {
		size_t n = len - off < CTL_FRAME_MAX ? len - off : CTL_FRAME_MAX;
		if (recv_ctl_send(s, CTL_LOG, buf + off, n) < 0)
			break;
	}
	if (landed) {
		uint8_t b[PROGRESS_LEN];
		progress_encode(b, &(struct progress_msg){ .files = files, .bytes = bytes });
		if (recv_ctl_send(s, CTL_PROGRESS, b, sizeof b) == 0)
			s->landed_said = files;
	}
	free(buf);
	pthread_mutex_lock(&s->log_mu);
}

static void *log_main(void *arg)
{
	struct rstate *s = arg;
	pthread_mutex_lock(&s->log_mu);
	while (!s->log_stop) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += LOG_EVERY_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&s->log_cv, &s->log_mu, &ts);
		flush_locked(s);
	}
	pthread_mutex_unlock(&s->log_mu);
	return NULL;
}

void recv_log_start(struct rstate *s)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->log_cv, &ca);
	pthread_condattr_destroy(&ca);
	s->log_landed = 1;
	s->log_stop = 0;
	/* without the thread, the lines wait for recv_log_end() */
	s->log_on = pthread_create(&s->log_th, NULL, log_main, s) == 0;
	if (!s->log_on)
		pthread_cond_destroy(&s->log_cv);
}

void recv_log_end(struct rstate *s)
{
	if (s->log_on) {
		pthread_mutex_lock(&s->log_mu);
		s->log_stop = 1;
		pthread_cond_signal(&s->log_cv);
		pthread_mutex_unlock(&s->log_mu);
		pthread_join(s->log_th, NULL);
		pthread_cond_destroy(&s->log_cv);
		s->log_on = 0;
	}
	s->log_landed = 0;   /* DONE carries the final counts */
	pthread_mutex_lock(&s->log_mu);
	flush_locked(s);
	pthread_mutex_unlock(&s->log_mu);
}
