/* The far side of a sync: `rdcp --server`, started by the client over the
 * remote shell (or forked for a local run), its control channel on stdin
 * and stdout. It takes the role the client's HELLO gives it. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "sync/sync_int.h"

#define RD_STR2(x) #x
#define RD_STR(x) RD_STR2(x)

int sync_server(void)
{
	struct ctl c = { .in = STDIN_FILENO, .out = STDOUT_FILENO };
	struct sync_result res = { 0 };
	struct hello h;
	uint8_t type;
	size_t n;
	signal(SIGPIPE, SIG_IGN);
	int rc = ctl_recv(&c, &type, &n);
	if (rc < 0 || type != CTL_HELLO) {
		log_err("--server: the client did not say hello (%s)",
		        rc < 0 ? strerror(-rc) : "wrong first message");
		ctl_free(&c);
		return RD_EXIT_PROTO;
	}
	rc = hello_decode(c.buf, n, &h);
	if (rc < 0) {
		char why[200];
		int code = rc == -EPROTONOSUPPORT ? RD_EXIT_INCOMPAT : RD_EXIT_PROTO;
		snprintf(why, sizeof why, "the server refused the hello: %s", h.why ? h.why : "?");
		ctl_error(&c, code, rc == -EPROTONOSUPPORT
		          ? "rdcp versions differ: this rdcp speaks protocol " RD_STR(CTL_VERSION) : why);
		ctl_free(&c);
		return code;
	}
	struct role r = { .ctl = &c, .path = h.path, .flags = h.flags,
	                  .rules = h.rules, .nrules = h.nrules, .timeout = h.timeout };
	ctl_set_timeout(&c, h.timeout * 1000);
	int role = h.role;
	char *addr = h.addr;
	r.tp.streams = h.streams;
	r.tp.kind = h.kind;
	r.tp.encrypt = (h.flags & SYNC_F_ENCRYPT) != 0;
	r.verbose = 1;   /* the client decides what to show */
	if (role == ROLE_RECEIVER) {
		r.announce_addr = "";
		sync_receiver(&r, &res);
	} else {
		/* connect back to the client: the address it gave, else the one
		 * ssh says it came from */
		static char from[64];
		const char *sc = getenv("SSH_CONNECTION");
		if (*addr)
			r.connect_addr = addr;
		else if (sc && sscanf(sc, "%63s", from) == 1)
			r.connect_addr = from;
		else
			r.connect_addr = "127.0.0.1";
		r.verbose = 0;
		sync_sender(&r, &res);
	}
	hello_free(&h);
	ctl_free(&c);
	return (int)res.code;
}
