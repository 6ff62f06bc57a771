/* SPDX-License-Identifier: MIT */
/*
 * client_conn: a client connection as an object, below client.c's state
 * machine: its state and the worker's lists it is on, what it is sent
 * (errors, ReadyForQuery, the welcome after its login, with its cancel
 * key), its transaction and batch flags, its names, and its closing (what
 * it waited for or held given back through the pool and the link) and
 * freeing. It calls nothing of client.c's.
 */
#include "client.h"

#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "cancel.h"
#include "config.h"
#include "context.h"
#include "buf_msg.h"
#include "link.h"
#include "log.h"
#include "params.h"
#include "pktbuf.h"
#include "pool.h"
#include "proto.h"
#include "qshape.h"
#include "ryw.h"
#include "session.h"
#include "setters.h"
#include "shm.h"
#include "stats.h"
#include "tls.h"

static const char *const state_names[] = {
	[CLIENT_STARTUP] = "startup", [CLIENT_AUTH] = "auth", [CLIENT_LOGIN_WAIT] = "login_wait",
	[CLIENT_IDLE] = "idle", [CLIENT_WAITING] = "waiting", [CLIENT_ACTIVE] = "active", [CLIENT_FANOUT] = "fanout", [CLIENT_RELAY] = "relay",
	[CLIENT_CLOSED] = "closed",
};

const char *client_state_name(enum client_state st) { return state_names[st]; }

struct buf *client_output(struct client *c) { return io_out(&c->io); }

bool client_output_full(struct client *c)
{
	return io_out_len(&c->io) >= CLIENT_OUT_BUDGET;
}

void client_set_state(struct client *c, enum client_state st)
{
	struct worker *w = c->w;
	log_trace("C-%llu: %s -> %s", (unsigned long long)c->id, client_state_name(c->state), client_state_name(st));
	list_del(&c->node);
	c->state = st;
	c->state_since_us = w->now_us;
	switch (st) {
	case CLIENT_STARTUP:
	case CLIENT_AUTH:
		list_add_tail(&w->clients_login, &c->node);
		break;
	case CLIENT_IDLE:
		list_add_tail(&w->clients_idle, &c->node);
		break;
	case CLIENT_ACTIVE:
	case CLIENT_FANOUT:
	case CLIENT_RELAY:
		list_add_tail(&w->clients_active, &c->node);
		/* fall through */
	case CLIENT_WAITING:      /* on the srvpool's waiters (c->wait) */
		/* A new request: a CancelRequest for it may land on another
		 * worker, and one asked for an earlier request (flagged after it
		 * ended) must not reach this one (cancel_key_link; these are the
		 * states the worker polls the flag in). */
		if (c->has_cancel_key)
			cancel_key_link(&w->cancel, c->cancel_pid, c->cancel_key);
		break;
	case CLIENT_LOGIN_WAIT:   /* on the pool's login_waiters (c->wait) */
	case CLIENT_CLOSED:
		break;
	}
	/* SUSPEND: a logged-in client's reading follows the worker's flag at
	 * each move, so that one on no list when SUSPEND or RESUME came
	 * (waiting for a server, or for its pool's parameters) catches up. */
	if (st >= CLIENT_IDLE && st != CLIENT_CLOSED && io_suspended(&c->io) != w->suspended && !c->is_admin)
		io_suspend(&c->io, w->suspended);
	if (st == CLIENT_IDLE && w->on_client_between_requests)
		w->on_client_between_requests(c);
}

void client_send_pkt(struct client *c, struct pktbuf *pb)
{
	if (!pb->failed && !c->io.closed)
		buf_add(io_out(&c->io), pb->data, pb->len);
}

void client_log_event(const struct client *c, enum log_level level, const char *event, const struct log_field *extra,
		      size_t n_extra, const char *fmt, ...)
{
	if (!log_enabled(level))
		return;
	char a[CLIENT_ADDR_STRLEN], prefix[CLIENT_ADDR_STRLEN + 2 * 64 + 64], msg[1024];
	const char *addr = client_addr_str(c, a);   /* (a, or a constant: "unix") */
	snprintf(prefix, sizeof prefix, "C-%llu %s@%s %s:%d: ", (unsigned long long)c->id, client_user(c),
		 client_database(c), addr, c->port);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	struct log_field f[8] = {
		{ "client_id", NULL, (long long)c->id }, { "user", client_user(c), 0 },
		{ "database", client_database(c), 0 }, { "addr", addr, 0 }, { "port", NULL, c->port },
	};
	size_t n = 5;
	for (size_t i = 0; i < n_extra && n < sizeof f / sizeof *f; i++)
		f[n++] = extra[i];
	log_event(level, event, f, n, prefix, "%s", msg);
}

