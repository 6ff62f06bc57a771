/* SPDX-License-Identifier: MIT */
/*
 * buf_msg: the messages several modules append to a buffer (buf.h) the
 * same way (the pumps, the fan-out, the merge, prepared statements): one
 * that has no body, and pgcat's own simple Query.
 */
#ifndef PGCAT_BUF_MSG_H
#define PGCAT_BUF_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "buf.h"
#include "proto.h"

/* Appends a message of type type with no body (ParseComplete,
 * BindComplete, NoData, PortalSuspended, EmptyQueryResponse...): its type
 * and the length 4. 0, or -1 when out of memory (as buf_add). */
static inline int buf_add_bodyless(struct buf *b, uint8_t type)
{
	uint8_t msg[PROTO_BODYLESS_LEN];
	proto_put_bodyless(msg, type);
	return buf_add(b, msg, sizeof msg);
}

/* Appends a simple Query of the text a then more (either may be ""), of
 * any length: pgcat's own SQL to a server (the session's settings, a
 * health check). 0, or -1 when out of memory. */
static inline int buf_add_query(struct buf *b, const char *a, const char *more)
{
	size_t na = strlen(a), nb = strlen(more);
	uint8_t hdr[5] = { PqMsg_Query };
	proto_put_u32(hdr + 1, (uint32_t)(4 + na + nb + 1));
	return buf_add(b, hdr, sizeof hdr) | buf_add(b, a, na) | buf_add(b, more, nb) | buf_add(b, "", 1);
}

#endif
