/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the cross-shard planners and value routines read SQL
 * and values clients and servers send (src/merge_plan.c, src/merge.c, src/insert_split.c,
 * src/copy_route.c, src/broadcast.c, src/pgvalue.c). Input: byte 0 picks a type and format
 * for the value routines, then text up to the first NUL is SQL, and what
 * follows is two values split at the next NUL. Invariants: a plan's
 * rewritten text is a string of its own length; a split INSERT's parts are
 * strings no longer than the statement plus separators; results of the
 * value routines fit the buffer they were given; comparing a value with
 * itself gives 0 whenever it is readable. The two values are also merged
 * as two shards' rows (whatever their bytes: a server's DataRows), whole
 * and with an Execute's row limit: the merge ends, and says why if it
 * refuses.
 */
#include "broadcast.h"
#include "buf.h"
#include "copy_route.h"
#include "insert_split.h"
#include "merge.h"
#include "pgvalue.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, \
				__FILE__, __LINE__);                             \
			abort();                                                 \
		}                                                                \
	} while (0)

static const struct router_table tables[] = { { .schema = NULL, .table = "items", .column = "id" }, { .schema = "s", .table = "t", .column = "k" } };
static const struct router_rules rules = { .sharded = tables, .n_sharded = 2, .max_length = 100000 };
static const uint32_t oids[] = { 16, 19, 20, 21, 23, 25, 26, 700, 701, 1042, 1043, 1082, 1114, 1184, 1700, 2950 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 8192)
		return 0;
	uint32_t oid = oids[data[0] % (sizeof oids / sizeof oids[0])];
	int16_t format = (int16_t)(data[0] >> 7);
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	const uint8_t *nul = memchr(p, 0, n);
	size_t sql_len = nul ? (size_t)(nul - p) : n;
	char *sql = malloc(sql_len + 1);
	if (!sql)
		return 0;
	memcpy(sql, p, sql_len);
	sql[sql_len] = '\0';

	struct merge_plan plan;
	char why[MERGE_WHY];
	bool planned = merge_plan_build(sql, sql_len, &plan, why);
	if (planned) {
		size_t l;
		char *shard = merge_plan_shard_sql(&plan, sql, sql_len, &l);
		if (shard) {
			CHECK(strlen(shard) == l);
			free(shard);
		}
	} else {
		CHECK(strlen(why) < MERGE_WHY);
	}
	struct insert_split split;
	if (insert_split_build(sql, sql_len, &rules, SHARDING_PG_BIGINT_HASH, 3, NULL, &split, why)) {
		for (int s = 0; s < 3; s++)
			if (split.sql[s])
				CHECK(strlen(split.sql[s]) == split.len[s] && split.len[s] <= sql_len + 2 * split.rows[s]);
		insert_split_free(&split);
	}
	bool outside_tx;
	if (!broadcast_write_check(sql, sql_len, &rules, &outside_tx, why))
		CHECK(strlen(why) < MERGE_WHY && why[0]);
	struct copy_route cr;
	if (copy_route_read(sql, sql_len, &rules, &cr, why) == COPY_ROUTE_SPLIT) {
		char q[1024];
		(void)copy_route_position_query(&cr, q, sizeof q);
	}
	free(sql);

	if (nul) {
		const uint8_t *a = nul + 1, *end = p + n;
		const uint8_t *sep = memchr(a, 0, (size_t)(end - a));
		const uint8_t *b = sep ? sep + 1 : a;
		size_t alen = sep ? (size_t)(sep - a) : (size_t)(end - a), blen = (size_t)(end - b);
		int c;
		if (pgvalue_compare(oid, format, a, alen, a, alen, (locale_t)0, &c))
			CHECK(c == 0);
		(void)pgvalue_compare(oid, format, a, alen, b, blen, (locale_t)0, &c);
		uint8_t out[PGVALUE_NUMERIC_MAX];
		size_t ol = 0;
		if (pgvalue_add(oid, format, a, alen, b, blen, out, sizeof out, &ol))
			CHECK(ol <= sizeof out);
		if (pgvalue_avg(oid == 701 ? 701 : 1700, format, oid, format, a, alen, (int64_t)(blen % 7) + 1, out,
				sizeof out, &ol))
			CHECK(ol <= sizeof out);
		if (planned) {
			/* a and b as two shards' rows, of the plan's columns (all of the type above) */
			struct merge_column cols[MERGE_MAX_AGGS];
			int n_cols = plan.aggregates || plan.grouped ? plan.n_cols : 2;
			for (int i = 0; i < n_cols && i < MERGE_MAX_AGGS; i++)
				cols[i] = (struct merge_column){ "x", oid, format };
			struct merge_shard shards[2] = { { a, alen, 0 }, { b, blen, 0 } };
			struct buf *merged = buf_new(BUF_SMALL);
			if (merged) {
				for (uint32_t max_rows = 0; max_rows < 3; max_rows += 2) {
					if (!merge_rows(&plan, cols, n_cols, shards, 2, (locale_t)0, max_rows, merged, why))
						CHECK(strlen(why) < MERGE_WHY && why[0]);
				}
				buf_free(merged);
			}
		}
	}
	return 0;
}
