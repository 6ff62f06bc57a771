/* SPDX-License-Identifier: MIT */
/*
 * fanout_internal: what the files of the fanout room share (src/fanout.c,
 * fanout_read.c, fanout_write.c, fanout_copy.c, fanout_batch.c): the
 * fan-out and its legs, the client's request as read, and the functions
 * one of them offers the others. Not an interface: no other room includes
 * it (they use include/fanout.h).
 */
#ifndef PGCAT_FANOUT_INTERNAL_H
#define PGCAT_FANOUT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client_end.h"
#include "client.h"
#include "copy_route.h"
#include "copysplit.h"
#include "io.h"
#include "merge.h"
#include "params.h"
#include "pool_types.h"
#include "session.h"

struct client;
struct buf;

/* A write's (or a spread transaction's) reply from a shard is kept whole
 * until every shard answered: at most this much of it (54000 beyond). */
#define FANOUT_REPLY_MAX (256u * 1024 * 1024)
/* A cross-shard read streams: each leg's replies are read up to this much
 * ahead of the merge (its loopback's read_high; its server stops being read
 * once as much again waits behind it), more only to hold one row larger
 * than that whole (counted against cross_shard_max_memory). */
#define FANOUT_READ_WINDOW (64u * 1024)
/* The client's request is read whole (route waited for it up to this). */
#define FANOUT_REQUEST_MAX (1024u * 1024)

/* COPY: beyond this queued for a shard not sent yet (or a full output to
 * its server), the client's rows wait (fanout_leg_full). */
#define COPY_LEG_HIGH (1024u * 1024)

/* Where a leg stands with its server (moved by leg_set in fanout.c, which
 * checks the edge). */
enum leg_link {
	LEG_UNLINKED,   /* no server: one is picked when a request is queued */
	LEG_WAITING,    /* queued on a pool for a server (wait) */
	LEG_SYNCING,    /* linked; the server runs the session's settings first */
	LEG_READY,      /* linked and ready: queued requests go out at once */
	LEG_GONE        /* its server was lost, or the fan-out ended: nothing more */
};

/* One shard's part of a fan-out. The leg checks a server out of the
 * shard's pool and drives it through the link like a client does (its
 * end, its waiter): the requests it queues (req) are sent once the server
 * is ready, and the server's replies come back on a loopback io, as they
 * would to a client's connection, batched per loop turn. */
struct fanout_leg {
	struct fanout *fo;
	int shard;
	enum leg_link link;
	struct io io;             /* the shard's replies (a loopback: io_open_loopback) */
	struct client_end end;    /* the leg's end of the link to its server */
	struct pool_waiter wait;  /* its wait for a server */
	struct params params;     /* the client's session settings, as the server must see them */
	struct buf *req;     /* requests queued, not sent yet */
	/* READ: what was sent, sent again elsewhere if the replica dies before
	 * answering (the read retry of SPEC §4, once) */
	struct buf *sent;
	bool retried;
	size_t scanned;           /* bytes of the reply walked so far */
	int ready_needed;         /* ReadyForQuery messages still to come */
	bool io_open;
	bool want_copy_in;        /* COPY: done at CopyInResponse (after ready_needed) */
	struct buf *rows;    /* COPY: this shard's rows, for the next CopyData */
	bool done;                /* the reply is complete, or the leg failed */
	bool lost;                /* its server was lost before its reply was complete */
	bool too_big;
	bool begin_pending;       /* the BEGIN pgcat sent first: its CommandComplete is not the client's */
	uint8_t completes;        /* CommandComplete messages of the client's statement */
	/* BATCH: the replies of this shard's Binds (BindComplete to
	 * CommandComplete), one after the other in rows, and their lengths */
	size_t *unit_len;
	uint32_t n_units, cap_units;
	uint8_t *error;           /* BATCH: this shard's ErrorResponse (whole) */
	size_t error_len;
	bool parsed;              /* BATCH: its ParseComplete came */
	bool prepared;            /* two_phase_commit: its PREPARE TRANSACTION succeeded */
	/* read_your_writes = lsn: pgcat's WAL position query follows this
	 * leg's COMMIT (or COMMIT PREPARED) in the same phase (fanout_ask_wal);
	 * its reply is taken off before the kind reads the phase's replies */
	bool wal_asked;
};

