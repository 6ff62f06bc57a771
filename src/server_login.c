/* SPDX-License-Identifier: MIT */
/*
 * server_login: a new server connection's login, the state SERVER_LOGIN of
 * server.c (server_login.h): the SSLRequest's answer and the TLS handshake's
 * start, the StartupMessage with the pool's own startup parameters, the
 * authentication exchange (auth_backend.c; a SCRAM key derived off the loop
 * comes back through the caller's callback), the server's settings,
 * protocol version and cancel key, and the pool's connect_query. Below
 * server.c: it reads and writes the connection and reports a verdict; the
 * state changes, the closing and the log lines of a failure are server.c's.
 */
#include "server_login.h"

#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "auth_backend.h"
#include "config.h"
#include "context.h"
#include "dns.h"
#include "buf_msg.h"
#include "log.h"
#include "pktbuf.h"
#include "pool_types.h"
#include "proto.h"
#include "server.h"
#include "shm.h"
#include "tls.h"

void server_login_auth_free(struct server *s)
{
	if (!s->auth)
		return;
	auth_backend_clear(s->auth);   /* a pass-through key, maybe */
	free(s->auth);
	s->auth = NULL;
}

static bool send_startup(struct server *s)
{
	uint8_t storage[1024];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_begin(&pb, 0);
	/* 3.2 (cancel keys as long as the server likes); PostgreSQL 13 to 17
	 * answer with a NegotiateProtocolVersion down to 3.0. */
	pktbuf_put_u32(&pb, PG_PROTOCOL_3_2);
	s->protocol = PG_PROTOCOL_3_2;
	pktbuf_put_cstring(&pb, "user");
	pktbuf_put_cstring(&pb, auth_server_user(s->sp->pool));
	pktbuf_put_cstring(&pb, "database");
	pktbuf_put_cstring(&pb, s->sp->database);
	/* The pool's own startup parameters (PgBouncer's per-database
	 * client_encoding, datestyle, timezone, application_name): the
	 * server's values for clients that set none of their own. */
	const struct config_pool *cp = s->sp->pool->cpool;
	const char *const names[] = { "client_encoding", "datestyle", "timezone", "application_name" };
	const char *const values[] = { cp->client_encoding, cp->datestyle, cp->timezone, cp->application_name };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (values[i] != NULL) {
			pktbuf_put_cstring(&pb, names[i]);
			pktbuf_put_cstring(&pb, values[i]);
		}
	}
	pktbuf_put_u8(&pb, 0);
	pktbuf_end(&pb);
	if (pb.failed)
		return false;
	buf_add(io_out(&s->io), pb.data, pb.len);
	return true;
}

/* The login fails for pgcat's reason; the caller closes the connection. */
static void login_fail(struct server_login_failure *fail, const char *why)
{
	fail->why = why;
	fail->refused = false;
}

/* What auth_backend made of an 'R' (or of a finished key derivation):
 * send it, or fail the login. false: the login failed (fail->why). */
static bool auth_answered(struct server *s, enum auth_backend_result r, struct pktbuf *pb, const char *error,
			  struct server_login_failure *fail)
{
	if (r == AUTH_BACKEND_CONTINUE && pb->len > 0)
		buf_add(io_out(&s->io), pb->data, pb->len);
	OPENSSL_cleanse(pb->data, pb->cap);   /* a cleartext password, maybe */
	switch (r) {
	case AUTH_BACKEND_DONE:
		server_login_auth_free(s);
		return true;
	case AUTH_BACKEND_CONTINUE:
	case AUTH_BACKEND_PENDING:   /* (server_login_read waits for server_login_derived) */
		return true;
	case AUTH_BACKEND_FAILED:
		break;
	}
	if (s->auth && s->auth->wrong_secret && !s->have_error) {
		/* No secret the server's method can use: every login would fail
		 * alike, so the clients waiting are told now (28000 fails them,
		 * pool.c), in PgBouncer's words on a pgbouncer.ini. */
		s->have_error = true;
		snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "28000");
		snprintf(s->error_message, sizeof s->error_message, "%s",
			 s->w->cfg->pgbouncer ? "server login failed: wrong password type" : error);
		log_warning("S-%llu %s:%d: %s", (unsigned long long)s->id, s->sp->host, s->sp->port, error);
		login_fail(fail, s->error_message);
		return false;
	}
	login_fail(fail, error);
	return false;
}

