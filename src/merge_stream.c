/* SPDX-License-Identifier: MIT */
/*
 * merge_stream: the streaming merge of a cross-shard read's rows
 * (include/merge.h). Each run reads the shards' rows through the caller's
 * source, as far as they came, and writes the merged rows to the client's
 * output until it is full: plain rows as each shard sends them, ORDER BY
 * as a k-way merge that takes the least of one row per shard. OFFSET and
 * LIMIT are applied across runs, and an Execute's row limit ends a run
 * with PortalSuspended, the rest left where it is (on the shards) for the
 * next Execute. Aggregates, GROUP BY and DISTINCT cannot answer before
 * every row is in: those rows are copied into blocks of the merge's own,
 * up to a bound, and merged (merge.c) once every shard ended.
 * Works on protocol messages only.
 */
#include "merge.h"
#include "merge_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "buf_msg.h"
#include "proto.h"

/* The rows kept for aggregates, GROUP BY and DISTINCT sit in blocks of
 * this size (a row larger than one gets a block of its own). */
#define BLOCK_BYTES (256u * 1024)

struct block {
	struct block *next;
	size_t used, cap;
	uint8_t data[];
};

enum stream_kind {
	STREAM_CONCAT,      /* no ORDER BY (or one shard): rows as they come */
	STREAM_SORTED,      /* ORDER BY: the least of every shard's next row */
	STREAM_AGGREGATE,   /* one row per shard, combined into one */
	STREAM_GROUPED      /* GROUP BY, DISTINCT: every row, merged by key */
};

struct merge_stream {
	struct merge_plan p;
	struct merge_column *cols;
	int n_cols;
	int n_shards;
	locale_t coll;
	enum stream_kind kind;
	struct sort_key keys[MERGE_MAX_SORT];   /* STREAM_SORTED */
	bool ended[MERGE_MAX_SHARDS];           /* the shard's rows ended */
	int cur;                                /* STREAM_CONCAT: the shard read now */
	/* One run's view of each shard's next row (STREAM_SORTED): valid
	 * until that shard's take, and only within the run (the source's
	 * buffers may move between runs). */
	struct mrow head[MERGE_MAX_SHARDS];
	bool have_head[MERGE_MAX_SHARDS];
	uint64_t skip;                          /* OFFSET rows still to skip */
	uint64_t given;                         /* rows given out, for LIMIT */
	uint64_t run_rows;                      /* rows of this Execute */
	uint32_t max_rows;                      /* its row limit (0: none) */
	bool complete;                          /* CommandComplete written */
	/* STREAM_AGGREGATE, STREAM_GROUPED: the rows kept, their index, and
	 * once every shard ended the merged rows in order */
	struct block *blocks;
	size_t block_bytes;
	size_t hold_max;
	bool over;                              /* an allocation passed hold_max */
	struct mrow *rows;
	size_t n_rows, cap_rows;
	uint64_t shard_rows[MERGE_MAX_SHARDS];
	bool collected;
	struct mrow *tmp;                       /* the index's twin, for the sorts */
	struct mrow *out;
	size_t n_out, next_out;
};

/* ---- the rows kept ---- */

static size_t index_bytes(const struct merge_stream *ms)
{
	return 2 * ms->cap_rows * sizeof(struct mrow);   /* rows, and tmp once merged */
}

size_t merge_stream_held(const struct merge_stream *ms)
{
	return ms->block_bytes + index_bytes(ms);
}

/* n bytes that stay put until the merge is freed (merge_alloc_fn); NULL
 * past the hold limit (ms->over) or without memory. */
static void *stream_alloc(void *arg, size_t n)
{
	struct merge_stream *ms = arg;
	struct block *b = ms->blocks;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > BLOCK_BYTES ? n : BLOCK_BYTES;
		if (merge_stream_held(ms) + sizeof *b + cap > ms->hold_max) {
			ms->over = true;
			return NULL;
		}
		struct block *nb = malloc(sizeof *nb + cap);
		if (!nb)
			return NULL;
		nb->used = 0;
		nb->cap = cap;
		ms->block_bytes += sizeof *nb + cap;
		if (b && cap > BLOCK_BYTES) {
			/* a large row's own block, behind the one being filled */
			nb->next = b->next;
			b->next = nb;
		} else {
			nb->next = b;
			ms->blocks = nb;
		}
		b = nb;
	}
	void *p = b->data + b->used;
	b->used += n;
	return p;
}

