/* SPDX-License-Identifier: MIT */
/*
 * epoll_wait for libevent's epoll backend, as a bare system call.
 *
 * Once a worker has a second thread (the KDF and offload threads start at
 * the first SCRAM or PAM/LDAP login), glibc makes every cancellation point,
 * epoll_wait among them, switch the thread to asynchronous cancellation
 * and back around the call: about 60 instructions per loop turn, two turns
 * per transaction. pgcat never cancels a thread. Defined here, in the
 * executable, this epoll_wait is the one the dynamic linker binds
 * libevent's call to (the executable's symbols come first); it does what
 * glibc's does without that bookkeeping. io.c sends and receives the same
 * way (sock_recv, sock_send). epoll_pwait with no signal mask is
 * epoll_wait on every architecture, including those without the older
 * call (arm64).
 */
#include <signal.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	return (int)syscall(SYS_epoll_pwait, epfd, events, maxevents, timeout, NULL, (size_t)(_NSIG / 8));
}
