/*
 * What instances of a cluster tell each other (core/cluster_msg.h): the
 * published line of a pause and its end, round trip and refusals, the key
 * names, and the clocks.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/cluster_msg.h"

static sl_cluster_msg_t
msg(sl_cluster_op_t op, const char *origin, const char *upstream, int64_t until)
{
    return (sl_cluster_msg_t){.op = op,
                              .origin = origin,
                              .origin_len = strlen(origin),
                              .upstream = upstream,
                              .upstream_len = strlen(upstream),
                              .until_ms = until,
                              .consecutive = 3,
                              .grace_ms = 10000};
}

static void
expect_round_trip(const sl_cluster_msg_t *m, const char *line)
{
    char out[256];
    size_t n = sl_cluster_msg_encode(m, out, sizeof(out));
    cr_assert_str_eq(out, line);
    cr_assert_eq(n, strlen(line));
    sl_cluster_msg_t back;
    cr_assert(sl_cluster_msg_decode(out, n, &back), "%s", out);
    cr_expect_eq(back.op, m->op);
    cr_expect_eq(back.origin_len, m->origin_len);
    cr_expect(memcmp(back.origin, m->origin, m->origin_len) == 0);
    cr_expect_eq(back.upstream_len, m->upstream_len);
    cr_expect(memcmp(back.upstream, m->upstream, m->upstream_len) == 0);
    cr_expect_eq(back.until_ms, m->until_ms);
    cr_expect_eq(back.consecutive, m->consecutive);
    cr_expect_eq(back.grace_ms, m->grace_ms);
}

Test(cluster_msg, every_change_goes_as_one_line_and_comes_back_the_same)
{
    sl_cluster_msg_t m = msg(SL_CLUSTER_PAUSE_429, "host-a:8080", "anthropic", 1796000000123);
    expect_round_trip(&m, "v1 host-a:8080 429 1796000000123 3 10000 anthropic");
    m = msg(SL_CLUSTER_PAUSE_MANUAL, "b", "openai", SL_CLUSTER_NEVER);
    expect_round_trip(&m, "v1 b manual never 3 10000 openai");
    m = msg(SL_CLUSTER_RESUME, "b", "openai", -1);
    expect_round_trip(&m, "v1 b resume - 3 10000 openai");
    m = msg(SL_CLUSTER_ANSWERED, "c", "x", -1);
    expect_round_trip(&m, "v1 c answered - 3 10000 x");
    m = msg(SL_CLUSTER_PROBE_ABANDONED, "c", "x", -1);
    expect_round_trip(&m, "v1 c abandoned - 3 10000 x");
    m = msg(SL_CLUSTER_SLOT_FREED, "c", "x", -1);
    expect_round_trip(&m, "v1 c freed - 3 10000 x");
    m = msg(SL_CLUSTER_BREAKER_OPEN, "c", "x", SL_CLUSTER_NEVER);
    expect_round_trip(&m, "v1 c breaker never 3 10000 x");
    m = msg(SL_CLUSTER_BREAKER_CLOSED, "c", "x", -1);
    expect_round_trip(&m, "v1 c healthy - 3 10000 x");
}

Test(cluster_msg, an_upstream_name_with_spaces_comes_last_and_whole)
{
    sl_cluster_msg_t m = msg(SL_CLUSTER_PAUSE_429, "a", "my upstream  two", 5);
    expect_round_trip(&m, "v1 a 429 5 3 10000 my upstream  two");
}

Test(cluster_msg, lines_of_another_version_or_malformed_are_refused)
{
    static const char *const bad[] = {
        "",
        "v2 a 429 5 3 10000 x",
        "v1 a pause 5 3 10000 x",
        "v1 a 429 5 3 10000",
        "v1 a 429 5 3 10000 ",
        "v1 a 429 -5 3 10000 x",
        "v1 a 429 5 x 10000 x",
        "v1 a 429 5 3 1e4 x",
        "v1  429 5 3 10000 x",
        "v1 a 429 5 99999999999 10000 x",
        "v1 a 429 1234567890123456789 3 10000 x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sl_cluster_msg_t m;
        cr_expect_not(sl_cluster_msg_decode(bad[i], strlen(bad[i]), &m), "refused: \"%s\"", bad[i]);
    }
}

Test(cluster_msg, pushed_limits_go_as_one_line_and_come_back_the_same)
{
    sl_cluster_msg_t m = {
        .op = SL_CLUSTER_LIMITS,
        .origin = "a",
        .origin_len = 1,
        .upstream = "my upstream",
        .upstream_len = 11,
        .subject_kind = 'p',
        .n_limits = 2,
        .limits = {{SL_PER_MINUTE, 5, SL_MEASURE_TOKENS, 10000}, {SL_PER_DAY, 1, SL_MEASURE_COST, 20000000}}};
    char out[256];
    size_t n = sl_cluster_msg_encode(&m, out, sizeof(out));
    cr_assert_str_eq(out, "v1 a limits p minute/5/tokens/10000,day/1/cost/20000000 - my upstream");
    sl_cluster_msg_t back;
    cr_assert(sl_cluster_msg_decode(out, n, &back));
    cr_assert_eq(back.op, SL_CLUSTER_LIMITS);
    cr_assert_eq(back.subject_kind, 'p');
    cr_assert_eq(back.n_limits, 2);
    cr_assert(memcmp(back.limits, m.limits, sizeof(m.limits[0]) * 2) == 0);
    cr_assert_eq(back.upstream_len, 11);
    cr_assert(memcmp(back.upstream, "my upstream", 11) == 0);

    m.subject_kind = 'k', m.n_limits = 0;
    n = sl_cluster_msg_encode(&m, out, sizeof(out));
    cr_assert_str_eq(out, "v1 a limits k - - my upstream", "none: the key's limits are cleared");
    cr_assert(sl_cluster_msg_decode(out, n, &back));
    cr_assert_eq(back.subject_kind, 'k');
    cr_assert_eq(back.n_limits, 0);
}

Test(cluster_msg, malformed_pushed_limits_are_refused)
{
    static const char *const bad[] = {
        "v1 a limits x - - n",
        "v1 a limits p minute/5/tokens - n",
        "v1 a limits p minute/0/tokens/5 - n",
        "v1 a limits p fortnight/1/tokens/5 - n",
        "v1 a limits p minute/1/bytes/5 - n",
        "v1 a limits p minute/1/tokens/5, - n",
        "v1 a limits p minute/1/tokens/-5 - n",
        "v1 a limits p minute/1/tokens/5 7 n",
        "v1 a limits p minute/1/tokens/5 -",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sl_cluster_msg_t m;
        cr_expect_not(sl_cluster_msg_decode(bad[i], strlen(bad[i]), &m), "refused: \"%s\"", bad[i]);
    }
}

Test(cluster_msg, a_line_that_does_not_fit_is_not_cut)
{
    sl_cluster_msg_t m = msg(SL_CLUSTER_PAUSE_429, "a", "anthropic", 5);
    char out[16];
    cr_assert_eq(sl_cluster_msg_encode(&m, out, sizeof(out)), 0);
}

Test(cluster_msg, keys_share_one_slot_per_cluster)
{
    char key[64];
    cr_assert_eq(sl_cluster_key(key, sizeof(key), "prod", "pause", "anthropic"),
                 strlen("{sl:prod}:pause:anthropic"));
    cr_assert_str_eq(key, "{sl:prod}:pause:anthropic");
    sl_cluster_key(key, sizeof(key), "prod", "events", NULL);
    cr_assert_str_eq(key, "{sl:prod}:events");
    cr_assert_eq(sl_cluster_key(key, 10, "prod", "events", NULL), 0, "too long: nothing half-written counts");
}

Test(cluster_msg, a_limit_counter_is_named_by_its_subject_and_its_shape)
{
    char key[128];
    sl_limit_t window = {.per = SL_PER_MINUTE, .every = 5, .measure = SL_MEASURE_TOKENS, .amount = 1000};
    sl_cluster_limit_key(key, sizeof(key), "prod", 'p', "anthropic", &window, 0);
    cr_assert_str_eq(key, "{sl:prod}:win:p:anthropic:minute:5:tokens");
    window.amount = 5, window.measure = SL_MEASURE_REQUESTS, window.per = SL_PER_HOUR, window.every = 1;
    sl_cluster_limit_key(key, sizeof(key), "prod", 'k', "team-a", &window, 0);
    cr_assert_str_eq(key, "{sl:prod}:win:k:team-a:hour:1:requests",
                     "the amount is not in the name: a push keeps it");
    sl_limit_t day = {.per = SL_PER_DAY, .every = 1, .measure = SL_MEASURE_COST, .amount = 20000000};
    sl_cluster_limit_key(key, sizeof(key), "prod", 'p', "openai", &day, 1796169600000);
    cr_assert_str_eq(key, "{sl:prod}:period:p:openai:day:cost:1796169600000", "each period counts afresh");
    cr_assert_eq(sl_cluster_limit_key(key, 12, "prod", 'p', "openai", &day, 1), 0);
}

Test(cluster_msg, times_cross_between_clocks_and_never_stays_never)
{
    /* This instance: mono 5 000, wall 1 000 000; Redis runs 250 ms ahead of its wall clock. */
    int64_t mono = 5000, wall = 1000000, offset = 250;
    int64_t redis = sl_cluster_redis_ms_of(8000, mono, wall, offset);
    cr_assert_eq(redis, 1003250, "3 s from now on Redis's clock");
    cr_assert_eq(sl_cluster_mono_ms_of(redis, mono, wall, offset), 8000);
    /* Another instance whose wall clock is 2 s behind reads the same Redis time as the same moment. */
    cr_assert_eq(sl_cluster_mono_ms_of(redis, 70000, wall - 2000, offset + 2000), 73000);
    cr_assert_eq(sl_cluster_redis_ms_of(INT64_MAX, mono, wall, offset), SL_CLUSTER_NEVER);
    cr_assert_eq(sl_cluster_mono_ms_of(SL_CLUSTER_NEVER, mono, wall, offset), INT64_MAX);
}

