/* SPDX-License-Identifier: MIT */
/*
 * qstats: counting per query shape, and the sums over workers (qstats.h).
 */
#include "qstats.h"

#include <stdlib.h>
#include <string.h>

#include "texthash.h"

void qstats_local_init(struct qstats_local *l)
{
	for (size_t i = 0; i < QSTATS_SLOTS; i++) {
		l->bucket[i] = l->chain[i] = l->newer[i] = l->older[i] = -1;
	}
	l->newest = l->oldest = -1;
	l->used = l->n_free = 0;
	memset(l->count, 0, sizeof l->count);
}

unsigned qstats_bucket(uint64_t us)
{
	if (us < 2)
		return (unsigned)us;   /* 0 and 1 us: buckets of their own (1, 2, 3 are [1, 2)) */
	unsigned o = 63u - (unsigned)__builtin_clzll(us);
	if (o >= 32)
		return QSTATS_BUCKETS - 1;
	unsigned sub = (unsigned)(((us - (1ull << o)) * QSTATS_SUB) >> o);
	return o * QSTATS_SUB + sub;
}

static uint32_t key_hash(uint32_t pool, uint64_t fingerprint)
{
	return (uint32_t)texthash_mix(fingerprint, pool) % QSTATS_SLOTS;
}

static uint32_t current_gen(const struct qstats_resets *r, uint32_t pool)
{
	return atomic_load_explicit(&r->all, memory_order_relaxed) +
	       atomic_load_explicit(&r->pool[pool % QSTATS_POOLS], memory_order_relaxed);
}

static void lru_unlink(struct qstats_local *l, int32_t i)
{
	if (l->newer[i] >= 0)
		l->older[l->newer[i]] = l->older[i];
	else
		l->newest = l->older[i];
	if (l->older[i] >= 0)
		l->newer[l->older[i]] = l->newer[i];
	else
		l->oldest = l->newer[i];
	l->newer[i] = l->older[i] = -1;
}

static void lru_push(struct qstats_local *l, int32_t i)
{
	l->older[i] = l->newest;
	l->newer[i] = -1;
	if (l->newest >= 0)
		l->newer[l->newest] = i;
	l->newest = i;
	if (l->oldest < 0)
		l->oldest = i;
}

static void index_remove(struct qstats_local *l, const struct qstats_slot *s, int32_t i)
{
	int32_t *pp = &l->bucket[key_hash(s->pool, s->fingerprint)];
	while (*pp >= 0 && *pp != i)
		pp = &l->chain[*pp];
	if (*pp == i)
		*pp = l->chain[i];
	l->chain[i] = -1;
}

static void counters_clear(struct qstats_slot *s)
{
	atomic_store_explicit(&s->calls, 0, memory_order_relaxed);
	atomic_store_explicit(&s->rows, 0, memory_order_relaxed);
	atomic_store_explicit(&s->errors, 0, memory_order_relaxed);
	atomic_store_explicit(&s->exec_us, 0, memory_order_relaxed);
	atomic_store_explicit(&s->wait_us, 0, memory_order_relaxed);
	atomic_store_explicit(&s->shards, 0, memory_order_relaxed);
	atomic_store_explicit(&s->roles, 0, memory_order_relaxed);
	for (size_t b = 0; b < QSTATS_BUCKETS; b++) {
		atomic_store_explicit(&s->exec_hist[b], 0, memory_order_relaxed);
		atomic_store_explicit(&s->wait_hist[b], 0, memory_order_relaxed);
	}
}

/* Slot i's shape goes (counted as dropped unless from before a reset). */
static void drop(struct qstats_table *t, struct qstats_local *l, const struct qstats_resets *resets, int32_t i)
{
	struct qstats_slot *s = &t->slots[i];
	if (s->gen == current_gen(resets, s->pool))
		atomic_fetch_add_explicit(&t->dropped[s->pool], 1, memory_order_relaxed);
	index_remove(l, s, i);
	lru_unlink(l, i);
	l->count[s->pool]--;
}

