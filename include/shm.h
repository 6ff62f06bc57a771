/* SPDX-License-Identifier: MIT */
/*
 * shm: the segment every worker process sees (SPEC §9), created by the
 * supervisor before it forks. Plain fixed-size structs at fixed offsets,
 * never pointers; each counter has one writer (its worker) and readers sum
 * over workers; the few shared tables (pool and server directories, bans,
 * the admin command ring) are guarded by one robust process-shared mutex
 * held for a few instructions and never across a syscall, so a worker that
 * dies holding it cannot wedge the others. A second such mutex makes the
 * decision to open a server connection one step over every worker
 * (shm_open_lock).
 */
#ifndef PGCAT_SHM_H
#define PGCAT_SHM_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "bans.h"
#include "errstats.h"
#include "qstats.h"
#include "stats.h"

#define SHM_MAGIC 0x70676361u      /* "pgca" */
#define SHM_VERSION 15u           /* 10: WAL positions (read_your_writes), 11: open_lock, 12: clients, 13: query statistics, 14: reshards, 15: writes_drained */
#define SHM_MAX_WORKERS 128
#define SHM_MAX_POOLS 1024          /* (pool, user) pairs, over the life of the instance */
#define SHM_MAX_TARGETS 4096        /* (pool, user, server) triples */
#define SHM_ADMIN_RING 16
/* Server connections whose backend pid maps to a client's (SPEC §11). */
#define SHM_BACKEND_SLOTS 16384

struct shm_worker {
	_Atomic int32_t pid;           /* 0: slot unused */
	_Atomic int64_t started;       /* wall clock, seconds */
	_Atomic int32_t clients;
	_Atomic int32_t servers;
	_Atomic int32_t ready;         /* listening */
	_Atomic int32_t restarts;
	_Atomic uint64_t admin_applied;  /* last admin command seq this worker has seen */
	/* -R, the new side (handover.c, /metrics): 1 while this worker takes
	 * over from the old one; the clients and server connections it took;
	 * what the old one had left to drain at its end (-1: not told). */
	_Atomic int32_t taking_over;
	_Atomic int32_t taken_clients;
	_Atomic int32_t taken_servers;
	_Atomic int32_t left_on_old;
	/* -R, the old side: the pid of the new process's supervisor, which
	 * took this worker over (0: none, or the takeover was undone). The
	 * supervisor tells systemd it is the main process from now on before
	 * it exits (MAINPID=, supervisor.c). */
	_Atomic int32_t successor_pid;
};

struct shm_pool_entry {
	char name[64];
	char user[64];
	uint32_t used;
};

struct shm_target_entry {
	uint32_t pool;
	int32_t shard;
	int32_t port;
	char host[256];
	char database[64];
	uint32_t used;
	/* Written by the lag monitor (lagmon.c, one writer per instance):
	 * this server's replay lag behind its shard's primary; -1: unknown,
	 * or not a replica. */
	_Atomic int64_t lag_bytes, lag_ms;
	/* Also the lag monitor's: the server's WAL position at its last
	 * answer (replayed on a replica, current on a primary) and when that
	 * answer came (CLOCK_MONOTONIC us, the same clock in every process);
	 * wal_at_us 0: unknown. read_your_writes = lsn routes by these. */
	_Atomic uint64_t wal_lsn, wal_at_us;
};

/* Gauges a worker publishes for its part of a pool (refreshed by its janitor). */
struct shm_pool_gauges {
	_Atomic int32_t cl_active, cl_waiting, sv_active, sv_idle, sv_used, sv_login;
	_Atomic int64_t maxwait_us;
	/* The worker's client connections of the pool, from the moment its
	 * pool is known at login to their close (max_db_client_connections,
	 * max_user_client_connections): kept up at once, not at the tick, and
	 * cleared only with the worker (a pool reloaded keeps its slot). */
	_Atomic int32_t clients;
	/* 1: the pool's writes are paused in this worker and none of its
	 * servers serves a transaction that may write (pool_writes_drained);
	 * stored at once when it changes, not only at the tick. */
	_Atomic int32_t writes_drained;
};

