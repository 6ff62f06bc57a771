/* SPDX-License-Identifier: MIT */
/* Unit tests for auth_scram: base64, verifiers, both sides of SCRAM-SHA-256. */
#include "check_suites.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth_md5.h"
#include "auth_scram.h"
#include "saslprep.h"

/* RFC 7677 section 3 test vector (user "user", password "pencil"). */
#define RFC_PASSWORD "pencil"
#define RFC_CLIENT_NONCE "rOprNGfwEbeRWgbNEkqO"
#define RFC_SERVER_NONCE "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
#define RFC_NONCE RFC_CLIENT_NONCE RFC_SERVER_NONCE
#define RFC_SALT "W22ZaJ0SNY7soEsUEjb6gQ=="
#define RFC_PROOF "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
#define RFC_CLIENT_FIRST "n,,n=user,r=" RFC_CLIENT_NONCE
#define RFC_SERVER_FIRST "r=" RFC_NONCE ",s=" RFC_SALT ",i=4096"
#define RFC_CLIENT_FINAL_WO_PROOF "c=biws,r=" RFC_NONCE
#define RFC_CLIENT_FINAL RFC_CLIENT_FINAL_WO_PROOF ",p=" RFC_PROOF
#define RFC_SERVER_FINAL "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

/* Verifiers made by PostgreSQL 15 (password_encryption = scram-sha-256):
 * CREATE ROLE x PASSWORD 'y'; CREATE ROLE app PASSWORD 'correct horse battery staple' */
#define PG_SECRET_Y \
	"SCRAM-SHA-256$4096:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=" \
	":2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY="
#define PG_SECRET_APP \
	"SCRAM-SHA-256$4096:/j0H3A3vcbnbqjU6ei+u6w==$hKMlHuANaOcZKzJX2BFrL793DwywP2XiC334beRyVCs=" \
	":s6q2CRor3EPxsMPvVQqHWGGNVvETUSqQ2ZYC7l96FKM="

#define BUFSZ (SCRAM_MAX_MESSAGE + 128)

static void rfc_secret(struct scram_secret *secret)
{
	uint8_t salt[SCRAM_MAX_SALT_LEN];
	size_t salt_len;

	ck_assert(pg_b64_decode(RFC_SALT, strlen(RFC_SALT), salt, sizeof(salt), &salt_len));
	ck_assert_uint_eq(salt_len, 16);
	ck_assert(scram_secret_from_password(RFC_PASSWORD, salt, salt_len, 4096, secret));
}

/* A server that has answered the RFC client-first-message. */
static void rfc_server_after_first(struct scram_server *st)
{
	struct scram_secret secret;
	char out[BUFSZ];
	size_t outlen;

	rfc_secret(&secret);
	scram_server_init(st, &secret);
	ck_assert(scram_server_handle_first_with_nonce(st, RFC_CLIENT_FIRST, strlen(RFC_CLIENT_FIRST),
						       RFC_SERVER_NONCE, out, sizeof(out), &outlen));
	ck_assert_str_eq(out, RFC_SERVER_FIRST);
}

/* ---- base64 ---- */

START_TEST(test_b64_vectors)
{
	static const char *const plain[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
	static const char *const enc[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" };
	char out[32];
	uint8_t raw[32];
	size_t n;

	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		ck_assert(pg_b64_encode((const uint8_t *)plain[i], strlen(plain[i]), out, sizeof(out), &n));
		ck_assert_str_eq(out, enc[i]);
		ck_assert_uint_eq(n, strlen(enc[i]));
		ck_assert(pg_b64_decode(enc[i], strlen(enc[i]), raw, sizeof(raw), &n));
		ck_assert_uint_eq(n, strlen(plain[i]));
		ck_assert(memcmp(raw, plain[i], n) == 0);
	}
}
END_TEST

START_TEST(test_b64_round_trip)
{
	uint8_t in[100];
	uint8_t back[100];
	char text[200];
	size_t n, m;

	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 97 + 255);
	for (size_t len = 0; len <= sizeof(in); len++) {
		ck_assert(pg_b64_encode(in, len, text, sizeof(text), &n));
		ck_assert_uint_eq(n, (len + 2) / 3 * 4);
		ck_assert_uint_eq(strlen(text), n);
		ck_assert(pg_b64_decode(text, n, back, sizeof(back), &m));
		ck_assert_uint_eq(m, len);
		ck_assert(memcmp(in, back, len) == 0);
	}
}
END_TEST

START_TEST(test_b64_rejects)
{
	static const char *const bad[] = {
		"Zg=", "Zg", "Z", "Zm9*", "Zg==Zg==", "Z===", "====", "Zh==", "Zm9=",
		" Zm9v", "Zm 9v", "Zm9v\n", "Zm9v====", "Zm-v", "Zm_v", "=Zm9",
	};
	uint8_t raw[32];
	char out[8];
	size_t n = 99;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!pg_b64_decode(bad[i], strlen(bad[i]), raw, sizeof(raw), &n),
			      "accepted \"%s\"", bad[i]);
	/* An embedded NUL is not a base64 digit. */
	ck_assert(!pg_b64_decode("Zm\0v", 4, raw, sizeof(raw), &n));
	/* Output too small (decoding needs 3 bytes, encoding 4 + NUL). */
	ck_assert(!pg_b64_decode("Zm9v", 4, raw, 2, &n));
	ck_assert(pg_b64_decode("Zm9v", 4, raw, 3, &n));
	ck_assert_uint_eq(n, 3);
	ck_assert(!pg_b64_encode((const uint8_t *)"foo", 3, out, 4, &n));
	ck_assert(pg_b64_encode((const uint8_t *)"foo", 3, out, 5, &n));
	ck_assert_str_eq(out, "Zm9v");
	/* Reads only len bytes: "Zm9v" out of a longer buffer. */
	ck_assert(pg_b64_decode("Zm9vYmFy", 4, raw, sizeof(raw), &n));
	ck_assert_uint_eq(n, 3);
}
END_TEST

/* ---- verifiers ---- */