/* What the client's request asked, in order: the replies it expects. */
enum reply_step { STEP_PARSE, STEP_DESCRIBE_STMT, STEP_BIND, STEP_DESCRIBE_PORTAL, STEP_EXECUTE, STEP_SYNC };
#define MAX_STEPS 8

enum fanout_kind {
	FANOUT_READ,          /* one statement on every shard, rows merged */
	FANOUT_INSERT,        /* a multi-row INSERT cut per shard (insert_split.c) */
	FANOUT_COPY,          /* COPY FROM STDIN, rows sent to their shards (copysplit.c) */
	FANOUT_BROADCAST,     /* default_shard = all: one write run alike on every shard (broadcast.c) */
	FANOUT_BATCH,         /* one statement bound many times, each Bind on its key's shard */
	FANOUT_TXN            /* a transaction gone on to other shards, statement by statement (fanout_txn.c) */
};
/* A split INSERT runs in a transaction on each shard: BEGIN and the
 * shard's INSERT, then COMMIT only if every shard took its rows. */
enum fanout_phase {
	PHASE_RUN,            /* INSERT: BEGIN and the shard's rows */
	PHASE_COPY_OPEN,      /* COPY: BEGIN and COPY, until each shard's CopyInResponse */
	PHASE_COPY_DATA,      /* COPY: the client's rows flow to their shards */
	PHASE_COPY_CLOSE,     /* COPY: CopyDone (or CopyFail) sent, until each shard's ReadyForQuery */
	PHASE_END,            /* COMMIT or ROLLBACK on every shard */
	PHASE_PREPARE,        /* two_phase_commit: PREPARE TRANSACTION on every shard (fanout_2pc.c) */
	PHASE_PREPARED_END,   /* two_phase_commit: COMMIT PREPARED, or ROLLBACK PREPARED, on every shard */
	PHASE_INSERT_POSITION /* INSERT without a column list: where the sharding column is, first */
};

