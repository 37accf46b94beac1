/*
 * A ranked run's index of SRC, one logical index in shards (docs/sync.md,
 * "One index"). Each node keeps its own SQLite index of SRC (its cache
 * directory; the ranks of one node share it), and each directory of SRC
 * has a home among the job's nodes, by rendezvous hashing of its path
 * over their names: a stable key, so the home does not depend on how many
 * ranks run or which rank scans the directory, and a node joining or
 * leaving moves only the directories it takes or held.
 *
 * - Before pass 1 (pull): a rank whose windows hold a directory homed on
 *   another node sends that home its digest of the directory's rows; the
 *   home answers with its own rows where they differ. They go to the
 *   rank's scans as known rows (idx_scan_opts.known): a file whose
 *   fingerprint matches is not read.
 * - After the big files (bigs): a big file's rows go from the rank that
 *   sent it to the rank whose window scans its directory, when that is on
 *   another node, so that no file is read twice in one job.
 * - After the passes (push): a directory whose rows now differ from its
 *   home's goes there whole; the home's index takes each row of a later
 *   version than its own, and drops a row of that directory only when its
 *   file is gone (idx_dirs_put()).
 *
 * Every rank calls each step (the pull: two rounds of two exchanges;
 * bigs and push: one), whatever it has to say; a rank without an index
 * says nothing, and with --no-index no step runs. Each step opens this
 * node's index and closes it before it returns: a connection kept open
 * while the same process's scans open and close the file would lose its
 * locks to their close() (POSIX), and SQLite's WAL with them. Rows are
 * trusted only as their own index trusted them (index/shard.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/wire.h"
#include "index/index.h"
#include "sync/ranks_int.h"

/* One directory of this rank's windows homed on another node. */
struct unit {
	char *dir;            /* "" for SRC itself */
	int home[2];          /* the rank that answers for its home node, and
	                         for the node that is its home when that one
	                         is not (-1: none): its home before a node
	                         joined */
	uint64_t mine;        /* this rank's digest of its rows, before */
	uint64_t theirs;      /* the home's */
};

struct rk_shards {
	char (*node)[HOST_LEN];   /* each rank's node */
	int *first;               /* the nodes: each one's first rank */
	uint64_t *seed;           /* and its name's XXH3-64 */
	int *count;               /* and its ranks */
	int nnodes;
	struct unit *u;
	size_t nu;
	struct idx_manifest known;
	const char *src;
	struct idx_dirs *db;      /* this node's index of SRC while a step
	                             runs, or NULL */
	uint64_t pulled, pushed;  /* rows */
};

static const char *node_name(char *buf, size_t len)
{
	const char *t = getenv("RDCP_TEST_NODE");   /* tests: nodes on one machine */
	if (t && *t)
		snprintf(buf, len, "%s", t);
	else if (gethostname(buf, len - 1) < 0)
		snprintf(buf, len, "?");
	buf[len - 1] = '\0';
	return buf;
}

/* The rank that answers for node i about dir: of its ranks, one picked
 * by dir's hash h. */
static int answerer(const struct ranked *k, int i, uint64_t h)
{
	const struct rk_shards *sh = k->sh;
	int at = (int)(h % (uint64_t)sh->count[i]);
	for (int r = sh->first[i]; r < k->m.size; r++)
		if (!strncmp(sh->node[r], sh->node[sh->first[i]], HOST_LEN) && at-- == 0)
			return r;
	return sh->first[i];
}

/* The homes of dir: the node whose name scores highest with it, then the
 * next (-1 when there is one node); each as the rank that answers. */
static void homes_of(const struct ranked *k, const char *dir, int home[2])
{
	const struct rk_shards *sh = k->sh;
	size_t dl = strlen(dir);
	uint64_t best[2] = { 0, 0 }, h = XXH3_64bits(dir, dl);
	int at[2] = { -1, -1 };
	for (int i = 0; i < sh->nnodes; i++) {
		uint64_t s = XXH3_64bits_withSeed(dir, dl, sh->seed[i]);
		if (at[0] < 0 || s > best[0]) {
			best[1] = best[0];
			at[1] = at[0];
			best[0] = s;
			at[0] = i;
		} else if (at[1] < 0 || s > best[1]) {
			best[1] = s;
			at[1] = i;
		}
	}
	for (int i = 0; i < 2; i++)
		home[i] = at[i] < 0 ? -1 : answerer(k, at[i], h);
}

