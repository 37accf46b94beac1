#include <stdlib.h>
#include <string.h>

#include "common/wire.h"

/* Reserve n bytes at the end of w; returns where to write them or NULL. */
uint8_t *wr_room(struct wire_wr *w, size_t n)
{
	if (w->bad)
		return NULL;
	if (w->cap - w->len < n) {
		size_t cap = w->cap ? w->cap : 4096;
		while (cap - w->len < n) {
			if (cap > SIZE_MAX / 2) {
				w->bad = 1;
				return NULL;
			}
			cap *= 2;
		}
		uint8_t *b = realloc(w->buf, cap);
		if (!b) {
			w->bad = 1;
			return NULL;
		}
		w->buf = b;
		w->cap = cap;
	}
	uint8_t *p = w->buf + w->len;
	w->len += n;
	return p;
}

char *rd_str16(struct wire_rd *r)
{
	size_t n = rd_u16(r);
	const uint8_t *p = rd_take(r, n);
	if (r->bad || memchr(p, 0, n)) {
		r->bad = 1;
		return NULL;
	}
	char *s = malloc(n + 1);
	if (!s) {
		r->bad = 1;
		return NULL;
	}
	memcpy(s, p, n);
	s[n] = 0;
	return s;
}