struct fanout {
	struct client *c;
	enum fanout_kind kind;
	enum fanout_phase phase;
	/* Every leg's part of the phase is in: what the kind does next (its
	 * file's, installed by its start: fanout.c calls no kind by name). */
	void (*phase_done)(struct fanout *fo);
	/* Instead, for a kind that reads its legs' replies as they come (a
	 * cross-shard read): leg's replies of this loop turn are in its io. */
	void (*leg_input)(struct fanout_leg *leg);
	/* READ (fanout_read.c): the reply as read so far and the merge */
	struct fanout_read *rd;
	/* INSERT: the rows of RETURNING and the counts, kept from PHASE_RUN */
	struct buf *result;
	uint8_t *error;           /* the first shard's ErrorResponse (whole) */
	size_t error_len;
	bool wrote_desc;
	uint64_t inserted;        /* INSERT and COPY: rows, summed over the shards */
	/* A broadcast write's command tag ("UPDATE", "CREATE TABLE"): the
	 * words of the first shard's; a count, if it has one, is summed. */
	char tag[64];
	bool tag_counted;
	/* COPY: the statement read, the splitter, the client's data */
	struct copy_route copy;
	struct copysplit split;
	bool split_ready;
	uint8_t *copy_in_response;   /* shard 0's, for the client */
	size_t copy_in_response_len;
	uint32_t copy_remaining;     /* bytes of the client's CopyData being read */
	uint32_t skip_remaining;     /* bytes of another client message being dropped */
	bool copy_discard;           /* an error: the client's data is dropped until CopyDone */
	bool waiting_drain;          /* the shards' buffers are full: stop reading the client */
	struct merge_plan plan;
	bool extended;
	bool asks_collation;
	uint8_t steps[MAX_STEPS];
	int n_steps;
	/* The Execute's row limit (0: none). */
	uint32_t max_rows;
	/* The client's Parse (whole message), to remember its statement. */
	uint8_t *parse_msg;
	uint32_t parse_len;
	/* The client's portal name ("" unnamed). */
	char portal[64];
	/* BATCH: for each of the client's Binds in order, its leg and its
	 * place among that leg's Binds */
	uint16_t *batch_leg;
	uint32_t *batch_idx;
	uint32_t n_batch;
	bool batch_parse;         /* the client sent the Parse: ParseComplete first */
	bool batch_parse_each;    /* ... before every Bind (the same unnamed statement) */
	/* A split write inside a transaction pgcat holds (BEGIN, then the
	 * write): answered, then parked with every shard's transaction open
	 * until the client's COMMIT or ROLLBACK (end_tag), whose replies
	 * before CommandComplete are end_prefix. */
	bool parked;
	bool rollback;
	char end_tag[16];
	uint8_t end_prefix[16];
	size_t end_prefix_len;
	/* INSERT without a column list: the client's request (whole), read
	 * again once the sharding column's position is known */
	uint8_t *req_copy;
	size_t req_len;
	char ins_schema[64], ins_table[64], ins_column[64];   /* the sharded table and its column */
	/* two_phase_commit (fanout_2pc.c): the commit's seq (0: none under
	 * way), whether it committed (its decision is logged), and the kind's
	 * end of PHASE_END, run once the prepared transactions are ended. */
	uint64_t xa_seq;
	bool xa_committed;
	void (*xa_kind_done)(struct fanout *fo);
	/* Run by fanout_free first (installed by the fan-out's current step). */
	void (*on_free)(struct fanout *fo);
	/* TXN (fanout_txn.c): the shard the transaction began on (statements
	 * without a key run there), the leg running the client's request,
	 * and whether the client's request had no Parse (the ParseComplete of
	 * the one pgcat sent is not the client's) */
	int txn_home;
	struct fanout_leg *txn_leg;
	bool txn_drop_parse;
	bool txn_strip_ready;     /* the client's request ended by Flush: no ReadyForQuery for it */
	/* TXN: the Query that opens another shard's transaction with the
	 * characteristics (isolation, read-only, deferrable) of the one it
	 * began on, learnt there when it spread (txn_mode.h); and the shard
	 * of the request that spread it, run once they are known */
	char txn_begin[96];
	int txn_first;
	/* TXN: READ ONLY on every shard (as learnt with txn_begin): its
	 * COMMIT needs no two phases (nothing was written anywhere, and a
	 * replica, where a read-only transaction may run, cannot PREPARE
	 * TRANSACTION) and leaves no read_your_writes mark. */
	bool txn_read_only;
	int n_legs, n_done;
	/* The pool's shard count when it was planned: a leg routed again
	 * after an online reshard changed it would run on another layout. */
	size_t layout_shards;
	struct fanout_leg legs[];
};

/* The client's request, as fanout_read_request reads it. */
struct request {
	size_t end;                       /* bytes of the request */
	const char *query;                /* simple Query text */
	const uint8_t *parse;             /* whole Parse message */
	uint32_t parse_total;
	const char *parse_name, *parse_sql;
	const uint8_t *parse_types;       /* int16 n, n x oid */
	size_t parse_types_len;
	const char *bind_portal, *bind_stmt;   /* bind_portal: the Bind body's start */
	size_t bind_len;                  /* of the Bind body */
	const uint8_t *bind_rest;         /* formats, values, result formats */
	size_t bind_rest_len;
	bool has_bind, has_execute, has_sync, has_flush;
	uint32_t max_rows;                /* Execute's row limit (0: all) */
	uint8_t steps[MAX_STEPS];
	int n_steps;
};

/* A named portal of a cross-shard read fetched in parts (client.xshard):
 * the read, suspended between the client's Executes (fanout_read.c). */
