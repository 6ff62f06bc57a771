/* SPDX-License-Identifier: MIT */
/* Unit tests for the cross-shard pieces: the merge plan (merge_plan.c) and
 * the merge of rows (merge.c, merge_stream.c), the multi-row INSERT split (insert_split.c), the COPY
 * statement reader (copy_route.c) and the COPY row splitter (copysplit.c).
 * Shards of bigint keys with pg_bigint_hash over 3 shards are PostgreSQL's
 * (check_sharding.c): 7 -> 1, 42 -> 0, 1234 -> 0, -1 -> 2. */
#include "check_suites.h"

#include <event2/buffer.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "copy_route.h"
#include "copysplit.h"
#include "insert_split.h"
#include "merge.h"
#include "proto.h"

static const struct router_table tables[] = { { .schema = NULL, .table = "items", .column = "id" } };
static const struct router_rules rules = { .sharded = tables, .n_sharded = 1, .max_length = 100000 };

/* ---- the plan ---- */

START_TEST(plan_order_limit_offset)
{
	struct merge_plan p;
	char why[MERGE_WHY];
	const char *sql = "SELECT id, v AS name FROM items ORDER BY 2 DESC, id NULLS FIRST LIMIT 10 OFFSET 5";
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	ck_assert(!p.aggregates);
	ck_assert_int_eq(p.n_sort, 2);
	ck_assert_int_eq(p.sort[0].position, 2);
	ck_assert(p.sort[0].desc && p.sort[0].nulls_first);   /* DESC: NULLS FIRST by default */
	ck_assert_str_eq(p.sort[1].name, "id");
	ck_assert(!p.sort[1].desc && p.sort[1].nulls_first);
	ck_assert(p.has_limit && p.limit == 10 && p.has_offset && p.offset == 5);
	ck_assert(merge_plan_rewrites(&p));
	size_t n;
	char *shard = merge_plan_shard_sql(&p, sql, strlen(sql), &n);
	ck_assert_str_eq(shard, "SELECT id, v AS name FROM items ORDER BY 2 DESC, id NULLS FIRST LIMIT 15 OFFSET 0");
	ck_assert_uint_eq(n, strlen(shard));
	free(shard);

	/* without OFFSET the text is left alone; ASC keeps NULLS LAST */
	sql = "select id from items order by id limit 3";
	ck_assert(merge_plan_build(sql, strlen(sql), &p, why));
	ck_assert(!merge_plan_rewrites(&p));
	ck_assert(!p.sort[0].nulls_first);
	/* OFFSET alone: the shards return everything */
	sql = "select id from items order by id offset 7";
	ck_assert(merge_plan_build(sql, strlen(sql), &p, why));
	shard = merge_plan_shard_sql(&p, sql, strlen(sql), &n);
	ck_assert_str_eq(shard, "select id from items order by id offset 0");
	free(shard);
	/* FETCH FIRST, COLLATE "C" */
	sql = "select v from items order by v collate \"C\" fetch first 2 rows only";
	ck_assert(merge_plan_build(sql, strlen(sql), &p, why));
	ck_assert(p.sort[0].bytewise && p.has_limit && p.limit == 2);
	/* parameters stay in the shards' text, their values come from the Bind */
	sql = "select id from items order by id limit $1 offset $12";
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	ck_assert(p.limit_param == 1 && p.offset_param == 12);
	shard = merge_plan_shard_sql(&p, sql, strlen(sql), &n);
	ck_assert_str_eq(shard, "select id from items order by id limit ($1::bigint + $12::bigint) offset (0 * $12::bigint)");
	free(shard);
	ck_assert(merge_plan_bind(&p, false, 5, false, 7));
	ck_assert(p.has_limit && p.limit == 5 && p.has_offset && p.offset == 7);
	ck_assert(!merge_plan_bind(&p, false, -1, true, 0));   /* PostgreSQL's own error */
	sql = "select id from items order by id limit $1";
	ck_assert(merge_plan_build(sql, strlen(sql), &p, why));
	ck_assert(!merge_plan_rewrites(&p));
	ck_assert(merge_plan_bind(&p, true, 0, true, 0) && !p.has_limit);   /* LIMIT NULL: all */
	sql = "select n, count(*) from items group by n limit $1";
	ck_assert(!merge_plan_build(sql, strlen(sql), &p, why));
	/* avg() alone: sum and count of its argument too, after the select list */
	sql = "SELECT n, avg( \"x\" + (1) ) /* from */ FROM items i JOIN t USING (id) GROUP BY 1 LIMIT 3 OFFSET 1";
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	ck_assert(p.n_hidden == 1 && p.n_visible == 2 && p.n_cols == 4);
	ck_assert(p.avg_sum[1] == 2 && p.avg_count[1] == 3);
	shard = merge_plan_shard_sql(&p, sql, strlen(sql), &n);
	ck_assert(shard != NULL);
	ck_assert_str_eq(shard, "SELECT n, avg( \"x\" + (1) ) /* from */ , pg_catalog.sum( \"x\" + (1) ), "
				"pg_catalog.count( \"x\" + (1) ) FROM items i JOIN t USING (id) GROUP BY 1 LIMIT 9223372036854775807 "
				"OFFSET 0");
	free(shard);
}
END_TEST

