/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the router's readers of client SQL.
 *  - router_classify(): libpg_query's parse, our JSON walk over its output,
 *    comment hints, sharding keys; with a pool's sharded tables and extra
 *    writing functions, and once more through the verdict cache (a hit
 *    must give the same verdict as the first parse).
 *  - router_parse_command(): pgcat's own SET/SHOW statements, with a value
 *    buffer allocated to its exact size: the production size and 0..3.
 *  - router_role_parse().
 *  - sqlshape_make(): a text with a shape and the text made from that shape
 *    with other constants of the same classes get the same verdict (without
 *    sharded tables, where the cache looks statements up by shape).
 * The text is copied to a buffer of exactly its length, not terminated.
 */
#include "router.h"
#include "sqlshape.h"

#include <stdint.h>
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

static const struct router_table sharded[] = {
	{ .schema = NULL, .table = "users", .column = "id" },
	{ .schema = "public", .table = "orders", .column = "user_id" },
	{ .schema = "app", .table = "events", .column = "tenant" },
};
static const char *const writers[] = { "my_writer", "audit_*", "app.bump" };

static void check_verdict(const struct router_verdict *v)
{
	CHECK(v->n_keys <= ROUTER_MAX_KEYS);
	for (size_t i = 0; i < v->n_keys; i++) {
		CHECK(v->keys[i].param >= 0);
		CHECK(memchr(v->keys[i].text, '\0', sizeof v->keys[i].text) != NULL);
	}
	CHECK(memchr(v->hint_key, '\0', sizeof v->hint_key) != NULL);
	CHECK(v->hint_shard >= -1);
	if (!v->parsed) {
		/* Not understood: route by the defaults, as a write. */
		CHECK(v->writes && !v->begins && !v->ends && !v->keys_complete && v->n_keys == 0);
	}
	if (v->keys_complete)
		CHECK(v->n_keys > 0);
}

static bool same_verdict(const struct router_verdict *a, const struct router_verdict *b)
{
	if (a->parsed != b->parsed || a->writes != b->writes || a->begins != b->begins ||
	    a->begin_read_only != b->begin_read_only || a->ends != b->ends ||
	    a->reads_sharded != b->reads_sharded || a->multi_statement != b->multi_statement ||
	    a->keys_complete != b->keys_complete || a->hint_shard != b->hint_shard ||
	    a->has_hint_key != b->has_hint_key || a->hint_role != b->hint_role ||
	    strcmp(a->hint_key, b->hint_key) != 0 || a->n_keys != b->n_keys)
		return false;
	for (size_t i = 0; i < a->n_keys; i++)
		if (a->keys[i].param != b->keys[i].param || strcmp(a->keys[i].text, b->keys[i].text) != 0)
			return false;
	return true;
}

static void command(const char *sql, size_t len, size_t valuelen)
{
	/* malloc(0) too: ASan reports any byte written to it. */
	char *value = malloc(valuelen);
	if (value == NULL && valuelen > 0)
		return;
	enum router_command cmd = router_parse_command(sql, len, value, valuelen);
	switch (cmd) {
	case ROUTER_CMD_SET_SHARD:
	case ROUTER_CMD_SET_SHARDING_KEY:
	case ROUTER_CMD_SET_SERVER_ROLE:
	case ROUTER_CMD_SET_PRIMARY_READS:
		CHECK(valuelen > 0 && memchr(value, '\0', valuelen) != NULL);
		break;
	case ROUTER_CMD_NONE:
	case ROUTER_CMD_SHOW_SHARD:
	case ROUTER_CMD_SHOW_SERVER_ROLE:
	case ROUTER_CMD_SHOW_PRIMARY_READS:
	case ROUTER_CMD_INVALID:
		if (valuelen > 0)
			CHECK(value[0] == '\0');
		break;
	}
	free(value);
	/* Without a value buffer: same verdict on what the statement is. */
	enum router_command bare = router_parse_command(sql, len, NULL, 0);
	if (cmd != ROUTER_CMD_INVALID)
		CHECK(bare == cmd);
}

