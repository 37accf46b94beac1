/* rdsend: send stdin (or FILE) to an rdrecv, over RDMA or TCP. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "pipe/pipe.h"

static const char usage[] =
"Usage: rdsend [OPTIONS] HOST PORT KEY [FILE]\n"
"\n"
"Send standard input (or FILE) to the rdrecv listening on HOST:PORT.\n"
"Retries the connection for 10 seconds (--contimeout) if rdrecv is not up yet.\n"
"Exits 0 only when the receiver confirms it has written everything.\n"
"\n"
"  KEY                the shared secret; '-' takes it from --key-file or\n"
"                     from $RDCP_KEY (else asks on the terminal), so it\n"
"                     does not show up in ps\n"
"  FILE               read this file with parallel positioned reads\n"
"                     (faster than a shell redirection on fast disks)\n"
"  -v, --verbose      print the bandwidth at the end\n"
"  -P, --streams N    parallel streams (connections / queue pairs), 1..16;\n"
"                     default 1\n"
"  --transport T      rdma, tcp or auto (default: auto: RDMA when the route\n"
"                     to HOST has an RDMA device, else TCP)\n"
"  --key-file F       read the key from the first line of F (with KEY '-')\n"
"  --encrypt          encrypt and authenticate every message (TCP only; the\n"
"                     other side must say --encrypt too)\n"
"  --pool SIZE        buffer memory, registered once (default 32M)\n"
"  --msg-size SIZE    bytes per message (default 1M)\n"
"  --timeout SEC      I/O timeout: fail if nothing moves for SEC seconds\n"
"                     (a stopped or stuck receiver); 0: none (default)\n"
"  --contimeout SEC   how long to retry connecting (default, or 0: 10)\n"
"  -h, --help         this text;  --version  the version\n"
"\n"
"Exit status: 0 ok, 1 usage, 3 FILE unreadable, 10 connection failed or\n"
"lost, 11 I/O error (ours or the receiver's, e.g. its disk is full or the\n"
"reader of its output went away), 12 protocol error (also: a message\n"
"failed authentication, or only one side has --encrypt), 15 authentication\n"
"failed, 16 RDMA unavailable (--transport rdma), 30 I/O timeout.\n"
"\n"
"Example:\n"
"  [hostB]$ RDCP_KEY=s3cret rdrecv 12345 - > copy\n"
"  [hostA]$ RDCP_KEY=s3cret rdsend -v hostB 12345 - < myfile\n";

enum { O_CONTIMEOUT = TP_OPT_NEXT, O_VERSION };
static const struct option lo[] = {
	{ "verbose", no_argument, NULL, 'v' },
	{ "streams", required_argument, NULL, 'P' },
	TP_CLI_OPTIONS,
	{ "contimeout", required_argument, NULL, O_CONTIMEOUT },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, O_VERSION },
	{ 0 },
};

/* One option into o / *key_file: -1 to go on, else the exit code now. */
static int take_opt(int c, struct tp_opts *o, const char **key_file)
{
	int rc = tp_cli_opt(c, optarg, o, key_file);
	if (rc)
		return rc < 0 ? RD_EXIT_USAGE : -1;
	switch (c) {
	case 'v': o->verbose = 1; return -1;
	case 'P': return tp_opt_streams(optarg, &o->streams) < 0 ? RD_EXIT_USAGE : -1;
	case O_CONTIMEOUT:
		return tp_opt_seconds("--contimeout", optarg, &o->connect_timeout_ms) < 0
		       ? RD_EXIT_USAGE : -1;
	case 'h': fputs(usage, stdout); return RD_EXIT_OK;
	case O_VERSION: puts("rdsend " RDCP_VERSION); return RD_EXIT_OK;
	default: fputs("Try 'rdsend --help'.\n", stderr); return RD_EXIT_USAGE;
	}
}

int main(int argc, char **argv)
{
	struct tp_opts o = { .streams = 1 };
	const char *key_file = NULL;
	int c;
	log_prog = "rdsend";
	while ((c = getopt_long(argc, argv, "+vP:h", lo, NULL)) != -1) {
		int code = take_opt(c, &o, &key_file);
		if (code >= 0)
			return code;
	}
	if (tp_opts_check(&o) < 0)
		return RD_EXIT_USAGE;
	if (argc - optind < 3 || argc - optind > 4) {
		static const char *const missing[] = { "HOST, PORT and KEY are", "PORT and KEY are",
		                                       "KEY is" };
		if (argc - optind < 3)
			log_err("%s missing (KEY: the secret rdrecv was given, or '-' to take it "
			        "from $RDCP_KEY or --key-file)", missing[argc - optind]);
		else
			log_err("too many operands: HOST PORT KEY [FILE]");
		fputs("Usage: rdsend [OPTIONS] HOST PORT KEY [FILE]; try 'rdsend --help'.\n",
		      stderr);
		return RD_EXIT_USAGE;
	}
	const char *host = argv[optind], *file = argc - optind == 4 ? argv[optind + 3] : NULL;
	uint16_t port;
	if (tp_opt_port(argv[optind + 1], 1, &port) < 0 ||
	    tp_opt_key(argv[optind + 2], key_file, o.key) < 0)
		return RD_EXIT_USAGE;
	int fd = STDIN_FILENO;
	if (file && (fd = open(file, O_RDONLY | O_CLOEXEC)) < 0) {
		log_err("%s: %s", file, strerror(errno));
		return RD_EXIT_SELECT;
	}
	struct tp_session *s;
	struct pump_stats st = { 0 };
	int rc = tp_connect(host, port, &o, &s);
	if (rc < 0)
		return rd_exit_code(rc);
	rc = pump_send(s, fd, file ? file : "standard input", &st);
	if (rc < 0)
		pump_report_error(rc, &st, s, 1);
	else if (o.verbose)
		tp_report_bw("rdsend", st.bytes, st.seconds, s);
	/* the receiver said why it stopped: its I/O error (even a reader of its
	 * output that went away, EPIPE), not a lost connection */
	int code = rc < 0 && tp_peer_status(s) ? RD_EXIT_FILEIO : pump_exit_code(rc, &st);
	tp_close(s);
	return code;
}
