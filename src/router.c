/* SPDX-License-Identifier: MIT */
/*
 * router: reads a statement's meaning for routing from libpg_query's JSON
 * parse tree (read/write, transaction control, sharding keys), reads comment
 * hints and pgcat's own SET/SHOW statements, and caches verdicts by text.
 * It does not choose servers or shards and keeps no global state.
 *
 * libpg_query's JSON is walked with a small tokenizer of our own: one pass
 * builds a flat token array in document order (each token knows where its
 * subtree ends), so lookups need no recursion and no allocation per node.
 */
#include "router.h"

#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <pg_query.h>

#include "pgjson.h"
#include "sqllex.h"
#include "sqlshape.h"
#include "texthash.h"

/* ------------------------------------------------------------------ */
/* The walk over one query's statements                                 */

#define LEVEL_REFS 16
#define LEVEL_CONDS 16
#define MAX_EXPR_DEPTH 48
#define NAME_MAX_BYTES 64

/* A reference to a sharded table at one query level. */
struct ref {
	const struct router_table *tbl;
	char qual[NAME_MAX_BYTES];     /* the alias, or the table's name */
	char schema[NAME_MAX_BYTES];   /* "" when not written */
	bool aliased;
	bool constrained;
	bool never;                    /* cannot be constrained (UPDATE assigns its key) */
};

/* One query level (a SELECT, UPDATE, DELETE): its sharded references and the
 * conditions that must hold for every row it touches. */
struct level {
	struct ref refs[LEVEL_REFS];
	size_t n_refs;
	int conds[LEVEL_CONDS];
	size_t n_conds;
};

struct walk {
	struct jdoc d;
	const char *sql;               /* the parsed text, for literals the JSON loses */
	size_t sql_len;
	const struct router_rules *rules;
	struct router_verdict *v;
	unsigned sharded;              /* sharded references seen in DML */
	unsigned constrained;          /* ... of which constrained by a key */
	bool overflow;                 /* more keys than fit */
};

static const struct router_table *sharded_table(const struct walk *w, const char *schema, const char *rel)
{
	for (size_t i = 0; i < w->rules->n_sharded; i++) {
		const struct router_table *tb = &w->rules->sharded[i];
		if (!tb->table || !tb->column || strcasecmp(tb->table, rel) != 0)
			continue;
		if (tb->schema && schema[0] && strcasecmp(tb->schema, schema) != 0)
			continue;
		return tb;
	}
	return NULL;
}

/* rv: a RangeVar's fields. Fills r and returns true if it names a sharded table. */
static bool range_var(const struct walk *w, int rv, struct ref *r)
{
	const struct jdoc *d = &w->d;
	char rel[NAME_MAX_BYTES];
	if (pgjson_str(d, jget(d, rv, "relname"), rel, sizeof(rel)) < 0)
		return false;
	/* A name that cannot be read (PostgreSQL truncates identifiers to
	 * 63 bytes, so never in practice) matches nothing, but a sharded table
	 * is still counted as one. */
	r->schema[0] = '\0';
	int sv = jget(d, rv, "schemaname");
	if (sv != JNONE && pgjson_str(d, sv, r->schema, sizeof(r->schema)) < 0)
		strcpy(r->schema, "\x01");
	r->tbl = sharded_table(w, r->schema, rel);
	if (!r->tbl)
		return false;
	int alias = jget(d, jget(d, rv, "alias"), "aliasname");
	r->aliased = alias != JNONE;
	if (r->aliased) {
		if (pgjson_str(d, alias, r->qual, sizeof(r->qual)) < 0)
			r->qual[0] = '\0';
	} else {
		memcpy(r->qual, rel, sizeof(rel));
	}
	r->constrained = false;
	r->never = false;
	return true;
}

static void count_sharded(struct walk *w)
{
	w->sharded++;
	w->v->reads_sharded = true;
}

/* Adds rv to the level if it is sharded; count: a bare RangeVar (a DML
 * target) that the generic walk does not see. */
static struct ref *level_add(struct walk *w, struct level *L, int rv, bool count)
{
	struct ref r;
	if (!range_var(w, rv, &r))
		return NULL;
	if (count)
		count_sharded(w);
	if (L->n_refs == LEVEL_REFS)
		return NULL;      /* stays unconstrained: conservative */
	L->refs[L->n_refs] = r;
	return &L->refs[L->n_refs++];
}

static void level_cond(struct level *L, int e)
{
	if (e != JNONE && L->n_conds < LEVEL_CONDS)
		L->conds[L->n_conds++] = e;
}

static void collect_from(struct walk *w, struct level *L, int item, int depth)
{
	const struct jdoc *d = &w->d;
	int x;
	if (depth > MAX_EXPR_DEPTH)
		return;
	if ((x = jnode(d, item, "RangeVar")) != JNONE) {
		level_add(w, L, x, false);
	} else if ((x = jnode(d, item, "JoinExpr")) != JNONE) {
		collect_from(w, L, jget(d, x, "larg"), depth + 1);
		collect_from(w, L, jget(d, x, "rarg"), depth + 1);
		if (pgjson_str_is(d, jget(d, x, "jointype"), "JOIN_INNER", false))
			level_cond(L, jget(d, x, "quals"));
	} else if ((x = jnode(d, item, "RangeTableSample")) != JNONE) {
		collect_from(w, L, jget(d, x, "relation"), depth + 1);
	}
}

static void collect_from_list(struct walk *w, struct level *L, int list)
{
	const struct jdoc *d = &w->d;
	if (!pgjson_valid(d, list) || d->t[list].type != J_ARR)
		return;
	for (int c = list + 1; c < (int)d->t[list].after; c = (int)d->t[c].after)
		collect_from(w, L, c, 0);
}

/* Does expression e name the sharding column of r? */
static bool colref_is(const struct walk *w, const struct ref *r, int e)
{
	const struct jdoc *d = &w->d;
	int fields = jget(d, jnode(d, e, "ColumnRef"), "fields");
	if (!pgjson_valid(d, fields) || d->t[fields].type != J_ARR)
		return false;
	char f[3][NAME_MAX_BYTES];
	int n = 0;
	for (int c = fields + 1; c < (int)d->t[fields].after; c = (int)d->t[c].after) {
		if (n == 3 || pgjson_str(d, pgjson_string_node(d, c), f[n], sizeof(f[n])) < 0)
			return false;    /* A_Star, db.schema.table.col */
		n++;
	}
	if (n == 0 || strcasecmp(f[n - 1], r->tbl->column) != 0)
		return false;
	if (n == 1)
		return true;
	if (strcasecmp(f[n - 2], r->qual) != 0)
		return false;
	if (n == 2)
		return true;
	return !r->aliased && (r->schema[0] == '\0' || strcasecmp(f[0], r->schema) == 0) &&
	       (!r->tbl->schema || strcasecmp(f[0], r->tbl->schema) == 0);
}

