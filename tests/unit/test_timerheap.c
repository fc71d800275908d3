/* The worker's timer heap: order, re-arming, cancelling inside callbacks. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "core/timerheap.h"

static sl_timerheap_t heap;
static int64_t fired_at[1024];
static size_t nfired;

static void
record(sl_timer_t *t)
{
    fired_at[nfired++] = t->due_ms;
}

static void
reset(void)
{
    nfired = 0;
}

static void
dispose(void)
{
    sl_timerheap_dispose(&heap);
}

TestSuite(timerheap, .init = reset, .fini = dispose);

Test(timerheap, fires_in_due_order_and_only_when_due)
{
    static sl_timer_t t[100];
    for (int i = 0; i < 100; i++)
        sl_timer_arm(&heap, &t[i], (i * 37) % 100, record);
    cr_assert_eq(sl_timerheap_wait_ms(&heap, -5), 5);
    cr_assert_eq(sl_timerheap_run(&heap, 49), 50);
    cr_assert_eq(sl_timerheap_wait_ms(&heap, 49), 1);
    cr_assert_eq(sl_timerheap_run(&heap, 1000), 50);
    for (size_t i = 0; i < nfired; i++)
        cr_assert_eq(fired_at[i], (int64_t)i);
    cr_assert_eq(sl_timerheap_wait_ms(&heap, 0), -1);
}

Test(timerheap, rearm_moves_and_cancel_removes)
{
    sl_timer_t a = {0}, b = {0}, c = {0};
    sl_timer_arm(&heap, &a, 10, record);
    sl_timer_arm(&heap, &b, 20, record);
    sl_timer_arm(&heap, &c, 30, record);
    sl_timer_arm(&heap, &a, 40, record);
    sl_timer_cancel(&heap, &b);
    sl_timer_cancel(&heap, &b);
    cr_assert_not(sl_timer_is_armed(&b));
    cr_assert_eq(sl_timerheap_run(&heap, 100), 2);
    cr_assert_eq(fired_at[0], 30);
    cr_assert_eq(fired_at[1], 40);
}

static sl_timer_t victim, self_rearming;
static int rearm_count;

static void
cancel_victim(sl_timer_t *t)
{
    record(t);
    sl_timer_cancel(&heap, &victim);
}

static void
rearm_once(sl_timer_t *t)
{
    record(t);
    if (rearm_count++ == 0)
        sl_timer_arm(&heap, t, t->due_ms + 1, rearm_once);
}

Test(timerheap, callbacks_may_cancel_and_rearm)
{
    sl_timer_t first = {0};
    sl_timer_arm(&heap, &first, 1, cancel_victim);
    sl_timer_arm(&heap, &victim, 2, record);
    sl_timer_arm(&heap, &self_rearming, 3, rearm_once);
    cr_assert_eq(sl_timerheap_run(&heap, 10), 3, "victim cancelled, the re-armed timer fires again");
    cr_assert_eq(fired_at[1], 3);
    cr_assert_eq(fired_at[2], 4);
}

Test(timerheap, random_operations_keep_the_heap_ordered)
{
    enum { N = 500 };
    static sl_timer_t t[N];
    srand(7);
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++) {
            if (rand() % 3 == 0)
                sl_timer_cancel(&heap, &t[i]);
            else
                sl_timer_arm(&heap, &t[i], rand() % 10000, record);
        }
    }
    nfired = 0;
    size_t armed = heap.len;
    cr_assert_eq(sl_timerheap_run(&heap, 10000), armed);
    for (size_t i = 1; i < nfired; i++)
        cr_assert_leq(fired_at[i - 1], fired_at[i]);
}

Test(timerheap, rearming_an_armed_timer_moves_its_one_entry_either_way)
{
    static sl_timer_t t[8];
    for (int i = 0; i < 8; i++)
        sl_timer_arm(&heap, &t[i], 10 * (i + 1), record);
    sl_timer_arm(&heap, &t[6], 5, record);   /* earlier than all */
    sl_timer_arm(&heap, &t[0], 100, record); /* later than all */
    sl_timer_arm(&heap, &t[3], 41, record);  /* a little later: stays where it was */
    cr_assert_eq(heap.len, 8);
    cr_assert_eq(sl_timerheap_wait_ms(&heap, 0), 5);
    cr_assert_eq(sl_timerheap_run(&heap, 1000), 8);
    int64_t want[8] = {5, 20, 30, 41, 50, 60, 80, 100};
    for (size_t i = 0; i < 8; i++)
        cr_assert_eq(fired_at[i], want[i], "fired %zu at %lld", i, (long long)fired_at[i]);
}
