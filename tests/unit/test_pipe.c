/* rdpipe's segment messages, fed what a hostile peer could send. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_segment_done),
		cmocka_unit_test(test_attack_segment_done_out_of_range),
		cmocka_unit_test(test_segment_go),
	};
	return cmocka_run_group_tests_name("pipe", tests, NULL, NULL);
}
