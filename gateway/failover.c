/*
 * After a hop failed before its answer reached the client (behaviour.md §3,
 * §5, §6): the failure is classified, core/next_step.c says what the request
 * does now and why, the attempt is recorded with that reason, and the step
 * is carried out here — a failover, a retry round after its pause, a resend
 * on a fresh connection, or the end (the failure handed over, or the
 * gateway's error).
 */
#include "req.h"

/* The first candidate failover may go on to: after the current one, or after its failed hedge's (§4). */
static size_t
first_later_candidate(const request_t *r)
{
    size_t from = r->cur + 1;
    if (r->hedge.resume_after != SIZE_MAX && r->hedge.resume_after >= from)
        from = r->hedge.resume_after + 1;
    return from;
}

/* Whether a candidate after the current one could still be tried. */
bool
sl__has_next_candidate(const request_t *r)
{
    for (size_t i = first_later_candidate(r); i < r->n_cands; i++) {
        if (r->retry.in_round[i] && r->skips[i] == SL_SKIP_NONE)
            return true;
    }
    return false;
}

void
sl__remember_failure(request_t *r, sl_code_t code, const char *detail)
{
    r->retry.last = (last_failure_t){.any = true,
                                     .code = code,
                                     .status = r->rd.up_status,
                                     .provider = r->attempt < r->n_attempts ? r->attempts[r->attempt].provider
                                                                            : SIZE_MAX};
    snprintf(r->retry.last.detail, sizeof(r->retry.last.detail), "%s", detail != NULL ? detail : "");
}

sl_msg_t
sl__last_failure_msg(const request_t *r)
{
    const last_failure_t *l = &r->retry.last;
    const char *provider = l->provider != SIZE_MAX ? r->config->providers[l->provider].name : "";
    return sl__failure_msg(r, l->code, provider, l->status, l->detail);
}

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

/* The retry hint of a failure: the upstream's headers (when it answered) and its error text. */
int64_t
sl__failure_hint(const sl_headers_t *headers, const char *body, size_t len)
{
    return sl_hint_find(headers, body, len, sl_wall_ms()).ms;
}

/* Whether this request may still wait or retry at all (behaviour.md §5): wait_secs 0 never does. */
bool
sl__may_wait(const request_t *r)
{
    return sl_retry_may_wait(r->config->failover.wait_secs, r->in.endpoint.op == SL_OP_COUNT_TOKENS) &&
           sl_now_ms() < r->retry.deadline_ms;
}

/*
 * The candidate a conversation stays on (affinity moved it first; going back home, its home went first and
 * it is second), or SL_RETRY_UNPINNED.
 */
size_t
sl__pinned_candidate(const request_t *r)
{
    size_t at = r->affinity_effect == SL_AFFINITY_RETURNED ? 1 : 0;
    if (r->affinity_effect != SL_AFFINITY_STICKY && r->affinity_effect != SL_AFFINITY_SEALED && at == 0)
        return SL_RETRY_UNPINNED;
    if (at < r->n_cands && r->cands[at].skip == SL_SKIP_NONE)
        return at;
    return SL_RETRY_UNPINNED;
}

static void
on_backoff_done(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, retry.backoff_timer, t);
    sl__emit_dequeued(r, NULL);
    r->next = 0;
    sl__next_hop(r);
}

/* The pause before a retry round of the candidates in next starts (behaviour.md §5). */
static void
start_retry_round(request_t *r, const sl_step_t *step, const bool *next)
{
    size_t n = r->n_cands;
    int64_t now = sl_now_ms();
    r->retry.round++;
    r->retry.round_backoff_ms = step->pause_ms;
    r->retry.hint_ms = -1;
    r->retry.waited = true;
    /*
     * A conversation's retry of its own upstream keeps the candidates after it in the round: it lets go to
     * them when that upstream cannot serve it before the deadline, or its breaker opens (§1.5, §5).
     */
    bool pinned = step->reason == SL_STEP_REASON_PINNED_RETRY;
    for (size_t i = 0; i < n; i++) {
        r->retry.in_round[i] = next[i] || (pinned && i > r->cur);
        r->retry.failed_temporary[i] = false;
    }
    sl__set_phase(r, PHASE_BACKOFF);
    sl_metrics_retry_round(r->io->metrics, sl__metrics_route(r));
    sl_timer_arm(&r->io->timers, &r->retry.backoff_timer, now + step->pause_ms, on_backoff_done);
    sl_log_debug("request %llu: retry round %u in %lld ms (%s)", (unsigned long long)r->id, r->retry.round,
                 (long long)step->pause_ms, sl_step_reason_slug(step->reason));
    sl__emit_retrying(r, next, step->pause_ms, step->by_hint);
}

