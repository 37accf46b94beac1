/*
 * A fan-out's hub (fanout.c runs it): one receiver to the sender, over a
 * socketpair, and the client to every host, through one agent thread per
 * host. The hub hands the sender's manifest to every host, merges their
 * plans into one, links the hosts that need data into a chain (CTL_RELAY)
 * and sums their results into the sender's DONE.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "common/wire.h"
#include "sync/fanout/fanout_int.h"

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

/* Host x's CTL_DATA for a host before it in the chain (CTL_RELAY's part):
 * u16 length, port, secret, address; a bare 0 length for none. */
static size_t put_data(uint8_t *p, const struct fhost *x)
{
	if (!x) {
		put_u16(p, 0);
		return 2;
	}
	size_t al = strnlen(x->addr, 255);
	put_u16(p, (uint16_t)(34 + al));
	put_u16(p + 2, x->cd.port);
	memcpy(p + 4, x->cd.key, 32);
	memcpy(p + 36, x->addr, al);
	return 36 + al;
}

uint32_t fan_hop_ms(int timeout_s, int pos, int nchain)
{
	if (timeout_s <= 0 || pos < 0 || pos >= nchain - 1)
		return 0;
	uint64_t ms = (uint64_t)timeout_s * 1000 * (uint64_t)(2 * nchain - 1 - pos) /
	              (2 * (uint64_t)nchain);
	return ms < 200 ? 200 : (uint32_t)ms;
}

static void host_error(struct fhost *h, int code, const char *text)
{
	pthread_mutex_lock(&h->wmu);
	ctl_error(&h->c, code, text);
	pthread_mutex_unlock(&h->wmu);
}

