/* SPDX-License-Identifier: MIT */
/*
 * client: one client connection's state machine (startup, login, idle,
 * waiting, active) and the client-to-server half of the byte pump. Messages
 * are forwarded by header; only startup, authentication and short Query
 * texts (for search_path tracking) are read whole.
 *
 * The startup and authentication (login.c) and what an idle client's
 * messages become in the normal session (session_normal.c) sit above this
 * file: it reaches them only through the tables the worker installs
 * (w->login, w->normal_session; session.h), never by name.
 */
#include "client.h"
#include "tcp_tune.h"

#include <openssl/ssl.h>

#include "tls.h"
#include "route.h"

#include <arpa/inet.h>
#include <assert.h>
#include <stdatomic.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>
#include <time.h>

#include "auth.h"
#include "cancel.h"
#include "config.h"
#include "buf_msg.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "proto.h"
#include "ryw.h"
#include "session.h"
#include "link.h"
#include "shm.h"
#include "qshape.h"
#include "slowlog.h"
#include "setters.h"
#include "shardkey.h"
#include "sqllex.h"
#include "stats.h"
#include "txn.h"
#include "context.h"

static void client_read_cb(struct io *io, void *arg);
static void client_drain_cb(struct io *io, void *arg);
static void client_event_cb(struct io *io, enum io_event what, int err, void *arg);
static const struct io_ops client_io_ops = { client_read_cb, client_drain_cb, client_event_cb, CLIENT_OUT_BUDGET / 2,
					      offsetof(struct client, io) };

static const struct client_end_events client_end_events;
static const struct pool_waiter_events client_wait_events;

/* What the server side sees of this client (client_end.h), and what the
 * pool does of it while it waits (pool.h). */
static void init_end(struct client *c)
{
	list_init(&c->wait.node);
	c->wait.ev = &client_wait_events;
	c->wait.client_id = c->id;
	c->wait.is_client = true;
	c->end.ev = &client_end_events;
	c->end.io = &c->io;
	c->end.params = &c->params;
	c->end.client_id = c->id;
	c->end.out_budget = CLIENT_OUT_BUDGET;
}

struct client *client_new(struct worker *w, int fd, bool is_unix)
{
	struct client *c = calloc(1, sizeof *c);
	if (!c) {
		evutil_closesocket(fd);
		return NULL;
	}
	c->w = w;
	c->id = ++w->next_id;
	c->is_unix = is_unix;
	params_init(&c->params);
	params_init(&c->startup_params);
	list_init(&c->node);
	c->connect_us = c->state_since_us = c->last_activity_us = w->now_us;
	init_end(c);
	c->session = w->normal_session;
	if (!io_open(&c->io, w->base, &w->flusher, fd, CLIENT_READ_HIGH_WATER, &client_io_ops)) {
		evutil_closesocket(fd);
		free(c);
		return NULL;
	}
	c->role_override = 0;            /* ROUTER_ROLE_NONE */
	c->count_slot = -1;
	c->primary_reads_override = -1;
	c->shard_override = -1;
	c->peer_family = AF_UNIX;
	w->n_clients++;
	atomic_store_explicit(&w->shm->h->workers[w->id].clients, w->n_clients, memory_order_relaxed);
	c->state = CLIENT_CLOSED;
	return c;
}

