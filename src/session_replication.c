/* SPDX-License-Identifier: MIT */
/*
 * session_replication: the session kind of a replication connection (a
 * client that logged in with replication=database, true, yes, on or 1:
 * pg_basebackup, pg_receivewal, pg_recvlogical, a subscription's
 * walreceiver), beside the normal session and the admin console's
 * (session.h). As in PgBouncer 1.23 and later, such a client gets a
 * server connection of its own, opened for it with its startup
 * parameters and the replication parameter (a walsender cannot take them
 * later), never pooled, closed with the client. pgcat relays the bytes
 * both ways without reading them: IDENTIFY_SYSTEM, START_REPLICATION, the
 * COPY BOTH stream and the SQL a logical walsender takes are the server's
 * business.
 *
 * The client is greeted once its server has logged in: AuthenticationOk,
 * the server's own ParameterStatus, pgcat's BackendKeyData, ReadyForQuery.
 * A server that refuses the login (a role without REPLICATION, no
 * pg_hba.conf line for replication) fails the client with PgBouncer's
 * "login failed", the server's reason in the log.
 *
 * The server connection is a bconn (bconn.c) in relay mode, owned here;
 * the client is in CLIENT_RELAY from its login on, where client.c hands
 * this session its input, its cancel requests and its output's drain. Backpressure both
 * ways: the server is not read while the client's output is full, and the
 * client not while the server's output is.
 *
 * The connection counts as one of its pool's server's connections
 * (pool_size, max_db_connections, max_user_connections), as PgBouncer
 * counts it: an idle pooled connection is closed to make room, and
 * without one the client waits (up to query_wait_timeout) for a slot.
 */
#include "session_replication.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "bconn.h"
#include "client.h"
#include "config.h"
#include "context.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "proto.h"

/* Output held for the other side beyond which pgcat stops reading. */
#define RELAY_HIGH (256u * 1024)
/* How often an address still being looked up, or a slot in a full pool,
 * is asked for again. */
#define RELAY_RESOLVE_RETRY_MS 50

struct relay {
	struct bconn b;
	struct client *c;
	struct srvpool *sp;          /* the server it logs in to (its pool outlives the client) */
	struct event *timer;         /* the address lookup's retries, the login's deadline */
	struct buf *params;       /* the server's ParameterStatus of its login, for the welcome */
	uint64_t started_us;
	uint64_t slot_us;            /* when it took its slot in the pool (has_slot) */
	bool has_slot;               /* counted in its server's connections (pool_relay_slot_take) */
	uint32_t fwd_remaining;      /* bytes of the client's current message still to relay */
};

static const struct bconn_profile relay_profile = {
	.application_name = "pgcat",   /* (the client's own is sent when it gave one) */
	.auth_failed = "authentication failed: ",
	.refused = "",
	.max_message = 65536,          /* the login's; once ready bytes stream through unread */
	.read_high = RELAY_HIGH,
	.relay = true,
};

static struct relay *relay_of(struct client *c) { return (struct relay *)c->kind_state; }

/* The client is closing: its server goes (with a Terminate when logged
 * in). The struct itself goes with the client (client_free frees
 * kind_state after this loop turn): bconn may still be on the stack, its
 * on_down running inside it. */
static void relay_forget(struct client *c)
{
	struct relay *r = relay_of(c);
	if (!r)
		return;
	r->c = NULL;
	if (r->timer) {
		event_free(r->timer);
		r->timer = NULL;
	}
	bconn_close(&r->b, true);
	bconn_release(&r->b);
	if (r->has_slot) {
		r->has_slot = false;
		pool_relay_slot_give(r->sp);
	}
	if (r->params) {
		buf_free(r->params);
		r->params = NULL;
	}
}

/* ---- the login of its server ---- */

/* The login failed: PgBouncer's words to the client and in the log. */
static void login_failed(struct relay *r, const char *why)
{
	struct client *c = r->c;
	if (!c)
		return;
	unsigned long long age = (unsigned long long)((c->w->now_us - r->started_us) / 1000000);
	log_warning("C-%llu %s@%s: replication connection to %s:%d refused: %s", (unsigned long long)c->id,
		    client_user(c), client_database(c), r->sp->host, r->sp->port, why);
	log_info("C-%llu %s@%s: replication server %s:%d: closing because: login failed (age=%llus)",
		 (unsigned long long)c->id, client_user(c), client_database(c), r->sp->host, r->sp->port, age);
	client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "login failed");
}

