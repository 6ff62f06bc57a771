/* SPDX-License-Identifier: MIT */
/*
 * io_ring: the io_uring engine under io.c (SPEC §12, doc/io-engine.md).
 * One ring per worker process; libevent stays the loop, and the ring's
 * eventfd, which the kernel signals when completions wait, is one more
 * event in it (io.c's). Sockets are known by fd, their owners only as
 * opaque pointers: this room knows nothing of struct io and calls nothing
 * above it; it moves bytes and hands completions up one at a time
 * (io_ring_next). Receives are multishot, into a ring of provided buffers
 * (an idle socket pins no buffer); sends take the bytes out of the owner's
 * buffer into a record of their own, which outlives the owner if it must.
 */
#ifndef PGCAT_IO_RING_H
#define PGCAT_IO_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct buf;
struct io_ring;
struct io_ring_send;

/* One completion, for its owner. */
enum io_ring_event_kind {
	IO_RING_RECEIVED,   /* conn's receive reported */
	IO_RING_SENT,       /* conn's send (send) finished */
};
struct io_ring_event {
	enum io_ring_event_kind kind;
	void *conn;
	/* RECEIVED: res > 0 bytes at data, 0 end of file, < 0 -errno; more:
	 * the receive stays armed (false: it ended; arm it again to go on
	 * reading). data is valid until the next io_ring_next.
	 * SENT: res bytes sent (what is left stays in send, io_ring_send_len)
	 * or -errno. */
	int res;
	const uint8_t *data;
	bool more;
	struct io_ring_send *send;
};

/* NULL: io_uring cannot be used here; why says so (for the one log line). */
struct io_ring *io_ring_new(char *why, size_t whylen);
/* The eventfd the kernel signals when completions wait: edge-triggered
 * (the owner watches it with EV_ET and never reads it); when it fires,
 * the owner collects (io_ring_next). */
int io_ring_wake_fd(const struct io_ring *r);
/* Sockets still in flight are closed; their owners are gone by now. */
void io_ring_free(struct io_ring *r);

/* fd's completions go to conn from now on; false: out of memory. */
bool io_ring_attach(struct io_ring *r, int fd, void *conn) __attribute__((warn_unused_result));
/* fd leaves the ring (it goes on without it): nothing may be in flight. */
void io_ring_detach(struct io_ring *r, int fd);
/* The owner closes fd. in_flight: how many of its operations have not
 * reported their end (the receive, a send); cancel_recv: the receive is
 * armed and must be cancelled; s: the send in flight (orphaned here: its
 * end frees it), or NULL. The socket is closed once in_flight is 0, so its
 * number cannot be reused by an accept while a completion may still name it. */
void io_ring_close(struct io_ring *r, int fd, unsigned in_flight, bool cancel_recv, struct io_ring_send *s);

/* Queue an operation; it goes to the kernel with the next io_ring_submit.
 * false: no room in the submission queue even after a submit (the kernel
 * refused it): the caller treats it as a socket error. */
bool io_ring_recv(struct io_ring *r, int fd) __attribute__((warn_unused_result));
bool io_ring_recv_cancel(struct io_ring *r, int fd) __attribute__((warn_unused_result));
/* A send record for fd (NULL: out of memory). */
struct io_ring_send *io_ring_send_new(struct io_ring *r, int fd, void *conn);
void io_ring_send_free(struct io_ring *r, struct io_ring_send *s);
/* Move everything in more (may be NULL) behind what s still holds, and
 * queue a send of it all. */
bool io_ring_send_start(struct io_ring *r, struct io_ring_send *s, struct buf *more) __attribute__((warn_unused_result));
size_t io_ring_send_len(const struct io_ring_send *s);

/* Hand what is queued to the kernel (one system call for all of it); what
 * completed meanwhile waits for the next collection. */
void io_ring_submit(struct io_ring *r);
/* The next completion of the collection under way (one starts with the
 * first call): true with ev filled; false when the collection ends. The
 * owner handles each before asking for the next, and may queue and submit
 * meanwhile. Bounded: a ring kept busy ends the collection early, and
 * io_ring_take_later then says so. */
bool io_ring_next(struct io_ring *r, struct io_ring_event *ev) __attribute__((warn_unused_result));
/* How many completions the last collection went through. */
unsigned io_ring_collected(const struct io_ring *r);
/* Collect again on the loop's next turn, once it has polled its other
 * events (a collection ended early, or a submit made for room kept the
 * eventfd quiet); reading it clears it. Not the eventfd's event activated
 * from its own callback: libevent would run it again in the same pass,
 * before any other socket, timer or signal. */
bool io_ring_take_later(struct io_ring *r);
/* Operations queued and not yet submitted. */
bool io_ring_pending(const struct io_ring *r);
/* Nothing queued and no completion waiting (in the queue, or held by the
 * kernel until our next io_uring_enter): a submit now would carry only
 * what the caller queues next. Reads shared memory, no system call. */
bool io_ring_quiet(const struct io_ring *r);

/* For SHOW MEM: the provided buffers (count, size, held by pgcat now). */
void io_ring_buffers(const struct io_ring *r, unsigned *count, unsigned *size, unsigned *held);

#endif
