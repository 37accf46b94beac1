/*
 * rdpipe's controller: the rdpipe the user ran. A UNIX pipeline whose
 * segments run on hosts, the data going from host to host over the
 * transport and the control over the remote shell.
 *
 * The controller starts `rdpipe --segment` (pipe/segment.c) on every
 * segment's host with the remote shell, and tells each one over that
 * channel what to run and the pipeline's key (a fresh random one per run:
 * never on a command line). Every segment listens for its input on a port
 * of its own (port 0: the kernel picks), reports the port, and is told
 * where the next segment listens. Data path, for segments S1..Sn:
 *
 *   stdin -> [controller] -> S1 -> S2 -> ... -> Sn -> [controller] -> stdout
 *
 * each arrow one transport session (the connecting side sends); the two
 * local hops run on threads of their own. Each segment reports its
 * command's exit status and what its input hop carried; the first failure
 * anywhere tears the whole pipeline down (closing the control channels,
 * which every segment takes as "kill your command and leave").
 * Messages: pipe/segmsg.c; docs/protocol.md, "rdpipe segments".
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "common/wire.h"
#include "pipe/pipe_int.h"

/* One segment, as the controller sees it. */
struct seg {
	struct pipe_spec sp;
	struct ctl c;
	pid_t pid;          /* its remote shell, or 0 once reaped */
	uint16_t port;
	int ready, done, failed;
	int status;         /* command status (exit code, 128 + signal), PIPE_NO_STATUS */
	uint64_t in_bytes;
	double in_seconds;
	char kind[8];
};

/* A hop between a segment and this process: stdin -> S1, or Sn -> stdout. */
struct local_hop {
	struct tp_session *s;
	struct tp_listener *l;
	int fd, rc, done;
	struct pump_stats st;
	int note;
	char kind[8];
	const char *host;
	uint16_t port;
	struct tp_opts *tp;
};

/* stdin -> the first segment */
static void *feed_main(void *arg)
{
	struct local_hop *h = arg;
	int rc = tp_connect(h->host, h->port, h->tp, &h->s);
	if (rc == 0) {
		snprintf(h->kind, sizeof h->kind, "%s", tp_kind_name(h->s));
		rc = pump_send(h->s, h->fd, "standard input", &h->st);
		/* the first command stopped reading: like any pipe reader, fine */
		if (rc == -EPIPE || tp_peer_status(h->s) == EPIPE)
			rc = 0;
		tp_close(h->s);
	}
	h->rc = rc;
	h->done = 1;
	if (write(h->note, "f", 1) < 0)
		abort();
	return NULL;
}

/* the last segment -> stdout */
static void *collect_main(void *arg)
{
	struct local_hop *h = arg;
	int rc;
	while ((rc = tp_accept(h->l, -1, &h->s)) == -EACCES)
		;
	if (rc == 0) {
		snprintf(h->kind, sizeof h->kind, "%s", tp_kind_name(h->s));
		rc = pump_recv(h->s, h->fd, "standard output", &h->st);
		tp_close(h->s);
	}
	h->rc = rc;
	h->done = 1;
	if (write(h->note, "c", 1) < 0)
		abort();
	return NULL;
}

/* The whole run. pipe_run() keeps it static: the local hop threads may
 * outlive a failing return. */
struct run {
	const struct pipe_opts *o;
	struct seg *g;
	int n;
	int sig;                     /* the signal self-pipe's read end */
	int note[2];                 /* the local hops -> the loop: one byte when done */
	struct tp_opts tp;           /* every hop's: this run's key */
	struct local_hop feed, coll; /* stdin -> S1, Sn -> stdout */
	char me[64];                 /* our address as Sn reaches us */
	int nready, ndone, local_done, started;
	const char *why;             /* the first failure, or NULL */
	int code;                    /* its exit code */
};

/* --- the steps before the data flows --- */

/* Every "[user@]host:command" given. An exit code. */
static int parse_segments(struct run *r)
{
	r->g = calloc((size_t)r->n, sizeof *r->g);
	if (!r->g)
		return RD_EXIT_FILEIO;
	for (int i = 0; i < r->n; i++) {
		r->g[i].c = (struct ctl){ .in = -1, .out = -1 };
		r->g[i].status = PIPE_NO_STATUS;
		if (pipe_spec_parse(r->o->segs[i], i + 1, &r->g[i].sp) < 0)
			return RD_EXIT_USAGE;
	}
	if (r->n > 255) {
		log_err("at most 255 segments");
		return RD_EXIT_USAGE;
	}
	return RD_EXIT_OK;
}

