/* SPDX-License-Identifier: MIT */
/*
 * notify: the listening connections, the channel registry and the
 * delivery of notifications (notify.h, SPEC §11).
 */
#include "notify.h"
#include "notify_internal.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "bconn.h"
#include "config.h"
#include "context.h"
#include "list.h"
#include "log.h"
#include "pool.h"
#include "proto.h"
#include "shm.h"

/* Notifications a client has not read yet (queued in a transaction, or
 * in its output while it reads slowly): past this, more are dropped, and
 * logged, as the memory bound of SPEC §10 asks. */
#define NOTIFY_CLIENT_MAX_BYTES (8u * 1024 * 1024)
/* A listening connection lost: tried again after this. */
#define NOTIFY_RETRY_US (1000u * 1000)

const struct bconn_profile notify_listener_profile = {
	.application_name = "pgcat listener",
	.refused = "login failed: ",
	/* A notification's payload is under 8000 bytes. */
	.max_message = 16384,
	.read_high = 65536,
};

struct notify_stmts *notify_stmts(struct notify_client *nc) { return &nc->stmts; }

static void listener_send(struct notify_listener *l, const char *verb, const char *channel, uint64_t *seq);
static void check_held(struct notify_pool *np);

/* ---- the client's registrations ---- */

static void update_hold(struct notify_client *nc)
{
	nc->c->end.hold_ready = nc->n_channels > 0 || nc->n_ops > 0 || (nc->queue && buf_len(nc->queue));
}

static struct notify_channel *channel_find(struct notify_pool *np, const char *name)
{
	for (size_t i = 0; i < np->n_channels; i++)
		if (strcmp(np->channels[i]->name, name) == 0)
			return np->channels[i];
	return NULL;
}

static void channel_drop(struct notify_pool *np, struct notify_channel *ch)
{
	for (size_t i = 0; i < np->n_channels; i++) {
		if (np->channels[i] != ch)
			continue;
		np->channels[i] = np->channels[--np->n_channels];
		break;
	}
	/* The connections stop listening too: fewer notifications to read;
	 * with no channel left, they close. */
	for (int k = 0; k < np->n_shards; k++) {
		struct notify_listener *l = &np->listeners[k];
		if (np->n_channels == 0) {
			bconn_close(&l->b, true);
			/* (closed on purpose, not lost: the next LISTEN opens
			 * one at once) */
			if (!l->awaited)
				l->retry_at_us = 0;
		} else if (ch->listen_seq[k])
			listener_send(l, "UNLISTEN", ch->name, NULL);
	}
	free(ch->clients);
	free(ch);
}

static struct notify_channel *channel_add(struct notify_pool *np, const char *name)
{
	if (np->n_channels == np->cap_channels) {
		size_t cap = np->cap_channels ? np->cap_channels * 2 : 8;
		struct notify_channel **n = realloc(np->channels, cap * sizeof *n);
		if (!n)
			return NULL;
		np->channels = n;
		np->cap_channels = cap;
	}
	struct notify_channel *ch = calloc(1, sizeof *ch + (size_t)np->n_shards * sizeof ch->listen_seq[0]);
	if (!ch)
		return NULL;
	snprintf(ch->name, sizeof ch->name, "%s", name);
	np->channels[np->n_channels++] = ch;
	uint64_t now = np->hub->w->now_us;
	for (int k = 0; k < np->n_shards; k++) {
		struct notify_listener *l = &np->listeners[k];
		/* (not ready: it LISTENs to every channel once it is) */
		if (bconn_state(&l->b) == BCONN_CLOSED && now >= l->retry_at_us)
			notify_listener_open(l);
		else
			listener_send(l, "LISTEN", ch->name, &ch->listen_seq[k]);
	}
	return ch;
}

static bool client_has(const struct notify_client *nc, const struct notify_channel *ch)
{
	for (uint32_t i = 0; i < nc->n_channels; i++)
		if (nc->channels[i] == ch)
			return true;
	return false;
}

