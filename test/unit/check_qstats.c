/* SPDX-License-Identifier: MIT */
/* qstats and qshape: requests counted per (pool, fingerprint) in a
 * worker's table, summed over workers; histograms and their percentiles;
 * a pool's max and the least recently used shape dropped (and counted);
 * RESET QUERIES by generation; a restarted worker's index rebuilt. Shapes:
 * one key for texts that differ in constants only, libpg_query's text
 * made safe, a client's statement names; the rows of a CommandComplete. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "qshape.h"
#include "qstats.h"
#include "slowlog.h"

struct world {
	struct qstats_table *t[2];
	struct qstats_local *l[2];
	struct qstats_resets *resets;
};

static void world_init(struct world *w)
{
	for (int i = 0; i < 2; i++) {
		w->t[i] = calloc(1, sizeof *w->t[i]);
		w->l[i] = malloc(sizeof *w->l[i]);
		ck_assert_ptr_nonnull(w->t[i]);
		ck_assert_ptr_nonnull(w->l[i]);
		qstats_local_init(w->l[i]);
	}
	w->resets = calloc(1, sizeof *w->resets);
	ck_assert_ptr_nonnull(w->resets);
}

static void world_free(struct world *w)
{
	for (int i = 0; i < 2; i++) {
		free(w->t[i]);
		free(w->l[i]);
	}
	free(w->resets);
}

static void rec(struct world *w, int worker, uint32_t pool, uint32_t max, uint64_t fp, uint64_t exec_us)
{
	struct qstats_sample s = { .exec_us = exec_us, .wait_us = 10, .rows = 2, .errors = exec_us > 1000000,
				   .shard = worker, .role = worker ? QSTATS_REPLICA : QSTATS_PRIMARY };
	char text[32];
	snprintf(text, sizeof text, "SELECT $%llu", (unsigned long long)fp);
	qstats_record(w->t[worker], w->l[worker], w->resets, pool, max, fp, text, &s, -1);
}

static const struct qstats_row *find(const struct qstats_row *rows, size_t n, uint32_t pool, uint64_t fp)
{
	for (size_t i = 0; i < n; i++)
		if (rows[i].pool == pool && rows[i].fingerprint == fp)
			return &rows[i];
	return NULL;
}

START_TEST(test_buckets_and_quantiles)
{
	ck_assert_uint_eq(qstats_bucket(0), 0);
	ck_assert_uint_eq(qstats_bucket(1), 1);
	ck_assert_uint_eq(qstats_bucket(2), QSTATS_SUB);
	ck_assert_uint_lt(qstats_bucket(1000), qstats_bucket(1300));
	ck_assert_uint_eq(qstats_bucket(UINT64_MAX), QSTATS_BUCKETS - 1);
	uint64_t hist[QSTATS_BUCKETS] = { 0 };
	ck_assert_uint_eq(qstats_quantile(hist, 0.5), 0);
	hist[qstats_bucket(0)] = 10;                /* waits of 0 us: 0, not 1 */
	ck_assert_uint_eq(qstats_quantile(hist, 0.99), 0);
	hist[qstats_bucket(0)] = 0;
	/* 90 requests of 100 us, 9 of 10 ms, 1 of 1 s */
	hist[qstats_bucket(100)] += 90;
	hist[qstats_bucket(10000)] += 9;
	hist[qstats_bucket(1000000)] += 1;
	uint64_t p50 = qstats_quantile(hist, 0.50), p95 = qstats_quantile(hist, 0.95), p99 = qstats_quantile(hist, 0.99);
	uint64_t p100 = qstats_quantile(hist, 1.0);
	ck_assert(p50 >= 88 && p50 <= 113);        /* within 12.5 % */
	ck_assert(p95 >= 8750 && p95 <= 11250);
	ck_assert(p99 >= 8750 && p99 <= 11250);    /* the 99th of 100 is still a 10 ms one */
	ck_assert(p100 >= 875000 && p100 <= 1125000);
	/* every value: its bucket's middle within 12.5 % */
	for (uint64_t us = 2; us < 5000000; us = us * 5 / 4 + 1) {
		uint64_t h[QSTATS_BUCKETS] = { 0 };
		h[qstats_bucket(us)] = 1;
		uint64_t q = qstats_quantile(h, 0.5);
		ck_assert_msg(q * 8 >= us * 7 && q * 8 <= us * 9, "%llu -> %llu", (unsigned long long)us,
			      (unsigned long long)q);
	}
}
END_TEST

