#include "throttle.h"

#include <assert.h>

static const char *const kind_slugs[SL_THROTTLE_STATE_COUNT] = {
    [SL_THROTTLE_FREE] = NULL,
    [SL_THROTTLE_PAUSED] = "paused",
    [SL_THROTTLE_PROBING] = "probing",
    [SL_THROTTLE_MANUAL] = "manual",
};

static const char *const reason_slugs[SL_THROTTLE_STATE_COUNT] = {
    [SL_THROTTLE_FREE] = NULL,
    [SL_THROTTLE_PAUSED] = "gw.upstream.paused",
    [SL_THROTTLE_PROBING] = "gw.upstream.probing",
    [SL_THROTTLE_MANUAL] = "gw.upstream.paused_manually",
};

static const char *const wait_code_slugs[SL_WAIT_CODE_COUNT] = {
    [SL_WAIT_CODE_RATE_LIMITED] = "gw.wait.rate_limited",
    [SL_WAIT_CODE_WINDOW_FULL] = "gw.wait.window_full",
    [SL_WAIT_CODE_USED_UP] = "gw.wait.used_up",
    [SL_WAIT_CODE_MIXED] = "gw.wait.mixed",
};

/* now + d, saturating below SL_THROTTLE_NEVER so a real end is never read as "never". */
static int64_t
add_ms(int64_t now_ms, int64_t d)
{
    int64_t r;
    if (__builtin_add_overflow(now_ms, d, &r) || r >= SL_THROTTLE_NEVER)
        return SL_THROTTLE_NEVER - 1;
    return r;
}

