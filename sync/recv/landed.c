/*
 * CTL_RETRY (--rounds): the files whose data did not match the list, for
 * the client to send again. And --remove-source-files, the receiver's side
 * (the sender's: send/remove.c):
 * after everything landed and before DONE, CTL_LANDED names the entries
 * that landed this run or that DST already held (as rsync: those go too),
 * never a directory; the sender checks them and removes them from SRC.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/wire.h"
#include "sync/recv/recv_int.h"

/* The receiver's side: CTL_LANDED, in frames of at most CTL_FRAME_MAX. */
static int landed_send(struct rstate *s, const uint32_t *idx, uint32_t n)
{
	/* frames of at most CTL_FRAME_MAX: count (4) + indices (4 each) */
	const uint32_t per = (CTL_FRAME_MAX - 4) / 4;
	int rc = 0;
	for (uint32_t k = 0; rc == 0 && k < n; k += per) {
		uint32_t m = n - k < per ? n - k : per;
		uint8_t *b = malloc(4 + (size_t)m * 4);
		if (!b)
			return -ENOMEM;
		put_u32(b, m);
		for (uint32_t j = 0; j < m; j++)
			put_u32(b + 4 + 4 * j, idx[k + j]);
		rc = recv_ctl_send(s, CTL_LANDED, b, 4 + (size_t)m * 4);   /* the log thread's too */
		free(b);
	}
	return rc;
}

void recv_send_landed(struct rstate *s)
{
	uint32_t *idx = malloc((s->sm.n ? s->sm.n : 1) * sizeof *idx), n = 0;
	if (!idx)
		return;
	for (size_t i = 0; i < s->sm.n; i++) {
		const struct idx_entry *e = &s->sm.e[i];
		const struct idx_entry *d = idx_manifest_find(&s->dm, e->path);
		if (e->type == IDX_DIR)
			continue;
		/* landed this run, or DST had it already (as rsync: it goes too) */
		if (s->written[i] || ((s->change[i] == 0 || s->change[i] == IDX_META) && d &&
		                      !(d->flags & GONE) && d->type == e->type))
			idx[n++] = (uint32_t)i + s->shift;
	}
	if (n && landed_send(s, idx, n) < 0)
		log_err("cannot tell the sender which files landed; no source file is removed");
	free(idx);
}

/* CTL_RETRY, in frames of at most CTL_FRAME_MAX, indices ascending. */
static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

int recv_send_retry(struct rstate *s)
{
	if (!s->nmismatch)
		return 0;
	if (s->r->is_client) {   /* pulling: our own list for the next round */
		for (uint32_t k = 0; k < s->nmismatch; k++)
			sync_paths_add(s->r->retry, s->sm.e[s->mismatch[k] - s->shift].path);
		return 0;
	}
	qsort(s->mismatch, s->nmismatch, sizeof *s->mismatch, cmp_u32);
	const uint32_t per = (CTL_FRAME_MAX - 4) / 4;
	int rc = 0;
	for (uint32_t k = 0; rc == 0 && k < s->nmismatch; k += per) {
		uint32_t m = s->nmismatch - k < per ? s->nmismatch - k : per;
		uint8_t *b = malloc(4 + (size_t)m * 4);
		if (!b)
			return -ENOMEM;
		put_u32(b, m);
		for (uint32_t j = 0; j < m; j++)
			put_u32(b + 4 + 4 * j, s->mismatch[k + j]);
		rc = recv_ctl_send(s, CTL_RETRY, b, 4 + (size_t)m * 4);
		free(b);
	}
	return rc;
}
