/* SPDX-License-Identifier: MIT */
/*
 * fanout_txn: a transaction that goes on to other shards statement by
 * statement (SPEC §6, two_phase_commit; include/fanout.h).
 *
 * Without two_phase_commit a statement for another shard inside a
 * transaction is refused (route.c). With it, at the first message of such
 * a request, the server owing nothing, the transaction becomes a fan-out
 * of kind TXN: the client's server moves, as it is, to the leg of its
 * shard (fanout_adopt_leg), and each request from then on runs on the leg
 * of its own shard, that leg's transaction opened when first needed with
 * the isolation level, read-only and deferrable of the transaction on the
 * shard it began on (asked there once, as it spreads: txn_mode.h). The
 * client gets each request's replies as the shard sent them
 * (the ParseComplete of a Parse pgcat added dropped), and the transaction
 * stays parked between requests (xs->parked). Its COMMIT commits on every
 * shard it touched in two phases (fanout_2pc.c), its ROLLBACK rolls them
 * all back, and an error fails it: every shard rolls back at once and the
 * client's transaction is failed until it ends it, as on one server.
 *
 * What runs here: simple Query, and an extended request of one statement
 * up to its Sync (Parse, Describe, Bind, Execute), its statement by its
 * text (a named statement is parsed again unnamed on the leg). Refused
 * (the transaction fails): a statement for several shards, SAVEPOINT and
 * its kin, COPY, an Execute with a row limit, a request ended by Flush,
 * and SET TRANSACTION (it would change one shard's transaction only).
 */
#include "fanout.h"
#include "fanout_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "context.h"
#include "log.h"
#include "pool.h"
#include "prepared.h"
#include "proto.h"
#include "router.h"
#include "shardkey.h"
#include "sqllex.h"
#include "txn_mode.h"

static void txn_answered(struct fanout *fo);
static void txn_ended(struct fanout *fo);
static void txn_learned(struct fanout *fo);

#define WHY_SET_TRANSACTION                                                                                       \
	"cross-shard transaction: SET TRANSACTION cannot run in a transaction spread over several shards (it would " \
	"change one shard's transaction only): give the isolation level and READ ONLY in its BEGIN"

bool fanout_parked_txn(const struct client *c)
{
	return c->xshard && c->xshard->parked && c->xshard->parked->kind == FANOUT_TXN;
}

/* The client's request at the head of its input, as it will run. */
struct txn_request {
	size_t end;                 /* its bytes */
	const char *query;          /* simple Query text, or NULL */
	struct request r;           /* extended */
	const char *sql;            /* the statement's text (extended) */
	const uint8_t *types;
	size_t types_len;
	bool flush;                 /* a Parse and Describe ended by Flush (no ReadyForQuery awaited) */
};

/* Where the request ends: at its Sync or Flush. 0: not here yet. */
static size_t request_end(const uint8_t *m, size_t lim)
{
	size_t off = 0;
	while (lim - off >= 5) {
		uint32_t l = proto_get_u32(m + off + 1);
		if (l < 4 || (size_t)l + 1 > lim - off)
			return 0;
		off += (size_t)l + 1;
		if (m[off - (size_t)l - 1] == PqMsg_Sync || m[off - (size_t)l - 1] == PqMsg_Flush)
			return off;
	}
	return 0;
}

/* Statements that cannot run on one shard of a transaction spread over
 * several: savepoints (each shard would keep its own), COPY, and the
 * client's own two-phase commands. */
static bool statement_refused(const char *sql, size_t len)
{
	static const char *const words[] = { "savepoint", "release", "copy", "prepare", "commit", "rollback" };
	size_t i = sqllex_skip_blank(sql, len, 0);
	for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
		size_t at = i;
		if (!sqllex_keyword(sql, len, &at, words[k]))
			continue;
		if (k == 3) {   /* PREPARE TRANSACTION, not PREPARE name AS */
			size_t t = at;
			return sqllex_keyword(sql, len, &t, "transaction");
		}
		if (k >= 4) {   /* COMMIT PREPARED, ROLLBACK PREPARED, ROLLBACK TO */
			size_t t = at;
			if (sqllex_keyword(sql, len, &t, "prepared"))
				return true;
			t = at;
			return k == 5 && sqllex_keyword(sql, len, &t, "to");
		}
		return true;
	}
	return false;
}

