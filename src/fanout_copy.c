/* SPDX-License-Identifier: MIT */
/*
 * fanout_copy: COPY ... FROM STDIN into a sharded table (include/fanout.h):
 * the statement read (copy_route.c), the client's data cut into rows
 * (copysplit.c) and each row sent to its shard, in a transaction per shard
 * ended by fanout_write.c's. The legs are fanout.c's.
 */
#include "fanout.h"
#include "fanout_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "copy_route.h"
#include "copysplit.h"
#include "log.h"
#include "pool.h"
#include "proto.h"
#include "sharding.h"
#include "shardkey.h"

/* ---- COPY FROM STDIN split by shard ---- */

static bool copy_row(void *arg, const uint8_t *row, size_t rowlen, bool header, const uint8_t *key, size_t keylen,
		     bool is_null)
{
	struct fanout *fo = arg;
	if (header) {
		for (int i = 0; i < fo->n_legs; i++)
			buf_add(fo->legs[i].rows, row, rowlen);
		return true;
	}
	char msg[200], err[120];
	int s;
	if (is_null) {
		snprintf(msg, sizeof msg, "cross-shard COPY: line %llu: the sharding key is NULL",
			 (unsigned long long)fo->split.line);
		fanout_set_error(fo, "22004", msg);
		return false;
	}
	if (fo->split.o.format == COPYSPLIT_BINARY) {
		/* the value in its binary form, read as a Bind's binary value
		 * whose type the server chose (by the hash function and the
		 * length: int8/int4/int2, uuid, text) */
		if (keylen > INT32_MAX ||
		    !shardkey_value_shard(fo->c->pool->cpool->sharding_function, fo->n_legs, key, (int32_t)keylen, 1, 0, &s)) {
			snprintf(msg, sizeof msg, "cross-shard COPY: row %llu: the sharding key cannot be read in binary form",
				 (unsigned long long)fo->split.line);
			fanout_set_error(fo, "22P03", msg);
			return false;
		}
	} else if (!sharding_shard_for_key(fo->c->pool->cpool->sharding_function, (const char *)key, keylen, fo->n_legs,
					   &s, err, sizeof err)) {
		snprintf(msg, sizeof msg, "cross-shard COPY: line %llu: %s", (unsigned long long)fo->split.line, err);
		fanout_set_error(fo, "22P02", msg);
		return false;
	}
	buf_add(fo->legs[s].rows, row, rowlen);
	return true;
}

/* Each shard's rows so far, as one CopyData. */
static void copy_flush_rows(struct fanout *fo)
{
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		size_t n = buf_len(leg->rows);
		if (!n)
			continue;
		while (n > 0) {
			/* CopyData messages of at most 1 MB */
			size_t part = n < (1u << 20) ? n : (1u << 20);
			uint8_t h[5] = { PqMsg_CopyData };
			proto_put_u32(h + 1, (uint32_t)(4 + part));
			struct buf *out = fanout_leg_out(leg);
			buf_add(out, h, 5);
			buf_move_to(leg->rows, out, part);
			n -= part;
		}
	}
	fanout_send(fo);
	for (int i = 0; i < fo->n_legs; i++)
		if (fanout_leg_full(&fo->legs[i]))
			fo->waiting_drain = true;
}

/* The client's data stops here (CopyDone, CopyFail, an error): every
 * shard ends its COPY, then the transactions end. */
static void copy_close(struct fanout *fo, bool fail, const char *why)
{
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		leg->ready_needed = 1;
		leg->want_copy_in = false;
		if (!leg->io_open || leg->lost)
			continue;
		if (fail)
			fanout_put_msg(fanout_leg_out(leg), PqMsg_CopyFail, why, strlen(why) + 1, NULL, 0);
		else
			fanout_put_msg(fanout_leg_out(leg), PqMsg_CopyDone, NULL, 0, NULL, 0);
	}
	fo->phase = PHASE_COPY_CLOSE;
	fanout_begin_wait(fo);
}

/* A splitter or hashing error: the shards' COPY fails now, the client's
 * rows are dropped until its CopyDone. */
