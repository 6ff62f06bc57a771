/* SPDX-License-Identifier: MIT */
/*
 * twophase: gids, the decision log and the worker's cross-shard commits
 * under way (include/twophase.h). Nothing here talks to a server.
 */
#include "twophase.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "auth_md5.h"
#include "config.h"
#include "context.h"
#include "grow.h"
#include "hexdigit.h"
#include "log.h"

/* The own log is rewritten (keeping only what may still be needed) once
 * it grows past this: 8 bytes or so per cross-shard commit. */
#define LOG_ROTATE_BYTES (1024u * 1024)

struct flight {
	uint64_t seq;
	bool logged;       /* its commit line is in the log */
};

/* A decision waiting for the loop turn's write and sync. */
struct pending_line {
	uint64_t seq;
	twophase_logged_fn done;
	void *arg;
};

struct unfinished {
	uint64_t seq;      /* committed; some shard may still hold it prepared */
	bool seen;         /* found on a shard in this pass */
};

/* A dead generation's log, read once per pass (worker 0). */
struct dead_log {
	struct twophase_gen gen;
	uint64_t *seqs;
	size_t n;
	bool readable;
	bool seen;         /* a gid of it was found in this pass */
};

struct twophase {
	struct worker *w;
	struct twophase_gen self;
	char *dir;
	int fd;                        /* the own log; -1 until the first decision */
	uint64_t log_bytes;
	uint64_t next_seq;
	struct flight *flight;
	size_t n_flight, cap_flight;
	struct unfinished *unf;
	size_t n_unf, cap_unf;
	struct dead_log *dead;
	size_t n_dead, cap_dead;
	struct pending_line *pend;     /* decisions of this loop turn */
	size_t n_pend, cap_pend;
	struct pending_line *flushing; /* those being answered (flush_cb) */
	size_t n_flushing;
	struct event *flush;           /* made active by the first of them */
	enum twophase_hook hook;
	unsigned pause_ms;             /* the hook stalls the loop this long instead of killing */
};

/* ---- names ---- */

void twophase_gid_format(char *buf, size_t len, const struct twophase_gid *g)
{
	snprintf(buf, len, "pgcat_%d_%08" PRIx32 "_%" PRIu32 "_%" PRIu64 "_%08" PRIx32 "_%" PRIu64 "_%d", g->peer_id,
		 g->gen.host, g->gen.pid, g->gen.start, g->gen.nonce, g->seq, g->shard);
}

/* Reads a decimal number up to sep; *s moves past sep. */
static bool read_u64(const char **s, char sep, uint64_t max, uint64_t *out)
{
	const char *p = *s;
	uint64_t v = 0;
	if (*p < '0' || *p > '9')
		return false;
	while (*p >= '0' && *p <= '9') {
		unsigned d = (unsigned)(*p - '0');
		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
		p++;
	}
	if (*p != sep)
		return false;
	*s = sep ? p + 1 : p;
	*out = v;
	return true;
}

static bool read_hex32(const char **s, char sep, uint32_t *out)
{
	const char *p = *s;
	uint32_t v = 0;
	int n = 0;
	for (; n < 8; n++, p++) {
		/* Lower case only: pgcat writes its gids and log names so, and
		 * one spelling per value keeps "is this mine" a plain compare. */
		int d = hex_digit_value((unsigned char)*p);
		if (d < 0 || (*p >= 'A' && *p <= 'F'))
			break;
		v = v << 4 | (uint32_t)d;
	}
	if (n != 8 || *p != sep)
		return false;
	*s = p + 1;
	*out = v;
	return true;
}

static bool read_gen(const char **s, char sep, struct twophase_gen *g)
{
	uint64_t pid, start;
	if (!read_hex32(s, sep, &g->host) || !read_u64(s, sep, UINT32_MAX, &pid) ||
	    !read_u64(s, sep, UINT64_MAX, &start) || !read_hex32(s, sep, &g->nonce))
		return false;
	g->pid = (uint32_t)pid;
	g->start = start;
	return true;
}

