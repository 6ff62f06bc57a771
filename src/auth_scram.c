/* SPDX-License-Identifier: MIT */
/*
 * auth_scram: SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL speaks it,
 * both sides, as pure functions over caller-owned buffers and state structs.
 * It knows no sockets, no protocol framing (SASL messages' envelopes are
 * proto.c's), no configuration and no globals; randomness comes in as
 * parameters so tests are deterministic.
 *
 * Limits, chosen here and applied everywhere a message or verifier is read:
 *  - a SCRAM message longer than SCRAM_MAX_MESSAGE bytes is refused;
 *  - iteration counts must lie in [1, SCRAM_MAX_ITERATIONS] (10,000,000):
 *    PostgreSQL uses 4096 by default and a count far above that is either a
 *    mistake or an attempt to make us burn CPU (as a client, one PBKDF2 round
 *    of 10M iterations is seconds of work: kdf.c runs it off the event loop);
 *  - salts are 1..SCRAM_MAX_SALT_LEN bytes.
 *
 * SASLprep: PostgreSQL normalises the password with SASLprep (RFC 4013) and
 * falls back to the raw bytes when the password is not valid UTF-8 or
 * SASLprep refuses it; so does every derivation here that starts from a
 * plaintext password (saslprep.c), except scram_salted_password, whose
 * callers prepare the password first.
 */
#include "auth_scram.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "saslprep.h"

#define SCRAM_PREFIX "SCRAM-SHA-256$"
/* Longest verifier text we accept: prefix, iterations, base64 salt and keys. */
#define SCRAM_SECRET_MAX_TEXT 256
/* client-first-bare + "," + server-first + "," + client-final-without-proof */
#define AUTH_MESSAGE_MAX (3 * (SCRAM_MAX_MESSAGE + 1))

/* ------------------------------------------------------------------------
 * base64
 * ------------------------------------------------------------------------ */

static const char b64_alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

bool pg_b64_encode(const uint8_t *in, size_t len, char *out, size_t outsz, size_t *outlen)
{
	if (outlen != NULL)
		*outlen = 0;
	if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
		return false;
	size_t need = (len + 2) / 3 * 4;
	if (out == NULL || outsz < need + 1)
		return false;

	size_t o = 0;
	size_t i = 0;
	for (; i + 3 <= len; i += 3) {
		uint32_t v = ((uint32_t)in[i] << 16) | ((uint32_t)in[i + 1] << 8) | in[i + 2];
		out[o++] = b64_alphabet[(v >> 18) & 63];
		out[o++] = b64_alphabet[(v >> 12) & 63];
		out[o++] = b64_alphabet[(v >> 6) & 63];
		out[o++] = b64_alphabet[v & 63];
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)in[i] << 16;
		out[o++] = b64_alphabet[(v >> 18) & 63];
		out[o++] = b64_alphabet[(v >> 12) & 63];
		out[o++] = '=';
		out[o++] = '=';
	} else if (len - i == 2) {
		uint32_t v = ((uint32_t)in[i] << 16) | ((uint32_t)in[i + 1] << 8);
		out[o++] = b64_alphabet[(v >> 18) & 63];
		out[o++] = b64_alphabet[(v >> 12) & 63];
		out[o++] = b64_alphabet[(v >> 6) & 63];
		out[o++] = '=';
	}
	out[o] = '\0';
	if (outlen != NULL)
		*outlen = o;
	return true;
}

/* Value of one base64 digit, or -1. */
static int b64_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

bool pg_b64_decode(const char *in, size_t len, uint8_t *out, size_t outsz, size_t *outlen)
{
	if (outlen != NULL)
		*outlen = 0;
	if (len % 4 != 0)
		return false;
	if (len == 0)
		return true;
	if (in == NULL)
		return false;

	size_t pad = 0;
	if (in[len - 1] == '=')
		pad = (in[len - 2] == '=') ? 2 : 1;
	size_t need = len / 4 * 3 - pad;
	if (out == NULL || outsz < need)
		return false;

	size_t o = 0;
	for (size_t i = 0; i < len; i += 4) {
		bool last = (i + 4 == len);
		size_t digits = last ? 4 - pad : 4;
		uint32_t v = 0;
		for (size_t k = 0; k < 4; k++) {
			int d = 0;
			if (k < digits) {
				d = b64_value(in[i + k]);
				if (d < 0)
					return false;
			} else if (in[i + k] != '=') {
				return false;
			}
			v = (v << 6) | (uint32_t)d;
		}
		/* Strict: the bits the padding leaves unused must be zero. */
		if ((pad == 1 && last && (v & 0xff) != 0) ||
		    (pad == 2 && last && (v & 0xffff) != 0))
			return false;
		out[o++] = (uint8_t)(v >> 16);
		if (digits >= 3)
			out[o++] = (uint8_t)(v >> 8);
		if (digits == 4)
			out[o++] = (uint8_t)v;
	}
	if (outlen != NULL)
		*outlen = o;
	return true;
}

/* ------------------------------------------------------------------------
 * crypto primitives
 * ------------------------------------------------------------------------ */

