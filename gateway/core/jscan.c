/* Single-pass JSON validation and top-level field extraction (see jscan.h). */
#include "jscan.h"

#include "text.h"

#include <string.h>

#define STR_(x) #x
#define STR(x)  STR_(x)

static const char *const reasons[SL_JSCAN_E_COUNT] = {
    [SL_JSCAN_OK] = "valid",
    [SL_JSCAN_E_TRUNCATED] = "unexpected end of body",
    [SL_JSCAN_E_NOT_OBJECT] = "the body is not a JSON object",
    [SL_JSCAN_E_UNEXPECTED] = "unexpected character",
    [SL_JSCAN_E_BAD_ESCAPE] = "invalid escape in a string",
    [SL_JSCAN_E_CONTROL_CHAR] = "unescaped control character in a string",
    [SL_JSCAN_E_BAD_UTF8] = "invalid UTF-8 in a string",
    [SL_JSCAN_E_BAD_NUMBER] = "invalid number",
    [SL_JSCAN_E_TOO_DEEP] = "nested deeper than " STR(SL_JSCAN_MAX_DEPTH) " levels",
    [SL_JSCAN_E_TRAILING] = "data after the JSON object",
    [SL_JSCAN_E_MODEL_TYPE] = "\"model\" must be a string",
    [SL_JSCAN_E_STREAM_TYPE] = "\"stream\" must be true or false",
    [SL_JSCAN_E_PREVIOUS_TYPE] = "\"previous_response_id\" must be a string",
};

const char *
sl_jscan_reason(sl_jscan_err_t err)
{
    return (unsigned)err < SL_JSCAN_E_COUNT ? reasons[err] : "unknown error";
}

/* ---- string units ---------------------------------------------------------- */

