/*
 * A finished request as OTLP spans (core/otlp.h), read back with a small
 * protobuf reader written from opentelemetry-proto's field numbers: what a
 * collector decodes. (tests/sdk/traces.test.mjs checks the same bytes with the
 * official OpenTelemetry definitions.)
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/otlp.h"

/* ---- a protobuf reader ---- */

typedef struct {
    const uint8_t *p;
    size_t n;
} bytes_t;

typedef struct {
    unsigned field, wire;
    uint64_t u; /* varint or fixed64 */
    bytes_t b;  /* length-delimited */
} pb_field_t;

static uint64_t
read_varint(bytes_t *in)
{
    uint64_t v = 0;
    for (int shift = 0; in->n > 0 && shift < 64; shift += 7) {
        uint8_t c = *in->p++;
        in->n--;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return v;
    }
    cr_assert_fail("a varint runs past its message");
    return 0;
}

/* The next field of in; false at its end. Fails the test on a malformed message. */
static bool
next_field(bytes_t *in, pb_field_t *f)
{
    if (in->n == 0)
        return false;
    uint64_t tag = read_varint(in);
    *f = (pb_field_t){.field = (unsigned)(tag >> 3), .wire = (unsigned)(tag & 7)};
    if (f->wire == 0) {
        f->u = read_varint(in);
    } else if (f->wire == 1) {
        cr_assert_geq(in->n, 8);
        for (int i = 0; i < 8; i++)
            f->u |= (uint64_t)in->p[i] << (8 * i);
        in->p += 8;
        in->n -= 8;
    } else if (f->wire == 2) {
        uint64_t len = read_varint(in);
        cr_assert_geq(in->n, len, "a length past its message");
        f->b = (bytes_t){in->p, (size_t)len};
        in->p += len;
        in->n -= len;
    } else {
        cr_assert_fail("wire type %u", f->wire);
    }
    return true;
}

/* The index-th occurrence of field in msg (wire type 2), or an empty view with .p NULL. */
static bytes_t
sub(bytes_t msg, unsigned field, size_t index)
{
    pb_field_t f;
    while (next_field(&msg, &f)) {
        if (f.field == field && index-- == 0) {
            cr_assert_eq(f.wire, 2);
            return f.b;
        }
    }
    return (bytes_t){NULL, 0};
}

static bool
scalar(bytes_t msg, unsigned field, uint64_t *out)
{
    pb_field_t f;
    while (next_field(&msg, &f)) {
        if (f.field == field && f.wire != 2) {
            *out = f.u;
            return true;
        }
    }
    return false;
}

static size_t
count(bytes_t msg, unsigned field)
{
    size_t n = 0;
    pb_field_t f;
    while (next_field(&msg, &f))
        n += f.field == field;
    return n;
}

static bool
eq(bytes_t b, const char *s)
{
    return b.p != NULL && b.n == strlen(s) && memcmp(b.p, s, b.n) == 0;
}

/* A span's (or an event's) attribute value: AnyValue of the KeyValue (field kv_field) with key. */
static bytes_t
attr(bytes_t msg, unsigned kv_field, const char *key)
{
    for (size_t i = 0;; i++) {
        bytes_t kv = sub(msg, kv_field, i);
        if (kv.p == NULL)
            return kv;
        if (eq(sub(kv, 1, 0), key))
            return sub(kv, 2, 0);
    }
}

static bool
str_attr(bytes_t span, const char *key, const char *value)
{
    return eq(sub(attr(span, 9, key), 1, 0), value);
}

static int64_t
int_attr(bytes_t span, const char *key)
{
    uint64_t v = 0;
    bytes_t any = attr(span, 9, key);
    cr_assert_not_null(any.p, "no attribute %s", key);
    cr_assert(scalar(any, 3, &v), "%s is not an int_value", key);
    return (int64_t)v;
}

/* ---- the spans ---- */

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
    strcpy(s->request_model, "claude-x");
    strcpy(s->response_model, "claude-sonnet");
    s->genai_provider = "anthropic";
    strcpy(s->finish_reason, "end_turn");
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
    strcpy(a->error_type, "gw.upstream.status");
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

static sl_strbuf_t encoded;

