/*
 * Fan-out: rdcp SRC host1:DST host2:DST ... (or --hosts=FILE:DST). Every
 * host becomes a mirror of SRC while SRC is read and sent once.
 *
 * The far sides are ordinary receivers (`rdcp --server`, all started at
 * once), given --relay. Our sender is the ordinary one too (send.c): it
 * talks, over a socketpair, to a hub that plays one receiver to it and
 * speaks to every host:
 *
 *   sender --ctl-- hub --ctl-- host 1 .. host N     (one agent thread each)
 *   sender ==data==> host 1 ==> host 2 ==> ... ==> host N
 *
 * The hub hands the sender's manifest to every host; each host plans
 * against its own DST and index; the hub asks the sender for the union (a
 * chunk one host lacks goes to all, and the others drop it); the hosts
 * that need anything form a chain, each forwarding every data message to
 * the next as it comes (relay.c). A host that fails or dies is cut out:
 * the ones before it finish; the ones after it, having lost their feed,
 * are run again in a second round that sends only what they still lack.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "common/wire.h"
#include "sync/sync_int.h"

#define FAN_ROUNDS 2   /* the hosts after a failed one get one more round */

/* A host's stage in a round, as its agent reaches it. */
enum { H_START, H_PLANNED, H_DATA, H_END };

struct fhost {
	const struct fan_target *t;
	struct fan *fan;
	char addr[256];            /* where its data connections go (IP literal) */
	pid_t pid;
	struct ctl c;
	struct role r;             /* for sync_recv(): frames counted */
	pthread_mutex_t wmu;       /* writes to c once the agent reads only */
	pthread_t th;
	int stage, pos;            /* H_*; its place in the chain (-1: none) */
	uint32_t *plan, nplan;
	struct hmap {              /* CHUNKS: one planned file's chunk kinds */
		uint32_t idx, n;
		uint8_t *how;
	} *maps;
	uint32_t nmaps;
	struct ctl_data cd;        /* its CTL_DATA */
	int next;                  /* the host it forwards to (-1: last) */
	int relay_rc;              /* its CTL_RELAY answer: 0 or -errno */
	struct sync_result res;
	int got_result, dead;      /* a DONE or ERROR came; the channel died first */
	int code;                  /* exit code of this round (0: all well) */
	char why[256];             /* what went wrong, one phrase */
};

struct fan {
	const struct sync_opts *o;
	struct sync_opts ho;       /* o, with --relay for the hosts */
	struct fhost *h;
	int n;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct frame { uint8_t type; size_t n; uint8_t *p; } *fr;   /* the sender's,
	                             READY to MANIFEST_END, for every host */
	int nfr, fr_state;         /* 0 not yet, 1 all there, -1 the sender failed */
	uint64_t mcount;           /* entries in the manifest */
	int linked;                /* the chain is set: agents send CTL_RELAY */
	int *chain, nchain;
	struct ctl sc;             /* the hub's end of the sender's channel */
	pthread_mutex_t smu;       /* writes to sc (agents send PROGRESS) */
	int progress_host;         /* whose landed count the sender shows */
};

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

/* A host's -v/-i lines, each after its name. */
static void print_lines(const struct fhost *h, const uint8_t *p, size_t n)
{
	pthread_mutex_lock(&out_mu);
	int bol = 1;
	for (size_t i = 0; i < n; i++) {
		if (bol)
			printf("%s: ", h->t->host);
		if ((p[i] < 0x20 && p[i] != '\n' && p[i] != '\t') || p[i] == 0x7f)
			printf("\\%03o", p[i]);
		else
			putchar(p[i]);
		bol = p[i] == '\n';
	}
	if (!bol)
		putchar('\n');
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
}

