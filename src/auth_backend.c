/* SPDX-License-Identifier: MIT */
/*
 * auth_backend: the AuthenticationRequest answers of pgcat as a PostgreSQL
 * client: cleartext, md5 (from a plaintext password or a stored hash) and
 * SCRAM-SHA-256 (from a plaintext password, or SCRAM pass-through of a
 * client's key when pgcat holds only the verifier). The PBKDF2 that a
 * server's SCRAM challenge asks for goes to the owner's kdf (off the
 * loop); the answer waits for it (AUTH_BACKEND_PENDING, then
 * auth_backend_resume).
 */
#include "auth_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/crypto.h>

#include "auth_md5.h"
#include "proto.h"
#include "saslprep.h"

static bool auth_backend_is_scram_secret(const char *p) { return p && strncmp(p, "SCRAM-SHA-256$", 14) == 0; }

static void derived(struct kdf_request *req, bool ok, const uint8_t *salted);

void auth_backend_init(struct auth_backend *ab, struct kdf *kdf, void (*on_derived)(void *arg), void *arg)
{
	ab->kdf = kdf;
	ab->derived = on_derived;
	ab->arg = arg;
	ab->req.done = derived;
}

void auth_backend_clear(struct auth_backend *ab)
{
	kdf_cancel(&ab->req);   /* its result must not reach a login that is gone */
	if (ab->password) {
		OPENSSL_cleanse(ab->password, strlen(ab->password));
		free(ab->password);
	}
	struct kdf *kdf = ab->kdf;
	void (*on_derived)(void *) = ab->derived;
	void *arg = ab->arg;
	/* A pass-through key, maybe, and the salted password's keys. */
	OPENSSL_cleanse(ab, sizeof *ab);
	auth_backend_init(ab, kdf, on_derived, arg);
}

static void auth_backend_put_password(struct pktbuf *out, const void *data, size_t len)
{
	pktbuf_begin(out, PqMsg_PasswordMessage);
	pktbuf_put_bytes(out, data, len);
	pktbuf_end(out);
}

static enum auth_backend_result auth_backend_sasl_start(struct auth_backend *ab,
							const struct auth_backend_secret *sec,
							const uint8_t *body, size_t len, struct pktbuf *out,
							const char **error)
{
	/* A list of mechanism names, each NUL-terminated, then an empty one. */
	bool scram = false;
	size_t off = 4;
	const char *mech;
	while (proto_read_cstring(body, len, &off, &mech) && mech[0])
		if (strcmp(mech, "SCRAM-SHA-256") == 0)
			scram = true;
	if (!scram) {
		*error = "server offers no SASL mechanism pgcat supports";
		return AUTH_BACKEND_FAILED;
	}
	const char *pw = sec->password;
	bool passthrough = auth_backend_is_scram_secret(pw);
	if (!pw || !pw[0] || pg_md5_is_stored(pw)) {
		*error = "server asks for SCRAM, and pgcat has no plaintext password for this user";
		ab->wrong_secret = true;
		return AUTH_BACKEND_FAILED;
	}
	if (passthrough && !(sec->passthrough_client_key && sec->passthrough_server_key)) {
		*error = "server asks for SCRAM, and pgcat has only a SCRAM secret for this user: "
			 "no client has logged in with it yet to pass its key through";
		ab->wrong_secret = true;
		return AUTH_BACKEND_FAILED;
	}
	auth_backend_clear(ab);   /* a second SASL request starts over */
	if (!passthrough && saslprep_password(pw, &ab->password) == SASLPREP_NO_MEMORY) {
		*error = "out of memory";
		return AUTH_BACKEND_FAILED;
	}
	if (passthrough) {
		/* The client's key answers for the user (SCRAM pass-through):
		 * it works if the server holds the same verifier. */
		ab->scram.have_keys = true;
		memcpy(ab->scram.client_key, sec->passthrough_client_key, SCRAM_KEY_LEN);
		memcpy(ab->scram.server_key, sec->passthrough_server_key, SCRAM_KEY_LEN);
	}
	uint8_t nonce[SCRAM_NONCE_RAW_LEN];
	char msg[SCRAM_MAX_MESSAGE + 1];
	size_t mlen;
	if (!pg_random_bytes(nonce, sizeof nonce) ||
	    !scram_client_first(&ab->scram, ab->password, nonce, msg, sizeof msg, &mlen)) {
		*error = "cannot start SCRAM exchange";
		return AUTH_BACKEND_FAILED;
	}
	pktbuf_begin(out, PqMsg_SASLInitialResponse);
	pktbuf_put_cstring(out, "SCRAM-SHA-256");
	pktbuf_put_u32(out, (uint32_t)mlen);
	pktbuf_put_bytes(out, msg, mlen);
	pktbuf_end(out);
	if (out->failed) {
		*error = "SCRAM message too long";
		return AUTH_BACKEND_FAILED;
	}
	return AUTH_BACKEND_CONTINUE;
}

/* The SASLResponse with the client-final-message; salted NULL in
 * pass-through mode. */
static enum auth_backend_result sasl_response(struct auth_backend *ab, const uint8_t *salted, struct pktbuf *out,
					      const char **error)
{
	char msg[SCRAM_MAX_MESSAGE + 1];
	size_t mlen;
	if (!scram_client_write_final(&ab->scram, salted, msg, sizeof msg, &mlen)) {
		*error = "bad SCRAM server-first-message";
		return AUTH_BACKEND_FAILED;
	}
	auth_backend_put_password(out, msg, mlen);   /* a SASLResponse */
	OPENSSL_cleanse(msg, sizeof msg);
	if (out->failed) {
		*error = "bad SCRAM server-first-message";
		return AUTH_BACKEND_FAILED;
	}
	return AUTH_BACKEND_CONTINUE;
}

