/*
 * Usage accounting (behaviour.md §7) and the upstream's books: a hop's charge against its
 * upstream's and its key's limits, settled with the real usage; the upstream's in-flight count, probes
 * and breaker (§8).
 */
#include "req.h"

/* ---- usage accounting (behaviour.md §7) ------------------------------------------------------ */

/* Before the upstream reports usage: request bytes / 4 + max_tokens (4096 without), priced for model. */
sl_amounts_t
sl__usage_estimate(const request_t *r, const char *model)
{
    if (r->in.endpoint.op == SL_OP_COUNT_TOKENS)
        return (sl_amounts_t){.requests = 1};
    sl_usage_t u = sl_usage_estimate(r->in.body_len, r->in.fields.has_max_tokens, r->in.fields.max_tokens);
    const sl_price_t *price = sl_price_for(r->config->pricing, r->config->n_pricing, model);
    return (sl_amounts_t){1, u.input + u.output, sl_cost_micros(price, &u)};
}

/*
 * What was really used, once it is over: the usage the upstream reported;
 * without a report, the estimate when an answer was served (it was billed
 * somehow), else nothing. Counting tokens costs none.
 */
sl_amounts_t
sl__usage_real(const request_t *r, const charge_t *c, bool served)
{
    const sl_usage_t *u = &r->rd.stream.usage;
    if (r->in.endpoint.op == SL_OP_COUNT_TOKENS)
        return (sl_amounts_t){.requests = 1};
    if (u->input || u->output || u->cache_read || u->cache_write) {
        const char *model = r->n_cands > 0 ? r->cands[r->cur].model : r->in.model;
        const sl_price_t *price = sl_price_for(r->config->pricing, r->config->n_pricing, model);
        return (sl_amounts_t){1, u->input + u->output + u->cache_read + u->cache_write,
                              sl_cost_micros(price, u)};
    }
    if (served)
        return (sl_amounts_t){1, c->amounts.tokens, c->amounts.cost_micros};
    return (sl_amounts_t){.requests = 1};
}

/* The request DB keeps usage per minute, so that a restart rebuilds every window and period. */
void
sl__persist_usage(request_t *r, const sl_limit_set_t *set, int64_t at_ms, const sl_amounts_t *a)
{
    if (r->gw->recorder == NULL || (a->requests == 0 && a->tokens == 0 && a->cost_micros == 0))
        return;
    sl_recorder_add_usage(r->gw->recorder, set->kind, set->name, at_ms / 60000, a->requests, a->tokens,
                          a->cost_micros);
}

/* With the wait lock held: whether set's limits count tokens or cost, so the upstream must report usage. */
bool
sl__counts_tokens(const sl_limit_set_t *set)
{
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        if (set->states[i].limit.measure != SL_MEASURE_REQUESTS)
            return true;
    }
    return false;
}

/* With the wait lock held: set is charged a at wall time now (the estimate, reserving room). */
void
sl__charge_locked(charge_t *c, sl_limit_set_t *set, int64_t now_wall, const sl_amounts_t *a)
{
    sl_limits_add(set->states, set->n, now_wall, now_wall, a);
    *c = (charge_t){set, now_wall, *a};
}

/*
 * The hop's bytes go out now: its upstream charge moves from when it was
 * admitted to now. A connection may take a while (a handshake, a busy
 * loop), and the upstream counts a request from when it arrives; counted
 * from admission, it would leave sluice's window before it leaves the
 * upstream's, and the requests let in then would overshoot the limit there.
 */
void
sl__recharge_at_send(request_t *r)
{
    charge_t *c = &r->acct.up_charge;
    int64_t now = sl_wall_ms();
    if (c->set == NULL || now <= c->at_ms)
        return;
    sl_amounts_t back = {-c->amounts.requests, -c->amounts.tokens, -c->amounts.cost_micros};
    sl_waitq_lock();
    sl_limits_add(c->set->states, c->set->n, c->at_ms, now, &back);
    sl_limits_add(c->set->states, c->set->n, now, now, &c->amounts);
    sl_waitq_unlock();
    if (c->at_ms / 60000 != now / 60000) {
        sl__persist_usage(r, c->set, c->at_ms, &back);
        sl__persist_usage(r, c->set, now, &c->amounts);
    }
    c->at_ms = now;
}

