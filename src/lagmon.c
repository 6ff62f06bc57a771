/* SPDX-License-Identifier: MIT */
/*
 * lagmon: the replica lag monitor (SPEC §4, doc/replicas.md). A small
 * PostgreSQL client of its own over io.c: one connection per (pool, shard,
 * server), logged in as the pool's first user, that runs one query per
 * interval. It is not a room of the pool: its connections are counted in
 * no pool, hand nothing to clients, and are closed when their server
 * leaves the config. What it learns goes to the shared segment (lag per
 * server, bans); routing reads it from there like any other ban.
 */
#include "lagmon.h"

#include <event2/buffer.h>
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "auth_backend.h"
#include "auth_scram.h"
#include "config.h"
#include "dns.h"
#include "io.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "proto.h"
#include "shm.h"
#include "context.h"

/* Set on every monitor connection, so that pg_stat_activity tells them
 * from pooled ones. */
#define LAGMON_APPLICATION_NAME "pgcat lag monitor"
/* The largest message the monitor reads: its one row is short, and login
 * messages (SCRAM, errors, parameters) are well under this. */
#define LAGMON_MAX_MESSAGE 8192
#define LAGMON_READ_HIGH 65536

/* One query for every server, whatever it is: is it in recovery, its WAL
 * position (written on a primary, replayed on a replica), and on a replica
 * the age of the last transaction it replayed, in ms. */
static const char lagmon_query[] =
	"SELECT pg_is_in_recovery(), "
	"CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, "
	"CASE WHEN pg_is_in_recovery() THEN "
	"(extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000)::int8 END";

enum lagmon_conn_state {
	LAGMON_DOWN,          /* no socket; connect at the next tick */
	LAGMON_CONNECTING,    /* TCP connect under way */
	LAGMON_TLS_ANSWER,    /* SSLRequest sent, waiting for 'S' or 'N' */
	LAGMON_TLS_HANDSHAKE, /* TLS handshake under way */
	LAGMON_LOGIN,         /* startup sent; authentication */
	LAGMON_READY,         /* logged in, no query running */
	LAGMON_QUERY          /* the measurement query is running */
};

struct lagmon_conn {
	struct lagmon *lm;
	struct io io;
	enum lagmon_conn_state state;
	uint64_t state_since_us;
	/* Which server of which shard of which pool (owned copies: the config
	 * snapshot they came from may be gone after a reload). */
	char *pool;
	int shard;
	char *host;
	int port;
	char *database;
	enum server_role role;
	/* Login: the pool's server user and its password (wiped on free). */
	char *user;
	char *password;
	/* SCRAM pass-through keys, copied from the pool when the connection
	 * starts (have_passthrough: a client had proved one). */
	bool have_passthrough;
	uint8_t passthrough_client_key[SCRAM_KEY_LEN];
	uint8_t passthrough_server_key[SCRAM_KEY_LEN];
	struct auth_backend auth;
	bool seen;                    /* still in the config at this tick */
	bool failing;                 /* a failure was logged; log the next success */
	/* This round: waiting for an answer (pending), and the answer. */
	bool pending;
	bool answered;
	bool in_recovery;
	uint64_t lsn;
	int64_t replay_ms;            /* -1: NULL (nothing replayed yet) */
};

struct lagmon {
	struct worker *w;
	struct event *timer;
	struct lagmon_conn **conns;
	size_t n_conns, cap_conns;
};

static void conn_read_cb(struct io *io, void *arg);
static void conn_event_cb(struct io *io, enum io_event what, int err, void *arg);

static const struct io_ops conn_io_ops = {
	.on_read = conn_read_cb,
	.on_drain = NULL,
	.on_event = conn_event_cb,
	.write_low = 0,
	.owner_offset = offsetof(struct lagmon_conn, io),
};

static void set_state(struct lagmon_conn *c, enum lagmon_conn_state st)
{
	c->state = st;
	c->state_since_us = c->lm->w->now_us;
}

