/*
 * Renamed and copied files: a new file (no old version at its path) whose
 * content DST already holds under another name is made from that file,
 * not sent. Recorders and editors write `x.tmp` and rename it to `x`; a
 * directory renamed moves everything under it; under --watch each of
 * those is a round. The sender's file hash (XXH3-128 over the chunk
 * digests, checked by the manifest's decoder) must equal that of a DST
 * file of the same size whose digests DST's index vouches for; the file
 * is then built from it chunk by chunk as a delta against it (delta.c:
 * reflinked or copied, every chunk's digest from DST's index), before any
 * data comes.
 *
 * Large files only (a small one costs less to send than to look for), and
 * only from a DST file this run does not rewrite: one gone from SRC (its
 * deletion, with --delete, comes after the data) or one SRC holds with the
 * same content. Not under --delete-before (the candidates are gone by
 * then), -W (no deltas) or --inplace/--append (a new file has no place to
 * be written in).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sync/recv/recv_int.h"

static int by_content(const void *a, const void *b)
{
	const struct idx_entry *x = *(const struct idx_entry *const *)a;
	const struct idx_entry *y = *(const struct idx_entry *const *)b;
	if (x->size != y->size)
		return x->size < y->size ? -1 : 1;
	return memcmp(x->hash, y->hash, IDX_HASH_LEN);
}

/* May DST's d serve as another file's content? */
static int usable(const struct rstate *s, const struct idx_entry *d)
{
	if (d->type != IDX_REG || d->size < SYNC_SMALL ||
	    (d->flags & (GONE | IDX_F_UNSTABLE | IDX_F_NOHASH | IDX_F_ASSUMED)))
		return 0;
	const struct idx_entry *e = idx_manifest_find(&s->sm, d->path);
	return !e || (e->type == IDX_REG && e->size == d->size &&
	              !memcmp(e->hash, d->hash, IDX_HASH_LEN));
}

/* The table of DST's usable files by (size, hash), made at the first
 * question. 0 or -ENOMEM. */
static int build(struct rstate *s)
{
	s->moved_built = 1;
	for (size_t k = 0; k < s->dm.n; k++) {
		const struct idx_entry *d = &s->dm.e[k];
		if (!usable(s, d))
			continue;
		if ((s->nmoved & (s->nmoved - 1)) == 0) {   /* at 0, 1, 2, 4...: double */
			const struct idx_entry **v = realloc(s->moved, (s->nmoved ? 2 * s->nmoved : 1) *
			                                     sizeof *v);
			if (!v)
				return -ENOMEM;
			s->moved = v;
		}
		s->moved[s->nmoved++] = d;
	}
	if (s->nmoved)
		qsort(s->moved, s->nmoved, sizeof *s->moved, by_content);
	return 0;
}

const struct idx_entry *recv_moved_find(struct rstate *s, const struct idx_entry *e)
{
	unsigned fl = s->r->flags;
	if (e->type != IDX_REG || e->size < SYNC_SMALL ||
	    (e->flags & (IDX_F_NOHASH | IDX_F_UNSTABLE)) ||
	    (fl & (SYNC_F_DELETE_BEFORE | SYNC_F_WHOLE | SYNC_F_INPLACE | SYNC_F_APPEND |
	           SYNC_F_DRYRUN)) || s->r->o->relay)
		return NULL;
	if (!s->moved_built && build(s) < 0)
		return NULL;   /* without the table: sent, as before */
	if (!s->nmoved)
		return NULL;
	const struct idx_entry **hit = bsearch(&e, s->moved, s->nmoved, sizeof *s->moved,
	                                       by_content);
	return hit ? *hit : NULL;
}
