/* SPDX-License-Identifier: MIT */
/*
 * sqlshape: a statement's text with its constants blanked, for the router's
 * cache (see sqlshape.h for what gets a shape and why). The token rules are
 * those of PostgreSQL 15's scan.l where they decide a boundary: integers and
 * decimals, exponents, quoted identifiers, nested block comments, $n
 * parameters; where they are subtler (escape strings, dollar quotes,
 * "1..2", "1e"), no shape is made. Byte classes, comments and quoted
 * names are sqllex.c's.
 */
#include "sqlshape.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "bytescan.h"
#include "sqllex.h"

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

/* Whitespace and comments from i: the index after them, or SQLLEX_OPEN
 * for a comment the text does not close (PostgreSQL refuses the text). */
static size_t blank_end(const struct shape *sh, size_t i)
{
	const char *s = (const char *)sh->s;
	for (;;) {
		if (i < sh->len && sqllex_is_space(sh->s[i]))
			i++;
		else if (sqllex_at_comment(s, sh->len, i)) {
			if ((i = sqllex_comment_end(s, sh->len, i)) == SQLLEX_OPEN)
				return SQLLEX_OPEN;
		} else
			return i;
	}
}

/* PostgreSQL reads a query string up to its first NUL: a text holding one
 * is not what it looks like past it, and gets no shape. The scan finds
 * one where it reads byte classes (a control byte); the spans it passes
 * over whole (comments, quoted names) are looked at here. */
static inline bool has_nul(const struct shape *sh, size_t from, size_t to)
{
	return to > from && memchr(sh->s + from, '\0', to - from) != NULL;
}

/* The statement's first keyword is one of the DML ones. */
static bool starts_with_dml(const struct shape *sh)
{
	size_t start = sqllex_skip_blank((const char *)sh->s, sh->len, 0);
	if (start >= sh->len || has_nul(sh, 0, start))
		return false;
	/* The one keyword its first letter can make ("| 0x20" turns only
	 * letters into letters), then the end of the word. */
	const char *kw;
	switch (sh->s[start] | 0x20) {
	case 's': kw = "select"; break;
	case 'i': kw = "insert"; break;
	case 'u': kw = "update"; break;
	case 'd': kw = "delete"; break;
	case 'w': kw = "with"; break;
	case 'v': kw = "values"; break;
	case 't': kw = "table"; break;
	default: return false;
	}
	size_t i = start + 1;
	for (kw++; *kw; kw++, i++)
		if (i >= sh->len || (sh->s[i] | 0x20) != (unsigned char)*kw)
			return false;
	return i >= sh->len || !sqllex_is_ident_cont(sh->s[i]);
}

/* A number at i (a digit, or '.' and a digit): the index after it, 0 if it
 * is not a plain constant. */
