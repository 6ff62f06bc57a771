/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer targets for the protocol state machines as a whole: a real
 * worker (event loop, pools, client.c, server.c, prepared.c, route.c,
 * admin.c) built from a small pgcat.ini, driven by one input per run.
 *
 *   fuzz_client_sm (FUZZ_SIDE_CLIENT): the input is everything a client
 *     sends, in and out of order (startup, auth, every message type). The
 *     server behind pgcat is an emulator here that answers like PostgreSQL
 *     would (login, Query, Parse/Bind/Describe/Execute/Sync, COPY FROM).
 *   fuzz_server_sm (FUZZ_SIDE_SERVER): a fixed, valid client session goes
 *     through pgcat, and the input is everything the server answers, from
 *     its first byte on (authentication requests, parameter status, results
 *     in and out of order).
 *
 * The client is one end of a socketpair handed to client_accept(); the
 * server is a listening socket of this harness that pgcat connects to.
 * Each run builds a fresh worker, turns its loop without blocking until
 * nothing moves, closes both peers, lets pgcat clean up, and destroys the
 * worker: anything left allocated is a leak that fails the run.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "client.h"
#include "config.h"
#include "log.h"
#include "shm.h"
#include "worker.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAX_SERVER_CONNS 8
#define MAX_ROUNDS 600
#define QUIET_ROUNDS 12        /* rounds without any byte moving: done */
#define SERVER_IN_MAX (256 * 1024)

/* The harness's own state (a test program, not pgcat: statics are fine). */
static struct shm harness_shm;
static int server_listen_fd = -1;
static int server_port, pgcat_port;

struct fake_conn {
	int fd;
	uint8_t *in;               /* bytes from pgcat not yet answered */
	size_t in_len;
	bool started;              /* startup packet seen */
	bool in_copy;
	char tx;                   /* 'I' or 'T' */
};

static struct fake_conn conns[MAX_SERVER_CONNS];
static size_t n_conns;

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof a;
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(fd, (struct sockaddr *)&a, &l) < 0)
		abort();
	close(fd);
	return ntohs(a.sin_port);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (!log_open(LOG_LEVEL_ERROR, "/dev/null", false))
		abort();
	if (!shm_create(&harness_shm, 1, 64))
		abort();
	server_listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int one = 1;
	setsockopt(server_listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof a;
	if (server_listen_fd < 0 || bind(server_listen_fd, (struct sockaddr *)&a, sizeof a) < 0 ||
	    listen(server_listen_fd, 64) < 0 || getsockname(server_listen_fd, (struct sockaddr *)&a, &l) < 0)
		abort();
	server_port = ntohs(a.sin_port);
	pgcat_port = free_port();
	return 0;
}

static struct worker *make_worker(void)
{
	/* The I/O engine as pgcat's default picks it (auto), or as
	 * PGCAT_IO_ENGINE says (epoll, io_uring). */
	const char *engine = getenv("PGCAT_IO_ENGINE");
	if (!engine || !*engine)
		engine = "auto";
	char ini[4096];
	snprintf(ini, sizeof ini,
		 "[general]\n"
		 "listen_addr = 127.0.0.1\n"
		 "listen_port = %d\n"
		 "unix_socket_dir =\n"
		 "workers = 1\n"
		 "io_engine = %s\n"
		 "pool_mode = transaction\n"
		 "auth_type = trust\n"
		 "log_level = error\n"
		 "max_client_conn = 64\n"
		 "default_pool_size = 2\n"
		 "admin_username = admin\n"
		 "admin_password = adminpw\n"
		 "[pools.db]\n"
		 "query_parser_enabled = true\n"
		 "[pools.db.shards.0]\n"
		 "database = db\n"
		 "servers = 127.0.0.1:%d:primary\n"
		 "[pools.db.users.app]\n"
		 "password = pw\n"
		 /* two shards on the same emulated server: cross-shard reads,
		  * split INSERTs and COPY run their fan-out for real */
		 "[pools.sh]\n"
		 "query_parser_enabled = true\n"
		 "sharding_function = pg_bigint_hash\n"
		 "sharded_tables = t.id\n"
		 "[pools.sh.shards.0]\n"
		 "database = db\n"
		 "servers = 127.0.0.1:%d:primary\n"
		 "[pools.sh.shards.1]\n"
		 "database = db\n"
		 "servers = 127.0.0.1:%d:primary\n"
		 "[pools.sh.users.app]\n"
		 "password = pw\n",
		 pgcat_port, engine, server_port, server_port, server_port);
	struct config_problems problems;
	memset(&problems, 0, sizeof problems);
	struct config *cfg = config_load_string(ini, "fuzz.ini", &problems);
	config_problems_free(&problems);
	if (!cfg)
		abort();
	struct worker *w = worker_create(cfg, "", 0, &harness_shm);
	if (!w)
		abort();
	return w;
}

