/* SPDX-License-Identifier: MIT */
/*
 * reshard: a sharded pool moved online to its next layout
 * ([pools.NAME.next.shards.N], issue 45, SPEC §6). Worker 0 runs it:
 * the schema copied to the new shards (pg_dump --schema-only), a
 * replication slot per source shard with its snapshot exported, every
 * table copied in that snapshot and split by key under the new layout,
 * then the slot's change stream (pgoutput) applied by key, confirmed only
 * once the destinations committed; the cutover pauses the pool, drains
 * the streams to the sources' current position, switches every worker to
 * the new layout and resumes. Its phase is kept in state_dir, so that a
 * pgcat started again goes on from there, and every worker (a restarted
 * one too) applies a finished reshard's layout when it reads its
 * configuration (reshard_overlay).
 */
#ifndef PGCAT_RESHARD_H
#define PGCAT_RESHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

struct config;

enum reshard_phase {
	RESHARD_NONE,
	RESHARD_COPY,
	RESHARD_REPLICATE,
	RESHARD_CUTOVER,
	RESHARD_DONE,
	RESHARD_CANCELLED,
	RESHARD_FAILED,
};

const char *reshard_phase_name(enum reshard_phase p);
bool reshard_phase_parse(const char *s, enum reshard_phase *out);

/* SWITCH: a peer's cutover (reshard_peers.c): this instance takes the
 * next layout now, and keeps it (state_dir). */
enum reshard_request { RESHARD_REQ_START, RESHARD_REQ_CUTOVER, RESHARD_REQ_CANCEL, RESHARD_REQ_CLEANUP,
		       RESHARD_REQ_SWITCH };

/* Worker 0, once it serves: reshards left unfinished go on. */
void reshard_resume_all(struct worker *w);
/* Worker 0's janitor: requests from the consoles, the reshards' timers. */
void reshard_tick(struct worker *w);
void reshard_free_all(struct worker *w);

/* The console (any worker): a request for pool (hold: RESHARD pool
 * HOLD). Checked here against the configuration and the shared state,
 * then carried out by worker 0. false: err says why (sqlstate in *code). */
bool reshard_request(struct worker *w, enum reshard_request req, const char *pool, bool hold, const char **code,
		     char *err, size_t errlen);

/* Worker 0: a request another worker's console posted (SHM_ADMIN_RESHARD,
 * its value "<request> <hold>"), acted on once (a restarted worker 0
 * replays the ring). */
void reshard_posted(struct worker *w, uint64_t seq, const char *pool, const char *value);

/* A configuration just read (start, reload): pools whose reshard is done
 * and whose next layout is still the one it moved to use that layout.
 * Reads state_dir. */
void reshard_overlay(struct config *cfg);
/* Worker: the cutover of pool (the admin ring): its pools switch now. */
void reshard_switch(struct worker *w, const char *pool);

#endif