void fan_fail(struct fhost *h, int code, const char *why)
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
	if (type == CTL_PROGRESS && n == PROGRESS_LEN) {   /* forwarded as it is */
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
			fan_fail(h, RD_EXIT_PROTO, "its result has an exit code over 255");
		else if (h->res.code)
			fan_fail(h, (int)h->res.code, "it reported errors (see above)");
		return -1;
	}
	if (type == CTL_ERROR) {
		char prefix[300];
		h->got_result = 1;
		snprintf(prefix, sizeof prefix, "%s: ", h->t->label);
		fan_fail(h, (int)sync_peer_error(&h->c, n, prefix), "it stopped (see above)");
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
			fan_fail(h, rc == -ETIME ? RD_EXIT_TIMEOUT : RD_EXIT_CONN,
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
	fan_fail(h, RD_EXIT_PROTO, what);
	host_error(h, RD_EXIT_PROTO, what);
}

int fan_plan_take(const struct fan *f, struct fhost *h, uint8_t type, const uint8_t *b,
                  size_t n, const char **why)
{
	if (!h->plan) {   /* PLAN: strictly increasing regular files of the list */
		if (type != CTL_PLAN || n < 4 || n % 4 || (n - 4) / 4 != get_u32(b))
			return *why = "its plan is malformed", -EPROTO;
		uint32_t np = get_u32(b), *plan = malloc((size_t)(np ? np : 1) * 4);
		struct chunk_map *maps = calloc(np ? np : 1, sizeof *maps);
		if (!plan || !maps) {
			free(plan);
			free(maps);
			return -ENOMEM;
		}
		for (uint32_t k = 0; k < np; k++) {
			plan[k] = get_u32(b + 4 + 4 * k);
			if (plan[k] >= f->m.n || f->m.e[plan[k]].type != IDX_REG ||
			    (k && plan[k] <= plan[k - 1])) {
				free(plan);   /* never seen by the hub */
				free(maps);
				return *why = "its plan asks for an entry twice, out of order, past "
				              "the file list or not a file", -EPROTO;
			}
		}
		h->plan = plan;
		h->maps = maps;
		h->nplan = np;
		return 0;
	}
	/* CHUNKS, checked as the sender checks them (sync/delta/chunks.c) */
	int rc = type == CTL_CHUNKS_END && n == 0 ? chunks_complete(h->maps, h->nplan, why)
	         : type == CTL_CHUNKS ? chunks_decode(b, n, &f->m, h->plan, h->nplan, h->maps, why)
	         : (*why = "is missing: another message came instead", -EPROTO);
	return rc < 0 ? rc : type == CTL_CHUNKS_END;
}

/* PLAN, then CHUNKS* and CHUNKS_END: what this host lacks. 0, or -1. */
static int read_plan(struct fan *f, struct fhost *h)
{
	for (;;) {
		uint8_t type;
		size_t n;
		const char *why = "";
		if (next_frame(f, h, &type, &n) < 0)
			return -1;
		int rc = fan_plan_take(f, h, type, h->c.buf, n, &why);
		if (rc == -ENOMEM)
			return fan_fail(h, RD_EXIT_FILEIO, "out of memory"), -1;
		if (rc < 0) {
			char text[200];
			snprintf(text, sizeof text, "%s%s", h->plan ? "its list of chunks to send " : "",
			         why);
			proto_fail(h, text);
			return -1;
		}
		if (rc == 1)
			return 0;
	}
}

/* The host's first word (its rdcp's NOOP, or the remote shell's end or
 * junk) within the login limit: 0, or -ETIME when nothing came (a host
 * whose ssh hangs must not hold the run for ssh's own timeout). */
static int await_first_word(const struct fan *f, const struct fhost *h)
{
	struct pollfd p = { h->c.in, POLLIN, 0 };
	int rc;
	if (f->login_s <= 0)
		return 0;
	while ((rc = poll(&p, 1, f->login_s * 1000)) < 0 && errno == EINTR)
		;
	return rc == 0 ? -ETIME : 0;
}

/* HELLO, with our options and --relay=HOST (its messages name it). 0 or
 * an error. */
static int send_hello(struct fan *f, struct fhost *h)
{
	const char *path = h->t->path;
	struct sync_opts ho = *f->o;
	char **fwd = calloc((size_t)ho.nfwd + 1, sizeof *fwd), *relay = NULL;
	int hrc = fwd && asprintf(&relay, "--relay=%s", rsh_bare_host(h->t->host)) >= 0 ? 0 : -1;
	if (hrc == 0) {
		memcpy(fwd, ho.fwd, (size_t)ho.nfwd * sizeof *fwd);
		fwd[ho.nfwd++] = relay;
		ho.fwd = fwd;
		hrc = hello_send(&h->c, ROLE_RECEIVER, &ho, &path, 1, "");
	}
	free(fwd);
	free(relay);
	return hrc;
}

/* One host's conversation, from HELLO (or, a live host under --watch,
 * ROUND) to its DONE. */
void *fan_agent_main(void *arg)
{
	struct fhost *h = arg;
	struct fan *f = h->fan;
	uint8_t type;
	size_t n;
	int hrc = h->live ? hsend(h, CTL_ROUND, "", 0) : send_hello(f, h);
	if (hrc == 0 && !h->live && await_first_word(f, h) < 0) {
		char why[96];
		snprintf(why, sizeof why, "no answer in %d s (--contimeout): the host is down, "
		         "unreachable or its login hangs", f->login_s);
		h->dead = h->no_answer = 1;
		fan_fail(h, RD_EXIT_START, why);
		goto end;
	}
	if (hrc < 0 ||
	    (f->o->files_from && sync_files_send(&h->c, f->o) < 0)) {
		h->dead = 1;
		if (h->live)
			fan_fail(h, RD_EXIT_CONN, "the connection to it was lost");
		else
			fan_fail(h, RD_EXIT_START, "could not start rdcp there");
		goto end;
	}
	pthread_mutex_lock(&f->mu);
	while (!f->fr_state)
		pthread_cond_wait(&f->cv, &f->mu);
	pthread_mutex_unlock(&f->mu);
	if (f->fr_state < 0) {
		/* the sender failed before its file list (and said why, once): a
		 * bare ERROR stops the host without a line of its own */
		uint8_t code[4];
		put_u32(code, RD_EXIT_SELECT);
		for (int k = 0; k < f->nfr; k++)
			if (f->fr[k].type == CTL_ERROR && f->fr[k].n >= 4)
				memcpy(code, f->fr[k].p, 4);
		hsend(h, CTL_ERROR, code, sizeof code);
		while (next_frame(f, h, &type, &n) == 0)
			;
		h->code = 0;   /* the source's failure, not the host's */
		h->why[0] = 0;
		h->src_failed = 1;
		goto end;
	}
	for (int k = 0; k < f->nfr; k++)
		if (ctl_send(&h->c, f->fr[k].type, f->fr[k].p, f->fr[k].n) < 0)
			break;
	if (read_plan(f, h) < 0)
		goto end;
	h->planned = 1;   /* plan and chunk maps whole and checked */
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
		if (h->pos >= 0) {   /* CTL_RELAY: the next host and the one after it */
			uint8_t msg[1 + 2 * (2 + 34 + 255) + 4];
			size_t len = 1;
			int nx = h->next, alt = nx >= 0 ? f->h[nx].next : -1;
			uint32_t hop = nx >= 0 ? fan_hop_ms(f->o->timeout, h->pos, f->nchain) : 0;
			/* the host two before us may come instead of the one before */
			msg[0] = (h->pos >= 2 ? RELAY_F_REJOIN : 0) | (hop ? RELAY_F_HOP_MS : 0);
			len += put_data(msg + len, nx >= 0 ? &f->h[nx] : NULL);
			len += put_data(msg + len, alt >= 0 ? &f->h[alt] : NULL);
			if (hop) {
				put_u32(msg + len, hop);
				len += 4;
			}
			hsend(h, CTL_RELAY, msg, len);
			explicit_bzero(msg, sizeof msg);
		}
	}
	while (next_frame(f, h, &type, &n) == 0) {
		if (type == CTL_RELAY && n == 4 && !h->relay_said) {
			h->relay_said = 1;
			h->relay_rc = -(int)get_u32(h->c.buf);
			if (h->relay_rc && h->next >= 0) {   /* its next host waits in vain */
				pthread_mutex_lock(&f->mu);   /* read once the agents are joined */
				h->bad_links++;
				f->h[h->next].bad_links++;
				pthread_mutex_unlock(&f->mu);
				host_error(&f->h[h->next], RD_EXIT_CONN, "the host before it in "
				           "the chain could not connect to it");
			}
			continue;
		}
		proto_fail(h, "it sent a message out of turn");
		break;
	}
end:
	/* gone before it could dial its next host: that one waits in vain (once
	 * it has dialled, its next sees the stream break by itself) */
	pthread_mutex_lock(&f->mu);
	int orphan = f->linked && h->pos >= 0 && h->next >= 0 && !h->relay_said;
	pthread_mutex_unlock(&f->mu);
	if (orphan)
		host_error(&f->h[h->next], RD_EXIT_CONN, "the host before it in the chain "
		           "failed before it could connect");
	set_stage(f, h, H_END);
	return NULL;
}

