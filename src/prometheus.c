/* SPDX-License-Identifier: MIT */
/*
 * prometheus: /metrics. Gauges and counters mirror SHOW POOLS, SHOW STATS
 * and SHOW SERVERS with the prefix pgcat_, plus bans, workers and latency
 * histograms of query, transaction and wait-for-server time per pool.
 */
#include "prometheus.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bans.h"
#include "config.h"
#include "log.h"
#include "pool.h"
#include "server.h"
#include "shm.h"
#include "stats.h"
#include "context.h"
#include "utf8.h"
#include "web.h"

/* Label values escaped as the text format wants (\\, \", \n), and UTF-8
 * (a byte that is not, from a name a client sent, as U+FFFD: a scrape
 * with one is refused whole). */
static void label(struct evbuffer *out, const char *s)
{
	while (*s) {
		size_t n = utf8_char_len((const unsigned char *)s);
		if (*s == '\\' || *s == '"')
			evbuffer_add_printf(out, "\\%c", *s);
		else if (*s == '\n')
			evbuffer_add(out, "\\n", 2);
		else if (n)
			evbuffer_add(out, s, n);
		else
			evbuffer_add(out, "\xef\xbf\xbd", 3);
		s += n ? n : 1;
	}
}

static void pool_labels(struct evbuffer *out, const struct pool *p)
{
	evbuffer_add(out, "{pool=\"", 7);
	label(out, p->name);
	evbuffer_add(out, "\",user=\"", 8);
	label(out, p->user);
	evbuffer_add(out, "\"}", 2);
}


struct metric {
	const char *name;
	const char *type;
	const char *help;
};

static void header(struct evbuffer *out, const struct metric *m)
{
	evbuffer_add_printf(out, "# HELP pgcat_%s %s\n# TYPE pgcat_%s %s\n", m->name, m->help, m->name, m->type);
}

/* Errors by SQLSTATE (errstats.h): a series per database, user, code and
 * source, at most ERRSTATS_SLOTS per worker (bounded cardinality). */
static void error_counters(struct worker *w, struct evbuffer *out)
{
	static const struct metric m[] = {
		{ "errors_total", "counter",
		  "Errors sent to clients, by SQLSTATE: those servers sent (source=server) and pgcat's own (source=pgcat)." },
		{ "errors_untracked_total", "counter", "Errors not counted by SQLSTATE (their table was full)." },
	};
	struct errstats_row *rows;
	uint64_t untracked;
	size_t n = shm_errstats_all(w->shm, &rows, &untracked);
	header(out, &m[0]);
	for (size_t i = 0; i < n; i++) {
		evbuffer_add(out, "pgcat_errors_total{pool=\"", 25);
		label(out, rows[i].database);
		evbuffer_add(out, "\",user=\"", 8);
		label(out, rows[i].user);
		evbuffer_add_printf(out, "\",sqlstate=\"");
		label(out, rows[i].sqlstate);
		evbuffer_add_printf(out, "\",source=\"%s\"} %" PRIu64 "\n", errstats_source_name(rows[i].source),
				    rows[i].count);
	}
	header(out, &m[1]);
	evbuffer_add_printf(out, "pgcat_errors_untracked_total %" PRIu64 "\n", untracked);
	free(rows);
}

/* A label value of at most max bytes, cut at a whole character. */
static void label_cut(struct evbuffer *out, const char *s, size_t max)
{
	char cut[256];
	size_t n = 0;
	if (max >= sizeof cut)
		max = sizeof cut - 1;
	while (s[n]) {
		size_t c = utf8_char_len((const unsigned char *)s + n);
		if (!c)
			c = 1;   /* (label() writes it as U+FFFD) */
		if (n + c > max)
			break;
		n += c;
	}
	memcpy(cut, s, n);
	cut[n] = '\0';
	label(out, cut);
}

/* Query statistics (qstats.h): the top PROMETHEUS_QUERIES_TOP shapes by
 * total execution time, labelled by pool, user and fingerprint (their
 * text, cut, on an info series): a bounded number of series, whatever
 * the number of shapes. And the shapes dropped for room, per pool. */
