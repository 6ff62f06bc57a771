/* SPDX-License-Identifier: MIT */
/*
 * merge: the rows and values of a cross-shard read's merge
 * (include/merge.h): the RowDescription read, a DataRow's columns, rows
 * compared by the ORDER BY keys, aggregates combined (count and sum
 * added, min and max compared, avg from the merged sum and count), and
 * the groups of GROUP BY and DISTINCT built out of every shard's rows.
 * How the rows are read as they come, and OFFSET, LIMIT and an Execute's
 * row limit, are merge_stream.c's; how the query was read is
 * merge_plan.c's. Works on protocol messages only.
 */
#include "merge.h"
#include "merge_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "pgvalue.h"
#include "proto.h"

/* ------------------------------------------------------------------ */
/* The rows                                                              */

bool merge_read_row_description(const uint8_t *body, size_t len, struct merge_column *cols, int cap, int *n_cols)
{
	if (len < 2)
		return false;
	int n = (int)(((unsigned)body[0] << 8) | body[1]);
	if (n > cap)
		return false;
	size_t off = 2;
	for (int i = 0; i < n; i++) {
		const char *name;
		if (!proto_read_cstring(body, len, &off, &name) || len - off < 18)
			return false;
		snprintf(cols[i].name, sizeof cols[i].name, "%s", name);
		cols[i].type_oid = proto_get_u32(body + off + 6);
		cols[i].format = (int16_t)(((unsigned)body[off + 16] << 8) | body[off + 17]);
		off += 18;
	}
	*n_cols = n;
	return off == len;
}

bool merge_row_value(const uint8_t *m, size_t mlen, int i, const uint8_t **v, int32_t *vlen)
{
	if (mlen < 7)
		return false;
	int n = (int)(((unsigned)m[5] << 8) | m[6]);
	if (i >= n)
		return false;
	size_t off = 7;
	for (int k = 0;; k++) {
		if (mlen - off < 4)
			return false;
		int32_t l = (int32_t)proto_get_u32(m + off);
		off += 4;
		if (l < -1 || (l > 0 && (size_t)l > mlen - off))
			return false;
		if (k == i) {
			*v = m + off;
			*vlen = l;
			return true;
		}
		if (l > 0)
			off += (size_t)l;
	}
}

size_t merge_row_len(const uint8_t *m, size_t avail)
{
	if (avail < 7 || m[0] != PqMsg_DataRow)
		return 0;
	uint32_t l = proto_get_u32(m + 1);
	if (l < 6 || (size_t)l + 1 > avail)
		return 0;
	return (size_t)l + 1;
}

bool merge_row_compare(const struct sort_key *keys, int n, const uint8_t *a, size_t alen, const uint8_t *b,
			size_t blen, int *out)
{
	for (int i = 0; i < n; i++) {
		const struct sort_key *k = &keys[i];
		const uint8_t *va, *vb;
		int32_t la, lb;
		if (!merge_row_value(a, alen, k->col, &va, &la) || !merge_row_value(b, blen, k->col, &vb, &lb))
			return false;
		int c;
		if (la < 0 || lb < 0) {
			if (la < 0 && lb < 0)
				continue;
			/* NULL against a value: where NULLS FIRST/LAST puts it */
			c = la < 0 ? (k->nulls_first ? -1 : 1) : (k->nulls_first ? 1 : -1);
			*out = c;
			return true;
		}
		if (!pgvalue_compare(k->oid, k->format, va, (size_t)la, vb, (size_t)lb, k->coll, &c))
			return false;
		if (c != 0) {
			*out = k->desc ? -c : c;
			return true;
		}
	}
	*out = 0;
	return true;
}

void merge_put_command_complete(struct buf *out, uint64_t n)
{
	char tag[32];
	int tl = snprintf(tag, sizeof tag, "SELECT %" PRIu64, n);
	uint8_t h[5] = { PqMsg_CommandComplete };
	proto_put_u32(h + 1, (uint32_t)(4 + tl + 1));
	buf_add(out, h, 5);
	buf_add(out, tag, (size_t)tl + 1);
}

static bool type_name_fail(char why[MERGE_WHY], const char *what, const struct merge_column *c)
{
	snprintf(why, MERGE_WHY, "cross-shard read: cannot %s column \"%s\" (type oid %u, %s format) across shards",
		 what, c->name, c->type_oid, c->format ? "binary" : "text");
	return false;
}

/* A value of a merged row: computed into buf (sums, averages), or one of
 * the shards' own values, pointed to (min, max, constants, GROUP BY keys;
 * the shards' rows outlive the merge). */