static bool register_channel(struct notify_client *nc, const char *name)
{
	struct notify_pool *np = nc->np;
	struct notify_channel *ch = channel_find(np, name);
	if (ch && client_has(nc, ch))
		return true;
	if (nc->n_channels == nc->cap_channels) {
		uint32_t cap = nc->cap_channels ? nc->cap_channels * 2 : 4;
		struct notify_channel **n = realloc(nc->channels, cap * sizeof *n);
		if (!n)
			return false;
		nc->channels = n;
		nc->cap_channels = cap;
	}
	if (!ch && !(ch = channel_add(np, name)))
		return false;
	if (ch->n_clients == ch->cap_clients) {
		uint32_t cap = ch->cap_clients ? ch->cap_clients * 2 : 4;
		struct notify_client **n = realloc(ch->clients, cap * sizeof *n);
		if (!n) {
			if (ch->n_clients == 0)
				channel_drop(np, ch);
			return false;
		}
		ch->clients = n;
		ch->cap_clients = cap;
	}
	ch->clients[ch->n_clients++] = nc;
	nc->channels[nc->n_channels++] = ch;
	return true;
}

static void unregister_channel(struct notify_client *nc, struct notify_channel *ch)
{
	for (uint32_t i = 0; i < nc->n_channels; i++) {
		if (nc->channels[i] != ch)
			continue;
		nc->channels[i] = nc->channels[--nc->n_channels];
		break;
	}
	/* (order kept: delivery goes in registration order, not that it matters) */
	for (uint32_t i = 0; i < ch->n_clients; i++) {
		if (ch->clients[i] != nc)
			continue;
		memmove(&ch->clients[i], &ch->clients[i + 1], (ch->n_clients - i - 1) * sizeof ch->clients[0]);
		ch->n_clients--;
		break;
	}
	if (ch->n_clients == 0)
		channel_drop(nc->np, ch);
}

static void unregister_all(struct notify_client *nc)
{
	while (nc->n_channels > 0)
		unregister_channel(nc, nc->channels[nc->n_channels - 1]);
}

bool notify_apply(struct notify_client *nc, bool listen, const char *channel)
{
	bool ok = true;
	if (listen) {
		ok = register_channel(nc, channel);
	} else if (!channel) {
		unregister_all(nc);
	} else {
		struct notify_channel *ch = channel_find(nc->np, channel);
		if (ch && client_has(nc, ch))
			unregister_channel(nc, ch);
	}
	update_hold(nc);
	return ok;
}

bool notify_defer(struct notify_client *nc, bool listen, const char *channel)
{
	if (nc->n_ops == nc->cap_ops) {
		uint32_t cap = nc->cap_ops ? nc->cap_ops * 2 : 4;
		struct notify_op *n = realloc(nc->ops, cap * sizeof *n);
		if (!n)
			return false;
		nc->ops = n;
		nc->cap_ops = cap;
	}
	struct notify_op *op = &nc->ops[nc->n_ops++];
	op->listen = listen;
	op->all = !channel;
	snprintf(op->channel, sizeof op->channel, "%s", channel ? channel : "");
	update_hold(nc);
	return true;
}

void notify_tx_end(struct notify_client *nc, bool committed)
{
	uint32_t n = nc->n_ops;
	nc->n_ops = 0;
	for (uint32_t i = 0; committed && i < n; i++) {
		const struct notify_op *op = &nc->ops[i];
		if (!notify_apply(nc, op->listen, op->all ? NULL : op->channel))
			log_warning("C-%llu: out of memory: LISTEN %s not registered", (unsigned long long)nc->c->id,
				    op->channel);
	}
	update_hold(nc);
}

/* ---- delivery ---- */

/* Between transactions, and nothing of its own under way: PostgreSQL
 * would send it a notification now. */
