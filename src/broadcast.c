/* SPDX-License-Identifier: MIT */
/*
 * broadcast: the check of a write that is to run on every shard
 * (include/broadcast.h).
 */
#include "broadcast.h"

#include <stdarg.h>
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

/* ------------------------------------------------------------------ */
/* Is each shard's answer a part of the whole one?                       */

/* A statement run on every shard sees, on each, only that shard's rows of
 * every sharded table. That is the whole answer split by shard only when
 * each row the statement produces comes from one shard's rows: the sharded
 * tables are read at the statement's own level (its FROM, its UPDATE or
 * DELETE target) and, when there are several, joined on their sharding
 * columns (rows that join live together). A sharded table read in a
 * subquery, a CTE or a derived table (SELECT max(id) FROM t, id IN (SELECT
 * ...) , WITH x AS (... LIMIT 5)), or two joined on anything else, would be
 * evaluated over one shard's rows only: a different answer. */

/* The message for the client, cut to MERGE_WHY if need be. */
__attribute__((format(printf, 2, 3))) static bool refuse_fmt(char why[MERGE_WHY], const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, MERGE_WHY, fmt, ap);
	va_end(ap);
	return false;
}

#define SCATTER_REFS 16
#define SCATTER_EQS 32

struct sref {
	int rv;                        /* the RangeVar's object token */
	const struct router_table *t;
	char qual[64];                 /* alias, or the table's name */
	bool aliased;
	int set;                       /* union-find parent */
};

struct scatter {
	const struct jdoc *d;
	const struct router_rules *rules;
	struct sref refs[SCATTER_REFS];
	int n;
	int eqs[SCATTER_EQS];          /* A_Expr `x = y` of two column references */
	int n_eqs;
	int joins[SCATTER_REFS];       /* JoinExpr objects with USING */
	int n_joins;
	bool overflow;                 /* more than fits: refuse */
};

static void scatter_add(struct scatter *s, int rv)
{
	const struct jdoc *d = s->d;
	const struct router_table *t = sharded_relation(d, rv, s->rules);
	if (!t)
		return;
	if (s->n == SCATTER_REFS) {
		s->overflow = true;
		return;
	}
	struct sref *r = &s->refs[s->n];
	r->rv = rv;
	r->t = t;
	r->set = s->n;
	int alias = jget(d, jget(d, rv, "alias"), "aliasname");
	r->aliased = alias != JNONE;
	if (pgjson_str(d, r->aliased ? alias : jget(d, rv, "relname"), r->qual, sizeof r->qual) < 0)
		r->qual[0] = '\0';
	s->n++;
}

/* The `x = y` conjuncts (under AND) of e with a column reference on each side. */
static void scatter_equalities(struct scatter *s, int e, int depth)
{
	const struct jdoc *d = s->d;
	int x;
	if (e == JNONE || depth > 48)
		return;
	if ((x = jnode(d, e, "BoolExpr")) != JNONE) {
		int args = jget(d, x, "args");
		if (!pgjson_str_is(d, jget(d, x, "boolop"), "AND_EXPR", false) || !pgjson_valid(d, args) ||
		    d->t[args].type != J_ARR)
			return;
		for (int c = args + 1; c < (int)d->t[args].after; c = (int)d->t[c].after)
			scatter_equalities(s, c, depth + 1);
		return;
	}
	if ((x = jnode(d, e, "A_Expr")) == JNONE || !pgjson_str_is(d, jget(d, x, "kind"), "AEXPR_OP", false) ||
	    jnode(d, jget(d, x, "lexpr"), "ColumnRef") == JNONE || jnode(d, jget(d, x, "rexpr"), "ColumnRef") == JNONE)
		return;
	int name = jget(d, x, "name"), last = JNONE;
	for (int c = pgjson_valid(d, name) && d->t[name].type == J_ARR ? name + 1 : 0;
	     pgjson_valid(d, name) && d->t[name].type == J_ARR && c < (int)d->t[name].after; c = (int)d->t[c].after)
		last = c;
	if (!pgjson_str_is(d, pgjson_string_node(d, last), "=", false))
		return;
	if (s->n_eqs == SCATTER_EQS) {
		s->overflow = true;
		return;
	}
	s->eqs[s->n_eqs++] = x;
}

