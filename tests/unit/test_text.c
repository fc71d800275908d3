/*
 * Local times for people (core/text.c, sl_text_local_time): in the zone
 * given, never the process's, with the zone's own abbreviation on both sides
 * of a DST change; the milliseconds as a number when the zone cannot convert
 * them; always cut to size. (The byte helpers are tested through their
 * users: jscan, dialect, route, config.)
 */
#include <criterion/criterion.h>
#include <string.h>

#include "core/text.h"
#include "test_zone.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

Test(text, local_times_are_written_in_the_zone_given)
{
    static const struct {
        const char *zone;
        int64_t wall_ms;
        const char *want;
    } rows[] = {
        {"Europe/Berlin", 1774745999000, "2026-03-29 01:59 CET"},
        {"Europe/Berlin", 1774746000000, "2026-03-29 03:00 CEST"},
        {"Europe/Berlin", 1795969439000, "2026-11-29 17:23 CET"},
        {"America/New_York", 1793512799999, "2026-11-01 01:59 EDT"},
        {"America/New_York", 1793512800000, "2026-11-01 01:00 EST"},
        {"Australia/Lord_Howe", 1791041400000, "2026-10-04 02:30 +11"},
        {"Australia/Lord_Howe", 1775314800000, "2026-04-05 01:30 +1030"},
        {"Asia/Kolkata", 1780272000000, "2026-06-01 05:30 IST"},
        {"UTC", 0, "1970-01-01 00:00 UTC"},
        {"UTC", 4102444800000, "2100-01-01 00:00 UTC"},
    };
    for (size_t i = 0; i < N(rows); i++) {
        sl_tz_t *tz = test_zone(rows[i].zone);
        char out[64];
        sl_text_local_time(tz, rows[i].wall_ms, out, sizeof out);
        cr_assert_str_eq(out, rows[i].want, "%s at %lld", rows[i].zone, (long long)rows[i].wall_ms);
        sl_tz_free(tz);
    }
}

Test(text, a_time_the_zone_cannot_convert_is_its_number_and_texts_are_cut_to_size)
{
    sl_tz_t *tz = test_zone("Europe/Berlin");
    char out[64];
    sl_text_local_time(tz, INT64_MAX, out, sizeof out);
    cr_assert_str_eq(out, "9223372036854775807");
    sl_text_local_time(tz, INT64_MIN, out, sizeof out);
    cr_assert_str_eq(out, "-9223372036854775808");
    char small[11];
    memset(small, 'x', sizeof small);
    sl_text_local_time(tz, 1774746000000, small, sizeof small);
    cr_assert_str_eq(small, "2026-03-29");
    sl_tz_free(tz);
}

Test(text, u64_decimal_writes_every_digit_and_no_more)
{
    static const struct {
        uint64_t v;
        const char *want;
    } cases[] = {{0, "0"}, {9, "9"}, {10, "10"}, {215, "215"}, {UINT64_MAX, "18446744073709551615"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[SL_U64_DECIMAL_MAX + 1];
        memset(out, 'x', sizeof out);
        size_t n = sl_u64_decimal(out, cases[i].v);
        cr_assert_eq(n, strlen(cases[i].want));
        cr_assert_eq(out[n], 'x', "nothing after the digits");
        cr_assert(memcmp(out, cases[i].want, n) == 0, "%.*s", (int)n, out);
    }
}