static bool is_ident_char(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '$' || (unsigned char)c >= 0x80;
}

/* libpg_query's JSON writes an integer constant of 0 or below as "ival":{};
 * read it back from the text at its location (the '-' sign, if any). */
static bool int_from_text(const struct walk *w, int loc_tok, char *out, size_t cap)
{
	long loc = pgjson_int(&w->d, loc_tok);
	if (loc < 0 || (size_t)loc >= w->sql_len)
		return false;
	const char *p = w->sql + loc, *e = w->sql + w->sql_len;
	size_t o = 0;
	bool neg = *p == '-';
	if (neg) {
		out[o++] = '-';
		p++;
		while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v'))
			p++;
	}
	const char *digits = p;
	bool nonzero = false;
	while (p < e && *p >= '0' && *p <= '9') {
		if (o + 1 >= cap)
			return false;
		nonzero |= *p != '0';
		out[o++] = *p++;
	}
	if (p == digits || (p < e && (is_ident_char(*p) || *p == '.')) || (nonzero && !neg))
		return false;
	out[o] = '\0';
	return true;
}

/* A constant or a $n (through casts): the key it gives. */
static bool key_value(const struct walk *w, int e, int depth, struct router_key *k)
{
	const struct jdoc *d = &w->d;
	int x;
	memset(k, 0, sizeof(*k));
	if ((x = jnode(d, e, "ParamRef")) != JNONE) {
		long n = pgjson_int(d, jget(d, x, "number"));
		if (n <= 0 || n > INT_MAX)
			return false;
		k->param = (int)n;
		return true;
	}
	if ((x = jnode(d, e, "TypeCast")) != JNONE)
		return depth < 4 && key_value(w, jget(d, x, "arg"), depth + 1, k);
	if ((x = jnode(d, e, "A_Const")) == JNONE)
		return false;
	int y;
	if ((y = jget(d, x, "ival")) != JNONE) {
		int z = jget(d, y, "ival");
		if (z == JNONE)
			return int_from_text(w, jget(d, x, "location"), k->text, sizeof(k->text));
		const struct jtok *zt = &d->t[z];
		size_t n = zt->end - zt->start;
		if (zt->type != J_PRIM || n == 0 || n >= sizeof(k->text))
			return false;
		memcpy(k->text, d->s + zt->start, n);
		return true;
	}
	if ((y = jget(d, x, "fval")) != JNONE)
		return pgjson_str(d, jget(d, y, "fval"), k->text, sizeof(k->text)) > 0;
	if ((y = jget(d, x, "sval")) != JNONE) {
		int z = jget(d, y, "sval");
		return z == JNONE || pgjson_str(d, z, k->text, sizeof(k->text)) >= 0;
	}
	return false;     /* boolean, bit string, NULL */
}

static void add_key(struct walk *w, const struct router_key *k)
{
	struct router_verdict *v = w->v;
	for (size_t i = 0; i < v->n_keys; i++)
		if (v->keys[i].param == k->param && strcmp(v->keys[i].text, k->text) == 0)
			return;
	if (v->n_keys == ROUTER_MAX_KEYS) {
		w->overflow = true;
		return;
	}
	v->keys[v->n_keys++] = *k;
}

/* The last element of an operator name list, if it is "=" (optionally
 * OPERATOR(pg_catalog.=)). */
static bool is_eq_op(const struct jdoc *d, int name)
{
	if (!pgjson_valid(d, name) || d->t[name].type != J_ARR)
		return false;
	int n = 0, last = JNONE, first = JNONE;
	for (int c = name + 1; c < (int)d->t[name].after; c = (int)d->t[c].after) {
		if (n == 0)
			first = c;
		last = c;
		n++;
	}
	if (n == 2 && !pgjson_str_is(d, pgjson_string_node(d, first), "pg_catalog", false))
		return false;
	return (n == 1 || n == 2) && pgjson_str_is(d, pgjson_string_node(d, last), "=", false);
}

/* Does e hold for every row only if r's key is one of the keys it adds?
 * Adds nothing when it returns false. */
static bool constrain(struct walk *w, const struct ref *r, int e, int depth)
{
	const struct jdoc *d = &w->d;
	int x;
	if (depth > MAX_EXPR_DEPTH)
		return false;
	if ((x = jnode(d, e, "BoolExpr")) != JNONE) {
		int op = jget(d, x, "boolop"), args = jget(d, x, "args");
		if (!pgjson_valid(d, args) || d->t[args].type != J_ARR)
			return false;
		if (pgjson_str_is(d, op, "AND_EXPR", false)) {
			for (int c = args + 1; c < (int)d->t[args].after; c = (int)d->t[c].after)
				if (constrain(w, r, c, depth + 1))
					return true;
			return false;
		}
		if (pgjson_str_is(d, op, "OR_EXPR", false)) {
			size_t saved = w->v->n_keys;
			bool saved_overflow = w->overflow, any = false;
			for (int c = args + 1; c < (int)d->t[args].after; c = (int)d->t[c].after) {
				if (!constrain(w, r, c, depth + 1)) {
					w->v->n_keys = saved;
					w->overflow = saved_overflow;
					return false;
				}
				any = true;
			}
			return any;
		}
		return false;
	}
	if ((x = jnode(d, e, "A_Expr")) == JNONE || !is_eq_op(d, jget(d, x, "name")))
		return false;
	int kind = jget(d, x, "kind"), l = jget(d, x, "lexpr"), rr = jget(d, x, "rexpr");
	struct router_key k;
	if (pgjson_str_is(d, kind, "AEXPR_OP", false)) {
		if ((colref_is(w, r, l) && key_value(w, rr, 0, &k)) || (colref_is(w, r, rr) && key_value(w, l, 0, &k))) {
			add_key(w, &k);
			return true;
		}
		return false;
	}
	if (pgjson_str_is(d, kind, "AEXPR_IN", false) && colref_is(w, r, l)) {
		int items = jget(d, jnode(d, rr, "List"), "items");
		if (!pgjson_valid(d, items) || d->t[items].type != J_ARR || d->t[items].after == (uint32_t)items + 1)
			return false;
		for (int c = items + 1; c < (int)d->t[items].after; c = (int)d->t[c].after)
			if (!key_value(w, c, 0, &k))
				return false;
		for (int c = items + 1; c < (int)d->t[items].after; c = (int)d->t[c].after) {
			key_value(w, c, 0, &k);
			add_key(w, &k);
		}
		return true;
	}
	return false;
}