void client_count_error(const struct client *c, const char *sqlstate)
{
	/* Under the names the client asked for only once they name a pool
	 * (or it is a console's logged-in user): before that, anyone can
	 * send any names, and a table of them would fill with noise. */
	bool named = c->pool || (c->is_admin && c->state != CLIENT_STARTUP && c->state != CLIENT_AUTH);
	errstats_count(shm_errstats(c->w->shm, c->w->id), named ? client_database(c) : "", named ? client_user(c) : "",
		       sqlstate, ERRSTATS_PGCAT);
}

void client_send_error(struct client *c, const char *severity, const char *sqlstate, const char *msg)
{
	if (strcmp(severity, "ERROR") == 0 || strcmp(severity, "FATAL") == 0)
		client_count_error(c, sqlstate);
	uint8_t storage[1024];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_error(&pb, severity, sqlstate, msg);
	client_send_pkt(c, &pb);
}

void client_send_rfq(struct client *c, char status)
{
	uint8_t storage[8];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_ready_for_query(&pb, status);
	client_send_pkt(c, &pb);
}

void client_send_simple(struct client *c, uint8_t type)
{
	buf_add_bodyless(io_out(&c->io), type);
}

char client_idle_status(const struct client *c)
{
	switch (c->tx) {
	case CLIENT_TX_FAILED:
		return 'E';
	case CLIENT_TX_HELD:
		return 'T';
	case CLIENT_TX_NONE:
		break;
	}
	return 'I';
}

/* The edges of enum client_tx: a BEGIN held and its end or first
 * statement; a failure with or without one; the end of a failed one. */
static bool tx_edge_ok(enum client_tx from, enum client_tx to)
{
	switch (to) {
	case CLIENT_TX_NONE:
		return true;   /* ended, or handed to the server */
	case CLIENT_TX_HELD:
		return from == CLIENT_TX_NONE;
	case CLIENT_TX_FAILED:
		return true;   /* (failing again changes nothing) */
	}
	return false;
}

void client_set_tx(struct client *c, enum client_tx to)
{
	assert(tx_edge_ok(c->tx, to));
	assert(to != CLIENT_TX_HELD);   /* client_hold_begin, with its text */
	if (c->tx == CLIENT_TX_HELD) {
		free(c->held_begin);
		c->held_begin = NULL;
	}
	c->tx = to;
	assert((c->held_begin != NULL) == (c->tx == CLIENT_TX_HELD));
}

void client_hold_begin(struct client *c, char *text, bool read_only)
{
	assert(tx_edge_ok(c->tx, CLIENT_TX_HELD) && text);
	c->held_begin = text;
	c->held_begin_read_only = read_only;
	c->tx = CLIENT_TX_HELD;
}

/* The edges of enum client_batch: a batch starts from none and ends at
 * its Sync (or an error turns a local ROLLBACK into skipping). */
void client_set_batch(struct client *c, enum client_batch to)
{
	assert(to == CLIENT_BATCH_NONE || c->batch == CLIENT_BATCH_NONE || c->batch == to ||
	       (c->batch == CLIENT_BATCH_LOCAL_ROLLBACK && to == CLIENT_BATCH_SKIP_TO_SYNC));
	c->batch = to;
}

const char *client_user(const struct client *c)
{
	if (c->names)
		return c->names;
	return c->pool ? c->pool->user : "";
}

const char *client_database(const struct client *c)
{
	if (c->names)
		return c->names + strlen(c->names) + 1;
	return c->pool ? c->pool->name : "";
}

const char *client_addr_str(const struct client *c, char *buf)
{
	if (c->peer_family == AF_INET)
		return inet_ntop(AF_INET, &c->peer.v4, buf, CLIENT_ADDR_STRLEN) ? buf : "?";
	if (c->peer_family == AF_INET6)
		return inet_ntop(AF_INET6, &c->peer.v6, buf, CLIENT_ADDR_STRLEN) ? buf : "?";
	return "unix";
}

