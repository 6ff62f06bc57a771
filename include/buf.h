/* SPDX-License-Identifier: MIT */
/*
 * buf: a connection's input and output as pgcat holds them — one block
 * each. The input is read into by the socket and parsed where the bytes
 * lie; the output is written to by the owners and sent with one send from
 * where it lies. The bytes not yet consumed are always contiguous (data +
 * off, len of them), so a header or a whole message is read in place,
 * never joined from chains; consuming is moving off. A block stays with
 * its connection while it is busy (emptied, not freed) and is given back
 * when the connection idles (io_trim) or closes.
 */
#ifndef PGCAT_BUF_H
#define PGCAT_BUF_H

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
	uint32_t first;  /* bytes inline_block holds */
	uint8_t inline_block[];
};

/* The first block, made with the header (bytes): a connection's input,
 * a simple transaction's messages many times over and a read of a result
 * stream worth its syscall (a read that fills what is left doubles the
 * block, up to BUF_STREAM, so large results come in large reads); a
 * connection's output, a few replies; any other, a message or a few being
 * built. A block grows (doubling) for whatever needs more. */
#define BUF_IN_FIRST 16384u
#define BUF_OUT_FIRST 4096u
#define BUF_SMALL 1024u
#define BUF_STREAM 65536u

/* A new, empty buffer with room for first bytes (NULL: out of memory). */
struct buf *buf_new(size_t first);
void buf_free(struct buf *b);
/* Room for at least want bytes after the unread ones, by moving them to
 * the block's head or into a larger block. false: out of memory (or over
 * 4 GiB), nothing changed. */
bool buf_reserve(struct buf *b, size_t want) __attribute__((warn_unused_result));
/* An empty buffer whose block grew past BUF_STREAM goes back to its
 * first: a connection that once carried a large message or result keeps
 * no more than that while it goes on. */
void buf_shrink(struct buf *b);
static inline void buf_settle(struct buf *b)
{
	if (b->len == 0 && b->cap > BUF_STREAM)
		buf_shrink(b);
}

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
/* Prepends n bytes. false: out of memory, nothing changed. */
bool buf_prepend(struct buf *b, const void *src, size_t n) __attribute__((warn_unused_result));

/* ---- writing: a connection's output, and messages being built ----
 * As libevent's evbuffer_add and its kin: 0 (printf: the bytes written), or -1 when
 * out of memory, nothing added then. */
int buf_add_grow(struct buf *b, const void *src, size_t n);
static inline int buf_add(struct buf *b, const void *src, size_t n)
{
	if (n == 0)
		return 0;   /* (src may be NULL then, as evbuffer_add allowed) */
	if (n > b->cap - b->off - b->len)
		return buf_add_grow(b, src, n);   /* room made first */
	memcpy(b->data + b->off + b->len, src, n);
	b->len += (uint32_t)n;
	return 0;
}
int buf_add_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Moves all of src to the end of b (src is left empty). */
int buf_add_buf(struct buf *b, struct buf *src);

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
	return b->len >= total && buf_take(b, dst, total) == total;
}

/* Appends the first n unread bytes (n ≤ len) to out and consumes them:
 * forwarding. 0, or -1 when out of memory (nothing consumed then). */
static inline int buf_move_to(struct buf *b, struct buf *out, size_t n)
{
	if (n > b->len)
		n = b->len;
	if (buf_add(out, b->data + b->off, n) != 0)
		return -1;
	buf_drain(b, n);
	return 0;
}

#endif
