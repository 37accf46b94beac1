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
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "sync/fanout/fanout_int.h"
#include "sync/watch.h"

#define FAN_ROUNDS 2   /* the hosts after a failed one get one more round */

/* --- rounds, the host list, the report --- */

/* Ctrl-C, SIGTERM, SIGHUP: every host's channel is closed (each receiver
 * unwinds and leaves), a second later its remote shell is killed; exit 20. */
static struct {
	sigset_t set;
	struct fan *f;   /* the round under way */
	pthread_mutex_t mu;
	struct sync_watch *w;   /* --watch: a signal between rounds ends it */
	int busy, stopping;
} intr = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void *interrupt_main(void *arg)
{
	int sig;
	(void)arg;
	if (sigwait(&intr.set, &sig) != 0)
		return NULL;
	pthread_mutex_lock(&intr.mu);
	if (intr.w && !intr.busy) {   /* --watch, between rounds: it ends, exit 0 */
		intr.stopping = sig;
		sync_watch_stop(intr.w);
		pthread_mutex_unlock(&intr.mu);
		return NULL;
	}
	/* mu stays ours until _exit: nothing closes what we stop */
	log_err("interrupted by %s: stopping every host", sigabbrev_np(sig));
	struct fan *f = intr.f;
	for (int k = 0; f && k < f->n; k++) {
		shutdown(f->h[k].c.out, SHUT_RDWR);
		close(f->h[k].c.out);
	}
	for (int i = 0; f && i < 50; i++) {
		int left = 0;
		for (int k = 0; k < f->n; k++) {
			struct fhost *h = &f->h[k];
			if (h->pid > 0 && !h->reaped && waitpid(h->pid, NULL, WNOHANG) == h->pid)
				h->reaped = 1;   /* its pid may be another process's now */
			left += h->pid > 0 && !h->reaped;
		}
		if (!left)
			break;
		usleep(20000);
	}
	for (int k = 0; f && k < f->n; k++)
		if (f->h[k].pid > 0 && !f->h[k].reaped && kill(f->h[k].pid, SIGTERM) == 0) {
			usleep(100000);
			kill(f->h[k].pid, SIGKILL);
		}
	_exit(RD_EXIT_SIGNAL);
}

void fan_intr_watch(struct sync_watch *w)
{
	pthread_mutex_lock(&intr.mu);
	intr.w = w;
	pthread_mutex_unlock(&intr.mu);
}

