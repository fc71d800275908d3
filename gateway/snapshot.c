#include "snapshot.h"

#include <stdlib.h>

#include "core/xalloc.h"

static sl_snapshot_t *
snapshot_new(sl_config_t *config, sl_upstream_t **upstreams, sl_limit_sets_t limits, bool safe_mode)
{
    sl_snapshot_t *s = sl_xcalloc(1, sizeof(*s));
    s->config = config;
    s->upstreams = upstreams;
    s->limits = limits;
    s->safe_mode = safe_mode;
    s->heads = sl_xcalloc(config->n_providers > 0 ? config->n_providers : 1, sizeof(*s->heads));
    for (size_t i = 0; i < config->n_providers; i++)
        sl_dialect_provider_head(&config->providers[i], &s->heads[i]);
    atomic_init(&s->refs, 1);
    return s;
}

void
sl_snapshot_holder_init(sl_snapshot_holder_t *holder, sl_config_t *config, sl_upstream_t **upstreams,
                        sl_limit_sets_t limits, bool safe_mode)
{
    pthread_mutex_init(&holder->lock, NULL);
    holder->current = snapshot_new(config, upstreams, limits, safe_mode);
    atomic_init(&holder->generation, 0);
}

void
sl_snapshot_publish(sl_snapshot_holder_t *holder, sl_config_t *config, sl_upstream_t **upstreams,
                    sl_limit_sets_t limits, bool safe_mode)
{
    sl_snapshot_t *fresh = snapshot_new(config, upstreams, limits, safe_mode);
    pthread_mutex_lock(&holder->lock);
    sl_snapshot_t *old = holder->current;
    holder->current = fresh;
    atomic_fetch_add_explicit(&holder->generation, 1, memory_order_release);
    pthread_mutex_unlock(&holder->lock);
    sl_snapshot_release(old);
}

sl_snapshot_t *
sl_snapshot_acquire(sl_snapshot_holder_t *holder)
{
    pthread_mutex_lock(&holder->lock);
    sl_snapshot_t *s = holder->current;
    atomic_fetch_add(&s->refs, 1);
    pthread_mutex_unlock(&holder->lock);
    return s;
}

void
sl_snapshot_release(sl_snapshot_t *snapshot)
{
    if (snapshot != NULL && atomic_fetch_sub(&snapshot->refs, 1) == 1) {
        for (size_t i = 0; i < snapshot->config->n_providers; i++)
            sl_provider_head_free(&snapshot->heads[i]);
        free(snapshot->heads);
        sl_config_free(snapshot->config);
        free(snapshot->upstreams);
        sl_limit_sets_free(&snapshot->limits);
        free(snapshot);
    }
}

void
sl_snapshot_holder_dispose(sl_snapshot_holder_t *holder)
{
    sl_snapshot_release(holder->current);
    holder->current = NULL;
    pthread_mutex_destroy(&holder->lock);
}

static void
retire(sl_snapshot_lease_t *lease)
{
    lease->retired = true;
    if (lease->users == 0) {
        sl_snapshot_release(lease->snapshot);
        free(lease);
    }
}

sl_snapshot_lease_t *
sl_snapshot_lease(sl_snapshot_cache_t *cache)
{
    unsigned generation = atomic_load_explicit(&cache->holder->generation, memory_order_acquire);
    if (cache->current == NULL || generation != cache->generation) {
        if (cache->current != NULL)
            retire(cache->current);
        sl_snapshot_lease_t *lease = sl_xcalloc(1, sizeof(*lease));
        sl_snapshot_holder_t *holder = cache->holder;
        /* The snapshot and its generation change together, under the lock. */
        pthread_mutex_lock(&holder->lock);
        lease->snapshot = holder->current;
        atomic_fetch_add(&lease->snapshot->refs, 1);
        cache->generation = atomic_load_explicit(&holder->generation, memory_order_relaxed);
        pthread_mutex_unlock(&holder->lock);
        cache->current = lease;
    }
    cache->current->users++;
    return cache->current;
}

void
sl_snapshot_lease_hold(sl_snapshot_lease_t *lease)
{
    lease->users++;
}

void
sl_snapshot_lease_drop(sl_snapshot_lease_t *lease)
{
    if (--lease->users == 0 && lease->retired) {
        sl_snapshot_release(lease->snapshot);
        free(lease);
    }
}

void
sl_snapshot_cache_dispose(sl_snapshot_cache_t *cache)
{
    if (cache->current != NULL)
        retire(cache->current);
    cache->current = NULL;
}
