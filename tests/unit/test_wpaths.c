/* sync/wpaths.c: the watch's sets of paths, tidied and cut to ancestors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sync/watch_int.h"

/* A malloc'd array of copies of the n strings in s. */
static char **paths(const char *const *s, size_t n)
{
	char **v = malloc(n * sizeof *v);
	assert_non_null(v);
	for (size_t i = 0; i < n; i++)
		assert_non_null(v[i] = strdup(s[i]));
	return v;
}

static void expect(char **v, size_t n, const char *const *want, size_t nwant)
{
	assert_int_equal(n, nwant);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(v[i], want[i]);
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void test_tidy(void **state)
{
	(void)state;
	const char *in[] = { "a-b", "a/b/c", "a/b", "b", "a/b", "ab/c", "a/bc" };
	const char *out[] = { "a/b", "a/bc", "a-b", "ab/c", "b" };
	char **v = paths(in, 7);
	expect(v, watch_paths_tidy(v, 7), out, 5);
	const char *root[] = { "x/y", "", "z" };
	v = paths(root, 3);
	expect(v, watch_paths_tidy(v, 3), (const char *const[]){ "" }, 1);
}

/* A storm in one deep directory is cut to that directory; a path that
 * was already shallow stays as it is. */
static void test_cap_deepest_first(void **state)
{
	(void)state;
	char **v = malloc(203 * sizeof *v);
	size_t n = 0;
	assert_non_null(v);
	v[n++] = strdup("top");
	v[n++] = strdup("x/y");
	for (int i = 0; i < 200; i++) {
		char b[64];
		snprintf(b, sizeof b, "d/e/storm/f%03d", i);
		v[n++] = strdup(b);
	}
	v[n++] = strdup("d/e/other");
	n = watch_paths_cap(v, watch_paths_tidy(v, n), 10);
	expect(v, n, (const char *const[]){ "d/e/other", "d/e/storm", "top", "x/y" }, 4);
}

/* Cut as deep as the cap allows: 3 directories of 3 files, cap 3. */
static void test_cap_levels(void **state)
{
	(void)state;
	const char *in[] = { "p/a/1", "p/a/2", "p/a/3", "p/b/1", "p/b/2", "p/b/3",
	                     "p/c/1", "p/c/2", "p/c/3" };
	char **v = paths(in, 9);
	size_t n = watch_paths_cap(v, watch_paths_tidy(v, 9), 3);
	expect(v, n, (const char *const[]){ "p/a", "p/b", "p/c" }, 3);
	v = paths(in, 9);
	n = watch_paths_cap(v, watch_paths_tidy(v, 9), 2);
	expect(v, n, (const char *const[]){ "p" }, 1);
	const char *tops[] = { "a", "b", "c" };
	v = paths(tops, 3);
	n = watch_paths_cap(v, watch_paths_tidy(v, 3), 2);
	expect(v, n, (const char *const[]){ "" }, 1);   /* the whole tree */
}

static void test_pset_cap(void **state)
{
	(void)state;
	struct pset p = { 0 };
	char b[64];
	for (int i = 0; i < 1000; i++) {
		snprintf(b, sizeof b, "hot/d%d/f%d", i % 4, i);
		assert_int_equal(watch_pset_add(&p, b), 0);
	}
	assert_int_equal(watch_pset_add(&p, "cold"), 0);
	assert_int_equal(watch_pset_cap(&p, 100), 0);
	size_t n;
	char **v = watch_pset_take(&p, &n);
	n = watch_paths_tidy(v, n);
	expect(v, n, (const char *const[]){ "cold", "hot/d0", "hot/d1", "hot/d2", "hot/d3" }, 5);
	assert_int_equal(p.n, 0);
	assert_int_equal(watch_pset_add(&p, "a"), 0);
	assert_int_equal(watch_pset_add(&p, "b"), 0);
	assert_int_equal(watch_pset_cap(&p, 1), 1);   /* the root alone */
	watch_pset_clear(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tidy),
		cmocka_unit_test(test_cap_deepest_first),
		cmocka_unit_test(test_cap_levels),
		cmocka_unit_test(test_pset_cap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