START_TEST(plan_aggregates)
{
	struct merge_plan p;
	char why[MERGE_WHY];
	const char *sql = "SELECT count(*), sum(x), avg(x), count(x), min(v), max(v), 1 FROM items WHERE y > 2";
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	ck_assert(p.aggregates);
	ck_assert_int_eq(p.n_cols, 7);
	ck_assert_int_eq(p.agg[0], MERGE_AGG_COUNT);
	ck_assert_int_eq(p.agg[2], MERGE_AGG_AVG);
	ck_assert_int_eq(p.avg_sum[2], 1);
	ck_assert_int_eq(p.avg_count[2], 3);   /* count(x), not count(*) */
	ck_assert_int_eq(p.agg[6], MERGE_AGG_CONST);
	ck_assert(merge_plan_compares(&p));
}
END_TEST

START_TEST(plan_grouped)
{
	struct merge_plan p;
	char why[MERGE_WHY];
	const char *sql = "SELECT x, count(*), sum(y) FROM items GROUP BY x ORDER BY count(*) DESC LIMIT 5 OFFSET 1";
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	ck_assert(p.grouped && p.aggregates && !p.distinct);
	ck_assert_int_eq(p.n_cols, 3);
	ck_assert_int_eq(p.agg[0], MERGE_AGG_KEY);
	ck_assert_int_eq(p.agg[1], MERGE_AGG_COUNT);
	ck_assert_int_eq(p.agg[2], MERGE_AGG_SUM);
	ck_assert_int_eq(p.n_sort, 1);
	ck_assert_int_eq(p.sort[0].position, 2);   /* count(*) is the second output column */
	ck_assert(p.has_limit && p.limit == 5 && p.has_offset && p.offset == 1);
	/* every group whole from every shard: no LIMIT or OFFSET there */
	size_t n;
	char *shard = merge_plan_shard_sql(&p, sql, strlen(sql), &n);
	ck_assert_str_eq(shard, "SELECT x, count(*), sum(y) FROM items GROUP BY x ORDER BY count(*) DESC "
				"LIMIT 9223372036854775807 OFFSET 0");
	free(shard);
	/* GROUP BY a position, an alias, an expression of the select list */
	sql = "select lower(v) as l, max(id) from items group by 1";
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	ck_assert_int_eq(p.agg[0], MERGE_AGG_KEY);
	ck_assert(!merge_plan_rewrites(&p));
	sql = "select lower(v) as l, max(id) from items group by l";
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	ck_assert_int_eq(p.agg[0], MERGE_AGG_KEY);
	sql = "select lower(v), max(id) from items group by lower(v) order by lower(v)";
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	ck_assert_int_eq(p.agg[0], MERGE_AGG_KEY);
	ck_assert_int_eq(p.sort[0].position, 1);
	/* GROUP BY without aggregates; DISTINCT */
	sql = "select x from items group by x";
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	ck_assert(p.grouped && p.agg[0] == MERGE_AGG_KEY);
	sql = "select distinct x, y from items order by x limit 3";
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	ck_assert(p.distinct && !p.grouped && !p.aggregates);
	ck_assert(!merge_plan_rewrites(&p));   /* each shard's first 3 distinct rows are enough */
}
END_TEST

