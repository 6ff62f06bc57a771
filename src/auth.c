/* SPDX-License-Identifier: MIT */
/*
 * auth: the method a client must log in with and the credentials behind
 * it, and the exchange itself as a small step machine. An unknown user runs
 * the same exchange as a known one and is refused at the end with the same
 * message as a wrong password, so logins do not reveal which users exist.
 *
 * The password method (auth_type password, PgBouncer's plain) takes the
 * password in clear and checks it against the stored secret whatever its
 * form: a plaintext one as it is, an md5 hash by hashing the password with
 * the user's name, a SCRAM verifier by deriving its keys from the password
 * with the verifier's salt and iterations. That derivation is PBKDF2 (kdf.c,
 * off the loop: the exchange waits for it, AUTH_PENDING), and the ClientKey
 * it yields is kept for SCRAM pass-through as a SCRAM login's is.
 */
#include "auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth_md5.h"
#include "bconn.h"
#include "config.h"
#include "kdf.h"
#include "ldap_auth.h"
#include "list.h"
#include "log.h"
#include "offload.h"
#include "pam_auth.h"
#include "pktbuf.h"
#include "pool.h"
#include "proto.h"
#include "saslprep.h"
#include "context.h"

static bool is_scram_secret(const char *pw) { return pw && strncmp(pw, "SCRAM-SHA-256$", 14) == 0; }

static void send_pkt(struct buf *out, struct pktbuf *pb)
{
	if (!pb->failed)
		buf_add(out, pb->data, pb->len);
}

/* A stable fake verifier for an unknown user: the salt must not change
 * between attempts, or a prober could tell real users from fake ones. */
static bool fake_secret(struct worker *w, const char *user, struct scram_secret *out)
{
	uint8_t mac[32];
	unsigned int maclen = sizeof mac;
	if (!HMAC(EVP_sha256(), w->fake_salt_secret, sizeof w->fake_salt_secret,
		  (const uint8_t *)user, strlen(user), mac, &maclen))
		return false;
	memset(out, 0, sizeof *out);
	out->iterations = SCRAM_DEFAULT_ITERATIONS;
	memcpy(out->salt, mac, 16);
	out->salt_len = 16;
	return pg_random_bytes(out->stored_key, sizeof out->stored_key) &&
	       pg_random_bytes(out->server_key, sizeof out->server_key);
}

static void derived(struct kdf_request *req, bool ok, const uint8_t *salted);

/* SHA-256 of a password: what a plaintext secret and the password given
 * for it are compared by, in constant time and at a fixed length. */
static bool password_digest(const char *pw, uint8_t out[SCRAM_KEY_LEN])
{
	unsigned int n = 0;
	return EVP_Digest(pw, strlen(pw), out, &n, EVP_sha256(), NULL) == 1 && n == SCRAM_KEY_LEN;
}

/* The password method: what the password will be checked against, and
 * AuthenticationCleartextPassword. */
static enum auth_outcome begin_cleartext(struct worker *w, const char *user, const char *pw, struct client_auth *a,
					 struct buf *out)
{
	a->method = CLIENT_AUTH_PASSWORD;
	a->step = CLIENT_AUTH_WANT_CLEARTEXT;
	a->req.done = derived;
	a->req.uncached = true;
	if (a->user_known && pg_md5_is_stored(pw)) {
		a->secret_kind = AUTH_SECRET_MD5;
		snprintf(a->md5_stored, sizeof a->md5_stored, "%s", pw);
	} else if (a->user_known && is_scram_secret(pw)) {
		a->secret_kind = AUTH_SECRET_SCRAM;
		if (!scram_secret_parse(pw, &a->verifier)) {
			log_warning("user \"%s\": cannot parse its SCRAM secret: no password can log it in", user);
			a->user_known = false;
		}
	} else if (a->user_known) {
		a->secret_kind = AUTH_SECRET_PLAIN;
		if (!password_digest(pw, a->plain_digest))
			return AUTH_FAILED;
	}
	if (!a->user_known) {
		/* Checked against a made-up verifier, refused at the end: the
		 * answer takes as long as for a user with a SCRAM secret. */
		a->secret_kind = AUTH_SECRET_SCRAM;
		if (!fake_secret(w, user, &a->verifier))
			return AUTH_FAILED;
	}
	uint8_t storage[16];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_auth_request(&pb, AUTH_REQ_PASSWORD, NULL, 0);
	if (pb.failed)
		return AUTH_FAILED;
	buf_add(out, pb.data, pb.len);
	return AUTH_CONTINUE;
}

