/* SPDX-License-Identifier: MIT */
/*
 * reshard: the plan of a pool's reshard and its phases (reshard.h).
 * Worker 0 runs every reshard of the instance; a console on another
 * worker passes its request on through the admin ring. The sources
 * (reshard_source.c) do the work; this room starts them, moves the phase
 * on when they all reached a step, saves it in state_dir, publishes the
 * progress for SHOW RESHARD, and runs the cutover:
 *
 *   pause the pool's writes in every worker (reads go on, on the old
 *   layout), wait until no server of it serves a transaction that may
 *   write (a client inside one finishes it first), ask every source
 *   for its current WAL position, wait until each stream has applied up
 *   to it, save phase done, switch every worker to the new layout through
 *   the admin ring, resume. A cutover whose clients do not release their
 *   servers within RESHARD_DRAIN_LIMIT_US is given up (the pool resumes
 *   on the old layout) and tried again later.
 *
 * RESHARD CANCEL and RESHARD CLEANUP connect to the sources only: the
 * slots and the publication go (CLEANUP also empties the sharded tables
 * of the old shards, whose rows moved).
 */
#include "reshard_types.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "buf.h"
#include "client.h"
#include "config.h"
#include "context.h"
#include "list.h"
#include "log.h"
#include "pool.h"
#include "shm.h"

#define RS_TICK_US 20000
/* A cutover given up waits this long before the next try. */
#define RS_RETRY_CUTOVER_US (10u * 1000u * 1000u)
/* A drop of the slots that failed is tried again after this. */
#define RS_RETRY_DROP_US (5u * 1000u * 1000u)
/* A stopped reshard waits this long at most for its peers' answers. */
#define RS_PEERS_GRACE_US (10u * 1000u * 1000u)

enum rs_mode {
	RSM_MOVE,        /* copy, stream, cut over */
	RSM_DROP,        /* CANCEL: the slots and the publication dropped */
	RSM_CLEANUP,     /* CLEANUP: the same, and the old shards' sharded tables emptied */
};

/* (struct reshard keeps what the sources read; this is the rest.) */
struct rs_extra {
	enum rs_mode mode;
	uint64_t pause_seq;
	uint64_t retry_after_us;
	bool schema_applying;
	bool truncating;
	bool *dropped;           /* RSM_DROP, RSM_CLEANUP, and after a cutover: per source */
	bool dropping;
	bool stopped;            /* nothing left to do: freed at the next tick */
	bool drop_after;         /* failed: its slots are dropped by a run of their own (reshard_tick) */
	uint64_t retry_drop_us;  /* RSM_DROP, RSM_CLEANUP that failed: connect again then (0: not waiting) */
	uint64_t stopped_us;     /* when reshard_tick first saw it stopped */
	bool checking_tables;    /* cutover: source 0's table count asked */
	bool tables_checked;     /* ... and it is still the plan's (checked once per cutover try) */
	uint64_t switch_seq;     /* RSP_SWITCHING: the ring's SHM_ADMIN_RESHARD_SWITCH */
	uint64_t switch_start_us;
	enum reshard_phase final_phase;   /* RSM_DROP: the phase it ends in */
};

struct rs_entry {
	struct reshard rs;
	struct rs_extra x;
};

static struct rs_entry *entry_of(struct reshard *rs)
{
	return (struct rs_entry *)rs;
}

/* ---- progress and state ---- */

