#include "breaker.h"

#include <assert.h>

static const char *const state_slugs[SL_BREAKER_STATE_COUNT] = {
    [SL_BREAKER_CLOSED] = "ok",
    [SL_BREAKER_OPEN] = "open",
    [SL_BREAKER_HALF_OPEN] = "half_open",
};

static const char *const reason_slugs[SL_BREAKER_CAUSE_COUNT] = {
    [SL_BREAKER_CAUSE_NONE] = "gw.breaker.recovered",
    [SL_BREAKER_CAUSE_UNEXPLAINED] = "gw.breaker.failures",
    [SL_BREAKER_CAUSE_QUOTA] = "gw.breaker.quota_used_up",
    [SL_BREAKER_CAUSE_NO_BALANCE] = "gw.breaker.no_balance",
    [SL_BREAKER_CAUSE_AUTH] = "gw.breaker.auth_rejected",
};

sl_breaker_params_t
sl_breaker_params_from_failover(const sl_failover_t *failover)
{
    return (sl_breaker_params_t){
        .failures_to_pause = failover->failures_to_pause,
        .pause_ms = (int64_t)failover->pause_secs * 1000,
        .max_pause_ms = (int64_t)failover->max_pause_secs * 1000,
        .no_balance_pause_ms = (int64_t)failover->no_balance_pause_secs * 1000,
        .quota_pause_ms = (int64_t)failover->quota_pause_secs * 1000,
    };
}

/* pause_ms * 2^trips, capped; the loop stops at the cap, so it never overflows. */
static int64_t
trip_pause_ms(const sl_breaker_params_t *p, uint32_t trips)
{
    int64_t cap = p->max_pause_ms < p->pause_ms ? p->pause_ms : p->max_pause_ms;
    int64_t pause = p->pause_ms;
    for (uint32_t i = 0; i < trips && pause < cap; i++)
        pause = pause > cap / 2 ? cap : pause * 2;
    return pause;
}

/* now + d without wrapping past the "until cleared" marker. */
static int64_t
add_ms(int64_t now_ms, int64_t d)
{
    return d >= SL_BREAKER_UNTIL_CLEARED - now_ms ? SL_BREAKER_UNTIL_CLEARED - 1 : now_ms + d;
}

/* Returns whether anything a HealthChanged event shows (state, until, cause) changed. */
static bool
open_until(sl_breaker_t *b, sl_breaker_cause_t cause, int64_t until_ms)
{
    bool changed = b->state != SL_BREAKER_OPEN || b->cause != cause || b->until_ms != until_ms;
    b->state = SL_BREAKER_OPEN;
    b->cause = cause;
    b->until_ms = until_ms;
    b->probe_out = false;
    return changed;
}

static bool
trip(sl_breaker_t *b, int64_t now_ms, const sl_breaker_params_t *p)
{
    int64_t until = add_ms(now_ms, trip_pause_ms(p, b->trips));
    if (b->trips < UINT32_MAX)
        b->trips++;
    return open_until(b, SL_BREAKER_CAUSE_UNEXPLAINED, until);
}

sl_breaker_state_t
sl_breaker_check(sl_breaker_t *b, int64_t now_ms, bool *is_probe, bool *changed)
{
    bool moved = false;
    *is_probe = false;
    if (b->state == SL_BREAKER_OPEN && b->until_ms != SL_BREAKER_UNTIL_CLEARED && now_ms >= b->until_ms) {
        b->state = SL_BREAKER_HALF_OPEN;
        b->until_ms = 0;
        moved = true;
    }
    if (b->state == SL_BREAKER_HALF_OPEN && !b->probe_out) {
        b->probe_out = true;
        *is_probe = true;
    }
    if (changed)
        *changed = moved;
    return b->state;
}