/* Gathers the `x = y` conjuncts of e with a column on each side. */
static void column_equalities(const struct jdoc *d, int e, int depth, int *eqs, size_t *n, size_t cap)
{
	int x;
	if (depth > MAX_EXPR_DEPTH || *n == cap)
		return;
	if ((x = jnode(d, e, "BoolExpr")) != JNONE) {
		int args = jget(d, x, "args");
		if (!pgjson_str_is(d, jget(d, x, "boolop"), "AND_EXPR", false) || !pgjson_valid(d, args) ||
		    d->t[args].type != J_ARR)
			return;
		for (int c = args + 1; c < (int)d->t[args].after; c = (int)d->t[c].after)
			column_equalities(d, c, depth + 1, eqs, n, cap);
		return;
	}
	if ((x = jnode(d, e, "A_Expr")) != JNONE && pgjson_str_is(d, jget(d, x, "kind"), "AEXPR_OP", false) &&
	    is_eq_op(d, jget(d, x, "name")) && jnode(d, jget(d, x, "lexpr"), "ColumnRef") != JNONE &&
	    jnode(d, jget(d, x, "rexpr"), "ColumnRef") != JNONE)
		eqs[(*n)++] = x;
}

static int ref_of(const struct walk *w, const struct level *L, int e)
{
	for (size_t i = 0; i < L->n_refs; i++)
		if (colref_is(w, &L->refs[i], e))
			return (int)i;
	return -1;
}

static void level_finish(struct walk *w, struct level *L)
{
	const struct jdoc *d = &w->d;
	if (L->n_refs == 0)
		return;
	for (size_t i = 0; i < L->n_refs; i++) {
		struct ref *r = &L->refs[i];
		for (size_t c = 0; c < L->n_conds && !r->never && !r->constrained; c++)
			r->constrained = constrain(w, r, L->conds[c], 0);
	}
	/* a.key = b.key joins a constrained reference to another */
	if (L->n_refs > 1) {
		int eqs[32];
		size_t n = 0;
		for (size_t c = 0; c < L->n_conds; c++)
			column_equalities(d, L->conds[c], 0, eqs, &n, 32);
		for (bool changed = true; changed;) {
			changed = false;
			for (size_t q = 0; q < n; q++) {
				int a = ref_of(w, L, jget(d, eqs[q], "lexpr")), b = ref_of(w, L, jget(d, eqs[q], "rexpr"));
				if (a < 0 || b < 0 || a == b)
					continue;
				struct ref *ra = &L->refs[a], *rb = &L->refs[b];
				if (ra->constrained != rb->constrained && !ra->never && !rb->never) {
					ra->constrained = rb->constrained = true;
					changed = true;
				}
			}
		}
	}
	for (size_t i = 0; i < L->n_refs; i++)
		if (L->refs[i].constrained)
			w->constrained++;
}

static void level_select(struct walk *w, int x)
{
	struct level L = { .n_refs = 0 };
	collect_from_list(w, &L, jget(&w->d, x, "fromClause"));
	if (L.n_refs == 0)
		return;
	level_cond(&L, jget(&w->d, x, "whereClause"));
	level_finish(w, &L);
}

/* UPDATE (from_key "fromClause") or DELETE ("usingClause"). */
static void level_modify(struct walk *w, int x, const char *from_key, bool update)
{
	const struct jdoc *d = &w->d;
	struct level L = { .n_refs = 0 };
	struct ref *target = level_add(w, &L, jget(d, x, "relation"), true);
	if (target && update) {
		int tl = jget(d, x, "targetList");
		for (int c = pgjson_valid(d, tl) ? tl + 1 : 0; pgjson_valid(d, tl) && c < (int)d->t[tl].after; c = (int)d->t[c].after)
			if (pgjson_str_is(d, jget(d, jnode(d, c, "ResTarget"), "name"), target->tbl->column, true))
				target->never = true;
	}
	collect_from_list(w, &L, pgjson_get_n(d, x, from_key, strlen(from_key)));
	level_cond(&L, jget(d, x, "whereClause"));
	level_finish(w, &L);
}

static void level_insert(struct walk *w, int x)
{
	const struct jdoc *d = &w->d;
	struct ref r;
	if (!range_var(w, jget(d, x, "relation"), &r))
		return;
	count_sharded(w);
	int cols = jget(d, x, "cols"), col = -1, n = 0;
	if (!pgjson_valid(d, cols) || d->t[cols].type != J_ARR) {
		/* no column list: the values in the table's own column order */
		if (!r.tbl->positioned) {
			w->v->insert_unplaced = true;
			w->v->insert_table = (uint8_t)(r.tbl - w->rules->sharded);
			return;
		}
		col = r.tbl->position;
	}
	for (int c = col < 0 ? cols + 1 : 0; col < 0 && c < (int)d->t[cols].after; c = (int)d->t[c].after, n++) {
		int rt = jnode(d, c, "ResTarget");
		if (jget(d, rt, "indirection") == JNONE && pgjson_str_is(d, jget(d, rt, "name"), r.tbl->column, true)) {
			col = n;
			break;
		}
	}
	int rows = jget(d, jnode(d, jget(d, x, "selectStmt"), "SelectStmt"), "valuesLists");
	if (col < 0 || !pgjson_valid(d, rows) || d->t[rows].type != J_ARR || d->t[rows].after == (uint32_t)rows + 1)
		return;
	size_t saved = w->v->n_keys;
	bool saved_overflow = w->overflow;
	for (int row = rows + 1; row < (int)d->t[rows].after; row = (int)d->t[row].after) {
		int items = jget(d, jnode(d, row, "List"), "items"), item = JNONE;
		if (pgjson_valid(d, items) && d->t[items].type == J_ARR) {
			int i = 0;
			for (int c = items + 1; c < (int)d->t[items].after; c = (int)d->t[c].after, i++) {
				if (i == col) {
					item = c;
					break;
				}
			}
		}
		struct router_key k;
		if (item == JNONE || !key_value(w, item, 0, &k)) {
			w->v->n_keys = saved;
			w->overflow = saved_overflow;
			return;
		}
		add_key(w, &k);
	}
	w->constrained++;
}

