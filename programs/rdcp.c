/* rdcp: command line front end. Parses options, calls the library, maps the
 * result to an exit code. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "index/index.h"
#include "sync/sync.h"

static const char usage[] =
"Usage: rdcp [OPTIONS] SRC DST\n"
"       rdcp --scan [-v] [--index PATH | --no-index] DIR\n"
"\n"
"Copy or mirror files and directory trees between machines, over RDMA\n"
"(InfiniBand, RoCE) where the network has it, else TCP. SRC and DST are\n"
"local paths or [user@]host:path (one side local). The far side is started\n"
"with ssh (rdcp --server), as rsync does; data connections are\n"
"authenticated with a fresh secret exchanged over ssh.\n"
"\n"
"  -r, --recursive   copy directories (cp -r: 'rdcp -r A B' makes B/A when B\n"
"                    is a directory, else B; 'A/' copies the contents of A)\n"
"      --sync        make DST a mirror of SRC's contents (implies -r -a);\n"
"                    idempotent: a second run transfers nothing\n"
"  -a, --archive     keep permissions, mtimes (ns), symlinks; owner/group as root\n"
"  -H, --hard-links  keep hard links\n"
"      --delete      delete what SRC no longer has (refused if SRC had read errors)\n"
"  -n, --dry-run     print what would change, change nothing\n"
"  -c, --checksum    compare content hashes instead of size and mtime\n"
"      --exclude PAT leave out what matches PAT (rsync rules: 'x' any level,\n"
"                    '/x' at the top, 'd/' directories, '**' across '/');\n"
"      --include PAT the first matching --include/--exclude decides; excluded\n"
"                    files in DST are neither compared nor deleted\n"
"  -v, --verbose     print each change and a summary with the bandwidth\n"
"      --progress    one live line on a terminal: bytes, rate, files, ETA\n"
"  -e, --rsh CMD     remote shell (default: ssh)\n"
"      --rdcp-path P rdcp on the remote side (default: rdcp)\n"
"  -P, --streams N   parallel data streams, 1..16 (default 1)\n"
"      --transport T rdma, tcp or auto (default auto)\n"
"      --encrypt     seal the data connection (TCP: AES-256-GCM or ChaCha20-\n"
"                    Poly1305, keys made per run); without it, file data\n"
"                    crosses TCP in clear (only the control channel is ssh)\n"
"      --timeout S   give up (exit 30) when nothing moves for S seconds, as\n"
"                    rsync's --timeout (default 0: wait forever)\n"
"      --data-addr A address for data connections when it differs from the ssh\n"
"                    host (e.g. the IPoIB or RoCE address): the remote's when it\n"
"                    receives, ours when we receive from it\n"
"\n"
"  --scan DIR        walk DIR, hash what changed since the last scan, update\n"
"                    its index and print counts, bytes, hashed vs reused, time\n"
"  --index PATH      keep the index in PATH (default: one file per tree in\n"
"                    $XDG_CACHE_HOME/rdcp, else ~/.cache/rdcp)\n"
"  --no-index        neither read nor write an index: hash every file\n"
"  --index-list      list the index files: last used, tree there or gone, size\n"
"  --index-prune[=DAYS]  remove the index files whose tree is gone or that\n"
"                    were unused for DAYS days (default 90; runs do it daily)\n"
"  --threads N       worker threads for walking and hashing (default: CPUs)\n"
"  -h, --help        this text;  --version  the version\n"
"\n"
"Exit status: 0 success, 1 usage, 3 SRC or DST unusable, 5 could not start\n"
"the remote side, 7 another rdcp is writing DST (or SRC) now, 10 connection\n"
"failed or lost, 11 file I/O error, 12 protocol error, 15 authentication\n"
"failed, 16 RDMA unavailable, 23 partial transfer (some entries failed),\n"
"24 source files vanished, 30 timeout (--timeout).\n"
"\n"
"Examples:\n"
"  rdcp -r project host:backup/       # host:backup/project\n"
"  rdcp --sync -r models host:models  # host:models mirrors models; re-run: no-op\n"
"  rdcp --sync --delete -v host:/data /mirror/data\n";

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

enum { OPT_SCAN = 256, OPT_INDEX, OPT_NOINDEX, OPT_THREADS, OPT_VERSION, OPT_SYNC,
       OPT_DELETE, OPT_TRANSPORT, OPT_DATA_ADDR, OPT_RDCP_PATH, OPT_SERVER,
       OPT_EXCLUDE, OPT_INCLUDE, OPT_PROGRESS, OPT_TIMEOUT, OPT_ENCRYPT,
       OPT_INDEX_LIST, OPT_INDEX_PRUNE };
static const struct option lo[] = {
	{ "scan", no_argument, NULL, OPT_SCAN },
	{ "index", required_argument, NULL, OPT_INDEX },
	{ "no-index", no_argument, NULL, OPT_NOINDEX },
	{ "index-list", no_argument, NULL, OPT_INDEX_LIST },
	{ "index-prune", optional_argument, NULL, OPT_INDEX_PRUNE },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "recursive", no_argument, NULL, 'r' },
	{ "sync", no_argument, NULL, OPT_SYNC },
	{ "archive", no_argument, NULL, 'a' },
	{ "hard-links", no_argument, NULL, 'H' },
	{ "delete", no_argument, NULL, OPT_DELETE },
	{ "dry-run", no_argument, NULL, 'n' },
	{ "checksum", no_argument, NULL, 'c' },
	{ "rsh", required_argument, NULL, 'e' },
	{ "rdcp-path", required_argument, NULL, OPT_RDCP_PATH },
	{ "streams", required_argument, NULL, 'P' },
	{ "transport", required_argument, NULL, OPT_TRANSPORT },
	{ "data-addr", required_argument, NULL, OPT_DATA_ADDR },
	{ "server", no_argument, NULL, OPT_SERVER },
	{ "exclude", required_argument, NULL, OPT_EXCLUDE },
	{ "include", required_argument, NULL, OPT_INCLUDE },
	{ "progress", no_argument, NULL, OPT_PROGRESS },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "encrypt", no_argument, NULL, OPT_ENCRYPT },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ 0 },
};

/* What the command line says. */
struct cmdline {
	struct idx_scan_opts so;
	struct sync_opts o;
	int scan;                   /* --scan DIR: DIR is the operand */
	int cache_cmd;              /* OPT_INDEX_LIST or OPT_INDEX_PRUNE */
	long prune_days;
	struct sync_rule rules[256];
};

