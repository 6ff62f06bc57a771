/* SPDX-License-Identifier: MIT */
/*
 * session_normal: the normal session kind (session.h), beside the admin
 * console's (admin.c). Its welcome waits for the pool's server parameters;
 * each message of an idle client is routed (route.c decides, this file
 * acts on the decision: client fields, input, replies), answered here (in a
 * failed transaction whose server is gone, with an error still to report,
 * a Sync or Flush with nothing before it, a Close or Parse of statements
 * the pool knows), or taken to a server (pool_checkout).
 *
 * Above client.c: it works on the client through client.c's functions,
 * and client.c reaches it only through its session_ops table, which the
 * worker hands in (w->normal_session), as it hands in the admin console's.
 * So this file takes no part in the core's circle (doc/architecture.md).
 */
#include "session_normal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "context.h"
#include "fanout.h"
#include "log.h"
#include "notify.h"
#include "notify_session.h"
#include "pktbuf.h"
#include "pool.h"
#include "prepared.h"
#include "proto.h"
#include "route.h"
#include "route_pick.h"
#include "ryw.h"
#include "shardkey.h"
#include "sqllex.h"

/* The normal session's welcome: the pool's server parameters first. */
static void normal_welcome(struct client *c)
{
	if (c->pool->have_defaults) {
		client_send_welcome(c);
		if (c->state == CLIENT_IDLE)
			client_process(c);
		return;
	}
	pool_request_defaults(c->pool, &c->wait);
}

/* ---- answering requests pgcat cannot pass on ---- */

/* ROLLBACK, ABORT, COMMIT or END starts the text: what PostgreSQL still
 * takes in a failed transaction. */
static bool is_transaction_end(const uint8_t *sql, size_t len)
{
	static const char *const ends[] = { "rollback", "abort", "commit", "end" };
	const char *s = (const char *)sql;
	const char *nul = memchr(s, '\0', len);
	if (nul)
		len = (size_t)(nul - s);   /* where PostgreSQL stops reading */
	size_t start = sqllex_skip_blank(s, len, 0);
	for (size_t k = 0; k < sizeof ends / sizeof *ends; k++) {
		size_t i = start;
		if (sqllex_keyword(s, len, &i, ends[k]))
			return true;
	}
	return false;
}

/* In a failed transaction whose server is gone, or with an error still to
 * report: pgcat answers the client itself (SPEC §3). Returns false when it
 * needs more bytes. */