START_TEST(test_secret_postgres_verifier)
{
	static const struct {
		const char *text;
		const char *password;
	} cases[] = {
		{ PG_SECRET_Y, "y" },
		{ PG_SECRET_APP, "correct horse battery staple" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct scram_secret parsed, derived;
		char text[256];

		ck_assert(scram_secret_parse(cases[i].text, &parsed));
		ck_assert_int_eq(parsed.iterations, 4096);
		ck_assert_uint_eq(parsed.salt_len, 16);
		ck_assert(scram_secret_format(&parsed, text, sizeof(text)));
		ck_assert_str_eq(text, cases[i].text);

		ck_assert(scram_secret_from_password(cases[i].password, parsed.salt, parsed.salt_len,
						     parsed.iterations, &derived));
		ck_assert(memcmp(derived.stored_key, parsed.stored_key, SCRAM_KEY_LEN) == 0);
		ck_assert(memcmp(derived.server_key, parsed.server_key, SCRAM_KEY_LEN) == 0);

		ck_assert(scram_secret_from_password("wrong", parsed.salt, parsed.salt_len,
						     parsed.iterations, &derived));
		ck_assert(memcmp(derived.stored_key, parsed.stored_key, SCRAM_KEY_LEN) != 0);
	}
}
END_TEST

/* A password in clear against a verifier (auth_type password): its
 * SaltedPassword gives the verifier's keys, and the ClientKey for
 * pass-through; a wrong password, or a verifier with another ServerKey,
 * does not. */
START_TEST(test_secret_check_salted)
{
	struct scram_secret parsed;
	uint8_t salted[SCRAM_KEY_LEN], client_key[SCRAM_KEY_LEN], stored[SCRAM_KEY_LEN];
	unsigned int n = 0;
	ck_assert(scram_secret_parse(PG_SECRET_APP, &parsed));
	ck_assert(scram_salted_password("correct horse battery staple", parsed.salt, parsed.salt_len, parsed.iterations,
					NULL, salted));
	memset(client_key, 0, sizeof client_key);
	ck_assert(scram_secret_check_salted(&parsed, salted, client_key));
	ck_assert(EVP_Digest(client_key, SCRAM_KEY_LEN, stored, &n, EVP_sha256(), NULL) == 1);
	ck_assert(memcmp(stored, parsed.stored_key, SCRAM_KEY_LEN) == 0);
	ck_assert(scram_secret_check_salted(&parsed, salted, NULL));
	struct scram_secret other = parsed;
	other.server_key[0] ^= 1;
	ck_assert(!scram_secret_check_salted(&other, salted, NULL));
	ck_assert(scram_salted_password("correct horse battery stapl", parsed.salt, parsed.salt_len,
					parsed.iterations, NULL, salted));
	memset(client_key, 0, sizeof client_key);
	ck_assert(!scram_secret_check_salted(&parsed, salted, client_key));
	static const uint8_t zero[SCRAM_KEY_LEN];
	ck_assert(memcmp(client_key, zero, SCRAM_KEY_LEN) == 0);   /* nothing written */
	ck_assert(!scram_secret_check_salted(NULL, salted, NULL));
}
END_TEST

START_TEST(test_secret_rejects)
{
	static const char *const bad[] = {
		"",
		"SCRAM-SHA-256$",
		"SCRAM-SHA-1$4096:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		"md56a422f785c9e20873908ce25d1736ae2",
		"SCRAM-SHA-256$0:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		"SCRAM-SHA-256$-1:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		"SCRAM-SHA-256$+4096:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		"SCRAM-SHA-256$4096x:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		"SCRAM-SHA-256$10000001:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		"SCRAM-SHA-256$99999999999:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		/* empty salt */
		"SCRAM-SHA-256$4096:$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		/* bad base64 salt */
		"SCRAM-SHA-256$4096:bhZ+Z1Fy5ioEW5eO4c4nGg=$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		/* StoredKey of 31 bytes */
		"SCRAM-SHA-256$4096:bhZ+Z1Fy5ioEW5eO4c4nGg==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		/* missing ServerKey, extra fields, missing separators */
		"SCRAM-SHA-256$4096:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=",
		"SCRAM-SHA-256$4096:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:",
		PG_SECRET_Y ":",
		PG_SECRET_Y "$",
		PG_SECRET_Y "\n",
		"SCRAM-SHA-256$4096bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
		"SCRAM-SHA-256$4096:bhZ+Z1Fy5ioEW5eO4c4nGg==oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=",
	};
	struct scram_secret s;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!scram_secret_parse(bad[i], &s), "accepted \"%s\"", bad[i]);
	ck_assert(!scram_secret_parse(NULL, &s));

	/* The iteration bounds themselves are accepted. */
	ck_assert(scram_secret_parse("SCRAM-SHA-256$10000000:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=", &s));
	ck_assert_int_eq(s.iterations, 10000000);
	ck_assert(scram_secret_parse("SCRAM-SHA-256$1:bhZ+Z1Fy5ioEW5eO4c4nGg==$oROV7Uh71ZR4Xvmn3H7TaT9mIhYGxlC7GD7TQK72tRE=:2MEz2oY845+1ioFzVtZVk2BRfeuaiHR2FvRZGiBxcMY=", &s));
	ck_assert_int_eq(s.iterations, 1);

	/* Too long to be a verifier. */
	char longtext[600];
	memset(longtext, 'A', sizeof(longtext) - 1);
	longtext[sizeof(longtext) - 1] = '\0';
	memcpy(longtext, "SCRAM-SHA-256$4096:", 19);
	ck_assert(!scram_secret_parse(longtext, &s));
}
END_TEST

START_TEST(test_secret_from_password_bounds)
{
	static const uint8_t salt[SCRAM_MAX_SALT_LEN + 1] = { 1, 2, 3 };
	struct scram_secret s;
	char small[40];

	ck_assert(!scram_secret_from_password("pw", salt, 16, 0, &s));
	ck_assert(!scram_secret_from_password("pw", salt, 16, -5, &s));
	ck_assert(!scram_secret_from_password("pw", salt, 16, 10000001, &s));
	ck_assert(!scram_secret_from_password("pw", salt, 0, 4096, &s));
	ck_assert(!scram_secret_from_password("pw", salt, SCRAM_MAX_SALT_LEN + 1, 4096, &s));
	ck_assert(scram_secret_from_password("pw", salt, SCRAM_MAX_SALT_LEN, 1, &s));
	ck_assert(scram_secret_from_password("", salt, 16, 1, &s));
	ck_assert(!scram_secret_format(&s, small, sizeof(small)));
	ck_assert_str_eq(small, "");
}
END_TEST

/* ---- RFC 7677 vector, both sides ---- */

START_TEST(test_rfc7677_client)
{
	struct scram_client c;
	char out[BUFSZ];
	size_t n;

	memset(&c, 0, sizeof(c));
	ck_assert(scram_client_first_with_user(&c, RFC_PASSWORD, "user", RFC_CLIENT_NONCE,
					       out, sizeof(out), &n));
	ck_assert_str_eq(out, RFC_CLIENT_FIRST);
	ck_assert_uint_eq(n, strlen(RFC_CLIENT_FIRST));
	ck_assert(scram_client_handle_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST),
					    out, sizeof(out), &n));
	ck_assert_str_eq(out, RFC_CLIENT_FINAL);
	ck_assert_uint_eq(n, strlen(RFC_CLIENT_FINAL));
	ck_assert(scram_client_handle_final(&c, RFC_SERVER_FINAL, strlen(RFC_SERVER_FINAL)));
	ck_assert_int_eq(c.step, SCRAM_CLIENT_DONE);
	/* Once done, nothing more is accepted. */
	ck_assert(!scram_client_handle_final(&c, RFC_SERVER_FINAL, strlen(RFC_SERVER_FINAL)));
}
END_TEST

