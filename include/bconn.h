/* SPDX-License-Identifier: MIT */
/*
 * bconn: a connection of pgcat's own to a server, outside the pools (the
 * lag monitor's, auth_query's). It connects to an address already
 * resolved, asks for TLS per [general] server_tls_* (SSLRequest, or a
 * direct handshake), sends the StartupMessage with the owner's
 * application_name, and logs in through auth_backend.c (cleartext, md5,
 * SCRAM with a password or passed-through keys). Then the owner sends
 * messages (a simple Query, or Parse/Bind/Execute/Sync with text
 * parameters) and is handed every backend message but the few of the
 * login (ParameterStatus, BackendKeyData, NoticeResponse,
 * NegotiateProtocolVersion are read and dropped) through its events.
 *
 * A relay (a replication client's connection, session_replication.c)
 * sends the client's startup parameters too, is handed the login's
 * ParameterStatus, and once ready the server's bytes as they come, unread
 * (on_bytes): a message of any length streams through, none is held
 * whole.
 *
 * It knows nothing of timeouts or logs: the owner reads the state and its
 * age (bconn_state_since) and gives up by bconn_close. The struct is
 * embedded in the owner; nothing is allocated per message (a message is
 * handed over in place, in the input buffer).
 */
#ifndef PGCAT_BCONN_H
#define PGCAT_BCONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "auth_backend.h"
#include "auth_scram.h"
#include "io.h"
#include "types.h"

enum bconn_state {
	BCONN_CLOSED,         /* no socket */
	BCONN_CONNECTING,     /* TCP connect under way */
	BCONN_TLS_ANSWER,     /* SSLRequest sent, waiting for 'S' or 'N' */
	BCONN_TLS_HANDSHAKE,  /* TLS handshake under way */
	BCONN_LOGIN,          /* startup sent; authentication */
	BCONN_READY           /* logged in (the owner's messages flow) */
};

/* What is the same for every connection of one owner (a static const
 * of its own: bconn keeps the pointer). */
struct bconn_profile {
	const char *application_name; /* how pg_stat_activity shows it */
	/* Put before the reason when the login fails: the authentication
	 * exchange (auth_failed), an ErrorResponse (refused); NULL: nothing. */
	const char *auth_failed;
	const char *refused;
	size_t max_message;           /* a longer message from the server: down */
	size_t read_high;             /* io.c's read high-water mark */
	bool relay;                   /* the login's ParameterStatus to the owner (above) */
};

struct bconn {
	struct io io;
	struct worker *w;
	/* The owner's events (bconn_init), with its arg. */
	void (*on_ready)(void *arg);
	bool (*on_message)(void *arg, uint8_t type, const uint8_t *body, size_t len);
	void (*on_down)(void *arg, const char *why);
	void *arg;
	enum bconn_state state;
	uint64_t state_since_us;      /* w->now_us when it entered the state */
	const struct bconn_profile *profile;
	const char *host;             /* the owner's, as database: kept while open */
	int port;
	const char *database;
	bool unix_socket;             /* the address is a Unix socket: no TLS there (as libpq) */
	/* Login: user (kept until bconn_release), password and SCRAM
	 * pass-through keys (wiped once logged in or closed). */
	char *user;
	char *password;
	bool have_passthrough;
	uint8_t passthrough_client_key[SCRAM_KEY_LEN];
	uint8_t passthrough_server_key[SCRAM_KEY_LEN];
	struct auth_backend auth;
	/* A relay's: the client's startup parameters (its application_name
	 * instead of the profile's) and the replication parameter's value,
	 * sent in the StartupMessage; set before bconn_open, kept by the
	 * owner while open. NULL: none. */
	const struct params *startup_params;
	const char *replication;
	/* The server's own words when it refused the login (its
	 * ErrorResponse's message; "" otherwise), for an owner that passes
	 * them on. */
	char server_error[256];
	/* Its output drained (a relay's backpressure); NULL: not told. */
	void (*on_drain)(void *arg);
	/* Ready, and every whole message read so far went to on_message (the
	 * input holds none): an owner that gathers what the messages ask for
	 * acts on it now. NULL: not told. */
	void (*on_read_done)(void *arg);
	/* A relay's, once ready: the server's input, unread; the owner
	 * removes what it takes (what it leaves comes again with the next
	 * read or bconn_pause(false)). It may close the connection. NULL:
	 * messages through on_message. */
	void (*on_bytes)(void *arg, struct buf *in);
};

