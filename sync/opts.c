/*
 * rdcp's options: one table for the command line and for the far side. The
 * client parses its argv here, and records each option the far side needs
 * in its canonical long form (--name or --name=value); the HELLO carries
 * that list, and the server parses it with this same code (as rsync hands
 * its server an argv). So an option is defined once: its line in opt_defs,
 * its case in take_opt, and whether the far side sees it.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/exitcode.h"
#include "common/log.h"
#include "sync/select/select.h"
#include "sync/sync_int.h"
#include "sync/wire/proto.h"
#include "sync/watch.h"

enum { OPT_SCAN = 256, OPT_INDEX, OPT_NOINDEX, OPT_THREADS, OPT_SYNC,
       OPT_DELETE, OPT_TRANSPORT, OPT_DATA_ADDR, OPT_RDCP_PATH, OPT_SERVER,
       OPT_EXCLUDE, OPT_INCLUDE, OPT_PROGRESS, OPT_TIMEOUT, OPT_ENCRYPT, OPT_STREAMS,
       OPT_HELP, OPT_PARTIAL, OPT_MAX_DELETE, OPT_NUMERIC_IDS, OPT_CHOWN, OPT_CHMOD,
       OPT_EXCLUDE_FROM, OPT_INCLUDE_FROM, OPT_FILTER, OPT_FILES_FROM,
       OPT_DELETE_EXCLUDED, OPT_DELETE_BEFORE, OPT_DELETE_AFTER, OPT_DELETE_DURING,
       OPT_BWLIMIT, OPT_IGNORE_EXISTING, OPT_MIN_SIZE, OPT_MAX_SIZE, OPT_LINK_DEST,
       OPT_BACKUP_DIR, OPT_SUFFIX, OPT_REMOVE_SOURCE, OPT_MKPATH, OPT_STATS, OPT_JSON,
       OPT_FORCE, OPT_INPLACE, OPT_APPEND, OPT_APPEND_VERIFY, OPT_COMPRESS_LEVEL,
       OPT_INDEX_LIST, OPT_INDEX_PRUNE, OPT_HOSTS, OPT_RELAY, OPT_CONTIMEOUT, OPT_WATCH,
       OPT_ROUNDS, OPT_WINDOWS, OPT_RANKED, OPT_RANKED_WITNESS };

/* Who sees an option: the client only, or the far side too (forwarded);
 * FAR_SELF: the far side takes it, but the client forwards what it makes
 * of it (filter rules, with their files read) rather than what was typed. */
enum { CLIENT = 0, FAR = 1, FAR_SELF = 2 };

struct opt_def {
	struct option o;
	int where;
};

