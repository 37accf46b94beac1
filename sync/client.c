/*
 * A sync run: the client (the rdcp the user started) starts the far side
 * with the remote shell (`ssh host rdcp --server`), or, for local to local,
 * forks it; the two talk over the control channel (docs/protocol.md), and
 * data goes over the transport, from the sender to the receiver.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "sync/fanout/fanout.h"
#include "sync/select/select.h"
#include "sync/sync_int.h"
#include "sync/wire/proto.h"
#include "sync/watch.h"

struct endpoint {
	char *host;   /* NULL: local */
	char *path;
};

static int parse_endpoint(const char *arg, struct endpoint *ep);

int sync_parse_endpoint(const char *arg, char **host, char **path)
{
	struct endpoint ep;
	int rc = parse_endpoint(arg, &ep);
	*host = ep.host;
	*path = ep.path;
	return rc;
}

/* "[user@]host:path" (no '/' before the ':'), else a local path. */
static int parse_endpoint(const char *arg, struct endpoint *ep)
{
	const char *colon = strchr(arg, ':'), *slash = strchr(arg, '/');
	ep->host = NULL;
	if (colon && (!slash || colon < slash) && colon != arg) {
		ep->host = strndup(arg, (size_t)(colon - arg));
		ep->path = strdup(*(colon + 1) ? colon + 1 : ".");
	} else {
		ep->path = strdup(arg);
	}
	return ep->path ? 0 : -ENOMEM;
}

/* Start `rsh host rdcp --server` with pipes; returns its pid. */
static pid_t spawn_remote(const struct sync_opts *o, const char *host, struct ctl *c)
{
	const char *words[] = { o->rdcp_path ? o->rdcp_path : "rdcp", "--server", NULL };
	pid_t pid = rsh_spawn(o->rsh, host, words, &c->out, &c->in,
	                      o->contimeout > 0 ? o->contimeout : 0);
	if (pid > 0)
		rsh_widen_pipe(c->in);   /* a pull's file list comes this way */
	return pid;
}

/* --contimeout S: the far side's first word (its rdcp's NOOP, or the
 * remote shell's end or junk) within S seconds. 0, or -ETIME (said). */
static int await_login(const struct sync_opts *o, const char *host, const struct ctl *c)
{
	struct pollfd p = { c->in, POLLIN, 0 };
	int rc;
	if (o->contimeout <= 0)
		return 0;
	while ((rc = poll(&p, 1, o->contimeout * 1000)) < 0 && errno == EINTR)
		;
	if (rc != 0)
		return 0;
	log_err("no answer from %s in %d s (--contimeout): the host is down, unreachable "
	        "or its login hangs", host, o->contimeout);
	return -ETIME;
}

/* Local to local: the far side is a child process on a socketpair. */
static pid_t spawn_local(struct ctl *c)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		dup2(sv[1], STDIN_FILENO);
		dup2(sv[1], STDOUT_FILENO);
		_exit(sync_serve(1));
	}
	close(sv[1]);
	c->in = c->out = sv[0];
	return pid;
}


/* Wait for the far side (or its remote shell). After a failed run, give it
 * 5 s to leave, then SIGKILL: a stopped or stuck peer must not keep us.
 * 1 when we killed it (its status is then ours, not what ended it). */
static int reap(pid_t pid, int *status, int failed)
{
	for (int i = 0; failed && i < 100; i++) {
		if (waitpid(pid, status, WNOHANG) == pid)
			return 0;
		usleep(50000);
	}
	if (failed)
		kill(pid, SIGKILL);
	waitpid(pid, status, 0);
	return failed;
}

/* The far side ended before it finished: killed by a signal (its own
 * status, or a remote shell's 128+N for it), or ssh's 255 once rdcp had
 * answered (the connection to the host was lost). The phrase into why;
 * 1 if so, else 0. */
static int ended_early(const char *remote, int status, uint64_t frames, char *why,
                       size_t cap)
{
	int xs = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	if (WIFSIGNALED(status))
		snprintf(why, cap, "killed by signal %d", WTERMSIG(status));
	else if (remote && xs > 128 && xs <= 128 + 64)
		snprintf(why, cap, "killed by signal %d: remote shell exit %d", xs - 128, xs);
	else if (remote && xs == 255 && frames > 0)
		snprintf(why, cap, "connection lost: remote shell exit 255");
	else
		return 0;
	return 1;
}

