/* SPDX-License-Identifier: MIT */
/*
 * handover: -R, a worker's sockets passed to its successor.
 *
 * Each worker listens on an abstract Unix name, "pgcat.handover.PORT.N"
 * (a SOCK_SEQPACKET socket: one record per message, sockets passed
 * beside it). Only a process of pgcat's own OS user (or root) is
 * answered, checked with SO_PEERCRED on both ends: a client's socket is
 * trusted as logged in by whoever receives it.
 *
 * The records (the first byte says which):
 *   'H' new -> old: u32 version, u8 'T' (take over) or 'D' (drain: no
 *       successor for this worker number, shut down as for SIGTERM), or
 *       'X' and a CancelRequest (handover_link.h) for a client still here
 *   'L' old -> new: u32 version, u32 the old instance's workers, and its
 *       TCP listening sockets beside it; the old worker stops accepting
 *   'C' old -> new: one client (client_move.h), its socket beside it
 *   'S' old -> new: one idle server connection (server_move.h), its socket
 *   'P' old -> new: a session-mode client with its server, both sockets
 *   'B' old -> new: a ban of the instance (worker 0's link only)
 *   'K' old -> new: cancel-key slots in use, kept for the keys that come
 *   'N' old -> new: how many connections of a server set are to come
 *       (server_move.h: the new process's clients wait for them)
 *   'w', 'W', 'M', 'g' old -> new: the clients of a transaction-mode pool
 *       that LISTEN, with the listening connections (notify_move.h)
 *   'E' old -> new: u32 clients moved, u32 clients left to drain; the end
 * The handshake (H, L) is synchronous on both sides with a timeout; the
 * clients come on the new worker's loop. The old worker looks for clients
 * that can move every HANDOVER_TICK_MS until none is left that could, or
 * shutdown_timeout ends; then it shuts down as for SIGTERM, and the rest
 * (a transaction that did not end, TLS, the console) drains.
 */
#include "handover.h"
#include "handover_link.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "bans.h"
#include "bytes_in.h"
#include "cancel.h"
#include "client.h"
#include "client_move.h"
#include "config.h"
#include "context.h"
#include "link.h"
#include "log.h"
#include "notify_move.h"
#include "pool.h"
#include "pktbuf.h"
#include "pool_types.h"
#include "proto.h"
#include "server.h"
#include "server_move.h"
#include "shm.h"

#define HANDOVER_TICK_MS 20
/* Clients that stay (they drain) may keep the servers busy: how long the
 * handover still waits for those on their way back to idle. */
#define HANDOVER_SETTLE_US 1000000u
/* The handshake's and each record's send wait at most this long: a
 * successor that stops reading ends the handover (the rest drains). */
#define HANDOVER_IO_TIMEOUT_S 5

struct handover {
	int listen_fd;             /* the abstract name, while this worker answers on it */
	struct event *listen_ev;
	int cancel_fd;             /* old side, from the handover on: cancel requests (handover_link.h) */
	pid_t peer_pid;            /* old side: the new process (SO_PEERCRED) */
	uint64_t link_eof_us;      /* old side: when the new side closed the link (0: it did not) */
	struct event *deadline;    /* new side: the old one has this long to finish */
	struct event *cancel_ev;
	int link_fd;               /* the link to the successor or predecessor; -1: none */
	struct event *link_ev;     /* new side: the records */
	struct event *tick;        /* old side: clients that can move */
	uint64_t deadline_us;
	unsigned moved, refused, servers_moved;
	uint64_t settling_since_us; /* old side: only servers on their way to idle left since */
	bool giving;               /* old side: handing over */
};

static void set_timeouts(int fd)
{
	struct timeval tv = { HANDOVER_IO_TIMEOUT_S, 0 };
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static struct handover *state(struct worker *w)
{
	if (!w->handover) {
		w->handover = calloc(1, sizeof *w->handover);
		if (w->handover)
			w->handover->listen_fd = w->handover->link_fd = w->handover->cancel_fd = -1;
	}
	return w->handover;
}

/* One record; its sockets in fds (the rest closed). -1: error or
 * nothing now (errno EAGAIN), 0: the end. */
static ssize_t recv_record(int fd, uint8_t *buf, size_t cap, int *fds, size_t *n_fds, int flags)
{
	struct iovec iov = { buf, cap };
	union {
		char buf[CMSG_SPACE(sizeof(int) * HANDOVER_MAX_LISTENERS)];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf };
	ssize_t r;
	do
		r = recvmsg(fd, &mh, flags | MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	size_t got = 0;
	if (r >= 0) {
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int tmp[HANDOVER_MAX_LISTENERS];
			if (k > HANDOVER_MAX_LISTENERS)
				k = HANDOVER_MAX_LISTENERS;
			memcpy(tmp, CMSG_DATA(cm), k * sizeof(int));
			for (size_t i = 0; i < k; i++) {
				if (got < *n_fds)
					fds[got++] = tmp[i];
				else
					close(tmp[i]);
			}
		}
		if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
			for (size_t i = 0; i < got; i++)
				close(fds[i]);
			got = 0;
			r = -1;
			errno = EMSGSIZE;
		}
	}
	*n_fds = got;
	return r;
}

