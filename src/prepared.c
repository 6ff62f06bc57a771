/* SPDX-License-Identifier: MIT */
/*
 * prepared: named prepared statements in transaction mode, the client's
 * side (see prepared.h for the approach): Parse, Bind, Describe and Close
 * rewritten to global names, with a Parse of pgcat's own (and evictions)
 * sent first where the server lacks the statement; the Parse batches
 * answered without a server; what route.c sends in place of a client's
 * refused message; a client's state (free, trim, fanout's reads of it).
 * The rest of the room: prep_maps.c (the data structures), prep_schema.c
 * (the schema generation), prep_sql.c (PREPARE, EXECUTE, DEALLOCATE in a
 * Query), prep_server.c (the server's replies); what they share is in
 * include/prep_internal.h.
 */
#include "prepared.h"
#include "prep_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "buf_msg.h"
#include "link.h"
#include "log.h"
#include "params.h"
#include "pktbuf.h"
#include "pool.h"
#include "proto.h"
#include "server.h"
#include "sqllex.h"
#include "stats.h"
#include "context.h"

/* The length of the name at p (at most max bytes): the unnamed statement's
 * and portal's, empty, without a call (every Bind and Describe reads two). */
static inline size_t name_len(const uint8_t *p, size_t max)
{
	return max > 0 && p[0] == 0 ? 0 : strnlen((const char *)p, max);
}

/* ---- helpers ---- */

bool prep_enabled(const struct client *c)
{
	return c->pool && pool_mode_per_transaction(c->pool->mode) && c->w->cfg->general.prepared_statements;
}

static struct prep_server *server_prep(struct server *s)
{
	if (!s->prep)
		s->prep = calloc(1, sizeof *s->prep);
	return s->prep;
}

/* The query of an SQL PREPARE's "[(types)] AS query" (q itself if it has
 * no AS). */
static const char *prepare_query(const char *q)
{
	size_t len = strlen(q), i = sqllex_skip_blank(q, len, 0);
	if (i < len && q[i] == '(') {
		/* the types, which may hold parentheses and quoted names */
		size_t depth = 0;
		while (i < len) {
			size_t j = sqllex_skip_quoted(q, len, i);
			if (j != i) {
				i = j;
				continue;
			}
			char ch = q[i++];
			if (ch == '(')
				depth++;
			else if (ch == ')' && --depth == 0)
				break;
		}
		i = sqllex_skip_blank(q, len, i);
	}
	/* right after AS: a comment before the query stays with it */
	size_t as = i;
	return sqllex_keyword(q, len, &i, "as") ? q + as + 2 : q;
}

/* Parse of st under its global name. */
static void send_parse(struct server *s, struct prep_stmt *st)
{
	char g[PREP_GNAME_MAX];
	prep_gname(g, st, s->prep->set.gen);
	struct buf *out = server_output(s);
	if (st->sql) {
		/* An SQL PREPARE's "(types) AS query": only the query carries
		 * over to a protocol Parse (the server infers the types). */
		const char *body = prepare_query((const char *)st->key);
		uint8_t zero[3] = { 0, 0, 0 };
		size_t gl = strlen(g) + 1, bl = strlen(body) + 1;
		uint8_t *tmp = malloc(gl + bl + 2);
		if (!tmp)
			return;
		memcpy(tmp, g, gl);
		memcpy(tmp + gl, body, bl);
		memcpy(tmp + gl + bl, zero, 2);
		prep_put_msg(out, PqMsg_Parse, tmp, gl + bl + 2, NULL, 0);
		free(tmp);
		return;
	}
	prep_put_msg(out, PqMsg_Parse, g, strlen(g) + 1, st->key, st->key_len);
}

/* A Close of pgcat's name for st, its CloseComplete swallowed. An eviction
 * (evict: st just left the set) hands its reference to the pending entry,
 * which undoes it if the server skips the Close. */
static bool send_close_name(struct server *s, struct prep_stmt *st, bool evict)
{
	struct prep_server *ps = s->prep;
	char g[PREP_GNAME_MAX];
	prep_gname(g, st, ps->set.gen);
	uint8_t body[PREP_GNAME_MAX + 1];
	body[0] = 'S';
	size_t gl = strlen(g) + 1;
	memcpy(body + 1, g, gl);
	prep_put_msg(server_output(s), PqMsg_Close, body, 1 + gl, NULL, 0);
	txn_sent(&s->txn, PqMsg_Close);
	struct prep_pend p = { .seg = ps->seg_sent, .swallow = true, .evict = evict, .st = evict ? st : NULL,
			       .gen = ps->set.gen, .sure = evict && prep_server_settled(s, st) };
	if (prep_server_push(ps, &ps->closes, &p))
		return true;
	if (evict)
		prep_stmt_unref(prep_reg_of(s), st);
	return false;
}

/* Make room, then record that st will be on the server. pgcat's own Parse
 * (swallow) or the client's (forwarded reply). */
