#include <criterion/criterion.h>
#include <pthread.h>
#include <time.h>

#include "worker.h"

static void
sleep_ms(int ms)
{
    nanosleep(&(struct timespec){.tv_nsec = ms * 1000000L}, NULL);
}

static void *
read_twice_apart(void *out)
{
    int64_t *ms = out;
    ms[0] = sl_now_ms();
    sleep_ms(5);
    ms[1] = sl_now_ms();
    return NULL;
}

Test(clock, a_thread_that_begins_no_turn_reads_the_clock_at_every_call)
{
    int64_t ms[2];
    pthread_t t;
    pthread_create(&t, NULL, read_twice_apart, ms);
    pthread_join(t, NULL);
    cr_assert_geq(ms[1] - ms[0], 5);
}

Test(clock, within_a_turn_each_millisecond_clock_keeps_its_first_reading_and_a_new_turn_reads_again)
{
    sl_clock_new_turn();
    int64_t mono = sl_now_ms(), wall = sl_wall_ms(), ns = sl_now_ns();
    sleep_ms(5);
    cr_assert_eq(sl_now_ms(), mono);
    cr_assert_eq(sl_wall_ms(), wall);
    cr_assert_geq(sl_now_ns() - ns, 5000000, "nanoseconds are never kept");
    sl_clock_new_turn();
    cr_assert_geq(sl_now_ms() - mono, 5);
    cr_assert_neq(sl_wall_ms(), wall, "read again, 5 ms later");
}