/* ---- the old side ---- */

static void close_link(struct handover *h)
{
	if (h->link_ev)
		event_free(h->link_ev);
	h->link_ev = NULL;
	if (h->link_fd >= 0)
		close(h->link_fd);
	h->link_fd = -1;
}

static void stop_answering(struct handover *h)
{
	if (h->listen_ev)
		event_free(h->listen_ev);
	h->listen_ev = NULL;
	if (h->listen_fd >= 0)
		close(h->listen_fd);
	h->listen_fd = -1;
}

/* The fields of /proc/PID/stat after the process's name (its state
 * first), in buf; NULL: no such process (or a line not understood). */
static const char *proc_stat(pid_t pid, char *buf, size_t size)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t n = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *st = strrchr(buf, ')');   /* (the name may hold spaces) */
	return st && st[1] == ' ' ? st + 2 : NULL;
}

/* The parent of pid (the new process's supervisor, for its worker);
 * 0: not known. */
static pid_t parent_of(pid_t pid)
{
	char buf[256];
	const char *st = proc_stat(pid, buf, sizeof buf);
	int ppid = 0;
	if (!st || sscanf(st, "%*c %d", &ppid) != 1 || ppid <= 1)
		return 0;
	return (pid_t)ppid;
}

/* Which process systemd is to follow once this one exits (supervisor.c). */
static void publish_successor(struct worker *w, pid_t pid)
{
	if (w->shm)
		atomic_store_explicit(&w->shm->h->workers[w->id].successor_pid, (int32_t)pid, memory_order_relaxed);
}

/* No such process, or one that has exited and waits to be reaped. */
static bool process_gone(pid_t pid)
{
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return true;
	char buf[256];
	const char *st = proc_stat(pid, buf, sizeof buf);
	return !st || st[0] == 'Z' || st[0] == 'X';
}

/* Clients and servers held still for a move that did not happen read
 * again. */
static void release_held(struct worker *w)
{
	struct list_node *heads[] = { &w->clients_idle, &w->clients_active, &w->clients_login };
	for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
		struct list_node *pos, *tmp;
		LIST_FOREACH_SAFE(pos, tmp, heads[i]) {
			struct client *c = LIST_OWNER(pos, struct client, node);
			if (io_suspended(&c->io) != w->suspended && !c->is_admin)
				io_suspend(&c->io, w->suspended);
		}
	}
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = p->targets[i];
			struct list_node *lists[] = { &sp->idle, &sp->active, &sp->other, &sp->opening };
			for (size_t k = 0; k < sizeof lists / sizeof *lists; k++) {
				struct list_node *sn, *st;
				LIST_FOREACH_SAFE(sn, st, lists[k])
					server_move_abandoned(LIST_OWNER(sn, struct server, node));
			}
			sp->n_promised_out = 0;
		}
	}
	notify_move_abandon(w);
}

/* The handover ends: what did not move drains (a shutdown as for
 * SIGTERM, shutdown_timeout from now). Unless the link failed before
 * (failed): the new process is gone, this one takes its listeners back and
 * goes on serving. */
static void give_end(struct worker *w, const char *why, bool failed)
{
	struct handover *h = w->handover;
	/* The listeners come back only when the new process is really gone:
	 * one that is alive but slow serves them, and this one drains. Nor
	 * while this process is being shut down anyway. */
	if (failed && (w->shutting_down || (h->peer_pid > 0 && !process_gone(h->peer_pid))))
		failed = false;
	if (h->tick)
		event_del(h->tick);
	h->giving = false;
	w->handing_over = false;
	w->on_client_between_requests = NULL;
	/* The name is the successor's from now on (it binds it at the 'E'). */
	if (!failed)
		stop_answering(h);
	unsigned left = (unsigned)w->n_clients;
	if (h->link_fd >= 0 && !failed) {
		uint8_t rec[9] = { 'E' };
		proto_put_u32(rec + 1, h->moved);
		proto_put_u32(rec + 5, left);
		(void)handover_send(h->link_fd, rec, sizeof rec, NULL, 0);
	}
	close_link(h);
	char summary[256];
	if (failed)
		snprintf(summary, sizeof summary, "%u clients and %u server connections had moved when %s; this pgcat "
			 "takes its listeners back and goes on serving", h->moved, h->servers_moved, why);
	else if (left)
		snprintf(summary, sizeof summary, "%u clients moved to the new process, %u left to drain, %u server "
			 "connections moved: %s", h->moved, left, h->servers_moved, why);
	else
		snprintf(summary, sizeof summary, "%u clients moved to the new process, %u server connections moved: %s",
			 h->moved, h->servers_moved, why);
	if (left || failed)
		log_warning("handover: %s", summary);
	else
		log_info("handover: %s", summary);
	if (w->on_handover_end)
		w->on_handover_end(w, summary);
	release_held(w);
	if (failed) {
		struct list_node *cl[] = { &w->clients_idle, &w->clients_active, &w->clients_login };
		for (size_t i = 0; i < sizeof cl / sizeof *cl; i++) {
			struct list_node *pos, *tmp;
			LIST_FOREACH_SAFE(pos, tmp, cl[i])
				LIST_OWNER(pos, struct client, node)->move_refused = false;
		}
		h->moved = h->servers_moved = h->refused = 0;
		publish_successor(w, 0);
		w->cmds->resume_listening(w);
		union sigval v = { .sival_int = SHM_SIGVAL_HANDOVER_UNDONE };
		if (sigqueue(getppid(), SIGTERM, v) != 0)
			log_warning("handover: cannot tell the supervisor: %s", strerror(errno));
		return;
	}
	w->cmds->stop_listening(w);
	w->cmds->begin_shutdown(w);
}