static bool add_to_server(struct client *c, struct server *s, struct prep_stmt *st, bool swallow,
			  const char *cname, bool unnamed)
{
	struct prep_server *ps = s->prep;
	struct prep_registry *r = prep_reg_of(s);
	int limit = c->w->cfg->general.prepared_statements_cache_size;
	while (limit > 0 && ps->set.n >= (uint32_t)limit) {
		struct prep_stmt *victim = prep_sset_pop_lru(&ps->set);
		if (!victim)
			break;
		if (!send_close_name(s, victim, true))
			return false;
	}
	/* Whether the server holds the name may hang on an earlier segment's
	 * outcome: closing it first makes this Parse right either way. */
	bool sure = prep_server_settled(s, st);
	if (!sure && prep_server_unsure(s, st) && !send_close_name(s, st, false))
		return false;
	send_parse(s, st);
	if (!prep_sset_has(&ps->set, st) && !prep_sset_add(&ps->set, st))
		return false;
	st->refs++;
	struct prep_pend p = { .seg = ps->seg_sent, .swallow = swallow, .st = st, .cname = cname ? strdup(cname) : NULL,
			       .sure = sure, .gen = ps->set.gen };
	if (!prep_server_push(ps, &ps->parses, &p)) {
		prep_pend_release(r, &p);
		return false;
	}
	txn_sent(&s->txn, PqMsg_Parse);
	st->misses++;
	/* The unnamed statement's figures are the pool's own pair: the
	 * named ones keep meaning what the client prepared. */
	if (unnamed) {
		stats_add(c->pool->stats, STAT_UNNAMED_MISSES, 1);
	} else {
		ps->misses++;
		stats_add(c->pool->stats, STAT_PREPARED_MISSES, 1);
		if (c->w->cfg->pgbouncer)   /* (PgBouncer's server_parse_count: see client.c) */
			stats_add(c->pool->stats, STAT_SERVER_PARSE, 1);
	}
	return true;
}

/* A ParseComplete the client expects where the server already holds the
 * statement: a Parse and Close of an empty statement, the Close swallowed. */
static bool send_nop_parse(struct server *s, const char *cname)
{
	/* Parse "pgcat_nop" of "" with no types, Close 'S' "pgcat_nop": one
	 * append. */
	static const uint8_t msgs[] = "P\0\0\0\x11pgcat_nop\0\0\0\0"
				      "C\0\0\0\x0fSpgcat_nop\0";
	/* (each length counts itself and the body; the array's own NUL is not sent) */
	_Static_assert(sizeof msgs == (1 + 0x11) + (1 + 0x0f) + 1, "Parse and Close lengths");
	struct prep_server *ps = s->prep;
	buf_add(server_output(s), msgs, sizeof msgs - 1);
	/* If an earlier message fails, this Parse is skipped: the client's
	 * name is then undone like any failed Parse. */
	struct prep_pend p = { .seg = ps->seg_sent, .cname = strdup(cname) };
	struct prep_pend c = { .seg = ps->seg_sent, .swallow = true };
	txn_sent(&s->txn, PqMsg_Parse);
	if (!p.cname || !prep_server_push(ps, &ps->parses, &p))
		return free(p.cname), false;
	return prep_server_push(ps, &ps->closes, &c);
}

/* A client's unnamed Parse of a statement the server holds, sent as
 * nothing at all: its ParseComplete is pgcat's, put before the reply to the
 * Bind that follows (prep_server_message), where PostgreSQL's would be. So
 * only when that reply can only be the Bind's: the Parse is the first
 * message of its segment (an earlier one's error would skip the Parse, and
 * PostgreSQL would owe no ParseComplete), the client's next message,
 * already here, binds the unnamed statement to the unnamed portal (what
 * drivers send for one statement), and the pool has one shard. Saves the
 * server the parse of an empty statement per execution
 * (bench/empty_parse.py). false: the caller sends the Parse below. */
static bool owe_parse_complete(struct client *c, struct server *s, uint32_t total)
{
	/* (In a sharded pool the Bind may start afresh on another shard's
	 * server, route.c, and this one would owe its ParseComplete forever.) */
	if (!s->txn.ext_first || c->pool->cpool->n_shards > 1)
		return false;
	uint8_t next[7];
	if (!buf_copy_at(c->io.in, total, next, sizeof next))
		return false;
	/* 'B', a length, "" (portal), "" (statement) */
	if (next[0] != PqMsg_Bind || next[5] != 0 || next[6] != 0)
		return false;
	struct prep_server *ps = s->prep;
	struct prep_pend p = { .seg = ps->seg_sent };
	return prep_server_push(ps, &ps->owed_parses, &p);
}

/* The same for a client's unnamed Parse that pgcat sends as a statement the
 * server holds: a Parse of an empty unnamed statement, whose ParseComplete
 * goes to the client (one message, no Close to swallow). It replaces the
 * server's unnamed statement: whichever client left one there gets it
 * replayed if it binds it later. */
static bool send_unnamed_nop(struct server *s)
{
	static const uint8_t parse[] = "P\0\0\0\x08\0\0\0\0";   /* "", "", no types */
	_Static_assert(sizeof parse == 1 + 8 + 1, "Parse length");
	struct prep_server *ps = s->prep;
	buf_add(server_output(s), parse, sizeof parse - 1);
	ps->unnamed_client = 0;
	struct prep_pend p = { .seg = ps->seg_sent };
	txn_sent(&s->txn, PqMsg_Parse);
	return prep_server_push(ps, &ps->parses, &p);
}

/* The client's error, at this point of the stream (see prepared.h). */
static bool send_error_bind(struct server *s, const char *sqlstate, const char *message)
{
	static const uint8_t bind_body[] = "\0" PREP_ERROR_NAME "\0\0\0\0\0\0";
	struct prep_server *ps = s->prep;
	uint8_t storage[512];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_error(&pb, "ERROR", sqlstate, message);
	struct prep_pend p = { .seg = ps->seg_sent, .repl = malloc(pb.len), .repl_len = (uint32_t)pb.len };
	if (!p.repl || pb.failed)
		return free(p.repl), false;
	memcpy(p.repl, pb.data, pb.len);
	if (!prep_server_push(ps, &ps->repls, &p))
		return free(p.repl), false;
	prep_put_msg(server_output(s), PqMsg_Bind, bind_body, sizeof bind_body, NULL, 0);
	txn_sent(&s->txn, PqMsg_Bind);
	return true;
}