enum auth_outcome auth_client_begin(struct worker *w, const char *user, const struct auth_credentials *cred,
				    struct client_auth *a, struct buf *out)
{
	const struct config_general *g = &w->cfg->general;
	const char *pw = cred ? cred->password : NULL;
	a->user_known = cred != NULL && pw && pw[0];
	uint8_t storage[256];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);

	enum auth_type type = g->auth_type;
	switch (a->rule) {
	case AUTH_RULE_AUTH_TYPE:
		/* A pgbouncer.ini's auth_type = scram-sha-256 is SCRAM only, as
		 * in PgBouncer (and PostgreSQL): an md5 secret is refused, where
		 * a pgcat.ini asks such a user for md5. */
		if (type == AUTH_TYPE_SCRAM && w->cfg->pgbouncer && a->user_known && pg_md5_is_stored(pw)) {
			log_info("user \"%s\" has an md5 secret only: auth_type scram-sha-256 refuses it", user);
			a->user_known = false;
		}
		break;
	case AUTH_RULE_TRUST: type = AUTH_TYPE_TRUST; break;
	case AUTH_RULE_MD5: type = AUTH_TYPE_MD5; break;
	case AUTH_RULE_PASSWORD: type = AUTH_TYPE_PASSWORD; break;
	case AUTH_RULE_LDAP:
	case AUTH_RULE_PAM:
		/* The LDAP server or PAM decides; auth_file's secret plays no part. */
		a->method = a->rule == AUTH_RULE_LDAP ? CLIENT_AUTH_LDAP : CLIENT_AUTH_PAM;
		a->step = CLIENT_AUTH_WANT_CLEARTEXT;
		pktbuf_auth_request(&pb, AUTH_REQ_PASSWORD, NULL, 0);
		send_pkt(out, &pb);
		return AUTH_CONTINUE;
	case AUTH_RULE_SCRAM:
		type = AUTH_TYPE_SCRAM;
		/* An hba line that says scram-sha-256 means SCRAM, never md5 in
		 * its place: a user whose secret is an md5 hash goes through the
		 * exchange and is refused, as PostgreSQL refuses it. */
		if (a->user_known && pg_md5_is_stored(pw)) {
			log_info("user \"%s\" has an md5 secret only: the scram-sha-256 line of auth_hba_file refuses it",
				 user);
			a->user_known = false;
		}
		break;
	}
	if (type == AUTH_TYPE_TRUST)
		return cred ? AUTH_OK : AUTH_FAILED;
	if (type == AUTH_TYPE_LDAP || type == AUTH_TYPE_PAM)
		return AUTH_FAILED;   /* (the caller makes them AUTH_RULE_LDAP and AUTH_RULE_PAM) */
	/* Any stored form serves the password in clear. */
	if (type == AUTH_TYPE_PASSWORD)
		return begin_cleartext(w, user, pw, a, out);

	/* The stored form decides what is possible: an md5 hash cannot serve
	 * SCRAM, and a SCRAM secret cannot serve md5 (PostgreSQL does the same). */
	bool use_md5 = type == AUTH_TYPE_MD5;
	if (a->user_known && pg_md5_is_stored(pw))
		use_md5 = true;
	if (a->user_known && is_scram_secret(pw))
		use_md5 = false;

	if (use_md5) {
		a->method = CLIENT_AUTH_MD5;
		a->step = CLIENT_AUTH_WANT_PASSWORD;
		if (a->user_known) {
			if (pg_md5_is_stored(pw))
				snprintf(a->md5_stored, sizeof a->md5_stored, "%s", pw);
			else
				pg_md5_stored(pw, user, a->md5_stored);
		}
		if (!randpool_bytes(&w->rand, a->md5_salt, sizeof a->md5_salt))
			return AUTH_FAILED;
		pktbuf_auth_request(&pb, AUTH_REQ_MD5, a->md5_salt, sizeof a->md5_salt);
		send_pkt(out, &pb);
		return AUTH_CONTINUE;
	}

	a->method = CLIENT_AUTH_SCRAM;
	a->step = CLIENT_AUTH_WANT_SASL_INITIAL;
	struct scram_secret secret;
	if (a->user_known && cred->scram) {
		secret = *cred->scram;
	} else if (!fake_secret(w, user, &secret)) {
		return AUTH_FAILED;
	}
	scram_server_init(&a->scram, &secret);
	static const char mech[] = "SCRAM-SHA-256\0";
	pktbuf_auth_request(&pb, AUTH_REQ_SASL, mech, sizeof mech);
	send_pkt(out, &pb);
	return AUTH_CONTINUE;
}

