/* SPDX-License-Identifier: MIT */
/* ryw: LSN text as PostgreSQL prints it, the marks a client keeps per
 * shard, and the verdict on a server's figure (fresh, old, ahead, behind). */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "check_suites.h"
#include "ryw.h"

static bool parse(const char *s, uint64_t *v) { return ryw_parse_lsn(s, strlen(s), v); }

START_TEST(test_parse_lsn)
{
	uint64_t v = 1;
	ck_assert(parse("0/0", &v));
	ck_assert_uint_eq(v, 0);
	ck_assert(parse("16/B374D848", &v));
	ck_assert_uint_eq(v, 0x16B374D848ULL);
	ck_assert(parse("ffffffff/FFFFFFFF", &v));
	ck_assert_uint_eq(v, UINT64_MAX);
	ck_assert(parse("0/3000028", &v));
	ck_assert_uint_eq(v, 0x3000028ULL);
	/* what PostgreSQL never prints */
	ck_assert(!parse("", &v));
	ck_assert(!parse("/", &v));
	ck_assert(!parse("0/", &v));
	ck_assert(!parse("/0", &v));
	ck_assert(!parse("0", &v));
	ck_assert(!parse("0/0/0", &v));
	ck_assert(!parse("1FFFFFFFF/0", &v));   /* 9 digits */
	ck_assert(!parse("0/G", &v));
	ck_assert(!parse(" 0/0", &v));
	ck_assert(!parse("0/0 ", &v));
	/* by length, not NUL */
	ck_assert(ryw_parse_lsn("1/2xyz", 3, &v));
	ck_assert_uint_eq(v, 0x100000002ULL);
}
END_TEST

START_TEST(test_marks)
{
	struct ryw *r = NULL;
	ck_assert_ptr_null(ryw_mark(r, 0));
	ck_assert(ryw_note(&r, 2, true, 100, 5));
	ck_assert_ptr_null(ryw_mark(r, 0));
	ck_assert_ptr_null(ryw_mark(r, 1));
	ck_assert_ptr_null(ryw_mark(r, 3));
	const struct ryw_mark *m = ryw_mark(r, 2);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->state, RYW_KNOWN);
	ck_assert_uint_eq(m->lsn, 100);
	/* a later write: its position stands */
	ck_assert(ryw_note(&r, 2, true, 300, 6));
	ck_assert_uint_eq(ryw_mark(r, 2)->lsn, 300);
	/* shard 0 after shard 2: the array does not shrink */
	ck_assert(ryw_note(&r, 0, true, 7, 7));
	ck_assert_uint_eq(ryw_mark(r, 0)->lsn, 7);
	ck_assert_uint_eq(ryw_mark(r, 2)->lsn, 300);
	/* an unknown position supersedes the known one, from its moment */
	ck_assert(ryw_note(&r, 2, false, 0, 42));
	m = ryw_mark(r, 2);
	ck_assert_int_eq(m->state, RYW_UNKNOWN);
	ck_assert_uint_eq(m->since_us, 42);
	ryw_resolve(r, 2, 500);
	ck_assert_int_eq(ryw_mark(r, 2)->state, RYW_KNOWN);
	ck_assert_uint_eq(ryw_mark(r, 2)->lsn, 500);
	/* resolve only touches an unknown mark */
	ryw_resolve(r, 2, 1);
	ck_assert_uint_eq(ryw_mark(r, 2)->lsn, 500);
	ryw_clear(r, 2);
	ck_assert_ptr_null(ryw_mark(r, 2));
	ck_assert_ptr_nonnull(ryw_mark(r, 0));
	ryw_clear(r, 9);   /* beyond: nothing */
	ryw_free(&r);
	ck_assert_ptr_null(r);
	ryw_free(&r);
}
END_TEST

START_TEST(test_judge)
{
	uint64_t age = ryw_max_age_us(1000);
	ck_assert_uint_eq(age, 3000000);
	ck_assert_uint_eq(ryw_max_age_us(100), 1000000);   /* at least a second */
	ck_assert_uint_eq(ryw_max_age_us(0), 1000000);
	uint64_t now = 10000000;
	ck_assert_int_eq(ryw_judge(100, 100, now - 10, now, age), RYW_REACHED);
	ck_assert_int_eq(ryw_judge(100, 101, now - 10, now, age), RYW_REACHED);
	ck_assert_int_eq(ryw_judge(100, 99, now - 10, now, age), RYW_BEHIND);
	/* never measured, or measured too long ago: not trusted */
	ck_assert_int_eq(ryw_judge(100, 200, 0, now, age), RYW_STALE);
	ck_assert_int_eq(ryw_judge(100, 200, now - age - 1, now, age), RYW_STALE);
	ck_assert_int_eq(ryw_judge(100, 200, now - age, now, age), RYW_REACHED);
	/* a figure dated after this worker's clock read (another process
	 * wrote it a moment later): fresh */
	ck_assert_int_eq(ryw_judge(100, 200, now + 5, now, age), RYW_REACHED);
}
END_TEST

START_TEST(test_position_row)
{
	uint64_t lsn = 0;
	/* one column, "16/B374D848" */
	const uint8_t row[] = { 0, 1, 0, 0, 0, 11, '1', '6', '/', 'B', '3', '7', '4', 'D', '8', '4', '8' };
	ck_assert(ryw_position_row(row, sizeof row, &lsn));
	ck_assert_uint_eq(lsn, ((uint64_t)0x16 << 32) | 0xB374D848u);
	/* NULL, two columns, a length past the end, a short body, not an LSN */
	const uint8_t null_col[] = { 0, 1, 0xff, 0xff, 0xff, 0xff };
	ck_assert(!ryw_position_row(null_col, sizeof null_col, &lsn));
	const uint8_t two[] = { 0, 2, 0, 0, 0, 3, '0', '/', '1', 0, 0, 0, 0 };
	ck_assert(!ryw_position_row(two, sizeof two, &lsn));
	ck_assert(!ryw_position_row(row, sizeof row - 1, &lsn));
	ck_assert(!ryw_position_row(row, 5, &lsn));
	const uint8_t text[] = { 0, 1, 0, 0, 0, 3, 'a', 'b', 'c' };
	ck_assert(!ryw_position_row(text, sizeof text, &lsn));
}
END_TEST

Suite *ryw_suite(void)
{
	Suite *s = suite_create("ryw");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_parse_lsn);
	tcase_add_test(tc, test_marks);
	tcase_add_test(tc, test_judge);
	tcase_add_test(tc, test_position_row);
	suite_add_tcase(s, tc);
	return s;
}