#define PROMETHEUS_QUERIES_TOP 20
#define PROMETHEUS_QUERY_TEXT_MAX 200
static void query_metrics(struct worker *w, struct evbuffer *out)
{
	enum { Q_CALLS, Q_ROWS, Q_ERRORS, Q_EXEC, Q_WAIT, Q_INFO, Q__COUNT };
	static const struct metric m[Q__COUNT] = {
		{ "query_calls_total", "counter", "Requests of a query shape (query_stats; the top shapes by execution time)." },
		{ "query_rows_total", "counter", "Rows the commands of a query shape returned or changed." },
		{ "query_errors_total", "counter", "Errors servers answered a query shape with." },
		{ "query_exec_seconds_total", "counter", "Time a query shape took on its servers, request to ReadyForQuery." },
		{ "query_wait_seconds_total", "counter", "Time a query shape's clients waited for a server." },
		{ "query_info", "gauge", "A query shape's normalised text (cut), by its fingerprint." },
	};
	struct qstats_row *rows;
	size_t top = shm_qstats_top(w->shm, PROMETHEUS_QUERIES_TOP, &rows);
	for (int k = 0; k < Q__COUNT; k++) {
		header(out, &m[k]);
		for (size_t i = 0; i < top; i++) {
			const struct qstats_row *r = &rows[i];
			const struct shm_pool_entry *pe = &w->shm->h->pools[r->pool];
			evbuffer_add_printf(out, "pgcat_%s{pool=\"", m[k].name);
			label(out, pe->name);
			evbuffer_add(out, "\",user=\"", 8);
			label(out, pe->user);
			evbuffer_add_printf(out, "\",fingerprint=\"%016" PRIx64 "\"", r->fingerprint);
			switch (k) {
			case Q_CALLS: evbuffer_add_printf(out, "} %" PRIu64 "\n", r->calls); break;
			case Q_ROWS: evbuffer_add_printf(out, "} %" PRIu64 "\n", r->rows); break;
			case Q_ERRORS: evbuffer_add_printf(out, "} %" PRIu64 "\n", r->errors); break;
			case Q_EXEC: evbuffer_add_printf(out, "} %.6f\n", (double)r->exec_us / 1e6); break;
			case Q_WAIT: evbuffer_add_printf(out, "} %.6f\n", (double)r->wait_us / 1e6); break;
			default:
				evbuffer_add(out, ",query=\"", 8);
				label_cut(out, r->text, PROMETHEUS_QUERY_TEXT_MAX);
				evbuffer_add(out, "\"} 1\n", 5);
			}
		}
	}
	free(rows);
	static const struct metric dropped = { "query_shapes_dropped_total", "counter",
		"Query shapes dropped to make room (query_stats_max, least recently used first)." };
	header(out, &dropped);
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		const struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!p->query_stats || p->shm_slot < 0)
			continue;
		evbuffer_add(out, "pgcat_query_shapes_dropped_total", 32);
		pool_labels(out, p);
		evbuffer_add_printf(out, " %" PRIu64 "\n", shm_qstats_dropped(w->shm, p->shm_slot));
	}
}

/* The last takeover (-R, UPGRADE) as this process saw it from the new
 * side, summed over its workers (shm_worker: handover.c publishes). */
