/* SPDX-License-Identifier: MIT */
/*
 * admin: the admin console (SPEC §7). A client logged in to database
 * "pgcat" or "pgbouncer" is served here instead of being linked to a
 * server: its commands, and the replies that wait for the other workers.
 * The SHOW commands are admin_show.c's; result sets admin_result.c's.
 */
#include "admin.h"
#include "admin_login.h"
#include "admin_ops.h"
#include "admin_queries.h"
#include "admin_reshard.h"
#include "admin_result.h"
#include "admin_upgrade.h"
#include "admin_show.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bans.h"
#include "client.h"
#include "config.h"
#include "buf_msg.h"
#include "log.h"
#include "pktbuf.h"
#include "pool.h"
#include "shm.h"
#include "sqllex.h"
#include "tls.h"
#include "twophase_check.h"
#include "version.h"
#include "context.h"

#define ADMIN_MAX_QUERY 8192

/* ---- commands ---- */

/* Words of the statement, copies as written (is() compares them in any
 * case): split at whitespace (sqllex_is_cspace) and nothing else, so a
 * quote or a comment is part of a word. */
#define MAX_WORDS 12   /* (SHOW QUERIES db ORDER BY col DESC LIMIT n: 9; SET keeps its value whole in rest) */
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

/* What a pause's reply waits for besides every worker applying it: nothing,
 * the pools to drain (PAUSE), or their writes to (RESHARD PAUSE). */
enum admin_drain { ADMIN_DRAIN_NONE, ADMIN_DRAIN_ALL, ADMIN_DRAIN_WRITES };

static bool drained(struct worker *w, enum admin_drain drain, const char *db)
{
	switch (drain) {
	case ADMIN_DRAIN_NONE: return true;
	case ADMIN_DRAIN_ALL: return pool_paused_drained(w, db);
	case ADMIN_DRAIN_WRITES: return pool_writes_drained(w, db);
	}
	return true;
}

/* A reply that waits for the other workers (the client's kind_state). */
struct admin_pending {
	uint64_t seq;      /* WAIT_CLOSE: the SHOW SERVERS listing asked of the others; 0: none yet */
	enum admin_drain drain;
	bool wait_close;   /* WAIT_CLOSE: for the servers RECONNECT marked to be gone */
	bool reload;       /* RELOAD: for its two_phase_commit check (seq: its number, w->reload) */
	bool upgrade;      /* UPGRADE: for this worker's handover to end (seq: the new process's pid) */
	int dump;          /* SHOW CLIENTS/SERVERS: the shm_dump_kind; -1: a command */
	char tag[16];
	char db[64];
};

/* A command for every worker: reply once they all applied it (and, for
 * PAUSE, once the pools drained), else later from the janitor. Returns
 * true when the reply went out now. */