/*
 * SHA-256 through one digest and one context fetched once per process.
 * OpenSSL 3's one-shot HMAC() and EVP_Digest() look the algorithm up by
 * name and allocate a context on every call, which made them most of the
 * CPU a SCRAM login spends in user space; the digest itself is a few
 * blocks. The handles hold no secret between calls (the final step wipes
 * the block buffer) and are the process's own, like OpenSSL's provider
 * tables; pgcat is single-threaded per process.
 */
static struct {
	EVP_MD *md;
	EVP_MD_CTX *ctx;
} sha256_handles;

static EVP_MD_CTX *sha256_begin(void)
{
	if (!sha256_handles.md)
		sha256_handles.md = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (!sha256_handles.ctx)
		sha256_handles.ctx = EVP_MD_CTX_new();
	if (!sha256_handles.md || !sha256_handles.ctx ||
	    EVP_DigestInit_ex2(sha256_handles.ctx, sha256_handles.md, NULL) != 1)
		return NULL;
	return sha256_handles.ctx;
}

static bool sha256_end(EVP_MD_CTX *ctx, uint8_t out[SCRAM_KEY_LEN])
{
	unsigned int mdlen = 0;
	return EVP_DigestFinal_ex(ctx, out, &mdlen) == 1 && mdlen == SCRAM_KEY_LEN;
}

static bool sha256(const uint8_t *data, size_t len, uint8_t out[SCRAM_KEY_LEN])
{
	EVP_MD_CTX *ctx = sha256_begin();
	return ctx && EVP_DigestUpdate(ctx, data, len) == 1 && sha256_end(ctx, out);
}

/* HMAC-SHA-256 as RFC 2104 defines it, on the digest above. */
static bool hmac_sha256(const uint8_t *key, size_t keylen, const void *data, size_t datalen,
			uint8_t out[SCRAM_KEY_LEN])
{
	enum { BLOCK = 64 };
	uint8_t pad[BLOCK];
	uint8_t inner[SCRAM_KEY_LEN];
	EVP_MD_CTX *ctx;
	bool ok = false;

	/* SCRAM's keys are 32 bytes; a longer key would first be hashed. */
	if (keylen > BLOCK)
		return false;
	memset(pad, 0, sizeof pad);
	memcpy(pad, key, keylen);
	for (size_t i = 0; i < BLOCK; i++)
		pad[i] ^= 0x36;
	ctx = sha256_begin();
	if (!ctx || EVP_DigestUpdate(ctx, pad, BLOCK) != 1 || EVP_DigestUpdate(ctx, data, datalen) != 1 ||
	    !sha256_end(ctx, inner))
		goto out;
	for (size_t i = 0; i < BLOCK; i++)
		pad[i] ^= 0x36 ^ 0x5c;
	ctx = sha256_begin();
	ok = ctx && EVP_DigestUpdate(ctx, pad, BLOCK) == 1 && EVP_DigestUpdate(ctx, inner, sizeof inner) == 1 &&
	     sha256_end(ctx, out);
out:
	OPENSSL_cleanse(pad, sizeof pad);
	OPENSSL_cleanse(inner, sizeof inner);
	return ok;
}

/*
 * Hi() of RFC 5802: PBKDF2 with HMAC-SHA-256 and one output block,
 *   U1 = HMAC(P, salt || INT(1)), Ui = HMAC(P, Ui-1), Hi = U1 ^ ... ^ Uc.
 * Written out rather than PKCS5_PBKDF2_HMAC so that it can stop half-way
 * (at exit, kdf.c) and because it digests the two padded keys once and
 * copies those states per round, where OpenSSL 3's KDF sets up its HMAC
 * again each round: about a third less time. Its contexts are its own, not
 * sha256_handles: it runs on kdf.c's threads.
 */
