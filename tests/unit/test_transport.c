/* Transport wire messages and the authentication handshake. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "transport/tp_int.h"

static void test_header_roundtrip(void **state)
{
	(void)state;
	uint8_t p[TP_HDR_LEN];
	struct tp_hdr h = { .type = TP_DATA, .len = 1u << 20, .id = 0x0102030405060708ull,
	                    .off = 0xfffffffffffffff0ull, .credits = 7 }, g;
	tp_hdr_put(p, &h);
	assert_int_equal(p[0], TP_DATA);
	assert_int_equal(p[4], 0x00);   /* big-endian length */
	assert_int_equal(p[5], 0x10);
	assert_int_equal(p[8], 0x01);
	assert_int_equal(tp_hdr_get(p, &g), 0);
	assert_int_equal(g.len, h.len);
	assert_int_equal(g.id, h.id);
	assert_int_equal(g.off, h.off);
	assert_int_equal(g.credits, 7);
}

static void test_header_rejects(void **state)
{
	(void)state;
	uint8_t p[TP_HDR_LEN];
	struct tp_hdr h = { .type = TP_DATA, .len = 10 }, g;
	static const int reserved[] = { 1, 2, 3, 28, 29, 30, 31 };
	for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++) {
		tp_hdr_put(p, &h);
		p[reserved[i]] = 1;
		assert_int_equal(tp_hdr_get(p, &g), -EPROTO);
	}
	for (int t = 0; t < 256; t++) {
		tp_hdr_put(p, &h);
		p[0] = (uint8_t)t;
		int known = t == TP_DATA || t == TP_CREDIT || t == TP_END || t == TP_VERDICT ||
		            t == TP_HELLO || t == TP_AUTH || t == TP_AUTH_OK || t == TP_AUTH_FAIL;
		if (!known)
			assert_int_equal(tp_hdr_get(p, &g), -EPROTO);
	}
	/* control messages with a wrong (oversized) length */
	struct tp_hdr bad[] = { { .type = TP_AUTH, .len = TP_AUTH_LEN + 1 },
	                        { .type = TP_HELLO, .len = 0xffffffff },
	                        { .type = TP_CREDIT, .len = 1 },
	                        { .type = TP_AUTH_OK, .len = 1 } };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		tp_hdr_put(p, &bad[i]);
		assert_int_equal(tp_hdr_get(p, &g), -EPROTO);
	}
}

struct hs {
	uint8_t key_r[TP_KEY_LEN], key_s[TP_KEY_LEN];
	struct tp_hello hello_r, hello_s;
	struct tp_auth auth_s, auth_r;
	uint8_t hello[TP_HELLO_LEN], answer[TP_AUTH_LEN], ok[TP_MAC_LEN];
};

/* One full handshake; returns what the receiver's check said. */
static int handshake(struct hs *h, const char *rk, const char *sk)
{
	tp_key_derive(rk, strlen(rk), h->key_r);
	tp_key_derive(sk, strlen(sk), h->key_s);
	tp_hs_hello(&h->hello_r, 1 << 20, 8);
	tp_hello_put(h->hello, &h->hello_r);
	assert_int_equal(tp_hs_answer(h->key_s, h->hello, TP_HELLO_LEN, 42, 2, 1,
	                              &h->hello_s, &h->auth_s, h->answer), 0);
	return tp_hs_check(h->key_r, &h->hello_r, h->answer, TP_AUTH_LEN, &h->auth_r, h->ok);
}

static void test_handshake_ok(void **state)
{
	(void)state;
	struct hs h;
	assert_int_equal(handshake(&h, "secret", "secret"), 0);
	assert_int_equal(h.auth_r.session, 42);
	assert_int_equal(h.auth_r.streams, 2);
	assert_int_equal(h.auth_r.index, 1);
	assert_int_equal(tp_hs_confirm(h.key_s, &h.hello_s, &h.auth_s, h.ok, TP_MAC_LEN), 0);
	/* the secret itself is nowhere in what crossed the wire */
	assert_null(memmem(h.answer, TP_AUTH_LEN, "secret", 6));
	assert_null(memmem(h.answer, TP_AUTH_LEN, h.key_s, TP_KEY_LEN));
}

static void test_handshake_wrong_key(void **state)
{
	(void)state;
	struct hs h;
	assert_int_equal(handshake(&h, "secret", "Secret"), -EACCES);
	/* and a receiver with the wrong key cannot fake AUTH_OK either */
	assert_int_equal(handshake(&h, "secret", "secret"), 0);
	uint8_t fake[TP_MAC_LEN];
	uint8_t other[TP_KEY_LEN];
	tp_key_derive("guess", 5, other);
	tp_authok_mac(other, h.hello_s.nonce, &h.auth_s, fake);
	assert_int_equal(tp_hs_confirm(h.key_s, &h.hello_s, &h.auth_s, fake, TP_MAC_LEN), -EACCES);
}

