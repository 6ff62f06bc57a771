/* SPDX-License-Identifier: MIT */
/*
 * pgoutput: the messages of PostgreSQL's logical replication stream, as a
 * replication connection's START_REPLICATION ... (proto_version '1',
 * publication_names ...) sends them inside CopyData (issue 45, online
 * resharding): the walsender's wrapping (XLogData 'w', keepalive 'k') and
 * the pgoutput plugin's messages within (Begin, Commit, Relation, Insert,
 * Update, Delete, Truncate, Origin, Type, Message), and the standby status
 * update pgcat answers with ('r'). Protocol version 1: no streamed
 * transactions, text column values.
 *
 * Pure: no sockets, no allocation, no globals. A parsed message points
 * into the bytes it was read from (strings NUL-terminated there, column
 * values not); every length is checked against the bytes given, and a
 * message that does not fit them, or ends with bytes left over, is
 * refused (false).
 */
#ifndef PGCAT_PGOUTPUT_H
#define PGCAT_PGOUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The walsender's wrapping of one CopyData payload. */
enum pgoutput_wal_kind {
	PGOUTPUT_WAL_DATA,       /* 'w': a pgoutput message at data[0..len) */
	PGOUTPUT_WAL_KEEPALIVE   /* 'k': the server's position; reply_now asks for a status update */
};

struct pgoutput_wal {
	enum pgoutput_wal_kind kind;
	uint64_t start_lsn;      /* 'w': where the message's WAL starts */
	uint64_t end_lsn;        /* 'w': the end of WAL on the server; 'k': the same */
	int64_t send_time;       /* microseconds since 2000-01-01, the server's clock */
	bool reply_now;          /* 'k' */
	const uint8_t *data;     /* 'w' */
	size_t len;
};

bool pgoutput_wal_parse(const uint8_t *payload, size_t len, struct pgoutput_wal *out);

/* A standby status update ('r', 34 bytes: the CopyData payload) into out:
 * written, flushed and applied up to those positions. */
#define PGOUTPUT_STATUS_LEN 34
void pgoutput_status_update(uint8_t out[PGOUTPUT_STATUS_LEN], uint64_t written, uint64_t flushed, uint64_t applied,
			    int64_t now, bool reply_requested);

/* Microseconds between 1970-01-01 and 2000-01-01, PostgreSQL's epoch. */
#define PGOUTPUT_EPOCH_OFFSET_US 946684800000000LL

/* A column value of a tuple. */
enum pgoutput_value_kind {
	PGOUTPUT_NULL = 'n',
	PGOUTPUT_UNCHANGED = 'u',   /* a TOASTed value the update did not change: not sent */
	PGOUTPUT_TEXT = 't'
};

struct pgoutput_value {
	enum pgoutput_value_kind kind;
	const uint8_t *data;        /* PGOUTPUT_TEXT: the value's text form, len bytes, not NUL-terminated */
	uint32_t len;
};

/* A tuple: its columns' values, in the caller's array (max of them). */
struct pgoutput_tuple {
	uint16_t n;
	struct pgoutput_value *values;
};

/* A column of a Relation message. */
struct pgoutput_column {
	bool key;                   /* part of the replica identity */
	const char *name;
	uint32_t type_oid;
	int32_t typmod;
};

enum pgoutput_kind {
	PGOUTPUT_BEGIN = 'B',
	PGOUTPUT_COMMIT = 'C',
	PGOUTPUT_ORIGIN = 'O',
	PGOUTPUT_RELATION = 'R',
	PGOUTPUT_TYPE = 'Y',
	PGOUTPUT_INSERT = 'I',
	PGOUTPUT_UPDATE = 'U',
	PGOUTPUT_DELETE = 'D',
	PGOUTPUT_TRUNCATE = 'T',
	PGOUTPUT_MESSAGE = 'M'
};

/* Where the caller lets a message's variable parts go. */
struct pgoutput_room {
	struct pgoutput_column *columns;   /* Relation */
	uint16_t max_columns;
	struct pgoutput_value *new_values, *old_values;   /* Insert, Update, Delete */
	uint16_t max_values;
	uint32_t *relids;                  /* Truncate */
	uint32_t max_relids;
};

struct pgoutput_msg {
	enum pgoutput_kind kind;
	union {
		struct {
			uint64_t final_lsn;
			int64_t commit_time;
			uint32_t xid;
		} begin;
		struct {
			uint8_t flags;
			uint64_t commit_lsn, end_lsn;
			int64_t commit_time;
		} commit;
		struct {
			uint64_t lsn;
			const char *name;
		} origin;
		struct {
			uint32_t relid;
			const char *nspname, *relname;
			char replica_identity;   /* 'd' default, 'n' nothing, 'f' full, 'i' index */
			uint16_t n_columns;
			struct pgoutput_column *columns;
		} relation;
		struct {
			uint32_t oid;
			const char *nspname, *name;
		} type;
		struct {
			uint32_t relid;
			/* Update: the old tuple when sent ('K': its key columns only,
			 * 'O': all of it, 0: none); Delete: always one of the two. */
			char old_kind;
			struct pgoutput_tuple old_tuple, new_tuple;   /* Delete: old only; Insert: new only */
		} change;
		struct {
			uint8_t options;          /* 1: CASCADE, 2: RESTART IDENTITY */
			uint32_t n_relids;
			uint32_t *relids;
		} truncate;
		struct {
			uint8_t flags;            /* 1: transactional */
			uint64_t lsn;
			const char *prefix;
			const uint8_t *content;
			uint32_t len;
		} message;
	} u;
};

/* Why a message was refused. */
enum pgoutput_error {
	PGOUTPUT_OK,
	PGOUTPUT_SHORT,             /* it ends before its fields do */
	PGOUTPUT_TRAILING,          /* bytes left after its last field */
	PGOUTPUT_UNKNOWN,           /* a type this parser does not know (a streamed transaction's, v2+) */
	PGOUTPUT_MALFORMED,         /* a field with a value that cannot be (a kind of value, of old tuple) */
	PGOUTPUT_TOO_MANY           /* more columns, values or relations than the room given */
};

enum pgoutput_error pgoutput_parse(const uint8_t *data, size_t len, const struct pgoutput_room *room,
				   struct pgoutput_msg *out);
const char *pgoutput_error_text(enum pgoutput_error e);

#endif
