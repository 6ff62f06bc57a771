/* SPDX-License-Identifier: MIT */
/*
 * server_move: a server connection idle in its pool as one process hands
 * it to the next (-R, handover.c): whether it may go, its state as bytes,
 * and the connection made again from them and its socket on the other
 * side, in the pool and server set of the same names, idle. Nothing is
 * sent to the server: it never knows.
 */
#ifndef PGCAT_SERVER_MOVE_H
#define PGCAT_SERVER_MOVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pktbuf;
struct server;
struct worker;

/* Idle in its pool, clean ('I', nothing owed, no reset due), plain TCP or
 * Unix socket, nothing in flight. Also stops reading it, so that a later
 * look finds it at rest when this one did not. */
bool server_move_ready(struct server *s);
/* Between transactions, nothing owed or in flight, plain TCP (pure). */
bool server_move_at_boundary(const struct server *s);
/* A server taken over that cannot be used here (its client could not be
 * taken, a malformed record): closed politely, as an idle one. */
void server_move_drop(struct server *s, const char *why);
/* The same for a server linked to a session-mode client, between its
 * transactions: it moves with the client. */
bool server_move_linked_ready(struct server *s);
/* A server a look above stopped reading and that stays: read again. */
void server_move_abandoned(struct server *s);
/* s's state appended to pb; false: pb too small. */
bool server_move_write(struct server *s, struct pktbuf *pb);
/* The server connection of socket fd and the state rec of len bytes, in
 * worker w: idle in its pool, or handed to a client waiting there; linked:
 * in state LOGIN for the caller to hand to its session-mode client
 * (pool_grant_adopted), which then processes what it had not read. NULL:
 * a record this process cannot read, or no server set of those names here
 * (then the server is sent a Terminate); fd is closed either way. */
struct server *server_move_read(struct worker *w, int fd, const uint8_t *rec, size_t len, bool linked);

/* Promises (record 'N'): the old process tells the new one how many
 * connections of each server set it will hand over (delta: more, or fewer
 * when some closed meanwhile), so that the new one counts them against
 * the pool's size and its clients wait for them rather than a new login
 * (pool_promise). At the end of the handover what was not kept is
 * forgotten (promises_end). promisable: the connections of sp that could
 * move (TLS ones cannot). */
struct srvpool;
void server_move_promise_write(const struct srvpool *sp, int delta, struct pktbuf *pb);
void server_move_promise_read(struct worker *w, const uint8_t *rec, size_t len);
void server_move_promises_end(struct worker *w);
int server_move_promisable(const struct srvpool *sp);

#endif