void client_accept(struct worker *w, int fd, const struct sockaddr *sa, int salen, bool is_unix)
{
	struct client *c = client_new(w, fd, is_unix);
	if (!c)
		return;
	if (is_unix) {
		/* no address */
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		c->peer.v4 = in->sin_addr;
		c->peer_family = AF_INET;
		c->port = ntohs(in->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		c->peer.v6 = in6->sin6_addr;
		c->peer_family = AF_INET6;
		c->port = ntohs(in6->sin6_port);
	}
	(void)salen;
	/* TCP_NODELAY and SO_KEEPALIVE come from the listening socket
	 * (worker.c, listener_options); the keepalive timings and
	 * TCP_USER_TIMEOUT are set here, only when configured, so that a
	 * reload back to 0 leaves new connections with the kernel's. */
	const struct config_general *g = &w->cfg->general;
	if (!is_unix && (g->tcp_keepidle || g->tcp_keepintvl || g->tcp_keepcnt || g->tcp_user_timeout)) {
		const struct io_tcp_tuning t = { g->tcp_keepalive, g->tcp_keepidle, g->tcp_keepintvl, g->tcp_keepcnt,
						 g->tcp_user_timeout };
		char why[160];
		if (!io_tcp_tune(fd, &t, why, sizeof why))
			log_warning("C-%llu: %s", (unsigned long long)c->id, why);
	}
	client_set_state(c, CLIENT_STARTUP);
	char a[CLIENT_ADDR_STRLEN];
	log_debug("C-%llu %s:%d: new connection", (unsigned long long)c->id, client_addr_str(c, a), c->port);
	/* Last: the startup packet may be read and answered (or the client
	 * closed and freed) right here. */
	io_read_now(&c->io);
}

/* ---- the welcome's wait for its pool's parameters (the welcome: client_conn.c) ---- */

void client_on_defaults_known(struct client *c)
{
	if (c->state != CLIENT_LOGIN_WAIT)
		return;
	client_send_welcome(c);
	if (c->state == CLIENT_IDLE)
		client_process(c);
}

void client_on_defaults_failed(struct client *c, const char *sqlstate, const char *message)
{
	if (c->state != CLIENT_LOGIN_WAIT)
		return;
	client_close(c, sqlstate, "%s", message);
}

/* ---- answering requests pgcat cannot pass on ---- */

void client_discard_message(struct client *c, uint32_t total)
{
	struct buf *in = c->io.in;
	size_t have = buf_len(in);
	if (have >= total) {
		buf_drain(in, total);
	} else {
		buf_drain(in, have);
		c->skip_remaining = total - (uint32_t)have;
	}
}

/* The request at the head of the input is answered with an error: a Query
 * or FunctionCall is consumed with ReadyForQuery, an extended batch is
 * skipped to its Sync. */
static void fail_current_request(struct client *c, const char *sqlstate, const char *msg)
{
	struct buf *in = c->io.in;
	client_send_error(c, "ERROR", sqlstate, msg);
	uint8_t hdr[5];
	if (buf_copyout(in, hdr, 5) == 5 && (hdr[0] == PqMsg_Query || hdr[0] == PqMsg_FunctionCall)) {
		uint32_t total = proto_get_u32(hdr + 1) + 1;
		client_discard_message(c, total);
		client_send_rfq(c, client_idle_status(c));
		return;
	}
	client_set_batch(c, CLIENT_BATCH_SKIP_TO_SYNC);
}

void client_on_checkout_failed(struct client *c, const char *sqlstate, const char *message)
{
	if (c->state == CLIENT_CLOSED)
		return;
	/* On a pgbouncer.ini, as PgBouncer: a client no server could be had
	 * for is closed with the reason (its log line "closing because: ..."
	 * is what operators alert on). */
	if (c->w->cfg->pgbouncer) {
		client_close(c, sqlstate, "%s", message);
		return;
	}
	client_set_state(c, CLIENT_IDLE);
	fail_current_request(c, sqlstate, message);
	client_process(c);
}

void client_clear_pending_error(struct client *c)
{
	free(c->pending_error);
	c->pending_error = NULL;
}

static void set_pending_error(struct client *c, const char *sqlstate, const char *message);

void client_fail_transaction(struct client *c, const char *sqlstate, const char *message)
{
	client_set_tx(c, CLIENT_TX_FAILED);
	set_pending_error(c, sqlstate, message);
}

/* Without memory for the text, the client still gets an error: the generic
 * one of a failed transaction. */
static void set_pending_error(struct client *c, const char *sqlstate, const char *message)
{
	size_t n = strnlen(message, 255);
	struct client_pending_error *e = malloc(sizeof *e + n + 1);
	client_clear_pending_error(c);
	if (!e)
		return;
	snprintf(e->sqlstate, sizeof e->sqlstate, "%s", sqlstate);
	memcpy(e->message, message, n);
	e->message[n] = '\0';
	c->pending_error = e;
}

void client_on_server_lost(struct client *c, struct server *s, bool may_replay, const char *sqlstate,
			   const char *message)
{
	if (c->state == CLIENT_CLOSED)
		return;
	/* Paused for that server's backlog (pause_for_server): it will never
	 * drain now, so nothing else would resume reading. */
	if (c->paused) {
		c->paused = false;
		io_pause(&c->io, false);
	}
	struct pool *p = c->pool;
	/* (retry_on without a copy: nothing of the request was sent yet.) */
	const struct txn *t = link_txn(s);
	bool half_sent = link_reply_half_sent(s);
	if (may_replay && c->retry_on && !t->req_data && !half_sent && pool_mode_per_transaction(p->mode) &&
	    !c->end.close_when_released && c->io.in) {
		/* A read whose replica died before answering: the same bytes go
		 * to another server (SPEC §4), once. */
		log_info("C-%llu %s@%s: server lost before answering (%s); read sent again elsewhere",
			 (unsigned long long)c->id, client_user(c), client_database(c), message);
		link_server_failed(s, message);
		if (c->fwd_remaining > 0) {
			buf_drain(c->io.in, c->fwd_remaining);   /* the rest of a message the copy holds whole */
			c->fwd_remaining = 0;
		}
		size_t copied = c->retry ? buf_len(c->retry) : 0;
		if (copied > 0) {
			if (!io_in_prepend(&c->io, buf_head(c->retry), copied)) {
				client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
				return;
			}
			buf_drain(c->retry, copied);
		}
		client_reply_started(c);
		/* What the client already got (ParseComplete, RowDescription...)
		 * comes again from the next server: dropped there. */
		c->end.retry_skip = t->req_msgs;
		client_set_state(c, CLIENT_IDLE);
		client_process(c);
		return;
	}
	client_reply_started(c);
	/* Why no replay (read retry, SPEC §4): for the log, to tell a reply
	 * that had started from a request that could not be copied. */
	log_info("C-%llu %s@%s: %s: %s (retry %s, reply started %s, half a message %s)", (unsigned long long)c->id,
		 client_user(c), client_database(c), may_replay ? "server connection lost" : "transaction ended",
		 message, may_replay && c->retry_on ? "on" : "off",
		 t->req_data ? "yes" : "no", half_sent ? "yes" : "no");
	if (p->mode == POOL_MODE_SESSION || half_sent || c->end.close_when_released ||
	    (c->end.no_tx_blocks && t->tx_status != 'I')) {
		/* Session mode: the session is gone with its server. Half a server
		 * message forwarded: the client's stream cannot be repaired.
		 * Statement mode: a transaction block was refused. */
		client_close(c, sqlstate, "%s", message);
		return;
	}
	if (c->fwd_remaining > 0) {
		c->skip_remaining = c->fwd_remaining;
		c->fwd_remaining = 0;
	}
	bool in_tx = t->tx_status != 'I';
	uint32_t outstanding = t->outstanding;
	bool ext_pending = t->ext_pending;
	client_set_state(c, CLIENT_IDLE);
	if (outstanding > 0 || ext_pending) {
		/* A request in flight: the error answers it now. */
		client_send_error(c, "ERROR", sqlstate, message);
		if (in_tx)
			client_set_tx(c, CLIENT_TX_FAILED);
		for (uint32_t i = 0; i < outstanding; i++)
			client_send_rfq(c, client_idle_status(c));
		if (ext_pending)
			client_set_batch(c, CLIENT_BATCH_SKIP_TO_SYNC);
	} else {
		/* Idle inside a transaction: the next message gets the error. */
		if (in_tx)
			client_set_tx(c, CLIENT_TX_FAILED);
		set_pending_error(c, sqlstate, message);
	}
	client_process(c);
}

/* ---- linked: the client-to-server pump ---- */

static void pause_for_server(struct client *c)
{
	if (!c->paused) {
		c->paused = true;
		io_pause(&c->io, true);
	}
}

void client_resume_reading(struct client *c)
{
	if (c->state == CLIENT_CLOSED || !c->paused)
		return;
	c->paused = false;
	io_pause(&c->io, false);
	client_process(c);
}

/* Validate the header at the head of the input. false: closed or need more. */
static bool read_header(struct client *c, struct proto_frame *f)
{
	uint8_t hdr[5];
	if (io_head(c->io.in, hdr, 5, 5) == 0)
		return false;
	int64_t max = c->w->cfg->general.max_packet_size;
	uint32_t limit = max > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)max;
	switch (proto_frame_header(hdr, 5, limit, f)) {
	case PROTO_FRAME_OK:
		break;
	case PROTO_FRAME_NEED_MORE:
		return false;
	case PROTO_FRAME_BAD_LENGTH:
		client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "invalid message length");
		return false;
	case PROTO_FRAME_TOO_LONG:
		client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "message of %u bytes exceeds max_packet_size", f->len);
		return false;
	}
	if (!proto_frontend_type_valid(f->type)) {
		client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "invalid frontend message type %d", f->type);
		return false;
	}
	return true;
}

