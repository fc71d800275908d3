/*
 * The breaker of behaviour.md §8 and the candidate filter's cooling rule of
 * §2, driven with explicit times.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "core/breaker.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

#define SEC 1000
#define T0  ((int64_t)1795969439000) /* an ordinary epoch time in ms */

/* config.md's defaults: 3 failures, 60 s doubling to 600 s, 1800 s no balance, 3600 s quota. */
static const sl_breaker_params_t params = {
    .failures_to_pause = 3,
    .pause_ms = 60 * SEC,
    .max_pause_ms = 600 * SEC,
    .no_balance_pause_ms = 1800 * SEC,
    .quota_pause_ms = 3600 * SEC,
};

static bool
fail(sl_breaker_t *b, int64_t now)
{
    return sl_breaker_on_failure(b, SL_BREAKER_CAUSE_UNEXPLAINED, now, &params, 0);
}

static void
trip_now(sl_breaker_t *b, int64_t now)
{
    for (uint32_t i = 0; i < params.failures_to_pause; i++)
        fail(b, now);
    cr_assert_eq(b->state, SL_BREAKER_OPEN);
}

/* Checks at now and asserts the outcome. */
static void
expect_check(sl_breaker_t *b, int64_t now, sl_breaker_state_t state, bool probe, bool changed)
{
    bool is_probe = !probe, moved = !changed;
    cr_expect_eq(sl_breaker_check(b, now, &is_probe, &moved), state, "state at %lld", (long long)(now - T0));
    cr_expect_eq(is_probe, probe, "probe at %lld", (long long)(now - T0));
    cr_expect_eq(moved, changed, "changed at %lld", (long long)(now - T0));
}

Test(breaker, zeroed_is_closed)
{
    sl_breaker_t b = {0};
    expect_check(&b, T0, SL_BREAKER_CLOSED, false, false);
    cr_expect_not(sl_breaker_is_cooling(&b, T0));
    cr_expect_str_eq(sl_breaker_state_slug(b.state), "ok");
    cr_expect_str_eq(sl_breaker_reason_slug(&b), "gw.breaker.recovered");
}

Test(breaker, opens_after_failures_to_pause_consecutive_failures)
{
    sl_breaker_t b = {0};
    cr_expect_not(fail(&b, T0), "the first failure only counts");
    cr_expect_not(fail(&b, T0 + 1));
    cr_expect_eq(b.state, SL_BREAKER_CLOSED);
    expect_check(&b, T0 + 2, SL_BREAKER_CLOSED, false, false);
    cr_expect(fail(&b, T0 + 10), "the third opens it");
    cr_expect_eq(b.state, SL_BREAKER_OPEN);
    cr_expect_eq(b.until_ms, T0 + 10 + 60 * SEC);
    cr_expect_str_eq(sl_breaker_state_slug(b.state), "open");
    cr_expect_str_eq(sl_breaker_reason_slug(&b), "gw.breaker.failures");
}

Test(breaker, success_resets_the_consecutive_count)
{
    sl_breaker_t b = {0};
    fail(&b, T0);
    fail(&b, T0);
    cr_expect_not(sl_breaker_on_success(&b), "closed stays closed");
    fail(&b, T0);
    fail(&b, T0);
    cr_expect_eq(b.state, SL_BREAKER_CLOSED, "2 + 2 failures are not 3 consecutive");
}

Test(breaker, open_cools_until_its_time)
{
    sl_breaker_t b = {0};
    trip_now(&b, T0);
    expect_check(&b, T0 + 60 * SEC - 1, SL_BREAKER_OPEN, false, false);
    cr_expect(sl_breaker_is_cooling(&b, T0 + 60 * SEC - 1));
    cr_expect_not(sl_breaker_is_cooling(&b, T0 + 60 * SEC), "due: a probe is available");
}

Test(breaker, half_open_hands_out_exactly_one_probe)
{
    sl_breaker_t b = {0};
    trip_now(&b, T0);
    expect_check(&b, T0 + 60 * SEC, SL_BREAKER_HALF_OPEN, true, true);
    cr_expect_str_eq(sl_breaker_state_slug(b.state), "half_open");
    expect_check(&b, T0 + 60 * SEC, SL_BREAKER_HALF_OPEN, false, false);
    expect_check(&b, T0 + 90 * SEC, SL_BREAKER_HALF_OPEN, false, false);
    cr_expect(sl_breaker_is_cooling(&b, T0 + 90 * SEC), "others cool while the probe is out");
}