START_TEST(plan_refusals)
{
	static const char *const refused[][2] = {
		{ "select x, count(*) from items group by x having count(*) > 1", "HAVING" },
		{ "select count(*) from items group by x", "GROUP BY must name columns" },
		{ "select x, count(*) from items group by rollup (x)", "ROLLUP" },
		{ "select x, y, count(*) from items group by x", "GROUP BY column" },
		{ "select distinct on (x) x, y from items", "DISTINCT ON" },
		{ "select x, count(*) from items group by x order by sum(y)", "expression" },
		{ "select avg(x) filter (where y > 1) from items", "avg()" },
		{ "select avg(x) filter (where y > 2), count(x) from items", "avg()" },
		{ "select count(distinct x) from items", "DISTINCT" },
		{ "select id from items order by lower(v)", "expression" },
		{ "select id from items union select id from items", "UNION" },
		{ "select id, rank() over (order by id) from items", "window" },
		{ "select string_agg(v, ',') from items", "aggregate" },
		{ "select id from items limit $1 + 1", "LIMIT" },
		{ "select 1; select 2", "several statements" },
		{ "update items set v = 1", "only SELECT" },
		{ "select id from items order by v collate \"en_US\"", "COLLATE" },
		{ "select id, count(*) from items", "aggregate" },
	};
	for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
		struct merge_plan p;
		char why[MERGE_WHY];
		ck_assert_msg(!merge_plan_build(refused[i][0], strlen(refused[i][0]), &p, why), "%s", refused[i][0]);
		ck_assert_msg(strstr(why, refused[i][1]) != NULL, "%s: %s", refused[i][0], why);
	}
}
END_TEST

/* ---- the merge of rows ---- */

/* DataRow messages of one text column each, appended to buf. */
static size_t put_rows(uint8_t *buf, const char *const *vals, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		size_t vl = vals[i] ? strlen(vals[i]) : 0;
		buf[o] = 'D';
		proto_put_u32(buf + o + 1, (uint32_t)(4 + 2 + 4 + vl));
		buf[o + 5] = 0;
		buf[o + 6] = 1;
		proto_put_u32(buf + o + 7, vals[i] ? (uint32_t)vl : UINT32_MAX);
		memcpy(buf + o + 11, vals[i] ? vals[i] : "", vl);
		o += 11 + vl;
	}
	return o;
}

/* The first column of every DataRow in out, joined with ',' ("N" for NULL),
 * and the CommandComplete tag after '|'. */
static void read_out(struct buf *out, char *s, size_t cap)
{
	size_t len = buf_len(out), o = 0;
	const uint8_t *m = buf_head(out);
	s[0] = '\0';
	size_t off = 0;
	while (off + 5 <= len) {
		uint32_t l = proto_get_u32(m + off + 1);
		if (m[off] == 'D') {
			int32_t vl = (int32_t)proto_get_u32(m + off + 7);
			o += (size_t)snprintf(s + o, cap - o, "%s%.*s", o ? "," : "", vl < 0 ? 1 : vl,
					      vl < 0 ? "N" : (const char *)m + off + 11);
		} else if (m[off] == 'C') {
			o += (size_t)snprintf(s + o, cap - o, "|%s", (const char *)m + off + 5);
		} else if (m[off] == 's') {
			o += (size_t)snprintf(s + o, cap - o, "|suspended");
		}
		off += (size_t)l + 1;
	}
}

static void merge_case(const char *sql, const char *const *a, size_t na, const char *const *b, size_t nb,
		       uint32_t type, uint32_t max_rows, const char *want)
{
	struct merge_plan p;
	char why[MERGE_WHY];
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	uint8_t ba[1024], bb[1024];
	struct merge_shard sh[2] = { { ba, put_rows(ba, a, na), na }, { bb, put_rows(bb, b, nb), nb } };
	struct merge_column col = { "x", type, 0 };
	struct buf *out = buf_new(BUF_SMALL);
	ck_assert_msg(merge_rows(&p, &col, 1, sh, 2, (locale_t)0, max_rows, out, why), "%s", why);
	char got[512];
	read_out(out, got, sizeof got);
	ck_assert_str_eq(got, want);
	buf_free(out);
}

START_TEST(merge_sorted_rows)
{
	const char *a[] = { "1", "4", "9", NULL }, *b[] = { "2", "3", "10" };
	merge_case("select x from items order by x", a, 4, b, 3, 20, 0, "1,2,3,4,9,10,N|SELECT 7");
	merge_case("select x from items order by x limit 3 offset 2", a, 4, b, 3, 20, 0, "3,4,9|SELECT 3");
	merge_case("select x from items order by x nulls first limit 2", (const char *[]){ NULL, "1" }, 2, b, 3, 20, 0,
		   "N,1|SELECT 2");
	const char *da[] = { "9", "4", "1" }, *db[] = { "10", "3", "2" };
	merge_case("select x from items order by x desc", da, 3, db, 3, 20, 0, "10,9,4,3,2,1|SELECT 6");
	/* no ORDER BY: shard after shard; an Execute's row limit */
	merge_case("select x from items", a, 3, b, 3, 20, 0, "1,4,9,2,3,10|SELECT 6");
	merge_case("select x from items", a, 3, b, 3, 20, 4, "1,4,9,2|suspended");
	merge_case("select x from items", a, 3, b, 3, 20, 6, "1,4,9,2,3,10|SELECT 6");
	/* strings, bytewise without a collation */
	const char *sa[] = { "B", "a" }, *sb[] = { "C", "b" };
	merge_case("select x from items order by x", sa, 2, sb, 2, 25, 0, "B,C,a,b|SELECT 4");
}
END_TEST