/* A SET/RESET the client sends: its session and the server's change alike. */
static void track_settings(struct client *c, struct server *s, const char *sql, size_t len)
{
	/* A quick look first, on every request: most texts cannot change a
	 * setting (params.h). */
	if (!params_sql_may_change(sql, len))
		return;
	/* What both sides were before the request: the change sticks only if
	 * the statement succeeds and its transaction commits (server.c). */
	struct txn *t = link_txn(s);
	struct params *server_params = link_server_params(s);
	bool first = txn_set_snapshot(t, &c->params, server_params);
	unsigned r = params_track_sql(&c->params, sql, len, &c->startup_params);
	if (r & PARAMS_CHANGED)
		r |= params_track_sql(server_params, sql, len, NULL);
	if (r & PARAMS_UNTRACKED)
		t->untracked = true;
	txn_set_done(t, (r & PARAMS_CHANGED) != 0, first);
}

#define RETRY_MAX (64u * 1024)

/* Keep a copy of a read's message while nothing came back yet. Not for
 * messages that are not whole here, big ones, or a Parse that prepared
 * statements rewrite (its name is already taken on the client's side). */
static void capture_for_retry(struct client *c, const struct proto_frame *f, bool prep)
{
	uint32_t total = f->len + 1;
	bool named_parse = false;
	if (prep && f->type == PqMsg_Parse && buf_len(c->io.in) >= 6) {
		uint8_t b[6];
		buf_copyout(c->io.in, b, 6);
		named_parse = b[5] != 0;
	}
	if (named_parse || buf_len(c->io.in) < total ||
	    (c->retry ? buf_len(c->retry) : 0) + total > RETRY_MAX) {
		client_drop_retry(c);
		return;
	}
	if (!c->retry && !(c->retry = buf_new(BUF_SMALL))) {
		client_drop_retry(c);
		return;
	}
	if (buf_add(c->retry, buf_head(c->io.in), total) != 0)
		client_drop_retry(c);
}

/* What the pump does after a step on one message: go on with the same
 * message, take the next one, or stop (wait for bytes, or the link moved,
 * or the client closed). */
enum pump_step { PUMP_ON, PUMP_NEXT, PUMP_STOP };

/* What the pump does with a check's answer on message f (the shard guard's,
 * the write gate's: route.h). */
static enum pump_step active_step(struct client *c, struct server *s, enum route_active ra,
				  const struct route_active_decision *rd)
{
	client_read_limit(c, rd->read_need);
	switch (ra) {
	case ROUTE_ACTIVE_FORWARD:
		return PUMP_ON;
	case ROUTE_ACTIVE_WAIT:
		return PUMP_STOP;
	case ROUTE_ACTIVE_CONSUMED:
		/* refused on the server (its error comes in turn) */
		buf_drain(c->io.in, rd->consume);
		client_reply_started(c);   /* what was captured for a replay is incomplete now */
		return PUMP_NEXT;
	case ROUTE_ACTIVE_ASK:
		/* the server is asked first; its answer resumes this pump */
		if (!link_ask_placement(s, rd->ask_table, rd->ask_sql)) {
			client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
			return PUMP_STOP;
		}
		return PUMP_STOP;
	case ROUTE_ACTIVE_CROSS:      /* (the session's guard turns it into one of the others) */
	case ROUTE_ACTIVE_CROSSED:    /* the transaction went on to other shards: no longer linked */
		return PUMP_STOP;
	}
	return PUMP_ON;
}

/* Sharding: each statement of the transaction is checked against the
 * server's shard (route.h) by the session's guard. */
static enum pump_step guard_step(struct client *c, struct server *s, const struct proto_frame *f)
{
	struct route_active_decision rd;
	enum route_active ra = c->session->guard(c, s, f, &rd);
	c->shard_phase = rd.phase;
	return active_step(c, s, ra, &rd);
}

/* A link handed out while the pool's writes were paused (txn.h's
 * write_gated): what might write is refused on the server (route.h). */
static enum pump_step gate_step(struct client *c, struct server *s, const struct proto_frame *f)
{
	struct route_active_decision rd = { .read_need = 0 };
	if (!c->session->write_gate)
		return PUMP_ON;
	return active_step(c, s, c->session->write_gate(c, s, f, &rd), &rd);
}

/* Prepared statements: the messages rewritten need their bytes (Bind and
 * Describe: the names at the front) before anything is counted. false:
 * not here yet (the read watermark lets a long one in). */
static bool prep_bytes_here(struct client *c, const struct proto_frame *f)
{
	uint32_t total = f->len + 1;
	size_t need = (f->type == PqMsg_Bind || f->type == PqMsg_Describe) && total > 5 + 512 ? 5 + 512 : total;
	if (f->type == PqMsg_Sync || f->type == PqMsg_FunctionCall)
		need = 0;
	else if ((f->type == PqMsg_Parse || f->type == PqMsg_Query) && config_prep_too_long(&c->w->cfg->general, total))
		need = total < PROTO_LONG_HEAD ? total : PROTO_LONG_HEAD;   /* never held whole */
	if (buf_len(c->io.in) < need) {
		/* A message bigger than the read watermark (a long query): let
		 * it all in, max_packet_size bounds it. */
		client_read_limit(c, (uint32_t)need);
		return false;
	}
	client_read_limit(c, 0);
	return true;
}

