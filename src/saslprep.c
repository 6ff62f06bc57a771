/* SPDX-License-Identifier: MIT */
/*
 * saslprep: SASLprep (RFC 4013) of a SCRAM password, PostgreSQL's way, on
 * GNU libidn's stringprep tables (Unicode 3.2, as the RFC fixes them).
 *
 * libidn's SASLprep profile checks the prohibited, unassigned and bidi
 * rules on the normalised string, as RFC 3454 orders the steps;
 * PostgreSQL (server and libpq) checks them on the mapped string before
 * normalising it. The two disagree on a few characters (U+0340 is
 * prohibited and normalises to an allowed U+0300; U+2122 is neutral in the
 * bidi rules and normalises to the letters "TM"), and what matters is to
 * hash what PostgreSQL hashes. So the profile runs here without its
 * normalisation step (mapping, then every check), and the normalisation
 * follows on its own when the checks passed.
 */
#include "saslprep.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stringprep.h>

#include <openssl/crypto.h>

/* Steps of libidn's SASLprep profile (13 in libidn 1.41); the copy is
 * refused, and the password taken raw, if a later libidn has more. */
#define PROFILE_MAX_STEPS 32

static enum saslprep_result copy_as_is(const char *password, enum saslprep_result r, char **out)
{
	*out = strdup(password);
	return *out ? r : SASLPREP_NO_MEMORY;
}

static bool all_ascii(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s >= 0x80)
			return false;
	return true;
}

/* UTF-8 as RFC 3629 (and PostgreSQL) has it: shortest forms only, no
 * surrogates, nothing above U+10FFFF. */
static bool valid_utf8(const unsigned char *s)
{
	while (*s) {
		unsigned char c = *s;
		size_t n;
		unsigned char lo = 0x80, hi = 0xbf;   /* the second byte's range */
		if (c < 0x80) {
			s++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			n = 2;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 3;
			if (c == 0xe0)
				lo = 0xa0;   /* shorter forms */
			else if (c == 0xed)
				hi = 0x9f;   /* surrogates */
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 4;
			if (c == 0xf0)
				lo = 0x90;
			else if (c == 0xf4)
				hi = 0x8f;   /* above U+10FFFF */
		} else {
			return false;
		}
		if (s[1] < lo || s[1] > hi)
			return false;
		for (size_t i = 2; i < n; i++)
			if (s[i] < 0x80 || s[i] > 0xbf)   /* (the NUL ends the string: refused here) */
				return false;
		s += n;
	}
	return true;
}

/* libidn's SASLprep profile less its NFKC step; false if it does not fit. */
static bool checks_profile(Stringprep_profile *steps)
{
	size_t k = 0;
	for (size_t i = 0; stringprep_saslprep[i].operation; i++) {
		if (stringprep_saslprep[i].operation == STRINGPREP_NFKC)
			continue;
		if (k + 1 >= PROFILE_MAX_STEPS)
			return false;
		steps[k++] = stringprep_saslprep[i];
	}
	memset(&steps[k], 0, sizeof steps[k]);   /* the end: operation 0 */
	return true;
}

static void wipe_free_ucs4(uint32_t *u, size_t len)
{
	if (u) {
		OPENSSL_cleanse(u, len * sizeof *u);
		free(u);
	}
}

enum saslprep_result saslprep_password(const char *password, char **out)
{
	*out = NULL;
	/* ASCII needs no work, and PostgreSQL takes it as it is even with
	 * control characters that SASLprep would refuse. */
	if (all_ascii(password))
		return copy_as_is(password, SASLPREP_NORMALISED, out);
	if (!valid_utf8((const unsigned char *)password))
		return copy_as_is(password, SASLPREP_RAW, out);

	Stringprep_profile steps[PROFILE_MAX_STEPS];
	if (!checks_profile(steps))
		return copy_as_is(password, SASLPREP_RAW, out);
	size_t n = 0;
	uint32_t *in = stringprep_utf8_to_ucs4(password, -1, &n);
	if (!in)
		return copy_as_is(password, SASLPREP_RAW, out);
	/* Room for the mapping to grow the string (SASLprep's maps never do:
	 * one space for a space, or nothing). */
	size_t cap = n * STRINGPREP_MAX_MAP_CHARS + 1;
	uint32_t *mapped = calloc(cap, sizeof *mapped);
	if (!mapped) {
		wipe_free_ucs4(in, n);
		return SASLPREP_NO_MEMORY;
	}
	memcpy(mapped, in, n * sizeof *in);
	wipe_free_ucs4(in, n);
	size_t len = n;
	int rc = stringprep_4i(mapped, &len, cap, STRINGPREP_NO_UNASSIGNED, steps);
	if (rc != STRINGPREP_OK || len == 0) {
		/* Prohibited, unassigned, against the bidi rules, or nothing
		 * left: the raw bytes, as PostgreSQL does. */
		wipe_free_ucs4(mapped, cap);
		return rc == STRINGPREP_MALLOC_ERROR ? SASLPREP_NO_MEMORY : copy_as_is(password, SASLPREP_RAW, out);
	}
	uint32_t *nfkc = stringprep_ucs4_nfkc_normalize(mapped, (ssize_t)len);
	wipe_free_ucs4(mapped, cap);
	if (!nfkc)
		return SASLPREP_NO_MEMORY;
	size_t nlen = 0;
	while (nfkc[nlen])
		nlen++;
	size_t written = 0;
	*out = stringprep_ucs4_to_utf8(nfkc, (ssize_t)nlen, NULL, &written);
	wipe_free_ucs4(nfkc, nlen);
	return *out ? SASLPREP_NORMALISED : SASLPREP_NO_MEMORY;
}
