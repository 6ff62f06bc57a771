/* SPDX-License-Identifier: MIT */
/*
 * fanout_write: writes split across shards (include/fanout.h): a multi-row
 * INSERT cut per shard (insert_split.c), a write run alike on every shard
 * (broadcast.c), each in a transaction per shard committed once every
 * shard succeeded; and such a write parked inside the client's transaction
 * until its COMMIT or ROLLBACK. COPY and batches end their transactions
 * here too. The legs are fanout.c's; reads are not here.
 */
#include "fanout.h"
#include "fanout_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broadcast.h"
#include "client.h"
#include "config.h"
#include "buf_msg.h"
#include "copy_route.h"
#include "insert_split.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "prepared.h"
#include "proto.h"
#include "sqllex.h"
#include "shardkey.h"

/* ---- a multi-row INSERT split by shard ---- */

/* A CommandComplete of a write: "INSERT 0 n", "UPDATE n", "CREATE TABLE".
 * The count is summed over the shards; the words are the first shard's. */
static void take_tag(struct fanout *fo, struct fanout_leg *leg, const char *tag, size_t n)
{
	size_t tl = strnlen(tag, n);
	if (leg->begin_pending && tl == 5 && memcmp(tag, "BEGIN", 5) == 0) {
		leg->begin_pending = false;
		return;
	}
	if (++leg->completes > 1) {
		/* several statements ran: one tag could not stand for them (and the
		 * error rolls every shard back) */
		fanout_set_error(fo, SQLSTATE_FEATURE_NOT_SUPPORTED,
			  "cross-shard write: send one statement per query when it runs on every shard");
		return;
	}
	size_t sp = tl;
	while (sp > 0 && tag[sp - 1] >= '0' && tag[sp - 1] <= '9')
		sp--;
	bool counted = sp < tl && sp > 0 && tag[sp - 1] == ' ' && tl - sp <= 19;
	size_t words = counted ? sp - 1 : tl;
	if (!fo->tag[0]) {
		if (words >= sizeof fo->tag)
			words = sizeof fo->tag - 1;
		memcpy(fo->tag, tag, words);
		fo->tag[words] = '\0';
		fo->tag_counted = counted;
	}
	if (counted)
		fo->inserted += strtoull(tag + sp, NULL, 10);
}

/* Takes a shard's reply of a phase: its first error, RETURNING rows, and
 * the count of its command tag. */
void fanout_insert_take_reply(struct fanout *fo, struct fanout_leg *leg)
{
	struct fanout_walk w;
	const uint8_t *msg;
	size_t total;
	fanout_walk_start(&w, leg);
	while (fanout_walk_next(&w, &msg, &total)) {
		uint8_t type = msg[0];
		if (type == PqMsg_ErrorResponse) {
			fanout_keep_msg(&fo->error, &fo->error_len, msg, total);
		} else if (fo->phase == PHASE_RUN && (type == PqMsg_RowDescription || type == PqMsg_NoData) &&
			   !fo->wrote_desc) {
			fo->wrote_desc = buf_prepend(fo->result, msg, total);
		} else if (fo->phase == PHASE_RUN && type == PqMsg_DataRow) {
			buf_add(fo->result, msg, total);
		} else if (fo->phase == PHASE_RUN && type == PqMsg_CommandComplete) {
			take_tag(fo, leg, (const char *)msg + 5, total - 5);
		} else if (fo->phase == PHASE_COPY_CLOSE && type == PqMsg_CommandComplete && total > 5 + 5 &&
			   memcmp(msg + 5, "COPY ", 5) == 0) {
			fo->inserted += strtoull((const char *)msg + 5 + 5, NULL, 10);
		}
	}
	/* (after a logged two-phase decision a lost shard is the resolver's:
	 * the transaction is committed) */
	if ((leg->lost || leg->too_big) && !fo->xa_committed)
		fanout_keep_leg_failure(leg, &fo->error, &fo->error_len);
	fanout_walk_done(&w, leg);
}

/* COMMIT on every shard if none failed, else ROLLBACK. */
void fanout_write_end(struct fanout *fo)
{
	if (!(fo->error || fo->rollback) && fanout_2pc_wanted(fo)) {
		if (fanout_2pc_commit(fo))
			return;
		fanout_set_error(fo, "53200", "cross-shard write: out of memory for its two-phase commit");
	}
	const char *end = fo->error || fo->rollback ? "ROLLBACK" : "COMMIT";
	fo->phase = PHASE_END;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		leg->want_copy_in = false;
		leg->ready_needed = 1;
		if (!leg->io_open || leg->lost)
			continue;
		fanout_put_msg(fanout_leg_out(leg), PqMsg_Query, end, strlen(end) + 1, NULL, 0);
		if (!(fo->error || fo->rollback))
			fanout_ask_wal(fo, leg);   /* read_your_writes: where the commit ended */
	}
	fanout_begin_wait(fo);
}

