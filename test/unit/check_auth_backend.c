/* SPDX-License-Identifier: MIT */
/* Unit tests for auth_backend: pgcat's answers to a server's AuthenticationRequest. */
#include "check_suites.h"

#include <string.h>

#include "auth_backend.h"
#include "auth_md5.h"
#include "proto.h"

/* See check_md5.c: "md5" + md5("secret" "app"), and its answer to salt 1 2 3 4. */
#define STORED_SECRET_APP "md56a422f785c9e20873908ce25d1736ae2"
#define RESPONSE_1234 "md5911f527656472583a006e7727877b33e"

struct ab_fixture {
	struct auth_backend ab;
	uint8_t storage[AUTH_BACKEND_MAX_MESSAGE];
	struct pktbuf pb;
	const char *error;
};

static enum auth_backend_result ab_run(struct ab_fixture *f, const struct auth_backend_secret *sec,
				       const uint8_t *body, size_t len)
{
	pktbuf_init(&f->pb, f->storage, sizeof f->storage);
	return auth_backend_answer(&f->ab, sec, body, len, &f->pb, &f->error);
}

/* An 'R' body: the request code, then extra bytes. */
static size_t ab_request(uint8_t *out, uint32_t code, const void *extra, size_t extra_len)
{
	out[0] = (uint8_t)(code >> 24);
	out[1] = (uint8_t)(code >> 16);
	out[2] = (uint8_t)(code >> 8);
	out[3] = (uint8_t)code;
	if (extra_len)
		memcpy(out + 4, extra, extra_len);
	return 4 + extra_len;
}

/* The one message in f->pb is a 'p' whose body is exactly want (want_len bytes). */
static void ab_expect_p(const struct ab_fixture *f, const void *want, size_t want_len)
{
	ck_assert(!f->pb.failed);
	ck_assert_uint_eq(f->pb.len, 5 + want_len);
	ck_assert_int_eq(f->pb.data[0], 'p');
	ck_assert_uint_eq(proto_get_u32(f->pb.data + 1), 4 + want_len);
	ck_assert(memcmp(f->pb.data + 5, want, want_len) == 0);
}

START_TEST(test_backend_ok)
{
	struct ab_fixture f = { 0 };
	const struct auth_backend_secret sec = { .user = "app", .password = "secret" };
	uint8_t body[8];
	ck_assert_int_eq(ab_run(&f, &sec, body, ab_request(body, AUTH_REQ_OK, NULL, 0)), AUTH_BACKEND_DONE);
	ck_assert_uint_eq(f.pb.len, 0);
	ck_assert_ptr_null(f.error);
	auth_backend_clear(&f.ab);
}
END_TEST

START_TEST(test_backend_cleartext)
{
	struct ab_fixture f = { 0 };
	uint8_t body[8];
	size_t len = ab_request(body, AUTH_REQ_PASSWORD, NULL, 0);
	const struct auth_backend_secret sec = { .user = "app", .password = "secret" };
	ck_assert_int_eq(ab_run(&f, &sec, body, len), AUTH_BACKEND_CONTINUE);
	ab_expect_p(&f, "secret", 7);
	/* The longest password PgBouncer takes fits; one byte more does not. */
	char longest[AUTH_BACKEND_MAX_PASSWORD + 2];
	memset(longest, 'a', sizeof longest - 1);
	longest[AUTH_BACKEND_MAX_PASSWORD] = '\0';
	const struct auth_backend_secret long_sec = { .user = "longpass", .password = longest };
	ck_assert_int_eq(ab_run(&f, &long_sec, body, len), AUTH_BACKEND_CONTINUE);
	ab_expect_p(&f, longest, AUTH_BACKEND_MAX_PASSWORD + 1);
	longest[AUTH_BACKEND_MAX_PASSWORD] = 'a';
	longest[AUTH_BACKEND_MAX_PASSWORD + 1] = '\0';
	ck_assert_int_eq(ab_run(&f, &long_sec, body, len), AUTH_BACKEND_FAILED);
	ck_assert_str_eq(f.error, "password too long");

	/* Neither a hash nor a verifier can be sent as the password. */
	const char *unusable[] = { NULL, "", STORED_SECRET_APP, "SCRAM-SHA-256$4096:c2FsdA==$a2V5:a2V5" };
	for (size_t i = 0; i < sizeof unusable / sizeof unusable[0]; i++) {
		const struct auth_backend_secret bad = { .user = "app", .password = unusable[i] };
		ck_assert_int_eq(ab_run(&f, &bad, body, len), AUTH_BACKEND_FAILED);
		ck_assert_str_eq(f.error, "server asks for a cleartext password, and pgcat has none for this user");
	}
	auth_backend_clear(&f.ab);
}
END_TEST

