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
#include "limiter.h"
#include "upstream.h"

typedef struct {
    sl_config_t *config;       /* owned by the snapshot */
    sl_upstream_t **upstreams; /* the shared state of config->providers[i]; the array is owned */
    sl_limit_sets_t limits;    /* the usage limits of providers and client keys; the arrays are owned */
    bool safe_mode;            /* the file was invalid: serve nothing but errors */
    atomic_uint refs;
} sl_snapshot_t;

typedef struct {
    pthread_mutex_t lock;
    sl_snapshot_t *current;
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

#endif
