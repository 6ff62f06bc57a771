/* SPDX-License-Identifier: MIT */
/*
 * client_end: the client's end of a client–server link, as the server side
 * sees it. The server answers a client through this and nothing else: the
 * connection its replies go to, the session settings they change, and the
 * events it reports (ready, lost, a request answered, room again in its
 * output). The session that owns the client installs the events; link.c
 * alone ties an end to a server and unties it.
 *
 * A data header with no module of its own, so that server.c, which reports
 * up through it, depends on no module above it (the server side never calls
 * the client side).
 */
#ifndef PGCAT_CLIENT_END_H
#define PGCAT_CLIENT_END_H

#include <stdbool.h>
#include <stdint.h>

#include "types.h"

struct client_end;
struct io;
struct params;
struct prep_client;

struct client_end_events {
	/* The server is ready for the client's bytes (its session settings,
	 * and the held BEGIN if end->begin was set, ran there: begin_ran). */
	void (*ready)(struct client_end *end, bool begin_ran);
	/* The linked server s is closed (its fields still readable; end is
	 * still linked to it, the handler unlinks). untouched: it closed while
	 * being made ready, before any byte of the client's reached it. */
	void (*lost)(struct client_end *end, struct server *s, bool untouched, const char *sqlstate,
		     const char *message);
	/* pgcat ends the client's transaction on the linked server s (its
	 * transaction_timeout): the client is answered as for a lost server
	 * (sqlstate, message), never replayed elsewhere; end is still linked,
	 * the handler unlinks, and s is then cleaned (cancel, ROLLBACK) and
	 * kept. NULL: the end's transactions are not timed (a cross-shard
	 * leg: its client's own transaction is what counts). disconnect
	 * (timeout_action = disconnect, PgBouncer's): the client's connection
	 * is closed with that error instead, and s is closed by the caller. */
	void (*ended)(struct client_end *end, struct server *s, const char *sqlstate, const char *message,
		      bool disconnect);
	/* s refused the session settings end's client has while being made
	 * ready for it (a startup setting PostgreSQL would have refused at
	 * login, or one another server took): nothing of the client's reached
	 * s, whose SETs all failed together, so it is as it was. The client
	 * must not run with s's settings instead (SPEC §10): end is still
	 * linked, the handler unlinks; s then goes back to its pool. */
	void (*refused)(struct client_end *end, struct server *s, const char *sqlstate, const char *message);
	/* The link was untied at the end of a transaction (pool.c) and the
	 * server went back to its pool. */
	void (*released)(struct client_end *end);
	/* A ReadyForQuery reached the client: a request was answered. */
	void (*answered)(struct client_end *end);
	/* Instead of answered, for an end that asked (hold_ready): the
	 * ReadyForQuery 'I' that ends its transaction was taken, not
	 * forwarded; the end sends it when it is ready (SPEC §11: the
	 * notifications due before it first). committed: the transaction
	 * ended without an error or a ROLLBACK. */
	void (*ready_held)(struct client_end *end, bool committed);
	/* The server's output drained below its low watermark: the client may
	 * be read again. */
	void (*resume)(struct client_end *end);
	/* pgcat's own question to the server inside the client's transaction
	 * (server_ask_placement) was answered: the client's request that
	 * waited for it goes on. NULL: the end never asks. */
	void (*asked)(struct client_end *end);
	/* read_your_writes = lsn (want_wal): the WAL position of the primary
	 * of shard after the client's transaction ended on it, s (known
	 * false: it could not be learnt). closed false: s goes back to its
	 * pool next (released follows). closed true: s was lost while asking
	 * (its fields still readable, end still linked): the handler unlinks;
	 * the client's transaction was over and answered, so this is no
	 * error of the client's. NULL: the end never sets want_wal. */
	void (*wal_position)(struct client_end *end, struct server *s, int shard, bool known, uint64_t lsn,
			     bool closed);
	/* read_your_writes (check_replayed): s, a replica being made ready
	 * for end, has not replayed that position, or could not say. Nothing
	 * of the client's reached it: end is still linked, the handler
	 * unlinks and routes the request again; s then goes back to its
	 * pool. NULL: the end never sets check_replayed. */
	void (*behind)(struct client_end *end, struct server *s);
};

struct client_end {
	struct server *server;                  /* the linked server (link.c writes it) */
	const struct client_end_events *ev;
	struct io *io;                          /* the client's connection: replies go to its output */
	struct params *params;                  /* the session as the client sees it */
	/* Named prepared statements in transaction mode (prepared.c; made on
	 * first use). */
	struct prep_client *prep;
	/* A BEGIN pgcat answered itself, for the server to run before the
	 * client's bytes (set by the client before it links; NULL: none). */
	const char *begin;
	uint64_t client_id;
	/* read_your_writes = lsn, a read sent to a replica whose lag monitor
	 * figures are too old: the replica is asked, while it is made ready,
	 * whether it has replayed this position (behind, if not). 0: not
	 * asked. Set by the client before it links. */
	uint64_t check_replayed;
	uint32_t out_budget;                    /* output bytes beyond which the server pauses */
	/* A replayed read: acknowledgements the client already has, that the
	 * next server's replies must not repeat. */
	uint32_t retry_skip;
	/* The pid pgcat gave the client (BackendKeyData; 0: none): what its
	 * server's notifications carry (SPEC §11). */
	uint32_t backend_pid;
	bool prep_on;                           /* the client's messages are rewritten (prepared.c) */
	bool close_when_released;               /* shutdown: the client closes after this transaction */
	bool hold_ready;                        /* ReadyForQuery 'I' goes through ready_held */
	/* The server stays linked when a transaction ends ('I') in transaction
	 * mode: two-phase commit's legs between PREPARE TRANSACTION and COMMIT
	 * PREPARED, which must not wait for a server of the pool again (the
	 * clients queued there may wait for this very commit). */
	bool keep_linked;
	/* read_your_writes = lsn: the transaction on the link writes; when it
	 * ends (ReadyForQuery 'I', nothing owed) the server asks its WAL
	 * position before going back to the pool, and tells wal_position.
	 * Set by the client before it links. */
	bool want_wal;
	/* Statement mode (PgBouncer's): a ReadyForQuery inside a transaction
	 * block closes the server, which rolls it back, and the client is
	 * closed with PgBouncer's error. Set by the client before it links. */
	bool no_tx_blocks;
};

/* Past this many bytes in a server's output the client's bytes wait (the
 * server reads its client's end again, the resume event, at half of it).
 * Both sides of the link honour it: the client's pump before it writes,
 * the server when it resumes. */
#define LINK_SERVER_OUT_BUDGET (128u * 1024)

#endif