/* A shard's row copied and indexed. false: past the hold limit
 * (ms->over) or out of memory. */
static bool keep_row(struct merge_stream *ms, const uint8_t *row, size_t len)
{
	if (ms->n_rows == ms->cap_rows) {
		size_t cap = ms->cap_rows ? ms->cap_rows * 2 : 256;
		if (ms->block_bytes + 2 * cap * sizeof(struct mrow) > ms->hold_max) {
			ms->over = true;
			return false;
		}
		struct mrow *r = realloc(ms->rows, cap * sizeof *r);
		if (!r)
			return false;
		ms->rows = r;
		ms->cap_rows = cap;
	}
	uint8_t *copy = stream_alloc(ms, len);
	if (!copy)
		return false;
	memcpy(copy, row, len);
	ms->rows[ms->n_rows++] = (struct mrow){ copy, len };
	return true;
}

/* ---- the shards' next rows ---- */

/* Why a run stopped while looking for a row. */
enum next_result { NEXT_ROW, NEXT_WAIT, NEXT_END, NEXT_FAIL, NEXT_BAD };

/* STREAM_CONCAT: the shard being read while it has rows, else the next one
 * that has. */
static enum next_result next_concat(struct merge_stream *ms, const struct merge_source *src, struct mrow *row,
				    int *shard)
{
	bool waiting = false;
	for (int tried = 0; tried < ms->n_shards; tried++) {
		int s = ms->cur;
		if (!ms->ended[s]) {
			switch (src->peek(src->arg, s, &row->p, &row->len)) {
			case MERGE_ROW:
				*shard = s;
				return merge_row_len(row->p, row->len) == row->len ? NEXT_ROW : NEXT_BAD;
			case MERGE_END:
				ms->ended[s] = true;
				break;
			case MERGE_WAIT:
				waiting = true;
				break;
			case MERGE_FAIL:
				return NEXT_FAIL;
			}
		}
		ms->cur = (s + 1) % ms->n_shards;
	}
	return waiting ? NEXT_WAIT : NEXT_END;
}

/* STREAM_SORTED: the least of every shard's next row (ties: the lower
 * shard, so that equal keys keep shard order); every shard not ended must
 * have one. */
static enum next_result next_sorted(struct merge_stream *ms, const struct merge_source *src, struct mrow *row,
				    int *shard, char why[MERGE_WHY])
{
	int best = -1;
	for (int s = 0; s < ms->n_shards; s++) {
		if (ms->ended[s])
			continue;
		if (!ms->have_head[s]) {
			switch (src->peek(src->arg, s, &ms->head[s].p, &ms->head[s].len)) {
			case MERGE_ROW:
				if (merge_row_len(ms->head[s].p, ms->head[s].len) != ms->head[s].len)
					return NEXT_BAD;
				ms->have_head[s] = true;
				break;
			case MERGE_END:
				ms->ended[s] = true;
				continue;
			case MERGE_WAIT:
				return NEXT_WAIT;
			case MERGE_FAIL:
				return NEXT_FAIL;
			}
		}
		if (best >= 0) {
			int c;
			if (!merge_row_compare(ms->keys, ms->p.n_sort, ms->head[s].p, ms->head[s].len, ms->head[best].p,
					       ms->head[best].len, &c)) {
				snprintf(why, MERGE_WHY, "cross-shard read: a value of an ORDER BY column could not be read");
				return NEXT_BAD;
			}
			if (c >= 0)
				continue;
		}
		best = s;
	}
	if (best < 0)
		return NEXT_END;
	*row = ms->head[best];
	*shard = best;
	return NEXT_ROW;
}

