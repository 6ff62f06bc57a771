/* SPDX-License-Identifier: MIT */
/*
 * worker: the per-process context and its event loop — listeners, signals,
 * the janitor timer, deferred frees and graceful shutdown. It hands sockets
 * to the client machine and never reads a protocol byte itself.
 */
#include "worker.h"

#include "dns.h"
#include "tls.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "auth_md5.h"
#include "client.h"
#include "config.h"
#include "fanout.h"
#include "auth_query.h"
#include "lagmon.h"
#include "reshard.h"
#include "twophase.h"
#include "twophase_check.h"
#include "twophase_recover.h"
#include "notify.h"
#include "login.h"
#include "handover.h"
#include "log.h"
#include "proto.h"
#include "pool.h"
#include "server.h"
#include "session_normal.h"
#include "session_replication.h"
#include "admin.h"
#include "admin_ops.h"
#include "admin_show.h"
#include "auth_scram.h"
#include "kdf.h"
#include "offload.h"
#include "prometheus.h"
#include "qshape.h"
#include "stats.h"

#define JANITOR_INTERVAL_MS 100

/* Derive the admin console's SCRAM verifier from admin_password. */
static void admin_credentials(struct worker *w)
{
	const char *pw = w->cfg->general.admin_password;
	w->have_admin_scram = false;
	if (!pw || !pw[0] || pg_md5_is_stored(pw))
		return;
	if (strncmp(pw, "SCRAM-SHA-256$", 14) == 0) {
		w->have_admin_scram = scram_secret_parse(pw, &w->admin_scram);
		return;
	}
	uint8_t salt[16];
	if (pg_random_bytes(salt, sizeof salt))
		w->have_admin_scram = scram_secret_from_password(pw, salt, sizeof salt, SCRAM_DEFAULT_ITERATIONS,
								 &w->admin_scram);
}

static int64_t file_mtime(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (int64_t)st.st_mtime : -1;
}

static void stats_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	int period = w->cfg->general.stats_period;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		struct stats d;
		for (int i = 0; i < STAT__COUNT; i++)
			d.v[i] = p->stats->v[i] - p->stats_prev.v[i];
		struct stats *a = p->stats_avg;
		for (int i = 0; i < STAT__COUNT; i++)
			a->v[i] = d.v[i] / (uint64_t)period;
		/* Times are means per event, not per second (as PgBouncer's avg_*_time). */
		a->v[STAT_XACT_TIME] = d.v[STAT_XACT] ? d.v[STAT_XACT_TIME] / d.v[STAT_XACT] : 0;
		a->v[STAT_QUERY_TIME] = d.v[STAT_QUERY] ? d.v[STAT_QUERY_TIME] / d.v[STAT_QUERY] : 0;
		a->v[STAT_WAIT_TIME] = d.v[STAT_SERVER_ASSIGNMENT] ? d.v[STAT_WAIT_TIME] / d.v[STAT_SERVER_ASSIGNMENT] : 0;
		p->stats_prev = *p->stats;
	}
	struct timeval tv = { period, 0 };
	evtimer_add(w->stats_timer, &tv);
}

static void listener_options(struct worker *w, struct evconnlistener *l);
static bool reload_apply(struct worker *w, struct config *cfg, char *err, size_t errlen);

/* A reload refused (event "reload", outcome rejected; the message as
 * before: why, in parentheses, when given). */
static void log_reload_rejected(const char *why, const char *error)
{
	struct log_field f[] = { { "outcome", "rejected", 0 }, { "error", error, 0 } };
	if (why)
		log_event(LOG_LEVEL_ERROR, "reload", f, 2, NULL, "reload rejected (%s): the old configuration stays in force",
			  why);
	else
		log_event(LOG_LEVEL_ERROR, "reload", f, 2, NULL, "reload rejected: the old configuration stays in force");
}

/* Reload number n (w->reload.started) is over, applied or not: what an
 * admin RELOAD waiting since it or a reload it replaced answers. */
static void reload_end(struct worker *w, uint64_t n, bool failed, const char *err)
{
	w->reload.ended = n;
	w->reload.failed = failed;
	snprintf(w->reload.error, sizeof w->reload.error, "%s", failed ? err : "");
}

/* The check a reload waited for (worker_reload) is over: apply, or refuse
 * as a whole (each shard at 0 is logged by the check). */
static void reload_checked(struct twophase_check *chk, bool refused, void *arg)
{
	struct worker *w = arg;
	struct config *cfg = w->reload.cfg;
	w->reload.check = NULL;
	w->reload.cfg = NULL;
	char err[sizeof w->reload.error];
	snprintf(err, sizeof err, "%s", twophase_check_error(chk));
	twophase_check_free(chk);
	worker_update_clock(w);
	if (refused) {
		log_reload_rejected("two_phase_commit, see above", err);
		config_free(cfg);
		reload_end(w, w->reload.started, true, err);
		return;
	}
	bool ok = reload_apply(w, cfg, err, sizeof err);
	reload_end(w, w->reload.started, !ok, err);
}