/* Ctrl-C (SIGINT), SIGTERM and SIGHUP, as rsync: stop the far side and
 * exit 20. They are blocked in every thread of the run and taken by one
 * thread that waits for them, so no handler runs amid a malloc. The far
 * side is given the end of the control channel first (a receiver then
 * unwinds and removes its named temp files), a second to leave, then
 * SIGTERM and SIGKILL. Unnamed (O_TMPFILE) files vanish with us. */
struct interrupt {
	sigset_t set;
	pid_t far;
	struct ctl *c;
	int fired;   /* the run is being stopped: its result is 20, not its own */
	/* --watch: a signal between two rounds ends the watch cleanly (exit 0);
	 * one during a round (busy) stops it as above */
	pthread_mutex_t mu;
	struct sync_watch *watch;
	int busy, stopping;
	sem_t started;   /* the thread runs: a fork from now copies no lock of
	                    its start (--watch forks after it) */
};

static int gone_within(pid_t pid, int ms)
{
	for (int i = 0; i < ms / 20; i++) {
		if (waitpid(pid, NULL, WNOHANG) != 0)
			return 1;
		usleep(20000);
	}
	return 0;
}

static void *interrupt_main(void *arg)
{
	struct interrupt *in = arg;
	int sig;
	sem_post(&in->started);
	if (sigwait(&in->set, &sig) != 0)
		return NULL;
	pthread_mutex_lock(&in->mu);
	struct sync_watch *w = in->watch;
	if (w && !in->busy) {   /* --watch, between rounds: it ends, exit 0 */
		in->stopping = sig;
		sync_watch_stop(w);
		pthread_mutex_unlock(&in->mu);
		return NULL;
	}
	/* mu stays ours until _exit: --watch's loop, which takes it to change
	 * or close the far side, cannot close what we are stopping */
	__atomic_store_n(&in->fired, 1, __ATOMIC_SEQ_CST);
	if (in->far <= 0) {   /* --watch, not connected */
		log_err("interrupted by %s", sigabbrev_np(sig));
		_exit(RD_EXIT_SIGNAL);
	}
	log_err("interrupted by %s: stopping the other side", sigabbrev_np(sig));
	shutdown(in->c->out, SHUT_RDWR);   /* a socketpair (local) */
	close(in->c->out);                 /* the remote shell's stdin */
	if (!gone_within(in->far, 1000)) {
		kill(in->far, SIGTERM);
		if (!gone_within(in->far, 1000)) {
			kill(in->far, SIGKILL);
			waitpid(in->far, NULL, 0);
		}
	}
	_exit(RD_EXIT_SIGNAL);
}

/* Block the signals above in this thread (and every thread it starts) and
 * start the one that takes them. */
static void catch_interrupts(struct interrupt *in)
{
	pthread_t th;
	sigemptyset(&in->set);
	sigaddset(&in->set, SIGINT);
	sigaddset(&in->set, SIGTERM);
	sigaddset(&in->set, SIGHUP);
	if (pthread_sigmask(SIG_BLOCK, &in->set, NULL) != 0 || sem_init(&in->started, 0, 0) < 0)
		return;
	if (pthread_create(&th, NULL, interrupt_main, in) == 0) {
		pthread_detach(th);
		while (sem_wait(&in->started) < 0 && errno == EINTR)
			;
	} else {
		pthread_sigmask(SIG_UNBLOCK, &in->set, NULL);
	}
}

/* Every SRC's path into paths[] (o->nsrc of them, at least 1); all must
 * be on one side: local, or on the same host as rsync requires. */
static int parse_sources(const struct sync_opts *o, struct endpoint *src, const char **paths)
{
	paths[0] = src->path;
	for (int k = 1; k < o->nsrc; k++) {
		struct endpoint ep;
		if (parse_endpoint(o->srcs[k], &ep) < 0)
			return -ENOMEM;
		int same = !ep.host == !src->host && (!ep.host || !strcmp(ep.host, src->host));
		free(ep.host);
		if (!same) {
			log_err("every SRC must be on the same side (all local, or all on one "
			        "host): '%s' and '%s' are not", o->srcs[0], o->srcs[k]);
			free(ep.path);
			return -EINVAL;
		}
		paths[k] = ep.path;
	}
	return 0;
}

