/* SPDX-License-Identifier: MIT */
/*
 * prep_maps: the data structures of prepared statements (see prepared.h),
 * pure and unit-tested: a pool's registry of statements (chained hash
 * table, reference counted), a client's names (open addressing, deletion
 * by backward shift), a server connection's set with its LRU clock, the
 * global names, and the rings of pending replies. No I/O, no globals.
 */
#include "prep_internal.h"

#include <stdlib.h>
#include <string.h>

#include "sqllex.h"
#include "texthash.h"

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* A statement's text (every unnamed Parse hashes it). */
static uint64_t text_hash(const void *p, size_t n, uint64_t seed)
{
	return texthash(p, n, seed);
}

/* ---- registry ---- */

void prep_registry_init(struct prep_registry *r)
{
	memset(r, 0, sizeof *r);
}

void prep_registry_free(struct prep_registry *r)
{
	free(r->seen);
	for (uint32_t i = 0; i < r->n_buckets; i++) {
		struct prep_stmt *st = r->buckets[i];
		while (st) {
			struct prep_stmt *next = st->hnext;
			free(st->desc);
			free(st);
			st = next;
		}
	}
	free(r->buckets);
	memset(r, 0, sizeof *r);
}

static bool registry_grow(struct prep_registry *r)
{
	uint32_t nb = r->n_buckets ? r->n_buckets * 2 : 64;
	struct prep_stmt **b = calloc(nb, sizeof *b);
	if (!b)
		return false;
	for (uint32_t i = 0; i < r->n_buckets; i++) {
		struct prep_stmt *st = r->buckets[i];
		while (st) {
			struct prep_stmt *next = st->hnext;
			uint32_t k = (uint32_t)(st->hash & (nb - 1));
			st->hnext = b[k];
			b[k] = st;
			st = next;
		}
	}
	free(r->buckets);
	r->buckets = b;
	r->n_buckets = nb;
	return true;
}

/* A statement's hash: its text's (which does not change) with the schema
 * generation folded in, so that the text is hashed once per Parse however
 * many tables look it up. */
static uint64_t gen_hash(uint64_t th, uint64_t schema_gen)
{
	uint64_t h = (th ^ (schema_gen * 0x9e3779b97f4a7c15ULL)) * 0xff51afd7ed558ccdULL;
	return h ^ (h >> 33);
}

static uint64_t key_hash(bool sql, const uint8_t *key, size_t len, uint64_t schema_gen)
{
	return gen_hash(text_hash(key, len, sql ? 0x9e3779b97f4a7c15ULL : 1469598103934665603ULL), schema_gen);
}

uint64_t prep_key_hash(const uint8_t *key, size_t len)
{
	return text_hash(key, len, 1469598103934665603ULL);
}

static struct prep_stmt *registry_lookup(const struct prep_registry *r, uint64_t h, bool sql, const uint8_t *key,
					 size_t len, uint64_t schema_gen)
{
	if (!r->n_buckets)
		return NULL;
	for (struct prep_stmt *st = r->buckets[h & (r->n_buckets - 1)]; st; st = st->hnext)
		if (st->hash == h && st->sql == sql && st->schema_gen == schema_gen && st->key_len == len &&
		    memcmp(st->key, key, len) == 0)
			return st;
	return NULL;
}

struct prep_stmt *prep_registry_find(const struct prep_registry *r, bool sql, const uint8_t *key, size_t len,
				     uint64_t schema_gen)
{
	if (len > UINT32_MAX - 1)
		return NULL;
	return registry_lookup(r, key_hash(sql, key, len, schema_gen), sql, key, len, schema_gen);
}

struct prep_stmt *prep_registry_find_hashed(const struct prep_registry *r, uint64_t text_hash, const uint8_t *key,
					    size_t len, uint64_t schema_gen)
{
	if (len > UINT32_MAX - 1)
		return NULL;
	return registry_lookup(r, gen_hash(text_hash, schema_gen), false, key, len, schema_gen);
}

static struct prep_stmt *registry_get(struct prep_registry *r, uint64_t h, bool sql, const uint8_t *key, size_t len,
				      uint64_t schema_gen);

