/* SPDX-License-Identifier: MIT */
/*
 * tls: the SSL_CTX of each side, built from the configuration at start and
 * at every reload (a reload with unreadable certificates fails as a whole
 * and the old contexts stay).
 */
#include "tls.h"

#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

#include "config.h"

void tls_last_error(char *out, size_t outlen)
{
	unsigned long e = ERR_get_error();
	if (!e) {
		snprintf(out, outlen, "unknown TLS error");
		return;
	}
	ERR_error_string_n(e, out, outlen);
	ERR_clear_error();
}

static bool fail(char *err, size_t errlen, const char *what, const char *file)
{
	char why[256];
	tls_last_error(why, sizeof why);
	snprintf(err, errlen, "%s%s%s: %s", what, file ? " " : "", file ? file : "", why);
	return false;
}

static int openssl_version(int v)
{
	switch (v) {
	case 10: return TLS1_VERSION;
	case 11: return TLS1_1_VERSION;
	case 12: return TLS1_2_VERSION;
	default: return TLS1_3_VERSION;
	}
}

/* Encrypted writes go out of an evbuffer whose chains may move between two
 * tries, and partially (as much as fits). The versions and ciphers of one
 * direction (client_tls_* or server_tls_*): the lowest to the highest
 * version the list names; PgBouncer's preset cipher names are OpenSSL's
 * defaults ("all" and "legacy" every cipher OpenSSL has). */
static bool common(SSL_CTX *ctx, const char *side, const char *protocols, const char *ciphers, const char *tls13,
		   char *err, size_t errlen)
{
	SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
	/* Renegotiation and compression have no place in a pooler. */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	int lo = 12, hi = 13;
	char why[160];
	if (protocols && protocols[0] && !config_tls_versions(protocols, &lo, &hi, why, sizeof why)) {
		snprintf(err, errlen, "%s_tls_protocols: %s", side, why);
		return false;
	}
	if (SSL_CTX_set_min_proto_version(ctx, openssl_version(lo)) != 1 ||
	    SSL_CTX_set_max_proto_version(ctx, openssl_version(hi)) != 1)
		return fail(err, errlen, side[0] == 'c' ? "client_tls_protocols" : "server_tls_protocols", NULL);
	bool preset = !ciphers || !ciphers[0] || strcasecmp(ciphers, "default") == 0 ||
		      strcasecmp(ciphers, "secure") == 0 || strcasecmp(ciphers, "normal") == 0 ||
		      strcasecmp(ciphers, "fast") == 0;
	const char *list = !preset && (strcasecmp(ciphers, "all") == 0 || strcasecmp(ciphers, "legacy") == 0)
				   ? "ALL"
				   : ciphers;
	if (!preset && SSL_CTX_set_cipher_list(ctx, list) != 1) {
		char what[64];
		snprintf(what, sizeof what, "%s_tls_ciphers: failed to set the cipher list", side);
		return fail(err, errlen, what, NULL);
	}
	/* (PgBouncer's words for a list OpenSSL refuses) */
	if (tls13 && tls13[0] && SSL_CTX_set_ciphersuites(ctx, tls13) != 1) {
		char what[64];
		snprintf(what, sizeof what, "%s_tls13_ciphers: failed to set the TLSv1.3 cipher suites", side);
		return fail(err, errlen, what, NULL);
	}
	return true;
}

/* ALPN's wire form: a list of names, each after a length byte. */
#define PG_ALPN_NAME "postgresql"
#define PG_ALPN_LEN (sizeof PG_ALPN_NAME - 1)

/* What SSL_set_app_data holds on a direct TLS connection (its address is
 * the mark; nothing else in pgcat uses an SSL's app data). */
static char direct_mark;

void tls_mark_direct(SSL *ssl)
{
	SSL_set_app_data(ssl, &direct_mark);
}

bool tls_is_direct(SSL *ssl)
{
	return SSL_get_app_data(ssl) == &direct_mark;
}

/* The ClientHello of a direct TLS connection must carry the ALPN
 * extension: a generic TLS client that reached the port by mistake is
 * refused before the handshake goes further (PostgreSQL 17 closes such a
 * connection once its handshake is done). */
static int client_hello_cb(SSL *ssl, int *alert, void *arg)
{
	(void)arg;
	const unsigned char *ext;
	size_t len;
	if (SSL_get_app_data(ssl) == &direct_mark &&
	    SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &ext, &len) != 1) {
		*alert = SSL_AD_NO_APPLICATION_PROTOCOL;
		/* The reason the log line gives (first in the queue), rather
		 * than OpenSSL's own "callback failed" that follows it. */
		ERR_raise(ERR_LIB_SSL, SSL_R_NO_APPLICATION_PROTOCOL);
		return SSL_CLIENT_HELLO_ERROR;
	}
	return SSL_CLIENT_HELLO_SUCCESS;
}

