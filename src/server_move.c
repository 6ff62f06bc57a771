/* SPDX-License-Identifier: MIT */
/*
 * server_move: an idle server connection written out for the process that
 * takes this one's place (-R), and made again there. Its login, its
 * session's settings, its cancel key and its pool's server parameters go
 * with it; the statements prepared on it stay there under their names, the
 * new process prepares its own under names of a later generation
 * (prep_move.c).
 *
 * The record, integers high byte first:
 *   u32 version, cstring pool (database), cstring pool user, u32 shard,
 *   cstring host, u32 port, cstring database on the server,
 *   u32 backend pid, u16 key length, the key, u32 protocol, u8 checked,
 *   u64 age in microseconds, u64 wall clock of its connect (seconds),
 *   its settings, then its pool's server parameters (params_write; the
 *   pool's: count 0 when not known),
 *   u32 prepared-statement name generation,
 *   u32 input length, the input (a notice or ParameterStatus not read yet).
 */
#include "server_move.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bytes_in.h"
#include "context.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "pool_types.h"
#include "prepared.h"
#include "proto.h"
#include "server.h"
#include "shm.h"

#define SERVER_MOVE_VERSION 1u
#define SERVER_MOVE_INPUT_MAX (16u * 1024)

/* Clean between transactions, nothing owed or in flight. */
bool server_move_at_boundary(const struct server *s)
{
	return !s->io.ssl && !s->txn.outstanding && s->txn.tx_status == 'I' && !s->txn.ext_pending &&
	       !s->txn.untracked && !s->txn.in_copy_in && !s->txn.set_pending && !s->close_when_idle &&
	       !s->cancels_in_flight && !s->fwd_remaining && !s->paused && prep_server_movable(s) &&
	       !(s->io.in && buf_len(s->io.in) > SERVER_MOVE_INPUT_MAX);
}

static bool quiet(struct server *s)
{
	if (!io_suspended(&s->io))
		io_suspend(&s->io, true);
	size_t in = s->io.in ? buf_len(s->io.in) : 0;
	if (in > SERVER_MOVE_INPUT_MAX) {
		io_suspend(&s->io, false);   /* (what landed meanwhile is large: read here) */
		return false;
	}
	return io_at_rest(&s->io);
}

void server_move_drop(struct server *s, const char *why)
{
	/* Logged in and well: idle, then closed with a Terminate, not as a
	 * login that failed (no backoff, no ban of its host). */
	server_set_state(s, SERVER_IDLE);
	server_close(s, why);
}

bool server_move_ready(struct server *s)
{
	/* (Unread input of an idle server, a notice, stays: it would be read
	 * on the other side as the next client's reply.) */
	return s->state == SERVER_IDLE && !s->client && server_move_at_boundary(s) && quiet(s) &&
	       !(s->io.in && buf_len(s->io.in));
}

bool server_move_linked_ready(struct server *s)
{
	return s->state == SERVER_ACTIVE && s->client && server_move_at_boundary(s) && quiet(s);
}

void server_move_abandoned(struct server *s)
{
	if (io_suspended(&s->io))
		io_suspend(&s->io, false);
}

bool server_move_write(struct server *s, struct pktbuf *pb)
{
	const struct srvpool *sp = s->sp;
	const struct pool *p = sp->pool;
	pktbuf_put_u32(pb, SERVER_MOVE_VERSION);
	pktbuf_put_cstring(pb, p->name);
	pktbuf_put_cstring(pb, p->user);
	pktbuf_put_u32(pb, (uint32_t)sp->shard);
	pktbuf_put_cstring(pb, sp->host);
	pktbuf_put_u32(pb, (uint32_t)sp->port);
	pktbuf_put_cstring(pb, sp->database);
	pktbuf_put_u32(pb, s->backend_pid);
	pktbuf_put_u16(pb, s->backend_key_len);
	pktbuf_put_bytes(pb, s->backend_key, s->backend_key_len);
	pktbuf_put_u32(pb, s->protocol);
	pktbuf_put_u8(pb, s->checked);
	pktbuf_put_u64(pb, s->w->now_us - s->connect_us);
	pktbuf_put_u64(pb, (uint64_t)s->connect_wall);
	params_write(pb, &s->params);
	if (p->have_defaults)
		params_write(pb, &p->defaults);
	else
		pktbuf_put_u16(pb, 0);
	pktbuf_put_u32(pb, prep_server_generation(s));
	size_t in = s->io.in ? buf_len(s->io.in) : 0;
	pktbuf_put_u32(pb, (uint32_t)in);
	if (in) {
		const unsigned char *bytes = buf_head(s->io.in);
		if (!bytes)
			return false;
		pktbuf_put_bytes(pb, bytes, in);
	}
	return !pb->failed;
}

/* ---- the other side ---- */

static struct srvpool *find_srvpool(struct worker *w, const char *pool, const char *user, uint32_t shard,
				    const char *host, uint32_t port, const char *database)
{
	struct pool *p = pool_find(w, pool, user);
	if (!p || !pool_serves_itself(w, p) || p->removed)
		return NULL;
	for (size_t i = 0; i < p->n_targets; i++) {
		struct srvpool *sp = p->targets[i];
		if ((uint32_t)sp->shard == shard && (uint32_t)sp->port == port && strcmp(sp->host, host) == 0 &&
		    strcmp(sp->database, database) == 0)
			return sp;
	}
	return NULL;
}

/* No server set here takes it: the server's session ends, as for an
 * idle connection pgcat closes. */
