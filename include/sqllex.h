/* SPDX-License-Identifier: MIT */
/*
 * sqllex: the one lexer for every place that reads SQL text without
 * libpg_query — skipping whitespace and comments, matching a keyword,
 * reading an identifier, finding where a statement ends. Pure: no state,
 * no allocation, every index checked against len.
 *
 * The rules are those of PostgreSQL's scan.l as libpg_query (PostgreSQL 15)
 * has them, where they decide a boundary:
 *  - whitespace is space, tab, newline, carriage return and form feed;
 *  - a line comment runs from "--" to a newline or carriage return; block
 *    comments nest;
 *  - identifiers start with a letter, '_' or a byte >= 0x80 and go on with
 *    those, digits and '$'; unquoted ones fold ASCII letters to lower case,
 *    "quoted" ones keep their case and take "" for a quote;
 *  - 'strings' take '' for a quote; E'strings' (E not inside a longer
 *    identifier) also take backslash escapes; plain strings are read as
 *    with standard_conforming_strings on, PostgreSQL's default;
 *  - $tag$ ... $tag$ is a dollar-quoted string unless the '$' continues an
 *    identifier ($1 is a parameter: the tag cannot start with a digit).
 *
 * Indexes go in and come out; text is s[0..len), not NUL-terminated.
 * PostgreSQL reads a query string only up to its first NUL: callers given
 * a message body cut len there.
 */
#ifndef PGCAT_SQLLEX_H
#define PGCAT_SQLLEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What sqllex_comment_end and sqllex_quoted_end return for a comment or a
 * quote that the text does not close. */
#define SQLLEX_OPEN SIZE_MAX

/* Byte classes, a table because the router's shape-maker (sqlshape.c)
 * tests every byte of every routed statement. */
enum {
	SQLLEX_SPACE = 1,
	SQLLEX_IDENT_START = 2, /* letters, '_', bytes >= 0x80 */
	SQLLEX_IDENT_CONT = 4,  /* ... and digits and '$' */
	SQLLEX_DIGIT = 8
};
extern const uint8_t sqllex_class[256];

static inline bool sqllex_is_space(unsigned char ch)
{
	return sqllex_class[ch] & SQLLEX_SPACE;
}

static inline bool sqllex_is_ident_start(unsigned char ch)
{
	return sqllex_class[ch] & SQLLEX_IDENT_START;
}

static inline bool sqllex_is_ident_cont(unsigned char ch)
{
	return sqllex_class[ch] & SQLLEX_IDENT_CONT;
}

static inline bool sqllex_is_digit(unsigned char ch)
{
	return sqllex_class[ch] & SQLLEX_DIGIT;
}

/* Whitespace as C's isspace() has it in the C locale: sqllex_is_space and
 * vertical tab, which PostgreSQL 15's lexer does not take. For text that
 * never reaches PostgreSQL and has always been split at it: pgcat's own
 * SET/SHOW commands (router_parse_command) and the admin console. */
static inline bool sqllex_is_cspace(unsigned char ch)
{
	return sqllex_is_space(ch) || ch == '\v';
}

/* At s[i] a comment starts ("--" or slash-star). */
static inline bool sqllex_at_comment(const char *s, size_t len, size_t i)
{
	return i + 1 < len && ((s[i] == '-' && s[i + 1] == '-') || (s[i] == '/' && s[i + 1] == '*'));
}

/* The comment at s[i] (sqllex_at_comment): the index after it — for a line
 * comment, the index of its newline or len — or SQLLEX_OPEN for a block
 * comment not closed. */
size_t sqllex_comment_end(const char *s, size_t len, size_t i);

/* A comment, string, quoted identifier or dollar-quoted string at s[i]:
 * the index after it, or SQLLEX_OPEN if the text does not close it; i
 * itself when none starts there. */
size_t sqllex_quoted_end(const char *s, size_t len, size_t i);

/* As sqllex_quoted_end, with len for an unclosed one. */
size_t sqllex_skip_quoted(const char *s, size_t len, size_t i);

