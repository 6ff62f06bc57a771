/* SPDX-License-Identifier: MIT */
/* Unit tests for shardkey: Bind parameters, bound values and verdicts -> a
 * request's shard. Expected shards are PostgreSQL's (MODULUS 3 remainders of
 * check_sharding.c: 7 -> 1, 42 -> 0, 1234 -> 0, -1 -> 2; text "abc" -> 1). */
#include "check_suites.h"

#include <stdint.h>
#include <string.h>

#include "router.h"
#include "shardkey.h"

static const struct router_table tables[] = { { .schema = NULL, .table = "items", .column = "id" } };
static const struct router_rules rules = { .sharded = tables, .n_sharded = 1, .max_length = 100000 };

/* A Bind body: n params; formats: NULL (all text), one code for all, or one per param. */
struct bindbuf {
	uint8_t b[512];
	size_t len;
};

static void put16(struct bindbuf *bb, uint16_t v)
{
	bb->b[bb->len++] = (uint8_t)(v >> 8);
	bb->b[bb->len++] = (uint8_t)v;
}

static void put32(struct bindbuf *bb, uint32_t v)
{
	for (int i = 3; i >= 0; i--)
		bb->b[bb->len++] = (uint8_t)(v >> (8 * i));
}

static void bind_start(struct bindbuf *bb, const int16_t *formats, uint16_t n_formats, uint16_t n_params)
{
	bb->len = 0;
	memcpy(bb->b, "\0s1\0", 4);   /* portal "", statement "s1" */
	bb->len = 4;
	put16(bb, n_formats);
	for (uint16_t i = 0; i < n_formats; i++)
		put16(bb, (uint16_t)formats[i]);
	put16(bb, n_params);
}

static void bind_value(struct bindbuf *bb, const void *v, int32_t len)
{
	put32(bb, (uint32_t)len);
	if (len > 0) {
		memcpy(bb->b + bb->len, v, (size_t)len);
		bb->len += (size_t)len;
	}
}

static void be64(uint8_t out[8], int64_t v)
{
	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)((uint64_t)v >> (56 - 8 * i));
}

START_TEST(test_bind_param)
{
	struct bindbuf bb;
	const uint8_t *val;
	int32_t vlen;
	int16_t fmt;
	/* all text */
	bind_start(&bb, NULL, 0, 2);
	bind_value(&bb, "7", 1);
	bind_value(&bb, NULL, -1);
	put16(&bb, 0);
	ck_assert(shardkey_bind_param(bb.b, bb.len, 1, &val, &vlen, &fmt));
	ck_assert_int_eq(vlen, 1);
	ck_assert_int_eq(fmt, 0);
	ck_assert_int_eq(val[0], '7');
	ck_assert(shardkey_bind_param(bb.b, bb.len, 2, &val, &vlen, &fmt));
	ck_assert_int_eq(vlen, -1);
	ck_assert(!shardkey_bind_param(bb.b, bb.len, 3, &val, &vlen, &fmt));
	ck_assert(!shardkey_bind_param(bb.b, bb.len, 0, &val, &vlen, &fmt));
	/* every truncation is refused or stays inside the buffer */
	for (size_t cut = 0; cut < bb.len - 2; cut++)
		if (shardkey_bind_param(bb.b, cut, 2, &val, &vlen, &fmt))
			ck_assert(vlen == -1 || val + vlen <= bb.b + cut);
	ck_assert(!shardkey_bind_param(bb.b, 5, 1, &val, &vlen, &fmt));
	/* one format per parameter */
	int16_t f2[] = { 0, 1 };
	bind_start(&bb, f2, 2, 2);
	bind_value(&bb, "x", 1);
	uint8_t v8[8];
	be64(v8, 7);
	bind_value(&bb, v8, 8);
	ck_assert(shardkey_bind_param(bb.b, bb.len, 2, &val, &vlen, &fmt));
	ck_assert_int_eq(fmt, 1);
	ck_assert_int_eq(vlen, 8);
	ck_assert(shardkey_bind_param(bb.b, bb.len, 1, &val, &vlen, &fmt));
	ck_assert_int_eq(fmt, 0);
	/* format count that is neither 0, 1 nor the parameter count */
	int16_t f3[] = { 1, 1, 1 };
	bind_start(&bb, f3, 3, 2);
	bind_value(&bb, "x", 1);
	bind_value(&bb, "y", 1);
	ck_assert(!shardkey_bind_param(bb.b, bb.len, 1, &val, &vlen, &fmt));
	/* a value length past the end, a negative length other than -1 */
	bind_start(&bb, NULL, 0, 1);
	put32(&bb, 100);
	ck_assert(!shardkey_bind_param(bb.b, bb.len, 1, &val, &vlen, &fmt));
	bind_start(&bb, NULL, 0, 1);
	put32(&bb, (uint32_t)-2);
	ck_assert(!shardkey_bind_param(bb.b, bb.len, 1, &val, &vlen, &fmt));
	/* an unknown format code */
	int16_t f9[] = { 9 };
	bind_start(&bb, f9, 1, 1);
	bind_value(&bb, "7", 1);
	ck_assert(!shardkey_bind_param(bb.b, bb.len, 1, &val, &vlen, &fmt));
}
END_TEST