static void upgrade_gauges(struct worker *w, struct evbuffer *out)
{
	static const struct metric m[] = {
		{ "upgrade_taking_over", "gauge", "Workers still taking connections over from the previous process." },
		{ "upgrade_clients_taken", "gauge", "Client connections taken over from the previous process." },
		{ "upgrade_servers_taken", "gauge", "Server connections taken over from the previous process." },
		{ "upgrade_clients_left_to_drain", "gauge",
		  "Client connections the previous process kept to drain (it could not hand them over)." },
	};
	int64_t v[4] = { 0, 0, 0, 0 };
	for (uint32_t i = 0; i < w->shm->h->n_workers; i++) {
		struct shm_worker *sw = &w->shm->h->workers[i];
		v[0] += atomic_load_explicit(&sw->taking_over, memory_order_relaxed);
		v[1] += atomic_load_explicit(&sw->taken_clients, memory_order_relaxed);
		v[2] += atomic_load_explicit(&sw->taken_servers, memory_order_relaxed);
		int32_t left = atomic_load_explicit(&sw->left_on_old, memory_order_relaxed);
		v[3] += left > 0 ? left : 0;
	}
	for (size_t k = 0; k < 4; k++) {
		header(out, &m[k]);
		evbuffer_add_printf(out, "pgcat_%s %" PRId64 "\n", m[k].name, v[k]);
	}
}

enum pool_gauge { PG_CL_ACTIVE, PG_CL_WAITING, PG_SV_ACTIVE, PG_SV_IDLE, PG_SV_USED, PG_SV_LOGIN, PG_MAXWAIT,
		  PG_PAUSED, PG_SV_RESERVE, PG__COUNT };

static const struct metric pool_gauges[PG__COUNT] = {
	[PG_CL_ACTIVE] = { "pools_cl_active", "gauge", "Client connections linked to a server or idle." },
	[PG_CL_WAITING] = { "pools_cl_waiting", "gauge", "Client connections waiting for a server." },
	[PG_SV_ACTIVE] = { "pools_sv_active", "gauge", "Server connections linked to a client." },
	[PG_SV_IDLE] = { "pools_sv_idle", "gauge", "Server connections idle and ready." },
	[PG_SV_USED] = { "pools_sv_used", "gauge", "Server connections being cleaned up or reset." },
	[PG_SV_LOGIN] = { "pools_sv_login", "gauge", "Server connections connecting or logging in." },
	[PG_MAXWAIT] = { "pools_maxwait_seconds", "gauge", "Longest current wait for a server." },
	[PG_PAUSED] = { "pools_paused", "gauge", "1 while the pool is paused." },
	[PG_SV_RESERVE] = { "pools_sv_reserve", "gauge", "Server connections beyond pool_size (the reserve pool in use)." },
};

static const struct {
	enum stat_counter k;
	struct metric m;
	double scale;
} counters[] = {
	{ STAT_SERVER_ASSIGNMENT, { "stats_server_assignments_total", "counter", "Server connections handed to clients." }, 1 },
	{ STAT_XACT, { "stats_xacts_total", "counter", "Transactions completed." }, 1 },
	{ STAT_QUERY, { "stats_queries_total", "counter", "Queries completed." }, 1 },
	{ STAT_RECEIVED, { "stats_received_bytes_total", "counter", "Bytes received from clients." }, 1 },
	{ STAT_SENT, { "stats_sent_bytes_total", "counter", "Bytes sent to clients." }, 1 },
	{ STAT_XACT_TIME, { "stats_xact_seconds_total", "counter", "Time spent in transactions." }, 1e-6 },
	{ STAT_QUERY_TIME, { "stats_query_seconds_total", "counter", "Time spent in queries." }, 1e-6 },
	{ STAT_WAIT_TIME, { "stats_wait_seconds_total", "counter", "Time clients waited for a server." }, 1e-6 },
	{ STAT_CLIENT_PARSE, { "stats_client_parses_total", "counter", "Parse messages from clients." }, 1 },
	{ STAT_SERVER_PARSE, { "stats_server_parses_total", "counter", "Parse messages sent to servers." }, 1 },
	{ STAT_BIND, { "stats_binds_total", "counter", "Bind messages from clients." }, 1 },
	{ STAT_CLIENT_LOGIN, { "stats_client_logins_total", "counter", "Client logins." }, 1 },
	{ STAT_PREPARED_HITS, { "prepared_hits_total", "counter", "Prepared statements found on the server." }, 1 },
	{ STAT_PREPARED_MISSES, { "prepared_misses_total", "counter", "Prepared statements that had to be prepared." }, 1 },
	{ STAT_UNNAMED_HITS, { "prepared_unnamed_hits_total", "counter", "Unnamed Parses of statements the server already held." }, 1 },
	{ STAT_UNNAMED_MISSES, { "prepared_unnamed_misses_total", "counter", "Unnamed Parses the server had to parse." }, 1 },
};

