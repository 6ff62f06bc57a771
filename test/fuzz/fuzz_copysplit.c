/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: COPY FROM STDIN data cut into rows (src/copysplit.c).
 * Input: byte 0 the format (text, CSV, binary) and HEADER, byte 1 the key column, byte 2 the
 * delimiter/quote/escape choice, byte 3 the chunk size pattern, then the
 * data. Invariants: the rows delivered, one after the other, are exactly a
 * prefix of the data (nothing lost, added or reordered); feeding the data
 * in chunks gives the same rows, keys and result as one feed; a key lies
 * inside its row's length.
 */
#include "copysplit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, \
				__FILE__, __LINE__);                             \
			abort();                                                 \
		}                                                                \
	} while (0)

struct seen {
	uint8_t *rows;         /* the rows' bytes, concatenated */
	size_t len, cap;
	uint64_t digest;       /* of keys, NULLs and headers, in order */
	size_t n;
};

static bool on_row(void *arg, const uint8_t *row, size_t rowlen, bool header, const uint8_t *key, size_t keylen,
		   bool is_null)
{
	struct seen *s = arg;
	if (s->len + rowlen > s->cap) {
		size_t cap = (s->len + rowlen) * 2 + 64;
		uint8_t *r = realloc(s->rows, cap);
		if (!r)
			abort();
		s->rows = r;
		s->cap = cap;
	}
	memcpy(s->rows + s->len, row, rowlen);
	s->len += rowlen;
	s->digest = s->digest * 31 + (header ? 7 : is_null ? 11 : 13) + keylen;
	if (!header && !is_null) {
		CHECK(key != NULL);
		for (size_t i = 0; i < keylen; i++)
			s->digest = s->digest * 131 + key[i];
	}
	s->n++;
	return true;
}

static enum copysplit_result run(const struct copysplit_options *o, const uint8_t *d, size_t n, const size_t *chunks,
				 size_t n_chunks, struct seen *s)
{
	struct copysplit cs;
	copysplit_init(&cs, o);
	enum copysplit_result r = COPYSPLIT_OK;
	size_t off = 0, k = 0;
	while (off < n && r == COPYSPLIT_OK) {
		size_t c = n_chunks ? chunks[k++ % n_chunks] : n;
		if (c > n - off)
			c = n - off;
		r = copysplit_feed(&cs, d + off, c, on_row, s);
		off += c;
	}
	if (r == COPYSPLIT_OK)
		r = copysplit_finish(&cs, on_row, s);
	copysplit_free(&cs);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	struct copysplit_options o;
	copysplit_defaults(&o, data[0] & 4 ? COPYSPLIT_BINARY : data[0] & 1 ? COPYSPLIT_CSV : COPYSPLIT_TEXT);
	o.header = data[0] & 2;
	o.key_column = data[1] % 4;
	o.max_row = 4096;
	static const char delims[] = "\t,;|";
	o.delimiter = delims[data[2] & 3];
	if (data[2] & 4)
		o.quote = '\'';
	o.escape = data[2] & 8 ? '\\' : o.quote;
	if (data[2] & 16) {
		o.null_string = "NULL";
		o.null_len = 4;
	}
	const uint8_t *d = data + 4;
	size_t n = size - 4;
	size_t chunks[4] = { (size_t)(data[3] & 3) + 1, (size_t)(data[3] >> 2 & 7) + 1, 1, (size_t)(data[3] >> 5) + 2 };

	struct seen one = { 0 }, many = { 0 };
	enum copysplit_result r1 = run(&o, d, n, NULL, 0, &one);
	enum copysplit_result r2 = run(&o, d, n, chunks, 4, &many);
	/* rows are a prefix of the data, in order */
	CHECK(one.len <= n && memcmp(one.rows ? one.rows : (const uint8_t *)"", d, one.len) == 0);
	if (r1 == COPYSPLIT_OK)
		CHECK(one.len == n);   /* every byte delivered at the end */
	/* a row longer than max_row fails in one feed as in chunks; otherwise
	 * chunking changes nothing */
	if (r1 != COPYSPLIT_ERR_ROW_TOO_LONG && r2 != COPYSPLIT_ERR_ROW_TOO_LONG) {
		CHECK(r1 == r2);
		CHECK(one.n == many.n && one.len == many.len && one.digest == many.digest);
		CHECK(one.len == 0 || memcmp(one.rows, many.rows, one.len) == 0);
	}
	free(one.rows);
	free(many.rows);
	return 0;
}
