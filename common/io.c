#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <stdint.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/io.h"

int io_read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int io_write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int io_pread_full(int fd, void *buf, size_t len, uint64_t off, size_t *got)
{
	uint8_t *p = buf;
	*got = 0;
	while (*got < len) {
		ssize_t n = pread(fd, p + *got, len - *got, (off_t)(off + *got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;   /* end of file */
		*got += (size_t)n;
	}
	return 0;
}

int io_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* Wait until fd is ready for events, at most until the deadline. */
static int wait_ready(int fd, short events, long long deadline)
{
	for (;;) {
		long long left = deadline - clock_ms();
		if (left <= 0)
			return -ETIME;
		struct pollfd p = { fd, events, 0 };
		int n = poll(&p, 1, left > 1000000 ? 1000000 : (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

int io_xfer_timeout(int fd, void *buf, size_t len, int writing, int timeout_ms)
{
	if (timeout_ms <= 0)
		return writing ? io_write_full(fd, buf, len) : io_read_full(fd, buf, len);
	uint8_t *p = buf;
	long long deadline = clock_ms() + timeout_ms;   /* reset by every byte */
	while (len) {
		int rc = wait_ready(fd, writing ? POLLOUT : POLLIN, deadline);
		if (rc < 0)
			return rc;
		ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -errno;
		if (n == 0 && !writing)
			return -ECONNRESET;
		p += n;
		len -= (size_t)n;
		deadline = clock_ms() + timeout_ms;
	}
	return 0;
}

int io_open_read(int dfd, const char *name)
{
	int fl = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
	int fd = openat(dfd, name, fl | O_NOATIME);
	if (fd < 0 && errno == EPERM)   /* O_NOATIME needs ownership */
		fd = openat(dfd, name, fl);
	return fd;
}
