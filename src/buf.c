/* SPDX-License-Identifier: MIT */
/*
 * buf: making, growing and filling a connection's input block (buf.h).
 */
#include "buf.h"

#include <stdlib.h>

struct buf *buf_new(void)
{
	struct buf *b = malloc(BUF_FIRST);
	if (!b)
		return NULL;
	b->data = b->inline_block;
	b->off = b->len = 0;
	b->cap = (uint32_t)(BUF_FIRST - sizeof *b);
	return b;
}

void buf_free(struct buf *b)
{
	if (!b)
		return;
	if (b->data != b->inline_block)
		free(b->data);
	free(b);
}

bool buf_reserve(struct buf *b, size_t want)
{
	if (b->cap - b->off - b->len >= want)
		return true;
	if (b->cap - b->len >= want) {
		/* Room enough once the unread bytes move to the head: usually
		 * the start of one message, a few bytes. */
		memmove(b->data, b->data + b->off, b->len);
		b->off = 0;
		return true;
	}
	size_t cap = (size_t)b->cap * 2;
	while (cap < (size_t)b->len + want)
		cap *= 2;
	if (cap > UINT32_MAX)
		return false;
	uint8_t *d = malloc(cap);
	if (!d)
		return false;
	memcpy(d, b->data + b->off, b->len);
	if (b->data != b->inline_block)
		free(b->data);
	b->data = d;
	b->off = 0;
	b->cap = (uint32_t)cap;
	return true;
}

bool buf_append(struct buf *b, const void *src, size_t n)
{
	if (n > UINT32_MAX - b->len || !buf_reserve(b, n))
		return false;
	memcpy(b->data + b->off + b->len, src, n);
	b->len += (uint32_t)n;
	return true;
}

bool buf_prepend(struct buf *b, const void *src, size_t n)
{
	if (n <= b->off) {
		b->off -= (uint32_t)n;
	} else {
		if (n > UINT32_MAX - b->len || !buf_reserve(b, n))
			return false;
		/* The unread bytes move up by n (reserve left them at off with
		 * n bytes of room after them). */
		memmove(b->data + b->off + n, b->data + b->off, b->len);
	}
	memcpy(b->data + b->off, src, n);
	b->len += (uint32_t)n;
	return true;
}
