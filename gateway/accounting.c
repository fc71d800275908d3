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
sl__usage_real(const request_t *r, const sl_charge_t *c, bool served)
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

/*
 * The hop's bytes go out now: its upstream charge moves from when it was
 * claimed to now. A connection may take a while (a handshake, a busy
 * loop), and the upstream counts a request from when it arrives; counted
 * from the claim, it would leave sluice's window before it leaves the
 * upstream's, and the requests let in then would overshoot the limit there.
 * The request DB counts it from here too.
 */
void
sl__hop_sent(request_t *r)
{
    sl_upstream_t *dispatching = r->wait.dispatching;
    r->wait.dispatching = NULL;
    sl_charge_t *c = &r->acct.up_charge;
    if (r->up != NULL)
        sl_shared_hop_sent(r->gw->shared, r->up, dispatching != NULL, c, sl_wall_ms());
    else if (dispatching != NULL)
        sl_shared_end_dispatch(r->gw->shared, dispatching);
    if (c->set != NULL && !r->acct.up_charge_persisted) {
        sl__persist_usage(r, c->set, c->at_ms, &c->amounts);
        r->acct.up_charge_persisted = true;
    }
}

/* ---- upstream bookkeeping ----------------------------------------------------------------- */

sl_shared_call_t *
sl__shared_call(request_t *r, sl_shared_call_t *call)
{
    sl_shared_cancel(r->gw->shared, call);
    return call;
}

void
sl__release_upstream(request_t *r)
{
    if (r->up == NULL)
        return;
    /* A 429 (or a request the upstream never read) is not counted against its limits; anything else is. */
    bool served = r->phase == PHASE_STREAMING && r->out.answer == ANSWER_UPSTREAM;
    sl_charge_t *c = &r->acct.up_charge;
    sl_amounts_t used = r->acct.hop_uncounted ? (sl_amounts_t){0} : sl__usage_real(r, c, served);
    /* The request DB has the estimate from when the hop was sent: it gets the difference. */
    if (c->set != NULL) {
        sl_amounts_t counted = r->acct.up_charge_persisted ? c->amounts : (sl_amounts_t){0};
        sl_amounts_t delta = {used.requests - counted.requests, used.tokens - counted.tokens,
                              used.cost_micros - counted.cost_micros};
        sl__persist_usage(r, c->set, c->at_ms, &delta);
    }
    sl_shared_release_upstream(r->gw->shared, &(sl_upstream_release_t){
                                                  .up = r->up,
                                                  .charge = c,
                                                  .used = used,
                                                  .throttle_probe = r->wait.throttle_probe,
                                                  .breaker_probe = r->is_probe,
                                                  .slot = r->acct.up_slot,
                                                  .wall_ms = sl_wall_ms(),
                                              });
    r->acct.up_charge_persisted = false;
    r->acct.up_slot = 0;
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
    if (changed) {
        sl__emit_health(r, r->up->name, now_state);
        sl_shared_health_changed(r->gw->shared, r->up, &now_state, sl_now_ms());
    }
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
    sl_charge_t *c = &r->acct.key_charge;
    if (c->set == NULL)
        return;
    /*
     * The key was charged once, at admission; sluice's own retries are not its client's, and neither is a
     * request the gateway answered without any upstream (a final 429, an estimate).
     */
    sl_amounts_t used = r->acct.hops_sent > 0 ? sl__usage_real(r, c, served) : (sl_amounts_t){0};
    sl_amounts_t delta = {used.requests - c->amounts.requests, used.tokens - c->amounts.tokens,
                          used.cost_micros - c->amounts.cost_micros};
    sl__persist_usage(r, c->set, c->at_ms, &delta);
    sl_shared_settle(r->gw->shared, c, &used, true, sl_wall_ms());
}