void client_close(struct client *c, const char *sqlstate, const char *fmt, ...)
{
	if (c->state == CLIENT_CLOSED)
		return;
	struct worker *w = c->w;
	char msg[512] = "";
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, sizeof msg, fmt, ap);
		va_end(ap);
	}
	/* PgBouncer's words, which operators alert on: "closing because:
	 * REASON (age=Ns)". A login refused with an error is logged too; a
	 * connection that never logged in and was told nothing (a port
	 * probe, a client gone mid-login) only at debug. Written before the
	 * error goes out: a script that reads the log once its client has
	 * the error finds the line. */
	bool logged_in = c->state == CLIENT_IDLE || c->state == CLIENT_WAITING || c->state == CLIENT_ACTIVE;
	if (c->moved)
		log_debug("C-%llu: %s", (unsigned long long)c->id, msg);
	else if ((logged_in || sqlstate) ? w->cfg->general.log_disconnections : log_enabled(LOG_LEVEL_DEBUG)) {
		const char *reason = msg[0] ? msg : "client close request";
		long long age = (long long)((w->now_us - c->connect_us) / 1000000);
		struct log_field extra[] = { { "reason", reason, 0 }, { "age_s", NULL, age } };
		client_log_event(c, LOG_LEVEL_INFO, "client_close", extra, 2, "closing because: %s (age=%llds)", reason,
				 age);
	}
	if (sqlstate && !c->io.closed) {
		client_send_error(c, "FATAL", sqlstate, msg);
		/* Best effort: the error goes out now, before the socket closes. */
		io_flush(&c->io);
	}

	if (c->session->closing)
		c->session->closing(c);   /* cross-shard work ends, prepared statements go */
	switch (c->state) {
	case CLIENT_WAITING:
	case CLIENT_LOGIN_WAIT:
		pool_cancel_wait(&c->wait);
		break;
	case CLIENT_FANOUT:   /* (ended by the session's closing) */
	case CLIENT_RELAY:
		break;
	case CLIENT_ACTIVE:
		if (c->end.server) {
			struct server *s = c->end.server;
			if (c->fwd_remaining > 0) {
				/* Half a message reached the server: it cannot be
				 * brought back. */
				link_abandon(s, "client vanished in the middle of a message");
			} else {
				pool_client_gone(s);
			}
		}
		break;
	case CLIENT_STARTUP:
	case CLIENT_AUTH:
	case CLIENT_IDLE:
	case CLIENT_CLOSED:
		break;
	}
	client_drop_retry(c);   /* frees the retry copy */
	if (c->count_slot >= 0)
		shm_pool_clients_add(w->shm, w->id, c->count_slot, -1);
	if (c->pool) {
		c->pool->n_clients--;
		/* the pool may be freed once drained; this client no longer counts */
		c->pool = NULL;
	}
	if (c->has_cancel_key) {
		cancel_key_release(&w->cancel, c->cancel_pid);
		c->has_cancel_key = false;
	}
	io_close(&c->io);
	client_set_state(c, CLIENT_CLOSED);
	w->n_clients--;
	atomic_store_explicit(&w->shm->h->workers[w->id].clients, w->n_clients, memory_order_relaxed);
	auth_client_free(c->auth);
	c->auth = NULL;
	list_add_tail(&w->dead_clients, &c->node);
	worker_schedule_reap(w);
	if (w->shutting_down)
		worker_check_shutdown_done(w);
}

void client_free(struct client *c)
{
	params_clear(&c->params);
	params_clear(&c->startup_params);
	auth_client_free(c->auth);
	free(c->names);
	free(c->pending_error);
	free(c->kind_state);
	free(c->held_begin);
	ryw_free(&c->ryw);
	setters_free(&c->setters);
	qshape_names_free(c->qnames);
	c->qnames = NULL;
	free(c->xshard);   /* (its parts went at client_close) */
	buf_free(c->retry);   /* (client_close freed it; a client moved to another process is not closed) */
	free(c);
}

/* ---- the welcome (the login itself: login.c) ---- */

