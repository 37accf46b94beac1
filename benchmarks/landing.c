/*
 * What landing a file whole costs the kernel, against creating it in place
 * (benchmarks/cost.py, issue 33): N files of SIZE bytes in 200 directories
 * under DIR, each either created under its name and written (what tar x
 * does: a reader may see it half-written) or made unnamed (O_TMPFILE),
 * written and linked in whole (what rdcp's receiver does). Prints the CPU
 * seconds (user + system) of the loop.
 *
 *   landing DIR N SIZE plain|tmpfile
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define NDIRS 200

static double cpu_seconds(void)
{
	struct rusage r;
	getrusage(RUSAGE_SELF, &r);
	return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
	       (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv)
{
	if (argc != 5 || (strcmp(argv[4], "plain") && strcmp(argv[4], "tmpfile"))) {
		fprintf(stderr, "usage: landing DIR N SIZE plain|tmpfile\n");
		return 2;
	}
	long n = atol(argv[2]);
	size_t size = (size_t)atol(argv[3]);
	int tmpfile = !strcmp(argv[4], "tmpfile");
	char *buf = malloc(size ? size : 1);
	int dirs[NDIRS], top;
	if (!buf || mkdir(argv[1], 0755) < 0 || (top = open(argv[1], O_RDONLY | O_DIRECTORY)) < 0) {
		perror(argv[1]);
		return 1;
	}
	memset(buf, 'x', size);
	for (int d = 0; d < NDIRS; d++) {
		char name[32];
		snprintf(name, sizeof name, "d%03d", d);
		if (mkdirat(top, name, 0755) < 0 ||
		    (dirs[d] = openat(top, name, O_RDONLY | O_DIRECTORY)) < 0) {
			perror(name);
			return 1;
		}
	}
	double t0 = cpu_seconds();
	for (long i = 0; i < n; i++) {
		char name[32];
		int dfd = dirs[i % NDIRS], fd;
		snprintf(name, sizeof name, "file%06ld", i);
		fd = tmpfile ? openat(dfd, ".", O_WRONLY | O_TMPFILE | O_CLOEXEC, 0644)
		             : openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, buf, size) != (ssize_t)size ||
		    (tmpfile && linkat(fd, "", dfd, name, AT_EMPTY_PATH) < 0) || close(fd) < 0) {
			perror(name);
			return 1;
		}
	}
	printf("%.3f\n", cpu_seconds() - t0);
	return 0;
}
