#include "limiter.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

struct sl_limiter {
    pthread_mutex_t lock; /* binding and replacing, one at a time */
    sl_retry_params_t params;
    sl_usage_history_fn history;
    sl_limits_changed_fn changed;
    void *ctx;
    const sl_tz_t *tz; /* the zone of the config bound last, every state's */
    sl_limit_set_t **items;
    size_t n, cap;
};

sl_limiter_t *
sl_limiter_new(const sl_retry_params_t *params, sl_usage_history_fn history, sl_limits_changed_fn changed,
               void *ctx)
{
    sl_limiter_t *l = sl_xcalloc(1, sizeof(*l));
    pthread_mutex_init(&l->lock, NULL);
    l->params = *params;
    l->history = history;
    l->changed = changed;
    l->ctx = ctx;
    return l;
}

static sl_limit_set_t *
find(sl_limiter_t *l, sl_bucket_kind_t kind, const char *name)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->items[i]->kind == kind && strcmp(l->items[i]->name, name) == 0)
            return l->items[i];
    }
    return NULL;
}

static sl_limit_set_t *
find_or_create(sl_limiter_t *l, sl_bucket_kind_t kind, const char *name, bool *created)
{
    sl_limit_set_t *set = find(l, kind, name);
    *created = set == NULL;
    if (set != NULL)
        return set;
    set = sl_xcalloc(1, sizeof(*set));
    set->kind = kind;
    set->name = sl_xstrdup(name);
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->items = sl_xrealloc(l->items, l->cap * sizeof(*l->items));
    }
    l->items[l->n++] = set;
    return set;
}

/* A limit keeps what it counted across a change when it counts the same thing over the same time. */
static bool
counts_the_same(const sl_limit_t *a, const sl_limit_t *b)
{
    return a->per == b->per && a->every == b->every && a->measure == b->measure;
}

static bool
same_limits(const sl_limit_set_t *set, const sl_limit_t *limits, size_t n)
{
    if (set->n != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!counts_the_same(&set->states[i].limit, &limits[i]) ||
            set->states[i].limit.amount != limits[i].amount)
            return false;
    }
    return true;
}

/* The old state that counts the same as limit, or NULL. Only the binding thread writes `limit`. */
static const sl_limit_state_t *
old_state(const sl_limit_set_t *set, const sl_limit_t *limit)
{
    for (size_t i = 0; i < set->n; i++) {
        if (counts_the_same(&set->states[i].limit, limit))
            return &set->states[i];
    }
    return NULL;
}

typedef struct {
    const sl_limit_set_t *set;
    sl_limit_state_t *states; /* the fresh states of the new array (others are skipped) */
    const bool *fresh;
    size_t n;
    int64_t now_ms;
} seeding_t;

static void
seed_bucket(void *ctx, sl_bucket_kind_t kind, const char *name, int64_t minute, int64_t requests,
            int64_t tokens, int64_t cost_micros)
{
    seeding_t *sd = ctx;
    if (kind != sd->set->kind || strcmp(name, sd->set->name) != 0)
        return;
    /* Usage of a past minute is taken as spent at its end: it leaves a window no earlier than it should. */
    int64_t at = (minute + 1) * 60000 - 1;
    if (at > sd->now_ms)
        at = sd->now_ms;
    sl_amounts_t a = {requests, tokens, cost_micros};
    for (size_t i = 0; i < sd->n; i++) {
        if (sd->fresh[i])
            sl_limit_add(&sd->states[i], at, sd->now_ms, sl_limit_measure(&sd->states[i].limit, &a));
    }
}

/* With l->lock held. A set just created is not "changed": it had no limits to replace. */
static void
replace_locked(sl_limiter_t *l, sl_limit_set_t *set, const sl_limit_t *limits, size_t n, int64_t now_ms,
               bool created)
{
    if (same_limits(set, limits, n))
        return;
    sl_limit_state_t *states = sl_xcalloc(n + 1, sizeof(*states));
    bool fresh[n + 1];
    int64_t since = now_ms;
    bool any_fresh = false;
    for (size_t i = 0; i < n; i++) {
        fresh[i] = old_state(set, &limits[i]) == NULL;
        if (!fresh[i])
            continue;
        sl_limit_state_init(&states[i], &limits[i],
                            sl_retry_scaled_ms(sl_limit_window_ms(&limits[i]), &l->params), l->tz);
        /* A bucket is taken as spent at its minute's end: the minute holding this time is the oldest read. */
        int64_t back = sl_limit_counts_since_ms(&states[i], now_ms);
        if (back < since)
            since = back;
        any_fresh = true;
    }
    /* A new limit starts from the stored usage, read before the swap so no admission waits for the DB. */
    if (any_fresh && l->history != NULL) {
        seeding_t sd = {set, states, fresh, n, now_ms};
        l->history(l->ctx, since, seed_bucket, &sd);
    }
    sl_waitq_lock();
    for (size_t i = 0; i < n; i++) {
        if (fresh[i])
            continue;
        states[i] = *old_state(set, &limits[i]);
        states[i].limit.amount = limits[i].amount;
    }
    sl_limit_state_t *old = set->states;
    set->states = states;
    set->n = n;
    sl_waitq_wake(&set->queue, SIZE_MAX);
    sl_waitq_unlock();
    free(old);
    if (!created && l->changed != NULL)
        l->changed(l->ctx, set, limits, n);
}