bool scram_salted_password(const char *password, const uint8_t *salt, size_t salt_len, int iterations,
			   const atomic_bool *stop, uint8_t out[SCRAM_KEY_LEN])
{
	enum { BLOCK = 64, STOP_CHECK = 0xffff };
	static const uint8_t block_index[4] = { 0, 0, 0, 1 };
	uint8_t key[BLOCK], u[SCRAM_KEY_LEN], inner[SCRAM_KEY_LEN], acc[SCRAM_KEY_LEN];
	unsigned int n = 0;
	bool ok = false;

	if (password == NULL || salt == NULL || out == NULL || iterations < 1 || iterations > SCRAM_MAX_ITERATIONS)
		return false;
	EVP_MD *md = EVP_MD_fetch(NULL, "SHA256", NULL);
	EVP_MD_CTX *ipad = EVP_MD_CTX_new(), *opad = EVP_MD_CTX_new(), *c = EVP_MD_CTX_new();
	if (!md || !ipad || !opad || !c)
		goto done;

	/* HMAC's key: the password, or its digest when longer than a block. */
	size_t pwlen = strlen(password);
	memset(key, 0, sizeof key);
	if (pwlen > BLOCK) {
		if (EVP_Digest(password, pwlen, key, &n, md, NULL) != 1 || n != SCRAM_KEY_LEN)
			goto done;
	} else {
		memcpy(key, password, pwlen);
	}
	for (size_t i = 0; i < BLOCK; i++)
		key[i] ^= 0x36;
	if (EVP_DigestInit_ex2(ipad, md, NULL) != 1 || EVP_DigestUpdate(ipad, key, BLOCK) != 1)
		goto done;
	for (size_t i = 0; i < BLOCK; i++)
		key[i] ^= 0x36 ^ 0x5c;
	if (EVP_DigestInit_ex2(opad, md, NULL) != 1 || EVP_DigestUpdate(opad, key, BLOCK) != 1)
		goto done;

	/* U1 */
	if (EVP_MD_CTX_copy_ex(c, ipad) != 1 || EVP_DigestUpdate(c, salt, salt_len) != 1 ||
	    EVP_DigestUpdate(c, block_index, sizeof block_index) != 1 || EVP_DigestFinal_ex(c, inner, &n) != 1 ||
	    EVP_MD_CTX_copy_ex(c, opad) != 1 || EVP_DigestUpdate(c, inner, sizeof inner) != 1 ||
	    EVP_DigestFinal_ex(c, u, &n) != 1)
		goto done;
	memcpy(acc, u, sizeof acc);
	for (int r = 1; r < iterations; r++) {
		if ((r & STOP_CHECK) == 0 && stop && atomic_load_explicit(stop, memory_order_relaxed))
			goto done;
		if (EVP_MD_CTX_copy_ex(c, ipad) != 1 || EVP_DigestUpdate(c, u, sizeof u) != 1 ||
		    EVP_DigestFinal_ex(c, inner, &n) != 1 || EVP_MD_CTX_copy_ex(c, opad) != 1 ||
		    EVP_DigestUpdate(c, inner, sizeof inner) != 1 || EVP_DigestFinal_ex(c, u, &n) != 1)
			goto done;
		for (size_t i = 0; i < SCRAM_KEY_LEN; i++)
			acc[i] ^= u[i];
	}
	memcpy(out, acc, SCRAM_KEY_LEN);
	ok = true;
done:
	/* The padded keys' states are the password's equivalent: freeing a
	 * context wipes it. */
	EVP_MD_CTX_free(ipad);
	EVP_MD_CTX_free(opad);
	EVP_MD_CTX_free(c);
	EVP_MD_free(md);
	OPENSSL_cleanse(key, sizeof key);
	OPENSSL_cleanse(u, sizeof u);
	OPENSSL_cleanse(inner, sizeof inner);
	OPENSSL_cleanse(acc, sizeof acc);
	return ok;
}

/* SASLprep, then Hi(), on this thread. */
static bool scram_hi(const char *password, const uint8_t *salt, size_t salt_len, int iterations,
		     uint8_t out[SCRAM_KEY_LEN])
{
	char *prepared;
	if (saslprep_password(password, &prepared) == SASLPREP_NO_MEMORY)
		return false;
	bool ok = scram_salted_password(prepared, salt, salt_len, iterations, NULL, out);
	OPENSSL_cleanse(prepared, strlen(prepared));
	free(prepared);
	return ok;
}

/* strlen that looks at no more than max + 1 bytes; returns max + 1 if longer. */
static size_t bounded_len(const char *s, size_t max)
{
	size_t n = 0;

	while (n <= max && s[n] != '\0')
		n++;
	return n;
}

static bool iterations_ok(int iterations)
{
	return iterations >= 1 && iterations <= SCRAM_MAX_ITERATIONS;
}

/*
 * A positive decimal number without sign or leading zero (RFC 5802's
 * posit-number), within the iteration limits.
 */
static bool parse_iterations(const char *s, size_t len, int *out)
{
	if (len == 0 || len > 8 || s[0] == '0')
		return false;
	long v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	if (!iterations_ok((int)v))
		return false;
	*out = (int)v;
	return true;
}

/* ------------------------------------------------------------------------
 * bounded string builder (sticky error)
 * ------------------------------------------------------------------------ */

struct sbuf {
	char *p;
	size_t size;
	size_t len;
	bool err;
};

static void sb_init(struct sbuf *b, char *p, size_t size)
{
	b->p = p;
	b->size = size;
	b->len = 0;
	b->err = (p == NULL || size == 0);
	if (!b->err)
		p[0] = '\0';
}

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
	if (b->err)
		return;
	if (n >= b->size - b->len) {
		b->err = true;
		return;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void sb_b64(struct sbuf *b, const uint8_t *in, size_t n)
{
	size_t olen;

	if (b->err)
		return;
	if (!pg_b64_encode(in, n, b->p + b->len, b->size - b->len, &olen)) {
		b->err = true;
		return;
	}
	b->len += olen;
}

/* Copy a finished message to the caller's buffer. */
static bool emit(const char *msg, size_t len, char *out, size_t outsz, size_t *outlen)
{
	if (out == NULL || outsz < len + 1)
		return false;
	memcpy(out, msg, len);
	out[len] = '\0';
	if (outlen != NULL)
		*outlen = len;
	return true;
}

static void clear_out(char *out, size_t outsz, size_t *outlen)
{
	if (out != NULL && outsz > 0)
		out[0] = '\0';
	if (outlen != NULL)
		*outlen = 0;
}

/* ------------------------------------------------------------------------
 * attribute scanner: "a=value,b=value,...", never reading past len
 * ------------------------------------------------------------------------ */

struct scan {
	const char *p;
	size_t len;
	size_t pos;
};

static bool is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Printable ASCII except ',' (RFC 5802 "printable"), non-empty. */
static bool is_printable(const char *s, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x21 || c > 0x7e || c == ',')
			return false;
	}
	return true;
}

