/*
 * The running configuration as an immutable, refcounted snapshot. Workers
 * acquire the current snapshot when a request starts and release it when the
 * request ends, so a reload never changes a request in flight; the last
 * release frees the old config.
 */
#ifndef SL_SNAPSHOT_H
#define SL_SNAPSHOT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "core/dialect.h"
#include "limiter.h"
#include "snapshot_lease.h"
#include "upstream.h"

typedef struct sl_snapshot {
    sl_config_t *config;       /* owned by the snapshot */
    sl_upstream_t **upstreams; /* the shared state of config->providers[i]; the array is owned */
    sl_provider_head_t *heads; /* config->providers[i]'s request head lines, built once; owned */
    sl_limit_sets_t limits;    /* the usage limits of providers and client keys; the arrays are owned */
    bool safe_mode;            /* the file was invalid: serve nothing but errors */
    atomic_uint refs;
} sl_snapshot_t;

typedef struct sl_snapshot_holder {
    pthread_mutex_t lock;
    sl_snapshot_t *current;
    atomic_uint generation; /* bumped by each publish: a worker's cue to take the new snapshot */
} sl_snapshot_holder_t;

/*
 * Starts a holder with a first snapshot; takes ownership of config, the
 * upstreams array (may be NULL) and the arrays of limits (may be zero).
 */
void sl_snapshot_holder_init(sl_snapshot_holder_t *holder, sl_config_t *config, sl_upstream_t **upstreams,
                             sl_limit_sets_t limits, bool safe_mode);
/* Replaces the current snapshot, taking ownership as above. The old one lives until its last release. */
void sl_snapshot_publish(sl_snapshot_holder_t *holder, sl_config_t *config, sl_upstream_t **upstreams,
                         sl_limit_sets_t limits, bool safe_mode);
/* The current snapshot, with a reference the caller must release. */
sl_snapshot_t *sl_snapshot_acquire(sl_snapshot_holder_t *holder);
void sl_snapshot_release(sl_snapshot_t *snapshot);
/* Drops the holder's reference; snapshots still acquired stay valid until released. */
void sl_snapshot_holder_dispose(sl_snapshot_holder_t *holder);

/* The current snapshot's lease, with one more user; a publish since the last call moves to the new one. */
sl_snapshot_lease_t *sl_snapshot_lease(sl_snapshot_cache_t *cache);
/* One more user of a lease already held (by the same thread). */
void sl_snapshot_lease_hold(sl_snapshot_lease_t *lease);
/* One user fewer; a retired lease without users releases its snapshot. */
void sl_snapshot_lease_drop(sl_snapshot_lease_t *lease);
/* The worker stops: its current lease is retired (released now, or by its last user). */
void sl_snapshot_cache_dispose(sl_snapshot_cache_t *cache);

#endif