struct fanout_portal {
	char name[64];
	struct fanout *fo;         /* NULL while an Execute of it runs (c->fanout) */
};

/* What the client's session installed for its fan-outs (fanout.h). */
static inline const struct fanout_events *fanout_ev(const struct client *c) { return c->session->fanout; }

/* ---- fanout.c: the request, the legs, the fan-out's life ---- */

/* Writes "cross-shard read: msg" into why; false. */
bool fanout_refuse(char *why, size_t whylen, const char *msg);
/* Reads the request's messages. false: not one pgcat can fan out. */
bool fanout_read_request(const uint8_t *m, size_t lim, struct request *r, char *why, size_t whylen);
/* Appends one message (type, a then b as its body) to out. */
void fanout_put_msg(struct buf *out, uint8_t type, const void *a, size_t alen, const void *b, size_t blen);
/* Parse of the unnamed statement: sql (sql_len bytes and its NUL), then the parameter types as given. */
void fanout_put_unnamed_parse(struct buf *out, const char *sql, size_t sql_len, const void *types, size_t types_len);
/* Frees a portal read in parts and its read (NULL: nothing). */
void fanout_portal_free(struct fanout_portal *xp);
/* Closes the legs (what their servers run is cancelled, fanout_leg_finish
 * not called on them); the memory goes at the next loop turn. */
void fanout_free(struct fanout *fo);
/* The leg's replies are read as they come (fo->leg_input): at most window
 * bytes ahead, beyond which its server stops being read. */
void fanout_leg_stream(struct fanout_leg *leg, uint32_t window);
/* The fan-out needs no more of the leg's reply: its server ends what it
 * runs without a cancel (its rest read and dropped) and goes back to its
 * pool; a wait for one ends. */
void fanout_leg_finish(struct fanout_leg *leg);
/* A write fan-out of n_legs shards with its result buffer, for client c,
 * starting in phase; phase_done: its kind's end of a phase. NULL: out of
 * memory. */
struct fanout *fanout_new_write(struct client *c, enum fanout_kind kind, enum fanout_phase phase, int n_legs,
				void (*phase_done)(struct fanout *fo));
/* A new phase: every live leg waits for its replies again; the caller must not touch fo after. */
void fanout_begin_wait(struct fanout *fo);
/* Leg idx of fo, for shard: its reply io and request queue (its server
 * is checked out once a request is queued and sent, fanout_send). */
bool fanout_open_leg(struct fanout *fo, int idx, int shard, char *why, size_t whylen);
/* Leg idx of fo, for shard, takes over s, a server already in the
 * client's transaction (two-phase commit: the transaction goes on to other
 * shards): s is untied from the client and tied to the leg as it is,
 * ready, its transaction open. false: *why says why (nothing changed). */
bool fanout_adopt_leg(struct fanout *fo, int idx, int shard, struct server *s, char *why, size_t whylen);
/* A phase for one leg only (the others are done): its queued requests go
 * out and fo->phase_done runs once it answered. The caller must not touch
 * fo after. */
void fanout_wait_one(struct fanout *fo, struct fanout_leg *leg);
/* Where a leg's requests are queued (whole messages). */
static inline struct buf *fanout_leg_out(struct fanout_leg *leg) { return leg->req; }
/* Every leg's queued requests go to its server (checked out first if it
 * has none): after a kind queued a phase's requests. */
void fanout_send(struct fanout *fo);
/* COPY: the leg has too much queued; the client's rows wait until its
 * server's output drains (the fan-out's waiting_drain). */
bool fanout_leg_full(const struct fanout_leg *leg);
/* read_your_writes = lsn (SPEC §4): leg's COMMIT (or COMMIT PREPARED)
 * was just queued; the primary's WAL position is asked right after it, on
 * the same server, and told to the client (fanout_events.wrote) when the
 * phase ends, if the commit happened, before the kind answers. Nothing
 * when the pool does not follow positions. */
