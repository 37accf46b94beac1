/*
 * sync: a sync run, rdcp [OPTIONS] SRC DST. The client starts the far side
 * (`rdcp --server`, over the remote shell or forked for a local run), the
 * two sides scan their trees with index/, the sender's manifest crosses the
 * control channel (common/ctl.h), the receiver plans and asks for what it
 * lacks, and the data comes over one transport/ session: large files in
 * chunks verified on arrival, small files as one archive stream. Files land
 * through a temp file and a rename, so DST holds the old or the new file.
 *
 * Depends on index/, transport/ and common/; knows nothing of pipe/.
 * Conventions as elsewhere: 0 or a negative errno; messages on stderr.
 */
#ifndef RDCP_SYNC_H
#define RDCP_SYNC_H

#include <stdint.h>

#include "index/index.h"
#include "transport/transport.h"

/* --- a sync run: rdcp [OPTIONS] SRC DST --- */

enum {
	SYNC_F_RECURSIVE = 1 << 0,   /* -r: directories too */
	SYNC_F_MIRROR    = 1 << 1,   /* --sync: DST becomes a mirror of SRC's contents */
	SYNC_F_PERMS     = 1 << 2,   /* -a, -p: permissions */
	SYNC_F_TIMES     = 1 << 3,   /* -a, -t: modification times (ns) */
	SYNC_F_OWNER     = 1 << 4,   /* -a, -o, -g as root: owner and group */
	SYNC_F_HARDLINKS = 1 << 5,   /* -H */
	SYNC_F_DELETE    = 1 << 6,   /* --delete */
	SYNC_F_DRYRUN    = 1 << 7,   /* -n */
	SYNC_F_CHECKSUM  = 1 << 8,   /* -c: compare content hashes, not size+mtime */
	SYNC_F_ITEMIZE   = 1 << 9,   /* -v, -i or -n: report each change */
	SYNC_F_ENCRYPT   = 1 << 10,  /* --encrypt: seal the data connection (TCP) */
	SYNC_F_XATTRS    = 1 << 11,  /* -X */
	SYNC_F_ACLS      = 1 << 12,  /* -A */
	SYNC_F_NUMERIC_IDS = 1 << 13,   /* --numeric-ids: no user/group names */
	SYNC_F_UPDATE    = 1 << 14,  /* -u: skip files newer on DST */
	SYNC_F_IGNORE_EXISTING = 1 << 15,
	SYNC_F_ONE_FS    = 1 << 16,  /* -x */
	SYNC_F_DELETE_BEFORE = 1 << 17,
	SYNC_F_DELETE_AFTER = 1 << 18,
	SYNC_F_DELETE_EXCLUDED = 1 << 19,
	SYNC_F_BACKUP    = 1 << 20,  /* -b, --backup-dir */
	SYNC_F_REMOVE_SOURCE = 1 << 21,   /* --remove-source-files */
	SYNC_F_MKPATH    = 1 << 22,  /* --mkpath: create DST's missing parents */
	SYNC_F_PARTIAL   = 1 << 23,  /* --partial, -P */
	SYNC_F_INPLACE   = 1 << 24,
	SYNC_F_APPEND    = 1 << 25,
	SYNC_F_APPEND_VERIFY = 1 << 26,
	SYNC_F_SPARSE    = 1 << 27,  /* -S */
	SYNC_F_FORCE     = 1 << 28,  /* --force: a non-empty directory may give way */
	SYNC_F_DELETE_DURING = 1 << 29,   /* --delete-during: rdcp's --delete */
	SYNC_F_WHOLE     = 1 << 30,  /* -W: changed files are sent whole (no delta) */
};

/* Filter rules (--exclude, --include, --filter, -F, --exclude-from,
 * --include-from and the merge files they name), in command-line order:
 * rsync's syntax (sync/select/rules.c), applied by sync/filter.c. */
