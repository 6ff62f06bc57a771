/* SPDX-License-Identifier: MIT */
/*
 * admin_ops: KILL_CLIENT and WAIT_CLOSE's count of marked servers. See
 * admin_ops.h.
 */
#include "admin_ops.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "log.h"
#include "pool.h"
#include "proto.h"
#include "server.h"
#include "shm.h"
#include "context.h"

static struct client *find_in(struct list_node *head, uint64_t id)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, head) {
		struct client *c = LIST_OWNER(pos, struct client, node);
		if (c->id == id)
			return c;
	}
	return NULL;
}

static struct client *find_waiter(struct list_node *head, uint64_t id)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, head) {
		struct client *c = client_of_waiter(LIST_OWNER(pos, struct pool_waiter, node));
		if (c && c->id == id)
			return c;
	}
	return NULL;
}

/* Logged in, logging in, or waiting for a server (on a pool's lists). */
static struct client *find_client(struct worker *w, uint64_t id)
{
	struct list_node *lists[] = { &w->clients_active, &w->clients_idle, &w->clients_login };
	for (size_t l = 0; l < sizeof lists / sizeof *lists; l++) {
		struct client *c = find_in(lists[l], id);
		if (c)
			return c;
	}
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		struct client *c = find_waiter(&p->login_waiters, id);
		for (size_t i = 0; !c && i < p->n_targets; i++)
			c = find_waiter(&p->targets[i]->waiters, id);
		if (c)
			return c;
	}
	return NULL;
}

bool admin_kill_client(struct worker *w, uint64_t id)
{
	struct client *c = find_client(w, id);
	if (!c)
		return false;
	log_info("admin: KILL_CLIENT C-%" PRIu64 " (%s@%s)", id, client_user(c), client_database(c));
	/* Its server goes too: a transaction it left open (and the locks it
	 * holds) must not wait for a rollback that may be stuck behind a
	 * running query. Closed only after the client, which unlinks it. */
	struct server *s = c->end.server;
	client_close(c, "57P01", "terminating connection: KILL_CLIENT by an administrator");
	if (s && s->state != SERVER_CLOSED)
		server_close(s, "its client was closed by KILL_CLIENT");
	return true;
}

void admin_kill_client_posted(struct worker *w, const char *arg)
{
	long long pid;
	uint64_t id;
	/* The pid: a worker that restarted replays the ring, and must not
	 * take its predecessor's order for one of its own clients. */
	if (sscanf(arg, "%lld %" SCNu64, &pid, &id) != 2 || pid != (long long)getpid())
		return;
	if (!admin_kill_client(w, id))
		log_info("admin: KILL_CLIENT C-%" PRIu64 ": no such client (any more)", id);
}

static int marked_in(struct list_node *head)
{
	int n = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, head)
		n += LIST_OWNER(pos, struct server, node)->close_when_idle;
	return n;
}

int admin_marked_servers(struct worker *w, const char *db)
{
	int n = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_matches_db(p, db))
			continue;
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = p->targets[i];
			n += marked_in(&sp->active) + marked_in(&sp->idle) + marked_in(&sp->other) + marked_in(&sp->opening);
		}
	}
	return n;
}

/* SHOW SERVERS' columns that WAIT_CLOSE reads (Appendix A order). */
#define COL_DATABASE 2
#define COL_CLOSE_NEEDED 13

/* Column col of the DataRow body at p (len bytes) into buf; false: NULL
 * or malformed. */
static bool row_column(const uint8_t *p, size_t len, int col, char *buf, size_t buflen)
{
	if (len < 2)
		return false;
	int ncols = (p[0] << 8) | p[1];
	size_t off = 2;
	for (int i = 0; i < ncols; i++) {
		if (off + 4 > len)
			return false;
		int32_t n = (int32_t)proto_get_u32(p + off);
		off += 4;
		if (n < 0) {
			if (i == col)
				return false;
			continue;
		}
		if ((size_t)n > len - off)
			return false;
		if (i == col) {
			snprintf(buf, buflen, "%.*s", n, (const char *)(p + off));
			return true;
		}
		off += (size_t)n;
	}
	return false;
}

static int marked_in_rows(const uint8_t *data, uint32_t len, const char *db)
{
	int n = 0;
	size_t off = 0;
	while (off + 5 <= len && data[off] == 'D') {
		uint32_t mlen = proto_get_u32(data + off + 1);
		if (mlen < 4 || mlen - 4 > len - off - 5)
			break;
		const uint8_t *body = data + off + 5;
		char dbname[128], marked[8];
		if (row_column(body, mlen - 4, COL_CLOSE_NEEDED, marked, sizeof marked) && strcmp(marked, "1") == 0 &&
		    (!db || (row_column(body, mlen - 4, COL_DATABASE, dbname, sizeof dbname) && strcmp(dbname, db) == 0)))
			n++;
		off += 1 + mlen;
	}
	return n;
}

int admin_marked_servers_elsewhere(struct worker *w, uint64_t seq, const char *db)
{
	int n = 0;
	for (uint32_t i = 0; i < w->shm->h->n_workers; i++) {
		if ((int)i == w->id || atomic_load(&w->shm->h->workers[i].pid) <= 0 ||
		    !atomic_load(&w->shm->h->workers[i].ready))
			continue;
		uint8_t *data = NULL;
		uint32_t len, rows, trunc;
		if (!shm_dump_read(w->shm, SHM_DUMP_SERVERS, (int)i, seq, &data, &len, &rows, &trunc))
			return -1;
		n += marked_in_rows(data, len, db);
		free(data);
	}
	return n;
}
