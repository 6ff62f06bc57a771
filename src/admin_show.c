/* SPDX-License-Identifier: MIT */
/*
 * admin_show: the admin console's SHOW commands (SPEC §7), from one table,
 * and the listings (clients, servers, prepared statements) that every
 * worker writes into shared memory for a console on another. Column names
 * and order follow PgBouncer's, pgcat's own columns come after them.
 */
#include "admin_errors.h"
#include "admin_result.h"
#include "admin_show.h"

#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "bans.h"
#include "cancel.h"
#include "client.h"
#include "client_move.h"
#include "config.h"
#include "dns.h"
#include "io.h"
#include "notify_move.h"
#include "tls.h"
#include "pool.h"
#include "prepared.h"
#include "server.h"
#include "shm.h"
#include "stats.h"
#include "version.h"
#include "context.h"

static void fmt_time(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

/* ---- SHOW commands ---- */

static void db_stats(struct worker *w, const char *db, struct stats *tot, struct stats *avg)
{
	memset(tot, 0, sizeof *tot);
	memset(avg, 0, sizeof *avg);
	uint64_t xt = 0, qt = 0, wt = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (strcmp(p->name, db) != 0)
			continue;
		struct stats pt, pa;
		if (p->shm_slot >= 0) {
			shm_stats_total(w->shm, p->shm_slot, &pt);
			shm_stats_avg_total(w->shm, p->shm_slot, &pa);
		} else {
			pt = *p->stats;
			pa = *p->stats_avg;
		}
		stats_sum(tot, &pt);
		const struct stats *a = &pa;
		for (int i = 0; i < STAT__COUNT; i++)
			if (i != STAT_XACT_TIME && i != STAT_QUERY_TIME && i != STAT_WAIT_TIME)
				avg->v[i] += a->v[i];
		/* mean times, weighted by how many events each user had */
		xt += a->v[STAT_XACT_TIME] * a->v[STAT_XACT];
		qt += a->v[STAT_QUERY_TIME] * a->v[STAT_QUERY];
		wt += a->v[STAT_WAIT_TIME] * a->v[STAT_SERVER_ASSIGNMENT];
	}
	avg->v[STAT_XACT_TIME] = avg->v[STAT_XACT] ? xt / avg->v[STAT_XACT] : 0;
	avg->v[STAT_QUERY_TIME] = avg->v[STAT_QUERY] ? qt / avg->v[STAT_QUERY] : 0;
	avg->v[STAT_WAIT_TIME] = avg->v[STAT_SERVER_ASSIGNMENT] ? wt / avg->v[STAT_SERVER_ASSIGNMENT] : 0;
}

static const enum stat_counter stat_order[] = {
	STAT_SERVER_ASSIGNMENT, STAT_XACT, STAT_QUERY, STAT_RECEIVED, STAT_SENT, STAT_XACT_TIME,
	STAT_QUERY_TIME, STAT_WAIT_TIME, STAT_CLIENT_PARSE, STAT_SERVER_PARSE, STAT_BIND, STAT_CLIENT_LOGIN,
};
#define N_STAT_ORDER (sizeof stat_order / sizeof *stat_order)

/* TOTALS: SHOW STATS' figures summed over every database, one (name,
 * value) row each, as PgBouncer's SHOW TOTALS. */
enum stats_view { STATS_VIEW_BOTH, STATS_VIEW_TOTALS, STATS_VIEW_AVERAGES, STATS_VIEW_SUM };

