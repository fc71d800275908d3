/*
 * Text output, the pieces and the key=value lines: the small texts (local
 * clock times, durations, dollars, limits), an event's line (its time, its
 * kind and its salient fields as key=value, quoted when not one plain
 * word) and an in-flight request's line, which ends with its last event's
 * fields. The tables and the reply lines (cli_replies.c) are made of these
 * small texts.
 */
#include "cli_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- small texts --------------------------------------------------------------------------------- */

void
sl_cli_clock(uint64_t ms, char out[16])
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (localtime_r(&t, &tm) == NULL) {
        snprintf(out, 16, "??:??:??.%03u", (unsigned)(ms % 1000));
        return;
    }
    snprintf(out, 16, "%02d:%02d:%02d.%03u", tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(ms % 1000));
}

void
sl__cli_date_time(uint64_t ms, char out[32])
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (localtime_r(&t, &tm) == NULL || strftime(out, 32, "%Y-%m-%d %H:%M:%S", &tm) == 0)
        snprintf(out, 32, "@%llu", (unsigned long long)ms);
}

void
sl_cli_duration_text(uint64_t ms, char out[32])
{
    if (ms < 1000)
        snprintf(out, 32, "%llums", (unsigned long long)ms);
    else
        snprintf(out, 32, "%llu.%03llus", (unsigned long long)(ms / 1000), (unsigned long long)(ms % 1000));
}

void
sl_cli_usd_text(uint64_t micros, char out[32])
{
    char frac[8];
    snprintf(frac, sizeof frac, "%06llu", (unsigned long long)(micros % 1000000));
    /* Cents always; smaller fractions only when there are any. */
    size_t keep = strlen(frac);
    while (keep > 2 && frac[keep - 1] == '0')
        keep--;
    frac[keep] = '\0';
    snprintf(out, 32, "$%llu.%s", (unsigned long long)(micros / 1000000), frac);
}

void
sl__cli_tokens_text(const sl_proto_usage_t *u, char out[48])
{
    snprintf(out, 48, "%s%llu/%llu", u->estimated ? "~" : "", (unsigned long long)u->input,
             (unsigned long long)u->output);
}

const char *
sl__cli_health_text(const sl_proto_provider_view_t *v)
{
    return v->disabled ? "disabled" : sl_proto_health_state_slug(v->health);
}

/* "minute", "5 min", "hour", "2 h", "day", "3 days". */
static void
span_text(sl_proto_period_t per, uint32_t every, char *out, size_t size)
{
    const char *slug = sl_proto_period_slug(per);
    if (slug == NULL)
        slug = "period";
    if (every <= 1)
        snprintf(out, size, "%s", slug);
    else if (per == SL_PROTO_PERIOD_MINUTE)
        snprintf(out, size, "%u min", (unsigned)every);
    else if (per == SL_PROTO_PERIOD_HOUR)
        snprintf(out, size, "%u h", (unsigned)every);
    else
        snprintf(out, size, "%u %ss", (unsigned)every, slug);
}

/* The limit, with used/ before its amount when used != NULL. */
static void
limit_text(const sl_proto_limit_t *l, const uint64_t *used, char *out, size_t size)
{
    char span[32];
    span_text(l->per, l->every, span, sizeof span);
    if (l->has_cost_micros) {
        char amount[32], spent[32];
        sl_cli_usd_text(l->cost_micros, amount);
        if (used != NULL) {
            sl_cli_usd_text(*used, spent);
            snprintf(out, size, "%s/%s per %s", spent, amount, span);
        } else {
            snprintf(out, size, "%s per %s", amount, span);
        }
        return;
    }
    const char *unit = l->has_tokens ? "tokens" : "requests";
    uint64_t amount = l->has_tokens ? l->tokens : l->requests;
    if (used != NULL)
        snprintf(out, size, "%llu/%llu %s per %s", (unsigned long long)*used, (unsigned long long)amount,
                 unit, span);
    else
        snprintf(out, size, "%llu %s per %s", (unsigned long long)amount, unit, span);
}

void
sl_cli_limit_text(const sl_proto_limit_t *limit, char *out, size_t size)
{
    limit_text(limit, NULL, out, size);
}

void
sl__cli_limits_append(sl_strbuf_t *b, const sl_proto_limit_t *limits, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char text[128];
        sl_cli_limit_text(&limits[i], text, sizeof text);
        sl_strbuf_appendf(b, "%s%s", i > 0 ? ", " : "", text);
    }
}