static const struct opt_def defs[] = {
	/* what to copy and how */
	{ { "recursive", no_argument, NULL, 'r' }, FAR },
	{ { "sync", no_argument, NULL, OPT_SYNC }, FAR },
	{ { "archive", no_argument, NULL, 'a' }, FAR },
	{ { "links", no_argument, NULL, 'l' }, FAR },
	{ { "perms", no_argument, NULL, 'p' }, FAR },
	{ { "times", no_argument, NULL, 't' }, FAR },
	{ { "owner", no_argument, NULL, 'o' }, FAR },
	{ { "group", no_argument, NULL, 'g' }, FAR },
	{ { "devices", no_argument, NULL, 'D' }, FAR },
	{ { "hard-links", no_argument, NULL, 'H' }, FAR },
	{ { "acls", no_argument, NULL, 'A' }, FAR },
	{ { "xattrs", no_argument, NULL, 'X' }, FAR },
	{ { "numeric-ids", no_argument, NULL, OPT_NUMERIC_IDS }, FAR },
	{ { "chown", required_argument, NULL, OPT_CHOWN }, FAR },
	{ { "chmod", required_argument, NULL, OPT_CHMOD }, FAR },
	{ { "checksum", no_argument, NULL, 'c' }, FAR },
	{ { "whole-file", no_argument, NULL, 'W' }, FAR },
	{ { "update", no_argument, NULL, 'u' }, FAR },
	{ { "ignore-existing", no_argument, NULL, OPT_IGNORE_EXISTING }, FAR },
	{ { "min-size", required_argument, NULL, OPT_MIN_SIZE }, FAR },
	{ { "max-size", required_argument, NULL, OPT_MAX_SIZE }, FAR },
	{ { "one-file-system", no_argument, NULL, 'x' }, FAR },
	{ { "dry-run", no_argument, NULL, 'n' }, FAR },
	/* what to leave out */
	{ { "exclude", required_argument, NULL, OPT_EXCLUDE }, FAR_SELF },
	{ { "include", required_argument, NULL, OPT_INCLUDE }, FAR_SELF },
	{ { "exclude-from", required_argument, NULL, OPT_EXCLUDE_FROM }, CLIENT },
	{ { "include-from", required_argument, NULL, OPT_INCLUDE_FROM }, CLIENT },
	{ { "filter", required_argument, NULL, 'f' }, FAR_SELF },
	{ { "files-from", required_argument, NULL, OPT_FILES_FROM }, FAR_SELF },
	/* deleting, backups */
	{ { "delete", no_argument, NULL, OPT_DELETE }, FAR },
	{ { "delete-before", no_argument, NULL, OPT_DELETE_BEFORE }, FAR },
	{ { "delete-during", no_argument, NULL, OPT_DELETE_DURING }, FAR },
	{ { "delete-after", no_argument, NULL, OPT_DELETE_AFTER }, FAR },
	{ { "delete-excluded", no_argument, NULL, OPT_DELETE_EXCLUDED }, FAR },
	{ { "max-delete", required_argument, NULL, OPT_MAX_DELETE }, FAR },
	{ { "force", no_argument, NULL, OPT_FORCE }, FAR },
	{ { "backup", no_argument, NULL, 'b' }, FAR },
	{ { "backup-dir", required_argument, NULL, OPT_BACKUP_DIR }, FAR },
	{ { "suffix", required_argument, NULL, OPT_SUFFIX }, FAR },
	{ { "link-dest", required_argument, NULL, OPT_LINK_DEST }, FAR },
	{ { "remove-source-files", no_argument, NULL, OPT_REMOVE_SOURCE }, FAR },
	{ { "mkpath", no_argument, NULL, OPT_MKPATH }, FAR },
	{ { "partial", no_argument, NULL, OPT_PARTIAL }, FAR },
	{ { "inplace", no_argument, NULL, OPT_INPLACE }, FAR },
	{ { "append", no_argument, NULL, OPT_APPEND }, FAR },
	{ { "append-verify", no_argument, NULL, OPT_APPEND_VERIFY }, FAR },
	{ { "sparse", no_argument, NULL, 'S' }, FAR },
	/* far too: the receiver takes round after round (CTL_ROUND) */
	{ { "watch", optional_argument, NULL, OPT_WATCH }, FAR },
	/* transport */
	{ { "streams", required_argument, NULL, OPT_STREAMS }, FAR },
	{ { "transport", required_argument, NULL, OPT_TRANSPORT }, FAR },
	{ { "encrypt", no_argument, NULL, OPT_ENCRYPT }, FAR },
	{ { "timeout", required_argument, NULL, OPT_TIMEOUT }, FAR },
	/* far too: a pull's sender and a fan-out's hosts dial data connections */
	{ { "contimeout", required_argument, NULL, OPT_CONTIMEOUT }, FAR },
	{ { "bwlimit", required_argument, NULL, OPT_BWLIMIT }, FAR },
	{ { "compress", no_argument, NULL, 'z' }, CLIENT },
	{ { "compress-level", required_argument, NULL, OPT_COMPRESS_LEVEL }, CLIENT },
	{ { "data-addr", required_argument, NULL, OPT_DATA_ADDR }, CLIENT },
	{ { "rsh", required_argument, NULL, 'e' }, CLIENT },
	{ { "rdcp-path", required_argument, NULL, OPT_RDCP_PATH }, CLIENT },
	{ { "hosts", required_argument, NULL, OPT_HOSTS }, CLIENT },
	/* the fan-out client gives it to each receiver; never typed (below) */
	{ { "relay", required_argument, NULL, OPT_RELAY }, FAR },
	{ { "rounds", no_argument, NULL, OPT_ROUNDS }, FAR },
	{ { "windows", no_argument, NULL, OPT_WINDOWS }, FAR },
	{ { "ranked", optional_argument, NULL, OPT_RANKED }, FAR },
	/* what to print */
	/* far too: the receiver makes the lines (names with -v, codes with -i,
	 * none with -q), the sender says "using TCP" with -v */
	{ { "verbose", no_argument, NULL, 'v' }, FAR },
	{ { "quiet", no_argument, NULL, 'q' }, FAR },
	{ { "itemize-changes", no_argument, NULL, 'i' }, FAR },
	{ { "human-readable", no_argument, NULL, 'h' }, CLIENT },
	{ { "progress", no_argument, NULL, OPT_PROGRESS }, CLIENT },
	{ { "stats", no_argument, NULL, OPT_STATS }, CLIENT },
	{ { "json", no_argument, NULL, OPT_JSON }, FAR },
	/* the index, and other modes */
	{ { "scan", no_argument, NULL, OPT_SCAN }, CLIENT },
	{ { "index", required_argument, NULL, OPT_INDEX }, CLIENT },
	{ { "no-index", no_argument, NULL, OPT_NOINDEX }, FAR },
	{ { "index-list", no_argument, NULL, OPT_INDEX_LIST }, CLIENT },
	{ { "index-prune", optional_argument, NULL, OPT_INDEX_PRUNE }, CLIENT },
	{ { "threads", required_argument, NULL, OPT_THREADS }, CLIENT },
	{ { "server", no_argument, NULL, OPT_SERVER }, CLIENT },
	/* a ranked run's check that its DSTs are one tree (sync/ranks.c),
	 * run by the remote shell as --server is; never typed */
	{ { "ranked-witness", required_argument, NULL, OPT_RANKED_WITNESS }, CLIENT },
	{ { "help", no_argument, NULL, OPT_HELP }, CLIENT },
	{ { "version", no_argument, NULL, 'V' }, CLIENT },   /* -V: rsync's */
	/* short only: -P is --partial --progress, -F a filter rule (below) */
	{ { NULL, no_argument, NULL, 'P' }, CLIENT },
	{ { NULL, no_argument, NULL, 'F' }, CLIENT },
};
#define NDEFS (sizeof defs / sizeof defs[0])
static const char shortopts[] = "rlptgoDaHAXcWuxnbSf:e:vqihPFzV";