START_TEST(test_rfc7677_server)
{
	struct scram_server st;
	struct scram_secret secret;
	char out[BUFSZ];
	size_t n;

	rfc_server_after_first(&st);
	ck_assert_int_eq(st.step, SCRAM_SERVER_WANT_FINAL);
	ck_assert_int_eq(scram_server_handle_final(&st, RFC_CLIENT_FINAL, strlen(RFC_CLIENT_FINAL),
						   out, sizeof(out), &n), SCRAM_OK);
	ck_assert_str_eq(out, RFC_SERVER_FINAL);
	ck_assert_uint_eq(n, strlen(RFC_SERVER_FINAL));
	ck_assert_int_eq(st.step, SCRAM_SERVER_DONE);

	/* The recovered ClientKey hashes to the StoredKey. */
	uint8_t h[SCRAM_KEY_LEN];
	unsigned int hl;
	ck_assert(EVP_Digest(st.client_key, SCRAM_KEY_LEN, h, &hl, EVP_sha256(), NULL) == 1);
	rfc_secret(&secret);
	ck_assert(memcmp(h, secret.stored_key, SCRAM_KEY_LEN) == 0);

	/* A second final is refused. */
	ck_assert_int_eq(scram_server_handle_final(&st, RFC_CLIENT_FINAL, strlen(RFC_CLIENT_FINAL),
						   out, sizeof(out), &n), SCRAM_MALFORMED);
}
END_TEST

/* Pass-through: the ClientKey the server recovered, plus the ServerKey from the
 * verifier, reproduce the RFC client side without the password. */
START_TEST(test_rfc7677_pass_through)
{
	struct scram_server st;
	struct scram_secret secret;
	struct scram_client c;
	char out[BUFSZ];
	size_t n;

	rfc_server_after_first(&st);
	ck_assert_int_eq(scram_server_handle_final(&st, RFC_CLIENT_FINAL, strlen(RFC_CLIENT_FINAL),
						   out, sizeof(out), &n), SCRAM_OK);
	rfc_secret(&secret);

	memset(&c, 0, sizeof(c));
	c.have_keys = true;
	memcpy(c.client_key, st.client_key, SCRAM_KEY_LEN);
	memcpy(c.server_key, secret.server_key, SCRAM_KEY_LEN);
	ck_assert(scram_client_first_with_user(&c, NULL, "user", RFC_CLIENT_NONCE, out, sizeof(out), &n));
	ck_assert(c.have_keys);
	ck_assert(scram_client_handle_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST),
					    out, sizeof(out), &n));
	ck_assert_str_eq(out, RFC_CLIENT_FINAL);
	ck_assert(scram_client_handle_final(&c, RFC_SERVER_FINAL, strlen(RFC_SERVER_FINAL)));

	/* Keys set after scram_client_first work as well. */
	memset(&c, 0, sizeof(c));
	ck_assert(scram_client_first_with_user(&c, NULL, "user", RFC_CLIENT_NONCE, out, sizeof(out), &n));
	c.have_keys = true;
	memcpy(c.client_key, st.client_key, SCRAM_KEY_LEN);
	memcpy(c.server_key, secret.server_key, SCRAM_KEY_LEN);
	ck_assert(scram_client_handle_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST),
					    out, sizeof(out), &n));
	ck_assert_str_eq(out, RFC_CLIENT_FINAL);

	/* Neither password nor keys: no proof can be made. */
	memset(&c, 0, sizeof(c));
	ck_assert(scram_client_first_with_user(&c, NULL, "user", RFC_CLIENT_NONCE, out, sizeof(out), &n));
	ck_assert(!scram_client_handle_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST),
					     out, sizeof(out), &n));
}
END_TEST

/* gs2 flag 'y' (client supports binding, thinks we don't): accepted, and the
 * client-final must then carry c=base64("y,,") = "eSws". The proof is computed
 * here directly with OpenSSL, independently of auth_scram's client side. */
START_TEST(test_server_gs2_y)
{
	struct scram_server st;
	struct scram_secret secret;
	char out[BUFSZ];
	size_t n;
	uint8_t salt[16], salted[32], client_key[32], stored_key[32], sig[32], proof[32];
	unsigned int l;
	size_t salt_len;
	const char *first = "y,,n=user,r=" RFC_CLIENT_NONCE;
	const char *wo_proof = "c=eSws,r=" RFC_NONCE;
	const char *auth = "n=user,r=" RFC_CLIENT_NONCE "," RFC_SERVER_FIRST ",c=eSws,r=" RFC_NONCE;

	rfc_secret(&secret);
	scram_server_init(&st, &secret);
	ck_assert(scram_server_handle_first_with_nonce(&st, first, strlen(first), RFC_SERVER_NONCE,
						       out, sizeof(out), &n));
	ck_assert_str_eq(out, RFC_SERVER_FIRST);

	ck_assert(pg_b64_decode(RFC_SALT, strlen(RFC_SALT), salt, sizeof(salt), &salt_len));
	ck_assert(PKCS5_PBKDF2_HMAC(RFC_PASSWORD, 6, salt, 16, 4096, EVP_sha256(), 32, salted) == 1);
	ck_assert(HMAC(EVP_sha256(), salted, 32, (const uint8_t *)"Client Key", 10, client_key, &l) != NULL);
	ck_assert(EVP_Digest(client_key, 32, stored_key, &l, EVP_sha256(), NULL) == 1);
	ck_assert(HMAC(EVP_sha256(), stored_key, 32, (const uint8_t *)auth, strlen(auth), sig, &l) != NULL);
	for (int i = 0; i < 32; i++)
		proof[i] = client_key[i] ^ sig[i];

	char final[BUFSZ], p64[64];
	ck_assert(pg_b64_encode(proof, 32, p64, sizeof(p64), &n));
	snprintf(final, sizeof(final), "%s,p=%s", wo_proof, p64);

	/* c=biws does not match the "y,," header. */
	struct scram_server st2;
	scram_server_init(&st2, &secret);
	ck_assert(scram_server_handle_first_with_nonce(&st2, first, strlen(first), RFC_SERVER_NONCE,
						       out, sizeof(out), &n));
	ck_assert_int_eq(scram_server_handle_final(&st2, RFC_CLIENT_FINAL, strlen(RFC_CLIENT_FINAL),
						   out, sizeof(out), &n), SCRAM_MALFORMED);

	ck_assert_int_eq(scram_server_handle_final(&st, final, strlen(final), out, sizeof(out), &n),
			 SCRAM_OK);
	ck_assert(memcmp(st.client_key, client_key, 32) == 0);
}
END_TEST

/* ---- full exchanges with random nonces ---- */

struct exchange {
	struct scram_server srv;
	struct scram_client cli;
	char buf[BUFSZ];
	char buf2[BUFSZ];
	size_t n;
	size_t n2;
};

