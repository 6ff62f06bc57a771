/* SPDX-License-Identifier: MIT */
/*
 * supervisor: fork N workers that share the listening port (each binds it
 * with SO_REUSEPORT) and one unix socket (bound here once: SO_REUSEPORT does
 * not balance AF_UNIX). Signals are taken synchronously with sigtimedwait,
 * so there is no handler and no event loop in this process.
 */
#include "supervisor.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "sdnotify.h"
#include "shm.h"
#include "twophase_check.h"
#include "worker.h"

/* A worker that keeps dying is restarted at most this often. */
#define RESTART_BACKOFF_SEC 1

struct supervisor {
	struct config *cfg;
	const char *config_path;
	struct shm shm;
	int n_workers;
	pid_t pids[SHM_MAX_WORKERS];
	int64_t died_at[SHM_MAX_WORKERS];
	bool restart_pending[SHM_MAX_WORKERS];
	bool ever_ready[SHM_MAX_WORKERS];
	int unix_fd;
	char unix_path[108];
	ino_t unix_ino;
	sigset_t old_mask;
	bool shutting_down;
	bool ready_sent;
	bool take_over;           /* -R: the first workers take over from the old instance's */
	bool handed_over;         /* shutting down because a new pgcat took over (and nothing else) */
	const char *exe_path;     /* the binary's path, for UPGRADE ("": not known) */
	int exit_code;
};