/* A bounded copy (a longer text is cut). */
static void copy_text(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

static bool save_state(struct reshard *rs)
{
	struct rs_state st = { 0 };
	st.phase = rs->phase == RESHARD_CUTOVER ? RESHARD_REPLICATE : rs->phase;
	st.hold = rs->hold;
	st.schema_done = rs->schema_done;
	st.slots = rs->slots;
	st.pause_us = rs->pause_us;
	snprintf(st.targets, sizeof st.targets, "%s", rs->targets);
	snprintf(st.sources, sizeof st.sources, "%s", rs->sources);
	snprintf(st.error, sizeof st.error, "%s", rs->error);
	char why[300];
	if (rs_state_write(rs->w->cfg->general.state_dir, rs->pool, &st, why, sizeof why))
		return true;
	log_error("reshard %s: %s", rs->pool, why);
	copy_text(rs->error, sizeof rs->error, why);
	rs->errors++;
	return false;
}

static void set_phase(struct reshard *rs, enum reshard_phase p)
{
	if (rs->phase != p)
		log_info("reshard %s: phase %s", rs->pool, reshard_phase_name(p));
	rs->phase = p;
	rs_publish(rs);
}

static void resume_pool(struct reshard *rs)
{
	(void)pool_resume_writes(rs->w, rs->pool);
	(void)shm_admin_post(rs->w->shm, rs->w->id, SHM_ADMIN_RESUME_WRITES, rs->pool, NULL);
}

static void close_sources(struct reshard *rs)
{
	for (int i = 0; rs->src && i < rs->n_src; i++)
		rs_source_close(&rs->src[i]);
	rs_schema_stop(rs);
}

static void rs_fail(struct reshard *rs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rs_fail(struct reshard *rs, const char *fmt, ...)
{
	struct rs_extra *x = &entry_of(rs)->x;
	if (x->stopped || (x->mode == RSM_MOVE && rs->phase == RESHARD_FAILED))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rs->error, sizeof rs->error, fmt, ap);
	va_end(ap);
	rs->errors++;
	if (x->mode == RSM_MOVE && rs->phase == RESHARD_DONE) {
		/* Cut over already (every worker has the new layout): only the
		 * slots' drop failed. The phase stays done; the slots go by a
		 * run of their own. */
		log_error("reshard %s: after the cutover: %s; the replication slots are dropped again", rs->pool,
			  rs->error);
		if (rs->step == RSP_SWITCHING) {
			/* (the writes were still paused, for the switch) */
			resume_pool(rs);
			rs_peers_resume(rs);
			rs->step = RSP_SOURCES;
		}
		close_sources(rs);
		x->stopped = true;
		x->drop_after = true;
		rs_publish(rs);
		return;
	}
	if (x->mode != RSM_MOVE) {
		/* Dropping the slots failed (a source down?): said, the phase
		 * stays, and it is tried again a while later. */
		log_error("reshard %s: %s; dropping the replication slots is tried again in %u s", rs->pool, rs->error,
			  RS_RETRY_DROP_US / 1000000);
		close_sources(rs);
		x->retry_drop_us = rs->w->now_us + RS_RETRY_DROP_US;
		rs_publish(rs);
		return;
	}
	log_error("reshard %s failed: %s; the old layout keeps serving (RESHARD CANCEL drops the replication slots)",
		  rs->pool, rs->error);
	if (rs->step != RSP_SOURCES) {
		resume_pool(rs);
		rs_peers_resume(rs);
	}
	close_sources(rs);
	rs->phase = RESHARD_FAILED;
	if (x->truncating)
		rs->schema_done = false;   /* the new shards do not have the tables it knew: copied again next time */
	(void)save_state(rs);
	x->stopped = true;
	/* Slots left behind would keep the sources' WAL: they go. */
	x->drop_after = rs->slots;
	rs_publish(rs);
}

static void ev_fail(struct reshard *rs, const char *why)
{
	rs_fail(rs, "%s", why);
}

/* ---- making one ---- */

static bool endpoints(struct rs_endpoint **out, const struct config_shard *shards, size_t n, char *why, size_t whylen)
{
	*out = calloc(n ? n : 1, sizeof **out);
	if (!*out) {
		snprintf(why, whylen, "out of memory");
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		const struct config_server *sv = rs_primary(&shards[i]);
		if (!sv) {
			snprintf(why, whylen, "shard %d has no primary", shards[i].index);
			return false;
		}
		if (!((*out)[i].host = strdup(sv->host)) || !((*out)[i].database = strdup(shards[i].database))) {
			snprintf(why, whylen, "out of memory");
			return false;
		}
		(*out)[i].port = sv->port;
	}
	return true;
}

static void endpoints_free(struct rs_endpoint *e, int n)
{
	for (int i = 0; e && i < n; i++) {
		free(e[i].host);
		free(e[i].database);
	}
	free(e);
}

static void rs_free(struct rs_entry *en)
{
	struct reshard *rs = &en->rs;
	rs_schema_stop(rs);
	for (int i = 0; rs->src && i < rs->n_src; i++)
		rs_source_free(&rs->src[i]);
	free(rs->src);
	for (size_t t = 0; t < rs->n_tables; t++) {
		free(rs->tables[t].nspname);
		free(rs->tables[t].relname);
		free(rs->tables[t].qname);
		free(rs->tables[t].columns);
		free(rs->tables[t].key_name);
	}
	free(rs->tables);
	if (rs->dump_out)
		buf_free(rs->dump_out);
	if (rs->timer)
		event_free(rs->timer);
	rs_peers_free(rs);
	endpoints_free(rs->src_ep, rs->n_src);
	endpoints_free(rs->dst_ep, rs->n_dst);
	if (rs->password)
		explicit_bzero(rs->password, strlen(rs->password));
	free(rs->password);
	free(rs->user);
	free(rs->drop_first);
	for (size_t i = 0; i < rs->n_seqs; i++)
		free(rs->seqs[i].name);
	free(rs->seqs);
	free(en->x.dropped);
	free(en);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg);
static void open_controls(struct reshard *rs);
static void ev_fail(struct reshard *rs, const char *why);
static void rs_source_progressed(struct reshard *rs);
static void rs_schema_dumped(struct reshard *rs, bool ok, const char *why);

static const struct rs_events plan_events = {
	.failed = ev_fail,
	.progressed = rs_source_progressed,
	.publish = rs_publish,
	.schema_dumped = rs_schema_dumped,
};

/* swapped: the running snapshot uses the next layout already (a reshard
 * that cut over): its sources are the layout it moved from. */
static struct rs_entry *rs_new(struct worker *w, const struct config_pool *cp, enum rs_mode mode, bool swapped,
			       char *why, size_t whylen)
{
	struct rs_entry *en = calloc(1, sizeof *en);
	if (!en) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	struct reshard *rs = &en->rs;
	rs->w = w;
	rs->ev = &plan_events;
	rs->dump_fd = -1;
	en->x.mode = mode;
	snprintf(rs->pool, sizeof rs->pool, "%s", cp->name);
	rs_slot_name(rs->publication, sizeof rs->publication, rs->pool, -1);
	rs_profile_init(rs);
	rs->fn = cp->sharding_function;
	/* After a cutover the configuration's next layout is the one in
	 * use: CLEANUP's sources are the layout it moved from. */
	const struct config_shard *from = cp->shards, *to = cp->next_shards;
	size_t n_from = cp->n_shards, n_to = cp->n_next_shards;
	if (swapped) {
		from = cp->next_shards;
		to = cp->shards;
		n_from = cp->n_next_shards;
		n_to = cp->n_shards;
	}
	rs->n_src = (int)n_from;
	rs->n_dst = (int)n_to;
	rs_layout_text(to, n_to, rs->targets, sizeof rs->targets);
	rs_layout_text(from, n_from, rs->sources, sizeof rs->sources);
	if (cp->n_users == 0) {
		snprintf(why, whylen, "the pool has no user in the configuration to connect as");
		goto fail;
	}
	const char *user = config_user_server_name(cp, &cp->users[0]);
	const char *pw = config_user_server_password(cp, &cp->users[0]);
	if (!(rs->user = strdup(user)) || (pw && !(rs->password = strdup(pw)))) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	if (!endpoints(&rs->src_ep, from, n_from, why, whylen) || !endpoints(&rs->dst_ep, to, n_to, why, whylen))
		goto fail;
	for (int i = 0; i < rs->n_src; i++)
		for (int d = 0; d < rs->n_dst; d++)
			if (strcmp(rs->src_ep[i].host, rs->dst_ep[d].host) == 0 && rs->src_ep[i].port == rs->dst_ep[d].port &&
			    strcmp(rs->src_ep[i].database, rs->dst_ep[d].database) == 0) {
				snprintf(why, whylen, "new shard %d is the database of shard %d (%s); the new shards must be "
					 "other databases", d, i, rs->src_ep[i].database);
				goto fail;
			}
	if (!(rs->src = calloc((size_t)rs->n_src, sizeof *rs->src)) ||
	    !(en->x.dropped = calloc((size_t)rs->n_src, sizeof *en->x.dropped))) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	for (int i = 0; i < rs->n_src; i++)
		if (!rs_source_init(rs, &rs->src[i], i)) {
			snprintf(why, whylen, "out of memory");
			goto fail;
		}
	if (!rs_peers_init(rs) || !(rs->timer = event_new(w->base, -1, EV_PERSIST, timer_cb, en))) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	struct timeval tv = { 0, RS_TICK_US };
	evtimer_add(rs->timer, &tv);
	rs->started_us = w->now_us;
	return en;
fail:
	rs_free(en);
	return NULL;
}

static bool remember(struct worker *w, struct rs_entry *en)
{
	struct reshard **n = realloc(w->reshards, (w->n_reshards + 1) * sizeof *n);
	if (!n)
		return false;
	w->reshards = n;
	w->reshards[w->n_reshards++] = &en->rs;
	return true;
}

static struct reshard *find_running(struct worker *w, const char *pool)
{
	for (size_t i = 0; i < w->n_reshards; i++)
		if (strcmp(w->reshards[i]->pool, pool) == 0 && !entry_of(w->reshards[i])->x.stopped)
			return w->reshards[i];
	return NULL;
}

/* ---- the plan moves on ---- */

static bool all_sources(const struct reshard *rs, enum rs_source_state st)
{
	for (int i = 0; i < rs->n_src; i++)
		if (rs->src[i].state != st)
			return false;
	return true;
}

static bool source0_dst_idle(const struct reshard *rs)
{
	for (int d = 0; d < rs->n_dst; d++)
		if (!rs_conn_idle(&rs->src[0].dst[d]))
			return false;
	return true;
}

static void begin_sources(struct reshard *rs)
{
	for (int i = 0; i < rs->n_src && rs->phase != RESHARD_FAILED; i++)
		rs_source_begin_copy(&rs->src[i]);
}

/* The new shards' tables emptied: a copy started again after a restart. */
static void truncate_destinations(struct reshard *rs)
{
	struct buf *b = buf_new(4096);
	if (!b || buf_add(b, "TRUNCATE ", 9) != 0) {
		if (b)
			buf_free(b);
		rs_fail(rs, "out of memory");
		return;
	}
	for (size_t t = 0; t < rs->n_tables; t++)
		if (buf_add_printf(b, "%s%s", t ? ", " : "", rs->tables[t].qname) < 0) {
			buf_free(b);
			rs_fail(rs, "out of memory");
			return;
		}
	if (buf_add(b, "", 1) != 0) {
		buf_free(b);
		rs_fail(rs, "out of memory");
		return;
	}
	entry_of(rs)->x.truncating = true;
	for (int d = 0; d < rs->n_dst; d++)
		if (!rs_conn_query(&rs->src[0].dst[d], (const char *)buf_head(b))) {
			rs_fail(rs, "new shard %d: could not send TRUNCATE", d);
			break;
		}
	buf_free(b);
}

static void rs_schema_dumped(struct reshard *rs, bool ok, const char *why)
{
	if (!ok) {
		rs_fail(rs, "schema: %s", why);
		return;
	}
	char *sql = rs_schema_sql(buf_head(rs->dump_out), buf_len(rs->dump_out));
	buf_free(rs->dump_out);
	rs->dump_out = NULL;
	if (!sql) {
		rs_fail(rs, "schema: pg_dump's output holds a NUL byte, or out of memory");
		return;
	}
	entry_of(rs)->x.schema_applying = true;
	for (int d = 0; d < rs->n_dst; d++)
		if (!rs_conn_query(&rs->src[0].dst[d], sql)) {
			rs_fail(rs, "new shard %d: the schema could not be sent", d);
			break;
		}
	free(sql);
	/* pg_dump's own settings (search_path, client_encoding) stay on
	 * those sessions: the source's encoding again. */
	char set[160];
	snprintf(set, sizeof set, "SET client_encoding = '%s'", rs->src[0].encoding);
	for (int d = 0; d < rs->n_dst && rs->phase != RESHARD_FAILED; d++)
		(void)rs_conn_query(&rs->src[0].dst[d], set);
}

static void rs_source_progressed(struct reshard *rs)
{
	struct rs_extra *x = &entry_of(rs)->x;
	if (rs->phase == RESHARD_FAILED || x->stopped || x->mode != RSM_MOVE)
		return;
	if (rs->phase == RESHARD_COPY || (rs->phase == RESHARD_REPLICATE && rs->resume_stream && !rs->tables_listed)) {
		if (!rs->tables_listed) {
			if (!all_sources(rs, RSS_WAIT_SCHEMA))
				return;
			if (!rs->listing_tables) {
				rs->listing_tables = true;
				if (!rs_conn_query(&rs->src[0].ctl, rs_tables_query))
					rs_fail(rs, "source shard 0: could not list the tables");
				return;
			}
			if (!rs_conn_idle(&rs->src[0].ctl))
				return;
			rs->listing_tables = false;
			rs->tables_listed = true;
			if (rs->n_tables == 0) {
				rs_fail(rs, "source shard 0 has no table to move");
				return;
			}
			const char *unmatched = rs_unmatched_sharded(rs);
			if (unmatched) {
				rs_fail(rs, "sharded_tables names %s, a table source shard 0 does not have; nothing was changed",
					unmatched);
				return;
			}
			for (size_t t = 0; t < rs->n_tables; t++)
				if (rs->tables[t].unmovable[0]) {
					rs_fail(rs, "table %s.%s cannot be moved: %s (its updates and deletes could not be "
						"applied by key); nothing was changed", rs->tables[t].nspname,
						rs->tables[t].relname, rs->tables[t].unmovable);
					return;
				}
			rs_publish(rs);
			if (rs->resume_stream) {
				begin_sources(rs);
				return;
			}
			if (!rs->schema_done)
				(void)rs_schema_dump(rs);
			else
				truncate_destinations(rs);
			return;
		}
		if ((x->schema_applying || x->truncating) && source0_dst_idle(rs)) {
			x->schema_applying = x->truncating = false;
			rs->schema_done = true;
			if (!save_state(rs)) {
				rs_fail(rs, "the state could not be saved");
				return;
			}
			log_info("reshard %s: the schema is on the new shards; copying", rs->pool);
			begin_sources(rs);
			return;
		}
	}
	if (rs->phase == RESHARD_COPY && all_sources(rs, RSS_STREAM)) {
		rs->phase = RESHARD_REPLICATE;
		if (!save_state(rs)) {
			rs_fail(rs, "the state could not be saved");
			return;
		}
		set_phase(rs, RESHARD_REPLICATE);
	}
}

/* ---- cutover ---- */

static uint64_t max_lag(const struct reshard *rs)
{
	uint64_t lag = 0;
	for (int i = 0; i < rs->n_src; i++) {
		const struct rs_source *s = &rs->src[i];
		if (!s->server_end)
			return UINT64_MAX;   /* not measured yet */
		uint64_t l = s->server_end > s->confirmed ? s->server_end - s->confirmed : 0;
		if (l > lag)
			lag = l;
	}
	return lag;
}

static void give_up_cutover(struct reshard *rs, const char *why)
{
	struct rs_extra *x = &entry_of(rs)->x;
	resume_pool(rs);
	rs_peers_resume(rs);
	for (int i = 0; i < rs->n_src; i++) {
		/* (An answer still to come is read and dropped: the flags stay
		 * until it comes, and the target with them is cleared then.) */
		rs->src[i].target = 0;
		rs->src[i].stale_target = rs->src[i].asking_target;
	}
	rs->step = RSP_SOURCES;
	snprintf(rs->error, sizeof rs->error, "cutover given up: %s; tried again in %u s", why,
		 RS_RETRY_CUTOVER_US / 1000000);
	rs->errors++;
	log_warning("reshard %s: %s", rs->pool, rs->error);
	x->retry_after_us = rs->w->now_us + RS_RETRY_CUTOVER_US;
	x->tables_checked = false;
	set_phase(rs, RESHARD_REPLICATE);
}

static void start_drop(struct reshard *rs)
{
	struct rs_extra *x = &entry_of(rs)->x;
	x->dropping = true;
	for (int i = 0; i < rs->n_src; i++)
		if (!x->dropped[i])
			rs_source_drop_slot(&rs->src[i]);
}

static void cut_over(struct reshard *rs)
{
	struct worker *w = rs->w;
	/* A RELOAD during the reshard may have changed either layout: the
	 * switch would then not be the one the data moved for. */
	const struct config_pool *cp = config_find_pool(w->cfg, rs->pool);
	char now[sizeof rs->sources], next[sizeof rs->targets];
	now[0] = next[0] = '\0';
	if (cp) {
		rs_layout_text(cp->shards, cp->n_shards, now, sizeof now);
		rs_layout_text(cp->next_shards, cp->n_next_shards, next, sizeof next);
	}
	if (!cp || strcmp(now, rs->sources) != 0 || strcmp(next, rs->targets) != 0) {
		rs_fail(rs, "the configuration's layouts of %s changed during the reshard (a RELOAD): no cutover", rs->pool);
		return;
	}
	rs->pause_us = w->now_us - rs->pause_start_us;
	rs->phase = RESHARD_DONE;
	if (!save_state(rs)) {
		rs->phase = RESHARD_REPLICATE;
		give_up_cutover(rs, "the state could not be saved");
		return;
	}
	/* Every worker and peer switches before any resumes its writes: until
	 * its switch, each reads on the old layout, which must not miss a
	 * write made on the new one (finish_cut_over, once they all did). */
	reshard_switch(w, rs->pool);
	entry_of(rs)->x.switch_seq = shm_admin_post(w->shm, w->id, SHM_ADMIN_RESHARD_SWITCH, rs->pool, NULL);
	char sql[100];
	snprintf(sql, sizeof sql, "RESHARD SWITCH %s", rs->pool);
	rs_peers_send(rs, sql);
	entry_of(rs)->x.switch_start_us = w->now_us;
	rs->step = RSP_SWITCHING;
	rs_publish(rs);
}

/* Every worker and peer on the new layout (or the wait given up): the
 * writes resume, the streams end, the slots go. */
static void finish_cut_over(struct reshard *rs)
{
	struct worker *w = rs->w;
	char sql[100];
	snprintf(sql, sizeof sql, "RESHARD RESUME %s", rs->pool);
	rs_peers_send(rs, sql);
	resume_pool(rs);
	rs->pause_us = w->now_us - rs->pause_start_us;
	(void)save_state(rs);
	rs->step = RSP_SOURCES;
	log_info("reshard %s: cut over to %d shards; writes were paused %llu ms", rs->pool, rs->n_dst,
		 (unsigned long long)(rs->pause_us / 1000));
	set_phase(rs, RESHARD_DONE);
	/* The streams end, the slots go. */
	for (int i = 0; i < rs->n_src; i++) {
		struct rs_source *s = &rs->src[i];
		s->stopping = true;
		bconn_close(&s->repl.b, true);
		for (int d = 0; d < rs->n_dst; d++)
			bconn_close(&s->dst[d].b, true);
		s->stopping = false;
	}
	start_drop(rs);
}

static void cutover_tick(struct reshard *rs)
{
	struct worker *w = rs->w;
	struct rs_extra *x = &entry_of(rs)->x;
	switch (rs->step) {
	case RSP_SOURCES:
		if (rs->phase != RESHARD_REPLICATE || !all_sources(rs, RSS_STREAM) || (rs->hold && !rs->cutover_asked) ||
		    w->now_us < x->retry_after_us || max_lag(rs) > RESHARD_CUTOVER_LAG_BYTES)
			return;
		/* First: are the tables still those it moves? A table made
		 * since is in no publication and on no new shard (DDL is not
		 * replicated): that reshard cannot cut over. */
		if (!x->tables_checked) {
			struct rs_source *s0 = &rs->src[0];
			if (!x->checking_tables) {
				x->checking_tables = rs_source_count_tables(s0);   /* (not idle: next tick) */
				return;
			}
			if (s0->counting_tables)
				return;
			x->checking_tables = false;
			if (s0->tables_now != (long long)rs->n_tables) {
				char now[24] = "?";
				if (s0->tables_now >= 0)
					snprintf(now, sizeof now, "%lld", s0->tables_now);
				rs_fail(rs, "source shard 0 has %s tables now, the reshard moves %zu: a table was created or "
					"dropped during the reshard (DDL is not replicated); nothing was switched",
					now, rs->n_tables);
				return;
			}
			x->tables_checked = true;
		}
		log_info("reshard %s: replication caught up; cutting over (pausing the pool's writes)", rs->pool);
		rs->pause_start_us = w->now_us;
		/* Writes wait; reads go on, on the old layout until the switch
		 * (pool_types.h's writes_paused). */
		(void)pool_pause_writes(w, rs->pool);
		x->pause_seq = shm_admin_post(w->shm, w->id, SHM_ADMIN_PAUSE_WRITES, rs->pool, NULL);
		{
			/* The peers pause theirs too: RESHARD PAUSE answers once
			 * nothing there may write. */
			char sql[100];
			snprintf(sql, sizeof sql, "RESHARD PAUSE %s", rs->pool);
			rs_peers_send(rs, sql);
		}
		rs->step = RSP_PAUSING;
		set_phase(rs, RESHARD_CUTOVER);
		return;
	case RSP_PAUSING:
		if (w->now_us - rs->pause_start_us > RESHARD_DRAIN_LIMIT_US) {
			give_up_cutover(rs, "clients kept their servers");
			return;
		}
		if (rs_peers_failed(rs)) {
			char why[400];
			snprintf(why, sizeof why, "%s", rs_peers_failed(rs));
			give_up_cutover(rs, why);
			return;
		}
		if (!shm_admin_applied_by_all(w->shm, w->id, x->pause_seq) || !pool_writes_drained(w, rs->pool) ||
		    !rs_peers_settled(rs))
			return;
		for (int i = 0; i < rs->n_src; i++)
			rs_source_ask_target(&rs->src[i]);
		rs->step = RSP_DRAINING;
		return;
	case RSP_TARGET:
	case RSP_DRAINING:
		if (w->now_us - rs->pause_start_us > RESHARD_DRAIN_LIMIT_US) {
			give_up_cutover(rs, "the streams did not catch up");
			return;
		}
		for (int i = 0; i < rs->n_src; i++)
			if (!rs_source_drained(&rs->src[i]))
				return;
		/* Every row is there: the sequences next (nothing takes a
		 * value while the writes are paused: nextval is a write). */
		for (size_t i = 0; i < rs->n_seqs; i++)
			free(rs->seqs[i].name);
		rs->n_seqs = 0;
		rs->seqs_set = false;
		for (int i = 0; i < rs->n_src; i++)
			rs_source_ask_sequences(&rs->src[i]);
		rs->step = RSP_SEQUENCES;
		return;
	case RSP_SEQUENCES:
		if (w->now_us - rs->pause_start_us > RESHARD_DRAIN_LIMIT_US) {
			give_up_cutover(rs, "the sequences could not be set in time");
			return;
		}
		for (int i = 0; i < rs->n_src; i++)
			if (rs->src[i].reading_seqs || !rs_conn_idle(&rs->src[i].ctl))
				return;
		if (!rs->seqs_set) {
			rs->seqs_set = true;
			char *sql = rs_seq_sql(rs);
			if (!sql) {
				give_up_cutover(rs, "out of memory");
				return;
			}
			/* Each new shard at the highest value of any source: a key
			 * a sequence gives there is new on it. */
			for (int d = 0; sql[0] && d < rs->n_dst; d++)
				if (!rs_conn_query(&rs->src[0].dst[d], sql)) {
					free(sql);
					give_up_cutover(rs, "the sequences could not be sent");
					return;
				}
			free(sql);
		}
		for (int d = 0; d < rs->n_dst; d++)
			if (!rs_conn_idle(&rs->src[0].dst[d]))
				return;
		cut_over(rs);
		return;
	case RSP_SWITCHING:
		/* A worker or peer slow to switch only keeps the writes paused
		 * longer; one that does not answer within the limit is said
		 * loudly (drop_tick) and the writes resume. */
		if ((!shm_admin_applied_by_all(w->shm, w->id, x->switch_seq) || !rs_peers_settled(rs)) &&
		    w->now_us - x->switch_start_us < RESHARD_DRAIN_LIMIT_US)
			return;
		finish_cut_over(rs);
		return;
	}
}

/* Slots being dropped: each source's control connection answers with
 * the count of its slot left. */
static void drop_tick(struct reshard *rs)
{
	struct rs_extra *x = &entry_of(rs)->x;
	bool all = true;
	for (int i = 0; i < rs->n_src; i++) {
		struct rs_source *s = &rs->src[i];
		if (x->dropped[i])
			continue;
		if (bconn_state(&s->ctl.b) != BCONN_READY || !rs_conn_idle(&s->ctl)) {
			all = false;
			continue;
		}
		if (s->ctl.have_answer && strcmp(s->ctl.answer, "0") == 0) {
			x->dropped[i] = true;
			s->stopping = true;
			bconn_close(&s->ctl.b, true);
			s->stopping = false;
			continue;
		}
		all = false;
		rs_source_drop_slot(s);   /* still active (its walsender ending): again */
	}
	if (!all || !rs_peers_settled(rs))
		return;
	if (rs_peers_failed(rs)) {
		/* The switch did not reach a peer: it stays paused (on the old
		 * layout) until told; said loudly. */
		copy_text(rs->error, sizeof rs->error, rs_peers_failed(rs));
		rs->errors++;
		log_error("reshard %s: a peer did not take the new layout: %s; it keeps its pool paused: run RESHARD "
			  "SWITCH %s and RESHARD RESUME %s on its console", rs->pool, rs->error, rs->pool, rs->pool);
	}
	x->dropping = false;
	close_sources(rs);
	rs->slots = false;
	if (x->mode == RSM_DROP)
		rs->phase = x->final_phase;
	else if (x->mode == RSM_CLEANUP)
		log_info("reshard %s: RESHARD CLEANUP done", rs->pool);
	(void)save_state(rs);
	log_info("reshard %s: the replication slots and the publication are dropped", rs->pool);
	x->stopped = true;
	rs_publish(rs);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct rs_entry *en = arg;
	struct reshard *rs = &en->rs;
	worker_update_clock(rs->w);
	if (en->x.stopped) {
		event_del(rs->timer);
		return;
	}
	if (en->x.retry_drop_us) {
		if (rs->w->now_us < en->x.retry_drop_us)
			return;
		en->x.retry_drop_us = 0;
		open_controls(rs);
	}
	for (int i = 0; i < rs->n_src && !en->x.stopped; i++)
		rs_source_tick(&rs->src[i]);
	rs_peers_tick(rs);
	if (en->x.stopped)
		return;
	if (en->x.dropping) {
		drop_tick(rs);
		return;
	}
	if (en->x.mode == RSM_MOVE && (rs->phase != RESHARD_DONE || rs->step == RSP_SWITCHING))
		cutover_tick(rs);
	if (rs->w->now_us / 1000000 != rs->started_us / 1000000) {
		rs->started_us = rs->w->now_us;   /* (published once a second) */
		rs_publish(rs);
	}
}

/* ---- requests ---- */

/* CLEANUP: the sharded tables of the old shards emptied (their rows
 * moved). sharded_tables names them "[schema.]table.column". */
static char *truncate_sql(const struct config_pool *cp)
{
	struct buf *b = buf_new(256);
	if (!b || buf_add(b, "TRUNCATE ", 9) != 0)
		goto fail;
	for (size_t i = 0; i < cp->n_sharded_tables; i++) {
		const char *e = cp->sharded_tables[i];
		const char *last = strrchr(e, '.');
		if (!last)
			continue;
		if (i && buf_add(b, ", ", 2) != 0)
			goto fail;
		if (buf_add(b, "\"", 1) != 0)
			goto fail;
		for (const char *p = e; p < last; p++) {
			int r = *p == '.' ? buf_add(b, "\".\"", 3) : *p == '"' ? buf_add(b, "\"\"", 2) : buf_add(b, p, 1);
			if (r != 0)
				goto fail;
		}
		if (buf_add(b, "\"", 1) != 0)
			goto fail;
	}
	if (buf_add(b, "", 1) != 0)
		goto fail;
	char *out = strdup((const char *)buf_head(b));
	buf_free(b);
	return out;
fail:
	if (b)
		buf_free(b);
	return NULL;
}

/* The drop connections: only the control connection of each source. */
static void open_controls(struct reshard *rs)
{
	rs->controls_only = true;
	for (int i = 0; i < rs->n_src; i++)
		rs_source_open(&rs->src[i]);
}

/* A run that drops the slots and the publication of cp's sources, and
 * ends in phase final (error: the last error to keep; NULL: none). */
static void start_drop_run(struct worker *w, const struct config_pool *cp, enum reshard_phase final, const char *error)
{
	char why[300];
	struct rs_entry *en = rs_new(w, cp, RSM_DROP, final == RESHARD_DONE, why, sizeof why);
	if (!en || !remember(w, en)) {
		log_error("reshard %s: cannot drop the replication slots: %s", cp->name, en ? "out of memory" : why);
		if (en)
			rs_free(en);
		return;
	}
	en->rs.phase = final;
	en->rs.slots = true;
	en->x.final_phase = final;
	struct rs_state prev;   /* (what the state said of the schema stays said) */
	if (rs_state_read(w->cfg->general.state_dir, cp->name, &prev))
		en->rs.schema_done = prev.schema_done;
	if (error) {
		copy_text(en->rs.error, sizeof en->rs.error, error);
		en->rs.errors = 1;
	}
	(void)save_state(&en->rs);
	rs_publish(&en->rs);
	if (final == RESHARD_DONE) {
		/* Cut over, not finished: the peers may not have had the switch. */
		char sql[100];
		snprintf(sql, sizeof sql, "RESHARD SWITCH %s", cp->name);
		rs_peers_send(&en->rs, sql);
		snprintf(sql, sizeof sql, "RESHARD RESUME %s", cp->name);
		rs_peers_send(&en->rs, sql);
	}
	en->x.dropping = true;
	open_controls(&en->rs);
}

static void reshard_act(struct worker *w, enum reshard_request req, const char *pool, bool hold)
{
	const struct config_pool *cp = config_find_pool(w->cfg, pool);
	if (!cp || cp->n_next_shards == 0)
		return;
	struct reshard *run = find_running(w, pool);
	char why[300];
	switch (req) {
	case RESHARD_REQ_START: {
		if (run && entry_of(run)->x.mode != RSM_MOVE) {
			/* Still dropping what an earlier one left: the new one
			 * drops stale slots itself. */
			close_sources(run);
			entry_of(run)->x.stopped = true;
			run = NULL;
		}
		if (run)
			return;
		struct rs_entry *en = rs_new(w, cp, RSM_MOVE, false, why, sizeof why);
		if (!en || !remember(w, en)) {
			log_error("RESHARD %s: %s", pool, en ? "out of memory" : why);
			struct rs_state st = { .phase = RESHARD_FAILED };
			copy_text(st.error, sizeof st.error, en ? "out of memory" : why);
			if (en)
				rs_free(en);
			struct shm_reshard *e = shm_reshard_entry(w->shm, pool);
			if (e) {
				atomic_fetch_add_explicit(&e->seq, 1, memory_order_acq_rel);
				e->phase = RESHARD_FAILED;
				e->errors++;
				snprintf(e->last_error, sizeof e->last_error, "%s", st.error);
				atomic_fetch_add_explicit(&e->seq, 1, memory_order_release);
			}
			return;
		}
		struct reshard *rs = &en->rs;
		rs->hold = hold;
		rs->slots = true;
		rs->phase = RESHARD_COPY;
		/* Again after a cancelled or failed one to the same layout: its
		 * schema is on the new shards (their tables are emptied instead). */
		struct rs_state before;
		if (rs_state_read(w->cfg->general.state_dir, pool, &before) && before.schema_done &&
		    (before.phase == RESHARD_CANCELLED || before.phase == RESHARD_FAILED) &&
		    strcmp(before.targets, rs->targets) == 0)
			rs->schema_done = true;
		log_info("reshard %s: started, %d shards to %d%s", pool, rs->n_src, rs->n_dst, hold ? " (HOLD)" : "");
		if (!save_state(rs)) {
			rs_fail(rs, "the state could not be saved");
			return;
		}
		set_phase(rs, RESHARD_COPY);
		for (int i = 0; i < rs->n_src && rs->phase != RESHARD_FAILED; i++)
			rs_source_open(&rs->src[i]);
		return;
	}
	case RESHARD_REQ_SWITCH:
		return;   /* (done by the console's worker, switch_here) */
	case RESHARD_REQ_CUTOVER:
		if (run) {
			run->cutover_asked = true;
			entry_of(run)->x.retry_after_us = 0;
		}
		return;
	case RESHARD_REQ_CANCEL: {
		if (run) {
			if (run->phase == RESHARD_DONE)
				return;
			if (run->step != RSP_SOURCES) {
				resume_pool(run);
				rs_peers_resume(run);
			}
			close_sources(run);
			entry_of(run)->x.stopped = true;
		}
		log_info("reshard %s: cancelled; dropping the replication slots", pool);
		start_drop_run(w, cp, RESHARD_CANCELLED, NULL);
		return;
	}
	case RESHARD_REQ_CLEANUP: {
		if (run)
			return;
		/* The layout in use is the next one: the old one is the file's
		 * shards, read before the overlay... which w->cfg no longer has.
		 * The state file's layout tells which is which. */
		struct rs_entry *en = rs_new(w, cp, RSM_CLEANUP, true, why, sizeof why);
		if (!en || !remember(w, en)) {
			log_error("RESHARD CLEANUP %s: %s", pool, en ? "out of memory" : why);
			if (en)
				rs_free(en);
			return;
		}
		en->rs.phase = RESHARD_DONE;
		if (!(en->rs.drop_first = truncate_sql(cp))) {
			en->x.stopped = true;
			return;
		}
		log_info("reshard %s: RESHARD CLEANUP: emptying the sharded tables of the old shards", pool);
		en->x.dropping = true;
		open_controls(&en->rs);
		return;
	}
	}
}

static bool running_phase(int32_t p)
{
	return p == RESHARD_COPY || p == RESHARD_REPLICATE || p == RESHARD_CUTOVER;
}

static bool shm_phase(struct worker *w, const char *pool, int32_t *phase)
{
	struct shm_reshard *e = malloc(sizeof *e);   /* (some 30 kB) */
	bool found = false;
	for (int i = 0; e && !found && i < SHM_RESHARD_MAX; i++)
		if (shm_reshard_read(w->shm, i, e) && strcmp(e->pool, pool) == 0) {
			*phase = e->phase;
			found = true;
		}
	free(e);
	return found;
}

bool reshard_request(struct worker *w, enum reshard_request req, const char *pool, bool hold, const char **code,
		     char *err, size_t errlen)
{
	*code = "55000";
	const struct config_pool *cp = config_find_pool(w->cfg, pool);
	if (!cp) {
		*code = "3D000";
		snprintf(err, errlen, "no such database: %s", pool);
		return false;
	}
	if (cp->n_next_shards == 0) {
		snprintf(err, errlen, "pool %s has no next layout ([pools.%s.next.shards.N])", pool, pool);
		return false;
	}
	int32_t phase = RESHARD_NONE;
	bool known = shm_phase(w, pool, &phase);
	struct rs_state st;
	bool have_state = rs_state_read(w->cfg->general.state_dir, pool, &st);
	if (!known && have_state)
		phase = st.phase;
	/* Done, and the configuration names a new next layout since (the
	 * operator made the moved-to layout the pool's shards): that reshard
	 * is history. */
	if (phase == RESHARD_DONE && have_state && st.phase == RESHARD_DONE && !rs_overlay_active(cp, &st)) {
		char next[sizeof st.targets];
		rs_layout_text(cp->next_shards, cp->n_next_shards, next, sizeof next);
		if (strcmp(next, st.targets) != 0)
			phase = RESHARD_NONE;
	}
	switch (req) {
	case RESHARD_REQ_START:
		if (running_phase(phase)) {
			snprintf(err, errlen, "a reshard of %s is running (phase %s)", pool,
				 reshard_phase_name((enum reshard_phase)phase));
			return false;
		}
		if (phase == RESHARD_DONE) {
			snprintf(err, errlen, "pool %s was resharded to its next layout already; make it the pool's shards "
				 "in the configuration", pool);
			return false;
		}
		break;
	case RESHARD_REQ_CUTOVER:
		if (!running_phase(phase)) {
			snprintf(err, errlen, "no reshard of %s is running", pool);
			return false;
		}
		break;
	case RESHARD_REQ_CANCEL:
		if (phase == RESHARD_DONE) {
			snprintf(err, errlen, "the reshard of %s has cut over; RESHARD CLEANUP drops what is left", pool);
			return false;
		}
		if (phase == RESHARD_NONE) {
			snprintf(err, errlen, "no reshard of %s to cancel", pool);
			return false;
		}
		break;
	case RESHARD_REQ_SWITCH:
		if (running_phase(phase)) {
			snprintf(err, errlen, "this instance runs the reshard of %s itself", pool);
			return false;
		}
		return rs_switch_here(w, pool, err, errlen);
	case RESHARD_REQ_CLEANUP:
		if (phase != RESHARD_DONE) {
			snprintf(err, errlen, "the reshard of %s has not cut over (phase %s); nothing to clean up", pool,
				 reshard_phase_name((enum reshard_phase)phase));
			return false;
		}
		/* The old shards are those the reshard moved from, the
		 * configuration's next now: anything else and CLEANUP could
		 * empty shards in use. */
		if (!have_state || !rs_overlay_active(cp, &st)) {
			snprintf(err, errlen, "the configuration of %s no longer names the layout the reshard moved from as its "
				 "next layout: CLEANUP cannot tell the old shards; empty them by hand", pool);
			return false;
		}
		break;
	}
	if (w->id == 0) {
		reshard_act(w, req, pool, hold);
		return true;
	}
	/* (SWITCH is done above, by this worker.) */
	char value[32];
	snprintf(value, sizeof value, "%d %d", (int)req, hold ? 1 : 0);
	(void)shm_admin_post(w->shm, w->id, SHM_ADMIN_RESHARD, pool, value);
	if (req == RESHARD_REQ_START) {
		/* SHOW RESHARD says it at once (worker 0 takes it at its next
		 * tick; it writes nothing of this pool meanwhile: none runs). */
		struct shm_reshard *e = shm_reshard_entry(w->shm, pool);
		if (e) {
			atomic_fetch_add_explicit(&e->seq, 1, memory_order_acq_rel);
			e->phase = RESHARD_COPY;
			e->errors = 0;
			e->last_error[0] = '\0';
			atomic_fetch_add_explicit(&e->seq, 1, memory_order_release);
		}
	}
	return true;
}

void reshard_posted(struct worker *w, uint64_t seq, const char *pool, const char *value)
{
	if (w->id != 0 || seq <= atomic_load(&w->shm->h->reshard_seen))
		return;
	atomic_store(&w->shm->h->reshard_seen, seq);
	int req = -1, hold = 0;
	if (sscanf(value, "%d %d", &req, &hold) != 2 || req < RESHARD_REQ_START || req > RESHARD_REQ_SWITCH)
		return;
	reshard_act(w, (enum reshard_request)req, pool, hold != 0);
}

/* ---- start, tick, end ---- */

void reshard_resume_all(struct worker *w)
{
	if (w->id != 0)
		return;
	for (size_t i = 0; i < w->cfg->n_pools; i++) {
		const struct config_pool *cp = &w->cfg->pools[i];
		struct rs_state st;
		if (!rs_state_read(w->cfg->general.state_dir, cp->name, &st))
			continue;
		struct shm_reshard *e = shm_reshard_entry(w->shm, cp->name);
		if (e && !e->phase) {
			atomic_fetch_add_explicit(&e->seq, 1, memory_order_acq_rel);
			e->phase = (int32_t)st.phase;
			e->pause_ms = st.pause_us / 1000;
			snprintf(e->last_error, sizeof e->last_error, "%s", st.error);
			atomic_fetch_add_explicit(&e->seq, 1, memory_order_release);
		}
		if (cp->n_next_shards == 0 || find_running(w, cp->name))
			continue;
		if (!running_phase(st.phase)) {
			/* Ended, its slots perhaps not all dropped (pgcat stopped
			 * on the way): they go now. */
			if (st.slots && st.phase != RESHARD_NONE)
				start_drop_run(w, cp, st.phase, st.error[0] ? st.error : NULL);
			if (st.slots && st.phase == RESHARD_DONE) {
				/* A worker 0 that died inside its cutover, after saving
				 * done: the others may still be on the old layout,
				 * paused. (Switched already: nothing changes.) */
				(void)shm_admin_post(w->shm, w->id, SHM_ADMIN_RESHARD_SWITCH, cp->name, NULL);
				(void)shm_admin_post(w->shm, w->id, SHM_ADMIN_RESUME_WRITES, cp->name, NULL);
			}
			continue;
		}
		char why[300];
		struct rs_entry *en = rs_new(w, cp, RSM_MOVE, false, why, sizeof why);
		if (!en || !remember(w, en)) {
			log_error("reshard %s: cannot go on: %s", cp->name, en ? "out of memory" : why);
			if (en)
				rs_free(en);
			continue;
		}
		struct reshard *rs = &en->rs;
		rs->hold = st.hold;
		rs->slots = true;
		rs->schema_done = st.schema_done;
		rs->resume_stream = st.phase != RESHARD_COPY;
		rs->phase = st.phase == RESHARD_COPY ? RESHARD_COPY : RESHARD_REPLICATE;
		/* A worker 0 that died inside a cutover left the pool paused,
		 * here and on the peers. */
		(void)shm_admin_post(w->shm, w->id, SHM_ADMIN_RESUME_WRITES, cp->name, NULL);
		rs_peers_resume(&en->rs);
		log_info("reshard %s: going on from phase %s%s", cp->name, reshard_phase_name(rs->phase),
			 rs->resume_stream ? " (the slots' changes since their last confirmed position)" :
					     " (the copy starts again)");
		set_phase(rs, rs->phase);
		for (int k = 0; k < rs->n_src && rs->phase != RESHARD_FAILED; k++)
			rs_source_open(&rs->src[k]);
	}
}

void reshard_tick(struct worker *w)
{
	/* Reshards that ended are freed here, outside their own events. */
	size_t k = 0, n = w->n_reshards;
	char pool[64] = "", error[256] = "";
	enum reshard_phase final = RESHARD_FAILED;
	for (size_t i = 0; i < n; i++) {
		struct rs_entry *en = entry_of(w->reshards[i]);
		if (en->x.stopped && !en->x.stopped_us)
			en->x.stopped_us = w->now_us;
		/* Kept while a peer has not answered its RESUME (10 s at most):
		 * freeing it would close that connection. */
		if (!en->x.stopped ||
		    (!rs_peers_settled(&en->rs) && w->now_us - en->x.stopped_us < RS_PEERS_GRACE_US)) {
			w->reshards[k++] = w->reshards[i];
			continue;
		}
		if (en->x.drop_after && !pool[0]) {
			copy_text(pool, sizeof pool, en->rs.pool);
			copy_text(error, sizeof error, en->rs.error);
			final = en->rs.phase;
		}
		rs_free(en);
	}
	w->n_reshards = k;
	const struct config_pool *cp = pool[0] ? config_find_pool(w->cfg, pool) : NULL;
	if (cp && cp->n_next_shards > 0 && !find_running(w, pool)) {
		log_info("reshard %s: dropping the replication slots left", pool);
		start_drop_run(w, cp, final, error);
	}
}

void reshard_free_all(struct worker *w)
{
	for (size_t i = 0; i < w->n_reshards; i++)
		rs_free(entry_of(w->reshards[i]));
	free(w->reshards);
	w->reshards = NULL;
	w->n_reshards = 0;
}
