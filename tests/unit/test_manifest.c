/* Manifest wire encoding: round trip, and hostile input from a peer. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
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
		assert_int_equal(x->got, y->got);
		assert_true(idx_extra_same_xattrs(x->x, y->x));
		assert_true(idx_extra_same_acls(x->x, y->x));
		assert_int_equal(x->x ? x->x->nxattrs : 0, y->x ? y->x->nxattrs : 0);
	}
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->nnames, b->nnames);
	for (size_t i = 0; i < a->nnames; i++) {
		assert_int_equal(a->names[i].kind, b->names[i].kind);
		assert_int_equal(a->names[i].id, b->names[i].id);
		assert_string_equal(a->names[i].name, b->names[i].name);
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

/* A lazy scan reads no settled small file without an index row
 * (IDX_F_NOHASH), a receiver's (lazy_any) no small file at all; a
 * manifest with nohash_below carries no hash of the files under it, and
 * refuses to drop one it has not got above it. */
static void test_nohash(void **state)
{
	(void)state;
	char dir[256];
	snprintf(dir, sizeof dir, "%s/rdcp-mf-XXXXXX", tmpdir());
	assert_non_null(mkdtemp(dir));
	int d = open(dir, O_RDONLY | O_DIRECTORY);
	put_file(d, "small", "hello");
	put_file(d, "empty", "");
	put_big(d, "big", 70000, 3);
	close(d);
	struct idx_manifest m = { 0 }, back = { 0 }, full = { 0 };
	struct idx_stats st;
	struct idx_scan_opts o = { .no_index = 1, .lazy_below = 65536 };
	/* changed in the last IDX_SETTLED_S seconds: read, as every file */
	unsetenv("RDCP_TEST_SETTLED_S");
	assert_int_equal(idx_scan(dir, &o, &m, &st), 0);
	assert_int_equal(st.hashed, 3);
	idx_manifest_free(&m);
	/* a receiver's (lazy_any): fresh ones unread too, the big one read */
	o.lazy_any = 1;
	assert_int_equal(idx_scan(dir, &o, &m, &st), 0);
	assert_int_equal(st.hashed, 1);
	assert_true(idx_manifest_find(&m, "small")->flags & IDX_F_NOHASH);
	assert_true(idx_manifest_find(&m, "empty")->flags & IDX_F_NOHASH);
	assert_false(idx_manifest_find(&m, "big")->flags & IDX_F_NOHASH);
	idx_manifest_free(&m);
	o.lazy_any = 0;
	/* settled (as if older: the clock's tick passed): small ones unread */
	setenv("RDCP_TEST_SETTLED_S", "0", 1);
	usleep(20000);
	assert_int_equal(idx_scan(dir, &o, &m, &st), 0);
	unsetenv("RDCP_TEST_SETTLED_S");
	assert_int_equal(st.hashed, 1);   /* big only */
	const struct idx_entry *sm = idx_manifest_find(&m, "small");
	assert_true(sm->flags & IDX_F_NOHASH);
	assert_false(idx_manifest_find(&m, "big")->flags & IDX_F_NOHASH);
	o.lazy_below = 0;
	assert_int_equal(idx_scan(dir, &o, &full, &st), 0);
	assert_int_equal(st.hashed, 3);

	uint8_t *buf, *fbuf;
	size_t len, flen;
	m.nohash_below = 1000;   /* not in KiB */
	assert_int_equal(idx_manifest_encode(&m, &buf, &len), -EINVAL);
	m.nohash_below = 0;   /* "small" has none, yet it is to carry one */
	assert_int_equal(idx_manifest_encode(&m, &buf, &len), -EINVAL);
	m.nohash_below = 64 << 10;
	assert_int_equal(idx_manifest_encode(&m, &buf, &len), 0);
	full.nohash_below = 0;
	assert_int_equal(idx_manifest_encode(&full, &fbuf, &flen), 0);
	assert_int_equal(flen - len, 2 * IDX_HASH_LEN);   /* small's and empty's */
	assert_int_equal(idx_manifest_decode(buf, len, &back, NULL), 0);
	assert_int_equal(back.nohash_below, 64 << 10);
	assert_true(idx_manifest_find(&back, "small")->flags & IDX_F_NOHASH);
	assert_true(idx_manifest_find(&back, "empty")->flags & IDX_F_NOHASH);
	const struct idx_entry *b = idx_manifest_find(&back, "big");
	assert_false(b->flags & IDX_F_NOHASH);
	assert_memory_equal(b->hash, idx_manifest_find(&full, "big")->hash, IDX_HASH_LEN);
	/* a hashed manifest decodes with every hash */
	struct idx_manifest fb = { 0 };
	assert_int_equal(idx_manifest_decode(fbuf, flen, &fb, NULL), 0);
	assert_false(idx_manifest_find(&fb, "small")->flags & IDX_F_NOHASH);
	assert_same(&full, &fb);
	/* every truncation of the hashless one is refused */
	for (size_t cut = 0; cut < len; cut++) {
		struct idx_manifest t = { 0 };
		assert_int_equal(idx_manifest_decode(buf, cut, &t, NULL), -EBADMSG);
		idx_manifest_free(&t);
	}
	free(buf);
	free(fbuf);
	idx_manifest_free(&m);
	idx_manifest_free(&back);
	idx_manifest_free(&full);
	idx_manifest_free(&fb);
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

/* Decode a copy of buf with n bytes at off replaced. */
static int decode_patched_buf(const uint8_t *buf, size_t len, size_t off, const void *bytes,
                              size_t n, struct idx_why *why)
{
	uint8_t *c = malloc(len);
	memcpy(c, buf, len);
	memcpy(c + off, bytes, n);
	struct idx_manifest t = { 0 };
	int rc = idx_manifest_decode(c, len, &t, why);
	idx_manifest_free(&t);
	free(c);
	return rc;
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

/* --- xattrs, ACLs and names (-X, -A, name mapping) --- */

/* An xattr blob of n items name=value (values may hold any bytes). */
static struct idx_extra *xattrs_of(int n, const char *const *names, const uint32_t *vlens)
{
	size_t len = 0;
	for (int i = 0; i < n; i++)
		len += 5 + strlen(names[i]) + vlens[i];
	struct idx_extra *x = idx_extra_new(0, 0, (uint32_t)len);
	uint8_t *p = x->xattrs;
	for (int i = 0; i < n; i++) {
		size_t l = strlen(names[i]);
		*p++ = (uint8_t)l;
		memcpy(p, names[i], l);
		p += l;
		p[0] = (uint8_t)(vlens[i] >> 24);
		p[1] = (uint8_t)(vlens[i] >> 16);
		p[2] = (uint8_t)(vlens[i] >> 8);
		p[3] = (uint8_t)vlens[i];
		p += 4;
		memset(p, 'v' + i, vlens[i]);
		p += vlens[i];
	}
	x->nxattrs = (uint16_t)n;
	return x;
}

/* An extra with the given access and default ACL (and no xattrs). */
static struct idx_extra *acls_of(const struct idx_ace *a, uint16_t na,
                                 const struct idx_ace *d, uint16_t nd)
{
	struct idx_extra *x = idx_extra_new(na, nd, 0);
	if (na)
		memcpy(x->acl, a, na * sizeof *a);
	if (nd)
		memcpy(x->dacl, d, nd * sizeof *d);
	return x;
}

static const struct idx_ace ACL_OK[] = {
	{ 0, IDX_ACL_USER_OBJ, 6 }, { 1000, IDX_ACL_USER, 4 }, { 0, IDX_ACL_GROUP_OBJ, 4 },
	{ 2000, IDX_ACL_GROUP, 6 }, { 0, IDX_ACL_MASK, 6 }, { 0, IDX_ACL_OTHER, 0 },
};
static const struct idx_ace DACL_MIN[] = {
	{ 0, IDX_ACL_USER_OBJ, 7 }, { 0, IDX_ACL_GROUP_OBJ, 5 }, { 0, IDX_ACL_OTHER, 5 },
};

/* Root "", dir "d" with x on it (or on "d/f", of type, when on_file),
 * encoded with manifest flags mf; with flags set, the flags byte of "d/f"
 * (which has no x then) is made that. Decoded: 0 or -EBADMSG, why->text. */
static int decode_extra_as(unsigned mf, struct idx_extra *x, int on_file, uint8_t type,
                           int flags, struct idx_why *why)
{
	struct idx_manifest m = { 0 }, t = { 0 };
	unsigned got = mf;
	idx_manifest_add(&m, &(struct idx_entry){ .path = "", .type = IDX_DIR, .got = got });
	idx_manifest_add(&m, &(struct idx_entry){ .path = "d", .type = IDX_DIR, .got = got,
	                                          .x = on_file ? NULL : x });
	idx_manifest_add(&m, &(struct idx_entry){ .path = "d/f", .type = type, .got = got,
	                                          .link = type == IDX_LNK ? "t" : NULL,
	                                          .x = on_file ? x : NULL });
	m.flags = mf;
	uint8_t *buf;
	size_t len;
	assert_int_equal(idx_manifest_encode(&m, &buf, &len), 0);
	if (flags >= 0)
		buf[20 + 26 + 27 + 1] = (uint8_t)flags;
	int rc = idx_manifest_decode(buf, len, &t, why);
	if (rc == 0 && flags < 0) {
		assert_same(&m, &t);
		/* canonical: the same bytes back */
		uint8_t *again;
		size_t alen;
		assert_int_equal(idx_manifest_encode(&t, &again, &alen), 0);
		assert_int_equal(alen, len);
		assert_memory_equal(again, buf, len);
		free(again);
	}
	free(buf);
	free(x);
	idx_manifest_free(&m);
	idx_manifest_free(&t);
	return rc;
}

static int decode_extra(unsigned mf, struct idx_extra *x, int on_file, uint8_t type,
                        struct idx_why *why)
{
	return decode_extra_as(mf, x, on_file, type, -1, why);
}

static void test_extras_roundtrip(void **state)
{
	(void)state;
	struct idx_why why;
	const unsigned XA = IDX_MF_XATTRS | IDX_MF_ACLS;
	const char *n2[] = { "user.a", "user.b" };
	const uint32_t v2[] = { 3, 0 };
	assert_int_equal(decode_extra(XA, xattrs_of(2, n2, v2), 1, IDX_REG, &why), 0);
	/* the largest value Linux has, several of them */
	const char *n3[] = { "user.big1", "user.big2", "user.big3" };
	const uint32_t v3[] = { 65536, 65536, 65536 };
	assert_int_equal(decode_extra(XA, xattrs_of(3, n3, v3), 0, IDX_REG, &why), 0);
	/* as root: other namespaces, on a symlink too */
	const char *nr[] = { "security.x", "trusted.y", "user.z" };
	const uint32_t vr[] = { 1, 2, 3 };
	assert_int_equal(decode_extra(XA | IDX_MF_XATTRS_ALL, xattrs_of(3, nr, vr), 1, IDX_LNK,
	                              &why), 0);
	/* ACLs: access and default on a directory, access on a file */
	assert_int_equal(decode_extra(XA, acls_of(ACL_OK, 6, DACL_MIN, 3), 0, IDX_REG, &why), 0);
	assert_int_equal(decode_extra(IDX_MF_ACLS, acls_of(ACL_OK, 6, NULL, 0), 1, IDX_REG,
	                              &why), 0);

	/* names and an entry whose extras could not be read (got 0) */
	struct idx_manifest m = { 0 }, t = { 0 };
	m.flags = XA;
	idx_manifest_add(&m, &(struct idx_entry){ .path = "", .type = IDX_DIR, .got = XA });
	idx_manifest_add(&m, &(struct idx_entry){ .path = "a", .type = IDX_REG, .uid = 1000 });
	struct idx_extra *bx = acls_of(ACL_OK, 6, NULL, 0);
	idx_manifest_add(&m, &(struct idx_entry){ .path = "b", .type = IDX_REG, .got = XA,
	                                          .x = bx });
	free(bx);   /* added as a copy */
	assert_int_equal(idx_manifest_name(&m, IDX_NAME_GROUP, 2000, "staff"), 0);
	assert_int_equal(idx_manifest_name(&m, IDX_NAME_USER, 1000, "alice"), 0);
	assert_int_equal(idx_manifest_name(&m, IDX_NAME_USER, 7, "bob"), 0);
	assert_int_equal(idx_manifest_name(&m, IDX_NAME_USER, 1000, "not-alice"), 0);
	assert_int_equal(m.nnames, 3);
	assert_string_equal(idx_manifest_name_of(&m, IDX_NAME_USER, 1000), "alice");
	assert_null(idx_manifest_name_of(&m, IDX_NAME_GROUP, 1000));
	uint8_t *buf;
	size_t len;
	assert_int_equal(idx_manifest_encode(&m, &buf, &len), 0);
	assert_int_equal(idx_manifest_decode(buf, len, &t, &why), 0);
	assert_same(&m, &t);
	assert_int_equal(t.e[1].got, 0);
	assert_string_equal(t.names[0].name, "bob");
	/* every truncation is refused, never read past */
	for (size_t cut = 0; cut < len; cut++) {
		struct idx_manifest c = { 0 };
		assert_int_equal(idx_manifest_decode(buf, cut, &c, NULL), -EBADMSG);
		assert_int_equal(c.n, 0);
	}
	free(buf);
	idx_manifest_free(&t);
	/* a manifest that carries nothing drops what entries hold */
	m.flags = 0;
	assert_int_equal(idx_manifest_encode(&m, &buf, &len), 0);
	assert_int_equal(idx_manifest_decode(buf, len, &t, &why), 0);
	assert_null(t.e[2].x);
	assert_int_equal(t.e[2].got, 0);
	free(buf);
	idx_manifest_free(&t);
	idx_manifest_free(&m);
}

/* Each lie about xattrs and ACLs is refused, saying what it was. */
static void test_hostile_extras(void **state)
{
	(void)state;
	struct idx_why why;
	const unsigned XA = IDX_MF_XATTRS | IDX_MF_ACLS;
	static const struct { const char *name; uint32_t vlen; unsigned mf; const char *why; } one[] = {
		/* the attack: a value over Linux's largest, to make us allocate */
		{ "user.big", 65537, IDX_MF_XATTRS, "has an xattr value over 64 KiB: 'd/f'" },
		{ "user.big", 0xffffffffu, IDX_MF_XATTRS, "ends in the middle of an entry: 'd/f'" },
		{ "", 1, IDX_MF_XATTRS, "has an xattr name that is empty or has a NUL byte: 'd/f'" },
		{ "system.posix_acl_access", 4, IDX_MF_XATTRS | IDX_MF_XATTRS_ALL,
		  "has an xattr of a namespace it does not send: 'd/f'" },
		{ "trusted.x", 1, IDX_MF_XATTRS, "has an xattr of a namespace it does not send: 'd/f'" },
	};
	for (size_t k = 0; k < sizeof one / sizeof *one; k++) {
		const char *n[] = { one[k].name };
		const uint32_t v[] = { one[k].vlen == 0xffffffffu ? 1 : one[k].vlen };
		struct idx_extra *x = xattrs_of(1, n, v);
		if (one[k].vlen == 0xffffffffu) {   /* a length past the end */
			uint8_t *p = x->xattrs + 1 + strlen(n[0]);
			memset(p, 0xff, 4);
		}
		if (!*one[k].name)
			x->xattrs[0] = 0;
		assert_int_equal(decode_extra(one[k].mf, x, 1, IDX_REG, &why), -EBADMSG);
		assert_string_equal(why.text, one[k].why);
	}
	/* a NUL in a name; names out of order; one twice; over 1 MiB in all */
	const char *nul[] = { "user.a" };
	const uint32_t v1[] = { 1 };
	struct idx_extra *x = xattrs_of(1, nul, v1);
	x->xattrs[3] = 0;
	assert_int_equal(decode_extra(IDX_MF_XATTRS, x, 1, IDX_REG, &why), -EBADMSG);
	const char *unsorted[] = { "user.b", "user.a" }, *twice[] = { "user.a", "user.a" },
	           *prefix[] = { "user.ab", "user.a" };
	const uint32_t v2[] = { 1, 1 };
	assert_int_equal(decode_extra(IDX_MF_XATTRS, xattrs_of(2, unsorted, v2), 1, IDX_REG, &why),
	                 -EBADMSG);
	assert_string_equal(why.text, "has xattrs not sorted, or one twice: 'd/f'");
	assert_int_equal(decode_extra(IDX_MF_XATTRS, xattrs_of(2, twice, v2), 1, IDX_REG, &why),
	                 -EBADMSG);
	assert_int_equal(decode_extra(IDX_MF_XATTRS, xattrs_of(2, prefix, v2), 1, IDX_REG, &why),
	                 -EBADMSG);
	const char *many[17];
	uint32_t vm[17];
	char nbuf[17][16];
	for (int i = 0; i < 17; i++) {
		snprintf(nbuf[i], sizeof nbuf[i], "user.%02d", i);
		many[i] = nbuf[i];
		vm[i] = 65536;
	}
	assert_int_equal(decode_extra(IDX_MF_XATTRS, xattrs_of(17, many, vm), 1, IDX_REG, &why),
	                 -EBADMSG);
	assert_string_equal(why.text, "has xattrs over 1 MiB on one entry: 'd/f'");
	/* an empty list is not canonical (no bit, no section): a count of 0
	 * patched into an entry's only xattr ("user.a" = "v") */
	{
		struct idx_manifest m = { 0 }, t = { 0 };
		struct idx_extra *rx = xattrs_of(1, nul, v1);
		m.flags = IDX_MF_XATTRS;
		idx_manifest_add(&m, &(struct idx_entry){ .path = "", .type = IDX_DIR, .got = 1,
		                                          .x = rx });
		free(rx);
		uint8_t *buf;
		size_t len;
		assert_int_equal(idx_manifest_encode(&m, &buf, &len), 0);
		assert_int_equal(len, 20 + 26 + 2 + 1 + 6 + 4 + 1);
		memset(buf + 46, 0, 2);
		assert_int_equal(idx_manifest_decode(buf, len, &t, &why), -EBADMSG);
		assert_string_equal(why.text, "has an empty list of xattrs: ''");
		idx_manifest_free(&m);
		free(buf);
	}

	/* sections an entry cannot have: flags patched (the encoder leaves
	 * them out) */
	assert_int_equal(decode_extra_as(XA, NULL, 1, IDX_LNK, 0x04, &why), -EBADMSG);
	assert_string_equal(why.text, "has an ACL on an entry of type symlink (entry 2)");
	assert_int_equal(decode_extra_as(XA, NULL, 1, IDX_REG, 0x08, &why), -EBADMSG);
	assert_string_equal(why.text, "has an ACL on an entry of type file (entry 2)");
	assert_int_equal(decode_extra_as(IDX_MF_ACLS, NULL, 1, IDX_REG, 0x02, &why), -EBADMSG);
	assert_string_equal(why.text, "has an entry with unknown flags 0x02");
	assert_int_equal(decode_extra_as(0, NULL, 1, IDX_REG, 0x10, &why), -EBADMSG);
	assert_int_equal(decode_extra_as(XA, NULL, 1, IDX_REG, 0x12, &why), -EBADMSG);
	assert_string_equal(why.text, "has an entry with xattrs or ACLs it could not read (entry 2)");
	assert_int_equal(decode_extra_as(XA, NULL, 1, IDX_REG, 0x10, &why), 0 - 0);

	/* ACLs */
	struct idx_ace a[8];
	static const struct { int at; struct idx_ace ace; const char *why; } bad[] = {
		{ 1, { 1000, 9, 4 }, "has an ACL entry of unknown tag: 'd/f'" },
		{ 1, { 1000, IDX_ACL_USER, 8 }, "has an ACL entry with permission bits beyond rwx: 'd/f'" },
		{ 0, { 5, IDX_ACL_USER_OBJ, 6 }, "has an ACL entry with an id where none belongs: 'd/f'" },
		{ 3, { 500, IDX_ACL_USER, 6 }, "has an ACL not sorted, or with an entry twice: 'd/f'" },
		{ 3, { 0, IDX_ACL_GROUP, 6 }, NULL },   /* a named group of gid 0 */
		{ 5, { 0, IDX_ACL_MASK, 0 }, "has an ACL not sorted, or with an entry twice: 'd/f'" },
		{ 5, { 0, IDX_ACL_OTHER, 0 }, NULL },
	};
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
		memcpy(a, ACL_OK, sizeof ACL_OK);
		a[bad[k].at] = bad[k].ace;
		int rc = decode_extra(XA, acls_of(a, 6, NULL, 0), 1, IDX_REG, &why);
		if (!bad[k].why) {
			assert_int_equal(rc, 0);
			continue;
		}
		assert_int_equal(rc, -EBADMSG);
		assert_string_equal(why.text, bad[k].why);
	}
	/* without other; named entries without a mask; an access ACL that is
	 * only the mode */
	assert_int_equal(decode_extra(XA, acls_of(ACL_OK, 5, NULL, 0), 1, IDX_REG, &why), -EBADMSG);
	assert_string_equal(why.text, "has an ACL without its owner, group or other entry: 'd/f'");
	struct idx_ace nomask[] = { ACL_OK[0], ACL_OK[1], ACL_OK[2], ACL_OK[5] };
	assert_int_equal(decode_extra(XA, acls_of(NULL, 0, nomask, 4), 0, IDX_REG, &why), -EBADMSG);
	assert_string_equal(why.text, "has an ACL with named entries but no mask: 'd'");
	assert_int_equal(decode_extra(XA, acls_of(DACL_MIN, 3, NULL, 0), 1, IDX_REG, &why),
	                 -EBADMSG);
	assert_string_equal(why.text, "has an access ACL that says no more than the mode: 'd/f'");
}

/* Lies in the header and the names table. */
static void test_hostile_names(void **state)
{
	(void)state;
	struct idx_manifest m = { 0 }, t = { 0 };
	struct idx_why why;
	idx_manifest_add(&m, &(struct idx_entry){ .path = "", .type = IDX_DIR });
	idx_manifest_name(&m, IDX_NAME_USER, 1000, "alice");
	idx_manifest_name(&m, IDX_NAME_USER, 1001, "bob");
	uint8_t *buf;
	size_t len;
	assert_int_equal(idx_manifest_encode(&m, &buf, &len), 0);
	/* header 20, count 4, then "1 1000 5 alice" (11) and "1 1001 3 bob" */
	assert_int_equal(decode_patched_buf(buf, len, 24 + 11 + 4, "\xe8", 1, &why), -EBADMSG);
	assert_string_equal(why.text, "has a table of names not sorted, or with an id twice");
	assert_int_equal(decode_patched_buf(buf, len, 24, "\3", 1, &why), -EBADMSG);
	assert_string_equal(why.text, "has a name of unknown kind 3");
	assert_int_equal(decode_patched_buf(buf, len, 24 + 6, "a\0", 2, &why), -EBADMSG);
	assert_string_equal(why.text, "has a name that is empty or has a NUL byte");
	assert_int_equal(decode_patched_buf(buf, len, 20, "\0\0\0\0", 4, &why), -EBADMSG);
	assert_string_equal(why.text, "has a table of 0 names (1..65536 that fit)");
	assert_int_equal(decode_patched_buf(buf, len, 20, "\0\1\0\0", 4, &why), -EBADMSG);
	assert_int_equal(decode_patched_buf(buf, len, 5, "\4", 1, &why), -EBADMSG);
	assert_string_equal(why.text, "says it has xattrs of all namespaces but none");
	assert_int_equal(decode_patched_buf(buf, len, 5, "\x11", 1, &why), -EBADMSG);
	assert_string_equal(why.text, "has reserved header fields that are not zero");
	assert_int_equal(decode_patched_buf(buf, len, 0, "RDMF", 4, &why), 0);
	(void)t;
	free(buf);
	idx_manifest_free(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_real_tree),
		cmocka_unit_test(test_nohash),
		cmocka_unit_test(test_hostile_paths),
		cmocka_unit_test(test_hostile_fields),
		cmocka_unit_test(test_unsorted_and_duplicates),
		cmocka_unit_test(test_why),
		cmocka_unit_test(test_random_garbage),
		cmocka_unit_test(test_extras_roundtrip),
		cmocka_unit_test(test_hostile_extras),
		cmocka_unit_test(test_hostile_names),
	};
	return cmocka_run_group_tests_name("manifest", tests, NULL, NULL);
}
