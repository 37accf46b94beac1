/*
 * --watch into a fan-out: rdcp --sync --watch SRC/ host1:DST host2:DST ...
 * A whole round first, every login at once (fanout.c); then the logins
 * stay up, each host's rdcp waiting in rounds() (server.c), and each batch
 * of changes is one round over them: every live host is sent ROUND and the
 * batch as FILES, plans against its own DST, and the chain carries the
 * data as in a run. A host whose login is lost is cut out and said once;
 * the others go on. It is logged in again 1, 2, 4 ... 60 s later in a
 * whole round of its own, which catches it up from its index, and is said
 * again when it is back. A signal between rounds ends the watch, exit 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/exitcode.h"
#include "common/log.h"
#include "index/index.h"
#include "sync/fanout/fanout_int.h"
#include "sync/watch.h"

#define LIVE_BACKOFF_MAX_S 60

/* A host's outage: when it is tried next, since when it is down. */
struct outage {
	long long at_ms, since_ms;
	unsigned backoff_s;
};

/* Who is in the next round: the hosts due for a login (login), else the
 * live ones. Their count. */
static int pick(struct fhost *h, const struct fan_target *t, int nt,
                const struct outage *d, int login, long long now)
{
	int cnt = 0;
	for (int k = 0; k < nt; k++) {
		if (t[k].skip)
			h[k].out = 1;
		else if (login)
			h[k].out = h[k].live || (h[k].down && d[k].at_ms > now);
		else
			h[k].out = !h[k].live;
		cnt += !h[k].out;
	}
	return cnt;
}

/* The earliest time a host that is down is due (0: none is down). */
static long long next_login(const struct fhost *h, const struct outage *d, int nt)
{
	long long at = 0;
	for (int k = 0; k < nt; k++)
		if (h[k].down && (!at || d[k].at_ms < at))
			at = d[k].at_ms;
	return at;
}

/* After a round: a host of it that lost its login is down (said the first
 * time, with why); one that was down and answered is back (said). The
 * number of live hosts. first: the first round, whose failures are said
 * as a run's (the watch ends when no host answered). */
static int outages(struct fhost *h, const struct fan_target *t, int nt, struct outage *d,
                   int first)
{
	long long now = clock_ms();
	int live = 0;
	for (int k = 0; k < nt; k++)
		live += h[k].live;
	for (int k = 0; k < nt; k++) {
		if (h[k].out || (first && !live))
			continue;
		if (h[k].live && h[k].down) {
			log_warn("%s: back after %.0f s: caught up", t[k].label,
			         (double)(now - d[k].since_ms) / 1000);
			h[k].down = 0;
		} else if (!h[k].live && !h[k].down) {
			/* once per outage: a cron job mails every line */
			log_err("%s: failed (exit %d): %s; the watch goes on without it and logs in "
			        "again in the background", t[k].label, h[k].code ? h[k].code : RD_EXIT_CONN,
			        h[k].why[0] ? h[k].why : "see above");
			h[k].down = 1;
			d[k] = (struct outage){ .since_ms = now, .backoff_s = 1, .at_ms = now + 1000 };
		} else if (!h[k].live) {
			d[k].backoff_s = d[k].backoff_s * 2 > LIVE_BACKOFF_MAX_S ? LIVE_BACKOFF_MAX_S
			                 : d[k].backoff_s * 2;
			d[k].at_ms = now + 1000LL * d[k].backoff_s;
		}
	}
	return live;
}

/* A code for which the round's paths go again: a file's (23, 24, 25, 11),
 * or a host's feed cut by another host that failed (10, 12, 30). */
static int again_for(int code)
{
	return code == RD_EXIT_PARTIAL || code == RD_EXIT_VANISHED || code == RD_EXIT_DEL_LIMIT ||
	       code == RD_EXIT_FILEIO || code == RD_EXIT_CONN || code == RD_EXIT_PROTO ||
	       code == RD_EXIT_TIMEOUT;
}

/* Why the round's paths go again, or 0: a live host's code that again_for()
 * takes (a host that went down catches up by itself), else the sender's
 * own (rc, when no host failed). */
static int redo_code(const struct fhost *h, int nt, int rc)
{
	int any = 0;
	for (int k = 0; k < nt; k++) {
		if (h[k].out || !h[k].code)
			continue;
		if (h[k].live && again_for(h[k].code))
			return h[k].code;
		any = 1;
	}
	return !any && again_for(rc) ? rc : 0;
}

/* The round's report: -v's lines (per host and the summary), --json's
 * object with "hosts", its round and lag. The round's code: the first
 * failed host's of the round, else the sender's. */
static int report(struct sync_opts *o, const struct fan_target *t, int nt,
                  struct fhost *h, struct sync_result *res, double t0, unsigned round,
                  int whole)
{
	int code = 0;
	for (int k = 0; k < nt && !code; k++)
		if (!h[k].out && !h[k].src_failed)
			code = h[k].code;
	if (!code)
		code = (int)res->code;
	fan_report_hosts(o, t, nt, h);
	struct sync_result all = { .transport = res->transport, .total_size = res->total_size,
	                           .flist_bytes = res->flist_bytes, .ctl_tx = res->ctl_tx,
	                           .flist_gen_us = res->flist_gen_us,
	                           .flist_xfer_us = res->flist_xfer_us, .ctl_rx = res->ctl_rx,
	                           .we_sent = 1, .wire = res->wire, .hosts = nt,
	                           .round = round, .whole = whole, .lag_s = res->lag_s };
	memcpy(all.entries, res->entries, sizeof all.entries);
	for (int k = 0; k < nt; k++)
		if (!h[k].out)
			result_add(&all, &h[k].res);
	char *hj = o->json ? fan_hosts_json(t, nt, h) : NULL;
	sync_report_hosts(o, &all, code, t0, "hosts", hj);
	free(hj);
	return code;
}

