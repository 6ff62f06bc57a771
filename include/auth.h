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

#include "auth_scram.h"
#include "types.h"

enum client_auth_method { CLIENT_AUTH_TRUST, CLIENT_AUTH_MD5, CLIENT_AUTH_SCRAM };
enum client_auth_step { CLIENT_AUTH_WANT_PASSWORD, CLIENT_AUTH_WANT_SASL_INITIAL, CLIENT_AUTH_WANT_SASL_RESPONSE };
/* Who picks the method: auth_type (0, what a zeroed client_auth says), or
 * the auth_hba_file line that matched the login, set by the caller before
 * auth_client_begin. */
enum client_auth_rule { AUTH_RULE_AUTH_TYPE, AUTH_RULE_TRUST, AUTH_RULE_MD5, AUTH_RULE_SCRAM };

struct client_auth {
	enum client_auth_method method;
	enum client_auth_step step;
	enum client_auth_rule rule;
	bool user_known;              /* false: run the exchange, then refuse (SPEC §3) */
	uint8_t md5_salt[4];
	char md5_stored[40];          /* "md5..." */
	struct scram_server scram;    /* last: valid once scram_server_init ran (method SCRAM) */
};

enum auth_outcome { AUTH_CONTINUE, AUTH_OK, AUTH_FAILED, AUTH_PROTOCOL_ERROR };

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
				    struct client_auth *a, struct evbuffer *out)
	__attribute__((warn_unused_result));
/* Handle one 'p' message body from the client. passthrough: the pool whose
 * servers a verified SCRAM ClientKey may log in to (SCRAM pass-through;
 * NULL: none, e.g. the admin console). */
enum auth_outcome auth_client_step(struct worker *w, struct pool *passthrough, struct client_auth *a,
				   const uint8_t *body, size_t len, struct evbuffer *out)
	__attribute__((warn_unused_result));

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
