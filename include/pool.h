/* SPDX-License-Identifier: MIT */
/*
 * pool: server connections per (pool, user, server) — "srvpool" — with idle
 * and active lists, and the FIFO of clients waiting for a server. A waiting
 * client is a struct pool_waiter to the pool: it hears back through the
 * events it installed there (a server granted, the wait failed...), so the
 * pool never calls into the client. The link itself is link.c's.
 */
#ifndef PGCAT_POOL_H
#define PGCAT_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "pool_types.h"
#include "types.h"

bool pool_create_all(struct worker *w) __attribute__((warn_unused_result));
/* Reload: match pools and servers of the new snapshot against the running
 * ones; new ones appear, changed sizes apply, removed ones drain. The
 * caller swaps w->cfg to newcfg afterwards and frees oldcfg unless
 * *oldcfg_kept says removed pools still point into it (they free it last). */
bool pool_reload(struct worker *w, struct config *newcfg, struct config *oldcfg, bool *oldcfg_kept)
	__attribute__((warn_unused_result));
/* [general] changed in place (admin SET): recompute inherited pool settings. */
void pool_reapply_general(struct worker *w);
/* Admin console operations on every pool of database db (NULL: all).
 * Return the number of pools matched. */
int pool_pause(struct worker *w, const char *db);
int pool_resume(struct worker *w, const char *db);
int pool_set_disabled(struct worker *w, const char *db, bool disabled);
/* DISABLE holds for database db (its pools' flag). */
bool pool_db_disabled(struct worker *w, const char *db);
/* KILL: pause, close the waiting clients and every server (the worker
 * closes the other clients first, worker_kill). */
int pool_kill(struct worker *w, const char *db);
/* Close p's waiting clients with this FATAL (sqlstate NULL: just close):
 * those waiting to log in (login), those waiting for a server (server). */
void pool_close_waiters(struct pool *p, bool login, bool server, const char *sqlstate, const char *message);
/* Does pool p serve database db (NULL: every pool)? */
bool pool_matches_db(const struct pool *p, const char *db);
int pool_reconnect(struct worker *w, const char *db);
/* No server of these pools is linked to a client (PAUSE is complete). */
bool pool_paused_drained(struct worker *w, const char *db);
/* A reshard's cutover: pause the writes of pool db (pool_types.h's
 * writes_paused) in this worker; RESUME ends it. Returns the pools paused. */
int pool_pause_writes(struct worker *w, const char *db);
/* Its end (RESHARD RESUME; RESUME ends only PAUSE's pause): the waiting
 * writers are served, unless PAUSE holds the pool too. */
int pool_resume_writes(struct worker *w, const char *db);
/* With their writes paused, no server of pool db in any worker serves a
 * transaction that may write (only write_gated links): nothing will write
 * to its layout until RESUME. */
bool pool_writes_drained(struct worker *w, const char *db);
/* This worker's word on pool_writes_drained for p, to the shared segment. */
void pool_write_gate_publish(struct pool *p);
/* Publish this worker's figures to the shared segment (janitor; cl_active
 * counted by the worker first, worker_publish). */
void pool_publish(struct worker *w);
/* The pool's waiting clients, for SHOW POOLS: how many, and the longest wait. */
void pool_count_waiting(struct worker *w, const struct pool *p, int *waiting, uint64_t *maxwait_us);
void pool_destroy_all(struct worker *w);
struct pool *pool_find(struct worker *w, const char *db, const char *user);
/* The verifier a client of p's user proves its password against (SCRAM):
 * derived from a plaintext password the first time it is asked for; NULL:
 * none (an md5 hash, no password). */
const struct scram_secret *pool_client_scram(struct pool *p);
/* The pool whose servers p's clients use: where p's database forces a
 * server_username, the forced user's pool, which the database's users
 * without a users section of their own (auth_file's, auth_query's)
 * share (PgBouncer's one pool per database); else p itself. */
struct pool *pool_serving(struct worker *w, struct pool *p);
/* Whether p serves its clients itself (pool_serving(p) is p): a pool of a
 * forced database's other users holds credentials only, no servers. */
bool pool_serves_itself(struct worker *w, struct pool *p);
/* auth_query (auth_query.c): the pool of a user the config does not list,
 * made on its first login with the secret a lookup returned (settings
 * inherited from the pool and [general]); NULL when out of memory. Kept
 * by reloads while its database is still configured and auth_query on. */
struct pool *pool_add_looked_up(struct worker *w, const struct config_pool *cp, const char *user,
				const char *secret);
/* A later lookup returned another secret: new logins (clients and
 * servers) use it; servers logged in already stay. false: out of memory. */
