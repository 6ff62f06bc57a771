/* SPDX-License-Identifier: MIT */
/*
 * pool_internal: what the files of the pool room share (src/pool.c,
 * pool_janitor.c, pool_reload.c): the helpers pool.c keeps for its lists,
 * waiters and connects, which the janitor's periodic duties and a reload
 * use too. Not an interface: no other room includes it (they use
 * include/pool.h).
 */
#ifndef PGCAT_POOL_INTERNAL_H
#define PGCAT_POOL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "pool.h"

struct list_node;

/* ---- srvpools and pools (pool.c) ---- */

/* A pool of (cp, cu), not yet on the worker's list; NULL: out of memory. */
struct pool *pool_new(struct worker *w, const struct config_pool *cp, const struct config_user *cu);
/* The srvpools of cp for p, reusing those of old that match (the others
 * stay in old); false: out of memory. */
bool build_targets(struct pool *p, const struct config_pool *cp, struct srvpool **old, size_t n_old,
		   struct srvpool ***out, size_t *n_out);
/* p's settings from cfg (sizes, mode, time limits), cp and cu its config. */
void pool_apply_config(struct pool *p, const struct config *cfg, const struct config_pool *cp,
		       const struct config_user *cu);
/* The SCRAM verifier of p's user, again (its password changed). */
void pool_derive_scram(struct pool *p);
/* p, a pool of database cp, is being freed: cp goes too when it was made
 * from `*` and no other pool points at it (pool_reload.c). */
void pool_autodb_release(struct worker *w, const struct config_pool *cp, const struct pool *freed);
/* Frees a user auth_query found (struct pool's own_user). */
void own_user_free(struct config_user *u);

/* Frees sp (its servers are gone) and zeroes its shared counts. */
void srvpool_free(struct srvpool *sp);
/* Closes every server on head (one of a srvpool's lists). */
void srvpool_close_list(struct list_node *head);
/* A pause ended: sp's idle servers to the waiters that may have one now
 * (all, or with the writes still paused those that only read), and new
 * connections launched for the rest of those. */
void srvpool_wake_waiters(struct srvpool *sp);
/* The write pause: no server of p (this worker's) serves a transaction
 * that may write (each one linked is write_gated, none between states). */
bool pool_writes_drained_here(const struct pool *p);
/* Closes every server of sp. */
void srvpool_close_all(struct srvpool *sp);
/* Server s to waiter pw, no longer on any waiters list (its wait counted,
 * its link write_gated if the writes are paused and it only reads). */
void srvpool_grant(struct server *s, struct pool_waiter *pw);
/* Closes p's servers and frees it, off the worker's list. */
void pool_free(struct pool *p);

/* ---- connections and waiters (pool.c) ---- */

/* Connections to this server across every worker: pool sizes hold per
 * instance (SPEC §9). */
int srvpool_instance_total(const struct srvpool *sp);
/* (pool_limits.c) This worker's count of sp's connections, with its
 * reservations, into the shared segment. */
void srvpool_publish(const struct srvpool *sp);
/* (pool_limits.c) Room for one more connection to sp's server, taken: in
 * one step over every worker (the segment's open lock), the instance's
 * count is under limit (its pool size, or with the reserve) and under
 * max_db_connections and max_user_connections, and sp's published count
 * is one more (sp->n_reserved). evict: at a cap, an idle connection of
 * another pool of this worker is closed to make room (for waiting
 * clients, not for min_pool_size). false: no room, or the lock could not
 * be had; nothing is opened now, and the janitor's next tick asks again.
 * Each true is followed, in the same event, by srvpool_connect. */
bool srvpool_reserve(struct srvpool *sp, int limit, bool evict);
/* (pool_limits.c) sp's server is at max_db_connections or
 * max_user_connections, counted over every worker. */
bool srvpool_at_cap(const struct srvpool *sp);
/* server_connect for a reservation of srvpool_reserve: the connection
 * takes its place in the counts, or (failing before it began) the
 * reservation is dropped. */
struct server *srvpool_connect(struct srvpool *sp);
/* (pool_limits.c) How many connections sp's server may have now:
 * pool_size, plus reserve_pool_size once the first waiting client has
 * waited reserve_pool_timeout. */
int srvpool_limit(const struct srvpool *sp);
/* Logins that wait for the server's parameters and found no room under
 * the caps: a connection for them, once there is room (janitor). */
void pool_defaults_retry(struct pool *p);
/* Its last connect failed less than the reconnect back-off ago and no
 * connection to it is alive. */
bool srvpool_recently_failed(const struct srvpool *sp, uint64_t now);
/* A login of sp failed less than the back-off ago: no new one yet, even
 * when the pool holds other connections. */
bool srvpool_login_backoff(const struct srvpool *sp, uint64_t now);
/* Connects for sp's waiters not yet promised a connection being opened,
 * up to pool_size. */
void srvpool_maybe_launch(struct srvpool *sp);
/* The first waiter of sp, taken off the list. */
struct pool_waiter *srvpool_take_waiter(struct srvpool *sp);
/* A waiter no longer on any list hears that its wait failed. */
void pool_fail_waiter(struct pool_waiter *pw, const char *sqlstate, const char *message);

#endif
