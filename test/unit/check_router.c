/* SPDX-License-Identifier: MIT */
/* Unit tests: router classification, sharding keys, hints, pgcat's SET/SHOW, verdict cache. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "router.h"
#include "texthash.h"

static const struct router_table tables[] = {
	{ .schema = NULL, .table = "users", .column = "id" },
	{ .schema = "app", .table = "orders", .column = "user_id" },
	{ .schema = NULL, .table = "accounts", .column = "uuid" },
};
static const char *const writers[] = { "my_writer", "audit.log_*" };
static const struct router_rules rules = {
	.sharded = tables, .n_sharded = 3,
	.writing_functions = writers, .n_writing_functions = 2,
	.max_length = 65536,
};

/* Classifies a copy of sql held in a buffer of exactly its length, so that
 * AddressSanitizer catches any read past the end. */
static struct router_verdict classify_with(const char *sql, const struct router_rules *r)
{
	size_t n = strlen(sql);
	char *copy = malloc(n ? n : 1);
	ck_assert_ptr_nonnull(copy);
	memcpy(copy, sql, n);
	struct router_verdict v;
	bool ok = router_classify(copy, n, r, &v);
	ck_assert(ok == v.parsed);
	free(copy);
	return v;
}

static struct router_verdict classify(const char *sql)
{
	return classify_with(sql, &rules);
}

static bool has_key(const struct router_verdict *v, const char *text)
{
	for (size_t i = 0; i < v->n_keys; i++)
		if (v->keys[i].param == 0 && strcmp(v->keys[i].text, text) == 0)
			return true;
	return false;
}

static bool has_param(const struct router_verdict *v, int n)
{
	for (size_t i = 0; i < v->n_keys; i++)
		if (v->keys[i].param == n)
			return true;
	return false;
}

START_TEST(reads)
{
	static const char *const sqls[] = {
		"SELECT 1",
		"select * from t where a = 1",
		"SELECT count(*) FROM t JOIN u ON t.a = u.a GROUP BY 1 ORDER BY 1 LIMIT 5",
		"WITH x AS (SELECT * FROM t) SELECT * FROM x",
		"VALUES (1), (2)",
		"TABLE t",
		"SELECT * FROM t UNION ALL SELECT * FROM u",
		"SELECT currval('s')",
		"SHOW search_path",
		"EXPLAIN SELECT * FROM t",
		"EXPLAIN INSERT INTO t VALUES (1)",
		"EXPLAIN (ANALYZE false) DELETE FROM t",
		"EXPLAIN (ANALYZE 0) DELETE FROM t",
		"EXPLAIN (ANALYZE 'off') DELETE FROM t",
		"EXPLAIN ANALYZE SELECT 1",
		"COPY t TO STDOUT",
		"COPY (SELECT * FROM t) TO STDOUT",
		"SET search_path TO x",
		"RESET ALL",
		"DISCARD ALL",
		"DEALLOCATE ALL",
		"UNLISTEN *",
		"FETCH 10 FROM c",
		"CLOSE c",
		"DECLARE c CURSOR FOR SELECT 1",
		"PREPARE p AS SELECT 1",
		"SAVEPOINT a",
		"RELEASE a",
		"ROLLBACK TO a",
		"COMMIT",
		"ROLLBACK",
		"",
		"   ",
		";",
		"/* only a comment */",
		"SELECT 1; SELECT 2",
	};
	for (size_t i = 0; i < sizeof(sqls) / sizeof(sqls[0]); i++) {
		struct router_verdict v = classify(sqls[i]);
		ck_assert_msg(v.parsed, "%s: not parsed", sqls[i]);
		ck_assert_msg(!v.writes, "%s: classified as a write", sqls[i]);
	}
}
END_TEST

/* The write pause of a reshard's cutover takes for reads only those that
 * call no function but known readers: any other might write. */
START_TEST(unknown_functions)
{
	static const char *const known[] = {
		"SELECT count(*), max(a), lower(b) FROM t WHERE id = 1",
		"SELECT pg_catalog.now(), coalesce(a, 0), greatest(a, 1) FROM t",
		"SELECT a FROM t WHERE id = 1",
		"SELECT 1",
		"SHOW search_path",
	};
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		struct router_verdict v = classify(known[i]);
		ck_assert_msg(v.parsed && !v.writes, "%s: not a read", known[i]);
		ck_assert_msg(!v.calls_unknown, "%s: calls an unknown function", known[i]);
	}
	static const char *const unknown[] = {
		"SELECT my_func(1)",
		"SELECT a FROM t WHERE b = app.lower(c)",
		"SELECT * FROM t WHERE a IN (SELECT f(x) FROM u)",
		"SELECT public.count(*) FROM t",
	};
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		struct router_verdict v = classify(unknown[i]);
		ck_assert_msg(v.parsed && !v.writes, "%s: not a read", unknown[i]);
		ck_assert_msg(v.calls_unknown, "%s: every function taken for a known reader", unknown[i]);
	}
}
END_TEST

