#include "cluster_tickets.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cluster_msg.h"
#include "core/xalloc.h"

typedef struct {
    const sl_waiter_t *waiter;
    sl_upstream_t *up;
    uint64_t id;
    int64_t arrived_wall_ms;
} ticket_t;

struct sl_cluster_tickets {
    pthread_mutex_t lock; /* guards what follows */
    ticket_t *items;
    size_t n, cap;
};

sl_cluster_tickets_t *
sl_cluster_tickets_new(void)
{
    sl_cluster_tickets_t *t = sl_xcalloc(1, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

void
sl_cluster_tickets_free(sl_cluster_tickets_t *t)
{
    if (t == NULL)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t->items);
    free(t);
}

static void
set_key(sl_cluster_t *cluster, const sl_upstream_t *up, char *out, size_t size)
{
    sl_cluster_key(out, size, sl_cluster_name(cluster), "tickets", up->name);
}

/* ZADD NX of one ticket (its set's life renewed); nothing while not joined. */
static void
send_ticket(sl_cluster_t *cluster, const ticket_t *k)
{
    char key[400], member[192];
    set_key(cluster, k->up, key, sizeof(key));
    if (sl_cluster_ticket_name(member, sizeof(member), sl_cluster_instance(cluster), k->id) == 0)
        return;
    sl_cluster_args_t a = {0};
    sl_cluster_args_add(&a, "ZADD");
    sl_cluster_args_add(&a, key);
    sl_cluster_args_add(&a, "NX");
    sl_cluster_args_addf(&a, "%lld", (long long)(k->arrived_wall_ms + sl_cluster_clock_offset_ms(cluster)));
    sl_cluster_args_add(&a, member);
    sl_cluster_send(cluster, &a, NULL, NULL);
    char ttl[24];
    snprintf(ttl, sizeof(ttl), "%d", SL_CLUSTER_TICKETS_TTL_MS);
    sl_cluster_commandv(cluster, NULL, NULL, 3, (const char *[]){"PEXPIRE", key, ttl});
}

void
sl_cluster_tickets_join(sl_cluster_tickets_t *t, sl_cluster_t *cluster, const sl_waiter_t *w,
                        sl_upstream_t *up)
{
    ticket_t k = {w, up, sl_waiter_arrival(w), sl_waiter_arrived_wall_ms(w)};
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        if (t->items[i].waiter == w && t->items[i].up == up) {
            pthread_mutex_unlock(&t->lock);
            return;
        }
    }
    if (t->n == t->cap) {
        t->cap = t->cap * 2 + 16;
        t->items = sl_xrealloc(t->items, t->cap * sizeof(*t->items));
    }
    t->items[t->n++] = k;
    pthread_mutex_unlock(&t->lock);
    if (sl_cluster_joined(cluster))
        send_ticket(cluster, &k);
}

void
sl_cluster_tickets_leave(sl_cluster_tickets_t *t, sl_cluster_t *cluster, const sl_waiter_t *w)
{
    ticket_t *gone = NULL;
    size_t n_gone = 0;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n;) {
        if (t->items[i].waiter != w) {
            i++;
            continue;
        }
        gone = sl_xrealloc(gone, (n_gone + 1) * sizeof(*gone));
        gone[n_gone++] = t->items[i];
        t->items[i] = t->items[--t->n];
    }
    pthread_mutex_unlock(&t->lock);
    for (size_t i = 0; i < n_gone; i++) {
        char key[400], member[192];
        set_key(cluster, gone[i].up, key, sizeof(key));
        if (sl_cluster_ticket_name(member, sizeof(member), sl_cluster_instance(cluster), gone[i].id) > 0)
            sl_cluster_commandv(cluster, NULL, NULL, 3, (const char *[]){"ZREM", key, member});
    }
    free(gone);
}

void
sl_cluster_tickets_readd(sl_cluster_tickets_t *t, sl_cluster_t *cluster)
{
    pthread_mutex_lock(&t->lock);
    size_t n = t->n;
    ticket_t *copy = n > 0 ? sl_xcalloc(n, sizeof(*copy)) : NULL;
    if (n > 0)
        memcpy(copy, t->items, n * sizeof(*copy));
    pthread_mutex_unlock(&t->lock);
    for (size_t i = 0; i < n; i++)
        send_ticket(cluster, &copy[i]);
    free(copy);
}