/* Called only when the client offers ALPN: "postgresql" must be among its
 * names, else the handshake fails with no_application_protocol (RFC 7301,
 * and what PostgreSQL 17 answers). in is the client's list, length-prefixed
 * names; each length is checked against what is left of the list. */
static int alpn_select_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
			  unsigned int inlen, void *arg)
{
	(void)ssl;
	(void)arg;
	unsigned int i = 0;
	while (i < inlen) {
		unsigned int n = in[i++];
		if (n > inlen - i)
			break;   /* a malformed list: OpenSSL checks it first, but do not trust it */
		if (n == PG_ALPN_LEN && memcmp(in + i, PG_ALPN_NAME, PG_ALPN_LEN) == 0) {
			*out = in + i;
			*outlen = (unsigned char)n;
			return SSL_TLSEXT_ERR_OK;
		}
		i += n;
	}
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

bool tls_offer_alpn(SSL *ssl)
{
	static const unsigned char list[] = "\x0a" PG_ALPN_NAME;
	_Static_assert(sizeof list - 1 == 1 + PG_ALPN_LEN, "ALPN list");
	/* Unlike most of OpenSSL, 0 is success here. */
	return SSL_set_alpn_protos(ssl, list, sizeof list - 1) == 0;
}

bool tls_alpn_ok(SSL *ssl, bool required)
{
	const unsigned char *sel = NULL;
	unsigned int len = 0;
	SSL_get0_alpn_selected(ssl, &sel, &len);
	if (!sel || len == 0)
		return !required;
	return len == PG_ALPN_LEN && memcmp(sel, PG_ALPN_NAME, PG_ALPN_LEN) == 0;
}

static bool build_for_clients(const struct config_general *g, SSL_CTX **out, char *err, size_t errlen)
{
	*out = NULL;
	if (g->client_tls_sslmode == TLS_MODE_DISABLE)
		return true;
	if (!g->client_tls_cert_file || !g->client_tls_cert_file[0] || !g->client_tls_key_file ||
	    !g->client_tls_key_file[0]) {
		snprintf(err, errlen, "client_tls_sslmode needs client_tls_cert_file and client_tls_key_file");
		return false;
	}
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx)
		return fail(err, errlen, "cannot create a TLS context", NULL);
	if (!common(ctx, "client", g->client_tls_protocols, g->client_tls_ciphers, g->client_tls13_ciphers, err,
		    errlen)) {
		SSL_CTX_free(ctx);
		return false;
	}
	if (SSL_CTX_use_certificate_chain_file(ctx, g->client_tls_cert_file) != 1) {
		fail(err, errlen, "client_tls_cert_file", g->client_tls_cert_file);
		SSL_CTX_free(ctx);
		return false;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, g->client_tls_key_file, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		fail(err, errlen, "client_tls_key_file", g->client_tls_key_file);
		SSL_CTX_free(ctx);
		return false;
	}
	bool verify = g->client_tls_sslmode == TLS_MODE_VERIFY_CA || g->client_tls_sslmode == TLS_MODE_VERIFY_FULL;
	bool have_ca = g->client_tls_ca_file && g->client_tls_ca_file[0];
	if (verify && !have_ca) {
		snprintf(err, errlen, "client_tls_sslmode verify-ca and verify-full need client_tls_ca_file");
		SSL_CTX_free(ctx);
		return false;
	}
	if (have_ca) {
		if (SSL_CTX_load_verify_locations(ctx, g->client_tls_ca_file, NULL) != 1) {
			fail(err, errlen, "client_tls_ca_file", g->client_tls_ca_file);
			SSL_CTX_free(ctx);
			return false;
		}
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(g->client_tls_ca_file);
		if (names)
			SSL_CTX_set_client_CA_list(ctx, names);
	}
	/* verify-*: a client certificate signed by the CA is required. Below
	 * them, with a CA: asked for, and checked if the client sends one
	 * (as PostgreSQL with ssl_ca_file and PgBouncer do), so that an hba
	 * line's cert method can hold without requiring one of everyone. */
	SSL_CTX_set_verify(ctx, verify    ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
				: have_ca ? SSL_VERIFY_PEER
					  : SSL_VERIFY_NONE,
			   NULL);
	/* ALPN "postgresql" if offered (either way of starting TLS); direct
	 * TLS must offer it. */
	SSL_CTX_set_alpn_select_cb(ctx, alpn_select_cb, NULL);
	SSL_CTX_set_client_hello_cb(ctx, client_hello_cb, NULL);
	static const unsigned char sid[] = "pgcat";
	SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
	*out = ctx;
	return true;
}

