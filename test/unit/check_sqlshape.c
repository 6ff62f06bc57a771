/* SPDX-License-Identifier: MIT */
/* sqlshape: which texts get a shape, what it looks like, and that texts the
 * lexer cannot split exactly as PostgreSQL does get none. */
#include <check.h>
#include <string.h>

#include "check_suites.h"
#include "sqlshape.h"

/* The shape of sql with its markers shown as #i (ICONST), #f (FCONST) and
 * #s (SCONST), or "" for none. */
static const char *shape(const char *sql)
{
	static char shown[4096];
	char out[2048];
	size_t n = sqlshape_make(sql, strlen(sql), out, sizeof out);
	size_t k = 0;
	for (size_t i = 0; i < n && k + 3 < sizeof shown; i++) {
		if (out[i] == SQLSHAPE_ICONST || out[i] == SQLSHAPE_FCONST || out[i] == SQLSHAPE_SCONST) {
			shown[k++] = '#';
			shown[k++] = out[i] == SQLSHAPE_ICONST ? 'i' : out[i] == SQLSHAPE_FCONST ? 'f' : 's';
		} else {
			shown[k++] = out[i];
		}
	}
	shown[k] = '\0';
	return shown;
}

START_TEST(constants_blanked)
{
	ck_assert_str_eq(shape("SELECT abalance FROM pgbench_accounts WHERE aid = 48213;"),
			 "SELECT abalance FROM pgbench_accounts WHERE aid = #i;");
	ck_assert_str_eq(shape("select * from t where a = 'x''y' and b = 1.5 and c = .5e-3 and d = 7E2"),
			 "select * from t where a = #s and b = #f and c = #f and d = #f");
	ck_assert_str_eq(shape("INSERT INTO t (a, b) VALUES (1, 'two'), (-3, '')"),
			 "INSERT INTO t (a, b) VALUES (#i, #s), (-#i, #s)");
	ck_assert_str_eq(shape("UPDATE t SET a = a + 1 WHERE id = $1"), "UPDATE t SET a = a + #i WHERE id = $1");
	ck_assert_str_eq(shape("DELETE FROM t WHERE x = 5"), "DELETE FROM t WHERE x = #i");
	ck_assert_str_eq(shape("WITH c AS (SELECT 1) SELECT * FROM c"), "WITH c AS (SELECT #i) SELECT * FROM c");
	ck_assert_str_eq(shape("VALUES (1)"), "VALUES (#i)");
	ck_assert_str_eq(shape("  \n\tselect 1 ; \n"), "  \n\tselect #i ; \n");
	/* int32 bounds: beyond them PostgreSQL's lexer makes an FCONST */
	ck_assert_str_eq(shape("SELECT 2147483647, 2147483648, 00000000000000000001"), "SELECT #i, #f, #i");
	ck_assert_str_eq(shape("SELECT 99999999999999999999999999"), "SELECT #f");
	/* casts, operators, parameters and identifiers with digits stay */
	ck_assert_str_eq(shape("SELECT '1'::int8, t1.c2, $12 FROM s.t9 WHERE a<>-1"),
			 "SELECT #s::int8, t1.c2, $12 FROM s.t9 WHERE a<>-#i");
	ck_assert_str_eq(shape("SELECT a$1 FROM t WHERE b = 1"), "SELECT a$1 FROM t WHERE b = #i");
	/* quoted identifiers are names, kept with what they hold */
	ck_assert_str_eq(shape("SELECT \"it's \"\"1\"\"\" FROM t WHERE x = 2"), "SELECT \"it's \"\"1\"\"\" FROM t WHERE x = #i");
	/* comments, hints among them, are kept as they are */
	ck_assert_str_eq(shape("/* pgcat: role=primary */ SELECT 1"), "/* pgcat: role=primary */ SELECT #i");
	ck_assert_str_eq(shape("-- it's 1\nSELECT 2 -- and 3 'x'\n"), "-- it's 1\nSELECT #i -- and 3 'x'\n");
	ck_assert_str_eq(shape("/* a /* nested 'x' */ 1 */ SELECT 5"), "/* a /* nested 'x' */ 1 */ SELECT #i");
	ck_assert_str_eq(shape("SELECT 5--3"), "SELECT #i--3");
	ck_assert_str_eq(shape("SELECT 1.e5, 1."), "SELECT #f, #f");
	/* a string continued on the next line is kept as two, with what is between */
	ck_assert_str_eq(shape("SELECT 'a'\n'b'"), "SELECT #s\n#s");
	/* multibyte text */
	ck_assert_str_eq(shape("SELECT 'été', naïve FROM t WHERE ü = 3"), "SELECT #s, naïve FROM t WHERE ü = #i");
}
END_TEST

