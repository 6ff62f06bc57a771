/* SPDX-License-Identifier: MIT */
/*
 * reshard_types: what the online reshard's rooms share (reshard.c, the
 * plan and its phases; reshard_source.c, one source shard's connections,
 * its copy and its change stream; reshard_schema.c, the table list and
 * the schema copy; reshard_state.c, the state in state_dir). Not for the
 * rest of pgcat: reshard.h is its face.
 */
#ifndef PGCAT_RESHARD_TYPES_H
#define PGCAT_RESHARD_TYPES_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "bconn.h"
#include "config.h"
#include "copysplit.h"
#include "pgoutput.h"
#include "reshard.h"

/* Cut over once every source's stream is this close to its server's end of WAL. */
#define RESHARD_CUTOVER_LAG_BYTES (1024u * 1024u)
/* Clients that do not release their servers within this give the cutover up (it is tried again later). */
#define RESHARD_DRAIN_LIMIT_US (2u * 1000u * 1000u)
/* A destination's unsent output above this stops reading the source. */
#define RESHARD_OUT_HIGH (4u * 1024u * 1024u)
/* Tables each source shard copies at the same time (each lane: a
 * connection to the source and one per new shard). */
#define RESHARD_COPY_LANES 2
/* Source transactions applied and not yet confirmed by every destination. */
#define RESHARD_TXN_RING 4096
/* Source transactions one destination transaction takes at most. */
#define RESHARD_BATCH_TXNS 256

/* A table of the source database, as the reshard moves it. */
struct rs_table {
	char *nspname, *relname;  /* as in the catalog */
	char *qname;              /* "nspname"."relname", quoted for SQL */
	char *columns;            /* its columns for COPY, quoted, in order */
	int key_col;              /* position of the sharding column in columns; -1: not sharded (copied whole to every shard) */
	char *key_name;           /* the sharding column's name, NULL when not sharded */
	/* Why its changes cannot be moved ("": they can): no primary key or
	 * replica identity index, or a sharding column outside it. */
	char unmovable[96];
	uint64_t rows, bytes;     /* copied (every source summed) */
	int sources_done;         /* sources that copied it (a sharded table: all of them; else source 0) */
};

/* A relation of a source's change stream (its Relation message), kept for
 * the changes that follow. */
struct rs_rel {
	uint32_t relid;
	char *nspname, *relname;
	char replica_identity;
	struct pgoutput_column *columns;   /* names owned */
	uint16_t n_columns;
	int table;                /* index in the plan's tables; -1: not moved (changes refused) */
	int key_col;              /* sharding column among columns; -1: not sharded */
};

enum rs_source_state {
	RSS_CONNECT,        /* connections opening */
	RSS_PREP,           /* publication made, stale slot dropped, destinations' settings */
	RSS_WAIT_SCHEMA,    /* source 0 lists the tables and copies the schema */
	RSS_PUBLISH,        /* its publication of the tables it moves made afresh */
	RSS_SLOT,           /* CREATE_REPLICATION_SLOT ... EXPORT_SNAPSHOT */
	RSS_SNAPSHOT,       /* the copy connection takes the snapshot */
	RSS_COPY,           /* tables copied one after another */
	RSS_COPY_COMMIT,    /* the copy's transaction ends */
	RSS_START,          /* START_REPLICATION sent */
	RSS_STREAM,         /* changes applied */
	RSS_STOPPED,        /* connections closed (done, cancelled or failed) */
};

enum rs_conn_role { RSC_CTL, RSC_REPL, RSC_COPY, RSC_DST };

/* A shard's primary as the reshard reaches it: copies, so that a reload
 * that frees the configuration it came from changes nothing. */
struct rs_endpoint {
	char *host;
	int port;
	char *database;
};

struct rs_source;
struct rs_lane;

/* One connection of the reshard's own. */
struct rs_conn {
	struct bconn b;
	struct rs_source *src;
	struct rs_lane *lane;     /* a copy lane's (its copy connection, or a destination of lane 1 on); NULL: none */
	enum rs_conn_role role;
	int dst;                  /* RSC_DST: the destination shard */
	const struct rs_endpoint *ep;   /* where it goes */
	struct sockaddr_storage addr;
	socklen_t addrlen;
	bool resolving;
	/* Simple queries sent whose ReadyForQuery has not come. */
	uint64_t sent, done;
	bool copy_in;             /* RSC_DST: a COPY FROM STDIN open (the copy's rows go there) */
	bool copy_both;           /* RSC_REPL: streaming */
	/* The first DataRow's first column of the last query (a short answer). */
	char answer[128];
	bool have_answer;
};

