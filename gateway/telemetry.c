/*
 * What a request tells the world: its attempts (one per hop or skipped
 * candidate), the messages of its failures, its events on the bus
 * (RequestStarted … RequestFinished, AttemptView, HealthChanged,
 * ThrottleChanged) and its row in the request DB (behaviour.md §10).
 */
#include "req.h"

#include "cluster.h"

/* Who sent the request: the client's name, "local" when no keys are configured, "unknown" when refused. */
const char *
sl__client_name(const request_t *r)
{
    if (r->in.client != NULL)
        return r->in.client->name;
    return r->config->n_clients == 0 ? "local" : "unknown";
}

/* ---- events ------------------------------------------------------------------------------- */

bool
sl__events_on(const request_t *r)
{
    return r->gw->bus != NULL && sl_bus_is_active(r->gw->bus);
}

void
sl__emit(request_t *r, sl_proto_event_t *ev)
{
    sl_bus_emit(&r->io->events, ev);
}

/* The conversation's session header, the first of x-sluice-session, x-claude-code-session-id, session-id. */
bool
sl__session_header(const request_t *r, const h2o_iovec_t **value)
{
    const h2o_headers_t *h = &r->req->headers;
    int best_rank = -1;
    for (size_t i = 0; i < h->size; i++) {
        int rank = sl_affinity_session_header_rank(h->entries[i].name->base, h->entries[i].name->len);
        if (rank >= 0 && (best_rank < 0 || rank < best_rank)) {
            best_rank = rank;
            *value = &h->entries[i].value;
        }
    }
    return best_rank >= 0;
}

/*
 * While nobody watches live, a request's events are held as small records
 * and built only once anyone could look at the request: when it waits
 * (queued, a retry's backoff), when it has lived SL_HELD_EVENTS_MS (a
 * timer of its worker's), or when someone starts watching. One that ends
 * before is never built: its events would have left the in-flight log
 * unseen. Building runs the builders below with the times the events
 * happened.
 */
static void
build_started(request_t *r)
{
    if (r->req == NULL)
        return;
    const h2o_iovec_t *session = NULL;
    char session_text[256] = "";
    if (sl__session_header(r, &session))
        snprintf(session_text, sizeof(session_text), "%.*s", (int)session->len, session->base);
    sl_bus_started_t st = {
        .id = r->id,
        .client = sl__client_name(r),
        .dialect =
            r->in.endpoint.dialect < SL_DIALECT_COUNT ? r->in.endpoint.dialect : SL_DIALECT_OPENAI_CHAT,
        .model = r->in.model,
        .stream = r->in.stream,
        .path = r->path.base,
        .path_len = r->path.len,
        .session = session != NULL ? session_text : NULL,
        .instance = r->gw->cluster != NULL ? sl_cluster_instance(r->gw->cluster) : NULL,
    };
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_request_started(&ev, r->started_wall_ms, &st));
}

static void
build_routed(request_t *r, int64_t at_ms, size_t route, sl_affinity_effect_t effect)
{
    const char *names[r->n_cands + 1];
    for (size_t i = 0; i < r->n_cands; i++)
        names[i] = sl__provider_of(r, i)->name;
    const char *route_name = route == SL_ROUTE_BY_MODELS ? "models" : r->config->routes[route].match;
    sl_proto_affinity_t affinity = effect == SL_AFFINITY_SEALED     ? SL_PROTO_AFFINITY_SEALED
                                   : effect == SL_AFFINITY_RETURNED ? SL_PROTO_AFFINITY_RETURNED
                                                                    : SL_PROTO_AFFINITY_STICKY;
    bool has_affinity =
        effect == SL_AFFINITY_STICKY || effect == SL_AFFINITY_SEALED || effect == SL_AFFINITY_RETURNED;
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_request_routed(&ev, at_ms, r->id, route_name, names, r->n_cands,
                                      has_affinity ? &affinity : NULL));
}

static void build_attempt(request_t *r, int64_t at_ms, const attempt_t *a);

static void
build_headers(request_t *r, int64_t at_ms, int status, int64_t ttfb_ms)
{
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_request_headers(&ev, at_ms, r->id, status, ttfb_ms));
}

static void
build_first_token(request_t *r, int64_t at_ms, int64_t ttft_ms)
{
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_request_first_token(&ev, at_ms, r->id, ttft_ms));
}

static void
build_held(request_t *r, const held_event_t *h)
{
    switch (h->kind) {
    case HELD_STARTED:
        build_started(r);
        break;
    case HELD_ROUTED:
        build_routed(r, h->at_ms, h->routed.route, h->routed.effect);
        break;
    case HELD_ATTEMPT:
        build_attempt(r, h->at_ms, &r->attempts[h->attempt]);
        break;
    case HELD_HEADERS:
        build_headers(r, h->at_ms, h->headers.status, h->headers.ttfb_ms);
        break;
    case HELD_FIRST_TOKEN:
        build_first_token(r, h->at_ms, h->ttft_ms);
        break;
    }
}