/* The nodes, from every rank's name. 0 or -ENOMEM. */
static int nodes(struct rk_shards *sh, int size)
{
	sh->first = calloc((size_t)size, sizeof *sh->first);
	sh->seed = calloc((size_t)size, sizeof *sh->seed);
	sh->count = calloc((size_t)size, sizeof *sh->count);
	if (!sh->first || !sh->seed || !sh->count)
		return -ENOMEM;
	for (int r = 0; r < size; r++) {
		int i = 0;
		while (i < sh->nnodes && strncmp(sh->node[sh->first[i]], sh->node[r], HOST_LEN))
			i++;
		if (i == sh->nnodes) {
			sh->first[i] = r;
			sh->seed[i] = XXH3_64bits(sh->node[r], strnlen(sh->node[r], HOST_LEN));
			sh->nnodes++;
		}
		sh->count[i]++;
	}
	return 0;
}

static int same_node(const struct ranked *k, int a, int b)
{
	return !strncmp(k->sh->node[a], k->sh->node[b], HOST_LEN);
}

/* Everything one exchange sends: a writer for each rank. */
struct outbox {
	struct wire_wr *w;
	int n;
};

static int outbox_new(struct outbox *o, int n)
{
	o->n = n;
	o->w = calloc((size_t)n, sizeof *o->w);
	return o->w ? 0 : -ENOMEM;
}

/* Send o (freed), receive into from/flen (the caller frees). A writer
 * that failed (out of memory) sends nothing. */
static int post(const struct ranked *k, struct outbox *o, void **from, size_t *flen)
{
	void **to = calloc((size_t)o->n, sizeof *to);
	size_t *tlen = calloc((size_t)o->n, sizeof *tlen);
	int rc = -1;
	if (to && tlen) {
		for (int r = 0; r < o->n; r++) {
			to[r] = o->w[r].bad ? NULL : o->w[r].buf;
			tlen[r] = o->w[r].bad ? 0 : o->w[r].len;
		}
		rc = k->m.exchange(to, tlen, from, flen);
	}
	for (int r = 0; r < o->n; r++)
		free(o->w[r].buf);
	free(o->w);
	free(to);
	free(tlen);
	if (rc < 0)
		k->m.abort(RD_EXIT_PROTO);   /* (MPI failed: said) */
	return 0;
}

static void wr_str(struct wire_wr *w, const char *s)
{
	size_t l = strlen(s);
	wr_u16(w, (uint16_t)l);
	wr_bytes(w, s, l);
}

/* A string of r into buf (IDX_PATH_MAX + 1): 0, or -1 (r->bad set). */
static int rd_str(struct wire_rd *r, char *buf)
{
	uint16_t l = rd_u16(r);
	const uint8_t *p = rd_take(r, l);
	if (r->bad || (l && idx_path_check((const char *)p, l) < 0)) {
		r->bad = 1;
		return -1;
	}
	memcpy(buf, p, l);
	buf[l] = '\0';
	return 0;
}

/* Rows of b (len bytes) into the known rows. */
static void take_rows(struct rk_shards *sh, const uint8_t *b, size_t len, int from)
{
	struct idx_manifest m = { 0 };
	if (idx_rows_decode(b, len, &m) < 0) {
		log_warn("index rows from rank %d are not sound; its files are read here", from);
		idx_manifest_free(&m);
		return;
	}
	/* known is kept sorted: one row a path, the later version's (a big
	 * file's row, handed over after the pull, takes the place of the
	 * one its directory's home gave) */
	uint8_t *add = calloc(m.n ? m.n : 1, 1);
	for (size_t i = 0; add && i < m.n; i++) {
		struct idx_entry *e = (struct idx_entry *)idx_manifest_find(&sh->known, m.e[i].path);
		if (!e) {
			add[i] = 1;
			sh->pulled++;
		} else if (e->ctime_ns != m.e[i].ctime_ns ? e->ctime_ns < m.e[i].ctime_ns :
		           e->mtime_ns < m.e[i].mtime_ns) {
			uint8_t *c = e->chunks;   /* its place: the digests swapped in */
			char *path = e->path;
			*e = m.e[i];
			e->path = path;
			e->chunks = m.e[i].chunks;
			m.e[i].chunks = c;
			sh->pulled++;
		}
	}
	for (size_t i = 0; add && i < m.n; i++)
		if (add[i] && idx_manifest_add(&sh->known, &m.e[i]) < 0)
			break;
	free(add);
	idx_manifest_sort(&sh->known);
	idx_manifest_free(&m);
}

/* This node's index of SRC, for one step (NULL: none, said). */
static void db_open(struct rk_shards *sh)
{
	if (idx_dirs_open(sh->src, &sh->db) < 0)
		sh->db = NULL;
}

