/* SPDX-License-Identifier: MIT */
/*
 * handover_link: the local socket names of -R (handover.c), the sending
 * of one record with sockets beside it (handover.c, notify_move.c), and
 * what a worker of the new process sends the old one outside the handover
 * itself: a CancelRequest for a client the old process still serves.
 */
#ifndef PGCAT_HANDOVER_LINK_H
#define PGCAT_HANDOVER_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

struct worker;

#define HANDOVER_VERSION 1u
/* The most sockets one record carries (a worker's listening sockets). */
#define HANDOVER_MAX_LISTENERS 16
/* The longest record: a client's state with the input it had not read yet. */
#define HANDOVER_RECORD_MAX (96u * 1024)

/* The abstract Unix name worker id of the instance on w's port answers
 * on; the address's length. */
socklen_t handover_addr(const struct worker *w, int id, struct sockaddr_un *un);
/* The name an old worker answers cancel requests on, from its handover
 * until it exits (its clients left to drain can still be cancelled). */
socklen_t handover_cancel_addr(const struct worker *w, int id, struct sockaddr_un *un);
/* One record of the handover (a SOCK_SEQPACKET message) on fd, with up
 * to HANDOVER_MAX_LISTENERS sockets beside it (SCM_RIGHTS). false: it did
 * not go whole (errno says why). */
bool handover_send(int fd, const void *buf, size_t len, const int *fds, size_t n_fds);
/* The peer's pid (-1: not known). */
pid_t handover_peer_pid(int fd);
/* Is the peer of fd pgcat's own OS user? */
bool handover_peer_trusted(int fd);
/* A CancelRequest with a key no worker here holds, naming worker: while
 * this process takes over (-R), the old process's worker of that number
 * may still serve the client (a query that was running): sent on to it,
 * on handover_cancel_addr ('H' mode 'X': u32 pid, u8 key length, the
 * key). Nothing happens when there is no old process any more. */
void handover_forward_cancel(struct worker *w, int worker, uint32_t pid, const uint8_t *key, size_t key_len);

#endif