enum { SYNC_R_EXCLUDE = 1, SYNC_R_INCLUDE, SYNC_R_CLEAR, SYNC_R_DIRMERGE,
       SYNC_R_MERGE /* read by the client, never in the list */ };
enum {
	SYNC_RM_NEGATE     = 1 << 0,   /* '!': the rule applies when the pattern does not match */
	SYNC_RM_SENDER     = 1 << 1,   /* 's', hide/show: on the sending side only */
	SYNC_RM_RECEIVER   = 1 << 2,   /* 'r', protect/risk: on the receiving side only */
	SYNC_RM_NO_INHERIT = 1 << 3,   /* dir-merge 'n': not inherited by subdirectories */
	SYNC_RM_EXCLUDES   = 1 << 4,   /* (dir-)merge '-': every line an exclude pattern */
	SYNC_RM_INCLUDES   = 1 << 5,   /* (dir-)merge '+': every line an include pattern */
	SYNC_RM_EXCL_SELF  = 1 << 6,   /* (dir-)merge 'e': while parsing only */
};
struct sync_rule {
	int kind;                   /* SYNC_R_* */
	unsigned mods;              /* SYNC_RM_* */
	char *pattern;              /* owned; dir-merge: the file name */
};

#define SYNC_MAX_RULES     4096
#define SYNC_MAX_LINK_DEST 20     /* rsync's limit */
#define SYNC_TIMEOUT_MAX   1000000   /* seconds */
/* A fan-out's login limit when --contimeout is not given: one host that
 * never answers must not hold the rest for ssh's own (75 s and more) */
#define SYNC_FAN_CONTIMEOUT 15
#define SYNC_FAN_CONTIMEOUT_HOSTS 32   /* and a second more per this many hosts */

struct sync_opts {
	const char *const *srcs;    /* SRC operands: local paths or [user@]host:path */
	int nsrc;
	const char *src, *dst;      /* src: srcs[0] */
	struct sync_rule *rules;    /* filter rules, in order (see above) */
	int nrules, filter_F;
	int stdin_taken;            /* a --*-from file was '-' (stdin reads once) */
	const char *exclude_from, *include_from, *files_from;
	char **files;               /* --files-from: the list, normalized (the
	                               client reads it; a server sender gets it
	                               in CTL_FILES) */
	size_t nfiles;
	int recursive_given;        /* -r itself: with --files-from, -a and --sync
	                               do not recurse (rsync) */
	int one_fs;                 /* -x: 1; -xx: 2 (mount points left out) */
	long long min_size, max_size;   /* --min-size/--max-size, bytes; -1: none */
	unsigned flags;             /* SYNC_F_* */
	int verbose, quiet, itemize, human, stats, json;
	int progress;               /* --progress: a live line on a terminal */
	const char *rsh;            /* remote shell, default "ssh" */
	const char *rdcp_path;      /* the remote rdcp, default "rdcp" */
	const char *data_addr;      /* address for data connections (see rdcp.1) */
	int timeout;                /* --timeout: seconds without I/O before giving
	                               up (exit 30), 0: never; both sides */
	int contimeout;             /* --contimeout: seconds a login (the remote
	                               shell's first word) or a data connection
	                               may take; -1 not given (a fan-out's logins:
	                               SYNC_FAN_CONTIMEOUT; data: the transport's
	                               10 s), 0 no limit of ours */
	struct tp_opts tp;          /* kind, streams */
	long long max_delete;       /* --max-delete, -1: no limit */
	const char *min_size_arg, *max_size_arg, *bwlimit_arg;   /* as typed */
	uint64_t bwlimit;           /* --bwlimit in bytes/s, 0: none */
	const char *chown, *chmod;
	const char *link_dest[SYNC_MAX_LINK_DEST];
	int nlink_dest;
	const char *backup_dir, *backup_suffix;
	const char *index_path;     /* --index (the client's side) */
	int no_index;               /* --no-index, both sides */
	const char *hosts;          /* --hosts=FILE:DST (fan-out, sync/fanout/fanout.c) */
	int relay;                  /* --relay=NAME (far side only): a fan-out
	                               receiver, which forwards the data to the next
	                               host; NAME: the client's name for this host,
	                               in our messages */
	const char *relay_name;
	int watch;                  /* --watch: SYNC_WATCH_EVENTS or _POLL
	                               (sync/watch.h); the server: take rounds */
	int watch_poll_s;           /* --watch=poll:S */
	int round;                  /* a --watch round after the first: its
	                               paths are in files (a server's too) */
	int take_rounds;            /* the server (--rounds, which the client
	                               adds): more rounds may follow the first,
	                               for files that changed as they were read */
	int windows;                /* --windows (the client adds it): a large
	                               tree in rounds of directories, each one
	                               level deep (sync/windows.c): a "dir/" of
	                               files is its entries only, even with -r */
	int ranked;                 /* --ranked (the client adds it): a receiver
	                               of a ranked run (sync/ranks.c), one of
	                               several writing DST at once: DST's lock
	                               shared with them; 2 (--ranked=later):
	                               its deletes come in a later pass */
	uint64_t ranked_job;        /* --ranked=[later:]JOB: the ranked job's
	                               token (0: none), so that another job's
	                               receivers are kept from DST */
	int ranked_split;           /* a ranked run's split files (sync/ranks.c,
	                               recv/split.c): K + 1 for --ranked=
	                               part:K/N:JOB (this receiver writes range
	                               K of N of each file into its shared
	                               temp), -1 for --ranked=join:JOB (each
	                               temp, whole, lands) */
	uint32_t ranked_nparts;     /* N */
	struct idx_manifest *grown; /* --watch's sender, --append: the rows its
	                               scans made that the index could not keep
	                               (files written as they were read), for the
	                               next round (idx_scan_opts.grown_hint) */
	const struct idx_manifest *known;   /* a ranked run's sender: rows from
	                               other nodes' indexes (idx_scan_opts.known) */
	char **fwd;                 /* the far side's options, --name[=value] */
	int nfwd;
};

