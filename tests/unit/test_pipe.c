/* rdpipe's segments as written and their messages, fed what a hostile peer
 * could send. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/ctl.h"
#include "common/wire.h"
#include "pipe/pipe_int.h"

/* rdpipe's DONE, as a remote segment could send it */
static size_t done_with(uint8_t *b, int32_t status, int32_t in_rc, const char *kind,
                        const char *msg)
{
	struct wire_wr w = { 0 };
	wr_u32(&w, (uint32_t)status);
	wr_u32(&w, (uint32_t)in_rc);
	wr_u32(&w, 0);
	wr_u64(&w, 1000);
	wr_u64(&w, 20);
	wr_str16(&w, kind);
	wr_str16(&w, msg);
	assert_false(w.bad);
	memcpy(b, w.buf, w.len);
	size_t n = w.len;
	free(w.buf);
	return n;
}

static size_t make_done(uint8_t *b, int32_t status, int32_t in_rc, const char *msg)
{
	return done_with(b, status, in_rc, "tcp", msg);
}

static size_t make_done_kind(uint8_t *b, const char *kind)
{
	return done_with(b, 0, 0, kind, "");
}

static void test_segment_done(void **state)
{
	(void)state;
	uint8_t b[512];
	size_t n = make_done(b, 0, 0, "");
	assert_int_equal(pipe_msg_check(CTL_SEG_DONE, b, n), 0);
	n = make_done(b, 141, -EPIPE, "sending: Broken pipe");
	assert_int_equal(pipe_msg_check(CTL_SEG_DONE, b, n), 0);
	n = make_done(b, -1, 0, "");
	assert_int_equal(pipe_msg_check(CTL_SEG_DONE, b, n), 0);
	/* truncated, trailing bytes */
	assert_int_equal(pipe_msg_check(CTL_SEG_DONE, b, n - 1), -EPROTO);
	b[n] = 0;
	assert_int_equal(pipe_msg_check(CTL_SEG_DONE, b, n + 1), -EPROTO);
}

static void test_attack_segment_done_out_of_range(void **state)
{
	(void)state;
	uint8_t b[512];
	/* a status no shell reports would become rdpipe's exit code */
	size_t n = make_done(b, 256, 0, "");
	assert_int_equal(pipe_msg_check(CTL_SEG_DONE, b, n), -EPROTO);
	n = make_done(b, -2, 0, "");
	assert_int_equal(pipe_msg_check(CTL_SEG_DONE, b, n), -EPROTO);
	n = make_done(b, 0, 5, "");   /* results are 0 or -errno */
	assert_int_equal(pipe_msg_check(CTL_SEG_DONE, b, n), -EPROTO);
	n = make_done_kind(b, "\033[2J");   /* only transports we know */
	assert_int_equal(pipe_msg_check(CTL_SEG_DONE, b, n), -EPROTO);
	n = make_done_kind(b, "rdma");
	assert_int_equal(pipe_msg_check(CTL_SEG_DONE, b, n), 0);
}

static void test_segment_go(void **state)
{
	(void)state;
	struct wire_wr w = { 0 };
	wr_u16(&w, 4000);
	wr_str16(&w, "10.0.0.2");
	assert_int_equal(pipe_msg_check(CTL_SEG_GO, w.buf, w.len), 0);
	put_u16(w.buf, 0);   /* port 0: nowhere to connect */
	assert_int_equal(pipe_msg_check(CTL_SEG_GO, w.buf, w.len), -EPROTO);
	free(w.buf);
	w = (struct wire_wr){ 0 };
	wr_u16(&w, 4000);
	wr_str16(&w, "");
	assert_int_equal(pipe_msg_check(CTL_SEG_GO, w.buf, w.len), -EPROTO);
	free(w.buf);
}

static void spec_free(struct pipe_spec *sp)
{
	free(sp->host);
	free(sp->addr);
	free(sp->cmd);
	*sp = (struct pipe_spec){ 0 };
}

