#include <stdlib.h>

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