/* kdf's answer, on the loop: kept for auth_backend_resume, the owner told. */
static void derived(struct kdf_request *req, bool ok, const uint8_t *salted)
{
	struct auth_backend *ab = LIST_OWNER(req, struct auth_backend, req);
	if (ok)
		memcpy(ab->salted, salted, SCRAM_KEY_LEN);
	ab->derive = ok ? AUTH_DERIVE_OK : AUTH_DERIVE_FAILED;
	ab->derived(ab->arg);
}

enum auth_backend_result auth_backend_resume(struct auth_backend *ab, struct pktbuf *out, const char **error)
{
	*error = NULL;
	bool ok = ab->derive == AUTH_DERIVE_OK;
	enum auth_backend_result r = AUTH_BACKEND_FAILED;
	if (ok)
		r = sasl_response(ab, ab->salted, out, error);
	else
		*error = ab->derive == AUTH_DERIVE_FAILED ? "cannot derive the SCRAM key" : "no SCRAM key derived";
	OPENSSL_cleanse(ab->salted, sizeof ab->salted);
	ab->derive = AUTH_DERIVE_NONE;
	return r;
}

enum auth_backend_result auth_backend_answer(struct auth_backend *ab, const struct auth_backend_secret *sec,
					     const uint8_t *body, size_t len, struct pktbuf *out,
					     const char **error)
{
	*error = NULL;
	if (ab->derive != AUTH_DERIVE_NONE) {
		/* (the owner reads no 'R' while a derivation is under way) */
		*error = "server sent an authentication request before pgcat answered the last one";
		return AUTH_BACKEND_FAILED;
	}
	if (len < 4) {
		*error = "malformed authentication request";
		return AUTH_BACKEND_FAILED;
	}
	const char *pw = sec->password;
	switch (proto_get_u32(body)) {
	case AUTH_REQ_OK:
		return AUTH_BACKEND_DONE;
	case AUTH_REQ_PASSWORD:
		if (!pw || !pw[0] || pg_md5_is_stored(pw) || auth_backend_is_scram_secret(pw)) {
			*error = "server asks for a cleartext password, and pgcat has none for this user";
			ab->wrong_secret = true;
			return AUTH_BACKEND_FAILED;
		}
		if (strlen(pw) > AUTH_BACKEND_MAX_PASSWORD) {
			*error = "password too long";
			return AUTH_BACKEND_FAILED;
		}
		auth_backend_put_password(out, pw, strlen(pw) + 1);
		if (out->failed) {
			*error = "password too long";
			return AUTH_BACKEND_FAILED;
		}
		return AUTH_BACKEND_CONTINUE;
	case AUTH_REQ_MD5: {
		if (len != 8 || !pw || !pw[0] || auth_backend_is_scram_secret(pw)) {
			*error = "server asks for an md5 password, and pgcat has none for this user";
			ab->wrong_secret = true;
			return AUTH_BACKEND_FAILED;
		}
		char stored[PG_MD5_LEN + 1], resp[PG_MD5_LEN + 1];
		if (pg_md5_is_stored(pw))
			snprintf(stored, sizeof stored, "%s", pw);
		else
			pg_md5_stored(pw, sec->user ? sec->user : "", stored);
		pg_md5_response(stored, body + 4, resp);
		/* The stored hash logs in as well as the password does. */
		OPENSSL_cleanse(stored, sizeof stored);
		auth_backend_put_password(out, resp, strlen(resp) + 1);
		if (out->failed) {
			*error = "md5 answer too long";
			return AUTH_BACKEND_FAILED;
		}
		return AUTH_BACKEND_CONTINUE;
	}
	case AUTH_REQ_SASL:
		return auth_backend_sasl_start(ab, sec, body, len, out, error);
	case AUTH_REQ_SASL_CONT:
		/* Out of turn (no SASL started) the scram state refuses it. */
		if (!scram_client_read_first(&ab->scram, (const char *)body + 4, len - 4)) {
			*error = "bad SCRAM server-first-message";
			return AUTH_BACKEND_FAILED;
		}
		if (ab->scram.have_keys)
			return sasl_response(ab, NULL, out, error);
		switch (kdf_derive(ab->kdf, &ab->req, ab->password, ab->scram.salt, ab->scram.salt_len,
				   ab->scram.iterations, ab->salted)) {
		case KDF_DONE: {
			enum auth_backend_result r = sasl_response(ab, ab->salted, out, error);
			OPENSSL_cleanse(ab->salted, sizeof ab->salted);
			return r;
		}
		case KDF_PENDING:
			ab->derive = AUTH_DERIVE_PENDING;
			return AUTH_BACKEND_PENDING;
		case KDF_FAILED:
			break;
		}
		*error = "cannot derive the SCRAM key";
		return AUTH_BACKEND_FAILED;
	case AUTH_REQ_SASL_FIN:
		if (!scram_client_handle_final(&ab->scram, (const char *)body + 4, len - 4)) {
			*error = "server's SCRAM signature does not verify";
			return AUTH_BACKEND_FAILED;
		}
		return AUTH_BACKEND_CONTINUE;
	default:
		*error = "server asks for an authentication method pgcat does not support";
		return AUTH_BACKEND_FAILED;
	}
}
