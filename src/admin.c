/* SPDX-License-Identifier: MIT */
/*
 * admin: the admin console (SPEC §7). A client logged in to database
 * "pgcat" or "pgbouncer" is served here instead of being linked to a
 * server. Column names and order follow PgBouncer's, pgcat's own columns
 * come after them. Commands are dispatched from one table.
 */
#include "admin.h"

#include <ctype.h>
#include <signal.h>
#include <stdatomic.h>
#include <netdb.h>
#include <stdarg.h>
#include <event2/buffer.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bans.h"
#include "cancel.h"
#include "client.h"
#include "config.h"
#include "dns.h"
#include "tls.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "prepared.h"
#include "server.h"
#include "shm.h"
#include "sqllex.h"
#include "stats.h"
#include "worker.h"

#define ADMIN_MAX_QUERY 8192
#define ADMIN_ROW_MAX 16384
#define TEXTOID 25
#define INT8OID 20

/* ---- result sets ---- */

/*
 * A column of a result set: its name and its type are written side by side
 * in one table, so the RowDescription and the rows cannot drift apart.
 * Typed drivers (psycopg, asyncpg) parse every value with the loader of the
 * declared type, so one text value in an int8 column makes the whole SHOW
 * unreadable. The types are PgBouncer's: int8 for counts, sizes, ports,
 * pids and times in µs; text for names, addresses, states and timestamps.
 */
enum col_type { COL_TEXT, COL_INT8 };

struct column {
	const char *name;
	enum col_type type;
};

#define COL_T(name) { (name), COL_TEXT }
#define COL_I(name) { (name), COL_INT8 }

struct columns {
	const struct column *v;
	size_t n;
};

#define COLUMNS_INIT(arr) { (arr), sizeof(arr) / sizeof *(arr) }
#define COLUMNS(arr) ((struct columns)COLUMNS_INIT(arr))

struct result {
	struct client *c;         /* where rows go, or... */
	struct shm_dump *dump;    /* ...into this worker's dump slot (c NULL) */
	size_t dump_cap;
	struct columns cols;
	size_t col;               /* the next column of the row being built */
	int rows;
	uint8_t buf[ADMIN_ROW_MAX];
	struct pktbuf pb;
};

static void out_pkt(struct client *c, struct pktbuf *pb)
{
	if (!pb->failed)
		evbuffer_add(client_output(c), pb->data, pb->len);
}

static void res_begin(struct result *r, struct client *c, struct columns cols)
{
	r->c = c;
	r->dump = NULL;
	r->cols = cols;
	r->rows = 0;
	pktbuf_init(&r->pb, r->buf, sizeof r->buf);
	pktbuf_begin(&r->pb, PqMsg_RowDescription);
	pktbuf_put_u16(&r->pb, (uint16_t)cols.n);
	for (size_t i = 0; i < cols.n; i++) {
		bool int8 = cols.v[i].type == COL_INT8;
		pktbuf_put_cstring(&r->pb, cols.v[i].name);
		pktbuf_put_u32(&r->pb, 0);
		pktbuf_put_u16(&r->pb, 0);
		pktbuf_put_u32(&r->pb, int8 ? INT8OID : TEXTOID);
		pktbuf_put_u16(&r->pb, int8 ? 8 : 0xffff);
		pktbuf_put_u32(&r->pb, 0xffffffffu);
		pktbuf_put_u16(&r->pb, 0);
	}
	pktbuf_end(&r->pb);
	out_pkt(c, &r->pb);
}

static void row_begin(struct result *r)
{
	pktbuf_init(&r->pb, r->buf, sizeof r->buf);
	pktbuf_begin(&r->pb, PqMsg_DataRow);
	pktbuf_put_u16(&r->pb, (uint16_t)r->cols.n);
	r->col = 0;
}

/* The column the next value goes to, or NULL (logged) when the row is
 * already full: a bug, but the DataRow keeps the declared column count. */
static const struct column *next_col(struct result *r)
{
	if (r->col >= r->cols.n) {
		log_error("admin: more values than the %zu columns starting with %s", r->cols.n,
			  r->cols.n ? r->cols.v[0].name : "?");
		return NULL;
	}
	return &r->cols.v[r->col++];
}

static void put_value(struct result *r, const char *s)
{
	if (!s) {
		pktbuf_put_u32(&r->pb, 0xffffffffu);
	} else {
		size_t n = strlen(s);
		pktbuf_put_u32(&r->pb, (uint32_t)n);
		pktbuf_put_bytes(&r->pb, s, n);
	}
}

/* NULL: fits a column of any type. */
static void row_null(struct result *r)
{
	if (next_col(r))
		put_value(r, NULL);
}

static void row_s(struct result *r, const char *s)
{
	const struct column *col = next_col(r);
	if (!col)
		return;
	if (s && col->type != COL_TEXT) {
		/* Text would break every typed reader of this column; NULL does not. */
		log_error("admin: text value for int8 column %s", col->name);
		s = NULL;
	}
	put_value(r, s);
}

static void row_i(struct result *r, int64_t v)
{
	const struct column *col = next_col(r);
	if (!col)
		return;
	/* Digits read as text too, but the table and the code disagree. */
	if (col->type != COL_INT8)
		log_error("admin: number for text column %s", col->name);
	char buf[32];
	snprintf(buf, sizeof buf, "%" PRId64, v);
	put_value(r, buf);
}