/* Runs client-first, server-first and client-final; returns the server verdict. */
static enum scram_verdict run_exchange(struct exchange *x, const struct scram_secret *secret,
				       const char *password)
{
	uint8_t cn[SCRAM_NONCE_RAW_LEN], sn[SCRAM_NONCE_RAW_LEN];

	ck_assert(pg_random_bytes(cn, sizeof(cn)));
	ck_assert(pg_random_bytes(sn, sizeof(sn)));
	scram_server_init(&x->srv, secret);
	ck_assert(scram_client_first(&x->cli, password, cn, x->buf, sizeof(x->buf), &x->n));
	ck_assert_uint_eq(x->n, strlen("n,,n=,r=") + 24);
	ck_assert(strncmp(x->buf, "n,,n=,r=", 8) == 0);
	ck_assert(scram_server_handle_first(&x->srv, x->buf, x->n, sn, x->buf2, sizeof(x->buf2), &x->n2));
	ck_assert(scram_client_handle_first(&x->cli, x->buf2, x->n2, x->buf, sizeof(x->buf), &x->n));
	return scram_server_handle_final(&x->srv, x->buf, x->n, x->buf2, sizeof(x->buf2), &x->n2);
}

START_TEST(test_round_trip)
{
	struct exchange x, y;
	struct scram_secret secret;
	uint8_t salt[16];

	memset(&x, 0, sizeof(x));
	ck_assert(pg_random_bytes(salt, sizeof(salt)));
	ck_assert(scram_secret_from_password("correct horse", salt, sizeof(salt), 4096, &secret));
	ck_assert_int_eq(run_exchange(&x, &secret, "correct horse"), SCRAM_OK);
	ck_assert(strncmp(x.buf2, "v=", 2) == 0);
	ck_assert(scram_client_handle_final(&x.cli, x.buf2, x.n2));

	/* Pass-through into a second server with the same verifier. */
	memset(&y, 0, sizeof(y));
	y.cli.have_keys = true;
	memcpy(y.cli.client_key, x.srv.client_key, SCRAM_KEY_LEN);
	memcpy(y.cli.server_key, secret.server_key, SCRAM_KEY_LEN);
	ck_assert_int_eq(run_exchange(&y, &secret, NULL), SCRAM_OK);
	ck_assert(scram_client_handle_final(&y.cli, y.buf2, y.n2));

	/* A different server signature is refused by the client. */
	memset(&x, 0, sizeof(x));
	ck_assert_int_eq(run_exchange(&x, &secret, "correct horse"), SCRAM_OK);
	x.buf2[2] = (x.buf2[2] == 'A') ? 'B' : 'A';
	ck_assert(!scram_client_handle_final(&x.cli, x.buf2, x.n2));
}
END_TEST

START_TEST(test_wrong_password)
{
	struct exchange x;
	struct scram_secret secret;
	uint8_t salt[16];

	memset(&x, 0, sizeof(x));
	ck_assert(pg_random_bytes(salt, sizeof(salt)));
	ck_assert(scram_secret_from_password("correct horse", salt, sizeof(salt), 4096, &secret));
	ck_assert_int_eq(run_exchange(&x, &secret, "correct horsf"), SCRAM_BAD_PROOF);
	ck_assert_str_eq(x.buf2, "");
	ck_assert_uint_eq(x.n2, 0);
	ck_assert_int_eq(x.srv.step, SCRAM_SERVER_DONE);

	/* Wrong keys in pass-through, too. */
	memset(&x, 0, sizeof(x));
	x.cli.have_keys = true;
	memset(x.cli.client_key, 7, SCRAM_KEY_LEN);
	memcpy(x.cli.server_key, secret.server_key, SCRAM_KEY_LEN);
	ck_assert_int_eq(run_exchange(&x, &secret, NULL), SCRAM_BAD_PROOF);
}
END_TEST

/* ---- malformed input ---- */

START_TEST(test_server_first_malformed)
{
	static const char *const bad[] = {
		"",
		"n",
		"n,",
		"n,,",
		"n,,n=user",
		"n,,n=user,",
		"n,,n=user,r=",
		"n,,n=user,r",
		"n,,r=abc",
		"n,,r=abc,n=user",
		"p=tls-server-end-point,,n=user,r=abc",
		"p,,n=user,r=abc",
		"x,,n=user,r=abc",
		"N,,n=user,r=abc",
		"n,a=admin,n=user,r=abc",
		"y,a=admin,n=user,r=abc",
		"n,,m=ext,n=user,r=abc",
		"n,,n=user,r=ab c",
		"n,,n=user,r=abc\x01",
		"n,,n=user,r=abc,",
		"n,,n=user,r=abc,=x",
		"n,,n=user,r=abc,xx",
		"n,,n=user;r=abc",
		"n,,user,r=abc",
	};
	struct scram_secret secret;
	struct scram_server st;
	char out[BUFSZ];
	size_t n;

	rfc_secret(&secret);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		scram_server_init(&st, &secret);
		ck_assert_msg(!scram_server_handle_first_with_nonce(&st, bad[i], strlen(bad[i]),
								    RFC_SERVER_NONCE, out, sizeof(out), &n),
			      "accepted \"%s\"", bad[i]);
		ck_assert_int_ne(st.step, SCRAM_SERVER_WANT_FINAL);
		/* and the exchange cannot go on */
		ck_assert_int_eq(scram_server_handle_final(&st, RFC_CLIENT_FINAL, strlen(RFC_CLIENT_FINAL),
							   out, sizeof(out), &n), SCRAM_MALFORMED);
	}

	/* Embedded NUL, counted in len. */
	scram_server_init(&st, &secret);
	ck_assert(!scram_server_handle_first_with_nonce(&st, "n,,n=u\0,r=abc", 14, RFC_SERVER_NONCE,
							out, sizeof(out), &n));

	/* Over SCRAM_MAX_MESSAGE. */
	char big[SCRAM_MAX_MESSAGE + 2];
	memset(big, 'a', sizeof(big));
	memcpy(big, "n,,n=,r=", 8);
	scram_server_init(&st, &secret);
	ck_assert(!scram_server_handle_first_with_nonce(&st, big, SCRAM_MAX_MESSAGE + 1,
							RFC_SERVER_NONCE, out, sizeof(out), &n));
	/* At the limit the message is read, but the reply would not fit. */
	scram_server_init(&st, &secret);
	ck_assert(!scram_server_handle_first_with_nonce(&st, big, SCRAM_MAX_MESSAGE,
							RFC_SERVER_NONCE, out, sizeof(out), &n));

	/* A valid message: extensions after the nonce are ignored; len bounds the read. */
	const char *ext = "n,,n=user,r=" RFC_CLIENT_NONCE ",x=ext,y=2";
	scram_server_init(&st, &secret);
	ck_assert(scram_server_handle_first_with_nonce(&st, ext, strlen(ext), RFC_SERVER_NONCE,
						       out, sizeof(out), &n));
	ck_assert_str_eq(out, RFC_SERVER_FIRST);
	scram_server_init(&st, &secret);
	ck_assert(scram_server_handle_first_with_nonce(&st, ext, strlen(RFC_CLIENT_FIRST),
						       RFC_SERVER_NONCE, out, sizeof(out), &n));
	ck_assert_str_eq(st.client_first_bare, "n=user,r=" RFC_CLIENT_NONCE);

	/* Output buffer too small. */
	scram_server_init(&st, &secret);
	ck_assert(!scram_server_handle_first_with_nonce(&st, RFC_CLIENT_FIRST, strlen(RFC_CLIENT_FIRST),
							RFC_SERVER_NONCE, out, 20, &n));
	/* A second first-message is refused. */
	rfc_server_after_first(&st);
	ck_assert(!scram_server_handle_first_with_nonce(&st, RFC_CLIENT_FIRST, strlen(RFC_CLIENT_FIRST),
							RFC_SERVER_NONCE, out, sizeof(out), &n));
	/* A secret without salt cannot serve. */
	memset(&secret, 0, sizeof(secret));
	scram_server_init(&st, &secret);
	ck_assert(!scram_server_handle_first_with_nonce(&st, RFC_CLIENT_FIRST, strlen(RFC_CLIENT_FIRST),
							RFC_SERVER_NONCE, out, sizeof(out), &n));
}
END_TEST