static bool broadcast(struct client *c, enum shm_admin_command cmd, const char *arg, const char *value,
		      const char *tag, enum admin_drain drain)
{
	struct worker *w = c->w;
	uint64_t seq = shm_admin_post(w->shm, w->id, cmd, arg, value);
	struct admin_pending *ap;
	if ((shm_admin_applied_by_all(w->shm, w->id, seq) &&
	     drained(w, drain, arg && arg[0] ? arg : NULL)) ||
	    !(ap = calloc(1, sizeof *ap))) {
		/* (Out of memory: the command is posted; the reply cannot wait.) */
		admin_complete(c, tag);
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
	uint64_t seq = shm_admin_post(w->shm, w->id, SHM_ADMIN_DUMP, admin_dump_name(kind), NULL);
	struct admin_pending *ap;
	if (shm_admin_applied_by_all(w->shm, w->id, seq) || !(ap = calloc(1, sizeof *ap))) {
		admin_finish_dump(c, kind, seq);
		return true;
	}
	ap->seq = seq;
	ap->dump = kind;
	free(c->kind_state);
	c->kind_state = ap;
	return false;
}

/* WAIT_CLOSE: no server RECONNECT marked is left in db's pools (all: ""),
 * here and, from a listing of theirs, in the other workers. At most one
 * listing is asked for at a time, so the admin ring is not flooded. */
static bool wait_close_done(struct worker *w, struct admin_pending *ap)
{
	const char *db = ap->db[0] ? ap->db : NULL;
	if (admin_marked_servers(w, db) > 0)
		return false;
	if (w->shm->h->n_workers <= 1)
		return true;
	if (ap->seq == 0)
		ap->seq = shm_admin_post(w->shm, w->id, SHM_ADMIN_DUMP, admin_dump_name(SHM_DUMP_SERVERS), NULL);
	if (!shm_admin_applied_by_all(w->shm, w->id, ap->seq))
		return false;
	int n = admin_marked_servers_elsewhere(w, ap->seq, db);
	ap->seq = 0;   /* not yet: a fresh listing next time */
	return n == 0;
}

static bool wait_close(struct client *c, const char *db)
{
	struct admin_pending *ap = calloc(1, sizeof *ap);
	if (!ap) {
		admin_error(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return true;
	}
	ap->wait_close = true;
	ap->dump = -1;
	snprintf(ap->tag, sizeof ap->tag, "WAIT_CLOSE");
	snprintf(ap->db, sizeof ap->db, "%s", db ? db : "");
	if (wait_close_done(c->w, ap)) {
		free(ap);
		admin_complete(c, "WAIT_CLOSE");
		return true;
	}
	/* Parked: the janitor looks again every tick; the loop goes on. */
	free(c->kind_state);
	c->kind_state = ap;
	return false;
}

/* A refused RELOAD: the old configuration stays (the log has the
 * details too); on a pgbouncer.ini in PgBouncer's words. */
static void reload_failed(struct client *c, const char *why)
{
	if (c->w->cfg->pgbouncer)
		admin_error(c, "F0000", "RELOAD failed, see logs for additional details (%s)", why);
	else
		admin_error(c, "F0000", "reload failed, old configuration kept: %s", why);
}
/* UPGRADE: this worker's handover ended (handover.c): the consoles that
 * asked hear how, before the worker shuts down. */
static void upgrade_done(struct worker *w, const char *summary)
{
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_idle) {
		struct client *c = LIST_OWNER(pos, struct client, node);
		struct admin_pending *ap = c->kind_state;
		if (!c->is_admin || !ap || !ap->upgrade)
			continue;
		c->kind_state = NULL;
		free(ap);
		admin_notice(c, "NOTICE", "UPGRADE: %s", summary);
		admin_complete(c, "UPGRADE");
		admin_rfq(c);
		io_flush(&c->io);
	}
	w->on_handover_end = NULL;
}

/* UPGRADE: the new binary checks the configuration, then takes over (-R);
 * the reply waits for this worker's handover, or the new process's exit. */
static bool upgrade(struct client *c)
{
	struct worker *w = c->w;
	if (w->shutting_down || w->waiting_for_clients || w->waiting_for_servers || w->handing_over ||
	    w->on_handover_end) {
		admin_error(c, "55000", "UPGRADE: this pgcat is shutting down or being taken over already");
		return true;
	}
	char err[600];
	pid_t pid;
	struct admin_pending *ap = calloc(1, sizeof *ap);
	if (!ap) {
		admin_error(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return true;
	}
	if (!admin_upgrade_start(w, &pid, err, sizeof err)) {
		free(ap);
		log_warning("UPGRADE refused: %s", err);
		admin_error(c, "F0000", "UPGRADE refused, this pgcat goes on: %s", err);
		return true;
	}
	ap->upgrade = true;
	ap->seq = (uint64_t)pid;
	w->upgrade_pid = (int)pid;
	ap->dump = -1;
	snprintf(ap->tag, sizeof ap->tag, "UPGRADE");
	free(c->kind_state);
	c->kind_state = ap;
	w->on_handover_end = upgrade_done;
	return false;
}

void admin_janitor(struct worker *w)
{
	/* The new pgcat UPGRADE started exited while this one runs: reaped;
	 * a console still waiting hears it failed. */
	int status = 0;
	bool upgrade_exited = w->upgrade_pid > 0 && admin_upgrade_exited(w->upgrade_pid, &status);
	int upgrade_pid = w->upgrade_pid;
	if (upgrade_exited) {
		w->upgrade_pid = 0;
		w->on_handover_end = NULL;
	}
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->clients_idle) {
		struct client *c = LIST_OWNER(pos, struct client, node);
		struct admin_pending *ap = c->kind_state;
		if (!c->is_admin || !ap)
			continue;
		if (ap->upgrade) {
			/* The new process failed before it took this worker over. */
			if (!upgrade_exited || (int)ap->seq != upgrade_pid)
				continue;
			c->kind_state = NULL;
			free(ap);
			admin_error(c, "F0000", "UPGRADE failed, this pgcat goes on: the new pgcat (pid %d) exited with "
				    "status %d before it took over (its log says why)", upgrade_pid,
				    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
			admin_rfq(c);
			client_process(c);
			continue;
		}
		if (ap->reload) {
			/* Its reload, or the one that replaced it (a SIGHUP, an
			 * autoreload: the file as it is now), still asking. The
			 * reload that ended last is the answer: a replaced one is
			 * never applied, so never a success of its own. */
			if (w->reload.ended < ap->seq)
				continue;
			c->kind_state = NULL;
			if (w->reload.failed)
				reload_failed(c, w->reload.error);
			else
				admin_complete(c, ap->tag);
			free(ap);
			admin_rfq(c);
			client_process(c);
			continue;
		}
		if (ap->wait_close ? !wait_close_done(w, ap) : !shm_admin_applied_by_all(w->shm, w->id, ap->seq))
			continue;
		if (!drained(w, ap->drain, ap->db[0] ? ap->db : NULL))
			continue;
		c->kind_state = NULL;
		if (ap->dump >= 0)
			admin_finish_dump(c, ap->dump, ap->seq);
		else
			admin_complete(c, ap->tag);
		free(ap);
		admin_rfq(c);
		client_process(c);
	}
}

/* KILL_CLIENT id: the id of SHOW CLIENTS (its ptr, C-<id>, too). Ids are
 * unique in the instance: the worker that has the client is known from
 * the id, and only that one is asked. */
static bool kill_client(struct client *c, const char *arg)
{
	struct worker *w = c->w;
	const char *digits = strncasecmp(arg, "C-", 2) == 0 ? arg + 2 : arg;
	char *end;
	errno = 0;
	unsigned long long id = strtoull(digits, &end, 10);
	if (!isdigit((unsigned char)digits[0]) || *end || errno || id == 0) {
		admin_error(c, "22023", "invalid client pointer supplied: KILL_CLIENT needs a client id from SHOW CLIENTS, "
			    "got \"%s\"", arg);
		return true;
	}
	uint64_t owner = id / WORKER_ID_SPAN;
	if (owner == (uint64_t)w->id) {
		if (id == c->id) {
			admin_error(c, "55000", "KILL_CLIENT: that is this console connection");
			return true;
		}
		if (!admin_kill_client(w, id)) {
			admin_error(c, "42704", "client not found: no such client: %llu", id);
			return true;
		}
		admin_complete(c, "KILL_CLIENT");
		return true;
	}
	int32_t pid = owner < w->shm->h->n_workers ? atomic_load(&w->shm->h->workers[owner].pid) : 0;
	if (pid <= 0) {
		admin_error(c, "42704", "client not found: no such client: %llu", id);
		return true;
	}
	char arg_out[64];
	snprintf(arg_out, sizeof arg_out, "%d %llu", (int)pid, id);
	return broadcast(c, SHM_ADMIN_KILL_CLIENT, arg_out, NULL, "KILL_CLIENT", ADMIN_DRAIN_NONE);
}

/* Returns false when the reply is deferred (no ReadyForQuery yet). */
/* SET on a value that passed config.c's checks: turning two_phase_commit
 * on asks the shards first (twophase_check.h), which SET cannot wait for.
 * Refused before anything changes. */
struct set_verdict {
	const struct config *cur;
	bool needs_reload;
};

static bool set_acceptable(const struct config *trial, void *arg, char *err, size_t errlen)
{
	struct set_verdict *sv = arg;
	if (sv->cur->general.two_phase_commit || !twophase_check_needed(trial, NULL))
		return true;
	sv->needs_reload = true;
	snprintf(err, errlen, "two_phase_commit is turned on by pgcat.ini and RELOAD, which first checks "
		 "max_prepared_transactions on the shards");
	return false;
}

static bool run_command(struct client *c, const char *sql)
{
	struct worker *w = c->w;
	struct words ws;
	split_words(sql, &ws);
	if (ws.n == 0) {
		buf_add_bodyless(client_output(c), PqMsg_EmptyQueryResponse);
		return true;
	}
	/* stats_users (and anyone no longer listed since a reload): SHOW only. */
	if (!is(&ws, 0, "show") && !c->console_peer && admin_role_of(w->cfg, client_user(c)) != ADMIN_ROLE_ADMIN) {
		char a[CLIENT_ADDR_STRLEN];
		log_warning("C-%llu %s@%s %s:%d: admin command refused, not in admin_users: %s", (unsigned long long)c->id,
			    client_user(c), client_database(c), client_addr_str(c, a), c->port, ws.w[0]);
		admin_error(c, "42501", "permission denied: user \"%s\" may run SHOW commands only", client_user(c));
		return true;
	}
	if (is(&ws, 0, "show") && is(&ws, 1, "queries")) {
		if (ws.n == MAX_WORDS)   /* (words past the last are not split; SHOW QUERIES has at most 9) */
			admin_error(c, "42601", "SHOW QUERIES: too many words");
		else
			admin_show_queries(c, ws.w + 2, ws.n - 2);
		return true;
	}
	if (is(&ws, 0, "reset") && is(&ws, 1, "queries") && ws.n <= 3) {
		admin_reset_queries(c, ws.n == 3 ? ws.w[2] : NULL);
		return true;
	}
	if (is(&ws, 0, "show") && is(&ws, 1, "reshard") && ws.n == 2) {
		admin_show_reshard(c);
		return true;
	}
	if (is(&ws, 0, "show") && is(&ws, 1, "reshard") && is(&ws, 2, "tables") && ws.n == 3) {
		admin_show_reshard_tables(c);
		return true;
	}
	if (is(&ws, 0, "reshard") && (is(&ws, 1, "pause") || is(&ws, 1, "resume")) && ws.n == 3) {
		/* What a reshard's cutover asks of a peer instance (reshard_peers.c):
		 * pause the pool's writes, answered once none may write; resume
		 * them. */
		bool pause = is(&ws, 1, "pause");
		if ((pause ? pool_pause_writes(w, ws.w[2]) : pool_resume_writes(w, ws.w[2])) == 0) {
			admin_error(c, "3D000", "no such database: %s", ws.w[2]);
			return true;
		}
		log_info("admin: RESHARD %s %s", pause ? "PAUSE" : "RESUME", ws.w[2]);
		return broadcast(c, pause ? SHM_ADMIN_PAUSE_WRITES : SHM_ADMIN_RESUME_WRITES, ws.w[2], NULL, "RESHARD",
				 pause ? ADMIN_DRAIN_WRITES : ADMIN_DRAIN_NONE);
	}
	if (is(&ws, 0, "reshard")) {
		admin_reshard(c, ws.w + 1, ws.n - 1);
		return true;
	}
	if (is(&ws, 0, "show")) {
		if (ws.n != 2) {
			admin_error(c, "42601", "SHOW needs exactly one name, e.g. SHOW POOLS");
			return true;
		}
		int kind = admin_dump_kind(ws.w[1]);
		if (kind >= 0 && w->shm->h->n_workers > 1)
			return show_across_workers(c, kind);
		if (!admin_show(c, ws.w[1]))
			admin_error(c, "42704", "unknown SHOW command: %s", ws.w[1]);
		return true;
	}
	const char *db = ws.n >= 2 ? ws.w[1] : NULL;
	if (is(&ws, 0, "upgrade") && ws.n == 1)
		return upgrade(c);
	if (is(&ws, 0, "reload") && ws.n == 1) {
		char err[512];
		if (w->cmds->reload(w, err, sizeof err)) {
			/* The supervisor passes it on to the other workers. */
			if (w->shm->h->n_workers > 1)
				kill(getppid(), SIGHUP);
			/* two_phase_commit on for shards not checked yet: the new
			 * configuration waits for their answers (worker_reload), and
			 * so does this reply, parked (the loop goes on). */
			if (w->reload.check) {
				struct admin_pending *ap = calloc(1, sizeof *ap);
				if (ap) {
					ap->reload = true;
					ap->seq = w->reload.started;
					ap->dump = -1;
					snprintf(ap->tag, sizeof ap->tag, "RELOAD");
					free(c->kind_state);
					c->kind_state = ap;
					return false;
				}
				/* (Out of memory: the reply cannot wait; the log has the verdict.) */
			}
			admin_complete(c, "RELOAD");
		} else
			reload_failed(c, err);
		return true;
	}
	if (is(&ws, 0, "resume") && (w->shutting_down || w->waiting_for_clients || w->waiting_for_servers)) {
		admin_error(c, "08P01", "pooler is shutting down");   /* PgBouncer's words */
		return true;
	}
	if (is(&ws, 0, "suspend") && ws.n == 1) {
		if (w->suspended) {
			admin_error(c, "08P01", "already suspended/paused");   /* PgBouncer's words */
			return true;
		}
		log_info("admin: SUSPEND");
		w->cmds->suspend(w, true);
		return broadcast(c, SHM_ADMIN_SUSPEND, NULL, NULL, "SUSPEND", ADMIN_DRAIN_NONE);
	}
	if ((is(&ws, 0, "pause") || is(&ws, 0, "resume") || is(&ws, 0, "reconnect")) && ws.n <= 2) {
		int n;
		enum shm_admin_command cmd;
		if (is(&ws, 0, "pause")) {
			n = pool_pause(w, db);
			cmd = SHM_ADMIN_PAUSE;
		} else if (is(&ws, 0, "resume")) {
			n = pool_resume(w, db);
			if (!db)
				w->cmds->suspend(w, false);   /* RESUME ends a SUSPEND too */
			cmd = SHM_ADMIN_RESUME;
		} else {
			n = pool_reconnect(w, db);
			cmd = SHM_ADMIN_RECONNECT;
		}
		if (db && n == 0) {
			admin_error(c, "3D000", "no such database: %s", db);
			return true;
		}
		log_info("admin: %s %s", ws.w[0], db ? db : "(all)");
		char tag[16];
		snprintf(tag, sizeof tag, "%s", ws.w[0]);
		for (char *t = tag; *t; t++)
			*t = (char)toupper((unsigned char)*t);
		return broadcast(c, cmd, db, NULL, tag, cmd == SHM_ADMIN_PAUSE ? ADMIN_DRAIN_ALL : ADMIN_DRAIN_NONE);
	}
	if ((is(&ws, 0, "disable") || is(&ws, 0, "enable") || is(&ws, 0, "kill")) &&
	    (ws.n == 2 || (ws.n == 1 && is(&ws, 0, "kill")))) {
		int n = is(&ws, 0, "kill") ? w->cmds->kill(w, db) : pool_set_disabled(w, db, is(&ws, 0, "disable"));
		if (db && n == 0) {
			admin_error(c, "3D000", "no such database: %s", db);
			return true;
		}
		log_info("admin: %s %s", ws.w[0], db ? db : "(all)");
		return broadcast(c,
				 is(&ws, 0, "kill") ? SHM_ADMIN_KILL : is(&ws, 0, "disable") ? SHM_ADMIN_DISABLE : SHM_ADMIN_ENABLE,
				 db, NULL, is(&ws, 0, "kill") ? "KILL" : is(&ws, 0, "disable") ? "DISABLE" : "ENABLE", ADMIN_DRAIN_NONE);
	}
	if (is(&ws, 0, "kill_client") && ws.n == 2)
		return kill_client(c, ws.w[1]);
	if (is(&ws, 0, "wait_close") && ws.n <= 2) {
		if (db && !pool_db_exists(w, db)) {
			admin_error(c, "3D000", "no such database: %s", db);
			return true;
		}
		log_info("admin: WAIT_CLOSE %s", db ? db : "(all)");
		return wait_close(c, db);
	}
	if (is(&ws, 0, "shutdown") && ws.n == 2 && (is(&ws, 1, "wait_for_clients") || is(&ws, 1, "wait_for_servers"))) {
		bool servers = is(&ws, 1, "wait_for_servers");
		log_info("admin: SHUTDOWN %s", servers ? "WAIT_FOR_SERVERS" : "WAIT_FOR_CLIENTS");
		/* The supervisor stops too (and does not restart a worker that
		 * exits); the other workers hear it through the admin ring. */
		union sigval v = { .sival_int = SHM_SIGVAL_WAIT_FOR_CLIENTS };
		if (sigqueue(getppid(), SIGTERM, v) != 0)
			log_warning("SHUTDOWN: cannot tell the supervisor");
		if (servers)
			w->cmds->wait_for_servers(w);
		else
			w->cmds->wait_for_clients(w);
		/* The reply once every worker has stopped accepting. */
		return broadcast(c, servers ? SHM_ADMIN_WAIT_FOR_SERVERS : SHM_ADMIN_WAIT_FOR_CLIENTS, NULL, NULL,
				 "SHUTDOWN", ADMIN_DRAIN_NONE);
	}
	if (is(&ws, 0, "shutdown") && ws.n == 1) {
		log_info("admin: SHUTDOWN");
		admin_complete(c, "SHUTDOWN");
		/* The whole instance: the supervisor tells every worker. */
		kill(getppid(), SIGTERM);
		w->cmds->begin_shutdown(w);
		return true;
	}
	if ((is(&ws, 0, "ban") && (ws.n == 2 || ws.n == 3)) || (is(&ws, 0, "unban") && ws.n == 2)) {
		char host[256];
		int port;
		if (!parse_host_port(ws.w[1], host, sizeof host, &port)) {
			admin_error(c, "22023", "expected host:port, got \"%s\"", ws.w[1]);
			return true;
		}
		if (is(&ws, 0, "unban")) {
			(void)shm_ban_clear(w->shm, host, port);
			struct log_field f[] = { { "host", host, 0 }, { "port", NULL, port }, { "source", "admin", 0 } };
			log_event(LOG_LEVEL_INFO, "server_unban", f, sizeof f / sizeof *f, NULL, "admin: unban %s:%d", host,
				  port);
			admin_complete(c, "UNBAN");
			return true;
		}
		long secs = w->cfg->general.ban_time;
		if (ws.n == 3) {
			char *end;
			secs = strtol(ws.w[2], &end, 10);
			if (*end || secs < 1 || secs > 86400 * 365) {
				admin_error(c, "22023", "ban time must be a number of seconds, got \"%s\"", ws.w[2]);
				return true;
			}
		}
		if (!shm_ban_set(w->shm, host, port, (int64_t)time(NULL), (int)secs, BAN_SOURCE_ADMIN, "admin")) {
			admin_error(c, "53000", "ban table is full");
			return true;
		}
		struct log_field f[] = { { "host", host, 0 }, { "port", NULL, port }, { "seconds", NULL, secs },
					 { "reason", "admin", 0 }, { "source", "admin", 0 } };
		log_event(LOG_LEVEL_INFO, "server_ban", f, sizeof f / sizeof *f, NULL, "admin: ban %s:%d for %ld s", host,
			  port, secs);
		admin_complete(c, "BAN");
		return true;
	}
	if (is(&ws, 0, "set") && ws.n >= 2) {
		/* SET key = value | SET key TO value | SET key=value */
		const char *key = ws.w[1];
		char keybuf[128];
		const char *value;
		char *eq = strchr(key, '=');
		if (eq) {
			/* "key=value" or "key=" */
			snprintf(keybuf, sizeof keybuf, "%.*s", (int)(eq - key), key);
			key = keybuf;
			value = eq[1] ? ws.rest[1] + (eq - ws.w[1]) + 1 : (ws.n >= 3 ? ws.rest[2] : "");
		} else if (ws.n >= 3 && (strcmp(ws.w[2], "=") == 0 || strcasecmp(ws.w[2], "to") == 0)) {
			value = ws.n >= 4 ? ws.rest[3] : "";
		} else if (ws.n >= 3 && ws.w[2][0] == '=') {
			value = ws.rest[2] + 1;
		} else {
			admin_error(c, "42601", "expected SET key = value");
			return true;
		}
		char err[256];
		struct set_verdict sv = { w->cfg, false };
		if (!config_general_set_if(w->cfg, key, value, set_acceptable, &sv, err, sizeof err)) {
			admin_error(c, sv.needs_reload ? "55000" : "22023", "%s", err);
			return true;
		}
		/* TLS keys are SET one at a time (a key, then its certificate):
		 * until they can be used together the running contexts stay,
		 * and the reply says why. */
		if (!pool_apply_set(w, key, err, sizeof err)) {
			log_warning("admin: SET %s: TLS: %s; the running TLS settings stay until these can be used", key,
				    err);
			admin_notice(c, "WARNING", "TLS: %s; the running TLS settings stay until these can be used", err);
		}
		log_info("admin: SET %s", key);
		return broadcast(c, SHM_ADMIN_SET, key, value, "SET", ADMIN_DRAIN_NONE);
	}
	admin_error(c, "42601", "unknown admin command: %s", sql);
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
	struct buf *in = c->io.in;
	uint32_t total = f->len + 1;
	if (c->kind_state)
		return false;   /* the reply to the previous command comes first */
	switch (f->type) {
	case PqMsg_Query: {
		if (total > ADMIN_MAX_QUERY) {
			client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "admin command too long");
			return true;
		}
		if (buf_len(in) < total)
			return false;
		char sql[ADMIN_MAX_QUERY + 1];
		buf_take(in, sql, total);
		size_t n = f->len - 4;
		if (n == 0 || sql[5 + n - 1] != '\0') {
			client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "malformed Query message");
			return true;
		}
		memmove(sql, sql + 5, n);
		trim_statement(sql);
		log_debug("admin C-%llu: %s", (unsigned long long)c->id, sql);
		/* Each command is a transaction and a query of the console's
		 * database, in its slot of the shared segment (SHOW STATS and
		 * TOTALS count them, as PgBouncer's do). */
		if (c->w->shm && c->count_slot >= 0) {
			struct stats *st = shm_stats(c->w->shm, c->w->id, c->count_slot);
			stats_add(st, STAT_XACT, 1);
			stats_add(st, STAT_QUERY, 1);
		}
		if (run_command(c, sql) && c->state != CLIENT_CLOSED)
			admin_rfq(c);
		return true;
	}
	case PqMsg_Sync:
		buf_drain(in, total);
		admin_rfq(c);
		return true;
	default:
		/* Extended protocol, COPY, function calls: not here. */
		client_discard_message(c, total);
		admin_error(c, SQLSTATE_FEATURE_NOT_SUPPORTED, "the admin console speaks the simple query protocol only");
		if (f->type == PqMsg_FunctionCall)
			admin_rfq(c);
		else
			client_set_batch(c, CLIENT_BATCH_SKIP_TO_SYNC);
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
	char v[64];
	snprintf(v, sizeof v, "15.0 (pgcat %s)", pgcat_version);
	pktbuf_parameter_status(&pb, "server_version", v);
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
