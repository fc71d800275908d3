/* Per-upstream wait queues: arrival order, leaving, wake-ups delivered on the owner's loop. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "waitq.h"

static h2o_evloop_t *loop;
static h2o_multithread_queue_t *queue;
static sl_waitq_inbox_t *inbox;
static int woken[16], n_woken;

static void
on_wake(void *owner)
{
    woken[n_woken++] = *(int *)owner;
}

static void
setup(void)
{
    loop = h2o_evloop_create();
    queue = h2o_multithread_create_queue(loop);
    inbox = sl_waitq_inbox_new(queue, on_wake);
    n_woken = 0;
}

TestSuite(waitq, .init = setup);

static void
run_loop_until(int count)
{
    for (int i = 0; i < 50 && n_woken < count; i++)
        h2o_evloop_run(loop, 10);
}

Test(waitq, joins_in_arrival_order_and_re_entries_land_in_their_place)
{
    static int ids[4] = {0, 1, 2, 3};
    sl_waitq_t q = {0};
    sl_waiter_t *w[4];
    for (int i = 0; i < 4; i++)
        w[i] = sl_waiter_new(inbox, &ids[i], 100 + i * 10, 0);
    sl_waitq_lock();
    sl_waiter_join(w[1], &q);
    sl_waiter_join(w[3], &q);
    sl_waiter_join(w[2], &q);
    sl_waiter_join(w[0], &q); /* the earliest arrival comes back: it goes first */
    sl_waiter_join(w[0], &q); /* joining twice changes nothing */
    cr_assert_eq(q.len, 4);
    cr_assert(sl_waitq_is_head(&q, w[0]));
    sl_waitq_wake(&q, 4);
    sl_waitq_unlock();
    run_loop_until(4);
    cr_assert_eq(n_woken, 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(woken[i], i, "woken in arrival order");
    for (int i = 0; i < 4; i++)
        sl_waiter_release(w[i]);
    cr_assert_eq(q.len, 0);
    cr_assert_null(q.head);
}

Test(waitq, a_waiter_in_two_queues_leaves_both)
{
    static int id = 7;
    sl_waitq_t a = {0}, b = {0};
    sl_waiter_t *w = sl_waiter_new(inbox, &id, 5, 0);
    sl_waitq_lock();
    for (int i = 0; i < 3; i++) {
        sl_waitq_t extra = {0};
        sl_waiter_join(w, &extra);
        sl_waiter_leave_all(w);
    }
    sl_waiter_join(w, &a);
    sl_waiter_join(w, &b);
    cr_assert_eq(a.len + b.len, 2);
    sl_waiter_leave_all(w);
    cr_assert_eq(a.len + b.len, 0);
    cr_assert(sl_waitq_is_head(&a, w), "an empty queue has room for anyone");
    sl_waitq_unlock();
    sl_waiter_release(w);
}

Test(waitq, a_waiter_released_while_its_wake_up_is_in_flight_is_freed_by_the_inbox)
{
    static int id = 9;
    sl_waitq_t q = {0};
    sl_waiter_t *w = sl_waiter_new(inbox, &id, 1, 0);
    sl_waitq_lock();
    sl_waiter_join(w, &q);
    sl_waitq_wake(&q, 1);
    sl_waitq_wake(&q, 1); /* one wake-up at a time */
    sl_waitq_unlock();
    sl_waiter_release(w); /* the owner goes away first */
    for (int i = 0; i < 5; i++)
        h2o_evloop_run(loop, 10);
    cr_assert_eq(n_woken, 0, "no callback for an owner that left");
}