bool server_login_derived(struct server *s, struct server_login_failure *fail)
{
	uint8_t storage[AUTH_BACKEND_MAX_MESSAGE];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	const char *error;
	enum auth_backend_result r = auth_backend_resume(s->auth, &pb, &error);
	return auth_answered(s, r, &pb, error, fail);
}

/* One 'R' message during login; false: the login failed (fail->why). */
static bool handle_auth_request(struct server *s, const uint8_t *body, size_t len, void (*derived)(void *),
				struct server_login_failure *fail)
{
	/* Kept from the SASL request to its last step; allocated here, on the
	 * first request, to keep idle servers small. */
	if (!s->auth) {
		if (!(s->auth = calloc(1, sizeof *s->auth))) {
			login_fail(fail, "out of memory");
			return false;
		}
		auth_backend_init(s->auth, s->w->kdf, derived, s);
	}
	struct pool *pool = s->sp->pool;
	bool have_key = pool->have_scram && pool->have_passthrough_key;
	const struct auth_backend_secret sec = {
		.user = auth_server_user(pool),
		.password = auth_server_password(pool),
		.passthrough_client_key = have_key ? pool->passthrough_client_key : NULL,
		.passthrough_server_key = have_key ? pool->scram.server_key : NULL,
	};
	uint8_t storage[AUTH_BACKEND_MAX_MESSAGE];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	const char *error;
	enum auth_backend_result r = auth_backend_answer(s->auth, &sec, body, len, &pb, &error);
	return auth_answered(s, r, &pb, error, fail);
}

void server_login_note_error(struct server *s, const uint8_t *body, size_t len)
{
	struct proto_error_fields f;
	if (!proto_parse_error(body, len, &f))
		return;
	s->have_error = true;
	snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "%s", f.sqlstate ? f.sqlstate : "08006");
	snprintf(s->error_message, sizeof s->error_message, "%s", f.message ? f.message : "server error");
}


/* The server's one-byte answer to pgcat's SSLRequest. Returns true when
 * the login goes on in this call (in clear, after 'N'); false when it
 * waits (for the answer, or for the handshake) or failed (fail->why). */
static bool handle_ssl_answer(struct server *s, struct server_login_failure *fail)
{
	struct buf *in = s->io.in;
	uint8_t b;
	if (buf_copyout(in, &b, 1) < 1)
		return false;
	buf_drain(in, 1);
	enum tls_mode mode = s->w->cfg->general.server_tls_sslmode;
	if (b == 'N') {
		if (mode >= TLS_MODE_REQUIRE) {
			login_fail(fail, "the server does not support TLS, and server_tls_sslmode requires it");
			return false;
		}
		s->tls_phase = SERVER_TLS_NONE;
		if (!send_startup(s)) {
			login_fail(fail, "startup packet too long");
			return false;
		}
		return true;
	}
	if (b != 'S') {
		login_fail(fail, "the server answered the SSL request with something else than S or N");
		return false;
	}
	/* Bytes after 'S' would be taken as if encrypted (CVE-2021-23222). */
	if (buf_len(in) > 0) {
		login_fail(fail, "the server sent unencrypted data after accepting TLS");
		return false;
	}
	fail->why = server_login_start_tls(s, false);
	return false;
}

const char *server_login_start_tls(struct server *s, bool direct)
{
	enum tls_mode mode = s->w->cfg->general.server_tls_sslmode;
	SSL *ssl = SSL_new(s->w->tls.for_servers);
	/* ALPN "postgresql", as libpq 17 offers it: PostgreSQL 17 requires
	 * it on a direct handshake, and earlier servers ignore it. */
	if (!ssl || !tls_offer_alpn(ssl)) {
		SSL_free(ssl);
		return "cannot start TLS (out of memory)";
	}
	SSL_set_connect_state(ssl);
	if (direct)
		tls_mark_direct(ssl);   /* checked when the handshake is done */
	struct sockaddr_storage ss;
	socklen_t sl;
	bool literal = dns_literal(s->sp->host, s->sp->port, &ss, &sl);
	if (!literal)
		(void)SSL_set_tlsext_host_name(ssl, s->sp->host);
	if (mode == TLS_MODE_VERIFY_FULL) {
		/* The certificate must name the host as configured. */
		int ok = literal ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), s->sp->host)
				 : SSL_set1_host(ssl, s->sp->host);
		if (ok != 1) {
			SSL_free(ssl);
			return "cannot set the host name to verify";
		}
	}
	s->tls_phase = SERVER_TLS_HANDSHAKE;
	io_start_tls(&s->io, ssl);
	return NULL;
}

