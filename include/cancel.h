/* SPDX-License-Identifier: MIT */
/*
 * cancel: the keys pgcat hands to clients in BackendKeyData, and the
 * CancelRequests pgcat sends to servers. A key names a slot; the random
 * secret in the slot makes a stale or guessed key useless. The table is a
 * flat array of plain structs so it can move into shared memory.
 */
#ifndef PGCAT_CANCEL_H
#define PGCAT_CANCEL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "list.h"
#include "types.h"

struct event_base;
struct randpool;

/* The kinds of key pgcat issues: what the client's protocol version allows. */
enum cancel_key_kind {
	CANCEL_KEY_NONE = 0,
	CANCEL_KEY_SHORT = 1,     /* protocol 3.0 (and 3.1): 4 bytes, the secret */
	CANCEL_KEY_LONG = 2,      /* protocol 3.2: CANCEL_KEY_LONG_LEN bytes */
	/* Not a key: a slot held (not free, matching nothing) for the key a
	 * client of the process being taken over brings along (-R). */
	CANCEL_KEY_RESERVED = 3
};

/* A 3.2 key (pgcat's own layout; a client treats it as opaque bytes):
 *   byte 0       CANCEL_KEY_LAYOUT_V1, what the rest means
 *   byte 1       hop counter: 0 when issued, one more each time an
 *                instance forwards it to a peer (SPEC §3.4), at most
 *                CANCEL_MAX_HOPS
 *   bytes 2-3    peer id of the issuing instance, high byte first (0:
 *                peer_id unset when it was issued)
 *   bytes 4-7    the route, equal to the pid field: worker and slot
 *   bytes 8-11   the slot's secret (a 3.0 key holds only this)
 *   bytes 12-31  CANCEL_KEY_EXT_LEN more random bytes
 * 24 random bytes in all, each checked before anything is cancelled. */
#define CANCEL_KEY_SHORT_LEN 4u
#define CANCEL_KEY_LONG_LEN 32u
#define CANCEL_KEY_EXT_LEN 20u
#define CANCEL_KEY_LAYOUT_V1 1u

/* A 3.0 key issued while peer_id is set, seen as the 8 bytes pid + key of
 * BackendKeyData (the layout peering poolers use, SPEC §3.4):
 *   byte 0       CANCEL_PEER_PID_BASE + the slot's high bits (the sign bit
 *                stays clear; the plain layout's pids are all below 2^28,
 *                so the two never meet)
 *   bytes 1-2    peer id of the issuing instance, low byte first
 *   byte 3       the slot's low 8 bits
 *   bytes 4-7    the secret: the worker in its top bits (as many as the
 *                instance's workers need, none for one worker), random
 *                bits, and in the low 2 bits of byte 7 the hops left:
 *                CANCEL_MAX_HOPS when issued, one less per forward.
 * So a worker gives such keys to its first CANCEL_PEER_SLOTS slots; a 3.0
 * client in a slot beyond gets a plain key (no peer id: cancelled only
 * through this instance). Without peer_id, 3.0 keys are plain: pid as in
 * struct cancel_table, the key the 4 random bytes of the secret. */
#define CANCEL_MAX_HOPS 3u
#define CANCEL_PEER_PID_BASE 0x10u
#define CANCEL_PEER_SLOTS ((0x80u - CANCEL_PEER_PID_BASE) << 8)
#define CANCEL_PEER_HOPS_MASK 0x03u

struct cancel_slot {
	uint32_t secret;          /* 0: free */
	union {
		uint32_t next_free;   /* a free slot: the next one, index + 1 */
		/* a slot in use: its secret is in the shared segment. Written
		 * there only once the client first waits for or runs a query:
		 * before that no other worker has anything to cancel, and an
		 * idle client then touches no shared page (its resident size). */
		uint32_t published;
	};
	void *owner;              /* what the key was given to (a client; opaque here) */
	uint8_t kind;             /* enum cancel_key_kind of the key issued */
	uint8_t peer_pid;         /* its pid is of the peer layout (a 3.0 key, peer_id set) */
	uint16_t peer_id;         /* the peer id the key carries (0: none) */
	uint8_t ext[CANCEL_KEY_EXT_LEN];   /* a long key's random bytes after the secret */
};

struct shm;

/* pid = ((worker + 1) << SHM_CANCEL_WORKER_SHIFT) | (slot + 1) (the plain
 * layout; a 3.0 key issued with peer_id set has its own, above): any worker
 * can tell whose key it is; the shared segment mirrors each slot's key (its
 * kind and every secret byte), so a worker a CancelRequest lands on can
 * check it in full and flag the owner, which cancels the query on its own
 * server connection (whose key, as long as its server gave it, never leaves
 * that worker). */
struct cancel_table {
	struct cancel_slot *slots;
	uint32_t n_slots;
	/* Free slots, index + 1 (0: none), oldest first: a slot is used again
	 * only after every other free one, so the pid a client was given does
	 * not come back for the next login (pgxpool opens a new connection
	 * as it closes one; a late CancelRequest of the old must find nothing). */
	uint32_t free_head, free_tail;
	int worker;
	int peer_id;              /* [general] peer_id: put in the keys issued from now on */
	bool warned_peer_slots;   /* logged once: a 3.0 key beyond CANCEL_PEER_SLOTS */
	uint8_t worker_bits;      /* of a peer-layout secret, naming the worker (cancel.c) */
	struct shm *shm;
	struct randpool *rand;    /* where keys come from (the worker's) */
};

bool cancel_table_init(struct cancel_table *t, uint32_t n_slots, int worker, struct shm *shm, struct randpool *rand)
	__attribute__((warn_unused_result));
/* This instance's peer id (0: none), at startup and after each reload.
 * Keys issued before keep working: each key says which layout it is of. */
