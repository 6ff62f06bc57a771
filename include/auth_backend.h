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
#include "kdf.h"
#include "pktbuf.h"

/* The longest password sent in clear to a server that asks for one:
 * PgBouncer's (its MAX_PASSWORD less the NUL), which auth_file takes too. */
#define AUTH_BACKEND_MAX_PASSWORD 2047
/* Storage enough for any message auth_backend_answer writes (a SCRAM
 * message, or a PasswordMessage with a password up to the above). */
#define AUTH_BACKEND_MAX_MESSAGE (AUTH_BACKEND_MAX_PASSWORD + 64)
_Static_assert(AUTH_BACKEND_MAX_MESSAGE >= SCRAM_MAX_MESSAGE + 128, "a SCRAM message and its envelope fit");

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
 * (calloc, = {0}), then auth_backend_init; auth_backend_clear wipes it. */
struct auth_backend {
	struct scram_client scram;
	/* The password SCRAM salts: our own copy, SASLprepped (saslprep.h),
	 * kept to the server-first-message (the configured one may be replaced
	 * by a reload meanwhile). */
	char *password;
	/* The owner's, kept by auth_backend_clear: where the SaltedPassword is
	 * derived (NULL: here, blocking) and whom to tell when a derivation
	 * that went there is over. */
	struct kdf *kdf;
	void (*derived)(void *arg);
	void *arg;
	/* The derivation waited for, then its outcome until resumed. */
	struct kdf_request req;
	enum { AUTH_DERIVE_NONE, AUTH_DERIVE_PENDING, AUTH_DERIVE_OK, AUTH_DERIVE_FAILED } derive;
	uint8_t salted[SCRAM_KEY_LEN];
	/* The last failure was no secret of the kind the server's method
	 * needs (a SCRAM verifier no client lent its key for, an md5 hash
	 * where SCRAM is asked, ...): the configuration's doing, which no
	 * retry mends. */
	bool wrong_secret;
};

enum auth_backend_result {
	AUTH_BACKEND_FAILED,    /* give up; *error says why */
	AUTH_BACKEND_CONTINUE,  /* send what is in out (if anything), wait for the next 'R' */
	AUTH_BACKEND_DONE,      /* AuthenticationOk: nothing to send */
	/* The SCRAM key is being derived off the loop (kdf.h): nothing to send
	 * yet, and no other 'R' to be handled until the derived event, after
	 * which auth_backend_resume gives the answer. */
	AUTH_BACKEND_PENDING,
};

/* kdf NULL: derive on the caller's thread (blocking; unit tests). derived
 * is called with arg from the loop when a PENDING derivation is over; it is
 * never called after auth_backend_clear. */
void auth_backend_init(struct auth_backend *ab, struct kdf *kdf, void (*derived)(void *arg), void *arg);

/* Handle the body of one 'R' message (its type byte and length excluded).
 * Appends at most one message to out; on AUTH_BACKEND_FAILED, out is to be
 * discarded. The caller cleanses out's storage after sending it (it may
 * hold a cleartext password). */
enum auth_backend_result auth_backend_answer(struct auth_backend *ab, const struct auth_backend_secret *sec,
					     const uint8_t *body, size_t len, struct pktbuf *out,
					     const char **error)
	__attribute__((warn_unused_result));

/* After the derived event: the SASLResponse of the SCRAM exchange into out
 * (CONTINUE), or FAILED with *error. */
enum auth_backend_result auth_backend_resume(struct auth_backend *ab, struct pktbuf *out, const char **error)
	__attribute__((warn_unused_result));

/* Waiting for the derived event. */
static inline bool auth_backend_pending(const struct auth_backend *ab)
{
	return ab->derive == AUTH_DERIVE_PENDING;
}

/* Wipe the state (keys, password copy), cancel a derivation under way and
 * free what it holds; ab itself stays, zeroed but for what
 * auth_backend_init set, ready for another login. */
void auth_backend_clear(struct auth_backend *ab);

#endif
