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
    atomic_init(&s->refs, 1);
    return s;
}

void
sl_snapshot_holder_init(sl_snapshot_holder_t *holder, sl_config_t *config, sl_upstream_t **upstreams,
                        sl_limit_sets_t limits, bool safe_mode)
{
    pthread_mutex_init(&holder->lock, NULL);
    holder->current = snapshot_new(config, upstreams, limits, safe_mode);
}

void
sl_snapshot_publish(sl_snapshot_holder_t *holder, sl_config_t *config, sl_upstream_t **upstreams,
                    sl_limit_sets_t limits, bool safe_mode)
{
    sl_snapshot_t *fresh = snapshot_new(config, upstreams, limits, safe_mode);
    pthread_mutex_lock(&holder->lock);
    sl_snapshot_t *old = holder->current;
    holder->current = fresh;
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