bool worker_reload(struct worker *w, char *err, size_t errlen)
{
	struct config_problems problems = { 0 };
	struct config *cfg = config_load(w->config_path, &problems);
	for (size_t i = 0; i < problems.n; i++) {
		const struct config_problem *pr = &problems.items[i];
		if (pr->kind == CONFIG_PROBLEM_ERROR)
			log_error("reload: %s", pr->message);
		else
			log_warning("reload: %s", pr->message);
	}
	if (!cfg) {
		const char *first = "configuration is invalid";
		for (size_t i = 0; i < problems.n; i++)
			if (problems.items[i].kind == CONFIG_PROBLEM_ERROR) {
				first = problems.items[i].message;
				break;
			}
		snprintf(err, errlen, "%s", first);
		config_problems_free(&problems);
		log_reload_rejected(NULL, err);
		return false;
	}
	config_problems_free(&problems);
	const struct config_general *og = &w->cfg->general, *ng = &cfg->general;
	/* Fixed at startup: keep the running values, say so. */
	if (og->listen_port != ng->listen_port || og->workers != ng->workers ||
	    strcmp(og->unix_socket_dir, ng->unix_socket_dir) != 0 || og->n_listen_addr != ng->n_listen_addr)
		log_warning("reload: listen_addr, listen_port, unix_socket_dir and workers need a restart; "
			    "keeping the running values");
	if (og->io_engine != ng->io_engine)
		log_warning("reload: io_engine needs a restart; the engine in use stays (SHOW CONFIG)");
	if (strcmp(og->state_dir, ng->state_dir) != 0)
		log_warning("reload: state_dir needs a restart; the decision log stays in %s", og->state_dir);
	/* A reload still waiting for its check gives way: this one read the
	 * file as it is now. */
	if (w->reload.check) {
		log_info("reload: the reload waiting for its two_phase_commit check is replaced by this one");
		twophase_check_free(w->reload.check);
		config_free(w->reload.cfg);
		w->reload.check = NULL;
		w->reload.cfg = NULL;
	}
	/* Numbered from here on: its end answers an admin RELOAD waiting for
	 * it or for the reload it replaced (reload_end). */
	uint64_t n = ++w->reload.started;
	/* two_phase_commit on for shards not checked with it: nothing changes
	 * until every one answered (or gave up), so that a shard that cannot
	 * PREPARE refuses the reload as a whole (reload_checked). The check
	 * needs the loop: the reload goes on from there, and its verdict is
	 * logged. Any other reload is applied here and now. */
	if (twophase_check_needed(cfg, w->cfg)) {
		w->reload.cfg = cfg;
		w->reload.check = twophase_check_start(w, cfg, w->cfg, "the reload is refused and the old configuration "
						       "stays in force", reload_checked, w);
		if (!w->reload.check) {
			w->reload.cfg = NULL;
			config_free(cfg);
			snprintf(err, errlen, "out of memory");
			log_reload_rejected(err, err);
			reload_end(w, n, true, err);
			return false;
		}
		log_info("reload: two_phase_commit: asking the shards for max_prepared_transactions first; the new "
			 "configuration is applied after (within connect_timeout)");
		return true;
	}
	bool ok = reload_apply(w, cfg, err, errlen);
	reload_end(w, n, !ok, err);
	return ok;
}

/* The rest of a reload, on a configuration that passed every check; cfg
 * is taken (freed on failure). */
static bool reload_apply(struct worker *w, struct config *cfg, char *err, size_t errlen)
{
	/* A finished reshard's layout, as state_dir says now (a reload that
	 * waited for its two-phase check may have been read before a cutover). */
	reshard_overlay(cfg);
	const struct config_general *og = &w->cfg->general, *ng = &cfg->general;
	/* New certificates and keys are read now: a reload that cannot read
	 * them fails as a whole, and the running contexts stay. */
	struct tls_contexts tls;
	char tls_err[384];
	if (!tls_contexts_build(ng, &tls, tls_err, sizeof tls_err)) {
		snprintf(err, errlen, "TLS: %s", tls_err);
		log_reload_rejected(err, err);
		config_free(cfg);
		return false;
	}
	if (!cancel_table_grow(&w->cancel, (uint32_t)ng->max_client_conn + 16)) {
		snprintf(err, errlen, "out of memory");
		tls_contexts_free(&tls);
		config_free(cfg);
		return false;
	}
	struct config *old = w->cfg;
	bool server_tls_changed = !config_server_tls_same(old, cfg);
	bool old_kept = false;
	if (!pool_reload(w, cfg, old, &old_kept)) {
		snprintf(err, errlen, "out of memory while applying the new configuration");
		tls_contexts_free(&tls);
		config_free(cfg);
		return false;
	}
	/* Connections in their handshake keep a reference to the old ones. */
	tls_contexts_free(&w->tls);
	w->tls = tls;
	/* Keep what cannot change from the running snapshot. */
	cfg->general.listen_port = og->listen_port;
	cfg->general.workers = og->workers;
	w->cfg = cfg;
	if (!old_kept)
		config_free(old);
	cancel_table_set_peer_id(&w->cancel, cfg->general.peer_id);
	for (size_t i = 0; i < w->n_listeners; i++)
		if (w->listeners[i])
			listener_options(w, w->listeners[i]);   /* tcp_keepalive may have changed */
	log_set_level(w->cfg->general.log_level);
	log_set_format(w->cfg->general.log_format);
	admin_credentials(w);
	w->config_mtime = file_mtime(w->config_path);
	/* (Not before worker_listen: a reload during the startup check.) */
	if (w->serving && !prometheus_reconfigure(w))
		log_error("reload: /metrics is not served (see above)");
	if (server_tls_changed)
		pool_server_tls_changed(w);
	auth_query_reload(w);   /* cached answers of the old auth_query go */
	kdf_forget(w->kdf);     /* and the SCRAM keys of passwords perhaps no longer configured */
	struct log_field applied[] = { { "outcome", "applied", 0 }, { "file", w->config_path, 0 } };
	log_event(LOG_LEVEL_INFO, "reload", applied, 2, NULL, "configuration reloaded from %s", w->config_path);
	twophase_recover_kick(w->twophase_recover);   /* new shards, or two_phase_commit turned on: check them */
	return true;
}

static void reaper_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->dead_clients) {
		list_del(pos);
		client_free(LIST_OWNER(pos, struct client, node));
	}
	LIST_FOREACH_SAFE(pos, tmp, &w->dead_servers) {
		list_del(pos);
		server_free(LIST_OWNER(pos, struct server, node));
	}
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	struct worker *w = arg;
	worker_update_clock(w);
	bool is_unix = sa->sa_family == AF_UNIX;
	client_accept(w, fd, sa, salen, is_unix);
}

/* Out of file descriptors (EMFILE, ENFILE) or memory: the pending
 * connection stays in the backlog and the listener would fire again at
 * once, so accepting pauses for a moment instead of spinning on the error
 * (one log line per pause). Existing clients are unaffected. */
#define ACCEPT_PAUSE_MS 200

static void accept_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	w->accept_paused = false;
	if (w->shutting_down)
		return;
	for (size_t i = 0; i < w->n_listeners; i++)
		if (w->listeners[i])
			(void)evconnlistener_enable(w->listeners[i]);
}

static void accept_error_cb(struct evconnlistener *l, void *arg)
{
	struct worker *w = arg;
	int err = EVUTIL_SOCKET_ERROR();
	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
		if (w->accept_paused)
			return;
		log_warning("accept failed: %s; not accepting for %d ms", evutil_socket_error_to_string(err),
			    ACCEPT_PAUSE_MS);
		for (size_t i = 0; i < w->n_listeners; i++)
			if (w->listeners[i])
				(void)evconnlistener_disable(w->listeners[i]);
		struct timeval tv = { .tv_sec = 0, .tv_usec = ACCEPT_PAUSE_MS * 1000 };
		if (evtimer_add(w->accept_resume, &tv) == 0) {
			w->accept_paused = true;
			return;
		}
		/* No timer: fall back to accepting again right away. */
		for (size_t i = 0; i < w->n_listeners; i++)
			if (w->listeners[i])
				(void)evconnlistener_enable(w->listeners[i]);
		return;
	}
	/* ECONNABORTED and the like concern one connection only. */
	log_warning("accept failed: %s", evutil_socket_error_to_string(err));
}