/* A source transaction applied: confirmed once every destination it
 * touched has answered the query that committed it there. */
struct rs_txn {
	uint64_t end_lsn;
	uint64_t *need;           /* per destination: the query count that must be done (0: untouched) */
};

struct reshard;

/* A copy lane of a source: a connection in the slot's snapshot copying
 * one table at a time, and a connection per destination its rows go to
 * (lane 0: the source's own, which apply the stream afterwards). */
struct rs_lane {
	struct rs_conn copy;
	struct rs_conn *dst;
	bool own_dst;             /* dst is this lane's (freed with it) */
	size_t table;             /* the table under way */
	bool busy;                /* a table under way */
	struct copysplit split;
	bool split_on;
	bool copy_ended;          /* the table's CopyDone came */
	bool paused;              /* its copy is not read: a destination is behind */
};

struct rs_source {
	struct reshard *rs;
	int index;                /* source shard */
	enum rs_source_state state;
	char slot[64];
	char snapshot[128];
	char encoding[64];        /* the source database's server_encoding */
	struct rs_conn ctl, repl;
	struct rs_conn *dst;      /* one per destination shard */
	/* Copy: its tables, RESHARD_COPY_LANES at a time; the next one to
	 * give a lane. */
	struct rs_lane lanes[RESHARD_COPY_LANES];
	size_t next_table;
	/* Stream. */
	struct rs_rel *rels;
	size_t n_rels, cap_rels;
	bool in_txn;
	/* Source transactions applied as one transaction per destination
	 * (the apply keeps up with many small ones: one COMMIT there for
	 * many): open since the first of them, ended (end_batch) at a source
	 * transaction's end once the stream has nothing more to read, or at
	 * RESHARD_BATCH_TXNS. Confirmed as one, at batch_end_lsn. */
	bool batch_open;
	uint32_t batch_txns;
	uint64_t batch_end_lsn;
	bool *opened;             /* per destination: this batch sent it a BEGIN */
	bool asking_target;       /* cutover: the source's current position asked */
	bool stale_target;        /* that answer belongs to a cutover given up: dropped */
	bool asking_lsn;          /* its end of WAL asked (the lag) */
	bool reading_seqs;        /* cutover: its sequences asked (DataRows to rs_seq_row) */
	/* Cutover: its count of tables asked (rs_source_count_tables); the
	 * answer kept apart, as the control connection's next question (the
	 * lag's) would take the place of its text. -1: none (no answer). */
	bool counting_tables;
	long long tables_now;
	uint64_t last_lsn_poll_us;
	struct buf **stmts;       /* per destination: this transaction's statements */
	struct rs_txn ring[RESHARD_TXN_RING];
	size_t ring_head, ring_len;
	uint64_t confirmed;       /* the slot's position pgcat confirms */
	uint64_t server_end;      /* the server's end of WAL as last asked (0: not yet) */
	uint64_t sent_end;        /* a keepalive's: everything before it was sent */
	uint64_t target;          /* cutover: drain up to this */
	uint64_t last_status_us;
	uint64_t changes;
	uint64_t errors;          /* failures that came from this source's connections */
	/* Per table of the plan (allocated once the tables are listed): rows
	 * and bytes this source copied, changes it applied. */
	uint64_t *t_rows, *t_bytes, *t_changes;
	char *scratch;            /* a statement being written */
	size_t scratch_cap;
	/* Room for the parts of one pgoutput message. */
	struct pgoutput_column *room_columns;
	struct pgoutput_value *room_new, *room_old;
	uint32_t *room_relids;
	bool stopping;            /* its connections are being closed on purpose */
	bool paused;              /* the stream (or the copy) is not read: a destination is behind */
};

enum rs_step {
	RSP_SOURCES,        /* the sources work (copy, then stream) */
	RSP_PAUSING,        /* cutover: the pool paused, waiting for its servers */
	RSP_TARGET,         /* cutover: asking each source for its current LSN */
	RSP_DRAINING,       /* cutover: the streams applied up to it */
	RSP_SEQUENCES,      /* cutover: the sources' sequences read, then set on the new shards */
	RSP_SWITCHING,      /* cutover: done and saved; waiting for every worker and peer to switch */
};

/* A sequence of the sources, at the furthest value any of them has
 * reached in its direction (the highest, or the lowest when it counts
 * down). */
