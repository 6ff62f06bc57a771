/* SPDX-License-Identifier: MIT */
/*
 * shardkey: the shard of one request (SPEC §6), from the router's verdict on
 * a statement and, for `$n` keys, the values its Bind messages carry (text
 * or binary format). Pure: bytes in, a shard number (or "default", or
 * "several") out; no sockets, no state. route.c finds the messages and acts
 * on the answer.
 */
#ifndef PGCAT_SHARDKEY_H
#define PGCAT_SHARDKEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "router.h"

enum shardkey_outcome {
	SHARDKEY_DEFAULT,   /* touches no sharded table (or not parsed, or nothing executes): default_shard */
	SHARDKEY_ONE,       /* every key hashes to one shard */
	SHARDKEY_CROSS      /* a sharded table without a usable key, or keys on several shards */
};

/* One statement of a request and what it found. */
struct shardkey_result {
	enum shardkey_outcome outcome;
	int shard;          /* SHARDKEY_ONE */
	bool writes;        /* the verdict says it may write */
	/* An INSERT without a column list into sharded table unplaced_table
	 * (router_verdict.insert_unplaced) was among the statements: its keys
	 * are not known. Zero-initialised: none. */
	bool unplaced;
	uint8_t unplaced_table;
};

/* One Bind of a request, with the parameter types its statement declared
 * (Parse: int16 count then that many int32 OIDs, big-endian; 0 = left to the
 * server). */
struct shardkey_bind {
	const uint8_t *body;        /* Bind body, after the 5-byte header */
	size_t len;
	const uint8_t *types;       /* n_types x int32, or NULL */
	uint16_t n_types;
};

/* Bind body: parameter number param (1-based). *vlen is -1 for NULL;
 * *format is 0 (text) or 1 (binary). false: malformed, or no such parameter. */
bool shardkey_bind_param(const uint8_t *body, size_t len, int param, const uint8_t **val, int32_t *vlen,
			 int16_t *format) __attribute__((warn_unused_result));

/* The parameter types after a statement's text (the part of a Parse body
 * after the query's NUL). false when malformed. */
bool shardkey_param_types(const uint8_t *p, size_t len, const uint8_t **types, uint16_t *n_types)
	__attribute__((warn_unused_result));

/* The shard of one bound value. Binary values are read by their declared
 * type (int8, int4, int2, uuid, text, varchar) or, when the type was left to
 * the server (OID 0), by their length and the hash function (8/4/2 bytes:
 * an integer for pg_bigint_hash, sha1 and murmur3; 16 bytes: a uuid for
 * pg_uuid_hash; anything: the text for pg_text_hash). NULL or unreadable:
 * false (no usable key). */
bool shardkey_value_shard(enum sharding_function fn, int n_shards, const uint8_t *val, int32_t vlen, int16_t format,
			  uint32_t type_oid, int *shard) __attribute__((warn_unused_result));

/* One statement: its verdict and the Binds that execute it in this request
 * (n_binds 0: it is only prepared, or it is a simple Query). */
void shardkey_resolve(const struct router_verdict *v, enum sharding_function fn, int n_shards,
		      const struct shardkey_bind *binds, size_t n_binds, struct shardkey_result *out);

/* Folds b into a (several statements of one request): CROSS wins, two
 * different shards make CROSS, a shard beats DEFAULT (tables that are not
 * sharded exist on every shard); writes if either writes. */
void shardkey_merge(struct shardkey_result *a, const struct shardkey_result *b);

#endif