Test(breaker, released_probe_is_handed_out_again)
{
    sl_breaker_t b = {0};
    trip_now(&b, T0);
    expect_check(&b, T0 + 60 * SEC, SL_BREAKER_HALF_OPEN, true, true);
    sl_breaker_release_probe(&b);
    cr_expect_eq(b.state, SL_BREAKER_HALF_OPEN);
    cr_expect_not(sl_breaker_is_cooling(&b, T0 + 61 * SEC));
    expect_check(&b, T0 + 61 * SEC, SL_BREAKER_HALF_OPEN, true, false);

    sl_breaker_t closed = {0};
    sl_breaker_release_probe(&closed);
    cr_expect_eq(memcmp(&closed, &(sl_breaker_t){0}, sizeof(closed)), 0, "no-op when there is no probe");
}

Test(breaker, failed_probe_doubles_the_pause_up_to_the_cap)
{
    static const int64_t pauses[] = {60, 120, 240, 480, 600, 600, 600};
    sl_breaker_t b = {0};
    int64_t now = T0;
    trip_now(&b, now);
    for (size_t i = 0; i < N(pauses); i++) {
        cr_expect_eq(b.until_ms - now, pauses[i] * SEC, "trip %zu", i + 1);
        now = b.until_ms;
        expect_check(&b, now, SL_BREAKER_HALF_OPEN, true, true);
        cr_expect(fail(&b, now), "a failed probe reopens");
        cr_expect_eq(b.state, SL_BREAKER_OPEN);
    }
}

Test(breaker, success_closes_and_resets_the_trip_count)
{
    sl_breaker_t b = {0};
    trip_now(&b, T0);
    expect_check(&b, T0 + 60 * SEC, SL_BREAKER_HALF_OPEN, true, true);
    fail(&b, T0 + 60 * SEC); /* second trip: 120 s */
    expect_check(&b, T0 + 180 * SEC, SL_BREAKER_HALF_OPEN, true, true);
    cr_expect(sl_breaker_on_success(&b));
    cr_expect_eq(b.state, SL_BREAKER_CLOSED);
    cr_expect_str_eq(sl_breaker_reason_slug(&b), "gw.breaker.recovered");
    trip_now(&b, T0 + 200 * SEC);
    cr_expect_eq(b.until_ms, T0 + 260 * SEC, "back to the first pause");
}

Test(breaker, failures_while_open_do_not_stretch_the_pause)
{
    sl_breaker_t b = {0};
    trip_now(&b, T0);
    sl_breaker_t before = b;
    cr_expect_not(fail(&b, T0 + 30 * SEC), "a fail-open hop failing again");
    cr_expect_eq(memcmp(&b, &before, sizeof(b)), 0);
}

Test(breaker, success_while_open_closes)
{
    sl_breaker_t b = {0};
    trip_now(&b, T0);
    cr_expect(sl_breaker_on_success(&b), "a bypassing hop succeeded");
    expect_check(&b, T0 + 1, SL_BREAKER_CLOSED, false, false);
}

Test(breaker, no_balance_holds_for_its_own_pause)
{
    sl_breaker_t b = {0};
    cr_expect(sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_NO_BALANCE, T0, &params, 0), "one is enough");
    cr_expect_eq(b.until_ms, T0 + 1800 * SEC);
    cr_expect_str_eq(sl_breaker_reason_slug(&b), "gw.breaker.no_balance");
    expect_check(&b, T0 + 1800 * SEC - 1, SL_BREAKER_OPEN, false, false);
    expect_check(&b, T0 + 1800 * SEC, SL_BREAKER_HALF_OPEN, true, true);
    cr_expect_str_eq(sl_breaker_reason_slug(&b), "gw.breaker.no_balance", "half-open says why it was open");
}

Test(breaker, quota_holds_until_its_reset_else_its_pause)
{
    static const struct {
        const char *name;
        int64_t reset_at, want_until;
    } rows[] = {
        {"reset given", T0 + 5 * SEC, T0 + 5 * SEC},
        {"no reset", 0, T0 + 3600 * SEC},
        {"reset already passed", T0 - SEC, T0 + 3600 * SEC},
        {"reset now", T0, T0 + 3600 * SEC},
    };
    for (size_t i = 0; i < N(rows); i++) {
        sl_breaker_t b = {0};
        cr_expect(sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_QUOTA, T0, &params, rows[i].reset_at), "%s",
                  rows[i].name);
        cr_expect_eq(b.state, SL_BREAKER_OPEN, "%s", rows[i].name);
        cr_expect_eq(b.until_ms, rows[i].want_until, "%s", rows[i].name);
        cr_expect_str_eq(sl_breaker_reason_slug(&b), "gw.breaker.quota_used_up");
    }
}

