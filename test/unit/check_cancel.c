/* SPDX-License-Identifier: MIT */
/* Cancel keys with peer ids (SPEC §3.4): the 3.0 layout (peer id in bytes
 * 1-2 of pid + key, hops left in the low 2 bits of byte 7), the 3.2 one
 * (hop counter in byte 1, peer id in bytes 2-3), forwarding with the hop
 * counter moved, the hop limit, and keys without peer id as before. */
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "check_suites.h"
#include "proto.h"
#include "randpool.h"
#include "shm.h"

struct fixture {
	struct randpool rp;
	struct cancel_table t;
};

static void fixture_init(struct fixture *f, uint32_t n_slots, int worker, struct shm *shm, int peer_id)
{
	randpool_init(&f->rp);
	ck_assert(cancel_table_init(&f->t, n_slots, worker, shm, &f->rp));
	cancel_table_set_peer_id(&f->t, peer_id);
}

static void fixture_free(struct fixture *f)
{
	cancel_table_free(&f->t);
	randpool_wipe(&f->rp);
}

/* The 8 bytes pid + key of a 3.0 client's BackendKeyData. */
static void backend_key(uint32_t pid, const uint8_t *key, uint8_t out[8])
{
	proto_put_u32(out, pid);
	memcpy(out + 4, key, 4);
}

START_TEST(plain_keys_without_peer_id)
{
	struct fixture f;
	fixture_init(&f, 8, 0, NULL, 0);
	int a_obj, b_obj;
	uint32_t pid, sec, pid_l, sec_l;
	uint8_t key[CANCEL_KEY_LONG_LEN], key_l[CANCEL_KEY_LONG_LEN];
	size_t len, len_l;
	ck_assert(cancel_key_assign(&f.t, &a_obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));
	ck_assert(cancel_key_assign(&f.t, &b_obj, CANCEL_KEY_LONG, &pid_l, &sec_l, key_l, &len_l));
	/* as before peers existed: worker and slot in the pid, the key all secret */
	ck_assert_uint_eq(pid, (1u << SHM_CANCEL_WORKER_SHIFT) | 1u);
	ck_assert_uint_eq(pid_l, (1u << SHM_CANCEL_WORKER_SHIFT) | 2u);
	ck_assert_uint_eq(len, 4);
	ck_assert_uint_eq(proto_get_u32(key), sec);
	ck_assert_uint_eq(key_l[1], 0);
	ck_assert_uint_eq(key_l[2] | key_l[3], 0);
	struct cancel_forward fwd;
	ck_assert_ptr_eq(cancel_handle_request(&f.t, pid, key, 4, &fwd), &a_obj);
	ck_assert_int_eq(fwd.peer_id, 0);
	ck_assert_ptr_eq(cancel_handle_request(&f.t, pid_l, key_l, 32, &fwd), &b_obj);
	ck_assert_int_eq(fwd.peer_id, 0);
	fixture_free(&f);
}
END_TEST

