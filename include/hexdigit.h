/* SPDX-License-Identifier: MIT */
/*
 * hexdigit: the value of one hexadecimal digit, either case (UUIDs, bytea,
 * JSON escapes, COPY escapes, WAL positions).
 */
#ifndef PGCAT_HEXDIGIT_H
#define PGCAT_HEXDIGIT_H

/* 0..15, or -1 when c is not a hexadecimal digit. */
static inline int hex_digit_value(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

#endif
