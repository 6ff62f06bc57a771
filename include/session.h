/* SPDX-License-Identifier: MIT */
/*
 * session: what a logged-in connection is handed to. The connection
 * machinery (login.c: startup, authentication; client.c: the io, the
 * framing of the idle pump, client_close) is shared; what the session does
 * with it depends on its kind, chosen at login: the normal session
 * (session_normal.c: route, pool, server) or the admin console (admin.c),
 * siblings through this table, so that the pump never branches on the
 * kind.
 *
 * A data header with no module of its own: client.c calls a kind only
 * through its table (the modules of the normal session, route.c,
 * prepared.c and the fan-out, sit above client.c and are reached through
 * it too), and the worker, above both, hands both kinds' tables
 * in (struct worker: normal_session, admin_session). The login itself
 * (login.c) is reached the same way, through struct login_ops below.
 */
#ifndef PGCAT_SESSION_H
#define PGCAT_SESSION_H

#include <stdbool.h>

#include "fanout.h"
#include "prepared.h"
#include "proto.h"
#include "route.h"
#include "types.h"

/* What the session makes of a Query of a linked client (active_query). */
enum session_query {
	SESSION_QUERY_FORWARD,    /* to the server, as it is */
	SESSION_QUERY_ANSWERED,   /* taken and answered by the session */
	SESSION_QUERY_WAIT,       /* not before the server answered what came before it */
	SESSION_QUERY_MORE        /* more of the message first */
};

struct session_ops {
	const char *name;   /* "normal", "admin": for logs */
	/* Login accepted (authentication done, c->auth freed): greet the
	 * client (AuthenticationOk ... ReadyForQuery, through
	 * client_finish_welcome) and take what it sent meanwhile, or wait
	 * for what the greeting needs. May close the client. */
	void (*welcome)(struct client *c);
	/* The idle client has the message whose header is f at the head of
	 * its input (Terminate, the skipping of an unserved request and the
	 * rest of a discarded message were taken care of before). true: go
	 * on with the next message, if still idle; false: stop until more
	 * bytes or an event. */
	bool (*message)(struct client *c, const struct proto_frame *f);

	/* The rest only for a session that links to servers (NULL in the
	 * admin console's table, which never does). */

	/* Linked to s, with a shard guard on (c->shard_phase, route.h):
	 * message f at the head of the input, before it is forwarded; *d says
	 * the next shard phase and what a refusal consumed. */
	enum route_active (*guard)(struct client *c, struct server *s, const struct proto_frame *f,
				   struct route_active_decision *d);
	/* Linked to s, whose transaction is write_gated (txn.h): message f
	 * before it is forwarded; what might write is refused on s
	 * (FORWARD, WAIT or CONSUMED, as the guard's). NULL: never gated. */
	enum route_active (*write_gate)(struct client *c, struct server *s, const struct proto_frame *f,
					struct route_active_decision *d);
	/* Linked to s, which takes rewritten messages (s->prep_on): message f
	 * (its bytes at the head of the input as far as asked) is rewritten
	 * for s or forwarded as it is (prepared.h); on PREP_DONE *stream_rest
	 * bytes of it are left for the pump to stream. */
	enum prep_action (*rewrite)(struct client *c, struct server *s, const struct proto_frame *f,
				    uint32_t *stream_rest);
	/* Linked to s: a Query whose text (sql, len bytes, whole in the
	 * input, f its header) starts with l, u or a comment, before it is
	 * forwarded (LISTEN and UNLISTEN in transaction mode are the
	 * session's, SPEC §11). NULL: all go to the server. */
	enum session_query (*active_query)(struct client *c, struct server *s, const struct proto_frame *f,
					   const char *sql, size_t len);
	/* Linked to s, in the extended protocol: a Parse whose text starts
	 * with l, u or a comment (whole in the input), and while
	 * c->session_watch every Bind, Describe, Execute, Close and Sync
	 * (LISTEN as a prepared statement inside a transaction). NULL: all
	 * go to the server. */
	enum session_query (*active_extended)(struct client *c, struct server *s, const struct proto_frame *f);
	/* The ReadyForQuery 'I' ending the client's transaction was held for
	 * it (client_end.h hold_ready): the session sends it, then lets the
	 * client's next requests in (c->reply_held). */
	void (*ready_held)(struct client *c, bool committed);
	/* In the states where the session drives the client itself
	 * (CLIENT_FANOUT, CLIENT_RELAY): bytes arrived (a cross-shard COPY's
	 * rows, a replication client's messages), or a cancel request for
	 * the work under way. */
	void (*on_own_input)(struct client *c);
	void (*on_own_cancel)(struct client *c);
	/* In those states: its output drained below the low watermark (a
	 * cross-shard read, a replication stream goes on). NULL: not told. */
	void (*on_own_drain)(struct client *c);
	/* The client is closing, still in its state: what the session holds
	 * goes (cross-shard work, prepared statements). Any kind may set it. */
	void (*closing)(struct client *c);
	/* What its fan-outs report (fanout.h). */
	const struct fanout_events *fanout;
};

/* Before the session: the login (login.c), which reads a connection from
 * its first byte to its authentication and then calls its session's
 * welcome. Above client.c, which calls it only through this table, that
 * the worker installs (w->login). */
struct login_ops {
	/* A client in CLIENT_STARTUP: take its startup packet (or SSLRequest,
	 * GSSENCRequest, CancelRequest, a direct TLS ClientHello). */
	void (*read_startup)(struct client *c);
	/* A client in CLIENT_AUTH: take its authentication messages. */
	void (*read_auth)(struct client *c);
};

#endif
