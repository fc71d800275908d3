/*
 * The candidates of a request (behaviour.md §1.4-1.5, §2): the route's list with this moment's
 * skips, and conversation affinity (which upstream a conversation stays on).
 */
#include "req.h"

/*
 * A key's shard of the affinity table: its high bits (keys are keyed hashes, spread evenly; a shard's
 * own buckets use the low ones).
 */
static void
affinity_put(sl_gateway_t *gw, uint64_t key, sl_affinity_pin_t pin)
{
    size_t i = (size_t)(key >> (64 - SL_AFFINITY_SHARD_BITS));
    pthread_mutex_lock(&gw->affinity[i].lock);
    sl_affinity_put(gw->affinity[i].table, key, pin, sl_now_ms());
    pthread_mutex_unlock(&gw->affinity[i].lock);
}

static bool
affinity_get(sl_gateway_t *gw, uint64_t key, sl_affinity_pin_t *pin)
{
    size_t i = (size_t)(key >> (64 - SL_AFFINITY_SHARD_BITS));
    pthread_mutex_lock(&gw->affinity[i].lock);
    bool found = sl_affinity_get(gw->affinity[i].table, key, sl_now_ms(), pin);
    pthread_mutex_unlock(&gw->affinity[i].lock);
    return found;
}

/*
 * The conversation stays with the upstream that served it (sticky; sealed when its history is bound), and
 * remembers its home: where it goes back to once that can take it again, if this was a failover (§1.5).
 */
void
sl__remember_conversation(request_t *r)
{
    if (r->conversation == 0)
        return;
    uint64_t served = sl_affinity_upstream_id(sl__provider_of(r, r->cur)->name);
    sl_affinity_pin_t pin = {
        .upstream = served,
        .sealed = r->sealed_history,
        .home = r->home != 0 ? r->home : served,
    };
    affinity_put(r->gw, r->conversation, pin);
}

/* A served Responses answer seals its id to the upstream that holds it. */
void
sl__remember_response(request_t *r)
{
    if (r->response_id[0] == '\0')
        return;
    const char *client = r->in.client != NULL ? r->in.client->name : "";
    uint64_t key = sl_affinity_key_response(&r->gw->affinity_key, client, strlen(client), r->response_id,
                                            strlen(r->response_id));
    sl_affinity_pin_t pin = {
        .upstream = sl_affinity_upstream_id(sl__provider_of(r, r->cur)->name),
        .sealed = true,
    };
    affinity_put(r->gw, key, pin);
}

/* The conversation's name: a session header, else the client and its first user message (behaviour.md §1.5).
 */
static uint64_t
conversation_key(request_t *r)
{
    const sl_hash_key_t *key = &r->gw->affinity_key;
    const char *client = r->in.client != NULL ? r->in.client->name : "";
    char previous[128];
    size_t previous_len;
    if (r->in.fields.previous_response_id.len > 0 &&
        sl_jscan_string(r->in.body, r->in.fields.previous_response_id, previous, sizeof(previous),
                        &previous_len))
        return sl_affinity_key_response(key, client, strlen(client), previous, previous_len);
    const h2o_iovec_t *session = NULL;
    if (sl__session_header(r, &session))
        return sl_affinity_key_session(key, client, strlen(client), session->base, session->len);
    if (r->in.fields.first_user.len > 0)
        return sl_affinity_key_message(key, client, strlen(client), r->in.body, r->in.fields.first_user);
    return 0;
}

/*
 * Whether a conversation's home can take it again (behaviour.md §1.5): its breaker not open (half-open is
 * fine: the request becomes its probe), not paused after a 429 or by an operator, no usage window shown
 * full. Busy slots do not count: the claim finds them and the request goes on to where it was.
 */
static bool
home_can_take_it(void *ctx, size_t provider)
{
    request_t *r = ctx;
    sl_upstream_t *up = r->snapshot->upstreams[provider];
    int64_t now = sl_now_ms();
    pthread_mutex_lock(&up->lock);
    bool cooling = sl_breaker_is_cooling(&up->breaker, now);
    pthread_mutex_unlock(&up->lock);
    if (cooling || sl_shared_pause_of(r->gw->shared, up, now).recovery_ms > now)
        return false;
    sl_limit_set_t *set =
        r->snapshot->limits.providers != NULL ? r->snapshot->limits.providers[provider] : NULL;
    if (set == NULL)
        return true;
    sl_upstream_view_t v = sl_shared_upstream_view(r->gw->shared, up, set);
    return v.shown == SL_LIMIT_OK || v.shown_until_ms <= sl_wall_ms();
}

/* The upstream a conversation belongs to as routed: the first candidate that can be tried. */
static uint64_t
routed_home(const request_t *r)
{
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->cands[i].skip == SL_SKIP_NONE)
            return sl_affinity_upstream_id(r->config->providers[r->cands[i].provider].name);
    }
    return 0;
}

static sl_affinity_effect_t
apply_affinity(request_t *r)
{
    r->sealed_history = r->in.fields.encrypted_content || r->in.fields.thinking_signature ||
                        r->in.fields.previous_response_id.len > 0;
    r->conversation = conversation_key(r);
    if (r->conversation == 0)
        return SL_AFFINITY_NONE;
    sl_affinity_pin_t pin;
    bool found = affinity_get(r->gw, r->conversation, &pin);
    r->home = found && pin.home != 0 ? pin.home : found ? pin.upstream : routed_home(r);
    sl_affinity_effect_t effect = sl_affinity_apply(r->config, found ? &pin : NULL, r->sealed_history,
                                                    home_can_take_it, r, r->cands, r->n_cands);
    if (effect != SL_AFFINITY_NONE)
        sl_log_debug("request %llu: affinity %s", (unsigned long long)r->id,
                     effect == SL_AFFINITY_RELEASED ? "released" : sl_affinity_effect_slug(effect));
    return effect;
}

