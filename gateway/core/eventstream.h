/*
 * AWS eventstream (`application/vnd.amazon.eventstream`), the framing of
 * Bedrock's ConverseStream answers (formats.md, Bedrock):
 *
 *   total_len u32 | headers_len u32 | prelude_crc u32 | headers | payload | message_crc u32
 *
 * all big-endian; both CRCs are CRC-32 (IEEE 802.3, the gzip one), the
 * prelude's over the first 8 bytes, the message's over everything before it.
 * A header is name_len u8 | name | type u8 | value, the value's size fixed by
 * its type or, for bytes and strings, given by a u16 before it.
 *
 * The decoder keeps no state and allocates nothing: the caller holds the
 * unconsumed bytes in one buffer and asks for the first whole frame in it; the
 * frame is described by spans into that buffer. Only the 12-byte prelude is
 * looked at until the whole frame has arrived, so a large frame that arrives
 * in many reads costs one CRC pass, not one per read.
 */
#ifndef SL_EVENTSTREAM_H
#define SL_EVENTSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/xalloc.h"

/* Prelude (8) + its CRC (4) + the message CRC (4): the size of an empty frame. */
#define SL_ES_OVERHEAD 16
/* The prelude and its CRC: what must have arrived before a frame's length is known. */
#define SL_ES_PRELUDE_LEN 12
/* AWS's own bound on one message; a sensible max_message for sl_es_next. */
#define SL_ES_MAX_MESSAGE_DEFAULT (16 * 1024 * 1024)
/* What the AWS SDKs accept for a header name and a string value (sl_es_encode enforces them). */
#define SL_ES_MAX_NAME_LEN  127
#define SL_ES_MAX_VALUE_LEN 32767

typedef enum {
    SL_ES_NEED_MORE,       /* no whole frame yet: call again with more bytes appended */
    SL_ES_MESSAGE,         /* *msg describes the first frame; the caller drops msg->len bytes */
    SL_ES_BAD_PRELUDE_CRC, /* the first 12 bytes are not a prelude: a broken stream */
    SL_ES_TOO_LARGE,       /* the prelude announces more than max_message bytes: a broken stream */
    SL_ES_BAD_LENGTHS,     /* a sound prelude whose lengths cannot describe a frame: a broken stream */
    SL_ES_BAD_MESSAGE_CRC, /* the frame's bytes do not match its CRC: a broken stream */
    SL_ES_BAD_HEADERS,     /* the header block does not parse exactly: a broken stream */
} sl_es_status_t;

/* Header value types, as numbered on the wire. */
typedef enum {
    SL_ES_TRUE = 0,
    SL_ES_FALSE = 1,
    SL_ES_BYTE = 2,
    SL_ES_SHORT = 3,
    SL_ES_INT = 4,
    SL_ES_LONG = 5,
    SL_ES_BYTES = 6,
    SL_ES_STRING = 7,
    SL_ES_TIMESTAMP = 8, /* ms since the epoch, as a u64 */
    SL_ES_UUID = 9,
    SL_ES_TYPE_COUNT,
} sl_es_type_t;

/*
 * One frame. The spans point into the caller's buffer and stay valid until
 * the caller drops or changes those bytes.
 */
typedef struct sl_es_message {
    size_t len;          /* bytes of the buffer this frame took (its total_len) */
    const char *headers; /* the header block, already checked to parse exactly */
    size_t headers_len;  /* its bytes */
    const char *payload; /* may be empty (payload_len 0), never NULL */
    size_t payload_len;  /* its bytes */
    uint32_t header_count;
} sl_es_message_t;

/*
 * One header. For SL_ES_BYTES and SL_ES_STRING the value is the content
 * without its length prefix; for the fixed-size types it is the big-endian
 * bytes (1, 2, 4, 8, 8 or 16 of them); for SL_ES_TRUE / SL_ES_FALSE it is
 * empty.
 */
typedef struct {
    const char *name;
    size_t name_len;
    sl_es_type_t type;
    const char *value;
    size_t value_len;
} sl_es_header_t;

/* What a frame's :message-type says. */
typedef enum {
    SL_ES_KIND_EVENT,     /* `event`: :event-type names it */
    SL_ES_KIND_EXCEPTION, /* `exception`: :exception-type names it, the payload is JSON */
    SL_ES_KIND_ERROR,     /* `error`: :error-code and :error-message say what */
    SL_ES_KIND_UNKNOWN,   /* no :message-type string header, or another value */
} sl_es_kind_t;

/*
 * Looks for the first whole frame in buf[0..len), the stream's unconsumed
 * bytes. max_message (at least SL_ES_OVERHEAD) bounds what a frame may
 * announce, so a caller never buffers more than max_message plus one read.
 *
 * SL_ES_MESSAGE: *msg is filled; the caller drops msg->len bytes before the
 * next call. SL_ES_NEED_MORE: msg->len is set to the whole frame's length
 * once the prelude has arrived and checked out (0 before that) so the caller
 * may size its buffer; the other fields are untouched, and the next call must
 * pass the same bytes with more appended. Any other status: *msg is untouched
 * and the stream cannot go on. Checks run in the order of the status list, so
 * a frame is never trusted further than its prelude CRC vouches for it.
 */
sl_es_status_t sl_es_next(const char *buf, size_t len, size_t max_message, sl_es_message_t *msg);

/*
 * Iterates over msg's headers in wire order: start with *pos = 0; each call
 * fills *h and advances *pos, and false means there are no more (h then
 * untouched). msg must come from sl_es_next.
 */
bool sl_es_header_next(const sl_es_message_t *msg, size_t *pos, sl_es_header_t *h);

/*
 * The value of the first string header called name (a NUL-terminated literal
 * such as ":event-type"): true with *value / *value_len set (a span of the
 * frame), false when there is none or it is not a string (outputs untouched).
 */
bool sl_es_header_string(const sl_es_message_t *msg, const char *name, const char **value, size_t *value_len);

/* Whether msg has a string header name whose value is exactly value (both NUL-terminated). */
bool sl_es_header_is(const sl_es_message_t *msg, const char *name, const char *value);

/* What msg's :message-type says. */
sl_es_kind_t sl_es_message_kind(const sl_es_message_t *msg);

/* A header to encode: both NUL-terminated; the value is sent as a string. */
typedef struct {
    const char *name;
    const char *value;
} sl_es_string_header_t;

/*
 * Appends one whole frame, both CRCs included, to out: the headers in the
 * given order as string headers, then payload[0..payload_len). Returns false
 * and appends nothing when a name is empty or longer than SL_ES_MAX_NAME_LEN,
 * a value is longer than SL_ES_MAX_VALUE_LEN, or the frame would not fit a
 * u32 length.
 */
bool sl_es_encode(sl_strbuf_t *out, const sl_es_string_header_t *headers, size_t n_headers,
                  const char *payload, size_t payload_len);

/*
 * Appends the exception frame that ends a stream the way the AWS SDK expects
 * it (the shape Bedrock itself sends): `:exception-type` exception_type
 * (camelCase, e.g. "serviceUnavailableException"), `:content-type`
 * application/json, `:message-type` exception, and the JSON payload (such as
 * `{"message":"…"}`). Returns false and appends nothing as sl_es_encode does.
 */
bool sl_es_encode_exception(sl_strbuf_t *out, const char *exception_type, const char *payload,
                            size_t payload_len);

/*
 * CRC-32 (IEEE 802.3, reflected, as gzip and AWS use it) of p[0..n),
 * continuing from crc: pass 0 to start, a previous result to go on.
 */
uint32_t sl_es_crc32(uint32_t crc, const void *p, size_t n);

#endif
