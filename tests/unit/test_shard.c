/* Unit tests for index/shard.c: the rows of one directory and no more,
 * rows carried as bytes and refused when they are not sound, another
 * index's rows kept where they are of a later version (and a row dropped
 * only with its file), and a scan that takes a known row's digests
 * instead of reading the file. counts() and idx_forget() open the index
 * a second time while d holds it: harmless here, one process, one
 * thread, no scan between (the product opens it once a step). */
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
#include <unistd.h>
#include <cmocka.h>

#include "index/idx_int.h"
#include "tests/unit/helpers.h"

static char dir[256], tree[300];

static int group_setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "%s/rdcp-shard-XXXXXX", tmpdir());
	if (!mkdtemp(dir))
		return -1;
	char cache[300];
	snprintf(cache, sizeof cache, "%s/cache", dir);
	snprintf(tree, sizeof tree, "%s/tree", dir);
	setenv("XDG_CACHE_HOME", cache, 1);
	mkdir(tree, 0755);
	int t = open(tree, O_RDONLY | O_DIRECTORY);
	mkdirat(t, "a", 0755);
	mkdirat(t, "a/sub", 0755);
	mkdirat(t, "a/sub/deeper", 0755);
	mkdirat(t, "a-b", 0755);   /* its rows sort next to a's */
	put_big(t, "a/f1", 100000, 1);
	put_big(t, "a/f2", 5 << 20, 2);   /* two chunks */
	put_big(t, "a/sub/g", 1000, 3);
	put_big(t, "a/sub/deeper/k", 1000, 3);
	/* names that sort around a/sub's rows ("a/sub/" .. "a/sub0") */
	put_big(t, "a/sub-x", 1000, 6);
	put_big(t, "a/sub.x", 1000, 7);
	put_big(t, "a/sub0", 1000, 8);
	put_big(t, "a/z", 1000, 9);
	put_big(t, "a/gone", 1000, 10);
	put_big(t, "a-b/h", 1000, 4);
	put_big(t, "top", 1000, 5);
	symlinkat("f1", t, "a/link");
	close(t);
	usleep(20000);   /* past the clock tick of the writes */
	struct idx_scan_opts o = { .threads = 1 };
	struct idx_manifest m = { 0 };
	struct idx_stats st;
	int rc = idx_scan(tree, &o, &m, &st);
	idx_manifest_free(&m);
	return rc == 0 && st.stored ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	rm_rf(dir);
	return 0;
}

static void test_rows_of_one_directory(void **state)
{
	(void)state;
	struct idx_dirs *d;
	assert_int_equal(idx_dirs_open(tree, &d), 0);
	assert_non_null(d);
	assert_true(idx_dirs_stamp(d) > 0);
	struct idx_manifest m = { 0 };
	uint64_t dg = 0, dg2 = 1;
	assert_int_equal(idx_dirs_rows(d, "a", &m, &dg), 0);
	/* the regular files directly in a: not a/sub/g, not a-b/h, no link */
	assert_int_equal(m.n, 7);
	idx_manifest_sort(&m);
	static const char *const in_a[] = { "a/f1", "a/f2", "a/gone", "a/sub-x", "a/sub.x",
	                                    "a/sub0", "a/z" };
	for (size_t i = 0; i < 7; i++)
		assert_string_equal(m.e[i].path, in_a[i]);
	assert_int_equal(m.e[1].nchunks, 2);
	assert_true(dg != 0);
	assert_int_equal(idx_dirs_rows(d, "a", NULL, &dg2), 0);
	assert_true(dg == dg2);
	idx_manifest_free(&m);
	assert_int_equal(idx_dirs_rows(d, "", &m, &dg), 0);
	assert_int_equal(m.n, 1);
	assert_string_equal(m.e[0].path, "top");
	idx_manifest_free(&m);
	assert_int_equal(idx_dirs_rows(d, "a/sub", &m, &dg2), 0);
	assert_int_equal(m.n, 1);
	assert_string_equal(m.e[0].path, "a/sub/g");
	assert_true(dg2 != dg);
	idx_manifest_free(&m);
	assert_int_equal(idx_dirs_rows(d, "nowhere", &m, &dg), 0);
	assert_int_equal(m.n, 0);
	assert_true(dg == 0);
	idx_dirs_close(d);
}

