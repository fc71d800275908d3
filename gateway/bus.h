/*
 * The internal event bus (protocol.md "Streams"; stack-notes.md "Threading
 * shape"): every request state change becomes one typed protocol event.
 *
 *   worker loop:  sl_bus_emit(&batch, ev) ... sl_bus_emit(&batch, ev)   (no lock: the batch is the worker's)
 *   end of loop iteration:  sl_bus_flush(bus, &batch)   one mutex append, at most one wake-up
 *   control thread, woken:  sl_bus_drain(bus, on_event, ctx)   swap under the mutex, callbacks outside
 *
 * Events travel by value: emit and drain move a sl_proto_event_t's contents
 * (its strings and arrays) instead of copying them, so an event costs the
 * allocations of its own strings and nothing else.
 *
 * The data plane never waits for the consumer: the pending queue is capped,
 * and a flush into a full queue drops the oldest events (counted) to make
 * room. A bus nobody consumes (set inactive) frees what is flushed at once.
 *
 * The in-flight log (sl_inflight_t, pure) is the consumer's record of each
 * live request's events so far, for the snapshot's and get_in_flight's
 * InFlightRequest list.
 */
#ifndef SL_BUS_H
#define SL_BUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sl_proto.h"

#include "config.h"
#include "core/breaker.h"
#include "core/limits.h"
#include "core/throttle.h"
#include "core/msg.h"
#include "core/next_step.h"
#include "core/outcome.h"

/* The pending-queue cap the gateway uses: at most about 8 MB per buffer (a drain swaps two). */
#define SL_BUS_DEFAULT_CAP 65536

/* An optional integer argument of a builder is absent when negative. */
#define SL_BUS_ABSENT (-1)

/* ---- producers: the per-worker batch ---------------------------------------------------------- */

/* One worker's events of the current loop iteration, oldest first. Zero-initialise to start. */
typedef struct {
    sl_proto_event_t *items;
    size_t len, cap;
} sl_bus_batch_t;

/*
 * Appends *ev to the batch, moving its contents: afterwards *ev is zeroed
 * and owns nothing. Never fails (out of memory aborts).
 */
void sl_bus_emit(sl_bus_batch_t *batch, sl_proto_event_t *ev);

/* Frees the batch's events and storage (a worker that stops); the batch is empty and reusable. */
void sl_bus_batch_clear(sl_bus_batch_t *batch);

/* ---- the bus ---------------------------------------------------------------------------------- */

typedef struct sl_bus sl_bus_t;

/* The consumer's wake-up: called from a producer thread, outside the bus lock. */
typedef void (*sl_bus_wake_fn)(void *ctx);

/* Called once per drained event, in order, outside the bus lock. */
typedef void (*sl_bus_on_event_fn)(void *ctx, sl_proto_event_t *ev);

/*
 * A new bus holding at most cap pending events (0 is read as 1); it
 * starts inactive, with no wake-up. Returns NULL only when its mutex cannot
 * be created. Free with sl_bus_free.
 */
sl_bus_t *sl_bus_new(size_t cap);

/* Frees the bus and every pending event. No producer or consumer may use it any more. NULL is ignored. */
void sl_bus_free(sl_bus_t *bus);

/*
 * Whether anyone consumes the bus. Inactive, a flush frees its events and
 * the pending queue is emptied (those events are freed, not counted as
 * dropped). A control endpoint keeps the bus active even with no subscriber:
 * get_in_flight and a late subscriber's snapshot need an in-flight log that
 * saw the RequestStarted of every request anyone could look at (see
 * sl_bus_set_watched). Safe from any thread.
 */
void sl_bus_set_active(sl_bus_t *bus, bool active);

/* Whether the bus is active: a producer may skip building events when it is not. Any thread, no lock. */
bool sl_bus_is_active(const sl_bus_t *bus);

