/* SPDX-License-Identifier: MIT */
/* buf.h: a connection's input block — reads land after the unread bytes,
 * consuming moves the start, room is made by moving the unread bytes to
 * the head or into a larger block, and nothing unread is ever lost or
 * reordered on the way. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "buf.h"

/* Appends n bytes counting up from *next, as a socket's stream would bring them. */
static void put_stream(struct buf *b, size_t n, unsigned *next)
{
	uint8_t chunk[1000];
	while (n > 0) {
		size_t k = n < sizeof chunk ? n : sizeof chunk;
		for (size_t i = 0; i < k; i++)
			chunk[i] = (uint8_t)(*next)++;
		ck_assert_int_eq(buf_add(b, chunk, k), 0);
		n -= k;
	}
}

/* The unread bytes are the stream from *expect on; they are consumed. */
static void take_stream(struct buf *b, size_t n, unsigned *expect)
{
	ck_assert_uint_ge(buf_len(b), n);
	const uint8_t *p = buf_head(b);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(p[i], (uint8_t)(*expect)++);
	buf_drain(b, n);
}

START_TEST(test_drain_to_empty_rewinds)
{
	struct buf *b = buf_new(BUF_IN_FIRST);
	ck_assert_ptr_nonnull(b);
	unsigned next = 0, expect = 0;
	put_stream(b, 100, &next);
	take_stream(b, 40, &expect);
	ck_assert_uint_eq(b->off, 40);
	take_stream(b, 60, &expect);
	/* Empty: the next read starts at the block's head again. */
	ck_assert_uint_eq(b->off, 0);
	ck_assert_uint_eq(buf_len(b), 0);
	ck_assert_ptr_eq(b->data, b->inline_block);
	buf_free(b);
}
END_TEST

START_TEST(test_reserve_moves_unread_to_head_before_growing)
{
	struct buf *b = buf_new(BUF_IN_FIRST);
	unsigned next = 0, expect = 0;
	uint32_t cap = b->cap;
	put_stream(b, cap - 10, &next);
	take_stream(b, cap - 30, &expect);   /* 20 unread near the end */
	ck_assert(buf_reserve(b, 1000));
	ck_assert_ptr_eq(b->data, b->inline_block);   /* no larger block needed */
	ck_assert_uint_eq(b->off, 0);
	ck_assert_uint_eq(b->cap, cap);
	put_stream(b, 1000, &next);
	take_stream(b, 1020, &expect);
	buf_free(b);
}
END_TEST

START_TEST(test_a_large_message_grows_the_block_and_keeps_the_order)
{
	struct buf *b = buf_new(BUF_IN_FIRST);
	unsigned next = 0, expect = 0;
	put_stream(b, 3000, &next);
	take_stream(b, 1000, &expect);
	put_stream(b, 200000, &next);   /* far over the first block */
	ck_assert_ptr_ne(b->data, b->inline_block);
	ck_assert_uint_ge(b->cap, 202000);
	take_stream(b, 202000, &expect);
	buf_free(b);
}
END_TEST

START_TEST(test_an_emptied_large_block_goes_back_to_the_first)
{
	struct buf *b = buf_new(BUF_SMALL);
	unsigned next = 0, expect = 0;
	put_stream(b, 3 * BUF_STREAM, &next);
	ck_assert_uint_gt(b->cap, BUF_STREAM);
	buf_settle(b);   /* not empty: kept */
	ck_assert_uint_gt(b->cap, BUF_STREAM);
	take_stream(b, 3 * BUF_STREAM, &expect);
	buf_settle(b);
	ck_assert_ptr_eq(b->data, b->inline_block);
	ck_assert_uint_eq(b->cap, BUF_SMALL);
	put_stream(b, 100, &next);
	take_stream(b, 100, &expect);
	buf_free(b);
}
END_TEST

START_TEST(test_tail_and_commit_are_a_read)
{
	struct buf *b = buf_new(BUF_IN_FIRST);
	unsigned next = 0, expect = 0;
	put_stream(b, 5, &next);
	size_t room;
	uint8_t *at = buf_tail(b, &room);
	ck_assert_uint_eq(room, b->cap - 5);
	for (int i = 0; i < 7; i++)
		at[i] = (uint8_t)next++;
	buf_commit(b, 7);
	take_stream(b, 12, &expect);
	buf_free(b);
}
END_TEST

START_TEST(test_prepend_before_unread_in_place_and_by_moving)
{
	struct buf *b = buf_new(BUF_IN_FIRST);
	uint8_t msg[6] = { 'Q', 0, 0, 0, 5, 0 };
	/* Room before the unread bytes (some consumed): put back in place. */
	ck_assert_int_eq(buf_add(b, "abcdefghij", 10), 0);
	buf_drain(b, 8);
	ck_assert(buf_prepend(b, msg, sizeof msg));
	ck_assert_uint_eq(buf_len(b), 8);
	ck_assert_mem_eq(buf_head(b), "Q\0\0\0\5\0ij", 8);
	/* None before them: they move up. */
	buf_drain(b, buf_len(b));
	ck_assert_int_eq(buf_add(b, "xyz", 3), 0);
	ck_assert(buf_prepend(b, msg, sizeof msg));
	ck_assert_mem_eq(buf_head(b), "Q\0\0\0\5\0xyz", 9);
	/* Into a full block: it grows. */
	buf_drain(b, buf_len(b));
	unsigned next = 0, expect = 0;
	put_stream(b, b->cap, &next);
	uint8_t first[3] = { 0xfd, 0xfe, 0xff };
	ck_assert(buf_prepend(b, first, 3));
	expect = 0xfd;
	take_stream(b, 3, &expect);
	expect = 0;
	take_stream(b, next, &expect);
	buf_free(b);
}
END_TEST

