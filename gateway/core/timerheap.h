/*
 * A min-heap of timers for one worker loop. h2o 2.2.5's timeouts have one
 * fixed duration per list; sluice needs arbitrary deadlines (connect, idle,
 * total, backoff with jitter, keep-alives), so each worker keeps one heap and
 * its loop sleeps until the earliest entry. Pure: time is passed in.
 */
#ifndef SL_TIMERHEAP_H
#define SL_TIMERHEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_timer sl_timer_t;
typedef void (*sl_timer_cb)(sl_timer_t *timer);

/* Embed in the owner's struct; zero-initialise. The owner must cancel it before freeing. */
struct sl_timer {
    int64_t due_ms;
    sl_timer_cb cb;
    size_t index; /* position in the heap + 1; 0 when not armed */
};

/* Each entry keeps its timer's due time beside the pointer, so sifting compares without visiting timers. */
typedef struct {
    int64_t due_ms;
    sl_timer_t *timer;
} sl_timer_entry_t;

typedef struct {
    sl_timer_entry_t *items;
    size_t len, cap;
} sl_timerheap_t;

/* Arms (or re-arms) a timer to fire at due_ms. */
void sl_timer_arm(sl_timerheap_t *heap, sl_timer_t *timer, int64_t due_ms, sl_timer_cb cb);
/* Disarms a timer; harmless when it is not armed. */
void sl_timer_cancel(sl_timerheap_t *heap, sl_timer_t *timer);
static inline int
sl_timer_is_armed(const sl_timer_t *timer)
{
    return timer->index != 0;
}
/* Milliseconds until the earliest timer (0 when one is due), or -1 when none is armed. */
int64_t sl_timerheap_wait_ms(const sl_timerheap_t *heap, int64_t now_ms);
/*
 * Fires every timer due at now_ms, earliest first. A callback may arm or
 * cancel any timer, itself included; timers armed for now or earlier by a
 * callback fire in the same call. Returns how many fired.
 */
size_t sl_timerheap_run(sl_timerheap_t *heap, int64_t now_ms);
void sl_timerheap_dispose(sl_timerheap_t *heap);

#endif
