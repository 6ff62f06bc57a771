/* SPDX-License-Identifier: MIT */
/*
 * evbuf: the small reads and writes of libevent buffers that several
 * modules make the same way (the pumps, the fan-out, the merge, prepared
 * statements): copying bytes at an offset, and appending a message that
 * has no body.
 */
#ifndef PGCAT_EVBUF_H
#define PGCAT_EVBUF_H

#include <event2/buffer.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto.h"

/* Copies n bytes at offset off of b into dst. false: b holds fewer. */
static inline bool evbuf_copy_at(struct evbuffer *b, size_t off, void *dst, size_t n)
{
	struct evbuffer_ptr at;
	return evbuffer_ptr_set(b, &at, off, EVBUFFER_PTR_SET) == 0 &&
	       evbuffer_copyout_from(b, &at, dst, n) == (ssize_t)n;
}

/* Appends a message of type type with no body (ParseComplete,
 * BindComplete, NoData, PortalSuspended, EmptyQueryResponse...): its type
 * and the length 4. 0, or -1 when out of memory (as evbuffer_add). */
static inline int evbuf_add_bodyless(struct evbuffer *b, uint8_t type)
{
	uint8_t msg[PROTO_BODYLESS_LEN];
	proto_put_bodyless(msg, type);
	return evbuffer_add(b, msg, sizeof msg);
}

/* Appends a simple Query of the text a then b (either may be ""), of any
 * length: pgcat's own SQL to a server (the session's settings, a health
 * check). 0, or -1 when out of memory. */
static inline int evbuf_add_query(struct evbuffer *b, const char *a, const char *more)
{
	size_t na = strlen(a), nb = strlen(more);
	uint8_t hdr[5] = { PqMsg_Query };
	proto_put_u32(hdr + 1, (uint32_t)(4 + na + nb + 1));
	return evbuffer_add(b, hdr, sizeof hdr) | evbuffer_add(b, a, na) | evbuffer_add(b, more, nb) |
	       evbuffer_add(b, "", 1);
}

#endif