static void row_end(struct result *r)
{
	if (r->col != r->cols.n) {
		log_error("admin: row with %zu values for %zu columns starting with %s", r->col, r->cols.n,
			  r->cols.v[0].name);
		while (r->col < r->cols.n)
			row_null(r);
	}
	pktbuf_end(&r->pb);
	if (r->dump) {
		if (r->pb.failed || r->dump->len + r->pb.len > r->dump_cap) {
			r->dump->truncated++;
			return;
		}
		memcpy(r->dump->data + r->dump->len, r->pb.data, r->pb.len);
		r->dump->len += (uint32_t)r->pb.len;
		r->dump->rows++;
	} else {
		out_pkt(r->c, &r->pb);
	}
	r->rows++;
}

static void command_complete(struct client *c, const char *tag)
{
	uint8_t storage[128];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_command_complete(&pb, tag);
	out_pkt(c, &pb);
}

static void res_end(struct result *r)
{
	command_complete(r->c, "SHOW");
}

static void send_error(struct client *c, const char *sqlstate, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void send_error(struct client *c, const char *sqlstate, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	uint8_t storage[1024];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_error(&pb, "ERROR", sqlstate, msg);
	out_pkt(c, &pb);
}

static void send_rfq(struct client *c)
{
	uint8_t storage[8];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_ready_for_query(&pb, 'I');
	out_pkt(c, &pb);
}

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

enum stats_view { STATS_VIEW_BOTH, STATS_VIEW_TOTALS, STATS_VIEW_AVERAGES };

static void show_stats_view(struct client *c, enum stats_view view)
{
	static const struct column both[] = {
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
	static const struct column totals[] = {
		COL_T("database"), COL_I("server_assignment_count"), COL_I("xact_count"), COL_I("query_count"),
		COL_I("bytes_received"), COL_I("bytes_sent"), COL_I("xact_time"), COL_I("query_time"),
		COL_I("wait_time"), COL_I("client_parse_count"), COL_I("server_parse_count"), COL_I("bind_count"),
		COL_I("client_login_count"),
	};
	static const struct column avgs[] = {
		COL_T("database"), COL_I("server_assignment_count"), COL_I("xact_count"), COL_I("query_count"),
		COL_I("bytes_received"), COL_I("bytes_sent"), COL_I("xact_time"), COL_I("query_time"),
		COL_I("wait_time"), COL_I("avg_client_parse_count"), COL_I("avg_server_parse_count"),
		COL_I("avg_bind_count"), COL_I("avg_client_login_count"),
	};
	struct worker *w = c->w;
	struct result r;
	res_begin(&r, c,
		  view == STATS_VIEW_BOTH ? COLUMNS(both) : view == STATS_VIEW_TOTALS ? COLUMNS(totals) : COLUMNS(avgs));
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_first_of_name(w, false, p))
			continue;
		struct stats tot, avg;
		db_stats(w, p->name, &tot, &avg);
		row_begin(&r);
		row_s(&r, p->name);
		if (view != STATS_VIEW_AVERAGES)
			for (size_t i = 0; i < N_STAT_ORDER; i++)
				row_i(&r, (int64_t)tot.v[stat_order[i]]);
		if (view != STATS_VIEW_TOTALS)
			for (size_t i = 0; i < N_STAT_ORDER; i++)
				row_i(&r, (int64_t)avg.v[stat_order[i]]);
		if (view == STATS_VIEW_BOTH)
			row_i(&r, (int64_t)tot.v[STAT_QUERY]);
		row_end(&r);
	}
	res_end(&r);
}

static void show_stats(struct client *c) { show_stats_view(c, STATS_VIEW_BOTH); }
static void show_stats_totals(struct client *c) { show_stats_view(c, STATS_VIEW_TOTALS); }
static void show_stats_averages(struct client *c) { show_stats_view(c, STATS_VIEW_AVERAGES); }

static void show_pools(struct client *c)
{
	static const struct column cols[] = {
		COL_T("database"), COL_T("user"), COL_I("cl_active"), COL_I("cl_waiting"),
		COL_I("cl_active_cancel_req"), COL_I("cl_waiting_cancel_req"), COL_I("sv_active"),
		COL_I("sv_active_cancel"), COL_I("sv_being_canceled"), COL_I("sv_idle"), COL_I("sv_used"),
		COL_I("sv_tested"), COL_I("sv_login"), COL_I("maxwait"), COL_I("maxwait_us"), COL_T("pool_mode"),
		COL_T("load_balance_hosts"), COL_I("prepared_hits"), COL_I("prepared_misses"), COL_I("paused"),
	};
	struct worker *w = c->w;
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
	/* This worker's figures fresh; the others' as of their last tick. */
	worker_publish_pools(w);
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		int32_t active, waiting, sv_active, sv_idle, sv_other, sv_login;
		int64_t maxwait;
		shm_gauges_total(w->shm, p->shm_slot, &active, &waiting, &sv_active, &sv_idle, &sv_other, &sv_login,
				 &maxwait);
		struct stats st;
		shm_stats_total(w->shm, p->shm_slot, &st);
		row_begin(&r);
		row_s(&r, p->name);
		row_s(&r, p->user);
		row_i(&r, active);
		row_i(&r, waiting);
		row_i(&r, 0);
		row_i(&r, 0);
		row_i(&r, sv_active);
		row_i(&r, 0);
		row_i(&r, 0);
		row_i(&r, sv_idle);
		row_i(&r, sv_other);
		row_i(&r, 0);
		row_i(&r, sv_login);
		row_i(&r, (int64_t)(maxwait / 1000000));
		row_i(&r, (int64_t)(maxwait % 1000000));
		row_s(&r, config_pool_mode_name(p->mode));
		row_null(&r);
		row_i(&r, (int64_t)st.v[STAT_PREPARED_HITS]);
		row_i(&r, (int64_t)st.v[STAT_PREPARED_MISSES]);
		row_i(&r, p->paused);
		row_end(&r);
	}
	res_end(&r);
}

