/* SPDX-License-Identifier: MIT */
/*
 * srvref: the names of the server a connection of pgcat's own talks to
 * (include/srvref.h).
 */
#include "srvref.h"

#include <stdlib.h>
#include <string.h>

bool srvref_set(struct srvref *r, const char *pool, int shard, const char *host, int port, const char *database)
{
	srvref_clear(r);
	r->shard = shard;
	r->port = port;
	r->pool = strdup(pool);
	r->host = strdup(host);
	r->database = strdup(database);
	if (!r->pool || !r->host || !r->database) {
		srvref_clear(r);
		return false;
	}
	return true;
}

bool srvref_is(const struct srvref *r, const char *pool, int shard, const char *host, int port, const char *database)
{
	return r->shard == shard && r->port == port && strcmp(r->host, host) == 0 && strcmp(r->pool, pool) == 0 &&
	       strcmp(r->database, database) == 0;
}

void srvref_clear(struct srvref *r)
{
	free(r->pool);
	free(r->host);
	free(r->database);
	memset(r, 0, sizeof *r);
}