START_TEST(test_server_final_malformed)
{
	static const char *const bad[] = {
		"",
		"c",
		"c=biws",
		"c=biws,",
		RFC_CLIENT_FINAL_WO_PROOF,
		RFC_CLIENT_FINAL_WO_PROOF ",",
		RFC_CLIENT_FINAL_WO_PROOF ",p=",
		RFC_CLIENT_FINAL_WO_PROOF ",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ",
		RFC_CLIENT_FINAL_WO_PROOF ",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndV*=",
		RFC_CLIENT_FINAL_WO_PROOF ",p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
		RFC_CLIENT_FINAL_WO_PROOF ",p=" RFC_PROOF "AAAA",
		RFC_CLIENT_FINAL ",",
		RFC_CLIENT_FINAL ",x=1",
		RFC_CLIENT_FINAL ",p=" RFC_PROOF,
		"c=biws,r=" RFC_CLIENT_NONCE ",p=" RFC_PROOF,
		"c=biws,r=" RFC_NONCE "x,p=" RFC_PROOF,
		"c=biws,r=,p=" RFC_PROOF,
		"c=biws,p=" RFC_PROOF,
		"c=eSws,r=" RFC_NONCE ",p=" RFC_PROOF,
		"c=cD10bHMtc2VydmVyLWVuZC1wb2ludCws,r=" RFC_NONCE ",p=" RFC_PROOF,
		"c=biw*,r=" RFC_NONCE ",p=" RFC_PROOF,
		"c=biws=,r=" RFC_NONCE ",p=" RFC_PROOF,
		"c=,r=" RFC_NONCE ",p=" RFC_PROOF,
		"r=" RFC_NONCE ",c=biws,p=" RFC_PROOF,
		"p=" RFC_PROOF ",c=biws,r=" RFC_NONCE,
		"C=biws,r=" RFC_NONCE ",p=" RFC_PROOF,
	};
	struct scram_server st;
	char out[BUFSZ];
	size_t n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rfc_server_after_first(&st);
		ck_assert_msg(scram_server_handle_final(&st, bad[i], strlen(bad[i]), out, sizeof(out), &n)
			      == SCRAM_MALFORMED, "not malformed: \"%s\"", bad[i]);
		ck_assert_str_eq(out, "");
		ck_assert_int_eq(st.step, SCRAM_SERVER_DONE);
	}

	/* Truncated at every length. */
	for (size_t len = 0; len < strlen(RFC_CLIENT_FINAL); len++) {
		rfc_server_after_first(&st);
		ck_assert_int_ne(scram_server_handle_final(&st, RFC_CLIENT_FINAL, len, out, sizeof(out), &n),
				 SCRAM_OK);
	}

	/* Embedded NUL and oversize. */
	char buf[SCRAM_MAX_MESSAGE + 2];
	memcpy(buf, RFC_CLIENT_FINAL, sizeof(RFC_CLIENT_FINAL));
	rfc_server_after_first(&st);
	ck_assert_int_eq(scram_server_handle_final(&st, buf, sizeof(RFC_CLIENT_FINAL), out, sizeof(out), &n),
			 SCRAM_MALFORMED);
	memset(buf, 'x', sizeof(buf));
	memcpy(buf, RFC_CLIENT_FINAL, strlen(RFC_CLIENT_FINAL));
	buf[strlen(RFC_CLIENT_FINAL)] = ',';
	buf[strlen(RFC_CLIENT_FINAL) + 1] = 'x';
	buf[strlen(RFC_CLIENT_FINAL) + 2] = '=';
	rfc_server_after_first(&st);
	ck_assert_int_eq(scram_server_handle_final(&st, buf, SCRAM_MAX_MESSAGE + 1, out, sizeof(out), &n),
			 SCRAM_MALFORMED);

	/* Well-formed but wrong: a tampered proof, or an extension that
	 * changes the AuthMessage. */
	const char *tampered = RFC_CLIENT_FINAL_WO_PROOF ",p=eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
	rfc_server_after_first(&st);
	ck_assert_int_eq(scram_server_handle_final(&st, tampered, strlen(tampered), out, sizeof(out), &n),
			 SCRAM_BAD_PROOF);
	const char *ext = RFC_CLIENT_FINAL_WO_PROOF ",x=ext,p=" RFC_PROOF;
	rfc_server_after_first(&st);
	ck_assert_int_eq(scram_server_handle_final(&st, ext, strlen(ext), out, sizeof(out), &n),
			 SCRAM_BAD_PROOF);

	/* Final before first. */
	struct scram_secret secret;
	rfc_secret(&secret);
	scram_server_init(&st, &secret);
	ck_assert_int_eq(scram_server_handle_final(&st, RFC_CLIENT_FINAL, strlen(RFC_CLIENT_FINAL),
						   out, sizeof(out), &n), SCRAM_MALFORMED);
	/* Output too small for the server-final-message. */
	rfc_server_after_first(&st);
	ck_assert_int_eq(scram_server_handle_final(&st, RFC_CLIENT_FINAL, strlen(RFC_CLIENT_FINAL),
						   out, 10, &n), SCRAM_MALFORMED);
}
END_TEST

