/*
 * Admission (behaviour.md §2, §6, §7): claiming an upstream for a hop (throttle, usage
 * limits, max_concurrent, breaker), the client key's limits, waiting in upstream and key queues, and
 * giving up with the final 429.
 */
#include "req.h"

/* The upstream of the hop answered (anything but a 429): its streak resets and a probe passes. */
void
sl__throttle_answered(request_t *r)
{
    if (r->up == NULL)
        return;
    sl_upstream_t *up = r->up;
    sl_waitq_lock();
    bool changed = sl_throttle_on_answer(&up->throttle, sl_now_ms());
    sl_throttle_t throttle = up->throttle;
    /* The queue moves one at a time, in order: each request that leaves wakes the next. */
    if (changed)
        sl_waitq_wake(&up->waitq, 1);
    sl_waitq_unlock();
    r->wait.throttle_probe = false;
    if (changed)
        sl__emit_throttle(r, up->name, &throttle);
}

/*
 * The hop's upstream answered 429 (§6): not a failure, but the whole
 * upstream pauses (for the hint, else its backoff), and the hop's charge
 * against its limits is taken back.
 */
void
sl__throttle_pause(request_t *r, int64_t hint_ms)
{
    if (r->up == NULL)
        return;
    sl_upstream_t *up = r->up;
    sl_waitq_lock();
    bool changed = sl_throttle_on_429(&up->throttle, sl_now_ms(), hint_ms,
                                      r->config->failover.rate_limit_max_pause_secs, &r->gw->retry_params);
    sl_throttle_t throttle = up->throttle;
    sl_waitq_unlock();
    r->wait.throttle_probe = false;
    r->acct.hop_uncounted = true;
    if (changed)
        sl__emit_throttle(r, up->name, &throttle);
}

/* A hop goes out after waiting: the time queued (for its key, then its upstreams) is its pause_ms. */
void
sl__note_queued_time(request_t *r, attempt_t *a, const char *provider)
{
    if (r->wait.key_pause_ms > 0) {
        a->pause_ms = r->wait.key_pause_ms;
        r->wait.key_pause_ms = 0;
    }
    if (r->wait.queued) {
        a->pause_ms = (a->pause_ms > 0 ? a->pause_ms : 0) + sl_now_ms() - r->wait.queued_since_ms;
        sl__stop_waiting(r, true);
        sl__emit_dequeued(r, provider);
    }
}

/* The heads of the queues it waited in may go now. */
static void
wake_next_in_line(request_t *r)
{
    sl_waitq_lock();
    for (size_t i = 0; i < r->n_cands; i++)
        sl_waitq_wake(&r->snapshot->upstreams[r->cands[i].provider]->waitq, 1);
    if (r->acct.key_limits != NULL)
        sl_waitq_wake(&r->acct.key_limits->queue, 1);
    sl_waitq_unlock();
}

/* The request released from a queue is on its way (or gone): the next in that queue may go. */
void
sl__end_dispatch(request_t *r)
{
    sl_upstream_t *up = r->wait.dispatching;
    if (up == NULL)
        return;
    r->wait.dispatching = NULL;
    sl_waitq_lock();
    up->dispatching = false;
    sl_waitq_wake(&up->waitq, 1);
    sl_waitq_unlock();
}

/* Leaves every queue. Leaving for a hop, the next in line goes once this one is sent; otherwise now. */
void
sl__stop_waiting(request_t *r, bool for_hop)
{
    sl_timer_cancel(&r->io->timers, &r->wait.wait_timer);
    if (r->wait.waiter != NULL) {
        sl_waiter_release(r->wait.waiter);
        r->wait.waiter = NULL;
        if (!for_hop)
            wake_next_in_line(r);
    }
    if (!for_hop)
        sl__end_dispatch(r);
    if (r->wait.counts_waiting) {
        atomic_fetch_sub(&r->gw->waiting_bytes, r->in.body_len);
        r->wait.counts_waiting = false;
    }
    r->wait.queued = false;
}