/* Per (pool, user, server) and worker, for SHOW SHARDS: transactions
 * completed there, and transactions routed there by how their shard was
 * chosen (enum route_via). One writer (its worker); readers sum. */
#define SHM_ROUTE_VIA 4
struct shm_target_counts {
	_Atomic uint64_t xacts;
	_Atomic uint64_t routed[SHM_ROUTE_VIA];
};

/* What a CancelRequest needs, published by the worker that owns the key:
 * the key in full, so that the worker a CancelRequest lands on checks it
 * before flagging the owner. The server's key is not here: the owner sends
 * the cancel from the server connection it holds (40-byte slots: a slot
 * per client is touched, and counts in the resident size of every idle
 * client). */
struct shm_cancel_slot {
	_Atomic uint32_t seq;          /* odd while being written */
	_Atomic uint32_t secret;       /* 0: no client */
	/* Another worker got a CancelRequest for this client: the secret, for
	 * the owner to act on at its next janitor tick. */
	_Atomic uint32_t cancel_req;
	uint8_t kind;                  /* enum cancel_key_kind */
	uint8_t reserved[3];
	uint8_t ext[20];               /* CANCEL_KEY_EXT_LEN: a 3.2 key's other secret bytes */
	uint32_t reserved2;            /* keeps slots 8-byte aligned */
};

/* A server connection's backend pid and the pid pgcat gave the client it
 * serves now (BackendKeyData), so that a NotificationResponse carries the
 * notifying client's pid (SPEC §11) whichever worker reads it. Open
 * addressing by backend pid; each slot is claimed by the worker that owns
 * the connection and written by that worker only. */
#define SHM_BACKEND_FREE 0          /* never used: a lookup stops here */
#define SHM_BACKEND_GONE (-1)       /* was used: a lookup goes on */
#define SHM_BACKEND_CLAIMING (-2)   /* being written */
struct shm_backend_slot {
	_Atomic int32_t backend_pid;
	_Atomic int32_t target;        /* its (pool, user, server) entry: the host it runs on */
	_Atomic uint32_t client_pid;   /* 0: serving nobody (yet) */
	/* When a client's request named NOTIFY on it (CLOCK_MONOTONIC ms,
	 * wrapping): that client keeps the slot a while (shm_backend_serves). */
	_Atomic uint32_t noted_ms;
};

enum shm_admin_command {
	SHM_ADMIN_PAUSE, SHM_ADMIN_RESUME, SHM_ADMIN_DISABLE, SHM_ADMIN_ENABLE, SHM_ADMIN_KILL,
	SHM_ADMIN_RECONNECT, SHM_ADMIN_SET,
	SHM_ADMIN_DUMP,            /* write my rows of SHOW <arg> into my dump slot */
	SHM_ADMIN_KILL_CLIENT,     /* arg "<worker pid> <client id>": that worker closes that client */
	SHM_ADMIN_WAIT_FOR_CLIENTS, /* SHUTDOWN WAIT_FOR_CLIENTS: stop accepting, exit after the last client */
	SHM_ADMIN_WAIT_FOR_SERVERS, /* SHUTDOWN WAIT_FOR_SERVERS: stop accepting, exit once no server is held */
	SHM_ADMIN_SUSPEND,          /* SUSPEND: stop reading from clients until RESUME */
	SHM_ADMIN_RESHARD,          /* arg pool, value "<request> <hold>": for worker 0 (reshard.c) */
	SHM_ADMIN_RESHARD_SWITCH,   /* arg pool: its reshard cut over; use the next layout now */
	SHM_ADMIN_PAUSE_WRITES,     /* arg pool: a reshard's cutover pauses its writes (pool_pause_writes) */
	SHM_ADMIN_RESUME_WRITES     /* arg pool: ... and resumes them (pool_resume_writes) */
};

/* SHOW RESHARD: one entry per pool with a reshard, written by worker 0
 * only, under a sequence lock (odd while written). */
