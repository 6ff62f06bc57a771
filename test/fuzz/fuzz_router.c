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
 * The text is copied to a buffer of exactly its length, not terminated.
 */
#include "router.h"

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
	{ NULL, "users", "id" },
	{ "public", "orders", "user_id" },
	{ "app", "events", "tenant" },
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

	/* pgcat's own statements: the production value size, and tiny ones. */
	command(sql, size, 64);
	for (size_t valuelen = 0; valuelen <= 3; valuelen++)
		command(sql, size, valuelen);

	enum router_role role;
	(void)router_role_parse(sql, size, &role);
	free(sql);
	return 0;
}
