/*
 * After a hop failed (behaviour.md §3, §5): fail over to the next candidate, or start a retry
 * round after its pause, or hand the failure over.
 */
#include "req.h"

static bool schedule_retry(request_t *r);

/* ---- failures and failover ----------------------------------------------------------------- */

/* Whether a candidate after the current one could still be tried. */
bool
sl__has_next_candidate(const request_t *r)
{
    for (size_t i = r->cur + 1; i < r->n_cands; i++) {
        if (r->in_round[i] && r->skips[i] == SL_ROW_SKIP_NONE)
            return true;
    }
    return false;
}

static void
remember_failure(request_t *r, sl_code_t code, const char *detail)
{
    r->last.any = true;
    r->last.code = code;
    r->last.status = r->up_status;
    snprintf(r->last.detail, sizeof(r->last.detail), "%s", detail != NULL ? detail : "");
}

/*
 * A hop failed before anything reached the client. Every failure fails over
 * (formats.md, "Error classification") except a request error; with no
 * candidate left the caller hands the upstream's answer over (sl__pass_through)
 * or, when there is none, answers with the gateway's error.
 */
bool
sl__fail_over(request_t *r, const sl_failure_t *f, const char *detail, int64_t hint_ms)
{
    sl_failure_class_t cls = sl_classify_failure(f);
    const sl_failure_class_info_t *info = sl_failure_class_info(cls);
    sl_code_t code = sl_failure_code(f, cls);
    sl__breaker_account(r, info);
    if (cls == SL_FAILURE_RATE_LIMITED && r->up != NULL) {
        /* Not a failure (§6): the whole upstream pauses, and this request waits in its place or goes
         * elsewhere. */
        sl_upstream_t *up = r->up;
        sl_waitq_lock();
        bool changed =
            sl_throttle_on_429(&up->throttle, sl_now_ms(), hint_ms,
                               r->config->failover.rate_limit_max_pause_secs, &r->gw->retry_params);
        sl_throttle_t throttle = up->throttle;
        sl_waitq_unlock();
        r->throttle_probe = false;
        r->hop_uncounted = true;
        if (changed)
            sl__emit_throttle(r, up->name, &throttle);
        sl__close_attempt(r, f->source == SL_FAILURE_STATUS ? SL_ROW_HOP_STATUS : SL_ROW_HOP_ERROR, code,
                          detail);
        remember_failure(r, code, detail);
        sl__end_hop(r);
        r->skips[r->cur] = SL_ROW_SKIP_THROTTLED;
        r->next = r->cur + 1;
        sl__next_hop(r);
        return true;
    }
    sl__throttle_answered(r);
    sl__close_attempt(r, f->source == SL_FAILURE_STATUS ? SL_ROW_HOP_STATUS : SL_ROW_HOP_ERROR, code, detail);
    remember_failure(r, code, detail);
    r->failed_temporary[r->cur] = info->retried;
    if (hint_ms > r->hint_ms)
        r->hint_ms = hint_ms;
    sl_log_debug("request %llu: %s failed (%s: %s)", (unsigned long long)r->id,
                 sl__provider_of(r, r->cur)->name, info->name, detail != NULL ? detail : "");
    /* A request error is the client's: handed back at once, no failover, no retry. */
    if (!info->fails_over)
        return false;
    /* A conversation's own upstream is waited for while it can still serve before the deadline (§1.5). */
    if (info->retried && r->cur == sl__pinned_candidate(r) && schedule_retry(r)) {
        sl__end_hop(r);
        return true;
    }
    if (sl__has_next_candidate(r)) {
        sl__end_hop(r);
        r->next = r->cur + 1;
        sl__next_hop(r);
        return true;
    }
    if (schedule_retry(r)) {
        sl__end_hop(r);
        return true;
    }
    return false;
}

/* ---- retry rounds, the 15 s rule, clients that leave ---------------------------------------- */

/* A draw from [0, 1) for the pause's jitter; nothing depends on its quality. */
static double
jitter_unit(void)
{
    static _Thread_local uint64_t state;
    if (state == 0)
        state = (uint64_t)sl_wall_ms() * 0x9E3779B97F4A7C15ull | 1;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (double)(state >> 11) / (double)(1ull << 53);
}

