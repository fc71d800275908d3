/*
 * Prometheus metrics kept by the data plane itself (observability.md):
 * per-worker counters that only their worker writes (a relaxed load and
 * store: no lock, no allocation, no shared cache line), summed when
 * /metrics is scraped. They never come from the request DB, so they stay
 * exact while its writer is blocked.
 *
 * Label values are bounded: providers and routes are named by slots that
 * a name keeps for the life of the process (a config reload that renames a
 * provider gets a new slot; past SL_METRICS_NAMES names, new ones count
 * under "other"), and the token and cost families' upstream models: the
 * first SL_METRICS_NAMES distinct models keep their own, later ones count
 * as model "other" (and past SL_METRICS_MODELS (provider, model) pairs,
 * provider "other" too).
 */
#ifndef SL_METRICS_H
#define SL_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/rescue.h"
#include "core/types.h"
#include "core/xalloc.h"

#define SL_METRICS_NAMES  64  /* provider and route slots each; slot SL_METRICS_NAMES is "other" */
#define SL_METRICS_MODELS 256 /* (provider, model) pairs; slot SL_METRICS_MODELS is model "other" */

/* sluice_requests_total's status_class. */
typedef enum {
    SL_STATUS_CLASS_2XX,
    SL_STATUS_CLASS_4XX,
    SL_STATUS_CLASS_5XX,
    SL_STATUS_CLASS_429,
    SL_STATUS_CLASS_ABORTED,
    SL_STATUS_CLASS_COUNT
} sl_status_class_t;

/* The class of what a client got: aborted when it left or was cancelled, 429 apart from the other 4xx. */
sl_status_class_t sl_status_class(int status, bool aborted);

/* sluice_upstream_attempts_total's outcome. */
#define SL_ATTEMPT_LABELS(X)                                                                                 \
    X(OK, "ok")                                                                                              \
    X(TEMPORARY, "temporary")                                                                                \
    X(RATE_LIMITED, "rate_limited")                                                                          \
    X(QUOTA, "quota")                                                                                        \
    X(AUTH, "auth")                                                                                          \
    X(REQUEST_ERROR, "request_error")                                                                        \
    X(NOT_FOUND, "not_found")                                                                                \
    X(BROKEN_AFTER_CONTENT, "broken_after_content")                                                          \
    X(TIMEOUT, "timeout")                                                                                    \
    X(CONNECT, "connect")                                                                                    \
    X(STALE_CONNECTION, "stale_connection")                                                                  \
    X(HEDGE_LOST, "hedge_lost")                                                                              \
    X(CANCELLED, "cancelled")                                                                                \
    X(OTHER, "other")

typedef enum {
#define SL_ATTEMPT_LABEL_ENUM(name, slug) SL_ATTEMPT_##name,
    SL_ATTEMPT_LABELS(SL_ATTEMPT_LABEL_ENUM)
#undef SL_ATTEMPT_LABEL_ENUM
        SL_ATTEMPT_LABEL_COUNT
} sl_attempt_label_t;

const char *sl_attempt_label_slug(sl_attempt_label_t label);

/* A failed hop's label: a stale keep-alive, a connect failure, a timeout and a break after content by where
 * the failure came from; the rest by its class. */
sl_attempt_label_t sl_attempt_label_of_failure(sl_failure_class_t cls, sl_failure_source_t source,
                                               bool stale);

/* sluice_waiting_requests' and sluice_wait_seconds' gate. */
typedef enum {
    SL_GATE_THROTTLED,
    SL_GATE_WINDOW_FULL,
    SL_GATE_SLOTS,
    SL_GATE_KEY_WINDOW,
    SL_GATE_COUNT
} sl_gate_t;

/* The gate's label value ("throttled", "window_full", "slots", "key_window"). */
const char *sl_gate_slug(sl_gate_t gate);

/* The gate of a skip a request waits at (throttled, window_full, busy, key_window); SL_GATE_COUNT for others.
 */
sl_gate_t sl_gate_of_skip(sl_skip_t skip);

typedef struct sl_metrics sl_metrics_t;
typedef struct sl_metrics_worker sl_metrics_worker_t;

/* The registry of slots and worker blocks; one per process. */
sl_metrics_t *sl_metrics_new(void);
void sl_metrics_free(sl_metrics_t *m);

/* A worker's block (zeroed), owned by m: only that worker's thread writes it. */
sl_metrics_worker_t *sl_metrics_add_worker(sl_metrics_t *m);

/* The slot a provider or route name keeps (thread-safe; "other" past the cap). For a config snapshot. */
uint16_t sl_metrics_provider_slot(sl_metrics_t *m, const char *name);
uint16_t sl_metrics_route_slot(sl_metrics_t *m, const char *match);
/* The slot of the route "models" (no routes section: the providers' models decided). */
uint16_t sl_metrics_models_route_slot(sl_metrics_t *m);

