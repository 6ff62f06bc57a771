/* SPDX-License-Identifier: MIT */
/*
 * pktbuf: builds outgoing protocol messages into a caller-owned fixed
 * buffer. Errors are sticky: an overflow marks the buffer failed and every
 * later call is a no-op, so callers check once at the end.
 */
#ifndef PGCAT_PKTBUF_H
#define PGCAT_PKTBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pktbuf {
	uint8_t *data;
	size_t len, cap;
	size_t msg_start;        /* offset of the length field of the message being built */
	bool in_msg;
	bool failed;
};

void pktbuf_init(struct pktbuf *pb, uint8_t *storage, size_t cap);
/* Start a typed message (type != 0) or an untyped startup packet (type == 0). */
void pktbuf_begin(struct pktbuf *pb, uint8_t type);
void pktbuf_put_u8(struct pktbuf *pb, uint8_t v);
void pktbuf_put_u16(struct pktbuf *pb, uint16_t v);
void pktbuf_put_u32(struct pktbuf *pb, uint32_t v);
void pktbuf_put_u64(struct pktbuf *pb, uint64_t v);
void pktbuf_put_bytes(struct pktbuf *pb, const void *p, size_t n);
void pktbuf_put_cstring(struct pktbuf *pb, const char *s);
void pktbuf_end(struct pktbuf *pb);

/* Whole messages pgcat sends itself. */
void pktbuf_error(struct pktbuf *pb, const char *severity, const char *sqlstate, const char *message);
/* The same fields as a NoticeResponse. */
void pktbuf_notice(struct pktbuf *pb, const char *severity, const char *sqlstate, const char *message);
void pktbuf_ready_for_query(struct pktbuf *pb, char status);
void pktbuf_parameter_status(struct pktbuf *pb, const char *name, const char *value);
void pktbuf_auth_request(struct pktbuf *pb, uint32_t code, const void *extra, size_t extra_len);
void pktbuf_command_complete(struct pktbuf *pb, const char *tag);
void pktbuf_query(struct pktbuf *pb, const char *sql);

#endif
