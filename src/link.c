/* SPDX-License-Identifier: MIT */
/*
 * link: ties and unties a client's end and a server (link.h). Small on
 * purpose: the pair is the centre of the core, and one place that writes
 * it, with both ends checked, is what keeps the two sides from disagreeing
 * about who serves whom.
 */
#include "link.h"

#include <assert.h>
#include <stddef.h>

#include "client_end.h"
#include "server.h"

void link_attach(struct client_end *end, struct server *s)
{
	assert(end->server == NULL);
	assert(s->client == NULL);
	assert(s->state != SERVER_CLOSED);
	end->server = s;
	s->client = end;
}

struct client_end *link_detach(struct server *s)
{
	struct client_end *end = s->client;
	if (!end)
		return NULL;
	assert(end->server == s);
	end->server = NULL;
	s->client = NULL;
	return end;
}
