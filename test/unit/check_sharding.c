/* SPDX-License-Identifier: MIT */
/* Unit tests for sharding: PostgreSQL hash partitioning, sha1, murmur3, key input. */
#include "check_suites.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sharding.h"

/*
 * Expected remainders from PostgreSQL 15 itself (little-endian x86-64,
 * locale C.UTF-8): rows inserted into tables PARTITION BY HASH (k) with
 * partitions FOR VALUES WITH (MODULUS m, REMAINDER r) for m = 2, 3, 4, 7,
 * reading back tableoid; for m = 1009 and 1024 the remainder r for which
 * satisfies_hash_partition(parent, m, r, k) is true.
 */
static const int moduli[] = { 2, 3, 4, 7, 1009, 1024 };
#define N_MODULI (sizeof(moduli) / sizeof(moduli[0]))

static const struct {
	int64_t key;
	int rem[N_MODULI];
} bigint_cases[] = {
	{ INT64_C(0), { 0, 2, 0, 4, 906, 432 } },
	{ INT64_C(1), { 0, 2, 0, 5, 37, 952 } },
	{ INT64_C(-1), { 1, 2, 1, 0, 969, 933 } },
	{ INT64_C(2), { 0, 0, 2, 6, 616, 378 } },
	{ INT64_C(7), { 1, 1, 3, 6, 984, 279 } },
	{ INT64_C(42), { 0, 0, 2, 0, 396, 610 } },
	{ INT64_C(100), { 1, 2, 1, 4, 236, 601 } },
	{ INT64_C(1234), { 0, 0, 2, 6, 945, 922 } },
	{ INT64_C(-1234), { 0, 0, 0, 0, 706, 408 } },
	{ INT64_C(65535), { 0, 0, 2, 2, 957, 910 } },
	{ INT64_C(2147483647), { 1, 1, 3, 0, 832, 383 } },
	{ INT64_C(2147483648), { 0, 0, 2, 3, 26, 630 } },
	{ INT64_C(-2147483648), { 0, 0, 2, 3, 26, 630 } },
	{ INT64_C(-2147483649), { 1, 1, 3, 0, 832, 383 } },
	{ INT64_C(4294967295), { 1, 2, 1, 0, 969, 933 } },
	{ INT64_C(4294967296), { 0, 2, 0, 5, 37, 952 } },
	{ INT64_C(1000000007), { 0, 2, 2, 4, 379, 106 } },
	{ INT64_C(1000000000000), { 1, 1, 1, 1, 237, 917 } },
	{ INT64_C(123456789012345), { 0, 0, 2, 0, 49, 302 } },
	{ INT64_C(-987654321098765), { 0, 1, 2, 6, 184, 82 } },
	{ INT64_C(9223372036854775806), { 0, 0, 2, 5, 780, 350 } },
	{ INT64_MAX, { 0, 0, 2, 3, 26, 630 } },
	{ INT64_C(-9223372036854775807), { 0, 0, 2, 5, 840, 866 } },
	{ INT64_MIN, { 1, 1, 3, 0, 832, 383 } },
};

/* Same method, text column (deterministic collation C.UTF-8); covers every
 * tail length 0..11 and the 12-byte block boundaries. */
static const struct {
	const char *key;
	int rem[N_MODULI];
} text_cases[] = {
	{ "", { 0, 2, 2, 1, 743, 166 } },
	{ "a", { 0, 2, 2, 3, 107, 862 } },
	{ "ab", { 0, 0, 0, 6, 574, 32 } },
	{ "abc", { 1, 1, 1, 3, 186, 677 } },
	{ "abcd", { 1, 2, 1, 5, 926, 337 } },
	{ "hello", { 0, 1, 0, 3, 183, 916 } },
	{ "42", { 1, 2, 3, 2, 809, 619 } },
	{ " 42 ", { 1, 1, 3, 4, 994, 63 } },
	{ "hello world", { 0, 1, 0, 4, 132, 392 } },
	{ "abcdefghijk", { 1, 0, 3, 3, 205, 859 } },
	{ "abcdefghijkl", { 1, 1, 1, 3, 459, 105 } },
	{ "abcdefghijklm", { 0, 1, 2, 0, 435, 918 } },
	{ "abcdefghijklmnopqrstuvwx", { 1, 1, 1, 4, 491, 81 } },
	{ "abcdefghijklmnopqrstuvwxy", { 0, 1, 2, 3, 189, 162 } },
	{ "h\xc3\xa9llo", { 1, 0, 3, 4, 107, 931 } },
	{ "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", { 0, 0, 2, 6, 584, 190 } },
	{ "The quick brown fox jumps over the lazy dog", { 1, 1, 1, 1, 180, 457 } },
	{ "0123456789012345678901234567890123456789012345678901234567890123456789"
	  "012345678901234567890123456789", { 1, 0, 3, 1, 1002, 227 } },
	{ "user@example.com", { 1, 0, 3, 1, 80, 143 } },
};

