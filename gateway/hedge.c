/*
 * The first-token hedge (behaviour.md §4): a hop to a candidate that is not
 * the last has produced no content after first_token_secs, so the request
 * goes to the next candidate that can take it now as well; the first of the
 * two to have content wins, the other is closed (outcome hedge_lost).
 *
 * The rest of the request path knows one hop: the request's fields. While a
 * hedge is out, the other hop's fields are parked in r->hedge.parked, and
 * each hop's callbacks first install its own (the two are swapped), then
 * run the request path's callbacks as for any hop. The request path tells
 * this file three things: content came (sl__hedge_content), the installed
 * hop failed and the other goes on (sl__hedge_other_goes_on), the request
 * ends (sl__hedge_drop). What to decide is core/next_step.c's
 * sl_hedge_decide and sl_next_step_hedged.
 */
#include "req.h"

static hedge_hop_t
other_hop(hedge_hop_t h)
{
    return h == HEDGE_HOP_FIRST ? HEDGE_HOP_SECOND : HEDGE_HOP_FIRST;
}

/* The installed hop's fields, as a slot (all but its phase: sl__exchange_phase moves that). */
static void
save_slot(const request_t *r, hop_slot_t *s)
{
    *s = (hop_slot_t){
        .hop_phase = s->hop_phase,
        .cur = r->cur,
        .attempt = r->attempt,
        .hop = r->hop,
        .up = r->up,
        .is_probe = r->is_probe,
        .fresh = r->fresh,
        .strip_usage_chunk = r->strip_usage_chunk,
        .head = r->head,
        .body_copy = r->body_copy,
        .body = r->body,
        .rx = r->out.rx,
        .parsed = r->out.parsed,
        .end_follows = r->out.end_follows,
        .throttle_probe = r->wait.throttle_probe,
        .dispatching = r->wait.dispatching,
        .up_charge = r->acct.up_charge,
        .up_charge_persisted = r->acct.up_charge_persisted,
        .hop_uncounted = r->acct.hop_uncounted,
        .hop_needs_usage = r->acct.hop_needs_usage,
        .up_slot = r->acct.up_slot,
        .sent_ns = r->m.sent_ns,
        .upstream_in_ns = r->m.upstream_in_ns,
    };
    s->rd = r->rd;
}

static void
load_slot(request_t *r, const hop_slot_t *s)
{
    r->cur = s->cur;
    r->attempt = s->attempt;
    r->hop = s->hop;
    r->up = s->up;
    r->is_probe = s->is_probe;
    r->fresh = s->fresh;
    r->strip_usage_chunk = s->strip_usage_chunk;
    r->head = s->head;
    r->body_copy = s->body_copy;
    r->body = s->body;
    r->rd = s->rd;
    r->out.rx = s->rx;
    r->out.parsed = s->parsed;
    r->out.end_follows = s->end_follows;
    r->wait.throttle_probe = s->throttle_probe;
    r->wait.dispatching = s->dispatching;
    r->acct.up_charge = s->up_charge;
    r->acct.up_charge_persisted = s->up_charge_persisted;
    r->acct.hop_uncounted = s->hop_uncounted;
    r->acct.hop_needs_usage = s->hop_needs_usage;
    r->acct.up_slot = s->up_slot;
    r->m.sent_ns = s->sent_ns;
    r->m.upstream_in_ns = s->upstream_in_ns;
}

/* The SSE scanner joins lines in its own read state's scratch: it follows the state it belongs to. */
static void
repoint_scratch(hop_read_t *rd)
{
    if (rd->scanner.scratch != NULL)
        rd->scanner.scratch = rd->scratch;
}

/* The parked hop becomes the installed one, and the other way round. */
static void
swap_slots(request_t *r)
{
    hop_slot_t installed = {.hop_phase = r->hedge.parked.hop_phase};
    sl__exchange_phase(r, &installed.hop_phase);
    save_slot(r, &installed);
    load_slot(r, &r->hedge.parked);
    r->hedge.parked = installed;
    repoint_scratch(&r->rd);
    repoint_scratch(&r->hedge.parked.rd);
    r->hedge.installed = other_hop(r->hedge.installed);
}

static void
install(request_t *r, hedge_hop_t which)
{
    if (r->hedge.installed != which)
        swap_slots(r);
}

/* The parked slot is empty again (its hop ended, or never went out): one hop from here. */
static void
clear_parked(request_t *r)
{
    h2o_buffer_dispose(&r->hedge.parked.rx);
    memset(&r->hedge.parked, 0, sizeof(r->hedge.parked));
    r->hedge.state = HEDGE_NONE;
    r->hedge.installed = HEDGE_HOP_FIRST;
    if (r->hop != NULL)
        sl_hop_rebind(r->hop, &sl__hop_callbacks, r);
}

/* The hedge's attempt, opened for a claim that took nothing, is no hop: it goes. */
static void
discard_hedge_attempt(request_t *r)
{
    if (r->attempt != SIZE_MAX && r->attempt + 1 == r->n_attempts)
        r->n_attempts--;
    r->attempt = SIZE_MAX;
}

