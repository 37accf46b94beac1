/* rdrecv: receive one rdsend's stream to stdout (or FILE). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "pipe/pipe.h"

static const char usage[] =
"Usage: rdrecv [OPTIONS] PORT KEY [FILE]\n"
"\n"
"Wait on PORT for one rdsend that knows KEY, and write what it sends to\n"
"standard output (or FILE). Connections that are not rdsend, do not know\n"
"KEY, stay silent or (with --allow) come from elsewhere are closed and\n"
"reported, and rdrecv goes on waiting for its sender. FILE is created or\n"
"truncated only once a sender has authenticated.\n"
"Exits 0 only when everything was received and written. PORT 0: the kernel\n"
"picks a free port, and rdrecv says which on stderr: 'rdrecv: listening on\n"
"port N'.\n"
"\n"
"  KEY                the shared secret; '-' takes it from --key-file or\n"
"                     from $RDCP_KEY (else asks on the terminal), so it\n"
"                     does not show up in ps\n"
"  FILE               write this file (created or truncated) with parallel\n"
"                     positioned writes\n"
"  -v, --verbose      print the bandwidth at the end\n"
"  --transport T      rdma, tcp or auto (default: auto: listen on RDMA when\n"
"                     there is an RDMA device, and on TCP)\n"
"  --listen ADDR      listen on this address only (default: all)\n"
"  --allow ADDR       talk only to connections from this numeric IPv4 or\n"
"                     IPv6 address (default: anyone who knows KEY)\n"
"  --key-file F       read the key from the first line of F (with KEY '-')\n"
"  --encrypt          encrypt and authenticate every message (TCP only; the\n"
"                     other side must say --encrypt too)\n"
"  --pool SIZE        buffer memory, registered once (default 32M)\n"
"  --msg-size SIZE    largest message accepted (default 1M)\n"
"  --timeout SEC      I/O timeout: fail if nothing moves for SEC seconds\n"
"                     (a stopped or stuck sender); 0: none (default)\n"
"  --contimeout SEC   give up if no sender comes within SEC seconds\n"
"                     (default, or 0: wait forever)\n"
"  -h, --help         this text;  --version  the version\n"
"\n"
"Exit status: 0 ok, 1 usage, 3 FILE cannot be created, 10 connection\n"
"failed or lost (or no sender within --contimeout), 11 I/O error writing\n"
"the output (also: the reader of standard output went away), 12 protocol\n"
"error (also: a message failed authentication, or only one side has\n"
"--encrypt), 16 RDMA unavailable, 30 I/O timeout.\n";

struct args {
	struct tp_opts o;
	const char *addr, *file;
	uint16_t port;
	int accept_ms;          /* --contimeout; -1: forever */
	int help;
};

/* 0 (a->help: --help was printed), or the exit code for a bad command line
 * (said why). */
static int parse(int argc, char **argv, struct args *a)
{
	enum { O_CONTIMEOUT = TP_OPT_NEXT, O_LISTEN, O_ALLOW, O_VERSION };
	static const struct option lo[] = {
		{ "verbose", no_argument, NULL, 'v' },
		{ "listen", required_argument, NULL, O_LISTEN },
		{ "allow", required_argument, NULL, O_ALLOW },
		TP_CLI_OPTIONS,
		{ "contimeout", required_argument, NULL, O_CONTIMEOUT },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, O_VERSION },
		{ 0 },
	};
	const char *key_file = NULL;
	int c, rc = 0;
	a->accept_ms = -1;
	while (rc == 0 && (c = getopt_long(argc, argv, "+vh", lo, NULL)) != -1) {
		if ((rc = tp_cli_opt(c, optarg, &a->o, &key_file)) != 0) {
			rc = rc < 0 ? rc : 0;
			continue;
		}
		switch (c) {
		case 'v': a->o.verbose = 1; break;
		case O_LISTEN: a->addr = optarg; break;
		case O_ALLOW: a->o.peer_addr = optarg; break;
		case O_CONTIMEOUT:   /* 0: the default, forever */
			rc = tp_opt_seconds("--contimeout", optarg, &a->accept_ms);
			if (a->accept_ms == 0)
				a->accept_ms = -1;
			break;
		case 'h': fputs(usage, stdout); a->help = 1; return 0;
		case O_VERSION: puts("rdrecv " RDCP_VERSION); a->help = 1; return 0;
		default: fputs("Try 'rdrecv --help'.\n", stderr); return RD_EXIT_USAGE;
		}
	}
	if (rc == 0 && tp_opts_check(&a->o) < 0)
		rc = -EINVAL;
	if (rc < 0)
		return RD_EXIT_USAGE;
	if (argc - optind < 2 || argc - optind > 3) {
		if (argc - optind < 2)
			log_err("%s missing (KEY: the secret the sender will give, or '-' to take "
			        "it from $RDCP_KEY or --key-file)",
			        argc == optind ? "PORT and KEY are" : "KEY is");
		else
			log_err("too many operands: PORT KEY [FILE]");
		fputs("Usage: rdrecv [OPTIONS] PORT KEY [FILE]; try 'rdrecv --help'.\n", stderr);
		return RD_EXIT_USAGE;
	}
	if (tp_opt_port(argv[optind], 0, &a->port) < 0 ||
	    tp_opt_key(argv[optind + 1], key_file, a->o.key) < 0)
		return RD_EXIT_USAGE;
	a->file = argc - optind == 3 ? argv[optind + 2] : NULL;
	return 0;
}

