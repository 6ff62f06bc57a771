/* SPDX-License-Identifier: MIT */
/*
 * admin_upgrade: the console's UPGRADE starts the next pgcat. Each child
 * gets none of this process's descriptors but stdin (/dev/null), stdout
 * and stderr: the clients' sockets it must not hold (a client would never
 * see its connection close) reach it only through the handover.
 */
#include "admin_upgrade.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "context.h"
#include "log.h"

/* In the child (a fork of a process with threads: async-signal-safe
 * calls only): descriptors 3 and up closed, stdin from /dev/null, then exe
 * with args. null_fd was opened before the fork. */
static void exec_child(const char *exe, char *const argv[], int null_fd, int out_fd, int max_fd)
{
	if (null_fd >= 0)
		dup2(null_fd, STDIN_FILENO);
	if (out_fd >= 0) {
		dup2(out_fd, STDOUT_FILENO);
		dup2(out_fd, STDERR_FILENO);
	}
	/* close_range (Linux 5.9); CLOEXEC on them all where it is refused,
	 * which execv then closes. */
	if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
		for (int fd = 3; fd < max_fd; fd++)
			(void)close(fd);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execv(exe, argv);
	_exit(127);
}

bool admin_upgrade_start(struct worker *w, pid_t *pid, char *err, size_t errlen)
{
	if (!w->exe_path || !w->exe_path[0]) {
		snprintf(err, errlen, "the path of the pgcat binary is not known");
		return false;
	}
	/* The check: its output is the reason a refusal gives. */
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return false;
	}
	char *check_argv[] = { (char *)w->exe_path, (char *)"-t", w->config_path, NULL };
	int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	struct rlimit rl;
	int max_fd = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (1u << 20)
			     ? (int)rl.rlim_cur
			     : 1 << 20;
	pid_t check = fork();
	if (check == 0)
		exec_child(w->exe_path, check_argv, null_fd, pipefd[1], max_fd);
	close(pipefd[1]);
	if (check < 0) {
		close(pipefd[0]);
		if (null_fd >= 0)
			close(null_fd);
		snprintf(err, errlen, "fork: %s", strerror(errno));
		return false;
	}
	char out[4096];
	size_t got = 0;
	ssize_t r;
	while ((r = read(pipefd[0], out + got, sizeof out - 1 - got)) > 0 || (r < 0 && errno == EINTR))
		if (r > 0 && (got += (size_t)r) >= sizeof out - 1)
			break;
	out[got] = '\0';
	close(pipefd[0]);
	int status = 0;
	pid_t waited;
	while ((waited = waitpid(check, &status, 0)) < 0 && errno == EINTR)
		;
	if (waited != check) {
		if (null_fd >= 0)
			close(null_fd);
		snprintf(err, errlen, "waiting for %s -t: %s", w->exe_path, strerror(errno));
		return false;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		if (null_fd >= 0)
			close(null_fd);
		/* Its errors ("pgcat: error: ..."), one line. */
		const char *e = strstr(out, "error:");
		const char *line = e ? e : out;
		size_t n = strcspn(line, "\n");
		snprintf(err, errlen, "%s -t %s failed (status %d): %.*s", w->exe_path, w->config_path,
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1, (int)n, line);
		return false;
	}
	char *argv[] = { (char *)w->exe_path, (char *)"-R", w->config_path, NULL };
	pid_t p = fork();
	if (p == 0) {
		setsid();   /* not stopped by a signal to this process's group */
		exec_child(w->exe_path, argv, null_fd, -1, max_fd);
	}
	if (null_fd >= 0)
		close(null_fd);
	if (p < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		return false;
	}
	*pid = p;
	log_info("UPGRADE: started %s -R %s (pid %d)", w->exe_path, w->config_path, (int)p);
	return true;
}

bool admin_upgrade_exited(pid_t pid, int *status)
{
	pid_t r = waitpid(pid, status, WNOHANG);
	return r == pid;
}
