/* SPDX-License-Identifier: MIT */
/*
 * fanout_batch: one statement bound many times (include/fanout.h,
 * fanout_start_batch): each Bind run on its key's shard, in a transaction
 * per shard ended by fanout_write.c's, the replies given back in the
 * client's order. The legs are fanout.c's.
 */
#include "fanout.h"
#include "fanout_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "proto.h"
#include "router.h"
#include "shardkey.h"
#include "context.h"

/* ---- one statement bound many times: each Bind on its shard ---- */

/* psycopg's and asyncpg's executemany and pgjdbc's executeBatch send one
 * request: [Parse], then (Bind, [Describe portal], Execute) for every set
 * of parameters, then Sync. psycopg without prepared statements
 * (prepare_threshold = None) parses the unnamed statement again before
 * every Bind, the same text each time: one statement all the same. Each Bind has its own key: the Binds are
 * grouped by shard, each shard runs its group in a transaction (BEGIN,
 * Parse, its Binds, Sync), and every shard commits only when all of them
 * succeeded, as the request would have in one PostgreSQL. The client gets
 * each Bind's replies in its own order. */

#define BATCH_MAX_BINDS 65535

/* What the request at the head of the input looks like, read once. */
struct batch_shape {
	const char *name, *sql;       /* the statement's name; its text, if its Parse is here */
	const uint8_t *types, *parse; /* the Parse's parameter types, and the Parse (NULL: none) */
	size_t types_len, parse_total;
	size_t off;                   /* how far it was read */
	size_t end;                   /* the batch's length, its Sync included */
	uint32_t n_binds, cap, *bind_off;   /* where each Bind starts (malloc'd) */
	bool describe;                /* each Bind has its Describe 'P' */
	uint32_t n_parses;            /* Parses read: 1, or one before every Bind */
	bool last_flush;              /* the last message read is a Flush */
};

enum batch_scan {
	BATCH_NOT,       /* not a batch (or a malformed one: the pump refuses it) */
	BATCH_PARTIAL,   /* a batch so far, its Sync not read yet */
	BATCH_WHOLE      /* a batch up to its Sync */
};

/* A Bind at off (of length l) with its [Describe 'P' ""] and Execute "":
 * recorded in bs. false with *partial: the rest is not here yet; false
 * alone: not a batch's Bind. */
static bool scan_bind(const uint8_t *m, size_t lim, size_t off, uint32_t l, struct batch_shape *bs, bool *partial)
{
	const uint8_t *body = m + off + 5;
	size_t blen = l - 4, b = 0;
	const char *s1, *s2;
	*partial = false;
	if (!proto_read_cstring(body, blen, &b, &s1) || !proto_read_cstring(body, blen, &b, &s2) || s1[0] ||
	    (bs->name && strcmp(s2, bs->name) != 0))
		return false;
	if (!bs->name)
		bs->name = s2;
	/* then [Describe P ""], Execute "" (any row limit: pgjdbc asks 1 of an INSERT) */
	size_t o2 = off + (size_t)l + 1, need = o2 + 10 + (bs->n_binds == 0 || bs->describe ? 7 : 0);
	if (lim < need && lim - o2 < 5) {
		*partial = true;
		return false;
	}
	bool d = m[o2] == PqMsg_Describe;
	if (bs->n_binds > 0 && d != bs->describe)
		return false;
	if (d) {
		if (lim - o2 < 7) {
			*partial = true;
			return false;
		}
		if (proto_get_u32(m + o2 + 1) != 6 || m[o2 + 5] != 'P' || m[o2 + 6] != 0)
			return false;
		o2 += 7;
	}
	if (lim - o2 < 10) {
		*partial = true;
		return false;
	}
	if (m[o2] != PqMsg_Execute || proto_get_u32(m + o2 + 1) != 9 || m[o2 + 5] != 0)
		return false;
	bs->describe = d;
	if (bs->n_binds == BATCH_MAX_BINDS)
		return false;
	if (bs->n_binds == bs->cap) {
		uint32_t ncap = bs->cap ? bs->cap * 2 : 64;
		uint32_t *nb = realloc(bs->bind_off, ncap * sizeof *nb);
		if (!nb)
			return false;
		bs->bind_off = nb;
		bs->cap = ncap;
	}
	bs->bind_off[bs->n_binds++] = (uint32_t)off;
	bs->off = o2 + 10;
	return true;
}

