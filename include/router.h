/* SPDX-License-Identifier: MIT */
/*
 * router: what a statement means for routing (SPEC §4, §6). Classifies SQL
 * text with libpg_query (read or write, transaction control, sharding keys,
 * comment hints), recognises pgcat's own SET/SHOW statements, and caches
 * verdicts by text. Pure: no sockets, no globals; it never picks a server or
 * a shard (that is sharding and the balancer).
 */
#ifndef PGCAT_ROUTER_H
#define PGCAT_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One `sharded_tables` entry, [schema.]table.column. Names compare
 * case-insensitively with the parsed (case-folded) identifiers. */
struct router_table {
	const char *schema;       /* NULL: any schema (and an unqualified name always matches) */
	const char *table;
	const char *column;
	/* Where the sharding column sits among the table's columns, when the
	 * caller learnt it (positioned): an INSERT without a column list has
	 * its keys there. Zero-initialised: not known. */
	bool positioned;
	uint16_t position;
};

/* What a pool's configuration says about parsing. The caller owns it; the
 * cache fingerprints its contents, so a reload may build a new one freely. */
struct router_rules {
	const struct router_table *sharded;
	size_t n_sharded;
	/* Functions that write, beyond the built-ins (nextval, setval,
	 * pg_advisory_*, pg_try_advisory_*, pg_notify, txid_current,
	 * pg_current_xact_id, lo_*, lowrite). Matched case-insensitively on
	 * the function's own name (a schema prefix, in the call or the entry,
	 * is ignored); a trailing '*' matches a prefix. */
	const char *const *writing_functions;
	size_t n_writing_functions;
	/* query_parser_max_length: text longer than this (in bytes) is not
	 * parsed (verdict parsed = false): 0 parses nothing, SIZE_MAX is no limit. */
	size_t max_length;
	/* A hint, not a rule (never part of a cached verdict's key): the text
	 * came in a simple Query, which usually writes its constants in it,
	 * so router_cache_classify looks its shape up first. */
	bool literals_inline;
};

enum router_role { ROUTER_ROLE_NONE, ROUTER_ROLE_PRIMARY, ROUTER_ROLE_REPLICA, ROUTER_ROLE_ANY };

#define ROUTER_KEY_TEXT 64
#define ROUTER_MAX_KEYS 16

/* A sharding key: the text of a literal as PostgreSQL would read it
 * ("5", "-12", "1.5", "abc", a uuid's text), or a parameter of the extended
 * protocol whose bound value is the key. */
struct router_key {
	int param;                /* > 0: $param; 0: literal in text */
	char text[ROUTER_KEY_TEXT];
};

/*
 * The verdict on one query text (which may hold several statements).
 *
 * writes is true for anything not provably read-only:
 *   - reads: SELECT/VALUES/TABLE without FOR UPDATE|NO KEY UPDATE|SHARE|KEY
 *     SHARE anywhere, without INTO, without a data-modifying CTE, calling no
 *     writing function; SHOW; EXPLAIN (with ANALYZE: as its statement);
 *     COPY ... TO; DECLARE/PREPARE (as their query); FETCH, MOVE, CLOSE;
 *     SET, RESET, DISCARD, DEALLOCATE, UNLISTEN, LOAD, SET CONSTRAINTS;
 *     SAVEPOINT, RELEASE, ROLLBACK TO, COMMIT, ROLLBACK (all of these run
 *     on a hot standby; pgcat sends them wherever the transaction goes);
 *     BEGIN/START TRANSACTION ... READ ONLY.
 *   - writes: everything else, including BEGIN/START TRANSACTION without
 *     READ ONLY, INSERT/UPDATE/DELETE/MERGE, COPY FROM, DDL, LOCK, CALL, DO,
 *     EXECUTE (its statement is not visible here), LISTEN, NOTIFY,
 *     CHECKPOINT, VACUUM, COMMIT/ROLLBACK PREPARED, and text that was not
 *     parsed.
 * Several statements: writes if any writes; begins/ends if any does.
 *
 * Sharding keys (only from DML: SELECT, INSERT, UPDATE, DELETE, MERGE, COPY,
 * also inside EXPLAIN/DECLARE/PREPARE; DDL and other utility statements never
 * touch sharded tables here, SPEC §6 sends them to default_shard):
 *   - a reference to a sharded table (alias, schema, joins and subqueries
 *     understood) is constrained by `col = const`, `const = col`,
 *     `col IN (consts)`, `col = $n` (casts allowed) in its WHERE, in the ON of
 *     an inner join, by an AND holding one, by an OR whose every branch
 *     holds one, or by `a.col = b.col` with another constrained sharded
 *     reference; INSERT (col, ...) VALUES with a constant or $n in every row.
 *   - an UPDATE that assigns the sharding column, a MERGE target, COPY and
 *     INSERT without a column list or from a SELECT are unconstrained.
 *   - keys_complete: at least one sharded reference and every one of them is
 *     constrained, all keys fit: the statement touches only the shards of
 *     keys[] (one shard if all hash alike). Otherwise keys[] is only what was
 *     seen. A key the pool's hash cannot read (1.5 for pg_bigint_hash) means
 *     "no usable key" for the caller.
 */
