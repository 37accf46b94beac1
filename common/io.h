/* Whole-buffer reads and writes on blocking fds, retrying short transfers
 * and EINTR. Both return 0 or a negative errno; a read that meets end of
 * file first returns -ECONNRESET (for a stream, the peer went away). */
#ifndef RDCP_COMMON_IO_H
#define RDCP_COMMON_IO_H

#include <stddef.h>

int io_read_full(int fd, void *buf, size_t len);
int io_write_full(int fd, const void *buf, size_t len);

#endif
