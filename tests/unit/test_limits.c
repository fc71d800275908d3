/*
 * The usage limits of behaviour.md §7: rolling windows cut into slots
 * (a charge leaves one margin slot and the window after its slot's end, a
 * ring that holds every slot still counting, long idle gaps, the clock
 * stepping back), admission and its recovery time, reservations settled up
 * and down, and calendar periods in the zone a limit is given (Europe/Berlin
 * mostly: month ends, Monday weeks, 23 and 25 hour days; New York, Lord Howe
 * Island's half-hour DST, Kolkata, UTC), read from tzdata.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <time.h>

#include "core/limits.h"
#include "test_zone.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

#define SEC   ((int64_t)1000)
#define MIN   (60 * SEC)
#define HOUR  (60 * MIN)
#define DAY   (24 * HOUR)
#define T0    ((int64_t)1789999200000) /* 2026-09-21T14:00:00Z: a whole hour, so slots start on it */
#define UNSET ((int64_t)-7)

static sl_tz_t *berlin, *new_york, *lord_howe, *kolkata, *utc_zone;

static void
load_zones(void)
{
    berlin = test_zone("Europe/Berlin");
    new_york = test_zone("America/New_York");
    lord_howe = test_zone("Australia/Lord_Howe");
    kolkata = test_zone("Asia/Kolkata");
    utc_zone = test_zone("UTC");
}

static void
free_zones(void)
{
    sl_tz_free(berlin);
    sl_tz_free(new_york);
    sl_tz_free(lord_howe);
    sl_tz_free(kolkata);
    sl_tz_free(utc_zone);
}

TestSuite(limits, .init = load_zones, .fini = free_zones);

/* ---- helpers --------------------------------------------------------------------------------- */

/* Epoch ms of a UTC date and time. */
static int64_t
utc(int year, int mon, int mday, int hour, int min)
{
    struct tm tm = {
        .tm_year = year - 1900, .tm_mon = mon - 1, .tm_mday = mday, .tm_hour = hour, .tm_min = min};
    return (int64_t)timegm(&tm) * 1000;
}

static sl_limit_state_t
rolling(sl_limit_per_t per, uint32_t every, sl_limit_measure_t measure, int64_t amount)
{
    sl_limit_t limit = {.per = per, .every = every, .measure = measure, .amount = amount};
    sl_limit_state_t s;
    sl_limit_state_init(&s, &limit, sl_limit_window_ms(&limit), berlin);
    return s;
}

/* A calendar limit counting in Berlin. */
static sl_limit_state_t
calendar(sl_limit_per_t per, sl_limit_measure_t measure, int64_t amount)
{
    sl_limit_t limit = {.per = per, .every = 1, .measure = measure, .amount = amount};
    sl_limit_state_t s;
    sl_limit_state_init(&s, &limit, 0, berlin);
    return s;
}

/* 10 k tokens per rolling 5 minutes: slots of 5 s. */
static sl_limit_state_t
five_minutes(int64_t amount)
{
    return rolling(SL_PER_MINUTE, 5, SL_MEASURE_TOKENS, amount);
}

static void
expect_period_in(const sl_tz_t *tz, sl_limit_per_t per, int64_t wall, int64_t start, int64_t end)
{
    int64_t s = UNSET, e = UNSET;
    cr_assert(sl_calendar_period(per, tz, wall, &s, &e), "a period holds %lld", (long long)wall);
    cr_expect_eq(s, start, "start %lld, want %lld (%+lld h)", (long long)s, (long long)start,
                 (long long)((s - start) / HOUR));
    cr_expect_eq(e, end, "end %lld, want %lld (%+lld h)", (long long)e, (long long)end,
                 (long long)((e - end) / HOUR));
}

/* Most periods below are Berlin's. */
static void
expect_period(sl_limit_per_t per, int64_t wall, int64_t start, int64_t end)
{
    expect_period_in(berlin, per, wall, start, end);
}

static void
expect_check(sl_limit_state_t *s, int64_t now, int64_t need, sl_limit_verdict_t verdict, int64_t recovery)
{
    int64_t r = UNSET;
    cr_expect_eq(sl_limit_check(s, now, need, &r), verdict, "verdict for %lld at +%lld", (long long)need,
                 (long long)(now - T0));
    cr_expect_eq(r, recovery, "recovery for %lld at +%lld: +%lld", (long long)need, (long long)(now - T0),
                 (long long)(r - T0));
}

/* ---- rolling windows ------------------------------------------------------------------------- */

Test(limits, a_window_is_every_units_long_and_cut_into_60_slots)
{
    sl_limit_t five_min = {.per = SL_PER_MINUTE, .every = 5};
    sl_limit_t one_hour = {.per = SL_PER_HOUR, .every = 1};
    sl_limit_t day_of_hours = {.per = SL_PER_HOUR, .every = 24};
    cr_expect_eq(sl_limit_window_ms(&five_min), 5 * MIN);
    cr_expect_eq(sl_limit_window_ms(&one_hour), HOUR);
    cr_expect_eq(sl_limit_window_ms(&day_of_hours), DAY);
    sl_limit_t per[] = {
        {.per = SL_PER_DAY, .every = 1}, {.per = SL_PER_WEEK, .every = 1}, {.per = SL_PER_MONTH}};
    for (size_t i = 0; i < N(per); i++)
        cr_expect_eq(sl_limit_window_ms(&per[i]), 0, "calendar period %zu has no window", i);

    sl_limit_state_t s = five_minutes(100);
    cr_expect_eq(s.window_ms, 5 * MIN);
    cr_expect_eq(s.slot_ms, 5 * SEC);
    sl_limit_state_init(&s, &five_min, 61, berlin); /* scaled for a test: slots round up */
    cr_expect_eq(s.window_ms, 61);
    cr_expect_eq(s.slot_ms, 2);
    sl_limit_state_init(&s, &five_min, 1, berlin);
    cr_expect_eq(s.slot_ms, 1);
}

