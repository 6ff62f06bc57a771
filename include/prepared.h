/* SPDX-License-Identifier: MIT */
/*
 * prepared: named prepared statements in transaction mode (SPEC §5).
 *
 * Each distinct statement (Parse body: text and parameter types; or the text
 * after the name of an SQL PREPARE) gets one entry in its pool's registry and
 * a global name. A client's names map to entries; each server connection
 * keeps the set of entries prepared on it (LRU, prepared_statements_cache_size).
 * Client messages are rewritten to global names, with a Parse sent first
 * where the server lacks the statement.
 *
 * The client must see exactly what PostgreSQL would send. pgcat never
 * invents a reply out of order: every reply the client expects comes from a
 * message the server really answers at that position. What pgcat adds is
 * swallowed (the ParseComplete of a Parse it sent, the CloseComplete of an
 * eviction), and what pgcat answers itself is a real server reply replaced in
 * place: an error is a Bind to (or DEALLOCATE of) the statement
 * "pgcat_error", which does not exist, so the server fails at that point,
 * skips to Sync and marks the transaction failed as it would; its error is
 * replaced by the client's own. A local success is an empty query whose
 * EmptyQueryResponse becomes the client's CommandComplete.
 */
#ifndef PGCAT_PREPARED_H
#define PGCAT_PREPARED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "prep_server.h"

struct client;
struct server;
struct proto_frame;

#define PREP_GNAME_MAX 48

/* One distinct statement of a pool; shared by clients and servers. */
struct prep_stmt {
	struct prep_stmt *hnext;
	uint64_t hash;
	uint64_t id;
	uint32_t refs;
	bool sql;               /* key is an SQL PREPARE's text after the name */
	/* Some server completed a Parse of it: a client's Parse of the same
	 * text in the same schema generation cannot fail (SPEC §5). */
	bool verified;
	bool notifies;          /* its text names NOTIFY (a Bind of it marks its server, link.h) */
	/* Is it a statement PostgreSQL plans (prepare_unnamed takes only
	 * those)? 0: not known yet, 1 yes, -1 no. */
	int8_t plannable;
	uint32_t servers;       /* server connections holding it */
	uint64_t schema_gen;    /* the schema generation its clients prepared it in */
	uint64_t hits, misses;
	/* A server's reply to a Describe of it (ParameterDescription, then
	 * RowDescription or NoData, whole messages), for answering the next
	 * client's Parse and Describe without a server (SPEC §5). Valid for
	 * the entry's life: an entry belongs to one schema generation. */
	uint8_t *desc;
	uint32_t desc_len;
	/* Its global name for a server set's generation gname_gen (every Bind
	 * names it: made once, not per Bind); gname_len 0: not made yet. */
	uint32_t gname_gen;
	uint8_t gname_len;      /* with the NUL */
	char gname[PREP_GNAME_MAX];
	uint32_t key_len;
	uint8_t key[];          /* Parse: query\0 int16 n, n x int32 oid */
};

/* The texts of unnamed Parses seen once (prepare_unnamed): PREP_SEEN_SETS
 * sets of PREP_SEEN_WAYS hashes, each set least recently used first out. */
#define PREP_SEEN_SETS 1024u
#define PREP_SEEN_WAYS 4u
struct prep_seen_slot {
	uint64_t hash;
	uint64_t used;
};

/* Per pool. */
struct prep_registry {
	struct prep_stmt **buckets;
	uint32_t n_buckets, count;
	uint64_t next_id;
	struct prep_seen_slot *seen;   /* NULL until the first unnamed Parse */
	uint64_t seen_clock;
};

void prep_registry_init(struct prep_registry *r);
/* Every statement must have been released (clients and servers gone). */
void prep_registry_free(struct prep_registry *r);
/* The entry for key in a schema generation, made if new; the caller owns
 * one reference. A statement is an entry per generation: clients that
 * prepared it before a schema change keep the server-side copies made
 * then (PostgreSQL itself tells them whether the plan still fits), those
 * that prepare it after get copies parsed afresh. */
