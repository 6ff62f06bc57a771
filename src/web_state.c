/* SPDX-License-Identifier: MIT */
/*
 * web_state: what the web page shows (GET /api/state), as one JSON
 * object: pools (SHOW POOLS' gauges and SHOW STATS' counters, summed over
 * the workers from the shared segment), latency histograms, shards with
 * their replication lag, bans, errors by SQLSTATE, top queries, and the
 * clients and server connections of every worker. Reads only; the one
 * thing it writes is a listing request to the other workers (at most one
 * a second), whose answer the next poll reads: it never waits for one.
 *
 * Every string goes out JSON-escaped and as valid UTF-8 (names come from
 * clients); '<', '>' and '&' are escaped too, so no text can close a tag
 * wherever the JSON ends up. The page puts it in the DOM as text only.
 */
#include "web.h"

#include <event2/buffer.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admin_show.h"
#include "bans.h"
#include "config.h"
#include "context.h"
#include "errstats.h"
#include "pool.h"
#include "qstats.h"
#include "shm.h"
#include "stats.h"
#include "utf8.h"
#include "version.h"

#define WEB_LIST_MAX 1000            /* clients, and servers, listed at most */
#define WEB_DUMP_EVERY_US 1000000    /* a new listing request at most this often */

/* ---- JSON ---- */

static void json_strn(struct evbuffer *out, const char *s, size_t len)
{
	evbuffer_add(out, "\"", 1);
	size_t i = 0;
	while (i < len) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c == 0x7f) {
			if (c == '"' || c == '\\')
				evbuffer_add_printf(out, "\\%c", c);
			else
				evbuffer_add_printf(out, "\\u%04x", c);
			i++;
			continue;
		}
		/* utf8_char_len reads up to 4 bytes: only where they are ours. */
		size_t n = 0;
		if (c < 0x80) {
			n = 1;
		} else if (len - i >= 4) {
			n = utf8_char_len((const unsigned char *)s + i);
		} else {
			unsigned char tmp[4] = { 0, 0, 0, 0 };
			memcpy(tmp, s + i, len - i);
			n = utf8_char_len(tmp);
			if (n > len - i)
				n = 0;
		}
		if (n)
			evbuffer_add(out, s + i, n);
		else
			evbuffer_add(out, "\\ufffd", 6);
		i += n ? n : 1;
	}
	evbuffer_add(out, "\"", 1);
}

static void json_str(struct evbuffer *out, const char *s)
{
	if (s)
		json_strn(out, s, strlen(s));
	else
		evbuffer_add(out, "null", 4);
}

/* ,"key": */
static void key(struct evbuffer *out, bool first, const char *k)
{
	evbuffer_add_printf(out, "%s\"%s\":", first ? "" : ",", k);
}

static void kv_str(struct evbuffer *out, bool first, const char *k, const char *v)
{
	key(out, first, k);
	json_str(out, v);
}

/* ,"k": and a string of at most len bytes (one not NUL-terminated). */
static void json_key_strn(struct evbuffer *out, const char *k, const char *v, size_t len)
{
	key(out, false, k);
	json_strn(out, v, len);
}

static void kv_i(struct evbuffer *out, bool first, const char *k, int64_t v)
{
	key(out, first, k);
	evbuffer_add_printf(out, "%" PRId64, v);
}

static void kv_u(struct evbuffer *out, bool first, const char *k, uint64_t v)
{
	key(out, first, k);
	evbuffer_add_printf(out, "%" PRIu64, v);
}

/* ---- pools ---- */

static void hist_json(struct evbuffer *out, const struct stats *st, enum stat_hist h)
{
	evbuffer_add(out, "[", 1);
	for (int i = 0; i <= STATS_HIST_BOUNDS; i++)
		evbuffer_add_printf(out, "%s%" PRIu64, i ? "," : "", st->hist[h][i]);
	evbuffer_add(out, "]", 1);
}

