/* SPDX-License-Identifier: MIT */
/*
 * notify_session: LISTEN and UNLISTEN answered by the normal session in
 * transaction mode (notify_session.h, SPEC §11).
 */
#include "notify_session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "link.h"
#include "notify.h"
#include "pktbuf.h"
#include "pool_types.h"
#include "sqllex.h"
#include "txn.h"

enum notify_sql notify_sql_parse(const char *sql, size_t len, char *channel, size_t channel_size)
{
	const char *nul = memchr(sql, '\0', len);
	if (nul)
		len = (size_t)(nul - sql);   /* where PostgreSQL stops reading */
	size_t i = sqllex_skip_blank(sql, len, 0);
	enum notify_sql kind;
	if (sqllex_keyword(sql, len, &i, "listen"))
		kind = NOTIFY_SQL_LISTEN;
	else if (sqllex_keyword(sql, len, &i, "unlisten"))
		kind = NOTIFY_SQL_UNLISTEN;
	else
		return NOTIFY_SQL_NONE;
	i = sqllex_skip_blank(sql, len, i);
	if (kind == NOTIFY_SQL_UNLISTEN && i < len && sql[i] == '*') {
		channel[0] = '\0';
		return sqllex_rest_is_empty(sql, len, i + 1) ? NOTIFY_SQL_UNLISTEN_ALL : NOTIFY_SQL_NONE;
	}
	/* Longer names are truncated, as PostgreSQL does (NAMEDATALEN). */
	char name[1024];
	if (!sqllex_ident(sql, len, &i, name, sizeof name) || !sqllex_rest_is_empty(sql, len, i))
		return NOTIFY_SQL_NONE;   /* the server says what is wrong with it */
	size_t n = strlen(name);
	if (n > NOTIFY_CHANNEL_MAX)
		n = NOTIFY_CHANNEL_MAX;
	if (n + 1 > channel_size)
		return NOTIFY_SQL_NONE;
	memcpy(channel, name, n);
	channel[n] = '\0';
	return kind;
}

static const char *tag_of(enum notify_sql kind)
{
	return kind == NOTIFY_SQL_LISTEN ? "LISTEN" : "UNLISTEN";
}

static bool in_transaction_mode(const struct client *c)
{
	return c->pool && pool_mode_per_transaction(c->pool->mode);
}

/* Now (autocommit) or at the transaction's commit (in). false: out of memory. */
static bool register_cmd(struct notify_client *nc, enum notify_sql kind, const char *channel, bool in_tx)
{
	bool listen = kind == NOTIFY_SQL_LISTEN;
	const char *ch = kind == NOTIFY_SQL_UNLISTEN_ALL ? NULL : channel;
	return in_tx ? notify_defer(nc, listen, ch) : notify_apply(nc, listen, ch);
}

static void send_tag(struct client *c, enum notify_sql kind)
{
	uint8_t storage[32];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_command_complete(&pb, tag_of(kind));
	client_send_pkt(c, &pb);
}

/* The ReadyForQuery after a LISTEN or UNLISTEN pgcat answered: with 'I',
 * once the channels are listened to (notify_hold_ready). */
static void send_ready(struct client *c, struct notify_client *nc, char status)
{
	if (status == 'I')
		notify_hold_ready(nc, status, false);
	else
		client_send_rfq(c, status);
}

/* A LISTEN or UNLISTEN by Query, answered: registered now, or at the
 * commit of the transaction (status 'T'), then its tag and ReadyForQuery. */
static void answer_query(struct client *c, enum notify_sql kind, const char *channel, char status)
{
	struct notify_client *nc = notify_client_get(c);
	if (!nc || !register_cmd(nc, kind, channel, status == 'T')) {
		client_send_error(c, "ERROR", SQLSTATE_OUT_OF_MEMORY, "out of memory");
		client_send_rfq(c, status);
		return;
	}
	send_tag(c, kind);
	send_ready(c, nc, status);
}

/* A Query of one LISTEN or UNLISTEN, idle: answered, its ReadyForQuery
 * once the channel is listened to. */
