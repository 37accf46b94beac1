/*
 * rdpipe: a UNIX pipeline whose segments run on hosts, the data going from
 * host to host over the transport and the control over the remote shell.
 *
 * The controller (the rdpipe the user ran) starts `rdpipe --segment` on
 * every segment's host with the remote shell, and tells each one over that
 * channel what to run and the pipeline's key (a fresh random one per run:
 * never on a command line). Every segment listens for its input on a port
 * of its own (port 0: the kernel picks), reports the port, and is told
 * where the next segment listens. Data path, for segments S1..Sn:
 *
 *   stdin -> [controller] -> S1 -> S2 -> ... -> Sn -> [controller] -> stdout
 *
 * each arrow one transport session (the connecting side sends). Each segment
 * reports its command's exit status and what its input hop carried; the
 * first failure anywhere tears the whole pipeline down (closing the control
 * channels, which every segment takes as "kill your command and leave").
 * Messages: docs/protocol.md, "rdpipe".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <wordexp.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/wire.h"
#include "common/ctl.h"
#include "common/rsh.h"
#include "pipe/pipe_int.h"

#define SEG_MAGIC    0x52445053u   /* "RDPS" */
#define SEG_VERSION  1
#define NO_STATUS    (-1)          /* DONE: the segment ran no command */
#define GRACE_MS     2000          /* teardown: time to leave before SIGKILL */

/* --- segments as written: [user@]host:command --- */

struct seg {
	char *host;         /* as given, for the remote shell */
	char *addr;         /* the host without user@ and [], for data connections */
	char *cmd;          /* everything after the ':' */
	enum pipe_op op;
	/* controller state */
	struct ctl c;
	pid_t pid;
	uint16_t port;
	int ready, done, failed;
	int status;         /* command status (exit code, 128 + signal), NO_STATUS */
	uint64_t in_bytes;
	double in_seconds;
	char kind[8];
};

enum pipe_op pipe_op_of(const char *cmd, const char **arg)
{
	while (*cmd == ' ' || *cmd == '\t')
		cmd++;
	enum pipe_op op = PIPE_CMD;
	if (cmd[0] == '<') {
		op = PIPE_FROM;
		cmd++;
	} else if (cmd[0] == '>' && cmd[1] == '>') {
		op = PIPE_APPEND;
		cmd += 2;
	} else if (cmd[0] == '>') {
		op = PIPE_TO;
		cmd++;
	}
	while (op != PIPE_CMD && (*cmd == ' ' || *cmd == '\t'))
		cmd++;
	if (arg)
		*arg = cmd;
	return op;
}

/* "[user@]host:cmd" or "[user@][v6addr]:cmd" */
static int parse_seg(const char *s, int i, struct seg *g)
{
	/* user@ counts only before the first ':' (a command may hold '@') */
	const char *colon, *h = s, *at = strchr(s, '@'), *c1 = strchr(s, ':');
	if (at && c1 && at < c1)
		h = at + 1;
	if (*h == '[') {
		const char *e = strchr(h, ']');
		if (!e || e[1] != ':') {
			log_err("segment %d '%s': an IPv6 address goes in brackets: [addr]:command",
			        i, s);
			return -EINVAL;
		}
		colon = e + 1;
		g->addr = strndup(h + 1, (size_t)(e - h - 1));
	} else {
		colon = strchr(h, ':');
		if (!colon || colon == h) {
			log_err("segment %d '%s' names no host: write HOST:COMMAND", i, s);
			return -EINVAL;
		}
		g->addr = strndup(h, (size_t)(colon - h));
	}
	g->host = strndup(s, (size_t)(colon - s));
	g->cmd = strdup(colon + 1);
	if (!g->host || !g->addr || !g->cmd)
		return -ENOMEM;
	const char *arg;
	g->op = pipe_op_of(g->cmd, &arg);
	if (!*arg) {
		log_err("segment %d '%s': %s", i, s, g->op == PIPE_CMD ? "the command is empty"
		        : "the operator needs a file name");
		return -EINVAL;
	}
	return 0;
}

/* --- wire: the four segment messages --- */

struct setup {
	uint8_t index, count, kind, streams;
	uint8_t key[TP_KEY_LEN];
	char *cmd, *label;
};