static void
drop_held(request_t *r)
{
    r->held.n = 0;
    if (h2o_linklist_is_linked(&r->held.link))
        h2o_linklist_unlink(&r->held.link);
}

void
sl__build_held_events(request_t *r)
{
    r->held.built = true;
    for (size_t i = 0; i < r->held.n; i++)
        build_held(r, &r->held.events[i]);
    drop_held(r);
}

/*
 * Whether the request's next event is held: nobody watches live and none
 * of its events was built yet. Otherwise what it held is built first, so
 * that its events keep their order, and from then on they are built as
 * they happen.
 */
static bool
holds_events(request_t *r)
{
    if (r->held.built)
        return false;
    if (r->io != NULL && !sl_bus_is_watched(r->gw->bus))
        return true;
    sl__build_held_events(r);
    return false;
}

static request_t *
oldest_holding(sl_worker_io_t *io)
{
    if (h2o_linklist_is_empty(&io->held_events))
        return NULL;
    return H2O_STRUCT_FROM_MEMBER(request_t, held.link, io->held_events.next);
}

/* The worker's requests that have held their events SL_HELD_EVENTS_MS get them built. */
static void
on_held_events_due(sl_timer_t *t)
{
    sl_worker_io_t *io = H2O_STRUCT_FROM_MEMBER(sl_worker_io_t, held_events_timer, t);
    int64_t now = sl_now_ms();
    request_t *r;
    while ((r = oldest_holding(io)) != NULL && now - r->started_ms >= SL_HELD_EVENTS_MS)
        sl__build_held_events(r);
    if (r != NULL)
        sl_timer_arm(&io->timers, t, r->started_ms + SL_HELD_EVENTS_MS, on_held_events_due);
}

static void
hold(request_t *r, held_event_t h)
{
    r->held.events[r->held.n++] = h;
    if (!h2o_linklist_is_linked(&r->held.link)) {
        h2o_linklist_insert(&r->io->held_events, &r->held.link);
        if (!sl_timer_is_armed(&r->io->held_events_timer))
            sl_timer_arm(&r->io->timers, &r->io->held_events_timer, r->started_ms + SL_HELD_EVENTS_MS,
                         on_held_events_due);
    }
    if (r->held.n == HELD_EVENTS_MAX)
        sl__build_held_events(r);
}

void
sl_request_build_held_events(sl_worker_io_t *io)
{
    request_t *r;
    while ((r = oldest_holding(io)) != NULL)
        sl__build_held_events(r);
}

void
sl__emit_started(request_t *r)
{
    if (!sl__events_on(r) || r->req == NULL)
        return;
    if (holds_events(r))
        hold(r, (held_event_t){.kind = HELD_STARTED, .at_ms = r->started_wall_ms});
    else
        build_started(r);
}

void
sl__emit_routed(request_t *r, size_t route, sl_affinity_effect_t effect)
{
    if (!sl__events_on(r))
        return;
    if (holds_events(r))
        hold(r, (held_event_t){.kind = HELD_ROUTED, .at_ms = sl_wall_ms(), .routed = {route, effect}});
    else
        build_routed(r, sl_wall_ms(), route, effect);
}

/* ---- attempts ------------------------------------------------------------------------------ */

sl_msg_t
sl__failure_msg(const request_t *r, sl_code_t code, const char *provider, int status, const char *detail)
{
    const sl_failover_t *fo = &r->config->failover;
    char status_text[16], secs[16];
    snprintf(status_text, sizeof(status_text), "%d", status);
    snprintf(secs, sizeof(secs), "%u",
             code == SL_CODE_GW_UPSTREAM_TOTAL_TIMEOUT ? fo->total_timeout_secs : fo->idle_timeout_secs);
    const char *d = detail != NULL ? detail : "";
    /* Each code's template takes what it shows; the failure's own detail is its reason, code or max. */
    return sl_msg_make_for(code, "provider", provider, "status", status_text, "secs", secs, "model",
                           r->in.model, "dialect", sl_dialect_slug(r->in.endpoint.dialect), "reason", d,
                           "code", d, "max", d, NULL);
}

attempt_t *
sl__new_attempt(request_t *r, size_t cand)
{
    if (r->n_attempts == MAX_ATTEMPTS)
        return NULL;
    if (r->n_attempts == r->cap_attempts) {
        r->cap_attempts = r->cap_attempts == 0 ? 2 : r->cap_attempts * 2;
        r->attempts = sl_xrealloc(r->attempts, r->cap_attempts * sizeof(*r->attempts));
    }
    r->attempt = r->n_attempts;
    attempt_t *a = &r->attempts[r->n_attempts++];
    int64_t now_ns = sl_now_ns();
    *a = (attempt_t){.provider = r->cands[cand].provider,
                     .model = r->cands[cand].model,
                     .started_ms = now_ns / 1000000,
                     .started_ns = now_ns,
                     .skipped = SL_SKIP_NONE,
                     .retry = r->retry.round,
                     .backoff_ms = -1,
                     .pause_ms = -1};
    return a;
}