/* The client's unnamed statement is not the one on this server: send it. */
static bool replay_unnamed(struct client *c, struct server *s)
{
	struct prep_client *pc = c->end.prep;
	struct prep_server *ps = s->prep;
	if (!pc || !pc->unnamed_len)
		return true;
	if (ps->unnamed_client == c->id && ps->unnamed_gen == pc->unnamed_gen)
		return true;
	buf_add(server_output(s), pc->unnamed, pc->unnamed_len);
	struct prep_pend p = { .seg = ps->seg_sent, .swallow = true };
	ps->unnamed_client = c->id;
	ps->unnamed_gen = pc->unnamed_gen;
	txn_sent(&s->txn, PqMsg_Parse);
	return prep_server_push(ps, &ps->parses, &p);
}

/* Make sure s holds st before a message that uses it. */
static bool ensure_on_server(struct client *c, struct server *s, struct prep_stmt *st)
{
	if (prep_server_holds(s, st)) {
		prep_count_hit(c, s, st);
		return true;
	}
	return add_to_server(c, s, st, true, NULL, false);
}

/* ---- the unnamed statement as a named one (prepare_unnamed) ---- */

/* The client's unnamed statement is no longer a named one of pgcat's. */
static void drop_unnamed_st(struct client *c)
{
	struct prep_client *pc = c->end.prep;
	if (pc && pc->unnamed_st) {
		prep_stmt_unref(&c->pool->prep, pc->unnamed_st);
		pc->unnamed_st = NULL;
	}
}

/* Statements PostgreSQL plans: the ones worth keeping a plan of. The rest
 * (SET, LISTEN, DISCARD, DDL...) stay unnamed: nothing to save, and pgcat
 * reads some of them from their Parse (settings, LISTEN, DISCARD ALL). */
static bool plannable(const uint8_t *key, size_t len)
{
	const char *q = (const char *)key, *end = q + strnlen(q, len);
	const char *w = prep_sql_space(q, end);
	if (w < end && *w == '(')
		return true;
	switch (w < end ? *w | 0x20 : 0) {
	case 's':
		return prep_sql_word(&w, end, "select");
	case 'i':
		return prep_sql_word(&w, end, "insert");
	case 'u':
		return prep_sql_word(&w, end, "update");
	case 'd':
		return prep_sql_word(&w, end, "delete");
	case 'w':
		return prep_sql_word(&w, end, "with");
	case 'v':
		return prep_sql_word(&w, end, "values");
	case 't':
		return prep_sql_word(&w, end, "table");
	case 'm':
		return prep_sql_word(&w, end, "merge");
	default:
		return false;
	}
}

/* The registry's "generation" for a client's unnamed statements: the
 * schema generation and the client's tracked session settings together.
 * PostgreSQL resolves names by search_path and reads literals by DateStyle
 * when it parses, and a server connection runs each client with that
 * client's settings: a text parsed under one set is used only under the
 * same set (clients whose settings match share it). Never a small number,
 * so never the generation of a named statement's entry. */
uint64_t prep_unnamed_generation(const struct client *c)
{
	uint64_t h = (prep_schema_generation(c->w) + 1) * 0x9e3779b97f4a7c15ULL;
	h ^= c->params.digest + 0x632be59bd9b4e019ULL;
	h *= 0xff51afd7ed558ccdULL;
	return (h ^ (h >> 32)) | (1ULL << 63);
}

/* Is st (key: an unnamed Parse's) a statement prepare_unnamed takes? The
 * keyword check once per entry (a client may have prepared any text by
 * name). */
static bool unnamed_plannable(struct prep_stmt *st, const uint8_t *key, size_t klen)
{
	if (!st->plannable)
		st->plannable = plannable(key, klen) ? 1 : -1;
	return st->plannable > 0;
}

/* An unnamed Parse (key: its text and parameter types; total: the whole
 * message). A text the pool saw before goes to the server as the pool's
 * named statement, parsed on this connection only if it lacks it, so that
 * PostgreSQL plans it once per connection; the client gets the one
 * ParseComplete it expects either way. PREP_FORWARD: it stays unnamed (the
 * caller forwards it), after one look-up in the registry and at most one
 * in the seen-once memory, with the text hashed once. */
static enum prep_action on_unnamed_parse(struct client *c, struct server *s, struct prep_client *pc,
					 const uint8_t *key, size_t klen, uint32_t total)
{
	drop_unnamed_st(c);
	/* In a failed transaction PostgreSQL refuses the Parse itself
	 * (25P02), where a Parse of an empty statement would succeed: let it
	 * say so. */
	if (!c->w->cfg->general.prepare_unnamed || s->txn.tx_status == 'E')
		return PREP_FORWARD;
	struct prep_registry *r = prep_reg_of(s);
	uint64_t th = prep_key_hash(key, klen), gen = prep_unnamed_generation(c);
	struct prep_stmt *st = prep_registry_find_hashed(r, th, key, klen, gen);
	if (st ? !unnamed_plannable(st, key, klen) : !plannable(key, klen))
		return PREP_FORWARD;
	if (!st && !prep_seen_again(r, th)) {
		/* the first time: a one-off query leaves nothing on a server */
		stats_add(c->pool->stats, STAT_UNNAMED_MISSES, 1);
		return PREP_FORWARD;
	}
	if (st)
		st->refs++;
	else if (!(st = prep_registry_get_hashed(r, th, key, klen, gen)))
		return PREP_FAILED;
	else
		st->plannable = 1;
	pc->unnamed_st = st;
	pc->unnamed_len = 0;
	bool ok;
	if (prep_server_holds(s, st)) {
		st->hits++;
		stats_add(c->pool->stats, STAT_UNNAMED_HITS, 1);
		ok = owe_parse_complete(c, s, total) || send_unnamed_nop(s);
	} else {
		ok = add_to_server(c, s, st, false, NULL, true);
	}
	if (!ok)
		return PREP_FAILED;
	prep_drain_msg(c, total);
	return PREP_DONE;
}

