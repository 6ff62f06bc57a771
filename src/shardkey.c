/* SPDX-License-Identifier: MIT */
/*
 * shardkey: verdict + bound values -> the shard of a request (SPEC §6).
 * Pure functions over buffers; route.c owns finding the messages.
 */
#include "shardkey.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sharding.h"

/* PostgreSQL type OIDs a sharding key can be bound as. */
#define OID_INT8 20
#define OID_INT2 21
#define OID_INT4 23
#define OID_TEXT 25
#define OID_VARCHAR 1043
#define OID_UUID 2950

static uint16_t get_u16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get_u32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

bool shardkey_bind_param(const uint8_t *body, size_t len, int param, const uint8_t **val, int32_t *vlen,
			 int16_t *format)
{
	size_t off = 0;
	/* portal and statement names */
	for (int i = 0; i < 2; i++) {
		const uint8_t *nul = off < len ? memchr(body + off, '\0', len - off) : NULL;
		if (!nul)
			return false;
		off = (size_t)(nul - body) + 1;
	}
	if (len - off < 2)
		return false;
	uint16_t n_formats = get_u16(body + off);
	off += 2;
	if ((len - off) / 2 < n_formats)
		return false;
	const uint8_t *formats = body + off;
	off += (size_t)n_formats * 2;
	if (len - off < 2)
		return false;
	uint16_t n_params = get_u16(body + off);
	off += 2;
	if (param < 1 || param > n_params)
		return false;
	/* One format for all, one per parameter, or none (all text). */
	if (n_formats > 1 && n_formats != n_params)
		return false;
	for (int i = 1; i <= param; i++) {
		if (len - off < 4)
			return false;
		int32_t l = (int32_t)get_u32(body + off);
		off += 4;
		if (l < -1 || (l > 0 && (size_t)l > len - off))
			return false;
		if (i == param) {
			*val = body + off;
			*vlen = l;
			*format = n_formats == 0 ? 0 : (int16_t)get_u16(formats + 2 * (n_formats == 1 ? 0 : (size_t)(param - 1)));
			return *format == 0 || *format == 1;
		}
		if (l > 0)
			off += (size_t)l;
	}
	return false;
}

bool shardkey_param_types(const uint8_t *p, size_t len, const uint8_t **types, uint16_t *n_types)
{
	if (len < 2)
		return false;
	uint16_t n = get_u16(p);
	if ((len - 2) / 4 < n)
		return false;
	*types = n ? p + 2 : NULL;
	*n_types = n;
	return true;
}

static int64_t get_signed(const uint8_t *p, int32_t n)
{
	uint64_t u = 0;
	for (int32_t i = 0; i < n; i++)
		u = (u << 8) | p[i];
	/* sign-extend from n bytes */
	int shift = 64 - 8 * n;
	return shift ? (int64_t)(u << shift) >> shift : (int64_t)u;
}

