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
#include <netdb.h>
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

#define FAN_ROUNDS 2   /* the hosts after a failed one get one more round */

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
	f->nfr = f->fr_state = f->linked = f->nchain = f->feed_lost = 0;
	f->m = (struct idx_manifest){ 0 };
	f->progress_host = -1;
	f->chain = calloc((size_t)n, sizeof *f->chain);
	f->first_addr[0] = 0;
	/* the limit counts from one spawn of every login at once: the logins
	 * of hundreds of hosts share this machine's cores and link */
	f->login_s = o->contimeout >= 0 ? o->contimeout
	             : SYNC_FAN_CONTIMEOUT + n / SYNC_FAN_CONTIMEOUT_HOSTS;
	/* every remote shell at once: logins overlap */
	for (int k = 0; k < n; k++) {
		h[k].c = (struct ctl){ .in = -1, .out = -1 };
		h[k].pid = rsh_spawn(o->rsh, h[k].t->host, words, &h[k].c.out, &h[k].c.in,
		                     f->login_s);
		h[k].pos = h[k].next = -1;
		pthread_mutex_init(&h[k].wmu, NULL);
	}
	pthread_mutex_lock(&intr.mu);
	intr.f = f;
	pthread_mutex_unlock(&intr.mu);
	for (int k = 0; k < n; k++) {
		h[k].fan = f;
		h[k].r = (struct role){ .ctl = &h[k].c, .is_client = 1, .o = f->o };
		if (h[k].pid < 0) {
			fan_fail(&h[k], RD_EXIT_START, "the remote shell could not be started");
			h[k].dead = 1;
			h[k].stage = H_END;
			continue;
		}
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
		pthread_mutex_lock(&intr.mu);
		ctl_free(&h[k].c);
		if (h[k].c.out >= 0)
			close(h[k].c.out);
		h[k].c.out = -1;
		pthread_mutex_unlock(&intr.mu);
		if (h[k].c.in >= 0)
			close(h[k].c.in);
		pthread_mutex_destroy(&h[k].wmu);
		plan_free(&h[k]);
		if (h[k].pid < 0)
			continue;
		if (h[k].no_answer)   /* nothing to wait for: it never answered */
			kill(h[k].pid, SIGKILL);
		int st = reap(h[k].pid, h[k].code != 0 || h[k].dead);
		pthread_mutex_lock(&intr.mu);
		h[k].reaped = 1;   /* Ctrl-C from now on leaves its pid alone */
		pthread_mutex_unlock(&intr.mu);
		int xs = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		if (h[k].dead && h[k].r.frames == 0 && !h[k].no_answer) {   /* rdcp never answered */
			h[k].code = RD_EXIT_START;
			snprintf(h[k].why, sizeof h[k].why, "could not start rdcp there (remote "
			         "shell exit %d): check the host, the login, and --rdcp-path", xs);
		}
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
	resolve(rsh_bare_host(data_addr ? data_addr : host), x->ip);
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

/* t's path as this machine would see it if t were this machine: the
 * remote shell starts in $HOME, where a relative path (or "~/") begins;
 * trailing '/' dropped. NULL for "~user" (not ours to guess: compared as
 * typed) or no memory. */
static char *local_view(const struct fan_target *t)
{
	const char *p = t->path, *home = getenv("HOME");
	char *s = NULL;
	if (p[0] == '~' && p[1] && p[1] != '/')
		return NULL;
	if (p[0] == '~')
		p += p[1] ? 2 : 1;
	if (p[0] == '/' ? !(s = strdup(p))
	    : asprintf(&s, "%s/%s", home ? home : "", p) < 0)
		return NULL;
	for (size_t n = strlen(s); n > 1 && s[n - 1] == '/';)
		s[--n] = 0;
	return s;
}

/* Leave out a destination named twice (the same address and path, under
 * two names), and SRC itself (this machine, the same directory). */
static void dedupe(struct fan_target *t, int n, const char *src)
{
	char *s = realpath(src, NULL);
	char **view = calloc((size_t)(n ? n : 1), sizeof *view);
	for (int k = 0; view && k < n; k++)
		view[k] = local_view(&t[k]);
	for (int k = 0; view && k < n; k++) {
		const char *key = view[k] ? view[k] : t[k].path;
		for (int j = 0; j < k && !t[k].skip; j++) {
			int same = !t[j].skip && !strcmp(key, view[j] ? view[j] : t[j].path) &&
			           (*t[k].ip ? !strcmp(t[k].ip, t[j].ip)
			                     : !strcmp(t[k].host, t[j].host));
			if (same) {
				log_warn("%s is %s again (%s): copied once", t[k].label, t[j].label,
				         *t[k].ip ? t[k].ip : t[k].host);
				t[k].skip = 1;
			}
		}
		if (!t[k].skip && s && view[k] && is_local(t[k].ip)) {
			char *d = realpath(view[k], NULL);
			if (d && !strcmp(d, s))
				t[k].skip = 2;   /* said with -v */
			free(d);
		}
	}
	for (int k = 0; view && k < n; k++)
		free(view[k]);
	free(view);
	free(s);
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
static int retry_set(struct fhost *h, int n, int feed_lost, int *which)
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

/* The per-host report: a line each on stdout with -v (quiet without, as
 * rsync: a cron job's mail is its errors); the failed ones on stderr,
 * with why, always. */
static void report_hosts(const struct sync_opts *o, const struct fan_target *t, int nt,
                         const struct fhost *last)
{
	char a[SYNC_NUM_LEN], b[SYNC_NUM_LEN];
	for (int k = 0; k < nt; k++) {
		const struct fhost *h = &last[k];
		if (t[k].skip == 1 || (t[k].skip == 2 && (!o->verbose || o->quiet)) || h->src_failed)
			continue;   /* said already (the source's failure, once) */
		if (t[k].skip == 2) {
			printf("%s: left out: it is SRC itself\n", t[k].label);
		} else if (h->code) {
			log_err("%s: failed (exit %d): %s", t[k].label, h->code,
			        h->why[0] ? h->why : "see above");
		} else if (o->verbose && !o->quiet && !o->json) {
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
		        t[k].skip ? "skipped" : h->src_failed ? "not run" : h->code ? "failed" : "ok",
		        t[k].skip ? 0 : h->code,
		        (unsigned long long)h->res.files, (unsigned long long)h->res.bytes,
		        (unsigned long long)h->res.deleted);
		if (h->src_failed)
			sync_json_str(f, "the source failed");
		else if (h->code && !t[k].skip)
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
	const char *moved = NULL;   /* --json's transport: any round's that moved data */
	o->src = paths && paths[0] ? paths[0] : o->src;
	o->dst = o->hosts ? o->hosts : first_dst < o->nsrc ? o->srcs[first_dst] : o->dst;
	double t0 = sync_report_begin(o, 1);
	if (!code && !last)
		code = RD_EXIT_FILEIO;
	if (!code) {
		/* two pipes per host: 512 hosts pass the usual soft limit of 1024 fds */
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
		dedupe(t, nt, paths[0]);
		signal(SIGPIPE, SIG_IGN);
		catch_interrupts();
	}
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
		run_round(&f, h, nw, paths, nsrc, &res);
		wire += res.wire;
		moved = res.transport ? res.transport : moved;
		int *again = malloc((size_t)nw * sizeof *again);
		int na = again ? retry_set(h, nw, f.feed_lost, again) : 0;
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
		report_hosts(o, t, nt, last);
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
	char *hj = last && o->json ? hosts_json(t, nt, last) : NULL;
	code = sync_report_hosts(o, &all, code, t0, hj);
	free(hj);
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
	return code;
}