/* The code unit of "\uXXXX" at p[i], or -1 when p[i..] is not one. */
static long
u_escape(const unsigned char *p, size_t n, size_t i)
{
    if (i + 6 > n || p[i] != '\\' || p[i + 1] != 'u')
        return -1;
    long v = 0;
    for (size_t k = 2; k < 6; k++) {
        int h = sl_hex_digit(p[i + k]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

static size_t
utf8_put(unsigned long cp, unsigned char u[4])
{
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        u[0] = (unsigned char)(0xC0 | (cp >> 6));
        u[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    u[0] = (unsigned char)(0xF0 | (cp >> 18));
    u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

static const unsigned char simple_escapes[256] = {
    ['"'] = '"',  ['\\'] = '\\', ['/'] = '/',  ['b'] = '\b',
    ['f'] = '\f', ['n'] = '\n',  ['r'] = '\r', ['t'] = '\t',
};

/*
 * Decodes the unit at p[*i] of a string's inner bytes p[0..n) into u and
 * advances *i. Raw bytes pass through one at a time (UTF-8 stays as sent).
 * Returns the bytes written, 0 for a malformed escape.
 */
static size_t
next_unit(const unsigned char *p, size_t n, size_t *i, unsigned char u[4])
{
    size_t at = *i;
    if (p[at] != '\\') {
        u[0] = p[at];
        *i = at + 1;
        return 1;
    }
    if (at + 1 >= n)
        return 0;
    if (p[at + 1] != 'u') {
        if (simple_escapes[p[at + 1]] == 0)
            return 0;
        u[0] = simple_escapes[p[at + 1]];
        *i = at + 2;
        return 1;
    }
    long cu = u_escape(p, n, at);
    if (cu < 0)
        return 0;
    *i = at + 6;
    if (cu >= 0xD800 && cu <= 0xDBFF) {
        long lo = u_escape(p, n, at + 6);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            *i = at + 12;
            return utf8_put(0x10000 + (((unsigned long)cu - 0xD800) << 10) + ((unsigned long)lo - 0xDC00), u);
        }
        return utf8_put(0xFFFD, u);
    }
    if (cu >= 0xDC00 && cu <= 0xDFFF)
        return utf8_put(0xFFFD, u);
    return utf8_put((unsigned long)cu, u);
}

static bool
is_string_token(const char *body, sl_jspan_t span)
{
    return span.len >= 2 && body[span.off] == '"' && body[span.off + span.len - 1] == '"';
}

/* Whether the inner bytes p[0..n) of a string token decode to lit[0..lit_len). */
static bool
inner_equals(const unsigned char *p, size_t n, const char *lit, size_t lit_len)
{
    /* Without a backslash the bytes are the text: most names and values have none. */
    if (memchr(p, '\\', n) == NULL)
        return n == lit_len && memcmp(p, lit, n) == 0;
    size_t i = 0, at = 0;
    unsigned char u[4];
    while (i < n) {
        size_t k = next_unit(p, n, &i, u);
        if (k == 0 || at + k > lit_len || memcmp(lit + at, u, k) != 0)
            return false;
        at += k;
    }
    return at == lit_len;
}

bool
sl_jscan_string_equals(const char *body, sl_jspan_t span, const char *lit, size_t lit_len)
{
    if (!is_string_token(body, span))
        return false;
    return inner_equals((const unsigned char *)body + span.off + 1, span.len - 2, lit, lit_len);
}

bool
sl_jscan_string(const char *body, sl_jspan_t span, char *out, size_t cap, size_t *out_len)
{
    if (!is_string_token(body, span))
        return false;
    const unsigned char *p = (const unsigned char *)body + span.off + 1;
    size_t n = span.len - 2, i = 0, need = 0;
    if (memchr(p, '\\', n) == NULL) {
        if (n + 1 > cap)
            return false;
        memcpy(out, p, n);
        out[n] = '\0';
        *out_len = n;
        return true;
    }
    unsigned char u[4];
    /* Measured first so that a short buffer is left untouched. */
    while (i < n) {
        size_t k = next_unit(p, n, &i, u);
        if (k == 0)
            return false;
        need += k;
    }
    if (need + 1 > cap)
        return false;
    size_t at = 0;
    for (i = 0; i < n;) {
        size_t k = next_unit(p, n, &i, u);
        memcpy(out + at, u, k);
        at += k;
    }
    out[at] = '\0';
    *out_len = at;
    return true;
}

/* ---- the scanner ----------------------------------------------------------- */

/* Members the scan acts on, and where in the body each name counts. */
typedef enum {
    K_OTHER,
    K_MODEL,
    K_STREAM,
    K_PREVIOUS,
    K_MAX_TOKENS,
    K_MESSAGES,
    K_CONTENTS, /* Gemini: a missing role means user */
    K_ROLE,
    K_CONTENT,
    K_TYPE,
    K_SIGNATURE,
    K_ENCRYPTED,
    K_STREAM_OPTIONS,
    K_INCLUDE_USAGE,
    K_OUTPUT_CONFIG, /* Gemini generationConfig, Bedrock inferenceConfig: where their output cap is */
} key_kind_t;

typedef enum { SCOPE_TOP, SCOPE_ELEMENT, SCOPE_ANY, SCOPE_STREAM_OPTIONS, SCOPE_OUTPUT_CONFIG } scope_t;

static const struct {
    const char *name;
    size_t len;
    uint16_t tag; /* KEY_TAG of the name: every member name is looked up, most are rejected by it */
    key_kind_t kind;
    scope_t scope;
} known_keys[] = {
#define KEY_TAG(len, first) ((uint16_t)((len) << 8 | (first)))
#define NAME(s)             s, sizeof(s) - 1, KEY_TAG(sizeof(s) - 1, s[0])
    {NAME("model"), K_MODEL, SCOPE_TOP},
    {NAME("stream"), K_STREAM, SCOPE_TOP},
    {NAME("previous_response_id"), K_PREVIOUS, SCOPE_TOP},
    {NAME("max_tokens"), K_MAX_TOKENS, SCOPE_TOP},
    {NAME("max_completion_tokens"), K_MAX_TOKENS, SCOPE_TOP},
    {NAME("max_output_tokens"), K_MAX_TOKENS, SCOPE_TOP},
    {NAME("messages"), K_MESSAGES, SCOPE_TOP},
    {NAME("input"), K_MESSAGES, SCOPE_TOP},
    {NAME("contents"), K_CONTENTS, SCOPE_TOP},
    {NAME("role"), K_ROLE, SCOPE_ELEMENT},
    {NAME("content"), K_CONTENT, SCOPE_ELEMENT},
    {NAME("parts"), K_CONTENT, SCOPE_ELEMENT},
    {NAME("type"), K_TYPE, SCOPE_ANY},
    {NAME("signature"), K_SIGNATURE, SCOPE_ANY},
    {NAME("encrypted_content"), K_ENCRYPTED, SCOPE_ANY},
    {NAME("stream_options"), K_STREAM_OPTIONS, SCOPE_TOP},
    {NAME("include_usage"), K_INCLUDE_USAGE, SCOPE_STREAM_OPTIONS},
    {NAME("generationConfig"), K_OUTPUT_CONFIG, SCOPE_TOP},
    {NAME("inferenceConfig"), K_OUTPUT_CONFIG, SCOPE_TOP},
    {NAME("maxOutputTokens"), K_MAX_TOKENS, SCOPE_OUTPUT_CONFIG},
    {NAME("maxTokens"), K_MAX_TOKENS, SCOPE_OUTPUT_CONFIG},
#undef NAME
};
#define N_KNOWN_KEYS (sizeof(known_keys) / sizeof(known_keys[0]))
_Static_assert(N_KNOWN_KEYS <= 32, "a key's candidates are a 32-bit set");

/*
 * The known keys whose tag falls in each of 64 slots, as a set of indices:
 * a member name is compared with the one or two keys of its slot, not with
 * all of them. Built once, before main, from known_keys itself.
 */
#define TAG_SLOT(tag) ((((unsigned)(tag) >> 8) * 31u + ((unsigned)(tag)&0xFFu)) & 63u)
static uint32_t keys_in_slot[64];

__attribute__((constructor)) static void
index_known_keys(void)
{
    for (size_t k = 0; k < N_KNOWN_KEYS; k++)
        keys_in_slot[TAG_SLOT(known_keys[k].tag)] |= 1u << k;
}

enum { C_OBJECT = 1, C_ARRAY = 2 };
enum { F_THINKING = 1, F_SIGNATURE = 2 }; /* per object: both set = a signed thinking block */
enum { ROLE_UNKNOWN, ROLE_USER, ROLE_OTHER };

/* Which kind of value starts with a byte; 0 = none. */
enum { V_STRING = 1, V_NUMBER, V_TRUE, V_FALSE, V_NULL, V_OBJECT, V_ARRAY };
static const unsigned char value_start[256] = {
    ['"'] = V_STRING, ['-'] = V_NUMBER, ['0'] = V_NUMBER, ['1'] = V_NUMBER, ['2'] = V_NUMBER,
    ['3'] = V_NUMBER, ['4'] = V_NUMBER, ['5'] = V_NUMBER, ['6'] = V_NUMBER, ['7'] = V_NUMBER,
    ['8'] = V_NUMBER, ['9'] = V_NUMBER, ['t'] = V_TRUE,   ['f'] = V_FALSE,  ['n'] = V_NULL,
    ['{'] = V_OBJECT, ['['] = V_ARRAY,
};

static const unsigned char is_ws[256] = {[' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1};

/* Bytes a string may hold as they are: printable ASCII except '"' and '\\'. */
#define PLAIN(c)   ((c) >= 0x20 && (c) < 0x80 && (c) != '"' && (c) != '\\')
#define PLAIN4(c)  PLAIN(c), PLAIN(c + 1), PLAIN(c + 2), PLAIN(c + 3)
#define PLAIN16(c) PLAIN4(c), PLAIN4(c + 4), PLAIN4(c + 8), PLAIN4(c + 12)
#define PLAIN64(c) PLAIN16(c), PLAIN16(c + 16), PLAIN16(c + 32), PLAIN16(c + 48)
static const unsigned char plain[256] = {PLAIN64(0), PLAIN64(64), PLAIN64(128), PLAIN64(192)};
#undef PLAIN64
#undef PLAIN16
#undef PLAIN4
#undef PLAIN

static bool
is_plain(unsigned char c)
{
    return plain[c] != 0;
}

#define ONES 0x0101010101010101u
#define HIGH 0x8080808080808080u

/*
 * The bytes of 8 (in memory order, loaded little-endian) that are not plain,
 * as their high bits; 0 when all are. Strings are most of a body, so they
 * are skipped a word at a time (the classic has-zero-byte tricks): a set bit
 * may be a false alarm only above a real one, so the lowest is always real.
 */
static uint64_t
word_specials(uint64_t w)
{
    uint64_t quote = w ^ (ONES * '"'), backslash = w ^ (ONES * '\\');
    uint64_t below_space = (w - ONES * 0x20) & ~w;
    uint64_t is_quote = (quote - ONES) & ~quote, is_backslash = (backslash - ONES) & ~backslash;
    return (w | below_space | is_quote | is_backslash) & HIGH;
}

/* The first byte at or after i that is not plain, or len. */
static size_t
skip_plain(const unsigned char *b, size_t i, size_t len)
{
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w); /* the first byte lowest, as on little-endian machines */
#endif
        uint64_t m = word_specials(w);
        if (m != 0)
            return i + ((size_t)__builtin_ctzll(m) >> 3);
    }
    while (i < len && is_plain(b[i]))
        i++;
    return i;
}

typedef struct {
    const unsigned char *b;
    size_t len, pos;
    unsigned depth; /* open containers; the body's object is level 1 */
    uint8_t type[SL_JSCAN_MAX_DEPTH];
    uint8_t flags[SL_JSCAN_MAX_DEPTH];
    uint8_t key[SL_JSCAN_MAX_DEPTH]; /* per object: the kind of the member whose value is being read */
    size_t open_off[SL_JSCAN_MAX_DEPTH];
    /* The conversation array (messages / input / contents) while it is open. */
    unsigned convo_depth; /* its level, 0 = not inside one */
    bool missing_role_is_user, convo_found;
    int elem_role;
    sl_jspan_t elem_content;
    sl_jscan_t *out;
} scan_t;

static bool
fail(scan_t *s, sl_jscan_err_t err, size_t off)
{
    s->out->err = err;
    s->out->err_off = off;
    return false;
}

static void
skip_ws(scan_t *s)
{
    while (s->pos < s->len && is_ws[s->b[s->pos]])
        s->pos++;
}

/* Scans the string at pos (a '"'); leaves pos after the closing quote. */
static bool
scan_string(scan_t *s, bool *escaped)
{
    const unsigned char *b = s->b;
    size_t i = s->pos + 1, len = s->len;
    *escaped = false;
    for (;;) {
        i = skip_plain(b, i, len);
        if (i >= len)
            return fail(s, SL_JSCAN_E_TRUNCATED, len);
        unsigned char c = b[i];
        if (c == '"')
            break;
        if (c == '\\') {
            *escaped = true;
            if (i + 1 >= len)
                return fail(s, SL_JSCAN_E_TRUNCATED, len);
            if (b[i + 1] != 'u') {
                if (simple_escapes[b[i + 1]] == 0)
                    return fail(s, SL_JSCAN_E_BAD_ESCAPE, i);
                i += 2;
                continue;
            }
            for (size_t k = 2; k < 6; k++) {
                if (i + k >= len)
                    return fail(s, SL_JSCAN_E_TRUNCATED, len);
                if (sl_hex_digit(b[i + k]) < 0)
                    return fail(s, SL_JSCAN_E_BAD_ESCAPE, i);
            }
            i += 6;
            continue;
        }
        if (c < 0x20)
            return fail(s, SL_JSCAN_E_CONTROL_CHAR, i);
        size_t n = sl_utf8_len(b + i, len - i);
        if (n == SL_UTF8_CUT)
            return fail(s, SL_JSCAN_E_TRUNCATED, len);
        if (n == 0)
            return fail(s, SL_JSCAN_E_BAD_UTF8, i);
        i += n;
    }
    s->pos = i + 1;
    return true;
}

static bool
is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* Scans the number at pos; leaves pos after it. */
static bool
scan_number(scan_t *s)
{
    const unsigned char *b = s->b;
    size_t i = s->pos, len = s->len;
    if (b[i] == '-')
        i++;
    if (i >= len)
        return fail(s, SL_JSCAN_E_TRUNCATED, len);
    if (b[i] == '0') {
        i++;
        if (i < len && is_digit(b[i]))
            return fail(s, SL_JSCAN_E_BAD_NUMBER, i);
    } else if (is_digit(b[i])) {
        while (i < len && is_digit(b[i]))
            i++;
    } else {
        return fail(s, SL_JSCAN_E_BAD_NUMBER, i);
    }
    if (i < len && b[i] == '.') {
        i++;
        if (i >= len)
            return fail(s, SL_JSCAN_E_TRUNCATED, len);
        if (!is_digit(b[i]))
            return fail(s, SL_JSCAN_E_BAD_NUMBER, i);
        while (i < len && is_digit(b[i]))
            i++;
    }
    if (i < len && (b[i] == 'e' || b[i] == 'E')) {
        i++;
        if (i < len && (b[i] == '+' || b[i] == '-'))
            i++;
        if (i >= len)
            return fail(s, SL_JSCAN_E_TRUNCATED, len);
        if (!is_digit(b[i]))
            return fail(s, SL_JSCAN_E_BAD_NUMBER, i);
        while (i < len && is_digit(b[i]))
            i++;
    }
    s->pos = i;
    return true;
}

static bool
scan_literal(scan_t *s, const char *lit, size_t n)
{
    size_t avail = s->len - s->pos;
    if (memcmp(s->b + s->pos, lit, avail < n ? avail : n) != 0)
        return fail(s, SL_JSCAN_E_UNEXPECTED, s->pos);
    if (avail < n)
        return fail(s, SL_JSCAN_E_TRUNCATED, s->len);
    s->pos += n;
    return true;
}

/* A plain non-negative integer that fits int64, as the output cap needs; false for anything else. */
static bool
parse_count(const unsigned char *p, size_t n, int64_t *v)
{
    int64_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(p[i]) || acc > (INT64_MAX - (p[i] - '0')) / 10)
            return false;
        acc = acc * 10 + (p[i] - '0');
    }
    *v = acc;
    return n > 0;
}

static key_kind_t
classify_key(const scan_t *s, size_t off, size_t n, bool escaped)
{
    bool in_element = s->convo_depth != 0 && s->depth == s->convo_depth + 1;
    /* Every member name passes here: only the keys of its length and first byte are looked at. */
    if (!escaped && n >= 256)
        return K_OTHER;
    uint16_t tag = escaped ? 0 : KEY_TAG(n, s->b[off]);
    uint32_t candidates = escaped ? UINT32_MAX >> (32 - N_KNOWN_KEYS) : keys_in_slot[TAG_SLOT(tag)];
    for (; candidates != 0; candidates &= candidates - 1) {
        size_t k = (size_t)__builtin_ctz(candidates);
        if (!escaped && tag != known_keys[k].tag)
            continue;
        scope_t sc = known_keys[k].scope;
        if ((sc == SCOPE_TOP && s->depth != 1) || (sc == SCOPE_ELEMENT && !in_element))
            continue;
        if (sc == SCOPE_STREAM_OPTIONS && !(s->depth == 2 && s->key[0] == K_STREAM_OPTIONS))
            continue;
        if (sc == SCOPE_OUTPUT_CONFIG && !(s->depth == 2 && s->key[0] == K_OUTPUT_CONFIG))
            continue;
        bool eq = escaped ? inner_equals(s->b + off, n, known_keys[k].name, known_keys[k].len)
                          : memcmp(s->b + off, known_keys[k].name, n) == 0;
        if (eq)
            return known_keys[k].kind;
    }
    return K_OTHER;
}

/* The member kind a value at the current level belongs to; K_OTHER for array elements. */
static key_kind_t
member_kind(const scan_t *s)
{
    if (s->depth == 0 || s->type[s->depth - 1] != C_OBJECT)
        return K_OTHER;
    return (key_kind_t)s->key[s->depth - 1];
}

static void
start_conversation(scan_t *s, key_kind_t k)
{
    s->out->first_user = (sl_jspan_t){0};
    s->convo_found = false;
    s->missing_role_is_user = k == K_CONTENTS;
}

/*
 * A value of kind v spanning [off, off + n) has been read as a member (or
 * element) of the current level; containers arrive here when they close.
 */
static bool
on_value(scan_t *s, int v, size_t off, size_t n)
{
    sl_jscan_t *out = s->out;
    sl_jspan_t span = {off, n};
    bool str = v == V_STRING;
    switch (member_kind(s)) {
    case K_MODEL:
        if (!str && v != V_NULL)
            return fail(s, SL_JSCAN_E_MODEL_TYPE, off);
        out->model = str ? span : (sl_jspan_t){0};
        break;
    case K_PREVIOUS:
        if (!str && v != V_NULL)
            return fail(s, SL_JSCAN_E_PREVIOUS_TYPE, off);
        out->previous_response_id = str ? span : (sl_jspan_t){0};
        break;
    case K_STREAM:
        if (v != V_TRUE && v != V_FALSE && v != V_NULL)
            return fail(s, SL_JSCAN_E_STREAM_TYPE, off);
        out->has_stream = v != V_NULL;
        out->stream = v == V_TRUE;
        break;
    case K_MAX_TOKENS:
        out->has_max_tokens = v == V_NUMBER && parse_count(s->b + off, n, &out->max_tokens);
        if (!out->has_max_tokens)
            out->max_tokens = 0;
        break;
    case K_MESSAGES:
    case K_CONTENTS:
        /* Arrays were handled as they opened; a plain string is Responses' one-message input. */
        if (v != V_ARRAY)
            out->first_user = str ? span : (sl_jspan_t){0};
        break;
    case K_ROLE:
        s->elem_role =
            str && sl_jscan_string_equals((const char *)s->b, span, "user", 4) ? ROLE_USER : ROLE_OTHER;
        break;
    case K_CONTENT:
        s->elem_content = span;
        break;
    case K_TYPE:
        if (str && sl_jscan_string_equals((const char *)s->b, span, "thinking", 8))
            s->flags[s->depth - 1] |= F_THINKING;
        else
            s->flags[s->depth - 1] &= (uint8_t)~F_THINKING;
        break;
    case K_SIGNATURE:
        if (str && n > 2)
            s->flags[s->depth - 1] |= F_SIGNATURE;
        else
            s->flags[s->depth - 1] &= (uint8_t)~F_SIGNATURE;
        break;
    case K_ENCRYPTED:
        out->encrypted_content |= str && n > 2;
        break;
    case K_STREAM_OPTIONS:
        out->stream_options = v == V_OBJECT ? span : (sl_jspan_t){0};
        if (v != V_OBJECT)
            out->include_usage = (sl_jspan_t){0};
        break;
    case K_INCLUDE_USAGE:
        out->include_usage = span;
        break;
    case K_OUTPUT_CONFIG:
        break;
    case K_OTHER:
        break;
    }
    return true;
}

static bool
open_container(scan_t *s, int v)
{
    if (s->depth == SL_JSCAN_MAX_DEPTH)
        return fail(s, SL_JSCAN_E_TOO_DEEP, s->pos);
    key_kind_t k = member_kind(s);
    /* Wrongly typed fields fail where the value starts, not where it ends. */
    if (k == K_MODEL)
        return fail(s, SL_JSCAN_E_MODEL_TYPE, s->pos);
    if (k == K_PREVIOUS)
        return fail(s, SL_JSCAN_E_PREVIOUS_TYPE, s->pos);
    if (k == K_STREAM)
        return fail(s, SL_JSCAN_E_STREAM_TYPE, s->pos);
    /* A later stream_options replaces an earlier one, include_usage and all. */
    if (k == K_STREAM_OPTIONS)
        s->out->include_usage = (sl_jspan_t){0};
    if ((k == K_MESSAGES || k == K_CONTENTS) && v == V_ARRAY) {
        start_conversation(s, k);
        s->convo_depth = s->depth + 1;
    }
    if (v == V_OBJECT && s->convo_depth != 0 && s->depth == s->convo_depth) {
        s->elem_role = ROLE_UNKNOWN;
        s->elem_content = (sl_jspan_t){0};
    }
    unsigned d = s->depth++;
    s->type[d] = v == V_OBJECT ? C_OBJECT : C_ARRAY;
    s->flags[d] = 0;
    s->key[d] = K_OTHER;
    s->open_off[d] = s->pos;
    s->pos++;
    return true;
}

/* Closes the container at the current level (pos at its closing bracket) and reports it as a value. */
static bool
close_container(scan_t *s)
{
    unsigned d = --s->depth;
    size_t off = s->open_off[d];
    int v = s->type[d] == C_OBJECT ? V_OBJECT : V_ARRAY;
    s->pos++;
    if (v == V_OBJECT && (s->flags[d] & (F_THINKING | F_SIGNATURE)) == (F_THINKING | F_SIGNATURE))
        s->out->thinking_signature = true;
    if (s->convo_depth != 0 && d == s->convo_depth) {
        /* An element object of the conversation array ends. */
        bool user = s->elem_role == ROLE_USER || (s->elem_role == ROLE_UNKNOWN && s->missing_role_is_user);
        if (v == V_OBJECT && !s->convo_found && user && s->elem_content.len != 0) {
            s->out->first_user = s->elem_content;
            s->convo_found = true;
        }
    } else if (s->convo_depth != 0 && d + 1 == s->convo_depth) {
        s->convo_depth = 0;
    }
    return s->depth == 0 || on_value(s, v, off, s->pos - off);
}

/* Reads one value at pos: a scalar whole, or the opening of a container. */
static bool
scan_value(scan_t *s, bool *opened)
{
    skip_ws(s);
    *opened = false;
    if (s->pos >= s->len)
        return fail(s, SL_JSCAN_E_TRUNCATED, s->len);
    size_t off = s->pos;
    int v = value_start[s->b[off]];
    bool ok, escaped;
    switch (v) {
    case V_OBJECT:
    case V_ARRAY:
        *opened = true;
        return open_container(s, v);
    case V_STRING:
        ok = scan_string(s, &escaped);
        break;
    case V_NUMBER:
        ok = scan_number(s);
        break;
    case V_TRUE:
        ok = scan_literal(s, "true", 4);
        break;
    case V_FALSE:
        ok = scan_literal(s, "false", 5);
        break;
    case V_NULL:
        ok = scan_literal(s, "null", 4);
        break;
    default:
        return fail(s, SL_JSCAN_E_UNEXPECTED, off);
    }
    return ok && on_value(s, v, off, s->pos - off);
}

/* Reads `"name" :` at pos and records the member's kind for its value. */
static bool
scan_key(scan_t *s)
{
    skip_ws(s);
    if (s->pos >= s->len)
        return fail(s, SL_JSCAN_E_TRUNCATED, s->len);
    if (s->b[s->pos] != '"')
        return fail(s, SL_JSCAN_E_UNEXPECTED, s->pos);
    size_t off = s->pos;
    bool escaped;
    if (!scan_string(s, &escaped))
        return false;
    s->key[s->depth - 1] = (uint8_t)classify_key(s, off + 1, s->pos - off - 2, escaped);
    skip_ws(s);
    if (s->pos >= s->len)
        return fail(s, SL_JSCAN_E_TRUNCATED, s->len);
    if (s->b[s->pos] != ':')
        return fail(s, SL_JSCAN_E_UNEXPECTED, s->pos);
    s->pos++;
    return true;
}

/*
 * The grammar as a loop instead of recursion: after a container opens, the
 * next token may close it at once; after a value, a ',' or the closing
 * bracket of the current level must follow.
 */
static bool
scan_body(scan_t *s)
{
    skip_ws(s);
    if (s->pos >= s->len || s->b[s->pos] != '{')
        return fail(s, SL_JSCAN_E_NOT_OBJECT, s->pos);
    bool opened = true;
    if (!open_container(s, V_OBJECT))
        return false;
    while (s->depth > 0) {
        if (opened) {
            skip_ws(s);
            if (s->pos >= s->len)
                return fail(s, SL_JSCAN_E_TRUNCATED, s->len);
            unsigned char closer = s->type[s->depth - 1] == C_OBJECT ? '}' : ']';
            if (s->b[s->pos] == closer) {
                if (!close_container(s))
                    return false;
                opened = false;
                continue;
            }
        } else {
            skip_ws(s);
            if (s->pos >= s->len)
                return fail(s, SL_JSCAN_E_TRUNCATED, s->len);
            unsigned char c = s->b[s->pos];
            unsigned char closer = s->type[s->depth - 1] == C_OBJECT ? '}' : ']';
            if (c == closer) {
                if (!close_container(s))
                    return false;
                continue;
            }
            if (c != ',')
                return fail(s, SL_JSCAN_E_UNEXPECTED, s->pos);
            s->pos++;
        }
        if (s->type[s->depth - 1] == C_OBJECT && !scan_key(s))
            return false;
        if (!scan_value(s, &opened))
            return false;
    }
    skip_ws(s);
    if (s->pos != s->len)
        return fail(s, SL_JSCAN_E_TRAILING, s->pos);
    return true;
}

bool
sl_jscan(const char *body, size_t len, sl_jscan_t *out)
{
    scan_t s;
    s.b = (const unsigned char *)body;
    s.len = len;
    s.pos = 0;
    s.depth = 0;
    s.convo_depth = 0;
    s.missing_role_is_user = s.convo_found = false;
    s.elem_role = ROLE_UNKNOWN;
    s.elem_content = (sl_jspan_t){0};
    s.out = out;
    *out = (sl_jscan_t){0};
    if (scan_body(&s))
        return true;
    sl_jscan_err_t err = out->err;
    size_t off = out->err_off;
    *out = (sl_jscan_t){.err = err, .err_off = off};
    return false;
}

/* ---- text of a message ---------------------------------------------------- */

/* The end (one past the closing quote) of the valid string token starting at b[i]. */
static size_t
string_end(const char *b, size_t i, size_t end)
{
    for (i++; i < end && b[i] != '"'; i++) {
        if (b[i] == '\\')
            i++;
    }
    return i + 1;
}

static size_t
skip_ws_in(const char *b, size_t i, size_t end)
{
    while (i < end && is_ws[(unsigned char)b[i]])
        i++;
    return i;
}

bool
sl_jscan_next_text(const char *body, sl_jspan_t span, size_t *cursor, sl_jspan_t *text)
{
    if (span.len == 0)
        return false;
    if (body[span.off] == '"') {
        if (*cursor != 0)
            return false;
        *cursor = span.len;
        *text = span;
        return true;
    }
    size_t end = span.off + span.len;
    /*
     * In valid JSON a string followed by ':' is a member name, so hopping
     * from string to string finds every `"text": "…"` without tracking
     * nesting.
     */
    for (size_t i = span.off + *cursor; i < end; i++) {
        if (body[i] != '"')
            continue;
        size_t j = string_end(body, i, end);
        size_t colon = skip_ws_in(body, j, end);
        if (colon >= end || body[colon] != ':') {
            i = j - 1;
            continue;
        }
        size_t v = skip_ws_in(body, colon + 1, end);
        bool is_text = sl_jscan_string_equals(body, (sl_jspan_t){i, j - i}, "text", 4);
        if (is_text && v < end && body[v] == '"') {
            size_t ve = string_end(body, v, end);
            *cursor = ve - span.off;
            *text = (sl_jspan_t){v, ve - v};
            return true;
        }
        i = v - 1;
    }
    *cursor = span.len;
    return false;
}
