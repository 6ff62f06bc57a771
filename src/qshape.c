/* SPDX-License-Identifier: MIT */
/*
 * qshape: a request's text as a query shape, and the worker's cache of
 * shapes (qshape.h).
 */
#include "qshape.h"

#include <pg_query.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqllex.h"
#include "sqlshape.h"
#include "texthash.h"

/* Longest shape made: the longest text kept (slowlog.h's SLOWLOG_SQL_MAX;
 * a longer one is not described). */
#define QSHAPE_MAX (8u * 1024)

/* The normalised text in out (cap bytes) with its comments as one space
 * each (a comment may hold anything: an e-mail, a key); false when a
 * constant is left in it (libpg_query's normalisation leaves some: those
 * of utility statements as NOTIFY's payload, EXECUTE's arguments, COPY's
 * file, a type's length): such a text is not shown at all. Quoted
 * identifiers stay; $n are the normalisation's (or the client's)
 * parameters. */
static bool constant_free(const char *s, char *out, size_t cap)
{
	size_t len = strlen(s), o = 0;
	for (size_t i = 0; i < len;) {
		unsigned char ch = (unsigned char)s[i];
		size_t next;
		if (sqllex_at_comment(s, len, i)) {
			next = sqllex_comment_end(s, len, i);
			if (next == SQLLEX_OPEN)
				return false;
			if (o + 1 >= cap)
				return false;
			out[o++] = ' ';
			i = next;
			continue;
		}
		if (ch == '"') {
			next = sqllex_quoted_end(s, len, i);   /* a quoted identifier */
			if (next == SQLLEX_OPEN || next == i)
				return false;
		} else if (ch == '\'' || sqllex_is_digit(ch) || (ch == '.' && i + 1 < len && sqllex_is_digit((unsigned char)s[i + 1]))) {
			return false;   /* a string or a number */
		} else if (ch == '$') {
			if (i + 1 >= len || !sqllex_is_digit((unsigned char)s[i + 1]))
				return false;   /* a dollar-quoted string */
			next = i + 1;
			while (next < len && sqllex_is_digit((unsigned char)s[next]))
				next++;
		} else if (sqllex_is_ident_start(ch)) {
			next = sqllex_word_end(s, len, i);   /* (a word: E'x', B'1' and U&'x' end at their quote, above) */
		} else {
			next = i + 1;
		}
		if (o + (next - i) >= cap)
			return false;
		memcpy(out + o, s + i, next - i);
		o += next - i;
		i = next;
	}
	out[o] = '\0';
	return true;
}

void qshape_describe(const char *sql, struct qshape_desc *d)
{
	memset(d, 0, sizeof *d);
	d->slot_hint = -1;
	PgQueryFingerprintResult fp = pg_query_fingerprint(sql);
	if (fp.error || !fp.fingerprint_str) {
		d->why = QSHAPE_TEXT_NOT_SQL;
		pg_query_free_fingerprint_result(fp);
		return;
	}
	d->fingerprint = fp.fingerprint;
	snprintf(d->fingerprint_hex, sizeof d->fingerprint_hex, "%s", fp.fingerprint_str);
	pg_query_free_fingerprint_result(fp);
	PgQueryNormalizeResult norm = pg_query_normalize(sql);
	if (norm.error || !norm.normalized_query) {
		d->why = QSHAPE_TEXT_NOT_SQL;
	} else {
		size_t n = strlen(norm.normalized_query) + 1;
		d->text = malloc(n);
		if (!d->text)
			d->why = QSHAPE_TEXT_NO_MEMORY;
		else if (!constant_free(norm.normalized_query, d->text, n)) {
			d->why = QSHAPE_TEXT_CONSTANTS;
			free(d->text);
			d->text = NULL;
		}
	}
	pg_query_free_normalize_result(norm);
}

void qshape_desc_free(struct qshape_desc *d)
{
	free(d->text);
	d->text = NULL;
}

const char *qshape_text_why(enum qshape_text why)
{
	switch (why) {
	case QSHAPE_TEXT_OK: return "";
	case QSHAPE_TEXT_NOT_SQL: return "(text not written: not read as SQL)";
	case QSHAPE_TEXT_CONSTANTS: return "(text not written: constants left after normalising)";
	case QSHAPE_TEXT_NO_MEMORY: return "(text not written: out of memory)";
	}
	return "";
}

uint64_t qshape_raw_key(const char *sql, size_t len)
{
	uint64_t k = texthash(sql, len, 0x7173686170650002ULL);
	return k ? k : 1;
}

/* The key of a shaped text (0: it has none). */
static uint64_t shape_key(const char *sql, size_t len)
{
	char shape[QSHAPE_MAX];
	size_t n = len <= QSHAPE_MAX ? sqlshape_make(sql, len, shape, sizeof shape) : 0;
	if (!n)
		return 0;
	uint64_t k = texthash(shape, n, 0x7173686170650001ULL);
	return k ? k : 1;
}

uint64_t qshape_key(const char *sql, size_t len)
{
	uint64_t k = shape_key(sql, len);
	return k ? k : qshape_raw_key(sql, len);
}

struct qshape_names {
	size_t cap, n;              /* cap: a power of two */
	struct { uint64_t name, key; } *e;   /* name 0: empty */
};

static uint64_t name_hash(const char *name, size_t len)
{
	uint64_t h = texthash(name, len, 0x716e616d65730001ULL);
	return h ? h : 1;
}

