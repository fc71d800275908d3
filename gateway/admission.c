/*
 * Admission (behaviour.md §2, §6, §7): claiming an upstream for a hop (its line, throttle, usage
 * limits, max_concurrent, breaker), the client key's limits, waiting in upstream and key lines, and
 * giving up with the final 429. What requests share is reached only through the shared state
 * (shared_state.h), whose answers come back through callbacks: each step continues in its callback.
 */
#include "req.h"

/* The shared state's news of the hop's upstream: ThrottleChanged when what it shows moved. */
static void
on_throttle_news(void *ctx, const sl_throttle_news_t *news)
{
    request_t *r = ctx;
    if (news->changed)
        sl__emit_throttle(r, news->up->name, &news->throttle);
}

/* The upstream of the hop answered (anything but a 429): its streak resets and a probe passes. */
void
sl__throttle_answered(request_t *r)
{
    if (r->up == NULL)
        return;
    sl_shared_upstream_answered(r->gw->shared, r->up, sl_now_ms(), sl__shared_call(r, &r->acct.news),
                                on_throttle_news, r);
    r->wait.throttle_probe = false;
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
    r->wait.throttle_probe = false;
    r->acct.hop_uncounted = true;
    sl_shared_upstream_rate_limited(r->gw->shared, r->up, sl_now_ms(), hint_ms,
                                    r->config->failover.rate_limit_max_pause_secs, &r->gw->retry_params,
                                    sl__shared_call(r, &r->acct.news), on_throttle_news, r);
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

/* The request released from a line is on its way (or gone): the next in that line may go. */
void
sl__end_dispatch(request_t *r)
{
    sl_upstream_t *up = r->wait.dispatching;
    if (up == NULL)
        return;
    r->wait.dispatching = NULL;
    sl_shared_end_dispatch(r->gw->shared, up);
}

/* Leaves every line. Leaving for a hop, the next in line goes once this one is sent; otherwise now. */
void
sl__stop_waiting(request_t *r, bool for_hop)
{
    sl_timer_cancel(&r->io->timers, &r->wait.wait_timer);
    sl_shared_cancel(r->gw->shared, &r->wait.call);
    if (r->wait.waiter != NULL) {
        /* The heads of the lines it waited in may go now. */
        sl_line_t wake[r->n_cands + 2];
        size_t n = 0;
        for (size_t i = 0; !for_hop && i < r->n_cands; i++)
            wake[n++] = (sl_line_t){.up = r->snapshot->upstreams[r->cands[i].provider]};
        if (!for_hop && r->acct.key_limits != NULL)
            wake[n++] = (sl_line_t){.key = r->acct.key_limits};
        sl_shared_leave_lines(r->gw->shared, r->wait.waiter, wake, n);
        r->wait.waiter = NULL;
    }
    if (!for_hop)
        sl__end_dispatch(r);
    if (r->wait.counts_waiting) {
        atomic_fetch_sub(&r->gw->waiting_bytes, r->in.body_len);
        r->wait.counts_waiting = false;
    }
    r->wait.queued = false;
    r->wait.woken = false;
}

/* Something it waits on may have changed (a wake-up, or its timer): look again. */
static void
look_again(request_t *r)
{
    if (r->phase != PHASE_QUEUED)
        return;
    /*
     * Its claim is out (a cluster's Redis has not answered yet): it decides
     * with that answer, and looks again if that answer puts it back in line.
     * Asking again now would cancel it, and a line woken more often than
     * Redis answers would never let it through.
     */
    if (r->wait.call.pending != NULL) {
        r->wait.woken = true;
        return;
    }
    r->wait.woken = false;
    if (r->wait.key_waiting) {
        sl__admit_key_then_route(r);
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
    for (size_t i = 0; i < n_gates && r->m.wait_gate == SL_GATE_COUNT; i++) {
        sl__note_trouble(r, sl_trouble_of_wait(gates[i].skip));
        r->m.wait_gate = sl_gate_of_skip(gates[i].skip);
    }
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
                                .recovery_ms = sl_shared_pause_of(r->gw->shared, up, now).recovery_ms};
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

/* Joined its lines, or not (the gateway is draining: it ends here, its client may retry elsewhere at once).
 */
static void
on_lines_joined(void *ctx, const sl_lines_joined_t *result)
{
    request_t *r = ctx;
    if (!result->joined)
        sl__refuse_to_wait(r, SL_CODE_GW_SHUTTING_DOWN, "1");
    else if (r->wait.woken)
        look_again(r);
}

/* Waits in lines (n of them) for the gates (for RequestQueued) until woken, or timer_ms at the latest. */
static void
wait_in_lines(request_t *r, int64_t now, const sl_line_t *lines, size_t n, const sl_bus_gate_t *gates,
              size_t n_gates, int64_t timer_ms)
{
    if (r->wait.waiter == NULL)
        r->wait.waiter = sl_waiter_new(r->io->inbox, r, r->id, r->started_wall_ms);
    start_waiting(r, now, gates, n_gates, timer_ms);
    sl_shared_join_lines(r->gw->shared, r->wait.waiter, lines, n, sl__shared_call(r, &r->wait.call),
                         on_lines_joined, r);
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
    /*
     * Draining: nothing starts to wait, and whoever waits is woken to end
     * here (joining a line checks again, under the lock the drain's wake-up
     * takes). A waiting request would be cut at the end of the grace;
     * answered now, its client can retry elsewhere at once.
     */
    if (atomic_load(&r->gw->stopping)) {
        sl__refuse_to_wait(r, SL_CODE_GW_SHUTTING_DOWN, "1");
        return;
    }
    size_t n = r->n_cands;
    int64_t now = sl_now_ms();
    sl_wait_gate_t gates[n + 1];
    bool wait_on[n + 1];
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
    if (d.action == SL_WAIT_WAIT && !may_start_waiting(r)) {
        sl__refuse_to_wait(r, SL_CODE_GW_WAIT_OVERLOADED, "5");
        return;
    }
    switch (d.action) {
    case SL_WAIT_SEND_NOW:
    case SL_WAIT_WAIT: {
        sl_bus_gate_t bus_gates[n + 1];
        sl_line_t lines[n + 1];
        size_t k = 0, n_lines = 0;
        int64_t wall = sl_wall_ms();
        for (size_t i = 0; i < n; i++) {
            sl_upstream_t *up = r->snapshot->upstreams[r->cands[i].provider];
            if (d.action == SL_WAIT_WAIT && wait_on[i])
                lines[n_lines++] = (sl_line_t){.up = up};
            if (!wait_on[i] && d.action == SL_WAIT_WAIT)
                continue;
            if (gates[i].out_of_round || !sl_skip_may_pass(gates[i].skip) ||
                gates[i].skip == SL_SKIP_PERIOD_USED_UP)
                continue;
            /*
             * A request behind others in a paused upstream's line waits for
             * the line (a busy gate: woken as it moves), but what holds the
             * line is the pause: RequestQueued says so, with the pause's end.
             */
            sl_pause_t pause = gates[i].skip == SL_SKIP_BUSY ? sl_shared_pause_of(r->gw->shared, up, now)
                                                             : (sl_pause_t){.kind = SL_THROTTLE_FREE};
            bool paused = pause.kind != SL_THROTTLE_FREE;
            bool timed = gates[i].skip != SL_SKIP_BUSY;
            bus_gates[k++] = (sl_bus_gate_t){
                .upstream = sl__provider_of(r, i)->name,
                .skip = paused ? SL_SKIP_THROTTLED : gates[i].skip,
                .until_ms = paused  ? sl__wall_of(now, wall, pause.recovery_ms)
                            : timed ? sl__wall_of(now, wall, gates[i].recovery_ms)
                                    : -1,
            };
        }
        /* Woken by a message when a slot frees or a probe passes; the timer covers pauses, windows and the
         * deadline. */
        if (d.action == SL_WAIT_SEND_NOW)
            start_waiting(r, now, bus_gates, k, now);
        else
            wait_in_lines(r, now, lines, n_lines, bus_gates, k, d.wake_ms);
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

/* The key's verdict: admitted (routing starts), waiting in the key's line, or answered 429. */
static void
on_key_claimed(void *ctx, const sl_key_claim_result_t *res)
{
    request_t *r = ctx;
    int64_t now = sl_now_ms(), wall = sl_wall_ms();
    if (res->unavailable) {
        sl__refuse_to_wait(r, SL_CODE_GW_CLUSTER_UNAVAILABLE, SL_CLUSTER_RETRY_AFTER_SECS);
        return;
    }
    if (res->draining) {
        sl__refuse_to_wait(r, SL_CODE_GW_SHUTTING_DOWN, "1");
        return;
    }
    if (res->admitted) {
        if (res->charge.set != NULL) {
            r->acct.key_charge = res->charge;
            r->acct.key_counts_tokens = res->counts_tokens;
            sl__persist_usage(r, res->charge.set, res->charge.at_ms, &res->charge.amounts);
        }
        if (r->wait.key_waiting) {
            /* Its wait for upstreams, if any, is a queueing of its own. */
            r->wait.key_waiting = false;
            r->wait.key_pause_ms = now - r->wait.queued_since_ms;
            r->wait.queued = false;
            sl__emit_dequeued(r, NULL);
        }
        r->next = 0;
        sl__next_hop(r);
        return;
    }
    const sl_limits_check_t *c = &res->check;
    sl_wait_gate_t gate = {.skip = SL_SKIP_BUSY, .recovery_ms = now}; /* room, but others are first */
    if (c->verdict == SL_LIMIT_WINDOW_FULL)
        gate = (sl_wait_gate_t){.skip = SL_SKIP_WINDOW_FULL,
                                .recovery_ms = sl__mono_of(now, wall, c->recovery_ms)};
    else if (c->verdict == SL_LIMIT_PERIOD_USED_UP)
        gate = (sl_wait_gate_t){.skip = SL_SKIP_PERIOD_USED_UP,
                                .recovery_ms = sl__mono_of(now, wall, c->recovery_ms)};
    else if (c->verdict == SL_LIMIT_NEVER)
        gate = (sl_wait_gate_t){.skip = SL_SKIP_WINDOW_FULL, .recovery_ms = SL_THROTTLE_NEVER};
    sl_wait_request_t wr = {
        .now_ms = now, .deadline_ms = sl__may_wait(r) ? r->retry.deadline_ms : now, .own = SL_WAIT_NO_OWN};
    bool wait_on[1];
    sl_wait_decision_t d = sl_wait_decide(&gate, 1, &wr, wait_on);
    char limit[SL_LIMIT_TEXT_MAX];
    sl_limit_describe(&res->limit, limit, sizeof(limit));
    if (d.action == SL_WAIT_WAIT && !may_start_waiting(r)) {
        sl__refuse_to_wait(r, SL_CODE_GW_WAIT_OVERLOADED, "5");
        return;
    }
    if (d.action != SL_WAIT_WAIT) {
        if (c->verdict == SL_LIMIT_NEVER) {
            snprintf(r->wait.too_large_limit, sizeof(r->wait.too_large_limit), "%s", limit);
            sl__answer_too_large(r, &d, "this key");
        } else if (c->verdict == SL_LIMIT_PERIOD_USED_UP) {
            char until[64];
            sl_text_local_time(r->config->tz, c->recovery_ms, until, sizeof(until));
            sl__answer_final_429(r, &d,
                                 sl_msg_make(SL_CODE_GW_KEY_USED_UP, "limit", limit, "until", until, NULL));
        } else {
            sl__answer_final_429(r, &d, sl_msg_make(SL_CODE_GW_KEY_WINDOW_FULL, "limit", limit, NULL));
        }
        return;
    }
    r->wait.key_waiting = true;
    sl_bus_gate_t bus_gate = {
        .upstream = sl__client_name(r),
        .skip = SL_SKIP_KEY_WINDOW,
        .until_ms = gate.skip == SL_SKIP_WINDOW_FULL ? sl__wall_of(now, wall, gate.recovery_ms) : -1,
    };
    wait_in_lines(r, now, &(sl_line_t){.key = r->acct.key_limits}, 1, &bus_gate, 1, d.wake_ms);
}

/*
 * A client key's limits (§7), once per request before any candidate: a
 * full minute/hour window holds the request in the key's line (gate
 * key_window, in arrival order) within its deadline; a used-up period or a
 * request larger than a whole limit is answered 429 at once. Admitted, the
 * key is charged the estimate; sl__end_request settles the real figure.
 */
void
sl__admit_key_then_route(request_t *r)
{
    sl_limit_set_t *set = r->acct.key_limits;
    if (set == NULL || r->acct.key_charge.set != NULL) {
        r->next = 0;
        sl__next_hop(r);
        return;
    }
    sl_key_claim_t claim = {.key = set,
                            .need = sl__usage_estimate(r, r->in.model),
                            .waiter = r->wait.waiter,
                            .wall_ms = sl_wall_ms()};
    sl_shared_claim_key(r->gw->shared, &claim, sl__shared_call(r, &r->wait.call), on_key_claimed, r);
}

void
sl__apply_claim(request_t *r, size_t cand, const sl_upstream_claim_result_t *res)
{
    sl_upstream_t *up = r->snapshot->upstreams[r->cands[cand].provider];
    if (res->reached_limits)
        r->acct.hop_needs_usage = r->acct.key_counts_tokens || res->counts_tokens;
    if (res->skip == SL_SKIP_NONE) {
        r->up = up;
        r->is_probe = res->breaker_probe;
        r->wait.throttle_probe = res->throttle_probe;
        r->wait.dispatching = res->dispatching ? up : NULL;
        r->acct.up_charge = res->charge;
        r->acct.up_charge_persisted = false;
        r->acct.up_slot = res->slot;
    } else if (res->skip == SL_SKIP_WINDOW_FULL || res->skip == SL_SKIP_PERIOD_USED_UP) {
        r->wait.recovery_ms[cand] = res->recovery_ms;
        if (res->recovery_ms == SL_THROTTLE_NEVER) {
            char text[SL_LIMIT_TEXT_MAX];
            sl_limit_describe(&res->limit, text, sizeof(text));
            snprintf(r->wait.too_large_limit, sizeof(r->wait.too_large_limit), "%s", text);
        }
    }
    if (res->throttle_changed)
        sl__emit_throttle(r, up->name, &res->throttle);
    if (res->limits_changed)
        sl__emit_limit_throttle(r, up->name, res->shown, res->shown_until_ms, &res->limit, &res->throttle);
    if (res->breaker_changed)
        sl__emit_health(r, up->name, res->breaker);
}

static void
on_claimed(void *ctx, const sl_upstream_claim_result_t *res)
{
    request_t *r = ctx;
    size_t cand = r->wait.claiming;
    if (res->unavailable) {
        sl__refuse_to_wait(r, SL_CODE_GW_CLUSTER_UNAVAILABLE, SL_CLUSTER_RETRY_AFTER_SECS);
        return;
    }
    sl__apply_claim(r, cand, res);
    if (res->skip == SL_SKIP_NONE) {
        sl__send_hop(r);
        return;
    }
    sl__skip_attempt(r, &r->attempts[r->attempt], res->skip);
    r->next = cand + 1;
    sl__next_hop(r);
}

/*
 * Takes the upstream for a hop: its line, its throttle, room in its usage
 * limits (reserving the request's estimate), a slot under its
 * max_concurrent and, unless the breaker is bypassed, its permission (or
 * its half-open probe).
 */
sl_upstream_claim_t
sl__upstream_claim_of(request_t *r, size_t cand)
{
    sl_upstream_t *up = r->snapshot->upstreams[r->cands[cand].provider];
    sl_limit_set_t *set =
        r->snapshot->limits.providers != NULL ? r->snapshot->limits.providers[r->cands[cand].provider] : NULL;
    return (sl_upstream_claim_t){
        .up = up,
        .limits = set,
        /* The estimate, made only for an upstream with limits. */
        .need = set != NULL ? sl__usage_estimate(r, r->cands[cand].model) : (sl_amounts_t){0},
        .max_concurrent = sl__provider_of(r, cand)->max_concurrent,
        /* A single candidate bypasses the breaker; so does a request whose candidates are all cooling. */
        .bypass_breaker = r->cooling_ignored || r->n_offered == 1,
        .waiter = r->wait.waiter,
        .now_ms = sl_now_ms(),
        .wall_ms = sl_wall_ms(),
    };
}

void
sl__claim_upstream(request_t *r, size_t cand)
{
    sl_upstream_claim_t claim = sl__upstream_claim_of(r, cand);
    r->wait.claiming = cand;
    sl_shared_claim_upstream(r->gw->shared, &claim, sl__shared_call(r, &r->wait.call), on_claimed, r);
}
