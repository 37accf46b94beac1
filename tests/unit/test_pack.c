/* The archive of small files (sync/archive/pack.c) over a real TCP session: a
 * message the packer flushes early holds whole entries, so the receiver
 * writes every file in it without waiting for the next message; entries
 * written from the messages they came in survive those messages' reuse. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "sync/archive/archive.h"
#include "transport/transport.h"
#include "tests/unit/tp_pair.h"

struct seen {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int closed, bad;
	uint64_t got[4];
};

static int op_open(void *ctx, uint64_t index, uint64_t size)
{
	(void)ctx, (void)index, (void)size;
	return open("/dev/null", O_WRONLY | O_CLOEXEC);
}

static int op_close(void *ctx, uint64_t index, int err, const uint8_t *hash, uint64_t got)
{
	struct seen *s = ctx;
	(void)hash;
	pthread_mutex_lock(&s->mu);
	if (err || index >= 4)
		s->bad++;
	else
		s->got[index] = got;
	s->closed++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static void op_damaged(void *ctx, const char *msg)
{
	struct seen *s = ctx;
	print_error("damaged: %s\n", msg);
	pthread_mutex_lock(&s->mu);
	s->bad++;
	pthread_mutex_unlock(&s->mu);
}

/* Waits up to 5 s for n files written; how many were. */
static int wait_closed(struct seen *s, int n)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	pthread_mutex_lock(&s->mu);
	while (s->closed < n && pthread_cond_timedwait(&s->cv, &s->mu, &until) != ETIMEDOUT)
		;
	int got = s->closed;
	pthread_mutex_unlock(&s->mu);
	return got;
}

static void add(struct packer *p, uint32_t index, const uint8_t *data, uint64_t size)
{
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits(data, size));
	assert_int_equal(packer_add(p, index, data, size, c.digest), 0);
}

/* An archive entry's tag is keyed BLAKE2b-128 of index || size || hash,
 * byte for byte what libsodium's crypto_generichash made before rdcp moved
 * to OpenSSL (the known answer below is libsodium's). */
static void test_entry_tag_known_answer(void **state)
{
	(void)state;
	uint8_t key[SYNC_AKEY_LEN], hash[IDX_HASH_LEN], tag[SYNC_TAG_LEN];
	static const uint8_t want[SYNC_TAG_LEN] = {
		0xe3, 0xae, 0x51, 0x7d, 0x3a, 0x75, 0x8d, 0x6b,
		0x3b, 0x07, 0x9e, 0x9b, 0x2a, 0xf8, 0x81, 0x44 };
	for (int i = 0; i < SYNC_AKEY_LEN; i++)
		key[i] = (uint8_t)i;
	for (int i = 0; i < IDX_HASH_LEN; i++)
		hash[i] = (uint8_t)(0xb0 + i);
	sync_entry_tag(key, 0xa0a1a2a3a4a5a6a7ull, 0xa8a9aaabacadaeafull, hash, tag);
	assert_memory_equal(tag, want, SYNC_TAG_LEN);
	/* the thread's MAC context keeps the last key: the same key again,
	 * another key (another tag), then the first again */
	uint8_t again[SYNC_TAG_LEN], other[SYNC_TAG_LEN], key2[SYNC_AKEY_LEN];
	sync_entry_tag(key, 0xa0a1a2a3a4a5a6a7ull, 0xa8a9aaabacadaeafull, hash, again);
	assert_memory_equal(again, want, SYNC_TAG_LEN);
	memcpy(key2, key, sizeof key2);
	key2[SYNC_AKEY_LEN - 1] ^= 1;
	sync_entry_tag(key2, 0xa0a1a2a3a4a5a6a7ull, 0xa8a9aaabacadaeafull, hash, other);
	assert_memory_not_equal(other, want, SYNC_TAG_LEN);
	sync_entry_tag(key, 0xa0a1a2a3a4a5a6a7ull, 0xa8a9aaabacadaeafull, hash, again);
	assert_memory_equal(again, want, SYNC_TAG_LEN);
	sync_entry_tag(key2, 0xa0a1a2a3a4a5a6a7ull, 0xa8a9aaabacadaeafull, hash, again);
	assert_memory_equal(again, other, SYNC_TAG_LEN);
}

static void test_flushed_message_holds_whole_entries(void **state)
{
	(void)state;
	static const struct unpack_ops ops = { .open = op_open, .close = op_close,
	                                       .damaged = op_damaged };
	struct seen s = { .mu = PTHREAD_MUTEX_INITIALIZER };
	pthread_cond_init(&s.cv, NULL);
	uint8_t key[SYNC_AKEY_LEN], data[3000];
	for (size_t i = 0; i < sizeof key; i++)
		key[i] = (uint8_t)(i * 7);
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 31 + 5);
	struct tp_session *snd, *rcv;
	pair(5000, &snd, &rcv);
	struct packer *p;
	struct unpacker *u;
	struct tp_msg *m1, *m2;
	assert_int_equal(packer_open(&p, snd, key), 0);
	assert_int_equal(unpacker_start(&u, NULL, key, &ops, &s), 0);

	/* two files whose sizes are not a multiple of tar's 512-byte block */
	add(p, 0, data, 100);
	add(p, 1, data + 100, 1000);
	assert_int_equal(packer_flush(p), 0);
	assert_int_equal(tp_msg_recv(rcv, &m1), 0);
	assert_true(m1->id == SYNC_ARCHIVE_ID);
	assert_int_equal(m1->off, 0);
	assert_int_equal(m1->len % 512, 0);   /* the last entry's padding is in it */
	unpacker_push(u, m1);
	/* both are written before anything more is sent */
	assert_int_equal(wait_closed(&s, 2), 2);

	add(p, 2, data, 3000);
	assert_int_equal(packer_close(p, 1), 0);
	assert_int_equal(tp_msg_recv(rcv, &m2), 0);
	assert_int_equal(m2->off, m1->len);
	unpacker_push(u, m2);
	assert_int_equal(unpacker_finish(u), 0);
	assert_int_equal(s.closed, 3);
	assert_int_equal(s.bad, 0);
	assert_int_equal(s.got[0], 100);
	assert_int_equal(s.got[1], 1000);
	assert_int_equal(s.got[2], 3000);
	tp_msg_release(rcv, m1);
	tp_msg_release(rcv, m2);
	tp_close(snd);
	tp_close(rcv);
	pthread_cond_destroy(&s.cv);
}