/*
 * This moment's skips over the candidate list (behaviour.md §2): the config's, then cooling breakers (all
 * tried when all are cooling), each skip recorded as an attempt. False when no candidate is offered.
 */
static bool
skip_for_now(request_t *r)
{
    bool cooling[r->n_cands + 1];
    size_t offered = 0;
    int64_t now = sl_now_ms();
    for (size_t i = 0; i < r->n_cands; i++) {
        r->skips[i] = r->cands[i].skip;
        cooling[i] = false;
        if (r->skips[i] != SL_SKIP_NONE)
            continue;
        offered++;
        sl_upstream_t *up = r->snapshot->upstreams[r->cands[i].provider];
        pthread_mutex_lock(&up->lock);
        cooling[i] = sl_breaker_is_cooling(&up->breaker, now);
        pthread_mutex_unlock(&up->lock);
    }
    /* Compact to the offered candidates for the cooling rule, then map back. */
    bool off_cooling[offered + 1], off_skip[offered + 1];
    size_t k = 0;
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->skips[i] == SL_SKIP_NONE)
            off_cooling[k++] = cooling[i];
    }
    size_t skipped = sl_breaker_filter(off_cooling, offered, off_skip);
    r->cooling_ignored = offered > 1 && skipped == 0 && offered > 0 && off_cooling[0];
    r->n_offered = offered;
    k = 0;
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->skips[i] == SL_SKIP_NONE && off_skip[k++])
            r->skips[i] = SL_SKIP_COOLING;
    }
    for (size_t i = 0; i < r->n_cands; i++) {
        if (r->skips[i] != SL_SKIP_NONE) {
            sl__note_trouble(r, sl_trouble_of_skip(r->skips[i]));
            attempt_t *a = sl__new_attempt(r, i);
            if (a != NULL) {
                a->skipped = r->skips[i];
                sl__emit_attempt(r, a);
            }
        }
    }
    return offered > 0;
}

/* The candidate list with this moment's skips (behaviour.md §2); false when nothing matches. */
bool
sl__choose_candidates(request_t *r)
{
    const sl_config_t *c = r->config;
    r->cands = h2o_mem_alloc_pool(&r->req->pool, sizeof(*r->cands) * (c->n_providers + 1));
    r->skips = h2o_mem_alloc_pool(&r->req->pool, sizeof(*r->skips) * (c->n_providers + 1));
    r->retry.in_round = h2o_mem_alloc_pool(&r->req->pool, sizeof(*r->retry.in_round) * (c->n_providers + 1));
    r->retry.failed_temporary =
        h2o_mem_alloc_pool(&r->req->pool, sizeof(*r->retry.failed_temporary) * (c->n_providers + 1));
    r->wait.recovery_ms =
        h2o_mem_alloc_pool(&r->req->pool, sizeof(*r->wait.recovery_ms) * (c->n_providers + 1));
    for (size_t i = 0; i <= c->n_providers; i++) {
        r->retry.in_round[i] = true;
        r->retry.failed_temporary[i] = false;
    }
    size_t route;
    uint64_t counter = atomic_fetch_add(&r->gw->balance_counter, 1);
    if (!sl_route_select(c, r->in.endpoint.dialect, r->in.model, counter, r->cands, &r->n_cands, &route))
        return false;
    r->route = route;
    r->routed = true;
    r->affinity_effect = apply_affinity(r);
    sl__emit_routed(r, route, r->affinity_effect);
    return skip_for_now(r);
}

bool
sl__may_switch_to_context_fallback(const request_t *r)
{
    if (r->context_switched || r->affinity_effect == SL_AFFINITY_SEALED || r->route >= r->config->n_routes)
        return false;
    sl_candidate_t fallback[r->config->n_providers + 1];
    size_t n = sl_route_context_fallback(r->config, r->route, r->in.endpoint.dialect, r->in.model, fallback);
    for (size_t i = 0; i < n; i++) {
        if (fallback[i].skip == SL_SKIP_NONE)
            return true;
    }
    return false;
}

/*
 * A context-length error (behaviour.md §1.6): the route's context_fallback replaces the rest of the
 * candidates, retry rounds run among them only, and the conversation stays on whichever serves it (it
 * only grows: it does not go back to the model it outgrew). Only when sl__may_switch_to_context_fallback.
 */
void
sl__switch_to_context_fallback(request_t *r)
{
    r->context_switched = true;
    /* A held RequestRouted names the candidates it had: built before they change. */
    if (sl__events_on(r))
        sl__build_held_events(r);
    r->n_cands =
        sl_route_context_fallback(r->config, r->route, r->in.endpoint.dialect, r->in.model, r->cands);
    for (size_t i = 0; i < r->n_cands; i++) {
        r->retry.in_round[i] = true;
        r->retry.failed_temporary[i] = false;
    }
    r->affinity_effect = SL_AFFINITY_NONE;
    r->home = 0;
    r->next = 0;
    sl__emit_routed(r, r->route, SL_AFFINITY_NONE);
    skip_for_now(r);
}
