/*
 * The few MPI calls a ranked run makes (sync/ranks.c), behind a
 * table that rdcp-mpi.so fills (sync/mpi/rdcp-mpi.c, linked with
 * Open MPI). rdcp loads that object only when mpirun started it, so a
 * plain rdcp needs no MPI library to run, as libarchive is loaded on
 * first use.
 */
#ifndef RDCP_SYNC_RANKS_MPI_H
#define RDCP_SYNC_RANKS_MPI_H

#include <stddef.h>

#define RDCP_MPI_ABI 2

struct rk_mpi {
	int abi;            /* RDCP_MPI_ABI: the shim's, checked on load */
	int rank, size;
	/* each 0, or -1 when MPI failed (its error class said on stderr) */
	int (*barrier)(void);
	int (*bcast)(void *buf, size_t len, int root);            /* bytes */
	int (*allgather)(const void *mine, size_t len, void *all); /* len each */
	/* every rank's bytes to each rank (to[r], tlen[r] bytes for rank r;
	 * its own included) for theirs: from[r] (malloc'd, NULL for none),
	 * flen[r] bytes from rank r */
	int (*exchange)(void *const *to, const size_t *tlen, void **from, size_t *flen);
	void (*abort)(int code);   /* every rank ends: no return */
	int (*finalize)(void);
};

/* The shim's one symbol: MPI initialized (main thread calls only), m
 * filled. 0 or -1 (said). */
typedef int rk_mpi_open_fn(struct rk_mpi *m);
#define RDCP_MPI_OPEN "rdcp_mpi_open"

#endif
