/* SPDX-License-Identifier: MIT */
/*
 * auth_scram: SCRAM-SHA-256 (RFC 5802, RFC 7677) as pure functions over
 * buffers, both sides: pgcat as the server its clients log in to, and pgcat
 * as a client of PostgreSQL. No sockets, no protocol framing, no globals.
 * Channel binding is not offered (gs2 "n" or "y" accepted, "p" refused).
 */
#ifndef PGCAT_AUTH_SCRAM_H
#define PGCAT_AUTH_SCRAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SCRAM_KEY_LEN 32          /* SHA-256 */
#define SCRAM_MAX_SALT_LEN 64
#define SCRAM_NONCE_RAW_LEN 18    /* random bytes, base64 → 24 chars */
#define SCRAM_DEFAULT_ITERATIONS 4096
#define SCRAM_MAX_MESSAGE 1024    /* any SCRAM message longer than this is refused */
#define SCRAM_MAX_ITERATIONS 10000000   /* a larger count, from a server or a verifier, is refused */

/* A stored SCRAM verifier, as in pg_authid: "SCRAM-SHA-256$<iter>:<salt b64>$<StoredKey b64>:<ServerKey b64>" */
struct scram_secret {
	int iterations;
	uint8_t salt[SCRAM_MAX_SALT_LEN];
	size_t salt_len;
	uint8_t stored_key[SCRAM_KEY_LEN];
	uint8_t server_key[SCRAM_KEY_LEN];
};

bool scram_secret_parse(const char *text, struct scram_secret *out)
	__attribute__((warn_unused_result));
/* Derive a verifier from a plaintext password (SaltedPassword = Hi(pw, salt, i)),
 * the password SASLprepped first as PostgreSQL does (saslprep.h). */
bool scram_secret_from_password(const char *password, const uint8_t *salt, size_t salt_len,
				int iterations, struct scram_secret *out)
	__attribute__((warn_unused_result));
/* A password given in clear against a verifier: does salted (the
 * SaltedPassword of the SASLprepped password, with the verifier's salt and
 * iterations) give the verifier's StoredKey and ServerKey? On true, and
 * client_key not NULL, the ClientKey is written there (SCRAM pass-through). */
bool scram_secret_check_salted(const struct scram_secret *secret, const uint8_t salted[SCRAM_KEY_LEN],
			       uint8_t client_key[SCRAM_KEY_LEN])
	__attribute__((warn_unused_result));
/* SaltedPassword = Hi(password, salt, iterations): PBKDF2 with HMAC-SHA-256,
 * on a password already SASLprepped (saslprep.h). Safe to run on any thread
 * (its digest contexts are its own). stop (NULL: none) is looked at every
 * 65,536 iterations: once it is true the derivation gives up (false). */
bool scram_salted_password(const char *password, const uint8_t *salt, size_t salt_len, int iterations,
			   const atomic_bool *stop, uint8_t out[SCRAM_KEY_LEN])
	__attribute__((warn_unused_result));
/* Format as "SCRAM-SHA-256$..." into out (NUL terminated). */
bool scram_secret_format(const struct scram_secret *secret, char *out, size_t outsz)
	__attribute__((warn_unused_result));

/* ---- pgcat as SCRAM server (a client logging in to pgcat) ---- */

enum scram_server_step { SCRAM_SERVER_WANT_FIRST, SCRAM_SERVER_WANT_FINAL, SCRAM_SERVER_DONE };

struct scram_server {
	enum scram_server_step step;
	struct scram_secret secret;
	char client_first_bare[SCRAM_MAX_MESSAGE + 1];
	char server_first[SCRAM_MAX_MESSAGE + 1];
	char nonce[SCRAM_MAX_MESSAGE + 1];        /* client nonce + server nonce */
	char gs2_header[64];
	/* ClientKey recovered from a verified proof: lets pgcat log in to a SCRAM
	 * server with the same secret without knowing the password (pass-through). */
	uint8_t client_key[SCRAM_KEY_LEN];
};

void scram_server_init(struct scram_server *st, const struct scram_secret *secret);
/* Parse the client-first-message (SASLInitialResponse data) and write the
 * server-first-message into out. server_nonce_raw: SCRAM_NONCE_RAW_LEN random
 * bytes (passed in so tests are deterministic). */
bool scram_server_handle_first(struct scram_server *st, const char *msg, size_t len,
			       const uint8_t server_nonce_raw[SCRAM_NONCE_RAW_LEN],
			       char *out, size_t outsz, size_t *outlen)
	__attribute__((warn_unused_result));

enum scram_verdict { SCRAM_OK, SCRAM_BAD_PROOF, SCRAM_MALFORMED };
/* Check the client-final-message; on SCRAM_OK writes the server-final-message
 * ("v=...") into out. */
