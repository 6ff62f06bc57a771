/* SPDX-License-Identifier: MIT */
/*
 * server: the state machine of one server connection — connect, login,
 * idle, active for a client, bringing itself back to a clean state — and
 * the server-to-client half of the byte pump.
 */
#ifndef PGCAT_SERVER_H
#define PGCAT_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "io.h"
#include "list.h"
#include "params.h"
#include "txn.h"
#include "slowlog.h"
#include "types.h"

/* Messages pgcat must read whole are buffered up to this; longer ones are
 * streamed without being read. */
#define SERVER_INSPECT_MAX (32u * 1024)
/* No server message is longer than PostgreSQL's 1 GB field limit plus slack. */
#define SERVER_MAX_MESSAGE (0x40000000u + 65536u)

enum server_state {
	SERVER_CONNECTING,   /* TCP connect in progress */
	SERVER_LOGIN,        /* startup and authentication */
	SERVER_IDLE,         /* in the pool */
	SERVER_SYNCING,      /* linked; sending the client's session parameters first */
	SERVER_ACTIVE,       /* linked; bytes flow both ways */
	/* Still linked, the client's transaction over (it has its
	 * ReadyForQuery): pgcat's own query for the primary's WAL position
	 * runs (read_your_writes = lsn), its reply kept from the client,
	 * whose next request waits; then back to the pool. */
	SERVER_WAL_POSITION,
	/* Linked, in the client's transaction, between its requests: pgcat's
	 * own question (where a sharded table's sharding column sits, for an
	 * INSERT without a column list: server_ask_placement) runs, its reply
	 * kept from the client, whose request waits; then ACTIVE again. */
	SERVER_ASKING,
	SERVER_DRAINING,     /* client gone: finishing the query, rolling back */
	SERVER_RESETTING,    /* server_reset_query after a session-mode client */
	/* Its client is done, but a CancelRequest pgcat sent for it has not
	 * been answered yet: handed to another client, that client's query
	 * could be the one cancelled (SPEC §3.4). Back to the pool when
	 * PostgreSQL closed every cancel connection (it signals the backend
	 * before it closes). */
	SERVER_CANCEL_WAIT,
	SERVER_CLOSED
};

struct auth_backend;

struct prep_server;

struct server {
	struct list_node node;        /* srvpool list by state */
	struct worker *w;
	uint64_t id;
	enum server_state state;
	struct io io;
	struct srvpool *sp;
	struct client_end *client;    /* the linked client's end (link.c) */
	struct auth_backend *auth;     /* only during login */

	/* server_tls_sslmode: SSLRequest sent, waiting for 'S'/'N'; then the
	 * handshake; the StartupMessage goes once it is done (or after 'N'). */
	enum { SERVER_TLS_NONE, SERVER_TLS_WAIT_ANSWER, SERVER_TLS_HANDSHAKE } tls_phase;
	struct params params;         /* the session as it is on the server */
	/* The transaction running here (include/txn.h). */
	struct txn txn;
	uint32_t backend_pid;
	/* Its slot in the shared backend pid map (shm.h; -1: none), where
	 * link.c writes the pid of each client it serves (SPEC §11). */
	int32_t pid_slot;
	/* BackendKeyData's key as the server gave it: 4 bytes in protocol 3.0,
	 * up to 256 in 3.2 (PostgreSQL 18 gives 32). 0: none yet. */
	uint16_t backend_key_len;
	uint8_t backend_key[256];     /* PROTO_CANCEL_KEY_MAX */
	uint32_t protocol;            /* the version the server speaks (after any NegotiateProtocolVersion) */
	/* Bytes left of a server message being forwarded to the client. */
	uint32_t fwd_remaining;
	bool paused;                  /* reading stopped for the client's backpressure */

	/* A FATAL the server sent before closing, for the client's error. */
	bool have_error;
	char error_sqlstate[6];
	char error_message[256];