/* Slot i, dropped, holds no shape (readers skip it: its pool is none). */
static void make_free(struct qstats_table *t, struct qstats_local *l, int32_t i)
{
	struct qstats_slot *s = &t->slots[i];
	uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
	atomic_store_explicit(&s->seq, seq | 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	s->pool = QSTATS_POOLS;
	s->fingerprint = 0;
	s->gen = UINT32_MAX;
	s->text[0] = '\0';
	counters_clear(s);
	atomic_store_explicit(&s->seq, (seq | 1) + 1, memory_order_release);
	l->free_slots[l->n_free++] = i;
}

/* The least recently used slot of pool (-1: none). */
static int32_t oldest_of(const struct qstats_table *t, const struct qstats_local *l, uint32_t pool)
{
	int32_t i = l->oldest;
	while (i >= 0 && t->slots[i].pool != pool)
		i = l->newer[i];
	return i;
}

/* The slot a new shape of pool gets: when the pool has its max, its least
 * recently used one (more of them when a RELOAD lowered the max: the
 * others are freed); else a free one; else, the table being full, the
 * least recently used one of all. */
static int32_t take_slot(struct qstats_table *t, struct qstats_local *l, const struct qstats_resets *resets,
			 uint32_t pool, uint32_t max)
{
	while (l->count[pool] >= max) {
		int32_t i = oldest_of(t, l, pool);
		if (i < 0)
			break;
		drop(t, l, resets, i);
		if (l->count[pool] < max)
			return i;
		make_free(t, l, i);
	}
	if (l->n_free > 0)
		return l->free_slots[--l->n_free];
	if (l->used < QSTATS_SLOTS)
		return (int32_t)l->used++;
	int32_t i = l->oldest;
	if (i >= 0)
		drop(t, l, resets, i);
	return i;
}

int32_t qstats_record(struct qstats_table *t, struct qstats_local *l, const struct qstats_resets *resets,
		      uint32_t pool, uint32_t max, uint64_t fingerprint, const char *text,
		      const struct qstats_sample *sample, int32_t hint)
{
	if (!t || !l || pool >= QSTATS_POOLS)
		return -1;
	if (max < 1)
		max = 1;
	uint32_t gen = current_gen(resets, pool);
	int32_t i;
	if (hint >= 0 && (uint32_t)hint < l->used && t->slots[hint].pool == pool && t->slots[hint].fingerprint == fingerprint) {
		i = hint;   /* (every slot given a shape is in the index under it) */
	} else {
		i = l->bucket[key_hash(pool, fingerprint)];
		while (i >= 0 && !(t->slots[i].pool == pool && t->slots[i].fingerprint == fingerprint))
			i = l->chain[i];
	}
	struct qstats_slot *s;
	if (i < 0) {
		if ((i = take_slot(t, l, resets, pool, max)) < 0)
			return -1;
		uint32_t h = key_hash(pool, fingerprint);
		s = &t->slots[i];
		/* (readers skip the slot while seq is odd) */
		uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
		atomic_store_explicit(&s->seq, seq | 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_release);
		s->pool = pool;
		s->fingerprint = fingerprint;
		s->gen = gen;
		size_t n = text ? strnlen(text, QSTATS_TEXT_MAX - 1) : 0;
		while (n > 0 && text[n] && ((unsigned char)text[n] & 0xc0) == 0x80)
			n--;   /* (cut before a whole character, not inside one) */
		memcpy(s->text, text ? text : "", n);
		s->text[n] = '\0';
		counters_clear(s);
		atomic_store_explicit(&s->seq, (seq | 1) + 1, memory_order_release);
		if (atomic_load_explicit(&t->used, memory_order_relaxed) < l->used)
			atomic_store_explicit(&t->used, l->used, memory_order_release);
		l->chain[i] = l->bucket[h];
		l->bucket[h] = i;
		l->count[pool]++;
		lru_push(l, i);
	} else {
		s = &t->slots[i];
		if (l->newest != i) {
			lru_unlink(l, i);
			lru_push(l, i);
		}
		if (s->gen != gen) {
			/* counted before a RESET QUERIES: afresh */
			uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
			atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
			atomic_thread_fence(memory_order_release);
			counters_clear(s);
			s->gen = gen;
			atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
		}
	}
	/* One writer: plain loads and stores of the counters. */
#define BUMP(field, by) atomic_store_explicit(&(field), atomic_load_explicit(&(field), memory_order_relaxed) + (by), \
					      memory_order_relaxed)
	BUMP(s->calls, 1);
	BUMP(s->rows, sample->rows);
	BUMP(s->errors, sample->errors);
	BUMP(s->exec_us, sample->exec_us);
	BUMP(s->wait_us, sample->wait_us);
	BUMP(s->exec_hist[qstats_bucket(sample->exec_us)], 1);
	BUMP(s->wait_hist[qstats_bucket(sample->wait_us)], 1);
#undef BUMP
	if (sample->shard >= 0) {
		uint64_t bit = 1ull << ((unsigned)sample->shard % 64);
		uint64_t had = atomic_load_explicit(&s->shards, memory_order_relaxed);
		if (!(had & bit))
			atomic_store_explicit(&s->shards, had | bit, memory_order_relaxed);
	}
	uint32_t roles = atomic_load_explicit(&s->roles, memory_order_relaxed);
	if (!(roles & (uint32_t)sample->role))
		atomic_store_explicit(&s->roles, roles | (uint32_t)sample->role, memory_order_relaxed);
	return i;
}

