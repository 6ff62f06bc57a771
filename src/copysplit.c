/* SPDX-License-Identifier: MIT */
/*
 * copysplit: COPY FROM STDIN data cut into rows, with one column decoded
 * (include/copysplit.h). The rules are PostgreSQL's (COPY, "File Formats"):
 *
 * text: a row ends at a newline ("\r\n" too) that no backslash escapes;
 *   columns are split at the delimiter, a backslash escapes the next
 *   character (\b \f \n \r \t \v, \digits octal, \xhh hex, anything else is
 *   itself); a column equal to the NULL string as written is NULL; a line
 *   "\." alone ends the data.
 * CSV: a row ends at a newline outside quotes, so a quoted value may span
 *   lines; inside quotes the escape character before a quote or an escape
 *   is that character (with escape = quote, "" is a quote); an unquoted
 *   column equal to the NULL string is NULL, a quoted one never is; "\."
 *   alone on a line ends the data too.
 * binary: the 11-byte signature "PGCOPY\n\377\r\n\0", 32-bit flags (bit 16:
 *   OIDs, refused), a 32-bit header extension length and its bytes; then
 *   tuples: a 16-bit field count (-1: the trailer, the end), each field a
 *   32-bit length (-1: NULL) and that many bytes. All integers big-endian.
 */
#include "copysplit.h"
#include "hexdigit.h"

#include <stdlib.h>
#include <string.h>

#define COPYSPLIT_DEFAULT_MAX_ROW (64u * 1024 * 1024)

void copysplit_defaults(struct copysplit_options *o, enum copysplit_format format)
{
	memset(o, 0, sizeof *o);
	o->format = format;
	o->delimiter = format == COPYSPLIT_CSV ? ',' : '\t';
	o->quote = '"';
	o->escape = '"';
	o->null_string = format == COPYSPLIT_CSV ? "" : "\\N";
	o->null_len = format == COPYSPLIT_CSV ? 0 : 2;
	o->max_row = COPYSPLIT_DEFAULT_MAX_ROW;
}

void copysplit_init(struct copysplit *s, const struct copysplit_options *o)
{
	memset(s, 0, sizeof *s);
	s->o = *o;
	if (!s->o.max_row)
		s->o.max_row = COPYSPLIT_DEFAULT_MAX_ROW;
	s->header_pending = o->header || o->format == COPYSPLIT_BINARY;   /* binary: its signature */
}

void copysplit_free(struct copysplit *s)
{
	free(s->row);
	free(s->key);
	s->row = s->key = NULL;
	s->row_len = s->row_cap = s->key_len = s->key_cap = 0;
}

const char *copysplit_strerror(enum copysplit_result r)
{
	switch (r) {
	case COPYSPLIT_OK:
	case COPYSPLIT_STOPPED:
	case COPYSPLIT_END:
		return "no error";
	case COPYSPLIT_ERR_ROW_TOO_LONG:
		return "row too long";
	case COPYSPLIT_ERR_NO_KEY:
		return "missing data for the sharding column";
	case COPYSPLIT_ERR_BAD_ROW:
		return "unterminated CSV quoted field";
	case COPYSPLIT_ERR_BAD_BINARY:
		return "malformed binary COPY data";
	case COPYSPLIT_ERR_NOMEM:
		return "out of memory";
	}
	return "unknown error";
}

static bool key_put(struct copysplit *s, uint8_t c)
{
	if (s->key_len == s->key_cap) {
		size_t cap = s->key_cap ? s->key_cap * 2 : 64;
		uint8_t *k = realloc(s->key, cap);
		if (!k)
			return false;
		s->key = k;
		s->key_cap = cap;
	}
	s->key[s->key_len++] = c;
	return true;
}

