/* SPDX-License-Identifier: MIT */
/*
 * sdnotify: write a state line to the datagram socket systemd names in
 * NOTIFY_SOCKET ('@' = Linux abstract namespace).
 */
#include "sdnotify.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

void sd_notify_send(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (!path || !path[0])
		return;
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	size_t len = strlen(path);
	if (len >= sizeof un.sun_path || (path[0] != '/' && path[0] != '@'))
		return;
	memcpy(un.sun_path, path, len);
	if (path[0] == '@')
		un.sun_path[0] = '\0';
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&un, salen) < 0)
		log_debug("sd_notify %s: send failed", state);
	close(fd);
}
