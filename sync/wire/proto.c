/* The sync's own control messages (docs/protocol.md): HELLO, READY,
 * MANIFEST_END, CTL_DATA, PROGRESS, SENT and the DONE results, encoded and
 * decoded field by field. Every decoder takes peer input and bounds it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/wire/proto.h"

/* HELLO: magic, version, the server's role, path, address, then the
 * server's options as strings (sync/opts.c parses them), and after "--"
 * the sender's other SRC paths, if any (paths[1..npath-1]). */
int hello_send(struct ctl *c, int role, const struct sync_opts *o, const char *const *paths,
               int npath, const char *addr)
{
	int nargs = o->nfwd + (npath > 1 ? npath : 0);
	size_t pl = strlen(paths[0]), al = strlen(addr), len = 12 + pl + al;
	if (nargs > HELLO_MAX_ARGS) {
		log_err("too many options and SRC arguments for one run (at most %d)",
		        HELLO_MAX_ARGS);
		return -E2BIG;
	}
	for (int i = 0; i < nargs; i++) {
		const char *a = i < o->nfwd ? o->fwd[i] : i == o->nfwd ? "--" : paths[i - o->nfwd];
		if (strlen(a) > UINT16_MAX || !*a) {
			log_err("an argument for the far side is empty or over 65535 bytes");
			return -EINVAL;
		}
		len += 2 + strlen(a);
	}
	if (pl > UINT16_MAX || al > UINT16_MAX) {
		log_err("a path for the far side is over 65535 bytes");
		return -ENAMETOOLONG;
	}
	uint8_t *b = malloc(len), *p = b;
	if (!b)
		return -ENOMEM;
	put_u32(p, CTL_MAGIC);
	p[4] = CTL_VERSION;
	p[5] = (uint8_t)role;
	put_u16(p + 6, (uint16_t)pl);
	memcpy(p + 8, paths[0], pl);
	p += 8 + pl;
	put_u16(p, (uint16_t)al);
	memcpy(p + 2, addr, al);
	p += 2 + al;
	put_u16(p, (uint16_t)nargs);
	p += 2;
	for (int i = 0; i < nargs; i++) {
		const char *a = i < o->nfwd ? o->fwd[i] : i == o->nfwd ? "--" : paths[i - o->nfwd];
		size_t n = strlen(a);
		put_u16(p, (uint16_t)n);
		memcpy(p + 2, a, n);
		p += 2 + n;
	}
	int rc = ctl_send(c, CTL_HELLO, b, len);
	free(b);
	return rc;
}

/* h->why for a malformed HELLO; returns -EPROTO. */
static int hello_bad(struct hello *h, const char *why)
{
	hello_free(h);
	h->why = why;
	return -EPROTO;
}

/* A string of the HELLO: length (2), bytes without NUL; NULL if malformed
 * (or empty when nonempty is set). */
static char *take_str(struct wire_rd *r, int nonempty)
{
	size_t l = rd_u16(r);
	const uint8_t *s = rd_take(r, l);
	if (r->bad || (nonempty && !l) || memchr(s, 0, l))
		return NULL;
	return strndup((const char *)s, l);
}

int hello_decode(const uint8_t *b, size_t n, struct hello *h)
{
	memset(h, 0, sizeof *h);
	if (n < 5 || get_u32(b) != CTL_MAGIC)
		return hello_bad(h, "it is not an rdcp hello");
	if (b[4] != CTL_VERSION)
		return -EPROTONOSUPPORT;
	struct wire_rd r = { b + 5, b + n, 0 };
	h->role = rd_u8(&r);
	if (h->role != ROLE_SENDER && h->role != ROLE_RECEIVER)
		return hello_bad(h, "it gives an unknown role");
	if (!(h->path = take_str(&r, 1)) || !(h->addr = take_str(&r, 0)))
		return hello_bad(h, "its path is empty or malformed, or its address is");
	int argc = rd_u16(&r);
	if (r.bad || argc > HELLO_MAX_ARGS)
		return hello_bad(h, "its option count is malformed");
	if (!(h->argv = calloc((size_t)argc + 2, sizeof *h->argv)))
		return hello_bad(h, "it is too large");
	h->argv[h->argc++] = strdup("rdcp");
	for (int i = 0; i < argc; i++)
		if (!(h->argv[h->argc++] = take_str(&r, 1)))
			return hello_bad(h, "its options are malformed");
	if (r.p != r.end || !h->argv[0])
		return hello_bad(h, "it has bytes after its options");
	return 0;
}