static int open_unix_socket(struct supervisor *sv)
{
	const struct config_general *g = &sv->cfg->general;
	if (!g->unix_socket_dir || !g->unix_socket_dir[0])
		return -1;
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	int n = snprintf(un.sun_path, sizeof un.sun_path, "%s/.s.PGSQL.%d", g->unix_socket_dir, g->listen_port);
	if (n < 0 || (size_t)n >= sizeof un.sun_path) {
		log_error("unix_socket_dir %s: path too long", g->unix_socket_dir);
		return -2;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -2;
	/* A stale file, or a previous instance in an online restart: the new
	 * instance takes the path; the old one keeps accepting on its fd. */
	struct stat st;
	if (stat(un.sun_path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(un.sun_path);
	if (bind(fd, (struct sockaddr *)&un, sizeof un) < 0 || listen(fd, 1024) < 0) {
		log_error("cannot listen on %s: %s", un.sun_path, strerror(errno));
		close(fd);
		return -2;
	}
	chmod(un.sun_path, 0777);
	snprintf(sv->unix_path, sizeof sv->unix_path, "%s", un.sun_path);
	if (stat(un.sun_path, &st) == 0)
		sv->unix_ino = st.st_ino;
	log_info("listening on %s", un.sun_path);
	return fd;
}

static void remove_unix_socket(struct supervisor *sv)
{
	if (sv->unix_fd >= 0) {
		close(sv->unix_fd);
		sv->unix_fd = -1;
	}
	/* Only our own file: after an online restart the path is the new
	 * instance's. */
	struct stat st;
	if (sv->unix_path[0] && stat(sv->unix_path, &st) == 0 && st.st_ino == sv->unix_ino)
		unlink(sv->unix_path);
	sv->unix_path[0] = '\0';
}

/* In a worker process: its worker on cfg (taken), signals unblocked. */
static struct worker *start_worker(struct supervisor *sv, int id, struct config *cfg)
{
	struct worker *w = worker_create(cfg, sv->config_path, id, &sv->shm);
	if (!w) {
		log_error("worker %d: startup failed", id);
		exit(1);
	}
	sigprocmask(SIG_SETMASK, &sv->old_mask, NULL);
	return w;
}

static pid_t spawn(struct supervisor *sv, int id, bool restart)
{
	pid_t pid = fork();
	if (pid < 0) {
		log_error("cannot fork worker %d: %s", id, strerror(errno));
		return -1;
	}
	if (pid > 0)
		return pid;
	/* The worker. Signals stay blocked until its handlers are in place:
	 * a SIGTERM forwarded during startup then waits instead of killing it. */
	struct config *fresh = NULL;
	if (restart) {
		/* Workers reload on their own: start from the file as it is now
		 * (the others may run it). Unless it does not parse, or a check
		 * below refuses it. */
		struct config_problems problems = { 0 };
		fresh = config_load(sv->config_path, &problems);
		config_problems_free(&problems);
		shm_worker_reset(&sv->shm, id);
	}
	struct shm_worker *slot = &sv->shm.h->workers[id];
	atomic_store(&slot->pid, (int32_t)getpid());
	atomic_store(&slot->started, (int64_t)time(NULL));
	struct worker *w = NULL;
	enum worker_start st = WORKER_START_OK;
	if (fresh) {
		/* two_phase_commit and a shard that cannot PREPARE: a reload
		 * refused the file, yet it is on disk. Asked like at startup
		 * (skipped when nothing needs asking: a restart stays fast). A
		 * refusal does not exit (the next restart would be refused
		 * again, every second): this worker serves the configuration
		 * pgcat started with, which passed its check. */
		bool ask = twophase_check_needed(fresh, NULL);
		w = start_worker(sv, id, fresh);
		if (ask)
			st = worker_check_startup(w, "this restarted worker runs the configuration pgcat started with");
		if (st == WORKER_START_REFUSED) {
			log_error("worker %d: %s is refused (two_phase_commit, see above); running the configuration "
				  "pgcat started with", id, sv->config_path);
			worker_destroy(w);
			w = NULL;
			st = WORKER_START_OK;
		}
	}
	if (!w) {
		w = start_worker(sv, id, sv->cfg);
		/* At startup, and for a worker that was killed during its own
		 * check (never ready): two_phase_commit and a shard that cannot
		 * PREPARE, so this worker never becomes ready and exits 1, and
		 * reap() stops the instance. One that was running passed it
		 * with this configuration: the resolver reports a shard changed
		 * since. */
		if (!restart || !sv->ever_ready[id])
			st = worker_check_startup(w, "pgcat does not start");
	} else {
		config_free(sv->cfg);   /* (this process's copy: not used) */
	}
	sv->cfg = NULL;
	if (st != WORKER_START_OK) {
		int code = st == WORKER_START_REFUSED ? 1 : 0;
		worker_destroy(w);
		log_close();
		exit(code);
	}
	/* -R: a worker started with the instance takes over from the old
	 * one's of its number (a restarted one binds: the old is gone). */
	w->take_over = sv->take_over && !restart;
	w->exe_path = sv->exe_path;
	/* Listening only now, past the check (worker_check_startup). */
	if (!worker_listen(w, sv->unix_fd)) {
		log_error("worker %d: startup failed", id);
		worker_destroy(w);
		log_close();
		exit(1);
	}
	atomic_store(&slot->ready, 1);
	int rc = worker_run(w);
	worker_destroy(w);
	log_close();
	exit(rc);
}

static void forward(struct supervisor *sv, int sig, pid_t except)
{
	for (int i = 0; i < sv->n_workers; i++)
		if (sv->pids[i] > 0 && sv->pids[i] != except)
			kill(sv->pids[i], sig);
}

static bool any_alive(const struct supervisor *sv)
{
	for (int i = 0; i < sv->n_workers; i++)
		if (sv->pids[i] > 0)
			return true;
	return false;
}

/* -R, the new side: some worker still takes connections over from the
 * old process (handover.c publishes it). */
static bool taking_over(const struct supervisor *sv, int n)
{
	for (int i = 0; i < n; i++)
		if (atomic_load(&sv->shm.h->workers[i].taking_over))
			return true;
	return false;
}

/* -R: this process exits, handed over: systemd's main process is the new
 * supervisor from now on (Type=notify, NotifyAccess=all). The new one says
 * so too once its workers listen, but it may not have before this one is
 * gone, and a main process that exits unannounced is the service's end.
 * The pid comes from the workers' handover (the new worker's parent). */
static void announce_successor(const struct supervisor *sv, int n)
{
	for (int i = 0; i < n; i++) {
		int32_t pid = atomic_load(&sv->shm.h->workers[i].successor_pid);
		if (pid <= 1 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH))
			continue;
		char msg[32];
		snprintf(msg, sizeof msg, "MAINPID=%d", (int)pid);
		sd_notify_send(msg);
		log_info("supervisor: the new pgcat, pid %d, is the main process from now on", (int)pid);
		return;
	}
}

static void reap(struct supervisor *sv)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		int id = -1;
		for (int i = 0; i < sv->n_workers; i++)
			if (sv->pids[i] == pid)
				id = i;
		if (id < 0)
			continue;
		sv->pids[id] = 0;
		/* Ready since the last loop tick counts too. */
		if (atomic_load(&sv->shm.h->workers[id].ready))
			sv->ever_ready[id] = true;
		atomic_store(&sv->shm.h->workers[id].pid, 0);
		atomic_store(&sv->shm.h->workers[id].ready, 0);
		bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
		if (sv->shutting_down) {
			if (!clean) {
				sv->exit_code = 1;
				log_error("worker %d (pid %d) ended with status 0x%x during shutdown", id, (int)pid, status);
			}
			continue;
		}
		if (WIFSIGNALED(status))
			log_error("worker %d (pid %d) died of signal %d", id, (int)pid, WTERMSIG(status));
		else
			log_error("worker %d (pid %d) exited with code %d", id, (int)pid, WEXITSTATUS(status));
		/* A worker that exited by itself before it ever listened (port
		 * taken, bad file...) would fail the same way again; one killed
		 * by a signal is restarted. */
		if (!sv->ever_ready[id] && WIFEXITED(status)) {
			/* It never came up (port taken, bad file...): restarting
			 * would fail the same way. */
			log_error("worker %d failed to start; stopping", id);
			sv->exit_code = 1;
			sv->shutting_down = true;
			forward(sv, SIGTERM, 0);
			continue;
		}
		sv->restart_pending[id] = true;
		sv->died_at[id] = (int64_t)time(NULL);
	}
}