/* TCP_NODELAY and SO_KEEPALIVE on a listening socket: Linux hands them on
 * to every connection accepted from it (the new socket is a copy of the
 * listener's), which saves two setsockopt calls per login. */
static void listener_options(struct worker *w, struct evconnlistener *l)
{
	evutil_socket_t fd = evconnlistener_get_fd(l);
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0 || (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
		return;
	int one = 1, keep = w->cfg->general.tcp_keepalive ? 1 : 0;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &keep, sizeof keep) != 0)
		log_warning("listener: cannot set TCP_NODELAY/SO_KEEPALIVE: %s", strerror(errno));
}

static bool add_listener(struct worker *w, const struct sockaddr *sa, socklen_t salen, const char *what)
{
	if (w->n_listeners >= WORKER_MAX_LISTENERS) {
		log_error("too many listen addresses");
		return false;
	}
	unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE;
	if (sa->sa_family != AF_UNIX)
		flags |= LEV_OPT_REUSEABLE_PORT;
	if (sa->sa_family == AF_INET6)
		flags |= LEV_OPT_BIND_IPV6ONLY;
	struct evconnlistener *l = evconnlistener_new_bind(w->base, accept_cb, w, flags, 1024, sa, (int)salen);
	if (!l) {
		log_error("cannot listen on %s: %s", what, strerror(errno));
		return false;
	}
	evconnlistener_set_error_cb(l, accept_error_cb);
	listener_options(w, l);
	w->listeners[w->n_listeners++] = l;
	log_info("listening on %s", what);
	return true;
}

/* -R: the old worker's listening sockets, as they are (bound, listening,
 * their options set); connections queued on them are accepted here. */
static bool adopt_listeners(struct worker *w, const int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct evconnlistener *l =
			w->n_listeners < WORKER_MAX_LISTENERS
				? evconnlistener_new(w->base, accept_cb, w, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0,
						     fds[i])
				: NULL;
		if (!l) {
			for (size_t j = i; j < n; j++)
				close(fds[j]);
			log_error("cannot accept on the listening sockets taken over: %s", strerror(errno));
			return false;
		}
		evconnlistener_set_error_cb(l, accept_error_cb);
		listener_options(w, l);
		w->listeners[w->n_listeners++] = l;
	}
	return true;
}

static bool open_listeners(struct worker *w, int unix_fd)
{
	const struct config_general *g = &w->cfg->general;
	char port[16];
	snprintf(port, sizeof port, "%d", g->listen_port);
	int taken[HANDOVER_MAX_LISTENERS];
	size_t n_taken = 0;
	/* (An old worker that passed no listener: this one binds its own, and
	 * still takes the clients it sends.) */
	enum handover_took took = w->take_over ? handover_take(w, taken, &n_taken) : HANDOVER_NONE;
	if (took == HANDOVER_FAILED)
		return false;
	if (took == HANDOVER_TAKEN && n_taken > 0) {
		if (!adopt_listeners(w, taken, n_taken))
			return false;
		goto unix_socket;
	}
	for (size_t i = 0; i < g->n_listen_addr; i++) {
		const char *host = g->listen_addr[i];
		bool any = strcmp(host, "*") == 0;
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE, .ai_family = AF_UNSPEC };
		struct addrinfo *res = NULL;
		int rc = getaddrinfo(any ? NULL : host, port, &hints, &res);
		if (rc != 0) {
			log_error("cannot resolve listen_addr %s: %s", host, gai_strerror(rc));
			return false;
		}
		for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
			char what[128];
			char hbuf[64] = "?";
			getnameinfo(ai->ai_addr, ai->ai_addrlen, hbuf, sizeof hbuf, NULL, 0, NI_NUMERICHOST);
			snprintf(what, sizeof what, ai->ai_family == AF_INET6 ? "[%s]:%s" : "%s:%s", hbuf, port);
			if (!add_listener(w, ai->ai_addr, ai->ai_addrlen, what)) {
				freeaddrinfo(res);
				return false;
			}
		}
		freeaddrinfo(res);
	}
	/* The next process's -R finds this worker here (not while this
	 * one still takes over: handover.c answers once it has). */
	(void)handover_listen(w);
unix_socket:
	if (unix_fd >= 0) {
		/* Bound once by the supervisor; every worker accepts from its
		 * copy. Backlog 0: it is listening already. */
		int fd = dup(unix_fd);
		struct evconnlistener *l = fd < 0 ? NULL
					  : evconnlistener_new(w->base, accept_cb, w,
							       LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
		if (!l) {
			if (fd >= 0)
				close(fd);
			log_error("cannot accept on the unix socket: %s", strerror(errno));
			return false;
		}
		evconnlistener_set_error_cb(l, accept_error_cb);
		w->listeners[w->n_listeners++] = l;
	}
	return true;
}

/* keep_unix: the Unix socket's listener stays (SHUTDOWN WAIT_FOR_*, as
 * PgBouncer: the console is still reached there; login.c refuses every
 * other login). */
static void close_listeners(struct worker *w, bool keep_unix)
{
	size_t kept = 0;
	for (size_t i = 0; i < w->n_listeners; i++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof ss;
		if (keep_unix && getsockname(evconnlistener_get_fd(w->listeners[i]), (struct sockaddr *)&ss, &len) == 0 &&
		    ss.ss_family == AF_UNIX) {
			w->listeners[kept++] = w->listeners[i];
			continue;
		}
		evconnlistener_free(w->listeners[i]);
	}
	w->n_listeners = kept;
}

static void poll_cancel_flag(struct worker *w, struct client *c)
{
	if (c->has_cancel_key && cancel_take_flag(&w->cancel, c->cancel_pid, c->cancel_key))
		client_cancel_query(c);
}

/* Clients another worker was asked to cancel (cancel_take_flag): waiting
 * ones, and those running a query (the cancel is sent from here, where the
 * server connection is known, so that it is tracked like a local one). */
