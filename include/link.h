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

#include <stdint.h>

#include "proto.h"
#include "server.h"
#include "types.h"

struct client_end;

/* Tie end (linked to nothing) to s (serving nobody). */
void link_attach(struct client_end *end, struct server *s);
/* Untie s from its client, if any: that client's end, or NULL. */
struct client_end *link_detach(struct server *s);

/* A frontend message of this type goes to s (linked): what it owes in
 * return (a ReadyForQuery for each Query, FunctionCall and Sync; an open
 * extended request until the Sync) and, for the first of a request, the
 * clocks of query_time and xact_time. Inline: every client message passes
 * here. */
static inline void link_count_request(struct server *s, uint8_t type, uint64_t now_us)
{
	if (s->outstanding == 0 && !s->ext_pending) {
		s->query_start_us = now_us;
		if (s->tx_status == 'I')
			s->xact_start_us = now_us;
	}
	switch (type) {
	case PqMsg_Query:
	case PqMsg_FunctionCall:
		s->outstanding++;
		break;
	case PqMsg_Sync:
		s->outstanding++;
		s->ext_pending = false;
		break;
	case PqMsg_Parse:
	case PqMsg_Bind:
	case PqMsg_Describe:
	case PqMsg_Execute:
	case PqMsg_Close:
		s->ext_pending = true;
		break;
	default:
		break;
	}
}

#endif