Test(limits, a_charge_leaves_a_rolling_window_with_its_slot)
{
    sl_limit_state_t s = five_minutes(10000);
    sl_limit_add(&s, T0 + 1234, T0 + 1234, 700);
    cr_expect_eq(sl_limit_used(&s, T0 + 1234), 700);
    /* The slot [T0, T0 + 5 s) ends at T0 + 5 s; the charge counts a margin slot and a window past that. */
    cr_expect_eq(sl_limit_used(&s, T0 + 10 * SEC + 5 * MIN - 1), 700);
    cr_expect_eq(sl_limit_resets_at_ms(&s, T0 + 10 * SEC + 5 * MIN - 1), T0 + 10 * SEC + 5 * MIN);
    cr_expect_eq(sl_limit_used(&s, T0 + 10 * SEC + 5 * MIN), 0, "gone at the instant of expiry");
    cr_expect_eq(sl_limit_resets_at_ms(&s, T0 + 10 * SEC + 5 * MIN), T0 + 10 * SEC + 5 * MIN,
                 "nothing counts: resets now");
}

Test(limits, a_charge_exactly_at_a_slot_boundary_belongs_to_the_slot_it_opens)
{
    sl_limit_state_t s = five_minutes(10000);
    sl_limit_add(&s, T0 + 5 * SEC - 1, T0 + 5 * SEC, 1); /* last ms of slot 0 */
    sl_limit_add(&s, T0 + 5 * SEC, T0 + 5 * SEC, 10);    /* first ms of slot 1 */
    cr_expect_eq(sl_limit_used(&s, T0 + 10 * SEC + 5 * MIN - 1), 11);
    cr_expect_eq(sl_limit_used(&s, T0 + 10 * SEC + 5 * MIN), 10);
    cr_expect_eq(sl_limit_used(&s, T0 + 15 * SEC + 5 * MIN - 1), 10);
    cr_expect_eq(sl_limit_used(&s, T0 + 15 * SEC + 5 * MIN), 0);
}

Test(limits, a_charge_counts_one_margin_slot_past_its_slots_end_for_the_upstreams_lag)
{
    /* 1 request per minute: slots of 1 s. */
    sl_limit_state_t s = rolling(SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 1);
    cr_assert_eq(s.slot_ms, SEC);
    /* Sent in the last ms of slot [T0, T0 + 1 s); the upstream reads it 41 ms later (a cold connection). */
    int64_t sent = T0 + 999, read = sent + 41;
    sl_limit_add(&s, sent, sent, 1);
    /* The upstream counts it until read + 60 s. Slot end + window alone would let the next one in before. */
    cr_expect_lt(T0 + SEC + MIN, read + MIN);
    expect_check(&s, T0 + SEC + MIN, 1, SL_LIMIT_WINDOW_FULL, T0 + 2 * SEC + MIN);
    expect_check(&s, read + MIN - 1, 1, SL_LIMIT_WINDOW_FULL, T0 + 2 * SEC + MIN);
    /* It leaves with its slot's end + one margin slot + the window: sent + 1 ms + 1 s + 60 s. */
    cr_expect_eq(sl_limit_resets_at_ms(&s, sent), T0 + 2 * SEC + MIN);
    cr_expect_eq(sl_limit_used(&s, T0 + 2 * SEC + MIN - 1), 1);
    expect_check(&s, T0 + 2 * SEC + MIN, 1, SL_LIMIT_OK, UNSET);

    /* Sent in a slot's first ms, it counts two slots past the window: one to two slots late, never early. */
    sl_limit_state_t f = rolling(SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 1);
    sl_limit_add(&f, T0, T0, 1);
    cr_expect_eq(sl_limit_resets_at_ms(&f, T0), T0 + 2 * SEC + MIN);
    expect_check(&f, T0 + 2 * SEC + MIN - 1, 1, SL_LIMIT_WINDOW_FULL, T0 + 2 * SEC + MIN);
    expect_check(&f, T0 + 2 * SEC + MIN, 1, SL_LIMIT_OK, UNSET);
}

Test(limits, the_ring_holds_every_slot_that_still_counts)
{
    /* 5 minutes in 5 s slots: at the last ms of slot 61, slots 0 to 61 (62 of them) all still count. */
    sl_limit_state_t s = five_minutes(1000);
    cr_assert_eq(N(s.ring), 63);
    for (int64_t k = 0; k <= 61; k++)
        sl_limit_add(&s, T0 + k * 5 * SEC, T0 + k * 5 * SEC, 1);
    cr_expect_eq(sl_limit_used(&s, T0 + 310 * SEC - 1), 62);
    cr_expect_eq(sl_limit_resets_at_ms(&s, T0 + 310 * SEC - 1), T0 + 615 * SEC);
    expect_check(&s, T0 + 310 * SEC - 1, 939, SL_LIMIT_WINDOW_FULL, T0 + 310 * SEC);
    cr_expect_eq(sl_limit_used(&s, T0 + 310 * SEC), 61, "slot 0 leaves at its end + 5 s + 5 min");

    /* Jumping straight from slot 0 to slot 61 keeps slot 0 too. */
    sl_limit_state_t j = five_minutes(1000);
    sl_limit_add(&j, T0, T0, 9);
    cr_expect_eq(sl_limit_used(&j, T0 + 310 * SEC - 1), 9);
    sl_limit_add(&j, T0 + 310 * SEC - 1, T0 + 310 * SEC - 1, 1);
    cr_expect_eq(sl_limit_used(&j, T0 + 310 * SEC - 1), 10);
    cr_expect_eq(sl_limit_used(&j, T0 + 310 * SEC), 1);
}

Test(limits, an_odd_window_expires_by_slot_end_not_by_ring_place)
{
    /* 61 ms in slots of 2 ms: the ring spans 126 ms, more than twice the window. */
    sl_limit_t limit = {.per = SL_PER_MINUTE, .every = 1, .measure = SL_MEASURE_REQUESTS, .amount = 5};
    sl_limit_state_t s;
    sl_limit_state_init(&s, &limit, 61, berlin);
    cr_assert_eq(N(s.ring), 63);
    sl_limit_add(&s, T0 + 1, T0 + 1, 3);
    cr_expect_eq(sl_limit_used(&s, T0 + 64), 3);
    cr_expect_eq(sl_limit_used(&s, T0 + 65), 0, "slot end (T0 + 2) + margin slot (2 ms) + 61 ms");
    expect_check(&s, T0 + 65, 5, SL_LIMIT_OK, UNSET);
    /* Expired, yet still in its ring place: the head is slot 32 after it, the ring holds 63. */
    cr_expect_eq(s.head_slot - (T0 / 2), 32);
    cr_expect_eq(s.ring[(T0 / 2) % (int64_t)N(s.ring)], 3);
}