#define SHM_RESHARD_MAX 16
/* SHOW RESHARD TABLES: a table as one source shard moves it. */
#define SHM_RESHARD_PARTS 128
struct shm_reshard_part {
	char table[128];             /* schema.table */
	int32_t source_shard;
	uint64_t rows_copied, bytes_copied, changes_applied, lag_bytes, errors;
};
struct shm_reshard {
	_Atomic uint64_t seq;
	char pool[64];               /* "": free */
	int32_t phase;               /* enum reshard_phase */
	int32_t source_shards, target_shards, tables, tables_copied;
	uint64_t rows_copied, bytes_copied, changes_applied, lag_bytes, pause_ms, errors;
	char last_error[256];
	int32_t n_parts;             /* the first SHM_RESHARD_PARTS (table, source shard) */
	struct shm_reshard_part parts[SHM_RESHARD_PARTS];
};

/* The value a worker sends with SIGTERM (sigqueue) to tell the supervisor
 * that SHUTDOWN WAIT_FOR_CLIENTS began: shut down without forwarding the
 * signal (the workers learn it through the admin ring, and drain without
 * shutdown_timeout). */
#define SHM_SIGVAL_WAIT_FOR_CLIENTS 0x57464321
/* ... that a new pgcat (-R) took this worker's listeners over: shut down
 * without forwarding the signal and restart no worker (each hands its
 * clients over, then exits). */
#define SHM_SIGVAL_HANDOVER 0x48414e44
/* ... that the new process went away before the end: the worker serves
 * again, and the supervisor supervises again. */
#define SHM_SIGVAL_HANDOVER_UNDONE 0x48414e55

/* SHOW CLIENTS / SHOW SERVERS with several workers: the console's worker
 * asks the others (SHM_ADMIN_DUMP) and each writes its rows, as DataRow
 * messages, into its slot for that kind. A slot is written under a
 * sequence lock: seq is 0 while the worker writes, then the request's
 * sequence number; a reader copies and checks seq again. */
enum shm_dump_kind { SHM_DUMP_CLIENTS, SHM_DUMP_SERVERS, SHM_DUMP_PREPARED, SHM_DUMP__COUNT };

struct shm_dump {
	_Atomic uint64_t seq;
	uint32_t len;                  /* bytes of data used */
	uint32_t rows;
	uint32_t truncated;            /* rows that did not fit */
	uint32_t reserved;
	uint8_t data[];
};

struct shm_admin_entry {
	uint64_t seq;
	int32_t from_worker;
	enum shm_admin_command cmd;
	char arg[64];                  /* database ("" = all) or SET key */
	char value[256];               /* SET value */
};

struct shm_header {
	uint32_t magic, version;
	uint64_t size;
	uint32_t n_workers;
	uint32_t cancel_per_worker;
	pthread_mutex_t lock;
	/* Taken to decide to open a server connection (shm_open_lock): a
	 * robust process-shared mutex of its own, so that deciding does not
	 * wait behind the tables' users, nor they behind it. */
	pthread_mutex_t open_lock;
	struct shm_worker workers[SHM_MAX_WORKERS];
	struct shm_pool_entry pools[SHM_MAX_POOLS];
	struct shm_target_entry targets[SHM_MAX_TARGETS];
	struct bans bans;
	/* Bumped (under the lock) by every ban set or cleared: a worker
	 * re-reads the table only when it moved (rotation_is_banned). */
	_Atomic uint64_t bans_gen;
	/* The schema generation (SPEC §5): bumped when a server of any pool
	 * completed DDL or a client dropped every statement of its session;
	 * prepared statements are made afresh in each generation. */
	_Atomic uint64_t schema_gen;
	_Atomic uint64_t admin_seq;
	/* Pools with listening clients over every worker (notify.c): while
	 * 0, requests are not looked at for NOTIFY (link.c). */
	_Atomic int32_t notify_pools;
	struct shm_admin_entry admin[SHM_ADMIN_RING];
	/* The last SHM_ADMIN_RESHARD worker 0 acted on: a restarted worker 0
	 * replays the ring, and must not start a reshard twice. */
	_Atomic uint64_t reshard_seen;
	struct shm_reshard reshard[SHM_RESHARD_MAX];
	uint64_t off_stats, off_avg, off_gauges, off_conns, off_waiters, off_cancel, off_target_counts, off_backends;
	uint64_t off_errors;   /* n_workers struct errstats_table */
	uint64_t off_qstats;   /* n_workers struct qstats_table */
	uint64_t off_qresets;  /* one struct qstats_resets */
	uint64_t off_dump, dump_slot_size;   /* SHM_DUMP__COUNT x n_workers slots */
};