/* --- the hub: one receiver to the sender, every host's client --- */

/* READY to MANIFEST_END from the sender, kept for every host. 0, or -1
 * when the sender failed (its ERROR, or one of ours, is the last frame). */
static int take_manifest(struct fan *f)
{
	size_t total = 0;
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
		if (type == CTL_MANIFEST)
			total += n;
		if (type == CTL_MANIFEST_END) {
			if (rc >= 0)   /* the archive key: in the copy only */
				explicit_bzero(f->sc.buf, n);
			break;
		}
		if (type == CTL_ERROR)
			return -1;
	}
	/* the file list, to check the hosts' plans and chunk lists against */
	uint8_t *all = malloc(total ? total : 1);
	struct idx_why why;
	size_t at = 0;
	for (int k = 0; all && k < f->nfr; k++)
		if (f->fr[k].type == CTL_MANIFEST) {
			memcpy(all + at, f->fr[k].p, f->fr[k].n);
			at += f->fr[k].n;
		}
	int rc = all ? idx_manifest_decode(all, total, &f->m, &why) : -ENOMEM;
	free(all);
	if (rc < 0)
		log_err("the fan-out cannot read the sender's file list: %s",
		        rc == -ENOMEM ? strerror(ENOMEM) : why.text);
	return rc < 0 ? -1 : 0;
}

static void wait_hosts(struct fan *f, int stage)
{
	pthread_mutex_lock(&f->mu);
	for (int k = 0; k < f->n; k++)
		while (f->h[k].stage < stage)
			pthread_cond_wait(&f->cv, &f->mu);
	pthread_mutex_unlock(&f->mu);
}