Test(limits, a_long_idle_gap_empties_the_ring)
{
    sl_limit_state_t s = five_minutes(100);
    for (int64_t t = 0; t < 5 * MIN; t += 5 * SEC)
        sl_limit_add(&s, T0 + t, T0 + t, 1);
    cr_expect_eq(sl_limit_used(&s, T0 + 5 * MIN - 1), 60);
    expect_check(&s, T0 + 5 * MIN - 1, 41, SL_LIMIT_WINDOW_FULL, T0 + 10 * SEC + 5 * MIN);

    /* Three days (51840 slots, far more than the ring's 63) later: nothing from before counts, not even in a
     * slot whose ring place is reused. */
    int64_t later = T0 + 3 * DAY;
    cr_expect_eq(sl_limit_used(&s, later), 0);
    cr_expect_eq(sl_limit_resets_at_ms(&s, later), later);
    sl_limit_add(&s, later, later, 7);
    cr_expect_eq(sl_limit_used(&s, later), 7);
    int64_t held = 0;
    for (size_t i = 0; i < N(s.ring); i++)
        held += s.ring[i];
    cr_expect_eq(held, 7, "the ring holds only the new charge");
}

Test(limits, a_short_gap_empties_the_ring_places_it_reuses)
{
    sl_limit_state_t s = five_minutes(100);
    sl_limit_add(&s, T0, T0, 1);                       /* slot 0, ends +310 s */
    sl_limit_add(&s, T0 + 50 * SEC, T0 + 50 * SEC, 2); /* slot 10, ends +360 s */
    cr_expect_eq(sl_limit_used(&s, T0 + 309 * SEC), 3);
    cr_expect_eq(s.head_slot - T0 / (5 * SEC), 61);
    /* Slot 63 takes slot 0's ring place: moving there (two slots on) empties it. */
    cr_expect_eq(sl_limit_used(&s, T0 + 315 * SEC), 2);
    sl_limit_add(&s, T0 + 315 * SEC, T0 + 315 * SEC, 4);
    cr_expect_eq(sl_limit_used(&s, T0 + 315 * SEC), 6);
    cr_expect_eq(sl_limit_used(&s, T0 + 360 * SEC), 4);
    cr_expect_eq(sl_limit_used(&s, T0 + 625 * SEC - 1), 4);
    cr_expect_eq(sl_limit_used(&s, T0 + 625 * SEC), 0);
}

Test(limits, a_reservation_settles_down_and_up_at_its_own_time)
{
    sl_limit_state_t s = five_minutes(10000);
    sl_limit_add(&s, T0, T0, 5000);                      /* the estimate, charged at admission */
    sl_limit_add(&s, T0 + 20 * SEC, T0 + 20 * SEC, 100); /* another request, later */
    sl_limit_add(&s, T0, T0 + 30 * SEC, -1800);          /* the real figure came in lower */
    cr_expect_eq(sl_limit_used(&s, T0 + 30 * SEC), 3300);
    sl_limit_add(&s, T0, T0 + 40 * SEC, 250); /* a later correction upwards */
    cr_expect_eq(sl_limit_used(&s, T0 + 40 * SEC), 3550);
    /* Settled at the charge's time: it leaves with the admission's slot, not the settlement's. */
    cr_expect_eq(sl_limit_used(&s, T0 + 10 * SEC + 5 * MIN - 1), 3550);
    cr_expect_eq(sl_limit_used(&s, T0 + 10 * SEC + 5 * MIN), 100);
}

Test(limits, taking_back_more_than_a_slot_holds_stops_at_zero)
{
    sl_limit_state_t s = five_minutes(10000);
    sl_limit_add(&s, T0, T0, 300);
    sl_limit_add(&s, T0 + 10 * SEC, T0 + 10 * SEC, 40);
    sl_limit_add(&s, T0, T0 + 10 * SEC, -1000);
    cr_expect_eq(sl_limit_used(&s, T0 + 10 * SEC), 40, "the other slot keeps its charge");
    sl_limit_add(&s, T0, T0 + 10 * SEC, 5);
    cr_expect_eq(sl_limit_used(&s, T0 + 10 * SEC), 45, "the emptied slot starts again from 0");
}

Test(limits, a_settlement_after_its_slot_left_is_dropped)
{
    sl_limit_state_t s = five_minutes(10000);
    sl_limit_add(&s, T0, T0, 300);
    sl_limit_add(&s, T0 + 5 * MIN, T0 + 5 * MIN, 40);
    sl_limit_add(&s, T0, T0 + 10 * SEC + 5 * MIN, 999); /* its slot left the window at this very instant */
    cr_expect_eq(sl_limit_used(&s, T0 + 10 * SEC + 5 * MIN), 40);
    /* Dropped, not parked in the expired slot: a clock stepping back finds slot 0 as it was. */
    cr_expect_eq(sl_limit_used(&s, T0 + SEC), 340);
    sl_limit_add(&s, T0, T0 + 10 * SEC + 5 * MIN, -999);
    cr_expect_eq(sl_limit_used(&s, T0 + 10 * SEC + 5 * MIN), 40);
    cr_expect_eq(sl_limit_used(&s, T0 + SEC), 340);
}

Test(limits, a_charge_in_the_future_counts_as_now)
{
    sl_limit_state_t s = five_minutes(10000);
    sl_limit_add(&s, T0 + HOUR, T0, 9);
    cr_expect_eq(sl_limit_used(&s, T0), 9);
    cr_expect_eq(sl_limit_resets_at_ms(&s, T0), T0 + 10 * SEC + 5 * MIN, "in now's slot, not an hour later");
}

