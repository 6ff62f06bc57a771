/* SPDX-License-Identifier: MIT */
/*
 * io_ring: the io_uring engine under io.c (doc/io-engine.md). What a loop
 * turn costs the kernel here: one io_uring_enter that submits every send
 * and receive queued during the turn and runs the completions waiting, and
 * the epoll_wait libevent makes anyway. A socket's receive is armed once
 * (multishot) and lands in a provided buffer only when bytes arrive, so an
 * idle connection holds no buffer; the bytes are copied into the owner's
 * input and the buffer goes back to the kernel in the same pass.
 *
 * No completion may reach freed memory: a completion names its socket by
 * fd (receives) or its send record (sends), never by the owner. The fd
 * table maps a socket to its owner while it lives; when the owner closes
 * it with operations in flight, the entry counts them instead and the
 * socket stays open (so its number is not reused) until the last one ends.
 */
#include "io_ring.h"

#include "buf.h"

#include "list.h"

#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <unistd.h>

/* 256 entries: a loop turn rarely queues more; a full queue is submitted
 * on the spot. Completions get four times as much room (a receive may
 * report several times per turn). */
#define RING_ENTRIES 256u
/* The provided buffers: up to 64 of 16 KiB, 16 to start with. The kernel
 * takes them in ring order, so every buffer in the ring is touched sooner
 * or later: a small message touches one page of its buffer, a big result
 * streams in 16 KiB steps. A receive that finds none (more arrivals in one
 * pass than buffers) ends with ENOBUFS and is armed again; that is when 16
 * more join the ring, so a quiet worker keeps 16 pages resident (64 KiB,
 * 6 bytes per client at 10,000 idle clients), a busy one at most 1 MiB. */
#define BUF_COUNT 64u
#define BUF_START 16u
#define BUF_STEP 16u
#define BUF_SIZE 16384u
#define BUF_GROUP 0
/* Send records kept for reuse (a send per reply would otherwise cost two
 * allocations and two frees). */
#define SPARE_SENDS 64

/* user_data: the kind in the low two bits; the fd above them (receive) or
 * the send record (16-byte aligned, from malloc). */
enum op_kind { OP_RECV = 1, OP_SEND = 2, OP_CANCEL = 3 };
#define OP_KIND(u) ((enum op_kind)((u) & 3))

struct io_ring_send {
	struct list_node node;    /* in io_ring.sends, or in io_ring.spare */
	/* The bytes in flight, then what is left: copied from the owner's
	 * output, which writers may go on filling (and moving) meanwhile. */
	struct buf *buf;
	void *conn;               /* NULL: the owner closed (the socket waits for this) */
	int fd;
	bool in_flight;
};
_Static_assert(_Alignof(max_align_t) >= 4, "send records carry the kind in two low bits");

struct io_ring {
	struct io_uring ring;
	int efd;                   /* the kernel signals it when completions wait (io_ring_wake_fd) */
	/* The collection under way (io_ring_next): its round, whether the
	 * last enter for the kernel's flag brought nothing, the completions
	 * of this round and of the whole collection. */
	bool collecting;
	bool fruitless;
	unsigned round, seen, total;
	bool later;                /* collect again once the loop has polled (io_ring_take_later) */
	bool taskrun_flag;         /* IORING_SQ_TASKRUN tells when completions wait to be run */
	bool test_stale_flag;      /* PGCAT_TEST_STALE_TASKRUN: leave the flag set after each pass */
	/* fd -> owner (even), or (ops in flight << 1) | 1 for a closed owner's
	 * socket, or 0 */
	uintptr_t *fds;
	size_t n_fds;
	struct io_uring_buf_ring *br;
	size_t br_bytes;
	uint8_t *bufs;
	unsigned held;             /* buffers taken out and not yet given back (SHOW MEM) */
	unsigned active;           /* buffers given to the ring so far (BUF_START..BUF_COUNT) */
	unsigned to_return;        /* given back since the last advance of the buffer ring */
	struct list_node sends;    /* every send record in use, freed at the end if still here */
	struct list_node spare;
	unsigned n_spare;
};