START_TEST(test_client_first_format)
{
	static const uint8_t zero[SCRAM_NONCE_RAW_LEN];
	struct scram_client c;
	char out[BUFSZ];
	size_t n;

	memset(&c, 0, sizeof(c));
	ck_assert(scram_client_first(&c, "pw", zero, out, sizeof(out), &n));
	ck_assert_str_eq(out, "n,,n=,r=AAAAAAAAAAAAAAAAAAAAAAAA");
	ck_assert_int_eq(c.step, SCRAM_CLIENT_SENT_FIRST);
	ck_assert(scram_client_first_with_user(&c, "pw", "a,b=c", "xyz", out, sizeof(out), &n));
	ck_assert_str_eq(out, "n,,n=a=2Cb=3Dc,r=xyz");
	ck_assert_str_eq(c.client_first_bare, "n=a=2Cb=3Dc,r=xyz");
	/* Bad nonces and a too small buffer. */
	ck_assert(!scram_client_first_with_nonce(&c, "pw", "", out, sizeof(out), &n));
	ck_assert(!scram_client_first_with_nonce(&c, "pw", "a,b", out, sizeof(out), &n));
	ck_assert(!scram_client_first_with_nonce(&c, "pw", "a b", out, sizeof(out), &n));
	ck_assert(!scram_client_first_with_nonce(&c, "pw",
		"0123456789012345678901234567890123456789012345678901234567890123", out, sizeof(out), &n));
	ck_assert(!scram_client_first_with_nonce(&c, "pw", "abc", out, 10, &n));
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(test_client_server_first_malformed)
{
	static const char *const bad[] = {
		"",
		"r=",
		"r=" RFC_NONCE,
		"r=" RFC_NONCE ",s=" RFC_SALT,
		"r=" RFC_NONCE ",s=" RFC_SALT ",i=",
		"r=" RFC_NONCE ",s=" RFC_SALT ",i=0",
		"r=" RFC_NONCE ",s=" RFC_SALT ",i=-1",
		"r=" RFC_NONCE ",s=" RFC_SALT ",i=04096",
		"r=" RFC_NONCE ",s=" RFC_SALT ",i=4096x",
		"r=" RFC_NONCE ",s=" RFC_SALT ",i=abc",
		"r=" RFC_NONCE ",s=" RFC_SALT ",i=10000001",
		"r=" RFC_NONCE ",s=" RFC_SALT ",i=2147483648",
		"r=" RFC_NONCE ",s=" RFC_SALT ",i=4096,",
		"r=" RFC_NONCE ",s=" RFC_SALT ",i=4096,x=ext",
		"r=" RFC_NONCE ",s=W22ZaJ0SNY7soEsUEjb6gQ=,i=4096",
		"r=" RFC_NONCE ",s=W22ZaJ0SNY7soEsUEjb6g*==,i=4096",
		"r=" RFC_NONCE ",s=,i=4096",
		"r=" RFC_NONCE ",i=4096",
		"r=" RFC_NONCE ",i=4096,s=" RFC_SALT,
		"s=" RFC_SALT ",r=" RFC_NONCE ",i=4096",
		"r=" RFC_CLIENT_NONCE ",s=" RFC_SALT ",i=4096",
		"r=xOprNGfwEbeRWgbNEkqO" RFC_SERVER_NONCE ",s=" RFC_SALT ",i=4096",
		"r=rOprNGfwEbeRWgbNEkq,s=" RFC_SALT ",i=4096",
		"r=" RFC_NONCE " x,s=" RFC_SALT ",i=4096",
		"m=ext,r=" RFC_NONCE ",s=" RFC_SALT ",i=4096",
		"e=other-error",
	};
	struct scram_client c;
	char out[BUFSZ];
	size_t n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&c, 0, sizeof(c));
		ck_assert(scram_client_first_with_user(&c, RFC_PASSWORD, "user", RFC_CLIENT_NONCE,
						       out, sizeof(out), &n));
		ck_assert_msg(!scram_client_handle_first(&c, bad[i], strlen(bad[i]), out, sizeof(out), &n),
			      "accepted \"%s\"", bad[i]);
		ck_assert_str_eq(out, "");
		ck_assert(!scram_client_handle_final(&c, RFC_SERVER_FINAL, strlen(RFC_SERVER_FINAL)));
	}

	/* Truncated (up to "i=": "i=4" and on are valid messages), embedded NUL,
	 * oversize, out of order calls. */
	for (size_t len = 0; len < strlen(RFC_SERVER_FIRST) - 3; len++) {
		memset(&c, 0, sizeof(c));
		ck_assert(scram_client_first_with_user(&c, RFC_PASSWORD, "user", RFC_CLIENT_NONCE,
						       out, sizeof(out), &n));
		ck_assert(!scram_client_handle_first(&c, RFC_SERVER_FIRST, len, out, sizeof(out), &n));
	}
	memset(&c, 0, sizeof(c));
	ck_assert(scram_client_first_with_user(&c, RFC_PASSWORD, "user", RFC_CLIENT_NONCE,
					       out, sizeof(out), &n));
	ck_assert(!scram_client_handle_first(&c, RFC_SERVER_FIRST, sizeof(RFC_SERVER_FIRST), out,
					     sizeof(out), &n));

	char big[SCRAM_MAX_MESSAGE + 1];
	memset(big, 'A', sizeof(big));
	memcpy(big, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST));
	big[strlen(RFC_SERVER_FIRST)] = ',';
	big[strlen(RFC_SERVER_FIRST) + 1] = 'x';
	big[strlen(RFC_SERVER_FIRST) + 2] = '=';
	memset(&c, 0, sizeof(c));
	ck_assert(scram_client_first_with_user(&c, RFC_PASSWORD, "user", RFC_CLIENT_NONCE,
					       out, sizeof(out), &n));
	ck_assert(!scram_client_handle_first(&c, big, sizeof(big), out, sizeof(out), &n));

	memset(&c, 0, sizeof(c));
	ck_assert(!scram_client_handle_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST), out,
					     sizeof(out), &n));
	ck_assert(!scram_client_handle_final(&c, RFC_SERVER_FINAL, strlen(RFC_SERVER_FINAL)));
}
END_TEST

START_TEST(test_client_server_final_malformed)
{
	static const char *const bad[] = {
		"",
		"v=",
		"e=invalid-proof",
		"e=other-error",
		"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4",
		"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=,",
		"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=,x=1",
		"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
		"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",
		"V=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
		"x=1,v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
	};
	struct scram_client c;
	char out[BUFSZ];
	size_t n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&c, 0, sizeof(c));
		ck_assert(scram_client_first_with_user(&c, RFC_PASSWORD, "user", RFC_CLIENT_NONCE,
						       out, sizeof(out), &n));
		ck_assert(scram_client_handle_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST),
						    out, sizeof(out), &n));
		ck_assert_msg(!scram_client_handle_final(&c, bad[i], strlen(bad[i])),
			      "accepted \"%s\"", bad[i]);
		/* no second chance */
		ck_assert(!scram_client_handle_final(&c, RFC_SERVER_FINAL, strlen(RFC_SERVER_FINAL)));
	}
}
END_TEST

/* ---- SASLprep (RFC 4013), as PostgreSQL applies it ---- */

