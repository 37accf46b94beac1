/* The far side of a sync: `rdcp --server`, started by the client over the
 * remote shell (or forked for a local run), its control channel on stdin
 * and stdout. It takes the role the client's HELLO gives it. */
#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/rsh.h"
#include "sync/select/select.h"
#include "sync/sync_int.h"
#include "sync/wire/proto.h"

#define RD_STR2(x) #x
#define RD_STR(x) RD_STR2(x)

int sync_server(void)
{
	return sync_serve(0);
}

/* The HELLO's options into a; 0, or the exit code after telling the
 * client why (in an ERROR: the client prints it). */
static int take_hello(struct ctl *c, struct hello *h, struct sync_args *a)
{
	char why[300];
	sync_args_init(a);
	a->mode = SYNC_MODE_FAR;
	int code = sync_args_parse(h->argc, h->argv, a);
	/* operands: a sender's other SRCs (after "--"), nothing else */
	if (code < 0 && a->noperands && h->role != ROLE_SENDER) {
		snprintf(a->why, sizeof a->why, "it gives a receiver an operand");
		code = RD_EXIT_PROTO;
	}
	if (code < 0 && (code = sync_opts_check(&a->o)) == 0)
		return 0;
	snprintf(why, sizeof why, "the server refused the hello: %s",
	         a->why[0] ? a->why : "its options are not valid (see above)");
	ctl_error(c, code, why);
	return code;
}

/* The client's HELLO; 0, or the exit code after saying why. */
static int read_hello(struct ctl *c, struct hello *h)
{
	uint8_t type;
	size_t n;
	int rc = ctl_recv(c, &type, &n);
	if (rc < 0 || type != CTL_HELLO) {
		log_err("--server: the client did not say hello (%s)",
		        rc < 0 ? strerror(-rc) : "wrong first message");
		return RD_EXIT_PROTO;
	}
	rc = hello_decode(c->buf, n, h);
	if (rc < 0) {
		char why[200];
		int code = rc == -EPROTONOSUPPORT ? RD_EXIT_INCOMPAT : RD_EXIT_PROTO;
		snprintf(why, sizeof why, "the server refused the hello: %s", h->why ? h->why : "?");
		ctl_error(c, code, rc == -EPROTONOSUPPORT
		          ? "rdcp versions differ: this rdcp speaks protocol " RD_STR(CTL_VERSION) : why);
		return code;
	}
	return 0;
}

/* host:~/x and host:~user/x, as the remote login shell expands them for
 * rsync (the path comes in the HELLO, not on a command line, so no shell
 * sees it): ~ is $HOME (else the password file's), ~user that user's home.
 * Returns a malloc'd path (path itself copied when it has no ~), or NULL
 * after saying why in *why. */
static char *expand_home(const char *path, const char **why)
{
	if (path[0] != '~')
		return strdup(path);
	const char *rest = strchrnul(path, '/');
	const char *home = NULL;
	char user[256];
	struct passwd *pw;
	if (rest == path + 1) {
		home = getenv("HOME");
		if ((!home || !*home) && (pw = getpwuid(getuid())))
			home = pw->pw_dir;
	} else if ((size_t)(rest - path) <= sizeof user) {
		snprintf(user, sizeof user, "%.*s", (int)(rest - path - 1), path + 1);
		if ((pw = getpwnam(user)))
			home = pw->pw_dir;
	}
	if (!home || !*home) {
		*why = rest == path + 1 ? "this user has no home directory"
		                        : "no such user on this host";
		return NULL;
	}
	char *out;
	return asprintf(&out, "%s%s", home, rest) < 0 ? NULL : out;
}

/* HELLO's path with "~" expanded (over ssh); 0, or the exit code after
 * telling the client why. */