bool twophase_gid_parse(const char *s, struct twophase_gid *g)
{
	uint64_t peer, shard;
	if (strncmp(s, "pgcat_", 6) != 0)
		return false;
	s += 6;
	if (!read_u64(&s, '_', INT32_MAX, &peer) || !read_gen(&s, '_', &g->gen) || !read_u64(&s, '_', UINT64_MAX, &g->seq) ||
	    !read_u64(&s, '\0', INT32_MAX, &shard))
		return false;
	g->peer_id = (int)peer;
	g->shard = (int)shard;
	return true;
}

bool twophase_log_path(char *buf, size_t len, const char *dir, const struct twophase_gen *g)
{
	int n = snprintf(buf, len, "%s/2pc-%08" PRIx32 "-%" PRIu32 "-%" PRIu64 "-%08" PRIx32 ".log", dir, g->host, g->pid,
			 g->start, g->nonce);
	return n > 0 && (size_t)n < len;
}

bool twophase_log_name_parse(const char *name, struct twophase_gen *g)
{
	if (strncmp(name, "2pc-", 4) != 0)
		return false;
	const char *s = name + 4;
	uint64_t pid, start;
	if (!read_hex32(&s, '-', &g->host) || !read_u64(&s, '-', UINT32_MAX, &pid) ||
	    !read_u64(&s, '-', UINT64_MAX, &start) || !read_hex32(&s, '.', &g->nonce) || strcmp(s, "log") != 0)
		return false;
	g->pid = (uint32_t)pid;
	g->start = start;
	return true;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

bool twophase_log_read(const char *text, size_t len, uint64_t **seqs, size_t *n)
{
	*seqs = NULL;
	*n = 0;
	size_t cap = 0;
	size_t i = 0;
	while (i < len) {
		const char *nl = memchr(text + i, '\n', len - i);
		if (!nl)
			break;   /* torn: not a decision */
		size_t l = (size_t)(nl - (text + i));
		char line[40];
		if (l > 7 && l < sizeof line && memcmp(text + i, "commit ", 7) == 0) {
			memcpy(line, text + i + 7, l - 7);
			line[l - 7] = '\0';
			const char *p = line;
			uint64_t seq;
			if (read_u64(&p, '\0', UINT64_MAX, &seq)) {
				if (*n == cap) {
					size_t nc = cap ? cap * 2 : 64;
					uint64_t *m = realloc(*seqs, nc * sizeof *m);
					if (!m) {
						free(*seqs);
						*seqs = NULL;
						*n = 0;
						return false;
					}
					*seqs = m;
					cap = nc;
				}
				(*seqs)[(*n)++] = seq;
			}
		}
		i += l + 1;
	}
	if (*n > 1)
		qsort(*seqs, *n, sizeof **seqs, cmp_u64);
	return true;
}

bool twophase_seq_in(const uint64_t *seqs, size_t n, uint64_t seq)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (seqs[mid] == seq)
			return true;
		if (seqs[mid] < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

/* ---- the process ---- */

/* Field 22 of /proc/<pid>/stat: when the process started, in clock ticks
 * after boot. false: no such process. */
static bool proc_start(uint32_t pid, uint64_t *start)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%" PRIu32 "/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* The name (field 2) may hold spaces and parentheses: count from the last ')'. */
	char *p = strrchr(buf, ')');
	if (!p)
		return false;
	p++;
	for (int field = 2; field < 21; field++) {
		p = strchr(p + 1, ' ');
		if (!p)
			return false;
	}
	const char *q = p + 1;
	return read_u64(&q, ' ', UINT64_MAX, start);
}

static bool same_gen(const struct twophase_gen *a, const struct twophase_gen *b)
{
	return a->host == b->host && a->pid == b->pid && a->start == b->start && a->nonce == b->nonce;
}

/* This machine: the first 8 hex digits of /etc/machine-id, else a hash
 * (FNV-1a) of the host name. */
static uint32_t machine_id(void)
{
	char buf[64] = "";
	int fd = open("/etc/machine-id", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, 8);
		close(fd);
		const char *p = buf;
		uint32_t v;
		if (n == 8) {
			buf[8] = '_';
			if (read_hex32(&p, '_', &v))
				return v;
		}
	}
	if (gethostname(buf, sizeof buf - 1) != 0)
		return 0;
	buf[sizeof buf - 1] = '\0';
	uint32_t h = 2166136261u;
	for (const char *p = buf; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	return h;
}

/* Another process of this generation runs (its pid, started then). The
 * nonce cannot be checked from outside; this process's own pid with
 * another nonce is a generation before an exec: dead. */
static bool gen_alive(const struct twophase *tp, const struct twophase_gen *g)
{
	if (g->pid == tp->self.pid)
		return same_gen(g, &tp->self);
	uint64_t start;
	return proc_start(g->pid, &start) && start == g->start;
}

static enum twophase_hook hook_of(const char *s)
{
	if (!s)
		return TWOPHASE_HOOK_NONE;
	if (strcmp(s, "after_prepare") == 0)
		return TWOPHASE_HOOK_AFTER_PREPARE;
	if (strcmp(s, "after_log") == 0)
		return TWOPHASE_HOOK_AFTER_LOG;
	if (strcmp(s, "between_commits") == 0)
		return TWOPHASE_HOOK_BETWEEN_COMMITS;
	return TWOPHASE_HOOK_NONE;
}

static void flush_cb(evutil_socket_t fd, short what, void *arg);

struct twophase *twophase_new(struct worker *w)
{
	struct twophase *tp = calloc(1, sizeof *tp);
	if (!tp)
		return NULL;
	tp->w = w;
	tp->fd = -1;
	tp->next_seq = 1;
	tp->self.host = machine_id();
	tp->self.pid = (uint32_t)getpid();
	if (!proc_start(tp->self.pid, &tp->self.start))
		tp->self.start = (uint64_t)time(NULL);   /* no /proc: unique enough with the nonce */
	if (!pg_random_bytes(&tp->self.nonce, sizeof tp->self.nonce) || !(tp->dir = strdup(w->cfg->general.state_dir))) {
		free(tp->dir);
		free(tp);
		return NULL;
	}
	if (!(tp->flush = event_new(w->base, -1, 0, flush_cb, tp))) {
		free(tp->dir);
		free(tp);
		return NULL;
	}
	tp->hook = hook_of(getenv("PGCAT_TEST_2PC_CRASH"));
	const char *pause = getenv("PGCAT_TEST_2PC_PAUSE_MS");
	tp->pause_ms = pause ? (unsigned)strtoul(pause, NULL, 10) : 0;
	return tp;
}

static void dead_clear(struct twophase *tp)
{
	for (size_t i = 0; i < tp->n_dead; i++)
		free(tp->dead[i].seqs);
	tp->n_dead = 0;
}

void twophase_free(struct twophase *tp)
{
	if (!tp)
		return;
	if (tp->fd >= 0)
		close(tp->fd);
	dead_clear(tp);
	free(tp->dead);
	free(tp->pend);
	if (tp->flush)
		event_free(tp->flush);
	free(tp->flight);
	free(tp->unf);
	free(tp->dir);
	free(tp);
}

const struct twophase_gen *twophase_self(const struct twophase *tp)
{
	return &tp->self;
}

uint64_t twophase_begin(struct twophase *tp)
{
	if (!grow_for_one(&tp->flight, tp->n_flight, &tp->cap_flight, 16, sizeof *tp->flight))
		return 0;
	uint64_t seq = tp->next_seq++;
	tp->flight[tp->n_flight++] = (struct flight){ .seq = seq };
	return seq;
}

void twophase_gid(const struct twophase *tp, uint64_t seq, int shard, char *buf, size_t len)
{
	struct twophase_gid g = { .peer_id = tp->w->cfg->general.peer_id, .gen = tp->self, .seq = seq, .shard = shard };
	twophase_gid_format(buf, len, &g);
}

static struct flight *flight_find(struct twophase *tp, uint64_t seq)
{
	for (size_t i = 0; i < tp->n_flight; i++)
		if (tp->flight[i].seq == seq)
			return &tp->flight[i];
	return NULL;
}

static struct unfinished *unf_find(struct twophase *tp, uint64_t seq)
{
	for (size_t i = 0; i < tp->n_unf; i++)
		if (tp->unf[i].seq == seq)
			return &tp->unf[i];
	return NULL;
}

/* A whole buffer to fd. */
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

/* A new file's name is durable once its directory is synced. */
static bool sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool ok = fsync(fd) == 0;
	close(fd);
	return ok;
}

