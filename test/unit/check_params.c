/* SPDX-License-Identifier: MIT */
/* params and params_options: startup options read as PostgreSQL 15 reads
 * them (each expectation below is what a PostgreSQL 15 backend answered to
 * the same options), the statements that change settings, the tracking
 * bounds, and the statements that bring a server in line. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "params.h"

/* An options string PostgreSQL takes: the value it gives name. */
static void options_ok(const char *options, const char *name, const char *value)
{
	struct params p;
	struct params_refusal why = { "", "" };
	params_init(&p);
	ck_assert_msg(params_apply_options(&p, options, &why), "[%s] refused: %s %s", options, why.sqlstate,
		      why.message);
	if (name) {
		const struct param *e = params_get(&p, name);
		ck_assert_msg(e != NULL, "[%s]: no %s", options, name);
		ck_assert_msg(strcmp(e->value, value) == 0, "[%s]: %s is [%s], not [%s]", options, name, e->value, value);
		ck_assert(!e->raw);
	}
	params_clear(&p);
}

/* An options string PostgreSQL refuses, with that SQLSTATE and message. */
static void options_refused(const char *options, const char *sqlstate, const char *message)
{
	struct params p;
	struct params_refusal why = { "", "" };
	params_init(&p);
	ck_assert_msg(!params_apply_options(&p, options, &why), "[%s] taken", options);
	ck_assert_msg(strcmp(why.sqlstate, sqlstate) == 0 && strcmp(why.message, message) == 0,
		      "[%s]: %s %s, not %s %s", options, why.sqlstate, why.message, sqlstate, message);
	params_clear(&p);
}

/* ignore_startup_parameters inside options: the named settings are
 * dropped unread (a value PostgreSQL would refuse included), the others
 * taken. */
START_TEST(options_ignoring_names)
{
	struct params p;
	struct params_refusal why = { "", "" };
	params_init(&p);
	ck_assert(params_apply_options_ignoring(&p, "-c extra_float_digits=11111111111111111111 -c timezone=UTC",
						"application_name, Extra_Float_Digits", &why));
	ck_assert_ptr_null(params_get(&p, "extra_float_digits"));
	ck_assert_ptr_nonnull(params_get(&p, "timezone"));
	params_clear(&p);
	params_init(&p);
	ck_assert(!params_apply_options_ignoring(&p, "-c port=5", "timezone", &why));
	params_clear(&p);
	ck_assert(params_name_listed("a,b c", "c"));
	ck_assert(params_name_listed(" A ", "a"));
	ck_assert(!params_name_listed("ab", "a"));
	ck_assert(!params_name_listed("", "a"));
	ck_assert(!params_name_listed(NULL, "a"));
}
END_TEST

START_TEST(options_split_as_postgresql)
{
	/* a backslash takes the next byte; one at the very end is dropped */
	options_ok("-c search_path=abc\\", "search_path", "abc");
	options_ok("-c search_path=a\\\\b", "search_path", "a\\b");
	options_ok("-c search_path=\"a\\ b\"", "search_path", "\"a b\"");
	options_ok("-c search_path=a\\,b", "search_path", "a,b");
	options_ok("-c search_path=a,\\ b", "search_path", "a, b");
	options_ok("  -c   search_path=q  ", "search_path", "q");
	options_ok("-c\tsearch_path=tab", "search_path", "tab");
	options_ok("-c search_path=other,public", "search_path", "other,public");
	options_ok("-c search_path= ", "search_path", "");
	options_ok("-c search_path=\"\"", "search_path", "\"\"");
	options_ok("-c search_path=a\"b", "search_path", "a\"b");
	options_ok("-c search_path=\"x\"\"y\"", "search_path", "\"x\"\"y\"");
	options_refused("-c search_path=a\\ b", "22023", "invalid value for parameter \"search_path\": \"a b\"");
	options_refused("-c search_path=\"a b\"", "22023", "invalid value for parameter \"search_path\": \"\"a\"");
	options_refused("-c search_path=a,", "22023", "invalid value for parameter \"search_path\": \"a,\"");
	options_refused("-c search_path=,a", "22023", "invalid value for parameter \"search_path\": \",a\"");
	options_refused("-c search_path=a,,b", "22023", "invalid value for parameter \"search_path\": \"a,,b\"");
	options_refused("\\", "42601", "invalid command-line argument for server process: ");
	options_refused("\\\\", "42601", "invalid command-line argument for server process: \\");
	options_refused("x\\", "42601", "invalid command-line argument for server process: x");
	options_refused("-c search_path='a b'", "42601", "invalid command-line argument for server process: b'");
	options_refused("-c\\ search_path=z", "42704", "unrecognized configuration parameter \" search_path\"");
}
END_TEST