static void copy_abort(struct fanout *fo)
{
	if (fo->copy_discard)
		return;
	fo->copy_discard = true;
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		static const char msg[] = "pgcat: cross-shard COPY failed";
		if (leg->io_open && !leg->lost)
			fanout_put_msg(fanout_leg_out(leg), PqMsg_CopyFail, msg, sizeof msg, NULL, 0);
	}
	fanout_send(fo);
}

static void copy_feed(struct fanout *fo, const uint8_t *data, size_t n)
{
	if (fo->copy_discard || fo->split.ended)
		return;
	enum copysplit_result r = copysplit_feed(&fo->split, data, n, copy_row, fo);
	if (r == COPYSPLIT_OK || r == COPYSPLIT_END) {
		copy_flush_rows(fo);
		return;
	}
	if (r != COPYSPLIT_STOPPED) {
		char msg[200];
		snprintf(msg, sizeof msg, "cross-shard COPY: line %llu: %s", (unsigned long long)fo->split.line,
			 copysplit_strerror(r));
		fanout_set_error(fo, r == COPYSPLIT_ERR_NOMEM ? SQLSTATE_OUT_OF_MEMORY : "22P04", msg);
	}
	copy_abort(fo);
}

void fanout_client_input(struct client *c)
{
	struct fanout *fo = c->fanout;
	if (!fo || fo->kind != FANOUT_COPY || fo->phase != PHASE_COPY_DATA)
		return;
	struct buf *in = c->io.in;
	while (fo->phase == PHASE_COPY_DATA && !fo->waiting_drain) {
		size_t have = buf_len(in);
		if (fo->skip_remaining) {
			size_t n = have < fo->skip_remaining ? have : fo->skip_remaining;
			if (!n)
				return;
			buf_drain(in, n);
			fo->skip_remaining -= (uint32_t)n;
			continue;
		}
		if (fo->copy_remaining) {
			size_t n = have < fo->copy_remaining ? have : fo->copy_remaining;
			if (!n)
				return;
			/* the splitter takes any piece: no need to wait for the
			 * whole message, however large */
			copy_feed(fo, buf_head(in), n);
			buf_drain(in, n);
			fo->copy_remaining -= (uint32_t)n;
			continue;
		}
		uint8_t h[5];
		if (have < 5 || buf_copyout(in, h, 5) != 5)
			return;
		uint32_t l = proto_get_u32(h + 1);
		if (l < 4) {
			fanout_ev(c)->fatal(c, SQLSTATE_PROTOCOL_VIOLATION, "invalid message length");
			return;
		}
		switch (h[0]) {
		case PqMsg_CopyData:
			buf_drain(in, 5);
			fo->copy_remaining = l - 4;
			break;
		case PqMsg_CopyDone:
			buf_drain(in, 5);
			fo->skip_remaining = l - 4;
			if (!fo->copy_discard && !fo->split.ended) {
				enum copysplit_result r = copysplit_finish(&fo->split, copy_row, fo);
				if (r == COPYSPLIT_OK || r == COPYSPLIT_END) {
					copy_flush_rows(fo);
				} else {
					if (r != COPYSPLIT_STOPPED) {
						char msg[200];
						snprintf(msg, sizeof msg, "cross-shard COPY: line %llu: %s",
							 (unsigned long long)fo->split.line, copysplit_strerror(r));
						fanout_set_error(fo, "22P04", msg);
					}
					copy_abort(fo);
				}
			}
			copy_close(fo, fo->copy_discard, "pgcat: cross-shard COPY failed");
			return;   /* fo may be gone */
		case PqMsg_CopyFail: {
			if (l > 64 * 1024) {
				fanout_ev(c)->fatal(c, SQLSTATE_PROTOCOL_VIOLATION, "CopyFail message too long");
				return;
			}
			if (have < (size_t)l + 1)
				return;
			char msg[300];
			size_t ml = l - 4 < sizeof msg - 1 ? l - 4 : sizeof msg - 1;
			buf_drain(in, 5);
			buf_take(in, msg, ml);
			buf_drain(in, l - 4 - ml);
			msg[ml] = '\0';
			char err[400];
			snprintf(err, sizeof err, "COPY from stdin failed: %s", msg);
			fanout_set_error(fo, "57014", err);
			copy_abort(fo);
			copy_close(fo, true, msg);
			return;
		}
		case PqMsg_Flush:
		case PqMsg_Sync:
			/* ignored during COPY, as PostgreSQL does */
			buf_drain(in, 5);
			fo->skip_remaining = l - 4;
			break;
		default: {
			char msg[120];
			snprintf(msg, sizeof msg, "unexpected message type 0x%02X during COPY from stdin", h[0]);
			fanout_set_error(fo, SQLSTATE_PROTOCOL_VIOLATION, msg);
			buf_drain(in, 5);
			fo->skip_remaining = l - 4;
			copy_abort(fo);
			copy_close(fo, true, msg);
			return;
		}
		}
	}
}