/* One statement that neither ends the transaction nor is several: a
 * shard's transaction must not end apart from the others'. */
static bool one_plain_statement(const char *sql, size_t len)
{
	struct router_rules rules = { .max_length = SIZE_MAX };
	struct router_verdict v;
	router_classify(sql, len, &rules, &v);
	return !v.multi_statement && !v.ends;
}

/* Reads the request. 1: whole, *q filled; 0: more of it first (*need
 * bytes); -1: not one that can run here (*why). */
static int read_request(struct client *c, const struct proto_frame *f, struct txn_request *q, uint32_t *need,
			char *why, size_t whylen)
{
	struct buf *in = c->io.in;
	size_t have = buf_len(in);
	memset(q, 0, sizeof *q);
	if (f->type == PqMsg_Query) {
		size_t total = (size_t)f->len + 1;
		if (total > FANOUT_REQUEST_MAX) {
			snprintf(why, whylen, "cross-shard transaction: statement too long");
			return -1;
		}
		if (have < total) {
			*need = (uint32_t)total;
			return 0;
		}
		const uint8_t *m = buf_pullup(in, (size_t)total);
		q->end = total;
		q->query = (const char *)m + 5;
		size_t ql = strnlen(q->query, total - 5);
		if (!one_plain_statement(q->query, ql)) {
			snprintf(why, whylen, "cross-shard transaction: send one statement per query in a transaction spread "
					      "over several shards, and end it with COMMIT or ROLLBACK alone");
			return -1;
		}
		if (statement_refused(q->query, ql)) {
			snprintf(why, whylen, "cross-shard transaction: savepoints, COPY and two-phase commands cannot run "
					      "in a transaction spread over several shards");
			return -1;
		}
		if (txn_mode_statement_sets(q->query, ql)) {
			snprintf(why, whylen, "%s", WHY_SET_TRANSACTION);
			return -1;
		}
		return 1;
	}
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = buf_pullup(in, (size_t)lim);
	if (!m || !request_end(m, lim)) {
		if (lim == have) {
			*need = FANOUT_REQUEST_MAX;
			return 0;
		}
		snprintf(why, whylen, "cross-shard transaction: request too large");
		return -1;
	}
	char rwhy[200];
	if (!fanout_read_request(m, lim, &q->r, rwhy, sizeof rwhy)) {
		snprintf(why, whylen, "cross-shard transaction: %s", rwhy + (strncmp(rwhy, "cross-shard read: ", 18) ? 0 : 18));
		return -1;
	}
	struct request *r = &q->r;
	q->end = r->end;
	/* Parse and Describe ended by Flush: asyncpg prepares so, then binds */
	q->flush = r->has_flush && !r->has_bind;
	/* (a row limit is fine when Sync follows: the portal ends there,
	 * asyncpg's fetchrow; read in parts it would need the portal kept) */
	if ((!r->has_sync && !q->flush) || (r->has_bind && !r->has_execute)) {
		snprintf(why, whylen, "cross-shard transaction: a request ended by Flush, a portal read in parts or "
				      "bound without Execute cannot run in a transaction spread over several shards");
		return -1;
	}
	if (r->has_bind && !(r->parse && strcmp(r->parse_name, r->bind_stmt) == 0)) {
		if (!fanout_bound_statement(c, r->bind_stmt, &q->sql, &q->types, &q->types_len)) {
			snprintf(why, whylen, "cross-shard transaction: the prepared statement is not known to pgcat "
					      "(prepared_statements off?)");
			return -1;
		}
	} else if (r->parse) {
		q->sql = r->parse_sql;
		q->types = r->parse_types;
		q->types_len = r->parse_types_len;
	} else {
		snprintf(why, whylen, "cross-shard transaction: a request without a statement");
		return -1;
	}
	if (statement_refused(q->sql, strlen(q->sql)) || !one_plain_statement(q->sql, strlen(q->sql))) {
		snprintf(why, whylen, "cross-shard transaction: savepoints, COPY, two-phase commands and statements that "
				      "end the transaction cannot run in a transaction spread over several shards");
		return -1;
	}
	if (txn_mode_statement_sets(q->sql, strlen(q->sql))) {
		snprintf(why, whylen, "%s", WHY_SET_TRANSACTION);
		return -1;
	}
	return 1;
}

