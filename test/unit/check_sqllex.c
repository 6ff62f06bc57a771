/* SPDX-License-Identifier: MIT */
/* sqllex: where comments, quotes, keywords, identifiers and statements end,
 * as PostgreSQL's lexer draws those boundaries, and the places that read
 * SQL through it (params, route) keeping to them. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "check_suites.h"
#include "notify.h"
#include "notify_session.h"
#include "params.h"
#include "route.h"
#include "sqllex.h"

static size_t blank(const char *s)
{
	return sqllex_skip_blank(s, strlen(s), 0);
}

static size_t quoted(const char *s, size_t i)
{
	return sqllex_quoted_end(s, strlen(s), i);
}

static size_t stmt_end(const char *s, size_t *content)
{
	return sqllex_statement_end(s, strlen(s), 0, content);
}

START_TEST(comments)
{
	ck_assert_uint_eq(blank("  \t\n\r\fx"), 6);
	ck_assert_uint_eq(blank("-- a comment\nx"), 13);
	/* a carriage return ends a line comment too (newline is [\n\r]) */
	ck_assert_uint_eq(blank("-- a\rSET"), 5);
	ck_assert_uint_eq(blank("/* a */ /* b */x"), 15);
	ck_assert_uint_eq(blank("-- a\n/* b */ -- c\n  x"), 20);
	/* \v is not whitespace to libpg_query's PostgreSQL 15 */
	ck_assert_uint_eq(blank("\vx"), 0);
	/* an unclosed comment runs to the end */
	ck_assert_uint_eq(blank("/* a"), 4);
	ck_assert_uint_eq(quoted("/* a", 0), SQLLEX_OPEN);
	/* "-" and "/" alone are operators */
	ck_assert_uint_eq(blank("- 1"), 0);
	ck_assert_uint_eq(blank("/ 1"), 0);
	ck_assert_uint_eq(quoted("a - 1", 2), 2);
	ck_assert_uint_eq(blank(""), 0);
	ck_assert_uint_eq(blank("-"), 0);
	ck_assert_uint_eq(blank("/"), 0);
}
END_TEST

START_TEST(nested_comments)
{
	/* block comments nest: the first close ends only the inner one */
	ck_assert_uint_eq(blank("/* a /* b */ c */x"), 17);
	ck_assert_uint_eq(blank("/* a /* b */ c x"), 16);
	ck_assert_uint_eq(quoted("/* a /* b */ c x", 0), SQLLEX_OPEN);
	ck_assert_uint_eq(blank("/**/x"), 4);
	ck_assert_uint_eq(blank("/*/ */x"), 6);
	ck_assert_uint_eq(blank("/* **/x"), 6);
	/* quotes in comments mean nothing */
	ck_assert_uint_eq(blank("/* it's */x"), 10);
	ck_assert_uint_eq(blank("-- it's\nx"), 8);
}
END_TEST

START_TEST(strings)
{
	ck_assert_uint_eq(quoted("'abc'x", 0), 5);
	ck_assert_uint_eq(quoted("'a''b'x", 0), 6);
	ck_assert_uint_eq(quoted("'a", 0), SQLLEX_OPEN);
	ck_assert_uint_eq(sqllex_skip_quoted("'a", 2, 0), 2);
	/* a backslash is plain in a standard string */
	ck_assert_uint_eq(quoted("'a\\'x'", 0), 4);
	/* E'': backslash escapes, and '' still */
	ck_assert_uint_eq(quoted("E'a\\'b'x", 1), 7);
	ck_assert_uint_eq(quoted("e'a\\\\'x", 1), 6);
	ck_assert_uint_eq(quoted("E'a''b'x", 1), 7);
	ck_assert_uint_eq(quoted(" E'\\'", 2), SQLLEX_OPEN);
	/* an E ending a longer identifier is no prefix */
	ck_assert_uint_eq(quoted("namE'a\\'x", 4), 8);
	ck_assert_uint_eq(quoted("a$E'a\\'x", 3), 7);
	/* nothing quoted starts here */
	ck_assert_uint_eq(quoted("abc", 0), 0);
	ck_assert_uint_eq(quoted("abc", 3), 3);
}
END_TEST