/* ---- writing to pgcat ---- */

static void put_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k <= 0)
			return;   /* pgcat closed, or its buffer is full: the rest is lost, as from a real peer */
		p += k;
		n -= (size_t)k;
	}
}



#ifdef FUZZ_SIDE_CLIENT
/* ---- the server emulator (client-side target) ---- */

static void put_msg(int fd, char type, const void *body, size_t len)
{
	uint8_t hdr[5] = { (uint8_t)type };
	uint32_t l = (uint32_t)len + 4;
	hdr[1] = (uint8_t)(l >> 24);
	hdr[2] = (uint8_t)(l >> 16);
	hdr[3] = (uint8_t)(l >> 8);
	hdr[4] = (uint8_t)l;
	put_all(fd, hdr, 5);
	if (len)
		put_all(fd, body, len);
}

static void put_cstr_msg(int fd, char type, const char *s)
{
	put_msg(fd, type, s, strlen(s) + 1);
}


static void emulate_login(struct fake_conn *fc)
{
	static const uint8_t auth_ok[4] = { 0, 0, 0, 0 };
	put_msg(fc->fd, 'R', auth_ok, 4);
	static const char *const params[][2] = {
		{ "server_version", "15.0" }, { "client_encoding", "UTF8" }, { "DateStyle", "ISO, MDY" },
		{ "TimeZone", "UTC" }, { "integer_datetimes", "on" }, { "standard_conforming_strings", "on" },
	};
	for (size_t i = 0; i < sizeof params / sizeof *params; i++) {
		char b[96];
		size_t a = strlen(params[i][0]) + 1, v = strlen(params[i][1]) + 1;
		memcpy(b, params[i][0], a);
		memcpy(b + a, params[i][1], v);
		put_msg(fc->fd, 'S', b, a + v);
	}
	static const uint8_t key[8] = { 0, 0, 0x30, 0x39, 1, 2, 3, 4 };
	put_msg(fc->fd, 'K', key, 8);
	put_msg(fc->fd, 'Z', "I", 1);
}

static void emulate_query(struct fake_conn *fc, const uint8_t *body, size_t len)
{
	char q[64];
	size_t n = len < sizeof q - 1 ? len : sizeof q - 1;
	memcpy(q, body, n);
	q[n] = '\0';
	if (strncasecmp(q, "begin", 5) == 0 || strncasecmp(q, "start", 5) == 0) {
		fc->tx = 'T';
		put_cstr_msg(fc->fd, 'C', "BEGIN");
	} else if (strncasecmp(q, "commit", 6) == 0 || strncasecmp(q, "rollback", 8) == 0) {
		fc->tx = 'I';
		put_cstr_msg(fc->fd, 'C', "COMMIT");
	} else if (strncasecmp(q, "copy", 4) == 0 && strcasestr(q, "stdin")) {
		static const uint8_t copy_in[3] = { 0, 0, 0 };
		put_msg(fc->fd, 'G', copy_in, 3);
		fc->in_copy = true;
		return;
	} else if (strncasecmp(q, "set", 3) == 0) {
		put_cstr_msg(fc->fd, 'C', "SET");
	} else if (strncasecmp(q, "select 1/0", 10) == 0) {
		static const char err[] = "SERROR\0C22012\0Mdivision by zero\0";
		put_msg(fc->fd, 'E', err, sizeof err);
	} else {
		static const uint8_t rowdesc[] = { 0, 1, 'x', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 23, 0, 4, 0xff, 0xff, 0xff, 0xff, 0, 0 };
		static const uint8_t row[] = { 0, 1, 0, 0, 0, 1, '1' };
		put_msg(fc->fd, 'T', rowdesc, sizeof rowdesc);
		put_msg(fc->fd, 'D', row, sizeof row);
		put_cstr_msg(fc->fd, 'C', "SELECT 1");
	}
	put_msg(fc->fd, 'Z', &fc->tx, 1);
}

