/* Clock and calendar arithmetic (core/civil.h): rounding down before the epoch, day numbers both ways, leap
 * years. */
#include <criterion/criterion.h>

#include "core/civil.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

Test(civil, division_rounds_down_and_the_remainder_is_never_negative)
{
    cr_assert_eq(sl_floor_div(7, 2), 3);
    cr_assert_eq(sl_floor_div(-7, 2), -4);
    cr_assert_eq(sl_floor_div(-8, 2), -4);
    cr_assert_eq(sl_floor_div(-1, 86400), -1);
    cr_assert_eq(sl_floor_div(INT64_MIN, 1), INT64_MIN);
    cr_assert_eq(sl_floor_mod(7, 3), 1);
    cr_assert_eq(sl_floor_mod(-7, 3), 2);
    cr_assert_eq(sl_floor_mod(-6, 3), 0);
    cr_assert_eq(sl_floor_mod(INT64_MIN, 7), 6);
}

Test(civil, known_dates_have_their_day_numbers_and_weekdays)
{
    static const struct {
        int64_t year;
        int month, day;
        int64_t days;
        int wday;
    } rows[] = {
        {1970, 1, 1, 0, 4},     {1969, 12, 31, -1, 3},    {2000, 2, 29, 11016, 2},
        {2000, 3, 1, 11017, 3}, {2026, 11, 29, 20786, 0}, {1600, 2, 29, -135081, 2},
        {1, 1, 1, -719162, 1},  {-1, 12, 31, -719529, 5}, {9999, 12, 31, 2932896, 5},
    };
    for (size_t i = 0; i < N(rows); i++) {
        cr_assert_eq(sl_civil_days(rows[i].year, rows[i].month, rows[i].day), rows[i].days, "%lld-%02d-%02d",
                     (long long)rows[i].year, rows[i].month, rows[i].day);
        cr_assert_eq(sl_civil_weekday(rows[i].days), rows[i].wday, "%lld", (long long)rows[i].days);
    }
}

Test(civil, day_numbers_and_dates_convert_both_ways_across_centuries)
{
    int64_t prev_year = 0;
    int prev_month = 0, prev_day = 0;
    for (int64_t days = -800000; days < 800000; days++) {
        int64_t y;
        int m, d;
        sl_civil_from_days(days, &y, &m, &d);
        cr_assert(m >= 1 && m <= 12 && d >= 1 && d <= sl_civil_month_days(y, m));
        cr_assert_eq(sl_civil_days(y, m, d), days);
        if (days > -800000)
            cr_assert(d == prev_day + 1 ||
                          (d == 1 && (m == prev_month + 1 || (m == 1 && y == prev_year + 1))),
                      "day %lld follows %lld-%02d-%02d", (long long)days, (long long)prev_year, prev_month,
                      prev_day);
        prev_year = y, prev_month = m, prev_day = d;
    }
}

Test(civil, leap_years_and_month_lengths)
{
    cr_assert(sl_civil_is_leap(2000));
    cr_assert(sl_civil_is_leap(2028));
    cr_assert(sl_civil_is_leap(-4));
    cr_assert_not(sl_civil_is_leap(1900));
    cr_assert_not(sl_civil_is_leap(2026));
    cr_assert_eq(sl_civil_month_days(2028, 2), 29);
    cr_assert_eq(sl_civil_month_days(2100, 2), 28);
    cr_assert_eq(sl_civil_month_days(2026, 4), 30);
    cr_assert_eq(sl_civil_month_days(2026, 12), 31);
}