static void put_result(struct fanout *fo, struct buf *out);

/* The answer to the client's COMMIT or ROLLBACK of a parked split write,
 * once every shard ended its transaction: the transaction is over. */
void fanout_write_end_reply(struct fanout *fo)
{
	struct client *c = fo->c;
	struct buf *out = io_out(&c->io);
	buf_add(out, fo->end_prefix, fo->end_prefix_len);
	if (fo->error)
		buf_add(out, fo->error, fo->error_len);
	else
		fanout_put_msg(out, PqMsg_CommandComplete, fo->end_tag, strlen(fo->end_tag) + 1, NULL, 0);
	fanout_ev(c)->tx_over(c);   /* committed or rolled back on every shard */
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, 'I' };
	buf_add(out, z, sizeof z);
	fanout_free(fo);
	fanout_ev(c)->answered(c);
}

/* A split write inside a transaction pgcat holds, every shard's part done:
 * the client gets its answer now, and the shards' transactions stay open
 * until the client's COMMIT or ROLLBACK (fanout_parked_message). true:
 * parked. */
bool fanout_park(struct fanout *fo)
{
	struct client *c = fo->c;
	if (!c->held_begin || fo->error || fo->parked ||
	    (fo->kind != FANOUT_INSERT && fo->kind != FANOUT_COPY && fo->kind != FANOUT_BATCH))
		return false;
	struct client_xshard *xs = fanout_xshard(c);
	if (!xs)
		return false;   /* out of memory: not parked, answered as outside a transaction */
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].lost || !fo->legs[i].io_open)
			return false;
	struct buf *out = io_out(&c->io);
	if (fo->kind == FANOUT_BATCH)
		fanout_batch_put_result(fo, out);
	else
		put_result(fo, out);
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, 'T' };
	buf_add(out, z, sizeof z);
	fo->parked = true;
	xs->parked = fo;
	fanout_ev(c)->answered(c);
	return true;
}

/* The client's answer, once every shard committed or rolled back. */
void fanout_write_reply(struct fanout *fo)
{
	struct client *c = fo->c;
	struct buf *out = io_out(&c->io);
	if (fo->end_tag[0]) {
		fanout_write_end_reply(fo);
		return;
	}
	put_result(fo, out);
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, (uint8_t)(c->held_begin ? 'T' : 'I') };
	buf_add(out, z, sizeof z);
	fanout_free(fo);
	fanout_ev(c)->answered(c);
}

/* The statement's own answer: its error, or its rows and command tag. */
static void put_result(struct fanout *fo, struct buf *out)
{
	struct client *c = fo->c;
	if (fo->error) {
		buf_add(out, fo->error, fo->error_len);
	} else {
		for (int i = 0; fo->extended && i < fo->n_steps; i++) {
			if (fo->steps[i] == STEP_PARSE)
				buf_add_bodyless(out, PqMsg_ParseComplete);
			else if (fo->steps[i] == STEP_BIND)
				buf_add_bodyless(out, PqMsg_BindComplete);
		}
		buf_add_buf(out, fo->result);   /* RowDescription or NoData, rows */
		if (fo->parse_msg && prep_enabled(c))
			(void)prep_client_adopt(c, fo->parse_msg, fo->parse_len);
		char tag[96];
		int tl;
		if (fo->kind == FANOUT_COPY)
			tl = snprintf(tag, sizeof tag, "COPY %llu", (unsigned long long)fo->inserted);
		else if (fo->kind == FANOUT_INSERT || fo->tag_counted)
			tl = snprintf(tag, sizeof tag, "%s %llu", fo->tag[0] ? fo->tag : "INSERT 0",
				      (unsigned long long)fo->inserted);
		else
			tl = snprintf(tag, sizeof tag, "%s", fo->tag);
		fanout_put_msg(out, PqMsg_CommandComplete, tag, (size_t)tl + 1, NULL, 0);
	}
}

static void insert_positioned(struct fanout *fo);

void fanout_insert_finish(struct fanout *fo)
{
	if (fo->phase == PHASE_INSERT_POSITION) {
		insert_positioned(fo);
		return;
	}
	bool commit_phase = fo->phase == PHASE_END, failed_before = fo->error != NULL;
	for (int i = 0; i < fo->n_legs; i++)
		fanout_insert_take_reply(fo, &fo->legs[i]);
	if (!commit_phase) {
		if (!fanout_park(fo))
			fanout_write_end(fo);   /* every shard took its rows, or none keeps them */
		return;
	}
	if (!failed_before && fo->error)
		log_warning("C-%llu: a cross-shard write failed at COMMIT on a shard; the other shards committed",
			    (unsigned long long)fo->c->id);
	fanout_write_reply(fo);
}