START_TEST(writes)
{
	static const char *const sqls[] = {
		"SELECT * FROM t FOR UPDATE",
		"SELECT * FROM t FOR NO KEY UPDATE",
		"SELECT * FROM t FOR SHARE",
		"SELECT * FROM t FOR KEY SHARE SKIP LOCKED",
		"SELECT * FROM t WHERE a IN (SELECT a FROM u FOR UPDATE)",
		"WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x",
		"WITH x AS (UPDATE t SET a = 1 RETURNING *) SELECT * FROM x",
		"WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x",
		"SELECT * FROM (WITH y AS (DELETE FROM t RETURNING a) SELECT a FROM y) z",
		"SELECT nextval('s')",
		"SELECT pg_catalog.NEXTVAL('s')",
		"SELECT setval('s', 10)",
		"SELECT pg_advisory_lock(1)",
		"SELECT pg_advisory_xact_lock_shared(1)",
		"SELECT pg_try_advisory_lock(1)",
		"SELECT * FROM nextval('s')",
		"SELECT my_writer(1)",
		"SELECT public.my_writer(1)",
		"SELECT log_event('x')",
		"SELECT 1 WHERE EXISTS (SELECT my_writer(2))",
		"SELECT * INTO t2 FROM t",
		"INSERT INTO t VALUES (1)",
		"UPDATE t SET a = 1",
		"DELETE FROM t",
		"MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DELETE",
		"CREATE TABLE x (a int)",
		"DROP TABLE x",
		"ALTER TABLE t ADD COLUMN b int",
		"CREATE INDEX ON t (a)",
		"TRUNCATE t",
		"COPY t FROM STDIN",
		"COPY t (a, b) FROM STDIN WITH (FORMAT csv)",
		"CREATE TABLE x AS SELECT 1",
		"LOCK TABLE t",
		"VACUUM t",
		"CALL p()",
		"DO $$ BEGIN END $$",
		"EXECUTE p(1)",
		"LISTEN ch",
		"NOTIFY ch",
		"EXPLAIN ANALYZE INSERT INTO t VALUES (1)",
		"EXPLAIN (ANALYZE, BUFFERS) UPDATE t SET a = 1",
		"EXPLAIN (ANALYZE 1) DELETE FROM t",
		"PREPARE p AS INSERT INTO t VALUES ($1)",
		"DECLARE c CURSOR FOR SELECT * FROM t FOR UPDATE",
		"COMMIT PREPARED 'x'",
		"GRANT SELECT ON t TO u",
		"SELECT 1; INSERT INTO t VALUES (1)",
		"CHECKPOINT",
	};
	for (size_t i = 0; i < sizeof(sqls) / sizeof(sqls[0]); i++) {
		struct router_verdict v = classify(sqls[i]);
		ck_assert_msg(v.parsed, "%s: not parsed", sqls[i]);
		ck_assert_msg(v.writes, "%s: classified as a read", sqls[i]);
	}
	/* only the configured function writes: another name with the prefix "log" does not */
	struct router_verdict v = classify("SELECT logarithm(1)");
	ck_assert(!v.writes);
}
END_TEST

START_TEST(transactions)
{
	static const struct {
		const char *sql;
		bool writes, begins, ro, ends;
	} cases[] = {
		{ "BEGIN", true, true, false, false },
		{ "begin;", true, true, false, false },
		{ "BEGIN READ ONLY", false, true, true, false },
		{ "BEGIN READ WRITE", true, true, false, false },
		{ "START TRANSACTION", true, true, false, false },
		{ "START TRANSACTION READ ONLY", false, true, true, false },
		{ "START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", false, true, true, false },
		{ "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY", false, true, true, false },
		{ "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE", false, true, true, false },
		{ "BEGIN ISOLATION LEVEL SERIALIZABLE", true, true, false, false },
		{ "BEGIN READ ONLY, READ WRITE", true, true, false, false },
		{ "COMMIT", false, false, false, true },
		{ "END", false, false, false, true },
		{ "ROLLBACK", false, false, false, true },
		{ "ABORT", false, false, false, true },
		{ "COMMIT AND CHAIN", false, false, false, true },
		{ "PREPARE TRANSACTION 'x'", false, false, false, true },
		{ "BEGIN READ ONLY; SELECT 1; COMMIT", false, true, true, true },
		{ "BEGIN; SELECT 1; COMMIT", true, true, false, true },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct router_verdict v = classify(cases[i].sql);
		ck_assert_msg(v.parsed, "%s", cases[i].sql);
		ck_assert_msg(v.writes == cases[i].writes, "%s: writes", cases[i].sql);
		ck_assert_msg(v.begins == cases[i].begins, "%s: begins", cases[i].sql);
		ck_assert_msg(v.begin_read_only == cases[i].ro, "%s: read only", cases[i].sql);
		ck_assert_msg(v.ends == cases[i].ends, "%s: ends", cases[i].sql);
	}
	ck_assert(classify("BEGIN; SELECT 1; COMMIT").multi_statement);
	ck_assert(!classify("BEGIN").multi_statement);
}
END_TEST

START_TEST(unparsable)
{
	static const char *const sqls[] = {
		"SELEC 1",
		"SELECT FROM WHERE",
		"SELECT 'unterminated",
		"SELECT JSON_OBJECT('a': 1)",                 /* PostgreSQL 16 */
		"SELECT * FROM t WHERE j IS JSON OBJECT",     /* PostgreSQL 16 */
		"MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DELETE RETURNING *",   /* 17 */
		"SELECT ((((((((((((((((((((((((((((((1",
		"\x01\x02\xff\xfe",
		"/* pgcat: shard=2 */ SELEC 1",
	};
	for (size_t i = 0; i < sizeof(sqls) / sizeof(sqls[0]); i++) {
		struct router_verdict v = classify(sqls[i]);
		ck_assert_msg(!v.parsed, "%s: parsed", sqls[i]);
		ck_assert(v.writes);
		ck_assert(!v.keys_complete && v.n_keys == 0);
	}
	ck_assert_int_eq(classify("/* pgcat: shard=2 */ SELEC 1").hint_shard, 2);

	/* text after an embedded NUL is what PostgreSQL would ignore too */
	struct router_verdict v;
	static const char nul[] = "SELECT 1\0; DELETE FROM t";
	ck_assert(router_classify(nul, sizeof(nul) - 1, &rules, &v));
	ck_assert(!v.writes);

	/* a deeply nested expression: no crash either way */
	size_t depth = 5000;
	char *deep = malloc(depth * 2 + 32);
	ck_assert_ptr_nonnull(deep);
	strcpy(deep, "SELECT ");
	size_t o = strlen(deep);
	for (size_t i = 0; i < depth; i++)
		deep[o++] = '(';
	deep[o++] = '1';
	for (size_t i = 0; i < depth; i++)
		deep[o++] = ')';
	deep[o] = '\0';
	router_classify(deep, o, &rules, &v);
	free(deep);

	/* every prefix of a rich statement: parsed or not, never a crash */
	static const char rich[] =
		"/* pgcat: role=replica */ WITH x AS (SELECT id FROM users u WHERE u.id IN (1, -2, $1) OR u.id = 'a''b')"
		" SELECT x.id, nextval('s') FROM x JOIN app.orders o ON o.user_id = x.id WHERE o.user_id = -7::bigint;";
	for (size_t n = 0; n <= sizeof(rich) - 1; n++) {
		char *p = malloc(n ? n : 1);
		ck_assert_ptr_nonnull(p);
		memcpy(p, rich, n);
		router_classify(p, n, &rules, &v);
		free(p);
	}
}
END_TEST

