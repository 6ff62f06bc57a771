/* SPDX-License-Identifier: MIT */
/*
 * server_conn: a server connection as an object, below server.c's state
 * machine (server_internal.h): made, moved from state to state (the pool
 * keeps its lists by the state_changed event), closed (its client's end
 * and its pool told through their events) and freed; and the few things
 * every state does the same way: a simple query of pgcat's own, a
 * CancelRequest, closing on a reply nobody asked for, the socket's options
 * and the log_connections line. It calls nothing of server.c's.
 */
#include "server_internal.h"
#include "tcp_tune.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "auth.h"
#include "cancel.h"
#include "client_end.h"
#include "config.h"
#include "context.h"
#include "buf_msg.h"
#include "log.h"
#include "pktbuf.h"
#include "pool_types.h"
#include "prep_server.h"
#include "proto.h"
#include "server_login.h"
#include "shm.h"

static const char *const state_names[] = {
	[SERVER_CONNECTING] = "connecting", [SERVER_LOGIN] = "login", [SERVER_IDLE] = "idle",
	[SERVER_SYNCING] = "syncing", [SERVER_ACTIVE] = "active", [SERVER_WAL_POSITION] = "wal_position",
	[SERVER_ASKING] = "asking",
	[SERVER_DRAINING] = "draining",
	[SERVER_RESETTING] = "resetting", [SERVER_CANCEL_WAIT] = "being_canceled", [SERVER_CLOSED] = "closed",
};

const char *server_state_name(enum server_state st) { return state_names[st]; }

void server_set_state(struct server *s, enum server_state st)
{
	enum server_state old = s->state;
	if (old == st)
		return;
	log_trace("S-%llu: %s -> %s (outstanding %u, tx %c)", (unsigned long long)s->id, server_state_name(old),
		  server_state_name(st), s->txn.outstanding, s->txn.tx_status);
	s->state = st;
	s->state_since_us = s->w->now_us;
	s->sp->ev->state_changed(s, (int)old);
}

struct buf *server_output(struct server *s) { return io_out(&s->io); }

bool server_output_full(struct server *s)
{
	return io_out_len(&s->io) >= LINK_SERVER_OUT_BUDGET;
}

/* A server connection of sp, on no list yet (state CLOSED). */
struct server *server_new(struct srvpool *sp)
{
	struct worker *w = sp->pool->w;
	struct server *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->w = w;
	s->id = ++w->next_id;
	s->sp = sp;
	s->txn.tx_status = 'I';
	s->pid_slot = -1;
	params_init(&s->params);
	list_init(&s->node);
	s->connect_us = s->state_since_us = w->now_us;
	s->connect_wall = (int64_t)time(NULL);
	s->state = SERVER_CLOSED;
	return s;
}

void server_close(struct server *s, const char *why)
{
	if (s->state == SERVER_CLOSED)
		return;
	struct worker *w = s->w;
	bool login_failed = s->state == SERVER_CONNECTING || s->state == SERVER_LOGIN;
	struct client_end *c = s->client;
	enum server_state old = s->state;
	if (why && log_enabled(LOG_LEVEL_INFO)) {
		char prefix[320];
		snprintf(prefix, sizeof prefix, "S-%llu %s:%d: ", (unsigned long long)s->id, s->sp->host, s->sp->port);
		long long age = (long long)((w->now_us - s->connect_us) / 1000000);
		struct log_field f[] = {
			{ "server_id", NULL, (long long)s->id }, { "host", s->sp->host, 0 }, { "port", NULL, s->sp->port },
			{ "database", s->sp->database, 0 }, { "reason", why, 0 }, { "state", server_state_name(old), 0 },
			{ "age_s", NULL, age },
		};
		log_event(LOG_LEVEL_INFO, "server_close", f, sizeof f / sizeof *f, prefix, "closing because: %s (%s, age=%llds)",
			  why, server_state_name(old), age);
	}
	/* A polite Terminate when the connection is healthy and idle (and
	 * not handed to the process that took over: it goes on there). */
	if (old == SERVER_IDLE && !s->io.closed && !s->moved) {
		buf_add_bodyless(io_out(&s->io), PqMsg_Terminate);
		io_flush(&s->io);
	}
	prep_server_free(s);
	s->prep_on = false;
	shm_backend_release(w->shm, s->pid_slot);
	s->pid_slot = -1;
	cancel_requests_forget(&w->cancel_requests, s);
	s->cancels_in_flight = 0;
	io_close(&s->io);
	s->sp->ev->closed(s, login_failed);
	s->state = SERVER_CLOSED;
	server_login_auth_free(s);
	list_add_tail(&w->dead_servers, &s->node);
	worker_schedule_reap(w);
	if (c && old == SERVER_WAL_POSITION) {
		/* The client's transaction was over and answered: only its
		 * position is not known (read_your_writes). */
		c->ev->wal_position(c, s, s->sp->shard, false, 0, true);
		return;
	}
	if (c && old == SERVER_SYNCING && (s->health_check || s->replay_check == SERVER_REPLAY_ASKED)) {
		/* Nothing of the client's reached this server: it goes elsewhere. */
		c->ev->lost(c, s, true, "08006", why ? why : "health check failed");
		return;
	}
	if (c) {
		/* Its transaction is gone with it, and its SETs with it. */
		if (s->txn.set_pending)
			params_copy(c->params, &s->txn.set_undo_client);
		const char *code = s->have_error ? s->error_sqlstate : "08006";
		const char *msg = s->have_error ? s->error_message : "server connection lost";
		c->ev->lost(c, s, false, code, msg);
	}
}