static void dry_run(const struct pipe_opts *o, const struct seg *g, int n)
{
	printf("rdpipe: %d segment%s; nothing is run (-n). Each segment would be started "
	       "with:\n  %s HOST %s --segment\n", n, n == 1 ? "" : "s", o->rsh ? o->rsh : "ssh",
	       o->rdpipe_path ? o->rdpipe_path : "rdpipe");
	for (int i = 0; i < n; i++) {
		const char *arg;
		pipe_op_of(g[i].sp.cmd, &arg);
		printf("segment %d on %s: ", i + 1, g[i].sp.host);
		switch (g[i].sp.op) {
		case PIPE_CMD:
			printf("input | %s | output\n", g[i].sp.cmd);
			break;
		case PIPE_FROM:
			printf("input to /dev/null, then the file %s as output\n", arg);
			break;
		case PIPE_TO:
		case PIPE_APPEND:
			printf("input %s the file %s, then an empty output\n",
			       g[i].sp.op == PIPE_TO ? "written to" : "appended to", arg);
			break;
		}
		printf("  input from %s%s; output to %s%s\n", i ? "segment on " : "rdpipe's stdin",
		       i ? g[i - 1].sp.addr : "", i + 1 < n ? "segment on " : "rdpipe's stdout",
		       i + 1 < n ? g[i + 1].sp.addr : "");
	}
}

static volatile sig_atomic_t ctl_signal;
static int sigpipe_w = -1;
static void on_ctl_signal(int sig)
{
	ctl_signal = sig;
	if (sigpipe_w >= 0 && write(sigpipe_w, "s", 1) < 0) {
		/* nothing to do in a handler */
	}
}

/* SIGINT, SIGTERM and SIGHUP wake the loop through a self-pipe; the local
 * hops' notes come on another pipe. An exit code. */
