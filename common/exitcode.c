/* From an errno-style result to the documented exit code (common/exitcode.h). */
#include <errno.h>

#include "common/exitcode.h"

int rd_exit_code(int rc)
{
	if (rc >= 0)
		return RD_EXIT_OK;
	switch (-rc) {
	case EACCES: return RD_EXIT_AUTH;
	case ENODEV: return RD_EXIT_NORDMA;
	case EPROTO: return RD_EXIT_PROTO;
	case EPROTONOSUPPORT: return RD_EXIT_INCOMPAT;
	case EINTR: case ECANCELED: return RD_EXIT_SIGNAL;
	case ETIME: return RD_EXIT_TIMEOUT;
	case ECONNREFUSED: case ECONNRESET: case ETIMEDOUT: case EHOSTUNREACH:
	case ENETUNREACH: case EPIPE: case ECONNABORTED:
		return RD_EXIT_CONN;
	default:
		return RD_EXIT_FILEIO;   /* the peer's file I/O error, reported to us */
	}
}
