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
static void test_hello(void **state)
{
	(void)state;
	uint8_t b[64];
	struct hello h;
	size_t n = 0;
	put_u32(b, CTL_MAGIC);
	b[4] = CTL_VERSION;
	b[5] = ROLE_RECEIVER;
	put_u32(b + 6, SYNC_F_RECURSIVE);
	b[10] = 2;
	b[11] = TP_TCP;
	put_u16(b + 12, 3);
	memcpy(b + 14, "dst", 3);
	put_u16(b + 17, 0);
	put_u16(b + 19, 1);
	b[21] = 0;
	put_u16(b + 22, 2);
	memcpy(b + 24, "*~", 2);
	put_u32(b + 26, 30);                                      /* --timeout 30 */
	n = 30;
	assert_int_equal(hello_decode(b, n, &h), 0);
	assert_string_equal(h.path, "dst");
	assert_int_equal(h.nrules, 1);
	assert_string_equal(h.rules[0].pattern, "*~");
	assert_int_equal(h.timeout, 30);
	hello_free(&h);
	assert_int_equal(hello_decode(b, n - 1, &h), -EPROTO);   /* truncated */
	put_u32(b + 26, 0x80000000u);                             /* absurd timeout */
	assert_int_equal(hello_decode(b, n, &h), -EPROTO);
	put_u32(b + 26, 30);
	b[4] = CTL_VERSION + 1;                                   /* another rdcp */
	assert_int_equal(hello_decode(b, n, &h), -EPROTONOSUPPORT);
	b[4] = CTL_VERSION;
	put_u32(b + 6, 1u << 31);                                  /* unknown flag */
	assert_int_equal(hello_decode(b, n, &h), -EPROTO);
	assert_string_equal(h.why, "it has unknown option flags");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_data_ok),
		cmocka_unit_test(test_attack_overlong_data_address),
		cmocka_unit_test(test_data_rejects),
		cmocka_unit_test(test_hello),
	};
	return cmocka_run_group_tests_name("ctl", tests, NULL, NULL);
}