static enum notify_here idle_query(struct client *c, const struct proto_frame *f)
{
	uint32_t total = f->len + 1;
	if (total > CLIENT_INSPECT_MAX)
		return NOTIFY_HERE_NOT;
	if (buf_len(c->io.in) < total)
		return NOTIFY_HERE_WAIT;
	const char *sql = (const char *)buf_pullup(c->io.in, total) + 5;
	if (!sqllex_may_be_listen(sql, f->len - 4))
		return NOTIFY_HERE_NOT;   /* (every Query passes here: the first character decides) */
	char channel[NOTIFY_CHANNEL_MAX + 1];
	enum notify_sql kind = notify_sql_parse(sql, f->len - 4, channel, sizeof channel);
	if (kind == NOTIFY_SQL_NONE)
		return NOTIFY_HERE_NOT;
	buf_drain(c->io.in, total);
	answer_query(c, kind, channel, client_idle_status(c));
	return NOTIFY_HERE_ANSWERED;
}

/* ---- LISTEN and UNLISTEN as prepared statements and portals ---- */

static struct notify_stmt *stmt_find(struct notify_stmts *st, bool portal, const char *name)
{
	for (uint32_t i = 0; i < st->n; i++)
		if (st->v[i].portal == portal && strcmp(st->v[i].name, name) == 0)
			return &st->v[i];
	return NULL;
}

static void stmt_drop(struct notify_stmts *st, struct notify_stmt *x)
{
	free(x->name);
	*x = st->v[--st->n];
}

/* Made or replaced. false: out of memory. */
static bool stmt_put(struct notify_stmts *st, bool portal, const char *name, int cmd, const char *channel)
{
	struct notify_stmt *x = stmt_find(st, portal, name);
	if (!x) {
		if (st->n == st->cap) {
			uint32_t cap = st->cap ? st->cap * 2 : 2;
			struct notify_stmt *v = realloc(st->v, cap * sizeof *v);
			if (!v)
				return false;
			st->v = v;
			st->cap = cap;
		}
		char *copy = strdup(name);
		if (!copy)
			return false;
		x = &st->v[st->n++];
		x->name = copy;
		x->portal = portal;
	}
	x->cmd = cmd;
	snprintf(x->channel, sizeof x->channel, "%s", channel);
	return true;
}

/* Portals end with the implicit transaction of their Sync. */
static void portals_drop(struct notify_stmts *st)
{
	for (uint32_t i = st->n; i-- > 0;)
		if (st->v[i].portal)
			stmt_drop(st, &st->v[i]);
}

/* Longer names are not looked for (no driver makes them). */
#define NOTIFY_NAMES_PREFIX 512

/* The names at the front of f (Describe and Close: *kind, then a name;
 * Bind: portal and statement; Execute: portal), pointing into the input
 * until it is drained. false and *wait: more bytes needed first; false
 * alone: malformed or too long (the message is not pgcat's). */
static bool front_names(struct client *c, const struct proto_frame *f, uint8_t *kind, const char **first,
			const char **second, bool *wait)
{
	uint32_t total = f->len + 1;
	uint32_t need = total < 5 + NOTIFY_NAMES_PREFIX ? total : 5 + NOTIFY_NAMES_PREFIX;
	*wait = false;
	if (buf_len(c->io.in) < need) {
		*wait = true;
		return false;
	}
	const uint8_t *body = buf_pullup(c->io.in, need) + 5;
	size_t len = need - 5, off = 0;
	if (kind) {
		if (len < 1)
			return false;
		*kind = body[off++];
	}
	if (!proto_read_cstring(body, len, &off, first))
		return false;
	return !second || proto_read_cstring(body, len, &off, second);
}

/* Where the client's extended messages are answered: idle (between
 * transactions, or in a BEGIN pgcat holds) or linked to a server inside
 * its transaction, with nothing owed by the server. */
struct notify_where {
	bool linked;
	bool in_tx;                   /* LISTENs wait for the commit */
	char status;                  /* linked: the transaction's, for the Sync */
};