START_TEST(test_record_and_collect_over_workers)
{
	struct world w;
	world_init(&w);
	for (int i = 0; i < 3; i++)
		rec(&w, 0, 5, 100, 0xabc, 100);
	rec(&w, 1, 5, 100, 0xabc, 300);              /* another worker, same shape */
	rec(&w, 1, 6, 100, 0xabc, 2000000);          /* same fingerprint, another pool */
	struct qstats_row *rows;
	size_t n = qstats_collect(w.t, 2, w.resets, -1, &rows);
	ck_assert_uint_eq(n, 2);
	const struct qstats_row *r = find(rows, n, 5, 0xabc);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->calls, 4);
	ck_assert_uint_eq(r->rows, 8);
	ck_assert_uint_eq(r->exec_us, 600);
	ck_assert_uint_eq(r->wait_us, 40);
	ck_assert_uint_eq(r->errors, 0);
	ck_assert_uint_eq(r->shards, 3);             /* shards 0 and 1 */
	ck_assert_uint_eq(r->roles, QSTATS_PRIMARY | QSTATS_REPLICA);
	ck_assert_str_eq(r->text, "SELECT $2748");
	r = find(rows, n, 6, 0xabc);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->errors, 1);
	free(rows);
	n = qstats_collect(w.t, 2, w.resets, 6, &rows);   /* one pool's */
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(rows[0].pool, 6);
	free(rows);
	n = qstats_collect_top(w.t, 2, w.resets, 1, &rows);   /* the top one: pool 6's, 2 s */
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(rows[0].pool, 6);
	ck_assert_uint_eq(rows[0].exec_us, 2000000);
	free(rows);
	world_free(&w);
}
END_TEST

START_TEST(test_max_per_pool_drops_least_recently_used)
{
	struct world w;
	world_init(&w);
	for (uint64_t fp = 1; fp <= 4; fp++)
		rec(&w, 0, 1, 3, fp, 10);
	rec(&w, 0, 2, 3, 99, 10);                    /* another pool: its own room */
	rec(&w, 0, 1, 3, 3, 10);                     /* 3 used again; 2 is the oldest */
	rec(&w, 0, 1, 3, 5, 10);                     /* drops 2 */
	struct qstats_row *rows;
	size_t n = qstats_collect(w.t, 1, w.resets, 1, &rows);
	ck_assert_uint_eq(n, 3);
	ck_assert_ptr_nonnull(find(rows, n, 1, 3));
	ck_assert_ptr_nonnull(find(rows, n, 1, 4));
	ck_assert_ptr_nonnull(find(rows, n, 1, 5));
	ck_assert_ptr_null(find(rows, n, 1, 2));
	free(rows);
	ck_assert_uint_eq(qstats_dropped(w.t, 1, 1), 2);   /* 1, then 2 */
	ck_assert_uint_eq(qstats_dropped(w.t, 1, 2), 0);
	n = qstats_collect(w.t, 1, w.resets, 2, &rows);
	ck_assert_uint_eq(n, 1);
	free(rows);
	/* A RELOAD lowers the max from 3 to 1: the pool shrinks at its next
	 * new shape, the slots it gave up are used again. */
	rec(&w, 0, 1, 1, 6, 10);
	n = qstats_collect(w.t, 1, w.resets, 1, &rows);
	ck_assert_uint_eq(n, 1);
	ck_assert_ptr_nonnull(find(rows, n, 1, 6));
	free(rows);
	ck_assert_uint_eq(qstats_dropped(w.t, 1, 1), 5);
	uint32_t used = w.l[0]->used;
	rec(&w, 0, 3, 10, 77, 10);                   /* another pool: a freed slot, not a new one */
	rec(&w, 0, 3, 10, 78, 10);
	ck_assert_uint_eq(w.l[0]->used, used);
	n = qstats_collect(w.t, 1, w.resets, -1, &rows);
	ck_assert_uint_eq(n, 4);                     /* pool 1: 6; pool 2: 99; pool 3: 77, 78 */
	free(rows);
	/* A full table: the least recently used of all goes. */
	struct world f;
	world_init(&f);
	for (uint64_t fp = 1; fp <= QSTATS_SLOTS; fp++)
		rec(&f, 0, (uint32_t)(fp % 2), QSTATS_SLOTS, fp, 10);
	rec(&f, 0, 7, QSTATS_SLOTS, 1000000, 10);
	n = qstats_collect(f.t, 1, f.resets, -1, &rows);
	ck_assert_uint_eq(n, QSTATS_SLOTS);
	ck_assert_ptr_null(find(rows, n, 1, 1));
	ck_assert_ptr_nonnull(find(rows, n, 7, 1000000));
	free(rows);
	world_free(&f);
	world_free(&w);
}
END_TEST

