/*
 * A finished request as OpenTelemetry spans (observability.md): one SERVER
 * span for the request, one CLIENT child span per hop that went upstream,
 * span events for queued, backoff and first_token, the GenAI semantic
 * convention attributes; and a batch of them encoded as an OTLP
 * ExportTraceServiceRequest in protobuf (opentelemetry-proto trace/v1). Plain data: every string is copied in
 * or is a static literal, so a record outlives the request and its config. Nothing here holds prompt or
 * answer text or a credential.
 */
#ifndef SL_OTLP_H
#define SL_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/xalloc.h"

#define SL_SPAN_EVENTS_MAX 8 /* later events of one request are counted, not kept */
#define SL_SPAN_TEXT_MAX   128

typedef enum { SL_SPAN_EVENT_QUEUED, SL_SPAN_EVENT_BACKOFF, SL_SPAN_EVENT_FIRST_TOKEN } sl_span_event_kind_t;

typedef struct {
    sl_span_event_kind_t kind;
    int64_t unix_ns;
    int64_t value_ms; /* backoff: the pause; queued: -1 */
} sl_span_event_t;

/* One hop: a CLIENT span, child of the request's. */
typedef struct {
    uint8_t span_id[8];
    int64_t start_ns, end_ns;              /* Unix time */
    const char *genai_provider;            /* gen_ai.provider.name: "anthropic", "openai", … (static) */
    char provider[SL_SPAN_TEXT_MAX];       /* sluice.provider: the configured name */
    char model[SL_SPAN_TEXT_MAX];          /* gen_ai.request.model: the model asked of this upstream */
    char server_address[SL_SPAN_TEXT_MAX]; /* server.address */
    uint16_t server_port;                  /* server.port */
    int status;                            /* http.response.status_code; 0 = no head came */
    uint32_t retry;                        /* sluice.attempt.retry: the retry round (0 = first) */
    int64_t pause_ms;                      /* sluice.attempt.pause_ms: queued before it; -1 = none */
    const char *outcome;                   /* sluice.attempt.outcome (static slug) */
    const char *reason;                    /* sluice.attempt.reason: the step after it (static), or NULL */
    char error_type[64];                   /* error.type: its failure's code slug; "" = none */
} sl_attempt_span_t;

/* One request: a SERVER span, child of the client's span when it sent a traceparent. */
typedef struct {
    uint8_t trace_id[16], span_id[8], parent_span_id[8];
    bool has_parent;
    int64_t start_ns, end_ns;              /* Unix time */
    uint64_t request_id;                   /* sluice.request.id */
    const char *operation;                 /* gen_ai.operation.name (static) */
    char request_model[SL_SPAN_TEXT_MAX];  /* gen_ai.request.model: as the client asked */
    char response_model[SL_SPAN_TEXT_MAX]; /* gen_ai.response.model: the serving upstream's; "" = none */
    const char *genai_provider;            /* the serving upstream's gen_ai.provider.name, or NULL */
    char finish_reason[32];                /* gen_ai.response.finish_reasons' one value; "" = none */
    char client[SL_SPAN_TEXT_MAX];         /* sluice.client: the key's name */
    bool stream;                           /* gen_ai.request.stream */
    int status;                            /* http.response.status_code */
    bool has_usage;
    int64_t input_tokens, output_tokens; /* gen_ai.usage.*: input counts cached tokens too */
    char error_type[64];                 /* error.type: a code slug or the status; "" = it did not fail */
    const char *wait_gate;               /* sluice.wait.gate: what it first waited for, or NULL */
    sl_span_event_t events[SL_SPAN_EVENTS_MAX];
    size_t n_events;
    size_t n_attempts;
    sl_attempt_span_t attempts[]; /* n_attempts of them */
} sl_request_span_t;

/* A record with room for n_attempts (zeroed; free with free()). */
sl_request_span_t *sl_request_span_new(size_t n_attempts);

/* Appends an event, or does nothing when SL_SPAN_EVENTS_MAX are kept. */
void sl_span_add_event(sl_span_event_t *events, size_t *n_events, sl_span_event_kind_t kind, int64_t unix_ns,
                       int64_t value_ms);

/*
 * Appends one ExportTraceServiceRequest (protobuf bytes, which may hold
 * NULs: out->len counts them) holding spans[0..n) and their attempts under
 * one resource (service.name, service.version) and scope "sluice". A
 * request's span is named "{gen_ai.operation.name} {gen_ai.request.model}"
 * (the operation alone without a model); a hop's, by its upstream model.
 */
void sl_otlp_encode(const sl_request_span_t *const *spans, size_t n, const char *service_name,
                    const char *service_version, sl_strbuf_t *out);

#endif