/* The hop's attempt still open, or NULL (none, a skip, or closed). */
static attempt_t *
open_attempt(request_t *r)
{
    attempt_t *a = r->attempt < r->n_attempts ? &r->attempts[r->attempt] : NULL;
    return a != NULL && a->skipped == SL_SKIP_NONE && !a->closed ? a : NULL;
}

uint16_t
sl__metrics_provider(const request_t *r, size_t provider)
{
    sl_upstream_t *up = r->snapshot->upstreams[provider];
    unsigned slot = atomic_load_explicit(&up->metrics_slot, memory_order_relaxed);
    if (slot == 0) {
        slot = (unsigned)sl_metrics_provider_slot(r->gw->metrics, r->config->providers[provider].name) + 1;
        atomic_store_explicit(&up->metrics_slot, slot, memory_order_relaxed);
    }
    return (uint16_t)(slot - 1);
}

void
sl__note_trouble(request_t *r, sl_trouble_t t)
{
    sl_trouble_note(&r->m.trouble, t);
}

/* The label of a hop that ended without a classified failure (served, cut, the client gone). */
static sl_attempt_label_t
label_of_end(sl_hop_outcome_t outcome, sl_code_t code)
{
    switch (outcome) {
    case SL_HOP_SERVED:
        return SL_ATTEMPT_OK;
    case SL_HOP_CANCELLED:
    case SL_HOP_CLIENT_LEFT:
        return SL_ATTEMPT_CANCELLED;
    case SL_HOP_STATUS:
        return SL_ATTEMPT_NOT_FOUND; /* an upstream without a count-tokens endpoint */
    case SL_HOP_HEDGE_LOST:
        return SL_ATTEMPT_HEDGE_LOST;
    default:
        break;
    }
    switch (code) {
    case SL_CODE_GW_UPSTREAM_BROKEN_AFTER_CONTENT:
        return SL_ATTEMPT_BROKEN_AFTER_CONTENT;
    case SL_CODE_GW_UPSTREAM_IDLE_TIMEOUT:
        return SL_ATTEMPT_TIMEOUT;
    case SL_CODE_GW_UPSTREAM_STREAM_ENDED_EARLY:
    case SL_CODE_GW_UPSTREAM_BROKEN_BEFORE_CONTENT:
        return SL_ATTEMPT_TEMPORARY;
    default:
        return SL_ATTEMPT_OTHER;
    }
}

static void
close_attempt(request_t *r, attempt_t *a, sl_hop_outcome_t outcome, sl_attempt_label_t label, sl_code_t code,
              const char *detail)
{
    /* A hop that went out (an estimate answered locally is none). */
    if (outcome != SL_HOP_ESTIMATED && r->io != NULL && r->io->metrics != NULL)
        sl_metrics_attempt(r->io->metrics, sl__metrics_provider(r, r->cands[r->cur].provider), label);
    a->closed = true;
    a->label = label;
    a->ended_ns = sl_now_ns();
    a->outcome = outcome;
    a->status = r->rd.up_status;
    a->ms = sl_now_ms() - a->started_ms;
    if (outcome != SL_HOP_SERVED && outcome != SL_HOP_ESTIMATED && outcome != SL_HOP_HEDGE_LOST) {
        a->has_error = true;
        a->error_code = code;
        snprintf(a->error_detail, sizeof(a->error_detail), "%s", detail != NULL ? detail : "");
    }
    sl__emit_attempt(r, a);
}

void
sl__close_attempt(request_t *r, sl_hop_outcome_t outcome, sl_code_t code, const char *detail)
{
    attempt_t *a = open_attempt(r);
    if (a != NULL)
        close_attempt(r, a, outcome, label_of_end(outcome, code), code, detail);
}

void
sl__close_failed_attempt(request_t *r, sl_hop_outcome_t outcome, sl_attempt_label_t label, sl_code_t code,
                         const char *detail, sl_step_reason_t reason)
{
    attempt_t *a = open_attempt(r);
    if (a == NULL)
        return;
    a->has_reason = true;
    a->reason = reason;
    close_attempt(r, a, outcome, label, code, detail);
}

/*
 * A waiter that looks again and must still wait for the same reason is the
 * skip it already recorded in this round, not a new attempt: a request
 * woken many times in a long line keeps one row per upstream and reason.
 */
static bool
repeats_a_skip(const request_t *r, const attempt_t *a, sl_skip_t skip)
{
    for (const attempt_t *e = a - 1; e >= r->attempts && e->retry == a->retry && e->skipped != SL_SKIP_NONE;
         e--) {
        if (e->provider == a->provider && e->skipped == skip)
            return true;
    }
    return false;
}

void
sl__skip_attempt(request_t *r, attempt_t *a, sl_skip_t skip)
{
    r->skips[r->cur] = skip;
    sl__note_trouble(r, sl_trouble_of_skip(skip));
    if (repeats_a_skip(r, a, skip)) {
        r->n_attempts--;
        r->attempt = SIZE_MAX;
    } else {
        a->skipped = skip;
        sl__emit_attempt(r, a);
    }
    /* A full max_concurrent is the final answer's reason when nothing else fails. */
    if (skip == SL_SKIP_BUSY && !r->retry.last.any) {
        char max[16];
        snprintf(max, sizeof(max), "%u", sl__provider_of(r, r->cur)->max_concurrent);
        r->rd.up_status = 0;
        sl__remember_failure(r, SL_CODE_GW_UPSTREAM_BUSY, max);
    }
}

