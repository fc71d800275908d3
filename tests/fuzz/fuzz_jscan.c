/*
 * Request JSON extraction: sl_jscan over the body, sl_jscan_string and
 * sl_jscan_next_text over the spans it returns, and the body edits the
 * gateway makes (model_map and stream_options.include_usage) applied and
 * scanned again: an edited valid body must stay valid and say what was set.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/bodyedit.h"
#include "core/jscan.h"
#include "fuzz_check.h"

static void
check_span(const char *body, size_t len, sl_jspan_t span)
{
    if (span.len == 0)
        return;
    CHECK(span.off <= len && span.len <= len - span.off);
    char *out = malloc(span.len + 1);
    size_t out_len = 0;
    if (sl_jscan_string(body, span, out, span.len + 1, &out_len)) {
        CHECK(body[span.off] == '"');
        CHECK(out_len <= span.len && out[out_len] == '\0');
        /* The decoded text compares equal to itself; one byte too small a buffer is refused. */
        CHECK(sl_jscan_string_equals(body, span, out, out_len));
        size_t again = 0;
        CHECK(!sl_jscan_string(body, span, out, out_len, &again));
    } else {
        /* Every string token decodes into a buffer as long as the token. */
        CHECK(body[span.off] != '"');
    }
    free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    sl_jscan_t f;
    if (!sl_jscan(body, size, &f)) {
        CHECK(f.err != SL_JSCAN_OK && f.err < SL_JSCAN_E_COUNT);
        CHECK(f.err_off <= size);
        CHECK(sl_jscan_reason(f.err) != NULL);
        CHECK(f.model.len == 0 && f.first_user.len == 0 && !f.has_stream && !f.has_max_tokens);
        return 0;
    }
    CHECK(f.err == SL_JSCAN_OK);
    check_span(body, size, f.model);
    check_span(body, size, f.previous_response_id);
    check_span(body, size, f.first_user);
    check_span(body, size, f.stream_options);
    check_span(body, size, f.include_usage);
    CHECK(!f.has_max_tokens || f.max_tokens >= 0);

    if (f.first_user.len > 0) {
        size_t cursor = 0, last_end = f.first_user.off, pieces = 0;
        sl_jspan_t text;
        while (sl_jscan_next_text(body, f.first_user, &cursor, &text)) {
            CHECK(text.len >= 2 && text.off >= last_end);
            CHECK(text.off + text.len <= f.first_user.off + f.first_user.len);
            CHECK(body[text.off] == '"');
            last_end = text.off + text.len;
            check_span(body, size, text);
            CHECK(++pieces <= size); /* bounded: each piece is a distinct token */
        }
    }

    /* The edits the gateway makes before sending the body upstream. */
    sl_body_edit_t edits[2];
    size_t n = 0;
    bool asked = sl_body_ask_for_usage(body, size, &f, &edits[n]);
    if (asked)
        n++;
    if (f.model.len > 0)
        edits[n++] = (sl_body_edit_t){f.model.off, f.model.len, "\"m\\u00e9\"", 9};
    size_t out_len = 0;
    char *out = sl_body_apply(body, size, edits, n, &out_len);
    CHECK((out == NULL) == (n == 0));
    if (out != NULL) {
        sl_jscan_t g;
        CHECK(sl_jscan(out, out_len, &g));
        sl_body_edit_t none;
        CHECK(!sl_body_ask_for_usage(out, out_len, &g, &none)); /* include_usage is now true */
        if (f.model.len > 0)
            CHECK(sl_jscan_string_equals(out, g.model, "m\xc3\xa9", 3));
        CHECK(g.has_stream == f.has_stream && g.stream == f.stream);
        free(out);
    }
    return 0;
}
