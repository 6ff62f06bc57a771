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

#include "types.h"

struct randpool;

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
	struct client *client;
};

struct shm;

/* pid = ((worker + 1) << SHM_CANCEL_WORKER_SHIFT) | (slot + 1): any worker
 * can tell whose key it is; the shared segment mirrors each slot's secret
 * and the server its client is linked to, so a CancelRequest landing on
 * another worker still reaches the right query. */
struct cancel_table {
	struct cancel_slot *slots;
	uint32_t n_slots;
	/* Free slots, index + 1 (0: none), oldest first: a slot is used again
	 * only after every other free one, so the pid a client was given does
	 * not come back for the next login (pgxpool opens a new connection
	 * as it closes one; a late CancelRequest of the old must find nothing). */
	uint32_t free_head, free_tail;
	int worker;
	struct shm *shm;
	struct randpool *rand;    /* where keys come from (the worker's) */
};

bool cancel_table_init(struct cancel_table *t, uint32_t n_slots, int worker, struct shm *shm, struct randpool *rand)
	__attribute__((warn_unused_result));
/* Publish that c's key now names a query on this server (s NULL: none). */
void cancel_key_link(struct cancel_table *t, const struct client *c, const struct server *s);
/* Publish c's key (no query yet) if it is not already: c waits for a
 * server, and another worker may be asked to cancel that wait. */
void cancel_key_share(struct cancel_table *t, const struct client *c);
/* A CancelRequest: cancel locally, or through the shared segment when the
 * key belongs to another worker. */
void cancel_handle_request(struct worker *w, uint32_t pid, uint32_t key);
/* Clients another worker was asked to cancel (janitor tick): waiting
 * ones, and those running a query (the cancel is sent from here, where the
 * server connection is known, so that it is tracked like a local one). */
void cancel_poll_waiting(struct worker *w);
void cancel_table_free(struct cancel_table *t);
/* Make room for n_slots keys (after a reload raised max_client_conn). */
bool cancel_table_grow(struct cancel_table *t, uint32_t n_slots) __attribute__((warn_unused_result));
/* Give c a key. Returns false when the table is full. */
bool cancel_key_assign(struct cancel_table *t, struct client *c, uint32_t *pid, uint32_t *key)
	__attribute__((warn_unused_result));
void cancel_key_release(struct cancel_table *t, uint32_t pid);
/* The client a (pid, key) pair names, or NULL. */
struct client *cancel_key_lookup(const struct cancel_table *t, uint32_t pid, uint32_t key);

/* Open a connection to addr and send CancelRequest(pid, key). for: the
 * server connection it cancels a query on, told through server_cancel_done
 * when PostgreSQL closed the connection (it has signalled the backend by
 * then) or after CANCEL_REQUEST_TIMEOUT_MS; NULL: nobody. false: nothing
 * was sent. */
bool cancel_send(struct worker *w, const struct sockaddr *addr, socklen_t addrlen, uint32_t pid, uint32_t key,
		 struct server *for_server);
/* s is closing: its CancelRequests in flight tell it nothing any more. */
void cancel_requests_forget(struct worker *w, const struct server *s);
void cancel_requests_free_all(struct worker *w);

#endif