struct shm {
	struct shm_header *h;
	size_t size;
};

/* Supervisor, before fork. */
bool shm_create(struct shm *shm, uint32_t n_workers, uint32_t max_client_conn) __attribute__((warn_unused_result));
void shm_destroy(struct shm *shm);

/* Directories (take the lock): a slot for a (pool, user), a (pool slot,
 * shard, server); -1 when full. */
int shm_pool_slot(struct shm *shm, const char *name, const char *user);
int shm_target_slot(struct shm *shm, int pool, int shard, const char *host, int port, const char *database);

struct stats *shm_stats(struct shm *shm, int worker, int pool);
struct stats *shm_stats_avg(struct shm *shm, int worker, int pool);
struct shm_pool_gauges *shm_gauges(struct shm *shm, int worker, int pool);
/* Zero one worker's gauges of a pool (the pool is gone, or the worker). */
void shm_gauges_clear(struct shm *shm, int worker, int pool);
/* Sums over every worker. */
void shm_stats_total(struct shm *shm, int pool, struct stats *out);
void shm_stats_avg_total(struct shm *shm, int pool, struct stats *out);
/* Every worker says writes_drained for pool. */
bool shm_writes_drained_all(struct shm *shm, int pool);
void shm_gauges_total(struct shm *shm, int pool, int32_t *cl_active, int32_t *cl_waiting, int32_t *sv_active,
		      int32_t *sv_idle, int32_t *sv_used, int32_t *sv_login, int64_t *maxwait_us);

/* Server connections per (pool, user, server), for pool sizes that hold
 * per instance: each worker writes its own count (raised only under
 * shm_open_lock, below). */
void shm_conns_set(struct shm *shm, int worker, int target, int32_t n);
int32_t shm_conns_total(struct shm *shm, int target);
/* Opening a server connection under a pool size or a cap (SPEC §9): "the
 * instance's count is under the limit" and "my count is one more" must be
 * one step over every worker, or two workers deciding in the same instant
 * both take the last room. So every raise of a worker's connection count
 * (shm_conns_set with a larger number) is made holding this lock, after
 * the sums it was decided on were read under it; a count may be lowered
 * without it (a reader that sees the older, higher count only waits).
 * Held for a few loads and stores, never across a syscall. A holder that
 * dies leaves it to the next taker (robust mutex); one that is stopped
 * makes the others give up after SHM_OPEN_LOCK_WAIT_MS: false, the caller
 * opens nothing now and tries again on a later event (its janitor tick). */
#define SHM_OPEN_LOCK_WAIT_MS 20
bool shm_open_lock(struct shm *shm) __attribute__((warn_unused_result));
void shm_open_unlock(struct shm *shm);
void shm_waiters_set(struct shm *shm, int worker, int target, int32_t n);
int32_t shm_waiters_others(struct shm *shm, int worker, int target);
int32_t shm_clients_total(struct shm *shm);
/* A client of pool counted in (+1) or out (-1) by worker. */
void shm_pool_clients_add(struct shm *shm, int worker, int pool, int32_t delta);
/* Client connections over every worker of the pools of database name
 * (user NULL), or of user name (name NULL). */
int32_t shm_pool_clients_of(struct shm *shm, const char *name, const char *user);
/* The counters of every slot of that database name (every user and
 * worker): the console's, whose clients have no pool. */
void shm_stats_of_name(struct shm *shm, const char *name, struct stats *out);
/* This worker's counters of a target (NULL: target < 0), and the sums over
 * every worker (zeros for target < 0). */
struct shm_target_counts *shm_target_counts(struct shm *shm, int worker, int target);
void shm_target_counts_total(struct shm *shm, int target, uint64_t *xacts, uint64_t routed[SHM_ROUTE_VIA]);
/* A worker's table of errors by SQLSTATE (errstats.h; NULL: no such
 * worker). Its worker writes it, anyone reads. */
