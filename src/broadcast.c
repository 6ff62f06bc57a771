/* SPDX-License-Identifier: MIT */
/*
 * broadcast: the check of a write that is to run on every shard
 * (include/broadcast.h).
 */
#include "broadcast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <pg_query.h>

#include "pgjson.h"

static bool refuse(char why[MERGE_WHY], const char *msg)
{
	snprintf(why, MERGE_WHY, "cross-shard write: %s", msg);
	return false;
}

/* The sharded table a RangeVar names, or NULL. */
static const struct router_table *sharded_relation(const struct jdoc *d, int rv, const struct router_rules *rules)
{
	char rel[64], schema[64] = "";
	if (rv == JNONE || pgjson_str(d, jget(d, rv, "relname"), rel, sizeof rel) < 0)
		return NULL;
	(void)pgjson_str(d, jget(d, rv, "schemaname"), schema, sizeof schema);
	for (size_t i = 0; i < rules->n_sharded; i++) {
		const struct router_table *t = &rules->sharded[i];
		if (!t->table || strcasecmp(t->table, rel) != 0)
			continue;
		if (t->schema && schema[0] && strcasecmp(t->schema, schema) != 0)
			continue;
		return t;
	}
	return NULL;
}

/* Statements PostgreSQL refuses inside a transaction block. */
static bool runs_outside_tx(const struct jdoc *d, int stmt)
{
	static const char *const nodes[] = { "VacuumStmt", "CreatedbStmt", "DropdbStmt", "AlterSystemStmt",
					     "CreateTableSpaceStmt", "DropTableSpaceStmt", "ReindexStmt" };
	for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++)
		if (pgjson_node_n(d, stmt, nodes[i], strlen(nodes[i])) != JNONE)
			return true;
	int idx = jnode(d, stmt, "IndexStmt");
	if (idx != JNONE && jget(d, idx, "concurrent") != JNONE)
		return true;
	int drop = jnode(d, stmt, "DropStmt");
	return drop != JNONE && jget(d, drop, "concurrent") != JNONE;
}

static bool check_stmt(const struct jdoc *d, int stmt, const struct router_rules *rules, bool *outside_tx,
		       char why[MERGE_WHY])
{
	int node;
	if ((node = jnode(d, stmt, "UpdateStmt")) != JNONE) {
		const struct router_table *t = sharded_relation(d, jget(d, node, "relation"), rules);
		int tl = jget(d, node, "targetList");
		if (t && tl != JNONE && d->t[tl].type == J_ARR) {
			for (int e = tl + 1; e < (int)d->t[tl].after; e = (int)d->t[e].after) {
				char name[64];
				int rt = jnode(d, e, "ResTarget");
				if (pgjson_str(d, jget(d, rt, "name"), name, sizeof name) >= 0 && strcasecmp(name, t->column) == 0)
					return refuse(why, "an UPDATE that assigns the sharding column would leave rows on the "
							   "wrong shard; delete and insert them instead");
			}
		}
		return true;
	}
	if (jnode(d, stmt, "DeleteStmt") != JNONE)
		return true;
	if ((node = jnode(d, stmt, "InsertStmt")) != JNONE) {
		if (sharded_relation(d, jget(d, node, "relation"), rules))
			return refuse(why, "this INSERT into a sharded table cannot be split by shard (only INSERT ... VALUES "
					   "with constant keys is); use SET SHARD or SET SHARDING KEY");
		return true;
	}
	if ((node = jnode(d, stmt, "MergeStmt")) != JNONE) {
		if (sharded_relation(d, jget(d, node, "relation"), rules))
			return refuse(why, "MERGE into a sharded table cannot run on every shard; use SET SHARD");
		return true;
	}
	if (jnode(d, stmt, "SelectStmt") != JNONE)
		return refuse(why, "a SELECT that writes or locks rows cannot run on every shard; use SET SHARD");
	if (jnode(d, stmt, "CopyStmt") != JNONE)
		return refuse(why, "this COPY cannot run on every shard; use SET SHARD");
	if (jnode(d, stmt, "TransactionStmt") != JNONE)
		return refuse(why, "transaction control cannot be sent to every shard this way");
	*outside_tx = runs_outside_tx(d, stmt);
	return true;
}

bool broadcast_write_check(const char *sql, size_t len, const struct router_rules *rules, bool *outside_tx,
			   char why[MERGE_WHY])
{
	*outside_tx = false;
	why[0] = '\0';
	char *text = malloc(len + 1);
	if (!text)
		return refuse(why, "out of memory");
	memcpy(text, sql, len);
	text[len] = '\0';
	PgQueryParseResult r = pg_query_parse(text);
	struct jtok *toks = NULL;
	bool ok = false;
	if (r.error || !r.parse_tree) {
		refuse(why, "the statement could not be parsed");
		goto out;
	}
	size_t jlen = strlen(r.parse_tree), cap = jlen / 4 + 256;
	int ntok;
	toks = malloc(cap * sizeof *toks);
	if (!toks || !pgjson_parse(r.parse_tree, jlen, toks, cap, &ntok)) {
		refuse(why, "the statement could not be parsed");
		goto out;
	}
	struct jdoc d = { r.parse_tree, toks, ntok };
	int stmts = jget(&d, 0, "stmts");
	int first = stmts + 1;
	if (stmts == JNONE || d.t[stmts].type != J_ARR || !pgjson_valid(&d, first) ||
	    d.t[first].after != d.t[stmts].after) {
		refuse(why, "send one statement per query when it is to run on every shard");
		goto out;
	}
	ok = check_stmt(&d, jget(&d, first, "stmt"), rules, outside_tx, why);
out:
	free(toks);
	pg_query_free_parse_result(r);
	free(text);
	return ok;
}
