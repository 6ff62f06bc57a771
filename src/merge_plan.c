/* SPDX-License-Identifier: MIT */
/*
 * merge_plan: the plan of a cross-shard read (include/merge.h): the query
 * read with libpg_query for what the merge must do (ORDER BY on output
 * columns, LIMIT/OFFSET, the aggregates, GROUP BY, DISTINCT), what cannot
 * be merged exactly refused with the reason, and the text each shard runs
 * instead of the client's. A room of its own because it works on the
 * query's text and parse tree only; the rows the shards send back are
 * merge.c's. Pure: no sockets and no globals.
 */
#include "merge.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <pg_query.h>

#include "pgjson.h"
#include "sqllex.h"

/* ------------------------------------------------------------------ */
/* The plan                                                              */

#define PLAN_TOKENS_MIN 256
/* An expression's parse tree as text without locations, to tell whether
 * two are the same (GROUP BY and ORDER BY against the select list, avg's
 * sum and count): longer ones are not matched (the query is refused). */
#define EXPR_TEXT 4096

static bool refuse(char why[MERGE_WHY], const char *msg)
{
	snprintf(why, MERGE_WHY, "cross-shard read: %s", msg);
	return false;
}

/* The last name of a qualified function name list (pg_catalog.count -> count). */
static int last_name(const struct jdoc *d, int list)
{
	if (!pgjson_valid(d, list) || d->t[list].type != J_ARR || d->t[list].after <= (uint32_t)list + 1)
		return JNONE;
	int last = JNONE;
	for (int e = list + 1; e < (int)d->t[list].after; e = (int)d->t[e].after)
		last = e;
	return pgjson_string_node(d, last);
}

static int array_len(const struct jdoc *d, int a)
{
	if (!pgjson_valid(d, a) || d->t[a].type != J_ARR)
		return 0;
	int n = 0;
	for (int e = a + 1; e < (int)d->t[a].after; e = (int)d->t[e].after)
		n++;
	return n;
}

/* Aggregates PostgreSQL ships that pgcat cannot combine (anywhere in the
 * select list they make the merge refuse: a shard's partial answer is not
 * a part of the whole one). */
static const char *const other_aggregates[] = {
	"array_agg", "string_agg", "bool_and", "bool_or", "every", "bit_and", "bit_or", "bit_xor",
	"json_agg", "jsonb_agg", "json_object_agg", "jsonb_object_agg", "xmlagg", "stddev", "stddev_pop",
	"stddev_samp", "variance", "var_pop", "var_samp", "corr", "covar_pop", "covar_samp", "regr_avgx",
	"regr_avgy", "regr_count", "regr_intercept", "regr_r2", "regr_slope", "regr_sxx", "regr_sxy", "regr_syy",
	"percentile_cont", "percentile_disc", "mode", "rank", "dense_rank", "percent_rank", "cume_dist",
	"range_agg", "range_intersect_agg", "any_value", "grouping",
};

static bool is_other_aggregate(const char *name)
{
	for (size_t i = 0; i < sizeof other_aggregates / sizeof *other_aggregates; i++)
		if (strcasecmp(name, other_aggregates[i]) == 0)
			return true;
	return false;
}

/* Does the subtree [from, to) call an aggregate (a known one, or any
 * function with an OVER, FILTER or WITHIN GROUP)? Subqueries are skipped:
 * their aggregates are theirs. */
static bool calls_aggregate(const struct jdoc *d, int from, int to)
{
	for (int k = from; k < to; k++) {
		if (d->t[k].type != J_KEY)
			continue;
		const struct jtok *kt = &d->t[k];
		size_t kl = kt->end - kt->start;
		const char *ks = d->s + kt->start;
		if (kl == 7 && memcmp(ks, "SubLink", 7) == 0) {
			k = (int)kt->after - 1;
			continue;
		}
		if (kl != 8 || memcmp(ks, "FuncCall", 8) != 0)
			continue;
		int fc = k + 1;
		char name[64];
		if (pgjson_str(d, last_name(d, jget(d, fc, "funcname")), name, sizeof name) < 0)
			return true;   /* a name it cannot read: assume the worst */
		if (strcasecmp(name, "count") == 0 || strcasecmp(name, "sum") == 0 || strcasecmp(name, "min") == 0 ||
		    strcasecmp(name, "max") == 0 || strcasecmp(name, "avg") == 0 || is_other_aggregate(name) ||
		    jget(d, fc, "over") != JNONE || jget(d, fc, "agg_within_group") != JNONE)
			return true;
	}
	return false;
}

/* The JSON text of a subtree without its "location" fields: two argument
 * lists are the same expression if these are equal. */
static size_t strip_locations(const struct jdoc *d, int v, char *out, size_t cap)
{
	if (!pgjson_valid(d, v))
		return 0;
	const char *s = d->s + d->t[v].start;
	const char *e = d->s + (d->t[v].type == J_STR ? d->t[v].end + 1 : d->t[v].end);
	size_t o = 0;
	while (s < e) {
		if (e - s > 11 && memcmp(s, "\"location\":", 11) == 0) {
			s += 11;
			while (s < e && (*s == '-' || (*s >= '0' && *s <= '9')))
				s++;
			if (s < e && *s == ',')
				s++;
			continue;
		}
		if (o + 1 >= cap)
			return 0;
		out[o++] = *s++;
	}
	out[o] = '\0';
	return o;
}