struct rs_seq {
	char *name;               /* "schema"."name", quoted */
	int64_t value;
	bool descending;
};

/* A pool's reshard, run by worker 0. */
struct reshard {
	struct worker *w;
	const struct rs_events *ev;
	char pool[64];
	enum reshard_phase phase;
	enum rs_step step;
	bool hold;                /* RESHARD pool HOLD: no cutover until RESHARD CUTOVER */
	bool cutover_asked;
	bool schema_done;         /* the schema is on every destination (a restart truncates instead) */
	bool slots;               /* replication slots may be on the sources (dropped: false) */
	bool resume_stream;       /* started again in phase replicate: no copy */
	bool controls_only;       /* CANCEL, CLEANUP: the control connections only */
	char *drop_first;         /* CLEANUP: run before the slot is dropped (TRUNCATE of the moved tables) */
	enum sharding_function fn;
	/* Its connections' profile: their application_name names this run
	 * ("pgcat reshard <pool> <id>"), so that a run tells its own
	 * sessions from those a killed pgcat left on the new shards. */
	struct bconn_profile profile;
	char app_name[96];
	char publication[64];     /* pgcat_reshard_<pool>: the tables moved, on every source */
	char *user, *password;    /* the pool's first user, as its servers are logged in to */
	struct rs_endpoint *src_ep, *dst_ep;
	char targets[2048];       /* the next layout, as the state file names it */
	char sources[2048];       /* the layout it moves from */
	int n_src, n_dst;
	struct rs_source *src;
	struct rs_table *tables;
	size_t n_tables, cap_tables;
	size_t tables_copied;
	/* The schema: pg_dump's output, read from its pipe. */
	pid_t dump_pid;
	int dump_fd;
	struct event *dump_ev;
	struct buf *dump_out;
	int schema_waits;         /* destinations still applying the schema */
	bool tables_listed;
	bool listing_tables;      /* source 0's control connection returns the table list */
	uint64_t pause_start_us, pause_us;
	uint64_t errors;
	char error[256];
	struct event *timer;
	uint64_t started_us;
	struct rs_peers *peers;   /* the other instances of [peers] (reshard_peers.c) */
	struct rs_seq *seqs;
	size_t n_seqs, cap_seqs;
	bool seqs_set;            /* cutover: the setval queries sent */
};

/* ---- reshard.c's, as events (the sources and the schema call nothing
 * of reshard.c by name: it calls them) ---- */
struct rs_events {
	/* The reshard fails: every connection closed, the state saved, the
	 * old layout serving. */
	void (*failed)(struct reshard *rs, const char *why);
	/* A source moved on: the plan looks whether its next step can begin. */
	void (*progressed)(struct reshard *rs);
	/* Progress to the shared segment (SHOW RESHARD). */
	void (*publish)(struct reshard *rs);
	/* pg_dump ended (ok: its output is in rs->dump_out). */
	void (*schema_dumped)(struct reshard *rs, bool ok, const char *why);
};

