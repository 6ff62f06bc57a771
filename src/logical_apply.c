/* SPDX-License-Identifier: MIT */
/*
 * logical_apply: a replicated change as the statement that applies it
 * (logical_apply.h).
 */
#include "logical_apply.h"

#include <string.h>

/* The statement under construction: what does not fit marks it too long. */
struct sql {
	char *p;
	size_t cap, len;
	bool full;
};

static void put(struct sql *s, const char *b, size_t n)
{
	if (s->full || n >= s->cap - s->len) {
		s->full = true;
		return;
	}
	memcpy(s->p + s->len, b, n);
	s->len += n;
	s->p[s->len] = '\0';
}

static void puts0(struct sql *s, const char *b)
{
	put(s, b, strlen(b));
}

/* "name", its quotes doubled. */
static void ident(struct sql *s, const char *name)
{
	put(s, "\"", 1);
	for (const char *c = name; *c; c++) {
		put(s, c, 1);
		if (*c == '"')
			put(s, "\"", 1);
	}
	put(s, "\"", 1);
}

/* E'value', its quotes and backslashes doubled (read the same whatever
 * standard_conforming_strings says); NULL; false: a NUL byte, which no
 * text value holds. */
static bool literal(struct sql *s, const struct pgoutput_value *v)
{
	if (v->kind == PGOUTPUT_NULL) {
		puts0(s, "NULL");
		return true;
	}
	if (v->kind != PGOUTPUT_TEXT || memchr(v->data, '\0', v->len))
		return false;
	put(s, "E'", 2);
	size_t from = 0;
	for (size_t i = 0; i < v->len; i++)
		if (v->data[i] == '\'' || v->data[i] == '\\') {
			put(s, (const char *)v->data + from, i + 1 - from);   /* (with it) */
			put(s, (const char *)v->data + i, 1);                 /* and again */
			from = i + 1;
		}
	put(s, (const char *)v->data + from, v->len - from);
	put(s, "'", 1);
	return true;
}

static void table(struct sql *s, const struct logical_rel *rel)
{
	ident(s, rel->nspname);
	put(s, ".", 1);
	ident(s, rel->relname);
}

/* key1 = v1 AND key2 = v2 ... from tuple t (false: a key value missing). */
static bool where_key(struct sql *s, const struct logical_rel *rel, const struct pgoutput_tuple *t)
{
	bool first = true;
	for (uint16_t i = 0; i < rel->n_columns; i++) {
		if (!rel->columns[i].key)
			continue;
		const struct pgoutput_value *v = &t->values[i];
		if (v->kind == PGOUTPUT_UNCHANGED)
			return false;
		puts0(s, first ? " WHERE " : " AND ");
		first = false;
		ident(s, rel->columns[i].name);
		if (v->kind == PGOUTPUT_NULL) {
			puts0(s, " IS NULL");
			continue;
		}
		puts0(s, " = ");
		if (!literal(s, v))
			return false;
	}
	return true;
}