/*
 * Read one attribute at the cursor. After it the cursor is at the end of the
 * input or just past a ',' that must be followed by another attribute.
 */
static bool scan_attr(struct scan *s, char *name, const char **val, size_t *vlen)
{
	if (s->pos >= s->len || s->len - s->pos < 2)
		return false;
	char n = s->p[s->pos];
	if (!is_alpha(n) || s->p[s->pos + 1] != '=')
		return false;
	size_t start = s->pos + 2;
	size_t end = start;
	while (end < s->len && s->p[end] != ',')
		end++;
	*name = n;
	*val = s->p + start;
	*vlen = end - start;
	s->pos = end;
	if (end < s->len) {
		s->pos++;
		if (s->pos == s->len)
			return false;   /* trailing ',' */
	}
	return true;
}

static bool scan_expect(struct scan *s, char name, const char **val, size_t *vlen)
{
	char n;

	return scan_attr(s, &n, val, vlen) && n == name;
}

static bool scan_done(const struct scan *s)
{
	return s->pos >= s->len;
}

static bool message_ok(const char *msg, size_t len)
{
	return msg != NULL && len > 0 && len <= SCRAM_MAX_MESSAGE && memchr(msg, '\0', len) == NULL;
}

/* ------------------------------------------------------------------------
 * verifiers
 * ------------------------------------------------------------------------ */

static bool keys_from_salted(const uint8_t salted[SCRAM_KEY_LEN],
			     uint8_t client_key[SCRAM_KEY_LEN],
			     uint8_t server_key[SCRAM_KEY_LEN])
{
	static const char ck[] = "Client Key";
	static const char sk[] = "Server Key";

	return hmac_sha256(salted, SCRAM_KEY_LEN, ck, sizeof(ck) - 1, client_key) &&
	       hmac_sha256(salted, SCRAM_KEY_LEN, sk, sizeof(sk) - 1, server_key);
}

bool scram_secret_from_password(const char *password, const uint8_t *salt, size_t salt_len,
				int iterations, struct scram_secret *out)
{
	uint8_t salted[SCRAM_KEY_LEN];
	uint8_t client_key[SCRAM_KEY_LEN];
	struct scram_secret s;
	bool ok;

	if (password == NULL || salt == NULL || out == NULL || salt_len == 0 ||
	    salt_len > SCRAM_MAX_SALT_LEN || !iterations_ok(iterations))
		return false;

	memset(&s, 0, sizeof(s));
	s.iterations = iterations;
	memcpy(s.salt, salt, salt_len);
	s.salt_len = salt_len;
	ok = scram_hi(password, salt, salt_len, iterations, salted) &&
	     keys_from_salted(salted, client_key, s.server_key) &&
	     sha256(client_key, SCRAM_KEY_LEN, s.stored_key);
	if (ok)
		*out = s;
	OPENSSL_cleanse(salted, sizeof(salted));
	OPENSSL_cleanse(client_key, sizeof(client_key));
	OPENSSL_cleanse(&s, sizeof(s));
	return ok;
}

bool scram_secret_check_salted(const struct scram_secret *secret, const uint8_t salted[SCRAM_KEY_LEN],
			       uint8_t client_key[SCRAM_KEY_LEN])
{
	uint8_t ck[SCRAM_KEY_LEN], sk[SCRAM_KEY_LEN], stored[SCRAM_KEY_LEN];
	/* Both keys: the StoredKey proves the ClientKey (which pass-through
	 * will use), the ServerKey that the verifier is whole. Compared in
	 * constant time, each whatever the other gave. */
	bool ok = secret != NULL && salted != NULL && keys_from_salted(salted, ck, sk) &&
		  sha256(ck, SCRAM_KEY_LEN, stored);
	if (ok) {
		int diff = CRYPTO_memcmp(stored, secret->stored_key, SCRAM_KEY_LEN);
		diff |= CRYPTO_memcmp(sk, secret->server_key, SCRAM_KEY_LEN);
		ok = diff == 0;
	}
	if (ok && client_key != NULL)
		memcpy(client_key, ck, SCRAM_KEY_LEN);
	OPENSSL_cleanse(ck, sizeof ck);
	OPENSSL_cleanse(sk, sizeof sk);
	OPENSSL_cleanse(stored, sizeof stored);
	return ok;
}

/* Decode base64 that must yield exactly want bytes. */
static bool b64_exact(const char *in, size_t len, uint8_t *out, size_t want)
{
	size_t got;

	return pg_b64_decode(in, len, out, want, &got) && got == want;
}