static void show_stats_view(struct client *c, enum stats_view view)
{
	static const struct admin_column both[] = {
		COL_T("database"), COL_I("total_server_assignment_count"), COL_I("total_xact_count"),
		COL_I("total_query_count"), COL_I("total_received"), COL_I("total_sent"), COL_I("total_xact_time"),
		COL_I("total_query_time"), COL_I("total_wait_time"), COL_I("total_client_parse_count"),
		COL_I("total_server_parse_count"), COL_I("total_bind_count"), COL_I("total_client_login_count"),
		COL_I("avg_server_assignment_count"), COL_I("avg_xact_count"), COL_I("avg_query_count"),
		COL_I("avg_recv"), COL_I("avg_sent"), COL_I("avg_xact_time"), COL_I("avg_query_time"),
		COL_I("avg_wait_time"), COL_I("avg_client_parse_count"), COL_I("avg_server_parse_count"),
		COL_I("avg_bind_count"), COL_I("avg_client_login_count"),
		/* PgBouncer before 1.8 named the query count total_requests; exporters
		 * of that era (Debian's prometheus-pgbouncer-exporter) still read it. */
		COL_I("total_requests"),
	};
	static const struct admin_column totals[] = {
		COL_T("database"), COL_I("server_assignment_count"), COL_I("xact_count"), COL_I("query_count"),
		COL_I("bytes_received"), COL_I("bytes_sent"), COL_I("xact_time"), COL_I("query_time"),
		COL_I("wait_time"), COL_I("client_parse_count"), COL_I("server_parse_count"), COL_I("bind_count"),
		COL_I("client_login_count"),
	};
	static const struct admin_column avgs[] = {
		COL_T("database"), COL_I("server_assignment_count"), COL_I("xact_count"), COL_I("query_count"),
		COL_I("bytes_received"), COL_I("bytes_sent"), COL_I("xact_time"), COL_I("query_time"),
		COL_I("wait_time"), COL_I("avg_client_parse_count"), COL_I("avg_server_parse_count"),
		COL_I("avg_bind_count"), COL_I("avg_client_login_count"),
	};
	static const struct admin_column sum[] = { COL_T("name"), COL_I("value") };
	struct worker *w = c->w;
	struct admin_result r;
	admin_res_begin(&r, c,
		  view == STATS_VIEW_BOTH     ? COLUMNS(both)
		  : view == STATS_VIEW_TOTALS ? COLUMNS(totals)
		  : view == STATS_VIEW_SUM    ? COLUMNS(sum)
					      : COLUMNS(avgs));
	struct stats all_tot = { 0 }, all_avg = { 0 };
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_first_of_name(w, false, p))
			continue;
		struct stats tot, avg;
		db_stats(w, p->name, &tot, &avg);
		if (view == STATS_VIEW_SUM) {
			for (int i = 0; i < STAT__COUNT; i++) {
				all_tot.v[i] += tot.v[i];
				all_avg.v[i] += avg.v[i];
			}
			continue;
		}
		admin_row_begin(&r);
		admin_row_s(&r, p->name);
		if (view != STATS_VIEW_AVERAGES)
			for (size_t i = 0; i < N_STAT_ORDER; i++)
				admin_row_i(&r, (int64_t)tot.v[stat_order[i]]);
		if (view != STATS_VIEW_TOTALS)
			for (size_t i = 0; i < N_STAT_ORDER; i++)
				admin_row_i(&r, (int64_t)avg.v[stat_order[i]]);
		if (view == STATS_VIEW_BOTH)
			admin_row_i(&r, (int64_t)tot.v[STAT_QUERY]);
		admin_row_end(&r);
	}
	/* On a pgbouncer.ini, the console's database has its row, as in
	 * PgBouncer: its commands (admin.c counts them). */
	if (w->cfg->pgbouncer && w->shm) {
		struct stats tot;
		shm_stats_of_name(w->shm, "pgbouncer", &tot);
		if (view == STATS_VIEW_SUM) {
			for (int i = 0; i < STAT__COUNT; i++)
				all_tot.v[i] += tot.v[i];
		} else {
			admin_row_begin(&r);
			admin_row_s(&r, "pgbouncer");
			if (view != STATS_VIEW_AVERAGES)
				for (size_t i = 0; i < N_STAT_ORDER; i++)
					admin_row_i(&r, (int64_t)tot.v[stat_order[i]]);
			if (view != STATS_VIEW_TOTALS)
				for (size_t i = 0; i < N_STAT_ORDER; i++)
					admin_row_i(&r, 0);
			if (view == STATS_VIEW_BOTH)
				admin_row_i(&r, (int64_t)tot.v[STAT_QUERY]);
			admin_row_end(&r);
		}
	}
	/* (SHOW STATS' column names, "database" and the old alias left out) */
	for (size_t i = 0; view == STATS_VIEW_SUM && i < 2 * N_STAT_ORDER; i++) {
		admin_row_begin(&r);
		admin_row_s(&r, both[1 + i].name);
		admin_row_i(&r, (int64_t)(i < N_STAT_ORDER ? all_tot.v[stat_order[i]]
							 : all_avg.v[stat_order[i - N_STAT_ORDER]]));
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

static void show_stats(struct client *c) { show_stats_view(c, STATS_VIEW_BOTH); }
static void show_stats_totals(struct client *c) { show_stats_view(c, STATS_VIEW_TOTALS); }
static void show_stats_averages(struct client *c) { show_stats_view(c, STATS_VIEW_AVERAGES); }
static void show_totals(struct client *c) { show_stats_view(c, STATS_VIEW_SUM); }

static void show_pools(struct client *c)
{
	static const struct admin_column cols[] = {
		COL_T("database"), COL_T("user"), COL_I("cl_active"), COL_I("cl_waiting"),
		COL_I("cl_active_cancel_req"), COL_I("cl_waiting_cancel_req"), COL_I("sv_active"),
		COL_I("sv_active_cancel"), COL_I("sv_being_canceled"), COL_I("sv_idle"), COL_I("sv_used"),
		COL_I("sv_tested"), COL_I("sv_login"), COL_I("maxwait"), COL_I("maxwait_us"), COL_T("pool_mode"),
		COL_T("load_balance_hosts"), COL_I("prepared_hits"), COL_I("prepared_misses"), COL_I("paused"),
		COL_I("sv_reserve"), COL_I("prepared_unnamed_hits"), COL_I("prepared_unnamed_misses"),
	};
	struct worker *w = c->w;
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	/* This worker's figures fresh; the others' as of their last tick. */
	w->cmds->publish_pools(w);
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_serves_itself(w, p))
			continue;   /* its clients are the forced user's pool's (pool_serving) */
		int32_t active, waiting, sv_active, sv_idle, sv_other, sv_login;
		int64_t maxwait;
		shm_gauges_total(w->shm, p->shm_slot, &active, &waiting, &sv_active, &sv_idle, &sv_other, &sv_login,
				 &maxwait);
		struct stats st;
		shm_stats_total(w->shm, p->shm_slot, &st);
		admin_row_begin(&r);
		admin_row_s(&r, p->name);
		admin_row_s(&r, p->user);
		admin_row_i(&r, active);
		admin_row_i(&r, waiting);
		admin_row_i(&r, 0);
		admin_row_i(&r, 0);
		admin_row_i(&r, sv_active);
		admin_row_i(&r, 0);
		admin_row_i(&r, 0);
		admin_row_i(&r, sv_idle);
		admin_row_i(&r, sv_other);
		admin_row_i(&r, 0);
		admin_row_i(&r, sv_login);
		admin_row_i(&r, (int64_t)(maxwait / 1000000));
		admin_row_i(&r, (int64_t)(maxwait % 1000000));
		admin_row_s(&r, config_pool_mode_name(p->mode));
		admin_row_null(&r);
		admin_row_i(&r, (int64_t)st.v[STAT_PREPARED_HITS]);
		admin_row_i(&r, (int64_t)st.v[STAT_PREPARED_MISSES]);
		admin_row_i(&r, p->paused);
		admin_row_i(&r, pool_reserve_in_use(p));
		admin_row_i(&r, (int64_t)st.v[STAT_UNNAMED_HITS]);
		admin_row_i(&r, (int64_t)st.v[STAT_UNNAMED_MISSES]);
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

static const char *role_name(enum server_role role) { return config_server_role_name(role); }

static void show_databases(struct client *c)
{
	static const struct admin_column cols[] = {
		COL_T("name"), COL_T("host"), COL_I("port"), COL_T("database"), COL_T("force_user"),
		COL_I("pool_size"), COL_I("min_pool_size"), COL_I("reserve_pool_size"), COL_I("server_lifetime"),
		COL_T("pool_mode"), COL_T("load_balance_hosts"), COL_I("max_connections"),
		COL_I("current_connections"), COL_I("max_client_connections"), COL_I("current_client_connections"),
		COL_I("paused"), COL_I("disabled"), COL_I("shard"), COL_T("role"), COL_I("banned"),
		COL_I("reserve_pool"),   /* the pre-1.8 name of reserve_pool_size, for old exporters */
	};
	struct worker *w = c->w;
	int64_t now = (int64_t)time(NULL);
	struct bans bans;
	shm_bans_copy(w->shm, &bans);
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_first_of_name(w, false, p) || p->removed)
			continue;
		/* (every worker's, as max_db_client_connections counts them) */
		int clients = w->shm ? shm_pool_clients_of(w->shm, p->name, NULL) : p->n_clients;
		struct list_node *qp, *qt;
		for (size_t i = 0; i < p->n_targets; i++) {
			const struct srvpool *sp = p->targets[i];
			int conns = 0;
			LIST_FOREACH_SAFE(qp, qt, &w->pools) {
				struct pool *q = LIST_OWNER(qp, struct pool, node);
				if (strcmp(q->name, p->name) == 0 && i < q->n_targets)
					conns += srvpool_total(q->targets[i]);
			}
			admin_row_begin(&r);
			admin_row_s(&r, p->name);
			admin_row_s(&r, sp->host);
			admin_row_i(&r, sp->port);
			admin_row_s(&r, sp->database);
			if (p->cpool->server_username)   /* PgBouncer's forced user */
				admin_row_s(&r, p->cpool->server_username);
			else
				admin_row_null(&r);
			admin_row_i(&r, p->pool_size);
			admin_row_i(&r, p->min_pool_size);
			admin_row_i(&r, p->reserve_pool_size);
			admin_row_i(&r, p->server_lifetime / 1000);
			admin_row_s(&r, config_pool_mode_name(p->mode));
			/* PgBouncer's load_balance_hosts, for a shard of several
			 * servers: the first that works, or spread over them. */
			int in_shard = 0;
			for (size_t k = 0; k < p->n_targets; k++)
				in_shard += p->targets[k]->shard == sp->shard;
			enum lb_mode lb = p->cpool->load_balancing_mode;
			/* (pgcat's loc named as pgcat.ini names it; a pgbouncer.ini's
			 * round-robin, which is loc, as PgBouncer names it) */
			if (in_shard > 1)
				admin_row_s(&r, lb == LB_MODE_FIRST		      ? "disable"
						: lb == LB_MODE_LOC && !w->cfg->pgbouncer ? "loc"
											  : "round-robin");
			else
				admin_row_null(&r);
			admin_row_i(&r, config_pool_max_db_connections(w->cfg, p->cpool));
			admin_row_i(&r, conns);
			admin_row_i(&r, config_pool_max_db_client_connections(w->cfg, p->cpool));
			admin_row_i(&r, clients);
			admin_row_i(&r, p->paused);
			admin_row_i(&r, p->disabled);
			admin_row_i(&r, sp->shard);
			admin_row_s(&r, role_name(sp->role));
			admin_row_i(&r, bans_is_banned(&bans, sp->host, sp->port, now));
			admin_row_i(&r, p->reserve_pool_size);
			admin_row_end(&r);
		}
	}
	/* On a pgbouncer.ini, PgBouncer's row of its console's database: its
	 * clients counted (max_db_client_connections), no servers. */
	if (w->cfg->pgbouncer) {
		admin_row_begin(&r);
		admin_row_s(&r, "pgbouncer");
		admin_row_null(&r);
		admin_row_i(&r, w->cfg->general.listen_port);
		admin_row_s(&r, "pgbouncer");
		admin_row_s(&r, "pgbouncer");
		admin_row_i(&r, 2);
		admin_row_i(&r, 0);
		admin_row_i(&r, 0);
		admin_row_i(&r, 0);
		admin_row_s(&r, "statement");
		admin_row_null(&r);
		admin_row_i(&r, 0);
		admin_row_i(&r, 0);
		admin_row_i(&r, w->cfg->general.max_db_client_connections);
		admin_row_i(&r, w->shm ? shm_pool_clients_of(w->shm, "pgbouncer", NULL) : 0);
		admin_row_i(&r, 0);
		admin_row_i(&r, 0);
		admin_row_i(&r, 0);
		admin_row_null(&r);
		admin_row_i(&r, 0);
		admin_row_i(&r, 0);
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

#define CONN_COLS                                                                                                \
	COL_T("type"), COL_T("user"), COL_T("database"), COL_T("replication"), COL_T("state"), COL_T("addr"),    \
		COL_I("port"), COL_T("local_addr"), COL_I("local_port"), COL_T("connect_time"),                  \
		COL_T("request_time"), COL_I("wait"), COL_I("wait_us"), COL_I("close_needed"), COL_T("ptr"),     \
		COL_T("link"), COL_I("remote_pid"), COL_T("tls"), COL_T("application_name"),                     \
		COL_I("prepared_statements"), COL_I("id"), COL_I("worker"), COL_I("shard"), COL_T("role"),       \
		COL_I("prepared_hits"), COL_I("prepared_misses"), COL_T("upgrade")

static const struct admin_column conn_cols[] = { CONN_COLS };
/* SHOW SOCKETS: the connection's row and its buffers, in PgBouncer's
 * columns: what pgcat holds of its input (recv_pos, pkt_avail) and output
 * (send_remain, send_avail), and what is left of a message being streamed
 * through (pkt_remain); pgcat parses in place, so pkt_pos and send_pos
 * are 0. */
static const struct admin_column socket_cols[] = {
	CONN_COLS, COL_I("recv_pos"), COL_I("pkt_pos"), COL_I("pkt_remain"), COL_I("send_pos"),
	COL_I("send_remain"), COL_I("pkt_avail"), COL_I("send_avail"),
};

/* Which rows and columns: SHOW CLIENTS / SERVERS, SHOW SOCKETS (every
 * connection with its buffers), SHOW ACTIVE_SOCKETS (those linked to the
 * other side). */
enum conn_view { VIEW_CONNS, VIEW_SOCKETS, VIEW_ACTIVE_SOCKETS };

static void buffer_cells(struct admin_result *r, const struct io *io, uint32_t remaining)
{
	int64_t in = io->in ? (int64_t)buf_len(io->in) : 0;
	int64_t out = (int64_t)io_out_len(io);
	admin_row_i(r, in);
	admin_row_i(r, 0);
	admin_row_i(r, remaining);
	admin_row_i(r, 0);
	admin_row_i(r, out);
	admin_row_i(r, in);
	admin_row_i(r, out);
}

/* Why server s would drain in a takeover (NULL: it moves): TLS, or in
 * session mode the reason of the client it is linked to, which it stays
 * with. */
static const char *server_never_why(const struct server *s)
{
	if (s->io.ssl)
		return "tls";
	if (s->client && !pool_mode_per_transaction(s->sp->pool->mode))
		return notify_move_never_why(LIST_OWNER(s->client, struct client, end));
	return NULL;
}

/* The upgrade column: what a takeover (-R, UPGRADE) does with the
 * connection. On the old process while it hands over, "moving" (at its next
 * point between requests) or "draining: why" (it cannot move: it is served
 * to its end here); then, and in any shutdown, "draining". On the new one,
 * "moved" for what came from the old. NULL otherwise. */
static const char *upgrade_cell(const struct worker *w, bool moved_in, const char *never_why, char *buf, size_t len)
{
	if (w->handing_over) {
		if (!never_why)
			return "moving";
		snprintf(buf, len, "draining: %s", never_why);
		return buf;
	}
	if (w->shutting_down)
		return "draining";
	return moved_in ? "moved" : NULL;
}

static void client_row(struct admin_result *r, const struct client *c, const char *state, enum conn_view v)
{
	if (v == VIEW_ACTIVE_SOCKETS && !c->end.server)
		return;
	char ct[40], rt[40], ptr[32], link[32];
	/* Wall-clock times from the monotonic ones (kept per client). */
	int64_t connect_wall = (int64_t)time(NULL) - (int64_t)((c->w->now_us - c->connect_us) / 1000000);
	fmt_time(connect_wall, ct, sizeof ct);
	uint64_t since_us = c->w->now_us - c->state_since_us;
	int64_t request = connect_wall + (int64_t)((c->last_activity_us - c->connect_us) / 1000000);
	fmt_time(request, rt, sizeof rt);
	snprintf(ptr, sizeof ptr, "C-%" PRIu64, c->id);
	if (c->end.server)
		snprintf(link, sizeof link, "S-%" PRIu64, c->end.server->id);
	const struct param *app = params_get(&c->params, "application_name");
	bool waiting = strcmp(state, "waiting") == 0;
	admin_row_begin(r);
	admin_row_s(r, "C");
	admin_row_s(r, client_user(c));
	admin_row_s(r, client_database(c));
	/* PgBouncer's words for a replication connection's kind. */
	admin_row_s(r, c->replication == CLIENT_REPLICATION_LOGICAL    ? "logical"
		       : c->replication == CLIENT_REPLICATION_PHYSICAL ? "physical"
								 : "no");
	admin_row_s(r, state);
	char a[CLIENT_ADDR_STRLEN];
	admin_row_s(r, client_addr_str(c, a));
	admin_row_i(r, c->port);
	admin_row_null(r);
	admin_row_i(r, 0);
	admin_row_s(r, ct);
	admin_row_s(r, rt);
	admin_row_i(r, waiting ? (int64_t)(since_us / 1000000) : 0);
	admin_row_i(r, waiting ? (int64_t)(since_us % 1000000) : 0);
	admin_row_i(r, 0);
	admin_row_s(r, ptr);
	admin_row_s(r, c->end.server ? link : NULL);
	admin_row_i(r, c->cancel_pid);
	char tls[96];
	tls_describe(c->io.ssl, tls, sizeof tls);
	admin_row_s(r, tls);
	admin_row_s(r, app ? app->value : "");
	admin_row_i(r, c->end.prep ? c->end.prep->names.n : 0);
	admin_row_i(r, (int64_t)c->id);
	admin_row_i(r, c->w->id);
	admin_row_i(r, c->end.server ? c->end.server->sp->shard : 0);
	admin_row_s(r, c->end.server ? role_name(c->end.server->sp->role) : NULL);
	admin_row_i(r, 0);
	admin_row_i(r, 0);
	char up[64];
	admin_row_s(r, upgrade_cell(c->w, c->moved_in, notify_move_never_why(c), up, sizeof up));
	if (v != VIEW_CONNS)
		buffer_cells(r, &c->io, c->fwd_remaining);
	admin_row_end(r);
}

/* This worker's clients, as rows of r. */
static void client_rows(struct admin_result *r, struct worker *w, enum conn_view v)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_active)
		client_row(r, LIST_OWNER(pos, struct client, node), "active", v);
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_idle) {
		const struct client *x = LIST_OWNER(pos, struct client, node);
		client_row(r, x, x->is_admin ? "active" : "idle", v);
	}
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct list_node *cp, *ct;
			LIST_FOREACH_SAFE(cp, ct, &p->targets[i]->waiters) {
				const struct client *x = client_of_waiter(LIST_OWNER(cp, struct pool_waiter, node));
				if (x)   /* a fan-out's legs show as their client */
					client_row(r, x, "waiting", v);
			}
		}
	}
}

