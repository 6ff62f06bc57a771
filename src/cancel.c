/* SPDX-License-Identifier: MIT */
/*
 * cancel: BackendKeyData keys for clients, and outgoing CancelRequests.
 * The pid field of a key names the worker and slot; the key holds a random
 * secret stored in the slot (4 bytes for protocol 3.0, 24 in a 32-byte 3.2
 * key), so a key is valid only while its client lives. With peer_id set,
 * keys also carry this instance's id and a hop counter (SPEC §3.4): a
 * request for another instance's key comes out as a struct cancel_forward
 * that peer.c sends on.
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

/* The peer layout of a 3.0 key's pid (cancel.h): byte 0 from
 * CANCEL_PEER_PID_BASE up (sign bit clear), the peer id in bytes 1-2 low
 * byte first, the slot in what is left of bytes 0 and 3. */
static bool is_peer_pid(uint32_t pid)
{
	uint32_t top = pid >> 24;
	return top >= CANCEL_PEER_PID_BASE && top < 0x80u;
}
static uint32_t peer_pid_slot(uint32_t pid) { return (((pid >> 24) - CANCEL_PEER_PID_BASE) << 8) | (pid & 0xffu); }
static int peer_pid_id(uint32_t pid) { return (int)(((pid >> 16) & 0xffu) | (((pid >> 8) & 0xffu) << 8)); }
static uint32_t make_peer_pid(uint32_t idx, int peer_id)
{
	return ((CANCEL_PEER_PID_BASE + (idx >> 8)) << 24) | (((uint32_t)peer_id & 0xffu) << 16) |
	       ((((uint32_t)peer_id >> 8) & 0xffu) << 8) | (idx & 0xffu);
}

/* How many top bits of a peer-layout secret name the worker: enough for
 * the instance's workers (fixed for its life), none for one. Counted once
 * (cancel_table_init): every link of a key to a query reads it. */
static uint8_t count_worker_bits(const struct shm *shm)
{
	uint32_t n = shm ? shm->h->n_workers : 1;
	uint8_t bits = 0;
	while (bits < 8 && (1u << bits) < n)
		bits++;
	return bits;
}
static unsigned worker_bits(const struct cancel_table *t) { return t->worker_bits; }
static int secret_worker(const struct cancel_table *t, uint32_t secret)
{
	unsigned bits = worker_bits(t);
	return bits ? (int)(secret >> (32 - bits)) : 0;
}

/* The worker and slot a pid names: a plain pid says both; a peer-layout
 * pid says the slot, its secret the worker. */
static void route_of(const struct cancel_table *t, uint32_t pid, uint32_t secret, int *worker, uint32_t *slot)
{
	if (is_peer_pid(pid)) {
		*worker = secret_worker(t, secret);
		*slot = peer_pid_slot(pid);
	} else {
		*worker = worker_of(pid);
		*slot = slot_of(pid);
	}
}