static void poll_cancel_flags(struct worker *w)
{
	if (!w->shm)
		return;
	struct list_node *cp, *ct;
	LIST_FOREACH_SAFE(cp, ct, &w->clients_active)
		poll_cancel_flag(w, LIST_OWNER(cp, struct client, node));
	struct list_node *pp, *pt;
	LIST_FOREACH_SAFE(pp, pt, &w->pools) {
		struct pool *p = LIST_OWNER(pp, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++)
			LIST_FOREACH_SAFE(cp, ct, &p->targets[i]->waiters) {
				struct client *c = client_of_waiter(LIST_OWNER(cp, struct pool_waiter, node));
				if (c)   /* (a fan-out's leg is cancelled with its client) */
					poll_cancel_flag(w, c);
			}
	}
}

static void client_timeouts(struct worker *w)
{
	const struct config_general *g = &w->cfg->general;
	uint64_t now = w->now_us;
	struct list_node *pos, *tmp;
	int login_ms = config_client_login_timeout(w->cfg);
	if (login_ms > 0) {
		uint64_t limit = (uint64_t)login_ms * 1000;
		LIST_FOREACH_SAFE(pos, tmp, &w->clients_login) {
			struct client *c = LIST_OWNER(pos, struct client, node);
			if (now - c->connect_us >= limit)
				client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "canceling authentication due to timeout");
		}
	}
	/* A batch for several shards waiting for its Sync after a Flush: the
	 * client waits for results first (fanout_start_batch): decide now. */
	if (w->batch_waiters) {
		w->batch_waiters = false;
		LIST_FOREACH_SAFE(pos, tmp, &w->clients_idle) {
			struct client *c = LIST_OWNER(pos, struct client, node);
			struct client_xshard *xs = c->xshard;
			if (!xs || !xs->batch_wait_since_us)
				continue;
			if (now - xs->batch_wait_since_us < FANOUT_BATCH_SYNC_WAIT_US) {
				w->batch_waiters = true;   /* look again next tick */
				continue;
			}
			xs->batch_wait_since_us = 0;
			xs->batch_no_wait = true;
			client_process(c);
		}
	}
	/* Each client's limits are its user's ([users.NAME], else [general]). */
	if (config_any_client_idle_timeout(w->cfg)) {
		LIST_FOREACH_SAFE(pos, tmp, &w->clients_idle) {
			struct client *c = LIST_OWNER(pos, struct client, node);
			int ms = c->pool ? c->pool->client_idle_timeout : g->client_idle_timeout;
			if (ms > 0 && now - c->last_activity_us >= (uint64_t)ms * 1000)
				client_close(c, SQLSTATE_ADMIN_SHUTDOWN, "client_idle_timeout");
		}
	}
	/* Clients idle for a second give their (empty) buffers back: thousands
	 * of idle clients then cost little more than their struct client. Once
	 * a second, so that the sweep costs nothing measurable. */
	if (now - w->last_trim_us >= 1000000) {
		w->last_trim_us = now;
		LIST_FOREACH_SAFE(pos, tmp, &w->clients_idle) {
			struct client *c = LIST_OWNER(pos, struct client, node);
			if (now - c->last_activity_us >= 1000000) {
				client_trim(c);
				prep_client_trim(c);
			}
		}
	}
	if (config_any_idle_transaction_timeout(w->cfg)) {
		LIST_FOREACH_SAFE(pos, tmp, &w->clients_active) {
			struct client *c = LIST_OWNER(pos, struct client, node);
			struct server *s = c->end.server;
			int ms = c->pool ? c->pool->idle_transaction_timeout : g->idle_transaction_timeout;
			if (ms <= 0 || !s || s->state != SERVER_ACTIVE || s->txn.outstanding != 0 || s->txn.tx_status == 'I' ||
			    now - c->last_activity_us < (uint64_t)ms * 1000)
				continue;
			if (g->timeout_action == TIMEOUT_ACTION_DISCONNECT)   /* PgBouncer's words */
				client_close(c, "08P01", "idle transaction timeout");
			else
				client_close(c, "25P03", "terminating connection due to idle-in-transaction timeout");
		}
	}
}

/* Commands another worker's admin console posted for the whole instance. */
static void apply_admin_commands(struct worker *w)
{
	struct shm_admin_entry e;
	while (shm_admin_next(w->shm, &w->admin_seen, &e)) {
		if (e.from_worker == w->id)
			continue;
		const char *db = e.arg[0] ? e.arg : NULL;
		switch (e.cmd) {
		case SHM_ADMIN_PAUSE: (void)pool_pause(w, db); break;
		case SHM_ADMIN_RESUME:
			(void)pool_resume(w, db);
			if (!db)
				worker_suspend(w, false);
			break;
		case SHM_ADMIN_SUSPEND: worker_suspend(w, true); break;
		case SHM_ADMIN_DISABLE: (void)pool_set_disabled(w, db, true); break;
		case SHM_ADMIN_ENABLE: (void)pool_set_disabled(w, db, false); break;
		case SHM_ADMIN_KILL: (void)worker_kill(w, db); break;
		case SHM_ADMIN_RECONNECT: (void)pool_reconnect(w, db); break;
		case SHM_ADMIN_DUMP: admin_dump(w, e.arg, e.seq); break;
		case SHM_ADMIN_KILL_CLIENT: admin_kill_client_posted(w, e.arg); break;
		case SHM_ADMIN_WAIT_FOR_CLIENTS: worker_wait_for_clients(w); break;
		case SHM_ADMIN_WAIT_FOR_SERVERS: worker_wait_for_servers(w); break;
		case SHM_ADMIN_RESHARD: reshard_posted(w, e.seq, e.arg, e.value); break;
		case SHM_ADMIN_RESHARD_SWITCH: reshard_switch(w, e.arg); break;
		case SHM_ADMIN_PAUSE_WRITES: (void)pool_pause_writes(w, db); break;
		case SHM_ADMIN_RESUME_WRITES: (void)pool_resume_writes(w, db); break;
		case SHM_ADMIN_SET: {
			char err[256];
			if (config_general_set(w->cfg, e.arg, e.value, err, sizeof err) &&
			    !pool_apply_set(w, e.arg, err, sizeof err))
				log_error("SET %s: TLS: %s (the running TLS settings stay)", e.arg, err);
			break;
		}
		}
	}
	atomic_store(&w->shm->h->workers[w->id].admin_applied, w->admin_seen);
}