static void db_close(struct rk_shards *sh)
{
	idx_dirs_close(sh->db);
	sh->db = NULL;
}

/* This rank's units: the directories of its windows that another node
 * may know. */
static int units(struct ranked *k)
{
	struct rk_shards *sh = k->sh;
	size_t n = 0;
	for (size_t i = 0; i < k->mine.n; i++)
		n += k->mine.w[i].ndirs;
	if (!(sh->u = calloc(n ? n : 1, sizeof *sh->u)))
		return -ENOMEM;
	for (size_t i = 0; i < k->mine.n; i++)
		for (size_t j = 0; j < k->mine.w[i].ndirs; j++) {
			const char *d = k->mine.w[i].dirs[j];   /* "dir/", "/" */
			size_t l = strlen(d);
			char *dir = strndup(d, l && d[l - 1] == '/' ? l - 1 : l);
			if (!dir)
				return -ENOMEM;
			struct unit *u = &sh->u[sh->nu];
			homes_of(k, dir, u->home);
			if (same_node(k, u->home[0], k->m.rank) &&
			    (u->home[1] < 0 || same_node(k, u->home[1], k->m.rank))) {
				free(dir);
				continue;   /* (one node: nothing to ask) */
			}
			u->dir = dir;
			sh->nu++;
		}
	return 0;
}

/* Ask a unit's home (round 0), or its home before (round 1: when the
 * home had none of its rows, as after a node joined)? */
static int asks(const struct ranked *k, const struct unit *u, int round)
{
	int mine = same_node(k, u->home[0], k->m.rank);
	if (round == 0)
		return !mine;
	return u->home[1] >= 0 && !same_node(k, u->home[1], k->m.rank) &&
	       (mine ? !u->mine : !u->theirs);
}

/* One round of asks and answers: each unit asked its digest of rows, the
 * rows that differ taken as known. */
static void ask(struct ranked *k, int round)
{
	struct rk_shards *sh = k->sh;
	int size = k->m.size;
	struct outbox o;
	void **from = calloc((size_t)size, sizeof *from);
	size_t *flen = calloc((size_t)size, sizeof *flen);
	char *dir = malloc(IDX_PATH_MAX + 1);
	if (!from || !flen || !dir || outbox_new(&o, size) < 0)
		k->m.abort(RD_EXIT_FILEIO);
	for (size_t i = 0; sh->db && i < sh->nu; i++) {
		struct unit *u = &sh->u[i];
		if (!asks(k, u, round))
			continue;
		wr_str(&o.w[u->home[round]], u->dir);
		wr_u64(&o.w[u->home[round]], u->mine);
	}
	post(k, &o, from, flen);
	/* the answers: per ask this node's digest, then the rows that differ */
	if (outbox_new(&o, size) < 0)
		k->m.abort(RD_EXIT_FILEIO);
	for (int r = 0; r < size; r++) {
		struct wire_rd rd = { from[r], (const uint8_t *)from[r] + flen[r], 0 };
		struct idx_manifest rows = { 0 };
		while (rd.p < rd.end && !rd.bad) {
			struct idx_manifest these = { 0 };
			uint64_t theirs = 0, ours = 0;
			if (rd_str(&rd, dir) < 0)
				break;
			theirs = rd_u64(&rd);
			if (!sh->db || idx_dirs_rows(sh->db, dir, NULL, &ours) < 0)
				ours = 0;
			if (ours && ours != theirs && idx_dirs_rows(sh->db, dir, &these, &ours) < 0)
				ours = 0;
			for (size_t i = 0; ours && ours != theirs && i < these.n; i++)
				if (idx_manifest_add(&rows, &these.e[i]) < 0)
					o.w[r].bad = 1;
			idx_manifest_free(&these);
			wr_u64(&o.w[r], ours);
		}
		if (rd.bad)   /* (an ask we cannot read: no answer at all) */
			o.w[r].bad = 1;
		uint8_t *b = NULL;
		size_t bl = 0;
		if (flen[r] && idx_rows_encode(rows.e, rows.n, &b, &bl) == 0)
			wr_bytes(&o.w[r], b, bl);
		else if (flen[r])
			o.w[r].bad = 1;
		free(b);
		idx_manifest_free(&rows);
		free(from[r]);
		from[r] = NULL;
	}
	post(k, &o, from, flen);
	/* the answers to this rank's asks, in the order asked, node by node */
	for (int r = 0; r < size; r++) {
		if (!flen[r])
			continue;
		struct wire_rd rd = { from[r], (const uint8_t *)from[r] + flen[r], 0 };
		for (size_t i = 0; i < sh->nu && !rd.bad; i++) {
			struct unit *u = &sh->u[i];
			if (u->home[round] != r || !asks(k, u, round))
				continue;
			uint64_t d = rd_u64(&rd);
			if (round == 0)
				u->theirs = d;
		}
		if (!rd.bad)
			take_rows(sh, rd.p, (size_t)(rd.end - rd.p), r);
		free(from[r]);
	}
	free(from);
	free(flen);
	free(dir);
}