static void test_rows_as_bytes(void **state)
{
	(void)state;
	struct idx_dirs *d;
	assert_int_equal(idx_dirs_open(tree, &d), 0);
	struct idx_manifest m = { 0 }, back = { 0 };
	uint64_t dg;
	assert_int_equal(idx_dirs_rows(d, "a", &m, &dg), 0);
	idx_dirs_close(d);
	uint8_t *b;
	size_t len;
	assert_int_equal(idx_rows_encode(m.e, m.n, &b, &len), 0);
	assert_int_equal(idx_rows_decode(b, len, &back), 0);
	assert_int_equal(back.n, m.n);
	for (size_t i = 0; i < m.n; i++) {
		assert_string_equal(back.e[i].path, m.e[i].path);
		assert_true(back.e[i].size == m.e[i].size && back.e[i].ino == m.e[i].ino &&
		            back.e[i].ctime_ns == m.e[i].ctime_ns &&
		            back.e[i].mtime_ns == m.e[i].mtime_ns);
		assert_memory_equal(back.e[i].hash, m.e[i].hash, IDX_HASH_LEN);
		assert_int_equal(back.e[i].nchunks, m.e[i].nchunks);
	}
	idx_manifest_free(&back);
	/* every cut short is refused, none read past its end */
	for (size_t cut = 0; cut < len; cut++) {
		uint8_t *c = malloc(cut ? cut : 1);
		memcpy(c, b, cut);
		assert_int_equal(idx_rows_decode(c, cut, &back), -EBADMSG);
		idx_manifest_free(&back);
		free(c);
	}
	/* a count that lies; a path that climbs out */
	b[0] = 0x7f;
	assert_int_equal(idx_rows_decode(b, len, &back), -EBADMSG);
	idx_manifest_free(&back);
	b[0] = 0;
	memcpy(b + 6, "..", 2);   /* "a/f1" -> "../1" */
	b[8] = '/';
	assert_int_equal(idx_rows_decode(b, len, &back), -EBADMSG);
	idx_manifest_free(&back);
	free(b);
	/* a row of another type, or with digests its size does not have */
	struct idx_entry e = m.e[1];
	e.nchunks = 1;
	assert_int_equal(idx_rows_encode(&e, 1, &b, &len), -EINVAL);
	e = m.e[0];
	e.type = IDX_DIR;
	assert_int_equal(idx_rows_encode(&e, 1, &b, &len), -EINVAL);
	idx_manifest_free(&m);
}

/* The index's row count, and what its meta says it is. */
static void counts(int64_t *rows, int64_t *meta)
{
	struct idx_scan_opts o = { 0 };
	struct idx_db *db;
	assert_int_equal(idx_db_open_tree(tree, &o, &db), 0);
	assert_int_equal(idx_db_int(idx_db_handle(db), "SELECT count(*) FROM entries", rows),
	                 SQLITE_OK);
	assert_int_equal(idx_db_int(idx_db_handle(db), "SELECT value FROM meta WHERE "
	                            "key='count'", meta), SQLITE_OK);
	idx_db_close(db);
}

static const struct idx_entry *row_of(struct idx_dirs *d, const char *in, const char *path,
                                      struct idx_manifest *m)
{
	uint64_t dg;
	idx_manifest_free(m);
	assert_int_equal(idx_dirs_rows(d, in, m, &dg), 0);
	idx_manifest_sort(m);
	return idx_manifest_find(m, path);
}

