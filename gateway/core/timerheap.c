#include "timerheap.h"

#include <stdlib.h>

#include "xalloc.h"

static void
place(sl_timerheap_t *h, size_t i, sl_timer_t *t)
{
    h->items[i] = t;
    t->index = i + 1;
}

static void
sift_up(sl_timerheap_t *h, size_t i)
{
    sl_timer_t *t = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->items[parent]->due_ms <= t->due_ms)
            break;
        place(h, i, h->items[parent]);
        i = parent;
    }
    place(h, i, t);
}

static void
sift_down(sl_timerheap_t *h, size_t i)
{
    sl_timer_t *t = h->items[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->len)
            break;
        if (child + 1 < h->len && h->items[child + 1]->due_ms < h->items[child]->due_ms)
            child++;
        if (h->items[child]->due_ms >= t->due_ms)
            break;
        place(h, i, h->items[child]);
        i = child;
    }
    place(h, i, t);
}

void
sl_timer_cancel(sl_timerheap_t *h, sl_timer_t *t)
{
    if (t->index == 0)
        return;
    size_t i = t->index - 1;
    t->index = 0;
    sl_timer_t *last = h->items[--h->len];
    if (i == h->len)
        return;
    place(h, i, last);
    sift_down(h, i);
    sift_up(h, last->index - 1);
}

void
sl_timer_arm(sl_timerheap_t *h, sl_timer_t *t, int64_t due_ms, sl_timer_cb cb)
{
    sl_timer_cancel(h, t);
    if (h->len == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->items = sl_xrealloc(h->items, h->cap * sizeof(*h->items));
    }
    t->due_ms = due_ms;
    t->cb = cb;
    place(h, h->len++, t);
    sift_up(h, h->len - 1);
}

int64_t
sl_timerheap_wait_ms(const sl_timerheap_t *h, int64_t now_ms)
{
    if (h->len == 0)
        return -1;
    int64_t d = h->items[0]->due_ms - now_ms;
    return d > 0 ? d : 0;
}

size_t
sl_timerheap_run(sl_timerheap_t *h, int64_t now_ms)
{
    size_t fired = 0;
    while (h->len > 0 && h->items[0]->due_ms <= now_ms) {
        sl_timer_t *t = h->items[0];
        sl_timer_cancel(h, t);
        t->cb(t);
        fired++;
    }
    return fired;
}

void
sl_timerheap_dispose(sl_timerheap_t *h)
{
    for (size_t i = 0; i < h->len; i++)
        h->items[i]->index = 0;
    free(h->items);
    h->items = NULL;
    h->len = h->cap = 0;
}