/* A Bind or Describe of the client's unnamed statement that is pgcat's
 * named one: the server must hold it (a later transaction may be on
 * another connection). Counted with the Parse, not again here. */
static bool ensure_unnamed_on_server(struct client *c, struct server *s, struct prep_stmt *st)
{
	if (prep_server_holds(s, st))
		return true;
	return add_to_server(c, s, st, true, NULL, true);
}

/* ---- protocol messages ---- */

/* A Parse longer than prepared_statements_max_length, of which head (have
 * bytes) is here: not held whole. Unnamed, it goes to the server as it
 * is, streamed: the client's own unnamed statement there, not kept for
 * another server. Named, it is refused: a named statement is the pool's,
 * prepared again on each server that needs it, which takes its text. */
static enum prep_action on_long_parse(struct client *c, struct server *s, const uint8_t *head, size_t have,
				      uint32_t total, uint32_t *stream_rest)
{
	struct prep_server *ps = s->prep;
	struct prep_client *pc = prep_client_of(c);
	if (!pc)
		return PREP_FAILED;
	size_t nl = strnlen((const char *)head + 5, have - 5);
	if (nl == 0) {
		drop_unnamed_st(c);
		pc->unnamed_len = 0;
		pc->unnamed_unkept = true;
		pc->unnamed_gen++;
		ps->unnamed_client = c->id;
		ps->unnamed_gen = pc->unnamed_gen;
		struct prep_pend p = { .seg = ps->seg_sent };
		return prep_server_push(ps, &ps->parses, &p) ? PREP_FORWARD : PREP_FAILED;
	}
	char msg[300];
	snprintf(msg, sizeof msg,
		 "prepared statement \"%.*s\" is too long to keep: %u bytes, over prepared_statements_max_length (%d); "
		 "send it unnamed, or raise the setting", (int)(nl < 63 ? nl : 63), (const char *)head + 5, total,
		 c->w->cfg->general.prepared_statements_max_length);
	if (!send_error_bind(s, "54000", msg))
		return PREP_FAILED;
	*stream_rest = total;
	return PREP_DISCARD;
}

static enum prep_action on_parse(struct client *c, struct server *s, const uint8_t *m, uint32_t total)
{
	size_t off = 0;
	const char *name;
	if (!proto_read_cstring(m + 5, total - 5, &off, &name))
		return PREP_FORWARD;   /* malformed: the server says so */
	struct prep_server *ps = s->prep;
	struct prep_client *pc = prep_client_of(c);
	if (!pc) {
		return PREP_FAILED;
	}
	if (!name[0]) {
		pc->unnamed_unkept = false;
		enum prep_action a = on_unnamed_parse(c, s, pc, m + 5 + off, total - 5 - off, total);
		if (a != PREP_FORWARD)
			return a;
		/* Unnamed: forwarded; remembered for a Bind in a later transaction. */
		if (pc->unnamed_cap < total) {
			uint8_t *b = realloc(pc->unnamed, total);
			if (!b) {
				return PREP_FAILED;
			}
			pc->unnamed = b;
			pc->unnamed_cap = total;
		}
		memcpy(pc->unnamed, m, total);
		pc->unnamed_len = total;
		pc->unnamed_gen++;
		ps->unnamed_client = c->id;
		ps->unnamed_gen = pc->unnamed_gen;
		struct prep_pend p = { .seg = ps->seg_sent };
		if (!prep_server_push(ps, &ps->parses, &p)) {
			return PREP_FAILED;
		}
		return PREP_FORWARD;
	}
	bool ok;
	if (prep_cmap_get(&pc->names, name) && c->w->cfg->pgbouncer) {
		snprintf(pc->refusal, sizeof pc->refusal, "prepared statement '%.64s' was already prepared", name);
		return PREP_REFUSED;
	} else if (prep_cmap_get(&pc->names, name)) {
		char msg[160];
		snprintf(msg, sizeof msg, "prepared statement \"%s\" already exists", name);
		ok = send_error_bind(s, "42P05", msg);
	} else {
		if (c->w->cfg->pgbouncer)   /* (PgBouncer's client_parse_count: see client.c) */
			stats_add(c->pool->stats, STAT_CLIENT_PARSE, 1);
		struct prep_stmt *st = prep_registry_get(prep_reg_of(s), false, m + 5 + off, total - 5 - off,
							 prep_schema_generation(c->w));
		ok = st != NULL;
		if (ok && !prep_cmap_put(&pc->names, name, st)) {
			prep_stmt_unref(prep_reg_of(s), st);
			ok = false;
		}
		if (ok) {
			if (prep_server_holds(s, st)) {
				prep_count_hit(c, s, st);
				ok = send_nop_parse(s, name);
			} else {
				ok = add_to_server(c, s, st, false, name, false);
			}
		}
	}
	if (!ok) {
		return PREP_FAILED;
	}
	prep_drain_msg(c, total);
	return PREP_DONE;
}

/* A Describe of a statement went to the server (st: the pool's statement
 * it names, NULL for one pgcat does not know): its replies are matched
 * with it in order, so that a statement with no description kept gets
 * one (prep_server.c). Every such Describe has its entry: replies to one
 * are never taken for another's. */
static bool note_describe(struct server *s, struct prep_stmt *st)
{
	struct prep_server *ps = s->prep;
	bool keep = st && !st->desc && !st->sql;
	struct prep_pend p = { .seg = ps->seg_sent, .st = keep ? st : NULL };
	if (!prep_server_push(ps, &ps->describes, &p))
		return false;
	if (keep)
		st->refs++;
	return true;
}

/* Bind or Describe 'S' naming a client statement: rewrite the name.
 * prefix_len bytes of the message precede the name (after the header). */