static void test_handshake_tampering(void **state)
{
	(void)state;
	struct hs h;
	assert_int_equal(handshake(&h, "k", "k"), 0);
	/* every single bit flipped in the answer breaks it */
	for (size_t i = 0; i < TP_AUTH_LEN * 8; i++) {
		uint8_t a[TP_AUTH_LEN], ok[TP_MAC_LEN];
		struct tp_auth out;
		memcpy(a, h.answer, sizeof a);
		a[i / 8] ^= (uint8_t)(1 << (i % 8));
		int rc = tp_hs_check(h.key_r, &h.hello_r, a, TP_AUTH_LEN, &out, ok);
		assert_true(rc == -EACCES || rc == -EPROTO);
	}
	/* replay against a new challenge fails */
	struct tp_hello fresh;
	uint8_t ok[TP_MAC_LEN];
	struct tp_auth out;
	tp_hs_hello(&fresh, 1 << 20, 8);
	assert_int_equal(tp_hs_check(h.key_r, &fresh, h.answer, TP_AUTH_LEN, &out, ok), -EACCES);
	/* truncated */
	assert_int_equal(tp_hs_check(h.key_r, &h.hello_r, h.answer, TP_AUTH_LEN - 1, &out, ok),
	                 -EPROTO);
	assert_int_equal(tp_hs_confirm(h.key_s, &h.hello_s, &h.auth_s, h.ok, TP_MAC_LEN - 1),
	                 -EPROTO);
}

static void test_hello_rejects(void **state)
{
	(void)state;
	struct tp_hello h, g;
	uint8_t p[TP_HELLO_LEN];
	tp_hs_hello(&h, 1 << 20, 8);
	tp_hello_put(p, &h);
	assert_int_equal(tp_hello_get(p, TP_HELLO_LEN, &g), 0);
	assert_int_equal(tp_hello_get(p, TP_HELLO_LEN - 1, &g), -EPROTO);
	p[0] ^= 1;   /* magic */
	assert_int_equal(tp_hello_get(p, TP_HELLO_LEN, &g), -EPROTO);
	tp_hs_hello(&h, 0xffffffff, 8);   /* absurd message size */
	tp_hello_put(p, &h);
	assert_int_equal(tp_hello_get(p, TP_HELLO_LEN, &g), -EPROTO);
	tp_hs_hello(&h, 1 << 20, 1000000);   /* absurd credits */
	tp_hello_put(p, &h);
	assert_int_equal(tp_hello_get(p, TP_HELLO_LEN, &g), -EPROTO);
	/* AUTH with a stream index out of range */
	struct tp_auth a = { .streams = 2, .index = 2 }, b;
	uint8_t q[TP_AUTH_LEN];
	tp_auth_put(q, &a);
	assert_int_equal(tp_auth_get(q, TP_AUTH_LEN, &b), -EPROTO);
	a = (struct tp_auth){ .streams = TP_MAX_STREAMS + 1 };
	tp_auth_put(q, &a);
	assert_int_equal(tp_auth_get(q, TP_AUTH_LEN, &b), -EPROTO);
}

static void test_garbage(void **state)
{
	(void)state;
	uint64_t x = 1234567;
	uint8_t buf[TP_AUTH_LEN + TP_HDR_LEN];
	uint8_t key[TP_KEY_LEN];
	tp_key_derive("k", 1, key);
	struct tp_hello h;
	tp_hs_hello(&h, 1 << 20, 8);
	for (int r = 0; r < 100000; r++) {
		for (size_t i = 0; i < sizeof buf; i++) {
			x ^= x << 13; x ^= x >> 7; x ^= x << 17;
			buf[i] = (uint8_t)x;
		}
		struct tp_hdr g;
		struct tp_hello hg;
		struct tp_auth a;
		uint8_t ok[TP_MAC_LEN];
		int rc = tp_hdr_get(buf, &g);
		assert_true(rc == 0 || rc == -EPROTO);
		assert_int_equal(tp_hello_get(buf, TP_HELLO_LEN, &hg), -EPROTO);   /* no magic */
		rc = tp_hs_check(key, &h, buf, TP_AUTH_LEN, &a, ok);
		assert_true(rc == -EACCES || rc == -EPROTO);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_roundtrip),
		cmocka_unit_test(test_header_rejects),
		cmocka_unit_test(test_handshake_ok),
		cmocka_unit_test(test_handshake_wrong_key),
		cmocka_unit_test(test_handshake_tampering),
		cmocka_unit_test(test_hello_rejects),
		cmocka_unit_test(test_garbage),
	};
	return cmocka_run_group_tests_name("transport", tests, NULL, NULL);
}