/* The new process closed the link before the end (it died, or failed to
 * start): seen as the link's end of file on the old side. */
static void give_link_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	struct worker *w = arg;
	worker_update_clock(w);
	uint8_t b;
	ssize_t r = recv((int)fd, &b, 1, MSG_DONTWAIT);
	if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
		return;   /* (the new side sends nothing on it: only its end counts) */
	struct handover *h = w->handover;
	if (!h || !h->giving)
		return;
	/* A process's sockets close a moment before it is gone: the next
	 * looks decide (give_tick). */
	event_del(h->link_ev);
	h->link_eof_us = w->now_us;
	if (h->tick)
		event_active(h->tick, EV_TIMEOUT, 0);
}

/* Tell the successor how many connections of each server set are still
 * to come: all of them at the start, fewer when some closed here since.
 * false: the link failed. */
static bool promise(struct worker *w, bool first)
{
	struct handover *h = w->handover;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = p->targets[i];
			int now = server_move_promisable(sp);
			int delta = first ? now : now < sp->n_promised_out ? now - sp->n_promised_out : 0;
			if (!delta)
				continue;
			uint8_t rec[1024];
			struct pktbuf pb;
			pktbuf_init(&pb, rec, sizeof rec);
			pktbuf_put_u8(&pb, 'N');
			server_move_promise_write(sp, delta, &pb);
			if (pb.failed)
				continue;   /* (names too long to promise: its clients may log in anew) */
			if (!handover_send(h->link_fd, pb.data, pb.len, NULL, 0))
				return false;
			sp->n_promised_out += delta;
		}
	}
	return true;
}

/* A connection of sp goes: one promise kept. */
static void promise_kept(struct srvpool *sp)
{
	if (sp->n_promised_out > 0)
		sp->n_promised_out--;
}

/* Send c to the successor, with its server in session mode (a record
 * 'P': u32 the client's part's length, the client's part, the server's;
 * both sockets beside it); false: the link failed (c stays here). */
static bool give_client(struct worker *w, struct client *c)
{
	struct handover *h = w->handover;
	static uint8_t rec[HANDOVER_RECORD_MAX];   /* (one process, one thread: not reentered) */
	struct server *s = c->end.server;
	if (s && !server_move_linked_ready(s)) {
		/* A later look; unless the server reads again (it is not
		 * movable after all): the client too, then. */
		if (!io_suspended(&s->io))
			io_suspend(&c->io, w->suspended);
		return true;
	}
	struct pktbuf pb;
	pktbuf_init(&pb, rec, sizeof rec);
	pktbuf_put_u8(&pb, s ? 'P' : 'C');
	if (s)
		pktbuf_put_u32(&pb, 0);   /* the client's part's length, below */
	bool ok = client_move_write(c, &pb);
	size_t client_end = pb.len;
	if (ok && s) {
		proto_put_u32(pb.data + 1, (uint32_t)(client_end - 5));
		ok = server_move_write(s, &pb);
	}
	if (!ok) {
		/* A client whose state does not fit a record drains: marked, so
		 * that it is not looked at again (and reads again). */
		h->refused++;
		c->move_refused = true;
		io_suspend(&c->io, w->suspended);
		if (s)
			server_move_abandoned(s);
		return true;
	}
	int fds[2] = { c->io.fd, s ? s->io.fd : -1 };
	if (!handover_send(h->link_fd, pb.data, pb.len, fds, s ? 2 : 1)) {
		log_error("handover: sending a client to the new process failed: %s", strerror(errno));
		return false;
	}
	h->moved++;
	if (s) {
		(void)link_detach(s);
		promise_kept(s->sp);
		h->servers_moved++;
		s->moved = true;
		server_close(s, NULL);
	}
	c->moved = true;
	client_close(c, NULL, "moved to the new process");
	return true;
}