static enum prep_action rewrite_name(struct client *c, struct server *s, const struct proto_frame *f,
				     const uint8_t *m, size_t have, size_t name_off, uint32_t *stream_rest,
				     struct prep_stmt **used)
{
	uint32_t total = f->len + 1;
	const char *name = (const char *)m + name_off;
	size_t nl = name_len((const uint8_t *)name, have - name_off);
	if (name_off + nl >= have)
		return have >= total ? PREP_FORWARD : PREP_WAIT;   /* no terminator in the message: malformed */
	struct prep_stmt *st;
	bool ok;
	if (nl == 0) {
		const struct prep_client *pc = c->end.prep;
		st = pc ? pc->unnamed_st : NULL;
		bool unkept_elsewhere = pc && pc->unnamed_unkept &&
					!(s->prep->unnamed_client == c->id && s->prep->unnamed_gen == pc->unnamed_gen);
		if (!st && (!pc || (!pc->unnamed_len && !pc->unnamed_unkept) || unkept_elsewhere)) {
			/* The client has no unnamed statement: the server's
			 * may be another client's. (Or one too long to keep,
			 * which only another server holds.) The message goes
			 * (discarded as it comes, never held whole). */
			if (!send_error_bind(s, "26000",
					     unkept_elsewhere ? "unnamed prepared statement does not exist on this "
								"server connection (longer than "
								"prepared_statements_max_length, it is not kept "
								"across transactions)"
							      : "unnamed prepared statement does not exist"))
				return PREP_FAILED;
			*stream_rest = total;
			return PREP_DISCARD;
		}
		if (!st)
			return replay_unnamed(c, s) ? PREP_FORWARD : PREP_FAILED;
		ok = ensure_unnamed_on_server(c, s, st);
	} else if (!(st = c->end.prep ? prep_cmap_get(&c->end.prep->names, name) : NULL) && c->w->cfg->pgbouncer) {
		struct prep_client *pc = prep_client_of(c);   /* (made for the refusal's words) */
		if (!pc)
			return PREP_FAILED;
		log_info("C-%llu: prepared statement '%.64s' not found", (unsigned long long)c->id, name);
		snprintf(pc->refusal, sizeof pc->refusal, "prepared statement did not exist");
		return PREP_REFUSED;
	} else if (!st) {
		char msg[160];
		snprintf(msg, sizeof msg, "prepared statement \"%s\" does not exist", name);
		ok = send_error_bind(s, "26000", msg);
		if (ok) {
			*stream_rest = total;
			return PREP_DISCARD;
		}
	} else {
		if (f->type == PqMsg_Bind && c->w->cfg->pgbouncer)   /* (PgBouncer's bind_count: see client.c) */
			stats_add(c->pool->stats, STAT_BIND, 1);
		ok = ensure_on_server(c, s, st);
	}
	if (!ok) {
		return PREP_FAILED;
	}
	if (st->notifies && f->type == PqMsg_Bind && link_watch_notify(s))
		link_note_notifier(s, &c->end);   /* (SPEC §11: the notifier's pid) */
	*used = st;
	size_t gl;
	const char *g = prep_gname_kept(st, s->prep->set.gen, &gl);
	size_t old_prefix = name_off + nl + 1;          /* header, fields before, name, NUL */
	uint32_t rest = total - (uint32_t)old_prefix;
	uint32_t len = (uint32_t)(4 + (name_off - 5) + gl + rest);
	uint8_t hdr[5] = { f->type, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len };
	struct buf *out = server_output(s);
	size_t portal = name_off - 5;
	uint8_t prefix[5 + 64 + PREP_GNAME_MAX];
	if (portal <= 64) {
		/* the usual Bind (an unnamed or short portal): one append */
		memcpy(prefix, hdr, 5);
		memcpy(prefix + 5, m + 5, portal);
		memcpy(prefix + 5 + portal, g, gl);
		buf_add(out, prefix, 5 + portal + gl);
	} else {
		buf_add(out, hdr, 5);
		buf_add(out, m + 5, portal);
		buf_add(out, g, gl);
	}
	buf_drain(c->io.in, old_prefix);
	stats_add(c->pool->stats, STAT_RECEIVED, old_prefix);
	*stream_rest = rest;
	txn_sent(&s->txn, f->type);
	return PREP_DONE;
}

static enum prep_action on_close(struct client *c, struct server *s, const uint8_t *m, uint32_t total)
{
	struct prep_server *ps = s->prep;
	struct prep_pend p = { .seg = ps->seg_sent };
	bool mapped = total == 7 && m[5] == 'S' && m[6] == 0 && c->end.prep && c->end.prep->unnamed_st;
	if (!mapped && (total < 7 || m[5] != 'S' || m[total - 1] != 0 || m[6] == 0)) {
		/* Portals and the unnamed statement: the server's business. */
		if (!prep_server_push(ps, &ps->closes, &p)) {
			return PREP_FAILED;
		}
		return PREP_FORWARD;
	}
	const char *name = (const char *)m + 6;
	/* The name goes now; an error earlier in the segment skips the Close,
	 * and the pending entry then gives it back (prep_server.c). */
	struct prep_client *pc = c->end.prep;
	struct prep_stmt *st = mapped ? pc->unnamed_st : pc ? prep_cmap_get(&pc->names, name) : NULL;
	if (st) {
		p.st = st;
		p.cname = mapped ? NULL : strdup(name);
		if (!mapped && !p.cname)
			return PREP_FAILED;
		p.unclose = true;
		st->refs++;
	}
	if (mapped)
		drop_unnamed_st(c);
	else if (pc)
		(void)prep_cmap_del(&pc->names, prep_reg_of(s), name);
	/* The statement stays on the server for others; the client gets the
	 * CloseComplete of a Close of nothing (not an error in PostgreSQL). */
	static const uint8_t body[] = "S" PREP_ERROR_NAME;
	prep_put_msg(server_output(s), PqMsg_Close, body, sizeof body, NULL, 0);
	if (!prep_server_push(ps, &ps->closes, &p)) {
		prep_pend_release(prep_reg_of(s), &p);
		return PREP_FAILED;
	}
	txn_sent(&s->txn, PqMsg_Close);
	prep_drain_msg(c, total);
	return PREP_DONE;
}

