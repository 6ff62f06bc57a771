/* SPDX-License-Identifier: MIT */
/*
 * client: the state machine of one client connection — startup, login,
 * idle, waiting for a server, linked to a server — and the client-to-server
 * half of the byte pump.
 */
#ifndef PGCAT_CLIENT_H
#define PGCAT_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <netinet/in.h>

#include "client_end.h"
#include "io.h"
#include "list.h"
#include "params.h"
#include "pool_types.h"
#include "types.h"

enum client_state {
	CLIENT_STARTUP,      /* waiting for StartupMessage / SSLRequest / CancelRequest */
	CLIENT_AUTH,         /* authentication exchange in progress */
	CLIENT_LOGIN_WAIT,   /* authenticated; waiting for the pool to learn server parameters */
	CLIENT_IDLE,         /* logged in, no server */
	CLIENT_WAITING,      /* queued for a server */
	CLIENT_ACTIVE,       /* linked to a server */
	CLIENT_FANOUT,       /* a cross-shard read runs on every shard (fanout.c) */
	CLIENT_RELAY,        /* a replication connection: its bytes relayed to a server of its own (session_replication.c) */
	CLIENT_CLOSED        /* socket gone, memory freed by the reaper */
};

/* The replication startup parameter, as PostgreSQL reads it. */
enum client_replication {
	CLIENT_REPLICATION_NONE,      /* absent, or false */
	CLIENT_REPLICATION_PHYSICAL,  /* true, yes, on, 1 */
	CLIENT_REPLICATION_LOGICAL    /* database */
};

struct client_auth;

/* The client's transaction as pgcat alone knows it: outside any server's
 * (whose ReadyForQuery status says the rest), moved by client_set_tx,
 * which checks the edge. */
enum client_tx {
	CLIENT_TX_NONE,     /* none, or the linked server's */
	CLIENT_TX_HELD,     /* a BEGIN pgcat answered and holds (held_begin) until the first statement */
	CLIENT_TX_FAILED    /* failed without a server: answered with errors until the client ends it (SPEC §3) */
};

/* Messages of an extended batch pgcat answers itself, up to its Sync
 * (client_set_batch). */
enum client_batch {
	CLIENT_BATCH_NONE,
	/* A request pgcat could not serve: its messages up to and including
	 * Sync are discarded, then ReadyForQuery. */
	CLIENT_BATCH_SKIP_TO_SYNC,
	/* In a failed transaction, a ROLLBACK sent as Parse/Bind/Execute/Sync:
	 * each answered as PostgreSQL would, and the transaction ends at Sync. */
	CLIENT_BATCH_LOCAL_ROLLBACK
};

struct client_pending_error {
	char sqlstate[6];
	char message[];
};
struct fanout;
struct prep_client;
struct ryw;
struct session_ops;

/* Query texts up to this length are read for search_path tracking and,
 * after a lost server, for ROLLBACK; longer ones are streamed unread. */
/* The client's usual read watermark: input beyond it waits in the kernel
 * until the pump consumed some. */
#define CLIENT_READ_HIGH_WATER (64u * 1024)
/* Stop reading the client once this much waits for a slow server. */
#define CLIENT_OUT_BUDGET (128u * 1024)
#define CLIENT_INSPECT_MAX (8u * 1024)

/* Room for a formatted peer address ("unix", IPv4 or IPv6). */
#define CLIENT_ADDR_STRLEN 46

/* Laid out for size (8-byte fields first, flags as bits): an idle client
 * is mostly this struct, and pgcat holds tens of thousands of them. */
struct client {
	struct list_node node;        /* worker list by state, or srvpool waiters */
	struct worker *w;
	uint64_t id;
	struct io io;

