/* SPDX-License-Identifier: MIT */
/*
 * peer: CancelRequests sent on to the pgcat instance that issued the key
 * (SPEC §3.4: several instances behind one TCP load balancer, [peers]).
 * cancel.c reads the key and says which peer and with what hop counter
 * (struct cancel_forward); this module finds the peer's address (an IP, or
 * a host name through the worker's c-ares cache), connects without
 * blocking the loop, asks for TLS when server_tls_sslmode is not disable
 * (as towards PostgreSQL servers), sends the CancelRequest, and gives up
 * after PEER_FORWARD_TIMEOUT_MS.
 */
#ifndef PGCAT_PEER_H
#define PGCAT_PEER_H

#include <stddef.h>

#include "list.h"

struct worker;
struct cancel_forward;

#define PEER_FORWARD_TIMEOUT_MS 5000
/* Forwards in flight per worker; beyond, a request is dropped (a flood of
 * made-up keys naming a peer must not become a flood of connections). */
#define PEER_FORWARDS_MAX 256

/* A worker's forwards in flight. */
struct peer_forwards {
	struct list_node list;    /* struct peer_forward (peer.c) */
	size_t n;
};

void peer_forwards_init(struct peer_forwards *q);
/* Send the request fwd describes (cancel_handle_request filled it) to its
 * peer. Nothing is sent for a request that has made its last hop (logged)
 * or whose peer id [peers] does not list (ignored, as an unknown key). */
void peer_forward_cancel(struct worker *w, const struct cancel_forward *fwd);
/* The worker is going: every forward in flight is dropped. */
void peer_forwards_free_all(struct worker *w);

#endif