/* The FROM items of the statement's own level. */
static void scatter_from(struct scatter *s, int item, int depth)
{
	const struct jdoc *d = s->d;
	int x;
	if (item == JNONE || depth > 48)
		return;
	if ((x = jnode(d, item, "RangeVar")) != JNONE) {
		scatter_add(s, x);
	} else if ((x = jnode(d, item, "JoinExpr")) != JNONE) {
		scatter_from(s, jget(d, x, "larg"), depth + 1);
		scatter_from(s, jget(d, x, "rarg"), depth + 1);
		/* the ON of any join: rows joined on the sharding columns live
		 * on one shard, for outer joins too */
		scatter_equalities(s, jget(d, x, "quals"), 0);
		if (jget(d, x, "usingClause") != JNONE) {
			if (s->n_joins == SCATTER_REFS)
				s->overflow = true;
			else
				s->joins[s->n_joins++] = x;
		}
	} else if ((x = jnode(d, item, "RangeTableSample")) != JNONE) {
		scatter_from(s, jget(d, x, "relation"), depth + 1);
	}
}

static void scatter_from_list(struct scatter *s, int list)
{
	const struct jdoc *d = s->d;
	if (!pgjson_valid(d, list) || d->t[list].type != J_ARR)
		return;
	for (int c = list + 1; c < (int)d->t[list].after; c = (int)d->t[c].after)
		scatter_from(s, c, 0);
}

/* The reference whose sharding column a ColumnRef names, or -1 (none, or
 * an unqualified name several references have). */
static int scatter_ref_of(const struct scatter *s, int e)
{
	const struct jdoc *d = s->d;
	int fields = jget(d, jnode(d, e, "ColumnRef"), "fields");
	if (!pgjson_valid(d, fields) || d->t[fields].type != J_ARR)
		return -1;
	char f[3][64];
	int n = 0;
	for (int c = fields + 1; c < (int)d->t[fields].after; c = (int)d->t[c].after) {
		if (n == 3 || pgjson_str(d, pgjson_string_node(d, c), f[n], sizeof f[n]) < 0)
			return -1;
		n++;
	}
	if (n == 0)
		return -1;
	int found = -1;
	for (int i = 0; i < s->n; i++) {
		const struct sref *r = &s->refs[i];
		if (strcasecmp(f[n - 1], r->t->column) != 0)
			continue;
		if (n >= 2 && strcasecmp(f[n - 2], r->qual) != 0)
			continue;
		if (n == 3 && (r->aliased || (r->t->schema && strcasecmp(f[0], r->t->schema) != 0)))
			continue;
		if (found >= 0)
			return -1;
		found = i;
	}
	return found;
}

static int scatter_find(struct scatter *s, int i)
{
	while (s->refs[i].set != i)
		i = s->refs[i].set = s->refs[s->refs[i].set].set;
	return i;
}

static void scatter_union(struct scatter *s, int a, int b)
{
	a = scatter_find(s, a);
	b = scatter_find(s, b);
	if (a != b)
		s->refs[a].set = b;
}

static bool within(const struct jdoc *d, int tok, int tree)
{
	return pgjson_valid(d, tree) && tok > tree && tok < (int)d->t[tree].after;
}

/* Does any sharded table appear in [from, to) other than the references
 * in s (at the statement's level)? */