static bool open_log(struct twophase *tp, char *why, size_t whylen)
{
	char path[TWOPHASE_PATH_MAX];
	if (!twophase_log_path(path, sizeof path, tp->dir, &tp->self)) {
		snprintf(why, whylen, "state_dir is too long");
		return false;
	}
	if (mkdir(tp->dir, 0700) != 0 && errno != EEXIST) {
		snprintf(why, whylen, "cannot create state_dir %s: %s", tp->dir, strerror(errno));
		return false;
	}
	tp->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (tp->fd < 0 || !sync_dir(tp->dir)) {
		snprintf(why, whylen, "cannot open the decision log %.160s: %.60s", path, strerror(errno));
		if (tp->fd >= 0)
			close(tp->fd);
		tp->fd = -1;
		return false;
	}
	struct stat st;
	tp->log_bytes = fstat(tp->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
	return true;
}

/* The own log keeps only the decisions a shard may still hold prepared:
 * those under way and those left unfinished. Written aside, synced, then
 * renamed over the old one (only this process writes it). */
static void rotate_log(struct twophase *tp)
{
	char path[TWOPHASE_PATH_MAX], tmp[TWOPHASE_PATH_MAX + 8];
	if (!twophase_log_path(path, sizeof path, tp->dir, &tp->self))
		return;
	snprintf(tmp, sizeof tmp, "%s.new", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		goto fail;
	uint64_t bytes = 0;
	bool ok = true;
	char line[40];
	for (size_t i = 0; ok && i < tp->n_flight; i++) {
		if (!tp->flight[i].logged)
			continue;
		int n = snprintf(line, sizeof line, "commit %" PRIu64 "\n", tp->flight[i].seq);
		ok = write_all(fd, line, (size_t)n);
		bytes += (uint64_t)n;
	}
	for (size_t i = 0; ok && i < tp->n_unf; i++) {
		int n = snprintf(line, sizeof line, "commit %" PRIu64 "\n", tp->unf[i].seq);
		ok = write_all(fd, line, (size_t)n);
		bytes += (uint64_t)n;
	}
	if (!ok || fdatasync(fd) != 0 || rename(tmp, path) != 0) {
		close(fd);
		unlink(tmp);
		goto fail;
	}
	(void)sync_dir(tp->dir);
	close(tp->fd);
	tp->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (tp->fd < 0)
		goto fail;
	close(fd);
	tp->log_bytes = bytes;
	return;
fail:
	/* The old log stays whole (or reopens at the next decision). */
	if (fd >= 0)
		close(fd);
	log_warning("two-phase commit: could not rewrite the decision log %s: %s", path, strerror(errno));
	tp->log_bytes = 0;   /* try again after as much again */
}

/* Writes the lines of seqs and syncs them. false: why says why. */
static bool write_lines(struct twophase *tp, const struct pending_line *pl, size_t n, char *why, size_t whylen)
{
	if (tp->fd < 0 && !open_log(tp, why, whylen))
		return false;
	if (tp->log_bytes > LOG_ROTATE_BYTES)
		rotate_log(tp);
	if (tp->fd < 0 && !open_log(tp, why, whylen))
		return false;
	char buf[4096];
	size_t len = 0;
	uint64_t bytes = 0;
	bool ok = true;
	for (size_t i = 0; ok && i < n; i++) {
		char line[40];
		int k = snprintf(line, sizeof line, "commit %" PRIu64 "\n", pl[i].seq);
		if (len + (size_t)k > sizeof buf) {
			ok = write_all(tp->fd, buf, len);
			len = 0;
		}
		memcpy(buf + len, line, (size_t)k);
		len += (size_t)k;
		bytes += (uint64_t)k;
	}
	if (!ok || !write_all(tp->fd, buf, len) || fdatasync(tp->fd) != 0) {
		snprintf(why, whylen, "cannot write the decision log in %s: %s", tp->dir, strerror(errno));
		/* What was written is not known to be on disk: the file is
		 * reopened (appended to) at the next decision. */
		close(tp->fd);
		tp->fd = -1;
		return false;
	}
	tp->log_bytes += bytes;
	return true;
}

bool twophase_log_commit(struct twophase *tp, uint64_t seq, twophase_logged_fn done, void *arg)
{
	if (!grow_for_one(&tp->pend, tp->n_pend, &tp->cap_pend, 16, sizeof *tp->pend))
		return false;
	tp->pend[tp->n_pend++] = (struct pending_line){ .seq = seq, .done = done, .arg = arg };
	if (tp->n_pend == 1)
		event_active(tp->flush, EV_TIMEOUT, 0);   /* after this turn's other events */
	return true;
}

void twophase_log_cancel(struct twophase *tp, uint64_t seq)
{
	for (size_t i = 0; i < tp->n_flushing; i++)
		if (tp->flushing[i].seq == seq)
			tp->flushing[i].done = NULL;   /* (its fan-out went during another's answer) */
	for (size_t i = 0; i < tp->n_pend; i++) {
		if (tp->pend[i].seq == seq) {
			memmove(&tp->pend[i], &tp->pend[i + 1], (tp->n_pend - i - 1) * sizeof tp->pend[0]);
			tp->n_pend--;
			return;
		}
	}
}

/* The loop turn's decisions: one write, one sync, then each fan-out goes on. */
static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct twophase *tp = arg;
	size_t n = tp->n_pend;
	if (n == 0)
		return;
	struct pending_line *pl = tp->pend;
	tp->pend = NULL;   /* a done may queue the next decision: into a fresh array */
	tp->n_pend = tp->cap_pend = 0;
	char why[256] = "";
	bool ok = write_lines(tp, pl, n, why, sizeof why);
	for (size_t i = 0; i < n; i++) {
		struct flight *f = flight_find(tp, pl[i].seq);
		if (f && ok)
			f->logged = true;
	}
	tp->flushing = pl;
	tp->n_flushing = n;
	for (size_t i = 0; i < n; i++)
		if (pl[i].done)
			pl[i].done(pl[i].arg, ok, why);
	tp->flushing = NULL;
	tp->n_flushing = 0;
	free(pl);
}

void twophase_end(struct twophase *tp, uint64_t seq, bool committed, bool clean)
{
	for (size_t i = 0; i < tp->n_flight; i++) {
		if (tp->flight[i].seq == seq) {
			/* Its line is on disk: committed, whatever the fan-out saw
			 * (it went before hearing so), or a later crash would have
			 * worker 0 commit what this process rolled back. */
			committed = committed || tp->flight[i].logged;
			tp->flight[i] = tp->flight[--tp->n_flight];
			break;
		}
	}
	if (!committed || clean || unf_find(tp, seq))
		return;   /* (a rollback left behind is rolled back: it is in no log) */
	if (tp->n_unf == tp->cap_unf) {
		size_t nc = tp->cap_unf ? tp->cap_unf * 2 : 16;
		struct unfinished *u = realloc(tp->unf, nc * sizeof *u);
		if (!u) {
			/* Kept in the log all the same: worker 0 commits it once this
			 * process is gone. */
			log_warning("two-phase commit: out of memory; transaction %" PRIu64 " is finished after a restart", seq);
			return;
		}
		tp->unf = u;
		tp->cap_unf = nc;
	}
	tp->unf[tp->n_unf++] = (struct unfinished){ .seq = seq };
}

enum twophase_hook twophase_hook(const struct twophase *tp)
{
	return tp->hook;
}

void twophase_hook_reached(const struct twophase *tp, enum twophase_hook at)
{
	if (tp->hook != at || at == TWOPHASE_HOOK_NONE)
		return;
	if (tp->pause_ms) {
		log_info("two-phase commit: test hook: stalled %u ms", tp->pause_ms);
		struct timespec ts = { (time_t)(tp->pause_ms / 1000), (long)(tp->pause_ms % 1000) * 1000000L };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		return;
	}
	log_info("two-phase commit: test hook: killed");
	raise(SIGKILL);
}

/* ---- the resolver's questions ---- */

static struct dead_log *dead_load(struct twophase *tp, const struct twophase_gen *g)
{
	for (size_t i = 0; i < tp->n_dead; i++)
		if (same_gen(&tp->dead[i].gen, g))
			return &tp->dead[i];
	if (!grow_for_one(&tp->dead, tp->n_dead, &tp->cap_dead, 8, sizeof *tp->dead))
		return NULL;
	struct dead_log *d = &tp->dead[tp->n_dead];
	*d = (struct dead_log){ .gen = *g };
	char path[TWOPHASE_PATH_MAX];
	if (!twophase_log_path(path, sizeof path, tp->dir, g))
		return NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		/* No log: that process never decided to commit anything. */
		d->readable = errno == ENOENT;
		if (!d->readable)
			log_warning("two-phase commit: cannot read %s: %s; its transactions stay prepared", path,
				    strerror(errno));
	} else {
		struct stat st;
		char *text = NULL;
		ssize_t got = -1;
		if (fstat(fd, &st) == 0 && (text = malloc((size_t)st.st_size + 1)))
			got = read(fd, text, (size_t)st.st_size);
		close(fd);
		d->readable = got == (ssize_t)st.st_size && twophase_log_read(text, (size_t)got, &d->seqs, &d->n);
		free(text);
		if (!d->readable)
			log_warning("two-phase commit: cannot read %s; its transactions stay prepared", path);
	}
	tp->n_dead++;
	return d;
}