static void show_clients(struct client *c)
{
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(conn_cols));
	client_rows(&r, c->w, VIEW_CONNS);
	admin_res_end(&r);
}

static const char *server_show_state(const struct server *s)
{
	switch (s->state) {
	case SERVER_CONNECTING:
	case SERVER_LOGIN: return "login";
	case SERVER_IDLE: return "idle";
	case SERVER_SYNCING:
	case SERVER_ACTIVE:
	case SERVER_WAL_POSITION: return "active";
	case SERVER_ASKING: return "active";
	case SERVER_DRAINING:
	case SERVER_RESETTING: return "used";
	case SERVER_CANCEL_WAIT: return "being_canceled";
	case SERVER_CLOSED: return "closed";
	}
	return "?";
}

static void server_rows(struct admin_result *r, struct list_node *head, enum conn_view v)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, head) {
		const struct server *s = LIST_OWNER(pos, struct server, node);
		if (v == VIEW_ACTIVE_SOCKETS && !s->client)
			continue;
		char ct[40], rt[40], ptr[32], link[32];
		fmt_time(s->connect_wall, ct, sizeof ct);
		fmt_time(s->connect_wall + (int64_t)((s->last_used_us - s->connect_us) / 1000000), rt, sizeof rt);
		snprintf(ptr, sizeof ptr, "S-%" PRIu64, s->id);
		if (s->client)
			snprintf(link, sizeof link, "C-%" PRIu64, s->client->client_id);
		const struct param *app = params_get(&s->params, "application_name");
		admin_row_begin(r);
		admin_row_s(r, "S");
		admin_row_s(r, s->sp->pool->user);
		admin_row_s(r, s->sp->pool->name);
		admin_row_s(r, "no");
		admin_row_s(r, server_show_state(s));
		admin_row_s(r, s->sp->host);
		admin_row_i(r, s->sp->port);
		admin_row_null(r);
		admin_row_i(r, 0);
		admin_row_s(r, ct);
		admin_row_s(r, rt);
		admin_row_i(r, 0);
		admin_row_i(r, 0);
		admin_row_i(r, s->close_when_idle);
		admin_row_s(r, ptr);
		admin_row_s(r, s->client ? link : NULL);
		admin_row_i(r, s->backend_pid);
		char tls[96];
		tls_describe(s->io.ssl, tls, sizeof tls);
		admin_row_s(r, tls);
		admin_row_s(r, app ? app->value : "");
		admin_row_i(r, s->prep ? s->prep->set.n : 0);
		admin_row_i(r, (int64_t)s->id);
		admin_row_i(r, s->w->id);
		admin_row_i(r, s->sp->shard);
		admin_row_s(r, role_name(s->sp->role));
		admin_row_i(r, s->prep ? (int64_t)s->prep->hits : 0);
		admin_row_i(r, s->prep ? (int64_t)s->prep->misses : 0);
		char up[64];
		admin_row_s(r, upgrade_cell(s->w, s->moved_in, server_never_why(s), up, sizeof up));
		if (v != VIEW_CONNS)
			buffer_cells(r, &s->io, s->fwd_remaining);
		admin_row_end(r);
	}
}

