/* SPDX-License-Identifier: MIT */
/*
 * pool_types: the data of a pool and of its srvpools (a pool's servers of
 * one host), and what a waiting client and a server report through
 * (struct pool_waiter, struct srvpool_events). A data header with no module
 * of its own: server.c and client.c read these structs and report through
 * their events without depending on pool.c, which installs the events and
 * is the only code that acts on the lists (pool.h).
 */
#ifndef PGCAT_POOL_TYPES_H
#define PGCAT_POOL_TYPES_H

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
	/* It has waited query_wait_notify for a server, once per wait; it
	 * stays queued. NULL: nothing to tell (a fan-out's leg). */
	void (*waited_long)(struct pool_waiter *pw);
};

struct pool_waiter {
	struct list_node node;          /* on a srvpool's waiters or a pool's login_waiters */
	const struct pool_waiter_events *ev;
	struct srvpool *target;         /* the srvpool it waits on; NULL: none */
	uint64_t since_us;              /* queued at */
	uint64_t client_id;             /* for the log */
	/* A client's wait (SHOW CLIENTS lists it), not one shard's part of a
	 * fan-out (fanout.c). */
	bool is_client;
	bool told_waiting;              /* waited_long called in this wait */
	/* Its request provably only reads (route_reads_only), known only
	 * while the pool's writes are paused: it is served meanwhile. */
	bool reads_only;
};

/* What a server reports to the srvpool it belongs to (installed by pool.c;
 * server.c calls nothing of pool.c). */
struct srvpool_events {
	/* Its state changed (server_set_state): it moves between the lists. */
	void (*state_changed)(struct server *s, int old_state);
	/* Its login finished: the pool learns the server's parameters (first
	 * login) and idles it or hands it to a waiter. */
	void (*ready)(struct server *s);
	/* Back at a clean 'I' state with no client (drained, reset, its
	 * cancels answered): idle it or hand it to a waiter. */
	void (*clean)(struct server *s);
	/* Its client's transaction (or session) is over and it is clean:
	 * untie the link and reuse the server. */
	void (*release)(struct server *s);
	/* It closed, before or after its login. */
	void (*closed)(struct server *s, bool login_failed);
};

struct srvpool {
	struct pool *pool;
	const struct srvpool_events *ev;
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
	/* Replication connections of its clients (session_replication.c):
	 * not pooled, but they count against its pool_size and caps as
	 * PgBouncer counts them (pool_relay_slot_take). */
	int n_relay;
	/* Connections decided on under the shared open lock
	 * (srvpool_reserve) and not yet begun: counted in what this worker
	 * publishes until server_connect's first state change turns each
	 * into an opening one. 0 between events. */
	int n_reserved;
	/* -R, the new process: connections the old process still holds and
	 * will hand over (server_move.c), counted in what this worker
	 * publishes as if open here, so that the pool's size holds over both
	 * processes and a client waits for them rather than a new login. */
	int n_promised;
	/* -R, the old process: how many of its connections it promised the
	 * new one and has not handed over yet (handover.c). */
	int n_promised_out;
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
	/* A user found by auth_query, in no config (auth_query.c): its
	 * settings, owned (cuser points here); NULL for the config's users. */
	struct config_user *own_user;
	/* own_user's password was proven by an LDAP server or PAM (login.c), not
	 * found by auth_query: reloads keep the pool while its database is
	 * configured, with or without auth_query. */
	bool proven;
	enum pool_mode mode;
	int pool_size;
	int min_pool_size;
	int reserve_pool_size;   /* beyond pool_size, for clients that waited reserve_pool_timeout */
	/* Resolved from the user, [users.NAME], the pool and [general]
	 * (pool_apply_config; again after a SET): ms, 0 = off. */
	int server_lifetime;
	uint64_t log_min_duration_us;   /* a request this long is logged (slowlog.h); 0: none */
	bool query_stats;               /* requests counted per shape (qstats.h) */
	uint32_t query_stats_max;       /* shapes kept per worker */
	int query_timeout;
	int idle_transaction_timeout;
	int client_idle_timeout;
	int transaction_timeout;
	/* A client of it has logged in (here, or in another worker: the
	 * shared counters) since it was made: min_pool_size is kept for
	 * auth_file's users only from then on. */
	bool had_client;
	/* Made from `*` (cpool->autodb_instance): since when no client has
	 * used it (autodb_idle_timeout drops it then). */
	uint64_t autodb_idle_since_us;

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
	/* A plaintext password: its verifier is derived at the first login
	 * that looks (pool_client_scram), not for every pool at start (a
	 * PBKDF2 each: thousands of pools would take seconds). */
	bool scram_pending;
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
	/* A reshard's cutover (reshard.c): until RESUME, a server is handed
	 * out only to a request that provably only reads (pool_waiter's
	 * reads_only), in transaction or statement mode; its link may not
	 * write (txn.h's write_gated). The rest waits, as with PAUSE. */
	bool writes_paused;
	bool disabled;                /* DISABLE: new logins refused until ENABLE */
};

/* A config snapshot kept alive for pools a reload removed. */
struct config_ref {
	struct config *cfg;
	int refs;
};

#endif
