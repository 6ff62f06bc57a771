/* SPDX-License-Identifier: MIT */
/*
 * login: a connection from its first byte to its login — the startup
 * packet, SSLRequest/GSSENCRequest and direct TLS, protocol negotiation, a
 * CancelRequest, the authentication exchange — then handed to its session
 * kind (session.h), whose welcome greets it.
 *
 * Above client.c: it drives the client through client.c's functions
 * (client_close, client_set_state, client_cancel_query...), and client.c
 * reaches it only through a table it does not name: the worker hands
 * client_login in (w->login, a struct login_ops of session.h), and the
 * pump calls it for a client in CLIENT_STARTUP or CLIENT_AUTH. So the
 * login takes no part in the core's circle (doc/architecture.md).
 */
#include "login.h"

#include <openssl/crypto.h>
#include <openssl/ssl.h>

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin_login.h"
#include "auth.h"
#include "auth_query.h"
#include "cancel.h"
#include "client.h"
#include "config.h"
#include "context.h"
#include "handover_link.h"
#include "hba.h"
#include "ident.h"
#include "log.h"
#include "peer.h"
#include "pktbuf.h"
#include "pool.h"
#include "proto.h"
#include "session.h"
#include "shm.h"
#include "tls.h"

/* SSLRequest/GSSENCRequest answered before the real startup packet. */
#define CLIENT_MAX_NEGOTIATIONS 2
/* Admin-console logins allowed beyond max_client_conn (SPEC §3). */
#define ADMIN_EXTRA_CONNECTIONS 5

static void login_done(struct client *c);
static void auth_derived(void *arg);

/* The replication parameter as PostgreSQL reads it: "database" (logical),
 * else a boolean (its words, or a prefix that tells one from the others,
 * in any case). false: neither. */
static bool replication_kind(const char *v, enum client_replication *kind)
{
	if (strcmp(v, "database") == 0) {
		*kind = CLIENT_REPLICATION_LOGICAL;
		return true;
	}
	static const struct {
		const char *word;
		size_t min;   /* the shortest prefix PostgreSQL takes */
		bool value;
	} words[] = { { "true", 1, true }, { "false", 1, false }, { "yes", 1, true },
		      { "no", 1, false },  { "on", 2, true },     { "off", 2, false },
		      { "1", 1, true },    { "0", 1, false } };
	size_t n = strlen(v);
	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
		if (n >= words[i].min && n <= strlen(words[i].word) && strncasecmp(v, words[i].word, n) == 0) {
			*kind = words[i].value ? CLIENT_REPLICATION_PHYSICAL : CLIENT_REPLICATION_NONE;
			return true;
		}
	}
	return false;
}

/* The client's startup settings, taken as PostgreSQL takes them: the
 * "options" first, then the other parameters (which win over them), each
 * refused with PostgreSQL's error where pgcat can tell without a server
 * (params_options.c). false: the client was closed. */
static bool startup_params(struct client *c, const struct proto_startup *st)
{
	struct params_refusal why;
	enum client_replication kind;
	/* ignore_startup_parameters: dropped unread, inside options too. */
	const char *ignore = c->w->cfg->general.ignore_startup_parameters;
	for (size_t i = 0; i < st->n_params; i++) {
		if (strcmp(st->params[i].name, "options") != 0)
			continue;
		if (!params_apply_options_ignoring(&c->params, st->params[i].value, ignore, &why)) {
			/* "options" in the list: a refused options is dropped
			 * whole (they come first: nothing else is set yet). */
			if (params_name_listed(ignore, "options")) {
				log_debug("C-%llu: startup options dropped (ignore_startup_parameters): %s",
					  (unsigned long long)c->id, why.message);
				params_clear(&c->params);
				params_init(&c->params);
				continue;
			}
			client_close(c, why.sqlstate, "%s", why.message);
			return false;
		}
	}
	for (size_t i = 0; i < st->n_params; i++) {
		const char *name = st->params[i].name, *value = st->params[i].value;
		if (strcmp(name, "user") == 0 || strcmp(name, "database") == 0 || strcmp(name, "options") == 0) {
			/* user and database: taken by set_names after the loop */
		} else if (strcmp(name, "replication") == 0) {
			if (!replication_kind(value, &kind)) {
				client_close(c, SQLSTATE_INVALID_PARAMETER_VALUE, "invalid value for parameter \"replication\": \"%s\"",
					     value);
				return false;
			}
			c->replication = kind;
		} else if (proto_is_protocol_option(name)) {
			/* protocol options: pgcat knows none; each was named back in
			 * NegotiateProtocolVersion, and none goes to a server */
		} else if (params_name_listed(ignore, name)) {
			/* ignore_startup_parameters */
		} else if (!params_check_startup(name, value, &why)) {
			client_close(c, why.sqlstate, "%s", why.message);
			return false;
		} else if (!params_set(&c->params, name, value, false)) {
			client_close(c, "54000", "too many or too long settings in the startup packet");
			return false;
		}
	}
	return true;
}