/* This worker's share of the instance-wide figures. */
static void worker_publish(struct worker *w)
{
	struct shm_worker *me = &w->shm->h->workers[w->id];
	int servers = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++)
			servers += srvpool_total(p->targets[i]);
	}
	atomic_store_explicit(&me->clients, w->n_clients, memory_order_relaxed);
	atomic_store_explicit(&me->servers, servers, memory_order_relaxed);
	worker_publish_pools(w);
	apply_admin_commands(w);
}

void worker_publish_pools(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools)
		LIST_OWNER(pos, struct pool, node)->cl_active = 0;
	/* One pass over the clients, not one per pool. */
	struct list_node *lists[] = { &w->clients_idle, &w->clients_active };
	for (size_t l = 0; l < sizeof lists / sizeof *lists; l++)
		LIST_FOREACH_SAFE(pos, tmp, lists[l]) {
			struct pool *p = LIST_OWNER(pos, struct client, node)->pool;
			if (p)
				p->cl_active++;
		}
	pool_publish(w);
}

int worker_kill(struct worker *w, const char *db)
{
	/* Paused first: a server a closing client hands back goes to nobody. */
	(void)pool_pause(w, db);
	struct list_node *lists[] = { &w->clients_idle, &w->clients_active, &w->clients_login };
	struct list_node *pos, *tmp;
	for (size_t l = 0; l < sizeof lists / sizeof *lists; l++)
		LIST_FOREACH_SAFE(pos, tmp, lists[l]) {
			struct client *c = LIST_OWNER(pos, struct client, node);
			if (c->pool && pool_matches_db(c->pool, db))
				client_close(c, "57P01", "database \"%s\" was killed by an administrator", c->pool->name);
		}
	return pool_kill(w, db);
}

/* Shutdown: a client that logged in during the drain had a moment to send
 * its first query; one that stays idle is closed. */
#define SHUTDOWN_IDLE_GRACE_US 1000000ULL

static void close_idle_after_grace(struct worker *w)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_idle) {
		struct client *c = LIST_OWNER(pos, struct client, node);
		if (w->now_us - c->state_since_us >= SHUTDOWN_IDLE_GRACE_US)
			client_close(c, SQLSTATE_ADMIN_SHUTDOWN, "pgcat is shutting down");
	}
}

/* After a burst of connections, give the heap's free pages back: logins
 * leave their buffers freed between the clients that stay (fragments
 * malloc keeps resident), and a pooler holding tens of thousands of idle
 * clients should cost what they hold. Once 1,024 connections came since the
 * last trim: when a janitor tick saw none arrive (the burst is over), or
 * every 10 s while they keep coming. Cheap next to those logins. */
#define TRIM_EVERY_CONNECTIONS 1024
#define TRIM_STORM_INTERVAL_US 10000000
static void trim_heap(struct worker *w)
{
	bool quiet = w->next_id == w->id_at_last_tick;
	w->id_at_last_tick = w->next_id;
#ifdef __GLIBC__
	if (w->next_id - w->trimmed_at_id < TRIM_EVERY_CONNECTIONS ||
	    (!quiet && w->now_us - w->trimmed_at_us < TRIM_STORM_INTERVAL_US))
		return;
	w->trimmed_at_id = w->next_id;
	w->trimmed_at_us = w->now_us;
	(void)malloc_trim(0);
#else
	(void)quiet;
#endif
}

static void wait_for_servers_check(struct worker *w);

static void janitor_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	worker_update_clock(w);
	if (w->shutting_down)
		close_idle_after_grace(w);
	int autoreload = w->cfg->general.autoreload;
	if (autoreload > 0 && w->now_us - w->last_autoreload_check_us >= (uint64_t)autoreload * 1000) {
		w->last_autoreload_check_us = w->now_us;
		int64_t m = file_mtime(w->config_path);
		if (m >= 0 && m != w->config_mtime) {
			char err[512];
			log_info("autoreload: %s changed", w->config_path);
			w->config_mtime = m;
			(void)worker_reload(w, err, sizeof err);
		}
	}
	client_timeouts(w);
	poll_cancel_flags(w);
	pool_janitor(w);
	admin_janitor(w);
	reshard_tick(w);
	worker_publish(w);
	trim_heap(w);
	wait_for_servers_check(w);
	if (w->waiting_for_clients && !w->shutting_down && w->n_clients == 0) {
		/* Every client has gone: the servers are closed on the way out. */
		log_info("SHUTDOWN WAIT_FOR_CLIENTS: the last client has gone, exiting");
		w->shutting_down = true;
	}
	if (w->shutting_down)
		worker_check_shutdown_done(w);
}

static void close_all_clients(struct worker *w, struct list_node *head, const char *sqlstate, const char *msg)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, head)
		client_close(LIST_OWNER(pos, struct client, node), sqlstate, "%s", msg);
}

void worker_begin_shutdown(struct worker *w)
{
	if (w->shutting_down)
		return;
	w->shutting_down = true;
	log_info("shutting down: waiting up to %d ms for clients to finish", w->cfg->general.shutdown_timeout);
	close_listeners(w, false);
	/* /metrics keeps answering while clients drain (SPEC §8). Clients in
	 * the middle of logging in (an online restart) may finish and run
	 * their first transaction; they are closed after it. */
	struct list_node *lp, *lt;
	LIST_FOREACH_SAFE(lp, lt, &w->clients_login)
		LIST_OWNER(lp, struct client, node)->end.close_when_released = true;
	/* Idle clients: those idle for a while go now; one that just logged in
	 * or just finished a transaction gets a moment to send its next
	 * request (close_idle_after_grace). */
	LIST_FOREACH_SAFE(lp, lt, &w->clients_idle)
		LIST_OWNER(lp, struct client, node)->end.close_when_released = true;
	close_idle_after_grace(w);
	/* Linked clients finish their transaction; those sitting idle on a
	 * session-mode server with nothing running can go now. */
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_active) {
		struct client *c = LIST_OWNER(pos, struct client, node);
		struct server *s = c->end.server;
		if (s && s->state == SERVER_ACTIVE && s->txn.outstanding == 0 && s->txn.tx_status == 'I' &&
		    c->fwd_remaining == 0 && s->fwd_remaining == 0)
			client_close(c, SQLSTATE_ADMIN_SHUTDOWN, "pgcat is shutting down");
		else
			c->end.close_when_released = true;
	}
	/* Waiting clients have not started a transaction: they are served
	 * (their request is already sent) and closed after it. */
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct list_node *cp, *ct;
			LIST_FOREACH_SAFE(cp, ct, &p->targets[i]->waiters) {
				struct client *c = client_of_waiter(LIST_OWNER(cp, struct pool_waiter, node));
				if (c)
					c->end.close_when_released = true;
			}
		}
		/* A paused pool would keep them waiting until shutdown_timeout. */
		pool_close_waiters(p, true, p->paused, SQLSTATE_ADMIN_SHUTDOWN, "pgcat is shutting down");
	}
	struct timeval tv = { w->cfg->general.shutdown_timeout / 1000, (w->cfg->general.shutdown_timeout % 1000) * 1000 };
	evtimer_add(w->shutdown_timer, &tv);
	worker_check_shutdown_done(w);
}