/* Something it waits on may have changed (a wake-up, or its timer): look again. */
static void
look_again(request_t *r)
{
    if (r->phase != PHASE_QUEUED)
        return;
    if (r->wait.key_waiting) {
        if (sl__admit_key(r)) {
            r->next = 0;
            sl__next_hop(r);
        }
        return;
    }
    for (size_t i = 0; i < r->n_cands; i++) {
        if (sl_skip_may_pass(r->skips[i]))
            r->skips[i] = SL_SKIP_NONE;
    }
    r->next = 0;
    sl__next_hop(r);
}

static void
on_wait_timer(sl_timer_t *t)
{
    look_again(H2O_STRUCT_FROM_MEMBER(request_t, wait.wait_timer, t));
}

void
sl_request_wake(void *owner)
{
    look_again(owner);
}

/* Waiting costs memory: whether this request's body still fits under limits.max_waiting_bytes. */
static bool
may_start_waiting(const request_t *r)
{
    return r->wait.counts_waiting ||
           atomic_load(&r->gw->waiting_bytes) + r->in.body_len <= r->config->max_waiting_bytes;
}

/*
 * The request has joined the queues it waits in (the gates, for
 * RequestQueued): it looks again when woken, or at timer_ms at the latest.
 */
static void
start_waiting(request_t *r, int64_t now, const sl_bus_gate_t *gates, size_t n_gates, int64_t timer_ms)
{
    sl__set_phase(r, PHASE_QUEUED);
    r->retry.waited = true;
    if (!r->wait.counts_waiting) {
        atomic_fetch_add(&r->gw->waiting_bytes, r->in.body_len);
        r->wait.counts_waiting = true;
    }
    if (!r->wait.queued) {
        r->wait.queued = true;
        r->wait.queued_since_ms = now;
        sl__emit_queued(r, gates, n_gates);
    }
    sl_timer_arm(&r->io->timers, &r->wait.wait_timer,
                 timer_ms < r->retry.deadline_ms ? timer_ms : r->retry.deadline_ms, on_wait_timer);
}

/* The gate a skipped candidate puts on waiting (§2, §6, §7). */
static sl_wait_gate_t
gate_of(const request_t *r, size_t i, int64_t now)
{
    sl_upstream_t *up = r->snapshot->upstreams[r->cands[i].provider];
    if (!r->retry.in_round[i])
        return (sl_wait_gate_t){.skip = r->skips[i], .recovery_ms = SL_THROTTLE_NEVER, .out_of_round = true};
    switch (r->skips[i]) {
    case SL_SKIP_THROTTLED:
        return (sl_wait_gate_t){.skip = SL_SKIP_THROTTLED,
                                .recovery_ms = sl_throttle_recovery_ms(&up->throttle, now)};
    case SL_SKIP_BUSY:
        return (sl_wait_gate_t){.skip = SL_SKIP_BUSY, .recovery_ms = now};
    case SL_SKIP_WINDOW_FULL:
        return (sl_wait_gate_t){.skip = SL_SKIP_WINDOW_FULL, .recovery_ms = r->wait.recovery_ms[i]};
    case SL_SKIP_PERIOD_USED_UP:
        return (sl_wait_gate_t){.skip = SL_SKIP_PERIOD_USED_UP, .recovery_ms = r->wait.recovery_ms[i]};
    default:
        return (sl_wait_gate_t){.skip = r->skips[i], .recovery_ms = SL_THROTTLE_NEVER};
    }
}

/*
 * No candidate can take the request now, but some are only paused, busy or
 * out of usage room: the pure rule decides whether it waits on them (and
 * until when), or gets the final 429 at once, or the last failure.
 */
