/* HTTP/1.1 response framing and the chunked decoder (core/http1.h), as the upstream client reads them. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/http1.h"

#define FIELD(n, v)                                                                                          \
    {                                                                                                        \
        n, sizeof(n) - 1, v, sizeof(v) - 1                                                                   \
    }

static sl_http1_framing_t
framing_of(int minor, int status, const sl_http1_field_t *fields, size_t n)
{
    sl_http1_framing_t f;
    cr_assert(sl_http1_framing(minor, status, fields, n, &f));
    return f;
}

Test(framing, a_content_length_frames_the_body_and_the_connection_is_kept)
{
    sl_http1_field_t fields[] = {FIELD("Content-Type", "application/json"), FIELD("Content-Length", "42")};
    sl_http1_framing_t f = framing_of(1, 200, fields, 2);
    cr_assert_eq(f.body, SL_HTTP1_LENGTH);
    cr_assert_eq(f.content_length, 42);
    cr_assert(f.keep_alive);
}

Test(framing, chunked_frames_the_body_whatever_the_case_of_names_and_tokens)
{
    sl_http1_field_t fields[] = {FIELD("TRANSFER-ENCODING", "Chunked")};
    sl_http1_framing_t f = framing_of(1, 200, fields, 1);
    cr_assert_eq(f.body, SL_HTTP1_CHUNKED);
    cr_assert(f.keep_alive);
}

Test(framing, a_transfer_coding_beside_a_content_length_wins_and_the_connection_is_not_kept)
{
    sl_http1_field_t fields[] = {FIELD("content-length", "10"), FIELD("transfer-encoding", "chunked")};
    sl_http1_framing_t f = framing_of(1, 200, fields, 2);
    cr_assert_eq(f.body, SL_HTTP1_CHUNKED);
    cr_assert_not(f.keep_alive);
}

Test(framing, a_coding_that_does_not_end_in_chunked_runs_until_close)
{
    sl_http1_field_t fields[] = {FIELD("transfer-encoding", "chunked, gzip")};
    sl_http1_framing_t f = framing_of(1, 200, fields, 1);
    cr_assert_eq(f.body, SL_HTTP1_UNTIL_CLOSE);
    cr_assert_not(f.keep_alive);
}

Test(framing, neither_length_nor_coding_runs_until_close)
{
    sl_http1_field_t fields[] = {FIELD("content-type", "text/event-stream")};
    sl_http1_framing_t f = framing_of(1, 200, fields, 1);
    cr_assert_eq(f.body, SL_HTTP1_UNTIL_CLOSE);
    cr_assert_not(f.keep_alive);
}

Test(framing, interim_no_content_and_not_modified_have_no_body)
{
    sl_http1_field_t fields[] = {FIELD("content-length", "7")};
    int statuses[] = {100, 103, 204, 304};
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
        sl_http1_framing_t f = framing_of(1, statuses[i], fields, 1);
        cr_assert_eq(f.body, SL_HTTP1_NO_BODY, "status %d", statuses[i]);
        cr_assert(f.keep_alive);
    }
}

Test(framing, connection_close_is_honoured_among_other_tokens)
{
    sl_http1_field_t fields[] = {FIELD("content-length", "0"), FIELD("Connection", "upgrade, Close")};
    cr_assert_not(framing_of(1, 200, fields, 2).keep_alive);
}

Test(framing, http_1_0_closes_unless_it_asks_for_keep_alive)
{
    sl_http1_field_t plain[] = {FIELD("content-length", "3")};
    cr_assert_not(framing_of(0, 200, plain, 1).keep_alive);
    sl_http1_field_t kept[] = {FIELD("content-length", "3"), FIELD("connection", "keep-alive")};
    cr_assert(framing_of(0, 200, kept, 2).keep_alive);
}

Test(framing, equal_content_lengths_are_one_and_differing_or_malformed_ones_are_refused)
{
    sl_http1_field_t same[] = {FIELD("content-length", "5, 5"), FIELD("content-length", "5")};
    sl_http1_framing_t f = framing_of(1, 200, same, 2);
    cr_assert_eq(f.content_length, 5);
    const char *bad[] = {"5, 6", "12a", "-1", "", " ", "99999999999999999999", "0x10"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sl_http1_field_t fields[] = {{"content-length", 14, bad[i], strlen(bad[i])}};
        cr_assert_not(sl_http1_framing(1, 200, fields, 1, &f), "'%s'", bad[i]);
    }
    sl_http1_field_t twice[] = {FIELD("content-length", "5"), FIELD("content-length", "6")};
    cr_assert_not(sl_http1_framing(1, 200, twice, 2, &f));
}

/* Decodes text fed in pieces of `step` bytes; returns the status of the last call. */
static sl_chunked_status_t
decode_in_steps(const char *text, size_t step, char *data, size_t *data_len, size_t *after)
{
    sl_chunked_t d = {0};
    size_t total = strlen(text), out = 0;
    sl_chunked_status_t st = SL_CHUNKED_MORE;
    for (size_t at = 0; at < total && st == SL_CHUNKED_MORE; at += step) {
        char piece[256];
        size_t fed = total - at < step ? total - at : step, n = fed;
        memcpy(piece, text + at, fed);
        st = sl_chunked_decode(&d, piece, &n, after);
        memcpy(data + out, piece, n);
        out += n;
        if (st == SL_CHUNKED_END)
            *after += total - at - fed; /* the pieces never fed follow the body too */
    }
    *data_len = out;
    return st;
}

