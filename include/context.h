/* SPDX-License-Identifier: MIT */
/*
 * context: the per-process context, struct worker. Everything mutable that
 * a worker process owns hangs off it (no global mutable state elsewhere).
 * A data header with no module of its own: every room reads the context,
 * and none depends on worker.c for it. What the admin console and
 * /metrics ask of their process (reload, shut down, kill a pool, publish
 * figures) goes through the commands worker.c installs (worker->cmds).
 */
#ifndef PGCAT_CONTEXT_H
#define PGCAT_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/event.h>

#include "auth_scram.h"
#include "bans.h"
#include "shm.h"
#include "cancel.h"
#include "io.h"
#include "list.h"
#include "peer.h"
#include "randpool.h"
#include "types.h"
#include "tls.h"

struct auth_query;
struct dns;
struct kdf;
struct offload;
struct lagmon;
struct twophase;
struct twophase_recover;
struct twophase_check;
struct notify_hub;
struct login_ops;
struct session_ops;
struct worker_commands;

#define WORKER_MAX_LISTENERS 32
/* Each worker's client and server ids start at its index times this, so
 * that an id names one client of the instance (SHOW CLIENTS, KILL_CLIENT). */
#define WORKER_ID_SPAN 1000000000000ULL

struct worker {
	int id;                           /* 0 .. workers-1 */
	struct shm *shm;                  /* shared with the other workers */
	uint64_t admin_seen;              /* last shm admin command applied */
	struct event_base *base;
	struct io_flusher flusher;
	struct config *cfg;              /* current snapshot, owned */
	char *config_path;
	/* The binary this process was started from (UPGRADE runs it again:
	 * the new one, after a package upgrade); NULL: not known. */
	const char *exe_path;

	struct evconnlistener *listeners[WORKER_MAX_LISTENERS];
	size_t n_listeners;

	/* Clients by phase, for the janitor's timeout sweeps. Waiting clients
	 * are on their srvpool's FIFO instead. */
	struct list_node clients_login;   /* startup and authentication */
	struct list_node clients_idle;    /* logged in, no server */
	struct list_node clients_active;  /* linked to a server */
	int n_clients;                    /* every client connection, for max_client_conn */

	struct list_node pools;           /* struct pool, one per (pool, user) */
	struct cancel_table cancel;
	struct cancel_requests cancel_requests; /* outgoing CancelRequests in flight */
	struct peer_forwards peer_forwards;     /* CancelRequests sent on to other instances (peer.c) */

	/* Objects closed during this loop turn, freed by the reaper after it so
	 * that no callback later in the turn sees freed memory. */
	struct list_node dead_clients, dead_servers;
	struct event *reaper;

	struct event *janitor;
	struct event *sig_term, *sig_int, *sig_quit, *sig_hup, *sig_usr1, *sig_usr2;
	struct event *shutdown_timer;
	struct event *accept_resume;      /* accepting paused: out of fds */
	bool accept_paused;
	bool serving;                     /* worker_listen opened the listeners and /metrics */
	bool shutting_down;
	bool waiting_for_clients;         /* SHUTDOWN WAIT_FOR_CLIENTS: not accepting, exit after the last client */
	bool suspended;                   /* SUSPEND: clients' input not read (the console's is) until RESUME */
	/* SHUTDOWN WAIT_FOR_SERVERS: not accepting, a client that wants a
	 * server is closed, exit once no client holds one. */
	bool waiting_for_servers;
	/* -R: take the clients of the old worker of this number (handover.c)
	 * instead of binding the listeners. */
	bool take_over;
	/* The link to the process taking over from this one, or to the one
	 * this one takes over from, and its socket (handover.c); NULL: none. */
	struct handover *handover;
	bool handing_over;                /* handover.c: the listeners went to a new process */
	/* While this worker hands its clients over (handover.c): told of each
	 * client between two requests, before it reads the next one: one that
	 * becomes idle, and one in session mode whose server has just answered
	 * (it stays linked). */
	void (*on_client_between_requests)(struct client *c);
	/* The console's UPGRADE waits for this worker's handover (admin.c):
	 * told how it ended, before the worker shuts down. */
	void (*on_handover_end)(struct worker *w, const char *summary);
	/* The console's UPGRADE started this process (admin.c reaps it if it
	 * exits while this one runs); 0: none. */
	int upgrade_pid;
	int exit_code;