/* ------------------------------------------------------------------ */
/* Writing functions                                                    */

static const char *const builtin_writers[] = {
	"nextval", "setval", "pg_advisory_*", "pg_try_advisory_*", "pg_notify", "txid_current",
	"pg_current_xact_id", "lo_*", "lowrite", "pg_logical_emit_message",
};

static bool name_matches(const char *name, const char *pattern)
{
	const char *dot = strrchr(pattern, '.');
	if (dot)
		pattern = dot + 1;
	size_t pl = strlen(pattern);
	if (pl > 0 && pattern[pl - 1] == '*')
		return strncasecmp(name, pattern, pl - 1) == 0;
	return strcasecmp(name, pattern) == 0;
}

/* Built-in functions known to write nothing: a read calling only these
 * (unqualified or in pg_catalog) is one the write pause of a reshard's
 * cutover lets through (calls_unknown). Any other function might write;
 * a guess there would put a row on a layout about to be left. */
static const char *const builtin_readers[] = {
	"count", "sum", "avg", "min", "max", "array_agg", "string_agg", "json_agg", "jsonb_agg", "bool_and",
	"bool_or", "every", "now", "clock_timestamp", "statement_timestamp", "transaction_timestamp", "lower",
	"upper", "length", "char_length", "octet_length", "substr", "substring", "trim", "btrim", "ltrim",
	"rtrim", "concat", "concat_ws", "replace", "left", "right", "strpos", "position", "format", "abs",
	"round", "floor", "ceil", "ceiling", "trunc", "date_trunc", "date_part", "extract", "to_char",
	"to_date", "to_timestamp", "to_number", "md5", "row_number", "rank", "dense_rank", "lag", "lead",
	"first_value", "last_value", "generate_series", "unnest", "array_length", "cardinality",
	"json_build_object", "jsonb_build_object", "json_build_array", "jsonb_build_array", "row_to_json",
	"to_json", "to_jsonb", "current_setting", "version", "pg_backend_pid", "random", "gen_random_uuid",
	"pg_is_in_recovery", "pg_last_wal_replay_lsn", "pg_current_wal_lsn",
};

/* What a FuncCall is: a writer (builtin_writers, writing_functions), a
 * known reader, or neither. */
enum func_kind { FUNC_WRITES, FUNC_READS, FUNC_UNKNOWN };

static enum func_kind function_kind(const struct walk *w, int fc)
{
	const struct jdoc *d = &w->d;
	int names = jget(d, fc, "funcname"), last = JNONE, n = 0;
	if (!pgjson_valid(d, names) || d->t[names].type != J_ARR)
		return FUNC_UNKNOWN;
	for (int c = names + 1; c < (int)d->t[names].after; c = (int)d->t[c].after) {
		last = c;
		n++;
	}
	char name[NAME_MAX_BYTES];
	if (pgjson_str(d, pgjson_string_node(d, last), name, sizeof(name)) < 0)
		return FUNC_UNKNOWN;
	for (size_t i = 0; i < sizeof(builtin_writers) / sizeof(builtin_writers[0]); i++)
		if (name_matches(name, builtin_writers[i]))
			return FUNC_WRITES;
	for (size_t i = 0; i < w->rules->n_writing_functions; i++)
		if (w->rules->writing_functions[i] && name_matches(name, w->rules->writing_functions[i]))
			return FUNC_WRITES;
	if (n > 2)
		return FUNC_UNKNOWN;
	if (n == 2) {
		if (!pgjson_str_is(d, pgjson_string_node(d, names + 1), "pg_catalog", false))
			return FUNC_UNKNOWN;
	}
	for (size_t i = 0; i < sizeof(builtin_readers) / sizeof(builtin_readers[0]); i++)
		if (strcasecmp(name, builtin_readers[i]) == 0)
			return FUNC_READS;
	return FUNC_UNKNOWN;
}

/* ------------------------------------------------------------------ */
/* Statements                                                           */

#define key_is(d, k, name) key_is_n(d, k, name, sizeof("" name) - 1)
static bool key_is_n(const struct jdoc *d, int k, const char *name, size_t nl)
{
	return d->t[k].end - d->t[k].start == nl && memcmp(d->s + d->t[k].start, name, nl) == 0;
}

/* Walks every node of a DML subtree: writes (when detect_writes), sharded
 * references, and each query level's keys. */
static void walk_dml(struct walk *w, int root, bool detect_writes)
{
	const struct jdoc *d = &w->d;
	if (!pgjson_valid(d, root))
		return;
	for (int i = root; i < (int)d->t[root].after; i++) {
		const struct jtok *kt = &d->t[i];
		if (kt->type != J_KEY || i + 1 >= (int)kt->after)
			continue;
		if (key_is(d, i, "lockingClause") || key_is(d, i, "intoClause")) {
			/* FOR UPDATE/SHARE, SELECT INTO; its names are not table reads */
			if (detect_writes)
				w->v->writes = true;
			i = (int)kt->after - 1;
			continue;
		}
		char c0 = d->s[kt->start];
		int x = i + 1;
		if (d->t[x].type != J_OBJ)
			continue;
		if (key_is(d, i, "larg") || key_is(d, i, "rarg")) {
			/* a set operation's branches are bare SelectStmts (a JoinExpr's
			 * are wrapped nodes, and start with an upper-case key) */
			char v0 = x + 1 < (int)d->t[x].after ? d->s[d->t[x + 1].start] : 'A';
			if (!(v0 >= 'A' && v0 <= 'Z'))
				level_select(w, x);
			continue;
		}
		if (!(c0 >= 'A' && c0 <= 'Z'))
			continue;
		if (key_is(d, i, "SelectStmt")) {
			level_select(w, x);
		} else if (key_is(d, i, "InsertStmt")) {
			w->v->writes |= detect_writes;
			level_insert(w, x);
		} else if (key_is(d, i, "UpdateStmt")) {
			w->v->writes |= detect_writes;
			level_modify(w, x, "fromClause", true);
		} else if (key_is(d, i, "DeleteStmt")) {
			w->v->writes |= detect_writes;
			level_modify(w, x, "usingClause", false);
		} else if (key_is(d, i, "MergeStmt")) {
			struct ref r;
			w->v->writes |= detect_writes;
			if (range_var(w, jget(d, x, "relation"), &r))
				count_sharded(w);
		} else if (key_is(d, i, "RangeVar")) {
			struct ref r;
			if (range_var(w, x, &r))
				count_sharded(w);
		} else if (key_is(d, i, "FuncCall")) {
			if (detect_writes) {
				enum func_kind k = function_kind(w, x);
				w->v->writes |= k == FUNC_WRITES;
				w->v->calls_unknown |= k == FUNC_UNKNOWN;
			}
		}
	}
}

