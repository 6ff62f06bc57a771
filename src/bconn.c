/* SPDX-License-Identifier: MIT */
/*
 * bconn: a connection of pgcat's own to a server (include/bconn.h): the
 * connect, TLS and login of a small PostgreSQL client over io.c, and the
 * framing of what the server sends once logged in.
 */
#include "bconn.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "context.h"
#include "dns.h"
#include "buf_msg.h"
#include "params.h"
#include "pktbuf.h"
#include "proto.h"
#include "tls.h"

static void read_cb(struct io *io, void *arg);
static void drain_cb(struct io *io, void *arg);
static void event_cb(struct io *io, enum io_event what, int err, void *arg);
static void auth_derived(void *arg);

static const struct io_ops bconn_io_ops = {
	.on_read = read_cb,
	.on_drain = drain_cb,
	.on_event = event_cb,
	.write_low = 0,
	.owner_offset = offsetof(struct bconn, io),
};

static void set_state(struct bconn *b, enum bconn_state st)
{
	b->state = st;
	b->state_since_us = b->w->now_us;
}

void bconn_init(struct bconn *b, struct worker *w, void (*on_ready)(void *arg),
		bool (*on_message)(void *arg, uint8_t type, const uint8_t *body, size_t len),
		void (*on_down)(void *arg, const char *why), void *arg)
{
	b->w = w;
	b->on_ready = on_ready;
	b->on_message = on_message;
	b->on_down = on_down;
	b->arg = arg;
	b->io.closed = true;
	b->io.fd = -1;
	b->state = BCONN_CLOSED;
	auth_backend_init(&b->auth, w ? w->kdf : NULL, auth_derived, b);
}

static void wipe_secret(struct bconn *b)
{
	if (b->password) {
		OPENSSL_cleanse(b->password, strlen(b->password));
		free(b->password);
		b->password = NULL;
	}
	OPENSSL_cleanse(b->passthrough_client_key, sizeof b->passthrough_client_key);
	OPENSSL_cleanse(b->passthrough_server_key, sizeof b->passthrough_server_key);
	b->have_passthrough = false;
	auth_backend_clear(&b->auth);
}

bool bconn_set_login(struct bconn *b, const char *user, const char *password, const uint8_t *client_key,
		     const uint8_t *server_key)
{
	wipe_secret(b);
	free(b->user);
	b->user = strdup(user ? user : "");
	if (!b->user || (password && !(b->password = strdup(password)))) {
		wipe_secret(b);
		free(b->user);
		b->user = NULL;
		return false;
	}
	if (client_key && server_key) {
		memcpy(b->passthrough_client_key, client_key, SCRAM_KEY_LEN);
		memcpy(b->passthrough_server_key, server_key, SCRAM_KEY_LEN);
		b->have_passthrough = true;
	}
	return true;
}

void bconn_close(struct bconn *b, bool terminate)
{
	if (b->state == BCONN_CLOSED) {
		wipe_secret(b);   /* a login set but never opened */
		return;
	}
	if (terminate && b->state == BCONN_READY && !b->io.closed) {
		buf_add_bodyless(io_out(&b->io), PqMsg_Terminate);   /* to be polite */
		io_flush(&b->io);
	}
	io_close(&b->io);
	wipe_secret(b);
	set_state(b, BCONN_CLOSED);
}

void bconn_release(struct bconn *b)
{
	bconn_close(b, false);
	wipe_secret(b);
	free(b->user);
	b->user = NULL;
}

/* The owner hears why, then it is closed (if the owner did not). */
static void fail(struct bconn *b, const char *why)
{
	if (b->state == BCONN_CLOSED)
		return;
	b->on_down(b->arg, why);
	bconn_close(b, false);
}

/* The login failed: the owner's words before the reason. */
static void fail_login(struct bconn *b, const char *words, const char *why)
{
	char m[300];
	snprintf(m, sizeof m, "%s%s", words ? words : "", why);
	fail(b, m);
}