START_TEST(short_key_carries_peer_id_and_hops)
{
	struct fixture f;
	fixture_init(&f, 8, 0, NULL, 0x0203);
	int a_obj;
	uint32_t pid, sec;
	uint8_t key[CANCEL_KEY_LONG_LEN];
	size_t len;
	for (int i = 0; i < 5; i++) {   /* slot 5: byte 3 says it */
		int dummy;
		uint32_t p, s;
		ck_assert(cancel_key_assign(&f.t, &dummy, CANCEL_KEY_SHORT, &p, &s, key, &len));
	}
	ck_assert(cancel_key_assign(&f.t, &a_obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));
	uint8_t bk[8];
	backend_key(pid, key, bk);
	ck_assert_uint_eq(bk[0], CANCEL_PEER_PID_BASE);   /* slot 5: no high bits */
	ck_assert_uint_eq(bk[0] & 0x80, 0);                /* a positive pid */
	ck_assert_uint_eq(bk[1], 0x03);                    /* peer id, low byte first */
	ck_assert_uint_eq(bk[2], 0x02);
	ck_assert_uint_eq(bk[3], 5);
	ck_assert_uint_eq(bk[7] & CANCEL_PEER_HOPS_MASK, CANCEL_MAX_HOPS);
	ck_assert_uint_eq(proto_get_u32(key), sec);
	/* found whatever hops it has left */
	for (uint8_t left = 0; left <= 3; left++) {
		uint8_t k[4];
		memcpy(k, key, 4);
		k[3] = (uint8_t)((k[3] & ~CANCEL_PEER_HOPS_MASK) | left);
		ck_assert_ptr_eq(cancel_key_lookup(&f.t, pid, k, 4), &a_obj);
	}
	/* but not with another peer id, nor any secret bit changed */
	ck_assert_ptr_null(cancel_key_lookup(&f.t, pid ^ 0x00010000u, key, 4));
	for (int bit = 2; bit < 32; bit++) {
		uint8_t k[4];
		proto_put_u32(k, sec ^ (1u << bit));
		ck_assert_ptr_null(cancel_key_lookup(&f.t, pid, k, 4));
	}
	cancel_key_release(&f.t, pid);
	ck_assert_ptr_null(cancel_key_lookup(&f.t, pid, key, 4));
	fixture_free(&f);
}
END_TEST

START_TEST(long_key_carries_peer_id)
{
	struct fixture f;
	fixture_init(&f, 4, 0, NULL, 700);
	int a_obj;
	uint32_t pid, sec;
	uint8_t key[CANCEL_KEY_LONG_LEN];
	size_t len;
	ck_assert(cancel_key_assign(&f.t, &a_obj, CANCEL_KEY_LONG, &pid, &sec, key, &len));
	ck_assert_uint_eq(len, 32);
	ck_assert_uint_eq(key[0], CANCEL_KEY_LAYOUT_V1);
	ck_assert_uint_eq(key[1], 0);
	ck_assert_uint_eq(((unsigned)key[2] << 8) | key[3], 700);
	/* a 3.2 key keeps the plain pid: its peer id is in the key */
	ck_assert_uint_eq(pid, (1u << SHM_CANCEL_WORKER_SHIFT) | 1u);
	ck_assert_uint_eq(proto_get_u32(key + 4), pid);
	uint8_t k[CANCEL_KEY_LONG_LEN];
	memcpy(k, key, sizeof k);
	k[1] = 2;   /* hops taken do not matter */
	ck_assert_ptr_eq(cancel_key_lookup(&f.t, pid, k, 32), &a_obj);
	k[3] ^= 1;  /* another peer id does */
	ck_assert_ptr_null(cancel_key_lookup(&f.t, pid, k, 32));
	fixture_free(&f);
}
END_TEST

/* Instance 2 issued the key; a request for it reaches instance 1, which
 * sends it on with one hop less, until none is left. */
START_TEST(forward_short_key_until_hops_run_out)
{
	struct fixture one, two;
	fixture_init(&one, 8, 0, NULL, 1);
	fixture_init(&two, 8, 0, NULL, 2);
	int a_obj;
	uint32_t pid, sec;
	uint8_t key[CANCEL_KEY_LONG_LEN];
	size_t len;
	ck_assert(cancel_key_assign(&two.t, &a_obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));
	struct cancel_forward fwd;
	uint8_t cur[4];
	memcpy(cur, key, 4);
	for (unsigned hop = 1; hop <= CANCEL_MAX_HOPS; hop++) {
		ck_assert_ptr_null(cancel_handle_request(&one.t, pid, cur, 4, &fwd));
		ck_assert_int_eq(fwd.peer_id, 2);
		ck_assert(!fwd.exhausted);
		ck_assert_uint_eq(fwd.pid, pid);
		ck_assert_uint_eq(fwd.key_len, 4);
		ck_assert_uint_eq(fwd.key[3] & CANCEL_PEER_HOPS_MASK, CANCEL_MAX_HOPS - hop);
		ck_assert_uint_eq(proto_get_u32(fwd.key) | CANCEL_PEER_HOPS_MASK, sec);
		/* the issuer takes it at any hop */
		struct cancel_forward none;
		ck_assert_ptr_eq(cancel_handle_request(&two.t, fwd.pid, fwd.key, 4, &none), &a_obj);
		ck_assert_int_eq(none.peer_id, 0);
		memcpy(cur, fwd.key, 4);
	}
	ck_assert_ptr_null(cancel_handle_request(&one.t, pid, cur, 4, &fwd));
	ck_assert_int_eq(fwd.peer_id, 2);
	ck_assert(fwd.exhausted);
	fixture_free(&one);
	fixture_free(&two);
}
END_TEST

