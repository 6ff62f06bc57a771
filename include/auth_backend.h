/* SPDX-License-Identifier: MIT */
/*
 * auth_backend: pgcat's answer to a PostgreSQL server's
 * AuthenticationRequest ('R'), for every connection pgcat logs in with
 * (pooled server connections, the lag monitor's). It knows no connection
 * type: in go the user, the configured password or secret, the SCRAM
 * pass-through keys if any and the request body; out come the bytes of the
 * PasswordMessage, SASLInitialResponse or SASLResponse to send, written into
 * a caller-given pktbuf, and a result with an error text.
 */
#ifndef PGCAT_AUTH_BACKEND_H
#define PGCAT_AUTH_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth_scram.h"
#include "pktbuf.h"

/* Storage enough for any message auth_backend_answer writes (a SCRAM
 * message, or a PasswordMessage with a password of reasonable length). */
#define AUTH_BACKEND_MAX_MESSAGE (SCRAM_MAX_MESSAGE + 128)

/* What pgcat logs in with. */
struct auth_backend_secret {
	const char *user;
	/* Plaintext, a stored md5 hash ("md5...") or a SCRAM verifier
	 * ("SCRAM-SHA-256$..."); NULL or empty: none. */
	const char *password;
	/* SCRAM pass-through: a ClientKey some client proved, and the ServerKey
	 * of the verifier in password (SCRAM_KEY_LEN bytes each); NULL when no
	 * client has logged in with the verifier yet. */
	const uint8_t *passthrough_client_key;
	const uint8_t *passthrough_server_key;
};

/* One login's state across its 'R' messages. Zero it before the first
 * (calloc, = {0}); auth_backend_clear wipes it. */
struct auth_backend {
	struct scram_client scram;
	/* Our own copy: scram reads the password again at the server-first-
	 * message, and the configured one may be replaced by a reload meanwhile. */
	char *password;
};

enum auth_backend_result {
	AUTH_BACKEND_FAILED,    /* give up; *error says why */
	AUTH_BACKEND_CONTINUE,  /* send what is in out (if anything), wait for the next 'R' */
	AUTH_BACKEND_DONE,      /* AuthenticationOk: nothing to send */
};

/* Handle the body of one 'R' message (its type byte and length excluded).
 * Appends at most one message to out; on AUTH_BACKEND_FAILED, out is to be
 * discarded. The caller cleanses out's storage after sending it (it may
 * hold a cleartext password). */
enum auth_backend_result auth_backend_answer(struct auth_backend *ab, const struct auth_backend_secret *sec,
					     const uint8_t *body, size_t len, struct pktbuf *out,
					     const char **error)
	__attribute__((warn_unused_result));

/* Wipe the state (keys, password copy) and free what it holds; ab itself
 * stays, zeroed, ready for another login. */
void auth_backend_clear(struct auth_backend *ab);

#endif
