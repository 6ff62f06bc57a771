/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the session parameters pgcat learns from clients.
 * Input: NUL-separated parts. The first is a startup "options" string for
 * params_apply_options() (into the session's startup defaults); each
 * following part is a Query text for params_track_sql(), applied as
 * client.c does: to the client's set, with the defaults for RESET, and to
 * its server's set without. After each statement the sets must be
 * consistent (count, sizes within the bounds, digest, no duplicate names),
 * an earlier copy must not have changed (copy-on-write), and
 * params_build_sync() must give a string exactly when there is something
 * to do.
 */
#include "params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, \
				__FILE__, __LINE__);                             \
			abort();                                                 \
		}                                                                \
	} while (0)

#define MAX_STATEMENTS 16

static void check_set(const struct params *p)
{
	size_t n = params_count(p);
	uint64_t digest = 0;
	size_t bytes = 0;
	CHECK(n <= PARAMS_MAX);
	for (size_t i = 0; i < n; i++) {
		const struct param *e = params_at(p, i);
		CHECK(e->refs >= 1);
		CHECK(strlen(e->name) <= PARAMS_NAME_MAX);
		CHECK(e->size == strlen(e->name) + strlen(e->value));
		bytes += e->size;
		CHECK(params_get(p, e->name) == e);
		for (size_t j = i + 1; j < n; j++)
			CHECK(strcasecmp(e->name, params_at(p, j)->name) != 0);
		digest ^= e->hash;
	}
	CHECK(bytes <= PARAMS_BYTES_MAX && (!p->t || p->t->bytes == bytes));
	CHECK(digest == p->digest);
}

static void check_sync(const struct params *client, const struct params *server)
{
	char *sql;
	int n = params_build_sync(client, server, &sql);
	CHECK(n >= 0);
	CHECK((n > 0) == (sql != NULL));
	if (params_same(client, server))
		CHECK(n == 0);
	free(sql);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *end = data + size;
	const uint8_t *sep = memchr(data, '\0', size);
	size_t olen = sep ? (size_t)(sep - data) : size;

	struct params defaults, client, server, before;
	params_init(&defaults);
	params_init(&client);
	params_init(&server);
	params_init(&before);

	char *options = malloc(olen + 1);
	if (options == NULL)
		return 0;
	memcpy(options, data, olen);
	options[olen] = '\0';
	struct params_refusal why;
	(void)params_apply_options(&defaults, options, &why);
	free(options);
	check_set(&defaults);

	/* A new client starts from its startup settings; so does its server here. */
	params_copy(&client, &defaults);
	params_copy(&server, &defaults);

	const uint8_t *p = sep ? sep + 1 : end;
	for (int k = 0; k < MAX_STATEMENTS && p < end; k++) {
		const uint8_t *next = memchr(p, '\0', (size_t)(end - p));
		size_t len = next ? (size_t)(next - p) : (size_t)(end - p);
		char *sql = malloc(len);
		if (sql == NULL)
			break;
		memcpy(sql, p, len);

		params_copy(&before, &client);
		uint64_t before_digest = before.digest;
		unsigned r = params_track_sql(&client, sql, len, &defaults);
		if (r & PARAMS_CHANGED)
			(void)params_track_sql(&server, sql, len, NULL);
		free(sql);

		check_set(&client);
		check_set(&server);
		check_set(&defaults);
		check_set(&before);
		CHECK(before.digest == before_digest);
		if (!(r & PARAMS_CHANGED))
			CHECK(client.digest == before_digest);
		check_sync(&client, &server);
		check_sync(&server, &client);
		p = next ? next + 1 : end;
	}

	params_clear(&before);
	params_clear(&server);
	params_clear(&client);
	params_clear(&defaults);
	return 0;
}