/*
 * Sets the hook a flush calls when the consumer should drain (see
 * sl_bus_wants_wake); fn NULL = no wake-up. ctx is borrowed and must
 * outlive the hook. Safe from any thread.
 */
void sl_bus_set_wake(sl_bus_t *bus, sl_bus_wake_fn fn, void *ctx);

/*
 * Whether the consumer wants a wake-up for every batch (eager: someone
 * watches live; the default) or drains on its own tick and needs waking
 * only before the queue fills (lazy: nobody subscribed, the events only
 * keep the in-flight table current). Safe from any thread.
 */
void sl_bus_set_eager(sl_bus_t *bus, bool eager);

/*
 * Whether anyone watches events live (a subscriber, the debug log): the
 * consumer says so before it answers a new subscriber. While nobody does, a
 * producer may hold a request's events unbuilt until anyone could look at
 * the request (telemetry.c). A new bus is watched. Safe from any thread.
 */
void sl_bus_set_watched(sl_bus_t *bus, bool watched);
bool sl_bus_is_watched(const sl_bus_t *bus);

/*
 * The wake-up rule of a flush that took the pending queue from `before` to
 * `after` events: eager, when it was empty; lazy, when it crossed a quarter
 * of the cap (a waking costs the consumer thread a context switch, which
 * at tens of thousands of requests a second is more than the events).
 */
bool sl_bus_wants_wake(bool eager, size_t before, size_t after, size_t cap);

/*
 * Moves every event of the batch into the bus under one lock and leaves the
 * batch empty (its storage kept for the next iteration). Never waits for the
 * consumer: when the pending queue would exceed the cap, the oldest events
 * are dropped and counted; the flushing thread frees them after unlocking,
 * so its extra work is at most proportional to what it flushed. Calls the
 * wake-up hook, outside the lock, as sl_bus_wants_wake says.
 */
void sl_bus_flush(sl_bus_t *bus, sl_bus_batch_t *batch);

/*
 * Takes every pending event, oldest first, and calls on_event(ctx, ev) for
 * each outside the lock. on_event may move an event's contents out (copy
 * *ev, then zero it); whatever it leaves is freed when it returns. Sets
 * *dropped (may be NULL) to the count of events dropped since the previous
 * drain: all of them were older than the first event delivered, so a
 * consumer that sees a non-zero count knows its stream has a gap right
 * there. Returns the count delivered. One consumer thread at a time;
 * on_event may flush into this bus (delivered by the next drain).
 */
size_t sl_bus_drain(sl_bus_t *bus, sl_bus_on_event_fn on_event, void *ctx, uint64_t *dropped);

/* Events dropped because the pending queue was full, since the bus was made. Any thread, no lock. */
uint64_t sl_bus_dropped(const sl_bus_t *bus);

/* ---- building events -------------------------------------------------------------------------- */

/*
 * Each builder zeroes *out, fills it as a complete event of its kind with
 * at_ms (wall-clock ms since the Unix epoch) and returns out. Strings are
 * copied (the arguments stay the caller's); every copied string is made
 * valid UTF-8 (a bad byte becomes '?') because the protocol refuses
 * anything else and clients send arbitrary bytes. Free *out with
 * sl_proto_event_free, or hand it to sl_bus_emit.
 */

/* A protocol Msg from a gateway message: secrets scrubbed, only the args its text template names. */
sl_proto_msg_t sl_bus_msg_from(const sl_msg_t *msg);

/*
 * Whose fault a request the gateway answered with code was (RequestFailed's
 * source), from the code's family: gw.auth.* auth, gw.request.* /
 * gw.dialect.* / gw.not_found request, gw.route.* / gw.safe_mode config,
 * gw.upstream.* / gw.breaker.* upstream, anything else internal.
 */
sl_proto_failure_source_t sl_bus_failure_source(sl_code_t code);