/* The parts of a Bind body after its two names: parameter formats,
 * values, result formats. */
struct bind_parts {
	const uint8_t *formats;       /* n_formats x int16 */
	uint16_t n_formats;
	const uint8_t *values;        /* n_values x (int32 len, bytes) */
	uint16_t n_values;
	const uint8_t *results;       /* int16 n, n x int16: copied as is */
	size_t results_len;
};

static bool read_bind_parts(const uint8_t *p, size_t len, struct bind_parts *b)
{
	size_t off = 0;
	if (len < 2)
		return false;
	b->n_formats = (uint16_t)(p[0] << 8 | p[1]);
	off = 2;
	if (len - off < 2 * (size_t)b->n_formats + 2)
		return false;
	b->formats = p + off;
	off += 2 * (size_t)b->n_formats;
	b->n_values = (uint16_t)(p[off] << 8 | p[off + 1]);
	off += 2;
	b->values = p + off;
	for (uint16_t i = 0; i < b->n_values; i++) {
		if (len - off < 4)
			return false;
		int32_t l = (int32_t)proto_get_u32(p + off);
		off += 4;
		if (l < -1 || (l > 0 && (size_t)l > len - off))
			return false;
		if (l > 0)
			off += (size_t)l;
	}
	b->results = p + off;
	b->results_len = len - off;
	return b->results_len >= 2;
}

/* Value k (0-based) of the Bind: its bytes with the length word. */
static const uint8_t *bind_value(const struct bind_parts *b, uint16_t k, size_t *total)
{
	const uint8_t *v = b->values;
	for (uint16_t i = 0;; i++) {
		int32_t l = (int32_t)proto_get_u32(v);
		size_t t = 4 + (l > 0 ? (size_t)l : 0);
		if (i == k) {
			*total = t;
			return v;
		}
		v += t;
	}
}

/* One shard's part of a split INSERT in the extended protocol: its
 * statement, and a Bind with the parameters it uses, renumbered. */
static void put_insert_part(struct buf *out, const char *sql, size_t sql_len, const uint16_t *params,
			    uint16_t n_params, const uint8_t *types, uint16_t n_types, const struct bind_parts *b,
			    bool describe)
{
	uint8_t h[5] = { PqMsg_Parse };
	proto_put_u32(h + 1, (uint32_t)(4 + 1 + sql_len + 1 + 2 + 4 * (size_t)n_params));
	buf_add(out, h, 5);
	buf_add(out, "", 1);
	buf_add(out, sql, sql_len + 1);
	uint8_t n16[2] = { (uint8_t)(n_params >> 8), (uint8_t)n_params };
	buf_add(out, n16, 2);
	for (uint16_t k = 0; k < n_params; k++) {
		uint16_t old = params[k];
		static const uint8_t unknown[4] = { 0 };
		buf_add(out, old <= n_types ? types + 4 * (old - 1) : unknown, 4);
	}
	/* Bind: formats (all alike, or one per kept parameter), values */
	size_t len = 4 + 2 + 2 + (b->n_formats > 1 ? 2 * (size_t)n_params : 2 * (size_t)b->n_formats) + 2 + b->results_len;
	for (uint16_t k = 0; k < n_params; k++) {
		size_t t = 4;
		if (params[k] <= b->n_values)
			(void)bind_value(b, (uint16_t)(params[k] - 1), &t);
		len += t;
	}
	h[0] = PqMsg_Bind;
	proto_put_u32(h + 1, (uint32_t)len);
	buf_add(out, h, 5);
	buf_add(out, "\0\0", 2);
	if (b->n_formats > 1) {
		buf_add(out, n16, 2);
		for (uint16_t k = 0; k < n_params; k++) {
			static const uint8_t text[2] = { 0, 0 };
			buf_add(out, params[k] <= b->n_formats ? b->formats + 2 * (params[k] - 1) : text, 2);
		}
	} else {
		uint8_t nf[2] = { 0, (uint8_t)b->n_formats };
		buf_add(out, nf, 2);
		buf_add(out, b->formats, 2 * (size_t)b->n_formats);
	}
	buf_add(out, n16, 2);
	for (uint16_t k = 0; k < n_params; k++) {
		size_t t;
		if (params[k] <= b->n_values) {
			const uint8_t *v = bind_value(b, (uint16_t)(params[k] - 1), &t);
			buf_add(out, v, t);
		} else {
			static const uint8_t null[4] = { 0xff, 0xff, 0xff, 0xff };   /* PostgreSQL refuses it as it would */
			buf_add(out, null, 4);
		}
	}
	buf_add(out, b->results, b->results_len);
	if (describe)
		fanout_put_msg(out, PqMsg_Describe, "P", 2, NULL, 0);
	fanout_put_msg(out, PqMsg_Execute, "\0\0\0\0", 5, NULL, 0);
	fanout_put_msg(out, PqMsg_Sync, NULL, 0, NULL, 0);
}

