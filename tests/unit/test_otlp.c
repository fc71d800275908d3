/* A finished request as OTLP/HTTP JSON spans (core/otlp.h): the layout collectors decode. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/otlp.h"

static sl_request_span_t *
retried_request(void)
{
    sl_request_span_t *s = sl_request_span_new(2);
    memcpy(s->trace_id, "\x0a\xf7\x65\x19\x16\xcd\x43\xdd\x84\x48\xeb\x21\x1c\x80\x31\x9c", 16);
    memcpy(s->span_id, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    memcpy(s->parent_span_id, "\xb7\xad\x6b\x71\x69\x20\x33\x31", 8);
    s->has_parent = true;
    s->start_ns = 1796000000000000000;
    s->end_ns = 1796000000250000000;
    s->request_id = 7;
    s->operation = "chat";
    strcpy(s->request_model, "claude-\"x\"\n");
    strcpy(s->response_model, "claude-sonnet");
    s->genai_provider = "anthropic";
    strcpy(s->client, "tester");
    s->stream = true;
    s->status = 200;
    s->has_usage = true;
    s->input_tokens = 12;
    s->output_tokens = 5;
    s->wait_gate = "throttled";
    sl_span_add_event(s->events, &s->n_events, SL_SPAN_EVENT_BACKOFF, 1796000000010000000, 2000);
    sl_span_add_event(s->events, &s->n_events, SL_SPAN_EVENT_FIRST_TOKEN, 1796000000200000000, -1);
    sl_attempt_span_t *a = &s->attempts[0];
    memcpy(a->span_id, "\x11\x12\x13\x14\x15\x16\x17\x18", 8);
    a->start_ns = 1796000000001000000;
    a->end_ns = 1796000000005000000;
    a->genai_provider = "anthropic";
    strcpy(a->provider, "one");
    strcpy(a->model, "claude-sonnet");
    strcpy(a->server_address, "127.0.0.1");
    a->server_port = 9000;
    a->status = 503;
    a->pause_ms = -1;
    a->outcome = "temporary";
    a->reason = "retry";
    strcpy(a->error_type, "gw.upstream.overloaded");
    a = &s->attempts[1];
    memcpy(a->span_id, "\x21\x22\x23\x24\x25\x26\x27\x28", 8);
    a->start_ns = 1796000000030000000;
    a->end_ns = 1796000000240000000;
    a->genai_provider = "anthropic";
    strcpy(a->provider, "one");
    strcpy(a->model, "claude-sonnet");
    a->status = 200;
    a->retry = 1;
    a->pause_ms = 0;
    a->outcome = "ok";
    return s;
}

static json_t *
encode(const sl_request_span_t *s)
{
    sl_strbuf_t b = {0};
    const sl_request_span_t *spans[] = {s};
    sl_otlp_encode(spans, 1, "gateway-eu", "0.1.0", &b);
    char *text = sl_strbuf_finish(&b);
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    cr_assert_not_null(j, "not JSON (%s): %s", err.text, text);
    free(text);
    return j;
}

/* The value object of attribute key in attrs, or NULL. */
static json_t *
attr(json_t *attrs, const char *key)
{
    size_t i;
    json_t *a;
    json_array_foreach(attrs, i, a)
    {
        if (strcmp(json_string_value(json_object_get(a, "key")), key) == 0)
            return json_object_get(a, "value");
    }
    return NULL;
}

static const char *
str_attr(json_t *span, const char *key)
{
    json_t *v = attr(json_object_get(span, "attributes"), key);
    return v != NULL ? json_string_value(json_object_get(v, "stringValue")) : NULL;
}

static const char *
int_attr(json_t *span, const char *key)
{
    json_t *v = attr(json_object_get(span, "attributes"), key);
    return v != NULL ? json_string_value(json_object_get(v, "intValue")) : NULL;
}

static json_t *
spans_of(json_t *j)
{
    json_t *rs = json_array_get(json_object_get(j, "resourceSpans"), 0);
    cr_assert_str_eq(str_attr(json_object_get(rs, "resource"), "service.name"), "gateway-eu");
    json_t *ss = json_array_get(json_object_get(rs, "scopeSpans"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(ss, "scope"), "name")), "sluice");
    return json_object_get(ss, "spans");
}

