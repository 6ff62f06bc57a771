/* SPDX-License-Identifier: MIT */
/*
 * route: which server a transaction goes to (SPEC §4). The role comes from
 * a comment hint on the transaction's first statement, else the client's
 * SET SERVER ROLE, else the query parser's verdict on that statement
 * (query_parser_enabled), else default_role; then one server of the shard is picked among those of that
 * role that are not banned, at random or by least outstanding connections.
 */
#ifndef PGCAT_ROUTE_H
#define PGCAT_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pktbuf.h"

struct client;
struct pool;
struct srvpool;
struct proto_frame;
struct router_cache;

/* How a transaction's shard was chosen (SHOW SHARDS counts each). */
enum route_via {
	ROUTE_VIA_KEY,       /* the query parser found its sharding keys */
	ROUTE_VIA_SET,       /* SET SHARD / SET SHARDING KEY */
	ROUTE_VIA_HINT,      /* a comment hint, shard= or sharding_key= */
	ROUTE_VIA_DEFAULT,   /* default_shard */
	ROUTE_VIA__COUNT
};

struct route_decision;

/* The server for the transaction the client starts with message f (the
 * message is at the head of the client's input, maybe not whole), in *d
 * (route_decision_init'ed): d->action says whether to check d->sp out,
 * wait for the rest of the request (a Bind after the Parse), refuse it
 * with d->sqlstate and d->message (a cross-shard write, a bad hint),
 * answer a BEGIN pgcat holds (or the end of one), or hand the request to
 * the fan-out (d->fanout: the session starts it). may_hold false: no
 * BEGIN is held (the session could not keep the one route chose).
 * declined: the fan-outs (enum route_fanout bits, ROUTE_DECLINED_FLUSH)
 * the session found not to apply to this request, for which one shard
 * will do: routed to one shard instead. */
void route_pick(struct client *c, const struct proto_frame *f, bool may_hold, unsigned declined,
		struct route_decision *d);

/* Cross-shard work route hands the session, to start with the fan-out
 * (fanout.h); as bits, for route_pick's declined. */
enum route_fanout {
	ROUTE_FANOUT_NONE = 0,
	ROUTE_FANOUT_BATCH = 1,       /* executemany / executeBatch with keys of several shards: fanout_start_batch */
	ROUTE_FANOUT_SPLIT = 2,       /* COPY or multi-row INSERT split by shard (fanout_start_copy, _insert);
				       * else, with default_shard = all, on every shard (_broadcast) */
	ROUTE_FANOUT_BROADCAST = 4,   /* default_shard = all: a write on every shard (fanout_start_broadcast) */
	ROUTE_FANOUT_READ = 8         /* a read on several shards, merged (fanout_start) */
};
/* With a declined fan-out: the request ended with Flush (asyncpg's Parse,
 * Describe, Flush), so its Bind, next, picks its shards itself. */
#define ROUTE_DECLINED_FLUSH 0x100u

/*
 * After the shard of a transaction was chosen by its keys or default_shard,
 * the requests that follow on the same server (the rest of an explicit
 * transaction, or a pipeline) are checked too (GUARD): a statement whose
 * keys are on another shard, or a cross-shard one, is refused there
 * (0A000) instead of running on the wrong shard.
 *
 * A request that only prepares a sharded statement and ends with Flush
 * (asyncpg: Parse, Describe, Flush; then Bind, Execute, Sync once the types
 * are known) has no key yet; it goes to default_shard PROVISIONALly. At the
 * Bind, pgcat ends the server's segment with a Sync of its own (replies
 * swallowed, prepared.c), the server goes back to the pool, and the Bind
 * is routed by its parameters like a new transaction (the statement is
 * prepared again on that server, SPEC §5).
 */
