/* SPDX-License-Identifier: MIT */
/*
 * sharding: sharding key text -> shard number (SPEC §6), as pure functions
 * over their arguments. It reproduces PostgreSQL's hash partitioning exactly
 * (lookup3-style hash_any, the partition seed, hash_combine64) and the sha1
 * and murmur3 schemes of PgCat and PgDog. It does not find keys in queries
 * (router.c) nor know which pool it serves (the caller passes the function
 * and the shard count).
 */
#include "sharding.h"
#include "hexdigit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <openssl/sha.h>

/*
 * PostgreSQL's HASH_PARTITION_SEED (partition.h): every per-column hash of a
 * PARTITION BY HASH key is computed with this seed, so we must use it too or
 * the shards would not line up with the server's partitions.
 */
#define PG_HASH_PARTITION_SEED UINT64_C(0x7A5B22367996DCFD)
/* hash_combine64's mixing constant (hashfn.h). */
#define PG_HASH_COMBINE64_K UINT64_C(0x49a0f4dd15e5a8e3)
/* hash_bytes' initial value: lookup3's golden ratio plus an arbitrary offset. */
#define PG_HASH_INIT (UINT32_C(0x9e3779b9) + UINT32_C(3923095))

/* Longest excerpt of a bad key quoted in an error message. */
#define KEY_EXCERPT_MAX 64

/* ------------------------------------------------------------------------ */
/* PostgreSQL's hash_bytes_extended (Bob Jenkins' lookup3, PostgreSQL flavour) */

static inline uint32_t rotl32(uint32_t x, unsigned k)
{
	return (x << k) | (x >> (32 - k));
}

struct jenkins {
	uint32_t a, b, c;
};

static void jenkins_mix(struct jenkins *h)
{
	h->a -= h->c; h->a ^= rotl32(h->c, 4);  h->c += h->b;
	h->b -= h->a; h->b ^= rotl32(h->a, 6);  h->a += h->c;
	h->c -= h->b; h->c ^= rotl32(h->b, 8);  h->b += h->a;
	h->a -= h->c; h->a ^= rotl32(h->c, 16); h->c += h->b;
	h->b -= h->a; h->b ^= rotl32(h->a, 19); h->a += h->c;
	h->c -= h->b; h->c ^= rotl32(h->b, 4);  h->b += h->a;
}

static void jenkins_final(struct jenkins *h)
{
	h->c ^= h->b; h->c -= rotl32(h->b, 14);
	h->a ^= h->c; h->a -= rotl32(h->c, 11);
	h->b ^= h->a; h->b -= rotl32(h->a, 25);
	h->c ^= h->b; h->c -= rotl32(h->b, 16);
	h->a ^= h->c; h->a -= rotl32(h->c, 4);
	h->b ^= h->a; h->b -= rotl32(h->a, 14);
	h->c ^= h->b; h->c -= rotl32(h->b, 24);
}

/* The seeded start shared by the byte and the uint32 variants. */
static struct jenkins jenkins_start(uint32_t len, uint64_t seed)
{
	struct jenkins h;

	h.a = h.b = h.c = PG_HASH_INIT + len;
	/* PostgreSQL skips the extra mix for seed 0 so that the extended hash
	 * with seed 0 agrees with the plain 32-bit one; keep that quirk. */
	if (seed != 0) {
		h.a += (uint32_t)(seed >> 32);
		h.b += (uint32_t)seed;
		jenkins_mix(&h);
	}
	return h;
}

/*
 * PostgreSQL loads 4-byte words in host order. Every PostgreSQL build that
 * matters here is little-endian (x86-64, arm64), so read little-endian
 * explicitly and get the same answer on any host pgcat runs on.
 */
static inline uint32_t load_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t pg_hash_bytes_extended(const uint8_t *k, size_t len, uint64_t seed)
{
	/* PostgreSQL takes the length as int; varlena keys never exceed 1 GB. */
	struct jenkins h = jenkins_start((uint32_t)len, seed);

	while (len >= 12) {
		h.a += load_le32(k);
		h.b += load_le32(k + 4);
		h.c += load_le32(k + 8);
		jenkins_mix(&h);
		k += 12;
		len -= 12;
	}
	/* The tail: unlike lookup3, the low byte of c stays free (it held the
	 * length in lookup2), so bytes 8..10 go into c shifted up by 8. */
	switch (len) {
	case 11: h.c += (uint32_t)k[10] << 24; /* fall through */
	case 10: h.c += (uint32_t)k[9] << 16;  /* fall through */
	case 9:  h.c += (uint32_t)k[8] << 8;   /* fall through */
	case 8:  h.b += (uint32_t)k[7] << 24;  /* fall through */
	case 7:  h.b += (uint32_t)k[6] << 16;  /* fall through */
	case 6:  h.b += (uint32_t)k[5] << 8;   /* fall through */
	case 5:  h.b += k[4];                  /* fall through */
	case 4:  h.a += (uint32_t)k[3] << 24;  /* fall through */
	case 3:  h.a += (uint32_t)k[2] << 16;  /* fall through */
	case 2:  h.a += (uint32_t)k[1] << 8;   /* fall through */
	case 1:  h.a += k[0];                  /* fall through */
	default: break;
	}
	jenkins_final(&h);
	return (uint64_t)h.b << 32 | h.c;
}

