/* rdcp: command line front end. Parses options, calls the library, maps the
 * result to an exit code. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "index/index.h"

static const char usage[] =
"Usage: rdcp --scan [-v] [--index PATH | --no-index] DIR\n"
"\n"
"rdcp copies and mirrors directory trees between machines over RDMA\n"
"(InfiniBand, RoCE) or TCP. This build provides the tree index; copying\n"
"and --sync arrive with the transport and sync modules.\n"
"\n"
"  --scan DIR       walk DIR, hash what changed since the last scan, update\n"
"                   its index and print counts, bytes, files hashed vs reused\n"
"                   and the elapsed time\n"
"  --index PATH     keep the index in PATH (default: one file per tree in\n"
"                   $XDG_CACHE_HOME/rdcp, else ~/.cache/rdcp)\n"
"  --no-index       neither read nor write an index: hash every file\n"
"  --threads N      worker threads for walking and hashing (default: CPUs)\n"
"  -v, --verbose    also list every entry: type, mode, size, mtime, hash, path\n"
"  -h, --help       this text\n"
"  --version        print the version\n"
"\n"
"Exit status: 0 success, 1 usage error, 3 DIR unusable,\n"
"23 some entries could not be read (listed on stderr).\n"
"\n"
"Example:\n"
"  rdcp --scan ~/models        # first scan hashes every file\n"
"  rdcp --scan ~/models        # second scan hashes only what changed\n";

static void print_entry(const struct idx_entry *e)
{
	char when[32], hash[2 * IDX_HASH_LEN + 1] = "-", shown[IDX_PATH_MAX * 4 + 8];
	time_t t = (time_t)(e->mtime_ns / 1000000000);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
	if (e->type == IDX_REG)
		for (int i = 0; i < IDX_HASH_LEN; i++)
			sprintf(hash + 2 * i, "%02x", e->hash[i]);
	printf("%-7s %04o %12" PRIu64 " %s.%09dZ %s %s", idx_type_name(e->type),
	       (unsigned)e->mode, e->size, when, (int)(e->mtime_ns % 1000000000), hash,
	       *e->path ? log_path(shown, sizeof shown, e->path) : ".");
	if (e->link)
		printf(" -> %s", log_path(shown, sizeof shown, e->link));
	if (e->hlink)
		printf(" [hardlink group %u]", e->hlink);
	putchar('\n');
}

static int do_scan(const char *dir, const struct idx_scan_opts *o)
{
	struct idx_manifest m = { 0 };
	struct idx_stats st;
	char b1[16], b2[16];
	if (idx_scan(dir, o, &m, &st) < 0)
		return RD_EXIT_SELECT;
	if (o->verbose)
		for (size_t i = 0; i < m.n; i++)
			print_entry(&m.e[i]);
	printf("%s: %" PRIu64 " entries: %" PRIu64 " files (%s), %" PRIu64 " dirs, %" PRIu64
	       " symlinks, %" PRIu64 " other\n", dir, st.entries, st.files,
	       log_bytes(b1, st.bytes), st.dirs, st.symlinks, st.other);
	printf("hashed %" PRIu64 " files (%s), reused %" PRIu64 " from the index; "
	       "%.3f s, %.0f files/s\n", st.hashed, log_bytes(b2, st.hashed_bytes),
	       st.reused, st.seconds, st.seconds > 0 ? (double)st.entries / st.seconds : 0.0);
	if (st.errors)
		printf("%" PRIu64 " entries could not be read (see above)\n", st.errors);
	idx_manifest_free(&m);
	return st.errors ? RD_EXIT_PARTIAL : RD_EXIT_OK;
}

int main(int argc, char **argv)
{
	enum { OPT_SCAN = 256, OPT_INDEX, OPT_NOINDEX, OPT_THREADS, OPT_VERSION };
	static const struct option lo[] = {
		{ "scan", required_argument, NULL, OPT_SCAN },
		{ "index", required_argument, NULL, OPT_INDEX },
		{ "no-index", no_argument, NULL, OPT_NOINDEX },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ 0 },
	};
	struct idx_scan_opts o = { 0 };
	const char *scan = NULL;
	int c;
	log_prog = "rdcp";
	while ((c = getopt_long(argc, argv, "vh", lo, NULL)) != -1) {
		switch (c) {
		case OPT_SCAN: scan = optarg; break;
		case OPT_INDEX: o.index_path = optarg; break;
		case OPT_NOINDEX: o.no_index = 1; break;
		case OPT_THREADS: {
			char *end;
			long n = strtol(optarg, &end, 10);
			if (*end || n < 1 || n > 64) {
				log_err("--threads: expected 1..64, got '%s'", optarg);
				return RD_EXIT_USAGE;
			}
			o.threads = (int)n;
			break;
		}
		case 'v': o.verbose++; break;
		case 'h': fputs(usage, stdout); return RD_EXIT_OK;
		case OPT_VERSION: puts("rdcp " RDCP_VERSION); return RD_EXIT_OK;
		default:
			fputs("Try 'rdcp --help'.\n", stderr);
			return RD_EXIT_USAGE;
		}
	}
	if (scan && optind == argc)
		return do_scan(scan, &o);
	if (!scan && optind < argc)
		log_err("copying is not in this build yet: only --scan is available");
	else
		log_err("nothing to do");
	fputs("Try 'rdcp --help'.\n", stderr);
	return RD_EXIT_USAGE;
}
