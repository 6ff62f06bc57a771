/* SPDX-License-Identifier: MIT */
/* errstats: errors counted by (database, user, SQLSTATE, source) in a
 * worker's table, summed over tables, the largest first; a full table
 * counts the rest as untracked; long names are cut, not overrun. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "errstats.h"

static struct errstats_table *table(void)
{
	struct errstats_table *t = calloc(1, sizeof *t);
	ck_assert_ptr_nonnull(t);
	return t;
}

START_TEST(test_count_and_collect)
{
	struct errstats_table *a = table(), *b = table();
	for (int i = 0; i < 3; i++)
		errstats_count(a, "appdb", "app", "22012", ERRSTATS_SERVER);
	errstats_count(b, "appdb", "app", "22012", ERRSTATS_SERVER);   /* another worker, same key */
	errstats_count(b, "appdb", "app", "22012", ERRSTATS_PGCAT);    /* another source */
	errstats_count(a, "appdb", "bob", "28P01", ERRSTATS_PGCAT);
	errstats_count(a, NULL, NULL, NULL, ERRSTATS_PGCAT);           /* before a login: no names, no code */
	struct errstats_table *both[] = { a, b };
	struct errstats_row rows[16];
	uint64_t untracked = 1;
	size_t n = errstats_collect(both, 2, rows, 16, &untracked);
	ck_assert_uint_eq(n, 4);
	ck_assert_uint_eq(untracked, 0);
	ck_assert_str_eq(rows[0].database, "appdb");
	ck_assert_str_eq(rows[0].sqlstate, "22012");
	ck_assert_uint_eq(rows[0].source, ERRSTATS_SERVER);
	ck_assert_uint_eq(rows[0].count, 4);
	for (size_t i = 1; i < n; i++)
		ck_assert_uint_eq(rows[i].count, 1);
	/* at most max rows, the largest first */
	ck_assert_uint_eq(errstats_collect(both, 2, rows, 1, &untracked), 1);
	ck_assert_uint_eq(rows[0].count, 4);
	free(a);
	free(b);
}
END_TEST

START_TEST(test_full_table_and_long_names)
{
	struct errstats_table *t = table();
	char db[32];
	for (int i = 0; i < ERRSTATS_SLOTS + 10; i++) {
		snprintf(db, sizeof db, "probe_%d", i);
		errstats_count(t, db, "u", "3D000", ERRSTATS_PGCAT);
	}
	/* a key already in keeps counting */
	errstats_count(t, "probe_0", "u", "3D000", ERRSTATS_PGCAT);
	struct errstats_table *one[] = { t };
	struct errstats_row *rows = calloc(ERRSTATS_SLOTS, sizeof *rows);
	uint64_t untracked = 0;
	ck_assert_uint_eq(errstats_collect(one, 1, rows, ERRSTATS_SLOTS, &untracked), ERRSTATS_SLOTS);
	ck_assert_uint_eq(untracked, 10);
	ck_assert_str_eq(rows[0].database, "probe_0");
	ck_assert_uint_eq(rows[0].count, 2);
	free(t);
	/* a name longer than the slot's is cut; the same long name is one key;
	 * a code longer than five characters is cut too */
	t = table();
	char longname[300];
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	errstats_count(t, longname, longname, "ABCDEFGH", ERRSTATS_SERVER);
	errstats_count(t, longname, longname, "ABCDEFGH", ERRSTATS_SERVER);
	one[0] = t;
	ck_assert_uint_eq(errstats_collect(one, 1, rows, ERRSTATS_SLOTS, &untracked), 1);
	ck_assert_uint_eq(strlen(rows[0].database), ERRSTATS_NAME_MAX - 1);
	ck_assert_str_eq(rows[0].sqlstate, "ABCDE");
	ck_assert_uint_eq(rows[0].count, 2);
	ck_assert_str_eq(errstats_source_name(ERRSTATS_SERVER), "server");
	ck_assert_str_eq(errstats_source_name(ERRSTATS_PGCAT), "pgcat");
	free(rows);
	free(t);
}
END_TEST

Suite *errstats_suite(void)
{
	Suite *s = suite_create("errstats");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_count_and_collect);
	tcase_add_test(tc, test_full_table_and_long_names);
	suite_add_tcase(s, tc);
	return s;
}
