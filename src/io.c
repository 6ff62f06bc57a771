/* SPDX-License-Identifier: MIT */
/*
 * io: socket reads into an input block (buf.h), writes from an output block,
 * flushed in a batch at the end of the loop turn. Compared with
 * bufferevents this saves arming and disarming the write event for every
 * reply: a reply that fits in the socket buffer (nearly all do) costs one
 * send and no epoll_ctl.
 */
#include "io.h"

#include "io_ring.h"
#include "io_tls_close.h"

#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void write_cb(evutil_socket_t fd, short what, void *arg);
static inline bool make_dirty(struct io *io);
static void ring_sync(struct io *io);
static void ring_note_receiver(struct io_flusher *f, int fd);
static void ring_rejoin(struct io *io);

/* The multishot receive of a connection on the ring (io.recv). */
enum io_recv { RECV_OFF, RECV_ON, RECV_CANCELLING };

/* Receives in a row from the same two sockets before those two leave the
 * ring (ring_go_solo; sends skip it meanwhile, ring_send_alone): four
 * transactions of one client. */
#define RING_PAIR_STREAK 8u

/* A socket's recv and send as bare system calls. Once a process has a
 * second thread (the KDF and offload threads start at the first SCRAM
 * login), glibc's recv and send wrap every call in thread-cancellation
 * bookkeeping, about 90 instructions a call; pgcat never cancels a thread,
 * and these run a few times per transaction. (recv and send are recvfrom
 * and sendto with no address.) */
static inline ssize_t sock_recv(int fd, void *b, size_t n)
{
	return (ssize_t)syscall(SYS_recvfrom, fd, b, n, 0, NULL, NULL);
}
static inline ssize_t sock_send(int fd, const void *b, size_t n)
{
	return (ssize_t)syscall(SYS_sendto, fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT, NULL, 0);
}

/* The struct the connection is embedded in: its callbacks' arg. */
static inline void *io_owner(struct io *io)
{
	return (char *)io - io->ops->owner_offset;
}

void io_arm_read_change(struct io *io)
{
	if (io->loopback) {
		/* No socket to watch: output held back while the input was full
		 * is handed over at the flush once there is room again. */
		if (io_wants_read(io) && io->out && buf_len(io->out) > 0)
			(void)make_dirty(io);   /* (out of memory: the next write retries) */
		return;
	}
	if (io->on_ring) {
		ring_sync(io);
		return;
	}
	bool want = io_wants_read(io);
	if (want && !io->read_armed) {
		event_add(&io->rev, NULL);
		io->read_armed = true;
		/* Bytes OpenSSL has already taken off the socket raise no event. */
		if (io->ssl && !io->tls_handshaking && SSL_has_pending(io->ssl))
			event_active(&io->rev, EV_READ, 0);
	} else if (!want && io->read_armed) {
		event_del(&io->rev);
		io->read_armed = false;
	}
}

/* The write event exists only once a connection has needed one (a connect,
 * or a socket buffer that filled up): most clients never do, and an event
 * is 128 bytes of an idle client's footprint. */
static void write_event_change(struct io *io, bool want);
static inline void io_arm_write(struct io *io, bool want)
{
	/* (nearly every flush: no write event, none wanted) */
	if (want != io->write_armed)
		write_event_change(io, want);
}

static void write_event_change(struct io *io, bool want)
{
	if (want && !io->write_armed) {
		if (!io->wev) {
			io->wev = event_new(event_get_base(&io->rev), io->fd, EV_WRITE | EV_PERSIST, write_cb, io);
			if (!io->wev)
				return;   /* the janitor's timeouts end such a connection */
		}
		event_add(io->wev, NULL);
		io->write_armed = true;
	} else if (!want && io->write_armed) {
		event_del(io->wev);
		io->write_armed = false;
	}
}

static void tls_step(struct io *io);

/* TLS: as much of the output as SSL_write takes (the block may have
 * moved since a write that wanted more: SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER). */
static bool tls_write_some(struct io *io)
{
	if (io->tls_handshaking)
		return true;   /* stays queued until the handshake is done */
	while (io->out && buf_len(io->out) > 0) {
		int len = buf_len(io->out) > INT_MAX ? INT_MAX : (int)buf_len(io->out);
		ERR_clear_error();
		int n = SSL_write(io->ssl, buf_head(io->out), len);
		if (n > 0) {
			buf_drain(io->out, (size_t)n);
			buf_settle(io->out);
			continue;
		}
		int e = SSL_get_error(io->ssl, n);
		if (e == SSL_ERROR_WANT_WRITE) {
			io_arm_write(io, true);
			return true;
		}
		if (e == SSL_ERROR_WANT_READ)
			return true;   /* the read callback tries again */
		io_arm_write(io, false);
		io->tls_failed = true;
		io->ops->on_event(io, IO_ERROR, e == SSL_ERROR_SYSCALL && errno ? errno : EPROTO, io_owner(io));
		return false;
	}
	io_arm_write(io, false);
	return true;
}

/* One send of what io->out holds, as far as the socket takes it now: the
 * bytes it took (drained from out), or what send returned (0, or -1 with
 * errno set). out must not be empty. */
static inline __attribute__((always_inline)) ssize_t send_out(struct io *io)
{
	ssize_t n = sock_send(io->fd, buf_head(io->out), buf_len(io->out));
	if (n > 0) {
		buf_drain(io->out, (size_t)n);
		buf_settle(io->out);
	}
	return n;
}

