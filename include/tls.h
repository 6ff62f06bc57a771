/* SPDX-License-Identifier: MIT */
/*
 * tls: OpenSSL contexts for both sides (SPEC §2 client_tls_*, server_tls_*)
 * and the checks made on a finished handshake. The byte pump (io.c) runs the
 * handshakes and the encrypted reads and writes without blocking.
 */
#ifndef PGCAT_TLS_H
#define PGCAT_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/ssl.h>

struct config_general;

/* The contexts a worker uses; NULL when that side has TLS off. */
struct tls_contexts {
	SSL_CTX *for_clients;   /* pgcat as the TLS server, clients connecting */
	SSL_CTX *for_servers;   /* pgcat as the TLS client, to PostgreSQL */
};

/* Build both contexts from the configuration (certificate, key and CA files
 * read now). On failure nothing is kept and err says why. */
bool tls_contexts_build(const struct config_general *g, struct tls_contexts *out, char *err, size_t errlen)
	__attribute__((warn_unused_result));
/* t built anew from g (a console SET of a TLS key); t stays as it was
 * when they cannot be built (false, err says why). */
bool tls_contexts_rebuild(struct tls_contexts *t, const struct config_general *g, char *err, size_t errlen);
void tls_contexts_free(struct tls_contexts *t);

/* A client's certificate after the handshake: under verify-full its common
 * name must be the user name (as PostgreSQL's clientcert=verify-full).
 * Returns true when the session may go on. */
bool tls_client_cert_matches_user(SSL *ssl, const char *user);
/* The client certificate's common name into cn (cnlen bytes with its
 * NUL). false: no certificate, no CN, a CN with a NUL byte or too long. */
bool tls_client_cert_cn(SSL *ssl, char *cn, size_t cnlen);

/* "TLSv1.3/TLS_AES_256_GCM_SHA384" for SHOW CLIENTS/SERVERS ("" without). */
void tls_describe(SSL *ssl, char *out, size_t outlen);

/* ALPN, as PostgreSQL 17 uses it: the protocol "postgresql". The context
 * for clients accepts a ClientHello that offers no ALPN or offers
 * "postgresql", and refuses the handshake (alert no_application_protocol)
 * of one that offers only other protocols.
 * tls_mark_direct: this connection began with a ClientHello (direct TLS,
 * no SSLRequest), either way. Towards clients, such a ClientHello must
 * offer ALPN: one without is refused during the handshake. */
void tls_mark_direct(SSL *ssl);
bool tls_is_direct(SSL *ssl);
/* pgcat towards a server: offer ALPN "postgresql" (libpq 17 always does;
 * servers before 17 ignore it). false: out of memory. */
bool tls_offer_alpn(SSL *ssl) __attribute__((warn_unused_result));
/* After a handshake: true when the ALPN agreed on is "postgresql", or when
 * none was agreed on and required is false. */
bool tls_alpn_ok(SSL *ssl, bool required);

/* The reason of the last OpenSSL failure, for a log line. */
void tls_last_error(char *out, size_t outlen);

#endif
