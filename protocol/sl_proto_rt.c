#include "sl_proto_rt.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ids and times must survive TypeScript's number: both codecs refuse more. */
#define MAX_SAFE_INTEGER ((UINT64_C(1) << 53) - 1)

const char *
sl_proto_error_kind_slug(sl_proto_error_kind_t kind)
{
    static const char *const slugs[] = {"none",    "truncated", "malformed", "type",
                                        "missing", "enum",      "range",     "nomem"};
    return (size_t)kind < sizeof slugs / sizeof slugs[0] ? slugs[kind] : "unknown";
}

/* --- scanning --- */

static uint64_t
read_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Length of the UTF-8 sequence led by b and the range of its second byte, or 0 if b cannot lead. */
static size_t
utf8_lead(uint8_t b, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80;
    *hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf)
        return 2;
    if (b >= 0xe0 && b <= 0xef) {
        /* no overlong forms, no UTF-16 surrogates */
        *lo = b == 0xe0 ? 0xa0 : 0x80;
        *hi = b == 0xed ? 0x9f : 0xbf;
        return 3;
    }
    if (b >= 0xf0 && b <= 0xf4) {
        /* no overlong forms, nothing above U+10FFFF */
        *lo = b == 0xf0 ? 0x90 : 0x80;
        *hi = b == 0xf4 ? 0x8f : 0xbf;
        return 4;
    }
    return 0;
}

/* NUL is refused too: the C side holds strings NUL-terminated. */
static bool
utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b == 0)
            return false;
        if (b < 0x80) {
            i++;
            continue;
        }
        uint8_t lo, hi;
        size_t len = utf8_lead(b, &lo, &hi);
        if (len == 0 || n - i < len || s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf)
                return false;
        i += len;
    }
    return true;
}

/* What one msgpack header announces. */
typedef struct head {
    size_t size;     /* bytes of the header itself */
    size_t payload;  /* bytes that follow it (string, binary) */
    size_t children; /* values that follow it (array items, map keys and values) */
    bool is_str;
    bool is_container;
} head_t;

/* Reads the header at p[0..left); returns 0, or -1 with err set. */
static int
read_head(const uint8_t *p, size_t left, size_t at, head_t *h, sl_proto_error_t *err)
{
    uint8_t b = p[0];
    size_t width = 0; /* bytes of the length or count that follow the type byte */
    *h = (head_t){.size = 1};
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 0;
    if (b >= 0x80 && b <= 0x8f) {
        h->children = (size_t)(b & 0x0f) * 2;
        h->is_container = true;
        return 0;
    }
    if (b >= 0x90 && b <= 0x9f) {
        h->children = b & 0x0f;
        h->is_container = true;
        return 0;
    }
    if (b >= 0xa0 && b <= 0xbf) {
        h->payload = b & 0x1f;
        h->is_str = true;
        return 0;
    }
    switch (b) {
    case 0xcc:
    case 0xd0:
        h->size = 2;
        return 0;
    case 0xcd:
    case 0xd1:
        h->size = 3;
        return 0;
    case 0xce:
    case 0xd2:
        h->size = 5;
        return 0;
    case 0xcf:
    case 0xd3:
        h->size = 9;
        return 0;
    case 0xc4:
    case 0xd9:
        width = 1;
        break;
    case 0xc5:
    case 0xda:
    case 0xdc:
    case 0xde:
        width = 2;
        break;
    case 0xc6:
    case 0xdb:
    case 0xdd:
    case 0xdf:
        width = 4;
        break;
    case 0xca:
    case 0xcb:
        return sl__proto_fail(err, SL_PROTO_ERR_MALFORMED, "float at byte %zu (the protocol has none)", at);
    default:
        return sl__proto_fail(err, SL_PROTO_ERR_MALFORMED, "type byte 0x%02x at byte %zu is not allowed", b,
                              at);
    }
    if (left < 1 + width)
        return sl__proto_fail(err, SL_PROTO_ERR_TRUNCATED, "input ends inside a header at byte %zu", at);
    uint64_t n = read_be(p + 1, width);
    h->size = 1 + width;
    h->is_container = b >= 0xdc;
    if (b == 0xdc || b == 0xdd)
        h->children = n;
    else if (b == 0xde || b == 0xdf)
        h->children = n * 2;
    else {
        h->payload = n;
        h->is_str = b >= 0xd9;
    }
    return 0;
}

