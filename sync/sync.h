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

#include "transport/transport.h"

/* --- a sync run: rdcp [OPTIONS] SRC DST --- */

enum {
	SYNC_F_RECURSIVE = 1 << 0,   /* -r: directories too */
	SYNC_F_MIRROR    = 1 << 1,   /* --sync: DST becomes a mirror of SRC's contents */
	SYNC_F_PERMS     = 1 << 2,   /* -a: permissions */
	SYNC_F_TIMES     = 1 << 3,   /* -a: modification times (ns) */
	SYNC_F_OWNER     = 1 << 4,   /* -a as root: owner and group */
	SYNC_F_HARDLINKS = 1 << 5,   /* -H */
	SYNC_F_DELETE    = 1 << 6,   /* --delete */
	SYNC_F_DRYRUN    = 1 << 7,   /* -n */
	SYNC_F_CHECKSUM  = 1 << 8,   /* -c: compare content hashes, not size+mtime */
	SYNC_F_ITEMIZE   = 1 << 9,   /* -v or -n: report each change */
	SYNC_F_ENCRYPT   = 1 << 10,  /* --encrypt: seal the data connection (TCP) */
	SYNC_F_NO_INDEX  = 1 << 11,  /* --no-index: neither side reads or writes one */
	SYNC_F_ALL       = (1 << 12) - 1,
};

/* --exclude / --include, in command-line order (rules in sync/filter.c) */
struct sync_rule {
	int include;
	const char *pattern;
};

struct sync_opts {
	const char *src, *dst;      /* local paths or [user@]host:path */
	const struct sync_rule *rules;
	int nrules;
	unsigned flags;             /* SYNC_F_* */
	int verbose;
	int progress;               /* --progress: a live line on a terminal */
	const char *rsh;            /* remote shell, default "ssh" */
	const char *rdcp_path;      /* the remote rdcp, default "rdcp" */
	const char *data_addr;      /* address for data connections (see rdcp.1) */
	int timeout;                /* --timeout: seconds without I/O before giving
	                               up (exit 30), 0: never; both sides */
	struct tp_opts tp;          /* kind, streams */
};

#define SYNC_TIMEOUT_MAX 1000000   /* seconds */

/* Run a sync from the client side; returns the exit code (common/exitcode.h). */
int sync_client(const struct sync_opts *o);
/* The far side (rdcp --server): control channel on stdin/stdout. */
int sync_server(void);

#endif
