/* SPDX-License-Identifier: MIT */
/*
 * proto: PostgreSQL v3 wire protocol framing and the parsing of the few
 * messages pgcat must read. Pure functions over byte buffers: no sockets,
 * no state, so every length edge case is unit-testable.
 */
#ifndef PGCAT_PROTO_H
#define PGCAT_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Message type bytes, PostgreSQL's names (src/include/libpq/protocol.h). */
#define PqMsg_Bind 'B'
#define PqMsg_Close 'C'
#define PqMsg_Describe 'D'
#define PqMsg_Execute 'E'
#define PqMsg_FunctionCall 'F'
#define PqMsg_Flush 'H'
#define PqMsg_Parse 'P'
#define PqMsg_Query 'Q'
#define PqMsg_Sync 'S'
#define PqMsg_Terminate 'X'
#define PqMsg_CopyFail 'f'
#define PqMsg_GSSResponse 'p'
#define PqMsg_PasswordMessage 'p'
#define PqMsg_SASLInitialResponse 'p'
#define PqMsg_SASLResponse 'p'
#define PqMsg_CopyData 'd'
#define PqMsg_CopyDone 'c'

#define PqMsg_ParseComplete '1'
#define PqMsg_BindComplete '2'
#define PqMsg_CloseComplete '3'
#define PqMsg_NotificationResponse 'A'
#define PqMsg_CommandComplete 'C'
#define PqMsg_DataRow 'D'
#define PqMsg_ErrorResponse 'E'
#define PqMsg_CopyInResponse 'G'
#define PqMsg_CopyOutResponse 'H'
#define PqMsg_EmptyQueryResponse 'I'
#define PqMsg_BackendKeyData 'K'
#define PqMsg_NoticeResponse 'N'
#define PqMsg_AuthenticationRequest 'R'
#define PqMsg_ParameterStatus 'S'
#define PqMsg_RowDescription 'T'
#define PqMsg_FunctionCallResponse 'V'
#define PqMsg_CopyBothResponse 'W'
#define PqMsg_ReadyForQuery 'Z'
#define PqMsg_NoData 'n'
#define PqMsg_PortalSuspended 's'
#define PqMsg_ParameterDescription 't'
#define PqMsg_NegotiateProtocolVersion 'v'

#define AUTH_REQ_OK 0
#define AUTH_REQ_PASSWORD 3
#define AUTH_REQ_MD5 5
#define AUTH_REQ_GSS 7
#define AUTH_REQ_SSPI 9
#define AUTH_REQ_SASL 10
#define AUTH_REQ_SASL_CONT 11
#define AUTH_REQ_SASL_FIN 12

#define PG_PROTOCOL(major, minor) (((uint32_t)(major) << 16) | (uint32_t)(minor))
#define PG_PROTOCOL_MAJOR(v) ((uint32_t)(v) >> 16)
#define PG_PROTOCOL_MINOR(v) ((uint32_t)(v) & 0xffffu)
#define PG_PROTOCOL_3_0 196608u          /* 3 << 16 */
#define PG_PROTOCOL_3_2 196610u          /* PostgreSQL 18: cancel keys of up to 256 bytes */
/* The newest 3.x minor pgcat speaks, to clients and to servers. 3.1 was
 * never a protocol (PostgreSQL went from 3.0 to 3.2); PostgreSQL 18 serves
 * a client asking for it as 3.1 with 4-byte keys, and so does pgcat. */
#define PROTO_MINOR_LATEST 2u
/* Protocol options are the startup parameters named "_pq_.<name>". */
#define PROTO_OPTION_PREFIX "_pq_."
#define PG_CANCEL_REQUEST_CODE 80877102u
#define PG_SSL_REQUEST_CODE 80877103u
#define PG_GSSENC_REQUEST_CODE 80877104u

/* SPEC §3: a startup packet's whole length, as PostgreSQL bounds it (10,000
 * bytes after the length word). */
#define PROTO_STARTUP_MAX (10000u + 4u)
#define PROTO_AUTH_MSG_MAX 8192u         /* password / SASL messages before login */
#define PROTO_HEADER_LEN 5u
/* Cancel keys: 4 bytes in protocol 3.0, up to 256 in 3.2. A CancelRequest
 * is int32 length, int32 code, int32 pid and the key: 12 + key bytes. */
#define PROTO_CANCEL_KEY_MIN 4u
#define PROTO_CANCEL_KEY_MAX 256u
#define PROTO_CANCEL_HEAD_LEN 12u

