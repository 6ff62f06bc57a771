/* SPDX-License-Identifier: MIT */
/*
 * insert_split: one INSERT per shard out of a multi-row INSERT
 * (include/insert_split.h).
 */
#include "insert_split.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <pg_query.h>

#include "pgjson.h"
#include "sharding.h"
#include "shardkey.h"
#include "sqllex.h"

#define SPLIT_MAX_ROWS 100000

static bool refuse(char why[MERGE_WHY], const char *msg)
{
	snprintf(why, MERGE_WHY, "cross-shard write: %s", msg);
	return false;
}

/* ---- the text ---- */

/* The rows of the VALUES list at depth 0: [open, close] of each. */
static int find_rows(const char *s, size_t len, size_t *open, size_t *close, int cap)
{
	size_t i = 0;
	int depth = 0;
	while (i < len) {
		size_t j = sqllex_skip_quoted(s, len, i);
		if (j != i) {
			i = j;
			continue;
		}
		char ch = s[i];
		if (ch == '(')
			depth++;
		else if (ch == ')')
			depth--;
		else if (depth == 0 && (ch == 'v' || ch == 'V') && len - i >= 6 && strncasecmp(s + i, "values", 6) == 0 &&
			 (i == 0 || !(sqllex_is_ident_cont((unsigned char)s[i - 1]) || s[i - 1] == '"')) &&
			 (i + 6 == len || !sqllex_is_ident_cont((unsigned char)s[i + 6]))) {
			i += 6;
			break;
		}
		i++;
	}
	if (i >= len)
		return -1;
	int n = 0;
	for (;;) {
		i = sqllex_skip_blank(s, len, i);
		if (i >= len || s[i] != '(' || n == cap)
			return -1;
		open[n] = i;
		int d = 0;
		while (i < len) {
			size_t j = sqllex_skip_quoted(s, len, i);
			if (j != i) {
				i = j;
				continue;
			}
			if (s[i] == '(')
				d++;
			else if (s[i] == ')' && --d == 0)
				break;
			i++;
		}
		if (i >= len)
			return -1;
		close[n++] = i;
		i = sqllex_skip_blank(s, len, i + 1);
		if (i < len && s[i] == ',') {
			i++;
			continue;
		}
		return n;
	}
}

/* ---- the parse tree ---- */

/* The key's text from a row item: a constant, maybe cast or negated. */
static bool key_text(const struct jdoc *d, int item, const char *sql, size_t len, char *out, size_t cap)
{
	int tc = jnode(d, item, "TypeCast");
	if (tc != JNONE)
		item = jget(d, tc, "arg");
	int c = jnode(d, item, "A_Const");
	if (c == JNONE)
		return false;
	int sv = jget(d, c, "sval");
	if (sv != JNONE)
		return pgjson_str(d, jget(d, sv, "sval"), out, cap) >= 0;
	int fv = jget(d, c, "fval");
	if (fv != JNONE)
		return pgjson_str(d, jget(d, fv, "fval"), out, cap) >= 0;
	if (jget(d, c, "ival") == JNONE)
		return false;
	/* an integer: its text, as written (0 is "ival":{}) */
	long loc = pgjson_int(d, jget(d, c, "location"));
	if (loc < 0 || (size_t)loc >= len)
		return false;
	size_t p = (size_t)loc, q = p;
	if (q < len && sql[q] == '-')
		q++;
	while (q < len && isdigit((unsigned char)sql[q]))
		q++;
	if (q == p || q - p >= cap)
		return false;
	memcpy(out, sql + p, q - p);
	out[q - p] = '\0';
	return true;
}

static bool names_match(const char *a, const char *b) { return a && b && strcasecmp(a, b) == 0; }

/* Rewrites the $n of q[0..*len) to their rank among the parameters q
 * uses, in place (numbers only get shorter), and lists the old numbers in
 * ascending order. false: more parameters than fit. */