static const struct opt_def *def_of(int c)
{
	for (size_t i = 0; i < NDEFS; i++)
		if (defs[i].o.val == c)
			return &defs[i];
	return NULL;
}

/* Remember option c (with optarg) for the far side, in its long form. */
static int forward(struct sync_opts *o, int c, const char *arg)
{
	const struct opt_def *d = def_of(c);
	const char *name = d->o.name;
	char **v = realloc(o->fwd, (size_t)(o->nfwd + 1) * sizeof *v);
	if (!v)
		return -ENOMEM;
	o->fwd = v;
	int n = arg ? asprintf(&v[o->nfwd], "--%s=%s", name, arg)
	            : asprintf(&v[o->nfwd], "--%s", name);
	if (n < 0)
		return -ENOMEM;
	o->nfwd++;
	return 0;
}

/* A decimal count in lo..hi for option name; -1 (said) if it is not one. */
static long long number(const char *name, const char *arg, long long lo, long long hi)
{
	char *end;
	errno = 0;
	long long n = strtoll(arg, &end, 10);
	if (errno || end == arg || *end || n < lo || n > hi) {
		log_err("--%s: expected a number %lld..%lld, got '%s'", name, lo, hi, arg);
		return -1;
	}
	return n;
}

/* --bwlimit=RATE, rsync's syntax: a number, maybe fractional, in KiB/s,
 * or with a suffix B, K, M, G, T (powers of 1024; KB, MB... of 1000; KiB,
 * MiB... of 1024); 0: no limit, else at least 512 bytes/s. Bytes/s into
 * *out; -1 (said) if it is not one. */
static int rate_arg(const char *arg, uint64_t *out)
{
	static const char units[] = "bkmgt";
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	const char *u = *end ? strchr(units, *end | 0x20) : units + 1;   /* KiB/s */
	double base = 1024;
	if (*end && u && *u)
		end++;
	if (!strcmp(end, "B") || !strcmp(end, "b"))
		base = 1000;
	else if (*end && strcmp(end, "iB") && strcmp(end, "ib"))
		u = NULL;   /* junk after the number or its unit */
	double bytes = v;
	for (const char *p = units; u && *u && p < u; p++)
		bytes *= base;
	if (errno || end == arg || !u || !*u || !isdigit((unsigned char)*arg) ||
	    bytes > 1e18 || (bytes > 0 && bytes < 512)) {
		log_err("--bwlimit: expected a rate in KiB/s such as 500, 1.5M or 4M (0: no limit; "
		        "at least 512 bytes/s), got '%s'", arg);
		return -1;
	}
	*out = (uint64_t)bytes;
	return 0;
}

int sync_opts_forward_rule(struct sync_opts *o, const char *text)
{
	return forward(o, 'f', text);
}

/* A size as rsync reads --max-size: a number (fraction allowed), an
 * optional unit K, M, G, T, P (1024s; "KiB" too, "KB" 1000s; any case, B
 * for bytes), then an optional "+1" or "-1". -1 (said) if not one. */
