/* SPDX-License-Identifier: MIT */
/*
 * auth_md5: PostgreSQL's md5 password scheme (stored hash and salted
 * response), constant-time string comparison and strong random bytes, as
 * pure functions over OpenSSL. It does not choose an auth method or talk to
 * sockets; that is auth.c's job.
 */
#include "auth_md5.h"

#include <limits.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#define MD5_RAW_LEN 16
#define MD5_HEX_LEN 32

static void hex_lower(const uint8_t *in, size_t len, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 0x0f];
	}
}

/*
 * MD5 through one digest and one context fetched once per process (as
 * auth_scram.c does for SHA-256): EVP_md5() with a fresh context looked the
 * algorithm up and allocated on every call, most of an md5 login's
 * user-space work. The context holds no secret between calls.
 */
static struct {
	EVP_MD *md;
	EVP_MD_CTX *ctx;
} md5_handles;

/*
 * md5 over the concatenation a || b, written as "md5" + 32 hex digits.
 * Streams both parts so nothing secret is copied into a scratch buffer. On
 * an OpenSSL failure (e.g. MD5 unavailable under a FIPS provider) out is the
 * empty string, which matches no stored hash and no response.
 */
static void md5_hex2(const void *a, size_t alen, const void *b, size_t blen,
		     char out[PG_MD5_LEN + 1])
{
	uint8_t digest[EVP_MAX_MD_SIZE];
	unsigned int dlen = 0;
	if (!md5_handles.md)
		md5_handles.md = EVP_MD_fetch(NULL, "MD5", NULL);
	if (!md5_handles.ctx)
		md5_handles.ctx = EVP_MD_CTX_new();
	EVP_MD_CTX *ctx = md5_handles.ctx;
	bool ok = md5_handles.md != NULL && ctx != NULL &&
		  EVP_DigestInit_ex2(ctx, md5_handles.md, NULL) == 1 &&
		  EVP_DigestUpdate(ctx, a, alen) == 1 &&
		  EVP_DigestUpdate(ctx, b, blen) == 1 &&
		  EVP_DigestFinal_ex(ctx, digest, &dlen) == 1 &&
		  dlen == MD5_RAW_LEN;

	if (!ok) {
		out[0] = '\0';
		return;
	}
	memcpy(out, "md5", 3);
	hex_lower(digest, MD5_RAW_LEN, out + 3);
	out[PG_MD5_LEN] = '\0';
	OPENSSL_cleanse(digest, sizeof(digest));
}

void pg_md5_stored(const char *password, const char *user, char out[PG_MD5_LEN + 1])
{
	md5_hex2(password, strlen(password), user, strlen(user), out);
}

/*
 * The client proves knowledge of the stored hash: md5(hex || salt). If
 * stored is not a well-formed md5 hash, out is the empty string (matches
 * nothing).
 */
void pg_md5_response(const char *stored, const uint8_t salt[4], char out[PG_MD5_LEN + 1])
{
	if (!pg_md5_is_stored(stored)) {
		out[0] = '\0';
		return;
	}
	md5_hex2(stored + 3, MD5_HEX_LEN, salt, 4, out);
}

bool pg_md5_is_stored(const char *text)
{
	if (text == NULL || strncmp(text, "md5", 3) != 0)
		return false;
	for (size_t i = 3; i < PG_MD5_LEN; i++) {
		char c = text[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return text[PG_MD5_LEN] == '\0';
}

/*
 * Only the length may leak (it does not depend on the secret for the
 * fixed-length hashes compared here); the contents are compared in constant
 * time.
 */
bool pg_secure_streq(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return false;
	size_t alen = strlen(a);
	size_t blen = strlen(b);
	if (alen != blen)
		return false;
	return CRYPTO_memcmp(a, b, alen) == 0;
}

bool pg_random_bytes(void *buf, size_t len)
{
	unsigned char *p = buf;

	while (len > 0) {
		int chunk = len > INT_MAX ? INT_MAX : (int)len;
		if (RAND_bytes(p, chunk) != 1)
			return false;
		p += chunk;
		len -= (size_t)chunk;
	}
	return true;
}
