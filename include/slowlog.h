/* SPDX-License-Identifier: MIT */
/*
 * slowlog: the slow-query log (log_min_duration, per pool; issue 44,
 * doc/monitoring.md). A request (up to its ReadyForQuery) that took at
 * least the pool's log_min_duration is logged on one line: its
 * fingerprint and normalised text (libpg_query's: constants become $n),
 * its duration and how long its client waited for a server, the pool,
 * the user, the client's address, the server and the shard. Never a
 * parameter value, never a constant of the text: a text that cannot be
 * normalised (cut, or not SQL libpg_query reads) is not written.
 *
 * The record lives in the server connection serving the request: the
 * client side notes the text (its first Query or Parse) or the statement
 * a Bind runs, and who the client is; the pool notes the wait when it
 * grants the server; the server side, at the ReadyForQuery, decides and
 * writes. Nothing is noted while the pool's log_min_duration is 0 and
 * its query_stats off.
 *
 * The same notes serve the statistics per query shape (qstats.h): the
 * client side notes the shape's key too (qshape.h), the server side the
 * rows and errors of the answer, and counts the request at its
 * ReadyForQuery (server.c) before the slow-query log has its say.
 */
#ifndef PGCAT_SLOWLOG_H
#define PGCAT_SLOWLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Text kept of a request (a longer one is cut, and so not normalised:
 * its line says so, without text). */
#define SLOWLOG_SQL_MAX (8u * 1024)

struct slowlog_req {
	char *sql;                 /* the request's text, NUL-terminated (NULL until one is noted) */
	uint32_t len, cap;
	bool noted;                /* a text or a statement is noted for the request under way */
	bool cut;                  /* the text was longer than SLOWLOG_SQL_MAX */
	char stmt[64];             /* a Bind's prepared statement, its text not in the request */
	char client_addr[48];
	int client_port;
	uint64_t client_id;
	uint64_t wait_us;          /* the client's wait for this server (the pool's grant) */
	/* query_stats: the shape's key (qshape_key; 0: not known), and what
	 * the answer said: rows (CommandComplete), errors. */
	uint64_t qkey;
	uint64_t rows;
	uint32_t errors;
};

/* The pool gave the server to a client that waited wait_us for it: the
 * notes of the link before are forgotten. */
void slowlog_begin(struct slowlog_req *r, uint64_t wait_us);
/* Client side. The first text of the request (a Query's, a Parse's). */
void slowlog_note_text(struct slowlog_req *r, const char *sql, size_t len);
/* A Bind of statement name, when no text was noted in this request. */
void slowlog_note_statement(struct slowlog_req *r, const char *name);
/* The key of the request's shape (qstats.h). */
void slowlog_note_key(struct slowlog_req *r, uint64_t key);
/* Server side: a CommandComplete's tag (its rows counted), an error. */
void slowlog_note_complete(struct slowlog_req *r, const char *tag, size_t len);
void slowlog_note_error(struct slowlog_req *r);
/* Who the client is (once per request). */
void slowlog_note_client(struct slowlog_req *r, uint64_t client_id, const char *addr, int port);

/* Server side, at the request's ReadyForQuery: written when duration_us
 * reaches min_us; the record is made ready for the next request either
 * way. */
struct slowlog_where {
	const char *pool, *user;   /* the pool's database name and user */
	const char *host;          /* the server */
	int port, shard;
	uint64_t server_id;
};
void slowlog_done(struct slowlog_req *r, uint64_t duration_us, uint64_t min_us, const struct slowlog_where *where);

void slowlog_free(struct slowlog_req *r);

#endif