static int send_setup(struct ctl *c, const struct setup *s)
{
	struct wire_wr w = { 0 };
	wr_u32(&w, SEG_MAGIC);
	wr_u8(&w, SEG_VERSION);
	wr_u8(&w, s->index);
	wr_u8(&w, s->count);
	wr_u8(&w, s->kind);
	wr_u8(&w, s->streams);
	wr_bytes(&w, s->key, TP_KEY_LEN);
	wr_str16(&w, s->cmd);
	wr_str16(&w, s->label);
	int rc = w.bad ? -ENOMEM : ctl_send(c, CTL_SEG_SETUP, w.buf, w.len);
	free(w.buf);
	return rc;
}

static int pipe_setup_decode(const uint8_t *b, size_t n, struct setup *s)
{
	struct wire_rd r = { b, b + n, 0 };
	memset(s, 0, sizeof *s);
	if (rd_u32(&r) != SEG_MAGIC)
		return -EPROTO;
	if (rd_u8(&r) != SEG_VERSION)
		return -EPROTONOSUPPORT;
	s->index = rd_u8(&r);
	s->count = rd_u8(&r);
	s->kind = rd_u8(&r);
	s->streams = rd_u8(&r);
	const uint8_t *k = rd_take(&r, TP_KEY_LEN);
	s->cmd = rd_str16(&r);
	s->label = rd_str16(&r);
	if (r.bad || r.p != r.end || !s->index || s->index > s->count || s->kind > TP_RDMA ||
	    !s->streams || s->streams > TP_MAX_STREAMS || !s->cmd || !s->label || !*s->cmd) {
		free(s->cmd);
		free(s->label);
		s->cmd = s->label = NULL;
		return -EPROTO;
	}
	memcpy(s->key, k, TP_KEY_LEN);
	return 0;
}

struct done {
	int32_t status, in_rc, out_rc;
	uint64_t in_bytes, in_usec;
	char kind[8];
	char msg[256];
};

static int send_done(struct ctl *c, const struct done *d)
{
	struct wire_wr w = { 0 };
	wr_u32(&w, (uint32_t)d->status);
	wr_u32(&w, (uint32_t)d->in_rc);
	wr_u32(&w, (uint32_t)d->out_rc);
	wr_u64(&w, d->in_bytes);
	wr_u64(&w, d->in_usec);
	wr_str16(&w, d->kind);
	wr_str16(&w, d->msg);
	int rc = w.bad ? -ENOMEM : ctl_send(c, CTL_SEG_DONE, w.buf, w.len);
	free(w.buf);
	return rc;
}

static int done_decode(const uint8_t *b, size_t n, struct done *d)
{
	struct wire_rd r = { b, b + n, 0 };
	d->status = (int32_t)rd_u32(&r);
	d->in_rc = (int32_t)rd_u32(&r);
	d->out_rc = (int32_t)rd_u32(&r);
	d->in_bytes = rd_u64(&r);
	d->in_usec = rd_u64(&r);
	char *k = rd_str16(&r), *m = rd_str16(&r);
	/* a status is what a shell reports: -1 (none), 0..255; the transport
	 * is one we know, or none (no input connection was made) */
	int bad = r.bad || r.p != r.end || !k || !m || d->status < NO_STATUS ||
	          d->status > 255 || d->in_rc > 0 || d->out_rc > 0 ||
	          (strcmp(k, "rdma") && strcmp(k, "tcp") && *k);
	if (!bad) {
		snprintf(d->kind, sizeof d->kind, "%s", k);
		log_path(d->msg, sizeof d->msg, m);   /* remote text: escaped for the terminal */
	}
	free(k);
	free(m);
	return bad ? -EPROTO : 0;
}

/* GO: the next listener's port (non-zero) and address (non-empty, fits). */
static int go_decode(const uint8_t *b, size_t n, char *addr, size_t cap, uint16_t *port)
{
	struct wire_rd r = { b, b + n, 0 };
	*port = rd_u16(&r);
	char *next = rd_str16(&r);
	int bad = r.bad || r.p != r.end || !next || !*next || strlen(next) >= cap || !*port;
	if (!bad)
		snprintf(addr, cap, "%s", next);
	free(next);
	return bad ? -EPROTO : 0;
}

