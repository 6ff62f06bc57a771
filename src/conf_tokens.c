/* SPDX-License-Identifier: MIT */
/*
 * conf_tokens: the tokenizer of hba.c and ident.c (include/conf_tokens.h).
 * Both readers once carried a copy of it; one copy keeps their quoting,
 * comment and length rules from drifting apart.
 */
#define _POSIX_C_SOURCE 200809L
#include "conf_tokens.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool conf_fail(struct conf_status *st, const char *fmt, ...)
{
	if (st->why[0] == '\0') {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(st->why, sizeof st->why, fmt, ap);
		va_end(ap);
	}
	return false;
}

bool conf_is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

const char *conf_skip_blanks(const char *p, const char *end)
{
	while (p < end && conf_is_blank(*p))
		p++;
	return p;
}

/* Where a bare field stops; a comma only when it separates. */
static bool ends_field(char c, const struct conf_token_rules *rules)
{
	return conf_is_blank(c) || c == '#' || (c == ',' && !rules->bare_comma);
}

bool conf_read_token(struct conf_status *st, const char **p, const char *end, const struct conf_token_rules *rules,
		     struct conf_token *out)
{
	const char *s = *p;
	/* The field's bytes never outnumber what is left of the line; with a
	 * limit, no more than the limit and its quotes are ever stored. */
	size_t cap = (size_t)(end - s) + 1;
	if (rules->max_len < SIZE_MAX - 3 && cap > rules->max_len + 3)
		cap = rules->max_len + 3;
	char *buf = malloc(cap);
	if (!buf) {
		st->oom = true;
		return false;
	}
	size_t used = 0;
	bool quoted = *s == '"', mixed = false;
	if (rules->pg_words) {
		/* Quoted parts and bare parts until a blank, '#' or a comma
		 * outside the quotes. */
		bool in_quote = false;
		quoted = false;
		for (; s < end && (in_quote || !ends_field(*s, rules)); s++) {
			if (*s == '"') {
				if (in_quote && s + 1 < end && s[1] == '"') {
					s++;   /* "" inside quotes is one quote, stored below */
				} else {
					if (!in_quote && quoted)
						mixed = true;   /* a second quoted part */
					if (!in_quote && s != *p)
						mixed = true;   /* bare text before it */
					in_quote = !in_quote;
					quoted = true;
					if (!in_quote && s + 1 < end && !ends_field(s[1], rules))
						mixed = true;   /* text after it */
					continue;
				}
			}
			if (used >= rules->max_len) {
				free(buf);
				return conf_fail(st, "a field longer than %zu bytes", rules->max_len);
			}
			buf[used++] = *s;
		}
		if (in_quote) {
			free(buf);
			return conf_fail(st, "unterminated quoted name");
		}
	} else if (quoted) {
		for (s++;; s++) {
			if (s >= end) {
				free(buf);
				return conf_fail(st, "unterminated quoted name");
			}
			if (*s == '"') {
				if (s + 1 < end && s[1] == '"')
					s++;   /* "" is one quote, stored below */
				else {
					s++;
					break;
				}
			}
			if (used >= rules->max_len) {
				free(buf);
				return conf_fail(st, "a field longer than %zu bytes", rules->max_len);
			}
			buf[used++] = *s;
		}
		if (s < end && !ends_field(*s, rules)) {
			free(buf);
			return conf_fail(st, "unexpected character '%c' after a quoted name", *s);
		}
	} else {
		for (; s < end && !ends_field(*s, rules); s++) {
			if (*s == '"') {
				free(buf);
				return conf_fail(st, "a quote inside a name: quote the whole name (\"...\")");
			}
			if (*s == ',') {
				free(buf);
				return conf_fail(st, "%s", rules->bare_comma);
			}
			if (used >= rules->max_len) {
				free(buf);
				return conf_fail(st, "a field longer than %zu bytes", rules->max_len);
			}
			buf[used++] = *s;
		}
	}
	/* used < cap: each byte stored consumed at least one byte of the line
	 * (cap - 1 of them at most), or stayed within max_len (cap - 3). */
	buf[used] = '\0';
	if (used == 0) {
		free(buf);
		return conf_fail(st, "empty name");
	}
	*out = (struct conf_token){ buf, quoted, mixed };
	*p = s;
	return true;
}

void *conf_grow(void *arr, size_t n, size_t size, struct conf_status *st)
{
	void *grown = NULL;
	if (size != 0 && n < SIZE_MAX / size - 1)
		grown = realloc(arr, (n + 1) * size);
	if (!grown)
		st->oom = true;
	return grown;
}

enum conf_result conf_each_line(const char *text, size_t len, conf_line_fn fn, void *ctx, conf_bad_fn bad, void *arg)
{
	enum conf_result res = CONF_OK;
	const char *p = text, *end = text + len;
	for (int lineno = 1; p < end && res != CONF_NOMEM; lineno++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;
		struct conf_status st = { .why = "" };
		/* A NUL would cut the line short for the C strings made of it. */
		const char *first = conf_skip_blanks(p, eol);
		if (memchr(p, '\0', (size_t)(eol - p)))
			conf_fail(&st, "the line contains a NUL byte");
		else if (first < eol && *first != '#')   /* not blank, not only a comment */
			fn(ctx, p, eol, lineno, &st);
		if (st.oom) {
			res = CONF_NOMEM;
		} else if (st.why[0]) {
			if (bad)
				bad(arg, lineno, st.why);
			res = CONF_BAD;
		}
		p = nl ? nl + 1 : end;
	}
	return res;
}
