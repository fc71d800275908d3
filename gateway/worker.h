/*
 * What a worker thread offers the code running on its loop: the loop, the
 * timer heap the loop sleeps on, and what upstream connections need.
 */
#ifndef SL_WORKER_H
#define SL_WORKER_H

#include <stdint.h>

#include <h2o.h>
#include <openssl/ssl.h>

#include "bus.h"
#include "core/timerheap.h"
#include "keepalive.h"
#include "snapshot_lease.h"
#include "waitq.h"
#include "watch.h"

typedef struct {
    h2o_loop_t *loop;
    sl_timerheap_t timers;
    SSL_CTX *upstream_ssl;            /* verifies upstream certificates and host names (tls.h) */
    SSL_CTX *upstream_ssl_by_address; /* the same for upstreams named by an IP address (TLS 1.3 only) */
    sl_keepalive_t keepalive;         /* this worker's idle upstream connections */
    h2o_multithread_receiver_t getaddr_receiver;
    sl_bus_batch_t events;   /* this loop iteration's events, flushed to the bus once per iteration */
    sl_watch_t *watch;       /* HTTP/1.1 clients that leave before their response starts */
    sl_waitq_inbox_t *inbox; /* wake-ups of this worker's waiting requests */
    struct sl_shared_inbox *shared_inbox; /* answers of the shared state made on another thread */
    struct sl_cluster_lane
        *cluster_lane;          /* this worker's own connection to the cluster's Redis; NULL: none */
    struct sl_peer *turns_peer; /* this worker's internal socket: Responses WebSocket turns (wsturns.h) */
    h2o_linklist_t requests;    /* this worker's live requests (an operator may cancel one by id) */
    h2o_linklist_t held_events; /* live requests whose events are held unbuilt, oldest first (telemetry.c) */
    sl_timer_t held_events_timer;      /* when the oldest of them has held its events long enough */
    struct sl_metrics_worker *metrics; /* this worker's counters (metrics.h): only this thread writes them */
    sl_snapshot_cache_t snapshots;     /* this worker's leases on the config snapshots (snapshot.h) */
} sl_worker_io_t;

/* Monotonic milliseconds: the clock of every timer and deadline. */
int64_t sl_now_ms(void);

/* Wall-clock milliseconds since the Unix epoch: the clock of events, rows and usage windows. */
int64_t sl_wall_ms(void);

/* Monotonic nanoseconds: the clock of sluice_overhead_seconds. Read at every call, never per turn. */
int64_t sl_now_ns(void);

/*
 * A worker's loop begins a turn: until the next one, sl_now_ms and sl_wall_ms
 * on this thread return what they first read in it (clock.c). Called around
 * every wait of the loop, so no reading outlives a sleep.
 */
void sl_clock_new_turn(void);

#endif
