/* rdcp: command line front end. Parses options, calls the library, maps the
 * result to an exit code. */
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
"Usage: rdcp [OPTIONS] SRC... DST\n"
"       mpirun -np N rdcp --sync [OPTIONS] SRC/ [host:]DST [host2:DST...]\n"
"       rdcp --scan [-v] [-X] [-A] [--index PATH | --no-index] DIR\n"
"\n"
"Copy or mirror files and directory trees between machines, over RDMA\n"
"(InfiniBand, RoCE) where the network has it, else TCP. SRC and DST are\n"
"local paths or [user@]host:path (one side local; several SRC all on one\n"
"side, into the directory DST). The far side is started\n"
"with ssh (rdcp --server), as rsync does; data connections are\n"
"authenticated with a fresh secret exchanged over ssh.\n"
"\n"
"  -r, --recursive   copy directories (cp -r: 'rdcp -r A B' makes B/A when B\n"
"                    is a directory, else B; 'A/' copies the contents of A)\n"
"      --sync        make DST a mirror of SRC's contents (implies -r -a);\n"
"                    idempotent: a second run transfers nothing\n"
"  -a, --archive     keep permissions, mtimes (ns), symlinks; owner/group as root\n"
"                    (its letters one by one, as rsync: -p --perms, -t --times,\n"
"                    -o --owner, -g --group; -l --links, -D --devices: always)\n"
"  -H, --hard-links  keep hard links\n"
"  -X, --xattrs      keep extended attributes (user.*; as root all but system.*)\n"
"  -A, --acls        keep POSIX ACLs (implies -p)\n"
"      --numeric-ids owners by number (default: by user and group name)\n"
"      --chown U:G   make DST's entries owned by U:G (names or numbers)\n"
"      --chmod CHMOD change DST's modes as rsync: 'D2775,F664', 'g+rX,o-w'\n"
"      --delete      delete what SRC no longer has (not after SRC read errors)\n"
"                    --sync --delete A DST (A without '/'): refused when DST has\n"
"                    entries, is not named A and is not a mirror rdcp made of A;\n"
"                    write A/ to mirror A's contents, or DST/A\n"
"      --max-delete N  at most N deletions, then stop and exit 25, as rsync\n"
"      --force       let a non-empty directory give way to a file (as rsync)\n"
"      --delete-before  delete before the data (room on a full disk);\n"
"      --delete-after, --delete-during  rdcp's --delete (after the data)\n"
"  -b, --backup      keep what is replaced or deleted as NAME~ (--suffix SUF)\n"
"      --backup-dir D  ... as D/PATH instead (relative: to DST)\n"
"      --link-dest D hard-link unchanged files from D (snapshots; up to 20)\n"
"      --remove-source-files  remove from SRC what landed (not directories)\n"
"      --mkpath      create DST's missing parent directories\n"
"      --bwlimit R   at most R KiB/s (suffixes K, M, G; 0: no limit)\n"
"  -n, --dry-run     change nothing (with -i or -v: say what would change)\n"
"  -c, --checksum    compare content hashes instead of size and mtime\n"
"      --exclude PAT leave out what matches PAT (rsync rules: 'x' any level,\n"
"                    '/x' at the top, 'd/' directories, '**' across '/');\n"
"      --include PAT the first matching rule decides; excluded files in DST\n"
"                    are neither compared nor deleted\n"
"  -f, --filter R    an rsync filter rule (- + H S P R ! . merge : dir-merge)\n"
"  -F                --filter='dir-merge /.rsync-filter'; twice: hide them too\n"
"      --exclude-from F, --include-from F  patterns, one a line ('-': stdin)\n"
"      --files-from F  only the paths listed in F (relative to SRC; '-': stdin)\n"
"      --delete-excluded  delete excluded files from DST too\n"
"      --min-size S, --max-size S  skip smaller/larger files (1.5M, 10KB...)\n"
"  -u, --update      skip files newer in DST;  --ignore-existing  skip all\n"
"                    that DST has\n"
"  -x, --one-file-system  do not cross filesystems in SRC (-xx: no mount\n"
"                    points)\n"
"  -v, --verbose     names of what changes, then rsync's summary lines\n"
"  -i, --itemize-changes  each change as rsync: YXcstpoguax name\n"
"  -q, --quiet       nothing but errors\n"
"      --stats       rsync's figures at the end\n"
"      --json        one JSON object at the end (docs/rdcp.1, OUTPUT)\n"
"      --progress    one live line on a terminal: bytes, %, rate, time, files\n"
"  -P                --partial --progress, as rsync\n"
"      --partial     keep a large file cut off mid-way (beside DST's, recorded\n"
"                    in its index): the next --partial run sends only the rest\n"
"      --inplace     write changed files where they are (same inode; no temp\n"
"                    file: a failed run leaves a mix of old and new)\n"
"      --append      send only what lies past the end of DST's shorter files;\n"
"      --append-verify  the same, once their start is checked to match\n"
"  -S, --sparse      keep holes: zero blocks are neither sent nor written\n"
"  -W, --whole-file  send changed files whole (default: only changed 4 MiB\n"
"                    chunks, and 64 KiB blocks inside them)\n"
"  -e, --rsh CMD     remote shell (default: ssh)\n"
"      --rdcp-path P rdcp on the remote side (default: rdcp)\n"
"      --streams N   parallel data streams, 1..16 (default: 2 over TCP, 1 over\n"
"                    RDMA and on every hop of a fan-out)\n"
"      --transport T rdma, tcp or auto (default auto)\n"
"      --encrypt     seal the data connection (TCP: AES-256-GCM or ChaCha20-\n"
"                    Poly1305, keys made per run); without it, file data\n"
"                    crosses TCP in clear (only the control channel is ssh)\n"
"      --timeout S   give up (exit 30) when nothing moves for S seconds, as\n"
"                    rsync's --timeout (default 0: wait forever)\n"
"      --contimeout S  a login must answer, a data connection come up,\n"
"                    within S seconds (ssh -o ConnectTimeout=S too); exit 5\n"
"                    (default: none; a fan-out's hosts 15 s)\n"
"      --data-addr A address for data connections when it differs from the ssh\n"
"                    host (e.g. the IPoIB or RoCE address): the remote's when it\n"
"                    receives, ours when we receive from it\n"
"\n"
"Live mirror, a whole sync then every change as it happens (rdcp(1), WATCH):\n"
"  rdcp --sync -a --append --delete --watch SRC/ [host:]DST\n"
"  rdcp --sync -a --watch SRC/ host1:DST host2:DST ...  (a fan-out: every\n"
"                    host's login kept; one that dies is said once, and\n"
"                    logged in again later to catch up)\n"
"      --watch       follow SRC with inotify (as root past its watch limit:\n"
"                    fanotify), rounds of changes over one login, 20 ms after\n"
"                    a burst (200 ms at most); SIGTERM between rounds: exit 0;\n"
"                    a lost host is reconnected; --json: a line per round;\n"
"                    on a terminal, a status line (rounds, rate, lag, pending)\n"
"      --watch=fanotify  (root) one mark for SRC's filesystem, no limit\n"
"      --watch=poll[:S]  no events (NFS): the whole tree every S s (2)\n"
"                    --append: a growing recording costs its new bytes\n"
"\n"
"Fan-out, one SRC onto many hosts (SRC is read and sent once; the hosts\n"
"forward the data down a chain, each keeping what it lacks):\n"
"  rdcp --sync SRC host1:DST host2:DST ...\n"
"      --hosts=FILE:DST  the hosts listed in FILE, one a line: '[user@]host\n"
"                    [data-address]'; '#' comments. Every host gets its own\n"
"                    plan; the hosts after one that fails are run again; a\n"
"                    line per host with -v (quiet without, as rsync: errors\n"
"                    only), exit code: the first failed host's\n"
"\n"
"Many nodes, one tree shared by N ranks under Open MPI (rdcp(1), MANY NODES):\n"
"  mpirun -np N rdcp --sync SRC/ host1:DST host2:DST ...\n"
"                    SRC on a shared filesystem (checked on every rank);\n"
"                    its directories spread over the ranks; rank k writes\n"
"                    through the (k mod n)th DST, all one tree; --delete\n"
"                    only once every rank succeeded; one summary, --json's\n"
"                    'ranks'. Under mpirun several host:DST are not a fan-out.\n"
"                    Files of 64 MiB and more go by size; one larger than a\n"
"                    rank's share (and 1 GiB+), in chunk ranges, a rank each.\n"
"                    SRC's index is one over the nodes: a directory's rows\n"
"                    come from its home node wherever its window runs\n"
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
"  -h, --human-readable  numbers as 1.23M (-hh: powers of 1024)\n"
"      --help        this text (so does -h alone)\n"
"  -V, --version     the version\n"
"\n"
"Exit status: 0 success, 1 usage, 2 protocol incompatibility (an unclean\n"
"remote shell, another rdcp version), 3 SRC or DST unusable, 5 could not\n"
"start the remote side, 7 another rdcp is writing DST or SRC, a tree above\n"
"one or inside one, or reading a tree that holds DST, now; 10 connection\n"
"failed or lost, 11 file I/O error, 12 protocol error, 15 authentication\n"
"failed, 16 RDMA unavailable, 20 interrupted (SIGINT, SIGTERM, SIGHUP),\n"
"23 partial transfer (some entries failed, a missing SRC), 24 source files\n"
"vanished, 25 --max-delete stopped deletions, 30 timeout (--timeout).\n"
"\n"
"Examples:\n"
"  rdcp -r project host:backup/       # host:backup/project\n"
"  rdcp --sync models host:models     # host:models mirrors models; re-run: no-op\n"
"  rdcp --sync --delete -v host:/data /mirror/data\n"
"  rdcp --sync -a --append --watch /ingest/ host:/mirror/ingest  # live\n";

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
	if (o->meta)
		printf("read the xattrs/ACLs of %" PRIu64 " entries, the others' came from the "
		       "index\n", st.extra_read);
	if (st.errors)
		printf("%" PRIu64 " entries could not be read (see above)\n", st.errors);
	if (st.vanished)
		printf("%" PRIu64 " entries vanished during the scan (see above)\n", st.vanished);
	idx_manifest_free(&m);
	return st.errors ? RD_EXIT_PARTIAL : st.vanished ? RD_EXIT_VANISHED : RD_EXIT_OK;
}