bool bconn_open(struct bconn *b, const struct bconn_profile *profile, const char *host, int port,
		const struct sockaddr *addr, socklen_t addrlen, const char *database)
{
	b->profile = profile;
	b->server_error[0] = '\0';
	b->host = host;
	b->port = port;
	b->database = database;
	b->unix_socket = addr->sa_family == AF_UNIX;
	set_state(b, BCONN_CONNECTING);   /* so that a failure closes it */
	if (!io_connect(&b->io, b->w->base, &b->w->flusher, addr, addrlen, profile->read_high, &bconn_io_ops)) {
		char why[160];
		snprintf(why, sizeof why, "cannot connect: %s", strerror(errno));
		fail(b, why);
		return false;
	}
	return true;
}

bool bconn_adopt(struct bconn *b, const struct bconn_profile *profile, int fd, const char *host, int port,
		 const char *database)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	b->profile = profile;
	b->server_error[0] = '\0';
	b->host = host;
	b->port = port;
	b->database = database;
	b->unix_socket = getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_UNIX;
	if (!io_open(&b->io, b->w->base, &b->w->flusher, fd, profile->read_high, &bconn_io_ops)) {
		close(fd);
		return false;
	}
	/* (Before the loop runs again: nothing is handed to the owner yet.) */
	io_pause(&b->io, true);
	set_state(b, BCONN_READY);
	return true;
}

/* ---- sending ---- */

/* The longest message sent: a length that an int32 holds. */
#define BCONN_MAX_SEND ((size_t)INT32_MAX)

static void put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* A message header: type (0: none, the StartupMessage) and length. */
static void put_header(struct buf *out, uint8_t type, size_t len)
{
	uint8_t h[5];
	size_t n = 0;
	if (type)
		h[n++] = type;
	put_u32(h + n, (uint32_t)len);
	buf_add(out, h, n + 4);
}

static void put_u16(struct buf *out, uint16_t v)
{
	uint8_t p[2] = { (uint8_t)(v >> 8), (uint8_t)v };
	buf_add(out, p, 2);
}

static void put_cstring(struct buf *out, const char *s)
{
	buf_add(out, s, strlen(s) + 1);
}

bool bconn_query(struct bconn *b, const char *sql)
{
	size_t len = 4 + strlen(sql) + 1;
	if (len > BCONN_MAX_SEND)
		return false;
	struct buf *out = io_out(&b->io);
	put_header(out, PqMsg_Query, len);
	put_cstring(out, sql);
	return true;
}

void bconn_send(struct bconn *b, uint8_t type, const void *body, size_t len)
{
	struct buf *out = io_out(&b->io);
	put_header(out, type, 4 + len);
	if (len)
		buf_add(out, body, len);
}

bool bconn_extended(struct bconn *b, const char *sql, size_t n_params, const char *const *params)
{
	size_t parse_len = 4 + 1 + strlen(sql) + 1 + 2;
	size_t bind_len = 4 + 1 + 1 + 2 + 2 + 2;
	if (n_params > UINT16_MAX)
		return false;
	for (size_t i = 0; i < n_params; i++)
		bind_len += 4 + strlen(params[i]);
	if (parse_len > BCONN_MAX_SEND || bind_len > BCONN_MAX_SEND)
		return false;
	struct buf *out = io_out(&b->io);
	put_header(out, PqMsg_Parse, parse_len);
	put_cstring(out, "");                 /* the unnamed statement */
	put_cstring(out, sql);
	put_u16(out, 0);                      /* the server infers the types */
	put_header(out, PqMsg_Bind, bind_len);
	put_cstring(out, "");                 /* the unnamed portal */
	put_cstring(out, "");
	put_u16(out, 0);                      /* parameters in text */
	put_u16(out, (uint16_t)n_params);
	for (size_t i = 0; i < n_params; i++) {
		uint8_t l[4];
		put_u32(l, (uint32_t)strlen(params[i]));
		buf_add(out, l, 4);
		buf_add(out, params[i], strlen(params[i]));
	}
	put_u16(out, 0);                      /* results in text */
	put_header(out, PqMsg_Execute, 4 + 1 + 4);
	put_cstring(out, "");
	static const uint8_t all_rows[4] = { 0, 0, 0, 0 };
	buf_add(out, all_rows, 4);
	put_header(out, PqMsg_Sync, 4);
	return true;
}