START_TEST(test_reset_and_rebuild)
{
	struct world w;
	world_init(&w);
	rec(&w, 0, 1, 10, 11, 10);
	rec(&w, 0, 2, 10, 22, 10);
	qstats_reset(w.resets, 1);
	struct qstats_row *rows;
	size_t n = qstats_collect(w.t, 1, w.resets, -1, &rows);
	ck_assert_uint_eq(n, 1);                     /* pool 1's gone from view */
	ck_assert_uint_eq(rows[0].pool, 2);
	free(rows);
	rec(&w, 0, 1, 10, 11, 10);                   /* afresh */
	n = qstats_collect(w.t, 1, w.resets, 1, &rows);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(rows[0].calls, 1);
	free(rows);
	qstats_reset(w.resets, -1);
	ck_assert_uint_eq(qstats_collect(w.t, 1, w.resets, -1, &rows), 0);
	ck_assert_ptr_null(rows);
	rec(&w, 0, 2, 10, 22, 10);
	/* The worker restarts: its index made again from its table. */
	struct qstats_local *l = malloc(sizeof *l);
	ck_assert_ptr_nonnull(l);
	qstats_local_rebuild(l, w.t[0]);
	int32_t slot = qstats_record(w.t[0], l, w.resets, 2, 10, 22, "x",
				     &(struct qstats_sample){ .exec_us = 5, .shard = -1, .role = QSTATS_PRIMARY }, -1);
	ck_assert_int_ge(slot, 0);
	/* the slot as a hint: the same; a wrong hint is not taken */
	ck_assert_int_eq(qstats_record(w.t[0], l, w.resets, 2, 10, 22, "x",
				       &(struct qstats_sample){ .shard = -1, .role = QSTATS_PRIMARY }, slot), slot);
	ck_assert_int_eq(qstats_record(w.t[0], l, w.resets, 2, 10, 22, "x",
				       &(struct qstats_sample){ .shard = -1, .role = QSTATS_PRIMARY }, slot + 1), slot);
	n = qstats_collect(w.t, 1, w.resets, 2, &rows);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(rows[0].calls, 4);         /* the same slot, not a second one */
	free(rows);
	free(l);
	world_free(&w);
}
END_TEST