bool
sl_breaker_is_cooling(const sl_breaker_t *b, int64_t now_ms)
{
    switch (b->state) {
    case SL_BREAKER_OPEN:
        return b->until_ms == SL_BREAKER_UNTIL_CLEARED || now_ms < b->until_ms;
    case SL_BREAKER_HALF_OPEN:
        return b->probe_out;
    default:
        return false;
    }
}

bool
sl_breaker_on_success(sl_breaker_t *b)
{
    bool changed = b->state != SL_BREAKER_CLOSED;
    *b = (sl_breaker_t){0};
    return changed;
}

bool
sl_breaker_adopt_open(sl_breaker_t *b, sl_breaker_cause_t cause, int64_t until_ms, uint32_t trips,
                      int64_t now_ms)
{
    if (until_ms <= now_ms || cause == SL_BREAKER_CAUSE_NONE)
        return false;
    if (b->state == SL_BREAKER_OPEN && b->until_ms >= until_ms && b->cause == cause)
        return false;
    if (b->state == SL_BREAKER_OPEN && b->until_ms > until_ms)
        return false;
    *b = (sl_breaker_t){.state = SL_BREAKER_OPEN,
                        .cause = cause,
                        .trips = trips > b->trips ? trips : b->trips,
                        .until_ms = until_ms};
    return true;
}

bool
sl_breaker_on_failure(sl_breaker_t *b, sl_breaker_cause_t cause, int64_t now_ms,
                      const sl_breaker_params_t *params, int64_t reset_at_ms)
{
    switch (cause) {
    case SL_BREAKER_CAUSE_UNEXPLAINED:
        if (b->state == SL_BREAKER_OPEN)
            return false;
        if (b->state == SL_BREAKER_HALF_OPEN)
            return trip(b, now_ms, params);
        if (b->failures < UINT32_MAX)
            b->failures++;
        return b->failures >= (params->failures_to_pause ? params->failures_to_pause : 1)
                   ? trip(b, now_ms, params)
                   : false;
    case SL_BREAKER_CAUSE_QUOTA:
        /* A reset time in the past would reopen at once and probe into the same answer. */
        return open_until(b, cause,
                          reset_at_ms > now_ms && reset_at_ms < SL_BREAKER_UNTIL_CLEARED
                              ? reset_at_ms
                              : add_ms(now_ms, params->quota_pause_ms));
    case SL_BREAKER_CAUSE_NO_BALANCE:
        return open_until(b, cause, add_ms(now_ms, params->no_balance_pause_ms));
    case SL_BREAKER_CAUSE_AUTH:
        return open_until(b, cause, SL_BREAKER_UNTIL_CLEARED);
    case SL_BREAKER_CAUSE_NONE:
    default:
        return false;
    }
}

void
sl_breaker_release_probe(sl_breaker_t *b)
{
    if (b->state == SL_BREAKER_HALF_OPEN)
        b->probe_out = false;
}

bool
sl_breaker_clear_auth(sl_breaker_t *b)
{
    if (b->cause != SL_BREAKER_CAUSE_AUTH)
        return false;
    return sl_breaker_on_success(b);
}

size_t
sl_breaker_filter(const bool *cooling, size_t n, bool *skip)
{
    size_t n_cooling = 0;
    for (size_t i = 0; i < n; i++)
        n_cooling += cooling[i];
    bool bypass = n == 1 || n_cooling == n;
    for (size_t i = 0; i < n; i++)
        skip[i] = !bypass && cooling[i];
    return bypass ? 0 : n_cooling;
}

const char *
sl_breaker_state_slug(sl_breaker_state_t state)
{
    assert(state < SL_BREAKER_STATE_COUNT);
    return state_slugs[state];
}

const char *
sl_breaker_reason_slug(const sl_breaker_t *b)
{
    assert(b->cause < SL_BREAKER_CAUSE_COUNT);
    return reason_slugs[b->state == SL_BREAKER_CLOSED ? SL_BREAKER_CAUSE_NONE : b->cause];
}