/* An integer constant of LIMIT/OFFSET: its value and where its text is; or
 * a parameter $n (*param n, its text's place). */
static bool limit_const(const struct jdoc *d, int v, const char *sql, size_t len, int64_t *val, size_t *at,
			size_t *tlen, bool *is_null, int *param)
{
	int c = jnode(d, v, "A_Const");
	*is_null = false;
	*param = 0;
	int pr = jnode(d, v, "ParamRef");
	if (pr != JNONE) {
		long num = pgjson_int(d, jget(d, pr, "number")), loc = pgjson_int(d, jget(d, pr, "location"));
		if (num <= 0 || num > 65535 || loc < 0 || (size_t)loc >= len || sql[loc] != '$')
			return false;
		size_t q = (size_t)loc + 1;
		while (q < len && sql[q] >= '0' && sql[q] <= '9')
			q++;
		*param = (int)num;
		*at = (size_t)loc;
		*tlen = q - (size_t)loc;
		return true;
	}
	if (c == JNONE)
		return false;
	if (jget(d, c, "isnull") != JNONE) {
		*is_null = true;   /* LIMIT ALL / LIMIT NULL */
		return true;
	}
	int iv = jget(d, c, "ival");
	int loc_tok = jget(d, c, "location");
	long loc = pgjson_int(d, loc_tok);
	if (iv != JNONE && pgjson_valid(d, loc_tok) && d->s[d->t[loc_tok].start] == '-') {
		/* not in the text: FETCH FIRST ROW ONLY means 1 (its text
		 * cannot be rewritten: *tlen 0) */
		long implicit = pgjson_int(d, jget(d, iv, "ival"));
		if (implicit < 0)
			return false;
		*val = implicit;
		*at = 0;
		*tlen = 0;
		return true;
	}
	if (iv == JNONE || loc < 0 || (size_t)loc >= len)
		return false;
	/* {"ival":{}} is 0; {"ival":{"ival":-3}} may be negative */
	size_t p = (size_t)loc, q = p;
	if (q < len && sql[q] == '-')
		q++;
	size_t digits_at = q;
	while (q < len && sql[q] >= '0' && sql[q] <= '9')
		q++;
	if (q == digits_at || q - p > 19)
		return false;
	char buf[24];
	memcpy(buf, sql + p, q - p);
	buf[q - p] = '\0';
	*val = strtoll(buf, NULL, 10);
	*at = p;
	*tlen = q - p;
	return true;
}

/* One select-list entry of an aggregate query. */
static bool plan_agg_target(const struct jdoc *d, int val, struct merge_plan *p, int col, char (*args)[EXPR_TEXT],
			    char why[MERGE_WHY])
{
	if (jnode(d, val, "A_Const") != JNONE) {
		p->agg[col] = MERGE_AGG_CONST;
		return true;
	}
	int fc = jnode(d, val, "FuncCall");
	char name[64];
	if (fc == JNONE || pgjson_str(d, last_name(d, jget(d, fc, "funcname")), name, sizeof name) < 0)
		return refuse(why, "an aggregate query whose select list holds something other than count, sum, "
				   "min, max, avg, a constant or a GROUP BY column cannot be merged");
	if (jget(d, fc, "agg_distinct") != JNONE)
		return refuse(why, "an aggregate over DISTINCT values cannot be merged across shards");
	if (jget(d, fc, "over") != JNONE || jget(d, fc, "agg_within_group") != JNONE)
		return refuse(why, "window and ordered-set aggregates cannot be merged across shards");
	int args_v = jget(d, fc, "args");
	if (calls_aggregate(d, args_v == JNONE ? 0 : args_v, args_v == JNONE ? 0 : (int)d->t[args_v].after))
		return refuse(why, "nested aggregates cannot be merged across shards");
	if (strcasecmp(name, "count") == 0)
		p->agg[col] = MERGE_AGG_COUNT;
	else if (strcasecmp(name, "sum") == 0)
		p->agg[col] = MERGE_AGG_SUM;
	else if (strcasecmp(name, "min") == 0)
		p->agg[col] = MERGE_AGG_MIN;
	else if (strcasecmp(name, "max") == 0)
		p->agg[col] = MERGE_AGG_MAX;
	else if (strcasecmp(name, "avg") == 0)
		p->agg[col] = MERGE_AGG_AVG;
	else
		return refuse(why, "an aggregate query whose select list holds something other than count, sum, "
				   "min, max, avg, a constant or a GROUP BY column cannot be merged");
	/* count(*) and count(x) differ; the argument's text tells avg's sum
	 * and count apart from others' */
	if (jget(d, fc, "agg_star") != JNONE)
		snprintf(args[col], EXPR_TEXT, "*");
	else if (array_len(d, args_v) != 1 || !strip_locations(d, args_v, args[col], EXPR_TEXT))
		args[col][0] = '\0';
	/* FILTER applies on every shard alike; keep it in the identity */
	int filt = jget(d, fc, "agg_filter");
	if (filt != JNONE && args[col][0]) {
		char f[EXPR_TEXT];
		size_t fl = strip_locations(d, filt, f, sizeof f), al = strlen(args[col]);
		if (!fl || al + fl + 1 >= EXPR_TEXT)
			args[col][0] = '\0';
		else
			snprintf(args[col] + al, EXPR_TEXT - al, "|%s", f);
	}
	return true;
}