enum scram_verdict scram_server_handle_final(struct scram_server *st, const char *msg, size_t len,
					     char *out, size_t outsz, size_t *outlen)
	__attribute__((warn_unused_result));

/* ---- pgcat as SCRAM client (logging in to PostgreSQL) ---- */

enum scram_client_step {
	SCRAM_CLIENT_INIT,
	SCRAM_CLIENT_SENT_FIRST,
	SCRAM_CLIENT_GOT_FIRST,    /* server-first read; the client-final waits for its keys */
	SCRAM_CLIENT_SENT_FINAL,
	SCRAM_CLIENT_DONE
};

struct scram_client {
	enum scram_client_step step;
	char client_nonce[64];
	char client_first_bare[SCRAM_MAX_MESSAGE + 1];
	/* Either a password (salted per server's salt) or known keys (pass-through). */
	const char *password;
	bool have_keys;
	uint8_t client_key[SCRAM_KEY_LEN];
	uint8_t server_key[SCRAM_KEY_LEN];
	uint8_t expected_server_signature[SCRAM_KEY_LEN];
	/* The server-first-message, kept from its reading to the client-final
	 * (the key derivation may run in between: kdf.h). */
	char server_first[SCRAM_MAX_MESSAGE + 1];
	size_t nonce_len;           /* the combined nonce: server_first + 2 */
	uint8_t salt[SCRAM_MAX_SALT_LEN];
	size_t salt_len;
	int iterations;
};

/* Start with a password. nonce_raw: SCRAM_NONCE_RAW_LEN random bytes. Writes
 * the client-first-message ("n,,n=,r=...") into out.
 * (Added note) A non-NULL password selects password mode and clears
 * have_keys/client_key/server_key; with password == NULL those three are left
 * alone, and the caller sets have_keys and both keys (before or after this
 * call, before scram_client_handle_first) for pass-through. */
bool scram_client_first(struct scram_client *st, const char *password,
			const uint8_t nonce_raw[SCRAM_NONCE_RAW_LEN],
			char *out, size_t outsz, size_t *outlen)
	__attribute__((warn_unused_result));
/* Same, for a test vector: the client nonce given as its printable text. */
bool scram_client_first_with_nonce(struct scram_client *st, const char *password, const char *nonce,
				   char *out, size_t outsz, size_t *outlen)
	__attribute__((warn_unused_result));
/* Handle server-first ("r=,s=,i="), write client-final into out: the two
 * steps below, with the password SASLprepped and salted here (blocking:
 * up to SCRAM_MAX_ITERATIONS rounds of PBKDF2 chosen by the server). */
bool scram_client_handle_first(struct scram_client *st, const char *msg, size_t len,
			       char *out, size_t outsz, size_t *outlen)
	__attribute__((warn_unused_result));
/* The same in two steps, so that the SaltedPassword can be derived
 * elsewhere in between. Read server-first: after it, st->salt, salt_len and
 * iterations say what to derive (in password mode). */
bool scram_client_read_first(struct scram_client *st, const char *msg, size_t len)
	__attribute__((warn_unused_result));
/* Write client-final into out, from salted (the SaltedPassword of
 * st->password; NULL in pass-through mode, whose keys are known). */
bool scram_client_write_final(struct scram_client *st, const uint8_t *salted,
			      char *out, size_t outsz, size_t *outlen)
	__attribute__((warn_unused_result));
/* Check server-final ("v=..."). */
bool scram_client_handle_final(struct scram_client *st, const char *msg, size_t len)
	__attribute__((warn_unused_result));

/* Added: variants for test vectors whose nonces or user name are not what the
 * functions above produce (RFC 7677 section 3).
 * Server side with the server's nonce part given as printable text (no ','). */
bool scram_server_handle_first_with_nonce(struct scram_server *st, const char *msg, size_t len,
					  const char *server_nonce,
					  char *out, size_t outsz, size_t *outlen)
	__attribute__((warn_unused_result));
/* Client side with a user name in "n=" (escaped as a saslname); the functions
 * above send it empty, as libpq does, since PostgreSQL ignores it. */
bool scram_client_first_with_user(struct scram_client *st, const char *password, const char *user,
				  const char *nonce, char *out, size_t outsz, size_t *outlen)
	__attribute__((warn_unused_result));

/* ---- helpers shared with auth ---- */
/* Standard base64 with padding. encode writes NUL-terminated text (outsz
 * counts the NUL, *outlen does not). decode is strict: length a multiple of
 * 4, padding only at the end, unused bits zero, no whitespace; out is raw
 * bytes (not terminated). Both return false if out is too small. */
bool pg_b64_encode(const uint8_t *in, size_t len, char *out, size_t outsz, size_t *outlen)
	__attribute__((warn_unused_result));
bool pg_b64_decode(const char *in, size_t len, uint8_t *out, size_t outsz, size_t *outlen)
	__attribute__((warn_unused_result));

#endif
