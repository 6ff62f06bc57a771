/* SPDX-License-Identifier: MIT */
/*
 * bytescan: 16 bytes of a text tested at once, for the scans that read
 * every request's text for a few kinds of byte (the settings scan in
 * params.c, the router's shapes in sqlshape.c). GCC's vector extension:
 * SSE2 on x86-64, plain code where a target has no vectors.
 */
#ifndef PGCAT_BYTESCAN_H
#define PGCAT_BYTESCAN_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef unsigned char bytescan_block __attribute__((vector_size(16)));

/* The 16 bytes at p (any alignment). */
static inline bytescan_block bytescan_load(const char *p)
{
	bytescan_block v;
	memcpy(&v, p, sizeof v);
	return v;
}

/* The bytes a comparison of blocks found (each 0xff or 0): one bit per
 * byte, in two lanes, the first byte's bit lowest. */
struct bytescan_bits {
	uint64_t lane[2];
};

static inline struct bytescan_bits bytescan_bits(bytescan_block found)
{
	struct bytescan_bits b;
	memcpy(b.lane, &found, sizeof b.lane);
	for (size_t h = 0; h < 2; h++) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
		b.lane[h] = __builtin_bswap64(b.lane[h]);
#endif
		b.lane[h] &= 0x0101010101010101ull;
	}
	return b;
}

static inline bool bytescan_any(struct bytescan_bits b)
{
	return (b.lane[0] | b.lane[1]) != 0;
}

/* The index of the first byte found; 16: none. */
static inline size_t bytescan_first(struct bytescan_bits b)
{
	if (b.lane[0])
		return (size_t)__builtin_ctzll(b.lane[0]) / 8;
	if (b.lane[1])
		return 8 + (size_t)__builtin_ctzll(b.lane[1]) / 8;
	return 16;
}

#endif