static void pools_json(struct worker *w, struct evbuffer *out)
{
	static const struct {
		const char *name;
		enum stat_counter k;
	} counters[] = {
		{ "xacts", STAT_XACT },
		{ "queries", STAT_QUERY },
		{ "received", STAT_RECEIVED },
		{ "sent", STAT_SENT },
		{ "xact_time_us", STAT_XACT_TIME },
		{ "query_time_us", STAT_QUERY_TIME },
		{ "wait_time_us", STAT_WAIT_TIME },
		{ "server_assignments", STAT_SERVER_ASSIGNMENT },
		{ "client_logins", STAT_CLIENT_LOGIN },
	};
	static const char *const hist_names[HIST__COUNT] = { [HIST_QUERY] = "query", [HIST_XACT] = "xact",
							      [HIST_WAIT] = "wait" };
	/* This worker's figures fresh; the others' as of their last tick. */
	w->cmds->publish_pools(w);
	evbuffer_add(out, "\"pools\":[", 9);
	bool first = true;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_serves_itself(w, p))
			continue;   /* its clients are the forced user's pool's, as in SHOW POOLS */
		int32_t cl_active, cl_waiting, sv_active, sv_idle, sv_used, sv_login;
		int64_t maxwait;
		shm_gauges_total(w->shm, p->shm_slot, &cl_active, &cl_waiting, &sv_active, &sv_idle, &sv_used, &sv_login,
				 &maxwait);
		struct stats st;
		shm_stats_total(w->shm, p->shm_slot, &st);
		evbuffer_add(out, first ? "{" : ",{", first ? 1 : 2);
		first = false;
		kv_str(out, true, "name", p->name);
		kv_str(out, false, "user", p->user);
		kv_str(out, false, "mode", config_pool_mode_name(p->mode));
		kv_i(out, false, "paused", p->paused);
		kv_i(out, false, "disabled", p->disabled);
		kv_i(out, false, "cl_active", cl_active);
		kv_i(out, false, "cl_waiting", cl_waiting);
		kv_i(out, false, "sv_active", sv_active);
		kv_i(out, false, "sv_idle", sv_idle);
		kv_i(out, false, "sv_used", sv_used);
		kv_i(out, false, "sv_login", sv_login);
		kv_i(out, false, "sv_reserve", pool_reserve_in_use(p));
		kv_i(out, false, "maxwait_us", maxwait);
		for (size_t k = 0; k < sizeof counters / sizeof *counters; k++)
			kv_u(out, false, counters[k].name, st.v[counters[k].k]);
		/* non-cumulative counts per bucket of hist_bounds_us, +Inf last */
		key(out, false, "hist");
		evbuffer_add(out, "{", 1);
		for (int h = 0; h < HIST__COUNT; h++) {
			key(out, h == 0, hist_names[h]);
			hist_json(out, &st, (enum stat_hist)h);
		}
		evbuffer_add(out, "}", 1);
		key(out, false, "hist_sum_us");
		evbuffer_add_printf(out, "{\"query\":%" PRIu64 ",\"xact\":%" PRIu64 ",\"wait\":%" PRIu64 "}}",
				    st.hist_sum_us[HIST_QUERY], st.hist_sum_us[HIST_XACT], st.hist_sum_us[HIST_WAIT]);
	}
	evbuffer_add(out, "]", 1);
	evbuffer_add(out, ",\"hist_bounds_us\":[", 19);
	for (int i = 0; i < STATS_HIST_BOUNDS; i++)
		evbuffer_add_printf(out, "%s%" PRIu64, i ? "," : "", stats_hist_bounds_us[i]);
	evbuffer_add(out, "]", 1);
}

/* ---- shards and bans ---- */

static void shards_json(struct worker *w, const struct bans *bans, int64_t now, struct evbuffer *out)
{
	evbuffer_add(out, ",\"shards\":[", 11);
	bool first = true;
	struct list_node *pos, *tmp, *qp, *qt;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_first_of_name(w, false, p) || p->removed)
			continue;
		for (size_t i = 0; i < p->n_targets; i++) {
			const struct srvpool *sp = p->targets[i];
			/* Transactions there over every user's pool of the name
			 * and every worker, as SHOW SHARDS counts them. */
			uint64_t xacts = 0;
			LIST_FOREACH_SAFE(qp, qt, &w->pools) {
				struct pool *q = LIST_OWNER(qp, struct pool, node);
				if (strcmp(q->name, p->name) != 0 || i >= q->n_targets || q->targets[i]->shm_target < 0)
					continue;
				uint64_t x, rt[SHM_ROUTE_VIA];
				shm_target_counts_total(w->shm, q->targets[i]->shm_target, &x, rt);
				xacts += x;
			}
			const struct ban *b = bans_get(bans, sp->host, sp->port, now);
			int64_t lag_bytes = -1, lag_ms = -1;
			if (sp->shm_target >= 0)
				shm_lag_get(w->shm, sp->shm_target, &lag_bytes, &lag_ms);
			evbuffer_add(out, first ? "{" : ",{", first ? 1 : 2);
			first = false;
			kv_str(out, true, "pool", p->name);
			kv_i(out, false, "shard", sp->shard);
			kv_str(out, false, "host", sp->host);
			kv_i(out, false, "port", sp->port);
			kv_str(out, false, "role", config_server_role_name(sp->role));
			kv_i(out, false, "banned", b != NULL);
			if (b) {
				json_key_strn(out, "ban_reason", b->reason, strnlen(b->reason, sizeof b->reason));
			} else {
				kv_str(out, false, "ban_reason", NULL);
			}
			kv_u(out, false, "xacts", xacts);
			/* null: a primary, or not measured (yet) */
			key(out, false, "lag_bytes");
			evbuffer_add_printf(out, lag_bytes >= 0 ? "%" PRId64 : "null", lag_bytes);
			key(out, false, "lag_ms");
			evbuffer_add_printf(out, lag_ms >= 0 ? "%" PRId64 : "null", lag_ms);
			evbuffer_add(out, "}", 1);
		}
	}
	evbuffer_add(out, "]", 1);
}