static bool deliverable(const struct notify_client *nc)
{
	const struct client *c = nc->c;
	return c->state == CLIENT_IDLE && c->tx == CLIENT_TX_NONE && c->batch == CLIENT_BATCH_NONE && !c->reply_held &&
	       !c->pending_error;
}

static void write_queue(struct notify_client *nc)
{
	if (nc->queue && buf_len(nc->queue) > 0)
		buf_add_buf(client_output(nc->c), nc->queue);
}

void notify_flush(struct notify_client *nc)
{
	if (nc->held_status || !deliverable(nc))
		return;
	write_queue(nc);
	update_hold(nc);
}

static void deliver(struct notify_client *nc, const uint8_t *msg, size_t len)
{
	bool now = deliverable(nc) && !nc->held_status;
	struct buf *to = now ? client_output(nc->c) : nc->queue;
	if (!to && !(to = nc->queue = buf_new(BUF_SMALL)))
		return;
	if (buf_len(to) + len > NOTIFY_CLIENT_MAX_BYTES) {
		if (!nc->dropped_logged)
			log_warning("C-%llu: notifications dropped: the client has %u bytes of them unread",
				    (unsigned long long)nc->c->id, NOTIFY_CLIENT_MAX_BYTES);
		nc->dropped_logged = true;
		return;
	}
	nc->dropped_logged = false;
	if (now)
		write_queue(nc);   /* (anything older first) */
	buf_add(to, msg, len);
	if (!now)
		update_hold(nc);
}

/* A NotificationResponse of listener l: to every client of its channel,
 * with the pid of the client that notified when it is pgcat's. */
static bool on_notification(struct notify_listener *l, const uint8_t *body, size_t len)
{
	size_t off = 4;
	const char *channel, *payload;
	if (len < 4 || !proto_read_cstring(body, len, &off, &channel) || !proto_read_cstring(body, len, &off, &payload))
		return false;
	struct notify_channel *ch = channel_find(l->np, channel);
	if (!ch || ch->n_clients == 0)
		return true;   /* an UNLISTEN on its way */
	struct worker *w = l->np->hub->w;
	uint32_t pid = proto_get_u32(body);
	uint32_t mine = shm_backend_client_pid(w->shm, pid, l->host, l->port, l->database);
	uint8_t stackbuf[1024];
	size_t total = 5 + len;
	uint8_t *msg = total <= sizeof stackbuf ? stackbuf : malloc(total);
	if (!msg)
		return true;
	msg[0] = PqMsg_NotificationResponse;
	proto_put_u32(msg + 1, (uint32_t)len + 4);
	memcpy(msg + 5, body, len);
	if (mine)
		proto_put_u32(msg + 5, mine);
	for (uint32_t i = 0; i < ch->n_clients; i++)
		deliver(ch->clients[i], msg, total);
	if (msg != stackbuf)
		free(msg);
	return true;
}

/* ---- the listening connections ---- */

static void listener_send(struct notify_listener *l, const char *verb, const char *channel, uint64_t *seq)
{
	if (seq)
		*seq = 0;
	if (bconn_state(&l->b) != BCONN_READY)
		return;   /* sent when it is (listener_ready) */
	char sql[2 * NOTIFY_CHANNEL_MAX + 16];
	size_t n = (size_t)snprintf(sql, sizeof sql, "%s \"", verb);
	for (const char *p = channel; p && *p && n + 4 < sizeof sql; p++) {
		if (*p == '"')
			sql[n++] = '"';   /* a quote in a quoted identifier is doubled */
		sql[n++] = *p;
	}
	if (channel) {
		sql[n++] = '"';
	} else {
		n = 0;   /* the empty query of a barrier */
	}
	sql[n] = '\0';
	if (!bconn_query(&l->b, sql))
		return;
	if (l->sent_seq == l->done_seq)
		l->oldest_sent_us = l->np->hub->w->now_us;
	l->sent_seq++;
	if (seq)
		*seq = l->sent_seq;
}

