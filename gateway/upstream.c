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
    /* Pools replaced by a reload stay alive: requests in flight may still hold their sockets. */
    h2o_socketpool_t **retired;
    size_t n_retired;
};

sl_upstreams_t *
sl_upstreams_new(void)
{
    sl_upstreams_t *reg = sl_xcalloc(1, sizeof(*reg));
    pthread_mutex_init(&reg->lock, NULL);
    return reg;
}

static h2o_socketpool_t *
make_pool(const sl_base_url_t *url, bool *by_address)
{
    h2o_socketpool_t *pool = sl_xcalloc(1, sizeof(*pool));
    char host[256];
    snprintf(host, sizeof(host), "%.*s", (int)url->host_len, url->host);
    /* IPv6 literals come bracketed in URLs. */
    char *bare = host;
    if (bare[0] == '[') {
        bare++;
        bare[strlen(bare) - 1] = '\0';
    }
    int family;
    uint8_t addr[16];
    /* An address literal needs no resolver thread; a name goes through h2o's getaddrinfo. */
    *by_address = sl_ip_parse(bare, &family, addr);
    if (*by_address) {
        struct sockaddr_storage ss = {0};
        socklen_t len;
        if (family == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
            sin->sin_family = AF_INET;
            sin->sin_port = htons(url->port);
            memcpy(&sin->sin_addr, addr, 4);
            len = sizeof(*sin);
        } else {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
            sin6->sin6_family = AF_INET6;
            sin6->sin6_port = htons(url->port);
            memcpy(&sin6->sin6_addr, addr, 16);
            len = sizeof(*sin6);
        }
        h2o_socketpool_init_by_address(pool, (struct sockaddr *)&ss, len, url->is_tls, SIZE_MAX);
    } else {
        h2o_socketpool_init_by_hostport(pool, h2o_iovec_init(bare, strlen(bare)), url->port, url->is_tls,
                                        SIZE_MAX);
    }
    return pool;
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
            bool by_address;
            h2o_socketpool_t *pool = make_pool(url, &by_address);
            reg->retired = sl_xrealloc(reg->retired, (reg->n_retired + 1) * sizeof(*reg->retired));
            /* Workers read these under the upstream's lock. */
            pthread_mutex_lock(&u->lock);
            reg->retired[reg->n_retired++] = u->pool;
            u->pool = pool;
            u->by_address = by_address;
            u->pool_ready = false;
            pthread_mutex_unlock(&u->lock);
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
    u->pool = make_pool(url, &u->by_address);
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

h2o_socketpool_t *
sl_upstream_pool(sl_upstream_t *up, h2o_loop_t *loop, bool *by_address)
{
    pthread_mutex_lock(&up->lock);
    h2o_socketpool_t *pool = up->pool;
    *by_address = up->by_address;
    if (!up->pool_ready) {
        h2o_socketpool_set_timeout(pool, loop, SL_UPSTREAM_IDLE_KEEPALIVE_MS);
        up->pool_ready = true;
    }
    pthread_mutex_unlock(&up->lock);
    return pool;
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
        h2o_socketpool_dispose(u->pool);
        free(u->pool);
        free(u->origin);
        free(u->name);
        pthread_mutex_destroy(&u->lock);
        free(u);
    }
    for (size_t i = 0; i < reg->n_retired; i++) {
        h2o_socketpool_dispose(reg->retired[i]);
        free(reg->retired[i]);
    }
    free(reg->retired);
    free(reg->items);
    pthread_mutex_destroy(&reg->lock);
    free(reg);
}
