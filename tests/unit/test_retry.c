/*
 * The pure waiting rules (behaviour.md §4, §5, §6): the retry schedule and
 * its jitter, the hint floor, the deadline, round selection, the 429 pause,
 * the 15 s keep-alive, and the time scale the tests run them under.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "core/hints.h"
#include "core/retry.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

#define SEC 1000
#define T0  ((int64_t)1795969439000) /* an ordinary epoch time in ms */

static const sl_retry_params_t real = {0};
static const sl_retry_params_t steady = {.no_jitter = true};
static const sl_retry_params_t fast = {.time_scale = 0.01, .no_jitter = true};

/* The largest double below 1: the top of the caller's [0, 1) draw. */
#define JUST_BELOW_1 0.99999999999999989

/* ---- schedule ----------------------------------------------------------------------------------- */

Test(retry, schedule_is_2_4_8_then_16_seconds)
{
    static const struct {
        uint32_t round;
        int64_t ms;
    } rows[] = {
        {1, 2 * SEC},  {2, 4 * SEC},    {3, 8 * SEC}, {4, 16 * SEC},          {5, 16 * SEC},
        {6, 16 * SEC}, {100, 16 * SEC}, {0, 2 * SEC}, {UINT32_MAX, 16 * SEC},
    };
    for (size_t i = 0; i < N(rows); i++) {
        cr_expect_eq(sl_retry_pause_ms(rows[i].round, 0.5, &real), rows[i].ms, "round %u", rows[i].round);
        cr_expect_eq(sl_retry_pause_ms(rows[i].round, 0.0, &steady), rows[i].ms, "round %u without jitter",
                     rows[i].round);
    }
}

Test(retry, jitter_is_plus_minus_20_percent_at_the_extremes)
{
    static const struct {
        uint32_t round;
        int64_t low, high;
    } rows[] = {
        {1, 1600, 2399}, {2, 3200, 4799}, {3, 6400, 9599}, {4, 12800, 19199}, {9, 12800, 19199},
    };
    for (size_t i = 0; i < N(rows); i++) {
        cr_expect_eq(sl_retry_pause_ms(rows[i].round, 0.0, &real), rows[i].low, "round %u at 0: -20 %%",
                     rows[i].round);
        cr_expect_eq(sl_retry_pause_ms(rows[i].round, JUST_BELOW_1, &real), rows[i].high,
                     "round %u just below 1: under +20 %%", rows[i].round);
    }
    cr_expect_eq(sl_retry_pause_ms(1, 0.25, &real), 1800);
    cr_expect_eq(sl_retry_pause_ms(1, 0.75, &real), 2200);
}

Test(retry, jitter_stays_within_bounds_across_draws)
{
    for (uint32_t round = 1; round <= 5; round++) {
        int64_t nominal = sl_retry_pause_ms(round, 0.5, &real);
        int64_t prev = 0;
        for (int k = 0; k < 10000; k++) {
            double u = k / 10000.0;
            int64_t ms = sl_retry_pause_ms(round, u, &real);
            cr_assert(ms * 5 >= nominal * 4 && ms * 5 < nominal * 6, "round %u u %f: %lld", round, u,
                      (long long)ms);
            cr_assert(ms >= prev, "monotonic in the draw");
            prev = ms;
        }
    }
}

Test(retry, jitter_draws_outside_0_1_and_no_jitter_give_the_nominal_pause)
{
    static const double bad[] = {-0.1, -0.0000001, 1.0, 1.5, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < N(bad); i++)
        cr_expect_eq(sl_retry_pause_ms(1, bad[i], &real), 2 * SEC, "draw %f", bad[i]);
    cr_expect_eq(sl_retry_pause_ms(2, 0.0, &steady), 4 * SEC);
    cr_expect_eq(sl_retry_pause_ms(2, JUST_BELOW_1, &steady), 4 * SEC);
}

/* ---- time scale --------------------------------------------------------------------------------- */