Test(limits, a_full_window_recovers_when_enough_has_left)
{
    sl_limit_state_t s = five_minutes(100);
    sl_limit_add(&s, T0, T0, 30);                       /* ends +310 s */
    sl_limit_add(&s, T0 + 10 * SEC, T0 + 10 * SEC, 30); /* ends +320 s */
    sl_limit_add(&s, T0 + 20 * SEC, T0 + 20 * SEC, 40); /* ends +330 s */
    expect_check(&s, T0 + MIN, 50, SL_LIMIT_WINDOW_FULL, T0 + 320 * SEC);
    expect_check(&s, T0 + MIN, 30, SL_LIMIT_WINDOW_FULL, T0 + 310 * SEC);
    expect_check(&s, T0 + MIN, 31, SL_LIMIT_WINDOW_FULL, T0 + 320 * SEC);
    expect_check(&s, T0 + MIN, 100, SL_LIMIT_WINDOW_FULL, T0 + 330 * SEC);
    expect_check(&s, T0 + 320 * SEC - 1, 50, SL_LIMIT_WINDOW_FULL, T0 + 320 * SEC);
    expect_check(&s, T0 + 320 * SEC, 50, SL_LIMIT_OK, UNSET);
    expect_check(&s, T0 + 320 * SEC, 61, SL_LIMIT_WINDOW_FULL, T0 + 330 * SEC);
    cr_expect_eq(sl_limit_used(&s, T0 + 320 * SEC), 40, "a check charges nothing");
}

Test(limits, a_need_that_fits_exactly_is_admitted)
{
    sl_limit_state_t s = five_minutes(100);
    sl_limit_add(&s, T0, T0, 60);
    expect_check(&s, T0 + SEC, 40, SL_LIMIT_OK, UNSET);
    expect_check(&s, T0 + SEC, 41, SL_LIMIT_WINDOW_FULL, T0 + 310 * SEC);
}

Test(limits, a_zero_need_on_a_used_up_window_waits)
{
    sl_limit_state_t s = five_minutes(100);
    sl_limit_add(&s, T0, T0, 99);
    expect_check(&s, T0, 0, SL_LIMIT_OK, UNSET);
    sl_limit_add(&s, T0 + 7 * SEC, T0 + 7 * SEC, 1);
    expect_check(&s, T0 + 7 * SEC, 0, SL_LIMIT_WINDOW_FULL, T0 + 310 * SEC);
    /* Settled above the limit: slot 0 leaving is not enough, slot 1 alone holds the whole amount. */
    sl_limit_add(&s, T0 + 7 * SEC, T0 + 7 * SEC, 99);
    expect_check(&s, T0 + 8 * SEC, 0, SL_LIMIT_WINDOW_FULL, T0 + 315 * SEC);
    expect_check(&s, T0 + 8 * SEC, -5, SL_LIMIT_WINDOW_FULL, T0 + 315 * SEC);
}

Test(limits, a_need_larger_than_the_whole_limit_is_never)
{
    sl_limit_state_t s = five_minutes(100);
    expect_check(&s, T0, 101, SL_LIMIT_NEVER, UNSET);
    expect_check(&s, T0, 100, SL_LIMIT_OK, UNSET);
    sl_limit_add(&s, T0, T0, 100);
    expect_check(&s, T0, 101, SL_LIMIT_NEVER, UNSET);
    sl_limit_state_t d = calendar(SL_PER_DAY, SL_MEASURE_REQUESTS, 3);
    expect_check(&d, T0, 4, SL_LIMIT_NEVER, UNSET);
}

Test(limits, a_limit_of_nothing_admits_nothing)
{
    sl_limit_state_t s = five_minutes(0);
    expect_check(&s, T0, 0, SL_LIMIT_NEVER, UNSET);
    sl_limit_state_t d = calendar(SL_PER_MONTH, SL_MEASURE_COST, 0);
    expect_check(&d, T0, 0, SL_LIMIT_NEVER, UNSET);
}

Test(limits, a_one_hour_window_with_every_24_is_a_rolling_day)
{
    sl_limit_state_t s = rolling(SL_PER_HOUR, 24, SL_MEASURE_REQUESTS, 2);
    cr_expect_eq(s.slot_ms, 24 * MIN);
    sl_limit_add(&s, T0 + 10 * MIN, T0 + 10 * MIN, 1); /* slot [T0, T0 + 24 min) */
    sl_limit_add(&s, T0 + 3 * HOUR, T0 + 3 * HOUR, 1); /* slot [T0 + 168 min, T0 + 192 min) */
    /* Each leaves one margin slot (24 min) after its slot's end, plus the day. */
    expect_check(&s, T0 + 12 * HOUR, 1, SL_LIMIT_WINDOW_FULL, T0 + 48 * MIN + DAY);
    cr_expect_eq(sl_limit_used(&s, T0 + 48 * MIN + DAY - 1), 2);
    cr_expect_eq(sl_limit_used(&s, T0 + 48 * MIN + DAY), 1);
    cr_expect_eq(sl_limit_resets_at_ms(&s, T0 + 48 * MIN + DAY), T0 + 216 * MIN + DAY);
}

Test(limits, a_past_minute_bucket_counts_while_it_is_in_the_window)
{
    /* Restored after a restart at +10 min 5 s: each persisted minute as of its bucket's last ms. */
    sl_limit_state_t s = five_minutes(10000);
    int64_t now = T0 + 10 * MIN + 5 * SEC;
    sl_limit_add(&s, T0 + 5 * MIN - 1, now, 100); /* bucket [4, 5) min: left at +5 min + 5 s + 5 min */
    sl_limit_add(&s, T0 + 6 * MIN - 1, now, 20);  /* bucket [5, 6): counts until +11 min 5 s */
    sl_limit_add(&s, T0 + 10 * MIN - 1, now, 3);  /* bucket [9, 10): counts until +15 min 5 s */
    sl_limit_add(&s, T0 - DAY, now, 1000);        /* yesterday */
    cr_expect_eq(sl_limit_used(&s, now), 23);
    cr_expect_eq(sl_limit_used(&s, T0 + 11 * MIN + 5 * SEC - 1), 23);
    cr_expect_eq(sl_limit_used(&s, T0 + 11 * MIN + 5 * SEC), 3);
    cr_expect_eq(sl_limit_used(&s, T0 + 15 * MIN + 5 * SEC - 1), 3);
    cr_expect_eq(sl_limit_used(&s, T0 + 15 * MIN + 5 * SEC), 0);
}