/* One option into cl: -1 to go on, else the exit code to leave with now. */
static int take_opt(int c, struct cmdline *cl)
{
	struct sync_opts *o = &cl->o;
	struct idx_scan_opts *so = &cl->so;
	switch (c) {
	case OPT_SCAN: cl->scan = 1; break;
	case OPT_INDEX: so->index_path = optarg; break;
	case OPT_NOINDEX: so->no_index = 1; o->flags |= SYNC_F_NO_INDEX; break;
	case OPT_INDEX_LIST: cl->cache_cmd = c; break;
	case OPT_INDEX_PRUNE: {
		char *end = NULL;
		cl->cache_cmd = c;
		cl->prune_days = optarg ? strtol(optarg, &end, 10) : IDX_PRUNE_DAYS;
		if (optarg && (*end || end == optarg || cl->prune_days < 0 ||
		               cl->prune_days > 100000)) {
			log_err("--index-prune: expected days, 0..100000, got '%s'", optarg);
			return RD_EXIT_USAGE;
		}
		break;
	}
	case OPT_THREADS: {
		char *end;
		long n = strtol(optarg, &end, 10);
		if (*end || n < 1 || n > 64) {
			log_err("--threads: expected 1..64, got '%s'", optarg);
			return RD_EXIT_USAGE;
		}
		so->threads = (int)n;
		break;
	}
	case 'r': o->flags |= SYNC_F_RECURSIVE; break;
	case OPT_SYNC:
		o->flags |= SYNC_F_MIRROR | SYNC_F_RECURSIVE | SYNC_F_PERMS | SYNC_F_TIMES |
		            SYNC_F_OWNER;
		break;
	case 'a': o->flags |= SYNC_F_RECURSIVE | SYNC_F_PERMS | SYNC_F_TIMES | SYNC_F_OWNER; break;
	case 'H': o->flags |= SYNC_F_HARDLINKS; break;
	case OPT_DELETE: o->flags |= SYNC_F_DELETE; break;
	case 'n': o->flags |= SYNC_F_DRYRUN | SYNC_F_ITEMIZE; break;
	case 'c': o->flags |= SYNC_F_CHECKSUM; break;
	case 'e': o->rsh = optarg; break;
	case OPT_RDCP_PATH: o->rdcp_path = optarg; break;
	case OPT_DATA_ADDR: o->data_addr = optarg; break;
	case 'P':
		return tp_opt_streams(optarg, &o->tp.streams) < 0 ? RD_EXIT_USAGE : -1;
	case OPT_TRANSPORT:
		return tp_opt_transport(optarg, &o->tp.kind) < 0 ? RD_EXIT_USAGE : -1;
	case OPT_EXCLUDE:
	case OPT_INCLUDE:
		if (o->nrules == 256 || !*optarg || strlen(optarg) > 4000) {
			log_err("--%s: at most 256 rules of 1..4000 bytes",
			        c == OPT_EXCLUDE ? "exclude" : "include");
			return RD_EXIT_USAGE;
		}
		cl->rules[o->nrules++] = (struct sync_rule){ c == OPT_INCLUDE, optarg };
		o->rules = cl->rules;
		break;
	case OPT_PROGRESS: o->progress = 1; break;
	case OPT_ENCRYPT:
		o->flags |= SYNC_F_ENCRYPT;
		o->tp.encrypt = 1;
		break;
	case OPT_TIMEOUT: {
		char *end;
		long n = strtol(optarg, &end, 10);
		if (*end || end == optarg || n < 0 || n > SYNC_TIMEOUT_MAX) {
			log_err("--timeout: expected seconds, 0..%d, got '%s'", SYNC_TIMEOUT_MAX, optarg);
			return RD_EXIT_USAGE;
		}
		o->timeout = (int)n;
		break;
	}
	case OPT_SERVER:
		log_prog = "rdcp (remote)";
		return sync_server();
	case 'v': so->verbose++; o->verbose++; o->flags |= SYNC_F_ITEMIZE; break;
	case 'h': fputs(usage, stdout); return RD_EXIT_OK;
	case OPT_VERSION: puts("rdcp " RDCP_VERSION); return RD_EXIT_OK;
	default:
		fputs("Try 'rdcp --help'.\n", stderr);
		return RD_EXIT_USAGE;
	}
	return -1;
}

