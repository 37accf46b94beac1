/* The sync control channel's decoders, fed what a hostile peer could send. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/wire.h"
#include "common/ctl.h"
#include "common/exitcode.h"
#include "sync/sync_int.h"

static size_t make_data(uint8_t *b, uint16_t port, const char *key, const char *addr)
{
	put_u16(b, port);
	memcpy(b + 2, key, 32);
	memcpy(b + 34, addr, strlen(addr));
	return 34 + strlen(addr);
}

static const char KEY[] = "0123456789abcdef0123456789abcdef";

static void test_data_ok(void **state)
{
	(void)state;
	uint8_t b[400];
	struct ctl_data d;
	assert_int_equal(ctl_data_decode(b, make_data(b, 7000, KEY, "10.0.0.7"), &d), 0);
	assert_int_equal(d.port, 7000);
	assert_string_equal(d.key, KEY);
	assert_string_equal(d.addr, "10.0.0.7");
	assert_int_equal(ctl_data_decode(b, make_data(b, 7000, KEY, ""), &d), 0);
	assert_string_equal(d.addr, "");
}

/* A receiver that sends a 16 MiB "address" must not overflow the sender. */
static void test_attack_overlong_data_address(void **state)
{
	(void)state;
	static uint8_t b[CTL_FRAME_MAX];
	struct ctl_data d;
	memset(b, 'A', sizeof b);
	make_data(b, 7000, KEY, "x");
	assert_int_equal(ctl_data_decode(b, sizeof b, &d), -EPROTO);
	assert_int_equal(ctl_data_decode(b, 34 + 256, &d), -EPROTO);
	assert_string_equal(d.why, "has an address over 255 bytes");
	assert_int_equal(ctl_data_decode(b, 34 + 255, &d), 0);
}

static void test_data_rejects(void **state)
{
	(void)state;
	uint8_t b[400];
	struct ctl_data d;
	size_t n = make_data(b, 0, KEY, "h");
	assert_int_equal(ctl_data_decode(b, n, &d), -EPROTO);          /* port 0 */
	assert_string_equal(d.why, "has port 0");
	n = make_data(b, 1, "0123456789ABCDEF0123456789abcdef", "h");
	assert_int_equal(ctl_data_decode(b, n, &d), -EPROTO);          /* not our hex */
	n = make_data(b, 1, KEY, "a");
	b[34] = '\0';
	assert_int_equal(ctl_data_decode(b, n, &d), -EPROTO);          /* NUL in address */
	assert_int_equal(ctl_data_decode(b, 33, &d), -EPROTO);         /* truncated */
}

/* HELLO (more cases live in the fuzz corpus) */
static size_t put_str(uint8_t *p, const char *s)
{
	size_t n = strlen(s);
	put_u16(p, (uint16_t)n);
	memcpy(p + 2, s, n);
	return 2 + n;
}

static void test_hello(void **state)
{
	(void)state;
	uint8_t b[128];
	struct hello h;
	size_t n = 0;
	put_u32(b, CTL_MAGIC);
	b[4] = CTL_VERSION;
	b[5] = ROLE_RECEIVER;
	n = 6 + put_str(b + 6, "dst");
	n += put_str(b + n, "");                                  /* address */
	put_u16(b + n, 2);
	n += 2;
	n += put_str(b + n, "--exclude=*~");
	n += put_str(b + n, "--timeout=30");
	assert_int_equal(hello_decode(b, n, &h), 0);
	assert_string_equal(h.path, "dst");
	assert_int_equal(h.argc, 3);
	assert_string_equal(h.argv[0], "rdcp");
	assert_string_equal(h.argv[1], "--exclude=*~");
	assert_string_equal(h.argv[2], "--timeout=30");
	assert_null(h.argv[3]);
	hello_free(&h);
	assert_int_equal(hello_decode(b, n - 1, &h), -EPROTO);   /* truncated */
	b[n] = 'x';
	assert_int_equal(hello_decode(b, n + 1, &h), -EPROTO);   /* trailing byte */
	assert_string_equal(h.why, "it has bytes after its options");
	b[4] = CTL_VERSION + 1;                                   /* another rdcp */
	assert_int_equal(hello_decode(b, n, &h), -EPROTONOSUPPORT);
	b[4] = CTL_VERSION;
	b[5] = 7;                                                 /* unknown role */
	assert_int_equal(hello_decode(b, n, &h), -EPROTO);
	assert_string_equal(h.why, "it gives an unknown role");
}

/* The server parses the HELLO's options with the command line's parser, but
 * takes only the ones a client forwards. */
static void test_far_options(void **state)
{
	(void)state;
	static struct sync_args a;
	char *ok[] = { "rdcp", "--exclude=*~", "--timeout=30", "--delete", "-r", NULL };
	sync_args_init(&a);
	a.mode = SYNC_MODE_FAR;
	assert_int_equal(sync_args_parse(5, ok, &a), -1);
	assert_int_equal(a.o.timeout, 30);
	assert_int_equal(a.o.nrules, 1);
	assert_true(a.o.flags & SYNC_F_DELETE);
	assert_int_equal(a.noperands, 0);
	sync_opts_free(&a.o);
	char *bad[] = { "rdcp", "--rsh=sh -c evil", NULL };
	sync_args_init(&a);
	a.mode = SYNC_MODE_FAR;
	assert_int_equal(sync_args_parse(2, bad, &a), RD_EXIT_PROTO);
	assert_string_equal(a.why, "it has an option that is not for the server: "
	                    "'--rsh=sh -c evil'");
	char *unknown[] = { "rdcp", "--no-such", NULL };
	sync_args_init(&a);
	a.mode = SYNC_MODE_FAR;
	assert_int_equal(sync_args_parse(2, unknown, &a), RD_EXIT_PROTO);
	/* the client forwards what the far side needs, in long form */
	char *cli[] = { "rdcp", "-rn", "-v", "--exclude", "*.o", "--timeout", "5", "-e", "ssh",
	                "a", "b", NULL };
	sync_args_init(&a);
	assert_int_equal(sync_args_parse(11, cli, &a), -1);
	assert_int_equal(a.o.nfwd, 5);
	assert_string_equal(a.o.fwd[0], "--recursive");
	assert_string_equal(a.o.fwd[1], "--dry-run");
	assert_string_equal(a.o.fwd[2], "--exclude=*.o");
	assert_string_equal(a.o.fwd[3], "--timeout=5");
	assert_string_equal(a.o.fwd[4], "--itemize-changes");   /* -v: the lines */
	assert_int_equal(a.noperands, 2);
	sync_opts_free(&a.o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_data_ok),
		cmocka_unit_test(test_attack_overlong_data_address),
		cmocka_unit_test(test_data_rejects),
		cmocka_unit_test(test_hello),
		cmocka_unit_test(test_far_options),
	};
	return cmocka_run_group_tests_name("ctl", tests, NULL, NULL);
}
