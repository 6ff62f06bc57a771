/* SPDX-License-Identifier: MIT */
/*
 * bans: servers taken out of rotation, with reason and expiry (SPEC §4,
 * §7 BAN/UNBAN, SHOW BANS). A flat table of plain structs, ready to move
 * into shared memory; the balancer asks bans_is_banned() per candidate.
 */
#ifndef PGCAT_BANS_H
#define PGCAT_BANS_H

#include <stdbool.h>
#include <stdint.h>

#define BANS_MAX 256

enum ban_source { BAN_SOURCE_AUTO, BAN_SOURCE_ADMIN };

struct ban {
	bool used;
	char host[256];
	int port;
	int64_t banned_at;        /* wall clock, seconds */
	int64_t until;            /* wall clock, seconds */
	enum ban_source source;
	char reason[96];
};

struct bans {
	struct ban items[BANS_MAX];
};

bool bans_set(struct bans *b, const char *host, int port, int64_t now, int seconds, enum ban_source source,
	      const char *reason) __attribute__((warn_unused_result));
bool bans_clear(struct bans *b, const char *host, int port);
bool bans_is_banned(const struct bans *b, const char *host, int port, int64_t now);
const struct ban *bans_get(const struct bans *b, const char *host, int port, int64_t now);
/* Drop expired entries. */
void bans_expire(struct bans *b, int64_t now);

#endif
