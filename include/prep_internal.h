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

#include <stdlib.h>

#include "client.h"
#include "pool_types.h"
#include "prepared.h"
#include "server.h"
#include "sqllex.h"
#include "stats.h"

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
/* The generation a client's unnamed Parse is filed under in its pool's
 * registry (prepare_unnamed): its schema generation and settings. */
uint64_t prep_unnamed_generation(const struct client *c);
/* A new schema generation, for the reason why (logged). */
void prep_schema_changed(struct worker *w, const char *why);

/* ---- small helpers every file of the room uses (inline: the room's
 * files call each other only downwards, prepared.c -> prep_sql.c) ---- */

/* The client's prepared-statement state, made if missing (NULL: no memory). */
static inline struct prep_client *prep_client_of(struct client *c)
{
	if (!c->end.prep)
		c->end.prep = calloc(1, sizeof *c->end.prep);
	return c->end.prep;
}

/* A message of type with body a then b. */
static inline void prep_put_msg(struct buf *out, uint8_t type, const void *a, size_t alen, const void *b,
				size_t blen)
{
	uint8_t hdr[5];
	uint32_t len = (uint32_t)(4 + alen + blen);
	hdr[0] = type;
	hdr[1] = (uint8_t)(len >> 24);
	hdr[2] = (uint8_t)(len >> 16);
	hdr[3] = (uint8_t)(len >> 8);
	hdr[4] = (uint8_t)len;
	buf_add(out, hdr, 5);
	if (alen)
		buf_add(out, a, alen);
	if (blen)
		buf_add(out, b, blen);
}

/* The server already held st. */
static inline void prep_count_hit(struct client *c, struct server *s, struct prep_stmt *st)
{
	s->prep->hits++;
	st->hits++;
	stats_add(c->pool->stats, STAT_PREPARED_HITS, 1);
}

/* The client's message (total bytes) was consumed. */
static inline void prep_drain_msg(struct client *c, uint32_t total)
{
	buf_drain(c->io.in, total);
	stats_add(c->pool->stats, STAT_RECEIVED, total);
}


/* sqllex on the pointers prepared-statement code reads text with: past
 * blanks and comments; past keyword w (false: not there). */
static inline const char *prep_sql_space(const char *s, const char *end)
{
	return s + sqllex_skip_blank(s, (size_t)(end - s), 0);
}

static inline bool prep_sql_word(const char **sp, const char *end, const char *w)
{
	size_t i = 0;
	if (!sqllex_keyword(*sp, (size_t)(end - *sp), &i, w))
		return false;
	*sp += i;
	return true;
}

/* ---- SQL in a simple Query (prep_sql.c) ---- */

/* The client's Query (whole message m) with the client linked to s. */
enum prep_action prep_sql_query(struct client *c, struct server *s, const uint8_t *m, uint32_t total);
/* A Query longer than prepared_statements_max_length, of which the first
 * have bytes are at m: forwarded as it is, unless it starts as a PREPARE,
 * EXECUTE or DEALLOCATE pgcat would rewrite: refused then (54000), its
 * bytes discarded as they come (PREP_DISCARD, *stream_rest). */
enum prep_action prep_sql_long_query(struct client *c, struct server *s, const uint8_t *m, size_t have,
				     uint32_t total, uint32_t *stream_rest);

/* ---- a server connection (prep_server.c) ---- */

struct server;
/* The registry of the server's pool. */
struct prep_registry *prep_reg_of(struct server *s);
/* What pgcat knows of st on s. pgcat sends Parses and evicting Closes of its
 * statements ahead of the replies, and a client may pipeline segments (each
 * ended by a Sync) before the first is answered; an error in a segment makes
 * the server skip the rest of it. So the set is what the server will hold
 * if every pending op runs; what it holds for certain is known when they
 * are answered (prep_server.c undoes the skipped ones). */
/* Does s hold st for a message of the segment being sent? Not if a Parse or
 * eviction of st is still unanswered in an earlier segment. */
bool prep_server_holds(struct server *s, struct prep_stmt *st);
/* Must pgcat's Parse of st close the name first? Yes when whether the
 * server holds it at that point hangs on an earlier segment's outcome, or
 * on a doubt left by a skipped op. (A Close of a name the server does not
 * hold succeeds.) */
bool prep_server_unsure(const struct server *s, const struct prep_stmt *st);
/* Pushes p on q, one of ps's rings, stamped with ps's clock: undoing a
 * failed segment goes back through its entries of all rings in order. */
bool prep_server_push(struct prep_server *ps, struct prep_ring *q, struct prep_pend *p)
	__attribute__((warn_unused_result));
/* Is st's place on s known: no op of st pending, no doubt? (prep_pend.sure) */
bool prep_server_settled(const struct server *s, const struct prep_stmt *st);

#endif
