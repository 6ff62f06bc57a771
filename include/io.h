/* SPDX-License-Identifier: MIT */
/*
 * io: the byte pump of one socket — an input and an output block (buf.h),
 * one read and one write event — with backpressure by watermarks. Writes are
 * flushed once per loop turn for every connection written to, straight to
 * the socket; the write event is armed only when the kernel buffer is full.
 * With the io_uring engine (io_engine, doc/io-engine.md) plain sockets are
 * read and written through the worker's ring instead (io_ring.c): the
 * flush queues the sends and receives of the turn and submits them at
 * once; the owners see the same calls and callbacks either way.
 * Knows no message types and nothing of clients or servers.
 */
#ifndef PGCAT_IO_H
#define PGCAT_IO_H

#include <event2/event.h>
#include <event2/event_struct.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "buf.h"
#include "list.h"

typedef struct ssl_st SSL;
struct io_ring;
struct io_ring_send;

/* IO_TLS_READY: the handshake io_start_tls began is done. */
enum io_event { IO_CONNECTED, IO_EOF, IO_ERROR, IO_TLS_READY };

struct io;
typedef void (*io_read_fn)(struct io *io, void *arg);
typedef void (*io_drain_fn)(struct io *io, void *arg);
typedef void (*io_event_fn)(struct io *io, enum io_event what, int err, void *arg);

/* One per worker: the connections written to during this loop turn. They
 * are flushed when the socket callback that wrote to them returns, or, for
 * writes made elsewhere (timers, DNS answers), by the flusher's event at
 * the end of the loop turn. */
struct io_flusher {
	/* The dirty connections: an array rather than a list through every
	 * connection (16 bytes an idle client would carry); each knows its
	 * place (io.dirty_slot) for an O(1) removal. */
	struct io **dirty;
	uint32_t n_dirty, cap_dirty;
	struct event_base *base;
	struct event *ev;
	int depth;                 /* socket callbacks under way */
	struct buf *discard;       /* what is written to closed connections */
	/* TLS connections whose owner closed them while their output or
	 * close_notify could not all be written at once (io_close): they end
	 * on their own, and are freed here when the worker exits. */
	struct list_node tls_closing;
	/* io_uring engine (io_ring.c), NULL: epoll. Plain TCP and Unix
	 * sockets go through it once connected; TLS and loopbacks do not. */
	struct io_ring *ring;
	/* Its eventfd's event, and a zero timer for a collection the ring
	 * asks to go on next turn (io_ring_take_later); both collect. */
	struct event *ring_ev, *ring_later;
	/* When the ring has nothing to batch (one client and its server),
	 * their sockets leave it (io.c, ring_go_solo) and sends skip it
	 * meanwhile (ring_send_alone): completions collected since the ring
	 * last woke the loop, and the last two sockets that received (the
	 * most recent first) with how many receives in a row came from one of
	 * them. Sockets by number, only compared. */
	unsigned ring_turn_work;
	int pair_fd[2];
	unsigned pair_streak;
};

/* What an owner gives every connection of its kind: callbacks and the
 * output low watermark (one static table per kind, not three pointers and
 * a number in every connection). */
struct io_ops {
	io_read_fn on_read;
	io_drain_fn on_drain;      /* NULL: not told */
	io_event_fn on_event;
	uint32_t write_low;        /* drain callback once output falls to this */
	/* Where the connection sits in its owner: offsetof(owner, io). The
	 * callbacks get the owner as their arg. */
	size_t owner_offset;
};

/* Laid out for size: an idle client holds one (see doc/benchmarks.md). */
struct io {
	struct event rev;
	/* NULL while empty and trimmed (io_trim): an idle client holds no buffers. */
	struct buf *in, *out;
	union {
		struct event *wev;          /* epoll: made on first need */
		struct io_ring_send *send;  /* io_uring (ring set): the send record, while one exists */
	};
	struct io_flusher *flusher;
	SSL *ssl;                /* NULL: plain TCP (the fast path tests only this) */
	const struct io_ops *ops;
	evutil_socket_t fd;
	uint32_t read_high;      /* stop reading while input holds this much */
	uint32_t dirty_slot;     /* index + 1 in flusher->dirty; 0: nothing to flush */
	bool connecting : 1;
	bool read_armed : 1, write_armed : 1;
	unsigned paused : 2;         /* why reading stops, IO_PAUSE_* (0: it does not) */
	bool closed : 1;
	bool trim_after_flush : 1;   /* io_trim once the output is written */
	bool tls_handshaking : 1;    /* ssl set, handshake not finished */
	/* OpenSSL reported a fatal error (SSL_ERROR_SSL or _SYSCALL): no
	 * SSL_shutdown may follow. */
	bool tls_failed : 1;
	/* No socket: what is written comes back as input at the flush
	 * (io_open_loopback). */
	bool loopback : 1;
	/* The socket is read and written through the worker's io_uring
	 * (io_ring.c): rev is never added (it only delivers input that
	 * arrived while paused), wev is not used (send is). */
	bool on_ring : 1;
	unsigned recv : 2;           /* enum io_recv: the multishot receive */
	bool send_in_flight : 1;
	bool unread : 1;             /* input arrived while paused: on_read owed */
	/* Off the ring (epoll's recv and send) while the worker serves one
	 * exchange at a time, back on it when that ends (io.c, ring_go_solo). */
	bool solo : 1;
};

