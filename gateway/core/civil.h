/*
 * Integer arithmetic for clocks and calendars, shared by the limits, the
 * time zones and the HTTP-date parser: division that rounds down (so that
 * times before the epoch land in the right slot or day), and the proleptic
 * Gregorian calendar as day numbers (H. Hinnant's days_from_civil and
 * civil_from_days), valid for any year an int64_t day count holds.
 */
#ifndef SL_CIVIL_H
#define SL_CIVIL_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

/* a / b rounded towards minus infinity; b > 0. */
static inline int64_t
sl_floor_div(int64_t a, int64_t b)
{
    assert(b > 0);
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* a mod b in [0, b); b > 0. */
static inline int64_t
sl_floor_mod(int64_t a, int64_t b)
{
    assert(b > 0);
    int64_t r = a % b;
    return r < 0 ? r + b : r;
}

/* Whether year is a leap year. */
bool sl_civil_is_leap(int64_t year);

/* The days of month (1..12) in year: 28 to 31. */
int sl_civil_month_days(int64_t year, int month);

/* The day number (days since 1970-01-01) of year-month-day; month 1..12, day 1..31 (not checked). */
int64_t sl_civil_days(int64_t year, int month, int day);

/* The date of day number days (the inverse of sl_civil_days). */
void sl_civil_from_days(int64_t days, int64_t *year, int *month, int *day);

/* The weekday of day number days: 0 = Sunday (1970-01-01 was a Thursday). */
int sl_civil_weekday(int64_t days);

#endif
