/* SPDX-License-Identifier: MIT */
/*
 * prep_server: what the server side calls of prepared statements (src/
 * prep_server.c): its replies matched with what pgcat sent, and what a
 * connection holds forgotten when its session is reset, discarded or
 * closed. A header of its own so that server.c, below prepared.c, names
 * nothing of the client side's (prepared.h includes it for the rest).
 */
#ifndef PGCAT_PREP_SERVER_H
#define PGCAT_PREP_SERVER_H

#include <stdbool.h>
#include <stdint.h>

struct server;

enum prep_verdict {
	PREP_PASS,      /* forward */
	PREP_SWALLOW,   /* drop the message */
	PREP_REPLACE,   /* send *repl instead (caller frees it with free()) */
	PREP_PREFIX     /* send a ParseComplete first (pgcat's, owed), then forward */
};
/* A server reply while linked (type, and the whole message for E/C when
 * msg is not NULL). */
enum prep_verdict prep_server_message(struct server *s, uint8_t type, const uint8_t *msg, uint32_t total,
				      uint8_t **repl, uint32_t *repl_len);
/* Does this reply type need the whole message for prep_server_message? */
bool prep_server_wants(const struct server *s, uint8_t type);

/* The server's session was reset or lost: forget pending matches. */
void prep_server_reset_pending(struct server *s);
/* n Syncs of the client's that the server ignored (sent behind the Execute
 * of a COPY FROM STDIN, before after more Syncs of the client's:
 * txn_copy_in): the segments they would have ended are one. */
void prep_server_syncs_ignored(struct server *s, uint32_t n, uint32_t after);
/* The server connection ends: release everything. */
void prep_server_free(struct server *s);
/* The server ran DISCARD ALL (reset query): it holds nothing now. */
void prep_server_discarded(struct server *s);
/* s is linked to an end whose messages are not rewritten (a fan-out's
 * leg, which parses its own unnamed statement): whatever unnamed statement
 * a client left there is not known to be there any more. */
void prep_server_forget_unnamed(struct server *s);

#endif
