/* SPDX-License-Identifier: MIT */
/*
 * web: the read-only web page on the metrics listener (SPEC §8): routes,
 * HTTP basic auth and TLS. What the page shows is web_state.c's; the page
 * itself is src/web/index.html, built in. Not /metrics (prometheus.c),
 * which stays open to any scraper as before.
 *
 * Auth: a user of admin_users or stats_users, with the password checked
 * against the secret pgcat keeps for it (config_console_secret: auth_file,
 * else a users section): plaintext, md5 or a SCRAM-SHA-256 verifier. A
 * verifier costs PBKDF2 (thousands of iterations), derived on the kdf
 * threads (kdf.h) while the request waits, never on the loop; a check that
 * succeeded is remembered for WEB_AUTH_TTL_S by a digest of the user, the
 * password and the secret (never the password itself), so the page's polls
 * cost one hash each. A user with no secret never gets in: every request
 * then answers 401.
 */
#include "web.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth_md5.h"
#include "auth_scram.h"
#include "config.h"
#include "context.h"
#include "kdf.h"
#include "list.h"
#include "log.h"
#include "saslprep.h"
#include "tls.h"

#define WEB_AUTH_CACHE 16        /* successful checks remembered */
#define WEB_AUTH_TTL_S 60        /* ... for this long */
#define WEB_AUTH_MAX_B64 1368    /* base64 of user:password, at most 1024 bytes */
/* SCRAM checks under way at once, more: 503. Fewer than the worker's
 * key derivation threads (KDF_THREADS): the page's guesses must never
 * hold up all of them, and the clients' logins behind. */
#define WEB_PENDING_MAX 1
_Static_assert(WEB_PENDING_MAX < KDF_THREADS, "the page leaves key derivation threads to the clients");

enum web_route { WEB_ROUTE_PAGE, WEB_ROUTE_STATE };

struct web_auth_entry {
	uint8_t key[SCRAM_KEY_LEN];   /* SHA-256 of salt, user, password, secret */
	uint64_t until_us;            /* 0: free */
};

/* A request waiting for its password's PBKDF2. */
struct web_check {
	struct list_node node;        /* in web->pending */
	struct web *web;
	struct evhttp_request *req;
	enum web_route route;
	struct kdf_request kreq;
	struct scram_secret verifier;
	uint8_t salted[SCRAM_KEY_LEN];
	uint8_t key[SCRAM_KEY_LEN];
};

struct web {
	struct worker *w;
	struct evhttp *http;
	SSL_CTX *tls;                 /* NULL: plain HTTP */
	uint8_t salt[32];             /* of the cache's digests, per process */
	struct web_auth_entry cache[WEB_AUTH_CACHE];
	struct list_node pending;     /* struct web_check */
	int n_pending;
	struct web_lists lists;
};

/* ---- answers ---- */

static void security_headers(struct evhttp_request *req)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(h, "X-Frame-Options", "DENY");
	evhttp_add_header(h, "Referrer-Policy", "no-referrer");
}

/* An error with a short text body. (Not evhttp_send_error: it drops the
 * headers set before, and 401 needs its WWW-Authenticate.) */
static void reply_error(struct evhttp_request *req, int code, const char *reason, const char *header,
			const char *value)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	security_headers(req);
	evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
	if (header)
		evhttp_add_header(h, header, value);
	struct evbuffer *body = evbuffer_new();
	if (body)
		evbuffer_add_printf(body, "%d %s\n", code, reason);
	evhttp_send_reply(req, code, reason, body);
	if (body)
		evbuffer_free(body);
}

static void reply_unauthorized(struct evhttp_request *req)
{
	reply_error(req, 401, "Unauthorized", "WWW-Authenticate", "Basic realm=\"pgcat\", charset=\"UTF-8\"");
}

