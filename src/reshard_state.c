/* SPDX-License-Identifier: MIT */
/*
 * reshard_state: a pool's reshard as it must survive a restart, in
 * state_dir/reshard-<pool>.state: its phase, HOLD, whether the schema is
 * on the new shards, the layout it moves to (so that a finished reshard's
 * layout is applied only while the configuration still names it as the
 * next one), the cutover's pause and the last error. Lines of key=value;
 * written to a temporary file, fsync'd, renamed over the old one, the
 * directory fsync'd.
 */
#include "reshard_types.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const phase_names[] = {
	[RESHARD_NONE] = "none",         [RESHARD_COPY] = "copy", [RESHARD_REPLICATE] = "replicate",
	[RESHARD_CUTOVER] = "cutover",   [RESHARD_DONE] = "done", [RESHARD_CANCELLED] = "cancelled",
	[RESHARD_FAILED] = "failed",
};

const char *reshard_phase_name(enum reshard_phase p)
{
	return (size_t)p < sizeof phase_names / sizeof *phase_names ? phase_names[p] : "unknown";
}

bool reshard_phase_parse(const char *s, enum reshard_phase *out)
{
	for (size_t i = 0; i < sizeof phase_names / sizeof *phase_names; i++)
		if (strcmp(s, phase_names[i]) == 0) {
			*out = (enum reshard_phase)i;
			return true;
		}
	return false;
}

/* Pool names are config section names; the file name keeps only what is
 * safe in a path (others as _XX). */
static bool state_path(const char *dir, const char *pool, const char *suffix, char *out, size_t cap)
{
	char name[200];
	size_t n = 0;
	for (const char *p = pool; *p && n + 4 < sizeof name; p++) {
		unsigned char ch = (unsigned char)*p;
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
		    ch == '.')
			name[n++] = (char)ch;
		else
			n += (size_t)snprintf(name + n, sizeof name - n, "_%02x", ch);
	}
	name[n] = '\0';
	int k = snprintf(out, cap, "%s/reshard-%s.state%s", dir, name, suffix);
	return k > 0 && (size_t)k < cap;
}

const struct config_server *rs_primary(const struct config_shard *sh)
{
	for (size_t i = 0; i < sh->n_servers; i++)
		if (sh->servers[i].role == SERVER_ROLE_PRIMARY)
			return &sh->servers[i];
	/* A lone server of role auto is the shard's primary. */
	return sh->n_servers == 1 && sh->servers[0].role == SERVER_ROLE_AUTO ? &sh->servers[0] : NULL;
}

void rs_layout_text(const struct config_shard *shards, size_t n, char *out, size_t cap)
{
	size_t used = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const struct config_server *sv = rs_primary(&shards[i]);
		int k = snprintf(out + used, cap - used, "%s%s:%d/%s", i ? "," : "", sv ? sv->host : "?", sv ? sv->port : 0,
				 shards[i].database);
		if (k < 0 || (size_t)k >= cap - used) {
			out[used] = '\0';
			return;
		}
		used += (size_t)k;
	}
}

bool rs_state_read(const char *dir, const char *pool, struct rs_state *st)
{
	char path[4096];
	memset(st, 0, sizeof *st);
	if (!dir || !dir[0] || !state_path(dir, pool, "", path, sizeof path))
		return false;
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	char line[2400];
	bool have_phase = false;
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = '\0';
		const char *k = line, *v = eq + 1;
		if (strcmp(k, "phase") == 0)
			have_phase = reshard_phase_parse(v, &st->phase);
		else if (strcmp(k, "hold") == 0)
			st->hold = strcmp(v, "1") == 0;
		else if (strcmp(k, "schema") == 0)
			st->schema_done = strcmp(v, "1") == 0;
		else if (strcmp(k, "slots") == 0)
			st->slots = strcmp(v, "1") == 0;
		else if (strcmp(k, "targets") == 0)
			snprintf(st->targets, sizeof st->targets, "%s", v);
		else if (strcmp(k, "sources") == 0)
			snprintf(st->sources, sizeof st->sources, "%s", v);
		else if (strcmp(k, "pause_us") == 0)
			st->pause_us = strtoull(v, NULL, 10);
		else if (strcmp(k, "error") == 0)
			snprintf(st->error, sizeof st->error, "%s", v);
	}
	fclose(f);
	return have_phase;
}

static bool write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		p += k;
		n -= (size_t)k;
	}
	return true;
}

bool rs_state_write(const char *dir, const char *pool, const struct rs_state *st, char *why, size_t whylen)
{
	char path[4096], tmp[4096];
	if (!dir || !dir[0] || !state_path(dir, pool, "", path, sizeof path) ||
	    !state_path(dir, pool, ".tmp", tmp, sizeof tmp)) {
		snprintf(why, whylen, "state_dir is not set or too long");
		return false;
	}
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		snprintf(why, whylen, "cannot create state_dir %s: %s", dir, strerror(errno));
		return false;
	}
	char text[5400];
	/* An error's text stays on one line. */
	char err[sizeof st->error];
	snprintf(err, sizeof err, "%s", st->error);
	for (char *p = err; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	int n = snprintf(text, sizeof text,
			 "pool=%s\nphase=%s\nhold=%d\nschema=%d\nslots=%d\ntargets=%s\nsources=%s\npause_us=%llu\nerror=%s\n",
			 pool, reshard_phase_name(st->phase), st->hold ? 1 : 0, st->schema_done ? 1 : 0, st->slots ? 1 : 0,
			 st->targets, st->sources,
			 (unsigned long long)st->pause_us, err);
	if (n < 0 || (size_t)n >= sizeof text) {
		snprintf(why, whylen, "state too long");
		return false;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(why, whylen, "cannot write %s: %s", tmp, strerror(errno));
		return false;
	}
	bool ok = write_all(fd, text, (size_t)n) && fsync(fd) == 0;
	int saved = errno;
	close(fd);
	if (!ok || rename(tmp, path) != 0) {
		snprintf(why, whylen, "cannot write %s: %s", path, strerror(ok ? errno : saved));
		(void)unlink(tmp);
		return false;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		ok = fsync(dfd) == 0;
		close(dfd);
	} else {
		ok = false;
	}
	if (!ok) {
		snprintf(why, whylen, "cannot sync %s: %s", dir, strerror(errno));
		return false;
	}
	return true;
}
