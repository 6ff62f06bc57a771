/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the untyped startup-phase packets (StartupMessage,
 * SSLRequest, GSSENCRequest, CancelRequest) through proto_parse_startup(),
 * the first bytes any client sends. The input is a stream of packets, as a
 * client may send an SSLRequest and then its StartupMessage in one write;
 * every prefix of the first packet is tried too, as a partial read gives.
 * A violated invariant aborts, which libFuzzer reports as a crash.
 */
#include "proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, \
				__FILE__, __LINE__);                             \
			abort();                                                 \
		}                                                                \
	} while (0)

/* A string the parser handed out lies inside [lo, hi) and ends there. */
static void check_string(const char *s, const uint8_t *lo, const uint8_t *hi)
{
	CHECK(s != NULL);
	CHECK((const uint8_t *)s >= lo && (const uint8_t *)s < hi);
	CHECK(memchr(s, '\0', (size_t)(hi - (const uint8_t *)s)) != NULL);
}

static void check_result(const uint8_t *buf, size_t avail, enum proto_startup_result r,
			 const struct proto_startup *st)
{
	switch (r) {
	case PROTO_STARTUP_RESULT_OK:
		CHECK(st->len >= 8 && st->len <= PROTO_STARTUP_MAX && st->len <= avail);
		CHECK(st->n_params <= PROTO_STARTUP_MAX_PARAMS);
		switch (st->kind) {
		case PROTO_STARTUP_NORMAL:
			/* Any 3.x: the caller negotiates the minor version. */
			CHECK(PG_PROTOCOL_MAJOR(st->version) == 3);
			CHECK(st->version == proto_get_u32(buf + 4));
			/* Parameters come after the 8-byte header and before the final NUL. */
			for (size_t i = 0; i < st->n_params; i++) {
				check_string(st->params[i].name, buf + 8, buf + st->len - 1);
				check_string(st->params[i].value, buf + 8, buf + st->len - 1);
			}
			CHECK(buf[st->len - 1] == '\0');
			break;
		case PROTO_STARTUP_SSL:
		case PROTO_STARTUP_GSSENC:
			CHECK(st->len == 8 && st->n_params == 0);
			break;
		case PROTO_STARTUP_CANCEL:
			/* 12 + a key of 4 to 256 bytes (protocol 3.2), the key inside the packet. */
			CHECK(st->len >= PROTO_CANCEL_HEAD_LEN + PROTO_CANCEL_KEY_MIN);
			CHECK(st->len <= PROTO_CANCEL_HEAD_LEN + PROTO_CANCEL_KEY_MAX && st->n_params == 0);
			CHECK(st->cancel_pid == proto_get_u32(buf + 8));
			CHECK(st->cancel_key == buf + PROTO_CANCEL_HEAD_LEN);
			CHECK(st->cancel_key_len == st->len - PROTO_CANCEL_HEAD_LEN);
			break;
		}
		break;
	case PROTO_STARTUP_RESULT_NEED_MORE:
		/* Only when the length field or the body is not all there. */
		CHECK(avail < 4 || avail < proto_get_u32(buf));
		break;
	case PROTO_STARTUP_RESULT_BAD_LENGTH: {
		CHECK(avail >= 4);
		uint32_t len = proto_get_u32(buf);
		CHECK(len < 8 || len > PROTO_STARTUP_MAX);
		break;
	}
	case PROTO_STARTUP_RESULT_BAD_VERSION:
		/* only a major version other than 3 (none of the special codes) */
		CHECK(avail >= 8 && PG_PROTOCOL_MAJOR(proto_get_u32(buf + 4)) != 3);
		break;
	case PROTO_STARTUP_RESULT_MALFORMED:
		CHECK(avail >= 8);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy: a read past the packet is a heap overflow ASan sees. */
	uint8_t *buf = malloc(size);
	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);

	struct proto_startup st;
	/* Partial reads of the first packet. */
	size_t first = size >= 4 ? proto_get_u32(buf) : size;
	if (first > size)
		first = size;
	for (size_t avail = 0; avail < first && avail < 24; avail++) {
		uint8_t *part = malloc(avail);
		if (part == NULL)
			break;
		memcpy(part, buf, avail);
		enum proto_startup_result r = proto_parse_startup(part, avail, &st);
		check_result(part, avail, r, &st);
		free(part);
	}

	/* The packets one after another, while they parse. */
	size_t off = 0;
	for (int n = 0; n < 8 && off < size; n++) {
		enum proto_startup_result r = proto_parse_startup(buf + off, size - off, &st);
		check_result(buf + off, size - off, r, &st);
		if (r != PROTO_STARTUP_RESULT_OK)
			break;
		off += st.len;
	}
	free(buf);
	return 0;
}