/* Returns false when the socket failed (the owner was told). */
static inline __attribute__((always_inline)) bool io_write_some(struct io *io)
{
	if (io->on_ring) {
		(void)make_dirty(io);   /* the end of the callback submits it */
		return true;
	}
	if (io->ssl)
		return tls_write_some(io);
	while (io->out && buf_len(io->out) > 0) {
		ssize_t n = send_out(io);
		if (n > 0)
			continue;
		int err = errno;
		if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)) {
			io_arm_write(io, true);
			return true;
		}
		io_arm_write(io, false);
		io->ops->on_event(io, IO_ERROR, n == 0 ? EPIPE : err, io_owner(io));
		return false;
	}
	io_arm_write(io, false);
	return true;
}

/* Reads land in the room after the unread input: at least IO_READ_MIN
 * bytes of it, made by moving the unread bytes to the block's head or by a
 * larger block. NULL: out of memory (errno ENOMEM). */
#define IO_READ_MIN 4096u
static uint8_t *read_room_made(struct io *io, size_t *room);
static inline __attribute__((always_inline)) uint8_t *read_room(struct io *io, size_t *room)
{
	/* (nearly every read: a block with room, not one to shrink) */
	struct buf *b = io->in;
	if (b && b->cap - b->off - b->len >= IO_READ_MIN && !(b->len == 0 && b->cap > BUF_STREAM))
		return buf_tail(b, room);
	return read_room_made(io, room);
}

static uint8_t *read_room_made(struct io *io, size_t *room)
{
	struct buf *b = io_in(io);
	if (b)
		buf_settle(b);
	if (!b || (b->cap - b->off - b->len < IO_READ_MIN && !buf_reserve(b, IO_READ_MIN))) {
		errno = ENOMEM;
		return NULL;
	}
	return buf_tail(b, room);
}

/* A read took n of room bytes: the bytes count, and a read that filled the
 * room (the kernel likely holds more: a result streaming) doubles the
 * block for the next one, up to BUF_STREAM. */
static void read_took(struct io *io, size_t n, size_t room)
{
	buf_commit(io->in, n);
	if (n == room && io->in->cap < BUF_STREAM && !buf_reserve(io->in, io->in->cap))
		return;   /* out of memory: the next read is as large as this one */
}

static ssize_t tls_read_into(struct io *io)
{
	ERR_clear_error();
	size_t room;
	uint8_t *at = read_room(io, &room);
	if (!at)
		return -1;
	int n = SSL_read(io->ssl, at, room > INT_MAX ? INT_MAX : (int)room);
	if (n > 0) {
		read_took(io, (size_t)n, room);
		return n;
	}
	switch (SSL_get_error(io->ssl, n)) {
	case SSL_ERROR_WANT_READ:
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_WANT_WRITE:
		io_arm_write(io, true);
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0;   /* close_notify */
	case SSL_ERROR_SYSCALL:
		if (errno == EAGAIN)
			return -1;
		io->tls_failed = true;
		if (errno == 0)
			return 0;   /* EOF without close_notify: a plain EOF */
		return -1;
	default:
		io->tls_failed = true;
		errno = EPROTO;
		return -1;
	}
}

static ssize_t read_into(struct io *io)
{
	if (io->ssl)
		return tls_read_into(io);
	size_t room;
	uint8_t *at = read_room(io, &room);
	if (!at)
		return -1;
	/* recv, not read: the socket path skips the VFS layers read goes through. */
	ssize_t n = sock_recv(io->fd, at, room);
	if (n > 0)
		read_took(io, (size_t)n, room);
	return n;
}

/* A socket callback ended: what it wrote goes out now, not after a trip
 * through the event loop (the flusher's event costs an activation, a
 * dispatch and a removal per loop turn). The owners' callbacks have all
 * returned here, as at the end of the turn. */
static void ring_later_check(struct io_flusher *f);
static void callback_done(struct io_flusher *f)
{
	if (--f->depth != 0)
		return;
	if (f->n_dirty > 0 || (f->ring && io_ring_pending(f->ring)))
		io_flush_all(f);
	else if (f->ring)
		ring_later_check(f);   /* (a submit made for room: io_ring_take_later) */
}

static void read_and_report(struct io *io);

static void read_ready(struct io *io)
{
	if (io->on_ring) {
		/* Input that arrived while the owner had paused reading (paused
		 * again since: it stays owed until the next resume). */
		if (io->paused)
			return;
		io->unread = false;
		if (io->in && buf_len(io->in) > 0)
			io->ops->on_read(io, io_owner(io));
		if (!io->closed)
			io_update_reading(io);
		return;
	}
	if (io->ssl) {
		if (io->tls_handshaking) {
			tls_step(io);
			return;
		}
		/* A write that waited for the peer's bytes (TLS key update). */
		if (io_out_len(io) > 0 && !io->write_armed && !io_write_some(io))
			return;
		if (io->closed)
			return;
	}
	read_and_report(io);
}

/* One read from the socket, and the owner told what came of it. */
static void read_and_report(struct io *io)
{
	ssize_t n = read_into(io);
	if (n == 0) {
		io->ops->on_event(io, IO_EOF, 0, io_owner(io));
		return;
	}
	if (n < 0) {
		int err = errno;
		if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)
			return;
		io->ops->on_event(io, IO_ERROR, err, io_owner(io));
		return;
	}
	if (io->solo)
		ring_note_receiver(io->flusher, io->fd);
	io->ops->on_read(io, io_owner(io));
	if (!io->closed) {
		io_update_reading(io);
		/* A record holds more than one read took: no socket event will say so. */
		if (io->ssl && io->read_armed && SSL_has_pending(io->ssl))
			event_active(&io->rev, EV_READ, 0);
		if (io->solo)
			ring_rejoin(io);
	}
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct io *io = arg;
	struct io_flusher *f = io->flusher;   /* io may be closed by the callback */
	f->depth++;
	read_ready(io);
	callback_done(f);
}

