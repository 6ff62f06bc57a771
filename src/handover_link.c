/* SPDX-License-Identifier: MIT */
/*
 * handover_link: the names the workers answer on for -R, the peer check,
 * the sending of a record with its sockets, and the one message a new
 * worker sends an old one outside the handover: a CancelRequest for a
 * client still served there.
 */
#include "handover_link.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "context.h"
#include "log.h"
#include "proto.h"

socklen_t handover_addr(const struct worker *w, int id, struct sockaddr_un *un)
{
	memset(un, 0, sizeof *un);
	un->sun_family = AF_UNIX;
	int n = snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "pgcat.handover.%d.%d",
			 w->cfg->general.listen_port, id);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

socklen_t handover_cancel_addr(const struct worker *w, int id, struct sockaddr_un *un)
{
	memset(un, 0, sizeof *un);
	un->sun_family = AF_UNIX;
	int n = snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "pgcat.cancel.%d.%d", w->cfg->general.listen_port,
			 id);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

pid_t handover_peer_pid(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof cr;
	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 ? cr.pid : -1;
}

bool handover_peer_trusted(int fd)
{
	/* pgcat's own OS user only: what is handed over is its clients'
	 * sockets and its pools' credentials. */
	struct ucred cr;
	socklen_t len = sizeof cr;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
		return false;
	return cr.uid == geteuid();
}

void handover_forward_cancel(struct worker *w, int worker, uint32_t pid, const uint8_t *key, size_t key_len)
{
	/* Only a process that took over has an old one to ask: it answers
	 * until it exits, on a name of its own (handover_cancel_addr). */
	if (!w->take_over || worker < 0 || key_len > 255)
		return;
	struct sockaddr_un un;
	socklen_t len = handover_cancel_addr(w, worker, &un);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	uint8_t rec[11 + 255] = { 'H' };
	proto_put_u32(rec + 1, HANDOVER_VERSION);
	rec[5] = 'X';
	proto_put_u32(rec + 6, pid);
	rec[10] = (uint8_t)key_len;
	memcpy(rec + 11, key, key_len);
	if (connect(fd, (struct sockaddr *)&un, len) == 0 && handover_peer_trusted(fd) &&
	    send(fd, rec, 11 + key_len, MSG_NOSIGNAL) == (ssize_t)(11 + key_len))
		log_debug("handover: a cancel request sent on to the old worker %d", worker);
	close(fd);
}

bool handover_send(int fd, const void *buf, size_t len, const int *fds, size_t n_fds)
{
	if (n_fds > HANDOVER_MAX_LISTENERS) {
		errno = EINVAL;
		return false;
	}
	struct iovec iov = { (void *)buf, len };
	union {
		char buf[CMSG_SPACE(sizeof(int) * HANDOVER_MAX_LISTENERS)];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n_fds) {
		memset(&ctl, 0, sizeof ctl);
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * n_fds);
	}
	ssize_t r;
	do
		r = sendmsg(fd, &mh, MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	return r == (ssize_t)len;
}
