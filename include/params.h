/* SPDX-License-Identifier: MIT */
/*
 * params: the session parameters pgcat tracks per connection (SPEC §3), and
 * the SET statements that bring a server in line with a client. Pure data:
 * no sockets.
 */
#ifndef PGCAT_PARAMS_H
#define PGCAT_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The bounds of one session's tracked settings (SPEC §10: memory bounded
 * whatever a client sends). Within them every setting is tracked at any
 * length PostgreSQL takes; a change beyond them is not followed, and the
 * server that took it is reset before it serves another client
 * (PARAMS_UNTRACKED). */
#define PARAMS_MAX 256                      /* settings in one table */
#define PARAMS_BYTES_MAX (1024u * 1024)     /* their names and values, together */
#define PARAMS_NAME_MAX 255                 /* one setting's name */
/* Query and Parse texts up to this length are read whole for the settings
 * they change; a longer one cannot be followed (PARAMS_UNTRACKED). */
#define PARAMS_SQL_MAX (1024u * 1024)

/* One setting: immutable once made and shared by reference between the
 * tables that hold it (a pool's defaults, its clients, its servers). */
struct param {
	unsigned refs;
	/* value is SQL text to splice after SET name TO (what a client's own
	 * SET said), not a string to quote. */
	bool raw;
	uint32_t size;       /* bytes of name and value, for PARAMS_BYTES_MAX */
	uint64_t hash;       /* this entry's share of a table's digest */
	const char *value;   /* points into the same allocation, after name */
	char name[];
};

/* A set of settings, copy-on-write: copying a set shares its table; the
 * first change to a shared table clones it (pointers only). An idle client
 * whose session is the pool's default holds no table of its own, which is
 * what keeps its footprint small. */
struct param_table {
	unsigned refs;
	unsigned n, cap;
	size_t bytes;            /* names and values of items, for PARAMS_BYTES_MAX */
	struct param *items[];
};

struct params {
	struct param_table *t;   /* NULL: empty */
	/* Order-independent digest of the whole set, kept current by every
	 * change: two sets with equal digests need no SET between them, which
	 * spares comparing every parameter on every server hand-out. */
	uint64_t digest;
};

static inline size_t params_count(const struct params *p) { return p->t ? p->t->n : 0; }
static inline const struct param *params_at(const struct params *p, size_t i) { return p->t->items[i]; }

void params_init(struct params *p);
void params_clear(struct params *p);
/* Returns false past PARAMS_MAX, PARAMS_BYTES_MAX or PARAMS_NAME_MAX, or
 * out of memory (the parameter is then not tracked, p as it was). */
bool params_set(struct params *p, const char *name, const char *value, bool raw);
/* The same with a value of n bytes, not NUL-terminated (and without one). */
bool params_set_n(struct params *p, const char *name, const char *value, size_t n, bool raw);
void params_remove(struct params *p, const char *name);
/* Add every setting of from that p lacks, sharing from's entries (a login
 * takes the pool's defaults this way: no allocation per setting). false:
 * out of memory or p is full (what was added stays). */
bool params_add_missing(struct params *p, const struct params *from);
const struct param *params_get(const struct params *p, const char *name);
/* dst becomes a (shared) copy of src. */
void params_copy(struct params *dst, const struct params *src);

/* Can pgcat SET this parameter on a server? (server_version and such: no) */
bool params_settable(const char *name);
/* Does PostgreSQL report it with ParameterStatus? */
bool params_reported(const char *name);

/* The value PostgreSQL reports for the setting name given as value: the
 * encoding's own name for client_encoding (utf8, UNICODE -> UTF8; euc-jp ->
 * EUC_JP), "ISO, MDY" for DateStyle iso, on/off for a boolean, an enum's
 * name in lower case. current is the session's value before (DateStyle keeps
 * the half the new value does not give), or NULL. true: out holds it; false:
 * a setting or a spelling pgcat does not know (left to the server, whose
 * ParameterStatus corrects it). Clients compare what they asked for with
 * what is reported, so pgcat must say what PostgreSQL says. */
bool params_canonical(const char *name, const char *value, const char *current, char *out, size_t outsz);
/* Each reported setting of p in the form PostgreSQL reports it (above),
 * relative to base's values (the server's defaults, for a login). */
void params_canonicalize(struct params *p, const struct params *base);

/* Equal digests: same names, values and forms (a 64-bit hash: a collision
 * is astronomically unlikely, and costs at most a missed SET). */
static inline bool params_same(const struct params *a, const struct params *b) { return a->digest == b->digest; }
/* The statements that make the server's tracked values equal the client's,
 * as one simple-protocol SQL string: SET name TO value (a string value of a
 * list setting whose items PostgreSQL would quote, search_path above all,
 * through set_config, which takes the string as a startup option does),
 * RESET name. *out: a malloc'd string the caller frees, NULL when there is
 * nothing to do. Returns the number of statements, or -1 when out of
 * memory. */