void
sl__wait_or_give_up(request_t *r)
{
    /* Count-tokens never queue: while their upstream is unavailable the gateway estimates (§6). */
    if (r->in.endpoint.op == SL_OP_COUNT_TOKENS) {
        sl__answer_token_estimate(r);
        return;
    }
    size_t n = r->n_cands;
    int64_t now = sl_now_ms();
    sl_wait_gate_t gates[n + 1];
    bool wait_on[n + 1];
    sl_waitq_lock();
    /*
     * Draining: nothing starts to wait, and whoever waits is woken to end
     * here (read under the wait lock, which the drain's wake-up takes after
     * setting stopping, so no one joins unseen). A waiting request would be
     * cut at the end of the grace; answered now, its client can retry
     * elsewhere at once.
     */
    if (atomic_load(&r->gw->stopping)) {
        sl_waitq_unlock();
        sl__refuse_to_wait(r, SL_CODE_GW_SHUTTING_DOWN, "1");
        return;
    }
    for (size_t i = 0; i < n; i++)
        gates[i] = gate_of(r, i, now);
    size_t own = sl__pinned_candidate(r);
    sl_wait_request_t req = {.now_ms = now,
                             .deadline_ms = r->retry.deadline_ms,
                             .own = own == SL_RETRY_UNPINNED ? SL_WAIT_NO_OWN : own,
                             .sealed = r->affinity_effect == SL_AFFINITY_SEALED};
    /* wait_secs 0 never waits (§5, §6). */
    if (!sl__may_wait(r))
        req.deadline_ms = now;
    sl_wait_decision_t d = sl_wait_decide(gates, n, &req, wait_on);
    /*
     * A request behind others in a paused upstream's line waits for the
     * line (a busy gate: woken as it moves), but what holds the line is the
     * pause: RequestQueued says so, with the pause's end.
     */
    int64_t behind_pause_until[n + 1];
    for (size_t i = 0; i < n; i++) {
        const sl_throttle_t *t = &r->snapshot->upstreams[r->cands[i].provider]->throttle;
        behind_pause_until[i] = gates[i].skip == SL_SKIP_BUSY && sl_throttle_kind(t) != SL_THROTTLE_FREE
                                    ? sl_throttle_recovery_ms(t, now)
                                    : -1;
    }
    bool joined = false;
    if (d.action == SL_WAIT_WAIT && may_start_waiting(r)) {
        if (r->wait.waiter == NULL)
            r->wait.waiter = sl_waiter_new(r->io->inbox, r, r->id);
        for (size_t i = 0; i < n; i++) {
            if (wait_on[i])
                sl_waiter_join(r->wait.waiter, &r->snapshot->upstreams[r->cands[i].provider]->waitq);
        }
        joined = true;
    }
    sl_waitq_unlock();

    if (d.action == SL_WAIT_WAIT && !joined) {
        sl__refuse_to_wait(r, SL_CODE_GW_WAIT_OVERLOADED, "5");
        return;
    }
    switch (d.action) {
    case SL_WAIT_SEND_NOW:
    case SL_WAIT_WAIT: {
        sl_bus_gate_t bus_gates[n + 1];
        size_t k = 0;
        int64_t wall = sl_wall_ms();
        for (size_t i = 0; i < n; i++) {
            if (!wait_on[i] && d.action == SL_WAIT_WAIT)
                continue;
            if (gates[i].out_of_round || !sl_skip_may_pass(gates[i].skip) ||
                gates[i].skip == SL_SKIP_PERIOD_USED_UP)
                continue;
            bool paused = behind_pause_until[i] >= 0;
            bool timed = gates[i].skip != SL_SKIP_BUSY;
            bus_gates[k++] = (sl_bus_gate_t){
                .upstream = sl__provider_of(r, i)->name,
                .skip = paused ? SL_SKIP_THROTTLED : gates[i].skip,
                .until_ms = paused  ? sl__wall_of(now, wall, behind_pause_until[i])
                            : timed ? sl__wall_of(now, wall, gates[i].recovery_ms)
                                    : -1,
            };
        }
        /* Woken by a message when a slot frees or a probe passes; the timer covers pauses, windows and the
         * deadline. */
        start_waiting(r, now, bus_gates, k, d.action == SL_WAIT_SEND_NOW ? now : d.wake_ms);
        break;
    }
    case SL_WAIT_FINAL_429: {
        sl_code_t code = SL_CODE_GW_WAIT_MIXED;
        sl_code_from_slug(sl_wait_code_slug(d.code), &code);
        /* Only windows too small for the request itself: waiting can never help (§7). */
        if (d.code == SL_WAIT_CODE_WINDOW_FULL && !d.should_retry) {
            sl__answer_too_large(r, &d, "the upstreams for this model");
            break;
        }
        sl__answer_final_429(r, &d, sl_msg_make(code, NULL));
        break;
    }
    default:
        sl__answer_with_failure(r);
        break;
    }
}