/*
 * The slot of an upstream model under a provider slot, for the token and cost families: lock-free once a
 * pair has its slot (a scan of the pairs seen), a lock only to give a new pair its slot.
 */
uint16_t sl_metrics_model_slot(sl_metrics_t *m, uint16_t provider, const char *model);

/* ---- what the data plane counts (on its worker, into its own block) ---- */

typedef struct {
    sl_dialect_t dialect;
    uint16_t route;
    int status;
    bool aborted;
    sl_rescue_verdict_t verdict;
    sl_trouble_t trouble;
    int64_t duration_us;
} sl_metrics_request_t;

void sl_metrics_request(sl_metrics_worker_t *w, const sl_metrics_request_t *r);
void sl_metrics_attempt(sl_metrics_worker_t *w, uint16_t provider, sl_attempt_label_t label);
void sl_metrics_retry_round(sl_metrics_worker_t *w, uint16_t route);
/* A first-token hedge of provider's hop was settled: the hedge won (its content came first) or lost. */
void sl_metrics_hedge(sl_metrics_worker_t *w, uint16_t provider, bool won);
void sl_metrics_ttft(sl_metrics_worker_t *w, uint16_t provider, int64_t ttft_us);
void sl_metrics_waited(sl_metrics_worker_t *w, sl_gate_t gate, int64_t waited_us);
void sl_metrics_overhead(sl_metrics_worker_t *w, int64_t overhead_ns);
/* tokens: input, output, cache_read, cache_write. */
void sl_metrics_usage(sl_metrics_worker_t *w, uint16_t model_slot, const uint64_t tokens[4],
                      int64_t cost_micros);

/* ---- the stats topic's counts (the control thread, every interval) ---- */

#define SL_METRICS_TTFT_BUCKETS 13 /* sluice_time_to_first_token_seconds' bounds, plus +Inf */

/* One provider slot's counters, cumulative since start. */
typedef struct {
    char name[128];
    uint64_t requests;     /* hops, every outcome */
    uint64_t temporary;    /* temporary, timeout, connect, broken_after_content */
    uint64_t rate_limited; /* 429s */
    uint64_t ttft[SL_METRICS_TTFT_BUCKETS];
    uint64_t input_tokens, output_tokens;
} sl_metrics_provider_counts_t;

typedef struct {
    sl_metrics_provider_counts_t providers[SL_METRICS_NAMES + 1]; /* slot order; the last is "other" */
    size_t n_providers;                                           /* the slots named so far, then "other" */
    uint64_t rescued[SL_TROUBLE_COUNT], lost[SL_TROUBLE_COUNT];   /* every route */
} sl_metrics_counts_t;

/* The workers' counters summed, as the stats need them (out is overwritten). */
void sl_metrics_counts(sl_metrics_t *m, sl_metrics_counts_t *out);

/* sluice_time_to_first_token_seconds' bucket bounds (SL_METRICS_TTFT_BUCKETS - 1 of them), in seconds. */
const double *sl_metrics_ttft_bounds(void);

/* ---- a scrape ---- */

/* One upstream as it stands at the scrape (the shell reads it from the shared state). */
typedef struct {
    const char *name;
    uint16_t slot;
    int health;            /* 0 ok, 1 half-open, 2 open */
    bool paused, manual;   /* paused after a 429 (or probing: not paused); paused by an operator */
    uint32_t queued;       /* requests in its line */
    sl_gate_t queued_gate; /* what they wait for */
    uint32_t in_flight;
} sl_metrics_upstream_t;

/* One usage limit's fill. */
typedef struct {
    const char *target_kind; /* provider, client */
    const char *target;
    const char *per, *measure; /* minute…month; requests, tokens, cost */
    uint32_t every;
    double used_ratio;
} sl_metrics_limit_t;

typedef struct {
    const sl_metrics_upstream_t *upstreams;
    size_t n_upstreams;
    const sl_metrics_limit_t *limits;
    size_t n_limits;
    uint32_t key_queued; /* requests waiting in client keys' lines */
    uint32_t control_subscribers;
    uint64_t events_dropped, db_rows_dropped;
    bool db_spool; /* the request DB is PostgreSQL: its spool's gauges are shown */
    uint64_t db_rows_spooled, db_spool_bytes;
    uint64_t spans_exported, spans_dropped; /* OpenTelemetry traces (tracer.h) */
    bool cluster;                           /* cluster mode: sluice_cluster_state is shown */
    int cluster_state;                      /* 0 alone, 1 joined, 2 degraded */
} sl_metrics_scrape_t;

/* The whole /metrics text (every family of observability.md, # HELP and # TYPE first): the workers summed,
 * the scrape's gauges. */
void sl_metrics_render(sl_metrics_t *m, const sl_metrics_scrape_t *s, sl_strbuf_t *out);

#endif