void
sl__cli_limit_view_text(const sl_proto_limit_view_t *v, char *out, size_t size)
{
    sl_proto_limit_t l = {
        .per = v->per,
        .every = v->every,
        .has_requests = v->has_requests,
        .requests = v->requests,
        .has_tokens = v->has_tokens,
        .tokens = v->tokens,
        .has_cost_micros = v->has_cost_micros,
        .cost_micros = v->cost_micros,
    };
    limit_text(&l, &v->used, out, size);
}

/* ---- key=value lines ----------------------------------------------------------------------------- */

/* A value as is when it is one plain word, else in double quotes with \" \\ \n \t and \xHH escapes. */
static void
put_value(sl_strbuf_t *b, const char *v)
{
    bool plain = *v != '\0';
    for (const unsigned char *c = (const unsigned char *)v; *c && plain; c++)
        if (*c <= ' ' || *c == '"' || *c == '\\' || *c == 0x7f)
            plain = false;
    if (plain) {
        sl_strbuf_append(b, v, strlen(v));
        return;
    }
    sl_strbuf_append(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        if (*c == '"' || *c == '\\')
            sl_strbuf_appendf(b, "\\%c", *c);
        else if (*c == '\n')
            sl_strbuf_append(b, "\\n", 2);
        else if (*c == '\t')
            sl_strbuf_append(b, "\\t", 2);
        else if (*c < ' ' || *c == 0x7f)
            sl_strbuf_appendf(b, "\\x%02x", *c);
        else
            sl_strbuf_append(b, (const char *)c, 1);
    }
    sl_strbuf_append(b, "\"", 1);
}

static void
kv(sl_strbuf_t *b, const char *key, const char *value)
{
    sl_strbuf_appendf(b, " %s=", key);
    put_value(b, value != NULL ? value : "");
}

static void
kv_u(sl_strbuf_t *b, const char *key, uint64_t value)
{
    sl_strbuf_appendf(b, " %s=%llu", key, (unsigned long long)value);
}

static void
kv_ms(sl_strbuf_t *b, const char *key, uint64_t ms)
{
    char text[32];
    sl_cli_duration_text(ms, text);
    sl_strbuf_appendf(b, " %s=%s", key, text);
}

static void
kv_clock(sl_strbuf_t *b, const char *key, uint64_t ms)
{
    char text[16];
    sl_cli_clock(ms, text);
    sl_strbuf_appendf(b, " %s=%s", key, text);
}

/* Takes *joined (a comma-separated list, finished and freed here) as the value; "-" when empty. */
static void
kv_joined(sl_strbuf_t *b, const char *key, sl_strbuf_t *joined)
{
    char *s = sl_strbuf_finish(joined);
    kv(b, key, *s ? s : "-");
    free(s);
}

static void
kv_list(sl_strbuf_t *b, const char *key, char *const *items, size_t n)
{
    sl_strbuf_t joined = {0};
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            sl_strbuf_append(&joined, ",", 1);
        sl_strbuf_append(&joined, items[i], strlen(items[i]));
    }
    kv_joined(b, key, &joined);
}

static void
kv_usage(sl_strbuf_t *b, const sl_proto_usage_t *u)
{
    char tokens[48];
    sl__cli_tokens_text(u, tokens);
    sl_strbuf_appendf(b, " tokens=%s", tokens);
    if (u->cache_read != 0 || u->cache_write != 0)
        sl_strbuf_appendf(b, " cache=%llu/%llu", (unsigned long long)u->cache_read,
                          (unsigned long long)u->cache_write);
}

static void
kv_limits(sl_strbuf_t *b, const char *key, const sl_proto_limit_t *limits, size_t n)
{
    sl_strbuf_appendf(b, " %s=[", key);
    sl__cli_limits_append(b, limits, n);
    sl_strbuf_append(b, "]", 1);
}

static void
throttle_fields(sl_strbuf_t *b, const sl_proto_throttle_t *t)
{
    kv(b, "kind", sl_proto_throttle_kind_slug(t->kind));
    if (t->has_until_ms)
        kv_clock(b, "until", t->until_ms);
    kv_u(b, "consecutive", t->consecutive);
    kv(b, "reason", t->reason.code);
}

