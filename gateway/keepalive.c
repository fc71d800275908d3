#include "keepalive.h"

#include "core/xalloc.h"
#include "read_budget.h"
#include "worker.h"

sl_upconn_t *
sl_upconn_new(h2o_socket_t *sock, const struct sl_peer *peer, sl_keepalive_t *store)
{
    sl_upconn_t *c = sl_xcalloc(1, sizeof(*c));
    c->sock = sock;
    c->peer = peer;
    c->store = store;
    sock->data = c;
    return c;
}

void
sl_upconn_close(sl_upconn_t *c)
{
    sl_read_budget_clear(h2o_socket_get_fd(c->sock));
    h2o_socket_close(c->sock);
    free(c);
}

void
sl_keepalive_init(sl_keepalive_t *ka, sl_timerheap_t *timers)
{
    *ka = (sl_keepalive_t){.timers = timers};
    h2o_linklist_init_anchor(&ka->idle);
}

static void
unlink_idle(sl_keepalive_t *ka, sl_upconn_t *c)
{
    h2o_linklist_unlink(&c->link);
    ka->n_idle--;
}

static sl_upconn_t *
oldest(sl_keepalive_t *ka)
{
    return H2O_STRUCT_FROM_MEMBER(sl_upconn_t, link, ka->idle.prev);
}

/*
 * Something happened on an idle connection: the upstream closed it, or sent
 * bytes no request asked for. Either way it cannot carry a request. A read
 * that brought nothing (a TLS 1.3 session ticket, consumed by OpenSSL) is not
 * a reason to close.
 */
static void
on_idle_event(h2o_socket_t *sock, const char *err)
{
    sl_upconn_t *c = sock->data;
    if (err == NULL && sock->input->size == 0)
        return;
    unlink_idle(c->store, c);
    sl_upconn_close(c);
}

static void
on_expiry(sl_timer_t *t)
{
    sl_keepalive_t *ka = H2O_STRUCT_FROM_MEMBER(sl_keepalive_t, expiry, t);
    int64_t cutoff = sl_now_ms() - SL_KEEPALIVE_IDLE_MS;
    while (ka->n_idle > 0 && oldest(ka)->idle_since_ms <= cutoff) {
        sl_upconn_t *c = oldest(ka);
        unlink_idle(ka, c);
        sl_upconn_close(c);
    }
    if (ka->n_idle > 0)
        sl_timer_arm(ka->timers, &ka->expiry, oldest(ka)->idle_since_ms + SL_KEEPALIVE_IDLE_MS, on_expiry);
}

sl_upconn_t *
sl_keepalive_take(sl_keepalive_t *ka, const struct sl_peer *peer)
{
    for (h2o_linklist_t *l = ka->idle.next; l != &ka->idle; l = l->next) {
        sl_upconn_t *c = H2O_STRUCT_FROM_MEMBER(sl_upconn_t, link, l);
        if (c->peer == peer) {
            unlink_idle(ka, c);
            return c;
        }
    }
    return NULL;
}

void
sl_keepalive_put(sl_upconn_t *c, int64_t now_ms)
{
    sl_keepalive_t *ka = c->store;
    if (ka->n_idle == SL_KEEPALIVE_MAX_IDLE) {
        sl_upconn_t *old = oldest(ka);
        unlink_idle(ka, old);
        sl_upconn_close(old);
    }
    c->hop = NULL;
    c->idle_since_ms = now_ms;
    h2o_linklist_insert(ka->idle.next, &c->link);
    ka->n_idle++;
    /* Already reading (the hop read its answer): swapping the callback costs no system call. */
    h2o_socket_read_start(c->sock, on_idle_event);
    if (!sl_timer_is_armed(&ka->expiry))
        sl_timer_arm(ka->timers, &ka->expiry, now_ms + SL_KEEPALIVE_IDLE_MS, on_expiry);
}

void
sl_keepalive_close_all(sl_keepalive_t *ka)
{
    while (ka->n_idle > 0) {
        sl_upconn_t *c = oldest(ka);
        unlink_idle(ka, c);
        sl_upconn_close(c);
    }
    sl_timer_cancel(ka->timers, &ka->expiry);
}