bool io_flusher_init(struct io_flusher *f, struct event_base *base) __attribute__((warn_unused_result));
void io_flusher_free(struct io_flusher *f);
/* Read and write plain sockets through io_uring from now on (io_ring.c).
 * false: the kernel refused it (seccomp, kernel.io_uring_disabled, an old
 * kernel), why says why, and the flusher stays on epoll. Call before the
 * first connection opens. */
bool io_flusher_use_io_uring(struct io_flusher *f, char *why, size_t whylen);
/* "io_uring" or "epoll": the engine in use (SHOW CONFIG). */
const char *io_flusher_engine(const struct io_flusher *f);
/* The provided buffers of the io_uring engine (all 0 on epoll): for SHOW MEM. */
void io_flusher_ring_buffers(const struct io_flusher *f, unsigned *count, unsigned *size, unsigned *held);
/* Flush every dirty connection now (also done by the flusher's event). */
void io_flush_all(struct io_flusher *f);

/* Adopt a connected, non-blocking socket. ops must outlive the connection;
 * io is embedded in its owner at ops->owner_offset. */
bool io_open(struct io *io, struct event_base *base, struct io_flusher *f, evutil_socket_t fd,
	     size_t read_high, const struct io_ops *ops) __attribute__((warn_unused_result));
/* A connection without a socket, to pgcat itself: what a writer queues in
 * its output (io_out) is handed over as its input when the writes of the
 * loop turn are flushed, and on_read is called then. A fan-out's leg takes
 * a server's replies this way (fanout.c): they arrive as from any client's
 * connection, batched per turn, without crossing the kernel. As with a
 * socket, nothing is handed over while the input holds read_high bytes
 * (or reading is paused): the output keeps it, and its writer, which
 * watches the output's length, stops; io_update_reading once the owner
 * consumed input hands it over at the next flush, and on_drain follows
 * when that took the output from above ops->write_low to below. on_event
 * is never called. */
void io_open_loopback(struct io *io, struct io_flusher *f, size_t read_high, const struct io_ops *ops);
/* Start a non-blocking connect; on_event(IO_CONNECTED) or (IO_ERROR) follows. */
bool io_connect(struct io *io, struct event_base *base, struct io_flusher *f, const struct sockaddr *sa,
		socklen_t salen, size_t read_high, const struct io_ops *ops) __attribute__((warn_unused_result));
/* A TLS connection first writes what is queued and a close_notify
 * (SSL_shutdown), as PostgreSQL ends its TLS connections: libpq 17 reports
 * an end without one as "unexpected eof". What the socket does not take at
 * once is sent from the event loop, for at most IO_TLS_CLOSE_MS
 * (io_tls_close.h), after the owner is gone. */
void io_close(struct io *io);

/* The output buffer, marked for flushing at the end of this loop turn.
 * Never NULL: after a close (or out of memory) writes go to a scratch
 * buffer that is discarded. */
struct buf *io_out_mark(struct io *io);
static inline struct buf *io_out(struct io *io)
{
	/* (the usual call: a second write in one turn, already marked) */
	if (io->dirty_slot && io->out && !io->closed)
		return io->out;
	return io_out_mark(io);
}
/* The input buffer, made if the connection had none (NULL: out of memory). */
struct buf *io_in(struct io *io);
/* Puts n bytes after the unread input (input carried over from another
 * process) or before it (a message handed back to be read again). false:
 * out of memory. */