static void
build_attempt(request_t *r, int64_t at_ms, const attempt_t *a)
{
    const char *provider = r->config->providers[a->provider].name;
    sl_msg_t msg = {0};
    if (a->has_error)
        msg = sl__failure_msg(r, a->error_code, provider, a->status, a->error_detail);
    bool skipped = a->skipped != SL_SKIP_NONE;
    sl_bus_attempt_t view = {
        .provider = provider,
        .model = a->model,
        .outcome = skipped ? SL_HOP_SKIPPED : a->outcome,
        .status = a->status,
        .error = a->has_error ? &msg : NULL,
        .ms = a->ms,
        .pause_ms = a->pause_ms >= 0 ? a->pause_ms : SL_BUS_ABSENT,
        .retry = a->retry > 0 ? (int64_t)a->retry : SL_BUS_ABSENT,
        .backoff_ms = a->backoff_ms >= 0 ? a->backoff_ms : SL_BUS_ABSENT,
        .skip = a->skipped,
        .has_reason = a->has_reason,
        .reason = a->reason,
        .hedge = a->hedge,
    };
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_attempt(&ev, at_ms, r->id, &view));
    if (a->has_error)
        sl_msg_free(&msg);
}

/* An attempt does not change once reported: a held one is its index. */
void
sl__emit_attempt(request_t *r, const attempt_t *a)
{
    if (!sl__events_on(r))
        return;
    if (holds_events(r))
        hold(r, (held_event_t){
                    .kind = HELD_ATTEMPT, .at_ms = sl_wall_ms(), .attempt = (size_t)(a - r->attempts)});
    else
        build_attempt(r, sl_wall_ms(), a);
}

/* RequestQueued: it waits on the gates' upstreams, until its deadline at the latest. */
void
sl__emit_queued(request_t *r, const sl_bus_gate_t *gates, size_t n_gates)
{
    sl__trace_event(r, SL_SPAN_EVENT_QUEUED, -1);
    if (!sl__events_on(r))
        return;
    /* A waiting request is what the in-flight log is for. */
    sl__build_held_events(r);
    int64_t wall = sl_wall_ms();
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_request_queued(&ev, wall, r->id, gates, n_gates,
                                      wall + (r->retry.deadline_ms - sl_now_ms())));
}

/* RequestDequeued: it goes on, to provider (NULL: to look again, after a backoff or its key's wait). */
void
sl__emit_dequeued(request_t *r, const char *provider)
{
    if (!sl__events_on(r))
        return;
    sl__build_held_events(r);
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_request_dequeued(&ev, sl_wall_ms(), r->id, provider));
}

/* RequestRetrying: a backoff of pause_ms starts before a retry round over the candidates set in next. */
void
sl__emit_retrying(request_t *r, const bool *next, int64_t pause_ms, bool by_hint)
{
    sl__trace_event(r, SL_SPAN_EVENT_BACKOFF, pause_ms);
    if (!sl__events_on(r))
        return;
    sl__build_held_events(r);
    const char *names[r->n_cands + 1];
    size_t k = 0;
    for (size_t i = 0; i < r->n_cands; i++) {
        if (next[i])
            names[k++] = sl__provider_of(r, i)->name;
    }
    sl_msg_t last = sl__last_failure_msg(r);
    int64_t wall = sl_wall_ms();
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_request_retrying(&ev, wall, r->id, names, k, r->retry.round, wall + pause_ms,
                                        wall + (r->retry.deadline_ms - sl_now_ms()), by_hint, &last));
    sl_msg_free(&last);
}

/* RequestHeaders: the answer's head went out. */
void
sl__emit_headers(request_t *r)
{
    if (!sl__events_on(r))
        return;
    if (holds_events(r))
        hold(r, (held_event_t){.kind = HELD_HEADERS,
                               .at_ms = sl_wall_ms(),
                               .headers = {r->rd.up_status, r->out.ttfb_ms}});
    else
        build_headers(r, sl_wall_ms(), r->rd.up_status, r->out.ttfb_ms);
}

/* The first content reached the client (or, for a whole answer, its head did). */
void
sl__first_token(request_t *r)
{
    if (r->out.first_token_seen)
        return;
    r->out.first_token_seen = true;
    r->out.ttft_ms = sl_now_ms() - r->started_ms;
    sl__trace_event(r, SL_SPAN_EVENT_FIRST_TOKEN, -1);
    if (!sl__events_on(r))
        return;
    if (holds_events(r))
        hold(r, (held_event_t){.kind = HELD_FIRST_TOKEN, .at_ms = sl_wall_ms(), .ttft_ms = r->out.ttft_ms});
    else
        build_first_token(r, sl_wall_ms(), r->out.ttft_ms);
}

