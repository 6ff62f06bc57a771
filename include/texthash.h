/* SPDX-License-Identifier: MIT */
/*
 * texthash: a 64-bit hash of bytes, eight a step, for pgcat's own tables
 * in one process (the statement registry, the router's cache): never
 * stored, sent or compared across versions. Multiply and xor-shift; the
 * length is folded in first, so that texts that only differ in length do
 * not meet. (FNV's byte a step cost about 9 instructions a byte, ~500 for
 * pgbench's query, on every request.)
 */
#ifndef PGCAT_TEXTHASH_H
#define PGCAT_TEXTHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* One 64-bit value into h. */
static inline uint64_t texthash_mix(uint64_t h, uint64_t v)
{
	h = (h ^ v) * 0xff51afd7ed558ccdULL;
	return h ^ (h >> 32);
}

static inline uint64_t texthash(const void *p, size_t n, uint64_t seed)
{
	const uint8_t *b = p;
	uint64_t h = seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL);
	uint64_t w = 0;
	if (n >= 8) {
		const uint8_t *last = b + n - 8;
		for (; b < last; b += 8) {
			memcpy(&w, b, sizeof w);
			h = texthash_mix(h, w);
		}
		/* the last 8 bytes, overlapping the word before when n is not a
		 * multiple of 8 (the length, folded in, tells those apart) */
		memcpy(&w, last, sizeof w);
	} else {
		for (size_t i = 0; i < n; i++)
			w |= (uint64_t)b[i] << (8 * i);
	}
	h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
	return h ^ (h >> 29);
}

#endif