/* EXPLAIN's ANALYZE option: present and not turned off. */
static bool explain_analyze(const struct jdoc *d, int opts)
{
	if (!pgjson_valid(d, opts) || d->t[opts].type != J_ARR)
		return false;
	for (int c = opts + 1; c < (int)d->t[opts].after; c = (int)d->t[c].after) {
		int de = jnode(d, c, "DefElem");
		if (!pgjson_str_is(d, jget(d, de, "defname"), "analyze", true))
			continue;
		int arg = jget(d, de, "arg"), s, a;
		if (arg == JNONE)
			return true;
		if ((s = pgjson_string_node(d, arg)) != JNONE)
			return !(pgjson_str_is(d, s, "false", true) || pgjson_str_is(d, s, "off", true) ||
				 pgjson_str_is(d, s, "no", true) || pgjson_str_is(d, s, "0", true));
		if ((a = jnode(d, arg, "A_Const")) != JNONE) {
			int iv = jget(d, a, "ival"), bv = jget(d, a, "boolval");
			if ((iv != JNONE && jget(d, iv, "ival") == JNONE) || (bv != JNONE && jget(d, bv, "boolval") == JNONE))
				return false;
		}
		/* an option's number is a bare Integer node: ANALYZE 0 is off */
		if ((a = jnode(d, arg, "Integer")) != JNONE && jget(d, a, "ival") == JNONE)
			return false;
		return true;
	}
	return false;
}

static void statement_transaction(struct walk *w, int x)
{
	const struct jdoc *d = &w->d;
	struct router_verdict *v = w->v;
	int kind = jget(d, x, "kind");
	if (pgjson_str_is(d, kind, "TRANS_STMT_BEGIN", false) || pgjson_str_is(d, kind, "TRANS_STMT_START", false)) {
		bool ro = false;
		int opts = jget(d, x, "options");
		for (int c = pgjson_valid(d, opts) ? opts + 1 : 0; pgjson_valid(d, opts) && c < (int)d->t[opts].after;
		     c = (int)d->t[c].after) {
			int de = jnode(d, c, "DefElem");
			if (!pgjson_str_is(d, jget(d, de, "defname"), "transaction_read_only", false))
				continue;
			long on = pgjson_int(d, jget(d, jget(d, jnode(d, jget(d, de, "arg"), "A_Const"), "ival"), "ival"));
			ro = on == 1;
		}
		v->begins = true;
		v->begin_read_only = ro;
		v->writes |= !ro;
	} else if (pgjson_str_is(d, kind, "TRANS_STMT_COMMIT", false) || pgjson_str_is(d, kind, "TRANS_STMT_ROLLBACK", false) ||
		   pgjson_str_is(d, kind, "TRANS_STMT_PREPARE", false)) {
		v->ends = true;
	} else if (pgjson_str_is(d, kind, "TRANS_STMT_SAVEPOINT", false) || pgjson_str_is(d, kind, "TRANS_STMT_RELEASE", false) ||
		   pgjson_str_is(d, kind, "TRANS_STMT_ROLLBACK_TO", false)) {
		/* inside the transaction, wherever it is */
	} else {
		v->writes = true;     /* COMMIT/ROLLBACK PREPARED, unknown */
	}
}

/* Utility statements that run anywhere (a hot standby too) and write nothing. */
static const char *const neutral_statements[] = {
	"VariableShowStmt", "VariableSetStmt", "DiscardStmt", "DeallocateStmt", "UnlistenStmt",
	"LoadStmt", "FetchStmt", "ClosePortalStmt", "ConstraintsSetStmt",
};

static void statement(struct walk *w, int node)
{
	const struct jdoc *d = &w->d;
	int x;
	if ((x = jnode(d, node, "SelectStmt")) != JNONE || (x = jnode(d, node, "InsertStmt")) != JNONE ||
	    (x = jnode(d, node, "UpdateStmt")) != JNONE || (x = jnode(d, node, "DeleteStmt")) != JNONE ||
	    (x = jnode(d, node, "MergeStmt")) != JNONE) {
		walk_dml(w, node, true);
	} else if ((x = jnode(d, node, "ExplainStmt")) != JNONE) {
		walk_dml(w, jget(d, x, "query"), explain_analyze(d, jget(d, x, "options")));
	} else if ((x = jnode(d, node, "DeclareCursorStmt")) != JNONE || (x = jnode(d, node, "PrepareStmt")) != JNONE) {
		walk_dml(w, jget(d, x, "query"), true);
	} else if ((x = jnode(d, node, "CopyStmt")) != JNONE) {
		struct ref r;
		int from = jget(d, x, "is_from");
		if (pgjson_valid(d, from) && d->t[from].type == J_PRIM && d->s[d->t[from].start] == 't')
			w->v->writes = true;
		if (range_var(w, jget(d, x, "relation"), &r))
			count_sharded(w);
		walk_dml(w, jget(d, x, "query"), true);
	} else if ((x = jnode(d, node, "TransactionStmt")) != JNONE) {
		statement_transaction(w, x);
	} else {
		for (size_t i = 0; i < sizeof(neutral_statements) / sizeof(neutral_statements[0]); i++)
			if (pgjson_node_n(d, node, neutral_statements[i], strlen(neutral_statements[i])) != JNONE)
				return;
		w->v->writes = true;
	}
}