/* server_fast_close's moment: in session mode, linked, between the
 * client's transactions (nothing owed, nothing open). */
static bool fast_close_due(const struct server *s)
{
	return s->close_when_idle && s->w->cfg->general.server_fast_close && s->client && s->client->ev->ended &&
	       s->state == SERVER_ACTIVE && !pool_mode_per_transaction(s->sp->pool->mode) &&
	       s->txn.outstanding == 0 && !s->txn.ext_pending && s->txn.tx_status == 'I';
}

/* The client's session ends with its server (PgBouncer's words). */
static void fast_close(struct server *s)
{
	static const char why[] = "database configuration changed";
	s->client->ev->ended(s->client, s, "08P01", why, true);
	server_close(s, why);
}

bool server_fast_close_if_due(struct server *s)
{
	if (!fast_close_due(s))
		return false;
	fast_close(s);
	return true;
}

void server_close_when_idle(struct server *s)
{
	s->close_when_idle = true;
	(void)server_fast_close_if_due(s);
}

void server_free(struct server *s)
{
	params_clear(&s->params);
	params_clear(&s->txn.set_undo_client);
	params_clear(&s->txn.set_undo_server);
	server_login_auth_free(s);
	slowlog_free(&s->slow);
	free(s);
}

/* One of pgcat's own simple Queries went to the server: it owes a
 * ReadyForQuery, and the server's unnamed statement is gone (PostgreSQL
 * drops it at any simple Query), whoever's it was. */
void server_own_query_sent(struct server *s)
{
	txn_sent(&s->txn, PqMsg_Query);
	prep_server_forget_unnamed(s);
}

void server_send_query(struct server *s, const char *sql)
{
	uint8_t storage[4096];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_query(&pb, sql);
	if (pb.failed) {
		server_close(s, "query too long");
		return;
	}
	buf_add(io_out(&s->io), pb.data, pb.len);
	server_own_query_sent(s);
}

/* PostgreSQL answered (closed) one of the CancelRequests of s, or it timed
 * out (cancel_send). */
static void server_cancel_done(void *arg)
{
	struct server *s = arg;
	if (s->cancels_in_flight > 0)
		s->cancels_in_flight--;
	if (s->cancels_in_flight == 0 && s->state == SERVER_CANCEL_WAIT)
		s->sp->ev->clean(s);
}

void server_send_cancel(struct server *s)
{
	if (!s->backend_pid || !s->backend_key_len)
		return;
	if (cancel_send(&s->w->cancel_requests, (struct sockaddr *)&s->sp->addr, s->sp->addrlen, s->backend_pid,
			s->backend_key, s->backend_key_len, server_cancel_done, s))
		s->cancels_in_flight++;
}

/* A reply nobody asked for (SPEC §10): passed on, it would answer a later
 * request, this client's or the next one's, and shift every answer after
 * it. The server is closed instead; the client it serves gets pgcat's
 * error, nobody gets the reply. */
void server_close_unasked(struct server *s, uint8_t type)
{
	s->have_error = true;
	snprintf(s->error_sqlstate, sizeof s->error_sqlstate, "08P01");
	snprintf(s->error_message, sizeof s->error_message,
		 "server sent a reply nobody asked for (message type '%c')", type);
	server_close(s, s->error_message);
}

/* log_connections: PgBouncer's line, with the local address a server's
 * log (log_connections there) shows as the client's, to match the two. */
void server_log_new_connection(const struct server *s)
{
	if (!log_enabled(LOG_LEVEL_INFO))
		return;
	struct sockaddr_storage local;
	socklen_t len = sizeof local;
	char host[NI_MAXHOST] = "", port[NI_MAXSERV] = "";
	bool local_known = s->sp->addr.ss_family != AF_UNIX && getsockname(s->io.fd, (struct sockaddr *)&local, &len) == 0 &&
			   getnameinfo((struct sockaddr *)&local, len, host, sizeof host, port, sizeof port,
				       NI_NUMERICHOST | NI_NUMERICSERV) == 0;
	char prefix[512], from[NI_MAXHOST + NI_MAXSERV + 16] = "";
	snprintf(prefix, sizeof prefix, "S-%llu %s@%s %s:%d ", (unsigned long long)s->id, auth_server_user(s->sp->pool),
		 s->sp->database, s->sp->host, s->sp->port);
	if (local_known) {
		bool v6 = local.ss_family == AF_INET6;
		snprintf(from, sizeof from, " (from %s%s%s:%s)", v6 ? "[" : "", host, v6 ? "]" : "", port);
	}
	struct log_field f[] = {
		{ "server_id", NULL, (long long)s->id }, { "user", auth_server_user(s->sp->pool), 0 },
		{ "database", s->sp->database, 0 }, { "host", s->sp->host, 0 }, { "port", NULL, s->sp->port },
		{ "pool", s->sp->pool->name, 0 }, { "shard", NULL, s->sp->shard },
	};
	log_event(LOG_LEVEL_INFO, "server_connect", f, sizeof f / sizeof *f, prefix, "new connection to server%s", from);
}

void server_set_socket_options(struct server *s)
{
	evutil_socket_t fd = s->io.fd;
	int one = 1;
	if (s->sp->addr.ss_family == AF_INET || s->sp->addr.ss_family == AF_INET6) {
		const struct config_general *g = &s->w->cfg->general;
		const struct io_tcp_tuning t = { g->tcp_keepalive, g->tcp_keepidle, g->tcp_keepintvl, g->tcp_keepcnt,
						 g->tcp_user_timeout };
		char why[160];
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (!io_tcp_tune(fd, &t, why, sizeof why))
			log_warning("S-%llu: %s", (unsigned long long)s->id, why);
	}
}

