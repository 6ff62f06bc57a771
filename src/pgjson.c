/* SPDX-License-Identifier: MIT */
/*
 * pgjson: libpg_query's JSON, tokenized (include/pgjson.h).
 */
#include "pgjson.h"
#include "hexdigit.h"

#include <ctype.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

/* Tokenizes len bytes of JSON into t (cap entries). Strict enough for
 * libpg_query's output (structure, string ends, primitive starts); false on
 * anything malformed or too big. One pass, one switch per structural byte. */
bool pgjson_parse(const char *s, size_t len, struct jtok *t, size_t cap, int *ntok)
{
	/* what may come next */
	enum { W_VALUE, W_VALUE_OR_CLOSE, W_KEY, W_KEY_OR_CLOSE, W_COLON, W_NEXT, W_END } want = W_VALUE;
	size_t n = 0, i = 0;
	int32_t up = JNONE, done;

	if (len >= UINT32_MAX / 2 || cap > INT32_MAX)
		return false;
	while (i < len) {
		char c = s[i];
		switch (c) {
		case ' ': case '\t': case '\n': case '\r':
			i++;
			continue;
		case ':':
			if (want != W_COLON)
				return false;
			want = W_VALUE;
			i++;
			continue;
		case ',':
			if (want != W_NEXT)
				return false;
			want = t[up].type == J_OBJ ? W_KEY : W_VALUE;
			i++;
			continue;
		case '{': case '[':
			if ((want != W_VALUE && want != W_VALUE_OR_CLOSE) || n == cap)
				return false;
			t[n] = (struct jtok){ .start = (uint32_t)i, .up = up, .type = c == '{' ? J_OBJ : J_ARR };
			up = (int32_t)n++;
			want = c == '{' ? W_KEY_OR_CLOSE : W_VALUE_OR_CLOSE;
			i++;
			continue;
		case '}': case ']':
			if (want == W_NEXT) {
				if (t[up].type != (c == '}' ? J_OBJ : J_ARR))
					return false;
			} else if (want != (c == '}' ? W_KEY_OR_CLOSE : W_VALUE_OR_CLOSE)) {
				return false;
			}
			t[up].end = (uint32_t)(i + 1);
			t[up].after = (uint32_t)n;
			done = up;
			i++;
			break;
		case '"': {
			bool key = want == W_KEY || want == W_KEY_OR_CLOSE;
			if ((!key && want != W_VALUE && want != W_VALUE_OR_CLOSE) || n == cap)
				return false;
			/* the closing quote: one not escaped by an odd run of
			 * backslashes (each run is looked at once: linear) */
			const char *q, *body = s + i + 1;
			size_t from = i + 1;
			for (;;) {
				if (!(q = memchr(s + from, '"', len - from)))
					return false;
				size_t bs = 0;
				while (q - bs > body && q[-(ptrdiff_t)bs - 1] == '\\')
					bs++;
				if (bs % 2 == 0)
					break;
				from = (size_t)(q - s) + 1;
			}
			size_t j = (size_t)(q - s);
			t[n] = (struct jtok){ .start = (uint32_t)(i + 1), .end = (uint32_t)j,
					      .after = (uint32_t)(n + 1), .up = up, .type = key ? J_KEY : J_STR };
			i = j + 1;
			if (key) {
				up = (int32_t)n++;
				want = W_COLON;
				continue;
			}
			done = (int32_t)n++;
			break;
		}
		default: {
			if ((want != W_VALUE && want != W_VALUE_OR_CLOSE) || n == cap)
				return false;
			if (!(c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n'))
				return false;
			size_t j = i + 1;
			while (j < len && (isalnum((unsigned char)s[j]) || s[j] == '.' || s[j] == '-' || s[j] == '+'))
				j++;
			t[n] = (struct jtok){ .start = (uint32_t)i, .end = (uint32_t)j,
					      .after = (uint32_t)(n + 1), .up = up, .type = J_PRIM };
			done = (int32_t)n++;
			i = j;
			break;
		}
		}
		/* a value is complete: close its key, if any */
		up = t[done].up;
		if (up != JNONE && t[up].type == J_KEY) {
			t[up].after = (uint32_t)n;
			up = t[up].up;
		}
		want = up == JNONE ? W_END : W_NEXT;
	}
	if (want != W_END)
		return false;
	*ntok = (int)n;
	return true;
}

/* The value of key `name` in object o, or JNONE. */
int pgjson_get_n(const struct jdoc *d, int o, const char *name, size_t nl)
{
	if (!pgjson_valid(d, o) || d->t[o].type != J_OBJ)
		return JNONE;
	for (int k = o + 1; k < (int)d->t[o].after; k = (int)d->t[k].after) {
		const struct jtok *kt = &d->t[k];
		if (kt->end - kt->start == nl && memcmp(d->s + kt->start, name, nl) == 0)
			return k + 1 < (int)kt->after ? k + 1 : JNONE;
	}
	return JNONE;
}

/* v is {"<name>": {...}}: returns the inner object, else JNONE. */
int pgjson_node_n(const struct jdoc *d, int v, const char *name, size_t nl)
{
	if (!pgjson_valid(d, v) || d->t[v].type != J_OBJ || d->t[v].after <= (uint32_t)v + 2)
		return JNONE;
	const struct jtok *kt = &d->t[v + 1];
	if (kt->end - kt->start != nl || memcmp(d->s + kt->start, name, nl) != 0)
		return JNONE;
	return d->t[v + 2].type == J_OBJ ? v + 2 : JNONE;
}

static bool put_utf8(char *buf, size_t cap, size_t *o, uint32_t cp)
{
	unsigned char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xc0 | (cp >> 6));
		b[1] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (unsigned char)(0xe0 | (cp >> 12));
		b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		b[0] = (unsigned char)(0xf0 | (cp >> 18));
		b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	if (*o + n >= cap)
		return false;
	memcpy(buf + *o, b, n);
	*o += n;
	return true;
}

static bool read_u4(const char *p, const char *e, uint32_t *out)
{
	if (e - p < 4)
		return false;
	uint32_t v = 0;
	for (int k = 0; k < 4; k++) {
		int h = hex_digit_value((unsigned char)p[k]);
		if (h < 0)
			return false;
		v = v << 4 | (uint32_t)h;
	}
	*out = v;
	return true;
}

/* Unescapes string token v into buf (cap bytes, NUL-terminated). Returns the
 * length, or -1 if v is not a string, is malformed or does not fit. A string
 * holding NUL (\u0000) is refused too. */
int pgjson_str(const struct jdoc *d, int v, char *buf, size_t cap)
{
	if (!pgjson_valid(d, v) || (d->t[v].type != J_STR && d->t[v].type != J_KEY) || cap == 0)
		return -1;
	const char *p = d->s + d->t[v].start, *e = d->s + d->t[v].end;
	size_t o = 0;
	while (p < e) {
		if (*p != '\\') {
			if (o + 1 >= cap)
				return -1;
			buf[o++] = *p++;
			continue;
		}
		if (e - p < 2)
			return -1;
		char c = p[1];
		p += 2;
		char lit;
		switch (c) {
		case '"': lit = '"'; break;
		case '\\': lit = '\\'; break;
		case '/': lit = '/'; break;
		case 'b': lit = '\b'; break;
		case 'f': lit = '\f'; break;
		case 'n': lit = '\n'; break;
		case 'r': lit = '\r'; break;
		case 't': lit = '\t'; break;
		case 'u': {
			uint32_t cp, lo;
			if (!read_u4(p, e, &cp))
				return -1;
			p += 4;
			if (cp >= 0xd800 && cp < 0xdc00) {
				if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || !read_u4(p + 2, e, &lo) ||
				    lo < 0xdc00 || lo >= 0xe000)
					return -1;
				p += 6;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else if (cp >= 0xdc00 && cp < 0xe000) {
				return -1;
			}
			if (cp == 0 || !put_utf8(buf, cap, &o, cp))
				return -1;
			continue;
		}
		default:
			return -1;
		}
		if (o + 1 >= cap)
			return -1;
		buf[o++] = lit;
	}
	buf[o] = '\0';
	return (int)o;
}

/* Is string token v equal to lit (case-insensitively if ci)? */
bool pgjson_str_is(const struct jdoc *d, int v, const char *lit, bool ci)
{
	char buf[128];
	if (pgjson_str(d, v, buf, sizeof(buf)) < 0)
		return false;
	return ci ? strcasecmp(buf, lit) == 0 : strcmp(buf, lit) == 0;
}

/* {"String":{"sval":"x"}} → the sval token, else JNONE. */
int pgjson_string_node(const struct jdoc *d, int v)
{
	return jget(d, jnode(d, v, "String"), "sval");
}

/* Primitive token v as a non-negative int, else -1. */
long pgjson_int(const struct jdoc *d, int v)
{
	if (!pgjson_valid(d, v) || d->t[v].type != J_PRIM)
		return -1;
	const char *p = d->s + d->t[v].start, *e = d->s + d->t[v].end;
	long x = 0;
	if (p == e)
		return -1;
	for (; p < e; p++) {
		if (*p < '0' || *p > '9' || x > (LONG_MAX - 9) / 10)
			return -1;
		x = x * 10 + (*p - '0');
	}
	return x;
}