static const struct metric hists[HIST__COUNT] = {
	[HIST_QUERY] = { "query_duration_seconds", "histogram", "Query time, from the request to ReadyForQuery." },
	[HIST_XACT] = { "xact_duration_seconds", "histogram", "Transaction time, from its first message to ReadyForQuery 'I'." },
	[HIST_WAIT] = { "wait_duration_seconds", "histogram", "Time a client waited for a server connection." },
};

void prometheus_render(struct worker *w, struct evbuffer *out)
{
	struct list_node *pos, *tmp;
	/* Instance-wide: every worker's share from the shared segment. */
	w->cmds->publish_pools(w);
	for (int g = 0; g < PG__COUNT; g++) {
		header(out, &pool_gauges[g]);
		LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
			struct pool *p = LIST_OWNER(pos, struct pool, node);
			int32_t v[PG__COUNT] = { 0 };
			int64_t maxwait;
			shm_gauges_total(w->shm, p->shm_slot, &v[PG_CL_ACTIVE], &v[PG_CL_WAITING], &v[PG_SV_ACTIVE],
					 &v[PG_SV_IDLE], &v[PG_SV_USED], &v[PG_SV_LOGIN], &maxwait);
			v[PG_PAUSED] = p->paused;
			if (g == PG_SV_RESERVE)
				v[PG_SV_RESERVE] = pool_reserve_in_use(p);
			evbuffer_add_printf(out, "pgcat_%s", pool_gauges[g].name);
			pool_labels(out, p);
			if (g == PG_MAXWAIT)
				evbuffer_add_printf(out, " %.6f\n", (double)maxwait / 1e6);
			else
				evbuffer_add_printf(out, " %d\n", (int)v[g]);
		}
	}
	for (size_t k = 0; k < sizeof counters / sizeof *counters; k++) {
		header(out, &counters[k].m);
		LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
			struct pool *p = LIST_OWNER(pos, struct pool, node);
			struct stats st;
			shm_stats_total(w->shm, p->shm_slot, &st);
			evbuffer_add_printf(out, "pgcat_%s", counters[k].m.name);
			pool_labels(out, p);
			if (counters[k].scale == 1)
				evbuffer_add_printf(out, " %" PRIu64 "\n", st.v[counters[k].k]);
			else
				evbuffer_add_printf(out, " %.6f\n", (double)st.v[counters[k].k] * counters[k].scale);
		}
	}
	for (int h = 0; h < HIST__COUNT; h++) {
		header(out, &hists[h]);
		LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
			struct pool *p = LIST_OWNER(pos, struct pool, node);
			struct stats st;
			shm_stats_total(w->shm, p->shm_slot, &st);
			uint64_t cum = 0;
			for (int i = 0; i <= STATS_HIST_BOUNDS; i++) {
				cum += st.hist[h][i];
				evbuffer_add_printf(out, "pgcat_%s_bucket{pool=\"", hists[h].name);
				label(out, p->name);
				evbuffer_add(out, "\",user=\"", 8);
				label(out, p->user);
				if (i < STATS_HIST_BOUNDS)
					evbuffer_add_printf(out, "\",le=\"%g\"} %" PRIu64 "\n",
							    (double)stats_hist_bounds_us[i] / 1e6, cum);
				else
					evbuffer_add_printf(out, "\",le=\"+Inf\"} %" PRIu64 "\n", cum);
			}
			evbuffer_add_printf(out, "pgcat_%s_sum", hists[h].name);
			pool_labels(out, p);
			evbuffer_add_printf(out, " %.6f\n", (double)st.hist_sum_us[h] / 1e6);
			evbuffer_add_printf(out, "pgcat_%s_count", hists[h].name);
			pool_labels(out, p);
			evbuffer_add_printf(out, " %" PRIu64 "\n", cum);
		}
	}
	/* One gauge per server connection state, like SHOW SERVERS grouped. */
	static const struct metric servers = { "servers", "gauge", "Server connections by pool, server and state." };
	header(out, &servers);
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			const struct srvpool *sp = p->targets[i];
			struct { const char *state; int n; } st[] = {
				{ "active", sp->n_active }, { "idle", sp->n_idle }, { "used", sp->n_other },
				{ "login", sp->n_opening },
			};
			for (size_t k = 0; k < sizeof st / sizeof *st; k++) {
				evbuffer_add(out, "pgcat_servers{pool=\"", 20);
				label(out, p->name);
				evbuffer_add(out, "\",user=\"", 8);
				label(out, p->user);
				evbuffer_add(out, "\",host=\"", 8);
				label(out, sp->host);
				evbuffer_add_printf(out, "\",port=\"%d\",shard=\"%d\",role=\"%s\",state=\"%s\"} %d\n", sp->port,
						    sp->shard, config_server_role_name(sp->role), st[k].state, st[k].n);
			}
		}
	}
	/* Replica lag, per server, as the lag monitor last measured it
	 * (lagmon.c); servers with no figure (primaries, unknown) are left out. */
	static const struct metric lag_gauges[2] = {
		{ "server_lag_bytes", "gauge", "Bytes of WAL a replica has yet to replay, behind its primary." },
		{ "server_lag_ms", "gauge", "Age of the last transaction a lagging replica replayed, in ms." },
	};
	for (int g = 0; g < 2; g++) {
		header(out, &lag_gauges[g]);
		LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
			struct pool *p = LIST_OWNER(pos, struct pool, node);
			if (!pool_first_of_name(w, false, p))
				continue;
			for (size_t i = 0; i < p->n_targets; i++) {
				const struct srvpool *sp = p->targets[i];
				int64_t lag[2];
				shm_lag_get(w->shm, sp->shm_target, &lag[0], &lag[1]);
				if (lag[g] < 0)
					continue;
				evbuffer_add_printf(out, "pgcat_%s{pool=\"", lag_gauges[g].name);
				label(out, p->name);
				evbuffer_add(out, "\",host=\"", 8);
				label(out, sp->host);
				evbuffer_add_printf(out, "\",port=\"%d\",shard=\"%d\",role=\"%s\"} %" PRId64 "\n", sp->port,
						    sp->shard, config_server_role_name(sp->role), lag[g]);
			}
		}
	}
	int64_t now = (int64_t)time(NULL);
	int bans = 0;
	struct bans table;
	shm_bans_copy(w->shm, &table);
	for (int i = 0; i < BANS_MAX; i++)
		if (table.items[i].used && table.items[i].until > now)
			bans++;
	static const struct metric m_bans = { "bans", "gauge", "Servers currently banned." };
	static const struct metric m_workers = { "workers", "gauge", "Worker processes." };
	static const struct metric m_clients = { "client_connections", "gauge", "Client connections of this instance." };
	header(out, &m_bans);
	evbuffer_add_printf(out, "pgcat_bans %d\n", bans);
	header(out, &m_workers);
	int workers = 0;
	for (uint32_t i = 0; i < w->shm->h->n_workers; i++)
		if (atomic_load(&w->shm->h->workers[i].pid) > 0)
			workers++;
	evbuffer_add_printf(out, "pgcat_workers %d\n", workers);
	header(out, &m_clients);
	evbuffer_add_printf(out, "pgcat_client_connections %d\n", (int)shm_clients_total(w->shm));
	upgrade_gauges(w, out);
	error_counters(w, out);
	query_metrics(w, out);
}

