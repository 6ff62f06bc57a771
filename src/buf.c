/* SPDX-License-Identifier: MIT */
/*
 * buf: making, growing and filling the blocks of buf.h.
 */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

struct buf *buf_new(size_t first)
{
	struct buf *b = malloc(sizeof *b + first);
	if (!b)
		return NULL;
	b->data = b->inline_block;
	b->off = b->len = 0;
	b->cap = b->first = (uint32_t)first;
	return b;
}

void buf_shrink(struct buf *b)
{
	if (b->len != 0 || b->data == b->inline_block)
		return;
	free(b->data);
	b->data = b->inline_block;
	b->off = 0;
	b->cap = b->first;
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
	if (want > UINT32_MAX - b->len)
		return false;   /* over 4 GiB (also no size_t wrap below) */
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

int buf_add_grow(struct buf *b, const void *src, size_t n)
{
	if (!buf_reserve(b, n))
		return -1;
	memcpy(b->data + b->off + b->len, src, n);
	b->len += (uint32_t)n;
	return 0;
}

int buf_add_printf(struct buf *b, const char *fmt, ...)
{
	size_t room;
	buf_tail(b, &room);
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf((char *)b->data + b->off + b->len, room, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	if ((size_t)n >= room) {
		/* Longer than the room: made, then written again. */
		if (!buf_reserve(b, (size_t)n + 1))
			return -1;
		va_start(ap, fmt);
		n = vsnprintf((char *)b->data + b->off + b->len, (size_t)n + 1, fmt, ap);
		va_end(ap);
		if (n < 0)
			return -1;
	}
	b->len += (uint32_t)n;
	return n;
}

int buf_add_buf(struct buf *b, struct buf *src)
{
	if (buf_add(b, buf_head(src), buf_len(src)) != 0)
		return -1;
	buf_drain(src, buf_len(src));
	return 0;
}

bool buf_prepend(struct buf *b, const void *src, size_t n)
{
	if (n == 0)
		return true;
	if (n <= b->off) {
		b->off -= (uint32_t)n;
	} else {
		if (!buf_reserve(b, n))
			return false;
		/* The unread bytes move up by n (reserve left them at off with
		 * n bytes of room after them). */
		memmove(b->data + b->off + n, b->data + b->off, b->len);
	}
	memcpy(b->data + b->off, src, n);
	b->len += (uint32_t)n;
	return true;
}
