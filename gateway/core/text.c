#include "text.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

size_t
sl_u64_decimal(char *out, uint64_t v)
{
    char digits[SL_U64_DECIMAL_MAX];
    size_t n = 0;
    do {
        digits[sizeof(digits) - ++n] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    memcpy(out, digits + sizeof(digits) - n, n);
    return n;
}

int
sl_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t
sl_utf8_len(const unsigned char *s, size_t n)
{
    /* Lead byte ranges, their length, and the narrowed range of the second byte (table 3-7). */
    static const struct {
        unsigned char lead_lo, lead_hi, second_lo, second_hi, len;
    } forms[] = {
        {0xc2, 0xdf, 0x80, 0xbf, 2}, {0xe0, 0xe0, 0xa0, 0xbf, 3}, {0xe1, 0xec, 0x80, 0xbf, 3},
        {0xed, 0xed, 0x80, 0x9f, 3}, {0xee, 0xef, 0x80, 0xbf, 3}, {0xf0, 0xf0, 0x90, 0xbf, 4},
        {0xf1, 0xf3, 0x80, 0xbf, 4}, {0xf4, 0xf4, 0x80, 0x8f, 4},
    };
    if (s[0] < 0x80)
        return 1;
    for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
        if (s[0] < forms[f].lead_lo || s[0] > forms[f].lead_hi)
            continue;
        for (size_t k = 1; k < forms[f].len; k++) {
            if (k >= n)
                return SL_UTF8_CUT;
            unsigned char lo = k == 1 ? forms[f].second_lo : 0x80, hi = k == 1 ? forms[f].second_hi : 0xbf;
            if (s[k] < lo || s[k] > hi)
                return 0;
        }
        return forms[f].len;
    }
    return 0;
}

void
sl_text_reason(char *err, size_t err_size, const char *fmt, ...)
{
    if (err == NULL || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

void
sl_text_local_time(const sl_tz_t *tz, int64_t wall_ms, char *out, size_t size)
{
    sl_tz_local_t l;
    if (sl_tz_local(tz, wall_ms / 1000, &l))
        snprintf(out, size, "%04lld-%02d-%02d %02d:%02d %s", (long long)l.year, l.month, l.mday, l.hour,
                 l.min, l.abbr);
    else
        snprintf(out, size, "%lld", (long long)wall_ms);
}

int
sl_decimal_millionths(const char *s, int64_t max, int64_t *out)
{
    int64_t whole = 0, frac = 0;
    int frac_digits = -1; /* -1: no point yet */
    bool any_digit = false;
    for (; *s; s++) {
        if (*s == '.' && frac_digits < 0) {
            frac_digits = 0;
        } else if (*s >= '0' && *s <= '9') {
            any_digit = true;
            if (frac_digits < 0) {
                if (whole > (max / 1000000 - 9) / 10)
                    return -2;
                whole = whole * 10 + (*s - '0');
            } else if (++frac_digits <= 6) {
                frac = frac * 10 + (*s - '0');
            } else {
                return -1;
            }
        } else {
            return -1;
        }
    }
    if (!any_digit)
        return -1;
    for (int d = frac_digits < 0 ? 0 : frac_digits; d < 6; d++)
        frac *= 10;
    if (whole * 1000000 + frac > max)
        return -2;
    *out = whole * 1000000 + frac;
    return 0;
}
