/* SPDX-License-Identifier: MIT */
/*
 * proto: framing and parsing of PostgreSQL v3 messages, as pure functions.
 * Every length is checked before the bytes it covers are touched.
 */
#include "proto.h"

#include <string.h>

enum proto_startup_result proto_parse_startup(const uint8_t *buf, size_t avail, struct proto_startup *out)
{
	memset(out, 0, sizeof *out);
	if (avail < 4)
		return PROTO_STARTUP_RESULT_NEED_MORE;
	uint32_t len = proto_get_u32(buf);
	if (len < 8 || len > PROTO_STARTUP_MAX)
		return PROTO_STARTUP_RESULT_BAD_LENGTH;
	if (avail < len)
		return PROTO_STARTUP_RESULT_NEED_MORE;
	out->len = len;
	uint32_t code = proto_get_u32(buf + 4);
	out->version = code;
	switch (code) {
	case PG_SSL_REQUEST_CODE:
		out->kind = PROTO_STARTUP_SSL;
		return len == 8 ? PROTO_STARTUP_RESULT_OK : PROTO_STARTUP_RESULT_MALFORMED;
	case PG_GSSENC_REQUEST_CODE:
		out->kind = PROTO_STARTUP_GSSENC;
		return len == 8 ? PROTO_STARTUP_RESULT_OK : PROTO_STARTUP_RESULT_MALFORMED;
	case PG_CANCEL_REQUEST_CODE:
		/* Protocol 3.2 keys are 4 to 256 bytes; the length of the packet
		 * is the only thing that says how long this one is. */
		out->kind = PROTO_STARTUP_CANCEL;
		if (len < PROTO_CANCEL_HEAD_LEN + PROTO_CANCEL_KEY_MIN || len > PROTO_CANCEL_HEAD_LEN + PROTO_CANCEL_KEY_MAX)
			return PROTO_STARTUP_RESULT_MALFORMED;
		out->cancel_pid = proto_get_u32(buf + 8);
		out->cancel_key = buf + PROTO_CANCEL_HEAD_LEN;
		out->cancel_key_len = len - PROTO_CANCEL_HEAD_LEN;
		return PROTO_STARTUP_RESULT_OK;
	default:
		break;
	}
	/* Any 3.x: a minor version pgcat does not speak is negotiated down
	 * (proto_negotiation_needed), as PostgreSQL does; only another major
	 * version is refused. */
	if (PG_PROTOCOL_MAJOR(code) != 3)
		return PROTO_STARTUP_RESULT_BAD_VERSION;
	out->kind = PROTO_STARTUP_NORMAL;
	/* name\0value\0 ... \0 ; the final terminator must be the last byte. */
	size_t off = 8;
	for (;;) {
		if (off >= len)
			return PROTO_STARTUP_RESULT_MALFORMED;
		if (buf[off] == '\0') {
			if (off + 1 != len)
				return PROTO_STARTUP_RESULT_MALFORMED;
			return PROTO_STARTUP_RESULT_OK;
		}
		const char *name, *value;
		if (!proto_read_cstring(buf, len, &off, &name) || !proto_read_cstring(buf, len, &off, &value))
			return PROTO_STARTUP_RESULT_MALFORMED;
		if (out->n_params >= PROTO_STARTUP_MAX_PARAMS)
			return PROTO_STARTUP_RESULT_MALFORMED;
		out->params[out->n_params].name = name;
		out->params[out->n_params].value = value;
		out->n_params++;
	}
}

bool proto_is_protocol_option(const char *name)
{
	return strncmp(name, PROTO_OPTION_PREFIX, sizeof PROTO_OPTION_PREFIX - 1) == 0;
}

bool proto_negotiation_needed(uint32_t requested, size_t n_unknown, uint32_t *version)
{
	uint32_t minor = PG_PROTOCOL_MINOR(requested);
	/* libpq 18 refuses a NegotiateProtocolVersion that changes nothing, so
	 * a request pgcat serves as asked gets none. */
	if (minor <= PROTO_MINOR_LATEST && n_unknown == 0)
		return false;
	/* PostgreSQL 18 sends the whole version number (major << 16 | minor),
	 * which libpq compares with the one it asked for. */
	*version = PG_PROTOCOL(PG_PROTOCOL_MAJOR(requested), minor < PROTO_MINOR_LATEST ? minor : PROTO_MINOR_LATEST);
	return true;
}

bool proto_parse_negotiate(const uint8_t *body, size_t len, uint32_t *version, uint32_t *n_unknown)
{
	if (len < 8)
		return false;
	*version = proto_get_u32(body);
	*n_unknown = proto_get_u32(body + 4);
	size_t off = 8;
	for (uint32_t i = 0; i < *n_unknown; i++) {
		const char *name;
		if (!proto_read_cstring(body, len, &off, &name))
			return false;
	}
	return off == len;
}

bool proto_read_cstring_at(const uint8_t *body, size_t len, size_t *off, const char **out)
{
	if (*off >= len)
		return false;
	const uint8_t *start = body + *off;
	const uint8_t *nul = memchr(start, 0, len - *off);
	if (!nul)
		return false;
	*out = (const char *)start;
	*off = (size_t)(nul - body) + 1;
	return true;
}

bool proto_parse_error(const uint8_t *body, size_t len, struct proto_error_fields *out)
{
	memset(out, 0, sizeof *out);
	size_t off = 0;
	while (off < len) {
		uint8_t code = body[off++];
		if (code == 0)
			return off == len;
		const char *val;
		if (!proto_read_cstring(body, len, &off, &val))
			return false;
		switch (code) {
		case 'S': out->severity = val; break;
		case 'V': out->severity_nl = val; break;
		case 'C': out->sqlstate = val; break;
		case 'M': out->message = val; break;
		default: break;
		}
	}
	return false;
}

bool proto_parse_parameter_status(const uint8_t *body, size_t len, const char **name, const char **value)
{
	size_t off = 0;
	if (!proto_read_cstring(body, len, &off, name) || !proto_read_cstring(body, len, &off, value))
		return false;
	return off == len;
}

bool proto_parse_datarow_first(const uint8_t *body, size_t len, const char **val, size_t *vlen)
{
	/* Int16 number of columns, then per column Int32 length (-1: NULL)
	 * and the bytes. */
	if (len < 6 || (body[0] << 8 | body[1]) < 1)
		return false;
	int32_t l = (int32_t)proto_get_u32(body + 2);
	if (l == -1) {
		*val = NULL;
		*vlen = 0;
		return true;
	}
	if (l < 0 || (size_t)l > len - 6)
		return false;
	*val = (const char *)body + 6;
	*vlen = (size_t)l;
	return true;
}

bool proto_error_is_fatal(const uint8_t *body, size_t len)
{
	struct proto_error_fields f;
	if (!proto_parse_error(body, len, &f))
		return false;
	const char *sev = f.severity_nl ? f.severity_nl : f.severity;
	return sev && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0);
}