static int take_path(struct ctl *c, struct hello *h, int local)
{
	const char *why = "out of memory";
	char *path = local ? strdup(h->path) : expand_home(h->path, &why);
	if (!path) {
		char msg[300], shown[200];
		snprintf(msg, sizeof msg, "%s: %s", log_path(shown, sizeof shown, h->path), why);
		ctl_error(c, RD_EXIT_SELECT, msg);
		return RD_EXIT_SELECT;
	}
	free(h->path);
	h->path = path;
	return 0;
}

/* The role the client gave us, with the addresses to use. */
static void play(struct role *r, int role, const char *addr, int local,
                 struct sync_result *res)
{
	if (role == ROLE_RECEIVER) {
		/* the sender (the client) dials the address its ssh reached us on,
		 * which it may not know: an ssh_config alias, a ProxyJump */
		r->announce_addr = local ? "" : rsh_server_addr();
		/* a local run's sender is on this machine: listen on loopback only,
		 * and take data connections only from it. Over ssh the data may come
		 * from another address than ssh's (IPoIB, a jump host): the
		 * secret authenticates it. */
		if (local)
			r->listen_addr = r->allow_addr = "127.0.0.1";
		sync_receiver(r, res);
		return;
	}
	/* connect back to the client: the address it gave, else the one ssh
	 * says it came from */
	static char from[64];
	const char *sc = getenv("SSH_CONNECTION");
	if (*addr)
		r->connect_addr = addr;
	else if (sc && sscanf(sc, "%63s", from) == 1)
		r->connect_addr = from;
	else
		r->connect_addr = "127.0.0.1";
	r->verbose = 0;
	sync_sender(r, res);
}

/* The sender's play, pulled with --rounds: the files that change as they
 * are read are listed for the client (after SENT), not said; in the last
 * round (o->take_rounds 0) a large one is sent as read. */
static void play_sender(struct role *r, const struct sync_opts *o, const char *addr, int local,
                        struct sync_result *res)
{
	struct sync_paths retry = { 0 }, as_read = { 0 };
	r->retry = &retry;
	r->as_read = o->round && !o->take_rounds ? &as_read : NULL;
	play(r, ROLE_SENDER, addr, local, res);
	r->retry = NULL;
	r->as_read = NULL;
	sync_paths_free(&retry);
	sync_paths_free(&as_read);
}

/* --watch, --rounds: round after round, each for the paths that changed
 * (or, --rounds, the files that changed as they were sent), until the
 * client ends the control channel (exit 0). A round that failed is the
 * client's to judge; we wait for the next. role: ours (a pull's rounds
 * are the sender's), addr: the client's data address. */
static int rounds(struct role *r, struct sync_opts *o, int role, const char *addr, int local)
{
	int offered = o->take_rounds;   /* --rounds: each round but a last holds back */
	for (;;) {
		uint8_t type;
		size_t n;
		int rc = sync_recv(r, "client", &type, &n);
		if (rc == -EPROTO)
			return RD_EXIT_PROTO;   /* said */
		if (rc == -ETIME)
			return RD_EXIT_TIMEOUT;   /* --timeout: not even a keep-alive */
		if (rc < 0)
			return 0;   /* the client ended the watch: what landed stays */
		if (role == ROLE_SENDER ? type == CTL_DONE || type == CTL_FAILED ||
		                          type == CTL_LANDED || type == CTL_RETRY ||
		                          type == CTL_LOG || type == CTL_PROGRESS
		                        : type == CTL_SENT || type == CTL_FAILED ||
		                          type == CTL_RETRY || type == CTL_ASREAD ||
		                          type == CTL_WCHECK)
			continue;   /* the last round's end, which our side, stopped
			               early (a full disk), did not read */
		if (type != CTL_ROUND || n > 1) {
			log_err("the client sent a message of type %u (%zu bytes) between two rounds",
			        type, n);
			return RD_EXIT_PROTO;
		}
		/* the last of a run's rounds holds nothing back unsaid; the next
		 * window's (--windows) may again */
		o->take_rounds = offered && !(n == 1 && r->ctl->buf[0] == 1);
		for (size_t i = 0; i < o->nfiles; i++)
			free(o->files[i]);
		free(o->files);
		o->files = NULL;
		o->nfiles = 0;
		o->files_from = "-";
		o->round = 1;
		if (sync_files_recv(r, o) < 0) {
			ctl_error(r->ctl, RD_EXIT_PROTO, "the server could not read a "
			          "round's paths (see above)");
			return RD_EXIT_PROTO;
		}
		struct sync_result res = { 0 };
		sync_fails_free(r->fails);
		r->fails = o->json && !o->relay ? sync_fails_new() : NULL;
		if (role == ROLE_SENDER)
			play_sender(r, o, addr, local, &res);
		else
			play(r, ROLE_RECEIVER, "", local, &res);
	}
}

