#include "upstream.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cidr.h"
#include "core/dialect.h"
#include "core/xalloc.h"

struct sl_upstreams {
    pthread_mutex_t lock;
    sl_upstream_t **items;
    size_t n, cap;
    /*
     * Peers replaced by a reload stay alive: hops in flight use them, and idle connections are kept
     * under their address (a new peer at a freed one's address would be handed the old origin's).
     */
    sl_peer_t **retired;
    size_t n_retired;
};

sl_upstreams_t *
sl_upstreams_new(void)
{
    sl_upstreams_t *reg = sl_xcalloc(1, sizeof(*reg));
    pthread_mutex_init(&reg->lock, NULL);
    return reg;
}

static sl_peer_t *
make_peer(const sl_base_url_t *url)
{
    char host[256];
    snprintf(host, sizeof(host), "%.*s", (int)url->host_len, url->host);
    /* IPv6 literals come bracketed in URLs. */
    char *bare = host;
    if (bare[0] == '[') {
        bare++;
        bare[strlen(bare) - 1] = '\0';
    }
    return sl_peer_new(bare, url->port, url->is_tls);
}

static char *
origin_of(const sl_base_url_t *url)
{
    sl_strbuf_t s = {0};
    sl_strbuf_appendf(&s, "%s://%.*s:%u", url->is_tls ? "https" : "http", (int)url->host_len, url->host,
                      url->port);
    return sl_strbuf_finish(&s);
}

static sl_upstream_t *
find_or_create(sl_upstreams_t *reg, const sl_provider_t *p, const sl_base_url_t *url)
{
    char *origin = origin_of(url);
    for (size_t i = 0; i < reg->n; i++) {
        sl_upstream_t *u = reg->items[i];
        if (strcmp(u->name, p->name) != 0)
            continue;
        if (strcmp(u->origin, origin) != 0) {
            sl_peer_t *peer = make_peer(url);
            reg->retired = sl_xrealloc(reg->retired, (reg->n_retired + 1) * sizeof(*reg->retired));
            /* A worker may still be reading the old one: it stays until the registry goes. */
            reg->retired[reg->n_retired++] = atomic_exchange_explicit(&u->peer, peer, memory_order_acq_rel);
            free(u->origin);
            u->origin = origin;
        } else {
            free(origin);
        }
        return u;
    }
    sl_upstream_t *u = sl_xcalloc(1, sizeof(*u));
    u->name = sl_xstrdup(p->name);
    u->origin = origin;
    atomic_init(&u->peer, make_peer(url));
    pthread_mutex_init(&u->lock, NULL);
    if (reg->n == reg->cap) {
        reg->cap = reg->cap ? reg->cap * 2 : 8;
        reg->items = sl_xrealloc(reg->items, reg->cap * sizeof(*reg->items));
    }
    reg->items[reg->n++] = u;
    return u;
}

sl_upstream_t **
sl_upstreams_bind(sl_upstreams_t *reg, const sl_config_t *config)
{
    sl_upstream_t **out = sl_xcalloc(config->n_providers + 1, sizeof(*out));
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < config->n_providers; i++) {
        sl_base_url_t url;
        if (sl_base_url_parse(config->providers[i].base_url, &url) != 0) {
            pthread_mutex_unlock(&reg->lock);
            free(out);
            return NULL;
        }
        out[i] = find_or_create(reg, &config->providers[i], &url);
    }
    pthread_mutex_unlock(&reg->lock);
    return out;
}

const sl_peer_t *
sl_upstream_peer(sl_upstream_t *up)
{
    return atomic_load_explicit(&up->peer, memory_order_acquire);
}

void
sl_upstreams_clear_auth_holds(sl_upstreams_t *reg, void (*on_change)(const sl_upstream_t *up))
{
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->n; i++) {
        sl_upstream_t *u = reg->items[i];
        pthread_mutex_lock(&u->lock);
        bool changed = sl_breaker_clear_auth(&u->breaker);
        pthread_mutex_unlock(&u->lock);
        if (changed && on_change != NULL)
            on_change(u);
    }
    pthread_mutex_unlock(&reg->lock);
}

sl_upstream_t *
sl_upstreams_find(sl_upstreams_t *reg, const char *name)
{
    pthread_mutex_lock(&reg->lock);
    sl_upstream_t *found = NULL;
    for (size_t i = 0; i < reg->n && found == NULL; i++) {
        if (strcmp(reg->items[i]->name, name) == 0)
            found = reg->items[i];
    }
    pthread_mutex_unlock(&reg->lock);
    return found;
}

void
sl_upstreams_wake_all(sl_upstreams_t *reg)
{
    pthread_mutex_lock(&reg->lock);
    sl_waitq_lock();
    for (size_t i = 0; i < reg->n; i++)
        sl_waitq_wake(&reg->items[i]->waitq, SIZE_MAX);
    sl_waitq_unlock();
    pthread_mutex_unlock(&reg->lock);
}

void
sl_upstreams_free(sl_upstreams_t *reg)
{
    for (size_t i = 0; i < reg->n; i++) {
        sl_upstream_t *u = reg->items[i];
        sl_peer_free(atomic_load(&u->peer));
        free(u->origin);
        free(u->name);
        pthread_mutex_destroy(&u->lock);
        free(u);
    }
    for (size_t i = 0; i < reg->n_retired; i++)
        sl_peer_free(reg->retired[i]);
    free(reg->retired);
    free(reg->items);
    pthread_mutex_destroy(&reg->lock);
    free(reg);
}