void prep_client_close_idle(struct client *c, const uint8_t *m, uint32_t total)
{
	if (total == 7 && m[5] == 'S' && m[6] == 0) {
		drop_unnamed_st(c);
		return;
	}
	if (total < 7 || m[5] != 'S' || m[total - 1] != 0 || m[6] == 0 || !c->end.prep)
		return;
	(void)prep_cmap_del(&c->end.prep->names, &c->pool->prep, (const char *)m + 6);
}

/* ---- Parse and Describe answered from the pool's statements (SPEC §5) ---- */

/* Parses of one Sync that prep_client_parse_cached takes at most; more go
 * the usual way. */
#define CACHED_PARSES_MAX 16
#define CACHED_BATCH_MAX (16u * 1024)

/* One Parse of the batch at the head of a client's input. */
struct cached_parse {
	const char *name;
	const uint8_t *key;     /* query\0 int16 n, n x oid */
	size_t key_len;
	struct prep_stmt *st;   /* the pool's entry; NULL: a new one (unverified_ok) */
};

/* The batch's messages in order: a Parse (its index) or, with describe, a
 * Describe of the statement of that Parse. */
struct cached_op {
	uint8_t parse;
	bool describe;
};

/* Can the unnamed Parse at the head of c's input (head: its first six
 * bytes) start a batch pgcat answers? Every extended-protocol query's
 * Parse comes here: the message after it (a Bind, mostly) turns it away
 * before anything is made contiguous. */
static bool unnamed_batch_may_do(struct client *c, struct buf *in, const uint8_t head[6])
{
	if (!c->w->cfg->general.prepare_unnamed)
		return false;
	uint32_t plen = proto_get_u32(head + 1);
	if (plen < 4 || (size_t)plen + 2 > CACHED_BATCH_MAX || buf_len(in) < (size_t)plen + 2)
		return false;
	/* (contiguous already, mostly: the pump reads the Parse whole too) */
	const uint8_t *m = buf_pullup(in, (size_t)plen + 2);
	return m && (m[plen + 1] == PqMsg_Describe || m[plen + 1] == PqMsg_Sync);
}

/* The Parses (and Describes of their statements) up to the first Sync at
 * the head of c's input, if pgcat can answer every one: each Parse's
 * statement verified unless unverified_ok (named only; an unnamed one
 * must be in the registry, as on_unnamed_parse would map it), each
 * Describe's with its description kept. ps and ops filled, *n Parses, *nops
 * messages, *len bytes with the Sync. Nothing changes. */
static bool scan_cached_batch(struct client *c, bool unverified_ok, struct cached_parse *ps, uint32_t *n,
			      struct cached_op *ops, uint32_t *nops, size_t *len)
{
	struct buf *in = c->io.in;
	if (!in)
		return false;
	uint8_t head[6];
	if (buf_copyout(in, head, sizeof head) < sizeof head ||
	    (head[5] == 0 && !unnamed_batch_may_do(c, in, head)))
		return false;
	size_t have = buf_len(in);
	if (have > CACHED_BATCH_MAX)
		have = CACHED_BATCH_MAX;
	const uint8_t *b = buf_pullup(in, (size_t)have);
	if (!b)
		return false;
	struct prep_registry *r = &c->pool->prep;
	uint64_t gen = prep_schema_generation(c->w);
	size_t off = 0;
	*n = *nops = 0;
	for (;;) {
		if (have - off < 5)
			return false;   /* not all here: the usual way */
		uint8_t type = b[off];
		uint32_t mlen = proto_get_u32(b + off + 1);
		if (mlen < 4 || mlen > have - off - 1)
			return false;
		const uint8_t *body = b + off + 5;
		size_t blen = mlen - 4, o = 0;
		const char *name;
		off += 1 + (size_t)mlen;
		if (type == PqMsg_Sync) {
			*len = off;
			return *n > 0;
		}
		if (*nops == 2 * CACHED_PARSES_MAX)
			return false;
		if (type == PqMsg_Describe) {
			/* of a statement parsed in this batch, whose description
			 * pgcat kept */
			if (blen < 2 || body[0] != 'S' || body[blen - 1] != 0)
				return false;
			uint32_t i = *n;
			while (i-- > 0 && strcmp(ps[i].name, (const char *)body + 1) != 0)
				;
			if (i >= *n || !ps[i].st || !ps[i].st->desc)
				return false;
			ops[(*nops)++] = (struct cached_op){ .parse = (uint8_t)i, .describe = true };
			continue;
		}
		if (type != PqMsg_Parse || *n == CACHED_PARSES_MAX || !proto_read_cstring(body, blen, &o, &name))
			return false;
		for (uint32_t i = 0; i < *n; i++)
			if (strcmp(ps[i].name, name) == 0)
				return false;
		const uint8_t *key = body + o;
		size_t klen = blen - o;
		/* A statement that may change settings is noted by the client's
		 * pump at its Parse (setters.h), to be tracked at its Binds:
		 * its Parse goes to a server. */
		if (params_sql_may_change((const char *)key, strnlen((const char *)key, klen)))
			return false;
		struct prep_stmt *st;
		if (!name[0]) {
			/* the unnamed statement: a text the pool maps already */
			st = prep_registry_find_hashed(r, prep_key_hash(key, klen), key, klen, prep_unnamed_generation(c));
			if (!st || !st->verified || !unnamed_plannable(st, key, klen))
				return false;
		} else {
			if (c->end.prep && prep_cmap_get(&c->end.prep->names, name))
				return false;   /* 42P05: the server path says it */
			st = prep_registry_find(r, false, key, klen, gen);
			if (!unverified_ok && (!st || !st->verified))
				return false;
		}
		ps[*n] = (struct cached_parse){ .name = name, .key = key, .key_len = klen, .st = st };
		ops[(*nops)++] = (struct cached_op){ .parse = (uint8_t)*n };
		(*n)++;
	}
}