static bool plan_targets(const struct jdoc *d, int sel, const char *sql, size_t len, int tl, int gc,
			 struct merge_plan *p, char (*texts)[EXPR_TEXT], char aliases[][64], int n_texts, char why[MERGE_WHY]);
static bool plan_sort(const struct jdoc *d, int sel, struct merge_plan *p, char (*texts)[EXPR_TEXT], int n_texts,
		      char why[MERGE_WHY]);
static bool plan_limit(const struct jdoc *d, int sel, const char *sql, size_t len, struct merge_plan *p,
		       char why[MERGE_WHY]);

static bool plan_select(const struct jdoc *d, int sel, const char *sql, size_t len, struct merge_plan *p,
			char why[MERGE_WHY])
{
	if (!pgjson_str_is(d, jget(d, sel, "op"), "SETOP_NONE", false))
		return refuse(why, "UNION, INTERSECT and EXCEPT cannot be merged across shards");
	int dc = jget(d, sel, "distinctClause");
	if (dc != JNONE) {
		/* plain DISTINCT is a list of one empty node; DISTINCT ON lists expressions */
		if (array_len(d, dc) != 1 || d->t[dc + 1].type != J_OBJ || d->t[dc + 1].after != (uint32_t)dc + 2)
			return refuse(why, "DISTINCT ON cannot be merged across shards");
		p->distinct = true;
	}
	if (jget(d, sel, "havingClause") != JNONE)
		return refuse(why, "HAVING cannot be merged across shards (it would filter each shard's partial groups)");
	int gc = jget(d, sel, "groupClause");
	if (gc != JNONE && (d->t[gc].type != J_ARR || array_len(d, gc) == 0))
		return refuse(why, "this GROUP BY cannot be merged across shards");
	if (jget(d, sel, "windowClause") != JNONE)
		return refuse(why, "window functions cannot be merged across shards");
	if (jget(d, sel, "intoClause") != JNONE || jget(d, sel, "lockingClause") != JNONE)
		return refuse(why, "SELECT INTO and FOR UPDATE/SHARE are not reads");
	if (jget(d, sel, "valuesLists") != JNONE)
		return refuse(why, "VALUES lists are not sharded");
	int lo = jget(d, sel, "limitOption");
	if (lo != JNONE && pgjson_str_is(d, lo, "LIMIT_OPTION_WITH_TIES", false))
		return refuse(why, "FETCH ... WITH TIES cannot be merged across shards");

	/* The select list: aggregates, or plain rows. */
	int tl = jget(d, sel, "targetList");
	if (tl == JNONE || d->t[tl].type != J_ARR)
		return refuse(why, "a query without a select list cannot be merged");
	for (int k = tl; k < (int)d->t[tl].after; k++) {
		if (d->t[k].type == J_KEY && d->t[k].end - d->t[k].start == 4 && memcmp(d->s + d->t[k].start, "over", 4) == 0)
			return refuse(why, "window functions cannot be merged across shards");
		if (d->t[k].type == J_KEY && d->t[k].end - d->t[k].start == 7 &&
		    memcmp(d->s + d->t[k].start, "SubLink", 7) == 0)
			k = (int)d->t[k].after - 1;
	}
	/* Each select-list entry as text without locations (first
	 * MERGE_MAX_AGGS): GROUP BY and ORDER BY expressions are matched to
	 * output columns by it. */
	char (*texts)[EXPR_TEXT] = calloc(MERGE_MAX_AGGS, EXPR_TEXT);
	if (!texts)
		return refuse(why, "out of memory");
	char aliases[MERGE_MAX_AGGS][64];
	int n_texts = 0;
	for (int e = tl + 1; e < (int)d->t[tl].after && n_texts < MERGE_MAX_AGGS; e = (int)d->t[e].after, n_texts++) {
		int rt = jnode(d, e, "ResTarget");
		if (!strip_locations(d, jget(d, rt, "val"), texts[n_texts], EXPR_TEXT))
			texts[n_texts][0] = '\0';
		if (pgjson_str(d, jget(d, rt, "name"), aliases[n_texts], sizeof aliases[n_texts]) < 0)
			aliases[n_texts][0] = '\0';
	}
	bool ok = plan_targets(d, sel, sql, len, tl, gc, p, texts, aliases, n_texts, why) &&
		  plan_sort(d, sel, p, texts, n_texts, why);
	free(texts);
	if (!ok)
		return false;
	return plan_limit(d, sel, sql, len, p, why);
}

/* Which output column a GROUP BY or ORDER BY item names: a position, the
 * same expression as a select-list entry, or an entry's alias. -1: none. */
