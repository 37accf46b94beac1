/* sync/report.c: rsync's number formats and itemize codes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sync/sync_int.h"

static void test_numbers(void **state)
{
	(void)state;
	char b[SYNC_NUM_LEN];
	assert_string_equal(sync_num(b, 0, 0), "0");
	assert_string_equal(sync_num(b, 999, 0), "999");
	assert_string_equal(sync_num(b, 1000, 0), "1,000");
	assert_string_equal(sync_num(b, 3000014, 0), "3,000,014");
	assert_string_equal(sync_num(b, UINT64_MAX, 0), "18,446,744,073,709,551,615");
	/* rsync -h: powers of 1000; -hh: of 1024; under one unit, plain */
	assert_string_equal(sync_num(b, 999, 1), "999");
	assert_string_equal(sync_num(b, 3000014, 1), "3.00M");
	assert_string_equal(sync_num(b, 1536, 2), "1.50K");
	assert_string_equal(sync_num(b, 3000014, 2), "2.86M");
	assert_string_equal(sync_num(b, UINT64_MAX, 1), "18.45E");
}

static void test_codes(void **state)
{
	(void)state;
	char c[SYNC_ITEM_LEN];
	assert_string_equal(sync_item_code(c, '>', 'f', SYNC_ITEM_NEW), ">f+++++++++");
	assert_string_equal(sync_item_code(c, '>', 'f', SYNC_ITEM_SIZE | SYNC_ITEM_TIME),
	                    ">f.st......");
	assert_string_equal(sync_item_code(c, '.', 'f', SYNC_ITEM_OWNER | SYNC_ITEM_GROUP),
	                    ".f....og...");
	assert_string_equal(sync_item_code(c, '>', 'f', SYNC_ITEM_SIZE | SYNC_ITEM_TIME_NOW),
	                    ">f.sT......");
	assert_string_equal(sync_item_code(c, '.', 'f', SYNC_ITEM_ACL | SYNC_ITEM_XATTR),
	                    ".f.......ax");
	assert_string_equal(sync_item_code(c, 'c', 'L', SYNC_ITEM_SUM), "cLc........");
	assert_int_equal(sync_item_type(IDX_FIFO), 'S');
	assert_int_equal(sync_item_type(IDX_BLK), 'D');
}

static void test_bits(void **state)
{
	(void)state;
	struct idx_entry e = { .path = "f", .type = IDX_REG, .size = 5, .mtime_ns = 1,
	                       .mode = 0644, .uid = 1, .gid = 2 };
	struct idx_entry d = e;
	unsigned all = SYNC_F_TIMES | SYNC_F_PERMS | SYNC_F_OWNER;
	assert_int_equal(sync_item_bits(&e, NULL, all, 1, 1), SYNC_ITEM_NEW);
	assert_int_equal(sync_item_bits(&e, &d, all, 1, 0), 0);
	d.size = 6;
	d.mtime_ns = 2;
	assert_int_equal(sync_item_bits(&e, &d, all, 1, 1), SYNC_ITEM_SIZE | SYNC_ITEM_TIME);
	/* without -t a file sent gets the transfer time: T */
	assert_int_equal(sync_item_bits(&e, &d, 0, 0, 1), SYNC_ITEM_SIZE | SYNC_ITEM_TIME_NOW);
	d = e;
	d.mode = 0600;
	d.uid = 7;
	assert_int_equal(sync_item_bits(&e, &d, all, 1, 0), SYNC_ITEM_PERMS | SYNC_ITEM_OWNER);
	assert_int_equal(sync_item_bits(&e, &d, all, 0, 0), SYNC_ITEM_PERMS);   /* not root */
	/* -c: the checksum column only for a file sent whose hash differs */
	d = e;
	d.hash[0] = 1;
	assert_int_equal(sync_item_bits(&e, &d, all | SYNC_F_CHECKSUM, 1, 1), SYNC_ITEM_SUM);
	assert_int_equal(sync_item_bits(&e, &d, all, 1, 1), 0);
	struct idx_entry l = { .path = "l", .type = IDX_LNK, .link = "a" }, m = l;
	m.link = "b";
	assert_int_equal(sync_item_bits(&l, &m, all, 1, 0), SYNC_ITEM_SUM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_codes),
		cmocka_unit_test(test_bits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
