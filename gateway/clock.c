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
typedef struct {
    bool read;
    int64_t ms;
} reading_t;

static __thread struct {
    bool on;
    reading_t mono, wall;
} turn;

void
sl_clock_new_turn(void)
{
    turn.on = true;
    turn.mono.read = turn.wall.read = false;
}

/* clock in milliseconds: this turn's reading of it, or a fresh one off a worker. */
static int64_t
read_ms(clockid_t clock, reading_t *kept)
{
    if (kept->read)
        return kept->ms;
    struct timespec ts;
    clock_gettime(clock, &ts);
    int64_t ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (turn.on)
        *kept = (reading_t){.read = true, .ms = ms};
    return ms;
}

int64_t
sl_now_ms(void)
{
    return read_ms(CLOCK_MONOTONIC, &turn.mono);
}

int64_t
sl_wall_ms(void)
{
    return read_ms(CLOCK_REALTIME, &turn.wall);
}

int64_t
sl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