static int match_output(const struct jdoc *d, int node, char (*texts)[EXPR_TEXT], char aliases[][64], int n_texts)
{
	int ac = jnode(d, node, "A_Const");
	if (ac != JNONE) {
		int iv = jget(d, ac, "ival");
		long pos = pgjson_int(d, jget(d, iv, "ival"));
		return iv != JNONE && pos >= 1 && pos <= n_texts ? (int)pos - 1 : -1;
	}
	char t[EXPR_TEXT];
	if (!strip_locations(d, node, t, sizeof t))
		return -1;
	for (int i = 0; i < n_texts; i++)
		if (texts[i][0] && strcmp(texts[i], t) == 0)
			return i;
	int cr = jnode(d, node, "ColumnRef");
	char name[64];
	if (cr != JNONE && array_len(d, jget(d, cr, "fields")) == 1 &&
	    pgjson_str(d, last_name(d, jget(d, cr, "fields")), name, sizeof name) >= 0)
		for (int i = 0; i < n_texts; i++)
			if (aliases[i][0] && strcmp(aliases[i], name) == 0)
				return i;
	return -1;
}

/* The aggregates of the select list tl (key: the GROUP BY columns). */
/* The first from-item's place in the text, or -1. */
static long from_item_location(const struct jdoc *d, int item, int depth)
{
	int x;
	if (depth > 32)
		return -1;
	if ((x = jnode(d, item, "RangeVar")) != JNONE)
		return pgjson_int(d, jget(d, x, "location"));
	if ((x = jnode(d, item, "JoinExpr")) != JNONE)
		return from_item_location(d, jget(d, x, "larg"), depth + 1);
	if ((x = jnode(d, item, "RangeTableSample")) != JNONE)
		return from_item_location(d, jget(d, x, "relation"), depth + 1);
	return -1;
}

/* Where the select list ends: the FROM keyword at depth 0 between the last
 * select-list entry and the first from-item. false: not found. */
static bool select_list_end(const struct jdoc *d, int sel, int tl, const char *sql, size_t len, size_t *at)
{
	int fc = jget(d, sel, "fromClause"), last = JNONE;
	if (fc == JNONE || d->t[fc].type != J_ARR || d->t[fc].after == (uint32_t)fc + 1)
		return false;
	for (int e = tl + 1; e < (int)d->t[tl].after; e = (int)d->t[e].after)
		last = e;
	long from = from_item_location(d, fc + 1, 0), start = pgjson_int(d, jget(d, jnode(d, last, "ResTarget"), "location"));
	if (from < 0 || start < 0 || from > (long)len || start >= from)
		return false;
	bool found = false;
	int depth = 0;
	for (size_t i = (size_t)start; i < (size_t)from;) {
		size_t j = sqllex_skip_quoted(sql, (size_t)from, i);
		if (j != i) {
			i = j;
			continue;
		}
		char ch = sql[i];
		if (ch == '(')
			depth++;
		else if (ch == ')')
			depth--;
		else if (depth == 0 && (ch == 'f' || ch == 'F') && (size_t)from - i >= 4 && strncasecmp(sql + i, "from", 4) == 0 &&
			 (i == 0 || !(sqllex_is_ident_cont((unsigned char)sql[i - 1]) || sql[i - 1] == '"')) &&
			 (i + 4 >= len || !sqllex_is_ident_cont((unsigned char)sql[i + 4]))) {
			*at = i;
			found = true;
		}
		i++;
	}
	return found;
}

/* The parenthesized arguments of the call at sql[loc]: [*open, *close]. */
static bool call_args(const char *sql, size_t len, long loc, size_t *open, size_t *close)
{
	if (loc < 0 || (size_t)loc >= len)
		return false;
	size_t i = (size_t)loc;
	int depth = 0;
	while (i < len) {
		size_t j = sqllex_skip_quoted(sql, len, i);
		if (j != i) {
			i = j;
			continue;
		}
		if (sql[i] == '(') {
			if (depth++ == 0)
				*open = i;
		} else if (sql[i] == ')') {
			if (depth == 0)
				return false;
			if (--depth == 0) {
				*close = i;
				return true;
			}
		}
		i++;
	}
	return false;
}