enum prep_cached prep_client_parse_cached(struct client *c, bool unverified_ok)
{
	struct cached_parse ps[CACHED_PARSES_MAX];
	struct cached_op ops[2 * CACHED_PARSES_MAX];
	uint32_t n, nops;
	size_t len;
	if (!scan_cached_batch(c, unverified_ok, ps, &n, ops, &nops, &len))
		return PREP_CACHED_NO;
	struct prep_client *pc = prep_client_of(c);
	if (!pc)
		return PREP_CACHED_NO;
	struct prep_registry *r = &c->pool->prep;
	uint64_t gen = prep_schema_generation(c->w);
	struct buf *out = io_out(&c->io);
	/* The entries found stay while the batch is answered (the client's
	 * old unnamed statement, let go below, may have been the last hold
	 * on one of them). */
	for (uint32_t i = 0; i < n; i++)
		if (ps[i].st)
			ps[i].st->refs++;
	enum prep_cached done = PREP_CACHED_DONE;
	for (uint32_t k = 0; k < nops && done == PREP_CACHED_DONE; k++) {
		struct cached_parse *cp = &ps[ops[k].parse];
		if (ops[k].describe) {
			/* the server's own reply to a Describe of it, as it was */
			buf_add(out, cp->st->desc, cp->st->desc_len);
			continue;
		}
		if (!cp->name[0]) {
			/* the client's unnamed statement is the pool's from now
			 * on, as if on_unnamed_parse had mapped it on a server
			 * that held it */
			drop_unnamed_st(c);
			cp->st->refs++;
			pc->unnamed_st = cp->st;
			pc->unnamed_len = 0;
			cp->st->hits++;
			stats_add(c->pool->stats, STAT_UNNAMED_HITS, 1);
		} else {
			struct prep_stmt *st = prep_registry_get(r, false, cp->key, cp->key_len, gen);
			if (!st || !prep_cmap_put(&pc->names, cp->name, st)) {
				prep_stmt_unref(r, st);
				done = PREP_CACHED_FAILED;
				break;
			}
		}
		buf_add_bodyless(out, PqMsg_ParseComplete);
		stats_add(c->pool->stats, STAT_CLIENT_PARSE, 1);
	}
	for (uint32_t i = 0; i < n; i++)
		prep_stmt_unref(r, ps[i].st);
	if (done == PREP_CACHED_DONE)
		prep_drain_msg(c, (uint32_t)len);
	return done;
}

enum prep_action prep_client_message(struct client *c, struct server *s, const struct proto_frame *f,
				     uint32_t *stream_rest)
{
	*stream_rest = 0;
	uint32_t total = f->len + 1;
	struct buf *in = c->io.in;
	if (!server_prep(s)) {
		return PREP_FAILED;
	}
	switch (f->type) {
	case PqMsg_Parse: {
		if (config_prep_too_long(&c->w->cfg->general, total)) {
			size_t want = total < PROTO_LONG_HEAD ? total : PROTO_LONG_HEAD;
			if (buf_len(in) < want)
				return PREP_WAIT;
			return on_long_parse(c, s, buf_pullup(in, (size_t)want), want, total, stream_rest);
		}
		if (buf_len(in) < total)
			return PREP_WAIT;
		return on_parse(c, s, buf_pullup(in, total), total);
	}
	case PqMsg_Bind:
	case PqMsg_Describe: {
		/* Only the names at the front matter: the rest streams through. */
		size_t want = total < 5 + 2 * 256 ? total : 5 + 2 * 256;
		size_t have = buf_len(in);
		if (have < want)
			return PREP_WAIT;
		const uint8_t *m = buf_pullup(in, (size_t)want);
		size_t name_off;
		if (f->type == PqMsg_Bind) {
			size_t pl = name_len(m + 5, want - 5);
			if (5 + pl >= want) {
				if (want == total)
					return PREP_FORWARD;   /* malformed */
				if (have < total)
					return PREP_WAIT;
				m = buf_pullup(in, total);
				want = total;
				pl = name_len(m + 5, want - 5);
				if (5 + pl >= want)
					return PREP_FORWARD;
			}
			name_off = 5 + pl + 1;
		} else {
			if (want < 7 || m[5] != 'S')
				return PREP_FORWARD;   /* portal, or malformed */
			name_off = 6;
		}
		if (name_off >= want) {
			if (have < total)
				return PREP_WAIT;
			return PREP_FORWARD;
		}
		if (name_len(m + name_off, want - name_off) >= want - name_off && want < total) {
			if (have < total)
				return PREP_WAIT;
			m = buf_pullup(in, total);
			want = total;
		}
		struct prep_stmt *used = NULL;
		enum prep_action a = rewrite_name(c, s, f, m, want, name_off, stream_rest, &used);
		if (f->type == PqMsg_Describe && (a == PREP_FORWARD || a == PREP_DONE) && !note_describe(s, used))
			return PREP_FAILED;
		return a;
	}
	case PqMsg_Close: {
		if (buf_len(in) < total)
			return PREP_WAIT;
		return on_close(c, s, buf_pullup(in, total), total);
	}
	case PqMsg_Query: {
		enum prep_action a;
		if (config_prep_too_long(&c->w->cfg->general, total)) {
			size_t want = total < PROTO_LONG_HEAD ? total : PROTO_LONG_HEAD;
			if (buf_len(in) < want)
				return PREP_WAIT;
			a = prep_sql_long_query(c, s, buf_pullup(in, (size_t)want), want, total, stream_rest);
			if (a != PREP_FAILED)
				s->prep->seg_sent++;
			return a;
		}
		if (buf_len(in) < total)
			return PREP_WAIT;
		a = prep_sql_query(c, s, buf_pullup(in, total), total);
		if (a != PREP_FAILED)
			s->prep->seg_sent++;
		return a;
	}
	case PqMsg_Sync:
	case PqMsg_FunctionCall:
		s->prep->seg_sent++;
		return PREP_FORWARD;
	default:
		return PREP_FORWARD;
	}
}