struct router_verdict {
	bool parsed;              /* libpg_query understood it; false: route by defaults */
	bool writes;
	/* A read that calls a function neither a known writer nor one of the
	 * built-ins known to write nothing (router.c's list): the write pause
	 * of a reshard's cutover (pool.h) does not take it for a read. */
	bool calls_unknown;
	bool begins;              /* BEGIN / START TRANSACTION */
	bool begin_read_only;     /* ... READ ONLY (the last access mode given wins) */
	bool ends;                /* COMMIT/END/ROLLBACK/ABORT (AND CHAIN too)/PREPARE TRANSACTION */
	bool reads_sharded;       /* a DML statement touches a sharded table */
	bool multi_statement;
	bool keys_complete;
	/* Comment hint: a leading block comment `/ * pgcat: shard=1 * /`, with any of
	 * shard=N, sharding_key=K, role=primary|replica|any|auto|default
	 * (values optionally quoted, pairs separated by spaces or commas).
	 * Read even when the text is not parsed. */
	int hint_shard;           /* -1: none */
	bool hint_invalid;        /* shard= not a number, sharding_key= empty or too long: 22023 */
	bool has_hint_key;
	enum router_role hint_role;   /* auto/default: NONE */
	char hint_key[ROUTER_KEY_TEXT];
	/* An INSERT without a column list into sharded table insert_table (an
	 * index into the rules' tables) whose column places are not known:
	 * its keys are not known until they are. */
	bool insert_unplaced;
	uint8_t insert_table;
	size_t n_keys;
	struct router_key keys[ROUTER_MAX_KEYS];   /* last: the cache stores only n_keys of them */
};

/* Classifies sql[0..len) (not necessarily NUL-terminated; text after an
 * embedded NUL is ignored, as PostgreSQL would). Always fills *out; returns
 * out->parsed. Never fails otherwise: syntax newer than libpg_query's
 * grammar (PostgreSQL 15) or an allocation failure give parsed = false. */
bool router_classify(const char *sql, size_t len, const struct router_rules *rules,
		     struct router_verdict *out);

/*
 * pgcat's own statements (SPEC §6), case-insensitive, surrounded by any
 * whitespace, optional trailing semicolon, `TO` or `=`, value quoted ('..'
 * with '' for a quote, or "..") or a bare word/number:
 *   SET SHARD TO '1'; SET SHARDING KEY TO '1234';
 *   SET SERVER ROLE TO 'primary'|'replica'|'auto'|'any'|'default';
 *   SET PRIMARY READS TO 'on'|'off'|'default';
 *   SHOW SHARD; SHOW SERVER ROLE; SHOW PRIMARY READS.
 * The value is copied, unquoted, into value (NUL-terminated) for the SET forms;
 * checking it (range, role names, on/off) is the caller's (22023).
 * ROUTER_CMD_INVALID: starts like one of these (SET|SHOW then SHARD,
 * SHARDING, SERVER or PRIMARY as a whole word) but is malformed, has more
 * statements after it, or its value does not fit valuelen: answer 42601
 * (22023 for the value). Anything else (SET search_path, SHOW server_version,
 * SET shard.x = 1): ROUTER_CMD_NONE, forward it. Allocates nothing.
 */
enum router_command {
	ROUTER_CMD_NONE,
	ROUTER_CMD_SET_SHARD,
	ROUTER_CMD_SET_SHARDING_KEY,
	ROUTER_CMD_SET_SERVER_ROLE,
	ROUTER_CMD_SET_PRIMARY_READS,
	ROUTER_CMD_SHOW_SHARD,
	ROUTER_CMD_SHOW_SERVER_ROLE,
	ROUTER_CMD_SHOW_PRIMARY_READS,
	ROUTER_CMD_INVALID
};
enum router_command router_parse_command(const char *sql, size_t len, char *value, size_t valuelen);

/* "primary", "replica", "any" → that role; "auto", "default" → NONE;
 * case-insensitive. False for anything else. */
bool router_role_parse(const char *s, size_t len, enum router_role *out);

/* LRU cache of verdicts keyed by (text, rules' contents): a repeated or
 * prepared statement is parsed once. One per worker, owned by the caller.
 * capacity 0 caches nothing. Text longer than rules->max_length is never
 * stored (it is not parsed anyway). */
struct router_cache;
struct router_cache *router_cache_new(size_t capacity);
void router_cache_free(struct router_cache *c);
/* Looks up; on a miss classifies and inserts (evicting the least recently
 * used entry when full). Returns a verdict valid until the next call on c;
 * never NULL. */
const struct router_verdict *router_cache_classify(struct router_cache *c, const char *sql, size_t len,
						   const struct router_rules *rules);
/* Counters for SHOW/metrics and tests. */
struct router_cache_stats {
	size_t entries;
	unsigned long long hits, misses, evictions;
};
void router_cache_stats(const struct router_cache *c, struct router_cache_stats *out);

#endif