/* Send s to the successor; false: the link failed (s stays here). */
static bool give_server(struct worker *w, struct server *s)
{
	struct handover *h = w->handover;
	static uint8_t rec[HANDOVER_RECORD_MAX];
	struct pktbuf pb;
	pktbuf_init(&pb, rec, sizeof rec);
	pktbuf_put_u8(&pb, 'S');
	if (!server_move_write(s, &pb))
		return true;   /* (it stays, and closes with this process) */
	int fd = s->io.fd;
	if (!handover_send(h->link_fd, pb.data, pb.len, &fd, 1)) {
		log_error("handover: sending a server connection to the new process failed: %s", strerror(errno));
		return false;
	}
	h->servers_moved++;
	promise_kept(s->sp);
	s->moved = true;
	server_close(s, NULL);
	return true;
}

/* The idle servers: the clients that moved will want them. A client
 * here wants a server only once it has sent a request (it waits, and an
 * idle server is handed to it at once), and a client that becomes idle
 * goes: so no idle server is left wanted here. Sent before the clients
 * of the same look, so that the new process has them first. */
static bool give_servers(struct worker *w, unsigned *settling)
{
	*settling = 0;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &w->pools) {
		struct pool *p = LIST_OWNER(pos, struct pool, node);
		for (size_t i = 0; i < p->n_targets; i++) {
			struct srvpool *sp = p->targets[i];
			struct list_node *sn, *st;
			LIST_FOREACH_SAFE(sn, st, &sp->idle) {
				struct server *s = LIST_OWNER(sn, struct server, node);
				if (!server_move_ready(s))
					*settling += s->io.ssl == NULL;   /* (a later look, once at rest) */
				else if (!give_server(w, s))
					return false;
			}
			/* Being reset or drained, or logging in: idle soon. */
			*settling += (unsigned)(sp->n_other + sp->n_opening);
		}
	}
	return true;
}

static void give_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct worker *w = arg;
	struct handover *h = w->handover;
	worker_update_clock(w);
	if (h->link_eof_us) {
		/* Gone: the listeners come back here. Still there a second
		 * later: it closed the link by itself, and serves; this one
		 * drains. */
		if (h->peer_pid > 0 && process_gone(h->peer_pid)) {
			give_end(w, "the new process went away", true);
			return;
		}
		if (w->now_us - h->link_eof_us > 1000000) {
			give_end(w, "the new process closed the link", false);
			return;
		}
		struct timeval tv = { 0, HANDOVER_TICK_MS * 1000 };
		evtimer_add(h->tick, &tv);
		return;
	}
	unsigned settling;
	if (!give_servers(w, &settling) || !promise(w, false)) {
		give_end(w, "the link to the new process failed", true);
		return;
	}
	/* The clients that LISTEN in transaction mode go with their pool's
	 * listening connections, together (notify_move.h). */
	unsigned staying = 0, grouped_moved = 0;
	if (!notify_move_give(w, h->link_fd, &grouped_moved, &staying)) {
		give_end(w, "the link to the new process failed", true);
		return;
	}
	h->moved += grouped_moved;
	struct list_node *heads[] = { &w->clients_idle, &w->clients_active, &w->clients_login };
	for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
		struct list_node *pos, *tmp;
		LIST_FOREACH_SAFE(pos, tmp, heads[i]) {
			struct client *c = LIST_OWNER(pos, struct client, node);
			if (notify_move_grouped(c) && !client_move_never_why(c))
				continue;   /* (above) */
			struct server *linked = c->end.server;
			enum client_move_check k = client_move_check(c, linked && server_move_at_boundary(linked));
			if (k == CLIENT_MOVE_NEVER) {
				staying++;
			} else if (k == CLIENT_MOVE_READY && !give_client(w, c)) {
				give_end(w, "the link to the new process failed", true);
				return;
			}
		}
	}
	/* Done when no client that could move is left, nor a server
	 * connection on its way back to idle (one a client that just moved
	 * had: it follows at a later look). With clients that stay (they
	 * drain), those may keep servers coming and going: a second of that
	 * is enough. */
	if ((unsigned)w->n_clients <= staying) {
		if (settling == 0) {
			give_end(w, "no client left that can move", false);
			return;
		}
		if (!h->settling_since_us)
			h->settling_since_us = w->now_us;
		if (w->n_clients > 0 && w->now_us - h->settling_since_us >= HANDOVER_SETTLE_US) {
			give_end(w, "no client left that can move (server connections still busy stay)", false);
			return;
		}
	} else {
		h->settling_since_us = 0;
	}
	if (w->now_us >= h->deadline_us) {
		give_end(w, "shutdown_timeout reached", false);
		return;
	}
	struct timeval tv = { 0, HANDOVER_TICK_MS * 1000 };
	evtimer_add(h->tick, &tv);
}

/* A client is between two requests (it became idle, or in session mode
 * its server has just answered): stop reading it now if it can move, and
 * move it at the end of this loop turn, before its next request is read.
 * A session-mode client moves with its server, which must be at a
 * boundary too: checked here, at the one moment the client is sure not to
 * be in a request (the ticks alone would catch a busy one rarely). */