/* This worker's server connections, as rows of r. */
static void all_server_rows(struct admin_result *r, struct worker *w, enum conn_view v)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = p->targets[i];
			server_rows(r, &sp->active, v);
			server_rows(r, &sp->idle, v);
			server_rows(r, &sp->other, v);
			server_rows(r, &sp->opening, v);
		}
	}
}

static void show_servers(struct client *c)
{
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(conn_cols));
	all_server_rows(&r, c->w, VIEW_CONNS);
	admin_res_end(&r);
}

/* This worker's connections: its clients, then its servers. */
static void socket_rows(struct client *c, enum conn_view v)
{
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(socket_cols));
	client_rows(&r, c->w, v);
	all_server_rows(&r, c->w, v);
	admin_res_end(&r);
}

static void show_sockets(struct client *c)
{
	socket_rows(c, VIEW_SOCKETS);
}

static void show_active_sockets(struct client *c)
{
	socket_rows(c, VIEW_ACTIVE_SOCKETS);
}

/* ---- SHOW CLIENTS / SERVERS across workers ---- */

/* This worker's prepared statements (each worker keeps its own registry,
 * so one text can be listed once per worker). */
static const struct admin_column prep_cols[] = {
	COL_T("pool"), COL_T("user"), COL_T("name"), COL_T("query"), COL_I("servers"), COL_I("hits"),
	COL_I("misses"), COL_I("worker"),
};

