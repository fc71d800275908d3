/*
 * A budget on the first reads of an upstream answer.
 *
 * h2o 2.2.5 reads a readable socket until a read comes back short, doubling
 * its buffer as it goes, and only then calls back. A 184 kB stream that
 * arrived at once is read whole (six reads, four buffer copies) before
 * sluice sees its first event, and the client's first byte waits for all of
 * it: about 100 µs on the benchmarks' 2-core VM (bench/README.md). nginx
 * reads a buffer's worth and sends it on.
 *
 * This module interposes read(2) for the whole process and changes nothing
 * for a descriptor without a budget. A budget is a number of bytes: reads of
 * its descriptor return at most what is left of it. A read the budget cut
 * short ends h2o's read loop as a drained socket would; one that spent the
 * budget exactly on what was asked is followed by one EAGAIN, which does
 * the same. h2o calls back with what it read, and since its epoll interest
 * is level-triggered, its loop reads the rest on the next turn.
 *
 * A budget lasts over short reads (an answer's head may come alone, its
 * burst of events a moment later) and ends when it is spent, at an error or
 * the end of the stream, and at sl_read_budget_clear. Descriptors at or
 * above SL_READ_BUDGET_MAX_FD never have one.
 */
#ifndef SL_READ_BUDGET_H
#define SL_READ_BUDGET_H

#include <stdint.h>

#define SL_READ_BUDGET_MAX_FD (1 << 20) /* Linux's default nr_open */

/* The next reads of fd return at most bytes in all (0 < bytes < UINT32_MAX). */
void sl_read_budget_set(int fd, uint32_t bytes);

/* fd reads as usual again (before it is closed: its number is reused). */
void sl_read_budget_clear(int fd);

#endif