static struct notify_where where_idle(const struct client *c)
{
	return (struct notify_where){ .linked = false, .in_tx = c->tx == CLIENT_TX_HELD, .status = 0 };
}

/* The session sees every extended message while linked while the client
 * has LISTEN statements or portals, or a Sync to answer. */
static void watch_update(struct client *c, const struct notify_stmts *st)
{
	c->session_watch = st->n > 0 || st->await_sync;
}

/* A Parse of a LISTEN or UNLISTEN, named or not: the statement is pgcat's
 * from now on (until replaced or closed). A Parse of anything else
 * replaces pgcat's statement of that name. */
static enum notify_here ext_parse(struct client *c, const struct proto_frame *f, struct notify_where at)
{
	uint32_t total = f->len + 1;
	struct notify_client *nc = notify_client_of(c);
	if (total > CLIENT_INSPECT_MAX)
		return NOTIFY_HERE_NOT;
	if (buf_len(c->io.in) < total)
		return NOTIFY_HERE_WAIT;
	const uint8_t *body = buf_pullup(c->io.in, total) + 5;
	size_t off = 0;
	const char *name, *sql;
	if (!proto_read_cstring(body, f->len - 4, &off, &name))
		return NOTIFY_HERE_NOT;
	size_t text_at = off;
	char channel[NOTIFY_CHANNEL_MAX + 1];
	enum notify_sql kind = NOTIFY_SQL_NONE;
	if (sqllex_may_be_listen((const char *)body + text_at, f->len - 4 - text_at) &&
	    proto_read_cstring(body, f->len - 4, &off, &sql))
		kind = notify_sql_parse(sql, off - text_at - 1, channel, sizeof channel);
	struct notify_stmt *x = nc ? stmt_find(notify_stmts(nc), false, name) : NULL;
	if (kind == NOTIFY_SQL_NONE && (!x || !name[0])) {
		if (x) {   /* the unnamed statement is the server's now */
			stmt_drop(notify_stmts(nc), x);
			watch_update(c, notify_stmts(nc));
		}
		return NOTIFY_HERE_NOT;
	}
	if (!nc && !(nc = notify_client_get(c)))
		return NOTIFY_HERE_NOT;
	struct notify_stmts *st = notify_stmts(nc);
	if (name[0] && x && at.linked) {
		/* No skipping to the Sync inside a server's transaction: the
		 * server has the name from now on, and says what it makes of it. */
		stmt_drop(st, x);
		watch_update(c, st);
		return NOTIFY_HERE_NOT;
	}
	if (name[0] && x) {
		char msg[96 + NOTIFY_NAMES_PREFIX];
		snprintf(msg, sizeof msg, "prepared statement \"%s\" already exists", name);
		buf_drain(c->io.in, total);
		client_send_error(c, "ERROR", SQLSTATE_DUPLICATE_PSTATEMENT, msg);
		client_set_batch(c, CLIENT_BATCH_SKIP_TO_SYNC);
		return NOTIFY_HERE_ANSWERED;
	}
	bool ok = stmt_put(st, false, name, kind, channel);
	watch_update(c, st);
	if (!ok && at.linked)
		return NOTIFY_HERE_NOT;   /* (out of memory: the server's statement then) */
	buf_drain(c->io.in, total);
	if (!ok) {
		client_send_error(c, "ERROR", SQLSTATE_OUT_OF_MEMORY, "out of memory");
		client_set_batch(c, CLIENT_BATCH_SKIP_TO_SYNC);
		return NOTIFY_HERE_ANSWERED;
	}
	client_send_simple(c, PqMsg_ParseComplete);
	return NOTIFY_HERE_ANSWERED;
}

/* The other messages of a LISTEN statement or portal of pgcat's: answered
 * as PostgreSQL would. */
