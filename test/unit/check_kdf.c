/* SPDX-License-Identifier: MIT */
/* Unit tests for kdf: SCRAM key derivation on threads, results back to an
 * event loop, its cache, shared jobs, cancelled requests; and auth_backend
 * waiting for it. */
#include "check_suites.h"

#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "auth_backend.h"
#include "kdf.h"
#include "proto.h"

struct waiter {
	struct kdf_request req;
	int calls;
	bool ok;
	uint8_t salted[SCRAM_KEY_LEN];
};

static void waiter_done(struct kdf_request *req, bool ok, const uint8_t *salted)
{
	struct waiter *wt = (struct waiter *)((char *)req - offsetof(struct waiter, req));
	wt->calls++;
	wt->ok = ok;
	if (ok)
		memcpy(wt->salted, salted, SCRAM_KEY_LEN);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Run the loop until *flag is non-zero (or seconds pass). */
static void loop_until(struct event_base *base, const int *flag, double seconds)
{
	double end = now_s() + seconds;
	while (!*flag && now_s() < end) {
		struct timeval tv = { 0, 20000 };
		event_base_loopexit(base, &tv);
		event_base_dispatch(base);
	}
}

static const uint8_t salt[16] = { 1, 2, 3, 4 };

START_TEST(test_kdf_async_and_cache)
{
	struct event_base *base = event_base_new();
	struct kdf *k = kdf_new(base);
	ck_assert_ptr_nonnull(k);
	struct waiter a = { .req.done = waiter_done };
	uint8_t out[SCRAM_KEY_LEN], want[SCRAM_KEY_LEN];
	ck_assert(scram_salted_password("pw", salt, sizeof salt, 20000, NULL, want));
	ck_assert_int_eq(kdf_derive(k, &a.req, "pw", salt, sizeof salt, 20000, out), KDF_PENDING);
	ck_assert_int_eq(a.calls, 0);   /* never from kdf_derive itself */
	loop_until(base, &a.calls, 30);
	ck_assert_int_eq(a.calls, 1);
	ck_assert(a.ok);
	ck_assert(memcmp(a.salted, want, SCRAM_KEY_LEN) == 0);
	ck_assert_ptr_null(a.req.job);
	/* Again: from the cache, at once. */
	memset(out, 0, sizeof out);
	ck_assert_int_eq(kdf_derive(k, &a.req, "pw", salt, sizeof salt, 20000, out), KDF_DONE);
	ck_assert(memcmp(out, want, SCRAM_KEY_LEN) == 0);
	/* Another count, salt or password is another derivation. */
	ck_assert_int_eq(kdf_derive(k, &a.req, "pw", salt, sizeof salt, 20001, out), KDF_PENDING);
	kdf_cancel(&a.req);
	ck_assert_int_eq(kdf_derive(k, &a.req, "pw2", salt, sizeof salt, 20000, out), KDF_PENDING);
	kdf_cancel(&a.req);
	/* A reload forgets. */
	kdf_forget(k);
	ck_assert_int_eq(kdf_derive(k, &a.req, "pw", salt, sizeof salt, 20000, out), KDF_PENDING);
	kdf_cancel(&a.req);
	kdf_free(k);
	event_base_free(base);
}
END_TEST

/* Two logins asking the same at once share one job; one that cancels
 * hears nothing, the other gets the result. */
START_TEST(test_kdf_shared_and_cancelled)
{
	struct event_base *base = event_base_new();
	struct kdf *k = kdf_new(base);
	struct waiter a = { .req.done = waiter_done }, b = { .req.done = waiter_done }, c = { .req.done = waiter_done };
	uint8_t out[SCRAM_KEY_LEN];
	ck_assert_int_eq(kdf_derive(k, &a.req, "pw", salt, sizeof salt, 200000, out), KDF_PENDING);
	ck_assert_int_eq(kdf_derive(k, &b.req, "pw", salt, sizeof salt, 200000, out), KDF_PENDING);
	ck_assert_int_eq(kdf_derive(k, &c.req, "pw", salt, sizeof salt, 200000, out), KDF_PENDING);
	ck_assert_ptr_eq(a.req.job, b.req.job);
	ck_assert_ptr_eq(a.req.job, c.req.job);
	kdf_cancel(&b.req);
	kdf_cancel(&b.req);   /* twice: nothing */
	ck_assert_ptr_null(b.req.job);
	loop_until(base, &a.calls, 30);
	loop_until(base, &c.calls, 30);
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(b.calls, 0);
	ck_assert(memcmp(a.salted, c.salted, SCRAM_KEY_LEN) == 0);
	kdf_free(k);
	event_base_free(base);
}
END_TEST

/* A request that asks for no caching (a client's password, maybe a wrong
 * guess): its result is delivered and not kept; joined by one that does
 * ask, it is kept. The cache is still looked in. */
START_TEST(test_kdf_uncached)
{
	struct event_base *base = event_base_new();
	struct kdf *k = kdf_new(base);
	ck_assert_ptr_nonnull(k);
	struct waiter guess = { .req.done = waiter_done, .req.uncached = true };
	struct waiter server = { .req.done = waiter_done };
	uint8_t out[SCRAM_KEY_LEN], want[SCRAM_KEY_LEN];
	ck_assert(scram_salted_password("guess", salt, sizeof salt, 20000, NULL, want));
	ck_assert_int_eq(kdf_derive(k, &guess.req, "guess", salt, sizeof salt, 20000, out), KDF_PENDING);
	loop_until(base, &guess.calls, 30);
	ck_assert_int_eq(guess.calls, 1);
	ck_assert(guess.ok);
	ck_assert(memcmp(guess.salted, want, SCRAM_KEY_LEN) == 0);
	/* not kept: derived again, for either kind of request */
	ck_assert_int_eq(kdf_derive(k, &server.req, "guess", salt, sizeof salt, 20000, out), KDF_PENDING);
	kdf_cancel(&server.req);
	/* shared with a request that keeps it: kept */
	guess.calls = 0;
	ck_assert_int_eq(kdf_derive(k, &guess.req, "pw", salt, sizeof salt, 20000, out), KDF_PENDING);
	ck_assert_int_eq(kdf_derive(k, &server.req, "pw", salt, sizeof salt, 20000, out), KDF_PENDING);
	ck_assert_ptr_eq(guess.req.job, server.req.job);
	loop_until(base, &server.calls, 30);
	ck_assert_int_eq(server.calls, 1);
	ck_assert_int_eq(guess.calls, 1);
	/* and an uncached request finds it there */
	ck_assert(scram_salted_password("pw", salt, sizeof salt, 20000, NULL, want));
	memset(out, 0, sizeof out);
	ck_assert_int_eq(kdf_derive(k, &guess.req, "pw", salt, sizeof salt, 20000, out), KDF_DONE);
	ck_assert(memcmp(out, want, SCRAM_KEY_LEN) == 0);
	kdf_free(k);
	event_base_free(base);
}
END_TEST

/* Every waiter gone: the job still ends (into the cache, if it ran), and
 * no one is called. */
START_TEST(test_kdf_abandoned)
{
	struct event_base *base = event_base_new();
	struct kdf *k = kdf_new(base);
	struct waiter a = { .req.done = waiter_done }, probe = { .req.done = waiter_done };
	uint8_t out[SCRAM_KEY_LEN];
	ck_assert_int_eq(kdf_derive(k, &a.req, "pw", salt, sizeof salt, 100000, out), KDF_PENDING);
	/* Let a thread take it, then leave. */
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	kdf_cancel(&a.req);
	/* Give it time to end, then the loop delivers it to no one. */
	double end = now_s() + 30;
	int got = 0;
	while (!got && now_s() < end) {
		loop_until(base, &a.calls, 0.05);
		/* The cache has it once it ran to the end. */
		if (kdf_derive(k, &probe.req, "pw", salt, sizeof salt, 100000, out) == KDF_DONE)
			got = 1;
		else
			kdf_cancel(&probe.req);
	}
	ck_assert_int_eq(got, 1);
	ck_assert_int_eq(a.calls, 0);
	ck_assert_int_eq(probe.calls, 0);
	kdf_free(k);
	event_base_free(base);
}
END_TEST

/* At exit a running derivation of the largest count stops soon. */
START_TEST(test_kdf_free_stops_running)
{
	struct event_base *base = event_base_new();
	struct kdf *k = kdf_new(base);
	struct waiter a = { .req.done = waiter_done }, b = { .req.done = waiter_done };
	uint8_t out[SCRAM_KEY_LEN];
	ck_assert_int_eq(kdf_derive(k, &a.req, "pw", salt, sizeof salt, SCRAM_MAX_ITERATIONS, out), KDF_PENDING);
	ck_assert_int_eq(kdf_derive(k, &b.req, "other", salt, sizeof salt, SCRAM_MAX_ITERATIONS, out), KDF_PENDING);
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	double t0 = now_s();
	kdf_free(k);   /* the requests are detached, not called */
	ck_assert_msg(now_s() - t0 < 1.0, "kdf_free took %.2f s", now_s() - t0);
	ck_assert_ptr_null(a.req.job);
	ck_assert_ptr_null(b.req.job);
	ck_assert_int_eq(a.calls + b.calls, 0);
	event_base_free(base);
}
END_TEST

/* ---- auth_backend with a kdf: the SCRAM exchange waits for it ---- */

/* Answer one 'R' of code with extra bytes after it. */
static enum auth_backend_result answer(struct auth_backend *ab, const struct auth_backend_secret *sec, uint32_t code,
				       const void *extra, size_t extra_len, struct pktbuf *pb)
{
	uint8_t body[SCRAM_MAX_MESSAGE + 8];
	const char *error;
	proto_put_u32(body, code);
	memcpy(body + 4, extra, extra_len);
	return auth_backend_answer(ab, sec, body, 4 + extra_len, pb, &error);
}

static void on_derived(void *arg)
{
	(*(int *)arg)++;
}

START_TEST(test_auth_backend_waits_for_kdf)
{
	struct event_base *base = event_base_new();
	struct kdf *k = kdf_new(base);
	/* The server holds the verifier of "IX-IX"; pgcat is configured with
	 * "IX-" U+2168, which SASLprep makes the same. */
	static const uint8_t vsalt[16] = { 5, 5 };
	struct scram_secret secret;
	ck_assert(scram_secret_from_password("IX-IX", vsalt, sizeof vsalt, 50000, &secret));
	for (int round = 0; round < 2; round++) {
		struct scram_server srv;
		scram_server_init(&srv, &secret);
		struct auth_backend ab = { 0 };
		int derived = 0;
		auth_backend_init(&ab, k, on_derived, &derived);
		const struct auth_backend_secret sec = { .user = "app", .password = "IX-\xe2\x85\xa8" };
		uint8_t storage[AUTH_BACKEND_MAX_MESSAGE];
		struct pktbuf pb;
		const char *error;
		static const char mechs[] = "SCRAM-SHA-256\0";
		pktbuf_init(&pb, storage, sizeof storage);
		ck_assert_int_eq(answer(&ab, &sec, AUTH_REQ_SASL, mechs, sizeof mechs, &pb),
				 AUTH_BACKEND_CONTINUE);
		size_t off = 5 + sizeof "SCRAM-SHA-256";
		uint32_t first_len = proto_get_u32(pb.data + off);
		static const uint8_t nonce[SCRAM_NONCE_RAW_LEN] = { 3 };
		char out[SCRAM_MAX_MESSAGE + 1];
		size_t olen;
		ck_assert(scram_server_handle_first(&srv, (const char *)pb.data + off + 4, first_len, nonce, out,
						    sizeof out, &olen));
		pktbuf_init(&pb, storage, sizeof storage);
		enum auth_backend_result r = answer(&ab, &sec, AUTH_REQ_SASL_CONT, out, olen, &pb);
		if (round == 0) {
			/* First time: derived off the loop. */
			ck_assert_int_eq(r, AUTH_BACKEND_PENDING);
			ck_assert(auth_backend_pending(&ab));
			ck_assert_uint_eq(pb.len, 0);
			/* No other 'R' is taken meanwhile. */
			ck_assert_int_eq(answer(&ab, &sec, AUTH_REQ_OK, "", 0, &pb), AUTH_BACKEND_FAILED);
			loop_until(base, &derived, 30);
			ck_assert_int_eq(derived, 1);
			pktbuf_init(&pb, storage, sizeof storage);
			r = auth_backend_resume(&ab, &pb, &error);
		}
		/* Second time: cached, at once. */
		ck_assert_int_eq(r, AUTH_BACKEND_CONTINUE);
		ck_assert(!auth_backend_pending(&ab));
		ck_assert_int_eq(pb.data[0], 'p');
		ck_assert_int_eq(scram_server_handle_final(&srv, (const char *)pb.data + 5, pb.len - 5, out, sizeof out,
							   &olen),
				 SCRAM_OK);
		pktbuf_init(&pb, storage, sizeof storage);
		ck_assert_int_eq(answer(&ab, &sec, AUTH_REQ_SASL_FIN, out, olen, &pb),
				 AUTH_BACKEND_CONTINUE);
		auth_backend_clear(&ab);
		ck_assert_ptr_eq(ab.kdf, k);   /* the owner's settings stay */
	}
	kdf_free(k);
	event_base_free(base);
}
END_TEST

/* A login cleared while its key is derived is never told. */
START_TEST(test_auth_backend_cleared_while_pending)
{
	struct event_base *base = event_base_new();
	struct kdf *k = kdf_new(base);
	struct auth_backend ab = { 0 };
	int derived = 0;
	auth_backend_init(&ab, k, on_derived, &derived);
	const struct auth_backend_secret sec = { .user = "app", .password = "secret" };
	uint8_t storage[AUTH_BACKEND_MAX_MESSAGE];
	struct pktbuf pb;
	static const char mechs[] = "SCRAM-SHA-256\0";
	pktbuf_init(&pb, storage, sizeof storage);
	ck_assert_int_eq(answer(&ab, &sec, AUTH_REQ_SASL, mechs, sizeof mechs, &pb),
			 AUTH_BACKEND_CONTINUE);
	/* Our nonce, then the server's part. */
	size_t off = 5 + sizeof "SCRAM-SHA-256" + 4 + strlen("n,,n=,r=");
	char first[200];
	snprintf(first, sizeof first, "r=%.24sSERVER,s=c2FsdHNhbHQ=,i=100000", (const char *)pb.data + off);
	pktbuf_init(&pb, storage, sizeof storage);
	ck_assert_int_eq(answer(&ab, &sec, AUTH_REQ_SASL_CONT, first, strlen(first), &pb),
			 AUTH_BACKEND_PENDING);
	auth_backend_clear(&ab);
	ck_assert(!auth_backend_pending(&ab));
	/* Well past the derivation's end: still nothing. */
	int never = 0;
	loop_until(base, &never, 2.0);
	ck_assert_int_eq(derived, 0);
	kdf_free(k);
	event_base_free(base);
}
END_TEST

Suite *kdf_suite(void)
{
	Suite *s = suite_create("kdf");
	TCase *tc = tcase_create("threads");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_kdf_async_and_cache);
	tcase_add_test(tc, test_kdf_shared_and_cancelled);
	tcase_add_test(tc, test_kdf_uncached);
	tcase_add_test(tc, test_kdf_abandoned);
	tcase_add_test(tc, test_kdf_free_stops_running);
	tcase_add_test(tc, test_auth_backend_waits_for_kdf);
	tcase_add_test(tc, test_auth_backend_cleared_while_pending);
	suite_add_tcase(s, tc);
	return s;
}
