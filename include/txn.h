/* SPDX-License-Identifier: MIT */
/*
 * txn: the transaction running on a server connection, as pgcat keeps
 * track of it: what the server still owes (ReadyForQuery messages, the end
 * of an extended request), its status, the clocks of query_time and
 * xact_time, what a replayed read must skip, and the session settings to
 * undo if the transaction does not stick.
 *
 * One struct, embedded in the server (struct server.txn), moved by inline
 * entry points: a message of the client's went to the server
 * (txn_frontend, and txn_set_snapshot/txn_set_done for a SET), one of
 * pgcat's own did (txn_sent), and a ReadyForQuery came back (txn_ready).
 * Outside server.c, which records the replies it forwards (the replay and
 * SET-undo parts) and settles them, the rest of pgcat only reads it.
 * A data header: the client side (client.c's pump, a fan-out's legs,
 * prepared.c's rewriting) and the server side both count through it
 * without calling each other.
 */
#ifndef PGCAT_TXN_H
#define PGCAT_TXN_H

#include <stdbool.h>
#include <stdint.h>

#include "params.h"
#include "proto.h"

struct txn {
	char tx_status;               /* of the last ReadyForQuery: 'I', 'T' or 'E' */
	/* ReadyForQuery messages still owed: one per Query, Sync and
	 * FunctionCall sent. The transaction can only end when this is 0. */
	uint32_t outstanding;
	/* Extended-protocol messages sent since the last Sync. */
	bool ext_pending;
	/* The client's message counted last opened its segment: nothing was
	 * sent since the last Sync before it (prepared.c reads it). */
	bool ext_first;
	/* COPY FROM STDIN under way: the server reads copy data, and ignores
	 * a Sync (or Flush) that comes meanwhile. Set by its CopyInResponse,
	 * cleared by the client's CopyDone or CopyFail, an error, or the end. */
	bool in_copy_in;
	/* A COPY started by an Execute: libpq sends its Sync right behind the
	 * Execute, before it knows the statement is a COPY, and PostgreSQL
	 * ignores that Sync while it reads the data; the request then ends at
	 * the Sync after CopyDone. So the Syncs sent after an Execute and
	 * before its copy's end are owed nothing if the CopyInResponse comes
	 * (txn_copy_in settles them); counted from the client's side. */
	uint16_t syncs_after_execute;
	bool copy_end_sent;           /* CopyDone or CopyFail since the last Execute */
	uint16_t syncs_after_copy_end; /* Syncs after it */
	uint64_t query_start_us;      /* first message of the request in flight */
	uint64_t xact_start_us;       /* first message after the last 'I' */

	/* Replay of a read (SPEC §4): any byte of the current request reached
	 * the client; its replies forwarded so far, and whether any carried
	 * data (rows, results, errors) rather than acknowledgements a replay
	 * would repeat exactly (1, 2, 3, t, T, n); for a replayed read, the
	 * acknowledgements the client already has. */
	bool sent_to_client;
	uint32_t req_msgs;
	bool req_data;
	uint32_t skip_msgs;

	/* Session settings the client changed in the transaction (or request)
	 * under way, not yet known to stick: what both sides were before it.
	 * A SET that fails, or whose transaction rolls back, is undone in
	 * PostgreSQL, so it is undone here too (set_pending false: none). */
	struct params set_undo_client, set_undo_server;
	bool set_pending;
	bool set_cycle_error;         /* an ErrorResponse since the last ReadyForQuery */
	bool set_last_rollback;       /* the last CommandComplete was ROLLBACK */
	/* The session took a change pgcat does not follow (a setting past the
	 * tracking bounds, set_config, SET ROLE...: params.h): the server is
	 * reset before it serves another client (pool.c, at its check-in),
	 * which alone clears it. Not undone with a rollback: a reset too many
	 * costs a round trip, one too few hands the session on. */
	bool untracked;

	/* Sharding: where a sharded table's sharding column sits, asked of
	 * this server inside the transaction under way (SERVER_ASKING) for an
	 * INSERT without a column list; valid until the transaction ends (the
	 * table cannot change under the transaction's own INSERT into it),
	 * forgotten at ReadyForQuery 'I'. */
	enum txn_placement { TXN_PLACEMENT_NONE, TXN_PLACEMENT_ASKED, TXN_PLACEMENT_KNOWN, TXN_PLACEMENT_UNKNOWN }
		placement : 8;
	uint8_t placed_table;         /* an index into the pool's sharded tables */
	uint16_t placed_position;     /* (KNOWN) */

	/* Handed out while the pool's writes were paused (a reshard's cutover,
	 * pool_types.h), to a request that only reads: until the server goes
	 * back to the pool, whatever might write is refused on it (route.h's
	 * route_gate), so that no row lands on the layout being left after
	 * the cutover counted it drained. Set and cleared by pool.c. */
	bool write_gated;
	/* (write_gated) the last unnamed Parse sent read only: its Binds pass */
	bool gate_unnamed_reads;
};