void
sl__emit_end(request_t *r, sl_row_outcome_t outcome, int status, const sl_msg_t *msg)
{
    if (!sl__events_on(r))
        return;
    /*
     * Nothing of it built: its start can no longer be (the client's request
     * is gone), or it ends unseen while nobody watches live.
     */
    if (!r->held.built && (r->req == NULL || holds_events(r))) {
        drop_held(r);
        return;
    }
    sl_proto_event_t ev;
    int64_t duration = sl_now_ms() - r->started_ms;
    if (outcome == SL_ROW_CANCELLED) {
        sl__emit(r, sl_bus_request_cancelled(&ev, sl_wall_ms(), r->id, duration));
    } else if (r->out.answer == ANSWER_GATEWAY && msg != NULL) {
        sl__emit(r, sl_bus_request_failed(&ev, sl_wall_ms(), r->id, sl_bus_failure_source(msg->code), msg,
                                          duration));
    } else {
        const sl_usage_t *u = &r->rd.stream.usage;
        sl_proto_usage_t usage = {(uint64_t)u->input, (uint64_t)u->output, (uint64_t)u->cache_read,
                                  (uint64_t)u->cache_write, outcome == SL_ROW_ANSWERED_LOCALLY};
        bool has_usage = u->input || u->output || u->cache_read || u->cache_write;
        /* What is still in rx goes out with the final send that follows. */
        sl__emit(r,
                 sl_bus_request_finished(&ev, sl_wall_ms(), r->id, status, r->out.bytes_out + r->out.rx->size,
                                         duration, has_usage ? &usage : NULL, SL_BUS_ABSENT));
    }
}

/* HealthChanged for a breaker transition; state copied under the upstream's lock by the caller. */
void
sl__emit_health(request_t *r, const char *provider, sl_breaker_t b)
{
    sl_log_info("upstream %s: breaker %s (%s)", provider, sl_breaker_state_slug(b.state),
                sl_breaker_reason_slug(&b));
    if (!sl__events_on(r))
        return;
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_breaker_health(&ev, provider, &b, r->config->tz, sl_now_ms(), sl_wall_ms()));
}

/* ---- the request DB row ----------------------------------------------------------------- */

void
sl__record(request_t *r, sl_row_outcome_t outcome, int status, const sl_msg_t *msg)
{
    if (r->recorded)
        return;
    r->recorded = true;
    if (r->gw->recorder == NULL) {
        atomic_fetch_add(&r->gw->rows_dropped, 1);
        return;
    }
    /* The row and its strings in one allocation: their lengths first. */
    const char *client = sl__client_name(r);
    const char *provider =
        r->n_attempts > 0 && outcome == SL_ROW_SERVED ? sl__provider_of(r, r->cur)->name : NULL;
    size_t client_len = strlen(client), model_len = strlen(r->in.model);
    size_t provider_len = provider != NULL ? strlen(provider) : 0;
    size_t text = client_len + model_len + r->path.len + 3 + (provider != NULL ? provider_len + 1 : 0);
    for (size_t i = 0; i < r->n_attempts; i++) {
        const attempt_t *a = &r->attempts[i];
        text += strlen(r->config->providers[a->provider].name) + 1 +
                (a->model != NULL ? strlen(a->model) : 0) + 1;
    }
    sl_request_row_t *row = sl_request_row_new_packed(r->n_attempts, text);
    row->id = r->id;
    row->started_at_ms = r->started_wall_ms;
    row->client = sl_request_row_text(row, client, client_len);
    row->dialect =
        r->in.endpoint.dialect < SL_DIALECT_COUNT ? r->in.endpoint.dialect : SL_DIALECT_OPENAI_CHAT;
    row->model = sl_request_row_text(row, r->in.model, model_len);
    if (provider != NULL)
        row->provider = sl_request_row_text(row, provider, provider_len);
    row->path = sl_request_row_text(row, r->path.base, r->path.len);
    row->status = (uint32_t)status;
    row->outcome = outcome;
    if (msg != NULL)
        row->error = sl_row_msg_from(msg);
    row->duration_ms = sl_now_ms() - r->started_ms;
    row->ttfb_ms = r->out.ttfb_ms;
    row->ttft_ms = r->out.ttft_ms;
    const sl_usage_t *u = &r->rd.stream.usage;
    if (u->input || u->output || u->cache_read || u->cache_write) {
        row->has_usage = true;
        row->usage = (sl_row_usage_t){(uint64_t)u->input, (uint64_t)u->output, (uint64_t)u->cache_read,
                                      (uint64_t)u->cache_write, outcome == SL_ROW_ANSWERED_LOCALLY};
    }
    row->cost_micros = SL_ROW_ABSENT;
    if (row->has_usage && row->provider != NULL) {
        const sl_price_t *price =
            sl_price_for(r->config->pricing, r->config->n_pricing, r->cands[r->cur].model);
        if (price != NULL)
            row->cost_micros = sl_cost_micros(price, u);
    }
    for (size_t i = 0; i < r->n_attempts; i++) {
        const attempt_t *a = &r->attempts[i];
        sl_attempt_row_t *ar = &row->attempts[i];
        const char *name = r->config->providers[a->provider].name;
        ar->provider = sl_request_row_text(row, name, strlen(name));
        ar->model = sl_request_row_text(row, a->model != NULL ? a->model : "",
                                        a->model != NULL ? strlen(a->model) : 0);
        ar->outcome = a->skipped != SL_SKIP_NONE ? SL_HOP_SKIPPED : a->outcome;
        ar->status = (uint32_t)a->status;
        if (a->has_error) {
            sl_msg_t m = sl__failure_msg(r, a->error_code, ar->provider, a->status, a->error_detail);
            ar->error = sl_row_msg_from(&m);
            sl_msg_free(&m);
        }
        ar->has_reason = a->has_reason;
        ar->reason = a->reason;
        ar->hedge = a->hedge;
        ar->ms = a->ms;
        ar->pause_ms = a->pause_ms >= 0 ? a->pause_ms : SL_ROW_ABSENT;
        ar->retry = a->retry;
        ar->backoff_ms = a->backoff_ms >= 0 ? a->backoff_ms : SL_ROW_ABSENT;
        ar->skipped = a->skipped;
    }
    if (!sl_recorder_submit(r->gw->recorder, row)) {
        sl_log_debug("request %llu: the request DB queue is full, row dropped", (unsigned long long)r->id);
        if (sl__events_on(r)) {
            sl_proto_event_t ev;
            sl__emit(r, sl_bus_rows_dropped(&ev, sl_wall_ms(), 1));
        }
    }
}