static bool answer_locally(struct client *c, const struct proto_frame *f)
{
	struct buf *in = c->io.in;
	uint32_t total = f->len + 1;
	const uint8_t *body = NULL;
	bool inspectable = total <= CLIENT_INSPECT_MAX;
	if ((f->type == PqMsg_Query || f->type == PqMsg_Parse) && inspectable) {
		if (buf_len(in) < total)
			return false;
		body = buf_pullup(in, total) + 5;
	}
	bool is_end = false;
	if (body && f->type == PqMsg_Query)
		is_end = is_transaction_end(body, f->len - 4);
	if (body && f->type == PqMsg_Parse) {
		size_t off = 0;
		const char *name;
		if (proto_read_cstring(body, f->len - 4, &off, &name))
			is_end = is_transaction_end(body + off, f->len - 4 - off);
	}
	const char *code = c->pending_error ? c->pending_error->sqlstate : SQLSTATE_IN_FAILED_TRANSACTION;
	const char *msg = c->pending_error ? c->pending_error->message
						: "current transaction is aborted, commands ignored until end of transaction block";
	uint8_t type = f->type;
	/* Consume the message (possibly in pieces). */
	client_discard_message(c, total);
	switch (type) {
	case PqMsg_Query:
		if (is_end && c->tx == CLIENT_TX_FAILED) {
			uint8_t storage[64];
			struct pktbuf pb;
			pktbuf_init(&pb, storage, sizeof storage);
			pktbuf_command_complete(&pb, "ROLLBACK");
			client_send_pkt(c, &pb);
			client_set_tx(c, CLIENT_TX_NONE);
			client_clear_pending_error(c);
			notify_session_tx_end(c, false, NULL, 0);   /* its LISTENs go with it */
			client_send_rfq(c, 'I');
		} else {
			client_send_error(c, "ERROR", code, msg);
			client_clear_pending_error(c);
			client_send_rfq(c, client_idle_status(c));
		}
		return true;
	case PqMsg_Parse:
		if (is_end && c->tx == CLIENT_TX_FAILED) {
			client_set_batch(c, CLIENT_BATCH_LOCAL_ROLLBACK);
			client_send_simple(c, PqMsg_ParseComplete);
			return true;
		}
		break;
	case PqMsg_Bind:
		if (c->batch == CLIENT_BATCH_LOCAL_ROLLBACK) {
			client_send_simple(c, PqMsg_BindComplete);
			return true;
		}
		break;
	case PqMsg_Describe:
		if (c->batch == CLIENT_BATCH_LOCAL_ROLLBACK) {
			client_send_simple(c, PqMsg_NoData);
			return true;
		}
		break;
	case PqMsg_Execute:
		if (c->batch == CLIENT_BATCH_LOCAL_ROLLBACK) {
			uint8_t storage[64];
			struct pktbuf pb;
			pktbuf_init(&pb, storage, sizeof storage);
			pktbuf_command_complete(&pb, "ROLLBACK");
			client_send_pkt(c, &pb);
			return true;
		}
		break;
	case PqMsg_Close:
		client_send_simple(c, PqMsg_CloseComplete);
		return true;
	case PqMsg_Flush:
	case PqMsg_CopyData:
	case PqMsg_CopyDone:
	case PqMsg_CopyFail:
		return true;
	case PqMsg_Sync:
		if (c->batch == CLIENT_BATCH_LOCAL_ROLLBACK) {
			client_set_batch(c, CLIENT_BATCH_NONE);
			client_set_tx(c, CLIENT_TX_NONE);
			client_clear_pending_error(c);
			notify_session_tx_end(c, false, NULL, 0);
		}
		client_send_rfq(c, client_idle_status(c));
		return true;
	default:
		break;
	}
	client_send_error(c, "ERROR", code, msg);
	client_clear_pending_error(c);
	if (type == PqMsg_FunctionCall) {
		client_set_batch(c, CLIENT_BATCH_NONE);
		client_send_rfq(c, client_idle_status(c));
	} else {
		client_set_batch(c, CLIENT_BATCH_SKIP_TO_SYNC);
	}
	return true;
}

/* ---- an idle message ---- */

/* prep_client_parse_cached, and the ReadyForQuery of its Sync; false when
 * it took the client's messages (or closed it). */
static bool answer_parses(struct client *c, bool unverified_ok)
{
	switch (prep_client_parse_cached(c, unverified_ok)) {
	case PREP_CACHED_DONE:
		client_send_rfq(c, client_idle_status(c));
		return false;
	case PREP_CACHED_FAILED:
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return false;
	case PREP_CACHED_NO:
		break;
	}
	return true;
}

/* ---- acting on route's decisions ---- */

/* A pgcat command route answered (route_local_command): the setting it
 * changes, its message taken, its reply sent. */
static void apply_local(struct client *c, const struct route_decision *d)
{
	switch (d->setting) {
	case ROUTE_SET_NONE:
		break;
	case ROUTE_SET_ROLE:
		c->role_override = (int8_t)d->value;
		break;
	case ROUTE_SET_PRIMARY_READS:
		c->primary_reads_override = (int8_t)d->value;
		break;
	case ROUTE_SET_SHARD:
		c->shard_override = (int16_t)d->value;
		break;
	}
	buf_drain(c->io.in, d->consume);
	if (d->reply.len && !d->reply.failed)
		buf_add(client_output(c), d->reply.data, d->reply.len);
}

/* A request route refused (route_pick): answered with its error. Inside
 * the transaction pgcat holds, that transaction failed, as it would have
 * on a server (the client ends it with ROLLBACK). */
static void refuse(struct client *c, const struct route_decision *d)
{
	if (c->tx == CLIENT_TX_HELD)
		client_set_tx(c, CLIENT_TX_FAILED);
	client_on_checkout_failed(c, d->sqlstate, d->message);
}

/* A BEGIN route chose to hold, or the end of the one held: c->held_begin
 * set or dropped, the messages taken, the reply sent. false: no memory
 * to hold it (nothing done). */