static bool scatter_nested(const struct scatter *s, int from, int to, char *table, size_t cap)
{
	const struct jdoc *d = s->d;
	for (int k = from; k < to && k < d->n; k++) {
		if (d->t[k].type != J_KEY || k + 1 >= d->n || d->t[k + 1].type != J_OBJ)
			continue;
		size_t kl = d->t[k].end - d->t[k].start;
		const char *ks = d->s + d->t[k].start;
		/* wrapped in FROM lists, bare as a DML target ("relation") */
		bool wrapped = kl == 8 && memcmp(ks, "RangeVar", 8) == 0;
		bool bare = kl == 8 && memcmp(ks, "relation", 8) == 0 && jget(d, k + 1, "relname") != JNONE;
		if (!wrapped && !bare)
			continue;
		const struct router_table *t = sharded_relation(d, k + 1, s->rules);
		if (!t)
			continue;
		bool top = false;
		for (int i = 0; i < s->n && !top; i++)
			top = s->refs[i].rv == k + 1;
		if (!top) {
			snprintf(table, cap, "%s", t->table);
			return true;
		}
	}
	return false;
}

/* node: the statement's SelectStmt, UpdateStmt, DeleteStmt or InsertStmt
 * (its object); update: an UPDATE (its other tables are in FROM, a
 * DELETE's in USING). what: "read" or "write", for the message. */
