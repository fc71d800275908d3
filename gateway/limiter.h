/*
 * Usage limits in the running gateway (behaviour.md §7): one limit set per
 * upstream and per client key, shared by every worker, kept by name for the
 * life of the process (a reload or a live change keeps what was counted for
 * every limit that stays), and rebuilt from the request DB's usage buckets
 * at start, so a restart never resets a budget. The accounting itself is
 * core/limits.h; this module owns the sets and their persistence.
 *
 * Locking: a set's states and queue are guarded by the wait lock
 * (waitq.h), like the throttle: admission decisions read both. Binding and
 * replacing run on one thread at a time (the main thread, later the
 * control thread), serialised by the limiter's own lock.
 */
#ifndef SL_LIMITER_H
#define SL_LIMITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "core/limits.h"
#include "core/retry.h"
#include "recorder.h"
#include "waitq.h"

/* A limit's use as the cluster counts it (cluster mode). */
typedef struct {
    sl_limit_t limit;
    uint64_t used;
} sl_limit_seen_t;

#define SL_LIMIT_SEEN_MAX 8
/* The cluster's use is shown while it is this fresh (three heartbeats); then this instance's own again. */
#define SL_LIMIT_SEEN_FRESH_MS 3000

typedef struct {
    sl_bucket_kind_t kind; /* provider or client key */
    char *name;
    /* Guarded by the wait lock. */
    sl_limit_state_t *states; /* owned; replaced as a whole by a reload or a live change */
    size_t n;
    sl_waitq_t queue; /* keys: requests waiting for the key's window (gate key_window), in arrival order */
    /* Upstreams: what ThrottleChanged last showed for the limits (OK = nothing). */
    sl_limit_verdict_t shown;
    int64_t shown_until_ms;
    sl_limit_t shown_limit; /* the limit that holds it, when shown is not OK */
    /* Cluster mode: each limit's use across the cluster, as Redis said at cluster_seen_at_ms (wall clock;
     * 0: never). Refreshed by the cluster's thread every heartbeat. */
    sl_limit_seen_t cluster_seen[SL_LIMIT_SEEN_MAX];
    size_t n_cluster_seen;
    int64_t cluster_seen_at_ms;
} sl_limit_set_t;

/* The sets of one config: providers[i] for config->providers[i], clients[i] for config->clients[i]. */
typedef struct {
    sl_limit_set_t **providers, **clients; /* the arrays are owned by whoever holds this (a snapshot) */
} sl_limit_sets_t;

typedef struct sl_limiter sl_limiter_t;

/*
 * Where past usage comes from: calls add for every stored usage bucket
 * (recorder.h: epoch minutes) whose minute contains or follows since_ms.
 */
typedef void (*sl_usage_history_fn)(void *history_ctx, int64_t since_ms, sl_usage_cb add, void *add_ctx);

/* Told that the limits of an existing set were replaced (LimitsChanged); on the binding thread. */
typedef void (*sl_limits_changed_fn)(void *ctx, const sl_limit_set_t *set, const sl_limit_t *limits,
                                     size_t n);

/*
 * A limiter whose rolling windows are scaled by params (tests), reading
 * past usage through history (may be NULL) whenever a limit starts
 * counting, and telling changed (may be NULL) when a set it already had
 * gets other limits. Lives as long as the process: sets are never freed
 * before it. ctx is passed to both.
 */
sl_limiter_t *sl_limiter_new(const sl_retry_params_t *params, sl_usage_history_fn history,
                             sl_limits_changed_fn changed, void *ctx);

/*
 * The sets of config's providers and clients (created on first sight),
 * each with the config's limits applied as sl_limiter_replace does. The
 * caller owns the two arrays (free them with sl_limit_sets_free). From now
 * on every set, this config's or not, counts its calendar periods in
 * config->tz, which the states point to: config must stay alive until the
 * next bind (a snapshot keeps its config, and the next config is bound
 * before the snapshot is replaced).
 */
sl_limit_sets_t sl_limiter_bind(sl_limiter_t *l, const sl_config_t *config, int64_t now_ms);

void sl_limit_sets_free(sl_limit_sets_t *sets);

/*
 * Replaces the limits of the set (kind, name) atomically: a limit that
 * stays (same per, every and measure) keeps what it counted, only its
 * amount changes; a new one starts from the stored usage (history), in the
 * zone of the config bound last. Takes effect at the next admission;
 * waiters are woken to decide again. Returns false when no set has that
 * name (a name the config does not know).
 */
bool sl_limiter_replace(sl_limiter_t *l, sl_bucket_kind_t kind, const char *name, const sl_limit_t *limits,
                        size_t n, int64_t now_ms);

/*
 * The views of set's limits at now_ms (wall clock) into out (room for
 * cap), in config order; takes the wait lock. Returns how many limits the
 * set has (may be more than cap: then only cap are written). A use the
 * cluster counted, fresh, is shown instead of this instance's own.
 */
size_t sl_limit_set_views(sl_limit_set_t *set, int64_t now_ms, sl_limit_view_t *out, size_t cap);

/* Frees the limiter and every set; nothing may use them any more. */
void sl_limiter_free(sl_limiter_t *l);

#endif
