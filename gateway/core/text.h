/* Text helpers shared by the parsers (hex digits, UTF-8 sequences, decimals, reasons), and local times. */
#ifndef SL_TEXT_H
#define SL_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "core/tz.h"

/* The value of a hex digit (0-9, a-f, A-F), or -1. */
int sl_hex_digit(int c);

/* v in decimal at out (SL_U64_DECIMAL_MAX bytes at most, no NUL); returns the digits written. */
#define SL_U64_DECIMAL_MAX 20
size_t sl_u64_decimal(char *out, uint64_t v);

/* sl_utf8_len's answer for a sequence that is valid as far as it goes but runs past the end. */
#define SL_UTF8_CUT SIZE_MAX

/*
 * The length of the well-formed UTF-8 sequence at s[0..n) (RFC 3629: no
 * overlongs, no surrogates, nothing past U+10FFFF): 1 for ASCII (NUL
 * included), 2 to 4 otherwise; 0 when it is not one; SL_UTF8_CUT when n
 * ends it early. n must be at least 1.
 */
size_t sl_utf8_len(const unsigned char *s, size_t n);

/*
 * A plain non-negative decimal ("20", "0.5", "1.000001") in millionths: at
 * most 6 fractional digits (a smaller unit is refused, never rounded).
 * Returns 0 with *out set; -1 when s is not such a number; -2 when its
 * value is larger than max.
 */
int sl_decimal_millionths(const char *s, int64_t max, int64_t *out);

/*
 * Writes a one-line reason, printf-style, into err[0..err_size), cut to
 * size; nothing when err is NULL or err_size is 0. For the "err, err_size"
 * out-parameters of parsers and loaders.
 */
void sl_text_reason(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * A wall-clock time (ms since the epoch) as "2026-11-29 19:47 CET" in zone
 * tz; the milliseconds as a number when tz cannot convert it. Always
 * NUL-terminated, cut to size.
 */
void sl_text_local_time(const sl_tz_t *tz, int64_t wall_ms, char *out, size_t size);

#endif