/* The leg of shard, opened (its transaction's BEGIN queued) if it was not:
 * with the characteristics of the transaction on the shard it began on
 * (fo->txn_begin, learnt as it spread), so that every shard's part runs
 * at the isolation level, read-only and deferrable the client chose. */
static struct fanout_leg *leg_for(struct fanout *fo, int shard, char *why, size_t whylen)
{
	struct fanout_leg *leg = &fo->legs[shard];
	if (leg->fo)
		return leg->lost || !leg->io_open ? NULL : leg;
	size_t n = strnlen(fo->txn_begin, sizeof fo->txn_begin);
	if (n == 0 || n == sizeof fo->txn_begin) {
		snprintf(why, whylen, "cross-shard transaction: the transaction's isolation level is not known");
		return NULL;
	}
	if (!fanout_open_leg(fo, shard, shard, why, whylen))
		return NULL;
	/* (one Query: its replies up to ReadyForQuery are not the client's) */
	fanout_put_msg(fanout_leg_out(leg), PqMsg_Query, fo->txn_begin, n + 1, NULL, 0);
	leg->begin_pending = true;
	return leg;
}

/* Queues the request on leg: a Query as it is; an extended one as the
 * unnamed statement (parsed by its text), with the client's Describes,
 * its Bind's parameters and result formats, Execute, Sync. */
static void put_request(struct fanout *fo, struct fanout_leg *leg, const struct txn_request *q)
{
	struct buf *out = fanout_leg_out(leg);
	leg->ready_needed = leg->begin_pending ? 2 : 1;
	leg->want_copy_in = false;
	if (q->query) {
		fanout_put_msg(out, PqMsg_Query, q->query, strlen(q->query) + 1, NULL, 0);
		fo->txn_drop_parse = false;
		fo->txn_strip_ready = false;
		return;
	}
	const struct request *r = &q->r;
	fanout_put_unnamed_parse(out, q->sql, strlen(q->sql), q->types, q->types_len);
	fo->txn_drop_parse = r->parse == NULL;
	for (int i = 0; i < r->n_steps; i++)
		if (r->steps[i] == STEP_DESCRIBE_STMT)
			fanout_put_msg(out, PqMsg_Describe, "S", 2, NULL, 0);
	if (r->has_bind) {
		fanout_put_msg(out, PqMsg_Bind, "\0", 2, r->bind_rest, r->bind_rest_len);
		for (int i = 0; i < r->n_steps; i++)
			if (r->steps[i] == STEP_DESCRIBE_PORTAL)
				fanout_put_msg(out, PqMsg_Describe, "P", 2, NULL, 0);
		uint8_t ex[5] = { 0, (uint8_t)(r->max_rows >> 24), (uint8_t)(r->max_rows >> 16), (uint8_t)(r->max_rows >> 8),
				  (uint8_t)r->max_rows };
		fanout_put_msg(out, PqMsg_Execute, ex, sizeof ex, NULL, 0);
	}
	/* (a request ended by Flush ends with Sync on the leg, whose
	 * ReadyForQuery the client does not get) */
	fanout_put_msg(out, PqMsg_Sync, NULL, 0, NULL, 0);
	fo->txn_strip_ready = q->flush;
}

/* Sends the request at the head of c's input to the leg of shard; the
 * client waits (CLIENT_FANOUT) for its replies. false: *why (nothing
 * consumed). */