/* The shape, first: [Parse], (Bind, [Describe], Execute)..., Sync; Flush
 * may come between (psycopg sends its Binds, Flush, then Sync); anything
 * else is not a batch. */
static enum batch_scan scan_batch(const uint8_t *m, size_t lim, struct batch_shape *bs)
{
	for (;;) {
		size_t off = bs->off;
		if (lim - off < 5)
			return BATCH_PARTIAL;
		uint8_t type = m[off];
		uint32_t l = proto_get_u32(m + off + 1);
		if (l < 4)
			return BATCH_NOT;
		if ((size_t)l + 1 > lim - off)
			return BATCH_PARTIAL;
		const uint8_t *body = m + off + 5;
		size_t blen = l - 4, b = 0;
		const char *s1, *s2;
		bs->last_flush = type == PqMsg_Flush;
		if (type == PqMsg_Parse && off == 0) {
			if (!proto_read_cstring(body, blen, &b, &s1) || !proto_read_cstring(body, blen, &b, &s2) || blen - b < 2)
				return BATCH_NOT;
			bs->name = s1;
			bs->sql = s2;
			bs->types = body + b;
			bs->types_len = blen - b;
			bs->parse = m;
			bs->parse_total = (size_t)l + 1;
			bs->n_parses = 1;
		} else if (type == PqMsg_Parse) {
			/* the unnamed statement parsed again, as before: only right
			 * before its Bind, one Parse per Bind */
			if (!bs->parse || bs->name[0] || bs->n_parses != bs->n_binds || !proto_read_cstring(body, blen, &b, &s1) ||
			    !proto_read_cstring(body, blen, &b, &s2) || s1[0] || strcmp(s2, bs->sql) != 0 ||
			    blen - b != bs->types_len || memcmp(body + b, bs->types, bs->types_len) != 0)
				return BATCH_NOT;
			bs->n_parses++;
		} else if (type == PqMsg_Bind) {
			if (bs->n_parses > 1 && bs->n_parses != bs->n_binds + 1)
				return BATCH_NOT;   /* a Parse before every Bind, or only the first */
			bool partial;
			if (scan_bind(m, lim, off, l, bs, &partial))
				continue;   /* (bs->off is past its Execute) */
			return partial ? BATCH_PARTIAL : BATCH_NOT;
		} else if (type == PqMsg_Flush && off > 0) {
			/* nothing to flush before the whole batch is answered */
		} else if (type == PqMsg_Sync && bs->n_binds > 0) {
			if (bs->n_parses > 1 && bs->n_parses != bs->n_binds)
				return BATCH_NOT;
			bs->end = off + 5;
			return BATCH_WHOLE;
		} else {
			return BATCH_NOT;
		}
		bs->off = off + (size_t)l + 1;
	}
}

/* A batch so far: the rest (up to its Sync) before deciding. But a client
 * may wait for the results of its Flush before sending Sync (psycopg's
 * executemany with returning=True): if nothing comes for a while after
 * the Flush, refuse instead of hanging. */