static uint64_t recv_data(int fd)
{
	return ((uint64_t)(unsigned)fd << 2) | OP_RECV;
}

/* Collect again on the loop's next turn, after it has polled its other
 * events: the owner learns it from io_ring_take_later. */
static void collect_later(struct io_ring *r)
{
	r->later = true;
}

/* Multishot receives into a buffer ring came with 6.0. */
static bool kernel_recent(char *why, size_t whylen)
{
	struct utsname u;
	int major = 0, minor = 0;
	if (uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 && major >= 6)
		return true;
	snprintf(why, whylen, "kernel %s is older than 6.0 (no multishot receive)", u.release);
	return false;
}

struct io_ring *io_ring_new(char *why, size_t whylen)
{
	/* For tests: a kernel that refuses io_uring (seccomp, kernel.io_uring_disabled). */
	if (getenv("PGCAT_TEST_DENY_IO_URING")) {
		snprintf(why, whylen, "io_uring_queue_init: %s (PGCAT_TEST_DENY_IO_URING is set)", strerror(EPERM));
		return NULL;
	}
	if (!kernel_recent(why, whylen))
		return NULL;
	struct io_ring *r = calloc(1, sizeof *r);
	if (!r) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	r->efd = -1;
	list_init(&r->sends);
	list_init(&r->spare);
	/* Completions are run in our own io_uring_enter calls (DEFER_TASKRUN),
	 * not by interrupting epoll_wait; 6.1 has it, an older kernel gets
	 * the plain ring. */
	struct io_uring_params p;
	memset(&p, 0, sizeof p);
	p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
		  IORING_SETUP_TASKRUN_FLAG;
	p.cq_entries = RING_ENTRIES * 4;
	int rc = io_uring_queue_init_params(RING_ENTRIES, &r->ring, &p);
	if (rc == -EINVAL) {
		memset(&p, 0, sizeof p);
		p.flags = IORING_SETUP_CQSIZE;
		p.cq_entries = RING_ENTRIES * 4;
		rc = io_uring_queue_init_params(RING_ENTRIES, &r->ring, &p);
	} else if (rc == 0) {
		r->taskrun_flag = true;
	}
	if (rc < 0) {
		snprintf(why, whylen, "io_uring_queue_init: %s", strerror(-rc));
		free(r);
		return NULL;
	}
	/* The buffer ring and the buffers: mapped, so only pages that
	 * receive bytes become resident. */
	r->br_bytes = BUF_COUNT * sizeof(struct io_uring_buf);
	void *br = mmap(NULL, r->br_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *bufs = mmap(NULL, (size_t)BUF_COUNT * BUF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (br == MAP_FAILED || bufs == MAP_FAILED) {
		snprintf(why, whylen, "mmap: %s", strerror(errno));
		goto fail_maps;
	}
	r->br = br;
	r->bufs = bufs;
	struct io_uring_buf_reg reg;
	memset(&reg, 0, sizeof reg);
	reg.ring_addr = (uint64_t)(uintptr_t)br;
	reg.ring_entries = BUF_COUNT;
	reg.bgid = BUF_GROUP;
	rc = io_uring_register_buf_ring(&r->ring, &reg, 0);
	if (rc < 0) {
		snprintf(why, whylen, "io_uring_register_buf_ring: %s", strerror(-rc));
		goto fail_maps;
	}
	io_uring_buf_ring_init(r->br);
	for (unsigned i = 0; i < BUF_START; i++)
		io_uring_buf_ring_add(r->br, r->bufs + (size_t)i * BUF_SIZE, BUF_SIZE, (unsigned short)i,
				      io_uring_buf_ring_mask(BUF_COUNT), (int)i);
	io_uring_buf_ring_advance(r->br, BUF_START);
	r->active = BUF_START;
	r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->efd < 0 || (rc = io_uring_register_eventfd(&r->ring, r->efd)) < 0) {
		snprintf(why, whylen, "eventfd: %s", strerror(r->efd < 0 ? errno : -rc));
		goto fail_maps;
	}
	/* For tests: the kernel's task-work flag left set with nothing to run
	 * (io_ring_next), after every pass. */
	r->test_stale_flag = r->taskrun_flag && getenv("PGCAT_TEST_STALE_TASKRUN") != NULL;
	return r;
fail_maps:
	if (r->efd >= 0)
		close(r->efd);
	io_uring_queue_exit(&r->ring);
	if (br != MAP_FAILED)
		munmap(br, r->br_bytes);
	if (bufs != MAP_FAILED)
		munmap(bufs, (size_t)BUF_COUNT * BUF_SIZE);
	free(r);
	return NULL;
}

void io_ring_free(struct io_ring *r)
{
	if (!r)
		return;
	/* What was queued last (a Terminate to a server) goes out; then
	 * exiting the ring cancels what is in flight, and the send records
	 * are freed here: no completion is reaped any more (the owners are
	 * gone). */
	io_ring_submit(r);
	io_uring_queue_exit(&r->ring);
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &r->sends) {
		struct io_ring_send *s = LIST_OWNER(pos, struct io_ring_send, node);
		list_del(&s->node);
		buf_free(s->buf);
		free(s);
	}
	LIST_FOREACH_SAFE(pos, tmp, &r->spare) {
		struct io_ring_send *s = LIST_OWNER(pos, struct io_ring_send, node);
		list_del(&s->node);
		buf_free(s->buf);
		free(s);
	}
	close(r->efd);
	for (size_t fd = 0; fd < r->n_fds; fd++)
		if (r->fds[fd] & 1)
			close((int)fd);
	free(r->fds);
	munmap(r->br, r->br_bytes);
	munmap(r->bufs, (size_t)BUF_COUNT * BUF_SIZE);
	free(r);
}