int fan_intr_busy(int busy)
{
	pthread_mutex_lock(&intr.mu);
	int stopping = intr.stopping;
	if (!stopping)
		intr.busy = busy;
	pthread_mutex_unlock(&intr.mu);
	return stopping;
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

/* What a host asked for: needed only while its round runs. */
static void plan_free(struct fhost *h)
{
	for (uint32_t j = 0; h->maps && j < h->nplan; j++)
		chunk_map_free(&h->maps[j]);
	free(h->maps);
	free(h->plan);
	h->maps = NULL;
	h->plan = NULL;
}

void fan_host_close(struct fhost *h, int failed)
{
	pthread_mutex_lock(&intr.mu);
	ctl_free(&h->c);
	if (h->c.out >= 0)
		close(h->c.out);
	h->c.out = -1;
	pthread_mutex_unlock(&intr.mu);
	if (h->c.in >= 0)
		close(h->c.in);
	h->c.in = -1;
	h->live = 0;
	if (h->pid < 0)
		return;
	if (h->no_answer)   /* nothing to wait for: it never answered */
		kill(h->pid, SIGKILL);
	int st = reap(h->pid, failed);
	pthread_mutex_lock(&intr.mu);
	h->reaped = 1;   /* Ctrl-C from now on leaves its pid alone */
	pthread_mutex_unlock(&intr.mu);
	int xs = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	if (h->dead && h->r.frames == 0 && !h->no_answer) {   /* rdcp never answered */
		h->code = RD_EXIT_START;
		snprintf(h->why, sizeof h->why, "could not start rdcp there (remote "
		         "shell exit %d): check the host, the login, and --rdcp-path", xs);
	}
	h->pid = -1;
}

/* A host's state of one round, cleared; what lasts from round to round
 * (its login, and a watched host's outage) kept. */
static void round_reset(struct fhost *h)
{
	memset(h->addr, 0, sizeof h->addr);
	memset(&h->r, 0, sizeof h->r);
	memset(&h->cd, 0, sizeof h->cd);
	memset(&h->res, 0, sizeof h->res);
	h->stage = h->out ? H_END : H_START;
	h->pos = h->next = -1;
	h->plan = NULL;
	h->maps = NULL;
	h->nplan = 0;
	h->planned = h->relay_said = h->relay_rc = h->th_ok = 0;
	h->got_result = h->dead = h->bad_links = h->no_answer = h->src_failed = 0;
	if (!h->out || !h->down) {   /* (a host that is down keeps why, for --json) */
		h->code = 0;
		h->why[0] = 0;
	}
}

void fan_run_round(struct fan *f, struct fhost *h, int n, const char *const *paths,
                   int nsrc, struct sync_result *res)
{
	const struct sync_opts *o = f->o;
	const char *words[] = { o->rdcp_path ? o->rdcp_path : "rdcp", "--server", NULL };
	f->h = h;
	f->n = n;
	f->fr = NULL;
	f->nfr = f->fr_state = f->linked = f->nchain = f->feed_lost = 0;
	f->m = (struct idx_manifest){ 0 };
	f->progress_host = -1;
	f->chain = calloc((size_t)n, sizeof *f->chain);
	f->first_addr[0] = 0;
	/* the limit counts from one spawn of every login at once: the logins
	 * of hundreds of hosts share this machine's cores and link */
	f->login_s = o->contimeout >= 0 ? o->contimeout
	             : SYNC_FAN_CONTIMEOUT + n / SYNC_FAN_CONTIMEOUT_HOSTS;
	if (f->w)
		sync_watch_hold(f->w, 1);   /* a fork copies no lock the event thread holds */
	/* every remote shell at once: logins overlap (a live one's is up) */
	for (int k = 0; k < n; k++) {
		round_reset(&h[k]);
		pthread_mutex_init(&h[k].wmu, NULL);
		if (h[k].out || h[k].live)
			continue;
		h[k].c = (struct ctl){ .in = -1, .out = -1 };
		h[k].reaped = 0;
		h[k].pid = rsh_spawn(o->rsh, h[k].t->host, words, &h[k].c.out, &h[k].c.in,
		                     f->login_s);
	}
	if (f->w)
		sync_watch_hold(f->w, 0);
	pthread_mutex_lock(&intr.mu);
	intr.f = f;
	pthread_mutex_unlock(&intr.mu);
	for (int k = 0; k < n; k++) {
		h[k].fan = f;
		if (h[k].out)
			continue;
		/* (frames: a live host answered in an earlier round) */
		h[k].r = (struct role){ .ctl = &h[k].c, .is_client = 1, .o = f->o,
		                        .frames = h[k].live };
		if (h[k].pid < 0) {
			fan_fail(&h[k], RD_EXIT_START, "the remote shell could not be started");
			h[k].dead = 1;
			h[k].stage = H_END;
			continue;
		}
		if (!h[k].live)
			ctl_set_timeout(&h[k].c, o->timeout * 1000);
		if ((errno = pthread_create(&h[k].th, NULL, fan_agent_main, &h[k])) != 0) {
			fan_fail(&h[k], RD_EXIT_START, "no thread for it");
			h[k].stage = H_END;
		} else {
			h[k].th_ok = 1;
		}
	}
	int sv[2] = { -1, -1 }, hub_on = 0;
	pthread_t hub;
	struct ctl sc = { .in = -1, .out = -1 };
	if (f->chain && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
		sc.in = sc.out = sv[0];
		f->sc = (struct ctl){ .in = sv[1], .out = sv[1] };
		hub_on = (errno = pthread_create(&hub, NULL, fan_hub_main, f)) == 0;
	}
	if (hub_on) {
		/* connect_addr: the first host's address when the hub cannot give
		 * it in DATA (a name, not an IP literal); set before DATA is sent */
		struct role r = { .ctl = &sc, .flags = o->flags, .tp = o->tp, .is_client = 1,
		                  .all_hashes = 1,
		                  .o = o, .srcs = paths, .nsrc = nsrc, .path = paths[0],
		                  .verbose = o->verbose, .progress = o->progress,
		                  .timeout = o->timeout, .connect_addr = f->first_addr };
		if (r.tp.streams > 1 && !o->quiet)
			log_err("--streams %d: a fan-out uses one stream per hop (a relay forwards "
			        "in arrival order, which several streams do not keep)", r.tp.streams);
		r.tp.streams = 1;   /* every hop one stream: see relay_begin() */
		sync_sender(&r, res);
		shutdown(sv[0], SHUT_RDWR);   /* the hub sees the sender's end */
		pthread_join(hub, NULL);
		ctl_free(&sc);
		ctl_free(&f->sc);
	} else {
		log_err("cannot start the fan-out: %s", strerror(f->chain ? errno : ENOMEM));
		res->code = RD_EXIT_FILEIO;
		/* the agents wait for a manifest and a chain that will not come */
		pthread_mutex_lock(&f->mu);
		f->fr_state = -1;
		f->linked = 1;
		pthread_cond_broadcast(&f->cv);
		pthread_mutex_unlock(&f->mu);
	}
	if (sv[0] >= 0) {
		close(sv[0]);
		close(sv[1]);
	}
	for (int k = 0; k < n; k++) {
		if (h[k].th_ok)
			pthread_join(h[k].th, NULL);
		pthread_mutex_destroy(&h[k].wmu);
		if (h[k].out)
			continue;
		plan_free(&h[k]);
		/* --watch: a host that answered waits for the next ROUND */
		h[k].live = f->keep && h[k].pid > 0 && h[k].got_result && !h[k].dead;
		if (!h[k].live)
			fan_host_close(&h[k], h[k].code != 0 || h[k].dead);
	}
	pthread_mutex_lock(&intr.mu);
	intr.f = NULL;
	pthread_mutex_unlock(&intr.mu);
	for (int k = 0; k < f->nfr; k++) {
		if (f->fr[k].type == CTL_MANIFEST_END)   /* the archive key */
			explicit_bzero(f->fr[k].p, f->fr[k].n);
		free(f->fr[k].p);
	}
	free(f->fr);
	idx_manifest_free(&f->m);
	free(f->chain);
}


/* A failure that a broken chain explains: the data connection lost,
 * broken off, or silent. */
static int lost_feed(int code)
{
	return code == RD_EXIT_CONN || code == RD_EXIT_PROTO || code == RD_EXIT_TIMEOUT;
}

/* The hosts to run again: those that lost their feed (above) after a host
 * before them in the chain died, could not reach its next one, or lost its
 * own feed; and the first host too when the sender's data session failed
 * (feed_lost: its feed was cut, say by a link that went silent until
 * --timeout). A host whose failure is its own (a full disk, --max-delete)
 * is not retried, nor are the ones after it: it went on forwarding. */
int fan_retry_set(struct fhost *h, int n, int feed_lost, int *which)
{
	int cnt = 0, broken = feed_lost;
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
		if (broken && !x->dead && lost_feed(x->code))
			which[cnt++] = order[p];
		if (x->dead || x->relay_rc || lost_feed(x->code))
			broken = 1;
	}
	free(order);
	/* the hosts with the most links that could not be made go last (an
	 * insertion sort: stable, and a retry set is short): a host whose own
	 * link is down then fails alone at the chain's end instead of cutting
	 * the sender off from every host after it */
	for (int k = 1; k < cnt; k++)
		for (int j = k; j > 0 && h[which[j - 1]].bad_links > h[which[j]].bad_links; j--) {
			int w = which[j];
			which[j] = which[j - 1];
			which[j - 1] = w;
		}
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

/* One run: a round of every host, then one more of those whose feed was
 * cut; the per-host report and the summary (code: a failure before, said
 * and reported). The exit code. */
static int fan_once(struct sync_opts *o, struct fan_target *t, int nt, const char **paths,
                    int nsrc, double t0, int code)
{
	struct fhost *last = calloc((size_t)(nt ? nt : 1), sizeof *last);
	struct sync_result res = { 0 };
	const char *moved = NULL;   /* --json's transport: any round's that moved data */
	if (!code && !last)
		code = RD_EXIT_FILEIO;
	struct fan f = { .o = o, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
	                 .smu = PTHREAD_MUTEX_INITIALIZER };
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
		fan_run_round(&f, h, nw, paths, nsrc, &res);
		wire += res.wire;
		moved = res.transport ? res.transport : moved;
		int *again = malloc((size_t)nw * sizeof *again);
		int na = again ? fan_retry_set(h, nw, f.feed_lost, again) : 0;
		for (int k = 0; k < nw; k++)
			last[which[k]] = h[k];   /* its outcome; it owns no memory now */
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
		fan_report_hosts(o, t, nt, last);
	for (int k = 0; !code && last && k < nt; k++)
		if (!t[k].skip && last[k].code)
			code = last[k].code;   /* the first failed host's, in the order given */
	/* the summary: our file list, every host's counts summed */
	struct sync_result all = { .transport = moved, .total_size = res.total_size,
	                           .flist_bytes = res.flist_bytes, .ctl_tx = res.ctl_tx,
	                           .flist_gen_us = res.flist_gen_us,
	                           .flist_xfer_us = res.flist_xfer_us,
	                           .ctl_rx = res.ctl_rx, .we_sent = 1, .wire = wire,
	                           .hosts = nt };
	memcpy(all.entries, res.entries, sizeof all.entries);
	for (int k = 0; last && k < nt; k++)
		result_add(&all, &last[k].res);
	char *hj = last && o->json ? fan_hosts_json(t, nt, last) : NULL;
	code = sync_report_hosts(o, &all, code, t0, "hosts", hj);
	free(hj);
	free(last);
	free(which);
	return code;
}

int sync_fanout(struct sync_opts *o, int first_dst)
{
	struct fan_target *t = NULL;
	int nt = 0, code = check_fanout(o);
	int nsrc = o->hosts ? o->nsrc : first_dst;
	const char **paths = calloc((size_t)nsrc + 1, sizeof *paths);
	if (!code && !paths)
		code = RD_EXIT_FILEIO;
	if (!code)
		code = fan_targets(o, first_dst, paths, nsrc, &t, &nt);
	o->src = paths && paths[0] ? paths[0] : o->src;
	o->dst = o->hosts ? o->hosts : first_dst < o->nsrc ? o->srcs[first_dst] : o->dst;
	if (!code) {
		/* two pipes per host: 512 hosts pass the usual soft limit of 1024 fds */
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
		fan_dedupe(t, nt, paths[0]);
		signal(SIGPIPE, SIG_IGN);
		catch_interrupts();
	}
	if (!code && o->watch)
		code = fan_watch(o, t, nt, paths[0]);
	else
		code = fan_once(o, t, nt, paths, nsrc, sync_report_begin(o, 1), code);
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
	return code;
}