static enum fanout_start batch_partial(struct client *c, const struct batch_shape *bs, size_t have, size_t lim,
				       char *why, size_t whylen)
{
	if (bs->n_binds < 2)
		return FANOUT_ANY_SHARD;
	bool flushed = bs->last_flush && bs->off == lim;
	if (lim == have && flushed && c->xshard && c->xshard->batch_no_wait) {
		snprintf(why, whylen, "cross-shard write: a batch whose results are awaited before its Sync (psycopg's "
				      "executemany with returning=True) cannot be split by shard; send it without "
				      "returning, or one statement at a time");
		return FANOUT_REFUSED;
	}
	if (lim == have) {
		client_read_limit(c, FANOUT_REQUEST_MAX);
		struct client_xshard *xs = flushed ? fanout_xshard(c) : NULL;
		if (xs && !xs->batch_wait_since_us) {
			xs->batch_wait_since_us = c->w->now_us;
			c->w->batch_waiters = true;
		}
		return FANOUT_WAIT;
	}
	snprintf(why, whylen, "cross-shard write: a batch for several shards is split up to 1 MB before its Sync; "
			      "send it in smaller parts");
	return FANOUT_REFUSED;
}

/* Each Bind's shard (leg_of), its rank among its shard's (idx), and the
 * Binds per shard. false: a Bind without a key (*why says so). */
static bool batch_shards(struct client *c, const struct router_verdict *v, const uint8_t *m,
			 const struct batch_shape *bs, struct shardkey_bind *kb, uint16_t *leg_of, uint32_t *idx,
			 uint32_t *per_shard, char *why, size_t whylen)
{
	const struct config_pool *cp = c->pool->cpool;
	int n_shards = (int)cp->n_shards;
	for (uint32_t k = 0; k < bs->n_binds; k++) {
		uint32_t l = proto_get_u32(m + bs->bind_off[k] + 1);
		kb->body = m + bs->bind_off[k] + 5;
		kb->len = l - 4;
		struct shardkey_result res;
		shardkey_resolve(v, cp->sharding_function, n_shards, kb, 1, &res);
		if (res.outcome != SHARDKEY_ONE || res.shard < 0 || res.shard >= n_shards) {
			snprintf(why, whylen, "cross-shard write: a batch whose statements go to several shards is split only when "
					      "each one has its sharding key; statement %u has none", k + 1);
			return false;
		}
		leg_of[k] = (uint16_t)res.shard;   /* a shard for now: legs later */
		idx[k] = per_shard[res.shard]++;
	}
	return true;
}

/* A shard's leg's request: BEGIN, the statement unnamed, each of its
 * Binds as the client sent it, Sync. */
static void batch_fill_leg(struct buf *out, const uint8_t *m, const struct batch_shape *bs,
			   const uint16_t *leg_of, int shard, size_t sql_len)
{
	fanout_put_msg(out, PqMsg_Query, "BEGIN", 6, NULL, 0);
	fanout_put_unnamed_parse(out, bs->sql, sql_len, bs->types, bs->types_len);
	for (uint32_t k = 0; k < bs->n_binds; k++) {
		if (leg_of[k] != (uint16_t)shard)
			continue;
		size_t bo = bs->bind_off[k], b = 0;
		uint32_t l = proto_get_u32(m + bo + 1);
		const char *portal, *stmt;
		const uint8_t *body = m + bo + 5;
		(void)proto_read_cstring(body, l - 4, &b, &portal);
		(void)proto_read_cstring(body, l - 4, &b, &stmt);
		const uint8_t *ex = m + bo + (size_t)l + 1 + (bs->describe ? 7 : 0);
		fanout_put_msg(out, PqMsg_Bind, "\0", 2, body + b, l - 4 - b);
		if (bs->describe)
			fanout_put_msg(out, PqMsg_Describe, "P", 2, NULL, 0);
		fanout_put_msg(out, PqMsg_Execute, ex + 5, 5, NULL, 0);   /* "" and the client's row limit */
	}
	fanout_put_msg(out, PqMsg_Sync, NULL, 0, NULL, 0);
}

/* The fan-out of a whole batch (at m, bs->end bytes of the input): its
 * legs opened and filled, the batch taken from the input. */