/* io_start_tls_replay: the handshake reads the bytes already taken off the
 * socket from a memory BIO, then from the socket. The two are told apart
 * without a flag: only then do reads and writes go to different BIOs. */
static bool tls_replaying(SSL *ssl)
{
	return SSL_get_rbio(ssl) != SSL_get_wbio(ssl);
}

/* The replayed bytes are all read: from now on the socket's BIO serves
 * reads too (it is shared, hence the extra reference; SSL_set0_rbio frees
 * the memory BIO). */
static void tls_replay_done(SSL *ssl)
{
	BIO *sock = SSL_get_wbio(ssl);
	BIO_up_ref(sock);
	SSL_set0_rbio(ssl, sock);
}

/* One more step of the handshake, on either readiness. */
static void tls_step(struct io *io)
{
	ERR_clear_error();
	int rc = SSL_do_handshake(io->ssl);
	if (rc <= 0 && tls_replaying(io->ssl) && SSL_get_error(io->ssl, rc) == SSL_ERROR_WANT_READ) {
		/* The memory BIO answers "retry" only once it is empty. */
		tls_replay_done(io->ssl);
		ERR_clear_error();
		rc = SSL_do_handshake(io->ssl);
	}
	if (rc == 1 && tls_replaying(io->ssl)) {
		if (BIO_ctrl_pending(SSL_get_rbio(io->ssl)) == 0) {
			tls_replay_done(io->ssl);
		} else {
			/* Bytes left over from before the handshake: a peer could
			 * not have had a reason to send them, and they would be
			 * taken as if they came after it. */
			io->tls_failed = true;
			io->ops->on_event(io, IO_ERROR, EPROTO, io_owner(io));
			return;
		}
	}
	if (rc == 1) {
		io->tls_handshaking = false;
		io_arm_write(io, false);
		io->ops->on_event(io, IO_TLS_READY, 0, io_owner(io));
		if (io->closed)
			return;
		if (io_out_len(io) > 0)
			(void)io_write_some(io);
		if (!io->closed && io->read_armed && SSL_has_pending(io->ssl))
			event_active(&io->rev, EV_READ, 0);
		return;
	}
	switch (SSL_get_error(io->ssl, rc)) {
	case SSL_ERROR_WANT_READ:
		io_arm_write(io, false);
		io_update_reading(io);
		return;
	case SSL_ERROR_WANT_WRITE:
		io_arm_write(io, true);
		return;
	default:
		io->tls_failed = true;
		io->ops->on_event(io, IO_ERROR, EPROTO, io_owner(io));
		return;
	}
}

static void tls_begin(struct io *io)
{
	if (SSL_set_fd(io->ssl, io->fd) != 1) {
		io->ops->on_event(io, IO_ERROR, EPROTO, io_owner(io));
		return;
	}
	tls_step(io);
}

static void tls_begin_replay(struct io *io);

/* TLS stays on epoll: a connection on the ring leaves it first, once its
 * receive and send have ended (the peer is quiet meanwhile: it waits for
 * our 'S', or for the handshake's next message). Bytes the receive took
 * after the 'S' went out are the start of the TLS stream: the handshake
 * reads them first, as io_start_tls_replay's. */
static void ring_leave(struct io *io)
{
	if (io->recv != RECV_OFF || io->send_in_flight) {
		ring_sync(io);   /* the receive is cancelled at the flush */
		return;
	}
	io_ring_detach(io->flusher->ring, io->fd);
	if (io->send)
		io_ring_send_free(io->flusher->ring, io->send);
	io->send = NULL;   /* wev, from here on */
	io->on_ring = false;
	io->write_armed = false;
	event_del(&io->rev);   /* an on_read owed is taken by the handshake */
	io->unread = false;
	/* Watched by epoll from here on, as a connection opened there: the
	 * handshake may finish without ever waiting (the peer's last flight
	 * already in), and the bytes after it must still raise an event. */
	io_update_reading(io);
	if (io->in && buf_len(io->in) > 0)
		tls_begin_replay(io);
	else
		tls_begin(io);
}

void io_start_tls(struct io *io, SSL *ssl)
{
	io->ssl = ssl;
	io->tls_handshaking = true;
	if (io->on_ring) {
		ring_leave(io);
		return;
	}
	tls_begin(io);
}

void io_start_tls_replay(struct io *io, SSL *ssl)
{
	io->ssl = ssl;
	io->tls_handshaking = true;
	if (io->on_ring) {
		ring_leave(io);
		return;
	}
	tls_begin_replay(io);
}

static void tls_begin_replay(struct io *io)
{
	SSL *ssl = io->ssl;
	size_t n = io->in ? buf_len(io->in) : 0;
	BIO *mem = n > 0 && n <= INT_MAX ? BIO_new(BIO_s_mem()) : NULL;
	BIO *sock = mem ? BIO_new_socket((int)io->fd, BIO_NOCLOSE) : NULL;
	const unsigned char *bytes = sock ? buf_head(io->in) : NULL;
	if (!bytes || BIO_write(mem, bytes, (int)n) != (int)n) {
		BIO_free(mem);
		BIO_free(sock);
		io->ops->on_event(io, IO_ERROR, n > 0 ? ENOMEM : EPROTO, io_owner(io));
		return;
	}
	buf_drain(io->in, n);
	/* Empty: "retry", as a socket with nothing to read says, not EOF. */
	BIO_set_mem_eof_return(mem, -1);
	SSL_set_bio(ssl, mem, sock);   /* both owned by ssl from here on */
	tls_step(io);
}

