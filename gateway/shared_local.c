/*
 * The shared state of one process (shared_state.h): every upstream's
 * throttle and line, every limit set's counters and line, under the wait
 * lock (waitq.h); slots and the breaker under the upstream's own lock. Every
 * call is carried out before it returns; its answer is given then too, or,
 * deferring, at the next turn of the caller's loop (pending until then).
 */
#include "shared_state.h"

#include <assert.h>
#include <stdlib.h>

#include "core/xalloc.h"

typedef struct {
    sl_shared_state_t base;
    const atomic_bool *stopping;
    bool defer_answers;
} local_state_t;

static const atomic_bool *
stopping_of(sl_shared_state_t *ss)
{
    return ((local_state_t *)ss)->stopping;
}

/* ---- answers, at once or at the next turn of the caller's loop ----------------------------------- */

typedef enum { ANSWER_CLAIM, ANSWER_KEY, ANSWER_NEWS, ANSWER_JOINED } answer_kind_t;

typedef struct {
    sl_timer_t timer; /* first: the timer callback finds the answer from it */
    sl_shared_state_t *ss;
    sl_shared_call_t *call;
    answer_kind_t kind;
    void *done; /* the callback of kind's type */
    void *ctx;
    sl_upstream_t *up;   /* a claim: whose slot it took */
    sl_waiter_t *waiter; /* lines joined: who joined them */
    union {
        sl_upstream_claim_result_t claim;
        sl_key_claim_result_t key;
        sl_throttle_news_t news;
        sl_lines_joined_t joined;
    } result;
} answer_t;

static void
deliver(const answer_t *a)
{
    switch (a->kind) {
    case ANSWER_CLAIM:
        ((sl_upstream_claim_cb)a->done)(a->ctx, &a->result.claim);
        break;
    case ANSWER_KEY:
        ((sl_key_claim_cb)a->done)(a->ctx, &a->result.key);
        break;
    case ANSWER_NEWS:
        ((sl_throttle_news_cb)a->done)(a->ctx, &a->result.news);
        break;
    case ANSWER_JOINED:
        ((sl_lines_joined_cb)a->done)(a->ctx, &a->result.joined);
        break;
    }
}

static void
on_answer_due(sl_timer_t *t)
{
    answer_t *a = (answer_t *)t;
    a->call->pending = NULL;
    deliver(a);
    free(a);
}

/* Gives the answer a (a copy) to its caller: now, or deferring, once the call has returned. */
static void
answer(const answer_t *a)
{
    local_state_t *s = (local_state_t *)a->ss;
    if (!s->defer_answers || a->call->timers == NULL) {
        deliver(a);
        return;
    }
    answer_t *later = sl_xmalloc(sizeof(*later));
    *later = *a;
    later->timer = (sl_timer_t){0};
    a->call->pending = later;
    sl_timer_arm(a->call->timers, &later->timer, 0, on_answer_due);
}

/* With the wait lock held: whether set's limits count tokens or cost, so the upstream must report usage. */
static bool
counts_tokens(const sl_limit_set_t *set)
{
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        if (set->states[i].limit.measure != SL_MEASURE_REQUESTS)
            return true;
    }
    return false;
}

/* With the wait lock held: set is charged a at wall time at_ms (the estimate, reserving room). */
static sl_charge_t
reserve(sl_limit_set_t *set, int64_t at_ms, const sl_amounts_t *a)
{
    sl_limits_add(set->states, set->n, at_ms, at_ms, a);
    return (sl_charge_t){.set = set, .at_ms = at_ms, .amounts = *a};
}

/* What ThrottleChanged shows for a set's limits: a full window or a used-up period, else nothing. */
static sl_limit_verdict_t
shown_verdict(sl_limit_verdict_t v)
{
    return v == SL_LIMIT_WINDOW_FULL || v == SL_LIMIT_PERIOD_USED_UP ? v : SL_LIMIT_OK;
}

