/* SPDX-License-Identifier: MIT */
/*
 * fanout: a cross-shard read (SPEC §6) sent to every shard at once and
 * answered with one merged result.
 *
 * Each shard is reached through a "leg" (fanout.c): it checks a server of
 * that shard out of the client's pool, as a transaction of the client's
 * session pinned to the shard would be routed (route_pick_leg: role,
 * replicas, bans), waits in the pool's queue like a client, and drives the
 * server through the link (link.h, client_end.h): the server syncs the
 * session's settings, runs the leg's requests, and its replies come back
 * on a loopback io, with no socket between pgcat and itself. A read
 * streams: once every shard's reply reached its rows, the shards' rows are
 * merged (merge_stream.c) into the client's reply as they come, each leg
 * read only a window ahead and the client's output kept to its budget,
 * so that pgcat holds a bounded amount whatever the result's size. The
 * writes keep each shard's reply whole (up to a bound) until every shard
 * answered.
 *
 * The client waits in CLIENT_FANOUT meanwhile; its cancel request cancels
 * every leg's query; if it goes away, the legs' servers go back to their
 * pools as a vanished client's would (cancelled, rolled back).
 */
#ifndef PGCAT_FANOUT_H
#define PGCAT_FANOUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

struct client;
struct proto_frame;
struct router_rules;

/* What a fan-out reports to the session of the client that started it
 * (installed by that session through its table, session.h: the fan-out
 * calls nothing of client.c). */
struct fanout;
struct fanout_events {
	/* fo runs for c: the client waits for it (CLIENT_FANOUT). */
	void (*started)(struct client *c, struct fanout *fo);
	/* Its answer is in c's output (fo freed, or parked in c's
	 * transaction): c is idle again and its next request is read. */
	void (*answered)(struct client *c);
	/* Bytes c sent while it waited may be read now (a COPY's rows). */
	void (*resume)(struct client *c);
	/* The transaction pgcat held for c is over: committed or rolled back
	 * on every shard. */
	void (*tx_over)(struct client *c);
	/* c's transaction failed here: the held BEGIN is dropped and the
	 * messages up to its end get this error. */
	void (*tx_failed)(struct client *c, const char *sqlstate, const char *message);
	/* c's transaction went on to other shards (fanout_txn_cross): it is
	 * the fan-out's from now on, and c holds no server while it lasts
	 * (what pgcat answers itself meanwhile says 'T'). */
	void (*tx_spread)(struct client *c);
	/* c's transaction failed on a shard, its error already sent: the
	 * messages up to its end are answered as in a failed transaction. */
	void (*tx_aborted)(struct client *c);
	/* read_your_writes = lsn: a write of c's committed on the primary of
	 * shard; lsn is the primary's WAL position after the commit (known
	 * false: it could not be learnt, or it is not known whether the commit
	 * happened). Told before the answer that reports the commit reaches
	 * c, so that its next read waits for it. */
	void (*wrote)(struct client *c, int shard, bool known, uint64_t lsn);
	/* c broke the protocol, or pgcat ran out of memory: it is closed with
	 * this FATAL. */
	void (*fatal)(struct client *c, const char *sqlstate, const char *message);
	/* fo found that its request needs one shard only (an INSERT without a
	 * column list whose rows all have their key there): fo is freed, the
	 * request is back at the head of c's input, untouched, to be routed
	 * to shard as a keyed request. */
	void (*rerouted)(struct client *c, int shard);
};

enum fanout_start {
	FANOUT_STARTED,     /* the client waits in CLIENT_FANOUT; the reply comes later */
	FANOUT_REFUSED,     /* *why says why it cannot be merged: answer 0A000 */
	FANOUT_ANY_SHARD,   /* the request executes nothing (Parse/Describe only): any shard answers alike */
	FANOUT_ANY_SHARD_FLUSH,  /* the same, ended by Flush: its Bind comes next and may fan out */
	FANOUT_WAIT         /* the rest of the request first (fanout_start_batch) */
};

/* The request at the head of c's input (whole: route waited for it) reads
 * rows of every shard. sharded: it touches a sharded table (else it is
 * default_shard = all: a statement other than SELECT goes to one shard).
 * rules: the pool's sharded tables, to refuse what one shard at a time
 * would answer differently (broadcast_read_check). */
enum fanout_start fanout_start(struct client *c, const struct proto_frame *f, bool sharded,
			       const struct router_rules *rules, char *why, size_t whylen);

/* The request at the head of c's input binds one statement many times
 * (executemany, executeBatch: [Parse], (Bind, [Describe], Execute)...,
 * Sync) with keys on several shards: each Bind runs on its key's shard, in
 * a transaction per shard committed only if all succeeded.
 * FANOUT_ANY_SHARD: not such a request. */
enum fanout_start fanout_start_batch(struct client *c, const struct router_rules *rules, char *why, size_t whylen);
/* How long a batch ended by Flush waits for its Sync before it is taken
 * for one whose client waits for results first (and refused): long
 * enough for a loaded machine, short enough not to look hung. */
#define FANOUT_BATCH_SYNC_WAIT_US 500000u