bool cancel_table_init(struct cancel_table *t, uint32_t n_slots, int worker, struct shm *shm, struct randpool *rand)
{
	t->worker = worker;
	t->peer_id = 0;
	t->warned_peer_slots = false;
	t->rand = rand;
	t->shm = shm;
	t->worker_bits = count_worker_bits(shm);
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
		s[i].peer_pid = 0;
		s[i].peer_id = 0;
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

void cancel_table_set_peer_id(struct cancel_table *t, int peer_id)
{
	t->peer_id = peer_id;
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
	bool peer_pid = kind == CANCEL_KEY_SHORT && t->peer_id > 0;
	if (peer_pid && idx >= CANCEL_PEER_SLOTS) {
		peer_pid = false;
		if (!t->warned_peer_slots)
			log_warning("worker %d: more than %u clients of protocol 3.0: the further ones get cancel keys "
				    "without this instance's peer id", t->worker, CANCEL_PEER_SLOTS);
		t->warned_peer_slots = true;
	}
	uint32_t secret = 0;
	while (secret == 0)
		if (!randpool_bytes(t->rand, &secret, sizeof secret))
			return false;
	if (peer_pid) {
		/* The worker in the top bits, all hops left in the low two. */
		unsigned bits = worker_bits(t);
		if (bits)
			secret = ((uint32_t)t->worker << (32 - bits)) | (secret >> bits);
		secret |= CANCEL_PEER_HOPS_MASK;
	}
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
	slot->peer_pid = peer_pid;
	slot->peer_id = (uint16_t)(peer_pid || kind == CANCEL_KEY_LONG ? t->peer_id : 0);
	memcpy(slot->ext, ext, sizeof ext);
	if (peer_pid)
		*pid = make_peer_pid(idx, t->peer_id);
	else
		*pid = ((uint32_t)(t->worker + 1) << SHM_CANCEL_WORKER_SHIFT) | (idx + 1);
	*secret_out = secret;
	if (kind == CANCEL_KEY_SHORT) {
		proto_put_u32(key_out, secret);
		*key_len = CANCEL_KEY_SHORT_LEN;
	} else {
		key_out[0] = CANCEL_KEY_LAYOUT_V1;
		key_out[1] = 0;   /* hops */
		key_out[2] = (uint8_t)((unsigned)t->peer_id >> 8);
		key_out[3] = (uint8_t)t->peer_id;
		proto_put_u32(key_out + 4, *pid);
		proto_put_u32(key_out + 8, secret);
		memcpy(key_out + 12, ext, sizeof ext);
		*key_len = CANCEL_KEY_LONG_LEN;
	}
	return true;
}

void cancel_key_release(struct cancel_table *t, uint32_t pid)
{
	/* A peer-layout pid does not name its worker: it came from this one. */
	bool peer_pid = is_peer_pid(pid);
	if (!peer_pid && worker_of(pid) != t->worker)
		return;
	uint32_t idx = peer_pid ? peer_pid_slot(pid) : slot_of(pid);
	if (idx >= t->n_slots)
		return;
	struct cancel_slot *slot = &t->slots[idx];
	if (!slot->secret || slot->peer_pid != peer_pid)
		return;
	bool published = slot->published;
	slot->secret = 0;
	slot->owner = NULL;
	slot->next_free = 0;
	slot->kind = CANCEL_KEY_NONE;
	slot->peer_pid = 0;
	slot->peer_id = 0;
	memset(slot->ext, 0, sizeof slot->ext);
	if (t->free_tail)
		t->slots[t->free_tail - 1].next_free = idx + 1;
	else
		t->free_head = idx + 1;
	t->free_tail = idx + 1;
	if (t->shm && published)
		shm_cancel_publish(t->shm, t->worker, idx, 0, CANCEL_KEY_NONE, NULL);
}

/* The free list again from the slots' state, lowest first (-R's
 * reservations: once at the start of a handover, once at its end). */
static void rebuild_free_list(struct cancel_table *t)
{
	t->free_head = t->free_tail = 0;
	for (uint32_t i = 0; i < t->n_slots; i++) {
		struct cancel_slot *sl = &t->slots[i];
		if (sl->secret || sl->kind == CANCEL_KEY_RESERVED)
			continue;
		sl->next_free = 0;
		if (t->free_tail)
			t->slots[t->free_tail - 1].next_free = i + 1;
		else
			t->free_head = i + 1;
		t->free_tail = i + 1;
	}
}

void cancel_table_reserve(struct cancel_table *t, const uint32_t *slots, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (slots[i] < t->n_slots && !t->slots[slots[i]].secret)
			t->slots[slots[i]].kind = CANCEL_KEY_RESERVED;
	rebuild_free_list(t);
}

void cancel_table_unreserve(struct cancel_table *t)
{
	bool any = false;
	for (uint32_t i = 0; i < t->n_slots; i++)
		if (!t->slots[i].secret && t->slots[i].kind == CANCEL_KEY_RESERVED) {
			t->slots[i].kind = CANCEL_KEY_NONE;
			any = true;
		}
	if (any)
		rebuild_free_list(t);
}

size_t cancel_table_used(const struct cancel_table *t, uint32_t *slots, size_t max, size_t from, size_t *next)
{
	size_t n = 0, i = from;
	for (; i < t->n_slots && n < max; i++)
		if (t->slots[i].secret)
			slots[n++] = (uint32_t)i;
	*next = i;
	return n;
}

bool cancel_key_export(const struct cancel_table *t, uint32_t pid, struct cancel_key_state *out)
{
	bool peer_pid = is_peer_pid(pid);
	if (!peer_pid && worker_of(pid) != t->worker)
		return false;
	uint32_t idx = peer_pid ? peer_pid_slot(pid) : slot_of(pid);
	if (idx >= t->n_slots || !t->slots[idx].secret || t->slots[idx].peer_pid != peer_pid)
		return false;
	const struct cancel_slot *slot = &t->slots[idx];
	memset(out, 0, sizeof *out);
	out->pid = pid;
	out->secret = slot->secret;
	out->kind = slot->kind;
	out->peer_pid = slot->peer_pid;
	out->peer_id = slot->peer_id;
	memcpy(out->ext, slot->ext, sizeof out->ext);
	return true;
}

bool cancel_key_adopt(struct cancel_table *t, void *owner, const struct cancel_key_state *k)
{
	bool peer_pid = is_peer_pid(k->pid);
	if (peer_pid != (k->peer_pid != 0) || (!peer_pid && worker_of(k->pid) != t->worker) || k->secret == 0 ||
	    (k->kind != CANCEL_KEY_SHORT && k->kind != CANCEL_KEY_LONG))
		return false;
	uint32_t idx = peer_pid ? peer_pid_slot(k->pid) : slot_of(k->pid);
	if (idx >= t->n_slots || t->slots[idx].secret)
		return false;
	/* Off the free list: held for it already (cancel_table_reserve), or
	 * a walk (a key that was not announced). */
	uint32_t prev = 0;
	for (uint32_t cur = t->slots[idx].kind == CANCEL_KEY_RESERVED ? 0 : t->free_head; cur;
	     prev = cur, cur = t->slots[cur - 1].next_free) {
		if (cur != idx + 1)
			continue;
		uint32_t next = t->slots[idx].next_free;
		if (prev)
			t->slots[prev - 1].next_free = next;
		else
			t->free_head = next;
		if (t->free_tail == cur)
			t->free_tail = prev;
		break;
	}
	struct cancel_slot *slot = &t->slots[idx];
	slot->secret = k->secret;
	slot->owner = owner;
	slot->published = 0;
	slot->kind = k->kind;
	slot->peer_pid = k->peer_pid;
	slot->peer_id = k->peer_id;
	memcpy(slot->ext, k->ext, sizeof slot->ext);
	return true;
}

/* What a CancelRequest's key says: which kind of key it is, the secret
 * bytes to check, whose it is. false: no key pgcat issues looks like this
 * one (a length other than 4 or 32, another layout). */
struct cancel_parsed {
	enum cancel_key_kind kind;
	uint32_t secret;      /* as the slot holds it (a peer-layout key's hop bits all set) */
	const uint8_t *ext;   /* CANCEL_KEY_EXT_LEN bytes (LONG), or NULL */
	int worker;           /* the worker and slot it names (unchecked) */
	uint32_t slot;
	bool peer_pid;        /* a 3.0 key of the peer layout */
	int peer_id;          /* the issuing instance; 0: none said */
};

static bool parse_key(const struct cancel_table *t, uint32_t pid, const uint8_t *key, size_t key_len,
		      struct cancel_parsed *out)
{
	out->ext = NULL;
	out->peer_pid = false;
	out->peer_id = 0;
	if (key_len == CANCEL_KEY_SHORT_LEN) {
		out->kind = CANCEL_KEY_SHORT;
		out->secret = proto_get_u32(key);
		if (is_peer_pid(pid)) {
			/* The hops left do not take part in the check. */
			out->secret |= CANCEL_PEER_HOPS_MASK;
			out->peer_pid = true;
			out->peer_id = peer_pid_id(pid);
		}
		route_of(t, pid, out->secret, &out->worker, &out->slot);
		return true;
	}
	if (key_len != CANCEL_KEY_LONG_LEN || key[0] != CANCEL_KEY_LAYOUT_V1)
		return false;
	/* The route inside the key must be the pid it came with (a plain
	 * one: long keys say their peer id in bytes 2-3). */
	if (proto_get_u32(key + 4) != pid || is_peer_pid(pid))
		return false;
	out->kind = CANCEL_KEY_LONG;
	out->secret = proto_get_u32(key + 8);
	out->ext = key + 12;
	out->peer_id = (int)(((unsigned)key[2] << 8) | key[3]);
	out->worker = worker_of(pid);
	out->slot = slot_of(pid);
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

static void *lookup_parsed(const struct cancel_table *t, const struct cancel_parsed *k)
{
	if (k->worker != t->worker || k->slot >= t->n_slots)
		return NULL;
	const struct cancel_slot *slot = &t->slots[k->slot];
	/* A 3.2 client's key only in full: its first 4 secret bytes alone, as
	 * a 3.0 key, are not enough. */
	if (!slot->secret || slot->secret != k->secret || slot->kind != k->kind || slot->peer_pid != k->peer_pid ||
	    slot->peer_id != k->peer_id)
		return NULL;
	if (k->kind == CANCEL_KEY_LONG && !same_bytes(slot->ext, k->ext, CANCEL_KEY_EXT_LEN))
		return NULL;
	return slot->owner;
}

void *cancel_key_lookup(const struct cancel_table *t, uint32_t pid, const uint8_t *key, size_t key_len)
{
	struct cancel_parsed k;
	if (!parse_key(t, pid, key, key_len, &k))
		return NULL;
	return lookup_parsed(t, &k);
}

/* The slot of the key (pid, secret) in this table, or NULL. */
static struct cancel_slot *own_slot(struct cancel_table *t, uint32_t pid, uint32_t secret)
{
	int worker;
	uint32_t idx;
	route_of(t, pid, secret, &worker, &idx);
	if (!t->shm || secret == 0 || worker != t->worker)
		return NULL;
	if (idx >= t->n_slots || t->slots[idx].secret != secret || t->slots[idx].peer_pid != is_peer_pid(pid))
		return NULL;
	return &t->slots[idx];
}

static void publish(struct cancel_table *t, const struct cancel_slot *slot)
{
	uint32_t idx = (uint32_t)(slot - t->slots);
	shm_cancel_publish(t->shm, t->worker, idx, slot->secret, (enum cancel_key_kind)slot->kind, slot->ext);
}

void cancel_key_link(struct cancel_table *t, uint32_t pid, uint32_t secret)
{
	/* The server is not published: another worker never sends a cancel
	 * itself (cancel_handle_request), the owner does, from the server
	 * connection it holds. A new link is a new state of the slot: a
	 * cancel asked before it no longer applies (shm_cancel_publish). */
	struct cancel_slot *slot = own_slot(t, pid, secret);
	if (!slot)
		return;
	if (!slot->published) {
		slot->published = 1;
		publish(t, slot);
		return;
	}
	/* Published already (its key does not change while it is issued):
	 * only a cancel asked for an earlier query is forgotten. */
	shm_cancel_forget_request(t->shm, t->worker, (uint32_t)(slot - t->slots));
}

/* The request to send on to the key's issuer, its hop counter moved by
 * one; or exhausted, when it has made its last hop. */
static void next_hop(uint32_t pid, const uint8_t *key, size_t key_len, const struct cancel_parsed *k,
		     struct cancel_forward *fwd)
{
	fwd->peer_id = k->peer_id;
	fwd->pid = pid;
	fwd->key_len = key_len;
	memcpy(fwd->key, key, key_len);
	if (k->kind == CANCEL_KEY_SHORT) {
		uint8_t left = key[3] & CANCEL_PEER_HOPS_MASK;
		if (left == 0)
			fwd->exhausted = true;
		else
			fwd->key[3] = (uint8_t)((key[3] & ~CANCEL_PEER_HOPS_MASK) | (left - 1u));
	} else {
		if (key[1] >= CANCEL_MAX_HOPS)
			fwd->exhausted = true;
		else
			fwd->key[1] = (uint8_t)(key[1] + 1u);
	}
}

void *cancel_handle_request(struct cancel_table *t, uint32_t pid, const uint8_t *key, size_t key_len,
			    struct cancel_forward *fwd)
{
	fwd->peer_id = 0;
	fwd->exhausted = false;
	fwd->unknown_worker = -1;
	struct cancel_parsed k;
	if (!parse_key(t, pid, key, key_len, &k))
		return NULL;   /* no key pgcat issued: ignored, as an unknown key */
	void *target = lookup_parsed(t, &k);
	if (target)
		return target;
	/* Another worker's client: that worker acts on it (cancel_take_flag).
	 * Sent from here, the cancel could reach its server after the query
	 * ended and the server went to another client; there it is sent only
	 * while the client's request runs, and the server is not handed on
	 * before PostgreSQL answered it. */
	if (t->shm && k.worker != t->worker && k.worker >= 0 &&
	    shm_cancel_flag(t->shm, k.worker, k.slot, k.kind, k.secret, k.ext))
		return NULL;
	/* Held nowhere here. Another instance's (a key issued here before a
	 * reload changed peer_id was found above): forwarded. Else unknown,
	 * ignored silently, as PostgreSQL does. */
	if (t->peer_id > 0 && k.peer_id > 0 && k.peer_id != t->peer_id)
		next_hop(pid, key, key_len, &k, fwd);
	else if (k.worker >= 0)
		fwd->unknown_worker = k.worker;
	return NULL;
}

bool cancel_take_flag(const struct cancel_table *t, uint32_t pid, uint32_t secret)
{
	int worker;
	uint32_t idx;
	route_of(t, pid, secret, &worker, &idx);
	return t->shm && shm_cancel_take_flag(t->shm, t->worker, idx, secret);
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