void cancel_table_set_peer_id(struct cancel_table *t, int peer_id);
/* The owner of key (pid, secret), as cancel_key_assign gave it, starts a
 * new request (waits for a server, runs on one, fans out): the key is
 * published if it is not already (another worker may be asked to cancel
 * it), and a cancel asked before, for an earlier request, is forgotten. A
 * key this table does not hold (any more) is ignored. */
void cancel_key_link(struct cancel_table *t, uint32_t pid, uint32_t secret);
/* A CancelRequest that names another instance, to be sent on to it: the
 * peer's id, and the request with the hop counter moved by one. */
struct cancel_forward {
	int peer_id;              /* 0: nothing to forward */
	bool exhausted;           /* forwarded CANCEL_MAX_HOPS times already: drop it */
	uint32_t pid;
	uint8_t key[CANCEL_KEY_LONG_LEN];
	size_t key_len;
	/* A key of this instance's layout that no worker here holds: the
	 * worker it names (-R: the old process may still hold it, handover.h);
	 * -1 otherwise. */
	int unknown_worker;
};

/* A CancelRequest (pid, and a key of key_len bytes). This worker's key:
 * returns its owner, for the caller to cancel its query. Another worker's:
 * flags it in the shared segment for that worker (cancel_take_flag) and
 * returns NULL. A key of a length pgcat never issues is ignored like an
 * unknown one (NULL). A key that no worker here holds and that names
 * another instance's peer id (this one's peer_id set): returns NULL with
 * fwd->peer_id set, for the caller to forward (peer.h); fwd->peer_id is 0
 * otherwise. */
void *cancel_handle_request(struct cancel_table *t, uint32_t pid, const uint8_t *key, size_t key_len,
			    struct cancel_forward *fwd);
/* Whether another worker was asked to cancel the query of this key's
 * owner, clearing the flag (janitor tick, for waiting clients and those
 * running a query: the cancel is sent from here, where the server
 * connection is known, so that it is tracked like a local one). */
bool cancel_take_flag(const struct cancel_table *t, uint32_t pid, uint32_t secret);
void cancel_table_free(struct cancel_table *t);
/* Make room for n_slots keys (after a reload raised max_client_conn). */
bool cancel_table_grow(struct cancel_table *t, uint32_t n_slots) __attribute__((warn_unused_result));
/* Give owner (opaque here; cancel_key_lookup hands it back) a key of this
 * kind: *pid and *secret (for the owner to keep), and the bytes of
 * BackendKeyData's key in key_out (room for CANCEL_KEY_LONG_LEN), *key_len
 * of them. Returns false when the table is full. */
bool cancel_key_assign(struct cancel_table *t, void *owner, enum cancel_key_kind kind, uint32_t *pid,
		       uint32_t *secret, uint8_t *key_out, size_t *key_len) __attribute__((warn_unused_result));
void cancel_key_release(struct cancel_table *t, uint32_t pid);
/* A key as a process hands it to the one taking its clients over
 * (-R, handover.c): everything a slot holds but its owner. */
struct cancel_key_state {
	uint32_t pid, secret;
	uint8_t kind;             /* enum cancel_key_kind */
	uint8_t peer_pid;
	uint16_t peer_id;
	uint8_t ext[CANCEL_KEY_EXT_LEN];
};
/* -R, the new process: the slots the old worker's clients hold are kept
 * out of new logins' reach until their keys come (cancel_key_adopt) or
 * the handover ends (unreserve: what did not come is free again). */
void cancel_table_reserve(struct cancel_table *t, const uint32_t *slots, size_t n);
void cancel_table_unreserve(struct cancel_table *t);
/* The old side: the slots in use, up to max of them, into slots; how many. */
size_t cancel_table_used(const struct cancel_table *t, uint32_t *slots, size_t max, size_t from, size_t *next);
/* The state of this table's key pid; false: no such key here. */
bool cancel_key_export(const struct cancel_table *t, uint32_t pid, struct cancel_key_state *out);
/* Take key k as it was issued, for owner: the same slot, secret and
 * bytes, so that the client's key keeps working. false: the slot is not
 * this worker's or is taken (a login got it first): the caller issues
 * nothing, the client's old key then cancels nothing. */
bool cancel_key_adopt(struct cancel_table *t, void *owner, const struct cancel_key_state *k);
/* The owner a (pid, key) pair names, or NULL: the key must be of the kind
 * issued for that slot and match in full. */
void *cancel_key_lookup(const struct cancel_table *t, uint32_t pid, const uint8_t *key, size_t key_len);

/* A worker's outgoing CancelRequests in flight, on its event loop. */
struct cancel_requests {
	struct event_base *base;
	struct list_node list;    /* struct cancel_request (cancel.c) */
};

void cancel_requests_init(struct cancel_requests *q, struct event_base *base);
/* Open a connection to addr and send CancelRequest(pid, key), the key as
 * the server gave it (4 to PROTO_CANCEL_KEY_MAX bytes). done(arg) is
 * called when PostgreSQL closed the connection (it has signalled the
 * backend by then) or after CANCEL_REQUEST_TIMEOUT_MS: it tells the server
 * connection the cancel is for (done NULL: nobody). false: nothing was
 * sent, and done is not called. */
bool cancel_send(struct cancel_requests *q, const struct sockaddr *addr, socklen_t addrlen, uint32_t pid,
		 const uint8_t *key, size_t key_len, void (*done)(void *arg), void *arg);
/* arg (a server) is closing: its CancelRequests in flight tell it nothing
 * any more. */
void cancel_requests_forget(struct cancel_requests *q, const void *arg);
void cancel_requests_free_all(struct cancel_requests *q);

#endif