/* With the wait lock held: room in the upstream's limits for need (the verdict shown moves with it). */
static void
check_limits(const sl_upstream_claim_t *c, sl_upstream_claim_result_t *out)
{
    sl_limit_set_t *set = c->limits;
    sl_limits_check_t limits =
        sl_limits_check_share(set->states, set->n, c->wall_ms, &c->need, c->limit_parts);
    out->limit = set->states[limits.which].limit;
    if (shown_verdict(limits.verdict) != set->shown && limits.verdict != SL_LIMIT_NEVER) {
        set->shown = shown_verdict(limits.verdict);
        set->shown_until_ms = limits.recovery_ms;
        set->shown_limit = set->states[limits.which].limit;
        out->limits_changed = true;
        out->shown = set->shown;
        out->shown_until_ms = limits.recovery_ms;
    }
    if (limits.verdict == SL_LIMIT_OK)
        return;
    out->skip = limits.verdict == SL_LIMIT_PERIOD_USED_UP ? SL_SKIP_PERIOD_USED_UP : SL_SKIP_WINDOW_FULL;
    out->recovery_ms =
        limits.verdict == SL_LIMIT_NEVER ? SL_THROTTLE_NEVER : c->now_ms + (limits.recovery_ms - c->wall_ms);
}

/* A slot under max_concurrent and the breaker's leave (or its half-open probe), under the upstream's lock. */
static void
take_slot(const sl_upstream_claim_t *c, sl_upstream_claim_result_t *out)
{
    sl_upstream_t *up = c->up;
    pthread_mutex_lock(&up->lock);
    if (c->max_concurrent > 0 && up->in_flight >= c->max_concurrent) {
        out->skip = SL_SKIP_BUSY;
    } else {
        bool is_probe = false;
        sl_breaker_state_t state =
            sl_breaker_check(&up->breaker, c->now_ms, &is_probe, &out->breaker_changed);
        if (state == SL_BREAKER_CLOSED || is_probe || c->bypass_breaker) {
            up->in_flight++;
            out->breaker_probe = is_probe;
        } else {
            out->skip = SL_SKIP_COOLING;
        }
    }
    out->breaker = up->breaker;
    pthread_mutex_unlock(&up->lock);
}

static void
local_claim_upstream(sl_shared_state_t *ss, const sl_upstream_claim_t *c, sl_shared_call_t *call,
                     sl_upstream_claim_cb done, void *ctx)
{
    sl_upstream_t *up = c->up;
    sl_upstream_claim_result_t out = {.skip = SL_SKIP_NONE};
    bool has_limits = c->limits != NULL;
    sl_waitq_lock();
    out.throttle_changed = sl_throttle_check(&up->throttle, c->now_ms);
    /* Waiters go in arrival order: a request that is not first in the line lets the first go. */
    bool first = c->waiter != NULL ? sl_waitq_is_head(&up->waitq, c->waiter) : up->waitq.len == 0;
    /*
     * Whoever waits is served first, in arrival order: nobody overtakes the
     * line's head, and the head goes only once the one released before it
     * is on its way — so the upstream receives them in arrival order.
     */
    bool in_line = !first || up->dispatching;
    bool throttle_probe = false;
    bool admitted = !in_line && sl_throttle_admit(&up->throttle, c->now_ms, first, &throttle_probe);
    out.throttle = up->throttle;
    /* Behind others in line it waits as for a slot: woken when the line moves, not by a timer. */
    out.skip = admitted ? SL_SKIP_NONE : in_line ? SL_SKIP_BUSY : SL_SKIP_THROTTLED;
    if (admitted) {
        if (has_limits && c->limits->n > 0)
            check_limits(c, &out);
        if (out.skip == SL_SKIP_NONE)
            take_slot(c, &out);
        if (out.skip != SL_SKIP_NONE && throttle_probe)
            sl_throttle_probe_abandoned(&up->throttle);
        else
            out.throttle_probe = throttle_probe;
        if (out.skip == SL_SKIP_NONE && c->waiter != NULL) {
            up->dispatching = true;
            out.dispatching = true;
        }
        if (out.skip == SL_SKIP_NONE && has_limits && c->limits->n > 0)
            out.charge = reserve(c->limits, c->wall_ms, &c->need);
        out.reached_limits = true;
        out.counts_tokens = counts_tokens(c->limits);
    }
    sl_waitq_unlock();
    answer(&(answer_t){.ss = ss,
                       .call = call,
                       .kind = ANSWER_CLAIM,
                       .done = (void *)done,
                       .ctx = ctx,
                       .up = up,
                       .result.claim = out});
}

/* With the wait lock held: charge's estimate becomes used. Returns whether room came free. */
static bool
settle_locked(sl_charge_t *charge, const sl_amounts_t *used, int64_t now_wall)
{
    sl_amounts_t delta = {used->requests - charge->amounts.requests, used->tokens - charge->amounts.tokens,
                          used->cost_micros - charge->amounts.cost_micros};
    sl_limits_add(charge->set->states, charge->set->n, charge->at_ms, now_wall, &delta);
    *charge = (sl_charge_t){0};
    return delta.requests < 0 || delta.tokens < 0 || delta.cost_micros < 0;
}

