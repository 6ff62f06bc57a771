/* SPDX-License-Identifier: MIT */
/*
 * pgjson: a tokenizer for libpg_query's JSON parse trees, shared by the
 * router (routing verdicts) and the cross-shard merge planner. One pass
 * builds a flat token array in document order (each token knows where its
 * subtree ends), so lookups need no recursion and no allocation per node.
 */
#ifndef PGCAT_PGJSON_H
#define PGCAT_PGJSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum jtype { J_OBJ, J_ARR, J_KEY, J_STR, J_PRIM };

struct jtok {
	uint32_t start, end;      /* J_KEY/J_STR: between the quotes; else the token's bytes */
	uint32_t after;           /* first token index past this token's subtree */
	int32_t up;               /* enclosing container or key; -1 for the root */
	uint8_t type;             /* enum jtype */
};

struct jdoc {
	const char *s;
	const struct jtok *t;
	int n;
};

#define JNONE (-1)

#define jget(d, o, name) pgjson_get_n(d, o, name, sizeof("" name) - 1)   /* literals only */
#define jnode(d, v, name) pgjson_node_n(d, v, name, sizeof("" name) - 1)

/* Tokenizes len bytes of JSON into t (cap entries). Strict enough for
 * libpg_query's output (structure, string ends, primitive starts); false on
 * anything malformed or too big. */
bool pgjson_parse(const char *s, size_t len, struct jtok *t, size_t cap, int *ntok);

static inline bool pgjson_valid(const struct jdoc *d, int i)
{
	return i >= 0 && i < d->n;
}

/* The value of key `name` in object o, or JNONE. */
int pgjson_get_n(const struct jdoc *d, int o, const char *name, size_t nl);
/* v is {"<name>": {...}}: returns the inner object, else JNONE. */
int pgjson_node_n(const struct jdoc *d, int v, const char *name, size_t nl);
/* Unescapes string token v into buf (cap bytes, NUL-terminated). Returns the
 * length, or -1 if v is not a string, is malformed or does not fit (or
 * holds NUL). */
int pgjson_str(const struct jdoc *d, int v, char *buf, size_t cap);
/* Is string token v equal to lit (case-insensitively if ci)? */
bool pgjson_str_is(const struct jdoc *d, int v, const char *lit, bool ci);
/* {"String":{"sval":"x"}} -> the sval token, else JNONE. */
int pgjson_string_node(const struct jdoc *d, int v);
/* Primitive token v as a non-negative int, else -1. */
long pgjson_int(const struct jdoc *d, int v);

#endif
