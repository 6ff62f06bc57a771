/* SPDX-License-Identifier: MIT */
/*
 * buf: a connection's input as pgcat holds it — one block, read into by
 * the socket and parsed where the bytes lie. The unread bytes are always
 * contiguous (data + off, len of them), so a header or a whole message is
 * read in place, never joined from chains; consuming is moving off. The
 * block stays with the connection while it is busy (emptied, not freed)
 * and is given back when the connection idles (io_trim) or closes.
 * Only io.c makes, grows and fills blocks; the owners read and consume.
 */
#ifndef PGCAT_BUF_H
#define PGCAT_BUF_H

#include <event2/buffer.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct buf {
	/* The block: at first the one made with this header (inline), a
	 * larger one of its own once a message or a stream needed it. */
	uint8_t *data;
	uint32_t off;    /* the first unread byte */
	uint32_t len;    /* unread bytes from off */
	uint32_t cap;    /* bytes data holds */
	uint8_t inline_block[];
};

/* The first allocation, header and block: a simple transaction's messages
 * many times over, and a read of a result stream that is worth a syscall.
 * A read that fills what is left doubles the block up to BUF_STREAM, so
 * large results come in large reads; a message that needs more gets it. */
#define BUF_FIRST 16384u
#define BUF_STREAM 65536u

/* A new, empty buffer (NULL: out of memory). */
struct buf *buf_new(void);
void buf_free(struct buf *b);
/* Room for at least want bytes after the unread ones, by moving them to
 * the block's head or into a larger block. false: out of memory (or over
 * 4 GiB), nothing changed. */
bool buf_reserve(struct buf *b, size_t want) __attribute__((warn_unused_result));
/* The room after the unread bytes, where a read puts what it takes;
 * buf_commit counts n bytes written there. */
static inline uint8_t *buf_tail(struct buf *b, size_t *room)
{
	*room = b->cap - b->off - b->len;
	return b->data + b->off + b->len;
}
static inline void buf_commit(struct buf *b, size_t n)
{
	b->len += (uint32_t)n;
}
/* Appends or prepends n bytes. false: out of memory, nothing changed. */
bool buf_append(struct buf *b, const void *src, size_t n) __attribute__((warn_unused_result));
bool buf_prepend(struct buf *b, const void *src, size_t n) __attribute__((warn_unused_result));

static inline size_t buf_len(const struct buf *b)
{
	return b->len;
}

/* The unread bytes, len of them (may be none). */
static inline const uint8_t *buf_head(const struct buf *b)
{
	return b->data + b->off;
}

/* The first n unread bytes in place, or NULL when fewer are here
 * (writable: a password is wiped where it lies). */
static inline uint8_t *buf_pullup(struct buf *b, size_t n)
{
	return b->len >= n ? b->data + b->off : NULL;
}

/* Consumes n bytes (all when fewer are here). */
static inline void buf_drain(struct buf *b, size_t n)
{
	if (n >= b->len) {
		b->off = 0;   /* empty: the next read starts at the block's head */
		b->len = 0;
		return;
	}
	b->off += (uint32_t)n;
	b->len -= (uint32_t)n;
}

/* Keeps the first n unread bytes (n ≤ len) and forgets the rest. */
static inline void buf_truncate(struct buf *b, size_t n)
{
	if (n < b->len)
		b->len = (uint32_t)n;
}

/* Copies up to n unread bytes into dst without consuming them; how many. */
static inline size_t buf_copyout(const struct buf *b, void *dst, size_t n)
{
	if (n > b->len)
		n = b->len;
	memcpy(dst, b->data + b->off, n);
	return n;
}

/* Copies n bytes at offset at of the unread bytes into dst. false: fewer are here. */
static inline bool buf_copy_at(const struct buf *b, size_t at, void *dst, size_t n)
{
	if (at > b->len || n > b->len - at)
		return false;
	memcpy(dst, b->data + b->off + at, n);
	return true;
}

/* Moves up to n bytes into dst and consumes them; how many. */
static inline size_t buf_take(struct buf *b, void *dst, size_t n)
{
	n = buf_copyout(b, dst, n);
	buf_drain(b, n);
	return n;
}

/* Moves a whole message of total bytes into dst, if it is all here. */
static inline bool buf_take_whole(struct buf *b, uint32_t total, uint8_t *dst)
{
	if (b->len < total)
		return false;
	memcpy(dst, b->data + b->off, total);
	buf_drain(b, total);
	return true;
}

/* Appends the first n unread bytes (n ≤ len) to out and consumes them:
 * forwarding. 0, or -1 when out of memory (nothing consumed then). */
static inline int buf_move_to(struct buf *b, struct evbuffer *out, size_t n)
{
	if (n > b->len)
		n = b->len;
	if (evbuffer_add(out, b->data + b->off, n) != 0)
		return -1;
	buf_drain(b, n);
	return 0;
}

#endif