void notify_listener_open(struct notify_listener *l)
{
	struct notify_pool *np = l->np;
	struct pool *p = np->pool;
	const struct srvpool *sp = NULL;
	for (size_t i = 0; i < p->n_targets; i++) {
		const struct srvpool *t = p->targets[i];
		if (t->shard != l->shard)
			continue;
		if (!sp || (t->role == SERVER_ROLE_PRIMARY && sp->role != SERVER_ROLE_PRIMARY))
			sp = t;
	}
	l->retry_at_us = np->hub->w->now_us + NOTIFY_RETRY_US;
	if (!sp || !sp->resolved) {
		if (!l->failing)
			log_warning("listener (pool %s, shard %d): no address for the shard's primary yet", p->name, l->shard);
		l->failing = true;
		return;
	}
	free(l->host);
	free(l->database);
	l->host = strdup(sp->host);
	l->database = strdup(sp->database);
	l->port = sp->port;
	if (!l->host || !l->database)
		return;
	(void)auth_open_server_conn(&l->b, &notify_listener_profile, p, sp, l->host, l->database);
}

void notify_listener_ready(struct notify_listener *l)
{
	struct notify_pool *np = l->np;
	if (l->failing)
		log_info("listener (pool %s, shard %d): connected to %s:%d again; notifications sent meanwhile are lost",
			 np->pool->name, l->shard, l->host, l->port);
	l->failing = false;
	l->sent_seq = l->done_seq = 0;
	for (size_t i = 0; i < np->n_channels; i++)
		listener_send(l, "LISTEN", np->channels[i]->name, &np->channels[i]->listen_seq[l->shard]);
	check_held(np);
}

static void listener_ready(void *arg)
{
	notify_listener_ready(arg);
}

static bool listener_message(void *arg, uint8_t type, const uint8_t *body, size_t len)
{
	struct notify_listener *l = arg;
	switch (type) {
	case PqMsg_NotificationResponse:
		return on_notification(l, body, len);
	case PqMsg_ReadyForQuery:
		if (l->done_seq < l->sent_seq)
			l->done_seq++;
		l->oldest_sent_us = l->np->hub->w->now_us;
		check_held(l->np);
		return true;
	case PqMsg_CommandComplete:
	case PqMsg_EmptyQueryResponse:
	case PqMsg_NoticeResponse:
	case PqMsg_ParameterStatus:
		return true;
	case PqMsg_ErrorResponse:
		/* A LISTEN refused (say, the primary is in recovery now): its
		 * clients are not served by this connection; logged. */
		log_warning("listener (pool %s, shard %d): the server refused a command", l->np->pool->name, l->shard);
		return true;
	default:
		return false;
	}
}

static void listener_down(void *arg, const char *why)
{
	struct notify_listener *l = arg;
	struct notify_pool *np = l->np;
	if (bconn_state(&l->b) == BCONN_CLOSED)
		return;
	log_warning("listener (pool %s, shard %d) %s:%d: %s; notifications to its channels are lost until it is back",
		    np->pool->name, l->shard, l->host ? l->host : "?", l->port, why);
	l->failing = true;
	bconn_close(&l->b, false);
	l->retry_at_us = np->hub->w->now_us + NOTIFY_RETRY_US;
	for (size_t i = 0; i < np->n_channels; i++)
		np->channels[i]->listen_seq[l->shard] = 0;
	l->done_seq = l->sent_seq;   /* nothing more will be answered */
	check_held(np);
}

/* ---- held ReadyForQuery ---- */

/* Listener k answers what the client waits for there: ready and past its
 * barrier and its channels' LISTEN. A connection that is down holds
 * nobody (what it would have delivered is lost, and logged); one on its
 * way from the old process (awaited) holds as one logging in does. */
static bool shard_settled(const struct notify_client *nc, int k)
{
	const struct notify_listener *l = &nc->np->listeners[k];
	enum bconn_state st = bconn_state(&l->b);
	if (st == BCONN_CLOSED)
		return !l->awaited;
	if (st != BCONN_READY)
		return false;
	if (nc->barrier && nc->barrier[k] > l->done_seq)
		return false;
	for (uint32_t i = 0; i < nc->n_channels; i++) {
		uint64_t seq = nc->channels[i]->listen_seq[k];
		if (seq == 0 || seq > l->done_seq)
			return false;
	}
	return true;
}