int fan_union(const struct fan *f, int (*emit)(void *, uint8_t, const uint8_t *, size_t),
              void *ctx, uint32_t *count)
{
	size_t m = f->m.n ? f->m.n : 1;
	uint8_t *state = calloc(m, 1);   /* 0 no host, 1 by chunks so far, 2 whole */
	uint8_t **how = calloc(m, sizeof *how);
	uint8_t *pl = NULL;
	int rc = state && how ? 0 : -ENOMEM;
	for (int k = 0; k < f->n && rc == 0; k++) {
		const struct fhost *h = &f->h[k];
		if (h->pos < 0)
			continue;
		for (uint32_t j = 0; j < h->nplan && rc == 0; j++) {
			uint32_t i = h->plan[j];
			const struct chunk_map *cm = &h->maps[j];
			if (!cm->how) {   /* this host wants it whole */
				state[i] = 2;
			} else if (state[i] == 0) {
				if (!(how[i] = malloc(cm->n)))
					rc = -ENOMEM;
				else
					memcpy(how[i], cm->how, cm->n);
				state[i] = 1;
			} else if (state[i] == 1) {
				for (uint32_t c = 0; c < cm->n; c++)   /* the same n: one file */
					how[i][c] |= cm->how[c] != CH_HAVE;
			}
		}
	}
	uint32_t cnt = 0;
	for (size_t i = 0; rc == 0 && i < f->m.n; i++)
		cnt += state[i] > 0;
	if (rc == 0 && !(pl = malloc(4 + (size_t)cnt * 4)))
		rc = -ENOMEM;
	if (rc == 0) {
		put_u32(pl, cnt);
		for (size_t i = 0, j = 0; i < f->m.n; i++)
			if (state[i])
				put_u32(pl + 4 + 4 * j++, (uint32_t)i);
		rc = emit(ctx, CTL_PLAN, pl, 4 + (size_t)cnt * 4);
	}
	for (size_t i = 0; rc == 0 && i < f->m.n; i++) {
		uint32_t n = state[i] == 1 ? chunk_count(f->m.e[i].size) : 0;
		for (uint32_t first = 0; rc == 0 && first < n; first += SYNC_CHUNKS_PER_FRAME) {
			uint32_t c = n - first < SYNC_CHUNKS_PER_FRAME ? n - first : SYNC_CHUNKS_PER_FRAME;
			uint8_t *b = malloc(12 + (size_t)c);
			if (!b) {
				rc = -ENOMEM;
				break;
			}
			put_u32(b, (uint32_t)i);
			put_u32(b + 4, first);
			put_u32(b + 8, c);
			for (uint32_t k = 0; k < c; k++)   /* HAVE or WHOLE: blocks are one host's */
				b[12 + k] = how[i][first + k] ? CH_WHOLE : CH_HAVE;
			rc = emit(ctx, CTL_CHUNKS, b, 12 + (size_t)c);
			free(b);
		}
	}
	if (rc == 0)
		rc = emit(ctx, CTL_CHUNKS_END, NULL, 0);
	for (size_t i = 0; how && i < f->m.n; i++)
		free(how[i]);
	free(how);
	free(state);
	free(pl);
	*count = cnt;
	return rc;
}

static int to_sender(void *ctx, uint8_t type, const uint8_t *p, size_t n)
{
	return ctl_send(&((struct fan *)ctx)->sc, type, p, n);
}

/* Where h's data connections go: its --hosts address (resolved here),
 * else the address its ssh was reached on (its CTL_DATA), else what its
 * name resolves to here, else the name itself (for the host before it to
 * resolve). Never empty. */
static void data_addr_of(struct fhost *h)
{
	const char *a = h->t->data_addr && *h->t->ip ? h->t->ip
	                : *h->cd.addr ? h->cd.addr
	                : *h->t->ip ? h->t->ip
	                : rsh_bare_host(h->t->data_addr ? h->t->data_addr : h->t->host);
	snprintf(h->addr, sizeof h->addr, "%s", a);
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
	/* the sender takes only an IP literal from DATA; a name it dials as its
	 * own idea of the address */
	size_t al = rsh_is_ip(h->addr) ? strlen(h->addr) : 0;
	snprintf(f->first_addr, sizeof f->first_addr, "%s", h->addr);
	uint8_t msg[2 + 32 + 256];
	put_u16(msg, h->cd.port);
	memcpy(msg + 2, h->cd.key, 32);
	memcpy(msg + 34, h->addr, al);
	pthread_mutex_lock(&f->smu);   /* the agents may send PROGRESS from now on */
	int rc = ctl_send(&f->sc, CTL_DATA, msg, 34 + al);
	pthread_mutex_unlock(&f->smu);
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
		if (h->out)
			continue;   /* (--watch: not in this round) */
		if (!all.code && h->code)
			all.code = (uint32_t)(h->code > 255 ? RD_EXIT_PROTO : h->code);
		result_add(&all, &h->res);
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

void *fan_hub_main(void *arg)
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
		f->h[k].pos = f->h[k].planned && f->h[k].nplan ? 0 : -1;
	uint32_t count = 0;
	int rc = fan_union(f, to_sender, f, &count);
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
			f->feed_lost = 1;
			for (int k = 0; k < f->n; k++)
				if (f->h[k].stage != H_END) {
					pthread_mutex_lock(&f->h[k].wmu);
					ctl_send(&f->h[k].c, CTL_ERROR, f->sc.buf, n);
					pthread_mutex_unlock(&f->h[k].wmu);
				}
		} else {
			f->feed_lost = 1;
			stop_hosts(f, RD_EXIT_CONN, "the sender stopped");
		}
	} else if (rc < 0) {
		stop_hosts(f, RD_EXIT_FILEIO, "the client failed");
	}
	wait_hosts(f, H_END);
	send_done(f);
	return NULL;
}