/* Once, on zeroed memory: closed, no login. The owner's events, each
 * called with arg:
 * - on_ready: the login is done (ReadyForQuery); the owner may send.
 * - on_message: a message of the server (type, body without type and
 *   length). During the login only those the login does not use come
 *   here. false: the owner does not expect this type; the connection goes
 *   down with "the server sent an unexpected message". The owner may
 *   close it here.
 * - on_down: the connection failed (why: a text for the log, with the
 *   profile's auth_failed or refused before the server's reason when the
 *   login failed). It is still open while this runs (bconn_close in it,
 *   or it is closed on return); the owner must not free it here. */
void bconn_init(struct bconn *b, struct worker *w, void (*on_ready)(void *arg),
		bool (*on_message)(void *arg, uint8_t type, const uint8_t *body, size_t len),
		void (*on_down)(void *arg, const char *why), void *arg);
/* Whom to log in as (copies; user NULL: ""); the keys are SCRAM_KEY_LEN
 * bytes each, or NULL. false: out of memory (no login set). */
bool bconn_set_login(struct bconn *b, const char *user, const char *password, const uint8_t *client_key,
		     const uint8_t *server_key) __attribute__((warn_unused_result));
/* Connect to addr (resolved; host names it for SNI and
 * server_tls_sslmode = verify-full) and log in to database, as set by
 * bconn_set_login. host and database must live while it is open. false:
 * the connect could not start; the down event has run and it is closed. */
bool bconn_open(struct bconn *b, const struct bconn_profile *profile, const char *host, int port,
		const struct sockaddr *addr, socklen_t addrlen, const char *database);
/* Take over fd, a connection logged in and between commands that
 * another process made (-R, notify_move.c): ready at once, reading
 * stopped (bconn_pause(b, false) starts it: what the owner needs to know
 * first, it sets up before). host and database as for bconn_open. false:
 * out of memory or no room on the worker's ring (fd closed). */
bool bconn_adopt(struct bconn *b, const struct bconn_profile *profile, int fd, const char *host, int port,
		 const char *database) __attribute__((warn_unused_result));
/* Close (if open); terminate: send Terminate first when logged
 * in. The password and keys are wiped; the user stays. */
void bconn_close(struct bconn *b, bool terminate);
/* Close and free what it holds (b itself is the owner's). */
void bconn_release(struct bconn *b);

static inline enum bconn_state bconn_state(const struct bconn *b)
{
	return b->state;
}
static inline uint64_t bconn_state_since(const struct bconn *b)
{
	return b->state_since_us;
}
static inline const char *bconn_user(const struct bconn *b)
{
	return b->user ? b->user : "";
}

/* A relay's backpressure: stop reading the server, or read on (and hand
 * over at once what came in meanwhile). */
void bconn_pause(struct bconn *b, bool paused);

/* Sending, once ready. false: the message would be too long (nothing sent). */
bool bconn_query(struct bconn *b, const char *sql) __attribute__((warn_unused_result));
/* One message of any type (CopyData, CopyDone...); body len bytes, at
 * most INT32_MAX - 4 (the caller's). */
void bconn_send(struct bconn *b, uint8_t type, const void *body, size_t len);
/* Parse (unnamed, types inferred), Bind (params in text, results in text),
 * Execute (all rows), Sync. */
bool bconn_extended(struct bconn *b, const char *sql, size_t n_params, const char *const *params)
	__attribute__((warn_unused_result));

#endif
