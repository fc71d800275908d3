/*
 * The schema-independent half of the protocol codec: the decode error, the
 * map<str,str> entry, and the helpers the generated sl_proto.c is built from.
 * Include "sl_proto.h", not this file.
 */
#ifndef SL_PROTO_RT_H
#define SL_PROTO_RT_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Why a message could not be decoded. */
typedef enum sl_proto_error_kind {
    SL_PROTO_ERR_NONE,
    SL_PROTO_ERR_TRUNCATED, /* the input ends inside a message */
    SL_PROTO_ERR_MALFORMED, /* not msgpack; or a float, an ext, bad UTF-8, a NUL, too deep */
    SL_PROTO_ERR_TYPE,      /* a field holds the wrong msgpack type */
    SL_PROTO_ERR_MISSING,   /* a required field is absent */
    SL_PROTO_ERR_ENUM,      /* an unknown enum slug or kind */
    SL_PROTO_ERR_RANGE,     /* an integer outside its type, or above 2^53 - 1 */
    SL_PROTO_ERR_NOMEM,
} sl_proto_error_kind_t;

#define SL_PROTO_PATH_MAX   192
#define SL_PROTO_DETAIL_MAX 128

/* Nesting deeper than this is refused before msgpack-c sees it (its own stack is 32). */
#define SL_PROTO_MAX_DEPTH 24

typedef struct sl_proto_error {
    sl_proto_error_kind_t kind;
    /* Where, from the message's root: "event.view.outcome", "topics[1]"; "" for the message itself. */
    char path[SL_PROTO_PATH_MAX];
    char detail[SL_PROTO_DETAIL_MAX]; /* English, without the path */
} sl_proto_error_t;

/* One entry of a map<str,str>; both strings are owned by the map. */
typedef struct sl_proto_map_entry {
    char *key;
    char *value;
} sl_proto_map_entry_t;

/* The kind's slug ("truncated", "type", …); "none" for SL_PROTO_ERR_NONE. */
const char *sl_proto_error_kind_slug(sl_proto_error_kind_t kind);

/* --- for the generated codec only --- */

/*
 * Checks that buf starts with one complete, well-formed msgpack value that
 * keeps the wire rules (no float, no ext, strings valid UTF-8 without NUL,
 * nesting at most SL_PROTO_MAX_DEPTH) and sets *end to its length. Container
 * sizes are checked against the bytes left, so msgpack-c never allocates for a
 * size the input cannot hold. Returns 0, or -1 with err set.
 */
int sl__proto_scan(const char *buf, size_t len, size_t *end, sl_proto_error_t *err);

