#include "limits.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "core/civil.h"

/*
 * The ring holds the slots that can still count. At now in slot h, slot k
 * counts while now < (k + 1 + MARGIN_SLOTS) * slot_ms + window_ms; since
 * window_ms <= SL_LIMIT_SLOTS * slot_ms, that needs k >= h - SL_LIMIT_SLOTS
 * - MARGIN_SLOTS: SLOTS + 2 slots at most, so SLOTS + 3 entries always leave
 * one spare. Whether a slot in the ring still counts is decided by its end,
 * never by its place.
 */
#define MARGIN_SLOTS 1
#define RING         ((int64_t)(SL_LIMIT_SLOTS + 2 + MARGIN_SLOTS))

static int64_t
sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

static bool
is_rolling(const sl_limit_t *limit)
{
    return limit->per == SL_PER_MINUTE || limit->per == SL_PER_HOUR;
}

/* ---- rolling windows --------------------------------------------------------------------------- */

static int64_t *
slot_at(sl_limit_state_t *s, int64_t k)
{
    return &s->ring[sl_floor_mod(k, RING)];
}

/* When a charge in slot k stops counting: its slot's end, the margin slot, and the window. */
static int64_t
slot_end_ms(const sl_limit_state_t *s, int64_t k)
{
    int64_t start;
    if (__builtin_mul_overflow(k, s->slot_ms, &start))
        return k > 0 ? INT64_MAX : INT64_MIN;
    return sat_add(sat_add(start, s->slot_ms * (1 + MARGIN_SLOTS)), s->window_ms);
}

static int64_t
oldest_slot(const sl_limit_state_t *s)
{
    return s->head_slot - (RING - 1);
}

/*
 * Makes now's slot the head, emptying the slots it passes. A long gap costs
 * one sweep of the ring. A now before the head (the wall clock stepped back)
 * moves nothing: the ring keeps what it has, and all of it still counts
 * until the clock catches up.
 */
static void
roll_window(sl_limit_state_t *s, int64_t now_ms)
{
    int64_t h = sl_floor_div(now_ms, s->slot_ms);
    if (h <= s->head_slot)
        return;
    int64_t gap;
    if (__builtin_sub_overflow(h, s->head_slot, &gap) || gap >= RING) {
        for (int64_t i = 0; i < RING; i++)
            s->ring[i] = 0;
    } else {
        for (int64_t k = s->head_slot + 1; k <= h; k++)
            *slot_at(s, k) = 0;
    }
    s->head_slot = h;
}

static int64_t
window_used(const sl_limit_state_t *s, int64_t now_ms)
{
    int64_t used = 0;
    for (int64_t k = oldest_slot(s); k <= s->head_slot; k++) {
        int64_t v = s->ring[sl_floor_mod(k, RING)];
        if (v != 0 && slot_end_ms(s, k) > now_ms)
            used = sat_add(used, v);
    }
    return used;
}

/*
 * The earliest time at which need fits: the end of the oldest counted slot
 * such that what the newer ones hold leaves room. Walked from the newest
 * slot back, so that a total saturated at INT64_MAX errs late, never early.
 * Called only when need does not fit now.
 */
static int64_t
window_recovery_ms(const sl_limit_state_t *s, int64_t now_ms, int64_t need)
{
    int64_t amount = s->limit.amount, newer = 0, recovery = now_ms;
    bool found = false;
    for (int64_t k = s->head_slot; k >= oldest_slot(s); k--) {
        int64_t v = s->ring[sl_floor_mod(k, RING)];
        int64_t end = slot_end_ms(s, k);
        if (end <= now_ms)
            break; /* older slots end earlier still */
        if (v == 0)
            continue;
        if (!(newer < amount && newer <= amount - need))
            break;
        recovery = end;
        found = true;
        newer = sat_add(newer, v);
    }
    assert(found); /* need <= amount and amount > 0: at worst the newest counted slot's end */
    (void)found;
    return recovery;
}