static void client_between_requests(struct client *c)
{
	struct handover *h = c->w->handover;
	if (!h || !h->giving || !h->tick)
		return;
	struct server *linked = c->end.server;
	bool server_ok = linked && server_move_at_boundary(linked);
	if (linked && !server_ok)
		return;   /* in a transaction: its end is the next chance */
	if (client_move_check(c, server_ok) != CLIENT_MOVE_NEVER)
		event_active(h->tick, EV_TIMEOUT, 0);
}

/* The TCP listeners' sockets (the Unix socket is the supervisor's: the
 * new one binds its own). */
static size_t tcp_listener_fds(struct worker *w, int *fds)
{
	size_t n = 0;
	for (size_t i = 0; i < w->n_listeners && n < HANDOVER_MAX_LISTENERS; i++) {
		if (!w->listeners[i])
			continue;
		int fd = evconnlistener_get_fd(w->listeners[i]);
		struct sockaddr_storage ss;
		socklen_t len = sizeof ss;
		if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family != AF_UNIX)
			fds[n++] = fd;
	}
	return n;
}


/* The instance's bans (worker 0 sends them: they are the instance's, in
 * the shared segment): record 'B', cstring host, u32 port, u32 seconds
 * left, u8 source, cstring reason. */
static void give_bans(struct worker *w, int fd)
{
	if (w->id != 0 || !w->shm)
		return;
	struct bans *all = malloc(sizeof *all);
	if (!all)
		return;
	shm_bans_copy(w->shm, all);
	int64_t now = (int64_t)time(NULL);
	for (size_t i = 0; i < BANS_MAX; i++) {
		const struct ban *b = &all->items[i];
		if (!b->used || b->until <= now)
			continue;
		uint8_t rec[512];
		struct pktbuf pb;
		pktbuf_init(&pb, rec, sizeof rec);
		pktbuf_put_u8(&pb, 'B');
		pktbuf_put_cstring(&pb, b->host);
		pktbuf_put_u32(&pb, (uint32_t)b->port);
		pktbuf_put_u32(&pb, (uint32_t)(b->until - now));
		pktbuf_put_u8(&pb, (uint8_t)b->source);
		pktbuf_put_cstring(&pb, b->reason);
		if (!pb.failed)
			(void)handover_send(fd, pb.data, pb.len, NULL, 0);
	}
	free(all);
}

/* The cancel-key slots in use here: the new worker keeps them for the
 * keys its clients bring ('K': u32 count, then each slot's index). */
static void give_key_slots(struct worker *w, int fd)
{
	static uint32_t slots[4096];
	uint8_t rec[1 + 4 + sizeof slots];
	size_t from = 0, n;
	while ((n = cancel_table_used(&w->cancel, slots, sizeof slots / sizeof *slots, from, &from)) > 0) {
		rec[0] = 'K';
		proto_put_u32(rec + 1, (uint32_t)n);
		for (size_t i = 0; i < n; i++)
			proto_put_u32(rec + 5 + 4 * i, slots[i]);
		if (!handover_send(fd, rec, 5 + 4 * n, NULL, 0))
			return;
	}
}

