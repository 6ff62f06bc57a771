/* SPDX-License-Identifier: MIT */
/*
 * prep_server: a server connection's side of prepared statements (see
 * prepared.h): its replies matched with what pgcat sent (prep_server_message:
 * ParseComplete and CloseComplete swallowed, errors and empty queries
 * replaced, a failed segment undone, DDL and DISCARD ALL seen in their
 * CommandComplete), and what the connection holds forgotten when its
 * session is reset, discarded or closed.
 */
#include "prep_internal.h"

#include <stdlib.h>
#include <string.h>

#include "client_end.h"
#include "log.h"
#include "pool.h"
#include "proto.h"
#include "server.h"

struct prep_registry *prep_reg_of(struct server *s)
{
	return &s->sp->pool->prep;
}

/* ---- the server's replies ---- */

bool prep_server_wants(const struct server *s, uint8_t type)
{
	/* CommandComplete: its tag may be DDL (the schema generation). The
	 * replies to a Describe of a statement: kept on it (prepared.h). */
	return s->prep && (type == PqMsg_ErrorResponse || type == PqMsg_CommandComplete ||
			   (type == PqMsg_ReadyForQuery && s->prep->ddl_in_tx) ||
			   (s->prep->describes.len &&
			    (type == PqMsg_ParameterDescription || type == PqMsg_RowDescription || type == PqMsg_NoData)));
}

/* A CommandComplete of DDL, DISCARD ALL or DEALLOCATE ALL (the last
 * reaches a server only through the extended protocol; the simple one is
 * answered by on_query). */
static void server_schema_changed(struct server *s, const char *tag, size_t len)
{
	struct prep_server *ps = s->prep;
	struct prep_registry *r = prep_reg_of(s);
	bool discard = len >= 11 && memcmp(tag, "DISCARD ALL", 11) == 0;
	bool deallocate = len >= 14 && memcmp(tag, "DEALLOCATE ALL", 14) == 0;
	if (discard || deallocate) {
		/* The session dropped every statement: pgcat's on this server
		 * and, as PostgreSQL would, the client's names. */
		prep_sset_clear(&ps->set, r);
		ps->set.gen++;
		ps->unnamed_client = 0;
		if (s->client && s->client->prep)
			prep_cmap_clear(&s->client->prep->names, r);
	}
	/* Other sessions see the change when its transaction ends (commit, or
	 * rollback undoing it): a new generation then too, so that what they
	 * prepared in between is not kept. */
	ps->ddl_in_tx = true;
	prep_schema_changed(s->w, discard ? "DISCARD ALL" : deallocate ? "DEALLOCATE ALL" : "DDL");
}

/* A Describe's whole reply (p->repl: its ParameterDescription; msg: the
 * RowDescription or NoData) kept on its statement, if it has none yet. */
static void keep_description(struct prep_pend *p, const uint8_t *msg, uint32_t total)
{
	struct prep_stmt *st = p->st;
	if (!st || st->desc || !p->repl || !msg || total > UINT32_MAX - p->repl_len)
		return;
	uint8_t *d = malloc((size_t)p->repl_len + total);
	if (!d)
		return;   /* (no memory: answered by a server next time) */
	memcpy(d, p->repl, p->repl_len);
	memcpy(d + p->repl_len, msg, total);
	st->desc = d;
	st->desc_len = p->repl_len + total;
}

bool prep_server_push(struct prep_server *ps, struct prep_ring *q, struct prep_pend *p)
{
	p->seq = ++ps->op_clock;
	return prep_ring_push(q, p);
}

/* Is a Parse or eviction of st (of the set's generation) pending in q in a
 * segment other than seg (any segment: all)? */
static bool ring_names(const struct prep_ring *q, const struct prep_stmt *st, uint32_t gen, uint32_t seg, bool all)
{
	for (uint32_t i = 0; i < q->len; i++) {
		const struct prep_pend *p = &q->q[(q->head + i) % q->cap];
		if (p->st == st && !p->unclose && p->gen == gen && (all || p->seg != seg))
			return true;
	}
	return false;
}

static bool pending_op(const struct prep_server *ps, const struct prep_stmt *st, uint32_t seg, bool all)
{
	return ring_names(&ps->parses, st, ps->set.gen, seg, all) || ring_names(&ps->closes, st, ps->set.gen, seg, all) ||
	       ring_names(&ps->sqlpreps, st, ps->set.gen, seg, all);
}

static bool doubtful(const struct prep_server *ps)
{
	return ps->doubt && ps->doubt_gen == ps->set.gen;
}

