/* Manifest wire encoding: round trip, and hostile input from a peer. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "index/index.h"
#include "tests/unit/helpers.h"

static void assert_same(const struct idx_manifest *a, const struct idx_manifest *b)
{
	assert_int_equal(a->n, b->n);
	for (size_t i = 0; i < a->n; i++) {
		const struct idx_entry *x = &a->e[i], *y = &b->e[i];
		assert_string_equal(x->path, y->path);
		assert_int_equal(x->type, y->type);
		assert_int_equal(x->mode, y->mode);
		assert_int_equal(x->uid, y->uid);
		assert_int_equal(x->gid, y->gid);
		assert_int_equal(x->mtime_ns, y->mtime_ns);
		assert_int_equal(x->hlink, y->hlink);
		if (x->type == IDX_REG) {
			assert_int_equal(x->size, y->size);
			assert_memory_equal(x->hash, y->hash, IDX_HASH_LEN);
			assert_int_equal(x->nchunks, y->nchunks);
			if (x->nchunks)
				assert_memory_equal(x->chunks, y->chunks, x->nchunks * IDX_HASH_LEN);
		}
		if (x->type == IDX_LNK)
			assert_string_equal(x->link, y->link);
	}
}

static void test_roundtrip_real_tree(void **state)
{
	(void)state;
	char dir[256];
	snprintf(dir, sizeof dir, "%s/rdcp-mf-XXXXXX", tmpdir());
	assert_non_null(mkdtemp(dir));
	int d = open(dir, O_RDONLY | O_DIRECTORY);
	mkdirat(d, "sub dir", 0700);
	put_file(d, "sub dir/new\nline", "x");
	put_file(d, "a", "hello");
	assert_int_equal(linkat(d, "a", d, "sub dir/a-link", 0), 0);
	assert_int_equal(symlinkat("../a", d, "sub dir/sym"), 0);
	put_big(d, "big", IDX_CHUNK_SIZE * 3 + 1, 9);
	mkfifoat(d, "fifo", 0600);
	close(d);

	struct idx_manifest m = { 0 }, back = { 0 };
	struct idx_stats st;
	struct idx_scan_opts o = { .no_index = 1 };
	assert_int_equal(idx_scan(dir, &o, &m, &st), 0);
	uint8_t *buf;
	size_t len;
	assert_int_equal(idx_manifest_encode(&m, &buf, &len), 0);
	assert_int_equal(idx_manifest_decode(buf, len, &back, NULL), 0);
	assert_same(&m, &back);
	assert_int_equal(idx_manifest_find(&back, "big")->nchunks, 4);
	assert_int_not_equal(idx_manifest_find(&back, "a")->hlink, 0);

	/* every truncation is refused, never read past */
	for (size_t cut = 0; cut < len; cut++) {
		struct idx_manifest t = { 0 };
		uint8_t *copy = malloc(cut ? cut : 1);
		memcpy(copy, buf, cut);
		assert_int_equal(idx_manifest_decode(copy, cut, &t, NULL), -EBADMSG);
		assert_int_equal(t.n, 0);
		free(copy);
	}
	free(buf);
	idx_manifest_free(&m);
	idx_manifest_free(&back);
	rm_rf(dir);
}

/* Encode a manifest whose one entry has the given path and decode it. */
static int decode_path(const char *path, uint8_t type)
{
	struct idx_manifest m = { 0 }, back = { 0 };
	idx_manifest_add(&m, &(struct idx_entry){ .path = "", .type = IDX_DIR });
	idx_manifest_add(&m, &(struct idx_entry){ .path = (char *)path, .type = type,
	                                          .link = type == IDX_LNK ? "t" : NULL });
	uint8_t *buf;
	size_t len;
	assert_int_equal(idx_manifest_encode(&m, &buf, &len), 0);
	int rc = idx_manifest_decode(buf, len, &back, NULL);
	free(buf);
	idx_manifest_free(&m);
	idx_manifest_free(&back);
	return rc;
}