static bool plan_aggs(const struct jdoc *d, int sel, const char *sql, size_t len, int tl, struct merge_plan *p,
		      const bool *key, char (*args)[EXPR_TEXT], char why[MERGE_WHY])
{
	int col = 0;
	p->aggregates = true;
	for (int e = tl + 1; e < (int)d->t[tl].after; e = (int)d->t[e].after, col++) {
		if (col == MERGE_MAX_AGGS)
			return refuse(why, "too many aggregates to merge");
		int rt = jnode(d, e, "ResTarget");
		int val = jget(d, rt, "val");
		p->avg_sum[col] = p->avg_count[col] = -1;
		if (key[col]) {
			if (calls_aggregate(d, val, (int)d->t[val].after))
				return refuse(why, "a GROUP BY column that holds an aggregate cannot be merged");
			p->agg[col] = MERGE_AGG_KEY;
			args[col][0] = '\0';
			continue;
		}
		if (!plan_agg_target(d, val, p, col, args, why))
			return false;
	}
	p->n_cols = p->n_visible = col;
	int e = tl + 1;
	for (int i = 0; i < col; i++, e = (int)d->t[e].after) {
		if (p->agg[i] != MERGE_AGG_AVG)
			continue;
		for (int j = 0; j < col && args[i][0]; j++) {
			if (strcmp(args[j], args[i]) != 0)
				continue;
			if (p->agg[j] == MERGE_AGG_SUM && p->avg_sum[i] < 0)
				p->avg_sum[i] = (int8_t)j;
			if (p->agg[j] == MERGE_AGG_COUNT && p->avg_count[i] < 0)
				p->avg_count[i] = (int8_t)j;
		}
		if (p->avg_sum[i] >= 0 && p->avg_count[i] >= 0)
			continue;
		/* avg(x) alone: the shards return sum(x) and count(x) as well,
		 * after the client's columns (positions in GROUP BY and ORDER BY
		 * stay right) */
		int fc = jnode(d, jget(d, jnode(d, e, "ResTarget"), "val"), "FuncCall");
		size_t open, close;
		if (!args[i][0] || jget(d, fc, "agg_filter") != JNONE || p->n_hidden == MERGE_MAX_HIDDEN ||
		    p->n_cols + 2 > MERGE_MAX_AGGS || (p->n_hidden == 0 && !select_list_end(d, sel, tl, sql, len, &p->hidden_at)) ||
		    !call_args(sql, len, pgjson_int(d, jget(d, fc, "location")), &open, &close))
			return refuse(why, "avg() across shards needs sum() and count() of the same argument in the "
					   "select list too (avg is merged as sum / count)");
		p->hidden_arg_at[p->n_hidden] = open;
		p->hidden_arg_len[p->n_hidden] = close + 1 - open;
		p->n_hidden++;
		p->avg_sum[i] = (int8_t)p->n_cols;
		p->agg[p->n_cols++] = MERGE_AGG_SUM;
		p->avg_count[i] = (int8_t)p->n_cols;
		p->agg[p->n_cols++] = MERGE_AGG_COUNT;
	}
	return true;
}

/* The select list of an aggregate or grouped query: what each column is. */
static bool plan_targets(const struct jdoc *d, int sel, const char *sql, size_t len, int tl, int gc,
			 struct merge_plan *p, char (*texts)[EXPR_TEXT], char aliases[][64], int n_texts, char why[MERGE_WHY])
{
	bool key[MERGE_MAX_AGGS] = { false };
	if (gc != JNONE) {
		for (int g = gc + 1; g < (int)d->t[gc].after; g = (int)d->t[g].after) {
			if (jnode(d, g, "GroupingSet") != JNONE)
				return refuse(why, "GROUPING SETS, ROLLUP and CUBE cannot be merged across shards");
			int col = match_output(d, g, texts, aliases, n_texts);
			if (col < 0)
				return refuse(why, "GROUP BY must name columns of the select list to be merged across shards; "
						   "add the expression to the select list");
			key[col] = true;
		}
		p->grouped = true;
	}
	if (!p->grouped && !calls_aggregate(d, tl, (int)d->t[tl].after))
		return true;   /* plain rows */
	char (*args)[EXPR_TEXT] = calloc(MERGE_MAX_AGGS, EXPR_TEXT);   /* each aggregate's argument, as text */
	if (!args)
		return refuse(why, "out of memory");
	bool ok = plan_aggs(d, sel, sql, len, tl, p, key, args, why);
	free(args);
	return ok;
}

/* ORDER BY t.col (node, a ColumnRef of several fields): the select-list
 * entry that is this very column: the same text, a reference to col
 * (bare, or qualified by t), or a star of t's columns, found by its output
 * name (name: col; then -1). -2: none, or an alias is called col too. */
static int qualified_output(const struct jdoc *d, int tl, int node, char (*texts)[EXPR_TEXT], int n_texts, char *name,
			    size_t cap)
{
	int fields = jget(d, jnode(d, node, "ColumnRef"), "fields"), n = array_len(d, fields);
	char f[3][64];
	int i = 0;
	if (n < 2 || n > 3 || tl == JNONE)
		return -2;
	for (int e = fields + 1; e < (int)d->t[fields].after; e = (int)d->t[e].after, i++)
		if (pgjson_str(d, pgjson_string_node(d, e), f[i], sizeof f[i]) < 0)
			return -2;
	const char *col = f[n - 1], *qual = f[n - 2];
	char t[EXPR_TEXT];
	if (strip_locations(d, node, t, sizeof t))
		for (int c = 0; c < n_texts; c++)
			if (texts[c][0] && strcmp(texts[c], t) == 0)
				return c;
	int c = 0, star = -1;
	for (int e = tl + 1; e < (int)d->t[tl].after; e = (int)d->t[e].after, c++) {
		int rt = jnode(d, e, "ResTarget");
		int ecr = jnode(d, jget(d, rt, "val"), "ColumnRef");
		int ef = jget(d, ecr, "fields"), en = array_len(d, ef), k = 0;
		char g[3][64];
		if (ecr == JNONE || en < 1 || en > 3)
			continue;
		for (int x = ef + 1; x < (int)d->t[ef].after && k < en; x = (int)d->t[x].after, k++) {
			if (jnode(d, x, "A_Star") != JNONE)
				snprintf(g[k], sizeof g[k], "*");
			else if (pgjson_str(d, pgjson_string_node(d, x), g[k], sizeof g[k]) < 0)
				g[k][0] = '\0';
		}
		if (k != en || (en >= 2 && strcmp(g[en - 2], qual) != 0))
			continue;
		if (strcmp(g[en - 1], "*") == 0) {
			star = c;
			continue;
		}
		if (strcmp(g[en - 1], col) == 0)
			return c;   /* the column itself, whatever it is called */
	}
	if (star < 0)
		return -2;
	/* by name among a star's columns: only if nothing else is called col
	 * (an alias; an expression's own name is refused by the shards'
	 * column names being ambiguous) */
	c = 0;
	for (int e = tl + 1; e < (int)d->t[tl].after; e = (int)d->t[e].after, c++) {
		char a[64];
		if (pgjson_str(d, jget(d, jnode(d, e, "ResTarget"), "name"), a, sizeof a) >= 0 && strcmp(a, col) == 0)
			return -2;
	}
	snprintf(name, cap, "%s", col);
	return -1;
}

