/* The pure rules of a connection's first moments: accept.h (what its first bytes are), linger.h (when a
 * lingering close ends), refusal.h (the gateway's words for an answer h2o made). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "accept.h"
#include "linger.h"
#include "refusal.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

Test(accept, first_bytes_tell_http2_http1_and_what_h2o_would_refuse_in_text)
{
    static const struct {
        const char *bytes;
        sl_first_bytes_t want;
    } cases[] = {
        {"", SL_FIRST_WAIT},
        {"P", SL_FIRST_WAIT},
        {"PRI * HTTP/2.0\r\n\r\nSM\r\n", SL_FIRST_WAIT},
        {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", SL_FIRST_HTTP2},
        {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04", SL_FIRST_HTTP2},
        {"POST /v1/messages HTTP/1.1\r\nhost: x\r\n", SL_FIRST_WAIT},
        {"POST /v1/messages HTTP/1.1\r\nhost: x\r\n\r\n", SL_FIRST_HTTP1},
        {"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}", SL_FIRST_HTTP1},
        {"GET / HTTP/1.0\r\n\r\n", SL_FIRST_HTTP1},
        {"POST", SL_FIRST_WAIT},
        {"PRIX", SL_FIRST_WAIT}, /* a method called PRIX is still a possible request line */
        {"HELLO THERE\r\n\r\n", SL_FIRST_MALFORMED},
        {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", SL_FIRST_MALFORMED},
        {"GET / HTTP/1.1\r\nbad header line\r\n\r\n", SL_FIRST_MALFORMED},
        {"GET / HTTP/1.1\r\nx: a\x01"
         "b\r\n\r\n",
         SL_FIRST_MALFORMED},
    };
    for (size_t i = 0; i < N(cases); i++) {
        size_t len = strlen(cases[i].bytes);
        if (i == 4)
            len = 28;
        cr_assert_eq(sl_first_bytes_classify(cases[i].bytes, len), cases[i].want, "case %zu: %s", i,
                     cases[i].bytes);
    }
}

Test(accept, a_head_past_h2os_bounds_is_too_large_not_malformed)
{
    static char head[H2O_MAX_REQLEN + 64];
    int n = snprintf(head, sizeof(head), "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 120; i++)
        n += snprintf(head + n, sizeof(head) - (size_t)n, "x-h%d: v\r\n", i);
    n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
    cr_assert_eq(sl_first_bytes_classify(head, (size_t)n), SL_FIRST_HEAD_TOO_LARGE,
                 "more headers than h2o takes");

    n = snprintf(head, sizeof(head), "GET / HTTP/1.1\r\nx-long: ");
    memset(head + n, 'v', sizeof(head) - (size_t)n);
    cr_assert_eq(sl_first_bytes_classify(head, H2O_MAX_REQLEN - 1), SL_FIRST_WAIT, "may still end");
    cr_assert_eq(sl_first_bytes_classify(head, sizeof(head)), SL_FIRST_HEAD_TOO_LARGE,
                 "cannot end in bounds");
}

Test(linger, a_lingering_close_ends_at_its_time_its_idle_gap_or_its_byte_budget)
{
    sl_linger_state_t s = {.started_ms = 1000, .last_read_ms = 1000};
    cr_assert_eq(sl_linger_close_at_ms(&s), 1000 + SL_LINGER_IDLE_MS, "quiet: the idle gap");
    s.last_read_ms = 1000 + SL_LINGER_TOTAL_MS - 100;
    cr_assert_eq(sl_linger_close_at_ms(&s), 1000 + SL_LINGER_TOTAL_MS, "reading on: the whole time at most");
    s.last_read_ms = 2000;
    cr_assert_eq(sl_linger_close_at_ms(&s), 2000 + SL_LINGER_IDLE_MS, "each read moves the idle gap");
    s.discarded = SL_LINGER_MAX_BYTES;
    cr_assert_eq(sl_linger_close_at_ms(&s), 2000, "the byte budget spent: now");
}

Test(refusal, each_answer_h2o_makes_gets_its_code_and_words)
{
    sl_refusal_t r = sl_refusal_of(413, "request entity is too large", 27, 1048576);
    cr_assert_eq(r.code, SL_CODE_GW_REQUEST_TOO_LARGE);
    cr_assert_eq(r.status, 413);
    cr_assert_str_eq(r.size, "more than 1048576");
    cr_assert_str_eq(r.max, "1048576");

    r = sl_refusal_of(400, "broken chunked-encoding", 23, 0);
    cr_assert_eq(r.code, SL_CODE_GW_REQUEST_MALFORMED_HTTP);
    cr_assert_eq(r.status, 400);
    cr_assert_str_eq(r.detail, "broken chunked-encoding");

    r = sl_refusal_of(417, "unknown expectation", 19, 0);
    cr_assert_eq(r.code, SL_CODE_GW_REQUEST_BAD_EXPECTATION);
    cr_assert_eq(r.status, 417);

    r = sl_refusal_of(500, "oops", 4, 0);
    cr_assert_eq(r.code, SL_CODE_GW_REQUEST_MALFORMED_HTTP);
    cr_assert_eq(r.status, 400, "only request faults come before routing");

    char longer[300];
    memset(longer, 'x', sizeof(longer));
    r = sl_refusal_of(400, longer, sizeof(longer), 0);
    cr_assert_lt(strlen(r.detail), sizeof(r.detail), "a reason is cut, never overflows");
}