/* user and database (the user's name when not given), cut to 63 bytes as
 * PostgreSQL's NAMEDATALEN does, in one allocation. */
static bool set_names(struct client *c, const struct proto_startup *st)
{
	const char *user = "", *db = "";
	for (size_t i = 0; i < st->n_params; i++) {
		if (strcmp(st->params[i].name, "user") == 0)
			user = st->params[i].value;
		else if (strcmp(st->params[i].name, "database") == 0)
			db = st->params[i].value;
	}
	if (!db[0])
		db = user;
	size_t ul = strnlen(user, 63), dl = strnlen(db, 63);
	char *names = malloc(ul + 1 + dl + 1);
	if (!names) {
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	memcpy(names, user, ul);
	names[ul] = '\0';
	memcpy(names + ul + 1, db, dl);
	names[ul + 1 + dl] = '\0';
	free(c->names);
	c->names = names;
	return true;
}

static void handle_cancel_request(struct client *c, uint32_t pid, const uint8_t *key, size_t key_len)
{
	struct cancel_forward fwd;
	struct client *target = cancel_handle_request(&c->w->cancel, pid, key, key_len, &fwd);
	if (target)
		client_cancel_query(target);
	else if (fwd.peer_id)
		peer_forward_cancel(c->w, &fwd);   /* another instance's key (SPEC §3.4) */
	else if (fwd.unknown_worker >= 0)
		handover_forward_cancel(c->w, fwd.unknown_worker, pid, key, key_len);   /* (-R) */
	client_close(c, NULL, NULL);
}

/* Protocol negotiation as PostgreSQL does it: a minor version above what
 * pgcat speaks, or protocol options it does not know, are answered with a
 * NegotiateProtocolVersion and the login goes on. */
static bool negotiate_protocol(struct client *c, const struct proto_startup *st)
{
	size_t n_unknown = 0;
	for (size_t i = 0; i < st->n_params; i++)
		if (proto_is_protocol_option(st->params[i].name))
			n_unknown++;
	uint32_t version;
	if (!proto_negotiation_needed(st->version, n_unknown, &version))
		version = st->version;
	else {
		/* The names fit: they came in a packet of at most PROTO_STARTUP_MAX. */
		uint8_t storage[PROTO_STARTUP_MAX + 64];
		struct pktbuf pb;
		pktbuf_init(&pb, storage, sizeof storage);
		pktbuf_begin(&pb, PqMsg_NegotiateProtocolVersion);
		pktbuf_put_u32(&pb, version);
		pktbuf_put_u32(&pb, (uint32_t)n_unknown);
		for (size_t i = 0; i < st->n_params; i++)
			if (proto_is_protocol_option(st->params[i].name))
				pktbuf_put_cstring(&pb, st->params[i].name);
		pktbuf_end(&pb);
		if (pb.failed) {
			client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "invalid startup packet layout");
			return false;
		}
		client_send_pkt(c, &pb);
	}
	/* 3.2 and later: a 32-byte cancel key; 3.0 and 3.1 (which PostgreSQL
	 * 18 also serves with 4-byte keys): 4 bytes. */
	c->long_cancel_key = PG_PROTOCOL_MINOR(version) >= 2;
	return true;
}

/* auth_hba_file: the first line that matches the login (connection type,
 * database, user, address) decides its method. No line, or a reject line:
 * refused (28000), as PostgreSQL refuses it. false: the client is closed. */
/* On a pgbouncer.ini, as PgBouncer: the admin console as user
 * "pgbouncer" over the Unix socket, from a process of pgcat's own OS user
 * (the kernel's peer credentials), needs no password. */