/* ORDER BY output columns. */
static bool plan_sort(const struct jdoc *d, int sel, struct merge_plan *p, char (*texts)[EXPR_TEXT], int n_texts,
		      char why[MERGE_WHY])
{
	int sc = jget(d, sel, "sortClause");
	if (sc != JNONE) {
		for (int e = sc + 1; e < (int)d->t[sc].after; e = (int)d->t[e].after) {
			if (p->n_sort == MERGE_MAX_SORT)
				return refuse(why, "too many ORDER BY keys to merge");
			int sb = jnode(d, e, "SortBy");
			struct merge_sort *k = &p->sort[p->n_sort];
			memset(k, 0, sizeof *k);
			if (jget(d, sb, "useOp") != JNONE)
				return refuse(why, "ORDER BY ... USING cannot be merged across shards");
			int node = jget(d, sb, "node");
			int coll = jnode(d, node, "CollateClause");
			if (coll != JNONE) {
				char cn[64];
				if (pgjson_str(d, last_name(d, jget(d, coll, "collname")), cn, sizeof cn) < 0 ||
				    (strcmp(cn, "C") != 0 && strcmp(cn, "POSIX") != 0 && strcasecmp(cn, "ucs_basic") != 0))
					return refuse(why, "ORDER BY with a COLLATE other than \"C\" cannot be merged across shards");
				k->bytewise = true;
				node = jget(d, coll, "arg");
			}
			int ac = jnode(d, node, "A_Const");
			int cr = jnode(d, node, "ColumnRef");
			if (ac != JNONE) {
				int iv = jget(d, ac, "ival");
				long pos = pgjson_int(d, jget(d, iv, "ival"));
				if (iv == JNONE || pos < 1 || pos > 1664)
					return refuse(why, "ORDER BY a constant other than a column position cannot be merged");
				k->position = (int)pos;
			} else if (cr != JNONE && array_len(d, jget(d, cr, "fields")) == 1) {
				/* a bare name is an output column's first (as in PostgreSQL) */
				int fields = jget(d, cr, "fields");
				if (pgjson_str(d, last_name(d, fields), k->name, sizeof k->name) < 0)
					return refuse(why, "ORDER BY must name output columns to be merged across shards");
			} else if (cr != JNONE) {
				/* t.col names the table's column, which need not be the output
				 * column called col (SELECT v AS id ... ORDER BY t.id) */
				int col = qualified_output(d, jget(d, sel, "targetList"), node, texts, n_texts, k->name,
							   sizeof k->name);
				if (col == -2)
					return refuse(why, "ORDER BY a qualified column must name a column of the select list "
							   "to be merged across shards; order by its output name or position");
				k->position = col + 1;   /* 0 (col -1): by name, k->name */
			} else {
				int col = -1;
				for (int i = 0; col < 0 && i < n_texts; i++) {
					char t[EXPR_TEXT];
					if (texts[i][0] && strip_locations(d, node, t, sizeof t) && strcmp(texts[i], t) == 0)
						col = i;
				}
				if (col < 0)
					return refuse(why, "ORDER BY an expression cannot be merged across shards unless the select "
							   "list holds it; order by an output column (its name or position)");
				k->position = col + 1;
			}
			int dir = jget(d, sb, "sortby_dir"), nulls = jget(d, sb, "sortby_nulls");
			k->desc = pgjson_str_is(d, dir, "SORTBY_DESC", false);
			k->nulls_first = pgjson_str_is(d, nulls, "SORTBY_NULLS_FIRST", false) ||
					 (k->desc && !pgjson_str_is(d, nulls, "SORTBY_NULLS_LAST", false));
			p->n_sort++;
		}
	}
	return true;
}