static void free_sources(const struct sync_opts *o, const char **paths)
{
	for (int k = 1; paths && k < o->nsrc; k++)
		free((char *)paths[k]);
	free(paths);
}

/* Usage errors rsync makes too: an empty SRC or DST; and --index, which
 * names one index where a sync has two trees. */
static int check_operands(const struct sync_opts *o)
{
	for (int i = 0; i < (o->srcs ? o->nsrc : 1); i++)
		if (!*(o->srcs ? o->srcs[i] : o->src)) {
			log_err("SRC is empty (''): name a file or directory, e.g. '.'");
			return RD_EXIT_USAGE;
		}
	if (o->index_path) {
		/* one file cannot be the index of both trees, and a remote side's
		 * path is not ours to name */
		log_err("--index PATH names one index, for --scan; a sync has two trees, each "
		        "with its own index (the default), or none (--no-index)");
		return RD_EXIT_USAGE;
	}
	if (!*o->dst) {   /* as rsync: "Empty destination arg specified", exit 1 */
		log_err("DST is empty (''): name a directory, e.g. '.'");
		return RD_EXIT_USAGE;
	}
	return 0;
}

/* Our role, after the HELLO that gives the far side its own. */
static int play(const struct sync_opts *o, struct role *r, struct endpoint *src,
                struct endpoint *dst, const char *remote, struct sync_result *res)
{
	int rc;
	if (src->host) {   /* remote -> local: we receive */
		rc = hello_send(r->ctl, ROLE_SENDER, o, r->srcs, r->nsrc,
		                o->data_addr ? o->data_addr : "");
		if (rc == 0 && o->files_from)
			rc = sync_files_send(r->ctl, o);
		r->path = dst->path;
		r->announce_addr = o->data_addr ? o->data_addr : "";
		if (rc == 0)
			sync_receiver(r, res);
	} else {           /* local -> remote or local: we send */
		rc = hello_send(r->ctl, ROLE_RECEIVER, o, (const char **)&dst->path, 1, "");
		if (rc == 0 && o->files_from)
			rc = sync_files_send(r->ctl, o);
		r->path = src->path;
		r->connect_addr = o->data_addr ? o->data_addr
		                  : remote ? rsh_bare_host(remote) : "127.0.0.1";
		if (rc == 0)
			sync_sender(r, res);
	}
	return rc;
}

/* The run's exit code from our result (code), our last error (rc) and the
 * far side's exit status (xs, of the remote shell when remote). */
static int final_code(const char *remote, int code, int rc, int xs, uint64_t frames)
{
	if (remote && xs == RD_EXIT_START && frames == 0)
		return RD_EXIT_START;   /* the remote shell itself could not run (said) */
	if (remote && (xs == 127 || xs == 126 || (xs == 255 && frames == 0 && (rc < 0 || code)))) {
		/* the remote shell could not run rdcp, or ssh itself failed (ssh's
		 * 255 after rdcp answered is a lost connection: ended_early()) */
		log_err("could not start rdcp on %s (remote shell exit %d): check the host, "
		        "the login, and that rdcp is installed there (--rdcp-path)", remote, xs);
		return RD_EXIT_START;
	}
	if (!code && (rc < 0 || xs != 0))
		return xs > 0 ? xs : RD_EXIT_PROTO;
	return code;
}

static void free_endpoints(const struct sync_opts *o, const char **paths,
                           struct endpoint *src, struct endpoint *dst)
{
	free_sources(o, paths);
	free(src->host);
	free(src->path);
	free(dst->host);
	free(dst->path);
}

/* A fan-out (rdcp SRC h1:DST h2:DST ...): the first operand is local and
 * every one from some SRC on is remote. The first DST's operand, or 0. */
static int fanout_at(const struct sync_opts *o)
{
	int first = 0;
	for (int k = o->nsrc; k >= 0; k--) {
		struct endpoint ep;
		if (parse_endpoint(k < o->nsrc ? o->srcs[k] : o->dst, &ep) < 0)
			return 0;
		int remote = ep.host != NULL;
		free(ep.host);
		free(ep.path);
		if (!remote)
			break;
		first = k;
	}
	return first >= 1 && first < o->nsrc ? first : 0;
}