/* The command line: rdcp's modes and the options of each. */
enum sync_mode { SYNC_MODE_COPY, SYNC_MODE_SCAN, SYNC_MODE_SERVER, SYNC_MODE_HELP,
                 SYNC_MODE_VERSION, SYNC_MODE_FAR,
                 SYNC_MODE_INDEX_LIST, SYNC_MODE_INDEX_PRUNE, SYNC_MODE_WITNESS };
struct sync_args {
	int mode;                   /* enum sync_mode; SYNC_MODE_FAR before parsing:
	                               the server's options from the HELLO */
	struct sync_opts o;
	struct idx_scan_opts so;    /* --scan's options */
	int prune_days;             /* --index-prune[=DAYS] */
	const char *witness;        /* --ranked-witness=OP:NAME (sync/ranks.c) */
	char **operands;
	int noperands;
	char why[256];              /* SYNC_MODE_FAR: what was wrong, for the client */
};
/* Parse argv into a (a->o's defaults set by the caller: sync_args_init).
 * Returns -1 to go on, else the exit code to leave with. With mode
 * SYNC_MODE_FAR, only options the client forwards are taken. */
void sync_args_init(struct sync_args *a);
int  sync_args_parse(int argc, char **argv, struct sync_args *a);
/* RD_EXIT_USAGE (said) for an option rdcp parses but cannot do yet */
int  sync_opts_check(const struct sync_opts *o);
void sync_opts_free(struct sync_opts *o);

/* Run a sync from the client side; returns the exit code (common/exitcode.h). */
int sync_client(struct sync_opts *o);
/* rdcp --ranked-witness=OP:NAME, the far side of a ranked run's check
 * that its DSTs are one tree: the DST path a line on stdin; OP make,
 * look or drop the file NAME (a temp file's name) in it. The exit code. */
int sync_ranked_witness(const char *arg);
/* The far side (rdcp --server): control channel on stdin/stdout. */
int sync_server(void);

#endif
