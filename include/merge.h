/* SPDX-License-Identifier: MIT */
/*
 * merge: one answer out of the answers of every shard to a cross-shard read
 * (SPEC §6). The plan reads the query (libpg_query) for what the merge must
 * do: ORDER BY on output columns, LIMIT/OFFSET applied after merging,
 * count/sum/min/max/avg combined, with or without GROUP BY (groups with the
 * same key merged across shards), and DISTINCT applied after the merge.
 * What it cannot merge exactly (HAVING, GROUP BY an expression not in the
 * select list, DISTINCT ON, set operations, window functions, ORDER BY an
 * expression not in the select list, count(DISTINCT), avg without sum and
 * count of the same argument...) is refused with the reason, before
 * anything runs.
 *
 * The merge streams (merge_stream_run): it reads each shard's rows as they
 * come, through a source its caller gives (the fan-out's legs), and writes
 * the merged rows as it goes. Plain rows go out as they come; each shard's
 * DataRows are already in the query's order, so an ORDER BY is a k-way
 * merge that needs one row of every shard at a time. Only what cannot be
 * answered before every row is in (aggregates, GROUP BY, DISTINCT) is
 * kept, up to a bound the caller sets. Pure: no sockets and no globals.
 */
#ifndef PGCAT_MERGE_H
#define PGCAT_MERGE_H

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct buf;

#define MERGE_MAX_SORT 8
#define MERGE_MAX_AGGS 32
#define MERGE_WHY 200
#define MERGE_MAX_SHARDS 64       /* shards a cross-shard read may span */
#define MERGE_MAX_HIDDEN 8        /* avg()s alone given hidden sum/count columns */

enum merge_agg { MERGE_AGG_NONE, MERGE_AGG_COUNT, MERGE_AGG_SUM, MERGE_AGG_MIN, MERGE_AGG_MAX, MERGE_AGG_AVG,
		 MERGE_AGG_CONST, MERGE_AGG_KEY /* a GROUP BY column */ };

struct merge_sort {
	int position;              /* 1-based output column; 0: by name */
	char name[64];             /* output column name (case as parsed) */
	bool desc;
	bool nulls_first;
	bool bytewise;             /* COLLATE "C" / "POSIX": compare bytes whatever the database's collation */
};

struct merge_plan {
	bool not_select;                       /* refused: one statement, but not a SELECT */
	/* Aggregates: one kind per output column; every column is an
	 * aggregate, a constant or (grouped) a GROUP BY key. */
	bool aggregates;
	bool grouped;                          /* GROUP BY: one row per distinct key after the merge */
	bool distinct;                         /* SELECT DISTINCT: equal rows once after the merge */
	int n_cols;                            /* columns of the shards' rows when aggregates (hidden ones too) */
	int n_visible;                         /* ... of which the client's (the first ones) */
	/* avg(x) without sum(x) and count(x) in the select list: each shard
	 * returns sum(x), count(x) too, after the client's columns (inserted
	 * at hidden_at, before FROM; the arguments' texts with their
	 * parentheses), and the client sees neither. */
	int n_hidden;
	size_t hidden_at;
	size_t hidden_arg_at[MERGE_MAX_HIDDEN], hidden_arg_len[MERGE_MAX_HIDDEN];
	uint8_t agg[MERGE_MAX_AGGS];           /* enum merge_agg */
	int8_t avg_sum[MERGE_MAX_AGGS];        /* AVG: the columns of sum() and count() of its argument */
	int8_t avg_count[MERGE_MAX_AGGS];
	int n_sort;
	struct merge_sort sort[MERGE_MAX_SORT];
	bool has_limit, has_offset;
	int64_t limit, offset;                 /* after the merge */
	/* What each shard runs instead: LIMIT limit+offset (grouped: no
	 * limit, as a group's rows may come from every shard), OFFSET 0 (byte
	 * ranges of the two constants in the text; len 0: none). */
	size_t limit_at, limit_len, offset_at, offset_len;
	/* LIMIT $n / OFFSET $m (extended protocol): the parameter numbers
	 * (0: a constant or none). Their values come from the Bind
	 * (merge_plan_bind): until then has_limit/has_offset say only that
	 * there is one. Each shard runs LIMIT ($n::bigint + offset) OFFSET
	 * (0 * $m::bigint), so that every parameter stays in its text. */
	int limit_param, offset_param;
};

/* Reads the cross-shard read sql[0..len). false: it cannot be merged
 * exactly; why tells the client (0A000). */
bool merge_plan_build(const char *sql, size_t len, struct merge_plan *p, char why[MERGE_WHY]);
/* The bound values of LIMIT $n / OFFSET $m (NULL: LIMIT ALL, OFFSET 0).
 * false: a negative one, which PostgreSQL refuses: then send the shards
 * the client's own text, for its own error. */