void io_read_now(struct io *io)
{
	if (io->closed)
		return;
	if (io->on_ring) {
		/* Before the receive is armed (at the end of the turn), a read
		 * of our own cannot race it. */
		if (io->recv == RECV_OFF && io_wants_read(io)) {
			struct io_flusher *f = io->flusher;
			f->depth++;
			read_and_report(io);
			callback_done(f);
		}
		return;
	}
	if (io->read_armed)
		read_cb(io->fd, EV_READ, io);
}

static void write_ready(struct io *io)
{
	if (io->connecting) {
		int err = 0;
		socklen_t len = sizeof err;
		if (getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err == EINPROGRESS)
			return;
		io->connecting = false;
		io_arm_write(io, false);
		if (err) {
			io->ops->on_event(io, IO_ERROR, err, io_owner(io));
			return;
		}
		/* Connected: on the ring from now on (libevent allows freeing
		 * the event whose callback this is). */
		if (io->flusher->ring && io_ring_attach(io->flusher->ring, io->fd, io)) {
			if (io->wev)
				event_free(io->wev);
			io->wev = NULL;
			io->on_ring = true;
		}
		io_update_reading(io);
		io->ops->on_event(io, IO_CONNECTED, 0, io_owner(io));
		if (!io->closed && io_out_len(io) > 0)
			(void)io_write_some(io);
		return;
	}
	if (io->ssl && io->tls_handshaking) {
		tls_step(io);
		return;
	}
	if (!io_write_some(io))
		return;
	if (io_out_len(io) <= io->ops->write_low && io->ops->on_drain)
		io->ops->on_drain(io, io_owner(io));
}

static void write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct io *io = arg;
	struct io_flusher *f = io->flusher;
	f->depth++;
	write_ready(io);
	callback_done(f);
}

static void flusher_cb(evutil_socket_t fd, short what, void *arg)
{
	io_flush_all(arg);
}

/* Off the dirty array, the last entry taking its place. */
static void undirty(struct io *io)
{
	struct io_flusher *f = io->flusher;
	if (!io->dirty_slot)
		return;
	uint32_t i = io->dirty_slot - 1;
	struct io *last = f->dirty[--f->n_dirty];
	f->dirty[i] = last;
	last->dirty_slot = i + 1;
	io->dirty_slot = 0;
}

/* Room for more dirty connections; false: out of memory. */
static bool dirty_grow(struct io_flusher *f)
{
	uint32_t cap = f->cap_dirty ? f->cap_dirty * 2 : 256;
	struct io **d = cap > f->cap_dirty ? realloc(f->dirty, (size_t)cap * sizeof *d) : NULL;
	if (!d)
		return false;
	f->dirty = d;
	f->cap_dirty = cap;
	return true;
}

/* Onto the dirty array; false: out of memory. (Inline: once or twice a
 * transaction per connection.) */
static inline __attribute__((always_inline)) bool make_dirty(struct io *io)
{
	struct io_flusher *f = io->flusher;
	if (io->dirty_slot)
		return true;
	if (f->n_dirty == f->cap_dirty && !dirty_grow(f))
		return false;
	/* inside a socket callback, its end flushes (callback_done) */
	if (f->n_dirty == 0 && f->depth == 0)
		event_active(f->ev, 0, 0);
	f->dirty[f->n_dirty++] = io;
	io->dirty_slot = f->n_dirty;
	return true;
}

/* ---- the end of a TLS connection ----
 *
 * PostgreSQL ends every TLS connection with SSL_shutdown, and OpenSSL 3
 * reports an end without close_notify as an error (it could be a cut made
 * by an attacker): libpq says "SSL error: unexpected eof while reading",
 * which broke libpq 17's cancel over TLS. So a close first writes the queued output through TLS, then a
 * close_notify. Only the sending half: like PostgreSQL, pgcat does not wait
 * for the peer's close_notify. Most of the time the socket takes it all at
 * once; otherwise what is left goes out from the event loop, without the
 * owner (it is being freed), for at most IO_TLS_CLOSE_MS. A peer that went
 * away makes a write fail, which ends it at once. */

/* From io_close: true when the SSL, the socket and the output were handed
 * to io_tls_close.c, which finishes later; false: the caller frees them now
 * (all written, the peer gone, or no memory for the wait). */
static bool tls_close_begin(struct io *io)
{
	if (!io_tls_close_begin(&io->flusher->tls_closing, event_get_base(&io->rev), io->ssl, io->fd, io->out))
		return false;
	io->ssl = NULL;
	io->fd = -1;
	io->out = NULL;
	return true;
}

bool io_flusher_init(struct io_flusher *f, struct event_base *base)
{
	f->dirty = NULL;
	f->n_dirty = f->cap_dirty = 0;
	f->discard = NULL;
	f->depth = 0;
	f->ring = NULL;
	f->ring_ev = f->ring_later = NULL;
	f->ring_turn_work = 0;
	f->pair_fd[0] = f->pair_fd[1] = -1;
	f->pair_streak = 0;
	f->base = base;
	list_init(&f->tls_closing);
	f->ev = event_new(base, -1, 0, flusher_cb, f);
	return f->ev != NULL;
}

static void ring_events_free(struct io_flusher *f)
{
	if (f->ring_ev)
		event_free(f->ring_ev);
	if (f->ring_later)
		event_free(f->ring_later);
	f->ring_ev = f->ring_later = NULL;
}

