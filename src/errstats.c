/* SPDX-License-Identifier: MIT */
/*
 * errstats: the counting and the summing of errors by SQLSTATE
 * (errstats.h).
 */
#include "errstats.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint32_t mix(uint32_t h, const char *s)
{
	/* FNV-1a, with a separator so that ("ab","c") and ("a","bc") differ */
	for (; s && *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return (h ^ 0xffu) * 16777619u;
}

static void copy_name(char *dst, size_t cap, const char *src)
{
	size_t n = src ? strnlen(src, cap - 1) : 0;
	if (n)
		memcpy(dst, src, n);
	dst[n] = '\0';
}

static bool same_key(const struct errstats_slot *s, const char *database, const char *user, const char *sqlstate,
		     uint8_t source)
{
	return s->source == source && strcmp(s->sqlstate, sqlstate) == 0 && strcmp(s->database, database) == 0 &&
	       strcmp(s->user, user) == 0;
}

void errstats_count(struct errstats_table *t, const char *database, const char *user, const char *sqlstate,
		    enum errstats_source source)
{
	if (!t)
		return;
	/* The key as it is stored (cut names, a five-character code). */
	char db[ERRSTATS_NAME_MAX], us[ERRSTATS_NAME_MAX], code[6];
	copy_name(db, sizeof db, database);
	copy_name(us, sizeof us, user);
	copy_name(code, sizeof code, sqlstate);
	uint32_t h = mix(mix(mix(2166136261u, db), us), code) ^ (uint32_t)source;
	for (size_t i = 0; i < ERRSTATS_SLOTS; i++) {
		struct errstats_slot *s = &t->slots[(h + i) % ERRSTATS_SLOTS];
		if (!atomic_load_explicit(&s->used, memory_order_relaxed)) {
			/* (this worker alone writes its table: the key, then
			 * used, which readers look at first) */
			s->source = (uint8_t)source;
			memcpy(s->sqlstate, code, sizeof code);
			memcpy(s->database, db, sizeof db);
			memcpy(s->user, us, sizeof us);
			atomic_store_explicit(&s->count, 1, memory_order_relaxed);
			atomic_store_explicit(&s->used, 1, memory_order_release);
			return;
		}
		if (same_key(s, db, us, code, (uint8_t)source)) {
			atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
			return;
		}
	}
	atomic_fetch_add_explicit(&t->untracked, 1, memory_order_relaxed);
}

static int by_key(const void *a, const void *b)
{
	const struct errstats_row *x = a, *y = b;
	int d = strcmp(x->database, y->database);
	if (!d)
		d = strcmp(x->user, y->user);
	if (!d)
		d = strcmp(x->sqlstate, y->sqlstate);
	if (!d)
		d = (int)x->source - (int)y->source;
	return d;
}

static int by_count(const void *a, const void *b)
{
	const struct errstats_row *x = a, *y = b;
	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return by_key(a, b);
}

size_t errstats_collect(struct errstats_table *const *t, size_t n, struct errstats_row *rows, size_t max,
			uint64_t *untracked)
{
	*untracked = 0;
	size_t all = n * ERRSTATS_SLOTS;
	struct errstats_row *v = calloc(all ? all : 1, sizeof *v);
	if (!v)
		return 0;
	size_t k = 0;
	for (size_t w = 0; w < n; w++) {
		if (!t[w])
			continue;
		*untracked += atomic_load_explicit(&t[w]->untracked, memory_order_relaxed);
		for (size_t i = 0; i < ERRSTATS_SLOTS; i++) {
			const struct errstats_slot *s = &t[w]->slots[i];
			if (!atomic_load_explicit(&s->used, memory_order_acquire))
				continue;
			struct errstats_row *r = &v[k++];
			memcpy(r->database, s->database, sizeof r->database);
			memcpy(r->user, s->user, sizeof r->user);
			memcpy(r->sqlstate, s->sqlstate, sizeof r->sqlstate);
			r->database[sizeof r->database - 1] = r->user[sizeof r->user - 1] = r->sqlstate[5] = '\0';
			r->source = s->source;
			r->count = atomic_load_explicit(&s->count, memory_order_relaxed);
		}
	}
	/* The same key in several workers' tables: one row. */
	qsort(v, k, sizeof *v, by_key);
	size_t m = 0;
	for (size_t i = 0; i < k; i++) {
		if (m > 0 && by_key(&v[m - 1], &v[i]) == 0)
			v[m - 1].count += v[i].count;
		else
			v[m++] = v[i];
	}
	qsort(v, m, sizeof *v, by_count);
	size_t out = m < max ? m : max;
	memcpy(rows, v, out * sizeof *v);
	free(v);
	return out;
}

const char *errstats_source_name(uint8_t source)
{
	return source == ERRSTATS_PGCAT ? "pgcat" : "server";
}