int rk_shards_pull(struct ranked *k, const char *src)
{
	struct rk_shards *sh = k->sh = calloc(1, sizeof *k->sh);
	if (!sh || !(sh->node = calloc((size_t)k->m.size, sizeof *sh->node)))
		k->m.abort(RD_EXIT_FILEIO);
	sh->src = src;
	char me[HOST_LEN];
	if (k->m.allgather(node_name(me, sizeof me), HOST_LEN, sh->node) < 0)
		k->m.abort(RD_EXIT_PROTO);
	if (nodes(sh, k->m.size) < 0 || units(k) < 0)
		k->m.abort(RD_EXIT_FILEIO);
	if (sh->nnodes > 1)   /* (one node: nothing to ask or answer) */
		db_open(sh);   /* (none: nothing to give or take) */
	for (size_t i = 0; sh->db && i < sh->nu; i++)
		if (idx_dirs_rows(sh->db, sh->u[i].dir, NULL, &sh->u[i].mine) < 0)
			sh->u[i].mine = 0;
	ask(k, 0);
	ask(k, 1);
	db_close(sh);
	return 0;
}

/* Every directory of the windows, with its window's rank, sorted. */
struct dirwin {
	const char *dir;   /* FILES' form: "dir/", "/" */
	int rank;
};

static int dirwin_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dirwin *)a)->dir, ((const struct dirwin *)b)->dir);
}

static struct dirwin *dirwins(const struct ranked *k, size_t *n)
{
	size_t c = 0;
	for (size_t i = 0; i < k->all.n; i++)
		c += k->all.w[i].ndirs;
	struct dirwin *v = malloc((c ? c : 1) * sizeof *v);
	if (!v)
		return NULL;
	*n = 0;
	for (size_t i = 0; i < k->all.n; i++)
		for (size_t j = 0; j < k->all.w[i].ndirs; j++)
			v[(*n)++] = (struct dirwin){ k->all.w[i].dirs[j], k->owner[i] };
	qsort(v, *n, sizeof *v, dirwin_cmp);
	return v;
}

/* The rank whose window holds the directory of path (a big file), or -1. */
static int window_owner(const struct dirwin *v, size_t n, const char *path)
{
	const char *sl = strrchr(path, '/');
	char key[IDX_PATH_MAX + 2];
	size_t dl = sl ? (size_t)(sl - path) : 0;
	if (dl > IDX_PATH_MAX)
		return -1;
	memcpy(key, path, dl);
	snprintf(key + dl, sizeof key - dl, "/");
	struct dirwin want = { key, 0 };
	const struct dirwin *f = bsearch(&want, v, n, sizeof *v, dirwin_cmp);
	return f ? f->rank : -1;
}

int rk_shards_bigs(struct ranked *k)
{
	struct rk_shards *sh = k->sh;
	int size = k->m.size;
	if (!sh)
		return 0;   /* --no-index: on every rank */
	if (sh->nnodes > 1 && k->mine_big.n)
		db_open(sh);
	struct outbox o;
	void **from = calloc((size_t)size, sizeof *from);
	size_t *flen = calloc((size_t)size, sizeof *flen);
	struct idx_manifest *rows = calloc((size_t)size, sizeof *rows);
	if (!from || !flen || !rows || outbox_new(&o, size) < 0)
		k->m.abort(RD_EXIT_FILEIO);
	size_t nv = 0;
	struct dirwin *v = sh->db && k->mine_big.n ? dirwins(k, &nv) : NULL;
	for (size_t i = 0; v && i < k->mine_big.n; i++) {
		const char *path = k->mine_big.w[i].dirs[0];
		int to = window_owner(v, nv, path);
		if (to < 0 || same_node(k, to, k->m.rank))
			continue;
		char *dir = strndup(path, strrchr(path, '/') ? (size_t)(strrchr(path, '/') - path) : 0);
		struct idx_manifest m = { 0 };
		uint64_t dg;
		if (dir && idx_dirs_rows(sh->db, dir, &m, &dg) == 0)
			for (size_t j = 0; j < m.n; j++)
				if (!strcmp(m.e[j].path, path))
					idx_manifest_add(&rows[to], &m.e[j]);
		idx_manifest_free(&m);
		free(dir);
	}
	free(v);
	db_close(sh);
	for (int r = 0; r < size; r++) {
		uint8_t *b = NULL;
		size_t bl = 0;
		if (rows[r].n && idx_rows_encode(rows[r].e, rows[r].n, &b, &bl) == 0)
			wr_bytes(&o.w[r], b, bl);
		free(b);
		idx_manifest_free(&rows[r]);
	}
	free(rows);
	post(k, &o, from, flen);
	for (int r = 0; r < size; r++) {
		if (flen[r])
			take_rows(sh, from[r], flen[r], r);
		free(from[r]);
	}
	free(from);
	free(flen);
	return 0;
}

