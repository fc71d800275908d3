/*
 * Retry hints: how long an upstream asked us to wait, read from its answer
 * (behaviour.md §5 and §6, formats.md). Pure: no IO, no clock (the wall time
 * an HTTP-date is measured against is a parameter), no allocation, bounded
 * byte scans instead of a JSON parse.
 *
 * Every hint is whole milliseconds, at least 1, at most SL_HINT_MAX_MS; -1
 * means "no hint" (absent, garbage, or under its source's threshold, which
 * counts as missing). A fraction is read to six decimals of its unit (any
 * further non-zero digit counts as one more millionth) and the result is
 * rounded up to the next millisecond, so a pause never ends before the
 * upstream asked. Oversized figures ("99999999999999999999") are capped,
 * never overflowed.
 *
 * Sources, in the order sl_hint_find consults them (the first one present
 * wins, see there for why):
 *
 *   1. header `retry-after-ms`: a decimal number of milliseconds ("1500",
 *      "1500.5"); under 1 ms counts as missing.
 *   2. header `Retry-After`: delta-seconds, fractions allowed ("20", "1.5"),
 *      or an HTTP-date (IMF-fixdate, RFC 850, asctime; RFC 9110 §5.6.7)
 *      taken relative to now; under 1 s, or a date not at least 1 s in the
 *      future, counts as missing.
 *   3. the error body (an HTTP error body or an in-stream error event's
 *      data), see sl_hint_from_body.
 */
#ifndef SL_HINTS_H
#define SL_HINTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dialect.h"

/*
 * The largest hint reported: one year. Far beyond any deadline (wait_secs
 * <= 600) or pause cap (rate_limit_max_pause_secs <= 86400), and small
 * enough that now + hint cannot overflow for any wall-clock now.
 */
#define SL_HINT_MAX_MS ((int64_t)365 * 24 * 3600 * 1000)

/* Bytes of an error body that are scanned; matches the 64 KiB read cap of behaviour.md §4. */
#define SL_HINT_MAX_BODY (64 * 1024)

typedef enum {
    SL_HINT_NONE = 0,
    SL_HINT_RETRY_AFTER_MS, /* header retry-after-ms */
    SL_HINT_RETRY_AFTER,    /* header Retry-After: seconds or an HTTP-date */
    SL_HINT_BODY,           /* Gemini retryDelay or a "try again in …" phrase in the error body */
    SL_HINT_SOURCE_COUNT
} sl_hint_source_t;

typedef struct {
    int64_t ms; /* -1 when source is SL_HINT_NONE */
    sl_hint_source_t source;
} sl_hint_t;

/*
 * A retry-after-ms value (not NUL-terminated): optional spaces/tabs, digits
 * with an optional ".digits" fraction, optional spaces/tabs, nothing else.
 * Returns milliseconds (rounded up, capped), or -1 for garbage (signs,
 * units, a bare dot, an empty value) or a value under 1 ms.
 */
int64_t sl_hint_parse_retry_after_ms(const char *value, size_t len);

/*
 * Parses an HTTP-date (not NUL-terminated, surrounding spaces/tabs allowed)
 * in any of its three forms:
 *
 *   IMF-fixdate  Sun, 06 Nov 1994 08:49:37 GMT
 *   RFC 850      Sunday, 06-Nov-94 08:49:37 GMT
 *   asctime      Sun Nov  6 08:49:37 1994
 *
 * Names of days and months and "GMT" are matched case-insensitively; the
 * day name must be a real one, short or long in any of the forms, but is
 * not checked against the date. Fields are range-checked (a 31 Feb or a
 * 25th hour is garbage; second 60, a leap second, is allowed). A two-digit
 * RFC 850 year is read in the century that puts it at most 50 years after
 * now_wall_ms's year (RFC 9110 §5.6.7). Returns true and stores the Unix
 * time in milliseconds in *out_ms, or returns false with *out_ms untouched.
 */
bool sl_http_date_parse(const char *value, size_t len, int64_t now_wall_ms, int64_t *out_ms);

/*
 * A Retry-After value (not NUL-terminated): delta-seconds (as
 * retry-after-ms above, but seconds) or an HTTP-date measured from
 * now_wall_ms (Unix time, ms). Returns milliseconds (rounded up, capped),
 * or -1 for garbage, under 1 s, or a date less than 1 s ahead of now.
 */
int64_t sl_hint_parse_retry_after(const char *value, size_t len, int64_t now_wall_ms);

/*
 * The hint in an upstream's response headers: retry-after-ms when it gives
 * a hint, else Retry-After (each the first header of its name; names in any
 * case). Returns milliseconds, or -1 when neither gives one. headers is only
 * read.
 */
int64_t sl_hint_from_headers(const sl_headers_t *headers, int64_t now_wall_ms);

/*
 * The hint in an error body (JSON or not; not NUL-terminated; NULL with len
 * 0 is fine; only the first SL_HINT_MAX_BODY bytes are read). Accepted, in
 * this order, the first usable one winning:
 *
 *   1. a JSON member named exactly "retryDelay" (Gemini's
 *      error.details[].retryDelay; found anywhere, but only as a member
 *      name, not inside another string) whose value is a string of a
 *      decimal number of seconds with the suffix `s`: "33s", "1.5s".
 *   2. a phrase "try again in", "retry in" or "retry after" (any case, not
 *      preceded by a letter), then spaces, then a duration:
 *      - compact: one or more <number><unit> with no spaces, units h, m,
 *        s, ms: "11.054s", "250ms", "1m30s", "6m0s" (OpenAI, Gemini's
 *        "Please retry in 33.168150417s.");
 *      - spelled: <number>, an optional space, and one of ms, msec(s),
 *        millisecond(s), s, sec(s), second(s), m, min(s), minute(s), h,
 *        hr(s), hour(s): "20 seconds" (Azure's "Please retry after 20
 *        seconds.").
 *      Unit words are matched case-insensitively and must end at a
 *      non-letter. A number without a unit ("retry after 20.") or no
 *      number ("try again later") is not a hint.
 *
 * A delay of zero counts as missing and the scan goes on (the spec sets no
 * threshold for bodies; anything above zero rounds up to at least 1 ms).
 * Returns milliseconds (rounded up, capped), or -1.
 */
int64_t sl_hint_from_body(const char *body, size_t len);

/*
 * The hint of an upstream's answer: the first present of retry-after-ms,
 * Retry-After, the body, in that order — the order the official SDKs read
 * them in. The sources are not combined by taking the largest: the headers
 * are the provider's machine-readable statement and retry-after-ms is the
 * exact form of the figure Retry-After rounds up to whole seconds (Anthropic
 * sends both), so the largest would always discard that precision; the
 * body's prose usually repeats the header and is only a fallback for
 * upstreams that send no header (Gemini, OpenAI's "try again in").
 *
 * headers may be NULL (an in-stream error event has none of its own); body
 * as for sl_hint_from_body. Returns {ms, source}, or {-1, SL_HINT_NONE}.
 */
sl_hint_t sl_hint_find(const sl_headers_t *headers, const char *body, size_t body_len, int64_t now_wall_ms);

/* "retry-after-ms", "retry-after", "body"; "" for SL_HINT_NONE. Never NULL for a valid source. */
const char *sl_hint_source_name(sl_hint_source_t source);

#endif