static void set_stage(struct fan *f, struct fhost *h, int stage)
{
	pthread_mutex_lock(&f->mu);
	h->stage = stage;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static int hsend(struct fhost *h, uint8_t type, const void *p, size_t n)
{
	pthread_mutex_lock(&h->wmu);
	int rc = ctl_send(&h->c, type, p, n);
	pthread_mutex_unlock(&h->wmu);
	return rc;
}

static void host_error(struct fhost *h, int code, const char *text)
{
	pthread_mutex_lock(&h->wmu);
	ctl_error(&h->c, code, text);
	pthread_mutex_unlock(&h->wmu);
}

static int bsearch_u32(const uint32_t *v, uint32_t n, uint32_t x)
{
	uint32_t lo = 0, hi = n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (v[mid] == x)
			return 1;
		if (v[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

static void fail(struct fhost *h, int code, const char *why)
{
	if (!h->code)
		h->code = code;
	if (!h->why[0])
		snprintf(h->why, sizeof h->why, "%s", why);
}

/* A frame that needs no answer: lines, landed counts, an ERROR or DONE
 * (the end). 1 taken, 0 not one of those, -1 the end came. */
static int take_common(struct fan *f, struct fhost *h, uint8_t type, size_t n)
{
	if (type == CTL_LOG) {
		print_lines(h, h->c.buf, n);
		return 1;
	}
	if (type == CTL_PROGRESS && n == 16) {
		if (f->progress_host == h - f->h) {
			pthread_mutex_lock(&f->smu);
			ctl_send(&f->sc, CTL_PROGRESS, h->c.buf, n);
			pthread_mutex_unlock(&f->smu);
		}
		return 1;
	}
	if (type == CTL_DONE && n == RESULT_LEN) {
		h->got_result = 1;
		if (result_get(h->c.buf, &h->res) < 0)
			fail(h, RD_EXIT_PROTO, "its result has an exit code over 255");
		else if (h->res.code)
			fail(h, (int)h->res.code, "it reported errors (see above)");
		return -1;
	}
	if (type == CTL_ERROR) {
		char prefix[300];
		h->got_result = 1;
		snprintf(prefix, sizeof prefix, "%s: ", h->t->label);
		fail(h, (int)sync_peer_error(&h->c, n, prefix), "it stopped (see above)");
		return -1;
	}
	return 0;
}

/* The next frame take_common() does not take: 0 with it in h->c.buf, -1
 * at the host's end (said in h). */
static int next_frame(struct fan *f, struct fhost *h, uint8_t *type, size_t *n)
{
	for (;;) {
		int rc = sync_recv(&h->r, "receiver", type, n);
		if (rc < 0) {
			h->dead = !h->got_result;
			fail(h, rc == -ETIME ? RD_EXIT_TIMEOUT : RD_EXIT_CONN,
			     rc == -ECONNRESET ? "the connection to it was lost" : strerror(-rc));
			return -1;
		}
		int t = take_common(f, h, *type, *n);
		if (t < 0)
			return -1;
		if (!t)
			return 0;
	}
}

static void proto_fail(struct fhost *h, const char *what)
{
	log_err("%s: %s", h->t->label, what);
	fail(h, RD_EXIT_PROTO, what);
	ctl_error(&h->c, RD_EXIT_PROTO, what);
}

/* PLAN, then CHUNKS* and CHUNKS_END: what this host lacks. 0, or -1. */
static int read_plan(struct fan *f, struct fhost *h)
{
	uint8_t type;
	size_t n;
	if (next_frame(f, h, &type, &n) < 0)
		return -1;
	const uint8_t *b = h->c.buf;
	if (type != CTL_PLAN || n < 4 || n % 4 || (n - 4) / 4 != get_u32(b)) {
		proto_fail(h, "its plan is malformed");
		return -1;
	}
	h->nplan = get_u32(b);
	if (!(h->plan = malloc((size_t)(h->nplan ? h->nplan : 1) * 4)))
		return fail(h, RD_EXIT_FILEIO, "out of memory"), -1;
	for (uint32_t k = 0; k < h->nplan; k++) {
		h->plan[k] = get_u32(b + 4 + 4 * k);
		if (h->plan[k] >= f->mcount || (k && h->plan[k] <= h->plan[k - 1])) {
			proto_fail(h, "its plan asks for an entry twice, out of order, or past "
			           "the file list");
			return -1;
		}
	}
	for (;;) {
		if (next_frame(f, h, &type, &n) < 0)
			return -1;
		b = h->c.buf;
		if (type == CTL_CHUNKS_END && n == 0)
			return 0;
		uint32_t idx = n >= 12 ? get_u32(b) : 0, first = n >= 12 ? get_u32(b + 4) : 0;
		uint32_t cnt = n >= 12 ? get_u32(b + 8) : 0, nrec = 0;
		for (uint32_t k = 0; k < cnt && 12 + k < n; k++)
			nrec += b[12 + k] == CH_BLOCKS;
		struct hmap *m = h->nmaps ? &h->maps[h->nmaps - 1] : NULL;
		int cont = m && m->idx == idx && first == m->n;
		if (type != CTL_CHUNKS || n < 12 || cnt < 1 || cnt > SYNC_CHUNKS_PER_FRAME ||
		    n != 12 + (size_t)cnt + (size_t)nrec * SYNC_BLOCK_REC ||
		    (!cont && first != 0) || !bsearch_u32(h->plan, h->nplan, idx)) {
			proto_fail(h, "its list of chunks to send is malformed");
			return -1;
		}
		if (!cont) {
			struct hmap *nm = realloc(h->maps, (h->nmaps + 1) * sizeof *nm);
			if (!nm)
				return fail(h, RD_EXIT_FILEIO, "out of memory"), -1;
			h->maps = nm;
			m = &nm[h->nmaps++];
			*m = (struct hmap){ .idx = idx };
		}
		uint8_t *how = realloc(m->how, (size_t)m->n + cnt);
		if (!how)
			return fail(h, RD_EXIT_FILEIO, "out of memory"), -1;
		m->how = how;
		for (uint32_t k = 0; k < cnt; k++)
			how[m->n + k] = b[12 + k] > CH_WHOLE ? CH_WHOLE : b[12 + k];
		m->n += cnt;
	}
}

/* One host's conversation, from HELLO to its DONE. */
static void *agent_main(void *arg)
{
	struct fhost *h = arg;
	struct fan *f = h->fan;
	const char *path = h->t->path;
	uint8_t type;
	size_t n;
	if (hello_send(&h->c, ROLE_RECEIVER, &f->ho, &path, 1, "") < 0 ||
	    (f->o->files_from && sync_files_send(&h->c, f->o) < 0)) {
		h->dead = 1;
		fail(h, RD_EXIT_START, "could not start rdcp there");
		goto end;
	}
	pthread_mutex_lock(&f->mu);
	while (!f->fr_state)
		pthread_cond_wait(&f->cv, &f->mu);
	pthread_mutex_unlock(&f->mu);
	for (int k = 0; k < f->nfr; k++)
		if (ctl_send(&h->c, f->fr[k].type, f->fr[k].p, f->fr[k].n) < 0)
			break;
	if (f->fr_state < 0) {   /* the sender failed: the host says its part */
		while (next_frame(f, h, &type, &n) == 0)
			;
		goto end;
	}
	if (read_plan(f, h) < 0)
		goto end;
	set_stage(f, h, H_PLANNED);
	if (h->nplan) {   /* where it listens (a dry run plans nothing) */
		if (next_frame(f, h, &type, &n) < 0)
			goto end;
		if (type != CTL_DATA || ctl_data_decode(h->c.buf, n, &h->cd) < 0 ||
		    (*h->cd.addr && !rsh_is_ip(h->cd.addr))) {
			proto_fail(h, "its data-connection message is malformed");
			goto end;
		}
		set_stage(f, h, H_DATA);
		pthread_mutex_lock(&f->mu);
		while (!f->linked)
			pthread_cond_wait(&f->cv, &f->mu);
		pthread_mutex_unlock(&f->mu);
		if (h->pos >= 0) {   /* CTL_RELAY: the next host, or none */
			uint8_t msg[2 + 32 + 256];
			size_t len = 0;
			if (h->next >= 0) {
				const struct fhost *nx = &f->h[h->next];
				size_t al = strlen(nx->addr);
				put_u16(msg, nx->cd.port);
				memcpy(msg + 2, nx->cd.key, 32);
				memcpy(msg + 34, nx->addr, al);
				len = 34 + al;
			}
			hsend(h, CTL_RELAY, msg, len);
			explicit_bzero(msg, sizeof msg);
		}
	}
	while (next_frame(f, h, &type, &n) == 0) {
		if (type == CTL_RELAY && n == 4) {
			h->relay_rc = -(int)get_u32(h->c.buf);
			if (h->relay_rc && h->next >= 0)   /* its next host waits in vain */
				host_error(&f->h[h->next], RD_EXIT_CONN, "the host before it in "
				           "the chain could not connect to it");
			continue;
		}
		proto_fail(h, "it sent a message out of turn");
		break;
	}
end:
	set_stage(f, h, H_END);
	return NULL;
}

/* --- the hub: one receiver to the sender, every host's client --- */

/* READY to MANIFEST_END from the sender, kept for every host. 0, or -1
 * when the sender failed (its ERROR, or one of ours, is the last frame). */
static int take_manifest(struct fan *f)
{
	int seen = 0;
	for (;;) {
		uint8_t type;
		size_t n;
		int rc = ctl_recv(&f->sc, &type, &n);
		static const char stopped[] = "\0\0\0\x0c" "the sender stopped";
		const uint8_t *p = rc < 0 ? (const uint8_t *)stopped : f->sc.buf;
		if (rc < 0) {
			type = CTL_ERROR;
			n = sizeof stopped - 1;
		}
		struct frame *nf = realloc(f->fr, (size_t)(f->nfr + 1) * sizeof *nf);
		uint8_t *copy = malloc(n ? n : 1);
		if (!nf || !copy) {
			free(copy);
			if (nf)
				f->fr = nf;
			return -1;
		}
		f->fr = nf;
		memcpy(copy, p, n);
		f->fr[f->nfr++] = (struct frame){ type, n, copy };
		if (type == CTL_MANIFEST && !seen++ && n >= 20)
			f->mcount = get_u64(p + 12);
		if (type == CTL_MANIFEST_END)
			return 0;
		if (type == CTL_ERROR)
			return -1;
	}
}

static void wait_hosts(struct fan *f, int stage)
{
	pthread_mutex_lock(&f->mu);
	for (int k = 0; k < f->n; k++)
		while (f->h[k].stage < stage)
			pthread_cond_wait(&f->cv, &f->mu);
	pthread_mutex_unlock(&f->mu);
}

/* The union of the plans as PLAN, CHUNKS*, CHUNKS_END to the sender: a
 * file any host lacks; of a file every host that lacks it has an old
 * version of, the chunks any of them lacks. *count: the files. */
static int send_union(struct fan *f, uint32_t *count)
{
	size_t m = f->mcount ? f->mcount : 1;
	uint32_t *nplanned = calloc(m, 4), *nmapped = calloc(m, 4), *un = calloc(m, 4);
	uint8_t **how = calloc(m, sizeof *how);
	uint8_t *pl = NULL;
	int rc = nplanned && nmapped && un && how ? 0 : -ENOMEM;
	for (int k = 0; k < f->n && rc == 0; k++) {
		struct fhost *h = &f->h[k];
		if (h->pos < 0)
			continue;
		for (uint32_t j = 0; j < h->nplan; j++)
			nplanned[h->plan[j]]++;
		for (uint32_t j = 0; j < h->nmaps && rc == 0; j++) {
			const struct hmap *hm = &h->maps[j];
			if (nmapped[hm->idx]++ == 0) {
				if (!(how[hm->idx] = malloc(hm->n)))
					rc = -ENOMEM;
				else
					memcpy(how[hm->idx], hm->how, hm->n);
				un[hm->idx] = hm->n;
			} else if (un[hm->idx] != hm->n) {
				un[hm->idx] = 0;   /* they disagree: sent whole */
			} else {
				for (uint32_t c = 0; c < hm->n; c++)
					how[hm->idx][c] |= hm->how[c];   /* HAVE 0, WHOLE 1 */
			}
		}
	}
	uint32_t cnt = 0;
	for (size_t i = 0; rc == 0 && i < f->mcount; i++)
		cnt += nplanned[i] > 0;
	if (rc == 0 && !(pl = malloc(4 + (size_t)cnt * 4)))
		rc = -ENOMEM;
	if (rc == 0) {
		put_u32(pl, cnt);
		for (size_t i = 0, j = 0; i < f->mcount; i++)
			if (nplanned[i])
				put_u32(pl + 4 + 4 * j++, (uint32_t)i);
		rc = ctl_send(&f->sc, CTL_PLAN, pl, 4 + (size_t)cnt * 4);
	}
	for (size_t i = 0; rc == 0 && i < f->mcount; i++) {
		if (!nplanned[i] || nmapped[i] != nplanned[i] || !un[i])
			continue;   /* whole: no CHUNKS */
		for (uint32_t first = 0; rc == 0 && first < un[i]; first += SYNC_CHUNKS_PER_FRAME) {
			uint32_t c = un[i] - first < SYNC_CHUNKS_PER_FRAME ? un[i] - first
			             : SYNC_CHUNKS_PER_FRAME;
			uint8_t *b = malloc(12 + (size_t)c);
			if (!b) {
				rc = -ENOMEM;
				break;
			}
			put_u32(b, (uint32_t)i);
			put_u32(b + 4, first);
			put_u32(b + 8, c);
			memcpy(b + 12, how[i] + first, c);
			rc = ctl_send(&f->sc, CTL_CHUNKS, b, 12 + (size_t)c);
			free(b);
		}
	}
	if (rc == 0)
		rc = ctl_send(&f->sc, CTL_CHUNKS_END, NULL, 0);
	for (size_t i = 0; how && i < f->mcount; i++)
		free(how[i]);
	free(how);
	free(nplanned);
	free(nmapped);
	free(un);
	free(pl);
	*count = cnt;
	return rc;
}

/* Where h's data connections go: its --hosts address, else the address its
 * ssh reached (its CTL_DATA), else its name's. */
static void data_addr_of(struct fhost *h)
{
	if (!h->t->data_addr && *h->cd.addr)
		snprintf(h->addr, sizeof h->addr, "%s", h->cd.addr);
	else
		snprintf(h->addr, sizeof h->addr, "%s", h->t->ip);
}

/* The hosts that asked for data, in order, each forwarding to the next;
 * the sender is told where the first listens. 0 (chain empty: nothing
 * to tell), 1 linked, or an error. */
static int link_chain(struct fan *f)
{
	int prev = -1;
	f->nchain = 0;
	pthread_mutex_lock(&f->mu);
	for (int k = 0; k < f->n; k++) {
		struct fhost *h = &f->h[k];
		h->next = -1;
		if (h->pos < 0 || h->stage != H_DATA) {
			h->pos = -1;
			continue;
		}
		data_addr_of(h);
		h->pos = f->nchain;
		f->chain[f->nchain++] = k;
		if (prev >= 0)
			f->h[prev].next = k;
		prev = k;
	}
	f->progress_host = prev;   /* the last: the slowest to land */
	f->linked = 1;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	if (!f->nchain)
		return 0;
	const struct fhost *h = &f->h[f->chain[0]];
	size_t al = strlen(h->addr);
	uint8_t msg[2 + 32 + 256];
	put_u16(msg, h->cd.port);
	memcpy(msg + 2, h->cd.key, 32);
	memcpy(msg + 34, h->addr, al);
	int rc = ctl_send(&f->sc, CTL_DATA, msg, 34 + al);
	explicit_bzero(msg, sizeof msg);
	return rc < 0 ? rc : 1;
}

/* Every host's DONE as one for the sender: counts summed, the first
 * failure's code. */
static void send_done(struct fan *f)
{
	struct sync_result all = { 0 };
	for (int k = 0; k < f->n; k++) {
		const struct fhost *h = &f->h[k];
		if (!all.code && h->code)
			all.code = (uint32_t)(h->code > 255 ? RD_EXIT_PROTO : h->code);
		all.files += h->res.files;
		all.bytes += h->res.bytes;
		all.deleted += h->res.deleted;
		all.errors += h->res.errors;
		all.meta += h->res.meta;
		all.matched += h->res.matched;
		for (int j = 0; j < SYNC_KINDS; j++) {
			all.created[j] += h->res.created[j];
			all.removed[j] += h->res.removed[j];
		}
	}
	uint8_t done[RESULT_LEN];
	result_put(done, &all);
	pthread_mutex_lock(&f->smu);
	ctl_send(&f->sc, CTL_DONE, done, sizeof done);
	pthread_mutex_unlock(&f->smu);
}

/* Tell every host still at work the run is over for it. */
static void stop_hosts(struct fan *f, int code, const char *why)
{
	for (int k = 0; k < f->n; k++)
		if (f->h[k].stage != H_END)
			host_error(&f->h[k], code, why);
}

static void *hub_main(void *arg)
{
	struct fan *f = arg;
	int ok = take_manifest(f) == 0;
	pthread_mutex_lock(&f->mu);
	f->fr_state = ok ? 1 : -1;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	if (!ok) {
		wait_hosts(f, H_END);
		return NULL;
	}
	wait_hosts(f, H_PLANNED);
	for (int k = 0; k < f->n; k++)   /* the hosts that lack something */
		f->h[k].pos = f->h[k].stage >= H_PLANNED && f->h[k].plan && f->h[k].nplan ? 0 : -1;
	uint32_t count = 0;
	int rc = send_union(f, &count);
	if (rc == 0 && count) {
		pthread_mutex_lock(&f->mu);
		for (int k = 0; k < f->n; k++)
			while (f->h[k].pos >= 0 && f->h[k].stage < H_DATA)
				pthread_cond_wait(&f->cv, &f->mu);
		pthread_mutex_unlock(&f->mu);
		rc = link_chain(f);
	} else {
		pthread_mutex_lock(&f->mu);
		f->linked = 1;
		pthread_cond_broadcast(&f->cv);
		pthread_mutex_unlock(&f->mu);
	}
	if (rc == 1) {   /* the data flows; then the sender's SENT, for every host */
		uint8_t type;
		size_t n;
		rc = ctl_recv(&f->sc, &type, &n);
		if (rc == 0 && type == CTL_SENT) {
			for (int j = 0; j < f->nchain; j++)
				if (f->h[f->chain[j]].stage != H_END)
					hsend(&f->h[f->chain[j]], CTL_SENT, f->sc.buf, n);
		} else if (rc == 0 && type == CTL_ERROR) {
			for (int k = 0; k < f->n; k++)
				if (f->h[k].stage != H_END) {
					pthread_mutex_lock(&f->h[k].wmu);
					ctl_send(&f->h[k].c, CTL_ERROR, f->sc.buf, n);
					pthread_mutex_unlock(&f->h[k].wmu);
				}
		} else {
			stop_hosts(f, RD_EXIT_CONN, "the sender stopped");
		}
	} else if (rc < 0) {
		stop_hosts(f, RD_EXIT_FILEIO, "the client failed");
	}
	wait_hosts(f, H_END);
	send_done(f);
	return NULL;
}

/* --- rounds, the host list, the report --- */

/* Ctrl-C, SIGTERM, SIGHUP: every host's channel is closed (each receiver
 * unwinds and leaves), a second later its remote shell is killed; exit 20. */
static struct {
	sigset_t set;
	struct fan *f;   /* the round under way */
	pthread_mutex_t mu;
} intr = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void *interrupt_main(void *arg)
{
	int sig;
	(void)arg;
	if (sigwait(&intr.set, &sig) != 0)
		return NULL;
	log_err("interrupted by %s: stopping every host", sigabbrev_np(sig));
	pthread_mutex_lock(&intr.mu);
	struct fan *f = intr.f;
	for (int k = 0; f && k < f->n; k++) {
		shutdown(f->h[k].c.out, SHUT_RDWR);
		close(f->h[k].c.out);
	}
	for (int i = 0; f && i < 50; i++) {
		int left = 0;
		for (int k = 0; k < f->n; k++)
			left += f->h[k].pid > 0 && waitpid(f->h[k].pid, NULL, WNOHANG) == 0;
		if (!left)
			break;
		usleep(20000);
	}
	for (int k = 0; f && k < f->n; k++)
		if (f->h[k].pid > 0 && kill(f->h[k].pid, SIGTERM) == 0) {
			usleep(100000);
			kill(f->h[k].pid, SIGKILL);
		}
	_exit(RD_EXIT_SIGNAL);
}

static void catch_interrupts(void)
{
	pthread_t th;
	sigemptyset(&intr.set);
	sigaddset(&intr.set, SIGINT);
	sigaddset(&intr.set, SIGTERM);
	sigaddset(&intr.set, SIGHUP);
	if (pthread_sigmask(SIG_BLOCK, &intr.set, NULL) == 0 &&
	    pthread_create(&th, NULL, interrupt_main, NULL) == 0)
		pthread_detach(th);
}

/* Wait for a host's remote shell; after a failure give it 5 s, then kill. */
static int reap(pid_t pid, int failed)
{
	int status = 0;
	for (int i = 0; failed && i < 100; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return status;
		usleep(50000);
	}
	if (failed)
		kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return status;
}

/* One round: the sender, the hub and the hosts t[which[0..n-1]]; each
 * host's outcome into h[k] (kept by the caller). res: the sender's. */
static void run_round(struct fan *f, struct fhost *h, int n, const char *const *paths,
                      int nsrc, struct sync_result *res)
{
	const struct sync_opts *o = f->o;
	const char *words[] = { o->rdcp_path ? o->rdcp_path : "rdcp", "--server", NULL };
	f->h = h;
	f->n = n;
	f->fr = NULL;
	f->nfr = f->fr_state = f->linked = f->nchain = 0;
	f->mcount = 0;
	f->progress_host = -1;
	f->chain = calloc((size_t)n, sizeof *f->chain);
	/* every remote shell at once: logins overlap */
	for (int k = 0; k < n; k++) {
		h[k].c = (struct ctl){ .in = -1, .out = -1 };
		h[k].pid = rsh_spawn(o->rsh, h[k].t->host, words, &h[k].c.out, &h[k].c.in);
		h[k].pos = h[k].next = -1;
		pthread_mutex_init(&h[k].wmu, NULL);
	}
	pthread_mutex_lock(&intr.mu);
	intr.f = f;
	pthread_mutex_unlock(&intr.mu);
	for (int k = 0; k < n; k++) {
		h[k].fan = f;
		h[k].r = (struct role){ .ctl = &h[k].c, .is_client = 1, .o = &f->ho };
		if (h[k].pid < 0) {
			fail(&h[k], RD_EXIT_START, "the remote shell could not be started");
			h[k].dead = 1;
			h[k].stage = H_END;
			continue;
		}
		ctl_set_timeout(&h[k].c, o->timeout * 1000);
		if (pthread_create(&h[k].th, NULL, agent_main, &h[k]) != 0) {
			fail(&h[k], RD_EXIT_START, "no thread for it");
			h[k].stage = H_END;
			h[k].pid = -h[k].pid;   /* not joined */
		}
	}
	int sv[2];
	pthread_t hub;
	struct ctl sc = { .in = -1, .out = -1 };
	int hub_on = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0;
	if (hub_on) {
		sc.in = sc.out = sv[0];
		f->sc = (struct ctl){ .in = sv[1], .out = sv[1] };
		hub_on = pthread_create(&hub, NULL, hub_main, f) == 0;
	}
	if (hub_on) {
		struct role r = { .ctl = &sc, .flags = o->flags, .tp = o->tp, .is_client = 1,
		                  .o = o, .srcs = paths, .nsrc = nsrc, .path = paths[0],
		                  .verbose = o->verbose, .progress = o->progress,
		                  .timeout = o->timeout, .connect_addr = "127.0.0.1" };
		sync_sender(&r, res);
		shutdown(sv[0], SHUT_RDWR);   /* the hub sees the sender's end */
		pthread_join(hub, NULL);
		ctl_free(&sc);
		ctl_free(&f->sc);
		close(sv[1]);
		close(sv[0]);
	} else {
		log_err("cannot start the fan-out: %s", strerror(errno));
		res->code = RD_EXIT_FILEIO;
		for (int k = 0; k < n; k++)
			if (h[k].pid > 0)
				close(h[k].c.out);
	}
	for (int k = 0; k < n; k++) {
		if (h[k].pid > 0)
			pthread_join(h[k].th, NULL);
		pthread_mutex_lock(&intr.mu);
		ctl_free(&h[k].c);
		if (h[k].c.out >= 0)
			close(h[k].c.out);
		h[k].c.out = -1;
		pthread_mutex_unlock(&intr.mu);
		if (h[k].c.in >= 0)
			close(h[k].c.in);
		if (h[k].pid < 0)
			continue;
		int st = reap(h[k].pid, h[k].code != 0 || h[k].dead);
		int xs = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		if (h[k].dead && h[k].r.frames == 0) {   /* rdcp never answered */
			h[k].code = RD_EXIT_START;
			snprintf(h[k].why, sizeof h[k].why, "could not start rdcp there (remote "
			         "shell exit %d): check the host, the login, and --rdcp-path", xs);
		}
		pthread_mutex_destroy(&h[k].wmu);
	}
	pthread_mutex_lock(&intr.mu);
	intr.f = NULL;
	pthread_mutex_unlock(&intr.mu);
	for (int k = 0; k < f->nfr; k++)
		free(f->fr[k].p);
	free(f->fr);
	free(f->chain);
}

static void host_reset(struct fhost *h)
{
	free(h->plan);
	for (uint32_t j = 0; j < h->nmaps; j++)
		free(h->maps[j].how);
	free(h->maps);
	const struct fan_target *t = h->t;
	*h = (struct fhost){ .t = t };
}

/* A host without "user@". */
static const char *bare_host_of(const char *h)
{
	const char *at = strrchr(h, '@');
	return at ? at + 1 : h;
}

/* The address a host's name (or its --hosts address) resolves to, for data
 * connections and to tell one host from another; "" when it does not. */
static void resolve(const char *name, char ip[64])
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	ip[0] = 0;
	if (getaddrinfo(name, NULL, &hints, &ai) != 0 || !ai)
		return;
	getnameinfo(ai->ai_addr, ai->ai_addrlen, ip, 64, NULL, 0, NI_NUMERICHOST);
	freeaddrinfo(ai);
}

/* 1 when ip is an address of this machine. */
static int is_local(const char *ip)
{
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICHOST },
	                *ai = NULL;
	if (!*ip || getaddrinfo(ip, NULL, &hints, &ai) != 0)
		return 0;
	int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int local = fd >= 0 && bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return local;
}

static char *trimmed(const char *p)
{
	char *s = strdup(p);
	size_t n = s ? strlen(s) : 0;
	while (n > 1 && s[n - 1] == '/')
		s[--n] = 0;
	return s;
}

static int add_target(struct fan_target **t, int *n, const char *host, const char *path,
                      const char *data_addr)
{
	struct fan_target *nt = realloc(*t, (size_t)(*n + 1) * sizeof *nt);
	if (!nt)
		return -ENOMEM;
	*t = nt;
	struct fan_target *x = &nt[(*n)++];
	*x = (struct fan_target){ .host = strdup(host), .path = strdup(*path ? path : "."),
	                          .data_addr = data_addr ? strdup(data_addr) : NULL };
	if (!x->host || !x->path || (data_addr && !x->data_addr) ||
	    asprintf(&x->label, "%s:%s", host, path) < 0) {
		x->label = NULL;
		return -ENOMEM;
	}
	resolve(bare_host_of(data_addr ? data_addr : host), x->ip);
	return 0;
}

/* --hosts=FILE:DST: one host per line ([user@]host, then optionally the
 * address its data connections use), '#' comments and blank lines skipped. */
static int read_hosts(struct sync_opts *o, struct fan_target **t, int *n)
{
	const char *colon = strrchr(o->hosts, ':');
	if (!colon || colon == o->hosts || !colon[1]) {
		log_err("--hosts=FILE:DST: expected a host list file and the destination path "
		        "on every host, e.g. --hosts=workers.txt:/data/models (got '%s')", o->hosts);
		return RD_EXIT_USAGE;
	}
	char *file = strndup(o->hosts, (size_t)(colon - o->hosts)), *buf = NULL;
	size_t len;
	int rc = file ? sync_read_list(file, o, &buf, &len) : -1;
	if (rc < 0) {
		log_err("--hosts: cannot read %s: %s", file ? file : "?", strerror(errno));
		free(file);
		return RD_EXIT_SELECT;
	}
	char *p = buf, *line;
	int lineno = 0, code = 0;
	while (!code && (line = sync_next_line(&p, buf + len, &lineno))) {
		char host[256], addr[256], extra[2];
		int got = sscanf(line, " %255s %255s %1s", host, addr, extra);
		if (got < 1 || got > 2 || strchr(host, ':') || strchr(host, '/')) {
			log_err("--hosts: %s line %d: expected '[user@]host [data-address]', got '%s'",
			        file, lineno, line);
			code = RD_EXIT_USAGE;
		} else if (add_target(t, n, host, colon + 1, got == 2 ? addr : NULL) < 0) {
			code = RD_EXIT_FILEIO;
		}
	}
	if (!code && !*n) {
		log_err("--hosts: %s names no host", file);
		code = RD_EXIT_USAGE;
	}
	free(buf);
	free(file);
	return code;
}

/* Leave out a destination named twice (the same address and path, under
 * two names), and SRC itself (this machine, the same directory). */
static void dedupe(struct fan_target *t, int n, const char *src)
{
	char *s = realpath(src, NULL);
	for (int k = 0; k < n; k++) {
		char *pk = trimmed(t[k].path);
		for (int j = 0; j < k && pk && !t[k].skip; j++) {
			char *pj = trimmed(t[j].path);
			int same = pj && !t[j].skip && !strcmp(pk, pj) &&
			           (*t[k].ip ? !strcmp(t[k].ip, t[j].ip)
			                     : !strcmp(t[k].host, t[j].host));
			if (same) {
				log_warn("%s is %s again (%s): copied once", t[k].label, t[j].label,
				         *t[k].ip ? t[k].ip : t[k].host);
				t[k].skip = 1;
			}
			free(pj);
		}
		if (!t[k].skip && s && is_local(t[k].ip)) {
			char *d = realpath(t[k].path, NULL);
			if (d && !strcmp(d, s))
				t[k].skip = 2;   /* said with -v */
			free(d);
		}
		free(pk);
	}
	free(s);
}

/* The hosts that failed with a report of their own after a host before them
 * in the chain failed: the break may have cut their feed. */
static int retry_set(struct fhost *h, int n, int *which)
{
	int cnt = 0, broken = 0;
	int *order = malloc((size_t)n * sizeof *order);
	if (!order)
		return 0;
	for (int k = 0; k < n; k++)
		order[k] = -1;
	for (int k = 0; k < n; k++)
		if (h[k].pos >= 0 && h[k].pos < n)
			order[h[k].pos] = k;
	for (int p = 0; p < n && order[p] >= 0; p++) {
		struct fhost *x = &h[order[p]];
		if (broken && x->code && !x->dead)
			which[cnt++] = order[p];
		else if (x->code || x->relay_rc)
			broken = 1;
	}
	free(order);
	return cnt;
}

/* Options a fan-out cannot honour. 0, or the exit code (said). */
static int check_fanout(const struct sync_opts *o)
{
	const char *bad = (o->flags & SYNC_F_REMOVE_SOURCE) ? "--remove-source-files (a "
	                  "source file would be removed once the first host has it)"
	                  : o->data_addr ? "--data-addr (one address for many hosts; give "
	                  "each host's in a --hosts file: 'host address' per line)" : NULL;
	if (bad) {
		log_err("a fan-out to several hosts cannot take %s", bad);
		return RD_EXIT_USAGE;
	}
	return 0;
}

/* The per-host report: a line each on stdout (unless -q); the failed
 * ones on stderr, with why. */
static void report_hosts(const struct sync_opts *o, const struct fan_target *t, int nt,
                         const struct fhost *last)
{
	char a[SYNC_NUM_LEN], b[SYNC_NUM_LEN];
	for (int k = 0; k < nt; k++) {
		const struct fhost *h = &last[k];
		if (t[k].skip == 1 || (t[k].skip == 2 && (!o->verbose || o->quiet)))
			continue;
		if (t[k].skip == 2) {
			printf("%s: left out: it is SRC itself\n", t[k].label);
		} else if (h->code) {
			log_err("%s: failed (exit %d): %s", t[k].label, h->code,
			        h->why[0] ? h->why : "see above");
		} else if (!o->quiet && !o->json) {
			printf("%s: ok: %s files, %s bytes received, %llu deleted\n", t[k].label,
			       sync_num(a, h->res.files, o->human), sync_num(b, h->res.bytes, o->human),
			       (unsigned long long)h->res.deleted);
		}
	}
	fflush(stdout);
}

/* --json's "hosts": one object per destination. Returns a malloc'd text. */
static char *hosts_json(const struct fan_target *t, int nt, const struct fhost *last)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fputc('[', f);
	for (int k = 0; k < nt; k++) {
		const struct fhost *h = &last[k];
		fputs(k ? ",{\"dst\":" : "{\"dst\":", f);
		sync_json_str(f, t[k].label);
		fprintf(f, ",\"status\":\"%s\",\"exit_code\":%d,\"files_sent\":%llu,"
		        "\"bytes_sent\":%llu,\"deleted\":%llu,\"error\":",
		        t[k].skip ? "skipped" : h->code ? "failed" : "ok", t[k].skip ? 0 : h->code,
		        (unsigned long long)h->res.files, (unsigned long long)h->res.bytes,
		        (unsigned long long)h->res.deleted);
		if (h->code && !t[k].skip)
			sync_json_str(f, h->why);
		else
			fputs("null", f);
		fputc('}', f);
	}
	fputc(']', f);
	fclose(f);
	return buf;
}

int sync_fanout(struct sync_opts *o, int first_dst)
{
	struct fan_target *t = NULL;
	int nt = 0, code = check_fanout(o);
	int nsrc = o->hosts ? o->nsrc : first_dst;
	const char **paths = calloc((size_t)nsrc + 1, sizeof *paths);
	if (!code && !paths)
		code = RD_EXIT_FILEIO;
	for (int k = 0; !code && k < nsrc; k++) {
		char *host = NULL, *path = NULL;
		if (sync_parse_endpoint(o->srcs[k], &host, &path) < 0 || host) {
			log_err("a fan-out sends from this machine: SRC '%s' must be local",
			        o->srcs[k]);
			code = RD_EXIT_USAGE;
		}
		free(host);
		paths[k] = path;
	}
	if (!code && o->hosts) {
		code = read_hosts(o, &t, &nt);
	} else {
		for (int k = first_dst; !code && k <= o->nsrc; k++) {
			const char *arg = k < o->nsrc ? o->srcs[k] : o->dst;
			char *host = NULL, *path = NULL;
			if (sync_parse_endpoint(arg, &host, &path) < 0 || !host) {
				log_err("every DST of a fan-out is remote (host:path): '%s' is not", arg);
				code = RD_EXIT_USAGE;
			} else if (add_target(&t, &nt, host, path, NULL) < 0) {
				code = RD_EXIT_FILEIO;
			}
			free(host);
			free(path);
		}
	}
	struct fhost *last = calloc((size_t)(nt ? nt : 1), sizeof *last);
	struct sync_result res = { 0 };
	o->src = paths && paths[0] ? paths[0] : o->src;
	o->dst = o->hosts ? o->hosts : first_dst < o->nsrc ? o->srcs[first_dst] : o->dst;
	double t0 = sync_report_begin(o, 1);
	if (!code && !last)
		code = RD_EXIT_FILEIO;
	if (!code) {
		dedupe(t, nt, paths[0]);
		signal(SIGPIPE, SIG_IGN);
		catch_interrupts();
	}
	/* the hosts' options: ours, and --relay */
	struct fan f = { .o = o, .ho = *o, .mu = PTHREAD_MUTEX_INITIALIZER,
	                 .cv = PTHREAD_COND_INITIALIZER, .smu = PTHREAD_MUTEX_INITIALIZER };
	char **fwd = calloc((size_t)o->nfwd + 1, sizeof *fwd);
	if (fwd) {
		memcpy(fwd, o->fwd, (size_t)o->nfwd * sizeof *fwd);
		fwd[o->nfwd] = "--relay";
		f.ho.fwd = fwd;
		f.ho.nfwd = o->nfwd + 1;
	} else if (!code) {
		code = RD_EXIT_FILEIO;
	}
	int *which = calloc((size_t)(nt ? nt : 1), sizeof *which), nw = 0;
	uint64_t wire = 0;   /* data bytes sent, every round */
	for (int k = 0; !code && which && k < nt; k++)
		if (!t[k].skip)
			which[nw++] = k;
	for (int round = 0; !code && which && nw && round < FAN_ROUNDS; round++) {
		struct fhost *h = calloc((size_t)nw, sizeof *h);
		if (!h) {
			code = RD_EXIT_FILEIO;
			break;
		}
		for (int k = 0; k < nw; k++)
			h[k].t = &t[which[k]];
		if (round)
			log_warn("%d host%s lost the data when a host before %s failed: "
			         "sending what %s still lack%s", nw, nw == 1 ? "" : "s",
			         nw == 1 ? "it" : "them", nw == 1 ? "it" : "they", nw == 1 ? "s" : "");
		memset(&res, 0, sizeof res);
		run_round(&f, h, nw, paths, nsrc, &res);
		wire += res.wire;
		int *again = malloc((size_t)nw * sizeof *again);
		int na = again ? retry_set(h, nw, again) : 0;
		for (int k = 0; k < nw; k++) {
			host_reset(&last[which[k]]);
			last[which[k]] = h[k];
			last[which[k]].plan = NULL;
			last[which[k]].maps = NULL;
			last[which[k]].nmaps = 0;
			host_reset(&h[k]);
		}
		for (int k = 0; k < na; k++)
			again[k] = which[again[k]];
		if (na)
			memcpy(which, again, (size_t)na * sizeof *which);
		free(again);
		nw = na;
		if (!nw && res.code && !code) {
			int any = 0;
			for (int k = 0; k < nt; k++)
				any |= last[k].code != 0;
			if (!any)   /* the sender's own failure (said) */
				code = (int)res.code;
		}
		free(h);
	}
	if (last)
		report_hosts(o, t, nt, last);
	for (int k = 0; !code && last && k < nt; k++)
		if (!t[k].skip && last[k].code)
			code = last[k].code;   /* the first failed host's, in the order given */
	/* the summary: our file list, every host's counts summed */
	struct sync_result all = { .transport = res.transport, .total_size = res.total_size,
	                           .flist_bytes = res.flist_bytes, .ctl_tx = res.ctl_tx,
	                           .ctl_rx = res.ctl_rx, .we_sent = 1, .wire = wire,
	                           .hosts = nt };
	memcpy(all.entries, res.entries, sizeof all.entries);
	for (int k = 0; last && k < nt; k++) {
		all.files += last[k].res.files;
		all.bytes += last[k].res.bytes;
		all.deleted += last[k].res.deleted;
		all.errors += last[k].res.errors;
		all.meta += last[k].res.meta;
		all.matched += last[k].res.matched;
		for (int j = 0; j < SYNC_KINDS; j++) {
			all.created[j] += last[k].res.created[j];
			all.removed[j] += last[k].res.removed[j];
		}
	}
	char *hj = last && o->json ? hosts_json(t, nt, last) : NULL;
	code = sync_report_hosts(o, &all, code, t0, hj);
	free(hj);
	for (int k = 0; last && k < nt; k++)
		host_reset(&last[k]);
	for (int k = 0; k < nt; k++) {
		free(t[k].label);
		free(t[k].host);
		free(t[k].path);
		free(t[k].data_addr);
	}
	for (int k = 0; paths && k < nsrc; k++)
		free((char *)paths[k]);
	free(paths);
	free(t);
	free(last);
	free(which);
	free(fwd);
	return code;
}
