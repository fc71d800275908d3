/* The gateway's clocks, and a worker loop turn's reading of them. */
#include <stdbool.h>
#include <time.h>

#include "worker.h"

/*
 * A worker reads the millisecond clocks once per turn of its loop, not at
 * every use: a request asks for them about 30 times, and each read is a
 * clock_gettime (tens of nanoseconds, more in a VM). Events in one turn were
 * picked up together, so one reading is their time, as h2o's loop time is.
 * Other threads never begin a turn and read the clocks each time.
 */
static __thread struct {
    bool on, mono_read, wall_read;
    int64_t mono_ms, wall_ms;
} turn;

void
sl_clock_new_turn(void)
{
    turn.on = true;
    turn.mono_read = turn.wall_read = false;
}

static int64_t
read_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
sl_now_ms(void)
{
    if (turn.mono_read)
        return turn.mono_ms;
    int64_t now = read_ms(CLOCK_MONOTONIC);
    if (turn.on) {
        turn.mono_ms = now;
        turn.mono_read = true;
    }
    return now;
}

int64_t
sl_wall_ms(void)
{
    if (turn.wall_read)
        return turn.wall_ms;
    int64_t now = read_ms(CLOCK_REALTIME);
    if (turn.on) {
        turn.wall_ms = now;
        turn.wall_read = true;
    }
    return now;
}

int64_t
sl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