/* Sets err (empty path) and returns -1. */
int sl__proto_fail(sl_proto_error_t *err, sl_proto_error_kind_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes err->path with a field name; returns -1. */
int sl__proto_in(sl_proto_error_t *err, const char *field);
/* Prefixes err->path with field[index]; returns -1. */
int sl__proto_in_at(sl_proto_error_t *err, const char *field, size_t index);
int sl__proto_missing(sl_proto_error_t *err, const char *field);

/* The value of key in a map object, or NULL. */
const msgpack_object *sl__proto_find(const msgpack_object *map, const char *key);

/* Each returns 0, or -1 with err set (empty path); on -1 *out is untouched. */
int sl__proto_dec_map_object(const msgpack_object *o, sl_proto_error_t *err);
int sl__proto_dec_bool(const msgpack_object *o, bool *out, sl_proto_error_t *err);
int sl__proto_dec_u32(const msgpack_object *o, uint32_t *out, sl_proto_error_t *err);
int sl__proto_dec_u64(const msgpack_object *o, uint64_t *out, sl_proto_error_t *err);
/* *out is a new NUL-terminated copy, owned by the caller. */
int sl__proto_dec_str(const msgpack_object *o, char **out, sl_proto_error_t *err);
/* *out is the index of the slug in slugs[0..count). */
int sl__proto_dec_slug(const msgpack_object *o, const char *const *slugs, size_t count, int *out,
                       sl_proto_error_t *err);
/* *len is the array's length; the caller allocates the items. */
int sl__proto_dec_array(const msgpack_object *o, size_t *len, sl_proto_error_t *err);
/* On 0, *entries (owned by the caller, NULL when empty) and *len are set. */
int sl__proto_dec_map(const msgpack_object *o, sl_proto_map_entry_t **entries, size_t *len,
                      sl_proto_error_t *err);
void sl__proto_free_map(sl_proto_map_entry_t *entries, size_t len);

/*
 * The encoder writes straight into a msgpack_sbuffer's bytes (no callback
 * per value): the hot ones are inline, so an event is a run of small copies.
 * Each returns 0, or -1 when the buffer could not grow or the value cannot
 * be sent. The forms are msgpack-c's (the smallest that holds the value).
 */

/* Makes room for n more bytes (doubling, as msgpack_sbuffer_write does). */
int sl__proto_grow(msgpack_sbuffer *out, size_t n);

static inline int
sl__proto_put(msgpack_sbuffer *out, const void *bytes, size_t n)
{
    if (out->alloc - out->size < n && sl__proto_grow(out, n) != 0)
        return -1;
    memcpy(out->data + out->size, bytes, n);
    out->size += n;
    return 0;
}

/* A header of a str, map or array of n: fix (n < fixmax), else big16 or big32 with n big-endian. */
static inline int
sl__proto_put_head(msgpack_sbuffer *out, uint32_t n, unsigned fix, uint32_t fixmax, unsigned big8,
                   unsigned big16, unsigned big32)
{
    unsigned char b[5];
    size_t len;
    if (n < fixmax) {
        b[0] = (unsigned char)(fix | n);
        len = 1;
    } else if (big8 != 0 && n < 256) {
        b[0] = (unsigned char)big8;
        b[1] = (unsigned char)n;
        len = 2;
    } else if (n < 65536) {
        b[0] = (unsigned char)big16;
        b[1] = (unsigned char)(n >> 8);
        b[2] = (unsigned char)n;
        len = 3;
    } else {
        b[0] = (unsigned char)big32;
        b[1] = (unsigned char)(n >> 24);
        b[2] = (unsigned char)(n >> 16);
        b[3] = (unsigned char)(n >> 8);
        b[4] = (unsigned char)n;
        len = 5;
    }
    return sl__proto_put(out, b, len);
}

static inline int
sl__proto_put_map_head(msgpack_sbuffer *out, uint32_t n)
{
    return sl__proto_put_head(out, n, 0x80, 16, 0, 0xde, 0xdf);
}

static inline int
sl__proto_put_array_head(msgpack_sbuffer *out, size_t n)
{
    return n > UINT32_MAX ? -1 : sl__proto_put_head(out, (uint32_t)n, 0x90, 16, 0, 0xdc, 0xdd);
}

static inline int
sl__proto_put_bool(msgpack_sbuffer *out, bool value)
{
    unsigned char b = value ? 0xc3 : 0xc2;
    return sl__proto_put(out, &b, 1);
}

static inline int
sl__proto_put_uint(msgpack_sbuffer *out, uint64_t v)
{
    unsigned char b[9];
    if (v < 128) {
        b[0] = (unsigned char)v;
        return sl__proto_put(out, b, 1);
    }
    if (v < 256) {
        b[0] = 0xcc;
        b[1] = (unsigned char)v;
        return sl__proto_put(out, b, 2);
    }
    if (v < 65536) {
        b[0] = 0xcd;
        b[1] = (unsigned char)(v >> 8);
        b[2] = (unsigned char)v;
        return sl__proto_put(out, b, 3);
    }
    if (v <= UINT32_MAX) {
        b[0] = 0xce;
        b[1] = (unsigned char)(v >> 24);
        b[2] = (unsigned char)(v >> 16);
        b[3] = (unsigned char)(v >> 8);
        b[4] = (unsigned char)v;
        return sl__proto_put(out, b, 5);
    }
    b[0] = 0xcf;
    for (int i = 0; i < 8; i++)
        b[1 + i] = (unsigned char)(v >> (56 - 8 * i));
    return sl__proto_put(out, b, 9);
}

/* A NULL string cannot be sent: -1. */
static inline int
sl__proto_put_str(msgpack_sbuffer *out, const char *s)
{
    if (s == NULL)
        return -1;
    size_t n = strlen(s);
    if (n > UINT32_MAX || sl__proto_put_head(out, (uint32_t)n, 0xa0, 32, 0xd9, 0xda, 0xdb) != 0)
        return -1;
    return sl__proto_put(out, s, n);
}

/* An enum slug or union kind, already in msgpack form (header and bytes). */
typedef struct sl__proto_packed {
    const char *bytes;
    size_t len;
} sl__proto_packed_t;

/* A value outside [0, count) cannot be sent: -1. */
static inline int
sl__proto_put_slug(msgpack_sbuffer *out, const sl__proto_packed_t *slugs, size_t count, int value)
{
    if (value < 0 || (size_t)value >= count)
        return -1;
    return sl__proto_put(out, slugs[value].bytes, slugs[value].len);
}

int sl__proto_put_map(msgpack_sbuffer *out, const sl_proto_map_entry_t *entries, size_t len);

#endif