enum route_phase {
	ROUTE_PHASE_NONE,          /* nothing to check (one shard, or the client chose it) */
	ROUTE_PHASE_GUARD,         /* check each Query and Bind against the server's shard */
	ROUTE_PHASE_REFUSE_BIND,   /* the request a Parse opened is for another shard: refuse its Bind */
	ROUTE_PHASE_PROVISIONAL,   /* routed to default_shard before the key was known */
	ROUTE_PHASE_REROUTING,     /* pgcat's Sync is out; the Bind waits for the release */
	/* the request at the head was routed to the shard the fan-out found
	 * for it (route_decision.known_shard): it goes as it is, up to its
	 * end (its Query or Sync); then GUARD */
	ROUTE_PHASE_KNOWN
};
enum route_active {
	ROUTE_ACTIVE_FORWARD,      /* go on with the message as usual */
	ROUTE_ACTIVE_WAIT,         /* leave it in the client's input for now */
	ROUTE_ACTIVE_CONSUMED,     /* taken and answered (refused on the server) */
	/* two_phase_commit: the request it opens is for another shard
	 * (cross_shard), and the server owes nothing: the transaction may go
	 * on there (the session's guard takes it: route_active_message never
	 * reaches the pump with it) */
	ROUTE_ACTIVE_CROSS,
	ROUTE_ACTIVE_CROSSED,      /* the transaction went on to other shards: the client is no longer linked */
	/* an INSERT without a column list: where its table's sharding column
	 * sits is asked of the server first (ask_table, ask_sql:
	 * server_ask_placement); the message waits, and is judged again with
	 * the answer */
	ROUTE_ACTIVE_ASK
};
/* What the pump does with the message, besides the route_active answer:
 * c->shard_phase from now on, and (CONSUMED) the bytes of input to drain,
 * what was captured for a replay being incomplete from then on. */
struct route_active_decision {
	uint8_t phase;       /* enum route_phase */
	uint32_t consume;
	uint32_t read_need;  /* (WAIT) as route_decision's */
	int cross_shard;     /* (CROSS) the request's shard */
	int cross_from;      /* (CROSS) the linked server's shard */
	uint8_t ask_table;   /* (ASK) */
	char ask_sql[1024];  /* (ASK) */
};
struct server;
/* Message f (at the head of the input) from a client linked to s while
 * c->shard_phase is not NONE; the pump (client.c) applies *d. */
enum route_active route_active_message(struct client *c, struct server *s, const struct proto_frame *f,
				       struct route_active_decision *d);
/* The request route_active_message said CROSS of cannot go on elsewhere
 * after all: refused on the server (why, or as without two_phase_commit
 * when NULL or empty; a Parse: its Bind is). */
/* Longest first statement the parser looks at; longer ones go by default_role
 * (query_parser_max_length may lower it further). */
#define ROUTE_INSPECT_MAX (64u * 1024)
/* The text of the statement of f (a Query, a Parse, or a Bind of a named
 * statement pgcat prepared), if whole in the buffer and at most
 * ROUTE_INSPECT_MAX. */
bool route_statement_text(struct client *c, const struct proto_frame *f, const char **sql, size_t *len);
/* A refusal of the Query, FunctionCall or Bind f at the head of the input,
 * raised by s itself (prepared.h's prep_server_fail_query and _bind), so
 * that the server's transaction fails as the client is told: CONSUMED
 * (d->consume), or WAIT (d->read_need) for the whole message. */
enum route_active route_refuse_on_server(const struct client *c, struct server *s, const struct proto_frame *f,
					 const char *sqlstate, const char *msg, struct route_active_decision *d);
/* The write pause of a reshard's cutover (pool_types.h): whether the
 * request starting with f (its first statement; a transaction pgcat began
 * READ ONLY) provably only reads: parsed, writing nothing, calling no
 * function that might (router.h's calls_unknown). */
bool route_reads_only(struct client *c, const struct proto_frame *f);
/* Message f from a client linked to s, whose transaction is write_gated
 * (txn.h): a Query, FunctionCall or Bind that might write is refused on
 * s (25006) and CONSUMED; the rest goes (FORWARD), or WAIT (read_need)
 * for the whole of a text. */
enum route_active route_gate(struct client *c, struct server *s, const struct proto_frame *f,
			     struct route_active_decision *d);
