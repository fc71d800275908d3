#include "core/trace_context.h"

#include <string.h>

static int
lower_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* n bytes from 2n lowercase hex digits; false on any other character. */
static bool
parse_hex(const char *s, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int hi = lower_hex_digit(s[2 * i]), lo = lower_hex_digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static bool
all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i] != 0)
            return false;
    }
    return true;
}

bool
sl_traceparent_parse(const char *s, size_t n, sl_trace_parent_t *out)
{
    if (n < SL_TRACEPARENT_LEN)
        return false;
    uint8_t version, flags;
    sl_trace_parent_t p;
    if (!parse_hex(s, 1, &version) || version == 0xff || s[2] != '-' || !parse_hex(s + 3, 16, p.trace_id) ||
        s[35] != '-' || !parse_hex(s + 36, 8, p.span_id) || s[52] != '-' || !parse_hex(s + 53, 1, &flags))
        return false;
    /* Version 00 is exactly this long; a later version may add fields after a '-'. */
    if (n > SL_TRACEPARENT_LEN && (version == 0 || s[SL_TRACEPARENT_LEN] != '-'))
        return false;
    if (all_zero(p.trace_id, 16) || all_zero(p.span_id, 8))
        return false;
    p.sampled = (flags & 1) != 0;
    *out = p;
    return true;
}

/* Every byte's two hex digits: a span's ids are written for each span exported. */
#define HEX_ROW(h)                                                                                           \
    h "0", h "1", h "2", h "3", h "4", h "5", h "6", h "7", h "8", h "9", h "a", h "b", h "c", h "d", h "e", \
        h "f"
static const char hex_pairs[256][3] = {
    HEX_ROW("0"), HEX_ROW("1"), HEX_ROW("2"), HEX_ROW("3"), HEX_ROW("4"), HEX_ROW("5"),
    HEX_ROW("6"), HEX_ROW("7"), HEX_ROW("8"), HEX_ROW("9"), HEX_ROW("a"), HEX_ROW("b"),
    HEX_ROW("c"), HEX_ROW("d"), HEX_ROW("e"), HEX_ROW("f"),
};

void
sl_trace_hex(const uint8_t *bytes, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        memcpy(out + 2 * i, hex_pairs[bytes[i]], 2);
    out[2 * n] = '\0';
}

void
sl_traceparent_format(const uint8_t trace_id[16], const uint8_t span_id[8], bool sampled,
                      char out[SL_TRACEPARENT_LEN + 1])
{
    memcpy(out, "00-", 3);
    sl_trace_hex(trace_id, 16, out + 3);
    out[35] = '-';
    sl_trace_hex(span_id, 8, out + 36);
    out[52] = '-';
    memcpy(out + 53, sampled ? "01" : "00", 3);
}

bool
sl_trace_ratio_sampled(const uint8_t trace_id[16], uint32_t sample_ppm)
{
    if (sample_ppm >= 1000000)
        return true;
    uint64_t r = 0;
    for (int i = 8; i < 16; i++)
        r = r << 8 | trace_id[i];
    /* r / 2^64 < ppm / 10^6, to within one part in 10^13. */
    return r < (UINT64_MAX / 1000000) * sample_ppm;
}

/* splitmix64's finaliser: a bijection, so distinct inputs give distinct ids. */
static uint64_t
mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void
sl_trace_attempt_span_id(const uint8_t request_span[8], size_t index, uint8_t out[8])
{
    uint64_t base = 0;
    for (int i = 0; i < 8; i++)
        base = base << 8 | request_span[i];
    uint64_t id = mix64(base + 1 + (uint64_t)index);
    if (id == 0 || id == base)
        id = mix64(id ^ 0x9e3779b97f4a7c15ULL) | 1;
    for (int i = 7; i >= 0; i--) {
        out[i] = (uint8_t)id;
        id >>= 8;
    }
}