bool scram_secret_parse(const char *text, struct scram_secret *out)
{
	struct scram_secret s;
	const size_t plen = sizeof(SCRAM_PREFIX) - 1;

	if (text == NULL || out == NULL)
		return false;
	size_t len = bounded_len(text, SCRAM_SECRET_MAX_TEXT);
	if (len > SCRAM_SECRET_MAX_TEXT || len < plen || memcmp(text, SCRAM_PREFIX, plen) != 0)
		return false;

	/* <iter>:<salt>$<StoredKey>:<ServerKey> */
	const char *p = text + plen;
	const char *end = text + len;
	const char *colon1 = memchr(p, ':', (size_t)(end - p));
	if (colon1 == NULL)
		return false;
	const char *dollar = memchr(colon1 + 1, '$', (size_t)(end - colon1 - 1));
	if (dollar == NULL)
		return false;
	const char *colon2 = memchr(dollar + 1, ':', (size_t)(end - dollar - 1));
	if (colon2 == NULL)
		return false;

	memset(&s, 0, sizeof(s));
	if (!parse_iterations(p, (size_t)(colon1 - p), &s.iterations))
		return false;
	if (!pg_b64_decode(colon1 + 1, (size_t)(dollar - colon1 - 1), s.salt, sizeof(s.salt),
			   &s.salt_len) || s.salt_len == 0)
		return false;
	if (!b64_exact(dollar + 1, (size_t)(colon2 - dollar - 1), s.stored_key, SCRAM_KEY_LEN))
		return false;
	/* The rest must be exactly one base64 key: a stray ':' or '$' fails decoding. */
	if (!b64_exact(colon2 + 1, (size_t)(end - colon2 - 1), s.server_key, SCRAM_KEY_LEN))
		return false;
	*out = s;
	OPENSSL_cleanse(&s, sizeof(s));
	return true;
}

bool scram_secret_format(const struct scram_secret *secret, char *out, size_t outsz)
{
	struct sbuf b;
	char iter[16];

	if (secret == NULL || !iterations_ok(secret->iterations) || secret->salt_len == 0 ||
	    secret->salt_len > SCRAM_MAX_SALT_LEN)
		return false;
	snprintf(iter, sizeof(iter), "%d", secret->iterations);
	sb_init(&b, out, outsz);
	sb_puts(&b, SCRAM_PREFIX);
	sb_puts(&b, iter);
	sb_put(&b, ":", 1);
	sb_b64(&b, secret->salt, secret->salt_len);
	sb_put(&b, "$", 1);
	sb_b64(&b, secret->stored_key, SCRAM_KEY_LEN);
	sb_put(&b, ":", 1);
	sb_b64(&b, secret->server_key, SCRAM_KEY_LEN);
	if (b.err) {
		if (out != NULL && outsz > 0)
			out[0] = '\0';
		return false;
	}
	return true;
}

/* AuthMessage = client-first-bare "," server-first "," client-final-without-proof */
static bool build_auth_message(struct sbuf *b, const char *first_bare, const char *server_first,
			       const char *final_wo_proof, size_t final_wo_proof_len)
{
	sb_puts(b, first_bare);
	sb_put(b, ",", 1);
	sb_puts(b, server_first);
	sb_put(b, ",", 1);
	sb_put(b, final_wo_proof, final_wo_proof_len);
	return !b->err;
}

/* ------------------------------------------------------------------------
 * server side
 * ------------------------------------------------------------------------ */

void scram_server_init(struct scram_server *st, const struct scram_secret *secret)
{
	memset(st, 0, sizeof(*st));
	if (secret != NULL)
		st->secret = *secret;   /* else salt_len 0: every exchange fails */
	st->step = SCRAM_SERVER_WANT_FIRST;
}

/*
 * client-first-message = gs2-header client-first-bare
 * gs2-header = gs2-cbind-flag "," [authzid] ","
 * client-first-bare = [reserved-mext ","] username "," nonce ["," extensions]
 */
bool scram_server_handle_first_with_nonce(struct scram_server *st, const char *msg, size_t len,
					  const char *server_nonce,
					  char *out, size_t outsz, size_t *outlen)
{
	clear_out(out, outsz, outlen);
	if (st == NULL || st->step != SCRAM_SERVER_WANT_FIRST)
		return false;
	if (!message_ok(msg, len) || server_nonce == NULL ||
	    !is_printable(server_nonce, bounded_len(server_nonce, SCRAM_MAX_MESSAGE)) ||
	    st->secret.salt_len == 0 || st->secret.salt_len > SCRAM_MAX_SALT_LEN ||
	    !iterations_ok(st->secret.iterations)) {
		st->step = SCRAM_SERVER_DONE;
		return false;
	}
	/* Any failure below ends the exchange. */
	st->step = SCRAM_SERVER_DONE;

	/* gs2 header: 'n' (client does no channel binding) or 'y' (client could,
	 * but thinks we cannot: true, we offer no SCRAM-SHA-256-PLUS). 'p' asks
	 * for binding we never advertised. An authzid is not supported. */
	if (len < 3 || (msg[0] != 'n' && msg[0] != 'y') || msg[1] != ',' || msg[2] != ',')
		return false;
	const size_t gs2_len = 3;
	memcpy(st->gs2_header, msg, gs2_len);
	st->gs2_header[gs2_len] = '\0';

	const char *bare = msg + gs2_len;
	size_t bare_len = len - gs2_len;
	struct scan s = { bare, bare_len, 0 };
	const char *val;
	size_t vlen;

	/* The user name is ignored, as PostgreSQL does: the startup packet's
	 * user is the one authenticating. "m=" (mandatory extension) would come
	 * first and is refused by scan_expect. */
	if (!scan_expect(&s, 'n', &val, &vlen))
		return false;
	const char *cnonce;
	size_t cnonce_len;
	if (!scan_expect(&s, 'r', &cnonce, &cnonce_len) || !is_printable(cnonce, cnonce_len))
		return false;
	/* Optional extensions are allowed and ignored. */
	while (!scan_done(&s)) {
		char n;
		if (!scan_attr(&s, &n, &val, &vlen))
			return false;
	}

	struct sbuf nb;
	sb_init(&nb, st->nonce, sizeof(st->nonce));
	sb_put(&nb, cnonce, cnonce_len);
	sb_puts(&nb, server_nonce);
	if (nb.err)
		return false;

	char iter[16];
	snprintf(iter, sizeof(iter), "%d", st->secret.iterations);
	struct sbuf sf;
	sb_init(&sf, st->server_first, sizeof(st->server_first));
	sb_puts(&sf, "r=");
	sb_puts(&sf, st->nonce);
	sb_puts(&sf, ",s=");
	sb_b64(&sf, st->secret.salt, st->secret.salt_len);
	sb_puts(&sf, ",i=");
	sb_puts(&sf, iter);
	if (sf.err)
		return false;

	memcpy(st->client_first_bare, bare, bare_len);
	st->client_first_bare[bare_len] = '\0';

	if (!emit(st->server_first, sf.len, out, outsz, outlen))
		return false;
	st->step = SCRAM_SERVER_WANT_FINAL;
	return true;
}