bool io_ring_attach(struct io_ring *r, int fd, void *conn)
{
	if (fd < 0)
		return false;
	if ((size_t)fd >= r->n_fds) {
		size_t n = r->n_fds ? r->n_fds : 1024;
		while (n <= (size_t)fd)
			n *= 2;
		uintptr_t *t = realloc(r->fds, n * sizeof *t);
		if (!t)
			return false;
		memset(t + r->n_fds, 0, (n - r->n_fds) * sizeof *t);
		r->fds = t;
		r->n_fds = n;
	}
	r->fds[fd] = (uintptr_t)conn;
	return true;
}

void io_ring_detach(struct io_ring *r, int fd)
{
	if (fd >= 0 && (size_t)fd < r->n_fds)
		r->fds[fd] = 0;
}

/* One operation of a closed owner's socket ended; the last closes it. */
static void zombie_done(struct io_ring *r, int fd)
{
	if (fd < 0 || (size_t)fd >= r->n_fds || !(r->fds[fd] & 1))
		return;
	uintptr_t left = r->fds[fd] >> 1;
	if (left <= 1) {
		r->fds[fd] = 0;
		close(fd);
	} else {
		r->fds[fd] = ((left - 1) << 1) | 1;
	}
}

/* A submission queue entry; when the queue is full, what it holds goes to
 * the kernel first. */
static struct io_uring_sqe *get_sqe(struct io_ring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
	if (!sqe) {
		io_ring_submit(r);
		sqe = io_uring_get_sqe(&r->ring);
		/* That submit kept the eventfd quiet, and its caller may not
		 * collect what it completed: collect it next turn. */
		collect_later(r);
	}
	return sqe;
}

static bool queue_cancel(struct io_ring *r, uint64_t target)
{
	struct io_uring_sqe *sqe = get_sqe(r);
	if (!sqe)
		return false;
	io_uring_prep_cancel64(sqe, target, 0);
	io_uring_sqe_set_data64(sqe, OP_CANCEL);
	return true;
}

