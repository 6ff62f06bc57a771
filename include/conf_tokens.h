/* SPDX-License-Identifier: MIT */
/*
 * conf_tokens: the line and field tokenizer that auth_hba_file (hba.c)
 * and auth_ident_file (ident.c) share, PostgreSQL's configuration-file
 * syntax: lines, blanks between fields, a field a bare word or a "quoted
 * name" ("" for a quote), # to the end of the line. What a field means,
 * and whether commas make lists, stays with each reader; this module only
 * cuts text, so that both files are read by the same rules and report the
 * same words for the same mistakes. No I/O.
 */
#ifndef PGCAT_CONF_TOKENS_H
#define PGCAT_CONF_TOKENS_H

#include <stdbool.h>
#include <stddef.h>

#define CONF_WHY_MAX 256

/* A line's outcome: the first problem in words, or out of memory. */
struct conf_status {
	char why[CONF_WHY_MAX];   /* "" while the line is good */
	bool oom;
};

/* Records the first problem of a line (later ones are dropped, so the
 * report names the cause and not what followed from it). Always false,
 * so that a reader can `return conf_fail(...)`. */
__attribute__((format(printf, 2, 3)))
bool conf_fail(struct conf_status *st, const char *fmt, ...);

/* White space between fields (a '\n' never reaches here: lines are cut
 * first). */
bool conf_is_blank(char c);
const char *conf_skip_blanks(const char *p, const char *end);

/* One field as written, quotes removed; s is the caller's to free. */
struct conf_token {
	char *s;
	bool quoted;
	/* With pg_words: the quotes did not wrap the whole field (a"b"c,
	 * name="value"). Names refuse it; option values take it. */
	bool mixed;
};

/* How a reader wants fields cut. */
struct conf_token_rules {
	/* Longest field in bytes (quotes removed); SIZE_MAX for none. */
	size_t max_len;
	/* NULL: a comma ends a field, quoted or bare (hba's comma lists; the
	 * caller reads the comma). Otherwise a bare comma is refused with this
	 * message and a comma after a quoted field is an unexpected character. */
	const char *bare_comma;
	/* PostgreSQL's own reading of a field: bare and quoted parts may
	 * follow each other (ldapprefix="uid="), the quotes are removed and
	 * the parts joined (the token says mixed); a comma outside quotes
	 * ends the field. Otherwise a field is one bare word or one quoted
	 * name, and anything else is refused with a message. */
	bool pg_words;
};

/* Reads the field at *p (p < end, not blank, not '#') into *out and moves
 * *p past it. False with st set (nothing to free) on a syntax error or
 * out of memory. */
bool conf_read_token(struct conf_status *st, const char **p, const char *end, const struct conf_token_rules *rules,
		     struct conf_token *out);

/* arr (n elements of size bytes) grown by one element: the new array, or
 * NULL with st->oom set (arr untouched, also when the size would
 * overflow). Both readers grow their fields and entries a line at a time. */
void *conf_grow(void *arr, size_t n, size_t size, struct conf_status *st);

enum conf_result { CONF_OK, CONF_BAD, CONF_NOMEM };

/* The readers' report of a bad line (hba_bad_line_fn, ident_bad_line_fn). */
typedef void (*conf_bad_fn)(void *arg, int line, const char *why);

/* Reads one line [s, end) for ctx: no '\n', no NUL byte, and at least one
 * field (blank lines and comment lines never reach it). A problem goes into
 * st (conf_fail, or st->oom). */
typedef void (*conf_line_fn)(void *ctx, const char *s, const char *end, int lineno, struct conf_status *st);

/* Cuts [text, text + len) into lines numbered from 1 (a final '\n' ends
 * the last line, it does not start an empty one) and hands each to fn. A
 * bad line, one with a NUL byte included, goes to bad (when not NULL) and
 * the reading goes on, so that one run names every bad line; out of memory
 * stops it. CONF_NOMEM if memory ran out, else CONF_BAD if a line was bad. */
enum conf_result conf_each_line(const char *text, size_t len, conf_line_fn fn, void *ctx, conf_bad_fn bad, void *arg);

#endif