START_TEST(forward_long_key_until_hops_run_out)
{
	struct fixture one, two;
	fixture_init(&one, 8, 0, NULL, 1);
	fixture_init(&two, 8, 0, NULL, 16383);
	int a_obj, other;
	uint32_t pid, sec, p1, s1;
	uint8_t key[CANCEL_KEY_LONG_LEN], k1[CANCEL_KEY_LONG_LEN];
	size_t len;
	/* instance 1 has a client in the same slot: not the one cancelled */
	ck_assert(cancel_key_assign(&one.t, &other, CANCEL_KEY_LONG, &p1, &s1, k1, &len));
	ck_assert(cancel_key_assign(&two.t, &a_obj, CANCEL_KEY_LONG, &pid, &sec, key, &len));
	ck_assert_uint_eq(p1, pid);
	struct cancel_forward fwd;
	uint8_t cur[CANCEL_KEY_LONG_LEN];
	memcpy(cur, key, sizeof cur);
	for (unsigned hop = 1; hop <= CANCEL_MAX_HOPS; hop++) {
		ck_assert_ptr_null(cancel_handle_request(&one.t, pid, cur, 32, &fwd));
		ck_assert_int_eq(fwd.peer_id, 16383);
		ck_assert(!fwd.exhausted);
		ck_assert_uint_eq(fwd.key_len, 32);
		ck_assert_uint_eq(fwd.key[1], hop);
		ck_assert_mem_eq(fwd.key + 2, key + 2, 30);
		memcpy(cur, fwd.key, sizeof cur);
	}
	ck_assert_ptr_null(cancel_handle_request(&one.t, pid, cur, 32, &fwd));
	ck_assert(fwd.exhausted);
	struct cancel_forward none;
	ck_assert_ptr_eq(cancel_handle_request(&two.t, pid, cur, 32, &none), &a_obj);
	fixture_free(&one);
	fixture_free(&two);
}
END_TEST

/* Nothing to forward: the key names this instance (and is unknown), no
 * peer id, or this instance has no peer_id (peering off). */
START_TEST(nothing_to_forward)
{
	struct fixture one, two, off;
	fixture_init(&one, 8, 0, NULL, 1);
	fixture_init(&two, 8, 0, NULL, 2);
	fixture_init(&off, 8, 0, NULL, 0);
	int a_obj;
	uint32_t pid, sec;
	uint8_t key[CANCEL_KEY_LONG_LEN];
	size_t len;
	ck_assert(cancel_key_assign(&one.t, &a_obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));
	struct cancel_forward fwd;
	uint8_t wrong[4];
	proto_put_u32(wrong, sec ^ 0x100u);
	ck_assert_ptr_null(cancel_handle_request(&one.t, pid, wrong, 4, &fwd));
	ck_assert_int_eq(fwd.peer_id, 0);
	ck_assert_ptr_null(cancel_handle_request(&off.t, pid, key, 4, &fwd));
	ck_assert_int_eq(fwd.peer_id, 0);
	/* a plain key says no peer: unknown here, ignored */
	ck_assert_ptr_null(cancel_handle_request(&two.t, (1u << SHM_CANCEL_WORKER_SHIFT) | 7u, key, 4, &fwd));
	ck_assert_int_eq(fwd.peer_id, 0);
	/* lengths pgcat never issues */
	uint8_t k16[16] = { 0 };
	ck_assert_ptr_null(cancel_handle_request(&two.t, pid, k16, 16, &fwd));
	ck_assert_int_eq(fwd.peer_id, 0);
	fixture_free(&one);
	fixture_free(&two);
	fixture_free(&off);
}
END_TEST