static void
attempt_fields(sl_strbuf_t *b, const sl_proto_attempt_view_t *v)
{
    kv(b, "provider", v->provider);
    if (v->model != NULL)
        kv(b, "model", v->model);
    kv(b, "outcome", sl_proto_outcome_slug(v->outcome));
    if (v->has_hedge && v->hedge)
        kv(b, "hedge", "yes");
    if (v->has_status)
        kv_u(b, "status", v->status);
    if (v->error != NULL)
        kv(b, "code", v->error->code);
    if (v->has_skipped)
        kv(b, "skipped", sl_proto_serve_skip_slug(v->skipped));
    if (v->has_reason)
        kv(b, "reason", sl_proto_step_reason_slug(v->reason));
    kv_ms(b, "took", v->ms);
    if (v->has_retry)
        kv_u(b, "retry", v->retry);
    if (v->has_backoff_ms)
        kv_ms(b, "backoff", v->backoff_ms);
    if (v->has_pause_ms)
        kv_ms(b, "queued", v->pause_ms);
}

static void
provider_view_fields(sl_strbuf_t *b, const sl_proto_provider_view_t *v)
{
    kv(b, "provider", v->name);
    kv(b, "health", sl__cli_health_text(v));
    if (v->throttle != NULL) {
        kv(b, "throttle", sl_proto_throttle_kind_slug(v->throttle->kind));
        if (v->throttle->has_until_ms)
            kv_clock(b, "until", v->throttle->until_ms);
    }
    if (v->has_max_concurrent)
        sl_strbuf_appendf(b, " in_flight=%u/%u", (unsigned)v->in_flight, (unsigned)v->max_concurrent);
    else
        kv_u(b, "in_flight", v->in_flight);
    kv_u(b, "queued", v->queued);
    if (v->has_cluster_in_flight)
        kv_u(b, "cluster_in_flight", v->cluster_in_flight);
    if (v->has_cluster_queued)
        kv_u(b, "cluster_queued", v->cluster_queued);
}

bool
sl__cli_event_id(const sl_proto_event_t *ev, uint64_t *id)
{
    switch (ev->kind) {
#define ID_OF(K, f)                                                                                          \
    case K:                                                                                                  \
        *id = ev->f.id;                                                                                      \
        return true;
        ID_OF(SL_PROTO_EVENT_REQUEST_STARTED, request_started)
        ID_OF(SL_PROTO_EVENT_REQUEST_ROUTED, request_routed)
        ID_OF(SL_PROTO_EVENT_ATTEMPT, attempt)
        ID_OF(SL_PROTO_EVENT_REQUEST_HEADERS, request_headers)
        ID_OF(SL_PROTO_EVENT_REQUEST_FIRST_TOKEN, request_first_token)
        ID_OF(SL_PROTO_EVENT_REQUEST_QUEUED, request_queued)
        ID_OF(SL_PROTO_EVENT_REQUEST_DEQUEUED, request_dequeued)
        ID_OF(SL_PROTO_EVENT_REQUEST_RETRYING, request_retrying)
        ID_OF(SL_PROTO_EVENT_REQUEST_FINISHED, request_finished)
        ID_OF(SL_PROTO_EVENT_REQUEST_FAILED, request_failed)
        ID_OF(SL_PROTO_EVENT_REQUEST_CANCELLED, request_cancelled)
        ID_OF(SL_PROTO_EVENT_SECRETS_FOUND, secrets_found)
        ID_OF(SL_PROTO_EVENT_CONTENT_MATCHED, content_matched)
#undef ID_OF
    default:
        return false;
    }
}

/* The event's kind as its slug; "?" for a kind the schema has no slug for. */
static const char *
kind_slug(const sl_proto_event_t *ev)
{
    const char *slug = sl_proto_event_kind_slug((int)ev->kind);
    return slug != NULL ? slug : "?";
}

/* Every event starts with at_ms (the schema's common field), whatever its kind. */
static uint64_t
event_at(const sl_proto_event_t *ev)
{
    return ev->request_started.at_ms;
}

