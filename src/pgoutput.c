/* SPDX-License-Identifier: MIT */
/*
 * pgoutput: reading the logical replication stream's messages, and the
 * standby status update (pgoutput.h).
 */
#include "pgoutput.h"

#include <string.h>

/* A reader over data[0..len): every take checks what is left first. */
struct reader {
	const uint8_t *p;
	size_t left;
	bool short_read;
};

static bool take(struct reader *r, size_t n, const uint8_t **at)
{
	if (r->short_read || n > r->left) {
		r->short_read = true;
		return false;
	}
	*at = r->p;
	r->p += n;
	r->left -= n;
	return true;
}

static uint8_t u8(struct reader *r)
{
	const uint8_t *b;
	return take(r, 1, &b) ? b[0] : 0;
}

static uint16_t u16(struct reader *r)
{
	const uint8_t *b;
	return take(r, 2, &b) ? (uint16_t)((uint16_t)b[0] << 8 | b[1]) : 0;
}

static uint32_t u32(struct reader *r)
{
	const uint8_t *b;
	if (!take(r, 4, &b))
		return 0;
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static uint64_t u64(struct reader *r)
{
	uint64_t hi = u32(r);
	return hi << 32 | u32(r);
}

/* A NUL-terminated string within what is left. */
static const char *cstring(struct reader *r)
{
	const uint8_t *nul = r->short_read ? NULL : memchr(r->p, '\0', r->left);
	const uint8_t *at;
	if (!nul || !take(r, (size_t)(nul - r->p) + 1, &at)) {
		r->short_read = true;
		return "";
	}
	return (const char *)at;
}

bool pgoutput_wal_parse(const uint8_t *payload, size_t len, struct pgoutput_wal *out)
{
	struct reader r = { payload, len, false };
	memset(out, 0, sizeof *out);
	switch (u8(&r)) {
	case 'w':
		out->kind = PGOUTPUT_WAL_DATA;
		out->start_lsn = u64(&r);
		out->end_lsn = u64(&r);
		out->send_time = (int64_t)u64(&r);
		if (r.short_read)
			return false;
		out->data = r.p;
		out->len = r.left;
		return true;
	case 'k':
		out->kind = PGOUTPUT_WAL_KEEPALIVE;
		out->end_lsn = u64(&r);
		out->send_time = (int64_t)u64(&r);
		out->reply_now = u8(&r) != 0;
		return !r.short_read && r.left == 0;
	default:
		return false;
	}
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

void pgoutput_status_update(uint8_t out[PGOUTPUT_STATUS_LEN], uint64_t written, uint64_t flushed, uint64_t applied,
			    int64_t now, bool reply_requested)
{
	out[0] = 'r';
	put_u64(out + 1, written);
	put_u64(out + 9, flushed);
	put_u64(out + 17, applied);
	put_u64(out + 25, (uint64_t)now);
	out[33] = reply_requested ? 1 : 0;
}

/* A TupleData into t, with room for max values. */
static enum pgoutput_error tuple(struct reader *r, struct pgoutput_value *room, uint16_t max, struct pgoutput_tuple *t)
{
	t->n = u16(r);
	t->values = room;
	if (r->short_read)
		return PGOUTPUT_SHORT;
	if (t->n > max)
		return PGOUTPUT_TOO_MANY;
	for (uint16_t i = 0; i < t->n; i++) {
		struct pgoutput_value *v = &room[i];
		uint8_t kind = u8(r);
		v->data = NULL;
		v->len = 0;
		switch (kind) {
		case PGOUTPUT_NULL:
		case PGOUTPUT_UNCHANGED:
			v->kind = (enum pgoutput_value_kind)kind;
			break;
		case PGOUTPUT_TEXT:
			v->kind = PGOUTPUT_TEXT;
			v->len = u32(r);
			if (!take(r, v->len, &v->data))
				return PGOUTPUT_SHORT;
			break;
		default:
			/* 'b' (binary) only with the binary option, which
			 * pgcat does not ask for */
			return r->short_read ? PGOUTPUT_SHORT : PGOUTPUT_MALFORMED;
		}
	}
	return r->short_read ? PGOUTPUT_SHORT : PGOUTPUT_OK;
}

static enum pgoutput_error relation(struct reader *r, const struct pgoutput_room *room, struct pgoutput_msg *m)
{
	m->u.relation.relid = u32(r);
	m->u.relation.nspname = cstring(r);
	m->u.relation.relname = cstring(r);
	m->u.relation.replica_identity = (char)u8(r);
	m->u.relation.n_columns = u16(r);
	m->u.relation.columns = room->columns;
	if (r->short_read)
		return PGOUTPUT_SHORT;
	if (m->u.relation.n_columns > room->max_columns)
		return PGOUTPUT_TOO_MANY;
	for (uint16_t i = 0; i < m->u.relation.n_columns; i++) {
		struct pgoutput_column *c = &room->columns[i];
		c->key = (u8(r) & 1) != 0;
		c->name = cstring(r);
		c->type_oid = u32(r);
		c->typmod = (int32_t)u32(r);
	}
	return r->short_read ? PGOUTPUT_SHORT : PGOUTPUT_OK;
}

/* Insert, Update, Delete: a relation, then 'K' / 'O' (old) and 'N' (new)
 * tuples as the kind allows. */
static enum pgoutput_error change(struct reader *r, const struct pgoutput_room *room, struct pgoutput_msg *m)
{
	m->u.change.relid = u32(r);
	m->u.change.old_kind = 0;
	m->u.change.old_tuple = (struct pgoutput_tuple){ 0, room->old_values };
	m->u.change.new_tuple = (struct pgoutput_tuple){ 0, room->new_values };
	uint8_t marker = u8(r);
	if (r->short_read)
		return PGOUTPUT_SHORT;
	enum pgoutput_error e;
	if (m->kind != PGOUTPUT_INSERT && (marker == 'K' || marker == 'O')) {
		m->u.change.old_kind = (char)marker;
		if ((e = tuple(r, room->old_values, room->max_values, &m->u.change.old_tuple)) != PGOUTPUT_OK)
			return e;
		if (m->kind == PGOUTPUT_DELETE)
			return PGOUTPUT_OK;
		marker = u8(r);
		if (r->short_read)
			return PGOUTPUT_SHORT;
	}
	if (m->kind == PGOUTPUT_DELETE || marker != 'N')
		return PGOUTPUT_MALFORMED;   /* (a Delete without its old tuple; no new tuple) */
	return tuple(r, room->new_values, room->max_values, &m->u.change.new_tuple);
}

enum pgoutput_error pgoutput_parse(const uint8_t *data, size_t len, const struct pgoutput_room *room,
				   struct pgoutput_msg *out)
{
	struct reader r = { data, len, false };
	memset(out, 0, sizeof *out);
	if (len == 0)
		return PGOUTPUT_SHORT;
	out->kind = (enum pgoutput_kind)u8(&r);
	enum pgoutput_error e = PGOUTPUT_OK;
	switch (out->kind) {
	case PGOUTPUT_BEGIN:
		out->u.begin.final_lsn = u64(&r);
		out->u.begin.commit_time = (int64_t)u64(&r);
		out->u.begin.xid = u32(&r);
		break;
	case PGOUTPUT_COMMIT:
		out->u.commit.flags = u8(&r);
		out->u.commit.commit_lsn = u64(&r);
		out->u.commit.end_lsn = u64(&r);
		out->u.commit.commit_time = (int64_t)u64(&r);
		break;
	case PGOUTPUT_ORIGIN:
		out->u.origin.lsn = u64(&r);
		out->u.origin.name = cstring(&r);
		break;
	case PGOUTPUT_RELATION:
		e = relation(&r, room, out);
		break;
	case PGOUTPUT_TYPE:
		out->u.type.oid = u32(&r);
		out->u.type.nspname = cstring(&r);
		out->u.type.name = cstring(&r);
		break;
	case PGOUTPUT_INSERT:
	case PGOUTPUT_UPDATE:
	case PGOUTPUT_DELETE:
		e = change(&r, room, out);
		break;
	case PGOUTPUT_TRUNCATE:
		out->u.truncate.n_relids = u32(&r);
		out->u.truncate.options = u8(&r);
		out->u.truncate.relids = room->relids;
		if (r.short_read)
			return PGOUTPUT_SHORT;
		if (out->u.truncate.n_relids > room->max_relids)
			return PGOUTPUT_TOO_MANY;
		for (uint32_t i = 0; i < out->u.truncate.n_relids; i++)
			room->relids[i] = u32(&r);
		break;
	case PGOUTPUT_MESSAGE:
		out->u.message.flags = u8(&r);
		out->u.message.lsn = u64(&r);
		out->u.message.prefix = cstring(&r);
		out->u.message.len = u32(&r);
		if (!take(&r, out->u.message.len, &out->u.message.content))
			return PGOUTPUT_SHORT;
		break;
	default:
		return PGOUTPUT_UNKNOWN;
	}
	if (e != PGOUTPUT_OK)
		return e;
	if (r.short_read)
		return PGOUTPUT_SHORT;
	return r.left ? PGOUTPUT_TRAILING : PGOUTPUT_OK;
}

const char *pgoutput_error_text(enum pgoutput_error e)
{
	switch (e) {
	case PGOUTPUT_OK: return "ok";
	case PGOUTPUT_SHORT: return "message ends before its fields";
	case PGOUTPUT_TRAILING: return "bytes after the message's last field";
	case PGOUTPUT_UNKNOWN: return "unknown message type";
	case PGOUTPUT_MALFORMED: return "malformed field";
	case PGOUTPUT_TOO_MANY: return "more columns or relations than allowed";
	}
	return "?";
}