static bool same_value(const struct pgoutput_value *a, const struct pgoutput_value *b)
{
	return a->kind == b->kind && a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* INSERT ... ON CONFLICT (key) DO UPDATE SET the other columns. */
static bool upsert(struct sql *s, const struct logical_rel *rel, const struct pgoutput_tuple *t)
{
	puts0(s, "INSERT INTO ");
	table(s, rel);
	puts0(s, " (");
	for (uint16_t i = 0; i < rel->n_columns; i++) {
		if (i)
			puts0(s, ", ");
		ident(s, rel->columns[i].name);
	}
	puts0(s, ") VALUES (");
	for (uint16_t i = 0; i < rel->n_columns; i++) {
		if (i)
			puts0(s, ", ");
		if (!literal(s, &t->values[i]))
			return false;
	}
	puts0(s, ") ON CONFLICT (");
	bool first = true, others = false;
	for (uint16_t i = 0; i < rel->n_columns; i++) {
		if (!rel->columns[i].key) {
			others = true;
			continue;
		}
		if (!first)
			puts0(s, ", ");
		first = false;
		ident(s, rel->columns[i].name);
	}
	if (!others) {
		puts0(s, ") DO NOTHING");
		return true;
	}
	puts0(s, ") DO UPDATE SET ");
	first = true;
	for (uint16_t i = 0; i < rel->n_columns; i++) {
		if (rel->columns[i].key)
			continue;
		if (!first)
			puts0(s, ", ");
		first = false;
		ident(s, rel->columns[i].name);
		puts0(s, " = EXCLUDED.");
		ident(s, rel->columns[i].name);
	}
	return true;
}

enum logical_apply_result logical_apply_sql(const struct pgoutput_msg *m, const struct logical_rel *rel, char *out,
					    size_t cap, size_t *len)
{
	struct sql s = { out, cap, 0, cap == 0 };
	*len = 0;
	if (cap)
		out[0] = '\0';
	if (m->kind != PGOUTPUT_INSERT && m->kind != PGOUTPUT_UPDATE && m->kind != PGOUTPUT_DELETE)
		return LOGICAL_APPLY_NOT_A_CHANGE;
	bool has_key = false;
	for (uint16_t i = 0; i < rel->n_columns; i++)
		has_key |= rel->columns[i].key;
	/* (FULL marks every column as the key: no key to upsert on) */
	if (!has_key || rel->replica_identity == 'f' || rel->replica_identity == 'n')
		return LOGICAL_APPLY_NO_KEY;
	const struct pgoutput_tuple *nt = &m->u.change.new_tuple, *ot = &m->u.change.old_tuple;
	bool ok;
	if (m->kind == PGOUTPUT_DELETE) {
		if (ot->n != rel->n_columns)
			return LOGICAL_APPLY_MISMATCH;
		puts0(&s, "DELETE FROM ");
		table(&s, rel);
		ok = where_key(&s, rel, ot);
	} else {
		if (nt->n != rel->n_columns)
			return LOGICAL_APPLY_MISMATCH;
		bool unchanged = false;
		for (uint16_t i = 0; i < nt->n; i++) {
			if (nt->values[i].kind != PGOUTPUT_UNCHANGED)
				continue;
			if (m->kind == PGOUTPUT_INSERT || rel->columns[i].key)
				return LOGICAL_APPLY_MISMATCH;
			unchanged = true;
		}
		if (m->kind == PGOUTPUT_UPDATE && m->u.change.old_kind) {
			/* an old key was sent: the key changed (or a full old row:
			 * compare its key columns) */
			if (ot->n != rel->n_columns)
				return LOGICAL_APPLY_MISMATCH;
			for (uint16_t i = 0; i < rel->n_columns; i++)
				if (rel->columns[i].key && !same_value(&ot->values[i], &nt->values[i]))
					return LOGICAL_APPLY_KEY_CHANGED;
		}
		if (!unchanged) {
			ok = upsert(&s, rel, nt);
		} else {
			puts0(&s, "UPDATE ");
			table(&s, rel);
			puts0(&s, " SET ");
			bool first = true;
			ok = true;
			for (uint16_t i = 0; i < rel->n_columns && ok; i++) {
				if (rel->columns[i].key || nt->values[i].kind == PGOUTPUT_UNCHANGED)
					continue;
				if (!first)
					puts0(&s, ", ");
				first = false;
				ident(&s, rel->columns[i].name);
				puts0(&s, " = ");
				ok = literal(&s, &nt->values[i]);
			}
			if (first)
				return LOGICAL_APPLY_NOTHING;   /* (SET doc = doc of a TOASTed doc: nothing sent) */
			if (ok)
				ok = where_key(&s, rel, nt);
		}
	}
	if (!ok || s.full) {
		if (cap)
			out[0] = '\0';   /* (no statement half written) */
		return ok ? LOGICAL_APPLY_TOO_LONG : LOGICAL_APPLY_MISMATCH;
	}
	*len = s.len;
	return LOGICAL_APPLY_OK;
}

const char *logical_apply_text(enum logical_apply_result r)
{
	switch (r) {
	case LOGICAL_APPLY_OK: return "ok";
	case LOGICAL_APPLY_NOTHING: return "nothing to apply";
	case LOGICAL_APPLY_TOO_LONG: return "statement too long";
	case LOGICAL_APPLY_NO_KEY: return "the table has no replica identity key";
	case LOGICAL_APPLY_KEY_CHANGED: return "an update changed the key";
	case LOGICAL_APPLY_MISMATCH: return "the change does not match its relation";
	case LOGICAL_APPLY_NOT_A_CHANGE: return "not an insert, update or delete";
	}
	return "?";
}