/* Past whitespace and comments from i (len after an unclosed comment). */
size_t sqllex_skip_blank(const char *s, size_t len, size_t i);

/* Past sqllex_is_cspace whitespace from i, and nothing else: a comment
 * stops it as any other byte does. */
size_t sqllex_skip_cspace(const char *s, size_t len, size_t i);

/* The index after the bytes from i that continue an identifier
 * (sqllex_is_ident_cont); i if s[i] is none. A word, not an identifier:
 * it may start with a digit or '$', and nothing is skipped after it. */
size_t sqllex_word_end(const char *s, size_t len, size_t i);

/* The 'string' or "quoted identifier" at s[*i], read as written with
 * standard_conforming_strings on: a doubled quote is one, a backslash is
 * plain (an E'' prefix is not looked at). Its text goes to out,
 * NUL-terminated, at most outsz - 1 bytes; out may be NULL (outsz is then
 * ignored) to only check it. true, and *i moves just past the closing
 * quote (no blanks skipped); an empty one ('') is read. false, *i not
 * moved and out "" (outsz > 0), if no quote opens at s[*i], the text does
 * not close it, or it does not fit. */
bool sqllex_unquote(const char *s, size_t len, size_t *i, char *out, size_t outsz);

/* The value of one of pgcat's own SET commands at s[*i]: sqllex_unquote's
 * if a quote opens there, else a bare run of ASCII letters, digits, '_',
 * '.', '+' and '-' (a word or a signed number: on, default, -7, 1.5).
 * Nothing else ends a bare run: "1--x" is one value, not 1 and a
 * comment. out, outsz, *i and the result as sqllex_unquote; false too for
 * an empty bare run. */
bool sqllex_value(const char *s, size_t len, size_t *i, char *out, size_t outsz);

/* The keyword kw (lower case) at s[*i], in any case, as a whole word:
 * true, and *i moves past it and the blanks after it. */
bool sqllex_keyword(const char *s, size_t len, size_t *i, const char *kw);

/* An identifier at s[*i] into out (NUL-terminated, at most outsz - 1
 * bytes): unquoted folded to lower case, "quoted" as written. true, and *i
 * moves past it and the blanks after it; false (nothing moved) if there is
 * none, it is empty or unclosed, or it does not fit. */
bool sqllex_ident(const char *s, size_t len, size_t *i, char *out, size_t outsz);

/* The end of the statement starting at s[i]: the index of its ';' outside
 * quotes and comments, or len. *content_end (may be NULL): the index after
 * its last byte that is neither whitespace nor part of a comment. */
size_t sqllex_statement_end(const char *s, size_t len, size_t i, size_t *content_end);

/* Only whitespace, comments and semicolons from i to len. */
bool sqllex_rest_is_empty(const char *s, size_t len, size_t i);

/* Could the text (len bytes) be a LISTEN or UNLISTEN? Its first
 * character after blanks decides (l, u, or a comment), before the text
 * is read through: a test on every Query and Parse. */
static inline bool sqllex_may_be_listen(const char *sql, size_t len)
{
	size_t i = 0;
	while (i < len && sqllex_is_space((unsigned char)sql[i]))
		i++;
	if (i >= len)
		return false;
	char ch = sql[i];
	return ch == 'l' || ch == 'L' || ch == 'u' || ch == 'U' || ch == '/' || ch == '-';
}

/* The text names notify in any case (NOTIFY, pg_notify()): a request that
 * may send notifications (SPEC §11). A plain scan: a mention in a string,
 * a comment or a longer name counts too, which costs nothing but a mark. */
bool sqllex_mentions_notify(const char *s, size_t len);

/* COMMIT, END, ROLLBACK or ABORT, with an optional WORK or TRANSACTION and
 * semicolon, and nothing else (not AND CHAIN, not ROLLBACK TO): the tag
 * PostgreSQL answers it with ("COMMIT" or "ROLLBACK"), or NULL. */
const char *sqllex_plain_end_tag(const char *sql, size_t len);

#endif