static void wipe_credentials(struct lagmon_conn *c)
{
	if (c->password) {
		OPENSSL_cleanse(c->password, strlen(c->password));
		free(c->password);
		c->password = NULL;
	}
	free(c->user);
	c->user = NULL;
	OPENSSL_cleanse(c->passthrough_client_key, sizeof c->passthrough_client_key);
	OPENSSL_cleanse(c->passthrough_server_key, sizeof c->passthrough_server_key);
	c->have_passthrough = false;
	auth_backend_clear(&c->auth);
}

static void evaluate_group(struct lagmon *lm, const char *pool, int shard);
static void publish(struct lagmon *lm, const struct lagmon_conn *c, int64_t lag_bytes, int64_t lag_ms);

/* The connection is lost or given up: its lag is unknown this round (the
 * health checks ban servers that cannot be reached; this is not the place). */
static void conn_down(struct lagmon_conn *c, const char *why)
{
	if (c->state == LAGMON_DOWN)
		return;
	if (!c->failing)
		log_info("lag monitor: %s:%d (pool %s, shard %d): %s", c->host, c->port, c->pool, c->shard, why);
	c->failing = true;
	if (c->state == LAGMON_READY && !c->io.closed) {
		evbuffer_add(io_out(&c->io), "X\0\0\0\4", 5);   /* Terminate, to be polite */
		io_flush(&c->io);
	}
	io_close(&c->io);
	wipe_credentials(c);
	set_state(c, LAGMON_DOWN);
	c->answered = false;
	publish(c->lm, c, -1, -1);   /* figures from before the loss are no longer true */
	if (c->pending) {
		c->pending = false;
		evaluate_group(c->lm, c->pool, c->shard);
	}
}

static void conn_free(struct lagmon_conn *c)
{
	if (!c)
		return;
	if (c->state != LAGMON_DOWN) {
		c->failing = true;   /* no log line: the server left the config, or pgcat is stopping */
		c->pending = false;
		conn_down(c, "closed");
	}
	wipe_credentials(c);
	free(c->pool);
	free(c->host);
	free(c->database);
	free(c);
}

/* ---- the measurement ---- */

static bool parse_lsn(const char *s, uint64_t *out)
{
	unsigned int hi, lo;
	char tail;
	if (sscanf(s, "%X/%X%c", &hi, &lo, &tail) != 2)
		return false;
	*out = ((uint64_t)hi << 32) | (uint64_t)lo;
	return true;
}

/* Write the lag of one server into every (pool, user) slot of it. */
static void publish(struct lagmon *lm, const struct lagmon_conn *c, int64_t lag_bytes, int64_t lag_ms)
{
	struct worker *w = lm->w;
	if (!w->shm)
		return;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (strcmp(p->name, c->pool) != 0)
			continue;
		for (size_t i = 0; i < p->n_targets; i++) {
			const struct srvpool *sp = p->targets[i];
			if (sp->shard == c->shard && sp->port == c->port && strcmp(sp->host, c->host) == 0)
				shm_lag_set(w->shm, sp->shm_target, lag_bytes, lag_ms);
		}
	}
}

/* max_replica_lag: ban a replica over it, lift the monitor's ban once a
 * measurement finds it under (or the limit was turned off). */
static void apply_limit(struct lagmon *lm, const struct lagmon_conn *c, int64_t max_lag, int64_t lag_bytes)
{
	struct worker *w = lm->w;
	if (!w->shm)
		return;
	int64_t now = (int64_t)time(NULL);
	if (max_lag > 0 && lag_bytes > max_lag) {
		char why[96];
		snprintf(why, sizeof why, LAGMON_BAN_REASON_PREFIX "%" PRId64 " bytes", lag_bytes);
		/* Renewed at every measurement: the ban must outlive the gap to
		 * the next one, whatever ban_time says. */
		int64_t secs = w->cfg->general.ban_time > 0 ? w->cfg->general.ban_time : 60;
		int64_t gap = (int64_t)w->cfg->general.replica_lag_check_interval * 3 / 1000 + 1;
		if (secs < gap)
			secs = gap;
		if (secs > INT_MAX)
			secs = INT_MAX;
		bool was_banned = false;
		if (!shm_ban_set_auto(w->shm, c->host, c->port, now, (int)secs, why, &was_banned))
			log_warning("ban table full: %s:%d not banned (%s)", c->host, c->port, why);
		else if (!was_banned)
			log_warning("banning %s:%d: %s > max_replica_lag %" PRId64, c->host, c->port, why, max_lag);
		return;
	}
	if (lag_bytes >= 0 && shm_ban_clear_auto(w->shm, c->host, c->port, now, LAGMON_BAN_REASON_PREFIX))
		log_info("unbanning %s:%d: replica lag %" PRId64 " bytes is within max_replica_lag %" PRId64, c->host,
			 c->port, lag_bytes, max_lag);
}