/* The request at the head of c's input is an INSERT whose rows belong to
 * several shards: each shard gets its rows, in a transaction committed
 * only once every shard took them. rules: the pool's sharded tables. */
struct router_rules;
enum fanout_start fanout_start_insert(struct client *c, const struct proto_frame *f, const struct router_rules *rules,
				      char *why, size_t whylen);

/* default_shard = all: a write without a shard choice runs on every shard
 * (in a transaction on each, committed once every shard succeeded), when
 * that gives the same result as on one database (broadcast.c decides):
 * DDL, tables kept whole on every shard, UPDATE and DELETE of sharded
 * tables. The command tag's count is summed. */
enum fanout_start fanout_start_broadcast(struct client *c, const struct router_rules *rules, char *why,
					 size_t whylen);

/* A COPY ... FROM STDIN into a sharded table: each row goes to its shard
 * (in a transaction per shard, committed once every shard took its rows).
 * FANOUT_ANY_SHARD: not such a COPY. */
enum fanout_start fanout_start_copy(struct client *c, const struct proto_frame *f, const struct router_rules *rules,
				    char *why, size_t whylen);
/* The client's input while it waits in CLIENT_FANOUT: a COPY's rows. */
void fanout_client_input(struct client *c);

/* The client's output drained below its low watermark while it waits in
 * CLIENT_FANOUT: a cross-shard read writes on. */
void fanout_client_drain(struct client *c);

/* The client went away (any state but CLIENT_FANOUT is a no-op). */
void fanout_abort(struct client *c);

/* A named portal of a cross-shard read, inside a transaction pgcat holds,
 * that an Execute with a row limit left suspended: the merge waits, each
 * shard's server holding its rest (pgcat reads a window of it), and later
 * Execute, Describe and Close messages of that portal are answered by it,
 * at idle (an Execute makes the client wait for its rows in CLIENT_FANOUT).
 * true: m (whole message f at the head of c's input) was answered and
 * consumed, or is being answered. The portal is dropped (what its shards
 * still run cancelled) at its Close, at a Sync outside a transaction, as
 * PostgreSQL's would be at the end of its implicit transaction, and when
 * another arrives. */
/* A client's cross-shard state beyond one read (client.xshard). */
struct client_xshard {
	/* A cross-shard read into a named portal fetched in parts (pgjdbc's
	 * fetch size, asyncpg's cursors), suspended between its Executes;
	 * NULL: none. */
	struct fanout_portal *portal;
	/* A write split across shards inside a transaction pgcat holds: the
	 * shards' transactions open until the client's COMMIT or ROLLBACK. */
	struct fanout *parked;
	/* A batch for several shards that ended with Flush, its Sync awaited
	 * since then (fanout_start_batch); after FANOUT_BATCH_SYNC_WAIT_US the
	 * worker sets batch_no_wait: the client waits for results first. */
	uint64_t batch_wait_since_us;
	bool batch_no_wait;
	/* The shard of the request at the head of the input, found by a
	 * fan-out that handed it back (fanout_events.rerouted). */
	bool has_request_shard;
	int16_t request_shard;
};
/* c's cross-shard state, made if it has none (NULL: out of memory). */
struct client_xshard *fanout_xshard(struct client *c);

bool fanout_portal_message(struct client *c, const struct proto_frame *f);
void fanout_portal_drop(struct client *c);

/* A write split across shards inside a transaction pgcat holds is parked
 * (c->parked) with every shard's transaction open: the client's COMMIT or
 * ROLLBACK (simple Query, or pgjdbc's Parse/Bind/Execute/Sync) ends them
 * all, and is answered once they did. true: answered or under way (or its
 * rest awaited). false: anything else; the shards roll back and the
 * client's transaction has failed (the caller answers the message so). */
bool fanout_parked_message(struct client *c, const struct proto_frame *f);
/* The client goes away: the shards roll back. */
void fanout_parked_abort(struct client *c);
/* two_phase_commit (SPEC §6): c, linked to s inside a transaction on
 * shard here, sent a request for shard (route_active_message said
 * ROUTE_ACTIVE_CROSS). true: the transaction went on there: s now serves
 * the transaction's leg of its shard, the request runs on shard's, and c
 * waits (CLIENT_FANOUT); from its answer on the transaction is parked
 * (fanout_parked_txn) until its COMMIT or ROLLBACK. false: nothing
 * changed; *need > 0: more of the request first, else *why says why it
 * cannot go there (the caller refuses it as without the switch). */
struct server;
struct shardkey_result;
bool fanout_txn_cross(struct client *c, struct server *s, const struct proto_frame *f, int here, int shard,
		      uint32_t *need, char *why, size_t whylen);
/* c's transaction has gone on to other shards and is parked. */
bool fanout_parked_txn(const struct client *c);
/* Its next request (the message f at the head of c's input; where: its
 * shard as routing judged it). false: taken (c waits for it, or for its
 * COMMIT/ROLLBACK), or more of it first. true: refused, the transaction
 * rolled back everywhere and failed: answer f as in a failed one. */
bool fanout_txn_message(struct client *c, const struct proto_frame *f, const struct shardkey_result *where);
/* The client sent a CancelRequest: cancel every shard's query. */
void fanout_cancel(struct client *c);

#endif