static bool console_peer(const struct client *c)
{
	if (!c->is_admin || !c->is_unix || !c->w->cfg->pgbouncer || strcmp(client_user(c), "pgbouncer") != 0)
		return false;
	struct ucred cred;
	socklen_t len = sizeof cred;
	return getsockopt(c->io.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof cred &&
	       cred.uid == getuid();
}

/* max_db_client_connections and max_user_client_connections (PgBouncer's):
 * the client, counted in already, over every worker. false: refused. */
static bool over_caps(struct client *c, const char *db, int db_cap)
{
	struct worker *w = c->w;
	if (db_cap > 0 && shm_pool_clients_of(w->shm, db, NULL) > db_cap) {
		client_close(c, SQLSTATE_TOO_MANY_CONNECTIONS, "client connections exceeded (max_db_client_connections)");
		return true;
	}
	int user_cap = config_user_max_client_connections(w->cfg, client_user(c));
	if (user_cap > 0 && shm_pool_clients_of(w->shm, NULL, client_user(c)) > user_cap) {
		client_close(c, SQLSTATE_TOO_MANY_CONNECTIONS,
			     "client connections exceeded (max_user_client_connections)");
		return true;
	}
	return false;
}

/* The console's clients count as PgBouncer counts them: as clients of the
 * console's database (SHOW DATABASES) and of their user, under [general]'s
 * caps, admin_users (and the peer pgbouncer user) excepted. false: refused. */
static bool console_caps_ok(struct client *c)
{
	struct worker *w = c->w;
	if (!w->shm)
		return true;
	int slot = shm_pool_slot(w->shm, client_database(c), client_user(c));
	if (slot < 0)
		return true;   /* (the directory is full: not counted) */
	c->count_slot = (int16_t)slot;
	shm_pool_clients_add(w->shm, w->id, slot, 1);
	if (admin_role_of(w->cfg, client_user(c)) == ADMIN_ROLE_ADMIN || console_peer(c))
		return true;
	return !over_caps(c, client_database(c), w->cfg->general.max_db_client_connections);
}

static bool client_caps_ok(struct client *c)
{
	struct worker *w = c->w;
	const struct pool *p = c->pool;
	if (!w->shm)
		return true;
	return !over_caps(c, p->name, config_pool_max_db_client_connections(w->cfg, p->cpool));
}

/* The OS user name of the process at the other end of a Unix socket.
 * false (logged): not a Unix socket, or no credentials or passwd entry. */
static bool peer_os_user(struct client *c, char *out, size_t outlen)
{
	unsigned long long id = (unsigned long long)c->id;
	struct ucred cred;
	socklen_t len = sizeof cred;
	if (!c->is_unix || getsockopt(c->io.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred) {
		log_info("C-%llu %s@%s: peer authentication: could not get the client's credentials%s%s", id,
			 client_user(c), client_database(c), c->is_unix ? ": " : "", c->is_unix ? strerror(errno) : "");
		return false;
	}
	struct passwd pw, *found = NULL;
	char buf[4096];
	int rc = getpwuid_r(cred.uid, &pw, buf, sizeof buf, &found);
	if (rc != 0 || found == NULL) {
		log_info("C-%llu %s@%s: peer authentication: no OS user name for uid %lu%s%s", id, client_user(c),
			 client_database(c), (unsigned long)cred.uid, rc ? ": " : "", rc ? strerror(rc) : "");
		return false;
	}
	size_t n = strlen(pw.pw_name);
	if (n >= outlen) {
		log_info("C-%llu %s@%s: peer authentication: OS user name of uid %lu too long", id, client_user(c),
			 client_database(c), (unsigned long)cred.uid);
		return false;
	}
	memcpy(out, pw.pw_name, n + 1);
	return true;
}

/* Whether the system user (a peer's OS user, a certificate's CN) may log
 * in as the client's user under the line r: the same name, or through
 * r's map of auth_ident_file. A refusal is logged, not sent. */
static bool system_user_ok(struct client *c, const struct hba_rule *r, const char *system_user, const char *what,
			   const char *host)
{
	const char *user = client_user(c);
	if (r->map ? ident_match(c->w->cfg->ident, r->map, system_user, user) : strcmp(system_user, user) == 0)
		return true;
	unsigned long long id = (unsigned long long)c->id;
	if (r->map)
		log_info("C-%llu %s@%s %s:%d: %s authentication failed (auth_hba_file line %d): ident map %s cannot be "
			 "matched: \"%s\" may not log in as \"%s\"", id, user, client_database(c), host, c->port, what,
			 r->line, r->map, system_user, user);
	else
		log_info("C-%llu %s@%s %s:%d: %s authentication failed (auth_hba_file line %d): \"%s\" is not the user "
			 "name", id, user, client_database(c), host, c->port, what, r->line, system_user);
	return false;
}

/* The method of c's login: its auth_hba_file line's, or auth_type's
 * (AUTH_RULE_AUTH_TYPE); for ldap the options (*ldap, the config's), for
 * pam the service (*pam_service, the config's). false: refused (c closed). */
static bool hba_decide(struct client *c, enum client_auth_rule *rule, const struct ldap_opts **ldap,
		       const char **pam_service)
{
	const struct config *cfg = c->w->cfg;
	const struct hba *h = cfg->hba;
	*rule = AUTH_RULE_AUTH_TYPE;
	*ldap = NULL;
	*pam_service = NULL;
	if (!h) {
		if (cfg->general.auth_type == AUTH_TYPE_LDAP && cfg->ldap) {
			*rule = AUTH_RULE_LDAP;
			*ldap = cfg->ldap;
		} else if (cfg->general.auth_type == AUTH_TYPE_PAM) {
			*rule = AUTH_RULE_PAM;
			*pam_service = cfg->general.auth_pam_service;
		}
		return true;
	}
	bool tls = c->io.ssl != NULL;
	struct hba_login l = { .is_unix = c->is_unix, .tls = tls, .family = c->peer_family, .addr = &c->peer,
			       .database = client_database(c), .user = client_user(c),
			       .physical_replication = c->replication == CLIENT_REPLICATION_PHYSICAL };
	const struct hba_rule *r = hba_match(h, &l);
	char a[CLIENT_ADDR_STRLEN];
	const char *host = c->is_unix ? "[local]" : client_addr_str(c, a);
	unsigned long long id = (unsigned long long)c->id;
	if (!r || r->method == HBA_REJECT) {
		if (r)
			log_info("C-%llu %s@%s %s:%d: refused by auth_hba_file line %d (reject)", id, l.user, l.database,
				 host, c->port, r->line);
		else
			log_info("C-%llu %s@%s %s:%d: refused: no auth_hba_file line matches", id, l.user, l.database,
				 host, c->port);
		client_close(c, SQLSTATE_INVALID_AUTHORIZATION, "%s for host \"%s\", user \"%s\", database \"%s\", %s",
			     r ? "auth_hba_file rejects connection" : "no auth_hba_file entry", host, l.user, l.database,
			     tls ? "SSL encryption" : "no encryption");
		return false;
	}
	/* cert: a client certificate checked against the CA in the handshake
	 * whose common name is the user name, or maps to it (map=). */
	if (r->method == HBA_CERT) {
		char cn[256];
		bool cert_ok = tls && SSL_get_verify_result(c->io.ssl) == X509_V_OK &&
			       tls_client_cert_cn(c->io.ssl, cn, sizeof cn);
		if (!cert_ok || !system_user_ok(c, r, cn, "certificate", host)) {
			if (!cert_ok)
				log_info("C-%llu %s@%s %s:%d: certificate authentication failed (auth_hba_file line %d): "
					 "%s", id, l.user, l.database, host, c->port, r->line,
					 tls ? "no verified client certificate with a common name" : "no TLS");
			client_close(c, SQLSTATE_INVALID_AUTHORIZATION, "certificate authentication failed for user \"%s\"",
				     l.user);
			return false;
		}
	}
	/* peer: the client process's OS user, from the kernel (SO_PEERCRED),
	 * is the user name or maps to it. The same refusal whether or not
	 * the user exists: nothing else has been looked at yet. */
	if (r->method == HBA_PEER) {
		char os_user[256];
		if (!peer_os_user(c, os_user, sizeof os_user) || !system_user_ok(c, r, os_user, "peer", host)) {
			client_close(c, SQLSTATE_INVALID_AUTHORIZATION, "peer authentication failed for user \"%s\"",
				     l.user);
			return false;
		}
	}
	switch (r->method) {
	case HBA_MD5: *rule = AUTH_RULE_MD5; break;
	case HBA_SCRAM: *rule = AUTH_RULE_SCRAM; break;
	case HBA_PASSWORD: *rule = AUTH_RULE_PASSWORD; break;
	case HBA_LDAP:
		*rule = AUTH_RULE_LDAP;
		*ldap = &r->ldap;
		break;
	case HBA_PAM:
		*rule = AUTH_RULE_PAM;
		*pam_service = r->pam_service ? r->pam_service : cfg->general.auth_pam_service;
		break;
	case HBA_TRUST:
	case HBA_CERT:   /* (its certificate checked above: the login is done) */
	case HBA_PEER:   /* (its OS user checked above) */
	case HBA_REJECT: /* (refused above) */
		*rule = AUTH_RULE_TRUST;
		break;
	}
	log_debug("C-%llu %s@%s %s:%d: auth_hba_file line %d: %s", id, l.user, l.database, host, c->port, r->line,
		  hba_method_name(r->method));
	return true;
}

/* A refused login, in PostgreSQL's words; on a pgbouncer.ini in
 * PgBouncer's, which name the method (operators' alerts look for them). */
static void close_auth_failed(struct client *c)
{
	enum client_auth_method m = c->auth ? c->auth->method : CLIENT_AUTH_MD5;
	if (m == CLIENT_AUTH_LDAP || m == CLIENT_AUTH_PAM) {
		/* (28000 and these words: PostgreSQL's and PgBouncer's) */
		const char *what = m == CLIENT_AUTH_PAM ? "PAM" : "LDAP";
		log_info("C-%llu %s@%s: %s authentication failed: %s", (unsigned long long)c->id, client_user(c),
			 client_database(c), what, c->auth->pwcheck_why);
		if (c->w->cfg->pgbouncer)
			client_close(c, SQLSTATE_INVALID_AUTHORIZATION, "%s authentication failed", what);
		else
			client_close(c, SQLSTATE_INVALID_AUTHORIZATION, "%s authentication failed for user \"%s\"", what,
				     client_user(c));
		return;
	}
	if (!c->w->cfg->pgbouncer) {
		client_close(c, SQLSTATE_INVALID_PASSWORD, "password authentication failed for user \"%s\"", client_user(c));
		return;
	}
	client_close(c, SQLSTATE_INVALID_PASSWORD, "%s",
		     m == CLIENT_AUTH_SCRAM   ? "SASL authentication failed"
		     : m == CLIENT_AUTH_TRUST ? "\"trust\" authentication failed"
					      : "password authentication failed");
}

/* c is own's user: it counts in own's figures and is served by
 * pool_serving's pool. false: c was closed (a cap, a disabled database). */
static bool attach_pool(struct client *c, struct pool *own)
{
	struct worker *w = c->w;
	c->pool = pool_serving(w, own);
	c->pool->n_clients++;
	if (w->shm && own->shm_slot >= 0) {
		c->count_slot = (int16_t)own->shm_slot;
		shm_pool_clients_add(w->shm, w->id, own->shm_slot, 1);
	}
	if (!client_caps_ok(c))
		return false;
	if (c->pool->disabled) {
		client_close(c, SQLSTATE_CONNECTION_FAILURE, "database \"%s\" is disabled", client_database(c));
		return false;
	}
	return true;
}

static void start_login(struct client *c)
{
	struct worker *w = c->w;
	if (!client_user(c)[0]) {
		client_close(c, SQLSTATE_INVALID_AUTHORIZATION, "no PostgreSQL user name specified in startup packet");
		return;
	}
	const struct config_general *g = &w->cfg->general;
	/* The admin console: its own database names, unless a pool took them. */
	c->is_admin = config_is_console_db(client_database(c)) && !pool_db_exists(w, client_database(c));
	/* Its session: the admin console's, which the worker hands in. */
	if (c->is_admin)
		c->session = w->admin_session;
	else if (c->replication != CLIENT_REPLICATION_NONE)
		c->session = w->replication_session;
	if (c->is_admin && c->replication != CLIENT_REPLICATION_NONE) {
		client_close(c, SQLSTATE_FEATURE_NOT_SUPPORTED, "the admin console takes no replication connections");
		return;
	}
	/* SHUTDOWN WAIT_FOR_*: the Unix socket still takes the console only. */
	if (!c->is_admin && (w->waiting_for_clients || w->waiting_for_servers)) {
		client_close(c, SQLSTATE_ADMIN_SHUTDOWN, "pooler is shutting down");   /* PgBouncer's words */
		return;
	}
	/* An operator can always get in: admin logins have 5 slots of their own. */
	/* max_client_conn holds for the instance: every worker's clients count. */
	if (shm_clients_total(w->shm) > g->max_client_conn + (c->is_admin ? ADMIN_EXTRA_CONNECTIONS : 0)) {
		/* (PostgreSQL's words, or on a pgbouncer.ini PgBouncer's) */
		client_close(c, SQLSTATE_TOO_MANY_CONNECTIONS, "%s",
			     w->cfg->pgbouncer ? "no more connections allowed (max_client_conn)" : "too many clients already");
		return;
	}
	/* verify-full: the certificate (checked against the CA in the
	 * handshake) must also name this user, as clientcert=verify-full. */
	if (c->io.ssl && g->client_tls_sslmode == TLS_MODE_VERIFY_FULL && !tls_client_cert_matches_user(c->io.ssl, client_user(c))) {
		client_close(c, "28000", "certificate authentication failed for user \"%s\"", client_user(c));
		return;
	}
	if (c->is_admin && !console_caps_ok(c))
		return;
	if (console_peer(c)) {
		c->console_peer = true;
		if (g->log_connections)
			log_info("C-%llu pgbouncer@%s unix: pgbouncer access from unix socket", (unsigned long long)c->id,
				 client_database(c));
		login_done(c);
		return;
	}
	enum client_auth_rule rule;
	const struct ldap_opts *ldap;
	const char *pam_service;
	if (!hba_decide(c, &rule, &ldap, &pam_service))
		return;
	struct auth_credentials cred = { 0 };
	const struct auth_credentials *credp = NULL;
	struct scram_secret console_scram;   /* a listed console user's verifier */
	if (c->is_admin) {
		/* admin_username, admin_users and stats_users (admin_login.c). */
		if (!admin_login_credentials(w, client_user(c), &cred, &console_scram)) {
			client_close(c, SQLSTATE_INVALID_AUTHORIZATION,
				     "user \"%s\" is not allowed to connect to the admin console", client_user(c));
			return;
		}
		credp = &cred;
		/* A listed user without a password of pgcat's: auth_query's
		 * (PgBouncer's way; this function runs again with the answer).
		 * No LDAP or PAM login needs one. */
		const char *secret;
		if (!cred.password && rule != AUTH_RULE_LDAP && rule != AUTH_RULE_PAM &&
		    (config_list_has(w->cfg->general.admin_users, client_user(c)) ||
		     config_list_has(w->cfg->general.stats_users, client_user(c)))) {
			if (auth_query_console_login(c, start_login, &secret))
				return;
			if (secret)
				admin_login_looked_up(w, secret, &cred, &console_scram);
			else if (w->cfg->general.auth_user[0])
				credp = NULL;   /* auth_query does not know it: refused as unknown */
		}
	} else {
		/* A name no pool has: made from `*` when there is one. */
		const struct config_pool *named = config_find_pool(w->cfg, client_database(c));
		if ((!named || named->autodb_instance) && !pool_add_autodb(w, client_database(c), client_user(c))) {
			if (!w->cfg->pgbouncer) {
				client_close(c, SQLSTATE_INVALID_CATALOG_NAME, "database \"%s\" does not exist",
					     client_database(c));
				return;
			}
			/* A pgbouncer.ini: PgBouncer's order, the client first
			 * proves who it is (its auth_file line), then hears
			 * "no such database" (login_done). */
			c->unknown_database = true;
			if (auth_file_login_credentials(w, client_user(c), &cred, &console_scram))
				credp = &cred;
			goto authenticate;
		}
		/* A user of no config: looked up on the server first (auth_query;
		 * this function runs again with the answer). An LDAP login
		 * needs no lookup: the LDAP server decides, and the password it
		 * takes logs in to the servers (ldap_pool, at the end). */
		if (rule != AUTH_RULE_LDAP && rule != AUTH_RULE_PAM && auth_query_login(c, start_login))
			return;
		/* Its own pool holds its credentials; the pool that serves it is
		 * the forced user's where its database has one (pool_serving). A
		 * forced user no client may log in as has no credentials. */
		struct pool *own = pool_find(w, client_database(c), client_user(c));
		if (own && own->cuser && own->cuser->server_only)
			own = NULL;
		/* The pool of a user an LDAP server or PAM let in holds the
		 * password they took: no other method logs in with it (such a
		 * login is of an unknown user). */
		if (own && own->proven && rule != AUTH_RULE_LDAP && rule != AUTH_RULE_PAM)
			own = NULL;
		if (own && !attach_pool(c, own))
			return;
		if (own) {
			cred.password = own->cuser ? own->cuser->password : NULL;
			cred.scram = pool_client_scram(own);
			credp = &cred;
		}
	}
authenticate:;
	/* Only the head is zeroed: the SCRAM state (3 kB) is set up by
	 * scram_server_init when the method is SCRAM, and untouched otherwise. */
	c->auth = malloc(sizeof *c->auth);
	if (c->auth)
		memset(c->auth, 0, offsetof(struct client_auth, scram));
	if (!c->auth) {
		client_close(c, SQLSTATE_INTERNAL_ERROR, "out of memory");
		return;
	}
	c->auth->rule = rule;
	if (ldap && !ldap_opts_copy(&c->auth->ldap, ldap)) {
		client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
		return;
	}
	if (pam_service) {
		char a[CLIENT_ADDR_STRLEN];
		c->auth->pam_service = strdup(pam_service);
		c->auth->pam_rhost = strdup(c->is_unix ? "[local]" : client_addr_str(c, a));
		if (!c->auth->pam_service || !c->auth->pam_rhost) {
			client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
			return;
		}
	}
	c->auth->derived = auth_derived;
	c->auth->arg = c;
	enum auth_outcome o = auth_client_begin(w, client_user(c), credp, c->auth, io_out(&c->io));
	switch (o) {
	case AUTH_OK:
		login_done(c);
		return;
	case AUTH_CONTINUE:
	case AUTH_PENDING:   /* (never at the start: nothing is derived before a password comes) */
		client_set_state(c, CLIENT_AUTH);
		return;
	case AUTH_FAILED:
	case AUTH_PROTOCOL_ERROR:   /* (client_close logs why) */
		close_auth_failed(c);
		return;
	}
}

/* SSLRequest with client TLS on: 'S' in clear, then the handshake. */
static void start_client_tls(struct client *c)
{
	/* Bytes sent after the SSLRequest, before our answer, would be taken
	 * as if they came through TLS (CVE-2021-23214): refuse them. */
	if (c->io.in && buf_len(c->io.in) > 0) {
		client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "received unencrypted data after SSL request");
		return;
	}
	io_flush(&c->io);   /* an earlier 'N' (GSSENCRequest) goes first, in clear */
	SSL *ssl = SSL_new(c->w->tls.for_clients);
	if (io_out_len(&c->io) > 0 || !ssl || send(c->io.fd, "S", 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
		if (ssl)
			SSL_free(ssl);
		client_close(c, NULL, NULL);
		return;
	}
	SSL_set_accept_state(ssl);
	io_start_tls(&c->io, ssl);
}

/* Direct TLS (PostgreSQL 17, libpq's sslnegotiation=direct): the first
 * bytes are a ClientHello, not a startup packet; the startup packet comes
 * inside TLS once the handshake is done. As PostgreSQL, pgcat refuses it
 * without a word when it has no TLS to offer (an ErrorResponse in clear
 * means nothing to a TLS client). */
static void start_direct_tls(struct client *c)
{
	char a[CLIENT_ADDR_STRLEN];
	if (!c->w->tls.for_clients || c->is_unix) {
		log_info("C-%llu %s:%d: direct TLS connection refused: %s", (unsigned long long)c->id,
			 client_addr_str(c, a), c->port, c->is_unix ? "not on a Unix socket" : "client TLS is off");
		client_close(c, NULL, NULL);
		return;
	}
	SSL *ssl = SSL_new(c->w->tls.for_clients);
	if (!ssl) {
		client_close(c, NULL, NULL);
		return;
	}
	SSL_set_accept_state(ssl);
	tls_mark_direct(ssl);   /* its ClientHello must offer ALPN "postgresql" */
	/* The ClientHello is in the input buffer already: the handshake reads
	 * it from there first. */
	io_start_tls_replay(&c->io, ssl);
}

/* A first packet whose length no startup packet has: a Terminate sent
 * before any startup packet (node-postgres's connect() then end()), an
 * HTTP request, a port scan. As PostgreSQL does, it is logged and the
 * connection closed without a word: a client that sends this is not
 * speaking the protocol yet, or is leaving, and an ErrorResponse would
 * only surprise it. */
static void refuse_length(struct client *c)
{
	char a[CLIENT_ADDR_STRLEN];
	log_info("C-%llu %s:%d: invalid length of startup packet", (unsigned long long)c->id, client_addr_str(c, a),
		 c->port);
	io_flush(&c->io);   /* an 'N' to an SSLRequest before it still goes */
	client_close(c, NULL, NULL);
}

/* A protocol major version other than 3, answered as PostgreSQL answers
 * it: FATAL 0A000; below 3 (but not 0.0, which PostgreSQL answers in the
 * current format), in the old protocol's error format (an 'E' and the
 * text, no length), the one such a client can read. */
static void refuse_version(struct client *c, uint32_t version)
{
	unsigned major = PG_PROTOCOL_MAJOR(version), minor = PG_PROTOCOL_MINOR(version);
	if (major >= 3 || version == 0) {
		client_close(c, SQLSTATE_FEATURE_NOT_SUPPORTED,
			     "unsupported frontend protocol %u.%u: server supports 3.0 to 3.%u", major, minor,
			     PROTO_MINOR_LATEST);
		return;
	}
	char msg[128];
	int n = snprintf(msg, sizeof msg, "EFATAL:  unsupported frontend protocol %u.%u: server supports 3.0 to 3.%u\n",
			 major, minor, PROTO_MINOR_LATEST);
	if (n > 0 && (size_t)n < sizeof msg) {
		buf_add(io_out(&c->io), msg, (size_t)n + 1);   /* with its NUL */
		io_flush(&c->io);
	}
	client_close(c, NULL, NULL);
}

static void process_startup(struct client *c)
{
	struct buf *in = c->io.in;
	while (c->state == CLIENT_STARTUP) {
		uint8_t hdr[8];
		ssize_t got = buf_copyout(in, hdr, sizeof hdr);
		/* 0x16, a TLS handshake record, where the first byte of a length
		 * would be (a startup packet of hundreds of megabytes): direct
		 * TLS, taken only as the very first bytes, as PostgreSQL does. */
		if (got >= 1 && hdr[0] == 0x16 && !c->io.ssl && c->skip_remaining == 0) {
			start_direct_tls(c);
			return;
		}
		if (got < 4)
			return;
		uint32_t len = proto_get_u32(hdr);
		if (len < 8 || len > PROTO_STARTUP_MAX) {
			refuse_length(c);
			return;
		}
		if (buf_len(in) < len)
			return;
		const uint8_t *buf = buf_pullup(in, len);
		struct proto_startup st;
		enum proto_startup_result r = proto_parse_startup(buf, len, &st);
		switch (r) {
		case PROTO_STARTUP_RESULT_OK:
			break;
		case PROTO_STARTUP_RESULT_NEED_MORE:
			return;
		case PROTO_STARTUP_RESULT_BAD_LENGTH:
			refuse_length(c);
			return;
		case PROTO_STARTUP_RESULT_BAD_VERSION:
			refuse_version(c, st.version);
			return;
		case PROTO_STARTUP_RESULT_MALFORMED:
			/* A CancelRequest with a key of no possible length: closed
			 * without a word, as an unknown key is (and as PostgreSQL
			 * does). */
			if (st.kind == PROTO_STARTUP_CANCEL) {
				client_close(c, NULL, NULL);
				return;
			}
			client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "invalid startup packet layout");
			return;
		}
		switch (st.kind) {
		case PROTO_STARTUP_SSL:
		case PROTO_STARTUP_GSSENC: {
			buf_drain(in, len);
			if (++c->skip_remaining > CLIENT_MAX_NEGOTIATIONS) {
				client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "too many encryption requests");
				return;
			}
			if (st.kind == PROTO_STARTUP_SSL && c->w->tls.for_clients && !c->is_unix && !c->io.ssl) {
				start_client_tls(c);
				return;
			}
			/* No TLS here (off, a unix socket, or already on): 'N', and
			 * the client goes on in plain text (or, libpq 17, sends its
			 * CancelRequest). */
			buf_add(io_out(&c->io), "N", 1);
			continue;
		}
		case PROTO_STARTUP_CANCEL: {
			/* The key points into the packet, which draining frees. */
			uint8_t key[PROTO_CANCEL_KEY_MAX];
			size_t key_len = st.cancel_key_len;
			memcpy(key, st.cancel_key, key_len);
			buf_drain(in, len);
			handle_cancel_request(c, st.cancel_pid, key, key_len);
			return;
		}
		case PROTO_STARTUP_NORMAL:
			break;
		}
		c->skip_remaining = 0;
		/* client_tls_sslmode require and verify-*: TCP clients must have
		 * asked for TLS (a CancelRequest above needs none). */
		if (!c->io.ssl && !c->is_unix && c->w->cfg->general.client_tls_sslmode >= TLS_MODE_REQUIRE) {
			client_close(c, "28000", "SSL required");
			return;
		}
		if (!negotiate_protocol(c, &st))
			return;
		if (!startup_params(c, &st))
			return;
		if (!set_names(c, &st))
			return;
		buf_drain(in, len);
		params_copy(&c->startup_params, &c->params);
		start_login(c);
		return;
	}
}

