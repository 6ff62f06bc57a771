/* SPDX-License-Identifier: MIT */
/*
 * client_move: a logged-in client as one process hands it to the next
 * (-R, handover.c): when it may go, its state written out as bytes, and a
 * client made again from those bytes and its socket on the other side.
 * The socket itself travels beside the bytes (SCM_RIGHTS, handover.c).
 */
#ifndef PGCAT_CLIENT_MOVE_H
#define PGCAT_CLIENT_MOVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct client;
struct pktbuf;
struct worker;

enum client_move_check {
	CLIENT_MOVE_READY,     /* between requests, reading stopped, nothing in flight */
	CLIENT_MOVE_NOT_NOW,   /* in a transaction, a request under way, output unsent: later */
	CLIENT_MOVE_NEVER      /* the console, a replication connection, TLS: it drains */
};

/* Is c at a point where it can move? When everything but what is in
 * flight says yes, reading it stops, so that it is READY at a later look
 * once that has landed. A session-mode client is READY between
 * transactions, linked to its server (c->end.server), which moves with it:
 * server_ok says that server is at a boundary too
 * (server_move_at_boundary). A client with LISTEN registrations (its
 * kind_state) is READY by this test alone; it moves with its pool's
 * other listening clients (notify_move.h), whose test adds theirs. */
enum client_move_check client_move_check(struct client *c, bool server_ok);
/* Why c would drain in a takeover instead of moving (a short word: SHOW
 * CLIENTS), or NULL: it moves at a point where it is between requests. No
 * side effect. */
const char *client_move_never_why(const struct client *c);
/* c's state (READY) appended to pb; false: pb too small. */
bool client_move_write(struct client *c, struct pktbuf *pb);
/* The client of socket fd and the state rec of len bytes, in worker w:
 * logged in to its pool, idle, what it had sent and pgcat had not read yet
 * processed (a client whose server follows: once linked to it, the
 * caller's part). NULL: a record this process cannot read or a pool it
 * does not have (the client is told why and closed; fd is closed either
 * way). */
struct client *client_move_read(struct worker *w, int fd, const uint8_t *rec, size_t len);

#endif