/* Same method, uuid column. */
static const struct {
	const char *key;
	int rem[N_MODULI];
} uuid_cases[] = {
	{ "00000000-0000-0000-0000-000000000000", { 1, 0, 1, 2, 150, 933 } },
	{ "ffffffff-ffff-ffff-ffff-ffffffffffff", { 1, 1, 1, 0, 783, 385 } },
	{ "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", { 0, 1, 0, 6, 548, 464 } },
	{ "123e4567-e89b-12d3-a456-426614174000", { 1, 1, 1, 5, 99, 901 } },
	{ "550e8400-e29b-41d4-a716-446655440000", { 1, 2, 1, 4, 78, 457 } },
	{ "6ba7b810-9dad-11d1-80b4-00c04fd430c8", { 0, 1, 2, 4, 189, 998 } },
	{ "01890a5d-ac96-774b-bcce-b302099a8057", { 0, 2, 0, 1, 857, 80 } },
	{ "00000000-0000-0000-0000-000000000001", { 1, 2, 1, 1, 872, 557 } },
};

/* Computed independently: Python mmh3.hash64(key, seed=0, signed=False)[0]
 * and int.from_bytes(hashlib.sha1(key).digest()[-4:], "big"). Lengths cover
 * the 16-byte block edges (15, 16, 17, 31, 32, 33). */