static void test_put_keeps_the_later_version(void **state)
{
	(void)state;
	struct idx_dirs *d;
	assert_int_equal(idx_dirs_open(tree, &d), 0);
	struct idx_manifest m = { 0 }, now = { 0 };
	uint64_t dg, dg2;
	int64_t rows, meta;
	counts(&rows, &meta);
	assert_true(rows == meta);
	assert_int_equal(idx_dirs_rows(d, "a", &m, &dg), 0);
	idx_manifest_sort(&m);
	int64_t stamp = idx_dirs_stamp(d);
	const struct idx_entry *f2 = idx_manifest_find(&m, "a/f2");
	/* an older version of f2 does not take the place of the one here; a
	 * row of another directory is not taken */
	struct idx_entry two[2] = { *f2, *f2 };
	two[0].ctime_ns--;
	two[0].hash[0] ^= 1;
	two[1].path = "top2";
	assert_int_equal(idx_dirs_put(d, "a", two, 2, stamp), 0);
	assert_memory_equal(row_of(d, "a", "a/f2", &now)->hash, f2->hash, IDX_HASH_LEN);
	assert_null(row_of(d, "", "top2", &now));
	/* rows the giver did not name stay while their files are there; the
	 * row of a file gone from the tree goes */
	char gone[400];
	snprintf(gone, sizeof gone, "%s/a/gone", tree);
	assert_int_equal(unlink(gone), 0);
	assert_int_equal(idx_dirs_put(d, "a", NULL, 0, stamp), 0);
	idx_manifest_free(&now);
	assert_int_equal(idx_dirs_rows(d, "a", &now, &dg2), 0);
	assert_int_equal(now.n, 6);
	assert_null(row_of(d, "a", "a/gone", &now));
	/* a later version takes its place, unless its giver could not vouch
	 * for it (changed in or after its stamp's tick) */
	struct idx_entry late = *f2;
	late.ctime_ns = stamp;
	late.hash[0] ^= 1;
	assert_int_equal(idx_dirs_put(d, "a", &late, 1, stamp), 0);
	assert_memory_equal(row_of(d, "a", "a/f2", &now)->hash, f2->hash, IDX_HASH_LEN);
	late.ctime_ns = f2->ctime_ns + 1;
	assert_int_equal(idx_dirs_put(d, "a", &late, 1, stamp), 0);
	assert_memory_equal(row_of(d, "a", "a/f2", &now)->hash, late.hash, IDX_HASH_LEN);
	/* f2 back as it is */
	assert_int_equal(idx_forget(tree, &(struct idx_scan_opts){ 0 }, "a/f2"), 0);
	assert_int_equal(idx_dirs_put(d, "a", f2, 1, stamp), 0);
	assert_memory_equal(row_of(d, "a", "a/f2", &now)->hash, f2->hash, IDX_HASH_LEN);
	idx_manifest_free(&now);
	idx_dirs_close(d);
	idx_manifest_free(&m);
	/* (idx_forget leaves the count as it was: one more row than there is) */
	counts(&rows, &meta);
	assert_true(rows == meta - 1);
}

static void test_scan_takes_known_rows(void **state)
{
	(void)state;
	struct idx_dirs *d;
	assert_int_equal(idx_dirs_open(tree, &d), 0);
	struct idx_manifest known = { 0 }, m = { 0 };
	uint64_t dg;
	assert_int_equal(idx_dirs_rows(d, "a", &known, &dg), 0);
	idx_dirs_close(d);
	idx_manifest_sort(&known);
	/* f1's and f2's rows gone from the index: a scan would read both */
	struct idx_scan_opts none = { 0 };
	assert_int_equal(idx_forget(tree, &none, "a/f1"), 0);
	assert_int_equal(idx_forget(tree, &none, "a/f2"), 0);
	/* one known row that is of another version: read */
	known.e[0].mtime_ns--;
	struct idx_scan_opts o = { .threads = 1, .known = &known };
	struct idx_stats st;
	assert_int_equal(idx_scan(tree, &o, &m, &st), 0);
	assert_int_equal(st.hashed, 1);
	assert_int_equal(st.hashed_bytes, 100000);
	const struct idx_entry *f2 = idx_manifest_find(&m, "a/f2");
	assert_non_null(f2);
	assert_memory_equal(f2->hash, known.e[1].hash, IDX_HASH_LEN);
	idx_manifest_free(&m);
	idx_manifest_free(&known);
	/* and the scan stored them: the next reads nothing */
	o.known = NULL;
	assert_int_equal(idx_scan(tree, &o, &m, &st), 0);
	assert_int_equal(st.hashed, 0);
	idx_manifest_free(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows_of_one_directory),
		cmocka_unit_test(test_rows_as_bytes),
		cmocka_unit_test(test_put_keeps_the_later_version),
		cmocka_unit_test(test_scan_takes_known_rows),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