static void
local_release_upstream(sl_shared_state_t *ss, const sl_upstream_release_t *rel)
{
    (void)ss;
    sl_upstream_t *up = rel->up;
    pthread_mutex_lock(&up->lock);
    up->in_flight--;
    if (rel->breaker_probe)
        sl_breaker_release_probe(&up->breaker);
    pthread_mutex_unlock(&up->lock);
    /* A slot came free (the line's head may take it); a probe that never got an answer is handed back. */
    sl_waitq_lock();
    if (rel->charge != NULL && rel->charge->set != NULL)
        settle_locked(rel->charge, &rel->used, rel->wall_ms);
    if (rel->throttle_probe)
        sl_throttle_probe_abandoned(&up->throttle);
    if (rel->unused && rel->dispatching)
        up->dispatching = false;
    if (!rel->unused)
        sl_waitq_wake(&up->waitq, 1);
    sl_waitq_unlock();
}

static void
local_hop_sent(sl_shared_state_t *ss, sl_upstream_t *up, bool dispatching, sl_charge_t *charge,
               int64_t wall_ms)
{
    (void)ss;
    bool moves = charge != NULL && charge->set != NULL && wall_ms > charge->at_ms;
    if (!moves && !dispatching)
        return;
    sl_waitq_lock();
    if (dispatching) {
        up->dispatching = false;
        sl_waitq_wake(&up->waitq, 1);
    }
    if (moves) {
        sl_amounts_t back = {-charge->amounts.requests, -charge->amounts.tokens,
                             -charge->amounts.cost_micros};
        sl_limits_add(charge->set->states, charge->set->n, charge->at_ms, wall_ms, &back);
        sl_limits_add(charge->set->states, charge->set->n, wall_ms, wall_ms, &charge->amounts);
        charge->at_ms = wall_ms;
    }
    sl_waitq_unlock();
}

static void
local_upstream_answered(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, sl_shared_call_t *call,
                        sl_throttle_news_cb done, void *ctx)
{
    sl_waitq_lock();
    sl_throttle_news_t news = {.up = up, .changed = sl_throttle_on_answer(&up->throttle, now_ms)};
    news.throttle = up->throttle;
    /* The line moves one at a time, in order: each request that leaves wakes the next. */
    if (news.changed)
        sl_waitq_wake(&up->waitq, 1);
    sl_waitq_unlock();
    answer(&(answer_t){
        .ss = ss, .call = call, .kind = ANSWER_NEWS, .done = (void *)done, .ctx = ctx, .result.news = news});
}

static void
local_upstream_rate_limited(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, int64_t hint_ms,
                            uint32_t max_pause_secs, const sl_retry_params_t *params, sl_shared_call_t *call,
                            sl_throttle_news_cb done, void *ctx)
{
    sl_waitq_lock();
    sl_throttle_news_t news = {
        .up = up, .changed = sl_throttle_on_429(&up->throttle, now_ms, hint_ms, max_pause_secs, params)};
    news.throttle = up->throttle;
    sl_waitq_unlock();
    answer(&(answer_t){
        .ss = ss, .call = call, .kind = ANSWER_NEWS, .done = (void *)done, .ctx = ctx, .result.news = news});
}

static void
local_pause_upstream(sl_shared_state_t *ss, sl_upstream_t *up, int64_t until_ms, int64_t now_ms,
                     sl_shared_call_t *call, sl_throttle_news_cb done, void *ctx)
{
    sl_waitq_lock();
    sl_throttle_news_t news = {.up = up,
                               .changed = sl_throttle_pause_manual(&up->throttle, until_ms, now_ms)};
    news.throttle = up->throttle;
    sl_waitq_wake(&up->waitq, SIZE_MAX);
    sl_waitq_unlock();
    answer(&(answer_t){
        .ss = ss, .call = call, .kind = ANSWER_NEWS, .done = (void *)done, .ctx = ctx, .result.news = news});
}