/* The outcome of one step of the exchange. */
static void after_auth_step(struct client *c, enum auth_outcome o)
{
	switch (o) {
	case AUTH_CONTINUE:
	case AUTH_PENDING:   /* (the derived event comes) */
		return;
	case AUTH_OK:
		login_done(c);
		return;
	case AUTH_FAILED:   /* (client_close logs why) */
		close_auth_failed(c);
		return;
	case AUTH_PROTOCOL_ERROR:
		client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "invalid authentication message");
		return;
	}
}

/* The key a password given in clear needed is derived (kdf.c, off the
 * loop): the verdict, then whatever the client sent meanwhile. */
static void auth_derived(void *arg)
{
	struct client *c = arg;
	worker_update_clock(c->w);
	after_auth_step(c, auth_client_resume(c->is_admin ? NULL : c->pool, c->auth));
	if (c->state != CLIENT_CLOSED)
		client_process(c);
}

static void process_auth(struct client *c)
{
	struct buf *in = c->io.in;
	while (c->state == CLIENT_AUTH && !auth_client_pending(c->auth)) {
		uint8_t hdr[5];
		if (buf_copyout(in, hdr, 5) < 5)
			return;
		struct proto_frame f;
		if (proto_frame_header(hdr, 5, PROTO_AUTH_MSG_MAX, &f) != PROTO_FRAME_OK ||
		    f.type != PqMsg_PasswordMessage) {
			client_close(c, SQLSTATE_PROTOCOL_VIOLATION, "expected password response, got message type %d", hdr[0]);
			return;
		}
		if (buf_len(in) < f.len + 1)
			return;
		unsigned char *buf = buf_pullup(in, f.len + 1);
		if (!buf) {
			client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
			return;
		}
		enum auth_outcome o = auth_client_step(c->w, c->is_admin ? NULL : c->pool, c->auth, client_user(c),
						       buf + 5, f.len - 4, io_out(&c->io));
		/* It may be a password in clear: wiped before the buffer goes back. */
		OPENSSL_cleanse(buf, f.len + 1);
		buf_drain(in, f.len + 1);
		after_auth_step(c, o);
	}
}


