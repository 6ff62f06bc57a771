/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: sharding keys as clients give them (SET SHARDING KEY,
 * comment hints, literals in queries). Input: one byte for the shard count
 * (-2..253, so bad counts are tried too), one for the error buffer's size,
 * then the key's bytes, copied to a buffer of exactly their length.
 * Every sharding function must give a shard in range or an error that fits
 * its buffer; a key that reads as a bigint must land where its canonical
 * text lands; bigint and uuid texts must read back the same after
 * formatting; the raw hashes run over the bytes as given.
 */
#include "sharding.h"

#include <inttypes.h>
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

static const enum sharding_function functions[] = {
	SHARDING_PG_BIGINT_HASH, SHARDING_PG_TEXT_HASH, SHARDING_PG_UUID_HASH,
	SHARDING_SHA1, SHARDING_MURMUR3,
};

/* Shard of key under fn, or -1; err allocated to errlen bytes exactly. */
static int shard_of(enum sharding_function fn, const char *key, size_t len, int n_shards, size_t errlen)
{
	char *err = errlen ? malloc(errlen) : NULL;
	if (errlen && err == NULL)
		return -2;
	if (err != NULL)
		memset(err, 'x', errlen);
	int shard = -1;
	bool ok = sharding_shard_for_key(fn, key, len, n_shards, &shard, err, errlen);
	if (ok) {
		CHECK(n_shards >= 1 && shard >= 0 && shard < n_shards);
	} else {
		shard = -1;
		if (err != NULL)
			CHECK(memchr(err, '\0', errlen) != NULL);
	}
	free(err);
	return shard;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	int n_shards = (int)data[0] - 2;
	size_t errlen = data[1] % 4 == 0 ? (size_t)(data[1] / 4) : 256;
	data += 2;
	size -= 2;
	char *key = malloc(size);
	if (key == NULL)
		return 0;
	memcpy(key, data, size);

	int64_t v;
	bool is_int = sharding_parse_bigint(key, size, &v);
	char canon[32];
	int clen = 0;
	if (is_int) {
		clen = snprintf(canon, sizeof canon, "%" PRId64, v);
		int64_t again;
		CHECK(sharding_parse_bigint(canon, (size_t)clen, &again) && again == v);
	}

	uint8_t uuid[SHARDING_UUID_LEN];
	if (sharding_parse_uuid(key, size, uuid)) {
		char text[37];
		uint8_t again[SHARDING_UUID_LEN];
		snprintf(text, sizeof text,
			 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 uuid[0], uuid[1], uuid[2], uuid[3], uuid[4], uuid[5], uuid[6], uuid[7],
			 uuid[8], uuid[9], uuid[10], uuid[11], uuid[12], uuid[13], uuid[14], uuid[15]);
		CHECK(sharding_parse_uuid(text, 36, again) && memcmp(again, uuid, sizeof uuid) == 0);
		(void)sharding_pg_uuid_hash(uuid);
	}

	for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++) {
		enum sharding_function fn = functions[i];
		int s = shard_of(fn, key, size, n_shards, errlen);
		(void)shard_of(fn, key, size, n_shards, 0);
		if (fn == SHARDING_PG_BIGINT_HASH)
			CHECK((s >= 0) == (is_int && n_shards >= 1));
		if (fn == SHARDING_PG_TEXT_HASH || fn == SHARDING_SHA1 || fn == SHARDING_MURMUR3)
			CHECK((s >= 0) == (n_shards >= 1));
		/* ' +007' and '7' are the same key. */
		if (is_int && fn != SHARDING_PG_TEXT_HASH && fn != SHARDING_PG_UUID_HASH)
			CHECK(s == shard_of(fn, canon, (size_t)clen, n_shards, 64));
	}
	/* A function outside the enum is refused, never defaulted. */
	CHECK(shard_of((enum sharding_function)99, key, size, n_shards, 64) == -1);

	(void)sharding_pg_text_hash(key, size);
	(void)sharding_murmur3(key, size);
	(void)sharding_sha1(key, size);
	if (size >= 8) {
		int64_t raw;
		memcpy(&raw, key, sizeof raw);
		(void)sharding_pg_bigint_hash(raw);
	}
	free(key);
	return 0;
}