static void stop_listening(struct worker *w)
{
	close_listeners(w, false);
}

/* A takeover (-R) began: nothing more is accepted here. /metrics stops
 * too: the new process serves it (both bind its port, SO_REUSEPORT, so a
 * scrape would otherwise land on either). */
static void pause_listening(struct worker *w)
{
	for (size_t i = 0; i < w->n_listeners; i++)
		if (w->listeners[i])
			(void)evconnlistener_disable(w->listeners[i]);
	prometheus_stop(w);
}

/* The takeover was undone (the new process went away): serving again. */
static void resume_listening(struct worker *w)
{
	for (size_t i = 0; i < w->n_listeners; i++)
		if (w->listeners[i])
			(void)evconnlistener_enable(w->listeners[i]);
	if (!prometheus_reconfigure(w))
		log_error("handover undone: /metrics is not served (see above)");
}

void worker_wait_for_clients(struct worker *w)
{
	if (w->shutting_down || w->waiting_for_clients)
		return;
	w->waiting_for_clients = true;
	log_info("SHUTDOWN WAIT_FOR_CLIENTS: not accepting; exiting once the last of %d clients has gone", w->n_clients);
	close_listeners(w, true);
}

/* A client that wants a server during SHUTDOWN WAIT_FOR_SERVERS: PgBouncer's words. */
#define WAIT_FOR_SERVERS_CLOSE "server shutting down"

void worker_wait_for_servers(struct worker *w)
{
	if (w->shutting_down || w->waiting_for_servers)
		return;
	w->waiting_for_servers = true;
	w->waiting_for_clients = false;   /* this one ends sooner */
	log_info("SHUTDOWN WAIT_FOR_SERVERS: not accepting; exiting once no client holds a server");
	close_listeners(w, true);
	/* From now on a client that asks for a server is closed instead
	 * (pool_checkout), and a server given back goes to no waiter
	 * (pool.c); the janitor closes those already waiting. Clients that
	 * hold one go on with their transaction (in session mode, their
	 * session). */
}

void worker_suspend(struct worker *w, bool on)
{
	if (w->suspended == on)
		return;
	w->suspended = on;
	struct list_node *lists[] = { &w->clients_idle, &w->clients_active };
	size_t n = 0;
	for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
		struct list_node *pos, *tmp;
		LIST_FOREACH_SAFE(pos, tmp, lists[i]) {
			struct client *c = LIST_OWNER(pos, struct client, node);
			if (c->is_admin)
				continue;
			io_suspend(&c->io, on);
			n++;
		}
	}
	log_info("%s: %zu client%s %s", on ? "SUSPEND" : "RESUME", n, n == 1 ? "" : "s",
		 on ? "no longer read until RESUME" : "read again");
}

/* SHUTDOWN WAIT_FOR_SERVERS, each janitor tick: the clients waiting for
 * a server are closed; once no client holds one, the rest (between
 * transactions, the console's) go too, and the worker exits. */
static void wait_for_servers_check(struct worker *w)
{
	if (!w->waiting_for_servers || w->shutting_down)
		return;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools)
		pool_close_waiters(LIST_OWNER(pos, struct pool, node), true, true, SQLSTATE_ADMIN_SHUTDOWN,
				   WAIT_FOR_SERVERS_CLOSE);
	if (!list_empty(&w->clients_active))
		return;
	/* A console reply that waits for the other workers (the command's
	 * own, with several) goes out first. */
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_idle) {
		const struct client *c = LIST_OWNER(pos, struct client, node);
		if (c->is_admin && c->kind_state)
			return;
	}
	log_info("SHUTDOWN WAIT_FOR_SERVERS: no client holds a server, exiting");
	w->shutting_down = true;
	close_all_clients(w, &w->clients_idle, SQLSTATE_ADMIN_SHUTDOWN, WAIT_FOR_SERVERS_CLOSE);
	close_all_clients(w, &w->clients_login, SQLSTATE_ADMIN_SHUTDOWN, WAIT_FOR_SERVERS_CLOSE);
}

static void shutdown_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	log_warning("shutdown_timeout reached: closing the remaining %d clients", w->n_clients);
	worker_update_clock(w);
	close_all_clients(w, &w->clients_active, SQLSTATE_ADMIN_SHUTDOWN, "pgcat is shutting down");
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools)
		pool_close_waiters(LIST_OWNER(pos, struct pool, node), false, true, SQLSTATE_ADMIN_SHUTDOWN,
				   "pgcat is shutting down");
	worker_check_shutdown_done(w);
	event_base_loopexit(w->base, NULL);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct worker *w = arg;
	worker_update_clock(w);
	switch (sig) {
	case SIGINT:
		if (w->cfg->format == CONFIG_FORMAT_PGBOUNCER) {
			/* PgBouncer's SIGINT (the supervisor's doing too). */
			if (w->shutting_down || w->waiting_for_clients || w->waiting_for_servers) {
				log_info("got SIGINT while shutting down, fast exit");
				event_base_loopbreak(w->base);
			} else {
				log_info("got SIGINT, shutting down, waiting for all servers connections to be released");
				worker_wait_for_servers(w);
			}
			break;
		}
		/* fall through */
	case SIGTERM:
		if (w->cfg->format == CONFIG_FORMAT_PGBOUNCER && sig == SIGTERM) {
			/* PgBouncer's SIGTERM: SHUTDOWN WAIT_FOR_CLIENTS, and
			 * while shutting down a fast exit (its words). */
			if (w->shutting_down || w->waiting_for_clients || w->waiting_for_servers) {
				log_info("got SIGTERM while shutting down, fast exit");
				event_base_loopbreak(w->base);
			} else {
				log_info("got SIGTERM, shutting down, waiting for all clients disconnect");
				worker_wait_for_clients(w);
			}
			break;
		}
		log_info("received signal %d: graceful shutdown", (int)sig);
		worker_begin_shutdown(w);
		break;
	case SIGQUIT:
		log_info("received SIGQUIT: immediate shutdown");
		w->exit_code = 0;
		event_base_loopbreak(w->base);
		break;
	case SIGHUP: {
		char err[512];
		log_reopen();
		log_info("SIGHUP: reloading configuration");
		(void)worker_reload(w, err, sizeof err);
		break;
	}
	case SIGUSR1:
		log_info("SIGUSR1: pausing all pools");
		(void)pool_pause(w, NULL);
		break;
	case SIGUSR2:
		if (w->shutting_down || w->waiting_for_clients || w->waiting_for_servers) {
			log_info("got SIGUSR2 while shutting down, ignoring");   /* PgBouncer's words */
			break;
		}
		log_info("SIGUSR2: resuming all pools");
		(void)pool_resume(w, NULL);
		worker_suspend(w, false);
		break;
	default:
		break;
	}
}

