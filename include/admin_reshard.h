/* SPDX-License-Identifier: MIT */
/*
 * admin_reshard: the console's online reshard commands (reshard.h,
 * doc/sharding.md): SHOW RESHARD, and RESHARD pool [HOLD], RESHARD
 * CUTOVER pool, RESHARD CANCEL pool, RESHARD CLEANUP pool.
 */
#ifndef PGCAT_ADMIN_RESHARD_H
#define PGCAT_ADMIN_RESHARD_H

#include "types.h"

/* One row per pool that has or had a reshard since pgcat started (or
 * whose state_dir holds one). */
void admin_show_reshard(struct client *c);
/* SHOW RESHARD TABLES: per pool, table and source shard. */
void admin_show_reshard_tables(struct client *c);
/* The words after RESHARD. */
void admin_reshard(struct client *c, char *const *words, int n);

#endif
