/* SPDX-License-Identifier: MIT */
/*
 * link: the only code that ties a client's end to a server and unties them.
 * Both pointers of the pair (end->server, s->client) are written here and
 * nowhere else, and each call checks both ends, so that a client is never
 * on two servers, a server never answers two clients, and no end is left
 * pointing at a partner that moved on.
 */
#ifndef PGCAT_LINK_H
#define PGCAT_LINK_H

#include <stdbool.h>
#include <stdint.h>

#include "types.h"

struct client_end;
struct evbuffer;
struct params;
struct txn;

/* Tie end (linked to nothing) to s (serving nobody). */
void link_attach(struct client_end *end, struct server *s);
/* Untie s from its client, if any: that client's end, or NULL. */
struct client_end *link_detach(struct server *s);

/* LISTEN/NOTIFY (SPEC §11): the server's backend pid slot names the client
 * it serves (link_attach), or the client that named NOTIFY on it a moment
 * ago (shm.h). Requests are looked at for NOTIFY: some pool listens. */
bool link_watch_notify(const struct server *s);
/* end, linked to s, sent a request naming NOTIFY. */
void link_note_notifier(struct server *s, const struct client_end *end);

/* Tie end to s and have s made ready for it (the session's settings, a
 * held BEGIN): end's ready event says when its bytes may go. */
void link_start(struct client_end *end, struct server *s);
/* s, serving another end and owing it nothing, goes on serving end as it
 * is (its session, its transaction open): two-phase commit hands a
 * client's server to a cross-shard transaction's leg (fanout_txn.c). */
void link_move(struct client_end *end, struct server *s);
/* The client went away with half a message sent: the server's stream
 * cannot be repaired, so it is untied and closed, not pooled. */
void link_abandon(struct server *s, const char *why);

/* What the client side knows of its linked server, and nothing more: the
 * client side sees a server only through these (client.c includes no
 * server header), so the server's fields stay the server's.
 *
 * s takes the client's bytes now: false while it is made ready for the
 * client (its ready event follows) or closing. It changes only on s's own
 * events, so the pump asks once per batch. */
bool link_serving(struct server *s);
/* s's output buffer, where the client's bytes go (marked for the flush at
 * the end of the loop turn: asked once per batch). */
struct buf *link_output(struct server *s);
/* (LINK_SERVER_OUT_BUDGET, what s's output holds before the client's bytes
 * wait, is in client_end.h: the server side honours it too.) */
/* The transaction on the link: what s owes, its status, SET-undo (txn.h). */
struct txn *link_txn(struct server *s);
/* The slow-query log's notes of the request s serves (slowlog.h). */
struct slowlog_req *link_slowlog(struct server *s);
/* The session settings s has. */
struct params *link_server_params(struct server *s);
/* s's connection is TLS (-R: it cannot move to another process). */
bool link_server_tls(const struct server *s);
/* A server message is half forwarded to the client: the client's stream
 * cannot take an error now. */
bool link_reply_half_sent(const struct server *s);
/* s failed in a way that says its host is unwell (rotation, SPEC §4). */
void link_server_failed(struct server *s, const char *why);
/* Cancel what s runs (a CancelRequest on a new connection). */
void link_cancel(struct server *s);
/* The client's output drained: s's replies may flow again. */
void link_resume(struct server *s);
/* Sharding: ask s where a sharded table's sharding column sits, inside the
 * client's transaction (server_ask_placement); false: out of memory. */
bool link_ask_placement(struct server *s, uint8_t table, const char *sql) __attribute__((warn_unused_result));


#endif