/* Before listening, without touching FILE: can it be written at all? (A
 * directory that is not there is better said now than after a sender came.) */
static int check_output(const char *file)
{
	char dir[PATH_MAX];
	struct stat st;
	snprintf(dir, sizeof dir, "%s", file);
	if (stat(file, &st) == 0 && S_ISDIR(st.st_mode)) {
		log_err("%s: %s", file, strerror(EISDIR));
		return -EISDIR;
	}
	int e = stat(dirname(dir), &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
	if (e)
		log_err("%s: %s", file, strerror(e));
	return -e;
}

/* FILE, created or truncated now that a sender has authenticated; if it
 * cannot be, the sender is told why. */
static int open_output(const char *file, struct tp_session *s)
{
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		int e = errno;
		log_err("%s: %s", file, strerror(e));
		tp_verdict(s, e);
		return -e;
	}
	return fd;
}

int main(int argc, char **argv)
{
	struct args a = { 0 };
	log_prog = "rdrecv";
	int rc = parse(argc, argv, &a);
	if (rc || a.help)
		return rc;
	if (a.file && check_output(a.file) < 0)
		return RD_EXIT_SELECT;
	/* a reader of stdout that goes away is reported, not a silent death */
	signal(SIGPIPE, SIG_IGN);
	struct tp_listener *l;
	if ((rc = tp_listen(a.addr, a.port, &a.o, &l)) < 0)
		return rc == -ENODEV ? RD_EXIT_NORDMA : rc == -EINVAL ? RD_EXIT_USAGE : RD_EXIT_CONN;
	if (a.port == 0)   /* for the one who starts rdsend (or a script) */
		fprintf(stderr, "%s: listening on port %u\n", log_prog, tp_listener_port(l));
	struct tp_session *s;
	rc = tp_accept(l, a.accept_ms, &s);
	tp_listener_free(l);
	if (rc < 0) {
		if (rc == -ETIMEDOUT)
			log_err("no sender came within %d s (--contimeout)", a.accept_ms / 1000);
		return rd_exit_code(rc);
	}
	int fd = a.file ? open_output(a.file, s) : STDOUT_FILENO;
	if (fd < 0) {
		tp_close(s);
		return RD_EXIT_SELECT;
	}
	const char *name = a.file ? a.file : "standard output";
	struct pump_stats st = { 0 };
	rc = pump_recv(s, fd, name, &st);
	char b[16];
	if (rc == -EPIPE && st.local)
		log_err("the reader of %s went away after %s", name, log_bytes(b, st.bytes));
	else if (rc < 0)
		pump_report_error(rc, &st, s, 0);
	else if (a.o.verbose)
		tp_report_bw("rdrecv", st.bytes, st.seconds, s);
	tp_close(s);
	if (rc == 0 && a.file && close(fd) < 0) {
		log_err("%s: %s", a.file, strerror(errno));
		return RD_EXIT_FILEIO;
	}
	return pump_exit_code(rc, &st);
}