/* A verified ClientKey logs pgcat in to the pool's servers when the user's
 * secret is a SCRAM verifier: only for the verifier the pool holds now
 * (auth_query may have brought another since the exchange began). */
static void keep_passthrough_key(struct pool *p, const uint8_t server_key[SCRAM_KEY_LEN],
				 const uint8_t client_key[SCRAM_KEY_LEN])
{
	if (p && p->cuser && is_scram_secret(p->cuser->password) && p->have_scram &&
	    CRYPTO_memcmp(p->scram.server_key, server_key, SCRAM_KEY_LEN) == 0) {
		memcpy(p->passthrough_client_key, client_key, SCRAM_KEY_LEN);
		p->have_passthrough_key = true;
	}
}

void auth_adopt_passthrough_key(struct pool *p, const uint8_t server_key[SCRAM_KEY_LEN],
				const uint8_t client_key[SCRAM_KEY_LEN])
{
	keep_passthrough_key(p, server_key, client_key);
}

/* kdf's answer, on the loop: kept for auth_client_resume, the owner told. */
static void derived(struct kdf_request *req, bool ok, const uint8_t *salted)
{
	struct client_auth *a = LIST_OWNER(req, struct client_auth, req);
	if (ok)
		memcpy(a->salted, salted, SCRAM_KEY_LEN);
	a->derive_ok = ok;
	a->step = CLIENT_AUTH_DERIVED;
	a->derived(a->arg);
}

/* The LDAP server's or PAM's verdict, on the loop. */
static void pwcheck_done(void *arg, enum pwcheck_verdict v, const char *why)
{
	struct client_auth *a = arg;
	a->pwcheck_job = NULL;   /* (freed after this call) */
	a->pwcheck_verdict = v;
	snprintf(a->pwcheck_why, sizeof a->pwcheck_why, "%s", why);
	a->step = CLIENT_AUTH_DERIVED;
	a->derived(a->arg);
}

/* ldap, pam: the password goes to the LDAP server or to PAM, off the loop. */
static enum auth_outcome check_outside(struct worker *w, struct client_auth *a, const char *user, const char *given)
{
	a->pwcheck_verdict = PWCHECK_DENIED;
	if (!given[0]) {
		/* (an LDAP bind with no password would be an anonymous login) */
		snprintf(a->pwcheck_why, sizeof a->pwcheck_why, "empty password");
		return AUTH_FAILED;
	}
	a->pwcheck_password = strdup(given);
	if (!a->pwcheck_password)
		return AUTH_FAILED;
	a->offload = w->offload;
	if (a->method == CLIENT_AUTH_LDAP)
		a->pwcheck_job = ldap_auth_start(w->offload, &a->ldap, user, given, pwcheck_done, a);
	else
		a->pwcheck_job = pam_auth_start(w->offload, offload_serial_lock(w->offload), a->pam_service,
						a->pam_rhost, user, given, pwcheck_done, a);
	if (!a->pwcheck_job) {
		snprintf(a->pwcheck_why, sizeof a->pwcheck_why, "out of memory, or no thread to ask on");
		return AUTH_FAILED;
	}
	a->step = CLIENT_AUTH_DERIVING;
	return AUTH_PENDING;
}

