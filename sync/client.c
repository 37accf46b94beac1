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
#include "sync/client_int.h"
#include "sync/watch.h"

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
pid_t client_spawn_remote(const struct sync_opts *o, const char *host, struct ctl *c)
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
int client_await_login(const struct sync_opts *o, const char *host, const struct ctl *c)
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
pid_t client_spawn_local(struct ctl *c)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		sigset_t none;   /* the signals the parent's interrupt thread takes */
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
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
int client_reap(pid_t pid, int *status, int failed)
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

/* The process's one interrupt thread, started on first use with no far
 * side (a signal then ends us: exit 20). A ranked run starts it before
 * MPI does its threads, so that they too leave the signals to it. */
struct interrupt *client_interrupts(void)
{
	static struct interrupt in = { .far = -1, .mu = PTHREAD_MUTEX_INITIALIZER };
	static int started;
	if (!started++)
		client_catch_interrupts(&in);
	return &in;
}

/* Block the signals above in this thread (and every thread it starts) and
 * start the one that takes them. */
void client_catch_interrupts(struct interrupt *in)
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
int client_play(const struct sync_opts *o, struct role *r, struct endpoint *src,
                struct endpoint *dst, const char *remote, struct sync_result *res)
{
	int rc;
	/* --rounds: the far side waits for rounds of the files that changed
	 * as they were read (client_retry()); a far sender lists them */
	struct sync_opts ro = *o;
	char **fwd = r->retry ? calloc((size_t)o->nfwd + 3, sizeof *fwd) : NULL;
	if (fwd) {
		memcpy(fwd, o->fwd, (size_t)o->nfwd * sizeof *fwd);
		fwd[ro.nfwd++] = "--rounds";
		if (o->windows) {   /* the first window's directories follow (FILES) */
			fwd[ro.nfwd++] = "--files-from=-";
			fwd[ro.nfwd++] = "--windows";
		}
		ro.fwd = fwd;
		r->rounds = !src->host;   /* our receiver may ask (CTL_RETRY) */
	} else {
		r->retry = NULL;   /* (out of memory: said as it comes, no rounds) */
	}
	if (src->host) {   /* remote -> local: we receive */
		rc = hello_send(r->ctl, ROLE_SENDER, &ro, r->srcs, r->nsrc,
		                o->data_addr ? o->data_addr : "");
		free(fwd);
		if (rc == 0 && o->files_from)
			rc = sync_files_send(r->ctl, o);
		r->path = dst->path;
		r->announce_addr = o->data_addr ? o->data_addr : "";
		if (rc == 0)
			sync_receiver(r, res);
	} else {           /* local -> remote or local: we send */
		rc = hello_send(r->ctl, ROLE_RECEIVER, &ro, (const char **)&dst->path, 1, "");
		free(fwd);
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

/*
 * Files the sender found changed as it read them (a large file rewritten in
 * place, a file at another size than the scan's) were not sent: send them
 * again, in a round of their own over the same login, as they then are;
 * up to RETRY_ROUNDS rounds a moment apart. What still changes then is
 * left in retry, for the caller to name (exit 24). With --delete or -H a
 * round is the whole tree (from the index): the first round held its
 * deletions back, or a hard link's leader took its links with it.
 * 0 or an error.
 */
#define RETRY_ROUNDS 3

int client_retry(struct sync_opts *o, struct role *r, struct sync_result *res,
                 struct sync_paths *retry, struct sync_paths *as_read, int pull)
{
	char *all[] = { "" };
	char **files = o->files;   /* the user's --files-from, put back after */
	size_t nfiles = o->nfiles;
	const char *files_from = o->files_from;
	uint64_t gone = res->gone;   /* what vanished: the run's 24 whatever follows */
	int rc = 0;
	for (int t = 0; t < RETRY_ROUNDS && res->code == RD_EXIT_VANISHED && retry->n &&
	                !retry->lost; t++) {
		usleep(50000u << t);   /* 50, 100, 200 ms: a writer's burst may end */
		struct sync_paths these = *retry;
		*retry = (struct sync_paths){ 0 };
		sync_paths_unique(&these);   /* (the sender and the receiver may both list one) */
		/* the whole tree (or the user's list) with --delete or -H */
		int whole = (o->flags & (SYNC_F_DELETE | SYNC_F_HARDLINKS)) != 0;
		o->round = 1;
		o->files_from = "-";
		o->files = whole ? (files_from ? files : all) : these.v;
		o->nfiles = whole ? (files_from ? nfiles : 1) : these.n;
		if (o->verbose > 1 && !o->json && !o->quiet)
			printf("%zu files changed as they were read: sending them again\n", these.n);
		struct sync_result more = { 0 };
		/* the last round's receiver says what it holds back and refuses
		 * what does not match, as in a run without rounds */
		uint8_t last = t + 1 == RETRY_ROUNDS;
		rc = ctl_send(r->ctl, CTL_ROUND, &last, 1);
		if (rc == 0)
			rc = sync_files_send(r->ctl, o);
		/* the last: a large file that does not stand still goes as read,
		 * as rsync sends what it reads (its chunks tagged: SYNC_MSG_ASREAD);
		 * pulling, our receiver takes what the far sender found changed,
		 * quietly, but in the last round, and names what came as read */
		o->take_rounds = pull && !last;
		r->as_read = last || pull ? as_read : NULL;
		if (rc == 0 && pull)
			sync_receiver(r, &more);
		else if (rc == 0)
			sync_sender(r, &more);
		o->take_rounds = 0;
		r->as_read = NULL;
		o->files = files;
		o->nfiles = nfiles;
		o->files_from = files_from;
		o->round = 0;
		sync_paths_free(&these);
		if (rc < 0)
			break;
		result_add(res, &more);
		gone += more.gone;
		res->code = more.code ? more.code : gone ? RD_EXIT_VANISHED : 0;
		res->wire += more.wire;
		res->hashed += more.hashed;
		res->ctl_tx += more.ctl_tx;
		res->ctl_rx += more.ctl_rx;
	}
	/* --json's: what vanished, and what still changed (said next) */
	sync_paths_unique(retry);
	res->vanished = gone + retry->n;
	return rc;
}

void client_say_as_read(const struct sync_opts *o, struct sync_paths *as_read)
{
	char shown[4096];
	sync_paths_unique(as_read);
	for (size_t i = 0; o->verbose && !o->quiet && !o->json && i < as_read->n; i++)
		printf("%s: changed while it was read: sent as read\n",
		       log_path(shown, sizeof shown, as_read->v[i]));
}

/* What still changed as it was read, after the rounds: named, as the
 * sender names a file it could not send (exit 24); what went as read,
 * named with -v (no error: exit 0). */
static void say_changed(const struct sync_opts *o, struct role *r, struct sync_paths *retry,
                        struct sync_paths *as_read)
{
	char shown[4096];
	client_say_as_read(o, as_read);
	sync_paths_unique(retry);   /* (the sender and the receiver may both list one) */
	for (size_t i = 0; i < retry->n; i++) {
		log_warn("%s: changed while being sent; not sent",
		         log_path(shown, sizeof shown, retry->v[i]));
		sync_fails_add(r->fails, retry->v[i], "changed while being sent", 1);
	}
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

/* SRC, DST and every SRC's path (paths[], o->nsrc of them, at least 1):
 * 0, or RD_EXIT_USAGE (said) with nothing left to free. */
static int open_endpoints(const struct sync_opts *o, struct endpoint *src,
                          struct endpoint *dst, const char ***paths)
{
	int nsrc = o->nsrc > 1 ? o->nsrc : 1;
	*paths = calloc((size_t)nsrc, sizeof **paths);
	if (!*paths || parse_endpoint(o->src, src) < 0 || parse_endpoint(o->dst, dst) < 0 ||
	    parse_sources(o, src, *paths) < 0) {
		free_endpoints(o, *paths, src, dst);
		return RD_EXIT_USAGE;
	}
	return 0;
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

/* --watch into a fan-out: what a watch needs, checked as for one DST (the
 * first DST, or --hosts' path, named in its messages). 0 or an exit code. */
static int fanout_watch_check(const struct sync_opts *o, int first_dst)
{
	struct endpoint src = { 0 }, dst = { 0 };
	const char *colon = o->hosts ? strrchr(o->hosts, ':') : NULL;
	int code = RD_EXIT_USAGE;
	if (parse_endpoint(o->srcs[0], &src) == 0 &&
	    (o->hosts ? (dst.host = strdup("host")) && (dst.path = strdup(colon ? colon + 1 : ""))
	              : parse_endpoint(first_dst < o->nsrc ? o->srcs[first_dst] : o->dst,
	                               &dst) == 0))
		code = client_watch_check(o, &src, o->hosts ? o->nsrc : first_dst, &dst);
	free(src.host);
	free(src.path);
	free(dst.host);
	free(dst.path);
	return code;
}

/* One run, push, pull or local, to its end: the exit code, its counts in
 * *res (its failures and the files sent as read in *fails and *as_read,
 * the caller's to free); nothing reported. given: a ranked run's windows
 * (sync/ranks.c), NULL: the run makes its own. */
int client_run(struct sync_opts *o, const struct wset *given, struct sync_result *res,
               struct sync_fails **fails, struct sync_paths *as_read)
{
	struct endpoint src = { 0 }, dst = { 0 };
	struct ctl c = { .in = -1, .out = -1 };
	const char **paths;
	int nsrc = o->nsrc > 1 ? o->nsrc : 1;
	int code = open_endpoints(o, &src, &dst, &paths);
	*fails = NULL;
	if (code)
		return code;
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
		if ((pid = remote ? client_spawn_remote(o, remote, &c) : client_spawn_local(&c)) < 0) {
			log_err("cannot start the other side: %s", strerror(errno));
			code = RD_EXIT_START;
		}
	}
	if (!code && remote && client_await_login(o, remote, &c) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		close(c.out);
		close(c.in);
		code = RD_EXIT_START;
	}
	if (code) {
		free_endpoints(o, paths, &src, &dst);
		return code;
	}
	struct interrupt *in = client_interrupts();
	pthread_mutex_lock(&in->mu);
	in->far = pid;
	in->c = &c;
	pthread_mutex_unlock(&in->mu);
	struct role r = { .ctl = &c, .flags = o->flags, .tp = o->tp, .is_client = 1, .o = o,
	                  .srcs = paths, .nsrc = nsrc, .verbose = o->verbose,
	                  .progress = o->progress, .timeout = o->timeout,
	                  .fails = o->json ? sync_fails_new() : NULL };
	ctl_set_timeout(&c, o->timeout * 1000);
	if (!remote && r.tp.kind == TP_AUTO)
		r.tp.kind = TP_TCP;   /* same machine: loopback, nothing to choose */
	unsigned said = log_errors();   /* lines said before the run's own */
	struct sync_paths retry = { 0 };
	/* (not with --delete and --remove-source-files: a round of the whole
	 * tree would find removed what landed, and delete it in DST) */
	if (nsrc == 1 && !(o->flags & SYNC_F_DRYRUN) &&
	    (o->flags & (SYNC_F_DELETE | SYNC_F_REMOVE_SOURCE)) !=
	    (SYNC_F_DELETE | SYNC_F_REMOVE_SOURCE) &&
	    (src.host || sync_src_contents(src.path, o->flags)))
		r.retry = &retry;   /* a directory's contents (pulling, the far
		                       sender checks): files that change as they
		                       are read go again */
	/* pulling: our receiver takes the files that changed as sent quietly,
	 * for the next round; what came as read is named after */
	o->take_rounds = src.host && r.retry;
	r.as_read = src.host ? as_read : NULL;
	/* a large tree: in windows of directories, the first one now */
	struct wplan *wp = NULL;
	int rc = given ? client_windows_given(o, given, &wp)
	         : !src.host && client_windows_ok(o, &r) ? client_windows_open(o, src.path, &wp) : 0;
	if (rc < 0)
		log_err("listing the directories of %s: %s", src.path, strerror(-rc));
	if (rc == 0)
		rc = client_play(o, &r, &src, &dst, remote, res);
	o->take_rounds = 0;
	r.as_read = NULL;
	if (rc == 0 && r.retry)
		rc = client_retry(o, &r, res, &retry, as_read, src.host != NULL);
	if (rc == 0 && wp && client_window_goes_on(res->code))
		rc = client_windows_rest(o, &r, res, &retry, as_read, wp);
	if (wp) {   /* the windows' lists are not the user's (sync_opts_free()) */
		o->files = NULL;
		o->nfiles = 0;
		o->files_from = NULL;
	}
	client_windows_free(wp);
	if (res->code != RD_EXIT_PROTO)   /* (a lying peer's list is not said) */
		say_changed(o, &r, &retry, as_read);
	r.retry = NULL;
	sync_paths_free(&retry);
	ctl_free(&c);   /* its keep-alive thread first: it writes to c.out */
	close(c.out);
	if (c.in != c.out)
		close(c.in);
	if (res->code == RD_EXIT_TIMEOUT || rc == -ETIME) {
		log_err("the other side did nothing for %d s (--timeout): giving up", o->timeout);
		kill(pid, SIGKILL);   /* it may be stopped: nothing else ends it */
	}
	int status = 0;
	int killed = client_reap(pid, &status, res->code != 0 || rc < 0);
	code = final_code(remote, (int)res->code, rc, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
	                  r.frames);
	char why[96];
	if ((res->code || rc < 0) && !killed && res->code != RD_EXIT_TIMEOUT && rc != -ETIME &&
	    ended_early(remote, status, r.frames, why, sizeof why)) {
		/* one code for the far side's end, whichever channel saw it first
		 * (the data connection: 10; the control channel: its status) */
		code = RD_EXIT_CONN;
		if (log_errors() == said)   /* else the line that said it stands */
			log_err("the %s on %s ended before it finished (%s)",
			        src.host ? "sender" : "receiver", remote ? remote : "this machine",
			        why);
	} else if (!res->code && rc == 0 && !killed &&
	           ended_early(remote, status, r.frames, why, sizeof why)) {
		/* its DONE came: every file landed; only its leaving was cut */
		code = RD_EXIT_OK;
		log_warn("the %s on %s ended after it had finished (%s): the copy is complete",
		         src.host ? "sender" : "receiver", remote ? remote : "this machine", why);
	}
	free_endpoints(o, paths, &src, &dst);
	*fails = r.fails;
	/* reaped, and c going: a signal from now ends us alone (if the
	 * thread has fired, it holds mu until it exits 20 for the run) */
	pthread_mutex_lock(&in->mu);
	in->far = -1;
	in->c = NULL;
	pthread_mutex_unlock(&in->mu);
	return code;
}

int sync_client(struct sync_opts *o)
{
	int first_dst = o->srcs && !o->hosts ? fanout_at(o) : 0;
	if (sync_ranked()) {   /* under mpirun: one of N ranks (sync/ranks.c) */
		if (o->watch) {   /* (every rank says it: nothing has started) */
			log_err("--watch is one process following SRC: run it without mpirun");
			return RD_EXIT_USAGE;
		}
		int code = check_operands(o);
		return code ? code : sync_ranks(o, first_dst);
	}
	if (o->watch && (o->hosts || first_dst)) {
		int code = fanout_watch_check(o, first_dst);
		if (code)
			return code;
	}
	if (o->hosts || first_dst)
		return sync_fanout(o, first_dst);
	int code = check_operands(o);
	if (code)
		return code;
	struct endpoint src = { 0 }, dst = { 0 };
	const char **paths;
	if ((code = open_endpoints(o, &src, &dst, &paths)))
		return code;
	if (o->watch) {
		code = sync_watch_client(o, &src, &dst, paths);
		free_endpoints(o, paths, &src, &dst);
		return code;
	}
	int pull = src.host != NULL;
	free_endpoints(o, paths, &src, &dst);
	struct sync_result res = { 0 };
	struct sync_paths as_read = { 0 };
	struct sync_fails *fails;
	double t0 = sync_report_begin(o, !pull);
	code = client_run(o, NULL, &res, &fails, &as_read);
	res.fails = fails;
	res.as_read = &as_read;
	code = sync_report(o, &res, code, t0);   /* -v's summary, --stats, --json */
	sync_fails_free(fails);
	sync_paths_free(&as_read);
	return code;
}