static void relay_ready(void *arg)
{
	struct relay *r = arg;
	struct client *c = r->c;
	if (!c)
		return;
	if (r->timer)
		event_del(r->timer);
	uint8_t storage[64];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_auth_request(&pb, AUTH_REQ_OK, NULL, 0);
	client_send_pkt(c, &pb);
	buf_add_buf(client_output(c), r->params);
	pktbuf_init(&pb, storage, sizeof storage);
	if (!client_finish_welcome(c, &pb))
		return;
	client_set_state(c, CLIENT_RELAY);   /* (the welcome left it idle) */
	if (c->w->cfg->general.log_connections)
		log_info("C-%llu %s@%s: replication connection to %s:%d", (unsigned long long)c->id, client_user(c),
			 client_database(c), r->sp->host, r->sp->port);
	client_process(c);   /* what it sent meanwhile */
}

/* A message of the server's login: its ParameterStatus are kept for the
 * welcome. */
static bool relay_message(void *arg, uint8_t type, const uint8_t *body, size_t len)
{
	struct relay *r = arg;
	if (!r->c || type != PqMsg_ParameterStatus)
		return true;
	uint8_t hdr[5] = { type };
	proto_put_u32(hdr + 1, (uint32_t)len + 4);
	buf_add(r->params, hdr, sizeof hdr);
	buf_add(r->params, body, len);
	return true;
}

/* The server's bytes once ready, to the client as they came (the read
 * mark bounds what one read brings; a full output pauses the server). */
static void relay_server_bytes(void *arg, struct buf *in)
{
	struct relay *r = arg;
	struct client *c = r->c;
	if (!c) {
		buf_drain(in, buf_len(in));
		return;
	}
	if (buf_move_to(in, client_output(c), buf_len(in)) < 0) {
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	if (io_out_len(&c->io) >= RELAY_HIGH)
		bconn_pause(&r->b, true);   /* until the client's output drains */
}

static void relay_down(void *arg, const char *why)
{
	struct relay *r = arg;
	struct client *c = r->c;
	if (!c)
		return;
	if (bconn_state(&r->b) != BCONN_READY) {
		login_failed(r, why);
		return;
	}
	client_close(c, "08006", "server connection lost: %s", why);
}

/* The server's output drained: the client's bytes flow again. */
static void relay_server_drained(void *arg)
{
	struct relay *r = arg;
	if (r->c)
		client_process(r->c);
}

/* The address is known (or the lookup failed): open; else ask again. */
static void relay_connect(struct relay *r)
{
	struct client *c = r->c;
	struct worker *w = c->w;
	if (!r->has_slot) {
		if (!pool_relay_slot_take(r->sp)) {
			/* A full pool: its next free slot, as long as a client
			 * waits for a server (timer: ask again). */
			uint64_t qwt = (uint64_t)w->cfg->general.query_wait_timeout * 1000;
			if (qwt > 0 && w->now_us - r->started_us >= qwt) {
				login_failed(r, "query_wait_timeout: no room in the pool");
				return;
			}
			struct timeval tv = { 0, RELAY_RESOLVE_RETRY_MS * 1000 };
			evtimer_add(r->timer, &tv);
			return;
		}
		r->has_slot = true;
		r->slot_us = w->now_us;
	}
	uint64_t deadline = r->slot_us + (uint64_t)w->cfg->general.connect_timeout * 1000;
	if (!pool_target_address(r->sp)) {
		if (w->now_us >= deadline || !pool_target_resolving(r->sp)) {
			login_failed(r, "cannot resolve the server's host name");
			return;
		}
		struct timeval tv = { 0, RELAY_RESOLVE_RETRY_MS * 1000 };
		evtimer_add(r->timer, &tv);
		return;
	}
	r->b.startup_params = &c->startup_params;
	r->b.replication = c->replication == CLIENT_REPLICATION_LOGICAL ? "database" : "true";
	if (!auth_open_server_conn(&r->b, &relay_profile, c->pool, r->sp, r->sp->host, r->sp->database)) {
		/* A connect that could not start has failed the client through
		 * its down event; a login that could not be set (out of
		 * memory) has not. */
		if (r->c)
			login_failed(r, "cannot open a server connection");
		return;
	}
	uint64_t left = deadline > w->now_us ? deadline - w->now_us : 0;
	struct timeval tv = { (time_t)(left / 1000000), (suseconds_t)(left % 1000000) };
	evtimer_add(r->timer, &tv);
}

static void relay_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct relay *r = arg;
	if (!r->c)
		return;
	worker_update_clock(r->c->w);
	if (bconn_state(&r->b) == BCONN_CLOSED) {
		relay_connect(r);   /* the address lookup's retry, or a slot's */
		return;
	}
	if (bconn_state(&r->b) != BCONN_READY)
		login_failed(r, "connect_timeout: the server did not complete the login");
}