/* Fills the verdict from libpg_query's JSON; false if the JSON is not understood. */
static bool analyse(const char *json, const char *sql, size_t sql_len, const struct router_rules *rules,
		    struct router_verdict *v)
{
	enum { STACK_TOKENS = 512 };
	struct jtok stack_tokens[STACK_TOKENS];
	size_t jlen = strlen(json);
	size_t cap = jlen / 2 + 2;    /* every token but the first follows one of { [ , : */
	struct jtok *t = stack_tokens;
	if (cap > STACK_TOKENS) {
		if (cap > SIZE_MAX / sizeof(*t) || !(t = malloc(cap * sizeof(*t))))
			return false;
	} else {
		cap = STACK_TOKENS;
	}
	struct walk w = { .d = { .s = json, .t = t }, .sql = sql, .sql_len = sql_len, .rules = rules, .v = v };
	bool ok = pgjson_parse(json, jlen, t, cap, &w.d.n) && w.d.n > 0 && t[0].type == J_OBJ;
	if (ok) {
		int stmts = jget(&w.d, 0, "stmts");
		size_t n = 0;
		v->writes = false;
		if (pgjson_valid(&w.d, stmts) && w.d.t[stmts].type == J_ARR) {
			for (int c = stmts + 1; c < (int)w.d.t[stmts].after; c = (int)w.d.t[c].after, n++)
				statement(&w, jget(&w.d, c, "stmt"));
		}
		v->multi_statement = n > 1;
		v->keys_complete = w.sharded > 0 && w.constrained == w.sharded && !w.overflow && v->n_keys > 0;
	}
	if (t != stack_tokens)
		free(t);
	return ok;
}

/* ------------------------------------------------------------------ */
/* Comment hints                                                        */

static bool sql_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool router_role_parse(const char *s, size_t len, enum router_role *out)
{
	static const struct { const char *name; enum router_role role; } roles[] = {
		{ "primary", ROUTER_ROLE_PRIMARY }, { "replica", ROUTER_ROLE_REPLICA }, { "any", ROUTER_ROLE_ANY },
		{ "auto", ROUTER_ROLE_NONE }, { "default", ROUTER_ROLE_NONE },
	};
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
		if (strlen(roles[i].name) == len && strncasecmp(s, roles[i].name, len) == 0) {
			*out = roles[i].role;
			return true;
		}
	}
	return false;
}

static void hint_apply(struct router_verdict *v, const char *name, size_t nl, const char *val, size_t vl)
{
	if (nl == 5 && strncasecmp(name, "shard", 5) == 0) {
		int shard = 0;
		if (vl == 0 || vl > 9) {
			v->hint_invalid = true;
			return;
		}
		for (size_t i = 0; i < vl; i++) {
			if (val[i] < '0' || val[i] > '9') {
				v->hint_invalid = true;
				return;
			}
			shard = shard * 10 + (val[i] - '0');
		}
		v->hint_shard = shard;
	} else if (nl == 12 && strncasecmp(name, "sharding_key", 12) == 0) {
		if (vl == 0 || vl >= sizeof(v->hint_key) || memchr(val, '\0', vl)) {
			v->hint_invalid = true;
			return;
		}
		memcpy(v->hint_key, val, vl);
		v->hint_key[vl] = '\0';
		v->has_hint_key = true;
	} else if (nl == 4 && strncasecmp(name, "role", 4) == 0) {
		enum router_role role;
		if (router_role_parse(val, vl, &role))
			v->hint_role = role;
	}
}

/* A leading `/ * pgcat: name=value ... * /` comment. */
static void parse_hints(const char *s, size_t len, struct router_verdict *v)
{
	size_t i = 0;
	while (i < len && sql_space(s[i]))
		i++;
	if (len - i < 4 || s[i] != '/' || s[i + 1] != '*')
		return;
	const char *b = s + i + 2, *e = NULL;
	for (const char *p = b; p + 1 < s + len; p++) {
		if (p[0] == '*' && p[1] == '/') {
			e = p;
			break;
		}
	}
	if (!e)
		return;
	while (b < e && sql_space(*b))
		b++;
	if (e - b < 5 || strncasecmp(b, "pgcat", 5) != 0)
		return;
	b += 5;
	while (b < e && sql_space(*b))
		b++;
	if (b == e || *b != ':')
		return;
	b++;
	for (;;) {
		while (b < e && (sql_space(*b) || *b == ','))
			b++;
		if (b == e)
			return;
		const char *name = b;
		while (b < e && (isalnum((unsigned char)*b) || *b == '_'))
			b++;
		size_t nl = (size_t)(b - name);
		while (b < e && sql_space(*b))
			b++;
		if (nl == 0 || b == e || *b != '=')
			return;
		b++;
		while (b < e && sql_space(*b))
			b++;
		const char *val = b;
		size_t vl;
		if (b < e && (*b == '\'' || *b == '"')) {
			char q = *b++;
			val = b;
			while (b < e && *b != q)
				b++;
			if (b == e)
				return;
			vl = (size_t)(b - val);
			b++;
		} else {
			while (b < e && !sql_space(*b) && *b != ',')
				b++;
			vl = (size_t)(b - val);
		}
		hint_apply(v, name, nl, val, vl);
	}
}

/* ------------------------------------------------------------------ */
/* Classification                                                       */

bool router_classify(const char *sql, size_t len, const struct router_rules *rules, struct router_verdict *out)
{
	memset(out, 0, sizeof(*out));
	out->hint_shard = -1;
	out->hint_role = ROUTER_ROLE_NONE;
	out->writes = true;      /* until proven otherwise */
	if (!sql)
		return false;
	const char *nul = memchr(sql, '\0', len);
	if (nul)
		len = (size_t)(nul - sql);
	parse_hints(sql, len, out);
	if (!rules || len > rules->max_length)
		return false;

	char stack_text[2048];
	char *text = stack_text;
	if (len >= sizeof(stack_text) && !(text = malloc(len + 1)))
		return false;
	memcpy(text, sql, len);
	text[len] = '\0';

	PgQueryParseResult r = pg_query_parse(text);
	bool ok = !r.error && r.parse_tree && analyse(r.parse_tree, text, len, rules, out);
	pg_query_free_parse_result(r);
	if (text != stack_text)
		free(text);
	if (!ok) {
		/* keep the hints, drop anything half-read */
		out->writes = true;
		out->begins = out->begin_read_only = out->ends = false;
		out->reads_sharded = out->multi_statement = out->keys_complete = false;
		out->n_keys = 0;
	}
	out->parsed = ok;
	return ok;
}

