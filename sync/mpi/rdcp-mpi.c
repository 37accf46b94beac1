/*
 * rdcp-mpi.so: rdcp's MPI calls (sync/mpi/mpi.h), built with Open MPI's
 * mpi.h and linked with libmpi. rdcp dlopens it when it runs under mpirun
 * (sync/ranks.c); nothing else of rdcp links MPI.
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sync/mpi/mpi.h"

/* MPI counts are ints: larger buffers go in pieces of at most this */
#define PIECE ((size_t)1 << 30)

static int said(int err, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (err == MPI_SUCCESS)
		return 0;
	MPI_Error_string(err, msg, &len);
	fprintf(stderr, "rdcp: error: MPI_%s: %.*s\n", what, len, msg);
	return -1;
}

/* Every rank here, waited for asleep: MPI's own collectives spin while
 * they wait, and a rank done with its windows would take a core from
 * those still sending (tests: 2 cores, 4 ranks). */
static int barrier(void)
{
	MPI_Request req;
	int done = 0;
	long ns = 100000;
	if (said(MPI_Ibarrier(MPI_COMM_WORLD, &req), "Ibarrier") < 0)
		return -1;
	for (;;) {
		if (said(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "Test") < 0)
			return -1;
		if (done)
			return 0;
		nanosleep(&(struct timespec){ 0, ns }, NULL);
		if (ns < 20000000)   /* up to 20 ms between looks */
			ns += ns / 2;
	}
}

static int bcast(void *buf, size_t len, int root)
{
	if (barrier() < 0)
		return -1;
	for (size_t off = 0; off < len; off += PIECE) {
		size_t n = len - off < PIECE ? len - off : PIECE;
		if (said(MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD),
		         "Bcast") < 0)
			return -1;
	}
	return 0;
}

static int allgather(const void *mine, size_t len, void *all)
{
	if (len > INT_MAX || barrier() < 0)
		return -1;
	return said(MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE,
	                          MPI_COMM_WORLD), "Allgather");
}

/* Wait for n requests as barrier() does: asleep. */
static int wait_all(int n, MPI_Request *req)
{
	int done = 0;
	long ns = 100000;
	for (;;) {
		if (said(MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE), "Testall") < 0)
			return -1;
		if (done)
			return 0;
		nanosleep(&(struct timespec){ 0, ns }, NULL);
		if (ns < 20000000)
			ns += ns / 2;
	}
}

/* Pieces of at most PIECE bytes of len. */
static size_t pieces(size_t len)
{
	return (len + PIECE - 1) / PIECE;
}

static int exchange(void *const *to, const size_t *tlen, void **from, size_t *flen)
{
	int size = 0, me = 0, rc = -1;
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	uint64_t *out = calloc((size_t)size, sizeof *out), *in = calloc((size_t)size, sizeof *in);
	MPI_Request *req = NULL;
	for (int r = 0; r < size; r++)
		from[r] = NULL;
	if (!out || !in)
		goto done;
	for (int r = 0; r < size; r++)
		out[r] = tlen[r];
	if (barrier() < 0 || said(MPI_Alltoall(out, 1, MPI_UINT64_T, in, 1, MPI_UINT64_T,
	                                       MPI_COMM_WORLD), "Alltoall") < 0)
		goto done;
	size_t nreq = 0;
	for (int r = 0; r < size; r++)
		if (r != me)
			nreq += pieces(tlen[r]) + pieces(in[r]);
	if (!(req = malloc((nreq ? nreq : 1) * sizeof *req)))
		goto done;
	for (int r = 0; r < size; r++) {
		flen[r] = in[r];
		if (in[r] && !(from[r] = malloc(in[r])))
			goto done;
	}
	if (in[me])   /* (its own: in[me] is tlen[me]) */
		memcpy(from[me], to[me], in[me]);
	size_t k = 0;
	for (int r = 0; r < size; r++) {
		if (r == me)
			continue;
		for (size_t off = 0; off < in[r]; off += PIECE) {
			size_t n = in[r] - off < PIECE ? in[r] - off : PIECE;
			/* a request that cannot be posted ends the job here: those
			 * posted would write into buffers freed on the way out */
			if (said(MPI_Irecv((char *)from[r] + off, (int)n, MPI_BYTE, r, 35,
			                   MPI_COMM_WORLD, &req[k++]), "Irecv") < 0)
				MPI_Abort(MPI_COMM_WORLD, 12);
		}
		for (size_t off = 0; off < tlen[r]; off += PIECE) {
			size_t n = tlen[r] - off < PIECE ? tlen[r] - off : PIECE;
			if (said(MPI_Isend((const char *)to[r] + off, (int)n, MPI_BYTE, r, 35,
			                   MPI_COMM_WORLD, &req[k++]), "Isend") < 0)
				MPI_Abort(MPI_COMM_WORLD, 12);
		}
	}
	if (wait_all((int)k, req) < 0)
		MPI_Abort(MPI_COMM_WORLD, 12);   /* (as above) */
	rc = 0;
done:
	if (rc < 0)
		for (int r = 0; r < size; r++) {
			free(from[r]);
			from[r] = NULL;
		}
	free(req);
	free(out);
	free(in);
	return rc;
}

static void rk_abort(int code)
{
	MPI_Abort(MPI_COMM_WORLD, code);
}

static int finalize(void)
{
	return said(MPI_Finalize(), "Finalize");
}

int rdcp_mpi_open(struct rk_mpi *m);

int rdcp_mpi_open(struct rk_mpi *m)
{
	int provided = 0;
	/* only the main thread calls MPI; rdcp's own threads never do */
	if (said(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided), "Init_thread") < 0)
		return -1;
	/* errors come back to us (said, then the run fails) instead of
	 * aborting the job from inside a call */
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (said(MPI_Comm_rank(MPI_COMM_WORLD, &m->rank), "Comm_rank") < 0 ||
	    said(MPI_Comm_size(MPI_COMM_WORLD, &m->size), "Comm_size") < 0)
		return -1;
	m->abi = RDCP_MPI_ABI;
	m->barrier = barrier;
	m->bcast = bcast;
	m->allgather = allgather;
	m->exchange = exchange;
	m->abort = rk_abort;
	m->finalize = finalize;
	return 0;
}