/* The client's INSERT request (m[0..len), whole) read again: its text,
 * parameter types and Bind. false: why says why not. */
struct insert_request {
	struct request r;
	const char *sql;
	const uint8_t *types;
	size_t types_len;
	struct bind_parts bp;
	struct shardkey_bind kb;
	bool describe;
};

static bool read_insert_request(struct client *c, const uint8_t *m, size_t lim, struct insert_request *q, char *why,
				size_t whylen)
{
	memset(q, 0, sizeof *q);
	char rwhy[200] = "";
	if (!m || !fanout_read_request(m, lim, &q->r, rwhy, sizeof rwhy)) {
		const char *reason = strchr(rwhy, ':');
		snprintf(why, whylen, "cross-shard write%s", reason ? reason : ": the request could not be read");
		return false;
	}
	struct request *r = &q->r;
	q->sql = r->query;
	if (!r->query) {
		bool stmt_describe = false;
		for (int i = 0; i < r->n_steps; i++)
			stmt_describe |= r->steps[i] == STEP_DESCRIBE_STMT;
		if (!r->has_execute || !r->has_sync || r->max_rows != 0 || stmt_describe) {
			snprintf(why, whylen, "cross-shard write: an INSERT whose rows go to several shards is split only as "
					      "Parse/Bind/Describe/Execute/Sync (or a simple Query)");
			return false;
		}
		if (r->parse && strcmp(r->parse_name, r->bind_stmt) == 0) {
			q->sql = r->parse_sql;
			q->types = r->parse_types;
			q->types_len = r->parse_types_len;
		} else if (!fanout_bound_statement(c, r->bind_stmt, &q->sql, &q->types, &q->types_len)) {
			snprintf(why, whylen, "cross-shard write: the prepared statement is not known to pgcat");
			return false;
		}
		if (!read_bind_parts(r->bind_rest, r->bind_rest_len, &q->bp) ||
		    !shardkey_param_types(q->types, q->types_len, &q->kb.types, &q->kb.n_types)) {
			snprintf(why, whylen, "cross-shard write: malformed Bind");
			return false;
		}
		q->kb.body = (const uint8_t *)r->bind_portal;
		q->kb.len = r->bind_len;
	}
	for (int i = 0; i < r->n_steps; i++)
		q->describe |= r->steps[i] == STEP_DESCRIBE_PORTAL;
	return true;
}

/* Each shard's part of the split: BEGIN and its rows; a shard without rows
 * (legs of every shard, after a position query) BEGIN only. */
static void insert_send_parts(struct fanout *fo, const struct insert_split *split, const struct insert_request *q)
{
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		int s = leg->shard;
		struct buf *out = fanout_leg_out(leg);
		leg->begin_pending = true;
		leg->ready_needed = split->sql[s] ? 2 : 1;
		fanout_put_msg(out, PqMsg_Query, "BEGIN", 6, NULL, 0);
		if (!split->sql[s])
			continue;
		if (q->r.query)
			fanout_put_msg(out, PqMsg_Query, split->sql[s], split->len[s] + 1, NULL, 0);
		else
			put_insert_part(out, split->sql[s], strlen(split->sql[s]), split->params[s], split->n_params[s],
					q->kb.types, q->kb.n_types, &q->bp, q->describe);
	}
}