struct errstats_table *shm_errstats(struct shm *shm, int worker);
/* Every worker's, summed by key (errstats_collect): at most max rows,
 * the largest count first; how many. */
size_t shm_errstats_rows(struct shm *shm, struct errstats_row *rows, size_t max, uint64_t *untracked);
/* The same, into an array made for every key of every worker (the
 * caller frees *rows; 0 rows and NULL when out of memory). */
size_t shm_errstats_all(struct shm *shm, struct errstats_row **rows, uint64_t *untracked);
/* A worker restarting: its connection counts start from zero again. */
/* Query statistics (qstats.h): a worker's table; the reset generations;
 * the rows of pool (< 0: of all) summed over workers, into a new array
 * (*rows, free()); the shapes of pool dropped for room, over workers. */
struct qstats_table *shm_qstats(struct shm *shm, int worker);
struct qstats_resets *shm_qstats_resets(struct shm *shm);
size_t shm_qstats_all(struct shm *shm, int pool, struct qstats_row **rows);
uint64_t shm_qstats_dropped(struct shm *shm, int pool);
/* The top shapes by total execution time (at most top), the largest first. */
size_t shm_qstats_top(struct shm *shm, size_t top, struct qstats_row **rows);
void shm_worker_reset(struct shm *shm, int worker);

/* The backend pid map: a slot for a logged-in server connection (-1:
 * full, or no pid), the client it serves now, and the slot back. */
int shm_backend_claim(struct shm *shm, uint32_t backend_pid, int target);
static inline struct shm_backend_slot *shm_backend(struct shm *shm, int slot);
void shm_backend_release(struct shm *shm, int slot);
/* LISTEN/NOTIFY (SPEC §11): a NotificationResponse names the pid pgcat
 * gave the client whose transaction sent it, looked up by the server's
 * backend pid. A slot names the client its server is linked to
 * (shm_backend_serves, at each link), unless a client that named NOTIFY
 * there a moment ago (shm_backend_note_notifier) still holds it: its
 * notification may be on its way to the listening connections while the
 * server already serves the next client. now_ms: CLOCK_MONOTONIC ms,
 * wrapping. Slots < 0 are no slot. */
void shm_backend_serves(struct shm *shm, int slot, uint32_t client_pid, uint32_t now_ms);
void shm_backend_note_notifier(struct shm *shm, int slot, uint32_t client_pid, uint32_t now_ms);
/* Requests on the server of this slot are looked at for NOTIFY: it has a
 * slot and some pool of the instance listens. */
bool shm_backend_watch_notify(const struct shm *shm, int slot);
/* The client pid (BackendKeyData's) last served by backend_pid on this
 * host, port and database; 0: not a connection of pgcat's. */
uint32_t shm_backend_client_pid(struct shm *shm, uint32_t backend_pid, const char *host, int port,
				const char *database);

/* Cancel keys: pid = ((worker + 1) << SHM_CANCEL_WORKER_SHIFT) | (slot + 1). */
#define SHM_CANCEL_WORKER_SHIFT 20
struct shm_cancel_slot *shm_cancel(struct shm *shm, int worker, uint32_t slot);
/* kind: enum cancel_key_kind; ext: its CANCEL_KEY_EXT_LEN secret bytes
 * after the first 4 (NULL: none, a short key). secret 0: the slot is free. */
void shm_cancel_publish(struct shm *shm, int worker, uint32_t slot, uint32_t secret, int kind, const uint8_t *ext);

/* Ask the owning worker to cancel its client, when the key (its kind, the
 * secret and, for a long key, ext) matches the published one in full. */
bool shm_cancel_flag(struct shm *shm, int worker, uint32_t slot, int kind, uint32_t secret, const uint8_t *ext);
/* The owner, at a new state of a published slot: a cancel asked before it
 * no longer applies (as shm_cancel_publish does, without writing the key
 * again). */
void shm_cancel_forget_request(struct shm *shm, int worker, uint32_t slot);
/* The owner: was a cancel asked for this slot? (clears the request) */
bool shm_cancel_take_flag(struct shm *shm, int worker, uint32_t slot, uint32_t secret);