static void test_segment_spec(void **state)
{
	(void)state;
	struct pipe_spec sp = { 0 };
	assert_int_equal(pipe_spec_parse("u@h1:grep a@b", 1, &sp), 0);
	assert_string_equal(sp.host, "u@h1");
	assert_string_equal(sp.addr, "h1");
	assert_string_equal(sp.cmd, "grep a@b");
	assert_int_equal(sp.op, PIPE_CMD);
	spec_free(&sp);
	/* '@' after the first ':' belongs to the command */
	assert_int_equal(pipe_spec_parse("h2:mail x@y:z", 1, &sp), 0);
	assert_string_equal(sp.host, "h2");
	assert_string_equal(sp.addr, "h2");
	spec_free(&sp);
	assert_int_equal(pipe_spec_parse("[fe80::1]: >> log", 1, &sp), 0);
	assert_string_equal(sp.host, "[fe80::1]");
	assert_string_equal(sp.addr, "fe80::1");
	assert_int_equal(sp.op, PIPE_APPEND);
	spec_free(&sp);
	assert_int_equal(pipe_spec_parse("nohost", 1, &sp), -EINVAL);
	spec_free(&sp);
	assert_int_equal(pipe_spec_parse(":cmd", 1, &sp), -EINVAL);
	spec_free(&sp);
	assert_int_equal(pipe_spec_parse("h:  ", 1, &sp), -EINVAL);
	spec_free(&sp);
	assert_int_equal(pipe_spec_parse("h:<", 1, &sp), -EINVAL);
	spec_free(&sp);
	assert_int_equal(pipe_spec_parse("[::1:cat", 1, &sp), -EINVAL);
	spec_free(&sp);
}

static void test_segment_op(void **state)
{
	(void)state;
	const char *arg;
	assert_int_equal(pipe_op_of("  < in", &arg), PIPE_FROM);
	assert_string_equal(arg, "in");
	assert_int_equal(pipe_op_of(">out", &arg), PIPE_TO);
	assert_string_equal(arg, "out");
	assert_int_equal(pipe_op_of(">> out", &arg), PIPE_APPEND);
	assert_string_equal(arg, "out");
	assert_int_equal(pipe_op_of("sort -r", &arg), PIPE_CMD);
	assert_string_equal(arg, "sort -r");
}

static void test_segment_ready(void **state)
{
	(void)state;
	uint8_t b[16] = { 0x0f, 0xa0, 0, 0, 0 };
	uint16_t port = 0;
	char addr[64];
	assert_int_equal(pipe_ready_decode(b, 4, &port, addr, sizeof addr), 0);
	assert_int_equal(port, 4000);
	assert_string_equal(addr, "");
	assert_int_equal(pipe_ready_decode(b, 5, &port, addr, sizeof addr), -EPROTO);
	assert_int_equal(pipe_ready_decode(b, 2, &port, addr, sizeof addr), -EPROTO);
	assert_int_equal(pipe_ready_decode(b, 1, &port, addr, sizeof addr), -EPROTO);
	/* the address its ssh reached: an IP literal, never a name to resolve */
	memcpy(b + 2, "\0\x08" "10.0.0.7", 10);
	assert_int_equal(pipe_ready_decode(b, 12, &port, addr, sizeof addr), 0);
	assert_string_equal(addr, "10.0.0.7");
	memcpy(b + 2, "\0\x08" "evil.org", 10);
	assert_int_equal(pipe_ready_decode(b, 12, &port, addr, sizeof addr), -EPROTO);
	memcpy(b + 2, "\0\x08" "10.0\0.07", 10);   /* a NUL inside */
	assert_int_equal(pipe_ready_decode(b, 12, &port, addr, sizeof addr), -EPROTO);
	memcpy(b + 2, "\0\x08" "10.0.0.7", 10);
	assert_int_equal(pipe_ready_decode(b, 12, &port, addr, 8), -EPROTO);   /* no room */
	b[0] = b[1] = 0;   /* port 0: nowhere to connect */
	assert_int_equal(pipe_ready_decode(b, 12, &port, addr, sizeof addr), -EPROTO);
}