static bool renumber_params(char *q, size_t *len, uint16_t *old, uint16_t *n_old)
{
	/* which numbers appear */
	static const size_t max = 65536;
	uint8_t *used = calloc(max / 8, 1);
	if (!used)
		return false;
	size_t n = *len;
	for (size_t i = 0; i < n;) {
		size_t j = sqllex_skip_quoted(q, n, i);
		if (j != i) {
			i = j;
			continue;
		}
		if (q[i] == '$' && i + 1 < n && isdigit((unsigned char)q[i + 1]) &&
		    (i == 0 || !sqllex_is_ident_cont((unsigned char)q[i - 1]))) {
			unsigned long v = 0;
			j = i + 1;
			while (j < n && isdigit((unsigned char)q[j]) && v < max)
				v = v * 10 + (unsigned long)(q[j++] - '0');
			if (v > 0 && v < max)
				used[v / 8] |= (uint8_t)(1u << (v % 8));
			i = j;
			continue;
		}
		i++;
	}
	uint16_t rank_count = 0;
	for (size_t v = 1; v < max; v++)
		if (used[v / 8] & (1u << (v % 8)))
			old[rank_count++] = (uint16_t)v;
	*n_old = rank_count;
	/* rewrite: each $old becomes $rank, copying down */
	size_t w = 0;
	for (size_t i = 0; i < n;) {
		size_t j = sqllex_skip_quoted(q, n, i);
		if (j != i) {
			memmove(q + w, q + i, j - i);
			w += j - i;
			i = j;
			continue;
		}
		if (q[i] == '$' && i + 1 < n && isdigit((unsigned char)q[i + 1]) &&
		    (i == 0 || !sqllex_is_ident_cont((unsigned char)q[i - 1]))) {
			unsigned long v = 0;
			j = i + 1;
			while (j < n && isdigit((unsigned char)q[j]) && v < max)
				v = v * 10 + (unsigned long)(q[j++] - '0');
			unsigned rank = 0;
			for (uint16_t k = 0; k < rank_count; k++)
				if (old[k] == v)
					rank = k + 1u;
			char num[8];
			int nl = snprintf(num, sizeof num, "$%u", rank);
			memcpy(q + w, num, (size_t)nl);   /* never longer than $v */
			w += (size_t)nl;
			i = j;
			continue;
		}
		q[w++] = q[i++];
	}
	q[w] = '\0';
	*len = w;
	free(used);
	return true;
}

bool insert_split_build(const char *sql, size_t len, const struct router_rules *rules, enum sharding_function fn,
			int n_shards, const struct shardkey_bind *bind, struct insert_split *out, char why[MERGE_WHY])
{
	return insert_split_build_at(sql, len, rules, fn, n_shards, bind, -1, out, why);
}

