/*
 * rdcp --sync --watch: the client's loop (the changes come from watch.c).
 * A whole sync first, then a round for each batch of changes over the one
 * login: ROUND, the batch as FILES, and a run of the usual messages on both
 * sides (the server's rounds(), server.c). A far side that is lost is
 * started again with a backoff; a signal between rounds ends the watch.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "sync/client_int.h"
#include "sync/select/select.h"
#include "sync/watch.h"
#include "sync/wire/proto.h"

int client_watch_check(const struct sync_opts *o, const struct endpoint *src, int nsrc,
                       const struct endpoint *dst)
{
	size_t l = strlen(src->path);
	struct stat st;
	const char *why = NULL;
	if (src->host)
		why = "--watch watches a local SRC: run rdcp on the host that has it";
	else if (nsrc > 1)
		why = "--watch takes one SRC";
	else if (!(o->flags & SYNC_F_RECURSIVE))
		why = "--watch mirrors a tree: add -r (or -a)";
	else if (o->files_from)
		why = "--watch and --files-from do not go together: --watch finds what changed";
	else if (o->flags & SYNC_F_DRYRUN)
		why = "--watch and -n/--dry-run do not go together";
	else if (o->flags & SYNC_F_REMOVE_SOURCE)
		why = "--watch and --remove-source-files do not go together yet";
	if (why) {
		log_err("%s", why);
		return RD_EXIT_USAGE;
	}
	if (stat(src->path, &st) < 0) {
		log_err("--watch: %s: %s", src->path, strerror(errno));
		return RD_EXIT_SELECT;
	}
	if (!S_ISDIR(st.st_mode)) {
		log_err("--watch: %s: not a directory (--watch watches a directory)", src->path);
		return RD_EXIT_SELECT;
	}
	if (!(o->flags & SYNC_F_MIRROR) && (!l || src->path[l - 1] != '/')) {
		/* a copy of SRC into DST/SRC: the rounds' paths are SRC's contents */
		log_err("--watch mirrors a directory's contents: write SRC as '%s/' (and DST "
		        "as '%s%s/%s' to keep its name there)", src->path, dst->host ? "host:" : "",
		        dst->path, src->path);
		return RD_EXIT_USAGE;
	}
	return 0;
}

/* A code after which the watch connects again: the far side or the way to
 * it went away, or another rdcp held DST for a while. */
static int reconnects(int code)
{
	return code == RD_EXIT_CONN || code == RD_EXIT_PROTO || code == RD_EXIT_TIMEOUT ||
	       code == RD_EXIT_START || code == RD_EXIT_LOCKED;
}

/* One --watch connection: the far side, its channel, the frames it sent. */
struct wconn {
	pid_t pid;
	struct ctl c;
	uint64_t frames;
	struct tp_session *ts;   /* a one-stream data session, kept between rounds */
};

/* Start the far side (the remote shell's login, or a fork). 0 or an exit
 * code (said). */
static int wconn_open(struct wconn *wc, const struct sync_opts *o, const char *remote,
                      struct sync_watch *w)
{
	*wc = (struct wconn){ .pid = -1, .c = { .in = -1, .out = -1 } };
	sync_watch_hold(w, 1);   /* the fork copies no lock the event thread holds */
	wc->pid = remote ? client_spawn_remote(o, remote, &wc->c) : client_spawn_local(&wc->c);
	sync_watch_hold(w, 0);
	if (wc->pid < 0) {
		log_err("cannot start the other side: %s", strerror(errno));
		return RD_EXIT_START;
	}
	if (remote && client_await_login(o, remote, &wc->c) < 0) {
		kill(wc->pid, SIGKILL);
		waitpid(wc->pid, NULL, 0);
		close(wc->c.out);
		close(wc->c.in);
		wc->pid = -1;
		return RD_EXIT_START;
	}
	ctl_set_timeout(&wc->c, o->timeout * 1000);
	return 0;
}

/* End it: the channel's end tells the server the watch is over. failed:
 * do not wait for it long (client_reap()). */
static void wconn_close(struct wconn *wc, int failed)
{
	if (wc->pid < 0)
		return;
	tp_close(wc->ts);
	wc->ts = NULL;
	ctl_free(&wc->c);
	close(wc->c.out);
	if (wc->c.in != wc->c.out)
		close(wc->c.in);
	int status;
	client_reap(wc->pid, &status, failed);
	wc->pid = -1;
}