Test(breaker, rejected_credentials_hold_until_cleared)
{
    sl_breaker_t b = {0};
    cr_expect(sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_AUTH, T0, &params, 0));
    cr_expect_eq(b.until_ms, SL_BREAKER_UNTIL_CLEARED);
    cr_expect_str_eq(sl_breaker_reason_slug(&b), "gw.breaker.auth_rejected");
    int64_t year = (int64_t)365 * 24 * 3600 * SEC;
    expect_check(&b, T0 + year, SL_BREAKER_OPEN, false, false);
    cr_expect(sl_breaker_is_cooling(&b, T0 + year));
    cr_expect_not(sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_AUTH, T0 + 1, &params, 0), "same hold again");
    cr_expect(sl_breaker_clear_auth(&b), "config reload");
    expect_check(&b, T0 + 2, SL_BREAKER_CLOSED, false, false);
    cr_expect_not(sl_breaker_clear_auth(&b), "nothing to clear");
}

Test(breaker, clearing_leaves_other_holds_alone)
{
    sl_breaker_t b = {0};
    sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_NO_BALANCE, T0, &params, 0);
    sl_breaker_t before = b;
    cr_expect_not(sl_breaker_clear_auth(&b));
    cr_expect_eq(memcmp(&b, &before, sizeof(b)), 0);
}

Test(breaker, a_known_cause_replaces_the_hold)
{
    sl_breaker_t b = {0};
    trip_now(&b, T0);
    cr_expect(sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_QUOTA, T0 + SEC, &params, T0 + 7200 * SEC));
    cr_expect_eq(b.until_ms, T0 + 7200 * SEC);
    cr_expect_eq(b.cause, SL_BREAKER_CAUSE_QUOTA);
    cr_expect_not(fail(&b, T0 + 2 * SEC), "an unexplained failure does not shorten a known hold");
    cr_expect_eq(b.cause, SL_BREAKER_CAUSE_QUOTA);
    cr_expect(sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_AUTH, T0 + 3 * SEC, &params, 0));
    cr_expect_eq(b.until_ms, SL_BREAKER_UNTIL_CLEARED);
}

Test(breaker, known_causes_do_not_count_as_trips)
{
    sl_breaker_t b = {0};
    sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_NO_BALANCE, T0, &params, 0);
    int64_t due = T0 + 1800 * SEC;
    expect_check(&b, due, SL_BREAKER_HALF_OPEN, true, true);
    cr_expect(fail(&b, due), "the probe failed without a known cause");
    cr_expect_eq(b.until_ms, due + 60 * SEC, "the first unexplained pause, not a doubled one");
    cr_expect_eq(b.cause, SL_BREAKER_CAUSE_UNEXPLAINED);
}

Test(breaker, cause_none_changes_nothing)
{
    sl_breaker_t b = {0};
    fail(&b, T0);
    sl_breaker_t before = b;
    cr_expect_not(sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_NONE, T0, &params, 0));
    cr_expect_eq(memcmp(&b, &before, sizeof(b)), 0);
}

Test(breaker, zero_failures_to_pause_opens_on_the_first)
{
    sl_breaker_params_t p = params;
    p.failures_to_pause = 0;
    sl_breaker_t b = {0};
    cr_expect(sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_UNEXPLAINED, T0, &p, 0));
}

Test(breaker, pause_never_overflows)
{
    sl_breaker_params_t p = params;
    p.pause_ms = INT64_MAX / 4;
    p.max_pause_ms = INT64_MAX;
    sl_breaker_t b = {.state = SL_BREAKER_HALF_OPEN, .trips = 40, .cause = SL_BREAKER_CAUSE_UNEXPLAINED};
    cr_expect(sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_UNEXPLAINED, T0, &p, 0));
    cr_expect_lt(b.until_ms, SL_BREAKER_UNTIL_CLEARED, "a long pause is still not 'until cleared'");
    cr_expect_gt(b.until_ms, T0);

    sl_breaker_t many = {.state = SL_BREAKER_HALF_OPEN, .trips = UINT32_MAX};
    cr_expect(sl_breaker_on_failure(&many, SL_BREAKER_CAUSE_UNEXPLAINED, T0, &params, 0));
    cr_expect_eq(many.until_ms, T0 + 600 * SEC);
    cr_expect_eq(many.trips, UINT32_MAX);
}

Test(breaker, max_below_pause_keeps_the_pause)
{
    sl_breaker_params_t p = params;
    p.max_pause_ms = 10 * SEC;
    sl_breaker_t b = {0};
    for (int i = 0; i < 3; i++)
        sl_breaker_on_failure(&b, SL_BREAKER_CAUSE_UNEXPLAINED, T0, &p, 0);
    cr_expect_eq(b.until_ms, T0 + 60 * SEC);
}