/* RequestStarted's facts. */
typedef struct {
    uint64_t id;
    const char *client; /* the client key's name */
    const char *key;    /* the key the client presented, NULL = none; only its masked form is kept */
    sl_dialect_t dialect;
    const char *model;
    bool stream;
    const char *path; /* path and query as sent, path_len bytes; Gemini's `key=` is stripped */
    size_t path_len;
    const char *session;  /* the conversation's name, NULL = none */
    const char *instance; /* in cluster mode: this instance's name, else NULL */
} sl_bus_started_t;

sl_proto_event_t *sl_bus_request_started(sl_proto_event_t *out, int64_t at_ms, const sl_bus_started_t *s);

/* candidates: the upstream names in the order they will be tried; affinity NULL = none applied. */
sl_proto_event_t *sl_bus_request_routed(sl_proto_event_t *out, int64_t at_ms, uint64_t id, const char *route,
                                        const char *const *candidates, size_t n_candidates,
                                        const sl_proto_affinity_t *affinity);

/* One hop that ended, or a candidate skipped (AttemptView). */
typedef struct {
    const char *provider;
    const char *model; /* sent upstream; NULL = none */
    sl_hop_outcome_t outcome;
    int status;              /* the upstream's HTTP status; <= 0 = no head arrived */
    const sl_msg_t *error;   /* NULL = none */
    int64_t ms;              /* the hop's duration */
    int64_t pause_ms;        /* queued before the hop; SL_BUS_ABSENT = not queued */
    int64_t retry;           /* 1-based retry round; SL_BUS_ABSENT = first round */
    int64_t backoff_ms;      /* the pause before the round, first hop only; SL_BUS_ABSENT = none */
    sl_skip_t skip;          /* read only when outcome is SL_HOP_SKIPPED */
    bool has_reason;         /* a failed hop: why the request went on as it did */
    sl_step_reason_t reason; /* read only with has_reason */
    bool hedge;              /* a first-token hedge's hop (behaviour.md §4) */
} sl_bus_attempt_t;

/* The protocol's spelling of a hop outcome, a skip (SL_SKIP_NONE is none) and a step reason. */
sl_proto_outcome_t sl_bus_outcome(sl_hop_outcome_t outcome);
sl_proto_serve_skip_t sl_bus_serve_skip(sl_skip_t skip);
sl_proto_step_reason_t sl_bus_step_reason(sl_step_reason_t reason);

sl_proto_event_t *sl_bus_attempt(sl_proto_event_t *out, int64_t at_ms, uint64_t id,
                                 const sl_bus_attempt_t *a);

sl_proto_event_t *sl_bus_request_headers(sl_proto_event_t *out, int64_t at_ms, uint64_t id, int status,
                                         int64_t ttfb_ms);

sl_proto_event_t *sl_bus_request_first_token(sl_proto_event_t *out, int64_t at_ms, uint64_t id,
                                             int64_t ttft_ms);

/* usage NULL = unknown (copied); cost_micros SL_BUS_ABSENT = unknown. */
sl_proto_event_t *sl_bus_request_finished(sl_proto_event_t *out, int64_t at_ms, uint64_t id, int status,
                                          uint64_t bytes, int64_t duration_ms, const sl_proto_usage_t *usage,
                                          int64_t cost_micros);

sl_proto_event_t *sl_bus_request_failed(sl_proto_event_t *out, int64_t at_ms, uint64_t id,
                                        sl_proto_failure_source_t source, const sl_msg_t *message,
                                        int64_t duration_ms);

sl_proto_event_t *sl_bus_request_cancelled(sl_proto_event_t *out, int64_t at_ms, uint64_t id,
                                           int64_t duration_ms);

/*
 * until_ms: wall-clock end of the hold (the breaker counts in monotonic ms:
 * convert), SL_BUS_ABSENT or SL_BREAKER_UNTIL_CLEARED = none known.
 * reason NULL = none.
 */