Test(retry, time_scale_shrinks_the_schedule_and_never_reaches_zero)
{
    cr_expect_eq(sl_retry_pause_ms(1, 0.5, &fast), 20);
    cr_expect_eq(sl_retry_pause_ms(2, 0.5, &fast), 40);
    cr_expect_eq(sl_retry_pause_ms(3, 0.5, &fast), 80);
    cr_expect_eq(sl_retry_pause_ms(4, 0.5, &fast), 160);
    const sl_retry_params_t fast_jitter = {.time_scale = 0.01};
    cr_expect_eq(sl_retry_pause_ms(1, 0.0, &fast_jitter), 16);
    const sl_retry_params_t tiny = {.time_scale = 1e-9, .no_jitter = true};
    cr_expect_eq(sl_retry_pause_ms(1, 0.5, &tiny), 1, "a scaled pause is never 0 ms");
}

Test(retry, time_scale_outside_0_1_is_real_time)
{
    static const double scales[] = {0.0, -1.0, 1.0, 2.0, NAN, INFINITY};
    for (size_t i = 0; i < N(scales); i++) {
        const sl_retry_params_t p = {.time_scale = scales[i], .no_jitter = true};
        cr_expect_eq(sl_retry_scaled_ms(15 * SEC, &p), 15 * SEC, "scale %f", scales[i]);
    }
    cr_expect_eq(sl_retry_scaled_ms(0, &fast), 0);
    cr_expect_eq(sl_retry_scaled_ms(-5, &fast), -5);
    cr_expect_eq(sl_retry_scaled_ms(1500, &fast), 15);
}

/* ---- hint floor --------------------------------------------------------------------------------- */

Test(retry, hint_floor_lengthens_never_shortens)
{
    static const struct {
        const char *what;
        int64_t pause, hint, want;
        bool by_hint;
    } rows[] = {
        {"a 5 ms hint does not shorten a 2 s pause", 2 * SEC, 5, 2 * SEC, false},
        {"a 5 s hint lengthens it", 2 * SEC, 5 * SEC, 5 * SEC, true},
        {"a hint equal to the pause decides it", 2 * SEC, 2 * SEC, 2 * SEC, true},
        {"no hint", 2 * SEC, -1, 2 * SEC, false},
        {"a zero hint is none", 2 * SEC, 0, 2 * SEC, false},
        {"a capped hint", 16 * SEC, SL_HINT_MAX_MS, SL_HINT_MAX_MS, true},
    };
    for (size_t i = 0; i < N(rows); i++) {
        bool by_hint = !rows[i].by_hint;
        cr_expect_eq(sl_retry_hint_floor(rows[i].pause, rows[i].hint, &real, &by_hint), rows[i].want, "%s",
                     rows[i].what);
        cr_expect_eq(by_hint, rows[i].by_hint, "%s", rows[i].what);
        cr_expect_eq(sl_retry_hint_floor(rows[i].pause, rows[i].hint, &real, NULL), rows[i].want, "%s",
                     rows[i].what);
    }
}

Test(retry, hint_floor_scales_the_hint_with_the_pause)
{
    int64_t pause = sl_retry_pause_ms(1, 0.5, &fast); /* 20 ms */
    bool by_hint;
    cr_expect_eq(sl_retry_hint_floor(pause, 5, &fast, &by_hint), 20, "5 ms -> 1 ms: still shorter");
    cr_expect_not(by_hint);
    cr_expect_eq(sl_retry_hint_floor(pause, 5 * SEC, &fast, &by_hint), 50, "5 s -> 50 ms");
    cr_expect(by_hint);
}

Test(retry, hint_floor_with_parsed_headers)
{
    int64_t pause = sl_retry_pause_ms(1, 0.5, &real);
    int64_t tiny = sl_hint_parse_retry_after_ms("5", 1);
    int64_t longer = sl_hint_parse_retry_after_ms("5000", 4);
    cr_expect_eq(sl_retry_hint_floor(pause, tiny, &real, NULL), 2 * SEC);
    cr_expect_eq(sl_retry_hint_floor(pause, longer, &real, NULL), 5 * SEC);
}

