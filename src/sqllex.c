/* SPDX-License-Identifier: MIT */
/*
 * sqllex: token boundaries of SQL text as PostgreSQL's lexer draws them,
 * for the rooms that read SQL without libpg_query (include/sqllex.h).
 */
#include "sqllex.h"

#include <string.h>

#define I (SQLLEX_IDENT_START | SQLLEX_IDENT_CONT)
#define D (SQLLEX_IDENT_CONT | SQLLEX_DIGIT)
#define C SQLLEX_IDENT_CONT
#define S SQLLEX_SPACE
const uint8_t sqllex_class[256] = {
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

static inline unsigned char byte_at(const char *s, size_t len, size_t i)
{
	return i < len ? (unsigned char)s[i] : 0;
}

size_t sqllex_comment_end(const char *s, size_t len, size_t i)
{
	if (s[i] == '-') {
		while (i < len && s[i] != '\n' && s[i] != '\r')
			i++;
		return i;
	}
	/* Block comments nest, as PostgreSQL counts them: an inner close does
	 * not end the outer comment. */
	size_t depth = 0;
	while (i < len) {
		if (s[i] == '/' && byte_at(s, len, i + 1) == '*') {
			depth++;
			i += 2;
		} else if (s[i] == '*' && byte_at(s, len, i + 1) == '/') {
			i += 2;
			if (--depth == 0)
				return i;
		} else {
			i++;
		}
	}
	return SQLLEX_OPEN;
}

/* The quote q closing what opened at s[i], with qq for a quote inside;
 * with backslash escapes if esc. */
static size_t quote_end(const char *s, size_t len, size_t i, char q, bool esc)
{
	for (i++; i < len; i++) {
		if (esc && s[i] == '\\') {
			i++;
			continue;
		}
		if (s[i] == q) {
			if (byte_at(s, len, i + 1) != (unsigned char)q)
				return i + 1;
			i++;
		}
	}
	return SQLLEX_OPEN;
}

/* $tag$ at s[i]: the index after its closing $tag$; i if none opens here. */
static size_t dollar_end(const char *s, size_t len, size_t i)
{
	/* A '$' inside an identifier (a$b) or after a parameter's digits is
	 * not a quote: PostgreSQL's identifiers take '$'. */
	if (i > 0 && sqllex_is_ident_cont((unsigned char)s[i - 1]))
		return i;
	size_t j = i + 1;
	if (j < len && sqllex_is_ident_start((unsigned char)s[j]))
		while (j < len && sqllex_is_ident_cont((unsigned char)s[j]) && s[j] != '$')
			j++;
	if (j >= len || s[j] != '$')
		return i;   /* $1, or a lone '$' */
	size_t tl = j - i + 1;
	for (size_t k = j + 1; k + tl <= len; k++)
		if (s[k] == '$' && memcmp(s + k, s + i, tl) == 0)
			return k + tl;
	return SQLLEX_OPEN;
}

size_t sqllex_quoted_end(const char *s, size_t len, size_t i)
{
	if (i >= len)
		return i;
	switch (s[i]) {
	case '-':
	case '/':
		return sqllex_at_comment(s, len, i) ? sqllex_comment_end(s, len, i) : i;
	case '\'': {
		/* E'...' takes backslash escapes; the E must start its token (in
		 * "namE'x'" it ends an identifier and the string is plain). */
		bool esc = i > 0 && (s[i - 1] == 'E' || s[i - 1] == 'e') &&
			   (i < 2 || !sqllex_is_ident_cont((unsigned char)s[i - 2]));
		return quote_end(s, len, i, '\'', esc);
	}
	case '"':
		return quote_end(s, len, i, '"', false);
	case '$':
		return dollar_end(s, len, i);
	default:
		return i;
	}
}

size_t sqllex_skip_quoted(const char *s, size_t len, size_t i)
{
	size_t e = sqllex_quoted_end(s, len, i);
	return e == SQLLEX_OPEN ? len : e;
}

size_t sqllex_skip_blank(const char *s, size_t len, size_t i)
{
	for (;;) {
		while (i < len && sqllex_is_space((unsigned char)s[i]))
			i++;
		if (!sqllex_at_comment(s, len, i))
			return i;
		i = sqllex_comment_end(s, len, i);
		if (i == SQLLEX_OPEN)
			return len;
	}
}

size_t sqllex_skip_cspace(const char *s, size_t len, size_t i)
{
	while (i < len && sqllex_is_cspace((unsigned char)s[i]))
		i++;
	return i;
}

size_t sqllex_word_end(const char *s, size_t len, size_t i)
{
	while (i < len && sqllex_is_ident_cont((unsigned char)s[i]))
		i++;
	return i;
}

/* s[k..e) into out (NUL-terminated, n < outsz) unless out is NULL; false
 * if it does not fit. */
static bool put_text(const char *s, size_t k, size_t e, bool unquote, char *out, size_t outsz)
{
	size_t n = 0;
	for (; k < e; k++) {
		if (unquote && s[k] == s[e])
			k++;   /* a doubled quote is one (s[e] is the closing quote) */
		if (out) {
			if (n + 1 >= outsz)
				return false;
			out[n] = s[k];
		}
		n++;
	}
	if (out) {
		if (n >= outsz)
			return false;   /* no room for the NUL ('' into 0 bytes) */
		out[n] = '\0';
	}
	return true;
}

bool sqllex_unquote(const char *s, size_t len, size_t *i, char *out, size_t outsz)
{
	size_t k = *i;
	if (out && outsz)
		out[0] = '\0';
	if (k >= len || (s[k] != '\'' && s[k] != '"'))
		return false;
	size_t e = quote_end(s, len, k, s[k], false);
	if (e == SQLLEX_OPEN || !put_text(s, k + 1, e - 1, true, out, outsz)) {
		if (out && outsz)
			out[0] = '\0';
		return false;
	}
	*i = e;
	return true;
}

static bool is_bare_value(unsigned char ch)
{
	return (sqllex_is_ident_cont(ch) && ch < 0x80 && ch != '$') || ch == '.' || ch == '+' || ch == '-';
}

bool sqllex_value(const char *s, size_t len, size_t *i, char *out, size_t outsz)
{
	size_t k = *i;
	if (k < len && (s[k] == '\'' || s[k] == '"'))
		return sqllex_unquote(s, len, i, out, outsz);
	size_t e = k;
	while (e < len && is_bare_value((unsigned char)s[e]))
		e++;
	if (e == k || !put_text(s, k, e, false, out, outsz)) {
		if (out && outsz)
			out[0] = '\0';
		return false;
	}
	*i = e;
	return true;
}

bool sqllex_keyword(const char *s, size_t len, size_t *i, const char *kw)
{
	size_t k = *i;
	for (; *kw; kw++, k++)
		if (k >= len || (s[k] | 0x20) != *kw)
			return false;
	/* | 0x20 also maps '@' to '`' and the like: kw holds letters only,
	 * so only letters can match. */
	if (k < len && sqllex_is_ident_cont((unsigned char)s[k]))
		return false;
	*i = sqllex_skip_blank(s, len, k);
	return true;
}

bool sqllex_ident(const char *s, size_t len, size_t *i, char *out, size_t outsz)
{
	size_t k = *i, n = 0;
	if (outsz == 0 || k >= len)
		return false;
	if (s[k] == '"') {
		size_t e = quote_end(s, len, k, '"', false);
		if (e == SQLLEX_OPEN)
			return false;
		for (k++; k < e - 1; k++) {
			if (s[k] == '"')
				k++;   /* "" is one quote */
			if (n + 1 >= outsz)
				return false;
			out[n++] = s[k];
		}
		k = e;
	} else {
		if (!sqllex_is_ident_start((unsigned char)s[k]))
			return false;
		for (; k < len && sqllex_is_ident_cont((unsigned char)s[k]); k++) {
			if (n + 1 >= outsz)
				return false;
			char ch = s[k];
			/* ASCII only, as PostgreSQL folds in multibyte encodings */
			out[n++] = ch >= 'A' && ch <= 'Z' ? (char)(ch | 0x20) : ch;
		}
	}
	if (n == 0)
		return false;
	out[n] = '\0';
	*i = sqllex_skip_blank(s, len, k);
	return true;
}

size_t sqllex_statement_end(const char *s, size_t len, size_t i, size_t *content_end)
{
	size_t last = i;
	while (i < len && s[i] != ';') {
		if (sqllex_is_space((unsigned char)s[i])) {
			i++;
			continue;
		}
		size_t e = sqllex_quoted_end(s, len, i);
		if (e == i) {
			last = ++i;
			continue;
		}
		if (e == SQLLEX_OPEN)
			e = len;
		if (!sqllex_at_comment(s, len, i))
			last = e;
		i = e;
	}
	if (content_end)
		*content_end = last;
	return i;
}

bool sqllex_rest_is_empty(const char *s, size_t len, size_t i)
{
	for (;;) {
		i = sqllex_skip_blank(s, len, i);
		if (i >= len)
			return true;
		if (s[i] != ';')
			return false;
		i++;
	}
}

/* COMMIT, END, ROLLBACK or ABORT, with an optional WORK or TRANSACTION and
 * semicolon, and nothing else (not AND CHAIN, not ROLLBACK TO): the tag
 * PostgreSQL answers it with, or NULL. */
const char *sqllex_plain_end_tag(const char *sql, size_t len)
{
	static const struct {
		const char *word, *tag;
	} ends[] = { { "commit", "COMMIT" }, { "end", "COMMIT" }, { "rollback", "ROLLBACK" }, { "abort", "ROLLBACK" } };
	size_t start = sqllex_skip_blank(sql, len, 0);
	for (size_t k = 0; k < sizeof ends / sizeof *ends; k++) {
		size_t i = start;
		if (!sqllex_keyword(sql, len, &i, ends[k].word))
			continue;
		if (!sqllex_keyword(sql, len, &i, "work"))
			(void)sqllex_keyword(sql, len, &i, "transaction");
		return sqllex_rest_is_empty(sql, len, i) ? ends[k].tag : NULL;
	}
	return NULL;
}

bool sqllex_mentions_notify(const char *s, size_t len)
{
	static const char rest[] = "otify";
	for (size_t i = 0; i + 6 <= len; i++) {
		if ((s[i] | 0x20) != 'n')
			continue;
		size_t k = 0;
		while (k < 5 && (s[i + 1 + k] | 0x20) == rest[k])
			k++;
		if (k == 5)
			return true;
	}
	return false;
}