bool scram_server_handle_first(struct scram_server *st, const char *msg, size_t len,
			       const uint8_t server_nonce_raw[SCRAM_NONCE_RAW_LEN],
			       char *out, size_t outsz, size_t *outlen)
{
	char nonce[(SCRAM_NONCE_RAW_LEN + 2) / 3 * 4 + 1];

	if (server_nonce_raw == NULL ||
	    !pg_b64_encode(server_nonce_raw, SCRAM_NONCE_RAW_LEN, nonce, sizeof(nonce), NULL)) {
		clear_out(out, outsz, outlen);
		if (st != NULL)
			st->step = SCRAM_SERVER_DONE;
		return false;
	}
	return scram_server_handle_first_with_nonce(st, msg, len, nonce, out, outsz, outlen);
}

/*
 * client-final-message = channel-binding "," nonce ["," extensions] "," proof
 * Whatever the verdict, the exchange is over afterwards.
 */
enum scram_verdict scram_server_handle_final(struct scram_server *st, const char *msg, size_t len,
					     char *out, size_t outsz, size_t *outlen)
{
	uint8_t proof[SCRAM_KEY_LEN];
	uint8_t signature[SCRAM_KEY_LEN];
	uint8_t client_key[SCRAM_KEY_LEN];
	uint8_t check[SCRAM_KEY_LEN];
	uint8_t server_sig[SCRAM_KEY_LEN];
	uint8_t cbind[sizeof(st->gs2_header)];
	char auth[AUTH_MESSAGE_MAX];
	char final[64];
	enum scram_verdict verdict = SCRAM_MALFORMED;

	clear_out(out, outsz, outlen);
	if (st == NULL || st->step != SCRAM_SERVER_WANT_FINAL)
		return SCRAM_MALFORMED;
	st->step = SCRAM_SERVER_DONE;
	if (!message_ok(msg, len))
		return SCRAM_MALFORMED;

	struct scan s = { msg, len, 0 };
	const char *val;
	size_t vlen;
	size_t cblen;

	/* c=: base64 of the gs2 header we saw (no channel-binding data). */
	if (!scan_expect(&s, 'c', &val, &vlen) ||
	    !pg_b64_decode(val, vlen, cbind, sizeof(cbind), &cblen) ||
	    cblen != strlen(st->gs2_header) || memcmp(cbind, st->gs2_header, cblen) != 0)
		return SCRAM_MALFORMED;
	/* r=: exactly the combined nonce. */
	if (!scan_expect(&s, 'r', &val, &vlen) || vlen != strlen(st->nonce) ||
	    memcmp(val, st->nonce, vlen) != 0)
		return SCRAM_MALFORMED;
	/* Extensions (ignored), then p= as the last attribute. */
	for (;;) {
		size_t attr_start = s.pos;
		char n;
		if (!scan_attr(&s, &n, &val, &vlen))
			return SCRAM_MALFORMED;
		if (n != 'p')
			continue;
		if (!scan_done(&s) || !b64_exact(val, vlen, proof, SCRAM_KEY_LEN))
			return SCRAM_MALFORMED;
		/* without-proof part ends before the ',' that precedes "p=" */
		struct sbuf ab;
		sb_init(&ab, auth, sizeof(auth));
		if (!build_auth_message(&ab, st->client_first_bare, st->server_first, msg,
					attr_start - 1))
			return SCRAM_MALFORMED;

		/* ClientKey = proof XOR HMAC(StoredKey, AuthMessage); H(ClientKey) must be StoredKey. */
		if (!hmac_sha256(st->secret.stored_key, SCRAM_KEY_LEN, auth, ab.len, signature))
			break;
		for (size_t i = 0; i < SCRAM_KEY_LEN; i++)
			client_key[i] = proof[i] ^ signature[i];
		if (!sha256(client_key, SCRAM_KEY_LEN, check))
			break;
		if (CRYPTO_memcmp(check, st->secret.stored_key, SCRAM_KEY_LEN) != 0) {
			verdict = SCRAM_BAD_PROOF;
			break;
		}

		/* server-final-message = "v=" base64(HMAC(ServerKey, AuthMessage)) */
		struct sbuf fb;
		sb_init(&fb, final, sizeof(final));
		sb_puts(&fb, "v=");
		if (!hmac_sha256(st->secret.server_key, SCRAM_KEY_LEN, auth, ab.len, server_sig))
			break;
		sb_b64(&fb, server_sig, SCRAM_KEY_LEN);
		if (fb.err || !emit(final, fb.len, out, outsz, outlen))
			break;
		memcpy(st->client_key, client_key, SCRAM_KEY_LEN);
		verdict = SCRAM_OK;
		break;
	}
	OPENSSL_cleanse(client_key, sizeof(client_key));
	OPENSSL_cleanse(signature, sizeof(signature));
	OPENSSL_cleanse(auth, sizeof(auth));
	return verdict;
}