/*
 * A client key's limits (§7), once per request before any candidate: a
 * full minute/hour window holds the request in the key's queue (gate
 * key_window, in arrival order) within its deadline; a used-up period or a
 * request larger than a whole limit is answered 429 at once. Admitted, the
 * key is charged the estimate; sl__end_request settles the real figure. Returns
 * true when the request goes on to its candidates now.
 */
bool
sl__admit_key(request_t *r)
{
    sl_limit_set_t *set = r->acct.key_limits;
    if (set == NULL || r->acct.key_charge.set != NULL)
        return true;
    int64_t now = sl_now_ms(), wall = sl_wall_ms();
    sl_amounts_t need = sl__usage_estimate(r, r->in.model);
    sl_waitq_lock();
    if (set->n == 0) {
        sl_waitq_unlock();
        return true;
    }
    if (atomic_load(&r->gw->stopping)) {
        sl_waitq_unlock();
        sl__refuse_to_wait(r, SL_CODE_GW_SHUTTING_DOWN, "1");
        return false;
    }
    /* Nobody overtakes the key's queue. */
    bool first = r->wait.waiter != NULL ? sl_waitq_is_head(&set->queue, r->wait.waiter) : set->queue.len == 0;
    sl_limits_check_t c = sl_limits_check(set->states, set->n, wall, &need);
    if (c.verdict == SL_LIMIT_OK && first) {
        sl__charge_locked(&r->acct.key_charge, set, wall, &need);
        r->acct.key_counts_tokens = sl__counts_tokens(set);
        if (r->wait.waiter != NULL) {
            sl_waiter_leave_all(r->wait.waiter);
            sl_waitq_wake(&set->queue, 1);
        }
        sl_waitq_unlock();
        sl__persist_usage(r, set, wall, &need);
        if (r->wait.key_waiting) {
            /* Its wait for upstreams, if any, is a queueing of its own. */
            r->wait.key_waiting = false;
            r->wait.key_pause_ms = now - r->wait.queued_since_ms;
            r->wait.queued = false;
            sl__emit_dequeued(r, NULL);
        }
        return true;
    }
    sl_limit_t which = set->states[c.which].limit;
    sl_wait_gate_t gate = {.skip = SL_SKIP_BUSY, .recovery_ms = now}; /* room, but others are first */
    if (c.verdict == SL_LIMIT_WINDOW_FULL)
        gate = (sl_wait_gate_t){.skip = SL_SKIP_WINDOW_FULL,
                                .recovery_ms = sl__mono_of(now, wall, c.recovery_ms)};
    else if (c.verdict == SL_LIMIT_PERIOD_USED_UP)
        gate = (sl_wait_gate_t){.skip = SL_SKIP_PERIOD_USED_UP,
                                .recovery_ms = sl__mono_of(now, wall, c.recovery_ms)};
    else if (c.verdict == SL_LIMIT_NEVER)
        gate = (sl_wait_gate_t){.skip = SL_SKIP_WINDOW_FULL, .recovery_ms = SL_THROTTLE_NEVER};
    sl_wait_request_t wr = {
        .now_ms = now, .deadline_ms = sl__may_wait(r) ? r->retry.deadline_ms : now, .own = SL_WAIT_NO_OWN};
    bool wait_on[1];
    sl_wait_decision_t d = sl_wait_decide(&gate, 1, &wr, wait_on);
    bool joined = d.action == SL_WAIT_WAIT && may_start_waiting(r);
    if (joined) {
        if (r->wait.waiter == NULL)
            r->wait.waiter = sl_waiter_new(r->io->inbox, r, r->id);
        sl_waiter_join(r->wait.waiter, &set->queue);
    }
    sl_waitq_unlock();

    char limit[SL_LIMIT_TEXT_MAX];
    sl_limit_describe(&which, limit, sizeof(limit));
    if (d.action == SL_WAIT_WAIT && !joined) {
        sl__refuse_to_wait(r, SL_CODE_GW_WAIT_OVERLOADED, "5");
        return false;
    }
    if (d.action != SL_WAIT_WAIT) {
        if (c.verdict == SL_LIMIT_NEVER) {
            snprintf(r->wait.too_large_limit, sizeof(r->wait.too_large_limit), "%s", limit);
            sl__answer_too_large(r, &d, "this key");
        } else if (c.verdict == SL_LIMIT_PERIOD_USED_UP) {
            char until[64];
            sl_text_local_time(r->config->tz, c.recovery_ms, until, sizeof(until));
            sl__answer_final_429(r, &d,
                                 sl_msg_make(SL_CODE_GW_KEY_USED_UP, "limit", limit, "until", until, NULL));
        } else {
            sl__answer_final_429(r, &d, sl_msg_make(SL_CODE_GW_KEY_WINDOW_FULL, "limit", limit, NULL));
        }
        return false;
    }
    r->wait.key_waiting = true;
    sl_bus_gate_t bus_gate = {
        .upstream = sl__client_name(r),
        .skip = SL_SKIP_KEY_WINDOW,
        .until_ms = gate.skip == SL_SKIP_WINDOW_FULL ? sl__wall_of(now, wall, gate.recovery_ms) : -1,
    };
    start_waiting(r, now, &bus_gate, 1, d.wake_ms);
    return false;
}