static bool apply_held(struct client *c, const struct route_decision *d)
{
	switch (d->held) {
	case ROUTE_HELD_KEEP:
		break;
	case ROUTE_HELD_BEGIN: {
		if (d->adopt_len && !prep_client_adopt(c, d->adopt, d->adopt_len))
			return false;
		char *text = malloc(d->held_len + 1);
		if (!text)
			return false;
		memcpy(text, d->held_sql, d->held_len);
		text[d->held_len] = '\0';
		client_hold_begin(c, text, d->held_read_only);
		break;
	}
	case ROUTE_HELD_END:
		client_set_tx(c, CLIENT_TX_NONE);
		fanout_portal_drop(c);   /* a cross-shard portal read in parts ends with it (its shards' servers go back) */
		break;
	}
	buf_drain(c->io.in, d->consume);
	if (d->held == ROUTE_HELD_END && notify_client_of(c) && !d->reply.failed) {
		/* LISTENs of that transaction apply at its COMMIT. */
		static const char commit[] = "COMMIT";
		bool committed = d->reply.len > 5 + sizeof commit && memcmp(d->reply.data + 5, commit, sizeof commit) == 0;
		notify_session_tx_end(c, committed, d->reply.data, d->reply.len);
	} else if (d->reply.len && !d->reply.failed) {
		buf_add(client_output(c), d->reply.data, d->reply.len);
	}
	if (d->reprocess)
		c->reprocess = true;
	return true;
}

/* What an idle client's message may get without a server: a Sync or
 * Flush with nothing before it, a Close pgcat answers for its prepared
 * statements, a pgcat command (SET SERVER ROLE...). */
enum answered_here { HERE_NOT, HERE_ANSWERED, HERE_WAIT };

/* (Inlined by force: once per request, a call of its own costs more than
 * the readability gained is worth on this path.) */
__attribute__((always_inline)) static inline enum answered_here answer_here(struct client *c,
									  const struct proto_frame *f)
{
	struct buf *in = c->io.in;
	if (f->type == PqMsg_Sync && !c->end.server) {
		/* A Sync with nothing before it (after messages pgcat
		 * answered: a Close, a portal's rows): ReadyForQuery as the
		 * server would say it. Sent to a server it would open the
		 * held transaction there and pin it to that shard. */
		uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, (uint8_t)(c->held_begin ? 'T' : 'I') };
		buf_drain(in, (size_t)f->len + 1);
		buf_add(client_output(c), z, sizeof z);
		return HERE_ANSWERED;
	}
	if (!c->end.server && f->type == PqMsg_Flush) {
		/* Nothing to do without a request before it: a Flush after
		 * Sync (psycopg's pipeline sends Sync, Flush). Taking a server
		 * for it would hold one until the next request, which would
		 * then count as pipelined behind it on that shard. (COPY data
		 * left over was dropped before: normal_message.) */
		uint32_t total = f->len + 1;
		client_discard_message(c, total);
		return HERE_ANSWERED;
	}
	if (f->type == PqMsg_Close && !c->end.server && prep_enabled(c) && f->len + 1 <= CLIENT_INSPECT_MAX) {
		/* pgjdbc closes a statement (no Sync) before its next
		 * request: with prepared_statements pgcat keeps the client's
		 * statements itself, and nothing else of the client's is open
		 * on a server, so it answers alone instead of making the Close
		 * part of the next request (which a cross-shard read cannot
		 * carry to every shard). */
		uint32_t total = f->len + 1;
		if (buf_len(in) < total)
			return HERE_WAIT;
		prep_client_close_idle(c, buf_pullup(in, total), total);
		buf_drain(in, total);
		client_send_simple(c, PqMsg_CloseComplete);
		return HERE_ANSWERED;
	}
	if (f->type == PqMsg_Query && f->len + 1 <= CLIENT_INSPECT_MAX) {
		uint32_t total = f->len + 1;
		if (buf_len(in) < total)
			return HERE_WAIT;
		const char *sql = (const char *)buf_pullup(in, total) + 5;
		struct route_decision d;   /* (initialized by route_local_command if it answers) */
		if (route_may_be_local(sql, total - 5) &&
		    route_local_command(c, sql, strnlen(sql, total - 5), &d)) {
			d.consume = total;
			apply_local(c, &d);
			return HERE_ANSWERED;
		}
	}
	return HERE_NOT;
}

/* The cross-shard work route handed over (d->fanout), started. Returns 0
 * when d says what came of it (ANSWERED: started; REFUSE; WAIT); else the
 * fan-out found that one shard will do, and the bits to route again
 * without it (route_pick's declined). Off the usual path. */