/* What each encoder sends, through a real control channel, decodes to
 * what was sent. */
static void test_segment_round_trip(void **state)
{
	(void)state;
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	struct ctl tx = { .in = -1, .out = fds[1] }, rx = { .in = fds[0], .out = -1 };
	uint8_t type;
	size_t n;

	struct pipe_setup su = { .index = 2, .count = 3, .kind = TP_TCP, .streams = 4,
	                         .cmd = "> out", .label = "u@h2" }, su2;
	memset(su.key, 7, TP_KEY_LEN);
	assert_int_equal(pipe_setup_send(&tx, &su), 0);
	assert_int_equal(ctl_recv(&rx, &type, &n), 0);
	assert_int_equal(type, CTL_SEG_SETUP);
	assert_int_equal(pipe_setup_decode(rx.buf, n, &su2), 0);
	assert_int_equal(su2.index, 2);
	assert_int_equal(su2.count, 3);
	assert_int_equal(su2.streams, 4);
	assert_memory_equal(su2.key, su.key, TP_KEY_LEN);
	assert_string_equal(su2.cmd, "> out");
	assert_string_equal(su2.label, "u@h2");
	free(su2.cmd);
	free(su2.label);
	rx.buf[4] = 2;   /* another version */
	assert_int_equal(pipe_setup_decode(rx.buf, n, &su2), -EPROTONOSUPPORT);

	uint16_t port;
	char addr[64];
	assert_int_equal(pipe_ready_send(&tx, 4711, "fd00::7"), 0);
	assert_int_equal(ctl_recv(&rx, &type, &n), 0);
	assert_int_equal(type, CTL_SEG_READY);
	assert_int_equal(pipe_ready_decode(rx.buf, n, &port, addr, sizeof addr), 0);
	assert_int_equal(port, 4711);
	assert_string_equal(addr, "fd00::7");

	assert_int_equal(pipe_go_send(&tx, 4712, "10.0.0.3"), 0);
	assert_int_equal(ctl_recv(&rx, &type, &n), 0);
	assert_int_equal(type, CTL_SEG_GO);
	assert_int_equal(pipe_go_decode(rx.buf, n, addr, sizeof addr, &port), 0);
	assert_int_equal(port, 4712);
	assert_string_equal(addr, "10.0.0.3");
	assert_int_equal(pipe_go_decode(rx.buf, n, addr, 8, &port), -EPROTO);   /* does not fit */

	struct pipe_done d = { .status = 141, .in_rc = 0, .out_rc = -EPIPE, .in_bytes = 5,
	                       .in_usec = 9, .kind = "rdma", .msg = "sending: Broken pipe" }, d2;
	assert_int_equal(pipe_done_send(&tx, &d), 0);
	assert_int_equal(ctl_recv(&rx, &type, &n), 0);
	assert_int_equal(type, CTL_SEG_DONE);
	assert_int_equal(pipe_done_decode(rx.buf, n, &d2), 0);
	assert_int_equal(d2.status, 141);
	assert_int_equal(d2.out_rc, -EPIPE);
	assert_int_equal(d2.in_bytes, 5);
	assert_int_equal(d2.in_usec, 9);
	assert_string_equal(d2.kind, "rdma");
	assert_string_equal(d2.msg, "sending: Broken pipe");

	close(fds[0]);
	close(fds[1]);
	ctl_free(&rx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_segment_done),
		cmocka_unit_test(test_attack_segment_done_out_of_range),
		cmocka_unit_test(test_segment_go),
		cmocka_unit_test(test_segment_spec),
		cmocka_unit_test(test_segment_op),
		cmocka_unit_test(test_segment_ready),
		cmocka_unit_test(test_segment_round_trip),
	};
	return cmocka_run_group_tests_name("pipe", tests, NULL, NULL);
}
