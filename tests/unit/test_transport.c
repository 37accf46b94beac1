/* Transport wire messages and the authentication handshake; the listener's
 * gate; accept past strangers; the I/O timeout. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/exitcode.h"
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


static struct sockaddr_in v4(const char *a)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	assert_int_equal(inet_pton(AF_INET, a, &sa.sin_addr), 1);
	return sa;
}

static struct sockaddr_in6 v6(const char *a)
{
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6 };
	assert_int_equal(inet_pton(AF_INET6, a, &sa.sin6_addr), 1);
	return sa;
}

#define SA(x) ((struct sockaddr *)&(x))

static void test_gate_addresses(void **state)
{
	(void)state;
	struct tp_gate g;
	struct sockaddr_in a = v4("10.1.2.3"), b = v4("10.1.2.4");
	struct sockaddr_in6 am = v6("::ffff:10.1.2.3"), l6 = v6("::1"), ll = v6("fe80::1");
	assert_int_equal(tp_gate_init(&g, NULL), 0);
	assert_true(tp_gate_allows(&g, SA(a)) && tp_gate_allows(&g, SA(l6)));
	assert_int_equal(tp_gate_init(&g, "10.1.2.3"), 0);
	assert_true(tp_gate_allows(&g, SA(a)));
	assert_true(tp_gate_allows(&g, SA(am)));   /* v4 on a dual-stack socket */
	assert_false(tp_gate_allows(&g, SA(b)));
	assert_false(tp_gate_allows(&g, SA(l6)));
	assert_int_equal(tp_gate_init(&g, "::ffff:10.1.2.3"), 0);
	assert_true(tp_gate_allows(&g, SA(a)));
	assert_int_equal(tp_gate_init(&g, "fe80::1"), 0);
	assert_true(tp_gate_allows(&g, SA(ll)));
	assert_false(tp_gate_allows(&g, SA(l6)));
	assert_false(tp_gate_allows(&g, SA(a)));
	/* names and junk are refused: the allow-list is not a DNS lookup */
	assert_int_equal(tp_gate_init(&g, "localhost"), -EINVAL);
	assert_int_equal(tp_gate_init(&g, "10.1.2.3.4"), -EINVAL);
	assert_int_equal(tp_gate_init(&g, ""), -EINVAL);
	char name[80];
	tp_addr_name(SA(am), name, sizeof name);
	assert_string_equal(name, "10.1.2.3 port 0");
}

/* Run fn with stderr in a file; the number of lines it wrote. */
static int stderr_lines(void (*fn)(struct tp_gate *), struct tp_gate *g)
{
	char path[] = "/tmp/rdcp-gate-XXXXXX";
	int fd = mkstemp(path), saved = dup(2);
	assert_true(fd >= 0 && saved >= 0);
	dup2(fd, 2);
	fn(g);
	dup2(saved, 2);
	close(saved);
	char buf[8192];
	ssize_t n = pread(fd, buf, sizeof buf, 0);
	close(fd);
	unlink(path);
	int lines = 0;
	for (ssize_t i = 0; i < n; i++)
		lines += buf[i] == '\n';
	return lines;
}

static void drop_100(struct tp_gate *g)
{
	for (int i = 0; i < 100; i++)
		tp_gate_drop(g, "dropped a connection from %d", i);
}

static void gate_done(struct tp_gate *g)
{
	tp_gate_done(g);
}

static void test_gate_log_is_bounded(void **state)
{
	(void)state;
	struct tp_gate g;
	assert_int_equal(tp_gate_init(&g, NULL), 0);
	assert_int_equal(stderr_lines(drop_100, &g), TP_GATE_LOG_MAX);
	assert_int_equal(g.quiet, 100 - TP_GATE_LOG_MAX);
	assert_int_equal(stderr_lines(gate_done, &g), 1);
	assert_int_equal(stderr_lines(gate_done, &g), 0);   /* said once */
}

static void test_exit_code_of_timeout(void **state)
{
	(void)state;
	assert_int_equal(rd_exit_code(-ETIME), RD_EXIT_TIMEOUT);
	assert_int_equal(RD_EXIT_TIMEOUT, 30);
	assert_int_equal(rd_exit_code(-ETIMEDOUT), RD_EXIT_CONN);   /* connect's, distinct */
}

/* --- sessions over loopback TCP --- */

