/* The sync's own control messages (docs/protocol.md): HELLO, CTL_DATA and
 * the DONE results, encoded and decoded field by field. Every decoder takes
 * peer input and bounds it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "sync/sync_int.h"

/* HELLO: magic, version, the server's role, flags, transport, path, address */
int hello_send(struct ctl *c, int role, const struct sync_opts *o, const char *path,
                      const char *addr)
{
	size_t pl = strlen(path), al = strlen(addr), fl = 2;
	for (int i = 0; i < o->nrules; i++)
		fl += 3 + strlen(o->rules[i].pattern);
	uint8_t *b = malloc(16 + pl + al + fl + 4);
	if (!b)
		return -ENOMEM;
	put_u32(b, CTL_MAGIC);
	b[4] = CTL_VERSION;
	b[5] = (uint8_t)role;
	put_u32(b + 6, o->flags);
	b[10] = (uint8_t)(o->tp.streams > 0 ? o->tp.streams : 1);
	b[11] = (uint8_t)o->tp.kind;
	put_u16(b + 12, (uint16_t)pl);
	memcpy(b + 14, path, pl);
	put_u16(b + 14 + pl, (uint16_t)al);
	memcpy(b + 16 + pl, addr, al);
	uint8_t *p = b + 16 + pl + al;
	put_u16(p, (uint16_t)o->nrules);
	p += 2;
	for (int i = 0; i < o->nrules; i++) {
		size_t n = strlen(o->rules[i].pattern);
		*p++ = (uint8_t)o->rules[i].include;
		put_u16(p, (uint16_t)n);
		memcpy(p + 2, o->rules[i].pattern, n);
		p += 2 + n;
	}
	put_u32(p, (uint32_t)o->timeout);
	int rc = ctl_send(c, CTL_HELLO, b, 16 + pl + al + fl + 4);
	free(b);
	return rc;
}

/* The rules at the end of HELLO: count (2), then include (1), length (2),
 * pattern; every length bounded by the frame. */
static int parse_rules(const uint8_t *p, size_t len, struct sync_rule **out, int *n)
{
	struct wire_rd r = { p, p + len, 0 };
	int count = rd_u16(&r);
	if (count > 10000)
		return -EPROTO;
	struct sync_rule *v = calloc((size_t)count + 1, sizeof *v);
	if (!v)
		return -ENOMEM;
	for (int i = 0; i < count; i++) {
		v[i].include = rd_u8(&r) != 0;
		size_t l = rd_u16(&r);
		const uint8_t *s = rd_take(&r, l);
		if (r.bad || !l || memchr(s, 0, l) || !(v[i].pattern = strndup((const char *)s, l))) {
			for (int k = 0; k < i; k++)
				free((char *)v[k].pattern);
			free(v);
			return -EPROTO;
		}
	}
	if (r.p != r.end) {
		for (int k = 0; k < count; k++)
			free((char *)v[k].pattern);
		free(v);
		return -EPROTO;
	}
	*out = v;
	*n = count;
	return 0;
}

int hello_decode(const uint8_t *b, size_t n, struct hello *h)
{
	memset(h, 0, sizeof *h);
	if (n < 5 || get_u32(b) != CTL_MAGIC)
		return -EPROTO;
	if (b[4] != CTL_VERSION)
		return -EPROTONOSUPPORT;
	if (n < 22)
		return -EPROTO;
	h->timeout = (int)get_u32(b + n - 4);   /* last: after the rules */
	if (h->timeout < 0 || h->timeout > SYNC_TIMEOUT_MAX)
		return -EPROTO;
	n -= 4;
	size_t pl = get_u16(b + 12);
	if (14 + pl + 2 > n)
		return -EPROTO;
	size_t al = get_u16(b + 14 + pl);
	if (16 + pl + al + 2 > n)
		return -EPROTO;
	h->role = b[5];
	h->flags = get_u32(b + 6);
	h->streams = b[10] >= 1 && b[10] <= TP_MAX_STREAMS ? b[10] : 1;
	h->kind = b[11] <= TP_RDMA ? (enum tp_kind)b[11] : TP_AUTO;
	if ((h->role != ROLE_SENDER && h->role != ROLE_RECEIVER) || (h->flags & ~SYNC_F_ALL) ||
	    pl == 0 || memchr(b + 14, 0, pl) || memchr(b + 16 + pl, 0, al))
		return -EPROTO;
	if (parse_rules(b + 16 + pl + al, n - 16 - pl - al, &h->rules, &h->nrules) < 0)
		return -EPROTO;
	h->path = strndup((const char *)b + 14, pl);
	h->addr = strndup((const char *)b + 16 + pl, al);
	if (!h->path || !h->addr) {
		hello_free(h);
		return -ENOMEM;
	}
	return 0;
}

void hello_free(struct hello *h)
{
	for (int i = 0; i < h->nrules; i++)
		free((char *)h->rules[i].pattern);
	free(h->rules);
	free(h->path);
	free(h->addr);
	memset(h, 0, sizeof *h);
}

void result_put(uint8_t *p, const struct sync_result *r)
{
	put_u32(p, r->code);
	put_u64(p + 4, r->files);
	put_u64(p + 12, r->bytes);
	put_u64(p + 20, r->deleted);
	put_u64(p + 28, r->errors);
	put_u64(p + 36, r->meta);
}

void result_get(const uint8_t *p, struct sync_result *r)
{
	r->code = get_u32(p);
	r->files = get_u64(p + 4);
	r->bytes = get_u64(p + 12);
	r->deleted = get_u64(p + 20);
	r->errors = get_u64(p + 28);
	r->meta = get_u64(p + 36);
}

int ctl_data_decode(const uint8_t *buf, size_t len, struct ctl_data *d)
{
	if (len < 34 || len - 34 > sizeof d->addr - 1)
		return -EPROTO;
	d->port = get_u16(buf);
	for (int i = 0; i < 32; i++) {
		uint8_t c = buf[2 + i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return -EPROTO;
		d->key[i] = (char)c;
	}
	d->key[32] = '\0';
	size_t al = len - 34;
	if (d->port == 0 || memchr(buf + 34, '\0', al))
		return -EPROTO;
	memcpy(d->addr, buf + 34, al);
	d->addr[al] = '\0';
	return 0;
}