static void serve(struct web *web, struct evhttp_request *req, enum web_route route)
{
	struct worker *w = web->w;
	worker_update_clock(w);
	struct evbuffer *out = evbuffer_new();
	if (!out) {
		evhttp_send_error(req, 500, "Internal Server Error");
		return;
	}
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	security_headers(req);
	switch (route) {
	case WEB_ROUTE_PAGE:
		/* The page's script and style are inline; it loads nothing
		 * else and talks only to its own origin. */
		evhttp_add_header(h, "Content-Security-Policy",
				  "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
				  "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
				  "frame-ancestors 'none'");
		evhttp_add_header(h, "Content-Type", "text/html; charset=utf-8");
		if (evbuffer_add(out, web_index_html, web_index_html_len) != 0)
			goto fail;
		break;
	case WEB_ROUTE_STATE:
		evhttp_add_header(h, "Content-Type", "application/json; charset=utf-8");
		web_state_render(w, &web->lists, out);
		break;
	}
	evhttp_send_reply(req, 200, "OK", out);
	evbuffer_free(out);
	return;
fail:
	evbuffer_free(out);
	evhttp_send_error(req, 500, "Internal Server Error");
}

/* ---- the cache of successful checks ---- */

static bool cache_key(const struct web *web, const char *user, const char *password, const char *secret,
		      uint8_t out[SCRAM_KEY_LEN])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned int n = 0;
	/* NUL-separated: "ab","c" and "a","bc" are different keys. */
	bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
		  EVP_DigestUpdate(md, web->salt, sizeof web->salt) == 1 &&
		  EVP_DigestUpdate(md, user, strlen(user) + 1) == 1 &&
		  EVP_DigestUpdate(md, password, strlen(password) + 1) == 1 &&
		  EVP_DigestUpdate(md, secret, strlen(secret) + 1) == 1 && EVP_DigestFinal_ex(md, out, &n) == 1 &&
		  n == SCRAM_KEY_LEN;
	EVP_MD_CTX_free(md);
	return ok;
}

static bool cache_has(const struct web *web, const uint8_t key[SCRAM_KEY_LEN], uint64_t now_us)
{
	bool found = false;
	for (size_t i = 0; i < WEB_AUTH_CACHE; i++)
		if (web->cache[i].until_us > now_us && CRYPTO_memcmp(web->cache[i].key, key, SCRAM_KEY_LEN) == 0)
			found = true;
	return found;
}

static void cache_put(struct web *web, const uint8_t key[SCRAM_KEY_LEN], uint64_t now_us)
{
	size_t victim = 0;
	for (size_t i = 0; i < WEB_AUTH_CACHE; i++) {
		if (CRYPTO_memcmp(web->cache[i].key, key, SCRAM_KEY_LEN) == 0 || web->cache[i].until_us <= now_us) {
			victim = i;
			break;
		}
		if (web->cache[i].until_us < web->cache[victim].until_us)
			victim = i;
	}
	memcpy(web->cache[victim].key, key, SCRAM_KEY_LEN);
	web->cache[victim].until_us = now_us + (uint64_t)WEB_AUTH_TTL_S * 1000000;
}

/* ---- basic auth ---- */

enum web_verdict { WEB_AUTH_OK, WEB_AUTH_DENIED, WEB_AUTH_PENDING, WEB_AUTH_BUSY };

/* "Basic <base64 of user:password>" into user and password (pointers into
 * buf, of bufsz bytes). false: absent or malformed. */
static bool basic_credentials(const char *header, char *buf, size_t bufsz, const char **user, const char **password)
{
	if (!header || strncasecmp(header, "Basic", 5) != 0 || (header[5] != ' ' && header[5] != '\t'))
		return false;
	const char *b64 = header + 5;
	while (*b64 == ' ' || *b64 == '\t')
		b64++;
	size_t len = strnlen(b64, WEB_AUTH_MAX_B64 + 1);
	while (len > 0 && (b64[len - 1] == ' ' || b64[len - 1] == '\t'))
		len--;
	if (len == 0 || len > WEB_AUTH_MAX_B64)
		return false;
	size_t n = 0;
	if (!pg_b64_decode(b64, len, (uint8_t *)buf, bufsz - 1, &n) || n >= bufsz)
		return false;
	buf[n] = '\0';
	char *colon = memchr(buf, ':', n);
	/* A NUL inside would cut the name or the password short unseen. */
	if (!colon || colon == buf || memchr(buf, '\0', n) != NULL)
		return false;
	*colon = '\0';
	*user = buf;
	*password = colon + 1;
	return true;
}