static struct server *terminate(int fd)
{
	static const uint8_t msg[5] = { PqMsg_Terminate, 0, 0, 0, 4 };
	(void)!write(fd, msg, sizeof msg);
	close(fd);
	return NULL;
}

struct server *server_move_read(struct worker *w, int fd, const uint8_t *rec, size_t len, bool linked)
{
	struct bytes_in r = { rec, len, 0, false };
	uint32_t version = bytes_u32(&r);
	const char *pool = bytes_cstring(&r), *user = bytes_cstring(&r);
	uint32_t shard = bytes_u32(&r);
	const char *host = bytes_cstring(&r);
	uint32_t port = bytes_u32(&r);
	const char *database = bytes_cstring(&r);
	uint32_t backend_pid = bytes_u32(&r);
	uint16_t key_len = bytes_u16(&r);
	const uint8_t *key = bytes_take(&r, key_len);
	uint32_t protocol = bytes_u32(&r);
	bool checked = bytes_u8(&r) != 0;
	uint64_t age = bytes_u64(&r);
	uint64_t wall = bytes_u64(&r);
	if (r.bad || version != SERVER_MOVE_VERSION || key_len > sizeof ((struct server *)0)->backend_key) {
		log_error("handover: a server record this version cannot read (version %u, %zu bytes)", version, len);
		return terminate(fd);
	}
	struct srvpool *sp = find_srvpool(w, pool, user, shard, host, port, database);
	if (!sp) {
		log_info("handover: no server set %s@%s %s:%u here for a server connection of the old process: "
			 "it is closed", user, pool, host, port);
		return terminate(fd);
	}
	struct server *s = server_adopt(sp, fd);
	if (!s)
		return NULL;
	if (sp->n_promised > 0)
		pool_promise(sp, -1);   /* (it came: counted as opening now) */
	struct params defaults;
	params_init(&defaults);
	bool ok = params_read(&r, &s->params) && params_read(&r, &defaults);
	uint32_t gen = bytes_u32(&r);
	uint32_t in = bytes_u32(&r);
	const uint8_t *input = bytes_take(&r, in);
	ok = ok && !r.bad && r.off == r.len && prep_server_adopt(s, gen) &&
	     (!in || io_in_add(&s->io, input, in));
	struct pool *p = sp->pool;
	if (ok && !p->have_defaults && params_count(&defaults)) {
		params_copy(&p->defaults, &defaults);
		p->have_defaults = true;
	}
	params_clear(&defaults);
	if (!ok) {
		log_error("handover: a server record could not be taken (malformed, or no memory)");
		server_move_drop(s, "could not be taken over");
		return NULL;
	}
	s->backend_pid = backend_pid;
	s->backend_key_len = key_len;
	memcpy(s->backend_key, key, key_len);
	s->protocol = protocol;
	s->checked = checked;
	s->connect_us = age < w->now_us ? w->now_us - age : 0;
	s->connect_wall = (int64_t)wall;
	s->pid_slot = shm_backend_claim(w->shm, backend_pid, sp->shm_target);
	log_debug("S-%llu %s@%s %s:%d: taken over from the previous process (backend pid %u)", (unsigned long long)s->id,
		  user, pool, host, (int)port, backend_pid);
	if (linked)
		return s;   /* (the caller links it to its client: pool_grant_adopted) */
	sp->ev->ready(s);
	/* What it had sent that the old process had not read. */
	if (in && s->state != SERVER_CLOSED)
		server_process(s);
	return s;
}

/* ---- promises: how many connections of a server set are to come ---- */

void server_move_promise_write(const struct srvpool *sp, int delta, struct pktbuf *pb)
{
	pktbuf_put_cstring(pb, sp->pool->name);
	pktbuf_put_cstring(pb, sp->pool->user);
	pktbuf_put_u32(pb, (uint32_t)sp->shard);
	pktbuf_put_cstring(pb, sp->host);
	pktbuf_put_u32(pb, (uint32_t)sp->port);
	pktbuf_put_cstring(pb, sp->database);
	pktbuf_put_u32(pb, (uint32_t)delta);
}

void server_move_promise_read(struct worker *w, const uint8_t *rec, size_t len)
{
	struct bytes_in r = { rec, len, 0, false };
	const char *pool = bytes_cstring(&r), *user = bytes_cstring(&r);
	uint32_t shard = bytes_u32(&r);
	const char *host = bytes_cstring(&r);
	uint32_t port = bytes_u32(&r);
	const char *database = bytes_cstring(&r);
	int32_t delta = (int32_t)bytes_u32(&r);
	if (r.bad || r.off != r.len || delta < -100000 || delta > 100000) {
		log_error("handover: a malformed promise of server connections (%zu bytes)", len);
		return;
	}
	struct srvpool *sp = find_srvpool(w, pool, user, shard, host, port, database);
	if (sp)
		pool_promise(sp, delta);
}

void server_move_promises_end(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++)
			if (p->targets[i]->n_promised > 0)
				pool_promise(p->targets[i], -p->targets[i]->n_promised);
	}
}

int server_move_promisable(const struct srvpool *sp)
{
	int n = 0;
	const struct list_node *lists[] = { &sp->idle, &sp->active, &sp->other };
	for (size_t k = 0; k < 3; k++) {
		const struct list_node *pos;
		for (pos = lists[k]->next; pos != lists[k]; pos = pos->next)
			n += LIST_OWNER(pos, struct server, node)->io.ssl == NULL;
	}
	return n;
}