/* SQLSTATEs pgcat itself emits. */
#define SQLSTATE_PROTOCOL_VIOLATION "08P01"
#define SQLSTATE_CONNECTION_FAILURE "08006"
#define SQLSTATE_CONNECTION_EXCEPTION "08000"
#define SQLSTATE_INVALID_PASSWORD "28P01"
#define SQLSTATE_INVALID_AUTHORIZATION "28000"
#define SQLSTATE_INVALID_CATALOG_NAME "3D000"
#define SQLSTATE_TOO_MANY_CONNECTIONS "53300"
#define SQLSTATE_FEATURE_NOT_SUPPORTED "0A000"
#define SQLSTATE_ADMIN_SHUTDOWN "57P01"
#define SQLSTATE_QUERY_CANCELED "57014"
#define SQLSTATE_IN_FAILED_TRANSACTION "25P02"
#define SQLSTATE_DUPLICATE_PSTATEMENT "42P05"
#define SQLSTATE_INTERNAL_ERROR "XX000"
#define SQLSTATE_INVALID_PARAMETER_VALUE "22023"
#define SQLSTATE_OUT_OF_MEMORY "53200"
#define SQLSTATE_PROGRAM_LIMIT_EXCEEDED "54000"

enum proto_frame_result {
	PROTO_FRAME_OK,          /* a whole header is there; body may still be arriving */
	PROTO_FRAME_NEED_MORE,   /* fewer than 5 bytes */
	PROTO_FRAME_BAD_LENGTH,  /* length field < 4 */
	PROTO_FRAME_TOO_LONG     /* length field over the limit */
};

struct proto_frame {
	uint8_t type;
	uint32_t len;            /* the length field: counts itself, not the type byte */
};


enum proto_startup_kind {
	PROTO_STARTUP_NORMAL,
	PROTO_STARTUP_SSL,
	PROTO_STARTUP_GSSENC,
	PROTO_STARTUP_CANCEL
};

enum proto_startup_result {
	PROTO_STARTUP_RESULT_OK,
	PROTO_STARTUP_RESULT_NEED_MORE,
	PROTO_STARTUP_RESULT_BAD_LENGTH,   /* < 8 or > PROTO_STARTUP_MAX */
	PROTO_STARTUP_RESULT_BAD_VERSION,
	PROTO_STARTUP_RESULT_MALFORMED     /* parameters not NUL-terminated pairs */
};

#define PROTO_STARTUP_MAX_PARAMS 64

struct proto_startup_param {
	const char *name;        /* point into the caller's buffer */
	const char *value;
};

struct proto_startup {
	enum proto_startup_kind kind;
	uint32_t len;            /* whole packet length */
	uint32_t version;        /* NORMAL: major 3, any minor (the caller negotiates) */
	uint32_t cancel_pid;
	/* CANCEL: the key, PROTO_CANCEL_KEY_MIN to _MAX bytes, pointing into
	 * the caller's buffer. */
	const uint8_t *cancel_key;
	uint32_t cancel_key_len;
	struct proto_startup_param params[PROTO_STARTUP_MAX_PARAMS];
	size_t n_params;
};

/* Parse an untyped startup-phase packet. On OK with a NORMAL packet, params
 * point into buf (which must stay alive), as does a CANCEL packet's key.
 * A major version other than 3 is BAD_VERSION; a CancelRequest whose key is
 * not 4 to 256 bytes is MALFORMED (kind CANCEL). */
enum proto_startup_result proto_parse_startup(const uint8_t *buf, size_t avail, struct proto_startup *out);

/* Is this startup parameter a protocol option ("_pq_.")? pgcat knows none:
 * each is named back in NegotiateProtocolVersion, and none is a session
 * parameter. */
bool proto_is_protocol_option(const char *name);

/* What NegotiateProtocolVersion says to a client that asked for version
 * `requested` (major 3) with n_unknown protocol options pgcat does not
 * know: false when none is due (the request is served as asked), else
 * true with *version the version the connection will use, the lower of
 * the client's and the newest pgcat speaks (never above what it asked). */
bool proto_negotiation_needed(uint32_t requested, size_t n_unknown, uint32_t *version);

/* A server's NegotiateProtocolVersion body: the version it will use and
 * how many of our protocol options it did not know. false: malformed. */
bool proto_parse_negotiate(const uint8_t *body, size_t len, uint32_t *version, uint32_t *n_unknown);

/* Fields of an ErrorResponse/NoticeResponse body (after the 5-byte header). */
struct proto_error_fields {
	const char *severity;     /* 'S' (localized) */
	const char *severity_nl;  /* 'V' */
	const char *sqlstate;     /* 'C' */
	const char *message;      /* 'M' */
};
bool proto_parse_error(const uint8_t *body, size_t len, struct proto_error_fields *out);
/* Is this ErrorResponse body a FATAL or PANIC (the connection ends)? */
bool proto_error_is_fatal(const uint8_t *body, size_t len);