/* The event's salient fields, each " key=value"; with_id false leaves a request event's id out. */
static void
event_fields(const sl_proto_event_t *ev, bool with_id, sl_strbuf_t *b)
{
    uint64_t id;
    if (with_id && sl__cli_event_id(ev, &id))
        kv_u(b, "id", id);
    switch (ev->kind) {
    case SL_PROTO_EVENT_REQUEST_STARTED: {
        const sl_proto_request_started_t *e = &ev->request_started;
        kv(b, "client", e->client);
        if (e->key_masked != NULL)
            kv(b, "key", e->key_masked);
        kv(b, "dialect", sl_proto_dialect_slug(e->dialect));
        kv(b, "model", e->model);
        kv(b, "stream", e->stream ? "yes" : "no");
        kv(b, "path", e->path);
        if (e->session != NULL)
            kv(b, "session", e->session);
        if (e->instance != NULL)
            kv(b, "instance", e->instance);
        break;
    }
    case SL_PROTO_EVENT_REQUEST_ROUTED: {
        const sl_proto_request_routed_t *e = &ev->request_routed;
        kv(b, "route", e->route);
        kv_list(b, "candidates", e->candidates, e->candidates_len);
        if (e->has_affinity)
            kv(b, "affinity", sl_proto_affinity_slug(e->affinity));
        break;
    }
    case SL_PROTO_EVENT_ATTEMPT:
        attempt_fields(b, &ev->attempt.view);
        break;
    case SL_PROTO_EVENT_REQUEST_HEADERS:
        kv_u(b, "status", ev->request_headers.status);
        kv_ms(b, "ttfb", ev->request_headers.ttfb_ms);
        break;
    case SL_PROTO_EVENT_REQUEST_FIRST_TOKEN:
        kv_ms(b, "ttft", ev->request_first_token.ttft_ms);
        break;
    case SL_PROTO_EVENT_REQUEST_QUEUED: {
        const sl_proto_request_queued_t *e = &ev->request_queued;
        kv_list(b, "upstreams", e->upstreams, e->upstreams_len);
        sl_strbuf_t gates = {0};
        for (size_t i = 0; i < e->gates_len; i++) {
            const sl_proto_gate_t *g = &e->gates[i];
            sl_strbuf_appendf(&gates, "%s%s:%s", i > 0 ? "," : "", g->upstream,
                              sl_proto_serve_skip_slug(g->skip));
            if (g->has_until_ms) {
                char clock[16];
                sl_cli_clock(g->until_ms, clock);
                sl_strbuf_appendf(&gates, "@%s", clock);
            }
        }
        kv_joined(b, "gates", &gates);
        kv_clock(b, "until", e->until_ms);
        break;
    }
    case SL_PROTO_EVENT_REQUEST_DEQUEUED:
        if (ev->request_dequeued.upstream != NULL)
            kv(b, "upstream", ev->request_dequeued.upstream);
        break;
    case SL_PROTO_EVENT_REQUEST_RETRYING: {
        const sl_proto_request_retrying_t *e = &ev->request_retrying;
        kv_u(b, "attempt", e->attempt);
        kv_list(b, "upstreams", e->upstreams, e->upstreams_len);
        kv_clock(b, "retry_at", e->retry_at_ms);
        kv_clock(b, "until", e->until_ms);
        kv(b, "cause", sl_proto_retry_cause_slug(e->cause));
        kv(b, "last_error", e->last_error.code);
        break;
    }
    case SL_PROTO_EVENT_REQUEST_FINISHED: {
        const sl_proto_request_finished_t *e = &ev->request_finished;
        kv_u(b, "status", e->status);
        kv_ms(b, "duration", e->duration_ms);
        kv_u(b, "bytes", e->bytes);
        if (e->usage != NULL)
            kv_usage(b, e->usage);
        if (e->has_cost_micros) {
            char usd[32];
            sl_cli_usd_text(e->cost_micros, usd);
            kv(b, "cost", usd);
        }
        break;
    }
    case SL_PROTO_EVENT_REQUEST_FAILED: {
        const sl_proto_request_failed_t *e = &ev->request_failed;
        kv(b, "source", sl_proto_failure_source_slug(e->source));
        kv(b, "code", e->message.code);
        kv_ms(b, "duration", e->duration_ms);
        kv(b, "text", e->message.text);
        break;
    }
    case SL_PROTO_EVENT_REQUEST_CANCELLED:
        kv_ms(b, "duration", ev->request_cancelled.duration_ms);
        break;
    case SL_PROTO_EVENT_THROTTLE_CHANGED:
        kv(b, "provider", ev->throttle_changed.provider);
        if (ev->throttle_changed.throttle != NULL)
            throttle_fields(b, ev->throttle_changed.throttle);
        else
            sl_strbuf_append(b, " recovered", 10);
        break;
    case SL_PROTO_EVENT_HEALTH_CHANGED: {
        const sl_proto_health_changed_t *e = &ev->health_changed;
        kv(b, "provider", e->provider);
        kv(b, "state", sl_proto_health_state_slug(e->state));
        if (e->has_until_ms)
            kv_clock(b, "until", e->until_ms);
        if (e->reason != NULL)
            kv(b, "reason", e->reason->code);
        break;
    }
    case SL_PROTO_EVENT_LIMITS_CHANGED: {
        const sl_proto_limits_changed_t *e = &ev->limits_changed;
        kv(b, "target", sl_proto_limit_target_slug(e->target));
        kv(b, "name", e->name);
        kv_limits(b, "limits", e->limits, e->limits_len);
        break;
    }
    case SL_PROTO_EVENT_SECRETS_FOUND:
        kv_u(b, "count", ev->secrets_found.count);
        break;
    case SL_PROTO_EVENT_CONTENT_MATCHED:
        kv(b, "rule", ev->content_matched.rule);
        break;
    case SL_PROTO_EVENT_PROVIDER_CHANGED:
        provider_view_fields(b, &ev->provider_changed.view);
        break;
    case SL_PROTO_EVENT_CLUSTER_CHANGED: {
        const sl_proto_cluster_changed_t *e = &ev->cluster_changed;
        kv(b, "state", sl_proto_cluster_state_slug(e->state));
        kv_u(b, "instances", e->instances);
        if (e->reason != NULL)
            kv(b, "reason", e->reason->code);
        break;
    }
    case SL_PROTO_EVENT_ROWS_DROPPED:
        kv_u(b, "count", ev->rows_dropped.count);
        break;
    case SL_PROTO_EVENT_STATS_REPORTED: {
        const sl_proto_stats_interval_t *iv = &ev->stats_reported.interval;
        uint64_t hops = 0, rescued = 0, lost = 0;
        for (size_t i = 0; i < iv->providers_len; i++)
            hops += iv->providers[i].requests;
        for (size_t i = 0; i < iv->rescued_len; i++)
            rescued += iv->rescued[i].count;
        for (size_t i = 0; i < iv->lost_len; i++)
            lost += iv->lost[i].count;
        kv_ms(b, "interval", iv->ms);
        kv_u(b, "hops", hops);
        kv_u(b, "rescued", rescued);
        kv_u(b, "lost", lost);
        break;
    }
    case SL_PROTO_EVENT_STORE_CHANGED: {
        const sl_proto_store_changed_t *e = &ev->store_changed;
        kv(b, "state", sl_proto_store_state_slug(e->state));
        kv(b, "store", sl_proto_store_kind_slug(e->store_kind));
        if (e->reason != NULL)
            kv(b, "reason", e->reason);
        if (e->has_spooled_rows)
            kv_u(b, "spooled_rows", e->spooled_rows);
        break;
    }
    case SL_PROTO_EVENT_CONFIG_RELOADED:
        kv_u(b, "revision", ev->config_reloaded.revision);
        kv(b, "source", sl_proto_config_source_slug(ev->config_reloaded.source));
        break;
    case SL_PROTO_EVENT_CONFIG_REJECTED: {
        const sl_proto_config_rejected_t *e = &ev->config_rejected;
        kv(b, "source", sl_proto_config_source_slug(e->source));
        kv_u(b, "problems", e->problems_len);
        for (size_t i = 0; i < e->problems_len; i++)
            kv(b, "problem", e->problems[i].text);
        break;
    }
    }
}