START_TEST(quoted_identifiers)
{
	ck_assert_uint_eq(quoted("\"a\"\"b\"x", 0), 6);
	ck_assert_uint_eq(quoted("\"it's\"x", 0), 6);
	ck_assert_uint_eq(quoted("\"a", 0), SQLLEX_OPEN);

	char out[16];
	size_t i = 0;
	const char *s = "\"My \"\"Name\"\"\"  next";
	ck_assert(sqllex_ident(s, strlen(s), &i, out, sizeof out));
	ck_assert_str_eq(out, "My \"Name\"");
	ck_assert_uint_eq(i, 15);
	/* unquoted: folded; '$' and digits continue it; bytes >= 0x80 are letters */
	s = "FoO_1$x.y";
	i = 0;
	ck_assert(sqllex_ident(s, strlen(s), &i, out, sizeof out));
	ck_assert_str_eq(out, "foo_1$x");
	ck_assert_uint_eq(i, 7);
	s = "\xc3\x89t\xc3\xa9 ";
	i = 0;
	ck_assert(sqllex_ident(s, strlen(s), &i, out, sizeof out));
	ck_assert_str_eq(out, "\xc3\x89t\xc3\xa9");
	/* not identifiers: a digit first, an empty or unclosed quote, too long */
	const char *bad[] = { "1abc", "\"\"", "\"abc", "$1", "", ";", "abcdefghijklmnop", "\"abcdefghijklmnop\"" };
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
		i = 0;
		ck_assert_msg(!sqllex_ident(bad[k], strlen(bad[k]), &i, out, sizeof out), "%s", bad[k]);
		ck_assert_uint_eq(i, 0);
	}
	/* an exact fit */
	i = 0;
	ck_assert(sqllex_ident("abcdefghijklmno", 15, &i, out, sizeof out));
	ck_assert_str_eq(out, "abcdefghijklmno");
}
END_TEST

START_TEST(keywords)
{
	size_t i = 0;
	const char *s = "SeT /* c */ x";
	ck_assert(sqllex_keyword(s, strlen(s), &i, "set"));
	ck_assert_uint_eq(i, 12);
	/* whole words only: '_', digits, '$' and bytes >= 0x80 continue one */
	const char *not_set[] = { "setx", "set_x", "set1", "set$", "set\xc3\xa9", "se", "" };
	for (size_t k = 0; k < sizeof not_set / sizeof *not_set; k++) {
		i = 0;
		ck_assert_msg(!sqllex_keyword(not_set[k], strlen(not_set[k]), &i, "set"), "%s", not_set[k]);
		ck_assert_uint_eq(i, 0);
	}
	const char *is_set[] = { "set", "SET;", "set(", "set'x'", "set\"x\"", "set--c", "set/*c*/" };
	for (size_t k = 0; k < sizeof is_set / sizeof *is_set; k++) {
		i = 0;
		ck_assert_msg(sqllex_keyword(is_set[k], strlen(is_set[k]), &i, "set"), "%s", is_set[k]);
	}
	/* the length bounds the match, not a NUL */
	i = 0;
	ck_assert(!sqllex_keyword("settings", 2, &i, "set"));
	i = 0;
	ck_assert(sqllex_keyword("settings", 3, &i, "set"));
}
END_TEST

