/*
 * --watch --append: the sender's memo, from round to round, of the rows
 * the index could not keep (sync_opts.grown, idx_scan_opts.grown_hint).
 */
#include <string.h>

#include "sync/send/send_int.h"

/*
 * --watch --append: keep the rows of large files that the index could not
 * keep (changed as they were read, or in the clock tick of the scan: a
 * recording being written), so that the next round's scan takes their
 * whole chunks' digests from here and reads only what they gained, instead
 * of the whole file again. A row the index now keeps leaves the memo, and
 * so does any other under the scan's roots (a path gone is gone); a scan
 * of the whole tree starts it again. A row whose old part the send then
 * finds changed leaves it too (send_grown_forget()).
 */
static int under_root(const char *path, const struct idx_root *r, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		size_t l = strlen(r[k].path);
		if (!l || (!strncmp(path, r[k].path, l) && (path[l] == '\0' || path[l] == '/')))
			return 1;
	}
	return 0;
}

void send_remember_grown(struct idx_manifest *memo, const struct idx_manifest *m,
                           int64_t stamp, const struct idx_root *roots, size_t nroots)
{
	struct idx_manifest next = { 0 };
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < m->n; i++) {
		const struct idx_entry *e = &m->e[i];
		if (e->type == IDX_REG && e->size >= IDX_CHUNK_SIZE &&
		    !(e->flags & IDX_F_NOHASH) && ((e->flags & IDX_F_UNSTABLE) ||
		    e->mtime_ns >= stamp || e->ctime_ns >= stamp))
			rc = idx_manifest_add(&next, e);
	}
	for (size_t i = 0; rc == 0 && roots && i < memo->n; i++)
		if (memo->e[i].size && !under_root(memo->e[i].path, roots, nroots))
			rc = idx_manifest_add(&next, &memo->e[i]);
	idx_manifest_free(memo);
	if (rc < 0) {
		idx_manifest_free(&next);   /* hashed whole next time, no worse */
		return;
	}
	idx_manifest_sort(&next);
	*memo = next;
}

void send_grown_forget(struct idx_manifest *memo, const char *path)
{
	struct idx_entry *e = (struct idx_entry *)idx_manifest_find(memo, path);
	if (e)
		e->size = 0;   /* no whole chunk: never a basis again, and dropped */
}

