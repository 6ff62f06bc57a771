/* SPDX-License-Identifier: MIT */
/*
 * admin_queries: the console's SHOW QUERIES and RESET QUERIES (query
 * statistics per shape, qstats.h; doc/monitoring.md).
 */
#ifndef PGCAT_ADMIN_QUERIES_H
#define PGCAT_ADMIN_QUERIES_H

#include "types.h"

/* SHOW QUERIES [db] [ORDER BY column [ASC|DESC]] [LIMIT n]: the words
 * after SHOW QUERIES. One row per (database, user, shape), summed over
 * the workers; by total_exec_time, the largest first, unless ordered. */
void admin_show_queries(struct client *c, char *const *words, int n);

/* RESET QUERIES [db]: the shapes of db's pools (of all: db NULL) are no
 * longer shown, and count afresh from their next call. */
void admin_reset_queries(struct client *c, const char *db);

#endif
