/* SPDX-License-Identifier: MIT */
/*
 * prep_sql: prepared statements in SQL, in a simple Query (see prepared.h):
 * PREPARE, EXECUTE and DEALLOCATE of a client's names rewritten to global
 * names (a PREPARE of pgcat's own sent first where the server lacks the
 * statement), or answered in place through an empty query or a DEALLOCATE
 * of the statement no server holds; DISCARD ALL and several statements in
 * one Query are left to the server.
 */
#include "prep_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "pktbuf.h"
#include "pool.h"
#include "proto.h"
#include "server.h"
#include "sqllex.h"
#include "stats.h"

static bool sql_ident(const char **sp, const char *end, char *out, size_t outsz)
{
	size_t i = 0;
	if (!sqllex_ident(*sp, (size_t)(end - *sp), &i, out, outsz))
		return false;
	*sp += i;
	return true;
}

/* Where the statement ends: its ';' (or the end), with only blanks and
 * semicolons after it (NULL: more than one statement). */
static const char *single_statement_end(const char *s, const char *end)
{
	size_t n = (size_t)(end - s), e = sqllex_statement_end(s, n, 0, NULL);
	if (e < n && !sqllex_rest_is_empty(s, n, e + 1))
		return NULL;
	return s + e;
}

/* Replace the client's Query with sql (same single reply slot). */
static void send_query(struct server *s, const char *sql, size_t len)
{
	uint8_t nul = 0;
	prep_put_msg(server_output(s), PqMsg_Query, sql, len, &nul, 1);
}

static bool push_repl_msg(struct server *s, uint8_t type_hint, const uint8_t *bytes, size_t len)
{
	(void)type_hint;
	struct prep_pend p = { .seg = s->prep->seg_sent, .repl = malloc(len), .repl_len = (uint32_t)len };
	if (!p.repl)
		return false;
	memcpy(p.repl, bytes, len);
	if (!prep_server_push(s->prep, &s->prep->repls, &p))
		return free(p.repl), false;
	return true;
}

/* The server answers an empty query; the client sees CommandComplete tag. */
static bool reply_command(struct server *s, const char *tag)
{
	uint8_t storage[128];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_command_complete(&pb, tag);
	if (pb.failed || !push_repl_msg(s, 'C', pb.data, pb.len))
		return false;
	send_query(s, "", 0);
	return true;
}

static bool reply_error(struct server *s, const char *sqlstate, const char *message)
{
	uint8_t storage[512];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_error(&pb, "ERROR", sqlstate, message);
	if (pb.failed || !push_repl_msg(s, 'E', pb.data, pb.len))
		return false;
	static const char q[] = "DEALLOCATE " PREP_ERROR_NAME;
	send_query(s, q, sizeof q - 1);
	return true;
}

/* Text for an SQL PREPARE of st under global name g. */
static char *prepare_sql(const struct prep_stmt *st, const char *g, size_t *len)
{
	const char *body = (const char *)st->key;
	size_t n = strlen(g) + strlen(body) + 16;
	char *q = malloc(n);
	if (!q)
		return NULL;
	int w = snprintf(q, n, "PREPARE %s %s%s", g, st->sql ? "" : "AS ", body);
	*len = w < 0 ? 0 : (size_t)w;
	return q;
}

enum prep_action prep_sql_long_query(struct client *c, struct server *s, const uint8_t *m, size_t have,
				     uint32_t total, uint32_t *stream_rest)
{
	const char *sql = (const char *)m + 5;
	const char *end = memchr(sql, '\0', have - 5);
	if (!end)
		end = sql + (have - 5);
	const char *p = prep_sql_space(sql, end);
	/* The simple protocol ends the server's unnamed statement. */
	s->prep->unnamed_client = 0;
	const char *w = p;
	bool rewritten = prep_sql_word(&w, end, "execute") || prep_sql_word(&w, end, "deallocate");
	w = p;
	if (!rewritten && prep_sql_word(&w, end, "prepare"))
		rewritten = !prep_sql_word(&w, end, "transaction");
	if (!rewritten)
		return PREP_FORWARD;   /* streamed through */
	char msg[240];
	snprintf(msg, sizeof msg,
		 "PREPARE, EXECUTE or DEALLOCATE too long to rewrite: %u bytes, over prepared_statements_max_length",
		 total);
	if (!reply_error(s, "54000", msg))
		return PREP_FAILED;
	*stream_rest = total;   /* discarded as it comes, never held */
	return PREP_DISCARD;
}

