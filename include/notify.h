/* SPDX-License-Identifier: MIT */
/*
 * notify: LISTEN/NOTIFY in transaction mode (SPEC §11, doc/listen-notify.md).
 * A client's LISTEN does not stay on a pooled server: pgcat registers the
 * client for the channel and holds, per (pool, shard), one listening
 * connection of its own (bconn.c, outside the pool) that LISTENs to the
 * union of its clients' channels. Each NotificationResponse it receives
 * goes to every client registered for its channel, with the notifying
 * client's pid (the shared backend pid map, shm.h), at the moments
 * PostgreSQL would deliver it: at once to a client between transactions,
 * else queued until its transaction's ReadyForQuery.
 *
 * Ordering as PostgreSQL's: a LISTEN is answered once the listening
 * connections run it, and a listening client's ReadyForQuery 'I' is held
 * (client_end hold_ready) until a round trip on each listening connection
 * shows that every notification committed before it has arrived, so that
 * a client's own NOTIFY reaches it before its transaction's end, as on a
 * server.
 *
 * Above client.c (it writes to clients and resumes them); the session
 * (notify_session.c) calls it. One hub per worker, made on first use: the
 * listening connections are per worker, not per instance (each worker
 * listens for its own clients; see the doc).
 */
#ifndef PGCAT_NOTIFY_H
#define PGCAT_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "types.h"

/* A channel name: an identifier, truncated to 63 bytes as PostgreSQL does. */
#define NOTIFY_CHANNEL_MAX 63

struct notify_client;

/* The client's notification state (made on first use; NULL: out of
 * memory, or not a transaction-mode pool's client). */
struct notify_client *notify_client_get(struct client *c);
/* The client's, if it has one (the normal session's kind_state). */
static inline struct notify_client *notify_client_of(struct client *c)
{
	return (struct notify_client *)c->kind_state;
}

/* The client's prepared statements and portals that are a LISTEN or
 * UNLISTEN of the extended protocol (notify_session.c keeps them here;
 * drivers make one at a time: the unnamed one, or a named one such as
 * postgres.js's). Freed with the client. */
struct notify_stmt {
	char *name;                   /* "": the unnamed one */
	bool portal;                  /* a portal (Bind), else a statement (Parse) */
	int cmd;                      /* enum notify_sql */
	char channel[NOTIFY_CHANNEL_MAX + 1];
};
struct notify_stmts {
	struct notify_stmt *v;
	uint32_t n, cap;
	bool await_sync;              /* executed: its Sync's ReadyForQuery waits for the LISTEN */
};
struct notify_stmts *notify_stmts(struct notify_client *nc);

/* Register (listen true) or unregister the client for channel now
 * (autocommit); channel NULL with listen false: UNLISTEN *. false: out of
 * memory. */
bool notify_apply(struct notify_client *nc, bool listen, const char *channel);
/* Inside a transaction: the same, done when it commits (notify_tx_end). */
bool notify_defer(struct notify_client *nc, bool listen, const char *channel);
/* The client's transaction ended (committed or not) where no server
 * reported it (a held BEGIN answered by pgcat, a failed transaction's
 * ROLLBACK). */
void notify_tx_end(struct notify_client *nc, bool committed);

/* Hold the client's ReadyForQuery (status): sent once its channels are
 * listened to on every shard and the notifications due before it were
 * written (c->reply_held until then). barrier: ask the listening
 * connections for everything committed up to now first. */
void notify_hold_ready(struct notify_client *nc, char status, bool barrier);

/* Queued notifications go to the client if it is between transactions. */
void notify_flush(struct notify_client *nc);

/* The client goes: its registrations with it. */
void notify_client_free(struct client *c);

/* The worker exits: every listening connection closes. */
void notify_hub_free(struct worker *w);

#endif