static void
window_add(sl_limit_state_t *s, int64_t at_ms, int64_t now_ms, int64_t amount)
{
    int64_t k = sl_floor_div(at_ms, s->slot_ms);
    if (slot_end_ms(s, k) <= now_ms)
        return;
    /*
     * Still counting yet older than the ring: only after the clock stepped
     * back by more than the ring spans. The oldest slot ends later than k
     * would, so the charge counts too long rather than too short.
     */
    if (k < oldest_slot(s))
        k = oldest_slot(s);
    assert(k <= s->head_slot);
    int64_t *slot = slot_at(s, k);
    int64_t v = sat_add(*slot, amount);
    *slot = v < 0 ? 0 : v;
}

size_t
sl_limit_counted_slots(sl_limit_state_t *s, int64_t now_ms, int64_t *starts, int64_t *amounts, size_t cap)
{
    if (!is_rolling(&s->limit))
        return 0;
    roll_window(s, now_ms);
    size_t n = 0;
    for (int64_t k = s->head_slot; k >= oldest_slot(s) && n < cap; k--) {
        int64_t v = s->ring[sl_floor_mod(k, RING)];
        if (slot_end_ms(s, k) <= now_ms)
            break; /* older slots end earlier still */
        if (v == 0)
            continue;
        starts[n] = k * s->slot_ms;
        amounts[n++] = v;
    }
    return n;
}

static int64_t
window_resets_at_ms(const sl_limit_state_t *s, int64_t now_ms)
{
    for (int64_t k = s->head_slot; k >= oldest_slot(s); k--) {
        int64_t end = slot_end_ms(s, k);
        if (end <= now_ms)
            break; /* older slots end earlier still */
        if (s->ring[sl_floor_mod(k, RING)] != 0)
            return end;
    }
    return now_ms;
}

/* ---- calendar periods -------------------------------------------------------------------------- */

bool
sl_calendar_period(sl_limit_per_t per, const sl_tz_t *tz, int64_t wall_ms, int64_t *start_ms, int64_t *end_ms)
{
    if (per != SL_PER_DAY && per != SL_PER_WEEK && per != SL_PER_MONTH)
        return false;
    sl_tz_local_t now;
    if (!sl_tz_local(tz, sl_floor_div(wall_ms, 1000), &now))
        return false;
    int64_t first = now.mday, next = now.mday + 1, mon = now.month, next_mon = now.month;
    if (per == SL_PER_WEEK) {
        first = now.mday - (now.wday + 6) % 7; /* wday counts from Sunday */
        next = first + 7;
    } else if (per == SL_PER_MONTH) {
        first = next = 1;
        next_mon = now.month + 1;
    }
    /* A day or month past the end carries over (day 32 is the 1st of the next month, month 13 January). */
    int64_t start, end;
    if (!sl_tz_utc_of_local(tz, now.year, mon, first, 0, &start) ||
        !sl_tz_utc_of_local(tz, now.year, next_mon, next, 0, &end))
        return false;
    start *= 1000;
    end *= 1000;
    /* A clock going back across midnight could put the end before wall_ms; the period must hold it. */
    if (start > wall_ms || end <= wall_ms)
        return false;
    *start_ms = start;
    *end_ms = end;
    return true;
}

/*
 * Moves the period to the one holding now once now reaches its end. A now
 * before its start (the clock stepped back) keeps it, so a budget is never
 * reset by a clock step.
 */
static void
roll_period(sl_limit_state_t *s, int64_t now_ms)
{
    bool none_yet = s->period_end_ms <= s->period_start_ms;
    if (!none_yet && now_ms < s->period_end_ms)
        return;
    s->period_used = 0;
    if (!sl_calendar_period(s->limit.per, s->tz, now_ms, &s->period_start_ms, &s->period_end_ms)) {
        /* Only for times the zone cannot convert: a day of UTC, so the limit still holds. */
        s->period_start_ms = sl_floor_div(now_ms, 86400000) * 86400000;
        s->period_end_ms = s->period_start_ms + 86400000;
    }
}