/* The far side closed, under the interrupt's mutex (a signal's thread does
 * not stop what we close). */
static void watch_far_close(struct interrupt *in, struct wconn *wc, int failed)
{
	pthread_mutex_lock(&in->mu);
	wconn_close(wc, failed);
	in->far = -1;
	in->c = NULL;
	pthread_mutex_unlock(&in->mu);
}

/* One round: the whole tree (first, or after events were lost), or the
 * batch's paths. Its code; what it did in *res. */
static int watch_round(struct sync_opts *o, struct wconn *wc, const struct endpoint *src,
                       const struct endpoint *dst, const char *remote, const char **paths,
                       const struct sync_watch_batch *b, int first, struct sync_result *res,
                       struct sync_paths *as_read)
{
	char *all[] = { "" };
	struct role r = { .ctl = &wc->c, .flags = o->flags, .tp = o->tp, .is_client = 1, .o = o,
	                  .srcs = paths, .nsrc = 1, .verbose = o->verbose,
	                  .progress = o->progress, .timeout = o->timeout,
	                  .fails = o->json ? sync_fails_new() : NULL };
	if (!remote && r.tp.kind == TP_AUTO)
		r.tp.kind = TP_TCP;
	/* a file rewritten as it is read goes as read, not refused round after
	 * round: the writer's next event brings its next version */
	r.as_read = as_read;
	r.keep = &wc->ts;   /* one stream (RDMA's default): its session goes on */
	if (!first && !b->whole && !o->tp.streams)
		r.tp.streams = 1;   /* a batch's round, unless told: one stream, kept
		                       open (a whole round takes the default) */
	int rc;
	uint64_t tx = wc->c.tx_bytes, rx = wc->c.rx_bytes;   /* the round's own, below */
	*res = (struct sync_result){ 0 };
	if (first) {
		o->round = 0;
		o->files_from = NULL;
		rc = client_play(o, &r, (struct endpoint *)src, (struct endpoint *)dst, remote, res);
	} else {
		o->round = 1;
		o->files_from = "-";
		o->files = b->whole ? all : b->paths;
		o->nfiles = b->whole ? 1 : b->n;
		rc = ctl_send(&wc->c, CTL_ROUND, "", 0);
		if (rc == 0)
			rc = sync_files_send(&wc->c, o);
		r.path = src->path;
		r.connect_addr = o->data_addr ? o->data_addr
		                 : remote ? rsh_bare_host(remote) : "127.0.0.1";
		if (rc == 0)
			sync_sender(&r, res);
		o->files = NULL;
		o->nfiles = 0;
	}
	wc->frames += r.frames;
	res->whole = first || b->whole;
	res->ctl_tx = wc->c.tx_bytes - tx;
	res->ctl_rx = wc->c.rx_bytes - rx;
	int code = (int)res->code;
	if (!code && rc < 0)
		code = rc == -ETIME ? RD_EXIT_TIMEOUT : RD_EXIT_CONN;
	res->fails = r.fails;
	res->as_read = as_read;
	return code;
}

/* Is the watch being ended (a signal between rounds)? Else mark us busy:
 * a signal from now on stops the round (exit 20). */
static int watch_busy(struct interrupt *in, int busy)
{
	pthread_mutex_lock(&in->mu);
	int stopping = in->stopping;
	if (!stopping)
		in->busy = busy;
	pthread_mutex_unlock(&in->mu);
	return stopping;
}

/* The report of a round: -v's summary, --json's object (with the round and
 * the age of its oldest change when it landed). */
static void watch_report(struct sync_opts *o, struct sync_result *res, int code, double t0,
                         unsigned round, long long first_ms)
{
	res->round = round;
	res->lag_s = first_ms ? (double)(clock_ms() - first_ms) / 1000 : -1;
	if (res->as_read)
		client_say_as_read(o, (struct sync_paths *)res->as_read);
	sync_report(o, res, code, t0);
	sync_fails_free(res->fails);
	res->fails = NULL;
}

/* rdcp --sync --watch SRC/ [host:]DST: a whole sync, then a round for each
 * batch of changes, over one login; a lost far side is started again
 * (with a backoff) and the next round is a whole one. Ends with a signal
 * between rounds (exit 0), or with a round's failure that another cannot
 * mend (its code). */
