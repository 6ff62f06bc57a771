/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the logical replication stream's messages
 * (src/pgoutput.c). Input: byte 0 picks the room's size (columns, values,
 * relations: 0 to 7), the rest is one CopyData payload: the walsender's
 * wrapping ('w', 'k') and, inside an XLogData, a pgoutput message; the
 * rest is also read as a bare pgoutput message. Invariants: whatever it
 * refuses, it reads nothing outside the input (ASan); what it takes points
 * inside the input, and fits the room.
 */
#include "pgoutput.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, \
				__FILE__, __LINE__);                             \
			abort();                                                 \
		}                                                                \
	} while (0)

static void inside(const uint8_t *base, size_t size, const void *p, size_t n)
{
	const uint8_t *q = p;
	CHECK(q >= base && n <= size && (size_t)(q - base) <= size - n);
}

static void string_inside(const uint8_t *base, size_t size, const char *s)
{
	inside(base, size, s, strlen(s) + 1);
}

static void tuple_inside(const uint8_t *base, size_t size, const struct pgoutput_tuple *t, uint16_t max)
{
	CHECK(t->n <= max);
	for (uint16_t i = 0; i < t->n; i++) {
		const struct pgoutput_value *v = &t->values[i];
		CHECK(v->kind == PGOUTPUT_NULL || v->kind == PGOUTPUT_UNCHANGED || v->kind == PGOUTPUT_TEXT);
		if (v->kind == PGOUTPUT_TEXT)
			inside(base, size, v->data, v->len);
	}
}

static void parse(const uint8_t *d, size_t n, uint16_t max)
{
	struct pgoutput_column cols[8];
	struct pgoutput_value newv[8], oldv[8];
	uint32_t relids[8];
	struct pgoutput_room room = { cols, max, newv, oldv, max, relids, max };
	struct pgoutput_msg m;
	if (pgoutput_parse(d, n, &room, &m) != PGOUTPUT_OK)
		return;
	switch (m.kind) {
	case PGOUTPUT_RELATION:
		string_inside(d, n, m.u.relation.nspname);
		string_inside(d, n, m.u.relation.relname);
		CHECK(m.u.relation.n_columns <= max);
		for (uint16_t i = 0; i < m.u.relation.n_columns; i++)
			string_inside(d, n, m.u.relation.columns[i].name);
		break;
	case PGOUTPUT_INSERT:
	case PGOUTPUT_UPDATE:
	case PGOUTPUT_DELETE:
		tuple_inside(d, n, &m.u.change.old_tuple, max);
		tuple_inside(d, n, &m.u.change.new_tuple, max);
		CHECK(m.kind != PGOUTPUT_DELETE || m.u.change.old_kind == 'K' || m.u.change.old_kind == 'O');
		break;
	case PGOUTPUT_TRUNCATE:
		CHECK(m.u.truncate.n_relids <= max);
		break;
	case PGOUTPUT_ORIGIN:
		string_inside(d, n, m.u.origin.name);
		break;
	case PGOUTPUT_TYPE:
		string_inside(d, n, m.u.type.nspname);
		string_inside(d, n, m.u.type.name);
		break;
	case PGOUTPUT_MESSAGE:
		string_inside(d, n, m.u.message.prefix);
		inside(d, n, m.u.message.content, m.u.message.len);
		break;
	case PGOUTPUT_BEGIN:
	case PGOUTPUT_COMMIT:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint16_t max = data[0] & 7;
	/* (a copy of exactly its size: a read past it is seen) */
	uint8_t *d = malloc(size - 1 ? size - 1 : 1);
	if (!d)
		return 0;
	memcpy(d, data + 1, size - 1);
	struct pgoutput_wal w;
	if (pgoutput_wal_parse(d, size - 1, &w) && w.kind == PGOUTPUT_WAL_DATA) {
		inside(d, size - 1, w.data, w.len);
		parse(w.data, w.len, max);
	}
	parse(d, size - 1, max);
	free(d);
	return 0;
}
