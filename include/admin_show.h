/* SPDX-License-Identifier: MIT */
/*
 * admin_show: the admin console's SHOW commands, and the listings that
 * every worker writes into shared memory for a console on another.
 */
#ifndef PGCAT_ADMIN_SHOW_H
#define PGCAT_ADMIN_SHOW_H

#include <stdbool.h>
#include <stdint.h>

#include "types.h"

/* SHOW name from this worker alone; false: no such SHOW. */
bool admin_show(struct client *c, const char *name);
/* The listing (enum shm_dump_kind) that SHOW name gathers from every
 * worker, or -1; and its name, as posted to the others. */
int admin_dump_kind(const char *name);
const char *admin_dump_name(int kind);
/* The console's worker: its own rows of listing kind, then every other
 * worker's (written for request seq). */
void admin_finish_dump(struct client *c, int kind, uint64_t seq);
/* Another worker's console asked for SHOW <what> (clients, servers):
 * write this worker's rows into its shared-memory slot for request seq. */
void admin_dump(struct worker *w, const char *what, uint64_t seq);

#endif