static void take_key_slots(struct worker *w, const uint8_t *rec, size_t len)
{
	static uint32_t slots[4096];
	uint32_t n = len >= 4 ? proto_get_u32(rec) : 0;
	if (len < 4 || n > sizeof slots / sizeof *slots || len != 4 + 4 * (size_t)n) {
		log_error("handover: a malformed list of cancel-key slots (%zu bytes)", len);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		slots[i] = proto_get_u32(rec + 4 + 4 * i);
	cancel_table_reserve(&w->cancel, slots, n);
}

static void take_ban(struct worker *w, const uint8_t *rec, size_t len)
{
	struct bytes_in r = { rec, len, 0, false };
	const char *host = bytes_cstring(&r);
	uint32_t port = bytes_u32(&r), seconds = bytes_u32(&r);
	uint8_t source = bytes_u8(&r);
	const char *reason = bytes_cstring(&r);
	if (r.bad || r.off != r.len || port > 65535 || seconds > 10u * 365 * 86400 || source > BAN_SOURCE_ADMIN) {
		log_error("handover: a malformed ban from the old process (%zu bytes)", len);
		return;
	}
	if (w->shm && shm_ban_set(w->shm, host, (int)port, (int64_t)time(NULL), (int)seconds, (enum ban_source)source,
				  reason))
		log_info("handover: %s:%u stays banned for %u s (%s)", host, port, seconds, reason);
}

static void answer_cb(evutil_socket_t lfd, short what, void *arg);

/* Until this process exits, CancelRequests for its clients that the new
 * process received come here (handover_link.h). */
static void answer_cancels(struct worker *w)
{
	struct handover *h = w->handover;
	if (h->cancel_fd >= 0)
		return;
	struct sockaddr_un un;
	socklen_t len = handover_cancel_addr(w, w->id, &un);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (bind(fd, (struct sockaddr *)&un, len) != 0 || listen(fd, 16) != 0 ||
	    !(h->cancel_ev = event_new(w->base, fd, EV_READ | EV_PERSIST, answer_cb, w)) ||
	    event_add(h->cancel_ev, NULL) != 0) {
		log_warning("handover: cannot answer on %s (%s): cancel requests for the clients left here are lost",
			    un.sun_path + 1, strerror(errno));
		if (h->cancel_ev)
			event_free(h->cancel_ev);
		h->cancel_ev = NULL;
		close(fd);
		return;
	}
	h->cancel_fd = fd;
}

static void give(struct worker *w, int fd)
{
	struct handover *h = w->handover;
	int fds[HANDOVER_MAX_LISTENERS];
	size_t n = tcp_listener_fds(w, fds);
	uint8_t rec[9] = { 'L' };
	proto_put_u32(rec + 1, HANDOVER_VERSION);
	proto_put_u32(rec + 5, w->shm ? w->shm->h->n_workers : 1);
	if (!handover_send(fd, rec, sizeof rec, fds, n)) {
		log_error("handover: the new process did not take the listeners: %s", strerror(errno));
		close(fd);
		return;
	}
	/* From here the new process accepts: this worker only hands over. */
	h->link_fd = fd;
	h->peer_pid = handover_peer_pid(fd);
	publish_successor(w, h->peer_pid > 0 ? parent_of(h->peer_pid) : 0);
	h->link_eof_us = 0;
	h->moved = h->servers_moved = h->refused = 0;
	h->settling_since_us = 0;
	h->giving = true;
	w->handing_over = true;
	give_bans(w, fd);
	give_key_slots(w, fd);
	if (!promise(w, true) || !notify_move_promise(w, fd))
		log_warning("handover: the new process was not told which server connections follow");
	/* Accepting stops; the listeners are kept until the end, to take them
	 * back if the new process goes away (give_link_cb). */
	w->cmds->pause_listening(w);
	h->link_ev = event_new(w->base, fd, EV_READ | EV_PERSIST, give_link_cb, w);
	if (h->link_ev)
		(void)event_add(h->link_ev, NULL);
	answer_cancels(w);
	union sigval v = { .sival_int = SHM_SIGVAL_HANDOVER };
	if (sigqueue(getppid(), SIGTERM, v) != 0)
		log_warning("handover: cannot tell the supervisor: %s", strerror(errno));
	h->deadline_us = w->now_us + (uint64_t)w->cfg->general.shutdown_timeout * 1000;
	log_info("handover: a new process took the listeners; moving %d clients as each is between requests",
		 w->n_clients);
	if (!h->tick)
		h->tick = evtimer_new(w->base, give_tick, w);
	if (!h->tick) {
		give_end(w, "out of memory", false);
		return;
	}
	w->on_client_between_requests = client_between_requests;
	give_tick(-1, 0, w);
}

static void answer_cb(evutil_socket_t lfd, short what, void *arg)
{
	(void)what;
	struct worker *w = arg;
	struct handover *h = w->handover;
	worker_update_clock(w);
	int fd = accept4((int)lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	uint8_t hello[11 + 255];
	size_t no_fds = 0;
	if (!handover_peer_trusted(fd)) {
		log_warning("handover: refused a connection from another OS user");
		close(fd);
		return;
	}
	set_timeouts(fd);
	ssize_t r = recv_record(fd, hello, sizeof hello, NULL, &no_fds, 0);
	bool hello_ok = r == 6 && (hello[5] == 'T' || hello[5] == 'D');
	bool cancel_ok = r >= 11 && hello[5] == 'X' && (size_t)r == 11u + hello[10];
	if (r < 6 || hello[0] != 'H' || proto_get_u32(hello + 1) != HANDOVER_VERSION || !(hello_ok || cancel_ok)) {
		log_warning("handover: refused a connection that is not a pgcat of this version");
		close(fd);
		return;
	}
	if (!cancel_ok && (int)lfd == h->cancel_fd) {
		close(fd);   /* (only cancel requests there) */
		return;
	}
	if (cancel_ok) {
		/* A client still here, its key sent to the new process. */
		close(fd);
		struct cancel_forward fwd;
		struct client *target = cancel_handle_request(&w->cancel, proto_get_u32(hello + 6), hello + 11, hello[10], &fwd);
		if (target)
			client_cancel_query(target);
		return;
	}
	if (hello[5] == 'D') {
		close(fd);
		log_info("handover: the new process has no worker %d: shutting down", w->id);
		w->cmds->begin_shutdown(w);
		return;
	}
	if (h->giving || w->shutting_down || w->waiting_for_clients || w->waiting_for_servers) {
		log_warning("handover: refused: this process is shutting down already");
		close(fd);
		return;
	}
	give(w, fd);
}

bool handover_listen(struct worker *w)
{
	struct handover *h = state(w);
	if (!h)
		return false;
	if (h->listen_fd >= 0)
		return true;
	if (h->link_fd >= 0 && !h->giving)
		return false;   /* (taking over: the name is bound at the end, take_end) */
	struct sockaddr_un un;
	socklen_t len = handover_addr(w, w->id, &un);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	if (bind(fd, (struct sockaddr *)&un, len) != 0 || listen(fd, 4) != 0) {
		log_warning("handover: %s is taken (another pgcat on this port, or another program): -R cannot take "
			    "over from this worker", un.sun_path + 1);
		close(fd);
		return false;
	}
	h->listen_ev = event_new(w->base, fd, EV_READ | EV_PERSIST, answer_cb, w);
	if (!h->listen_ev || event_add(h->listen_ev, NULL) != 0) {
		close(fd);
		return false;
	}
	h->listen_fd = fd;
	return true;
}

/* ---- the new side ---- */

/* The new side's progress, for /metrics: taking is whether the link to the
 * old worker is still open, left what it had left to drain (-1: not told). */
static void publish_taken(struct worker *w, bool taking, int left)
{
	struct handover *h = w->handover;
	if (!w->shm)
		return;
	struct shm_worker *sw = &w->shm->h->workers[w->id];
	atomic_store_explicit(&sw->taken_clients, (int32_t)h->moved, memory_order_relaxed);
	atomic_store_explicit(&sw->taken_servers, (int32_t)h->servers_moved, memory_order_relaxed);
	atomic_store_explicit(&sw->left_on_old, left, memory_order_relaxed);
	atomic_store_explicit(&sw->taking_over, taking ? 1 : 0, memory_order_relaxed);
}

static void take_end(struct worker *w, const char *how, int left)
{
	struct handover *h = w->handover;
	publish_taken(w, false, left);
	if (h->deadline)
		event_free(h->deadline);
	h->deadline = NULL;
	close_link(h);
	server_move_promises_end(w);
	notify_move_take_end(w);
	cancel_table_unreserve(&w->cancel);
	log_info("handover: %u clients and %u server connections taken over (%s)", h->moved, h->servers_moved, how);
	(void)handover_listen(w);
}

/* A session-mode client and its server (record 'P'): linked again as they
 * were, the client's unread input then served. */
static void take_pair(struct worker *w, const int *fds, const uint8_t *rec, size_t client_len, size_t len)
{
	struct handover *h = w->handover;
	struct client *c = client_move_read(w, fds[0], rec, client_len);
	struct server *s = server_move_read(w, fds[1], rec + client_len, len - client_len, true);
	if (c && s && s->sp->pool == c->pool && c->state == CLIENT_IDLE) {
		h->moved++;
		h->servers_moved++;
		pool_grant_adopted(s, &c->wait);
		if (s->state != SERVER_CLOSED && s->io.in && buf_len(s->io.in))
			server_process(s);
		if (c->state != CLIENT_CLOSED) {
			io_read_now(&c->io);
			if (c->state != CLIENT_CLOSED && c->io.in && buf_len(c->io.in))
				client_process(c);
		}
		return;
	}
	/* One half alone is no session: neither goes on. */
	if (s)
		server_move_drop(s, "its session-mode client could not be taken over");
	if (c)
		client_close(c, SQLSTATE_ADMIN_SHUTDOWN, "pgcat restarted and the server connection of this session "
			     "could not be kept");
}

static void take_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	struct worker *w = arg;
	struct handover *h = w->handover;
	worker_update_clock(w);
	static uint8_t rec[HANDOVER_RECORD_MAX];
	for (;;) {
		int cfd[2];
		size_t n = 2;
		ssize_t r = recv_record((int)fd, rec, sizeof rec, cfd, &n, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			publish_taken(w, true, -1);
			return;
		}
		if (r < 0 && errno == EMSGSIZE) {
			log_error("handover: a record from the old process too long to read, or with too many sockets");
			continue;   /* (consumed, its sockets closed) */
		}
		if (r <= 0) {
			take_end(w, r == 0 ? "the old process closed the link" : strerror(errno), -1);
			return;
		}
		if (rec[0] == 'C' && n == 1) {
			if (client_move_read(w, cfd[0], rec + 1, (size_t)r - 1))
				h->moved++;
			continue;
		}
		if (rec[0] == 'S' && n == 1) {
			if (server_move_read(w, cfd[0], rec + 1, (size_t)r - 1, false))
				h->servers_moved++;
			continue;
		}
		if (rec[0] == 'w' || rec[0] == 'W' || rec[0] == 'M' || rec[0] == 'g') {
			if (notify_move_take(w, rec[0], rec + 1, (size_t)r - 1, cfd, n))
				h->moved++;
			continue;
		}
		if (rec[0] == 'K' && n == 0) {
			take_key_slots(w, rec + 1, (size_t)r - 1);
			continue;
		}
		if (rec[0] == 'B' && n == 0) {
			take_ban(w, rec + 1, (size_t)r - 1);
			continue;
		}
		if (rec[0] == 'N' && n == 0) {
			server_move_promise_read(w, rec + 1, (size_t)r - 1);
			continue;
		}
		if (rec[0] == 'P' && n == 2 && r >= 5 && proto_get_u32(rec + 1) <= (size_t)r - 5) {
			take_pair(w, cfd, rec + 5, proto_get_u32(rec + 1), (size_t)r - 5);
			continue;
		}
		for (size_t i = 0; i < n; i++)
			close(cfd[i]);
		if (rec[0] == 'E' && r == 9) {
			unsigned left = proto_get_u32(rec + 5);
			char how[96];
			snprintf(how, sizeof how, "the old process has %u left to drain", left);
			take_end(w, how, left > INT32_MAX ? INT32_MAX : (int)left);
			return;
		}
		/* (Its sockets are closed above; the records behind it are
		 * clients and servers still to take.) */
		log_error("handover: an unexpected record from the old process ('%c', %zd bytes)", rec[0], r);
	}
}

/* The old worker never ended (it hangs): what it promised is forgotten,
 * its link closed (it drains when it wakes). */
static void take_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct worker *w = arg;
	worker_update_clock(w);
	if (w->handover && w->handover->link_fd >= 0)
		take_end(w, "the old process did not end in shutdown_timeout", -1);
}

