/* SPDX-License-Identifier: MIT */
/*
 * admin: the admin console (SPEC §7) — a sibling of the client machine that
 * a login to database "pgcat" (or "pgbouncer") is handed to. Simple
 * protocol only; commands come from one table.
 */
#ifndef PGCAT_ADMIN_H
#define PGCAT_ADMIN_H

#include <stdbool.h>

#include "proto.h"
#include "types.h"

/* Login accepted: send the welcome (AuthenticationOk ... ReadyForQuery). */
void admin_welcome(struct client *c);
/* Handle the message whose header is f at the head of the client's input.
 * Returns false when more bytes are needed. */
bool admin_handle_message(struct client *c, const struct proto_frame *f);
/* Janitor: answer PAUSE commands whose pools have drained. */
void admin_janitor(struct worker *w);
/* Another worker's console asked for SHOW <what> (clients, servers):
 * write this worker's rows into its shared-memory slot for request seq. */
void admin_dump(struct worker *w, const char *what, uint64_t seq);

#endif