/* Whitespace alone, \v included: for pgcat's own commands. */
START_TEST(cspace_and_words)
{
	ck_assert(sqllex_is_cspace('\v') && !sqllex_is_space('\v'));
	const char *sp = " \t\n\r\f\v";
	for (const char *p = sp; *p; p++)
		ck_assert(sqllex_is_cspace((unsigned char)*p));
	ck_assert(!sqllex_is_cspace('\0') && !sqllex_is_cspace('x') && !sqllex_is_cspace(0xa0));
	ck_assert_uint_eq(sqllex_skip_cspace(" \t\v\fx ", 6, 0), 4);
	/* comments are not skipped */
	ck_assert_uint_eq(sqllex_skip_cspace(" -- c\nx", 7, 0), 1);
	ck_assert_uint_eq(sqllex_skip_cspace(" /* c */x", 9, 0), 1);
	ck_assert_uint_eq(sqllex_skip_cspace("  ", 2, 0), 2);
	ck_assert_uint_eq(sqllex_skip_cspace(NULL, 0, 0), 0);
	ck_assert_uint_eq(sqllex_skip_cspace("  x", 1, 0), 1);

	ck_assert_uint_eq(sqllex_word_end("Set shard", 9, 0), 3);
	ck_assert_uint_eq(sqllex_word_end("set_1$\xc3\xa9.x", 10, 0), 8);
	/* a digit or a '$' may start a word */
	ck_assert_uint_eq(sqllex_word_end("1abc ", 5, 0), 4);
	ck_assert_uint_eq(sqllex_word_end("$1;", 3, 0), 2);
	ck_assert_uint_eq(sqllex_word_end("'x'", 3, 0), 0);
	ck_assert_uint_eq(sqllex_word_end("ab", 2, 2), 2);
	ck_assert_uint_eq(sqllex_word_end("abcd", 2, 0), 2);
}
END_TEST

static bool value(const char *s, size_t *i, char *out, size_t outsz)
{
	return sqllex_value(s, strlen(s), i, out, outsz);
}

START_TEST(unquote_and_values)
{
	char out[8];
	size_t i = 0;
	/* quotes: doubled ones undone, a backslash plain, *i just past */
	ck_assert(sqllex_unquote("'it''s' x", 9, &i, out, sizeof out));
	ck_assert_str_eq(out, "it's");
	ck_assert_uint_eq(i, 7);
	i = 0;
	ck_assert(sqllex_unquote("\"My\"\"N\";", 8, &i, out, sizeof out));
	ck_assert_str_eq(out, "My\"N");
	ck_assert_uint_eq(i, 7);
	i = 0;
	ck_assert(sqllex_unquote("'a\\'", 4, &i, out, sizeof out));
	ck_assert_str_eq(out, "a\\");
	/* the other quote is plain inside */
	i = 0;
	ck_assert(sqllex_unquote("'a\"b'", 5, &i, out, sizeof out));
	ck_assert_str_eq(out, "a\"b");
	/* empty ones are read */
	i = 0;
	ck_assert(sqllex_unquote("''", 2, &i, out, sizeof out));
	ck_assert_str_eq(out, "");
	ck_assert_uint_eq(i, 2);
	i = 0;
	ck_assert(sqllex_unquote("\"\"", 2, &i, out, sizeof out));
	ck_assert_uint_eq(i, 2);
	/* from an index; the prefix E is not looked at */
	i = 1;
	ck_assert(sqllex_unquote("E'a\\'", 5, &i, out, sizeof out));
	ck_assert_str_eq(out, "a\\");
	ck_assert_uint_eq(i, 5);
	/* a NUL inside is text like any byte (the length bounds it) */
	i = 0;
	ck_assert(sqllex_unquote("'a\0b'", 5, &i, out, sizeof out));
	ck_assert(memcmp(out, "a\0b", 4) == 0);
	/* no quote, unclosed, too long: false, nothing moved, out "" */
	const char *bad[] = { "abc", "", " 'a'", "'abc", "'it''", "\"a'", "'abcdefgh'", "'abcdef''g'" };
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
		i = 0;
		memset(out, 'x', sizeof out);
		ck_assert_msg(!sqllex_unquote(bad[k], strlen(bad[k]), &i, out, sizeof out), "%s", bad[k]);
		ck_assert_uint_eq(i, 0);
		ck_assert_str_eq(out, "");
	}
	/* an exact fit; no room for the NUL; no buffer: only checked */
	i = 0;
	ck_assert(sqllex_unquote("'abcdefg'", 9, &i, out, sizeof out));
	ck_assert_str_eq(out, "abcdefg");
	i = 0;
	ck_assert(!sqllex_unquote("''", 2, &i, out, 0));
	i = 0;
	ck_assert(sqllex_unquote("'abcdefghijkl'", 14, &i, NULL, 0));
	ck_assert_uint_eq(i, 14);

	/* bare values: ASCII letters, digits, _ . + - */
	const struct {
		const char *s;
		const char *out;
		size_t end;
	} good[] = {
		{ "on;", "on", 2 },
		{ "-7 ", "-7", 2 },
		{ "+1.5e3", "+1.5e3", 6 },
		{ "De_f.1 x", "De_f.1", 6 },
		{ "1--x\n", "1--x", 4 },     /* no comment inside a bare value */
		{ "a/*b", "a", 1 },
		{ "a$b", "a", 1 },           /* '$' and bytes >= 0x80 end it */
		{ "a\xc3\xa9", "a", 1 },
		{ "x'1'", "x", 1 },
		{ "'q' x", "q", 3 },         /* a quote: sqllex_unquote's */
	};
	for (size_t k = 0; k < sizeof good / sizeof *good; k++) {
		i = 0;
		ck_assert_msg(value(good[k].s, &i, out, sizeof out), "%s", good[k].s);
		ck_assert_str_eq(out, good[k].out);
		ck_assert_uint_eq(i, good[k].end);
	}
	const char *no[] = { "", " x", ";", "$1", "\xc3\xa9", "(1)", "'a", "abcdefgh", "=1" };
	for (size_t k = 0; k < sizeof no / sizeof *no; k++) {
		i = 0;
		memset(out, 'x', sizeof out);
		ck_assert_msg(!value(no[k], &i, out, sizeof out), "%s", no[k]);
		ck_assert_uint_eq(i, 0);
		ck_assert_str_eq(out, "");
	}
	i = 0;
	ck_assert(value("abcdefgh", &i, NULL, 0));
	ck_assert_uint_eq(i, 8);
	i = 0;
	ck_assert(!value("a", &i, out, 1));
	i = 2;
	ck_assert(value("= 42", &i, out, sizeof out));
	ck_assert_str_eq(out, "42");
}
END_TEST

