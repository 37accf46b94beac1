/*
 * The watch's sets of paths (watch_int.h): the pending changes and the
 * directories no watch covers. Each path stands for the entry and all
 * below it, so a set that grows too big can be cut back to ancestors:
 * rescanning a directory covers whatever changed under it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sync/watch_int.h"

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* Put s (owned) into a slot; the set has room. */
static void pset_put(struct pset *p, char *s)
{
	size_t k = hash_str(s) & (p->cap - 1);
	while (p->slot[k])
		k = (k + 1) & (p->cap - 1);
	p->slot[k] = s;
	p->n++;
}

static int pset_grow(struct pset *p)
{
	struct pset g = { .cap = p->cap ? 2 * p->cap : 256 };
	if (!(g.slot = calloc(g.cap, sizeof *g.slot)))
		return -ENOMEM;
	for (size_t i = 0; i < p->cap; i++)
		if (p->slot[i])
			pset_put(&g, p->slot[i]);
	free(p->slot);
	*p = g;
	return 0;
}

int watch_pset_add(struct pset *p, const char *path)
{
	if (2 * (p->n + 1) > p->cap && pset_grow(p) < 0)
		return -ENOMEM;
	size_t k = hash_str(path) & (p->cap - 1);
	for (; p->slot[k]; k = (k + 1) & (p->cap - 1))
		if (!strcmp(p->slot[k], path))
			return 0;
	if (!(p->slot[k] = strdup(path)))
		return -ENOMEM;
	p->n++;
	return 0;
}

void watch_pset_clear(struct pset *p)
{
	for (size_t i = 0; i < p->cap; i++)
		free(p->slot[i]);
	free(p->slot);
	*p = (struct pset){ 0 };
}

char **watch_pset_take(struct pset *p, size_t *n)
{
	char **v = malloc((p->n ? p->n : 1) * sizeof *v);
	*n = 0;
	if (!v)
		return NULL;
	for (size_t i = 0; i < p->cap; i++)
		if (p->slot[i])
			v[(*n)++] = p->slot[i];
	free(p->slot);
	*p = (struct pset){ 0 };
	return v;
}

int watch_under(const char *path, const char *dir)
{
	size_t l = strlen(dir);
	return !l || (!strncmp(path, dir, l) && path[l] == '/');
}

/* Path order by components: '/' sorts before every other byte, so an
 * entry's descendants come right after it ("a", "a/b", "a-b"). */
static int path_cmp(const void *x, const void *y)
{
	const unsigned char *a = *(const unsigned char *const *)x;
	const unsigned char *b = *(const unsigned char *const *)y;
	for (; *a && *a == *b; a++, b++)
		;
	int ca = *a == '/' ? 1 : *a ? *a + 1 : 0;
	int cb = *b == '/' ? 1 : *b ? *b + 1 : 0;
	return ca - cb;
}

/* How long s is cut to its first depth components ("" at 0). */
static size_t depth_len(const char *s, size_t depth)
{
	size_t l = 0;
	if (!depth)
		return 0;
	for (; s[l]; l++)
		if (s[l] == '/' && !--depth)
			break;
	return l;
}

/* v (in path order) cut to depth components, those then equal to or
 * under a kept one dropped: how many are kept. With cut, also done (v's
 * first ones are the kept, the dropped freed); else only counted. Cutting
 * keeps the order (it is by components), so a dropped one always follows
 * the one it is under. */
static size_t cut_to(char **v, size_t n, size_t depth, int cut)
{
	const char *last = NULL;
	size_t ll = 0, k = 0;
	for (size_t i = 0; i < n; i++) {
		size_t l = depth_len(v[i], depth);
		if (last && (!ll || (l >= ll && !memcmp(v[i], last, ll) &&
		                     (l == ll || v[i][ll] == '/')))) {
			if (cut)
				free(v[i]);
			continue;
		}
		last = v[i];
		ll = l;
		if (cut) {
			v[i][l] = '\0';
			v[k] = v[i];
		}
		k++;
	}
	return k;
}

size_t watch_paths_tidy(char **v, size_t n)
{
	qsort(v, n, sizeof *v, path_cmp);
	return cut_to(v, n, SIZE_MAX, 1);
}

size_t watch_paths_cap(char **v, size_t n, size_t cap)
{
	size_t lo = 0, hi = 0;
	if (n <= cap)
		return n;
	for (size_t i = 0; i < n; i++) {
		size_t d = 1;
		for (const char *s = v[i]; *s; s++)
			d += *s == '/';
		if (d > hi)
			hi = d;
	}
	/* the deepest cut that keeps at most cap (0: the root, one path);
	 * paths no deeper than it stay as they are */
	while (lo < hi) {
		size_t mid = lo + (hi - lo + 1) / 2;
		if (cut_to(v, n, mid, 0) <= cap)
			lo = mid;
		else
			hi = mid - 1;
	}
	return cut_to(v, n, lo, 1);
}

int watch_pset_cap(struct pset *p, size_t cap)
{
	char **v = malloc((p->n ? p->n : 1) * sizeof *v);
	size_t n = 0;
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < p->cap; i++)
		if (p->slot[i]) {
			v[n++] = p->slot[i];
			p->slot[i] = NULL;
		}
	p->n = 0;
	n = watch_paths_cap(v, watch_paths_tidy(v, n), cap);
	for (size_t i = 0; i < n; i++)
		pset_put(p, v[i]);   /* fewer than were there: room enough */
	int root = n == 1 && !*v[0];
	free(v);
	return root;
}