/* The session's word on a message it asked to see (LISTEN, SPEC §11). */
static enum pump_step session_step(struct client *c, enum session_query q)
{
	switch (q) {
	case SESSION_QUERY_FORWARD:
		return PUMP_ON;
	case SESSION_QUERY_ANSWERED:
		return PUMP_NEXT;
	case SESSION_QUERY_WAIT:
		c->wait_answer = true;
		return PUMP_STOP;
	case SESSION_QUERY_MORE:
		return PUMP_STOP;
	}
	return PUMP_ON;
}

/* Who the request's client is, for the slow-query log (slowlog.h; not
 * written for query_stats alone: the address costs a formatting). */
static void note_slowlog_client(const struct client *c, struct server *s)
{
	if (!c->pool->log_min_duration_us)
		return;
	char a[CLIENT_ADDR_STRLEN];
	slowlog_note_client(link_slowlog(s), c->id, client_addr_str(c, a), c->port);
}

/* A Bind of a statement parsed in an earlier request: its name, for the
 * slow-query log (its text is not in this request), and its shape's key
 * for query_stats (noted at its Parse). */
static void note_slowlog_bind(struct client *c, struct server *s, const struct proto_frame *f)
{
	uint32_t total = f->len + 1;
	size_t head = total < PROTO_LONG_HEAD ? total : PROTO_LONG_HEAD;
	const char *m = buf_len(c->io.in) >= head ? (const char *)buf_pullup(c->io.in, head) : NULL;
	if (!m)
		return;   /* (its names not read yet: not waited for, the request is not held for a log line) */
	size_t pl = strnlen(m + 5, head - 5);
	if (5 + pl + 1 >= head)
		return;
	char name[64];
	size_t nl = strnlen(m + 5 + pl + 1, head - 5 - pl - 1);
	size_t keep = nl < sizeof name - 1 ? nl : sizeof name - 1;
	memcpy(name, m + 5 + pl + 1, keep);
	name[keep] = '\0';
	note_slowlog_client(c, s);
	/* (the name is the slow-query log's; query_stats wants the key) */
	slowlog_note_statement(link_slowlog(s), c->pool->log_min_duration_us ? name : "");
	if (c->pool->query_stats)
		slowlog_note_key(link_slowlog(s), qshape_names_get(c->qnames, m + 5 + pl + 1, nl));
}

/* A Close of a statement: query_stats forgets its shape (qshape.h). */
static void forget_statement_shape(struct client *c, const struct proto_frame *f)
{
	uint32_t total = f->len + 1;
	size_t head = total < PROTO_LONG_HEAD ? total : PROTO_LONG_HEAD;
	const char *m = buf_len(c->io.in) >= head && head > 6 ? (const char *)buf_pullup(c->io.in, head) : NULL;
	if (!m || m[5] != 'S')
		return;   /* (a portal's, or not read yet: the name stays, harmless) */
	size_t nl = strnlen(m + 6, head - 6);
	if (6 + nl < head)
		qshape_names_del(c->qnames, m + 6, nl);
}

/* A Query or a Parse, read whole for what pgcat learns of its text:
 * LISTEN and UNLISTEN, which the session may answer (SPEC §11), and NOTIFY,
 * up to CLIENT_INSPECT_MAX; the settings it changes, up to PARAMS_SQL_MAX
 * (a SET must not pass unseen, SPEC §10). A longer text cannot be
 * followed: its server is reset before it serves anyone else. */
static enum pump_step inspect_text(struct client *c, struct server *s, const struct proto_frame *f)
{
	struct buf *in = c->io.in;
	uint32_t total = f->len + 1;
	if (total > PARAMS_SQL_MAX) {
		if (f->type == PqMsg_Query) {
			link_txn(s)->untracked = true;
			return PUMP_ON;
		}
		/* a Parse: its statement is one pgcat cannot follow, wherever it runs */
		size_t head = total < PROTO_LONG_HEAD ? total : PROTO_LONG_HEAD;
		if (buf_len(in) < head)
			return PUMP_STOP;
		const uint8_t *h = buf_pullup(in, (size_t)head);
		size_t nl = strnlen((const char *)h + 5, head - 5);
		char *name = nl < head - 5 ? strndup((const char *)h + 5, nl) : NULL;
		if (!name || !setters_note_unread(&c->setters, name))
			link_txn(s)->untracked = true;
		free(name);
		return PUMP_ON;
	}
	if (buf_len(in) < total) {
		client_read_limit(c, total);   /* (past the usual watermark, if need be) */
		return PUMP_STOP;
	}
	client_read_limit(c, 0);
	const uint8_t *buf = buf_pullup(in, total);
	size_t off = 0;
	const char *stmt;
	if (f->type == PqMsg_Parse && !proto_read_cstring(buf + 5, f->len - 4, &off, &stmt))
		return PUMP_ON;   /* malformed: the server refuses it */
	const char *sql = (const char *)buf + 5 + off;
	size_t len = f->len - 4 - off;
	/* (Not a request sent behind others not answered yet: its answer
	 * would end theirs, and its text be logged with their time.) */
	bool noting = (c->pool->log_min_duration_us || c->pool->query_stats) && !link_slowlog(s)->noted &&
		      !link_txn(s)->outstanding;
	size_t sql_len = noting || c->pool->query_stats ? strnlen(sql, len) : 0;
	if (noting) {
		note_slowlog_client(c, s);
		slowlog_note_text(link_slowlog(s), sql, sql_len);
		/* (query_stats: the shape of a text kept is found from it,
		 * at the answer; one too long to keep is counted as such) */
	}
	if (c->pool->query_stats && f->type == PqMsg_Parse) {
		/* A later Bind's shape: a named statement's key; the unnamed
		 * one's raw key, cheap for the Parse of every request, found
		 * when its text has no constant (qshape.h). A full map: its
		 * Binds count without text. */
		uint64_t key = stmt[0] ? qshape_key(sql, sql_len) : qshape_raw_key(sql, sql_len);
		(void)qshape_names_put(&c->qnames, stmt, strlen(stmt), key);
	}
	if (total <= CLIENT_INSPECT_MAX) {
		/* only texts that start with l or u (or a comment) ask */
		if (sqllex_may_be_listen(sql, len)) {
			enum pump_step step = PUMP_ON;
			if (f->type == PqMsg_Query && c->session->active_query)
				step = session_step(c, c->session->active_query(c, s, f, sql, len));
			else if (f->type == PqMsg_Parse && c->session->active_extended)
				step = session_step(c, c->session->active_extended(c, s, f));
			if (step != PUMP_ON)
				return step;
		}
		if (link_watch_notify(s) && sqllex_mentions_notify(sql, len))
			link_note_notifier(s, &c->end);
	}
	if (f->type == PqMsg_Query)
		track_settings(c, s, sql, len);
	else if ((c->setters || params_sql_may_change(sql, len)) && !setters_note_parse(&c->setters, stmt, sql, len))
		link_txn(s)->untracked = true;   /* (out of memory) */
	return PUMP_ON;
}

