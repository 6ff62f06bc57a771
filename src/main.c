/* SPDX-License-Identifier: MIT */
/*
 * main: the command line (SPEC §1), loading and checking the config, then
 * handing over to the worker. Nothing else lives here.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <getopt.h>
#include <openssl/crypto.h>
#include <openssl/opensslv.h>
#include <pg_query.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "supervisor.h"
#include "version.h"


#define EXIT_BAD_CONFIG 1
#define EXIT_BAD_ARGS 2

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: pgcat [OPTIONS] [CONFIG]\n"
		"  CONFIG             path of pgcat.ini; default ./pgcat.ini, then %s/pgcat/pgcat.ini\n"
		"  -d, --daemon       detach (pidfile from config); a socket or file stderr stays\n"
		"  -t, --test-config  parse and validate CONFIG, print problems, exit 0/1\n"
		"  -w, --workers N    override [general] workers\n"
		"  -R, --reboot       take over from the pgcat running on the same port: its\n"
		"                     listening sockets, then its clients between requests\n"
		"  -v, --verbose      raise log level one step (repeatable)\n"
		"  -q, --quiet        lower log level one step (repeatable); with a pgbouncer.ini,\n"
		"                     PgBouncer's meaning: nothing logged to stderr\n"
		"  -V, --version      print the version and the linked library versions\n"
		"  -h, --help         this help\n",
		SYSCONFDIR);
}

static void print_version(void)
{
	printf("pgcat %s\n", pgcat_version);
	printf("libevent %s\n", event_get_version());
	printf("%s\n", OpenSSL_version(OPENSSL_VERSION));
	printf("libpg_query (PostgreSQL %d grammar)\n", PG_VERSION_NUM / 10000);
}

static const char *default_config_path(void)
{
	static const char sys[] = SYSCONFDIR "/pgcat/pgcat.ini";
	if (access("pgcat.ini", R_OK) == 0)
		return "pgcat.ini";
	if (access(sys, R_OK) == 0)
		return sys;
	if (access("/etc/pgcat/pgcat.ini", R_OK) == 0)
		return "/etc/pgcat/pgcat.ini";
	return "pgcat.ini";
}

static bool write_pidfile(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		log_error("cannot write pidfile %s: %s", path, strerror(errno));
		return false;
	}
	fprintf(f, "%d\n", (int)getpid());
	return fclose(f) == 0;
}

/* On the way out: the pidfile goes only while it still names this
 * process (after -R it names the new one). */
static void remove_pidfile(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	int pid = 0;
	bool ours = fscanf(f, "%d", &pid) == 1 && pid == (int)getpid();
	fclose(f);
	if (ours)
		unlink(path);
}

static bool keeps_log(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && (S_ISSOCK(st.st_mode) || S_ISREG(st.st_mode));
}

static bool daemonize(void)
{
	pid_t pid = fork();
	if (pid < 0)
		return false;
	if (pid > 0)
		_exit(0);
	if (setsid() < 0)
		return false;
	pid = fork();
	if (pid < 0)
		return false;
	if (pid > 0)
		_exit(0);
	/* A terminal, or a pipe whose reader waits for its end ($(pgcat -d)),
	 * is let go; a socket (systemd's journal, for ExecReload=pgcat -R -d)
	 * or a file keeps taking the log written to stderr. */
	int fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		if (!keeps_log(STDOUT_FILENO))
			dup2(fd, STDOUT_FILENO);
		if (!keeps_log(STDERR_FILENO))
			dup2(fd, STDERR_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	return true;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "daemon", no_argument, NULL, 'd' },
		{ "test-config", no_argument, NULL, 't' },
		{ "workers", required_argument, NULL, 'w' },
		{ "reboot", no_argument, NULL, 'R' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool daemon_mode = false, test_only = false, take_over = false;
	int workers = -1, verbosity = 0, quiet = 0;
	int ch;
	while ((ch = getopt_long(argc, argv, "dtw:RvqVh", opts, NULL)) != -1) {
		switch (ch) {
		case 'd': daemon_mode = true; break;
		case 't': test_only = true; break;
		case 'R': take_over = true; break;
		case 'w': {
			char *end;
			long n = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || n < 0 || n > 1024) {
				fprintf(stderr, "pgcat: --workers needs a number between 0 and 1024\n");
				return EXIT_BAD_ARGS;
			}
			workers = (int)n;
			break;
		}
		case 'v': verbosity++; break;
		case 'q': quiet++; break;
		case 'V': print_version(); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_BAD_ARGS;
		}
	}
	if (argc - optind > 1) {
		fprintf(stderr, "pgcat: only one CONFIG file may be given\n");
		usage(stderr);
		return EXIT_BAD_ARGS;
	}
	const char *path = optind < argc ? argv[optind] : default_config_path();

	struct config_problems problems = { 0 };
	struct config *cfg = config_load(path, &problems);
	bool bad = cfg == NULL || (test_only && config_problems_has(&problems, CONFIG_PROBLEM_UNKNOWN));
	for (size_t i = 0; i < problems.n; i++) {
		const struct config_problem *p = &problems.items[i];
		const char *kind = p->kind == CONFIG_PROBLEM_ERROR ? "error"
				   : p->kind == CONFIG_PROBLEM_UNKNOWN ? (test_only ? "error" : "warning")
								       : "warning";
		fprintf(stderr, "pgcat: %s: %s\n", kind, p->message);
	}
	config_problems_free(&problems);
	if (test_only) {
		if (!bad) {
			printf("pgcat: configuration file %s is valid; effective values:\n", path);
			config_print(cfg, stdout);
		}
		config_free(cfg);
		return bad ? EXIT_BAD_CONFIG : 0;
	}
	if (!cfg)
		return EXIT_BAD_CONFIG;
	if (workers >= 0)
		cfg->general.workers = workers;

	/* PgBouncer's --quiet keeps stderr quiet and the level as it is: its
	 * operators (and its test harness) read the log file behind it. */
	if (cfg->pgbouncer && quiet > 0)
		log_quiet_stderr();
	else
		verbosity -= quiet;
	int level = (int)cfg->general.log_level + verbosity;
	if (level < LOG_LEVEL_ERROR)
		level = LOG_LEVEL_ERROR;
	if (level > LOG_LEVEL_TRACE)
		level = LOG_LEVEL_TRACE;
	if (!log_open((enum log_level)level, cfg->general.log_file, cfg->general.syslog)) {
		config_free(cfg);
		return EXIT_BAD_CONFIG;
	}
	log_set_format(cfg->general.log_format);
	if (daemon_mode && !daemonize()) {
		fprintf(stderr, "pgcat: cannot detach: %s\n", strerror(errno));
		config_free(cfg);
		return EXIT_BAD_CONFIG;
	}
	char *pidfile = cfg->general.pidfile && cfg->general.pidfile[0] ? strdup(cfg->general.pidfile) : NULL;
	if (pidfile && !write_pidfile(pidfile)) {
		free(pidfile);
		config_free(cfg);
		return EXIT_BAD_CONFIG;
	}
	log_info("pgcat %s starting", pgcat_version);
	/* The binary's path as started (UPGRADE runs what is there then). */
	char exe[4096];
	ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[el > 0 ? el : 0] = '\0';
	int rc = supervisor_run(cfg, path, exe, take_over);
	if (pidfile)
		remove_pidfile(pidfile);
	free(pidfile);
	log_info("pgcat stopped");
	log_close();
	return rc;
}
