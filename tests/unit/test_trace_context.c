/* W3C traceparent, sampling and attempt span ids (core/trace_context.h). */
#include <criterion/criterion.h>
#include <string.h>

#include "core/trace_context.h"

static bool
parse(const char *s, sl_trace_parent_t *p)
{
    return sl_traceparent_parse(s, strlen(s), p);
}

Test(trace_context, a_version_00_traceparent_is_read)
{
    sl_trace_parent_t p;
    cr_assert(parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", &p));
    char hex[33];
    sl_trace_hex(p.trace_id, 16, hex);
    cr_assert_str_eq(hex, "0af7651916cd43dd8448eb211c80319c");
    sl_trace_hex(p.span_id, 8, hex);
    cr_assert_str_eq(hex, "b7ad6b7169203331");
    cr_assert(p.sampled);
    cr_assert(parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", &p));
    cr_assert_not(p.sampled, "flags 00: the client did not record it");
}

Test(trace_context, a_later_version_may_carry_more_after_a_dash)
{
    sl_trace_parent_t p;
    cr_assert(parse("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03-more", &p));
    cr_assert(p.sampled);
    cr_assert_not(parse("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03x", &p));
}

Test(trace_context, invalid_values_start_a_new_trace)
{
    static const char *const bad[] = {
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",      /* no flags */
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x", /* version 00 has nothing after */
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",   /* version ff is invalid */
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",   /* uppercase hex */
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",   /* all-zero trace id */
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",   /* all-zero span id */
        "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",   /* not a dash */
        "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",   /* not hex */
    };
    sl_trace_parent_t p = {.sampled = true};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_not(parse(bad[i], &p), "%s", bad[i]);
}

Test(trace_context, a_hop_header_is_formatted_back_to_what_parses)
{
    sl_trace_parent_t p, q;
    cr_assert(parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", &p));
    char out[SL_TRACEPARENT_LEN + 1];
    sl_traceparent_format(p.trace_id, p.span_id, false, out);
    cr_assert_str_eq(out, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
    cr_assert(parse(out, &q));
    cr_assert_eq(memcmp(&p.trace_id, &q.trace_id, 16), 0);
}

Test(trace_context, the_sample_ratio_reads_the_random_part_of_the_trace_id)
{
    uint8_t id[16] = {0};
    cr_assert(sl_trace_ratio_sampled(id, 1000000), "1.0 records every trace");
    memset(id + 8, 0xff, 8);
    cr_assert_not(sl_trace_ratio_sampled(id, 999999), "the top of the range is out at anything below 1.0");
    cr_assert_not(sl_trace_ratio_sampled(id, 0), "0 records none");
    /* Of 10 000 evenly spread ids, 0.25 records a quarter. */
    int kept = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        uint64_t v = i * (UINT64_MAX / 10000);
        for (int b = 0; b < 8; b++)
            id[15 - b] = (uint8_t)(v >> (8 * b));
        kept += sl_trace_ratio_sampled(id, 250000);
    }
    cr_assert_eq(kept, 2500);
}

Test(trace_context, attempt_span_ids_are_distinct_and_stable)
{
    uint8_t request[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ids[64][8];
    for (size_t i = 0; i < 64; i++) {
        sl_trace_attempt_span_id(request, i, ids[i]);
        cr_assert_neq(memcmp(ids[i], request, 8), 0);
        uint8_t zero[8] = {0};
        cr_assert_neq(memcmp(ids[i], zero, 8), 0);
        for (size_t k = 0; k < i; k++)
            cr_assert_neq(memcmp(ids[i], ids[k], 8), 0, "attempts %zu and %zu", i, k);
    }
    uint8_t again[8];
    sl_trace_attempt_span_id(request, 3, again);
    cr_assert_eq(memcmp(again, ids[3], 8), 0, "a hop's traceparent and its span agree");
}