START_TEST(no_shape)
{
	/* not a single DML statement: the verdict may depend on a constant
	 * (EXPLAIN (ANALYZE 0)), or there is more than one statement */
	ck_assert_str_eq(shape("EXPLAIN (ANALYZE 0) DELETE FROM t WHERE id = 1"), "");
	ck_assert_str_eq(shape("SET statement_timeout = 5"), "");
	ck_assert_str_eq(shape("BEGIN; SELECT 1"), "");
	ck_assert_str_eq(shape("SELECT 1; SELECT 2"), "");
	ck_assert_str_eq(shape("SELECT 1; -- only a comment after\n"), "SELECT #i; -- only a comment after\n");
	ck_assert_str_eq(shape("(SELECT 1)"), "");
	ck_assert_str_eq(shape("selectx 1"), "");
	/* no constant: the text is its own key */
	ck_assert_str_eq(shape("SELECT * FROM t"), "");
	ck_assert_str_eq(shape("SELECT * FROM t WHERE id = $1"), "");
	/* prefixed strings and strings whose reading depends on settings */
	ck_assert_str_eq(shape("SELECT E'a\\nb'"), "");
	ck_assert_str_eq(shape("SELECT 'a\\'"), "");
	ck_assert_str_eq(shape("SELECT B'101', 1"), "");
	ck_assert_str_eq(shape("SELECT X'1F', 1"), "");
	ck_assert_str_eq(shape("SELECT U&'d\\0061t', 1"), "");
	ck_assert_str_eq(shape("SELECT date'2020-01-01'"), "");
	ck_assert_str_eq(shape("SELECT $$a$$"), "");
	ck_assert_str_eq(shape("SELECT $tag$a$tag$"), "");
	/* numbers PostgreSQL 15 splits in its own ways */
	ck_assert_str_eq(shape("SELECT 1e"), "");
	ck_assert_str_eq(shape("SELECT 1e+"), "");
	ck_assert_str_eq(shape("SELECT 1..2"), "");
	ck_assert_str_eq(shape("SELECT 1abc"), "");
	ck_assert_str_eq(shape("SELECT 0x1F"), "");
	ck_assert_str_eq(shape("SELECT 1_000"), "");
	ck_assert_str_eq(shape("SELECT 1.5.3"), "");
	ck_assert_str_eq(shape("SELECT $1a"), "");
	/* unterminated quotes and comments */
	ck_assert_str_eq(shape("SELECT 'abc"), "");
	ck_assert_str_eq(shape("SELECT \"abc, 1"), "");
	ck_assert_str_eq(shape("SELECT 1 /* open"), "");
	ck_assert_str_eq(shape("/* open SELECT 1"), "");
	/* control bytes would make a marker ambiguous */
	ck_assert_str_eq(shape("SELECT \x01, 1"), "");
	ck_assert_str_eq(shape("SELECT 1\v"), "");

	/* too small an output buffer: no shape, and nothing written past it */
	char out[8];
	memset(out, 'z', sizeof out);
	ck_assert_uint_eq(sqlshape_make("SELECT 12345", 12, out, 7), 0);
	ck_assert_int_eq(out[7], 'z');
	ck_assert_uint_eq(sqlshape_make("SELECT 12345", 12, out, 8), 8);
	ck_assert_uint_eq(sqlshape_make(NULL, 0, out, 8), 0);
	/* an embedded NUL ends the text for PostgreSQL: no shape */
	char big[32];
	ck_assert_uint_eq(sqlshape_make("SELECT 'a\0b'", 12, big, sizeof big), 0);
	ck_assert_uint_eq(sqlshape_make("SELECT 'ab'", 11, big, sizeof big), 8);
	/* wherever it is: among words, in a name, a comment, after the end,
	 * before the first word */
#define WITH_LEN(x) { x, sizeof x - 1 }
	static const struct {
		const char *sql;
		size_t len;
	} nul_in[] = { WITH_LEN("SELECT 1 \0 FROM t"), WITH_LEN("SELECT \"a\0\" = 1"), WITH_LEN("SELECT 1 /* \0 */"),
		       WITH_LEN("SELECT 1 -- \0\n"), WITH_LEN("SELECT 1; /* \0 */"), WITH_LEN("/* \0 */ SELECT 1"),
		       WITH_LEN("SELECT 1 FROM t WHERE name_with_pad = 2\0") };
#undef WITH_LEN
	for (size_t k = 0; k < sizeof nul_in / sizeof *nul_in; k++) {
		ck_assert_msg(memchr(nul_in[k].sql, '\0', nul_in[k].len) != NULL, "case %zu", k);
		char shaped[64];
		ck_assert_msg(sqlshape_make(nul_in[k].sql, nul_in[k].len, shaped, sizeof shaped) == 0, "case %zu", k);
		/* the NUL alone is why: a blank in its place gets one */
		char blank[64];
		memcpy(blank, nul_in[k].sql, nul_in[k].len);
		for (size_t i = 0; i < nul_in[k].len; i++)
			if (blank[i] == '\0')
				blank[i] = ' ';
		ck_assert_msg(sqlshape_make(blank, nul_in[k].len, shaped, sizeof shaped) > 0, "case %zu", k);
	}
	/* the length bounds the text: a NUL-free prefix of a longer buffer */
	ck_assert_uint_eq(sqlshape_make("SELECT 1 garbage 'x", 8, out, 8), 8);
}
END_TEST