START_TEST(test_backend_md5)
{
	struct ab_fixture f = { 0 };
	static const uint8_t salt[4] = { 1, 2, 3, 4 };
	uint8_t body[16];
	size_t len = ab_request(body, AUTH_REQ_MD5, salt, sizeof salt);

	/* From the plaintext password, hashed with the user name. */
	const struct auth_backend_secret plain = { .user = "app", .password = "secret" };
	ck_assert_int_eq(ab_run(&f, &plain, body, len), AUTH_BACKEND_CONTINUE);
	ab_expect_p(&f, RESPONSE_1234, sizeof RESPONSE_1234);

	/* From the stored hash, as it is. */
	const struct auth_backend_secret stored = { .user = "other", .password = STORED_SECRET_APP };
	ck_assert_int_eq(ab_run(&f, &stored, body, len), AUTH_BACKEND_CONTINUE);
	ab_expect_p(&f, RESPONSE_1234, sizeof RESPONSE_1234);

	/* A SCRAM verifier cannot answer md5; nor can a salt of the wrong length. */
	const struct auth_backend_secret scram = { .user = "app", .password = "SCRAM-SHA-256$4096:c2FsdA==$a2V5:a2V5" };
	ck_assert_int_eq(ab_run(&f, &scram, body, len), AUTH_BACKEND_FAILED);
	ck_assert_str_eq(f.error, "server asks for an md5 password, and pgcat has none for this user");
	ck_assert_int_eq(ab_run(&f, &plain, body, len - 1), AUTH_BACKEND_FAILED);
	ck_assert_str_eq(f.error, "server asks for an md5 password, and pgcat has none for this user");
	auth_backend_clear(&f.ab);
}
END_TEST

START_TEST(test_backend_sasl_without_scram)
{
	struct ab_fixture f = { 0 };
	static const char mechs[] = "SCRAM-SHA-256-PLUS\0OAUTHBEARER\0";   /* with the final empty name */
	uint8_t body[64];
	size_t len = ab_request(body, AUTH_REQ_SASL, mechs, sizeof mechs);
	const struct auth_backend_secret sec = { .user = "app", .password = "secret" };
	ck_assert_int_eq(ab_run(&f, &sec, body, len), AUTH_BACKEND_FAILED);
	ck_assert_str_eq(f.error, "server offers no SASL mechanism pgcat supports");
	auth_backend_clear(&f.ab);
}
END_TEST

START_TEST(test_backend_sasl_credentials)
{
	struct ab_fixture f = { 0 };
	static const char mechs[] = "SCRAM-SHA-256\0";
	uint8_t body[64];
	size_t len = ab_request(body, AUTH_REQ_SASL, mechs, sizeof mechs);
	const struct auth_backend_secret md5 = { .user = "app", .password = STORED_SECRET_APP };
	ck_assert_int_eq(ab_run(&f, &md5, body, len), AUTH_BACKEND_FAILED);
	ck_assert_str_eq(f.error, "server asks for SCRAM, and pgcat has no plaintext password for this user");
	/* A verifier alone is not enough until a client has passed its key. */
	const struct auth_backend_secret verifier = { .user = "app", .password = "SCRAM-SHA-256$4096:c2FsdA==$a2V5:a2V5" };
	ck_assert_int_eq(ab_run(&f, &verifier, body, len), AUTH_BACKEND_FAILED);
	ck_assert(strstr(f.error, "no client has logged in with it yet") != NULL);
	auth_backend_clear(&f.ab);
}
END_TEST