/* The loop: a login round when a host is due (the first: all of them),
 * else a batch's round for the live ones. The exit code. */
static int live_loop(struct sync_opts *o, struct fan *f, struct fhost *h,
                     const struct fan_target *t, int nt, const char *src,
                     struct sync_wstatus *ws)
{
	char *all[] = { "" };
	struct outage *d = calloc((size_t)(nt ? nt : 1), sizeof *d);
	struct sync_watch_batch b = { 0 };
	unsigned round = 0;
	int code = d ? 0 : RD_EXIT_FILEIO, ever = 0, have = 0;
	while (!code && !fan_intr_busy(1)) {
		long long now = clock_ms();
		int login = !ever || (next_login(h, d, nt) && next_login(h, d, nt) <= now);
		int n = pick(h, t, nt, d, login, now);
		sync_wstatus_busy(ws);
		double t0 = sync_report_begin(o, 1);
		struct sync_result res = { 0 };
		o->round = !login;
		o->files_from = login ? NULL : "-";
		o->files = login ? NULL : b.whole ? all : b.paths;
		o->nfiles = login ? 0 : b.whole ? 1 : b.n;
		if (n)
			fan_run_round(f, h, nt, &src, 1, &res);
		o->files = NULL;
		o->nfiles = 0;
		int live = outages(h, t, nt, d, !ever);
		res.lag_s = !login && b.first_ms ? (double)(clock_ms() - b.first_ms) / 1000 : -1;
		int rc = n ? report(o, t, nt, h, &res, t0, round++, login || b.whole) : 0;
		if (n)
			sync_wstatus_round(ws, res.wire, res.lag_s);
		if (!ever && !live) {
			code = rc ? rc : RD_EXIT_START;   /* it never worked: said, not retried */
			break;
		}
		ever = 1;
		if (rc && !again_for(rc)) {
			int any = 0;
			for (int k = 0; k < nt; k++)
				any |= !h[k].out && h[k].code;
			if (!any) {
				code = rc;   /* the sender's own: the options or SRC (said) */
				break;
			}
		}
		int redo = redo_code(h, nt, rc);
		if (redo) {
			/* what failed for its files, or a feed that was cut, goes again:
			 * at once after a lost feed or a file that vanished, in 5 s
			 * after one that could not be read or written */
			struct sync_watch_batch whole = { .whole = 1 };
			sync_watch_again(f->w, login ? &whole : &b, redo == RD_EXIT_PARTIAL ||
			                 redo == RD_EXIT_FILEIO || redo == RD_EXIT_DEL_LIMIT ? 5000 : 0);
		}
		if (!login || !have)
			sync_watch_batch_free(&b);
		if (login && have)
			continue;   /* a batch already taken waits for its own round */
		fan_intr_busy(0);
		int w = sync_watch_next_by(f->w, &b, next_login(h, d, nt));
		if (w == 1)
			break;   /* a signal: the watch ends */
		have = w == 0;
	}
	sync_watch_batch_free(&b);
	free(d);
	return code;
}

int fan_watch(struct sync_opts *o, struct fan_target *t, int nt, const char *src)
{
	struct fan f = { .o = o, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
	                 .smu = PTHREAD_MUTEX_INITIALIZER, .keep = 1 };
	struct fhost *h = calloc((size_t)(nt ? nt : 1), sizeof *h);
	struct idx_manifest grown = { 0 };   /* the sender's, from round to round */
	if (!h)
		return RD_EXIT_FILEIO;
	if (!o->no_index)
		idx_cache_dir_warn();
	/* watched before the first round: what changes during it is not missed */
	if (sync_watch_open(&f.w, src, o->watch, o->watch_poll_s) < 0) {
		free(h);
		return RD_EXIT_SELECT;
	}
	if (o->verbose && !o->quiet && !o->json && o->watch != SYNC_WATCH_POLL)
		printf("watching %s with %s (%zu directories) into %d hosts\n", src,
		       sync_watch_how(f.w), sync_watch_dirs(f.w), nt);
	for (int k = 0; k < nt; k++) {
		h[k].t = &t[k];
		h[k].pid = -1;
		h[k].c = (struct ctl){ .in = -1, .out = -1 };
	}
	o->grown = &grown;
	fan_intr_watch(f.w);
	struct sync_wstatus *ws = sync_wstatus_start(f.w, o->human, o->quiet);
	int code = live_loop(o, &f, h, t, nt, src, ws);
	int stopped = fan_intr_busy(1);
	sync_wstatus_stop(ws);
	fan_intr_watch(NULL);   /* a signal from now on: exit 20, as in a run */
	for (int k = 0; k < nt; k++)
		if (h[k].live)
			fan_host_close(&h[k], code != 0);   /* its rdcp leaves at the channel's end */
	sync_watch_close(f.w);
	o->grown = NULL;
	idx_manifest_free(&grown);
	free(h);
	if (stopped) {
		if (o->verbose && !o->quiet && !o->json)
			printf("watch ended by SIG%s\n", sigabbrev_np(stopped));
		return RD_EXIT_OK;
	}
	return code;
}