bool shardkey_value_shard(enum sharding_function fn, int n_shards, const uint8_t *val, int32_t vlen, int16_t format,
			  uint32_t type_oid, int *shard)
{
	if (vlen < 0 || !val)
		return false;
	if (format == 0)
		return sharding_shard_for_key(fn, (const char *)val, (size_t)vlen, n_shards, shard, NULL, 0);
	if (format != 1)
		return false;
	enum { AS_NONE, AS_INT, AS_UUID, AS_TEXT } as = AS_NONE;
	switch (type_oid) {
	case OID_INT8:
	case OID_INT4:
	case OID_INT2:
		if (vlen == 8 || vlen == 4 || vlen == 2)
			as = AS_INT;
		break;
	case OID_UUID:
		if (vlen == 16)
			as = AS_UUID;
		break;
	case OID_TEXT:
	case OID_VARCHAR:
		as = AS_TEXT;
		break;
	case 0:
		/* Left to the server: drivers that learned the type with Describe
		 * (asyncpg) send it in the column's binary form. */
		switch (fn) {
		case SHARDING_PG_BIGINT_HASH:
		case SHARDING_SHA1:
		case SHARDING_MURMUR3:
			if (vlen == 8 || vlen == 4 || vlen == 2)
				as = AS_INT;
			break;
		case SHARDING_PG_UUID_HASH:
			if (vlen == 16)
				as = AS_UUID;
			break;
		case SHARDING_PG_TEXT_HASH:
			as = AS_TEXT;
			break;
		}
		break;
	default:
		break;
	}
	char text[40];
	int n;
	switch (as) {
	case AS_INT:
		/* int2 and int4 hash as the bigint of the same value in
		 * PostgreSQL, and sha1/murmur3 hash the decimal text: both are
		 * what the decimal text of the value gives. */
		n = snprintf(text, sizeof text, "%" PRId64, get_signed(val, vlen));
		return sharding_shard_for_key(fn, text, (size_t)n, n_shards, shard, NULL, 0);
	case AS_UUID:
		n = snprintf(text, sizeof text,
			     "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", val[0], val[1],
			     val[2], val[3], val[4], val[5], val[6], val[7], val[8], val[9], val[10], val[11], val[12],
			     val[13], val[14], val[15]);
		return sharding_shard_for_key(fn, text, (size_t)n, n_shards, shard, NULL, 0);
	case AS_TEXT:
		return sharding_shard_for_key(fn, (const char *)val, (size_t)vlen, n_shards, shard, NULL, 0);
	case AS_NONE:
		break;
	}
	return false;
}

static uint32_t param_type(const struct shardkey_bind *b, int param)
{
	if (!b->types || param < 1 || param > b->n_types)
		return 0;
	return get_u32(b->types + 4 * (size_t)(param - 1));
}

/* Adds shard s to the running answer; false once two differ. */
static bool add_shard(int *found, int s)
{
	if (*found < 0)
		*found = s;
	return *found == s;
}

void shardkey_resolve(const struct router_verdict *v, enum sharding_function fn, int n_shards,
		      const struct shardkey_bind *binds, size_t n_binds, struct shardkey_result *out)
{
	out->outcome = SHARDKEY_DEFAULT;
	out->shard = -1;
	out->writes = v->writes;
	if (!v->parsed || !v->reads_sharded)
		return;
	out->outcome = SHARDKEY_CROSS;
	if (!v->keys_complete || v->n_keys == 0)
		return;
	int found = -1;
	bool has_param = false;
	for (size_t i = 0; i < v->n_keys; i++) {
		const struct router_key *k = &v->keys[i];
		if (k->param > 0) {
			has_param = true;
			continue;
		}
		int s;
		if (!sharding_shard_for_key(fn, k->text, strnlen(k->text, sizeof k->text), n_shards, &s, NULL, 0) ||
		    !add_shard(&found, s))
			return;
	}
	if (has_param) {
		if (n_binds == 0) {
			/* Only prepared (Parse without Bind): nothing runs, any
			 * shard will do; its executions are routed by their Binds. */
			out->outcome = SHARDKEY_DEFAULT;
			return;
		}
		for (size_t b = 0; b < n_binds; b++) {
			for (size_t i = 0; i < v->n_keys; i++) {
				const struct router_key *k = &v->keys[i];
				if (k->param <= 0)
					continue;
				const uint8_t *val;
				int32_t vlen;
				int16_t format;
				int s;
				if (!shardkey_bind_param(binds[b].body, binds[b].len, k->param, &val, &vlen, &format) ||
				    !shardkey_value_shard(fn, n_shards, val, vlen, format, param_type(&binds[b], k->param),
							  &s) ||
				    !add_shard(&found, s))
					return;
			}
		}
	}
	if (found < 0)
		return;
	out->outcome = SHARDKEY_ONE;
	out->shard = found;
}

void shardkey_merge(struct shardkey_result *a, const struct shardkey_result *b)
{
	a->writes = a->writes || b->writes;
	if (a->outcome == SHARDKEY_CROSS || b->outcome == SHARDKEY_DEFAULT)
		return;
	if (b->outcome == SHARDKEY_CROSS || a->outcome == SHARDKEY_DEFAULT) {
		a->outcome = b->outcome;
		a->shard = b->shard;
		return;
	}
	if (a->shard != b->shard) {
		a->outcome = SHARDKEY_CROSS;
		a->shard = -1;
	}
}