/* ---- waiting on paused and busy upstreams (behaviour.md §6) -------------------------------- */

void
sl__emit_throttle(request_t *r, const char *provider, const sl_throttle_t *t)
{
    sl_throttle_state_t kind = sl_throttle_kind(t);
    sl_log_info("upstream %s: %s", provider,
                kind == SL_THROTTLE_FREE ? "rate limit over" : sl_throttle_kind_slug(kind));
    if (!sl__events_on(r))
        return;
    sl_bus_throttle_facts_t f = {
        .t = t,
        .t_until_ms = sl__wall_of(sl_now_ms(), sl_wall_ms(), sl_throttle_shown_until_ms(t)),
        .limits = SL_LIMIT_OK,
        .tz = r->config->tz,
    };
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_throttle_changed(&ev, sl_wall_ms(), provider, sl_bus_throttle_view(provider, &f)));
}

/*
 * An upstream's usage limits started or stopped holding it back (§7): its
 * Throttle shows window_full / period_used_up until the room comes back;
 * then whatever its 429 state is (t).
 */
void
sl__emit_limit_throttle(request_t *r, const char *provider, sl_limit_verdict_t v, int64_t until_wall,
                        const sl_limit_t *limit, const sl_throttle_t *t)
{
    if (v == SL_LIMIT_OK) {
        sl_log_info("upstream %s: usage limits have room again", provider);
        if (sl__events_on(r))
            sl__emit_throttle(r, provider, t);
        return;
    }
    char text[SL_LIMIT_TEXT_MAX], until[64];
    sl_limit_describe(limit, text, sizeof(text));
    sl_text_local_time(r->config->tz, until_wall, until, sizeof(until));
    bool full = v == SL_LIMIT_WINDOW_FULL;
    sl_log_info("upstream %s: %s (%s) until %s", provider, full ? "window full" : "period used up", text,
                until);
    if (!sl__events_on(r))
        return;
    sl_bus_throttle_facts_t f = {
        .limits = v, .limit = limit, .limits_until_ms = until_wall, .tz = r->config->tz};
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_throttle_changed(&ev, sl_wall_ms(), provider, sl_bus_throttle_view(provider, &f)));
}

/* ---- metrics ------------------------------------------------------------------------------- */

uint16_t
sl__metrics_route(const request_t *r)
{
    sl_metrics_t *m = r->gw->metrics;
    /* A request refused before routing (its key, its body, no route for its model) has route "none". */
    if (!r->routed)
        return sl_metrics_route_slot(m, "none");
    return r->route < r->config->n_routes ? sl_metrics_route_slot(m, r->config->routes[r->route].match)
                                          : sl_metrics_models_route_slot(m);
}

