/* Transport wire messages and the authentication handshake; the listener's
 * gate; accept past strangers; the I/O timeout; the sealing of encrypted
 * sessions (also under the I/O timeout). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/exitcode.h"
#include "transport/tp_int.h"
#include "tests/unit/tp_pair.h"

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
	assert_int_equal(tp_hs_answer(h->key_s, h->hello, TP_HELLO_LEN, 42, 2, 1, 0,
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
	const char *tmp = getenv("TMPDIR");
	char path[512];
	snprintf(path, sizeof path, "%s/rdcp-gate-XXXXXX", tmp && *tmp ? tmp : "/tmp");
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

static int raw_connect(uint16_t port)
{
	struct sockaddr_in sa = v4("127.0.0.1");
	sa.sin_port = htons(port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, SA(sa), sizeof sa), 0);
	return fd;
}

/* A receiver that takes smaller messages than the sender asks for lowers
 * the sender's: tp_msg_cap() says so (sync refuses a session whose
 * buffers cannot hold a chunk: a sender reads a chunk into one). */
static void test_msg_cap_is_the_receivers(void **state)
{
	(void)state;
	struct tp_opts o = tcp_opts("k", 1);
	o.msg_size = 4096;
	struct tp_listener *l;
	assert_int_equal(tp_listen("127.0.0.1", 0, &o, &l), 0);
	struct conn_arg c = { .port = tp_listener_port(l), .o = tcp_opts("k", 1) };
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, connect_main, &c), 0);
	struct tp_session *s = NULL;
	assert_int_equal(tp_accept(l, 5000, &s), 0);
	pthread_join(th, NULL);
	assert_int_equal(c.rc, 0);
	assert_int_equal(tp_msg_cap(c.s), 4096);
	assert_int_equal(tp_msg_cap(s), 4096);
	struct tp_msg *m;
	assert_int_equal(tp_msg_get(c.s, &m), 0);
	assert_true(m->cap <= 4096);
	tp_msg_put(c.s, m);
	tp_listener_free(l);
	tp_close(s);
	tp_close(c.s);
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
	int64_t t0 = clock_ms();
	assert_int_equal(tp_accept(l, 300, &s), -ETIMEDOUT);   /* strangers: no session */
	assert_true(clock_ms() - t0 < 1000);
	struct conn_arg c = { .port = port, .o = tcp_opts("k", 3) };
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, connect_main, &c), 0);
	t0 = clock_ms();
	assert_int_equal(tp_accept(l, 5000, &s), 0);
	assert_true(clock_ms() - t0 < 1000);   /* not behind the silent ones */
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
	    tp_hs_answer(c->key, in + TP_HDR_LEN, TP_HELLO_LEN, 99, 1, 0, 0, &h, &a,
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

static void test_io_timeout(void **state)
{
	(void)state;
	struct tp_session *snd, *rcv;
	struct tp_msg *m;
	pair(300, &snd, &rcv);
	/* a receiver waiting for a sender that sends nothing */
	int64_t t0 = clock_ms();
	assert_int_equal(tp_msg_recv(rcv, &m), -ETIME);
	int64_t took = clock_ms() - t0;
	assert_true(took >= 290 && took < 2000);
	assert_int_equal(tp_msg_recv(rcv, &m), -ETIME);   /* and it stays dead */
	/* a sender waiting for a verdict that does not come */
	t0 = clock_ms();
	assert_int_equal(tp_finish(snd), -ETIME);
	took = clock_ms() - t0;
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

static void *finish_main(void *arg)
{
	return (void *)(intptr_t)tp_finish(arg);
}

/* Messages that name a file range (tp_msg.file_fd) arrive as those bytes;
 * one whose file is shorter than it says arrives padded with zeros (the
 * framing holds; the caller's digest catches it); the fds are closed. A
 * sealed session does not take them. */
static void test_file_messages(void **state)
{
	(void)state;
	struct tp_session *snd, *rcv;
	struct tp_msg *m, *r;
	char path[] = "/tmp/rdcp-unit-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	uint8_t data[100000];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(pwrite(fd, data, sizeof data, 0), (ssize_t)sizeof data);
	pair(5000, &snd, &rcv);
	assert_int_equal(tp_sends_files(snd), 1);
	int before = fcntl(fd, F_DUPFD, 0);
	close(before);   /* the lowest free fd number now */
	for (int k = 0; k < 2; k++) {
		assert_int_equal(tp_msg_get(snd, &m), 0);
		m->id = 9 + (uint64_t)k;
		m->off = 1000;
		m->len = k ? 5000 : 60000;   /* the second: 1,000 bytes past the end */
		m->file_off = k ? 99000 : 1000;
		m->file_fd = fcntl(fd, F_DUPFD, 0);
		assert_true(m->file_fd >= 0);
		assert_int_equal(tp_msg_send(snd, m), 0);
	}
	for (int n = 0; n < 2; n++) {   /* two streams: in either order */
		assert_int_equal(tp_msg_recv(rcv, &r), 0);
		int k = (int)r->id - 9;
		assert_true(k == 0 || k == 1);
		if (!k) {
			assert_int_equal(r->len, 60000);
			assert_memory_equal(r->data, data + 1000, 60000);
		} else {
			uint8_t want[5000] = { 0 };
			memcpy(want, data + 99000, 1000);
			assert_int_equal(r->len, 5000);
			assert_memory_equal(r->data, want, 5000);
		}
		tp_msg_release(rcv, r);
	}
	pthread_t th;   /* finish waits for the verdict */
	assert_int_equal(pthread_create(&th, NULL, finish_main, snd), 0);
	assert_int_equal(tp_msg_recv(rcv, &r), 1);
	tp_verdict(rcv, 0);
	void *frc;
	pthread_join(th, &frc);
	assert_int_equal((intptr_t)frc, 0);
	tp_close(snd);
	tp_close(rcv);
	int after = fcntl(fd, F_DUPFD, 0);   /* the transport closed its dups */
	assert_int_equal(after, before);
	close(after);
	/* sealed: refused, and the fd is still closed */
	pair_enc(5000, 1, &snd, &rcv);
	assert_int_equal(tp_sends_files(snd), 0);
	assert_int_equal(tp_msg_get(snd, &m), 0);
	m->len = 10;
	m->file_fd = fcntl(fd, F_DUPFD, 0);
	assert_int_equal(tp_msg_send(snd, m), -EINVAL);
	after = fcntl(fd, F_DUPFD, 0);
	assert_int_equal(after, before);
	close(after);
	tp_close(snd);
	tp_close(rcv);
	close(fd);
}

/* --- encrypted sessions --- */

/* A handshake where the receiver does (r_enc) or does not encrypt, and so
 * does the sender (s_enc), with key "k"; returns the receiver's check. */
static int enc_handshake(struct hs *h, int r_enc, int s_enc, uint64_t session, int index)
{
	tp_key_derive("k", 1, h->key_r);
	memcpy(h->key_s, h->key_r, TP_KEY_LEN);
	tp_hs_hello(&h->hello_r, 1 << 20, 0);
	h->hello_r.flags = tp_seal_offer(r_enc);
	tp_hello_put(h->hello, &h->hello_r);
	assert_int_equal(tp_hs_answer(h->key_s, h->hello, TP_HELLO_LEN, session, 2, index, s_enc,
	                              &h->hello_s, &h->auth_s, h->answer), 0);
	return tp_hs_check(h->key_r, &h->hello_r, h->answer, TP_AUTH_LEN, &h->auth_r, h->ok);
}

static void test_handshake_encrypt(void **state)
{
	(void)state;
	struct hs h;
	assert_int_equal(enc_handshake(&h, 1, 1, 7, 0), 0);
	assert_int_equal(h.hello_s.flags & TP_HF_ENCRYPT, TP_HF_ENCRYPT);
	assert_int_not_equal(h.auth_s.cipher, TP_CIPHER_NONE);
	assert_int_equal(h.auth_r.cipher, h.auth_s.cipher);
	assert_int_equal(tp_hs_agree(h.hello_s.flags, h.auth_s.cipher), 0);
	assert_int_equal(tp_hs_confirm(h.key_s, &h.hello_s, &h.auth_s, h.ok, TP_MAC_LEN), 0);
	if (tp_seal_offer(1) & TP_HF_AESGCM)
		assert_int_equal(h.auth_s.cipher, TP_CIPHER_AESGCM);
	/* one side only: the receiver says so (after the MAC), the sender too */
	assert_int_equal(enc_handshake(&h, 1, 0, 7, 0), -EPROTONOSUPPORT);
	assert_int_equal(tp_hs_agree(h.hello_s.flags, h.auth_s.cipher), -EPROTONOSUPPORT);
	assert_int_equal(enc_handshake(&h, 0, 1, 7, 0), -EPROTONOSUPPORT);
	assert_int_equal(tp_hs_agree(h.hello_s.flags, h.auth_s.cipher), -EPROTONOSUPPORT);
	/* neither: the v1 answer, byte for byte (cipher field 0) */
	assert_int_equal(enc_handshake(&h, 0, 0, 7, 0), 0);
	assert_int_equal(h.answer[6] | h.answer[7], 0);
	/* a receiver without AES-NI: ChaCha20-Poly1305, whatever this CPU has */
	assert_int_equal(tp_seal_pick(TP_HF_ENCRYPT), TP_CIPHER_CHACHA);
	/* AES-256-GCM when it was not offered */
	assert_int_equal(tp_hs_agree(TP_HF_ENCRYPT, TP_CIPHER_AESGCM), -EPROTO);
}

/* hex (2 * n digits) into out[n] */
static void hex_to(uint8_t *out, const char *hex)
{
	for (size_t i = 0; hex[2 * i]; i++) {
		unsigned v;
		assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* The wire did not change when sealing moved from libsodium to OpenSSL:
 * known answers computed with libsodium (crypto_aead_*_encrypt_detached,
 * crypto_generichash), for a fixed key, nonce (stream 1, message 5) and
 * header, so peers of either build understand each other. */
static void test_seal_known_answers(void **state)
{
	(void)state;
	uint8_t hdr[TP_HDR_LEN], p[10], tag[TP_TAG_LEN], want[TP_TAG_LEN], wc[10];
	for (int i = 0; i < TP_HDR_LEN; i++)
		hdr[i] = (uint8_t)(0x11 * (i % 15));
	struct tp_seal k = { .stream = 1, .seq = 5 };
	for (int i = 0; i < TP_KEY_LEN; i++)
		k.key[i] = (uint8_t)i;
	k.cipher = TP_CIPHER_AESGCM;
	memcpy(p, "hello rdcp", 10);
	tp_seal(&k, hdr, p, 10, tag);
	hex_to(wc, "d6e301790186e70a8000");
	hex_to(want, "ae8f4f6aa1fcc4e4346bdd0c59a388a8");
	assert_memory_equal(p, wc, 10);
	assert_memory_equal(tag, want, TP_TAG_LEN);
	assert_int_equal(k.seq, 6);
	k.seq = 5;
	assert_int_equal(tp_unseal(&k, hdr, p, 10, tag), 0);
	assert_memory_equal(p, "hello rdcp", 10);
	k.seq = 5;   /* an empty message (END): the tag alone */
	tp_seal(&k, hdr, NULL, 0, tag);
	hex_to(want, "5e2c3bee707bd849d0411b913819945a");
	assert_memory_equal(tag, want, TP_TAG_LEN);
	k.cipher = TP_CIPHER_CHACHA;
	k.seq = 5;
	tp_seal(&k, hdr, p, 10, tag);
	hex_to(wc, "2d8fb229039a38b6ab2d");
	hex_to(want, "a01b2805f66dfbce0269b7ed64f97a13");
	assert_memory_equal(p, wc, 10);
	assert_memory_equal(tag, want, TP_TAG_LEN);
	k.seq = 5;
	tag[3] ^= 1;   /* one bit of the tag */
	assert_int_equal(tp_unseal(&k, hdr, p, 10, tag), -EBADMSG);
	/* the key derivation: keyed BLAKE2b-256 */
	uint8_t key[TP_KEY_LEN], wk[TP_KEY_LEN];
	tp_key_derive("k", 1, key);
	hex_to(wk, "40b9485bfef6f6d00ab727c6cec5c88e5f295f4d082c54e8b9f7d7aefcb375a9");
	assert_memory_equal(key, wk, TP_KEY_LEN);
}

/* The MACs of a session that does not encrypt are the version-1 ones. */
static void test_handshake_v1_mac(void **state)
{
	(void)state;
	uint8_t key[TP_KEY_LEN], ns[TP_NONCE_LEN], got[TP_MAC_LEN], want[TP_MAC_LEN];
	uint8_t ident[12] = { 0, 0, 0, 0, 0, 0, 0, 42, 0, 2, 0, 1 };
	struct tp_auth a = { .streams = 2, .index = 1, .session = 42 };
	tp_key_derive("k", 1, key);
	memset(ns, 3, sizeof ns);
	memset(a.nonce, 5, sizeof a.nonce);
	tp_auth_mac(key, ns, &a, got);
	/* HMAC-SHA-256(key, "rdcp v1 sender\0" || ns || nonce || ident), as
	 * libsodium computed it before rdcp moved to OpenSSL: the same MAC */
	(void)ident;
	hex_to(want, "1b641e015f47e813e42496e2c57978ab2f8fb6e1375e7ca865162a6978705904");
	assert_memory_equal(got, want, TP_MAC_LEN);
	/* and with encryption the flags and the cipher are covered */
	a.hflags = TP_HF_ENCRYPT;
	a.cipher = TP_CIPHER_CHACHA;
	tp_auth_mac(key, ns, &a, got);
	assert_memory_not_equal(got, want, TP_MAC_LEN);
}

/* A man in the middle that turns the receiver's AES flag off (to steer the
 * cipher) or its ENCRYPT flag (to have a sender send in the clear). */
static void test_handshake_flags_tampered(void **state)
{
	(void)state;
	struct hs h;
	tp_key_derive("k", 1, h.key_r);
	tp_hs_hello(&h.hello_r, 1 << 20, 0);
	h.hello_r.flags = TP_HF_ENCRYPT | TP_HF_AESGCM;
	struct tp_hello seen = h.hello_r;
	seen.flags = TP_HF_ENCRYPT;   /* what the sender is shown */
	tp_hello_put(h.hello, &seen);
	assert_int_equal(tp_hs_answer(h.key_r, h.hello, TP_HELLO_LEN, 1, 1, 0, 1,
	                              &h.hello_s, &h.auth_s, h.answer), 0);
	assert_int_equal(tp_hs_check(h.key_r, &h.hello_r, h.answer, TP_AUTH_LEN, &h.auth_r, h.ok),
	                 -EACCES);
	/* the sender refuses a receiver that (it is told) does not encrypt */
	seen.flags = 0;
	tp_hello_put(h.hello, &seen);
	assert_int_equal(tp_hs_answer(h.key_r, h.hello, TP_HELLO_LEN, 1, 1, 0, 1,
	                              &h.hello_s, &h.auth_s, h.answer), 0);
	assert_int_equal(tp_hs_agree(h.hello_s.flags, h.auth_s.cipher), -EPROTONOSUPPORT);
}

static void test_hello_flags_rejects(void **state)
{
	(void)state;
	struct tp_hello h, g;
	uint8_t p[TP_HELLO_LEN];
	tp_hs_hello(&h, 1 << 20, 8);
	for (unsigned f = 0; f < 16; f++) {
		h.flags = (uint16_t)f;
		tp_hello_put(p, &h);
		int ok = f == 0 || f == TP_HF_ENCRYPT || f == (TP_HF_ENCRYPT | TP_HF_AESGCM);
		assert_int_equal(tp_hello_get(p, TP_HELLO_LEN, &g), ok ? 0 : -EPROTO);
		if (ok)
			assert_int_equal(g.flags, f);
	}
	h.flags = 0x8000;
	tp_hello_put(p, &h);
	assert_int_equal(tp_hello_get(p, TP_HELLO_LEN, &g), -EPROTO);
	struct tp_auth a = { .streams = 1, .index = 0, .cipher = TP_CIPHER_CHACHA + 1 }, b;
	uint8_t q[TP_AUTH_LEN];
	tp_auth_put(q, &a);
	assert_int_equal(tp_auth_get(q, TP_AUTH_LEN, &b), -EPROTO);
	a.cipher = TP_CIPHER_CHACHA;
	tp_auth_put(q, &a);
	assert_int_equal(tp_auth_get(q, TP_AUTH_LEN, &b), 0);
	assert_int_equal(b.cipher, TP_CIPHER_CHACHA);
}

/* Both ends' keys of one stream of an encrypted session. */
struct ends {
	struct hs h;
	struct tp_seal tx, rx;     /* sender to receiver: sender's, receiver's */
	struct tp_seal vtx, vrx;   /* receiver to sender (the verdict) */
};

static void ends_make(struct ends *e, int cipher, uint64_t session, int index)
{
	assert_int_equal(enc_handshake(&e->h, 1, 1, session, index), 0);
	/* force the cipher under test (the MACs are not checked again) */
	e->h.auth_s.cipher = e->h.auth_r.cipher = (uint16_t)cipher;
	struct tp_hs s = { e->h.hello_s, e->h.auth_s }, r = { e->h.hello_r, e->h.auth_r };
	tp_seal_init(&e->tx, e->h.key_s, &s, TP_DIR_S2R);
	tp_seal_init(&e->vrx, e->h.key_s, &s, TP_DIR_R2S);
	tp_seal_init(&e->rx, e->h.key_r, &r, TP_DIR_S2R);
	tp_seal_init(&e->vtx, e->h.key_r, &r, TP_DIR_R2S);
}

static int ciphers(int out[2])
{
	int n = 0;
	out[n++] = TP_CIPHER_CHACHA;
	if (tp_seal_offer(1) & TP_HF_AESGCM)
		out[n++] = TP_CIPHER_AESGCM;
	else
		print_message("NOTE: no AES-NI on this CPU: AES-256-GCM NOT TESTED here\n");
	return n;
}

/* A sealed DATA message: header, payload, tag. */
struct sealed {
	uint8_t hdr[TP_HDR_LEN], p[4100], tag[TP_TAG_LEN];
	uint32_t len;
};

static void seal_one(struct tp_seal *k, struct sealed *m, uint64_t off, uint32_t len)
{
	m->len = len;
	tp_hdr_put(m->hdr, &(struct tp_hdr){ .type = TP_DATA, .len = len, .id = 1, .off = off });
	for (uint32_t i = 0; i < len; i++)
		m->p[i] = (uint8_t)(off + i);
	tp_seal(k, m->hdr, m->p, len, m->tag);
}

static int open_copy(struct tp_seal *k, const struct sealed *m)
{
	struct sealed c = *m;   /* a failed open leaves garbage in place */
	return tp_unseal(k, c.hdr, c.p, c.len, c.tag);
}

static void test_seal_roundtrip(void **state)
{
	(void)state;
	int cs[2], n = ciphers(cs);
	for (int c = 0; c < n; c++) {
		struct ends e;
		ends_make(&e, cs[c], 9, 1);
		static const uint32_t lens[] = { 0, 1, 16, 4097, 4100 };
		for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
			struct sealed m;
			uint8_t plain[sizeof m.p];
			seal_one(&e.tx, &m, 1000 * i, lens[i]);
			for (uint32_t j = 0; j < lens[i]; j++)
				plain[j] = (uint8_t)(1000 * i + j);
			if (lens[i] >= 16)   /* encrypted, not just tagged */
				assert_memory_not_equal(m.p, plain, lens[i]);
			assert_int_equal(tp_unseal(&e.rx, m.hdr, m.p, m.len, m.tag), 0);   /* in place */
			for (uint32_t j = 0; j < lens[i]; j++)
				assert_int_equal(m.p[j], (uint8_t)(1000 * i + j));
		}
		/* the verdict, the other way */
		uint8_t vh[TP_HDR_LEN], tag[TP_TAG_LEN];
		tp_hdr_put(vh, &(struct tp_hdr){ .type = TP_VERDICT });
		tp_seal(&e.vtx, vh, NULL, 0, tag);
		assert_int_equal(tp_unseal(&e.vrx, vh, NULL, 0, tag), 0);
		/* under the other direction's key it does not open */
		tp_seal(&e.vtx, vh, NULL, 0, tag);
		assert_int_equal(tp_unseal(&e.tx, vh, NULL, 0, tag), -EBADMSG);
	}
}

/* Every bit of header, payload and tag matters. */
static void test_seal_tamper(void **state)
{
	(void)state;
	int cs[2], n = ciphers(cs);
	for (int c = 0; c < n; c++) {
		struct ends e;
		ends_make(&e, cs[c], 9, 0);
		struct sealed m;
		seal_one(&e.tx, &m, 0, 64);
		for (size_t bit = 0; bit < (TP_HDR_LEN + 64 + TP_TAG_LEN) * 8; bit++) {
			struct sealed t = m;
			size_t i = bit / 8;
			uint8_t *b = i < TP_HDR_LEN ? &t.hdr[i]
			             : i < TP_HDR_LEN + 64 ? &t.p[i - TP_HDR_LEN]
			             : &t.tag[i - TP_HDR_LEN - 64];
			*b ^= (uint8_t)(1u << (bit % 8));
			assert_int_equal(open_copy(&e.rx, &t), -EBADMSG);
		}
		assert_int_equal(e.rx.seq, 0);   /* failures do not advance */
		assert_int_equal(open_copy(&e.rx, &m), 0);
		/* truncated (a shorter len, as a header rewritten to match would say) */
		struct sealed t = m;
		t.len = 63;
		tp_hdr_put(t.hdr, &(struct tp_hdr){ .type = TP_DATA, .len = 63, .id = 1 });
		struct tp_seal rx2 = e.rx;
		rx2.seq = 0;
		assert_int_equal(open_copy(&rx2, &t), -EBADMSG);
	}
}

/* Another key: another secret, another session (a recording replayed into
 * a new one), another stream of the same session, another cipher. */
static void test_seal_wrong_key(void **state)
{
	(void)state;
	int cs[2], n = ciphers(cs);
	for (int c = 0; c < n; c++) {
		struct ends e, other, stream1, same;
		ends_make(&e, cs[c], 9, 0);
		struct sealed m;
		seal_one(&e.tx, &m, 0, 100);
		/* same session id and index, fresh nonces: the replay into a new run */
		ends_make(&same, cs[c], 9, 0);
		assert_int_equal(open_copy(&same.rx, &m), -EBADMSG);
		ends_make(&stream1, cs[c], 9, 1);
		assert_int_equal(open_copy(&stream1.rx, &m), -EBADMSG);
		/* the same nonces under another secret */
		struct tp_hs r = { e.h.hello_r, e.h.auth_r };
		uint8_t k2[TP_KEY_LEN];
		tp_key_derive("K", 1, k2);
		tp_seal_init(&other.rx, k2, &r, TP_DIR_S2R);
		assert_int_equal(open_copy(&other.rx, &m), -EBADMSG);
		/* the right key opens it (so the failures above are the key's) */
		assert_int_equal(open_copy(&e.rx, &m), 0);
	}
	/* the other cipher under the same handshake */
	if (n == 2) {
		struct ends e;
		ends_make(&e, TP_CIPHER_AESGCM, 9, 0);
		struct sealed m;
		seal_one(&e.tx, &m, 0, 100);
		struct tp_hs r = { e.h.hello_r, e.h.auth_r };
		r.a.cipher = TP_CIPHER_CHACHA;
		struct tp_seal rx;
		tp_seal_init(&rx, e.h.key_r, &r, TP_DIR_S2R);
		assert_int_equal(open_copy(&rx, &m), -EBADMSG);
	}
}

/* The nonce is the position in the stream: a replayed, dropped or
 * reordered message does not open, nor one from another stream index. */
static void test_seal_wrong_nonce(void **state)
{
	(void)state;
	int cs[2], n = ciphers(cs);
	for (int c = 0; c < n; c++) {
		struct ends e;
		ends_make(&e, cs[c], 9, 0);
		struct sealed m[3];
		for (int i = 0; i < 3; i++)
			seal_one(&e.tx, &m[i], 100u * (unsigned)i, 100);
		struct tp_seal rx = e.rx;
		assert_int_equal(open_copy(&rx, &m[1]), -EBADMSG);   /* 0 dropped / 0 and 1 swapped */
		assert_int_equal(open_copy(&rx, &m[0]), 0);
		assert_int_equal(open_copy(&rx, &m[0]), -EBADMSG);   /* replayed */
		assert_int_equal(open_copy(&rx, &m[2]), -EBADMSG);   /* 1 dropped */
		assert_int_equal(open_copy(&rx, &m[1]), 0);
		assert_int_equal(open_copy(&rx, &m[2]), 0);
		/* the same key with another stream index in the nonce */
		rx = e.rx;
		rx.stream = 1;
		assert_int_equal(open_copy(&rx, &m[0]), -EBADMSG);
		/* a position far away */
		rx = e.rx;
		rx.seq = 1ull << 32;
		assert_int_equal(open_copy(&rx, &m[0]), -EBADMSG);
	}
}

/* --- both at once: sealed sessions under the I/O timeout, and the
 * concurrent listener's part of the encryption handshake --- */

static void test_io_timeout_sealed(void **state)
{
	(void)state;
	struct tp_session *snd, *rcv;
	struct tp_msg *m, *r;
	pair_enc(300, 1, &snd, &rcv);
	assert_non_null(tp_cipher_name(snd));
	assert_non_null(tp_cipher_name(rcv));
	/* a sealed message arrives intact, after a pause not counted */
	assert_int_equal(tp_msg_get(snd, &m), 0);
	memcpy(m->data, "sealed", 6);
	m->len = 6;
	m->off = 42;
	assert_int_equal(tp_msg_send(snd, m), 0);
	usleep(600 * 1000);
	assert_int_equal(tp_msg_recv(rcv, &r), 0);
	assert_int_equal(r->len, 6);
	assert_int_equal(r->off, 42);
	assert_memory_equal(r->data, "sealed", 6);
	tp_msg_release(rcv, r);
	/* then nothing: both ends time out */
	int64_t t0 = clock_ms();
	assert_int_equal(tp_msg_recv(rcv, &r), -ETIME);
	int64_t took = clock_ms() - t0;
	assert_true(took >= 290 && took < 2000);
	assert_int_equal(tp_finish(snd), -ETIME);
	tp_close(snd);
	tp_close(rcv);
}

/* A sender that knows the key but disagrees about encrypting ends the
 * wait on the concurrent listener (-EPROTO), unlike a stranger; and the
 * sender fails too. Both ways. */
static void test_accept_encrypt_mismatch(void **state)
{
	(void)state;
	for (int r_enc = 0; r_enc < 2; r_enc++) {
		struct tp_opts o = tcp_opts("k", 2);
		o.encrypt = r_enc;
		struct tp_listener *l;
		assert_int_equal(tp_listen("127.0.0.1", 0, &o, &l), 0);
		struct conn_arg c = { .port = tp_listener_port(l), .o = tcp_opts("k", 2) };
		c.o.encrypt = !r_enc;
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, connect_main, &c), 0);
		struct tp_session *s = NULL;
		assert_int_equal(tp_accept(l, 5000, &s), -EPROTO);
		pthread_join(th, NULL);
		assert_int_equal(c.rc, -EPROTO);
		assert_null(s);
		tp_listener_free(l);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_roundtrip),
		cmocka_unit_test(test_file_messages),
		cmocka_unit_test(test_header_rejects),
		cmocka_unit_test(test_handshake_ok),
		cmocka_unit_test(test_handshake_wrong_key),
		cmocka_unit_test(test_handshake_tampering),
		cmocka_unit_test(test_hello_rejects),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_gate_addresses),
		cmocka_unit_test(test_gate_log_is_bounded),
		cmocka_unit_test(test_exit_code_of_timeout),
		cmocka_unit_test(test_msg_cap_is_the_receivers),
		cmocka_unit_test(test_accept_past_strangers),
		cmocka_unit_test(test_accept_trickled_auth),
		cmocka_unit_test(test_accept_only_the_allowed_peer),
		cmocka_unit_test(test_io_timeout),
		cmocka_unit_test(test_handshake_encrypt),
		cmocka_unit_test(test_handshake_v1_mac),
		cmocka_unit_test(test_seal_known_answers),
		cmocka_unit_test(test_handshake_flags_tampered),
		cmocka_unit_test(test_hello_flags_rejects),
		cmocka_unit_test(test_seal_roundtrip),
		cmocka_unit_test(test_seal_tamper),
		cmocka_unit_test(test_seal_wrong_key),
		cmocka_unit_test(test_seal_wrong_nonce),
		cmocka_unit_test(test_io_timeout_sealed),
		cmocka_unit_test(test_accept_encrypt_mismatch),
	};
	return cmocka_run_group_tests_name("transport", tests, NULL, NULL);
}