START_TEST(dollar_quotes)
{
	ck_assert_uint_eq(quoted("$$a;b$$x", 0), 7);
	ck_assert_uint_eq(quoted("$fn$ a $$ b $fn$x", 0), 16);
	ck_assert_uint_eq(quoted("$_a1$x$_a1$", 0), 11);
	ck_assert_uint_eq(quoted("$\xc3\xa9$x$\xc3\xa9$", 0), 9);
	ck_assert_uint_eq(quoted("$a$ never closed", 0), SQLLEX_OPEN);
	/* parameters and '$' inside identifiers are not quotes */
	ck_assert_uint_eq(quoted("$1", 0), 0);
	ck_assert_uint_eq(quoted("$1$ x $1$", 0), 0);
	ck_assert_uint_eq(quoted("a$$b$$", 1), 1);
	ck_assert_uint_eq(quoted("\xc3\xa9$$b$$", 2), 2);
	ck_assert_uint_eq(quoted("$", 0), 0);
	ck_assert_uint_eq(quoted("$a", 0), 0);
	/* a tag ends at its '$': "$a$b$" opens with $a$ */
	ck_assert_uint_eq(quoted("$a$b$a$", 0), 7);
}
END_TEST

START_TEST(statement_end)
{
	size_t content;
	ck_assert_uint_eq(stmt_end("SELECT 1; SELECT 2", &content), 8);
	ck_assert_uint_eq(content, 8);
	ck_assert_uint_eq(stmt_end("SELECT 1", &content), 8);
	ck_assert_uint_eq(content, 8);
	/* semicolons in strings, names, comments and dollar quotes */
	ck_assert_uint_eq(stmt_end("SELECT ';' ; x", NULL), 11);
	ck_assert_uint_eq(stmt_end("SELECT E'\\';' ; x", NULL), 14);
	ck_assert_uint_eq(stmt_end("SELECT \"a;b\" ; x", NULL), 13);
	ck_assert_uint_eq(stmt_end("SELECT 1 /* ; */ -- ;\n ; x", &content), 23);
	ck_assert_uint_eq(content, 8);
	ck_assert_uint_eq(stmt_end("SELECT $f$ ; $f$; x", &content), 16);
	ck_assert_uint_eq(content, 16);
	ck_assert_uint_eq(stmt_end("SELECT $1; x", NULL), 9);
	/* an unclosed quote runs to the end */
	ck_assert_uint_eq(stmt_end("SELECT 'a; b", &content), 12);
	ck_assert_uint_eq(content, 12);
	ck_assert_uint_eq(stmt_end("  ", &content), 2);
	ck_assert_uint_eq(content, 0);

	ck_assert(sqllex_rest_is_empty(" ; ;; -- x\n /* y */ ", 20, 0));
	ck_assert(sqllex_rest_is_empty("", 0, 0));
	ck_assert(!sqllex_rest_is_empty(" ; x", 4, 0));
}
END_TEST