bool prep_server_unsure(const struct server *s, const struct prep_stmt *st)
{
	const struct prep_server *ps = s->prep;
	/* (nothing unanswered from an earlier segment: the usual case) */
	return doubtful(ps) || (ps->seg_recv != ps->seg_sent && pending_op(ps, st, ps->seg_sent, false));
}

bool prep_server_settled(const struct server *s, const struct prep_stmt *st)
{
	const struct prep_server *ps = s->prep;
	return !doubtful(ps) && !pending_op(ps, st, 0, true);
}

bool prep_server_holds(struct server *s, struct prep_stmt *st)
{
	struct prep_server *ps = s->prep;
	if (!prep_sset_has(&ps->set, st))
		return false;
	return ps->seg_recv == ps->seg_sent || !pending_op(ps, st, ps->seg_sent, false);
}

/* A client's Close the server skipped: the client still has the statement,
 * unless it has since named another by that name (a later segment). */
static void unclose(struct prep_client *pc, struct prep_pend *p)
{
	if (p->cname) {
		if (!prep_cmap_get(&pc->names, p->cname) && prep_cmap_put(&pc->names, p->cname, p->st))
			p->st = NULL;   /* (the reference is the name's now) */
	} else if (!pc->unnamed_st && !pc->unnamed_len) {
		pc->unnamed_st = p->st;
		p->st = NULL;
	}
}

/* A Parse (parsed) or an eviction of p->st that segment seg skipped. Later
 * segments' ops of st, if any, decide (they were sent unsure). Else: a
 * Parse or eviction sent on a known place leaves st as it was (absent,
 * present); one sent on an unknown place leaves st unknown: out of the set,
 * and doubt, so that its next Parse closes the name first. */
static void undo_op(struct server *s, struct prep_pend *p, uint32_t seg, bool parsed)
{
	struct prep_server *ps = s->prep;
	struct prep_registry *r = prep_reg_of(s);
	if (!p->st || p->gen != ps->set.gen || pending_op(ps, p->st, seg, false))
		return;
	if (!p->sure) {
		prep_sset_del(&ps->set, r, p->st);
		ps->doubt = true;
		ps->doubt_gen = ps->set.gen;
	} else if (parsed) {
		prep_sset_del(&ps->set, r, p->st);
	} else if (!prep_sset_has(&ps->set, p->st)) {
		(void)prep_sset_add(&ps->set, p->st);
	}
}

/* The entries of segment seg at the head of q (the oldest segment pending). */
static uint32_t seg_run(const struct prep_ring *q, uint32_t seg)
{
	uint32_t n = 0;
	while (n < q->len && q->q[(q->head + n) % q->cap].seg == seg)
		n++;
	return n;
}

/* One skipped entry of a failed segment, undone. */
static void undo_entry(struct server *s, struct prep_ring *q, struct prep_pend *p, uint32_t seg)
{
	struct prep_server *ps = s->prep;
	struct prep_registry *r = prep_reg_of(s);
	struct prep_client *pc = s->client ? s->client->prep : NULL;
	if (q == &ps->closes) {
		if (p->evict)
			undo_op(s, p, seg, false);   /* (st stays, if its place was known) */
		if (p->unclose && pc)
			unclose(pc, p);
	} else if (q != &ps->describes) {
		undo_op(s, p, seg, true);
		if (p->cname && pc)
			(void)prep_cmap_del(&pc->names, r, p->cname);
		/* (a Parse of the unnamed statement: the server's is not the
		 * one pgcat noted, so a Bind of it replays the client's) */
		if (q == &ps->parses && !p->st && !p->cname)
			ps->unnamed_client = 0;
	}
}

/* The segment failed: what it would have done did not happen. Its entries
 * are undone newest first, across the rings, so that a client's Parse and
 * Close of one name in it leave the name as it was before the segment. */
