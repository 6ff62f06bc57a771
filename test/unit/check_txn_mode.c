/* SPDX-License-Identifier: MIT */
/* txn_mode: a transaction's characteristics read from SHOW, the statement
 * that opens another shard's transaction with them, and the statements
 * that change them. */
#include <check.h>
#include <string.h>

#include "check_suites.h"
#include "router.h"
#include "txn_mode.h"

START_TEST(test_from_settings)
{
	struct txn_mode m;
	ck_assert(txn_mode_from_settings("repeatable read", "on", "off", &m));
	ck_assert_int_eq(m.isolation, TXN_ISO_REPEATABLE_READ);
	ck_assert(m.read_only);
	ck_assert(!m.deferrable);
	ck_assert(txn_mode_from_settings("serializable", "off", "on", &m));
	ck_assert_int_eq(m.isolation, TXN_ISO_SERIALIZABLE);
	ck_assert(!m.read_only);
	ck_assert(m.deferrable);
	ck_assert(txn_mode_from_settings("read committed", "off", "off", &m));
	ck_assert_int_eq(m.isolation, TXN_ISO_READ_COMMITTED);
	ck_assert(txn_mode_from_settings("read uncommitted", "off", "off", &m));
	ck_assert_int_eq(m.isolation, TXN_ISO_READ_UNCOMMITTED);
	/* nothing else is spliced into SQL */
	ck_assert(!txn_mode_from_settings("serializable; DROP TABLE t", "off", "off", &m));
	ck_assert(!txn_mode_from_settings("SERIALIZABLE", "off", "off", &m));
	ck_assert(!txn_mode_from_settings("serializable", "true", "off", &m));
	ck_assert(!txn_mode_from_settings("serializable", "off", "", &m));
	ck_assert(!txn_mode_from_settings(NULL, "off", "off", &m));
}
END_TEST

START_TEST(test_begin_sql)
{
	char buf[128];
	struct txn_mode m = { TXN_ISO_REPEATABLE_READ, true, false };
	size_t n = txn_mode_begin_sql(&m, buf, sizeof buf);
	ck_assert_str_eq(buf, "BEGIN; SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY, NOT DEFERRABLE");
	ck_assert_uint_eq(n, strlen(buf));
	m = (struct txn_mode){ TXN_ISO_SERIALIZABLE, false, true };
	ck_assert_uint_gt(txn_mode_begin_sql(&m, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "BEGIN; SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ WRITE, DEFERRABLE");
	m = (struct txn_mode){ TXN_ISO_READ_COMMITTED, false, false };
	ck_assert_uint_gt(txn_mode_begin_sql(&m, buf, sizeof buf), 0);
	ck_assert_str_eq(buf, "BEGIN; SET TRANSACTION ISOLATION LEVEL READ COMMITTED, READ WRITE, NOT DEFERRABLE");
	/* the longest fits the buffer fanout_txn.c keeps; too small: 0 */
	m = (struct txn_mode){ TXN_ISO_READ_UNCOMMITTED, false, false };
	ck_assert_uint_lt(txn_mode_begin_sql(&m, buf, sizeof buf), 96);
	ck_assert_uint_eq(txn_mode_begin_sql(&m, buf, 20), 0);
	ck_assert_str_eq(buf, "");
	m.isolation = (enum txn_isolation)7;
	ck_assert_uint_eq(txn_mode_begin_sql(&m, buf, sizeof buf), 0);
}
END_TEST

/* A leg is routed by its first statement (route_pick_leg): the one that
 * opens a read-only transaction must go where a plain BEGIN goes, a
 * primary (a read-only BEGIN would be sent to a replica, where PREPARE
 * TRANSACTION cannot run): the parser sees several statements, a write. */
START_TEST(test_begin_sql_routes_as_a_write)
{
	char buf[128];
	struct txn_mode m = { TXN_ISO_SERIALIZABLE, true, true };
	size_t n = txn_mode_begin_sql(&m, buf, sizeof buf);
	ck_assert_uint_gt(n, 0);
	struct router_rules rules = { .max_length = 65536 };
	struct router_verdict v;
	ck_assert(router_classify(buf, n, &rules, &v));
	ck_assert(v.multi_statement);
	ck_assert(v.writes);
	ck_assert(!v.begin_read_only);
	ck_assert(!v.ends);
}
END_TEST

static bool sets(const char *sql) { return txn_mode_statement_sets(sql, strlen(sql)); }

START_TEST(test_statement_sets)
{
	ck_assert(sets("SET TRANSACTION READ ONLY"));
	ck_assert(sets("  set transaction isolation level serializable"));
	ck_assert(sets("/* c */ SET TRANSACTION SNAPSHOT '00000003-0000001B-1'"));
	ck_assert(sets("SET LOCAL transaction_read_only = on"));
	ck_assert(sets("SET SESSION transaction_isolation TO 'repeatable read'"));
	ck_assert(sets("SET transaction_deferrable = on"));
	ck_assert(sets("SET \"transaction_isolation\" = 'serializable'"));
	ck_assert(sets("RESET transaction_read_only"));
	/* not the current transaction's */
	ck_assert(!sets("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"));
	ck_assert(!sets("SET default_transaction_isolation = 'serializable'"));
	ck_assert(!sets("SET transaction_timeout = 0"));
	ck_assert(!sets("SET transactions = 1"));
	ck_assert(!sets("SELECT 'SET TRANSACTION READ ONLY'"));
	ck_assert(!sets("RESET ALL"));
	ck_assert(!sets("SET"));
	ck_assert(!sets(""));
	/* PostgreSQL reads a query only up to its first NUL */
	ck_assert(!txn_mode_statement_sets("SELECT 1\0SET TRANSACTION READ ONLY", 34));
}
END_TEST

Suite *txn_mode_suite(void)
{
	Suite *s = suite_create("txn_mode");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_from_settings);
	tcase_add_test(tc, test_begin_sql);
	tcase_add_test(tc, test_begin_sql_routes_as_a_write);
	tcase_add_test(tc, test_statement_sets);
	suite_add_tcase(s, tc);
	return s;
}
