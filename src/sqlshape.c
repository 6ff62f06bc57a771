/* SPDX-License-Identifier: MIT */
/*
 * sqlshape: a statement's text with its constants blanked, for the router's
 * cache (see sqlshape.h for what gets a shape and why). The token rules are
 * those of PostgreSQL 15's scan.l where they decide a boundary: integers and
 * decimals, exponents, quoted identifiers, nested block comments, $n
 * parameters; where they are subtler (escape strings, dollar quotes,
 * "1..2", "1e"), no shape is made.
 */
#include "sqlshape.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Byte classes of the lexer, as PostgreSQL 15's scan.l has them: a table,
 * as every byte of every routed statement goes through these tests. */
enum {
	IDENT_START = 1,   /* letters, '_', bytes >= 0x80 */
	IDENT_CONT = 2,    /* ... and digits and '$' */
	SPACE = 4,         /* space, tab, newline, carriage return, form feed */
	DIGIT = 8
};
#define I (IDENT_START | IDENT_CONT)
#define D (IDENT_CONT | DIGIT)
#define C IDENT_CONT
#define S SPACE
static const uint8_t byte_class[256] = {
	/* 0x00 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, S, S, 0, S, S, 0, 0,
	/* 0x10 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* 0x20 */ S, 0, 0, 0, C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* 0x30 */ D, D, D, D, D, D, D, D, D, D, 0, 0, 0, 0, 0, 0,
	/* 0x40 */ 0, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
	/* 0x50 */ I, I, I, I, I, I, I, I, I, I, I, 0, 0, 0, 0, I,
	/* 0x60 */ 0, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
	/* 0x70 */ I, I, I, I, I, I, I, I, I, I, I, 0, 0, 0, 0, 0,
	/* 0x80 */ I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
	/* 0x90 */ I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
	/* 0xa0 */ I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
	/* 0xb0 */ I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
	/* 0xc0 */ I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
	/* 0xd0 */ I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
	/* 0xe0 */ I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
	/* 0xf0 */ I, I, I, I, I, I, I, I, I, I, I, I, I, I, I, I,
};
#undef I
#undef D
#undef C
#undef S

static inline bool is_space(unsigned char ch)
{
	return byte_class[ch] & SPACE;
}

static inline bool is_ident_start(unsigned char ch)
{
	return byte_class[ch] & IDENT_START;
}

static inline bool is_digit(unsigned char ch)
{
	return byte_class[ch] & DIGIT;
}

static inline bool is_ident_cont(unsigned char ch)
{
	return byte_class[ch] & IDENT_CONT;
}

/* The text is read once, left to right; bytes are copied to out in runs,
 * each constant as its marker. */
struct shape {
	const unsigned char *s;
	size_t len;
	size_t copied;            /* s[0..copied) is in out already */
	char *out;
	size_t cap, used;
	int literals;
};

static inline unsigned char at(const struct shape *sh, size_t i)
{
	return i < sh->len ? sh->s[i] : 0;
}

/* The constant s[from..to) becomes marker; false: out is full. */
static bool replace(struct shape *sh, size_t from, size_t to, char marker)
{
	size_t run = from - sh->copied;
	if (run + 1 > sh->cap - sh->used)
		return false;
	memcpy(sh->out + sh->used, sh->s + sh->copied, run);
	sh->used += run;
	sh->out[sh->used++] = marker;
	sh->copied = to;
	sh->literals++;
	return true;
}

/* Returned by the scanners below for an unterminated comment. */
#define NO_END SIZE_MAX

/* A comment at i (a line comment or a block comment, nested): the index
 * after it, or NO_END. */
static size_t comment_end(const struct shape *sh, size_t i)
{
	if (sh->s[i] == '-') {
		while (i < sh->len && sh->s[i] != '\n' && sh->s[i] != '\r')
			i++;
		return i;
	}
	int depth = 0;
	while (i < sh->len) {
		if (sh->s[i] == '/' && at(sh, i + 1) == '*') {
			depth++;
			i += 2;
		} else if (sh->s[i] == '*' && at(sh, i + 1) == '/') {
			i += 2;
			if (--depth == 0)
				return i;
		} else {
			i++;
		}
	}
	return NO_END;
}

static inline bool at_comment(const struct shape *sh, size_t i)
{
	unsigned char a = at(sh, i), b = at(sh, i + 1);
	return (a == '-' && b == '-') || (a == '/' && b == '*');
}

/* Whitespace and comments from i: the index after them, or NO_END. */
static size_t blank_end(const struct shape *sh, size_t i)
{
	for (;;) {
		if (i < sh->len && is_space(sh->s[i]))
			i++;
		else if (at_comment(sh, i)) {
			if ((i = comment_end(sh, i)) == NO_END)
				return NO_END;
		} else
			return i;
	}
}

/* The statement's first keyword is one of the DML ones. */
static bool starts_with_dml(const struct shape *sh)
{
	static const char *const kw[] = { "select", "insert", "update", "delete", "with", "values", "table" };
	size_t start = blank_end(sh, 0);
	if (start == NO_END)
		return false;
	size_t end = start;
	while (end < sh->len && is_ident_cont(sh->s[end]))
		end++;
	size_t n = end - start;
	for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++) {
		if (strlen(kw[i]) != n)
			continue;
		size_t j = 0;
		while (j < n && (sh->s[start + j] | 0x20) == kw[i][j])
			j++;
		if (j == n)
			return true;
	}
	return false;
}