static void prepared_rows(struct admin_result *r, struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (uint32_t b = 0; b < p->prep.n_buckets; b++)
			for (const struct prep_stmt *st = p->prep.buckets[b]; st; st = st->hnext) {
				char name[PREP_GNAME_MAX];
				snprintf(name, sizeof name, "pgcat_%" PRIx64, st->id);
				admin_row_begin(r);
				admin_row_s(r, p->name);
				admin_row_s(r, p->user);
				admin_row_s(r, name);
				admin_row_s(r, (const char *)st->key);
				admin_row_i(r, st->servers);
				admin_row_i(r, (int64_t)st->hits);
				admin_row_i(r, (int64_t)st->misses);
				admin_row_i(r, w->id);
				admin_row_end(r);
			}
	}
}

static void show_prepared_statements(struct client *c)
{
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(prep_cols));
	prepared_rows(&r, c->w);
	admin_res_end(&r);
}

static void dump_clients(struct admin_result *r, struct worker *w)
{
	client_rows(r, w, VIEW_CONNS);
}

static void dump_servers(struct admin_result *r, struct worker *w)
{
	all_server_rows(r, w, VIEW_CONNS);
}

static void (*const dump_producers[SHM_DUMP__COUNT])(struct admin_result *, struct worker *) = {
	[SHM_DUMP_CLIENTS] = dump_clients,
	[SHM_DUMP_SERVERS] = dump_servers,
	[SHM_DUMP_PREPARED] = prepared_rows,
};
static const char *const dump_names[SHM_DUMP__COUNT] = {
	[SHM_DUMP_CLIENTS] = "clients",
	[SHM_DUMP_SERVERS] = "servers",
	[SHM_DUMP_PREPARED] = "prepared_statements",
};
static const struct admin_columns dump_cols[SHM_DUMP__COUNT] = {
	[SHM_DUMP_CLIENTS] = COLUMNS_INIT(conn_cols),
	[SHM_DUMP_SERVERS] = COLUMNS_INIT(conn_cols),
	[SHM_DUMP_PREPARED] = COLUMNS_INIT(prep_cols),
};

int admin_dump_kind(const char *name)
{
	for (int k = 0; k < SHM_DUMP__COUNT; k++)
		if (strcasecmp(name, dump_names[k]) == 0)
			return k;
	return -1;
}

const char *admin_dump_name(int kind)
{
	return dump_names[kind];
}

void admin_dump(struct worker *w, const char *what, uint64_t seq)
{
	int kind = admin_dump_kind(what);
	if (kind < 0)
		return;
	struct admin_result r;
	memset(&r, 0, sizeof r);
	r.dump = shm_dump_slot(w->shm, (enum shm_dump_kind)kind, w->id);
	r.dump_cap = shm_dump_capacity(w->shm);
	r.cols = dump_cols[kind];
	shm_dump_begin(r.dump);
	dump_producers[kind](&r, w);
	shm_dump_commit(r.dump, seq);
}

void admin_finish_dump(struct client *c, int kind, uint64_t seq)
{
	struct worker *w = c->w;
	struct admin_result r;
	admin_res_begin(&r, c, dump_cols[kind]);
	dump_producers[kind](&r, w);
	uint32_t truncated = 0;
	int missing = 0;
	for (uint32_t i = 0; i < w->shm->h->n_workers; i++) {
		if ((int)i == w->id || atomic_load(&w->shm->h->workers[i].pid) <= 0 ||
		    !atomic_load(&w->shm->h->workers[i].ready))
			continue;
		uint8_t *data = NULL;
		uint32_t len, rows, trunc;
		bool ok = false;
		/* A write under way (a newer request) is brief: try a few times. */
		for (int attempt = 0; attempt < 100 && !ok; attempt++)
			ok = shm_dump_read(w->shm, (enum shm_dump_kind)kind, (int)i, seq, &data, &len, &rows, &trunc);
		if (!ok) {
			missing++;
			continue;
		}
		buf_add(client_output(c), data, len);
		free(data);
		truncated += trunc;
	}
	if (truncated || missing) {
		uint8_t storage[256];
		struct pktbuf pb;
		char msg[160];
		snprintf(msg, sizeof msg, "incomplete listing: %u rows did not fit the shared buffer, %d worker%s did not answer",
			 truncated, missing, missing == 1 ? "" : "s");
		pktbuf_init(&pb, storage, sizeof storage);
		pktbuf_notice(&pb, "WARNING", "01000", msg);
		admin_out(c, &pb);
	}
	admin_res_end(&r);
}