/* ------------------------------------------------------------------------
 * client side
 * ------------------------------------------------------------------------ */

/* saslname: ',' and '=' escaped as "=2C" and "=3D". */
static void sb_saslname(struct sbuf *b, const char *user)
{
	for (const char *p = user; *p != '\0'; p++) {
		if (*p == ',')
			sb_puts(b, "=2C");
		else if (*p == '=')
			sb_puts(b, "=3D");
		else
			sb_put(b, p, 1);
	}
}

bool scram_client_first_with_user(struct scram_client *st, const char *password, const char *user,
				  const char *nonce, char *out, size_t outsz, size_t *outlen)
{
	clear_out(out, outsz, outlen);
	if (st == NULL || user == NULL || nonce == NULL)
		return false;
	size_t nlen = bounded_len(nonce, sizeof(st->client_nonce) - 1);
	if (nlen >= sizeof(st->client_nonce) || !is_printable(nonce, nlen))
		return false;

	/* A password selects password mode; without one, pass-through keys
	 * (have_keys, client_key, server_key) are the caller's and kept. */
	st->step = SCRAM_CLIENT_INIT;
	st->password = password;
	if (password != NULL) {
		st->have_keys = false;
		OPENSSL_cleanse(st->client_key, sizeof(st->client_key));
		OPENSSL_cleanse(st->server_key, sizeof(st->server_key));
	}
	memset(st->expected_server_signature, 0, sizeof(st->expected_server_signature));
	st->server_first[0] = '\0';
	st->nonce_len = 0;
	memset(st->salt, 0, sizeof(st->salt));
	st->salt_len = 0;
	st->iterations = 0;
	memcpy(st->client_nonce, nonce, nlen);
	st->client_nonce[nlen] = '\0';

	struct sbuf b;
	sb_init(&b, st->client_first_bare, sizeof(st->client_first_bare));
	sb_puts(&b, "n=");
	sb_saslname(&b, user);
	sb_puts(&b, ",r=");
	sb_puts(&b, st->client_nonce);
	if (b.err)
		return false;

	/* gs2 header "n,,": no channel binding, no authzid. */
	struct sbuf o;
	sb_init(&o, out, outsz);
	sb_puts(&o, "n,,");
	sb_put(&o, st->client_first_bare, b.len);
	if (o.err) {
		clear_out(out, outsz, outlen);
		return false;
	}
	if (outlen != NULL)
		*outlen = o.len;
	st->step = SCRAM_CLIENT_SENT_FIRST;
	return true;
}

bool scram_client_first_with_nonce(struct scram_client *st, const char *password, const char *nonce,
				   char *out, size_t outsz, size_t *outlen)
{
	return scram_client_first_with_user(st, password, "", nonce, out, outsz, outlen);
}

bool scram_client_first(struct scram_client *st, const char *password,
			const uint8_t nonce_raw[SCRAM_NONCE_RAW_LEN],
			char *out, size_t outsz, size_t *outlen)
{
	char nonce[(SCRAM_NONCE_RAW_LEN + 2) / 3 * 4 + 1];

	if (nonce_raw == NULL ||
	    !pg_b64_encode(nonce_raw, SCRAM_NONCE_RAW_LEN, nonce, sizeof(nonce), NULL)) {
		clear_out(out, outsz, outlen);
		return false;
	}
	return scram_client_first_with_nonce(st, password, nonce, out, outsz, outlen);
}

/*
 * server-first-message = nonce "," salt "," iteration-count
 * (PostgreSQL sends no extensions and libpq accepts none; neither do we.)
 */