enum fanout_start fanout_start_insert(struct client *c, const struct proto_frame *f, const struct router_rules *rules,
				      char *why, size_t whylen)
{
	struct pool *p = c->pool;
	const struct config_pool *cp = p->cpool;
	int n_shards = (int)cp->n_shards;
	struct buf *in = c->io.in;
	why[0] = '\0';
	(void)f;
	size_t have = buf_len(in);
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = buf_pullup(in, (size_t)lim);
	struct insert_request q;
	if (!read_insert_request(c, m, lim, &q, why, whylen)) {
		/* Parse/Describe only (asyncpg prepares first): nothing to split
		 * yet, any shard describes it; its Bind comes back here */
		if (!q.r.query && !q.r.has_bind && !q.r.has_execute && (q.r.has_sync || q.r.has_flush))
			return q.r.has_flush ? FANOUT_ANY_SHARD_FLUSH : FANOUT_ANY_SHARD;
		return FANOUT_REFUSED;
	}
	struct insert_split split;
	char swhy[MERGE_WHY];
	bool position = false;
	char posq[1024];
	if (!insert_split_build(q.sql, strlen(q.sql), rules, cp->sharding_function, n_shards, q.r.query ? NULL : &q.kb,
				&split, swhy)) {
		/* no column list: where the sharding column sits is asked of
		 * shard 0 first (as for COPY), then the rows are split */
		struct copy_route cr;
		memset(&cr, 0, sizeof cr);
		snprintf(cr.schema, sizeof cr.schema, "%s", split.schema);
		snprintf(cr.table, sizeof cr.table, "%s", split.table);
		snprintf(cr.column, sizeof cr.column, "%s", split.column);
		position = split.needs_position && copy_route_position_query(&cr, posq, sizeof posq);
		if (!position) {
			insert_split_free(&split);
			snprintf(why, whylen, "%s", swhy);
			return FANOUT_REFUSED;
		}
	}
	int n_legs = 0;
	for (int s = 0; s < n_shards; s++)
		n_legs += position || split.sql[s] != NULL;
	/* (a refused split holds no parts; its names are used below) */
	struct fanout *fo = fanout_new_write(c, FANOUT_INSERT, position ? PHASE_INSERT_POSITION : PHASE_RUN, n_legs,
					     fanout_insert_finish);
	if (!fo || (position && !(fo->req_copy = malloc(q.r.end)))) {
		if (fo)
			buf_free(fo->result);
		free(fo);
		insert_split_free(&split);
		snprintf(why, whylen, "cross-shard write: out of memory");
		return FANOUT_REFUSED;
	}
	fo->extended = q.r.query == NULL;
	memcpy(fo->steps, q.r.steps, sizeof q.r.steps);
	fo->n_steps = q.r.n_steps;
	if (position) {
		snprintf(fo->ins_schema, sizeof fo->ins_schema, "%s", split.schema);
		snprintf(fo->ins_table, sizeof fo->ins_table, "%s", split.table);
		snprintf(fo->ins_column, sizeof fo->ins_column, "%s", split.column);
	}
	if (q.r.parse && q.r.parse_name[0] && (fo->parse_msg = malloc(q.r.parse_total))) {
		memcpy(fo->parse_msg, q.r.parse, q.r.parse_total);
		fo->parse_len = q.r.parse_total;
	}
	if (position) {
		memcpy(fo->req_copy, m, q.r.end);
		fo->req_len = q.r.end;
	}
	int made = 0;
	for (int s = 0; s < n_shards && !why[0]; s++) {
		if (!position && !split.sql[s])
			continue;
		fo->n_legs = made + 1;
		if (!fanout_open_leg(fo, made, s, why, whylen))
			break;
		struct fanout_leg *leg = &fo->legs[made++];
		if (position) {
			/* every shard answers alike: each leg has something to wait for */
			leg->ready_needed = 1;
			fanout_put_msg(fanout_leg_out(leg), PqMsg_Query, posq, strlen(posq) + 1, NULL, 0);
		}
	}
	if (!position && !why[0])
		insert_send_parts(fo, &split, &q);
	insert_split_free(&split);
	if (why[0]) {
		fanout_free(fo);
		return FANOUT_REFUSED;
	}
	buf_drain(in, q.r.end);
	fanout_ev(c)->started(c, fo);
	fanout_send(fo);   /* each leg checks its server out */
	log_debug("C-%llu: INSERT split over %d shards%s", (unsigned long long)c->id, n_legs,
		  position ? " (asking where the sharding column is)" : "");
	return FANOUT_STARTED;
}

/* The request's rows are all on shard: nothing of it was sent anywhere
 * (only the position query ran): it goes back to the head of the
 * client's input as it came, and the session routes it there. */
