/* SPDX-License-Identifier: MIT */
/*
 * fanout_batch: one statement bound many times (include/fanout.h,
 * fanout_start_batch): each Bind run on its key's shard, in a transaction
 * per shard ended by fanout_write.c's, the replies given back in the
 * client's order. The legs are fanout.c's.
 */
#include "fanout.h"
#include "fanout_internal.h"

#include <event2/buffer.h>
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
 * of parameters, then Sync. Each Bind has its own key: the Binds are
 * grouped by shard, each shard runs its group in a transaction (BEGIN,
 * Parse, its Binds, Sync), and every shard commits only when all of them
 * succeeded, as the request would have in one PostgreSQL. The client gets
 * each Bind's replies in its own order. */

#define BATCH_MAX_BINDS 65535

enum fanout_start fanout_start_batch(struct client *c, const struct router_rules *rules, char *why, size_t whylen)
{
	struct pool *p = c->pool;
	const struct config_pool *cp = p->cpool;
	int n_shards = (int)cp->n_shards;
	struct evbuffer *in = c->io.in;
	why[0] = '\0';
	size_t have = evbuffer_get_length(in);
	size_t lim = have < FANOUT_REQUEST_MAX ? have : FANOUT_REQUEST_MAX;
	const uint8_t *m = evbuffer_pullup(in, (ev_ssize_t)lim);
	if (!m || lim < 5 || (m[0] != PqMsg_Parse && m[0] != PqMsg_Bind))
		return FANOUT_ANY_SHARD;
	/* the shape, first: anything else is not a batch. Flush may come
	 * between (psycopg sends its Binds, Flush, then Sync). */
	const char *name = NULL, *sql = NULL;
	const uint8_t *types = NULL, *parse = NULL;
	size_t types_len = 0, parse_total = 0, off = 0, end = 0;
	uint32_t n_binds = 0, cap = 0, *bind_off = NULL;
	bool describe = false, complete = true, last_flush = false;
	enum fanout_start verdict = FANOUT_ANY_SHARD;
	while (!end) {
		if (lim - off < 5) {
			complete = false;
			break;
		}
		uint8_t type = m[off];
		uint32_t l = proto_get_u32(m + off + 1);
		if (l < 4)
			goto out;
		if ((size_t)l + 1 > lim - off) {
			complete = false;
			break;
		}
		const uint8_t *body = m + off + 5;
		size_t blen = l - 4, b = 0;
		const char *s1, *s2;
		last_flush = type == PqMsg_Flush;
		if (type == PqMsg_Parse && off == 0) {
			if (!proto_read_cstring(body, blen, &b, &s1) || !proto_read_cstring(body, blen, &b, &s2) || blen - b < 2)
				goto out;
			name = s1;
			sql = s2;
			types = body + b;
			types_len = blen - b;
			parse = m;
			parse_total = (size_t)l + 1;
		} else if (type == PqMsg_Bind) {
			if (!proto_read_cstring(body, blen, &b, &s1) || !proto_read_cstring(body, blen, &b, &s2) || s1[0] ||
			    (name && strcmp(s2, name) != 0))
				goto out;
			if (!name)
				name = s2;
			/* then [Describe P ""], Execute "" (any row limit: pgjdbc asks 1 of an INSERT) */
			size_t o2 = off + (size_t)l + 1, need = o2 + 10 + (n_binds == 0 || describe ? 7 : 0);
			if (lim < need && lim - o2 < 5) {
				complete = false;
				break;
			}
			bool d = m[o2] == PqMsg_Describe;
			if (n_binds > 0 && d != describe)
				goto out;
			if (d) {
				if (lim - o2 < 7) {
					complete = false;
					break;
				}
				if (proto_get_u32(m + o2 + 1) != 6 || m[o2 + 5] != 'P' || m[o2 + 6] != 0)
					goto out;
				o2 += 7;
			}
			if (lim - o2 < 10) {
				complete = false;
				break;
			}
			if (m[o2] != PqMsg_Execute || proto_get_u32(m + o2 + 1) != 9 || m[o2 + 5] != 0)
				goto out;
			describe = d;
			if (n_binds == BATCH_MAX_BINDS)
				goto out;
			if (n_binds == cap) {
				uint32_t ncap = cap ? cap * 2 : 64;
				uint32_t *nb = realloc(bind_off, ncap * sizeof *nb);
				if (!nb)
					goto out;
				bind_off = nb;
				cap = ncap;
			}
			bind_off[n_binds++] = (uint32_t)off;
			off = o2 + 10;
			continue;
		} else if (type == PqMsg_Flush && off > 0) {
			/* nothing to flush before the whole batch is answered */
		} else if (type == PqMsg_Sync && n_binds > 0) {
			end = off + 5;
			break;
		} else {
			goto out;
		}
		off += (size_t)l + 1;
	}
	if (!complete) {
		/* a batch so far: the rest (up to its Sync) before deciding. But
		 * a client may wait for the results of its Flush before sending
		 * Sync (psycopg's executemany with returning=True): if nothing
		 * comes for a while after the Flush, refuse instead of hanging. */
		bool flushed = last_flush && off == lim;
		if (n_binds >= 2 && lim == have && flushed && c->xshard && c->xshard->batch_no_wait) {
			snprintf(why, whylen, "cross-shard write: a batch whose results are awaited before its Sync (psycopg's "
					      "executemany with returning=True) cannot be split by shard; send it without "
					      "returning, or one statement at a time");
			verdict = FANOUT_REFUSED;
		} else if (n_binds >= 2 && lim == have) {
			client_read_limit(c, FANOUT_REQUEST_MAX);
			struct client_xshard *xs = flushed ? fanout_xshard(c) : NULL;
			if (xs && !xs->batch_wait_since_us) {
				xs->batch_wait_since_us = c->w->now_us;
				c->w->batch_waiters = true;
			}
			verdict = FANOUT_WAIT;
		} else if (n_binds >= 2) {
			snprintf(why, whylen, "cross-shard write: a batch for several shards is split up to 1 MB before its Sync; "
					      "send it in smaller parts");
			verdict = FANOUT_REFUSED;
		}
		goto out;
	}
	if (n_binds < 2)
		goto out;
	verdict = FANOUT_REFUSED;
	if (!parse && !fanout_bound_statement(c, name, &sql, &types, &types_len)) {
		snprintf(why, whylen, "cross-shard write: the prepared statement is not known to pgcat");
		goto out;
	}
	struct router_verdict v;
	struct shardkey_bind kb = { 0 };
	router_classify(sql, strlen(sql), rules, &v);
	if (!shardkey_param_types(types, types_len, &kb.types, &kb.n_types)) {
		snprintf(why, whylen, "cross-shard write: malformed Parse");
		goto out;
	}
	if (!v.parsed || v.multi_statement || v.begins || v.ends) {
		snprintf(why, whylen, "cross-shard write: this batch cannot be split by shard");
		goto out;
	}
	/* each Bind's shard */
	uint16_t *leg_of = calloc(n_binds, sizeof *leg_of);
	uint32_t *idx = calloc(n_binds, sizeof *idx);
	uint32_t per_shard[MERGE_MAX_SHARDS] = { 0 };
	int leg_index[MERGE_MAX_SHARDS];
	if (!leg_of || !idx || n_shards > MERGE_MAX_SHARDS) {
		free(leg_of);
		free(idx);
		snprintf(why, whylen, "cross-shard write: out of memory");
		goto out;
	}
	for (uint32_t k = 0; k < n_binds; k++) {
		uint32_t l = proto_get_u32(m + bind_off[k] + 1);
		kb.body = m + bind_off[k] + 5;
		kb.len = l - 4;
		struct shardkey_result res;
		shardkey_resolve(&v, cp->sharding_function, n_shards, &kb, 1, &res);
		if (res.outcome != SHARDKEY_ONE || res.shard < 0 || res.shard >= n_shards) {
			free(leg_of);
			free(idx);
			snprintf(why, whylen, "cross-shard write: a batch whose statements go to several shards is split only when "
					      "each one has its sharding key; statement %u has none", k + 1);
			goto out;
		}
		leg_of[k] = (uint16_t)res.shard;   /* a shard for now: legs below */
		idx[k] = per_shard[res.shard]++;
	}
	int n_legs = 0;
	for (int s = 0; s < n_shards; s++)
		leg_index[s] = per_shard[s] ? n_legs++ : -1;
	struct fanout *fo = fanout_new_write(c, FANOUT_BATCH, PHASE_RUN, n_legs,
					     fanout_batch_finish);
	if (!fo) {
		free(leg_of);
		free(idx);
		snprintf(why, whylen, "cross-shard write: out of memory");
		goto out;
	}
	fo->extended = true;
	fo->batch_leg = leg_of;
	fo->batch_idx = idx;
	fo->n_batch = n_binds;
	fo->batch_parse = parse != NULL;
	if (parse && name[0] && (fo->parse_msg = malloc(parse_total))) {
		memcpy(fo->parse_msg, parse, parse_total);
		fo->parse_len = (uint32_t)parse_total;
	}
	size_t sql_len = strlen(sql);
	for (int s = 0; s < n_shards && !why[0]; s++) {
		int li = leg_index[s];
		if (li < 0)
			continue;
		fo->n_legs = li + 1;
		if (!fanout_open_leg(fo, li, s, why, whylen))
			break;
		struct fanout_leg *leg = &fo->legs[li];
		if (!(leg->rows = evbuffer_new()) || !(leg->unit_len = calloc(per_shard[s], sizeof *leg->unit_len))) {
			snprintf(why, whylen, "cross-shard write: out of memory");
			break;
		}
		leg->cap_units = per_shard[s];
		leg->ready_needed = 2;
		leg->begin_pending = true;
		struct evbuffer *out = fanout_leg_out(leg);
		fanout_put_msg(out, PqMsg_Query, "BEGIN", 6, NULL, 0);
		/* the statement unnamed; each of this shard's Binds as the client sent it */
		fanout_put_unnamed_parse(out, sql, sql_len, types, types_len);
		for (uint32_t k = 0; k < n_binds; k++) {
			if (leg_of[k] != (uint16_t)s)
				continue;
			size_t bo = bind_off[k], b = 0;
			uint32_t l = proto_get_u32(m + bo + 1);
			const char *portal, *stmt;
			const uint8_t *body = m + bo + 5;
			(void)proto_read_cstring(body, l - 4, &b, &portal);
			(void)proto_read_cstring(body, l - 4, &b, &stmt);
			const uint8_t *ex = m + bo + (size_t)l + 1 + (describe ? 7 : 0);
			fanout_put_msg(out, PqMsg_Bind, "\0", 2, body + b, l - 4 - b);
			if (describe)
				fanout_put_msg(out, PqMsg_Describe, "P", 2, NULL, 0);
			fanout_put_msg(out, PqMsg_Execute, ex + 5, 5, NULL, 0);   /* "" and the client's row limit */
		}
		fanout_put_msg(out, PqMsg_Sync, NULL, 0, NULL, 0);
	}
	for (uint32_t k = 0; k < n_binds; k++)
		leg_of[k] = (uint16_t)leg_index[leg_of[k]];
	if (why[0]) {
		fanout_free(fo);
		goto out;
	}
	evbuffer_drain(in, end);
	fanout_ev(c)->started(c, fo);
	fanout_send(fo);   /* each leg checks its server out */
	log_debug("C-%llu: a batch of %u statements split over %d shards", (unsigned long long)c->id, n_binds, n_legs);
	verdict = FANOUT_STARTED;
out:
	free(bind_off);
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
				evbuffer_add(leg->rows, unit_start, unit_len);
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
	struct evbuffer *out = io_out(&c->io);
	fanout_batch_put_result(fo, out);
	uint8_t z[6] = { PqMsg_ReadyForQuery, 0, 0, 0, 5, (uint8_t)(c->held_begin ? 'T' : 'I') };
	evbuffer_add(out, z, sizeof z);
	fanout_free(fo);
	fanout_ev(c)->answered(c);
}