struct prep_stmt *prep_registry_get(struct prep_registry *r, bool sql, const uint8_t *key, size_t len,
				    uint64_t schema_gen);
/* The entry, if there is one (no reference taken). */
struct prep_stmt *prep_registry_find(const struct prep_registry *r, bool sql, const uint8_t *key, size_t len,
				     uint64_t schema_gen);
void prep_stmt_unref(struct prep_registry *r, struct prep_stmt *st);
/* The same for a protocol Parse's key whose text hash (prep_key_hash) is
 * known: an unnamed Parse hashes its text once for the registry and the
 * seen-once memory. */
uint64_t prep_key_hash(const uint8_t *key, size_t len);
struct prep_stmt *prep_registry_find_hashed(const struct prep_registry *r, uint64_t text_hash, const uint8_t *key,
					    size_t len, uint64_t schema_gen);
struct prep_stmt *prep_registry_get_hashed(struct prep_registry *r, uint64_t text_hash, const uint8_t *key,
					   size_t len, uint64_t schema_gen);
/* Was this text (its prep_key_hash) seen before by the pool's seen-once
 * memory? If not, it is remembered now (pushing out the least recently
 * used of its set). false too when there is no memory for the table. */
bool prep_seen_again(struct prep_registry *r, uint64_t text_hash);

/* A client's names. */
struct prep_cmap_entry {
	char *name;
	struct prep_stmt *st;
};
struct prep_cmap {
	struct prep_cmap_entry *e;
	uint32_t cap, n;
};
struct prep_stmt *prep_cmap_get(const struct prep_cmap *m, const char *name);
/* Takes over the caller's reference to st. */
bool prep_cmap_put(struct prep_cmap *m, const char *name, struct prep_stmt *st);
bool prep_cmap_del(struct prep_cmap *m, struct prep_registry *r, const char *name);
void prep_cmap_clear(struct prep_cmap *m, struct prep_registry *r);

/* What a server connection holds. */
struct prep_sset_entry {
	struct prep_stmt *st;
	uint64_t used;
};
struct prep_sset {
	struct prep_sset_entry *e;
	uint32_t cap, n;
	uint64_t clock;
	/* Part of every global name on this connection: bumped when pgcat no
	 * longer knows what the server holds (DISCARD ALL), so that a name is
	 * never prepared twice. */
	uint32_t gen;
};
bool prep_sset_has(struct prep_sset *s, const struct prep_stmt *st);   /* and marks it used */
bool prep_sset_add(struct prep_sset *s, struct prep_stmt *st);         /* takes a new reference */
void prep_sset_del(struct prep_sset *s, struct prep_registry *r, struct prep_stmt *st);
/* The least recently used entry, removed; the caller gets its reference. */
struct prep_stmt *prep_sset_pop_lru(struct prep_sset *s);
void prep_sset_clear(struct prep_sset *s, struct prep_registry *r);

void prep_gname(char out[PREP_GNAME_MAX], const struct prep_stmt *st, uint32_t gen);
/* The same, kept on st for the generation last asked (its length with the
 * NUL in *len). */
const char *prep_gname_kept(struct prep_stmt *st, uint32_t gen, size_t *len);

/* ---- the protocol side ---- */

/* A FIFO of what pgcat sent and must match with the server's replies. */
struct prep_pend {
	uint32_t seg;           /* the Sync/Query it belongs to */
	uint32_t seq;           /* its place among all the server's entries (prep_server_push) */
	bool swallow;           /* pgcat's own: the client never sees the reply */
	bool evict;             /* a Close of st that pgcat sent to evict it */
	bool got_params;        /* a Describe: its ParameterDescription came (in repl) */
	bool sure;              /* Parse/eviction: st's place on the server was known when
				 * sent (no other pending op of st, no doubt) */
	bool unclose;           /* a client's Close of st (named cname, or its unnamed
				 * statement): given back if the server skips it */
	uint32_t gen;           /* Parse/eviction: the set's generation when sent */
	struct prep_stmt *st;   /* Parse: what it adds to the server (a reference) */
	char *cname;            /* Parse/PREPARE with a client name: undone on failure */
	uint8_t *repl;          /* replacement reply (error, CommandComplete) */
	uint32_t repl_len;
};
struct prep_ring {
	struct prep_pend *q;
	uint32_t head, len, cap;
};

