/*
 * A ranked run: `mpirun -np N rdcp --sync SRC/ [host:]DST...`. N ranks, on
 * one node or several, each with SRC at the same path (a shared
 * filesystem), share one tree: rank 0 lists SRC's directories (names only)
 * and cuts them into windows of whole directories (sync/windows.c), about
 * four a rank; every rank takes the same windows, weighed by entries
 * (longest first, each to the least loaded rank), and runs its own as one
 * windowed run to its DST: DSTs named several times pair with the ranks in
 * turn (rank k with the (k mod n)th), and all name one tree, written at
 * once by their receivers (--ranked: DST's lock shared among them).
 *
 * Deletes are decided once: the first pass creates and sends with no
 * --delete; when every rank has reported (an allgather) and none failed
 * (codes 0 and 24 only), a second pass over the same windows deletes,
 * each window its own directories' extras, as a single run does. A rank
 * that fails, or dies (mpirun then ends the others: SIGTERM, as Ctrl-C),
 * means no deletes anywhere; DST holds old or new files, never a part of
 * one, and the next run sends what is missing.
 *
 * Rank 0 reports for all: one summary, one --json object with a "ranks"
 * array. Every rank returns the run's one exit code. Before anything is
 * sent, rkhold.c checks SRC and DST and holds DST; a file too large for a
 * rank's share goes in ranges (rksplit.c).
 *
 * MPI is reached through rdcp-mpi.so (mpi.h), loaded only here. The
 * windows, the index and the transports are the single run's.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/crypto.h"
#include "common/exitcode.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/client_int.h"
#include "sync/mpi/mpi.h"
#include "sync/ranks_int.h"
#include "sync/select/select.h"
#include "sync/wire/proto.h"

int sync_ranked(void)
{
	/* RDCP_MPI=1: a rank (a wrapper script between mpirun and rdcp);
	 * RDCP_MPI=0: never */
	const char *force = getenv("RDCP_MPI"), *size = getenv("OMPI_COMM_WORLD_SIZE");
	if (force && *force)
		return strcmp(force, "0") != 0;
	if (!size || !*size)
		return 0;
	/* Open MPI sets OMPI_COMM_WORLD_SIZE in every rank, and a program a
	 * rank starts inherits it: a rank is started by mpirun itself, or by
	 * its daemon on another node */
	char path[64], comm[32] = "";
	snprintf(path, sizeof path, "/proc/%d/comm", (int)getppid());
	FILE *f = fopen(path, "re");
	if (f) {
		if (!fgets(comm, sizeof comm, f))
			comm[0] = '\0';
		fclose(f);
	}
	comm[strcspn(comm, "\n")] = '\0';
	static const char *const launchers[] = { "mpirun", "mpiexec", "orterun", "orted",
	                                         "prterun", "prted" };
	for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++)
		if (!strcmp(comm, launchers[i]))
			return 1;
	return 0;
}