/* The facts next_step decides on, as this request and its candidates stand now. */
static void
gather_facts(request_t *r, sl_failure_class_t cls, bool stale, bool *temporary, bool *cooling,
             sl_step_facts_t *f)
{
    size_t n = r->n_cands;
    int64_t now = sl_now_ms();
    for (size_t i = 0; i < n; i++) {
        temporary[i] = r->retry.in_round[i] && r->retry.failed_temporary[i];
        sl_upstream_t *up = r->snapshot->upstreams[r->cands[i].provider];
        pthread_mutex_lock(&up->lock);
        cooling[i] = sl_breaker_is_cooling(&up->breaker, now);
        pthread_mutex_unlock(&up->lock);
    }
    size_t pinned = sl__pinned_candidate(r);
    *f = (sl_step_facts_t){
        .cls = cls,
        .stale = stale,
        .has_answer = r->rd.up_status != 0,
        .has_next = sl__has_next_candidate(r),
        .pinned_here = pinned == r->cur,
        .has_context_fallback = sl__may_switch_to_context_fallback(r),
        .may_wait = sl__may_wait(r),
        .temporary = temporary,
        .cooling = cooling,
        .n = n,
        .pinned = pinned,
        .next_round = r->retry.round + 1,
        .hint_ms = r->retry.hint_ms,
        .jitter_unit = jitter_unit(),
        .params = &r->gw->retry_params,
        .now_ms = now,
        .deadline_ms = r->retry.deadline_ms,
    };
}

void
sl__hop_failed(request_t *r, const sl_failure_t *f, const char *detail, int64_t hint_ms,
               const sl_connection_facts_t *conn)
{
    sl_failure_class_t cls = sl_classify_failure(f);
    const sl_failure_class_info_t *info = sl_failure_class_info(cls);
    /* The first hop failed before its hedge went out: no hedge. */
    sl__hedge_abandon(r);
    bool hedged = sl__hedge_running(r);
    sl_code_t code = sl_failure_code(f, cls);
    /* A stale keep-alive says nothing about the upstream: no breaker count, no throttle news. */
    bool stale = conn != NULL && f->source == SL_FAILURE_BROKEN_BEFORE_HEAD && sl_connection_was_stale(conn);
    if (!stale)
        sl__breaker_account(r, info);
    if (cls == SL_FAILURE_RATE_LIMITED)
        sl__throttle_pause(r, hint_ms);
    else if (!stale)
        sl__throttle_answered(r);
    sl__remember_failure(r, code, detail);
    r->m.has_failure = true;
    r->m.failure = cls;
    if (cls != SL_FAILURE_RATE_LIMITED && !stale) {
        r->retry.failed_temporary[r->cur] = info->retried;
        if (hint_ms > r->retry.hint_ms)
            r->retry.hint_ms = hint_ms;
    }
    bool temporary[r->n_cands + 1], cooling[r->n_cands + 1], next[r->n_cands + 1];
    sl_step_facts_t facts;
    gather_facts(r, cls, stale, temporary, cooling, &facts);
    sl_step_t step =
        hedged ? sl_next_step_hedged(&facts, sl__hedge_is_installed(r), next) : sl_next_step(&facts, next);
    /* The client's own error ends the request as ever: the other hop of a hedge goes first. */
    if (hedged && step.kind != SL_STEP_OTHER_HOP)
        sl__hedge_drop(r, SL_HOP_CANCELLED, code, detail);
    sl_hop_outcome_t outcome = stale                            ? SL_HOP_STALE_CONNECTION
                               : f->source == SL_FAILURE_STATUS ? SL_HOP_STATUS
                                                                : SL_HOP_ERROR;
    sl__close_failed_attempt(r, outcome, sl_attempt_label_of_failure(cls, f->source, stale), code, detail,
                             step.reason);
    /* A 429 that leaves the request waiting is noted as queued_429 when the wait starts. */
    if (step.reason != SL_STEP_REASON_RATE_LIMITED || facts.has_next)
        sl__note_trouble(r, sl_trouble_of_step(step.reason));
    sl_log_debug("request %llu: %s failed (%s: %s): %s", (unsigned long long)r->id,
                 sl__provider_of(r, r->cur)->name, info->name, detail != NULL ? detail : "",
                 sl_step_reason_slug(step.reason));
    switch (step.kind) {
    case SL_STEP_RESEND_FRESH:
        sl__end_hop(r);
        r->fresh = true;
        sl__set_phase(r, PHASE_ROUTING);
        sl__start_hop(r, r->cur);
        return;
    case SL_STEP_FAILOVER:
        sl__end_hop(r);
        if (cls == SL_FAILURE_RATE_LIMITED)
            r->skips[r->cur] = SL_SKIP_THROTTLED;
        r->next = first_later_candidate(r);
        sl__next_hop(r);
        return;
    case SL_STEP_OTHER_HOP:
        sl__end_hop(r);
        if (cls == SL_FAILURE_RATE_LIMITED)
            r->skips[r->cur] = SL_SKIP_THROTTLED;
        sl__hedge_other_goes_on(r);
        return;
    case SL_STEP_RETRY_ROUND:
        sl__end_hop(r);
        start_retry_round(r, &step, next);
        return;
    case SL_STEP_CONTEXT_FALLBACK:
        sl__end_hop(r);
        sl__switch_to_context_fallback(r);
        sl__next_hop(r);
        return;
    case SL_STEP_HAND_OVER:
        /* An error status's body goes on as bytes; a held stream as the events it was. */
        if (f->source == SL_FAILURE_STATUS)
            r->rd.events = false;
        sl__hand_over(r, r->rd.events && r->hop == NULL && !sl_stream_complete(&r->rd.stream));
        return;
    case SL_STEP_GATEWAY_ERROR:
        sl__end_hop(r);
        sl__answer_with_failure(r);
        return;
    }
}