bool merge_plan_bind(struct merge_plan *p, bool limit_null, int64_t limit, bool offset_null, int64_t offset);
/* Does any shard need a text other than the client's? */
bool merge_plan_rewrites(const struct merge_plan *p);
/* The text each shard runs, NUL-terminated, malloc'd (NULL: no memory). */
char *merge_plan_shard_sql(const struct merge_plan *p, const char *sql, size_t len, size_t *outlen);
/* Does the merge compare values (ORDER BY, min, max)? Then string columns
 * need the database's collation. */
bool merge_plan_compares(const struct merge_plan *p);

/* The columns, from the RowDescription every shard sent alike. */
struct merge_column {
	char name[64];
	uint32_t type_oid;
	int16_t format;
};

/* ---- the streaming merge (merge_stream.c) ---- */

/* Where the merge reads each shard's rows. peek: shard's next DataRow,
 * whole (type byte and length included), valid until take or the next
 * peek of that shard: MERGE_ROW; none there yet: MERGE_WAIT; its rows
 * ended (its CommandComplete): MERGE_END; the shard failed (its error is
 * the source's to tell): MERGE_FAIL. take: the row peek gave is used up. */
enum merge_next { MERGE_ROW, MERGE_WAIT, MERGE_END, MERGE_FAIL };
struct merge_source {
	enum merge_next (*peek)(void *arg, int shard, const uint8_t **row, size_t *len);
	void (*take)(void *arg, int shard);
	void *arg;
};

/* How a run of the merge ended. */
enum merge_status {
	MERGE_NEED_ROWS,       /* a shard's next row is not there yet: run again when it came */
	MERGE_OUT_FULL,        /* out reached out_high: run again once it drained */
	MERGE_COMPLETE,        /* CommandComplete written: the answer is whole (what the shards send on is not needed) */
	MERGE_SUSPENDED,       /* the Execute's row limit was reached with rows left: PortalSuspended written */
	MERGE_SOURCE_FAILED,   /* the source said MERGE_FAIL */
	MERGE_TOO_LARGE,       /* the rows it must keep would pass its hold limit (why says so) */
	MERGE_FAILED           /* a row or a value it cannot merge (why says so) */
};

struct merge_stream;

/* A merge of n_shards shards' rows with the columns cols (the shards'
 * RowDescription) as p plans. coll: the database's collation for string
 * columns ((locale_t)0: bytes). NULL: why says why (a column it cannot
 * order, an ORDER BY name not among the columns, no memory). */
struct merge_stream *merge_stream_new(const struct merge_plan *p, const struct merge_column *cols, int n_cols,
				      int n_shards, locale_t coll, char why[MERGE_WHY]);
void merge_stream_free(struct merge_stream *ms);
/* The next run answers an Execute with this row limit (0: every row). */
void merge_stream_execute(struct merge_stream *ms, uint32_t max_rows);
/* At most this many bytes of rows (and their index) kept at once (for
 * aggregates, GROUP BY, DISTINCT); beyond, MERGE_TOO_LARGE. */
void merge_stream_hold_limit(struct merge_stream *ms, size_t bytes);
/* The bytes it keeps now. */
size_t merge_stream_held(const struct merge_stream *ms);
/*
 * Merges what src has into out, until out holds out_high bytes or more, or
 * a shard's row is needed that is not there, or the answer (or the
 * Execute's part of it) is written: then CommandComplete "SELECT n", n the
 * rows given since merge_stream_execute (every run of that Execute), or
 * PortalSuspended. OFFSET and LIMIT are applied across Executes. After
 * MERGE_COMPLETE a run answers "SELECT 0".
 */
enum merge_status merge_stream_run(struct merge_stream *ms, const struct merge_source *src, struct buf *out,
				   size_t out_high, char why[MERGE_WHY]);

/* One shard's whole result: its DataRow messages, whole and contiguous
 * (type byte and length included), and how many. */
struct merge_shard {
	const uint8_t *rows;
	size_t rows_len;
	uint64_t n_rows;
};

/*
 * The merge of whole results (every row of every shard at hand): the
 * merged DataRows to out, then CommandComplete "SELECT n" (or, when
 * max_rows > 0 and more rows were left, max_rows of them and
 * PortalSuspended, as an Execute with that row limit gets). false: the rows
 * cannot be merged; why says so and nothing was written to out.
 */
bool merge_rows(const struct merge_plan *p, const struct merge_column *cols, int n_cols,
		const struct merge_shard *shards, size_t n_shards, locale_t coll, uint32_t max_rows,
		struct buf *out, char why[MERGE_WHY]);

/* A RowDescription body into cols (at most cap of them). false: malformed. */
bool merge_read_row_description(const uint8_t *body, size_t len, struct merge_column *cols, int cap, int *n_cols);

#endif
