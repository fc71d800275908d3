/*
 * Waiting across worker threads (behaviour.md §6): one queue per upstream,
 * ordered by the requests' arrival at sluice, and a way to wake a waiting
 * request on its own worker's loop when an upstream it waits on may take it.
 *
 * A request lives on its worker; an upstream's queue is shared. One mutex
 * (the wait lock) guards every queue and every waiter's membership; the
 * rules deciding who may go (the throttle, slots) are the caller's, asked
 * under the same lock with sl_waitq_lock. A wake-up is a message to the
 * waiter's worker (h2o_multithread), never a call on another thread.
 */
#ifndef SL_WAITQ_H
#define SL_WAITQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <h2o.h>

typedef struct sl_waiter sl_waiter_t;
typedef struct sl_waitq_node sl_waitq_node_t; /* a waiter's place in one queue */

/* One upstream's queue; zero-initialise, one per upstream, never freed while waiters may join. */
typedef struct {
    sl_waitq_node_t *head, *tail; /* by arrival; the head is the first to go */
    size_t len;
} sl_waitq_t;

/* A worker's inbox for wake-ups; one per worker loop. */
typedef struct sl_waitq_inbox sl_waitq_inbox_t;

/* Called on the owner's loop when something it waits on may have changed. */
typedef void (*sl_waiter_wake_cb)(void *owner);

sl_waitq_inbox_t *sl_waitq_inbox_new(h2o_multithread_queue_t *queue, sl_waiter_wake_cb cb);

/* The wait lock: hold it around a decision that reads queues (and the throttle state kept with them). */
void sl_waitq_lock(void);
void sl_waitq_unlock(void);

/*
 * A waiter for owner (a request of this inbox's worker); arrival orders it
 * in every queue it joins (the request's id: ids are handed out in arrival
 * order across all workers, so unlike a clock they never tie). arrived_wall_ms
 * is when that request arrived (wall clock), for orders across instances
 * (a cluster's tickets). The owner keeps it until sl_waiter_release. Never
 * NULL.
 */
sl_waiter_t *sl_waiter_new(sl_waitq_inbox_t *inbox, void *owner, uint64_t arrival, int64_t arrived_wall_ms);
uint64_t sl_waiter_arrival(const sl_waiter_t *w);
int64_t sl_waiter_arrived_wall_ms(const sl_waiter_t *w);

/* With the lock held: joins q in arrival order (a request that re-enters lands in its place). No-op if in it.
 */
void sl_waiter_join(sl_waiter_t *w, sl_waitq_t *q);
/* With the lock held: leaves every queue it is in. */
void sl_waiter_leave_all(sl_waiter_t *w);
/* With the lock held: whether w is first in q (or q is empty and w is in none: it would be first). */
bool sl_waitq_is_head(const sl_waitq_t *q, const sl_waiter_t *w);
/* With the lock held: the waiters of q, first to last, are woken (each at most once until it runs). */
void sl_waitq_wake(sl_waitq_t *q, size_t max_waiters);

/*
 * The owner stops waiting for good (it was sent, answered, or went away):
 * leaves every queue and, once no wake-up for it is in flight, is freed.
 * Takes the lock itself. The owner must not touch w afterwards.
 */
void sl_waiter_release(sl_waiter_t *w);

#endif