START_TEST(options_switches_as_postgresql)
{
	options_ok("-csearch_path=x", "search_path", "x");
	options_ok("--search_path=y", "search_path", "y");
	options_ok("--search-path=y", "search_path", "y");
	options_ok("-c search-path=q", "search_path", "q");
	options_ok("-c Search_Path=Q", "Search_Path", "Q");
	options_ok("-c a-b.c=1", "a_b.c", "1");
	options_ok("-c a.b$c=1", "a.b$c", "1");
	options_ok("-c a.b.c=1", "a.b.c", "1");
	options_ok("-Pcsearch_path=a", "search_path", "a");
	options_ok("-Pe", "ignore_system_indexes", "true");
	options_ok("-eP", "datestyle", "euro");
	options_ok("-fs", "enable_seqscan", "false");
	options_ok("-f sx", "enable_seqscan", "false");
	options_ok("-f h", "enable_hashjoin", "false");
	options_ok("-t pa", "log_parser_stats", "true");
	options_ok("-t pl", "log_planner_stats", "true");
	options_ok("-t e", "log_executor_stats", "true");
	options_ok("-S 1000", "work_mem", "1000");
	options_ok("-W 0", "post_auth_delay", "0");
	options_ok("-d 0", "log_min_messages", "notice");
	options_ok("-d x", "log_min_messages", "notice");
	options_ok("-d 5", "debug_print_rewritten", "true");
	options_ok("-d 2", "log_statement", "all");
	options_ok("-c nosuch=1", "nosuch", "1");   /* only a server knows its settings */
	options_ok("-c search_path=x -c SEARCH_PATH=y", "search_path", "y");
	/* taken and ignored by a backend a client starts */
	options_ok("-b -C x -D /tmp -E -j -n -r /tmp/x -T -v 2 --", NULL, NULL);

	options_refused("-c", "42601", "invalid command-line argument for server process: -c");
	options_refused("-c search_path", "42601", "-c search_path requires a value");
	options_refused("--search_path", "42601", "--search_path requires a value");
	options_refused("-cP", "42601", "-c P requires a value");
	options_refused("-Pc", "42601", "invalid command-line argument for server process: -Pc");
	options_refused("-c search_path=x -c", "42601", "invalid command-line argument for server process: -c");
	options_refused("-c search_path=x extra", "42601", "invalid command-line argument for server process: extra");
	options_refused("foo", "42601", "invalid command-line argument for server process: foo");
	options_refused("-- x", "42601", "invalid command-line argument for server process: x");
	options_refused("-a", "42601", "invalid command-line argument for server process: -a");
	options_refused("-aP", "42601", "invalid command-line argument for server process: postgres");
	options_refused("-Pa", "42601", "invalid command-line argument for server process: -Pa");
	options_refused("-Pax", "42601", "invalid command-line argument for server process: postgres");
	options_refused("-f x", "42601", "invalid command-line argument for server process: x");
	options_refused("-t x", "42601", "invalid command-line argument for server process: x");
	options_refused("-c =1", "42704", "unrecognized configuration parameter \"\"");
	options_refused("-c=1", "42704", "unrecognized configuration parameter \"\"");
	options_refused("-c user=x", "42704", "unrecognized configuration parameter \"user\"");
	options_refused("-c a..b=1", "42602", "invalid configuration parameter name \"a..b\"");
	options_refused("-c a.1=1", "42602", "invalid configuration parameter name \"a.1\"");
	options_refused("-c 1a.b=1", "42602", "invalid configuration parameter name \"1a.b\"");
	options_refused("-c server_version=1", "55P02", "parameter \"server_version\" cannot be changed");
	options_refused("-B 5", "55P02", "parameter \"shared_buffers\" cannot be changed without restarting the server");
	options_refused("-i", "55P02", "parameter \"listen_addresses\" cannot be changed without restarting the server");
	options_refused("-F", "55P02", "parameter \"fsync\" cannot be changed now");
	options_refused("-l", "55P02", "parameter \"ssl\" cannot be changed now");
	/* the first error wins, in the order switches are read */
	options_refused("-c a..b=1 -c search_path=a,", "42602", "invalid configuration parameter name \"a..b\"");
	options_refused("foo -c a..b=1", "42602", "invalid configuration parameter name \"a..b\"");
}
END_TEST