START_TEST(test_value_shard)
{
	int s = -1;
	uint8_t v8[8];
	/* text, binary int8/int4/int2 with the type declared or left to the server */
	ck_assert(shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, (const uint8_t *)"7", 1, 0, 0, &s));
	ck_assert_int_eq(s, 1);
	be64(v8, 7);
	for (uint32_t oid = 0; oid <= 20; oid += 20) {
		s = -1;
		ck_assert(shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, v8, 8, 1, oid, &s));
		ck_assert_int_eq(s, 1);
	}
	ck_assert(shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, v8 + 4, 4, 1, 23, &s));
	ck_assert_int_eq(s, 1);
	ck_assert(shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, v8 + 6, 2, 1, 0, &s));
	ck_assert_int_eq(s, 1);
	be64(v8, -1);
	ck_assert(shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, v8 + 4, 4, 1, 23, &s));
	ck_assert_int_eq(s, 2);
	ck_assert(shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, v8, 8, 1, 0, &s));
	ck_assert_int_eq(s, 2);
	be64(v8, 1234);
	ck_assert(shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, v8, 8, 1, 20, &s));
	ck_assert_int_eq(s, 0);
	/* declared text under the bigint hash: read as bigint text */
	ck_assert(shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, (const uint8_t *)"42", 2, 1, 25, &s));
	ck_assert_int_eq(s, 0);
	/* no usable key: NULL, a length no integer has, text that is no bigint */
	ck_assert(!shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, v8, -1, 0, 0, &s));
	ck_assert(!shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, v8, 3, 1, 0, &s));
	ck_assert(!shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, v8, 3, 1, 20, &s));
	ck_assert(!shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, (const uint8_t *)"1.5", 3, 0, 0, &s));
	ck_assert(!shardkey_value_shard(SHARDING_PG_BIGINT_HASH, 3, v8, 8, 1, 700 /* float4 */, &s));
	/* text hash: bytes in either format */
	ck_assert(shardkey_value_shard(SHARDING_PG_TEXT_HASH, 3, (const uint8_t *)"abc", 3, 0, 0, &s));
	ck_assert_int_eq(s, 1);
	s = -1;
	ck_assert(shardkey_value_shard(SHARDING_PG_TEXT_HASH, 3, (const uint8_t *)"abc", 3, 1, 0, &s));
	ck_assert_int_eq(s, 1);
	/* uuid: binary and text give the same shard */
	static const uint8_t u[16] = { 0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8,
				       0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11 };
	const char *ut = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";
	for (int n = 2; n <= 7; n++) {
		int sb = -1, st = -2;
		ck_assert(shardkey_value_shard(SHARDING_PG_UUID_HASH, n, u, 16, 1, 0, &sb));
		ck_assert(shardkey_value_shard(SHARDING_PG_UUID_HASH, n, (const uint8_t *)ut, 36, 0, 0, &st));
		ck_assert_int_eq(sb, st);
		ck_assert(shardkey_value_shard(SHARDING_PG_UUID_HASH, n, u, 16, 1, 2950, &sb));
		ck_assert_int_eq(sb, st);
	}
	/* sha1/murmur3 hash the decimal text of an integer in any form */
	for (int fn = SHARDING_SHA1; fn <= SHARDING_MURMUR3; fn++) {
		int a = -1, b = -2;
		be64(v8, 1234);
		ck_assert(shardkey_value_shard((enum sharding_function)fn, 7, v8, 8, 1, 0, &a));
		ck_assert(shardkey_value_shard((enum sharding_function)fn, 7, (const uint8_t *)"1234", 4, 0, 0, &b));
		ck_assert_int_eq(a, b);
	}
}
END_TEST

static void resolve(const char *sql, const struct shardkey_bind *binds, size_t n_binds, struct shardkey_result *out)
{
	struct router_verdict v;
	router_classify(sql, strlen(sql), &rules, &v);
	shardkey_resolve(&v, SHARDING_PG_BIGINT_HASH, 3, binds, n_binds, out);
}