/* peer_id changed by a reload: keys issued before still cancel and are
 * released; new ones follow the new setting. */
START_TEST(peer_id_changed_by_reload)
{
	struct fixture f;
	fixture_init(&f, 8, 0, NULL, 5);
	int a_obj, b_obj;
	uint32_t pid, sec, pid_b, sec_b;
	uint8_t key[CANCEL_KEY_LONG_LEN], key_b[CANCEL_KEY_LONG_LEN];
	size_t len;
	ck_assert(cancel_key_assign(&f.t, &a_obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));
	cancel_table_set_peer_id(&f.t, 0);
	ck_assert(cancel_key_assign(&f.t, &b_obj, CANCEL_KEY_SHORT, &pid_b, &sec_b, key_b, &len));
	ck_assert_uint_eq(pid_b, (1u << SHM_CANCEL_WORKER_SHIFT) | 2u);
	struct cancel_forward fwd;
	ck_assert_ptr_eq(cancel_handle_request(&f.t, pid, key, 4, &fwd), &a_obj);
	cancel_table_set_peer_id(&f.t, 9);
	ck_assert_ptr_eq(cancel_handle_request(&f.t, pid, key, 4, &fwd), &a_obj);
	ck_assert_ptr_eq(cancel_handle_request(&f.t, pid_b, key_b, 4, &fwd), &b_obj);
	cancel_key_release(&f.t, pid);
	ck_assert_ptr_null(cancel_key_lookup(&f.t, pid, key, 4));
	ck_assert_ptr_eq(cancel_key_lookup(&f.t, pid_b, key_b, 4), &b_obj);
	fixture_free(&f);
}
END_TEST

/* The peer layout has room for CANCEL_PEER_SLOTS slots per worker; a 3.0
 * client beyond gets a plain key, which still works here. */
START_TEST(slots_beyond_the_peer_layout)
{
	struct fixture f;
	uint32_t n = CANCEL_PEER_SLOTS + 2;
	fixture_init(&f, n, 0, NULL, 3);
	static int objs[CANCEL_PEER_SLOTS + 2];
	uint32_t pid = 0, sec;
	uint8_t key[CANCEL_KEY_LONG_LEN];
	size_t len;
	for (uint32_t i = 0; i < n; i++) {
		ck_assert(cancel_key_assign(&f.t, &objs[i], CANCEL_KEY_SHORT, &pid, &sec, key, &len));
		if (i == CANCEL_PEER_SLOTS - 1) {
			ck_assert_uint_eq(pid >> 24, 0x7f);
			ck_assert_uint_eq(pid & 0xff, 0xff);
			ck_assert_ptr_eq(cancel_key_lookup(&f.t, pid, key, 4), &objs[i]);
		}
	}
	ck_assert_uint_eq(pid, (1u << SHM_CANCEL_WORKER_SHIFT) | n);
	ck_assert_ptr_eq(cancel_key_lookup(&f.t, pid, key, 4), &objs[n - 1]);
	fixture_free(&f);
}
END_TEST

/* Four workers: a 3.0 peer key names its worker in the top bits of the
 * secret; another worker's table hands the request to it (shared segment). */
