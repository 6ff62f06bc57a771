/* SPDX-License-Identifier: MIT */
/*
 * link: the only code that ties a client's end to a server and unties them.
 * Both pointers of the pair (end->server, s->client) are written here and
 * nowhere else, and each call checks both ends, so that a client is never
 * on two servers, a server never answers two clients, and no end is left
 * pointing at a partner that moved on.
 */
#ifndef PGCAT_LINK_H
#define PGCAT_LINK_H

#include <event2/buffer.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

struct client_end;

/* Tie end (linked to nothing) to s (serving nobody). */
void link_attach(struct client_end *end, struct server *s);
/* Untie s from its client, if any: that client's end, or NULL. */
struct client_end *link_detach(struct server *s);

/* The pump's step both directions share (client.c toward the server,
 * server.c toward the client): the rest of a message being forwarded,
 * *remaining bytes of it, moves from in to out as far as in holds it.
 * Returns the bytes moved; 0: in is empty (wait for the next read). */
static inline size_t link_forward_rest(struct evbuffer *in, struct evbuffer *out, uint32_t *remaining)
{
	size_t have = evbuffer_get_length(in);
	if (have == 0)
		return 0;
	size_t n = have < *remaining ? have : *remaining;
	evbuffer_remove_buffer(in, out, n);
	*remaining -= (uint32_t)n;
	return n;
}

#endif