/* A message of this type, pgcat's own, went to the server: what it owes
 * in return (a ReadyForQuery for each Query, FunctionCall and Sync; an
 * open extended request until the Sync). */
static inline void txn_sent(struct txn *t, uint8_t type)
{
	switch (type) {
	case PqMsg_Query:
		t->syncs_after_execute = 0;   /* a COPY that answers it is the Query's */
		t->copy_end_sent = false;
		t->syncs_after_copy_end = 0;
		t->outstanding++;
		break;
	case PqMsg_FunctionCall:
		t->outstanding++;
		break;
	case PqMsg_Sync:
		if (t->in_copy_in)
			break;   /* ignored by the server: nothing owed, the request still open */
		t->outstanding++;
		t->ext_pending = false;
		if (!t->copy_end_sent) {
			if (t->syncs_after_execute < UINT16_MAX)
				t->syncs_after_execute++;
		} else if (t->syncs_after_copy_end < UINT16_MAX) {
			t->syncs_after_copy_end++;
		}
		break;
	case PqMsg_Execute:
		t->syncs_after_execute = 0;
		t->copy_end_sent = false;
		t->syncs_after_copy_end = 0;
		t->ext_pending = true;
		break;
	case PqMsg_Parse:
	case PqMsg_Bind:
	case PqMsg_Describe:
	case PqMsg_Close:
		t->ext_pending = true;
		break;
	case PqMsg_CopyDone:
	case PqMsg_CopyFail:
		t->in_copy_in = false;
		t->copy_end_sent = true;
		break;
	default:
		break;
	}
}

/* The server answered CopyInResponse: it reads copy data now. For a COPY
 * started by an Execute, the Syncs the client sent behind it before the
 * copy's end were ignored by the server: they are owed nothing, and the
 * request waits for the Sync after CopyDone (unless that came already).
 * Returns how many Syncs were taken back, and in *after how many Syncs
 * the client sent after the copy's end (prepared.c numbers the segments
 * the Syncs end, and renumbers them). */
static inline uint32_t txn_copy_in(struct txn *t, uint32_t *after)
{
	uint32_t ignored = t->syncs_after_execute;
	if (ignored > t->outstanding)
		ignored = t->outstanding;
	t->outstanding -= ignored;
	if (ignored > 0 && t->syncs_after_copy_end == 0)
		t->ext_pending = true;
	*after = t->syncs_after_copy_end;
	t->syncs_after_execute = 0;
	t->in_copy_in = !t->copy_end_sent;
	return ignored;
}

/* A message of the client's went to the server: as txn_sent, and the first
 * of a request starts the clocks of query_time (and, from 'I',
 * xact_time). Inline: every client message passes here. */
static inline void txn_frontend(struct txn *t, uint8_t type, uint64_t now_us)
{
	if (t->outstanding == 0 && !t->ext_pending) {
		t->query_start_us = now_us;
		if (t->tx_status == 'I')
			t->xact_start_us = now_us;
	}
	t->ext_first = !t->ext_pending;
	txn_sent(t, type);
}

/* A reply of this type now would answer nothing pgcat sent: a
 * ReadyForQuery with none owed, or any reply (but the unprompted kinds)
 * with no request open. The caller tells a FATAL ErrorResponse apart. */
static inline bool txn_unasked(const struct txn *t, uint8_t type)
{
	/* (the count first: nearly every reply has a request owed) */
	if (t->outstanding != 0)
		return false;
	return type == PqMsg_ReadyForQuery || (!t->ext_pending && !proto_backend_unprompted(type));
}

/* A ReadyForQuery with this status came from the server: one less owed. */
static inline void txn_ready(struct txn *t, char status)
{
	t->tx_status = status;
	if (status == 'I')
		t->placement = TXN_PLACEMENT_NONE;
	if (t->outstanding > 0)
		t->outstanding--;
}

/* A statement that may change session settings goes to the server (the
 * client's pump reads SET, RESET, DISCARD): the first of a request or
 * transaction takes what both sides were, to undo to. true: this one took
 * the snapshot. */
static inline bool txn_set_snapshot(struct txn *t, const struct params *client, const struct params *server)
{
	if (t->set_pending)
		return false;
	params_copy(&t->set_undo_client, client);
	params_copy(&t->set_undo_server, server);
	return true;
}

/* The statement changed a setting: it sticks only if it succeeds and its
 * transaction commits (server.c settles it at ReadyForQuery); or it did
 * not, and the snapshot it took, if any, goes. */
static inline void txn_set_done(struct txn *t, bool changed, bool took_snapshot)
{
	if (changed) {
		t->set_pending = true;
	} else if (took_snapshot) {
		params_clear(&t->set_undo_client);
		params_clear(&t->set_undo_server);
	}
}

#endif
