/* SPDX-License-Identifier: MIT */
/*
 * bytes_in: reading a record of pgcat's own (a client moving between
 * processes, handover.c) field by field, integers high byte first, every
 * length checked against what is left. A read past the end sets bad and
 * returns zeroes / NULL from then on, so a reader checks once at the end.
 */
#ifndef PGCAT_BYTES_IN_H
#define PGCAT_BYTES_IN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct bytes_in {
	const uint8_t *p;
	size_t len, off;
	bool bad;
};

static inline const uint8_t *bytes_take(struct bytes_in *r, size_t n)
{
	if (r->bad || r->len - r->off < n) {
		r->bad = true;
		return NULL;
	}
	const uint8_t *p = r->p + r->off;
	r->off += n;
	return p;
}

static inline uint8_t bytes_u8(struct bytes_in *r)
{
	const uint8_t *p = bytes_take(r, 1);
	return p ? p[0] : 0;
}

static inline uint16_t bytes_u16(struct bytes_in *r)
{
	const uint8_t *p = bytes_take(r, 2);
	return p ? (uint16_t)((p[0] << 8) | p[1]) : 0;
}

static inline uint32_t bytes_u32(struct bytes_in *r)
{
	const uint8_t *p = bytes_take(r, 4);
	return p ? ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3] : 0;
}

static inline uint64_t bytes_u64(struct bytes_in *r)
{
	uint64_t hi = bytes_u32(r);
	return (hi << 32) | bytes_u32(r);
}

/* A NUL-terminated string inside the record; NULL (bad) when none ends. */
static inline const char *bytes_cstring(struct bytes_in *r)
{
	if (r->bad)
		return NULL;
	const uint8_t *nul = memchr(r->p + r->off, 0, r->len - r->off);
	if (!nul) {
		r->bad = true;
		return NULL;
	}
	const char *s = (const char *)(r->p + r->off);
	r->off = (size_t)(nul - r->p) + 1;
	return s;
}

#endif