/* The spans of one request, encoded alone; checks the resource and scope on the way. */
static bytes_t
spans_of(const sl_request_span_t *s)
{
    free(sl_strbuf_finish(&encoded));
    const sl_request_span_t *spans[] = {s};
    sl_otlp_encode(spans, 1, "gateway-eu", "0.1.0", &encoded);
    bytes_t req = {(const uint8_t *)encoded.data, encoded.len};
    cr_assert_eq(count(req, 1), 1, "one ResourceSpans");
    bytes_t rs = sub(req, 1, 0);
    bytes_t resource = sub(rs, 1, 0);
    cr_assert(eq(sub(attr(resource, 1, "service.name"), 1, 0), "gateway-eu"));
    bytes_t ss = sub(rs, 2, 0);
    cr_assert(eq(sub(sub(ss, 1, 0), 1, 0), "sluice"), "the scope's name");
    return ss;
}

static void
teardown(void)
{
    free(sl_strbuf_finish(&encoded));
}

TestSuite(otlp, .fini = teardown);

Test(otlp, a_request_is_a_server_span_with_a_client_span_per_hop)
{
    sl_request_span_t *s = retried_request();
    bytes_t ss = spans_of(s);
    cr_assert_eq(count(ss, 2), 3);
    bytes_t req = sub(ss, 2, 0), hop1 = sub(ss, 2, 1), hop2 = sub(ss, 2, 2);
    uint64_t v;
    cr_assert_eq(sub(req, 1, 0).n, 16);
    cr_assert_eq(memcmp(sub(req, 1, 0).p, s->trace_id, 16), 0, "trace_id");
    cr_assert_eq(memcmp(sub(req, 2, 0).p, s->span_id, 8), 0, "span_id");
    cr_assert_eq(memcmp(sub(req, 4, 0).p, s->parent_span_id, 8), 0, "parent_span_id");
    cr_assert(eq(sub(req, 5, 0), "chat claude-x"), "name");
    cr_assert(scalar(req, 6, &v) && v == 2, "kind SERVER");
    cr_assert(scalar(req, 7, &v) && v == 1796000000000000000, "start_time_unix_nano");
    cr_assert(scalar(req, 8, &v) && v == 1796000000250000000, "end_time_unix_nano");
    cr_assert(str_attr(req, "gen_ai.operation.name", "chat"));
    cr_assert(str_attr(req, "gen_ai.provider.name", "anthropic"));
    cr_assert(str_attr(req, "gen_ai.response.model", "claude-sonnet"));
    cr_assert_eq(int_attr(req, "gen_ai.usage.input_tokens"), 12);
    cr_assert_eq(int_attr(req, "gen_ai.usage.output_tokens"), 5);
    cr_assert_eq(int_attr(req, "sluice.request.id"), 7);
    cr_assert(str_attr(req, "sluice.wait.gate", "throttled"));
    /* A string array: AnyValue.array_value (5) holding one AnyValue (values = 1). */
    bytes_t reasons = sub(attr(req, 9, "gen_ai.response.finish_reasons"), 5, 0);
    cr_assert_eq(count(reasons, 1), 1);
    cr_assert(eq(sub(sub(reasons, 1, 0), 1, 0), "end_turn"));
    cr_assert(scalar(attr(req, 9, "gen_ai.request.stream"), 2, &v) && v == 1, "bool_value true");
    cr_assert_null(sub(req, 15, 0).p, "no status: UNSET");

    cr_assert_eq(count(req, 11), 2, "two events");
    bytes_t backoff = sub(req, 11, 0);
    cr_assert(eq(sub(backoff, 2, 0), "backoff"));
    cr_assert(scalar(backoff, 1, &v) && v == 1796000000010000000);
    cr_assert(scalar(attr(backoff, 3, "sluice.backoff_ms"), 3, &v) && v == 2000);
    cr_assert(eq(sub(sub(req, 11, 1), 2, 0), "first_token"));

    for (size_t i = 1; i <= 2; i++) {
        bytes_t hop = sub(ss, 2, i);
        cr_assert_eq(memcmp(sub(hop, 4, 0).p, s->span_id, 8), 0, "a hop's parent is the request");
        cr_assert_eq(memcmp(sub(hop, 1, 0).p, s->trace_id, 16), 0);
        cr_assert(scalar(hop, 6, &v) && v == 3, "kind CLIENT");
        cr_assert(eq(sub(hop, 5, 0), "chat claude-sonnet"));
    }
    cr_assert(str_attr(hop1, "server.address", "127.0.0.1"));
    cr_assert_eq(int_attr(hop1, "server.port"), 9000);
    cr_assert_eq(int_attr(hop1, "http.response.status_code"), 503);
    cr_assert(str_attr(hop1, "error.type", "gw.upstream.status"));
    cr_assert(str_attr(hop1, "sluice.attempt.reason", "retry"));
    cr_assert_null(attr(hop1, 9, "sluice.attempt.pause_ms").p, "it did not wait");
    bytes_t status = sub(hop1, 15, 0);
    cr_assert(scalar(status, 3, &v) && v == 2, "STATUS_CODE_ERROR");
    cr_assert(eq(sub(status, 2, 0), "gw.upstream.status"));
    cr_assert_eq(int_attr(hop2, "sluice.attempt.retry"), 1);
    cr_assert_eq(int_attr(hop2, "sluice.attempt.pause_ms"), 0);
    cr_assert(str_attr(hop2, "sluice.attempt.outcome", "ok"));
    cr_assert_null(attr(hop2, 9, "error.type").p);
    free(s);
}