bool scram_client_read_first(struct scram_client *st, const char *msg, size_t len)
{
	if (st == NULL || st->step != SCRAM_CLIENT_SENT_FIRST)
		return false;
	st->step = SCRAM_CLIENT_DONE;   /* unless we get to the end */
	if (!message_ok(msg, len))
		return false;
	if (st->password == NULL && !st->have_keys)
		return false;

	struct scan s = { msg, len, 0 };
	const char *nonce;
	size_t nonce_len;
	const char *val;
	size_t vlen;
	size_t cn_len = strlen(st->client_nonce);

	/* r=: our nonce followed by a non-empty server part. */
	if (!scan_expect(&s, 'r', &nonce, &nonce_len) || !is_printable(nonce, nonce_len) ||
	    nonce_len <= cn_len || memcmp(nonce, st->client_nonce, cn_len) != 0)
		return false;
	if (!scan_expect(&s, 's', &val, &vlen) ||
	    !pg_b64_decode(val, vlen, st->salt, sizeof(st->salt), &st->salt_len) || st->salt_len == 0)
		return false;
	if (!scan_expect(&s, 'i', &val, &vlen) || !parse_iterations(val, vlen, &st->iterations) ||
	    !scan_done(&s))
		return false;
	memcpy(st->server_first, msg, len);
	st->server_first[len] = '\0';
	st->nonce_len = nonce_len;   /* it starts the message, after "r=" */
	st->step = SCRAM_CLIENT_GOT_FIRST;
	return true;
}

bool scram_client_write_final(struct scram_client *st, const uint8_t *salted,
			      char *out, size_t outsz, size_t *outlen)
{
	uint8_t stored_key[SCRAM_KEY_LEN];
	uint8_t signature[SCRAM_KEY_LEN];
	uint8_t proof[SCRAM_KEY_LEN];
	char auth[AUTH_MESSAGE_MAX];
	char final[SCRAM_MAX_MESSAGE + 64];
	struct sbuf fb, ab;
	size_t wo_proof_len;
	bool ok = false;

	clear_out(out, outsz, outlen);
	if (st == NULL || st->step != SCRAM_CLIENT_GOT_FIRST)
		return false;
	st->step = SCRAM_CLIENT_DONE;   /* unless we get to the end */
	if (!st->have_keys) {
		if (salted == NULL || !keys_from_salted(salted, st->client_key, st->server_key))
			goto done;
	}
	if (!sha256(st->client_key, SCRAM_KEY_LEN, stored_key))
		goto done;

	/* client-final-message-without-proof = "c=biws,r=" nonce  (biws = b64("n,,")) */
	sb_init(&fb, final, sizeof(final));
	sb_puts(&fb, "c=biws,r=");
	sb_put(&fb, st->server_first + 2, st->nonce_len);
	if (fb.err)
		goto done;
	wo_proof_len = fb.len;

	sb_init(&ab, auth, sizeof(auth));
	if (!build_auth_message(&ab, st->client_first_bare, st->server_first, final, wo_proof_len))
		goto done;
	if (!hmac_sha256(stored_key, SCRAM_KEY_LEN, auth, ab.len, signature) ||
	    !hmac_sha256(st->server_key, SCRAM_KEY_LEN, auth, ab.len, st->expected_server_signature))
		goto done;
	for (size_t i = 0; i < SCRAM_KEY_LEN; i++)
		proof[i] = st->client_key[i] ^ signature[i];

	sb_puts(&fb, ",p=");
	sb_b64(&fb, proof, SCRAM_KEY_LEN);
	if (fb.err || !emit(final, fb.len, out, outsz, outlen))
		goto done;
	st->step = SCRAM_CLIENT_SENT_FINAL;
	ok = true;
done:
	OPENSSL_cleanse(signature, sizeof(signature));
	OPENSSL_cleanse(proof, sizeof(proof));
	OPENSSL_cleanse(auth, sizeof(auth));
	if (!ok)
		clear_out(out, outsz, outlen);
	return ok;
}

bool scram_client_handle_first(struct scram_client *st, const char *msg, size_t len,
			       char *out, size_t outsz, size_t *outlen)
{
	uint8_t salted[SCRAM_KEY_LEN];
	bool ok;

	clear_out(out, outsz, outlen);
	if (!scram_client_read_first(st, msg, len))
		return false;
	if (st->have_keys)
		return scram_client_write_final(st, NULL, out, outsz, outlen);
	ok = scram_hi(st->password, st->salt, st->salt_len, st->iterations, salted) &&
	     scram_client_write_final(st, salted, out, outsz, outlen);
	if (!ok)
		st->step = SCRAM_CLIENT_DONE;
	OPENSSL_cleanse(salted, sizeof(salted));
	return ok;
}

/*
 * server-final-message = "v=" base64(ServerSignature), or "e=" error: a
 * failure either way unless the signature matches (compared in constant time).
 */
bool scram_client_handle_final(struct scram_client *st, const char *msg, size_t len)
{
	uint8_t sig[SCRAM_KEY_LEN];

	if (st == NULL || st->step != SCRAM_CLIENT_SENT_FINAL)
		return false;
	st->step = SCRAM_CLIENT_DONE;
	if (!message_ok(msg, len))
		return false;

	struct scan s = { msg, len, 0 };
	const char *val;
	size_t vlen;
	if (!scan_expect(&s, 'v', &val, &vlen) || !scan_done(&s) ||
	    !b64_exact(val, vlen, sig, SCRAM_KEY_LEN))
		return false;
	return CRYPTO_memcmp(sig, st->expected_server_signature, SCRAM_KEY_LEN) == 0;
}
