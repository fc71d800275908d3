/*
 * THE request state machine (behaviour.md §1-4, §9, §10): one enum, one
 * place that moves it. A request goes through its candidates one hop at a
 * time; a hop's answer is held until its first content where an early
 * failure could still fail over invisibly; the last candidate's answer is
 * handed over unchanged; everything ends in one row for the request DB.
 */
#ifndef SL_REQUEST_H
#define SL_REQUEST_H

#include <stdatomic.h>
#include <stdint.h>

#include <h2o.h>

#include "core/affinity.h"
#include "core/dialect.h"
#include "core/msg.h"
#include "core/retry.h"
#include "bus.h"
#include "recorder.h"
#include "metrics.h"
#include "shared_state.h"
#include "tracer.h"
#include "snapshot.h"
#include "worker.h"

/* The affinity table's shards: a key's top bits pick one. */
#define SL_AFFINITY_SHARD_BITS 4
#define SL_AFFINITY_SHARDS     (1u << SL_AFFINITY_SHARD_BITS)

/* What every request of the process shares. */
typedef struct {
    sl_bus_t *bus;           /* request and state events; built only while the bus is active */
    sl_recorder_t *recorder; /* NULL: rows are counted as dropped */
    atomic_uint_fast64_t next_id;
    atomic_uint_fast64_t balance_counter; /* load_balance start positions */
    atomic_uint_fast64_t rows_dropped;    /* rows that never reached the recorder */
    atomic_bool stopping;                 /* shutting down: new requests are refused */
    atomic_uint_fast64_t waiting_bytes;   /* bodies of all waiting requests (limits.max_waiting_bytes) */
    /*
     * Conversations and the upstream that served them (behaviour.md §1.5),
     * shared by all workers: in shards by key, each with its own lock on its
     * own cache line, so two workers rarely pass a lock between them.
     */
    struct {
        _Alignas(64) pthread_mutex_t lock;
        sl_affinity_t *table;
    } affinity[SL_AFFINITY_SHARDS];
    sl_hash_key_t affinity_key; /* secret, drawn at start: clients cannot aim at one hash bucket */
    /*
     * Unscaled, with jitter, in production. Tests set SLUICE_TEST_TIME_SCALE
     * (e.g. 0.01) to shrink the retry pauses, upstream hints and the 15 s
     * keep-alive, and to turn jitter off, so the suite stays fast.
     */
    sl_retry_params_t retry_params;
    /* Pauses, probes, slots, lines and usage windows (shared_state.h): this process's, or its cluster's. */
    sl_shared_state_t *shared;
    struct sl_cluster *cluster; /* the connection to the cluster's Redis (cluster.h); NULL: one process */
    sl_metrics_t *metrics;      /* /metrics: the workers' counters (metrics.h) */
    sl_tracer_t *tracer;        /* the span exporter (tracer.h): idle without telemetry.otlp_endpoint */
} sl_gateway_t;

/* The wake-up of a waiting request, on its worker's loop (the inbox callback of waitq.h). */
void sl_request_wake(void *owner);

/* The request's headers as the pure modules read them (valid while req is). */
sl_headers_t sl_request_headers(const h2o_req_t *req);

/*
 * Answers req with the gateway's own error in dialect's shape: status, the
 * x-sluice-error code header (and a type header where the dialect has one),
 * text as the message. Headers added before stay.
 */
void sl_request_send_error(h2o_req_t *req, sl_dialect_t dialect, int status, sl_code_t code,
                           const char *text);

/* Whether the client of req is on this machine (a loopback address, or the worker's internal socket). */
bool sl_request_peer_is_loopback(h2o_req_t *req);

/* Sets up what requests share; recorder may be NULL. The bus starts inactive. */
void sl_gateway_init(sl_gateway_t *gw, sl_recorder_t *recorder);

/*
 * Serves one client request on the worker's loop: intake, routing, hops,
 * the answer, on the snapshot of lease (one of io's), which the request
 * holds as its own user while it lives. Always answers (now or later) and
 * returns 0, as h2o handlers do.
 */
int sl_request_serve(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw, sl_snapshot_lease_t *lease);

/*
 * Records a request that h2o answered by itself before it reached
 * sl_request_serve (refusal.h rewrote the answer; nothing is sent here):
 * RequestStarted and RequestFailed with msg (borrowed), and a failed row
 * with status. The request lives in req's pool and holds lease (one of
 * io's) as its own user.
 */
void sl_request_record_refused(h2o_req_t *req, sl_worker_io_t *io, sl_gateway_t *gw,
                               sl_snapshot_lease_t *lease, int status, const sl_msg_t *msg);

/* Cancels the request id if it lives on this worker (its loop's thread only); else nothing. */
void sl_request_cancel(sl_worker_io_t *io, uint64_t id);

/* How long a request's events may stay held while nobody watches live (telemetry.c). */
#define SL_HELD_EVENTS_MS 50

/*
 * Builds the held events of all the worker's requests: called once per loop
 * turn while anyone watches live. Without that, a request's held events are
 * built once it has lived SL_HELD_EVENTS_MS (a timer of the worker's), so
 * that the in-flight log has every request anyone could look at.
 */
void sl_request_build_held_events(sl_worker_io_t *io);

#endif
