/* core/resetguard.c: counting HTTP/2 streams reset before their answer, per connection and second. */
#include <criterion/criterion.h>

#include "core/resetguard.h"

Test(resetguard, more_than_the_limit_in_one_second_is_exceeded)
{
    sl_reset_guard_t g = {0};
    for (int i = 0; i < SL_RESET_GUARD_MAX_PER_SEC; i++)
        sl_reset_guard_note(&g, 7, 1000 + i);
    cr_assert_not(sl_reset_guard_exceeded(&g, 7, 1200), "exactly the limit is allowed");
    sl_reset_guard_note(&g, 7, 1300);
    cr_assert(sl_reset_guard_exceeded(&g, 7, 1400));
    cr_assert_not(sl_reset_guard_exceeded(&g, 8, 1400), "another connection is not");
}

Test(resetguard, the_count_starts_over_each_second)
{
    sl_reset_guard_t g = {0};
    for (int i = 0; i <= SL_RESET_GUARD_MAX_PER_SEC; i++)
        sl_reset_guard_note(&g, 7, 1000);
    cr_assert(sl_reset_guard_exceeded(&g, 7, 1999));
    cr_assert_not(sl_reset_guard_exceeded(&g, 7, 2000), "the window is over");
    sl_reset_guard_note(&g, 7, 2100);
    cr_assert_not(sl_reset_guard_exceeded(&g, 7, 2100), "a new window counts from one");
}

Test(resetguard, a_slow_steady_resetter_never_trips_it)
{
    sl_reset_guard_t g = {0};
    for (int64_t t = 0; t < 60000; t += 20) /* 50 a second for a minute */
        sl_reset_guard_note(&g, 3, t);
    cr_assert_not(sl_reset_guard_exceeded(&g, 3, 60000));
}

Test(resetguard, a_full_table_forgets_the_oldest_window)
{
    sl_reset_guard_t g = {0};
    for (uint64_t c = 1; c <= SL_RESET_GUARD_SLOTS; c++)
        for (int i = 0; i <= SL_RESET_GUARD_MAX_PER_SEC; i++)
            sl_reset_guard_note(&g, c, (int64_t)c);
    sl_reset_guard_note(&g, 1000, 500);
    cr_assert_not(sl_reset_guard_exceeded(&g, 1, 600), "connection 1 had the oldest window");
    cr_assert(sl_reset_guard_exceeded(&g, 2, 600));
    cr_assert_not(sl_reset_guard_exceeded(&g, 0, 600), "id 0 is never tracked");
}