static bool build_for_servers(const struct config_general *g, SSL_CTX **out, char *err, size_t errlen)
{
	*out = NULL;
	if (g->server_tls_sslmode == TLS_MODE_DISABLE)
		return true;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx)
		return fail(err, errlen, "cannot create a TLS context", NULL);
	if (!common(ctx, "server", g->server_tls_protocols, g->server_tls_ciphers, g->server_tls13_ciphers, err,
		    errlen)) {
		SSL_CTX_free(ctx);
		return false;
	}
	bool verify = g->server_tls_sslmode == TLS_MODE_VERIFY_CA || g->server_tls_sslmode == TLS_MODE_VERIFY_FULL;
	bool have_ca = g->server_tls_ca_file && g->server_tls_ca_file[0];
	/* No CA file: the system's store, as PgBouncer (libpq would look
	 * for ~/.postgresql/root.crt, which a daemon has not). */
	if (verify && !have_ca && SSL_CTX_set_default_verify_paths(ctx) != 1) {
		fail(err, errlen, "the system's CA store", NULL);
		SSL_CTX_free(ctx);
		return false;
	}
	if (have_ca && SSL_CTX_load_verify_locations(ctx, g->server_tls_ca_file, NULL) != 1) {
		fail(err, errlen, "server_tls_ca_file", g->server_tls_ca_file);
		SSL_CTX_free(ctx);
		return false;
	}
	/* A certificate of pgcat's own, for servers that authenticate their
	 * clients by certificate (hostssl ... cert, clientcert=verify-full). */
	if (g->server_tls_cert_file && g->server_tls_cert_file[0] && g->server_tls_key_file &&
	    g->server_tls_key_file[0]) {
		if (SSL_CTX_use_certificate_chain_file(ctx, g->server_tls_cert_file) != 1) {
			fail(err, errlen, "server_tls_cert_file", g->server_tls_cert_file);
			SSL_CTX_free(ctx);
			return false;
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, g->server_tls_key_file, SSL_FILETYPE_PEM) != 1) {
			fail(err, errlen, "server_tls_key_file", g->server_tls_key_file);
			SSL_CTX_free(ctx);
			return false;
		}
		if (SSL_CTX_check_private_key(ctx) != 1) {
			fail(err, errlen, "server_tls_key_file does not match server_tls_cert_file", g->server_tls_key_file);
			SSL_CTX_free(ctx);
			return false;
		}
	}
	SSL_CTX_set_verify(ctx, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
	*out = ctx;
	return true;
}

bool tls_contexts_build(const struct config_general *g, struct tls_contexts *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	ERR_clear_error();
	if (!build_for_clients(g, &out->for_clients, err, errlen))
		return false;
	if (!build_for_servers(g, &out->for_servers, err, errlen)) {
		tls_contexts_free(out);
		return false;
	}
	return true;
}

bool tls_contexts_rebuild(struct tls_contexts *t, const struct config_general *g, char *err, size_t errlen)
{
	struct tls_contexts fresh;
	if (!tls_contexts_build(g, &fresh, err, errlen))
		return false;
	/* Connections in their handshake keep a reference to the old ones. */
	tls_contexts_free(t);
	*t = fresh;
	return true;
}

void tls_contexts_free(struct tls_contexts *t)
{
	if (t->for_clients)
		SSL_CTX_free(t->for_clients);
	if (t->for_servers)
		SSL_CTX_free(t->for_servers);
	t->for_clients = t->for_servers = NULL;
}

bool tls_client_cert_cn(SSL *ssl, char *cn, size_t cnlen)
{
	X509 *cert = SSL_get1_peer_certificate(ssl);
	if (!cert || cnlen > INT_MAX) {
		X509_free(cert);
		return false;
	}
	int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, (int)cnlen);
	X509_free(cert);
	/* A CN with a NUL inside would compare as its prefix: none. And a
	 * CN cut to fit (n >= cnlen) is not the certificate's. */
	return n > 0 && (size_t)n < cnlen && (size_t)n == strlen(cn);
}

bool tls_client_cert_matches_user(SSL *ssl, const char *user)
{
	char cn[256];
	return tls_client_cert_cn(ssl, cn, sizeof cn) && strcmp(cn, user) == 0;
}

void tls_describe(SSL *ssl, char *out, size_t outlen)
{
	if (!ssl) {
		if (outlen)
			out[0] = '\0';
		return;
	}
	snprintf(out, outlen, "%s/%s", SSL_get_version(ssl), SSL_get_cipher_name(ssl));
}