/* A Bind of one of the client's statements that change settings: what its
 * Parse said, tracked now, on the server it runs on. The Bind's head (its
 * names) first, the whole of it for a set_config of bound values. */
static enum pump_step track_bind(struct client *c, struct server *s, const struct proto_frame *f)
{
	struct buf *in = c->io.in;
	uint32_t total = f->len + 1;
	size_t head = total < PROTO_LONG_HEAD ? total : PROTO_LONG_HEAD;
	if (buf_len(in) < head)
		return PUMP_STOP;
	const char *m = (const char *)buf_pullup(in, (size_t)head);
	size_t pl = strnlen(m + 5, head - 5);
	size_t nl = 5 + pl + 1 < head ? strnlen(m + 5 + pl + 1, head - 5 - pl - 1) : head;
	if (5 + pl + 1 + nl >= head) {
		/* names longer than the head: not one the client parsed here */
		if (c->setters->overflow)
			link_txn(s)->untracked = true;
		return PUMP_ON;
	}
	const struct setter *e = setters_find(c->setters, m + 5 + pl + 1);
	if (!e) {
		if (c->setters->overflow)
			link_txn(s)->untracked = true;
		return PUMP_ON;
	}
	switch (e->kind) {
	case PARAMS_SETTER_NONE:
		return PUMP_ON;
	case PARAMS_SETTER_TEXT:
		track_settings(c, s, e->sql, e->len);
		return PUMP_ON;
	case PARAMS_SETTER_UNTRACKED:
		link_txn(s)->untracked = true;
		return PUMP_ON;
	case PARAMS_SETTER_BOUND:
		break;
	}
	if (total > PARAMS_SQL_MAX) {
		link_txn(s)->untracked = true;
		return PUMP_ON;
	}
	if (buf_len(in) < total) {
		client_read_limit(c, total);
		return PUMP_STOP;
	}
	client_read_limit(c, 0);
	const uint8_t *b = buf_pullup(in, total);
	const uint8_t *nv, *vv;
	int32_t nlen, vlen;
	int16_t nf, vf;
	char *name = NULL, *value = NULL;
	if (shardkey_bind_param(b + 5, f->len - 4, e->name_param, &nv, &nlen, &nf) &&
	    shardkey_bind_param(b + 5, f->len - 4, e->value_param, &vv, &vlen, &vf) && nlen > 0 && vlen >= 0 &&
	    !memchr(nv, '\0', (size_t)nlen) && !memchr(vv, '\0', (size_t)vlen)) {
		name = strndup((const char *)nv, (size_t)nlen);
		value = strndup((const char *)vv, (size_t)vlen);
	}
	/* (a NULL name or value: set_config fails, and the error undoes it) */
	struct txn *t = link_txn(s);
	if (!name || !value || nlen > PARAMS_NAME_MAX) {
		if (!(nlen < 0 || vlen < 0))
			t->untracked = true;
	} else {
		struct params *server_params = link_server_params(s);
		bool first = txn_set_snapshot(t, &c->params, server_params);
		bool ok = params_set(&c->params, name, value, false) && params_set(server_params, name, value, false);
		if (!ok)
			t->untracked = true;
		txn_set_done(t, ok, first);
	}
	free(name);
	free(value);
	return PUMP_ON;
}

/* What pgcat reads of a request on its way: SET in a Query or a Parse
 * (the session settings it changes), and the counts of SHOW STATS. */
static enum pump_step inspect_request(struct client *c, struct server *s, const struct proto_frame *f)
{
	struct buf *in = c->io.in;
	if (c->session_watch && c->session->active_extended &&
	    (f->type == PqMsg_Bind || f->type == PqMsg_Describe || f->type == PqMsg_Execute || f->type == PqMsg_Close ||
	     f->type == PqMsg_Sync)) {
		enum pump_step step = session_step(c, c->session->active_extended(c, s, f));
		if (step != PUMP_ON)
			return step;
	}
	switch (f->type) {
	case PqMsg_Terminate:
		buf_drain(in, buf_len(in));
		client_close(c, NULL, NULL);
		return PUMP_STOP;
	case PqMsg_Query:
		return inspect_text(c, s, f);
	case PqMsg_Parse: {
		/* Drivers send SET through the extended protocol too. */
		enum pump_step step = inspect_text(c, s, f);
		/* A pgcat.ini counts every Parse and Bind; a pgbouncer.ini
		 * PgBouncer's way, only named statements pgcat keeps track of
		 * (prepared.c counts those). */
		if (step == PUMP_ON && !c->w->cfg->pgbouncer) {
			stats_add(c->pool->stats, STAT_CLIENT_PARSE, 1);
			stats_add(c->pool->stats, STAT_SERVER_PARSE, 1);
		}
		return step;
	}
	case PqMsg_Close:
		if (c->qnames)
			forget_statement_shape(c, f);
		return PUMP_ON;
	case PqMsg_Bind: {
		if (!c->w->cfg->pgbouncer)
			stats_add(c->pool->stats, STAT_BIND, 1);
		enum pump_step step = c->setters ? track_bind(c, s, f) : PUMP_ON;
		if (step == PUMP_ON && (c->pool->log_min_duration_us || c->pool->query_stats) && !link_slowlog(s)->noted &&
		    !link_txn(s)->outstanding)
			note_slowlog_bind(c, s, f);
		return step;
	}
	default:
		return PUMP_ON;
	}
}