/* No hedge after all (nobody could take it now): the first hop goes on alone. */
static void
no_hedge(request_t *r)
{
    install(r, HEDGE_HOP_SECOND);
    discard_hedge_attempt(r);
    install(r, HEDGE_HOP_FIRST);
    clear_parked(r);
}

/* ---- the two hops' callbacks: each installs its own fields, then the request path's run ---- */

static request_t *
installed_for(void *data)
{
    hedge_tag_t *tag = data;
    install(tag->r, tag->which);
    return tag->r;
}

static void
hedged_on_sent(void *data)
{
    request_t *r = installed_for(data);
    sl__hop_callbacks.on_sent(r);
}

static void
hedged_on_head(void *data, int status, const h2o_header_t *headers, size_t n)
{
    request_t *r = installed_for(data);
    sl__hop_callbacks.on_head(r, status, headers, n);
}

static void
hedged_on_body(void *data, h2o_buffer_t **input, bool end_follows)
{
    request_t *r = installed_for(data);
    sl__hop_callbacks.on_body(r, input, end_follows);
}

static void
hedged_on_end(void *data, sl_hop_end_t how, const char *detail)
{
    request_t *r = installed_for(data);
    sl__hop_callbacks.on_end(r, how, detail);
}

static const sl_hop_callbacks_t hedged_callbacks = {hedged_on_sent, hedged_on_head, hedged_on_body,
                                                    hedged_on_end};

/* ---- starting a hedge ---------------------------------------------------------------------- */

/* The route's first_token_secs, else failover's. */
static uint32_t
first_token_secs(const request_t *r)
{
    if (r->routed && r->route < r->config->n_routes && r->config->routes[r->route].has_first_token_secs)
        return r->config->routes[r->route].first_token_secs;
    return r->config->failover.first_token_secs;
}

static void claim_next(request_t *r);

static void
on_hedge_claimed(void *ctx, const sl_upstream_claim_result_t *res)
{
    request_t *r = ctx;
    if (r->hedge.state != HEDGE_CLAIMING)
        return;
    install(r, HEDGE_HOP_SECOND);
    size_t cand = r->cur;
    if (res->unavailable) {
        no_hedge(r);
        return;
    }
    sl__apply_claim(r, cand, res);
    if (res->skip != SL_SKIP_NONE) {
        discard_hedge_attempt(r);
        claim_next(r);
        return;
    }
    r->hedge.state = HEDGE_RUNNING;
    sl_log_debug("request %llu: no content from %s after %u s: hedged to %s", (unsigned long long)r->id,
                 r->config->providers[r->hedge.first_provider].name, first_token_secs(r),
                 sl__provider_of(r, cand)->name);
    sl__send_hop(r);
    if (r->phase == PHASE_DONE)
        return;
    sl_hop_rebind(r->hop, &hedged_callbacks, &r->hedge.tags[HEDGE_HOP_SECOND]);
    if (r->hedge.parked.hop != NULL)
        sl_hop_rebind(r->hedge.parked.hop, &hedged_callbacks, &r->hedge.tags[HEDGE_HOP_FIRST]);
}

/* The hedge's claim of the next later candidate that can take it now; with none left, no hedge. */
static void
claim_next(request_t *r)
{
    for (size_t i = r->hedge.next_cand; i < r->n_cands; i++) {
        if (!r->retry.in_round[i] || r->skips[i] != SL_SKIP_NONE)
            continue;
        r->hedge.next_cand = i + 1;
        r->cur = i;
        attempt_t *a = sl__new_attempt(r, i);
        if (a == NULL)
            break;
        a->hedge = true;
        sl_upstream_claim_t claim = sl__upstream_claim_of(r, i);
        /* Nothing waits for a hedge: a place in line would be taken from the first hop's own request. */
        claim.waiter = NULL;
        sl_shared_claim_upstream(r->gw->shared, &claim, sl__shared_call(r, &r->wait.call), on_hedge_claimed,
                                 r);
        /* An answer still to come (the cluster's shared state): the first hop's callbacks meanwhile find its
         * own fields in the request. */
        if (r->hedge.state == HEDGE_CLAIMING)
            install(r, HEDGE_HOP_FIRST);
        return;
    }
    no_hedge(r);
}

/* The facts sl_hedge_decide weighs for the installed hop, now. */
static sl_hedge_facts_t
hedge_facts(const request_t *r, bool hedged)
{
    bool before_content = r->phase == PHASE_WAITING_HEAD || (r->phase == PHASE_HELD && r->rd.events);
    return (sl_hedge_facts_t){
        .first_token_secs = first_token_secs(r),
        .has_later = sl__has_next_candidate(r),
        .sealed_history = r->sealed_history,
        .has_content = !before_content,
        .hedged = hedged,
        .sent_ms = r->m.sent_ns / 1000000,
        .now_ms = sl_now_ms(),
        .deadline_ms = r->retry.deadline_ms,
    };
}

