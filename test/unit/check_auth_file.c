/* SPDX-License-Identifier: MIT */
/* Unit tests for auth_file: PgBouncer's userlist.txt format. */
#include "check_suites.h"

#include <stdio.h>
#include <string.h>

#include "auth_file.h"

struct bad_lines {
	int lines[16];
	int n;
};

static void note_bad(void *arg, int line, const char *why)
{
	struct bad_lines *b = arg;
	ck_assert_ptr_nonnull(why);
	if (b->n < 16)
		b->lines[b->n++] = line;
}

static void parse(const char *text, struct auth_file *af, struct bad_lines *bad)
{
	memset(bad, 0, sizeof *bad);
	ck_assert(auth_file_parse(text, strlen(text), af, note_bad, bad));
}

START_TEST(test_three_kinds_of_secret)
{
	struct auth_file af;
	struct bad_lines bad;
	parse("\"app\" \"SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy\"\n"
	      "\"md5user\" \"md5b8c5a6a0e1f0a6f9f8c5e5d0b0b0b0b0\"\n"
	      "\"plain\" \"p@ss word\"\n",
	      &af, &bad);
	ck_assert_int_eq(bad.n, 0);
	ck_assert_uint_eq(af.n, 3);
	ck_assert_str_eq(auth_file_find(&af, "app")->secret, "SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy");
	ck_assert_str_eq(auth_file_find(&af, "md5user")->secret, "md5b8c5a6a0e1f0a6f9f8c5e5d0b0b0b0b0");
	ck_assert_str_eq(auth_file_find(&af, "plain")->secret, "p@ss word");
	ck_assert_int_eq(auth_file_find(&af, "plain")->line, 3);
	ck_assert_ptr_null(auth_file_find(&af, "nobody"));
	auth_file_free(&af);
}
END_TEST

START_TEST(test_doubled_quotes_comments_blank_crlf)
{
	struct auth_file af;
	struct bad_lines bad;
	parse("; comment\r\n"
	      "# another\n"
	      "\n"
	      "   \t\n"
	      "  \"we\"\"ird\"\t\"pa\"\"ss\" and anything after\r\n"
	      "\"last\" \"no newline\"",
	      &af, &bad);
	ck_assert_int_eq(bad.n, 0);
	ck_assert_uint_eq(af.n, 2);
	ck_assert_str_eq(af.entries[0].user, "we\"ird");
	ck_assert_str_eq(af.entries[0].secret, "pa\"ss");
	ck_assert_int_eq(af.entries[0].line, 5);
	ck_assert_str_eq(af.entries[1].secret, "no newline");
	auth_file_free(&af);
}
END_TEST

START_TEST(test_bad_lines_skipped_with_their_numbers)
{
	struct auth_file af;
	struct bad_lines bad;
	parse("\"ok\" \"1\"\n"
	      "\"unterminated \"x\n"
	      "bare words\n"
	      "\"onlyuser\"\n"
	      "\"\" \"empty user\"\n"
	      "\"ok2\" \"2\"\n",
	      &af, &bad);
	ck_assert_int_eq(bad.n, 4);
	ck_assert_int_eq(bad.lines[0], 2);
	ck_assert_int_eq(bad.lines[1], 3);
	ck_assert_int_eq(bad.lines[2], 4);
	ck_assert_int_eq(bad.lines[3], 5);
	ck_assert_uint_eq(af.n, 2);
	ck_assert_str_eq(af.entries[1].user, "ok2");
	auth_file_free(&af);
}
END_TEST

START_TEST(test_duplicate_user_keeps_last_and_long_field_refused)
{
	struct auth_file af;
	struct bad_lines bad;
	char text[4096];
	char big[AUTH_FILE_MAX_FIELD + 2];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	snprintf(text, sizeof text, "\"u\" \"first\"\n\"u\" \"second\"\n\"long\" \"%s\"\n", big);
	parse(text, &af, &bad);
	ck_assert_uint_eq(af.n, 1);
	ck_assert_str_eq(af.entries[0].secret, "second");
	ck_assert_int_eq(af.entries[0].line, 2);
	ck_assert_int_eq(bad.n, 1);
	ck_assert_int_eq(bad.lines[0], 3);
	auth_file_free(&af);
	/* the longest that fits: PgBouncer's longest password, 2047 bytes */
	big[AUTH_FILE_MAX_FIELD - 1] = '\0';
	ck_assert_uint_eq(strlen(big), 2047);
	snprintf(text, sizeof text, "\"longpass\" \"%s\"\n", big);
	parse(text, &af, &bad);
	ck_assert_uint_eq(af.n, 1);
	ck_assert_str_eq(af.entries[0].secret, big);
	ck_assert_int_eq(bad.n, 0);
	auth_file_free(&af);
}
END_TEST

START_TEST(test_embedded_nul_and_empty_text)
{
	struct auth_file af;
	struct bad_lines bad = { 0 };
	static const char t[] = "\"a\" \"b\0c\"\n\"d\" \"e\"\n";
	ck_assert(auth_file_parse(t, sizeof t - 1, &af, note_bad, &bad));
	ck_assert_int_eq(bad.n, 1);
	ck_assert_uint_eq(af.n, 1);
	ck_assert_str_eq(af.entries[0].user, "d");
	auth_file_free(&af);
	ck_assert(auth_file_parse("", 0, &af, NULL, NULL));
	ck_assert_uint_eq(af.n, 0);
	auth_file_free(&af);
}
END_TEST

Suite *auth_file_suite(void)
{
	Suite *s = suite_create("auth_file");
	TCase *tc = tcase_create("parse");
	tcase_add_test(tc, test_three_kinds_of_secret);
	tcase_add_test(tc, test_doubled_quotes_comments_blank_crlf);
	tcase_add_test(tc, test_bad_lines_skipped_with_their_numbers);
	tcase_add_test(tc, test_duplicate_user_keeps_last_and_long_field_refused);
	tcase_add_test(tc, test_embedded_nul_and_empty_text);
	suite_add_tcase(s, tc);
	return s;
}