static void insert_reroute(struct fanout *fo, int shard)
{
	struct client *c = fo->c;
	if (!io_in_prepend(&c->io, fo->req_copy, fo->req_len)) {
		fanout_free(fo);
		fanout_ev(c)->fatal(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	log_debug("C-%llu: the INSERT's rows are all on shard %d: routed there", (unsigned long long)c->id, shard);
	fanout_free(fo);
	fanout_ev(c)->rerouted(c, shard);
}

/* The position query's answers are in: the sharding column's place in the
 * table; the rows are split by it and sent. */
static void insert_positioned(struct fanout *fo)
{
	int position = -1;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		struct fanout_walk w;
		const uint8_t *msg;
		size_t total;
		fanout_walk_start(&w, leg);
		while (fanout_walk_next(&w, &msg, &total)) {
			if (msg[0] == PqMsg_ErrorResponse && !fo->error)
				fanout_keep_msg(&fo->error, &fo->error_len, msg, total);
			else if (msg[0] == PqMsg_DataRow && i == 0)
				fanout_first_int(msg, total, &position);
		}
		if ((leg->lost || leg->too_big) && !fo->error)
			fanout_set_error(fo, SQLSTATE_CONNECTION_FAILURE, "cross-shard write: a shard's connection was lost");
		fanout_walk_done(&w, leg);
	}
	if (!fo->error && position < 0)
		fanout_set_error(fo, "42703", "cross-shard write: the sharding column was not found in the table");
	struct insert_request q;
	struct insert_split split;
	char why[MERGE_WHY];
	const struct config_pool *cp = fo->c->pool->cpool;
	/* the rules: the one sharded table of the statement */
	struct router_table t = { .schema = fo->ins_schema[0] ? fo->ins_schema : NULL, .table = fo->ins_table, .column = fo->ins_column };
	struct router_rules rules = { .sharded = &t, .n_sharded = 1, .max_length = SIZE_MAX };
	if (!fo->error) {
		if (!read_insert_request(fo->c, fo->req_copy, fo->req_len, &q, why, sizeof why))
			fanout_set_error(fo, SQLSTATE_FEATURE_NOT_SUPPORTED, why);
		else if (!insert_split_build_at(q.sql, strlen(q.sql), &rules, cp->sharding_function, fo->n_legs,
						q.r.query ? NULL : &q.kb, position, &split, why))
			fanout_set_error(fo, SQLSTATE_FEATURE_NOT_SUPPORTED, why);
		else {
			int only = -1, parts = 0;
			for (int s = 0; s < fo->n_legs; s++)
				if (split.sql[s]) {
					parts++;
					only = s;
				}
			if (parts == 1) {
				/* every row on one shard: a keyed write, routed as
				 * one (in a transaction, it runs there like any
				 * other statement, not as a split write) */
				insert_split_free(&split);
				insert_reroute(fo, only);
				return;
			}
			fo->phase = PHASE_RUN;
			insert_send_parts(fo, &split, &q);
			insert_split_free(&split);
			fanout_begin_wait(fo);
			return;
		}
	}
	fanout_write_reply(fo);   /* nothing began anywhere: the error alone */
}

/* ---- a write run alike on every shard (default_shard = all) ---- */

enum fanout_start fanout_start_broadcast(struct client *c, const struct router_rules *rules, char *why,
					 size_t whylen)
{
	struct pool *p = c->pool;
	int n_shards = (int)p->cpool->n_shards;
	struct buf *in = c->io.in;
	why[0] = '\0';
	if (c->held_begin) {
		snprintf(why, whylen, "cross-shard write: a write that runs on every shard cannot run inside a transaction; "
				      "use SET SHARD or send it on its own");
		return FANOUT_REFUSED;
	}
	size_t have = buf_len(in);
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = buf_pullup(in, (size_t)lim);
	struct request r;
	char rwhy[200] = "";
	if (!m || !fanout_read_request(m, lim, &r, rwhy, sizeof rwhy)) {
		const char *reason = strchr(rwhy, ':');
		snprintf(why, whylen, "cross-shard write%s", reason ? reason : ": the request could not be read");
		return FANOUT_REFUSED;
	}
	const char *sql = r.query;
	const uint8_t *types = NULL;
	size_t types_len = 0;
	struct bind_parts bp = { 0 };
	struct shardkey_bind kb = { 0 };
	if (!r.query) {
		bool stmt_describe = false;
		for (int i = 0; i < r.n_steps; i++)
			stmt_describe |= r.steps[i] == STEP_DESCRIBE_STMT;
		if (!r.has_execute || !r.has_sync || r.max_rows != 0 || stmt_describe) {
			snprintf(why, whylen, "cross-shard write: a write that runs on every shard is sent only as "
					      "Parse/Bind/Describe/Execute/Sync (or a simple Query)");
			return FANOUT_REFUSED;
		}
		if (r.parse && strcmp(r.parse_name, r.bind_stmt) == 0) {
			sql = r.parse_sql;
			types = r.parse_types;
			types_len = r.parse_types_len;
		} else if (!fanout_bound_statement(c, r.bind_stmt, &sql, &types, &types_len)) {
			snprintf(why, whylen, "cross-shard write: the prepared statement is not known to pgcat");
			return FANOUT_REFUSED;
		}
		if (!read_bind_parts(r.bind_rest, r.bind_rest_len, &bp) ||
		    !shardkey_param_types(types, types_len, &kb.types, &kb.n_types)) {
			snprintf(why, whylen, "cross-shard write: malformed Bind");
			return FANOUT_REFUSED;
		}
	}
	bool outside_tx;
	char bwhy[MERGE_WHY];
	if (!broadcast_write_check(sql, strlen(sql), rules, &outside_tx, bwhy)) {
		snprintf(why, whylen, "%s", bwhy);
		return FANOUT_REFUSED;
	}
	/* every parameter, as numbered */
	uint16_t *all = NULL;
	if (!r.query && bp.n_values > 0) {
		all = malloc((size_t)bp.n_values * sizeof *all);
		if (!all) {
			snprintf(why, whylen, "cross-shard write: out of memory");
			return FANOUT_REFUSED;
		}
		for (uint16_t k = 0; k < bp.n_values; k++)
			all[k] = (uint16_t)(k + 1);
	}
	struct fanout *fo = fanout_new_write(c, FANOUT_BROADCAST, PHASE_RUN, n_shards,
					     fanout_insert_finish);
	if (!fo) {
		free(all);
		snprintf(why, whylen, "cross-shard write: out of memory");
		return FANOUT_REFUSED;
	}
	fo->extended = r.query == NULL;
	memcpy(fo->steps, r.steps, sizeof r.steps);
	fo->n_steps = r.n_steps;
	bool describe = false;
	for (int i = 0; i < r.n_steps; i++)
		describe |= r.steps[i] == STEP_DESCRIBE_PORTAL;
	if (r.parse && r.parse_name[0] && (fo->parse_msg = malloc(r.parse_total))) {
		memcpy(fo->parse_msg, r.parse, r.parse_total);
		fo->parse_len = r.parse_total;
	}
	for (int s = 0; s < n_shards && !why[0]; s++) {
		fo->n_legs = s + 1;
		if (!fanout_open_leg(fo, s, s, why, whylen))
			break;
		struct fanout_leg *leg = &fo->legs[s];
		struct buf *out = fanout_leg_out(leg);
		/* In a transaction on each shard, committed only once every shard
		 * succeeded; what PostgreSQL runs only outside one goes alone. */
		leg->ready_needed = outside_tx ? 1 : 2;
		leg->begin_pending = !outside_tx;
		if (!outside_tx)
			fanout_put_msg(out, PqMsg_Query, "BEGIN", 6, NULL, 0);
		if (r.query)
			fanout_put_msg(out, PqMsg_Query, r.query, strlen(r.query) + 1, NULL, 0);
		else
			put_insert_part(out, sql, strlen(sql), all, bp.n_values, kb.types, kb.n_types, &bp, describe);
	}
	free(all);
	if (why[0]) {
		fanout_free(fo);
		return FANOUT_REFUSED;
	}
	buf_drain(in, r.end);
	fanout_ev(c)->started(c, fo);
	fanout_send(fo);   /* each leg checks its server out */
	log_debug("C-%llu: write sent to all %d shards", (unsigned long long)c->id, n_shards);
	return FANOUT_STARTED;
}

/* ---- a split write parked inside the client's transaction ---- */

enum parked_end fanout_parked_try_end(struct client *c, const struct proto_frame *f)
{
	struct fanout *fo = c->xshard ? c->xshard->parked : NULL;
	if (!fo)
		return PARKED_END_NOT;
	struct buf *in = c->io.in;
	size_t have = buf_len(in), lim = have < 4096 ? have : 4096;
	const uint8_t *m = buf_pullup(in, (size_t)lim);
	const char *tag = NULL;
	size_t end = 0;
	uint8_t prefix[16];
	size_t prefix_len = 0;
	if (!m)
		return PARKED_END_NOT;
	if (f->type == PqMsg_Query && (size_t)f->len + 1 <= lim) {
		tag = sqllex_plain_end_tag((const char *)m + 5, strnlen((const char *)m + 5, f->len - 4));
		end = (size_t)f->len + 1;
	} else if (f->type == PqMsg_Parse || f->type == PqMsg_Bind) {
		/* pgjdbc: [Parse "COMMIT"], Bind, [Describe], Execute, Sync */
		size_t off = 0;
		bool other = false;
		const char *sql = NULL;
		while (lim - off >= 5) {
			uint8_t type = m[off];
			uint32_t l = proto_get_u32(m + off + 1);
			if (l < 4 || (size_t)l + 1 > lim - off)
				break;
			const uint8_t *body = m + off + 5;
			size_t blen = l - 4, b = 0;
			const char *s1, *s2;
			if (type == PqMsg_Parse && off == 0 && proto_read_cstring(body, blen, &b, &s1) &&
			    proto_read_cstring(body, blen, &b, &s2)) {
				sql = s2;
				proto_put_bodyless(prefix + prefix_len, PqMsg_ParseComplete);
				prefix_len += PROTO_BODYLESS_LEN;
			} else if (type == PqMsg_Bind && prefix_len <= 5 && proto_read_cstring(body, blen, &b, &s1) &&
				   proto_read_cstring(body, blen, &b, &s2)) {
				const uint8_t *key;
				size_t keylen;
				if (!sql && prep_client_statement(c, s2, &key, &keylen))
					sql = (const char *)key;
				proto_put_bodyless(prefix + prefix_len, PqMsg_BindComplete);
				prefix_len += PROTO_BODYLESS_LEN;
			} else if (type == PqMsg_Describe && prefix_len >= 5 && prefix_len <= 10) {
				proto_put_bodyless(prefix + prefix_len, PqMsg_NoData);
				prefix_len += PROTO_BODYLESS_LEN;
			} else if (type == PqMsg_Execute && sql) {
				/* (its CommandComplete is the end's) */
			} else if (type == PqMsg_Sync && sql) {
				tag = sqllex_plain_end_tag(sql, strlen(sql));
				end = off + (size_t)l + 1;
				break;
			} else {
				other = true;   /* not COMMIT's shape (asyncpg's Parse, Describe, Flush...) */
				break;
			}
			if (sql && !sqllex_plain_end_tag(sql, strlen(sql))) {
				other = true;   /* another statement: no need to wait for its Sync */
				break;
			}
			off += (size_t)l + 1;
		}
		if (!end && !other && lim == have && have < 4096)
			return PARKED_END_WAIT;   /* the rest of the request first (consumed nothing) */
	}
	if (!tag)
		return PARKED_END_NOT;
	buf_drain(in, end);
	c->xshard->parked = NULL;
	fo->parked = false;
	snprintf(fo->end_tag, sizeof fo->end_tag, "%s", tag);
	memcpy(fo->end_prefix, prefix, prefix_len);
	fo->end_prefix_len = prefix_len;
	fo->rollback = strcmp(tag, "COMMIT") != 0;
	for (int i = 0; i < fo->n_legs; i++)
		if (fo->legs[i].fo && (fo->legs[i].lost || !fo->legs[i].io_open)) {   /* (a leg never opened is no shard of it) */
			/* a shard lost meanwhile: none commits */
			fanout_set_error(fo, SQLSTATE_CONNECTION_FAILURE,
				  "cross-shard transaction: a shard's connection was lost; the transaction is rolled back");
			fo->rollback = true;
		}
	fanout_ev(c)->started(c, fo);
	fanout_write_end(fo);
	return PARKED_END_DONE;
}

bool fanout_parked_message(struct client *c, const struct proto_frame *f)
{
	switch (fanout_parked_try_end(c, f)) {
	case PARKED_END_DONE:
	case PARKED_END_WAIT:
		return true;
	case PARKED_END_NOT:
		break;
	}
	struct fanout *fo = c->xshard ? c->xshard->parked : NULL;
	if (!fo)
		return false;
	/* Anything else would run without the rows the shards hold in
	 * their open transactions: they roll back (the legs close), and
	 * the transaction fails here as it would on a server. */
	c->xshard->parked = NULL;
	fanout_free(fo);
	fanout_ev(c)->tx_failed(c, SQLSTATE_FEATURE_NOT_SUPPORTED,
				"cross-shard transaction: after a write split across shards only COMMIT or ROLLBACK can "
				"follow in its transaction (the write is rolled back)");
	return false;   /* the message is answered as in a failed transaction */
}

void fanout_parked_abort(struct client *c)
{
	struct fanout *fo = c->xshard ? c->xshard->parked : NULL;
	if (!fo)
		return;
	c->xshard->parked = NULL;
	fanout_free(fo);
}

/* ---- a batch's answer (fanout_park's and fanout_batch_finish's) ---- */

/* A batch's answer: each Bind's replies in the client's order. */
void fanout_batch_put_result(struct fanout *fo, struct buf *out)
{
	struct client *c = fo->c;
	bool parsed = true;
	for (int i = 0; i < fo->n_legs; i++)
		parsed &= fo->legs[i].parsed;
	if (fo->batch_parse && parsed) {
		buf_add_bodyless(out, PqMsg_ParseComplete);
		/* the client's named statement exists, whatever its Binds did */
		if (fo->parse_msg && prep_enabled(c))
			(void)prep_client_adopt(c, fo->parse_msg, fo->parse_len);
	}
	/* each Bind's replies in the client's order, up to the first that a
	 * shard did not complete: there its error */
	const uint8_t *error = fo->error;
	size_t error_len = fo->error_len;
	uint32_t *taken = calloc((size_t)fo->n_legs, sizeof *taken);
	for (uint32_t k = 0; taken && k < fo->n_batch; k++) {
		struct fanout_leg *leg = &fo->legs[fo->batch_leg[k]];
		/* a Parse before every Bind: its ParseComplete before the Bind's
		 * replies, or before the error of a Bind that failed (the same
		 * text parsed, so its Parse did not) */
		if (k > 0 && fo->batch_parse_each && parsed)
			buf_add_bodyless(out, PqMsg_ParseComplete);
		if (fo->batch_idx[k] >= leg->n_units) {
			if (leg->error) {
				error = leg->error;
				error_len = leg->error_len;
			}
			break;
		}
		buf_move_to(leg->rows, out, leg->unit_len[fo->batch_idx[k]]);
		taken[fo->batch_leg[k]]++;
	}
	free(taken);
	if (error)
		buf_add(out, error, error_len);
}