/* Every shard answered its BEGIN and COPY (or failed). */
static void copy_opened(struct fanout *fo)
{
	struct client *c = fo->c;
	bool in_copy[MERGE_MAX_SHARDS] = { false };
	for (int i = 0; i < fo->n_legs; i++) {
		struct fanout_leg *leg = &fo->legs[i];
		struct fanout_walk w;
		const uint8_t *msg;
		size_t total;
		fanout_walk_start(&w, leg);
		while (fanout_walk_next(&w, &msg, &total)) {
			if (msg[0] == PqMsg_ErrorResponse && !fo->error) {
				fanout_keep_msg(&fo->error, &fo->error_len, msg, total);
			} else if (msg[0] == PqMsg_DataRow && i == 0 && fo->copy.key_position < 0) {
				/* the position query's answer */
				fanout_first_int(msg, total, &fo->copy.key_position);
			} else if (msg[0] == PqMsg_CopyInResponse) {
				in_copy[i] = true;
				if (i == 0)
					fanout_keep_msg(&fo->copy_in_response, &fo->copy_in_response_len, msg, total);
			}
		}
		if (leg->lost || leg->too_big)
			fanout_set_error(fo, SQLSTATE_CONNECTION_FAILURE, "cross-shard COPY: a shard's connection was lost");
		fanout_walk_done(&w, leg);
	}
	if (!fo->error && fo->copy.key_position < 0)
		fanout_set_error(fo, "42703", "cross-shard COPY: the sharding column was not found in the table");
	if (!fo->error && !fo->copy_in_response)
		fanout_set_error(fo, SQLSTATE_OUT_OF_MEMORY, "out of memory");
	struct copysplit_options o = fo->copy.opts;
	o.key_column = (unsigned)(fo->copy.key_position < 0 ? 0 : fo->copy.key_position);
	if (!fo->error) {
		copysplit_init(&fo->split, &o);
		fo->split_ready = true;
		for (int i = 0; i < fo->n_legs && !fo->error; i++)
			if (!(fo->legs[i].rows = buf_new(BUF_SMALL)))
				fanout_set_error(fo, SQLSTATE_OUT_OF_MEMORY, "out of memory");
	}
	if (fo->error) {
		/* the shards that opened their COPY fail it; then ROLLBACK */
		for (int i = 0; i < fo->n_legs; i++) {
			struct fanout_leg *leg = &fo->legs[i];
			leg->want_copy_in = false;
			leg->ready_needed = in_copy[i] ? 1 : 0;
			static const char msg[] = "pgcat: cross-shard COPY failed on another shard";
			if (in_copy[i] && leg->io_open && !leg->lost)
				fanout_put_msg(fanout_leg_out(leg), PqMsg_CopyFail, msg, sizeof msg, NULL, 0);
		}
		fo->phase = PHASE_COPY_CLOSE;
		fanout_begin_wait(fo);
		return;
	}
	buf_add(io_out(&c->io), fo->copy_in_response, fo->copy_in_response_len);
	fo->phase = PHASE_COPY_DATA;
	for (int i = 0; i < fo->n_legs; i++)
		fo->legs[i].done = true;   /* nothing awaited while rows flow */
	fanout_ev(c)->resume(c);   /* rows the client sent already */
}