static enum fanout_start batch_split(struct client *c, const struct router_rules *rules, const uint8_t *m,
				     struct batch_shape *bs, char *why, size_t whylen)
{
	int n_shards = (int)c->pool->cpool->n_shards;
	if (!bs->parse && !fanout_bound_statement(c, bs->name, &bs->sql, &bs->types, &bs->types_len)) {
		snprintf(why, whylen, "cross-shard write: the prepared statement is not known to pgcat");
		return FANOUT_REFUSED;
	}
	struct router_verdict v;
	struct shardkey_bind kb = { 0 };
	router_classify(bs->sql, strlen(bs->sql), rules, &v);
	if (!shardkey_param_types(bs->types, bs->types_len, &kb.types, &kb.n_types)) {
		snprintf(why, whylen, "cross-shard write: malformed Parse");
		return FANOUT_REFUSED;
	}
	if (!v.parsed || v.multi_statement || v.begins || v.ends) {
		snprintf(why, whylen, "cross-shard write: this batch cannot be split by shard");
		return FANOUT_REFUSED;
	}
	uint16_t *leg_of = calloc(bs->n_binds, sizeof *leg_of);
	uint32_t *idx = calloc(bs->n_binds, sizeof *idx);
	uint32_t per_shard[MERGE_MAX_SHARDS] = { 0 };
	int leg_index[MERGE_MAX_SHARDS];
	if (!leg_of || !idx || n_shards > MERGE_MAX_SHARDS) {
		free(leg_of);
		free(idx);
		snprintf(why, whylen, "cross-shard write: out of memory");
		return FANOUT_REFUSED;
	}
	if (!batch_shards(c, &v, m, bs, &kb, leg_of, idx, per_shard, why, whylen)) {
		free(leg_of);
		free(idx);
		return FANOUT_REFUSED;
	}
	int n_legs = 0;
	for (int s = 0; s < n_shards; s++)
		leg_index[s] = per_shard[s] ? n_legs++ : -1;
	struct fanout *fo = fanout_new_write(c, FANOUT_BATCH, PHASE_RUN, n_legs, fanout_batch_finish);
	if (!fo) {
		free(leg_of);
		free(idx);
		snprintf(why, whylen, "cross-shard write: out of memory");
		return FANOUT_REFUSED;
	}
	fo->extended = true;
	fo->batch_leg = leg_of;   /* (the fan-out owns them from here) */
	fo->batch_idx = idx;
	fo->n_batch = bs->n_binds;
	fo->batch_parse = bs->parse != NULL;
	fo->batch_parse_each = bs->n_parses > 1;
	if (bs->parse && bs->name[0] && (fo->parse_msg = malloc(bs->parse_total))) {
		memcpy(fo->parse_msg, bs->parse, bs->parse_total);
		fo->parse_len = (uint32_t)bs->parse_total;
	}
	size_t sql_len = strlen(bs->sql);
	for (int s = 0; s < n_shards && !why[0]; s++) {
		int li = leg_index[s];
		if (li < 0)
			continue;
		fo->n_legs = li + 1;
		if (!fanout_open_leg(fo, li, s, why, whylen))
			break;
		struct fanout_leg *leg = &fo->legs[li];
		if (!(leg->rows = buf_new(BUF_SMALL)) || !(leg->unit_len = calloc(per_shard[s], sizeof *leg->unit_len))) {
			snprintf(why, whylen, "cross-shard write: out of memory");
			break;
		}
		leg->cap_units = per_shard[s];
		leg->ready_needed = 2;
		leg->begin_pending = true;
		batch_fill_leg(fanout_leg_out(leg), m, bs, leg_of, s, sql_len);
	}
	for (uint32_t k = 0; k < bs->n_binds; k++)
		leg_of[k] = (uint16_t)leg_index[leg_of[k]];
	if (why[0]) {
		fanout_free(fo);
		return FANOUT_REFUSED;
	}
	buf_drain(c->io.in, bs->end);
	fanout_ev(c)->started(c, fo);
	fanout_send(fo);   /* each leg checks its server out */
	log_debug("C-%llu: a batch of %u statements split over %d shards", (unsigned long long)c->id, bs->n_binds,
		  n_legs);
	return FANOUT_STARTED;
}