static enum prep_action sql_statement(struct client *c, struct server *s, const char *sql, size_t len);

enum prep_action prep_sql_query(struct client *c, struct server *s, const uint8_t *m, uint32_t total)
{
	struct prep_server *ps = s->prep;
	const char *sql = (const char *)m + 5;
	const char *end = sql + (total - 5);
	const char *p = prep_sql_space(sql, end);
	/* The simple protocol ends the server's unnamed statement (the
	 * client's Query, or pgcat's in its place). */
	ps->unnamed_client = 0;
	/* PREPARE, EXECUTE, DEALLOCATE start so; anything else is left alone
	 * (looked at first: a NUL is no letter, and where one ends the text
	 * sooner the text is read again below) */
	char first = p < end ? (char)(*p | 0x20) : 0;
	if (first != 'p' && first != 'e' && first != 'd')
		return PREP_FORWARD;
	return sql_statement(c, s, sql, total - 5);
}

/* prep_sql_query's text that may be PREPARE, EXECUTE or DEALLOCATE (a
 * call of its own: the usual Query, none of them, never makes its frame). */
static __attribute__((noinline)) enum prep_action sql_statement(struct client *c, struct server *s, const char *sql,
								 size_t len)
{
	struct prep_server *ps = s->prep;
	const char *end = sql + len;
	/* PostgreSQL reads the text up to its first NUL (its own end) */
	const char *nul = memchr(sql, '\0', len);
	if (nul)
		end = nul;
	const char *p = prep_sql_space(sql, end);
	char first = p < end ? (char)(*p | 0x20) : 0;
	if (first != 'p' && first != 'e' && first != 'd')
		return PREP_FORWARD;
	const char *stop = single_statement_end(p, end);
	char name[128];
	bool ok = true;
	struct prep_client *pc = prep_client_of(c);
	if (!pc) {
		return PREP_FAILED;
	}
	struct prep_registry *r = prep_reg_of(s);
	if (prep_sql_word(&p, end, "discard")) {
		/* What DISCARD ALL undoes is taken from the server's reply (it
		 * may fail, inside a transaction block), as when it comes through
		 * the extended protocol: prep_server_message. */
		return PREP_FORWARD;
	}
	if (!stop)
		return PREP_FORWARD;   /* several statements: not rewritten */
	if (prep_sql_word(&p, end, "deallocate")) {
		(void)prep_sql_word(&p, end, "prepare");
		if (prep_sql_word(&p, end, "all")) {
			prep_cmap_clear(&pc->names, r);
			/* Drivers drop their statements after DDL or a rollback and
			 * prepare them again: afresh, as on their own session. */
			prep_schema_changed(c->w, "DEALLOCATE ALL");
			ok = reply_command(s, "DEALLOCATE ALL");
		} else if (sql_ident(&p, end, name, sizeof name)) {
			if (prep_cmap_del(&pc->names, r, name)) {
				ok = reply_command(s, "DEALLOCATE");
			} else {
				char msg[200];
				snprintf(msg, sizeof msg, "prepared statement \"%s\" does not exist", name);
				ok = reply_error(s, "26000", msg);
			}
		} else {
			return PREP_FORWARD;   /* a syntax error: the server's */
		}
	} else if (prep_sql_word(&p, end, "prepare")) {
		if (prep_sql_word(&p, end, "transaction") || !sql_ident(&p, end, name, sizeof name))
			return PREP_FORWARD;
		if (prep_cmap_get(&pc->names, name)) {
			char msg[200];
			snprintf(msg, sizeof msg, "prepared statement \"%s\" already exists", name);
			ok = reply_error(s, "42P05", msg);
		} else {
			/* Key: the text after the name, "(types) AS query". */
			size_t klen = (size_t)(stop - p);
			struct prep_stmt *st = prep_registry_get(r, true, (const uint8_t *)p, klen,
								 prep_schema_generation(c->w));
			ok = st && prep_cmap_put(&pc->names, name, st);
			if (st && !ok)
				prep_stmt_unref(r, st);
			if (ok && prep_sset_has(&ps->set, st)) {
				prep_count_hit(c, s, st);
				ok = reply_command(s, "PREPARE");
			} else if (ok) {
				char g[PREP_GNAME_MAX];
				prep_gname(g, st, ps->set.gen);
				size_t qlen;
				char *q = prepare_sql(st, g, &qlen);
				bool sure = prep_server_settled(s, st);
				ok = q && prep_sset_add(&ps->set, st);
				if (ok) {
					send_query(s, q, qlen);
					st->refs++;
					struct prep_pend pp = { .seg = ps->seg_sent, .st = st, .cname = strdup(name),
								.gen = ps->set.gen, .sure = sure };
					ok = prep_server_push(ps, &ps->sqlpreps, &pp);
					if (!ok)
						prep_pend_release(r, &pp);
					ps->misses++;
					st->misses++;
					stats_add(c->pool->stats, STAT_PREPARED_MISSES, 1);
				}
				free(q);
			}
		}
	} else if (prep_sql_word(&p, end, "execute")) {
		const char *name_at = p;
		if (!sql_ident(&p, end, name, sizeof name))
			return PREP_FORWARD;
		(void)name_at;
		struct prep_stmt *st = prep_cmap_get(&pc->names, name);
		if (!st) {
			char msg[200];
			snprintf(msg, sizeof msg, "prepared statement \"%s\" does not exist", name);
			ok = reply_error(s, "26000", msg);
		} else {
			char g[PREP_GNAME_MAX];
			if (prep_sset_has(&ps->set, st)) {
				prep_count_hit(c, s, st);
			} else {
				/* A PREPARE of its own first: a whole segment the client
				 * never sees (its Z counts as one more outstanding). */
				prep_gname(g, st, ps->set.gen);
				size_t qlen;
				char *q = prepare_sql(st, g, &qlen);
				bool sure = prep_server_settled(s, st);
				ok = q && prep_sset_add(&ps->set, st);
				if (ok) {
					send_query(s, q, qlen);
					st->refs++;
					struct prep_pend pp = { .seg = ps->seg_sent, .st = st, .gen = ps->set.gen, .sure = sure };
					struct prep_pend sw = { .seg = ps->seg_sent, .swallow = true };
					ok = prep_server_push(ps, &ps->sqlpreps, &pp) && prep_server_push(ps, &ps->swallows, &sw);
					ps->seg_sent++;
					txn_sent(&s->txn, PqMsg_Query);
					ps->misses++;
					st->misses++;
					stats_add(c->pool->stats, STAT_PREPARED_MISSES, 1);
				}
				free(q);
			}
			if (ok) {
				prep_gname(g, st, ps->set.gen);
				size_t gl = strlen(g);
				size_t restl = (size_t)(end - p);
				char *q = malloc(8 + 1 + gl + 1 + restl + 1);
				ok = q != NULL;
				if (ok) {
					int w = snprintf(q, 8 + 1 + gl + 1 + restl + 1, "EXECUTE %s %.*s", g, (int)restl, p);
					send_query(s, q, w < 0 ? 0 : (size_t)w);
					free(q);
				}
			}
		}
	} else {
		return PREP_FORWARD;
	}
	if (!ok) {
		return PREP_FAILED;
	}
	prep_drain_msg(c, (uint32_t)len + 5);   /* the whole Query message */
	return PREP_DONE;
}
