/* SPDX-License-Identifier: MIT */
/*
 * pool_internal: what the files of the pool room share (src/pool.c,
 * pool_janitor.c): the helpers pool.c keeps for its lists, waiters and
 * connects, which the janitor's periodic duties use too. Not an interface:
 * no other room includes it (they use include/pool.h).
 */
#ifndef PGCAT_POOL_INTERNAL_H
#define PGCAT_POOL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "pool.h"

struct list_node;

/* ---- srvpools and pools (pool.c) ---- */

/* Frees sp (its servers are gone) and zeroes its shared counts. */
void srvpool_free(struct srvpool *sp);
/* Closes every server on head (one of a srvpool's lists). */
void srvpool_close_list(struct list_node *head);
/* Closes p's servers and frees it, off the worker's list. */
void pool_free(struct pool *p);

/* ---- connections and waiters (pool.c) ---- */

/* Connections to this server across every worker: pool sizes hold per
 * instance (SPEC §9). */
int srvpool_instance_total(const struct srvpool *sp);
/* One more connection to sp's server may be opened: under limit (its pool
 * size, or with the reserve), and under max_db_connections and
 * max_user_connections; evict: at a cap, an idle connection of another
 * pool may be closed to make room (for waiting clients, not for
 * min_pool_size). */
bool srvpool_may_open(struct srvpool *sp, int limit, bool evict);
/* (pool_limits.c) How many connections sp's server may have now:
 * pool_size, plus reserve_pool_size once the first waiting client has
 * waited reserve_pool_timeout. */
int srvpool_limit(const struct srvpool *sp);
/* (pool_limits.c) Room for one more connection under max_db_connections
 * and max_user_connections; evict: at a cap, an idle connection of
 * another pool of this worker is closed to make room. */
bool srvpool_cap_room(struct srvpool *sp, bool evict);
/* Logins that wait for the server's parameters and found no room under
 * the caps: a connection for them, once there is room (janitor). */
void pool_defaults_retry(struct pool *p);
/* Its last connect failed less than the reconnect back-off ago and no
 * connection to it is alive. */
bool srvpool_recently_failed(const struct srvpool *sp, uint64_t now);
/* Connects for sp's waiters not yet promised a connection being opened,
 * up to pool_size. */
void srvpool_maybe_launch(struct srvpool *sp);
/* The first waiter of sp, taken off the list. */
struct pool_waiter *srvpool_take_waiter(struct srvpool *sp);
/* A waiter no longer on any list hears that its wait failed. */
void pool_fail_waiter(struct pool_waiter *pw, const char *sqlstate, const char *message);

#endif