/* Answers every whole message in fc->in; returns false to hang up. */
static bool emulate(struct fake_conn *fc)
{
	size_t off = 0;
	for (;;) {
		size_t left = fc->in_len - off;
		const uint8_t *p = fc->in + off;
		if (!fc->started) {
			if (left < 8)
				break;
			uint32_t len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
			uint32_t code = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
			if (len < 8 || len > 10000)
				return false;
			if (left < len)
				break;
			off += len;
			if (code == 80877102)      /* CancelRequest: nothing to cancel here */
				return false;
			if (code == 80877103) {    /* SSLRequest */
				put_all(fc->fd, (const uint8_t *)"N", 1);
				continue;
			}
			fc->started = true;
			emulate_login(fc);
			continue;
		}
		if (left < 5)
			break;
		uint32_t len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
		if (len < 4 || len > SERVER_IN_MAX)
			return false;
		if (left < (size_t)len + 1)
			break;
		const uint8_t *body = p + 5;
		size_t blen = len - 4;
		off += (size_t)len + 1;
		switch (p[0]) {
		case 'Q': emulate_query(fc, body, blen); break;
		case 'P': put_msg(fc->fd, '1', NULL, 0); break;
		case 'B': put_msg(fc->fd, '2', NULL, 0); break;
		case 'D': put_msg(fc->fd, 'n', NULL, 0); break;
		case 'E': put_cstr_msg(fc->fd, 'C', "SELECT 0"); break;
		case 'C': put_msg(fc->fd, '3', NULL, 0); break;
		case 'S': put_msg(fc->fd, 'Z', &fc->tx, 1); break;
		case 'H': break;
		case 'F': {
			static const uint8_t v[4] = { 0xff, 0xff, 0xff, 0xff };
			put_msg(fc->fd, 'V', v, 4);
			put_msg(fc->fd, 'Z', &fc->tx, 1);
			break;
		}
		case 'd': break;
		case 'c':
		case 'f':
			if (fc->in_copy) {
				fc->in_copy = false;
				put_cstr_msg(fc->fd, 'C', "COPY 0");
				put_msg(fc->fd, 'Z', &fc->tx, 1);
			}
			break;
		case 'X': return false;
		default: return false;     /* PostgreSQL would close too */
		}
	}
	memmove(fc->in, fc->in + off, fc->in_len - off);
	fc->in_len -= off;
	return true;
}
#endif

/* ---- one run ---- */

static void close_conn(struct fake_conn *fc)
{
	if (fc->fd >= 0)
		close(fc->fd);
	fc->fd = -1;
	free(fc->in);
	fc->in = NULL;
	fc->in_len = 0;
}