enum auth_outcome auth_client_resume(struct pool *passthrough, struct client_auth *a)
{
	if (a->step != CLIENT_AUTH_DERIVED)
		return AUTH_PROTOCOL_ERROR;
	if (a->method == CLIENT_AUTH_LDAP || a->method == CLIENT_AUTH_PAM)
		return a->pwcheck_verdict == PWCHECK_OK ? AUTH_OK : AUTH_FAILED;
	uint8_t client_key[SCRAM_KEY_LEN];
	bool ok = a->derive_ok && scram_secret_check_salted(&a->verifier, a->salted, client_key);
	OPENSSL_cleanse(a->salted, sizeof a->salted);
	a->derive_ok = false;
	if (ok && a->user_known)
		keep_passthrough_key(passthrough, a->verifier.server_key, client_key);
	OPENSSL_cleanse(client_key, sizeof client_key);
	return ok && a->user_known ? AUTH_OK : AUTH_FAILED;
}

/* The password given in clear (NUL-terminated, length checked by the
 * caller) against the stored secret. */
static enum auth_outcome check_cleartext(struct worker *w, struct pool *passthrough, struct client_auth *a,
					 const char *user, const char *given)
{
	/* No secret is empty (an empty one makes the user unknown): PostgreSQL
	 * refuses an empty password before looking, and so does pgcat. */
	if (!given[0])
		return AUTH_FAILED;
	switch (a->secret_kind) {
	case AUTH_SECRET_PLAIN: {
		uint8_t d[SCRAM_KEY_LEN];
		bool ok = password_digest(given, d) && CRYPTO_memcmp(d, a->plain_digest, sizeof d) == 0;
		OPENSSL_cleanse(d, sizeof d);
		return ok && a->user_known ? AUTH_OK : AUTH_FAILED;
	}
	case AUTH_SECRET_MD5: {
		char h[PG_MD5_LEN + 1];
		pg_md5_stored(given, user, h);
		bool ok = strlen(h) == PG_MD5_LEN && pg_secure_streq(h, a->md5_stored);
		OPENSSL_cleanse(h, sizeof h);
		return ok && a->user_known ? AUTH_OK : AUTH_FAILED;
	}
	case AUTH_SECRET_SCRAM:
		break;
	}
	/* PBKDF2 on the password as PostgreSQL would have hashed it (SASLprep
	 * first): off the loop, its cost is the verifier's. */
	char *prepared;
	if (saslprep_password(given, &prepared) == SASLPREP_NO_MEMORY)
		return AUTH_FAILED;
	enum kdf_result r = kdf_derive(w->kdf, &a->req, prepared, a->verifier.salt, a->verifier.salt_len,
				       a->verifier.iterations, a->salted);
	OPENSSL_cleanse(prepared, strlen(prepared));
	free(prepared);
	switch (r) {
	case KDF_DONE:
		a->derive_ok = true;
		a->step = CLIENT_AUTH_DERIVED;
		return auth_client_resume(passthrough, a);
	case KDF_PENDING:
		a->step = CLIENT_AUTH_DERIVING;
		return AUTH_PENDING;
	case KDF_FAILED:
		break;
	}
	return AUTH_FAILED;
}

void auth_client_free(struct client_auth *a)
{
	if (!a)
		return;
	kdf_cancel(&a->req);   /* its result must not reach a login that is gone */
	if (a->pwcheck_job)
		offload_cancel(a->offload, a->pwcheck_job);
	ldap_opts_free(&a->ldap);
	free(a->pam_service);
	free(a->pam_rhost);
	if (a->pwcheck_password) {
		OPENSSL_cleanse(a->pwcheck_password, strlen(a->pwcheck_password));
		free(a->pwcheck_password);
	}
	/* md5 hashes, the digest of a password, the SCRAM keys: the whole
	 * state, whatever the method. */
	OPENSSL_cleanse(a, sizeof *a);
	free(a);
}