void fanout_ask_wal(struct fanout *fo, struct fanout_leg *leg);
/* The statement a Bind names, when its Parse is not in this request. */
bool fanout_bound_statement(struct client *c, const char *name, const char **sql, const uint8_t **types,
			    size_t *types_len);

/* ---- each kind's end of a phase, once every leg is in (fo->phase_done) ---- */

/* fanout_write.c: a split INSERT's or a broadcast write's phase ended. */
void fanout_insert_finish(struct fanout *fo);
/* fanout_copy.c: a split COPY's phase ended. */
void fanout_copy_finish(struct fanout *fo);
/* fanout_batch.c: a split batch's phase ended. */
void fanout_batch_finish(struct fanout *fo);

/* ---- fanout_2pc.c: a split write's commit with two_phase_commit ---- */

/* fo is about to commit on several shards and two_phase_commit is on. */
bool fanout_2pc_wanted(const struct fanout *fo);
/* PREPARE TRANSACTION on every shard; if all succeeded, the decision is
 * logged and COMMIT PREPARED sent to each, else ROLLBACK PREPARED to
 * those that prepared. Then the kind's end of PHASE_END runs, with the
 * error of a failed PREPARE as the client's answer. false: out of memory,
 * nothing started (the caller rolls back). */
bool fanout_2pc_commit(struct fanout *fo);

/* ---- fanout.c: a leg's reply, taken whole (every kind's) ---- */

/* The error the client gets, made by pgcat (the first one wins). */
void fanout_set_error(struct fanout *fo, const char *sqlstate, const char *msg);
/* Keeps a copy of a whole message (an ErrorResponse, a CopyInResponse) in *dst, unless one is kept there already. */
void fanout_keep_msg(uint8_t **dst, size_t *dst_len, const uint8_t *msg, size_t len);
/* The error for a shard whose reply was lost or too large, kept in *dst as above. */
void fanout_keep_leg_failure(const struct fanout_leg *leg, uint8_t **dst, size_t *dst_len);
/* The first column of a DataRow as an int (the sharding column's position). false: not one. */
bool fanout_first_int(const uint8_t *msg, size_t len, int *out);

/* The whole messages of a shard's buffered reply, in order; a partial or
 * malformed tail ends the walk. fanout_walk_done drains what was walked. */
struct fanout_walk {
	struct buf *in;
	const uint8_t *m;
	size_t len, off;
};
void fanout_walk_start(struct fanout_walk *w, struct fanout_leg *leg);
bool fanout_walk_next(struct fanout_walk *w, const uint8_t **msg, size_t *len);
void fanout_walk_done(struct fanout_walk *w, struct fanout_leg *leg);

/* ---- fanout_write.c: the split writes' transactions, for COPY and batches too ---- */

/* Takes a shard's reply of a phase: its first error, RETURNING rows, and the count of its command tag. */
void fanout_insert_take_reply(struct fanout *fo, struct fanout_leg *leg);
/* COMMIT on every shard if none failed, else ROLLBACK (with
 * two_phase_commit, through fanout_2pc_commit). */
void fanout_write_end(struct fanout *fo);

/* The request at the head of c's input, while a transaction is parked
 * (xs->parked): its COMMIT or ROLLBACK, taken and under way (DONE), not
 * all here yet (WAIT: nothing consumed), or something else (NOT). */
enum parked_end { PARKED_END_NOT, PARKED_END_WAIT, PARKED_END_DONE };
enum parked_end fanout_parked_try_end(struct client *c, const struct proto_frame *f);
/* The answer to the client's COMMIT or ROLLBACK of a parked split write. */
void fanout_write_end_reply(struct fanout *fo);
/* Inside a transaction pgcat holds: answered now, the shards' transactions left open. true: parked. */
bool fanout_park(struct fanout *fo);
/* The client's answer, once every shard committed or rolled back. */
void fanout_write_reply(struct fanout *fo);
/* A batch's answer: each Bind's replies in the client's order. */
void fanout_batch_put_result(struct fanout *fo, struct buf *out);

#endif