Test(otlp, a_request_without_a_parent_has_no_parent_span_id)
{
    sl_request_span_t *s = sl_request_span_new(0);
    s->operation = "generate_content";
    strcpy(s->error_type, "gw.route.no_match");
    bytes_t req = sub(spans_of(s), 2, 0);
    cr_assert_null(sub(req, 4, 0).p);
    cr_assert_null(attr(req, 9, "gen_ai.response.finish_reasons").p, "no reason, no attribute");
    cr_assert(eq(sub(req, 5, 0), "generate_content"), "just the operation without a model");
    cr_assert(eq(sub(sub(req, 15, 0), 2, 0), "gw.route.no_match"));
    free(s);
}

Test(otlp, invalid_utf8_in_a_client_model_becomes_a_replacement_character)
{
    sl_request_span_t *s = sl_request_span_new(0);
    s->operation = "chat";
    memcpy(s->request_model, "m\xc3\x28\x01\xf0\x9f\x98\x80", 9);
    bytes_t req = sub(spans_of(s), 2, 0);
    cr_assert(str_attr(req, "gen_ai.request.model", "m\xef\xbf\xbd(\x01\xf0\x9f\x98\x80"),
              "protobuf strings are UTF-8: the stray byte is U+FFFD, the emoji stays");
    free(s);
}

Test(otlp, a_long_field_gets_a_longer_length)
{
    /* Past 127 bytes a length takes two varint bytes: the span's content moves over to make room. */
    sl_request_span_t *s = sl_request_span_new(0);
    s->operation = "chat";
    memset(s->request_model, 'm', SL_SPAN_TEXT_MAX - 1);
    memset(s->client, 'c', SL_SPAN_TEXT_MAX - 1);
    bytes_t req = sub(spans_of(s), 2, 0);
    cr_assert_eq(sub(attr(req, 9, "gen_ai.request.model"), 1, 0).n, SL_SPAN_TEXT_MAX - 1);
    cr_assert_eq(sub(attr(req, 9, "sluice.client"), 1, 0).n, SL_SPAN_TEXT_MAX - 1);
    cr_assert_eq(sub(req, 5, 0).n, 5 + SL_SPAN_TEXT_MAX - 1);
    free(s);
}

Test(otlp, a_batch_holds_every_request_and_hop)
{
    sl_request_span_t *a = retried_request(), *b = sl_request_span_new(0);
    b->operation = "count_tokens";
    const sl_request_span_t *spans[] = {a, b};
    sl_strbuf_t out = {0};
    sl_otlp_encode(spans, 2, "sluice", "0.1.0", &out);
    bytes_t ss = sub(sub((bytes_t){(const uint8_t *)out.data, out.len}, 1, 0), 2, 0);
    cr_assert_eq(count(ss, 2), 4, "two requests, two hops");
    cr_assert(eq(sub(sub(ss, 2, 3), 5, 0), "count_tokens"));
    free(sl_strbuf_finish(&out));
    free(a);
    free(b);
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
