/* SPDX-License-Identifier: MIT */
/*
 * broadcast: which writes may run alike on every shard (SPEC §6,
 * default_shard = all). A statement that touches no sharded table (DDL, a
 * table kept whole on every shard) and an UPDATE or DELETE of a sharded
 * table (each shard changes its own rows) give the same result run
 * everywhere. What would put rows on the wrong shard is refused: an INSERT
 * or MERGE into a sharded table that pgcat cannot split, an UPDATE that
 * assigns the sharding column; so are COPY, a SELECT that writes or locks,
 * transaction control and several statements in one query.
 */
#ifndef PGCAT_BROADCAST_H
#define PGCAT_BROADCAST_H

#include <stdbool.h>
#include <stddef.h>

#include "merge.h"
#include "router.h"

/* true: sql may run on every shard. *outside_tx: it cannot run inside a
 * transaction block (VACUUM, CREATE INDEX CONCURRENTLY, CREATE DATABASE...),
 * so it is sent on its own rather than between BEGIN and COMMIT. false:
 * why says why (for the client, 0A000). */
bool broadcast_write_check(const char *sql, size_t len, const struct router_rules *rules, bool *outside_tx,
			   char why[MERGE_WHY]);

/* A SELECT to run on every shard, its rows merged: true when each shard's
 * answer is that shard's part of the whole answer, which holds when the
 * sharded tables are read at the statement's own level (not in a
 * subquery, CTE or derived table) and, if several, joined on their
 * sharding columns. false: why says why (0A000). */
bool broadcast_read_check(const char *sql, size_t len, const struct router_rules *rules, char why[MERGE_WHY]);

#endif