static int catch_signals(struct run *r)
{
	signal(SIGPIPE, SIG_IGN);
	int sp[2];
	if (pipe2(sp, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(r->note, O_CLOEXEC) < 0)
		return RD_EXIT_FILEIO;
	r->sig = sp[0];
	sigpipe_w = sp[1];
	struct sigaction sa = { .sa_handler = on_ctl_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	return RD_EXIT_OK;
}

/* Every hop's transport options, with one fresh key for this run. */
static int make_key(struct run *r)
{
	r->tp = r->o->tp;
	if (!r->tp.streams)
		r->tp.streams = 1;
	r->tp.connect_timeout_ms = PIPE_CONNECT_MS;
	r->tp.verbose = -1;   /* no per-hop fallback notice: -v names each hop's transport */
	return cr_random(r->tp.key, TP_KEY_LEN);
}

/* Close every control channel (EOF: each segment kills its command and
 * leaves), give the remote shells PIPE_GRACE_MS and a second more to
 * exit, then SIGKILL the rest. */
static void teardown(struct seg *g, int n)
{
	for (int i = 0; i < n; i++)
		if (g[i].c.out >= 0) {
			close(g[i].c.out);
			g[i].c.out = -1;
		}
	double end = clock_s() + PIPE_GRACE_MS / 1000.0 + 1;
	for (int left = n; left > 0 && clock_s() < end;) {
		left = 0;
		for (int i = 0; i < n; i++)
			if (g[i].pid > 0) {
				if (waitpid(g[i].pid, NULL, WNOHANG) == g[i].pid)
					g[i].pid = 0;
				else
					left++;
			}
		if (left)
			usleep(20000);
	}
	for (int i = 0; i < n; i++)
		if (g[i].pid > 0) {
			kill(g[i].pid, SIGKILL);
			waitpid(g[i].pid, NULL, 0);
			g[i].pid = 0;
		}
}

/* Start `rdpipe --segment` on every host and send each its SETUP. An exit
 * code; on a failure, the segments already started are torn down. */
static int launch(struct run *r)
{
	const char *words[] = { r->o->rdpipe_path ? r->o->rdpipe_path : "rdpipe", "--segment",
	                        NULL };
	for (int i = 0; i < r->n; i++) {
		struct seg *g = &r->g[i];
		g->pid = rsh_spawn(r->o->rsh, g->sp.host, words, &g->c.out, &g->c.in, 0);
		if (g->pid < 0) {
			log_err("segment %d (%s): cannot start the remote shell: %s", i + 1, g->sp.host,
			        strerror(errno));
			teardown(r->g, i);
			return RD_EXIT_START;
		}
		struct pipe_setup su = { .index = (uint8_t)(i + 1), .count = (uint8_t)r->n,
		                         .kind = (uint8_t)r->tp.kind,
		                         .streams = (uint8_t)r->tp.streams,
		                         .cmd = g->sp.cmd, .label = g->sp.host };
		memcpy(su.key, r->tp.key, TP_KEY_LEN);
		pipe_setup_send(&g->c, &su);   /* a failure shows as EOF in the loop */
		cr_wipe(su.key, TP_KEY_LEN);
	}
	return RD_EXIT_OK;
}

/* Our address as the host at `to` would reach us: the source address of a
 * route to it (a UDP connect sends nothing). */
static int local_addr_for(const char *to, char *out, size_t len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM }, *ai;
	int rc = getaddrinfo(to, "9", &hints, &ai);
	if (rc != 0) {
		log_err("cannot resolve %s: %s", to, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	rc = -EHOSTUNREACH;
	for (struct addrinfo *p = ai; p && rc; p = p->ai_next) {
		int fd = socket(p->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen) == 0 &&
		    getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
		    getnameinfo((struct sockaddr *)&ss, sl, out, (socklen_t)len, NULL, 0,
		                NI_NUMERICHOST) == 0)
			rc = 0;
		if (fd >= 0)
			close(fd);
	}
	freeaddrinfo(ai);
	if (rc)
		log_err("no route to %s", to);
	return rc;
}

/* The last hop comes back to us: listen for it, on the address the last
 * segment has a route to. An exit code; on a failure, all is torn down. */
static int listen_for_output(struct run *r)
{
	r->feed = (struct local_hop){ .fd = STDIN_FILENO, .note = r->note[1], .tp = &r->tp };
	r->coll = (struct local_hop){ .fd = STDOUT_FILENO, .note = r->note[1], .tp = &r->tp };
	int rc = tp_listen(NULL, 0, &r->tp, &r->coll.l);
	if (rc < 0)
		log_err("cannot listen for the pipeline's output: %s", strerror(-rc));
	if (rc < 0) {
		teardown(r->g, r->n);
		return rc == -ENODEV ? RD_EXIT_NORDMA : RD_EXIT_CONN;
	}
	return RD_EXIT_OK;
}

/* --- the run: one loop over the control channels and the local hops --- */

/* Everyone listens: wire each segment to the next (the last one to us),
 * and start the local hops. */
static void wire(struct run *r)
{
	struct seg *g = r->g;
	int n = r->n;
	/* the last segment comes back to us: our address on its route, known
	 * now that every segment said the address its ssh reached */
	if (local_addr_for(g[n - 1].sp.addr, r->me, sizeof r->me) < 0) {
		r->why = "no route";
		r->code = RD_EXIT_CONN;
		return;
	}
	for (int i = 0; i < n; i++)
		if (pipe_go_send(&g[i].c, i + 1 < n ? g[i + 1].port : tp_listener_port(r->coll.l),
		                 i + 1 < n ? g[i + 1].sp.addr : r->me) < 0)
			r->why = "segment lost";
	r->feed.host = g[0].sp.addr;
	r->feed.port = g[0].port;
	if (g[0].sp.op == PIPE_FROM)   /* its input is thrown away: don't wait for ours */
		r->feed.fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	pthread_t t;
	pthread_create(&t, NULL, feed_main, &r->feed);
	pthread_detach(t);
	pthread_create(&t, NULL, collect_main, &r->coll);
	pthread_detach(t);
	r->started = 1;
}

/* A local hop ended: a failure of either is the run's. */
static void take_local_note(struct run *r)
{
	char ch;
	if (read(r->note[0], &ch, 1) == 1)
		r->local_done++;
	struct local_hop *feed = &r->feed, *coll = &r->coll;
	if (feed->done && feed->rc < 0 && !feed->st.local) {
		log_err("hop 0 (stdin -> %s): %s", r->g[0].sp.host, strerror(-feed->rc));
		r->why = "hop failed";
		r->code = pump_exit_code(feed->rc, &feed->st);
	} else if (feed->done && feed->rc < 0) {
		r->why = "reading stdin failed";
		r->code = RD_EXIT_FILEIO;
	}
	if (coll->done && coll->rc < 0) {
		if (coll->rc != -EPIPE)
			log_err("hop %d (%s -> stdout): %s", r->n, r->g[r->n - 1].sp.host,
			        strerror(-coll->rc));
		r->why = "hop failed";
		r->code = coll->rc == -EPIPE ? RD_EXIT_FILEIO : pump_exit_code(coll->rc, &coll->st);
	}
}

/* A segment's DONE (in its frame buffer): record it, say why it failed.
 * 1: it failed, 0: it did not, -EPROTO: malformed. */
static int take_done(struct seg *g, int i, size_t len)
{
	struct pipe_done d;
	if (pipe_done_decode(g->c.buf, len, &d) < 0) {
		log_err("segment %d (%s): malformed result", i + 1, g->sp.host);
		return -EPROTO;
	}
	g->done = 1;
	g->status = d.status;
	g->in_bytes = d.in_bytes;
	g->in_seconds = (double)d.in_usec / 1e6;
	snprintf(g->kind, sizeof g->kind, "%s", d.kind);
	if (d.status <= 0 && d.in_rc >= 0 && d.out_rc >= 0)
		return 0;
	g->failed = 1;
	if (d.status > 0)
		log_err("segment %d (%s: %s): exited with status %d%s%s", i + 1, g->sp.host,
		        g->sp.cmd, d.status, *d.msg ? "; " : "", d.msg);
	else
		log_err("segment %d (%s: %s): %s", i + 1, g->sp.host, g->sp.cmd,
		        *d.msg ? d.msg : "failed");
	return 1;
}

/* Segment i's control channel ended without a result: reap its remote
 * shell and say what that likely means. */
static void segment_lost(struct run *r, int i)
{
	struct seg *g = &r->g[i];
	int ws = 0;
	waitpid(g->pid, &ws, 0);
	g->pid = 0;
	int xs = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
	if (!g->ready)
		log_err("segment %d: could not start rdpipe on %s (remote shell exit %d): check "
		        "the host, the login, and that rdpipe is installed there (--rdpipe-path)",
		        i + 1, g->sp.host, xs);
	else
		log_err("segment %d (%s: %s): the remote side ended without a result "
		        "(remote shell exit %d)", i + 1, g->sp.host, g->sp.cmd, xs);
	r->why = "segment lost";
	r->code = g->ready ? RD_EXIT_CONN : RD_EXIT_START;
}

/* Segment i's control channel is readable: take one message. 0, or -EPROTO
 * for a malformed DONE (the loop stops reading at once). */
static int take_message(struct run *r, int i)
{
	struct seg *g = &r->g[i];
	uint8_t type;
	size_t len;
	uint16_t port;
	char addr[64];
	if (ctl_recv(&g->c, &type, &len) < 0) {
		segment_lost(r, i);
	} else if (type == CTL_ERROR && len >= 4) {
		char text[512];
		log_err("segment %d (%s: %s): %s", i + 1, g->sp.host, g->sp.cmd,
		        log_path(text, sizeof text, (char *)g->c.buf + 4));
		r->why = "segment error";
		r->code = (int)get_u32(g->c.buf);
		if (r->code <= 0 || r->code > 125)
			r->code = RD_EXIT_PROTO;
	} else if (type == CTL_SEG_READY && !g->ready &&
	           pipe_ready_decode(g->c.buf, len, &port, addr, sizeof addr) == 0) {
		g->port = port;
		/* the address its ssh reached: the host name may be an ssh_config
		 * alias that only ssh knows */
		char *known = *addr ? strdup(addr) : NULL;
		if (known) {
			free(g->sp.addr);
			g->sp.addr = known;
		}
		g->ready = 1;
		r->nready++;
	} else if (type == CTL_SEG_DONE && g->ready) {
		int rc = take_done(g, i, len);
		if (rc < 0) {
			r->why = "protocol";
			r->code = RD_EXIT_PROTO;
			return -EPROTO;
		}
		r->ndone++;
		if (rc > 0)
			r->why = "segment failed";
	} else {
		log_err("segment %d (%s): unexpected message %u", i + 1, g->sp.host, type);
		r->why = "protocol";
		r->code = RD_EXIT_PROTO;
	}
	return 0;
}

/* Until every segment and both local hops are done, or the first failure
 * (r->why), or a signal. */
static void run_loop(struct run *r)
{
	while (!r->why) {
		struct pollfd p[2 + 256];
		int np = 0;
		p[np++] = (struct pollfd){ r->sig, POLLIN, 0 };
		p[np++] = (struct pollfd){ r->note[0], POLLIN, 0 };
		for (int i = 0; i < r->n; i++)
			p[np++] = (struct pollfd){ r->g[i].done ? -1 : r->g[i].c.in, POLLIN, 0 };
		if (poll(p, (nfds_t)np, -1) < 0 && errno != EINTR)
			break;
		if (ctl_signal) {
			r->why = "interrupted";
			r->code = RD_EXIT_SIGNAL;
			break;
		}
		if (p[1].revents & POLLIN)
			take_local_note(r);
		/* all of them: a later failure may be the cause */
		for (int i = 0; i < r->n; i++)
			if (!r->g[i].done && p[2 + i].revents && take_message(r, i) < 0)
				break;
		if (!r->why && r->nready == r->n && !r->started)
			wire(r);
		if (!r->why && r->ndone == r->n && r->local_done == 2)
			break;
	}
}

/* --- the end --- */

/* After a failure: a moment for the other segments' results (the rightmost
 * failing status decides, as with pipefail), then stop everything. The
 * exit code. */
static int stop_failed(struct run *r)
{
	struct seg *g = r->g;
	int n = r->n, code = r->code;
	double until = clock_s() + 0.3;
	for (double left; (left = until - clock_s()) > 0;) {
		struct pollfd p[256];
		for (int i = 0; i < n; i++)
			p[i] = (struct pollfd){ g[i].done || g[i].pid <= 0 ? -1 : g[i].c.in, POLLIN, 0 };
		if (poll(p, (nfds_t)n, (int)(left * 1000) + 1) <= 0)
			break;
		for (int i = 0; i < n; i++) {
			uint8_t type;
			size_t len;
			if (!p[i].revents)
				continue;
			if (ctl_recv(&g[i].c, &type, &len) < 0) {
				g[i].done = 1;
				continue;
			}
			if (type == CTL_SEG_DONE)
				take_done(&g[i], i, len);
		}
	}
	teardown(g, n);
	/* as with pipefail: the rightmost failing command's status wins */
	for (int i = n - 1; i >= 0; i--)
		if (g[i].failed && g[i].status > 0) {
			code = g[i].status;
			break;
		}
	if (code == RD_EXIT_OK)
		code = RD_EXIT_CONN;
	return code;
}

static void print_hop(int k, const char *from, const char *to, uint64_t bytes, double s,
                      const char *kind)
{
	char b[16];
	fprintf(stderr, "%s: hop %d %s -> %s: %s in %.3f s, %.1f MB/s%s%s\n", log_prog, k, from,
	        to, log_bytes(b, bytes), s, s > 0 ? (double)bytes / s / 1e6 : 0.0,
	        *kind ? " over " : "", kind);
}

/* Everything went well: let the remote shells leave, print each hop with
 * -v, free the run. The exit code. */
static int finish(struct run *r)
{
	struct seg *g = r->g;
	int n = r->n;
	for (int i = 0; i < n; i++) {
		close(g[i].c.out);
		g[i].c.out = -1;
		int ws;
		if (g[i].pid > 0 && waitpid(g[i].pid, &ws, 0) == g[i].pid)
			g[i].pid = 0;
	}
	if (r->o->verbose) {
		print_hop(0, "stdin", g[0].sp.host, g[0].in_bytes, g[0].in_seconds, g[0].kind);
		for (int i = 1; i < n; i++)
			print_hop(i, g[i - 1].sp.host, g[i].sp.host, g[i].in_bytes, g[i].in_seconds,
			          g[i].kind);
		print_hop(n, g[n - 1].sp.host, "stdout", r->coll.st.bytes, r->coll.st.seconds,
		          r->coll.kind);
	}
	for (int i = 0; i < n; i++) {
		ctl_free(&g[i].c);
		free(g[i].sp.host);
		free(g[i].sp.addr);
		free(g[i].sp.cmd);
	}
	free(g);
	r->g = NULL;
	tp_listener_free(r->coll.l);
	r->coll.l = NULL;
	return RD_EXIT_OK;
}

int pipe_run(const struct pipe_opts *o)
{
	/* static: the local hop threads may outlive a failing return */
	static struct run r;
	r = (struct run){ .o = o, .n = o->nsegs, .sig = -1, .note = { -1, -1 },
	                  .code = RD_EXIT_OK };
	int code = parse_segments(&r);
	if (code != RD_EXIT_OK)
		return code;
	if (o->dry_run) {
		dry_run(o, r.g, r.n);
		return RD_EXIT_OK;
	}
	if ((code = catch_signals(&r)) != RD_EXIT_OK)
		return code;
	if (make_key(&r) < 0)
		return RD_EXIT_START;
	if ((code = launch(&r)) != RD_EXIT_OK || (code = listen_for_output(&r)) != RD_EXIT_OK)
		return code;
	run_loop(&r);
	return r.why ? stop_failed(&r) : finish(&r);
}
