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
#include "context.h"
#include "rotation.h"
#include "server.h"
#include "shm.h"

/* CLOCK_MONOTONIC ms, wrapping: compared by difference (shm.h). */
static uint32_t now_ms(const struct server *s)
{
	return (uint32_t)(s->w->now_us / 1000);
}

void link_attach(struct client_end *end, struct server *s)
{
	assert(end->server == NULL);
	assert(s->client == NULL);
	assert(s->state != SERVER_CLOSED);
	end->server = s;
	s->client = end;
	/* Its notifications name this client from now on (SPEC §11), unless
	 * a notifier holds the slot (the slot is this worker's). */
	shm_backend_serves(s->w->shm, s->pid_slot, end->backend_pid, now_ms(s));
}

bool link_watch_notify(const struct server *s)
{
	return shm_backend_watch_notify(s->w->shm, s->pid_slot);
}

void link_note_notifier(struct server *s, const struct client_end *end)
{
	shm_backend_note_notifier(s->w->shm, s->pid_slot, end->backend_pid, now_ms(s));
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

void link_start(struct client_end *end, struct server *s)
{
	link_attach(end, s);
	server_link(s);
}

void link_move(struct client_end *end, struct server *s)
{
	(void)link_detach(s);
	link_attach(end, s);
	server_relink(s);
}

void link_abandon(struct server *s, const char *why)
{
	(void)link_detach(s);
	server_close(s, why);
}

bool link_serving(struct server *s) { return s->state == SERVER_ACTIVE; }

struct buf *link_output(struct server *s) { return server_output(s); }

struct txn *link_txn(struct server *s) { return &s->txn; }
struct slowlog_req *link_slowlog(struct server *s) { return &s->slow; }

struct params *link_server_params(struct server *s) { return &s->params; }

bool link_server_tls(const struct server *s) { return s->io.ssl != NULL; }

bool link_reply_half_sent(const struct server *s) { return s->fwd_remaining > 0; }

void link_server_failed(struct server *s, const char *why) { rotation_server_failed(s->sp, why); }

void link_cancel(struct server *s) { server_send_cancel(s); }

void link_resume(struct server *s)
{
	if (s->paused)
		server_resume_reading(s);
}

bool link_ask_placement(struct server *s, uint8_t table, const char *sql)
{
	return server_ask_placement(s, table, sql);
}
