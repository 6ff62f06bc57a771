/* SPDX-License-Identifier: MIT */
/*
 * utf8: is this a UTF-8 character? For the writers of text others parse
 * (JSON log lines, Prometheus labels), which must not pass on bytes a
 * client sent that are not UTF-8.
 */
#ifndef PGCAT_UTF8_H
#define PGCAT_UTF8_H

#include <stddef.h>

/* The length of the valid UTF-8 character at s, NUL-terminated (0: a
 * byte that does not start one: a stray continuation, an overlong form, a
 * surrogate, past U+10FFFF, or cut short). ASCII is 1. */
static inline size_t utf8_char_len(const unsigned char *s)
{
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;   /* (a NUL is not a continuation: nothing is read past it) */
	if (n == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f)))
		return 0;
	if (n == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f)))
		return 0;
	return n;
}

#endif