START_TEST(peer_key_of_another_worker)
{
	struct shm shm;
	ck_assert(shm_create(&shm, 4, 100));
	struct fixture w2, w0;
	fixture_init(&w2, 8, 2, &shm, 4);
	fixture_init(&w0, 8, 0, &shm, 4);
	int a_obj;
	uint32_t pid, sec;
	uint8_t key[CANCEL_KEY_LONG_LEN];
	size_t len;
	ck_assert(cancel_key_assign(&w2.t, &a_obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));
	ck_assert_uint_eq(sec >> 30, 2);
	cancel_key_link(&w2.t, pid, sec);
	uint8_t k[4];
	memcpy(k, key, 4);
	k[3] &= (uint8_t)~CANCEL_PEER_HOPS_MASK;   /* after its last hop */
	struct cancel_forward fwd;
	ck_assert_ptr_null(cancel_handle_request(&w0.t, pid, k, 4, &fwd));
	ck_assert_int_eq(fwd.peer_id, 0);
	ck_assert(cancel_take_flag(&w2.t, pid, sec));
	ck_assert(!cancel_take_flag(&w2.t, pid, sec));
	/* The owner's next request: a cancel asked for the last one is gone. */
	ck_assert_ptr_null(cancel_handle_request(&w0.t, pid, k, 4, &fwd));
	cancel_key_link(&w2.t, pid, sec);
	ck_assert(!cancel_take_flag(&w2.t, pid, sec));
	ck_assert_ptr_null(cancel_handle_request(&w0.t, pid, k, 4, &fwd));
	ck_assert(cancel_take_flag(&w2.t, pid, sec));
	cancel_key_release(&w2.t, pid);
	fixture_free(&w2);
	fixture_free(&w0);
	shm_destroy(&shm);
}
END_TEST

/* -R: a key exported by one process and adopted by the next's table of
 * the same worker keeps working there, in the same slot, and that slot
 * leaves the free list (the next key issued is another one). */
START_TEST(key_moves_to_a_new_table)
{
	struct fixture old, fresh;
	fixture_init(&old, 8, 1, NULL, 0);
	fixture_init(&fresh, 8, 1, NULL, 0);
	int a_obj, b_obj, c_obj, d_obj;
	uint32_t pid_a, sec_a, pid_b, sec_b;
	uint8_t key_a[CANCEL_KEY_LONG_LEN], key_b[CANCEL_KEY_LONG_LEN];
	size_t len_a, len_b;
	ck_assert(cancel_key_assign(&old.t, &a_obj, CANCEL_KEY_SHORT, &pid_a, &sec_a, key_a, &len_a));
	ck_assert(cancel_key_assign(&old.t, &b_obj, CANCEL_KEY_LONG, &pid_b, &sec_b, key_b, &len_b));
	struct cancel_key_state ka, kb;
	ck_assert(cancel_key_export(&old.t, pid_b, &kb));
	ck_assert(cancel_key_export(&old.t, pid_a, &ka));
	struct cancel_key_state none;
	ck_assert(!cancel_key_export(&old.t, pid_a + 5, &none));   /* a free slot: no key */
	/* adopted out of order: the second key's slot first */
	ck_assert(cancel_key_adopt(&fresh.t, &d_obj, &kb));
	ck_assert(cancel_key_adopt(&fresh.t, &c_obj, &ka));
	struct cancel_forward fwd;
	ck_assert_ptr_eq(cancel_handle_request(&fresh.t, pid_a, key_a, len_a, &fwd), &c_obj);
	ck_assert_ptr_eq(cancel_handle_request(&fresh.t, pid_b, key_b, len_b, &fwd), &d_obj);
	/* a wrong secret still cancels nothing */
	key_a[0] ^= 1;
	ck_assert_ptr_null(cancel_handle_request(&fresh.t, pid_a, key_a, len_a, &fwd));
	/* taken slots are not given again, nor adopted twice */
	ck_assert(!cancel_key_adopt(&fresh.t, &c_obj, &ka));
	for (int i = 0; i < 6; i++) {
		uint32_t pid, sec;
		uint8_t key[CANCEL_KEY_LONG_LEN];
		size_t len;
		int obj;
		ck_assert(cancel_key_assign(&fresh.t, &obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));
		ck_assert_uint_ne(pid, pid_a);
		ck_assert_uint_ne(pid, pid_b);
	}
	uint32_t pid, sec;
	uint8_t key[CANCEL_KEY_LONG_LEN];
	size_t len;
	int obj;
	ck_assert(!cancel_key_assign(&fresh.t, &obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));   /* all 8 in use */
	/* another worker's key is not adopted */
	struct fixture other;
	fixture_init(&other, 8, 2, NULL, 0);
	ck_assert(!cancel_key_adopt(&other.t, &obj, &ka));
	/* an unknown key of this instance's layout names its worker (-R sends it on) */
	ck_assert_ptr_null(cancel_handle_request(&other.t, pid_a, key_b, 4, &fwd));
	ck_assert_int_eq(fwd.unknown_worker, 1);
	fixture_free(&other);
	fixture_free(&old);
	fixture_free(&fresh);
}
END_TEST