struct prep_server {
	struct prep_sset set;
	struct prep_ring parses;    /* every Parse sent: matched with ParseComplete */
	struct prep_ring closes;    /* every Close sent: matched with CloseComplete */
	struct prep_ring sqlpreps;  /* SQL PREPAREs sent: confirmed by the segment's end */
	struct prep_ring repls;     /* replies to replace (errors, empty queries) */
	struct prep_ring swallows;  /* whole segments pgcat sent (SQL PREPARE before EXECUTE) */
	struct prep_ring describes; /* Describes of statements with no description kept yet */
	/* ParseCompletes pgcat owes the client: a mapped unnamed Parse it did
	 * not send (the server holds the statement), owed before the reply to
	 * the Bind that came right after it, first in its segment. */
	struct prep_ring owed_parses;
	uint32_t seg_sent, seg_recv;
	uint32_t op_clock;          /* stamps entries in the order sent */
	/* Whose unnamed statement the server holds (client id, its generation). */
	uint64_t unnamed_client;
	uint32_t unnamed_gen;
	uint64_t hits, misses;
	bool ddl_in_tx;             /* DDL completed in the open transaction */
	/* An op sent on an uncertain place was skipped (doubt_gen: the set's
	 * generation then): whether the server holds that name is not known,
	 * so every Parse of pgcat's on this connection closes its name first. */
	bool doubt;
	uint32_t doubt_gen;
};

struct prep_client {
	struct prep_cmap names;
	/* The last unnamed Parse, for replay on another server. */
	uint8_t *unnamed;
	uint32_t unnamed_len, unnamed_cap;
	uint32_t unnamed_gen;
	/* The last unnamed Parse went to the server as this statement
	 * (prepare_unnamed; a reference): the unnamed statement's Bind,
	 * Describe and Close name it. unnamed_len is 0 then. */
	struct prep_stmt *unnamed_st;
	/* The last unnamed Parse was longer than prepared_statements_max_length:
	 * streamed to one server, not kept (unnamed_len is 0): only that
	 * server holds it. */
	bool unnamed_unkept;
	/* Why PREP_REFUSED refused the client (its closing words). */
	char refusal[128];
};

/* The instance's schema generation (SPEC §5): statements are prepared
 * afresh in each (see prep_registry_get). */
struct worker;
uint64_t prep_schema_generation(const struct worker *w);
/* Does a CommandComplete with this tag start a new schema generation
 * (DDL, DISCARD ALL, DEALLOCATE ALL)? Pure. */
bool prep_tag_changes_schema(const char *tag, size_t len);

/* Is rewriting on for this client's transactions? */
bool prep_enabled(const struct client *c);


enum prep_action {
	PREP_FORWARD,   /* forward the message as is (the pump does) */
	PREP_DONE,      /* consumed; what the server needs is queued (maybe with a rest to stream) */
	PREP_WAIT,      /* need more bytes */
	PREP_DISCARD,   /* answered without it (what the server needs is queued): the
			 * pump discards the message, *stream_rest bytes, as they come */
	PREP_FAILED,    /* out of memory: the caller closes the client */
	PREP_REFUSED    /* a pgbouncer.ini's rule: a Parse of a name the client holds, or a
			 * Bind or Describe of one it does not, closes the client, as
			 * PgBouncer closes it (the caller does, with prep->refusal) */
};
/* A client message (Parse, Bind, Describe, Close, Query) with the client
 * linked to s. Also counts Sync/Query/FunctionCall segments. On PREP_DONE,
 * *stream_rest is what is left of the message in the client's input, for
 * the pump to stream to s as it is (0: nothing). */
