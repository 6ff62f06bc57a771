/* SPDX-License-Identifier: MIT */
/* Unit tests for auth_md5: PostgreSQL md5 hashes, constant-time compare, random bytes. */
#include "check_suites.h"

#include <string.h>

#include "auth_md5.h"
#include "randpool.h"

/* Expected values computed independently with Python's hashlib:
 *   "md5" + md5(b"secret" + b"app").hexdigest()
 *   "md5" + md5(b"6a42...6ae2" + bytes([1, 2, 3, 4])).hexdigest() */
#define STORED_SECRET_APP "md56a422f785c9e20873908ce25d1736ae2"
#define RESPONSE_1234 "md5911f527656472583a006e7727877b33e"

START_TEST(test_md5_stored_known)
{
	char out[PG_MD5_LEN + 1];

	pg_md5_stored("secret", "app", out);
	ck_assert_str_eq(out, STORED_SECRET_APP);
	ck_assert_uint_eq(strlen(out), PG_MD5_LEN);
	pg_md5_stored("pencil", "user", out);
	ck_assert_str_eq(out, "md520c46e3762c864548e296b33c3406aa9");
}
END_TEST

START_TEST(test_md5_response_known)
{
	static const uint8_t salt[4] = { 1, 2, 3, 4 };
	static const uint8_t other[4] = { 1, 2, 3, 5 };
	char out[PG_MD5_LEN + 1];
	char out2[PG_MD5_LEN + 1];

	pg_md5_response(STORED_SECRET_APP, salt, out);
	ck_assert_str_eq(out, RESPONSE_1234);
	pg_md5_response(STORED_SECRET_APP, other, out2);
	ck_assert(pg_md5_is_stored(out2));
	ck_assert(!pg_secure_streq(out, out2));
	/* A malformed stored hash yields an empty response that matches nothing. */
	pg_md5_response("md5xyz", salt, out);
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(test_md5_is_stored)
{
	ck_assert(pg_md5_is_stored(STORED_SECRET_APP));
	ck_assert(!pg_md5_is_stored(""));
	ck_assert(!pg_md5_is_stored(NULL));
	ck_assert(!pg_md5_is_stored("md5"));
	ck_assert(!pg_md5_is_stored("md56a422f785c9e20873908ce25d1736ae"));     /* 31 digits */
	ck_assert(!pg_md5_is_stored("md56a422f785c9e20873908ce25d1736ae22"));   /* 33 digits */
	ck_assert(!pg_md5_is_stored("md56A422F785C9E20873908CE25D1736AE2"));    /* upper case */
	ck_assert(!pg_md5_is_stored("md56a422f785c9e20873908ce25d1736agz"));
	ck_assert(!pg_md5_is_stored("MD56a422f785c9e20873908ce25d1736ae2"));
	ck_assert(!pg_md5_is_stored("SCRAM-SHA-256$4096:abc"));
}
END_TEST

START_TEST(test_secure_streq)
{
	ck_assert(pg_secure_streq("", ""));
	ck_assert(pg_secure_streq(STORED_SECRET_APP, STORED_SECRET_APP));
	ck_assert(!pg_secure_streq(STORED_SECRET_APP, RESPONSE_1234));
	ck_assert(!pg_secure_streq("abc", "abcd"));
	ck_assert(!pg_secure_streq("abcd", "abc"));
	ck_assert(!pg_secure_streq("abc", NULL));
	ck_assert(!pg_secure_streq(NULL, NULL));
}
END_TEST

START_TEST(test_random_bytes)
{
	uint8_t a[32];
	uint8_t b[32];

	memset(a, 0, sizeof(a));
	memset(b, 0, sizeof(b));
	ck_assert(pg_random_bytes(a, sizeof(a)));
	ck_assert(pg_random_bytes(b, sizeof(b)));
	/* 2^-256 chance of a false failure. */
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	ck_assert(pg_random_bytes(a, 0));
}
END_TEST

/* The login pool: every byte handed out once, refills when empty, large
 * requests served directly, wiped bytes are gone. */
START_TEST(test_randpool)
{
	struct randpool r;
	randpool_init(&r);
	uint8_t a[18], b[18];
	ck_assert(randpool_bytes(&r, a, sizeof a));
	ck_assert_uint_eq(r.avail, RANDPOOL_SIZE - sizeof a);
	ck_assert(randpool_bytes(&r, b, sizeof b));
	ck_assert(memcmp(a, b, sizeof a) != 0);
	/* What was handed out no longer sits in the pool. */
	static const uint8_t zero[36];
	ck_assert(memcmp(r.buf + r.avail, zero, sizeof zero) == 0);
	/* Drain it: the next request refills. */
	uint8_t big[RANDPOOL_SIZE / 4];
	while (r.avail >= sizeof big)
		ck_assert(randpool_bytes(&r, big, sizeof big));
	uint32_t left = r.avail;
	ck_assert(randpool_bytes(&r, big, left + 1));
	ck_assert_uint_eq(r.avail, RANDPOOL_SIZE - (left + 1));
	/* More than a quarter of the pool: straight from OpenSSL, pool untouched. */
	uint8_t huge[RANDPOOL_SIZE];
	uint32_t before = r.avail;
	ck_assert(randpool_bytes(&r, huge, sizeof huge));
	ck_assert_uint_eq(r.avail, before);
	ck_assert(randpool_bytes(&r, a, 0));
	randpool_wipe(&r);
	ck_assert_uint_eq(r.avail, 0);
	ck_assert(randpool_bytes(&r, a, sizeof a));
}
END_TEST

Suite *md5_suite(void)
{
	Suite *s = suite_create("md5");
	TCase *tc = tcase_create("md5");

	tcase_add_test(tc, test_md5_stored_known);
	tcase_add_test(tc, test_md5_response_known);
	tcase_add_test(tc, test_md5_is_stored);
	tcase_add_test(tc, test_secure_streq);
	tcase_add_test(tc, test_random_bytes);
	tcase_add_test(tc, test_randpool);
	suite_add_tcase(s, tc);
	return s;
}
