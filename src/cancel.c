/* SPDX-License-Identifier: MIT */
/*
 * cancel: BackendKeyData keys for clients, and outgoing CancelRequests.
 * The pid field of a key names the worker and slot; the key holds a random
 * secret stored in the slot (4 bytes for protocol 3.0, 24 in a 32-byte 3.2
 * key), so a key is valid only while its client lives.
 */
#include "cancel.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "randpool.h"
#include "list.h"
#include "log.h"
#include "proto.h"
#include "shm.h"

_Static_assert(sizeof(((struct shm_cancel_slot *)0)->ext) == CANCEL_KEY_EXT_LEN, "the shared slot holds a long key's secret");

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
		s[i].owner = NULL;
		s[i].kind = CANCEL_KEY_NONE;
		memset(s[i].ext, 0, sizeof s[i].ext);
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

bool cancel_key_assign(struct cancel_table *t, void *owner, enum cancel_key_kind kind, uint32_t *pid,
		       uint32_t *secret_out, uint8_t *key_out, size_t *key_len)
{
	if (!t->free_head || (kind != CANCEL_KEY_SHORT && kind != CANCEL_KEY_LONG))
		return false;
	uint32_t idx = t->free_head - 1;
	struct cancel_slot *slot = &t->slots[idx];
	uint32_t secret = 0;
	while (secret == 0)
		if (!randpool_bytes(t->rand, &secret, sizeof secret))
			return false;
	uint8_t ext[CANCEL_KEY_EXT_LEN] = { 0 };
	if (kind == CANCEL_KEY_LONG && !randpool_bytes(t->rand, ext, sizeof ext))
		return false;
	t->free_head = slot->next_free;
	if (!t->free_head)
		t->free_tail = 0;
	slot->secret = secret;
	slot->owner = owner;
	slot->published = 0;   /* see struct cancel_slot */
	slot->kind = (uint8_t)kind;
	memcpy(slot->ext, ext, sizeof ext);
	*pid = ((uint32_t)(t->worker + 1) << SHM_CANCEL_WORKER_SHIFT) | (idx + 1);
	*secret_out = secret;
	if (kind == CANCEL_KEY_SHORT) {
		proto_put_u32(key_out, secret);
		*key_len = CANCEL_KEY_SHORT_LEN;
	} else {
		key_out[0] = CANCEL_KEY_LAYOUT_V1;
		key_out[1] = 0;   /* hops */
		key_out[2] = key_out[3] = 0;   /* peer id: none */
		proto_put_u32(key_out + 4, *pid);
		proto_put_u32(key_out + 8, secret);
		memcpy(key_out + 12, ext, sizeof ext);
		*key_len = CANCEL_KEY_LONG_LEN;
	}
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
	slot->owner = NULL;
	slot->next_free = 0;
	slot->kind = CANCEL_KEY_NONE;
	memset(slot->ext, 0, sizeof slot->ext);
	if (t->free_tail)
		t->slots[t->free_tail - 1].next_free = idx + 1;
	else
		t->free_head = idx + 1;
	t->free_tail = idx + 1;
	if (t->shm && published)
		shm_cancel_publish(t->shm, t->worker, idx, 0, CANCEL_KEY_NONE, NULL);
}

/* What a CancelRequest's key says: which kind of key it is, and the secret
 * bytes to check. false: no key pgcat issues looks like this one (a length
 * other than 4 or 32, another layout, another instance's). */
struct cancel_parsed {
	enum cancel_key_kind kind;
	uint32_t secret;
	const uint8_t *ext;   /* CANCEL_KEY_EXT_LEN bytes (LONG), or NULL */
};

static bool parse_key(uint32_t pid, const uint8_t *key, size_t key_len, struct cancel_parsed *out)
{
	out->ext = NULL;
	if (key_len == CANCEL_KEY_SHORT_LEN) {
		out->kind = CANCEL_KEY_SHORT;
		out->secret = proto_get_u32(key);
		return true;
	}
	if (key_len != CANCEL_KEY_LONG_LEN || key[0] != CANCEL_KEY_LAYOUT_V1)
		return false;
	/* Peer id 0: this instance (forwarding to peers is not there yet). The
	 * route inside the key must be the pid it came with. */
	if (key[2] != 0 || key[3] != 0 || proto_get_u32(key + 4) != pid)
		return false;
	out->kind = CANCEL_KEY_LONG;
	out->secret = proto_get_u32(key + 8);
	out->ext = key + 12;
	return true;
}

/* Compare secrets in a time that does not tell how many bytes matched. */
static bool same_bytes(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint8_t diff = 0;
	for (size_t i = 0; i < n; i++)
		diff |= (uint8_t)(a[i] ^ b[i]);
	return diff == 0;
}

void *cancel_key_lookup(const struct cancel_table *t, uint32_t pid, const uint8_t *key, size_t key_len)
{
	struct cancel_parsed k;
	if (!parse_key(pid, key, key_len, &k) || worker_of(pid) != t->worker)
		return NULL;
	uint32_t idx = slot_of(pid);
	if (idx >= t->n_slots)
		return NULL;
	const struct cancel_slot *slot = &t->slots[idx];
	/* A 3.2 client's key only in full: its first 4 secret bytes alone, as
	 * a 3.0 key, are not enough. */
	if (!slot->secret || slot->secret != k.secret || slot->kind != k.kind)
		return NULL;
	if (k.kind == CANCEL_KEY_LONG && !same_bytes(slot->ext, k.ext, CANCEL_KEY_EXT_LEN))
		return NULL;
	return slot->owner;
}