/* A number at i (a digit, or '.' and a digit): the index after it, 0 if it
 * is not a plain constant. */
static size_t number(struct shape *sh, size_t i)
{
	size_t start = i;
	bool real = false;
	uint64_t value = 0;
	while (is_digit(at(sh, i))) {
		if (value <= INT32_MAX)   /* stops growing once too big for int32 */
			value = value * 10 + (uint64_t)(sh->s[i] - '0');
		i++;
	}
	if (at(sh, i) == '.') {
		if (at(sh, i + 1) == '.')
			return 0;   /* "1..": PostgreSQL splits it its own way */
		real = true;
		i++;
		while (is_digit(at(sh, i)))
			i++;
	}
	if ((at(sh, i) | 0x20) == 'e') {
		size_t k = 1;
		if (at(sh, i + k) == '+' || at(sh, i + k) == '-')
			k++;
		if (!is_digit(at(sh, i + k)))
			return 0;   /* "1e", "1e+": an integer and an identifier */
		real = true;
		i += k;
		while (is_digit(at(sh, i)))
			i++;
	}
	if (i == start || is_ident_cont(at(sh, i)) || at(sh, i) == '.')
		return 0;   /* "1a", "1.5.": not a plain constant */
	/* An integer too big for int32 is an FCONST to PostgreSQL's grammar. */
	if (!replace(sh, start, i, real || value > INT32_MAX ? SQLSHAPE_FCONST : SQLSHAPE_ICONST))
		return 0;
	return i;
}

/* '...' at i, with '' for a quote; no backslash (its meaning depends on
 * standard_conforming_strings). The index after it, 0 if refused. */
static size_t string(struct shape *sh, size_t i)
{
	size_t start = i++;
	while (i < sh->len) {
		unsigned char ch = sh->s[i];
		if (ch == '\\')
			return 0;
		if (ch == '\'') {
			if (at(sh, i + 1) == '\'') {
				i += 2;
				continue;
			}
			i++;
			return replace(sh, start, i, SQLSHAPE_SCONST) ? i : 0;
		}
		i++;
	}
	return 0;
}

/* "..." at i, with "" for a quote, kept as is: the index after it, 0 if
 * unterminated. */
static size_t quoted_ident(const struct shape *sh, size_t i)
{
	i++;
	while (i < sh->len) {
		if (sh->s[i] == '"') {
			if (at(sh, i + 1) != '"')
				return i + 1;
			i++;
		}
		i++;
	}
	return 0;
}

size_t sqlshape_make(const char *sql, size_t len, char *out, size_t cap)
{
	struct shape sh = { (const unsigned char *)sql, len, 0, out, cap, 0, 0 };
	/* PostgreSQL reads a query string up to its first NUL: a text holding
	 * one is not what it looks like past it */
	if (!sql || !out || memchr(sql, '\0', len) || !starts_with_dml(&sh))
		return 0;
	size_t i = 0;
	while (i < len) {
		unsigned char ch = sh.s[i];
		if (is_ident_start(ch)) {
			while (++i < len && is_ident_cont(sh.s[i]))
				;
			/* E'..', B'..', X'..', N'..', a string right after a type
			 * name: prefixed strings have rules of their own */
			if (at(&sh, i) == '\'')
				return 0;
			continue;
		}
		if (is_space(ch)) {
			i++;
			continue;
		}
		if (is_digit(ch) || (ch == '.' && is_digit(at(&sh, i + 1)))) {
			if ((i = number(&sh, i)) == 0)
				return 0;
			continue;
		}
		switch (ch) {
		case '\'':
			/* U&'...' is a string with escapes of its own */
			if ((i > 0 && sh.s[i - 1] == '&') || (i = string(&sh, i)) == 0)
				return 0;
			continue;
		case '"':
			if ((i = quoted_ident(&sh, i)) == 0)
				return 0;
			continue;
		case '$':
			/* $n: a parameter, kept; anything else is dollar quoting */
			if (!is_digit(at(&sh, i + 1)))
				return 0;
			while (is_digit(at(&sh, ++i)))
				;
			if (is_ident_cont(at(&sh, i)))
				return 0;
			continue;
		case ';':
			/* only the statement's own end: blanks after it, nothing more */
			if (blank_end(&sh, i + 1) != len)
				return 0;
			i = len;
			continue;
		case '-':
		case '/':
			if (at_comment(&sh, i)) {
				if ((i = comment_end(&sh, i)) == NO_END)
					return 0;
				continue;
			}
			i++;
			continue;
		default:
			if (ch < 0x20 || ch == 0x7f)
				return 0;   /* control bytes: the markers must stay unambiguous */
			i++;
			continue;
		}
	}
	size_t rest = len - sh.copied;
	if (sh.literals == 0 || rest > cap - sh.used)
		return 0;
	memcpy(out + sh.used, sh.s + sh.copied, rest);
	return sh.used + rest;
}