START_TEST(test_shape_keys_and_descriptions)
{
	const char *a = "SELECT * FROM t WHERE id = 42 AND name = 'x'";
	const char *b = "SELECT * FROM t WHERE id = 7 AND name = 'secret'";
	const char *c = "SELECT * FROM u WHERE id = 7 AND name = 'secret'";
	ck_assert_uint_eq(qshape_key(a, strlen(a)), qshape_key(b, strlen(b)));
	ck_assert_uint_ne(qshape_key(a, strlen(a)), qshape_key(c, strlen(c)));
	struct qshape_desc d;
	qshape_describe(b, &d);
	ck_assert_int_eq(d.why, QSHAPE_TEXT_OK);
	ck_assert_str_eq(d.text, "SELECT * FROM t WHERE id = $1 AND name = $2");
	ck_assert_uint_ne(d.fingerprint, 0);
	ck_assert_uint_eq(strlen(d.fingerprint_hex), 16);
	qshape_desc_free(&d);
	qshape_describe("SELECT 1 /* key=hunter2 */ FROM t", &d);
	ck_assert_int_eq(d.why, QSHAPE_TEXT_OK);
	ck_assert_ptr_null(strstr(d.text, "hunter2"));
	qshape_desc_free(&d);
	qshape_describe("NOTIFY chan, 'payload'", &d);
	ck_assert_int_eq(d.why, QSHAPE_TEXT_CONSTANTS);
	ck_assert_ptr_null(d.text);
	qshape_desc_free(&d);
	qshape_describe("SELEC 1", &d);
	ck_assert_int_eq(d.why, QSHAPE_TEXT_NOT_SQL);
	ck_assert_uint_eq(d.fingerprint, 0);
	qshape_desc_free(&d);
	/* The cache: described once per key, then found without text. */
	struct qshape_cache *cache = qshape_cache_new(4);
	ck_assert_ptr_nonnull(cache);
	uint64_t k = qshape_key(a, strlen(a));
	ck_assert_ptr_null(qshape_cache_get(cache, k, NULL));
	const struct qshape_desc *got = qshape_cache_get(cache, k, a);
	ck_assert_ptr_nonnull(got);
	uint64_t fp = got->fingerprint;
	got = qshape_cache_get(cache, k, NULL);
	ck_assert_ptr_nonnull(got);
	ck_assert_uint_eq(got->fingerprint, fp);
	for (int i = 0; i < 64; i++) {               /* others push it out */
		char q[64];
		snprintf(q, sizeof q, "SELECT col%d FROM t", i);
		ck_assert_ptr_nonnull(qshape_cache_get(cache, qshape_key(q, strlen(q)), q));
	}
	ck_assert_ptr_null(qshape_cache_get(cache, k, NULL));
	qshape_cache_free(cache);
	/* A client's statement names. */
	struct qshape_names *m = NULL;
	ck_assert_uint_eq(qshape_names_get(m, "s1", 2), 0);
	for (int i = 0; i < 100; i++) {
		char name[16];
		snprintf(name, sizeof name, "s%d", i);
		ck_assert(qshape_names_put(&m, name, strlen(name), (uint64_t)i + 1));
	}
	ck_assert(qshape_names_put(&m, "s7", 2, 700));   /* parsed again */
	ck_assert_uint_eq(qshape_names_get(m, "s7", 2), 700);
	ck_assert_uint_eq(qshape_names_get(m, "s99", 3), 100);
	ck_assert_uint_eq(qshape_names_get(m, "", 0), 0);
	ck_assert(qshape_names_put(&m, "", 0, 5));        /* the unnamed statement */
	ck_assert_uint_eq(qshape_names_get(m, "", 0), 5);
	for (int i = 0; i < 100; i += 2) {               /* Closes: half go, the rest stay found */
		char name[16];
		snprintf(name, sizeof name, "s%d", i);
		qshape_names_del(m, name, strlen(name));
	}
	for (int i = 0; i < 100; i++) {
		char name[16];
		snprintf(name, sizeof name, "s%d", i);
		ck_assert_uint_eq(qshape_names_get(m, name, strlen(name)), i % 2 ? (i == 7 ? 700 : (uint64_t)i + 1) : 0);
	}
	qshape_names_del(m, "nope", 4);
	for (int i = 0; i < QSHAPE_NAMES_MAX + 10; i++) {   /* never closed: the map starts over, never refuses */
		char name[24];
		snprintf(name, sizeof name, "roll%d", i);
		ck_assert(qshape_names_put(&m, name, strlen(name), 9));
	}
	ck_assert_uint_eq(qshape_names_get(m, "roll0", 5), 0);
	ck_assert_uint_eq(qshape_names_get(m, "roll2057", 8), 9);
	qshape_names_free(m);
}
END_TEST

START_TEST(test_rows_of_command_tags)
{
	struct slowlog_req r = { 0 };
	static const struct { const char *tag; uint64_t rows; } cases[] = {
		{ "SELECT 5", 5 }, { "INSERT 0 3", 3 }, { "UPDATE 12", 12 }, { "DELETE 0", 0 }, { "MERGE 2", 2 },
		{ "FETCH 4", 4 }, { "MOVE 9", 0 + 9 }, { "COPY 1000", 1000 }, { "BEGIN", 0 }, { "CREATE TABLE", 0 },
		{ "SELECT", 0 }, { "SELECT 99999999999999999999999", 0 }, { "SELECTX 5", 0 }, { "UPDATE 5x", 0 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		r.rows = 0;
		slowlog_note_complete(&r, cases[i].tag, strlen(cases[i].tag) + 1);   /* with its NUL */
		ck_assert_msg(r.rows == cases[i].rows, "%s: %llu", cases[i].tag, (unsigned long long)r.rows);
	}
	r.rows = 0;
	slowlog_note_complete(&r, "SELECT 5", 8);   /* a cut tag: no NUL */
	ck_assert_uint_eq(r.rows, 5);
}
END_TEST

Suite *qstats_suite(void)
{
	Suite *s = suite_create("qstats");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_buckets_and_quantiles);
	tcase_add_test(tc, test_record_and_collect_over_workers);
	tcase_add_test(tc, test_max_per_pool_drops_least_recently_used);
	tcase_add_test(tc, test_reset_and_rebuild);
	tcase_add_test(tc, test_shape_keys_and_descriptions);
	tcase_add_test(tc, test_rows_of_command_tags);
	suite_add_tcase(s, tc);
	return s;
}