enum twophase_verdict twophase_decide(struct twophase *tp, const struct twophase_gid *g)
{
	if (g->peer_id != tp->w->cfg->general.peer_id || g->gen.host != tp->self.host)
		return TWOPHASE_SKIP;   /* another instance's, or another machine's */
	if (same_gen(&g->gen, &tp->self)) {
		if (flight_find(tp, g->seq))
			return TWOPHASE_SKIP;   /* its fan-out is on it */
		struct unfinished *u = unf_find(tp, g->seq);
		if (u) {
			u->seen = true;
			return TWOPHASE_COMMIT;
		}
		return TWOPHASE_ROLLBACK;
	}
	if (gen_alive(tp, &g->gen) || tp->w->id != 0)
		return TWOPHASE_SKIP;   /* its process finishes it; dead ones are worker 0's */
	struct dead_log *d = dead_load(tp, &g->gen);
	if (!d || !d->readable)
		return TWOPHASE_SKIP;
	d->seen = true;
	return twophase_seq_in(d->seqs, d->n, g->seq) ? TWOPHASE_COMMIT : TWOPHASE_ROLLBACK;
}

bool twophase_has_work(struct twophase *tp)
{
	if (tp->n_flight > 0 || tp->n_unf > 0)
		return true;
	if (tp->w->id != 0)
		return false;
	DIR *d = opendir(tp->dir);
	if (!d)
		return false;
	bool found = false;
	struct dirent *e;
	struct twophase_gen g;
	while (!found && (e = readdir(d)))
		found = twophase_log_name_parse(e->d_name, &g) && g.host == tp->self.host && !same_gen(&g, &tp->self);
	closedir(d);
	return found;
}