/* A round of a (pool, shard) is over (every server answered or failed,
 * or the next tick came): lag = the primary's position - the replica's. */
static void evaluate_group(struct lagmon *lm, const char *pool, int shard)
{
	const struct lagmon_conn *primary = NULL;
	for (size_t i = 0; i < lm->n_conns; i++) {
		const struct lagmon_conn *c = lm->conns[i];
		if (c->shard != shard || strcmp(c->pool, pool) != 0)
			continue;
		if (c->pending)
			return;   /* not over yet */
		/* The primary is the server that is not in recovery; a replica
		 * that was promoted but not yet reconfigured does not count. */
		if (c->answered && !c->in_recovery && c->role != SERVER_ROLE_REPLICA &&
		    (!primary || (primary->role != SERVER_ROLE_PRIMARY && c->role == SERVER_ROLE_PRIMARY)))
			primary = c;
	}
	const struct config_pool *cp = config_find_pool(lm->w->cfg, pool);
	int64_t max_lag = cp ? cp->max_replica_lag : 0;
	for (size_t i = 0; i < lm->n_conns; i++) {
		struct lagmon_conn *c = lm->conns[i];
		if (c->shard != shard || strcmp(c->pool, pool) != 0)
			continue;
		int64_t lag_bytes = -1, lag_ms = -1;
		if (c->answered && c->in_recovery && primary) {
			uint64_t d = primary->lsn > c->lsn ? primary->lsn - c->lsn : 0;
			lag_bytes = d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
			/* The age of the last replayed transaction grows while the
			 * primary is idle; a replica that has replayed everything
			 * does not lag, whatever that age. */
			lag_ms = lag_bytes == 0 ? 0 : c->replay_ms;
		}
		publish(lm, c, lag_bytes, lag_ms);
		if (c->answered && c->in_recovery)
			apply_limit(lm, c, max_lag, lag_bytes);
		c->answered = false;
	}
}

/* The row of the measurement query: 3 text columns. */
static bool read_row(struct lagmon_conn *c, const uint8_t *body, size_t len)
{
	char vals[3][32];
	bool null[3];
	if (len < 2 || (body[0] << 8 | body[1]) != 3)
		return false;
	size_t off = 2;
	for (int k = 0; k < 3; k++) {
		if (len - off < 4)
			return false;
		int32_t l = (int32_t)proto_get_u32(body + off);
		off += 4;
		null[k] = l < 0;
		vals[k][0] = 0;
		if (l < 0)
			continue;
		if ((size_t)l > len - off || (size_t)l >= sizeof vals[k])
			return false;
		memcpy(vals[k], body + off, (size_t)l);
		vals[k][l] = 0;
		off += (size_t)l;
	}
	if (null[0] || null[1] || !parse_lsn(vals[1], &c->lsn))
		return false;
	c->in_recovery = vals[0][0] == 't';
	c->replay_ms = -1;
	if (!null[2]) {
		char *end;
		long long v = strtoll(vals[2], &end, 10);
		if (*end == 0 && end != vals[2])
			c->replay_ms = v < 0 ? 0 : v;
	}
	return true;
}

static void send_query(struct lagmon_conn *c)
{
	uint8_t storage[sizeof lagmon_query + 16];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_query(&pb, lagmon_query);
	if (pb.failed) {
		conn_down(c, "query too long");
		return;
	}
	evbuffer_add(io_out(&c->io), pb.data, pb.len);
	set_state(c, LAGMON_QUERY);
}