bool io_in_add(struct io *io, const void *data, size_t n) __attribute__((warn_unused_result));
bool io_in_prepend(struct io *io, const void *data, size_t n) __attribute__((warn_unused_result));
/* Free both buffers if they are empty: for connections that sit idle. */
void io_trim(struct io *io);
/* Write what is queued now, as far as the socket takes it (before a close). */
void io_flush(struct io *io);
size_t io_out_len_ring(const struct io *io);
static inline size_t io_out_len(const struct io *io)
{
	if (io->on_ring)
		return io_out_len_ring(io);
	return io->out ? buf_len(io->out) : 0;
}
/* Reading stopped (a pause reason holds), no receive or send in flight,
 * nothing left to write, plain TCP or Unix: the socket may pass to another
 * process (handover.c) with what its input holds. */
bool io_at_rest(const struct io *io);
/* Read now, as if the socket had been reported readable: for a socket just
 * accepted, whose first packet has often arrived already (a wait for the
 * event would cost an epoll round). Nothing happens if there is no data.
 * The read callback may close the connection and free its owner. */
void io_read_now(struct io *io);
/* From now on the socket carries TLS: ssl (owned from here on, freed with
 * the connection) was made for this side (accept or connect state). Output
 * queued stays queued until the handshake is done, then on_event reports
 * IO_TLS_READY (or IO_ERROR). Anything in the input buffer must have been
 * consumed before. */
void io_start_tls(struct io *io, SSL *ssl);
/* As io_start_tls, for a peer whose handshake began before anyone knew
 * (direct TLS: a ClientHello where a startup packet was expected): what
 * the input buffer holds is the start of the TLS stream, read by the
 * handshake first. The handshake must have consumed all of it by its end,
 * else IO_ERROR. */
void io_start_tls_replay(struct io *io, SSL *ssl);
/* The reasons reading stops, each set and cleared on its own: reading
 * goes on once none holds. */
enum { IO_PAUSE_BACKPRESSURE = 1, IO_PAUSE_SUSPEND = 2 };
void io_set_pause(struct io *io, unsigned reason, bool on);
/* Pause or resume reading for peer backpressure. */
static inline void io_pause(struct io *io, bool paused)
{
	io_set_pause(io, IO_PAUSE_BACKPRESSURE, paused);
}
/* Stop or resume reading for the console's SUSPEND. */
static inline void io_suspend(struct io *io, bool suspended)
{
	io_set_pause(io, IO_PAUSE_SUSPEND, suspended);
}
static inline bool io_suspended(const struct io *io)
{
	return (io->paused & IO_PAUSE_SUSPEND) != 0;
}
/* Reading wanted: not paused by the owner, input below read_high. */
static inline bool io_wants_read(const struct io *io)
{
	return !io->closed && !io->connecting && !io->paused && (!io->in || buf_len(io->in) < io->read_high);
}
/* The read event is as it should be: armed, and reading still wanted
 * (after nearly every read). */
static inline bool io_reading_steady(const struct io *io)
{
	return io->read_armed && !io->on_ring && io_wants_read(io);
}
/* Arm or disarm reading as io_wants_read says (io.c). */
void io_arm_read_change(struct io *io);
/* Re-arm reading after the owner consumed input below read_high. */
static inline void io_update_reading(struct io *io)
{
	if (!io_reading_steady(io))
		io_arm_read_change(io);
}
/* Reading stops while the input holds read_high bytes from now on (a
 * larger value: room for a message the owner needs whole). */
void io_set_read_high(struct io *io, size_t read_high);

/* The head of in, the header of its next message: copies its first max
 * bytes, or all of them when it holds fewer, into hdr and returns how
 * many; 0 when it holds fewer than min. */
static inline size_t io_head(const struct buf *in, uint8_t *hdr, size_t min, size_t max)
{
	size_t have = buf_len(in);
	if (have < min)
		return 0;
	if (have >= max) {
		memcpy(hdr, buf_head(in), max);   /* (max is a constant where this is inlined: no call) */
		return max;
	}
	memcpy(hdr, buf_head(in), have);
	return have;
}

/* The step both halves of the byte pump share (client to server, server
 * to client): the rest of a message being forwarded, *remaining bytes of
 * it, moves from in to out as far as in holds it. Returns the bytes moved;
 * 0: in is empty (wait for the next read) or out of memory (the output's
 * owner times out, as for any write lost that way). */
static inline size_t io_forward_rest(struct buf *in, struct buf *out, uint32_t *remaining)
{
	size_t have = buf_len(in);
	if (have == 0)
		return 0;
	size_t n = have < *remaining ? have : *remaining;
	if (buf_move_to(in, out, n) != 0)
		return 0;
	*remaining -= (uint32_t)n;
	return n;
}

#endif