void twophase_pass_begin(struct twophase *tp)
{
	for (size_t i = 0; i < tp->n_unf; i++)
		tp->unf[i].seen = false;
	dead_clear(tp);
}

/* Worker 0: the logs of dead generations that nothing on any shard needs. */
static void remove_dead_logs(struct twophase *tp)
{
	DIR *d = opendir(tp->dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct twophase_gen g;
		if (!twophase_log_name_parse(e->d_name, &g) || g.host != tp->self.host || gen_alive(tp, &g))
			continue;
		bool needed = false;
		for (size_t i = 0; i < tp->n_dead; i++)
			if (same_gen(&tp->dead[i].gen, &g) && tp->dead[i].seen)
				needed = true;
		if (needed)
			continue;
		char path[TWOPHASE_PATH_MAX];
		if (twophase_log_path(path, sizeof path, tp->dir, &g) && unlink(path) == 0)
			log_info("two-phase commit: %s removed: its process is gone and nothing of it is left prepared",
				 path);
	}
	closedir(d);
}

void twophase_pass_end(struct twophase *tp, bool all_reached)
{
	if (all_reached) {
		size_t k = 0;
		for (size_t i = 0; i < tp->n_unf; i++)
			if (tp->unf[i].seen)
				tp->unf[k++] = tp->unf[i];
		tp->n_unf = k;
		if (tp->w->id == 0)
			remove_dead_logs(tp);
	}
	dead_clear(tp);
}
