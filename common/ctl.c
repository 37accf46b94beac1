/* The control channel: length-prefixed frames over a pair of fds (common/ctl.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"
#include "common/wire.h"
#include "common/ctl.h"

int ctl_send(struct ctl *c, uint8_t type, const void *payload, size_t len)
{
	uint8_t h[5];
	if (len > CTL_FRAME_MAX)
		return -EMSGSIZE;
	put_u32(h, (uint32_t)len);
	h[4] = type;
	int rc = io_write_full(c->out, h, sizeof h);
	if (rc == 0)
		rc = io_write_full(c->out, payload, len);
	return rc == -EPIPE ? -ECONNRESET : rc;
}

#define CTL_JUNK 48   /* bytes kept of what was not a frame */

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

int ctl_recv(struct ctl *c, uint8_t *type, size_t *len)
{
	uint8_t h[5];
	int rc = io_read_full(c->in, h, sizeof h);
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
	if ((rc = io_read_full(c->in, c->buf, n)) < 0)
		return rc;
	/* zeros after the payload: a message can be printed as text, and an
	 * ERROR's text at buf + 4 stays in bounds even if the frame is short */
	memset(c->buf + n, 0, 8);
	*type = h[4];
	*len = n;
	return 0;
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
	free(c->buf);
	c->buf = NULL;
	c->cap = 0;
}