/* ---- deadline ----------------------------------------------------------------------------------- */

Test(retry, may_wait_not_with_wait_secs_0_nor_for_token_counting)
{
    cr_expect(sl_retry_may_wait(120, false));
    cr_expect(sl_retry_may_wait(1, false));
    cr_expect_not(sl_retry_may_wait(0, false), "wait_secs 0 disables retrying");
    cr_expect_not(sl_retry_may_wait(120, true), "token-counting requests are never retried");
    cr_expect_not(sl_retry_may_wait(0, true));
}

Test(retry, deadline_is_arrival_plus_wait_secs_scaled)
{
    cr_expect_eq(sl_retry_deadline_ms(T0, 120, &real), T0 + 120 * SEC);
    cr_expect_eq(sl_retry_deadline_ms(T0, 600, &real), T0 + 600 * SEC);
    cr_expect_eq(sl_retry_deadline_ms(T0, 0, &real), T0);
    cr_expect_eq(sl_retry_deadline_ms(T0, 120, &fast), T0 + 1200);
    cr_expect_eq(sl_retry_deadline_ms(INT64_MAX - 5, 120, &real), INT64_MAX, "saturates");
}

Test(retry, fits_only_when_the_pause_ends_by_the_deadline)
{
    int64_t deadline = sl_retry_deadline_ms(T0, 120, &real);
    const struct {
        const char *what;
        int64_t now, pause;
        bool fits;
    } rows[] = {
        {"ends exactly at the deadline", T0 + 118 * SEC, 2 * SEC, true},
        {"ends 1 ms after it", T0 + 118 * SEC + 1, 2 * SEC, false},
        {"plenty of time", T0, 16 * SEC, true},
        {"a Retry-After beyond the deadline gives up at once", T0 + SEC, 200 * SEC, false},
        {"past the deadline", deadline + 1, 1, false},
        {"overflow", INT64_MAX - 10, 2 * SEC, false},
    };
    for (size_t i = 0; i < N(rows); i++)
        cr_expect_eq(sl_retry_fits(rows[i].now, rows[i].pause, deadline), rows[i].fits, "%s", rows[i].what);
}

Test(retry, wait_secs_0_leaves_no_room_for_any_pause)
{
    int64_t deadline = sl_retry_deadline_ms(T0, 0, &real);
    cr_expect_not(sl_retry_fits(T0, sl_retry_pause_ms(1, 0.0, &fast), deadline));
    cr_expect_not(sl_retry_fits(T0, 1, deadline));
}

Test(retry, a_round_past_the_deadline_in_scaled_time)
{
    /* wait_secs 20 scaled -> 200 ms: pauses of 20, 40 and 80 ms fit, the fourth (160 ms) would not. */
    int64_t deadline = sl_retry_deadline_ms(T0, 20, &fast);
    int64_t now = T0;
    uint32_t round = 1;
    for (;; round++) {
        int64_t pause = sl_retry_pause_ms(round, 0.5, &fast);
        if (!sl_retry_fits(now, pause, deadline))
            break;
        now += pause + 1; /* the hop itself takes a moment */
    }
    cr_expect_eq(round, 4, "rounds 1 to 3 fit in 200 ms, round 4 does not");
}

/* ---- rounds ------------------------------------------------------------------------------------- */

#define MAXC 4

typedef struct {
    const char *what;
    size_t n;
    bool temporary[MAXC], cooling[MAXC];
    size_t pinned;
    bool next[MAXC];
    size_t count;
} round_case_t;

