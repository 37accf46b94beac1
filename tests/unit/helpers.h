/* Small helpers shared by the unit tests (header-only, test code only). */
#ifndef RDCP_TEST_HELPERS_H
#define RDCP_TEST_HELPERS_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline const char *tmpdir(void)
{
	const char *t = getenv("TMPDIR");
	return t && *t ? t : "/tmp";
}

static inline void rm_rf(const char *dir)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", dir);
}

/* Write a small file relative to dfd; aborts the test binary on failure. */
static inline void put_file(int dfd, const char *name, const char *content)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	size_t n = strlen(content);
	if (fd < 0 || write(fd, content, n) != (ssize_t)n) {
		perror(name);
		abort();
	}
	close(fd);
}

/* A file of size bytes of deterministic pseudo-random data. */
static inline void put_big(int dfd, const char *name, uint64_t size, uint64_t seed)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	static uint64_t buf[1 << 15];
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	if (fd < 0)
		abort();
	for (uint64_t done = 0; done < size;) {
		for (size_t i = 0; i < sizeof buf / 8; i++) {
			x ^= x << 13; x ^= x >> 7; x ^= x << 17;
			buf[i] = x;
		}
		size_t n = size - done < sizeof buf ? (size_t)(size - done) : sizeof buf;
		if (write(fd, buf, n) != (ssize_t)n)
			abort();
		done += n;
	}
	close(fd);
}

static inline uint8_t *slurp(const char *dir, const char *name, size_t size)
{
	char p[600];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	uint8_t *b = malloc(size ? size : 1);
	int fd = open(p, O_RDONLY);
	if (fd < 0 || !b || read(fd, b, size) != (ssize_t)size)
		abort();
	close(fd);
	return b;
}

/* Wait past the filesystem clock tick so the last writes are not "racy"
 * for the index (docs/index.md): a real user never re-scans within 4 ms. */
static inline void settle(void)
{
	struct timespec ts = { 0, 30 * 1000 * 1000 };
	nanosleep(&ts, NULL);
}

#endif
