/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: SCRAM-SHA-256 as pgcat logs in to PostgreSQL, i.e. the
 * messages a server (or anything listening where a server should be) sends.
 *
 * Input: server-first-message, a NUL byte, server-final-message. The client
 * state is started with fixed pass-through keys (no PBKDF2 per input, so a
 * server-chosen iteration count cannot make the fuzzer slow) and a fixed
 * client nonce; then scram_client_handle_first() reads the first part and,
 * if it is accepted, scram_client_handle_final() the second. Messages are
 * copied to buffers of exactly their length, as server.c passes them.
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

/* The seeds in corpus/scram_client/ are made with these (see seeds.py). */
static const char client_nonce[] = "pgcatFuzzClientNonce+024";

static char *copy(const uint8_t *p, size_t n)
{
	char *c = malloc(n);
	if (c != NULL && n > 0)
		memcpy(c, p, n);
	return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *sep = memchr(data, '\0', size);
	size_t len1 = sep ? (size_t)(sep - data) : size;
	const uint8_t *part2 = sep ? sep + 1 : data + size;
	size_t len2 = sep ? size - len1 - 1 : 0;
	char *m1 = copy(data, len1);
	char *m2 = copy(part2, len2);
	if (m1 == NULL || m2 == NULL)
		goto out;

	struct scram_client st;
	char out[SCRAM_MAX_MESSAGE + 64];
	size_t outlen = 12345;
	memset(&st, 0, sizeof st);
	st.have_keys = true;
	for (size_t i = 0; i < SCRAM_KEY_LEN; i++) {
		st.client_key[i] = (uint8_t)(0x10 + i);
		st.server_key[i] = (uint8_t)(0x80 + i);
	}
	CHECK(scram_client_first_with_nonce(&st, NULL, client_nonce, out, sizeof out, &outlen));
	CHECK(outlen == strlen(out) && strcmp(out, "n,,n=,r=pgcatFuzzClientNonce+024") == 0);

	if (scram_client_handle_first(&st, m1, len1, out, sizeof out, &outlen)) {
		CHECK(st.step == SCRAM_CLIENT_SENT_FINAL);
		CHECK(outlen == strlen(out) && strncmp(out, "c=biws,r=", 9) == 0);
		(void)scram_client_handle_final(&st, m2, len2);
		CHECK(st.step == SCRAM_CLIENT_DONE);
		CHECK(!scram_client_handle_final(&st, m2, len2));
	} else {
		CHECK(st.step == SCRAM_CLIENT_DONE && outlen == 0);
	}
out:
	free(m1);
	free(m2);
	return 0;
}