/* Accepts, reads and answers on the server side; returns bytes moved. */
static size_t server_step(const uint8_t *reply, size_t reply_len)
{
	size_t moved = 0;
	for (;;) {
		int fd = accept4(server_listen_fd, NULL, NULL, SOCK_NONBLOCK);
		if (fd < 0)
			break;
		if (n_conns == MAX_SERVER_CONNS) {
			close(fd);
			continue;
		}
		struct fake_conn *fc = &conns[n_conns++];
		memset(fc, 0, sizeof *fc);
		fc->fd = fd;
		fc->tx = 'I';
#ifdef FUZZ_SIDE_SERVER
		put_all(fd, reply, reply_len);
#endif
		moved++;
	}
	(void)reply;
	(void)reply_len;
	for (size_t i = 0; i < n_conns; i++) {
		struct fake_conn *fc = &conns[i];
		if (fc->fd < 0)
			continue;
		uint8_t buf[16384];
		ssize_t k;
		while ((k = recv(fc->fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
			moved += (size_t)k;
#ifdef FUZZ_SIDE_CLIENT
			if (fc->in_len + (size_t)k > SERVER_IN_MAX) {
				close_conn(fc);
				break;
			}
			uint8_t *grown = realloc(fc->in, fc->in_len + (size_t)k);
			if (!grown)
				abort();
			fc->in = grown;
			memcpy(fc->in + fc->in_len, buf, (size_t)k);
			fc->in_len += (size_t)k;
#endif
		}
		if (fc->fd >= 0 && k == 0) {
			close_conn(fc);
			continue;
		}
#ifdef FUZZ_SIDE_CLIENT
		if (fc->fd >= 0 && !emulate(fc))
			close_conn(fc);
#endif
	}
	return moved;
}

static size_t drain(int fd)
{
	uint8_t buf[16384];
	size_t moved = 0;
	ssize_t k;
	while ((k = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
		moved += (size_t)k;
	return moved;
}

static void turn_until_quiet(struct worker *w, int client_fd, const uint8_t *reply, size_t reply_len)
{
	int quiet = 0;
	for (int round = 0; round < MAX_ROUNDS && quiet < QUIET_ROUNDS; round++) {
		event_base_loop(w->base, EVLOOP_NONBLOCK);
		size_t moved = server_step(reply, reply_len);
		if (client_fd >= 0)
			moved += drain(client_fd);
		quiet = moved ? 0 : quiet + 1;
	}
}

#ifdef FUZZ_SIDE_SERVER
struct script {
	uint8_t b[512];
	size_t n;
};

static void add(struct script *sc, const void *p, size_t n)
{
	if (sc->n + n > sizeof sc->b)
		abort();
	if (n)
		memcpy(sc->b + sc->n, p, n);
	sc->n += n;
}

static void add_u32(struct script *sc, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
	add(sc, b, 4);
}

static void add_msg(struct script *sc, char type, const void *body, size_t len)
{
	add(sc, &type, 1);
	add_u32(sc, (uint32_t)len + 4);
	add(sc, body, len);
}

/* The client's side of the session: login, a simple query, an extended
 * query with a named statement, a transaction with a SET, then goodbye. */
static void client_script(struct script *sc)
{
	static const char params[] = "user\0app\0database\0db\0application_name\0fuzz\0";   /* + final NUL */
	add_u32(sc, 8 + (uint32_t)sizeof params);
	add_u32(sc, 196608);                            /* protocol 3.0 */
	add(sc, params, sizeof params);
	add_msg(sc, 'Q', "SELECT 1", 9);
	add_msg(sc, 'P', "s1\0SELECT $1\0\0", 15);   /* name, text, int16 0 parameter types (the literal's NUL ends it) */
	static const uint8_t bind[] = { 0, 's', '1', 0, 0, 0, 0, 1, 0, 0, 0, 1, '1', 0, 0 };
	add_msg(sc, 'B', bind, sizeof bind);
	add_msg(sc, 'D', "P", 2);
	static const uint8_t exec[] = { 0, 0, 0, 0, 0 };
	add_msg(sc, 'E', exec, sizeof exec);
	add_msg(sc, 'S', NULL, 0);
	add_msg(sc, 'Q', "BEGIN", 6);
	add_msg(sc, 'Q', "SET x = 1", 10);
	add_msg(sc, 'Q', "COMMIT", 7);
	add_msg(sc, 'X', NULL, 0);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct worker *w = make_worker();
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) < 0)
		abort();
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	n_conns = 0;
	client_accept(w, sv[0], (struct sockaddr *)&un, sizeof un, true);
#ifdef FUZZ_SIDE_CLIENT
	put_all(sv[1], data, size);
	turn_until_quiet(w, sv[1], NULL, 0);
#else
	struct script sc = { .n = 0 };
	client_script(&sc);
	put_all(sv[1], sc.b, sc.n);
	turn_until_quiet(w, sv[1], data, size);
#endif
	/* The client goes away, then the server: pgcat cleans up after both. */
	close(sv[1]);
	turn_until_quiet(w, -1, NULL, 0);
	for (size_t i = 0; i < n_conns; i++)
		close_conn(&conns[i]);
	turn_until_quiet(w, -1, NULL, 0);
	worker_destroy(w);
	return 0;
}