static uint64_t pg_hash_uint32_extended(uint32_t k, uint64_t seed)
{
	struct jenkins h = jenkins_start((uint32_t)sizeof(uint32_t), seed);

	h.a += k;
	jenkins_final(&h);
	return (uint64_t)h.b << 32 | h.c;
}

/* The partition code folds each key column's hash into a row hash starting
 * from 0; with one column that is a fixed transform, but it changes the
 * remainder, so it must be applied. */
static uint64_t pg_partition_row_hash(uint64_t column_hash)
{
	uint64_t row = 0;

	row ^= column_hash + PG_HASH_COMBINE64_K + (row << 54) + (row >> 7);
	return row;
}

uint64_t sharding_pg_bigint_hash(int64_t v)
{
	/* hashint8extended: fold the high half into the low one so that a bigint
	 * hashes like the int4 of the same value whenever it fits in one (the
	 * ~ for negatives keeps the sign extension from cancelling out). */
	uint64_t u = (uint64_t)v;
	uint32_t lo = (uint32_t)u;
	uint32_t hi = (uint32_t)(u >> 32);

	lo ^= v >= 0 ? hi : ~hi;
	return pg_partition_row_hash(pg_hash_uint32_extended(lo, PG_HASH_PARTITION_SEED));
}

uint64_t sharding_pg_text_hash(const char *s, size_t len)
{
	/* hashtextextended under a deterministic collation hashes the bytes. */
	return pg_partition_row_hash(
		pg_hash_bytes_extended((const uint8_t *)s, len, PG_HASH_PARTITION_SEED));
}

uint64_t sharding_pg_uuid_hash(const uint8_t uuid[SHARDING_UUID_LEN])
{
	return pg_partition_row_hash(
		pg_hash_bytes_extended(uuid, SHARDING_UUID_LEN, PG_HASH_PARTITION_SEED));
}

/* ------------------------------------------------------------------------ */
/* MurmurHash3_x64_128, seed 0 (Austin Appleby's public-domain design) */

#define MURMUR_C1 UINT64_C(0x87c37b91114253d5)
#define MURMUR_C2 UINT64_C(0x4cf5ad432745937f)

static inline uint64_t rotl64(uint64_t x, unsigned k)
{
	return (x << k) | (x >> (64 - k));
}

/* The reference reads blocks in host order on little-endian machines,
 * which is what PgDog and every published vector assume. */
static inline uint64_t load_le64(const uint8_t *p)
{
	return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

static inline uint64_t murmur_fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= UINT64_C(0xff51afd7ed558ccd);
	k ^= k >> 33;
	k *= UINT64_C(0xc4ceb9fe1a85ec53);
	k ^= k >> 33;
	return k;
}

static inline uint64_t murmur_k1(uint64_t k1)
{
	return rotl64(k1 * MURMUR_C1, 31) * MURMUR_C2;
}

static inline uint64_t murmur_k2(uint64_t k2)
{
	return rotl64(k2 * MURMUR_C2, 33) * MURMUR_C1;
}

