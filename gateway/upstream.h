/*
 * Per-upstream state shared by every worker: where it is (its peer; each
 * worker keeps its own idle connections to it, keepalive.h), the breaker,
 * the requests in flight. Keyed by provider name, so a reload keeps
 * the state of upstreams that keep their name (config.md, hot reload).
 */
#ifndef SL_UPSTREAM_H
#define SL_UPSTREAM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <h2o.h>

#include "config.h"
#include "core/breaker.h"
#include "core/probe_turn.h"
#include "core/throttle.h"
#include "hop.h"
#include "waitq.h"

typedef struct {
    char *name;
    /*
     * Read by every worker once per hop, without a lock (a lock taken for a
     * pointer passed its cache line between workers); replaced when the base
     * URL's origin changes, the old one kept until the registry goes.
     */
    _Atomic(sl_peer_t *) peer;
    char *origin; /* "https://host:port" of the peer */
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

/* Where the upstream's hops connect to now. It lives as long as the registry (a reload keeps the old one). */
const sl_peer_t *sl_upstream_peer(sl_upstream_t *up);

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

#endif