	/* "user\0database\0" from the startup packet, until the login has a
	 * pool of that user and database, whose names then serve
	 * (client_user, client_database). */
	char *names;
	struct pool *pool;
	/* Waiting for a server or for the server parameters: on a pool's
	 * list through this (pool.h), whose events it hears back through. */
	struct pool_waiter wait;
	struct client_auth *auth;     /* only during login */
	/* What the client is handed to at login: the normal session or the
	 * admin console (session.h). */
	const struct session_ops *session;

	struct params params;         /* the session as this client sees it */
	/* Its end of a link to a server: end.server is the linked server
	 * (link.c), the rest what the server side sees of this client. */
	struct client_end end;
	struct params startup_params; /* what it logged in with: RESET goes back to these */

	/* An error to answer the client's next message with (rare: allocated
	 * when needed). */
	struct client_pending_error *pending_error;
	/* A BEGIN pgcat answered itself until the transaction's first
	 * statement shows its shard (route.c); sent to the server when linked.
	 * Set exactly in CLIENT_TX_HELD (client_hold_begin). */
	char *held_begin;
	uint64_t sticky_until_us;
	/* read_your_writes = lsn: per shard, the WAL position its reads wait
	 * for (ryw.h); NULL until its first write. */
	struct ryw *ryw;
	/* A read sent to a replica: a copy of its bytes until the first reply
	 * reaches the client, to send it elsewhere if the replica dies. */
	struct buf *retry;
	/* Its prepared statements that change session settings, tracked at
	 * each of their Binds (setters.h); NULL: none. */
	struct setters *setters;
	/* query_stats: its named statements' shapes (qshape.h); NULL: none
	 * noted. */
	struct qshape_names *qnames;
	/* The cross-shard work under way (CLIENT_FANOUT); NULL otherwise. */
	struct fanout *fanout;
	/* Cross-shard state beyond one read (a portal read in parts, a split
	 * write parked in the transaction, a batch awaiting its Sync): made by
	 * fanout.c on first need, freed with the client. */
	struct client_xshard *xshard;
	/* The session kind's own state, allocated when needed and freed with
	 * the client (the admin console: a command whose reply waits until
	 * every worker applied it and, for PAUSE, the pools drained). */
	void *kind_state;

	uint64_t connect_us;
	uint64_t state_since_us;
	uint64_t last_activity_us;

	/* Pump state across reads: bytes left of the message being forwarded
	 * to the server, or being discarded. */
	uint32_t fwd_remaining;
	uint32_t skip_remaining;
	uint32_t cancel_pid, cancel_key;   /* cancel_key: the slot's secret (cancel.h) */

	/* The peer, kept binary (client_addr_str formats it): 20 bytes instead
	 * of a string buffer in every client. */
	union {
		struct in_addr v4;
		struct in6_addr v6;
	} peer;
	uint16_t port;
	uint8_t peer_family;          /* AF_INET, AF_INET6 or AF_UNIX */

	/* SET SERVER ROLE / SET PRIMARY READS / SET SHARD (SPEC §6): a
	 * router_role, -1/0/1, a shard or -1; and read-your-writes. */
	int8_t role_override;
	int8_t primary_reads_override;
	int16_t shard_override;
	/* Its slot in the shared segment's pool directory (its database and
	 * its own user name), where it counts as a client for the caps and
	 * SHOW DATABASES / USERS: its own pool's, even where it is served by a
	 * forced user's pool (pool_serving); a console client's (console
	 * database, user) as PgBouncer counts them. -1: none. */
	int16_t count_slot;
	uint8_t shard_phase;          /* enum route_phase (route.c) */
	enum client_state state : 8;  /* a bit-field, so that the small fields fit in 32 bytes */

