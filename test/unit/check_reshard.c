/* SPDX-License-Identifier: MIT */
/*
 * The online reshard's pure parts (reshard_state.c, reshard_schema.c): its
 * state file written and read back, the layout text a finished reshard is
 * matched by, pg_dump's output as a query, slot names, and DataRow columns
 * read within their bounds.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_suites.h"
#include "buf.h"
#include "reshard_types.h"

static char dir[64];

static void make_dir(void)
{
	snprintf(dir, sizeof dir, "/tmp/pgcat-check-reshard-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_state_round_trip)
{
	make_dir();
	struct rs_state st = { 0 }, back;
	ck_assert(!rs_state_read(dir, "app", &back));   /* none yet */
	st.phase = RESHARD_REPLICATE;
	st.hold = true;
	st.schema_done = true;
	st.slots = true;
	st.pause_us = 123456;
	snprintf(st.targets, sizeof st.targets, "10.0.0.1:5432/n0,10.0.0.2:5433/n1");
	snprintf(st.error, sizeof st.error, "line one\nline two");
	char why[256];
	ck_assert(rs_state_write(dir, "app", &st, why, sizeof why));
	ck_assert(rs_state_read(dir, "app", &back));
	ck_assert_int_eq(back.phase, RESHARD_REPLICATE);
	ck_assert(back.hold && back.schema_done && back.slots);
	ck_assert_uint_eq(back.pause_us, 123456);
	ck_assert_str_eq(back.targets, st.targets);
	ck_assert_str_eq(back.error, "line one line two");   /* kept on its line */
	/* Written again: replaced whole. */
	st.phase = RESHARD_DONE;
	st.hold = st.slots = false;
	st.error[0] = '\0';
	ck_assert(rs_state_write(dir, "app", &st, why, sizeof why));
	ck_assert(rs_state_read(dir, "app", &back));
	ck_assert_int_eq(back.phase, RESHARD_DONE);
	ck_assert(!back.hold && !back.slots);
	ck_assert_str_eq(back.error, "");
	/* A pool name that is not a safe file name stays inside the directory. */
	ck_assert(rs_state_write(dir, "../../x y", &st, why, sizeof why));
	ck_assert(rs_state_read(dir, "../../x y", &back));
	char path[256];
	snprintf(path, sizeof path, "%s/reshard-.._2f.._2fx_20y.state", dir);
	ck_assert_int_eq(access(path, F_OK), 0);
	/* No directory: refused with a reason. */
	ck_assert(!rs_state_write("", "app", &st, why, sizeof why));
	ck_assert(strstr(why, "state_dir") != NULL);
	/* A file without a phase is not a state. */
	snprintf(path, sizeof path, "%s/reshard-bad.state", dir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("hold=1\nphase=sideways\n", f);
	fclose(f);
	ck_assert(!rs_state_read(dir, "bad", &back));
	remove_dir();
}
END_TEST

START_TEST(test_phase_names)
{
	for (int p = RESHARD_NONE; p <= RESHARD_FAILED; p++) {
		enum reshard_phase back;
		ck_assert(reshard_phase_parse(reshard_phase_name((enum reshard_phase)p), &back));
		ck_assert_int_eq(back, p);
	}
	enum reshard_phase x;
	ck_assert(!reshard_phase_parse("copying", &x));
	ck_assert_str_eq(reshard_phase_name(RESHARD_CUTOVER), "cutover");
}
END_TEST

