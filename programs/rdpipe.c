/* rdpipe: a UNIX pipeline whose segments run on other hosts. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "pipe/pipe.h"

static const char usage[] =
"Usage: rdpipe [OPTIONS] HOST:COMMAND [HOST:COMMAND...]\n"
"\n"
"Run a pipeline whose segments run on hosts: standard input feeds the first\n"
"COMMAND, each COMMAND's output feeds the next, and the last one's output\n"
"comes back to standard output. Data goes from host to host directly, over\n"
"RDMA where the hosts have it, else TCP; each hop has its own port and one\n"
"random key per run authenticates every hop. Segments are started with the\n"
"remote shell (ssh), which also carries their exit status; HOST may be\n"
"user@host, [v6addr], and may appear any number of times. COMMAND runs in\n"
"the login shell on HOST, as with ssh.\n"
"\n"
"A COMMAND may start with an operator instead:\n"
"  '< FILE'    wait for the input to end (it is thrown away), then send FILE\n"
"              on: starts a new pipeline in the middle of one\n"
"  '> FILE'    write the input to FILE (made empty first, created if need\n"
"              be), then send an empty stream on\n"
"  '>> FILE'   the same, appending to FILE\n"
"\n"
"Options:\n"
"  -v, --verbose        at the end, print each hop's bytes and bandwidth\n"
"  -n, --dry-run        print what would run on which host; run nothing\n"
"  -e, --rsh CMD        the remote shell (default: ssh); split on blanks\n"
"  --rdpipe-path PATH   rdpipe on the hosts (default: rdpipe on their PATH)\n"
"  --transport T        rdma, tcp or auto (default: auto)\n"
"  -P, --streams N      parallel streams per hop, 1..16 (default 1)\n"
"  -h, --help           this text;  --version  the version\n"
"\n"
"Exit status: 0 when every command exited 0 and every hop delivered all of\n"
"its bytes. Else, as with `set -o pipefail`, the status of the rightmost\n"
"command that failed (128+N for signal N), or: 1 usage, 5 a segment could\n"
"not be started, 10 a hop failed or a segment was lost, 12 protocol error,\n"
"15 authentication failed, 16 RDMA asked for but unavailable, 20 interrupted.\n"
"The first failure anywhere stops the whole pipeline on every host, and the\n"
"error names the segment, its host and its command.\n"
"\n"
"Examples:\n"
"  echo hello | rdpipe host1:'tr [:lower:] [:upper:]' host2:'rev'    # OLLEH\n"
"  rdpipe other_host:'sha1sum' < myfile\n"
"  rdpipe fs1:'< textfile' CAPS:'tr [:lower:] [:upper:]' fs2:'> TEXTFILE'\n"
"  rdpipe backup@fileserver:'zfs send -I a@x a@y' | pv | zfs recv b\n";

int main(int argc, char **argv)
{
	enum { O_TRANSPORT = 256, O_PATH, O_SEGMENT, O_VERSION };
	static const struct option lo[] = {
		{ "verbose", no_argument, NULL, 'v' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "rsh", required_argument, NULL, 'e' },
		{ "rdpipe-path", required_argument, NULL, O_PATH },
		{ "transport", required_argument, NULL, O_TRANSPORT },
		{ "streams", required_argument, NULL, 'P' },
		{ "segment", no_argument, NULL, O_SEGMENT },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, O_VERSION },
		{ 0 },
	};
	struct pipe_opts o = { .tp = { .streams = 1 } };
	int c;
	log_prog = "rdpipe";
	/* '+': options stop at the first segment, so a COMMAND's own -x stays */
	while ((c = getopt_long(argc, argv, "+vne:P:h", lo, NULL)) != -1) {
		switch (c) {
		case 'v': o.verbose = 1; break;
		case 'n': o.dry_run = 1; break;
		case 'e': o.rsh = optarg; break;
		case O_PATH: o.rdpipe_path = optarg; break;
		case O_TRANSPORT:
			if (tp_opt_transport(optarg, &o.tp.kind) < 0)
				return RD_EXIT_USAGE;
			break;
		case 'P':
			if (tp_opt_streams(optarg, &o.tp.streams) < 0)
				return RD_EXIT_USAGE;
			break;
		case O_SEGMENT: return pipe_segment();
		case 'h': fputs(usage, stdout); return RD_EXIT_OK;
		case O_VERSION: puts("rdpipe " RDCP_VERSION); return RD_EXIT_OK;
		default: fputs("Try 'rdpipe --help'.\n", stderr); return RD_EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fputs(usage, stderr);
		return RD_EXIT_USAGE;
	}
	o.segs = (const char *const *)argv + optind;
	o.nsegs = argc - optind;
	return pipe_run(&o);
}