/* What saslprep_password makes of in: want (NULL: in itself) and how. */
static void expect_prep(const char *in, const char *want, enum saslprep_result how)
{
	char *out = NULL;
	enum saslprep_result r = saslprep_password(in, &out);
	ck_assert_ptr_nonnull(out);
	ck_assert_msg(r == how, "%s: result %d, expected %d", in, (int)r, (int)how);
	ck_assert_msg(strcmp(out, want ? want : in) == 0, "%s: got %s", in, out);
	free(out);
}

START_TEST(test_saslprep_cases)
{
	/* U+2168 ROMAN NUMERAL NINE: NFKC makes it "IX". */
	expect_prep("IX-\xe2\x85\xa8", "IX-IX", SASLPREP_NORMALISED);
	/* U+00AD SOFT HYPHEN is mapped to nothing; U+00A0 NO-BREAK SPACE to a space. */
	expect_prep("pass\xc2\xad" "word", "password", SASLPREP_NORMALISED);
	expect_prep("a\xc2\xa0" "b", "a b", SASLPREP_NORMALISED);
	/* ASCII as it is, a control character too (PostgreSQL's quick path). */
	expect_prep("IX-IX", NULL, SASLPREP_NORMALISED);
	expect_prep("a\x01" "b", NULL, SASLPREP_NORMALISED);
	/* Not UTF-8: a stray byte, a shorter form than needed, a surrogate,
	 * past U+10FFFF, a truncated sequence: raw bytes. */
	expect_prep("a\xff" "b", NULL, SASLPREP_RAW);
	expect_prep("\xc0\xaf", NULL, SASLPREP_RAW);
	expect_prep("\xed\xa0\x80", NULL, SASLPREP_RAW);
	expect_prep("\xf4\x90\x80\x80", NULL, SASLPREP_RAW);
	expect_prep("a\xe2\x85", NULL, SASLPREP_RAW);
	/* Prohibited: private use U+E000, non-ASCII control U+0080. */
	expect_prep("a\xee\x80\x80" "b", NULL, SASLPREP_RAW);
	expect_prep("a\xc2\x80" "b", NULL, SASLPREP_RAW);
	/* Unassigned in Unicode 3.2 (U+0221). */
	expect_prep("a\xc8\xa1", NULL, SASLPREP_RAW);
	/* Nothing left once mapped: raw. */
	expect_prep("\xc2\xad", NULL, SASLPREP_RAW);
	/* Checked before normalisation, as PostgreSQL does: U+0340 is
	 * prohibited although its NFKC form U+0300 is not... */
	expect_prep("a\xcd\x80" "b", NULL, SASLPREP_RAW);
	/* ...and alef, U+2122 (neutral), alef passes the bidi rules although
	 * its NFKC form, alef "TM" alef, would not. */
	expect_prep("\xd7\x90\xe2\x84\xa2\xd7\x90", "\xd7\x90" "TM" "\xd7\x90", SASLPREP_NORMALISED);
	/* Right-to-left with left-to-right: raw. */
	expect_prep("\xd7\x90" "a" "\xd7\x90", NULL, SASLPREP_RAW);
}
END_TEST

/* Verifiers PostgreSQL 15 made (CREATE ROLE ... PASSWORD, password_encryption
 * scram-sha-256) for passwords SASLprep changes or refuses: the same
 * password and salt must give the same keys here. */
static const struct {
	const char *password, *verifier;
} pg_made[] = {
	{ "IX-\xe2\x85\xa8", "SCRAM-SHA-256$4096:1DEC6UMLFjfim8bxpywXIw==$jspqqjvubQK6RsMlMADD5BdU99+Swfa2SVNXnk0bqF4="
			     ":yUu9Bjjn9h7q/PHalzVshO4dweptducOle60AdQetRA=" },
	{ "pass\xc2\xad" "word", "SCRAM-SHA-256$4096:NUdlF7D3UQQM86Ubf5zYBA==$A2ZJl0Nx4ZxQF6LbqjXbABMmzcb34AKu+SwZKWRJsoE="
				 ":gcOGhegYiM/QPIxmeQM7i4/4pFS+3CsVDDhQqvao64k=" },
	{ "\xc2\xad", "SCRAM-SHA-256$4096:yMPpe1riisO33ialdAavkw==$qLaZrwtcLNE0jkAeArToWlxpXYqGBARO0YwpUe/KUV0="
		      ":AUDYRmI488Enk8gXOPlD6mwxQpuHVMvGFjpb0mUbpYw=" },
	{ "a\xcd\x80" "b", "SCRAM-SHA-256$4096:/ynQYaB7k463sHnsslnZVg==$UVxZTMXis4pSRma4+sbaa2zJrmmKGUYsB8viQHJup5M="
			   ":IniP26UnBaM/G8woLQzmpaod9gyt/phB18oNZ3TpR5E=" },
	{ "\xd7\x90\xe2\x84\xa2\xd7\x90",
	  "SCRAM-SHA-256$4096:Jzlxll+AcU3lvb/p3MkPCg==$BE3X7Puz4GExduKrOH4VCmji2dXP2f21GsPPMS05Nms="
	  ":ZS2Uz4uGJL5ZDGKNgzHqQWFic4WOLl61Gshvjmw3Ceg=" },
	{ "a\xc2\xa0" "b", "SCRAM-SHA-256$4096:JV8HKGdIQhsJr15Qzn680A==$cAllDlta5hYa6rvm7IkFIP+o1X5HKsz0jc2BLfRA+bA="
			   ":GAc7Z2J3FaxLmL4k0+rGHEv/afKeJLKUQzuaeXEnHYc=" },
	{ "a\xee\x80\x80" "b", "SCRAM-SHA-256$4096:Qu5wPDyb5WD2R8xP+XBmxA==$DzIdlNP/oi5R0Cin9FetrnouwpnGF8U0koa+1+YOqOA="
			       ":w8tBWi+wXyXME816cJgLhjtzTxOOCm1PPgLlffWtwUk=" },
};

START_TEST(test_saslprep_postgres_verifiers)
{
	for (size_t i = 0; i < sizeof pg_made / sizeof pg_made[0]; i++) {
		struct scram_secret pg, ours;
		ck_assert(scram_secret_parse(pg_made[i].verifier, &pg));
		ck_assert(scram_secret_from_password(pg_made[i].password, pg.salt, pg.salt_len, pg.iterations, &ours));
		ck_assert_msg(memcmp(ours.stored_key, pg.stored_key, SCRAM_KEY_LEN) == 0 &&
				      memcmp(ours.server_key, pg.server_key, SCRAM_KEY_LEN) == 0,
			      "case %zu: not the keys PostgreSQL derived", i);
	}
	/* And the NFKC-equivalent ASCII password matches the first one too. */
	struct scram_secret pg, ours;
	ck_assert(scram_secret_parse(pg_made[0].verifier, &pg));
	ck_assert(scram_secret_from_password("IX-IX", pg.salt, pg.salt_len, pg.iterations, &ours));
	ck_assert(memcmp(ours.stored_key, pg.stored_key, SCRAM_KEY_LEN) == 0);
}
END_TEST

