/*
 * Retry hints and the failure classifier on upstream answers.
 *
 * Input: 8 bytes of wall-clock now (ms, any int64), 1 byte source, 1 byte
 * dialect, 2 bytes status, then lines: the retry-after-ms value, the
 * Retry-After value, and the rest is the error body (also the classifier's
 * code when it is short).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/classify.h"
#include "core/hints.h"
#include "fuzz_check.h"

static bool
hint_ok(int64_t ms, int64_t min)
{
    return ms == -1 || (ms >= min && ms <= SL_HINT_MAX_MS);
}

/* The next line of p[*off..len) (without its \n). */
static const char *
next_line(const char *p, size_t len, size_t *off, size_t *line_len)
{
    const char *start = p + *off;
    const char *nl = *off < len ? memchr(start, '\n', len - *off) : NULL;
    *line_len = nl ? (size_t)(nl - start) : len - *off;
    *off += *line_len + (nl ? 1 : 0);
    return start;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 12)
        return 0;
    uint64_t now_bits = 0;
    for (int i = 0; i < 8; i++)
        now_bits = now_bits << 8 | data[i];
    int64_t now;
    memcpy(&now, &now_bits, sizeof now);
    sl_failure_source_t source = (sl_failure_source_t)(data[8] % SL_FAILURE_SOURCE_COUNT);
    sl_dialect_t dialect = (sl_dialect_t)(data[9] % SL_DIALECT_COUNT);
    int status = data[10] << 8 | data[11];
    const char *p = (const char *)data + 12;
    size_t len = size - 12, off = 0, ms_len, ra_len;
    const char *ms_value = next_line(p, len, &off, &ms_len);
    const char *ra_value = next_line(p, len, &off, &ra_len);
    const char *body = p + off;
    size_t body_len = len - off;

    /* Each value parser on its own line, as an exact-size copy. */
    char *ms_copy = malloc(ms_len ? ms_len : 1), *ra_copy = malloc(ra_len ? ra_len : 1);
    memcpy(ms_copy, ms_value, ms_len);
    memcpy(ra_copy, ra_value, ra_len);
    CHECK(hint_ok(sl_hint_parse_retry_after_ms(ms_copy, ms_len), 1));
    CHECK(hint_ok(sl_hint_parse_retry_after(ra_copy, ra_len, now), 1000));
    int64_t date = 0;
    (void)sl_http_date_parse(ra_copy, ra_len, now, &date);
    int64_t from_body = sl_hint_from_body(body, body_len);
    CHECK(hint_ok(from_body, 1));

    sl_header_t items[] = {
        {"retry-after-ms", 14, ms_copy, ms_len},
        {"Retry-After", 11, ra_copy, ra_len},
    };
    sl_header_array_t array = {items, 2};
    sl_headers_t headers = sl_headers_of_array(&array);
    int64_t from_headers = sl_hint_from_headers(&headers, now);
    CHECK(hint_ok(from_headers, 1));
    sl_hint_t hint = sl_hint_find(&headers, body, body_len, now);
    CHECK(hint.source < SL_HINT_SOURCE_COUNT && hint_ok(hint.ms, 1));
    CHECK((hint.source == SL_HINT_NONE) == (hint.ms == -1));
    CHECK(hint.source == SL_HINT_BODY ? hint.ms == from_body && from_headers == -1
                                      : hint.ms == from_headers || hint.source == SL_HINT_NONE);
    (void)sl_hint_source_name(hint.source);
    sl_hint_t bare = sl_hint_find(NULL, body, body_len, now);
    CHECK(bare.ms == from_body);

    /* The classifier: the Retry-After line doubles as the extracted code. */
    char *code = strndup(ra_value, ra_len);
    sl_failure_t f = {
        .source = source,
        .dialect = dialect,
        .status = status,
        .body = body_len ? body : NULL,
        .body_len = body_len,
        .code = ra_len ? code : NULL,
        .after_content = (data[8] & 0x80) != 0,
    };
    sl_failure_class_t cls = sl_classify_failure(&f);
    CHECK(cls < SL_FAILURE_CLASS_COUNT);
    CHECK(sl_failure_class_info(cls) != NULL);
    (void)sl_failure_code(&f, cls);
    free(code);
    free(ms_copy);
    free(ra_copy);
    return 0;
}