bool prep_server_fail_query(struct server *s, const char *sqlstate, const char *message)
{
	/* The server raises the error itself: the transaction fails there as
	 * it would have, and the replies (ErrorResponse, ReadyForQuery) are
	 * real ones at their real position. */
	char clean[256];
	size_t n = 0;
	for (const char *m = message; *m && n + 1 < sizeof clean; m++)
		clean[n++] = *m == '\'' || *m == '$' || *m == '\\' ? '"' : *m;
	clean[n] = '\0';
	char sql[400];
	int w = snprintf(sql, sizeof sql,
			 "DO $pgcat$BEGIN RAISE EXCEPTION USING ERRCODE = '%.5s', MESSAGE = '%s'; END$pgcat$",
			 sqlstate, clean);
	if (w < 0 || (size_t)w >= sizeof sql)
		return false;
	prep_put_msg(server_output(s), PqMsg_Query, sql, (size_t)w + 1, NULL, 0);
	txn_sent(&s->txn, PqMsg_Query);
	if (s->prep)
		s->prep->unnamed_client = 0;   /* a simple Query drops the server's unnamed statement */
	if (s->prep && s->prep_on)
		s->prep->seg_sent++;
	return true;
}

bool prep_server_fail_bind(struct server *s, const char *sqlstate, const char *message)
{
	if (s->prep && s->prep_on)
		return send_error_bind(s, sqlstate, message);
	/* Without rewriting nothing replaces the server's error: a Bind of a
	 * statement whose name says why it does not exist. */
	static const uint8_t body[] = "\0pgcat_cross_shard_statement_refused\0\0\0\0\0\0";
	prep_put_msg(server_output(s), PqMsg_Bind, body, sizeof body, NULL, 0);
	txn_sent(&s->txn, PqMsg_Bind);
	return true;
}

bool prep_server_end_segment(struct server *s)
{
	struct prep_server *ps = s->prep;
	if (!ps || !s->prep_on)
		return false;
	struct prep_pend p = { .seg = ps->seg_sent, .swallow = true };
	if (!prep_server_push(ps, &ps->swallows, &p))
		return false;
	buf_add_bodyless(server_output(s), PqMsg_Sync);
	ps->seg_sent++;
	txn_sent(&s->txn, PqMsg_Sync);
	return true;
}

void prep_client_free(struct client *c)
{
	if (!c->end.prep)
		return;
	if (c->pool) {
		prep_cmap_clear(&c->end.prep->names, &c->pool->prep);
		drop_unnamed_st(c);
	}
	free(c->end.prep->unnamed);
	free(c->end.prep);
	c->end.prep = NULL;
}

void prep_client_trim(struct client *c)
{
	struct prep_client *pc = c->end.prep;
	if (!pc)
		return;
	if (pc->unnamed && pc->unnamed_len == 0) {
		free(pc->unnamed);
		pc->unnamed = NULL;
		pc->unnamed_cap = 0;
	}
	if (pc->names.n == 0 && pc->unnamed_len == 0 && !pc->unnamed_st) {
		free(pc->names.e);
		free(pc->unnamed);
		free(pc);
		c->end.prep = NULL;
	}
}

/* ---- cross-shard reads (fanout.c) ---- */

bool prep_client_statement(const struct client *c, const char *name, const uint8_t **key, size_t *keylen)
{
	const struct prep_client *pc = c->end.prep;
	if (!pc)
		return false;
	if (name[0]) {
		const struct prep_stmt *st = prep_cmap_get(&pc->names, name);
		if (!st || st->sql)
			return false;
		*key = st->key;
		*keylen = st->key_len;
		return true;
	}
	if (pc->unnamed_st) {
		*key = pc->unnamed_st->key;
		*keylen = pc->unnamed_st->key_len;
		return true;
	}
	/* the unnamed statement: the body of the last unnamed Parse, after its
	 * (empty) name */
	if (pc->unnamed_len < 6)
		return false;
	*key = pc->unnamed + 6;
	*keylen = pc->unnamed_len - 6;
	return true;
}

bool prep_client_adopt(struct client *c, const uint8_t *parse, uint32_t total)
{
	size_t off = 0;
	const char *name;
	struct prep_client *pc = prep_client_of(c);
	if (!pc || total < 5 || !proto_read_cstring(parse + 5, total - 5, &off, &name))
		return false;
	if (!name[0]) {
		drop_unnamed_st(c);
		if (pc->unnamed_cap < total) {
			uint8_t *b = realloc(pc->unnamed, total);
			if (!b)
				return false;
			pc->unnamed = b;
			pc->unnamed_cap = total;
		}
		memcpy(pc->unnamed, parse, total);
		pc->unnamed_len = total;
		pc->unnamed_gen++;
		return true;
	}
	if (prep_cmap_get(&pc->names, name))
		return true;
	struct prep_registry *reg = &c->pool->prep;
	struct prep_stmt *st = prep_registry_get(reg, false, parse + 5 + off, total - 5 - off,
						 prep_schema_generation(c->w));
	if (!st)
		return false;
	if (!prep_cmap_put(&pc->names, name, st)) {
		prep_stmt_unref(reg, st);
		return false;
	}
	return true;
}