void
sl__count_request(request_t *r, sl_row_outcome_t outcome, int status, bool stream_error)
{
    sl_metrics_worker_t *w = r->io != NULL ? r->io->metrics : NULL;
    if (w == NULL || r->in.endpoint.op == SL_OP_LIST_MODELS)
        return;
    sl_metrics_t *m = r->gw->metrics;
    uint16_t route = sl__metrics_route(r);
    sl_rescue_facts_t facts = {
        .trouble = r->m.trouble,
        .outcome = outcome,
        .status = status,
        .stream_error = stream_error,
        .has_failure = r->m.has_failure,
        .failure = r->m.failure,
    };
    sl_metrics_request_t mr = {
        .dialect =
            r->in.endpoint.dialect < SL_DIALECT_COUNT ? r->in.endpoint.dialect : SL_DIALECT_OPENAI_CHAT,
        .route = route,
        .status = status,
        .aborted = outcome == SL_ROW_CANCELLED,
        .verdict = sl_rescue_verdict(&facts),
        .trouble = r->m.trouble,
        .duration_us = (sl_now_ns() - r->m.arrival_ns) / 1000,
    };
    sl_metrics_request(w, &mr);
    if (outcome != SL_ROW_SERVED || r->n_attempts == 0)
        return;
    size_t provider = r->cands[r->cur].provider;
    uint16_t slot = sl__metrics_provider(r, provider);
    if (r->out.ttft_ms != SL_ROW_ABSENT)
        sl_metrics_ttft(w, slot, r->out.ttft_ms * 1000);
    if (r->m.wait_gate != SL_GATE_COUNT) {
        int64_t waited_ms = 0;
        for (size_t i = 0; i < r->n_attempts; i++)
            waited_ms += r->attempts[i].pause_ms > 0 ? r->attempts[i].pause_ms : 0;
        sl_metrics_waited(w, r->m.wait_gate, waited_ms * 1000);
    } else if (r->m.overhead_ns >= 0 && r->n_attempts == 1) {
        sl_metrics_overhead(w, r->m.overhead_ns);
    }
    const sl_usage_t *u = &r->rd.stream.usage;
    if (u->input || u->output || u->cache_read || u->cache_write) {
        const char *model = r->cands[r->cur].model != NULL ? r->cands[r->cur].model : r->in.model;
        uint64_t tokens[4] = {(uint64_t)u->input, (uint64_t)u->output, (uint64_t)u->cache_read,
                              (uint64_t)u->cache_write};
        const sl_price_t *price = sl_price_for(r->config->pricing, r->config->n_pricing, model);
        sl_metrics_usage(w, sl_metrics_model_slot(m, slot, model), tokens,
                         price != NULL ? sl_cost_micros(price, u) : 0);
    }
}

/* ---- traces (observability.md) ------------------------------------------------------------- */

/* A thread's random ids: splitmix64 over a state drawn from the kernel once per thread. */
static _Thread_local uint64_t id_state;