	int64_t connect_wall;         /* time(), for SHOW SERVERS */
	uint64_t connect_us;
	uint64_t state_since_us;
	uint64_t last_used_us;
	bool close_when_idle;
	/* Prepared statements: what this connection holds (made on first use),
	 * and whether the linked client's messages are rewritten. */
	struct prep_server *prep;
	bool prep_on;
	/* SYNCING includes a health check (unused for healthcheck_delay):
	 * if it fails, the server is banned and the client routed again. */
	bool health_check;
	bool role_check;          /* the health check is pg_is_in_recovery() (its row is read) */
	/* SYNCING: the server refused a setting of the client's (its error
	 * in error_sqlstate and error_message, have_error not set: the
	 * server is well): the client's end is told at the ReadyForQuery. */
	bool sync_refused;
	bool reset_untracked;         /* RESETTING: pgcat's own reset (server_reset_untracked) */
	bool timeout_cancelled;       /* statement_timeout sent a cancel for this request */
	uint16_t cancels_in_flight;   /* CancelRequests pgcat sent for it, not yet answered */
	bool checked;                 /* had its first health check */
	bool connect_query_sent;      /* in LOGIN: the pool's connect_query is running */
	/* WAL_POSITION: the position the query answered, if it did. */
	bool wal_known;
	uint64_t wal_lsn;
	/* SYNCING: whether the replica was asked if it replayed the client's
	 * position (check_replayed), and its answer. */
	enum { SERVER_REPLAY_NOT_ASKED, SERVER_REPLAY_ASKED, SERVER_REPLAY_REACHED } replay_check;
	/* Handed to the process that took over (-R): closed here without a
	 * Terminate, it goes on there. */
	bool moved;
	/* -R: taken over from the process before (SHOW SERVERS' upgrade). */
	bool moved_in;
	/* The request under way, for the slow-query log (slowlog.h); at the
	 * end: off the lines the hot path reads. */
	struct slowlog_req slow;
};

/* Open a new connection for this srvpool (state CONNECTING). */
struct server *server_connect(struct srvpool *sp) __attribute__((warn_unused_result));
/* -R (server_move.c): a logged-in server connection on socket fd, taken
 * over from the old process, in state LOGIN on sp's lists: the caller
 * sets what it knows of it, then reports it ready (sp->ev->ready). NULL:
 * out of memory (fd closed). */
struct server *server_adopt(struct srvpool *sp, int fd);
/* Close the connection, log why, report to the pool, defer the free. */
void server_close(struct server *s, const char *why);
/* Mark s to be closed once its client is done with it (RECONNECT, a
 * changed configuration). With server_fast_close, a server linked in
 * session mode goes at the end of its client's transaction instead, and
 * the client with it (08P01 "database configuration changed"): at once if
 * it is between transactions now. */
void server_close_when_idle(struct server *s);
void server_free(struct server *s);
void server_set_state(struct server *s, enum server_state st);
const char *server_state_name(enum server_state st);

/* Just linked to a client (link_attach): send the SETs its session needs
 * and its held BEGIN, then go ACTIVE; its end's ready event follows once
 * the server is ready for its bytes. */
void server_link(struct server *s);
/* s, ready and perhaps inside a transaction, serves another end (link_move):
 * only what it keeps of its end changes; nothing is sent. */
void server_relink(struct server *s);
/* Client gone: finish and clean up (cancel, CopyFail, Sync, ROLLBACK). */
void server_drain(struct server *s);
/* The session holds state pgcat did not follow (txn.untracked): RESET
 * SESSION AUTHORIZATION and RESET ALL, then back to the pool (clean); with
 * a connect_query, whose work a reset would undo, the connection is
 * closed instead. */
void server_reset_untracked(struct server *s);
/* The client needs no more of the reply: drained as by server_drain, but
 * what runs is not cancelled (a cross-shard read answered before its
 * shards' ends: each shard's statement ends as it would, its rows dropped). */
void server_finish(struct server *s);
/* Sharding: ask s, inside the client's transaction and between its
 * requests, where sharded table number table's sharding column sits (sql:
 * the question, one row of one count, or no row); s->txn.placement says
 * the answer once the client's end is resumed. false: not now (s owes
 * something, or is not in a transaction), nothing sent. */
bool server_ask_placement(struct server *s, uint8_t table, const char *sql);
/* Session-mode release: run server_reset_query, then back to the pool. */
void server_reset(struct server *s);
/* The client drained its output: resume reading the server. */
void server_resume_reading(struct server *s);
struct buf *server_output(struct server *s);
bool server_output_full(struct server *s);
/* Process bytes already buffered from the server. */
void server_process(struct server *s);
/* Send CancelRequest for the query running on this server. */
void server_send_cancel(struct server *s);

/* The transaction that changed session settings will not commit (its
 * client is gone; the server is being cleaned): undo them on both sides. */
void server_settings_discard(struct server *s);

#endif