enum fanout_start fanout_start_batch(struct client *c, const struct router_rules *rules, char *why, size_t whylen)
{
	struct buf *in = c->io.in;
	why[0] = '\0';
	size_t have = buf_len(in);
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = buf_pullup(in, (size_t)lim);
	if (!m || lim < 5 || (m[0] != PqMsg_Parse && m[0] != PqMsg_Bind))
		return FANOUT_ANY_SHARD;
	struct batch_shape bs;
	memset(&bs, 0, sizeof bs);
	enum fanout_start verdict = FANOUT_ANY_SHARD;
	switch (scan_batch(m, lim, &bs)) {
	case BATCH_NOT:
		break;
	case BATCH_PARTIAL:
		verdict = batch_partial(c, &bs, have, lim, why, whylen);
		break;
	case BATCH_WHOLE:
		if (bs.n_binds >= 2)
			verdict = batch_split(c, rules, m, &bs, why, whylen);
		break;
	}
	free(bs.bind_off);
	if (verdict != FANOUT_WAIT && c->xshard) {
		c->xshard->batch_wait_since_us = 0;
		c->xshard->batch_no_wait = false;
	}
	return verdict;
}

/* A shard's replies to its Binds: one unit each, from BindComplete to
 * CommandComplete; its error, if any. */
static void batch_take_reply(struct fanout *fo, struct fanout_leg *leg)
{
	struct fanout_walk w;
	const uint8_t *msg, *unit_start = NULL;
	size_t total;
	fanout_walk_start(&w, leg);
	while (fanout_walk_next(&w, &msg, &total)) {
		uint8_t type = msg[0];
		if (type == PqMsg_ErrorResponse) {
			fanout_keep_msg(&leg->error, &leg->error_len, msg, total);
			fanout_keep_msg(&fo->error, &fo->error_len, msg, total);
			unit_start = NULL;
		} else if (type == PqMsg_CommandComplete && leg->begin_pending) {
			leg->begin_pending = false;   /* BEGIN's */
		} else if (type == PqMsg_ParseComplete) {
			leg->parsed = true;
		} else if (type == PqMsg_BindComplete) {
			unit_start = msg;
		} else if (unit_start && (type == PqMsg_CommandComplete || type == PqMsg_EmptyQueryResponse ||
					  type == PqMsg_PortalSuspended)) {
			size_t unit_len = (size_t)(msg + total - unit_start);
			if (leg->n_units < leg->cap_units) {
				buf_add(leg->rows, unit_start, unit_len);
				leg->unit_len[leg->n_units++] = unit_len;
			}
			unit_start = NULL;
		}
	}
	if ((leg->lost || leg->too_big) && !leg->error) {
		fanout_keep_leg_failure(leg, &leg->error, &leg->error_len);
		if (leg->error)
			fanout_keep_msg(&fo->error, &fo->error_len, leg->error, leg->error_len);
	}
	fanout_walk_done(&w, leg);
}

void fanout_batch_finish(struct fanout *fo)
{
	if (fo->phase != PHASE_END) {
		for (int i = 0; i < fo->n_legs; i++)
			batch_take_reply(fo, &fo->legs[i]);
		if (!fanout_park(fo))
			fanout_write_end(fo);   /* every shard took its statements, or none keeps them */
		return;
	}
	bool failed_before = fo->error != NULL;
	for (int i = 0; i < fo->n_legs; i++)
		fanout_insert_take_reply(fo, &fo->legs[i]);   /* COMMIT's or ROLLBACK's errors */
	if (!failed_before && fo->error)
		log_warning("C-%llu: a cross-shard batch failed at COMMIT on a shard; the other shards committed",
			    (unsigned long long)fo->c->id);
	if (fo->end_tag[0]) {
		fanout_write_end_reply(fo);
		return;
	}
	struct client *c = fo->c;
	struct buf *out = io_out(&c->io);
	fanout_batch_put_result(fo, out);
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, (uint8_t)(c->held_begin ? 'T' : 'I') };
	buf_add(out, z, sizeof z);
	fanout_free(fo);
	fanout_ev(c)->answered(c);
}
