/* SPDX-License-Identifier: MIT */
/*
 * copy_route: a COPY FROM STDIN into a sharded table, read for the
 * splitter (include/copy_route.h).
 */
#include "copy_route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <pg_query.h>

#include "pgjson.h"

static enum copy_route_result refuse(char why[MERGE_WHY], const char *msg)
{
	snprintf(why, MERGE_WHY, "cross-shard COPY: %s", msg);
	return COPY_ROUTE_REFUSED;
}

/* A one-character option (DELIMITER, QUOTE, ESCAPE). */
static bool one_char(const struct jdoc *d, int arg, char *out)
{
	char buf[8];
	int n = pgjson_str(d, pgjson_string_node(d, arg), buf, sizeof buf);
	if (n != 1)
		return false;
	*out = buf[0];
	return true;
}

/* HEADER's value: none, a boolean, an integer, or a word. */
static bool header_value(const struct jdoc *d, int arg, bool *on)
{
	if (arg == JNONE) {
		*on = true;
		return true;
	}
	int b = jnode(d, arg, "Boolean");
	if (b != JNONE) {
		*on = jget(d, b, "boolval") != JNONE;
		return true;
	}
	int i = jnode(d, arg, "Integer");
	if (i != JNONE) {
		*on = jget(d, i, "ival") != JNONE;
		return true;
	}
	char w[16];
	if (pgjson_str(d, pgjson_string_node(d, arg), w, sizeof w) < 0)
		return false;
	if (!strcasecmp(w, "true") || !strcasecmp(w, "on") || !strcasecmp(w, "1") || !strcasecmp(w, "match"))
		*on = true;
	else if (!strcasecmp(w, "false") || !strcasecmp(w, "off") || !strcasecmp(w, "0"))
		*on = false;
	else
		return false;
	return true;
}

enum copy_route_result copy_route_read(const char *sql, size_t len, const struct router_rules *rules,
				       struct copy_route *out, char why[MERGE_WHY])
{
	memset(out, 0, sizeof *out);
	why[0] = '\0';
	char *text = malloc(len + 1);
	if (!text)
		return refuse(why, "out of memory");
	memcpy(text, sql, len);
	text[len] = '\0';
	PgQueryParseResult r = pg_query_parse(text);
	struct jtok *toks = NULL;
	enum copy_route_result res = COPY_ROUTE_NOT_COPY;
	if (r.error || !r.parse_tree)
		goto out;
	size_t jlen = strlen(r.parse_tree), cap = jlen / 4 + 256;
	int ntok;
	toks = malloc(cap * sizeof *toks);
	if (!toks || !pgjson_parse(r.parse_tree, jlen, toks, cap, &ntok))
		goto out;
	struct jdoc d = { r.parse_tree, toks, ntok };
	int stmts = jget(&d, 0, "stmts");
	int first = stmts + 1;
	if (stmts == JNONE || d.t[stmts].type != J_ARR || !pgjson_valid(&d, first) ||
	    d.t[first].after != d.t[stmts].after)
		goto out;
	int cs = jnode(&d, jget(&d, first, "stmt"), "CopyStmt");
	if (cs == JNONE || jget(&d, cs, "is_from") == JNONE || jget(&d, cs, "filename") != JNONE ||
	    jget(&d, cs, "is_program") != JNONE)
		goto out;
	int rv = jget(&d, cs, "relation");
	if (pgjson_str(&d, jget(&d, rv, "relname"), out->table, sizeof out->table) < 0)
		goto out;
	(void)pgjson_str(&d, jget(&d, rv, "schemaname"), out->schema, sizeof out->schema);
	const char *column = NULL;
	for (size_t i = 0; i < rules->n_sharded; i++) {
		const struct router_table *t = &rules->sharded[i];
		if (strcasecmp(t->table, out->table) == 0 &&
		    (!t->schema || !out->schema[0] || strcasecmp(t->schema, out->schema) == 0)) {
			column = t->column;
			break;
		}
	}
	if (!column)
		goto out;   /* not sharded: default_shard as usual */
	snprintf(out->column, sizeof out->column, "%s", column);