/* ---- login ---- */

static void send_startup(struct lagmon_conn *c)
{
	uint8_t storage[1024];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_begin(&pb, 0);
	pktbuf_put_u32(&pb, PG_PROTOCOL_3_0);
	pktbuf_put_cstring(&pb, "user");
	pktbuf_put_cstring(&pb, c->user);
	pktbuf_put_cstring(&pb, "database");
	pktbuf_put_cstring(&pb, c->database);
	pktbuf_put_cstring(&pb, "application_name");
	pktbuf_put_cstring(&pb, LAGMON_APPLICATION_NAME);
	pktbuf_put_u8(&pb, 0);
	pktbuf_end(&pb);
	if (pb.failed) {
		conn_down(c, "startup packet too long");
		return;
	}
	evbuffer_add(io_out(&c->io), pb.data, pb.len);
	set_state(c, LAGMON_LOGIN);
}

/* One AuthenticationRequest; false: give up (the reason is in *why). */
static bool handle_auth(struct lagmon_conn *c, const uint8_t *body, size_t len, const char **why)
{
	const struct auth_backend_secret sec = {
		.user = c->user,
		.password = c->password,
		.passthrough_client_key = c->have_passthrough ? c->passthrough_client_key : NULL,
		.passthrough_server_key = c->have_passthrough ? c->passthrough_server_key : NULL,
	};
	uint8_t storage[AUTH_BACKEND_MAX_MESSAGE];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	enum auth_backend_result r = auth_backend_answer(&c->auth, &sec, body, len, &pb, why);
	if (r == AUTH_BACKEND_CONTINUE && pb.len > 0)
		evbuffer_add(io_out(&c->io), pb.data, pb.len);
	OPENSSL_cleanse(storage, sizeof storage);   /* a cleartext password, maybe */
	if (r == AUTH_BACKEND_DONE)
		auth_backend_clear(&c->auth);   /* the SCRAM keys are of no more use */
	return r != AUTH_BACKEND_FAILED;
}

static void start_tls(struct lagmon_conn *c, bool direct);

/* The answer to the SSLRequest; false when the connection went down or
 * the handshake began (its end comes as IO_TLS_READY). */
static bool handle_ssl_answer(struct lagmon_conn *c)
{
	struct evbuffer *in = io_in(&c->io);
	uint8_t b;
	if (!in || evbuffer_copyout(in, &b, 1) < 1)
		return false;
	evbuffer_drain(in, 1);
	struct worker *w = c->lm->w;
	enum tls_mode mode = w->cfg->general.server_tls_sslmode;
	if (b == 'N') {
		if (mode >= TLS_MODE_REQUIRE) {
			conn_down(c, "the server does not support TLS, and server_tls_sslmode requires it");
			return false;
		}
		send_startup(c);
		return c->state == LAGMON_LOGIN;
	}
	/* Bytes after 'S' would be taken as if encrypted (CVE-2021-23222). */
	if (b != 'S' || evbuffer_get_length(in) > 0) {
		conn_down(c, "bad answer to the SSL request");
		return false;
	}
	start_tls(c, false);
	return false;
}

/* The handshake, after 'S' or (server_tls_negotiation = direct) at once;
 * ALPN "postgresql" offered as server.c does. */
static void start_tls(struct lagmon_conn *c, bool direct)
{
	struct worker *w = c->lm->w;
	enum tls_mode mode = w->cfg->general.server_tls_sslmode;
	SSL *ssl = w->tls.for_servers ? SSL_new(w->tls.for_servers) : NULL;
	if (!ssl || !tls_offer_alpn(ssl)) {
		SSL_free(ssl);
		conn_down(c, "cannot start TLS");
		return;
	}
	SSL_set_connect_state(ssl);
	if (direct)
		tls_mark_direct(ssl);
	struct sockaddr_storage ss;
	socklen_t sl;
	bool literal = dns_literal(c->host, c->port, &ss, &sl);
	if (!literal)
		(void)SSL_set_tlsext_host_name(ssl, c->host);
	if (mode == TLS_MODE_VERIFY_FULL) {
		int ok = literal ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), c->host)
				 : SSL_set1_host(ssl, c->host);
		if (ok != 1) {
			SSL_free(ssl);
			conn_down(c, "cannot set the host name to verify");
			return;
		}
	}
	set_state(c, LAGMON_TLS_HANDSHAKE);
	io_start_tls(&c->io, ssl);
}