enum route_active route_active_refuse_cross(struct client *c, struct server *s, const struct proto_frame *f,
					    const char *why, struct route_active_decision *d);
/* The shard of the request at the head of c's input (Query, or Parse..Sync):
 * *r as routing would judge it. false: more of it first (*read_need). */
struct shardkey_result;
bool route_request_shard(struct client *c, const struct proto_frame *f, struct shardkey_result *r,
			 uint32_t *read_need);

/* A session setting a pgcat command changes (SET SERVER ROLE...). */
enum route_setting {
	ROUTE_SET_NONE,
	ROUTE_SET_ROLE,            /* c->role_override = value (enum router_role) */
	ROUTE_SET_PRIMARY_READS,   /* c->primary_reads_override = value (-1, 0, 1) */
	ROUTE_SET_SHARD            /* c->shard_override = value */
};

/*
 * What route decided about a client's message: route.c reads the client
 * and fills this in; the session (session_normal.c) acts on it, writing
 * the client's fields and sending the replies. route.c writes no field
 * of the client and sends nothing of its own.
 */
/* What the session does with the message route_pick looked at. */
enum route_action {
	ROUTE_CHECKOUT,   /* check d->sp out for the transaction */
	ROUTE_WAIT,       /* nothing yet: the rest of the request is on its way */
	ROUTE_REFUSE,     /* answer the request with the error d->sqlstate, d->message */
	ROUTE_HOLD,       /* a BEGIN pgcat holds, or the end of one: d->held, consume, reply */
	ROUTE_ANSWERED,   /* nothing: the request was answered (the session's, after a fan-out started) */
	ROUTE_FANOUT      /* cross-shard work: d->fanout, for the session to start */
};

/* In a sharded pool with automatic routing, a BEGIN alone says nothing
 * about the shard: pgcat answers it and holds it (c->held_begin) until the
 * transaction's first statement has been routed. */
enum route_held {
	ROUTE_HELD_KEEP,    /* c->held_begin as it is */
	ROUTE_HELD_BEGIN,   /* hold d->held_sql (held_len bytes), read only or not */
	ROUTE_HELD_END      /* the held transaction ended before reaching a server: drop it */
};

struct route_decision {
	/* In (the caller's, after route_decision_init): the request's shard,
	 * already found (a one-shard INSERT the fan-out handed back, its key
	 * where the table's sharding column sits): routed there as by its
	 * key. -1: none. */
	int known_shard;
	enum route_action action;
	struct srvpool *sp;        /* (CHECKOUT) */
	/* (CHECKOUT) a write, and the shard's configured primary is in
	 * recovery with no other to take writes: refused (25006) instead. */
	bool no_writer;
	/* (CHECKOUT) a read on a replica: sent elsewhere if the server dies
	 * before answering (c->retry_on). */
	bool retry_on;
	/* (CHECKOUT) a write with sticky_primary_after_write: the session's
	 * reads go to the primary until then (c->sticky_until_us); 0: as is. */
	uint64_t sticky_until_us;
	/* (CHECKOUT) read_your_writes = lsn: a write, whose WAL position the
	 * server asks when it ends (c->end.want_wal). */
	bool want_wal;
	/* (CHECKOUT) read_your_writes = lsn, a read on shard ryw_shard (-1:
	 * none): the client's mark there goes (ryw_clear: every server has
	 * it), or its unknown position is now ryw_lsn (ryw_resolved). */
	bool ryw_clear;
	bool ryw_resolved;
	int ryw_shard;
	uint64_t ryw_lsn;
	/* (CHECKOUT) a read sent to a replica without fresh figures: asked
	 * first whether it replayed this position (c->end.check_replayed);
	 * 0: nothing to ask. */
	uint64_t ryw_ask;
	/* set_phase: c->shard_phase from now on (enum route_phase, below),
	 * whatever the action (not for HOLD). */
	bool set_phase;
	uint8_t phase;
	char sqlstate[6];          /* (REFUSE); the message is at the end */
	/* (HOLD) the held BEGIN; its text is in the client's input (or its
	 * prepared statements): copied before the input is drained. */
	enum route_held held;
	const char *held_sql;
	size_t held_len;
	bool held_read_only;
	/* (HOLD) a named Parse of the BEGIN, in the input: the client's
	 * statement from now on (prep_client_adopt), before the input is
	 * drained. */
	const uint8_t *adopt;
	uint32_t adopt_len;
	/* (HOLD) the rest of the request is in the input already: go on. */
	bool reprocess;
	/* Input to drain (the message answered), then the reply to send. */
	size_t consume;
	struct pktbuf reply;
	/* A session setting to change. */
	enum route_setting setting;
	int value;
	/* (FANOUT) the kind, and whether the request touches a sharded
	 * table (READ: else default_shard = all, and a statement other than
	 * SELECT goes to one shard). */
	enum route_fanout fanout;
	bool fanout_sharded;
	/* (WAIT) the request is routed once the input holds this many bytes
	 * (more than the usual read limit, at most ROUTE_SCAN_MAX): the
	 * session lets them in (client_read_limit). 0: the usual limit. */
	uint32_t read_need;
	/* Last, the buffers route_decision_init does not clear (written
	 * before they are read): the REFUSE message and the reply's bytes. */
	char message[256];
	uint8_t reply_storage[512];
};