void io_flusher_free(struct io_flusher *f)
{
	/* (io_tls_close_drop_all: next is NULL when init never ran, the flusher in a calloc'd worker) */
	io_tls_close_drop_all(&f->tls_closing);
	ring_events_free(f);
	io_ring_free(f->ring);
	f->ring = NULL;
	if (f->ev)
		event_free(f->ev);
	f->ev = NULL;
	if (f->discard)
		buf_free(f->discard);
	f->discard = NULL;
	free(f->dirty);
	f->dirty = NULL;
	f->n_dirty = f->cap_dirty = 0;
}

/* A loopback's output becomes its input (io_open_loopback), as a socket
 * is read: only while the input is below read_high (and reading is not
 * paused); otherwise it waits in the output, where its writer sees it (and
 * pauses), until io_update_reading. The owner's on_read may close the
 * connection; its memory must outlive this call (io_flush_all reads it
 * after). */
static void loopback_deliver(struct io *io)
{
	if (io->closed || !io->out || buf_len(io->out) == 0 || !io_wants_read(io))
		return;
	/* Copied, not swapped: a writer may still hold io->out. */
	struct buf *in = io_in(io);
	if (!in || buf_add_buf(in, io->out) != 0)
		return;   /* out of memory: the owner's limits end it */
	io->ops->on_read(io, io_owner(io));
}

/* ---- the io_uring engine: what io.c asks of io_ring.c ----
 *
 * A connection on the ring has at most one receive (multishot, armed once)
 * and one send in flight. Both are queued at the flush of the loop turn
 * and go to the kernel in one submission for all connections; their
 * completions come back through ring_recv and ring_sent below. */

/* The receive is armed or cancelled at the next flush to match io_wants_read;
 * input owed to a resumed owner is delivered from the loop. */
static void ring_sync(struct io *io)
{
	if (io->closed)
		return;
	bool want = io_wants_read(io) && !io->ssl;   /* ssl: leaving for epoll */
	if ((want && io->recv == RECV_OFF) || (!want && io->recv == RECV_ON))
		(void)make_dirty(io);
	if (want && io->unread)
		event_active(&io->rev, EV_READ, 0);
}

/* A send the ring would carry alone goes straight to the socket, as on
 * epoll. That is when the worker serves one exchange at a time (the last
 * RING_PAIR_STREAK receives came from the same two sockets: one client and
 * its server), the turn woke for one completion, nothing else is queued
 * and no completion waits: the io_uring_enter that submits the send would
 * then be one system call for it alone and cost more than the send (the
 * record the chains move into, the submission, the completion to
 * collect). With more clients the ring keeps every send: its enter also
 * collects what arrived meanwhile, and io_flush_all goes on without a trip
 * through epoll_wait (sending directly whenever a connection happened to
 * be alone at its flush tripled the system calls per transaction at 10
 * clients). Only while nothing of this connection is in flight, so its
 * bytes keep their order. */
static bool ring_send_alone(const struct io *io)
{
	const struct io_flusher *f = io->flusher;
	return f->pair_streak >= RING_PAIR_STREAK && f->ring_turn_work <= 1 && f->n_dirty == 0 && !io->send_in_flight &&
	       (!io->send || io_ring_send_len(io->send) == 0) && io_ring_quiet(f->ring);
}

/* A receive on fd: does the worker still serve one exchange at a time
 * (the receives come from the same two sockets, a client and its server)? */
static void ring_note_receiver(struct io_flusher *f, int fd)
{
	if (fd == f->pair_fd[0] || fd == f->pair_fd[1]) {
		if (fd != f->pair_fd[0]) {
			f->pair_fd[1] = f->pair_fd[0];
			f->pair_fd[0] = fd;
		}
		if (f->pair_streak < RING_PAIR_STREAK)
			f->pair_streak++;
		return;
	}
	/* A third socket: a new pair, of it and the last one that received. */
	f->pair_fd[1] = f->pair_fd[0];
	f->pair_fd[0] = fd;
	f->pair_streak = 0;
}

/* Is fd one of the two sockets of the one exchange the worker serves? */
static bool ring_pair_alone(const struct io_flusher *f, int fd)
{
	return f->pair_streak >= RING_PAIR_STREAK && (fd == f->pair_fd[0] || fd == f->pair_fd[1]);
}

/* One exchange at a time (one client and its server): the ring has nothing
 * to batch, and each receive through it costs the eventfd's wake-up and an
 * io_uring_enter to run it, where epoll's engine makes one recv. So the
 * two sockets leave the ring and are read and written as on epoll, once
 * nothing of theirs is in flight there (no receive, no send, no input owed
 * to a paused owner): the fd table forgets them, the send record goes, and
 * libevent watches the socket. */
static void ring_go_solo(struct io *io)
{
	io_ring_detach(io->flusher->ring, io->fd);
	if (io->send)
		io_ring_send_free(io->flusher->ring, io->send);
	io->send = NULL;   /* wev, from here on */
	io->on_ring = false;
	io->solo = true;
	io->write_armed = false;
	io_update_reading(io);
}

/* A socket off the ring for one exchange goes back once the worker serves
 * more (a third socket received), at its next read or flush: its receive
 * is armed on the ring at the flush. Not while a write waits for room on
 * epoll, nor for TLS (which stays on epoll). */
static void ring_rejoin(struct io *io)
{
	struct io_flusher *f = io->flusher;
	if (!io->solo || io->closed || io->ssl || io->write_armed || ring_pair_alone(f, io->fd))
		return;
	if (!io_ring_attach(f->ring, io->fd, io))
		return;   /* out of memory: it stays on epoll, which works as well */
	if (io->read_armed) {
		event_del(&io->rev);
		io->read_armed = false;
	}
	if (io->wev)
		event_free(io->wev);
	io->wev = NULL;   /* send, from here on */
	io->solo = false;
	io->on_ring = true;
	ring_sync(io);
}