/* The readers built on it keep PostgreSQL's boundaries. */
START_TEST(readers)
{
	/* COMMIT and the like, with comments and semicolons around */
	ck_assert_str_eq(sqllex_plain_end_tag("commit", 6), "COMMIT");
	ck_assert_str_eq(sqllex_plain_end_tag(" END WORK ;; ", 13), "COMMIT");
	ck_assert_str_eq(sqllex_plain_end_tag("/* app */ ROLLBACK TRANSACTION; -- done", 39), "ROLLBACK");
	ck_assert_str_eq(sqllex_plain_end_tag("abort\f", 6), "ROLLBACK");
	const char *not_end[] = { "commit and chain", "rollback to a", "commit_x", "commit; select 1", "committed", "" };
	for (size_t k = 0; k < sizeof not_end / sizeof *not_end; k++)
		ck_assert_msg(sqllex_plain_end_tag(not_end[k], strlen(not_end[k])) == NULL, "%s", not_end[k]);

	/* SET's value ends at the ';' outside quotes and comments, without
	 * the comments before it */
	struct params p;
	params_init(&p);
	const char *sql = "/* a /* nested */ SET x */ SET search_path TO 'a;b' /* ; */ -- c\n;";
	ck_assert_int_eq(params_track_statement(&p, sql, strlen(sql), NULL), PARAMS_STMT_SET);
	ck_assert_str_eq(params_get(&p, "search_path")->value, "'a;b'");
	/* what a nested comment hides is not a SET */
	sql = "/* a /* b */ SET work_mem TO 1 */ SELECT 1";
	ck_assert_int_eq(params_track_statement(&p, sql, strlen(sql), NULL), PARAMS_STMT_NONE);
	ck_assert(params_get(&p, "work_mem") == NULL);
	/* a line comment ends at a carriage return */
	sql = "-- c\rSET work_mem TO '4MB'";
	ck_assert_int_eq(params_track_statement(&p, sql, strlen(sql), NULL), PARAMS_STMT_SET);
	ck_assert(params_get(&p, "work_mem") != NULL);
	/* $ continues a word: "set$x" is no SET */
	sql = "set$x TO 1";
	ck_assert_int_eq(params_track_statement(&p, sql, strlen(sql), NULL), PARAMS_STMT_NONE);
	/* the text ends at its first NUL */
	ck_assert_int_eq(params_track_statement(&p, "SET a.b TO 1\0;x", 15, NULL), PARAMS_STMT_SET);
	ck_assert_str_eq(params_get(&p, "a.b")->value, "1");
	params_clear(&p);
}
END_TEST