static void undo_segment(struct server *s, uint32_t seg)
{
	struct prep_server *ps = s->prep;
	struct prep_registry *r = prep_reg_of(s);
	struct prep_ring *rings[] = { &ps->parses, &ps->sqlpreps, &ps->closes, &ps->describes };
	enum { NRINGS = sizeof rings / sizeof rings[0] };
	uint32_t n[NRINGS], left[NRINGS];
	for (size_t k = 0; k < NRINGS; k++)
		n[k] = left[k] = seg_run(rings[k], seg);
	for (;;) {
		size_t best = NRINGS;
		uint32_t best_seq = 0;
		for (size_t k = 0; k < NRINGS; k++) {
			if (!left[k])
				continue;
			const struct prep_pend *p = &rings[k]->q[(rings[k]->head + left[k] - 1) % rings[k]->cap];
			/* (seq wraps: compare by distance) */
			if (best == NRINGS || (int32_t)(p->seq - best_seq) > 0) {
				best = k;
				best_seq = p->seq;
			}
		}
		if (best == NRINGS)
			break;
		struct prep_ring *q = rings[best];
		left[best]--;
		undo_entry(s, q, &q->q[(q->head + left[best]) % q->cap], seg);
	}
	for (size_t k = 0; k < NRINGS; k++)
		for (uint32_t i = 0; i < n[k]; i++) {
			prep_pend_release(r, prep_ring_head(rings[k]));
			prep_ring_pop(rings[k]);
		}
}

/* Replies pgcat still matches with what it sent (swallows aside). */
static inline bool replies_pending(const struct prep_server *ps)
{
	return (ps->parses.len | ps->sqlpreps.len | ps->closes.len | ps->describes.len | ps->repls.len |
		ps->owed_parses.len) != 0;
}

/* Replies of finished segments that never came (skipped by an error). */
static void finish_segment(struct server *s, uint32_t seg)
{
	struct prep_server *ps = s->prep;
	/* The usual segment: nothing of pgcat's pending in it (a simple
	 * Query, or statements the server already holds). */
	if (!replies_pending(ps))
		return;
	struct prep_registry *r = prep_reg_of(s);
	struct prep_pend *p;
	while ((p = prep_ring_head(&ps->sqlpreps)) && p->seg == seg) {
		prep_pend_release(r, p);
		prep_ring_pop(&ps->sqlpreps);
	}
	while ((p = prep_ring_head(&ps->repls)) && p->seg == seg) {
		prep_pend_release(r, p);
		prep_ring_pop(&ps->repls);
	}
	while ((p = prep_ring_head(&ps->owed_parses)) && p->seg == seg) {
		prep_pend_release(r, p);
		prep_ring_pop(&ps->owed_parses);
	}
	undo_segment(s, seg);   /* (parses/closes of a finished segment were all answered or skipped) */
}

/* A ParseComplete owed before this segment's first reply (the Bind's)? Taken off if so. */
static bool owed_parse_due(struct prep_server *ps, struct prep_registry *r)
{
	struct prep_pend *p = prep_ring_head(&ps->owed_parses);
	if (!p || p->seg != ps->seg_recv)
		return false;
	prep_pend_release(r, p);
	prep_ring_pop(&ps->owed_parses);
	return true;
}

/* A replacement reply with the owed ParseComplete in front. */
static bool prefix_parse_complete(uint8_t **repl, uint32_t *repl_len)
{
	uint8_t *b = realloc(*repl, (size_t)*repl_len + PROTO_BODYLESS_LEN);
	if (!b)
		return false;
	memmove(b + PROTO_BODYLESS_LEN, b, *repl_len);
	proto_put_bodyless(b, PqMsg_ParseComplete);
	*repl = b;
	*repl_len += PROTO_BODYLESS_LEN;
	return true;
}

/* The segment being answered is one of pgcat's own (its replies swallowed). */
static inline bool swallow_seg(struct prep_server *ps)
{
	const struct prep_pend *p = prep_ring_head(&ps->swallows);
	return p && p->seg == ps->seg_recv;
}

/* (out of line: the quick answers above need none of its registers) */
static __attribute__((noinline)) enum prep_verdict match_reply(struct server *s, uint8_t type, const uint8_t *msg,
							       uint32_t total, uint8_t **repl, uint32_t *repl_len);

/* Nothing of pgcat's waits for a reply on this server (no match, drop or
 * replacement; the usual state between the client's own statements), and
 * no DDL ran in its transaction. */
static inline bool quiet(const struct prep_server *ps)
{
	return !replies_pending(ps) && !ps->swallows.len && !ps->ddl_in_tx;
}

enum prep_verdict prep_server_message(struct server *s, uint8_t type, const uint8_t *msg, uint32_t total,
				      uint8_t **repl, uint32_t *repl_len)
{
	struct prep_server *ps = s->prep;
	if (!ps)
		return PREP_PASS;
	/* The replies of a plain query, matched with nothing (what
	 * match_reply would find), here without its frame. */
	switch (type) {
	case PqMsg_RowDescription:
	case PqMsg_NoData:
		if (!ps->describes.len)
			return PREP_PASS;
		break;
	case PqMsg_CommandComplete:
		if (ps->swallows.len)
			break;
		if (msg && total > 5 && prep_tag_changes_schema((const char *)msg + 5, total - 5))
			server_schema_changed(s, (const char *)msg + 5, total - 5);
		return PREP_PASS;
	case PqMsg_ReadyForQuery:
		if (!quiet(ps))
			break;
		ps->seg_recv++;
		return PREP_PASS;
	default:
		break;
	}
	return match_reply(s, type, msg, total, repl, repl_len);
}