/* Column k of a text-format line (terminator excluded), decoded. */
static enum copysplit_result text_key(struct copysplit *s, const uint8_t *p, size_t n, bool *is_null)
{
	unsigned col = 0;
	size_t i = 0, start = 0;
	/* find the column's raw bounds: delimiters not escaped */
	while (col < s->o.key_column) {
		if (i >= n)
			return COPYSPLIT_ERR_NO_KEY;
		if (p[i] == '\\') {
			i += 2;
			continue;
		}
		if (p[i] == (uint8_t)s->o.delimiter) {
			col++;
			start = i + 1;
		}
		i++;
	}
	i = start;
	size_t end = start;
	while (end < n && p[end] != (uint8_t)s->o.delimiter) {
		if (p[end] == '\\' && end + 1 < n)
			end++;
		end++;
	}
	if (end > n)
		end = n;
	s->key_len = 0;
	if (end - start == s->o.null_len && memcmp(p + start, s->o.null_string, s->o.null_len) == 0) {
		*is_null = true;
		return COPYSPLIT_OK;
	}
	*is_null = false;
	for (i = start; i < end; i++) {
		uint8_t c = p[i];
		if (c == '\\' && i + 1 < end) {
			uint8_t e = p[++i];
			switch (e) {
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'v': c = '\v'; break;
			case 'x': {
				int h1 = i + 1 < end ? hex_digit_value((unsigned char)p[i + 1]) : -1;
				if (h1 < 0) {
					c = 'x';
					break;
				}
				int v = h1;
				i++;
				int h2 = i + 1 < end ? hex_digit_value((unsigned char)p[i + 1]) : -1;
				if (h2 >= 0) {
					v = v * 16 + h2;
					i++;
				}
				c = (uint8_t)v;
				break;
			}
			default:
				if (e >= '0' && e <= '7') {
					int v = e - '0';
					for (int k = 0; k < 2 && i + 1 < end && p[i + 1] >= '0' && p[i + 1] <= '7'; k++)
						v = v * 8 + (p[++i] - '0');
					c = (uint8_t)(v & 0xff);
				} else {
					c = e;
				}
			}
		}
		if (!key_put(s, c))
			return COPYSPLIT_ERR_NOMEM;
	}
	return COPYSPLIT_OK;
}

/* Column k of a CSV row (terminator excluded), decoded. */
static enum copysplit_result csv_key(struct copysplit *s, const uint8_t *p, size_t n, bool *is_null)
{
	const uint8_t q = (uint8_t)s->o.quote, esc = (uint8_t)s->o.escape, delim = (uint8_t)s->o.delimiter;
	size_t i = 0;
	for (unsigned col = 0;; col++) {
		bool want = col == s->o.key_column, quoted = false;
		size_t start = i;
		if (want)
			s->key_len = 0;
		/* one field: quoted parts and unquoted parts may alternate */
		while (i < n && p[i] != delim) {
			if (p[i] == q) {
				quoted = true;
				i++;
				for (;;) {
					if (i >= n)
						return COPYSPLIT_ERR_BAD_ROW;
					if (p[i] == esc && i + 1 < n && (p[i + 1] == q || p[i + 1] == esc) &&
					    (esc != q || p[i + 1] == q)) {
						if (want && !key_put(s, p[i + 1]))
							return COPYSPLIT_ERR_NOMEM;
						i += 2;
						continue;
					}
					if (p[i] == q) {
						i++;
						break;
					}
					if (want && !key_put(s, p[i]))
						return COPYSPLIT_ERR_NOMEM;
					i++;
				}
				continue;
			}
			if (want && !key_put(s, p[i]))
				return COPYSPLIT_ERR_NOMEM;
			i++;
		}
		if (want) {
			*is_null = !quoted && i - start == s->o.null_len && memcmp(p + start, s->o.null_string, s->o.null_len) == 0;
			return COPYSPLIT_OK;
		}
		if (i >= n)
			return COPYSPLIT_ERR_NO_KEY;
		i++;   /* the delimiter */
	}
}