static bool run_request(struct fanout *fo, int shard, const struct txn_request *q, char *why, size_t whylen)
{
	struct client *c = fo->c;
	struct fanout_leg *leg = leg_for(fo, shard, why, whylen);
	if (!leg) {
		if (!why[0])
			snprintf(why, whylen, "cross-shard transaction: shard %d's connection was lost", shard);
		return false;
	}
	free(fo->parse_msg);
	fo->parse_msg = NULL;
	if (q->r.parse && q->r.parse_name[0] && (fo->parse_msg = malloc(q->r.parse_total))) {
		memcpy(fo->parse_msg, q->r.parse, q->r.parse_total);
		fo->parse_len = q->r.parse_total;
	}
	put_request(fo, leg, q);
	buf_drain(c->io.in, q->end);
	fo->txn_leg = leg;
	fo->phase = PHASE_RUN;
	fo->phase_done = txn_answered;
	if (c->xshard)
		c->xshard->parked = NULL;
	fo->parked = false;
	fanout_ev(c)->started(c, fo);
	fanout_wait_one(fo, leg);
	return true;
}

/* The transaction fails here: every shard rolls back now (the legs go),
 * and the client's transaction is failed until it ends it. */
static void txn_fail(struct fanout *fo, const char *sqlstate, const char *message)
{
	struct client *c = fo->c;
	if (c->xshard && c->xshard->parked == fo)
		c->xshard->parked = NULL;
	fanout_free(fo);
	fanout_ev(c)->tx_failed(c, sqlstate, message);
}

bool fanout_txn_cross(struct client *c, struct server *s, const struct proto_frame *f, int here, int shard,
		      uint32_t *need, char *why, size_t whylen)
{
	int n_shards = (int)c->pool->cpool->n_shards;
	*need = 0;
	why[0] = '\0';
	struct client_xshard *xs = fanout_xshard(c);
	if (!xs || here < 0 || here >= n_shards || shard < 0 || shard >= n_shards || xs->parked) {
		snprintf(why, whylen, "cross-shard transaction: cannot go on to shard %d", shard);
		return false;
	}
	struct txn_request q;
	switch (read_request(c, f, &q, need, why, whylen)) {
	case 0:
		return false;   /* (*need says how much) */
	case -1:
		return false;
	default:
		break;
	}
	struct fanout *fo = fanout_new_write(c, FANOUT_TXN, PHASE_RUN, n_shards, txn_answered);
	if (!fo) {
		snprintf(why, whylen, "cross-shard transaction: out of memory");
		return false;
	}
	fo->n_legs = n_shards;
	fo->extended = true;
	fo->txn_home = here;
	if (!fanout_adopt_leg(fo, here, here, s, why, whylen)) {
		fanout_free(fo);
		return false;
	}
	/* From here the client holds no server: its transaction is the legs'. */
	fanout_ev(c)->tx_spread(c);
	log_debug("C-%llu: the transaction on shard %d goes on to shard %d (two-phase commit)", (unsigned long long)c->id,
		  here, shard);
	/* First the characteristics of the transaction here, however the
	 * client set them (its BEGIN, SET TRANSACTION, the session's
	 * defaults): every shard's transaction gets the same. The request
	 * waits in the client's input meanwhile (txn_learned runs it). */
	struct fanout_leg *home = &fo->legs[here];
	fo->txn_first = shard;
	fanout_put_msg(fanout_leg_out(home), PqMsg_Query, TXN_MODE_PROBE, sizeof TXN_MODE_PROBE, NULL, 0);
	home->ready_needed = 1;
	home->begin_pending = false;
	home->want_copy_in = false;
	fo->txn_leg = home;
	fo->phase = PHASE_RUN;
	fo->phase_done = txn_learned;
	fanout_ev(c)->started(c, fo);
	fanout_wait_one(fo, home);
	return true;
}

/* The first column of a DataRow (msg: the whole message) as text, into
 * out. false: none, NULL, or longer than out holds. */
static bool datarow_text(const uint8_t *msg, size_t len, char *out, size_t outsz)
{
	const char *v;
	size_t vl;
	if (len < 5 || !proto_parse_datarow_first(msg + 5, len - 5, &v, &vl) || !v || vl >= outsz)
		return false;
	memcpy(out, v, vl);
	out[vl] = '\0';
	return true;
}

/* The shard the transaction began on told its characteristics
 * (TXN_MODE_PROBE): they open every other shard's transaction from now
 * on, and the request that spread it runs. If it could not tell (an
 * error, the server lost), the transaction fails everywhere and that
 * request gets the error, as when its shard cannot be reached. */