void io_ring_close(struct io_ring *r, int fd, unsigned in_flight, bool cancel_recv, struct io_ring_send *s)
{
	if (s) {
		s->conn = NULL;
		/* A send already queued goes first (the queue runs in order):
		 * what the owner flushed before closing, an error message, is
		 * tried once, as on the epoll engine; one that waits for room
		 * in the socket is given up. */
		if (s->in_flight)
			(void)queue_cancel(r, (uint64_t)(uintptr_t)s | OP_SEND);
		else
			io_ring_send_free(r, s);
	}
	if (cancel_recv)
		(void)queue_cancel(r, recv_data(fd));
	if (in_flight == 0 || fd < 0 || (size_t)fd >= r->n_fds) {
		io_ring_detach(r, fd);
		if (fd >= 0)
			close(fd);
		return;
	}
	r->fds[fd] = ((uintptr_t)in_flight << 1) | 1;
}

bool io_ring_recv(struct io_ring *r, int fd)
{
	struct io_uring_sqe *sqe = get_sqe(r);
	if (!sqe)
		return false;
	io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = BUF_GROUP;
	io_uring_sqe_set_data64(sqe, recv_data(fd));
	return true;
}

bool io_ring_recv_cancel(struct io_ring *r, int fd)
{
	return queue_cancel(r, recv_data(fd));
}

struct io_ring_send *io_ring_send_new(struct io_ring *r, int fd, void *conn)
{
	struct io_ring_send *s;
	struct list_node *n = list_first(&r->spare);
	if (n) {
		list_del(n);
		r->n_spare--;
		s = LIST_OWNER(n, struct io_ring_send, node);
	} else {
		s = calloc(1, sizeof *s);
		if (!s)
			return NULL;
		s->buf = buf_new(BUF_OUT_FIRST);
		if (!s->buf) {
			free(s);
			return NULL;
		}
	}
	s->fd = fd;
	s->conn = conn;
	s->in_flight = false;
	list_add_tail(&r->sends, &s->node);
	return s;
}

void io_ring_send_free(struct io_ring *r, struct io_ring_send *s)
{
	if (!s)
		return;
	list_del(&s->node);
	buf_drain(s->buf, buf_len(s->buf));
	if (r->n_spare < SPARE_SENDS) {
		list_add_head(&r->spare, &s->node);
		r->n_spare++;
		return;
	}
	buf_free(s->buf);
	free(s);
}

size_t io_ring_send_len(const struct io_ring_send *s)
{
	return buf_len(s->buf);
}

bool io_ring_send_start(struct io_ring *r, struct io_ring_send *s, struct buf *more)
{
	/* Nothing appends to s->buf while the kernel reads it: the bytes do
	 * not move under it. */
	if (more && buf_len(more) > 0 && buf_add_buf(s->buf, more) != 0)
		return false;
	if (buf_len(s->buf) == 0)
		return false;
	struct io_uring_sqe *sqe = get_sqe(r);
	if (!sqe)
		return false;
	io_uring_prep_send(sqe, s->fd, buf_head(s->buf), buf_len(s->buf), MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)s | OP_SEND);
	s->in_flight = true;
	return true;
}

bool io_ring_pending(const struct io_ring *r)
{
	return io_uring_sq_ready(&r->ring) > 0;
}

/* Our own io_uring_enter posts completions, and the kernel would signal
 * the eventfd for them: a wake for what this very pass collects. Off while
 * we are in the kernel; what arrives then is seen after (io_ring_next). */
static void quiet(struct io_ring *r, bool on)
{
	(void)io_uring_cq_eventfd_toggle(&r->ring, !on);
}