static enum notify_here ext_message(struct client *c, struct notify_client *nc, const struct proto_frame *f,
				    struct notify_where at)
{
	struct notify_stmts *st = notify_stmts(nc);
	uint32_t total = f->len + 1;
	bool wait = false;
	uint8_t kind = 0;
	const char *name = NULL, *stmt = NULL;
	if (f->type == PqMsg_Sync) {
		if (!at.in_tx)
			portals_drop(st);
		bool mine = st->await_sync;
		st->await_sync = false;
		watch_update(c, st);
		if (!mine)
			return NOTIFY_HERE_NOT;
		buf_drain(c->io.in, total);
		send_ready(c, nc, at.linked ? at.status : client_idle_status(c));
		return NOTIFY_HERE_ANSWERED;
	}
	if (st->n == 0)
		return NOTIFY_HERE_NOT;
	switch (f->type) {
	case PqMsg_Bind: {
		if (!front_names(c, f, NULL, &name, &stmt, &wait))
			return wait ? NOTIFY_HERE_WAIT : NOTIFY_HERE_NOT;
		const struct notify_stmt *x = stmt_find(st, false, stmt);
		if (!x) {
			struct notify_stmt *p = stmt_find(st, true, name);
			if (p) {   /* the portal is the server's now */
				stmt_drop(st, p);
				watch_update(c, st);
			}
			return NOTIFY_HERE_NOT;
		}
		char channel[NOTIFY_CHANNEL_MAX + 1];
		int cmd = x->cmd;
		memcpy(channel, x->channel, sizeof channel);
		bool ok = stmt_put(st, true, name, cmd, channel);
		watch_update(c, st);
		client_discard_message(c, total);
		if (!ok) {
			client_send_error(c, "ERROR", SQLSTATE_OUT_OF_MEMORY, "out of memory");
			client_set_batch(c, CLIENT_BATCH_SKIP_TO_SYNC);
			return NOTIFY_HERE_ANSWERED;
		}
		client_send_simple(c, PqMsg_BindComplete);
		return NOTIFY_HERE_ANSWERED;
	}
	case PqMsg_Describe: {
		if (!front_names(c, f, &kind, &name, NULL, &wait))
			return wait ? NOTIFY_HERE_WAIT : NOTIFY_HERE_NOT;
		if (!stmt_find(st, kind == 'P', name))
			return NOTIFY_HERE_NOT;
		buf_drain(c->io.in, total);
		if (kind == 'S') {   /* no parameters */
			uint8_t pd[7] = { PqMsg_ParameterDescription, 0, 0, 0, 6, 0, 0 };
			buf_add(client_output(c), pd, sizeof pd);
		}
		client_send_simple(c, PqMsg_NoData);
		return NOTIFY_HERE_ANSWERED;
	}
	case PqMsg_Execute: {
		if (!front_names(c, f, NULL, &name, NULL, &wait))
			return wait ? NOTIFY_HERE_WAIT : NOTIFY_HERE_NOT;
		const struct notify_stmt *x = stmt_find(st, true, name);
		if (!x)
			return NOTIFY_HERE_NOT;
		char channel[NOTIFY_CHANNEL_MAX + 1];
		enum notify_sql cmd = (enum notify_sql)x->cmd;
		memcpy(channel, x->channel, sizeof channel);
		client_discard_message(c, total);
		if (!register_cmd(nc, cmd, channel, at.in_tx)) {
			client_send_error(c, "ERROR", SQLSTATE_OUT_OF_MEMORY, "out of memory");
			client_set_batch(c, CLIENT_BATCH_SKIP_TO_SYNC);
			return NOTIFY_HERE_ANSWERED;
		}
		send_tag(c, cmd);
		st->await_sync = true;
		watch_update(c, st);
		return NOTIFY_HERE_ANSWERED;
	}
	case PqMsg_Close: {
		if (!front_names(c, f, &kind, &name, NULL, &wait))
			return wait ? NOTIFY_HERE_WAIT : NOTIFY_HERE_NOT;
		struct notify_stmt *x = stmt_find(st, kind == 'P', name);
		if (!x)
			return NOTIFY_HERE_NOT;
		stmt_drop(st, x);
		watch_update(c, st);
		buf_drain(c->io.in, total);
		client_send_simple(c, PqMsg_CloseComplete);
		return NOTIFY_HERE_ANSWERED;
	}
	default:
		return NOTIFY_HERE_NOT;
	}
}