START_TEST(same_shape_same_tokens)
{
	/* texts differing only in constant values of one class share a shape;
	 * another class is another shape */
	char a[64], b[64];
	size_t na = sqlshape_make("SELECT * FROM t WHERE a = 1 LIMIT 10", 36, a, sizeof a);
	size_t nb = sqlshape_make("SELECT * FROM t WHERE a = 987654 LIMIT 3", 40, b, sizeof b);
	ck_assert(na > 0 && na == nb && memcmp(a, b, na) == 0);
	nb = sqlshape_make("SELECT * FROM t WHERE a = 1.0 LIMIT 10", 38, b, sizeof b);
	ck_assert(nb == na && memcmp(a, b, na) != 0);
	nb = sqlshape_make("SELECT * FROM t WHERE a = '1' LIMIT 10", 38, b, sizeof b);
	ck_assert(nb == na && memcmp(a, b, na) != 0);
	/* blanks are part of the shape */
	nb = sqlshape_make("SELECT * FROM t WHERE a = 1  LIMIT 10", 37, b, sizeof b);
	ck_assert(nb != na);
}
END_TEST

/* tpl with its one "%s" replaced by pad, into out. */
static void fill(char *out, size_t cap, const char *tpl, const char *pad)
{
	const char *at = strstr(tpl, "%s");
	ck_assert_ptr_nonnull(at);
	size_t head = (size_t)(at - tpl), n = strlen(pad), tail = strlen(at + 2);
	ck_assert_uint_lt(head + n + tail, cap);
	memcpy(out, tpl, head);
	memcpy(out + head, pad, n);
	memcpy(out + head + n, at + 2, tail + 1);
}

/* The scan goes 16 bytes at a time (the last 16 overlapping those before):
 * each kind of byte it stops at is found at every place in and across
 * those blocks, and the words it skips over are read as before. */
START_TEST(every_alignment)
{
	static const struct {
		const char *sql, *shape;   /* %s: the padding */
	} cases[] = {
		{ "SELECT %s FROM t WHERE a = 12", "SELECT %s FROM t WHERE a = #i" },
		{ "SELECT y%s1 FROM t9 WHERE b$2 = 'v'", "SELECT y%s1 FROM t9 WHERE b$2 = #s" },
		{ "SELECT 7 FROM %s WHERE a = .5", "SELECT #i FROM %s WHERE a = #f" },
		{ "SELECT %s\n\t-- 'c' 1\n4;", "SELECT %s\n\t-- 'c' 1\n#i;" },
		{ "SELECT \"%s\" = $1, 3", "SELECT \"%s\" = $1, #i" },
		{ "SELECT y%sE'x'", "" },
		{ "SELECT 1 %s\x01", "" },
		{ "SELECT 1 %s; SELECT 2", "" },
		{ "SELECT 1 FROM y%s1x", "SELECT #i FROM y%s1x" },
		/* a string right after a number or a parameter is a constant of
		 * its own; right after a name it is not read (E'..') */
		{ "SELECT y%s, 3.'abc', .25'v', $1'w'", "SELECT y%s, #f#s, #f#s, $1#s" },
		{ "SELECT y%s, 12'x'", "SELECT y%s, #i#s" },
		{ "SELECT y%s, n12'x'", "" },
	};
	char pad[48], sql[160], want[160];
	for (size_t n = 0; n < 40; n++) {
		memset(pad, 'x', n);
		pad[n] = '\0';
		for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
			fill(sql, sizeof sql, cases[k].sql, pad);
			if (cases[k].shape[0])
				fill(want, sizeof want, cases[k].shape, pad);
			else
				want[0] = '\0';
			ck_assert_msg(strcmp(shape(sql), want) == 0, "%s: %s, not %s", sql, shape(sql), want);
		}
	}
}
END_TEST

Suite *sqlshape_suite(void)
{
	Suite *s = suite_create("sqlshape");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, constants_blanked);
	tcase_add_test(tc, no_shape);
	tcase_add_test(tc, same_shape_same_tokens);
	tcase_add_test(tc, every_alignment);
	suite_add_tcase(s, tc);
	return s;
}