/* ---- reading ---- */

static void process(struct lagmon_conn *c)
{
	if (c->state == LAGMON_TLS_ANSWER && !handle_ssl_answer(c))
		return;
	struct evbuffer *in = io_in(&c->io);
	uint8_t buf[LAGMON_MAX_MESSAGE + 1];
	while (in && (c->state == LAGMON_LOGIN || c->state == LAGMON_QUERY || c->state == LAGMON_READY)) {
		uint8_t hdr[5];
		if (evbuffer_copyout(in, hdr, 5) < 5)
			break;
		struct proto_frame f;
		if (proto_frame_header(hdr, 5, LAGMON_MAX_MESSAGE, &f) != PROTO_FRAME_OK) {
			conn_down(c, "the server sent an invalid or too long message");
			return;
		}
		if (evbuffer_get_length(in) < (size_t)f.len + 1)
			break;
		evbuffer_remove(in, buf, (size_t)f.len + 1);
		const uint8_t *body = buf + 5;
		size_t blen = f.len - 4;
		const char *why = NULL;
		switch (f.type) {
		case PqMsg_AuthenticationRequest:
			if (c->state != LAGMON_LOGIN || !handle_auth(c, body, blen, &why)) {
				conn_down(c, why ? why : "unexpected authentication request");
				return;
			}
			break;
		case PqMsg_ErrorResponse: {
			struct proto_error_fields e;
			char msg[300];
			snprintf(msg, sizeof msg, "%s: %s", c->state == LAGMON_LOGIN ? "login failed" : "query failed",
				 proto_parse_error(body, blen, &e) && e.message ? e.message : "server error");
			/* A failed query leaves the connection usable, but a server
			 * that cannot answer it (not PostgreSQL >= 10?) will not
			 * later: give up on it until the next tick. */
			conn_down(c, msg);
			return;
		}
		case PqMsg_DataRow:
			if (c->state == LAGMON_QUERY && c->pending)
				c->answered = read_row(c, body, blen);
			break;
		case PqMsg_ReadyForQuery:
			if (c->state == LAGMON_LOGIN) {
				wipe_credentials(c);   /* not needed any more */
				if (c->failing)
					log_info("lag monitor: %s:%d (pool %s, shard %d): connected", c->host, c->port,
						 c->pool, c->shard);
				c->failing = false;
				set_state(c, LAGMON_READY);
				if (c->pending)
					send_query(c);   /* this round's measurement */
				break;
			}
			if (c->state == LAGMON_QUERY) {
				set_state(c, LAGMON_READY);
				if (c->pending) {
					c->pending = false;
					evaluate_group(c->lm, c->pool, c->shard);
				}
			}
			break;
		case PqMsg_ParameterStatus:
		case PqMsg_BackendKeyData:
		case PqMsg_NoticeResponse:
		case PqMsg_NegotiateProtocolVersion:
		case PqMsg_RowDescription:
		case PqMsg_CommandComplete:
			break;
		default:
			conn_down(c, "the server sent an unexpected message");
			return;
		}
	}
	if (!c->io.closed)
		io_update_reading(&c->io);
}

static void conn_read_cb(struct io *io, void *arg)
{
	(void)io;
	struct lagmon_conn *c = arg;
	worker_update_clock(c->lm->w);
	process(c);
}

