/*
 * The far side of one rdpipe segment: `rdpipe --segment`, started by the
 * controller over the remote shell, its control channel on stdin/stdout.
 *
 * It takes SETUP (what to run, the key), listens for its input on a port
 * the kernel picks and reports it (READY), learns where the next listener
 * is (GO), then runs its command in a process group of its own with two
 * agent threads: the input hop (accept, pump into the command's stdin, or
 * /dev/null for '<', or the file for '>' and '>>') and the output hop
 * (connect to the next, pump from the command's stdout, or the file for
 * '<', or an empty stream for '>' and '>>'). The main thread watches the
 * control channel (EOF: stop), the command (a pidfd) and the threads, and
 * sends DONE at the end, or at once on the first failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include "common/crypto.h"
#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "pipe/pipe_int.h"

#define STILL_RUNNING (-2)   /* the command's status while it runs */

/* One segment's run, on its host. */
struct agent {
	struct pipe_setup su;
	struct ctl c;
	enum pipe_op op;
	char *file;                 /* < > >>: the expanded file name */
	struct tp_opts tp;
	struct tp_listener *lin;
	char next[256];
	uint16_t next_port;
	pid_t cmd;                  /* the command's process (group leader), or 0 */
	int pidfd;                  /* the command's pidfd, or -1 */
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

/* --- the agent threads: one per hop --- */

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

/* --- the command --- */

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
	for (int i = 0; i < PIPE_GRACE_MS / 20; i++) {
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

/* The pidfd says the command ended: take its status (or leave *status as
 * it was if it has not quite), and end whatever it left in its group. */
static void reap_command(struct agent *a, int *status)
{
	int ws;
	if (waitpid(a->cmd, &ws, WNOHANG) != a->cmd)
		return;
	*status = status_of(ws);
	close(a->pidfd);
	a->pidfd = -1;
	kill(-a->cmd, SIGTERM);
	a->cmd = 0;
}

/* --- the segment's run, step by step --- */

static volatile sig_atomic_t agent_signal;
static void on_agent_signal(int sig)
{
	agent_signal = sig;
}

static void catch_signals(void)
{
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = { .sa_handler = on_agent_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

/* Say why we cannot go on (the controller prints it) and give the exit
 * code. */
static int refuse(struct agent *a, int code, const char *what, int rc)
{
	char m[200];
	snprintf(m, sizeof m, "%s: %s", what, strerror(-rc));
	ctl_error(&a->c, code, m);
	return code;
}

/* SETUP: what to run; for an operator, its file name as the shell would
 * read it (~, $VAR, quotes). An exit code. */
static int agent_setup(struct agent *a)
{
	uint8_t type;
	size_t n;
	int rc;
	if ((rc = ctl_recv(&a->c, &type, &n)) < 0 || type != CTL_SEG_SETUP) {
		log_err("--segment: the controller sent no setup (%s)",
		        rc < 0 ? strerror(-rc) : "wrong first message");
		return RD_EXIT_PROTO;
	}
	if ((rc = pipe_setup_decode(a->c.buf, n, &a->su)) < 0) {
		ctl_error(&a->c, RD_EXIT_PROTO, rc == -EPROTONOSUPPORT
		          ? "rdpipe versions differ: segment protocol 1 is needed"
		          : "malformed segment setup");
		return RD_EXIT_PROTO;
	}
	log_prog = "rdpipe";
	const char *arg;
	a->op = pipe_op_of(a->su.cmd, &arg);
	if (a->op == PIPE_CMD)
		return RD_EXIT_OK;
	wordexp_t we;
	if (wordexp(arg, &we, WRDE_NOCMD) != 0 || we.we_wordc != 1) {
		char m[300];
		snprintf(m, sizeof m, "'%s' is not one file name", arg);
		ctl_error(&a->c, RD_EXIT_USAGE, m);
		return RD_EXIT_USAGE;
	}
	a->file = strdup(we.we_wordv[0]);
	wordfree(&we);
	return RD_EXIT_OK;
}

/* Listen for the input with the run's key (kept only in the transport's
 * options), then READY with the port. An exit code. */
static int agent_listen(struct agent *a)
{
	a->tp = (struct tp_opts){ .kind = a->su.kind, .streams = a->su.streams,
	                          .connect_timeout_ms = PIPE_CONNECT_MS, .verbose = -1 };
	memcpy(a->tp.key, a->su.key, TP_KEY_LEN);
	cr_wipe(a->su.key, TP_KEY_LEN);
	int rc = tp_listen(NULL, 0, &a->tp, &a->lin);
	if (rc < 0) {
		refuse(a, rc == -ENODEV ? RD_EXIT_NORDMA : RD_EXIT_CONN,
		       "cannot listen for the input", rc);
		return RD_EXIT_CONN;
	}
	if (pipe_ready_send(&a->c, tp_listener_port(a->lin), rsh_server_addr()) < 0)
		return RD_EXIT_CONN;
	return RD_EXIT_OK;
}

/* GO: where the next listener is. An exit code. */
static int agent_wait_go(struct agent *a)
{
	uint8_t type;
	size_t n;
	if (ctl_recv(&a->c, &type, &n) < 0)
		return RD_EXIT_SIGNAL;   /* the controller gave up before we started */
	if (type != CTL_SEG_GO ||
	    pipe_go_decode(a->c.buf, n, a->next, sizeof a->next, &a->next_port) < 0) {
		ctl_error(&a->c, RD_EXIT_PROTO, "malformed go message");
		return RD_EXIT_PROTO;
	}
	return RD_EXIT_OK;
}

/* Start the command (if there is one) and both hops. An exit code. */
static int agent_start(struct agent *a)
{
	int rc;
	if (pipe2(a->note, O_CLOEXEC) < 0)
		return RD_EXIT_FILEIO;
	if (a->op == PIPE_CMD && (rc = start_command(a)) < 0)
		return refuse(a, RD_EXIT_START, "cannot start the command", rc);
	a->pidfd = a->cmd > 0 ? (int)syscall(SYS_pidfd_open, a->cmd, 0) : -1;
	if (a->cmd > 0 && a->pidfd < 0) {
		kill_command(a);
		ctl_error(&a->c, RD_EXIT_START, "pidfd_open failed (Linux 5.3 or later is needed)");
		return RD_EXIT_START;
	}
	pthread_create(&a->tin, NULL, agent_in, a);
	pthread_create(&a->tout, NULL, agent_out, a);
	return RD_EXIT_OK;
}

static void agent_report(struct agent *a, int status)
{
	struct pipe_done d = { .status = status, .in_rc = a->in_done ? a->in_rc : 0,
	                       .out_rc = a->out_done ? a->out_rc : 0,
	                       .in_bytes = a->in_st.bytes,
	                       .in_usec = (uint64_t)(a->in_st.seconds * 1e6) };
	pthread_mutex_lock(&a->mu);
	snprintf(d.kind, sizeof d.kind, "%s", a->kind);
	snprintf(d.msg, sizeof d.msg, "%s", a->err);
	pthread_mutex_unlock(&a->mu);
	pipe_done_send(&a->c, &d);
}

/* Until both hops and the command are done (then DONE), or the first
 * failure (DONE at once, the command killed), or the controller leaves or
 * a signal comes (the command killed, no DONE). An exit code. */
static int agent_watch(struct agent *a)
{
	int status = a->cmd > 0 ? STILL_RUNNING : PIPE_NO_STATUS;
	int threads = 0;
	for (;;) {
		struct pollfd p[3] = { { a->c.in, POLLIN, 0 }, { a->note[0], POLLIN, 0 },
		                       { a->pidfd, POLLIN, 0 } };
		if (agent_signal)
			break;
		if (poll(p, a->pidfd >= 0 ? 3 : 2, -1) < 0) {
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
			if (read(a->note[0], &ch, 1) == 1)
				threads++;
		}
		if (a->pidfd >= 0 && (p[2].revents & POLLIN))
			reap_command(a, &status);
		int failed = (status > 0) || (a->in_done && a->in_rc < 0) ||
		             (a->out_done && a->out_rc < 0);
		if (failed || (threads == 2 && status != STILL_RUNNING)) {
			agent_report(a, status == STILL_RUNNING ? PIPE_NO_STATUS : status);
			if (failed)
				kill_command(a);
			return failed ? RD_EXIT_CONN : RD_EXIT_OK;
		}
	}
	/* aborted */
	kill_command(a);
	return RD_EXIT_SIGNAL;
}

int pipe_segment(void)
{
	/* static: the threads use it until the process exits, whichever way */
	static struct agent a;
	a = (struct agent){ .c = { .in = STDIN_FILENO, .out = STDOUT_FILENO }, .pidfd = -1,
	                    .cmd_in = -1, .cmd_out = -1, .mu = PTHREAD_MUTEX_INITIALIZER };
	catch_signals();
	int code = agent_setup(&a);
	if (code == RD_EXIT_OK)
		code = agent_listen(&a);
	if (code == RD_EXIT_OK)
		code = agent_wait_go(&a);
	if (code == RD_EXIT_OK)
		code = agent_start(&a);
	return code == RD_EXIT_OK ? agent_watch(&a) : code;
}