static void show_users(struct client *c)
{
	static const struct admin_column cols[] = {
		COL_T("name"), COL_I("pool_size"), COL_I("reserve_pool_size"), COL_T("pool_mode"),
		COL_I("max_user_connections"), COL_I("current_connections"), COL_I("max_user_client_connections"),
		COL_I("current_client_connections"),
	};
	struct worker *w = c->w;
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	struct list_node *pos, *tmp, *qp, *qt;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		bool first = true;
		LIST_FOREACH_SAFE(qp, qt, &w->pools) {
			struct pool *q = LIST_OWNER(qp, struct pool, node);
			if (q == p)
				break;
			if (strcmp(q->user, p->user) == 0)
				first = false;
		}
		if (!first)
			continue;
		int conns = 0;
		/* (every worker's, as max_user_client_connections counts them) */
		int clients = w->shm ? shm_pool_clients_of(w->shm, NULL, p->user) : p->n_clients;
		LIST_FOREACH_SAFE(qp, qt, &w->pools) {
			struct pool *q = LIST_OWNER(qp, struct pool, node);
			if (strcmp(q->user, p->user) != 0)
				continue;
			for (size_t i = 0; i < q->n_targets; i++)
				conns += srvpool_total(q->targets[i]);
		}
		admin_row_begin(&r);
		admin_row_s(&r, p->user);
		admin_row_i(&r, p->pool_size);
		admin_row_i(&r, p->reserve_pool_size);
		admin_row_s(&r, config_pool_mode_name(p->mode));
		admin_row_i(&r, config_user_max_user_connections(w->cfg, p->cpool, p->cuser));
		admin_row_i(&r, conns);
		admin_row_i(&r, config_user_max_client_connections(w->cfg, p->user));
		admin_row_i(&r, clients);
		admin_row_end(&r);
	}
	/* [users.NAME] (PgBouncer's [users]) names no pool has (yet): their
	 * settings and caps, as PgBouncer lists every user it knows. */
	const struct config *cfg = w->cfg;
	const struct config_general *g = &cfg->general;
	for (size_t i = 0; i < cfg->n_user_settings; i++) {
		const struct config_user_settings *us = &cfg->user_settings[i];
		bool has_pool = false;
		LIST_FOREACH_SAFE(pos, tmp, &w->pools)
			has_pool |= strcmp(LIST_OWNER(pos, struct pool, node)->user, us->name) == 0;
		if (has_pool)
			continue;
		admin_row_begin(&r);
		admin_row_s(&r, us->name);
		admin_row_i(&r, us->pool_size != CONFIG_INHERIT ? us->pool_size : g->default_pool_size);
		admin_row_i(&r, us->reserve_pool_size != CONFIG_INHERIT ? us->reserve_pool_size : g->reserve_pool_size);
		admin_row_s(&r, config_pool_mode_name(us->pool_mode != CONFIG_INHERIT ? (enum pool_mode)us->pool_mode
										      : g->pool_mode));
		admin_row_i(&r, us->max_user_connections != CONFIG_INHERIT ? us->max_user_connections
									   : g->max_user_connections);
		admin_row_i(&r, 0);
		admin_row_i(&r, config_user_max_client_connections(cfg, us->name));
		admin_row_i(&r, w->shm ? shm_pool_clients_of(w->shm, NULL, us->name) : 0);
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

static void show_config(struct client *c)
{
	/* value and default as text: the keys have all sorts of types */
	static const struct admin_column cols[] = { COL_T("key"), COL_T("value"), COL_T("default"), COL_T("changeable") };
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	/* pgcat.ini's [general], or PgBouncer's names and units when the
	 * configuration came from a pgbouncer.ini. */
	struct config_show_row row;
	for (size_t i = 0; config_show_row(c->w->cfg, i, &row); i++) {
		/* The engine in use, which auto (or a kernel that refused
		 * io_uring) decided: this worker's (SPEC §12). */
		if (strcmp(row.key, "io_engine") == 0 && c->w->cfg->format == CONFIG_FORMAT_PGCAT)
			snprintf(row.value, sizeof row.value, "%s", io_flusher_engine(&c->w->flusher));
		admin_row_begin(&r);
		admin_row_s(&r, row.key);
		if (row.value_null)
			admin_row_null(&r);
		else
			admin_row_s(&r, row.value);
		if (row.default_value)
			admin_row_s(&r, row.default_value);
		else
			admin_row_null(&r);
		admin_row_s(&r, row.changeable ? "yes" : "no");
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

static void show_lists(struct client *c)
{
	static const struct admin_column cols[] = { COL_T("list"), COL_I("items") };
	struct worker *w = c->w;
	int pools = 0, used_servers = 0, free_servers = 0, login_clients = 0, used_clients = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		pools++;
		for (size_t i = 0; i < p->n_targets; i++) {
			used_servers += p->targets[i]->n_active + p->targets[i]->n_other + p->targets[i]->n_opening;
			free_servers += p->targets[i]->n_idle;
		}
	}
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_login)
		login_clients++;
	used_clients = w->n_clients - login_clients;
	int databases = 0;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools)
		if (pool_first_of_name(w, false, LIST_OWNER(pos, struct pool, node)))
			databases++;
	int64_t dns_names = 0, dns_pending_n = w->dns ? (int64_t)dns_pending(w->dns) : 0;
	while (w->dns && dns_entry_at(w->dns, (size_t)dns_names))
		dns_names++;
	struct { const char *name; int64_t v; } rows[] = {
		{ "databases", databases }, { "users", pools }, { "peers", (int64_t)w->cfg->n_peers },
		{ "pools", pools }, { "peer_pools", 0 }, { "free_clients", 0 }, { "used_clients", used_clients },
		{ "login_clients", login_clients }, { "free_servers", free_servers },
		{ "used_servers", used_servers }, { "dns_names", dns_names }, { "dns_zones", 0 },
		{ "dns_queries", dns_pending_n }, { "dns_pending", dns_pending_n },
	};
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
		admin_row_begin(&r);
		admin_row_s(&r, rows[i].name);
		admin_row_i(&r, rows[i].v);
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

static void show_version(struct client *c)
{
	static const struct admin_column cols[] = { COL_T("version") };
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	char v[64];
	snprintf(v, sizeof v, "pgcat %s", pgcat_version);
	admin_row_begin(&r);
	admin_row_s(&r, v);
	admin_row_end(&r);
	admin_res_end(&r);
}

static void show_mem(struct client *c)
{
	static const struct admin_column cols[] = {
		COL_T("name"), COL_I("size"), COL_I("used"), COL_I("free"), COL_I("memtotal"),
	};
	struct worker *w = c->w;
	int servers = 0, pools = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		pools++;
		for (size_t i = 0; i < p->n_targets; i++)
			servers += srvpool_total(p->targets[i]);
	}
	struct { const char *name; size_t size; int used; } rows[] = {
		{ "client", sizeof(struct client), w->n_clients },
		{ "server", sizeof(struct server), servers },
		{ "pool", sizeof(struct pool), pools },
		{ "cancel_slot", sizeof(struct cancel_slot), (int)w->cancel.n_slots },
	};
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
		admin_row_begin(&r);
		admin_row_s(&r, rows[i].name);
		admin_row_i(&r, (int64_t)rows[i].size);
		admin_row_i(&r, rows[i].used);
		admin_row_i(&r, 0);
		admin_row_i(&r, (int64_t)(rows[i].size * (size_t)rows[i].used));
		admin_row_end(&r);
	}
	/* io_uring's provided buffers: used = held by pgcat this moment (0
	 * between loop turns: an idle connection pins none). */
	unsigned nbuf, bufsize, held;
	io_flusher_ring_buffers(&w->flusher, &nbuf, &bufsize, &held);
	if (nbuf > 0) {
		admin_row_begin(&r);
		admin_row_s(&r, "io_uring_buffer");
		admin_row_i(&r, bufsize);
		admin_row_i(&r, held);
		admin_row_i(&r, (int64_t)nbuf - held);
		admin_row_i(&r, (int64_t)bufsize * nbuf);
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

static void show_dns_hosts(struct client *c)
{
	static const struct admin_column cols[] = { COL_T("hostname"), COL_I("ttl"), COL_T("addrs") };
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	/* This worker's c-ares cache: each server host name it has looked up,
	 * seconds until its answer goes stale, and the addresses (in the order
	 * they are tried). */
	struct worker *w = c->w;
	const struct dns_entry *e;
	for (size_t i = 0; w->dns && (e = dns_entry_at(w->dns, i)) != NULL; i++) {
		char addrs[DNS_MAX_ADDRS * 48] = "";
		size_t used = 0;
		for (int k = 0; k < e->n_addrs; k++) {
			char host[64];
			if (getnameinfo((const struct sockaddr *)&e->addrs[k], e->addrlens[k], host, sizeof host, NULL, 0,
					NI_NUMERICHOST) == 0)
				used += (size_t)snprintf(addrs + used, sizeof addrs - used, "%s%s", used ? "," : "", host);
			if (used >= sizeof addrs)
				break;
		}
		admin_row_begin(&r);
		admin_row_s(&r, e->host);
		admin_row_i(&r, e->state == DNS_OK && e->expires_us > w->now_us ? (int64_t)((e->expires_us - w->now_us) / 1000000)
									   : 0);
		admin_row_s(&r, addrs);
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

static void show_shards(struct client *c)
{
	static const struct admin_column cols[] = {
		COL_T("pool"), COL_I("shard"), COL_T("host"), COL_I("port"), COL_T("role"), COL_I("banned"),
		COL_T("ban_reason"), COL_I("ban_remaining_s"), COL_I("cl_active"), COL_I("sv_active"),
		COL_I("sv_idle"), COL_I("xact_count"),
		/* pgcat's own: transactions routed here, by how the shard was chosen */
		COL_I("routed_key"), COL_I("routed_set"), COL_I("routed_hint"), COL_I("routed_default"),
		/* the lag monitor's last figures (lagmon.c); NULL: a primary, or unknown */
		COL_I("lag_bytes"), COL_I("lag_ms"),
	};
	struct worker *w = c->w;
	int64_t now = (int64_t)time(NULL);
	struct bans bans;
	shm_bans_copy(w->shm, &bans);
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	struct list_node *pos, *tmp, *qp, *qt;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_first_of_name(w, false, p) || p->removed)
			continue;
		for (size_t i = 0; i < p->n_targets; i++) {
			const struct srvpool *sp = p->targets[i];
			int sv_active = 0, sv_idle = 0;
			uint64_t xacts = 0, routed[SHM_ROUTE_VIA] = { 0 };
			LIST_FOREACH_SAFE(qp, qt, &w->pools) {
				struct pool *q = LIST_OWNER(qp, struct pool, node);
				if (strcmp(q->name, p->name) != 0 || i >= q->n_targets)
					continue;
				const struct srvpool *qs = q->targets[i];
				sv_active += qs->n_active;
				sv_idle += qs->n_idle;
				/* the whole instance's counts when the shared segment has them */
				uint64_t x, rt[SHM_ROUTE_VIA];
				if (w->shm && qs->shm_target >= 0) {
					shm_target_counts_total(w->shm, qs->shm_target, &x, rt);
				} else {
					x = qs->xact_count;
					for (int v = 0; v < SHM_ROUTE_VIA; v++)
						rt[v] = qs->routed[v];
				}
				xacts += x;
				for (int v = 0; v < SHM_ROUTE_VIA; v++)
					routed[v] += rt[v];
			}
			const struct ban *b = bans_get(&bans, sp->host, sp->port, now);
			admin_row_begin(&r);
			admin_row_s(&r, p->name);
			admin_row_i(&r, sp->shard);
			admin_row_s(&r, sp->host);
			admin_row_i(&r, sp->port);
			admin_row_s(&r, role_name(sp->role));
			admin_row_i(&r, b != NULL);
			admin_row_s(&r, b ? b->reason : NULL);
			admin_row_i(&r, b ? b->until - now : 0);
			admin_row_i(&r, sv_active);  /* each active server serves one client */
			admin_row_i(&r, sv_active);
			admin_row_i(&r, sv_idle);
			admin_row_i(&r, (int64_t)xacts);
			for (int v = 0; v < SHM_ROUTE_VIA; v++)
				admin_row_i(&r, (int64_t)routed[v]);
			int64_t lag_bytes, lag_ms;
			shm_lag_get(w->shm, sp->shm_target, &lag_bytes, &lag_ms);
			if (lag_bytes >= 0)
				admin_row_i(&r, lag_bytes);
			else
				admin_row_null(&r);
			if (lag_ms >= 0)
				admin_row_i(&r, lag_ms);
			else
				admin_row_null(&r);
			admin_row_end(&r);
		}
	}
	admin_res_end(&r);
}

static void show_bans(struct client *c)
{
	static const struct admin_column cols[] = {
		COL_T("pool"), COL_I("shard"), COL_T("host"), COL_I("port"), COL_T("role"), COL_T("reason"),
		COL_T("banned_at"), COL_I("remaining_s"), COL_T("source"),
	};
	struct worker *w = c->w;
	int64_t now = (int64_t)time(NULL);
	struct bans bans;
	shm_bans_copy(w->shm, &bans);
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	for (int i = 0; i < BANS_MAX; i++) {
		const struct ban *b = &bans.items[i];
		if (!b->used || b->until <= now)
			continue;
		char at[40];
		time_t t = (time_t)b->banned_at;
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", &tm);
		bool any = false;
		struct list_node *pos, *tmp;
		LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
			struct pool *p = LIST_OWNER(pos, struct pool, node);
			if (!pool_first_of_name(w, false, p))
				continue;
			for (size_t k = 0; k < p->n_targets; k++) {
				const struct srvpool *sp = p->targets[k];
				if (sp->port != b->port || strcmp(sp->host, b->host) != 0)
					continue;
				any = true;
				admin_row_begin(&r);
				admin_row_s(&r, p->name);
				admin_row_i(&r, sp->shard);
				admin_row_s(&r, b->host);
				admin_row_i(&r, b->port);
				admin_row_s(&r, role_name(sp->role));
				admin_row_s(&r, b->reason);
				admin_row_s(&r, at);
				admin_row_i(&r, b->until - now);
				admin_row_s(&r, b->source == BAN_SOURCE_ADMIN ? "admin" : "auto");
				admin_row_end(&r);
			}
		}
		if (!any) {
			/* a host no pool uses: no pool, shard or role */
			admin_row_begin(&r);
			admin_row_null(&r);
			admin_row_null(&r);
			admin_row_s(&r, b->host);
			admin_row_i(&r, b->port);
			admin_row_null(&r);
			admin_row_s(&r, b->reason);
			admin_row_s(&r, at);
			admin_row_i(&r, b->until - now);
			admin_row_s(&r, b->source == BAN_SOURCE_ADMIN ? "admin" : "auto");
			admin_row_end(&r);
		}
	}
	admin_res_end(&r);
}