/* The session rewrites the message for its server (prepared.c), or it
 * goes as it is (PUMP_ON). */
static enum pump_step rewrite_step(struct client *c, struct server *s, const struct proto_frame *f)
{
	uint32_t rest;
	switch (c->session->rewrite(c, s, f, &rest)) {
	case PREP_FORWARD:
		return PUMP_ON;
	case PREP_DONE:
		c->fwd_remaining = rest;   /* rewritten; its rest, if any, streams through */
		return PUMP_NEXT;
	case PREP_WAIT:
		return PUMP_STOP;
	case PREP_DISCARD:
		client_discard_message(c, rest);
		stats_add(c->pool->stats, STAT_RECEIVED, rest);
		return PUMP_NEXT;
	case PREP_FAILED:
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return PUMP_STOP;
	case PREP_REFUSED:
		client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "%s", c->end.prep->refusal);
		return PUMP_STOP;
	}
	return PUMP_ON;
}

/* The start of a request message at the head of the client's input: its
 * header checked, then each step that reads it. PUMP_ON: forward it
 * (c->fwd_remaining set); PUMP_NEXT: it was taken; PUMP_STOP: wait, or
 * the link moved, or the client closed. */
static enum pump_step request_step(struct client *c, struct server *s, struct txn *t)
{
	struct proto_frame f;
	if (!read_header(c, &f))
		return PUMP_STOP;
	enum pump_step step = PUMP_ON;
	if (t->write_gated)
		step = gate_step(c, s, &f);
	if (step == PUMP_ON && c->shard_phase != ROUTE_PHASE_NONE)
		step = guard_step(c, s, &f);
	if (step != PUMP_ON)
		return step;
	/* (end.prep_on is what server_link gave the server: the same while
	 * linked.) */
	bool prep = c->end.prep_on && (f.type == PqMsg_Parse || f.type == PqMsg_Bind || f.type == PqMsg_Describe ||
				       f.type == PqMsg_Close || f.type == PqMsg_Query || f.type == PqMsg_Sync ||
				       f.type == PqMsg_FunctionCall);
	if (prep && !prep_bytes_here(c, &f))
		return PUMP_STOP;
	step = inspect_request(c, s, &f);
	if (step != PUMP_ON)
		return step;
	/* What the server owes for it, and the clocks (from a new request's
	 * first message). */
	uint64_t now = c->w->now_us;
	txn_frontend(t, f.type, now);
	c->last_activity_us = now;
	if (c->retry_on)
		capture_for_retry(c, &f, prep);
	step = prep ? rewrite_step(c, s, &f) : PUMP_ON;
	if (step == PUMP_ON)
		c->fwd_remaining = f.len + 1;
	return step;
}

/* The client-to-server pump: whole small messages pgcat reads, the rest
 * streamed by header (io_forward_rest), as server.c's pump does the other
 * way. The server is seen through the link only (link.h). */
static void process_active(struct client *c)
{
	struct buf *in = c->io.in;
	struct server *s = c->end.server;
	/* The server's state moves only on its own events, or through this
	 * client leaving the loop (closed, unlinked): checked once here. */
	if (!s || !link_serving(s))
		return;
	/* Once per batch: the server's output buffer, marked for the flusher
	 * (every way out of this link leaves the loop at once), and the
	 * transaction on the link. */
	struct buf *out = link_output(s);
	struct txn *t = link_txn(s);
	/* One pass per message: the header (unless a message is
	 * part-forwarded, which goes on whatever the server's budget), then as
	 * much of it as is here. */
	while (c->state == CLIENT_ACTIVE && c->end.server == s) {
		if (c->skip_remaining > 0) {
			/* the rest of a message answered without it (prepared.c) */
			size_t have = buf_len(in);
			if (have == 0)
				return;
			size_t n = have < c->skip_remaining ? have : c->skip_remaining;
			buf_drain(in, n);
			c->skip_remaining -= (uint32_t)n;
			continue;
		}
		if (c->fwd_remaining == 0) {
			if (buf_len(out) >= LINK_SERVER_OUT_BUDGET) {
				pause_for_server(c);
				return;
			}
			enum pump_step step = request_step(c, s, t);
			if (step == PUMP_STOP)
				return;
			if (step == PUMP_NEXT)
				continue;
		}
		size_t n = io_forward_rest(in, out, &c->fwd_remaining);
		if (n == 0)
			return;
		stats_add(c->pool->stats, STAT_RECEIVED, n);
	}
	/* Linked to another server meanwhile: pump to that one next round. */
	if (c->state == CLIENT_ACTIVE && c->end.server && c->end.server != s)
		c->reprocess = true;
}

/* The idle pump, the same for every kind of session: what is skipped
 * (the rest of a discarded message, an unserved request up to its Sync)
 * and Terminate; each other message goes to the session. */
static void process_idle(struct client *c)
{
	struct buf *in = c->io.in;
	while (c->state == CLIENT_IDLE && !c->reply_held) {
		if (c->skip_remaining > 0) {
			size_t have = buf_len(in);
			if (have == 0)
				return;
			size_t n = have < c->skip_remaining ? have : c->skip_remaining;
			buf_drain(in, n);
			c->skip_remaining -= (uint32_t)n;
			continue;
		}
		struct proto_frame f;
		if (!read_header(c, &f))
			return;
		if (f.type == PqMsg_Terminate) {
			client_close(c, NULL, NULL);
			return;
		}
		if (c->batch == CLIENT_BATCH_SKIP_TO_SYNC) {
			uint32_t total = f.len + 1;
			client_discard_message(c, total);
			if (f.type == PqMsg_Sync) {
				client_set_batch(c, CLIENT_BATCH_NONE);
				client_send_rfq(c, client_idle_status(c));
			}
			continue;
		}
		if (!c->session->message(c, &f))
			return;
	}
}

