/* SPDX-License-Identifier: MIT */
/*
 * server_internal: what the three files of a server connection share
 * (server_conn.c below, server.c's state machine, server_use.c above):
 * server_conn.c's functions that the others call. Not for the rest of
 * pgcat, which has server.h.
 */
#ifndef PGCAT_SERVER_INTERNAL_H
#define PGCAT_SERVER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* A server connection of sp, on no list yet (state CLOSED). */
struct server *server_new(struct srvpool *sp);
/* One of pgcat's own simple Queries went to the server: it owes a
 * ReadyForQuery, and the server's unnamed statement is gone (PostgreSQL
 * drops it at any simple Query), whoever's it was. */
void server_own_query_sent(struct server *s);
/* A simple Query of pgcat's own (closes s if it does not fit). */
void server_send_query(struct server *s, const char *sql);
/* A reply nobody asked for (SPEC §10): s is closed, see server_conn.c. */
void server_close_unasked(struct server *s, uint8_t type);
/* server_fast_close: in session mode, linked, between the client's
 * transactions, a server marked close_when_idle ends with its client's
 * session. true: it did (s is closed). */
bool server_fast_close_if_due(struct server *s);
/* log_connections' line for a new connection; TCP_NODELAY and keepalive. */
void server_log_new_connection(const struct server *s);
void server_set_socket_options(struct server *s);
/* query_stats (server_qstats.c): the rows of a CommandComplete of len
 * (its length field) at the head of in (false: its tag is not all there
 * yet: wait for more); the request just answered, counted under its
 * shape. */
struct buf;
bool server_note_rows(struct server *s, const struct buf *in, uint32_t len);
void server_count_shape(struct server *s, uint64_t exec_us);

#endif