/* The flush of a connection on the ring: queue its receive (or its
 * cancellation) and a send of what is queued. It may leave the ring here
 * (ring_go_solo); io_flush goes on as on epoll then. */
static void ring_flush(struct io *io)
{
	struct io_ring *r = io->flusher->ring;
	bool want = io_wants_read(io) && !io->ssl;
	if (want && !io->send_in_flight && !io->unread && ring_pair_alone(io->flusher, io->fd)) {
		if (io->recv == RECV_OFF) {
			ring_go_solo(io);
			return;
		}
		/* Its end comes back through ring_recv, which asks for a flush. */
		if (io->recv == RECV_ON && io_ring_recv_cancel(r, io->fd))
			io->recv = RECV_CANCELLING;
	}
	if (want && io->recv == RECV_OFF) {
		if (!io_ring_recv(r, io->fd)) {
			io->ops->on_event(io, IO_ERROR, EAGAIN, io_owner(io));
			return;
		}
		io->recv = RECV_ON;
	} else if (!want && io->recv == RECV_ON) {
		if (io_ring_recv_cancel(r, io->fd))
			io->recv = RECV_CANCELLING;
	}
	/* Output queued while a send is in flight goes when it ends; a
	 * connection starting TLS sends nothing more from here. */
	if (io->send_in_flight || io->ssl || !io->out || buf_len(io->out) == 0)
		return;
	if (ring_send_alone(io)) {
		ssize_t n = send_out(io);
		int err = errno;
		if (n == 0 || (n < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR)) {
			io->ops->on_event(io, IO_ERROR, n == 0 ? EPIPE : err, io_owner(io));
			return;
		}
		/* What the socket did not take waits for room in the ring's
		 * send below (the kernel arms its own poll for it), as any
		 * partial send on the ring. */
		if (buf_len(io->out) == 0)
			return;
	}
	if (!io->send && !(io->send = io_ring_send_new(r, io->fd, io))) {
		io->ops->on_event(io, IO_ERROR, ENOMEM, io_owner(io));
		return;
	}
	if (!io_ring_send_start(r, io->send, io->out)) {
		io->ops->on_event(io, IO_ERROR, ENOMEM, io_owner(io));
		return;
	}
	io->send_in_flight = true;
	io->write_armed = true;   /* as on epoll: output waits on the kernel */
}

/* A receive still armed for a connection that wants no more input (its
 * owner paused it, or its input reached read_high) is cancelled now, not
 * at the flush: the reap goes on entering the kernel, and each entry would
 * fill more of the ring's buffers from the socket (megabytes, where epoll
 * stops at read_high). The reap's next entry submits the cancel. */
static void ring_stop_now(struct io *io)
{
	if (io->recv == RECV_ON && !io_wants_read(io) && io_ring_recv_cancel(io->flusher->ring, io->fd))
		io->recv = RECV_CANCELLING;
}

/* The connection's receive reported (io_ring_next). */
static void ring_recv(void *conn, int res, const uint8_t *data, bool more)
{
	struct io *io = conn;
	if (!more)
		io->recv = RECV_OFF;
	if (res > 0) {
		ring_note_receiver(io->flusher, io->fd);
		struct buf *in = io_in(io);
		if (!in || buf_add(in, data, (size_t)res) != 0) {
			io->ops->on_event(io, IO_ERROR, ENOMEM, io_owner(io));
			return;
		}
		if (io->paused || io->ssl) {
			io->unread = !io->ssl;   /* the handshake takes them (ring_leave) */
			if (!io->ssl)
				ring_stop_now(io);
			else if (io->recv == RECV_OFF && !io->send_in_flight)
				ring_leave(io);
			return;
		}
		io->ops->on_read(io, io_owner(io));
		if (!io->closed) {
			ring_stop_now(io);
			ring_sync(io);
		}
		return;
	}
	if (res == 0) {
		io->ops->on_event(io, IO_EOF, 0, io_owner(io));
		return;
	}
	if (res == -ECANCELED || res == -ENOBUFS) {
		/* Our cancel (pause, TLS) or no buffer left this pass: armed
		 * again at the flush if still wanted. */
		if (io->ssl) {
			if (io->recv == RECV_OFF && !io->send_in_flight)
				ring_leave(io);
			return;
		}
		ring_sync(io);
		return;
	}
	io->ops->on_event(io, IO_ERROR, -res, io_owner(io));
}

/* The connection's send ended, all or part of it (io_ring_next). */
static void ring_sent(void *conn, struct io_ring_send *s, int res)
{
	struct io *io = conn;
	io->send_in_flight = false;
	size_t left = io_ring_send_len(s);
	if (res < 0 || (res == 0 && left > 0)) {
		io->write_armed = false;
		io->ops->on_event(io, IO_ERROR, res < 0 ? -res : EPIPE, io_owner(io));
		return;
	}
	/* What the kernel did not take goes again, with what was queued
	 * since (not when starting TLS: the rest of what was in flight only). */
	struct buf *more = io->ssl ? NULL : io->out;
	if (left > 0 || (more && buf_len(more) > 0)) {
		if (!io_ring_send_start(io->flusher->ring, s, more)) {
			io->write_armed = false;
			io->ops->on_event(io, IO_ERROR, ENOMEM, io_owner(io));
			return;
		}
		io->send_in_flight = true;
	} else {
		/* Idle: the record goes (an idle connection holds none), and
		 * the buffers if the owner asked (io_flush_all's trim). */
		io_ring_send_free(io->flusher->ring, s);
		io->send = NULL;
		io->write_armed = false;
		if (io->ssl) {
			if (io->recv == RECV_OFF)
				ring_leave(io);
			return;
		}
		if (io->trim_after_flush) {
			io->trim_after_flush = false;
			io_trim(io);
		}
	}
	if (io_out_len(io) <= io->ops->write_low && io->ops->on_drain)
		io->ops->on_drain(io, io_owner(io));
}