uint64_t sharding_murmur3(const void *data, size_t len)
{
	const uint8_t *p = data;
	size_t nblocks = len / 16;
	uint64_t h1 = 0;
	uint64_t h2 = 0;

	for (size_t i = 0; i < nblocks; i++, p += 16) {
		h1 ^= murmur_k1(load_le64(p));
		h1 = rotl64(h1, 27) + h2;
		h1 = h1 * 5 + 0x52dce729;
		h2 ^= murmur_k2(load_le64(p + 8));
		h2 = rotl64(h2, 31) + h1;
		h2 = h2 * 5 + 0x38495ab5;
	}

	/* Tail: bytes 8..14 into k2, bytes 0..7 into k1, little-endian. */
	size_t rest = len & 15;
	uint64_t k1 = 0;
	uint64_t k2 = 0;

	for (size_t i = rest; i > 8; i--)
		k2 = k2 << 8 | p[i - 1];
	for (size_t i = rest < 8 ? rest : 8; i > 0; i--)
		k1 = k1 << 8 | p[i - 1];
	if (rest > 8)
		h2 ^= murmur_k2(k2);
	if (rest > 0)
		h1 ^= murmur_k1(k1);

	h1 ^= (uint64_t)len;
	h2 ^= (uint64_t)len;
	h1 += h2;
	h2 += h1;
	h1 = murmur_fmix64(h1);
	h2 = murmur_fmix64(h2);
	h1 += h2;
	/* h2 += h1 would finish the second half, which nobody uses. */
	return h1;
}

/* ------------------------------------------------------------------------ */
/* sha1 (PgCat/PgDog) */

static bool sha1_tail(const char *s, size_t len, uint32_t *out)
{
	uint8_t md[SHA_DIGEST_LENGTH];

	if (SHA1((const unsigned char *)s, len, md) == NULL)
		return false;
	*out = (uint32_t)md[16] << 24 | (uint32_t)md[17] << 16 | (uint32_t)md[18] << 8 | md[19];
	return true;
}

uint32_t sharding_sha1(const char *s, size_t len)
{
	uint32_t v = 0;

	/* SHA1() only fails if OpenSSL cannot fetch the digest at all; the
	 * shard path reports that, this test hook just returns 0. */
	if (!sha1_tail(s, len, &v))
		return 0;
	return v;
}

/* ------------------------------------------------------------------------ */
/* Key input, as PostgreSQL's input functions read it */

enum parse_result { PARSE_OK, PARSE_SYNTAX, PARSE_RANGE };

/* The server's isspace() in the C locale; fixed here so pgcat's own locale
 * cannot change which keys are accepted. */
static inline bool is_pg_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

static inline bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static enum parse_result parse_bigint(const char *s, size_t len, int64_t *out)
{
	size_t i = 0;
	bool neg = false;

	while (i < len && is_pg_space(s[i]))
		i++;
	if (i < len && (s[i] == '-' || s[i] == '+')) {
		neg = s[i] == '-';
		i++;
	}
	if (i >= len || !is_digit(s[i]))
		return PARSE_SYNTAX;

	/* Accumulate as a negative number so INT64_MIN needs no special case. */
	int64_t acc = 0;
	bool overflow = false;

	for (; i < len && is_digit(s[i]); i++) {
		int d = s[i] - '0';

		/* Keep scanning after an overflow: "9999999999999999999x" is a
		 * syntax error in PostgreSQL, not a range error. */
		if (overflow || acc < (INT64_MIN + d) / 10)
			overflow = true;
		else
			acc = acc * 10 - d;
	}
	while (i < len && is_pg_space(s[i]))
		i++;
	/* A NUL could never reach PostgreSQL's input function (it would end the
	 * string there), so treat it as the junk it is. */
	if (i != len)
		return PARSE_SYNTAX;
	if (overflow)
		return PARSE_RANGE;
	if (!neg) {
		if (acc == INT64_MIN)
			return PARSE_RANGE;
		acc = -acc;
	}
	*out = acc;
	return PARSE_OK;
}

bool sharding_parse_bigint(const char *s, size_t len, int64_t *out)
{
	return parse_bigint(s, len, out) == PARSE_OK;
}