static void check_derived(struct kdf_request *kreq, bool ok, const uint8_t *salted);

static void check_free(struct web_check *c)
{
	list_del(&c->node);
	c->web->n_pending--;
	OPENSSL_cleanse(c, sizeof *c);
	free(c);
}

/* A SCRAM verifier: PBKDF2 of the password on the kdf threads. */
static enum web_verdict check_scram(struct web *web, struct evhttp_request *req, enum web_route route,
				    const char *secret, const char *password, const uint8_t key[SCRAM_KEY_LEN])
{
	struct worker *w = web->w;
	if (web->n_pending >= WEB_PENDING_MAX)
		return WEB_AUTH_BUSY;
	struct web_check *c = calloc(1, sizeof *c);
	if (!c)
		return WEB_AUTH_BUSY;
	if (!scram_secret_parse(secret, &c->verifier)) {
		free(c);
		return WEB_AUTH_DENIED;
	}
	char *prepared = NULL;
	if (saslprep_password(password, &prepared) == SASLPREP_NO_MEMORY) {
		free(c);
		return WEB_AUTH_BUSY;
	}
	c->web = web;
	c->req = req;
	c->route = route;
	memcpy(c->key, key, SCRAM_KEY_LEN);
	c->kreq.done = check_derived;
	c->kreq.uncached = true;   /* a guess must not push the servers' keys out */
	list_add_tail(&web->pending, &c->node);
	web->n_pending++;
	enum kdf_result r = kdf_derive(w->kdf, &c->kreq, prepared, c->verifier.salt, c->verifier.salt_len,
				       c->verifier.iterations, c->salted);
	OPENSSL_cleanse(prepared, strlen(prepared));
	free(prepared);
	switch (r) {
	case KDF_PENDING:
		return WEB_AUTH_PENDING;
	case KDF_DONE: {
		bool ok = scram_secret_check_salted(&c->verifier, c->salted, NULL);
		check_free(c);
		if (!ok)
			return WEB_AUTH_DENIED;
		cache_put(web, key, w->now_us);
		return WEB_AUTH_OK;
	}
	case KDF_FAILED:
		break;
	}
	check_free(c);
	return WEB_AUTH_DENIED;
}

static void check_derived(struct kdf_request *kreq, bool ok, const uint8_t *salted)
{
	struct web_check *c = LIST_OWNER(kreq, struct web_check, kreq);
	struct web *web = c->web;
	worker_update_clock(web->w);
	struct evhttp_request *req = c->req;
	enum web_route route = c->route;
	bool good = ok && scram_secret_check_salted(&c->verifier, salted, NULL);
	if (good)
		cache_put(web, c->key, web->w->now_us);
	check_free(c);
	if (good)
		serve(web, req, route);
	else
		reply_unauthorized(req);
}

