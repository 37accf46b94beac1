/* A connected pair of TCP transport sessions over loopback, for unit tests
 * (header-only, test code only; include after cmocka.h). */
#ifndef RDCP_TEST_TP_PAIR_H
#define RDCP_TEST_TP_PAIR_H

#include <pthread.h>
#include <string.h>

#include "transport/transport.h"

struct conn_arg {
	uint16_t port;
	struct tp_opts o;
	struct tp_session *s;
	int rc;
};

static inline void *connect_main(void *arg)
{
	struct conn_arg *c = arg;
	c->rc = tp_connect("127.0.0.1", c->port, &c->o, &c->s);
	return NULL;
}

static inline struct tp_opts tcp_opts(const char *secret, int streams)
{
	struct tp_opts o = { .kind = TP_TCP, .streams = streams, .msg_size = 64 << 10,
	                     .pool_size = 1 << 20, .connect_timeout_ms = 3000, .verbose = -1 };
	tp_key_derive(secret, strlen(secret), o.key);
	return o;
}

/* A connected pair with this I/O timeout on both ends, sealed or not. */
static inline void pair_enc(int io_ms, int encrypt, struct tp_session **snd,
                            struct tp_session **rcv)
{
	struct tp_opts o = tcp_opts("k", 2);
	o.io_timeout_ms = io_ms;
	o.encrypt = encrypt;
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

static inline void pair(int io_ms, struct tp_session **snd, struct tp_session **rcv)
{
	pair_enc(io_ms, 0, snd, rcv);
}

#endif