Test(cluster_msg, the_offset_is_read_at_the_middle_of_the_round_trip)
{
    cr_assert_eq(sl_cluster_offset_ms(1000600, 1000000, 1000400), 400);
    cr_assert_eq(sl_cluster_offset_ms(999000, 1000000, 1000000), -1000);
}

Test(cluster_msg, tickets_of_one_millisecond_sort_by_instance_then_id)
{
    char a[64], b[64], c[64];
    cr_assert_gt(sl_cluster_ticket_name(a, sizeof(a), "a", 9), 0);
    cr_assert_gt(sl_cluster_ticket_name(b, sizeof(b), "a", 10), 0);
    cr_assert_gt(sl_cluster_ticket_name(c, sizeof(c), "b", 1), 0);
    cr_expect_str_eq(a, "a:00000000000000000009");
    cr_expect_lt(strcmp(a, b), 0, "id 9 before id 10 (byte order, as Redis compares members)");
    cr_expect_lt(strcmp(b, c), 0, "instance a before b");
    char tiny[8];
    cr_expect_eq(sl_cluster_ticket_name(tiny, sizeof(tiny), "a", 1), 0, "does not fit: nothing");
}

Test(cluster_msg, a_replaced_config_goes_as_its_revision_and_comes_back_the_same)
{
    sl_cluster_msg_t m = {.op = SL_CLUSTER_CONFIG,
                          .origin = "a",
                          .origin_len = 1,
                          .upstream = "-",
                          .upstream_len = 1,
                          .until_ms = 42};
    char line[256];
    size_t len = sl_cluster_msg_encode(&m, line, sizeof(line));
    cr_assert_gt(len, 0);
    sl_cluster_msg_t back;
    cr_assert(sl_cluster_msg_decode(line, len, &back));
    cr_expect_eq(back.op, SL_CLUSTER_CONFIG);
    cr_expect_eq(back.until_ms, 42);
}