	/* the data's format */
	enum copysplit_format fmt = COPYSPLIT_TEXT;
	int opts = jget(&d, cs, "options");
	for (int e = opts == JNONE ? 0 : opts + 1; opts != JNONE && e < (int)d.t[opts].after; e = (int)d.t[e].after) {
		int de = jnode(&d, e, "DefElem");
		char name[32], val[16];
		if (pgjson_str(&d, jget(&d, de, "defname"), name, sizeof name) < 0)
			continue;
		if (strcmp(name, "format") == 0) {
			if (pgjson_str(&d, pgjson_string_node(&d, jget(&d, de, "arg")), val, sizeof val) < 0) {
				res = refuse(why, "unreadable FORMAT");
				goto out;
			}
			if (strcasecmp(val, "csv") == 0)
				fmt = COPYSPLIT_CSV;
			else if (strcasecmp(val, "binary") == 0)
				fmt = COPYSPLIT_BINARY;
		}
	}
	copysplit_defaults(&out->opts, fmt);
	bool escape_given = false;
	for (int e = opts == JNONE ? 0 : opts + 1; opts != JNONE && e < (int)d.t[opts].after; e = (int)d.t[e].after) {
		int de = jnode(&d, e, "DefElem");
		int arg = jget(&d, de, "arg");
		char name[32];
		if (pgjson_str(&d, jget(&d, de, "defname"), name, sizeof name) < 0)
			continue;
		bool ok = true;
		if (strcmp(name, "delimiter") == 0)
			ok = one_char(&d, arg, &out->opts.delimiter);
		else if (strcmp(name, "quote") == 0)
			ok = one_char(&d, arg, &out->opts.quote);
		else if (strcmp(name, "escape") == 0)
			ok = escape_given = one_char(&d, arg, &out->opts.escape);
		else if (strcmp(name, "header") == 0)
			ok = header_value(&d, arg, &out->opts.header);
		else if (strcmp(name, "null") == 0) {
			int n = pgjson_str(&d, pgjson_string_node(&d, arg), out->null_string, sizeof out->null_string);
			ok = n >= 0;
			if (ok) {
				out->opts.null_string = out->null_string;
				out->opts.null_len = (size_t)n;
			}
		} else if (strcmp(name, "encoding") == 0) {
			res = refuse(why, "ENCODING cannot be split (pgcat reads the rows in the client encoding)");
			goto out;
		}
		if (!ok) {
			snprintf(why, MERGE_WHY, "cross-shard COPY: unreadable option %s", name);
			res = COPY_ROUTE_REFUSED;
			goto out;
		}
	}
	if (!escape_given)
		out->opts.escape = out->opts.quote;   /* ESCAPE defaults to QUOTE */
	/* where the key is in each row */
	out->key_position = -1;
	int al = jget(&d, cs, "attlist");
	if (al != JNONE && d.t[al].type == J_ARR) {
		int pos = 0;
		for (int e = al + 1; e < (int)d.t[al].after; e = (int)d.t[e].after, pos++) {
			char name[64];
			if (pgjson_str(&d, pgjson_string_node(&d, e), name, sizeof name) >= 0 && strcasecmp(name, column) == 0)
				out->key_position = pos;
		}
		if (out->key_position < 0) {
			res = refuse(why, "the column list must include the sharding column");
			goto out;
		}
		out->opts.key_column = (unsigned)out->key_position;
	}
	res = COPY_ROUTE_SPLIT;
out:
	free(toks);
	pg_query_free_parse_result(r);
	free(text);
	return res;
}

/* name as a quoted identifier ("a""b"), into buf at *o. */
static bool put_ident(char *buf, size_t cap, size_t *o, const char *name)
{
	if (*o + 1 >= cap)
		return false;
	buf[(*o)++] = '"';
	for (const char *p = name; *p; p++) {
		if (*o + 2 >= cap)
			return false;
		if (*p == '"')
			buf[(*o)++] = '"';
		buf[(*o)++] = *p;
	}
	if (*o + 1 >= cap)
		return false;
	buf[(*o)++] = '"';
	buf[*o] = '\0';
	return true;
}

/* The relation's quoted name and the column, each as the body of a string
 * literal (quotes doubled). */
static bool literals(const struct copy_route *r, char *lit, size_t litcap, char *col, size_t colcap)
{
	char rel[300];
	size_t o = 0;
	rel[0] = '\0';
	if (r->schema[0] && (!put_ident(rel, sizeof rel, &o, r->schema) || o + 1 >= sizeof rel))
		return false;
	if (r->schema[0])
		rel[o++] = '.';
	if (!put_ident(rel, sizeof rel, &o, r->table))
		return false;
	size_t lo = 0, co = 0;
	for (const char *p = rel; *p && lo + 2 < litcap; p++) {
		if (*p == '\'')
			lit[lo++] = '\'';
		lit[lo++] = *p;
	}
	lit[lo] = '\0';
	for (const char *p = r->column; *p && co + 2 < colcap; p++) {
		if (*p == '\'')
			col[co++] = '\'';
		col[co++] = *p;
	}
	col[co] = '\0';
	return true;
}

bool copy_route_position_query(const struct copy_route *r, char *buf, size_t cap)
{
	/* a query counting the live columns before the sharding column */
	char lit[700], col[140];
	if (!literals(r, lit, sizeof lit, col, sizeof col))
		return false;
	int n = snprintf(buf, cap,
			 "SELECT count(*) FROM pg_catalog.pg_attribute a WHERE a.attrelid = '%s'::regclass AND a.attnum > 0 "
			 "AND NOT a.attisdropped AND a.attnum < (SELECT b.attnum FROM pg_catalog.pg_attribute b WHERE "
			 "b.attrelid = '%s'::regclass AND b.attname = '%s' AND NOT b.attisdropped)",
			 lit, lit, col);
	return n > 0 && (size_t)n < cap;
}

bool copy_route_placement_query(const struct copy_route *r, char *buf, size_t cap)
{
	char lit[700], col[140];
	if (!literals(r, lit, sizeof lit, col, sizeof col))
		return false;
	int n = snprintf(buf, cap,
			 "SELECT count(a.attnum) FROM pg_catalog.pg_attribute b LEFT JOIN pg_catalog.pg_attribute a ON "
			 "a.attrelid = b.attrelid AND a.attnum > 0 AND NOT a.attisdropped AND a.attnum < b.attnum "
			 "WHERE b.attrelid = pg_catalog.to_regclass('%s') AND b.attname = '%s' AND NOT b.attisdropped "
			 "GROUP BY b.attnum",
			 lit, col);
	return n > 0 && (size_t)n < cap;
}