/* ---- login ---- */

static void send_startup(struct bconn *b)
{
	uint8_t storage[PROTO_STARTUP_MAX + 512];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_begin(&pb, 0);
	pktbuf_put_u32(&pb, PG_PROTOCOL_3_0);
	pktbuf_put_cstring(&pb, "user");
	pktbuf_put_cstring(&pb, bconn_user(b));
	pktbuf_put_cstring(&pb, "database");
	pktbuf_put_cstring(&pb, b->database);
	const struct param *own_name = b->startup_params ? params_get(b->startup_params, "application_name") : NULL;
	if (!own_name) {
		pktbuf_put_cstring(&pb, "application_name");
		pktbuf_put_cstring(&pb, b->profile->application_name);
	}
	for (size_t i = 0; b->startup_params && i < params_count(b->startup_params); i++) {
		const struct param *p = params_at(b->startup_params, i);
		pktbuf_put_cstring(&pb, p->name);
		pktbuf_put_cstring(&pb, p->value);
	}
	if (b->replication) {
		pktbuf_put_cstring(&pb, "replication");
		pktbuf_put_cstring(&pb, b->replication);
	}
	pktbuf_put_u8(&pb, 0);
	pktbuf_end(&pb);
	if (pb.failed) {
		fail(b, "startup packet too long");
		return;
	}
	buf_add(io_out(&b->io), pb.data, pb.len);
	set_state(b, BCONN_LOGIN);
}

/* What auth_backend made of an 'R' or a finished key derivation: sent;
 * false: give up (the reason is in *why). */
static bool auth_answered(struct bconn *b, enum auth_backend_result r, struct pktbuf *pb)
{
	if (r == AUTH_BACKEND_CONTINUE && pb->len > 0)
		buf_add(io_out(&b->io), pb->data, pb->len);
	OPENSSL_cleanse(pb->data, pb->cap);   /* a cleartext password, maybe */
	if (r == AUTH_BACKEND_DONE)
		auth_backend_clear(&b->auth);   /* the SCRAM keys are of no more use */
	return r != AUTH_BACKEND_FAILED;
}

/* One AuthenticationRequest; false: give up (the reason is in *why). */
static bool handle_auth(struct bconn *b, const uint8_t *body, size_t len, const char **why)
{
	const struct auth_backend_secret sec = {
		.user = bconn_user(b),
		.password = b->password,
		.passthrough_client_key = b->have_passthrough ? b->passthrough_client_key : NULL,
		.passthrough_server_key = b->have_passthrough ? b->passthrough_server_key : NULL,
	};
	uint8_t storage[AUTH_BACKEND_MAX_MESSAGE];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	return auth_answered(b, auth_backend_answer(&b->auth, &sec, body, len, &pb, why), &pb);
}

/* The handshake, after 'S' or (server_tls_negotiation = direct) at once;
 * ALPN "postgresql" offered as server.c does. */
static void start_tls(struct bconn *b, bool direct)
{
	struct worker *w = b->w;
	enum tls_mode mode = w->cfg->general.server_tls_sslmode;
	SSL *ssl = w->tls.for_servers ? SSL_new(w->tls.for_servers) : NULL;
	if (!ssl || !tls_offer_alpn(ssl)) {
		SSL_free(ssl);
		fail(b, "cannot start TLS");
		return;
	}
	SSL_set_connect_state(ssl);
	if (direct)
		tls_mark_direct(ssl);
	struct sockaddr_storage ss;
	socklen_t sl;
	bool literal = dns_literal(b->host, b->port, &ss, &sl);
	if (!literal)
		(void)SSL_set_tlsext_host_name(ssl, b->host);
	if (mode == TLS_MODE_VERIFY_FULL) {
		int ok = literal ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), b->host) : SSL_set1_host(ssl, b->host);
		if (ok != 1) {
			SSL_free(ssl);
			fail(b, "cannot set the host name to verify");
			return;
		}
	}
	set_state(b, BCONN_TLS_HANDSHAKE);
	io_start_tls(&b->io, ssl);
}