/* A whole row: header, end marker, or data with its key. */
static enum copysplit_result deliver(struct copysplit *s, const uint8_t *row, size_t len, copysplit_row_cb cb,
				     void *arg)
{
	size_t n = len;   /* without the line end */
	if (n > 0 && row[n - 1] == '\n')
		n--;
	if (n > 0 && row[n - 1] == '\r')
		n--;
	s->line++;
	if (n == 2 && row[0] == '\\' && row[1] == '.') {
		s->ended = true;
		return COPYSPLIT_END;
	}
	if (s->header_pending) {
		s->header_pending = false;
		return cb(arg, row, len, true, NULL, 0, false) ? COPYSPLIT_OK : COPYSPLIT_STOPPED;
	}
	bool is_null = false;
	enum copysplit_result r =
		s->o.format == COPYSPLIT_CSV ? csv_key(s, row, n, &is_null) : text_key(s, row, n, &is_null);
	if (r != COPYSPLIT_OK)
		return r;
	s->rows++;
	return cb(arg, row, len, false, is_null ? NULL : (s->key ? s->key : (const uint8_t *)""), s->key_len, is_null)
		       ? COPYSPLIT_OK
		       : COPYSPLIT_STOPPED;
}

static bool row_append(struct copysplit *s, const uint8_t *p, size_t n)
{
	if (s->row_len + n > s->row_cap) {
		size_t cap = s->row_cap ? s->row_cap : 256;
		while (cap < s->row_len + n)
			cap *= 2;
		uint8_t *r = realloc(s->row, cap);
		if (!r)
			return false;
		s->row = r;
		s->row_cap = cap;
	}
	memcpy(s->row + s->row_len, p, n);
	s->row_len += n;
	return true;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Binary format: the unit (header or tuple) at the head of p[0..n), if
 * whole: delivered, *used its length. Else *used 0 (more bytes needed). */
static enum copysplit_result binary_unit(struct copysplit *s, const uint8_t *p, size_t n, size_t *used,
					 copysplit_row_cb cb, void *arg)
{
	static const uint8_t signature[11] = { 'P', 'G', 'C', 'O', 'P', 'Y', '\n', 0xff, '\r', '\n', 0 };
	*used = 0;
	if (s->header_pending) {
		if (n < 19)
			return n >= sizeof signature && memcmp(p, signature, sizeof signature) != 0 ? COPYSPLIT_ERR_BAD_BINARY
											     : COPYSPLIT_OK;
		uint32_t ext = be32(p + 15);
		if (memcmp(p, signature, sizeof signature) != 0 || (be32(p + 11) & (1u << 16)))
			return COPYSPLIT_ERR_BAD_BINARY;
		if (ext > s->o.max_row)
			return COPYSPLIT_ERR_ROW_TOO_LONG;
		if (n - 19 < ext)
			return COPYSPLIT_OK;
		*used = 19 + (size_t)ext;
		s->header_pending = false;
		return cb(arg, p, *used, true, NULL, 0, false) ? COPYSPLIT_OK : COPYSPLIT_STOPPED;
	}
	if (n < 2)
		return COPYSPLIT_OK;
	int16_t fields = (int16_t)((uint16_t)p[0] << 8 | p[1]);
	if (fields == -1) {
		/* the trailer: the shards end at CopyDone without it, as
		 * PostgreSQL allows */
		s->ended = true;
		*used = 2;
		return COPYSPLIT_END;
	}
	if (fields < 0)
		return COPYSPLIT_ERR_BAD_BINARY;
	size_t off = 2;
	const uint8_t *key = NULL;
	size_t key_len = 0;
	bool key_seen = false, is_null = false;
	for (int f = 0; f < fields; f++) {
		if (n - off < 4)
			return off + 4 > s->o.max_row ? COPYSPLIT_ERR_ROW_TOO_LONG : COPYSPLIT_OK;
		int32_t l = (int32_t)be32(p + off);
		off += 4;
		if (l < -1)
			return COPYSPLIT_ERR_BAD_BINARY;
		size_t vl = l < 0 ? 0 : (size_t)l;
		if (vl > s->o.max_row || off + vl > s->o.max_row)
			return COPYSPLIT_ERR_ROW_TOO_LONG;
		if (n - off < vl)
			return COPYSPLIT_OK;
		if ((unsigned)f == s->o.key_column) {
			key_seen = true;
			is_null = l < 0;
			key = p + off;
			key_len = vl;
		}
		off += vl;
	}
	s->line++;
	if (!key_seen)
		return COPYSPLIT_ERR_NO_KEY;
	*used = off;
	s->rows++;
	return cb(arg, p, off, false, is_null ? NULL : key, key_len, is_null) ? COPYSPLIT_OK : COPYSPLIT_STOPPED;
}

/* Binary format: bytes gathered in the row buffer (a tuple may span
 * CopyData messages), every whole unit delivered, the rest kept. */
static enum copysplit_result binary_feed(struct copysplit *s, const uint8_t *data, size_t len, copysplit_row_cb cb,
					 void *arg)
{
	if (!row_append(s, data, len))
		return COPYSPLIT_ERR_NOMEM;
	size_t at = 0;
	enum copysplit_result r = COPYSPLIT_OK;
	while (!s->ended) {
		size_t used;
		r = binary_unit(s, s->row + at, s->row_len - at, &used, cb, arg);
		at += used;
		if (r != COPYSPLIT_OK || used == 0)
			break;
	}
	memmove(s->row, s->row + at, s->row_len - at);
	s->row_len -= at;
	return r;
}

enum copysplit_result copysplit_feed(struct copysplit *s, const uint8_t *data, size_t len, copysplit_row_cb cb,
				     void *arg)
{
	if (s->ended)
		return COPYSPLIT_END;
	if (s->o.format == COPYSPLIT_BINARY)
		return binary_feed(s, data, len, cb, arg);
	const bool csv = s->o.format == COPYSPLIT_CSV;
	const uint8_t q = (uint8_t)s->o.quote, esc = (uint8_t)s->o.escape;
	size_t start = 0;
	for (size_t i = 0; i < len; i++) {
		uint8_t c = data[i];
		if (!csv) {
			if (s->escaped) {
				s->escaped = false;
				continue;
			}
			if (c == '\\') {
				s->escaped = true;
				continue;
			}
		} else if (s->in_quotes) {
			if (s->escaped) {
				s->escaped = false;
				if (c == q || c == esc)
					continue;   /* escaped: data */
			}
			if (esc != q && c == esc) {
				s->escaped = true;
				continue;
			}
			if (c == q)
				s->in_quotes = false;
			continue;
		} else if (c == q) {
			s->in_quotes = true;
			continue;
		}
		if (c != '\n')
			continue;
		/* a row ends here */
		size_t piece = i + 1 - start;
		enum copysplit_result r;
		if (s->row_len) {
			if (s->row_len + piece > s->o.max_row)
				return COPYSPLIT_ERR_ROW_TOO_LONG;
			if (!row_append(s, data + start, piece))
				return COPYSPLIT_ERR_NOMEM;
			r = deliver(s, s->row, s->row_len, cb, arg);
			s->row_len = 0;
		} else {
			if (piece > s->o.max_row)
				return COPYSPLIT_ERR_ROW_TOO_LONG;
			r = deliver(s, data + start, piece, cb, arg);   /* no copy */
		}
		start = i + 1;
		if (r != COPYSPLIT_OK)
			return r;
	}
	if (start < len) {
		if (s->row_len + (len - start) > s->o.max_row)
			return COPYSPLIT_ERR_ROW_TOO_LONG;
		if (!row_append(s, data + start, len - start))
			return COPYSPLIT_ERR_NOMEM;
	}
	return COPYSPLIT_OK;
}

enum copysplit_result copysplit_finish(struct copysplit *s, copysplit_row_cb cb, void *arg)
{
	if (s->ended)
		return COPYSPLIT_END;
	if (s->in_quotes)
		return COPYSPLIT_ERR_BAD_ROW;
	if (!s->row_len)
		return COPYSPLIT_OK;
	if (s->o.format == COPYSPLIT_BINARY)
		return COPYSPLIT_ERR_BAD_BINARY;   /* a tuple cut short */
	enum copysplit_result r = deliver(s, s->row, s->row_len, cb, arg);
	s->row_len = 0;
	return r;
}