enum prep_action prep_client_message(struct client *c, struct server *s, const struct proto_frame *f,
				     uint32_t *stream_rest);


/* A client that holds no server sends Parses and a Sync (pgbench -M
 * prepared prepares each statement so, blocking its thread while its other
 * clients may hold every server inside their transactions): pgcat answers
 * the ParseCompletes itself, without a server, when each statement was
 * already parsed by a server of the pool in this schema generation, or,
 * with unverified_ok, whatever it is (the caller found no server free);
 * the statement is parsed on a server when a Bind uses it, so an error in
 * it then answers the Bind. DONE: the Parses and the Sync were taken and
 * answered, the caller sends the ReadyForQuery. NO: nothing was taken
 * (the usual way). FAILED: out of memory, the caller closes the client. */
enum prep_cached { PREP_CACHED_NO, PREP_CACHED_DONE, PREP_CACHED_FAILED };
enum prep_cached prep_client_parse_cached(struct client *c, bool unverified_ok);

/* Sharding (route.c) refuses a client's request in the middle of a server
 * transaction or pipeline: the Query (already taken from the client's
 * input) is replaced by one that makes the server raise (sqlstate,
 * message); the Bind by one the server refuses, its error replaced by
 * (sqlstate, message) when rewriting is on (else PostgreSQL's 26000 about
 * the statement "pgcat_cross_shard_statement_refused"). Segment counts stay
 * right. false: nothing sent (message too long). */
bool prep_server_fail_query(struct server *s, const char *sqlstate, const char *message)
	__attribute__((warn_unused_result));
bool prep_server_fail_bind(struct server *s, const char *sqlstate, const char *message)
	__attribute__((warn_unused_result));

/* Ends the segment the client left open (Parse/Describe/Flush, no Sync
 * yet) with a Sync of pgcat's own whose replies the client never sees, so
 * that the server can go back to the pool at its ReadyForQuery (sharding:
 * the Bind that follows picks its shard, route.c). false: not possible
 * (rewriting off, no memory); nothing was sent. */
bool prep_server_end_segment(struct server *s) __attribute__((warn_unused_result));

/* Cross-shard reads run a client's statement on every shard themselves
 * (fanout.c). The text and parameter types ("query\0 int16 n, n x oid") of
 * the client's statement name ("" the unnamed one); false: not known. */
bool prep_client_statement(const struct client *c, const char *name, const uint8_t **key, size_t *keylen);
/* The client's Parse (whole message) that fanout answered: its statement
 * is the client's from now on, as if a server had taken it. */
bool prep_client_adopt(struct client *c, const uint8_t *parse, uint32_t total);

/* A Close (whole message m) from a client that holds no server: its named
 * statement is forgotten as on_close does; portals and the unnamed
 * statement exist on no server then. The caller answers CloseComplete. */
void prep_client_close_idle(struct client *c, const uint8_t *m, uint32_t total);

void prep_client_free(struct client *c);
/* -R (client_move.c): the client's statements written to pb (false: pb
 * full), and read back into a client of the new process, in its pool's
 * registry (false: a malformed part or no memory). */
struct pktbuf;
struct bytes_in;
bool prep_client_write(const struct client *c, struct pktbuf *pb);
bool prep_client_read(struct client *c, struct bytes_in *r);
/* -R (server_move.c): the generation of the names a server connection's
 * statements have; whether nothing of the protocol is pending on it; and
 * on the new process, the connection's names from a generation after gen
 * (the statements the old process prepared there are not reused: their
 * names are its registry's). false: no memory. */
uint32_t prep_server_generation(const struct server *s);
bool prep_server_movable(const struct server *s);
bool prep_server_adopt(struct server *s, uint32_t gen);
/* An idle client gives back its unnamed-Parse copy. */
void prep_client_trim(struct client *c);

#endif