Test(limits, a_small_clock_step_back_expires_nothing_and_charges_its_own_slot)
{
    sl_limit_state_t s = five_minutes(100);
    sl_limit_add(&s, T0 + 100 * SEC, T0 + 100 * SEC, 7); /* ends +410 s */
    int64_t back = T0 + 50 * SEC;
    cr_expect_eq(sl_limit_used(&s, back), 7);
    cr_expect_eq(s.head_slot, (T0 + 100 * SEC) / (5 * SEC), "the head stays");
    sl_limit_add(&s, back, back, 3);           /* its own slot, ends +360 s */
    sl_limit_add(&s, T0 + 100 * SEC, back, 1); /* "later" than now: counts as now */
    cr_expect_eq(sl_limit_used(&s, back), 11);
    expect_check(&s, back, 90, SL_LIMIT_WINDOW_FULL, T0 + 360 * SEC);
    cr_expect_eq(sl_limit_resets_at_ms(&s, back), T0 + 410 * SEC);
    cr_expect_eq(sl_limit_used(&s, T0 + 360 * SEC - 1), 11);
    cr_expect_eq(sl_limit_used(&s, T0 + 360 * SEC), 7);
    cr_expect_eq(sl_limit_used(&s, T0 + 410 * SEC - 1), 7);
    cr_expect_eq(sl_limit_used(&s, T0 + 410 * SEC), 0);
}

Test(limits, a_clock_step_back_beyond_the_ring_counts_a_charge_too_long_not_too_short)
{
    sl_limit_state_t s = five_minutes(100);
    sl_limit_add(&s, T0 + 10 * MIN, T0 + 10 * MIN, 10); /* slot 120, ends +910 s */
    /* Ten minutes back: slot 0 is 120 slots behind the head, the ring holds 63 (slots 58 to 120). */
    cr_expect_eq(sl_limit_used(&s, T0), 10);
    sl_limit_add(&s, T0, T0, 5); /* into the oldest slot held, 58: ends +600 s instead of +310 s */
    cr_expect_eq(s.ring[(T0 / (5 * SEC) + 58) % (int64_t)N(s.ring)], 5);
    cr_expect_eq(sl_limit_used(&s, T0), 15);
    cr_expect_eq(sl_limit_used(&s, T0 + 310 * SEC), 15);
    cr_expect_eq(sl_limit_used(&s, T0 + 600 * SEC - 1), 15);
    cr_expect_eq(sl_limit_used(&s, T0 + 600 * SEC), 10);
    cr_expect_eq(sl_limit_used(&s, T0 + 910 * SEC - 1), 10);
    cr_expect_eq(sl_limit_used(&s, T0 + 910 * SEC), 0);
    /*
     * Back to 1970 and before: the head is slot 182, and slot 120, the oldest
     * the ring holds, is still in it and counts again until the clock catches
     * up with its end; a charge there joins slot 120. Nothing is indexed out
     * of range (the sanitizer build).
     */
    cr_expect_eq(s.head_slot - T0 / (5 * SEC), 182);
    cr_expect_eq(sl_limit_used(&s, 0), 10);
    sl_limit_add(&s, -5 * DAY, -5 * DAY, 1);
    cr_expect_eq(sl_limit_used(&s, -5 * DAY), 11);
    cr_expect_eq(sl_limit_resets_at_ms(&s, -5 * DAY), T0 + 910 * SEC);
}

Test(limits, amounts_of_1e15_tokens_neither_overflow_nor_wrap)
{
    int64_t big = 1000000000000000; /* 1e15 */
    sl_limit_state_t s = five_minutes(big);
    expect_check(&s, T0, big, SL_LIMIT_OK, UNSET);
    sl_limit_add(&s, T0, T0, big - 1);
    expect_check(&s, T0, 1, SL_LIMIT_OK, UNSET);
    expect_check(&s, T0, 2, SL_LIMIT_WINDOW_FULL, T0 + 310 * SEC);
    expect_check(&s, T0, big, SL_LIMIT_WINDOW_FULL, T0 + 310 * SEC);
    /* Runaway settlements saturate instead of wrapping negative. */
    sl_limit_add(&s, T0, T0, INT64_MAX);
    sl_limit_add(&s, T0 + 5 * SEC, T0 + 5 * SEC, INT64_MAX);
    cr_expect_eq(sl_limit_used(&s, T0 + 5 * SEC), INT64_MAX);
    expect_check(&s, T0 + 5 * SEC, 0, SL_LIMIT_WINDOW_FULL, T0 + 315 * SEC);
    cr_expect_eq(sl_limit_resets_at_ms(&s, T0 + 5 * SEC), T0 + 315 * SEC);
}

/* ---- calendar periods ------------------------------------------------------------------------ */

Test(limits, a_day_runs_from_local_midnight_to_local_midnight)
{
    /* 2026-05-12 15:00 CEST */
    expect_period(SL_PER_DAY, utc(2026, 5, 12, 13, 0), utc(2026, 5, 11, 22, 0), utc(2026, 5, 12, 22, 0));
    /* Local midnight starts the day it opens; the last ms before belongs to the previous one. */
    expect_period(SL_PER_DAY, utc(2026, 5, 11, 22, 0), utc(2026, 5, 11, 22, 0), utc(2026, 5, 12, 22, 0));
    expect_period(SL_PER_DAY, utc(2026, 5, 11, 22, 0) - 1, utc(2026, 5, 10, 22, 0), utc(2026, 5, 11, 22, 0));
    /* Winter: CET, one hour ahead of UTC. */
    expect_period(SL_PER_DAY, utc(2026, 1, 10, 0, 30), utc(2026, 1, 9, 23, 0), utc(2026, 1, 10, 23, 0));
}

Test(limits, dst_change_days_are_23_and_25_hours_long)
{
    int64_t s, e;
    expect_period(SL_PER_DAY, utc(2026, 3, 29, 10, 0), utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 22, 0));
    cr_assert(sl_calendar_period(SL_PER_DAY, berlin, utc(2026, 3, 29, 10, 0), &s, &e));
    cr_expect_eq(e - s, 23 * HOUR);
    expect_period(SL_PER_DAY, utc(2026, 10, 25, 10, 0), utc(2026, 10, 24, 22, 0), utc(2026, 10, 25, 23, 0));
    cr_assert(sl_calendar_period(SL_PER_DAY, berlin, utc(2026, 10, 25, 10, 0), &s, &e));
    cr_expect_eq(e - s, 25 * HOUR);
    /* Within the repeated hour (02:00-03:00 twice) the day is the same. */
    expect_period(SL_PER_DAY, utc(2026, 10, 25, 0, 30), utc(2026, 10, 24, 22, 0), utc(2026, 10, 25, 23, 0));
    expect_period(SL_PER_DAY, utc(2026, 10, 25, 1, 30), utc(2026, 10, 24, 22, 0), utc(2026, 10, 25, 23, 0));
}