static void show_workers(struct client *c)
{
	static const struct admin_column cols[] = {
		COL_I("worker"), COL_I("pid"), COL_T("started"), COL_I("clients"), COL_I("servers"), COL_I("restarts"),
	};
	struct worker *w = c->w;
	w->cmds->publish_pools(w);
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	for (uint32_t i = 0; i < w->shm->h->n_workers; i++) {
		struct shm_worker *sw = &w->shm->h->workers[i];
		int32_t pid = atomic_load(&sw->pid);
		if (pid <= 0)
			continue;
		char started[40];
		fmt_time(atomic_load(&sw->started), started, sizeof started);
		admin_row_begin(&r);
		admin_row_i(&r, (int64_t)i);
		admin_row_i(&r, pid);
		admin_row_s(&r, started);
		admin_row_i(&r, (int)i == w->id ? w->n_clients : atomic_load(&sw->clients));
		admin_row_i(&r, atomic_load(&sw->servers));
		admin_row_i(&r, atomic_load(&sw->restarts));
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

struct show_command {
	const char *name;
	void (*fn)(struct client *c);
};

/* SHOW STATE: PgBouncer's three flags. paused: every pool paused (PAUSE
 * without a database); suspended: SUSPEND until RESUME (this worker's). */
static void show_state(struct client *c)
{
	static const struct admin_column cols[] = { COL_T("key"), COL_T("value") };
	struct worker *w = c->w;
	bool any = false, all_paused = true;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		any = true;
		all_paused = all_paused && LIST_OWNER(pos, struct pool, node)->paused;
	}
	const char *rows[][2] = {
		{ "active", w->shutting_down ? "no" : "yes" },
		{ "paused", any && all_paused ? "yes" : "no" },
		{ "suspended", w->suspended ? "yes" : "no" },
	};
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
		admin_row_begin(&r);
		admin_row_s(&r, rows[i][0]);
		admin_row_s(&r, rows[i][1]);
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

/* SHOW PEERS: the [peers] pgcat forwards cancel requests to. */
static void show_peers(struct client *c)
{
	static const struct admin_column cols[] = { COL_I("peer_id"), COL_T("host"), COL_I("port"), COL_I("pool_size") };
	const struct config *cfg = c->w->cfg;
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	for (size_t i = 0; i < cfg->n_peers; i++) {
		admin_row_begin(&r);
		admin_row_i(&r, cfg->peers[i].id);
		admin_row_s(&r, cfg->peers[i].host);
		admin_row_i(&r, cfg->peers[i].port);
		admin_row_i(&r, 0);   /* a cancel request is forwarded on a connection of its own */
		admin_row_end(&r);
	}
	admin_res_end(&r);
}

/* SHOW PEER_POOLS: pgcat keeps no pools of connections to its peers
 * (each forwarded cancel request opens its own): no rows. */
static void show_peer_pools(struct client *c)
{
	static const struct admin_column cols[] = { COL_I("peer_id"), COL_I("cl_active_cancel_req"),
						    COL_I("cl_waiting_cancel_req"), COL_I("sv_active_cancel"),
						    COL_I("sv_login") };
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	admin_res_end(&r);
}

/* SHOW DNS_ZONES: pgcat does not watch zones' serial numbers
 * (dns_zone_check_period): no rows. */
static void show_dns_zones(struct client *c)
{
	static const struct admin_column cols[] = { COL_T("zonename"), COL_I("serial"), COL_I("count") };
	struct admin_result r;
	admin_res_begin(&r, c, COLUMNS(cols));
	admin_res_end(&r);
}

/* SHOW HELP: the commands, as a notice (PgBouncer's form). */
static void show_help(struct client *c)
{
	static const char text[] =
		"Console usage\n"
		"\tSHOW HELP|CONFIG|DATABASES|POOLS|CLIENTS|SERVERS|USERS|VERSION\n"
		"\tSHOW STATS|STATS_TOTALS|STATS_AVERAGES|TOTALS|LISTS|MEM|STATE\n"
		"\tSHOW DNS_HOSTS|DNS_ZONES|PEERS|PEER_POOLS\n"
		"\tSHOW SHARDS|BANS|PREPARED_STATEMENTS|WORKERS|ERRORS\n"
		"\tSHOW QUERIES [<db>] [ORDER BY <column> [ASC|DESC]] [LIMIT <n>]\n"
		"\tRESET QUERIES [<db>]\n"
		"\tSHOW RESHARD [TABLES] / RESHARD <db> [HOLD] / RESHARD CUTOVER|CANCEL|CLEANUP [<db>]\n"
		"\tRESHARD PAUSE|RESUME|SWITCH <db> (a peer's part of a cutover)\n"
		"\tSET key = arg\n"
		"\tRELOAD\n"
		"\tPAUSE [<db>]\n"
		"\tRESUME [<db>]\n"
		"\tDISABLE <db>\n"
		"\tENABLE <db>\n"
		"\tRECONNECT [<db>]\n"
		"\tKILL <db>\n"
		"\tKILL_CLIENT <client_id>\n"
		"\tWAIT_CLOSE [<db>]\n"
		"\tBAN host:port [seconds] / UNBAN host:port\n"
		"\tSHUTDOWN\n"
		"\tSHUTDOWN WAIT_FOR_CLIENTS\n"
		"\tSHUTDOWN WAIT_FOR_SERVERS\n"
		"\tUPGRADE";
	uint8_t storage[1024];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_notice(&pb, "NOTICE", "00000", text);
	admin_out(c, &pb);
	admin_complete(c, "SHOW");
}

static const struct show_command show_commands[] = {
	{ "stats", show_stats },
	{ "stats_totals", show_stats_totals },
	{ "stats_averages", show_stats_averages },
	{ "pools", show_pools },
	{ "databases", show_databases },
	{ "servers", show_servers },
	{ "sockets", show_sockets },
	{ "active_sockets", show_active_sockets },
	{ "clients", show_clients },
	{ "users", show_users },
	{ "config", show_config },
	{ "lists", show_lists },
	{ "version", show_version },
	{ "mem", show_mem },
	{ "dns_hosts", show_dns_hosts },
	{ "shards", show_shards },
	{ "bans", show_bans },
	{ "errors", admin_show_errors },
	{ "prepared_statements", show_prepared_statements },
	{ "workers", show_workers },
	{ "totals", show_totals },
	{ "state", show_state },
	{ "peers", show_peers },
	{ "peer_pools", show_peer_pools },
	{ "dns_zones", show_dns_zones },
	{ "help", show_help },
};

bool admin_show(struct client *c, const char *name)
{
	for (size_t i = 0; i < sizeof show_commands / sizeof *show_commands; i++) {
		if (strcasecmp(name, show_commands[i].name) == 0) {
			show_commands[i].fn(c);
			return true;
		}
	}
	return false;
}
