/* SPDX-License-Identifier: MIT */
#ifndef PGCAT_RANDPOOL_H
#define PGCAT_RANDPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Random bytes for logins (md5 salts, SCRAM nonces, cancel keys), drawn
 * from OpenSSL's generator a block at a time. Each RAND_bytes call costs
 * far more than the few bytes a login needs (generator lookup, fork check
 * with getpid, reseed test), so one call now serves dozens of logins. The
 * bytes are as strong as RAND_bytes' own; each is handed out once and
 * wiped from the pool as it goes. A pool belongs to one process (a
 * worker makes its own after fork) and is never copied.
 */
#define RANDPOOL_SIZE 1024u

struct randpool {
	uint32_t avail;          /* unused bytes: buf[0 .. avail) */
	uint8_t buf[RANDPOOL_SIZE];
};

void randpool_init(struct randpool *r);
/* len bytes into out; false if OpenSSL's generator failed. */
bool randpool_bytes(struct randpool *r, void *out, size_t len) __attribute__((warn_unused_result));
/* Forget the unused bytes. */
void randpool_wipe(struct randpool *r);

#endif
