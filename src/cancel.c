/* SPDX-License-Identifier: MIT */
/*
 * cancel: BackendKeyData keys for clients, and outgoing CancelRequests.
 * The pid field of a key is slot index + 1; the key field is a random
 * secret stored in the slot, so a key is valid only while its client lives.
 */
#include "cancel.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "auth_md5.h"
#include "randpool.h"
#include "list.h"
#include "log.h"
#include "proto.h"
#include "client.h"
#include "pool.h"
#include "server.h"
#include "shm.h"
#include "worker.h"

static uint32_t slot_of(uint32_t pid) { return (pid & ((1u << SHM_CANCEL_WORKER_SHIFT) - 1)) - 1; }
static int worker_of(uint32_t pid) { return (int)(pid >> SHM_CANCEL_WORKER_SHIFT) - 1; }

bool cancel_table_init(struct cancel_table *t, uint32_t n_slots, int worker, struct shm *shm, struct randpool *rand)
{
	t->worker = worker;
	t->rand = rand;
	t->shm = shm;
	if (shm && n_slots > shm->h->cancel_per_worker)
		n_slots = shm->h->cancel_per_worker;
	t->slots = calloc(n_slots, sizeof *t->slots);
	if (!t->slots)
		return false;
	t->n_slots = n_slots;
	for (uint32_t i = 0; i < n_slots; i++)
		t->slots[i].next_free = i + 2 <= n_slots ? i + 2 : 0;
	t->free_head = n_slots ? 1 : 0;
	t->free_tail = n_slots;
	return true;
}

bool cancel_table_grow(struct cancel_table *t, uint32_t n_slots)
{
	if (t->shm && n_slots > t->shm->h->cancel_per_worker)
		n_slots = t->shm->h->cancel_per_worker;
	if (n_slots <= t->n_slots)
		return true;
	struct cancel_slot *s = realloc(t->slots, (size_t)n_slots * sizeof *s);
	if (!s)
		return false;
	for (uint32_t i = t->n_slots; i < n_slots; i++) {
		s[i].secret = 0;
		s[i].client = NULL;
		s[i].next_free = i + 2 <= n_slots ? i + 2 : t->free_head;
	}
	if (!t->free_head)
		t->free_tail = n_slots;
	t->free_head = t->n_slots + 1;
	t->slots = s;
	t->n_slots = n_slots;
	return true;
}

void cancel_table_free(struct cancel_table *t)
{
	free(t->slots);
	t->slots = NULL;
	t->n_slots = 0;
	t->free_head = 0;
}

bool cancel_key_assign(struct cancel_table *t, struct client *c, uint32_t *pid, uint32_t *key)
{
	if (!t->free_head)
		return false;
	uint32_t idx = t->free_head - 1;
	struct cancel_slot *slot = &t->slots[idx];
	uint32_t secret = 0;
	while (secret == 0)
		if (!randpool_bytes(t->rand, &secret, sizeof secret))
			return false;
	t->free_head = slot->next_free;
	if (!t->free_head)
		t->free_tail = 0;
	slot->secret = secret;
	slot->client = c;
	slot->published = 0;   /* see struct cancel_slot */
	*pid = ((uint32_t)(t->worker + 1) << SHM_CANCEL_WORKER_SHIFT) | (idx + 1);
	*key = secret;
	return true;
}

void cancel_key_release(struct cancel_table *t, uint32_t pid)
{
	if (worker_of(pid) != t->worker)
		return;
	uint32_t idx = slot_of(pid);
	if (idx >= t->n_slots)
		return;
	struct cancel_slot *slot = &t->slots[idx];
	if (!slot->secret)
		return;
	bool published = slot->published;
	slot->secret = 0;
	slot->client = NULL;
	slot->next_free = 0;
	if (t->free_tail)
		t->slots[t->free_tail - 1].next_free = idx + 1;
	else
		t->free_head = idx + 1;
	t->free_tail = idx + 1;
	if (t->shm && published)
		shm_cancel_publish(t->shm, t->worker, idx, 0, 0, 0, NULL, 0);
}

struct client *cancel_key_lookup(const struct cancel_table *t, uint32_t pid, uint32_t key)
{
	if (worker_of(pid) != t->worker)
		return NULL;
	uint32_t idx = slot_of(pid);
	if (idx >= t->n_slots)
		return NULL;
	const struct cancel_slot *slot = &t->slots[idx];
	if (!slot->secret || slot->secret != key)
		return NULL;
	return slot->client;
}

/* The slot of c's key in this table, or NULL. */
static struct cancel_slot *own_slot(struct cancel_table *t, const struct client *c)
{
	if (!t->shm || !c->has_cancel_key || worker_of(c->cancel_pid) != t->worker)
		return NULL;
	uint32_t idx = slot_of(c->cancel_pid);
	if (idx >= t->n_slots || t->slots[idx].secret != c->cancel_key)
		return NULL;
	return &t->slots[idx];
}

void cancel_key_share(struct cancel_table *t, const struct client *c)
{
	struct cancel_slot *slot = own_slot(t, c);
	if (!slot || slot->published)
		return;
	slot->published = 1;
	shm_cancel_publish(t->shm, t->worker, slot_of(c->cancel_pid), c->cancel_key, 0, 0, NULL, 0);
}