/* The slot of the key (pid, secret) in this table, or NULL. */
static struct cancel_slot *own_slot(struct cancel_table *t, uint32_t pid, uint32_t secret)
{
	if (!t->shm || secret == 0 || worker_of(pid) != t->worker)
		return NULL;
	uint32_t idx = slot_of(pid);
	if (idx >= t->n_slots || t->slots[idx].secret != secret)
		return NULL;
	return &t->slots[idx];
}

static void publish(struct cancel_table *t, const struct cancel_slot *slot, uint32_t idx)
{
	shm_cancel_publish(t->shm, t->worker, idx, slot->secret, (enum cancel_key_kind)slot->kind, slot->ext);
}

void cancel_key_share(struct cancel_table *t, uint32_t pid, uint32_t secret)
{
	struct cancel_slot *slot = own_slot(t, pid, secret);
	if (!slot || slot->published)
		return;
	slot->published = 1;
	publish(t, slot, slot_of(pid));
}

void cancel_key_link(struct cancel_table *t, uint32_t pid, uint32_t secret)
{
	/* The server is not published: another worker never sends a cancel
	 * itself (cancel_handle_request), the owner does, from the server
	 * connection it holds. Publishing again still marks a new state of the
	 * slot (shm_cancel_publish). */
	struct cancel_slot *slot = own_slot(t, pid, secret);
	if (!slot)
		return;
	slot->published = 1;
	publish(t, slot, slot_of(pid));
}

void *cancel_handle_request(struct cancel_table *t, uint32_t pid, const uint8_t *key, size_t key_len)
{
	struct cancel_parsed k;
	if (!parse_key(pid, key, key_len, &k))
		return NULL;   /* no key pgcat issued: ignored, as an unknown key */
	void *target = cancel_key_lookup(t, pid, key, key_len);
	if (target)
		return target;
	if (!t->shm || worker_of(pid) == t->worker || worker_of(pid) < 0)
		return NULL;   /* unknown keys are ignored silently, as PostgreSQL does */
	/* Another worker's client: that worker acts on it (cancel_take_flag).
	 * Sent from here, the cancel could reach its server after the query
	 * ended and the server went to another client; there it is sent only
	 * while the client's request runs, and the server is not handed on
	 * before PostgreSQL answered it. */
	(void)shm_cancel_flag(t->shm, worker_of(pid), slot_of(pid), k.kind, k.secret, k.ext);
	return NULL;
}

bool cancel_take_flag(const struct cancel_table *t, uint32_t pid, uint32_t secret)
{
	return t->shm && shm_cancel_take_flag(t->shm, t->worker, slot_of(pid), secret);
}

/* One outgoing CancelRequest connection. */
struct cancel_request {
	struct list_node node;
	struct bufferevent *bev;
	void (*done)(void *arg);  /* told when it is answered; NULL: nobody */
	void *arg;
};

#define CANCEL_REQUEST_TIMEOUT_MS 5000

static void cancel_request_done(struct cancel_request *r)
{
	void (*done)(void *arg) = r->done;
	void *arg = r->arg;
	list_del(&r->node);
	bufferevent_free(r->bev);
	free(r);
	if (done)
		done(arg);
}

void cancel_requests_init(struct cancel_requests *q, struct event_base *base)
{
	q->base = base;
	list_init(&q->list);
}

void cancel_requests_forget(struct cancel_requests *q, const void *arg)
{
	struct list_node *pos;
	for (pos = q->list.next; pos != &q->list; pos = pos->next) {
		struct cancel_request *r = LIST_OWNER(pos, struct cancel_request, node);
		if (r->done && r->arg == arg)
			r->done = NULL;
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

bool cancel_send(struct cancel_requests *q, const struct sockaddr *addr, socklen_t addrlen, uint32_t pid,
		 const uint8_t *key, size_t key_len, void (*done)(void *arg), void *arg)
{
	if (key_len < PROTO_CANCEL_KEY_MIN || key_len > PROTO_CANCEL_KEY_MAX)
		return false;
	struct cancel_request *r = calloc(1, sizeof *r);
	if (!r)
		return false;
	r->bev = bufferevent_socket_new(q->base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (!r->bev) {
		free(r);
		return false;
	}
	list_init(&r->node);
	list_add_tail(&q->list, &r->node);
	bufferevent_setcb(r->bev, cancel_read_cb, NULL, cancel_event_cb, r);
	/* The key goes whole, as long as the server gave it (protocol 3.2). */
	uint8_t pkt[PROTO_CANCEL_HEAD_LEN + PROTO_CANCEL_KEY_MAX];
	size_t pkt_len = PROTO_CANCEL_HEAD_LEN + key_len;
	proto_put_u32(pkt, (uint32_t)pkt_len);
	proto_put_u32(pkt + 4, PG_CANCEL_REQUEST_CODE);
	proto_put_u32(pkt + 8, pid);
	memcpy(pkt + PROTO_CANCEL_HEAD_LEN, key, key_len);
	bufferevent_write(r->bev, pkt, pkt_len);
	struct timeval tv = { CANCEL_REQUEST_TIMEOUT_MS / 1000, (CANCEL_REQUEST_TIMEOUT_MS % 1000) * 1000 };
	bufferevent_set_timeouts(r->bev, &tv, &tv);
	bufferevent_enable(r->bev, EV_READ | EV_WRITE);
	if (bufferevent_socket_connect(r->bev, (struct sockaddr *)addr, (int)addrlen) < 0) {
		log_warning("cancel request: cannot connect");
		cancel_request_done(r);
		return false;
	}
	r->done = done;
	r->arg = arg;
	return true;
}

void cancel_requests_free_all(struct cancel_requests *q)
{
	if (!q->base)
		return;   /* never initialised (its worker failed before its loop was made) */
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &q->list) {
		struct cancel_request *r = LIST_OWNER(pos, struct cancel_request, node);
		r->done = NULL;   /* the servers are going too */
		cancel_request_done(r);
	}
}