void qstats_local_rebuild(struct qstats_local *l, struct qstats_table *t)
{
	qstats_local_init(l);
	uint32_t used = atomic_load_explicit(&t->used, memory_order_relaxed);
	if (used > QSTATS_SLOTS)
		used = QSTATS_SLOTS;
	for (uint32_t i = 0; i < used; i++) {
		struct qstats_slot *s = &t->slots[i];
		uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
		if ((seq & 1) || s->pool >= QSTATS_POOLS) {
			/* (free, or its shape half written: freed) */
			make_free(t, l, (int32_t)i);
			continue;
		}
		uint32_t h = key_hash(s->pool, s->fingerprint);
		l->chain[i] = l->bucket[h];
		l->bucket[h] = (int32_t)i;
		l->count[s->pool]++;
		lru_push(l, (int32_t)i);
	}
	l->used = used;
}

uint64_t qstats_dropped(struct qstats_table *const *t, size_t n, int pool)
{
	uint64_t sum = 0;
	for (size_t w = 0; w < n; w++) {
		if (!t[w])
			continue;
		for (size_t p = 0; p < QSTATS_POOLS; p++)
			if (pool < 0 || (size_t)pool == p)
				sum += atomic_load_explicit(&t[w]->dropped[p], memory_order_relaxed);
	}
	return sum;
}

void qstats_reset(struct qstats_resets *resets, int pool)
{
	if (pool < 0)
		atomic_fetch_add_explicit(&resets->all, 1, memory_order_relaxed);
	else if (pool < QSTATS_POOLS)
		atomic_fetch_add_explicit(&resets->pool[pool], 1, memory_order_relaxed);
}

/* What ordering and merging need of one slot of one worker's table. */
struct qstats_ref {
	uint32_t pool, worker, slot, seq;
	uint64_t fingerprint, calls, exec_us;
};

/* A shape over every worker: its refs are refs[first .. first + n). */
struct qstats_key {
	uint32_t pool;
	uint64_t fingerprint, calls, exec_us;
	size_t first, n;
};

struct qstats_index {
	struct qstats_ref *refs;
	struct qstats_key *keys;
	size_t n_keys;
};

static int ref_by_key(const void *a, const void *b)
{
	const struct qstats_ref *x = a, *y = b;
	if (x->pool != y->pool)
		return x->pool < y->pool ? -1 : 1;
	if (x->fingerprint != y->fingerprint)
		return x->fingerprint < y->fingerprint ? -1 : 1;
	return 0;
}

static int key_by_exec(const void *a, const void *b)
{
	const struct qstats_key *x = a, *y = b;
	if (x->exec_us != y->exec_us)
		return x->exec_us > y->exec_us ? -1 : 1;
	if (x->pool != y->pool)
		return x->pool < y->pool ? -1 : 1;
	return x->fingerprint < y->fingerprint ? -1 : x->fingerprint > y->fingerprint;
}

/* Slot s's key and totals into ref, when current (of pool, if >= 0) and
 * not being changed. */