Test(breaker, params_come_from_the_failover_config)
{
    sl_failover_t f = {.failures_to_pause = 5,
                       .pause_secs = 30,
                       .max_pause_secs = 300,
                       .no_balance_pause_secs = 1800,
                       .quota_pause_secs = 4000000000u};
    sl_breaker_params_t p = sl_breaker_params_from_failover(&f);
    cr_expect_eq(p.failures_to_pause, 5u);
    cr_expect_eq(p.pause_ms, 30 * SEC);
    cr_expect_eq(p.max_pause_ms, 300 * SEC);
    cr_expect_eq(p.no_balance_pause_ms, 1800 * SEC);
    cr_expect_eq(p.quota_pause_ms, (int64_t)4000000000u * SEC, "no 32-bit overflow");
}

Test(breaker_filter, skips_cooling_unless_all_cool_or_single)
{
    static const struct {
        const char *name;
        size_t n;
        bool cooling[4];
        bool skip[4];
        size_t skipped;
    } rows[] = {
        {"none cooling", 3, {false, false, false}, {false, false, false}, 0},
        {"some cooling are skipped", 4, {true, false, true, false}, {true, false, true, false}, 2},
        {"all cooling: fail open", 3, {true, true, true}, {false, false, false}, 0},
        {"single cooling candidate bypasses", 1, {true}, {false}, 0},
        {"single free candidate", 1, {false}, {false}, 0},
        {"no candidates", 0, {false}, {false}, 0},
    };
    for (size_t i = 0; i < N(rows); i++) {
        bool skip[4] = {true, true, true, true};
        cr_expect_eq(sl_breaker_filter(rows[i].cooling, rows[i].n, skip), rows[i].skipped, "%s",
                     rows[i].name);
        for (size_t k = 0; k < rows[i].n; k++)
            cr_expect_eq(skip[k], rows[i].skip[k], "%s: candidate %zu", rows[i].name, k);
        for (size_t k = rows[i].n; k < 4; k++)
            cr_expect(skip[k], "%s: nothing written past n", rows[i].name);
    }
}

Test(breaker_filter, cooling_follows_the_breakers)
{
    sl_breaker_t free_ = {0}, open = {0}, probing = {0};
    trip_now(&open, T0);
    trip_now(&probing, T0 - 60 * SEC);
    bool is_probe;
    sl_breaker_check(&probing, T0, &is_probe, NULL);
    cr_assert(is_probe);
    bool cooling[] = {sl_breaker_is_cooling(&free_, T0), sl_breaker_is_cooling(&open, T0),
                      sl_breaker_is_cooling(&probing, T0)};
    bool skip[3];
    cr_expect_eq(sl_breaker_filter(cooling, 3, skip), 2);
    cr_expect(!skip[0] && skip[1] && skip[2]);
}

/* ---- another instance's verdict (cluster.md) -------------------------------------------------- */

Test(breaker, another_instances_open_breaker_holds_here_until_its_end)
{
    sl_breaker_t b = {0};
    b.failures = 2;
    cr_assert(sl_breaker_adopt_open(&b, SL_BREAKER_CAUSE_UNEXPLAINED, T0 + 30 * SEC, 1, T0));
    cr_assert_eq(b.state, SL_BREAKER_OPEN);
    cr_assert_eq(b.failures, 0, "the count starts again after the pause");
    cr_assert(sl_breaker_is_cooling(&b, T0 + 29 * SEC));
    bool probe = false;
    cr_assert_eq(sl_breaker_check(&b, T0 + 30 * SEC, &probe, NULL), SL_BREAKER_HALF_OPEN);
    cr_assert(probe, "at its end a probe goes from here too");
}

Test(breaker, a_shorter_hold_from_another_instance_leaves_a_longer_one_here)
{
    sl_breaker_t b = {0};
    cr_assert(sl_breaker_adopt_open(&b, SL_BREAKER_CAUSE_NO_BALANCE, T0 + 60 * SEC, 0, T0));
    cr_assert_not(sl_breaker_adopt_open(&b, SL_BREAKER_CAUSE_UNEXPLAINED, T0 + 10 * SEC, 1, T0));
    cr_assert_eq(b.cause, SL_BREAKER_CAUSE_NO_BALANCE);
    cr_assert(sl_breaker_adopt_open(&b, SL_BREAKER_CAUSE_AUTH, SL_BREAKER_UNTIL_CLEARED, 0, T0));
    cr_assert_eq(b.until_ms, SL_BREAKER_UNTIL_CLEARED);
    cr_assert_not(sl_breaker_adopt_open(&b, SL_BREAKER_CAUSE_AUTH, SL_BREAKER_UNTIL_CLEARED, 0, T0),
                  "old news");
}

Test(breaker, a_hold_that_already_ended_elsewhere_changes_nothing)
{
    sl_breaker_t b = {0};
    cr_assert_not(sl_breaker_adopt_open(&b, SL_BREAKER_CAUSE_UNEXPLAINED, T0 - 1, 1, T0));
    cr_assert_eq(b.state, SL_BREAKER_CLOSED);
}
