/* SPDX-License-Identifier: MIT */
/*
 * qshape: what a request's text is, as a query shape (qstats.h, the
 * slow-query log): libpg_query's fingerprint and its normalised text
 * (constants as $n, comments as one space), made safe to show: a text
 * libpg_query cannot read, or one it normalises with a constant left (a
 * utility statement's: NOTIFY's payload, EXECUTE's arguments), is never
 * shown.
 *
 * Normalising takes a parse; a request's text is first reduced to a key
 * without one — its sqlshape (constants as markers) hashed, or the text
 * itself hashed — and the worker's cache maps keys to what the parse
 * said, so that a shape is parsed once however many constants it is run
 * with.
 */
#ifndef PGCAT_QSHAPE_H
#define PGCAT_QSHAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a shape has no text to show. */
enum qshape_text {
	QSHAPE_TEXT_OK,
	QSHAPE_TEXT_NOT_SQL,        /* libpg_query cannot read it */
	QSHAPE_TEXT_CONSTANTS,      /* a constant left after normalising */
	QSHAPE_TEXT_NO_MEMORY
};

struct qshape_desc {
	uint64_t fingerprint;       /* 0 with QSHAPE_TEXT_NOT_SQL */
	char fingerprint_hex[17];
	enum qshape_text why;
	char *text;                 /* the normalised text (malloc), NULL unless QSHAPE_TEXT_OK */
	/* The caller's: the qstats slot this shape was last counted in (a
	 * hint, checked before use; -1: none). */
	int32_t slot_hint;
};

/* Describes sql (NUL-terminated) with libpg_query: a parse, each time. */
void qshape_describe(const char *sql, struct qshape_desc *d);
void qshape_desc_free(struct qshape_desc *d);
/* What to show for a shape without text. */
const char *qshape_text_why(enum qshape_text why);

/* The key of sql[0..len): equal for two texts that differ only in the
 * values of their constants (as sqlshape.h tells them), else different
 * (up to a 64-bit hash's collisions). Never 0. A text without a shape
 * (no constant in it, or one sqlshape.h does not split) is its own key:
 * its raw key, a hash of its bytes. */
uint64_t qshape_key(const char *sql, size_t len);
/* The raw key of sql[0..len) (a hash, no lexing): the key of a text
 * without a shape; for one with a shape, a key the cache never holds. */
uint64_t qshape_raw_key(const char *sql, size_t len);

/* The worker's cache: key -> description. Two ways per set, the older
 * one out. */
#define QSHAPE_CACHE_SETS 2048
struct qshape_cache;
struct qshape_cache *qshape_cache_new(size_t sets);
void qshape_cache_free(struct qshape_cache *c);
/* The description of key; described from sql (NUL-terminated) when not
 * cached and sql is not NULL; NULL when it cannot be (no text, no
 * memory). The pointer holds until the next call. */
struct qshape_desc *qshape_cache_get(struct qshape_cache *c, uint64_t key, const char *sql);
/* The description of the text sql (len bytes, NUL-terminated after):
 * first by its raw key (a text with no constant, the usual extended
 * protocol's, is found by one hash), then by its key; described when
 * neither is cached. */
struct qshape_desc *qshape_cache_text(struct qshape_cache *c, const char *sql, size_t len);

/* A client's named statements: name -> the key of its text, noted at its
 * Parse, so that a later Bind of it is counted under its shape; a Close
 * forgets it. At most QSHAPE_NAMES_MAX names: one more empties the map
 * first (the Binds of the names forgotten then count as a shape without
 * text). Names are kept as 64-bit hashes. */
#define QSHAPE_NAMES_MAX 2048
struct qshape_names;
/* false: out of memory (nothing noted). *m is allocated on first use. */
bool qshape_names_put(struct qshape_names **m, const char *name, size_t len, uint64_t key);
/* 0: not noted. */
uint64_t qshape_names_get(const struct qshape_names *m, const char *name, size_t len);
void qshape_names_del(struct qshape_names *m, const char *name, size_t len);
void qshape_names_free(struct qshape_names *m);

#endif