static void txn_learned(struct fanout *fo)
{
	struct client *c = fo->c;
	struct fanout_leg *leg = &fo->legs[fo->txn_home];
	char vals[3][32];
	int n_vals = 0;
	char sqlstate[6] = "", why[300] = "";
	bool errored = false, odd = false, ended = false;
	char status = 'E';
	struct fanout_walk w;
	const uint8_t *msg;
	size_t total;
	fanout_walk_start(&w, leg);
	while (fanout_walk_next(&w, &msg, &total)) {
		if (msg[0] == PqMsg_DataRow) {
			if (n_vals < 3 && datarow_text(msg, total, vals[n_vals], sizeof vals[0]))
				n_vals++;
			else
				odd = true;
		} else if (msg[0] == PqMsg_ErrorResponse && !errored) {
			struct proto_error_fields e;
			errored = true;
			if (proto_parse_error(msg + 5, total - 5, &e) && e.sqlstate && e.message) {
				snprintf(sqlstate, sizeof sqlstate, "%s", e.sqlstate);
				snprintf(why, sizeof why, "%s", e.message);
			}
		} else if (msg[0] == PqMsg_ReadyForQuery) {
			status = total >= 6 ? (char)msg[5] : 'E';
			ended = true;
		}
	}
	fanout_walk_done(&w, leg);
	struct txn_mode m;
	if (errored) {
		if (!why[0]) {   /* (an error pgcat could not read) */
			snprintf(sqlstate, sizeof sqlstate, "%s", "XX000");
			snprintf(why, sizeof why, "cross-shard transaction: shard %d failed", leg->shard);
		}
	} else if (leg->lost || leg->too_big || !ended) {
		snprintf(sqlstate, sizeof sqlstate, "%s", SQLSTATE_CONNECTION_FAILURE);
		snprintf(why, sizeof why, "cross-shard transaction: shard %d's connection was lost", leg->shard);
	} else if (odd || status != 'T' || n_vals != 3 || !txn_mode_from_settings(vals[0], vals[1], vals[2], &m) ||
		   txn_mode_begin_sql(&m, fo->txn_begin, sizeof fo->txn_begin) == 0) {
		snprintf(sqlstate, sizeof sqlstate, "%s", "XX000");
		snprintf(why, sizeof why, "cross-shard transaction: shard %d did not tell its transaction's isolation level",
			 leg->shard);
	} else {
		log_debug("C-%llu: the transaction on shard %d is %s, %s%s", (unsigned long long)c->id, leg->shard, vals[0],
			  m.read_only ? "read only" : "read write", m.deferrable ? ", deferrable" : "");
		fo->txn_read_only = m.read_only;
		/* the request that spread it, read again where it waited */
		uint8_t h[5];
		struct proto_frame f;
		struct txn_request q;
		uint32_t need = 0;
		if (buf_copyout(c->io.in, h, 5) == 5) {
			f.type = h[0];
			f.len = proto_get_u32(h + 1);
			if (read_request(c, &f, &q, &need, why, sizeof why) == 1 &&
			    run_request(fo, fo->txn_first, &q, why, sizeof why))
				return;
		}
		snprintf(sqlstate, sizeof sqlstate, "%s", SQLSTATE_CONNECTION_FAILURE);
		if (!why[0])
			snprintf(why, sizeof why, "cross-shard transaction: the request that went on to shard %d was lost",
				 fo->txn_first);
	}
	log_debug("C-%llu: %s", (unsigned long long)c->id, why);
	txn_fail(fo, sqlstate, why);   /* (the request waiting gets the error) */
	fanout_ev(c)->answered(c);
}

