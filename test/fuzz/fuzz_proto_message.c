/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: typed-message framing and the message bodies pgcat
 * reads itself. The input is a byte stream as it arrives on a connection;
 * proto_frame_header() frames it message by message, and every whole
 * message's body (copied to a buffer of exactly its size) goes through
 * proto_parse_error(), proto_parse_parameter_status() and
 * proto_read_cstring(). The first input byte picks the length limit, so the
 * limits of every state (authentication, normal, max_packet_size) are tried.
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

static const uint32_t limits[] = { 4, 5, 64, PROTO_AUTH_MSG_MAX, PROTO_STARTUP_MAX, 1u << 20, 0x7fffffffu };

/* A field the parser handed out lies inside body[0..len) and ends there. */
static void check_field(const char *s, const uint8_t *body, size_t len)
{
	if (s == NULL)
		return;
	CHECK((const uint8_t *)s >= body && (const uint8_t *)s < body + len);
	CHECK(memchr(s, '\0', len - (size_t)((const uint8_t *)s - body)) != NULL);
}

static void parse_body(uint8_t type, const uint8_t *data, size_t len)
{
	uint8_t *body = malloc(len);
	if (body == NULL)
		return;
	memcpy(body, data, len);

	struct proto_error_fields ef;
	if (proto_parse_error(body, len, &ef)) {
		CHECK(len >= 1 && body[len - 1] == '\0');
		check_field(ef.severity, body, len);
		check_field(ef.severity_nl, body, len);
		check_field(ef.sqlstate, body, len);
		check_field(ef.message, body, len);
	}

	const char *name = NULL, *value = NULL;
	if (proto_parse_parameter_status(body, len, &name, &value)) {
		check_field(name, body, len);
		check_field(value, body, len);
		CHECK(strlen(name) + 1 + strlen(value) + 1 == len);
	}

	/* Every C string in the body, as the Parse/Bind/auth readers walk them. */
	size_t off = 0, prev = 0;
	const char *s;
	while (proto_read_cstring(body, len, &off, &s)) {
		check_field(s, body, len);
		CHECK(off > prev && off <= len);
		CHECK((size_t)(s - (const char *)body) + strlen(s) + 1 == off);
		prev = off;
	}
	(void)proto_frontend_type_valid(type);
	free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint32_t max_len = limits[data[0] % (sizeof limits / sizeof limits[0])];
	data++;
	size--;

	/* Partial headers of the first message. */
	struct proto_frame f;
	for (size_t avail = 0; avail < PROTO_HEADER_LEN && avail <= size; avail++) {
		uint8_t hdr[PROTO_HEADER_LEN];
		memcpy(hdr, data, avail);
		enum proto_frame_result r = proto_frame_header(hdr, avail, max_len, &f);
		CHECK(r == PROTO_FRAME_NEED_MORE);
	}

	size_t off = 0;
	while (off < size) {
		size_t avail = size - off;
		enum proto_frame_result r = proto_frame_header(data + off, avail, max_len, &f);
		if (r == PROTO_FRAME_NEED_MORE) {
			CHECK(avail < PROTO_HEADER_LEN);
			break;
		}
		CHECK(f.type == data[off] && f.len == proto_get_u32(data + off + 1));
		if (r == PROTO_FRAME_BAD_LENGTH) {
			CHECK(f.len < 4);
			break;
		}
		if (r == PROTO_FRAME_TOO_LONG) {
			CHECK(f.len > max_len);
			break;
		}
		CHECK(r == PROTO_FRAME_OK && f.len >= 4 && f.len <= max_len);
		if ((size_t)f.len + 1 > avail)
			break;   /* the body is still arriving */
		parse_body(f.type, data + off + PROTO_HEADER_LEN, f.len - 4);
		off += (size_t)f.len + 1;
	}
	return 0;
}