/* --- the receiver's jobs share the messages they came in --- */

#define LOAD_FILES 3000

struct load {
	pthread_mutex_t mu;
	int closed, bad, damaged;
};

static int load_open(void *ctx, uint64_t index, uint64_t size)
{
	(void)ctx, (void)index, (void)size;
	usleep((unsigned)(rand() % 200));   /* writers lag behind the reader */
	return open("/dev/null", O_WRONLY | O_CLOEXEC);
}

/* A message given back while a job still pointed into it shows here: its
 * bytes are another message's by then, and the tag does not match. */
static int load_close(void *ctx, uint64_t index, int err, const uint8_t *hash, uint64_t got)
{
	struct load *l = ctx;
	(void)hash, (void)got;
	pthread_mutex_lock(&l->mu);
	l->bad += err || index >= LOAD_FILES;
	l->closed++;
	pthread_mutex_unlock(&l->mu);
	return 0;
}

static void load_damaged(void *ctx, const char *msg)
{
	struct load *l = ctx;
	print_error("damaged: %s\n", msg);
	pthread_mutex_lock(&l->mu);
	l->damaged++;
	pthread_mutex_unlock(&l->mu);
}

struct pusher {
	struct tp_session *rcv;
	struct unpacker *u;
	int abandon_at;   /* the nth message: the stream is given up there (0: never) */
};

static void *push_main(void *arg)
{
	struct pusher *ps = arg;
	struct tp_msg *m;
	for (int n = 1; tp_msg_recv(ps->rcv, &m) == 0; n++) {
		if (n == ps->abandon_at)
			unpacker_abandon(ps->u);
		unpacker_push(ps->u, m);
	}
	tp_verdict(ps->rcv, 0);
	return NULL;
}

/* LOAD_FILES entries of 0-12,000 bytes (some across two messages) through
 * a session of four 16 KiB buffers, each reused as soon as it is given
 * back; flushed early now and then. */
static void load_run(int abandon_at)
{
	static const struct unpack_ops ops = { .open = load_open, .close = load_close,
	                                       .damaged = load_damaged };
	static uint8_t data[12100];
	struct load l = { .mu = PTHREAD_MUTEX_INITIALIZER };
	uint8_t key[SYNC_AKEY_LEN] = { 1 };
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 131 + 7);
	struct tp_opts o = tcp_opts("k", 2);
	o.msg_size = 16 << 10;
	o.pool_size = 64 << 10;
	struct tp_listener *lis;
	assert_int_equal(tp_listen("127.0.0.1", 0, &o, &lis), 0);
	struct conn_arg c = { .port = tp_listener_port(lis), .o = o };
	pthread_t th;
	struct tp_session *snd, *rcv;
	assert_int_equal(pthread_create(&th, NULL, connect_main, &c), 0);
	assert_int_equal(tp_accept(lis, 5000, &rcv), 0);
	pthread_join(th, NULL);
	assert_int_equal(c.rc, 0);
	snd = c.s;
	tp_listener_free(lis);
	struct packer *p;
	struct unpacker *u;
	assert_int_equal(packer_open(&p, snd, key), 0);
	assert_int_equal(unpacker_start(&u, rcv, key, &ops, &l), 0);
	struct pusher ps = { rcv, u, abandon_at };
	assert_int_equal(pthread_create(&th, NULL, push_main, &ps), 0);
	srand(7);
	for (uint32_t i = 0; i < LOAD_FILES; i++) {
		/* most within one message, some across two, some empty */
		uint64_t size = i % 97 == 0 ? 0 : i % 5 ? (uint64_t)(rand() % 3000)
		                                        : (uint64_t)(rand() % 12000);
		add(p, i, data + i % 100, size);
		if (i % 13 == 0)
			assert_int_equal(packer_flush(p), 0);
	}
	assert_int_equal(packer_close(p, 1), 0);
	tp_finish(snd);
	pthread_join(th, NULL);
	int rc = unpacker_finish(u);
	assert_int_equal(l.bad, 0);   /* what was written is what was sent */
	if (!abandon_at) {
		assert_int_equal(rc, 0);
		assert_int_equal(l.closed, LOAD_FILES);
		assert_int_equal(l.damaged, 0);
	}
	tp_close(snd);
	tp_close(rcv);
}

static void test_shared_messages_under_load(void **state)
{
	(void)state;
	load_run(0);
	load_run(0);
}

static void test_shared_messages_abandoned(void **state)
{
	(void)state;
	load_run(5);
	load_run(40);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_entry_tag_known_answer),
		cmocka_unit_test(test_flushed_message_holds_whole_entries),
		cmocka_unit_test(test_shared_messages_under_load),
		cmocka_unit_test(test_shared_messages_abandoned),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
