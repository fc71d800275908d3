#include "timerheap.h"

#include <stdlib.h>

#include "xalloc.h"

static void
place(sl_timerheap_t *h, size_t i, sl_timer_entry_t e)
{
    h->items[i] = e;
    e.timer->index = i + 1;
}

/* Moves the entry at i up to its place; returns where it ends. */
static size_t
sift_up(sl_timerheap_t *h, size_t i)
{
    sl_timer_entry_t e = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->items[parent].due_ms <= e.due_ms)
            break;
        place(h, i, h->items[parent]);
        i = parent;
    }
    place(h, i, e);
    return i;
}

static void
sift_down(sl_timerheap_t *h, size_t i)
{
    sl_timer_entry_t e = h->items[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->len)
            break;
        if (child + 1 < h->len && h->items[child + 1].due_ms < h->items[child].due_ms)
            child++;
        if (h->items[child].due_ms >= e.due_ms)
            break;
        place(h, i, h->items[child]);
        i = child;
    }
    place(h, i, e);
}

/* The entry at i got a new due time: up if it is now earlier than its parent, else down. */
static void
resift(sl_timerheap_t *h, size_t i)
{
    if (sift_up(h, i) == i)
        sift_down(h, i);
}

void
sl_timer_cancel(sl_timerheap_t *h, sl_timer_t *t)
{
    if (t->index == 0)
        return;
    size_t i = t->index - 1;
    t->index = 0;
    sl_timer_entry_t last = h->items[--h->len];
    if (i == h->len)
        return;
    place(h, i, last);
    resift(h, i);
}

void
sl_timer_arm(sl_timerheap_t *h, sl_timer_t *t, int64_t due_ms, sl_timer_cb cb)
{
    t->due_ms = due_ms;
    t->cb = cb;
    if (t->index != 0) {
        /* Re-armed in place: one sift instead of a removal and an insertion. */
        size_t i = t->index - 1;
        h->items[i].due_ms = due_ms;
        resift(h, i);
        return;
    }
    if (h->len == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->items = sl_xrealloc(h->items, h->cap * sizeof(*h->items));
    }
    place(h, h->len++, (sl_timer_entry_t){.due_ms = due_ms, .timer = t});
    sift_up(h, h->len - 1);
}

int64_t
sl_timerheap_wait_ms(const sl_timerheap_t *h, int64_t now_ms)
{
    if (h->len == 0)
        return -1;
    int64_t d = h->items[0].due_ms - now_ms;
    return d > 0 ? d : 0;
}

size_t
sl_timerheap_run(sl_timerheap_t *h, int64_t now_ms)
{
    size_t fired = 0;
    while (h->len > 0 && h->items[0].due_ms <= now_ms) {
        sl_timer_t *t = h->items[0].timer;
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
        h->items[i].timer->index = 0;
    free(h->items);
    h->items = NULL;
    h->len = h->cap = 0;
}
