/* SPDX-License-Identifier: MIT */
/*
 * randpool: random bytes for the login path, fetched from OpenSSL in
 * blocks (see include/randpool.h for why).
 */
#include "randpool.h"

#include "auth_md5.h"

#include <openssl/crypto.h>
#include <string.h>

void randpool_init(struct randpool *r) { r->avail = 0; }

void randpool_wipe(struct randpool *r)
{
	OPENSSL_cleanse(r->buf, sizeof r->buf);
	r->avail = 0;
}

bool randpool_bytes(struct randpool *r, void *out, size_t len)
{
	/* Large requests gain nothing from the pool. */
	if (len > RANDPOOL_SIZE / 4)
		return pg_random_bytes(out, len);
	if (len > r->avail) {
		if (!pg_random_bytes(r->buf, sizeof r->buf)) {
			r->avail = 0;
			return false;
		}
		r->avail = RANDPOOL_SIZE;
	}
	/* Hand out the top of the pool and wipe it: a byte given to one login
	 * is never seen again, neither by a later login nor in a core dump. */
	r->avail -= (uint32_t)len;
	memcpy(out, r->buf + r->avail, len);
	OPENSSL_cleanse(r->buf + r->avail, len);
	return true;
}
