/*
 * Per-upstream state shared by every worker: the keep-alive pool, the
 * breaker, the requests in flight. Keyed by provider name, so a reload keeps
 * the state of upstreams that keep their name (config.md, hot reload).
 */
#ifndef SL_UPSTREAM_H
#define SL_UPSTREAM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <h2o.h>
#include <h2o/socketpool.h>

#include "config.h"
#include "core/breaker.h"
#include "core/probe_turn.h"
#include "core/throttle.h"
#include "waitq.h"

typedef struct {
    char *name;
    /* Shared by all threads (h2o locks it); replaced when the base URL's origin changes. */
    h2o_socketpool_t *pool;
    bool pool_ready; /* h2o_socketpool_set_timeout has run (on the loop of the first hop) */
    bool by_address; /* the base URL names an IP address, not a host */
    char *origin;    /* "https://host:port" of the pool */
    /* The shared state of this process (shared_local.c) keeps these, under the wait lock (waitq.h). */
    sl_throttle_t throttle;
    sl_probe_turn_t probe_turn; /* a cluster's: the probe's turn among instances */
    sl_claim_turn_t claim_turn; /* a cluster's: a freed slot's or room's turn among instances */
    bool waiting_elsewhere;     /* a cluster's: requests wait for it on another instance (last heartbeats) */
    sl_waitq_t waitq;
    bool dispatching;     /* a request just released from the queue is being sent: the next waits for it */
    pthread_mutex_t lock; /* guards what follows */
    sl_breaker_t breaker;
    uint32_t in_flight;       /* slots taken (shared_local.c) */
    atomic_uint metrics_slot; /* its provider slot in metrics.h, plus one; 0 until first asked */
} sl_upstream_t;

typedef struct sl_upstreams sl_upstreams_t;

sl_upstreams_t *sl_upstreams_new(void);

/*
 * The shared state of every provider of config, in config order (created on
 * first sight). Returns an array the caller frees with free(); the upstreams
 * themselves live as long as the registry. NULL when a base URL cannot be
 * parsed (the config loader accepts only parsable ones).
 */
sl_upstream_t **sl_upstreams_bind(sl_upstreams_t *reg, const sl_config_t *config);

/*
 * The upstream's pool (and whether it is named by address), ready for a connect from loop. h2o needs the
 * pool's idle-expiry timer set on some loop before the first connect, and a loop may only be touched from its
 * own thread: the first hop's worker sets it.
 */
h2o_socketpool_t *sl_upstream_pool(sl_upstream_t *up, h2o_loop_t *loop, bool *by_address);

/*
 * A reload changes the config: upstreams held because their credentials
 * were rejected get another chance (behaviour.md §8). on_change is called
 * for each one that was held (may be NULL).
 */
void sl_upstreams_clear_auth_holds(sl_upstreams_t *reg, void (*on_change)(const sl_upstream_t *up));

/* The upstream named name (it lives as long as the registry), or NULL when none has that name. */
sl_upstream_t *sl_upstreams_find(sl_upstreams_t *reg, const char *name);

/* Every request waiting for any upstream is woken to decide again (the gateway is shutting down). */
void sl_upstreams_wake_all(sl_upstreams_t *reg);

/* Frees the registry and every upstream in it, once no worker and no request uses them. */
void sl_upstreams_free(sl_upstreams_t *reg);

/* Idle keep-alive connections to an upstream are closed after this long. */
#define SL_UPSTREAM_IDLE_KEEPALIVE_MS 20000

#endif