int main(int argc, char **argv)
{
	static struct cmdline cl = { .o = { .tp = { .streams = 1 } } };
	int c;
	log_prog = "rdcp";
	while ((c = getopt_long(argc, argv, "raHncve:P:h", lo, NULL)) != -1) {
		int code = take_opt(c, &cl);
		if (code >= 0)
			return code;
	}
	if (cl.cache_cmd) {
		struct idx_prune_result pr = { 0 };
		if (argc != optind) {
			log_err("--index-list and --index-prune take no SRC, DST or DIR");
			return RD_EXIT_USAGE;
		}
		int rc = cl.cache_cmd == OPT_INDEX_LIST ? idx_cache_list(stdout)
		         : idx_cache_prune((int)cl.prune_days, stdout, &pr);
		return rc < 0 ? RD_EXIT_SELECT : pr.errors ? RD_EXIT_FILEIO : RD_EXIT_OK;
	}
	if (cl.scan) {
		if (argc - optind != 1) {
			log_err("--scan takes one directory (and no SRC DST)");
			return RD_EXIT_USAGE;
		}
		return do_scan(argv[optind], &cl.so);
	}
	if (argc - optind != 2) {
		log_err(argc == optind ? "SRC and DST are missing" : "expected exactly SRC and DST");
		fputs("Try 'rdcp --help'.\n", stderr);
		return RD_EXIT_USAGE;
	}
	if (tp_opts_check(&cl.o.tp) < 0)
		return RD_EXIT_USAGE;
	cl.o.src = argv[optind];
	cl.o.dst = argv[optind + 1];
	return sync_client(&cl.o);
}