/* What the admin console and /metrics ask of this process (context.h). */
static const struct worker_commands worker_commands = {
	.begin_shutdown = worker_begin_shutdown,
	.publish_pools = worker_publish_pools,
	.kill = worker_kill,
	.reload = worker_reload,
	.wait_for_clients = worker_wait_for_clients,
	.wait_for_servers = worker_wait_for_servers,
	.suspend = worker_suspend,
	.stop_listening = stop_listening,
	.pause_listening = pause_listening,
	.resume_listening = resume_listening,
};

struct worker *worker_create(struct config *cfg, const char *config_path, int id, struct shm *shm)
{
	struct worker *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	w->id = id;
	w->shm = shm;
	/* Replay the admin ring from its start: a worker that starts (or
	 * restarts) after a PAUSE or SET reaches the state the others are in. */
	w->admin_seen = 0;
	/* Client and server ids unique in the instance, so that one id names
	 * one client in SHOW CLIENTS and KILL_CLIENT: worker 1 counts from
	 * 1000000000001, worker 2 from 2000000000001... */
	w->next_id = (uint64_t)id * WORKER_ID_SPAN;
	w->trimmed_at_id = w->id_at_last_tick = w->next_id;
	w->cfg = cfg;
	reshard_overlay(cfg);   /* a finished reshard's layout (state_dir) */
	w->config_path = strdup(config_path ? config_path : "");
	list_init(&w->clients_login);
	list_init(&w->clients_idle);
	list_init(&w->clients_active);
	list_init(&w->pools);
	list_init(&w->dead_clients);
	list_init(&w->dead_servers);
	worker_update_clock(w);
	signal(SIGPIPE, SIG_IGN);

	w->base = event_base_new();
	if (!w->base || !w->config_path)
		goto fail;
	cancel_requests_init(&w->cancel_requests, w->base);
	peer_forwards_init(&w->peer_forwards);
	if (!io_flusher_init(&w->flusher, w->base))
		goto fail;
	/* SPEC §12: one ring per worker, made here, after the fork. A kernel
	 * that refuses it leaves this worker on epoll, said once (by the
	 * first worker: the others meet the same kernel). */
	if (cfg->general.io_engine != IO_ENGINE_EPOLL) {
		char why[256];
		if (!io_flusher_use_io_uring(&w->flusher, why, sizeof why) && id == 0)
			log_warning("io_engine = %s: io_uring is not available (%s); using epoll",
				    cfg->general.io_engine == IO_ENGINE_AUTO ? "auto" : "io_uring", why);
	}
	if (!(w->dns = dns_new(w, pool_dns_done)))
		goto fail;
	/* Before the pools: min_pool_size logs in at once. Its threads come
	 * with the first derivation, in this process. */
	if (!(w->kdf = kdf_new(w->base)))
		goto fail;
	if (!(w->offload = offload_new(w->base)))
		goto fail;
	{
		char tls_err[384];
		if (!tls_contexts_build(&cfg->general, &w->tls, tls_err, sizeof tls_err)) {
			log_error("TLS: %s", tls_err);
			goto fail;
		}
	}
	if (!pg_random_bytes(w->fake_salt_secret, sizeof w->fake_salt_secret) ||
	    !pg_random_bytes((uint8_t *)&w->rng, sizeof w->rng))
		goto fail;
	/* Keys for every client that may be logged in, plus admin headroom. */
	randpool_init(&w->rand);
	if (!cancel_table_init(&w->cancel, (uint32_t)cfg->general.max_client_conn + 16, id, shm, &w->rand))
		goto fail;
	cancel_table_set_peer_id(&w->cancel, cfg->general.peer_id);
	w->start_wall = (int64_t)time(NULL);
	w->config_mtime = file_mtime(w->config_path);
	admin_credentials(w);
	w->admin_session = &admin_session;
	w->normal_session = &normal_session;
	w->replication_session = &replication_session;
	w->login = &client_login;
	w->cmds = &worker_commands;
	w->stats_timer = evtimer_new(w->base, stats_timer_cb, w);
	w->reaper = event_new(w->base, -1, 0, reaper_cb, w);
	w->janitor = event_new(w->base, -1, EV_PERSIST, janitor_cb, w);
	w->shutdown_timer = evtimer_new(w->base, shutdown_timer_cb, w);
	w->accept_resume = evtimer_new(w->base, accept_resume_cb, w);
	w->sig_term = evsignal_new(w->base, SIGTERM, signal_cb, w);
	w->sig_int = evsignal_new(w->base, SIGINT, signal_cb, w);
	w->sig_quit = evsignal_new(w->base, SIGQUIT, signal_cb, w);
	w->sig_hup = evsignal_new(w->base, SIGHUP, signal_cb, w);
	w->sig_usr1 = evsignal_new(w->base, SIGUSR1, signal_cb, w);
	w->sig_usr2 = evsignal_new(w->base, SIGUSR2, signal_cb, w);
	if (!w->stats_timer || !w->reaper || !w->janitor || !w->shutdown_timer || !w->accept_resume || !w->sig_term || !w->sig_int || !w->sig_quit ||
	    !w->sig_hup || !w->sig_usr1 || !w->sig_usr2)
		goto fail;
	if (!pool_create_all(w))
		goto fail;
	apply_admin_commands(w);
	struct timeval tv = { 0, JANITOR_INTERVAL_MS * 1000 };
	evtimer_add(w->janitor, &tv);
	struct timeval stv = { cfg->general.stats_period, 0 };
	evtimer_add(w->stats_timer, &stv);
	evsignal_add(w->sig_term, NULL);
	evsignal_add(w->sig_int, NULL);
	evsignal_add(w->sig_quit, NULL);
	evsignal_add(w->sig_hup, NULL);
	evsignal_add(w->sig_usr1, NULL);
	evsignal_add(w->sig_usr2, NULL);
	/* One lag monitor per instance (SPEC §4): worker 0's. A worker that
	 * is restarted comes back with its id, so the monitor does too. */
	if (id == 0 && !(w->lagmon = lagmon_new(w)))
		log_warning("lag monitor: out of memory; replica lag is not measured");
	/* Reshards left unfinished go on, in worker 0 (a restarted one too). */
	reshard_resume_all(w);
	/* Every worker ends its own in-doubt transactions; worker 0 those of
	 * processes that are gone (twophase.h). */
	if (!(w->twophase = twophase_new(w)) || !(w->twophase_recover = twophase_recover_new(w, w->twophase)))
		goto fail;
	/* min_pool_size: warm connections from the start. */
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools)
		pool_fill_min(LIST_OWNER(pos, struct pool, node));
	return w;
