/* SPDX-License-Identifier: MIT */
/*
 * prep_internal: what the files of the prepared-statement room share
 * (src/prepared.c, prep_maps.c, prep_schema.c, prep_sql.c, prep_server.c):
 * the name of the statement no server holds, the rings of pending replies,
 * and the functions one file offers the others. Not an interface: no other
 * room includes it (they use include/prepared.h).
 */
#ifndef PGCAT_PREP_INTERNAL_H
#define PGCAT_PREP_INTERNAL_H

#include "prepared.h"

/* The statement no server ever holds: answering with its "does not exist"
 * error puts the server where the client's failed message would. */
#define PREP_ERROR_NAME "pgcat_error"

/* ---- rings (prep_maps.c) ---- */

bool prep_ring_push(struct prep_ring *q, const struct prep_pend *p);
/* The oldest entry; NULL if the ring is empty. (Inline: asked for every
 * reply of a server with prepared statements on.) */
static inline struct prep_pend *prep_ring_head(struct prep_ring *q) { return q->len ? &q->q[q->head] : NULL; }
static inline void prep_ring_pop(struct prep_ring *q)
{
	q->head = (q->head + 1) % q->cap;
	q->len--;
}
/* Gives back what the entry holds (its reference, client name, reply). */
void prep_pend_release(struct prep_registry *r, struct prep_pend *p);
/* Releases every entry and the ring's storage. */
void prep_ring_clear(struct prep_ring *q, struct prep_registry *r);

/* ---- the schema generation (prep_schema.c) ---- */

struct worker;
/* A new schema generation, for the reason why (logged). */
void prep_schema_changed(struct worker *w, const char *why);

/* ---- a client's messages (prepared.c) ---- */

struct client;
struct evbuffer;
/* The client's prepared-statement state, made if missing (NULL: no memory). */
struct prep_client *prep_client_of(struct client *c);
/* A message of type with body a then b. */
void prep_put_msg(struct evbuffer *out, uint8_t type, const void *a, size_t alen, const void *b, size_t blen);
/* The server already held st. */
void prep_count_hit(struct client *c, struct server *s, struct prep_stmt *st);
/* The client's message (total bytes) was consumed. */
void prep_drain_msg(struct client *c, uint32_t total);

/* ---- SQL in a simple Query (prep_sql.c) ---- */

/* The client's Query (whole message m) with the client linked to s. */
enum prep_action prep_sql_query(struct client *c, struct server *s, const uint8_t *m, uint32_t total);
/* sqllex on the pointers prepared-statement code reads text with: past
 * blanks and comments; past keyword w (false: not there). */
const char *prep_sql_space(const char *s, const char *end);
bool prep_sql_word(const char **sp, const char *end, const char *w);

/* ---- a server connection (prep_server.c) ---- */

struct server;
/* The registry of the server's pool. */
struct prep_registry *prep_reg_of(struct server *s);

#endif