static void bans_json(const struct bans *bans, int64_t now, struct evbuffer *out)
{
	evbuffer_add(out, ",\"bans\":[", 9);
	bool first = true;
	for (int i = 0; i < BANS_MAX; i++) {
		const struct ban *b = &bans->items[i];
		if (!b->used || b->until <= now)
			continue;
		evbuffer_add(out, first ? "{" : ",{", first ? 1 : 2);
		first = false;
		char host[sizeof b->host + 1], reason[sizeof b->reason + 1];
		/* (copied with a NUL: the table's strings are bounded, not trusted) */
		memcpy(host, b->host, sizeof b->host);
		host[sizeof b->host] = '\0';
		memcpy(reason, b->reason, sizeof b->reason);
		reason[sizeof b->reason] = '\0';
		kv_str(out, true, "host", host);
		kv_i(out, false, "port", b->port);
		kv_str(out, false, "reason", reason);
		kv_str(out, false, "source", b->source == BAN_SOURCE_ADMIN ? "admin" : "auto");
		kv_i(out, false, "banned_at", b->banned_at);
		kv_i(out, false, "remaining_s", b->until - now);
		evbuffer_add(out, "}", 1);
	}
	evbuffer_add(out, "]", 1);
}

/* ---- errors by SQLSTATE ---- */

static void errors_json(struct worker *w, struct evbuffer *out)
{
	struct errstats_row *rows = NULL;
	uint64_t untracked = 0;
	size_t n = shm_errstats_all(w->shm, &rows, &untracked);
	evbuffer_add(out, ",\"errors\":[", 11);
	for (size_t i = 0; i < n; i++) {
		evbuffer_add(out, i ? ",{" : "{", i ? 2 : 1);
		kv_str(out, true, "pool", rows[i].database);
		kv_str(out, false, "user", rows[i].user);
		kv_str(out, false, "sqlstate", rows[i].sqlstate);
		kv_str(out, false, "source", errstats_source_name(rows[i].source));
		kv_u(out, false, "count", rows[i].count);
		evbuffer_add(out, "}", 1);
	}
	evbuffer_add(out, "]", 1);
	kv_u(out, false, "errors_untracked", untracked);
	free(rows);
}

/* ---- top queries ---- */

/* Objects of pool, user, fingerprint, query (text), calls, rows, errors,
 * mean_us, p50_us, p95_us, p99_us and wait_p99_us, the busiest first:
 * the top WEB_QUERIES_TOP shapes by total execution time (qstats.h; none
 * while no pool has query_stats on). */
#define WEB_QUERIES_TOP 20
static void queries_json(struct worker *w, struct evbuffer *out)
{
	struct qstats_row *rows;
	size_t top = shm_qstats_top(w->shm, WEB_QUERIES_TOP, &rows);
	evbuffer_add(out, "[", 1);
	for (size_t i = 0; i < top; i++) {
		const struct qstats_row *r = &rows[i];
		const struct shm_pool_entry *pe = &w->shm->h->pools[r->pool];
		char fp[17];
		snprintf(fp, sizeof fp, "%016" PRIx64, r->fingerprint);
		evbuffer_add(out, i ? ",{" : "{", i ? 2 : 1);
		kv_str(out, true, "pool", pe->name);
		kv_str(out, false, "user", pe->user);
		kv_str(out, false, "fingerprint", fp);
		kv_str(out, false, "query", r->text);
		kv_u(out, false, "calls", r->calls);
		kv_u(out, false, "rows", r->rows);
		kv_u(out, false, "errors", r->errors);
		kv_u(out, false, "mean_us", r->calls ? r->exec_us / r->calls : 0);
		kv_u(out, false, "p50_us", qstats_quantile(r->exec_hist, 0.50));
		kv_u(out, false, "p95_us", qstats_quantile(r->exec_hist, 0.95));
		kv_u(out, false, "p99_us", qstats_quantile(r->exec_hist, 0.99));
		kv_u(out, false, "wait_p99_us", qstats_quantile(r->wait_hist, 0.99));
		evbuffer_add(out, "}", 1);
	}
	evbuffer_add(out, "]", 1);
	free(rows);
}

