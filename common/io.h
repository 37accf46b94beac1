/* Whole-buffer reads and writes, retrying short transfers
 * and EINTR. Both return 0 or a negative errno; a read that meets end of
 * file first returns -ECONNRESET (for a stream, the peer went away). */
#ifndef RDCP_COMMON_IO_H
#define RDCP_COMMON_IO_H

#include <stddef.h>
#include <stdint.h>

int io_read_full(int fd, void *buf, size_t len);
int io_write_full(int fd, const void *buf, size_t len);
/* len bytes at off of fd into buf (pread), retrying short reads and EINTR;
 * *got says how many came: fewer than len only at end of file. 0 or a
 * negative errno (*got: what came before the error). */
int io_pread_full(int fd, void *buf, size_t len, uint64_t off, size_t *got);
/* All of buf at off of fd (pwrite); a write of nothing is -EIO. */
int io_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);
/* name in dfd opened to read what is there, as a scan reads a file: not
 * followed if a link, without a wait (a FIFO does not hang it: the caller
 * checks the type), its atime left where the owner allows. fd or -1. */
int io_open_read(int dfd, const char *name);
/* The same with an inactivity limit: -ETIME when no byte moves for
 * timeout_ms (0: none). For a write to be bounded, fd must be O_NONBLOCK. */
int io_xfer_timeout(int fd, void *buf, size_t len, int writing, int timeout_ms);

#endif