static void
on_hedge_due(sl_timer_t *t)
{
    request_t *r = H2O_STRUCT_FROM_MEMBER(request_t, hedge.timer, t);
    if (r->phase == PHASE_DONE || r->hop == NULL || r->hedge.state != HEDGE_NONE ||
        r->attempt != r->hedge.armed_attempt)
        return;
    sl_hedge_facts_t f = hedge_facts(r, false);
    sl_hedge_verdict_t v = sl_hedge_decide(&f);
    if (v == SL_HEDGE_NOT_YET) {
        sl_timer_arm(&r->io->timers, &r->hedge.timer, f.sent_ms + (int64_t)f.first_token_secs * 1000,
                     on_hedge_due);
        return;
    }
    if (v != SL_HEDGE_START) {
        sl_log_debug("request %llu: no hedge (%s)", (unsigned long long)r->id, sl_hedge_verdict_name(v));
        return;
    }
    r->hedge.first_provider = r->cands[r->cur].provider;
    r->hedge.next_cand = r->cur + 1;
    r->hedge.tags[HEDGE_HOP_FIRST] = (hedge_tag_t){r, HEDGE_HOP_FIRST};
    r->hedge.tags[HEDGE_HOP_SECOND] = (hedge_tag_t){r, HEDGE_HOP_SECOND};
    /* The first hop is parked; the request's fields are the hedge's, fresh. */
    hop_slot_t fresh = {.hop_phase = PHASE_ROUTING, .attempt = SIZE_MAX, .cur = r->cur};
    h2o_buffer_init(&fresh.rx, &h2o_socket_buffer_prototype);
    sl__exchange_phase(r, &fresh.hop_phase);
    save_slot(r, &r->hedge.parked);
    r->hedge.parked.hop_phase = fresh.hop_phase;
    load_slot(r, &fresh);
    repoint_scratch(&r->hedge.parked.rd);
    r->hedge.installed = HEDGE_HOP_SECOND;
    r->hedge.state = HEDGE_CLAIMING;
    claim_next(r);
}

void
sl__hedge_arm(request_t *r)
{
    if (r->hedge.state != HEDGE_NONE)
        return;
    sl_hedge_facts_t f = hedge_facts(r, false);
    sl_hedge_verdict_t v = sl_hedge_decide(&f);
    if (v != SL_HEDGE_NOT_YET && v != SL_HEDGE_START)
        return;
    r->hedge.armed_attempt = r->attempt;
    sl_timer_arm(&r->io->timers, &r->hedge.timer, f.sent_ms + (int64_t)f.first_token_secs * 1000,
                 on_hedge_due);
}

/* ---- settling ------------------------------------------------------------------------------ */

/* A claim still pending for the hedge is given up: no hedge. */
static void
abandon_claim(request_t *r)
{
    sl_shared_cancel(r->gw->shared, &r->wait.call);
    no_hedge(r);
}

void
sl__hedge_content(request_t *r)
{
    if (r->hedge.state == HEDGE_NONE)
        return;
    if (r->hedge.state == HEDGE_CLAIMING) {
        abandon_claim(r);
        return;
    }
    hedge_hop_t winner = r->hedge.installed;
    install(r, other_hop(winner));
    sl__close_attempt(r, SL_HOP_HEDGE_LOST, SL_CODE_GW_UPSTREAM_STATUS, NULL);
    sl__end_hop(r);
    install(r, winner);
    clear_parked(r);
    if (r->io->metrics != NULL)
        sl_metrics_hedge(r->io->metrics, sl__metrics_provider(r, r->hedge.first_provider),
                         winner == HEDGE_HOP_SECOND);
    sl_log_debug("request %llu: the %s hop had content first (%s)", (unsigned long long)r->id,
                 winner == HEDGE_HOP_SECOND ? "hedge" : "first", sl__provider_of(r, r->cur)->name);
}

void
sl__hedge_other_goes_on(request_t *r)
{
    hedge_hop_t failed = r->hedge.installed;
    size_t failed_cand = r->cur;
    install(r, other_hop(failed));
    clear_parked(r);
    /* Both hops failing, failover goes on from after the hedge's candidate (§4). */
    if (failed == HEDGE_HOP_SECOND)
        r->hedge.resume_after = failed_cand;
}

void
sl__hedge_abandon(request_t *r)
{
    if (r->hedge.state == HEDGE_CLAIMING)
        abandon_claim(r);
}

void
sl__hedge_drop(request_t *r, sl_hop_outcome_t outcome, sl_code_t code, const char *detail)
{
    sl_timer_cancel(&r->io->timers, &r->hedge.timer);
    if (r->hedge.state == HEDGE_NONE)
        return;
    if (r->hedge.state == HEDGE_CLAIMING) {
        abandon_claim(r);
        return;
    }
    hedge_hop_t kept = r->hedge.installed;
    install(r, other_hop(kept));
    sl__close_attempt(r, outcome, code, detail);
    sl__end_hop(r);
    install(r, kept);
    clear_parked(r);
}

bool
sl__hedge_running(const request_t *r)
{
    return r->hedge.state == HEDGE_RUNNING;
}

bool
sl__hedge_is_installed(const request_t *r)
{
    return r->hedge.state == HEDGE_RUNNING && r->hedge.installed == HEDGE_HOP_SECOND;
}