START_TEST(mentions_notify)
{
	const char *yes[] = { "NOTIFY ch", "select pg_notify('a', 'b')", "x NoTiFy", "notify" };
	const char *no[] = { "SELECT 1", "notif", "n otify", "", "LISTEN notifx" + 7 };
	for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
		ck_assert_msg(sqllex_mentions_notify(yes[i], strlen(yes[i])), "%s", yes[i]);
	for (size_t i = 0; i < sizeof no / sizeof *no; i++)
		ck_assert_msg(!sqllex_mentions_notify(no[i], strlen(no[i])), "%s", no[i]);
	/* never past len */
	ck_assert(!sqllex_mentions_notify("notify", 5));
}
END_TEST

START_TEST(listen_statements)
{
	char ch[NOTIFY_CHANNEL_MAX + 1];
	ck_assert_int_eq(notify_sql_parse("LISTEN foo", 10, ch, sizeof ch), NOTIFY_SQL_LISTEN);
	ck_assert_str_eq(ch, "foo");
	ck_assert_int_eq(notify_sql_parse(" /* c */ listen \"Foo Bar\" ; ", 30, ch, sizeof ch), NOTIFY_SQL_LISTEN);
	ck_assert_str_eq(ch, "Foo Bar");
	ck_assert_int_eq(notify_sql_parse("UNLISTEN MixedCase", 18, ch, sizeof ch), NOTIFY_SQL_UNLISTEN);
	ck_assert_str_eq(ch, "mixedcase");
	ck_assert_int_eq(notify_sql_parse("unlisten *;", 11, ch, sizeof ch), NOTIFY_SQL_UNLISTEN_ALL);
	/* more than one statement, or anything after the name: the server's */
	ck_assert_int_eq(notify_sql_parse("LISTEN a; SELECT 1", 18, ch, sizeof ch), NOTIFY_SQL_NONE);
	ck_assert_int_eq(notify_sql_parse("LISTEN a b", 10, ch, sizeof ch), NOTIFY_SQL_NONE);
	ck_assert_int_eq(notify_sql_parse("LISTEN", 6, ch, sizeof ch), NOTIFY_SQL_NONE);
	ck_assert_int_eq(notify_sql_parse("LISTENING x", 11, ch, sizeof ch), NOTIFY_SQL_NONE);
	ck_assert_int_eq(notify_sql_parse("NOTIFY a", 8, ch, sizeof ch), NOTIFY_SQL_NONE);
	/* the text ends at its first NUL; names are cut at 63 bytes */
	ck_assert_int_eq(notify_sql_parse("LISTEN a\0 b", 12, ch, sizeof ch), NOTIFY_SQL_LISTEN);
	ck_assert_str_eq(ch, "a");
	char longer[200];
	int n = snprintf(longer, sizeof longer, "LISTEN %0100d", 7);
	ck_assert_int_eq(notify_sql_parse(longer, (size_t)n, ch, sizeof ch), NOTIFY_SQL_NONE);   /* a number */
	n = snprintf(longer, sizeof longer, "LISTEN x%0100d", 7);
	ck_assert_int_eq(notify_sql_parse(longer, (size_t)n, ch, sizeof ch), NOTIFY_SQL_LISTEN);
	ck_assert_uint_eq(strlen(ch), NOTIFY_CHANNEL_MAX);
}
END_TEST

Suite *sqllex_suite(void)
{
	Suite *s = suite_create("sqllex");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, comments);
	tcase_add_test(tc, nested_comments);
	tcase_add_test(tc, strings);
	tcase_add_test(tc, quoted_identifiers);
	tcase_add_test(tc, keywords);
	tcase_add_test(tc, cspace_and_words);
	tcase_add_test(tc, unquote_and_values);
	tcase_add_test(tc, dollar_quotes);
	tcase_add_test(tc, statement_end);
	tcase_add_test(tc, readers);
	tcase_add_test(tc, mentions_notify);
	tcase_add_test(tc, listen_statements);
	suite_add_tcase(s, tc);
	return s;
}