static bool settled(const struct notify_client *nc)
{
	for (int k = 0; k < nc->np->n_shards; k++)
		if (!shard_settled(nc, k))
			return false;
	return true;
}

static void release_held(struct notify_client *nc)
{
	struct client *c = nc->c;
	char status = nc->held_status;
	nc->held_status = 0;
	if (nc->barrier)
		memset(nc->barrier, 0, (size_t)nc->np->n_shards * sizeof nc->barrier[0]);
	write_queue(nc);
	client_send_rfq(c, status);
	c->reply_held = false;
	update_hold(nc);
	client_process(c);   /* its next requests (may close it) */
}

static void check_held(struct notify_pool *np)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &np->clients) {
		struct notify_client *nc = LIST_OWNER(pos, struct notify_client, node);
		if (nc->held_status && settled(nc))
			release_held(nc);
	}
}

void notify_hold_ready(struct notify_client *nc, char status, bool barrier)
{
	struct notify_pool *np = nc->np;
	nc->held_status = status;
	nc->c->reply_held = true;
	if (barrier && nc->n_channels > 0) {
		if (!nc->barrier && !(nc->barrier = calloc((size_t)np->n_shards, sizeof nc->barrier[0]))) {
			release_held(nc);
			return;
		}
		for (int k = 0; k < np->n_shards; k++) {
			struct notify_listener *l = &np->listeners[k];
			if (bconn_state(&l->b) != BCONN_READY)
				continue;
			/* A command not flushed yet goes after everything
			 * committed until now: it will do as the barrier. */
			if (l->sent_seq > l->done_seq && io_out_len(&l->b.io) > 0)
				nc->barrier[k] = l->sent_seq;
			else
				listener_send(l, "", NULL, &nc->barrier[k]);
		}
	}
	if (settled(nc))
		release_held(nc);
}

/* ---- the hub, its pools and clients ---- */

void notify_pool_free(struct notify_pool *np)
{
	while (np->n_channels > 0)
		channel_drop(np, np->channels[np->n_channels - 1]);
	for (int k = 0; k < np->n_shards; k++) {
		struct notify_listener *l = &np->listeners[k];
		bconn_close(&l->b, true);
		bconn_release(&l->b);
		free(l->host);
		free(l->database);
	}
	list_del(&np->node);
	free(np->listeners);
	free(np->channels);
	struct shm *shm = np->hub->w->shm;
	if (shm && shm->h)
		atomic_fetch_sub_explicit(&shm->h->notify_pools, 1, memory_order_relaxed);
	free(np);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct notify_hub *hub = arg;
	struct worker *w = hub->w;
	uint64_t limit_us = (uint64_t)w->cfg->general.connect_timeout * 1000;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &hub->pools) {
		struct notify_pool *np = LIST_OWNER(pos, struct notify_pool, node);
		if (list_empty(&np->clients) && !np->taking) {
			notify_pool_free(np);   /* (its last listening client went) */
			continue;
		}
		for (int k = 0; k < np->n_shards; k++) {
			struct notify_listener *l = &np->listeners[k];
			enum bconn_state st = bconn_state(&l->b);
			if (st == BCONN_CLOSED && np->n_channels > 0 && w->now_us >= l->retry_at_us)
				notify_listener_open(l);
			else if (st != BCONN_CLOSED && st != BCONN_READY && w->now_us - bconn_state_since(&l->b) > limit_us)
				listener_down(l, "connect or login timed out");
			else if (st == BCONN_READY && l->sent_seq > l->done_seq &&
				 w->now_us - l->oldest_sent_us > limit_us + 5000000u)
				listener_down(l, "the server stopped answering");
		}
		/* Notifications queued for a client that went idle on a path
		 * that does not end at a server's ReadyForQuery. */
		struct list_node *cpos, *ctmp;
		LIST_FOREACH_SAFE(cpos, ctmp, &np->clients) {
			struct notify_client *nc = LIST_OWNER(cpos, struct notify_client, node);
			if (nc->queue && buf_len(nc->queue) > 0)
				notify_flush(nc);
		}
	}
}