	bool is_unix : 1;
	/* PgBouncer's console access: user "pgbouncer" on the Unix socket
	 * from pgcat's own OS user, let in as an admin without a password. */
	bool console_peer : 1;
	/* Its transaction as pgcat alone knows it (client_set_tx). */
	enum client_tx tx : 2;
	/* An extended batch pgcat answers itself (client_set_batch). */
	enum client_batch batch : 2;
	bool held_begin_read_only : 1;
	bool retry_on : 1;
	bool has_cancel_key : 1;
	bool long_cancel_key : 1;     /* protocol 3.2: a 32-byte key in BackendKeyData */
	bool is_admin : 1;
	/* A database no pool serves, refused once the client has proved
	 * who it is (a pgbouncer.ini's order: a wrong password learns nothing
	 * of the databases). */
	bool unknown_database : 1;
	/* A replication connection (session_replication.c). */
	enum client_replication replication : 2;
	bool paused : 1;              /* reading stopped for the server's backpressure */
	/* The session holds the ReadyForQuery of the last request (LISTEN:
	 * the notifications due before it, SPEC §11): the next requests wait. */
	bool reply_held : 1;
	/* A request the session answers itself waits for the server to
	 * answer what came before it (end_answered resumes the pump). */
	bool wait_answer : 1;
	/* The session sees each extended message while linked
	 * (session_ops.active_extended), not only a Parse of LISTEN. */
	bool session_watch : 1;
	/* Inside client_process: nested reports only ask for another round. */
	bool processing : 1, reprocess : 1;
	/* read_your_writes: a replica asked directly had not replayed the
	 * position: this request is routed again without asking (the
	 * session clears it at the next checkout). */
	bool ryw_no_ask : 1;
	/* Handed to the process that took over (-R): closed here without a
	 * "closing because" line, it goes on there. */
	bool moved : 1;
	/* -R: its state did not fit a record: it drains (handover.c). */
	bool move_refused : 1;
	/* -R: taken over from the process before (SHOW CLIENTS' upgrade). */
	bool moved_in : 1;
};

/* The client of a waiter on a pool's lists; NULL: not a client's (a
 * fan-out's leg, fanout.c). */
static inline struct client *client_of_waiter(struct pool_waiter *pw)
{
	return pw->is_client ? LIST_OWNER(pw, struct client, wait) : NULL;
}

/* A client on socket fd (non-blocking), counted in the worker, in state
 * CLIENT_CLOSED on no list: the caller sets its state. NULL: out of memory
 * (fd closed). */