START_TEST(merge_aggregate_rows)
{
	const char *a[] = { "40" }, *b[] = { "2" };
	merge_case("select count(*) from items", a, 1, b, 1, 20, 0, "42|SELECT 1");
	merge_case("select max(x) from items", a, 1, b, 1, 20, 0, "40|SELECT 1");
	merge_case("select min(x) from items", a, 1, (const char *[]){ NULL }, 1, 20, 0, "40|SELECT 1");
	merge_case("select sum(x) from items", (const char *[]){ NULL }, 1, (const char *[]){ NULL }, 1, 20, 0,
		   "N|SELECT 1");
	merge_case("select count(*) from items offset 1", a, 1, b, 1, 20, 0, "|SELECT 0");
}
END_TEST

/* Two-column rows ("k:v" pairs) merged by a grouped or DISTINCT plan. */
static void merge_case2(const char *sql, const char *const (*a)[2], size_t na, const char *const (*b)[2], size_t nb,
			uint32_t key_type, const char *want)
{
	struct merge_plan p;
	char why[MERGE_WHY];
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	uint8_t buf[2][1024];
	struct merge_shard sh[2];
	const char *const (*in[2])[2] = { a, b };
	size_t nin[2] = { na, nb };
	for (int s = 0; s < 2; s++) {
		size_t o = 0;
		for (size_t i = 0; i < nin[s]; i++) {
			size_t start = o;
			buf[s][o] = 'D';
			o += 5;
			buf[s][o++] = 0;
			buf[s][o++] = 2;
			for (int c = 0; c < 2; c++) {
				const char *v = in[s][i][c];
				proto_put_u32(buf[s] + o, v ? (uint32_t)strlen(v) : UINT32_MAX);
				o += 4;
				if (v) {
					memcpy(buf[s] + o, v, strlen(v));
					o += strlen(v);
				}
			}
			proto_put_u32(buf[s] + start + 1, (uint32_t)(o - start - 1));
		}
		sh[s] = (struct merge_shard){ buf[s], o, nin[s] };
	}
	struct merge_column cols[2] = { { "x", key_type, 0 }, { "n", 20, 0 } };
	struct buf *out = buf_new(BUF_SMALL);
	ck_assert_msg(merge_rows(&p, cols, 2, sh, 2, (locale_t)0, 0, out, why), "%s", why);
	char got[512];
	size_t len = buf_len(out), off = 0, o = 0;
	const uint8_t *m = buf_head(out);
	got[0] = '\0';
	while (off + 5 <= len) {
		uint32_t l = proto_get_u32(m + off + 1);
		if (m[off] == 'D') {
			size_t at = off + 7;
			o += (size_t)snprintf(got + o, sizeof got - o, "%s", o ? "," : "");
			for (int c = 0; c < 2; c++) {
				int32_t vl = (int32_t)proto_get_u32(m + at);
				at += 4;
				o += (size_t)snprintf(got + o, sizeof got - o, "%s%.*s", c ? ":" : "", vl < 0 ? 1 : vl,
						      vl < 0 ? "N" : (const char *)m + at);
				at += vl > 0 ? (size_t)vl : 0;
			}
		} else if (m[off] == 'C') {
			o += (size_t)snprintf(got + o, sizeof got - o, "|%s", (const char *)m + off + 5);
		}
		off += (size_t)l + 1;
	}
	ck_assert_str_eq(got, want);
	buf_free(out);
}

START_TEST(merge_grouped_rows)
{
	const char *const a[][2] = { { "a", "2" }, { "b", "1" }, { NULL, "5" } };
	const char *const b[][2] = { { "b", "3" }, { "c", "1" }, { NULL, "1" } };
	/* groups of the same key merged across shards, NULL one group */
	merge_case2("select x, count(*) from items group by x order by 2 desc, 1", a, 3, b, 3, 25,
		    "N:6,b:4,a:2,c:1|SELECT 4");
	merge_case2("select x, count(*) from items group by x order by count(*) desc limit 2 offset 1", a, 3, b, 3, 25,
		    "b:4,a:2|SELECT 2");
	merge_case2("select x, max(n) from items group by x order by x nulls first", a, 3, b, 3, 25,
		    "N:5,a:2,b:3,c:1|SELECT 4");
	/* numeric keys equal by value though spelled differently */
	const char *const na[][2] = { { "1.0", "1" }, { "2", "7" } }, *const nb[][2] = { { "1.00", "2" } };
	merge_case2("select x, sum(n) from items group by x order by x", na, 2, nb, 1, 1700, "1.0:3,2:7|SELECT 2");
	/* DISTINCT: equal rows once */
	const char *const da[][2] = { { "a", "1" }, { "b", "1" } }, *const db[][2] = { { "a", "1" }, { "a", "2" } };
	merge_case2("select distinct x, n from items order by x, n", da, 2, db, 2, 25, "a:1,a:2,b:1|SELECT 3");
	merge_case2("select distinct x, n from items order by n desc, x limit 2", da, 2, db, 2, 25, "a:2,a:1|SELECT 2");
}
END_TEST

