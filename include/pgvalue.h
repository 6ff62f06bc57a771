/* SPDX-License-Identifier: MIT */
/*
 * pgvalue: PostgreSQL values as they travel in DataRow messages, in text or
 * binary format, for merging the results of a cross-shard read (SPEC §6):
 * ORDER BY needs an ordering, min/max a comparison, count/sum an addition,
 * avg a division. Pure functions: no sockets, no allocation, no globals.
 *
 * Results must equal what one PostgreSQL server would have answered, byte
 * for byte, so every routine works on the wire representation and writes
 * output the way PostgreSQL's output functions do. Anything it cannot do
 * exactly (a type it does not know, a malformed value, an overflow) makes
 * it return false: the caller refuses the query instead of guessing.
 *
 * NULLs never reach these functions (the caller handles them: NULL sorts
 * as PostgreSQL sorts it, sum/min/max skip it).
 */
#ifndef PGCAT_PGVALUE_H
#define PGCAT_PGVALUE_H

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Type OIDs pgcat knows (pg_type.oid, stable across versions). */
enum {
	PGVALUE_BOOL = 16,
	PGVALUE_NAME = 19,
	PGVALUE_INT8 = 20,
	PGVALUE_INT2 = 21,
	PGVALUE_INT4 = 23,
	PGVALUE_TEXT = 25,
	PGVALUE_OID = 26,
	PGVALUE_FLOAT4 = 700,
	PGVALUE_FLOAT8 = 701,
	PGVALUE_BPCHAR = 1042,
	PGVALUE_VARCHAR = 1043,
	PGVALUE_DATE = 1082,
	PGVALUE_TIMESTAMP = 1114,
	PGVALUE_TIMESTAMPTZ = 1184,
	PGVALUE_NUMERIC = 1700,
	PGVALUE_UUID = 2950
};

/* Wire formats, as in RowDescription and Bind. */
enum { PGVALUE_FORMAT_TEXT = 0, PGVALUE_FORMAT_BINARY = 1 };

/* Can values of this type in this format be ordered (ORDER BY, min, max)? */
bool pgvalue_can_compare(uint32_t oid, int16_t format);

/*
 * Orders a against b as PostgreSQL's default btree operator class does:
 * *cmp < 0, 0 or > 0. Integers, oid, float4/float8 (NaN above every other
 * value, -Infinity/Infinity), numeric (NaN, ±Infinity), bool, uuid, date,
 * timestamp, timestamptz (±infinity; text format as written with DateStyle
 * ISO, any time zone offset), and the string types (text, varchar, bpchar,
 * name). Strings compare with coll (strcoll_l on NUL-terminated copies)
 * and, when coll reports equal, bytewise, as PostgreSQL does; coll == 0
 * compares bytewise only (the C collation). false: unsupported type or
 * format, or a value it cannot read.
 */
bool pgvalue_compare(uint32_t oid, int16_t format, const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
		     locale_t coll, int *cmp);

/* Can sums of this type in this format be added (the result types of
 * count and sum: int8, numeric, float4, float8; also int2 and int4)? */
bool pgvalue_can_add(uint32_t oid, int16_t format);

/*
 * out = a + b, in the same type and format, written as PostgreSQL writes
 * it (numeric keeps the larger display scale; float4/float8 in the
 * shortest form that reads back exactly, as with extra_float_digits = 1).
 * *outlen gets the length. false: unsupported, unreadable, overflow (int),
 * or cap too small. PGVALUE_NUMERIC_MAX bytes is always enough for numeric
 * in text; 32 for every other type.
 */
#define PGVALUE_NUMERIC_MAX 4096
bool pgvalue_add(uint32_t oid, int16_t format, const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
		 uint8_t *out, size_t cap, size_t *outlen);

/*
 * avg = sum / count, as PostgreSQL's avg() would have returned it from the
 * same rows: avg_oid is the avg column's type (numeric for integer and
 * numeric arguments: numeric division with PostgreSQL's result scale and
 * rounding; float8 for float4/float8 arguments), written in avg_format.
 * sum is the merged sum() of the same argument (type sum_oid, format
 * sum_format), count its merged count(), > 0. false: unsupported type,
 * unreadable value, or cap too small.
 */
bool pgvalue_avg(uint32_t avg_oid, int16_t avg_format, uint32_t sum_oid, int16_t sum_format, const uint8_t *sum,
		 size_t sumlen, int64_t count, uint8_t *out, size_t cap, size_t *outlen);

#endif
