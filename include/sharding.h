/* SPDX-License-Identifier: MIT */
/*
 * sharding: sharding key text -> shard number (SPEC §6), as pure functions.
 * The PostgreSQL hashes reproduce PARTITION BY HASH bit for bit, so shard N
 * holds exactly what a hash partition with MODULUS n REMAINDER N would hold.
 * No sockets, no config parsing, no state: the router and the SET SHARDING
 * KEY handler pass the key and the pool's function and shard count in.
 */
#ifndef PGCAT_SHARDING_H
#define PGCAT_SHARDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Bytes in a uuid. */
#define SHARDING_UUID_LEN 16

/*
 * Read key text the way PostgreSQL's input function for the function's type
 * would (bigint: surrounding spaces, sign, leading zeros, range of int64;
 * uuid: its text forms; text: any bytes), then compute the shard in
 * [0, n_shards). sha1 and murmur3 hash the decimal text of a key that reads
 * as a bigint (so ' +007' and '7' go to the same shard, as in PgCat) and the
 * bytes as given otherwise. false + err (one line) when the key does not fit
 * or n_shards < 1; the caller answers 22023.
 */
bool sharding_shard_for_key(enum sharding_function fn, const char *key, size_t len, int n_shards,
			    int *shard, char *err, size_t errlen) __attribute__((warn_unused_result));

/* The 64-bit values the shard is taken from (shard = value % n_shards),
 * exposed for tests: */
/* Row hash of PARTITION BY HASH (bigint): hash_combine64(0, hashint8extended(v, seed)). */
uint64_t sharding_pg_bigint_hash(int64_t v);
/* The same for a text column with a deterministic collation. */
uint64_t sharding_pg_text_hash(const char *s, size_t len);
/* The same for a uuid column. */
uint64_t sharding_pg_uuid_hash(const uint8_t uuid[SHARDING_UUID_LEN]);
/* MurmurHash3_x64_128 with seed 0; the first half (h1). */
uint64_t sharding_murmur3(const void *data, size_t len);
/* Last 4 bytes of SHA-1, big-endian (PgCat/PgDog's sha1). */
uint32_t sharding_sha1(const char *s, size_t len);

/* PostgreSQL 15's int8in: optional surrounding whitespace, one sign, decimal
 * digits, within int64. No NUL bytes. */
bool sharding_parse_bigint(const char *s, size_t len, int64_t *out)
	__attribute__((warn_unused_result));
/* PostgreSQL's uuid_in: 32 hex digits in either case, optionally in braces,
 * with an optional hyphen after any group of four digits but the last. */
bool sharding_parse_uuid(const char *s, size_t len, uint8_t out[SHARDING_UUID_LEN])
	__attribute__((warn_unused_result));

#endif