static __attribute__((noinline)) unsigned start_fanout(struct client *c, const struct proto_frame *f,
						     struct route_decision *d)
{
	struct route_rules rr;
	route_rules_build(c, &rr);
	char why[200];
	why[0] = '\0';
	enum fanout_start st = FANOUT_REFUSED;
	switch (d->fanout) {
	case ROUTE_FANOUT_BATCH:
		st = fanout_start_batch(c, &rr.r, why, sizeof why);
		if (st == FANOUT_WAIT) {
			d->action = ROUTE_WAIT;   /* (it let the rest of the batch in itself) */
			return 0;
		}
		if (st == FANOUT_ANY_SHARD || st == FANOUT_ANY_SHARD_FLUSH)
			return ROUTE_FANOUT_BATCH;
		break;
	case ROUTE_FANOUT_SPLIT:
		st = fanout_start_copy(c, f, &rr.r, why, sizeof why);
		if (st == FANOUT_ANY_SHARD) {
			st = fanout_start_insert(c, f, &rr.r, why, sizeof why);
			if (st == FANOUT_ANY_SHARD)
				return ROUTE_FANOUT_SPLIT;
			if (st == FANOUT_ANY_SHARD_FLUSH)
				return ROUTE_FANOUT_SPLIT | ROUTE_DECLINED_FLUSH;
		}
		/* default_shard = all: an UPDATE or DELETE without a key runs
		 * on every shard */
		if (st == FANOUT_REFUSED && c->pool->cpool->default_shard < 0)
			st = fanout_start_broadcast(c, &rr.r, why, sizeof why);
		break;
	case ROUTE_FANOUT_BROADCAST:
		st = fanout_start_broadcast(c, &rr.r, why, sizeof why);
		break;
	case ROUTE_FANOUT_READ:
		st = fanout_start(c, f, d->fanout_sharded, &rr.r, why, sizeof why);
		if (st == FANOUT_ANY_SHARD)
			return ROUTE_FANOUT_READ;
		if (st == FANOUT_ANY_SHARD_FLUSH)
			return ROUTE_FANOUT_READ | ROUTE_DECLINED_FLUSH;
		break;
	case ROUTE_FANOUT_NONE:
		break;
	}
	if (st == FANOUT_STARTED) {
		d->action = ROUTE_ANSWERED;
		return 0;
	}
	d->action = ROUTE_REFUSE;
	memcpy(d->sqlstate, "0A000", 6);
	snprintf(d->message, sizeof d->message, "%s", why);
	return 0;
}

/* The request goes through routing (route.c decides, this applies) and a
 * server is checked out for it, or it is answered, refused or held, or
 * handed to the fan-out. */
__attribute__((always_inline)) static inline bool route_and_check_out(struct client *c, const struct proto_frame *f)
{
	/* Parses alone, of statements the pool knows: no server needed. */
	bool parse_here = f->type == PqMsg_Parse && prep_enabled(c);
	if (parse_here && !answer_parses(c, false))
		return true;
	struct route_decision d;
	bool may_hold = true;
	unsigned declined = 0;
	/* (a request the fan-out handed back knows its shard: once) */
	int known_shard = -1;
	if (c->xshard && c->xshard->has_request_shard) {
		known_shard = c->xshard->request_shard;
		c->xshard->has_request_shard = false;
	}
	for (;;) {
		route_decision_init(&d);
		d.known_shard = known_shard;
		route_pick(c, f, may_hold, declined, &d);
		if (d.action == ROUTE_HOLD && !apply_held(c, &d)) {
			may_hold = false;   /* (out of memory: routed as it comes, BEGIN included) */
			continue;
		}
		if (d.action != ROUTE_FANOUT)
			break;
		unsigned more = start_fanout(c, f, &d);
		if (!more)
			break;
		declined |= more;   /* one shard will do: routed again */
	}
	client_read_limit(c, d.read_need);
	if (d.set_phase)
		c->shard_phase = d.phase;
	switch (d.action) {
	case ROUTE_CHECKOUT:
		if (d.sticky_until_us)
			c->sticky_until_us = d.sticky_until_us;
		/* read_your_writes = lsn: this transaction's WAL position is
		 * asked at its end; a read's mark cleared or resolved. */
		c->end.want_wal = d.want_wal;
		c->end.check_replayed = d.ryw_ask;
		c->ryw_no_ask = false;
		if (d.ryw_clear)
			ryw_clear(c->ryw, (size_t)d.ryw_shard);
		else if (d.ryw_resolved)
			ryw_resolve(c->ryw, (size_t)d.ryw_shard, d.ryw_lsn);
		/* Reads on a replica can be sent elsewhere if it dies before
		 * answering. */
		client_reply_started(c);
		c->retry_on = d.retry_on;
		break;
	case ROUTE_REFUSE:
		refuse(c, &d);
		return false;
	case ROUTE_WAIT:      /* the rest of the request first */
	case ROUTE_HOLD:      /* (answered: apply_held) */
	case ROUTE_ANSWERED:  /* (cross-shard, started) */
	case ROUTE_FANOUT:    /* (not left by the loop above) */
		return false;
	}
	struct srvpool *sp = d.sp;
	/* Parses alone and no server free: a client that waits for one to
	 * prepare may be what the holders wait for (pgbench -M prepared
	 * blocks its thread in PQprepare): answered now, parsed with the
	 * Bind. (Not in a sharded pool, where routing a Parse may start
	 * the shard choice of what follows it.) */
	if (parse_here && !d.no_writer && c->pool->cpool->n_shards <= 1 && pool_checkout_would_wait(sp) &&
	    !answer_parses(c, true))
		return true;
	if (d.no_writer) {
		client_on_checkout_failed(c, "25006", "cannot execute a write: the configured primary is in recovery");
		return false;
	}
	/* Its messages are rewritten for the server it gets (prepared.c). */
	c->end.prep_on = prep_enabled(c);
	c->end.no_tx_blocks = c->pool->mode == POOL_MODE_STATEMENT;
	/* A reshard's cutover: reads go on meanwhile (pool_types.h); a
	 * session is not a transaction, and waits. */
	c->wait.reads_only = sp->pool->writes_paused && pool_mode_per_transaction(sp->pool->mode) &&
			     route_reads_only(c, f);
	(void)pool_checkout(sp, &c->wait);
	return true;
}