static int connect_old(const struct worker *w, int id)
{
	struct sockaddr_un un;
	socklen_t len = handover_addr(w, id, &un);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&un, len) != 0) {
		close(fd);
		return -1;
	}
	if (!handover_peer_trusted(fd)) {
		log_error("handover: %s belongs to another OS user: not taken over", un.sun_path + 1);
		close(fd);
		return -1;
	}
	set_timeouts(fd);
	return fd;
}

static bool say_hello(int fd, char mode)
{
	uint8_t hello[6] = { 'H' };
	proto_put_u32(hello + 1, HANDOVER_VERSION);
	hello[5] = (uint8_t)mode;
	return handover_send(fd, hello, sizeof hello, NULL, 0);
}

enum handover_took handover_take(struct worker *w, int *fds, size_t *n)
{
	*n = 0;
	struct handover *h = state(w);
	if (!h)
		return HANDOVER_FAILED;
	int fd = connect_old(w, w->id);
	if (fd < 0) {
		log_info("handover: no old worker %d on port %d to take over from", w->id, w->cfg->general.listen_port);
		return HANDOVER_NONE;
	}
	uint8_t rec[9];
	size_t got = HANDOVER_MAX_LISTENERS;
	ssize_t r = -1;
	if (say_hello(fd, 'T'))
		r = recv_record(fd, rec, sizeof rec, fds, &got, 0);
	if (r != (ssize_t)sizeof rec || rec[0] != 'L' || proto_get_u32(rec + 1) != HANDOVER_VERSION) {
		/* (It is taking over from, or handing over to, another already:
		 * this process must not serve beside them.) */
		log_error("handover: the old worker %d did not hand its listeners over", w->id);
		for (size_t i = 0; i < got; i++)
			close(fds[i]);
		close(fd);
		return HANDOVER_FAILED;
	}
	*n = got;
	/* Old workers beyond this instance's last drain: the last one here
	 * tells them. */
	uint32_t old_workers = proto_get_u32(rec + 5);
	uint32_t mine = w->shm ? w->shm->h->n_workers : 1;
	if ((uint32_t)w->id + 1 == mine) {
		for (uint32_t j = mine; j < old_workers && j < SHM_MAX_WORKERS; j++) {
			int d = connect_old(w, (int)j);
			if (d >= 0) {
				(void)say_hello(d, 'D');
				close(d);
			}
		}
	}
	h->link_fd = fd;
	h->link_ev = event_new(w->base, fd, EV_READ | EV_PERSIST, take_cb, w);
	if (!h->link_ev || event_add(h->link_ev, NULL) != 0) {
		log_error("handover: cannot watch the link to the old worker");
		close_link(h);
		return HANDOVER_TAKEN;   /* (the listeners are ours all the same) */
	}
	h->deadline = evtimer_new(w->base, take_deadline_cb, w);
	struct timeval tv = { w->cfg->general.shutdown_timeout / 1000 + 10, 0 };
	if (h->deadline)
		(void)evtimer_add(h->deadline, &tv);
	publish_taken(w, true, -1);
	log_info("handover: took %zu listening sockets from the old worker %d", got, w->id);
	return HANDOVER_TAKEN;
}

void handover_free(struct worker *w)
{
	struct handover *h = w->handover;
	if (!h)
		return;
	stop_answering(h);
	if (h->deadline)
		event_free(h->deadline);
	if (h->cancel_ev)
		event_free(h->cancel_ev);
	if (h->cancel_fd >= 0)
		close(h->cancel_fd);
	close_link(h);
	if (h->tick)
		event_free(h->tick);
	free(h);
	w->handover = NULL;
}
