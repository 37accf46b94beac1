/* Unit tests for index/cache.c: a prune never removes an index that another
 * process holds, and a hold taken while a prune removes the file ends up on
 * the new file, not the removed one. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "index/idx_int.h"
#include "tests/unit/helpers.h"

static char dir[256], tree[300];

/* One cache directory for the whole binary: idx_cache_dir() decides once
 * per process. */
static int group_setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "%s/rdcp-cache-XXXXXX", tmpdir());
	if (!mkdtemp(dir))
		return -1;
	char cache[300];
	snprintf(cache, sizeof cache, "%s/cache", dir);
	snprintf(tree, sizeof tree, "%s/tree", dir);
	mkdir(tree, 0755);
	setenv("XDG_CACHE_HOME", cache, 1);
	return idx_cache_dir(NULL) ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	rm_rf(dir);
	return 0;
}

/* Wait for one byte on fd (or EOF). */
static void wait_byte(int fd)
{
	char c;
	while (read(fd, &c, 1) < 0 && errno == EINTR)
		;
}

static void test_prune_leaves_a_held_index(void **state)
{
	(void)state;
	char *path = idx_default_path(tree);
	assert_non_null(path);
	int up[2], down[2];
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {   /* another rdcp: holds the index until told */
		close(down[1]);   /* so a parent that fails and exits ends us */
		struct idx_db *db;
		char *real = realpath(tree, NULL);
		int rc = idx_db_open(path, real, &db);
		if (write(up[1], rc == 0 ? "y" : "n", 1) != 1)
			_exit(2);
		wait_byte(down[0]);
		idx_db_close(db);
		_exit(rc == 0 ? 0 : 1);
	}
	char c = 0;
	assert_int_equal(read(up[0], &c, 1), 1);
	assert_int_equal(c, 'y');
	struct idx_prune_result res;
	/* 0 days: everything that is not held goes */
	assert_int_equal(idx_cache_prune(0, NULL, &res), 0);
	assert_int_equal(res.busy, 1);
	assert_int_equal(res.removed, 0);
	assert_int_equal(access(path, F_OK), 0);
	/* the holder leaves: now it goes */
	assert_int_equal(write(down[1], "x", 1), 1);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(idx_cache_prune(0, NULL, &res), 0);
	assert_int_equal(res.removed, 1);
	assert_true(res.bytes > 0);
	assert_int_equal(access(path, F_OK), -1);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
	free(path);
}

/* This process's own held index is never even opened by its own prune (it
 * would drop SQLite's locks on it): it is counted as in use. */
static void test_prune_skips_own_index(void **state)
{
	(void)state;
	char *path = idx_default_path(tree), *real = realpath(tree, NULL);
	struct idx_db *db;
	struct idx_prune_result res;
	assert_int_equal(idx_db_open(path, real, &db), 0);
	assert_int_equal(idx_cache_prune(0, NULL, &res), 0);
	assert_int_equal(res.busy, 1);
	assert_int_equal(res.removed, 0);
	idx_db_close(db);
	assert_int_equal(idx_cache_prune(0, NULL, &res), 0);
	assert_int_equal(res.removed, 1);
	free(path);
	free(real);
}

/* 1 once /proc/locks shows a process waiting for a lock on inode ino
 * (a line "N: -> OFDLCK ... maj:min:ino ..."), 0 after 10 s. */
static int waiting_on(unsigned long ino)
{
	char want[32], line[256];
	snprintf(want, sizeof want, ":%lu ", ino);
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen("/proc/locks", "r");
		int found = 0;
		while (f && !found && fgets(line, sizeof line, f))
			found = strstr(line, "->") && strstr(line, want);
		if (f)
			fclose(f);
		if (found)
			return 1;
		usleep(10000);
	}
	return 0;
}

/* A run that opens the index while a prune removes it: its hold waits for
 * the prune, sees the file it opened is gone, and holds the new one. */
static void test_hold_racing_a_prune_gets_the_new_file(void **state)
{
	(void)state;
	char path[400];
	snprintf(path, sizeof path, "%s/race.db", dir);
	int fd = open(path, O_RDWR | O_CREAT, 0600);
	assert_true(fd >= 0);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
	                    .l_start = (off_t)1 << 40, .l_len = 1 };
	assert_int_equal(fcntl(fd, F_OFD_SETLK, &fl), 0);   /* the prune's lock */
	struct stat old;
	assert_int_equal(fstat(fd, &old), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fd);   /* the lock belongs to the parent's open file */
		int h = idx_hold(path);   /* blocks behind the prune */
		/* held: the file at path, not the removed one (whose inode
		 * number cannot be reused while we have it open) */
		struct stat a, b;
		int same = h >= 0 && fstat(h, &a) == 0 && stat(path, &b) == 0 &&
		           a.st_ino == b.st_ino;
		_exit(same ? 0 : 1);
	}
	assert_true(waiting_on(old.st_ino));   /* the child is in idx_hold() */
	assert_int_equal(unlink(path), 0);
	close(fd);        /* the prune is done */
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(access(path, F_OK), 0);   /* the child made a new one */
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prune_leaves_a_held_index),
		cmocka_unit_test(test_prune_skips_own_index),
		cmocka_unit_test(test_hold_racing_a_prune_gets_the_new_file),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