static long long size_arg(const char *name, const char *arg)
{
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	double mult = 1, base = 1024;
	const char *units = "bkmgtp", *u = *end ? strchr(units, tolower((unsigned char)*end)) : NULL;
	if (errno || end == arg || (!isdigit((unsigned char)*arg) && *arg != '.'))
		goto bad;
	if (u) {
		end++;
		if (tolower((unsigned char)end[0]) == 'b') {
			base = 1000;
			end++;
		} else if (tolower((unsigned char)end[0]) == 'i' && tolower((unsigned char)end[1]) == 'b') {
			end += 2;
		}
		for (const char *q = units; q < u; q++)
			mult *= base;
	}
	long long off = !strcmp(end, "+1") ? 1 : !strcmp(end, "-1") ? -1 : 0;
	if (*end && !off)
		goto bad;
	if (v * mult > 9e18)
		goto bad;
	long long n = (long long)(v * mult) + off;
	if (n >= 0)
		return n;
bad:
	log_err("--%s=%s is invalid (a size: a number, then K, M, G, T or P for 1024s, KB, "
	        "MB... for 1000s, then +1 or -1 if wanted)", name, arg);
	return -1;
}

/* Options that set flags only; 0 when c is not one of them. */
static unsigned flag_of(int c)
{
	switch (c) {
	case 'r': return SYNC_F_RECURSIVE;
	case OPT_SYNC: return SYNC_F_MIRROR | SYNC_F_RECURSIVE | SYNC_F_PERMS |
	                      SYNC_F_TIMES | SYNC_F_OWNER;
	case 'a': return SYNC_F_RECURSIVE | SYNC_F_PERMS | SYNC_F_TIMES | SYNC_F_OWNER;
	case 'p': return SYNC_F_PERMS;
	case 't': return SYNC_F_TIMES;
	case 'o': case 'g': return SYNC_F_OWNER;
	case 'H': return SYNC_F_HARDLINKS;
	case 'A': return SYNC_F_ACLS | SYNC_F_PERMS;
	case 'X': return SYNC_F_XATTRS;
	case OPT_NUMERIC_IDS: return SYNC_F_NUMERIC_IDS;
	case 'c': return SYNC_F_CHECKSUM;
	case 'u': return SYNC_F_UPDATE;
	case OPT_IGNORE_EXISTING: return SYNC_F_IGNORE_EXISTING;
	case 'n': return SYNC_F_DRYRUN;   /* silent alone, as rsync: -nv, -ni */
	case OPT_DELETE: return SYNC_F_DELETE;
	case OPT_DELETE_DURING: return SYNC_F_DELETE | SYNC_F_DELETE_DURING;
	case OPT_DELETE_BEFORE: return SYNC_F_DELETE | SYNC_F_DELETE_BEFORE;
	case OPT_DELETE_AFTER: return SYNC_F_DELETE | SYNC_F_DELETE_AFTER;
	case OPT_DELETE_EXCLUDED: return SYNC_F_DELETE | SYNC_F_DELETE_EXCLUDED;
	case 'b': return SYNC_F_BACKUP;
	case OPT_FORCE: return SYNC_F_FORCE;
	case OPT_REMOVE_SOURCE: return SYNC_F_REMOVE_SOURCE;
	case OPT_MKPATH: return SYNC_F_MKPATH;
	case OPT_PARTIAL: return SYNC_F_PARTIAL;
	case OPT_INPLACE: return SYNC_F_INPLACE;
	case OPT_APPEND: return SYNC_F_APPEND;
	case OPT_APPEND_VERIFY: return SYNC_F_APPEND | SYNC_F_APPEND_VERIFY;
	case 'S': return SYNC_F_SPARSE;
	case 'W': return SYNC_F_WHOLE;
	case OPT_ENCRYPT: return SYNC_F_ENCRYPT;
	}
	return 0;
}

/* --chown USER:GROUP, USER, USER: or :GROUP (names or numbers, looked up
 * on the receiving side). 0, or -1 (said). */
static int chown_syntax(const char *arg)
{
	const char *colon = strchr(arg, ':');
	size_t ul = colon ? (size_t)(colon - arg) : strlen(arg);
	size_t gl = colon ? strlen(colon + 1) : 0;
	if ((!ul && !gl) || ul > 255 || gl > 255 || (colon && strchr(colon + 1, ':'))) {
		log_err("--chown: expected USER:GROUP, USER or :GROUP, got '%s'", arg);
		return -1;
	}
	return 0;
}

/* Options with a value, or with an effect beyond flags. -1 to go on, else
 * the exit code to leave with now. */
/* --exclude, --include, --filter, -F, --exclude-from, --include-from,
 * --files-from. -1 to go on, -2 when c is none of them, else an exit code. */
