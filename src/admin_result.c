/* SPDX-License-Identifier: MIT */
/*
 * admin_result: the admin console's result sets (a RowDescription from a
 * table of typed columns, then its rows, to the client or into this
 * worker's shared-memory dump slot) and its small replies.
 */
#include "admin_result.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "config.h"
#include "context.h"
#include "log.h"
#include "proto.h"
#include "shm.h"

#define TEXTOID 25
#define INT8OID 20

void admin_out(struct client *c, struct pktbuf *pb)
{
	if (!pb->failed)
		buf_add(client_output(c), pb->data, pb->len);
}

void admin_res_begin(struct admin_result *r, struct client *c, struct admin_columns cols)
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
	admin_out(c, &r->pb);
}

void admin_row_begin(struct admin_result *r)
{
	pktbuf_init(&r->pb, r->buf, sizeof r->buf);
	pktbuf_begin(&r->pb, PqMsg_DataRow);
	pktbuf_put_u16(&r->pb, (uint16_t)r->cols.n);
	r->col = 0;
}

/* The column the next value goes to, or NULL (logged) when the row is
 * already full: a bug, but the DataRow keeps the declared column count. */
static const struct admin_column *next_col(struct admin_result *r)
{
	if (r->col >= r->cols.n) {
		log_error("admin: more values than the %zu columns starting with %s", r->cols.n,
			  r->cols.n ? r->cols.v[0].name : "?");
		return NULL;
	}
	return &r->cols.v[r->col++];
}

static void put_value(struct admin_result *r, const char *s)
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
void admin_row_null(struct admin_result *r)
{
	if (next_col(r))
		put_value(r, NULL);
}

void admin_row_s(struct admin_result *r, const char *s)
{
	const struct admin_column *col = next_col(r);
	if (!col)
		return;
	if (s && col->type != COL_TEXT) {
		/* Text would break every typed reader of this column; NULL does not. */
		log_error("admin: text value for int8 column %s", col->name);
		s = NULL;
	}
	put_value(r, s);
}

void admin_row_i(struct admin_result *r, int64_t v)
{
	const struct admin_column *col = next_col(r);
	if (!col)
		return;
	/* Digits read as text too, but the table and the code disagree. */
	if (col->type != COL_INT8)
		log_error("admin: number for text column %s", col->name);
	char buf[32];
	snprintf(buf, sizeof buf, "%" PRId64, v);
	put_value(r, buf);
}

void admin_row_end(struct admin_result *r)
{
	if (r->col != r->cols.n) {
		log_error("admin: row with %zu values for %zu columns starting with %s", r->col, r->cols.n,
			  r->cols.v[0].name);
		while (r->col < r->cols.n)
			admin_row_null(r);
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
		admin_out(r->c, &r->pb);
	}
	r->rows++;
}

void admin_complete(struct client *c, const char *tag)
{
	uint8_t storage[128];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_command_complete(&pb, tag);
	admin_out(c, &pb);
}

void admin_res_end(struct admin_result *r)
{
	admin_complete(r->c, "SHOW");
}

/* An ErrorResponse (error) or a NoticeResponse of msg, formatted. */
static void send_message(struct client *c, bool error, const char *severity, const char *sqlstate,
			 const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	uint8_t storage[1024];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	if (error) {
		client_count_error(c, sqlstate);   /* (SHOW ERRORS: the console's too) */
		pktbuf_error(&pb, severity, sqlstate, msg);
	} else
		pktbuf_notice(&pb, severity, sqlstate, msg);
	admin_out(c, &pb);
}

void admin_error(struct client *c, const char *sqlstate, const char *fmt, ...)
{
	/* On a pgbouncer.ini, PgBouncer's one SQLSTATE for every console
	 * error, which its operators' scripts expect; but a refused RELOAD is
	 * a config file error there too (F0000). */
	if (c->w->cfg->pgbouncer && strcmp(sqlstate, "F0000") != 0)
		sqlstate = "08P01";
	va_list ap;
	va_start(ap, fmt);
	send_message(c, true, "ERROR", sqlstate, fmt, ap);
	va_end(ap);
}

void admin_notice(struct client *c, const char *severity, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	send_message(c, false, severity, "01000", fmt, ap);
	va_end(ap);
}

void admin_rfq(struct client *c)
{
	uint8_t storage[8];
	struct pktbuf pb;
	pktbuf_init(&pb, storage, sizeof storage);
	pktbuf_ready_for_query(&pb, 'I');
	admin_out(c, &pb);
}