Test(otlp, a_request_is_a_server_span_with_a_client_span_per_hop)
{
    sl_request_span_t *s = retried_request();
    json_t *j = encode(s);
    json_t *spans = spans_of(j);
    cr_assert_eq(json_array_size(spans), 3);
    json_t *req = json_array_get(spans, 0), *hop1 = json_array_get(spans, 1),
           *hop2 = json_array_get(spans, 2);
    cr_assert_str_eq(json_string_value(json_object_get(req, "traceId")), "0af7651916cd43dd8448eb211c80319c");
    cr_assert_str_eq(json_string_value(json_object_get(req, "spanId")), "0102030405060708");
    cr_assert_str_eq(json_string_value(json_object_get(req, "parentSpanId")), "b7ad6b7169203331");
    cr_assert_eq(json_integer_value(json_object_get(req, "kind")), 2, "SERVER");
    cr_assert_str_eq(json_string_value(json_object_get(req, "name")), "chat claude-\"x\"\n");
    cr_assert_str_eq(json_string_value(json_object_get(req, "startTimeUnixNano")), "1796000000000000000");
    cr_assert_str_eq(json_string_value(json_object_get(req, "endTimeUnixNano")), "1796000000250000000");
    cr_assert_str_eq(str_attr(req, "gen_ai.operation.name"), "chat");
    cr_assert_str_eq(str_attr(req, "gen_ai.provider.name"), "anthropic");
    cr_assert_str_eq(str_attr(req, "gen_ai.response.model"), "claude-sonnet");
    cr_assert_str_eq(int_attr(req, "gen_ai.usage.input_tokens"), "12");
    cr_assert_str_eq(int_attr(req, "gen_ai.usage.output_tokens"), "5");
    cr_assert_str_eq(str_attr(req, "sluice.wait.gate"), "throttled");
    cr_assert(json_is_true(
        json_object_get(attr(json_object_get(req, "attributes"), "gen_ai.request.stream"), "boolValue")));
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(req, "status"), "code")), 0, "UNSET");

    json_t *events = json_object_get(req, "events");
    cr_assert_eq(json_array_size(events), 2);
    json_t *backoff = json_array_get(events, 0);
    cr_assert_str_eq(json_string_value(json_object_get(backoff, "name")), "backoff");
    cr_assert_str_eq(json_string_value(json_object_get(
                         attr(json_object_get(backoff, "attributes"), "sluice.backoff_ms"), "intValue")),
                     "2000");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(events, 1), "name")), "first_token");

    for (int i = 1; i <= 2; i++) {
        json_t *hop = json_array_get(spans, i);
        cr_assert_str_eq(json_string_value(json_object_get(hop, "parentSpanId")), "0102030405060708");
        cr_assert_str_eq(json_string_value(json_object_get(hop, "traceId")),
                         "0af7651916cd43dd8448eb211c80319c");
        cr_assert_eq(json_integer_value(json_object_get(hop, "kind")), 3, "CLIENT");
    }
    cr_assert_str_eq(json_string_value(json_object_get(hop1, "spanId")), "1112131415161718");
    cr_assert_str_eq(str_attr(hop1, "server.address"), "127.0.0.1");
    cr_assert_str_eq(int_attr(hop1, "server.port"), "9000");
    cr_assert_str_eq(int_attr(hop1, "http.response.status_code"), "503");
    cr_assert_str_eq(str_attr(hop1, "error.type"), "gw.upstream.overloaded");
    cr_assert_str_eq(str_attr(hop1, "sluice.attempt.reason"), "retry");
    cr_assert_null(int_attr(hop1, "sluice.attempt.pause_ms"), "it did not wait");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(hop1, "status"), "code")), 2, "ERROR");
    cr_assert_str_eq(int_attr(hop2, "sluice.attempt.retry"), "1");
    cr_assert_str_eq(int_attr(hop2, "sluice.attempt.pause_ms"), "0");
    cr_assert_str_eq(str_attr(hop2, "sluice.attempt.outcome"), "ok");
    cr_assert_null(str_attr(hop2, "error.type"));
    json_decref(j);
    free(s);
}

Test(otlp, a_request_without_a_parent_has_no_parent_span_id)
{
    sl_request_span_t *s = sl_request_span_new(0);
    s->operation = "generate_content";
    strcpy(s->error_type, "gw.route.no_match");
    json_t *j = encode(s);
    json_t *req = json_array_get(spans_of(j), 0);
    cr_assert_null(json_object_get(req, "parentSpanId"));
    cr_assert_str_eq(json_string_value(json_object_get(req, "name")), "generate_content");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(req, "status"), "message")),
                     "gw.route.no_match");
    json_decref(j);
    free(s);
}

Test(otlp, invalid_utf8_in_a_client_model_still_makes_json)
{
    sl_request_span_t *s = sl_request_span_new(0);
    s->operation = "chat";
    memcpy(s->request_model, "m\xc3\x28\x01", 5);
    json_t *j = encode(s);
    cr_assert_str_eq(str_attr(json_array_get(spans_of(j), 0), "gen_ai.request.model"), "m\xef\xbf\xbd(\x01");
    json_decref(j);
    free(s);
}

Test(otlp, events_past_the_cap_are_not_kept)
{
    sl_span_event_t events[SL_SPAN_EVENTS_MAX];
    size_t n = 0;
    for (int i = 0; i < SL_SPAN_EVENTS_MAX + 3; i++)
        sl_span_add_event(events, &n, SL_SPAN_EVENT_QUEUED, i, -1);
    cr_assert_eq(n, SL_SPAN_EVENTS_MAX);
    cr_assert_eq(events[SL_SPAN_EVENTS_MAX - 1].unix_ns, SL_SPAN_EVENTS_MAX - 1);
}