void cancel_key_link(struct cancel_table *t, const struct client *c, const struct server *s)
{
	struct cancel_slot *slot = own_slot(t, c);
	if (!slot)
		return;
	slot->published = 1;
	uint32_t idx = slot_of(c->cancel_pid);
	if (s)
		shm_cancel_publish(t->shm, t->worker, idx, c->cancel_key, s->backend_pid, s->backend_key,
				   (const struct sockaddr *)&s->sp->addr, s->sp->addrlen);
	else
		shm_cancel_publish(t->shm, t->worker, idx, c->cancel_key, 0, 0, NULL, 0);
}

void cancel_handle_request(struct worker *w, uint32_t pid, uint32_t key)
{
	struct client *target = cancel_key_lookup(&w->cancel, pid, key);
	if (target) {
		client_cancel_query(target);
		return;
	}
	if (!w->shm || worker_of(pid) == w->id || worker_of(pid) < 0)
		return;   /* unknown keys are ignored silently, as PostgreSQL does */
	/* Another worker's client: that worker acts on it (cancel_poll_waiting).
	 * Sent from here, the cancel could reach its server after the query
	 * ended and the server went to another client; there it is sent only
	 * while the client's request runs, and the server is not handed on
	 * before PostgreSQL answered it. */
	(void)shm_cancel_flag(w->shm, worker_of(pid), slot_of(pid), key);
}

static void poll_list(struct worker *w, struct list_node *head)
{
	struct list_node *cp, *ct;
	LIST_FOREACH_SAFE(cp, ct, head) {
		struct client *c = LIST_OWNER(cp, struct client, node);
		if (c->has_cancel_key && shm_cancel_take_flag(w->shm, w->id, slot_of(c->cancel_pid), c->cancel_key))
			client_cancel_query(c);
	}
}

void cancel_poll_waiting(struct worker *w)
{
	if (!w->shm)
		return;
	poll_list(w, &w->clients_active);
	struct list_node *pp, *pt;
	LIST_FOREACH_SAFE(pp, pt, &w->pools) {
		struct pool *p = LIST_OWNER(pp, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++)
			poll_list(w, &p->targets[i]->waiters);
	}
}

/* One outgoing CancelRequest connection. */
struct cancel_request {
	struct list_node node;
	struct bufferevent *bev;
	struct server *server;    /* told when it is answered; NULL: nobody */
};

#define CANCEL_REQUEST_TIMEOUT_MS 5000

static void cancel_request_done(struct cancel_request *r)
{
	struct server *s = r->server;
	list_del(&r->node);
	bufferevent_free(r->bev);
	free(r);
	if (s)
		server_cancel_done(s);
}

void cancel_requests_forget(struct worker *w, const struct server *s)
{
	struct list_node *pos;
	for (pos = w->cancel_requests.next; pos != &w->cancel_requests; pos = pos->next) {
		struct cancel_request *r = LIST_OWNER(pos, struct cancel_request, node);
		if (r->server == s)
			r->server = NULL;
	}
}

static void cancel_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct cancel_request *r = arg;
	if (what & BEV_EVENT_CONNECTED)
		return;
	/* EOF (the server closes after reading the request), an error, or no
	 * answer in CANCEL_REQUEST_TIMEOUT_MS. */
	if (what & BEV_EVENT_ERROR)
		log_debug("cancel request: connection error");
	if (what & BEV_EVENT_TIMEOUT)
		log_warning("cancel request: no answer from the server in %d ms", CANCEL_REQUEST_TIMEOUT_MS);
	cancel_request_done(r);
}

static void cancel_read_cb(struct bufferevent *bev, void *arg)
{
	evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
}

bool cancel_send(struct worker *w, const struct sockaddr *addr, socklen_t addrlen, uint32_t pid, uint32_t key,
		 struct server *for_server)
{
	struct cancel_request *r = calloc(1, sizeof *r);
	if (!r)
		return false;
	r->bev = bufferevent_socket_new(w->base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (!r->bev) {
		free(r);
		return false;
	}
	list_init(&r->node);
	list_add_tail(&w->cancel_requests, &r->node);
	bufferevent_setcb(r->bev, cancel_read_cb, NULL, cancel_event_cb, r);
	uint8_t pkt[16];
	proto_put_u32(pkt, 16);
	proto_put_u32(pkt + 4, PG_CANCEL_REQUEST_CODE);
	proto_put_u32(pkt + 8, pid);
	proto_put_u32(pkt + 12, key);
	bufferevent_write(r->bev, pkt, sizeof pkt);
	struct timeval tv = { CANCEL_REQUEST_TIMEOUT_MS / 1000, (CANCEL_REQUEST_TIMEOUT_MS % 1000) * 1000 };
	bufferevent_set_timeouts(r->bev, &tv, &tv);
	bufferevent_enable(r->bev, EV_READ | EV_WRITE);
	if (bufferevent_socket_connect(r->bev, (struct sockaddr *)addr, (int)addrlen) < 0) {
		log_warning("cancel request: cannot connect");
		cancel_request_done(r);
		return false;
	}
	r->server = for_server;
	return true;
}

void cancel_requests_free_all(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->cancel_requests) {
		struct cancel_request *r = LIST_OWNER(pos, struct cancel_request, node);
		r->server = NULL;   /* the servers are going too */
		cancel_request_done(r);
	}
}