sl_proto_event_t *sl_bus_health_changed(sl_proto_event_t *out, int64_t at_ms, const char *provider,
                                        sl_breaker_state_t state, int64_t until_ms, const sl_msg_t *reason);

/*
 * HealthChanged for provider's breaker b as it is at mono / wall (its hold's
 * end shown in tz), with the reason of its state and cause.
 */
sl_proto_event_t *sl_bus_breaker_health(sl_proto_event_t *out, const char *provider, const sl_breaker_t *b,
                                        const sl_tz_t *tz, int64_t mono, int64_t wall);

/*
 * A retry round is scheduled (behaviour.md §5): the upstreams to be retried,
 * the 1-based round, when the pause ends and the request's deadline (wall
 * clock), whether a hint lengthened the pause, and the error that caused it.
 */
sl_proto_event_t *sl_bus_request_retrying(sl_proto_event_t *out, int64_t at_ms, uint64_t id,
                                          const char *const *upstreams, size_t n_upstreams, uint32_t attempt,
                                          int64_t retry_at_ms, int64_t until_ms, bool by_hint,
                                          const sl_msg_t *last_error);

/* What holds a queued request on one upstream (RequestQueued.gates). until_ms < 0 = unknown. */
typedef struct {
    const char *upstream;
    sl_skip_t skip;
    int64_t until_ms; /* wall clock */
} sl_bus_gate_t;

/* A request waits on the upstreams of gates (behaviour.md §6) until at most until_ms (its deadline, wall
 * clock). */
sl_proto_event_t *sl_bus_request_queued(sl_proto_event_t *out, int64_t at_ms, uint64_t id,
                                        const sl_bus_gate_t *gates, size_t n, int64_t until_ms);

/* What an upstream's Throttle is made of (ProviderView.throttle, ThrottleChanged). Times are wall clock. */
typedef struct {
    const sl_throttle_t *t;    /* its 429 / operator state; NULL = free */
    int64_t t_until_ms;        /* when what t shows ends; < 0 = not known */
    sl_limit_verdict_t limits; /* what its usage limits hold: OK, WINDOW_FULL or PERIOD_USED_UP */
    const sl_limit_t *limit;   /* the limit that holds (read when limits is not OK) */
    int64_t limits_until_ms;   /* when that limit has room again */
    const sl_tz_t *tz;         /* the zone the reason's "until" is written in (the config's) */
} sl_bus_throttle_facts_t;

/*
 * The Throttle an upstream named provider shows, or NULL when nothing holds
 * it: a 429 pause, its probe or an operator's pause first (that is what
 * holds it), else a full window or used-up period of its usage limits.
 * Free with sl_proto_throttle_free + free.
 */
sl_proto_throttle_t *sl_bus_throttle_view(const char *provider, const sl_bus_throttle_facts_t *f);

/* An upstream's throttle changed to view (taken; NULL = recovered). */
sl_proto_event_t *sl_bus_throttle_changed(sl_proto_event_t *out, int64_t at_ms, const char *provider,
                                          sl_proto_throttle_t *view);

/* This instance's part in its cluster changed (reason: why, when not joined; NULL = none). */
sl_proto_event_t *sl_bus_cluster_changed(sl_proto_event_t *out, int64_t at_ms, sl_proto_cluster_state_t state,
                                         uint32_t instances, const sl_msg_t *reason);

/* The usage limits of a provider or client key (target) named name were replaced by limits (n). */
sl_proto_event_t *sl_bus_limits_changed(sl_proto_event_t *out, int64_t at_ms, sl_proto_limit_target_t target,
                                        const char *name, const sl_limit_t *limits, size_t n);

sl_proto_event_t *sl_bus_request_dequeued(sl_proto_event_t *out, int64_t at_ms, uint64_t id,
                                          const char *upstream);

/* A new configuration (revision) was applied, from source. */
sl_proto_event_t *sl_bus_config_reloaded(sl_proto_event_t *out, int64_t at_ms, uint64_t revision,
                                         sl_proto_config_source_t source);