static int take_rule(int c, struct sync_args *a)
{
	struct sync_opts *o = &a->o;
	int far = a->mode == SYNC_MODE_FAR;
	switch (c) {
	case OPT_EXCLUDE:
	case OPT_INCLUDE:
		return sync_rules_add(o, optarg, c == OPT_INCLUDE ? '+' : '-', c == OPT_INCLUDE
		                      ? "--include" : "--exclude", far) < 0 ? RD_EXIT_USAGE : -1;
	case 'f':
		return sync_rules_add(o, optarg, 0, "--filter", far) < 0 ? RD_EXIT_USAGE : -1;
	case 'F':   /* rsync: -F is ': /.rsync-filter', a second -F hides those files */
		if (++o->filter_F > 2)
			return -1;
		return sync_rules_add(o, o->filter_F == 1 ? "dir-merge /.rsync-filter"
		                      : "exclude .rsync-filter", 0, "-F", far) < 0 ? RD_EXIT_USAGE : -1;
	case OPT_EXCLUDE_FROM:
	case OPT_INCLUDE_FROM: {
		int code;
		*(c == OPT_EXCLUDE_FROM ? &o->exclude_from : &o->include_from) = optarg;
		return sync_rules_file(o, optarg, c == OPT_EXCLUDE_FROM ? '-' : '+', 0, far, 0,
		                       &code) < 0 ? code : -1;
	}
	case OPT_FILES_FROM:
		o->files_from = optarg;
		if (far && strcmp(optarg, "-")) {   /* the list comes in CTL_FILES */
			snprintf(a->why, sizeof a->why, "--files-from names a file, not '-'");
			return RD_EXIT_PROTO;
		}
		if (far)
			return -1;
		return sync_files_read(o, optarg) < 0 || forward(o, c, "-") < 0 ? RD_EXIT_USAGE : -1;
	}
	return -2;
}

/* --watch (events), --watch=poll, --watch=poll:SECONDS. */
static int watch_arg(struct sync_opts *o, const char *arg)
{
	o->watch = SYNC_WATCH_EVENTS;
	o->watch_poll_s = SYNC_WATCH_POLL_S;
	if (!arg || !strcmp(arg, "events") || !strcmp(arg, "inotify"))
		return 0;
	if (!strcmp(arg, "fanotify")) {
		o->watch = SYNC_WATCH_FANOTIFY;
		return 0;
	}
	if (strncmp(arg, "poll", 4) || (arg[4] && arg[4] != ':')) {
		log_err("--watch=%s: write --watch (the kernel's events: inotify),"
		        " --watch=fanotify (root: one mark for the filesystem), --watch=poll or "
		        "--watch=poll:SECONDS (for a filesystem that sends none, e.g. NFS)", arg);
		return -1;
	}
	o->watch = SYNC_WATCH_POLL;
	if (!arg[4])
		return 0;
	long long n = number("watch=poll", arg + 5, 1, 86400);
	if (n < 0)
		return -1;
	o->watch_poll_s = (int)n;
	return 0;
}

/* --ranked (the client adds it): "", "later", "JOB" or "later:JOB", JOB
 * the ranked job's token in 16 lowercase hex digits, not all zero; or a
 * split file's run: "part:K/N:" (K < N <= 65536) or "join:", then
 * "later:" or not, and JOB. */
static int ranked_arg(struct sync_opts *o, const char *arg, struct sync_args *a)
{
	o->ranked = 1;
	o->ranked_job = 0;
	o->ranked_split = 0;
	if (!arg)
		return 0;
	if (!strncmp(arg, "part:", 5)) {   /* K/N: digits, K < N <= 65536 */
		unsigned long v[2] = { 0, 0 };
		const char *p = arg + 5;
		for (int j = 0; j < 2; j++) {
			size_t d = strspn(p, "0123456789");
			if (d < 1 || d > 5 || p[d] != (j ? ':' : '/'))
				break;
			v[j] = strtoul(p, NULL, 10);
			p += d + 1;
			if (j == 1 && v[0] < v[1] && v[1] <= 65536) {
				o->ranked_split = (int)v[0] + 1;
				o->ranked_nparts = (uint32_t)v[1];
				arg = p;
			}
		}
		if (!o->ranked_split)
			arg = "";   /* refused below */
	} else if (!strncmp(arg, "join:", 5)) {
		o->ranked_split = -1;
		arg += 5;
	}
	if (o->ranked_split && !strncmp(arg, "later:", 6)) {   /* part:K/N:later:JOB */
		o->ranked = 2;
		arg += 6;
	} else if (o->ranked_split) {
		/* (the token below) */
	} else if (!strncmp(arg, "later", 5) && (!arg[5] || arg[5] == ':')) {
		o->ranked = 2;
		if (!arg[5])
			return 0;
		arg += 6;
	}
	uint64_t job = 0;
	size_t n = 0;
	for (; n < 16 && (isdigit((unsigned char)arg[n]) || (arg[n] >= 'a' && arg[n] <= 'f')); n++)
		job = job << 4 | (uint64_t)(isdigit((unsigned char)arg[n]) ? arg[n] - '0'
		                                                          : arg[n] - 'a' + 10);
	if (n != 16 || arg[n] || !job) {
		snprintf(a->why, sizeof a->why, "--ranked takes 'later', a job's token (16 hex "
		         "digits), or 'later:', 'part:K/N:' or 'join:' and a token");
		return -1;
	}
	o->ranked_job = job;
	return 0;
}