/* An LDAP or PAM login's user: the password the LDAP server or PAM took
 * logs in to the servers. A user of no config gets a pool of its own, made now
 * (as auth_query's users: settings inherited, kept by reloads while its
 * database is configured), or its pool follows the password; a user the
 * config lists keeps the config's. false: c was closed. */
static bool proven_pool(struct client *c, const char *password)
{
	struct worker *w = c->w;
	if (c->is_admin || c->unknown_database)
		return true;
	struct pool *own = pool_find(w, client_database(c), client_user(c));
	if (own && own->cuser && own->cuser->server_only) {
		/* (as for the other methods: no client logs in as a forced user) */
		client_close(c, SQLSTATE_INVALID_AUTHORIZATION, "%s authentication failed for user \"%s\"",
			     c->auth->method == CLIENT_AUTH_PAM ? "PAM" : "LDAP", client_user(c));
		return false;
	}
	if (own && own->own_user) {
		own->proven = true;
		if (!pool_set_looked_up_secret(own, password)) {
			client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
			return false;
		}
	}
	if (c->pool)
		return true;
	if (!own) {
		const struct config_pool *cp = config_find_pool(w->cfg, client_database(c));
		own = cp ? pool_add_looked_up(w, cp, client_user(c), password) : NULL;
		if (!own) {
			client_close(c, SQLSTATE_OUT_OF_MEMORY, "out of memory");
			return false;
		}
		own->proven = true;
		log_info("pool %s user %s: made for a user %s let in", own->name, own->user,
			 c->auth->method == CLIENT_AUTH_PAM ? "PAM" : "the LDAP server");
	}
	return attach_pool(c, own);
}

static void login_done(struct client *c)
{
	const char *proven = c->auth ? auth_client_proven_password(c->auth) : NULL;
	if (proven && !proven_pool(c, proven))
		return;
	auth_client_free(c->auth);
	c->auth = NULL;
	/* SUSPEND: a new client waits for RESUME as the others do (its
	 * welcome goes out; what it sends is read then). */
	if (c->w->suspended && !c->is_admin)
		io_suspend(&c->io, true);
	if (c->unknown_database) {
		/* (PgBouncer's words, which its users' scripts and alerts look for) */
		client_close(c, SQLSTATE_INVALID_CATALOG_NAME, "no such database: %s", client_database(c));
		return;
	}
	c->session->welcome(c);
}


const struct login_ops client_login = {
	.read_startup = process_startup,
	.read_auth = process_auth,
};