int
sl__proto_scan(const char *buf, size_t len, size_t *end, sl_proto_error_t *err)
{
    const uint8_t *p = (const uint8_t *)buf;
    size_t pending[SL_PROTO_MAX_DEPTH]; /* values still to read at each open level */
    int top = 0;
    size_t pos = 0;
    pending[0] = 1;
    while (top >= 0) {
        if (pending[top] == 0) {
            top--;
            continue;
        }
        pending[top]--;
        if (pos >= len)
            return sl__proto_fail(err, SL_PROTO_ERR_TRUNCATED, "input ends after %zu bytes", len);
        head_t h;
        if (read_head(p + pos, len - pos, pos, &h, err) != 0)
            return -1;
        /* Every child needs at least one byte: a larger count cannot be satisfied. */
        if (h.size > len - pos || h.payload > len - pos - h.size || h.children > len - pos - h.size)
            return sl__proto_fail(err, SL_PROTO_ERR_TRUNCATED, "input ends inside the value at byte %zu",
                                  pos);
        if (h.is_str && !utf8_valid(p + pos + h.size, h.payload))
            return sl__proto_fail(err, SL_PROTO_ERR_MALFORMED, "string at byte %zu is not UTF-8 without NUL",
                                  pos);
        pos += h.size + h.payload;
        if (h.is_container) {
            if (top + 1 >= SL_PROTO_MAX_DEPTH)
                return sl__proto_fail(err, SL_PROTO_ERR_MALFORMED, "nesting deeper than %d",
                                      SL_PROTO_MAX_DEPTH);
            pending[++top] = h.children;
        }
    }
    *end = pos;
    return 0;
}

/* --- errors --- */

int
sl__proto_fail(sl_proto_error_t *err, sl_proto_error_kind_t kind, const char *fmt, ...)
{
    va_list ap;
    err->kind = kind;
    err->path[0] = '\0';
    va_start(ap, fmt);
    vsnprintf(err->detail, sizeof err->detail, fmt, ap);
    va_end(ap);
    return -1;
}

/* Prefixes err->path with seg, joined by a dot unless the path starts with an index; cuts what does not fit.
 */
static int
prepend(sl_proto_error_t *err, const char *seg)
{
    char old[SL_PROTO_PATH_MAX];
    memcpy(old, err->path, sizeof old);
    size_t cap = sizeof err->path - 1;
    size_t n = strlen(seg) < cap ? strlen(seg) : cap;
    memcpy(err->path, seg, n);
    if (old[0] != '\0' && old[0] != '[' && n < cap)
        err->path[n++] = '.';
    size_t rest = strlen(old) < cap - n ? strlen(old) : cap - n;
    memcpy(err->path + n, old, rest);
    err->path[n + rest] = '\0';
    return -1;
}

int
sl__proto_in(sl_proto_error_t *err, const char *field)
{
    return prepend(err, field);
}

int
sl__proto_in_at(sl_proto_error_t *err, const char *field, size_t index)
{
    char seg[SL_PROTO_PATH_MAX];
    snprintf(seg, sizeof seg, "%s[%zu]", field, index);
    return prepend(err, seg);
}

int
sl__proto_missing(sl_proto_error_t *err, const char *field)
{
    sl__proto_fail(err, SL_PROTO_ERR_MISSING, "required field is missing");
    return prepend(err, field);
}

/* --- decoding --- */

static const char *
type_name(msgpack_object_type t)
{
    switch (t) {
    case MSGPACK_OBJECT_NIL:
        return "nil";
    case MSGPACK_OBJECT_BOOLEAN:
        return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return "integer";
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return "negative integer";
    case MSGPACK_OBJECT_STR:
        return "string";
    case MSGPACK_OBJECT_BIN:
        return "binary";
    case MSGPACK_OBJECT_ARRAY:
        return "array";
    case MSGPACK_OBJECT_MAP:
        return "map";
    default:
        return "other";
    }
}

static int
expect(const msgpack_object *o, msgpack_object_type t, const char *want, sl_proto_error_t *err)
{
    if (o->type == t)
        return 0;
    return sl__proto_fail(err, SL_PROTO_ERR_TYPE, "expected %s, got %s", want, type_name(o->type));
}