/* -R: the slots the old worker's clients hold are kept from new logins
 * until their keys come; at the end, what did not come is free again. */
START_TEST(reserved_slots_wait_for_their_keys)
{
	struct fixture old, fresh;
	fixture_init(&old, 4, 0, NULL, 0);
	fixture_init(&fresh, 4, 0, NULL, 0);
	int a_obj, b_obj, obj;
	uint32_t pid_a, sec_a, pid_b, sec_b, pid, sec;
	uint8_t key_a[CANCEL_KEY_LONG_LEN], key_b[CANCEL_KEY_LONG_LEN], key[CANCEL_KEY_LONG_LEN];
	size_t len_a, len_b, len;
	ck_assert(cancel_key_assign(&old.t, &a_obj, CANCEL_KEY_SHORT, &pid_a, &sec_a, key_a, &len_a));
	ck_assert(cancel_key_assign(&old.t, &b_obj, CANCEL_KEY_SHORT, &pid_b, &sec_b, key_b, &len_b));
	uint32_t used[8];
	size_t next;
	ck_assert_uint_eq(cancel_table_used(&old.t, used, 8, 0, &next), 2);
	cancel_table_reserve(&fresh.t, used, 2);
	/* two logins meanwhile get the two other slots, a third none */
	for (int i = 0; i < 2; i++) {
		ck_assert(cancel_key_assign(&fresh.t, &obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));
		ck_assert(pid != pid_a && pid != pid_b);
	}
	ck_assert(!cancel_key_assign(&fresh.t, &obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));
	/* a reserved slot matches nothing before its key comes */
	struct cancel_forward fwd;
	ck_assert_ptr_null(cancel_handle_request(&fresh.t, pid_a, key_a, len_a, &fwd));
	struct cancel_key_state ka;
	ck_assert(cancel_key_export(&old.t, pid_a, &ka));
	ck_assert(cancel_key_adopt(&fresh.t, &a_obj, &ka));
	ck_assert_ptr_eq(cancel_handle_request(&fresh.t, pid_a, key_a, len_a, &fwd), &a_obj);
	/* b never came: free again at the end */
	cancel_table_unreserve(&fresh.t);
	ck_assert(cancel_key_assign(&fresh.t, &obj, CANCEL_KEY_SHORT, &pid, &sec, key, &len));
	ck_assert_uint_eq(pid, pid_b);
	fixture_free(&old);
	fixture_free(&fresh);
}
END_TEST

Suite *cancel_suite(void)
{
	Suite *s = suite_create("cancel");
	TCase *tc = tcase_create("peers");
	tcase_add_test(tc, plain_keys_without_peer_id);
	tcase_add_test(tc, short_key_carries_peer_id_and_hops);
	tcase_add_test(tc, long_key_carries_peer_id);
	tcase_add_test(tc, forward_short_key_until_hops_run_out);
	tcase_add_test(tc, forward_long_key_until_hops_run_out);
	tcase_add_test(tc, nothing_to_forward);
	tcase_add_test(tc, peer_id_changed_by_reload);
	tcase_add_test(tc, slots_beyond_the_peer_layout);
	tcase_add_test(tc, peer_key_of_another_worker);
	tcase_add_test(tc, key_moves_to_a_new_table);
	tcase_add_test(tc, reserved_slots_wait_for_their_keys);
	suite_add_tcase(s, tc);
	return s;
}
