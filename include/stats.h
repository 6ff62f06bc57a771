/* SPDX-License-Identifier: MIT */
/*
 * stats: the counters behind SHOW STATS, SHOW POOLS and /metrics. Plain
 * arrays of uint64 (times in microseconds), one writer each, so they can
 * live in a shared-memory slot per worker and be summed by readers.
 */
#ifndef PGCAT_STATS_H
#define PGCAT_STATS_H

#include <stdint.h>

enum stat_counter {
	STAT_SERVER_ASSIGNMENT,
	STAT_XACT,
	STAT_QUERY,
	STAT_RECEIVED,
	STAT_SENT,
	STAT_XACT_TIME,
	STAT_QUERY_TIME,
	STAT_WAIT_TIME,
	STAT_CLIENT_PARSE,
	STAT_SERVER_PARSE,
	STAT_BIND,
	STAT_CLIENT_LOGIN,
	STAT_PREPARED_HITS,
	STAT_PREPARED_MISSES,
	/* Unnamed Parses of statements a server connection already held
	 * (prepare_unnamed), and those it had to parse. */
	STAT_UNNAMED_HITS,
	STAT_UNNAMED_MISSES,
	STAT__COUNT
};

/* Latency histograms for /metrics: query, transaction, wait for a server. */
enum stat_hist { HIST_QUERY, HIST_XACT, HIST_WAIT, HIST__COUNT };
#define STATS_HIST_BOUNDS 16
/* Upper bounds in µs; one more bucket (+Inf) after the last. */
static const uint64_t stats_hist_bounds_us[STATS_HIST_BOUNDS] = {
	100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
	1000000, 2500000, 5000000, 10000000,
};

struct stats {
	uint64_t v[STAT__COUNT];
	uint64_t hist[HIST__COUNT][STATS_HIST_BOUNDS + 1];   /* non-cumulative counts */
	uint64_t hist_sum_us[HIST__COUNT];
};

static inline void stats_add(struct stats *s, enum stat_counter k, uint64_t n) { s->v[k] += n; }

static inline void stats_observe(struct stats *s, enum stat_hist h, uint64_t us)
{
	int i = 0;
	while (i < STATS_HIST_BOUNDS && us > stats_hist_bounds_us[i])
		i++;
	s->hist[h][i]++;
	s->hist_sum_us[h] += us;
}

static inline void stats_sum(struct stats *into, const struct stats *from)
{
	for (int i = 0; i < STAT__COUNT; i++)
		into->v[i] += from->v[i];
	for (int h = 0; h < HIST__COUNT; h++) {
		for (int i = 0; i <= STATS_HIST_BOUNDS; i++)
			into->hist[h][i] += from->hist[h][i];
		into->hist_sum_us[h] += from->hist_sum_us[h];
	}
}

#endif
