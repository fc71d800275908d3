#include "waitq.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/xalloc.h"

struct sl_waitq_node {
    sl_waitq_t *q; /* NULL while not in a queue */
    sl_waiter_t *w;
    sl_waitq_node_t *prev, *next;
};

struct sl_waiter {
    h2o_multithread_message_t msg; /* the wake-up in flight to the owner's worker */
    sl_waitq_inbox_t *inbox;
    void *owner; /* NULL once released: the inbox frees it when its wake-up arrives */
    bool wake_in_flight;
    uint64_t arrival;
    int64_t arrived_wall_ms;
    sl_waitq_node_t **nodes; /* one per queue joined (each its own allocation: queues link to them) */
    size_t n_nodes;
};

struct sl_waitq_inbox {
    h2o_multithread_receiver_t receiver;
    sl_waiter_wake_cb cb;
};

static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;

static void free_waiter(sl_waiter_t *w);

void
sl_waitq_lock(void)
{
    pthread_mutex_lock(&wait_lock);
}

void
sl_waitq_unlock(void)
{
    pthread_mutex_unlock(&wait_lock);
}

static void
on_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    sl_waitq_inbox_t *inbox = H2O_STRUCT_FROM_MEMBER(sl_waitq_inbox_t, receiver, receiver);
    while (!h2o_linklist_is_empty(messages)) {
        sl_waiter_t *w = H2O_STRUCT_FROM_MEMBER(sl_waiter_t, msg.link, messages->next);
        h2o_linklist_unlink(&w->msg.link);
        sl_waitq_lock();
        w->wake_in_flight = false;
        void *owner = w->owner;
        sl_waitq_unlock();
        if (owner == NULL) {
            free_waiter(w);
            continue;
        }
        inbox->cb(owner);
    }
}

sl_waitq_inbox_t *
sl_waitq_inbox_new(h2o_multithread_queue_t *queue, sl_waiter_wake_cb cb)
{
    sl_waitq_inbox_t *inbox = sl_xcalloc(1, sizeof(*inbox));
    inbox->cb = cb;
    h2o_multithread_register_receiver(queue, &inbox->receiver, on_messages);
    return inbox;
}

sl_waiter_t *
sl_waiter_new(sl_waitq_inbox_t *inbox, void *owner, uint64_t arrival, int64_t arrived_wall_ms)
{
    sl_waiter_t *w = sl_xcalloc(1, sizeof(*w));
    w->inbox = inbox;
    w->owner = owner;
    w->arrival = arrival;
    w->arrived_wall_ms = arrived_wall_ms;
    return w;
}

uint64_t
sl_waiter_arrival(const sl_waiter_t *w)
{
    return w->arrival;
}

int64_t
sl_waiter_arrived_wall_ms(const sl_waiter_t *w)
{
    return w->arrived_wall_ms;
}

static sl_waitq_node_t *
node_in(sl_waiter_t *w, const sl_waitq_t *q)
{
    for (size_t i = 0; i < w->n_nodes; i++) {
        if (w->nodes[i]->q == q)
            return w->nodes[i];
    }
    return NULL;
}

static void
free_waiter(sl_waiter_t *w)
{
    for (size_t i = 0; i < w->n_nodes; i++)
        free(w->nodes[i]);
    free(w->nodes);
    free(w);
}

static void
unlink_node(sl_waitq_node_t *n)
{
    sl_waitq_t *q = n->q;
    if (n->prev != NULL)
        n->prev->next = n->next;
    else
        q->head = n->next;
    if (n->next != NULL)
        n->next->prev = n->prev;
    else
        q->tail = n->prev;
    q->len--;
    n->q = NULL;
    n->prev = n->next = NULL;
}

void
sl_waiter_join(sl_waiter_t *w, sl_waitq_t *q)
{
    if (node_in(w, q) != NULL)
        return;
    sl_waitq_node_t *n = NULL;
    for (size_t i = 0; i < w->n_nodes && n == NULL; i++) {
        if (w->nodes[i]->q == NULL)
            n = w->nodes[i];
    }
    if (n == NULL) {
        w->nodes = sl_xrealloc(w->nodes, (w->n_nodes + 1) * sizeof(*w->nodes));
        n = w->nodes[w->n_nodes++] = sl_xcalloc(1, sizeof(*n));
    }
    *n = (sl_waitq_node_t){.q = q, .w = w};
    /* New arrivals are usually last: scan from the tail. */
    sl_waitq_node_t *after = q->tail;
    while (after != NULL && after->w->arrival > w->arrival)
        after = after->prev;
    n->prev = after;
    n->next = after != NULL ? after->next : q->head;
    if (n->next != NULL)
        n->next->prev = n;
    else
        q->tail = n;
    if (after != NULL)
        after->next = n;
    else
        q->head = n;
    q->len++;
}

void
sl_waiter_leave_all(sl_waiter_t *w)
{
    for (size_t i = 0; i < w->n_nodes; i++) {
        if (w->nodes[i]->q != NULL)
            unlink_node(w->nodes[i]);
    }
}

bool
sl_waitq_is_head(const sl_waitq_t *q, const sl_waiter_t *w)
{
    if (q->head == NULL)
        return true;
    return q->head->w == w;
}

static void
wake(sl_waiter_t *w)
{
    if (w->wake_in_flight || w->owner == NULL)
        return;
    w->wake_in_flight = true;
    h2o_multithread_send_message(&w->inbox->receiver, &w->msg);
}

void
sl_waitq_wake(sl_waitq_t *q, size_t max_waiters)
{
    size_t k = 0;
    for (sl_waitq_node_t *n = q->head; n != NULL && k < max_waiters; n = n->next, k++)
        wake(n->w);
}

void
sl_waiter_release(sl_waiter_t *w)
{
    sl_waitq_lock();
    sl_waiter_leave_all(w);
    w->owner = NULL;
    bool in_flight = w->wake_in_flight;
    sl_waitq_unlock();
    if (!in_flight)
        free_waiter(w);
}