const msgpack_object *
sl__proto_find(const msgpack_object *map, const char *key)
{
    size_t n = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && memcmp(k->via.str.ptr, key, n) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

int
sl__proto_dec_map_object(const msgpack_object *o, sl_proto_error_t *err)
{
    return expect(o, MSGPACK_OBJECT_MAP, "map", err);
}

int
sl__proto_dec_bool(const msgpack_object *o, bool *out, sl_proto_error_t *err)
{
    if (expect(o, MSGPACK_OBJECT_BOOLEAN, "bool", err) != 0)
        return -1;
    *out = o->via.boolean;
    return 0;
}

static int
dec_uint(const msgpack_object *o, uint64_t max, uint64_t *out, sl_proto_error_t *err)
{
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return sl__proto_fail(err, SL_PROTO_ERR_RANGE, "%" PRId64 " is negative", o->via.i64);
    if (expect(o, MSGPACK_OBJECT_POSITIVE_INTEGER, "integer", err) != 0)
        return -1;
    if (o->via.u64 > max)
        return sl__proto_fail(err, SL_PROTO_ERR_RANGE, "%" PRIu64 " is above %" PRIu64, o->via.u64, max);
    *out = o->via.u64;
    return 0;
}

int
sl__proto_dec_u32(const msgpack_object *o, uint32_t *out, sl_proto_error_t *err)
{
    uint64_t v = 0;
    if (dec_uint(o, UINT32_MAX, &v, err) != 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int
sl__proto_dec_u64(const msgpack_object *o, uint64_t *out, sl_proto_error_t *err)
{
    return dec_uint(o, MAX_SAFE_INTEGER, out, err);
}

int
sl__proto_dec_str(const msgpack_object *o, char **out, sl_proto_error_t *err)
{
    if (expect(o, MSGPACK_OBJECT_STR, "string", err) != 0)
        return -1;
    char *s = malloc((size_t)o->via.str.size + 1);
    if (s == NULL)
        return sl__proto_fail(err, SL_PROTO_ERR_NOMEM, "out of memory");
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    *out = s;
    return 0;
}

int
sl__proto_dec_slug(const msgpack_object *o, const char *const *slugs, size_t count, int *out,
                   sl_proto_error_t *err)
{
    if (expect(o, MSGPACK_OBJECT_STR, "string", err) != 0)
        return -1;
    for (size_t i = 0; i < count; i++) {
        if (strlen(slugs[i]) == o->via.str.size && memcmp(slugs[i], o->via.str.ptr, o->via.str.size) == 0) {
            *out = (int)i;
            return 0;
        }
    }
    int shown = o->via.str.size > 48 ? 48 : (int)o->via.str.size;
    return sl__proto_fail(err, SL_PROTO_ERR_ENUM, "unknown slug \"%.*s\"", shown, o->via.str.ptr);
}

int
sl__proto_dec_array(const msgpack_object *o, size_t *len, sl_proto_error_t *err)
{
    if (expect(o, MSGPACK_OBJECT_ARRAY, "array", err) != 0)
        return -1;
    *len = o->via.array.size;
    return 0;
}

/* JavaScript objects put integer-like keys first, which would reorder the map there. */
static bool
all_digits(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* Checks entry i of a decoded map against the entries before it. */
static int
check_key(const sl_proto_map_entry_t *entries, size_t i, sl_proto_error_t *err)
{
    if (all_digits(entries[i].key)) {
        sl__proto_fail(err, SL_PROTO_ERR_MALFORMED, "a map key may not be all digits");
        return sl__proto_in(err, entries[i].key);
    }
    for (size_t k = 0; k < i; k++) {
        if (strcmp(entries[k].key, entries[i].key) == 0) {
            sl__proto_fail(err, SL_PROTO_ERR_MALFORMED, "duplicate key");
            return sl__proto_in(err, entries[i].key);
        }
    }
    return 0;
}

static int
dec_entries(const msgpack_object *o, sl_proto_map_entry_t *entries, sl_proto_error_t *err)
{
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        if (sl__proto_dec_str(&kv->key, &entries[i].key, err) != 0)
            return -1;
        if (check_key(entries, i, err) != 0)
            return -1;
        if (sl__proto_dec_str(&kv->val, &entries[i].value, err) != 0)
            return sl__proto_in(err, entries[i].key);
    }
    return 0;
}

int
sl__proto_dec_map(const msgpack_object *o, sl_proto_map_entry_t **entries, size_t *len, sl_proto_error_t *err)
{
    if (expect(o, MSGPACK_OBJECT_MAP, "map", err) != 0)
        return -1;
    size_t n = o->via.map.size;
    sl_proto_map_entry_t *e = NULL;
    if (n > 0 && (e = calloc(n, sizeof *e)) == NULL)
        return sl__proto_fail(err, SL_PROTO_ERR_NOMEM, "out of memory");
    if (dec_entries(o, e, err) != 0) {
        sl__proto_free_map(e, n);
        return -1;
    }
    *entries = e;
    *len = n;
    return 0;
}

void
sl__proto_free_map(sl_proto_map_entry_t *entries, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        free(entries[i].key);
        free(entries[i].value);
    }
    free(entries);
}

/* --- encoding --- */

int
sl__proto_grow(msgpack_sbuffer *out, size_t n)
{
    if (n > SIZE_MAX / 2 - out->size)
        return -1;
    size_t alloc = out->alloc != 0 ? out->alloc : MSGPACK_SBUFFER_INIT_SIZE;
    while (alloc - out->size < n)
        alloc *= 2;
    char *data = realloc(out->data, alloc);
    if (data == NULL)
        return -1;
    out->data = data;
    out->alloc = alloc;
    return 0;
}

int
sl__proto_put_map(msgpack_sbuffer *out, const sl_proto_map_entry_t *entries, size_t len)
{
    if (len > UINT32_MAX || sl__proto_put_map_head(out, (uint32_t)len) != 0)
        return -1;
    for (size_t i = 0; i < len; i++)
        if (sl__proto_put_str(out, entries[i].key) != 0 || sl__proto_put_str(out, entries[i].value) != 0)
            return -1;
    return 0;
}