void io_ring_submit(struct io_ring *r)
{
	if (io_uring_sq_ready(&r->ring) == 0)
		return;
	quiet(r, true);
	int rc;
	do
		rc = io_uring_submit_and_get_events(&r->ring);
	while (rc == -EINTR);
	quiet(r, false);
	/* -EBUSY/-EAGAIN: the completion queue is full; the entries stay
	 * queued and go with the next submit, after a reap. */
}

/* Into the ring at the next advance (the end of this pass). */
static void ring_add(struct io_ring *r, unsigned bid)
{
	io_uring_buf_ring_add(r->br, r->bufs + (size_t)bid * BUF_SIZE, BUF_SIZE, (unsigned short)bid,
			      io_uring_buf_ring_mask(BUF_COUNT), (int)r->to_return);
	r->to_return++;
}

static void give_back(struct io_ring *r, unsigned bid)
{
	ring_add(r, bid);
	r->held--;
}

/* A receive found no buffer: more join the ring, if there are more. */
static void grow(struct io_ring *r)
{
	for (unsigned i = 0; i < BUF_STEP && r->active < BUF_COUNT; i++)
		ring_add(r, r->active++);
}

/* A receive's completion: true with ev filled for its owner; false when
 * it has none (its socket closed meanwhile). */
static bool recv_done(struct io_ring *r, const struct io_uring_cqe *cqe, struct io_ring_event *ev)
{
	int fd = (int)(cqe->user_data >> 2);
	bool more = (cqe->flags & IORING_CQE_F_MORE) != 0;
	const uint8_t *data = NULL;
	unsigned bid = 0;
	bool has_buf = (cqe->flags & IORING_CQE_F_BUFFER) != 0;
	if (has_buf) {
		bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
		r->held++;
		if (bid >= r->active) {
			r->held--;
			has_buf = false;
		} else {
			data = r->bufs + (size_t)bid * BUF_SIZE;
		}
	}
	if (cqe->res == -ENOBUFS)
		grow(r);
	/* Given back at once: the kernel sees it only when the buffer ring
	 * advances, at the end of this round (io_ring_next), after the owner
	 * has taken the bytes; SHOW MEM counts it as held no longer. */
	if (has_buf)
		give_back(r, bid);
	uintptr_t e = fd >= 0 && (size_t)fd < r->n_fds ? r->fds[fd] : 0;
	if (e && !(e & 1)) {
		int res = cqe->res;
		if (res > 0 && !data)
			res = -EIO;   /* bytes without a buffer: cannot happen */
		*ev = (struct io_ring_event){ .kind = IO_RING_RECEIVED, .conn = (void *)e, .res = res, .data = data,
					      .more = more };
		return true;
	}
	if (!more)
		zombie_done(r, fd);
	return false;
}

/* A send's completion: as recv_done. */
static bool send_done(struct io_ring *r, const struct io_uring_cqe *cqe, struct io_ring_event *ev)
{
	struct io_ring_send *s = (struct io_ring_send *)(uintptr_t)(cqe->user_data & ~(uint64_t)3);
	s->in_flight = false;
	if (!s->conn) {
		int fd = s->fd;
		io_ring_send_free(r, s);
		zombie_done(r, fd);
		return false;
	}
	if (cqe->res > 0) {
		buf_drain(s->buf, (size_t)cqe->res);
		buf_settle(s->buf);
	}
	*ev = (struct io_ring_event){ .kind = IO_RING_SENT, .conn = s->conn, .res = cqe->res, .send = s };
	return true;
}

/* Completions the kernel holds that only an io_uring_enter of ours brings
 * to the queue: task work (DEFER_TASKRUN runs it in our calls only) and
 * completions that overflowed a full queue. */
static bool kernel_holds_completions(const struct io_ring *r)
{
	unsigned f = IO_URING_READ_ONCE(*r->ring.sq.kflags);
	return (f & IORING_SQ_CQ_OVERFLOW) || (r->taskrun_flag && (f & IORING_SQ_TASKRUN));
}