/* The ring asked to be collected again once the loop has polled its other
 * events (io_ring_take_later): a zero timer, not the eventfd's event. */
static void ring_later_check(struct io_flusher *f)
{
	static const struct timeval now = { 0, 0 };
	if (f->ring && io_ring_take_later(f->ring))
		(void)event_add(f->ring_later, &now);
}

/* Every completion waiting, each to its connection; how many there were
 * (the ring's work this turn, for ring_go_solo). */
static unsigned ring_collect(struct io_flusher *f)
{
	struct io_ring_event ev;
	while (io_ring_next(f->ring, &ev)) {
		if (ev.kind == IO_RING_RECEIVED)
			ring_recv(ev.conn, ev.res, ev.data, ev.more);
		else
			ring_sent(ev.conn, ev.send, ev.res);
	}
	ring_later_check(f);
	return io_ring_collected(f->ring);
}

/* The ring's eventfd fired (completions wait), or its zero timer. */
static void ring_wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct io_flusher *f = arg;
	(void)fd;
	(void)what;
	f->depth++;
	f->ring_turn_work = ring_collect(f);
	callback_done(f);
}

bool io_flusher_use_io_uring(struct io_flusher *f, char *why, size_t whylen)
{
	if (f->ring)
		return true;
	f->ring = io_ring_new(why, whylen);
	if (!f->ring)
		return false;
	/* Edge-triggered: every signal is an edge, so the counter is never
	 * read (a read would be a system call per wake). */
	f->ring_ev = event_new(f->base, io_ring_wake_fd(f->ring), EV_READ | EV_PERSIST | EV_ET, ring_wake_cb, f);
	f->ring_later = evtimer_new(f->base, ring_wake_cb, f);
	if (!f->ring_ev || !f->ring_later || event_add(f->ring_ev, NULL) < 0) {
		snprintf(why, whylen, "cannot add the ring's event to the loop");
		ring_events_free(f);
		io_ring_free(f->ring);
		f->ring = NULL;
		return false;
	}
	return true;
}

const char *io_flusher_engine(const struct io_flusher *f)
{
	return f->ring ? "io_uring" : "epoll";
}

void io_flusher_ring_buffers(const struct io_flusher *f, unsigned *count, unsigned *size, unsigned *held)
{
	*count = *size = *held = 0;
	if (f->ring)
		io_ring_buffers(f->ring, count, size, held);
}

/* (inline in the flusher's loop, where nearly every flush happens) */
static inline __attribute__((always_inline)) void flush_one(struct io *io)
{
	undirty(io);
	if (io->loopback) {
		loopback_deliver(io);
		return;
	}
	if (io->on_ring) {
		if (!io->closed)
			ring_flush(io);
		if (io->on_ring || io->closed)
			return;
	}
	if (io->closed || io->connecting || io->write_armed)
		return;
	if (io_write_some(io) && io->solo && !io->closed)
		ring_rejoin(io);
}

void io_flush(struct io *io)
{
	flush_one(io);
}

static void flush_dirty(struct io_flusher *f);

void io_flush_all(struct io_flusher *f)
{
	/* On the ring: flush, submit once, collect what completed (sends
	 * done at once, bytes that arrived meanwhile), and again while that
	 * made more to flush. Bounded: the rest waits for the next turn. */
	for (int round = 0;; round++) {
		flush_dirty(f);
		if (!f->ring)
			return;
		if (!io_ring_pending(f->ring)) {
			ring_later_check(f);
			return;
		}
		io_ring_submit(f->ring);
		f->depth++;
		f->ring_turn_work += ring_collect(f);
		f->depth--;
		if (round >= 8) {
			if (f->n_dirty > 0 || io_ring_pending(f->ring))
				event_active(f->ev, 0, 0);
			ring_later_check(f);
			return;
		}
	}
}

static void flush_dirty(struct io_flusher *f)
{
	while (f->n_dirty > 0) {
		struct io *io = f->dirty[f->n_dirty - 1];
		size_t before = io_out_len(io);
		flush_one(io);
		/* Here, outside every read callback, no caller holds the buffers. */
		/* (On the ring with a send in flight: when it has ended,
		 * ring_sent.) */
		if (io->trim_after_flush && !io->closed && !(io->on_ring && io->send_in_flight)) {
			io->trim_after_flush = false;
			io_trim(io);
		}
		/* The socket took a backlog above the low watermark at once, so
		 * the write callback that reports draining never runs: report it
		 * here (a peer paused for this backlog resumes). */
		if (before > io->ops->write_low && !io->closed && !io->write_armed && io_out_len(io) <= io->ops->write_low &&
		    io->ops->on_drain)
			io->ops->on_drain(io, io_owner(io));
	}
}

static bool io_setup(struct io *io, struct event_base *base, struct io_flusher *f, evutil_socket_t fd,
		     size_t read_high, const struct io_ops *ops)
{
	memset(io, 0, sizeof *io);
	io->fd = fd;
	io->flusher = f;
	io->read_high = read_high > UINT32_MAX ? UINT32_MAX : (uint32_t)read_high;
	io->ops = ops;
	/* Buffers come with the first byte in or out (io_in, io_out). */
	event_assign(&io->rev, base, fd, EV_READ | EV_PERSIST, read_cb, io);
	return true;
}

