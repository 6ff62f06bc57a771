/* SPDX-License-Identifier: MIT */
/*
 * notify_move: the clients of a transaction-mode pool that LISTEN, and the
 * worker's listening connections that serve them (notify.h, SPEC §11),
 * handed to the process that takes this one's place (-R, handover.c).
 *
 * They move together, per pool: every such client of the pool between
 * requests (read no further meanwhile), every listening connection of the
 * pool between commands (read no further either: what PostgreSQL sends
 * it meanwhile waits in the socket, and is read by the new process), then
 * the connections, the clients with their channels and their LISTEN
 * statements, and an end. The new process registers the clients on the
 * connections it was handed and reads those only at the end, so that no
 * notification finds a channel without its clients: none is lost, none
 * comes twice, and PostgreSQL sees no new login. A group with a member
 * that cannot move (TLS, or a connection of it over TLS) stays and drains
 * whole.
 *
 * The records (integers high byte first), after handover.c's type byte:
 *   'w' old -> new, at the start: cstring pool, cstring user: the pool's
 *       listening connections will come (the new process opens none for
 *       it meanwhile), or with 'g' that they will not
 *   'W' a listening connection, its socket beside it: cstring pool,
 *       cstring user, u32 shard, cstring host, u32 port, cstring
 *       database, u32 input length, the input (not read yet)
 *   'M' a client: u32 its client_move part's length, that part, u16
 *       channels, each a cstring, u16 LISTEN statements, each cstring
 *       name, u8 portal, u8 kind, cstring channel; its socket beside it
 *   'g' the group's end: cstring pool, cstring user
 */
#ifndef PGCAT_NOTIFY_MOVE_H
#define PGCAT_NOTIFY_MOVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

struct worker;

/* Old side, as the handover starts: 'w' for each pool with listening
 * clients. false: the link failed. */
bool notify_move_promise(struct worker *w, int link_fd);
/* Old side, at each look: the groups whose members and connections are
 * all at a boundary go (their clients are closed here as moved: *moved
 * counts them). *staying: the members of groups that never can, whose
 * own reason to stay (client_move_never_why) is none. false: the link
 * failed. */
bool notify_move_give(struct worker *w, int link_fd, unsigned *moved, unsigned *staying);
/* A client that moves with its pool's group, not alone: one of a normal
 * session whose kind_state is its notification state (notify.h). */
static inline bool notify_move_grouped(const struct client *c)
{
	return c->kind_state && !c->is_admin && !c->console_peer && c->replication == CLIENT_REPLICATION_NONE;
}
/* Why c would drain in a takeover instead of moving, as
 * client_move_never_why, or because of its group: "tls" (its listening
 * connection is over TLS), "listens with a client that stays" (another
 * member cannot move). NULL: it moves. */
const char *notify_move_never_why(const struct client *c);
/* Old side, the handover over: the connections held still read again. */
void notify_move_abandon(struct worker *w);

/* New side: a record 'w', 'W', 'M' or 'g' (rec after the type byte; its
 * sockets, each taken or closed). true: a client was taken ('M'). */
bool notify_move_take(struct worker *w, uint8_t type, const uint8_t *rec, size_t len, const int *fds, size_t n_fds);
/* New side, the link ended: nothing more is awaited (the pools open their
 * own listening connections where none came). */
void notify_move_take_end(struct worker *w);

#endif
