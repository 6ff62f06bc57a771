/* SPDX-License-Identifier: MIT */
/*
 * sqlshape: the shape of a statement's text — the text with each literal
 * constant replaced by one marker byte of its token class — so that the
 * router's cache can serve `... WHERE aid = 48213` and `... WHERE aid = 517`
 * with one parse. Pure; a lexer only as far as token boundaries go, never a
 * parser. Not the routing decision itself (router.c).
 *
 * Only a text whose routing verdict cannot depend on its constants gets a
 * shape: one statement (a trailing semicolon allowed) starting with SELECT,
 * INSERT, UPDATE, DELETE, WITH, VALUES or TABLE, and the caller must not use
 * shapes where constants are sharding keys. Anything the lexer is not sure
 * to split exactly as PostgreSQL 15's lexer does gives no shape: escape
 * strings and other prefixed strings, backslashes in strings (whose meaning
 * depends on standard_conforming_strings), dollar quoting, numbers run into
 * identifiers, unterminated quotes or comments, control bytes.
 *
 * Two texts with the same shape have the same tokens apart from the values
 * of their constants: integer constants that fit an int32 (ICONST), other
 * numbers (FCONST) and strings (SCONST) get different markers, because the
 * grammar accepts them in different places.
 */
#ifndef PGCAT_SQLSHAPE_H
#define PGCAT_SQLSHAPE_H

#include <stddef.h>

#define SQLSHAPE_ICONST '\x01'
#define SQLSHAPE_FCONST '\x02'
#define SQLSHAPE_SCONST '\x03'

/* The shape of sql[0..len) into out (cap bytes; not NUL-terminated).
 * Returns its length, or 0: no shape (see above, or no constant at all, or
 * it does not fit cap) — use the text itself. */
size_t sqlshape_make(const char *sql, size_t len, char *out, size_t cap);

#endif