static enum next_result next_row(struct merge_stream *ms, const struct merge_source *src, struct mrow *row, int *shard,
				 char why[MERGE_WHY])
{
	switch (ms->kind) {
	case STREAM_CONCAT:
		return next_concat(ms, src, row, shard);
	case STREAM_SORTED:
		return next_sorted(ms, src, row, shard, why);
	case STREAM_AGGREGATE:
	case STREAM_GROUPED:
		break;
	}
	if (ms->next_out == ms->n_out)
		return NEXT_END;
	*row = ms->out[ms->next_out];
	*shard = -1;
	return NEXT_ROW;
}

/* Is there a row after those given (whichever it is)? For an Execute's
 * row limit: PortalSuspended if so. One shard's row is enough to know. */
static enum next_result any_row(struct merge_stream *ms, const struct merge_source *src)
{
	if (ms->kind == STREAM_AGGREGATE || ms->kind == STREAM_GROUPED)
		return ms->next_out < ms->n_out ? NEXT_ROW : NEXT_END;
	bool waiting = false;
	for (int s = 0; s < ms->n_shards; s++) {
		if (ms->ended[s])
			continue;
		const uint8_t *m;
		size_t len;
		switch (src->peek(src->arg, s, &m, &len)) {
		case MERGE_ROW:
			return NEXT_ROW;
		case MERGE_END:
			ms->ended[s] = true;
			break;
		case MERGE_WAIT:
			waiting = true;
			break;
		case MERGE_FAIL:
			return NEXT_FAIL;
		}
	}
	return waiting ? NEXT_WAIT : NEXT_END;
}

static void take_row(struct merge_stream *ms, const struct merge_source *src, int shard)
{
	if (shard < 0) {
		ms->next_out++;
		return;
	}
	ms->have_head[shard] = false;
	src->take(src->arg, shard);
}

/* ---- aggregates, GROUP BY, DISTINCT: every row first ---- */

/* Every shard's rows into the merge's blocks (STREAM_GROUPED), or its one
 * row (STREAM_AGGREGATE); once all ended, the merged rows in order. */
static enum merge_status collect(struct merge_stream *ms, const struct merge_source *src, char why[MERGE_WHY])
{
	for (int s = 0; s < ms->n_shards; s++) {
		while (!ms->ended[s]) {
			const uint8_t *m;
			size_t len;
			switch (src->peek(src->arg, s, &m, &len)) {
			case MERGE_WAIT:
				return MERGE_NEED_ROWS;
			case MERGE_FAIL:
				return MERGE_SOURCE_FAILED;
			case MERGE_END:
				ms->ended[s] = true;
				continue;
			case MERGE_ROW:
				break;
			}
			if (merge_row_len(m, len) != len) {
				snprintf(why, MERGE_WHY, "cross-shard read: a shard sent a malformed row");
				return MERGE_FAILED;
			}
			if (ms->kind == STREAM_AGGREGATE && ms->shard_rows[s] > 0) {
				snprintf(why, MERGE_WHY, "cross-shard read: a shard answered an aggregate with more than one row");
				return MERGE_FAILED;
			}
			if (!keep_row(ms, m, len)) {
				if (ms->over) {
					snprintf(why, MERGE_WHY, "cross-shard read: the rows to keep exceed %zu bytes", ms->hold_max);
					return MERGE_TOO_LARGE;
				}
				snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
				return MERGE_FAILED;
			}
			ms->shard_rows[s]++;
			src->take(src->arg, s);
		}
	}
	ms->collected = true;
	if (ms->kind == STREAM_AGGREGATE) {
		for (int s = 0; s < ms->n_shards; s++) {
			if (ms->shard_rows[s] == 1 || (ms->shard_rows[s] == 0 && ms->p.has_limit && ms->p.limit == 0))
				continue;
			snprintf(why, MERGE_WHY, "cross-shard read: a shard answered an aggregate with %" PRIu64 " rows",
				 ms->shard_rows[s]);
			return MERGE_FAILED;
		}
		ms->tmp = malloc(sizeof *ms->tmp);   /* the merged row's place */
		if (!ms->tmp) {
			snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
			return MERGE_FAILED;
		}
		ms->out = ms->tmp;
		if (ms->n_rows == 0)
			return MERGE_COMPLETE;   /* LIMIT 0 */
		if (!merge_aggregate_row(&ms->p, ms->cols, ms->n_cols, ms->rows, ms->n_rows, ms->coll, stream_alloc, ms,
					 ms->out, why))
			return ms->over ? MERGE_TOO_LARGE : MERGE_FAILED;
		ms->n_out = 1;
		return MERGE_COMPLETE;
	}
	ms->tmp = malloc((ms->n_rows + 1) * sizeof *ms->tmp);
	if (!ms->tmp) {
		snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
		return MERGE_FAILED;
	}
	if (!merge_group_rows(&ms->p, ms->cols, ms->n_cols, ms->coll, ms->rows, ms->tmp, ms->n_rows, stream_alloc, ms,
			      &ms->out, &ms->n_out, why)) {
		if (ms->over) {
			snprintf(why, MERGE_WHY, "cross-shard read: the rows to keep exceed %zu bytes", ms->hold_max);
			return MERGE_TOO_LARGE;
		}
		return MERGE_FAILED;
	}
	return MERGE_COMPLETE;
}