int sync_serve(int local)
{
	struct ctl c = { .in = STDIN_FILENO, .out = STDOUT_FILENO };
	struct sync_result res = { 0 };
	static struct sync_args a;
	struct hello h;
	const char **srcs = NULL;
	signal(SIGPIPE, SIG_IGN);
	if (!local)
		rsh_widen_pipe(STDIN_FILENO);   /* a push's file list comes this way */
	/* our first word, at once: the client knows the login worked and
	 * rdcp runs here (--contimeout), before any scan of ours */
	ctl_send(&c, CTL_NOOP, "", 0);
	int code = read_hello(&c, &h);
	if (!code && (code = take_hello(&c, &h, &a)) != 0)
		hello_free(&h);
	if (code) {
		ctl_free(&c);
		return code;
	}
	const struct sync_opts *o = &a.o;
	if (o->relay_name) {   /* a fan-out's host: say which in every message */
		static char prog[64];
		snprintf(prog, sizeof prog, "rdcp (%s)", o->relay_name);
		for (char *p = prog; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				*p = '?';
		log_prog = prog;
	}
	/* the sender's SRCs: HELLO's path, then its operands */
	if (!(code = take_path(&c, &h, local)) &&
	    !(srcs = calloc((size_t)a.noperands + 1, sizeof *srcs)))
		code = RD_EXIT_FILEIO;
	struct role r = { .ctl = &c, .path = h.path, .flags = o->flags, .o = o,
	                  .srcs = srcs, .nsrc = a.noperands + 1, .timeout = o->timeout,
	                  .tp = { .streams = o->tp.streams, .kind = o->tp.kind,
	                          .encrypt = (o->flags & SYNC_F_ENCRYPT) != 0,
	                          .verbose = o->tp.verbose },   /* -v: the TCP notice */
	                  .local = local, .verbose = 1,   /* the client decides */
	                  /* --json: what fails here goes to the client (a
	                   * fan-out's host reports only its count) */
	                  .fails = o->json && !o->relay ? sync_fails_new() : NULL };
	if (!code) {
		srcs[0] = h.path;
		for (int k = 0; k < a.noperands; k++)
			srcs[k + 1] = a.operands[k];
		ctl_set_timeout(&c, o->timeout * 1000);
		if (o->files_from && sync_files_recv(&r, &a.o) < 0) {   /* --files-from's list */
			ctl_error(&c, RD_EXIT_PROTO, "the server could not read the --files-from "
			          "list (see above)");
			code = RD_EXIT_PROTO;
		}
	}
	struct tp_session *kept = NULL;   /* --watch: one stream's data session */
	if (o->watch && !o->relay)
		r.keep = &kept;
	if (!code) {
		if (o->take_rounds && h.role == ROLE_SENDER)
			play_sender(&r, o, h.addr, local, &res);   /* a pull with rounds */
		else
			play(&r, h.role, h.addr, local, &res);
		code = (int)res.code;
		if (o->watch || o->take_rounds)
			code = rounds(&r, &a.o, h.role, h.addr, local);
	}
	tp_close(kept);
	free(srcs);
	sync_fails_free(r.fails);
	hello_free(&h);
	sync_opts_free(&a.o);
	ctl_free(&c);
	return code;
}