static const struct {
	const char *key;
	uint64_t murmur3;
	uint32_t sha1;
} text_vectors[] = {
	{ "", UINT64_C(0x0000000000000000), UINT32_C(0xafd80709) },
	{ "a", UINT64_C(0x85555565f6597889), UINT32_C(0x377667b8) },
	{ "0", UINT64_C(0x2ac9debed546a380), UINT32_C(0x94e8410c) },
	{ "1", UINT64_C(0x71fbbbfe8a7b7c71), UINT32_C(0x395428ab) },
	{ "-1", UINT64_C(0xedb551f5e4c5362a), UINT32_C(0x34d23819) },
	{ "42", UINT64_C(0xb68fda223f324f6c), UINT32_C(0x0797ae56) },
	{ "1234", UINT64_C(0x0897364d218fe7b4), UINT32_C(0x0d2c0220) },
	{ "9223372036854775807", UINT64_C(0x636591a2ccd7073b), UINT32_C(0x3d4c47f1) },
	{ "-9223372036854775808", UINT64_C(0x4df5c9b71982a38d), UINT32_C(0x3974ca5f) },
	{ "hello", UINT64_C(0xcbd8a7b341bd9b02), UINT32_C(0xaea9434d) },
	{ "abcdefghijklmno", UINT64_C(0x8abe2451890c2ffb), UINT32_C(0x06d06782) },
	{ "abcdefghijklmnop", UINT64_C(0xc4ca3ca3224cb723), UINT32_C(0x9aa682b9) },
	{ "abcdefghijklmnopq", UINT64_C(0x7564747f88bda657), UINT32_C(0x0a090a54) },
	{ "0123456789abcdefghijklmnopqrstu", UINT64_C(0xb828780c1a6e0542), UINT32_C(0x778c371c) },
	{ "0123456789abcdefghijklmnopqrstuv", UINT64_C(0x2f285ccec0edf1f7), UINT32_C(0x7444e835) },
	{ "0123456789abcdefghijklmnopqrstuvw", UINT64_C(0xe82017bf95741128), UINT32_C(0x86e37e27) },
	{ "h\xc3\xa9llo", UINT64_C(0x4e317b1172855c8a), UINT32_C(0xea920890) },
	{ "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", UINT64_C(0x12bb87b9a8fbeff4), UINT32_C(0x2eafa9ca) },
	{ "The quick brown fox jumps over the lazy dog", UINT64_C(0xe34bbc7bbc071b6c),
	  UINT32_C(0x1b93eb12) },
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* shard_for_key must agree with hash % n and leave err untouched. */
static void check_shard(enum sharding_function fn, const char *key, size_t len, int n, int want)
{
	char err[128] = "untouched";
	int shard = -1;

	ck_assert_msg(sharding_shard_for_key(fn, key, len, n, &shard, err, sizeof(err)),
		      "key '%s' mod %d refused: %s", key, n, err);
	ck_assert_msg(shard == want, "key '%s' mod %d: shard %d, want %d", key, n, shard, want);
}

static void check_refused(enum sharding_function fn, const char *key, size_t len)
{
	char err[128] = "";
	int shard = -1;

	ck_assert(!sharding_shard_for_key(fn, key, len, 4, &shard, err, sizeof(err)));
	ck_assert_int_eq(shard, -1);
	ck_assert(err[0] != '\0');
	ck_assert_ptr_null(strchr(err, '\n'));
}

START_TEST(test_pg_bigint_partitions)
{
	for (size_t i = 0; i < ARRAY_LEN(bigint_cases); i++) {
		int64_t k = bigint_cases[i].key;
		char text[32];
		int n = snprintf(text, sizeof(text), "%" PRId64, k);

		ck_assert(n > 0 && (size_t)n < sizeof(text));
		for (size_t m = 0; m < N_MODULI; m++) {
			uint64_t h = sharding_pg_bigint_hash(k);

			ck_assert_msg(h % (uint64_t)moduli[m] == (uint64_t)bigint_cases[i].rem[m],
				      "bigint %" PRId64 " modulus %d", k, moduli[m]);
			check_shard(SHARDING_PG_BIGINT_HASH, text, (size_t)n, moduli[m],
				    bigint_cases[i].rem[m]);
		}
	}
}
END_TEST

START_TEST(test_pg_text_partitions)
{
	for (size_t i = 0; i < ARRAY_LEN(text_cases); i++) {
		const char *k = text_cases[i].key;

		for (size_t m = 0; m < N_MODULI; m++) {
			uint64_t h = sharding_pg_text_hash(k, strlen(k));

			ck_assert_msg(h % (uint64_t)moduli[m] == (uint64_t)text_cases[i].rem[m],
				      "text '%s' modulus %d", k, moduli[m]);
			check_shard(SHARDING_PG_TEXT_HASH, k, strlen(k), moduli[m],
				    text_cases[i].rem[m]);
		}
	}
}
END_TEST

START_TEST(test_pg_uuid_partitions)
{
	for (size_t i = 0; i < ARRAY_LEN(uuid_cases); i++) {
		const char *k = uuid_cases[i].key;
		uint8_t u[SHARDING_UUID_LEN];

		ck_assert(sharding_parse_uuid(k, strlen(k), u));
		for (size_t m = 0; m < N_MODULI; m++) {
			uint64_t h = sharding_pg_uuid_hash(u);

			ck_assert_msg(h % (uint64_t)moduli[m] == (uint64_t)uuid_cases[i].rem[m],
				      "uuid '%s' modulus %d", k, moduli[m]);
			check_shard(SHARDING_PG_UUID_HASH, k, strlen(k), moduli[m],
				    uuid_cases[i].rem[m]);
		}
	}
	/* Other spellings of the same uuid land on the same shard. */
	check_shard(SHARDING_PG_UUID_HASH, "{A0EEBC999C0B4EF8BB6D6BB9BD380A11}", 34, 7, 6);
	check_shard(SHARDING_PG_UUID_HASH, "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11", 39, 1009, 548);
}
END_TEST

START_TEST(test_murmur3_vectors)
{
	for (size_t i = 0; i < ARRAY_LEN(text_vectors); i++) {
		const char *k = text_vectors[i].key;

		ck_assert_msg(sharding_murmur3(k, strlen(k)) == text_vectors[i].murmur3,
			      "murmur3 '%s'", k);
	}
}
END_TEST

START_TEST(test_sha1_vectors)
{
	for (size_t i = 0; i < ARRAY_LEN(text_vectors); i++) {
		const char *k = text_vectors[i].key;

		ck_assert_msg(sharding_sha1(k, strlen(k)) == text_vectors[i].sha1, "sha1 '%s'", k);
	}
}
END_TEST

START_TEST(test_sha1_murmur3_shards)
{
	/* Integers hash as their canonical decimal text, so every spelling of
	 * 42 goes where PgCat sends 42; other keys hash as given. Expected
	 * values: the vectors above mod n. */
	check_shard(SHARDING_SHA1, "42", 2, 3, (int)(UINT32_C(0x0797ae56) % 3));
	check_shard(SHARDING_SHA1, " +042 ", 6, 3, (int)(UINT32_C(0x0797ae56) % 3));
	check_shard(SHARDING_MURMUR3, "42", 2, 3, (int)(UINT64_C(0xb68fda223f324f6c) % 3));
	check_shard(SHARDING_MURMUR3, "0042", 4, 3, (int)(UINT64_C(0xb68fda223f324f6c) % 3));
	check_shard(SHARDING_SHA1, "-0001", 5, 7, (int)(UINT32_C(0x34d23819) % 7));
	check_shard(SHARDING_MURMUR3, "-1", 2, 7, (int)(UINT64_C(0xedb551f5e4c5362a) % 7));
	check_shard(SHARDING_SHA1, "-9223372036854775808", 20, 5, (int)(UINT32_C(0x3974ca5f) % 5));
	check_shard(SHARDING_SHA1, "hello", 5, 7, (int)(UINT32_C(0xaea9434d) % 7));
	check_shard(SHARDING_MURMUR3, "hello", 5, 7, (int)(UINT64_C(0xcbd8a7b341bd9b02) % 7));
	check_shard(SHARDING_MURMUR3, "", 0, 5, 0);
	/* Out of int64 range: no longer an integer, so hashed as bytes. */
	check_shard(SHARDING_SHA1, "9223372036854775808", 19, 1, 0);
	for (int n = 1; n <= 16; n++) {
		int s = -1;
		char err[64];

		ck_assert(sharding_shard_for_key(SHARDING_MURMUR3, "1234", 4, n, &s, err, sizeof(err)));
		ck_assert_int_eq(s, (int)(UINT64_C(0x0897364d218fe7b4) % (uint64_t)n));
		ck_assert(sharding_shard_for_key(SHARDING_SHA1, "1234", 4, n, &s, err, sizeof(err)));
		ck_assert_int_eq(s, (int)(UINT32_C(0x0d2c0220) % (uint32_t)n));
	}
}
END_TEST

START_TEST(test_parse_bigint)
{
	static const struct {
		const char *s;
		int64_t want;
	} good[] = {
		{ " 42 ", 42 },
		{ "+7", 7 },
		{ "-0007", -7 },
		{ "0", 0 },
		{ "-0", 0 },
		{ "\t12\n", 12 },
		{ "00000000000000000000000000012", 12 },
		{ "9223372036854775807", INT64_MAX },
		{ "-9223372036854775808", INT64_MIN },
		{ "  \r\v\f-9223372036854775807  ", -INT64_MAX },
	};
	/* All refused by PostgreSQL 15's int8in. */
	static const char *const bad[] = {
		"9223372036854775808", "-9223372036854775809", "99999999999999999999999",
		"", " ", "abc", "1.5", "+", "-", "- 5", "+-5", "--5", "12 3", "0x1A",
		"1_000", "1e3", "42abc", "99999999999999999999x",
	};
	int64_t v;

	for (size_t i = 0; i < ARRAY_LEN(good); i++) {
		v = 12345;
		ck_assert_msg(sharding_parse_bigint(good[i].s, strlen(good[i].s), &v), "'%s'", good[i].s);
		ck_assert_msg(v == good[i].want, "'%s' -> %" PRId64, good[i].s, v);
	}
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		v = 12345;
		ck_assert_msg(!sharding_parse_bigint(bad[i], strlen(bad[i]), &v), "'%s'", bad[i]);
		ck_assert(v == 12345);
	}
	/* The length is honoured: no reading past it, and a NUL inside is junk. */
	ck_assert(sharding_parse_bigint("42999", 2, &v));
	ck_assert(v == 42);
	ck_assert(!sharding_parse_bigint("42\0", 3, &v));
	ck_assert(!sharding_parse_bigint("\0" "42", 3, &v));
}
END_TEST