bool io_open(struct io *io, struct event_base *base, struct io_flusher *f, evutil_socket_t fd,
	     size_t read_high, const struct io_ops *ops)
{
	if (!io_setup(io, base, f, fd, read_high, ops))
		return false;
	/* On the ring if the worker has one (and the fd table has room). */
	if (f->ring && io_ring_attach(f->ring, fd, io))
		io->on_ring = true;
	io_update_reading(io);
	return true;
}

void io_open_loopback(struct io *io, struct io_flusher *f, size_t read_high, const struct io_ops *ops)
{
	memset(io, 0, sizeof *io);
	io->fd = -1;
	io->flusher = f;
	io->read_high = read_high > UINT32_MAX ? UINT32_MAX : (uint32_t)read_high;
	io->ops = ops;
	io->loopback = true;   /* no event: never armed (io_update_reading is not called) */
}

bool io_connect(struct io *io, struct event_base *base, struct io_flusher *f, const struct sockaddr *sa,
		socklen_t salen, size_t read_high, const struct io_ops *ops)
{
	evutil_socket_t fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	if (!io_setup(io, base, f, fd, read_high, ops)) {
		close(fd);
		return false;
	}
	if (connect(fd, sa, salen) < 0 && errno != EINPROGRESS) {
		int err = errno;
		io_close(io);
		errno = err;
		return false;
	}
	/* Completion (or failure) shows up as writability. */
	io->connecting = true;
	io_arm_write(io, true);
	return true;
}

void io_close(struct io *io)
{
	if (io->closed)
		return;
	io->closed = true;
	undirty(io);
	if (io->on_ring) {
		/* The socket closes when what is in flight has ended: no
		 * completion reaches this connection from here on (io_ring.c). */
		event_del(&io->rev);
		unsigned in_flight = (io->recv != RECV_OFF) + io->send_in_flight;
		io_ring_close(io->flusher->ring, io->fd, in_flight, io->recv == RECV_ON, io->send);
		/* Closed outside a socket callback (a timer, the janitor): the
		 * cancellations go at the end of this loop turn all the same. */
		if (io->flusher->depth == 0 && io_ring_pending(io->flusher->ring))
			event_active(io->flusher->ev, 0, 0);
		io->send = NULL;
		io->on_ring = false;
		io->recv = RECV_OFF;
		io->send_in_flight = false;
		io->write_armed = false;   /* wev is NULL: nothing to delete */
		io->fd = -1;
	}
	io_update_reading(io);
	io_arm_write(io, false);
	if (io->ssl) {
		/* On success the socket, the SSL and the output belong to a
		 * tls_closing from here on (fd -1, out NULL below). */
		if (io->tls_handshaking || io->tls_failed || !tls_close_begin(io))
			SSL_free(io->ssl);
		io->ssl = NULL;
	}
	if (io->fd >= 0)
		close(io->fd);
	io->fd = -1;
	if (io->wev)
		event_free(io->wev);
	io->wev = NULL;
	buf_free(io->in);
	buf_free(io->out);
	io->in = NULL;
	io->out = NULL;
}

struct buf *io_in(struct io *io)
{
	if (!io->in)
		io->in = buf_new(BUF_IN_FIRST);
	return io->in;
}

bool io_in_add(struct io *io, const void *data, size_t n)
{
	struct buf *in = io_in(io);
	return in && buf_add(in, data, n) == 0;
}

bool io_in_prepend(struct io *io, const void *data, size_t n)
{
	struct buf *in = io_in(io);
	return in && buf_prepend(in, data, n);
}

/* Writes to a closed connection land in a buffer that is thrown away; one
 * per worker serves them all, so callers need no NULL checks. */
static struct buf *discard_buffer(struct io *io)
{
	if (!io->flusher->discard)
		io->flusher->discard = buf_new(BUF_SMALL);
	else
		buf_drain(io->flusher->discard, buf_len(io->flusher->discard));
	return io->flusher->discard;
}

struct buf *io_out_mark(struct io *io)
{
	if (io->closed)
		return io->out ? io->out : discard_buffer(io);
	if (!io->out && !(io->out = buf_new(BUF_OUT_FIRST)))
		return discard_buffer(io);   /* out of memory: the bytes are lost, the connection times out */
	if (!make_dirty(io))
		return discard_buffer(io);   /* out of memory, as above */
	return io->out;
}

void io_trim(struct io *io)
{
	if (io->closed || io->dirty_slot)
		return;
	if (io->in && buf_len(io->in) == 0) {
		buf_free(io->in);
		io->in = NULL;
	}
	if (io->out && buf_len(io->out) == 0 && !io->write_armed) {
		buf_free(io->out);
		io->out = NULL;
	}
}

bool io_at_rest(const struct io *io)
{
	return io->paused && !io->closed && !io->ssl && !io->loopback && io->recv == RECV_OFF && !io->send_in_flight &&
	       !io->connecting && io_out_len(io) == 0;
}

size_t io_out_len_ring(const struct io *io)
{
	size_t n = io->out ? buf_len(io->out) : 0;
	if (io->send)
		n += io_ring_send_len(io->send);   /* in flight, or left by a partial send */
	return n;
}

void io_set_pause(struct io *io, unsigned reason, bool on)
{
	unsigned was = io->paused;
	io->paused = on ? was | reason : was & ~reason;
	if (!io->paused != !was)
		io_update_reading(io);
}


void io_set_read_high(struct io *io, size_t read_high)
{
	io->read_high = read_high > UINT32_MAX ? UINT32_MAX : (uint32_t)read_high;
	io_update_reading(io);
}