int main(int argc, char **argv)
{
	static struct sync_args a;
	log_prog = "rdcp";
	sync_args_init(&a);
	int code = sync_args_parse(argc, argv, &a);
	if (code >= 0)
		return code;
	switch (a.mode) {
	case SYNC_MODE_HELP:
		fputs(usage, stdout);
		return RD_EXIT_OK;
	case SYNC_MODE_VERSION:
		puts("rdcp " RDCP_VERSION);
		return RD_EXIT_OK;
	case SYNC_MODE_SERVER:
		log_prog = "rdcp (remote)";
		return sync_server();
	case SYNC_MODE_WITNESS:
		log_prog = "rdcp (remote)";
		return sync_ranked_witness(a.witness);
	case SYNC_MODE_SCAN:
		if (a.noperands != 1) {
			log_err("--scan takes one directory (and no SRC DST)");
			return RD_EXIT_USAGE;
		}
		return do_scan(a.operands[0], &a.so);
	case SYNC_MODE_INDEX_LIST:
	case SYNC_MODE_INDEX_PRUNE: {
		struct idx_prune_result pr = { 0 };
		if (a.noperands) {
			log_err("--index-list and --index-prune take no SRC, DST or DIR");
			return RD_EXIT_USAGE;
		}
		int rc = a.mode == SYNC_MODE_INDEX_LIST ? idx_cache_list(stdout)
		         : idx_cache_prune(a.prune_days, stdout, &pr);
		return rc < 0 ? RD_EXIT_SELECT : pr.errors ? RD_EXIT_FILEIO : RD_EXIT_OK;
	}
	}
	int hosts = a.o.hosts != NULL;   /* --hosts=FILE:DST: every operand a SRC */
	if (a.noperands < 2 - hosts) {
		log_err(a.noperands == 0 ? "SRC and DST are missing" : "DST is missing");
		fputs("Try 'rdcp --help'.\n", stderr);
		return RD_EXIT_USAGE;
	}
	a.o.srcs = (const char *const *)a.operands;
	a.o.nsrc = a.noperands - 1 + hosts;
	a.o.src = a.operands[0];
	a.o.dst = hosts ? a.o.hosts : a.operands[a.noperands - 1];
	if ((code = sync_opts_check(&a.o)) != 0 || tp_opts_check(&a.o.tp) < 0)
		return code ? code : RD_EXIT_USAGE;
	code = sync_client(&a.o);
	sync_opts_free(&a.o);
	return code;
}