bool sharding_parse_uuid(const char *s, size_t len, uint8_t out[SHARDING_UUID_LEN])
{
	size_t i = 0;
	bool braces = false;
	uint8_t tmp[SHARDING_UUID_LEN];

	if (i < len && s[i] == '{') {
		braces = true;
		i++;
	}
	for (size_t b = 0; b < SHARDING_UUID_LEN; b++) {
		if (len - i < 2)
			return false;
		int hi = hex_digit_value((unsigned char)s[i]);
		int lo = hex_digit_value((unsigned char)s[i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		tmp[b] = (uint8_t)(hi << 4 | lo);
		i += 2;
		/* PostgreSQL allows one hyphen after each 4 hex digits, except
		 * after the last group; the standard 8-4-4-4-12 is a subset. */
		if (i < len && s[i] == '-' && b % 2 == 1 && b < SHARDING_UUID_LEN - 1)
			i++;
	}
	if (braces) {
		if (i >= len || s[i] != '}')
			return false;
		i++;
	}
	if (i != len)
		return false;
	memcpy(out, tmp, sizeof(tmp));
	return true;
}

/* ------------------------------------------------------------------------ */
/* Key -> shard */

/* Quote a bad key in an error line: bounded, and control bytes replaced so
 * the message stays one printable line whatever the client sent. */
static void key_excerpt(const char *key, size_t len, char *out, size_t outlen)
{
	size_t n = len < KEY_EXCERPT_MAX ? len : KEY_EXCERPT_MAX;
	size_t j = 0;

	for (size_t i = 0; i < n && j + 1 < outlen; i++) {
		unsigned char ch = (unsigned char)key[i];

		out[j++] = (ch < 0x20 || ch == 0x7f || ch == '"') ? '?' : (char)ch;
	}
	if (n < len && j + 3 < outlen) {
		memcpy(out + j, "...", 3);
		j += 3;
	}
	if (outlen > 0)
		out[j < outlen ? j : outlen - 1] = '\0';
}

static void set_err(char *err, size_t errlen, const char *what, const char *key, size_t len)
{
	char excerpt[KEY_EXCERPT_MAX + 4];

	if (err == NULL || errlen == 0)
		return;
	key_excerpt(key, len, excerpt, sizeof(excerpt));
	snprintf(err, errlen, "%s: \"%s\"", what, excerpt);
}

/* For sha1/murmur3: an integer key is hashed as its canonical decimal text,
 * like PgCat (which parses the key as i64 and hashes to_string()); any other
 * key as its bytes, like PgDog does for strings. */
static const char *hash_text(const char *key, size_t len, char *buf, size_t buflen,
			     size_t *out_len)
{
	int64_t v;

	if (parse_bigint(key, len, &v) == PARSE_OK) {
		int n = snprintf(buf, buflen, "%" PRId64, v);

		if (n > 0 && (size_t)n < buflen) {
			*out_len = (size_t)n;
			return buf;
		}
	}
	*out_len = len;
	return key;
}

bool sharding_shard_for_key(enum sharding_function fn, const char *key, size_t len, int n_shards,
			    int *shard, char *err, size_t errlen)
{
	uint64_t h = 0;
	bool hashed = false;
	char num[24];   /* "-9223372036854775808" + NUL fits */
	size_t tlen;
	const char *text;

	if (n_shards < 1) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "number of shards must be at least 1, got %d", n_shards);
		return false;
	}
	if (key == NULL && len > 0) {
		set_err(err, errlen, "missing sharding key", "", 0);
		return false;
	}
	if (key == NULL)
		key = "";

	switch (fn) {
	case SHARDING_PG_BIGINT_HASH: {
		int64_t v = 0;

		switch (parse_bigint(key, len, &v)) {
		case PARSE_OK:
			break;
		case PARSE_SYNTAX:
			set_err(err, errlen, "invalid input syntax for type bigint", key, len);
			return false;
		case PARSE_RANGE:
			set_err(err, errlen, "value out of range for type bigint", key, len);
			return false;
		}
		h = sharding_pg_bigint_hash(v);
		hashed = true;
		break;
	}
	case SHARDING_PG_TEXT_HASH:
		h = sharding_pg_text_hash(key, len);
		hashed = true;
		break;
	case SHARDING_PG_UUID_HASH: {
		uint8_t uuid[SHARDING_UUID_LEN];

		if (!sharding_parse_uuid(key, len, uuid)) {
			set_err(err, errlen, "invalid input syntax for type uuid", key, len);
			return false;
		}
		h = sharding_pg_uuid_hash(uuid);
		hashed = true;
		break;
	}
	case SHARDING_SHA1: {
		uint32_t v;

		text = hash_text(key, len, num, sizeof(num), &tlen);
		if (!sha1_tail(text, tlen, &v)) {
			if (err != NULL && errlen > 0)
				snprintf(err, errlen, "SHA-1 is not available from OpenSSL");
			return false;
		}
		h = v;
		hashed = true;
		break;
	}
	case SHARDING_MURMUR3:
		text = hash_text(key, len, num, sizeof(num), &tlen);
		h = sharding_murmur3(text, tlen);
		hashed = true;
		break;
	}
	/* A value outside the enum can only come from a caller bug; refuse
	 * rather than send every key to shard 0. */
	if (!hashed) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "unknown sharding function %d", (int)fn);
		return false;
	}
	/* Unsigned modulo, as PostgreSQL's partition routing does. */
	*shard = (int)(h % (uint64_t)n_shards);
	return true;
}
