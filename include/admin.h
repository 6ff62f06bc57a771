/* SPDX-License-Identifier: MIT */
/*
 * admin: the admin console (SPEC §7) — a sibling of the client machine that
 * a login to database "pgcat" (or "pgbouncer") is handed to. Simple
 * protocol only; commands come from one table.
 */
#ifndef PGCAT_ADMIN_H
#define PGCAT_ADMIN_H

#include <stdbool.h>

#include "session.h"
#include "types.h"

/* The admin console's session (session.h): its welcome and its idle
 * messages. The worker hands it to the login. */
extern const struct session_ops admin_session;
/* Janitor: answer PAUSE commands whose pools have drained. */
void admin_janitor(struct worker *w);

#endif