/* The pause before retry round `round`: the schedule, lengthened by the round's hint (behaviour.md §5). */
static int64_t
retry_pause(const request_t *r, uint32_t round, int64_t hint_ms, bool *by_hint)
{
    int64_t pause = sl_retry_pause_ms(round, jitter_unit(), &r->gw->retry_params);
    return sl_retry_hint_floor(pause, hint_ms, &r->gw->retry_params, by_hint);
}

/* The retry hint of a failure: the upstream's headers (when it answered) and its error text. */
int64_t
sl__failure_hint(const request_t *r, const sl_headers_t *headers, const char *body, size_t len)
{
    (void)r;
    return sl_hint_find(headers, body, len, sl_wall_ms()).ms;
}

/* Whether this request may still wait or retry at all (behaviour.md §5): wait_secs 0 never does. */
bool
sl__may_wait(const request_t *r)
{
    return sl_retry_may_wait(r->config->failover.wait_secs, r->in.endpoint.op == SL_OP_COUNT_TOKENS) &&
           sl_now_ms() < r->deadline_ms;
}

static void
on_backoff_done(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, backoff_timer, t);
    if (sl__events_on(r)) {
        sl_proto_event_t ev;
        sl__emit(r, sl_bus_request_dequeued(&ev, sl_wall_ms(), r->id, NULL));
    }
    r->next = 0;
    sl__next_hop(r);
}

/* The candidate a conversation stays on (affinity moved it first), or SL_RETRY_UNPINNED. */
size_t
sl__pinned_candidate(const request_t *r)
{
    if (r->affinity_effect != SL_AFFINITY_STICKY && r->affinity_effect != SL_AFFINITY_SEALED)
        return SL_RETRY_UNPINNED;
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->skips[i] == SL_ROW_SKIP_NONE)
            return i;
    }
    return SL_RETRY_UNPINNED;
}

/*
 * Every candidate of the round has failed. When some failed temporarily and
 * the next pause ends before the deadline, starts the pause before a retry
 * round of exactly those (behaviour.md §5) and returns true; else false and
 * the caller hands the last failure over.
 */
static bool
schedule_retry(request_t *r)
{
    if (!sl__may_wait(r))
        return false;
    size_t n = r->n_cands;
    bool cooling[n + 1], next[n + 1];
    int64_t now = sl_now_ms();
    for (size_t i = 0; i < n; i++) {
        sl_upstream_t *up = r->snapshot->upstreams[r->cands[i].provider];
        pthread_mutex_lock(&up->lock);
        cooling[i] = sl_breaker_is_cooling(&up->breaker, now);
        pthread_mutex_unlock(&up->lock);
    }
    /* A conversation that stays on an upstream (moved first by affinity) retries only that upstream. */
    size_t pinned = sl__pinned_candidate(r);
    bool temporary[n + 1];
    for (size_t i = 0; i < n; i++)
        temporary[i] = r->in_round[i] && r->failed_temporary[i];
    if (sl_retry_select(temporary, cooling, n, pinned, next) == 0)
        return false;
    bool by_hint = false;
    int64_t pause = retry_pause(r, r->round + 1, r->hint_ms, &by_hint);
    if (!sl_retry_fits(now, pause, r->deadline_ms))
        return false;

    r->round++;
    r->round_backoff_ms = pause;
    r->hint_ms = -1;
    r->waited = true;
    for (size_t i = 0; i < n; i++) {
        r->in_round[i] = next[i];
        r->failed_temporary[i] = false;
    }
    r->state = REQ_BACKOFF;
    sl_timer_arm(&r->io->timers, &r->backoff_timer, now + pause, on_backoff_done);
    sl_log_debug("request %llu: retry round %u in %lld ms", (unsigned long long)r->id, r->round,
                 (long long)pause);
    if (sl__events_on(r)) {
        const char *names[n + 1];
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (next[i])
                names[k++] = sl__provider_of(r, i)->name;
        }
        sl_msg_t last = sl_msg_make(r->last.code, "provider", sl__provider_of(r, r->cur)->name, "reason",
                                    r->last.detail, "code", r->last.detail, "status", r->last.detail, NULL);
        int64_t wall = sl_wall_ms();
        sl_proto_event_t ev;
        sl__emit(r, sl_bus_request_retrying(&ev, wall, r->id, names, k, r->round, wall + pause,
                                            wall + (r->deadline_ms - now), by_hint, &last));
        sl_msg_free(&last);
    }
    return true;
}