/* An empty decision: nothing to consume, send or change. Field by field,
 * inline: once per request, and the ~770 bytes of buffers at the end are
 * written before they are read (the reply stays empty, len 0, until a
 * reply is started). */
static inline void route_decision_init(struct route_decision *d)
{
	d->known_shard = -1;
	d->action = ROUTE_CHECKOUT;
	d->sp = NULL;
	d->no_writer = false;
	d->retry_on = false;
	d->sticky_until_us = 0;
	d->want_wal = false;
	d->ryw_clear = false;
	d->ryw_resolved = false;
	d->ryw_shard = -1;
	d->ryw_lsn = 0;
	d->ryw_ask = 0;
	d->set_phase = false;
	d->phase = 0;
	d->sqlstate[0] = '\0';
	d->held = ROUTE_HELD_KEEP;
	d->held_sql = NULL;
	d->held_len = 0;
	d->held_read_only = false;
	d->adopt = NULL;
	d->adopt_len = 0;
	d->reprocess = false;
	d->consume = 0;
	d->reply.data = NULL;
	d->reply.len = 0;
	d->reply.failed = false;
	d->setting = ROUTE_SET_NONE;
	d->value = 0;
	d->fanout = ROUTE_FANOUT_NONE;
	d->fanout_sharded = false;
	d->read_need = 0;
	d->message[0] = '\0';
}

/* SET SERVER ROLE, SET PRIMARY READS, SHOW SERVER ROLE, SHOW PRIMARY READS
 * (and SET/SHOW SHARD, SET SHARDING KEY) in a simple Query: answered by
 * pgcat. Returns true when it is one: *d (initialized here) holds the
 * reply (with its ReadyForQuery) and the setting to change; sql is the
 * query text. false: *d untouched. */
bool route_local_command(const struct client *c, const char *sql, size_t len, struct route_decision *d);
/* The cheap refusal route_local_command starts with, for its caller to
 * make first: only SET and SHOW can be pgcat's, and most traffic is SELECT,
 * which shares their first letter: three letters are looked at. */
static inline bool route_may_be_local(const char *sql, size_t len)
{
	size_t i = 0;
	while (i < len && (sql[i] == ' ' || sql[i] == '\t' || sql[i] == '\n' || sql[i] == '\r'))
		i++;
	if (len - i < 3 || (sql[i] | 0x20) != 's')
		return false;
	char c1 = (char)(sql[i + 1] | 0x20), c2 = (char)(sql[i + 2] | 0x20);
	return (c1 == 'e' && c2 == 't') || (c1 == 'h' && c2 == 'o');
}

#endif