Test(limits, a_week_starts_on_monday)
{
    /* Sunday 2026-05-17 23:30 CEST is in the week that started on Monday 2026-05-11. */
    expect_period(SL_PER_WEEK, utc(2026, 5, 17, 21, 30), utc(2026, 5, 10, 22, 0), utc(2026, 5, 17, 22, 0));
    /* Monday 2026-05-18 00:00 CEST starts a new one. */
    expect_period(SL_PER_WEEK, utc(2026, 5, 17, 22, 0), utc(2026, 5, 17, 22, 0), utc(2026, 5, 24, 22, 0));
    /* A Wednesday. */
    expect_period(SL_PER_WEEK, utc(2026, 5, 20, 9, 0), utc(2026, 5, 17, 22, 0), utc(2026, 5, 24, 22, 0));
    /* The week holding the spring change is 167 hours long. */
    expect_period(SL_PER_WEEK, utc(2026, 3, 29, 12, 0), utc(2026, 3, 22, 23, 0), utc(2026, 3, 29, 22, 0));
    /* New Year's Day 2026, a Thursday: the week started in 2025. */
    expect_period(SL_PER_WEEK, utc(2026, 1, 1, 12, 0), utc(2025, 12, 28, 23, 0), utc(2026, 1, 4, 23, 0));
}

Test(limits, a_month_runs_from_the_1st_to_the_next_1st)
{
    /* Jan 31 23:59:59.999 local is still January; Feb 1 00:00 local is February. */
    int64_t feb1 = utc(2026, 1, 31, 23, 0);
    expect_period(SL_PER_MONTH, feb1 - 1, utc(2025, 12, 31, 23, 0), feb1);
    expect_period(SL_PER_MONTH, feb1, feb1, utc(2026, 2, 28, 23, 0));
    /* Leap year: February 2028 has 29 days. */
    expect_period(SL_PER_MONTH, utc(2028, 2, 29, 12, 0), utc(2028, 1, 31, 23, 0), utc(2028, 2, 29, 23, 0));
    /* March holds the spring change: it starts in CET and ends in CEST. */
    expect_period(SL_PER_MONTH, utc(2026, 3, 15, 12, 0), utc(2026, 2, 28, 23, 0), utc(2026, 3, 31, 22, 0));
    /* December rolls into the next year. */
    expect_period(SL_PER_MONTH, utc(2026, 12, 15, 12, 0), utc(2026, 11, 30, 23, 0), utc(2026, 12, 31, 23, 0));
}

Test(limits, periods_follow_each_zones_own_midnights)
{
    const struct {
        sl_tz_t **zone;
        sl_limit_per_t per;
        int64_t wall, start, end;
    } rows[] = {
        /* New York, Sunday 2026-03-08: 02:00 EST became 03:00 EDT, 23 hours; 2026-11-01 back, 25. */
        {&new_york, SL_PER_DAY, utc(2026, 3, 8, 12, 0), utc(2026, 3, 8, 5, 0), utc(2026, 3, 9, 4, 0)},
        {&new_york, SL_PER_DAY, utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 4, 0), utc(2026, 11, 2, 5, 0)},
        /* The week holding the spring change starts Monday in EST and ends Monday in EDT. */
        {&new_york, SL_PER_WEEK, utc(2026, 3, 8, 12, 0), utc(2026, 3, 2, 5, 0), utc(2026, 3, 9, 4, 0)},
        /* Sunday 2026-03-15 23:30 EDT is in the week of Monday the 9th; Monday 00:00 starts the next. */
        {&new_york, SL_PER_WEEK, utc(2026, 3, 16, 3, 30), utc(2026, 3, 9, 4, 0), utc(2026, 3, 16, 4, 0)},
        {&new_york, SL_PER_WEEK, utc(2026, 3, 16, 4, 0), utc(2026, 3, 16, 4, 0), utc(2026, 3, 23, 4, 0)},
        /* The leap February, and March across the change. */
        {&new_york, SL_PER_MONTH, utc(2028, 2, 29, 23, 0), utc(2028, 2, 1, 5, 0), utc(2028, 3, 1, 5, 0)},
        {&new_york, SL_PER_MONTH, utc(2026, 3, 31, 12, 0), utc(2026, 3, 1, 5, 0), utc(2026, 4, 1, 4, 0)},
        /* Lord Howe Island, +10:30 or +11: days of 23.5 and 24.5 hours. */
        {&lord_howe, SL_PER_DAY, utc(2026, 10, 4, 0, 0), utc(2026, 10, 3, 13, 30), utc(2026, 10, 4, 13, 0)},
        {&lord_howe, SL_PER_DAY, utc(2026, 4, 5, 0, 0), utc(2026, 4, 4, 13, 0), utc(2026, 4, 5, 13, 30)},
        {&lord_howe, SL_PER_WEEK, utc(2026, 10, 4, 0, 0), utc(2026, 9, 27, 13, 30), utc(2026, 10, 4, 13, 0)},
        /* Kolkata, +5:30 all year. */
        {&kolkata, SL_PER_DAY, utc(2026, 6, 1, 12, 0), utc(2026, 5, 31, 18, 30), utc(2026, 6, 1, 18, 30)},
        {&kolkata, SL_PER_DAY, utc(2026, 5, 31, 18, 30) - 1, utc(2026, 5, 30, 18, 30),
         utc(2026, 5, 31, 18, 30)},
        {&kolkata, SL_PER_MONTH, utc(2026, 1, 31, 18, 29), utc(2025, 12, 31, 18, 30),
         utc(2026, 1, 31, 18, 30)},
        {&kolkata, SL_PER_MONTH, utc(2026, 1, 31, 18, 30), utc(2026, 1, 31, 18, 30),
         utc(2026, 2, 28, 18, 30)},
        /* UTC; Sunday 2026-11-29 is in the week of Monday the 23rd. */
        {&utc_zone, SL_PER_DAY, utc(2026, 11, 29, 16, 23), utc(2026, 11, 29, 0, 0), utc(2026, 11, 30, 0, 0)},
        {&utc_zone, SL_PER_WEEK, utc(2026, 11, 29, 16, 23), utc(2026, 11, 23, 0, 0), utc(2026, 11, 30, 0, 0)},
        {&utc_zone, SL_PER_MONTH, utc(2026, 12, 31, 23, 59), utc(2026, 12, 1, 0, 0), utc(2027, 1, 1, 0, 0)},
    };
    for (size_t i = 0; i < N(rows); i++)
        expect_period_in(*rows[i].zone, rows[i].per, rows[i].wall, rows[i].start, rows[i].end);
}

