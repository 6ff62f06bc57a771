/* SPDX-License-Identifier: MIT */
/*
 * bans: the ban table. Pure data, no clock of its own: callers pass the time.
 */
#include "bans.h"

#include <stdio.h>
#include <string.h>

static struct ban *find(struct bans *b, const char *host, int port)
{
	for (int i = 0; i < BANS_MAX; i++)
		if (b->items[i].used && b->items[i].port == port && strcmp(b->items[i].host, host) == 0)
			return &b->items[i];
	return NULL;
}

bool bans_set(struct bans *b, const char *host, int port, int64_t now, int seconds, enum ban_source source,
	      const char *reason)
{
	struct ban *it = find(b, host, port);
	if (!it) {
		for (int i = 0; i < BANS_MAX && !it; i++)
			if (!b->items[i].used)
				it = &b->items[i];
		if (!it)
			return false;
	}
	if (strlen(host) >= sizeof it->host)
		return false;
	it->used = true;
	snprintf(it->host, sizeof it->host, "%s", host);
	it->port = port;
	it->banned_at = now;
	it->until = now + seconds;
	it->source = source;
	snprintf(it->reason, sizeof it->reason, "%s", reason);
	return true;
}

bool bans_clear(struct bans *b, const char *host, int port)
{
	struct ban *it = find(b, host, port);
	if (!it)
		return false;
	it->used = false;
	return true;
}

const struct ban *bans_get(const struct bans *b, const char *host, int port, int64_t now)
{
	const struct ban *it = find((struct bans *)b, host, port);
	return it && it->until > now ? it : NULL;
}

bool bans_is_banned(const struct bans *b, const char *host, int port, int64_t now)
{
	return bans_get(b, host, port, now) != NULL;
}

void bans_expire(struct bans *b, int64_t now)
{
	for (int i = 0; i < BANS_MAX; i++)
		if (b->items[i].used && b->items[i].until <= now)
			b->items[i].used = false;
}