static void
period_add(sl_limit_state_t *s, int64_t at_ms, int64_t now_ms, int64_t amount)
{
    if (at_ms >= s->period_end_ms)
        return;
    /* Before the period: a charge from an earlier one, unless the clock itself is behind the period. */
    if (at_ms < s->period_start_ms && now_ms >= s->period_start_ms)
        return;
    int64_t v = sat_add(s->period_used, amount);
    s->period_used = v < 0 ? 0 : v;
}

/* ---- one limit --------------------------------------------------------------------------------- */

int64_t
sl_limit_window_ms(const sl_limit_t *limit)
{
    int64_t every = limit->every == 0 ? 1 : (int64_t)limit->every;
    switch (limit->per) {
    case SL_PER_MINUTE:
        return every * 60000;
    case SL_PER_HOUR:
        return every * 3600000;
    default:
        return 0;
    }
}

void
sl_limit_state_init(sl_limit_state_t *s, const sl_limit_t *limit, int64_t window_ms, const sl_tz_t *tz)
{
    *s = (sl_limit_state_t){.limit = *limit, .tz = tz};
    if (!is_rolling(limit))
        return;
    s->window_ms = window_ms < 1 ? 1 : window_ms;
    s->slot_ms = s->window_ms / SL_LIMIT_SLOTS + (s->window_ms % SL_LIMIT_SLOTS != 0);
    assert(s->slot_ms >= 1 && s->slot_ms * SL_LIMIT_SLOTS >= s->window_ms);
}

int64_t
sl_limit_measure(const sl_limit_t *limit, const sl_amounts_t *amounts)
{
    switch (limit->measure) {
    case SL_MEASURE_REQUESTS:
        return amounts->requests;
    case SL_MEASURE_TOKENS:
        return amounts->tokens;
    case SL_MEASURE_COST:
        return amounts->cost_micros;
    }
    return 0;
}

static void
roll(sl_limit_state_t *s, int64_t now_ms)
{
    if (is_rolling(&s->limit))
        roll_window(s, now_ms);
    else
        roll_period(s, now_ms);
}

sl_limit_verdict_t
sl_limit_check(sl_limit_state_t *s, int64_t now_ms, int64_t need, int64_t *recovery_ms)
{
    roll(s, now_ms);
    int64_t amount = s->limit.amount;
    if (need < 0)
        need = 0;
    /* A limit of nothing admits nothing, ever. */
    if (need > amount || amount <= 0)
        return SL_LIMIT_NEVER;
    int64_t used = is_rolling(&s->limit) ? window_used(s, now_ms) : s->period_used;
    /* amount - need cannot overflow: 0 <= need <= amount. */
    if (used < amount && used <= amount - need)
        return SL_LIMIT_OK;
    if (!is_rolling(&s->limit)) {
        *recovery_ms = s->period_end_ms;
        return SL_LIMIT_PERIOD_USED_UP;
    }
    *recovery_ms = window_recovery_ms(s, now_ms, need);
    return SL_LIMIT_WINDOW_FULL;
}

void
sl_limit_add(sl_limit_state_t *s, int64_t at_ms, int64_t now_ms, int64_t amount)
{
    roll(s, now_ms);
    if (at_ms > now_ms)
        at_ms = now_ms;
    if (amount == 0)
        return;
    if (is_rolling(&s->limit))
        window_add(s, at_ms, now_ms, amount);
    else
        period_add(s, at_ms, now_ms, amount);
}

int64_t
sl_limit_used(sl_limit_state_t *s, int64_t now_ms)
{
    roll(s, now_ms);
    return is_rolling(&s->limit) ? window_used(s, now_ms) : s->period_used;
}

int64_t
sl_limit_resets_at_ms(sl_limit_state_t *s, int64_t now_ms)
{
    roll(s, now_ms);
    return is_rolling(&s->limit) ? window_resets_at_ms(s, now_ms) : s->period_end_ms;
}

/* ---- a subject --------------------------------------------------------------------------------- */

/* A part of a limit's amount: amount / parts, but never less than a need the whole amount could take. */
static int64_t
share_of(int64_t amount, int64_t need, uint32_t parts)
{
    int64_t share = amount / parts;
    int64_t fits = need < amount ? need : amount;
    return share > fits ? share : fits;
}