/* The whole exchange against auth_scram's server side, with the password. */
START_TEST(test_backend_scram_exchange)
{
	struct ab_fixture f = { 0 };
	static const uint8_t salt[16] = { 7, 7, 7 };
	struct scram_secret secret;
	ck_assert(scram_secret_from_password("secret", salt, sizeof salt, 4096, &secret));
	struct scram_server srv;
	scram_server_init(&srv, &secret);
	const struct auth_backend_secret sec = { .user = "app", .password = "secret" };
	static const char mechs[] = "SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0";
	uint8_t body[SCRAM_MAX_MESSAGE + 8];
	ck_assert_int_eq(ab_run(&f, &sec, body, ab_request(body, AUTH_REQ_SASL, mechs, sizeof mechs)),
			 AUTH_BACKEND_CONTINUE);
	/* SASLInitialResponse: mechanism, length, client-first-message. */
	ck_assert_int_eq(f.pb.data[0], 'p');
	ck_assert_str_eq((const char *)f.pb.data + 5, "SCRAM-SHA-256");
	size_t off = 5 + sizeof "SCRAM-SHA-256";
	uint32_t first_len = proto_get_u32(f.pb.data + off);
	ck_assert_uint_eq(f.pb.len, off + 4 + first_len);

	static const uint8_t nonce[SCRAM_NONCE_RAW_LEN] = { 1 };
	char out[SCRAM_MAX_MESSAGE + 1];
	size_t olen;
	ck_assert(scram_server_handle_first(&srv, (const char *)f.pb.data + off + 4, first_len, nonce, out, sizeof out,
					    &olen));
	ck_assert_int_eq(ab_run(&f, &sec, body, ab_request(body, AUTH_REQ_SASL_CONT, out, olen)),
			 AUTH_BACKEND_CONTINUE);
	ck_assert_int_eq(f.pb.data[0], 'p');   /* SASLResponse: client-final-message */
	ck_assert_int_eq(scram_server_handle_final(&srv, (const char *)f.pb.data + 5, f.pb.len - 5, out, sizeof out,
						   &olen),
			 SCRAM_OK);
	ck_assert_int_eq(ab_run(&f, &sec, body, ab_request(body, AUTH_REQ_SASL_FIN, out, olen)),
			 AUTH_BACKEND_CONTINUE);
	ck_assert_uint_eq(f.pb.len, 0);
	auth_backend_clear(&f.ab);
	ck_assert_ptr_null(f.ab.password);
}
END_TEST

START_TEST(test_backend_malformed)
{
	struct ab_fixture f = { 0 };
	const struct auth_backend_secret sec = { .user = "app", .password = "secret" };
	uint8_t body[64] = { 0 };
	ck_assert_int_eq(ab_run(&f, &sec, body, 3), AUTH_BACKEND_FAILED);
	ck_assert_str_eq(f.error, "malformed authentication request");
	ck_assert_int_eq(ab_run(&f, &sec, body, 0), AUTH_BACKEND_FAILED);
	ck_assert_str_eq(f.error, "malformed authentication request");
	/* SASL steps out of turn (no SASL request before). */
	ck_assert_int_eq(ab_run(&f, &sec, body, ab_request(body, AUTH_REQ_SASL_CONT, "r=x,s=eA==,i=1", 14)),
			 AUTH_BACKEND_FAILED);
	ck_assert_str_eq(f.error, "bad SCRAM server-first-message");
	ck_assert_int_eq(ab_run(&f, &sec, body, ab_request(body, AUTH_REQ_SASL_FIN, "v=eA==", 6)),
			 AUTH_BACKEND_FAILED);
	ck_assert_str_eq(f.error, "server's SCRAM signature does not verify");
	/* GSS and unknown codes. */
	ck_assert_int_eq(ab_run(&f, &sec, body, ab_request(body, AUTH_REQ_GSS, NULL, 0)), AUTH_BACKEND_FAILED);
	ck_assert_str_eq(f.error, "server asks for an authentication method pgcat does not support");
	ck_assert_int_eq(ab_run(&f, &sec, body, ab_request(body, 99, NULL, 0)), AUTH_BACKEND_FAILED);
	auth_backend_clear(&f.ab);
}
END_TEST

Suite *auth_backend_suite(void)
{
	Suite *s = suite_create("auth_backend");
	TCase *tc = tcase_create("answers");
	tcase_add_test(tc, test_backend_ok);
	tcase_add_test(tc, test_backend_cleartext);
	tcase_add_test(tc, test_backend_md5);
	tcase_add_test(tc, test_backend_sasl_without_scram);
	tcase_add_test(tc, test_backend_sasl_credentials);
	tcase_add_test(tc, test_backend_scram_exchange);
	tcase_add_test(tc, test_backend_malformed);
	suite_add_tcase(s, tc);
	return s;
}
