/* SPDX-License-Identifier: MIT */
/*
 * ryw: read-your-writes by WAL position, the pure part (include/ryw.h).
 * Below route_pick.c (which judges the servers of a shard with it) and
 * client.c (which keeps a client's marks through it); calls nothing of
 * pgcat's.
 */
#include "ryw.h"
#include "hexdigit.h"
#include "proto.h"

#include <stdlib.h>
#include <string.h>

/* One hex number of 1 to 8 digits from s[*i], up to stop or the end. */
static bool read_half(const char *s, size_t len, size_t *i, char stop, uint32_t *out)
{
	uint32_t v = 0;
	size_t digits = 0;
	while (*i < len && s[*i] != stop) {
		int d = hex_digit_value((unsigned char)s[*i]);
		if (d < 0 || ++digits > 8)
			return false;
		v = v << 4 | (uint32_t)d;
		(*i)++;
	}
	*out = v;
	return digits > 0;
}

bool ryw_parse_lsn(const char *s, size_t len, uint64_t *out)
{
	size_t i = 0;
	uint32_t hi, lo;
	if (!read_half(s, len, &i, '/', &hi) || i >= len)
		return false;
	i++;   /* the '/' */
	if (!read_half(s, len, &i, '/', &lo) || i != len)
		return false;
	*out = (uint64_t)hi << 32 | lo;
	return true;
}

bool ryw_note(struct ryw **r, size_t shard, bool known, uint64_t lsn, uint64_t now_us)
{
	struct ryw *cur = *r;
	if (!cur || shard >= cur->n) {
		size_t n = shard + 1;
		struct ryw *grown = realloc(cur, sizeof *grown + n * sizeof grown->m[0]);
		if (!grown)
			return false;
		size_t had = cur ? grown->n : 0;
		memset(&grown->m[had], 0, (n - had) * sizeof grown->m[0]);
		for (size_t k = had; k < n; k++)
			grown->m[k].state = RYW_NONE;
		grown->n = n;
		*r = cur = grown;
	}
	struct ryw_mark *m = &cur->m[shard];
	if (!known) {
		/* the later write's position is beyond anything known: it is
		 * the one that counts now */
		m->state = RYW_UNKNOWN;
		m->since_us = now_us;
		return true;
	}
	/* Positions only grow on one primary; a smaller one (a failover
	 * since, a new timeline) is the present one all the same. */
	m->state = RYW_KNOWN;
	m->lsn = lsn;
	m->since_us = now_us;
	return true;
}

const struct ryw_mark *ryw_mark(const struct ryw *r, size_t shard)
{
	if (!r || shard >= r->n || r->m[shard].state == RYW_NONE)
		return NULL;
	return &r->m[shard];
}

void ryw_clear(struct ryw *r, size_t shard)
{
	if (r && shard < r->n)
		r->m[shard].state = RYW_NONE;
}

void ryw_resolve(struct ryw *r, size_t shard, uint64_t lsn)
{
	if (!r || shard >= r->n || r->m[shard].state != RYW_UNKNOWN)
		return;
	r->m[shard].state = RYW_KNOWN;
	r->m[shard].lsn = lsn;
}

void ryw_free(struct ryw **r)
{
	free(*r);
	*r = NULL;
}

enum ryw_verdict ryw_judge(uint64_t target, uint64_t fig_lsn, uint64_t fig_at_us, uint64_t now_us,
			   uint64_t max_age_us)
{
	if (fig_at_us == 0 || (now_us > fig_at_us && now_us - fig_at_us > max_age_us))
		return RYW_STALE;
	return fig_lsn >= target ? RYW_REACHED : RYW_BEHIND;
}

uint64_t ryw_max_age_us(int replica_lag_check_interval_ms)
{
	uint64_t ms = replica_lag_check_interval_ms > 0 ? (uint64_t)replica_lag_check_interval_ms * 3 : 0;
	if (ms < 1000)
		ms = 1000;
	return ms * 1000;
}

bool ryw_position_row(const uint8_t *body, size_t len, uint64_t *lsn)
{
	const char *v;
	size_t vl;
	if (len < 2 || (body[0] << 8 | body[1]) != 1 || !proto_parse_datarow_first(body, len, &v, &vl) || !v)
		return false;   /* (not one column, or NULL) */
	return ryw_parse_lsn(v, vl, lsn);
}
