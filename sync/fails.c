/*
 * --json's list of what failed: the first SYNC_FAILS_MAX entries that
 * failed or vanished, with their reason, wherever they failed. Each side
 * notes its own (the receiver in recv_fail(), the sender where a planned
 * file cannot be sent); a far side sends its list to the client in one
 * CTL_FAILED frame (docs/protocol.md), the receiver before DONE, the
 * sender after SENT, and only when the client asked for --json. The
 * client prints the list; failures it has no path for (entries below a
 * failed directory, a scan's unreadable ones) are counted in "errors" and
 * reported as left out.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/ctl.h"
#include "common/wire.h"
#include "sync/sync_int.h"

struct sync_fails *sync_fails_new(void)
{
	struct sync_fails *f = calloc(1, sizeof *f);
	if (f)
		pthread_mutex_init(&f->mu, NULL);
	return f;
}

void sync_fails_free(struct sync_fails *f)
{
	if (!f)
		return;
	for (unsigned i = 0; i < f->n; i++) {
		free(f->e[i].path);
		free(f->e[i].why);
	}
	pthread_mutex_destroy(&f->mu);
	free(f);
}

/* Bounded copies: a path up to the sync's limit, a reason up to a line. */
static int add_n(struct sync_fails *f, const char *path, size_t pl, const char *why,
                 size_t wl, int vanished)
{
	int rc = 0;
	pthread_mutex_lock(&f->mu);
	if (f->n < SYNC_FAILS_MAX) {
		struct sync_fail *e = &f->e[f->n];
		e->path = strndup(path, pl);
		e->why = strndup(why, wl);
		e->vanished = vanished != 0;
		if (e->path && e->why) {
			f->n++;
		} else {
			free(e->path);
			free(e->why);
			rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&f->mu);
	return rc;
}

void sync_fails_add(struct sync_fails *f, const char *path, const char *why, int vanished)
{
	if (!f)
		return;   /* no --json: nobody reads the list */
	size_t pl = strlen(path), wl = strlen(why);
	add_n(f, path, pl > SYNC_FAIL_PATH_MAX ? SYNC_FAIL_PATH_MAX : pl, why,
	      wl > SYNC_FAIL_WHY_MAX ? SYNC_FAIL_WHY_MAX : wl, vanished);
}

/* The frame: u16 count, then per entry u8 vanished (0 or 1), u16 path
 * length, path, u16 reason length, reason. */
uint8_t *sync_fails_encode(struct sync_fails *f, size_t *len)
{
	size_t cap = 2, at = 2;
	pthread_mutex_lock(&f->mu);
	for (unsigned i = 0; i < f->n; i++)
		cap += 5 + strlen(f->e[i].path) + strlen(f->e[i].why);
	uint8_t *b = malloc(cap);
	if (!b) {
		pthread_mutex_unlock(&f->mu);
		return NULL;
	}
	put_u16(b, (uint16_t)f->n);
	for (unsigned i = 0; i < f->n; i++) {
		size_t pl = strlen(f->e[i].path), wl = strlen(f->e[i].why);
		b[at++] = (uint8_t)f->e[i].vanished;
		put_u16(b + at, (uint16_t)pl);
		memcpy(b + at + 2, f->e[i].path, pl);
		at += 2 + pl;
		put_u16(b + at, (uint16_t)wl);
		memcpy(b + at + 2, f->e[i].why, wl);
		at += 2 + wl;
	}
	pthread_mutex_unlock(&f->mu);
	*len = at;
	return b;
}

int sync_fails_take(struct sync_fails *f, const uint8_t *b, size_t n, const char **why)
{
	*why = NULL;
	if (n < 2)
		return *why = "is shorter than its count", -EPROTO;
	unsigned count = get_u16(b);
	size_t at = 2;
	if (count > SYNC_FAILS_MAX)
		return *why = "lists more entries than the limit", -EPROTO;
	for (unsigned i = 0; i < count; i++) {
		if (n - at < 3 || b[at] > 1)
			return *why = "has an entry cut short or a flag out of range", -EPROTO;
		int vanished = b[at];
		size_t pl = get_u16(b + at + 1);
		at += 3;
		if (pl == 0 || pl > SYNC_FAIL_PATH_MAX || n - at < pl + 2 || memchr(b + at, 0, pl))
			return *why = "has a path empty, too long, cut short or with a NUL", -EPROTO;
		const char *path = (const char *)b + at;
		at += pl;
		size_t wl = get_u16(b + at);
		at += 2;
		if (wl > SYNC_FAIL_WHY_MAX || n - at < wl || memchr(b + at, 0, wl))
			return *why = "has a reason too long, cut short or with a NUL", -EPROTO;
		if (f && add_n(f, path, pl, (const char *)b + at, wl, vanished) < 0)
			return *why = "could not be stored (out of memory)", -ENOMEM;
		at += wl;
	}
	if (at != n)
		return *why = "has bytes after its last entry", -EPROTO;
	return 0;
}

void sync_fails_json(FILE *out, const struct sync_fails *f)
{
	fputc('[', out);
	for (unsigned i = 0; f && i < f->n; i++) {
		fputs(i ? ",{\"path\":" : "{\"path\":", out);
		sync_json_str(out, f->e[i].path);
		fputs(",\"reason\":", out);
		sync_json_str(out, f->e[i].why);
		fprintf(out, ",\"vanished\":%s}", f->e[i].vanished ? "true" : "false");
	}
	fputc(']', out);
}

int sync_paths_add(struct sync_paths *p, const char *path)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 16;
		char **v = realloc(p->v, cap * sizeof *v);
		if (!v) {
			p->lost = 1;
			return -ENOMEM;
		}
		p->v = v;
		p->cap = cap;
	}
	if (!(p->v[p->n] = strdup(path))) {
		p->lost = 1;
		return -ENOMEM;
	}
	p->n++;
	return 0;
}

void sync_paths_free(struct sync_paths *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->v[i]);
	free(p->v);
	*p = (struct sync_paths){ 0 };
}

static int path_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void sync_paths_unique(struct sync_paths *p)
{
	if (p->n < 2)
		return;
	qsort(p->v, p->n, sizeof *p->v, path_cmp);
	size_t k = 1;
	for (size_t i = 1; i < p->n; i++) {
		if (!strcmp(p->v[k - 1], p->v[i]))
			free(p->v[i]);
		else
			p->v[k++] = p->v[i];
	}
	p->n = k;
}
