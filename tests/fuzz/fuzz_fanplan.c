/* Fuzz target: what a fan-out's hub takes from its hosts (sync/fanout/hub.c): each
 * host's PLAN, CHUNKS and CHUNKS_END (peer input: a host may lie), and the
 * union it asks the sender for. The input is a series of records: host
 * (1, of two), frame type (1), length (2), that many bytes. A host whose
 * frames are refused is left out, as the hub leaves it out. Whatever
 * union is made must be what the sender accepts (its own decoders), and
 * must ask for every chunk any host that finished its plan lacks. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "sync/fanout/fanout_int.h"
#include "tests/fuzz/fixed_manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct idx_manifest fm;

/* The union, as the sender reads it. */
struct got {
	uint32_t *plan, nplan;
	struct chunk_map *maps;
	int ended;
};

static int take(void *ctx, uint8_t type, const uint8_t *p, size_t n)
{
	struct got *g = ctx;
	const char *why = NULL;
	if (g->ended)
		abort();
	if (type == CTL_PLAN) {
		if (g->plan || n < 4 || (n - 4) / 4 != get_u32(p) || n % 4)
			abort();
		g->nplan = get_u32(p);
		g->plan = malloc((size_t)(g->nplan + 1) * 4);
		g->maps = calloc(g->nplan + 1, sizeof *g->maps);
		if (!g->plan || !g->maps)
			abort();
		for (uint32_t k = 0; k < g->nplan; k++) {
			g->plan[k] = get_u32(p + 4 + 4 * k);
			if (g->plan[k] >= fm.n || fm.e[g->plan[k]].type != IDX_REG ||
			    (k && g->plan[k] <= g->plan[k - 1]))
				abort();   /* the sender would refuse it */
		}
		return 0;
	}
	if (!g->plan)
		abort();
	if (type == CTL_CHUNKS) {
		if (chunks_decode(p, n, &fm, g->plan, g->nplan, g->maps, &why) < 0)
			abort();
		return 0;
	}
	if (type != CTL_CHUNKS_END || n || chunks_complete(g->maps, g->nplan, &why) < 0)
		abort();
	g->ended = 1;
	return 0;
}

static int pos_of(const uint32_t *plan, uint32_t n, uint32_t i)
{
	for (uint32_t k = 0; k < n; k++)
		if (plan[k] == i)
			return (int)k;
	return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fm.n) {
		fm_add(&fm, "", IDX_DIR, 0);
		fm_add(&fm, "big", IDX_REG, 9u << 20);      /* 3 chunks, the last short */
		fm_add(&fm, "d", IDX_DIR, 0);
		fm_add(&fm, "huge", IDX_REG, (uint64_t)70 << 30);   /* over one frame's chunks */
		fm_add(&fm, "mid", IDX_REG, 100000);        /* one chunk */
		fm_add(&fm, "small", IDX_REG, 100);         /* in the archive: no map */
	}
	struct fhost h[2] = { { 0 } };
	struct fan f = { .m = fm, .h = h, .n = 2 };
	int done[2] = { 0, 0 };
	while (size >= 4) {
		int k = data[0] & 1;
		uint8_t type = data[1];
		size_t n = get_u16(data + 2);
		data += 4;
		size -= 4;
		n = n < size ? n : size;
		if (!done[k] && h[k].pos == 0) {
			const char *why = NULL;
			int rc = fan_plan_take(&f, &h[k], type, data, n, &why);
			if (rc == -EPROTO && !why)
				abort();
			if (rc < 0)
				h[k].pos = -1;   /* refused: left out */
			else if (rc == 1)
				done[k] = 1;
		}
		data += n;
		size -= n;
	}
	for (int k = 0; k < 2; k++)
		if (!done[k])
			h[k].pos = -1;
	struct got g = { 0 };
	uint32_t count = 0;
	if (fan_union(&f, take, &g, &count) < 0 || !g.ended || count != g.nplan)
		abort();
	/* every chunk a host lacks is asked for */
	for (int k = 0; k < 2; k++) {
		for (uint32_t j = 0; done[k] && j < h[k].nplan; j++) {
			int u = pos_of(g.plan, g.nplan, h[k].plan[j]);
			const struct chunk_map *mine = &h[k].maps[j], *all = u >= 0 ? &g.maps[u] : NULL;
			if (!all || (!mine->how && all->how))
				abort();
			for (uint32_t c = 0; mine->how && all->how && c < mine->n; c++)
				if (mine->how[c] != CH_HAVE && all->how[c] != CH_WHOLE)
					abort();
		}
		for (uint32_t j = 0; h[k].maps && j < h[k].nplan; j++)
			chunk_map_free(&h[k].maps[j]);
		free(h[k].maps);
		free(h[k].plan);
	}
	for (uint32_t j = 0; g.maps && j < g.nplan; j++)
		chunk_map_free(&g.maps[j]);
	free(g.maps);
	free(g.plan);
	return 0;
}