/* ---- clients and servers, from every worker ---- */

/* The columns of SHOW CLIENTS / SHOW SERVERS rows (admin_show.c's
 * CONN_COLS, in that order) that the page shows. */
enum conn_col {
	CC_TYPE, CC_USER, CC_DATABASE, CC_REPLICATION, CC_STATE, CC_ADDR, CC_PORT, CC_LOCAL_ADDR, CC_LOCAL_PORT,
	CC_CONNECT_TIME, CC_REQUEST_TIME, CC_WAIT, CC_WAIT_US, CC_CLOSE_NEEDED, CC_PTR, CC_LINK, CC_REMOTE_PID,
	CC_TLS, CC_APPLICATION_NAME, CC_PREPARED, CC_ID, CC_WORKER, CC_SHARD, CC_ROLE, CC__SHOWN
};

struct cell {
	const char *s;    /* NULL: SQL NULL */
	size_t len;
};

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* One DataRow at data[0..len): its first CC__SHOWN cells, and its whole
 * length in *used. false: not a DataRow, or one that overruns. */
static bool data_row(const uint8_t *data, size_t len, struct cell cells[CC__SHOWN], size_t *used)
{
	if (len < 7 || data[0] != 'D')
		return false;
	uint32_t mlen = be32(data + 1);
	if (mlen < 6 || mlen > len - 1)
		return false;
	size_t end = 1 + (size_t)mlen;
	unsigned ncols = (unsigned)data[5] << 8 | data[6];
	size_t off = 7;
	for (unsigned c = 0; c < ncols; c++) {
		if (end - off < 4)
			return false;
		uint32_t clen = be32(data + off);
		off += 4;
		struct cell cell = { NULL, 0 };
		if (clen != 0xffffffffu) {
			if (clen > end - off)
				return false;
			cell.s = (const char *)data + off;
			cell.len = clen;
			off += clen;
		}
		if (c < CC__SHOWN)
			cells[c] = cell;
	}
	if (ncols < CC__SHOWN)
		return false;
	*used = end;
	return true;
}

static void kv_cell(struct evbuffer *out, bool first, const char *k, const struct cell *c)
{
	key(out, first, k);
	if (c->s)
		json_strn(out, c->s, c->len);
	else
		evbuffer_add(out, "null", 4);
}

/* A cell holding an integer, as a number (null: NULL or not a number). */
static void kv_cell_num(struct evbuffer *out, const char *k, const struct cell *c)
{
	key(out, false, k);
	char buf[24];
	if (!c->s || c->len == 0 || c->len >= sizeof buf) {
		evbuffer_add(out, "null", 4);
		return;
	}
	memcpy(buf, c->s, c->len);
	buf[c->len] = '\0';
	char *end;
	long long v = strtoll(buf, &end, 10);
	if (*end)
		evbuffer_add(out, "null", 4);
	else
		evbuffer_add_printf(out, "%lld", v);
}

static size_t rows_json(const uint8_t *data, size_t len, enum shm_dump_kind kind, size_t listed,
			struct evbuffer *out)
{
	size_t off = 0, n = 0;
	struct cell c[CC__SHOWN];
	size_t used;
	while (off < len && listed + n < WEB_LIST_MAX && data_row(data + off, len - off, c, &used)) {
		off += used;
		evbuffer_add(out, listed + n ? ",{" : "{", listed + n ? 2 : 1);
		n++;
		kv_cell(out, true, "user", &c[CC_USER]);
		kv_cell(out, false, "database", &c[CC_DATABASE]);
		kv_cell(out, false, "state", &c[CC_STATE]);
		kv_cell(out, false, kind == SHM_DUMP_CLIENTS ? "addr" : "host", &c[CC_ADDR]);
		kv_cell_num(out, "port", &c[CC_PORT]);
		kv_cell(out, false, "connect_time", &c[CC_CONNECT_TIME]);
		kv_cell(out, false, "request_time", &c[CC_REQUEST_TIME]);
		kv_cell(out, false, "ptr", &c[CC_PTR]);
		kv_cell(out, false, "link", &c[CC_LINK]);
		kv_cell(out, false, "tls", &c[CC_TLS]);
		kv_cell(out, false, "application_name", &c[CC_APPLICATION_NAME]);
		kv_cell_num(out, "worker", &c[CC_WORKER]);
		kv_cell_num(out, "remote_pid", &c[CC_REMOTE_PID]);
		kv_cell_num(out, "wait_s", &c[CC_WAIT]);
		kv_cell_num(out, "wait_us", &c[CC_WAIT_US]);
		kv_cell_num(out, "shard", &c[CC_SHARD]);
		kv_cell(out, false, "role", &c[CC_ROLE]);
		evbuffer_add(out, "}", 1);
	}
	return n;
}