int params_build_sync(const struct params *client, const struct params *server, char **out);

/* Why a client's startup settings are refused, as PostgreSQL says it. */
struct params_refusal {
	char sqlstate[6];
	char message[256];
};

/* Client startup "options", split and read as PostgreSQL reads them
 * (params_options.c): words split at unescaped whitespace, a backslash
 * taking the next byte as it is; the backend's switches (-c name=value,
 * -cname=value, --name=value, and -B, -d, -e, -F, -f, -i, -k, -l, -N, -O,
 * -P, -p, -S, -s, -t, -W, -h as the settings they stand for; -b, -C, -D,
 * -E, -j, -n, -r, -T, -v taken and ignored), getopt's way. Each setting
 * goes to p (a name with '-' for '_' as PostgreSQL turns it), checked as
 * params_check_startup checks it. false: refused, *why says how
 * PostgreSQL refuses it (p may hold some of the settings). */
bool params_apply_options(struct params *p, const char *options, struct params_refusal *why);
/* The same, the settings named in ignore (ignore_startup_parameters: a
 * comma or blank separated list, any case; NULL: none) dropped unread. */
bool params_apply_options_ignoring(struct params *p, const char *options, const char *ignore,
				   struct params_refusal *why);
/* Whether name is in list (comma or blank separated, any case; NULL: no). */
bool params_name_listed(const char *list, const char *name);
/* A startup setting (from options or the startup packet): refused as
 * PostgreSQL refuses it when pgcat can tell without a server — a name no
 * setting can have, a setting fixed for the life of a server, a
 * search_path whose list syntax is invalid. What only a server can judge
 * (an unknown name, a bad value) it judges when pgcat first applies the
 * session there, and the client is refused then (server.c). true: taken. */
bool params_check_startup(const char *name, const char *value, struct params_refusal *why);

/* Recognise a client statement that changes a session setting (SET
 * [SESSION] name TO|= ..., SET TIME ZONE, SET SCHEMA, RESET name, RESET
 * ALL, DISCARD ALL, SELECT set_config('name', 'value', false) with
 * literals) and apply it to p; PostgreSQL 15 reports only some
 * settings, so the others (search_path above all) are learnt here. Only
 * the first statement of sql counts. defaults: the session's own startup
 * settings, which RESET returns to (NULL for a server connection).
 * UNTRACKED: it changes session state pgcat does not follow (SET ROLE,
 * SET SESSION AUTHORIZATION or CHARACTERISTICS, a DO block, set_config
 * other than as above, an UPDATE of pg_settings, a name or a value it
 * cannot read or hold). */
enum params_stmt { PARAMS_STMT_NONE, PARAMS_STMT_SET, PARAMS_STMT_RESET, PARAMS_STMT_RESET_ALL, PARAMS_STMT_UNTRACKED };
enum params_stmt params_track_statement(struct params *p, const char *sql, size_t len,
					const struct params *defaults);

/* What a whole simple-protocol Query (or Parse) text does to p: every
 * statement in it, as params_track_statement. */
#define PARAMS_CHANGED 1u       /* a tracked setting changed */
#define PARAMS_UNTRACKED 2u     /* something pgcat does not follow changed */
unsigned params_track_sql(struct params *p, const char *sql, size_t len, const struct params *defaults);
/* A quick look, before params_track_sql, on every Query and Parse: false
 * when no statement of sql can change a setting (none starts with s, r, d
 * or a comment, and neither set_config nor pg_settings is named). */
bool params_sql_may_change(const char *sql, size_t len);

/* What each execution of a prepared statement (a Parse's text) does to the
 * session's settings. A statement changes them when it runs, at each Bind
 * and Execute, on whichever server it runs: so they are tracked there, from
 * what its Parse said. */
enum params_setter {
	PARAMS_SETTER_NONE,       /* it changes no setting for good */
	PARAMS_SETTER_TEXT,       /* as its text says (SET, RESET, literal set_config): params_track_sql of it */
	PARAMS_SETTER_BOUND,      /* SELECT set_config($n, $m, false): name and value are Bind parameters */
	PARAMS_SETTER_UNTRACKED   /* something pgcat cannot follow */
};
/* For PARAMS_SETTER_BOUND, *name_param and *value_param (1-based). */
enum params_setter params_setter_of(const char *sql, size_t len, uint16_t *name_param, uint16_t *value_param);

/* A set as a record of pgcat's own carries it (-R, client_move.c and
 * server_move.c): u16 count, each u8 raw, cstring name, cstring value;
 * read back into out (false: malformed, or no memory). */
struct pktbuf;
struct bytes_in;
void params_write(struct pktbuf *pb, const struct params *p);
bool params_read(struct bytes_in *r, struct params *out);

#endif
