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

struct cancel_slot {
	uint32_t secret;          /* 0: free */
	uint32_t next_free;
	struct client *client;
};

struct cancel_table {
	struct cancel_slot *slots;
	uint32_t n_slots;
	uint32_t free_head;       /* index + 1; 0 = none */
};

bool cancel_table_init(struct cancel_table *t, uint32_t n_slots) __attribute__((warn_unused_result));
void cancel_table_free(struct cancel_table *t);
/* Make room for n_slots keys (after a reload raised max_client_conn). */
bool cancel_table_grow(struct cancel_table *t, uint32_t n_slots) __attribute__((warn_unused_result));
/* Give c a key. Returns false when the table is full. */
bool cancel_key_assign(struct cancel_table *t, struct client *c, uint32_t *pid, uint32_t *key)
	__attribute__((warn_unused_result));
void cancel_key_release(struct cancel_table *t, uint32_t pid);
/* The client a (pid, key) pair names, or NULL. */
struct client *cancel_key_lookup(const struct cancel_table *t, uint32_t pid, uint32_t key);

/* Open a connection to addr and send CancelRequest(pid, key); fire and forget. */
void cancel_send(struct worker *w, const struct sockaddr *addr, socklen_t addrlen, uint32_t pid, uint32_t key);
void cancel_requests_free_all(struct worker *w);

#endif
