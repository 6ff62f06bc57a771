/* SPDX-License-Identifier: MIT */
/*
 * pktbuf: outgoing message construction with a sticky failure flag.
 */
#include "pktbuf.h"

#include <string.h>

#include "proto.h"

void pktbuf_init(struct pktbuf *pb, uint8_t *storage, size_t cap)
{
	pb->data = storage;
	pb->len = 0;
	pb->cap = cap;
	pb->msg_start = 0;
	pb->in_msg = false;
	pb->failed = false;
}

static bool reserve(struct pktbuf *pb, size_t n)
{
	if (pb->failed)
		return false;
	if (pb->cap - pb->len < n) {
		pb->failed = true;
		return false;
	}
	return true;
}

void pktbuf_begin(struct pktbuf *pb, uint8_t type)
{
	if (pb->in_msg)
		pb->failed = true;
	if (!reserve(pb, type ? 5 : 4))
		return;
	pb->msg_start = type ? pb->len + 1 : pb->len;
	pb->in_msg = true;
	if (type)
		pb->data[pb->len++] = type;
	memset(pb->data + pb->len, 0, 4);
	pb->len += 4;
}

void pktbuf_put_u8(struct pktbuf *pb, uint8_t v)
{
	if (reserve(pb, 1))
		pb->data[pb->len++] = v;
}

void pktbuf_put_u16(struct pktbuf *pb, uint16_t v)
{
	if (reserve(pb, 2)) {
		pb->data[pb->len++] = (uint8_t)(v >> 8);
		pb->data[pb->len++] = (uint8_t)v;
	}
}

void pktbuf_put_u32(struct pktbuf *pb, uint32_t v)
{
	if (reserve(pb, 4)) {
		proto_put_u32(pb->data + pb->len, v);
		pb->len += 4;
	}
}

void pktbuf_put_u64(struct pktbuf *pb, uint64_t v)
{
	pktbuf_put_u32(pb, (uint32_t)(v >> 32));
	pktbuf_put_u32(pb, (uint32_t)v);
}

void pktbuf_put_bytes(struct pktbuf *pb, const void *p, size_t n)
{
	if (n && reserve(pb, n)) {
		memcpy(pb->data + pb->len, p, n);
		pb->len += n;
	}
}

void pktbuf_put_cstring(struct pktbuf *pb, const char *s)
{
	pktbuf_put_bytes(pb, s, strlen(s) + 1);
}

void pktbuf_end(struct pktbuf *pb)
{
	if (pb->failed)
		return;
	if (!pb->in_msg) {
		pb->failed = true;
		return;
	}
	/* msg_start is where the length field sits: it counts itself and the
	 * body, never the type byte. */
	proto_put_u32(pb->data + pb->msg_start, (uint32_t)(pb->len - pb->msg_start));
	pb->in_msg = false;
}

static void put_fields(struct pktbuf *pb, char type, const char *severity, const char *sqlstate, const char *message)
{
	pktbuf_begin(pb, type);
	pktbuf_put_u8(pb, 'S');
	pktbuf_put_cstring(pb, severity);
	pktbuf_put_u8(pb, 'V');
	pktbuf_put_cstring(pb, severity);
	pktbuf_put_u8(pb, 'C');
	pktbuf_put_cstring(pb, sqlstate);
	pktbuf_put_u8(pb, 'M');
	pktbuf_put_cstring(pb, message);
	pktbuf_put_u8(pb, 0);
	pktbuf_end(pb);
}

void pktbuf_error(struct pktbuf *pb, const char *severity, const char *sqlstate, const char *message)
{
	put_fields(pb, PqMsg_ErrorResponse, severity, sqlstate, message);
}

void pktbuf_notice(struct pktbuf *pb, const char *severity, const char *sqlstate, const char *message)
{
	put_fields(pb, PqMsg_NoticeResponse, severity, sqlstate, message);
}

void pktbuf_ready_for_query(struct pktbuf *pb, char status)
{
	pktbuf_begin(pb, PqMsg_ReadyForQuery);
	pktbuf_put_u8(pb, (uint8_t)status);
	pktbuf_end(pb);
}

void pktbuf_parameter_status(struct pktbuf *pb, const char *name, const char *value)
{
	pktbuf_begin(pb, PqMsg_ParameterStatus);
	pktbuf_put_cstring(pb, name);
	pktbuf_put_cstring(pb, value);
	pktbuf_end(pb);
}

void pktbuf_auth_request(struct pktbuf *pb, uint32_t code, const void *extra, size_t extra_len)
{
	pktbuf_begin(pb, PqMsg_AuthenticationRequest);
	pktbuf_put_u32(pb, code);
	pktbuf_put_bytes(pb, extra, extra_len);
	pktbuf_end(pb);
}

void pktbuf_command_complete(struct pktbuf *pb, const char *tag)
{
	pktbuf_begin(pb, PqMsg_CommandComplete);
	pktbuf_put_cstring(pb, tag);
	pktbuf_end(pb);
}

void pktbuf_query(struct pktbuf *pb, const char *sql)
{
	pktbuf_begin(pb, PqMsg_Query);
	pktbuf_put_cstring(pb, sql);
	pktbuf_end(pb);
}