static bool read_ref(const struct qstats_slot *s, const struct qstats_resets *resets, int pool,
		     struct qstats_ref *ref)
{
	uint32_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
	if (seq == 0 || (seq & 1))
		return false;
	uint32_t p = s->pool, gen = s->gen;
	uint64_t fp = s->fingerprint;
	uint64_t calls = atomic_load_explicit(&s->calls, memory_order_relaxed);
	uint64_t exec = atomic_load_explicit(&s->exec_us, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq)
		return false;   /* (given to another shape meanwhile: skipped) */
	if (p >= QSTATS_POOLS || (pool >= 0 && p != (uint32_t)pool) || gen != current_gen(resets, p) || !calls)
		return false;
	*ref = (struct qstats_ref){ .pool = p, .seq = seq, .fingerprint = fp, .calls = calls, .exec_us = exec };
	return true;
}

static void index_free(struct qstats_index *ix)
{
	free(ix->refs);
	free(ix->keys);
	*ix = (struct qstats_index){ 0 };
}

/* The current shapes of tables t[0..n) (of pool only, when >= 0), each
 * once with its refs: no row is copied yet. false: out of memory. */
static bool index_build(struct qstats_table *const *t, size_t n, const struct qstats_resets *resets, int pool,
			struct qstats_index *ix)
{
	*ix = (struct qstats_index){ 0 };
	size_t total = 0, k = 0;
	for (size_t w = 0; w < n; w++)
		if (t[w])
			total += atomic_load_explicit(&t[w]->used, memory_order_acquire);
	if (!total)
		return true;
	ix->refs = malloc(total * sizeof *ix->refs);
	if (!ix->refs)
		return false;
	for (size_t w = 0; w < n; w++) {
		if (!t[w])
			continue;
		uint32_t used = atomic_load_explicit(&t[w]->used, memory_order_acquire);
		for (size_t i = 0; i < used && i < QSTATS_SLOTS && k < total; i++)
			if (read_ref(&t[w]->slots[i], resets, pool, &ix->refs[k])) {
				ix->refs[k].worker = (uint32_t)w;
				ix->refs[k].slot = (uint32_t)i;
				k++;
			}
	}
	if (k > 1)
		qsort(ix->refs, k, sizeof *ix->refs, ref_by_key);
	ix->keys = malloc((k ? k : 1) * sizeof *ix->keys);
	if (!ix->keys) {
		index_free(ix);
		return false;
	}
	for (size_t i = 0; i < k; i++) {
		struct qstats_key *key = ix->n_keys ? &ix->keys[ix->n_keys - 1] : NULL;
		if (!key || ref_by_key(&ix->refs[key->first], &ix->refs[i]) != 0) {
			key = &ix->keys[ix->n_keys++];
			*key = (struct qstats_key){ .pool = ix->refs[i].pool, .fingerprint = ix->refs[i].fingerprint, .first = i };
		}
		key->n++;
		key->calls += ix->refs[i].calls;
		key->exec_us += ix->refs[i].exec_us;
	}
	return true;
}

/* Slot s added into r (its first text kept); false: it changed shape
 * since it was indexed (seq moved). */
static bool add_slot(const struct qstats_slot *s, uint32_t seq, struct qstats_row *r)
{
	if (atomic_load_explicit(&s->seq, memory_order_acquire) != seq)
		return false;
	struct qstats_row x;
	x.rows = atomic_load_explicit(&s->rows, memory_order_relaxed);
	x.calls = atomic_load_explicit(&s->calls, memory_order_relaxed);
	x.errors = atomic_load_explicit(&s->errors, memory_order_relaxed);
	x.exec_us = atomic_load_explicit(&s->exec_us, memory_order_relaxed);
	x.wait_us = atomic_load_explicit(&s->wait_us, memory_order_relaxed);
	x.shards = atomic_load_explicit(&s->shards, memory_order_relaxed);
	x.roles = atomic_load_explicit(&s->roles, memory_order_relaxed);
	for (size_t b = 0; b < QSTATS_BUCKETS; b++) {
		x.exec_hist[b] = atomic_load_explicit(&s->exec_hist[b], memory_order_relaxed);
		x.wait_hist[b] = atomic_load_explicit(&s->wait_hist[b], memory_order_relaxed);
	}
	char text[QSTATS_TEXT_MAX];
	if (!r->text[0])
		memcpy(text, s->text, sizeof text);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq)
		return false;
	if (!r->text[0]) {
		memcpy(r->text, text, sizeof r->text);
		r->text[sizeof r->text - 1] = '\0';
	}
	r->calls += x.calls;
	r->rows += x.rows;
	r->errors += x.errors;
	r->exec_us += x.exec_us;
	r->wait_us += x.wait_us;
	r->shards |= x.shards;
	r->roles |= x.roles;
	for (size_t b = 0; b < QSTATS_BUCKETS; b++) {
		r->exec_hist[b] += x.exec_hist[b];
		r->wait_hist[b] += x.wait_hist[b];
	}
	return true;
}