/* Other constants in the places of sql's: the shape's markers replaced. */
static void shape_check(const char *sql, size_t size)
{
	for (size_t i = 0; i < size; i++)
		if (sql[i] == SQLSHAPE_ICONST || sql[i] == SQLSHAPE_FCONST || sql[i] == SQLSHAPE_SCONST)
			return;   /* a marker byte in a comment would be rewritten too */
	char *shape = malloc(size + 1);
	if (shape == NULL)
		return;
	size_t n = sqlshape_make(sql, size, shape, size);
	CHECK(n <= size);
	if (n == 0) {
		free(shape);
		return;
	}
	char *other = malloc(n * 5 + 1);
	if (other == NULL) {
		free(shape);
		return;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		/* (an FCONST right after a name began with '.': "t1.5") */
		const char *rep = shape[i] == SQLSHAPE_ICONST ? "70" : shape[i] == SQLSHAPE_FCONST ? ".25" :
				  shape[i] == SQLSHAPE_SCONST ? "'v'" : NULL;
		if (rep) {
			memcpy(other + k, rep, strlen(rep));
			k += strlen(rep);
		} else {
			other[k++] = shape[i];
		}
	}
	char *again = malloc(k + 1);
	if (again != NULL) {
		size_t m = sqlshape_make(other, k, again, k);
		CHECK(m == n && memcmp(again, shape, n) == 0);
		free(again);
	}
	struct router_rules plain = {
		.writing_functions = writers, .n_writing_functions = sizeof writers / sizeof writers[0],
		.max_length = 65536,
	};
	struct router_verdict a, b;
	router_classify(sql, size, &plain, &a);
	router_classify(other, k, &plain, &b);
	CHECK(same_verdict(&a, &b));
	struct router_cache *cache = router_cache_new(2);
	if (cache != NULL) {
		(void)router_cache_classify(cache, sql, size, &plain);
		const struct router_verdict *c = router_cache_classify(cache, other, k, &plain);
		CHECK(c != NULL && same_verdict(c, &b));
		router_cache_free(cache);
	}
	free(other);
	free(shape);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *sql = malloc(size);
	if (sql == NULL)
		return 0;
	memcpy(sql, data, size);

	struct router_rules rules = {
		.sharded = sharded, .n_sharded = sizeof sharded / sizeof sharded[0],
		.writing_functions = writers, .n_writing_functions = sizeof writers / sizeof writers[0],
		.max_length = 65536,
	};
	struct router_verdict v;
	router_classify(sql, size, &rules, &v);
	check_verdict(&v);

	/* The cache: a miss, then a hit that must agree with the parse. */
	struct router_cache *cache = router_cache_new(2);
	if (cache != NULL) {
		const struct router_verdict *c1 = router_cache_classify(cache, sql, size, &rules);
		CHECK(c1 != NULL && same_verdict(c1, &v));
		const struct router_verdict *c2 = router_cache_classify(cache, sql, size, &rules);
		CHECK(c2 != NULL && same_verdict(c2, &v));
		/* Parsing off: only the hints are read. */
		struct router_rules off = rules;
		off.max_length = 0;
		const struct router_verdict *c3 = router_cache_classify(cache, sql, size, &off);
		const char *nul = memchr(sql, '\0', size);
		CHECK(c3 != NULL && (!c3->parsed || size == 0 || nul == sql));
		check_verdict(c3);
		router_cache_free(cache);
	}

	shape_check(sql, size);

	/* pgcat's own statements: the production value size, and tiny ones. */
	command(sql, size, 64);
	for (size_t valuelen = 0; valuelen <= 3; valuelen++)
		command(sql, size, valuelen);

	enum router_role role;
	(void)router_role_parse(sql, size, &role);
	free(sql);
	return 0;
}