struct client *client_new(struct worker *w, int fd, bool is_unix);
/* Accept a connection (fd already non-blocking). */
void client_accept(struct worker *w, int fd, const struct sockaddr *sa, int salen, bool is_unix);
/* Close with an error sent first (sqlstate NULL: just close). severity FATAL. */
void client_close(struct client *c, const char *sqlstate, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void client_free(struct client *c);
/* Drops a client message of total bytes (type byte included) from its input;
 * the part not arrived yet is skipped as it comes. */
void client_discard_message(struct client *c, uint32_t total);
/* The user and database the client asked for ("" before its startup
 * packet). */
const char *client_user(const struct client *c);
const char *client_database(const struct client *c);
/* The peer address as text, in buf (CLIENT_ADDR_STRLEN bytes). */
const char *client_addr_str(const struct client *c, char *buf);

/* Reports from the pool. */
/* The pool has server s for this waiting client: link to it. */
void client_on_granted(struct client *c, struct server *s);
void client_on_linked(struct client *c);            /* a server is now c->end.server and ready */
void client_on_released(struct client *c);          /* the server went back to the pool */
void client_on_checkout_failed(struct client *c, const char *sqlstate, const char *message);
/* The linked server is gone (s is closed but its fields are still
 * readable), or pgcat ended the transaction on it (s is kept): the client
 * is answered with sqlstate, message. may_replay: a read that got no reply
 * yet goes to another server instead (SPEC §4). */
void client_on_server_lost(struct client *c, struct server *s, bool may_replay, const char *sqlstate,
			   const char *message);
/* The client's transaction failed without a server (fanout.c): the next
 * message gets this error, the following ones "current transaction is
 * aborted", until its COMMIT or ROLLBACK. */
void client_fail_transaction(struct client *c, const char *sqlstate, const char *message);
void client_on_defaults_known(struct client *c);    /* pool learnt server parameters */
void client_on_defaults_failed(struct client *c, const char *sqlstate, const char *message);
/* The server's output buffer drained: resume reading the client. */
void client_resume_reading(struct client *c);
/* Process whatever the client has buffered (after a state change). */
void client_process(struct client *c);
/* The output buffer towards the client. */
struct buf *client_output(struct client *c);
bool client_output_full(struct client *c);
void client_set_state(struct client *c, enum client_state st);
/* A reply of the current transaction reached the client: no more retry. */
void client_reply_started(struct client *c);
/* The client sits idle: its empty buffers (input, output, retry copy) go
 * back. */
void client_trim(struct client *c);
/* The copy kept for a retry is dropped: the request cannot be sent again
 * (client_conn.c; the pump, client.c, keeps it). */
void client_drop_retry(struct client *c);
/* read_your_writes = lsn: a transaction of the client's that wrote on
 * shard ended, at WAL position lsn of its primary (known), or at a
 * position that could not be learnt: the client's reads there wait for it
 * (ryw.h). Out of memory: logged, not followed. */
void client_note_write(struct client *c, int shard, bool known, uint64_t lsn);
const char *client_state_name(enum client_state st);

struct pktbuf;
/* Replies to the client, for the session kinds above client.c. The message
 * built in pb (nothing if pb failed or the connection is closed). */
void client_send_pkt(struct client *c, struct pktbuf *pb);
void client_send_error(struct client *c, const char *severity, const char *sqlstate, const char *msg);
/* An error pgcat raised itself for c, counted by SQLSTATE (errstats.h,
 * SHOW ERRORS): client_send_error does it; a place that writes its own
 * ErrorResponse to the client calls this. */
void client_count_error(const struct client *c, const char *sqlstate);
/* A log line about c (log_event): "C-id user@database addr:port: "
 * before the message in text; the fields client_id, user, database, addr,
 * port and extra's (at most three) in json. */
struct log_field;
void client_log_event(const struct client *c, enum log_level level, const char *event, const struct log_field *extra,
		      size_t n_extra, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
void client_send_rfq(struct client *c, char status);
/* A message of no body (ParseComplete, CloseComplete...). */
void client_send_simple(struct client *c, uint8_t type);
/* The ReadyForQuery status of an idle client: E (failed transaction), T (a
 * held BEGIN) or I. */
char client_idle_status(const struct client *c);
/* Forget the error the client's next message was to get. */
void client_clear_pending_error(struct client *c);
/* The client's transaction moves to `to` (an edge client_tx allows; the
 * held BEGIN goes when it leaves CLIENT_TX_HELD). */
void client_set_tx(struct client *c, enum client_tx to);
/* NONE -> HELD with this BEGIN (text malloc'ed, owned from here on). */
void client_hold_begin(struct client *c, char *text, bool read_only);
void client_set_batch(struct client *c, enum client_batch to);
/* The normal session's welcome, once the pool knows its server
 * parameters: AuthenticationOk, ParameterStatus, then
 * client_finish_welcome. */
void client_send_welcome(struct client *c);
/* End of a login: append BackendKeyData (a fresh cancel key) and
 * ReadyForQuery to pb (AuthenticationOk and ParameterStatus already in
 * it), send it, go IDLE. false: the client was closed. */
bool client_finish_welcome(struct client *c, struct pktbuf *pb);

/* Cancel the query this client is running, if any (CancelRequest). */
void client_cancel_query(struct client *c);

/* A message or request needs need bytes in the input before it can be
 * read (routing, a rewrite): let that much in; 0: it was read, back to the
 * usual watermark. */
static inline void client_read_limit(struct client *c, uint32_t need)
{
	if (need > c->io.read_high)
		c->io.read_high = need;
	else if (need == 0 && c->io.read_high > CLIENT_READ_HIGH_WATER)
		c->io.read_high = CLIENT_READ_HIGH_WATER;
}

#endif
