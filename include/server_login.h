/* SPDX-License-Identifier: MIT */
/*
 * server_login: a new server connection's login (src/server_login.c), below
 * server.c: it moves the login on as far as the input allows and says where
 * it stands; server.c changes the state, reports ready, or closes.
 */
#ifndef PGCAT_SERVER_LOGIN_H
#define PGCAT_SERVER_LOGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct server;

enum server_login_step {
	SERVER_LOGIN_WAIT,     /* more input, the TLS handshake, or a key derivation */
	SERVER_LOGIN_READY,    /* logged in (ReadyForQuery, connect_query done) */
	SERVER_LOGIN_FAILED    /* see the failure; the caller closes */
};
struct server_login_failure {
	const char *why;   /* a literal, or the server's error (s->error_message) */
	bool refused;      /* the server's own FATAL during the login */
};

/* The connection is open (and its TLS handshake done, if any): the
 * StartupMessage. NULL, or why it could not go out. */
const char *server_login_start(struct server *s);
/* The TLS handshake, after the server's 'S' or (server_tls_negotiation =
 * direct) at once on the new connection; its end comes as IO_TLS_READY.
 * NULL, or why it could not start. */
const char *server_login_start_tls(struct server *s, bool direct);
/* What arrived during the login. derived: called (with s) when a SCRAM
 * key derived off the loop is there; the caller then calls
 * server_login_derived and, if it is still on, server_login_read again. */
enum server_login_step server_login_read(struct server *s, void (*derived)(void *), struct server_login_failure *fail);
/* The key is there: the answer goes out. false: the login failed. */
bool server_login_derived(struct server *s, struct server_login_failure *fail);
/* The authentication exchange's state, freed (at the end of a login, or
 * when the connection closes). */
void server_login_auth_free(struct server *s);
/* An ErrorResponse's SQLSTATE and message kept for the clients waiting
 * (during the login, or a FATAL later). */
void server_login_note_error(struct server *s, const uint8_t *body, size_t len);

#endif