static void test_hostile_paths(void **state)
{
	(void)state;
	const char *bad[] = { "/etc/passwd", "..", "../x", "a/../../x", "a/..", ".", "./a",
	                      "a//b", "a/", "a/./b", "" };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		if (decode_path(bad[i], IDX_REG) != -EBADMSG)
			fail_msg("path '%s' accepted", bad[i]);
	char longname[300];
	memset(longname, 'x', 256);
	longname[256] = '\0';
	assert_int_equal(decode_path(longname, IDX_REG), -EBADMSG);
	assert_int_equal(decode_path("ok/..dots../x", IDX_REG), 0);
	assert_int_equal(decode_path("...", IDX_LNK), 0);
}

/* A valid encoding to corrupt field by field. Layout (docs/protocol.md):
 * header 20 bytes; root entry: type flags pre slen (6) mode uid gid mtime (20);
 * entry "f": 6 + 1 + 20 + size 8 + hash 16 + hlink 4. */
static size_t make_valid(uint8_t **buf)
{
	struct idx_manifest m = { 0 };
	idx_manifest_add(&m, &(struct idx_entry){ .path = "", .type = IDX_DIR });
	idx_manifest_add(&m, &(struct idx_entry){ .path = "f", .type = IDX_REG, .size = 1 });
	size_t len;
	assert_int_equal(idx_manifest_encode(&m, buf, &len), 0);
	idx_manifest_free(&m);
	assert_int_equal(len, 20 + 26 + 27 + 28);
	return len;
}

static int decode_patched(size_t off, const void *bytes, size_t n)
{
	uint8_t *buf;
	size_t len = make_valid(&buf);
	memcpy(buf + off, bytes, n);
	struct idx_manifest t = { 0 };
	int rc = idx_manifest_decode(buf, len, &t, NULL);
	idx_manifest_free(&t);
	free(buf);
	return rc;
}