Test(limits, a_zone_replaced_between_calls_takes_over_at_the_next_period)
{
    /* What a reload with another `timezone` does: the running period keeps its bounds, the next is the new
     * zone's. */
    sl_limit_state_t s = calendar(SL_PER_DAY, SL_MEASURE_REQUESTS, 10);
    int64_t noon = utc(2026, 6, 1, 10, 0), berlin_end = utc(2026, 6, 1, 22, 0);
    sl_limit_add(&s, noon, noon, 4);
    s.tz = kolkata;
    cr_expect_eq(sl_limit_used(&s, noon + HOUR), 4);
    cr_expect_eq(sl_limit_resets_at_ms(&s, noon + HOUR), berlin_end);
    cr_expect_eq(sl_limit_used(&s, berlin_end), 0);
    cr_expect_eq(s.period_start_ms, utc(2026, 6, 1, 18, 30));
    cr_expect_eq(s.period_end_ms, utc(2026, 6, 2, 18, 30));
}

Test(limits, minute_and_hour_are_not_calendar_periods)
{
    int64_t s = UNSET, e = UNSET;
    cr_expect_not(sl_calendar_period(SL_PER_MINUTE, berlin, T0, &s, &e));
    cr_expect_not(sl_calendar_period(SL_PER_HOUR, berlin, T0, &s, &e));
    cr_expect_eq(s, UNSET);
    cr_expect_eq(e, UNSET);
}

Test(limits, a_used_up_period_waits_for_its_end_and_rolling_over_resets_it)
{
    sl_limit_state_t s = calendar(SL_PER_DAY, SL_MEASURE_TOKENS, 1000);
    int64_t noon = utc(2026, 5, 12, 10, 0), end = utc(2026, 5, 12, 22, 0);
    sl_limit_add(&s, noon, noon, 600);
    expect_check(&s, noon, 400, SL_LIMIT_OK, UNSET);
    expect_check(&s, noon, 401, SL_LIMIT_PERIOD_USED_UP, end);
    sl_limit_add(&s, noon, noon, 400);
    expect_check(&s, noon, 0, SL_LIMIT_PERIOD_USED_UP, end);
    cr_expect_eq(sl_limit_resets_at_ms(&s, noon), end);
    cr_expect_eq(sl_limit_used(&s, end - 1), 1000);
    cr_expect_eq(sl_limit_used(&s, end), 0);
    cr_expect_eq(s.period_start_ms, end);
    cr_expect_eq(s.period_end_ms, utc(2026, 5, 13, 22, 0));
    expect_check(&s, end, 1000, SL_LIMIT_OK, UNSET);
    cr_expect_eq(sl_limit_resets_at_ms(&s, end), utc(2026, 5, 13, 22, 0));
}

Test(limits, a_charge_from_the_previous_period_is_dropped)
{
    sl_limit_state_t s = calendar(SL_PER_WEEK, SL_MEASURE_REQUESTS, 10);
    int64_t sunday = utc(2026, 5, 17, 21, 30), monday = utc(2026, 5, 17, 22, 0);
    sl_limit_add(&s, sunday, sunday, 4);
    cr_expect_eq(sl_limit_used(&s, sunday), 4);
    sl_limit_add(&s, monday + 1, monday + 1, 1);
    sl_limit_add(&s, sunday, monday + 2, 3);  /* Sunday's request settled on Monday */
    sl_limit_add(&s, sunday, monday + 2, -4); /* nor taken back */
    cr_expect_eq(sl_limit_used(&s, monday + 2), 1);
    cr_expect_eq(s.period_start_ms, monday);
    /* Taking back more than the period holds stops at 0, and counting starts again from there. */
    sl_limit_add(&s, monday + 1, monday + 3, -5);
    cr_expect_eq(sl_limit_used(&s, monday + 3), 0);
    sl_limit_add(&s, monday + 3, monday + 3, 2);
    cr_expect_eq(sl_limit_used(&s, monday + 3), 2);
}

Test(limits, a_clock_step_back_keeps_the_period_and_its_usage)
{
    sl_limit_state_t s = calendar(SL_PER_DAY, SL_MEASURE_REQUESTS, 3);
    int64_t start = utc(2026, 5, 12, 22, 0), end = utc(2026, 5, 13, 22, 0);
    sl_limit_add(&s, start + 1000, start + 1000, 2);
    sl_limit_add(&s, start - 1000, start - 1000, 1); /* the clock is behind the period: still counted */
    cr_expect_eq(s.period_start_ms, start);
    cr_expect_eq(sl_limit_used(&s, start - 500), 3);
    expect_check(&s, start - 500, 1, SL_LIMIT_PERIOD_USED_UP, end);
}

Test(limits, cost_is_counted_in_micro_dollars)
{
    sl_limit_state_t s = calendar(SL_PER_MONTH, SL_MEASURE_COST, 5000000); /* $5 */
    int64_t now = utc(2026, 5, 12, 10, 0);
    sl_amounts_t spent = {.requests = 1, .tokens = 1200, .cost_micros = 1250000};
    sl_limits_add(&s, 1, now, now, &spent);
    cr_expect_eq(sl_limit_used(&s, now), 1250000);
    cr_expect_eq(sl_limit_measure(&s.limit, &spent), 1250000);
    sl_limits_check_t fits =
        sl_limits_check(&s, 1, now, &(sl_amounts_t){.tokens = 1 << 30, .cost_micros = 3750000});
    cr_expect_eq(fits.verdict, SL_LIMIT_OK);
    cr_expect_eq(fits.recovery_ms, now);
    sl_limits_check_t over = sl_limits_check(&s, 1, now, &(sl_amounts_t){.cost_micros = 3750001});
    cr_expect_eq(over.verdict, SL_LIMIT_PERIOD_USED_UP);
    cr_expect_eq(over.recovery_ms, utc(2026, 5, 31, 22, 0));
}