bool insert_split_build_at(const char *sql, size_t len, const struct router_rules *rules, enum sharding_function fn,
			   int n_shards, const struct shardkey_bind *bind, int key_position, struct insert_split *out,
			   char why[MERGE_WHY])
{
	memset(out, 0, sizeof *out);
	out->n_shards = n_shards;
	why[0] = '\0';
	if (n_shards < 1 || n_shards > MERGE_MAX_SHARDS)
		return refuse(why, "too many shards");
	char *text = malloc(len + 1);
	if (!text)
		return refuse(why, "out of memory");
	memcpy(text, sql, len);
	text[len] = '\0';
	len = strlen(text);
	PgQueryParseResult r = pg_query_parse(text);
	struct jtok *toks = NULL;
	size_t *open = NULL, *close = NULL;
	int *shard_of = NULL;
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
		refuse(why, "several statements cannot be split across shards");
		goto out;
	}
	int ins = jnode(&d, jget(&d, first, "stmt"), "InsertStmt");
	if (ins == JNONE) {
		refuse(why, "the statement's sharding keys are missing or on several shards; use SET SHARD or SET "
			    "SHARDING KEY");
		goto out;
	}
	if (jget(&d, ins, "withClause") != JNONE) {
		refuse(why, "an INSERT with WITH cannot be split across shards");
		goto out;
	}
	/* the sharded table and the key's position in the column list */
	int rv = jget(&d, ins, "relation");
	char schema[64] = "", rel[64] = "";
	if (pgjson_str(&d, jget(&d, rv, "relname"), rel, sizeof rel) < 0) {
		refuse(why, "the table could not be read");
		goto out;
	}
	(void)pgjson_str(&d, jget(&d, rv, "schemaname"), schema, sizeof schema);
	const char *column = NULL;
	for (size_t i = 0; i < rules->n_sharded; i++) {
		const struct router_table *t = &rules->sharded[i];
		if (names_match(t->table, rel) && (!t->schema || !schema[0] || names_match(t->schema, schema))) {
			column = t->column;
			break;
		}
	}
	int cols = jget(&d, ins, "cols");
	int key_pos = -1, n_cols = 0;
	if (column && cols != JNONE && d.t[cols].type == J_ARR) {
		for (int e = cols + 1; e < (int)d.t[cols].after; e = (int)d.t[e].after, n_cols++) {
			char name[64];
			if (pgjson_str(&d, jget(&d, jnode(&d, e, "ResTarget"), "name"), name, sizeof name) >= 0 &&
			    names_match(name, column))
				key_pos = n_cols;
		}
	}
	if (key_pos < 0 && column && cols == JNONE && key_position >= 0)
		key_pos = key_position;   /* no column list: the table's own order */
	if (key_pos < 0) {
		if (column && cols == JNONE) {
			out->needs_position = true;
			snprintf(out->schema, sizeof out->schema, "%s", schema);
			snprintf(out->table, sizeof out->table, "%s", rel);
			snprintf(out->column, sizeof out->column, "%s", column);
		}
		refuse(why, "an INSERT into a sharded table needs a column list naming the sharding column to be split "
			    "across shards");
		goto out;
	}
	int sel = jnode(&d, jget(&d, ins, "selectStmt"), "SelectStmt");
	int vl = jget(&d, sel, "valuesLists");
	if (vl == JNONE || d.t[vl].type != J_ARR) {
		refuse(why, "only INSERT ... VALUES can be split across shards");
		goto out;
	}
	int n_rows = 0;
	for (int e = vl + 1; e < (int)d.t[vl].after; e = (int)d.t[e].after)
		n_rows++;
	if (n_rows < 1 || n_rows > SPLIT_MAX_ROWS) {
		refuse(why, "too many rows to split across shards");
		goto out;
	}
	open = malloc((size_t)n_rows * sizeof *open);
	close = malloc((size_t)n_rows * sizeof *close);
	shard_of = malloc((size_t)n_rows * sizeof *shard_of);
	if (!open || !close || !shard_of) {
		refuse(why, "out of memory");
		goto out;
	}
	if (find_rows(text, len, open, close, n_rows) != n_rows) {
		refuse(why, "the VALUES rows could not be told apart");
		goto out;
	}
	int row = 0;
	for (int e = vl + 1; e < (int)d.t[vl].after; e = (int)d.t[e].after, row++) {
		int items = jget(&d, jnode(&d, e, "List"), "items");
		int item = items == JNONE ? JNONE : items + 1, k = 0;
		while (item != JNONE && item < (int)d.t[items].after && k < key_pos) {
			item = (int)d.t[item].after;
			k++;
		}
		char key[ROUTER_KEY_TEXT], err[120];
		int pr = item == JNONE ? JNONE : jnode(&d, item, "ParamRef");
		if (pr != JNONE && bind) {
			/* $n: the bound value decides */
			long num = pgjson_int(&d, jget(&d, pr, "number"));
			const uint8_t *val;
			int32_t vlen;
			int16_t format;
			uint32_t oid = 0;
			if (num >= 1 && num <= bind->n_types)
				oid = (uint32_t)bind->types[4 * (num - 1)] << 24 | (uint32_t)bind->types[4 * (num - 1) + 1] << 16 |
				      (uint32_t)bind->types[4 * (num - 1) + 2] << 8 | bind->types[4 * (num - 1) + 3];
			if (num < 1 || num > 65535 || !shardkey_bind_param(bind->body, bind->len, (int)num, &val, &vlen, &format) ||
			    !shardkey_value_shard(fn, n_shards, val, vlen, format, oid, &shard_of[row])) {
				refuse(why, "a row's sharding key parameter is NULL or cannot be read");
				goto out;
			}
			continue;
		}
		if (item == JNONE || item >= (int)d.t[items].after || !key_text(&d, item, text, len, key, sizeof key)) {
			refuse(why, "every row's sharding key must be a constant or a parameter to split an INSERT across "
				    "shards");
			goto out;
		}
		if (!sharding_shard_for_key(fn, key, strlen(key), n_shards, &shard_of[row], err, sizeof err)) {
			snprintf(why, MERGE_WHY, "cross-shard write: %s", err);
			goto out;
		}
		/* the row's text must be where the tree says it is */
		long loc = pgjson_int(&d, jget(&d, jnode(&d, item, "A_Const"), "location"));
		if (loc >= 0 && ((size_t)loc < open[row] || (size_t)loc > close[row])) {
			refuse(why, "the VALUES rows could not be told apart");
			goto out;
		}
	}
	/* prefix, the shard's rows, suffix */
	size_t prefix = open[0], suffix_at = close[n_rows - 1] + 1;
	for (int s = 0; s < n_shards; s++) {
		size_t need = prefix + (len - suffix_at) + 1;
		unsigned cnt = 0;
		for (int i = 0; i < n_rows; i++)
			if (shard_of[i] == s) {
				need += close[i] - open[i] + 1 + 2;
				cnt++;
			}
		if (!cnt)
			continue;
		char *q = malloc(need);
		if (!q) {
			refuse(why, "out of memory");
			goto out;
		}
		size_t o = 0;
		memcpy(q, text, prefix);
		o = prefix;
		bool firstrow = true;
		for (int i = 0; i < n_rows; i++) {
			if (shard_of[i] != s)
				continue;
			if (!firstrow) {
				memcpy(q + o, ", ", 2);
				o += 2;
			}
			firstrow = false;
			memcpy(q + o, text + open[i], close[i] - open[i] + 1);
			o += close[i] - open[i] + 1;
		}
		memcpy(q + o, text + suffix_at, len - suffix_at);
		o += len - suffix_at;
		q[o] = '\0';
		out->sql[s] = q;
		if (bind) {
			out->params[s] = malloc(65535 * sizeof *out->params[s]);
			if (!out->params[s] || !renumber_params(q, &o, out->params[s], &out->n_params[s])) {
				refuse(why, "out of memory");
				goto out;
			}
		}
		out->len[s] = o;
		out->rows[s] = cnt;
	}
	ok = true;
out:
	if (!ok)
		insert_split_free(out);
	free(open);
	free(close);
	free(shard_of);
	free(toks);
	pg_query_free_parse_result(r);
	free(text);
	return ok;
}

void insert_split_free(struct insert_split *s)
{
	for (int i = 0; i < MERGE_MAX_SHARDS; i++) {
		free(s->sql[i]);
		free(s->params[i]);
		s->sql[i] = NULL;
		s->params[i] = NULL;
	}
}