static const char *role_name(enum server_role role) { return config_server_role_name(role); }

static void show_databases(struct client *c)
{
	static const struct column cols[] = {
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
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		if (!pool_first_of_name(w, false, p) || p->removed)
			continue;
		int clients = 0;
		struct list_node *qp, *qt;
		LIST_FOREACH_SAFE(qp, qt, &w->pools) {
			struct pool *q = LIST_OWNER(qp, struct pool, node);
			if (strcmp(q->name, p->name) == 0)
				clients += q->n_clients;
		}
		for (size_t i = 0; i < p->n_targets; i++) {
			const struct srvpool *sp = p->targets[i];
			int conns = 0;
			LIST_FOREACH_SAFE(qp, qt, &w->pools) {
				struct pool *q = LIST_OWNER(qp, struct pool, node);
				if (strcmp(q->name, p->name) == 0 && i < q->n_targets)
					conns += srvpool_total(q->targets[i]);
			}
			row_begin(&r);
			row_s(&r, p->name);
			row_s(&r, sp->host);
			row_i(&r, sp->port);
			row_s(&r, sp->database);
			row_null(&r);
			row_i(&r, p->pool_size);
			row_i(&r, p->min_pool_size);
			row_i(&r, 0);
			row_i(&r, w->cfg->general.server_lifetime / 1000);
			row_s(&r, config_pool_mode_name(p->mode));
			row_null(&r);
			row_i(&r, 0);
			row_i(&r, conns);
			row_i(&r, w->cfg->general.max_client_conn);
			row_i(&r, clients);
			row_i(&r, p->paused);
			row_i(&r, p->disabled);
			row_i(&r, sp->shard);
			row_s(&r, role_name(sp->role));
			row_i(&r, bans_is_banned(&bans, sp->host, sp->port, now));
			row_i(&r, 0);
			row_end(&r);
		}
	}
	res_end(&r);
}

static const struct column conn_cols[] = {
	COL_T("type"), COL_T("user"), COL_T("database"), COL_T("replication"), COL_T("state"), COL_T("addr"),
	COL_I("port"), COL_T("local_addr"), COL_I("local_port"), COL_T("connect_time"), COL_T("request_time"),
	COL_I("wait"), COL_I("wait_us"), COL_I("close_needed"), COL_T("ptr"), COL_T("link"), COL_I("remote_pid"),
	COL_T("tls"), COL_T("application_name"), COL_I("prepared_statements"), COL_I("id"), COL_I("worker"),
	COL_I("shard"), COL_T("role"), COL_I("prepared_hits"), COL_I("prepared_misses"),
};

static void client_row(struct result *r, const struct client *c, const char *state)
{
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
	row_begin(r);
	row_s(r, "C");
	row_s(r, client_user(c));
	row_s(r, client_database(c));
	row_s(r, "no");
	row_s(r, state);
	char a[CLIENT_ADDR_STRLEN];
	row_s(r, client_addr_str(c, a));
	row_i(r, c->port);
	row_null(r);
	row_i(r, 0);
	row_s(r, ct);
	row_s(r, rt);
	row_i(r, waiting ? (int64_t)(since_us / 1000000) : 0);
	row_i(r, waiting ? (int64_t)(since_us % 1000000) : 0);
	row_i(r, 0);
	row_s(r, ptr);
	row_s(r, c->end.server ? link : NULL);
	row_i(r, c->cancel_pid);
	char tls[96];
	tls_describe(c->io.ssl, tls, sizeof tls);
	row_s(r, tls);
	row_s(r, app ? app->value : "");
	row_i(r, c->end.prep ? c->end.prep->names.n : 0);
	row_i(r, (int64_t)c->id);
	row_i(r, c->w->id);
	row_i(r, c->end.server ? c->end.server->sp->shard : 0);
	row_s(r, c->end.server ? role_name(c->end.server->sp->role) : NULL);
	row_i(r, 0);
	row_i(r, 0);
	row_end(r);
}

/* This worker's clients, as rows of r. */
static void client_rows(struct result *r, struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_active)
		client_row(r, LIST_OWNER(pos, struct client, node), "active");
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_idle) {
		const struct client *x = LIST_OWNER(pos, struct client, node);
		client_row(r, x, x->is_admin ? "active" : "idle");
	}
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct list_node *cp, *ct;
			LIST_FOREACH_SAFE(cp, ct, &p->targets[i]->waiters)
				client_row(r, client_of_waiter(LIST_OWNER(cp, struct pool_waiter, node)), "waiting");
		}
	}
}

static void show_clients(struct client *c)
{
	struct result r;
	res_begin(&r, c, COLUMNS(conn_cols));
	client_rows(&r, c->w);
	res_end(&r);
}

static const char *server_show_state(const struct server *s)
{
	switch (s->state) {
	case SERVER_CONNECTING:
	case SERVER_LOGIN: return "login";
	case SERVER_IDLE: return "idle";
	case SERVER_SYNCING:
	case SERVER_ACTIVE: return "active";
	case SERVER_DRAINING:
	case SERVER_RESETTING: return "used";
	case SERVER_CANCEL_WAIT: return "being_canceled";
	case SERVER_CLOSED: return "closed";
	}
	return "?";
}

