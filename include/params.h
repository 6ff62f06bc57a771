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

struct param {
	char *name;
	char *value;
	/* value is SQL text to splice after SET name TO (search_path's list
	 * syntax), not a string to quote. */
	bool raw;
};

struct params {
	/* Grown on demand: an idle client's footprint stays small. */
	struct param *items;
	size_t n, cap;
	/* Order-independent digest of the whole set, kept current by every
	 * change: two sets with equal digests need no SET between them, which
	 * spares comparing every parameter on every server hand-out. */
	uint64_t digest;
};

void params_init(struct params *p);
void params_clear(struct params *p);
/* Returns false when full or the value is too long (the parameter is then not tracked). */
bool params_set(struct params *p, const char *name, const char *value, bool raw);
void params_remove(struct params *p, const char *name);
const struct param *params_get(const struct params *p, const char *name);
bool params_copy(struct params *dst, const struct params *src);

/* Can pgcat SET this parameter on a server? (server_version and such: no) */
bool params_settable(const char *name);
/* Does PostgreSQL report it with ParameterStatus? */
bool params_reported(const char *name);

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
