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
 * Plain rows are merged from the shards' replies as received, without
 * copying them first: each shard's DataRows are already in the query's
 * order, so an ORDER BY is a k-way merge. Groups and DISTINCT sort all rows
 * by their key first. Pure: no sockets and no globals.
 */
#ifndef PGCAT_MERGE_H
#define PGCAT_MERGE_H

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

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

/* One shard's result: its DataRow messages, whole and contiguous (type
 * byte and length included), and how many. */
struct merge_shard {
	const uint8_t *rows;
	size_t rows_len;
	uint64_t n_rows;
};

/* The columns, from the RowDescription every shard sent alike. */
struct merge_column {
	char name[64];
	uint32_t type_oid;
	int16_t format;
};

/*
 * Writes the merged DataRows to out, then CommandComplete "SELECT n" (or,
 * when max_rows > 0 and more rows were left, max_rows of them and
 * PortalSuspended, as an Execute with that row limit gets).
 * coll: the database's collation for string columns ((locale_t)0: bytes).
 * false: the rows cannot be merged (a column type it cannot order or add,
 * an ORDER BY name not among the columns, a value it cannot read); why
 * says so and nothing was written to out.
 */
bool merge_rows(const struct merge_plan *p, const struct merge_column *cols, int n_cols,
		const struct merge_shard *shards, size_t n_shards, locale_t coll, uint32_t max_rows,
		struct evbuffer *out, char why[MERGE_WHY]);

/* A RowDescription body into cols (at most cap of them). false: malformed. */
bool merge_read_row_description(const uint8_t *body, size_t len, struct merge_column *cols, int cap, int *n_cols);

#endif