static enum prep_verdict match_reply(struct server *s, uint8_t type, const uint8_t *msg, uint32_t total,
				     uint8_t **repl, uint32_t *repl_len)
{
	struct prep_server *ps = s->prep;
	struct prep_registry *r = prep_reg_of(s);
	struct prep_pend *p;
	switch (type) {
	case PqMsg_ParseComplete:
		if ((p = prep_ring_head(&ps->parses)) && p->seg == ps->seg_recv) {
			bool sw = p->swallow;
			if (p->st)
				p->st->verified = true;
			prep_pend_release(r, p);
			prep_ring_pop(&ps->parses);
			return sw ? PREP_SWALLOW : PREP_PASS;
		}
		return PREP_PASS;
	case PqMsg_BindComplete:
		return owed_parse_due(ps, r) ? PREP_PREFIX : PREP_PASS;
	case PqMsg_CloseComplete:
		if ((p = prep_ring_head(&ps->closes)) && p->seg == ps->seg_recv) {
			bool sw = p->swallow;
			prep_pend_release(r, p);
			prep_ring_pop(&ps->closes);
			return sw ? PREP_SWALLOW : PREP_PASS;
		}
		return PREP_PASS;
	case PqMsg_ParameterDescription:
		/* Only a statement Describe answers with it: the oldest one
		 * pending. Kept (whole) until its RowDescription or NoData. */
		if ((p = prep_ring_head(&ps->describes)) && p->seg == ps->seg_recv && !p->got_params) {
			p->got_params = true;
			if (p->st && msg && !p->st->desc && (p->repl = malloc(total)) != NULL) {
				memcpy(p->repl, msg, total);
				p->repl_len = total;
			}
		}
		return PREP_PASS;
	case PqMsg_RowDescription:
	case PqMsg_NoData:
		/* Right after a statement's ParameterDescription: the rest of
		 * its description (else a portal's or a query's). */
		if ((p = prep_ring_head(&ps->describes)) && p->seg == ps->seg_recv && p->got_params) {
			keep_description(p, msg, total);
			prep_pend_release(r, p);
			prep_ring_pop(&ps->describes);
		}
		return PREP_PASS;
	case PqMsg_EmptyQueryResponse:
		if ((p = prep_ring_head(&ps->repls)) && p->seg == ps->seg_recv) {
			*repl = p->repl;
			*repl_len = p->repl_len;
			p->repl = NULL;
			prep_pend_release(r, p);
			prep_ring_pop(&ps->repls);
			return PREP_REPLACE;
		}
		return PREP_PASS;
	case PqMsg_CommandComplete:
		if (msg && total > 5 && prep_tag_changes_schema((const char *)msg + 5, total - 5))
			server_schema_changed(s, (const char *)msg + 5, total - 5);
		return swallow_seg(ps) ? PREP_SWALLOW : PREP_PASS;
	case PqMsg_ErrorResponse: {
		enum prep_verdict v = PREP_PASS;
		/* The segment's first error, and its first message was the Bind
		 * a ParseComplete is owed before: the Bind's error. */
		bool owed = owed_parse_due(ps, r);
		/* Ours (the statement that does not exist)? Then the client's. */
		if (msg && (p = prep_ring_head(&ps->repls)) && p->seg == ps->seg_recv &&
		    memmem(msg, total, "\"" PREP_ERROR_NAME "\"", sizeof PREP_ERROR_NAME + 1) != NULL) {
			*repl = p->repl;
			*repl_len = p->repl_len;
			p->repl = NULL;
			prep_pend_release(r, p);
			prep_ring_pop(&ps->repls);
			v = PREP_REPLACE;
		}
		/* A plan that no longer fits (0A000) reaches the client as it
		 * would from PostgreSQL (drivers prepare again on it); the
		 * schema changed where pgcat did not see it, so statements
		 * prepared from now on are made afresh. */
		if (msg && memmem(msg, total, "\0C0A000\0", 8) != NULL &&
		    memmem(msg, total, "cached plan must not change result type", 39) != NULL)
			prep_schema_changed(s->w, "a server refused a cached plan");
		undo_segment(s, ps->seg_recv);
		/* One of pgcat's statements missing where pgcat believed the
		 * server held it: what it believes of this connection is wrong,
		 * so it is dropped, and the statements are made afresh under
		 * new names (the old ones may still be there). Without this the
		 * statement would fail on this connection until evicted. */
		if (v == PREP_PASS && msg && memmem(msg, total, "\0C26000\0", 8) != NULL &&
		    memmem(msg, total, "prepared statement \"pgcat_", 26) != NULL) {
			log_warning("S-%llu: a statement pgcat prepared is missing on the server; preparing afresh",
				    (unsigned long long)s->id);
			prep_sset_clear(&ps->set, r);
			ps->set.gen++;
			ps->unnamed_client = 0;
		}
		if (owed && v == PREP_REPLACE)
			(void)prefix_parse_complete(repl, repl_len);   /* (out of memory: the error alone) */
		return owed && v == PREP_PASS ? PREP_PREFIX : v;
	}
	case PqMsg_ReadyForQuery:
		/* DDL in a transaction is undone by its ROLLBACK: statements
		 * prepared inside it may name objects that are gone again. */
		if (ps->ddl_in_tx && msg && total >= 6 && msg[5] == 'I') {
			ps->ddl_in_tx = false;
			prep_schema_changed(s->w, "a transaction with DDL ended");
		}
		finish_segment(s, ps->seg_recv);
		bool swallow = swallow_seg(ps);
		if (swallow) {
			prep_pend_release(r, prep_ring_head(&ps->swallows));
			prep_ring_pop(&ps->swallows);
		}
		ps->seg_recv++;
		return swallow ? PREP_SWALLOW : PREP_PASS;
	default:
		return PREP_PASS;
	}
}