static enum web_verdict authenticate(struct web *web, struct evhttp_request *req, enum web_route route)
{
	struct worker *w = web->w;
	const struct config_general *g = &w->cfg->general;
	const char *header = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
	char buf[WEB_AUTH_MAX_B64];
	const char *user, *password;
	if (!basic_credentials(header, buf, sizeof buf, &user, &password))
		return WEB_AUTH_DENIED;
	enum web_verdict v = WEB_AUTH_DENIED;
	const char *secret = NULL;
	if (config_list_has(g->admin_users, user) || config_list_has(g->stats_users, user))
		secret = config_console_secret(w->cfg, user);
	/* PostgreSQL refuses an empty password before looking; so does pgcat. */
	if (!secret || !secret[0] || !password[0])
		goto out;
	uint8_t key[SCRAM_KEY_LEN];
	if (!cache_key(web, user, password, secret, key))
		goto out;
	if (cache_has(web, key, w->now_us)) {
		v = WEB_AUTH_OK;
	} else if (strncmp(secret, "SCRAM-SHA-256$", 14) == 0) {
		v = check_scram(web, req, route, secret, password, key);
	} else if (pg_md5_is_stored(secret)) {
		char h[PG_MD5_LEN + 1];
		pg_md5_stored(password, user, h);
		v = strlen(h) == PG_MD5_LEN && pg_secure_streq(h, secret) ? WEB_AUTH_OK : WEB_AUTH_DENIED;
		OPENSSL_cleanse(h, sizeof h);
	} else {
		/* Plaintext: compared by digests, in constant time and length. */
		uint8_t a[SCRAM_KEY_LEN], b[SCRAM_KEY_LEN];
		unsigned int na = 0, nb = 0;
		v = EVP_Digest(password, strlen(password), a, &na, EVP_sha256(), NULL) == 1 &&
				    EVP_Digest(secret, strlen(secret), b, &nb, EVP_sha256(), NULL) == 1 &&
				    na == SCRAM_KEY_LEN && nb == SCRAM_KEY_LEN && CRYPTO_memcmp(a, b, SCRAM_KEY_LEN) == 0
			    ? WEB_AUTH_OK
			    : WEB_AUTH_DENIED;
		OPENSSL_cleanse(a, sizeof a);
	}
	if (v == WEB_AUTH_OK)
		cache_put(web, key, w->now_us);
	OPENSSL_cleanse(key, sizeof key);
out:
	OPENSSL_cleanse(buf, sizeof buf);
	return v;
}

/* ---- routes ---- */

static void route_request(struct web *web, struct evhttp_request *req, enum web_route route)
{
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
		reply_error(req, 405, "Method Not Allowed", "Allow", "GET, HEAD");
		return;
	}
	/* With TLS on, a connection evhttp made without it (its bevcb
	 * failed: out of memory) is refused rather than served in clear. */
	if (web->tls) {
		struct evhttp_connection *evcon = evhttp_request_get_connection(req);
		struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
		if (!bev || !bufferevent_openssl_get_ssl(bev)) {
			reply_error(req, 403, "Forbidden", NULL, NULL);
			return;
		}
	}
	worker_update_clock(web->w);
	switch (authenticate(web, req, route)) {
	case WEB_AUTH_OK: serve(web, req, route); break;
	case WEB_AUTH_DENIED: reply_unauthorized(req); break;
	case WEB_AUTH_PENDING: break;   /* check_derived answers */
	case WEB_AUTH_BUSY:
		reply_error(req, 503, "Service Unavailable", "Retry-After", "1");
		break;
	}
}

static void page_cb(struct evhttp_request *req, void *arg)
{
	route_request(arg, req, WEB_ROUTE_PAGE);
}

static void state_cb(struct evhttp_request *req, void *arg)
{
	route_request(arg, req, WEB_ROUTE_STATE);
}

/* ---- TLS ---- */

/* Browsers offer "h2" and "http/1.1": this listener speaks the latter
 * (and a client that offers no ALPN is served too). */
static int http_alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
			unsigned int inlen, void *arg)
{
	static const unsigned char http11[] = "http/1.1";
	unsigned int i = 0;
	while (i < inlen) {
		unsigned int n = in[i++];
		if (n > inlen - i)
			break;
		if (n == sizeof http11 - 1 && memcmp(in + i, http11, n) == 0) {
			*out = in + i;
			*outlen = (unsigned char)n;
			return SSL_TLSEXT_ERR_OK;
		}
		i += n;
	}
	return SSL_TLSEXT_ERR_NOACK;
}

/* Each connection's bufferevent, TLS on the accepting side. NULL (out of
 * memory): evhttp makes a plain one instead, which route_request refuses. */
static struct bufferevent *tls_bev_cb(struct event_base *base, void *arg)
{
	struct web *web = arg;
	SSL *ssl = SSL_new(web->tls);
	if (!ssl)
		return NULL;
	struct bufferevent *bev =
		bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
	if (!bev) {
		SSL_free(ssl);
		return NULL;
	}
	/* A browser that closes without close_notify is no error. */
	bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	return bev;
}