/* The next completion, copied out, the queue advanced past it: its owner
 * may submit (when the queue is full), which may post more behind it. */
static bool next_cqe(struct io_ring *r, struct io_uring_cqe *out)
{
	unsigned head;
	struct io_uring_cqe *cqe;
	io_uring_for_each_cqe(&r->ring, head, cqe) {
		*out = *cqe;
		io_uring_cq_advance(&r->ring, 1);
		return true;
	}
	return false;
}

bool io_ring_quiet(const struct io_ring *r)
{
	return io_uring_sq_ready(&r->ring) == 0 && io_uring_cq_ready(&r->ring) == 0 && !kernel_holds_completions(r);
}

/* The flag IORING_SQ_TASKRUN may stay set with nothing to run: the kernel
 * sets it when work joins an empty list and clears it when a run starts,
 * so work that joins while a run is under way, and is run by it, leaves it
 * set until the next run. An enter that brings nothing is therefore not
 * proof of more to come. With the eventfd quiet during our enter, though,
 * work queued meanwhile also sets the flag without a signal: so a fruitless
 * enter is followed by one with the eventfd on, and if that brings nothing
 * either, the flag is taken as stale (work from then on signals). */
static void test_leave_flag_set(struct io_ring *r)
{
	if (r->test_stale_flag)
		__atomic_fetch_or(r->ring.sq.kflags, IORING_SQ_TASKRUN, __ATOMIC_RELEASE);
}

/* A round of the collection: the kernel entered first when it holds
 * completions only an enter of ours brings to the queue. */
static void round_start(struct io_ring *r)
{
	if (kernel_holds_completions(r)) {
		quiet(r, !r->fruitless);
		/* (with what an owner queued meanwhile: the cancel of a receive
		 * whose owner wants no more, io.c) */
		if (io_uring_sq_ready(&r->ring) > 0)
			(void)io_uring_submit_and_get_events(&r->ring);
		else
			(void)io_uring_get_events(&r->ring);
		quiet(r, false);
	}
	r->seen = 0;
}

static void collection_end(struct io_ring *r, bool busy)
{
	r->collecting = false;
	if (busy)
		collect_later(r);   /* still busy: the next loop turn goes on */
	test_leave_flag_set(r);
}

bool io_ring_next(struct io_ring *r, struct io_ring_event *ev)
{
	if (!r->collecting) {
		r->collecting = true;
		r->fruitless = false;
		r->round = 0;
		r->total = 0;
		round_start(r);
	}
	/* Bounded: a peer that keeps the ring busy yields to the loop. */
	for (;;) {
		struct io_uring_cqe c;
		while (next_cqe(r, &c)) {
			r->seen++;
			switch (OP_KIND(c.user_data)) {
			case OP_RECV:
				if (recv_done(r, &c, ev))
					return true;
				break;
			case OP_SEND:
				if (send_done(r, &c, ev))
					return true;
				break;
			case OP_CANCEL:
				break;
			}
		}
		if (r->to_return) {
			io_uring_buf_ring_advance(r->br, r->to_return);
			r->to_return = 0;
		}
		r->total += r->seen;
		if (r->seen == 0) {
			if (!kernel_holds_completions(r) || r->fruitless) {
				collection_end(r, false);
				return false;
			}
			r->fruitless = true;
		} else {
			r->fruitless = false;
		}
		if (++r->round >= 16) {
			collection_end(r, true);
			return false;
		}
		round_start(r);
	}
}

unsigned io_ring_collected(const struct io_ring *r)
{
	return r->total;
}

bool io_ring_take_later(struct io_ring *r)
{
	bool later = r->later;
	r->later = false;
	return later;
}

int io_ring_wake_fd(const struct io_ring *r)
{
	return r->efd;
}

void io_ring_buffers(const struct io_ring *r, unsigned *count, unsigned *size, unsigned *held)
{
	*count = r->active;
	*size = BUF_SIZE;
	*held = r->held;
}