/* ------------------------------------------------------------------ */
/* pgcat's own SET/SHOW                                                 */

/* The words of these commands are split at whitespace alone, \v
 * included (sqllex_skip_cspace): a comment before a command makes it not
 * ours (PostgreSQL answers it), one inside makes it malformed. */

/* The word at *i (sqllex_word_end), *i moved past it: true if it is
 * `word` in any case. */
static bool cmd_word(const char *s, size_t len, size_t *i, const char *word)
{
	size_t st = *i, wl = strlen(word);
	*i = sqllex_word_end(s, len, st);
	return *i - st == wl && strncasecmp(s + st, word, wl) == 0;
}

/* Only whitespace and semicolons from i on. */
static bool cmd_end(const char *s, size_t len, size_t i)
{
	while (i < len && (sqllex_is_cspace((unsigned char)s[i]) || s[i] == ';'))
		i++;
	return i == len;
}

/* `TO value` or `= value`, then the end. */
static bool cmd_set_value(const char *s, size_t len, size_t i, char *value, size_t valuelen)
{
	i = sqllex_skip_cspace(s, len, i);
	if (i < len && s[i] == '=')
		i++;
	else if (!cmd_word(s, len, &i, "to"))
		return false;
	i = sqllex_skip_cspace(s, len, i);
	return sqllex_value(s, len, &i, value, valuelen) && cmd_end(s, len, i);
}

enum router_command router_parse_command(const char *sql, size_t len, char *value, size_t valuelen)
{
	if (!sql)
		len = 0;
	if (value && valuelen)
		value[0] = '\0';
	size_t i = sqllex_skip_cspace(sql, len, 0);
	if (i == len || (sql[i] | 0x20) != 's')
		return ROUTER_CMD_NONE;
	size_t st = i;
	bool set = cmd_word(sql, len, &i, "set");
	if (!set) {
		i = st;
		if (!cmd_word(sql, len, &i, "show"))
			return ROUTER_CMD_NONE;
	}
	if (i == len || !sqllex_is_cspace((unsigned char)sql[i]))
		return ROUTER_CMD_NONE;
	i = sqllex_skip_cspace(sql, len, i);
	st = i;
	i = sqllex_word_end(sql, len, i);
	size_t wl = i - st;
	if (i < len && sql[i] == '.')
		return ROUTER_CMD_NONE;      /* a custom parameter: shard.x */
	const char *w = sql + st;
#define WORD_IS(lit) (wl == sizeof(lit) - 1 && strncasecmp(w, lit, wl) == 0)
	enum router_command cmd;
	const char *second = NULL;
	if (WORD_IS("shard")) {
		cmd = set ? ROUTER_CMD_SET_SHARD : ROUTER_CMD_SHOW_SHARD;
	} else if (WORD_IS("sharding") && set) {
		cmd = ROUTER_CMD_SET_SHARDING_KEY;
		second = "key";
	} else if (WORD_IS("server")) {
		cmd = set ? ROUTER_CMD_SET_SERVER_ROLE : ROUTER_CMD_SHOW_SERVER_ROLE;
		second = "role";
	} else if (WORD_IS("primary")) {
		cmd = set ? ROUTER_CMD_SET_PRIMARY_READS : ROUTER_CMD_SHOW_PRIMARY_READS;
		second = "reads";
	} else {
		return ROUTER_CMD_NONE;
	}
#undef WORD_IS
	if (second) {
		i = sqllex_skip_cspace(sql, len, i);
		if (!cmd_word(sql, len, &i, second))
			return ROUTER_CMD_INVALID;
	}
	if (set ? !cmd_set_value(sql, len, i, value, valuelen) : !cmd_end(sql, len, i)) {
		if (value && valuelen)
			value[0] = '\0';
		return ROUTER_CMD_INVALID;
	}
	return cmd;
}

/* ------------------------------------------------------------------ */
/* Verdict cache                                                        */

/* A verdict is stored without its unused keys: the head, then n_keys keys,
 * then the text. */
#define VERDICT_HEAD offsetof(struct router_verdict, keys)

/* Longest shape made (the text of a longer statement is its own key). */
#define ROUTER_SHAPE_MAX 4096

struct cache_entry {
	struct cache_entry *chain;          /* same bucket */
	struct cache_entry *newer, *older;  /* LRU list */
	uint64_t hash;                      /* of the rules and the text */
	uint64_t rules;                     /* of the rules alone */
	size_t len;
	size_t n_keys;
	unsigned char data[];               /* head, keys, text */
};

struct router_cache {
	size_t capacity, entries;
	struct cache_entry **buckets;
	size_t n_buckets;                   /* power of two, or 0 before the first insert */
	struct cache_entry *newest, *oldest;
	unsigned long long hits, misses, evictions;
	struct router_verdict scratch;
};

/* A string of the rules, or its absence, into h. */
static uint64_t str_hash(uint64_t h, const char *s)
{
	return s ? texthash(s, strlen(s), h) : texthash_mix(h, 0xfe);
}

/* Everything in the rules that changes a verdict. Computed at every
 * lookup: a few multiplications when the pool has no sharded table and no
 * writing_functions. */
static uint64_t rules_hash(const struct router_rules *r)
{
	uint64_t h = 1469598103934665603ULL;
	h = texthash_mix(h, r->max_length);
	h = texthash_mix(h, r->n_sharded);
	for (size_t i = 0; i < r->n_sharded; i++) {
		h = str_hash(h, r->sharded[i].schema);
		h = str_hash(h, r->sharded[i].table);
		h = str_hash(h, r->sharded[i].column);
		uint32_t place = r->sharded[i].positioned ? (uint32_t)r->sharded[i].position + 1 : 0;
		h = texthash_mix(h, place);
	}
	h = texthash_mix(h, r->n_writing_functions);
	for (size_t i = 0; i < r->n_writing_functions; i++)
		h = str_hash(h, r->writing_functions[i]);
	return h;
}

struct router_cache *router_cache_new(size_t capacity)
{
	struct router_cache *c = calloc(1, sizeof(*c));
	if (c)
		c->capacity = capacity;
	return c;
}