START_TEST(test_layout_text)
{
	struct config_server a[] = { { "10.0.0.9", 5432, SERVER_ROLE_REPLICA }, { "10.0.0.1", 5432, SERVER_ROLE_PRIMARY } };
	struct config_server b[] = { { "db2", 6000, SERVER_ROLE_AUTO } };
	struct config_server c[] = { { "r1", 1, SERVER_ROLE_REPLICA } };
	struct config_shard shards[] = { { 0, "n0", a, 2 }, { 1, "n1", b, 1 } };
	char out[256];
	rs_layout_text(shards, 2, out, sizeof out);
	ck_assert_str_eq(out, "10.0.0.1:5432/n0,db2:6000/n1");
	struct config_shard none = { 0, "x", c, 1 };
	ck_assert_ptr_null(rs_primary(&none));
	rs_layout_text(shards, 2, out, 12);   /* cut at a whole entry */
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(test_schema_sql)
{
	const char dump[] = "\\restrict abc\nSET x = 1;\nCREATE TABLE t (a int);\n\\unrestrict abc\nSELECT 1;";
	char *sql = rs_schema_sql((const uint8_t *)dump, strlen(dump));
	ck_assert_ptr_nonnull(sql);
	ck_assert_str_eq(sql, "SET x = 1;\nCREATE TABLE t (a int);\nSELECT 1;");
	free(sql);
	sql = rs_schema_sql((const uint8_t *)"", 0);
	ck_assert_str_eq(sql, "");
	free(sql);
	const char nul[] = "SELECT 1;\0DROP TABLE t;";
	ck_assert_ptr_null(rs_schema_sql((const uint8_t *)nul, sizeof nul - 1));
}
END_TEST

START_TEST(test_slot_name)
{
	char out[64];
	rs_slot_name(out, sizeof out, "App-DB'; x", 3);
	ck_assert_str_eq(out, "pgcat_reshard_app_db___x_3");
	rs_slot_name(out, sizeof out, "a_very_long_pool_name_that_goes_on_and_on_and_on_and_on", 12);
	ck_assert(strlen(out) < 64);
	for (const char *p = out; *p; p++)
		ck_assert(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'));
}
END_TEST

START_TEST(test_datarow_col)
{
	/* 3 columns: "ab", NULL, "" */
	const uint8_t row[] = { 0, 3, 0, 0, 0, 2, 'a', 'b', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0 };
	const char *v;
	int32_t n;
	ck_assert(rs_datarow_col(row, sizeof row, 0, &v, &n));
	ck_assert_int_eq(n, 2);
	ck_assert(memcmp(v, "ab", 2) == 0);
	ck_assert(rs_datarow_col(row, sizeof row, 1, &v, &n));
	ck_assert_ptr_null(v);
	ck_assert(rs_datarow_col(row, sizeof row, 2, &v, &n));
	ck_assert_int_eq(n, 0);
	ck_assert(!rs_datarow_col(row, sizeof row, 3, &v, &n));
	/* Every cut of it reads nothing past its end. */
	for (size_t len = 0; len < sizeof row; len++) {
		bool ok2 = rs_datarow_col(row, len, 2, &v, &n);
		ck_assert(!ok2 || (v == NULL) || v + n <= (const char *)row + len);
		if (len < sizeof row)
			ck_assert(!ok2 || len == sizeof row);
	}
	/* A length beyond the row. */
	const uint8_t bad[] = { 0, 1, 0, 0, 0, 9, 'x' };
	ck_assert(!rs_datarow_col(bad, sizeof bad, 0, &v, &n));
}
END_TEST

/* A DataRow of text columns. */
static size_t cols(uint8_t *out, int n, const char *const *v)
{
	size_t o = 0;
	out[o++] = 0;
	out[o++] = (uint8_t)n;
	for (int i = 0; i < n; i++) {
		size_t l = strlen(v[i]);
		out[o++] = 0;
		out[o++] = 0;
		out[o++] = (uint8_t)(l >> 8);
		out[o++] = (uint8_t)l;
		memcpy(out + o, v[i], l);
		o += l;
	}
	return o;
}

static size_t seq_row(uint8_t *out, const char *name, const char *value, const char *desc)
{
	const char *v[3] = { name, value, desc };
	return cols(out, 3, v);
}

START_TEST(test_sequences)
{
	struct reshard rs;
	memset(&rs, 0, sizeof rs);
	uint8_t row[256];
	size_t n = seq_row(row, "public.tickets", "100", "false");
	ck_assert(rs_seq_row(&rs, row, n));
	n = seq_row(row, "\"odd'name\".s", "7", "false");
	ck_assert(rs_seq_row(&rs, row, n));
	n = seq_row(row, "public.tickets", "250", "false");   /* another source: the highest stays */
	ck_assert(rs_seq_row(&rs, row, n));
	n = seq_row(row, "public.tickets", "99", "false");
	ck_assert(rs_seq_row(&rs, row, n));
	ck_assert_uint_eq(rs.n_seqs, 2);
	ck_assert_int_eq(rs.seqs[0].value, 250);
	/* Counting down: the lowest. */
	struct reshard down;
	memset(&down, 0, sizeof down);
	n = seq_row(row, "public.countdown", "-5", "true");
	ck_assert(rs_seq_row(&down, row, n));
	n = seq_row(row, "public.countdown", "-40", "true");
	ck_assert(rs_seq_row(&down, row, n));
	n = seq_row(row, "public.countdown", "-7", "true");
	ck_assert(rs_seq_row(&down, row, n));
	ck_assert_int_eq(down.seqs[0].value, -40);
	free(down.seqs[0].name);
	free(down.seqs);
	/* Not a number: refused. Another query's one-column row: passed over. */
	n = seq_row(row, "public.x", "12a", "false");
	ck_assert(!rs_seq_row(&rs, row, n));
	const uint8_t one[] = { 0, 1, 0, 0, 0, 3, '0', '/', '1' };
	ck_assert(rs_seq_row(&rs, one, sizeof one));
	ck_assert_uint_eq(rs.n_seqs, 2);
	char *sql = rs_seq_sql(&rs);
	ck_assert_ptr_nonnull(sql);
	ck_assert_str_eq(sql, "SELECT pg_catalog.setval(r, 250, true) FROM pg_catalog.to_regclass('public.tickets') r "
			      "WHERE r IS NOT NULL;SELECT pg_catalog.setval(r, 7, true) FROM "
			      "pg_catalog.to_regclass('\"odd''name\".s') r WHERE r IS NOT NULL;");
	free(sql);
	for (size_t i = 0; i < rs.n_seqs; i++)
		free(rs.seqs[i].name);
	free(rs.seqs);
	struct reshard none;
	memset(&none, 0, sizeof none);
	sql = rs_seq_sql(&none);
	ck_assert_str_eq(sql, "");
	free(sql);
}
END_TEST

START_TEST(test_quote_ident)
{
	struct buf *b = buf_new(16);
	ck_assert_int_eq(rs_quote_ident(b, "we\"ird"), 0);
	ck_assert_int_eq(buf_add(b, "", 1), 0);
	ck_assert_str_eq((const char *)buf_head(b), "\"we\"\"ird\"");
	buf_free(b);
}
END_TEST

Suite *reshard_suite(void)
{
	Suite *s = suite_create("reshard");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_state_round_trip);
	tcase_add_test(tc, test_phase_names);
	tcase_add_test(tc, test_layout_text);
	tcase_add_test(tc, test_schema_sql);
	tcase_add_test(tc, test_slot_name);
	tcase_add_test(tc, test_datarow_col);
	tcase_add_test(tc, test_sequences);
	tcase_add_test(tc, test_quote_ident);
	suite_add_tcase(s, tc);
	return s;
}
