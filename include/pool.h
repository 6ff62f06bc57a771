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

#include <locale.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "auth_scram.h"
#include "config.h"
#include "list.h"
#include "params.h"
#include "prepared.h"
#include "stats.h"
#include "types.h"

struct pool_waiter;

/* What a client waiting on a pool hears back (installed by the client;
 * each is called with the waiter already off the pool's lists). */
struct pool_waiter_events {
	/* It waits now: for a server (login false) or for the server
	 * parameters of its first login (login true). */
	void (*queued)(struct pool_waiter *pw, bool login);
	/* Server s is free for it: link to it. */
	void (*granted)(struct pool_waiter *pw, struct server *s);
	/* No server for this request (the request fails, the client stays). */
	void (*failed)(struct pool_waiter *pw, const char *sqlstate, const char *message);
	/* The server it waited on left the rotation: route the request again. */
	void (*rerouted)(struct pool_waiter *pw);
	/* The server parameters are known (or cannot be learnt): the login
	 * goes on (or fails). */
	void (*defaults_known)(struct pool_waiter *pw);
	void (*defaults_failed)(struct pool_waiter *pw, const char *sqlstate, const char *message);
	/* KILL or shutdown: the client is closed with this FATAL. */
	void (*closed)(struct pool_waiter *pw, const char *sqlstate, const char *message);
};

struct pool_waiter {
	struct list_node node;          /* on a srvpool's waiters or a pool's login_waiters */
	const struct pool_waiter_events *ev;
	struct srvpool *target;         /* the srvpool it waits on; NULL: none */
	uint64_t since_us;              /* queued at */
	uint64_t client_id;             /* for the log */
};

struct srvpool {
	struct pool *pool;
	struct list_node retired_node; /* on pool->retired once removed from the config */
	int shard;
	enum server_role role;
	char *host;                    /* owned copies: a srvpool outlives a reload */
	int port;
	char *database;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	bool resolved;                 /* addr holds an address (maybe stale while a refresh runs) */
	bool host_is_literal;          /* an IP address: no DNS */

	struct list_node idle;        /* LIFO at the head: most recently used first */
	struct list_node active;      /* linked to clients */
	struct list_node opening;     /* connecting or logging in */
	struct list_node other;       /* resetting or draining */
	int n_idle, n_active, n_opening, n_other;
	struct list_node waiters;     /* struct pool_waiter, FIFO */
	int n_waiters;

	uint64_t xact_count;            /* transactions completed here, for SHOW SHARDS */
	uint64_t routed[4];             /* transactions routed here, by enum route_via (SHOW SHARDS) */
	/* From health checks (SPEC §4 role checks): */
	bool role_known, in_recovery;
	int shm_target;                 /* slot of the shared connection counts, -1: none */
	/* This server's ban as last read from the shared table, valid while
	 * the table's generation is ban_gen (rotation_is_banned). */
	uint64_t ban_gen;
	int64_t ban_until;              /* wall clock seconds, 0: not banned */
	uint64_t last_failure_us;
	char last_error_code[6];
	char last_error[256];
};

struct router_cache;

struct pool {
	struct list_node node;
	struct worker *w;
	char *name;                   /* the database clients ask for */
	char *user;
	const struct config_pool *cpool;
	const struct config_user *cuser;
	enum pool_mode mode;
	int pool_size;
	int min_pool_size;

	struct srvpool **targets;     /* every server of every shard */
	size_t n_targets;
	/* Servers dropped by a reload: drained, then freed by the janitor. */
	struct list_node retired;
	/* Dropped from the config by a reload: no new logins; freed once its
	 * clients and servers are gone. Its config snapshot is kept alive
	 * through cfg_ref until then. */
	bool removed;
	/* pool_free is closing its servers: a login it cuts short is not a
	 * failure of the server (no ban, no error for waiters). */
	bool freeing;
	struct config_ref *cfg_ref;
	int n_clients;                /* logged in or logging in, for SHOW and draining */

	/* ParameterStatus set of a real server, learnt from the first login;
	 * what a new client is told. */
	struct params defaults;
	bool have_defaults;
	struct list_node login_waiters;   /* struct pool_waiter: clients waiting for defaults */
	/* Its clients logged in and not waiting (idle or linked), as the
	 * worker counted them for SHOW POOLS (worker_publish). */
	int cl_active;