/* ---- the streaming merge: rows as they come ---- */

/* Two shards whose rows (one text column each) arrive a few at a time: a
 * shard's rows past `arrived` are not there yet; its end is there once
 * `ended`; `failed`: its next read fails. */
struct script_shard {
	const char *const *vals;
	size_t n, arrived, taken;
	bool ended, failed;
	uint8_t msg[64];
};

static enum merge_next script_peek(void *arg, int shard, const uint8_t **row, size_t *len)
{
	struct script_shard *s = &((struct script_shard *)arg)[shard];
	if (s->failed)
		return MERGE_FAIL;
	if (s->taken == s->arrived)
		return s->ended && s->taken == s->n ? MERGE_END : MERGE_WAIT;
	*len = put_rows(s->msg, &s->vals[s->taken], 1);
	*row = s->msg;
	return MERGE_ROW;
}

static void script_take(void *arg, int shard)
{
	((struct script_shard *)arg)[shard].taken++;
}

static struct merge_stream *stream_for(const char *sql, uint32_t type)
{
	struct merge_plan p;
	char why[MERGE_WHY];
	ck_assert_msg(merge_plan_build(sql, strlen(sql), &p, why), "%s", why);
	struct merge_column col = { "x", type, 0 };
	struct merge_stream *ms = merge_stream_new(&p, &col, 1, 2, (locale_t)0, why);
	ck_assert_msg(ms != NULL, "%s", why);
	return ms;
}

/* One run into a fresh buffer: its status, and what it wrote in got. */
static enum merge_status run_into(struct merge_stream *ms, struct script_shard *sh, size_t out_high, char *got,
				  size_t cap)
{
	struct merge_source src = { script_peek, script_take, sh };
	struct buf *out = buf_new(BUF_SMALL);
	char why[MERGE_WHY];
	enum merge_status st = merge_stream_run(ms, &src, out, out_high, why);
	read_out(out, got, cap);
	buf_free(out);
	return st;
}

START_TEST(stream_sorted_needs_a_row_of_every_shard)
{
	const char *a[] = { "1", "4", "9" }, *b[] = { "2", "3", "10" };
	struct script_shard sh[2] = { { a, 3, 3, 0, false, false, { 0 } }, { b, 3, 0, 0, false, false, { 0 } } };
	struct merge_stream *ms = stream_for("select x from items order by x", 20);
	char got[256];
	/* shard 1 has sent nothing: nothing can go out */
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_NEED_ROWS);
	ck_assert_str_eq(got, "");
	sh[1].arrived = 1;
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_NEED_ROWS);
	ck_assert_str_eq(got, "1,2");
	sh[1].arrived = 3;
	sh[1].ended = true;
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_NEED_ROWS);
	ck_assert_str_eq(got, "3,4,9");   /* (shard 0's end not there yet: 10 waits) */
	sh[0].ended = true;
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_COMPLETE);
	ck_assert_str_eq(got, "10|SELECT 6");
	merge_stream_free(ms);
}
END_TEST

START_TEST(stream_plain_rows_go_as_they_come)
{
	const char *a[] = { "1", "4", "9" }, *b[] = { "2", "3" };
	struct script_shard sh[2] = { { a, 3, 0, 0, false, false, { 0 } }, { b, 2, 2, 0, true, false, { 0 } } };
	struct merge_stream *ms = stream_for("select x from items", 20);
	char got[256];
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_NEED_ROWS);
	ck_assert_str_eq(got, "2,3");
	sh[0].arrived = 3;
	sh[0].ended = true;
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_COMPLETE);
	ck_assert_str_eq(got, "1,4,9|SELECT 5");   /* (every row of the Execute, over its runs) */
	merge_stream_free(ms);
	/* LIMIT: complete once reached, whatever the shards still have */
	struct script_shard more[2] = { { a, 3, 3, 0, false, false, { 0 } }, { b, 2, 0, 0, false, false, { 0 } } };
	ms = stream_for("select x from items limit 2", 20);
	ck_assert_int_eq(run_into(ms, more, SIZE_MAX, got, sizeof got), MERGE_COMPLETE);
	ck_assert_str_eq(got, "1,4|SELECT 2");
	merge_stream_free(ms);
	/* a shard that fails */
	struct script_shard bad[2] = { { a, 3, 1, 0, false, false, { 0 } }, { b, 2, 0, 0, false, true, { 0 } } };
	ms = stream_for("select x from items order by x", 20);
	ck_assert_int_eq(run_into(ms, bad, SIZE_MAX, got, sizeof got), MERGE_SOURCE_FAILED);
	merge_stream_free(ms);
}
END_TEST