Test(retry, round_retries_temporary_failures_in_candidate_order_cooling_ones_last_resort)
{
    static const round_case_t cases[] = {
        {"nothing temporary: no round", 3, {0, 0, 0}, {0, 0, 0}, SL_RETRY_UNPINNED, {0, 0, 0}, 0},
        {"only the temporary ones", 3, {1, 0, 1}, {0, 0, 0}, SL_RETRY_UNPINNED, {1, 0, 1}, 2},
        {"two overloaded candidates retried together", 2, {1, 1}, {0, 0}, SL_RETRY_UNPINNED, {1, 1}, 2},
        {"a cooling one is skipped", 3, {1, 1, 1}, {1, 0, 0}, SL_RETRY_UNPINNED, {0, 1, 1}, 2},
        {"all cooling: all are tried", 3, {1, 1, 1}, {1, 1, 1}, SL_RETRY_UNPINNED, {1, 1, 1}, 3},
        {"all retried ones cooling: they are tried",
         3,
         {1, 0, 1},
         {1, 0, 1},
         SL_RETRY_UNPINNED,
         {1, 0, 1},
         2},
        {"a warm candidate that failed otherwise does not exclude cooling ones",
         2,
         {1, 0},
         {1, 0},
         SL_RETRY_UNPINNED,
         {1, 0},
         1},
        {"a cooling non-temporary one is never tried", 2, {1, 0}, {0, 1}, SL_RETRY_UNPINNED, {1, 0}, 1},
        {"pinned: only its upstream", 3, {1, 1, 1}, {0, 0, 0}, 1, {0, 1, 0}, 1},
        {"pinned, cooling: still only its upstream", 3, {1, 1, 1}, {0, 1, 0}, 1, {0, 1, 0}, 1},
        {"pinned, its failure not temporary: no round", 3, {1, 0, 1}, {0, 0, 0}, 1, {0, 0, 0}, 0},
        {"pinned index n means unpinned", 2, {1, 1}, {0, 0}, 2, {1, 1}, 2},
        {"no candidates", 0, {0}, {0}, SL_RETRY_UNPINNED, {0}, 0},
    };
    for (size_t i = 0; i < N(cases); i++) {
        const round_case_t *c = &cases[i];
        bool next[MAXC];
        memset(next, 1, sizeof(next)); /* every entry must be written */
        cr_expect_eq(sl_retry_select(c->temporary, c->cooling, c->n, c->pinned, next), c->count, "%s",
                     c->what);
        for (size_t k = 0; k < c->n; k++)
            cr_expect_eq(next[k], c->next[k], "%s: candidate %zu", c->what, k);
        for (size_t k = c->n; k < MAXC; k++)
            cr_expect(next[k], "%s: past n untouched", c->what);
    }
}

/* ---- 429s --------------------------------------------------------------------------------------- */

Test(retry, ratelimit_backoff_is_5_10_20_40_then_60_seconds)
{
    static const struct {
        uint32_t streak;
        int64_t ms;
    } rows[] = {
        {1, 5 * SEC},  {2, 10 * SEC},  {3, 20 * SEC}, {4, 40 * SEC},          {5, 60 * SEC},
        {6, 60 * SEC}, {50, 60 * SEC}, {0, 5 * SEC},  {UINT32_MAX, 60 * SEC},
    };
    for (size_t i = 0; i < N(rows); i++) {
        cr_expect_eq(sl_ratelimit_pause_ms(rows[i].streak, -1, 3600, &real), rows[i].ms, "429 #%u",
                     rows[i].streak);
        cr_expect_eq(sl_ratelimit_pause_ms(rows[i].streak, -1, 3600, &fast), rows[i].ms / 100,
                     "429 #%u scaled", rows[i].streak);
    }
}

