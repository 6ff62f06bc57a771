/* SPDX-License-Identifier: MIT */
/*
 * notify_session: LISTEN and UNLISTEN as the normal session answers them
 * in transaction mode (SPEC §11): a Query of one LISTEN or UNLISTEN, or
 * an unnamed statement of one through the extended protocol (Parse,
 * Bind, Describe, Execute, Close of it, and its Sync), never reach a
 * server; pgcat answers them as PostgreSQL would and registers the
 * client with notify.c. Inside a transaction they take effect at its
 * commit. Session mode is left alone: the client's own server listens.
 */
#ifndef PGCAT_NOTIFY_SESSION_H
#define PGCAT_NOTIFY_SESSION_H

#include <stdbool.h>
#include <stddef.h>

#include "proto.h"
#include "session.h"
#include "types.h"

/* What a text is, for LISTEN/NOTIFY (notify_sql_parse). */
enum notify_sql { NOTIFY_SQL_NONE, NOTIFY_SQL_LISTEN, NOTIFY_SQL_UNLISTEN, NOTIFY_SQL_UNLISTEN_ALL };

/* sql (len bytes, up to a NUL) is one LISTEN ch, UNLISTEN ch or UNLISTEN
 * * and nothing more (blanks, comments, semicolons): which, and the
 * channel (folded or unquoted, truncated to 63 bytes) in channel. */
enum notify_sql notify_sql_parse(const char *sql, size_t len, char *channel, size_t channel_size);

/* An idle client's message f: taken and answered (NOTIFY_HERE_ANSWERED),
 * or more bytes are needed (NOTIFY_HERE_WAIT), or not LISTEN's
 * (NOTIFY_HERE_NOT). */
enum notify_here { NOTIFY_HERE_NOT, NOTIFY_HERE_ANSWERED, NOTIFY_HERE_WAIT };
enum notify_here notify_session_message(struct client *c, const struct proto_frame *f);

/* session_ops.active_query, .active_extended and .ready_held of the normal
 * session. */
enum session_query notify_session_active_query(struct client *c, struct server *s, const struct proto_frame *f,
					       const char *sql, size_t len);
enum session_query notify_session_active_extended(struct client *c, struct server *s, const struct proto_frame *f);
void notify_session_ready_held(struct client *c, bool committed);

/* The client's transaction ended without a server's word (a held BEGIN's
 * COMMIT or ROLLBACK, a failed transaction's ROLLBACK): its deferred
 * LISTENs apply or go. reply: what pgcat answers (ending in the
 * ReadyForQuery, which waits for the LISTENs to be in place). */
void notify_session_tx_end(struct client *c, bool committed, const void *reply, size_t reply_len);

#endif
