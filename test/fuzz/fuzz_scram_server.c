/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: SCRAM-SHA-256 as pgcat's clients drive it, the side
 * that faces the internet before any password is known.
 *
 * Input: client-first-message, a NUL byte, client-final-message. The first
 * goes through scram_server_handle_first() against a fixed verifier and a
 * fixed server nonce; if accepted, the second through
 * scram_server_handle_final(). Each message is copied to a buffer of
 * exactly its length (no terminator), as auth.c passes the bytes of a
 * SASL message. The first part also feeds scram_secret_parse() (verifiers
 * come from pgcat.ini and auth_file) and the strict base64 decoder, whose
 * output must encode back to the same text.
 */
#include "auth_scram.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, \
				__FILE__, __LINE__);                             \
			abort();                                                 \
		}                                                                \
	} while (0)

/* The seeds in corpus/scram_server/ are made with these (see seeds.py). */
static const char password[] = "pencil";
static uint8_t salt[16];   /* 0xa0, 0xa3, 0xa6, ... */
static const uint8_t server_nonce[SCRAM_NONCE_RAW_LEN] = {
	1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18 };

static struct scram_secret secret;
static int have_secret;

static char *copy(const uint8_t *p, size_t n)
{
	char *c = malloc(n);
	if (c != NULL && n > 0)
		memcpy(c, p, n);
	return c;
}

static void check_base64(const char *in, size_t len)
{
	size_t cap = len / 4 * 3;
	uint8_t *raw = malloc(cap);
	size_t rawlen = 0;
	if (raw == NULL)
		return;
	if (pg_b64_decode(in, len, raw, cap, &rawlen)) {
		CHECK(rawlen <= cap);
		/* Strict decoding: exactly one text for each byte string. */
		char *back = malloc(len + 1);
		size_t backlen = 0;
		if (back != NULL) {
			CHECK(pg_b64_encode(raw, rawlen, back, len + 1, &backlen));
			CHECK(backlen == len && memcmp(back, in, len) == 0);
			free(back);
		}
	}
	free(raw);
}

static void check_secret(const char *text)
{
	struct scram_secret s, again;
	char buf[512];
	if (!scram_secret_parse(text, &s))
		return;
	CHECK(s.iterations >= 1 && s.salt_len >= 1 && s.salt_len <= SCRAM_MAX_SALT_LEN);
	CHECK(scram_secret_format(&s, buf, sizeof buf));
	CHECK(scram_secret_parse(buf, &again));
	CHECK(s.iterations == again.iterations && s.salt_len == again.salt_len);
	CHECK(memcmp(s.salt, again.salt, s.salt_len) == 0);
	CHECK(memcmp(s.stored_key, again.stored_key, SCRAM_KEY_LEN) == 0);
	CHECK(memcmp(s.server_key, again.server_key, SCRAM_KEY_LEN) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!have_secret) {
		for (size_t i = 0; i < sizeof salt; i++)
			salt[i] = (uint8_t)(0xa0 + 3 * i);
		CHECK(scram_secret_from_password(password, salt, sizeof salt, SCRAM_DEFAULT_ITERATIONS, &secret));
		have_secret = 1;
	}
	const uint8_t *sep = memchr(data, '\0', size);
	size_t len1 = sep ? (size_t)(sep - data) : size;
	const uint8_t *part2 = sep ? sep + 1 : data + size;
	size_t len2 = sep ? size - len1 - 1 : 0;

	char *m1 = copy(data, len1);
	char *m2 = copy(part2, len2);
	char *text = malloc(len1 + 1);
	if (m1 == NULL || m2 == NULL || text == NULL)
		goto out;
	memcpy(text, data, len1);
	text[len1] = '\0';
	check_secret(text);
	check_base64(m1, len1);

	struct scram_server st;
	char out[SCRAM_MAX_MESSAGE + 1];
	size_t outlen = 12345;
	scram_server_init(&st, &secret);
	if (scram_server_handle_first(&st, m1, len1, server_nonce, out, sizeof out, &outlen)) {
		CHECK(st.step == SCRAM_SERVER_WANT_FINAL);
		CHECK(outlen == strlen(out) && outlen < sizeof out);
		enum scram_verdict v = scram_server_handle_final(&st, m2, len2, out, sizeof out, &outlen);
		CHECK(st.step == SCRAM_SERVER_DONE);
		if (v == SCRAM_OK)
			CHECK(outlen == strlen(out) && strncmp(out, "v=", 2) == 0);
		else
			CHECK(outlen == 0);
		/* The exchange is over: nothing more is accepted. */
		CHECK(scram_server_handle_final(&st, m2, len2, out, sizeof out, &outlen) == SCRAM_MALFORMED);
	} else {
		CHECK(st.step == SCRAM_SERVER_DONE && outlen == 0);
	}
out:
	free(m1);
	free(m2);
	free(text);
	return 0;
}
