/* SPDX-License-Identifier: MIT */
/*
 * admin_ops: the console's commands for incidents and switchovers that
 * reach into this worker's clients and servers (SPEC §7): KILL_CLIENT and
 * what WAIT_CLOSE waits for. admin.c parses the commands and holds the
 * replies; worker.c hands on what another worker's console posted.
 */
#ifndef PGCAT_ADMIN_OPS_H
#define PGCAT_ADMIN_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "types.h"

/* KILL_CLIENT: close this worker's client with that id (SHOW CLIENTS'
 * id), and the server connection it holds. false: no such client here. */
bool admin_kill_client(struct worker *w, uint64_t id);
/* SHM_ADMIN_KILL_CLIENT posted by another worker: "<worker pid> <id>". */
void admin_kill_client_posted(struct worker *w, const char *arg);

/* WAIT_CLOSE: this worker's server connections that RECONNECT marked
 * (close_needed) in db's pools (NULL: every pool). */
int admin_marked_servers(struct worker *w, const char *db);
/* The same in the other workers, from their SHOW SERVERS rows of dump
 * seq; -1 when a worker's rows could not be read (ask again). */
int admin_marked_servers_elsewhere(struct worker *w, uint64_t seq, const char *db);

#endif