static int load(struct rk_mpi *m)
{
	char exe[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	const char *env = getenv("RDCP_MPI_SHIM");
	void *h = NULL;
	if (n <= 0)
		n = 0;
	exe[n] = '\0';
	char *sl = strrchr(exe, '/');
	if (sl)
		*sl = '\0';
	/* next to the program (a build), then PREFIX/lib/rdcp (installed) */
	const char *where[] = { "", "/../lib/rdcp" };
	for (size_t i = 0; !env && !h && i < sizeof where / sizeof *where; i++) {
		snprintf(path, sizeof path, "%s%s/rdcp-mpi.so", exe, where[i]);
		if (access(path, F_OK) == 0)
			/* GLOBAL: Open MPI's own plugins look for libmpi's symbols */
			h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	}
	if (env)
		h = dlopen(env, RTLD_NOW | RTLD_GLOBAL);
	rk_mpi_open_fn *open_fn = h ? (rk_mpi_open_fn *)dlsym(h, RDCP_MPI_OPEN) : NULL;
	if (!open_fn) {
		const char *e = dlerror();
		log_err("running under mpirun, but rdcp's MPI part (rdcp-mpi.so, next to %s/rdcp "
		        "or in its ../lib/rdcp) cannot be loaded: %s; build rdcp with Open MPI "
		        "(libopenmpi-dev) installed", exe, e ? e : "not found");
		return -1;
	}
	if (open_fn(m) < 0)
		return -1;
	if (m->abi != RDCP_MPI_ABI) {
		log_err("rdcp-mpi.so is of another rdcp (its interface %d, ours %d)", m->abi,
		        RDCP_MPI_ABI);
		m->abort(RD_EXIT_START);
	}
	return 0;
}

/* Why this run cannot be shared among ranks (rank 0 then runs it alone),
 * or NULL. The same answer on every rank: it reads the options and SRC. */
static const char *alone_why(const struct sync_opts *o)
{
	char *host, *path;
	if (o->nsrc > 1)
		return "several SRCs are not shared among ranks";
	if (sync_parse_endpoint(o->src, &host, &path) < 0)
		return "SRC cannot be read";
	int remote = host != NULL;
	free(host);
	free(path);
	if (remote)
		return "pulling (a remote SRC) is not shared among ranks";
	if (!(o->flags & SYNC_F_RECURSIVE))
		return "without -r (or -a) there is no tree to share";
	if (!sync_src_contents(o->src, o->flags))
		return "only a directory's contents are shared (SRC/ with a trailing slash, as "
		       "rsync's SRC/ copies the contents)";
	if (o->flags & SYNC_F_DRYRUN)
		return "a dry run (-n) is not shared";
	if (o->flags & SYNC_F_HARDLINKS)
		return "-H (a hard-link group crosses directories) is not shared";
	if (o->files_from)
		return "--files-from is not shared";
	if (o->max_delete >= 0)
		return "--max-delete (a limit for the whole run) is not shared";
	if ((o->flags & (SYNC_F_DELETE | SYNC_F_REMOVE_SOURCE)) ==
	    (SYNC_F_DELETE | SYNC_F_REMOVE_SOURCE))
		return "--delete with --remove-source-files is not shared";
	for (int i = 0; i < o->nrules; i++)
		if (o->rules[i].kind == SYNC_R_DIRMERGE)
			return "per-directory filter files (-F, dir-merge) are not shared";
	return NULL;
}

/* The windows as bytes: per window its directory count (u32), entries
 * (u64), then each directory, NUL-ended. NULL when out of memory. */
static char *encode(const struct wset *s, size_t *len)
{
	size_t n = 0;
	for (size_t i = 0; i < s->n; i++) {
		n += 12;
		for (size_t j = 0; j < s->w[i].ndirs; j++)
			n += strlen(s->w[i].dirs[j]) + 1;
	}
	char *b = malloc(n ? n : 1), *p = b;
	if (!b)
		return NULL;
	for (size_t i = 0; i < s->n; i++) {
		uint32_t nd = (uint32_t)s->w[i].ndirs;
		uint64_t e = s->w[i].entries;
		memcpy(p, &nd, 4);
		memcpy(p + 4, &e, 8);
		p += 12;
		for (size_t j = 0; j < nd; j++) {
			size_t l = strlen(s->w[i].dirs[j]) + 1;
			memcpy(p, s->w[i].dirs[j], l);
			p += l;
		}
	}
	*len = n;
	return b;
}

/* encode()'s bytes (rank 0's, the same on every rank) back. 0, -ENOMEM. */
static int decode(const char *b, size_t len, struct wset *s)
{
	const char *p = b, *end = b + len;
	size_t cap = 0;
	*s = (struct wset){ 0 };
	while (p + 12 <= end) {
		uint32_t nd;
		uint64_t e;
		memcpy(&nd, p, 4);
		memcpy(&e, p + 4, 8);
		p += 12;
		if (s->n == cap) {
			size_t c = cap ? 2 * cap : 64;
			struct wwin *g = realloc(s->w, c * sizeof *g);
			if (!g)
				goto nomem;
			s->w = g;
			cap = c;
		}
		struct wwin *w = &s->w[s->n++];
		*w = (struct wwin){ .entries = e, .number = (unsigned)s->n };
		if (!(w->dirs = calloc(nd ? nd : 1, sizeof *w->dirs)))
			goto nomem;
		for (uint32_t j = 0; j < nd && p < end; j++) {
			size_t l = strnlen(p, (size_t)(end - p));
			if (!(w->dirs[j] = strndup(p, l)))
				goto nomem;
			w->ndirs++;
			p += l + 1;
		}
	}
	return 0;
nomem:
	client_wset_free(s);
	return -ENOMEM;
}

/* Files of this size and more are shared by size, each sent by the rank
 * it falls to, apart from its directory's window: a directory of a few
 * huge files (a model's blobs) is not one rank's load. RDCP_TEST_BIG: the
 * tests' small files. */
#define RK_BIG ((uint64_t)64 << 20)

static uint64_t big_min(void)
{
	const char *t = getenv("RDCP_TEST_BIG");
	long long v = t ? strtoll(t, NULL, 10) : 0;
	return v > 0 ? (uint64_t)v : RK_BIG;
}

/* Rank 0's set to every rank (rank 0: ok < 0 when it has none to give:
 * all return -1). 0 or -1. */
static int share_set(struct ranked *k, struct wset *set, int ok)
{
	uint64_t len = 0;
	char *b = NULL;
	if (k->m.rank == 0) {
		size_t n = 0;
		b = ok < 0 ? NULL : encode(set, &n);
		len = b ? n : UINT64_MAX;
	}
	if (k->m.bcast(&len, sizeof len, 0) < 0)
		k->m.abort(RD_EXIT_PROTO);
	if (len == UINT64_MAX) {
		free(b);
		return -1;
	}
	if (k->m.rank != 0 && !(b = malloc(len ? len : 1)))
		k->m.abort(RD_EXIT_FILEIO);
	if (k->m.bcast(b, len, 0) < 0)
		k->m.abort(RD_EXIT_PROTO);
	if (k->m.rank != 0 && decode(b, len, set) < 0)
		k->m.abort(RD_EXIT_FILEIO);
	free(b);
	return 0;
}

/* Rank 0 lists the windows and the big files and gives them to all: 0,
 * or the exit code. */
static int share_windows(struct ranked *k, const struct sync_opts *o)
{
	int rc = 0;
	if (k->m.rank == 0) {
		rc = client_windows_all(o, o->src, (size_t)k->m.size, big_min(), &k->all, &k->big);
		if (rc < 0 && rc != -EINVAL)   /* (a bad filter: said) */
			log_err("listing the directories of %s: %s", o->src, strerror(-rc));
	}
	/* the code, and whether a directory of SRC lacks u+wx */
	int32_t v[2] = { rc == -EINVAL ? RD_EXIT_USAGE : rc < 0 ? RD_EXIT_SELECT : 0,
		         rc == 0 && k->all.ro_dirs };
	if (k->m.bcast(v, sizeof v, 0) < 0)
		k->m.abort(RD_EXIT_PROTO);
	if (v[0])
		return v[0];   /* the same on every rank */
	k->ro_dirs = v[1];
	if (share_set(k, &k->all, rc) < 0 || share_set(k, &k->big, rc) < 0)
		k->m.abort(RD_EXIT_FILEIO);   /* (rank 0 out of memory) */
	return 0;
}

static int heavier(const void *a, const void *b, void *all)
{
	const struct wset *s = all;
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	if (s->w[x].entries != s->w[y].entries)
		return s->w[x].entries > s->w[y].entries ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* This rank's share of set into mine: the heaviest first (by entries;
 * a big file's: its size), each to the least loaded rank (the lowest of
 * equals), then in the listing's order, a directory's window before its
 * subdirectories' where one rank has both; each one's rank into *owners
 * (malloc'd; NULL: not wanted). 0, -ENOMEM. */
static int pick_mine(const struct ranked *k, const struct wset *set, struct wset *mine,
                     int **owners)
{
	size_t n = set->n, *order = malloc((n ? n : 1) * sizeof *order);
	uint64_t *load = calloc((size_t)k->m.size, sizeof *load);
	int *owner = malloc((n ? n : 1) * sizeof *owner);
	int rc = -ENOMEM;
	*mine = (struct wset){ .w = malloc((n ? n : 1) * sizeof *mine->w) };
	if (!order || !load || !owner || !mine->w)
		goto out;
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	qsort_r(order, n, sizeof *order, heavier, (void *)set);
	for (size_t i = 0; i < n; i++) {
		int best = 0;
		for (int r = 1; r < k->m.size; r++)
			if (load[r] < load[best])
				best = r;
		owner[order[i]] = best;
		load[best] += set->w[order[i]].entries + 1;
	}
	for (size_t i = 0; i < n; i++)
		if (owner[i] == k->m.rank)
			mine->w[mine->n++] = set->w[i];   /* shared, not copied */
	rc = 0;
	if (owners) {
		*owners = owner;
		owner = NULL;
	}
out:
	free(order);
	free(load);
	free(owner);
	return rc;
}

/* The options of a pass: the first creates and sends (no --delete), the
 * second deletes as well. The copy's fwd is its own, with room for one
 * more; NULL when out of memory. */
static char **pass_opts(const struct ranked *k, const struct sync_opts *o,
                        struct sync_opts *p, int deletes, const char *dst)
{
	char **fwd = calloc((size_t)o->nfwd + 2, sizeof *fwd);
	/* pass 1 of a run with --delete: no deletes, no --force (which
	 * deletes a directory in the way); the receiver leaves what only a
	 * delete could replace (a full directory where SRC has a file) to
	 * pass 2, quietly; and (--ranked=later, a SRC with read-only
	 * directories too) not as root gives directories u+wx, pass 2 their
	 * modes */
	int later = !deletes && ((o->flags & SYNC_F_DELETE) || k->ro_dirs);
	if (!fwd)
		return NULL;
	*p = *o;
	p->nfwd = 0;
	for (int i = 0; i < o->nfwd; i++)
		if (deletes || (strncmp(o->fwd[i], "--delete", 8) &&
		                !(later && !strcmp(o->fwd[i], "--force"))))
			fwd[p->nfwd++] = o->fwd[i];
	fwd[p->nfwd++] = (char *)k->ranked[later];
	p->fwd = fwd;
	p->dst = dst;
	p->nsrc = 1;
	p->ranked = later ? 2 : 1;
	p->ranked_job = k->job;
	p->hosts = NULL;
	if (!deletes)
		p->flags &= ~(unsigned)(SYNC_F_DELETE | SYNC_F_DELETE_BEFORE | SYNC_F_DELETE_AFTER |
		                        SYNC_F_DELETE_EXCLUDED | SYNC_F_DELETE_DURING);
	if (later)
		p->flags &= ~(unsigned)SYNC_F_FORCE;
	return fwd;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The worst of two codes, as windows merge theirs: one that stops a run
 * over any, 23 over 24. */
int rk_worse(int have, int code)
{
	if (code && (!have || have == RD_EXIT_VANISHED || !client_window_goes_on((uint32_t)code)))
		return code;
	return have;
}

/* One run of files (n paths; --files-from: their directories made as
 * needed) to this rank's DST, in pass 1; for a split file's run, what it
 * is ("part:K/N" or "join", split as in sync_opts.ranked_split; NULL:
 * none). The exit code; the counts in *res. */
int rk_run_files(struct ranked *k, const struct sync_opts *o, char **files, size_t n,
                 const char *what, int split, struct sync_result *res,
                 struct sync_fails **fails, struct sync_paths *as_read)
{
	struct sync_opts p;
	char **fwd = pass_opts(k, o, &p, 0, k->dst[k->m.rank % k->ndst]), arg[80];
	if (k->addr && k->addr[k->m.rank % k->ndst])
		p.data_addr = k->addr[k->m.rank % k->ndst];
	int code = RD_EXIT_FILEIO;
	if (!fwd) {
		log_err("out of memory");
	} else {
		if (what) {   /* in place of pass_opts()' --ranked, later kept */
			snprintf(arg, sizeof arg, "--ranked=%s:%s%016" PRIx64, what,
			         p.ranked == 2 ? "later:" : "", k->job);
			fwd[p.nfwd - 1] = arg;
			p.ranked_split = split;
			p.ranked_nparts = (uint32_t)k->m.size;
		}
		fwd[p.nfwd++] = "--files-from=-";
		p.files_from = "-";
		p.files = files;
		p.nfiles = n;
		code = client_run(&p, NULL, res, fails, as_read);
	}
	free(fwd);
	return code;
}

/* The first pass's first part: this rank's big files, one run of them. */
static int send_big(struct ranked *k, const struct sync_opts *o, struct sync_result *res,
                    struct sync_fails **fails, struct sync_paths *as_read)
{
	char **files = calloc(k->mine_big.n, sizeof *files);
	if (!files) {
		log_err("out of memory");
		return RD_EXIT_FILEIO;
	}
	for (size_t i = 0; i < k->mine_big.n; i++)
		files[i] = k->mine_big.w[i].dirs[0];
	int code = rk_run_files(k, o, files, k->mine_big.n, NULL, 0, res, fails, as_read);
	free(files);
	return code;
}

/* b's counts, failures and transport into a's (one rank's runs). */
void rk_merge_run(struct sync_result *a, struct sync_fails **af, struct sync_result *b,
                      struct sync_fails *bf)
{
	size_t n;
	uint8_t *enc = bf && *af ? sync_fails_encode(*af, &n) : NULL;
	const char *why;
	if (enc && sync_fails_take(bf, enc, n, &why) == 0) {   /* b's first, then a's */
		sync_fails_free(*af);
		*af = bf;
		bf = NULL;
	} else if (bf && !*af) {
		*af = bf;
		bf = NULL;
	}
	free(enc);
	sync_fails_free(bf);
	result_add(a, b);
	a->vanished += b->vanished;
	a->ctl_tx += b->ctl_tx;
	a->ctl_rx += b->ctl_rx;
	a->wire += b->wire;
	a->hashed += b->hashed;
	if (!a->transport)
		a->transport = b->transport;
}

/* One pass of this rank's windows (none: nothing to do), then every
 * rank's record in k->rec. Returns the run's code so far: the worst. */
static int pass(struct ranked *k, const struct sync_opts *o, int deletes, int alone,
                struct sync_result *res, struct sync_fails **fails, struct sync_paths *as_read)
{
	struct sync_opts p;
	const char *dst = k->dst[k->m.rank % k->ndst];
	char **fwd = pass_opts(k, o, &p, deletes, dst);
	struct rk_rec me = { 0 };
	if (k->addr && k->addr[k->m.rank % k->ndst])
		p.data_addr = k->addr[k->m.rank % k->ndst];
	double t = now_s();
	int code = 0;
	*res = (struct sync_result){ 0 };
	*fails = NULL;
	if (!fwd) {
		log_err("out of memory");
		code = RD_EXIT_FILEIO;
		if (!deletes && !alone && (k->big.n || k->split.n))   /* as the others */
			k->m.abort(RD_EXIT_FILEIO);
	} else if (alone) {
		p.ranked = 0;   /* rank 0 alone: DST is its own, SRCs all */
		p.ranked_job = 0;
		p.nfwd--;
		p.nsrc = o->nsrc;
		if (k->m.rank == 0)
			code = client_run(&p, NULL, res, fails, as_read);
	} else {
		/* first the split files and the big files, shared by size, all
		 * landed before any window looks at their directories (else
		 * sent twice) */
		struct sync_result big = { 0 }, sp = { 0 };
		struct sync_fails *bigf = NULL, *spf = NULL;
		if (!deletes && k->split.n)
			code = rk_split_files(k, o, &sp, &spf, as_read);
		if (!deletes && k->mine_big.n) {
			struct sync_result r = { 0 };
			struct sync_fails *rf = NULL;
			code = rk_worse(code, send_big(k, o, &r, &rf, as_read));
			rk_merge_run(&big, &bigf, &r, rf);
		}
		rk_merge_run(&big, &bigf, &sp, spf);
		/* the big files' rows to their directories' windows */
		if (!deletes && (k->big.n || k->split.n) &&
		    (rk_shards_bigs(k) < 0 || k->m.barrier() < 0))
			k->m.abort(RD_EXIT_PROTO);
		if (k->mine.n && client_window_goes_on((uint32_t)code))
			code = rk_worse(code, client_run(&p, &k->mine, res, fails, as_read));
		/* the big files' failures first, then the windows' (one list) */
		rk_merge_run(res, fails, &big, bigf);
	}
	free(fwd);
	me.code = code;
	me.windows = (uint32_t)k->mine.n;
	result_put(me.done, res);
	me.vanished = res->vanished;
	me.total_size = res->total_size;
	memcpy(me.entries, res->entries, sizeof me.entries);
	me.flist_bytes = res->flist_bytes;
	me.ctl_tx = res->ctl_tx;
	me.ctl_rx = res->ctl_rx;
	me.wire = res->wire;
	me.rows_in = rk_shards_rows_in(k);
	me.hashed = res->hashed;
	me.secs = now_s() - t;
	snprintf(me.transport, sizeof me.transport, "%s", res->transport ? res->transport : "");
	gethostname(me.host, sizeof me.host - 1);
	if (k->m.allgather(&me, sizeof me, k->rec) < 0)
		k->m.abort(RD_EXIT_PROTO);
	int all = 0;
	for (int i = 0; i < k->m.size; i++)
		all = rk_worse(all, k->rec[i].code);
	return all;
}

/* The passes' records added up, into the report's result. */
static void add_up(const struct rk_rec *rec, int n, struct sync_result *t, int entries)
{
	for (int i = 0; i < n; i++) {
		const struct rk_rec *r = &rec[i];
		struct sync_result d;
		result_get(r->done, &d);
		result_add(t, &d);
		t->vanished += r->vanished;
		t->ctl_tx += r->ctl_tx;
		t->ctl_rx += r->ctl_rx;
		t->wire += r->wire;
		t->hashed += r->hashed;
		for (int j = 0; entries && j < SYNC_KINDS; j++)
			t->entries[j] += r->entries[j];
		if (entries) {
			t->total_size += r->total_size;
			t->flist_bytes += r->flist_bytes;
		}
		if (*r->transport)
			t->transport = *r->transport == 'r' ? "rdma" : "tcp";
	}
}

/* --json's "ranks": each rank's part of both passes. NULL when out of
 * memory (the object then has none). */
static char *ranks_json(const struct ranked *k, const struct rk_rec *one,
                        const struct rk_rec *two)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fputc('[', f);
	for (int i = 0; i < k->m.size; i++) {
		const struct rk_rec *a = &one[i], *b = two ? &two[i] : NULL;
		struct sync_result r = { 0 };   /* both passes' */
		add_up(a, 1, &r, 0);
		if (b)
			add_up(b, 1, &r, 0);
		char host[HOST_LEN + 1];
		snprintf(host, sizeof host, "%.*s", HOST_LEN, a->host);
		fprintf(f, "%s{\"rank\":%d,\"host\":", i ? "," : "", i);
		sync_json_str(f, host);
		fprintf(f, ",\"dst\":");
		sync_json_str(f, k->dst[i % k->ndst]);
		fprintf(f, ",\"windows\":%u,\"files\":%llu,\"bytes_sent\":%llu,\"deleted\":%llu,"
		        "\"errors\":%llu,\"hashed_bytes\":%llu,\"index_rows_in\":%llu,"
		        "\"seconds\":%.3f,\"exit_code\":%d}", a->windows,
		        (unsigned long long)r.files, (unsigned long long)r.bytes,
		        (unsigned long long)r.deleted, (unsigned long long)(r.errors + r.vanished),
		        (unsigned long long)r.hashed, (unsigned long long)a->rows_in,
		        a->secs + (b ? b->secs : 0), rk_worse(a->code, b ? b->code : 0));
	}
	fputc(']', f);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* --hosts=FILE:DST under mpirun: the DSTs, one a line ('[user@]host
 * [data-address]': one host named with several addresses takes as many
 * ranks, each of its connections on its own address). Rank 0 reads the
 * file (mpirun gives stdin to rank 0 alone; the file may be on its node
 * alone) into pairs "host:DST\0address\0" (the address "" when none). */
static int each_host(void *ctx, const char *host, const char *path, const char *addr)
{
	return fprintf(ctx, "%s:%s%c%s%c", host, path, '\0', addr ? addr : "", '\0') < 0 ? -1 : 0;
}

static int read_hosts(struct sync_opts *o, char **pairs, size_t *plen)
{
	FILE *f = open_memstream(pairs, plen);
	int code = f ? sync_hosts_read(o, each_host, f) : RD_EXIT_FILEIO;
	if (f && fclose(f) != 0 && !code)
		code = RD_EXIT_FILEIO;
	return code;
}

/* The --hosts pairs, rank 0's, on every rank: k->dst and k->addr. 0 or
 * the exit code (rank 0's, the same on every rank). */
static int share_hosts(struct ranked *k, struct sync_opts *o)
{
	char *pairs = NULL;
	size_t len = 0;
	int32_t code = k->m.rank == 0 ? read_hosts(o, &pairs, &len) : 0;
	uint64_t n = len;
	if (k->m.bcast(&code, sizeof code, 0) < 0)
		k->m.abort(RD_EXIT_PROTO);
	if (code) {
		free(pairs);
		return code;
	}
	if (k->m.bcast(&n, sizeof n, 0) < 0)
		k->m.abort(RD_EXIT_PROTO);
	if (k->m.rank != 0 && !(pairs = malloc(n + 1)))
		k->m.abort(RD_EXIT_FILEIO);
	if (k->m.bcast(pairs, n, 0) < 0)
		k->m.abort(RD_EXIT_PROTO);
	for (uint64_t i = 0; i < n; i++)
		k->ndst += !pairs[i];
	k->ndst /= 2;
	k->dst = calloc((size_t)k->ndst, sizeof *k->dst);
	k->addr = calloc((size_t)k->ndst, sizeof *k->addr);
	if (!k->dst || !k->addr)
		k->m.abort(RD_EXIT_FILEIO);
	const char *p = pairs;
	for (int i = 0; i < k->ndst; i++) {
		k->dst[i] = p;
		p += strlen(p) + 1;
		k->addr[i] = *p ? p : NULL;
		p += strlen(p) + 1;
	}
	k->hosts_buf = pairs;
	return 0;
}

/* --json: rank 0 gets every other rank's failures (mine, the list its
 * report would show) into *fails, and its files sent as read into
 * as_read: each rank's in turn, broadcast (the shim has no gather).
 * Every rank calls it. A rank's bytes: u64 the failures' CTL_FAILED
 * body's length, that body, then the paths, each ended by a NUL. */
static void gather_lists(struct ranked *k, struct sync_fails *mine, struct sync_fails **fails,
                         struct sync_paths *as_read)
{
	size_t fl = 0, len = 8;
	uint8_t *body = mine ? sync_fails_encode(mine, &fl) : NULL;
	for (size_t i = 0; i < as_read->n; i++)
		len += strlen(as_read->v[i]) + 1;
	uint64_t *lens = calloc((size_t)k->m.size, sizeof *lens);
	uint8_t *me = malloc(len + fl);
	if ((mine && !body) || !lens || !me)
		k->m.abort(RD_EXIT_FILEIO);   /* (out of memory: no rank could go on) */
	put_u64(me, fl);
	if (fl)
		memcpy(me + 8, body, fl);
	for (size_t i = 0, at = 8 + fl; i < as_read->n; i++) {
		size_t n = strlen(as_read->v[i]) + 1;
		memcpy(me + at, as_read->v[i], n);
		at += n;
	}
	len += fl;
	uint64_t l64 = len;
	if (k->m.allgather(&l64, sizeof l64, lens) < 0)
		k->m.abort(RD_EXIT_PROTO);
	for (int r = 1; r < k->m.size; r++) {
		uint8_t *b = r == k->m.rank ? me : malloc(lens[r]);
		if (!b || k->m.bcast(b, lens[r], r) < 0)
			k->m.abort(RD_EXIT_PROTO);
		uint64_t bl = get_u64(b);
		const char *why;
		if (k->m.rank == 0 && bl <= lens[r] - 8) {
			if (bl && !*fails)
				*fails = sync_fails_new();
			if (bl && sync_fails_take(*fails, b + 8, bl, &why) < 0)
				log_warn("--json: rank %d's failures are left out: its list %s", r, why);
			for (size_t at = 8 + bl; at < lens[r];) {
				const char *path = (const char *)b + at;
				size_t n = strnlen(path, lens[r] - at);
				if (n < lens[r] - at)
					sync_paths_add(as_read, path);
				at += n + 1;
			}
		}
		if (b != me)
			free(b);
	}
	free(me);
	free(body);
	free(lens);
}

int sync_ranks(struct sync_opts *o, int first_dst)
{
	struct ranked k = { 0 };
	/* the interrupt thread before MPI's own: they leave it the signals
	 * (mpirun's SIGTERM when another rank dies: stop the far side, 20) */
	client_interrupts();
	signal(SIGPIPE, SIG_IGN);
	if (load(&k.m) < 0)
		return RD_EXIT_START;
	/* the DSTs: every operand from the first remote one on (several
	 * host:DST), or the one DST */
	const char *one[1] = { o->dst };
	const char **dsts = one;
	if (o->hosts) {
		int c = share_hosts(&k, o);
		if (c) {   /* the same on every rank (rank 0 said it) */
			free(k.dst);
			free(k.addr);
			free(k.hosts_buf);
			k.m.finalize();
			return c;
		}
		dsts = k.dst;
	} else if (first_dst) {
		k.ndst = o->nsrc - first_dst + 1;
		dsts = calloc((size_t)k.ndst, sizeof *dsts);
		if (!dsts)
			k.m.abort(RD_EXIT_FILEIO);
		for (int i = first_dst; i < o->nsrc; i++)
			dsts[i - first_dst] = o->srcs[i];
		dsts[k.ndst - 1] = o->dst;
		o->nsrc = first_dst;
	} else {
		k.ndst = 1;
	}
	k.dst = dsts;
	k.rec = calloc((size_t)k.m.size, sizeof *k.rec);
	struct rk_rec *first = calloc((size_t)k.m.size, sizeof *first);
	if (!k.rec || !first)
		k.m.abort(RD_EXIT_FILEIO);
	/* every rank sees SRC (a remote one is the far side's to read) */
	char *sh, *sp;
	sync_parse_endpoint(o->src, &sh, &sp);
	int pull = sh != NULL;
	free(sh);
	free(sp);
	double t0 = sync_report_begin(k.m.rank == 0 ? o : &(struct sync_opts){ .quiet = 1 },
	                              !pull);
	int code = pull ? 0 : rk_check_src(&k, o->src);
	/* rank 0 decides whether it runs alone, for all */
	const char *why = NULL;
	int32_t alone = 0;
	if (!code && k.m.rank == 0 && (why = alone_why(o)))
		alone = 1;
	if (!code && k.m.bcast(&alone, sizeof alone, 0) < 0)
		k.m.abort(RD_EXIT_PROTO);
	/* the job's token: its receivers share DST's lock, another job's
	 * meet them there (sync/lock.c) */
	while (!code && k.m.rank == 0 && !k.job)
		if (cr_random(&k.job, sizeof k.job) < 0)
			k.m.abort(RD_EXIT_START);
	if (!code && k.m.bcast(&k.job, sizeof k.job, 0) < 0)
		k.m.abort(RD_EXIT_PROTO);
	snprintf(k.ranked[0], sizeof k.ranked[0], "--ranked=%016" PRIx64, k.job);
	snprintf(k.ranked[1], sizeof k.ranked[1], "--ranked=later:%016" PRIx64, k.job);
	if (!why && alone)
		why = "";   /* (rank 0's, said there) */
	if (why && k.m.rank == 0)
		log_warn("under mpirun, %s: rank 0 runs this alone, the other %s", why,
		         k.m.size == 2 ? "rank waits" : "ranks wait");
	if (!why && !code)
		code = rk_check_dst(&k, o);
	if (!why && !code)
		code = rk_hold_dst(&k, o);
	if (!why && !code)
		code = share_windows(&k, o);
	if (!why && !code &&
	    (rk_pick_split(&k, o) < 0 || pick_mine(&k, &k.all, &k.mine, &k.owner) < 0 ||
	     pick_mine(&k, &k.big, &k.mine_big, NULL) < 0))
		k.m.abort(RD_EXIT_FILEIO);
	/* the rows of this rank's directories that their homes have (with
	 * --no-index: none, on every rank) */
	if (!why && !code && !o->no_index) {
		rk_shards_pull(&k, o->src);
		o->known = rk_shards_known(&k);
	}
	struct sync_result res = { 0 }, total = { 0 };
	struct sync_fails *fails = NULL, *fails2 = NULL;
	struct sync_paths as_read = { 0 };
	int two = 0, ran = !code;   /* (code so far: the same on every rank) */
	if (!code) {
		int deletes = (o->flags & SYNC_F_DELETE) != 0;
		/* alone: one pass, the deletes in it, as a single run's */
		code = pass(&k, o, why != NULL, why != NULL, &res, &fails, &as_read);
		memcpy(first, k.rec, (size_t)k.m.size * sizeof *first);
		if ((deletes || k.ro_dirs) && !why) {
			if (code == 0 || code == RD_EXIT_VANISHED) {
				struct sync_result r2;
				two = 1;
				code = rk_worse(code, pass(&k, o, 1, 0, &r2, &fails2, &as_read));
			} else if (k.m.rank == 0 && deletes) {
				int bad = 0;   /* the first that failed (24 is not a failure) */
				while (bad < k.m.size - 1 &&
				       (!first[bad].code || first[bad].code == RD_EXIT_VANISHED))
					bad++;
				log_err("not deleting: rank %d (on %.*s) ended with code %d; nothing was "
				        "deleted anywhere", bad, HOST_LEN, first[bad].host,
				        first[bad].code);
			}
		}
		/* the directories whose rows their homes lack, to them */
		if (!why) {
			int c = first[k.m.rank].code;
			rk_shards_push(&k, !c || c == RD_EXIT_PARTIAL || c == RD_EXIT_VANISHED);
		}
		add_up(first, k.m.size, &total, 1);
		if (two)
			add_up(k.rec, k.m.size, &total, 0);
	}
	/* the list a single run's report would show: pass 1's, else pass 2's */
	struct sync_fails *shown = fails && fails->n ? fails : fails2 ? fails2 : fails;
	if (ran && o->json && !why)
		gather_lists(&k, shown, &shown, &as_read);
	if (k.m.rank == 0) {
		char *rj = o->json ? ranks_json(&k, first, two ? k.rec : NULL) : NULL;
		total.we_sent = !pull;
		total.fails = shown;   /* every rank's (gather_lists()) */
		total.as_read = &as_read;
		sync_report_hosts(o, &total, code, t0, "ranks", rj);
		free(rj);
	}
	if (shown != fails && shown != fails2)
		sync_fails_free(shown);   /* (made for the others' list) */
	sync_fails_free(fails);
	sync_fails_free(fails2);
	sync_paths_free(&as_read);
	rk_hold_end(&k);
	o->known = NULL;
	rk_shards_free(&k);
	free(k.owner);
	free(k.mine.w);
	free(k.mine_big.w);
	client_wset_free(&k.all);
	client_wset_free(&k.big);
	client_wset_free(&k.split);
	free(first);
	free(k.rec);
	if (dsts != one)
		free(dsts);
	free(k.addr);
	free(k.hosts_buf);
	fflush(stdout);
	k.m.finalize();
	return code;
}