/* The pool's connect_query (SPEC §2), once, at the end of the login: true
 * when it went out and its answer is awaited before the server is ready
 * (or it failed: fail->why). */
static bool send_connect_query(struct server *s, struct server_login_failure *fail)
{
	const char *q = s->sp->pool->cpool ? s->sp->pool->cpool->connect_query : NULL;
	if (q == NULL || q[0] == '\0')
		return false;
	size_t n = strlen(q);
	if (n > UINT32_MAX - 64) {
		login_fail(fail, "connect_query is too long");
		return true;
	}
	uint8_t hdr[5] = { PqMsg_Query };
	proto_put_u32(hdr + 1, (uint32_t)(4 + n + 1));
	struct buf *out = io_out(&s->io);
	buf_add(out, hdr, sizeof hdr);
	buf_add(out, q, n + 1);
	s->connect_query_sent = true;
	log_debug("S-%llu %s:%d: running connect_query", (unsigned long long)s->id, s->sp->host, s->sp->port);
	return true;
}

/* While connect_query runs: its rows, row descriptions, command tags and
 * notices are dropped, whatever their size (its result is discarded). 1:
 * one such message dropped; 0: not one of those (the login's own
 * handling follows); -1: wait for more input, or the connection is gone. */
static int skip_connect_query_reply(struct buf *in, const uint8_t *hdr, struct server_login_failure *fail)
{
	struct proto_frame f;
	if (proto_frame_header(hdr, 5, SERVER_MAX_MESSAGE, &f) != PROTO_FRAME_OK) {
		login_fail(fail, "server sent an invalid message during connect_query");
		return -1;
	}
	switch (f.type) {
	case PqMsg_RowDescription:
	case PqMsg_DataRow:
	case PqMsg_CommandComplete:
	case PqMsg_EmptyQueryResponse:
	case PqMsg_NoticeResponse:
	case PqMsg_NotificationResponse:
		break;
	case PqMsg_CopyInResponse:
	case PqMsg_CopyOutResponse:
	case PqMsg_CopyBothResponse:
		login_fail(fail, "connect_query must not run COPY");
		return -1;
	default:
		return 0;
	}
	if (buf_len(in) < (size_t)f.len + 1)
		return -1;
	buf_drain(in, (size_t)f.len + 1);
	return 1;
}

const char *server_login_start(struct server *s)
{
	return send_startup(s) ? NULL : "startup packet too long";
}

/* A step that stopped without a whole message: failed if it said why,
 * otherwise waiting for more bytes. */
static enum server_login_step failed_or_wait(const struct server_login_failure *fail)
{
	return fail->why ? SERVER_LOGIN_FAILED : SERVER_LOGIN_WAIT;
}