/* ---- the stream ---- */

struct merge_stream *merge_stream_new(const struct merge_plan *p, const struct merge_column *cols, int n_cols,
				      int n_shards, locale_t coll, char why[MERGE_WHY])
{
	if (n_shards < 1 || n_shards > MERGE_MAX_SHARDS || n_cols < 0) {
		snprintf(why, MERGE_WHY, "cross-shard read: too many shards");
		return NULL;
	}
	struct merge_stream *ms = calloc(1, sizeof *ms);
	struct merge_column *cc = malloc(((size_t)n_cols + 1) * sizeof *cc);
	if (!ms || !cc) {
		free(ms);
		free(cc);
		snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
		return NULL;
	}
	if (n_cols)
		memcpy(cc, cols, (size_t)n_cols * sizeof *cc);
	ms->p = *p;
	ms->cols = cc;
	ms->n_cols = n_cols;
	ms->n_shards = n_shards;
	ms->coll = coll;
	ms->hold_max = SIZE_MAX;
	ms->skip = p->has_offset && p->offset > 0 ? (uint64_t)p->offset : 0;
	if (p->grouped || (p->distinct && !p->aggregates))
		ms->kind = STREAM_GROUPED;
	else if (p->aggregates)
		ms->kind = STREAM_AGGREGATE;
	else if (p->n_sort > 0 && n_shards > 1)
		ms->kind = STREAM_SORTED;
	else
		ms->kind = STREAM_CONCAT;
	bool ok = true;
	if ((ms->kind == STREAM_AGGREGATE || p->grouped) && n_cols != p->n_cols) {
		snprintf(why, MERGE_WHY, "cross-shard read: the shards' columns do not match the select list");
		ok = false;
	} else if (ms->kind == STREAM_SORTED) {
		ok = merge_resolve_sort_keys(p, cols, n_cols, coll, ms->keys, why);
	} else if (ms->kind == STREAM_GROUPED) {
		/* (resolved again when the groups are sorted; refused before any row is read) */
		struct sort_key keys[MERGE_MAX_SORT];
		ok = merge_resolve_sort_keys(p, cols, p->grouped ? p->n_visible : n_cols, coll, keys, why);
	}
	if (!ok) {
		merge_stream_free(ms);
		return NULL;
	}
	return ms;
}

void merge_stream_free(struct merge_stream *ms)
{
	if (!ms)
		return;
	while (ms->blocks) {
		struct block *b = ms->blocks;
		ms->blocks = b->next;
		free(b);
	}
	free(ms->rows);
	free(ms->tmp);
	free(ms->cols);
	free(ms);
}

void merge_stream_execute(struct merge_stream *ms, uint32_t max_rows)
{
	ms->max_rows = max_rows;
	ms->run_rows = 0;
}

void merge_stream_hold_limit(struct merge_stream *ms, size_t bytes)
{
	ms->hold_max = bytes;
}

static enum merge_status finish_run(struct merge_stream *ms, struct buf *out)
{
	merge_put_command_complete(out, ms->run_rows);
	ms->run_rows = 0;
	ms->complete = true;
	return MERGE_COMPLETE;
}