Test(limits, each_limit_counts_its_own_measure)
{
    sl_limit_t rt = {.per = SL_PER_MINUTE, .every = 1, .measure = SL_MEASURE_REQUESTS, .amount = 1};
    sl_amounts_t a = {.requests = 2, .tokens = 3, .cost_micros = 5};
    cr_expect_eq(sl_limit_measure(&rt, &a), 2);
    rt.measure = SL_MEASURE_TOKENS;
    cr_expect_eq(sl_limit_measure(&rt, &a), 3);
    rt.measure = SL_MEASURE_COST;
    cr_expect_eq(sl_limit_measure(&rt, &a), 5);

    sl_limit_state_t st[] = {
        rolling(SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 10),
        rolling(SL_PER_MINUTE, 1, SL_MEASURE_TOKENS, 10000),
    };
    sl_limits_add(st, N(st), T0, T0, &(sl_amounts_t){.requests = 1, .tokens = 900});
    sl_limits_add(st, N(st), T0, T0 + SEC,
                  &(sl_amounts_t){.tokens = -300}); /* settlement: requests untouched */
    cr_expect_eq(sl_limit_used(&st[0], T0 + SEC), 1);
    cr_expect_eq(sl_limit_used(&st[1], T0 + SEC), 600);
}

Test(limits, a_subject_takes_the_worst_verdict_and_the_latest_recovery)
{
    int64_t now = utc(2026, 5, 12, 10, 0); /* a whole minute: slots of 1 s start on it */
    int64_t day_end = utc(2026, 5, 12, 22, 0);
    sl_limit_state_t st[] = {
        rolling(SL_PER_MINUTE, 1, SL_MEASURE_REQUESTS, 2),
        rolling(SL_PER_HOUR, 1, SL_MEASURE_REQUESTS, 3),
        calendar(SL_PER_DAY, SL_MEASURE_TOKENS, 1000),
    };
    sl_limits_add(st, N(st), now, now, &(sl_amounts_t){.requests = 2, .tokens = 400});

    /* The minute window is full: it frees at now + 1 s (slot) + 1 s (margin slot) + 60 s. */
    sl_limits_check_t c = sl_limits_check(st, N(st), now, &(sl_amounts_t){.requests = 1, .tokens = 100});
    cr_expect_eq(c.verdict, SL_LIMIT_WINDOW_FULL);
    cr_expect_eq(c.recovery_ms, now + 62 * SEC);

    /* The hour window too: the later recovery wins. */
    sl_limits_add(st, N(st), now + 2 * SEC, now + 2 * SEC, &(sl_amounts_t){.requests = 1});
    c = sl_limits_check(st, N(st), now + 2 * SEC, &(sl_amounts_t){.requests = 1, .tokens = 100});
    cr_expect_eq(c.verdict, SL_LIMIT_WINDOW_FULL);
    cr_expect_eq(c.recovery_ms, now + HOUR + 120 * SEC,
                 "hour slots are 60 s: [now, now + 60 s) leaves a margin slot and 1 h after its end");

    /* A used-up period outranks a full window and sets the recovery. */
    c = sl_limits_check(st, N(st), now + 2 * SEC, &(sl_amounts_t){.requests = 1, .tokens = 601});
    cr_expect_eq(c.verdict, SL_LIMIT_PERIOD_USED_UP);
    cr_expect_eq(c.recovery_ms, day_end);

    /* NEVER outranks everything; its recovery is the others'. */
    c = sl_limits_check(st, N(st), now + 2 * SEC, &(sl_amounts_t){.requests = 3, .tokens = 100});
    cr_expect_eq(c.verdict, SL_LIMIT_NEVER);
    cr_expect_eq(c.recovery_ms, now + HOUR + 120 * SEC);

    /* When the windows have drained, only the period is in the way. */
    c = sl_limits_check(st, N(st), now + 2 * HOUR, &(sl_amounts_t){.requests = 1, .tokens = 601});
    cr_expect_eq(c.verdict, SL_LIMIT_PERIOD_USED_UP);
    cr_expect_eq(c.recovery_ms, day_end);
    c = sl_limits_check(st, N(st), now + 2 * HOUR, &(sl_amounts_t){.requests = 1, .tokens = 600});
    cr_expect_eq(c.verdict, SL_LIMIT_OK);
    cr_expect_eq(c.recovery_ms, now + 2 * HOUR);
}

/* ---- an instance of a cluster alone (cluster.md, "Redis down") ------------------------------------ */

Test(limits, alone_an_instance_of_three_takes_a_third_of_each_limit)
{
    int64_t now = utc(2026, 5, 12, 10, 0);
    sl_limit_state_t st[] = {five_minutes(9000)};
    sl_limits_add(st, N(st), now, now, &(sl_amounts_t){.tokens = 2500});
    sl_amounts_t need = {.tokens = 1000};
    cr_expect_eq(sl_limits_check(st, N(st), now, &need).verdict, SL_LIMIT_OK, "the whole limit has room");
    sl_limits_check_t c = sl_limits_check_share(st, N(st), now, &need, 3);
    cr_expect_eq(c.verdict, SL_LIMIT_WINDOW_FULL, "2500 + 1000 is more than its 3000");
    cr_expect_eq(c.recovery_ms, now + 5 * SEC + 5 * SEC + 5 * 60 * SEC, "when the 2500 leave the window");
    cr_expect_eq(sl_limits_check_share(st, N(st), now, &(sl_amounts_t){.tokens = 1000}, 1).verdict,
                 SL_LIMIT_OK, "one part is the whole");
    cr_expect_eq(st[0].limit.amount, 9000, "the limit itself is left as it was");
}

Test(limits, alone_a_request_larger_than_the_share_still_fits_an_empty_window)
{
    int64_t now = utc(2026, 5, 12, 10, 0);
    sl_limit_state_t st[] = {five_minutes(9000)};
    sl_amounts_t big = {.tokens = 5000};
    cr_expect_eq(sl_limits_check_share(st, N(st), now, &big, 3).verdict, SL_LIMIT_OK,
                 "5000 is more than a third, but the whole limit could take it");
    sl_limits_add(st, N(st), now, now, &(sl_amounts_t){.tokens = 1});
    cr_expect_eq(sl_limits_check_share(st, N(st), now, &big, 3).verdict, SL_LIMIT_WINDOW_FULL,
                 "not while anything else counts");
    cr_expect_eq(sl_limits_check_share(st, N(st), now, &(sl_amounts_t){.tokens = 9001}, 3).verdict,
                 SL_LIMIT_NEVER, "larger than the whole limit: never");
}