static void server_rows(struct result *r, struct list_node *head)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, head) {
		const struct server *s = LIST_OWNER(pos, struct server, node);
		char ct[40], rt[40], ptr[32], link[32];
		fmt_time(s->connect_wall, ct, sizeof ct);
		fmt_time(s->connect_wall + (int64_t)((s->last_used_us - s->connect_us) / 1000000), rt, sizeof rt);
		snprintf(ptr, sizeof ptr, "S-%" PRIu64, s->id);
		if (s->client)
			snprintf(link, sizeof link, "C-%" PRIu64, s->client->client_id);
		const struct param *app = params_get(&s->params, "application_name");
		row_begin(r);
		row_s(r, "S");
		row_s(r, s->sp->pool->user);
		row_s(r, s->sp->pool->name);
		row_s(r, "no");
		row_s(r, server_show_state(s));
		row_s(r, s->sp->host);
		row_i(r, s->sp->port);
		row_null(r);
		row_i(r, 0);
		row_s(r, ct);
		row_s(r, rt);
		row_i(r, 0);
		row_i(r, 0);
		row_i(r, s->close_when_idle);
		row_s(r, ptr);
		row_s(r, s->client ? link : NULL);
		row_i(r, s->backend_pid);
		char tls[96];
		tls_describe(s->io.ssl, tls, sizeof tls);
		row_s(r, tls);
		row_s(r, app ? app->value : "");
		row_i(r, s->prep ? s->prep->set.n : 0);
		row_i(r, (int64_t)s->id);
		row_i(r, s->w->id);
		row_i(r, s->sp->shard);
		row_s(r, role_name(s->sp->role));
		row_i(r, s->prep ? (int64_t)s->prep->hits : 0);
		row_i(r, s->prep ? (int64_t)s->prep->misses : 0);
		row_end(r);
	}
}

/* This worker's server connections, as rows of r. */
static void all_server_rows(struct result *r, struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = p->targets[i];
			server_rows(r, &sp->active);
			server_rows(r, &sp->idle);
			server_rows(r, &sp->other);
			server_rows(r, &sp->opening);
		}
	}
}

static void show_servers(struct client *c)
{
	struct result r;
	res_begin(&r, c, COLUMNS(conn_cols));
	all_server_rows(&r, c->w);
	res_end(&r);
}

/* ---- SHOW CLIENTS / SERVERS across workers ---- */

/* This worker's prepared statements (each worker keeps its own registry,
 * so one text can be listed once per worker). */
static const struct column prep_cols[] = {
	COL_T("pool"), COL_T("user"), COL_T("name"), COL_T("query"), COL_I("servers"), COL_I("hits"),
	COL_I("misses"), COL_I("worker"),
};

static void prepared_rows(struct result *r, struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (uint32_t b = 0; b < p->prep.n_buckets; b++)
			for (const struct prep_stmt *st = p->prep.buckets[b]; st; st = st->hnext) {
				char name[PREP_GNAME_MAX];
				snprintf(name, sizeof name, "pgcat_%" PRIx64, st->id);
				row_begin(r);
				row_s(r, p->name);
				row_s(r, p->user);
				row_s(r, name);
				row_s(r, (const char *)st->key);
				row_i(r, st->servers);
				row_i(r, (int64_t)st->hits);
				row_i(r, (int64_t)st->misses);
				row_i(r, w->id);
				row_end(r);
			}
	}
}

static void show_prepared_statements(struct client *c)
{
	struct result r;
	res_begin(&r, c, COLUMNS(prep_cols));
	prepared_rows(&r, c->w);
	res_end(&r);
}

static void (*const dump_producers[SHM_DUMP__COUNT])(struct result *, struct worker *) = {
	[SHM_DUMP_CLIENTS] = client_rows,
	[SHM_DUMP_SERVERS] = all_server_rows,
	[SHM_DUMP_PREPARED] = prepared_rows,
};
static const char *const dump_names[SHM_DUMP__COUNT] = {
	[SHM_DUMP_CLIENTS] = "clients",
	[SHM_DUMP_SERVERS] = "servers",
	[SHM_DUMP_PREPARED] = "prepared_statements",
};
static const struct columns dump_cols[SHM_DUMP__COUNT] = {
	[SHM_DUMP_CLIENTS] = COLUMNS_INIT(conn_cols),
	[SHM_DUMP_SERVERS] = COLUMNS_INIT(conn_cols),
	[SHM_DUMP_PREPARED] = COLUMNS_INIT(prep_cols),
};

static int dump_kind(const char *name)
{
	for (int k = 0; k < SHM_DUMP__COUNT; k++)
		if (strcasecmp(name, dump_names[k]) == 0)
			return k;
	return -1;
}

void admin_dump(struct worker *w, const char *what, uint64_t seq)
{
	int kind = dump_kind(what);
	if (kind < 0)
		return;
	struct result r;
	memset(&r, 0, sizeof r);
	r.dump = shm_dump_slot(w->shm, (enum shm_dump_kind)kind, w->id);
	r.dump_cap = shm_dump_capacity(w->shm);
	r.cols = dump_cols[kind];
	shm_dump_begin(r.dump);
	dump_producers[kind](&r, w);
	shm_dump_commit(r.dump, seq);
}