struct notify_hub *notify_hub_get(struct worker *w)
{
	if (w->notify)
		return w->notify;
	struct notify_hub *hub = calloc(1, sizeof *hub);
	if (!hub)
		return NULL;
	hub->w = w;
	list_init(&hub->pools);
	hub->timer = event_new(w->base, -1, EV_PERSIST, timer_cb, hub);
	if (!hub->timer) {
		free(hub);
		return NULL;
	}
	struct timeval tv = { 0, 250 * 1000 };
	evtimer_add(hub->timer, &tv);
	w->notify = hub;
	return hub;
}

struct notify_pool *notify_pool_get(struct notify_hub *hub, struct pool *p)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &hub->pools) {
		struct notify_pool *np = LIST_OWNER(pos, struct notify_pool, node);
		if (np->pool == p)
			return np;
	}
	struct notify_pool *np = calloc(1, sizeof *np);
	if (!np)
		return NULL;
	np->hub = hub;
	np->pool = p;
	np->n_shards = p->cpool->n_shards > 0 ? p->cpool->n_shards : 1;
	list_init(&np->clients);
	np->listeners = calloc((size_t)np->n_shards, sizeof *np->listeners);
	if (!np->listeners) {
		free(np);
		return NULL;
	}
	for (int k = 0; k < np->n_shards; k++) {
		struct notify_listener *l = &np->listeners[k];
		l->np = np;
		l->shard = k;
		bconn_init(&l->b, hub->w, listener_ready, listener_message, listener_down, l);
	}
	list_add_tail(&hub->pools, &np->node);
	/* From now on every worker looks at requests for NOTIFY (link.h). */
	struct shm *shm = hub->w->shm;
	if (shm && shm->h)
		atomic_fetch_add_explicit(&shm->h->notify_pools, 1, memory_order_relaxed);
	return np;
}

struct notify_client *notify_client_get(struct client *c)
{
	struct notify_client *nc = notify_client_of(c);
	if (nc)
		return nc;
	struct notify_hub *hub = notify_hub_get(c->w);
	struct notify_pool *np = hub ? notify_pool_get(hub, c->pool) : NULL;
	if (!np || !(nc = calloc(1, sizeof *nc)))
		return NULL;
	nc->c = c;
	nc->np = np;
	list_add_tail(&np->clients, &nc->node);
	c->kind_state = nc;
	return nc;
}

void notify_client_free(struct client *c)
{
	struct notify_client *nc = notify_client_of(c);
	if (!nc)
		return;
	unregister_all(nc);
	list_del(&nc->node);
	c->kind_state = NULL;
	c->end.hold_ready = false;
	if (nc->queue)
		buf_free(nc->queue);
	for (uint32_t i = 0; i < nc->stmts.n; i++)
		free(nc->stmts.v[i].name);
	free(nc->stmts.v);
	free(nc->channels);
	free(nc->ops);
	free(nc->barrier);
	free(nc);
	/* The last listening client of the pool: its connections go at the
	 * hub's next tick (timer_cb), not here: this may run inside one of
	 * their own events (a held ReadyForQuery released, the client's next
	 * request a Terminate), whose bconn must outlive it. */
}

void notify_hub_free(struct worker *w)
{
	struct notify_hub *hub = w->notify;
	if (!hub)
		return;
	while (!list_empty(&hub->pools))
		notify_pool_free(LIST_OWNER(hub->pools.next, struct notify_pool, node));
	event_free(hub->timer);
	free(hub);
	w->notify = NULL;
}
