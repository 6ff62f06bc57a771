/* SPDX-License-Identifier: MIT */
/*
 * prep_internal: what the files of the prepared-statement room share
 * (src/prepared.c, prep_maps.c, prep_schema.c, prep_server.c): the rings of pending replies and the
 * name of the statement no server holds. Not an interface: no other room
 * includes it (they use include/prepared.h).
 */
#ifndef PGCAT_PREP_INTERNAL_H
#define PGCAT_PREP_INTERNAL_H

#include "prepared.h"

/* The statement no server ever holds: answering with its "does not exist"
 * error puts the server where the client's failed message would. */
#define PREP_ERROR_NAME "pgcat_error"

/* ---- rings (prep_maps.c) ---- */

bool prep_ring_push(struct prep_ring *q, const struct prep_pend *p);
/* The oldest entry; NULL if the ring is empty. */
struct prep_pend *prep_ring_head(struct prep_ring *q);
void prep_ring_pop(struct prep_ring *q);
/* Gives back what the entry holds (its reference, client name, reply). */
void prep_pend_release(struct prep_registry *r, struct prep_pend *p);
/* Releases every entry and the ring's storage. */
void prep_ring_clear(struct prep_ring *q, struct prep_registry *r);

/* ---- the schema generation (prep_schema.c) ---- */

struct worker;
/* A new schema generation, for the reason why (logged). */
void prep_schema_changed(struct worker *w, const char *why);

/* ---- a server connection (prep_server.c) ---- */

struct server;
/* The registry of the server's pool. */
struct prep_registry *prep_reg_of(struct server *s);

#endif