/* With l->lock held: every set, in this config or not, counts its calendar periods in tz from now on. */
static void
set_zone_locked(sl_limiter_t *l, const sl_tz_t *tz)
{
    l->tz = tz;
    sl_waitq_lock();
    for (size_t i = 0; i < l->n; i++) {
        for (size_t k = 0; k < l->items[i]->n; k++)
            l->items[i]->states[k].tz = tz;
    }
    sl_waitq_unlock();
}

sl_limit_sets_t
sl_limiter_bind(sl_limiter_t *l, const sl_config_t *config, int64_t now_ms)
{
    sl_limit_sets_t sets = {
        .providers = sl_xcalloc(config->n_providers + 1, sizeof(*sets.providers)),
        .clients = sl_xcalloc(config->n_clients + 1, sizeof(*sets.clients)),
    };
    pthread_mutex_lock(&l->lock);
    set_zone_locked(l, config->tz);
    for (size_t i = 0; i < config->n_providers; i++) {
        const sl_provider_t *p = &config->providers[i];
        bool created;
        sets.providers[i] = find_or_create(l, SL_BUCKET_PROVIDER, p->name, &created);
        replace_locked(l, sets.providers[i], p->limits, p->n_limits, now_ms, created);
    }
    for (size_t i = 0; i < config->n_clients; i++) {
        const sl_client_t *c = &config->clients[i];
        bool created;
        sets.clients[i] = find_or_create(l, SL_BUCKET_CLIENT, c->name, &created);
        replace_locked(l, sets.clients[i], c->limits, c->n_limits, now_ms, created);
    }
    pthread_mutex_unlock(&l->lock);
    return sets;
}

void
sl_limit_sets_free(sl_limit_sets_t *sets)
{
    free(sets->providers);
    free(sets->clients);
    sets->providers = sets->clients = NULL;
}

bool
sl_limiter_replace(sl_limiter_t *l, sl_bucket_kind_t kind, const char *name, const sl_limit_t *limits,
                   size_t n, int64_t now_ms)
{
    pthread_mutex_lock(&l->lock);
    sl_limit_set_t *set = find(l, kind, name);
    if (set != NULL)
        replace_locked(l, set, limits, n, now_ms, false);
    pthread_mutex_unlock(&l->lock);
    return set != NULL;
}

/* The cluster's count of limit, while fresh; false when there is none. */
static bool
cluster_used(const sl_limit_set_t *set, const sl_limit_t *limit, int64_t now_ms, uint64_t *used)
{
    if (set->cluster_seen_at_ms <= 0 || now_ms - set->cluster_seen_at_ms > SL_LIMIT_SEEN_FRESH_MS)
        return false;
    for (size_t i = 0; i < set->n_cluster_seen; i++) {
        const sl_limit_t *l = &set->cluster_seen[i].limit;
        if (l->per == limit->per && l->every == limit->every && l->measure == limit->measure) {
            *used = set->cluster_seen[i].used;
            return true;
        }
    }
    return false;
}

size_t
sl_limit_set_views(sl_limit_set_t *set, int64_t now_ms, sl_limit_view_t *out, size_t cap)
{
    sl_waitq_lock();
    size_t n = set->n;
    for (size_t i = 0; i < n && i < cap; i++) {
        out[i] = (sl_limit_view_t){
            .limit = set->states[i].limit,
            .used = sl_limit_used(&set->states[i], now_ms),
            .resets_at_ms = sl_limit_resets_at_ms(&set->states[i], now_ms),
        };
        uint64_t used;
        if (cluster_used(set, &set->states[i].limit, now_ms, &used))
            out[i].used = used;
    }
    sl_waitq_unlock();
    return n;
}

void
sl_limiter_free(sl_limiter_t *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->items[i]->name);
        free(l->items[i]->states);
        free(l->items[i]);
    }
    free(l->items);
    pthread_mutex_destroy(&l->lock);
    free(l);
}