/* A configuration from source was rejected for problems (copied). */
sl_proto_event_t *sl_bus_config_rejected(sl_proto_event_t *out, int64_t at_ms,
                                         sl_proto_config_source_t source, const sl_msgs_t *problems);

sl_proto_event_t *sl_bus_rows_dropped(sl_proto_event_t *out, int64_t at_ms, uint64_t count);

/*
 * The request DB went degraded (PostgreSQL unreachable: rows go to the
 * spool file) or back to ok; postgres false = SQLite. reason: why it is
 * degraded, NULL = none; copied, with secrets scrubbed (a connection
 * string's password), the argument stays the caller's. spooled_rows: the
 * rows waiting in the spool file, SL_BUS_ABSENT = not known.
 */
sl_proto_event_t *sl_bus_store_changed(sl_proto_event_t *out, int64_t at_ms, bool degraded, bool postgres,
                                       const char *reason, int64_t spooled_rows);

/* ---- views ---------------------------------------------------------------------------------- */

/* An upstream's live state, read by the caller under its locks (ProviderView). */
typedef struct {
    const sl_provider_t *provider;
    sl_breaker_state_t health;
    sl_bus_throttle_facts_t throttle;
    const sl_limit_view_t *limits;
    size_t n_limits;
    uint32_t in_flight, queued;
} sl_bus_provider_facts_t;

/* Fills *out (zeroed first) as the ProviderView of f; free it with sl_proto_provider_view_free. */
void sl_bus_provider_view(sl_proto_provider_view_t *out, const sl_bus_provider_facts_t *f);

/*
 * Whether a throttle holds the upstream back as a pause: after a 429, while
 * its probe is out, or by hand (a usage limit's hold is not one). NULL: no.
 */
bool sl_bus_throttle_is_pause(const sl_proto_throttle_t *t);

/* ---- the in-flight log (pure; the consumer's) -------------------------------------------------- */

/*
 * Each live request's events so far, in order, RequestStarted first; kept
 * from the drained stream. A request is known from its RequestStarted and
 * forgotten at RequestFinished / RequestFailed / RequestCancelled. Request
 * ids are never 0.
 */
typedef struct sl_inflight sl_inflight_t;

/* An empty log; never NULL (out of memory aborts). */
sl_inflight_t *sl_inflight_new(void);

/* Frees the log and every event in it. NULL is ignored. */
void sl_inflight_free(sl_inflight_t *log);

/*
 * Applies one drained event. A RequestStarted of a new id opens its entry;
 * a later request event of a known id is appended. Either way the log takes
 * the event's contents (*ev is zeroed) and true is returned. A request's
 * last event closes its entry, freeing what it held; that event, and every
 * other (non-request events, an unknown id, a repeated RequestStarted), is
 * left untouched in *ev with false returned. Encode an event for
 * subscribers before applying it.
 */
bool sl_inflight_apply(sl_inflight_t *log, sl_proto_event_t *ev);

/* Whether request id is live. */
bool sl_inflight_has(const sl_inflight_t *log, uint64_t id);

/* The number of live requests. */
size_t sl_inflight_count(const sl_inflight_t *log);

/*
 * Forgets requests whose newest event is older than cutoff_ms (wall clock):
 * after the bus dropped events a request's end may be lost, and this bounds
 * how long it lingers. Returns how many were forgotten.
 */
size_t sl_inflight_expire(sl_inflight_t *log, int64_t cutoff_ms);

/*
 * Sets *out to a new array of every live request, by id, and returns its
 * length (*out is NULL when 0). The array is the caller's (free(*out)); the
 * events it points to are the log's, valid until the log next changes:
 * encode them (e.g. in a snapshot), never free them with
 * sl_proto_in_flight_request_free.
 */
size_t sl_inflight_view(const sl_inflight_t *log, sl_proto_in_flight_request_t **out);

#endif