/* LIMIT / OFFSET: after the merge; each shard returns limit + offset. */
static bool plan_limit(const struct jdoc *d, int sel, const char *sql, size_t len, struct merge_plan *p,
		       char why[MERGE_WHY])
{
	int lc = jget(d, sel, "limitCount"), lof = jget(d, sel, "limitOffset");
	bool is_null;
	if (lc != JNONE) {
		if (!limit_const(d, lc, sql, len, &p->limit, &p->limit_at, &p->limit_len, &is_null, &p->limit_param))
			return refuse(why, "LIMIT must be an integer constant or a parameter to be merged across shards");
		p->has_limit = !is_null;
		if (is_null)
			p->limit_len = 0;
	}
	if (lof != JNONE) {
		if (!limit_const(d, lof, sql, len, &p->offset, &p->offset_at, &p->offset_len, &is_null, &p->offset_param))
			return refuse(why, "OFFSET must be an integer constant or a parameter to be merged across shards");
		p->has_offset = !is_null && (p->offset != 0 || p->offset_param);
		if (!p->has_offset)
			p->offset_len = 0;
	}
	if ((p->limit_param || p->offset_param) && p->grouped)
		return refuse(why, "LIMIT or OFFSET parameters with GROUP BY cannot be merged across shards; write constants");
	if ((p->has_limit && p->limit < 0) || (p->has_offset && p->offset < 0)) {
		/* PostgreSQL refuses these itself: leave the text alone */
		p->has_limit = p->has_offset = false;
		p->limit_len = p->offset_len = 0;
	}
	if (p->has_limit && p->has_offset && p->limit > INT64_MAX - p->offset)
		return refuse(why, "LIMIT + OFFSET too large");
	if (p->has_limit && p->limit_len == 0 && (p->grouped || p->has_offset))
		/* the shards' LIMIT must change but is not in the text */
		return refuse(why, "FETCH FIRST ROW ONLY with OFFSET or GROUP BY cannot be merged across shards; write "
				   "FETCH FIRST 1 ROW ONLY");
	if (p->grouped) {
		/* a group's rows may come from every shard: no LIMIT or OFFSET
		 * on the shards (rewritten below), both after the merge */
		if (!p->has_limit)
			p->limit_len = 0;
		if (!p->has_offset)
			p->offset_len = 0;
		return true;
	}
	/* With an OFFSET, each shard returns its first limit + offset rows
	 * (an aggregate's one row too: OFFSET 1 on a shard would drop it) */
	if (!p->has_offset)
		p->limit_len = 0;   /* the shard's LIMIT stays as written */
	return true;
}

bool merge_plan_build(const char *sql, size_t len, struct merge_plan *p, char why[MERGE_WHY])
{
	memset(p, 0, sizeof *p);
	why[0] = '\0';
	char *text = malloc(len + 1);
	if (!text)
		return refuse(why, "out of memory");
	memcpy(text, sql, len);
	text[len] = '\0';
	len = strlen(text);   /* PostgreSQL stops at an embedded NUL too */
	PgQueryParseResult r = pg_query_parse(text);
	bool ok = false;
	struct jtok *toks = NULL;
	if (r.error || !r.parse_tree) {
		refuse(why, "the query could not be parsed");
		goto out;
	}
	size_t jlen = strlen(r.parse_tree), cap = jlen / 4 + PLAN_TOKENS_MIN;
	toks = malloc(cap * sizeof *toks);
	int ntok;
	if (!toks || !pgjson_parse(r.parse_tree, jlen, toks, cap, &ntok)) {
		refuse(why, "the query could not be parsed");
		goto out;
	}
	struct jdoc d = { r.parse_tree, toks, ntok };
	int stmts = jget(&d, 0, "stmts");
	if (array_len(&d, stmts) != 1) {
		refuse(why, "several statements in one query cannot be merged across shards; send them one by one");
		goto out;
	}
	int stmt = jget(&d, stmts + 1, "stmt");
	int sel = jnode(&d, stmt, "SelectStmt");
	if (sel == JNONE) {
		p->not_select = true;
		if (jnode(&d, stmt, "ExplainStmt") != JNONE)
			refuse(why, "EXPLAIN of a query on several shards: each shard has its own plan; explain it on one with "
				    "SET SHARD or a /* pgcat: shard=N */ hint");
		else if (jnode(&d, stmt, "DeclareCursorStmt") != JNONE)
			refuse(why, "DECLARE CURSOR cannot be merged across shards (psycopg's named cursors); read the rows "
				    "without a server-side cursor, or choose a shard");
		else if (jnode(&d, stmt, "CopyStmt") != JNONE)
			refuse(why, "COPY ... TO cannot be merged across shards; COPY (SELECT ...) from each shard with SET "
				    "SHARD");
		else
			refuse(why, "only SELECT can be merged across shards");
		goto out;
	}
	ok = plan_select(&d, sel, text, len, p, why);
out:
	free(toks);
	pg_query_free_parse_result(r);
	free(text);
	return ok;
}

bool merge_plan_bind(struct merge_plan *p, bool limit_null, int64_t limit, bool offset_null, int64_t offset)
{
	if ((p->limit_param && !limit_null && limit < 0) || (p->offset_param && !offset_null && offset < 0))
		return false;
	if (p->limit_param) {
		p->has_limit = !limit_null;
		p->limit = limit_null ? 0 : limit;
	}
	if (p->offset_param) {
		p->has_offset = !offset_null && offset > 0;
		p->offset = p->has_offset ? offset : 0;
	}
	return true;
}