void fanout_copy_finish(struct fanout *fo)
{
	switch (fo->phase) {
	case PHASE_COPY_OPEN:
		copy_opened(fo);
		return;
	case PHASE_COPY_CLOSE:
		for (int i = 0; i < fo->n_legs; i++)
			fanout_insert_take_reply(fo, &fo->legs[i]);
		if (!fanout_park(fo))
			fanout_write_end(fo);
		return;
	case PHASE_END: {
		bool failed_before = fo->error != NULL;
		for (int i = 0; i < fo->n_legs; i++)
			fanout_insert_take_reply(fo, &fo->legs[i]);
		if (!failed_before && fo->error)
			log_warning("C-%llu: a cross-shard COPY failed at COMMIT on a shard; the other shards committed",
				    (unsigned long long)fo->c->id);
		fanout_write_reply(fo);
		return;
	}
	case PHASE_RUN:
	case PHASE_COPY_DATA:
	case PHASE_INSERT_POSITION:
	case PHASE_PREPARE:        /* (fanout_2pc.c's) */
	case PHASE_PREPARED_END:
		return;
	}
}

enum fanout_start fanout_start_copy(struct client *c, const struct proto_frame *f, const struct router_rules *rules,
				    char *why, size_t whylen)
{
	struct pool *p = c->pool;
	int n_shards = (int)p->cpool->n_shards;
	struct buf *in = c->io.in;
	why[0] = '\0';
	if (f->type != PqMsg_Query)
		return FANOUT_ANY_SHARD;   /* not a COPY (route refuses what it was) */
	size_t total = (size_t)f->len + 1;
	if (buf_len(in) < total || total > FANOUT_REQUEST_MAX || n_shards > MERGE_MAX_SHARDS)
		return FANOUT_ANY_SHARD;
	const uint8_t *m = buf_pullup(in, (size_t)total);
	if (!m)
		return FANOUT_ANY_SHARD;
	const char *sql = (const char *)m + 5;
	size_t sql_len = strnlen(sql, total - 5);
	struct copy_route cr;
	char cwhy[MERGE_WHY];
	switch (copy_route_read(sql, sql_len, rules, &cr, cwhy)) {
	case COPY_ROUTE_NOT_COPY:
		return FANOUT_ANY_SHARD;
	case COPY_ROUTE_REFUSED:
		snprintf(why, whylen, "%s", cwhy);
		return FANOUT_REFUSED;
	case COPY_ROUTE_SPLIT:
		break;
	}
	char posq[1024];
	if (cr.key_position < 0 && !copy_route_position_query(&cr, posq, sizeof posq)) {
		snprintf(why, whylen, "cross-shard COPY: the table name is too long");
		return FANOUT_REFUSED;
	}
	struct fanout *fo = fanout_new_write(c, FANOUT_COPY, PHASE_COPY_OPEN, n_shards,
					     fanout_copy_finish);
	if (!fo) {
		snprintf(why, whylen, "cross-shard COPY: out of memory");
		return FANOUT_REFUSED;
	}
	fo->copy = cr;
	fo->copy.opts.null_string = fo->copy.opts.null_string == cr.null_string ? fo->copy.null_string
										 : fo->copy.opts.null_string;
	for (int s = 0; s < n_shards && !why[0]; s++) {
		fo->n_legs = s + 1;
		if (!fanout_open_leg(fo, s, s, why, whylen))
			break;
		struct fanout_leg *leg = &fo->legs[s];
		leg->want_copy_in = true;
		leg->ready_needed = 1;
		if (s == 0 && cr.key_position < 0) {
			fanout_put_msg(fanout_leg_out(leg), PqMsg_Query, posq, strlen(posq) + 1, NULL, 0);
			leg->ready_needed++;
		}
		fanout_put_msg(fanout_leg_out(leg), PqMsg_Query, "BEGIN", 6, NULL, 0);
		fanout_put_msg(fanout_leg_out(leg), PqMsg_Query, sql, sql_len + 1, NULL, 0);
	}
	if (why[0]) {
		fanout_free(fo);
		return FANOUT_REFUSED;
	}
	buf_drain(in, total);
	fanout_ev(c)->started(c, fo);
	fanout_send(fo);   /* each leg checks its server out */
	log_debug("C-%llu: COPY split over %d shards", (unsigned long long)c->id, n_shards);
	return FANOUT_STARTED;
}