static void metrics_cb(struct evhttp_request *req, void *arg)
{
	struct worker *w = arg;
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		evhttp_send_error(req, 405, "Method Not Allowed");
		return;
	}
	worker_update_clock(w);
	struct evbuffer *out = evbuffer_new();
	if (!out) {
		evhttp_send_error(req, 500, "Internal Server Error");
		return;
	}
	prometheus_render(w, out);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "text/plain; version=0.0.4; charset=utf-8");
	evhttp_send_reply(req, 200, "OK", out);
	evbuffer_free(out);
}

static void other_cb(struct evhttp_request *req, void *arg)
{
	evhttp_send_error(req, 404, "Not Found");
}

void prometheus_stop(struct worker *w)
{
	web_detach(w);   /* (before the requests it holds go with http) */
	if (w->http) {
		evhttp_free(w->http);
		w->http = NULL;
	}
	w->http_port = 0;
}

/* /metrics on host:port. Bound with SO_REUSEPORT, as pgcat's own port: a
 * process taking over (-R) binds it while the old one still listens (which
 * stops at the start of its handover, worker.c's pause_listening). */
static bool bind_metrics(struct worker *w, const char *host, int port)
{
	char ps[8];
	snprintf(ps, sizeof ps, "%d", port);
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
				  .ai_family = AF_UNSPEC };
	struct addrinfo *res = NULL;
	if (getaddrinfo(host, ps, &hints, &res) != 0)
		return false;
	bool bound = false;
	for (struct addrinfo *ai = res; ai && !bound; ai = ai->ai_next) {
		struct evconnlistener *l =
			evconnlistener_new_bind(w->base, NULL, NULL,
						LEV_OPT_REUSEABLE | LEV_OPT_REUSEABLE_PORT | LEV_OPT_CLOSE_ON_FREE |
							LEV_OPT_CLOSE_ON_EXEC,
						128, ai->ai_addr, (int)ai->ai_addrlen);
		if (!l)
			continue;
		if (evhttp_bind_listener(w->http, l))
			bound = true;   /* (the listener is evhttp's now) */
		else
			evconnlistener_free(l);
	}
	freeaddrinfo(res);
	return bound;
}