START_TEST(test_parse_uuid)
{
	static const uint8_t want[SHARDING_UUID_LEN] = {
		0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8,
		0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11,
	};
	/* Accepted by PostgreSQL 15's uuid_in. */
	static const char *const good[] = {
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
		"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
		"a0eebc999c0b4ef8bb6d6bb9bd380a11",
		"{a0eebc999c0b4ef8bb6d6bb9bd380a11}",
		"a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
		"a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11",
		"A0eEbC99-9c0B-4Ef8-bB6d-6bB9bD380a11",
	};
	/* Refused by PostgreSQL 15's uuid_in. */
	static const char *const bad[] = {
		" a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g",
		"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
		"a0eeb-c99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
		"-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a-11",
		"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-}",
		"", "{}", "{", "-", "0x0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
	};
	uint8_t u[SHARDING_UUID_LEN];

	for (size_t i = 0; i < ARRAY_LEN(good); i++) {
		memset(u, 0, sizeof(u));
		ck_assert_msg(sharding_parse_uuid(good[i], strlen(good[i]), u), "'%s'", good[i]);
		ck_assert_msg(memcmp(u, want, sizeof(u)) == 0, "'%s'", good[i]);
	}
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		memset(u, 0x5a, sizeof(u));
		ck_assert_msg(!sharding_parse_uuid(bad[i], strlen(bad[i]), u), "'%s'", bad[i]);
		ck_assert_uint_eq(u[0], 0x5a);
	}
	/* Length honoured; a NUL inside is junk. */
	ck_assert(sharding_parse_uuid("a0eebc999c0b4ef8bb6d6bb9bd380a11ff", 32, u));
	ck_assert(!sharding_parse_uuid("a0eebc999c0b4ef8bb6d6bb9bd380a11\0", 33, u));
	ck_assert(!sharding_parse_uuid("a0eebc999c0b4ef8bb6d6bb9bd380a11", 31, u));
}
END_TEST

