/*
 * What a request tells the world: its events on the bus (RequestStarted … RequestFinished,
 * AttemptView, HealthChanged, ThrottleChanged) and its row in the request DB (behaviour.md §10).
 */
#include "req.h"

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

void
sl__emit_started(request_t *r)
{
    if (!sl__events_on(r) || r->req == NULL)
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
    };
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_request_started(&ev, r->started_wall_ms, &st));
}

void
sl__emit_routed(request_t *r, size_t route, sl_affinity_effect_t effect)
{
    if (!sl__events_on(r))
        return;
    const char *names[r->n_cands + 1];
    for (size_t i = 0; i < r->n_cands; i++)
        names[i] = sl__provider_of(r, i)->name;
    const char *route_name = route == SL_ROUTE_BY_MODELS ? "models" : r->config->routes[route].match;
    sl_proto_affinity_t affinity =
        effect == SL_AFFINITY_SEALED ? SL_PROTO_AFFINITY_SEALED : SL_PROTO_AFFINITY_STICKY;
    bool has_affinity = effect == SL_AFFINITY_STICKY || effect == SL_AFFINITY_SEALED;
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_request_routed(&ev, sl_wall_ms(), r->id, route_name, names, r->n_cands,
                                      has_affinity ? &affinity : NULL));
}

/*
 * A hop's error as a message (AttemptView.error, the attempt's row): its one
 * detail fills the template's one placeholder besides {provider} ({status},
 * {secs}, {reason}, ...). name is room for that placeholder's name, which
 * must outlive the message (sl_msg_make keeps names by pointer).
 */
static sl_msg_t
hop_msg(sl_code_t code, const char *provider, const char *detail, char name[32])
{
    if (!sl_msg_template_other(sl_code_template(code), "provider", name, 32))
        snprintf(name, 32, "detail");
    return sl_msg_make(code, "provider", provider, name, detail, NULL);
}

void
sl__emit_attempt(request_t *r, const attempt_t *a)
{
    if (!sl__events_on(r))
        return;
    sl_msg_t msg = {0};
    char name[32];
    if (a->has_error)
        msg = hop_msg(a->error_code, r->config->providers[a->provider].name, a->error_detail, name);
    bool skipped = a->skipped != SL_ROW_SKIP_NONE;
    sl_bus_attempt_t view = {
        .provider = r->config->providers[a->provider].name,
        .model = a->model,
        /* The row enums list the protocol's values in the same order (ServeSkip without "none"). */
        .outcome = skipped ? SL_PROTO_OUTCOME_SKIPPED : (sl_proto_outcome_t)a->outcome,
        .status = a->status,
        .error = a->has_error ? &msg : NULL,
        .ms = a->ms,
        .pause_ms = a->pause_ms >= 0 ? a->pause_ms : SL_BUS_ABSENT,
        .retry = a->retry > 0 ? (int64_t)a->retry : SL_BUS_ABSENT,
        .backoff_ms = a->backoff_ms >= 0 ? a->backoff_ms : SL_BUS_ABSENT,
        .skip = skipped ? (sl_proto_serve_skip_t)(a->skipped - 1) : SL_PROTO_SERVE_SKIP_DISABLED,
    };
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_attempt(&ev, sl_wall_ms(), r->id, &view));
    if (a->has_error)
        sl_msg_free(&msg);
}

/* The first content reached the client (or, for a whole answer, its head did). */
void
sl__first_token(request_t *r)
{
    if (r->first_token_seen)
        return;
    r->first_token_seen = true;
    r->ttft_ms = sl_now_ms() - r->started_ms;
    if (sl__events_on(r)) {
        sl_proto_event_t ev;
        sl__emit(r, sl_bus_request_first_token(&ev, sl_wall_ms(), r->id, r->ttft_ms));
    }
}

