/* The control channel: length-prefixed frames over a pair of fds (common/ctl.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/io.h"
#include "common/wire.h"
#include "common/ctl.h"

/* The keep-alive of a channel with a timeout: a thread that sends NOOP
 * when nothing else was sent for a quarter of the timeout, so a peer busy
 * in a long scan is not taken for a stopped one. */
struct ctl_ka {
	pthread_mutex_t mu;      /* one frame at a time on c->out */
	pthread_cond_t cv;
	pthread_t th;
	int stop;
	long long last_ms;       /* the last send */
};

static int send_frame(struct ctl *c, uint8_t type, const void *payload, size_t len)
{
	uint8_t h[5];
	put_u32(h, (uint32_t)len);
	h[4] = type;
	int rc = io_xfer_timeout(c->out, h, sizeof h, 1, c->timeout_ms);
	if (rc == 0)
		rc = io_xfer_timeout(c->out, (void *)payload, len, 1, c->timeout_ms);
	if (rc == 0)
		__atomic_add_fetch(&c->tx_bytes, sizeof h + len, __ATOMIC_RELAXED);
	return rc == -EPIPE ? -ECONNRESET : rc;
}

int ctl_send(struct ctl *c, uint8_t type, const void *payload, size_t len)
{
	if (len > CTL_FRAME_MAX)
		return -EMSGSIZE;
	if (!c->ka)
		return send_frame(c, type, payload, len);
	pthread_mutex_lock(&c->ka->mu);
	int rc = send_frame(c, type, payload, len);
	c->ka->last_ms = clock_ms();
	pthread_mutex_unlock(&c->ka->mu);
	return rc;
}

static void *ka_main(void *arg)
{
	struct ctl *c = arg;
	struct ctl_ka *k = c->ka;
	long long every = c->timeout_ms / 4 > 250 ? c->timeout_ms / 4 : 250;
	pthread_mutex_lock(&k->mu);
	while (!k->stop) {
		long long due = k->last_ms + every, now = clock_ms();
		if (now >= due) {
			if (send_frame(c, CTL_NOOP, "", 0) < 0)
				break;   /* the channel is gone: the main thread will see it */
			k->last_ms = now;
			continue;
		}
		struct timespec ts = { .tv_sec = (time_t)(due / 1000),   /* (cv: monotonic) */
		                       .tv_nsec = (long)(due % 1000) * 1000000 };
		pthread_cond_timedwait(&k->cv, &k->mu, &ts);
	}
	pthread_mutex_unlock(&k->mu);
	return NULL;
}

#define CTL_JUNK 256   /* bytes kept of what was not a frame (a banner's lines) */

/* A frame header that is not one: keep it in c->buf, and what is there to
 * read within a moment, so the caller can show what came instead.
 * Returns -EPROTO. */
static int keep_junk(struct ctl *c, const uint8_t h[5], uint8_t *type, size_t *len)
{
	*type = 0;
	*len = 0;
	if (c->cap < CTL_JUNK + 8) {
		uint8_t *b = realloc(c->buf, CTL_JUNK + 8);
		if (!b)
			return -EPROTO;
		c->buf = b;
		c->cap = CTL_JUNK + 8;
	}
	memcpy(c->buf, h, 5);
	size_t n = 5;
	struct pollfd p = { c->in, POLLIN, 0 };
	while (n < CTL_JUNK && poll(&p, 1, 100) > 0) {
		ssize_t r = read(c->in, c->buf + n, CTL_JUNK - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	memset(c->buf + n, 0, 8);
	*len = n;
	return -EPROTO;
}

char *ctl_junk_text(const uint8_t *junk, size_t n, char *out, size_t cap)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 5 < cap; i++) {
		if (junk[i] >= 0x20 && junk[i] < 0x7f && junk[i] != '\\' && junk[i] != '\'')
			out[o++] = (char)junk[i];
		else
			o += (size_t)snprintf(out + o, cap - o, "\\%03o", junk[i]);
	}
	if (cap)
		out[o] = '\0';
	return out;
}

/* The length of a valid UTF-8 sequence at p (at most n bytes), else 0;
 * C1 controls (U+0080..U+009F) are not text to a terminal either. */
static size_t utf8_len(const uint8_t *p, size_t n)
{
	size_t l = p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
	         : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
	if (!l || l > n || (l == 2 && p[0] == 0xc2 && p[1] < 0xa0))
		return 0;
	for (size_t k = 1; k < l; k++)
		if ((p[k] & 0xc0) != 0x80)
			return 0;
	return l;
}

