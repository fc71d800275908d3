#include "core/otlp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "core/trace_context.h"

/* OTLP's enums, as numbers (the JSON encoding's rule). */
enum { SPAN_KIND_SERVER = 2, SPAN_KIND_CLIENT = 3 };
enum { STATUS_UNSET = 0, STATUS_ERROR = 2 };

static const char *const event_names[] = {
    [SL_SPAN_EVENT_QUEUED] = "queued",
    [SL_SPAN_EVENT_BACKOFF] = "backoff",
    [SL_SPAN_EVENT_FIRST_TOKEN] = "first_token",
};

sl_request_span_t *
sl_request_span_new(size_t n_attempts)
{
    sl_request_span_t *s = sl_xcalloc(1, sizeof(*s) + n_attempts * sizeof(s->attempts[0]));
    s->n_attempts = n_attempts;
    return s;
}

void
sl_span_add_event(sl_span_event_t *events, size_t *n_events, sl_span_event_kind_t kind, int64_t unix_ns,
                  int64_t value_ms)
{
    if (*n_events < SL_SPAN_EVENTS_MAX)
        events[(*n_events)++] = (sl_span_event_t){kind, unix_ns, value_ms};
}

void
sl_request_span_name(const sl_request_span_t *s, char *out, size_t size)
{
    if (s->request_model[0] != '\0')
        snprintf(out, size, "%s %s", s->operation, s->request_model);
    else
        snprintf(out, size, "%s", s->operation);
}

/* ---- JSON pieces ---- */

/* Appends sep (",") before every item but the first of a list; *first tracks it. */
static void
item(sl_strbuf_t *out, bool *first)
{
    if (!*first)
        sl_strbuf_append(out, ",", 1);
    *first = false;
}

static void
append_string(sl_strbuf_t *out, const char *s)
{
    sl_strbuf_append(out, "\"", 1);
    sl_text_append_json(out, s);
    sl_strbuf_append(out, "\"", 1);
}

static void
append_i64_string(sl_strbuf_t *out, int64_t v)
{
    sl_strbuf_appendf(out, "\"%lld\"", (long long)v);
}

static void
attr_str(sl_strbuf_t *out, bool *first, const char *key, const char *value)
{
    if (value == NULL || value[0] == '\0')
        return;
    item(out, first);
    sl_strbuf_appendf(out, "{\"key\":\"%s\",\"value\":{\"stringValue\":", key);
    append_string(out, value);
    sl_strbuf_append(out, "}}", 2);
}

static void
attr_int(sl_strbuf_t *out, bool *first, const char *key, int64_t value)
{
    item(out, first);
    sl_strbuf_appendf(out, "{\"key\":\"%s\",\"value\":{\"intValue\":", key);
    append_i64_string(out, value);
    sl_strbuf_append(out, "}}", 2);
}

static void
attr_bool(sl_strbuf_t *out, bool *first, const char *key, bool value)
{
    item(out, first);
    sl_strbuf_appendf(out, "{\"key\":\"%s\",\"value\":{\"boolValue\":%s}}", key, value ? "true" : "false");
}

static void
append_id(sl_strbuf_t *out, const char *field, const uint8_t *id, size_t n)
{
    char hex[33];
    sl_trace_hex(id, n, hex);
    sl_strbuf_appendf(out, "\"%s\":\"%s\",", field, hex);
}

/* The fields every span has: ids, name, kind, times. */
static void
span_head(sl_strbuf_t *out, const uint8_t trace_id[16], const uint8_t span_id[8], const uint8_t *parent,
          const char *name, int kind, int64_t start_ns, int64_t end_ns)
{
    sl_strbuf_append(out, "{", 1);
    append_id(out, "traceId", trace_id, 16);
    append_id(out, "spanId", span_id, 8);
    if (parent != NULL)
        append_id(out, "parentSpanId", parent, 8);
    sl_strbuf_append_str(out, "\"name\":");
    append_string(out, name);
    sl_strbuf_appendf(out, ",\"kind\":%d,\"startTimeUnixNano\":", kind);
    append_i64_string(out, start_ns);
    sl_strbuf_append_str(out, ",\"endTimeUnixNano\":");
    append_i64_string(out, end_ns > start_ns ? end_ns : start_ns);
}

static void
span_status(sl_strbuf_t *out, const char *error_type)
{
    if (error_type[0] != '\0') {
        sl_strbuf_appendf(out, ",\"status\":{\"code\":%d,\"message\":", STATUS_ERROR);
        append_string(out, error_type);
        sl_strbuf_append(out, "}", 1);
    } else {
        sl_strbuf_appendf(out, ",\"status\":{\"code\":%d}", STATUS_UNSET);
    }
}

