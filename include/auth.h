/* SPDX-License-Identifier: MIT */
/*
 * auth: which method a client must use and with what credentials; the
 * client side of the login exchange as a small state machine driven by
 * login.c. Crypto lives in auth_scram.c and auth_md5.c.
 */
#ifndef PGCAT_AUTH_H
#define PGCAT_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "auth_scram.h"
#include "kdf.h"
#include "ldap_opts.h"
#include "pwcheck.h"
#include "types.h"

/* PASSWORD: the password in clear (AuthenticationCleartextPassword).
 * LDAP, PAM: the password in clear, checked by an LDAP server
 * (ldap_auth.h) or by PAM (pam_auth.h). */
enum client_auth_method {
	CLIENT_AUTH_TRUST,
	CLIENT_AUTH_MD5,
	CLIENT_AUTH_SCRAM,
	CLIENT_AUTH_PASSWORD,
	CLIENT_AUTH_LDAP,
	CLIENT_AUTH_PAM,
};
enum client_auth_step {
	CLIENT_AUTH_WANT_PASSWORD,        /* md5: the salted hash */
	CLIENT_AUTH_WANT_SASL_INITIAL,
	CLIENT_AUTH_WANT_SASL_RESPONSE,
	CLIENT_AUTH_WANT_CLEARTEXT,       /* password: the password itself */
	/* password against a SCRAM verifier: its SaltedPassword is being
	 * derived off the loop (kdf.h); ldap, pam: the LDAP server or PAM
	 * is being asked (pwcheck.h). No message is read meanwhile. */
	CLIENT_AUTH_DERIVING,
	CLIENT_AUTH_DERIVED,              /* the derivation (or bind) is over: auth_client_resume */
};
/* Who picks the method: auth_type (0, what a zeroed client_auth says), or
 * the auth_hba_file line that matched the login, set by the caller before
 * auth_client_begin. LDAP: an hba line's ldap, or auth_type = ldap; the
 * caller copies the options into client_auth's ldap first. PAM: an hba
 * line's pam, or auth_type = pam; the caller sets pam_service and
 * pam_rhost first. */
enum client_auth_rule { AUTH_RULE_AUTH_TYPE, AUTH_RULE_TRUST, AUTH_RULE_MD5, AUTH_RULE_SCRAM, AUTH_RULE_PASSWORD,
			AUTH_RULE_LDAP, AUTH_RULE_PAM };
/* The stored secret a password given in clear is checked against. */
enum client_auth_secret { AUTH_SECRET_PLAIN, AUTH_SECRET_MD5, AUTH_SECRET_SCRAM };

struct client_auth {
	enum client_auth_method method;
	enum client_auth_step step;
	enum client_auth_rule rule;
	bool user_known;              /* false: run the exchange, then refuse (SPEC §3) */
	uint8_t md5_salt[4];
	char md5_stored[40];          /* "md5..." (md5; password with an md5 secret) */
	/* password: what the given password is checked against, copied at
	 * the start (a reload may free the config's meanwhile). */
	enum client_auth_secret secret_kind;
	uint8_t plain_digest[SCRAM_KEY_LEN];   /* SHA-256 of a plaintext secret */
	struct scram_secret verifier;          /* a SCRAM secret (or an unknown user's fake) */
	/* ldap: the options (the caller's copy; the bind takes them); pam:
	 * the service and the client's address (the caller's copies). Then
	 * the check under way, its verdict and why, and the password it
	 * took, kept for the user's logins to servers
	 * (auth_client_proven_password). */
	struct ldap_opts ldap;
	char *pam_service, *pam_rhost;
	struct offload *offload;
	struct offload_job *pwcheck_job;
	enum pwcheck_verdict pwcheck_verdict;
	char *pwcheck_password;
	char pwcheck_why[PWCHECK_WHY_MAX];
	/* The derivation for a SCRAM secret: set by the caller before
	 * auth_client_begin, derived(arg) is called on the loop when it is
	 * over (never after auth_client_free). */
	void (*derived)(void *arg);
	void *arg;
	struct kdf_request req;
	bool derive_ok;
	uint8_t salted[SCRAM_KEY_LEN];
	struct scram_server scram;    /* last: valid once scram_server_init ran (method SCRAM) */
};

/* PENDING: nothing to send yet; the derived event comes, then
 * auth_client_resume gives the outcome. */
enum auth_outcome { AUTH_CONTINUE, AUTH_OK, AUTH_FAILED, AUTH_PROTOCOL_ERROR, AUTH_PENDING };

/* What a user logs in with: the configured password (plaintext, md5 hash
 * or SCRAM secret) and, when one could be made, its SCRAM verifier. */
struct auth_credentials {
	const char *password;
	const struct scram_secret *scram;
};

/* Start: choose the method and write the first AuthenticationRequest into
 * out, for user. cred NULL: unknown user (the exchange runs and fails at
 * the end). */
enum auth_outcome auth_client_begin(struct worker *w, const char *user, const struct auth_credentials *cred,
				    struct client_auth *a, struct buf *out)
	__attribute__((warn_unused_result));
/* Handle one 'p' message body from the client, user's. passthrough: the
 * pool whose servers a verified SCRAM ClientKey may log in to (SCRAM
 * pass-through; NULL: none, e.g. the admin console). */
enum auth_outcome auth_client_step(struct worker *w, struct pool *passthrough, struct client_auth *a,
				   const char *user, const uint8_t *body, size_t len, struct buf *out)
	__attribute__((warn_unused_result));
/* After the derived event: the verdict on the password (AUTH_OK or
 * AUTH_FAILED), passthrough as for auth_client_step. */
enum auth_outcome auth_client_resume(struct pool *passthrough, struct client_auth *a)
	__attribute__((warn_unused_result));
/* Waiting for the derived event: no message is to be read. */
static inline bool auth_client_pending(const struct client_auth *a)
{
	return a->step == CLIENT_AUTH_DERIVING;
}
/* ldap, pam, once AUTH_OK: the password the LDAP server or PAM took (the
 * user's servers are logged in to with it); NULL for the other methods. */
static inline const char *auth_client_proven_password(const struct client_auth *a)
{
	return (a->method == CLIENT_AUTH_LDAP || a->method == CLIENT_AUTH_PAM) && a->pwcheck_verdict == PWCHECK_OK
		       ? a->pwcheck_password
		       : NULL;
}
/* Cancel a derivation or bind under way, wipe the state (keys, hashes,
 * passwords), free it. NULL: nothing. */
void auth_client_free(struct client_auth *a);

/* A ClientKey a client proved to the process this one took over from
 * (-R), with the ServerKey it was proved against: kept for p's server
 * logins as if proved here, when p holds that same verifier (made
 * already: pool_client_scram). */
void auth_adopt_passthrough_key(struct pool *p, const uint8_t server_key[SCRAM_KEY_LEN],
				const uint8_t client_key[SCRAM_KEY_LEN]);

/* Server side: the password pgcat logs in to servers with for this pool's user. */
const char *auth_server_user(const struct pool *p);
const char *auth_server_password(const struct pool *p);
/* Opens b (a connection of pgcat's own, bconn.h) to sp, logged in as p's
 * server user: its password, or the SCRAM keys a client proved (pass-
 * through). host and database must live while b is open. false: the
 * connect could not start (out of memory, or b's down event ran). */
struct bconn;
struct bconn_profile;
bool auth_open_server_conn(struct bconn *b, const struct bconn_profile *profile, const struct pool *p,
			   const struct srvpool *sp, const char *host, const char *database);

#endif