static void process_once(struct client *c)
{
	switch (c->state) {
	case CLIENT_STARTUP:   /* the login, above client.c (login.c, session.h) */
		c->w->login->read_startup(c);
		break;
	case CLIENT_AUTH:
		c->w->login->read_auth(c);
		break;
	case CLIENT_IDLE:
		if (!c->reply_held)   /* its requests wait for that reply */
			process_idle(c);
		break;
	case CLIENT_ACTIVE:
		if (!c->reply_held)
			process_active(c);
		break;
	case CLIENT_FANOUT:
	case CLIENT_RELAY:
		c->session->on_own_input(c);   /* a COPY's rows, a replication client's messages */
		break;
	case CLIENT_LOGIN_WAIT:
	case CLIENT_WAITING:
	case CLIENT_CLOSED:
		break;
	}
}

void client_process(struct client *c)
{
	/* Idle with nothing read (the usual call when its server has just
	 * been released): nothing to take, only reading to keep on. */
	if (c->state == CLIENT_IDLE && !c->processing && c->io.in && buf_len(c->io.in) == 0) {
		io_update_reading(&c->io);
		return;
	}
	if (c->processing) {
		c->reprocess = true;
		return;
	}
	if (!c->io.in && c->state != CLIENT_CLOSED && !io_in(&c->io)) {
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	c->processing = true;
	do {
		c->reprocess = false;
		enum client_state before = c->state;
		process_once(c);
		if (c->state != before && c->state != CLIENT_CLOSED)
			c->reprocess = true;
	} while (c->reprocess && c->state != CLIENT_CLOSED && c->state != CLIENT_WAITING &&
		 c->state != CLIENT_LOGIN_WAIT);
	c->processing = false;
	/* Input consumed below the high watermark: read again. */
	if (c->state != CLIENT_CLOSED)
		io_update_reading(&c->io);
}

void client_on_linked(struct client *c)
{
	if (c->state != CLIENT_ACTIVE)
		return;
	if (c->processing) {   /* (the usual link: from its own request; the pump goes on) */
		c->reprocess = true;
		return;
	}
	client_process(c);
}

void client_on_released(struct client *c)
{
	if (c->state == CLIENT_CLOSED)
		return;
	client_set_state(c, CLIENT_IDLE);
	if (c->end.close_when_released) {
		client_close(c, SQLSTATE_ADMIN_SHUTDOWN, "pgcat is shutting down");
		return;
	}
	client_process(c);
}

void client_on_granted(struct client *c, struct server *s)
{
	client_set_state(c, CLIENT_ACTIVE);
	/* Not while only preparing, before the shard key is known (route.c). */
	c->end.begin = c->held_begin && c->shard_phase != ROUTE_PHASE_PROVISIONAL ? c->held_begin : NULL;
	link_start(&c->end, s);
}

/* The request goes through routing again (its server failed before any of
 * its bytes reached it, or left the rotation while it waited). */
static void reroute(struct client *c)
{
	if (c->state == CLIENT_CLOSED)
		return;
	client_set_state(c, CLIENT_IDLE);
	client_process(c);
}

/* ---- the events of its end of the link (client_end.h) ---- */

static struct client *end_owner(struct client_end *end) { return LIST_OWNER(end, struct client, end); }

static void end_ready(struct client_end *end, bool begin_ran)
{
	struct client *c = end_owner(end);
	end->retry_skip = 0;
	end->begin = NULL;
	if (begin_ran)   /* the transaction is open on the server now: its own */
		client_set_tx(c, CLIENT_TX_NONE);
	client_on_linked(c);
}

static void end_lost(struct client_end *end, struct server *s, bool untouched, const char *sqlstate,
		     const char *message)
{
	struct client *c = end_owner(end);
	(void)link_detach(s);
	end->begin = NULL;
	if (untouched) {
		/* Nothing of the client's reached that server: it goes elsewhere. */
		link_server_failed(s, message);
		reroute(c);
		return;
	}
	client_on_server_lost(c, s, true, sqlstate, message);
}

static void end_ended(struct client_end *end, struct server *s, const char *sqlstate, const char *message,
		      bool disconnect)
{
	struct client *c = end_owner(end);
	(void)link_detach(s);
	end->begin = NULL;
	if (disconnect)
		client_close(c, sqlstate, "%s", message);
	else
		client_on_server_lost(c, s, false, sqlstate, message);
}

/* Its session settings were refused by the server (client_end.h): as
 * PostgreSQL refuses a login with a setting it does not take, the client
 * is closed with the server's error. */
static void end_refused(struct client_end *end, struct server *s, const char *sqlstate, const char *message)
{
	struct client *c = end_owner(end);
	(void)link_detach(s);
	end->begin = NULL;
	client_close(c, sqlstate, "%s", message);
}

static void end_released(struct client_end *end)
{
	struct client *c = end_owner(end);
	client_on_released(c);
}

static void end_answered(struct client_end *end)
{
	struct client *c = end_owner(end);
	c->last_activity_us = c->w->now_us;
	client_reply_started(c);
	if (c->wait_answer) {   /* a request the session answers waited for this one's end */
		c->wait_answer = false;
		client_process(c);
	}
	/* (a session-mode client stays linked: no state change tells) */
	if (c->w->on_client_between_requests && c->state == CLIENT_ACTIVE)
		c->w->on_client_between_requests(c);
}

static void end_ready_held(struct client_end *end, bool committed)
{
	struct client *c = end_owner(end);
	c->last_activity_us = c->w->now_us;
	client_reply_started(c);
	c->wait_answer = false;
	c->session->ready_held(c, committed);
}

static void end_resume(struct client_end *end) { client_resume_reading(end_owner(end)); }
static void end_asked(struct client_end *end) { client_process(end_owner(end)); }

/* read_your_writes = lsn: where its reads wait for, on that shard, from
 * now on. Not known (the query failed, the server was lost): marked as
 * such, and its reads go to the primary until a position of the primary
 * measured later stands for it (route_pick.c). */
void client_note_write(struct client *c, int shard, bool known, uint64_t lsn)
{
	if (shard >= 0 && !ryw_note(&c->ryw, (size_t)shard, known, lsn, c->w->now_us))
		log_warning("C-%llu %s@%s: out of memory: read_your_writes cannot follow this write",
			    (unsigned long long)c->id, client_user(c), client_database(c));
}

static void end_wal_position(struct client_end *end, struct server *s, int shard, bool known, uint64_t lsn,
			     bool closed)
{
	client_note_write(end_owner(end), shard, known, lsn);
	if (!closed)
		return;   /* (released follows) */
	(void)link_detach(s);
	end_released(end);
}

/* read_your_writes: the replica asked had not replayed the client's
 * position: the request goes elsewhere, without asking again. */
static void end_behind(struct client_end *end, struct server *s)
{
	struct client *c = end_owner(end);
	(void)link_detach(s);
	end->begin = NULL;
	end->check_replayed = 0;
	c->ryw_no_ask = true;
	reroute(c);
}

static const struct client_end_events client_end_events = {
	.ready = end_ready,
	.lost = end_lost,
	.ended = end_ended,
	.refused = end_refused,
	.released = end_released,
	.answered = end_answered,
	.ready_held = end_ready_held,
	.resume = end_resume,
	.asked = end_asked,
	.wal_position = end_wal_position,
	.behind = end_behind,
};

/* ---- the events of its waits on a pool (pool.h) ---- */

static void wait_queued(struct pool_waiter *pw, bool login)
{
	client_set_state(client_of_waiter(pw), login ? CLIENT_LOGIN_WAIT : CLIENT_WAITING);
}

static void wait_granted(struct pool_waiter *pw, struct server *s) { client_on_granted(client_of_waiter(pw), s); }

static void wait_failed(struct pool_waiter *pw, const char *sqlstate, const char *message)
{
	client_on_checkout_failed(client_of_waiter(pw), sqlstate, message);
}

static void wait_rerouted(struct pool_waiter *pw) { reroute(client_of_waiter(pw)); }

static void wait_defaults_known(struct pool_waiter *pw) { client_on_defaults_known(client_of_waiter(pw)); }

static void wait_defaults_failed(struct pool_waiter *pw, const char *sqlstate, const char *message)
{
	client_on_defaults_failed(client_of_waiter(pw), sqlstate, message);
}

static void wait_closed(struct pool_waiter *pw, const char *sqlstate, const char *message)
{
	client_close(client_of_waiter(pw), sqlstate, "%s", message);
}

/* query_wait_notify: PgBouncer's notice, word for word (clients and
 * scripts match it). */
static void wait_long(struct pool_waiter *pw)
{
	struct client *c = client_of_waiter(pw);
	uint8_t storage[256];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_notice(&pb, "NOTICE", "01000", "No server connection available in postgres backend, client being queued");
	client_send_pkt(c, &pb);
	io_flush(&c->io);
}

static const struct pool_waiter_events client_wait_events = {
	.queued = wait_queued,
	.granted = wait_granted,
	.failed = wait_failed,
	.rerouted = wait_rerouted,
	.defaults_known = wait_defaults_known,
	.defaults_failed = wait_defaults_failed,
	.closed = wait_closed,
	.waited_long = wait_long,
};

void client_cancel_query(struct client *c)
{
	if (c->state == CLIENT_FANOUT || c->state == CLIENT_RELAY) {
		c->session->on_own_cancel(c);
		return;
	}
	if (c->state == CLIENT_WAITING) {
		/* Nothing reached a server yet: pgcat answers the cancel itself,
		 * as PostgreSQL would have. */
		pool_cancel_wait(&c->wait);
		client_on_checkout_failed(c, SQLSTATE_QUERY_CANCELED, "canceling statement due to user request");
		return;
	}
	struct server *s = c->end.server;
	if (c->state != CLIENT_ACTIVE || !s || link_txn(s)->outstanding == 0)
		return;
	link_cancel(s);
}

/* ---- libevent callbacks ---- */

static void client_read_cb(struct io *io, void *arg)
{
	struct client *c = arg;
	worker_update_clock(c->w);
	client_process(c);
	/* Between the round trips of a login the buffers go back (io_trim
	 * once the reply is written, if nothing more came in): hundreds of
	 * logins in flight would otherwise hold their buffers, and leave them
	 * freed between the clients that stay. */
	if (c->state == CLIENT_STARTUP || c->state == CLIENT_AUTH)
		c->io.trim_after_flush = true;
}

static void client_drain_cb(struct io *io, void *arg)
{
	struct client *c = arg;
	/* Below the low watermark: let the server's bytes flow again (or a
	 * cross-shard read's merged rows). */
	if (c->end.server)
		link_resume(c->end.server);
	else if ((c->state == CLIENT_FANOUT || c->state == CLIENT_RELAY) && c->session->on_own_drain)
		c->session->on_own_drain(c);
}

static void client_event_cb(struct io *io, enum io_event what, int err, void *arg)
{
	struct client *c = arg;
	worker_update_clock(c->w);
	switch (what) {
	case IO_CONNECTED:
		return;
	case IO_TLS_READY:   /* the startup packet comes next, encrypted */
		/* The ALPN callbacks refuse a ClientHello without "postgresql";
		 * this is the check on the outcome, as PostgreSQL 17 makes it. */
		if (!tls_alpn_ok(c->io.ssl, tls_is_direct(c->io.ssl))) {
			char a[CLIENT_ADDR_STRLEN];
			log_info("C-%llu %s:%d: TLS connection without ALPN \"postgresql\" refused", (unsigned long long)c->id,
				 client_addr_str(c, a), c->port);
			client_close(c, NULL, NULL);
		}
		return;
	case IO_EOF:
	case IO_ERROR:
		if (c->io.tls_handshaking) {
			char why[160];
			tls_last_error(why, sizeof why);
			char a[CLIENT_ADDR_STRLEN];
			log_info("C-%llu %s:%d: %sTLS handshake failed: %s", (unsigned long long)c->id, client_addr_str(c, a),
				 c->port, c->io.ssl && tls_is_direct(c->io.ssl) ? "direct " : "",
				 what == IO_EOF ? "connection closed" : why);
		}
		if (what == IO_EOF)
			client_close(c, NULL, "client unexpected eof");
		else
			client_close(c, NULL, "client connection error: %s", strerror(err));
		return;
	}
}
