/* SPDX-License-Identifier: MIT */
/*
 * insert_split: a multi-row INSERT ... VALUES into a sharded table whose
 * rows belong to several shards (SPEC §6), cut into one INSERT per shard
 * holding only that shard's rows. The rest of the statement (column list,
 * ON CONFLICT, RETURNING) is kept as written. Pure: no sockets, no globals.
 *
 * The rows are found in the text with a scanner that knows PostgreSQL's
 * quoting (strings, E'' strings, quoted identifiers, dollar quotes,
 * comments), and checked against libpg_query's parse tree: same number of
 * rows, and every row's sharding key a constant the pool's hash can read.
 */
#ifndef PGCAT_INSERT_SPLIT_H
#define PGCAT_INSERT_SPLIT_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "merge.h"
#include "router.h"

struct insert_split {
	int n_shards;
	char *sql[MERGE_MAX_SHARDS];   /* NUL-terminated; NULL: no row for that shard */
	size_t len[MERGE_MAX_SHARDS];
	unsigned rows[MERGE_MAX_SHARDS];
	/* With a Bind: each part's parameters are renumbered $1.. in order;
	 * params[s][k] is the client's number of the part's $(k+1). */
	uint16_t *params[MERGE_MAX_SHARDS];
	uint16_t n_params[MERGE_MAX_SHARDS];
	/* Refused for want of a column list: the sharded table and its
	 * sharding column, whose position in the table's columns the caller
	 * may learn and pass to insert_split_build_at. */
	bool needs_position;
	char schema[64], table[64], column[64];
};
struct shardkey_bind;

/* false: not an INSERT pgcat can split (why says so, for a 0A000).
 * bind: the Bind executing it (extended protocol), whose values are the
 * keys written $n; NULL for a simple Query. */
bool insert_split_build(const char *sql, size_t len, const struct router_rules *rules, enum sharding_function fn,
			int n_shards, const struct shardkey_bind *bind, struct insert_split *out, char why[MERGE_WHY]);
/* The same for an INSERT without a column list, its sharding column being
 * the table's key_position-th (0-based; -1: read the column list). */
bool insert_split_build_at(const char *sql, size_t len, const struct router_rules *rules, enum sharding_function fn,
			   int n_shards, const struct shardkey_bind *bind, int key_position, struct insert_split *out,
			   char why[MERGE_WHY]);
void insert_split_free(struct insert_split *s);

#endif