static int take_value(int c, struct sync_args *a)
{
	struct sync_opts *o = &a->o;
	long long n;
	int rc = take_rule(c, a);
	if (rc != -2)
		return rc;
	switch (c) {
	case OPT_STREAMS:
		return tp_opt_streams(optarg, &o->tp.streams) < 0 ? RD_EXIT_USAGE : -1;
	case OPT_TRANSPORT:
		return tp_opt_transport(optarg, &o->tp.kind) < 0 ? RD_EXIT_USAGE : -1;
	case OPT_TIMEOUT:
		if ((n = number("timeout", optarg, 0, SYNC_TIMEOUT_MAX)) < 0)
			return RD_EXIT_USAGE;
		o->timeout = (int)n;
		return -1;
	case OPT_CONTIMEOUT:
		if ((n = number("contimeout", optarg, 0, SYNC_TIMEOUT_MAX)) < 0)
			return RD_EXIT_USAGE;
		o->contimeout = (int)n;
		return -1;
	case OPT_MAX_DELETE:
		if ((n = number("max-delete", optarg, 0, (long long)1 << 62)) < 0)
			return RD_EXIT_USAGE;
		o->max_delete = n;
		return -1;
	case 'x':
		o->flags |= SYNC_F_ONE_FS;
		o->one_fs += o->one_fs < 2;
		return -1;
	case OPT_CHOWN:
		if (chown_syntax(optarg) < 0)
			return RD_EXIT_USAGE;
		o->chown = optarg;   /* implies -o for USER, -g for GROUP (sync/ids.c) */
		return -1;
	case OPT_CHMOD: {
		struct sync_chmod *ch;
		rc = sync_chmod_parse(optarg, 022, &ch);
		sync_chmod_free(ch);
		if (rc < 0) {
			log_err("--chmod: '%s' is not a mode: comma-separated [DF][ugoa][+-=][rwxXst] "
			        "or [DF]octal", optarg);
			return RD_EXIT_USAGE;
		}
		o->chmod = optarg;
		return -1;
	}
	case OPT_MIN_SIZE:
	case OPT_MAX_SIZE:
		*(c == OPT_MIN_SIZE ? &o->min_size_arg : &o->max_size_arg) = optarg;
		n = size_arg(c == OPT_MIN_SIZE ? "min-size" : "max-size", optarg);
		*(c == OPT_MIN_SIZE ? &o->min_size : &o->max_size) = n;
		return n < 0 ? RD_EXIT_USAGE : -1;
	case OPT_BWLIMIT:
		o->bwlimit_arg = optarg;
		return rate_arg(optarg, &o->bwlimit) < 0 ? RD_EXIT_USAGE : -1;
	case OPT_BACKUP_DIR: o->backup_dir = optarg; o->flags |= SYNC_F_BACKUP; return -1;
	case OPT_SUFFIX: o->backup_suffix = optarg; return -1;
	case OPT_LINK_DEST:
		if (o->nlink_dest == SYNC_MAX_LINK_DEST) {
			log_err("--link-dest: at most %d directories", SYNC_MAX_LINK_DEST);
			return RD_EXIT_USAGE;
		}
		o->link_dest[o->nlink_dest++] = optarg;
		return -1;
	case 'e': o->rsh = optarg; return -1;
	case OPT_RDCP_PATH: o->rdcp_path = optarg; return -1;
	case OPT_DATA_ADDR: o->data_addr = optarg; return -1;
	case OPT_HOSTS: o->hosts = optarg; return -1;
	case OPT_RELAY: o->relay = 1; o->relay_name = optarg; return -1;
	case OPT_ROUNDS: o->take_rounds = 1; return -1;
	case OPT_WINDOWS: o->windows = 1; return -1;
	case OPT_RANKED:   /* [later:]JOB; "later": pass 1 of a run with --delete */
		return ranked_arg(o, optarg, a) < 0 ? RD_EXIT_PROTO : -1;
	case OPT_WATCH:
		return watch_arg(o, optarg) < 0 ? RD_EXIT_USAGE : -1;
	}
	return -2;   /* not ours */
}