struct agg_value {
	bool is_null;
	size_t len;
	const uint8_t *ref;        /* NULL: the value is in buf */
	uint8_t buf[PGVALUE_NUMERIC_MAX];
};

static void agg_set(struct agg_value *a, const uint8_t *v, int32_t l)
{
	a->is_null = l < 0;
	a->len = l < 0 ? 0 : (size_t)l;
	a->ref = v;
}

static const uint8_t *agg_bytes(const struct agg_value *a) { return a->ref ? a->ref : a->buf; }

/* Combines rows (one per shard, or one group's) column by column into
 * acc[n_cols]: count and sum added, min and max compared, avg from the
 * merged sum and count, constants and GROUP BY keys taken from the first. */
static bool combine_rows(const struct merge_plan *p, const struct merge_column *cols, int n_cols,
			 const struct mrow *rows, size_t n, locale_t coll, struct agg_value *acc, char why[MERGE_WHY])
{
	for (int c = 0; c < n_cols; c++) {
		const struct merge_column *col = &cols[c];
		enum merge_agg kind = (enum merge_agg)p->agg[c];
		bool adds = kind == MERGE_AGG_COUNT || kind == MERGE_AGG_SUM;
		if (adds && !pgvalue_can_add(col->type_oid, col->format))
			return type_name_fail(why, "add", col);
		if ((kind == MERGE_AGG_MIN || kind == MERGE_AGG_MAX) && !pgvalue_can_compare(col->type_oid, col->format))
			return type_name_fail(why, "compare", col);
		acc[c].is_null = true;
		acc[c].len = 0;
		acc[c].ref = NULL;
		for (size_t s = 0; s < n; s++) {
			const uint8_t *v;
			int32_t l;
			if (!merge_row_value(rows[s].p, rows[s].len, c, &v, &l) || (adds && l > 0 && (size_t)l > sizeof acc[c].buf)) {
				snprintf(why, MERGE_WHY, "cross-shard read: a shard sent a malformed row");
				return false;
			}
			if (kind == MERGE_AGG_AVG)
				continue;   /* from the merged sum and count below */
			if (s == 0 || kind == MERGE_AGG_CONST || kind == MERGE_AGG_KEY) {
				if (s == 0)
					agg_set(&acc[c], v, l);
				continue;
			}
			if (l < 0)
				continue;   /* sum/min/max skip NULL; count is never NULL */
			if (acc[c].is_null) {
				agg_set(&acc[c], v, l);
				continue;
			}
			if (adds) {
				uint8_t sum[PGVALUE_NUMERIC_MAX];
				size_t sl;
				if (!pgvalue_add(col->type_oid, col->format, agg_bytes(&acc[c]), acc[c].len, v, (size_t)l, sum,
						 sizeof sum, &sl)) {
					snprintf(why, MERGE_WHY, "cross-shard read: the sum of column \"%s\" could not be computed",
						 col->name);
					return false;
				}
				memcpy(acc[c].buf, sum, sl);
				acc[c].len = sl;
				acc[c].ref = NULL;
			} else {
				int cmp;
				if (!pgvalue_compare(col->type_oid, col->format, v, (size_t)l, agg_bytes(&acc[c]), acc[c].len,
						     coll, &cmp)) {
					snprintf(why, MERGE_WHY, "cross-shard read: a value of column \"%s\" could not be read",
						 col->name);
					return false;
				}
				if ((kind == MERGE_AGG_MIN && cmp < 0) || (kind == MERGE_AGG_MAX && cmp > 0))
					agg_set(&acc[c], v, l);
			}
		}
	}
	for (int c = 0; c < n_cols; c++) {
		if (p->agg[c] != MERGE_AGG_AVG)
			continue;
		const struct agg_value *sum = &acc[p->avg_sum[c]], *cnt = &acc[p->avg_count[c]];
		const struct merge_column *sc = &cols[p->avg_sum[c]], *cc = &cols[p->avg_count[c]];
		const uint8_t *cb = agg_bytes(cnt);
		int64_t count = 0;
		if (cnt->is_null) {
			snprintf(why, MERGE_WHY, "cross-shard read: count() was NULL");
			return false;
		}
		if (cc->format == 1 && cnt->len == 8) {
			uint64_t u = 0;
			for (int i = 0; i < 8; i++)
				u = u << 8 | cb[i];
			count = (int64_t)u;
		} else if (cc->format == 0 && cnt->len < 24) {
			char t[24];
			memcpy(t, cb, cnt->len);
			t[cnt->len] = '\0';
			count = strtoll(t, NULL, 10);
		} else {
			snprintf(why, MERGE_WHY, "cross-shard read: count() could not be read");
			return false;
		}
		acc[c].ref = NULL;
		if (count == 0 || sum->is_null) {
			acc[c].is_null = true;   /* avg of no rows */
			acc[c].len = 0;
			continue;
		}
		if (!pgvalue_avg(cols[c].type_oid, cols[c].format, sc->type_oid, sc->format, agg_bytes(sum), sum->len,
				 count, acc[c].buf, sizeof acc[c].buf, &acc[c].len))
			return type_name_fail(why, "average", &cols[c]);
		acc[c].is_null = false;
	}
	return true;
}