bool merge_plan_rewrites(const struct merge_plan *p) { return p->limit_len > 0 || p->offset_len > 0 || p->n_hidden > 0; }

bool merge_plan_compares(const struct merge_plan *p)
{
	if (p->n_sort > 0)
		return true;
	for (int i = 0; p->aggregates && i < p->n_cols; i++)
		if (p->agg[i] == MERGE_AGG_MIN || p->agg[i] == MERGE_AGG_MAX)
			return true;
	return false;
}

char *merge_plan_shard_sql(const struct merge_plan *p, const char *sql, size_t len, size_t *outlen)
{
	/* the replacements, in text order: LIMIT, OFFSET, and the hidden
	 * columns (r[2], text in hidden) */
	struct { size_t at, len; char repl[64]; const char *text; size_t text_len; } r[3];
	int n = 0;
	char *hidden = NULL;
	size_t hidden_len = 0;
	if (p->n_hidden > 0) {
		size_t need = 1;
		for (int i = 0; i < p->n_hidden; i++) {
			if (p->hidden_arg_at[i] > len || p->hidden_arg_len[i] > len - p->hidden_arg_at[i])
				return NULL;
			need += 2 * p->hidden_arg_len[i] + sizeof ", pg_catalog.sum, pg_catalog.count";
		}
		if (!(hidden = malloc(need)))
			return NULL;
		for (int i = 0; i < p->n_hidden; i++) {
			int w = snprintf(hidden + hidden_len, need - hidden_len, ", pg_catalog.sum%.*s, pg_catalog.count%.*s",
					 (int)p->hidden_arg_len[i], sql + p->hidden_arg_at[i], (int)p->hidden_arg_len[i],
					 sql + p->hidden_arg_at[i]);
			if (w < 0 || (size_t)w >= need - hidden_len) {
				free(hidden);
				return NULL;
			}
			hidden_len += (size_t)w;
		}
		hidden[hidden_len++] = ' ';
		hidden[hidden_len] = '\0';
	}
	if (p->limit_len) {
		r[n].at = p->limit_at;
		r[n].len = p->limit_len;
		if (p->grouped)   /* no limit; a number is valid in LIMIT and FETCH FIRST alike */
			snprintf(r[n].repl, sizeof r[n].repl, "%" PRId64, INT64_MAX);
		else if (p->limit_param || p->offset_param) {
			/* parameters stay in the text (each one must be used); the
			 * values are not known to the plan (the Bind's) */
			char l[24], o[24];
			if (p->limit_param)
				snprintf(l, sizeof l, "$%d::bigint", p->limit_param);
			else
				snprintf(l, sizeof l, "%" PRId64, p->limit);
			if (p->offset_param)
				snprintf(o, sizeof o, "$%d::bigint", p->offset_param);
			else
				snprintf(o, sizeof o, "%" PRId64, p->has_offset ? p->offset : 0);
			snprintf(r[n].repl, sizeof r[n].repl, "(%s + %s)", l, o);
		} else
			snprintf(r[n].repl, sizeof r[n].repl, "%" PRId64, p->limit + (p->has_offset ? p->offset : 0));
		n++;
	}
	if (p->offset_len) {
		r[n].at = p->offset_at;
		r[n].len = p->offset_len;
		if (p->offset_param)
			snprintf(r[n].repl, sizeof r[n].repl, "(0 * $%d::bigint)", p->offset_param);
		else
			snprintf(r[n].repl, sizeof r[n].repl, "0");
		n++;
	}
	for (int i = 0; i < n; i++) {
		r[i].text = r[i].repl;
		r[i].text_len = strlen(r[i].repl);
	}
	if (hidden) {
		r[n].at = p->hidden_at;
		r[n].len = 0;
		r[n].text = hidden;
		r[n].text_len = hidden_len;
		n++;
	}
	for (int i = 1; i < n; i++)   /* (at most three) */
		for (int j = i; j > 0 && r[j - 1].at > r[j].at; j--) {
			__typeof__(r[0]) t = r[j];
			r[j] = r[j - 1];
			r[j - 1] = t;
			/* the texts point into the entries themselves */
			if (r[j].text != hidden)
				r[j].text = r[j].repl;
			if (r[j - 1].text != hidden)
				r[j - 1].text = r[j - 1].repl;
		}
	size_t cap = len + 1 + 2 * 64 + hidden_len, o = 0, from = 0;
	char *out = malloc(cap);
	if (!out) {
		free(hidden);
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		if (r[i].at < from || r[i].at + r[i].len > len) {
			free(out);
			free(hidden);
			return NULL;
		}
		memcpy(out + o, sql + from, r[i].at - from);
		o += r[i].at - from;
		memcpy(out + o, r[i].text, r[i].text_len);
		o += r[i].text_len;
		from = r[i].at + r[i].len;
	}
	free(hidden);
	memcpy(out + o, sql + from, len - from);
	o += len - from;
	out[o] = '\0';
	*outlen = o;
	return out;
}