START_TEST(keys_select)
{
	struct router_verdict v = classify("SELECT * FROM users WHERE id = 5");
	ck_assert(v.parsed && !v.writes && v.reads_sharded && v.keys_complete);
	ck_assert_uint_eq(v.n_keys, 1);
	ck_assert_int_eq(v.keys[0].param, 0);
	ck_assert_str_eq(v.keys[0].text, "5");

	v = classify("SELECT * FROM users WHERE 5 = id");
	ck_assert(v.keys_complete && has_key(&v, "5"));

	v = classify("SELECT * FROM users WHERE id IN (1, 2)");
	ck_assert(v.keys_complete && v.n_keys == 2 && has_key(&v, "1") && has_key(&v, "2"));

	v = classify("SELECT * FROM users WHERE id NOT IN (1, 2)");
	ck_assert(v.reads_sharded && !v.keys_complete);

	v = classify("SELECT * FROM users");
	ck_assert(v.reads_sharded && !v.keys_complete && v.n_keys == 0);

	v = classify("SELECT * FROM users WHERE id > 5");
	ck_assert(v.reads_sharded && !v.keys_complete);

	/* negative, zero, big and typed literals; strings */
	v = classify("SELECT * FROM users WHERE id = -42");
	ck_assert(v.keys_complete && has_key(&v, "-42"));
	v = classify("SELECT * FROM users WHERE id = - 42");
	ck_assert(v.keys_complete && has_key(&v, "-42"));
	v = classify("SELECT * FROM users WHERE id = 0");
	ck_assert(v.keys_complete && has_key(&v, "0"));
	v = classify("SELECT * FROM users WHERE id = 9223372036854775807");
	ck_assert(v.keys_complete && has_key(&v, "9223372036854775807"));
	v = classify("SELECT * FROM users WHERE id = -9223372036854775808");
	ck_assert(v.keys_complete && has_key(&v, "-9223372036854775808"));
	v = classify("SELECT * FROM users WHERE id = '17'::bigint");
	ck_assert(v.keys_complete && has_key(&v, "17"));
	v = classify("SELECT * FROM users WHERE id = 'it''s'");
	ck_assert(v.keys_complete && has_key(&v, "it's"));
	v = classify("SELECT * FROM accounts WHERE uuid = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'");
	ck_assert(v.keys_complete && has_key(&v, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"));
	v = classify("SELECT * FROM users WHERE id = NULL");
	ck_assert(!v.keys_complete);
	v = classify("SELECT * FROM users WHERE id = true");
	ck_assert(!v.keys_complete);

	/* a key longer than a key's text: no key */
	v = classify("SELECT * FROM users WHERE id = "
		     "'0123456789012345678901234567890123456789012345678901234567890123456789'");
	ck_assert(!v.keys_complete && v.n_keys == 0);

	/* AND keeps the key; OR needs one in every branch */
	v = classify("SELECT * FROM users WHERE name = 'x' AND id = 3 AND age > 1");
	ck_assert(v.keys_complete && v.n_keys == 1 && has_key(&v, "3"));
	v = classify("SELECT * FROM users WHERE id = 1 OR name = 'x'");
	ck_assert(v.reads_sharded && !v.keys_complete && v.n_keys == 0);
	v = classify("SELECT * FROM users WHERE id = 1 OR id = 2");
	ck_assert(v.keys_complete && v.n_keys == 2);
	v = classify("SELECT * FROM users WHERE (id = 1 AND a = 2) OR (id IN (3, 4) AND b = 1)");
	ck_assert(v.keys_complete && v.n_keys == 3);
	v = classify("SELECT * FROM users WHERE NOT (id = 1)");
	ck_assert(!v.keys_complete);
}
END_TEST

START_TEST(keys_names)
{
	/* alias */
	struct router_verdict v = classify("SELECT * FROM users u WHERE u.id = 7");
	ck_assert(v.keys_complete && has_key(&v, "7"));
	v = classify("SELECT * FROM users AS u WHERE u.id = 7");
	ck_assert(v.keys_complete);
	v = classify("SELECT * FROM users u WHERE id = 7");
	ck_assert(v.keys_complete);
	v = classify("SELECT * FROM users WHERE users.id = 7");
	ck_assert(v.keys_complete);
	/* an alias hides the table's name; another table's column is no key */
	v = classify("SELECT * FROM users u, other o WHERE o.id = 7");
	ck_assert(v.reads_sharded && !v.keys_complete);
	v = classify("SELECT * FROM users u WHERE x.id = 7");
	ck_assert(!v.keys_complete);

	/* schema-qualified tables */
	v = classify("SELECT * FROM app.orders WHERE user_id = 9");
	ck_assert(v.reads_sharded && v.keys_complete && has_key(&v, "9"));
	v = classify("SELECT * FROM orders WHERE user_id = 9");
	ck_assert(v.reads_sharded && v.keys_complete);
	v = classify("SELECT * FROM app.orders WHERE app.orders.user_id = 9");
	ck_assert(v.keys_complete);
	v = classify("SELECT * FROM other.orders WHERE user_id = 9");
	ck_assert(!v.reads_sharded && !v.keys_complete && v.n_keys == 0);
	v = classify("SELECT * FROM anyschema.users WHERE id = 9");
	ck_assert(v.reads_sharded && v.keys_complete);
	v = classify("SELECT * FROM \"USERS\" WHERE \"ID\" = 9");
	ck_assert(v.reads_sharded && v.keys_complete);

	/* a key on a table that is not sharded is ignored */
	v = classify("SELECT * FROM items WHERE id = 5");
	ck_assert(!v.reads_sharded && !v.keys_complete && v.n_keys == 0);
	v = classify("SELECT * FROM users JOIN items ON items.id = 5 WHERE users.id = 6");
	ck_assert(v.keys_complete && v.n_keys == 1 && has_key(&v, "6"));

	/* parameters of the extended protocol */
	v = classify("SELECT * FROM users WHERE id = $1");
	ck_assert(v.keys_complete && v.n_keys == 1 && v.keys[0].param == 1 && v.keys[0].text[0] == '\0');
	v = classify("SELECT * FROM users WHERE id = $2::bigint AND name = $1");
	ck_assert(v.keys_complete && v.n_keys == 1 && has_param(&v, 2));
	v = classify("SELECT * FROM users WHERE id IN ($1, $2, 3)");
	ck_assert(v.keys_complete && has_param(&v, 1) && has_param(&v, 2) && has_key(&v, "3"));
	v = classify("SELECT * FROM users WHERE id = ANY($1)");
	ck_assert(!v.keys_complete);
}
END_TEST

START_TEST(keys_structure)
{
	/* joins */
	struct router_verdict v = classify("SELECT * FROM users u JOIN app.orders o ON o.user_id = u.id WHERE u.id = 4");
	ck_assert(v.keys_complete && v.n_keys == 1 && has_key(&v, "4"));
	v = classify("SELECT * FROM users u JOIN app.orders o ON o.user_id = u.id WHERE o.user_id = 4");
	ck_assert(v.keys_complete);
	v = classify("SELECT * FROM users u JOIN app.orders o ON o.user_id = 4 WHERE u.id = 4");
	ck_assert(v.keys_complete);
	v = classify("SELECT * FROM users u JOIN app.orders o ON o.total > 1 WHERE u.id = 4");
	ck_assert(!v.keys_complete);
	v = classify("SELECT * FROM users u LEFT JOIN app.orders o ON o.user_id = 4 WHERE u.id = 4");
	ck_assert(!v.keys_complete);

	/* subqueries, CTEs, unions: every sharded reference needs its key */
	v = classify("SELECT * FROM (SELECT * FROM users WHERE id = 1) s");
	ck_assert(v.keys_complete);
	v = classify("WITH s AS (SELECT * FROM users WHERE id = 1) SELECT * FROM s");
	ck_assert(v.keys_complete);
	v = classify("SELECT * FROM users WHERE id = 1 UNION SELECT * FROM users WHERE id = 2");
	ck_assert(v.keys_complete && v.n_keys == 2);
	v = classify("SELECT * FROM users WHERE id = 1 UNION SELECT * FROM users");
	ck_assert(!v.keys_complete);
	v = classify("SELECT * FROM users WHERE id IN (SELECT user_id FROM app.orders)");
	ck_assert(!v.keys_complete);
	v = classify("SELECT * FROM items WHERE a IN (SELECT id FROM users WHERE id = 3)");
	ck_assert(v.keys_complete && has_key(&v, "3"));
	v = classify("SELECT * FROM users TABLESAMPLE SYSTEM (10) WHERE id = 3");
	ck_assert(v.keys_complete);
	/* FOR UPDATE OF names an alias, not another reference */
	v = classify("SELECT * FROM users WHERE id = 3 FOR UPDATE OF users");
	ck_assert(v.writes && v.keys_complete);

	/* INSERT: every row */
	v = classify("INSERT INTO users (name, id) VALUES ('a', 1)");
	ck_assert(v.writes && v.reads_sharded && v.keys_complete && v.n_keys == 1 && has_key(&v, "1"));
	v = classify("INSERT INTO users (id, name) VALUES (1, 'a'), (-2, 'b'), ($1, $2)");
	ck_assert(v.keys_complete && v.n_keys == 3 && has_key(&v, "1") && has_key(&v, "-2") && has_param(&v, 1));
	v = classify("INSERT INTO users (id, name) VALUES (1, 'a'), (DEFAULT, 'b')");
	ck_assert(v.reads_sharded && !v.keys_complete && v.n_keys == 0);
	v = classify("INSERT INTO users VALUES (1, 'a')");
	ck_assert(v.reads_sharded && !v.keys_complete);
	v = classify("INSERT INTO users (name) VALUES ('a')");
	ck_assert(!v.keys_complete);
	v = classify("INSERT INTO users (id) SELECT id FROM staging");
	ck_assert(!v.keys_complete);
	v = classify("INSERT INTO app.orders (user_id, total) VALUES (8, 1) ON CONFLICT (user_id) DO NOTHING RETURNING *");
	ck_assert(v.keys_complete && has_key(&v, "8"));
	v = classify("INSERT INTO items (id) VALUES (1)");
	ck_assert(v.writes && !v.reads_sharded && v.n_keys == 0);

	/* too many keys for the verdict */
	v = classify("INSERT INTO users (id) VALUES (1),(2),(3),(4),(5),(6),(7),(8),(9),(10),"
		     "(11),(12),(13),(14),(15),(16),(17)");
	ck_assert(!v.keys_complete && v.n_keys == 16);
	v = classify("INSERT INTO users (id) VALUES (1),(1),(1),(1),(1),(1),(1),(1),(1),(1),"
		     "(1),(1),(1),(1),(1),(1),(1),(1)");
	ck_assert(v.keys_complete && v.n_keys == 1);

	/* UPDATE, DELETE */
	v = classify("UPDATE users SET name = 'x' WHERE id = 5");
	ck_assert(v.writes && v.keys_complete && has_key(&v, "5"));
	v = classify("UPDATE users u SET name = 'x' WHERE u.id = $1");
	ck_assert(v.keys_complete && has_param(&v, 1));
	v = classify("UPDATE users SET name = 'x'");
	ck_assert(v.reads_sharded && !v.keys_complete);
	v = classify("UPDATE users SET id = 6 WHERE id = 5");
	ck_assert(!v.keys_complete);
	v = classify("DELETE FROM users WHERE id = 5");
	ck_assert(v.writes && v.keys_complete && has_key(&v, "5"));
	v = classify("DELETE FROM app.orders o USING users u WHERE o.user_id = u.id AND u.id = 3");
	ck_assert(v.keys_complete && v.n_keys == 1);
	v = classify("DELETE FROM users WHERE id = 5 OR id > 100");
	ck_assert(!v.keys_complete);
	v = classify("WITH d AS (DELETE FROM users WHERE id = 2 RETURNING *) SELECT * FROM d");
	ck_assert(v.writes && v.keys_complete);

	/* DDL and other statements never touch sharded tables here */
	v = classify("ALTER TABLE users ADD COLUMN x int");
	ck_assert(v.writes && !v.reads_sharded);
	v = classify("COPY users FROM STDIN");
	ck_assert(v.writes && v.reads_sharded && !v.keys_complete);
	v = classify("EXPLAIN SELECT * FROM users WHERE id = 1");
	ck_assert(!v.writes && v.keys_complete);
	v = classify("SELECT 1");
	ck_assert(!v.reads_sharded && !v.keys_complete);
	v = classify("SELECT * FROM users WHERE id = 1; SELECT * FROM users WHERE id = 2");
	ck_assert(v.multi_statement && v.keys_complete && v.n_keys == 2);

	/* rules without sharded tables */
	struct router_rules plain = { .max_length = 1000 };
	v = classify_with("SELECT * FROM users WHERE id = 1", &plain);
	ck_assert(v.parsed && !v.reads_sharded && v.n_keys == 0 && !v.writes);
	v = classify_with("SELECT my_writer()", &plain);
	ck_assert(!v.writes);
}
END_TEST

START_TEST(hints)
{
	struct router_verdict v = classify("/* pgcat: shard=1 */ SELECT 1");
	ck_assert_int_eq(v.hint_shard, 1);
	ck_assert(!v.has_hint_key && v.hint_role == ROUTER_ROLE_NONE);

	v = classify("/*pgcat:sharding_key=1234*/SELECT * FROM users");
	ck_assert(v.has_hint_key);
	ck_assert_str_eq(v.hint_key, "1234");
	ck_assert_int_eq(v.hint_shard, -1);

	v = classify("  \n/*  PGCAT :  role=replica ,shard = 12  sharding_key='a b' */ SELECT 1");
	ck_assert_int_eq(v.hint_role, ROUTER_ROLE_REPLICA);
	ck_assert_int_eq(v.hint_shard, 12);
	ck_assert_str_eq(v.hint_key, "a b");

	v = classify("/* pgcat: role=primary */ SELECT 1");
	ck_assert_int_eq(v.hint_role, ROUTER_ROLE_PRIMARY);
	v = classify("/* pgcat: role=any */ SELECT 1");
	ck_assert_int_eq(v.hint_role, ROUTER_ROLE_ANY);
	ck_assert(!v.hint_invalid);
	v = classify("/* pgcat: role=bogus shard=x sharding_key= */ SELECT 1");
	ck_assert_int_eq(v.hint_role, ROUTER_ROLE_NONE);
	ck_assert_int_eq(v.hint_shard, -1);
	ck_assert(!v.has_hint_key);
	ck_assert(v.hint_invalid);   /* bad shard= and sharding_key= values: 22023 for route.c */
	v = classify("/* pgcat: shard=-1 */ SELECT 1");
	ck_assert(v.hint_invalid && v.hint_shard == -1);
	v = classify("/* pgcat: sharding_key=" "0123456789012345678901234567890123456789012345678901234567890123" " */ SELECT 1");
	ck_assert(v.hint_invalid && !v.has_hint_key);
	v = classify("/* pgcat: sharding_key='' */ SELECT 1");
	ck_assert(v.hint_invalid);

	/* only a leading comment, only with the pgcat: prefix */
	v = classify("SELECT 1 /* pgcat: shard=1 */");
	ck_assert_int_eq(v.hint_shard, -1);
	v = classify("/* shard=1 */ SELECT 1");
	ck_assert_int_eq(v.hint_shard, -1);
	v = classify("-- pgcat: shard=1\nSELECT 1");
	ck_assert_int_eq(v.hint_shard, -1);
	v = classify("/* pgcat: shard=1 SELECT 1");
	ck_assert_int_eq(v.hint_shard, -1);
	ck_assert(!v.parsed);

	/* hints are read even when the text is too long to parse */
	struct router_rules tiny = rules;
	tiny.max_length = 10;
	v = classify_with("/* pgcat: shard=3 */ SELECT 1", &tiny);
	ck_assert(!v.parsed && v.hint_shard == 3);

	ck_assert(router_role_parse("Replica", 7, &v.hint_role) && v.hint_role == ROUTER_ROLE_REPLICA);
	ck_assert(router_role_parse("auto", 4, &v.hint_role) && v.hint_role == ROUTER_ROLE_NONE);
	ck_assert(router_role_parse("DEFAULT", 7, &v.hint_role) && v.hint_role == ROUTER_ROLE_NONE);
	ck_assert(!router_role_parse("prim", 4, &v.hint_role));
}
END_TEST

static enum router_command cmd(const char *sql, char *value, size_t valuelen)
{
	size_t n = strlen(sql);
	char *copy = malloc(n ? n : 1);
	ck_assert_ptr_nonnull(copy);
	memcpy(copy, sql, n);
	enum router_command c = router_parse_command(copy, n, value, valuelen);
	free(copy);
	return c;
}

START_TEST(commands)
{
	static const struct {
		const char *sql;
		enum router_command cmd;
		const char *value;
	} cases[] = {
		{ "SET SHARD TO '1'", ROUTER_CMD_SET_SHARD, "1" },
		{ "set shard to '1';", ROUTER_CMD_SET_SHARD, "1" },
		{ "  SeT   ShArD\tTo\n'15' ; ", ROUTER_CMD_SET_SHARD, "15" },
		{ "SET SHARD = 2", ROUTER_CMD_SET_SHARD, "2" },
		{ "SET SHARD TO 2;;", ROUTER_CMD_SET_SHARD, "2" },
		{ "SET SHARD TO'3'", ROUTER_CMD_SET_SHARD, "3" },
		{ "SET SHARDING KEY TO '1234'", ROUTER_CMD_SET_SHARDING_KEY, "1234" },
		{ "set sharding key to '-12'", ROUTER_CMD_SET_SHARDING_KEY, "-12" },
		{ "SET SHARDING KEY TO ' 0042 '", ROUTER_CMD_SET_SHARDING_KEY, " 0042 " },
		{ "SET SHARDING KEY TO 'it''s'", ROUTER_CMD_SET_SHARDING_KEY, "it's" },
		{ "SET SHARDING KEY TO -7", ROUTER_CMD_SET_SHARDING_KEY, "-7" },
		{ "SET SHARDING KEY TO ''", ROUTER_CMD_SET_SHARDING_KEY, "" },
		{ "SET SERVER ROLE TO 'primary'", ROUTER_CMD_SET_SERVER_ROLE, "primary" },
		{ "SET SERVER ROLE TO 'replica'", ROUTER_CMD_SET_SERVER_ROLE, "replica" },
		{ "SET SERVER ROLE TO 'auto'", ROUTER_CMD_SET_SERVER_ROLE, "auto" },
		{ "SET SERVER ROLE TO 'any'", ROUTER_CMD_SET_SERVER_ROLE, "any" },
		{ "SET SERVER ROLE TO default", ROUTER_CMD_SET_SERVER_ROLE, "default" },
		{ "SET SERVER ROLE TO \"Replica\"", ROUTER_CMD_SET_SERVER_ROLE, "Replica" },
		{ "SET SERVER ROLE TO 'bogus'", ROUTER_CMD_SET_SERVER_ROLE, "bogus" },
		{ "SET PRIMARY READS TO 'on'", ROUTER_CMD_SET_PRIMARY_READS, "on" },
		{ "SET PRIMARY READS TO off", ROUTER_CMD_SET_PRIMARY_READS, "off" },
		{ "SET PRIMARY READS TO 'default';", ROUTER_CMD_SET_PRIMARY_READS, "default" },
		{ "SHOW SHARD", ROUTER_CMD_SHOW_SHARD, "" },
		{ "show shard;", ROUTER_CMD_SHOW_SHARD, "" },
		{ "SHOW SERVER ROLE", ROUTER_CMD_SHOW_SERVER_ROLE, "" },
		{ " show  server\nrole ; ", ROUTER_CMD_SHOW_SERVER_ROLE, "" },
		{ "SHOW PRIMARY READS;", ROUTER_CMD_SHOW_PRIMARY_READS, "" },
		/* not ours: forwarded */
		{ "SELECT 1", ROUTER_CMD_NONE, "" },
		{ "", ROUTER_CMD_NONE, "" },
		{ "   ", ROUTER_CMD_NONE, "" },
		{ "SET search_path TO x", ROUTER_CMD_NONE, "" },
		{ "SET shard.x = 1", ROUTER_CMD_NONE, "" },
		{ "SET shard_count = 1", ROUTER_CMD_NONE, "" },
		{ "SHOW server_version", ROUTER_CMD_NONE, "" },
		{ "SHOW primary_conninfo", ROUTER_CMD_NONE, "" },
		{ "SHOW ALL", ROUTER_CMD_NONE, "" },
		{ "SETSHARD TO 1", ROUTER_CMD_NONE, "" },
		{ "SET LOCAL shard TO 1", ROUTER_CMD_NONE, "" },
		{ "SET", ROUTER_CMD_NONE, "" },
		{ "/* x */ SET SHARD TO 1", ROUTER_CMD_NONE, "" },
		{ "SELECT 'SET SHARD TO 1'", ROUTER_CMD_NONE, "" },
		/* ours but malformed */
		{ "SET SHARD", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD TO", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD 1", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD TO '1", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD TO '1' '2'", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD TO 1; SELECT 1", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD TO (1)", ROUTER_CMD_INVALID, "" },
		{ "SET SHARDING TO '1'", ROUTER_CMD_INVALID, "" },
		{ "SET SHARDING KEYS TO '1'", ROUTER_CMD_INVALID, "" },
		{ "SET SERVER TO 'primary'", ROUTER_CMD_INVALID, "" },
		{ "SET PRIMARY READ TO 'on'", ROUTER_CMD_INVALID, "" },
		{ "SHOW SHARD 1", ROUTER_CMD_INVALID, "" },
		{ "SHOW SERVER", ROUTER_CMD_INVALID, "" },
		{ "SHOW SERVER ROLES", ROUTER_CMD_INVALID, "" },
		{ "SHOW PRIMARY", ROUTER_CMD_INVALID, "" },
		{ "SHOW SHARDING KEY", ROUTER_CMD_NONE, "" },
		/* whitespace is C's: \v and \f separate words too */
		{ "\vSET\vSHARD\fTO\v'4'\v;", ROUTER_CMD_SET_SHARD, "4" },
		{ "SHOW\vSERVER\vROLE", ROUTER_CMD_SHOW_SERVER_ROLE, "" },
		/* comments are not skipped: before the command, it is not ours;
		 * inside or after it, it is malformed */
		{ "-- c\nSET SHARD TO 1", ROUTER_CMD_NONE, "" },
		{ "SET /* c */ SHARD TO 1", ROUTER_CMD_NONE, "" },
		{ "SET SHARD /* c */ TO 1", ROUTER_CMD_INVALID, "" },
		{ "SET SERVER /* c */ ROLE TO 1", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD TO /* c */ 1", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD TO '1' -- c", ROUTER_CMD_INVALID, "" },
		{ "SHOW SHARD /* c */", ROUTER_CMD_INVALID, "" },
		/* a bare value takes '-': "1--c" is one value, and so is "--c" */
		{ "SET SHARD TO 1--c", ROUTER_CMD_SET_SHARD, "1--c" },
		{ "SET SHARD TO --c", ROUTER_CMD_SET_SHARD, "--c" },
		{ "SET SHARD TO 1.5", ROUTER_CMD_SET_SHARD, "1.5" },
		{ "SET SHARD TO +2", ROUTER_CMD_SET_SHARD, "+2" },
		/* quotes: no E'' escapes, no dollar quotes, "" and '' empty */
		{ "SET SHARDING KEY TO E'1'", ROUTER_CMD_INVALID, "" },
		{ "SET SHARDING KEY TO 'a\\'", ROUTER_CMD_SET_SHARDING_KEY, "a\\" },
		{ "SET SHARDING KEY TO $$1$$", ROUTER_CMD_INVALID, "" },
		{ "SET SERVER ROLE TO \"\"", ROUTER_CMD_SET_SERVER_ROLE, "" },
		{ "SET SHARDING KEY TO 'a\"b'", ROUTER_CMD_SET_SHARDING_KEY, "a\"b" },
		{ "SET SHARD TO 'x'y", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD TO 1 2", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD=3", ROUTER_CMD_SET_SHARD, "3" },
		{ "SET SHARD TOO 3", ROUTER_CMD_INVALID, "" },
		/* '$' and bytes >= 0x80 continue a word, end a bare value */
		{ "SET SHARD$ TO 1", ROUTER_CMD_NONE, "" },
		{ "SET SHARD TO 1$", ROUTER_CMD_INVALID, "" },
		{ "SET SHARD TO \xc3\xa9", ROUTER_CMD_INVALID, "" },
		{ "SHOW\tshard\r\n;;", ROUTER_CMD_SHOW_SHARD, "" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char value[64];
		memset(value, 'x', sizeof(value));
		enum router_command c = cmd(cases[i].sql, value, sizeof(value));
		ck_assert_msg(c == cases[i].cmd, "%s: got %d, want %d", cases[i].sql, (int)c, (int)cases[i].cmd);
		ck_assert_msg(strcmp(value, cases[i].value) == 0, "%s: value '%s'", cases[i].sql, value);
	}
	/* a value that does not fit */
	char small[4];
	ck_assert_int_eq(cmd("SET SHARDING KEY TO '1234'", small, sizeof(small)), ROUTER_CMD_INVALID);
	ck_assert_int_eq(cmd("SET SHARDING KEY TO '123'", small, sizeof(small)), ROUTER_CMD_SET_SHARDING_KEY);
	ck_assert_str_eq(small, "123");
	ck_assert_int_eq(cmd("SET SHARDING KEY TO 1234", small, sizeof(small)), ROUTER_CMD_INVALID);
	/* no value buffer: still recognised */
	ck_assert_int_eq(cmd("SHOW SHARD", NULL, 0), ROUTER_CMD_SHOW_SHARD);
	ck_assert_int_eq(cmd("SET SHARD TO 1", NULL, 0), ROUTER_CMD_SET_SHARD);
	ck_assert_int_eq(router_parse_command(NULL, 0, NULL, 0), ROUTER_CMD_NONE);
	/* the length bounds the text; a NUL inside a quoted value is kept */
	char v[8];
	ck_assert_int_eq(router_parse_command("SET SHARD TO 12; x", 15, v, sizeof v), ROUTER_CMD_SET_SHARD);
	ck_assert_str_eq(v, "12");
	ck_assert_int_eq(router_parse_command("SET SHARD TO 12", 14, v, sizeof v), ROUTER_CMD_SET_SHARD);
	ck_assert_str_eq(v, "1");
	ck_assert_int_eq(router_parse_command("SET SHARD TO 'a\0b'", 18, v, sizeof v), ROUTER_CMD_SET_SHARD);
	ck_assert(memcmp(v, "a\0b", 4) == 0);
	ck_assert_int_eq(router_parse_command("SET SHARD TO 1\0", 15, v, sizeof v), ROUTER_CMD_INVALID);
	/* a value buffer of 0 bytes takes nothing, not even "" */
	ck_assert_int_eq(router_parse_command("SET SHARD TO ''", 15, v, 0), ROUTER_CMD_INVALID);
}
END_TEST

START_TEST(cache)
{
	struct router_cache *c = router_cache_new(2);
	ck_assert_ptr_nonnull(c);
	struct router_cache_stats st;

	const struct router_verdict *v = router_cache_classify(c, "SELECT * FROM users WHERE id = 1", 32, &rules);
	ck_assert(v->parsed && !v->writes && v->keys_complete && has_key(v, "1"));
	struct router_verdict first = *v;
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 1", 32, &rules);
	ck_assert_int_eq(memcmp(v, &first, offsetof(struct router_verdict, keys)), 0);
	ck_assert_str_eq(v->keys[0].text, "1");
	router_cache_stats(c, &st);
	ck_assert(st.hits == 1 && st.misses == 1 && st.entries == 1);

	/* same text under other rules is another entry */
	struct router_rules plain = { .max_length = 1000 };
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 1", 32, &plain);
	ck_assert(v->parsed && !v->reads_sharded && v->n_keys == 0);
	router_cache_stats(c, &st);
	ck_assert(st.misses == 2 && st.entries == 2);

	/* A is the oldest now (the plain one was used last): touch it, insert C, B is evicted */
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 1", 32, &rules);
	ck_assert(v->keys_complete);
	v = router_cache_classify(c, "DELETE FROM t", 13, &rules);
	ck_assert(v->writes);
	router_cache_stats(c, &st);
	ck_assert(st.entries == 2 && st.evictions == 1 && st.hits == 2);
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 1", 32, &rules);
	router_cache_stats(c, &st);
	ck_assert(st.hits == 3);
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 1", 32, &plain);
	router_cache_stats(c, &st);
	ck_assert(st.misses == 4 && st.evictions == 2);
	ck_assert(!v->reads_sharded);

	/* a prefix of a cached text is not a hit */
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 1", 31, &rules);
	ck_assert(!v->parsed || v->n_keys == 0);
	router_cache_stats(c, &st);
	ck_assert(st.misses == 5);
	router_cache_free(c);

	/* many entries: rehashing, eviction order, and no leak */
	c = router_cache_new(100);
	char sql[64];
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 300; i++) {
			int n = snprintf(sql, sizeof(sql), "SELECT * FROM users WHERE id = %d", i);
			v = router_cache_classify(c, sql, (size_t)n, &rules);
			char want[16];
			snprintf(want, sizeof(want), "%d", i);
			ck_assert(v->keys_complete && v->n_keys == 1 && strcmp(v->keys[0].text, want) == 0);
		}
	}
	router_cache_stats(c, &st);
	ck_assert(st.entries == 100 && st.hits == 0 && st.misses == 600 && st.evictions == 500);
	for (int i = 299; i >= 200; i--) {
		int n = snprintf(sql, sizeof(sql), "SELECT * FROM users WHERE id = %d", i);
		router_cache_classify(c, sql, (size_t)n, &rules);
	}
	router_cache_stats(c, &st);
	ck_assert(st.hits == 100 && st.entries == 100);
	router_cache_free(c);

	/* capacity 0 caches nothing */
	c = router_cache_new(0);
	v = router_cache_classify(c, "SELECT 1", 8, &rules);
	v = router_cache_classify(c, "SELECT 1", 8, &rules);
	ck_assert(v->parsed && !v->writes);
	router_cache_stats(c, &st);
	ck_assert(st.entries == 0 && st.hits == 0);
	router_cache_free(c);
	router_cache_free(NULL);
}
END_TEST

START_TEST(max_length)
{
	size_t n = 1024 * 1024;
	char *big = malloc(n);
	ck_assert_ptr_nonnull(big);
	memcpy(big, "/* pgcat: shard=2 */ SELECT '", 29);
	memset(big + 29, 'a', n - 31);
	memcpy(big + n - 2, "';", 2);
	struct router_verdict v;
	ck_assert(!router_classify(big, n, &rules, &v));
	ck_assert(!v.parsed && v.writes && v.hint_shard == 2);

	struct router_cache *c = router_cache_new(10);
	const struct router_verdict *cv = router_cache_classify(c, big, n, &rules);
	ck_assert(!cv->parsed && cv->hint_shard == 2);
	struct router_cache_stats st;
	router_cache_stats(c, &st);
	ck_assert_uint_eq(st.entries, 0);
	router_cache_free(c);

	/* with a limit above it, the same text is parsed */
	struct router_rules wide = rules;
	wide.max_length = SIZE_MAX;
	ck_assert(router_classify(big, n, &wide, &v));
	ck_assert(!v.writes);
	/* quotes and backslashes, escaped in the JSON: still one linear pass */
	for (size_t i = 29; i + 2 < n - 2; i += 2)
		memcpy(big + i, "\"\\", 2);
	ck_assert(router_classify(big, n, &wide, &v));
	ck_assert(!v.writes && v.hint_shard == 2);
	memcpy(big + n - 40, "' FROM users WHERE id = '\"\\\"\\\\';      ", 39);
	ck_assert(router_classify(big, n, &wide, &v));
	ck_assert(v.keys_complete && has_key(&v, "\"\\\"\\\\"));
	/* exactly at the limit is parsed; one byte over is not; 0 parses nothing */
	wide.max_length = 8;
	ck_assert(router_classify("SELECT 1", 8, &wide, &v));
	ck_assert(!router_classify("SELECT 10", 9, &wide, &v));
	wide.max_length = 0;
	ck_assert(!router_classify("SELECT 1", 8, &wide, &v));
	free(big);
}
END_TEST

/* Without sharded tables, statements that differ only in their constants
 * share one entry (their shape); with sharded tables the constants are keys
 * and every text is its own entry. */
START_TEST(cache_shapes)
{
	struct router_cache *c = router_cache_new(16);
	ck_assert_ptr_nonnull(c);
	struct router_cache_stats st;
	struct router_rules plain = { .max_length = 1000 };
	const struct router_verdict *v = router_cache_classify(c, "SELECT * FROM users WHERE id = 1", 32, &plain);
	ck_assert(v->parsed && !v->writes);
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 22", 33, &plain);
	ck_assert(v->parsed && !v->writes);
	router_cache_stats(c, &st);
	ck_assert(st.hits == 1 && st.misses == 1 && st.entries == 1);
	/* a string where the integer was: another shape */
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = '1'", 34, &plain);
	router_cache_stats(c, &st);
	ck_assert(st.hits == 1 && st.misses == 2);
	/* a write of the same shape family stays a write */
	v = router_cache_classify(c, "UPDATE users SET n = 1 WHERE id = 5", 35, &plain);
	ck_assert(v->parsed && v->writes);
	v = router_cache_classify(c, "UPDATE users SET n = 2 WHERE id = 6", 35, &plain);
	ck_assert(v->parsed && v->writes);
	router_cache_stats(c, &st);
	ck_assert(st.hits == 2 && st.misses == 3);
	/* the hint in a comment is part of the shape */
	v = router_cache_classify(c, "/* pgcat: role=primary */ SELECT 1", 34, &plain);
	ck_assert_int_eq(v->hint_role, ROUTER_ROLE_PRIMARY);
	v = router_cache_classify(c, "/* pgcat: role=replica */ SELECT 2", 34, &plain);
	ck_assert_int_eq(v->hint_role, ROUTER_ROLE_REPLICA);
	/* EXPLAIN's options are constants that matter: no shape */
	v = router_cache_classify(c, "EXPLAIN (ANALYZE 1) DELETE FROM t", 33, &plain);
	ck_assert(v->writes);
	v = router_cache_classify(c, "EXPLAIN (ANALYZE 0) DELETE FROM t", 33, &plain);
	ck_assert(!v->writes);
	/* sharding keys: every value is looked at */
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 1", 32, &rules);
	ck_assert(has_key(v, "1"));
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 2", 32, &rules);
	ck_assert(has_key(v, "2") && !has_key(v, "1"));
	router_cache_free(c);

	/* A simple Query's text (literals_inline) is shaped first: it meets
	 * the entries made from the other order, and the other order its. */
	c = router_cache_new(16);
	ck_assert_ptr_nonnull(c);
	struct router_rules query = { .max_length = 1000, .literals_inline = true };
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 1", 32, &query);
	ck_assert(v->parsed && !v->writes);
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 7", 32, &plain);
	v = router_cache_classify(c, "SELECT * FROM users WHERE id = 8", 32, &query);
	ck_assert(v->parsed && !v->writes);
	router_cache_stats(c, &st);
	ck_assert(st.hits == 2 && st.misses == 1 && st.entries == 1);
	/* without constants: kept under the text, found either way */
	v = router_cache_classify(c, "DELETE FROM t WHERE id = $1", 27, &plain);
	ck_assert(v->writes);
	v = router_cache_classify(c, "DELETE FROM t WHERE id = $1", 27, &query);
	ck_assert(v->writes);
	v = router_cache_classify(c, "SELECT now()", 12, &query);
	v = router_cache_classify(c, "SELECT now()", 12, &plain);
	ck_assert(v->parsed && !v->writes);
	router_cache_stats(c, &st);
	ck_assert(st.hits == 4 && st.misses == 3 && st.entries == 3);
	router_cache_free(c);
}
END_TEST

/* The cache's hash (include/texthash.h) reads every byte at every length,
 * the overlapping last word included: a change of any one byte changes it,
 * and so does the length alone. */
START_TEST(texthash_every_byte)
{
	char a[48], b[48];
	for (size_t n = 0; n <= 40; n++) {
		for (size_t i = 0; i < n; i++)
			a[i] = (char)('a' + (i * 7) % 26);
		memcpy(b, a, n);
		ck_assert(texthash(a, n, 1) == texthash(b, n, 1));
		ck_assert(texthash(a, n, 1) != texthash(a, n, 2));
		if (n > 0)
			ck_assert_msg(texthash(a, n, 1) != texthash(a, n - 1, 1), "length %zu", n);
		for (size_t i = 0; i < n; i++) {
			b[i] ^= 0x01;
			ck_assert_msg(texthash(a, n, 1) != texthash(b, n, 1), "length %zu, byte %zu", n, i);
			b[i] = a[i];
		}
	}
}
END_TEST

Suite *router_suite(void)
{
	Suite *s = suite_create("router");
	TCase *tc = tcase_create("router");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, reads);
	tcase_add_test(tc, texthash_every_byte);
	tcase_add_test(tc, writes);
	tcase_add_test(tc, unknown_functions);
	tcase_add_test(tc, transactions);
	tcase_add_test(tc, unparsable);
	tcase_add_test(tc, keys_select);
	tcase_add_test(tc, keys_names);
	tcase_add_test(tc, keys_structure);
	tcase_add_test(tc, hints);
	tcase_add_test(tc, commands);
	tcase_add_test(tc, cache);
	tcase_add_test(tc, cache_shapes);
	tcase_add_test(tc, max_length);
	suite_add_tcase(s, tc);
	return s;
}