/* Bans, under the lock. */
bool shm_ban_set(struct shm *shm, const char *host, int port, int64_t now, int seconds, enum ban_source source,
		 const char *reason) __attribute__((warn_unused_result));
bool shm_ban_clear(struct shm *shm, const char *host, int port);
/* Copy of the table, for listing without holding the lock. */
void shm_bans_copy(struct shm *shm, struct bans *out);
bool shm_is_banned(struct shm *shm, const char *host, int port, int64_t now);
/* The table's generation (no lock), and under the lock the expiry of a
 * server's ban (0: none) with the generation it was read at. */
uint64_t shm_bans_generation(struct shm *shm);
int64_t shm_ban_until(struct shm *shm, const char *host, int port, uint64_t *gen);

/* The instance's schema generation (no lock: one atomic). */
uint64_t shm_schema_generation(struct shm *shm);
/* A new generation; returns it. */
uint64_t shm_schema_generation_bump(struct shm *shm);

/* The lag monitor's bans (SPEC §4 max_replica_lag), under the lock. Set:
 * an automatic ban (refreshed if there is one already; an admin ban is
 * left alone); *was_banned says whether the server was banned before.
 * Clear: only an automatic ban whose reason starts with reason_prefix, so
 * a ban for another cause outlives a good measurement. */
bool shm_ban_set_auto(struct shm *shm, const char *host, int port, int64_t now, int seconds, const char *reason,
		      bool *was_banned) __attribute__((warn_unused_result));
bool shm_ban_clear_auto(struct shm *shm, const char *host, int port, int64_t now, const char *reason_prefix);

/* Replica lag of a (pool, user, server) slot; -1: unknown. */
void shm_lag_set(struct shm *shm, int target, int64_t lag_bytes, int64_t lag_ms);
void shm_lag_get(struct shm *shm, int target, int64_t *lag_bytes, int64_t *lag_ms);
/* WAL position of a slot's server and when it was measured (at_us 0:
 * unknown, lsn then meaningless). */
void shm_wal_set(struct shm *shm, int target, uint64_t lsn, uint64_t at_us);
void shm_wal_get(struct shm *shm, int target, uint64_t *lsn, uint64_t *at_us);

/* Admin commands for every worker. */
/* Returns the command's sequence number. */
uint64_t shm_admin_post(struct shm *shm, int from_worker, enum shm_admin_command cmd, const char *arg,
			const char *value);
/* Every live worker other than me has seen command seq. */
bool shm_admin_applied_by_all(struct shm *shm, int me, uint64_t seq);
/* SHOW RESHARD: entry i copied whole (false: free, or being written). */
bool shm_reshard_read(struct shm *shm, int i, struct shm_reshard *out);
/* Worker 0: the entry of pool (made when new; NULL: none free). */
struct shm_reshard *shm_reshard_entry(struct shm *shm, const char *pool);
/* Next command after *seen, or false. */
bool shm_admin_next(struct shm *shm, uint64_t *seen, struct shm_admin_entry *out);

/* The dump slot of a worker for one kind, and how many data bytes it holds. */
struct shm_dump *shm_dump_slot(struct shm *shm, enum shm_dump_kind kind, int worker);
size_t shm_dump_capacity(const struct shm *shm);
/* Writer: begin (readers now see no answer), fill data/len/rows, commit. */
void shm_dump_begin(struct shm_dump *d);
void shm_dump_commit(struct shm_dump *d, uint64_t seq);
/* Reader: a malloc'ed copy of the rows if the slot answers request seq or a
 * later one (a fresher listing is as good), consistently read. Returns
 * false if there is no such answer (yet) or a write was under way. */
bool shm_dump_read(struct shm *shm, enum shm_dump_kind kind, int worker, uint64_t seq, uint8_t **data,
		   uint32_t *len, uint32_t *rows, uint32_t *truncated);

static inline struct shm_backend_slot *shm_backend(struct shm *shm, int slot)
{
	return (struct shm_backend_slot *)((uint8_t *)shm->h + shm->h->off_backends) + slot;
}

#endif