struct prep_stmt *prep_registry_get(struct prep_registry *r, bool sql, const uint8_t *key, size_t len,
				    uint64_t schema_gen)
{
	if (len > UINT32_MAX - 1)
		return NULL;
	return registry_get(r, key_hash(sql, key, len, schema_gen), sql, key, len, schema_gen);
}

struct prep_stmt *prep_registry_get_hashed(struct prep_registry *r, uint64_t text_hash, const uint8_t *key,
					   size_t len, uint64_t schema_gen)
{
	if (len > UINT32_MAX - 1)
		return NULL;
	return registry_get(r, gen_hash(text_hash, schema_gen), false, key, len, schema_gen);
}

static struct prep_stmt *registry_get(struct prep_registry *r, uint64_t h, bool sql, const uint8_t *key, size_t len,
				      uint64_t schema_gen)
{
	struct prep_stmt *found = registry_lookup(r, h, sql, key, len, schema_gen);
	if (found) {
		found->refs++;
		return found;
	}
	if (r->count >= r->n_buckets && !registry_grow(r))
		return NULL;
	struct prep_stmt *st = malloc(sizeof *st + len + 1);
	if (!st)
		return NULL;
	memset(st, 0, sizeof *st);
	st->hash = h;
	st->id = ++r->next_id;
	st->refs = 1;
	st->sql = sql;
	st->schema_gen = schema_gen;
	st->key_len = (uint32_t)len;
	memcpy(st->key, key, len);
	st->key[len] = 0;
	st->notifies = sqllex_mentions_notify((const char *)st->key, strnlen((const char *)st->key, len));
	uint32_t k = (uint32_t)(h & (r->n_buckets - 1));
	st->hnext = r->buckets[k];
	r->buckets[k] = st;
	r->count++;
	return st;
}

void prep_stmt_unref(struct prep_registry *r, struct prep_stmt *st)
{
	if (!st || --st->refs > 0)
		return;
	struct prep_stmt **pp = &r->buckets[st->hash & (r->n_buckets - 1)];
	while (*pp && *pp != st)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = st->hnext;
	r->count--;
	free(st->desc);
	free(st);
}

/* ---- texts seen once (prepare_unnamed) ----
 *
 * Set-associative: a text's hash picks a set of PREP_SEEN_WAYS slots; a new
 * text takes the set's least recently used slot. Only hashes are kept (16
 * bytes a text, one allocation per pool, on first use): two texts with the
 * same 64-bit hash make the second look repeated, which costs a server-side
 * statement, never a wrong answer. Hash 0 marks a free slot. */

bool prep_seen_again(struct prep_registry *r, uint64_t text_hash)
{
	if (!r->seen && !(r->seen = calloc(PREP_SEEN_SETS * PREP_SEEN_WAYS, sizeof *r->seen)))
		return false;   /* no memory: the text stays unnamed */
	uint64_t h = text_hash ? text_hash : 1;
	/* the set from the high bits: the low ones pick registry buckets */
	struct prep_seen_slot *set = &r->seen[(size_t)((h >> 40) & (PREP_SEEN_SETS - 1)) * PREP_SEEN_WAYS];
	uint32_t oldest = 0;
	r->seen_clock++;
	for (uint32_t i = 0; i < PREP_SEEN_WAYS; i++) {
		if (set[i].hash == h) {
			set[i].used = r->seen_clock;
			return true;
		}
		if (set[i].used < set[oldest].used)
			oldest = i;
	}
	set[oldest].hash = h;
	set[oldest].used = r->seen_clock;
	return false;
}

/* ---- a client's names: open addressing, deletion by backward shift ---- */

static uint64_t name_hash(const char *s)
{
	return fnv(s, strlen(s), 1469598103934665603ULL);
}

static int cmap_find(const struct prep_cmap *m, const char *name)
{
	if (!m->cap)
		return -1;
	uint32_t mask = m->cap - 1;
	for (uint32_t i = (uint32_t)name_hash(name) & mask;; i = (i + 1) & mask) {
		if (!m->e[i].name)
			return -1;
		if (strcmp(m->e[i].name, name) == 0)
			return (int)i;
	}
}

