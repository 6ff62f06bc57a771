/* SPDX-License-Identifier: MIT */
/* txn.h: what a server owes for the messages sent to it, a Sync that
 * PostgreSQL ignores during COPY FROM STDIN, and replies nobody asked for. */
#include <check.h>
#include <string.h>

#include "check_suites.h"
#include "txn.h"

static void sent(struct txn *t, const char *types)
{
	for (const char *p = types; *p; p++)
		txn_frontend(t, (uint8_t)*p, 1);
}

static struct txn fresh(void)
{
	struct txn t;
	memset(&t, 0, sizeof t);
	t.tx_status = 'I';
	return t;
}

START_TEST(test_extended_request_owes_one_ready)
{
	struct txn t = fresh();
	sent(&t, "PBE");
	ck_assert(t.ext_pending);
	ck_assert_uint_eq(t.outstanding, 0);
	sent(&t, "S");
	ck_assert(!t.ext_pending);
	ck_assert_uint_eq(t.outstanding, 1);
	txn_ready(&t, 'I');
	ck_assert_uint_eq(t.outstanding, 0);
}
END_TEST

/* libpq's COPY by PQexecParams: Parse/Bind/Execute/Sync, CopyInResponse,
 * data, CopyDone, Sync; one ReadyForQuery in all. */
START_TEST(test_copy_sync_behind_execute_owes_nothing)
{
	struct txn t = fresh();
	sent(&t, "PBES");
	ck_assert_uint_eq(t.outstanding, 1);
	uint32_t after;
	ck_assert_uint_eq(txn_copy_in(&t, &after), 1);
	ck_assert_uint_eq(after, 0);
	ck_assert_uint_eq(t.outstanding, 0);
	ck_assert(t.ext_pending);   /* the request waits for the Sync after CopyDone */
	ck_assert(t.in_copy_in);
	sent(&t, "dHS");             /* a Flush and a Sync during the copy: ignored */
	ck_assert_uint_eq(t.outstanding, 0);
	sent(&t, "dcS");
	ck_assert(!t.in_copy_in);
	ck_assert_uint_eq(t.outstanding, 1);
	ck_assert(!t.ext_pending);
	txn_ready(&t, 'I');
	ck_assert_uint_eq(t.outstanding, 0);
}
END_TEST

/* Everything in one write before the CopyInResponse came. */
START_TEST(test_copy_all_sent_before_the_server_answered)
{
	struct txn t = fresh();
	sent(&t, "PBESdcS");
	ck_assert_uint_eq(t.outstanding, 2);
	uint32_t after;
	ck_assert_uint_eq(txn_copy_in(&t, &after), 1);
	ck_assert_uint_eq(after, 1);
	ck_assert_uint_eq(t.outstanding, 1);
	ck_assert(!t.ext_pending);
	ck_assert(!t.in_copy_in);    /* the client ended it already */
}
END_TEST

/* A COPY of a simple Query: its Query owes the ReadyForQuery; nothing taken back. */
START_TEST(test_copy_by_query)
{
	struct txn t = fresh();
	sent(&t, "PBES");
	txn_ready(&t, 'I');
	sent(&t, "Q");
	uint32_t after;
	ck_assert_uint_eq(txn_copy_in(&t, &after), 0);
	ck_assert_uint_eq(t.outstanding, 1);
	ck_assert(t.in_copy_in);
	sent(&t, "dc");
	ck_assert_uint_eq(t.outstanding, 1);
}
END_TEST

START_TEST(test_unasked_replies)
{
	struct txn t = fresh();
	ck_assert(txn_unasked(&t, PqMsg_ReadyForQuery));
	ck_assert(txn_unasked(&t, PqMsg_CommandComplete));
	ck_assert(txn_unasked(&t, PqMsg_DataRow));
	ck_assert(!txn_unasked(&t, PqMsg_NoticeResponse));
	ck_assert(!txn_unasked(&t, PqMsg_ParameterStatus));
	ck_assert(!txn_unasked(&t, PqMsg_NotificationResponse));
	sent(&t, "PBEH");            /* an open request: its replies are asked for, not its ReadyForQuery */
	ck_assert(!txn_unasked(&t, PqMsg_ParseComplete));
	ck_assert(!txn_unasked(&t, PqMsg_CommandComplete));
	ck_assert(txn_unasked(&t, PqMsg_ReadyForQuery));
	sent(&t, "S");
	ck_assert(!txn_unasked(&t, PqMsg_ReadyForQuery));
	txn_ready(&t, 'I');
	ck_assert(txn_unasked(&t, PqMsg_ReadyForQuery));
	ck_assert(txn_unasked(&t, PqMsg_CommandComplete));
}
END_TEST

Suite *txn_suite(void)
{
	Suite *s = suite_create("txn");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_extended_request_owes_one_ready);
	tcase_add_test(tc, test_copy_sync_behind_execute_owes_nothing);
	tcase_add_test(tc, test_copy_all_sent_before_the_server_answered);
	tcase_add_test(tc, test_copy_by_query);
	tcase_add_test(tc, test_unasked_replies);
	suite_add_tcase(s, tc);
	return s;
}