static uint64_t
next_random(void)
{
    if (id_state == 0 && getrandom(&id_state, sizeof(id_state), 0) != (ssize_t)sizeof(id_state))
        id_state = (uint64_t)sl_now_ns() ^ (uint64_t)(uintptr_t)&id_state;
    uint64_t z = (id_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* n random bytes (8 or 16), never all zero (W3C: an invalid id). */
static void
random_id(uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = next_random();
        memcpy(out + i, &v, 8);
    }
    out[n - 1] |= 1;
}

static int64_t
wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A monotonic time of the request's as Unix time. */
static int64_t
unix_of(const request_t *r, int64_t mono_ns)
{
    return r->trace.arrival_unix_ns + (mono_ns - r->m.arrival_ns);
}

void
sl__trace_begin(request_t *r)
{
    if (r->config->otlp_endpoint == NULL || r->req == NULL)
        return;
    r->trace.on = true;
    sl_trace_parent_t parent;
    ssize_t at = h2o_find_header_by_str(&r->req->headers, H2O_STRLIT("traceparent"), -1);
    if (at >= 0 && sl_traceparent_parse(r->req->headers.entries[at].value.base,
                                        r->req->headers.entries[at].value.len, &parent)) {
        /* The client's sampling decision stands: parent-based, as OpenTelemetry SDKs sample by default. */
        memcpy(r->trace.trace_id, parent.trace_id, 16);
        memcpy(r->trace.parent_span_id, parent.span_id, 8);
        r->trace.has_parent = true;
        r->trace.sampled = parent.sampled;
    } else {
        random_id(r->trace.trace_id, 16);
        r->trace.sampled = sl_trace_ratio_sampled(r->trace.trace_id, r->config->trace_sample_ppm);
    }
    random_id(r->trace.span_id, 8);
    if (r->trace.sampled)
        r->trace.arrival_unix_ns = wall_ns() - (sl_now_ns() - r->m.arrival_ns);
}

void
sl__trace_event(request_t *r, sl_span_event_kind_t kind, int64_t value_ms)
{
    if (r->trace.sampled)
        sl_span_add_event(r->trace.events, &r->trace.n_events, kind, unix_of(r, sl_now_ns()), value_ms);
}

bool
sl__trace_hop_header(const request_t *r, char *out, size_t size)
{
    if (!r->trace.on || r->attempt >= r->n_attempts)
        return false;
    static const char name[] = "traceparent: ";
    size_t n = sizeof(name) - 1;
    if (size < n + SL_TRACEPARENT_LEN + 3)
        return false;
    uint8_t span[8];
    sl_trace_attempt_span_id(r->trace.span_id, r->attempt, span);
    memcpy(out, name, n);
    sl_traceparent_format(r->trace.trace_id, span, r->trace.sampled, out + n);
    memcpy(out + n + SL_TRACEPARENT_LEN, "\r\n", 3);
    return true;
}

/* src into dst[0..size), cut when longer (the encoder mends a UTF-8 sequence the cut splits). */
static void
copy_cut(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* gen_ai.operation.name of what the client asked. */
static const char *
operation_name(const sl_endpoint_t *e)
{
    if (e->op == SL_OP_COUNT_TOKENS)
        return "count_tokens";
    return e->dialect == SL_DIALECT_GEMINI ? "generate_content" : "chat";
}

/* gen_ai.provider.name of an upstream's protocol. */
static const char *
genai_provider_name(sl_dialect_t protocol)
{
    switch (protocol) {
    case SL_DIALECT_ANTHROPIC:
        return "anthropic";
    case SL_DIALECT_GEMINI:
        return "gcp.gemini";
    case SL_DIALECT_BEDROCK:
        return "aws.bedrock";
    default:
        return "openai";
    }
}

static void
fill_attempt_span(const request_t *r, size_t index, sl_attempt_span_t *s)
{
    const attempt_t *a = &r->attempts[index];
    const sl_provider_t *p = &r->config->providers[a->provider];
    sl_trace_attempt_span_id(r->trace.span_id, index, s->span_id);
    s->start_ns = unix_of(r, a->started_ns);
    s->end_ns = unix_of(r, a->ended_ns != 0 ? a->ended_ns : sl_now_ns());
    s->genai_provider = genai_provider_name(p->protocol);
    copy_cut(s->provider, sizeof(s->provider), p->name);
    copy_cut(s->model, sizeof(s->model), a->model != NULL ? a->model : "");
    sl_base_url_t url;
    if (sl_base_url_parse(p->base_url, &url) == 0) {
        size_t n = url.host_len < sizeof(s->server_address) ? url.host_len : sizeof(s->server_address) - 1;
        memcpy(s->server_address, url.host, n);
        s->server_address[n] = '\0';
        s->server_port = url.port;
    }
    s->status = a->status;
    s->retry = a->retry;
    s->pause_ms = a->pause_ms;
    s->outcome = sl_attempt_label_slug(a->label);
    s->reason = a->has_reason ? sl_step_reason_slug(a->reason) : NULL;
    if (a->has_error)
        snprintf(s->error_type, sizeof(s->error_type), "%s", sl_code_slug(a->error_code));
}

/* Hops that went upstream (or were meant to): not a skipped candidate, not a locally estimated answer. */
static bool
is_hop(const attempt_t *a)
{
    return a->skipped == SL_SKIP_NONE && a->outcome != SL_HOP_ESTIMATED;
}

void
sl__trace_end(request_t *r, sl_row_outcome_t outcome, int status, const sl_msg_t *msg)
{
    if (!r->trace.sampled || r->in.endpoint.op == SL_OP_LIST_MODELS)
        return;
    size_t hops = 0;
    for (size_t i = 0; i < r->n_attempts; i++)
        hops += is_hop(&r->attempts[i]);
    sl_request_span_t *s = sl_request_span_new(hops);
    memcpy(s->trace_id, r->trace.trace_id, 16);
    memcpy(s->span_id, r->trace.span_id, 8);
    memcpy(s->parent_span_id, r->trace.parent_span_id, 8);
    s->has_parent = r->trace.has_parent;
    s->start_ns = r->trace.arrival_unix_ns;
    s->end_ns = unix_of(r, sl_now_ns());
    s->request_id = r->id;
    s->operation = operation_name(&r->in.endpoint);
    copy_cut(s->request_model, sizeof(s->request_model), r->in.model);
    if (outcome == SL_ROW_SERVED && r->n_attempts > 0) {
        const sl_candidate_t *c = &r->cands[r->cur];
        copy_cut(s->response_model, sizeof(s->response_model), c->model != NULL ? c->model : r->in.model);
        s->genai_provider = genai_provider_name(r->config->providers[c->provider].protocol);
        copy_cut(s->finish_reason, sizeof(s->finish_reason), r->rd.stream.finish_reason);
    }
    copy_cut(s->client, sizeof(s->client), sl__client_name(r));
    s->stream = r->in.stream;
    s->status = status;
    const sl_usage_t *u = &r->rd.stream.usage;
    if (u->input || u->output || u->cache_read || u->cache_write) {
        s->has_usage = true;
        s->input_tokens = u->input + u->cache_read + u->cache_write; /* GenAI counts cached input as input */
        s->output_tokens = u->output;
    }
    if (msg != NULL)
        snprintf(s->error_type, sizeof(s->error_type), "%s", sl_code_slug(msg->code));
    else if (outcome == SL_ROW_CANCELLED)
        snprintf(s->error_type, sizeof(s->error_type), "cancelled");
    else if (status >= 400)
        snprintf(s->error_type, sizeof(s->error_type), "%d", status);
    s->wait_gate = r->m.wait_gate != SL_GATE_COUNT ? sl_gate_slug(r->m.wait_gate) : NULL;
    memcpy(s->events, r->trace.events, r->trace.n_events * sizeof(s->events[0]));
    s->n_events = r->trace.n_events;
    for (size_t i = 0, k = 0; i < r->n_attempts; i++) {
        if (is_hop(&r->attempts[i]))
            fill_attempt_span(r, i, &s->attempts[k++]);
    }
    sl_tracer_submit(r->gw->tracer, s);
}
