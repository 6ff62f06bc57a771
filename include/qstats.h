/* SPDX-License-Identifier: MIT */
/*
 * qstats: statistics per query shape (query_stats = on, per pool; SHOW
 * QUERIES, the top shapes in /metrics; doc/monitoring.md). A shape is a
 * pool and libpg_query's fingerprint of a request's first statement; its
 * row holds the normalised text (constants as $n) once, the calls, rows,
 * errors, execution and wait-for-server times with their histograms, and
 * the shards and roles it ran on.
 *
 * Each worker counts in a table of its own in the shared memory segment
 * (it is the only writer: no lock), readers add up every worker's rows of
 * the same shape. A table holds QSTATS_SLOTS shapes over all pools; a pool
 * keeps at most its query_stats_max of them in each worker, the least
 * recently used dropped (and counted) to make room. A slot being given to
 * another shape is marked (seq odd) so that a reader skips it.
 *
 * RESET QUERIES does not touch the workers' tables: it moves the reset
 * generation (of one pool, or of all), and a row counted before it is
 * neither shown nor added to afterwards (its worker starts it afresh at
 * the shape's next call). Pure data and counting: the caller gives the
 * tables (shm.h) and the worker's own bookkeeping (struct qstats_local).
 */
#ifndef PGCAT_QSTATS_H
#define PGCAT_QSTATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QSTATS_SLOTS 2048            /* shapes per worker, over all pools */
#define QSTATS_POOLS 1024            /* pool numbers (shm.h's SHM_MAX_POOLS) */
#define QSTATS_TEXT_MAX 1024         /* normalised text kept, with its NUL (longer: cut) */
/* Latency histograms: 0 us, 1 us, then 4 buckets per doubling from 2 us,
 * the last one open (from 2^31 us, some 36 minutes): a percentile read
 * from them is within 12.5 % of the true one. */
#define QSTATS_SUB 4
#define QSTATS_BUCKETS (32 * QSTATS_SUB)

enum qstats_role { QSTATS_PRIMARY = 1, QSTATS_REPLICA = 2 };

struct qstats_slot {
	_Atomic uint32_t seq;            /* odd: its shape being changed; 0: never used */
	uint32_t pool;                   /* shm pool number */
	uint32_t gen;                    /* the reset generation it was counted in */
	uint32_t reserved;
	uint64_t fingerprint;
	char text[QSTATS_TEXT_MAX];
	_Atomic uint64_t calls, rows, errors, exec_us, wait_us;
	_Atomic uint64_t shards;         /* bit shard % 64 */
	_Atomic uint32_t roles;          /* enum qstats_role bits */
	_Atomic uint32_t reserved2;
	_Atomic uint64_t exec_hist[QSTATS_BUCKETS], wait_hist[QSTATS_BUCKETS];
};

struct qstats_table {
	/* Slots given a shape so far (readers look no further: the pages
	 * past them are never touched). */
	_Atomic uint32_t used;
	uint32_t reserved;
	_Atomic uint64_t dropped[QSTATS_POOLS];   /* shapes pushed out for room, per pool */
	struct qstats_slot slots[QSTATS_SLOTS];
};

/* One per instance: RESET QUERIES. A slot is current while its gen is
 * all + pool[its pool]. */
struct qstats_resets {
	_Atomic uint32_t all;
	_Atomic uint32_t pool[QSTATS_POOLS];
};

/* The worker's own index of its table (its memory, not shared). */
struct qstats_local {
	int32_t bucket[QSTATS_SLOTS];              /* (pool, fingerprint) hash -> first slot, -1: none */
	int32_t chain[QSTATS_SLOTS];               /* next slot of the same bucket */
	int32_t newer[QSTATS_SLOTS], older[QSTATS_SLOTS];   /* use order, -1 at the ends */
	int32_t newest, oldest;
	uint32_t used;                             /* slots given a shape (at least once) */
	uint32_t count[QSTATS_POOLS];              /* slots per pool */
	int32_t free_slots[QSTATS_SLOTS];          /* slots given up (a pool's max lowered) */
	uint32_t n_free;
};

void qstats_local_init(struct qstats_local *l);

/* One request of a shape. */
struct qstats_sample {
	uint64_t exec_us, wait_us, rows;
	uint32_t errors;
	int shard;                       /* -1: none */
	enum qstats_role role;
};

/* Counts sample under (pool, fingerprint) in t. text: the normalised text,
 * written when the shape gets a slot (NULL: none known). max: the pool's
 * query_stats_max. hint: the slot it was counted in last (checked; -1:
 * none). Returns the slot it is counted in (-1: none). */
int32_t qstats_record(struct qstats_table *t, struct qstats_local *l, const struct qstats_resets *resets,
		      uint32_t pool, uint32_t max, uint64_t fingerprint, const char *text,
		      const struct qstats_sample *sample, int32_t hint);

/* The index of a table a worker of this number filled before it was
 * restarted: its shapes are counted on (a slot its writer left half
 * written is emptied). */
void qstats_local_rebuild(struct qstats_local *l, struct qstats_table *t);

/* Shapes dropped for room in pool (< 0: in every pool), over tables
 * t[0..n). */
uint64_t qstats_dropped(struct qstats_table *const *t, size_t n, int pool);

/* RESET QUERIES: of pool (< 0: of every pool). */
void qstats_reset(struct qstats_resets *resets, int pool);

/* A shape's totals over several workers. */
struct qstats_row {
	uint32_t pool;
	uint64_t fingerprint;
	char text[QSTATS_TEXT_MAX];
	uint64_t calls, rows, errors, exec_us, wait_us, shards;
	uint32_t roles;
	uint64_t exec_hist[QSTATS_BUCKETS], wait_hist[QSTATS_BUCKETS];
};

/* The current rows of tables t[0..n) (of pool only, when pool >= 0), the
 * same shape's added up, into a new array (*rows, free()); how many.
 * Unordered. The shapes are found and merged first, from a few fields of
 * each slot; a row (3 kB, with its histograms) is copied only for what
 * is returned. */
size_t qstats_collect(struct qstats_table *const *t, size_t n, const struct qstats_resets *resets, int pool,
		      struct qstats_row **rows);
/* The same for the top shapes by total execution time, the largest
 * first, at most top of them. */
size_t qstats_collect_top(struct qstats_table *const *t, size_t n, const struct qstats_resets *resets, size_t top,
			  struct qstats_row **rows);

/* The q-quantile (0 < q <= 1) of a histogram, in us (0: empty): the
 * middle of the bucket it falls in. */
uint64_t qstats_quantile(const uint64_t hist[QSTATS_BUCKETS], double q);

/* The bucket of a time in us (for the tests). */
unsigned qstats_bucket(uint64_t us);

#endif
