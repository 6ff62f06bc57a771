/* SPDX-License-Identifier: MIT */
/*
 * logical_apply: a change of the logical replication stream (pgoutput.h)
 * as the SQL statement that applies it to a destination shard (issue 45,
 * online resharding), idempotently, so that a change applied twice (after
 * a restart, from the slot's last confirmed position) leaves the same
 * row:
 *
 *   Insert  INSERT ... ON CONFLICT (key) DO UPDATE SET every other column
 *           (DO NOTHING when every column is a key column);
 *   Update  the same upsert of the new row; or, when the update left a
 *           TOASTed value out (not sent: unchanged), UPDATE ... SET the
 *           columns sent WHERE key = the new key (the row is there: the
 *           copy or an earlier change made it);
 *   Delete  DELETE ... WHERE key = the old key.
 *
 * The key is the relation's replica identity columns, which must be its
 * primary key or a unique index (REPLICA IDENTITY DEFAULT or USING
 * INDEX): the destination's table has the same. A table with REPLICA
 * IDENTITY FULL (every column sent as the key) or NOTHING is refused. An
 * update that changes the key is refused (the row may move to another
 * shard: its caller handles it as a delete and an insert, which needs the
 * whole row); one that changes nothing pgoutput sent applies as nothing.
 * Values go as E'' literals of their text form (quotes and backslashes
 * doubled: safe whatever standard_conforming_strings says), which
 * PostgreSQL casts to each column's type; identifiers always quoted. The
 * applier's session must read values as the walsender wrote them
 * (DateStyle ISO, IntervalStyle postgres, extra_float_digits 3). Pure: no
 * allocation, the statement written into the caller's buffer.
 */
#ifndef PGCAT_LOGICAL_APPLY_H
#define PGCAT_LOGICAL_APPLY_H

#include <stdbool.h>
#include <stddef.h>

#include "pgoutput.h"

/* A relation as its Relation message described it. */
struct logical_rel {
	const char *nspname, *relname;
	char replica_identity;        /* the Relation message's: 'd', 'i' (a key), 'f', 'n' (none) */
	const struct pgoutput_column *columns;
	uint16_t n_columns;
};

enum logical_apply_result {
	LOGICAL_APPLY_OK,
	LOGICAL_APPLY_NOTHING,       /* an update of nothing pgoutput sent but the key: no statement */
	LOGICAL_APPLY_TOO_LONG,      /* the statement does not fit cap */
	LOGICAL_APPLY_NO_KEY,        /* no key: REPLICA IDENTITY FULL or NOTHING */
	LOGICAL_APPLY_KEY_CHANGED,   /* an update that changed the key */
	LOGICAL_APPLY_MISMATCH,      /* the tuple does not match the relation (columns, a key value missing, a NUL) */
	LOGICAL_APPLY_NOT_A_CHANGE   /* not an Insert, Update or Delete */
};

/* The statement applying change m (of relation rel) into out (cap bytes,
 * NUL-terminated); its length in *len. */
enum logical_apply_result logical_apply_sql(const struct pgoutput_msg *m, const struct logical_rel *rel, char *out,
					    size_t cap, size_t *len);
const char *logical_apply_text(enum logical_apply_result r);

#endif
