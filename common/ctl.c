/* The control channel: length-prefixed frames over a pair of fds (common/ctl.h). */
#include <errno.h>
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

int ctl_recv(struct ctl *c, uint8_t *type, size_t *len)
{
	uint8_t h[5];
	int rc = io_read_full(c->in, h, sizeof h);
	if (rc < 0)
		return rc;
	uint32_t n = get_u32(h);
	if (n > CTL_FRAME_MAX || h[4] < CTL_HELLO || h[4] > CTL_LAST)
		return -EPROTO;
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