static void
encode_events(const sl_request_span_t *s, sl_strbuf_t *out)
{
    sl_strbuf_append_str(out, ",\"events\":[");
    bool first = true;
    for (size_t i = 0; i < s->n_events; i++) {
        const sl_span_event_t *e = &s->events[i];
        item(out, &first);
        sl_strbuf_append_str(out, "{\"timeUnixNano\":");
        append_i64_string(out, e->unix_ns);
        sl_strbuf_appendf(out, ",\"name\":\"%s\",\"attributes\":[", event_names[e->kind]);
        bool first_attr = true;
        if (e->kind == SL_SPAN_EVENT_BACKOFF && e->value_ms >= 0)
            attr_int(out, &first_attr, "sluice.backoff_ms", e->value_ms);
        sl_strbuf_append(out, "]}", 2);
    }
    sl_strbuf_append(out, "]", 1);
}

static void
encode_request(const sl_request_span_t *s, sl_strbuf_t *out)
{
    char name[SL_SPAN_TEXT_MAX + 32];
    sl_request_span_name(s, name, sizeof(name));
    span_head(out, s->trace_id, s->span_id, s->has_parent ? s->parent_span_id : NULL, name, SPAN_KIND_SERVER,
              s->start_ns, s->end_ns);
    sl_strbuf_append_str(out, ",\"attributes\":[");
    bool first = true;
    attr_str(out, &first, "gen_ai.operation.name", s->operation);
    attr_str(out, &first, "gen_ai.provider.name", s->genai_provider);
    attr_str(out, &first, "gen_ai.request.model", s->request_model);
    attr_str(out, &first, "gen_ai.response.model", s->response_model);
    attr_bool(out, &first, "gen_ai.request.stream", s->stream);
    if (s->has_usage) {
        attr_int(out, &first, "gen_ai.usage.input_tokens", s->input_tokens);
        attr_int(out, &first, "gen_ai.usage.output_tokens", s->output_tokens);
    }
    if (s->status > 0)
        attr_int(out, &first, "http.response.status_code", s->status);
    attr_str(out, &first, "error.type", s->error_type);
    attr_str(out, &first, "sluice.wait.gate", s->wait_gate);
    attr_str(out, &first, "sluice.client", s->client);
    attr_int(out, &first, "sluice.request.id", (int64_t)s->request_id);
    sl_strbuf_append(out, "]", 1);
    encode_events(s, out);
    span_status(out, s->error_type);
    sl_strbuf_append(out, "}", 1);
}

static void
encode_attempt(const sl_request_span_t *s, const sl_attempt_span_t *a, sl_strbuf_t *out)
{
    char name[SL_SPAN_TEXT_MAX + 32];
    snprintf(name, sizeof(name), "%s %s", s->operation, a->model[0] != '\0' ? a->model : a->provider);
    span_head(out, s->trace_id, a->span_id, s->span_id, name, SPAN_KIND_CLIENT, a->start_ns, a->end_ns);
    sl_strbuf_append_str(out, ",\"attributes\":[");
    bool first = true;
    attr_str(out, &first, "gen_ai.operation.name", s->operation);
    attr_str(out, &first, "gen_ai.provider.name", a->genai_provider);
    attr_str(out, &first, "gen_ai.request.model", a->model);
    attr_str(out, &first, "server.address", a->server_address);
    if (a->server_port > 0)
        attr_int(out, &first, "server.port", a->server_port);
    if (a->status > 0)
        attr_int(out, &first, "http.response.status_code", a->status);
    attr_str(out, &first, "error.type", a->error_type);
    attr_str(out, &first, "sluice.provider", a->provider);
    attr_int(out, &first, "sluice.attempt.retry", a->retry);
    if (a->pause_ms >= 0)
        attr_int(out, &first, "sluice.attempt.pause_ms", a->pause_ms);
    attr_str(out, &first, "sluice.attempt.outcome", a->outcome);
    attr_str(out, &first, "sluice.attempt.reason", a->reason);
    sl_strbuf_append(out, "]", 1);
    span_status(out, a->error_type);
    sl_strbuf_append(out, "}", 1);
}

void
sl_otlp_encode(const sl_request_span_t *const *spans, size_t n, const char *service_name,
               const char *service_version, sl_strbuf_t *out)
{
    sl_strbuf_append_str(out, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
    bool first = true;
    attr_str(out, &first, "service.name", service_name);
    attr_str(out, &first, "service.version", service_version);
    sl_strbuf_append_str(out, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"sluice\",\"version\":");
    append_string(out, service_version);
    sl_strbuf_append_str(out, "},\"spans\":[");
    first = true;
    for (size_t i = 0; i < n; i++) {
        item(out, &first);
        encode_request(spans[i], out);
        for (size_t k = 0; k < spans[i]->n_attempts; k++) {
            sl_strbuf_append(out, ",", 1);
            encode_attempt(spans[i], &spans[i]->attempts[k], out);
        }
    }
    sl_strbuf_append_str(out, "]}]}]}");
}