/* Each worker may hold every client of the instance (the kernel spreads
 * them unevenly) plus its server connections: raise the soft limit on open
 * files to fit max_client_conn, as far as the hard limit allows, so that a
 * default limit of 1024 does not cap a pooler configured for thousands. */
static void raise_nofile_limit(const struct config *cfg)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	rlim_t want = (rlim_t)cfg->general.max_client_conn + 1024;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= want)
		return;
	if (rl.rlim_cur == RLIM_INFINITY)
		return;
	rlim_t old = rl.rlim_cur;
	rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want) ? want : rl.rlim_max;
	if (rl.rlim_cur > old && setrlimit(RLIMIT_NOFILE, &rl) != 0)
		log_warning("could not raise the open files limit to %llu: %s", (unsigned long long)rl.rlim_cur,
			    strerror(errno));
	else if (rl.rlim_cur < want)
		log_warning("open files limit is %llu (hard limit); max_client_conn = %d needs about %llu",
			    (unsigned long long)rl.rlim_cur, cfg->general.max_client_conn, (unsigned long long)want);
}

int supervisor_run(struct config *cfg, const char *config_path, const char *exe_path, bool take_over)
{
	struct supervisor sv;
	memset(&sv, 0, sizeof sv);
	sv.cfg = cfg;
	sv.config_path = config_path;
	sv.take_over = take_over;
	sv.exe_path = exe_path;
	bool pgbouncer_signals = cfg->format == CONFIG_FORMAT_PGBOUNCER;
	sv.unix_fd = -1;
	int n = cfg->general.workers;
	if (n <= 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		n = cpus > 0 ? (int)cpus : 1;
	}
	if (n > SHM_MAX_WORKERS)
		n = SHM_MAX_WORKERS;
	sv.n_workers = n;
	raise_nofile_limit(cfg);
	if (!shm_create(&sv.shm, (uint32_t)n, (uint32_t)cfg->general.max_client_conn)) {
		config_free(cfg);
		return 1;
	}
	sv.unix_fd = open_unix_socket(&sv);
	if (sv.unix_fd == -2) {
		shm_destroy(&sv.shm);
		config_free(cfg);
		return 1;
	}
	sigset_t set;
	sigemptyset(&set);
	int sigs[] = { SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD };
	for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
		sigaddset(&set, sigs[i]);
	sigprocmask(SIG_BLOCK, &set, &sv.old_mask);
	signal(SIGPIPE, SIG_IGN);

	for (int i = 0; i < n; i++) {
		sv.pids[i] = spawn(&sv, i, false);
		if (sv.pids[i] < 0) {
			sv.exit_code = 1;
			sv.shutting_down = true;
			forward(&sv, SIGTERM, 0);
			break;
		}
	}
	log_info("supervisor %d: %d worker%s", (int)getpid(), n, n == 1 ? "" : "s");

	while (any_alive(&sv) || (!sv.shutting_down)) {
		struct timespec tick = { 0, 100 * 1000 * 1000 };
		siginfo_t info;
		int sig = sigtimedwait(&set, &info, &tick);
		switch (sig) {
		case SIGCHLD:
			break;
		case SIGTERM:
		case SIGINT:
			/* SHUTDOWN WAIT_FOR_CLIENTS or _SERVERS, from a worker: no new clients,
			 * and the workers (told through the admin ring) exit once
			 * their last client has gone. Not forwarded: SIGTERM would
			 * start the drain with shutdown_timeout. */
			/* -R: a new pgcat took a worker's listeners; each worker
			 * hands its clients over, then exits. */
			if (sig == SIGTERM && info.si_code == SI_QUEUE && info.si_value.sival_int == SHM_SIGVAL_HANDOVER) {
				if (!sv.shutting_down) {
					log_info("supervisor: a new pgcat takes over; exiting once the workers have handed "
						 "their clients over");
					sv.handed_over = true;
				}
				sv.shutting_down = true;
				break;
			}
			/* ... and went away before the end: this instance goes on. */
			if (sig == SIGTERM && info.si_code == SI_QUEUE &&
			    info.si_value.sival_int == SHM_SIGVAL_HANDOVER_UNDONE) {
				if (sv.handed_over) {
					log_warning("supervisor: the new pgcat went away; this one goes on");
					/* (systemd follows this one still: the new one says
					 * MAINPID= only once it has taken everything over) */
					sv.handed_over = false;
					sv.shutting_down = false;
					/* A worker that had handed everything over and exited
					 * meanwhile is started again. */
					for (int i = 0; i < n; i++)
						if (sv.pids[i] <= 0 && !sv.restart_pending[i]) {
							sv.restart_pending[i] = true;
							sv.died_at[i] = 0;
						}
				}
				break;
			}
			if (sig == SIGTERM && info.si_code == SI_QUEUE &&
			    info.si_value.sival_int == SHM_SIGVAL_WAIT_FOR_CLIENTS) {
				if (!sv.shutting_down) {
					log_info("supervisor: SHUTDOWN WAIT_FOR_CLIENTS, exiting after the last client");
					sd_notify_send("STOPPING=1");
				}
				/* The Unix socket stays, for the console (login.c
				 * refuses the other logins), until the end. */
				sv.shutting_down = true;
				break;
			}
			/* On a pgbouncer.ini, SIGINT is PgBouncer's: SHUTDOWN
			 * WAIT_FOR_SERVERS (the workers take it so, the Unix
			 * socket stays for the console), and a second one is a
			 * fast exit. */
			/* And SIGTERM PgBouncer's SHUTDOWN WAIT_FOR_CLIENTS, a
			 * second one a fast exit too. */
			if (sig == SIGTERM && pgbouncer_signals) {
				if (sv.shutting_down) {
					log_info("supervisor: SIGTERM while shutting down, fast exit");
					forward(&sv, SIGQUIT, 0);
					break;
				}
				log_info("supervisor: SIGTERM, shutting down, waiting for all clients to disconnect");
				sd_notify_send("STOPPING=1");
				sv.shutting_down = true;
				forward(&sv, SIGTERM, 0);
				break;
			}
			if (sig == SIGINT && pgbouncer_signals) {
				if (sv.shutting_down) {
					log_info("supervisor: SIGINT while shutting down, fast exit");
					forward(&sv, SIGQUIT, 0);
					break;
				}
				log_info("supervisor: SIGINT, shutting down, waiting for all servers connections to be "
					 "released");
				sd_notify_send("STOPPING=1");
				sv.shutting_down = true;
				forward(&sv, SIGINT, 0);
				break;
			}
			if (!sv.shutting_down) {
				log_info("supervisor: signal %d, shutting down", sig);
				sd_notify_send("STOPPING=1");
			}
			sv.handed_over = false;   /* (a shutdown asked for: no undo brings the workers back) */
			sv.shutting_down = true;
			/* No new client waits in a queue nobody will accept from. */
			remove_unix_socket(&sv);
			forward(&sv, sig, 0);
			break;
		case SIGQUIT:
			log_info("supervisor: SIGQUIT, immediate shutdown");
			sv.shutting_down = true;
			forward(&sv, SIGQUIT, 0);
			break;
		case SIGHUP:
			/* The supervisor logs too (worker exits and restarts): after a
			 * rotation that moved the file, it must write to the new one. */
			log_reopen();
			sd_notify_send("RELOADING=1");
			/* A worker asking (admin RELOAD) has already reloaded. */
			forward(&sv, SIGHUP, info.si_pid);
			sd_notify_send("READY=1");
			break;
		case SIGUSR1:
		case SIGUSR2:
			forward(&sv, sig, 0);
			break;
		default:
			break;
		}
		reap(&sv);
		int ready = 0;
		for (int i = 0; i < n; i++) {
			if (sv.pids[i] > 0 && atomic_load(&sv.shm.h->workers[i].ready)) {
				sv.ever_ready[i] = true;
				ready++;
			}
		}
		if (!sv.ready_sent && ready == n && !taking_over(&sv, n)) {
			sv.ready_sent = true;
			if (sv.take_over) {
				/* -R: systemd follows this process from now on (the old
				 * one exits once its clients moved; NotifyAccess=all).
				 * Said once every worker has taken over, not before: if
				 * this process died while taking over, the old one takes
				 * its listeners back and must still be the main one (it
				 * also says MAINPID= of this one as it exits). */
				char msg[64];
				snprintf(msg, sizeof msg, "MAINPID=%d\nREADY=1", (int)getpid());
				sd_notify_send(msg);
			} else {
				sd_notify_send("READY=1");
			}
			log_info("ready: %d worker%s listening", n, n == 1 ? "" : "s");
		}
		if (!sv.shutting_down) {
			int64_t now = (int64_t)time(NULL);
			for (int i = 0; i < n; i++) {
				if (!sv.restart_pending[i] || now - sv.died_at[i] < RESTART_BACKOFF_SEC)
					continue;
				sv.restart_pending[i] = false;
				atomic_fetch_add(&sv.shm.h->workers[i].restarts, 1);
				sv.pids[i] = spawn(&sv, i, true);
				if (sv.pids[i] > 0)
					log_info("worker %d restarted as pid %d", i, (int)sv.pids[i]);
			}
		}
		if (sv.shutting_down && !any_alive(&sv))
			break;
	}
	if (sv.handed_over)
		announce_successor(&sv, n);
	remove_unix_socket(&sv);
	shm_destroy(&sv.shm);
	config_free(cfg);
	return sv.exit_code;
}
