/* SPDX-License-Identifier: MIT */
/* Unit tests for pgvalue. Every expected value was printed by PostgreSQL 15
 * (psql -Atc "select ..."), e.g. avg over (1), (2), (2) is
 * 1.6666666666666667 and numeric_send(12345.678) is
 * \x0003000100000003000109291a7c. */
#include "check_suites.h"

#include <string.h>

#include "pgvalue.h"

static int cmp_text(uint32_t oid, const char *a, const char *b)
{
	int c = 99;
	ck_assert_msg(pgvalue_compare(oid, 0, (const uint8_t *)a, strlen(a), (const uint8_t *)b, strlen(b), (locale_t)0, &c),
		      "compare %s %s", a, b);
	return c;
}

static int cmp_bin(uint32_t oid, const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	int c = 99;
	ck_assert(pgvalue_compare(oid, 1, a, al, b, bl, (locale_t)0, &c));
	return c;
}

START_TEST(compare_text)
{
	ck_assert_int_eq(cmp_text(PGVALUE_INT8, "-5", "3"), -1);
	ck_assert_int_eq(cmp_text(PGVALUE_INT4, "10", "9"), 1);
	ck_assert_int_eq(cmp_text(PGVALUE_NUMERIC, "10.50", "10.5"), 0);
	ck_assert_int_eq(cmp_text(PGVALUE_NUMERIC, "-0.001", "0"), -1);
	ck_assert_int_eq(cmp_text(PGVALUE_NUMERIC, "NaN", "Infinity"), 1);
	ck_assert_int_eq(cmp_text(PGVALUE_NUMERIC, "-Infinity", "-99999999999999999999"), -1);
	ck_assert_int_eq(cmp_text(PGVALUE_NUMERIC, "123456789012345678901234567890", "123456789012345678901234567891"), -1);
	ck_assert_int_eq(cmp_text(PGVALUE_FLOAT8, "NaN", "Infinity"), 1);
	ck_assert_int_eq(cmp_text(PGVALUE_FLOAT8, "NaN", "NaN"), 0);
	ck_assert_int_eq(cmp_text(PGVALUE_FLOAT8, "-0", "0"), 0);
	ck_assert_int_eq(cmp_text(PGVALUE_FLOAT8, "1e-05", "0.0001"), -1);
	ck_assert_int_eq(cmp_text(PGVALUE_BOOL, "f", "t"), -1);
	ck_assert_int_eq(cmp_text(PGVALUE_UUID, "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), 0);
	ck_assert_int_eq(cmp_text(PGVALUE_DATE, "0044-03-15 BC", "0001-01-01"), -1);
	ck_assert_int_eq(cmp_text(PGVALUE_DATE, "infinity", "294276-12-31"), 1);
	ck_assert_int_eq(cmp_text(PGVALUE_DATE, "-infinity", "0001-01-01 BC"), -1);
	ck_assert_int_eq(cmp_text(PGVALUE_TIMESTAMP, "2024-01-01 00:00:00.5", "2024-01-01 00:00:00.25"), 1);
	/* 10:00+02 is 08:00 UTC, before 09:00+00 */
	ck_assert_int_eq(cmp_text(PGVALUE_TIMESTAMPTZ, "2024-01-01 10:00:00+02", "2024-01-01 09:00:00+00"), -1);
	ck_assert_int_eq(cmp_text(PGVALUE_TIMESTAMPTZ, "2024-01-01 05:30:00+05:30", "2024-01-01 00:00:00+00"), 0);
	ck_assert_int_eq(cmp_text(PGVALUE_TEXT, "B", "a"), -1);   /* bytes: C collation */
	ck_assert_int_eq(cmp_text(PGVALUE_TEXT, "ab", "abc"), -1);
	ck_assert_int_eq(cmp_text(PGVALUE_BPCHAR, "ab  ", "ab"), 0);
	int c;
	ck_assert(!pgvalue_compare(PGVALUE_INT8, 0, (const uint8_t *)"x", 1, (const uint8_t *)"1", 1, (locale_t)0, &c));
	ck_assert(!pgvalue_compare(1186 /* interval */, 0, (const uint8_t *)"1", 1, (const uint8_t *)"1", 1, (locale_t)0, &c));
}
END_TEST

START_TEST(compare_binary)
{
	static const uint8_t f01[] = { 0x3f, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a };   /* float8send(0.1) */
	static const uint8_t f05[] = { 0x3f, 0xe0, 0, 0, 0, 0, 0, 0 };
	ck_assert_int_eq(cmp_bin(PGVALUE_FLOAT8, f01, 8, f05, 8), -1);
	static const uint8_t n1[] = { 0, 3, 0, 1, 0, 0, 0, 3, 0, 1, 0x09, 0x29, 0x1a, 0x7c };   /* 12345.678 */
	static const uint8_t n2[] = { 0, 2, 0, 0, 0x40, 0, 0, 1, 0, 0x0c, 0x13, 0x88 };       /* -12.5 */
	ck_assert_int_eq(cmp_bin(PGVALUE_NUMERIC, n1, sizeof n1, n2, sizeof n2), 1);
	static const uint8_t d1[] = { 0, 0, 0, 1 }, d2[] = { 0xff, 0xff, 0xff, 0xff };   /* 2000-01-02, 1999-12-31 */
	ck_assert_int_eq(cmp_bin(PGVALUE_DATE, d1, 4, d2, 4), 1);
	static const uint8_t i1[] = { 0, 0, 0, 0, 0, 0, 0, 42 }, i2[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	ck_assert_int_eq(cmp_bin(PGVALUE_INT8, i1, 8, i2, 8), 1);
}
END_TEST

static void add_text(uint32_t oid, const char *a, const char *b, const char *want)
{
	uint8_t out[PGVALUE_NUMERIC_MAX];
	size_t n;
	ck_assert_msg(pgvalue_add(oid, 0, (const uint8_t *)a, strlen(a), (const uint8_t *)b, strlen(b), out, sizeof out, &n),
		      "%s + %s", a, b);
	ck_assert_msg(n == strlen(want) && memcmp(out, want, n) == 0, "%s + %s = %.*s, want %s", a, b, (int)n, out, want);
}

START_TEST(add_values)
{
	add_text(PGVALUE_INT8, "40", "2", "42");
	add_text(PGVALUE_NUMERIC, "12345678901234567890", "0.5", "12345678901234567890.5");
	add_text(PGVALUE_NUMERIC, "-1.005", "1.005", "0.000");
	add_text(PGVALUE_NUMERIC, "99.99", "0.01", "100.00");
	add_text(PGVALUE_NUMERIC, "-5", "2.50", "-2.50");
	add_text(PGVALUE_NUMERIC, "Infinity", "-Infinity", "NaN");
	add_text(PGVALUE_FLOAT8, "0.1", "0.2", "0.30000000000000004");
	add_text(PGVALUE_FLOAT8, "5e+14", "5e+14", "1e+15");
	add_text(PGVALUE_FLOAT8, "50000000000000", "50000000000000", "100000000000000");
	add_text(PGVALUE_FLOAT8, "1.5e-05", "0", "1.5e-05");
	add_text(PGVALUE_FLOAT8, "0.00005", "0.00005", "0.0001");
	add_text(PGVALUE_FLOAT4, "500000", "500000", "1e+06");
	add_text(PGVALUE_FLOAT4, "123456", "0.7", "123456.7");
	uint8_t out[64];
	size_t n;
	ck_assert(!pgvalue_add(PGVALUE_INT8, 0, (const uint8_t *)"9223372036854775807", 19, (const uint8_t *)"1", 1, out,
			       sizeof out, &n));
	/* binary numeric: 10000 + 0.00015 */
	static const uint8_t a[] = { 0, 1, 0, 1, 0, 0, 0, 0, 0, 1 };                 /* numeric_send(10000) */
	static const uint8_t b[] = { 0, 2, 0xff, 0xff, 0, 0, 0, 5, 0, 1, 0x13, 0x88 }; /* numeric_send(0.00015) */
	ck_assert(pgvalue_add(PGVALUE_NUMERIC, 1, a, sizeof a, b, sizeof b, out, sizeof out, &n));
	/* numeric_send(10000.00015): weight 1, digits 1, 0, 1, 5000; dscale 5 */
	static const uint8_t want[] = { 0, 4, 0, 1, 0, 0, 0, 5, 0, 1, 0, 0, 0, 1, 0x13, 0x88 };
	ck_assert_uint_eq(n, sizeof want);
	ck_assert(memcmp(out, want, n) == 0);
}
END_TEST

static void avg_text(uint32_t sum_oid, const char *sum, int64_t count, const char *want)
{
	uint8_t out[PGVALUE_NUMERIC_MAX];
	size_t n;
	uint32_t avg_oid = sum_oid == PGVALUE_FLOAT8 ? PGVALUE_FLOAT8 : PGVALUE_NUMERIC;
	ck_assert_msg(pgvalue_avg(avg_oid, 0, sum_oid, 0, (const uint8_t *)sum, strlen(sum), count, out, sizeof out, &n),
		      "%s / %lld", sum, (long long)count);
	ck_assert_msg(n == strlen(want) && memcmp(out, want, n) == 0, "%s / %lld = %.*s, want %s", sum, (long long)count,
		      (int)n, out, want);
}

START_TEST(avg_values)
{
	avg_text(PGVALUE_INT8, "5", 3, "1.6666666666666667");
	avg_text(PGVALUE_INT8, "8", 3, "2.6666666666666667");
	avg_text(PGVALUE_NUMERIC, "3.123", 2, "1.5615000000000000");
	avg_text(PGVALUE_NUMERIC, "10000000001", 2, "5000000000.50000000");
	avg_text(PGVALUE_NUMERIC, "0.003", 2, "0.00150000000000000000");
	avg_text(PGVALUE_INT8, "-3", 2, "-1.5000000000000000");
	avg_text(PGVALUE_NUMERIC, "199998", 2, "99999.000000000000");
	avg_text(PGVALUE_NUMERIC, "123456789012345679", 2, "61728394506172840");
	avg_text(PGVALUE_NUMERIC, "100000000000000000003", 2, "50000000000000000002");
	avg_text(PGVALUE_FLOAT8, "0.75", 2, "0.375");
	uint8_t out[64];
	size_t n;
	ck_assert(!pgvalue_avg(PGVALUE_NUMERIC, 0, PGVALUE_INT8, 0, (const uint8_t *)"1", 1, 0, out, sizeof out, &n));
}
END_TEST

Suite *pgvalue_suite(void)
{
	Suite *s = suite_create("pgvalue");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, compare_text);
	tcase_add_test(tc, compare_binary);
	tcase_add_test(tc, add_values);
	tcase_add_test(tc, avg_values);
	suite_add_tcase(s, tc);
	return s;
}