/* A request of a transaction gone on to other shards (fanout_txn.c):
 * what pgcat answers itself as usual, the rest on its shard's leg. */
static bool txn_message(struct client *c, const struct proto_frame *f)
{
	switch (answer_here(c, f)) {
	case HERE_ANSWERED:
		return true;
	case HERE_WAIT:
		return false;
	case HERE_NOT:
		break;
	}
	struct shardkey_result r = { SHARDKEY_ONE, c->shard_override, true, false, 0 };
	uint32_t need = 0;
	if (c->shard_override < 0 && !route_request_shard(c, f, &r, &need)) {
		client_read_limit(c, need);
		return false;
	}
	if (!fanout_txn_message(c, f, &r))
		return false;
	return answer_locally(c, f);   /* refused: failed, as a failed transaction answers */
}

/* The normal session's idle message: answered without a server, or
 * routed and taken to one. */
static bool normal_message(struct client *c, const struct proto_frame *f)
{
	if (c->xshard && c->xshard->parked) {
		if (fanout_parked_txn(c) && c->tx != CLIENT_TX_FAILED)
			return txn_message(c, f);
		if (fanout_parked_message(c, f))
			return false;   /* COMMIT or ROLLBACK of a split write under way (or its rest awaited) */
	}
	if (f->type == PqMsg_CopyData || f->type == PqMsg_CopyDone || f->type == PqMsg_CopyFail) {
		/* An idle client has no COPY running: this is the rest of one
		 * whose server was lost (the client streams on until it reads
		 * the error, libpq only at its CopyDone), or of one refused
		 * (asyncpg sends COPY, CopyData, CopyDone at once). PostgreSQL
		 * ignores these outside a COPY, in a failed transaction too;
		 * so does pgcat. Routed, they would take a server and, if none
		 * could be had (say, in crash recovery), earn an error that
		 * leaves the client skipping to a Sync a simple-query client
		 * never sends: it would hang. */
		uint32_t total = f->len + 1;
		client_discard_message(c, total);
		return true;
	}
	if (c->tx == CLIENT_TX_FAILED || c->pending_error) {
		if (!answer_locally(c, f))
			return false;
		return true;
	}
	c->last_activity_us = c->w->now_us;
	if (c->xshard && c->xshard->portal && fanout_portal_message(c, f))
		return true;   /* a cross-shard portal's next rows */
	/* LISTEN and UNLISTEN in transaction mode (SPEC §11): only Query and
	 * Parse are looked at, or the client's own LISTEN statement's next
	 * messages. */
	if (f->type == PqMsg_Query || f->type == PqMsg_Parse || c->kind_state) {
		switch (notify_session_message(c, f)) {
		case NOTIFY_HERE_ANSWERED:
			return true;
		case NOTIFY_HERE_WAIT:
			return false;
		case NOTIFY_HERE_NOT:
			break;
		}
	}
	switch (answer_here(c, f)) {
	case HERE_ANSWERED:
		return true;
	case HERE_WAIT:
		return false;
	case HERE_NOT:
		break;
	}
	return route_and_check_out(c, f);
}

