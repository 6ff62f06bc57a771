/* SPDX-License-Identifier: MIT */
/*
 * copysplit: cuts the data of COPY ... FROM STDIN into rows and reads one
 * column of each, so that a COPY into a sharded table can send every row
 * to its shard (SPEC §6). Text and CSV formats with PostgreSQL's options
 * (DELIMITER, NULL, QUOTE, ESCAPE, HEADER), and the binary format (its
 * header goes to every shard like a HEADER line, the key column's bytes
 * are the value in its binary form). Incremental: CopyData payloads
 * arrive in any chunking, a row may span many of them. Pure: no sockets,
 * no globals; it allocates only its own row buffer.
 */
#ifndef PGCAT_COPYSPLIT_H
#define PGCAT_COPYSPLIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum copysplit_format { COPYSPLIT_TEXT, COPYSPLIT_CSV, COPYSPLIT_BINARY };

struct copysplit_options {
	enum copysplit_format format;
	char delimiter;          /* '\t' text, ',' CSV by default */
	char quote;              /* CSV only; '"' by default */
	char escape;             /* CSV only; defaults to quote */
	const char *null_string; /* "\\N" text, "" CSV by default (not NUL-terminated: null_len) */
	size_t null_len;
	bool header;             /* the first line is a header (sent to every shard) */
	unsigned key_column;     /* 0-based position of the sharding column in each row */
	size_t max_row;          /* longest row accepted (bytes, with its line end) */
};

/* One complete row: its bytes as they came (with the line end), and the
 * key column's value decoded (escapes and quotes undone), or is_null.
 * header: the header line (key not read). Return false to stop. */
typedef bool (*copysplit_row_cb)(void *arg, const uint8_t *row, size_t rowlen, bool header, const uint8_t *key,
				 size_t keylen, bool is_null);

enum copysplit_result {
	COPYSPLIT_OK,            /* all bytes taken (a partial row may be kept inside) */
	COPYSPLIT_STOPPED,       /* the callback returned false */
	COPYSPLIT_END,           /* the end marker \. (binary: the trailer) was read (later bytes are ignored) */
	COPYSPLIT_ERR_ROW_TOO_LONG,
	COPYSPLIT_ERR_NO_KEY,    /* a row has fewer columns than key_column + 1 */
	COPYSPLIT_ERR_BAD_ROW,   /* unterminated quote at the end, bad escape... */
	COPYSPLIT_ERR_BAD_BINARY,   /* binary format: bad signature, OIDs, a negative length, a cut tuple */
	COPYSPLIT_ERR_NOMEM
};

struct copysplit {
	struct copysplit_options o;
	bool header_pending;
	bool ended;
	/* the row being collected across feeds */
	uint8_t *row;
	size_t row_len, row_cap;
	/* At the end of what was fed: inside a CSV quoted field; after a
	 * backslash (text) or an escape character inside quotes (CSV). */
	bool in_quotes;
	bool escaped;
	/* the decoded key of the current row */
	uint8_t *key;
	size_t key_len, key_cap;
	uint64_t rows;           /* data rows delivered (header not counted) */
	/* where the last error was: 1-based line of the data */
	uint64_t line;
};

/* The options' defaults for a format (max_row 64 MB, key_column 0). */
void copysplit_defaults(struct copysplit_options *o, enum copysplit_format format);
void copysplit_init(struct copysplit *s, const struct copysplit_options *o);
void copysplit_free(struct copysplit *s);
/* Bytes of COPY data (the payloads of CopyData messages, in order). */
enum copysplit_result copysplit_feed(struct copysplit *s, const uint8_t *data, size_t len, copysplit_row_cb cb,
				     void *arg);
/* CopyDone: a last row without a line end is delivered; an open quote is
 * an error. */
enum copysplit_result copysplit_finish(struct copysplit *s, copysplit_row_cb cb, void *arg);
const char *copysplit_strerror(enum copysplit_result r);

#endif