static int64_t
max_ms(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* ---- the throttle ------------------------------------------------------------------------------ */

/* Everything a ThrottleChanged shows; two equal views mean no event. */
typedef struct {
    sl_throttle_state_t kind;
    int64_t until_ms;
    uint32_t consecutive;
} view_t;

static view_t
view_of(const sl_throttle_t *t)
{
    sl_throttle_state_t kind = sl_throttle_kind(t);
    if (kind == SL_THROTTLE_FREE)
        return (view_t){.kind = kind};
    return (view_t){.kind = kind, .until_ms = sl_throttle_shown_until_ms(t), .consecutive = t->consecutive};
}

static bool
view_changed(view_t before, const sl_throttle_t *t)
{
    view_t after = view_of(t);
    return before.kind != after.kind || before.until_ms != after.until_ms ||
           before.consecutive != after.consecutive;
}

static int64_t
grace_end_ms(const sl_throttle_t *t)
{
    /* A probe only follows a pause, which set the grace; the constant covers a hand-made struct. */
    return add_ms(t->probe_at_ms, t->grace_ms > 0 ? t->grace_ms : SL_THROTTLE_PROBE_GRACE_MS);
}

static void
start_probing(sl_throttle_t *t)
{
    t->state = SL_THROTTLE_PROBING;
    t->probe_out = false;
}

static void
advance(sl_throttle_t *t, int64_t now_ms)
{
    if (t->manual_until_ms != 0 && now_ms >= t->manual_until_ms)
        t->manual_until_ms = 0;
    if (t->state == SL_THROTTLE_PAUSED && now_ms >= t->pause_until_ms)
        start_probing(t);
}

/* The earliest send time of the 429 state alone, looked at from at_ms on. */
static int64_t
recovery_429_ms(const sl_throttle_t *t, int64_t at_ms)
{
    switch (t->state) {
    case SL_THROTTLE_PAUSED:
        return max_ms(at_ms, t->pause_until_ms);
    case SL_THROTTLE_PROBING:
        return t->probe_out ? max_ms(at_ms, grace_end_ms(t)) : at_ms;
    default:
        return at_ms;
    }
}

sl_throttle_state_t
sl_throttle_kind(const sl_throttle_t *t)
{
    return t->manual_until_ms != 0 ? SL_THROTTLE_MANUAL : t->state;
}

bool
sl_throttle_on_429(sl_throttle_t *t, int64_t now_ms, int64_t hint_ms, uint32_t max_pause_secs,
                   const sl_retry_params_t *params)
{
    view_t before = view_of(t);
    advance(t, now_ms);
    if (now_ms < t->pause_until_ms) {
        if (hint_ms > 0) {
            int64_t until =
                add_ms(now_ms, sl_ratelimit_pause_ms(t->consecutive, hint_ms, max_pause_secs, params));
            t->pause_until_ms = max_ms(t->pause_until_ms, until);
        }
        return view_changed(before, t);
    }
    t->consecutive = sl_ratelimit_streak_next(t->consecutive, true);
    t->pause_until_ms =
        add_ms(now_ms, sl_ratelimit_pause_ms(t->consecutive, hint_ms, max_pause_secs, params));
    t->grace_ms = sl_retry_scaled_ms(SL_THROTTLE_PROBE_GRACE_MS, params);
    t->state = SL_THROTTLE_PAUSED;
    t->probe_out = false;
    return view_changed(before, t);
}

bool
sl_throttle_adopt_pause(sl_throttle_t *t, int64_t now_ms, int64_t until_ms, uint32_t consecutive,
                        int64_t grace_ms)
{
    view_t before = view_of(t);
    advance(t, now_ms);
    if (consecutive > t->consecutive)
        t->consecutive = consecutive;
    bool later = until_ms > now_ms && (t->state != SL_THROTTLE_PAUSED || until_ms > t->pause_until_ms);
    if (later) {
        t->pause_until_ms = until_ms;
        t->grace_ms = grace_ms;
        t->state = SL_THROTTLE_PAUSED;
        t->probe_out = false;
    }
    return view_changed(before, t);
}

bool
sl_throttle_on_answer(sl_throttle_t *t, int64_t now_ms)
{
    view_t before = view_of(t);
    advance(t, now_ms);
    t->consecutive = sl_ratelimit_streak_next(t->consecutive, false);
    if (t->state == SL_THROTTLE_PROBING) {
        t->state = SL_THROTTLE_FREE;
        t->probe_out = false;
    }
    return view_changed(before, t);
}

bool
sl_throttle_check(sl_throttle_t *t, int64_t now_ms)
{
    view_t before = view_of(t);
    advance(t, now_ms);
    return view_changed(before, t);
}

bool
sl_throttle_admit(sl_throttle_t *t, int64_t now_ms, bool is_queue_head, bool *is_probe)
{
    *is_probe = false;
    if (t->manual_until_ms != 0)
        return false;
    switch (t->state) {
    case SL_THROTTLE_FREE:
        return true;
    case SL_THROTTLE_PROBING:
        if (!t->probe_out) {
            if (!is_queue_head)
                return false;
            t->probe_out = true;
            t->probe_at_ms = now_ms;
            *is_probe = true;
            return true;
        }
        /* A probe that hangs must not hold the whole queue past its grace. */
        return now_ms >= grace_end_ms(t);
    default:
        return false;
    }
}

void
sl_throttle_probe_abandoned(sl_throttle_t *t)
{
    if (t->state == SL_THROTTLE_PROBING)
        t->probe_out = false;
}

bool
sl_throttle_pause_manual(sl_throttle_t *t, int64_t until_ms, int64_t now_ms)
{
    if (until_ms != 0 && until_ms <= now_ms)
        return sl_throttle_resume(t, now_ms);
    view_t before = view_of(t);
    advance(t, now_ms);
    t->manual_until_ms = until_ms != 0 ? until_ms : SL_THROTTLE_NEVER;
    return view_changed(before, t);
}

bool
sl_throttle_resume(sl_throttle_t *t, int64_t now_ms)
{
    view_t before = view_of(t);
    advance(t, now_ms);
    t->manual_until_ms = 0;
    if (t->state == SL_THROTTLE_PAUSED) {
        t->pause_until_ms = now_ms;
        start_probing(t);
    }
    return view_changed(before, t);
}

int64_t
sl_throttle_next_change_ms(const sl_throttle_t *t, int64_t now_ms)
{
    /* Below a manual pause nothing a waiter could use changes before the operator's end. */
    if (t->manual_until_ms != 0)
        return t->manual_until_ms;
    switch (t->state) {
    case SL_THROTTLE_PAUSED:
        return t->pause_until_ms;
    case SL_THROTTLE_PROBING: {
        int64_t grace_end = grace_end_ms(t);
        return t->probe_out && now_ms < grace_end ? grace_end : SL_THROTTLE_NEVER;
    }
    default:
        return SL_THROTTLE_NEVER;
    }
}

int64_t
sl_throttle_recovery_ms(const sl_throttle_t *t, int64_t now_ms)
{
    if (t->manual_until_ms == SL_THROTTLE_NEVER)
        return SL_THROTTLE_NEVER;
    return recovery_429_ms(t, max_ms(now_ms, t->manual_until_ms));
}

int64_t
sl_throttle_shown_until_ms(const sl_throttle_t *t)
{
    if (t->manual_until_ms != 0)
        return t->manual_until_ms != SL_THROTTLE_NEVER ? t->manual_until_ms : -1;
    return t->state == SL_THROTTLE_PAUSED ? t->pause_until_ms : -1;
}

const char *
sl_throttle_kind_slug(sl_throttle_state_t state)
{
    assert(state < SL_THROTTLE_STATE_COUNT);
    return kind_slugs[state];
}

const char *
sl_throttle_reason_slug(const sl_throttle_t *t)
{
    return reason_slugs[sl_throttle_kind(t)];
}

/* ---- send now, else wait, else the final 429 ------------------------------------------------- */

/* Which skips a request may wait out. */
static const bool waitable[SL_SKIP_COUNT] = {
    [SL_SKIP_THROTTLED] = true,
    [SL_SKIP_BUSY] = true,
    [SL_SKIP_WINDOW_FULL] = true,
};

/* The code when every counted candidate has this skip; MIXED for any blend. */
static const sl_wait_code_t pure_code[SL_SKIP_COUNT] = {
    [SL_SKIP_NONE] = SL_WAIT_CODE_MIXED,
    [SL_SKIP_THROTTLED] = SL_WAIT_CODE_RATE_LIMITED,
    [SL_SKIP_BUSY] = SL_WAIT_CODE_MIXED,
    [SL_SKIP_WINDOW_FULL] = SL_WAIT_CODE_WINDOW_FULL,
    [SL_SKIP_PERIOD_USED_UP] = SL_WAIT_CODE_USED_UP,
};

/* What waiting is about at all: the rest is neither waited for nor counted in the final answer. */
static bool
concerns_waiting(const sl_wait_gate_t *g)
{
    return !g->out_of_round &&
           (g->skip == SL_SKIP_NONE || g->skip == SL_SKIP_PERIOD_USED_UP || waitable[g->skip]);
}

/* The candidates a pass of the decision looks at: all of them, or only one. */
typedef struct {
    size_t first, end;
} span_t;

static bool
can_wait_for(const sl_wait_gate_t *g, const sl_wait_request_t *req)
{
    return concerns_waiting(g) && waitable[g->skip] && req->now_ms < req->deadline_ms &&
           g->recovery_ms <= req->deadline_ms;
}

static sl_wait_decision_t
send_now(span_t s, const sl_wait_gate_t *gates, bool *found)
{
    for (size_t i = s.first; i < s.end; i++) {
        if (gates[i].skip == SL_SKIP_NONE && !gates[i].out_of_round) {
            *found = true;
            return (sl_wait_decision_t){.action = SL_WAIT_SEND_NOW, .send = i};
        }
    }
    *found = false;
    return (sl_wait_decision_t){0};
}

static sl_wait_decision_t
wait_on_all(span_t s, const sl_wait_gate_t *gates, const sl_wait_request_t *req, bool *wait_on)
{
    sl_wait_decision_t d = {.action = SL_WAIT_WAIT, .wake_ms = req->deadline_ms};
    for (size_t i = s.first; i < s.end; i++) {
        if (!can_wait_for(&gates[i], req))
            continue;
        wait_on[i] = true;
        d.n_wait++;
        /* A recovery not ahead of now comes as an event (a slot freed, a probe taken), not a timer. */
        if (gates[i].recovery_ms > req->now_ms && gates[i].recovery_ms < d.wake_ms)
            d.wake_ms = gates[i].recovery_ms;
    }
    return d;
}

static sl_wait_decision_t
final_answer(span_t s, const sl_wait_gate_t *gates, const sl_wait_request_t *req)
{
    size_t counted = 0;
    sl_skip_t only = SL_SKIP_NONE;
    bool blend = false, any_recovers = false;
    int64_t earliest = SL_THROTTLE_NEVER;
    for (size_t i = s.first; i < s.end; i++) {
        const sl_wait_gate_t *g = &gates[i];
        if (!concerns_waiting(g))
            continue;
        blend |= counted > 0 && g->skip != only;
        only = g->skip;
        counted++;
        any_recovers |= g->skip != SL_SKIP_PERIOD_USED_UP && g->recovery_ms != SL_THROTTLE_NEVER;
        if (g->recovery_ms < earliest)
            earliest = g->recovery_ms;
    }
    if (counted == 0)
        return (sl_wait_decision_t){.action = SL_WAIT_UNUSABLE};
    sl_wait_decision_t d = {
        .action = SL_WAIT_FINAL_429,
        .code = blend ? SL_WAIT_CODE_MIXED : pure_code[only],
        .retry_after_ms = -1,
        .retry_after_secs = -1,
        .should_retry = any_recovers,
    };
    if (earliest != SL_THROTTLE_NEVER) {
        int64_t ms;
        /* At least 1 ms: "retry after 0" would invite the SDK to hammer a limit that has not lifted. */
        if (__builtin_sub_overflow(earliest, req->now_ms, &ms) || ms > SL_THROTTLE_NEVER - 999)
            ms = SL_THROTTLE_NEVER - 999;
        d.retry_after_ms = ms > 1 ? ms : 1;
        d.retry_after_secs = (d.retry_after_ms + 999) / 1000;
    }
    return d;
}

/* Send now, else wait, else the final answer, over the candidates in s. */
static sl_wait_decision_t
decide_over(span_t s, const sl_wait_gate_t *gates, const sl_wait_request_t *req, bool *wait_on)
{
    bool found;
    sl_wait_decision_t d = send_now(s, gates, &found);
    if (found)
        return d;
    d = wait_on_all(s, gates, req, wait_on);
    return d.n_wait > 0 ? d : final_answer(s, gates, req);
}

sl_wait_decision_t
sl_wait_decide(const sl_wait_gate_t *gates, size_t n, const sl_wait_request_t *req, bool *wait_on)
{
    for (size_t i = 0; i < n; i++)
        wait_on[i] = false;
    span_t all = {0, n};
    if (req->own >= n)
        return decide_over(all, gates, req, wait_on);
    span_t own = {req->own, req->own + 1};
    if (req->sealed)
        return decide_over(own, gates, req, wait_on);
    /* Sticky: its own upstream keeps the conversation while it can serve before the deadline. */
    const sl_wait_gate_t *g = &gates[req->own];
    if ((g->skip == SL_SKIP_NONE && !g->out_of_round) || can_wait_for(g, req))
        return decide_over(own, gates, req, wait_on);
    return decide_over(all, gates, req, wait_on);
}

const char *
sl_wait_code_slug(sl_wait_code_t code)
{
    assert(code < SL_WAIT_CODE_COUNT);
    return wait_code_slugs[code];
}
