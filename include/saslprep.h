/* SPDX-License-Identifier: MIT */
/*
 * saslprep: a SCRAM password as PostgreSQL hashes it. PostgreSQL (server
 * and libpq alike) runs the password through SASLprep (RFC 4013) before
 * PBKDF2, and uses the raw bytes when SASLprep refuses it; pgcat must do
 * the same on both sides, or a non-ASCII password that logs in directly
 * is refused through pgcat. The Unicode tables are GNU libidn's.
 */
#ifndef PGCAT_SASLPREP_H
#define PGCAT_SASLPREP_H

enum saslprep_result {
	SASLPREP_NORMALISED,  /* valid UTF-8 that SASLprep took (ASCII included): its output */
	SASLPREP_RAW,         /* not UTF-8, or refused by SASLprep: the bytes as they are */
	SASLPREP_NO_MEMORY,   /* *out is NULL */
};

/* The password PBKDF2 takes, in *out: a new NUL-terminated string that the
 * caller wipes and frees. The rules are PostgreSQL's:
 *  - pure ASCII is taken as it is (control characters included);
 *  - invalid UTF-8 is taken raw;
 *  - otherwise non-ASCII spaces become U+0020 and the characters "commonly
 *    mapped to nothing" (RFC 3454 B.1) are dropped; a password left empty,
 *    or one holding a prohibited character, an unassigned code point
 *    (Unicode 3.2) or breaking the bidi rules, is taken raw. As PostgreSQL
 *    does, those checks look at the mapped password before normalisation;
 *  - the rest is normalised to NFKC. */
enum saslprep_result saslprep_password(const char *password, char **out) __attribute__((warn_unused_result));

#endif
