/* The sync control channel's decoders, fed what a hostile peer could send. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/wire.h"
#include "common/ctl.h"
#include "common/exitcode.h"
#include "common/rsh.h"
#include "sync/select/select.h"
#include "sync/wire/proto.h"

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
	assert_string_equal(a.o.fwd[2], "--verbose");   /* the receiver's lines: names */
	assert_string_equal(a.o.fwd[3], "--filter=- *.o");   /* rules as rules */
	assert_string_equal(a.o.fwd[4], "--timeout=5");
	assert_int_equal(a.noperands, 2);
	sync_opts_free(&a.o);
}

/* rsync's filter rule syntax: what parses, what it becomes, and what is
 * refused with a reason (never ignored). */
static void test_filter_rules(void **state)
{
	(void)state;
	static const struct { const char *in; int dflt; const char *out; } ok[] = {
		{ "- *.o", 0, "- *.o" }, { "exclude *.o", 0, "- *.o" }, { "+ keep", 0, "+ keep" },
		{ "include,s x", 0, "+s x" }, { "hide x", 0, "-s x" }, { "show x", 0, "+s x" },
		{ "protect x", 0, "-r x" }, { "P x", 0, "-r x" }, { "R x", 0, "+r x" },
		{ "-! /a/**", 0, "-! /a/**" }, { "-_x y", 0, "- x y" }, { "!", 0, "!" },
		{ "clear", 0, "!" }, { ": .rsync-filter", 0, ": .rsync-filter" },
		{ "dir-merge /.rsync-filter", 0, ": .rsync-filter" },
		{ ":n- .ex", 0, ":n- .ex" }, { "dir-merge,+s .in", 0, ":s+ .in" },
		{ "*.o", '-', "- *.o" }, { "+ x", '-', "+ x" }, { "- x", '+', "- x" },
		{ "x", '+', "+ x" }, { "!", '-', "!" }, { "-x", '-', "- -x" },
	};
	char why[128], buf[256];
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		struct sync_rule r;
		assert_int_equal(sync_rule_parse(ok[i].in, ok[i].dflt, 0, &r, why, sizeof why), 0);
		assert_string_equal(sync_rule_text(&r, buf, sizeof buf), ok[i].out);
		free(r.pattern);
	}
	static const struct { const char *in; const char *why; } bad[] = {
		{ "bogus foo", "unknown filter rule" },
		{ "-/ foo", "the modifier '/' is not supported by rdcp" },
		{ "-p foo", "the modifier 'p' is not supported by rdcp" },
		{ "-C", "the modifier 'C' is not supported by rdcp" },
		{ ":w .f", "the modifier 'w' is not supported by rdcp" },
		{ "-n x", "the modifier 'n' is not supported by rdcp" },
		{ "- ", "the pattern is missing" }, { "-", "the pattern is missing" },
		{ "! x", "clear takes no pattern" },
		{ ": a/.f", "a dir-merge file is one name in each directory" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct sync_rule r;
		assert_int_equal(sync_rule_parse(bad[i].in, 0, 0, &r, why, sizeof why), -1);
		assert_string_equal(why, bad[i].why);
		assert_null(r.pattern);
	}
	/* the far side never reads a file: a merge rule is refused there */
	static struct sync_args a;
	char *far[] = { "rdcp", "--filter=. /etc/passwd", NULL };
	sync_args_init(&a);
	a.mode = SYNC_MODE_FAR;
	assert_int_equal(sync_args_parse(2, far, &a), RD_EXIT_USAGE);
	sync_opts_free(&a.o);
	char *far2[] = { "rdcp", "--exclude-from=/etc/passwd", NULL };
	sync_args_init(&a);
	a.mode = SYNC_MODE_FAR;
	assert_int_equal(sync_args_parse(2, far2, &a), RD_EXIT_PROTO);
	sync_opts_free(&a.o);
}

/* --files-from's list as the far side decodes it (CTL_FILES). */
static size_t put_entries(uint8_t *b, const char *const *e, uint32_t count, uint32_t n)
{
	size_t off = 4;
	put_u32(b, count);
	for (uint32_t i = 0; i < n; i++) {
		put_u16(b + off, (uint16_t)strlen(e[i]));
		memcpy(b + off + 2, e[i], strlen(e[i]));
		off += 2 + strlen(e[i]);
	}
	return off;
}