/* The console's worker: its own rows, then every other worker's. */
static void finish_dump(struct client *c, int kind, uint64_t seq)
{
	struct worker *w = c->w;
	struct result r;
	res_begin(&r, c, dump_cols[kind]);
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
		evbuffer_add(client_output(c), data, len);
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
		out_pkt(c, &pb);
	}
	res_end(&r);
}

static void show_users(struct client *c)
{
	static const struct column cols[] = {
		COL_T("name"), COL_I("pool_size"), COL_I("reserve_pool_size"), COL_T("pool_mode"),
		COL_I("max_user_connections"), COL_I("current_connections"), COL_I("max_user_client_connections"),
		COL_I("current_client_connections"),
	};
	struct worker *w = c->w;
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
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
		int conns = 0, clients = 0;
		LIST_FOREACH_SAFE(qp, qt, &w->pools) {
			struct pool *q = LIST_OWNER(qp, struct pool, node);
			if (strcmp(q->user, p->user) != 0)
				continue;
			clients += q->n_clients;
			for (size_t i = 0; i < q->n_targets; i++)
				conns += srvpool_total(q->targets[i]);
		}
		row_begin(&r);
		row_s(&r, p->user);
		row_i(&r, p->pool_size);
		row_i(&r, 0);
		row_s(&r, config_pool_mode_name(p->mode));
		row_i(&r, 0);
		row_i(&r, conns);
		row_i(&r, 0);
		row_i(&r, clients);
		row_end(&r);
	}
	res_end(&r);
}

static void show_config(struct client *c)
{
	/* value and default as text: the keys have all sorts of types */
	static const struct column cols[] = { COL_T("key"), COL_T("value"), COL_T("default"), COL_T("changeable") };
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
	size_t n;
	const struct config_key_info *keys = config_general_keys(&n);
	for (size_t i = 0; i < n; i++) {
		char value[1024];
		if (!config_general_value(c->w->cfg, keys[i].name, value, sizeof value))
			value[0] = '\0';
		row_begin(&r);
		row_s(&r, keys[i].name);
		row_s(&r, value);
		row_s(&r, keys[i].default_value);
		row_s(&r, keys[i].reloadable ? "yes" : "no");
		row_end(&r);
	}
	res_end(&r);
}

static void show_lists(struct client *c)
{
	static const struct column cols[] = { COL_T("list"), COL_I("items") };
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
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
	for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
		row_begin(&r);
		row_s(&r, rows[i].name);
		row_i(&r, rows[i].v);
		row_end(&r);
	}
	res_end(&r);
}

static void show_version(struct client *c)
{
	static const struct column cols[] = { COL_T("version") };
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
	row_begin(&r);
	row_s(&r, "pgcat " PACKAGE_VERSION);
	row_end(&r);
	res_end(&r);
}

static void show_mem(struct client *c)
{
	static const struct column cols[] = {
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
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
	for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
		row_begin(&r);
		row_s(&r, rows[i].name);
		row_i(&r, (int64_t)rows[i].size);
		row_i(&r, rows[i].used);
		row_i(&r, 0);
		row_i(&r, (int64_t)(rows[i].size * (size_t)rows[i].used));
		row_end(&r);
	}
	res_end(&r);
}

static void show_dns_hosts(struct client *c)
{
	static const struct column cols[] = { COL_T("hostname"), COL_I("ttl"), COL_T("addrs") };
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
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
		row_begin(&r);
		row_s(&r, e->host);
		row_i(&r, e->state == DNS_OK && e->expires_us > w->now_us ? (int64_t)((e->expires_us - w->now_us) / 1000000)
									   : 0);
		row_s(&r, addrs);
		row_end(&r);
	}
	res_end(&r);
}

static void show_shards(struct client *c)
{
	static const struct column cols[] = {
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
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
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
			row_begin(&r);
			row_s(&r, p->name);
			row_i(&r, sp->shard);
			row_s(&r, sp->host);
			row_i(&r, sp->port);
			row_s(&r, role_name(sp->role));
			row_i(&r, b != NULL);
			row_s(&r, b ? b->reason : NULL);
			row_i(&r, b ? b->until - now : 0);
			row_i(&r, sv_active);  /* each active server serves one client */
			row_i(&r, sv_active);
			row_i(&r, sv_idle);
			row_i(&r, (int64_t)xacts);
			for (int v = 0; v < SHM_ROUTE_VIA; v++)
				row_i(&r, (int64_t)routed[v]);
			int64_t lag_bytes, lag_ms;
			shm_lag_get(w->shm, sp->shm_target, &lag_bytes, &lag_ms);
			if (lag_bytes >= 0)
				row_i(&r, lag_bytes);
			else
				row_null(&r);
			if (lag_ms >= 0)
				row_i(&r, lag_ms);
			else
				row_null(&r);
			row_end(&r);
		}
	}
	res_end(&r);
}

static void show_bans(struct client *c)
{
	static const struct column cols[] = {
		COL_T("pool"), COL_I("shard"), COL_T("host"), COL_I("port"), COL_T("role"), COL_T("reason"),
		COL_T("banned_at"), COL_I("remaining_s"), COL_T("source"),
	};
	struct worker *w = c->w;
	int64_t now = (int64_t)time(NULL);
	struct bans bans;
	shm_bans_copy(w->shm, &bans);
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
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
				row_begin(&r);
				row_s(&r, p->name);
				row_i(&r, sp->shard);
				row_s(&r, b->host);
				row_i(&r, b->port);
				row_s(&r, role_name(sp->role));
				row_s(&r, b->reason);
				row_s(&r, at);
				row_i(&r, b->until - now);
				row_s(&r, b->source == BAN_SOURCE_ADMIN ? "admin" : "auto");
				row_end(&r);
			}
		}
		if (!any) {
			/* a host no pool uses: no pool, shard or role */
			row_begin(&r);
			row_null(&r);
			row_null(&r);
			row_s(&r, b->host);
			row_i(&r, b->port);
			row_null(&r);
			row_s(&r, b->reason);
			row_s(&r, at);
			row_i(&r, b->until - now);
			row_s(&r, b->source == BAN_SOURCE_ADMIN ? "admin" : "auto");
			row_end(&r);
		}
	}
	res_end(&r);
}