/* ParameterStatus body: two NUL-terminated strings filling the body exactly. */
bool proto_parse_parameter_status(const uint8_t *body, size_t len, const char **name, const char **value);

/* DataRow body (no type, no length): its first column, which lies within
 * len. *val is NULL for an SQL NULL (*vlen 0), else points into body (not
 * NUL-terminated, *vlen bytes). false: no column, or a length that does
 * not fit. */
bool proto_parse_datarow_first(const uint8_t *body, size_t len, const char **val, size_t *vlen);

/* A NUL-terminated string starting at body[*off] within len; advances *off. */
bool proto_read_cstring_at(const uint8_t *body, size_t len, size_t *off, const char **out);
static inline bool proto_read_cstring(const uint8_t *body, size_t len, size_t *off, const char **out)
{
	/* (the empty string, inline: the unnamed statement and portal of
	 * every extended-protocol request, read by several layers) */
	if (*off < len && body[*off] == 0) {
		*out = (const char *)body + *off;
		*off += 1;
		return true;
	}
	return proto_read_cstring_at(body, len, off, out);
}

static inline uint32_t proto_get_u32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline void proto_put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* A message of type type with no body (ParseComplete, BindComplete,
 * NoData, PortalSuspended...): its 5 bytes at p. */
#define PROTO_BODYLESS_LEN 5
static inline void proto_put_bodyless(uint8_t *p, uint8_t type)
{
	p[0] = type;
	proto_put_u32(p + 1, 4);
}

/* Read a typed message header from data[0..avail). max_len bounds the
 * length field. (Inline, as the two below: every message of both
 * directions passes here.) */
static inline enum proto_frame_result proto_frame_header(const uint8_t *data, size_t avail, uint32_t max_len,
							 struct proto_frame *out)
{
	if (avail < PROTO_HEADER_LEN)
		return PROTO_FRAME_NEED_MORE;
	uint32_t len = proto_get_u32(data + 1);
	out->type = data[0];
	out->len = len;
	if (len < 4)
		return PROTO_FRAME_BAD_LENGTH;
	if (len > max_len)
		return PROTO_FRAME_TOO_LONG;
	return PROTO_FRAME_OK;
}

/* Is this a frontend message type valid after login (extended, simple, COPY, function call)? */
static inline bool proto_frontend_type_valid(uint8_t type)
{
	switch (type) {
	case PqMsg_Bind: case PqMsg_Close: case PqMsg_Describe: case PqMsg_Execute:
	case PqMsg_FunctionCall: case PqMsg_Flush: case PqMsg_Parse: case PqMsg_Query:
	case PqMsg_Sync: case PqMsg_Terminate: case PqMsg_CopyFail: case PqMsg_CopyData:
	case PqMsg_CopyDone:
		return true;
	default:
		return false;
	}
}

/* What a PostgreSQL v3 server sends after login (a switch: the compiler
 * makes it a bit test). */
static inline bool proto_backend_type_valid(uint8_t type)
{
	switch (type) {
	case PqMsg_ParseComplete: case PqMsg_BindComplete: case PqMsg_CloseComplete:
	case PqMsg_NotificationResponse: case PqMsg_CommandComplete: case PqMsg_DataRow:
	case PqMsg_ErrorResponse: case PqMsg_CopyInResponse: case PqMsg_CopyOutResponse:
	case PqMsg_EmptyQueryResponse: case PqMsg_BackendKeyData: case PqMsg_NoticeResponse:
	case PqMsg_AuthenticationRequest: case PqMsg_ParameterStatus: case PqMsg_RowDescription:
	case PqMsg_FunctionCallResponse: case PqMsg_CopyBothResponse: case PqMsg_ReadyForQuery:
	case PqMsg_CopyDone: case PqMsg_CopyData: case PqMsg_NoData: case PqMsg_PortalSuspended:
	case PqMsg_ParameterDescription: case PqMsg_NegotiateProtocolVersion:
		return true;
	default:
		return false;
	}
}

/* Of a message too long to be held whole, what is read of it before it is
 * judged (a statement's name, a leading keyword): its header and 1 kB. */
#define PROTO_LONG_HEAD (5u + 1024u)

/* A backend message a server may send without being asked: a notice, a
 * parameter's new value, a notification. (A FATAL ErrorResponse too, but
 * that one is told by its body.) */
static inline bool proto_backend_unprompted(uint8_t type)
{
	return type == PqMsg_NoticeResponse || type == PqMsg_ParameterStatus || type == PqMsg_NotificationResponse;
}

#endif