static bool worker_live(struct worker *w, uint32_t i)
{
	return atomic_load(&w->shm->h->workers[i].pid) > 0 && atomic_load(&w->shm->h->workers[i].ready);
}

static void list_json(struct worker *w, struct web_lists *l, enum shm_dump_kind kind, struct evbuffer *out)
{
	const char *name = admin_dump_name(kind);
	uint32_t n_workers = w->shm->h->n_workers;
	bool others = false;
	for (uint32_t i = 0; i < n_workers; i++)
		if ((int)i != w->id && worker_live(w, i))
			others = true;
	/* Ask the others afresh, at most once a second; read what they
	 * answered to the request before, never the one just posted. */
	if (others && (l->posted_us[kind] == 0 || w->now_us - l->posted_us[kind] >= WEB_DUMP_EVERY_US)) {
		l->seq_answerable[kind] = l->seq_posted[kind];
		l->seq_posted[kind] = shm_admin_post(w->shm, w->id, SHM_ADMIN_DUMP, name, NULL);
		l->posted_us[kind] = w->now_us;
	}
	/* My own rows, now, into my slot: numbered as the newest request of
	 * anyone's, so a console reading my slot for its own takes them (a
	 * listing fresher than its request is as good); 1 before any (0
	 * reads as no answer). */
	uint64_t mine = atomic_load(&w->shm->h->admin_seq);
	if (mine == 0)
		mine = 1;
	admin_dump(w, name, mine);
	evbuffer_add_printf(out, ",\"%s\":[", name);
	size_t listed = 0;
	uint32_t truncated = 0, missing = 0;
	for (uint32_t i = 0; i < n_workers; i++) {
		if ((int)i != w->id && !worker_live(w, i))
			continue;
		uint8_t *data = NULL;
		uint32_t len = 0, rows = 0, trunc = 0;
		uint64_t want = (int)i == w->id ? mine : l->seq_answerable[kind];
		if (((int)i != w->id && want == 0) ||
		    !shm_dump_read(w->shm, kind, (int)i, want, &data, &len, &rows, &trunc)) {
			missing++;
			continue;
		}
		size_t n = rows_json(data, len, kind, listed, out);
		listed += n;
		truncated += trunc + (rows > n ? rows - (uint32_t)n : 0);
		free(data);
	}
	evbuffer_add(out, "]", 1);
	evbuffer_add_printf(out, ",\"%s_partial\":{\"not_listed\":%" PRIu32 ",\"workers_missing\":%" PRIu32 "}", name,
			    truncated, missing);
}

/* ---- the whole ---- */

void web_state_render(struct worker *w, struct web_lists *lists, struct evbuffer *out)
{
	int64_t now = (int64_t)time(NULL);
	evbuffer_add(out, "{", 1);
	kv_str(out, true, "version", pgcat_version);
	kv_i(out, false, "now", now);
	/* the monotonic clock, for rates between two polls */
	kv_u(out, false, "mono_us", w->now_us);
	kv_i(out, false, "started", w->start_wall);
	int workers = 0;
	for (uint32_t i = 0; i < w->shm->h->n_workers; i++)
		if (atomic_load(&w->shm->h->workers[i].pid) > 0)
			workers++;
	kv_i(out, false, "workers", workers);
	kv_i(out, false, "client_connections", shm_clients_total(w->shm));
	evbuffer_add(out, ",", 1);
	pools_json(w, out);
	struct bans *bans = malloc(sizeof *bans);
	if (bans) {
		shm_bans_copy(w->shm, bans);
		shards_json(w, bans, now, out);
		bans_json(bans, now, out);
		free(bans);
	} else {
		evbuffer_add(out, ",\"shards\":[],\"bans\":[]", 22);
	}
	errors_json(w, out);
	list_json(w, lists, SHM_DUMP_CLIENTS, out);
	list_json(w, lists, SHM_DUMP_SERVERS, out);
	key(out, false, "queries");
	queries_json(w, out);
	evbuffer_add(out, "}", 1);
}