fail:
	worker_destroy(w);
	return NULL;
}

struct start_wait {
	bool over, refused;
};

static void startup_checked(struct twophase_check *chk, bool refused, void *arg)
{
	(void)chk;   /* freed by worker_check_startup */
	struct start_wait *sw = arg;
	sw->over = true;
	sw->refused = refused;
}

/* Every worker checks for itself (not worker 0 alone for all): each one
 * becomes ready and serves clients on its own, so none may do so before
 * the answer, and one waiting for another's verdict through the shared
 * segment would cost more code than a handful of short connections once
 * per start. It runs before worker_listen: in an online restart, the
 * kernel would otherwise queue part of the new connections in this
 * process's listen backlog (SO_REUSEPORT), where they would wait for the
 * verdict and be reset by a refusal; unopened, they all go to the old
 * instance. */
enum worker_start worker_check_startup(struct worker *w, const char *refusal)
{
	if (!twophase_check_needed(w->cfg, NULL))
		return WORKER_START_OK;
	struct start_wait sw = { false, false };
	struct twophase_check *chk = twophase_check_start(w, w->cfg, NULL, refusal, startup_checked, &sw);
	if (!chk) {
		log_error("two_phase_commit: out of memory while checking the shards");
		return WORKER_START_REFUSED;
	}
	log_info("two_phase_commit: asking the shards for max_prepared_transactions before serving clients "
		 "(within connect_timeout)");
	/* Until the verdict, or a shutdown (SIGTERM starts one; SIGQUIT breaks
	 * the loop). */
	bool stopped = false;
	while (!sw.over && !stopped) {
		if (event_base_loop(w->base, EVLOOP_ONCE) < 0)
			break;
		stopped = w->shutting_down || event_base_got_break(w->base);
	}
	twophase_check_free(chk);
	if (stopped)
		return WORKER_START_STOPPED;
	if (!sw.over) {
		log_error("two_phase_commit: the check of the shards could not run (event loop failure)");
		return WORKER_START_REFUSED;
	}
	return sw.refused ? WORKER_START_REFUSED : WORKER_START_OK;
}

bool worker_listen(struct worker *w, int unix_fd)
{
	if (!open_listeners(w, unix_fd) || !prometheus_reconfigure(w))
		return false;
	w->serving = true;
	return true;
}

int worker_run(struct worker *w)
{
	event_base_dispatch(w->base);
	return w->exit_code;
}

void worker_destroy(struct worker *w)
{
	if (!w)
		return;
	/* On the way out: a repeated SIGTERM (the supervisor forwards every
	 * one) must not kill the process once libevent has put the default
	 * handlers back. Blocked, it just stays pending until exit. */
	sigset_t quiet;
	sigemptyset(&quiet);
	sigaddset(&quiet, SIGTERM);
	sigaddset(&quiet, SIGINT);
	sigaddset(&quiet, SIGHUP);
	sigaddset(&quiet, SIGUSR1);
	sigaddset(&quiet, SIGUSR2);
	sigprocmask(SIG_BLOCK, &quiet, NULL);
	worker_update_clock(w);
	close_listeners(w, false);
	handover_free(w);
	/* Clients first (they detach from servers), then pools and servers. */
	struct list_node *pos, *tmp;
	w->shutting_down = true;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools)
		pool_close_waiters(LIST_OWNER(pos, struct pool, node), true, true, NULL, "");
	close_all_clients(w, &w->clients_login, NULL, "");
	close_all_clients(w, &w->clients_idle, NULL, "");
	close_all_clients(w, &w->clients_active, NULL, "");
	auth_query_free(w);   /* its parked logins too */
	notify_hub_free(w);   /* (its clients are gone: the listening connections are) */
	free(w->qstats_local);
	w->qstats_local = NULL;
	qshape_cache_free(w->qshapes);
	w->qshapes = NULL;
	reshard_free_all(w);
	lagmon_free(w->lagmon);   /* before the pools it reads */
	w->lagmon = NULL;
	twophase_check_free(w->reload.check);   /* a reload still waiting: not applied */
	w->reload.check = NULL;
	config_free(w->reload.cfg);
	w->reload.cfg = NULL;
	twophase_recover_free(w->twophase_recover);   /* (it reads the pools too) */
	w->twophase_recover = NULL;
	twophase_free(w->twophase);
	w->twophase = NULL;
	pool_destroy_all(w);
	cancel_requests_free_all(&w->cancel_requests);
	peer_forwards_free_all(w);
	randpool_wipe(&w->rand);
	if (w->reaper)
		reaper_cb(-1, 0, w);
	prometheus_stop(w);
	struct event *evs[] = { w->stats_timer, w->reaper, w->janitor, w->shutdown_timer, w->accept_resume, w->sig_term, w->sig_int,
				w->sig_quit, w->sig_hup, w->sig_usr1, w->sig_usr2 };
	for (size_t i = 0; i < sizeof evs / sizeof *evs; i++)
		if (evs[i])
			event_free(evs[i]);
	cancel_table_free(&w->cancel);
	kdf_free(w->kdf);   /* after every login that could wait for it */
	offload_free(w->offload);
	dns_free(w->dns);
	tls_contexts_free(&w->tls);
	io_flusher_free(&w->flusher);
	if (w->base)
		event_base_free(w->base);
	config_free(w->cfg);
	free(w->config_path);
	free(w);
}
