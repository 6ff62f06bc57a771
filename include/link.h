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

#include "types.h"

struct client_end;

/* Tie end (linked to nothing) to s (serving nobody). */
void link_attach(struct client_end *end, struct server *s);
/* Untie s from its client, if any: that client's end, or NULL. */
struct client_end *link_detach(struct server *s);

#endif
