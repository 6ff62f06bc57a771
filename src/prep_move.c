/* SPDX-License-Identifier: MIT */
/*
 * prep_move: a client's prepared statements as they move to the process
 * that takes over (-R, client_move.c): its names with their statements'
 * texts, and its last unnamed Parse. The new process files them in its
 * pool's registry as if the client had just prepared them there; each is
 * parsed on a server at its first use, as after a change of server.
 *
 * The part, integers high byte first:
 *   u32 names, each: cstring name, u8 SQL PREPARE, u32 key length, key;
 *   u32 unnamed Parse length, the Parse (a whole message);
 *   u8 the unnamed statement is a named one of pgcat's (prepare_unnamed),
 *      then u32 key length, key.
 * An unnamed Parse that was too long to keep (only its server held it)
 * does not move: as after a change of server, it is gone.
 */
#include <stdlib.h>
#include <string.h>

#include "bytes_in.h"
#include "pktbuf.h"
#include "prep_internal.h"

bool prep_client_write(const struct client *c, struct pktbuf *pb)
{
	const struct prep_client *pc = c->end.prep;
	pktbuf_put_u32(pb, pc ? pc->names.n : 0);
	for (uint32_t i = 0; pc && i < pc->names.cap; i++) {
		const struct prep_cmap_entry *e = &pc->names.e[i];
		if (!e->name)
			continue;
		pktbuf_put_cstring(pb, e->name);
		pktbuf_put_u8(pb, e->st->sql);
		pktbuf_put_u32(pb, e->st->key_len);
		pktbuf_put_bytes(pb, e->st->key, e->st->key_len);
	}
	uint32_t unnamed = pc && !pc->unnamed_unkept ? pc->unnamed_len : 0;
	pktbuf_put_u32(pb, unnamed);
	pktbuf_put_bytes(pb, unnamed ? pc->unnamed : NULL, unnamed);
	const struct prep_stmt *st = pc && !pc->unnamed_unkept ? pc->unnamed_st : NULL;
	pktbuf_put_u8(pb, st != NULL);
	if (st) {
		pktbuf_put_u32(pb, st->key_len);
		pktbuf_put_bytes(pb, st->key, st->key_len);
	}
	return !pb->failed;
}

bool prep_client_read(struct client *c, struct bytes_in *r)
{
	struct prep_registry *reg = &c->pool->prep;
	uint32_t n = bytes_u32(r);
	for (uint32_t i = 0; i < n && !r->bad; i++) {
		const char *name = bytes_cstring(r);
		bool sql = bytes_u8(r) != 0;
		uint32_t klen = bytes_u32(r);
		const uint8_t *key = bytes_take(r, klen);
		struct prep_client *pc = prep_client_of(c);
		if (r->bad || !pc || !name[0] || prep_cmap_get(&pc->names, name))
			return false;
		struct prep_stmt *st = prep_registry_get(reg, sql, key, klen, prep_schema_generation(c->w));
		if (!st || !prep_cmap_put(&pc->names, name, st)) {
			prep_stmt_unref(reg, st);
			return false;
		}
	}
	uint32_t unnamed = bytes_u32(r);
	const uint8_t *parse = bytes_take(r, unnamed);
	bool has_st = bytes_u8(r) != 0;
	uint32_t klen = has_st ? bytes_u32(r) : 0;
	const uint8_t *key = has_st ? bytes_take(r, klen) : NULL;
	if (r->bad)
		return false;
	if (unnamed) {
		struct prep_client *pc = prep_client_of(c);
		if (!pc || !(pc->unnamed = malloc(unnamed)))
			return false;
		memcpy(pc->unnamed, parse, unnamed);
		pc->unnamed_len = pc->unnamed_cap = unnamed;
		pc->unnamed_gen = 1;   /* (no server here holds it: a fresh client id names it) */
	}
	if (has_st) {
		struct prep_client *pc = prep_client_of(c);
		if (!pc || !(pc->unnamed_st = prep_registry_get(reg, false, key, klen, prep_unnamed_generation(c))))
			return false;
	}
	return true;
}

uint32_t prep_server_generation(const struct server *s)
{
	return s->prep ? s->prep->set.gen : 0;
}

bool prep_server_movable(const struct server *s)
{
	const struct prep_server *ps = s->prep;
	return !ps || (ps->parses.len == 0 && ps->closes.len == 0 && ps->sqlpreps.len == 0 && ps->repls.len == 0 &&
		       ps->swallows.len == 0 && ps->describes.len == 0 && ps->owed_parses.len == 0);
}

bool prep_server_adopt(struct server *s, uint32_t gen)
{
	if (!s->prep && !(s->prep = calloc(1, sizeof *s->prep)))
		return false;
	/* The statements the old process prepared here keep their names,
	 * which name its registry's entries: the names made from here on
	 * are of a generation past theirs, so none is prepared twice. */
	s->prep->set.gen = gen + 1;
	return true;
}