void
sl_cli_event_line(const sl_proto_event_t *ev, sl_strbuf_t *out)
{
    char clock[16];
    sl_cli_clock(event_at(ev), clock);
    sl_strbuf_appendf(out, "%s %s", clock, kind_slug(ev));
    event_fields(ev, true, out);
    sl_strbuf_append(out, "\n", 1);
}

void
sl_cli_in_flight_lines(const sl_proto_in_flight_t *in_flight, sl_strbuf_t *out)
{
    for (size_t i = 0; i < in_flight->requests_len; i++) {
        const sl_proto_in_flight_request_t *r = &in_flight->requests[i];
        sl_strbuf_appendf(out, "id=%llu", (unsigned long long)r->id);
        if (r->events_len > 0 && r->events[0].kind == SL_PROTO_EVENT_REQUEST_STARTED) {
            const sl_proto_request_started_t *s = &r->events[0].request_started;
            kv(out, "client", s->client);
            kv(out, "model", s->model);
            kv_ms(out, "age", in_flight->now_ms > s->at_ms ? in_flight->now_ms - s->at_ms : 0);
        }
        if (r->events_len > 0) {
            const sl_proto_event_t *last = &r->events[r->events_len - 1];
            kv_clock(out, "last", event_at(last));
            sl_strbuf_appendf(out, " %s", kind_slug(last));
            event_fields(last, false, out);
        }
        sl_strbuf_append(out, "\n", 1);
    }
}