struct conn_arg {
	uint16_t port;
	struct tp_opts o;
	struct tp_session *s;
	int rc;
};

static void *connect_main(void *arg)
{
	struct conn_arg *c = arg;
	c->rc = tp_connect("127.0.0.1", c->port, &c->o, &c->s);
	return NULL;
}

static struct tp_opts tcp_opts(const char *secret, int streams)
{
	struct tp_opts o = { .kind = TP_TCP, .streams = streams, .msg_size = 64 << 10,
	                     .pool_size = 1 << 20, .connect_timeout_ms = 3000, .verbose = -1 };
	tp_key_derive(secret, strlen(secret), o.key);
	return o;
}

static int raw_connect(uint16_t port)
{
	struct sockaddr_in sa = v4("127.0.0.1");
	sa.sin_port = htons(port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, SA(sa), sizeof sa), 0);
	return fd;
}

static void test_accept_past_strangers(void **state)
{
	(void)state;
	struct tp_opts o = tcp_opts("k", 3);
	struct tp_listener *l;
	assert_int_equal(tp_listen("127.0.0.1", 0, &o, &l), 0);
	uint16_t port = tp_listener_port(l);
	int junk[8];
	for (int i = 0; i < 8; i++) {   /* four silent, four talking nonsense */
		junk[i] = raw_connect(port);
		if (i % 2 && write(junk[i], "GET / HTTP/1.0\r\n\r\n", 18) != 18)
			fail();
	}
	struct tp_session *s = NULL;
	int64_t t0 = tp_now_ms();
	assert_int_equal(tp_accept(l, 300, &s), -ETIMEDOUT);   /* strangers: no session */
	assert_true(tp_now_ms() - t0 < 1000);
	struct conn_arg c = { .port = port, .o = tcp_opts("k", 3) };
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, connect_main, &c), 0);
	t0 = tp_now_ms();
	assert_int_equal(tp_accept(l, 5000, &s), 0);
	assert_true(tp_now_ms() - t0 < 1000);   /* not behind the silent ones */
	pthread_join(th, NULL);
	assert_int_equal(c.rc, 0);
	assert_int_equal(tp_streams(s), 3);
	/* one message through, then the verdict */
	struct tp_msg *m;
	assert_int_equal(tp_msg_get(c.s, &m), 0);
	memcpy(m->data, "hello", 5);
	m->len = 5;
	m->off = 7;
	assert_int_equal(tp_msg_send(c.s, m), 0);
	struct tp_msg *r;
	assert_int_equal(tp_msg_recv(s, &r), 0);
	assert_int_equal(r->len, 5);
	assert_int_equal(r->off, 7);
	assert_memory_equal(r->data, "hello", 5);
	tp_msg_release(s, r);
	for (int i = 0; i < 8; i++)
		close(junk[i]);
	tp_listener_free(l);
	tp_close(s);
	tp_close(c.s);
}


/* A sender that speaks the handshake by hand and sends its AUTH one byte at
 * a time: the listener's partial reads must put it together. */
struct trickle {
	uint16_t port;
	uint8_t key[TP_KEY_LEN];
	int rc;
};

static int read_n(int fd, uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = read(fd, p, n);
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static void *trickle_main(void *arg)
{
	struct trickle *c = arg;
	int fd = raw_connect(c->port);
	uint8_t in[TP_HDR_LEN + TP_HELLO_LEN], out[TP_HDR_LEN + TP_AUTH_LEN];
	struct tp_hello h;
	struct tp_auth a;
	c->rc = -1;
	if (read_n(fd, in, sizeof in) < 0 ||
	    tp_hs_answer(c->key, in + TP_HDR_LEN, TP_HELLO_LEN, 99, 1, 0, &h, &a,
	                 out + TP_HDR_LEN) < 0)
		goto done;
	tp_hdr_put(out, &(struct tp_hdr){ .type = TP_AUTH, .len = TP_AUTH_LEN });
	for (size_t i = 0; i < sizeof out; i++) {
		if (write(fd, out + i, 1) != 1)
			goto done;
		usleep(2000);
	}
	uint8_t ok[TP_HDR_LEN + TP_MAC_LEN];
	if (read_n(fd, ok, sizeof ok) == 0 && ok[0] == TP_AUTH_OK)
		c->rc = tp_hs_confirm(c->key, &h, &a, ok + TP_HDR_LEN, TP_MAC_LEN);
done:
	close(fd);
	return NULL;
}

static void test_accept_trickled_auth(void **state)
{
	(void)state;
	struct tp_opts o = tcp_opts("k", 1);
	struct tp_listener *l;
	assert_int_equal(tp_listen("127.0.0.1", 0, &o, &l), 0);
	struct trickle c = { .port = tp_listener_port(l) };
	memcpy(c.key, o.key, TP_KEY_LEN);
	int silent = raw_connect(c.port);   /* and one that says nothing beside it */
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, trickle_main, &c), 0);
	struct tp_session *s = NULL;
	assert_int_equal(tp_accept(l, 5000, &s), 0);
	pthread_join(th, NULL);
	assert_int_equal(c.rc, 0);   /* and the sender accepted our AUTH_OK */
	assert_int_equal(tp_streams(s), 1);
	close(silent);
	tp_close(s);
	tp_listener_free(l);
}