static inline void rs_failf(struct reshard *rs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void rs_failf(struct reshard *rs, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	rs->ev->failed(rs, why);
}

/* ---- reshard_source.c ---- */
/* rs->profile for its connections (once, before they open). */
void rs_profile_init(struct reshard *rs);
bool rs_source_init(struct reshard *rs, struct rs_source *s, int index);
void rs_source_open(struct rs_source *s);
void rs_source_close(struct rs_source *s);
void rs_source_free(struct rs_source *s);
/* The schema is on the destinations: create the slot and copy. */
void rs_source_begin_copy(struct rs_source *s);
/* A tick: resolve, status updates, timeouts. */
void rs_source_tick(struct rs_source *s);
/* Cutover: the position to drain to. */
/* (reshard_source.c) sql on c, or the reshard fails (connection not
 * ready, out of memory). */
bool rs_source_send(struct rs_source *s, struct rs_conn *c, const char *sql);
/* (reshard_ask.c, the questions below) */
void rs_source_ask_target(struct rs_source *s);
/* Cutover: how many tables the source has now (rs_tables_query counted),
 * asked on its control connection, idle: false if it is not (asked
 * later). The answer: counting_tables false, tables_now. */
bool rs_source_count_tables(struct rs_source *s);
bool rs_source_drained(const struct rs_source *s);
/* Its slot and the publication dropped (done or cancelled), on its
 * control connection, rs->drop_first before; the answer is the count of
 * its slot left ("0": gone). */
void rs_source_drop_slot(struct rs_source *s);
bool rs_conn_query(struct rs_conn *c, const char *sql);
bool rs_conn_idle(const struct rs_conn *c);

/* ---- reshard_layout.c ---- */
struct rs_state;
/* A done reshard's layout is the one cp uses, the one it left its next. */
bool rs_overlay_active(const struct config_pool *cp, const struct rs_state *st);
/* RESHARD SWITCH (a peer's cutover): phase done with this instance's next
 * layout, kept in state_dir, every worker on it. false: err says why. */
bool rs_switch_here(struct worker *w, const char *pool, char *err, size_t errlen);

/* ---- reshard_peers.c ---- */
struct rs_peers;
/* The instances [peers] lists, other than this one (none: nothing to
 * do). false: out of memory. */
bool rs_peers_init(struct reshard *rs);
/* A console command for every peer, in order (each logged in on its first). */
void rs_peers_send(struct reshard *rs, const char *sql);
void rs_peers_tick(struct reshard *rs);
/* Every peer answered everything sent (or failed). */
bool rs_peers_settled(const struct reshard *rs);
/* Why a peer failed (NULL: none did). */
const char *rs_peers_failed(const struct reshard *rs);
/* RESUME pool to every peer, on a fresh connection where the last one
 * still waits for an answer (a PAUSE not drained yet). */
void rs_peers_resume(struct reshard *rs);
/* A cutover given up: the failed peers are tried afresh next time. */
void rs_peers_forget_failures(struct reshard *rs);
void rs_peers_free(struct reshard *rs);

/* Cutover: the sources' sequences asked (each answer's rows go to
 * rs_seq_row), then set on the new shards. */
void rs_source_ask_sequences(struct rs_source *s);
bool rs_seq_row(struct reshard *rs, const uint8_t *body, size_t len);
/* The setval query for every sequence (NULL: out of memory; "" when none). */
char *rs_seq_sql(const struct reshard *rs);

/* ---- reshard_schema.c ---- */
/* The catalog query listing the tables (on source 0's control connection). */
extern const char *const rs_tables_query;
/* A DataRow of that query into rs->tables. false: out of memory or a bad row. */
bool rs_schema_table_row(struct reshard *rs, const uint8_t *body, size_t len);
/* pg_dump --schema-only of source 0, read into rs->dump_out; then its
 * schema_dumped event. false: could not start (rs failed). */
bool rs_schema_dump(struct reshard *rs);
void rs_schema_stop(struct reshard *rs);
/* pg_dump's output as one query for the destinations (psql's meta
 * commands dropped): NUL-terminated, malloc'd; NULL: out of memory. */
char *rs_schema_sql(const uint8_t *dump, size_t len);
/* A DataRow body's column i: false when it is not there. */
bool rs_datarow_col(const uint8_t *body, size_t len, int i, const char **val, int32_t *vlen);
/* The first sharded_tables entry that names no table of the list (NULL: none). */
const char *rs_unmatched_sharded(const struct reshard *rs);
/* A slot name for (pool, source shard), and the publication's name for
 * pool (shard < 0): letters, digits and _ only. */
void rs_slot_name(char *out, size_t cap, const char *pool, int shard);
/* name as a quoted identifier onto b (its quotes doubled). -1: out of memory. */
int rs_quote_ident(struct buf *b, const char *name);

/* ---- reshard_state.c ---- */
struct rs_state {
	enum reshard_phase phase;
	bool hold, schema_done;
	bool slots;               /* replication slots may be left on the sources */
	char targets[2048];       /* the next layout it moved to: "host:port/db,..." */
	char sources[2048];       /* the layout it moved from */
	uint64_t pause_us;
	char error[256];
};
/* The file of pool in dir: false when there is none (or it cannot be read). */
bool rs_state_read(const char *dir, const char *pool, struct rs_state *st);
/* Written whole and fsync'd before it replaces the old one. false: why. */
bool rs_state_write(const char *dir, const char *pool, const struct rs_state *st, char *why, size_t whylen);
/* The server a shard's primary is (a lone server of role auto counts; NULL: none). */
const struct config_server *rs_primary(const struct config_shard *sh);
/* The layout's description as rs_state.targets holds it. */
void rs_layout_text(const struct config_shard *shards, size_t n, char *out, size_t cap);
/* (reshard_publish.c) rs's progress to the shared segment, for SHOW
 * RESHARD: its phase (cutover until every worker and peer switched),
 * counts, and per table and source shard. */
void rs_publish(struct reshard *rs);

#endif