START_TEST(test_writers)
{
	struct buf *b = buf_new(BUF_IN_FIRST);
	/* printf: into the room, and longer than the room (made, then written). */
	ck_assert_int_eq(buf_add_printf(b, "%s=%d", "a", 42), 4);
	size_t room;
	buf_tail(b, &room);
	char *big = malloc(room + 100);
	memset(big, 'x', room + 99);
	big[room + 99] = '\0';
	ck_assert_int_eq(buf_add_printf(b, "[%s]", big), (int)room + 101);
	ck_assert_uint_eq(buf_len(b), 4 + room + 101);
	ck_assert_mem_eq(buf_head(b), "a=42[x", 6);
	ck_assert_int_eq(buf_head(b)[buf_len(b) - 1], ']');
	free(big);
	/* From another buf: all moved, the source emptied. */
	buf_drain(b, buf_len(b));
	ck_assert_int_eq(buf_add(b, "abcdef", 6), 0);
	struct buf *o = buf_new(BUF_IN_FIRST);
	ck_assert_int_eq(buf_add(o, "ghi", 3), 0);
	ck_assert_int_eq(buf_add_buf(b, o), 0);
	ck_assert_uint_eq(buf_len(o), 0);
	ck_assert_uint_eq(buf_len(b), 9);
	ck_assert_mem_eq(buf_head(b), "abcdefghi", 9);
	buf_free(o);
	buf_free(b);
}
END_TEST

START_TEST(test_copy_take_truncate_and_move)
{
	struct buf *b = buf_new(BUF_IN_FIRST);
	ck_assert_int_eq(buf_add(b, "0123456789", 10), 0);
	uint8_t d[16];
	ck_assert(buf_copy_at(b, 3, d, 4));
	ck_assert_mem_eq(d, "3456", 4);
	ck_assert(!buf_copy_at(b, 8, d, 3));   /* past the end */
	ck_assert(!buf_copy_at(b, 11, d, 0));
	ck_assert_uint_eq(buf_copyout(b, d, 16), 10);   /* as many as there are */
	ck_assert(!buf_take_whole(b, 11, d));
	ck_assert_uint_eq(buf_len(b), 10);
	ck_assert(buf_take_whole(b, 2, d));
	ck_assert_mem_eq(d, "01", 2);
	ck_assert_ptr_null(buf_pullup(b, 9));
	ck_assert_ptr_nonnull(buf_pullup(b, 8));
	struct buf *out = buf_new(BUF_IN_FIRST);
	ck_assert_int_eq(buf_move_to(b, out, 3), 0);
	ck_assert_uint_eq(buf_len(out), 3);
	ck_assert_mem_eq(buf_head(out), "234", 3);
	ck_assert_uint_eq(buf_take(b, d, 2), 2);
	ck_assert_mem_eq(d, "56", 2);
	buf_truncate(b, 1);
	ck_assert_uint_eq(buf_len(b), 1);
	ck_assert_mem_eq(buf_head(b), "7", 1);
	buf_free(out);
	buf_free(b);
}
END_TEST

/* A long random mix of reads, consumption, room-making and put-backs
 * against a plain copy of what must be unread. */
START_TEST(test_random_against_a_model)
{
	struct buf *b = buf_new(BUF_IN_FIRST);
	uint8_t *model = malloc(1 << 20);
	size_t mlen = 0;
	unsigned seed = 12345, next = 0;
	for (int step = 0; step < 20000; step++) {
		seed = seed * 1103515245u + 12345u;
		unsigned r = (seed >> 8) % 100, k = (seed >> 16) % 5000;
		if (r < 45 && mlen + k < (1u << 20) - 64) {
			uint8_t tmp[5000];
			for (unsigned i = 0; i < k; i++)
				tmp[i] = (uint8_t)(next++ * 7);
			ck_assert_int_eq(buf_add(b, tmp, k), 0);
			memcpy(model + mlen, tmp, k);
			mlen += k;
		} else if (r < 90) {
			size_t n = k < mlen ? k : mlen;
			ck_assert_mem_eq(buf_head(b), model, n);
			buf_drain(b, n);
			memmove(model, model + n, mlen - n);
			mlen -= n;
		} else if (r < 95) {
			ck_assert(buf_reserve(b, k));
			size_t room;
			buf_tail(b, &room);
			ck_assert_uint_ge(room, k);
		} else if (mlen + 6 < (1u << 20)) {
			uint8_t m[6] = { (uint8_t)k, 1, 2, 3, 4, 5 };
			ck_assert(buf_prepend(b, m, 6));
			memmove(model + 6, model, mlen);
			memcpy(model, m, 6);
			mlen += 6;
		}
		ck_assert_uint_eq(buf_len(b), mlen);
		ck_assert_uint_le((size_t)b->off + b->len, b->cap);
	}
	ck_assert_mem_eq(buf_head(b), model, mlen);
	free(model);
	buf_free(b);
}
END_TEST

Suite *buf_suite(void)
{
	Suite *s = suite_create("buf");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_drain_to_empty_rewinds);
	tcase_add_test(tc, test_reserve_moves_unread_to_head_before_growing);
	tcase_add_test(tc, test_a_large_message_grows_the_block_and_keeps_the_order);
	tcase_add_test(tc, test_tail_and_commit_are_a_read);
	tcase_add_test(tc, test_an_emptied_large_block_goes_back_to_the_first);
	tcase_add_test(tc, test_prepend_before_unread_in_place_and_by_moving);
	tcase_add_test(tc, test_copy_take_truncate_and_move);
	tcase_add_test(tc, test_writers);
	tcase_add_test(tc, test_random_against_a_model);
	suite_add_tcase(s, tc);
	return s;
}