struct prep_stmt *prep_cmap_get(const struct prep_cmap *m, const char *name)
{
	int i = cmap_find(m, name);
	return i < 0 ? NULL : m->e[i].st;
}

static void cmap_insert(struct prep_cmap_entry *e, uint32_t cap, char *name, struct prep_stmt *st)
{
	uint32_t mask = cap - 1;
	uint32_t i = (uint32_t)name_hash(name) & mask;
	while (e[i].name)
		i = (i + 1) & mask;
	e[i].name = name;
	e[i].st = st;
}

bool prep_cmap_put(struct prep_cmap *m, const char *name, struct prep_stmt *st)
{
	if ((m->n + 1) * 4 > m->cap * 3) {
		uint32_t cap = m->cap ? m->cap * 2 : 8;
		struct prep_cmap_entry *e = calloc(cap, sizeof *e);
		if (!e)
			return false;
		for (uint32_t i = 0; i < m->cap; i++)
			if (m->e[i].name)
				cmap_insert(e, cap, m->e[i].name, m->e[i].st);
		free(m->e);
		m->e = e;
		m->cap = cap;
	}
	char *copy = strdup(name);
	if (!copy)
		return false;
	cmap_insert(m->e, m->cap, copy, st);
	m->n++;
	return true;
}

bool prep_cmap_del(struct prep_cmap *m, struct prep_registry *r, const char *name)
{
	int found = cmap_find(m, name);
	if (found < 0)
		return false;
	uint32_t mask = m->cap - 1, i = (uint32_t)found;
	free(m->e[i].name);
	prep_stmt_unref(r, m->e[i].st);
	m->e[i].name = NULL;
	m->n--;
	/* Shift later members of the cluster back into the hole. */
	for (uint32_t j = (i + 1) & mask; m->e[j].name; j = (j + 1) & mask) {
		uint32_t home = (uint32_t)name_hash(m->e[j].name) & mask;
		bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
		if (movable) {
			m->e[i] = m->e[j];
			m->e[j].name = NULL;
			i = j;
		}
	}
	return true;
}

void prep_cmap_clear(struct prep_cmap *m, struct prep_registry *r)
{
	for (uint32_t i = 0; i < m->cap; i++)
		if (m->e[i].name) {
			free(m->e[i].name);
			prep_stmt_unref(r, m->e[i].st);
		}
	free(m->e);
	m->e = NULL;
	m->cap = m->n = 0;
}

/* ---- a server's statements ---- */

static uint32_t id_slot(uint64_t id, uint32_t mask)
{
	return (uint32_t)((id * 0x9e3779b97f4a7c15ULL) >> 32) & mask;
}

static int sset_find(const struct prep_sset *s, const struct prep_stmt *st)
{
	if (!s->cap)
		return -1;
	uint32_t mask = s->cap - 1;
	for (uint32_t i = id_slot(st->id, mask);; i = (i + 1) & mask) {
		if (!s->e[i].st)
			return -1;
		if (s->e[i].st == st)
			return (int)i;
	}
}

bool prep_sset_has(struct prep_sset *s, const struct prep_stmt *st)
{
	int i = sset_find(s, st);
	if (i < 0)
		return false;
	s->e[i].used = ++s->clock;
	return true;
}

static void sset_insert(struct prep_sset_entry *e, uint32_t cap, struct prep_stmt *st, uint64_t used)
{
	uint32_t mask = cap - 1;
	uint32_t i = id_slot(st->id, mask);
	while (e[i].st)
		i = (i + 1) & mask;
	e[i].st = st;
	e[i].used = used;
}

bool prep_sset_add(struct prep_sset *s, struct prep_stmt *st)
{
	if ((s->n + 1) * 4 > s->cap * 3) {
		uint32_t cap = s->cap ? s->cap * 2 : 16;
		struct prep_sset_entry *e = calloc(cap, sizeof *e);
		if (!e)
			return false;
		for (uint32_t i = 0; i < s->cap; i++)
			if (s->e[i].st)
				sset_insert(e, cap, s->e[i].st, s->e[i].used);
		free(s->e);
		s->e = e;
		s->cap = cap;
	}
	st->refs++;
	st->servers++;
	sset_insert(s->e, s->cap, st, ++s->clock);
	s->n++;
	return true;
}