/* ---- PBKDF2 ---- */

START_TEST(test_salted_password_matches_openssl)
{
	char longpw[201];
	memset(longpw, 'p', sizeof longpw - 1);
	longpw[sizeof longpw - 1] = '\0';
	static const size_t pwlens[] = { 0, 1, 63, 64, 65, 200 };
	static const size_t saltlens[] = { 1, 16, SCRAM_MAX_SALT_LEN };
	static const int iters[] = { 1, 2, 4096, 65537 };
	uint8_t salt[SCRAM_MAX_SALT_LEN];
	for (size_t i = 0; i < sizeof salt; i++)
		salt[i] = (uint8_t)(i * 7 + 1);
	for (size_t a = 0; a < sizeof pwlens / sizeof *pwlens; a++)
		for (size_t b = 0; b < sizeof saltlens / sizeof *saltlens; b++)
			for (size_t c = 0; c < sizeof iters / sizeof *iters; c++) {
				char pw[sizeof longpw];
				memcpy(pw, longpw, pwlens[a]);
				pw[pwlens[a]] = '\0';
				uint8_t ours[SCRAM_KEY_LEN], theirs[SCRAM_KEY_LEN];
				ck_assert(scram_salted_password(pw, salt, saltlens[b], iters[c], NULL, ours));
				ck_assert(PKCS5_PBKDF2_HMAC(pw, (int)pwlens[a], salt, (int)saltlens[b], iters[c],
							    EVP_sha256(), SCRAM_KEY_LEN, theirs) == 1);
				ck_assert_msg(memcmp(ours, theirs, SCRAM_KEY_LEN) == 0,
					      "password %zu bytes, salt %zu, %d iterations", pwlens[a], saltlens[b],
					      iters[c]);
			}
	uint8_t out[SCRAM_KEY_LEN];
	ck_assert(!scram_salted_password("pw", salt, 16, 0, NULL, out));
	ck_assert(!scram_salted_password("pw", salt, 16, SCRAM_MAX_ITERATIONS + 1, NULL, out));
}
END_TEST

START_TEST(test_salted_password_stop)
{
	static const uint8_t salt[16] = { 9 };
	uint8_t out[SCRAM_KEY_LEN];
	atomic_bool stop;
	atomic_init(&stop, true);
	/* Looked at every 65,536 rounds: a shorter derivation ends anyway. */
	ck_assert(scram_salted_password("pw", salt, sizeof salt, 65536, &stop, out));
	ck_assert(!scram_salted_password("pw", salt, sizeof salt, SCRAM_MAX_ITERATIONS, &stop, out));
	atomic_store(&stop, false);
	ck_assert(scram_salted_password("pw", salt, sizeof salt, 65537, &stop, out));
}
END_TEST

/* The client's two steps with the SaltedPassword derived in between give
 * RFC 7677's client-final, as the one-step call does. */
START_TEST(test_client_two_steps)
{
	struct scram_client c;
	char out[BUFSZ];
	size_t n;
	memset(&c, 0, sizeof(c));
	ck_assert(scram_client_first_with_user(&c, RFC_PASSWORD, "user", RFC_CLIENT_NONCE, out, sizeof(out), &n));
	ck_assert(scram_client_read_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST)));
	ck_assert_int_eq(c.step, SCRAM_CLIENT_GOT_FIRST);
	ck_assert_int_eq(c.iterations, 4096);
	ck_assert_uint_eq(c.salt_len, 16);
	/* Not twice, and not the final before its keys' turn. */
	ck_assert(!scram_client_handle_final(&c, RFC_SERVER_FINAL, strlen(RFC_SERVER_FINAL)));
	uint8_t salted[SCRAM_KEY_LEN];
	ck_assert(scram_salted_password(RFC_PASSWORD, c.salt, c.salt_len, c.iterations, NULL, salted));
	memset(&c, 0, sizeof(c));
	ck_assert(scram_client_first_with_user(&c, RFC_PASSWORD, "user", RFC_CLIENT_NONCE, out, sizeof(out), &n));
	ck_assert(scram_client_read_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST)));
	ck_assert(!scram_client_read_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST)));   /* out of turn: over */
	memset(&c, 0, sizeof(c));
	ck_assert(scram_client_first_with_user(&c, RFC_PASSWORD, "user", RFC_CLIENT_NONCE, out, sizeof(out), &n));
	ck_assert(scram_client_read_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST)));
	ck_assert(!scram_client_write_final(&c, NULL, out, sizeof(out), &n));   /* password mode needs the key */
	memset(&c, 0, sizeof(c));
	ck_assert(scram_client_first_with_user(&c, RFC_PASSWORD, "user", RFC_CLIENT_NONCE, out, sizeof(out), &n));
	ck_assert(scram_client_read_first(&c, RFC_SERVER_FIRST, strlen(RFC_SERVER_FIRST)));
	ck_assert(scram_client_write_final(&c, salted, out, sizeof(out), &n));
	ck_assert_str_eq(out, RFC_CLIENT_FINAL);
	ck_assert(scram_client_handle_final(&c, RFC_SERVER_FINAL, strlen(RFC_SERVER_FINAL)));
}
END_TEST

Suite *scram_suite(void)
{
	Suite *s = suite_create("scram");
	TCase *tc;

	tc = tcase_create("base64");
	tcase_add_test(tc, test_b64_vectors);
	tcase_add_test(tc, test_b64_round_trip);
	tcase_add_test(tc, test_b64_rejects);
	suite_add_tcase(s, tc);

	tc = tcase_create("secret");
	tcase_add_test(tc, test_secret_postgres_verifier);
	tcase_add_test(tc, test_secret_rejects);
	tcase_add_test(tc, test_secret_check_salted);
	tcase_add_test(tc, test_secret_from_password_bounds);
	suite_add_tcase(s, tc);

	tc = tcase_create("exchange");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_rfc7677_client);
	tcase_add_test(tc, test_rfc7677_server);
	tcase_add_test(tc, test_rfc7677_pass_through);
	tcase_add_test(tc, test_server_gs2_y);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_wrong_password);
	tcase_add_test(tc, test_client_two_steps);
	suite_add_tcase(s, tc);

	tc = tcase_create("saslprep");
	tcase_add_test(tc, test_saslprep_cases);
	tcase_add_test(tc, test_saslprep_postgres_verifiers);
	suite_add_tcase(s, tc);

	tc = tcase_create("pbkdf2");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_salted_password_matches_openssl);
	tcase_add_test(tc, test_salted_password_stop);
	suite_add_tcase(s, tc);

	tc = tcase_create("malformed");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_server_first_malformed);
	tcase_add_test(tc, test_server_final_malformed);
	tcase_add_test(tc, test_client_first_format);
	tcase_add_test(tc, test_client_server_first_malformed);
	tcase_add_test(tc, test_client_server_final_malformed);
	suite_add_tcase(s, tc);
	return s;
}