sl_limits_check_t
sl_limits_check(sl_limit_state_t *states, size_t n, int64_t now_ms, const sl_amounts_t *need)
{
    return sl_limits_check_share(states, n, now_ms, need, 1);
}

sl_limits_check_t
sl_limits_check_share(sl_limit_state_t *states, size_t n, int64_t now_ms, const sl_amounts_t *need,
                      uint32_t parts)
{
    sl_limits_check_t r = {.verdict = SL_LIMIT_OK, .recovery_ms = now_ms};
    bool any_recovery = false;
    for (size_t i = 0; i < n; i++) {
        int64_t recovery = now_ms;
        int64_t m = sl_limit_measure(&states[i].limit, need);
        int64_t amount = states[i].limit.amount;
        if (parts > 1 && amount > 0)
            states[i].limit.amount = share_of(amount, m, parts);
        sl_limit_verdict_t v = sl_limit_check(&states[i], now_ms, m, &recovery);
        states[i].limit.amount = amount;
        bool recovers = v == SL_LIMIT_WINDOW_FULL || v == SL_LIMIT_PERIOD_USED_UP;
        if (v > r.verdict || (v == r.verdict && recovers && recovery > r.recovery_ms))
            r.which = i;
        if (v > r.verdict)
            r.verdict = v;
        if (recovers) {
            if (!any_recovery || recovery > r.recovery_ms)
                r.recovery_ms = recovery;
            any_recovery = true;
        }
    }
    return r;
}

void
sl_limits_add(sl_limit_state_t *states, size_t n, int64_t at_ms, int64_t now_ms, const sl_amounts_t *delta)
{
    for (size_t i = 0; i < n; i++) {
        int64_t d = sl_limit_measure(&states[i].limit, delta);
        if (d != 0)
            sl_limit_add(&states[i], at_ms, now_ms, d);
    }
}

void
sl_limit_describe(const sl_limit_t *limit, char *out, size_t size)
{
    static const char *const units[] = {
        [SL_PER_MINUTE] = "minute", [SL_PER_HOUR] = "hour",   [SL_PER_DAY] = "day",
        [SL_PER_WEEK] = "week",     [SL_PER_MONTH] = "month",
    };
    const char *unit = (unsigned)limit->per < sizeof(units) / sizeof(units[0]) ? units[limit->per] : "period";
    char per[48];
    if (limit->every > 1)
        snprintf(per, sizeof(per), "%u %ss", (unsigned)limit->every, unit);
    else
        snprintf(per, sizeof(per), "%s", unit);
    if (limit->measure == SL_MEASURE_COST) {
        char frac[8];
        snprintf(frac, sizeof(frac), "%06lld", (long long)(limit->amount % 1000000));
        /* Cents always; smaller fractions only when there are any. */
        size_t keep = strlen(frac);
        while (keep > 2 && frac[keep - 1] == '0')
            keep--;
        frac[keep] = '\0';
        snprintf(out, size, "$%lld.%s per %s", (long long)(limit->amount / 1000000), frac, per);
        return;
    }
    snprintf(out, size, "%lld %s per %s", (long long)limit->amount,
             limit->measure == SL_MEASURE_TOKENS ? "tokens" : "requests", per);
}

int64_t
sl_limit_counts_since_ms(sl_limit_state_t *s, int64_t now_ms)
{
    if (!is_rolling(&s->limit)) {
        int64_t start, end;
        if (sl_calendar_period(s->limit.per, s->tz, now_ms, &start, &end))
            return start;
        return now_ms;
    }
    /* Slot k counts while now < (k + 1 + MARGIN_SLOTS) * slot + window: k >= floor((now - window) / slot) -
     * MARGIN_SLOTS. */
    int64_t first = sl_floor_div(sat_add(now_ms, -s->window_ms), s->slot_ms) - MARGIN_SLOTS;
    int64_t start;
    if (__builtin_mul_overflow(first, s->slot_ms, &start))
        return INT64_MIN;
    return start;
}