char *ctl_shell_text(const uint8_t *junk, size_t n, char *out, size_t cap)
{
	size_t o = 0, i = 0;
	int binary = 0;
	while (i < n && o + 8 < cap) {
		uint8_t c = junk[i];
		size_t l = c >= 0x80 ? utf8_len(junk + i, n - i) : 1;
		const char *esc = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r"
		                : c == 0x1b ? "\\e" : c == '\\' ? "\\\\" : c == '\'' ? "\\'" : NULL;
		if (esc) {
			o += (size_t)snprintf(out + o, cap - o, "%s", esc);
		} else if ((c >= 0x20 && c < 0x7f) || (c >= 0x80 && l)) {
			if (o + l + 8 >= cap)
				break;
			memcpy(out + o, junk + i, l);
			o += l;
			i += l;
			continue;
		} else {
			binary = 1;   /* not text: where rdcp's own bytes begin */
			break;
		}
		i++;
	}
	if (i < n && !binary && o + 4 <= cap)   /* more text than fits */
		o += (size_t)snprintf(out + o, cap - o, "...");
	if (cap)
		out[o < cap ? o : cap - 1] = '\0';
	return out;
}

/* One frame, NOOPs included. */
static int recv_frame(struct ctl *c, uint8_t *type, size_t *len)
{
	uint8_t h[5];
	int rc = io_xfer_timeout(c->in, h, sizeof h, 0, c->timeout_ms);
	if (rc < 0)
		return rc;
	uint32_t n = get_u32(h);
	if (n > CTL_FRAME_MAX || h[4] < CTL_HELLO || h[4] > CTL_LAST)
		return keep_junk(c, h, type, len);
	if (n + 8 > c->cap) {
		uint8_t *b = realloc(c->buf, n + 8);
		if (!b)
			return -ENOMEM;
		c->buf = b;
		c->cap = n + 8;
	}
	if ((rc = io_xfer_timeout(c->in, c->buf, n, 0, c->timeout_ms)) < 0)
		return rc;
	/* zeros after the payload: a message can be printed as text, and an
	 * ERROR's text at buf + 4 stays in bounds even if the frame is short */
	memset(c->buf + n, 0, 8);
	*type = h[4];
	*len = n;
	c->rx_ms = clock_ms();
	c->rx_bytes += sizeof h + n;
	return 0;
}

long long ctl_idle_ms(const struct ctl *c)
{
	return clock_ms() - c->rx_ms;
}

int ctl_recv(struct ctl *c, uint8_t *type, size_t *len)
{
	int rc;
	while ((rc = recv_frame(c, type, len)) == 0 && *type == CTL_NOOP)
		;
	return rc;
}

int ctl_poll(struct ctl *c, uint8_t *type, size_t *len)
{
	struct pollfd p = { c->in, POLLIN, 0 };
	while (poll(&p, 1, 0) > 0) {
		int rc = recv_frame(c, type, len);
		if (rc < 0)
			return rc;
		if (*type != CTL_NOOP)
			return 1;
	}
	return 0;
}

int ctl_gone(void *c)
{
	struct pollfd p = { ((struct ctl *)c)->in, 0, 0 };   /* hang-ups are always said */
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

void ctl_error(struct ctl *c, int code, const char *msg)
{
	size_t n = strlen(msg);
	uint8_t *p = malloc(4 + n);
	if (!p)
		return;
	put_u32(p, (uint32_t)code);
	memcpy(p + 4, msg, n);
	ctl_send(c, CTL_ERROR, p, 4 + n);
	free(p);
}

void ctl_free(struct ctl *c)
{
	if (c->ka) {
		pthread_mutex_lock(&c->ka->mu);
		c->ka->stop = 1;
		pthread_cond_signal(&c->ka->cv);
		pthread_mutex_unlock(&c->ka->mu);
		pthread_join(c->ka->th, NULL);
		pthread_cond_destroy(&c->ka->cv);
		pthread_mutex_destroy(&c->ka->mu);
		free(c->ka);
		c->ka = NULL;
	}
	free(c->buf);
	c->buf = NULL;
	c->cap = 0;
}

int ctl_set_timeout(struct ctl *c, int timeout_ms)
{
	if (timeout_ms <= 0 || c->ka)
		return 0;
	/* non-blocking, so that a write to a stopped peer is bounded too */
	int fl = fcntl(c->out, F_GETFL);
	if (fl >= 0)
		fcntl(c->out, F_SETFL, fl | O_NONBLOCK);
	if (c->in != c->out && (fl = fcntl(c->in, F_GETFL)) >= 0)
		fcntl(c->in, F_SETFL, fl | O_NONBLOCK);
	struct ctl_ka *k = calloc(1, sizeof *k);
	if (!k)
		return -ENOMEM;
	pthread_mutex_init(&k->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&k->cv, &ca);
	pthread_condattr_destroy(&ca);
	k->last_ms = clock_ms();
	c->rx_ms = k->last_ms;
	c->timeout_ms = timeout_ms;
	c->ka = k;
	if (pthread_create(&k->th, NULL, ka_main, c)) {
		c->ka = NULL;
		pthread_cond_destroy(&k->cv);
		pthread_mutex_destroy(&k->mu);
		free(k);
		return -EAGAIN;
	}
	return 0;
}