static void
local_resume_upstream(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, sl_shared_call_t *call,
                      sl_throttle_news_cb done, void *ctx)
{
    sl_waitq_lock();
    sl_throttle_news_t news = {.up = up, .changed = sl_throttle_resume(&up->throttle, now_ms)};
    news.throttle = up->throttle;
    /* The line moves one at a time: the head goes (as the probe when one is due), then the next. */
    sl_waitq_wake(&up->waitq, 1);
    sl_waitq_unlock();
    answer(&(answer_t){
        .ss = ss, .call = call, .kind = ANSWER_NEWS, .done = (void *)done, .ctx = ctx, .result.news = news});
}

/* With the wait lock held: room in the key's limits, and the key's line. */
static void
check_key(const sl_key_claim_t *c, sl_key_claim_result_t *out)
{
    sl_limit_set_t *set = c->key;
    /* Nobody overtakes the key's line. */
    bool first = c->waiter != NULL ? sl_waitq_is_head(&set->queue, c->waiter) : set->queue.len == 0;
    out->check = sl_limits_check_share(set->states, set->n, c->wall_ms, &c->need, c->limit_parts);
    if (out->check.verdict == SL_LIMIT_OK && first) {
        out->admitted = true;
        out->charge = reserve(set, c->wall_ms, &c->need);
        out->counts_tokens = counts_tokens(set);
        if (c->waiter != NULL) {
            sl_waiter_leave_all(c->waiter);
            sl_waitq_wake(&set->queue, 1);
        }
    } else {
        out->limit = set->states[out->check.which].limit;
    }
}

static void
local_claim_key(sl_shared_state_t *ss, const sl_key_claim_t *c, sl_shared_call_t *call, sl_key_claim_cb done,
                void *ctx)
{
    sl_limit_set_t *set = c->key;
    sl_key_claim_result_t out = {0};
    sl_waitq_lock();
    if (set->n == 0) {
        out.admitted = true;
    } else if (atomic_load(stopping_of(ss))) {
        out.draining = true;
    } else {
        check_key(c, &out);
    }
    sl_waitq_unlock();
    answer(&(answer_t){
        .ss = ss, .call = call, .kind = ANSWER_KEY, .done = (void *)done, .ctx = ctx, .result.key = out});
}

static void
local_settle(sl_shared_state_t *ss, sl_charge_t *charge, const sl_amounts_t *used, bool wake_line,
             int64_t wall_ms)
{
    (void)ss;
    if (charge->set == NULL)
        return;
    sl_limit_set_t *set = charge->set;
    sl_waitq_lock();
    if (settle_locked(charge, used, wall_ms) && wake_line)
        sl_waitq_wake(&set->queue, 1);
    sl_waitq_unlock();
}

static sl_waitq_t *
line_queue(const sl_line_t *line)
{
    return line->up != NULL ? &line->up->waitq : &line->key->queue;
}

static void
local_join_lines(sl_shared_state_t *ss, sl_waiter_t *waiter, const sl_line_t *lines, size_t n,
                 sl_shared_call_t *call, sl_lines_joined_cb done, void *ctx)
{
    sl_lines_joined_t out = {0};
    sl_waitq_lock();
    /*
     * Read under the wait lock, which the drain's wake-up takes after
     * setting stopping: nobody joins unseen.
     */
    if (atomic_load(stopping_of(ss))) {
        out.draining = true;
    } else {
        for (size_t i = 0; i < n; i++)
            sl_waiter_join(waiter, line_queue(&lines[i]));
        out.joined = true;
    }
    sl_waitq_unlock();
    answer(&(answer_t){.ss = ss,
                       .call = call,
                       .kind = ANSWER_JOINED,
                       .done = (void *)done,
                       .ctx = ctx,
                       .waiter = waiter,
                       .result.joined = out});
}

static void
local_leave_lines(sl_shared_state_t *ss, sl_waiter_t *waiter, const sl_line_t *wake, size_t n)
{
    (void)ss;
    if (waiter != NULL)
        sl_waiter_release(waiter);
    if (n == 0)
        return;
    sl_waitq_lock();
    for (size_t i = 0; i < n; i++)
        sl_waitq_wake(line_queue(&wake[i]), 1);
    sl_waitq_unlock();
}

static void
local_end_dispatch(sl_shared_state_t *ss, sl_upstream_t *up)
{
    (void)ss;
    sl_waitq_lock();
    up->dispatching = false;
    sl_waitq_wake(&up->waitq, 1);
    sl_waitq_unlock();
}