START_TEST(test_shard_for_key_errors)
{
	char err[128];
	int shard = -1;

	check_refused(SHARDING_PG_BIGINT_HASH, "abc", 3);
	check_refused(SHARDING_PG_BIGINT_HASH, "1.5", 3);
	check_refused(SHARDING_PG_BIGINT_HASH, "", 0);
	check_refused(SHARDING_PG_BIGINT_HASH, "9223372036854775808", 19);
	check_refused(SHARDING_PG_BIGINT_HASH, "4\n2", 3);
	check_refused(SHARDING_PG_UUID_HASH, "42", 2);
	check_refused(SHARDING_PG_UUID_HASH, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1", 35);

	/* The message names the type and quotes the key, on one line, with
	 * control bytes neutralised. */
	ck_assert(!sharding_shard_for_key(SHARDING_PG_BIGINT_HASH, "x\ny", 3, 2, &shard, err,
					  sizeof(err)));
	ck_assert_str_eq(err, "invalid input syntax for type bigint: \"x?y\"");
	ck_assert(!sharding_shard_for_key(SHARDING_PG_BIGINT_HASH, "-9223372036854775809", 20, 2,
					  &shard, err, sizeof(err)));
	ck_assert_str_eq(err, "value out of range for type bigint: \"-9223372036854775809\"");

	/* A huge bad key is quoted only in part and never overflows err. */
	char big[1000];

	memset(big, 'z', sizeof(big));
	ck_assert(!sharding_shard_for_key(SHARDING_PG_UUID_HASH, big, sizeof(big), 2, &shard, err,
					  sizeof(err)));
	ck_assert(strlen(err) < sizeof(err));
	ck_assert_ptr_nonnull(strstr(err, "...\""));
	char tiny[8];

	ck_assert(!sharding_shard_for_key(SHARDING_PG_UUID_HASH, big, sizeof(big), 2, &shard, tiny,
					  sizeof(tiny)));
	ck_assert_uint_eq(strlen(tiny), sizeof(tiny) - 1);
	/* No buffer for the message is allowed. */
	ck_assert(!sharding_shard_for_key(SHARDING_PG_UUID_HASH, big, sizeof(big), 2, &shard, NULL,
					  0));

	/* Shard counts below 1 are refused for every function. */
	ck_assert(!sharding_shard_for_key(SHARDING_PG_TEXT_HASH, "a", 1, 0, &shard, err,
					  sizeof(err)));
	ck_assert(!sharding_shard_for_key(SHARDING_SHA1, "1", 1, -3, &shard, err, sizeof(err)));
	ck_assert_int_eq(shard, -1);

	/* Text takes any bytes, NULs included; one shard means shard 0. */
	ck_assert(sharding_shard_for_key(SHARDING_PG_TEXT_HASH, "a\0b", 3, 1, &shard, err,
					 sizeof(err)));
	ck_assert_int_eq(shard, 0);
	ck_assert(sharding_shard_for_key(SHARDING_PG_TEXT_HASH, NULL, 0, 3, &shard, err,
					 sizeof(err)));
	ck_assert_int_eq(shard, 2);   /* "" mod 3 from the PostgreSQL table */
}
END_TEST

Suite *sharding_suite(void)
{
	Suite *s = suite_create("sharding");
	TCase *tc = tcase_create("sharding");

	tcase_add_test(tc, test_pg_bigint_partitions);
	tcase_add_test(tc, test_pg_text_partitions);
	tcase_add_test(tc, test_pg_uuid_partitions);
	tcase_add_test(tc, test_murmur3_vectors);
	tcase_add_test(tc, test_sha1_vectors);
	tcase_add_test(tc, test_sha1_murmur3_shards);
	tcase_add_test(tc, test_parse_bigint);
	tcase_add_test(tc, test_parse_uuid);
	tcase_add_test(tc, test_shard_for_key_errors);
	suite_add_tcase(s, tc);
	return s;
}