/* --watch: what it needs, said before anything starts. 0 or an exit code. */
static int watch_check(const struct sync_opts *o, const struct endpoint *src,
                       const struct endpoint *dst)
{
	size_t l = strlen(src->path);
	struct stat st;
	const char *why = NULL;
	if (src->host)
		why = "--watch watches a local SRC: run rdcp on the host that has it";
	else if (o->nsrc > 1)
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
};

/* Start the far side (the remote shell's login, or a fork). 0 or an exit
 * code (said). */
static int wconn_open(struct wconn *wc, const struct sync_opts *o, const char *remote,
                      struct sync_watch *w)
{
	*wc = (struct wconn){ .pid = -1, .c = { .in = -1, .out = -1 } };
	sync_watch_hold(w, 1);   /* the fork copies no lock the event thread holds */
	wc->pid = remote ? spawn_remote(o, remote, &wc->c) : spawn_local(&wc->c);
	sync_watch_hold(w, 0);
	if (wc->pid < 0) {
		log_err("cannot start the other side: %s", strerror(errno));
		return RD_EXIT_START;
	}
	if (remote && await_login(o, remote, &wc->c) < 0) {
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
 * do not wait for it long (reap()). */
static void wconn_close(struct wconn *wc, int failed)
{
	if (wc->pid < 0)
		return;
	ctl_free(&wc->c);
	close(wc->c.out);
	if (wc->c.in != wc->c.out)
		close(wc->c.in);
	int status;
	reap(wc->pid, &status, failed);
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
                       const struct sync_watch_batch *b, int first, struct sync_result *res)
{
	char *all[] = { "" };
	struct role r = { .ctl = &wc->c, .flags = o->flags, .tp = o->tp, .is_client = 1, .o = o,
	                  .srcs = paths, .nsrc = 1, .verbose = o->verbose,
	                  .progress = o->progress, .timeout = o->timeout,
	                  .fails = o->json ? sync_fails_new() : NULL };
	if (!remote && r.tp.kind == TP_AUTO)
		r.tp.kind = TP_TCP;
	int rc;
	uint64_t tx = wc->c.tx_bytes, rx = wc->c.rx_bytes;   /* the round's own, below */
	*res = (struct sync_result){ 0 };
	if (first) {
		o->round = 0;
		o->files_from = NULL;
		rc = play(o, &r, (struct endpoint *)src, (struct endpoint *)dst, remote, res);
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
	sync_report(o, res, code, t0);
	sync_fails_free(res->fails);
	res->fails = NULL;
}

/* rdcp --sync --watch SRC/ [host:]DST: a whole sync, then a round for each
 * batch of changes, over one login; a lost far side is started again
 * (with a backoff) and the next round is a whole one. Ends with a signal
 * between rounds (exit 0), or with a round's failure that another cannot
 * mend (its code). */
static int watch_client(struct sync_opts *o, const struct endpoint *src,
                        const struct endpoint *dst, const char **paths)
{
	const char *remote = dst->host;
	struct sync_watch *w;
	static struct interrupt in;
	int code = watch_check(o, src, dst);
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
	catch_interrupts(&in);
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
		int first = wc.pid < 0;
		if (first && (code = wconn_open(&wc, o, remote, w)) == 0) {
			pthread_mutex_lock(&in.mu);
			in.far = wc.pid;
			in.c = &wc.c;
			pthread_mutex_unlock(&in.mu);
		}
		if (!code)
			code = watch_round(o, &wc, src, dst, remote, paths, &b, first, &res);
		watch_report(o, &res, code, t0, round++, b.first_ms);
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

int sync_client(struct sync_opts *o)
{
	int first_dst = o->srcs && !o->hosts ? fanout_at(o) : 0;
	if (o->watch && (o->hosts || first_dst)) {
		log_err("--watch takes one DST: watching into a fan-out is not built yet (run "
		        "one --watch per host)");
		return RD_EXIT_USAGE;
	}
	if (o->hosts || first_dst)
		return sync_fanout(o, first_dst);

	struct endpoint src = { 0 }, dst = { 0 };
	struct ctl c = { .in = -1, .out = -1 };
	struct sync_result res = { 0 };
	int code = check_operands(o);
	if (code)
		return code;
	int nsrc = o->nsrc > 1 ? o->nsrc : 1;
	const char **paths = calloc((size_t)nsrc, sizeof *paths);
	if (!paths || parse_endpoint(o->src, &src) < 0 || parse_endpoint(o->dst, &dst) < 0 ||
	    parse_sources(o, &src, paths) < 0) {
		free_endpoints(o, paths, &src, &dst);
		return RD_EXIT_USAGE;
	}
	if (o->watch) {
		code = watch_client(o, &src, &dst, paths);
		free_endpoints(o, paths, &src, &dst);
		return code;
	}
	double t0 = sync_report_begin(o, !src.host);
	const char *remote = src.host ? src.host : dst.host;
	pid_t pid = -1;
	if (src.host && dst.host) {
		log_err("SRC and DST are both remote: one side must be local");
		code = RD_EXIT_USAGE;
	} else {
		signal(SIGPIPE, SIG_IGN);
		/* decided (and warned about) once, before a local run forks its other side */
		if (!o->no_index)
			idx_cache_dir_warn();
		if (!remote)
			sync_lock_share();   /* SRC may hold DST: the run must not meet itself */
		if ((pid = remote ? spawn_remote(o, remote, &c) : spawn_local(&c)) < 0) {
			log_err("cannot start the other side: %s", strerror(errno));
			code = RD_EXIT_START;
		}
	}
	if (!code && remote && await_login(o, remote, &c) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		close(c.out);
		close(c.in);
		code = RD_EXIT_START;
	}
	if (code) {
		free_endpoints(o, paths, &src, &dst);
		return sync_report(o, &res, code, t0);
	}
	static struct interrupt in;
	in.far = pid;
	in.c = &c;
	catch_interrupts(&in);
	struct role r = { .ctl = &c, .flags = o->flags, .tp = o->tp, .is_client = 1, .o = o,
	                  .srcs = paths, .nsrc = nsrc, .verbose = o->verbose,
	                  .progress = o->progress, .timeout = o->timeout,
	                  .fails = o->json ? sync_fails_new() : NULL };
	ctl_set_timeout(&c, o->timeout * 1000);
	if (!remote && r.tp.kind == TP_AUTO)
		r.tp.kind = TP_TCP;   /* same machine: loopback, nothing to choose */
	unsigned said = log_errors();   /* lines said before the run's own */
	int rc = play(o, &r, &src, &dst, remote, &res);
	ctl_free(&c);   /* its keep-alive thread first: it writes to c.out */
	close(c.out);
	if (c.in != c.out)
		close(c.in);
	if (res.code == RD_EXIT_TIMEOUT || rc == -ETIME) {
		log_err("the other side did nothing for %d s (--timeout): giving up", o->timeout);
		kill(pid, SIGKILL);   /* it may be stopped: nothing else ends it */
	}
	int status = 0;
	int killed = reap(pid, &status, res.code != 0 || rc < 0);
	code = final_code(remote, (int)res.code, rc, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
	                  r.frames);
	char why[96];
	if ((res.code || rc < 0) && !killed && res.code != RD_EXIT_TIMEOUT && rc != -ETIME &&
	    ended_early(remote, status, r.frames, why, sizeof why)) {
		/* one code for the far side's end, whichever channel saw it first
		 * (the data connection: 10; the control channel: its status) */
		code = RD_EXIT_CONN;
		if (log_errors() == said)   /* else the line that said it stands */
			log_err("the %s on %s ended before it finished (%s)",
			        src.host ? "sender" : "receiver", remote ? remote : "this machine",
			        why);
	} else if (!res.code && rc == 0 && !killed &&
	           ended_early(remote, status, r.frames, why, sizeof why)) {
		/* its DONE came: every file landed; only its leaving was cut */
		code = RD_EXIT_OK;
		log_warn("the %s on %s ended after it had finished (%s): the copy is complete",
		         src.host ? "sender" : "receiver", remote ? remote : "this machine", why);
	}
	free_endpoints(o, paths, &src, &dst);
	res.fails = r.fails;
	code = sync_report(o, &res, code, t0);   /* -v's summary, --stats, --json */
	sync_fails_free(r.fails);
	while (__atomic_load_n(&in.fired, __ATOMIC_SEQ_CST))
		pause();   /* the interrupt thread exits 20 for the run */
	return code;
}