int sync_watch_client(struct sync_opts *o, const struct endpoint *src,
                        const struct endpoint *dst, const char **paths)
{
	const char *remote = dst->host;
	struct sync_watch *w;
	static struct interrupt in;
	int code = client_watch_check(o, src, o->nsrc, dst);
	if (code)
		return code;
	signal(SIGPIPE, SIG_IGN);
	if (!o->no_index)
		idx_cache_dir_warn();
	if (!remote)
		sync_lock_share();
	/* signals first: the watch's thread must not take them */
	pthread_mutex_init(&in.mu, NULL);
	in.far = -1;
	client_catch_interrupts(&in);
	/* watched before the first sync: what changes during it is not missed */
	if (sync_watch_open(&w, src->path, o->watch, o->watch_poll_s) < 0)
		return RD_EXIT_SELECT;
	if (o->verbose && !o->quiet && !o->json && o->watch != SYNC_WATCH_POLL)
		printf("watching %s with %s (%zu directories)\n", src->path, sync_watch_how(w),
		       sync_watch_dirs(w));   /* (0 with fanotify: one mark) */
	pthread_mutex_lock(&in.mu);
	in.watch = w;
	pthread_mutex_unlock(&in.mu);
	unsigned round = 0, backoff = 1;
	int connected = 0;
	struct wconn wc = { .pid = -1 };
	struct sync_watch_batch b = { 0 };
	struct idx_manifest grown = { 0 };   /* the sender's, from round to round */
	o->grown = &grown;
	struct sync_wstatus *ws = sync_wstatus_start(w, o->human, o->quiet);
	while (!watch_busy(&in, 1)) {
		sync_wstatus_busy(ws);   /* before a fork (wconn_open()) too */
		double t0 = sync_report_begin(o, 1);
		struct sync_result res = { 0 };
		struct sync_paths as_read = { 0 };   /* the round's, for -v and --json */
		int first = wc.pid < 0;
		if (first && (code = wconn_open(&wc, o, remote, w)) == 0) {
			pthread_mutex_lock(&in.mu);
			in.far = wc.pid;
			in.c = &wc.c;
			pthread_mutex_unlock(&in.mu);
		}
		if (!code)
			code = watch_round(o, &wc, src, dst, remote, paths, &b, first, &res, &as_read);
		watch_report(o, &res, code, t0, round++, b.first_ms);
		sync_paths_free(&as_read);
		sync_wstatus_round(ws, res.wire, res.lag_s);
		int per_file = code == RD_EXIT_PARTIAL || code == RD_EXIT_VANISHED ||
		               code == RD_EXIT_DEL_LIMIT || code == RD_EXIT_FILEIO;
		if (per_file) {
			/* its paths again (and the deletions an error held back): at once
			 * after a file that vanished (gone, it is no error then), in 5 s
			 * after one that could not be read or written */
			b.whole |= first;
			sync_watch_again(w, &b, code == RD_EXIT_VANISHED ? 0 : 5000);
		}
		sync_watch_batch_free(&b);
		if (code && !per_file && !reconnects(code))
			break;   /* the options or the trees: another round would fail too */
		if (code && !per_file) {
			watch_far_close(&in, &wc, 1);
			if (!connected)
				break;   /* it never worked: say so now, not retry forever */
			log_warn("--watch: the connection to %s was lost (exit %d): connecting "
			         "again in %u s", remote ? remote : "the receiver", code, backoff);
			watch_busy(&in, 0);
			for (unsigned t = 0; t < backoff * 10 && !watch_busy(&in, 0); t++)
				usleep(100000);
			backoff = backoff < 32 ? 2 * backoff : 60;
			code = 0;
			continue;
		}
		connected = 1;
		backoff = 1;
		code = 0;
		watch_busy(&in, 0);
		if (sync_watch_next(w, &b) != 0)
			break;   /* a signal: the watch ends */
	}
	int stopped = in.stopping;
	sync_wstatus_stop(ws);
	watch_far_close(&in, &wc, code != 0);
	pthread_mutex_lock(&in.mu);
	in.watch = NULL;   /* a signal from now on: exit 20, as before the watch */
	pthread_mutex_unlock(&in.mu);
	sync_watch_close(w);
	o->grown = NULL;
	idx_manifest_free(&grown);
	if (stopped) {
		if (o->verbose && !o->quiet && !o->json)
			printf("watch ended by SIG%s\n", sigabbrev_np(stopped));
		return RD_EXIT_OK;
	}
	return code;
}

