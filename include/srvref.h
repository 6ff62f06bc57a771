/* SPDX-License-Identifier: MIT */
/*
 * srvref: which server of which shard of which pool one of pgcat's own
 * connections (bconn.h: the lag monitor's, the two-phase resolver's and
 * its startup check's) talks to. The names are copies: a reload may free
 * the configuration snapshot they came from while the connection lives.
 */
#ifndef PGCAT_SRVREF_H
#define PGCAT_SRVREF_H

#include <stdbool.h>

struct srvref {
	char *pool;
	char *host;
	char *database;
	int shard;
	int port;
};

/* Copies the names into r (zeroed, or cleared). false: out of memory (r
 * cleared). */
bool srvref_set(struct srvref *r, const char *pool, int shard, const char *host, int port, const char *database)
	__attribute__((warn_unused_result));
/* Is r that server of that pool? */
bool srvref_is(const struct srvref *r, const char *pool, int shard, const char *host, int port, const char *database);
/* Frees the names; r is zeroed. */
void srvref_clear(struct srvref *r);

#endif