Test(cluster_msg, a_config_record_holds_revision_origin_and_the_text_whole)
{
    const char *text = "listen: {gateway: {port: 0}}\nproviders: []\n";
    size_t len;
    char *record = sl_cluster_config_record(7, "node-a", text, strlen(text), &len);
    uint64_t rev;
    const char *origin, *back;
    size_t origin_len, back_len;
    cr_assert(sl_cluster_config_parse(record, len, &rev, &origin, &origin_len, &back, &back_len));
    cr_expect_eq(rev, 7);
    cr_expect_eq(origin_len, 6);
    cr_expect_eq(memcmp(origin, "node-a", 6), 0);
    cr_expect_eq(back_len, strlen(text));
    cr_expect_eq(memcmp(back, text, back_len), 0);
    free(record);
    cr_expect_not(sl_cluster_config_parse("x a\n", 4, &rev, &origin, &origin_len, &back, &back_len));
    cr_expect_not(sl_cluster_config_parse("7 a", 3, &rev, &origin, &origin_len, &back, &back_len),
                  "no text line");
    cr_expect_not(sl_cluster_config_parse("7 a b\n", 6, &rev, &origin, &origin_len, &back, &back_len));
}

Test(cluster_msg, of_two_pushes_at_once_every_instance_keeps_the_same_one)
{
    cr_expect(sl_cluster_config_is_newer(5, "a", 1, 4, "b"), "a higher revision wins");
    cr_expect_not(sl_cluster_config_is_newer(4, "b", 1, 5, "a"));
    cr_expect(sl_cluster_config_is_newer(5, "b", 1, 5, "a"), "same revision: the later origin");
    cr_expect_not(sl_cluster_config_is_newer(5, "a", 1, 5, "b"));
    cr_expect_not(sl_cluster_config_is_newer(5, "a", 1, 5, "a"), "the same push is not newer");
    cr_expect(sl_cluster_config_is_newer(5, "ab", 2, 5, "a"));
}