START_TEST(test_resolve)
{
	struct shardkey_result r;
	resolve("SELECT * FROM items WHERE id = 7", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_ONE);
	ck_assert_int_eq(r.shard, 1);
	ck_assert(!r.writes);
	resolve("SELECT * FROM items WHERE id IN (42, 1234)", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_ONE);
	ck_assert_int_eq(r.shard, 0);
	resolve("SELECT * FROM items WHERE id IN (7, 42)", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_CROSS);
	resolve("SELECT * FROM items", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_CROSS);
	resolve("SELECT * FROM items WHERE id = 1.5", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_CROSS);
	resolve("SELECT 1", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_DEFAULT);
	resolve("CREATE TABLE x (a int)", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_DEFAULT);
	ck_assert(r.writes);
	resolve("INSERT INTO items (id, v) VALUES (42, 'a'), (1234, 'b')", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_ONE);
	ck_assert_int_eq(r.shard, 0);
	ck_assert(r.writes);
	resolve("INSERT INTO items (id, v) VALUES (42, 'a'), (7, 'b')", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_CROSS);
	ck_assert(r.writes);
	resolve("UPDATE items SET v = 'x'", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_CROSS);

	/* $n keys: the Bind's value decides; without a Bind nothing runs */
	struct bindbuf b1, b2;
	bind_start(&b1, NULL, 0, 1);
	bind_value(&b1, "7", 1);
	put16(&b1, 0);
	bind_start(&b2, NULL, 0, 1);
	bind_value(&b2, "42", 2);
	put16(&b2, 0);
	struct shardkey_bind binds[2] = { { b1.b, b1.len, NULL, 0 }, { b2.b, b2.len, NULL, 0 } };
	resolve("SELECT * FROM items WHERE id = $1", binds, 1, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_ONE);
	ck_assert_int_eq(r.shard, 1);
	resolve("SELECT * FROM items WHERE id = $1", NULL, 0, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_DEFAULT);
	resolve("SELECT * FROM items WHERE id = $1", binds, 2, &r);   /* two executions, two shards */
	ck_assert_int_eq(r.outcome, SHARDKEY_CROSS);
	resolve("SELECT * FROM items WHERE id = $1", binds + 1, 1, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_ONE);
	ck_assert_int_eq(r.shard, 0);
	/* a literal and a parameter that agree, and that do not */
	resolve("SELECT * FROM items WHERE id IN (1234, $1)", binds + 1, 1, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_ONE);
	resolve("SELECT * FROM items WHERE id IN (1234, $1)", binds, 1, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_CROSS);
	/* the parameter is missing from the Bind */
	resolve("SELECT * FROM items WHERE id = $2", binds, 1, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_CROSS);
	/* declared types: binary int8 */
	struct bindbuf b3;
	int16_t fb[] = { 1 };
	bind_start(&b3, fb, 1, 1);
	uint8_t v8[8];
	be64(v8, -1);
	bind_value(&b3, v8, 8);
	static const uint8_t types[4] = { 0, 0, 0, 20 };
	struct shardkey_bind typed = { b3.b, b3.len, types, 1 };
	resolve("DELETE FROM items WHERE id = $1", &typed, 1, &r);
	ck_assert_int_eq(r.outcome, SHARDKEY_ONE);
	ck_assert_int_eq(r.shard, 2);
	ck_assert(r.writes);
}
END_TEST

START_TEST(test_merge_and_types)
{
	struct shardkey_result a = { SHARDKEY_DEFAULT, -1, false, false, 0 };
	struct shardkey_result one0 = { SHARDKEY_ONE, 0, false, false, 0 }, one1 = { SHARDKEY_ONE, 1, true, false, 0 };
	struct shardkey_result cross = { SHARDKEY_CROSS, -1, false, false, 0 }, dflt = { SHARDKEY_DEFAULT, -1, true, false, 0 };
	shardkey_merge(&a, &one0);
	ck_assert_int_eq(a.outcome, SHARDKEY_ONE);
	ck_assert_int_eq(a.shard, 0);
	shardkey_merge(&a, &dflt);
	ck_assert_int_eq(a.outcome, SHARDKEY_ONE);
	ck_assert(a.writes);
	shardkey_merge(&a, &one0);
	ck_assert_int_eq(a.outcome, SHARDKEY_ONE);
	shardkey_merge(&a, &one1);
	ck_assert_int_eq(a.outcome, SHARDKEY_CROSS);
	shardkey_merge(&a, &one0);
	ck_assert_int_eq(a.outcome, SHARDKEY_CROSS);
	struct shardkey_result b = one1;
	shardkey_merge(&b, &cross);
	ck_assert_int_eq(b.outcome, SHARDKEY_CROSS);

	const uint8_t *t;
	uint16_t n;
	static const uint8_t ok[] = { 0, 2, 0, 0, 0, 20, 0, 0, 0, 25 };
	ck_assert(shardkey_param_types(ok, sizeof ok, &t, &n));
	ck_assert_int_eq(n, 2);
	ck_assert_ptr_eq(t, ok + 2);
	ck_assert(!shardkey_param_types(ok, sizeof ok - 1, &t, &n));
	ck_assert(!shardkey_param_types(ok, 1, &t, &n));
	static const uint8_t none[] = { 0, 0 };
	ck_assert(shardkey_param_types(none, sizeof none, &t, &n));
	ck_assert_int_eq(n, 0);
	ck_assert_ptr_null(t);
}
END_TEST

Suite *shardkey_suite(void)
{
	Suite *s = suite_create("shardkey");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_bind_param);
	tcase_add_test(tc, test_value_shard);
	tcase_add_test(tc, test_resolve);
	tcase_add_test(tc, test_merge_and_types);
	suite_add_tcase(s, tc);
	return s;
}