enum auth_outcome auth_client_step(struct worker *w, struct pool *passthrough, struct client_auth *a,
				   const char *user, const uint8_t *body, size_t len, struct buf *out)
{
	uint8_t storage[SCRAM_MAX_MESSAGE + 64];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	size_t off = 0;

	switch (a->step) {
	case CLIENT_AUTH_WANT_PASSWORD: {
		const char *given;
		if (!proto_read_cstring(body, len, &off, &given) || off != len)
			return AUTH_PROTOCOL_ERROR;
		if (!a->user_known)
			return AUTH_FAILED;
		char expected[PG_MD5_LEN + 1];
		pg_md5_response(a->md5_stored, a->md5_salt, expected);
		if (strlen(given) != PG_MD5_LEN || !pg_secure_streq(given, expected))
			return AUTH_FAILED;
		return AUTH_OK;
	}
	case CLIENT_AUTH_WANT_SASL_INITIAL: {
		const char *mech;
		if (!proto_read_cstring(body, len, &off, &mech) || len - off < 4)
			return AUTH_PROTOCOL_ERROR;
		if (strcmp(mech, "SCRAM-SHA-256") != 0)
			return AUTH_PROTOCOL_ERROR;
		uint32_t dlen = proto_get_u32(body + off);
		off += 4;
		if (dlen == 0xffffffffu || dlen != len - off)
			return AUTH_PROTOCOL_ERROR;
		uint8_t nonce[SCRAM_NONCE_RAW_LEN];
		if (!randpool_bytes(&w->rand, nonce, sizeof nonce))
			return AUTH_FAILED;
		char msg[SCRAM_MAX_MESSAGE + 1];
		size_t mlen;
		if (!scram_server_handle_first(&a->scram, (const char *)body + off, dlen, nonce, msg, sizeof msg, &mlen))
			return AUTH_PROTOCOL_ERROR;
		pktbuf_auth_request(&pb, AUTH_REQ_SASL_CONT, msg, mlen);
		if (pb.failed)
			return AUTH_FAILED;
		buf_add(out, pb.data, pb.len);
		a->step = CLIENT_AUTH_WANT_SASL_RESPONSE;
		return AUTH_CONTINUE;
	}
	case CLIENT_AUTH_WANT_SASL_RESPONSE: {
		char msg[SCRAM_MAX_MESSAGE + 1];
		size_t mlen;
		enum scram_verdict v = scram_server_handle_final(&a->scram, (const char *)body, len, msg, sizeof msg, &mlen);
		switch (v) {
		case SCRAM_OK:
			break;
		case SCRAM_BAD_PROOF:
			return AUTH_FAILED;
		case SCRAM_MALFORMED:
			return AUTH_PROTOCOL_ERROR;
		}
		if (!a->user_known)
			return AUTH_FAILED;
		/* The user's secret is a SCRAM verifier: the client's key is what
		 * logs pgcat in to servers with the same verifier. */
		keep_passthrough_key(passthrough, a->scram.secret.server_key, a->scram.client_key);
		pktbuf_auth_request(&pb, AUTH_REQ_SASL_FIN, msg, mlen);
		if (pb.failed)
			return AUTH_FAILED;
		buf_add(out, pb.data, pb.len);
		return AUTH_OK;
	}
	case CLIENT_AUTH_WANT_CLEARTEXT: {
		/* One NUL-terminated string filling the message (its length is
		 * bounded by the caller's PROTO_AUTH_MSG_MAX). */
		const char *given;
		if (!proto_read_cstring(body, len, &off, &given) || off != len)
			return AUTH_PROTOCOL_ERROR;
		if (a->method == CLIENT_AUTH_LDAP || a->method == CLIENT_AUTH_PAM)
			return check_outside(w, a, user, given);
		return check_cleartext(w, passthrough, a, user, given);
	}
	case CLIENT_AUTH_DERIVING:
	case CLIENT_AUTH_DERIVED:
		/* (the login reads no message while the key is derived) */
		return AUTH_PROTOCOL_ERROR;
	}
	return AUTH_PROTOCOL_ERROR;
}

const char *auth_server_user(const struct pool *p)
{
	return p->cuser ? config_user_server_name(p->cpool, p->cuser) : p->user;
}

const char *auth_server_password(const struct pool *p)
{
	return p->cuser ? config_user_server_password(p->cpool, p->cuser) : NULL;
}

bool auth_open_server_conn(struct bconn *b, const struct bconn_profile *profile, const struct pool *p,
			   const struct srvpool *sp, const char *host, const char *database)
{
	/* SCRAM pass-through, as for pooled connections: the key a client
	 * proved answers for the user. */
	bool passthrough = p->have_scram && p->have_passthrough_key;
	if (!bconn_set_login(b, auth_server_user(p), auth_server_password(p),
			     passthrough ? p->passthrough_client_key : NULL, passthrough ? p->scram.server_key : NULL))
		return false;
	return bconn_open(b, profile, host, sp->port, (const struct sockaddr *)&sp->addr, sp->addrlen, database);
}