static void test_files_decode(void **state)
{
	(void)state;
	static struct sync_opts o;
	uint8_t b[1024];
	const char *why;
	const char *good[] = { "a/b", "dir/", "", "/" };
	size_t n = put_entries(b, good, 4, 4);
	assert_int_equal(sync_files_decode(b, n, &o, &why), 1);
	assert_int_equal(o.nfiles, 4);
	assert_string_equal(o.files[1], "dir/");
	assert_int_equal(sync_files_decode(b, 4, &o, &why), -EPROTO);   /* count 4, none */
	assert_string_equal(why, "has fewer entries than its count");
	put_u32(b, 0);
	assert_int_equal(sync_files_decode(b, 4, &o, &why), 0);          /* the end */
	assert_int_equal(sync_files_decode(b, 3, &o, &why), -EPROTO);
	assert_int_equal(sync_files_decode(b, 5, &o, &why), -EPROTO);    /* a byte after */
	assert_string_equal(why, "has bytes after its entries");
	static const char *const attacks[] = { "../etc/passwd", "/etc/passwd", "a/../../x",
	                                       "a//b", "a/./b", "./a", "a/b//", "xNy" };
	for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++) {
		n = put_entries(b, &attacks[i], 1, 1);
		if (!strcmp(attacks[i], "xNy"))
			b[4 + 2 + 1] = 0;   /* a NUL inside */
		assert_int_equal(sync_files_decode(b, n, &o, &why), -EPROTO);
		assert_string_equal(why, "has an entry that is not a relative path inside SRC");
	}
	assert_int_equal(o.nfiles, 4);
	sync_opts_free(&o);
}

/* CTL_WCHECK (--windows): flags, count, paths; peer input, each path a
 * relative path of SRC, sorted on the way in. */
static void test_wcheck_decode(void **state)
{
	(void)state;
	uint8_t b[256];
	char **v;
	size_t n;
	unsigned flags;
	const char *why;
	const char *good[] = { "dirA", "b/c" };
	b[0] = 0;
	size_t len = 1 + put_entries(b + 1, good, 2, 2);
	assert_int_equal(wcheck_decode(b, len, &flags, &v, &n, &why), 0);
	assert_int_equal(flags, 0);
	assert_int_equal(n, 2);
	assert_string_equal(v[0], "b/c");   /* sorted */
	assert_string_equal(v[1], "dirA");
	free(v[0]);
	free(v[1]);
	free(v);
	b[0] = WCHECK_ALL;
	put_u32(b + 1, 0);
	assert_int_equal(wcheck_decode(b, 5, &flags, &v, &n, &why), 0);
	assert_int_equal(flags, WCHECK_ALL);
	assert_int_equal(n, 0);
	b[0] = 2;   /* an unknown flag */
	assert_int_equal(wcheck_decode(b, 5, &flags, &v, &n, &why), -EPROTO);
	b[0] = 0;
	assert_int_equal(wcheck_decode(b, 4, &flags, &v, &n, &why), -EPROTO);   /* short */
	put_u32(b + 1, 1u << 30);   /* a count the bytes cannot hold */
	assert_int_equal(wcheck_decode(b, 5, &flags, &v, &n, &why), -EPROTO);
	static const char *const attacks[] = { "../x", "/etc", "a//b", "a/./b", "", "xNy" };
	for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++) {
		len = 1 + put_entries(b + 1, &attacks[i], 1, 1);
		if (!strcmp(attacks[i], "xNy"))
			b[1 + 4 + 2 + 1] = 0;
		assert_int_equal(wcheck_decode(b, len, &flags, &v, &n, &why), -EPROTO);
		assert_null(v);
		assert_int_equal(n, 0);
	}
	len = 1 + put_entries(b + 1, good, 1, 1);
	assert_int_equal(wcheck_decode(b, len + 1, &flags, &v, &n, &why), -EPROTO);
	assert_string_equal(why, "has bytes after its paths");
}

/* The pipes to and from ssh hold 1 MiB (or the system's per-pipe limit,
 * if lower and the process may not exceed it), then go back to 64 KiB;
 * anything that is not a pipe is left alone. */
static void test_widen_pipe(void **state)
{
	(void)state;
	int p[2], sv[2], max = 1 << 20;
	FILE *f = fopen("/proc/sys/fs/pipe-max-size", "r");
	if (f) {
		if (fscanf(f, "%d", &max) != 1 || max > (1 << 20))
			max = 1 << 20;
		fclose(f);
	}
	assert_int_equal(pipe(p), 0);
	int before = fcntl(p[0], F_GETPIPE_SZ);
	if (before < max) {   /* else a quota spent, or pages of 1 MiB: nothing to show */
		rsh_widen_pipe(p[0]);   /* the read end: what the server has as stdin */
		int now = fcntl(p[1], F_GETPIPE_SZ);
		assert_true(now >= max && now <= (1 << 20));
		rsh_narrow_pipe(p[0]);
		assert_int_equal(fcntl(p[1], F_GETPIPE_SZ), 65536);
	} else {
		fprintf(stderr, "SKIP: a new pipe here holds %d bytes already\n", before);
	}
	close(p[0]);
	close(p[1]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	rsh_widen_pipe(sv[0]);  /* a local server's socketpair: no error, no change */
	assert_int_equal(fcntl(sv[0], F_GETPIPE_SZ), -1);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_data_ok),
		cmocka_unit_test(test_attack_overlong_data_address),
		cmocka_unit_test(test_data_rejects),
		cmocka_unit_test(test_hello),
		cmocka_unit_test(test_far_options),
		cmocka_unit_test(test_filter_rules),
		cmocka_unit_test(test_files_decode),
		cmocka_unit_test(test_wcheck_decode),
		cmocka_unit_test(test_widen_pipe),
	};
	return cmocka_run_group_tests_name("ctl", tests, NULL, NULL);
}
