/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: pgcat.ini parsing and checking (config_load_string(),
 * and config_load() for a file with a NUL byte in it), then everything
 * that reads a loaded snapshot: config_general_value() for each [general]
 * key into roomy and tiny buffers, the pool and user lookups, and the
 * admin console's config_general_set() with the input's last line taken
 * as "key = value" (against the loaded config, or a minimal one).
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, \
				__FILE__, __LINE__);                             \
			abort();                                                 \
		}                                                                \
	} while (0)

static const char minimal[] =
	"[general]\n"
	"admin_password = x\n"
	"[pools.db]\n"
	"[pools.db.shards.0]\n"
	"servers = 127.0.0.1:5432:primary\n";

static char tmp_path[64];
static int tmp_fd = -1;

static struct config *load_file(const uint8_t *data, size_t size, struct config_problems *pr)
{
	if (tmp_fd < 0) {
		snprintf(tmp_path, sizeof tmp_path, "/tmp/pgcat-fuzz-config-XXXXXX");
		tmp_fd = mkstemp(tmp_path);
		CHECK(tmp_fd >= 0);
		/* Removed at once; the descriptor's /proc path keeps it reachable. */
		unlink(tmp_path);
		snprintf(tmp_path, sizeof tmp_path, "/proc/self/fd/%d", tmp_fd);
	}
	CHECK(ftruncate(tmp_fd, 0) == 0);
	CHECK(pwrite(tmp_fd, data, size, 0) == (ssize_t)size);
	return config_load(tmp_path, pr);
}

static void check_problems(const struct config_problems *pr, bool loaded)
{
	bool error = false;
	for (size_t i = 0; i < pr->n; i++) {
		const struct config_problem *p = &pr->items[i];
		CHECK(p->message != NULL && p->line >= 0);
		CHECK(p->kind == CONFIG_PROBLEM_ERROR || p->kind == CONFIG_PROBLEM_UNKNOWN ||
		      p->kind == CONFIG_PROBLEM_WARNING);
		/* One line per problem. */
		CHECK(strchr(p->message, '\n') == NULL);
		error |= p->kind == CONFIG_PROBLEM_ERROR;
	}
	CHECK(loaded == !error);
}

static void read_back(const struct config *cfg)
{
	size_t n = 0;
	const struct config_key_info *keys = config_general_keys(&n);
	for (size_t i = 0; i < n; i++) {
		char buf[4096];
		bool whole = config_general_value(cfg, keys[i].name, buf, sizeof buf);
		CHECK(strlen(buf) < sizeof buf);
		/* Tiny buffers, allocated to size: truncation must stay inside. */
		for (size_t len = 1; len <= 4; len += 3) {
			char *small = malloc(len);
			if (small == NULL)
				break;
			bool fit = config_general_value(cfg, keys[i].name, small, len);
			CHECK(strlen(small) < len);
			CHECK(!fit || !whole || strlen(buf) < len);
			free(small);
		}
	}
	for (size_t i = 0; i < cfg->n_pools; i++) {
		const struct config_pool *pool = &cfg->pools[i];
		CHECK(config_find_pool(cfg, pool->name) != NULL);
		CHECK(pool->n_shards >= 1);
		for (size_t s = 0; s < pool->n_shards; s++)
			CHECK(pool->shards[s].index == (int)s && pool->shards[s].n_servers >= 1);
		for (size_t u = 0; u < pool->n_users; u++) {
			const struct config_user *user = &pool->users[u];
			CHECK(config_find_user(pool, user->name) != NULL);
			CHECK(config_user_pool_size(cfg, pool, user) >= 1);
			CHECK(config_user_min_pool_size(cfg, pool, user) >= 0);
			(void)config_pool_mode_name(config_user_pool_mode(cfg, pool, user));
		}
	}
}

/* The text's last line as an admin SET: key = value. */
static void try_set(struct config *cfg, const char *text)
{
	const char *line = strrchr(text, '\n');
	line = line ? line + 1 : text;
	const char *eq = strchr(line, '=');
	if (eq == NULL)
		return;
	size_t klen = (size_t)(eq - line);
	while (klen > 0 && line[klen - 1] == ' ')
		klen--;
	char *key = malloc(klen + 1);
	if (key == NULL)
		return;
	memcpy(key, line, klen);
	key[klen] = '\0';
	char err[256];
	if (config_general_set(cfg, key, eq + 1, err, sizeof err)) {
		char buf[4096];
		(void)config_general_value(cfg, key, buf, sizeof buf);
	} else {
		CHECK(strlen(err) < sizeof err);
	}
	/* No room for a reason at all. */
	char tiny[1];
	(void)config_general_set(cfg, key, eq + 1, tiny, sizeof tiny);
	CHECK(tiny[0] == '\0');
	free(key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config_problems pr;
	struct config *cfg;
	char *text = NULL;

	if (memchr(data, '\0', size) != NULL) {
		cfg = load_file(data, size, &pr);
		CHECK(cfg == NULL);
		check_problems(&pr, false);
		config_problems_free(&pr);
		return 0;
	}
	text = malloc(size + 1);
	if (text == NULL)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	cfg = config_load_string(text, "fuzz.ini", &pr);
	check_problems(&pr, cfg != NULL);
	config_problems_free(&pr);
	if (cfg == NULL) {
		cfg = config_load_string(minimal, "minimal.ini", NULL);
		CHECK(cfg != NULL);
	}
	try_set(cfg, text);
	read_back(cfg);
	config_free(cfg);
	free(text);
	return 0;
}
