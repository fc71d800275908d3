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

/* Each returns 0, or -1 when the buffer could not grow or the value cannot be sent. */
int sl__proto_pack_bool(msgpack_packer *pk, bool value);
/* A NULL string cannot be sent: -1. */
int sl__proto_pack_str(msgpack_packer *pk, const char *s);
/* Bytes already in msgpack form (a key with its header, written by the generator): one write. */
int sl__proto_pack_raw(msgpack_packer *pk, const char *bytes, size_t len);
/* A value outside [0, count) cannot be sent: -1. */
int sl__proto_pack_slug(msgpack_packer *pk, const char *const *slugs, size_t count, int value);
int sl__proto_pack_map(msgpack_packer *pk, const sl_proto_map_entry_t *entries, size_t len);

#endif