bool pool_set_looked_up_secret(struct pool *p, const char *secret);
/* The lookup no longer finds the user: no new logins; drained and freed
 * like a pool a reload removed. */
void pool_retire_looked_up(struct pool *p);
/* A database no pool has, made from the `*` template (PgBouncer's
 * fallback database), and the pool of user there when the template lists
 * that user (made at its first login, or again after autodb_idle_timeout
 * dropped it). false: no template, or a name it cannot make. */
bool pool_add_autodb(struct worker *w, const char *db, const char *user) __attribute__((warn_unused_result));
/* Is there any pool for this database name? */
/* Is p the first (pool, user) of its pool name in w's list (per-server
 * figures and monitor connections are kept once per pool name)?
 * skip_removed: pools a reload removed do not count. */
bool pool_first_of_name(struct worker *w, bool skip_removed, const struct pool *p);
bool pool_db_exists(struct worker *w, const char *db);

/* The server this client's next transaction goes to. */
struct srvpool *pool_pick_target(struct pool *p);
/* A replication connection to sp counts as one of its connections
 * (pool_size, max_db_connections, max_user_connections), over every
 * worker: take a slot (an idle pooled connection is closed to make room
 * when sp is full; false: no room, ask again later), give it back when
 * the replication connection closes. */
bool pool_relay_slot_take(struct srvpool *sp) __attribute__((warn_unused_result));
void pool_relay_slot_give(struct srvpool *sp);
/* An address for sp now (an IP literal, or a host name from the DNS
 * cache, which starts a lookup when it has none). false: not yet, or
 * the name does not resolve; pool_target_resolving tells which. */
bool pool_target_address(struct srvpool *sp);
bool pool_target_resolving(struct srvpool *sp);

/* Would pool_checkout(sp, ...) make the client wait for a server that is
 * busy (not one being connected for it)? */
bool pool_checkout_would_wait(const struct srvpool *sp);
/* Server connections of p beyond its pool_size (its reserve in use),
 * over every worker. */
int pool_reserve_in_use(const struct pool *p);
/* Its last connection attempt failed moments ago (reconnect back-off). */
bool pool_srvpool_failing(const struct srvpool *sp);
/* sp's host name does not resolve (its lookup failed, none under way);
 * logged as PgBouncer logs it on a pgbouncer.ini. The router bans it. */
bool pool_srvpool_unresolvable(struct srvpool *sp);
/* A client wants a server: granted one now (its granted event, returns
 * true), failed now (its failed event), or queued (its queued event; one
 * of the others comes later). */
bool pool_checkout(struct srvpool *sp, struct pool_waiter *pw);
/* -R, the new process: delta more (or fewer) connections of sp the old
 * process will hand over (struct srvpool's n_promised). */
void pool_promise(struct srvpool *sp, int delta);
/* -R: s, a server connection taken over with the session-mode client of
 * pw (server_move.c, in state LOGIN), goes on serving that client. */
void pool_grant_adopted(struct server *s, struct pool_waiter *pw);
/* The client stops waiting (for a server or for the server parameters). */
void pool_cancel_wait(struct pool_waiter *pw);
/* The client is gone while linked: detach it; the server finishes what it
 * was doing (cancel, rollback) and comes back through pool_server_clean. */
void pool_client_gone(struct server *s);
/* The client needs no more of the linked server's reply: detach it; the
 * server ends what runs there without a cancel, its replies dropped, and
 * comes back through pool_server_clean. */
void pool_client_done(struct server *s);

/* Janitor: timeouts, min_pool_size, idle_timeout, server_lifetime. */
void pool_janitor(struct worker *w);
/* A logged-in client needs the server parameters to be told: queue it
 * until a server login provides them (its defaults_known/failed events). */
void pool_request_defaults(struct pool *p, struct pool_waiter *pw);
/* The server TLS settings changed (a reload, a SET): every server
 * connection is closed as RECONNECT closes them (idle ones now, the others
 * once idle), and a failed login no longer holds clients off. */
void pool_server_tls_changed(struct worker *w);
/* A [general] key just SET in w->cfg (the console's SET, or its
 * broadcast to the other workers): what depends on it follows (log
 * level, the pools' settings, the TLS contexts; a server TLS change
 * closes the servers opened with the old settings). false: the TLS
 * settings cannot be used together yet (err says why) and the running
 * contexts stay. */
bool pool_apply_set(struct worker *w, const char *key, char *err, size_t errlen);
/* Open connections up to min_pool_size. */
void pool_fill_min(struct pool *p);
int srvpool_total(const struct srvpool *sp);

struct dns_entry;
/* A c-ares lookup ended (dns.c): servers with that host name take the
 * answer, or are banned and fail their waiting clients. */
void pool_dns_done(struct worker *w, const struct dns_entry *e);

#endif
