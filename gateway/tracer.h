/*
 * The OpenTelemetry span exporter (observability.md, config.md `telemetry`):
 * finished requests' spans wait in a bounded queue and one exporter thread
 * sends them in batches over OTLP/HTTP in its protobuf encoding (POST
 * {otlp_endpoint}/v1/traces, application/x-protobuf: OTLP's default, which
 * every collector takes, and a third of the JSON's size and cost).
 * The data plane only hands a record over under a mutex that is never held
 * across IO; a full queue drops the record and counts its spans, so a slow
 * or absent collector costs requests nothing. A batch the collector does
 * not take is dropped and counted too (no retry: traces are best effort).
 */
#ifndef SL_TRACER_H
#define SL_TRACER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/otlp.h"

#define SL_TRACER_QUEUE      4096 /* requests waiting for the exporter */
#define SL_TRACER_BATCH      512  /* requests per POST at most */
#define SL_TRACER_DELAY_MS   1000 /* longest a record waits for its batch */
#define SL_TRACER_TIMEOUT_MS 5000 /* connect, send and the collector's answer, each */

typedef struct sl_tracer sl_tracer_t;

/* An idle exporter: no thread until it is given an endpoint. */
sl_tracer_t *sl_tracer_new(void);

/*
 * Where spans go from now on (strings copied): an http:// or https:// URL
 * whose path gets /v1/traces unless it ends with it; NULL stops exporting
 * (what is queued is dropped and counted). Starts the thread the first time.
 * For config loads and reloads.
 */
void sl_tracer_configure(sl_tracer_t *t, const char *otlp_endpoint, const char *service_name);

/* Hands a finished request's record over (taken: freed here or by the exporter). False when dropped. */
bool sl_tracer_submit(sl_tracer_t *t, sl_request_span_t *span);

typedef struct {
    uint64_t exported; /* spans the collector accepted */
    uint64_t dropped;  /* spans dropped: a full queue, a failed export, or no endpoint */
} sl_tracer_stats_t;

void sl_tracer_stats(sl_tracer_t *t, sl_tracer_stats_t *out);

/* Sends what is queued (for up to SL_TRACER_TIMEOUT_MS), stops the thread and frees t. NULL does nothing. */
void sl_tracer_free(sl_tracer_t *t);

#endif