bool prometheus_reconfigure(struct worker *w)
{
	/* One worker serves /metrics: the figures come from the shared
	 * segment, so any one of them can. */
	int port = w->id == 0 ? w->cfg->general.prometheus_port : 0;
	if (port == w->http_port && (port == 0 || w->http)) {
		if (port)
			(void)web_reconfigure(w);   /* (a failure is logged; the page stays as it was) */
		return true;
	}
	prometheus_stop(w);
	if (port == 0)
		return true;
	w->http = evhttp_new(w->base);
	if (!w->http)
		return false;
	evhttp_set_cb(w->http, "/metrics", metrics_cb, w);
	evhttp_set_gencb(w->http, other_cb, w);
	/* Every method reaches the callbacks, which answer 405 to what they
	 * do not serve (evhttp alone would answer 501 to some); headers are
	 * bounded (the web page's basic auth is the largest, 1.4 kB). */
	evhttp_set_allowed_methods(w->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
						    EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
						    EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
	evhttp_set_max_headers_size(w->http, 65536);
	/* Nothing served takes a body: one is refused, not buffered; and a
	 * connection that sends nothing is closed. */
	evhttp_set_max_body_size(w->http, 0);
	evhttp_set_timeout(w->http, 30);
	/* The web page (web.c) on the same port; /metrics stays open. */
	if (!web_attach(w, w->http))
		log_error("web page: not served on port %d", port);
	const struct config_general *g = &w->cfg->general;
	bool bound = false;
	for (size_t i = 0; i < g->n_listen_addr; i++) {
		const char *addr = strcmp(g->listen_addr[i], "*") == 0 ? "0.0.0.0" : g->listen_addr[i];
		if (bind_metrics(w, addr, port))
			bound = true;
		else
			log_error("cannot listen for /metrics on %s:%d", addr, port);
	}
	if (!bound) {
		prometheus_stop(w);
		return false;
	}
	w->http_port = port;
	log_info("serving /metrics on port %d", port);
	return true;
}
