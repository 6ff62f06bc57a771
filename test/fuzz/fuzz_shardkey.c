/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: Bind messages as clients send them, read for their
 * sharding keys (src/shardkey.c). Input: one byte choosing the hash
 * function, one the shard count, one the parameter number, one the declared
 * type, then the Bind body, copied to a buffer of exactly its length.
 * A parameter read must lie inside the body; every shard must be in range;
 * a request of one statement and one Bind resolves to a valid outcome.
 */
#include "shardkey.h"

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

static const uint32_t oids[] = { 0, 20, 21, 23, 25, 1043, 2950, 700 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	enum sharding_function fn = (enum sharding_function)(data[0] % 5);
	int n_shards = data[1] % 9 + 1;
	int param = data[2] % 5;
	uint8_t types[4];
	uint32_t oid = oids[data[3] % (sizeof oids / sizeof oids[0])];
	for (int i = 0; i < 4; i++)
		types[i] = (uint8_t)(oid >> (24 - 8 * i));
	size_t len = size - 4;
	uint8_t *body = malloc(len ? len : 1);
	if (!body)
		return 0;
	memcpy(body, data + 4, len);

	const uint8_t *val;
	int32_t vlen;
	int16_t format;
	if (shardkey_bind_param(body, len, param, &val, &vlen, &format)) {
		CHECK(format == 0 || format == 1);
		CHECK(vlen >= -1);
		if (vlen >= 0)
			CHECK(val >= body && val + vlen <= body + len);
		int shard = -1;
		if (shardkey_value_shard(fn, n_shards, val, vlen, format, oid, &shard))
			CHECK(shard >= 0 && shard < n_shards);
	}
	const uint8_t *t;
	uint16_t n;
	if (shardkey_param_types(body, len, &t, &n) && n)
		CHECK(t == body + 2 && 2 + (size_t)n * 4 <= len);

	struct router_verdict v;
	memset(&v, 0, sizeof v);
	v.parsed = v.reads_sharded = v.keys_complete = true;
	v.n_keys = 2;
	v.keys[0].param = param;
	snprintf(v.keys[1].text, sizeof v.keys[1].text, "%d", data[2]);
	struct shardkey_bind b = { body, len, types, 1 };
	struct shardkey_result r;
	shardkey_resolve(&v, fn, n_shards, &b, 1, &r);
	CHECK(r.outcome == SHARDKEY_DEFAULT || r.outcome == SHARDKEY_CROSS ||
	      (r.outcome == SHARDKEY_ONE && r.shard >= 0 && r.shard < n_shards));
	free(body);
	return 0;
}