	uint64_t next_id;
	/* Some client may have a cross-shard batch awaiting its Sync: the
	 * janitor looks through the idle clients only then. */
	bool batch_waiters;
	uint64_t trimmed_at_id;           /* next_id at the last malloc_trim */
	uint64_t trimmed_at_us;
	uint64_t id_at_last_tick;         /* next_id at the janitor's last tick */
	uint64_t now_us;                  /* cached clock, refreshed per callback */
	uint8_t fake_salt_secret[16];     /* for the mock challenge to unknown users */
	struct scram_secret admin_scram;  /* admin_password's verifier */
	/* The admin console's session (admin.c), that the login hands an
	 * admin connection to (login.c). */
	const struct session_ops *admin_session;
	/* The normal session (session_normal.c), every other connection's:
	 * above client.c too, installed here. */
	const struct session_ops *normal_session;
	/* A replication connection's (session_replication.c): its bytes
	 * relayed to a server of its own. */
	const struct session_ops *replication_session;
	/* The login (login.c), that the pump hands a client in CLIENT_STARTUP
	 * or CLIENT_AUTH to (session.h): above client.c, installed here. */
	const struct login_ops *login;
	const struct worker_commands *cmds;   /* worker.c's, for the sessions above it */
	bool have_admin_scram;

	struct lagmon *lagmon;            /* the replica lag monitor: worker 0 only (lagmon.c) */
	/* Online reshards (reshard.c): worker 0 runs them all. */
	struct reshard **reshards;
	size_t n_reshards;
	/* query_stats (qstats.h, qshape.h): this worker's index of its
	 * table in shared memory, and its cache of shapes; NULL until a
	 * request of a pool with query_stats on is counted. */
	struct qstats_local *qstats_local;
	struct qshape_cache *qshapes;
	struct qstats_table *qstats_table;     /* this worker's, in shared memory */
	struct qstats_resets *qstats_resets;
	struct twophase *twophase;        /* cross-shard commits and their log (twophase.c) */
	struct twophase_recover *twophase_recover;   /* the in-doubt resolver (twophase_recover.c) */
	/* A reload that waits for its two_phase_commit check (worker.c): the
	 * check and the configuration it applies once the check passed; the
	 * number of the last reload started and of the last one ended, with
	 * its outcome, for an admin RELOAD waiting for its answer (admin.c).
	 * A reload replaced while it waited never ends: the one that replaced
	 * it, numbered higher, answers for it. */
	struct {
		struct twophase_check *check;
		struct config *cfg;
		uint64_t started, ended;
		bool failed;
		char error[512];
	} reload;
	struct auth_query *auth_query;    /* auth_query's lookups and cache, made on first use (auth_query.c) */
	struct notify_hub *notify;        /* LISTEN/NOTIFY's listening connections, made on first use (notify.c) */
	struct dns *dns;                  /* c-ares resolver and cache of server host names */
	struct kdf *kdf;                  /* SCRAM key derivation for logins to servers: threads, cache (kdf.c) */
	struct offload *offload;          /* blocking calls off the loop (LDAP binds): threads (offload.c) */
	struct tls_contexts tls;          /* OpenSSL contexts of both sides (tls.c) */
	struct event *stats_timer;        /* every stats_period: SHOW STATS averages */
	struct evhttp *http;              /* /metrics, when prometheus_port > 0 */
	struct web *web;                  /* the web page on that listener (web.c) */
	int http_port;
	int64_t start_wall;
	int64_t config_mtime;             /* for autoreload */
	uint64_t last_autoreload_check_us;
	uint64_t last_trim_us;
	uint64_t rng;                     /* route's generator state */
	uint64_t schema_gen;              /* without shm (fuzzing): the schema generation */
	struct randpool rand;             /* salts, nonces and cancel keys of logins */             /* idle clients' buffers last freed */
};

/* What a session or /metrics asks of its worker process (worker.c
 * installs them; see worker.h for each). */
struct worker_commands {
	void (*begin_shutdown)(struct worker *w);
	void (*publish_pools)(struct worker *w);
	int (*kill)(struct worker *w, const char *db);
	bool (*reload)(struct worker *w, char *err, size_t errlen);
	void (*wait_for_clients)(struct worker *w);   /* SHUTDOWN WAIT_FOR_CLIENTS */
	void (*wait_for_servers)(struct worker *w);   /* SHUTDOWN WAIT_FOR_SERVERS */
	void (*suspend)(struct worker *w, bool on);   /* SUSPEND (on) and RESUME (off) */
	/* -R: the listeners were handed to the next process: close this
	 * worker's copies, take no new client. */
	void (*stop_listening)(struct worker *w);
	/* -R: accepting stops while the listeners are handed over, and
	 * goes on if the new process went away before the end. */
	void (*pause_listening)(struct worker *w);
	void (*resume_listening)(struct worker *w);
};

/* The cached clock, refreshed at the start of every callback. */
static inline void worker_update_clock(struct worker *w)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	w->now_us = (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

/* Schedule the reaper (deferred frees) for this loop turn. */
static inline void worker_schedule_reap(struct worker *w)
{
	if (w->reaper)
		event_active(w->reaper, 0, 0);
}

/* Called when a client of a shutdown is gone: after the last one, leave
 * the loop; worker_destroy closes the servers. (Not here: this runs deep
 * inside callbacks that still hold pointers to pools and servers.) */
static inline void worker_check_shutdown_done(struct worker *w)
{
	if (!w->shutting_down || w->n_clients > 0)
		return;
	event_base_loopexit(w->base, NULL);
}

#endif
