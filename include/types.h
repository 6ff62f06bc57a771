/* SPDX-License-Identifier: MIT */
/* Forward declarations for headers; not a licence for .c files to reach into each other. */
#ifndef PGCAT_TYPES_H
#define PGCAT_TYPES_H
struct worker;
struct client;
struct server;
struct pool;
struct srvpool;
struct config;
struct evbuffer;
#endif
