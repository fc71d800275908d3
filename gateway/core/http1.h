/*
 * HTTP/1.1 response framing, for the upstream client (hop.c): how a
 * response's body is delimited (RFC 9112 §6.3), whether its connection may
 * carry the next request, and an incremental chunked decoder. Pure: the head
 * is parsed by picohttpparser in the shell, these rules read its fields.
 */
#ifndef SL_HTTP1_H
#define SL_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One header field as the parser found it (picohttpparser's phr_header has the same four members). */
typedef struct {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} sl_http1_field_t;

typedef enum {
    SL_HTTP1_NO_BODY,     /* 1xx, 204, 304: the head is the whole response */
    SL_HTTP1_LENGTH,      /* Content-Length bytes */
    SL_HTTP1_CHUNKED,     /* Transfer-Encoding ending in chunked */
    SL_HTTP1_UNTIL_CLOSE, /* neither: the body runs until the upstream closes the connection */
} sl_http1_body_t;

typedef struct {
    sl_http1_body_t body;
    uint64_t content_length; /* SL_HTTP1_LENGTH */
    bool keep_alive;         /* the connection may carry another request once this response is read */
} sl_http1_framing_t;

/*
 * The framing of a response with this status and these fields. False when
 * the head frames its body in a way that cannot be read safely: a
 * Content-Length that is not a number, or several that differ.
 * A Transfer-Encoding beside a Content-Length wins, and the connection is
 * not kept (a smuggling sign, RFC 9112 §6.1).
 */
bool sl_http1_framing(int minor_version, int status, const sl_http1_field_t *fields, size_t n_fields,
                      sl_http1_framing_t *out);

/* A chunked decoder's state; all zero is the start of a body. The fields are the decoder's own. */
typedef struct {
    uint64_t left; /* bytes of the current chunk's data still to come */
    uint8_t state;
    uint8_t digits; /* hex digits of the current chunk-size line */
} sl_chunked_t;

typedef enum {
    SL_CHUNKED_MORE, /* the body goes on: call again with the next bytes */
    SL_CHUNKED_END,  /* the last chunk and its trailer section were read */
    SL_CHUNKED_BAD,  /* not chunked coding (a bad size line, a chunk not followed by CRLF) */
} sl_chunked_status_t;

/*
 * Decodes buf[0, *len) in place: the chunks' data moves to the start of buf
 * and *len becomes its length. The framing itself (size lines, extensions,
 * trailers) is remembered in *d, never kept in buf, so the next call starts
 * with the next bytes. On SL_CHUNKED_END, *after is the number of bytes that
 * followed the body (an upstream that sends them cannot keep its connection).
 */
sl_chunked_status_t sl_chunked_decode(sl_chunked_t *d, char *buf, size_t *len, size_t *after);

#endif
