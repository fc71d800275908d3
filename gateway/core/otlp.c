#include "core/otlp.h"

#include <stdlib.h>
#include <string.h>

#include "core/text.h"

/* Span.SpanKind */
enum { SPAN_KIND_SERVER = 2, SPAN_KIND_CLIENT = 3 };

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

/* ---- protobuf pieces ----
 * OTLP's protobuf wire format (opentelemetry-proto, trace/v1): varints, fixed64 times, raw id bytes, and
 * length-delimited submessages written in place (a one-byte length reserved, moved when it needs more).
 * Fields go in field-number order, as protobuf encoders write them. Everything goes through put(): a copy
 * into the buffer's room, growing through sl_strbuf_append only when full. */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2 };

/* Inlined everywhere, so that a literal's copy is a few moves rather than a call. */
#define INLINE static inline __attribute__((always_inline))

INLINE void
put(sl_strbuf_t *b, const void *s, size_t n)
{
    if (b->cap - b->len <= n) {
        sl_strbuf_append(b, s, n); /* grows; keeps the NUL */
        return;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

INLINE size_t
varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline void
put_varint(sl_strbuf_t *b, uint64_t v)
{
    uint8_t bytes[10];
    size_t n = 0;
    while (v >= 0x80) {
        bytes[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    bytes[n++] = (uint8_t)v;
    put(b, bytes, n);
}

static inline void
put_tag(sl_strbuf_t *b, unsigned field, unsigned wire)
{
    put_varint(b, (uint64_t)(field << 3 | wire));
}

static void
put_fixed64(sl_strbuf_t *b, unsigned field, int64_t v)
{
    uint64_t u = v > 0 ? (uint64_t)v : 0;
    uint8_t bytes[9] = {(uint8_t)(field << 3 | WIRE_FIXED64)}; /* the fields here are all below 16 */
    for (int i = 0; i < 8; i++)
        bytes[1 + i] = (uint8_t)(u >> (8 * i));
    put(b, bytes, 9);
}

static void
put_uint_field(sl_strbuf_t *b, unsigned field, uint64_t v)
{
    put_tag(b, field, WIRE_VARINT);
    put_varint(b, v);
}

static void
put_bytes(sl_strbuf_t *b, unsigned field, const void *data, size_t n)
{
    put_tag(b, field, WIRE_LEN);
    put_varint(b, n);
    put(b, data, n);
}

/* Whether s[0..n) is ASCII, eight bytes at a time: most names are, and need no UTF-8 check. */
static inline bool
is_ascii(const char *s, size_t n)
{
    uint64_t any = 0, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        any |= w;
    }
    for (; i < n; i++)
        any |= (uint8_t)s[i];
    return (any & 0x8080808080808080ULL) == 0;
}

/* s as protobuf string content, which must be UTF-8: an invalid byte becomes U+FFFD (a client's model). */
static void
put_utf8(sl_strbuf_t *b, const char *s, size_t n)
{
    if (is_ascii(s, n)) {
        put(b, s, n);
        return;
    }
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0, i = 0;
    while (i < n) {
        size_t len = u[i] < 0x80 ? 1 : sl_utf8_len(u + i, n - i);
        if (len == 0 || len == SL_UTF8_CUT) {
            put(b, s + i - run, run);
            put(b, "\xef\xbf\xbd", 3);
            run = 0;
            i++;
            continue;
        }
        run += len;
        i += len;
    }
    put(b, s + i - run, run);
}

/* Opens a length-delimited field: its tag and a one-byte length to fill in by close_len. */
static size_t
open_len(sl_strbuf_t *b, unsigned field)
{
    put_tag(b, field, WIRE_LEN);
    put(b, "", 1);
    return b->len;
}

static void
close_len(sl_strbuf_t *b, size_t start)
{
    size_t n = b->len - start, extra = varint_len(n) - 1;
    if (extra > 0) {
        put(b, "\0\0\0\0\0\0\0\0\0", extra); /* room */
        memmove(b->data + start + extra, b->data + start, n);
    }
    uint8_t *at = (uint8_t *)b->data + start - 1;
    while (n >= 0x80) {
        *at++ = (uint8_t)(n | 0x80);
        n >>= 7;
    }
    *at = (uint8_t)n;
}

static void
put_string(sl_strbuf_t *b, unsigned field, const char *s)
{
    size_t at = open_len(b, field);
    put_utf8(b, s, strlen(s));
    close_len(b, at);
}

/* Appends v as a varint to p; returns the end. */
INLINE uint8_t *
varint_at(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/*
 * KeyValue {key = 1, value = 2: AnyValue {string_value = 1 | bool_value = 2 | int_value = 3}} as field
 * `field`, its lengths worked out ahead (value: the AnyValue's one field, already encoded), so that an
 * attribute is one copy of its head and one of its value. The keys are this file's literals (KEY).
 */
INLINE void
put_kv(sl_strbuf_t *b, unsigned field, const char *key, size_t key_len, const uint8_t *value_head,
       size_t head_len, const char *value_tail, size_t tail_len)
{
    size_t any_len = head_len + tail_len;
    size_t kv_len = 1 + varint_len(key_len) + key_len + 1 + varint_len(any_len) + any_len;
    uint8_t head[96]; /* the longest key is 26 bytes */
    uint8_t *p = varint_at(head, (uint64_t)(field << 3 | WIRE_LEN));
    p = varint_at(p, kv_len);
    *p++ = 1 << 3 | WIRE_LEN;
    p = varint_at(p, key_len);
    memcpy(p, key, key_len);
    p += key_len;
    *p++ = 2 << 3 | WIRE_LEN;
    p = varint_at(p, any_len);
    memcpy(p, value_head, head_len);
    p += head_len;
    put(b, head, (size_t)(p - head));
    if (tail_len > 0)
        put(b, value_tail, tail_len);
}

#define KEY(lit) (lit), sizeof(lit) - 1

INLINE void
attr_str(sl_strbuf_t *b, unsigned field, const char *key, size_t key_len, const char *value)
{
    if (value == NULL || value[0] == '\0')
        return;
    size_t n = strlen(value);
    if (!is_ascii(value, n)) {
        /* Mended UTF-8 may be longer: written in place, lengths after. */
        size_t kv = open_len(b, field);
        put_bytes(b, 1, key, key_len);
        size_t any = open_len(b, 2);
        put_string(b, 1, value);
        close_len(b, any);
        close_len(b, kv);
        return;
    }
    uint8_t head[12];
    uint8_t *p = head;
    *p++ = 1 << 3 | WIRE_LEN;
    p = varint_at(p, n);
    put_kv(b, field, key, key_len, head, (size_t)(p - head), value, n);
}

INLINE void
attr_int(sl_strbuf_t *b, unsigned field, const char *key, size_t key_len, int64_t value)
{
    uint8_t head[12];
    uint8_t *p = head;
    *p++ = 3 << 3 | WIRE_VARINT;
    p = varint_at(p, (uint64_t)value);
    put_kv(b, field, key, key_len, head, (size_t)(p - head), NULL, 0);
}

INLINE void
attr_bool(sl_strbuf_t *b, unsigned field, const char *key, size_t key_len, bool value)
{
    const uint8_t head[2] = {2 << 3 | WIRE_VARINT, value};
    put_kv(b, field, key, key_len, head, 2, NULL, 0);
}

/* A string array of one value: KeyValue {key, value: AnyValue {array_value = 5: ArrayValue {values = 1}}}. */
static void
attr_one_string_array(sl_strbuf_t *b, unsigned field, const char *key, size_t key_len, const char *value)
{
    if (value[0] == '\0')
        return;
    size_t kv = open_len(b, field);
    put_bytes(b, 1, key, key_len);
    size_t any = open_len(b, 2);
    size_t array = open_len(b, 5);
    size_t element = open_len(b, 1);
    put_string(b, 1, value);
    close_len(b, element);
    close_len(b, array);
    close_len(b, any);
    close_len(b, kv);
}

/* Span fields. */
enum {
    SPAN_TRACE_ID = 1,
    SPAN_SPAN_ID = 2,
    SPAN_PARENT_SPAN_ID = 4,
    SPAN_NAME = 5,
    SPAN_KIND = 6,
    SPAN_START = 7,
    SPAN_END = 8,
    SPAN_ATTRIBUTES = 9,
    SPAN_EVENTS = 11,
    SPAN_STATUS = 15,
};

/* The fields every span has before its attributes: ids, "{operation} {model}" as its name, kind, times. */
static void
span_head(sl_strbuf_t *b, const uint8_t trace_id[16], const uint8_t span_id[8], const uint8_t *parent,
          const char *operation, const char *model, int kind, int64_t start_ns, int64_t end_ns)
{
    put_bytes(b, SPAN_TRACE_ID, trace_id, 16);
    put_bytes(b, SPAN_SPAN_ID, span_id, 8);
    if (parent != NULL)
        put_bytes(b, SPAN_PARENT_SPAN_ID, parent, 8);
    size_t name = open_len(b, SPAN_NAME);
    put_utf8(b, operation, strlen(operation));
    if (model[0] != '\0') {
        put(b, " ", 1);
        put_utf8(b, model, strlen(model));
    }
    close_len(b, name);
    put_uint_field(b, SPAN_KIND, (uint64_t)kind);
    put_fixed64(b, SPAN_START, start_ns);
    put_fixed64(b, SPAN_END, end_ns > start_ns ? end_ns : start_ns);
}

/* Status {message = 2, code = 3}: ERROR (2) with the error's slug; nothing (UNSET) when it did not fail. */
static void
span_status(sl_strbuf_t *b, const char *error_type)
{
    if (error_type[0] == '\0')
        return;
    size_t st = open_len(b, SPAN_STATUS);
    put_string(b, 2, error_type);
    put_uint_field(b, 3, 2);
    close_len(b, st);
}

/* Span.Event {time_unix_nano = 1, name = 2, attributes = 3} */
static void
encode_events(const sl_request_span_t *s, sl_strbuf_t *b)
{
    for (size_t i = 0; i < s->n_events; i++) {
        const sl_span_event_t *e = &s->events[i];
        size_t ev = open_len(b, SPAN_EVENTS);
        put_fixed64(b, 1, e->unix_ns);
        put_bytes(b, 2, event_names[e->kind], strlen(event_names[e->kind]));
        if (e->kind == SL_SPAN_EVENT_BACKOFF && e->value_ms >= 0)
            attr_int(b, 3, KEY("sluice.backoff_ms"), e->value_ms);
        close_len(b, ev);
    }
}

static void
encode_request(const sl_request_span_t *s, sl_strbuf_t *b)
{
    size_t span = open_len(b, 2); /* ScopeSpans.spans */
    span_head(b, s->trace_id, s->span_id, s->has_parent ? s->parent_span_id : NULL, s->operation,
              s->request_model, SPAN_KIND_SERVER, s->start_ns, s->end_ns);
    attr_str(b, SPAN_ATTRIBUTES, KEY("gen_ai.operation.name"), s->operation);
    attr_str(b, SPAN_ATTRIBUTES, KEY("gen_ai.provider.name"), s->genai_provider);
    attr_str(b, SPAN_ATTRIBUTES, KEY("gen_ai.request.model"), s->request_model);
    attr_str(b, SPAN_ATTRIBUTES, KEY("gen_ai.response.model"), s->response_model);
    attr_one_string_array(b, SPAN_ATTRIBUTES, KEY("gen_ai.response.finish_reasons"), s->finish_reason);
    attr_bool(b, SPAN_ATTRIBUTES, KEY("gen_ai.request.stream"), s->stream);
    if (s->has_usage) {
        attr_int(b, SPAN_ATTRIBUTES, KEY("gen_ai.usage.input_tokens"), s->input_tokens);
        attr_int(b, SPAN_ATTRIBUTES, KEY("gen_ai.usage.output_tokens"), s->output_tokens);
    }
    if (s->status > 0)
        attr_int(b, SPAN_ATTRIBUTES, KEY("http.response.status_code"), s->status);
    attr_str(b, SPAN_ATTRIBUTES, KEY("error.type"), s->error_type);
    attr_str(b, SPAN_ATTRIBUTES, KEY("sluice.wait.gate"), s->wait_gate);
    attr_str(b, SPAN_ATTRIBUTES, KEY("sluice.client"), s->client);
    attr_int(b, SPAN_ATTRIBUTES, KEY("sluice.request.id"), (int64_t)s->request_id);
    encode_events(s, b);
    span_status(b, s->error_type);
    close_len(b, span);
}

static void
encode_attempt(const sl_request_span_t *s, const sl_attempt_span_t *a, sl_strbuf_t *b)
{
    size_t span = open_len(b, 2);
    span_head(b, s->trace_id, a->span_id, s->span_id, s->operation,
              a->model[0] != '\0' ? a->model : a->provider, SPAN_KIND_CLIENT, a->start_ns, a->end_ns);
    attr_str(b, SPAN_ATTRIBUTES, KEY("gen_ai.operation.name"), s->operation);
    attr_str(b, SPAN_ATTRIBUTES, KEY("gen_ai.provider.name"), a->genai_provider);
    attr_str(b, SPAN_ATTRIBUTES, KEY("gen_ai.request.model"), a->model);
    attr_str(b, SPAN_ATTRIBUTES, KEY("server.address"), a->server_address);
    if (a->server_port > 0)
        attr_int(b, SPAN_ATTRIBUTES, KEY("server.port"), a->server_port);
    if (a->status > 0)
        attr_int(b, SPAN_ATTRIBUTES, KEY("http.response.status_code"), a->status);
    attr_str(b, SPAN_ATTRIBUTES, KEY("error.type"), a->error_type);
    attr_str(b, SPAN_ATTRIBUTES, KEY("sluice.provider"), a->provider);
    attr_int(b, SPAN_ATTRIBUTES, KEY("sluice.attempt.retry"), a->retry);
    if (a->pause_ms >= 0)
        attr_int(b, SPAN_ATTRIBUTES, KEY("sluice.attempt.pause_ms"), a->pause_ms);
    attr_str(b, SPAN_ATTRIBUTES, KEY("sluice.attempt.outcome"), a->outcome);
    attr_str(b, SPAN_ATTRIBUTES, KEY("sluice.attempt.reason"), a->reason);
    span_status(b, a->error_type);
    close_len(b, span);
}

void
sl_otlp_encode(const sl_request_span_t *const *spans, size_t n, const char *service_name,
               const char *service_version, sl_strbuf_t *out)
{
    size_t resource_spans = open_len(out, 1); /* ExportTraceServiceRequest.resource_spans */
    size_t resource = open_len(out, 1);       /* ResourceSpans.resource */
    attr_str(out, 1, KEY("service.name"), service_name);
    attr_str(out, 1, KEY("service.version"), service_version);
    close_len(out, resource);
    size_t scope_spans = open_len(out, 2); /* ResourceSpans.scope_spans */
    size_t scope = open_len(out, 1); /* ScopeSpans.scope: InstrumentationScope {name = 1, version = 2} */
    put_string(out, 1, "sluice");
    put_string(out, 2, service_version);
    close_len(out, scope);
    for (size_t i = 0; i < n; i++) {
        encode_request(spans[i], out);
        for (size_t k = 0; k < spans[i]->n_attempts; k++)
            encode_attempt(spans[i], &spans[i]->attempts[k], out);
    }
    close_len(out, scope_spans);
    close_len(out, resource_spans);
    sl_strbuf_append(out, "", 0); /* the NUL put() leaves out (the bytes may hold NULs of their own) */
}
