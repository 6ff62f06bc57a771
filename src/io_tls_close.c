/* SPDX-License-Identifier: MIT */
/*
 * io_tls_close: the end of a TLS connection whose owner closed it while
 * its output or close_notify could not all be written at once (io_close):
 * the socket, the SSL and what was still queued live on here, written
 * from the event loop when the socket takes more, for at most
 * IO_TLS_CLOSE_MS, then freed. Knows nothing of io.c's connections.
 */
#include "io_tls_close.h"

#include "buf.h"

#include <event2/event.h>
#include <event2/event_struct.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <unistd.h>

struct tls_closing {
	struct list_node node;     /* in flusher->tls_closing */
	struct event ev;           /* writability or the deadline */
	struct timeval deadline;
	SSL *ssl;
	struct buf *out;           /* NULL or what was still queued */
	evutil_socket_t fd;
};

enum tls_close_step { TLS_CLOSE_DONE, TLS_CLOSE_WANT_WRITE };

/* One try at the output, then at close_notify. DONE also when a write
 * failed: the close is best effort, the socket is closed either way. */
static enum tls_close_step tls_close_step(SSL *ssl, struct buf *out)
{
	ERR_clear_error();
	while (out && buf_len(out) > 0) {
		size_t len = buf_len(out);
		int n = SSL_write(ssl, buf_head(out), len > INT_MAX ? INT_MAX : (int)len);
		if (n > 0) {
			buf_drain(out, (size_t)n);
			continue;
		}
		int e = SSL_get_error(ssl, n);
		ERR_clear_error();
		/* WANT_READ would need the peer's bytes (a TLS 1.3 key update):
		 * not worth waiting for at a close. */
		return e == SSL_ERROR_WANT_WRITE ? TLS_CLOSE_WANT_WRITE : TLS_CLOSE_DONE;
	}
	/* 0: close_notify sent; 1: the peer's had come already. */
	int rc = SSL_shutdown(ssl);
	if (rc >= 0)
		return TLS_CLOSE_DONE;
	int e = SSL_get_error(ssl, rc);
	ERR_clear_error();
	return e == SSL_ERROR_WANT_WRITE ? TLS_CLOSE_WANT_WRITE : TLS_CLOSE_DONE;
}

static void tls_closing_free(struct tls_closing *tc)
{
	list_del(&tc->node);
	event_del(&tc->ev);
	SSL_free(tc->ssl);
	buf_free(tc->out);
	close(tc->fd);
	free(tc);
}

/* Arm for writability, with what is left of the time allowed; false when
 * the time is up (or the event cannot be added). */
static bool tls_closing_arm(struct tls_closing *tc)
{
	struct timeval now, left;
	if (event_base_gettimeofday_cached(event_get_base(&tc->ev), &now) < 0)
		return false;
	if (!evutil_timercmp(&now, &tc->deadline, <))
		return false;
	evutil_timersub(&tc->deadline, &now, &left);
	return event_add(&tc->ev, &left) == 0;
}

static void tls_closing_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tls_closing *tc = arg;
	(void)fd;
	if ((what & EV_TIMEOUT) || tls_close_step(tc->ssl, tc->out) == TLS_CLOSE_DONE || !tls_closing_arm(tc))
		tls_closing_free(tc);
}

bool io_tls_close_begin(struct list_node *closing, struct event_base *base, SSL *ssl, evutil_socket_t fd,
			struct buf *out)
{
	if (SSL_in_init(ssl) || tls_close_step(ssl, out) == TLS_CLOSE_DONE)
		return false;
	struct tls_closing *tc = calloc(1, sizeof *tc);
	if (!tc)
		return false;
	struct timeval now, span = { IO_TLS_CLOSE_MS / 1000, (IO_TLS_CLOSE_MS % 1000) * 1000 };
	if (event_assign(&tc->ev, base, fd, EV_WRITE, tls_closing_cb, tc) < 0 ||
	    event_base_gettimeofday_cached(base, &now) < 0) {
		free(tc);
		return false;
	}
	evutil_timeradd(&now, &span, &tc->deadline);
	if (!tls_closing_arm(tc)) {
		free(tc);
		return false;
	}
	tc->ssl = ssl;
	tc->fd = fd;
	tc->out = out;
	list_add_tail(closing, &tc->node);
	return true;
}

void io_tls_close_drop_all(struct list_node *closing)
{
	struct list_node *pos, *tmp;
	if (closing->next)
		LIST_FOREACH_SAFE(pos, tmp, closing)
			tls_closing_free(LIST_OWNER(pos, struct tls_closing, node));
}