/* The answer to the SSLRequest; false when the connection went down or
 * the handshake began (its end comes as IO_TLS_READY). */
static bool handle_ssl_answer(struct bconn *b)
{
	struct buf *in = io_in(&b->io);
	uint8_t c;
	if (!in || buf_copyout(in, &c, 1) < 1)
		return false;
	buf_drain(in, 1);
	if (c == 'N') {
		if (b->w->cfg->general.server_tls_sslmode >= TLS_MODE_REQUIRE) {
			fail(b, "the server does not support TLS, and server_tls_sslmode requires it");
			return false;
		}
		send_startup(b);
		return b->state == BCONN_LOGIN;
	}
	/* Bytes after 'S' would be taken as if encrypted (CVE-2021-23222). */
	if (c != 'S' || buf_len(in) > 0) {
		fail(b, "bad answer to the SSL request");
		return false;
	}
	start_tls(b, false);
	return false;
}

/* ---- reading ---- */

/* A message of the login's own; false: the connection went down. */
static bool login_message(struct bconn *b, uint8_t type, const uint8_t *body, size_t len)
{
	const char *why = NULL;
	switch (type) {
	case PqMsg_AuthenticationRequest:
		if (b->state != BCONN_LOGIN || !handle_auth(b, body, len, &why)) {
			fail_login(b, b->profile->auth_failed, why ? why : "unexpected authentication request");
			return false;
		}
		return true;
	case PqMsg_ErrorResponse: {
		struct proto_error_fields e;
		const char *m = proto_parse_error(body, len, &e) && e.message ? e.message : "server error";
		snprintf(b->server_error, sizeof b->server_error, "%s", m);
		fail_login(b, b->profile->refused, m);
		return false;
	}
	case PqMsg_ReadyForQuery:
		wipe_secret(b);   /* not needed any more */
		set_state(b, BCONN_READY);
		b->on_ready(b->arg);
		return b->state == BCONN_READY;
	default:
		return true;
	}
}

/* One whole message: to the login, dropped, or to the owner. false: stop
 * reading (closed). */
static bool dispatch(struct bconn *b, uint8_t type, const uint8_t *body, size_t len)
{
	switch (type) {
	case PqMsg_AuthenticationRequest:
		return login_message(b, type, body, len);
	case PqMsg_ErrorResponse:
	case PqMsg_ReadyForQuery:
		if (b->state == BCONN_LOGIN)
			return login_message(b, type, body, len);
		break;
	case PqMsg_ParameterStatus:
		if (b->profile->relay)   /* the login's too: the relay's client hears them */
			break;
		return true;
	case PqMsg_BackendKeyData:
	case PqMsg_NoticeResponse:
	case PqMsg_NegotiateProtocolVersion:
		return true;
	default:
		break;
	}
	if (!b->on_message(b->arg, type, body, len)) {
		fail(b, "the server sent an unexpected message");
		return false;
	}
	return b->state == BCONN_LOGIN || b->state == BCONN_READY;
}

