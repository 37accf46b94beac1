/* Exit codes of every rdcp program; documented in docs/rdcp.1. They follow
 * rsync's numbering where rsync has the same meaning. */
#ifndef RDCP_COMMON_EXITCODE_H
#define RDCP_COMMON_EXITCODE_H

enum {
	RD_EXIT_OK       = 0,
	RD_EXIT_USAGE    = 1,   /* bad command line */
	RD_EXIT_INCOMPAT = 2,   /* the far side does not speak our protocol: an
	                           unclean remote shell, another version (rsync's
	                           RERR_PROTOCOL) */
	RD_EXIT_SELECT   = 3,   /* source or destination unusable */
	RD_EXIT_START    = 5,   /* could not start the remote side */
	RD_EXIT_LOCKED   = 7,   /* another rdcp is in the way (sync/lock.c): refused */
	RD_EXIT_CONN     = 10,  /* connection failed or lost */
	RD_EXIT_FILEIO   = 11,  /* file I/O error */
	RD_EXIT_PROTO    = 12,  /* protocol error: the peer sent garbage */
	RD_EXIT_AUTH     = 15,  /* data connection failed authentication */
	RD_EXIT_NORDMA   = 16,  /* RDMA asked for but not available */
	RD_EXIT_SIGNAL   = 20,  /* interrupted by a signal */
	RD_EXIT_PARTIAL  = 23,  /* partial transfer: some entries failed */
	RD_EXIT_VANISHED = 24,  /* partial transfer: source files vanished */
	RD_EXIT_DEL_LIMIT = 25, /* --max-delete stopped deletions */
	RD_EXIT_TIMEOUT  = 30,  /* --timeout: no I/O for that long (rdcp's control
	                           channel, rdsend/rdrecv's data session) */
};

/* The exit code for a failure that came back as a negative errno rc (0 for
 * rc >= 0): authentication, RDMA, protocol, another protocol version
 * (-EPROTONOSUPPORT), signal, connection, inactivity (-ETIME); anything
 * else is file I/O (ours, or the peer's reported to us). */
int rd_exit_code(int rc);

#endif