/* The merged row as a DataRow of n_cols columns, in room made with alloc. */
static bool emit_row(const struct agg_value *acc, int n_cols, merge_alloc_fn alloc, void *arg, struct mrow *out)
{
	size_t total = 4 + 2;
	for (int c = 0; c < n_cols; c++)
		total += 4 + acc[c].len;
	uint8_t *m = alloc(arg, total + 1);
	if (!m)
		return false;
	m[0] = PqMsg_DataRow;
	proto_put_u32(m + 1, (uint32_t)total);
	m[5] = (uint8_t)(n_cols >> 8);
	m[6] = (uint8_t)n_cols;
	size_t off = 7;
	for (int c = 0; c < n_cols; c++) {
		proto_put_u32(m + off, acc[c].is_null ? UINT32_MAX : (uint32_t)acc[c].len);
		off += 4;
		if (!acc[c].is_null && acc[c].len) {
			memcpy(m + off, agg_bytes(&acc[c]), acc[c].len);
			off += acc[c].len;
		}
	}
	*out = (struct mrow){ m, total + 1 };
	return true;
}

bool merge_aggregate_row(const struct merge_plan *p, const struct merge_column *cols, int n_cols,
			 const struct mrow *rows, size_t n, locale_t coll, merge_alloc_fn alloc, void *arg,
			 struct mrow *out, char why[MERGE_WHY])
{
	struct agg_value *acc = calloc((size_t)n_cols, sizeof *acc);
	if (!acc) {
		snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
		return false;
	}
	bool ok = combine_rows(p, cols, n_cols, rows, n, coll, acc, why);
	if (ok && !emit_row(acc, p->n_visible, alloc, arg, out)) {   /* without the hidden sum/count columns */
		snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
		ok = false;
	}
	free(acc);
	return ok;
}

/* Ordering rows for GROUP BY and DISTINCT, and for ORDER BY after them. */
struct order {
	const struct merge_column *cols;
	const int *key_cols;       /* grouping: these columns, compared for equality */
	int n_keys;
	const struct sort_key *sort;   /* or ORDER BY: these keys */
	int n_sort;
	bool failed;               /* a value could not be read or compared */
};

/* Values that are equal though spelled differently (1.0 and 1.00, -0 and
 * 0) are compared as numbers; any other type by its bytes: every leg runs
 * with the same session settings, so equal values are spelled alike. NULLs
 * are one group, first. */
static int key_compare(struct order *o, const struct mrow *a, const struct mrow *b)
{
	for (int i = 0; i < o->n_keys; i++) {
		int c = o->key_cols[i];
		const struct merge_column *col = &o->cols[c];
		const uint8_t *va, *vb;
		int32_t la, lb;
		if (!merge_row_value(a->p, a->len, c, &va, &la) || !merge_row_value(b->p, b->len, c, &vb, &lb)) {
			o->failed = true;
			return 0;
		}
		int r;
		if (la < 0 || lb < 0) {
			r = (lb < 0) - (la < 0);
		} else if ((col->type_oid == 700 || col->type_oid == 701 || col->type_oid == 1700) &&
			   pgvalue_can_compare(col->type_oid, col->format)) {
			if (!pgvalue_compare(col->type_oid, col->format, va, (size_t)la, vb, (size_t)lb, (locale_t)0, &r)) {
				o->failed = true;
				return 0;
			}
		} else {
			size_t n = la < lb ? (size_t)la : (size_t)lb;
			r = n ? memcmp(va, vb, n) : 0;
			if (r == 0)
				r = (la > lb) - (la < lb);
		}
		if (r != 0)
			return r;
	}
	return 0;
}

static int sort_compare(struct order *o, const struct mrow *a, const struct mrow *b)
{
	int c;
	if (!merge_row_compare(o->sort, o->n_sort, a->p, a->len, b->p, b->len, &c)) {
		o->failed = true;
		return 0;
	}
	return c;
}