/* Key k's row, summed over its slots; false when none of them held it
 * still. */
static bool key_row(struct qstats_table *const *t, const struct qstats_index *ix, const struct qstats_key *k,
		    struct qstats_row *r)
{
	memset(r, 0, sizeof *r);
	r->pool = k->pool;
	r->fingerprint = k->fingerprint;
	bool any = false;
	for (size_t i = k->first; i < k->first + k->n; i++) {
		const struct qstats_ref *ref = &ix->refs[i];
		if (add_slot(&t[ref->worker]->slots[ref->slot], ref->seq, r))
			any = true;
	}
	return any && r->calls > 0;
}

/* The rows of ix's first max keys into a new array. */
static size_t rows_of(struct qstats_table *const *t, const struct qstats_index *ix, size_t max,
		      struct qstats_row **rows)
{
	*rows = NULL;
	size_t want = ix->n_keys < max ? ix->n_keys : max, m = 0;
	if (!want)
		return 0;
	struct qstats_row *v = malloc(want * sizeof *v);
	if (!v)
		return 0;
	for (size_t i = 0; i < want; i++)
		if (key_row(t, ix, &ix->keys[i], &v[m]))
			m++;
	if (!m) {
		free(v);
		return 0;
	}
	*rows = v;
	return m;
}

size_t qstats_collect(struct qstats_table *const *t, size_t n, const struct qstats_resets *resets, int pool,
		      struct qstats_row **rows)
{
	*rows = NULL;
	struct qstats_index ix;
	if (!index_build(t, n, resets, pool, &ix))
		return 0;
	size_t m = rows_of(t, &ix, ix.n_keys, rows);
	index_free(&ix);
	return m;
}

size_t qstats_collect_top(struct qstats_table *const *t, size_t n, const struct qstats_resets *resets, size_t top,
			  struct qstats_row **rows)
{
	*rows = NULL;
	struct qstats_index ix;
	if (!index_build(t, n, resets, -1, &ix))
		return 0;
	if (ix.n_keys > 1)
		qsort(ix.keys, ix.n_keys, sizeof *ix.keys, key_by_exec);
	size_t m = rows_of(t, &ix, top, rows);
	index_free(&ix);
	return m;
}

uint64_t qstats_quantile(const uint64_t hist[QSTATS_BUCKETS], double q)
{
	uint64_t total = 0;
	for (size_t b = 0; b < QSTATS_BUCKETS; b++)
		total += hist[b];
	if (!total)
		return 0;
	double want = q * (double)total;
	uint64_t seen = 0;
	size_t b = 0;
	for (; b < QSTATS_BUCKETS - 1; b++) {
		seen += hist[b];
		if ((double)seen >= want)
			break;
	}
	unsigned o = (unsigned)b / QSTATS_SUB, sub = (unsigned)b % QSTATS_SUB;
	if (o == 0)
		return b == 0 ? 0 : 1;   /* (0 us, and [1, 2) us) */
	/* the bucket's middle: [2^o (1 + sub/4), 2^o (1 + (sub+1)/4)) */
	uint64_t lo = (1ull << o) + ((uint64_t)sub << o) / QSTATS_SUB;
	uint64_t hi = (1ull << o) + ((uint64_t)(sub + 1) << o) / QSTATS_SUB;
	return lo + (hi - lo) / 2;
}