	struct prep_registry prep;    /* its prepared statements (SPEC §5) */
	struct router_cache *router_cache;   /* the query parser's verdicts (SPEC §4) */
	/* Cross-shard merges: the shards' database collation, learnt once
	 * (fanout.c); (locale_t)0 with collation_bytewise for C. */
	bool collation_known, collation_bytewise;
	locale_t collation;
	char collation_name[128];

	struct scram_secret scram;    /* for clients logging in with SCRAM */
	bool have_scram;
	/* SCRAM pass-through: when the user's only secret is a SCRAM verifier,
	 * the ClientKey recovered from a client's verified proof logs pgcat in
	 * to servers holding the same verifier. Memory only; reset when the
	 * secret changes. */
	uint8_t passthrough_client_key[SCRAM_KEY_LEN];
	bool have_passthrough_key;

	/* Counters live in this worker's slot of the shared segment, so the
	 * admin console of any worker can sum them; the local structs are a
	 * fallback when the segment's pool directory is full. */
	int shm_slot;
	struct stats *stats;          /* totals since start */
	struct stats *stats_avg;      /* per-second rates and mean times of the last stats_period */
	struct stats stats_prev;      /* totals at the start of the current stats_period */
	struct stats stats_local, stats_avg_local;

	bool paused;                  /* PAUSE/KILL: no server is handed out until RESUME */
	bool disabled;                /* DISABLE: new logins refused until ENABLE */
};

/* A config snapshot kept alive for pools a reload removed. */
struct config_ref {
	struct config *cfg;
	int refs;
};

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
/* Publish this worker's figures to the shared segment (janitor; cl_active
 * counted by the worker first, worker_publish). */
void pool_publish(struct worker *w);
/* The pool's waiting clients, for SHOW POOLS: how many, and the longest wait. */
void pool_count_waiting(struct worker *w, const struct pool *p, int *waiting, uint64_t *maxwait_us);
void pool_destroy_all(struct worker *w);
struct pool *pool_find(struct worker *w, const char *db, const char *user);
/* Is there any pool for this database name? */
/* Is p the first (pool, user) of its pool name in w's list (per-server
 * figures and monitor connections are kept once per pool name)?
 * skip_removed: pools a reload removed do not count. */
bool pool_first_of_name(struct worker *w, bool skip_removed, const struct pool *p);
bool pool_db_exists(struct worker *w, const char *db);

/* The server this client's next transaction goes to. */
struct srvpool *pool_pick_target(struct pool *p);

/* Would pool_checkout(sp, ...) make the client wait for a server that is
 * busy (not one being connected for it)? */
bool pool_checkout_would_wait(const struct srvpool *sp);
/* Its last connection attempt failed moments ago (reconnect back-off). */
bool pool_srvpool_failing(const struct srvpool *sp);
/* A client wants a server: granted one now (its granted event, returns
 * true), failed now (its failed event), or queued (its queued event; one
 * of the others comes later). */
bool pool_checkout(struct srvpool *sp, struct pool_waiter *pw);
/* The client stops waiting (for a server or for the server parameters). */
void pool_cancel_wait(struct pool_waiter *pw);
/* The transaction (or session) is over and the server is clean: unlink and
 * reuse the server. */
void pool_release(struct server *s);
/* The client is gone while linked: detach it; the server finishes what it
 * was doing (cancel, rollback) and comes back through pool_server_clean. */
void pool_client_gone(struct server *s);
/* A server reached a clean 'I' state with no client: idle it or hand it to a waiter. */
void pool_server_clean(struct server *s);
/* Server finished login: remember defaults, hand to a waiter or idle it. */
void pool_server_ready(struct server *s);
/* A server connection is gone (before or after login). */
void pool_server_closed(struct server *s, bool login_failed);
/* Move a server between the srvpool lists after its state changed
 * (called by server_set_state only). */
void pool_server_state_changed(struct server *s, int old_state);

/* Janitor: timeouts, min_pool_size, idle_timeout, server_lifetime. */
void pool_janitor(struct worker *w);
/* A logged-in client needs the server parameters to be told: queue it
 * until a server login provides them (its defaults_known/failed events). */
void pool_request_defaults(struct pool *p, struct pool_waiter *pw);
/* Open connections up to min_pool_size. */
void pool_fill_min(struct pool *p);
int srvpool_total(const struct srvpool *sp);

struct dns_entry;
/* A c-ares lookup ended (dns.c): servers with that host name take the
 * answer, or are banned and fail their waiting clients. */
void pool_dns_done(struct worker *w, const struct dns_entry *e);

#endif