/* A stable merge sort of rows[0..n) (tmp: room for n more). */
static void sort_rows(struct mrow *rows, struct mrow *tmp, size_t n,
		      int (*cmp)(struct order *, const struct mrow *, const struct mrow *), struct order *o)
{
	for (size_t width = 1; width < n && !o->failed; width *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * width) {
			size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
			size_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				tmp[k++] = cmp(o, &rows[j], &rows[i]) < 0 ? rows[j++] : rows[i++];
			while (i < mid)
				tmp[k++] = rows[i++];
			while (j < hi)
				tmp[k++] = rows[j++];
		}
		memcpy(rows, tmp, n * sizeof *rows);
	}
}

bool merge_resolve_sort_keys(const struct merge_plan *p, const struct merge_column *cols, int n_cols, locale_t coll,
			      struct sort_key keys[MERGE_MAX_SORT], char why[MERGE_WHY])
{
	for (int i = 0; i < p->n_sort; i++) {
		const struct merge_sort *s = &p->sort[i];
		int col = -1;
		if (s->position > 0) {
			if (s->position <= n_cols)
				col = s->position - 1;
		} else {
			for (int c = 0; c < n_cols; c++) {
				if (strcmp(cols[c].name, s->name) != 0)
					continue;
				if (col >= 0) {
					snprintf(why, MERGE_WHY, "cross-shard read: ORDER BY \"%s\" is ambiguous among the output columns",
						 s->name);
					return false;
				}
				col = c;
			}
		}
		if (col < 0) {
			snprintf(why, MERGE_WHY,
				 "cross-shard read: ORDER BY %s%s%s is not an output column; add it to the select list to merge "
				 "the shards' rows", s->position ? "" : "\"", s->position ? "a position" : s->name,
				 s->position ? "" : "\"");
			return false;
		}
		if (!pgvalue_can_compare(cols[col].type_oid, cols[col].format))
			return type_name_fail(why, "order by", &cols[col]);
		keys[i] = (struct sort_key){ col, s->desc, s->nulls_first, cols[col].type_oid, cols[col].format,
					     s->bytewise ? (locale_t)0 : coll };
	}
	return true;
}


bool merge_group_rows(const struct merge_plan *p, const struct merge_column *cols, int n_cols, locale_t coll,
		      struct mrow *rows, struct mrow *tmp, size_t n, merge_alloc_fn alloc, void *arg,
		      struct mrow **out, size_t *n_out, char why[MERGE_WHY])
{
	struct sort_key sort[MERGE_MAX_SORT];
	if (!merge_resolve_sort_keys(p, cols, p->grouped ? p->n_visible : n_cols, coll, sort, why))
		return false;
	int *key_cols = malloc(((size_t)n_cols + 1) * sizeof *key_cols);
	struct agg_value *acc = p->grouped ? calloc((size_t)n_cols, sizeof *acc) : NULL;
	bool ok = false;
	if (!key_cols || (p->grouped && !acc)) {
		snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
		goto out;
	}
	int n_keys = 0;
	for (int c = 0; c < n_cols; c++)
		if (!p->grouped || p->agg[c] == MERGE_AGG_KEY)
			key_cols[n_keys++] = c;
	struct order o = { cols, key_cols, n_keys, sort, p->n_sort, false };
	sort_rows(rows, tmp, n, key_compare, &o);
	if (o.failed)
		goto bad_row;
	/* One row per run of equal keys, into tmp. */
	size_t made = 0;
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;
		while (j < n && key_compare(&o, &rows[i], &rows[j]) == 0)
			j++;
		if (o.failed)
			goto bad_row;
		if (p->grouped) {
			if (!combine_rows(p, cols, n_cols, rows + i, j - i, coll, acc, why))
				goto out;
			if (!emit_row(acc, p->n_visible, alloc, arg, &tmp[made])) {   /* (hidden columns dropped) */
				snprintf(why, MERGE_WHY, "cross-shard read: out of memory");
				goto out;
			}
		} else {
			tmp[made] = rows[i];
		}
		made++;
		i = j;
	}
	if (p->n_sort > 0) {
		sort_rows(tmp, rows, made, sort_compare, &o);
		if (o.failed) {
			snprintf(why, MERGE_WHY, "cross-shard read: a value of an ORDER BY column could not be read");
			goto out;
		}
	}
	*out = tmp;
	*n_out = made;
	ok = true;
	goto out;
bad_row:
	snprintf(why, MERGE_WHY, "cross-shard read: a shard sent a malformed row");
out:
	free(key_cols);
	free(acc);
	return ok;
}