/* Logged in to pgcat: its server is opened for it; the welcome waits. */
static void relay_welcome(struct client *c)
{
	struct worker *w = c->w;
	struct relay *r = calloc(1, sizeof *r);
	if (r)
		r->params = buf_new(BUF_SMALL);
	if (r)
		r->timer = evtimer_new(w->base, relay_timer_cb, r);
	if (!r || !r->params || !r->timer) {
		if (r && r->params)
			buf_free(r->params);
		if (r && r->timer)
			event_free(r->timer);
		free(r);
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	r->c = c;
	r->sp = pool_pick_target(c->pool);
	r->started_us = w->now_us;
	bconn_init(&r->b, w, relay_ready, relay_message, relay_down, r);
	r->b.on_drain = relay_server_drained;
	r->b.on_bytes = relay_server_bytes;
	free(c->kind_state);
	c->kind_state = r;
	/* Relaying from now (on the worker's list of active clients, which
	 * KILL and shutdown walk), though nothing of its is relayed until its
	 * server is there (relay_client_input). */
	client_set_state(c, CLIENT_RELAY);
	relay_connect(r);
}

/* ---- the relay ---- */

/* The client's bytes to its server, message by message as far as they
 * came (a message need not be whole: the rest follows as it arrives). */
static void relay_client_input(struct client *c)
{
	struct relay *r = relay_of(c);
	if (!r || bconn_state(&r->b) != BCONN_READY)
		return;
	struct buf *in = c->io.in;
	if (!in)
		return;
	struct buf *out = io_out(&r->b.io);
	while (buf_len(in) > 0 && io_out_len(&r->b.io) < RELAY_HIGH) {
		if (r->fwd_remaining > 0) {
			size_t n = buf_len(in);
			if (n > r->fwd_remaining)
				n = r->fwd_remaining;
			if (buf_move_to(in, out, n) < 0) {
				client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
				return;
			}
			r->fwd_remaining -= (uint32_t)n;
			continue;
		}
		uint8_t hdr[5];
		if (buf_copyout(in, hdr, 5) < 5)
			return;
		struct proto_frame f;
		if (proto_frame_header(hdr, 5, (uint32_t)c->w->cfg->general.max_packet_size, &f) != PROTO_FRAME_OK) {
			client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "invalid message length or type");
			return;
		}
		if (f.type == PqMsg_Terminate) {
			client_close(c, NULL, NULL);   /* (closing sends the server its Terminate) */
			return;
		}
		r->fwd_remaining = f.len + 1;
	}
}

/* The client's output drained: its server is read again. */
static void relay_client_drain(struct client *c)
{
	struct relay *r = relay_of(c);
	if (r)
		bconn_pause(&r->b, false);
}

/* A cancel request for a replication connection: its server's own key
 * is not kept, and a walsender's work ends when its client says so. */
static void relay_cancel(struct client *c)
{
	log_debug("C-%llu: cancel request for a replication connection ignored", (unsigned long long)c->id);
}

static bool relay_idle_message(struct client *c, const struct proto_frame *f)
{
	(void)f;
	relay_client_input(c);   /* (not reached: the client is never idle) */
	return false;
}

const struct session_ops replication_session = {
	.name = "replication",
	.welcome = relay_welcome,
	.message = relay_idle_message,
	.on_own_input = relay_client_input,
	.on_own_cancel = relay_cancel,
	.on_own_drain = relay_client_drain,
	.closing = relay_forget,
};
