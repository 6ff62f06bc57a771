/* SPDX-License-Identifier: MIT */
/*
 * auth_md5: PostgreSQL's md5 password scheme as pure functions.
 * stored hash = "md5" + hex(md5(password || user))
 * response    = "md5" + hex(md5(hex_part_of_stored_hash || 4-byte salt))
 */
#ifndef PGCAT_AUTH_MD5_H
#define PGCAT_AUTH_MD5_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PG_MD5_LEN 35   /* "md5" + 32 hex digits, without the NUL */

/* out must hold PG_MD5_LEN + 1 bytes. */
void pg_md5_stored(const char *password, const char *user, char out[PG_MD5_LEN + 1]);
void pg_md5_response(const char *stored, const uint8_t salt[4], char out[PG_MD5_LEN + 1]);
/* "md5" followed by exactly 32 lowercase hex digits. */
bool pg_md5_is_stored(const char *text);
/* Constant-time comparison of two NUL-terminated strings of equal length. */
bool pg_secure_streq(const char *a, const char *b);
/* Cryptographically strong random bytes (OpenSSL RAND_bytes). */
bool pg_random_bytes(void *buf, size_t len) __attribute__((warn_unused_result));

#endif