enum server_login_step server_login_read(struct server *s, void (*derived)(void *), struct server_login_failure *fail)
{
	struct buf *in = s->io.in;
	uint8_t buf[SERVER_INSPECT_MAX];
	fail->why = NULL;
	fail->refused = false;
	if (s->tls_phase == SERVER_TLS_WAIT_ANSWER && !handle_ssl_answer(s, fail))
		return failed_or_wait(fail);
	if (s->tls_phase == SERVER_TLS_HANDSHAKE)
		return SERVER_LOGIN_WAIT;
	for (;;) {
		/* Nothing more is read until the SCRAM key is there (derived). */
		if (s->auth && auth_backend_pending(s->auth))
			return SERVER_LOGIN_WAIT;
		uint8_t hdr[5];
		if (buf_copyout(in, hdr, 5) < 5)
			return SERVER_LOGIN_WAIT;
		struct proto_frame f;
		if (s->connect_query_sent) {
			int r = skip_connect_query_reply(in, hdr, fail);
			if (r < 0)
				return failed_or_wait(fail);
			if (r > 0)
				continue;
		}
		if (proto_frame_header(hdr, 5, SERVER_INSPECT_MAX - 1, &f) != PROTO_FRAME_OK) {
			login_fail(fail, "server sent an invalid message during login");
			return SERVER_LOGIN_FAILED;
		}
		if (!buf_take_whole(in, f.len + 1, buf))
			return SERVER_LOGIN_WAIT;
		const uint8_t *body = buf + 5;
		size_t blen = f.len - 4;
		switch (f.type) {
		case PqMsg_AuthenticationRequest:
			if (!handle_auth_request(s, body, blen, derived, fail))
				return SERVER_LOGIN_FAILED;
			break;
		case PqMsg_ParameterStatus: {
			const char *name, *value;
			if (proto_parse_parameter_status(body, blen, &name, &value))
				(void)params_set(&s->params, name, value, false);
			break;
		}
		case PqMsg_BackendKeyData:
			/* pid, then the key: 4 bytes in 3.0, up to 256 in 3.2. A
			 * key of another length leaves the connection without a
			 * key (its queries cannot be cancelled), as before. */
			if (blen >= 4 + PROTO_CANCEL_KEY_MIN && blen <= 4 + PROTO_CANCEL_KEY_MAX &&
			    (s->protocol >= PG_PROTOCOL_3_2 || blen == 8)) {
				_Static_assert(sizeof s->backend_key == PROTO_CANCEL_KEY_MAX, "room for any key");
				s->backend_pid = proto_get_u32(body);
				if (s->pid_slot < 0)
					s->pid_slot = shm_backend_claim(s->w->shm, s->backend_pid, s->sp->shm_target);
				s->backend_key_len = (uint16_t)(blen - 4);
				memcpy(s->backend_key, body + 4, blen - 4);
			}
			break;
		case PqMsg_NegotiateProtocolVersion: {
			/* We asked for 3.2 and no protocol options: a server that
			 * speaks less says which 3.x it will use. */
			uint32_t version, n_unknown;
			if (!proto_parse_negotiate(body, blen, &version, &n_unknown) ||
			    PG_PROTOCOL_MAJOR(version) != 3 || version > s->protocol) {
				login_fail(fail, "server sent an invalid NegotiateProtocolVersion");
				return SERVER_LOGIN_FAILED;
			}
			s->protocol = version;
			log_debug("S-%llu %s:%d: server speaks protocol 3.%u", (unsigned long long)s->id, s->sp->host,
				  s->sp->port, PG_PROTOCOL_MINOR(version));
			break;
		}
		case PqMsg_ErrorResponse: {
			server_login_note_error(s, body, blen);
			if (s->connect_query_sent) {
				/* The client sees it as a failed login, saying why. */
				char msg[sizeof s->error_message];
				snprintf(msg, sizeof msg, "%s", s->error_message);
				static const char pfx[] = "connect_query failed: ";
				size_t room = sizeof s->error_message - (sizeof pfx - 1);
				memcpy(s->error_message, pfx, sizeof pfx - 1);
				snprintf(s->error_message + sizeof pfx - 1, room, "%.*s", (int)(room - 1), msg);
			}
			fail->why = s->error_message;
			fail->refused = !s->connect_query_sent;
			return SERVER_LOGIN_FAILED;
		}
		case PqMsg_ReadyForQuery:
			if (!s->connect_query_sent && send_connect_query(s, fail)) {
				if (fail->why)
					return SERVER_LOGIN_FAILED;
				break;
			}
			s->txn.tx_status = blen >= 1 ? (char)body[0] : 'I';
			server_login_auth_free(s);
			log_debug("S-%llu %s:%d: login done (backend pid %u, protocol 3.%u, key of %u bytes)",
				  (unsigned long long)s->id, s->sp->host, s->sp->port, s->backend_pid,
				  PG_PROTOCOL_MINOR(s->protocol), (unsigned)s->backend_key_len);
			return SERVER_LOGIN_READY;
		case PqMsg_NoticeResponse:
			break;
		default:
			login_fail(fail, "server sent an unexpected message during login");
			return SERVER_LOGIN_FAILED;
		}
	}
}