void hello_free(struct hello *h)
{
	for (int i = 0; h->argv && i < h->argc; i++)
		free(h->argv[i]);
	free(h->argv);
	free(h->path);
	free(h->addr);
	memset(h, 0, sizeof *h);
}

void result_add(struct sync_result *to, const struct sync_result *r)
{
	to->files += r->files;
	to->bytes += r->bytes;
	to->deleted += r->deleted;
	to->errors += r->errors;
	to->meta += r->meta;
	to->matched += r->matched;
	for (int j = 0; j < SYNC_KINDS; j++) {
		to->created[j] += r->created[j];
		to->removed[j] += r->removed[j];
	}
}

void result_put(uint8_t *p, const struct sync_result *r)
{
	put_u32(p, r->code);
	put_u64(p + 4, r->files);
	put_u64(p + 12, r->bytes);
	put_u64(p + 20, r->deleted);
	put_u64(p + 28, r->errors);
	put_u64(p + 36, r->meta);
	for (int k = 0; k < SYNC_KINDS; k++) {
		put_u64(p + 44 + 8 * k, r->created[k]);
		put_u64(p + 44 + 8 * (SYNC_KINDS + k), r->removed[k]);
	}
	put_u64(p + 44 + 16 * SYNC_KINDS, r->matched);
}

int result_get(const uint8_t *p, struct sync_result *r)
{
	r->code = get_u32(p);
	r->files = get_u64(p + 4);
	r->bytes = get_u64(p + 12);
	r->deleted = get_u64(p + 20);
	r->errors = get_u64(p + 28);
	r->meta = get_u64(p + 36);
	for (int k = 0; k < SYNC_KINDS; k++) {
		r->created[k] = get_u64(p + 44 + 8 * k);
		r->removed[k] = get_u64(p + 44 + 8 * (SYNC_KINDS + k));
	}
	r->matched = get_u64(p + 44 + 16 * SYNC_KINDS);
	if (r->code > 255) {   /* an exit status: 256 would exit 0 */
		r->code = RD_EXIT_PROTO;
		return -EPROTO;
	}
	return 0;
}

/* d->why for a malformed CTL_DATA; returns -EPROTO. */
static int data_bad(struct ctl_data *d, const char *why)
{
	d->why = why;
	return -EPROTO;
}

int ctl_data_decode(const uint8_t *buf, size_t len, struct ctl_data *d)
{
	d->why = NULL;
	if (len < 34)
		return data_bad(d, "is shorter than a port and a secret");
	if (len - 34 > sizeof d->addr - 1)
		return data_bad(d, "has an address over 255 bytes");
	d->port = get_u16(buf);
	for (int i = 0; i < 32; i++) {
		uint8_t c = buf[2 + i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return data_bad(d, "has a secret that is not 32 hex digits");
		d->key[i] = (char)c;
	}
	d->key[32] = '\0';
	size_t al = len - 34;
	if (d->port == 0)
		return data_bad(d, "has port 0");
	if (memchr(buf + 34, '\0', al))
		return data_bad(d, "has an address with a NUL byte");
	memcpy(d->addr, buf + 34, al);
	d->addr[al] = '\0';
	return 0;
}

/* Peer text for one line of ours: control characters (a terminal's escape
 * sequences, newlines) as \ooo, at most cap - 1 bytes. */
static char *peer_text(char *buf, size_t cap, const uint8_t *p, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n && p[i] && o + 5 < cap; i++) {
		if (p[i] < 0x20 || p[i] == 0x7f)
			o += (size_t)snprintf(buf + o, cap - o, "\\%03o", p[i]);
		else
			buf[o++] = (char)p[i];
	}
	buf[o] = '\0';
	return buf;
}