/* What prints, and the other modes. -1 to go on, else an exit code. */
static int take_mode(int c, struct sync_args *a)
{
	struct sync_opts *o = &a->o;
	switch (c) {
	case 'v':
		o->verbose++;
		a->so.verbose++;
		o->flags |= SYNC_F_ITEMIZE;
		o->tp.verbose = 0;   /* the transport's notices ("using TCP") */
		return -1;
	case 'q': o->quiet++; return -1;
	case 'i': o->itemize++; o->flags |= SYNC_F_ITEMIZE; return -1;
	case 'h': o->human++; return -1;
	case 'P':   /* --partial --progress: the far side needs the first */
		o->progress = 1;
		o->flags |= SYNC_F_PARTIAL;
		return forward(o, OPT_PARTIAL, NULL) < 0 ? RD_EXIT_USAGE : -1;
	case OPT_PROGRESS: o->progress = 1; return -1;
	case OPT_STATS: o->stats = 1; return -1;
	case OPT_JSON: o->json = 1; return -1;
	case OPT_SCAN: a->mode = SYNC_MODE_SCAN; return -1;
	case OPT_INDEX: a->so.index_path = o->index_path = optarg; return -1;
	case OPT_NOINDEX: a->so.no_index = o->no_index = 1; return -1;
	case OPT_INDEX_LIST: a->mode = SYNC_MODE_INDEX_LIST; return -1;
	case OPT_INDEX_PRUNE: {
		long long n = optarg ? number("index-prune", optarg, 0, 100000) : IDX_PRUNE_DAYS;
		if (n < 0)
			return RD_EXIT_USAGE;
		a->mode = SYNC_MODE_INDEX_PRUNE;
		a->prune_days = (int)n;
		return -1;
	}
	case OPT_THREADS: {
		long long n = number("threads", optarg, 1, 64);
		if (n < 0)
			return RD_EXIT_USAGE;
		a->so.threads = (int)n;
		return -1;
	}
	case OPT_SERVER: a->mode = SYNC_MODE_SERVER; return -1;
	case OPT_RANKED_WITNESS: a->mode = SYNC_MODE_WITNESS; a->witness = optarg; return -1;
	case OPT_HELP: a->mode = SYNC_MODE_HELP; return -1;
	case 'V': a->mode = SYNC_MODE_VERSION; return -1;
	case 'l': case 'D':
		return -1;   /* what rdcp always does: symlinks, devices */
	case 'z': case OPT_COMPRESS_LEVEL:
		log_err("-z/--compress is not supported: rdcp's links (RDMA, a cluster's "
		        "LAN) move data faster than a compressor can make it smaller; "
		        "leave it out");
		return RD_EXIT_USAGE;
	}
	return -2;
}

static int take_opt(int c, struct sync_args *a)
{
	unsigned f = flag_of(c);
	int rc;
	if (c == 'r')
		a->o.recursive_given = 1;
	if (f) {
		a->o.flags |= f;
		return -1;
	}
	if ((rc = take_value(c, a)) != -2 || (rc = take_mode(c, a)) != -2)
		return rc;
	return -3;   /* no such option */
}

static struct option *long_table(void)
{
	static struct option lo[NDEFS + 1];
	for (size_t i = 0, k = 0; i < NDEFS; i++)
		if (defs[i].o.name)
			lo[k++] = defs[i].o;
	return lo;
}