static sl_pause_t
local_pause_of(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms)
{
    (void)ss;
    sl_waitq_lock();
    sl_pause_t p = {sl_throttle_kind(&up->throttle), sl_throttle_recovery_ms(&up->throttle, now_ms)};
    sl_waitq_unlock();
    return p;
}

static sl_upstream_view_t
local_upstream_view(sl_shared_state_t *ss, sl_upstream_t *up, sl_limit_set_t *limits)
{
    (void)ss;
    sl_upstream_view_t v = {.shown = SL_LIMIT_OK, .shown_until_ms = -1};
    sl_waitq_lock();
    v.throttle = up->throttle;
    v.queued = (uint32_t)up->waitq.len;
    if (limits != NULL) {
        v.shown = limits->shown;
        v.shown_limit = limits->shown_limit;
        v.shown_until_ms = limits->shown_until_ms;
    }
    sl_waitq_unlock();
    pthread_mutex_lock(&up->lock);
    v.in_flight = up->in_flight;
    pthread_mutex_unlock(&up->lock);
    return v;
}

/* An answer that will not be delivered: what its call took is given back (what it reported stands). */
static void
local_cancel(sl_shared_state_t *ss, sl_shared_call_t *call)
{
    answer_t *a = call->pending;
    call->pending = NULL;
    sl_timer_cancel(call->timers, &a->timer);
    switch (a->kind) {
    case ANSWER_CLAIM:
        if (a->result.claim.skip == SL_SKIP_NONE) {
            if (a->result.claim.dispatching)
                local_end_dispatch(ss, a->up);
            local_release_upstream(ss,
                                   &(sl_upstream_release_t){.up = a->up,
                                                            .charge = &a->result.claim.charge,
                                                            .throttle_probe = a->result.claim.throttle_probe,
                                                            .breaker_probe = a->result.claim.breaker_probe,
                                                            .wall_ms = a->result.claim.charge.at_ms});
        }
        break;
    case ANSWER_KEY:
        local_settle(ss, &a->result.key.charge, &(sl_amounts_t){0}, true, a->result.key.charge.at_ms);
        break;
    case ANSWER_JOINED:
        if (a->result.joined.joined) {
            sl_waitq_lock();
            sl_waiter_leave_all(a->waiter);
            sl_waitq_unlock();
        }
        break;
    case ANSWER_NEWS:
        break;
    }
    free(a);
}

static void
local_free(sl_shared_state_t *ss)
{
    free(ss);
}

/* One process: the limits are applied where they were pushed, and nowhere else is there to tell. */
static void
local_limits_replaced(sl_shared_state_t *ss, sl_bucket_kind_t kind, const char *name,
                      const sl_limit_t *limits, size_t n)
{
    (void)ss, (void)kind, (void)name, (void)limits, (void)n;
}

/* One process: the config is applied where it was pushed, and nowhere else is there to tell. */
static void
local_config_replaced(sl_shared_state_t *ss, const char *redacted, size_t len, uint64_t revision)
{
    (void)ss, (void)redacted, (void)len, (void)revision;
}

/* One process: the breaker is this process's already. */
static void
local_health_changed(sl_shared_state_t *ss, sl_upstream_t *up, const sl_breaker_t *breaker, int64_t now_ms)
{
    (void)ss, (void)up, (void)breaker, (void)now_ms;
}

static const sl_shared_state_ops_t local_ops = {
    .claim_upstream = local_claim_upstream,
    .release_upstream = local_release_upstream,
    .hop_sent = local_hop_sent,
    .upstream_answered = local_upstream_answered,
    .upstream_rate_limited = local_upstream_rate_limited,
    .pause_upstream = local_pause_upstream,
    .resume_upstream = local_resume_upstream,
    .claim_key = local_claim_key,
    .settle = local_settle,
    .join_lines = local_join_lines,
    .leave_lines = local_leave_lines,
    .end_dispatch = local_end_dispatch,
    .pause_of = local_pause_of,
    .upstream_view = local_upstream_view,
    .limits_replaced = local_limits_replaced,
    .config_replaced = local_config_replaced,
    .health_changed = local_health_changed,
    .cancel = local_cancel,
    .free = local_free,
};

sl_shared_state_t *
sl_shared_local_new(const atomic_bool *stopping, bool defer_answers)
{
    local_state_t *s = sl_xcalloc(1, sizeof(*s));
    s->base.ops = &local_ops;
    s->stopping = stopping;
    s->defer_answers = defer_answers;
    return &s->base;
}