uint32_t sync_peer_code(const struct ctl *c, size_t n)
{
	uint32_t code = n >= 4 ? get_u32(c->buf) : 0;
	return code >= 1 && code <= 255 ? code : RD_EXIT_PROTO;
}

uint32_t sync_peer_error(const struct ctl *c, size_t n, const char *prefix)
{
	char text[1024];
	log_err("%s%s", prefix, n > 4 ? peer_text(text, sizeof text, c->buf + 4, n - 4)
	                               : "(no reason given)");
	return sync_peer_code(c, n);
}

int sync_recv(struct role *r, const char *peer, uint8_t *type, size_t *n)
{
	struct ctl *c = r->ctl;
	int rc = ctl_recv(c, type, n);
	if (rc == 0)
		r->frames++;
	if (rc != -EPROTO || !*n)
		return rc;
	char seen[400];
	if (r->is_client && r->frames == 0) {
		/* as rsync says it ("is your shell clean?"), and exits 2 for it;
		 * the text the shell printed, not rdcp's bytes after it */
		log_err("protocol error: the remote shell printed something before rdcp "
		        "started (is your shell clean? e.g. a banner or echo in .bashrc): '%s'",
		        ctl_shell_text(c->buf, *n, seen, sizeof seen));
		return -EPROTONOSUPPORT;
	}
	ctl_junk_text(c->buf, *n, seen, sizeof seen);
	log_err("protocol error: the %s's control messages are corrupt: '%s'", peer, seen);
	return -EPROTO;
}

int relay_msg_decode(const uint8_t *buf, size_t len, struct relay_msg *m, const char **why)
{
	memset(m, 0, sizeof *m);
	*why = NULL;
	if (len < 5)
		return *why = "is shorter than its flags and two lengths", -EPROTO;
	m->flags = buf[0];
	if (m->flags & ~(RELAY_F_REJOIN | RELAY_F_HOP_MS))
		return *why = "has flags this version does not know", -EPROTO;
	size_t at = 1;
	for (int k = 0; k < 2; k++) {
		if (len - at < 2)
			return *why = "is cut short", -EPROTO;
		size_t n = get_u16(buf + at);
		at += 2;
		if (n > len - at)
			return *why = "has a part longer than itself", -EPROTO;
		struct ctl_data *d = k ? &m->alt : &m->next;
		if (n && ctl_data_decode(buf + at, n, d) < 0)
			return *why = d->why, -EPROTO;
		if (n && !d->addr[0])
			return *why = "has a host without an address", -EPROTO;
		*(k ? &m->has_alt : &m->has_next) = n != 0;
		at += n;
	}
	if ((m->flags & RELAY_F_HOP_MS) && len - at >= 4) {
		m->hop_ms = get_u32(buf + at);
		at += 4;
		if (!m->hop_ms || m->hop_ms > (uint32_t)SYNC_TIMEOUT_MAX * 1000 || !m->has_next)
			return *why = "has a hop timeout of 0, over the limit, or without a next "
			              "host", -EPROTO;
	} else if (m->flags & RELAY_F_HOP_MS) {
		return *why = "is cut short", -EPROTO;
	}
	if (at != len)
		return *why = "has bytes after its end", -EPROTO;
	if (m->has_alt && !m->has_next)
		return *why = "has a host to re-link to but no next host", -EPROTO;
	return 0;
}

size_t ready_encode(uint8_t b[4 + READY_NAME_MAX], const struct ready_msg *m)
{
	uint16_t l = m->name_len > READY_NAME_MAX ? READY_NAME_MAX : m->name_len;
	b[0] = m->kind;
	b[1] = m->is_dir;
	put_u16(b + 2, l);
	memcpy(b + 4, m->name, l);
	return 4 + (size_t)l;
}