static bool scatter_check(const struct jdoc *d, int node, bool update, const struct router_rules *rules,
			  const char *what, char why[MERGE_WHY])
{
	struct scatter s = { .d = d, .rules = rules };
	int target = jget(d, node, "relation");   /* UPDATE, DELETE, INSERT; JNONE for SELECT */
	char table[64];
	if (target != JNONE) {
		scatter_add(&s, target);
		if (s.n == 0) {
			/* a table kept whole on every shard: every copy must
			 * get the same change, so nothing sharded may feed it */
			if (scatter_nested(&s, node, (int)d->t[node].after, table, sizeof table)) {
				return refuse_fmt(why, "cross-shard %s: a write to a table kept on every shard that reads "
						  "sharded table \"%s\" would change each shard's copy differently; use SET SHARD",
						  what, table);
			}
			return true;
		}
		scatter_from_list(&s, update ? jget(d, node, "fromClause") : jget(d, node, "usingClause"));
	} else {
		scatter_from_list(&s, jget(d, node, "fromClause"));
	}
	scatter_equalities(&s, jget(d, node, "whereClause"), 0);
	if (s.overflow)
		goto refuse_join;
	if (scatter_nested(&s, node, (int)d->t[node].after, table, sizeof table)) {
		return refuse_fmt(why, "cross-shard %s: sharded table \"%s\" in a subquery, CTE or derived table would be "
				  "read one shard at a time (a different answer); use SET SHARD or a key", what, table);
	}
	if (s.n < 2)
		return true;
	for (int q = 0; q < s.n_eqs; q++) {
		int a = scatter_ref_of(&s, jget(d, s.eqs[q], "lexpr")), b = scatter_ref_of(&s, jget(d, s.eqs[q], "rexpr"));
		if (a >= 0 && b >= 0)
			scatter_union(&s, a, b);
	}
	/* JOIN ... USING (col): the references on each side whose sharding
	 * column is col are joined on it */
	for (int j = 0; j < s.n_joins; j++) {
		int je = s.joins[j], using = jget(d, je, "usingClause"), l = jget(d, je, "larg"), r = jget(d, je, "rarg");
		for (int c = using + 1; pgjson_valid(d, using) && c < (int)d->t[using].after; c = (int)d->t[c].after) {
			char col[64];
			if (pgjson_str(d, pgjson_string_node(d, c), col, sizeof col) < 0)
				continue;
			int left = -1;
			for (int i = 0; i < s.n; i++)
				if (strcasecmp(s.refs[i].t->column, col) == 0 && within(d, s.refs[i].rv, l))
					left = i;
			for (int i = 0; left >= 0 && i < s.n; i++)
				if (strcasecmp(s.refs[i].t->column, col) == 0 && within(d, s.refs[i].rv, r))
					scatter_union(&s, left, i);
			for (int i = 0; left >= 0 && i < s.n; i++)
				if (strcasecmp(s.refs[i].t->column, col) == 0 && within(d, s.refs[i].rv, l))
					scatter_union(&s, left, i);
		}
	}
	for (int i = 1; i < s.n; i++)
		if (scatter_find(&s, i) != scatter_find(&s, 0))
			goto refuse_join;
	return true;
refuse_join:
	return refuse_fmt(why, "cross-shard %s: sharded tables joined on anything but their sharding columns "
			  "(a.key = b.key) would be joined one shard at a time (a different answer); use SET SHARD", what);
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
		return scatter_check(d, node, true, rules, "write", why);
	}
	if ((node = jnode(d, stmt, "DeleteStmt")) != JNONE)
		return scatter_check(d, node, false, rules, "write", why);
	if ((node = jnode(d, stmt, "InsertStmt")) != JNONE) {
		if (sharded_relation(d, jget(d, node, "relation"), rules))
			return refuse(why, "this INSERT into a sharded table cannot be split by shard (only INSERT ... VALUES "
					   "with constant keys is); use SET SHARD or SET SHARDING KEY");
		return scatter_check(d, node, false, rules, "write", why);
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

/* Parses sql into *r and *d (toks: freed by the caller with
 * pg_query_free_parse_result(*r)); the statement's node, or JNONE with why
 * set when it is not exactly one statement. */
static int parse_one(const char *sql, size_t len, PgQueryParseResult *r, struct jdoc *d, struct jtok **toks,
		     const char *what, char why[MERGE_WHY])
{
	*toks = NULL;
	char *text = malloc(len + 1);
	if (!text) {
		memset(r, 0, sizeof *r);
		snprintf(why, MERGE_WHY, "cross-shard %s: out of memory", what);
		return JNONE;
	}
	memcpy(text, sql, len);
	text[len] = '\0';
	*r = pg_query_parse(text);
	free(text);
	if (r->error || !r->parse_tree) {
		snprintf(why, MERGE_WHY, "cross-shard %s: the statement could not be parsed", what);
		return JNONE;
	}
	size_t jlen = strlen(r->parse_tree), cap = jlen / 4 + 256;
	int ntok;
	*toks = malloc(cap * sizeof **toks);
	if (!*toks || !pgjson_parse(r->parse_tree, jlen, *toks, cap, &ntok)) {
		snprintf(why, MERGE_WHY, "cross-shard %s: the statement could not be parsed", what);
		return JNONE;
	}
	*d = (struct jdoc){ r->parse_tree, *toks, ntok };
	int stmts = jget(d, 0, "stmts");
	int first = stmts + 1;
	if (stmts == JNONE || d->t[stmts].type != J_ARR || !pgjson_valid(d, first) ||
	    d->t[first].after != d->t[stmts].after) {
		snprintf(why, MERGE_WHY, "cross-shard %s: send one statement per query when it is to run on every shard",
			 what);
		return JNONE;
	}
	return jget(d, first, "stmt");
}

bool broadcast_write_check(const char *sql, size_t len, const struct router_rules *rules, bool *outside_tx,
			   char why[MERGE_WHY])
{
	*outside_tx = false;
	why[0] = '\0';
	PgQueryParseResult r;
	struct jdoc d;
	struct jtok *toks;
	int stmt = parse_one(sql, len, &r, &d, &toks, "write", why);
	bool ok = stmt != JNONE && check_stmt(&d, stmt, rules, outside_tx, why);
	free(toks);
	pg_query_free_parse_result(r);
	return ok;
}

bool broadcast_read_check(const char *sql, size_t len, const struct router_rules *rules, char why[MERGE_WHY])
{
	why[0] = '\0';
	PgQueryParseResult r;
	struct jdoc d;
	struct jtok *toks;
	int stmt = parse_one(sql, len, &r, &d, &toks, "read", why);
	int sel = stmt == JNONE ? JNONE : jnode(&d, stmt, "SelectStmt");
	bool ok = stmt != JNONE && (sel == JNONE || scatter_check(&d, sel, false, rules, "read", why));
	free(toks);
	pg_query_free_parse_result(r);
	return ok;
}