void prep_server_reset_pending(struct server *s)
{
	struct prep_server *ps = s->prep;
	if (!ps)
		return;
	struct prep_registry *r = prep_reg_of(s);
	/* Parses in flight may or may not have happened: forget the set. */
	bool unsure = ps->parses.len || ps->closes.len || ps->sqlpreps.len;
	prep_ring_clear(&ps->parses, r);
	prep_ring_clear(&ps->closes, r);
	prep_ring_clear(&ps->sqlpreps, r);
	prep_ring_clear(&ps->repls, r);
	prep_ring_clear(&ps->swallows, r);
	prep_ring_clear(&ps->describes, r);
	prep_ring_clear(&ps->owed_parses, r);
	if (unsure)
		prep_sset_clear(&ps->set, r);
	ps->seg_sent = ps->seg_recv = 0;
	ps->unnamed_client = 0;
}

/* Segments numbered first+1 .. first+n are part of segment first now;
 * later ones move down by n. */
static void ring_merge_segments(struct prep_ring *q, uint32_t first, uint32_t n)
{
	for (uint32_t i = 0; i < q->len; i++) {
		struct prep_pend *p = &q->q[(q->head + i) % q->cap];
		if (p->seg > first)
			p->seg = p->seg - first > n ? p->seg - n : first;
	}
}

void prep_server_syncs_ignored(struct server *s, uint32_t n, uint32_t after)
{
	struct prep_server *ps = s->prep;
	if (!ps || !s->prep_on)
		return;
	uint32_t open = ps->seg_sent - ps->seg_recv;   /* segments not ended yet */
	if (after > open)
		after = open;
	if (n > open - after)
		n = open - after;
	if (n == 0)
		return;
	/* The COPY's Execute is in segment first; the ignored Syncs come right
	 * after it, then the copy's data and end, then `after` Syncs. */
	uint32_t first = ps->seg_sent - after - n;
	struct prep_ring *rings[] = { &ps->parses, &ps->closes, &ps->sqlpreps, &ps->repls,
				      &ps->swallows, &ps->describes, &ps->owed_parses };
	for (size_t i = 0; i < sizeof rings / sizeof rings[0]; i++)
		ring_merge_segments(rings[i], first, n);
	ps->seg_sent -= n;
}

void prep_server_discarded(struct server *s)
{
	if (!s->prep)
		return;
	prep_sset_clear(&s->prep->set, prep_reg_of(s));
	s->prep->unnamed_client = 0;
}

void prep_server_forget_unnamed(struct server *s)
{
	if (s->prep)
		s->prep->unnamed_client = 0;
}

void prep_server_free(struct server *s)
{
	if (!s->prep)
		return;
	prep_server_reset_pending(s);
	prep_sset_clear(&s->prep->set, prep_reg_of(s));
	free(s->prep);
	s->prep = NULL;
}