int ready_decode(const uint8_t *b, size_t n, struct ready_msg *m)
{
	size_t l = n >= 4 ? get_u16(b + 2) : 0;
	if (n < 4 || n != 4 + l)
		return -EPROTO;
	m->kind = b[0];
	m->is_dir = b[1];
	m->name_len = (uint16_t)l;
	if (l > READY_NAME_MAX)
		l = READY_NAME_MAX;
	memcpy(m->name, b + 4, l);
	m->name[l] = '\0';
	return m->name_len > READY_NAME_MAX ? -ENAMETOOLONG : 0;
}

void manifest_end_encode(uint8_t b[MANIFEST_END_LEN], const struct manifest_end_msg *m)
{
	put_u64(b, m->errors);
	memcpy(b + 8, m->akey, SYNC_AKEY_LEN);
	put_u64(b + 8 + SYNC_AKEY_LEN, m->gen_us);
	put_u64(b + 16 + SYNC_AKEY_LEN, m->xfer_us);
	put_u64(b + 24 + SYNC_AKEY_LEN, m->vanished);
}

int manifest_end_decode(const uint8_t *b, size_t n, struct manifest_end_msg *m)
{
	if (n != MANIFEST_END_LEN)
		return -EPROTO;
	m->errors = get_u64(b);
	memcpy(m->akey, b + 8, SYNC_AKEY_LEN);
	m->gen_us = get_u64(b + 8 + SYNC_AKEY_LEN);
	m->xfer_us = get_u64(b + 16 + SYNC_AKEY_LEN);
	m->vanished = get_u64(b + 24 + SYNC_AKEY_LEN);
	return 0;
}

void sent_encode(uint8_t b[SENT_LEN], const struct sent_msg *m)
{
	put_u64(b, m->unsent);
	put_u64(b + 8, m->unreadable);
	put_u64(b + 16, m->retried);
	put_u64(b + 24, m->as_read);
}

int sent_decode(const uint8_t *b, size_t n, struct sent_msg *m)
{
	if (n != SENT_LEN)
		return -EPROTO;
	m->unsent = get_u64(b);
	m->unreadable = get_u64(b + 8);
	m->retried = get_u64(b + 16);
	m->as_read = get_u64(b + 24);
	if (m->unreadable > m->unsent || m->retried > m->unsent - m->unreadable)
		return -EPROTO;
	return 0;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int wcheck_decode(const uint8_t *b, size_t n, unsigned *flags, char ***v, size_t *nv,
                  const char **why)
{
	struct wire_rd r = { b, b + n, 0 };
	*flags = rd_u8(&r);
	uint32_t count = rd_u32(&r);
	*v = NULL;
	*nv = 0;
	*why = "is shorter than its count";
	if (r.bad || *flags > WCHECK_ALL || count > n / 2)
		return -EPROTO;
	if (count && !(*v = calloc(count, sizeof **v)))
		return -ENOMEM;
	for (uint32_t k = 0; k < count; k++) {
		uint16_t l = rd_u16(&r);
		const uint8_t *p = rd_take(&r, l);
		if (r.bad || !l || memchr(p, '\0', l) || idx_path_check((const char *)p, l) < 0) {
			*why = r.bad ? "is shorter than its count" : "has a path that is not one";
			goto bad;
		}
		if (!((*v)[k] = strndup((const char *)p, l))) {
			*nv = k;
			return -ENOMEM;
		}
		*nv = k + 1;
	}
	if (r.p != r.end) {
		*why = "has bytes after its paths";
		goto bad;
	}
	if (*nv)
		qsort(*v, *nv, sizeof **v, str_cmp);
	return 0;
bad:
	while (*nv)
		free((*v)[--*nv]);
	free(*v);
	*v = NULL;
	return -EPROTO;
}

void progress_encode(uint8_t b[PROGRESS_LEN], const struct progress_msg *m)
{
	put_u64(b, m->files);
	put_u64(b + 8, m->bytes);
}

int progress_decode(const uint8_t *b, size_t n, struct progress_msg *m)
{
	if (n != PROGRESS_LEN)
		return -EPROTO;
	m->files = get_u64(b);
	m->bytes = get_u64(b + 8);
	return 0;
}