static void show_workers(struct client *c)
{
	static const struct column cols[] = {
		COL_I("worker"), COL_I("pid"), COL_T("started"), COL_I("clients"), COL_I("servers"), COL_I("restarts"),
	};
	struct worker *w = c->w;
	worker_publish_pools(w);
	struct result r;
	res_begin(&r, c, COLUMNS(cols));
	for (uint32_t i = 0; i < w->shm->h->n_workers; i++) {
		struct shm_worker *sw = &w->shm->h->workers[i];
		int32_t pid = atomic_load(&sw->pid);
		if (pid <= 0)
			continue;
		char started[40];
		fmt_time(atomic_load(&sw->started), started, sizeof started);
		row_begin(&r);
		row_i(&r, (int64_t)i);
		row_i(&r, pid);
		row_s(&r, started);
		row_i(&r, (int)i == w->id ? w->n_clients : atomic_load(&sw->clients));
		row_i(&r, atomic_load(&sw->servers));
		row_i(&r, atomic_load(&sw->restarts));
		row_end(&r);
	}
	res_end(&r);
}

struct show_command {
	const char *name;
	void (*fn)(struct client *c);
};

static const struct show_command show_commands[] = {
	{ "stats", show_stats },
	{ "stats_totals", show_stats_totals },
	{ "stats_averages", show_stats_averages },
	{ "pools", show_pools },
	{ "databases", show_databases },
	{ "servers", show_servers },
	{ "clients", show_clients },
	{ "users", show_users },
	{ "config", show_config },
	{ "lists", show_lists },
	{ "version", show_version },
	{ "mem", show_mem },
	{ "dns_hosts", show_dns_hosts },
	{ "shards", show_shards },
	{ "bans", show_bans },
	{ "prepared_statements", show_prepared_statements },
	{ "workers", show_workers },
};

/* ---- other commands ---- */

/* Words of the statement, copies as written (is() compares them in any
 * case): split at whitespace (sqllex_is_cspace) and nothing else, so a
 * quote or a comment is part of a word. */
#define MAX_WORDS 8
struct words {
	char buf[ADMIN_MAX_QUERY + 1];
	char *w[MAX_WORDS];
	int n;
	const char *rest[MAX_WORDS];  /* the original text from word i on */
};

static void split_words(const char *sql, struct words *ws)
{
	snprintf(ws->buf, sizeof ws->buf, "%s", sql);
	size_t len = strlen(ws->buf), i = 0;
	ws->n = 0;
	while (ws->n < MAX_WORDS) {
		i = sqllex_skip_cspace(ws->buf, len, i);
		if (i == len)
			break;
		ws->rest[ws->n] = sql + i;
		ws->w[ws->n++] = ws->buf + i;
		while (i < len && !sqllex_is_cspace((unsigned char)ws->buf[i]))
			i++;
		if (i < len)
			ws->buf[i++] = '\0';
	}
}

static bool is(const struct words *ws, int i, const char *word)
{
	return i < ws->n && strcasecmp(ws->w[i], word) == 0;
}

static bool parse_host_port(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s)
		return false;
	const char *h = s;
	size_t hl = (size_t)(colon - s);
	if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl == 0 || hl >= hostlen)
		return false;
	char *end;
	long p = strtol(colon + 1, &end, 10);
	if (*end || p < 1 || p > 65535)
		return false;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (int)p;
	return true;
}

/* A reply that waits for the other workers (the client's kind_state). */
struct admin_pending {
	uint64_t seq;
	bool drain;        /* PAUSE: and for the pools to drain */
	int dump;          /* SHOW CLIENTS/SERVERS: the shm_dump_kind; -1: a command */
	char tag[16];
	char db[64];
};

/* A command for every worker: reply once they all applied it (and, for
 * PAUSE, once the pools drained), else later from the janitor. Returns
 * true when the reply went out now. */
static bool broadcast(struct client *c, enum shm_admin_command cmd, const char *arg, const char *value,
		      const char *tag, bool drain)
{
	struct worker *w = c->w;
	uint64_t seq = shm_admin_post(w->shm, w->id, cmd, arg, value);
	struct admin_pending *ap;
	if ((shm_admin_applied_by_all(w->shm, w->id, seq) &&
	     (!drain || pool_paused_drained(w, arg && arg[0] ? arg : NULL))) ||
	    !(ap = calloc(1, sizeof *ap))) {
		/* (Out of memory: the command is posted; the reply cannot wait.) */
		command_complete(c, tag);
		return true;
	}
	ap->seq = seq;
	ap->drain = drain;
	ap->dump = -1;
	snprintf(ap->tag, sizeof ap->tag, "%s", tag);
	snprintf(ap->db, sizeof ap->db, "%s", arg ? arg : "");
	free(c->kind_state);
	c->kind_state = ap;
	return false;
}

/* SHOW CLIENTS / SERVERS with several workers: every other worker writes
 * its rows into shared memory at its next janitor tick; the reply goes
 * out when all have (true: already). */
