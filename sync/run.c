/*
 * A sync run: the client (the rdcp the user started) starts the far side
 * with the remote shell (`ssh host rdcp --server`), or, for local to local,
 * forks it; the two talk over the control channel (docs/protocol.md), and
 * data goes over the transport, from the sender to the receiver.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "common/wire.h"
#include "sync/sync_int.h"

struct endpoint {
	char *host;   /* NULL: local */
	char *path;
};

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

/* The host part without "user@", for data connections. */
static const char *bare_host(const char *h)
{
	const char *at = strrchr(h, '@');
	return at ? at + 1 : h;
}

/* Start `rsh host rdcp --server` with pipes; returns its pid. */
static pid_t spawn_remote(const struct sync_opts *o, const char *host, struct ctl *c)
{
	const char *words[] = { o->rdcp_path ? o->rdcp_path : "rdcp", "--server", NULL };
	return rsh_spawn(o->rsh, host, words, &c->out, &c->in);
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
		_exit(sync_server());
	}
	close(sv[1]);
	c->in = c->out = sv[0];
	return pid;
}


/* HELLO: magic, version, the server's role, flags, transport, path, address */
static int send_hello(struct ctl *c, int role, const struct sync_opts *o, const char *path,
                      const char *addr)
{
	size_t pl = strlen(path), al = strlen(addr), fl = 2;
	for (int i = 0; i < o->nrules; i++)
		fl += 3 + strlen(o->rules[i].pattern);
	uint8_t *b = malloc(16 + pl + al + fl);
	if (!b)
		return -ENOMEM;
	put_u32(b, CTL_MAGIC);
	b[4] = CTL_VERSION;
	b[5] = (uint8_t)role;
	put_u32(b + 6, o->flags);
	b[10] = (uint8_t)(o->tp.streams > 0 ? o->tp.streams : 1);
	b[11] = (uint8_t)o->tp.kind;
	put_u16(b + 12, (uint16_t)pl);
	memcpy(b + 14, path, pl);
	put_u16(b + 14 + pl, (uint16_t)al);
	memcpy(b + 16 + pl, addr, al);
	uint8_t *p = b + 16 + pl + al;
	put_u16(p, (uint16_t)o->nrules);
	p += 2;
	for (int i = 0; i < o->nrules; i++) {
		size_t n = strlen(o->rules[i].pattern);
		*p++ = (uint8_t)o->rules[i].include;
		put_u16(p, (uint16_t)n);
		memcpy(p + 2, o->rules[i].pattern, n);
		p += 2 + n;
	}
	int rc = ctl_send(c, CTL_HELLO, b, 16 + pl + al + fl);
	free(b);
	return rc;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int sync_client(const struct sync_opts *o)
{
	struct endpoint src, dst;
	struct ctl c = { -1, -1, NULL, 0 };
	struct sync_result res = { 0 };
	double t0 = now_s();
	if (parse_endpoint(o->src, &src) < 0 || parse_endpoint(o->dst, &dst) < 0)
		return RD_EXIT_USAGE;
	if (src.host && dst.host) {
		log_err("SRC and DST are both remote: one side must be local");
		return RD_EXIT_USAGE;
	}
	signal(SIGPIPE, SIG_IGN);
	const char *remote = src.host ? src.host : dst.host;
	pid_t pid = remote ? spawn_remote(o, remote, &c) : spawn_local(&c);
	if (pid < 0) {
		log_err("cannot start the other side: %s", strerror(errno));
		return RD_EXIT_START;
	}
	struct role r = { .ctl = &c, .flags = o->flags, .tp = o->tp, .is_client = 1,
	                  .verbose = o->verbose, .rules = o->rules, .nrules = o->nrules,
	                  .progress = o->progress };
	if (!remote && r.tp.kind == TP_AUTO)
		r.tp.kind = TP_TCP;   /* same machine: loopback, nothing to choose */
	int rc;
	if (src.host) {   /* remote -> local: we receive */
		rc = send_hello(&c, ROLE_SENDER, o, src.path, o->data_addr ? o->data_addr : "");
		r.path = dst.path;
		r.announce_addr = o->data_addr ? o->data_addr : "";
		if (rc == 0)
			sync_receiver(&r, &res);
	} else {          /* local -> remote or local: we send */
		rc = send_hello(&c, ROLE_RECEIVER, o, dst.path, "");
		r.path = src.path;
		r.connect_addr = o->data_addr ? o->data_addr
		                 : remote ? bare_host(remote) : "127.0.0.1";
		if (rc == 0)
			sync_sender(&r, &res);
	}
	close(c.out);
	if (c.in != c.out)
		close(c.in);
	int status = 0;
	waitpid(pid, &status, 0);
	int code = res.code, xs = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	if (remote && (xs == 127 || xs == 126 || (xs == 255 && (rc < 0 || code)))) {
		/* the remote shell could not run rdcp, or ssh itself failed */
		log_err("could not start rdcp on %s (remote shell exit %d): check the host, "
		        "the login, and that rdcp is installed there (--rdcp-path)", remote, xs);
		code = RD_EXIT_START;
	} else if (!code && (rc < 0 || xs != 0)) {
		code = xs > 0 ? xs : RD_EXIT_PROTO;
	}
	if (o->verbose) {
		double s = now_s() - t0;
		char b[16];
		fprintf(stderr, "%s: %llu files (%s) transferred, %llu metadata updates, "
		        "%llu deleted, %llu errors in %.3f s (%.1f MB/s%s%s)\n", log_prog,
		        (unsigned long long)res.files, log_bytes(b, res.bytes),
		        (unsigned long long)res.meta, (unsigned long long)res.deleted,
		        (unsigned long long)res.errors, s, s > 0 ? (double)res.bytes / s / 1e6 : 0.0,
		        res.transport ? " over " : "", res.transport ? res.transport : "");
	}
	ctl_free(&c);
	free(src.host);
	free(src.path);
	free(dst.host);
	free(dst.path);
	return code;
}

/* The rules at the end of HELLO: count (2), then include (1), length (2),
 * pattern; every length bounded by the frame. */
static int parse_rules(const uint8_t *p, size_t len, struct sync_rule **out, int *n)
{
	struct wire_rd r = { p, p + len, 0 };
	int count = rd_u16(&r);
	if (count > 10000)
		return -EPROTO;
	struct sync_rule *v = calloc((size_t)count + 1, sizeof *v);
	if (!v)
		return -ENOMEM;
	for (int i = 0; i < count; i++) {
		v[i].include = rd_u8(&r) != 0;
		size_t l = rd_u16(&r);
		const uint8_t *s = rd_take(&r, l);
		if (r.bad || !l || memchr(s, 0, l) || !(v[i].pattern = strndup((const char *)s, l))) {
			for (int k = 0; k < i; k++)
				free((char *)v[k].pattern);
			free(v);
			return -EPROTO;
		}
	}
	if (r.p != r.end) {
		for (int k = 0; k < count; k++)
			free((char *)v[k].pattern);
		free(v);
		return -EPROTO;
	}
	*out = v;
	*n = count;
	return 0;
}

int hello_decode(const uint8_t *b, size_t n, struct hello *h)
{
	memset(h, 0, sizeof *h);
	if (n < 18 || get_u32(b) != CTL_MAGIC)
		return -EPROTO;
	if (b[4] != CTL_VERSION)
		return -EPROTONOSUPPORT;
	size_t pl = get_u16(b + 12);
	if (14 + pl + 2 > n)
		return -EPROTO;
	size_t al = get_u16(b + 14 + pl);
	if (16 + pl + al + 2 > n)
		return -EPROTO;
	h->role = b[5];
	h->flags = get_u32(b + 6);
	h->streams = b[10] >= 1 && b[10] <= TP_MAX_STREAMS ? b[10] : 1;
	h->kind = b[11] <= TP_RDMA ? (enum tp_kind)b[11] : TP_AUTO;
	if ((h->role != ROLE_SENDER && h->role != ROLE_RECEIVER) || (h->flags & ~SYNC_F_ALL) ||
	    pl == 0 || memchr(b + 14, 0, pl) || memchr(b + 16 + pl, 0, al))
		return -EPROTO;
	if (parse_rules(b + 16 + pl + al, n - 16 - pl - al, &h->rules, &h->nrules) < 0)
		return -EPROTO;
	h->path = strndup((const char *)b + 14, pl);
	h->addr = strndup((const char *)b + 16 + pl, al);
	if (!h->path || !h->addr) {
		hello_free(h);
		return -ENOMEM;
	}
	return 0;
}

void hello_free(struct hello *h)
{
	for (int i = 0; i < h->nrules; i++)
		free((char *)h->rules[i].pattern);
	free(h->rules);
	free(h->path);
	free(h->addr);
	memset(h, 0, sizeof *h);
}

int sync_server(void)
{
	struct ctl c = { STDIN_FILENO, STDOUT_FILENO, NULL, 0 };
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
		ctl_error(&c, RD_EXIT_PROTO, rc == -EPROTONOSUPPORT
		          ? "rdcp versions differ: protocol 1 is needed" : "malformed hello");
		ctl_free(&c);
		return RD_EXIT_PROTO;
	}
	struct role r = { .ctl = &c, .path = h.path, .flags = h.flags,
	                  .rules = h.rules, .nrules = h.nrules };
	int role = h.role;
	char *addr = h.addr;
	r.tp.streams = h.streams;
	r.tp.kind = h.kind;
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