START_TEST(stream_stops_at_the_output_bound)
{
	const char *a[] = { "1", "3", "5" }, *b[] = { "2", "4", "6" };
	struct script_shard sh[2] = { { a, 3, 3, 0, true, false, { 0 } }, { b, 3, 3, 0, true, false, { 0 } } };
	struct merge_stream *ms = stream_for("select x from items order by x offset 1", 20);
	char got[256], all[256] = "";
	enum merge_status st;
	int runs = 0;
	/* a bound of one byte: one row per run (each DataRow is 12 bytes) */
	while ((st = run_into(ms, sh, 1, got, sizeof got)) == MERGE_OUT_FULL) {
		ck_assert_int_le((int)strlen(got), 1);
		strcat(all, got);
		strcat(all, ";");
		runs++;
	}
	ck_assert_int_eq(st, MERGE_COMPLETE);
	strcat(all, got);
	ck_assert_str_eq(all, "2;3;4;5;6;|SELECT 5");   /* (1 skipped by the OFFSET) */
	ck_assert_int_eq(runs, 5);
	merge_stream_free(ms);
}
END_TEST

START_TEST(stream_execute_with_a_row_limit_suspends)
{
	const char *a[] = { "1", "3", "5" }, *b[] = { "2", "4", "6" };
	struct script_shard sh[2] = { { a, 3, 3, 0, true, false, { 0 } }, { b, 3, 1, 0, false, false, { 0 } } };
	struct merge_stream *ms = stream_for("select x from items order by x", 20);
	char got[256];
	merge_stream_execute(ms, 2);
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_SUSPENDED);
	ck_assert_str_eq(got, "1,2|suspended");
	/* what was not taken stays with the shards */
	ck_assert_uint_eq(sh[0].taken, 1);
	ck_assert_uint_eq(sh[1].taken, 1);
	merge_stream_execute(ms, 3);
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_NEED_ROWS);
	ck_assert_str_eq(got, "");   /* (3 waits: shard 1's next row may come before it) */
	sh[1].arrived = 3;
	sh[1].ended = true;
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_SUSPENDED);
	ck_assert_str_eq(got, "3,4,5|suspended");
	merge_stream_execute(ms, 1);
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_COMPLETE);
	ck_assert_str_eq(got, "6|SELECT 1");   /* no row after it: complete, not suspended */
	merge_stream_execute(ms, 1);
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_COMPLETE);
	ck_assert_str_eq(got, "|SELECT 0");
	merge_stream_free(ms);
}
END_TEST

START_TEST(stream_what_it_keeps_is_bounded)
{
	const char *a[] = { "b", "a", "c" }, *b[] = { "a", "d" };
	struct script_shard sh[2] = { { a, 3, 3, 0, true, false, { 0 } }, { b, 2, 1, 0, false, false, { 0 } } };
	struct merge_stream *ms = stream_for("select distinct x from items order by x", 25);
	char got[256];
	/* DISTINCT needs every row first */
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_NEED_ROWS);
	ck_assert_str_eq(got, "");
	ck_assert_uint_gt(merge_stream_held(ms), 0);
	sh[1].arrived = 2;
	sh[1].ended = true;
	ck_assert_int_eq(run_into(ms, sh, SIZE_MAX, got, sizeof got), MERGE_COMPLETE);
	ck_assert_str_eq(got, "a,b,c,d|SELECT 4");
	merge_stream_free(ms);
	/* beyond its bound: refused */
	struct script_shard again[2] = { { a, 3, 3, 0, true, false, { 0 } }, { b, 2, 2, 0, true, false, { 0 } } };
	ms = stream_for("select distinct x from items order by x", 25);
	merge_stream_hold_limit(ms, 1024);
	ck_assert_int_eq(run_into(ms, again, SIZE_MAX, got, sizeof got), MERGE_TOO_LARGE);
	merge_stream_free(ms);
}
END_TEST

/* ---- the INSERT split ---- */