/* The client closes: a split write parked in its transaction rolls back
 * on every shard, a fan-out under way ends, and its portal read in parts
 * and its prepared statements go. */
static void normal_closing(struct client *c)
{
	fanout_parked_abort(c);
	if (c->state == CLIENT_FANOUT)
		fanout_abort(c);
	fanout_portal_drop(c);
	prep_client_free(c);
	notify_client_free(c);
}

/* ---- what its fan-outs report (fanout.h) ---- */

static void fanout_started(struct client *c, struct fanout *fo)
{
	c->fanout = fo;
	client_set_state(c, CLIENT_FANOUT);
}

static void fanout_answered(struct client *c)
{
	c->fanout = NULL;
	client_on_released(c);   /* idle again: its next request */
}

static void fanout_resume(struct client *c) { client_process(c); }

static void fanout_tx_over(struct client *c) { client_set_tx(c, CLIENT_TX_NONE); }

static void fanout_tx_failed(struct client *c, const char *sqlstate, const char *message)
{
	client_fail_transaction(c, sqlstate, message);   /* (the held BEGIN goes) */
}

static void fanout_tx_spread(struct client *c)
{
	/* what pgcat answers itself (a lone Sync, its own commands) says 'T' */
	char *begin = strdup("BEGIN");
	if (begin)
		client_hold_begin(c, begin, false);
}

static void fanout_tx_aborted(struct client *c) { client_set_tx(c, CLIENT_TX_FAILED); }

/* read_your_writes = lsn: a cross-shard write committed on shard; its
 * reads wait for it there from now on, as after a write on its own
 * server (client.c's end_wal_position). */
static void fanout_wrote(struct client *c, int shard, bool known, uint64_t lsn)
{
	client_note_write(c, shard, known, lsn);
}

static void fanout_fatal(struct client *c, const char *sqlstate, const char *message)
{
	client_close(c, sqlstate, "%s", message);
}

static void fanout_rerouted(struct client *c, int shard)
{
	struct client_xshard *x = fanout_xshard(c);
	if (!x) {
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	x->has_request_shard = true;
	x->request_shard = (int16_t)shard;
	c->fanout = NULL;
	client_on_released(c);   /* idle again: the request, routed afresh */
}

/* The shard guard of a linked client (route.h); with two_phase_commit a
 * request for another shard takes the transaction there (fanout_txn.c). */
static enum route_active normal_guard(struct client *c, struct server *s, const struct proto_frame *f,
				      struct route_active_decision *d)
{
	enum route_active ra = route_active_message(c, s, f, d);
	if (ra != ROUTE_ACTIVE_CROSS)
		return ra;
	char why[300];
	uint32_t need = 0;
	if (fanout_txn_cross(c, s, f, d->cross_from, d->cross_shard, &need, why, sizeof why))
		return ROUTE_ACTIVE_CROSSED;
	if (need) {
		d->read_need = need;
		return ROUTE_ACTIVE_WAIT;
	}
	log_debug("C-%llu: %s", (unsigned long long)c->id, why);
	return route_active_refuse_cross(c, s, f, why, d);
}

static const struct fanout_events normal_fanout_events = {
	.started = fanout_started,
	.answered = fanout_answered,
	.resume = fanout_resume,
	.tx_over = fanout_tx_over,
	.tx_failed = fanout_tx_failed,
	.tx_spread = fanout_tx_spread,
	.tx_aborted = fanout_tx_aborted,
	.wrote = fanout_wrote,
	.fatal = fanout_fatal,
	.rerouted = fanout_rerouted,
};

const struct session_ops normal_session = {
	.name = "normal",
	.welcome = normal_welcome,
	.message = normal_message,
	.guard = normal_guard,
	.write_gate = route_gate,
	.rewrite = prep_client_message,
	.active_query = notify_session_active_query,
	.active_extended = notify_session_active_extended,
	.ready_held = notify_session_ready_held,
	.on_own_input = fanout_client_input,
	.on_own_cancel = fanout_cancel,
	.on_own_drain = fanout_client_drain,
	.closing = normal_closing,
	.fanout = &normal_fanout_events,
};
