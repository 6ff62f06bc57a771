/* SPDX-License-Identifier: MIT */
/*
 * io_tls_close: a TLS connection's last output and close_notify, written
 * after its owner is gone (io_close), for at most IO_TLS_CLOSE_MS.
 */
#ifndef PGCAT_IO_TLS_CLOSE_H
#define PGCAT_IO_TLS_CLOSE_H

#include <event2/util.h>
#include <stdbool.h>

#include "list.h"

struct event_base;
struct buf;
typedef struct ssl_st SSL;

/* A TLS connection first writes what is queued and a close_notify
 * (SSL_shutdown), as PostgreSQL ends its TLS connections: libpq 17 reports
 * an end without one as "unexpected eof". What the socket does not take at
 * once is sent from the event loop, for at most IO_TLS_CLOSE_MS. */
#define IO_TLS_CLOSE_MS 5000

/* Writes what out holds (NULL: nothing) and a close_notify as far as the
 * socket takes them now. true: the rest is left to the event loop, and
 * ssl, fd and out belong to an entry in closing from here on; false: all
 * was written (or the peer is gone, or no memory for the wait), and the
 * caller frees them. */
bool io_tls_close_begin(struct list_node *closing, struct event_base *base, SSL *ssl, evutil_socket_t fd,
			struct buf *out);
/* Ends every entry of closing now (the worker exits). */
void io_tls_close_drop_all(struct list_node *closing);

#endif
