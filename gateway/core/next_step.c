/* The step after a failed hop (see next_step.h). */
#include "next_step.h"

#include <string.h>

static const char *const reason_slugs[SL_STEP_REASON_COUNT] = {
#define SL_STEP_REASON_SLUG(name, slug, text) [SL_STEP_REASON_##name] = slug,
    SL_STEP_REASONS(SL_STEP_REASON_SLUG)
#undef SL_STEP_REASON_SLUG
};

const char *
sl_step_reason_slug(sl_step_reason_t reason)
{
    return (unsigned)reason < SL_STEP_REASON_COUNT ? reason_slugs[reason] : "";
}

bool
sl_step_reason_from_slug(const char *slug, sl_step_reason_t *out)
{
    for (size_t i = 0; i < SL_STEP_REASON_COUNT; i++) {
        if (strcmp(reason_slugs[i], slug) == 0) {
            *out = (sl_step_reason_t)i;
            return true;
        }
    }
    return false;
}

bool
sl_connection_was_stale(const sl_connection_facts_t *c)
{
    return c->reused && !c->any_byte && c->ms_after_write >= 0 && c->ms_after_write < SL_STALE_CLOSE_MS;
}

/* Handing over needs an answer; without one the gateway says what happened. */
static sl_step_t
give_up(const sl_step_facts_t *f, sl_step_reason_t reason)
{
    return (sl_step_t){.kind = f->has_answer ? SL_STEP_HAND_OVER : SL_STEP_GATEWAY_ERROR, .reason = reason};
}

/* A retry round when it fits: its pause, lengthened by the round's hint, must end by the deadline. */
static bool
retry_round(const sl_step_facts_t *f, bool *next_round, sl_step_t *out, sl_step_reason_t *why_not)
{
    if (!f->may_wait) {
        *why_not = SL_STEP_REASON_NO_WAITING;
        return false;
    }
    bool chosen[f->n + 1];
    if (sl_retry_select(f->temporary, f->cooling, f->n, f->pinned, chosen) == 0) {
        *why_not = SL_STEP_REASON_NOT_RETRIED;
        return false;
    }
    bool by_hint = false;
    int64_t pause = sl_retry_hint_floor(sl_retry_pause_ms(f->next_round, f->jitter_unit, f->params),
                                        f->hint_ms, f->params, &by_hint);
    if (!sl_retry_fits(f->now_ms, pause, f->deadline_ms)) {
        *why_not = SL_STEP_REASON_DEADLINE;
        return false;
    }
    memcpy(next_round, chosen, f->n * sizeof(*chosen));
    *out = (sl_step_t){.kind = SL_STEP_RETRY_ROUND, .pause_ms = pause, .by_hint = by_hint};
    return true;
}

sl_step_t
sl_next_step(const sl_step_facts_t *f, bool *next_round)
{
    if (f->stale)
        return (sl_step_t){.kind = SL_STEP_RESEND_FRESH, .reason = SL_STEP_REASON_STALE_CONNECTION};
    if (f->cls == SL_FAILURE_RATE_LIMITED)
        return (sl_step_t){.kind = SL_STEP_FAILOVER, .reason = SL_STEP_REASON_RATE_LIMITED};
    if (f->cls == SL_FAILURE_CONTEXT_LENGTH && f->has_context_fallback)
        return (sl_step_t){.kind = SL_STEP_CONTEXT_FALLBACK, .reason = SL_STEP_REASON_CONTEXT_FALLBACK};
    const sl_failure_class_info_t *info = sl_failure_class_info(f->cls);
    if (!info->fails_over)
        return give_up(f, SL_STEP_REASON_REQUEST_ERROR);
    sl_step_t step;
    sl_step_reason_t why_not;
    /* A conversation waits for its own upstream, but not for one whose breaker has just opened. */
    if (info->retried && f->pinned_here && !(f->pinned < f->n && f->cooling[f->pinned]) &&
        retry_round(f, next_round, &step, &why_not)) {
        step.reason = SL_STEP_REASON_PINNED_RETRY;
        return step;
    }
    if (f->has_next)
        return (sl_step_t){.kind = SL_STEP_FAILOVER, .reason = SL_STEP_REASON_NEXT_CANDIDATE};
    if (retry_round(f, next_round, &step, &why_not)) {
        step.reason = SL_STEP_REASON_RETRY_ROUND;
        return step;
    }
    return give_up(f, why_not);
}

sl_step_t
sl_next_step_hedged(const sl_step_facts_t *f, bool failed_is_hedge, bool *next_round)
{
    if (!sl_failure_class_info(f->cls)->fails_over)
        return sl_next_step(f, next_round);
    return (sl_step_t){.kind = SL_STEP_OTHER_HOP,
                       .reason =
                           failed_is_hedge ? SL_STEP_REASON_HEDGE_FAILED : SL_STEP_REASON_HEDGE_GOES_ON};
}

sl_hedge_verdict_t
sl_hedge_decide(const sl_hedge_facts_t *f)
{
    if (f->first_token_secs == 0)
        return SL_HEDGE_OFF;
    if (!f->has_later)
        return SL_HEDGE_LAST;
    if (f->sealed_history)
        return SL_HEDGE_SEALED;
    if (f->has_content)
        return SL_HEDGE_HAS_CONTENT;
    if (f->hedged)
        return SL_HEDGE_ALREADY;
    if (f->now_ms >= f->deadline_ms)
        return SL_HEDGE_PAST_DEADLINE;
    if (f->now_ms - f->sent_ms < (int64_t)f->first_token_secs * 1000)
        return SL_HEDGE_NOT_YET;
    return SL_HEDGE_START;
}

const char *
sl_hedge_verdict_name(sl_hedge_verdict_t v)
{
    static const char *const names[] = {"start",  "off",         "not_yet", "last",
                                        "sealed", "has_content", "already", "past_deadline"};
    return (unsigned)v < sizeof(names) / sizeof(names[0]) ? names[v] : "?";
}