/* HTTPS when pgcat requires TLS of its clients (client_tls_sslmode
 * require, verify-ca, verify-full): the context the clients' own settings
 * build (tls.c: certificate, key, CA, protocols, ciphers and the client
 * certificate check of verify-*), with HTTP's ALPN instead of
 * PostgreSQL's. Below require, plain HTTP, as /metrics always was. */
static bool tls_setup(struct web *web)
{
	const struct config_general *g = &web->w->cfg->general;
	SSL_CTX *ctx = NULL;
	if (g->client_tls_sslmode == TLS_MODE_REQUIRE || g->client_tls_sslmode == TLS_MODE_VERIFY_CA ||
	    g->client_tls_sslmode == TLS_MODE_VERIFY_FULL) {
		struct tls_contexts t = { NULL, NULL };
		char err[256];
		if (!tls_contexts_build(g, &t, err, sizeof err)) {
			log_error("web page: TLS: %s", err);
			return false;
		}
		ctx = t.for_clients;
		t.for_clients = NULL;
		tls_contexts_free(&t);
	}
	/* (connections made before keep the context they hold a reference
	 * to; new ones get the new one) */
	if (web->tls)
		SSL_CTX_free(web->tls);
	web->tls = ctx;
	if (!ctx) {
		evhttp_set_bevcb(web->http, NULL, NULL);
		return true;
	}
	SSL_CTX_set_alpn_select_cb(ctx, http_alpn_cb, NULL);
	SSL_CTX_set_client_hello_cb(ctx, NULL, NULL);
	evhttp_set_bevcb(web->http, tls_bev_cb, web);
	return true;
}

bool web_reconfigure(struct worker *w)
{
	struct web *web = w->web;
	if (!web)
		return true;
	/* A RELOAD may have turned TLS on or off, or changed its files: the
	 * page follows (a failure leaves it as it was, and is logged). */
	const struct config_general *g = &w->cfg->general;
	bool want = g->client_tls_sslmode == TLS_MODE_REQUIRE || g->client_tls_sslmode == TLS_MODE_VERIFY_CA ||
		    g->client_tls_sslmode == TLS_MODE_VERIFY_FULL;
	if (!want && !web->tls)
		return true;
	if (!tls_setup(web))   /* (it fails before it changes anything) */
		return false;
	log_info("web page: %s after the reload", web->tls ? "over TLS (client_tls_*)" : "plain HTTP");
	return true;
}

/* ---- attach, detach ---- */

bool web_attach(struct worker *w, struct evhttp *http)
{
	struct web *web = calloc(1, sizeof *web);
	if (!web)
		return false;
	web->w = w;
	web->http = http;
	list_init(&web->pending);
	if (!pg_random_bytes(web->salt, sizeof web->salt) || !tls_setup(web)) {
		if (web->tls)
			SSL_CTX_free(web->tls);
		free(web);
		return false;
	}
	evhttp_set_cb(http, "/", page_cb, web);
	evhttp_set_cb(http, "/index.html", page_cb, web);
	evhttp_set_cb(http, "/api/state", state_cb, web);
	w->web = web;
	log_info("web page: GET / on the metrics port, %s", web->tls ? "over TLS (client_tls_*)" : "plain HTTP");
	return true;
}

void web_detach(struct worker *w)
{
	struct web *web = w->web;
	if (!web)
		return;
	struct list_node *pos, *tmp;
	LIST_FOREACH_SAFE(pos, tmp, &web->pending) {
		struct web_check *c = LIST_OWNER(pos, struct web_check, node);
		kdf_cancel(&c->kreq);
		reply_error(c->req, 503, "Service Unavailable", "Retry-After", "1");
		check_free(c);
	}
	if (web->tls)
		SSL_CTX_free(web->tls);   /* (each connection's SSL holds its own reference) */
	OPENSSL_cleanse(web->cache, sizeof web->cache);
	free(web);
	w->web = NULL;
}