void client_send_welcome(struct client *c)
{
	struct worker *w = c->w;
	struct pool *p = c->pool;
	uint8_t storage[8192];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_auth_request(&pb, AUTH_REQ_OK, NULL, 0);
	/* What a real server reports, with the client's own startup values
	 * where it gave them. */
	if (params_count(&c->params) == 0) {
		/* Nothing of its own: the client shares the pool's table. */
		params_copy(&c->params, &p->defaults);
		for (size_t i = 0; i < params_count(&p->defaults); i++) {
			const struct param *d = params_at(&p->defaults, i);
			pktbuf_parameter_status(&pb, d->name, d->value);
		}
	} else {
		/* As PostgreSQL would report them (client_encoding=utf8 comes
		 * back UTF8): drivers compare the two. */
		params_canonicalize(&c->params, &p->defaults);
		for (size_t i = 0; i < params_count(&p->defaults); i++) {
			const struct param *d = params_at(&p->defaults, i);
			const struct param *mine = params_get(&c->params, d->name);
			pktbuf_parameter_status(&pb, d->name, mine ? mine->value : d->value);
		}
		for (size_t i = 0; i < params_count(&c->params); i++) {
			const struct param *m = params_at(&c->params, i);
			if (params_reported(m->name) && !params_get(&p->defaults, m->name))
				pktbuf_parameter_status(&pb, m->name, m->value);
		}
		/* The session starts from the server's defaults where the client
		 * named no value of its own. */
		(void)params_add_missing(&c->params, &p->defaults);
	}
	if (!client_finish_welcome(c, &pb))
		return;
	stats_add(p->stats, STAT_CLIENT_LOGIN, 1);
	p->had_client = true;   /* (min_pool_size for auth_file's users, pool_fill_min) */
	if (w->cfg->general.log_connections) {
		char tls[96] = "";
		if (c->io.ssl) {   /* (PgBouncer's "tls=VERSION/CIPHER") */
			memcpy(tls, " tls=", 5);
			tls_describe(c->io.ssl, tls + 5, sizeof tls - 5);
		}
		struct log_field extra[] = { { "tls", tls[0] ? tls + 5 : "", 0 } };
		client_log_event(c, LOG_LEVEL_INFO, "client_login", extra, 1, "login%s", tls);
	}
}

bool client_finish_welcome(struct client *c, struct pktbuf *pb)
{
	uint8_t key[CANCEL_KEY_LONG_LEN];
	size_t key_len;
	if (!cancel_key_assign(&c->w->cancel, c, c->long_cancel_key ? CANCEL_KEY_LONG : CANCEL_KEY_SHORT, &c->cancel_pid,
			       &c->cancel_key, key, &key_len)) {
		client_close(c, SQLSTATE_TOO_MANY_CONNECTIONS, "too many clients already");
		return false;
	}
	c->has_cancel_key = true;
	c->end.backend_pid = c->cancel_pid;
	pktbuf_begin(pb, PqMsg_BackendKeyData);
	pktbuf_put_u32(pb, c->cancel_pid);
	pktbuf_put_bytes(pb, key, key_len);
	pktbuf_end(pb);
	pktbuf_ready_for_query(pb, 'I');
	if (pb->failed) {
		client_close(c, SQLSTATE_INTERNAL_ERROR, "too many session parameters");
		return false;
	}
	client_send_pkt(c, pb);
	client_set_state(c, CLIENT_IDLE);
	/* Logged in: the names are the pool's (which outlives its clients). */
	if (c->pool && c->names && strcmp(c->pool->user, client_user(c)) == 0 &&
	    strcmp(c->pool->name, client_database(c)) == 0) {
		free(c->names);
		c->names = NULL;
	}
	/* Once the welcome is written, the buffers of the login go back: a
	 * client that then sits idle holds none (the next read makes them). */
	c->io.trim_after_flush = true;
	return true;
}

/* ---- the copy of a request kept for a retry (the pump, client.c) ---- */

void client_drop_retry(struct client *c)
{
	c->retry_on = false;
	if (c->retry) {
		buf_free(c->retry);
		c->retry = NULL;
	}
}

void client_reply_started(struct client *c)
{
	/* The copy is emptied, its block kept for the next request's (a
	 * read that may be retried copies every request: a block made and
	 * freed each time cost ~500 instructions); client_trim gives it back
	 * once the client sits idle. */
	c->retry_on = false;
	if (c->retry) {
		buf_drain(c->retry, buf_len(c->retry));
		buf_settle(c->retry);
	}
}

void client_trim(struct client *c)
{
	if (c->io.in || c->io.out)
		io_trim(&c->io);
	if (c->retry && buf_len(c->retry) == 0) {
		buf_free(c->retry);
		c->retry = NULL;
	}
}

