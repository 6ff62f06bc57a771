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

#endif