static void test_accept_only_the_allowed_peer(void **state)
{
	(void)state;
	struct tp_opts o = tcp_opts("k", 1);
	o.peer_addr = "127.0.0.2";
	struct tp_listener *l;
	assert_int_equal(tp_listen("127.0.0.1", 0, &o, &l), 0);
	struct conn_arg c = { .port = tp_listener_port(l), .o = tcp_opts("k", 1) };
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, connect_main, &c), 0);
	struct tp_session *s = NULL;
	assert_int_equal(tp_accept(l, 1000, &s), -ETIMEDOUT);
	pthread_join(th, NULL);
	assert_int_equal(c.rc, -ECONNRESET);   /* closed before a HELLO */
	tp_listener_free(l);
	struct tp_opts bad = tcp_opts("k", 1);
	bad.peer_addr = "not-an-address";
	assert_int_equal(tp_listen("127.0.0.1", 0, &bad, &l), -EINVAL);
}

/* A connected pair with this I/O timeout on both ends. */
static void pair(int io_ms, struct tp_session **snd, struct tp_session **rcv)
{
	struct tp_opts o = tcp_opts("k", 2);
	o.io_timeout_ms = io_ms;
	struct tp_listener *l;
	assert_int_equal(tp_listen("127.0.0.1", 0, &o, &l), 0);
	struct conn_arg c = { .port = tp_listener_port(l), .o = o };
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, connect_main, &c), 0);
	assert_int_equal(tp_accept(l, 5000, rcv), 0);
	pthread_join(th, NULL);
	assert_int_equal(c.rc, 0);
	*snd = c.s;
	tp_listener_free(l);
}

static void test_io_timeout(void **state)
{
	(void)state;
	struct tp_session *snd, *rcv;
	struct tp_msg *m;
	pair(300, &snd, &rcv);
	/* a receiver waiting for a sender that sends nothing */
	int64_t t0 = tp_now_ms();
	assert_int_equal(tp_msg_recv(rcv, &m), -ETIME);
	int64_t took = tp_now_ms() - t0;
	assert_true(took >= 290 && took < 2000);
	assert_int_equal(tp_msg_recv(rcv, &m), -ETIME);   /* and it stays dead */
	/* a sender waiting for a verdict that does not come */
	t0 = tp_now_ms();
	assert_int_equal(tp_finish(snd), -ETIME);
	took = tp_now_ms() - t0;
	assert_true(took >= 290 && took < 2000);
	tp_close(snd);
	tp_close(rcv);
	/* time between calls is not counted: a slow consumer is not a dead peer */
	pair(300, &snd, &rcv);
	assert_int_equal(tp_msg_get(snd, &m), 0);
	m->len = 1;
	assert_int_equal(tp_msg_send(snd, m), 0);
	usleep(600 * 1000);
	struct tp_msg *r;
	assert_int_equal(tp_msg_recv(rcv, &r), 0);
	tp_msg_release(rcv, r);
	tp_close(snd);
	tp_close(rcv);
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
		cmocka_unit_test(test_gate_addresses),
		cmocka_unit_test(test_gate_log_is_bounded),
		cmocka_unit_test(test_exit_code_of_timeout),
		cmocka_unit_test(test_accept_past_strangers),
		cmocka_unit_test(test_accept_trickled_auth),
		cmocka_unit_test(test_accept_only_the_allowed_peer),
		cmocka_unit_test(test_io_timeout),
	};
	return cmocka_run_group_tests_name("transport", tests, NULL, NULL);
}