/*
 * Takes the upstream for a hop: room in its usage limits (charged with the
 * request's estimate), a slot under its max_concurrent and, unless the
 * breaker is bypassed, its permission (or its half-open probe). Returns
 * SL_SKIP_NONE when taken, else why it is skipped now (with
 * r->wait.recovery_ms[cand] set for a limit).
 */
sl_skip_t
sl__claim_upstream(request_t *r, size_t cand)
{
    sl_upstream_t *up = r->snapshot->upstreams[r->cands[cand].provider];
    sl_limit_set_t *set =
        r->snapshot->limits.providers != NULL ? r->snapshot->limits.providers[r->cands[cand].provider] : NULL;
    uint32_t max_concurrent = sl__provider_of(r, cand)->max_concurrent;
    sl_amounts_t need = {0}; /* the estimate, made only for an upstream with limits */
    int64_t now = sl_now_ms(), wall = sl_wall_ms();
    sl_limits_check_t limits = {.verdict = SL_LIMIT_OK};
    bool limits_changed = false;
    sl_limit_t limit = {0};
    sl_waitq_lock();
    bool throttle_changed = sl_throttle_check(&up->throttle, now);
    /* Waiters go in arrival order: a request that is not first in the queue lets the first go. */
    bool first = r->wait.waiter != NULL ? sl_waitq_is_head(&up->waitq, r->wait.waiter) : up->waitq.len == 0;
    bool throttle_probe = false;
    /*
     * Whoever waits is served first, in arrival order: nobody overtakes the
     * queue's head, and the head goes only once the one released before it
     * is on its way — so the upstream receives them in arrival order.
     */
    bool in_line = !first || up->dispatching;
    bool admitted = !in_line && sl_throttle_admit(&up->throttle, now, first, &throttle_probe);
    sl_throttle_t throttle = up->throttle;
    /* Behind others in line it waits as for a slot: woken when the line moves, not by a timer. */
    sl_skip_t skip = admitted ? SL_SKIP_NONE : in_line ? SL_SKIP_BUSY : SL_SKIP_THROTTLED;
    bool breaker_changed = false;
    sl_breaker_t breaker = {0};
    if (admitted && set != NULL && set->n > 0) {
        need = sl__usage_estimate(r, r->cands[cand].model);
        limits = sl_limits_check(set->states, set->n, wall, &need);
        limit = set->states[limits.which].limit;
        if (sl__shown_verdict(limits.verdict) != set->shown && limits.verdict != SL_LIMIT_NEVER) {
            set->shown = sl__shown_verdict(limits.verdict);
            set->shown_until_ms = limits.recovery_ms;
            set->shown_limit = set->states[limits.which].limit;
            limits_changed = true;
        }
        if (limits.verdict != SL_LIMIT_OK) {
            skip = limits.verdict == SL_LIMIT_PERIOD_USED_UP ? SL_SKIP_PERIOD_USED_UP : SL_SKIP_WINDOW_FULL;
            r->wait.recovery_ms[cand] = limits.verdict == SL_LIMIT_NEVER
                                            ? SL_THROTTLE_NEVER
                                            : sl__mono_of(now, wall, limits.recovery_ms);
        }
    }
    if (admitted && skip == SL_SKIP_NONE) {
        pthread_mutex_lock(&up->lock);
        if (max_concurrent > 0 && up->in_flight >= max_concurrent) {
            skip = SL_SKIP_BUSY;
        } else {
            bool is_probe = false;
            sl_breaker_state_t state = sl_breaker_check(&up->breaker, now, &is_probe, &breaker_changed);
            /* A single candidate bypasses the breaker; so does a request whose candidates are all cooling. */
            if (state == SL_BREAKER_CLOSED || is_probe || r->cooling_ignored || r->n_offered == 1) {
                up->in_flight++;
                r->is_probe = is_probe;
            } else {
                skip = SL_SKIP_COOLING;
            }
        }
        breaker = up->breaker;
        pthread_mutex_unlock(&up->lock);
    }
    if (admitted) {
        if (skip != SL_SKIP_NONE && throttle_probe)
            sl_throttle_probe_abandoned(&up->throttle);
        else
            r->wait.throttle_probe = throttle_probe;
        if (skip == SL_SKIP_NONE && r->wait.waiter != NULL) {
            up->dispatching = true;
            r->wait.dispatching = up;
        }
        if (skip == SL_SKIP_NONE && set != NULL && set->n > 0)
            sl__charge_locked(&r->acct.up_charge, set, wall, &need);
        r->acct.hop_needs_usage = r->acct.key_counts_tokens || sl__counts_tokens(set);
    }
    sl_waitq_unlock();
    if (r->acct.up_charge.set != NULL && skip == SL_SKIP_NONE)
        sl__persist_usage(r, set, wall, &need);
    if (limits.verdict == SL_LIMIT_NEVER) {
        char text[SL_LIMIT_TEXT_MAX];
        sl_limit_describe(&limit, text, sizeof(text));
        snprintf(r->wait.too_large_limit, sizeof(r->wait.too_large_limit), "%s", text);
    }
    if (throttle_changed)
        sl__emit_throttle(r, up->name, &throttle);
    if (limits_changed)
        sl__emit_limit_throttle(r, up->name, sl__shown_verdict(limits.verdict), limits.recovery_ms, &limit,
                                &throttle);
    if (breaker_changed)
        sl__emit_health(r, up->name, breaker);
    return skip;
}