enum notify_here notify_session_message(struct client *c, const struct proto_frame *f)
{
	if (!in_transaction_mode(c))
		return NOTIFY_HERE_NOT;
	struct notify_client *nc = notify_client_of(c);
	if (nc)
		notify_flush(nc);   /* what waited for the client's transaction to end */
	switch (f->type) {
	case PqMsg_Query:
		return idle_query(c, f);
	case PqMsg_Parse:
		return ext_parse(c, f, where_idle(c));
	default:
		return nc ? ext_message(c, nc, f, where_idle(c)) : NOTIFY_HERE_NOT;
	}
}

enum session_query notify_session_active_query(struct client *c, struct server *s, const struct proto_frame *f,
					       const char *sql, size_t len)
{
	if (!in_transaction_mode(c))
		return SESSION_QUERY_FORWARD;
	char channel[NOTIFY_CHANNEL_MAX + 1];
	enum notify_sql kind = notify_sql_parse(sql, len, channel, sizeof channel);
	if (kind == NOTIFY_SQL_NONE)
		return SESSION_QUERY_FORWARD;
	const struct txn *t = link_txn(s);
	if (t->outstanding > 0 || t->ext_pending)
		return SESSION_QUERY_WAIT;   /* its answer must come after theirs */
	buf_drain(c->io.in, (size_t)f->len + 1);
	if (t->tx_status == 'E') {
		client_send_error(c, "ERROR", SQLSTATE_IN_FAILED_TRANSACTION,
				  "current transaction is aborted, commands ignored until end of transaction block");
		client_send_rfq(c, 'E');
		return SESSION_QUERY_ANSWERED;
	}
	answer_query(c, kind, channel, t->tx_status);
	return SESSION_QUERY_ANSWERED;
}

enum session_query notify_session_active_extended(struct client *c, struct server *s, const struct proto_frame *f)
{
	if (!in_transaction_mode(c))
		return SESSION_QUERY_FORWARD;
	const struct txn *t = link_txn(s);
	struct notify_client *nc = notify_client_of(c);
	/* Answered here only with nothing owed by the server before it (its
	 * replies would come after pgcat's), inside a transaction that has
	 * not failed (the server refuses the statement itself then). With
	 * messages sent since the last Sync the server may hold its replies
	 * back until that Sync: the message goes to it. */
	if (t->tx_status != 'T' || t->ext_pending)
		return SESSION_QUERY_FORWARD;
	if (t->outstanding > 0)
		return SESSION_QUERY_WAIT;
	struct notify_where at = { .linked = true, .in_tx = true, .status = t->tx_status };
	enum notify_here r;
	if (f->type == PqMsg_Parse)
		r = ext_parse(c, f, at);
	else
		r = nc ? ext_message(c, nc, f, at) : NOTIFY_HERE_NOT;
	switch (r) {
	case NOTIFY_HERE_ANSWERED:
		return SESSION_QUERY_ANSWERED;
	case NOTIFY_HERE_WAIT:
		return SESSION_QUERY_MORE;
	case NOTIFY_HERE_NOT:
		break;
	}
	return SESSION_QUERY_FORWARD;
}

void notify_session_ready_held(struct client *c, bool committed)
{
	struct notify_client *nc = notify_client_of(c);
	if (!nc) {
		client_send_rfq(c, 'I');
		return;
	}
	notify_tx_end(nc, committed);
	notify_hold_ready(nc, 'I', true);
}

void notify_session_tx_end(struct client *c, bool committed, const void *reply, size_t reply_len)
{
	struct notify_client *nc = notify_client_of(c);
	const uint8_t *r = reply;
	/* The ReadyForQuery at its end waits for the LISTENs. */
	if (!nc || reply_len < 6 || r[reply_len - 6] != PqMsg_ReadyForQuery) {
		if (nc)
			notify_tx_end(nc, committed);
		buf_add(client_output(c), reply, reply_len);
		return;
	}
	notify_tx_end(nc, committed);
	buf_add(client_output(c), reply, reply_len - 6);
	notify_hold_ready(nc, (char)r[reply_len - 1], true);
}