START_TEST(statements_tracked)
{
	struct params p;
	params_init(&p);
	const char *q = "SELECT 1; SET search_path TO multi";
	ck_assert(params_sql_may_change(q, strlen(q)));
	ck_assert_uint_eq(params_track_sql(&p, q, strlen(q), NULL), PARAMS_CHANGED);
	ck_assert_str_eq(params_get(&p, "search_path")->value, "multi");
	q = "/* c */ SET a.b = 1; select ';'; set a.c TO '2' ; ";
	ck_assert_uint_eq(params_track_sql(&p, q, strlen(q), NULL), PARAMS_CHANGED);
	ck_assert_str_eq(params_get(&p, "a.b")->value, "1");
	ck_assert_str_eq(params_get(&p, "a.c")->value, "'2'");
	q = "SET TIME ZONE LOCAL";   /* SET TimeZone TO local would be refused */
	ck_assert_uint_eq(params_track_sql(&p, q, strlen(q), NULL), PARAMS_CHANGED);
	ck_assert_ptr_null(params_get(&p, "TimeZone"));
	q = "SET TIME ZONE INTERVAL '+05:00' HOUR TO MINUTE";
	ck_assert_uint_eq(params_track_sql(&p, q, strlen(q), NULL), PARAMS_UNTRACKED);
	ck_assert_ptr_null(params_get(&p, "TimeZone"));
	q = "SET TIME ZONE -7";
	ck_assert_uint_eq(params_track_sql(&p, q, strlen(q), NULL), PARAMS_CHANGED);
	ck_assert_str_eq(params_get(&p, "TimeZone")->value, "-7");
	q = "SET SCHEMA 'sch'";
	ck_assert_uint_eq(params_track_sql(&p, q, strlen(q), NULL), PARAMS_CHANGED);
	ck_assert_str_eq(params_get(&p, "search_path")->value, "'sch'");

	/* set_config as a statement of its own, with literals: as a startup
	 * option gives the value; is_local true lasts for the transaction */
	q = "select 1; SELECT Set_Config('a.b', 'it''s', false) ;";
	ck_assert_uint_eq(params_track_sql(&p, q, strlen(q), NULL), PARAMS_CHANGED);
	ck_assert_str_eq(params_get(&p, "a.b")->value, "it's");
	ck_assert(!params_get(&p, "a.b")->raw);
	q = "SELECT set_config('a.b', 'z', true)";
	ck_assert_uint_eq(params_track_sql(&p, q, strlen(q), NULL), 0);
	ck_assert_str_eq(params_get(&p, "a.b")->value, "it's");

	/* session state pgcat does not follow */
	static const char *const untracked[] = {
		"SELECT set_config('a.b', '1', false), 1", "SELECT set_config('a.b', current_user, false)",
		"WITH x AS (SELECT set_config('a.b', 'v', false)) SELECT * FROM x",
		"SELECT set_config('a.b', E'x', false)", "SELECT set_config('a.b', 'x\\y', false)",
		"UPDATE pg_settings SET setting = 'x' WHERE name = 'search_path'",
		"DO $$ BEGIN SET search_path = x; END $$",
		"SET \"search_path\" TO x", "SET SESSION AUTHORIZATION u1", "SET ROLE r1", "set session role r1",
		"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", "RESET ROLE", "RESET SESSION AUTHORIZATION",
		"SET NAMES 'UTF8'", "SET XML OPTION DOCUMENT", "SET search_path", "SET session_authorization = 'u1'",
		"SET role = 'r1'",
	};
	for (size_t i = 0; i < sizeof untracked / sizeof *untracked; i++) {
		q = untracked[i];
		ck_assert_msg(params_sql_may_change(q, strlen(q)), "%s", q);
		ck_assert_msg(params_track_sql(&p, q, strlen(q), NULL) & PARAMS_UNTRACKED, "%s", q);
	}
	/* what changes nothing that lasts */
	static const char *const none[] = { "SET LOCAL search_path TO y", "SET TRANSACTION READ ONLY",
					    "SET transaction_read_only = on", "SET transaction_isolation = 'serializable'",
					    "SET CONSTRAINTS ALL DEFERRED", "RESET TRANSACTION ISOLATION LEVEL",
					    "DISCARD PLANS", "SELECT 'set_config'",
					    "SELECT name, setting FROM pg_settings" };
	for (size_t i = 0; i < sizeof none / sizeof *none; i++) {
		q = none[i];
		unsigned r = params_track_sql(&p, q, strlen(q), NULL);
		/* (a mention of set_config anywhere costs a reset: allowed) */
		ck_assert_msg(!(r & PARAMS_CHANGED) && (r == 0 || strstr(q, "set_config")), "%s: %u", q, r);
	}
	/* the quick look: texts with no statement that can change one */
	static const char *const quick_no[] = { "SELECT 1", "select 1;", "INSERT INTO t VALUES (';x')",
						"SELECT 1;  ;SELECT 2", "UPDATE set_x SET y = 1" };
	for (size_t i = 0; i < sizeof quick_no / sizeof *quick_no; i++)
		ck_assert_msg(!params_sql_may_change(quick_no[i], strlen(quick_no[i])), "%s", quick_no[i]);
	ck_assert(params_sql_may_change("SELECT 1;/* x */", 16));   /* a comment may hide one */
	/* the scan goes sixteen bytes at a time (the last block overlapping
	 * the one before): a ';' or a setter's '_' is found at every place in
	 * and across those blocks, and at the end, with or without the
	 * Query's final NUL */
	for (size_t pad = 0; pad < 34; pad++) {
		static const char *const tails[] = { ";SET a.b = 1", "; reset all", "SELECT set_config('a.b', '1', false)",
						     "SELECT * FROM pg_settings", ";/*" };
		static const char *const quiet[] = { ";", "; SELECT 2", "_x", "SELECT * FROM pg_setting",
						     "set_confi" };
		char q2[96];
		for (size_t k = 0; k < sizeof tails / sizeof *tails; k++) {
			int n = snprintf(q2, sizeof q2, "SELECT %.*s%s", (int)pad, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
					 tails[k]);
			ck_assert_msg(params_sql_may_change(q2, (size_t)n), "%s", q2);
			ck_assert_msg(params_sql_may_change(q2, (size_t)n + 1), "%s (with its NUL)", q2);
		}
		for (size_t k = 0; k < sizeof quiet / sizeof *quiet; k++) {
			int n = snprintf(q2, sizeof q2, "SELECT %.*s%s", (int)pad, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
					 quiet[k]);
			ck_assert_msg(!params_sql_may_change(q2, (size_t)n), "%s", q2);
			ck_assert_msg(!params_sql_may_change(q2, (size_t)n + 1), "%s (with its NUL)", q2);
		}
		/* a mark only in the bytes the last block sees twice: found once */
		int n = snprintf(q2, sizeof q2, "SELECT %.*s;SET a.b = 1;x", (int)pad, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
		ck_assert_msg(params_sql_may_change(q2, (size_t)n), "%s", q2);
	}
	/* PostgreSQL reads up to the first NUL */
	ck_assert_uint_eq(params_track_sql(&p, "SELECT 1\0; SET a.x = 1", 23, NULL), 0);
	ck_assert_ptr_null(params_get(&p, "a.x"));
	params_clear(&p);
}
END_TEST

START_TEST(tracking_bounds)
{
	struct params p;
	params_init(&p);
	/* a 70,000-byte search_path is tracked whole */
	size_t n = 70000;
	char *q = malloc(n + 64);
	ck_assert_ptr_nonnull(q);
	int head = snprintf(q, 64, "SET search_path TO ");
	size_t len = (size_t)head;
	while (len + 8 < (size_t)head + n)
		len += (size_t)snprintf(q + len, 16, "s%05zu, ", len % 100000);
	len += (size_t)snprintf(q + len, 16, "public");
	ck_assert_uint_eq(params_track_sql(&p, q, len, NULL), PARAMS_CHANGED);
	size_t kept = strlen(params_get(&p, "search_path")->value);
	ck_assert_uint_eq(kept, len - (size_t)head);
	ck_assert_uint_ge(kept, n - 8);
	free(q);

	/* a value past PARAMS_BYTES_MAX is not, and the old one stays */
	size_t big = PARAMS_BYTES_MAX + 10;
	q = malloc(big + 64);
	ck_assert_ptr_nonnull(q);
	len = (size_t)snprintf(q, 64, "SET search_path TO '");
	memset(q + len, 'x', big);
	len += big;
	q[len++] = '\'';
	ck_assert_uint_eq(params_track_sql(&p, q, len, NULL), PARAMS_UNTRACKED);
	ck_assert_uint_eq(strlen(params_get(&p, "search_path")->value), kept);
	free(q);

	/* PARAMS_MAX settings, then one more: not tracked */
	struct params f;
	params_init(&f);
	char sql[64];
	for (int i = 0; i < PARAMS_MAX; i++) {
		snprintf(sql, sizeof sql, "SET my.p%d = 1", i);
		ck_assert_uint_eq(params_track_sql(&f, sql, strlen(sql), NULL), PARAMS_CHANGED);
	}
	ck_assert_uint_eq(params_track_sql(&f, "SET my.extra = 1", 16, NULL), PARAMS_UNTRACKED);
	ck_assert_uint_eq(params_track_sql(&f, "SET my.p0 = 2", 13, NULL), PARAMS_CHANGED);   /* a change still is */
	/* a name longer than PARAMS_NAME_MAX */
	char name[PARAMS_NAME_MAX + 40];
	memset(name, 'n', sizeof name - 1);
	name[sizeof name - 1] = '\0';
	char *long_set = malloc(sizeof name + 32);
	ck_assert_ptr_nonnull(long_set);
	snprintf(long_set, sizeof name + 32, "SET a.%s = 1", name);
	ck_assert_uint_eq(params_track_sql(&p, long_set, strlen(long_set), NULL), PARAMS_UNTRACKED);
	free(long_set);
	params_clear(&f);
	params_clear(&p);
}
END_TEST

START_TEST(sync_statements)
{
	struct params c, s;
	params_init(&c);
	params_init(&s);
	char *out;
	/* a string search_path, as a startup option gives it: set_config */
	ck_assert(params_set(&c, "search_path", "a, B", false));
	ck_assert_int_eq(params_build_sync(&c, &s, &out), 1);
	ck_assert_str_eq(out, "SELECT FROM set_config('search_path', 'a, B', false);");
	free(out);
	params_clear(&c);
	/* a backslash: E'' whatever the server's standard_conforming_strings */
	ck_assert(params_set(&c, "application_name", "a\\b'c", false));
	ck_assert_int_eq(params_build_sync(&c, &s, &out), 1);
	ck_assert_str_eq(out, "SET application_name TO E'a\\\\b''c';");
	free(out);
	params_clear(&c);
	/* a custom name SQL would not take as it is */
	ck_assert(params_set(&c, "a.b$c", "1", false));
	ck_assert(params_set(&s, "x.select", "2", true));
	ck_assert_int_eq(params_build_sync(&c, &s, &out), 2);
	ck_assert_str_eq(out, "SELECT FROM set_config('a.b$c', '1', false);RESET \"x\".\"select\";");
	free(out);
	params_clear(&c);
	params_clear(&s);
	/* any length: no fixed buffer */
	char *v = malloc(300001);
	ck_assert_ptr_nonnull(v);
	memset(v, 'q', 300000);
	v[300000] = '\0';
	ck_assert(params_set(&c, "my.big", v, false));
	ck_assert_int_eq(params_build_sync(&c, &s, &out), 1);
	ck_assert_uint_eq(strlen(out), 300000 + strlen("SELECT FROM set_config('my.big', '', false);"));
	free(out);
	free(v);
	params_clear(&c);
}
END_TEST

/* What a prepared statement's runs do to the settings, from its text. */
START_TEST(setters_classified)
{
	uint16_t n = 0, v = 0;
#define KIND(q) params_setter_of(q, strlen(q), &n, &v)
	ck_assert_int_eq(KIND("SELECT 1"), PARAMS_SETTER_NONE);
	ck_assert_int_eq(KIND("INSERT INTO t VALUES ($1)"), PARAMS_SETTER_NONE);
	ck_assert_int_eq(KIND("SET search_path TO a, b"), PARAMS_SETTER_TEXT);
	ck_assert_int_eq(KIND("RESET search_path"), PARAMS_SETTER_TEXT);
	ck_assert_int_eq(KIND("SELECT set_config('myapp.x', 'y', false)"), PARAMS_SETTER_TEXT);
	ck_assert_int_eq(KIND("select set_config($1, $2, false)"), PARAMS_SETTER_BOUND);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(v, 2);
	ck_assert_int_eq(KIND(" SELECT pg_catalog.set_config ( $3 , $12 , FALSE ) ; "), PARAMS_SETTER_BOUND);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(v, 12);
	/* transaction-scoped: nothing for good */
	ck_assert_int_eq(KIND("SELECT set_config($1, $2, true)"), PARAMS_SETTER_NONE);
	ck_assert_int_eq(KIND("SET LOCAL search_path TO a"), PARAMS_SETTER_NONE);
	/* what pgcat cannot follow */
	ck_assert_int_eq(KIND("SELECT set_config($1, $2, $3)"), PARAMS_SETTER_UNTRACKED);
	ck_assert_int_eq(KIND("SELECT set_config($1, $2, false), 1"), PARAMS_SETTER_UNTRACKED);
	ck_assert_int_eq(KIND("SELECT set_config($1, $2, false); SELECT 1"), PARAMS_SETTER_UNTRACKED);
	ck_assert_int_eq(KIND("SET ROLE someone"), PARAMS_SETTER_UNTRACKED);
	ck_assert_int_eq(KIND("SELECT set_config($0, $2, false)"), PARAMS_SETTER_UNTRACKED);
#undef KIND
}
END_TEST

Suite *params_suite(void)
{
	Suite *s = suite_create("params");
	TCase *t = tcase_create("params");
	tcase_add_test(t, options_split_as_postgresql);
	tcase_add_test(t, options_ignoring_names);
	tcase_add_test(t, options_switches_as_postgresql);
	tcase_add_test(t, statements_tracked);
	tcase_add_test(t, tracking_bounds);
	tcase_add_test(t, sync_statements);
	tcase_add_test(t, setters_classified);
	suite_add_tcase(s, t);
	return s;
}