int pipe_msg_check(uint8_t type, const uint8_t *b, size_t n)
{
	struct setup su;
	struct done d;
	char addr[256];
	uint16_t port;
	switch (type) {
	case CTL_SEG_SETUP:
		if (pipe_setup_decode(b, n, &su) < 0)
			return -EPROTO;
		free(su.cmd);
		free(su.label);
		return 0;
	case CTL_SEG_GO:
		return go_decode(b, n, addr, sizeof addr, &port);
	case CTL_SEG_DONE:
		return done_decode(b, n, &d);
	default:
		return -EPROTO;
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ================================================================ segment */

/* One segment's run, on its host. */
struct agent {
	struct setup su;
	struct ctl c;
	enum pipe_op op;
	char *file;                 /* < > >>: the expanded file name */
	struct tp_opts tp;
	struct tp_listener *lin;
	char next[256];
	uint16_t next_port;
	pid_t cmd;                  /* the command's process (group leader), or 0 */
	int cmd_in, cmd_out;        /* our ends of its stdin and stdout */
	int note[2];                /* threads -> main: one byte when done */
	pthread_t tin, tout;
	int in_rc, out_rc, in_done, out_done;
	struct pump_stats in_st, out_st;
	char kind[8];
	char err[200];              /* the first failure, for the controller */
	pthread_mutex_t mu;
};

static void agent_fail(struct agent *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void agent_fail(struct agent *a, const char *fmt, ...)
{
	pthread_mutex_lock(&a->mu);
	if (!a->err[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(a->err, sizeof a->err, fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&a->mu);
}

/* Input hop: the previous segment (or the controller) -> here. */
static void *agent_in(void *arg)
{
	struct agent *a = arg;
	struct tp_session *s = NULL;
	int fd = -1, rc;
	while ((rc = tp_accept(a->lin, -1, &s)) == -EACCES)
		;   /* a peer without the key: dropped, keep waiting for ours */
	if (rc == 0) {
		snprintf(a->kind, sizeof a->kind, "%s", tp_kind_name(s));
		if (a->op == PIPE_CMD) {
			fd = a->cmd_in;
			a->cmd_in = -1;
		} else if (a->op == PIPE_FROM) {
			fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
		} else {
			fd = open(a->file, O_WRONLY | O_CREAT | O_CLOEXEC |
			          (a->op == PIPE_APPEND ? O_APPEND : O_TRUNC), 0666);
			if (fd < 0) {
				rc = -errno;
				agent_fail(a, "cannot write %s: %s", a->file, strerror(errno));
				tp_verdict(s, errno);
			}
		}
		if (fd >= 0) {
			rc = pump_recv(s, fd, a->op == PIPE_CMD ? "the command's input" : a->file,
			               &a->in_st);
			if (rc == -EPIPE)
				rc = 0;   /* the command stopped reading: its status tells */
			else if (rc < 0)
				agent_fail(a, "receiving: %s", strerror(-rc));
			close(fd);
		}
		tp_close(s);
	} else {
		agent_fail(a, "waiting for the input connection: %s", strerror(-rc));
	}
	a->in_rc = rc;
	a->in_done = 1;
	if (write(a->note[1], "i", 1) < 0)
		abort();
	return NULL;
}

/* Output hop: here -> the next segment (or the controller). */
static void *agent_out(void *arg)
{
	struct agent *a = arg;
	struct tp_session *s = NULL;
	int fd = -1, rc = 0;
	if (a->op == PIPE_CMD) {
		fd = a->cmd_out;
		a->cmd_out = -1;
	} else {
		/* < > >>: the input ends first (a new pipeline starts after it) */
		pthread_join(a->tin, NULL);
		if (a->in_rc < 0) {
			rc = a->in_rc;
			goto out;
		}
		fd = open(a->op == PIPE_FROM ? a->file : "/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			rc = -errno;
			agent_fail(a, "cannot read %s: %s", a->file, strerror(errno));
			goto out;
		}
	}
	rc = tp_connect(a->next, a->next_port, &a->tp, &s);
	if (rc < 0) {
		agent_fail(a, "cannot connect to the next segment at %s port %u: %s", a->next,
		           a->next_port, strerror(-rc));
		goto out;
	}
	rc = pump_send(s, fd, a->op == PIPE_FROM ? a->file : "the command's output", &a->out_st);
	if (rc < 0 && !a->out_st.local)
		agent_fail(a, "sending to the next segment: %s", strerror(-rc));
	else if (rc < 0)
		agent_fail(a, "reading %s: %s", a->op == PIPE_FROM ? a->file : "the command's output",
		           strerror(-rc));
	tp_close(s);
out:
	if (fd >= 0)
		close(fd);   /* a command still writing gets SIGPIPE, as in a shell */
	a->out_rc = rc;
	a->out_done = 1;
	if (write(a->note[1], "o", 1) < 0)
		abort();
	return NULL;
}

static const char *user_shell(void)
{
	struct passwd *pw = getpwuid(getuid());
	if (pw && pw->pw_shell && *pw->pw_shell && access(pw->pw_shell, X_OK) == 0)
		return pw->pw_shell;
	return "/bin/sh";
}

/* The command, in a process group of its own (so all of it can be killed),
 * run by the login shell as ssh would run it. */
static int start_command(struct agent *a)
{
	int in[2], out[2];
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
		return -errno;
	fcntl(in[1], F_SETPIPE_SZ, 1 << 20);
	fcntl(out[0], F_SETPIPE_SZ, 1 << 20);
	const char *sh = user_shell();
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		setpgid(0, 0);
		signal(SIGPIPE, SIG_DFL);
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		execl(sh, sh, "-c", a->su.cmd, (char *)NULL);
		log_err("segment %u: cannot run %s: %s", a->su.index, sh, strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	close(in[0]);
	close(out[1]);
	a->cmd = pid;
	a->cmd_in = in[1];
	a->cmd_out = out[0];
	return 0;
}

static void kill_command(struct agent *a)
{
	if (a->cmd <= 0)
		return;
	kill(-a->cmd, SIGTERM);
	for (int i = 0; i < GRACE_MS / 20; i++) {
		if (waitpid(a->cmd, NULL, WNOHANG) != 0 && kill(-a->cmd, 0) < 0)
			return;
		usleep(20000);
	}
	kill(-a->cmd, SIGKILL);
	waitpid(a->cmd, NULL, 0);
}

static int status_of(int ws)
{
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 1;
}

static volatile sig_atomic_t agent_signal;
static void on_agent_signal(int sig)
{
	agent_signal = sig;
}

static void agent_report(struct agent *a, int status)
{
	struct done d = { .status = status, .in_rc = a->in_done ? a->in_rc : 0,
	                  .out_rc = a->out_done ? a->out_rc : 0,
	                  .in_bytes = a->in_st.bytes,
	                  .in_usec = (uint64_t)(a->in_st.seconds * 1e6) };
	pthread_mutex_lock(&a->mu);
	snprintf(d.kind, sizeof d.kind, "%s", a->kind);
	snprintf(d.msg, sizeof d.msg, "%s", a->err);
	pthread_mutex_unlock(&a->mu);
	send_done(&a->c, &d);
}

int pipe_segment(void)
{
	/* static: the threads use it until the process exits, whichever way */
	static struct agent a;
	a = (struct agent){ .c = { STDIN_FILENO, STDOUT_FILENO, NULL, 0 }, .cmd_in = -1,
	                    .cmd_out = -1, .mu = PTHREAD_MUTEX_INITIALIZER };
	uint8_t type;
	size_t n;
	int rc;
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = { .sa_handler = on_agent_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if ((rc = ctl_recv(&a.c, &type, &n)) < 0 || type != CTL_SEG_SETUP) {
		log_err("--segment: the controller sent no setup (%s)",
		        rc < 0 ? strerror(-rc) : "wrong first message");
		return RD_EXIT_PROTO;
	}
	if ((rc = pipe_setup_decode(a.c.buf, n, &a.su)) < 0) {
		ctl_error(&a.c, RD_EXIT_PROTO, rc == -EPROTONOSUPPORT
		          ? "rdpipe versions differ: segment protocol 1 is needed"
		          : "malformed segment setup");
		return RD_EXIT_PROTO;
	}
	log_prog = "rdpipe";
	const char *arg;
	a.op = pipe_op_of(a.su.cmd, &arg);
	if (a.op != PIPE_CMD) {
		/* the file name as the shell would read it: ~, $VAR, quotes */
		wordexp_t we;
		if (wordexp(arg, &we, WRDE_NOCMD) != 0 || we.we_wordc != 1) {
			char m[300];
			snprintf(m, sizeof m, "'%s' is not one file name", arg);
			ctl_error(&a.c, RD_EXIT_USAGE, m);
			return RD_EXIT_USAGE;
		}
		a.file = strdup(we.we_wordv[0]);
		wordfree(&we);
	}
	a.tp = (struct tp_opts){ .kind = a.su.kind, .streams = a.su.streams,
	                         .connect_timeout_ms = 30000, .verbose = -1 };
	memcpy(a.tp.key, a.su.key, TP_KEY_LEN);
	sodium_memzero(a.su.key, TP_KEY_LEN);
	if ((rc = tp_listen(NULL, 0, &a.tp, &a.lin)) < 0) {
		char m[200];
		snprintf(m, sizeof m, "cannot listen for the input: %s", strerror(-rc));
		ctl_error(&a.c, rc == -ENODEV ? RD_EXIT_NORDMA : RD_EXIT_CONN, m);
		return RD_EXIT_CONN;
	}
	uint8_t port[2];
	put_u16(port, tp_listener_port(a.lin));
	if (ctl_send(&a.c, CTL_SEG_READY, port, 2) < 0)
		return RD_EXIT_CONN;
	rc = ctl_recv(&a.c, &type, &n);
	if (rc < 0)
		return RD_EXIT_SIGNAL;   /* the controller gave up before we started */
	if (type != CTL_SEG_GO || go_decode(a.c.buf, n, a.next, sizeof a.next, &a.next_port) < 0) {
		ctl_error(&a.c, RD_EXIT_PROTO, "malformed go message");
		return RD_EXIT_PROTO;
	}

	if (pipe2(a.note, O_CLOEXEC) < 0)
		return RD_EXIT_FILEIO;
	if (a.op == PIPE_CMD && (rc = start_command(&a)) < 0) {
		char m[200];
		snprintf(m, sizeof m, "cannot start the command: %s", strerror(-rc));
		ctl_error(&a.c, RD_EXIT_START, m);
		return RD_EXIT_START;
	}
	int pidfd = a.cmd > 0 ? (int)syscall(SYS_pidfd_open, a.cmd, 0) : -1;
	if (a.cmd > 0 && pidfd < 0) {
		kill_command(&a);
		ctl_error(&a.c, RD_EXIT_START, "pidfd_open failed (Linux 5.3 or later is needed)");
		return RD_EXIT_START;
	}
	pthread_create(&a.tin, NULL, agent_in, &a);
	pthread_create(&a.tout, NULL, agent_out, &a);

	int status = a.cmd > 0 ? -2 : NO_STATUS;   /* -2: still running */
	int threads = 0;
	for (;;) {
		struct pollfd p[3] = { { a.c.in, POLLIN, 0 }, { a.note[0], POLLIN, 0 },
		                       { pidfd, POLLIN, 0 } };
		if (agent_signal)
			break;
		if (poll(p, pidfd >= 0 ? 3 : 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents) {
			/* the controller closed the channel (or ssh died): tear down */
			break;
		}
		if (p[1].revents & POLLIN) {
			char ch;
			if (read(a.note[0], &ch, 1) == 1)
				threads++;
		}
		if (pidfd >= 0 && (p[2].revents & POLLIN)) {
			int ws;
			if (waitpid(a.cmd, &ws, WNOHANG) == a.cmd) {
				status = status_of(ws);
				close(pidfd);
				pidfd = -1;
				/* whatever the command left behind in its group goes too */
				kill(-a.cmd, SIGTERM);
				a.cmd = 0;
			}
		}
		int failed = (status > 0) || (a.in_done && a.in_rc < 0) ||
		             (a.out_done && a.out_rc < 0);
		if (failed || (threads == 2 && status != -2)) {
			agent_report(&a, status == -2 ? NO_STATUS : status);
			if (failed)
				kill_command(&a);
			return failed ? RD_EXIT_CONN : RD_EXIT_OK;
		}
	}
	/* aborted */
	kill_command(&a);
	return RD_EXIT_SIGNAL;
}

/* ============================================================ controller */

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

static volatile sig_atomic_t ctl_signal;
static int sigpipe_w = -1;
static void on_ctl_signal(int sig)
{
	ctl_signal = sig;
	if (sigpipe_w >= 0 && write(sigpipe_w, "s", 1) < 0) {
		/* nothing to do in a handler */
	}
}

static void dry_run(const struct pipe_opts *o, struct seg *g, int n)
{
	printf("rdpipe: %d segment%s; nothing is run (-n). Each segment would be started "
	       "with:\n  %s HOST %s --segment\n", n, n == 1 ? "" : "s", o->rsh ? o->rsh : "ssh",
	       o->rdpipe_path ? o->rdpipe_path : "rdpipe");
	for (int i = 0; i < n; i++) {
		const char *arg;
		pipe_op_of(g[i].cmd, &arg);
		printf("segment %d on %s: ", i + 1, g[i].host);
		switch (g[i].op) {
		case PIPE_CMD:
			printf("input | %s | output\n", g[i].cmd);
			break;
		case PIPE_FROM:
			printf("input to /dev/null, then the file %s as output\n", arg);
			break;
		case PIPE_TO:
		case PIPE_APPEND:
			printf("input %s the file %s, then an empty output\n",
			       g[i].op == PIPE_TO ? "written to" : "appended to", arg);
			break;
		}
		printf("  input from %s%s; output to %s%s\n", i ? "segment on " : "rdpipe's stdin",
		       i ? g[i - 1].addr : "", i + 1 < n ? "segment on " : "rdpipe's stdout",
		       i + 1 < n ? g[i + 1].addr : "");
	}
}

static void print_hop(int k, const char *from, const char *to, uint64_t bytes, double s,
                      const char *kind)
{
	char b[16];
	fprintf(stderr, "%s: hop %d %s -> %s: %s in %.3f s, %.1f MB/s%s%s\n", log_prog, k, from,
	        to, log_bytes(b, bytes), s, s > 0 ? (double)bytes / s / 1e6 : 0.0,
	        *kind ? " over " : "", kind);
}

/* A segment's DONE (in its frame buffer): record it, say why it failed.
 * 1: it failed, 0: it did not, -EPROTO: malformed. */
static int take_done(struct seg *g, int i, size_t len)
{
	struct done d;
	if (done_decode(g->c.buf, len, &d) < 0) {
		log_err("segment %d (%s): malformed result", i + 1, g->host);
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
		log_err("segment %d (%s: %s): exited with status %d%s%s", i + 1, g->host, g->cmd,
		        d.status, *d.msg ? "; " : "", d.msg);
	else
		log_err("segment %d (%s: %s): %s", i + 1, g->host, g->cmd, *d.msg ? d.msg : "failed");
	return 1;
}

static void teardown(struct seg *g, int n)
{
	for (int i = 0; i < n; i++)
		if (g[i].c.out >= 0) {
			close(g[i].c.out);   /* EOF: the segment kills its command and leaves */
			g[i].c.out = -1;
		}
	double end = now_s() + GRACE_MS / 1000.0 + 1;
	for (int left = n; left > 0 && now_s() < end;) {
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

int pipe_run(const struct pipe_opts *o)
{
	int n = o->nsegs, code = RD_EXIT_OK;
	/* static: the local hop threads may outlive a failing return */
	static struct seg *g;
	g = calloc((size_t)n, sizeof *g);
	if (!g)
		return RD_EXIT_FILEIO;
	for (int i = 0; i < n; i++) {
		g[i].c = (struct ctl){ -1, -1, NULL, 0 };
		g[i].status = NO_STATUS;
		if (parse_seg(o->segs[i], i + 1, &g[i]) < 0)
			return RD_EXIT_USAGE;
	}
	if (n > 255) {
		log_err("at most 255 segments");
		return RD_EXIT_USAGE;
	}
	if (o->dry_run) {
		dry_run(o, g, n);
		return RD_EXIT_OK;
	}
	if (sodium_init() < 0)
		return RD_EXIT_START;
	signal(SIGPIPE, SIG_IGN);
	int sp[2], note[2];
	if (pipe2(sp, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(note, O_CLOEXEC) < 0)
		return RD_EXIT_FILEIO;
	sigpipe_w = sp[1];
	struct sigaction sa = { .sa_handler = on_ctl_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	/* one fresh key for every hop of this pipeline */
	struct tp_opts tp = o->tp;
	if (!tp.streams)
		tp.streams = 1;
	tp.connect_timeout_ms = 30000;
	tp.verbose = -1;   /* no per-hop fallback notice: -v names each hop's transport */
	randombytes_buf(tp.key, TP_KEY_LEN);

	const char *words[] = { o->rdpipe_path ? o->rdpipe_path : "rdpipe", "--segment", NULL };
	for (int i = 0; i < n; i++) {
		g[i].pid = rsh_spawn(o->rsh, g[i].host, words, &g[i].c.out, &g[i].c.in);
		if (g[i].pid < 0) {
			log_err("segment %d (%s): cannot start the remote shell: %s", i + 1, g[i].host,
			        strerror(errno));
			teardown(g, i);
			return RD_EXIT_START;
		}
		struct setup su = { .index = (uint8_t)(i + 1), .count = (uint8_t)n,
		                    .kind = (uint8_t)tp.kind, .streams = (uint8_t)tp.streams,
		                    .cmd = g[i].cmd,
		                    .label = g[i].host };
		memcpy(su.key, tp.key, TP_KEY_LEN);
		send_setup(&g[i].c, &su);   /* a failure shows as EOF below */
		sodium_memzero(su.key, TP_KEY_LEN);
	}

	/* the last hop comes back to us */
	static struct tp_opts stp;
	static struct local_hop feed, coll;
	stp = tp;
	feed = (struct local_hop){ .fd = STDIN_FILENO, .note = note[1], .tp = &stp };
	coll = (struct local_hop){ .fd = STDOUT_FILENO, .note = note[1], .tp = &stp };
	char me[64];
	int rc = local_addr_for(g[n - 1].addr, me, sizeof me);
	if (rc == 0 && (rc = tp_listen(NULL, 0, &tp, &coll.l)) < 0)
		log_err("cannot listen for the pipeline's output: %s", strerror(-rc));
	if (rc < 0) {
		teardown(g, n);
		return rc == -ENODEV ? RD_EXIT_NORDMA : RD_EXIT_CONN;
	}

	int nready = 0, ndone = 0, local_done = 0, started = 0;
	const char *why = NULL;
	while (!why) {
		struct pollfd p[258];
		int np = 0;
		p[np++] = (struct pollfd){ sp[0], POLLIN, 0 };
		p[np++] = (struct pollfd){ note[0], POLLIN, 0 };
		for (int i = 0; i < n; i++)
			p[np++] = (struct pollfd){ g[i].done ? -1 : g[i].c.in, POLLIN, 0 };
		if (poll(p, (nfds_t)np, -1) < 0 && errno != EINTR)
			break;
		if (ctl_signal) {
			why = "interrupted";
			code = RD_EXIT_SIGNAL;
			break;
		}
		if (p[1].revents & POLLIN) {
			char ch;
			if (read(note[0], &ch, 1) == 1)
				local_done++;
			if (feed.done && feed.rc < 0 && !feed.st.local) {
				log_err("hop 0 (stdin -> %s): %s", g[0].host, strerror(-feed.rc));
				why = "hop failed";
				code = pump_exit_code(feed.rc, &feed.st);
			} else if (feed.done && feed.rc < 0) {
				why = "reading stdin failed";
				code = RD_EXIT_FILEIO;
			}
			if (coll.done && coll.rc < 0) {
				if (coll.rc != -EPIPE)
					log_err("hop %d (%s -> stdout): %s", n, g[n - 1].host,
					        strerror(-coll.rc));
				why = "hop failed";
				code = coll.rc == -EPIPE ? RD_EXIT_FILEIO : pump_exit_code(coll.rc, &coll.st);
			}
		}
		for (int i = 0; i < n; i++) {   /* all of them: a later failure may be the cause */
			if (g[i].done || !(p[2 + i].revents))
				continue;
			uint8_t type;
			size_t len;
			rc = ctl_recv(&g[i].c, &type, &len);
			if (rc < 0) {
				int ws = 0;
				waitpid(g[i].pid, &ws, 0);
				g[i].pid = 0;
				int xs = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
				if (!g[i].ready)
					log_err("segment %d: could not start rdpipe on %s (remote shell exit "
					        "%d): check the host, the login, and that rdpipe is installed "
					        "there (--rdpipe-path)", i + 1, g[i].host, xs);
				else
					log_err("segment %d (%s: %s): the remote side ended without a result "
					        "(remote shell exit %d)", i + 1, g[i].host, g[i].cmd, xs);
				why = "segment lost";
				code = g[i].ready ? RD_EXIT_CONN : RD_EXIT_START;
			} else if (type == CTL_ERROR && len >= 4) {
				char text[512];
				log_err("segment %d (%s: %s): %s", i + 1, g[i].host, g[i].cmd,
				        log_path(text, sizeof text, (char *)g[i].c.buf + 4));
				why = "segment error";
				code = (int)get_u32(g[i].c.buf);
				if (code <= 0 || code > 125)
					code = RD_EXIT_PROTO;
			} else if (type == CTL_SEG_READY && len == 2 && !g[i].ready &&
			           get_u16(g[i].c.buf)) {
				g[i].port = get_u16(g[i].c.buf);
				g[i].ready = 1;
				nready++;
			} else if (type == CTL_SEG_DONE && g[i].ready) {
				int rc2 = take_done(&g[i], i, len);
				if (rc2 < 0) {
					why = "protocol";
					code = RD_EXIT_PROTO;
					break;
				}
				ndone++;
				if (rc2 > 0)
					why = "segment failed";
			} else {
				log_err("segment %d (%s): unexpected message %u", i + 1, g[i].host, type);
				why = "protocol";
				code = RD_EXIT_PROTO;
			}
		}
		if (!why && nready == n && !started) {
			/* everyone listens: wire each segment to the next */
			for (int i = 0; i < n; i++) {
				struct wire_wr w = { 0 };
				wr_u16(&w, i + 1 < n ? g[i + 1].port : tp_listener_port(coll.l));
				wr_str16(&w, i + 1 < n ? g[i + 1].addr : me);
				if (w.bad || ctl_send(&g[i].c, CTL_SEG_GO, w.buf, w.len) < 0)
					why = "segment lost";
				free(w.buf);
			}
			feed.host = g[0].addr;
			feed.port = g[0].port;
			if (g[0].op == PIPE_FROM)   /* its input is thrown away: don't wait for ours */
				feed.fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
			pthread_t t;
			pthread_create(&t, NULL, feed_main, &feed);
			pthread_detach(t);
			pthread_create(&t, NULL, collect_main, &coll);
			pthread_detach(t);
			started = 1;
		}
		if (!why && ndone == n && local_done == 2)
			break;
	}
	if (why) {
		/* a moment for the other segments' results (the rightmost failing
		 * status decides, as with pipefail), then stop everything */
		double until = now_s() + 0.3;
		for (double left; (left = until - now_s()) > 0;) {
			struct pollfd p[256];
			for (int i = 0; i < n; i++)
				p[i] = (struct pollfd){ g[i].done || g[i].pid <= 0 ? -1 : g[i].c.in,
				                        POLLIN, 0 };
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
	for (int i = 0; i < n; i++) {
		close(g[i].c.out);
		g[i].c.out = -1;
		int ws;
		if (g[i].pid > 0 && waitpid(g[i].pid, &ws, 0) == g[i].pid)
			g[i].pid = 0;
	}
	if (o->verbose) {
		print_hop(0, "stdin", g[0].host, g[0].in_bytes, g[0].in_seconds, g[0].kind);
		for (int i = 1; i < n; i++)
			print_hop(i, g[i - 1].host, g[i].host, g[i].in_bytes, g[i].in_seconds, g[i].kind);
		print_hop(n, g[n - 1].host, "stdout", coll.st.bytes, coll.st.seconds, coll.kind);
	}
	for (int i = 0; i < n; i++) {
		ctl_free(&g[i].c);
		free(g[i].host);
		free(g[i].addr);
		free(g[i].cmd);
	}
	free(g);
	g = NULL;
	tp_listener_free(coll.l);
	coll.l = NULL;
	return RD_EXIT_OK;
}
