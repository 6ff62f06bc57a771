/* SPDX-License-Identifier: MIT */
/*
 * io_ring: the io_uring engine under io.c (SPEC §12, doc/io-engine.md).
 * One ring per worker process; libevent stays the loop, and the ring is one
 * more event in it (an eventfd the kernel signals when completions wait).
 * Sockets are known by fd, their owners only as opaque pointers: this room
 * knows nothing of struct io, and reports completions through the handlers
 * io.c gives it. Receives are multishot, into a ring of provided buffers
 * (an idle socket pins no buffer); sends take the bytes out of the owner's
 * buffer into a record of their own, which outlives the owner if it must.
 */
#ifndef PGCAT_IO_RING_H
#define PGCAT_IO_RING_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct buf;
struct io_ring;
struct io_ring_send;

struct io_ring_handlers {
	/* conn's receive: res > 0 bytes at data, 0 end of file, < 0 -errno.
	 * more: the receive stays armed (false: it ended; arm it again to go
	 * on reading). data is valid during the call only. */
	void (*on_recv)(void *conn, int res, const uint8_t *data, bool more);
	/* conn's send s finished: res bytes sent (what is left stays in s,
	 * io_ring_send_len) or -errno. */
	void (*on_send)(void *conn, struct io_ring_send *s, int res);
	/* Completions wait: the owner calls io_ring_reap, as from a socket
	 * callback of its own. */
	void (*on_wake)(void *arg);
	void *arg;
};

/* NULL: io_uring cannot be used here; why says so (for the one log line). */
struct io_ring *io_ring_new(struct event_base *base, const struct io_ring_handlers *h, char *why, size_t whylen);
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

/* Hand what is queued to the kernel (one system call for all of it), and
 * collect what completed meanwhile. */
void io_ring_submit(struct io_ring *r);
/* Collect every completion waiting, calling the handlers; returns how many
 * there were. */
unsigned io_ring_reap(struct io_ring *r);
/* Operations queued and not yet submitted. */
bool io_ring_pending(const struct io_ring *r);
/* Nothing queued and no completion waiting (in the queue, or held by the
 * kernel until our next io_uring_enter): a submit now would carry only
 * what the caller queues next. Reads shared memory, no system call. */
bool io_ring_quiet(const struct io_ring *r);

/* For SHOW MEM: the provided buffers (count, size, held by pgcat now). */
void io_ring_buffers(const struct io_ring *r, unsigned *count, unsigned *size, unsigned *held);

#endif