static bool show_across_workers(struct client *c, int kind)
{
	struct worker *w = c->w;
	uint64_t seq = shm_admin_post(w->shm, w->id, SHM_ADMIN_DUMP, dump_names[kind], NULL);
	struct admin_pending *ap;
	if (shm_admin_applied_by_all(w->shm, w->id, seq) || !(ap = calloc(1, sizeof *ap))) {
		finish_dump(c, kind, seq);
		return true;
	}
	ap->seq = seq;
	ap->dump = kind;
	free(c->kind_state);
	c->kind_state = ap;
	return false;
}

void admin_janitor(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_idle) {
		struct client *c = LIST_OWNER(pos, struct client, node);
		struct admin_pending *ap = c->kind_state;
		if (!c->is_admin || !ap)
			continue;
		if (!shm_admin_applied_by_all(w->shm, w->id, ap->seq))
			continue;
		if (ap->drain && !pool_paused_drained(w, ap->db[0] ? ap->db : NULL))
			continue;
		c->kind_state = NULL;
		if (ap->dump >= 0)
			finish_dump(c, ap->dump, ap->seq);
		else
			command_complete(c, ap->tag);
		free(ap);
		send_rfq(c);
		client_process(c);
	}
}

/* Returns false when the reply is deferred (no ReadyForQuery yet). */
static bool run_command(struct client *c, const char *sql)
{
	struct worker *w = c->w;
	struct words ws;
	split_words(sql, &ws);
	if (ws.n == 0) {
		uint8_t msg[5] = { PqMsg_EmptyQueryResponse, 0, 0, 0, 4 };
		evbuffer_add(client_output(c), msg, sizeof msg);
		return true;
	}
	if (is(&ws, 0, "show")) {
		if (ws.n != 2) {
			send_error(c, "42601", "SHOW needs exactly one name, e.g. SHOW POOLS");
			return true;
		}
		int kind = dump_kind(ws.w[1]);
		if (kind >= 0 && w->shm->h->n_workers > 1)
			return show_across_workers(c, kind);
		for (size_t i = 0; i < sizeof show_commands / sizeof *show_commands; i++) {
			if (strcasecmp(ws.w[1], show_commands[i].name) == 0) {
				show_commands[i].fn(c);
				return true;
			}
		}
		send_error(c, "42704", "unknown SHOW command: %s", ws.w[1]);
		return true;
	}
	const char *db = ws.n >= 2 ? ws.w[1] : NULL;
	if (is(&ws, 0, "reload") && ws.n == 1) {
		char err[512];
		if (worker_reload(w, err, sizeof err)) {
			/* The supervisor passes it on to the other workers. */
			if (w->shm->h->n_workers > 1)
				kill(getppid(), SIGHUP);
			command_complete(c, "RELOAD");
		} else
			send_error(c, "F0000", "reload failed, old configuration kept: %s", err);
		return true;
	}
	if ((is(&ws, 0, "pause") || is(&ws, 0, "resume") || is(&ws, 0, "reconnect")) && ws.n <= 2) {
		int n;
		enum shm_admin_command cmd;
		if (is(&ws, 0, "pause")) {
			n = pool_pause(w, db);
			cmd = SHM_ADMIN_PAUSE;
		} else if (is(&ws, 0, "resume")) {
			n = pool_resume(w, db);
			cmd = SHM_ADMIN_RESUME;
		} else {
			n = pool_reconnect(w, db);
			cmd = SHM_ADMIN_RECONNECT;
		}
		if (db && n == 0) {
			send_error(c, "3D000", "no such database: %s", db);
			return true;
		}
		log_info("admin: %s %s", ws.w[0], db ? db : "(all)");
		char tag[16];
		snprintf(tag, sizeof tag, "%s", ws.w[0]);
		for (char *t = tag; *t; t++)
			*t = (char)toupper((unsigned char)*t);
		return broadcast(c, cmd, db, NULL, tag, cmd == SHM_ADMIN_PAUSE);
	}
	if ((is(&ws, 0, "disable") || is(&ws, 0, "enable") || is(&ws, 0, "kill")) && ws.n == 2) {
		int n = is(&ws, 0, "kill") ? worker_kill(w, db) : pool_set_disabled(w, db, is(&ws, 0, "disable"));
		if (n == 0) {
			send_error(c, "3D000", "no such database: %s", db);
			return true;
		}
		log_info("admin: %s %s", ws.w[0], db);
		return broadcast(c,
				 is(&ws, 0, "kill") ? SHM_ADMIN_KILL : is(&ws, 0, "disable") ? SHM_ADMIN_DISABLE : SHM_ADMIN_ENABLE,
				 db, NULL, is(&ws, 0, "kill") ? "KILL" : is(&ws, 0, "disable") ? "DISABLE" : "ENABLE", false);
	}
	if (is(&ws, 0, "shutdown") && ws.n == 1) {
		log_info("admin: SHUTDOWN");
		command_complete(c, "SHUTDOWN");
		/* The whole instance: the supervisor tells every worker. */
		kill(getppid(), SIGTERM);
		worker_begin_shutdown(w);
		return true;
	}
	if ((is(&ws, 0, "ban") && (ws.n == 2 || ws.n == 3)) || (is(&ws, 0, "unban") && ws.n == 2)) {
		char host[256];
		int port;
		if (!parse_host_port(ws.w[1], host, sizeof host, &port)) {
			send_error(c, "22023", "expected host:port, got \"%s\"", ws.w[1]);
			return true;
		}
		if (is(&ws, 0, "unban")) {
			(void)shm_ban_clear(w->shm, host, port);
			log_info("admin: unban %s:%d", host, port);
			command_complete(c, "UNBAN");
			return true;
		}
		long secs = w->cfg->general.ban_time;
		if (ws.n == 3) {
			char *end;
			secs = strtol(ws.w[2], &end, 10);
			if (*end || secs < 1 || secs > 86400 * 365) {
				send_error(c, "22023", "ban time must be a number of seconds, got \"%s\"", ws.w[2]);
				return true;
			}
		}
		if (!shm_ban_set(w->shm, host, port, (int64_t)time(NULL), (int)secs, BAN_SOURCE_ADMIN, "admin")) {
			send_error(c, "53000", "ban table is full");
			return true;
		}
		log_info("admin: ban %s:%d for %ld s", host, port, secs);
		command_complete(c, "BAN");
		return true;
	}
	if (is(&ws, 0, "set") && ws.n >= 3) {
		/* SET key = value | SET key TO value */
		const char *key = ws.w[1];
		char keybuf[128];
		const char *value;
		char *eq = strchr(key, '=');
		if (eq) {
			/* "key=value" or "key=" */
			snprintf(keybuf, sizeof keybuf, "%.*s", (int)(eq - key), key);
			key = keybuf;
			value = eq[1] ? ws.rest[1] + (eq - ws.w[1]) + 1 : (ws.n >= 3 ? ws.rest[2] : "");
		} else if (strcmp(ws.w[2], "=") == 0 || strcasecmp(ws.w[2], "to") == 0) {
			value = ws.n >= 4 ? ws.rest[3] : "";
		} else if (ws.w[2][0] == '=') {
			value = ws.rest[2] + 1;
		} else {
			send_error(c, "42601", "expected SET key = value");
			return true;
		}
		char err[256];
		if (!config_general_set(w->cfg, key, value, err, sizeof err)) {
			send_error(c, "22023", "%s", err);
			return true;
		}
		log_set_level(w->cfg->general.log_level);
		pool_reapply_general(w);
		log_info("admin: SET %s", key);
		return broadcast(c, SHM_ADMIN_SET, key, value, "SET", false);
	}
	send_error(c, "42601", "unknown admin command: %s", sql);
	return true;
}

