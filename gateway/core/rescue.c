/* The trouble sluice absorbed (see rescue.h). */
#include "rescue.h"

static const char *const slugs[SL_TROUBLE_COUNT] = {
#define SL_TROUBLE_SLUG(name, slug) [SL_TROUBLE_##name] = slug,
    SL_TROUBLE_CAUSES(SL_TROUBLE_SLUG)
#undef SL_TROUBLE_SLUG
};

const char *
sl_trouble_slug(sl_trouble_t t)
{
    return t >= 0 && t < SL_TROUBLE_COUNT ? slugs[t] : "";
}

sl_trouble_t
sl_trouble_of_step(sl_step_reason_t reason)
{
    switch (reason) {
    case SL_STEP_REASON_PINNED_RETRY:
    case SL_STEP_REASON_RETRY_ROUND:
        return SL_TROUBLE_RETRIED;
    case SL_STEP_REASON_RATE_LIMITED:
    case SL_STEP_REASON_NEXT_CANDIDATE:
    case SL_STEP_REASON_NOT_RETRIED:
    case SL_STEP_REASON_NO_WAITING:
    case SL_STEP_REASON_DEADLINE:
    case SL_STEP_REASON_HEDGE_GOES_ON: /* the first hop failed: its hedge serves */
        return SL_TROUBLE_FAILED_OVER;
    default: /* a stale keep-alive, the client's own request error, a context fallback, a hedge that failed */
        return SL_TROUBLE_NONE;
    }
}

sl_trouble_t
sl_trouble_of_skip(sl_skip_t skip)
{
    return skip == SL_SKIP_COOLING || skip == SL_SKIP_THROTTLED ? SL_TROUBLE_FAILED_OVER : SL_TROUBLE_NONE;
}

sl_trouble_t
sl_trouble_of_wait(sl_skip_t gate)
{
    switch (gate) {
    case SL_SKIP_THROTTLED:
        return SL_TROUBLE_QUEUED_429;
    case SL_SKIP_WINDOW_FULL:
    case SL_SKIP_KEY_WINDOW:
        return SL_TROUBLE_QUEUED_WINDOW;
    case SL_SKIP_BUSY:
        return SL_TROUBLE_QUEUED_SLOT;
    default:
        return SL_TROUBLE_NONE;
    }
}

sl_rescue_verdict_t
sl_rescue_verdict(const sl_rescue_facts_t *f)
{
    if (f->trouble == SL_TROUBLE_NONE || f->outcome == SL_ROW_CANCELLED)
        return SL_RESCUE_NEITHER;
    if (f->outcome == SL_ROW_SERVED && f->status >= 200 && f->status <= 299 && !f->stream_error)
        return SL_RESCUE_RESCUED;
    if (f->has_failure && (f->failure == SL_FAILURE_TEMPORARY || f->failure == SL_FAILURE_RATE_LIMITED))
        return SL_RESCUE_LOST;
    if (!f->has_failure && (f->status == 429 || f->status == 503))
        return SL_RESCUE_LOST;
    return SL_RESCUE_NEITHER;
}