static void conn_event_cb(struct io *io, enum io_event what, int err, void *arg)
{
	(void)io;
	struct lagmon_conn *c = arg;
	worker_update_clock(c->lm->w);
	switch (what) {
	case IO_CONNECTED:
		if (c->lm->w->tls.for_servers &&
		    c->lm->w->cfg->general.server_tls_negotiation == TLS_NEGOTIATION_DIRECT) {
			start_tls(c, true);
			return;
		}
		if (c->lm->w->tls.for_servers) {
			/* server_tls_sslmode: ask first (Int32 8, Int32 80877103). */
			static const uint8_t ssl_request[8] = { 0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f };
			evbuffer_add(io_out(&c->io), ssl_request, sizeof ssl_request);
			set_state(c, LAGMON_TLS_ANSWER);
			return;
		}
		send_startup(c);
		return;
	case IO_TLS_READY:
		/* As server.c: the ALPN agreed on, if any, must be "postgresql";
		 * a direct handshake must have agreed on it. */
		if (!tls_alpn_ok(c->io.ssl, tls_is_direct(c->io.ssl))) {
			conn_down(c, "the server did not agree on ALPN \"postgresql\"");
			return;
		}
		send_startup(c);
		return;
	case IO_EOF:
		conn_down(c, "the server closed the connection");
		return;
	case IO_ERROR: {
		char why[160];
		snprintf(why, sizeof why, "connection failed: %s", err ? strerror(err) : "error");
		conn_down(c, why);
		return;
	}
	}
}

/* ---- the timer ---- */

static bool conn_start(struct lagmon_conn *c, const struct pool *p, const struct srvpool *sp)
{
	struct worker *w = c->lm->w;
	const char *user = auth_server_user(p);
	const char *pw = auth_server_password(p);
	wipe_credentials(c);
	if (!(c->user = strdup(user ? user : "")) || (pw && !(c->password = strdup(pw)))) {
		wipe_credentials(c);
		return false;
	}
	if (p->have_scram && p->have_passthrough_key) {
		/* SCRAM pass-through, as for pooled connections: the key a
		 * client proved answers for the user. */
		memcpy(c->passthrough_client_key, p->passthrough_client_key, SCRAM_KEY_LEN);
		memcpy(c->passthrough_server_key, p->scram.server_key, SCRAM_KEY_LEN);
		c->have_passthrough = true;
	}
	if (!io_connect(&c->io, w->base, &w->flusher, (const struct sockaddr *)&sp->addr, sp->addrlen, LAGMON_READ_HIGH,
			&conn_io_ops)) {
		char why[160];
		snprintf(why, sizeof why, "cannot connect: %s", strerror(errno));
		set_state(c, LAGMON_CONNECTING);   /* so that conn_down closes it */
		conn_down(c, why);
		return false;
	}
	set_state(c, LAGMON_CONNECTING);
	return true;
}

static struct lagmon_conn *find_or_add(struct lagmon *lm, const struct pool *p, const struct srvpool *sp)
{
	for (size_t i = 0; i < lm->n_conns; i++) {
		struct lagmon_conn *c = lm->conns[i];
		if (c->shard == sp->shard && c->port == sp->port && strcmp(c->host, sp->host) == 0 &&
		    strcmp(c->pool, p->name) == 0 && strcmp(c->database, sp->database) == 0)
			return c;
	}
	if (lm->n_conns == lm->cap_conns) {
		size_t cap = lm->cap_conns ? lm->cap_conns * 2 : 8;
		struct lagmon_conn **n = realloc(lm->conns, cap * sizeof *n);
		if (!n)
			return NULL;
		lm->conns = n;
		lm->cap_conns = cap;
	}
	struct lagmon_conn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->lm = lm;
	c->io.closed = true;
	c->io.fd = -1;
	c->state = LAGMON_DOWN;
	c->shard = sp->shard;
	c->port = sp->port;
	c->pool = strdup(p->name);
	c->host = strdup(sp->host);
	c->database = strdup(sp->database);
	if (!c->pool || !c->host || !c->database) {
		conn_free(c);
		return NULL;
	}
	lm->conns[lm->n_conns++] = c;
	return c;
}


/* One server at the start of a round: give up on a stuck step, then ask
 * (or connect; the query follows the login). */