static size_t number(struct shape *sh, size_t i)
{
	size_t start = i;
	bool real = false;
	uint64_t value = 0;
	while (sqllex_is_digit(at(sh, i))) {
		if (value <= INT32_MAX)   /* stops growing once too big for int32 */
			value = value * 10 + (uint64_t)(sh->s[i] - '0');
		i++;
	}
	if (at(sh, i) == '.') {
		if (at(sh, i + 1) == '.')
			return 0;   /* "1..": PostgreSQL splits it its own way */
		real = true;
		i++;
		while (sqllex_is_digit(at(sh, i)))
			i++;
	}
	if ((at(sh, i) | 0x20) == 'e') {
		size_t k = 1;
		if (at(sh, i + k) == '+' || at(sh, i + k) == '-')
			k++;
		if (!sqllex_is_digit(at(sh, i + k)))
			return 0;   /* "1e", "1e+": an integer and an identifier */
		real = true;
		i += k;
		while (sqllex_is_digit(at(sh, i)))
			i++;
	}
	if (i == start || sqllex_is_ident_cont(at(sh, i)) || at(sh, i) == '.')
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
		if (ch == '\\' || ch == '\0')
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

/* A byte the shape must look at: one that may start a constant, a quoted
 * name, a parameter, a comment or the statement's end (" $ ' - . / ; and
 * the digits), or a control byte; some neighbours of those come along
 * (! # % & and :), for a test of three ranges. Every other byte (letters,
 * blanks, most operators and punctuation) is copied as it is. */
static inline bool is_special(unsigned char ch)
{
	return (ch <= '\'' && ch != ' ') || (unsigned char)(ch - '-') <= ';' - '-' || ch == 0x7f;
}

static inline struct bytescan_bits block_specials(const char *at)
{
	bytescan_block v = bytescan_load(at);
	return bytescan_bits((bytescan_block)(((v <= '\'') & (v != ' ')) | ((bytescan_block)(v - '-') <= ';' - '-') |
					      (v == 0x7f)));
}

/* The first special byte from i (len if none): 16 bytes at a time (the
 * last 16 overlapping what was seen), byte by byte in a text shorter. */
static size_t next_special(const struct shape *sh, size_t i)
{
	const char *s = (const char *)sh->s;
	for (; i + 16 <= sh->len; i += 16) {
		size_t k = bytescan_first(block_specials(s + i));
		if (k < 16)
			return i + k;
	}
	if (i >= sh->len)
		return sh->len;
	if (sh->len >= 16) {
		size_t from = sh->len - 16, k;
		struct bytescan_bits b = block_specials(s + from);
		/* (bits of the bytes before i: seen already, dropped) */
		size_t seen = i - from;
		if (seen >= 8) {
			b.lane[0] = 0;
			b.lane[1] &= ~0ull << ((seen - 8) * 8);
		} else {
			b.lane[0] &= ~0ull << (seen * 8);
		}
		k = bytescan_first(b);
		return k < 16 ? from + k : sh->len;
	}
	while (i < sh->len && !is_special(sh->s[i]))
		i++;
	return i;
}

size_t sqlshape_make(const char *sql, size_t len, char *out, size_t cap)
{
	struct shape sh = { (const unsigned char *)sql, len, 0, out, cap, 0, 0 };
	/* (a NUL: has_nul) */
	if (!sql || !out || !starts_with_dml(&sh))
		return 0;
	size_t i = 0;
	size_t lit_end = 0;   /* where the last number or $n ended: no word before i then */
	while (i < len) {
		i = next_special(&sh, i);
		if (i >= len)
			break;
		unsigned char ch = sh.s[i];
		if (i > 0 && i != lit_end && sqllex_is_ident_cont(sh.s[i - 1])) {
			/* Within a word (a digit or '$' of a name), or right after
			 * one: E'..', B'..', X'..', N'..', a string right after a
			 * type name; prefixed strings have rules of their own. */
			if (ch == '\'')
				return 0;
			if (sqllex_is_ident_cont(ch)) {
				while (++i < len && sqllex_is_ident_cont(sh.s[i]))
					;
				if (at(&sh, i) == '\'')
					return 0;
				continue;
			}
		}
		if (sqllex_is_space(ch)) {
			i++;
			continue;
		}
		if (sqllex_is_digit(ch) || (ch == '.' && sqllex_is_digit(at(&sh, i + 1)))) {
			if ((i = number(&sh, i)) == 0)
				return 0;
			lit_end = i;
			continue;
		}
		switch (ch) {
		case '\'':
			/* U&'...' is a string with escapes of its own */
			if ((i > 0 && sh.s[i - 1] == '&') || (i = string(&sh, i)) == 0)
				return 0;
			continue;
		case '"': {
			/* a name, kept with what it holds */
			size_t e = sqllex_quoted_end(sql, len, i);
			if (e == SQLLEX_OPEN || has_nul(&sh, i, e))
				return 0;
			i = e;
			continue;
		}
		case '$':
			/* $n: a parameter, kept; anything else is dollar quoting */
			if (!sqllex_is_digit(at(&sh, i + 1)))
				return 0;
			while (sqllex_is_digit(at(&sh, ++i)))
				;
			if (sqllex_is_ident_cont(at(&sh, i)))
				return 0;
			lit_end = i;
			continue;
		case ';':
			/* only the statement's own end: blanks after it, nothing more */
			if (blank_end(&sh, i + 1) != len || has_nul(&sh, i + 1, len))
				return 0;
			i = len;
			continue;
		case '-':
		case '/':
			if (sqllex_at_comment(sql, len, i)) {
				size_t e = sqllex_comment_end(sql, len, i);
				if (e == SQLLEX_OPEN || has_nul(&sh, i, e))
					return 0;
				i = e;
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