static void trim_statement(char *s)
{
	size_t n = strlen(s);
	while (n > 0 && (isspace((unsigned char)s[n - 1]) || s[n - 1] == ';'))
		s[--n] = '\0';
}

/* The idle client's message whose header is f. false: more bytes are
 * needed, or the reply to the previous command is still pending. */
static bool admin_message(struct client *c, const struct proto_frame *f)
{
	struct evbuffer *in = c->io.in;
	uint32_t total = f->len + 1;
	if (c->kind_state)
		return false;   /* the reply to the previous command comes first */
	switch (f->type) {
	case PqMsg_Query: {
		if (total > ADMIN_MAX_QUERY) {
			client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "admin command too long");
			return true;
		}
		if (evbuffer_get_length(in) < total)
			return false;
		char sql[ADMIN_MAX_QUERY + 1];
		evbuffer_remove(in, sql, total);
		size_t n = f->len - 4;
		if (n == 0 || sql[5 + n - 1] != '\0') {
			client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "malformed Query message");
			return true;
		}
		memmove(sql, sql + 5, n);
		trim_statement(sql);
		log_debug("admin C-%llu: %s", (unsigned long long)c->id, sql);
		if (run_command(c, sql) && c->state != CLIENT_CLOSED)
			send_rfq(c);
		return true;
	}
	case PqMsg_Sync:
		evbuffer_drain(in, total);
		send_rfq(c);
		return true;
	default:
		/* Extended protocol, COPY, function calls: not here. */
		client_discard_message(c, total);
		send_error(c, SQLSTATE_FEATURE_NOT_SUPPORTED, "the admin console speaks the simple query protocol only");
		if (f->type == PqMsg_FunctionCall)
			send_rfq(c);
		else
			c->skip_to_sync = true;
		return true;
	}
}

/* Login accepted: the welcome (AuthenticationOk ... ReadyForQuery). */
static void admin_welcome(struct client *c)
{
	uint8_t storage[1024];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_auth_request(&pb, AUTH_REQ_OK, NULL, 0);
	/* Enough for psql and drivers; the version says what this is. */
	pktbuf_parameter_status(&pb, "server_version", "15.0 (pgcat " PACKAGE_VERSION ")");
	pktbuf_parameter_status(&pb, "server_encoding", "UTF8");
	pktbuf_parameter_status(&pb, "client_encoding", "UTF8");
	pktbuf_parameter_status(&pb, "DateStyle", "ISO, MDY");
	pktbuf_parameter_status(&pb, "TimeZone", "UTC");
	pktbuf_parameter_status(&pb, "integer_datetimes", "on");
	pktbuf_parameter_status(&pb, "standard_conforming_strings", "on");
	pktbuf_parameter_status(&pb, "application_name", "");
	if (!client_finish_welcome(c, &pb))
		return;
	char a[CLIENT_ADDR_STRLEN];
	log_info("C-%llu %s@%s %s:%d: admin console login", (unsigned long long)c->id, client_user(c), client_database(c),
		 client_addr_str(c, a), c->port);
	client_process(c);
}

const struct session_ops admin_session = {
	.name = "admin",
	.welcome = admin_welcome,
	.message = admin_message,
};