static void conn_tick(struct lagmon_conn *c, const struct pool *p, const struct srvpool *sp)
{
	struct worker *w = c->lm->w;
	const struct config_general *g = &w->cfg->general;
	uint64_t age_ms = (w->now_us - c->state_since_us) / 1000;
	switch (c->state) {
	case LAGMON_CONNECTING:
	case LAGMON_TLS_ANSWER:
	case LAGMON_TLS_HANDSHAKE:
	case LAGMON_LOGIN:
		if (age_ms > (uint64_t)g->connect_timeout)
			conn_down(c, "connect or login timed out");
		break;
	case LAGMON_QUERY: {
		uint64_t limit = (uint64_t)g->healthcheck_timeout;
		if (limit < (uint64_t)g->replica_lag_check_interval)
			limit = (uint64_t)g->replica_lag_check_interval;
		if (age_ms > limit)
			conn_down(c, "the measurement timed out");
		break;
	}
	case LAGMON_DOWN:
	case LAGMON_READY:
		break;
	}
	c->role = sp->role;
	c->answered = false;
	switch (c->state) {
	case LAGMON_READY:
		c->pending = true;
		send_query(c);
		break;
	case LAGMON_DOWN:
		if (!sp->resolved)
			break;   /* DNS has no address yet: next tick */
		c->pending = true;
		if (!conn_start(c, p, sp))
			c->pending = false;
		break;
	case LAGMON_CONNECTING:
	case LAGMON_TLS_ANSWER:
	case LAGMON_TLS_HANDSHAKE:
	case LAGMON_LOGIN:
		c->pending = true;   /* measured once logged in */
		break;
	case LAGMON_QUERY:
		break;               /* still running (under the limit): its answer counts for this round */
	}
}

static void arm(struct lagmon *lm)
{
	int ms = lm->w->cfg->general.replica_lag_check_interval;
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	evtimer_add(lm->timer, &tv);
}

static bool pool_monitored(const struct pool *p)
{
	/* A shard of one server has no replica to measure. */
	for (size_t i = 0; i < p->n_targets; i++)
		for (size_t k = i + 1; k < p->n_targets; k++)
			if (p->targets[i]->shard == p->targets[k]->shard)
				return true;
	return false;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct lagmon *lm = arg;
	struct worker *w = lm->w;
	worker_update_clock(w);
	/* The last round's stragglers: their lag is unknown. */
	for (size_t i = 0; i < lm->n_conns; i++) {
		struct lagmon_conn *c = lm->conns[i];
		if (c->pending && c->state != LAGMON_QUERY) {
			c->pending = false;
			evaluate_group(lm, c->pool, c->shard);
		}
		c->seen = false;
	}
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (p->removed || !pool_first_of_name(w, true, p) || !pool_monitored(p))
			continue;
		for (size_t i = 0; i < p->n_targets; i++) {
			struct lagmon_conn *c = find_or_add(lm, p, p->targets[i]);
			if (!c) {
				log_warning("lag monitor: out of memory");
				continue;
			}
			c->seen = true;
			conn_tick(c, p, p->targets[i]);
		}
	}
	/* Servers that left the config: their connections go. */
	size_t k = 0;
	for (size_t i = 0; i < lm->n_conns; i++) {
		if (lm->conns[i]->seen)
			lm->conns[k++] = lm->conns[i];
		else
			conn_free(lm->conns[i]);
	}
	lm->n_conns = k;
	arm(lm);
}

struct lagmon *lagmon_new(struct worker *w)
{
	struct lagmon *lm = calloc(1, sizeof *lm);
	if (!lm)
		return NULL;
	lm->w = w;
	if (!(lm->timer = evtimer_new(w->base, tick_cb, lm))) {
		free(lm);
		return NULL;
	}
	/* The first round at once: lag is known from the start. */
	struct timeval now = { 0, 0 };
	evtimer_add(lm->timer, &now);
	return lm;
}

void lagmon_free(struct lagmon *lm)
{
	if (!lm)
		return;
	for (size_t i = 0; i < lm->n_conns; i++)
		conn_free(lm->conns[i]);
	free(lm->conns);
	if (lm->timer)
		event_free(lm->timer);
	free(lm);
}