enum merge_status merge_stream_run(struct merge_stream *ms, const struct merge_source *src, struct buf *out,
				   size_t out_high, char why[MERGE_WHY])
{
	why[0] = '\0';
	for (int s = 0; s < ms->n_shards; s++)
		ms->have_head[s] = false;   /* (the source's buffers may have moved since the last run) */
	if (ms->complete)
		return finish_run(ms, out);   /* a portal read to its end: no more rows */
	if ((ms->kind == STREAM_AGGREGATE || ms->kind == STREAM_GROUPED) && !ms->collected) {
		enum merge_status st = collect(ms, src, why);
		if (st != MERGE_COMPLETE)
			return st;
	}
	for (;;) {
		if (ms->p.has_limit && ms->given >= (uint64_t)ms->p.limit)
			return finish_run(ms, out);
		bool lookahead = ms->max_rows > 0 && ms->run_rows >= ms->max_rows;
		if (!lookahead && buf_len(out) >= out_high)
			return MERGE_OUT_FULL;
		struct mrow row;
		int shard = -1;
		switch (lookahead ? any_row(ms, src) : next_row(ms, src, &row, &shard, why)) {
		case NEXT_ROW:
			break;
		case NEXT_WAIT:
			return MERGE_NEED_ROWS;
		case NEXT_END:
			return finish_run(ms, out);
		case NEXT_FAIL:
			return MERGE_SOURCE_FAILED;
		case NEXT_BAD:
			if (!why[0])
				snprintf(why, MERGE_WHY, "cross-shard read: a shard sent a malformed row");
			return MERGE_FAILED;
		}
		if (lookahead) {
			/* one more row exists: the Execute is suspended before it */
			buf_add_bodyless(out, PqMsg_PortalSuspended);
			ms->run_rows = 0;
			return MERGE_SUSPENDED;
		}
		if (ms->skip > 0) {
			ms->skip--;
		} else {
			buf_add(out, row.p, row.len);
			ms->run_rows++;
			ms->given++;
		}
		take_row(ms, src, shard);
	}
}

/* ---- whole results (every shard's rows at hand) ---- */

struct array_source {
	const struct merge_shard *shards;
	size_t off[MERGE_MAX_SHARDS];
};

static enum merge_next array_peek(void *arg, int shard, const uint8_t **row, size_t *len)
{
	struct array_source *a = arg;
	const struct merge_shard *s = &a->shards[shard];
	size_t off = a->off[shard];
	if (off >= s->rows_len)
		return MERGE_END;
	size_t l = merge_row_len(s->rows + off, s->rows_len - off);
	*row = s->rows + off;
	*len = l ? l : s->rows_len - off;   /* (a malformed row: the merge says so) */
	return MERGE_ROW;
}

static void array_take(void *arg, int shard)
{
	struct array_source *a = arg;
	const struct merge_shard *s = &a->shards[shard];
	size_t l = merge_row_len(s->rows + a->off[shard], s->rows_len - a->off[shard]);
	a->off[shard] += l ? l : s->rows_len - a->off[shard];
}

bool merge_rows(const struct merge_plan *p, const struct merge_column *cols, int n_cols,
		const struct merge_shard *shards, size_t n_shards, locale_t coll, uint32_t max_rows,
		struct buf *out, char why[MERGE_WHY])
{
	why[0] = '\0';
	struct merge_stream *ms = merge_stream_new(p, cols, n_cols, (int)n_shards, coll, why);
	struct buf *tmp = buf_new(BUF_SMALL);
	bool ok = false;
	if (ms && tmp) {
		struct array_source a = { shards, { 0 } };
		struct merge_source src = { array_peek, array_take, &a };
		merge_stream_execute(ms, max_rows);
		enum merge_status st = merge_stream_run(ms, &src, tmp, SIZE_MAX, why);
		ok = st == MERGE_COMPLETE || st == MERGE_SUSPENDED;
		if (ok)
			buf_add_buf(out, tmp);
	} else if (!why[0]) {
		snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
	}
	if (tmp)
		buf_free(tmp);
	merge_stream_free(ms);
	return ok;
}