static void
assert_decodes_at_every_split(const char *text, const char *want, size_t want_after)
{
    for (size_t step = 1; step <= strlen(text); step++) {
        char data[256];
        size_t len = 0, after = 0;
        cr_assert_eq(decode_in_steps(text, step, data, &len, &after), SL_CHUNKED_END, "step %zu", step);
        cr_assert_eq(len, strlen(want), "step %zu", step);
        cr_assert(memcmp(data, want, len) == 0, "step %zu: '%.*s'", step, (int)len, data);
        cr_assert_eq(after, want_after, "step %zu", step);
    }
}

Test(chunked, chunks_decode_to_their_data_whatever_the_read_boundaries)
{
    assert_decodes_at_every_split("5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n", "hello, world", 0);
    assert_decodes_at_every_split("1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n",
                                  "abcdefghijklmnopqrstuvwxyz", 0);
}

Test(chunked, extensions_trailers_bare_line_feeds_and_leading_zeros_are_read)
{
    assert_decodes_at_every_split("3;name=value\r\nabc\r\n0000\r\nx-trailer: 1\r\nx-other: 2\r\n\r\n", "abc",
                                  0);
    assert_decodes_at_every_split("3\nabc\n0\n\n", "abc", 0);
    assert_decodes_at_every_split("0\r\n\r\n", "", 0);
}

Test(chunked, bytes_after_the_body_are_counted)
{
    char buf[] = "2\r\nhi\r\n0\r\n\r\nHTTP/1.1";
    size_t len = strlen(buf), after = 0;
    sl_chunked_t d = {0};
    cr_assert_eq(sl_chunked_decode(&d, buf, &len, &after), SL_CHUNKED_END);
    cr_assert_eq(len, 2);
    cr_assert_eq(after, 8);
}

Test(chunked, a_body_that_stops_early_asks_for_more)
{
    char buf[] = "5\r\nhel";
    size_t len = strlen(buf), after = 0;
    sl_chunked_t d = {0};
    cr_assert_eq(sl_chunked_decode(&d, buf, &len, &after), SL_CHUNKED_MORE);
    cr_assert_eq(len, 3);
    cr_assert(memcmp(buf, "hel", 3) == 0);
}

Test(chunked, what_is_not_chunked_coding_is_refused)
{
    const char *bad[] = {
        "g\r\n",                 /* not hex */
        "\r\n",                  /* no size */
        "3\r\nabcd\r\n",         /* data longer than its size */
        "3\rX",                  /* CR without LF */
        "11111111111111111\r\n", /* 17 digits */
        "ffffffffffffffff0\r\n", /* more than 64 bits */
        "0\r\n\rX",              /* the final line's CR without LF */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char buf[64];
        snprintf(buf, sizeof(buf), "%s", bad[i]);
        size_t len = strlen(buf), after = 0;
        sl_chunked_t d = {0};
        cr_assert_eq(sl_chunked_decode(&d, buf, &len, &after), SL_CHUNKED_BAD, "'%s'", bad[i]);
    }
}