void router_cache_free(struct router_cache *c)
{
	if (!c)
		return;
	for (struct cache_entry *e = c->newest, *next; e; e = next) {
		next = e->older;
		free(e);
	}
	free(c->buckets);
	free(c);
}

void router_cache_stats(const struct router_cache *c, struct router_cache_stats *out)
{
	out->entries = c->entries;
	out->hits = c->hits;
	out->misses = c->misses;
	out->evictions = c->evictions;
}

static const char *entry_text(const struct cache_entry *e)
{
	return (const char *)e->data + VERDICT_HEAD + e->n_keys * sizeof(struct router_key);
}

static void lru_unlink(struct router_cache *c, struct cache_entry *e)
{
	if (e->newer)
		e->newer->older = e->older;
	else
		c->newest = e->older;
	if (e->older)
		e->older->newer = e->newer;
	else
		c->oldest = e->newer;
	e->newer = e->older = NULL;
}

static void lru_push(struct router_cache *c, struct cache_entry *e)
{
	e->newer = NULL;
	e->older = c->newest;
	if (c->newest)
		c->newest->newer = e;
	c->newest = e;
	if (!c->oldest)
		c->oldest = e;
}

static void evict_oldest(struct router_cache *c)
{
	struct cache_entry *e = c->oldest;
	struct cache_entry **pp = &c->buckets[e->hash & (c->n_buckets - 1)];
	while (*pp != e)
		pp = &(*pp)->chain;
	*pp = e->chain;
	lru_unlink(c, e);
	free(e);
	c->entries--;
	c->evictions++;
}

/* Keeps the load factor at most 1; failure only means longer chains. */
static void maybe_grow(struct router_cache *c)
{
	if (c->n_buckets && c->entries < c->n_buckets)
		return;
	size_t n = c->n_buckets ? c->n_buckets * 2 : 64;
	if (n > SIZE_MAX / sizeof(*c->buckets))
		return;
	struct cache_entry **b = calloc(n, sizeof(*b));
	if (!b)
		return;
	for (struct cache_entry *e = c->newest; e; e = e->older) {
		size_t k = e->hash & (n - 1);
		e->chain = b[k];
		b[k] = e;
	}
	free(c->buckets);
	c->buckets = b;
	c->n_buckets = n;
}

static void cache_insert(struct router_cache *c, uint64_t h, uint64_t rh, const char *sql, size_t len,
			 const struct router_verdict *v)
{
	size_t keys = v->n_keys * sizeof(struct router_key);
	if (len > SIZE_MAX - sizeof(struct cache_entry) - VERDICT_HEAD - keys)
		return;
	if (c->entries == c->capacity)
		evict_oldest(c);
	maybe_grow(c);
	if (!c->n_buckets)
		return;
	struct cache_entry *e = malloc(sizeof(*e) + VERDICT_HEAD + keys + len);
	if (!e)
		return;
	e->hash = h;
	e->rules = rh;
	e->len = len;
	e->n_keys = v->n_keys;
	memcpy(e->data, v, VERDICT_HEAD);
	memcpy(e->data + VERDICT_HEAD, v->keys, keys);
	memcpy(e->data + VERDICT_HEAD + keys, sql, len);
	size_t k = h & (c->n_buckets - 1);
	e->chain = c->buckets[k];
	c->buckets[k] = e;
	lru_push(c, e);
	c->entries++;
}

/* The verdict kept for key under rules rh (h: their hash), made the
 * newest; NULL: none kept. */
static const struct router_verdict *cache_find(struct router_cache *c, uint64_t h, uint64_t rh, const char *key,
					       size_t klen)
{
	if (!c->n_buckets)
		return NULL;
	struct router_verdict *v = &c->scratch;
	for (struct cache_entry *e = c->buckets[h & (c->n_buckets - 1)]; e; e = e->chain) {
		if (e->hash != h || e->rules != rh || e->len != klen || memcmp(entry_text(e), key, klen) != 0)
			continue;
		memcpy(v, e->data, VERDICT_HEAD);
		if (e->n_keys)
			memcpy(v->keys, e->data + VERDICT_HEAD, e->n_keys * sizeof(struct router_key));
		if (c->newest != e) {   /* (a statement run again and again is the newest already) */
			lru_unlink(c, e);
			lru_push(c, e);
		}
		c->hits++;
		return v;
	}
	return NULL;
}

const struct router_verdict *router_cache_classify(struct router_cache *c, const char *sql, size_t len,
						   const struct router_rules *rules)
{
	struct router_verdict *v = &c->scratch;
	if (c->capacity == 0 || !sql || !rules || len > rules->max_length) {
		router_classify(sql, len, rules, v);
		return v;
	}
	uint64_t rh = rules_hash(rules);
	/* Without sharded tables a verdict never depends on the values of the
	 * constants: a statement sent with literals (the simple protocol) is
	 * looked up by its shape, so `WHERE aid = 1` and `WHERE aid = 2` share
	 * one parse. Shapes and texts never meet: their rules hashes differ.
	 * A text without constants (an extended-protocol Parse with $n
	 * parameters) is kept under itself, and looked up as it is first:
	 * found without its shape being made (a scan of the whole text). A
	 * simple Query's is shaped first, its text itself being a miss when
	 * it holds constants. */
	bool shapes = rules->n_sharded == 0;
	char shape[ROUTER_SHAPE_MAX];
	size_t n = shapes && rules->literals_inline ? sqlshape_make(sql, len, shape, sizeof shape) : 0;
	uint64_t h = 0;
	const struct router_verdict *kept;
	if (n == 0) {
		h = texthash(sql, len, rh);
		if ((kept = cache_find(c, h, rh, sql, len)) != NULL)
			return kept;
		if (shapes && !rules->literals_inline)
			n = sqlshape_make(sql, len, shape, sizeof shape);
	}
	const char *key = sql;
	size_t klen = len;
	if (n > 0) {
		key = shape;
		klen = n;
		rh ^= 0x7368617065ULL;   /* "shape" */
		h = texthash(key, klen, rh);
		if ((kept = cache_find(c, h, rh, key, klen)) != NULL)
			return kept;
	}
	c->misses++;
	router_classify(sql, len, rules, v);
	cache_insert(c, h, rh, key, klen, v);
	return v;
}