static void sset_remove_at(struct prep_sset *s, uint32_t i)
{
	uint32_t mask = s->cap - 1;
	s->e[i].st = NULL;
	s->n--;
	for (uint32_t j = (i + 1) & mask; s->e[j].st; j = (j + 1) & mask) {
		uint32_t home = id_slot(s->e[j].st->id, mask);
		bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
		if (movable) {
			s->e[i] = s->e[j];
			s->e[j].st = NULL;
			i = j;
		}
	}
}

void prep_sset_del(struct prep_sset *s, struct prep_registry *r, struct prep_stmt *st)
{
	int i = sset_find(s, st);
	if (i < 0)
		return;
	sset_remove_at(s, (uint32_t)i);
	st->servers--;
	prep_stmt_unref(r, st);
}

struct prep_stmt *prep_sset_pop_lru(struct prep_sset *s)
{
	int best = -1;
	for (uint32_t i = 0; i < s->cap; i++)
		if (s->e[i].st && (best < 0 || s->e[i].used < s->e[best].used))
			best = (int)i;
	if (best < 0)
		return NULL;
	struct prep_stmt *st = s->e[best].st;
	sset_remove_at(s, (uint32_t)best);
	st->servers--;
	return st;
}

void prep_sset_clear(struct prep_sset *s, struct prep_registry *r)
{
	for (uint32_t i = 0; i < s->cap; i++)
		if (s->e[i].st) {
			s->e[i].st->servers--;
			prep_stmt_unref(r, s->e[i].st);
		}
	free(s->e);
	s->e = NULL;
	s->cap = s->n = 0;
	s->gen++;
}

/* Lower-case hex of v without leading zeros at p; returns the end. */
static char *put_hex(char *p, uint64_t v)
{
	char tmp[16];
	int n = 0;
	do {
		tmp[n++] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	while (n > 0)
		*p++ = tmp[--n];
	return p;
}

/* "pgcat_<id>_<gen>" in hex. Made for every Bind of a named statement, so
 * written by hand: snprintf cost ~800 instructions a transaction. */
void prep_gname(char out[PREP_GNAME_MAX], const struct prep_stmt *st, uint32_t gen)
{
	_Static_assert(PREP_GNAME_MAX >= sizeof "pgcat_" + 16 + 1 + 8, "room for two hex numbers");
	memcpy(out, "pgcat_", 6);
	char *p = put_hex(out + 6, st->id);
	*p++ = '_';
	p = put_hex(p, gen);
	*p = '\0';
}

const char *prep_gname_kept(struct prep_stmt *st, uint32_t gen, size_t *len)
{
	if (!st->gname_len || st->gname_gen != gen) {
		prep_gname(st->gname, st, gen);
		st->gname_len = (uint8_t)(strlen(st->gname) + 1);
		st->gname_gen = gen;
	}
	*len = st->gname_len;
	return st->gname;
}

/* ---- FIFOs ---- */

bool prep_ring_push(struct prep_ring *q, const struct prep_pend *p)
{
	if (q->len == q->cap) {
		uint32_t cap = q->cap ? q->cap * 2 : 8;
		struct prep_pend *n = malloc(cap * sizeof *n);
		if (!n)
			return false;
		for (uint32_t i = 0; i < q->len; i++)
			n[i] = q->q[(q->head + i) % q->cap];
		free(q->q);
		q->q = n;
		q->head = 0;
		q->cap = cap;
	}
	q->q[(q->head + q->len) % q->cap] = *p;
	q->len++;
	return true;
}

void prep_pend_release(struct prep_registry *r, struct prep_pend *p)
{
	prep_stmt_unref(r, p->st);
	free(p->cname);
	free(p->repl);
	p->st = NULL;
	p->cname = NULL;
	p->repl = NULL;
}

void prep_ring_clear(struct prep_ring *q, struct prep_registry *r)
{
	while (q->len) {
		prep_pend_release(r, prep_ring_head(q));
		prep_ring_pop(q);
	}
	free(q->q);
	memset(q, 0, sizeof *q);
}