START_TEST(insert_split_rows)
{
	struct insert_split s;
	char why[MERGE_WHY];
	const char *sql = "INSERT INTO items (v, id) VALUES ('a,(b)', 7), ($$x)$$, 42), ('c''d', -1), "
			  "(E'e\\')', 1234) RETURNING id";
	ck_assert_msg(insert_split_build(sql, strlen(sql), &rules, SHARDING_PG_BIGINT_HASH, 3, NULL, &s, why), "%s", why);
	ck_assert_str_eq(s.sql[0], "INSERT INTO items (v, id) VALUES ($$x)$$, 42), (E'e\\')', 1234) RETURNING id");
	ck_assert_str_eq(s.sql[1], "INSERT INTO items (v, id) VALUES ('a,(b)', 7) RETURNING id");
	ck_assert_str_eq(s.sql[2], "INSERT INTO items (v, id) VALUES ('c''d', -1) RETURNING id");
	ck_assert_uint_eq(s.rows[0], 2);
	insert_split_free(&s);

	static const char *const refused[][2] = {
		{ "INSERT INTO items VALUES (7), (42)", "column list" },
		{ "INSERT INTO items (id) VALUES ($1), (42)", "constant" },
		{ "INSERT INTO items (id) SELECT 7", "only INSERT ... VALUES" },
		{ "UPDATE items SET v = 1", "sharding keys" },
		{ "INSERT INTO items (id) VALUES ('x'), (42)", "" },
	};
	for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
		ck_assert_msg(!insert_split_build(refused[i][0], strlen(refused[i][0]), &rules, SHARDING_PG_BIGINT_HASH, 3,
						  NULL, &s, why),
			      "%s", refused[i][0]);
		ck_assert_msg(strstr(why, refused[i][1]) != NULL, "%s: %s", refused[i][0], why);
	}
}
END_TEST

/* ---- COPY ---- */

START_TEST(copy_route_options)
{
	struct copy_route r;
	char why[MERGE_WHY];
	const char *sql = "COPY public.items (v, id) FROM STDIN WITH (FORMAT csv, HEADER, DELIMITER ';', NULL 'nil')";
	ck_assert_int_eq(copy_route_read(sql, strlen(sql), &rules, &r, why), COPY_ROUTE_SPLIT);
	ck_assert_int_eq(r.opts.format, COPYSPLIT_CSV);
	ck_assert(r.opts.header);
	ck_assert_int_eq(r.opts.delimiter, ';');
	ck_assert_int_eq(r.opts.escape, '"');
	ck_assert_uint_eq(r.opts.null_len, 3);
	ck_assert_int_eq(r.key_position, 1);
	sql = "copy items from stdin";
	ck_assert_int_eq(copy_route_read(sql, strlen(sql), &rules, &r, why), COPY_ROUTE_SPLIT);
	ck_assert_int_eq(r.key_position, -1);
	ck_assert_int_eq(r.opts.delimiter, '\t');
	char q[1024];
	ck_assert(copy_route_position_query(&r, q, sizeof q));
	ck_assert(strstr(q, "'\"items\"'::regclass") != NULL);
	sql = "copy items from stdin (format binary)";
	ck_assert_int_eq(copy_route_read(sql, strlen(sql), &rules, &r, why), COPY_ROUTE_SPLIT);
	ck_assert_int_eq(r.opts.format, COPYSPLIT_BINARY);
	sql = "copy items from stdin (encoding 'latin1')";
	ck_assert_int_eq(copy_route_read(sql, strlen(sql), &rules, &r, why), COPY_ROUTE_REFUSED);
	sql = "copy other from stdin";
	ck_assert_int_eq(copy_route_read(sql, strlen(sql), &rules, &r, why), COPY_ROUTE_NOT_COPY);
	sql = "copy items to stdout";
	ck_assert_int_eq(copy_route_read(sql, strlen(sql), &rules, &r, why), COPY_ROUTE_NOT_COPY);
	sql = "copy items (v) from stdin";
	ck_assert_int_eq(copy_route_read(sql, strlen(sql), &rules, &r, why), COPY_ROUTE_REFUSED);
}
END_TEST

struct rows {
	char text[2048];
	size_t n;
};

static bool collect(void *arg, const uint8_t *row, size_t rowlen, bool header, const uint8_t *key, size_t keylen,
		    bool is_null)
{
	struct rows *r = arg;
	(void)row;
	r->n += (size_t)snprintf(r->text + r->n, sizeof r->text - r->n, "%s%s[%zu]", header ? "H" : "",
				 is_null ? "NULL" : "", rowlen);
	if (!header && !is_null)
		r->n += (size_t)snprintf(r->text + r->n, sizeof r->text - r->n, "%.*s;", (int)keylen, (const char *)key);
	return true;
}