static bool names_grow(struct qshape_names *m)
{
	size_t cap = m->cap ? m->cap * 2 : 16;
	void *e = calloc(cap, sizeof *m->e);
	if (!e)
		return false;
	struct qshape_names old = *m;
	m->e = e;
	m->cap = cap;
	for (size_t i = 0; i < old.cap; i++) {
		if (!old.e[i].name)
			continue;
		size_t j = old.e[i].name & (cap - 1);
		while (m->e[j].name)
			j = (j + 1) & (cap - 1);
		m->e[j] = old.e[i];
	}
	free(old.e);
	return true;
}

bool qshape_names_put(struct qshape_names **mp, const char *name, size_t len, uint64_t key)
{
	if (!*mp && !(*mp = calloc(1, sizeof **mp)))
		return false;
	struct qshape_names *m = *mp;
	uint64_t h = name_hash(name, len);
	if (m->cap) {
		for (size_t j = h & (m->cap - 1); m->e[j].name; j = (j + 1) & (m->cap - 1))
			if (m->e[j].name == h) {
				m->e[j].key = key;   /* (the name parsed again: its new text) */
				return true;
			}
	}
	if (m->n >= QSHAPE_NAMES_MAX) {
		/* (a client that never closes what it prepares: start over) */
		memset(m->e, 0, m->cap * sizeof *m->e);
		m->n = 0;
	}
	if ((m->n + 1) * 2 > m->cap && !names_grow(m))
		return false;
	size_t j = h & (m->cap - 1);
	while (m->e[j].name)
		j = (j + 1) & (m->cap - 1);
	m->e[j].name = h;
	m->e[j].key = key;
	m->n++;
	return true;
}

uint64_t qshape_names_get(const struct qshape_names *m, const char *name, size_t len)
{
	if (!m || !m->cap)
		return 0;
	uint64_t h = name_hash(name, len);
	for (size_t j = h & (m->cap - 1); m->e[j].name; j = (j + 1) & (m->cap - 1))
		if (m->e[j].name == h)
			return m->e[j].key;
	return 0;
}

void qshape_names_del(struct qshape_names *m, const char *name, size_t len)
{
	if (!m || !m->cap)
		return;
	uint64_t h = name_hash(name, len);
	size_t mask = m->cap - 1, j = h & mask;
	while (m->e[j].name && m->e[j].name != h)
		j = (j + 1) & mask;
	if (!m->e[j].name)
		return;
	/* Backward shift: the entries after it that probed past it move up,
	 * so that no lookup stops at the hole. */
	size_t hole = j;
	for (size_t k = (j + 1) & mask; m->e[k].name; k = (k + 1) & mask) {
		size_t home = m->e[k].name & mask;
		/* k may fill the hole if its home is not in (hole, k] */
		bool stays = hole <= k ? (home > hole && home <= k) : (home > hole || home <= k);
		if (!stays) {
			m->e[hole] = m->e[k];
			hole = k;
		}
	}
	m->e[hole].name = 0;
	m->e[hole].key = 0;
	m->n--;
}

void qshape_names_free(struct qshape_names *m)
{
	if (!m)
		return;
	free(m->e);
	free(m);
}

struct qshape_entry {
	uint64_t key;               /* 0: empty */
	uint64_t used;              /* the cache's clock at its last use */
	struct qshape_desc d;
};

struct qshape_cache {
	size_t sets;                /* a power of two */
	uint64_t clock;
	struct qshape_entry *e;     /* sets x 2 */
};

struct qshape_cache *qshape_cache_new(size_t sets)
{
	size_t n = 1;
	while (n < sets)
		n <<= 1;
	struct qshape_cache *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->sets = n;
	c->e = calloc(n * 2, sizeof *c->e);
	if (!c->e) {
		free(c);
		return NULL;
	}
	return c;
}

void qshape_cache_free(struct qshape_cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->sets * 2; i++)
		qshape_desc_free(&c->e[i].d);
	free(c->e);
	free(c);
}

/* The entry of key in its set, or NULL. */
static struct qshape_entry *cache_find(struct qshape_cache *c, uint64_t key)
{
	struct qshape_entry *set = &c->e[(key & (c->sets - 1)) * 2];
	for (int i = 0; i < 2; i++)
		if (set[i].key == key) {
			set[i].used = ++c->clock;
			return &set[i];
		}
	return NULL;
}

struct qshape_desc *qshape_cache_text(struct qshape_cache *c, const char *sql, size_t len)
{
	if (!c)
		return NULL;
	struct qshape_entry *e = cache_find(c, qshape_raw_key(sql, len));
	if (e)
		return &e->d;
	/* (a raw key is cached only for a text without a shape: one with
	 * constants is found by its shape's) */
	return qshape_cache_get(c, qshape_key(sql, len), sql);
}

struct qshape_desc *qshape_cache_get(struct qshape_cache *c, uint64_t key, const char *sql)
{
	if (!c || !key)
		return NULL;
	struct qshape_entry *set = &c->e[(key & (c->sets - 1)) * 2];
	c->clock++;
	for (int i = 0; i < 2; i++)
		if (set[i].key == key) {
			set[i].used = c->clock;
			return &set[i].d;
		}
	if (!sql)
		return NULL;
	struct qshape_entry *victim = set[0].used <= set[1].used ? &set[0] : &set[1];
	qshape_desc_free(&victim->d);
	qshape_describe(sql, &victim->d);
	victim->key = key;
	victim->used = c->clock;
	return &victim->d;
}