void
sl__emit_end(request_t *r, sl_row_outcome_t outcome, int status, sl_code_t code, const char *text)
{
    if (!sl__events_on(r))
        return;
    sl_proto_event_t ev;
    int64_t duration = sl_now_ms() - r->started_ms;
    if (outcome == SL_ROW_CANCELLED) {
        sl__emit(r, sl_bus_request_cancelled(&ev, sl_wall_ms(), r->id, duration));
    } else if (r->gateway_error) {
        sl_msg_t msg = sl_msg_make(code, NULL);
        if (text != NULL) {
            free(msg.text);
            msg.text = sl_xstrdup(text);
        }
        sl__emit(
            r, sl_bus_request_failed(&ev, sl_wall_ms(), r->id, sl_bus_failure_source(code), &msg, duration));
        sl_msg_free(&msg);
    } else {
        const sl_usage_t *u = &r->stream.usage;
        sl_proto_usage_t usage = {(uint64_t)u->input, (uint64_t)u->output, (uint64_t)u->cache_read,
                                  (uint64_t)u->cache_write, outcome == SL_ROW_ANSWERED_LOCALLY};
        bool has_usage = u->input || u->output || u->cache_read || u->cache_write;
        /* What is still in rx goes out with the final send that follows. */
        sl__emit(r, sl_bus_request_finished(&ev, sl_wall_ms(), r->id, status, r->bytes_out + r->rx->size,
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
    int64_t until = SL_BUS_ABSENT;
    if (b.state != SL_BREAKER_CLOSED && b.until_ms != SL_BREAKER_UNTIL_CLEARED)
        until = sl_wall_ms() + (b.until_ms - sl_now_ms());
    sl_code_t code = SL_CODE_GW_BREAKER_RECOVERED;
    const char *slug = sl_breaker_reason_slug(&b);
    if (slug != NULL)
        sl_code_from_slug(slug, &code);
    char count[16], until_text[64] = "it is cleared";
    snprintf(count, sizeof(count), "%u", b.failures);
    if (until >= 0)
        sl_text_local_time(until, until_text, sizeof(until_text));
    sl_msg_t reason = sl_msg_make(code, "provider", provider, "count", count, "until", until_text, NULL);
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_health_changed(&ev, sl_wall_ms(), provider, b.state, until, &reason));
    sl_msg_free(&reason);
}

/* ---- the request DB row ----------------------------------------------------------------- */

static void
fill_row_msg(sl_row_msg_t *m, sl_code_t code, const char *provider, const char *detail)
{
    char name[32];
    sl_msg_t msg = hop_msg(code, provider, detail, name);
    *m = sl_row_msg_from(&msg);
    sl_msg_free(&msg);
}

void
sl__record(request_t *r, sl_row_outcome_t outcome, int status, bool has_error, sl_code_t code,
           const char *detail)
{
    if (r->recorded)
        return;
    r->recorded = true;
    if (r->gw->recorder == NULL) {
        atomic_fetch_add(&r->gw->rows_dropped, 1);
        return;
    }
    sl_request_row_t *row = sl_request_row_new(r->n_attempts);
    row->id = r->id;
    row->started_at_ms = r->started_wall_ms;
    row->client = sl_xstrdup(sl__client_name(r));
    row->dialect =
        r->in.endpoint.dialect < SL_DIALECT_COUNT ? r->in.endpoint.dialect : SL_DIALECT_OPENAI_CHAT;
    row->model = sl_xstrdup(r->in.model);
    if (r->n_attempts > 0 && outcome == SL_ROW_SERVED)
        row->provider = sl_xstrdup(r->config->providers[r->attempts[r->n_attempts - 1].provider].name);
    row->path = sl_xstrndup(r->path.base, r->path.len);
    row->status = (uint32_t)status;
    row->outcome = outcome;
    if (has_error)
        fill_row_msg(&row->error, code, row->provider != NULL ? row->provider : "", detail);
    row->duration_ms = sl_now_ms() - r->started_ms;
    row->ttfb_ms = r->ttfb_ms;
    row->ttft_ms = r->ttft_ms;
    const sl_usage_t *u = &r->stream.usage;
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
        ar->provider = sl_xstrdup(r->config->providers[a->provider].name);
        ar->model = sl_xstrdup(a->model != NULL ? a->model : "");
        ar->outcome = a->skipped != SL_ROW_SKIP_NONE ? SL_ROW_HOP_SKIPPED : a->outcome;
        ar->status = (uint32_t)a->status;
        if (a->has_error)
            fill_row_msg(&ar->error, a->error_code, ar->provider, a->error_detail);
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
    };
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_throttle_changed(&ev, sl_wall_ms(), provider, sl_bus_throttle_view(provider, &f)));
}

/* What a set's limits show for an upstream (ThrottleChanged): a full window or a used-up period, else
 * nothing. */
sl_limit_verdict_t
sl__shown_verdict(sl_limit_verdict_t v)
{
    return v == SL_LIMIT_WINDOW_FULL || v == SL_LIMIT_PERIOD_USED_UP ? v : SL_LIMIT_OK;
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
    sl_text_local_time(until_wall, until, sizeof(until));
    bool full = v == SL_LIMIT_WINDOW_FULL;
    sl_log_info("upstream %s: %s (%s) until %s", provider, full ? "window full" : "period used up", text,
                until);
    if (!sl__events_on(r))
        return;
    sl_bus_throttle_facts_t f = {.limits = v, .limit = limit, .limits_until_ms = until_wall};
    sl_proto_event_t ev;
    sl__emit(r, sl_bus_throttle_changed(&ev, sl_wall_ms(), provider, sl_bus_throttle_view(provider, &f)));
}