Test(retry, ratelimit_hint_replaces_the_backoff_and_is_capped)
{
    static const struct {
        const char *what;
        uint32_t streak;
        int64_t hint;
        uint32_t cap_secs;
        int64_t ms;
    } rows[] = {
        {"a shorter hint wins over the 20 s backoff", 3, 1500, 3600, 1500},
        {"a longer hint", 1, 90 * SEC, 3600, 90 * SEC},
        {"an absurd hint is capped", 1, SL_HINT_MAX_MS, 3600, 3600 * SEC},
        {"capped at the configured maximum", 2, 7200 * SEC, 86400, 7200 * SEC},
        {"a hint just at the cap", 1, 60 * SEC, 60, 60 * SEC},
        {"a zero hint is none", 2, 0, 3600, 10 * SEC},
        {"cap 0 is read as 1 s", 1, 5 * SEC, 0, 1 * SEC},
    };
    for (size_t i = 0; i < N(rows); i++) {
        cr_expect_eq(sl_ratelimit_pause_ms(rows[i].streak, rows[i].hint, rows[i].cap_secs, &real), rows[i].ms,
                     "%s", rows[i].what);
    }
    cr_expect_eq(sl_ratelimit_pause_ms(1, 1500, 3600, &fast), 15, "hints are scaled");
    cr_expect_eq(sl_ratelimit_pause_ms(1, SL_HINT_MAX_MS, 3600, &fast), 36 * SEC, "so is the cap");
}

Test(retry, ratelimit_consecutive_429s_grow_the_pause_and_a_success_resets_it)
{
    static const struct {
        bool got_429;
        int64_t pause; /* -1: no pause after a success */
    } answers[] = {
        {true, 5 * SEC}, {true, 10 * SEC}, {true, 20 * SEC}, {false, -1}, {true, 5 * SEC}, {true, 10 * SEC},
    };
    uint32_t streak = 0;
    for (size_t i = 0; i < N(answers); i++) {
        streak = sl_ratelimit_streak_next(streak, answers[i].got_429);
        if (answers[i].got_429)
            cr_expect_eq(sl_ratelimit_pause_ms(streak, -1, 3600, &real), answers[i].pause, "answer %zu", i);
        else
            cr_expect_eq(streak, 0, "a success resets the streak");
    }
    cr_expect_eq(sl_ratelimit_streak_next(UINT32_MAX, true), UINT32_MAX, "saturates");
}

/* ---- keep-alive --------------------------------------------------------------------------------- */

Test(retry, keepalive_at_15_s_of_silence_then_every_15_s_for_streams_only)
{
    cr_expect_eq(sl_keepalive_due_ms(false, T0, T0, &real), SL_RETRY_NEVER,
                 "a non-streamed client just waits");
    cr_expect_eq(sl_keepalive_due_ms(true, T0, T0, &real), T0 + 15 * SEC, "15 s after arrival");
    cr_expect_eq(sl_keepalive_due_ms(true, T0, T0 + 14999, &real), T0 + 15 * SEC, "not yet");
    cr_expect_eq(sl_keepalive_due_ms(true, T0, T0 + 15 * SEC, &real), T0 + 15 * SEC, "due now");
    cr_expect_eq(sl_keepalive_due_ms(true, T0, T0 + 40 * SEC, &real), T0 + 40 * SEC,
                 "overdue: one now, no burst");
    cr_expect_eq(sl_keepalive_due_ms(true, T0 + 10 * SEC, T0 + 12 * SEC, &real), T0 + 25 * SEC,
                 "counted from the last bytes sent");
    cr_expect_eq(sl_keepalive_due_ms(true, T0, T0, &fast), T0 + 150, "scaled");
    cr_expect_eq(sl_keepalive_due_ms(true, INT64_MAX - 5, INT64_MAX - 5, &real), INT64_MAX, "saturates");
}

Test(retry, keepalive_sequence_while_held)
{
    /* A held stream that waits 50 s: keep-alives at 15, 30 and 45 s, driven as the shell does. */
    int64_t last_sent = T0, sent[8];
    size_t n = 0;
    for (int64_t now = T0; now <= T0 + 50 * SEC; now += 500) {
        if (sl_keepalive_due_ms(true, last_sent, now, &real) <= now) {
            cr_assert(n < N(sent));
            sent[n++] = now - T0;
            last_sent = now;
        }
    }
    cr_assert_eq(n, 3);
    cr_expect_eq(sent[0], 15 * SEC);
    cr_expect_eq(sent[1], 30 * SEC);
    cr_expect_eq(sent[2], 45 * SEC);
}
