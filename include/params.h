/* SPDX-License-Identifier: MIT */
/*
 * params: the session parameters pgcat tracks per connection (SPEC §3), and
 * the SET statements that bring a server in line with a client. Pure data:
 * no sockets.
 */
#ifndef PGCAT_PARAMS_H
#define PGCAT_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PARAMS_MAX 48
#define PARAMS_VALUE_MAX 1024

/* One setting: immutable once made and shared by reference between the
 * tables that hold it (a pool's defaults, its clients, its servers). */
struct param {
	unsigned refs;
	/* value is SQL text to splice after SET name TO (search_path's list
	 * syntax), not a string to quote. */
	bool raw;
	uint64_t hash;       /* this entry's share of a table's digest */
	const char *value;   /* points into the same allocation, after name */
	char name[];
};

/* A set of settings, copy-on-write: copying a set shares its table; the
 * first change to a shared table clones it (pointers only). An idle client
 * whose session is the pool's default holds no table of its own, which is
 * what keeps its footprint small. */
struct param_table {
	unsigned refs;
	unsigned n, cap;
	struct param *items[];
};

struct params {
	struct param_table *t;   /* NULL: empty */
	/* Order-independent digest of the whole set, kept current by every
	 * change: two sets with equal digests need no SET between them, which
	 * spares comparing every parameter on every server hand-out. */
	uint64_t digest;
};

static inline size_t params_count(const struct params *p) { return p->t ? p->t->n : 0; }
static inline const struct param *params_at(const struct params *p, size_t i) { return p->t->items[i]; }

void params_init(struct params *p);
void params_clear(struct params *p);
/* Returns false when full or the value is too long (the parameter is then not tracked). */
bool params_set(struct params *p, const char *name, const char *value, bool raw);
void params_remove(struct params *p, const char *name);
/* Add every setting of from that p lacks, sharing from's entries (a login
 * takes the pool's defaults this way: no allocation per setting). false:
 * out of memory or p is full (what was added stays). */
bool params_add_missing(struct params *p, const struct params *from);
const struct param *params_get(const struct params *p, const char *name);
/* dst becomes a (shared) copy of src. */
void params_copy(struct params *dst, const struct params *src);

/* Can pgcat SET this parameter on a server? (server_version and such: no) */
bool params_settable(const char *name);
/* Does PostgreSQL report it with ParameterStatus? */
bool params_reported(const char *name);

/* The value PostgreSQL reports for the setting name given as value: the
 * encoding's own name for client_encoding (utf8, UNICODE -> UTF8; euc-jp ->
 * EUC_JP), "ISO, MDY" for DateStyle iso, on/off for a boolean, an enum's
 * name in lower case. current is the session's value before (DateStyle keeps
 * the half the new value does not give), or NULL. true: out holds it; false:
 * a setting or a spelling pgcat does not know (left to the server, whose
 * ParameterStatus corrects it). Clients compare what they asked for with
 * what is reported, so pgcat must say what PostgreSQL says. */
bool params_canonical(const char *name, const char *value, const char *current, char *out, size_t outsz);
/* Each reported setting of p in the form PostgreSQL reports it (above),
 * relative to base's values (the server's defaults, for a login). */
void params_canonicalize(struct params *p, const struct params *base);

/* Write into out a single simple-protocol SQL string of SET/RESET statements
 * that makes the server's tracked values equal the client's. Returns the
 * number of statements (0: nothing to do), or -1 if out is too small. */
/* Equal digests: same names, values and forms (a 64-bit hash: a collision
 * is astronomically unlikely, and costs at most a missed SET). */
static inline bool params_same(const struct params *a, const struct params *b) { return a->digest == b->digest; }
int params_build_sync(const struct params *client, const struct params *server, char *out, size_t outsz);

/* Client startup "options": "-c name=value", "-cname=value", "--name=value",
 * backslash escapes a space. Applies each setting to p. Returns false on a
 * malformed string. */
bool params_apply_options(struct params *p, const char *options);

/* Recognise a client statement that changes a session setting (SET
 * [SESSION] name TO|= ..., SET TIME ZONE, RESET name, RESET ALL, DISCARD
 * ALL) and apply it to p; PostgreSQL 15 reports only some settings, so the
 * others (search_path above all) are learnt here. Only the first statement
 * of sql counts. defaults: the session's own startup settings, which RESET
 * returns to (NULL for a server connection). */
enum params_stmt { PARAMS_STMT_NONE, PARAMS_STMT_SET, PARAMS_STMT_RESET, PARAMS_STMT_RESET_ALL };
enum params_stmt params_track_statement(struct params *p, const char *sql, size_t len,
					const struct params *defaults);

#endif