/*
 * The estimate charged before is replaced by real, at the charge's own
 * time. When room came free, the head of waiters (may be NULL) may go.
 */
void
sl__settle(request_t *r, charge_t *c, const sl_amounts_t *real, sl_waitq_t *waiters)
{
    if (c->set == NULL)
        return;
    sl_amounts_t delta = {real->requests - c->amounts.requests, real->tokens - c->amounts.tokens,
                          real->cost_micros - c->amounts.cost_micros};
    sl_waitq_lock();
    sl_limits_add(c->set->states, c->set->n, c->at_ms, sl_wall_ms(), &delta);
    if (waiters != NULL && (delta.requests < 0 || delta.tokens < 0 || delta.cost_micros < 0))
        sl_waitq_wake(waiters, 1);
    sl_waitq_unlock();
    sl__persist_usage(r, c->set, c->at_ms, &delta);
    c->set = NULL;
}

/* ---- upstream bookkeeping ----------------------------------------------------------------- */

void
sl__release_upstream(request_t *r)
{
    if (r->up == NULL)
        return;
    sl_upstream_t *up = r->up;
    /* A 429 (or a request the upstream never read) is not counted against its limits; anything else is. */
    bool served = r->phase == PHASE_STREAMING && r->out.answer == ANSWER_UPSTREAM;
    sl_amounts_t used =
        r->acct.hop_uncounted ? (sl_amounts_t){0} : sl__usage_real(r, &r->acct.up_charge, served);
    sl__settle(r, &r->acct.up_charge, &used, NULL);
    pthread_mutex_lock(&up->lock);
    up->in_flight--;
    if (r->is_probe)
        sl_breaker_release_probe(&up->breaker);
    pthread_mutex_unlock(&up->lock);
    /* A slot came free (the queue's head may take it); a probe that never got an answer is handed back. */
    sl_waitq_lock();
    if (r->wait.throttle_probe)
        sl_throttle_probe_abandoned(&up->throttle);
    sl_waitq_wake(&up->waitq, 1);
    sl_waitq_unlock();
    r->wait.throttle_probe = false;
    r->up = NULL;
    r->is_probe = false;
}

/* What the hop's outcome tells the breaker (behaviour.md §8). */
void
sl__breaker_account(request_t *r, const sl_failure_class_info_t *info)
{
    if (r->up == NULL)
        return;
    sl_breaker_params_t params = sl_breaker_params_from_failover(&r->config->failover);
    pthread_mutex_lock(&r->up->lock);
    bool changed = false;
    if (info == NULL || info->breaker_answer)
        changed = sl_breaker_on_success(&r->up->breaker);
    else if (info->breaker_cause != SL_BREAKER_CAUSE_NONE)
        changed = sl_breaker_on_failure(&r->up->breaker, info->breaker_cause, sl_now_ms(), &params, 0);
    if (info != NULL && info->breaker_cause == SL_BREAKER_CAUSE_NONE && !info->breaker_answer && r->is_probe)
        sl_breaker_release_probe(&r->up->breaker);
    r->is_probe = false;
    sl_breaker_t now_state = r->up->breaker;
    pthread_mutex_unlock(&r->up->lock);
    if (changed)
        sl__emit_health(r, r->up->name, now_state);
}

/* The hop's upstream answered sensibly: its 429 streak resets (a probe passes), its breaker counts a success,
 * and the conversation stays with it. */
void
sl__upstream_served(request_t *r)
{
    sl__throttle_answered(r);
    sl__breaker_account(r, NULL);
    sl__remember_conversation(r);
}

void
sl__settle_key(request_t *r, bool served)
{
    charge_t *c = &r->acct.key_charge;
    if (c->set == NULL)
        return;
    /*
     * The key was charged once, at admission; sluice's own retries are not its client's, and neither is a
     * request the gateway answered without any upstream (a final 429, an estimate).
     */
    sl_amounts_t used = r->acct.hops_sent > 0 ? sl__usage_real(r, c, served) : (sl_amounts_t){0};
    sl__settle(r, c, &used, &c->set->queue);
}