static void test_hostile_fields(void **state)
{
	(void)state;
	uint8_t *buf;
	size_t len = make_valid(&buf);
	struct idx_manifest t = { 0 };
	assert_int_equal(idx_manifest_decode(buf, len, &t, NULL), 0);
	idx_manifest_free(&t);

	/* trailing garbage */
	uint8_t *more = malloc(len + 1);
	memcpy(more, buf, len);
	more[len] = 0;
	assert_int_equal(idx_manifest_decode(more, len + 1, &t, NULL), -EBADMSG);
	free(more);
	free(buf);

	const uint8_t ff[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	const uint8_t one = 1, nine = 9, two = 2;
	assert_int_equal(decode_patched(0, "XDMF", 4), -EBADMSG);       /* magic */
	assert_int_equal(decode_patched(4, &two, 1), -EBADMSG);          /* version */
	assert_int_equal(decode_patched(5, &one, 1), -EBADMSG);          /* flags */
	assert_int_equal(decode_patched(6, &one, 1), -EBADMSG);          /* reserved */
	assert_int_equal(decode_patched(8, &one, 1), -EBADMSG);          /* chunk size */
	assert_int_equal(decode_patched(12, ff, 8), -EBADMSG);           /* huge count */
	assert_int_equal(decode_patched(20, &nine, 1), -EBADMSG);        /* bad type */
	assert_int_equal(decode_patched(20, &one, 1), -EBADMSG);         /* root not a dir */
	assert_int_equal(decode_patched(21, &two, 1), -EBADMSG);         /* unknown flag */
	assert_int_equal(decode_patched(46 + 2, ff, 2), -EBADMSG);       /* prefix > previous */
	assert_int_equal(decode_patched(46 + 4, ff, 2), -EBADMSG);       /* suffix past end */
	assert_int_equal(decode_patched(46 + 7, ff, 4), -EBADMSG);       /* mode bits */
	assert_int_equal(decode_patched(46 + 27, ff, 8), -EBADMSG);      /* absurd size */
	assert_int_equal(decode_patched(46 + 27 + 24, ff, 4), -EBADMSG); /* hlink forward */
	assert_int_equal(decode_patched(46 + 6, "\0", 1), -EBADMSG);     /* NUL in name */
	assert_int_equal(decode_patched(46 + 6, "/", 1), -EBADMSG);      /* absolute */
}

/* A rejection says why, naming the entry: what the receiver prints. */
static void test_why(void **state)
{
	(void)state;
	static const struct { const char *a, *b, *why; } cases[] = {
		{ "a", "a", "has an entry twice: 'a'" },
		{ "b", "a", "is not sorted (an entry after a greater one): 'a'" },
		{ "a", "a/../x", "has an entry outside the tree: 'a/../x'" },
		{ "a", "a//x", "has a path with an empty component: 'a//x'" },
		{ "b", "a/\033[2J", "is not sorted (an entry after a greater one): 'a/\\033[2J'" },
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		struct idx_manifest m = { 0 }, t = { 0 };
		struct idx_why why;
		/* built by hand: the encoder does not check order or paths */
		m.e = calloc(2, sizeof *m.e);
		m.n = m.cap = 2;
		m.e[0] = (struct idx_entry){ .path = strdup(cases[k].a), .type = IDX_DIR };
		m.e[1] = (struct idx_entry){ .path = strdup(cases[k].b), .type = IDX_DIR };
		uint8_t *buf;
		size_t len;
		assert_int_equal(idx_manifest_encode(&m, &buf, &len), 0);
		assert_int_equal(idx_manifest_decode(buf, len, &t, &why), -EBADMSG);
		assert_string_equal(why.text, cases[k].why);
		free(buf);
		idx_manifest_free(&m);
	}
	/* the header, trailing bytes, an absurd count */
	uint8_t *buf;
	size_t len = make_valid(&buf);
	struct idx_manifest t = { 0 };
	struct idx_why why;
	uint8_t *more = calloc(1, len + 3);
	memcpy(more, buf, len);
	assert_int_equal(idx_manifest_decode(more, len + 3, &t, &why), -EBADMSG);
	assert_string_equal(why.text, "has 3 bytes after its last entry");
	memset(more + 12, 0xff, 8);
	assert_int_equal(idx_manifest_decode(more, len, &t, &why), -EBADMSG);
	assert_string_equal(why.text, "claims 18446744073709551615 entries in 101 bytes");
	assert_int_equal(idx_manifest_decode(more, 7, &t, &why), -EBADMSG);
	assert_string_equal(why.text, "is not a file list (7 bytes, no RDMF header)");
	free(more);
	free(buf);
}

static void test_unsorted_and_duplicates(void **state)
{
	(void)state;
	const char *orders[][2] = { { "b", "a" }, { "a", "a" } };
	for (int k = 0; k < 2; k++) {
		struct idx_manifest m = { 0 }, t = { 0 };
		idx_manifest_add(&m, &(struct idx_entry){ .path = (char *)orders[k][0], .type = IDX_DIR });
		idx_manifest_add(&m, &(struct idx_entry){ .path = (char *)orders[k][1], .type = IDX_DIR });
		uint8_t *buf;
		size_t len;
		assert_int_equal(idx_manifest_encode(&m, &buf, &len), 0);
		assert_int_equal(idx_manifest_decode(buf, len, &t, NULL), -EBADMSG);
		free(buf);
		idx_manifest_free(&m);
	}
}

static void test_random_garbage(void **state)
{
	(void)state;
	uint64_t x = 88172645463325252ull;
	uint8_t buf[512];
	for (int round = 0; round < 20000; round++) {
		size_t len = (size_t)(x % sizeof buf);
		for (size_t i = 0; i < len; i++) {
			x ^= x << 13; x ^= x >> 7; x ^= x << 17;
			buf[i] = (uint8_t)x;
		}
		if (len >= 12 && round % 2) {   /* a valid header, garbage after */
			memcpy(buf, "RDMF\1\0\0\0\0\x40\0\0", 12);
		}
		struct idx_manifest t = { 0 };
		int rc = idx_manifest_decode(buf, len, &t, NULL);
		assert_true(rc == 0 || rc == -EBADMSG);
		idx_manifest_free(&t);
		x += (uint64_t)round;
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_real_tree),
		cmocka_unit_test(test_hostile_paths),
		cmocka_unit_test(test_hostile_fields),
		cmocka_unit_test(test_unsorted_and_duplicates),
		cmocka_unit_test(test_why),
		cmocka_unit_test(test_random_garbage),
	};
	return cmocka_run_group_tests_name("manifest", tests, NULL, NULL);
}
