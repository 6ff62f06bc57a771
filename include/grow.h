/* SPDX-License-Identifier: MIT */
/*
 * grow: room for one more element at the end of an array that doubles as
 * it fills; the owner keeps its pointer, count and capacity.
 */
#ifndef PGCAT_GROW_H
#define PGCAT_GROW_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* arrp: the address of the array's pointer (a T **, of elements of size
 * elem), n of them in use out of *cap. When full it is reallocated to
 * twice *cap (the first time: first). false: out of memory, the array as
 * it was. */
static inline bool grow_for_one(void *arrp, size_t n, size_t *cap, size_t first, size_t elem)
{
	if (n < *cap)
		return true;
	size_t nc = *cap ? *cap * 2 : first;
	if (nc < n + 1 || nc > SIZE_MAX / elem)
		return false;
	void *old;
	memcpy(&old, arrp, sizeof old);   /* (any T * reads as a void * here) */
	void *np = realloc(old, nc * elem);
	if (!np)
		return false;
	memcpy(arrp, &np, sizeof np);
	*cap = nc;
	return true;
}

#endif