static void process(struct bconn *b)
{
	if (b->state == BCONN_TLS_ANSWER && !handle_ssl_answer(b))
		return;
	struct buf *in = io_in(&b->io);
	while (in && (b->state == BCONN_LOGIN || b->state == BCONN_READY)) {
		/* Nothing more is read until the SCRAM key is there (auth_derived). */
		if (auth_backend_pending(&b->auth))
			break;
		/* A relay once ready: the owner takes the bytes as they are;
		 * no message is ever held whole. */
		if (b->state == BCONN_READY && b->on_bytes) {
			b->on_bytes(b->arg, in);
			break;
		}
		uint8_t hdr[5];
		if (buf_copyout(in, hdr, 5) < 5)
			break;
		struct proto_frame f;
		if (proto_frame_header(hdr, 5, b->profile->max_message, &f) != PROTO_FRAME_OK) {
			fail(b, "the server sent an invalid or too long message");
			return;
		}
		if (buf_len(in) < (size_t)f.len + 1) {
			/* A message longer than the read mark: room for it whole. */
			if ((size_t)f.len + 1 > b->io.read_high)
				io_set_read_high(&b->io, (size_t)f.len + 1);
			break;
		}
		const uint8_t *msg = buf_pullup(in, (size_t)f.len + 1);
		if (!msg) {
			fail(b, "out of memory");
			return;
		}
		if (!dispatch(b, f.type, msg + 5, f.len - 4))
			return;
		buf_drain(in, (size_t)f.len + 1);
	}
	if (b->state != BCONN_CLOSED && !b->io.closed) {
		io_update_reading(&b->io);
		if (b->state == BCONN_READY && !b->on_bytes && b->on_read_done)
			b->on_read_done(b->arg);   /* (it may close b: nothing after) */
	}
}

void bconn_pause(struct bconn *b, bool paused)
{
	if (b->state != BCONN_READY || b->io.closed)
		return;
	io_pause(&b->io, paused);
	if (!paused)
		process(b);   /* (what the engine read before the pause took hold) */
}

static void drain_cb(struct io *io, void *arg)
{
	(void)io;
	struct bconn *b = arg;
	if (b->on_drain && b->state == BCONN_READY)
		b->on_drain(b->arg);
}

/* The SCRAM key the server's challenge needed is derived (kdf.c): answer,
 * then go on with what the server sent meanwhile. */
static void auth_derived(void *arg)
{
	struct bconn *b = arg;
	worker_update_clock(b->w);
	uint8_t storage[AUTH_BACKEND_MAX_MESSAGE];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	const char *why = NULL;
	if (!auth_answered(b, auth_backend_resume(&b->auth, &pb, &why), &pb)) {
		fail_login(b, b->profile->auth_failed, why ? why : "SCRAM failed");
		return;
	}
	process(b);
}

static void read_cb(struct io *io, void *arg)
{
	(void)io;
	struct bconn *b = arg;
	worker_update_clock(b->w);
	process(b);
}

static void event_cb(struct io *io, enum io_event what, int err, void *arg)
{
	(void)io;
	struct bconn *b = arg;
	struct worker *w = b->w;
	worker_update_clock(w);
	switch (what) {
	case IO_CONNECTED:
		/* As server.c and libpq: no TLS over a Unix socket, whatever
		 * server_tls_sslmode says. */
		if (b->unix_socket) {
			send_startup(b);
		} else if (w->tls.for_servers && w->cfg->general.server_tls_negotiation == TLS_NEGOTIATION_DIRECT) {
			start_tls(b, true);
		} else if (w->tls.for_servers) {
			/* server_tls_sslmode: ask first (Int32 8, Int32 80877103). */
			static const uint8_t ssl_request[8] = { 0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f };
			buf_add(io_out(&b->io), ssl_request, sizeof ssl_request);
			set_state(b, BCONN_TLS_ANSWER);
		} else {
			send_startup(b);
		}
		return;
	case IO_TLS_READY:
		/* As server.c: the ALPN agreed on, if any, must be "postgresql";
		 * a direct handshake must have agreed on it. */
		if (!tls_alpn_ok(b->io.ssl, tls_is_direct(b->io.ssl)))
			fail(b, "the server did not agree on ALPN \"postgresql\"");
		else
			send_startup(b);
		return;
	case IO_EOF:
		fail(b, "the server closed the connection");
		return;
	case IO_ERROR: {
		char why[160];
		snprintf(why, sizeof why, "connection failed: %s", err ? strerror(err) : "error");
		fail(b, why);
		return;
	}
	}
}
