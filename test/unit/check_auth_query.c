/* SPDX-License-Identifier: MIT */
/* Unit tests for auth_query's pure part: what a looked-up secret is, and
 * the cache of answers per (pool, user) with its TTL. */
#include "check_suites.h"

#include <stdio.h>
#include <string.h>

#include "auth_query.h"

#define SCRAM_OK "SCRAM-SHA-256$4096:c2FsdHNhbHRzYWx0c2FsdA==$" \
	"9u6dlzHWRHSKKCtp47R9qw9JEyhi6uMPhWmMfNFsQm0=:Xg6ZFBuVnFnB3ABjnCVq5VU6u3HNQeyGu06bd8SX6Zw="

START_TEST(test_classify)
{
	ck_assert_int_eq(auth_query_classify(NULL), AUTH_QUERY_SECRET_NONE);
	ck_assert_int_eq(auth_query_classify(""), AUTH_QUERY_SECRET_NONE);
	ck_assert_int_eq(auth_query_classify("md5aaaabbbbccccddddeeeeffff00001111"), AUTH_QUERY_SECRET_MD5);
	ck_assert_int_eq(auth_query_classify(SCRAM_OK), AUTH_QUERY_SECRET_SCRAM);
	/* Looks like a verifier, is not one: refused rather than taken as a password. */
	ck_assert_int_eq(auth_query_classify("SCRAM-SHA-256$4096:bad"), AUTH_QUERY_SECRET_INVALID);
	ck_assert_int_eq(auth_query_classify("SCRAM-SHA-256$"), AUTH_QUERY_SECRET_INVALID);
	/* Not quite md5: a password (as PostgreSQL would take it). */
	ck_assert_int_eq(auth_query_classify("md5short"), AUTH_QUERY_SECRET_PLAIN);
	ck_assert_int_eq(auth_query_classify("md5AAAABBBBCCCCDDDDEEEEFFFF00001111"), AUTH_QUERY_SECRET_PLAIN);
	ck_assert_int_eq(auth_query_classify("hunter2"), AUTH_QUERY_SECRET_PLAIN);
}
END_TEST

START_TEST(test_cache_find_add_answer)
{
	struct auth_query_cache c;
	ck_assert(auth_query_cache_init(&c, 8, 100));
	ck_assert_ptr_null(auth_query_cache_find(&c, "db", "alice"));
	struct auth_query_entry *a = auth_query_cache_add(&c, "db", "alice");
	struct auth_query_entry *b = auth_query_cache_add(&c, "db2", "alice");
	struct auth_query_entry *d = auth_query_cache_add(&c, "dba", "lice");   /* not "db" + "alice" */
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_nonnull(d);
	ck_assert_uint_eq(c.n, 3);
	ck_assert_ptr_eq(auth_query_cache_find(&c, "db", "alice"), a);
	ck_assert_ptr_eq(auth_query_cache_find(&c, "db2", "alice"), b);
	ck_assert_ptr_eq(auth_query_cache_find(&c, "dba", "lice"), d);
	ck_assert_ptr_null(auth_query_cache_find(&c, "db", "bob"));

	/* Not answered: never fresh (its lookup is under way). */
	ck_assert(!a->answered);
	ck_assert(!auth_query_entry_fresh(a, 0, 60000));
	ck_assert(auth_query_cache_answer(a, "md5aaaabbbbccccddddeeeeffff00001111", 1000000));
	ck_assert(a->answered);
	ck_assert_str_eq(a->secret, "md5aaaabbbbccccddddeeeeffff00001111");
	/* Not found: answered, no secret. */
	ck_assert(auth_query_cache_answer(b, NULL, 1000000));
	ck_assert(b->answered);
	ck_assert_ptr_null(b->secret);
	/* A new answer replaces the old. */
	ck_assert(auth_query_cache_answer(a, SCRAM_OK, 2000000));
	ck_assert_str_eq(a->secret, SCRAM_OK);

	auth_query_cache_remove(&c, d);
	ck_assert_uint_eq(c.n, 2);
	ck_assert_ptr_null(auth_query_cache_find(&c, "dba", "lice"));
	auth_query_cache_free(&c);
}
END_TEST