/* Every split of data into two feeds, and one byte at a time, give want. */
static void split_case(const struct copysplit_options *o, const char *data, const char *want)
{
	size_t len = strlen(data);
	for (size_t cut = 0; cut <= len + 1; cut++) {
		struct copysplit s;
		struct rows r = { "", 0 };
		copysplit_init(&s, o);
		enum copysplit_result res = COPYSPLIT_OK;
		if (cut <= len) {
			res = copysplit_feed(&s, (const uint8_t *)data, cut, collect, &r);
			if (res == COPYSPLIT_OK)
				res = copysplit_feed(&s, (const uint8_t *)data + cut, len - cut, collect, &r);
		} else {
			for (size_t i = 0; i < len && res == COPYSPLIT_OK; i++)
				res = copysplit_feed(&s, (const uint8_t *)data + i, 1, collect, &r);
		}
		if (res == COPYSPLIT_OK)
			res = copysplit_finish(&s, collect, &r);
		ck_assert_msg(res == COPYSPLIT_OK || res == COPYSPLIT_END, "cut %zu: %s", cut, copysplit_strerror(res));
		ck_assert_msg(strcmp(r.text, want) == 0, "cut %zu: %s, want %s", cut, r.text, want);
		copysplit_free(&s);
	}
}

START_TEST(copysplit_text)
{
	struct copysplit_options o;
	copysplit_defaults(&o, COPYSPLIT_TEXT);
	o.key_column = 1;
	split_case(&o, "a\t7\n", "[4]7;");
	split_case(&o, "x\\\ty\t1\\t2\r\n\\N\t\\N\n", "[11]1\t2;NULL[6]");
	split_case(&o, "a\\\nb\t\\x41\\101\\z\nq\tlast", "[16]AAz;[6]last;");
	split_case(&o, "a\t1\n\\.\nignored\t2\n", "[4]1;");
	o.header = true;
	o.key_column = 0;
	split_case(&o, "id\tv\n5\tx\n", "H[5][4]5;");
}
END_TEST

START_TEST(copysplit_csv)
{
	struct copysplit_options o;
	copysplit_defaults(&o, COPYSPLIT_CSV);
	o.key_column = 1;
	split_case(&o, "a,\"7\"\n\"x,\ny\",\"a\"\"b\"\n", "[6]7;[14]a\"b;");
	split_case(&o, "a,,c\nb,\"\",c\n", "NULL[5][7];");
	o.escape = '\\';
	split_case(&o, "a,\"q\\\"r\\\\\"\n", "[11]q\"r\\;");

	/* errors */
	struct copysplit s;
	struct rows r = { "", 0 };
	copysplit_init(&s, &o);
	ck_assert_int_eq(copysplit_feed(&s, (const uint8_t *)"only\n", 5, collect, &r), COPYSPLIT_ERR_NO_KEY);
	copysplit_free(&s);
	copysplit_init(&s, &o);
	ck_assert_int_eq(copysplit_feed(&s, (const uint8_t *)"a,\"open\n", 8, collect, &r), COPYSPLIT_OK);
	ck_assert_int_eq(copysplit_finish(&s, collect, &r), COPYSPLIT_ERR_BAD_ROW);
	copysplit_free(&s);
	o.max_row = 8;
	copysplit_init(&s, &o);
	ck_assert_int_eq(copysplit_feed(&s, (const uint8_t *)"a,12345678\n", 11, collect, &r), COPYSPLIT_ERR_ROW_TOO_LONG);
	copysplit_free(&s);
}
END_TEST

Suite *merge_suite(void)
{
	Suite *s = suite_create("merge");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, plan_order_limit_offset);
	tcase_add_test(tc, plan_aggregates);
	tcase_add_test(tc, plan_refusals);
	tcase_add_test(tc, plan_grouped);
	tcase_add_test(tc, merge_grouped_rows);
	tcase_add_test(tc, merge_sorted_rows);
	tcase_add_test(tc, merge_aggregate_rows);
	tcase_add_test(tc, stream_sorted_needs_a_row_of_every_shard);
	tcase_add_test(tc, stream_plain_rows_go_as_they_come);
	tcase_add_test(tc, stream_stops_at_the_output_bound);
	tcase_add_test(tc, stream_execute_with_a_row_limit_suspends);
	tcase_add_test(tc, stream_what_it_keeps_is_bounded);
	tcase_add_test(tc, insert_split_rows);
	tcase_add_test(tc, copy_route_options);
	tcase_add_test(tc, copysplit_text);
	tcase_add_test(tc, copysplit_csv);
	suite_add_tcase(s, tc);
	return s;
}