bool fanout_txn_message(struct client *c, const struct proto_frame *f, const struct shardkey_result *where)
{
	struct fanout *fo = c->xshard->parked;
	switch (fanout_parked_try_end(c, f)) {
	case PARKED_END_DONE:
		return false;   /* COMMIT or ROLLBACK under way */
	case PARKED_END_WAIT:
		return false;
	case PARKED_END_NOT:
		break;
	}
	char why[300];
	why[0] = '\0';
	struct txn_request q;
	uint32_t need = 0;
	switch (read_request(c, f, &q, &need, why, sizeof why)) {
	case 0:
		client_read_limit(c, need);
		return false;
	case -1:
		txn_fail(fo, SQLSTATE_FEATURE_NOT_SUPPORTED, why);
		return true;   /* (the message is answered as in a failed transaction) */
	default:
		break;
	}
	int shard = where->outcome == SHARDKEY_ONE ? where->shard : where->outcome == SHARDKEY_DEFAULT ? fo->txn_home : -1;
	if (shard < 0 || shard >= fo->n_legs) {
		txn_fail(fo, SQLSTATE_FEATURE_NOT_SUPPORTED,
			 "cross-shard transaction: a statement whose sharding keys are missing or on several shards "
			 "cannot run in a transaction spread over several shards (it is rolled back)");
		return true;
	}
	if (!run_request(fo, shard, &q, why, sizeof why)) {
		txn_fail(fo, "08006", why);
		return true;
	}
	return false;
}

/* The leg answered the client's request: its replies go to the client as
 * they came (the BEGIN's, and the ParseComplete of a Parse the client did
 * not send, left out). An error fails the whole transaction. */
static void txn_answered(struct fanout *fo)
{
	struct client *c = fo->c;
	struct fanout_leg *leg = fo->txn_leg;
	struct buf *out = io_out(&c->io);
	struct fanout_walk w;
	const uint8_t *msg;
	size_t total;
	bool in_begin = leg->begin_pending, drop_parse = fo->txn_drop_parse, failed = false, ended = false;
	char status = 'T';
	fanout_walk_start(&w, leg);
	while (fanout_walk_next(&w, &msg, &total)) {
		uint8_t type = msg[0];
		if (in_begin) {
			if (type == PqMsg_ErrorResponse) {
				failed = true;
				buf_add(out, msg, total);
			}
			if (type == PqMsg_ReadyForQuery)
				in_begin = false;
			continue;
		}
		if (type == PqMsg_ParseComplete && drop_parse) {
			drop_parse = false;
			continue;
		}
		if (type == PqMsg_ErrorResponse)
			failed = true;
		if (type == PqMsg_ReadyForQuery) {
			status = total >= 6 ? (char)msg[5] : 'E';
			ended = true;
			if (failed || fo->txn_strip_ready)
				break;   /* (the client's ReadyForQuery comes from its failed transaction; or it sent Flush) */
		}
		buf_add(out, msg, total);
	}
	fanout_walk_done(&w, leg);
	leg->begin_pending = false;
	bool lost = leg->lost || leg->too_big || !ended;
	if (!failed && !lost && status == 'T') {
		if (fo->parse_msg && prep_enabled(c))
			(void)prep_client_adopt(c, fo->parse_msg, fo->parse_len);
		fo->phase_done = txn_ended;   /* (PHASE_END: the client's COMMIT or ROLLBACK) */
		fo->parked = true;
		c->xshard->parked = fo;
		fanout_ev(c)->answered(c);
		return;
	}
	/* An error, a lost shard, or a transaction the shard ended by itself:
	 * every shard rolls back, and the client's transaction is failed
	 * (its error already went out, or the loss's goes now). */
	if (lost && !failed) {
		uint8_t *err = NULL;
		size_t err_len = 0;
		fanout_keep_leg_failure(leg, &err, &err_len);
		if (err)
			buf_add(out, err, err_len);
		free(err);
	}
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, 'E' };
	if (!fo->txn_strip_ready)
		buf_add(out, z, sizeof z);   /* (after Flush: at the client's Sync, from its failed transaction) */
	fanout_free(fo);
	fanout_ev(c)->tx_aborted(c);
	fanout_ev(c)->answered(c);
}

/* Every shard answered the client's COMMIT or ROLLBACK (in two phases,
 * when it touched several). */
static void txn_ended(struct fanout *fo)
{
	bool failed_before = fo->error != NULL;
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].fo)
			fanout_insert_take_reply(fo, &fo->legs[i]);
	if (!failed_before && fo->error && !fo->xa_committed)
		log_warning("C-%llu: a cross-shard transaction failed at COMMIT on a shard",
			    (unsigned long long)fo->c->id);
	fanout_write_reply(fo);
}
