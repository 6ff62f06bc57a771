/* SPDX-License-Identifier: MIT */
/*
 * worker: one worker process: its event loop, listeners, signals, timers
 * and deferred frees, and the commands its sessions may ask of it. The
 * context itself, struct worker, is in context.h. No protocol knowledge.
 */
#ifndef PGCAT_WORKER_H
#define PGCAT_WORKER_H

#include <stdbool.h>
#include <stddef.h>

#include "context.h"

/* Create the worker: signals, pools, timers (not listening yet: see
 * worker_listen). Takes ownership of cfg. */
struct worker *worker_create(struct config *cfg, const char *config_path, int id, struct shm *shm)
	__attribute__((warn_unused_result));
/* Between worker_create and worker_listen (signals unblocked): with
 * two_phase_commit on, every shard's primary is asked for
 * max_prepared_transactions (twophase_check.h), the loop running with no
 * listener open yet (a client connects to another instance, or is refused
 * at once). REFUSED: a shard has 0 (logged, with refusal, a literal saying
 * what follows). STOPPED: a shutdown signal came meanwhile. */
enum worker_start { WORKER_START_OK, WORKER_START_REFUSED, WORKER_START_STOPPED };
enum worker_start worker_check_startup(struct worker *w, const char *refusal);
/* Open the listeners (unix_fd: the supervisor's listening unix socket, or
 * -1) and /metrics; false: logged, the worker cannot serve. */
bool worker_listen(struct worker *w, int unix_fd) __attribute__((warn_unused_result));
/* Run the loop until shutdown; returns the process exit code. */
int worker_run(struct worker *w);
void worker_destroy(struct worker *w);

/* Begin graceful shutdown (SIGTERM/SIGINT, admin SHUTDOWN). */
void worker_begin_shutdown(struct worker *w);
/* SHUTDOWN WAIT_FOR_CLIENTS: stop accepting; the process exits once its
 * last client has gone, with no shutdown_timeout. */
void worker_wait_for_clients(struct worker *w);
/* SHUTDOWN WAIT_FOR_SERVERS (PgBouncer's): as WAIT_FOR_CLIENTS, and every
 * client that wants a server (waiting for one, or between transactions)
 * is closed with "server shutting down"; those holding one finish their
 * transaction (in session mode, their session). The worker exits once no
 * client holds a server. */
void worker_wait_for_servers(struct worker *w);
/* SUSPEND (on, PgBouncer's): this worker stops reading from its clients
 * but the console's, and a client that logs in meanwhile is held the same
 * way (login.c); servers are still read, so what they send reaches the
 * clients and every buffer empties. RESUME (off): reading goes on. */
void worker_suspend(struct worker *w, bool on);
/* This worker's figures to the shared segment: its clients counted per
 * pool, then pool_publish. */
void worker_publish_pools(struct worker *w);
/* KILL db (NULL: every pool): its clients closed, then its waiting clients
 * and its servers (pool_kill). Returns the number of pools matched. */
int worker_kill(struct worker *w, const char *db);
/* Re-read the config file (SIGHUP, RELOAD, autoreload): all or nothing.
 * On failure the old config stays and err holds the first problem. */
bool worker_reload(struct worker *w, char *err, size_t errlen);

#endif