int rk_shards_push(struct ranked *k, int ran)
{
	struct rk_shards *sh = k->sh;
	int size = k->m.size;
	if (!sh)
		return 0;   /* --no-index: on every rank */
	struct outbox o;
	void **from = calloc((size_t)size, sizeof *from);
	size_t *flen = calloc((size_t)size, sizeof *flen);
	if (!from || !flen || outbox_new(&o, size) < 0)
		k->m.abort(RD_EXIT_FILEIO);
	/* per home: this rank's stamp, then each directory whose rows differ
	 * from the home's, with them (only when this rank's windows all ran:
	 * else its rows may be older than the home's; a home keeps a row of
	 * its own of a later version, and any of a file still there) */
	if (ran && sh->nu)
		db_open(sh);
	int64_t stamp = sh->db ? idx_dirs_stamp(sh->db) : 0;
	for (size_t i = 0; sh->db && stamp > 0 && i < sh->nu; i++) {
		struct unit *u = &sh->u[i];
		struct wire_wr *w = &o.w[u->home[0]];
		struct idx_manifest m = { 0 };
		uint64_t now = 0;
		uint8_t *b = NULL;
		size_t bl = 0;
		if (same_node(k, u->home[0], k->m.rank))
			continue;   /* (its home's index is this node's) */
		if (idx_dirs_rows(sh->db, u->dir, &m, &now) == 0 && now && now != u->theirs &&
		    idx_rows_encode(m.e, m.n, &b, &bl) == 0) {
			if (!w->len)
				wr_u64(w, (uint64_t)stamp);
			wr_str(w, u->dir);
			wr_u32(w, (uint32_t)bl);
			wr_bytes(w, b, bl);
			sh->pushed += m.n;
		}
		free(b);
		idx_manifest_free(&m);
	}
	db_close(sh);
	post(k, &o, from, flen);
	char *dir = malloc(IDX_PATH_MAX + 1);
	int got = 0;
	for (int r = 0; r < size; r++)
		got |= flen[r] != 0;
	if (got)
		db_open(sh);
	for (int r = 0; r < size; r++) {
		struct wire_rd rd = { from[r], (const uint8_t *)from[r] + flen[r], 0 };
		int64_t theirs = flen[r] ? (int64_t)rd_u64(&rd) : 0;
		while (dir && sh->db && rd.p < rd.end && !rd.bad) {
			struct idx_manifest m = { 0 };
			if (rd_str(&rd, dir) < 0)
				break;
			uint32_t bl = rd_u32(&rd);
			const uint8_t *b = rd_take(&rd, bl);
			if (rd.bad || idx_rows_decode(b, bl, &m) < 0) {
				log_warn("index rows from rank %d are not sound; not kept", r);
				idx_manifest_free(&m);
				break;
			}
			idx_dirs_put(sh->db, dir, m.e, m.n, theirs);   /* (said) */
			idx_manifest_free(&m);
		}
		free(from[r]);
	}
	db_close(sh);
	free(dir);
	free(from);
	free(flen);
	return 0;
}

void rk_shards_free(struct ranked *k)
{
	struct rk_shards *sh = k->sh;
	if (!sh)
		return;
	for (size_t i = 0; i < sh->nu; i++)
		free(sh->u[i].dir);
	free(sh->u);
	free(sh->node);
	free(sh->first);
	free(sh->seed);
	free(sh->count);
	idx_manifest_free(&sh->known);
	idx_dirs_close(sh->db);
	free(sh);
	k->sh = NULL;
}

const struct idx_manifest *rk_shards_known(const struct ranked *k)
{
	return k->sh ? &k->sh->known : NULL;
}

uint64_t rk_shards_rows_in(const struct ranked *k)
{
	return k->sh ? k->sh->pulled : 0;
}