int sync_args_parse(int argc, char **argv, struct sync_args *a)
{
	struct option *lo = long_table();
	int far = a->mode == SYNC_MODE_FAR, c, idx;
	if (argc == 2 && !strcmp(argv[1], "-h") && !far) {   /* rsync's rule */
		a->mode = SYNC_MODE_HELP;
		return -1;
	}
	optind = 0;
	opterr = !far;
	while ((c = getopt_long(argc, argv, shortopts, lo, &idx)) != -1) {
		const struct opt_def *d = c == '?' ? NULL : def_of(c);
		if (far && (!d || d->where == CLIENT)) {
			snprintf(a->why, sizeof a->why, "it has an option that is not for "
			         "the server: '%.200s'", argv[optind - 1]);
			return RD_EXIT_PROTO;
		}
		if (!d) {
			fputs("Try 'rdcp --help'.\n", stderr);
			return RD_EXIT_USAGE;
		}
		if (!far && c == OPT_RELAY) {   /* the fan-out's own, for its receivers */
			log_err("--relay is rdcp's own option for the hosts of a fan-out; to copy "
			        "to several hosts, name them all: rdcp SRC host1:DST host2:DST");
			return RD_EXIT_USAGE;
		}
		if (!far && (c == OPT_ROUNDS || c == OPT_WINDOWS || c == OPT_RANKED)) {
			/* the client's own, for its far side */
			log_err("--%s is rdcp's own option for its far side; it is not typed",
			        c == OPT_ROUNDS ? "rounds" : c == OPT_WINDOWS ? "windows" : "ranked");
			return RD_EXIT_USAGE;
		}
		int rc = take_opt(c, a);
		if (rc == -3) {
			log_err("option '%s' is not handled", argv[optind - 1]);
			return RD_EXIT_USAGE;
		}
		if (rc >= 0)
			return rc;
		if (!far && d->where == FAR && forward(&a->o, c, d->o.has_arg ? optarg : NULL) < 0)
			return RD_EXIT_USAGE;
	}
	a->o.tp.encrypt = (a->o.flags & SYNC_F_ENCRYPT) != 0;
	/* --scan -X / -A: what the scan reads too */
	a->so.meta = ((a->o.flags & SYNC_F_XATTRS) ? IDX_SCAN_XATTRS : 0) |
	             ((a->o.flags & SYNC_F_ACLS) ? IDX_SCAN_ACLS : 0);
	if (a->o.quiet)
		a->o.tp.verbose = -1;   /* -q wins over -v, as rsync */
	a->operands = argv + optind;
	a->noperands = argc - optind;
	/* rsync: --files-from lists what to send; -a does not recurse then */
	if (a->o.files_from && !a->o.recursive_given && !a->o.windows)
		a->o.flags &= ~(unsigned)SYNC_F_RECURSIVE;
	return -1;
}

/* Options that do not go together, or not with this run. */
int sync_opts_check(const struct sync_opts *o)
{
	if (o->files_from && (o->flags & SYNC_F_DELETE) && !o->windows) {
		log_err("--delete with --files-from is not supported: only the listed paths "
		        "are looked at");
		return RD_EXIT_USAGE;
	}
	if (o->files_from && o->nsrc > 1) {
		log_err("--files-from takes one SRC: the directory the list is relative to");
		return RD_EXIT_USAGE;
	}
	unsigned when = o->flags & (SYNC_F_DELETE_BEFORE | SYNC_F_DELETE_AFTER |
	                            SYNC_F_DELETE_DURING);
	if (when & (when - 1)) {   /* rsync's rule and words */
		log_err("you may not combine multiple --delete-WHEN options");
		return RD_EXIT_USAGE;
	}
	if ((o->flags & (SYNC_F_INPLACE | SYNC_F_APPEND)) && (o->flags & SYNC_F_BACKUP)) {
		log_err("%s with -b/--backup-dir is not supported: the backup would be the "
		        "very file being rewritten", (o->flags & SYNC_F_APPEND) ? "--append"
		        : "--inplace");
		return RD_EXIT_USAGE;
	}
	if (o->backup_suffix && strchr(o->backup_suffix, '/')) {
		log_err("--suffix cannot contain slashes: %s", o->backup_suffix);
		return RD_EXIT_USAGE;
	}
	if ((o->flags & SYNC_F_BACKUP) && !o->backup_dir && o->backup_suffix &&
	    !*o->backup_suffix) {
		log_err("--suffix cannot be empty without --backup-dir");
		return RD_EXIT_USAGE;
	}
	return 0;
}

void sync_opts_free(struct sync_opts *o)
{
	for (int i = 0; i < o->nfwd; i++)
		free(o->fwd[i]);
	for (int i = 0; i < o->nrules; i++)
		free(o->rules[i].pattern);
	for (size_t i = 0; i < o->nfiles; i++)
		free(o->files[i]);
	free(o->fwd);
	free(o->rules);
	free(o->files);
	o->fwd = NULL;
	o->rules = NULL;
	o->files = NULL;
	o->nfwd = o->nrules = 0;
	o->nfiles = 0;
}

void sync_args_init(struct sync_args *a)
{
	memset(a, 0, sizeof *a);
	a->o.tp.streams = 0;   /* the transport's default: 2 over TCP, 1 over RDMA */
	a->o.max_delete = -1;
	a->o.contimeout = -1;
	a->o.tp.verbose = -1;   /* quiet unless -v */
	a->o.min_size = a->o.max_size = -1;
}
