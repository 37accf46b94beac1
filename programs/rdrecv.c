/* rdrecv: receive one rdsend's stream to stdout (or FILE). */
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
"Usage: rdrecv [OPTIONS] PORT KEY [FILE]\n"
"\n"
"Wait on PORT for one rdsend that knows KEY, and write what it sends to\n"
"standard output (or FILE). Senders with a wrong key are refused.\n"
"Exits 0 only when everything was received and written.\n"
"\n"
"  KEY                the shared secret; '-' takes it from --key-file or\n"
"                     from $RDCP_KEY, so it does not show up in ps\n"
"  FILE               write this file (created or truncated) with parallel\n"
"                     positioned writes\n"
"  -v, --verbose      print the bandwidth at the end\n"
"  --transport T      rdma, tcp or auto (default: auto: listen on RDMA when\n"
"                     there is an RDMA device, and on TCP)\n"
"  --listen ADDR      listen on this address only (default: all)\n"
"  --key-file F       read the key from the first line of F (with KEY '-')\n"
"  --encrypt          encrypt and authenticate every message (TCP only; the\n"
"                     other side must say --encrypt too)\n"
"  --pool SIZE        buffer memory, registered once (default 32M)\n"
"  --msg-size SIZE    largest message accepted (default 1M)\n"
"  --timeout SEC      give up if no sender comes (default: wait forever)\n"
"\n"
"Exit status: 0 ok, 1 usage, 3 FILE cannot be created, 10 connection\n"
"failed or lost (or timed out), 11 I/O error writing the output,\n"
"12 protocol error (also: a message failed authentication, or only one\n"
"side has --encrypt), 15 a sender with a wrong key, 16 RDMA unavailable.\n";

int main(int argc, char **argv)
{
	enum { O_TRANSPORT = 256, O_KEYFILE, O_POOL, O_MSG, O_TIMEOUT, O_LISTEN, O_ENCRYPT };
	static const struct option lo[] = {
		{ "verbose", no_argument, NULL, 'v' },
		{ "transport", required_argument, NULL, O_TRANSPORT },
		{ "listen", required_argument, NULL, O_LISTEN },
		{ "key-file", required_argument, NULL, O_KEYFILE },
		{ "encrypt", no_argument, NULL, O_ENCRYPT },
		{ "pool", required_argument, NULL, O_POOL },
		{ "msg-size", required_argument, NULL, O_MSG },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct tp_opts o = { 0 };
	const char *key_file = NULL, *addr = NULL;
	int timeout_ms = -1, c;
	log_prog = "rdrecv";
	while ((c = getopt_long(argc, argv, "+vh", lo, NULL)) != -1) {
		switch (c) {
		case 'v': o.verbose = 1; break;
		case O_TRANSPORT:
			if (tp_opt_transport(optarg, &o.kind) < 0)
				return RD_EXIT_USAGE;
			break;
		case O_LISTEN: addr = optarg; break;
		case O_KEYFILE: key_file = optarg; break;
		case O_ENCRYPT: o.encrypt = 1; break;
		case O_POOL:
		case O_MSG:
			if (tp_opt_size(optarg, c == O_POOL, &o) < 0)
				return RD_EXIT_USAGE;
			break;
		case O_TIMEOUT: timeout_ms = atoi(optarg) * 1000; break;
		case 'h': fputs(usage, stdout); return RD_EXIT_OK;
		default: fputs("Try 'rdrecv --help'.\n", stderr); return RD_EXIT_USAGE;
		}
	}
	if (tp_opts_check(&o) < 0)
		return RD_EXIT_USAGE;
	if (argc - optind < 2 || argc - optind > 3) {
		fputs(usage, stderr);
		return RD_EXIT_USAGE;
	}
	char *end;
	long port = strtol(argv[optind], &end, 10);
	if (*end || port < 1 || port > 65535) {
		log_err("PORT: expected 1..65535, got '%s'", argv[optind]);
		return RD_EXIT_USAGE;
	}
	if (tp_opt_key(argv[optind + 1], key_file, o.key) < 0)
		return RD_EXIT_USAGE;
	const char *file = argc - optind == 3 ? argv[optind + 2] : NULL;
	int fd = STDOUT_FILENO;
	if (file && (fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)) < 0) {
		log_err("%s: %s", file, strerror(errno));
		return RD_EXIT_SELECT;
	}
	struct tp_listener *l;
	int rc = tp_listen(addr, (uint16_t)port, &o, &l);
	if (rc < 0)
		return rc == -ENODEV ? RD_EXIT_NORDMA : RD_EXIT_CONN;
	struct tp_session *s;
	rc = tp_accept(l, timeout_ms, &s);
	tp_listener_free(l);
	if (rc < 0) {
		if (rc == -ETIMEDOUT)
			log_err("no sender came within the timeout");
		return rd_exit_code(rc);
	}
	struct pump_stats st = { 0 };
	rc = pump_recv(s, fd, file ? file : "standard output", &st);
	if (rc < 0)
		pump_report_error(rc, &st, NULL, 0);
	else if (o.verbose)
		tp_report_bw("rdrecv", st.bytes, st.seconds, s);
	tp_close(s);
	if (rc == 0 && file && close(fd) < 0) {
		log_err("%s: %s", file, strerror(errno));
		return RD_EXIT_FILEIO;
	}
	return pump_exit_code(rc, &st);
}