START_TEST(test_cache_ttl_and_sweep)
{
	struct auth_query_cache c;
	ck_assert(auth_query_cache_init(&c, 4, 100));
	struct auth_query_entry *a = auth_query_cache_add(&c, "db", "a");
	struct auth_query_entry *b = auth_query_cache_add(&c, "db", "b");
	struct auth_query_entry *pending = auth_query_cache_add(&c, "db", "pending");
	ck_assert(auth_query_cache_answer(a, "pw", 1000000));   /* at 1 s */
	ck_assert(auth_query_cache_answer(b, NULL, 1400000));   /* at 1.4 s */
	/* TTL 500 ms: fresh before 1.5 s, stale from then on. */
	ck_assert(auth_query_entry_fresh(a, 1000000, 500));
	ck_assert(auth_query_entry_fresh(a, 1499999, 500));
	ck_assert(!auth_query_entry_fresh(a, 1500000, 500));
	/* TTL 0: nothing is kept... */
	ck_assert(!auth_query_entry_fresh(a, 1000000, 0));
	/* ...except for the logins its answer is being handed to. */
	a->serving = true;
	ck_assert(auth_query_entry_fresh(a, 9000000, 0));
	a->serving = false;

	/* At 1.6 s: a is stale and goes, b (negative) is fresh and stays, the
	 * lookup under way stays whatever its age. */
	ck_assert_uint_eq(auth_query_cache_sweep(&c, 1600000, 500), 1);
	ck_assert_ptr_null(auth_query_cache_find(&c, "db", "a"));
	ck_assert_ptr_eq(auth_query_cache_find(&c, "db", "b"), b);
	ck_assert_ptr_eq(auth_query_cache_find(&c, "db", "pending"), pending);
	ck_assert_uint_eq(auth_query_cache_sweep(&c, 99000000, 500), 1);
	ck_assert_ptr_eq(auth_query_cache_find(&c, "db", "pending"), pending);
	ck_assert_uint_eq(c.n, 1);
	auth_query_cache_free(&c);
}
END_TEST

START_TEST(test_cache_trim_keeps_the_newest)
{
	struct auth_query_cache c;
	ck_assert(auth_query_cache_init(&c, 16, 3));
	char name[16];
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof name, "u%d", i);
		struct auth_query_entry *e = auth_query_cache_add(&c, "db", name);
		ck_assert_ptr_nonnull(e);
		ck_assert(auth_query_cache_answer(e, i % 2 ? NULL : "pw", (uint64_t)(10 - i) * 1000000));
	}
	struct auth_query_entry *pending = auth_query_cache_add(&c, "db", "pending");
	ck_assert_uint_eq(c.n, 7);
	auth_query_cache_trim(&c);
	/* By answer time u5 (5 s) is the oldest and u0 (10 s) the newest: the
	 * three newest stay, and the lookup under way. */
	ck_assert_uint_eq(c.n, 4);
	ck_assert_ptr_nonnull(auth_query_cache_find(&c, "db", "u0"));
	ck_assert_ptr_nonnull(auth_query_cache_find(&c, "db", "u1"));
	ck_assert_ptr_nonnull(auth_query_cache_find(&c, "db", "u2"));
	ck_assert_ptr_null(auth_query_cache_find(&c, "db", "u3"));
	ck_assert_ptr_null(auth_query_cache_find(&c, "db", "u5"));
	ck_assert_ptr_eq(auth_query_cache_find(&c, "db", "pending"), pending);
	auth_query_cache_free(&c);
}
END_TEST

Suite *auth_query_suite(void)
{
	Suite *s = suite_create("auth_query");
	TCase *tc = tcase_create("pure");
	tcase_add_test(tc, test_classify);
	tcase_add_test(tc, test_cache_find_add_answer);
	tcase_add_test(tc, test_cache_ttl_and_sweep);
	tcase_add_test(tc, test_cache_trim_keeps_the_newest);
	suite_add_tcase(s, tc);
	return s;
}
