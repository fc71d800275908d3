/*
 * Time zones (core/tz.c): the zones of /usr/share/zoneinfo (tzdata) at their
 * DST edges, before, inside and past the table (the footer's rule), and the
 * instant a local day begins; POSIX TZ strings in every form of date and
 * time; TZif bytes built here, good and bad (truncated, wrong magic or
 * version, absurd counts, out-of-range values): bad input is an error with
 * a reason, never a crash or a half-built zone. Last, every zone of the
 * system against the C library, the one test that sets TZ (for glibc, the
 * oracle; criterion runs each test in a process of its own).
 */
#define _GNU_SOURCE /* tm_gmtoff, tm_zone */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/tz.h"
#include "test_zone.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static sl_tz_t *
posix(const char *spec)
{
    char err[128] = "";
    sl_tz_t *tz = sl_tz_parse_posix(spec, err, sizeof err);
    cr_assert_not_null(tz, "%s: %s", spec, err);
    return tz;
}

/* The local time at t as "2026-03-29 03:00:00 CEST +7200 dst". */
static const char *
local(const sl_tz_t *tz, int64_t t)
{
    static char buf[96];
    sl_tz_local_t l;
    cr_assert(sl_tz_local(tz, t, &l));
    snprintf(buf, sizeof buf, "%04lld-%02d-%02d %02d:%02d:%02d %s %+d%s", (long long)l.year, l.month, l.mday,
             l.hour, l.min, l.sec, l.abbr, (int)l.utoff, l.is_dst ? " dst" : "");
    return buf;
}

static int64_t
midnight(const sl_tz_t *tz, int64_t year, int64_t month, int64_t mday)
{
    int64_t t = 0;
    cr_assert(sl_tz_utc_of_local(tz, year, month, mday, 0, &t));
    return t;
}

/* ---- zones of tzdata ------------------------------------------------------------------------------ */

Test(tz, local_times_on_both_sides_of_every_change)
{
    static const struct {
        const char *zone;
        int64_t t;
        const char *want;
    } rows[] = {
        {"Europe/Berlin", 1774745999, "2026-03-29 01:59:59 CET +3600"},
        {"Europe/Berlin", 1774746000, "2026-03-29 03:00:00 CEST +7200 dst"},
        {"Europe/Berlin", 1792889999, "2026-10-25 02:59:59 CEST +7200 dst"},
        {"Europe/Berlin", 1792890000, "2026-10-25 02:00:00 CET +3600"},
        /* 2100 lies past the table (2037): the footer CET-1CEST,M3.5.0,M10.5.0/3 decides. */
        {"Europe/Berlin", 4109878799, "2100-03-28 01:59:59 CET +3600"},
        {"Europe/Berlin", 4109878800, "2100-03-28 03:00:00 CEST +7200 dst"},
        {"Europe/Berlin", 4128627599, "2100-10-31 02:59:59 CEST +7200 dst"},
        {"Europe/Berlin", 4128627600, "2100-10-31 02:00:00 CET +3600"},
        /* Before the first transition: local mean time, type 0. */
        {"Europe/Berlin", -3000000000, "1874-12-07 19:33:28 LMT +3208"},
        /* New York shows 01:00-02:00 twice in November and skips 02:00-03:00 in March. */
        {"America/New_York", 1772953199, "2026-03-08 01:59:59 EST -18000"},
        {"America/New_York", 1772953200, "2026-03-08 03:00:00 EDT -14400 dst"},
        {"America/New_York", 1793512799, "2026-11-01 01:59:59 EDT -14400 dst"},
        {"America/New_York", 1793512800, "2026-11-01 01:00:00 EST -18000"},
        /* Lord Howe Island moves by half an hour. */
        {"Australia/Lord_Howe", 1791041399, "2026-10-04 01:59:59 +1030 +37800"},
        {"Australia/Lord_Howe", 1791041400, "2026-10-04 02:30:00 +11 +39600 dst"},
        {"Australia/Lord_Howe", 1775314799, "2026-04-05 01:59:59 +11 +39600 dst"},
        {"Australia/Lord_Howe", 1775314800, "2026-04-05 01:30:00 +1030 +37800"},
        /* No DST at all. */
        {"Asia/Kolkata", 1780272000, "2026-06-01 05:30:00 IST +19800"},
        {"Asia/Kolkata", 4102444800, "2100-01-01 05:30:00 IST +19800"},
        {"UTC", 0, "1970-01-01 00:00:00 UTC +0"},
        {"UTC", -1, "1969-12-31 23:59:59 UTC +0"},
    };
    for (size_t i = 0; i < N(rows); i++) {
        sl_tz_t *tz = test_zone(rows[i].zone);
        cr_assert_str_eq(local(tz, rows[i].t), rows[i].want, "%s at %lld", rows[i].zone,
                         (long long)rows[i].t);
        sl_tz_free(tz);
    }
    sl_tz_t *berlin = test_zone("Europe/Berlin");
    cr_assert_gt(4109878799, berlin->times[berlin->n_times - 1], "2100 is the footer's");
    sl_tz_free(berlin);
}

Test(tz, days_begin_at_their_midnight_and_last_23_to_25_hours)
{
    static const struct {
        const char *zone;
        int64_t year, month, mday;
        int64_t begins, hours_x2; /* the day's length in half hours */
    } rows[] = {
        {"Europe/Berlin", 2026, 3, 29, 1774738800, 46},
        {"Europe/Berlin", 2026, 6, 1, 1780264800, 48},
        {"Europe/Berlin", 2026, 10, 25, 1792879200, 50},
        {"America/New_York", 2026, 3, 8, 1772946000, 46},
        {"America/New_York", 2026, 11, 1, 1793505600, 50},
        {"Australia/Lord_Howe", 2026, 10, 4, 1791034200, 47},
        {"Australia/Lord_Howe", 2026, 4, 5, 1775307600, 49},
        {"Asia/Kolkata", 2026, 6, 1, 1780252200, 48},
        {"UTC", 2027, 1, 1, 1798761600, 48},
    };
    for (size_t i = 0; i < N(rows); i++) {
        sl_tz_t *tz = test_zone(rows[i].zone);
        int64_t begins = midnight(tz, rows[i].year, rows[i].month, rows[i].mday);
        cr_assert_eq(begins, rows[i].begins, "%s %lld-%02lld-%02lld", rows[i].zone, (long long)rows[i].year,
                     (long long)rows[i].month, (long long)rows[i].mday);
        cr_assert_eq(midnight(tz, rows[i].year, rows[i].month, rows[i].mday + 1) - begins,
                     rows[i].hours_x2 * 1800, "%s %lld-%02lld-%02lld", rows[i].zone, (long long)rows[i].year,
                     (long long)rows[i].month, (long long)rows[i].mday);
        sl_tz_free(tz);
    }
}

Test(tz, a_time_shown_twice_begins_at_its_first_showing_and_a_skipped_one_at_the_change)
{
    sl_tz_t *tz = test_zone("America/New_York");
    int64_t t;
    /* 01:30 on the night back, first in EDT. */
    cr_assert(sl_tz_utc_of_local(tz, 2026, 11, 1, 5400, &t));
    cr_assert_eq(t, 1793511000);
    /* 02:30 on the night forward never shows: it begins at the change, when the clock reads 03:00. */
    cr_assert(sl_tz_utc_of_local(tz, 2026, 3, 8, 9000, &t));
    cr_assert_eq(t, 1772953200);
    sl_tz_free(tz);
}

Test(tz, a_midnight_skipped_or_shown_twice_begins_as_mktime_has_it)
{
    /* Sao Paulo 2018-11-04: 00:00 -03 became 01:00 -02; the day begins at the change. */
    sl_tz_t *tz = test_zone("America/Sao_Paulo");
    cr_assert_eq(midnight(tz, 2018, 11, 4), 1541300400);
    cr_assert_str_eq(local(tz, 1541300400), "2018-11-04 01:00:00 -02 -7200 dst");
    sl_tz_free(tz);
    /* Havana 2023-11-05: 01:00 CDT became 00:00 CST; the day begins at the first midnight. */
    tz = test_zone("America/Havana");
    cr_assert_eq(midnight(tz, 2023, 11, 5), 1699156800);
    cr_assert_str_eq(local(tz, 1699156800), "2023-11-05 00:00:00 CDT -14400 dst");
    sl_tz_free(tz);
}

Test(tz, dates_past_their_ends_carry_over_as_mktime_does)
{
    sl_tz_t *tz = test_zone("Europe/Berlin");
    cr_assert_eq(midnight(tz, 2026, 13, 1), midnight(tz, 2027, 1, 1));
    cr_assert_eq(midnight(tz, 2026, 0, 1), midnight(tz, 2025, 12, 1));
    cr_assert_eq(midnight(tz, 2026, 3, 0), midnight(tz, 2026, 2, 28));
    cr_assert_eq(midnight(tz, 2028, 3, 0), midnight(tz, 2028, 2, 29));
    cr_assert_eq(midnight(tz, 2026, 1, 32), midnight(tz, 2026, 2, 1));
    cr_assert_eq(midnight(tz, 2026, 2, -5), midnight(tz, 2026, 1, 26));
    int64_t t;
    cr_assert(sl_tz_utc_of_local(tz, 2026, 6, 1, 25 * 3600, &t));
    cr_assert_eq(t, midnight(tz, 2026, 6, 2) + 3600);
    sl_tz_free(tz);
}

Test(tz, instants_and_times_out_of_range_are_refused_untouched)
{
    sl_tz_t *tz = test_zone("Europe/Berlin");
    sl_tz_local_t l = {.year = 7};
    cr_assert(sl_tz_local(tz, SL_TZ_RANGE_SECS, &l));
    cr_assert(sl_tz_local(tz, -SL_TZ_RANGE_SECS, &l));
    l.year = 7;
    cr_assert_not(sl_tz_local(tz, SL_TZ_RANGE_SECS + 1, &l));
    cr_assert_not(sl_tz_local(tz, INT64_MIN, &l));
    cr_assert_eq(l.year, 7);
    int64_t t = 42;
    cr_assert_not(sl_tz_utc_of_local(tz, INT64_MAX, 1, 1, 0, &t));
    cr_assert_not(sl_tz_utc_of_local(tz, 2026, INT64_MIN, 1, 0, &t));
    cr_assert_not(sl_tz_utc_of_local(tz, 2026, 1, INT64_MAX, 0, &t));
    cr_assert_not(sl_tz_utc_of_local(tz, 2026, 1, 1, INT64_MIN, &t));
    cr_assert_not(sl_tz_utc_of_local(tz, 40000, 1, 1, 0, &t));
    cr_assert_eq(t, 42);
    sl_tz_free(tz);
}

/* ---- POSIX TZ strings ----------------------------------------------------------------------------- */

/* Two zones agree at every instant of [from, to) in steps of step seconds. */
static void
assert_same(const sl_tz_t *a, const sl_tz_t *b, int64_t from, int64_t to, int64_t step, const char *what)
{
    for (int64_t t = from; t < to; t += step) {
        char want[96];
        snprintf(want, sizeof want, "%s", local(a, t));
        cr_assert_str_eq(local(b, t), want, "%s at %lld", what, (long long)t);
    }
}

Test(tz, footer_rules_alone_agree_with_the_files)
{
    static const struct {
        const char *zone, *rule;
    } rows[] = {
        {"Europe/Berlin", "CET-1CEST,M3.5.0,M10.5.0/3"},
        {"America/New_York", "EST5EDT,M3.2.0,M11.1.0"},
        {"Australia/Lord_Howe", "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0"},
        {"America/Nuuk", "<-02>2<-01>,M3.5.0/-1,M10.5.0/0"},
        {"Asia/Jerusalem", "IST-2IDT,M3.4.4/26,M10.5.0"},
        {"America/Havana", "CST5CDT,M3.2.0/0,M11.1.0/1"},
        {"Asia/Kolkata", "IST-5:30"},
    };
    for (size_t i = 0; i < N(rows); i++) {
        sl_tz_t *file = test_zone(rows[i].zone), *rule = posix(rows[i].rule);
        /* 2024..2036: inside the files' tables, computed from the rule alone. */
        assert_same(file, rule, 1704067200, 2082758400, 3607, rows[i].zone);
        sl_tz_free(file);
        sl_tz_free(rule);
    }
}

Test(tz, tz_strings_name_offset_and_switch_as_written)
{
    static const struct {
        const char *spec;
        int64_t t;
        const char *want;
    } rows[] = {
        {"<+0530>-5:30", 0, "1970-01-01 05:30:00 +0530 +19800"},
        {"<-03>3", 0, "1969-12-31 21:00:00 -03 -10800"},
        {"UTC0", 1780272000, "2026-06-01 00:00:00 UTC +0"},
        /* Seconds in offsets; a DST offset given explicitly. */
        {"LMT-0:53:28DST-2:53:28,M3.5.0,M10.5.0", 1780272000, "2026-06-01 02:53:28 DST +10408 dst"},
        /* DST without dates switches as the US does, an hour ahead of standard time. */
        {"EST5EDT", 1772953199, "2026-03-08 01:59:59 EST -18000"},
        {"EST5EDT", 1772953200, "2026-03-08 03:00:00 EDT -14400 dst"},
        /* Week 5 is the last: in October 2026, Sunday the 25th. */
        {"CET-1CEST,M3.5.0,M10.5.0/3", 1792890000, "2026-10-25 02:00:00 CET +3600"},
        /* 26:00 on the fourth Thursday: Friday 02:00 (Jerusalem). */
        {"IST-2IDT,M3.4.4/26,M10.5.0", 1774569599, "2026-03-27 01:59:59 IST +7200"},
        {"IST-2IDT,M3.4.4/26,M10.5.0", 1774569600, "2026-03-27 03:00:00 IDT +10800 dst"},
        /* -1:00 on the last Sunday: Saturday 23:00 (Nuuk). */
        {"<-02>2<-01>,M3.5.0/-1,M10.5.0/0", 1774745999, "2026-03-28 22:59:59 -02 -7200"},
        {"<-02>2<-01>,M3.5.0/-1,M10.5.0/0", 1774746000, "2026-03-29 00:00:00 -01 -3600 dst"},
        /* A southern rule: DST across the new year, standard time in the middle of the year. */
        {"<-03>3<-02>,M10.3.0/0,M2.3.0/0", 1767225600, "2025-12-31 22:00:00 -02 -7200 dst"},
        {"<-03>3<-02>,M10.3.0/0,M2.3.0/0", 1780272000, "2026-05-31 21:00:00 -03 -10800"},
    };
    for (size_t i = 0; i < N(rows); i++) {
        sl_tz_t *tz = posix(rows[i].spec);
        cr_assert_str_eq(local(tz, rows[i].t), rows[i].want, "%s at %lld", rows[i].spec,
                         (long long)rows[i].t);
        sl_tz_free(tz);
    }
    sl_tz_t *tz = posix("EST5EDT");
    cr_assert_eq(tz->min_utoff, -18000);
    cr_assert_eq(tz->max_utoff, -14400);
    sl_tz_free(tz);
    tz = posix("<+0530>-5:30");
    cr_assert_eq(tz->min_utoff, 19800);
    cr_assert_eq(tz->max_utoff, 19800);
    sl_tz_free(tz);
}

Test(tz, julian_days_with_and_without_february_29)
{
    /* Jn never counts February 29: J60 is March 1 every year. */
    sl_tz_t *tz = posix("XST-1XDT,J60/0,J300/0");
    int64_t t;
    cr_assert(sl_tz_utc_of_local(tz, 2028, 2, 29, 12 * 3600, &t));
    cr_assert_str_eq(local(tz, t), "2028-02-29 12:00:00 XST +3600");
    cr_assert_str_eq(local(tz, midnight(tz, 2028, 3, 1)), "2028-03-01 01:00:00 XDT +7200 dst");
    cr_assert_str_eq(local(tz, midnight(tz, 2027, 3, 1)), "2027-03-01 01:00:00 XDT +7200 dst");
    /* DST ends as its clock would read Oct 27 00:00: back to 23:00, so the day begins an hour later. */
    cr_assert_str_eq(local(tz, midnight(tz, 2028, 10, 27) - 3601), "2028-10-26 23:59:59 XDT +7200 dst");
    cr_assert_str_eq(local(tz, midnight(tz, 2028, 10, 27) - 3600), "2028-10-26 23:00:00 XST +3600");
    cr_assert_str_eq(local(tz, midnight(tz, 2028, 10, 27)), "2028-10-27 00:00:00 XST +3600");
    sl_tz_free(tz);
    /* n counts from 0 and counts February 29: day 59 is February 29 in a leap year, March 1 otherwise. */
    tz = posix("XST-1XDT,59/0,299/0");
    cr_assert_str_eq(local(tz, midnight(tz, 2028, 2, 29)), "2028-02-29 01:00:00 XDT +7200 dst");
    cr_assert(sl_tz_utc_of_local(tz, 2027, 2, 28, 23 * 3600, &t));
    cr_assert_str_eq(local(tz, t), "2027-02-28 23:00:00 XST +3600");
    cr_assert_str_eq(local(tz, midnight(tz, 2027, 3, 1)), "2027-03-01 01:00:00 XDT +7200 dst");
    sl_tz_free(tz);
}

Test(tz, dst_all_year_stays_on_across_new_year)
{
    /* The end (Dec 31, 25:00 DST) meets the next start (Jan 1, 00:00 standard): no standard time at all. */
    sl_tz_t *tz = posix("EST5EDT,0/0,J365/25");
    for (int64_t t = 1767225600 - 7 * 86400; t < 1767225600 + 7 * 86400; t += 1800)
        cr_assert(strstr(local(tz, t), " EDT -14400 dst") != NULL, "%s", local(tz, t));
    sl_tz_free(tz);
}

Test(tz, bad_tz_strings_are_errors)
{
    static const char *const bad[] = {
        "",
        "UT",
        "CET",
        "CET-",
        "CET-25",
        "CET-1:60",
        "CET-1:00:60",
        "CET+-1",
        "<+05",
        "<+5>-5",
        "<+0530>-5:30x",
        "CET-1CEST,",
        "CET-1CEST,M3.5.0",
        "CET-1CEST,M3.5.0,",
        "CET-1CEST,M3.5.0,M10.5.0,",
        "CET-1CEST,M13.5.0,M10.5.0",
        "CET-1CEST,M0.5.0,M10.5.0",
        "CET-1CEST,M3.6.0,M10.5.0",
        "CET-1CEST,M3.0.0,M10.5.0",
        "CET-1CEST,M3.5.7,M10.5.0",
        "CET-1CEST,M3.5,M10.5.0",
        "CET-1CEST,J0,J300",
        "CET-1CEST,J366,J300",
        "CET-1CEST,366,300",
        "CET-1CEST,M3.5.0/168,M10.5.0",
        "CET-1CEST,M3.5.0/,M10.5.0",
        "CET-1CEST-25,M3.5.0,M10.5.0",
        "ABCDEFGHIJKLMNOP-1",
        "CET-1CE",
        "CET-1 CEST",
    };
    for (size_t i = 0; i < N(bad); i++) {
        char err[128] = "";
        cr_assert_null(sl_tz_parse_posix(bad[i], err, sizeof err), "'%s' parsed", bad[i]);
        cr_assert_neq(err[0], '\0', "'%s': no reason", bad[i]);
    }
    cr_assert_null(sl_tz_parse_posix(NULL, NULL, 0));
}

/* ---- TZif bytes ----------------------------------------------------------------------------------- */

typedef struct {
    int32_t utoff;
    uint8_t is_dst, desig;
} ttinfo_t;

/* What build() writes: a version 1 file, or versions 2+ with the same data in both blocks. */
typedef struct {
    char version; /* 0, '2', '3', '4' */
    const int64_t *times;
    const uint8_t *idx;
    uint32_t n_times;
    const ttinfo_t *types;
    uint32_t n_types;
    const char *chars; /* the abbreviations, each NUL-terminated */
    uint32_t n_chars;
    const char *footer; /* versions 2+: the TZ string */
} tzif_t;

typedef struct {
    uint8_t bytes[4096];
    size_t len;
    size_t header; /* where the header of the block that counts starts (the second in versions 2+) */
} built_t;

static void
put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static void
put(built_t *b, const void *p, size_t n)
{
    cr_assert_leq(b->len + n, sizeof b->bytes);
    if (n > 0) /* p may be NULL then */
        memcpy(b->bytes + b->len, p, n);
    b->len += n;
}

static void
put_block(built_t *b, const tzif_t *z, int time_size)
{
    uint8_t h[44] = {'T', 'Z', 'i', 'f', (uint8_t)z->version};
    put32(h + 20, z->n_types); /* isutcnt */
    put32(h + 24, z->n_types); /* isstdcnt */
    put32(h + 32, z->n_times);
    put32(h + 36, z->n_types);
    put32(h + 40, z->n_chars);
    b->header = b->len;
    put(b, h, sizeof h);
    for (uint32_t i = 0; i < z->n_times; i++) {
        uint8_t t[8];
        put32(t, (uint32_t)((uint64_t)z->times[i] >> 32));
        put32(t + 4, (uint32_t)z->times[i]);
        put(b, time_size == 8 ? t : t + 4, (size_t)time_size);
    }
    put(b, z->idx, z->n_times);
    for (uint32_t i = 0; i < z->n_types; i++) {
        uint8_t t[6];
        put32(t, (uint32_t)z->types[i].utoff);
        t[4] = z->types[i].is_dst, t[5] = z->types[i].desig;
        put(b, t, sizeof t);
    }
    put(b, z->chars, z->n_chars);
    uint8_t zeros[256] = {0};
    put(b, zeros, z->n_types); /* isstd */
    put(b, zeros, z->n_types); /* isut */
}

static built_t
build(const tzif_t *z)
{
    built_t b = {.len = 0};
    put_block(&b, z, 4);
    if (z->version != 0) {
        put_block(&b, z, 8);
        put(&b, "\n", 1);
        put(&b, z->footer, strlen(z->footer));
        put(&b, "\n", 1);
    }
    return b;
}

/* A small zone: UTC+1 "AAA", UTC+2 "BBB" (DST) from 2000, AAA again from 2030, then the rule. */
static const int64_t small_times[] = {946684800, 1893456000}; /* 2000 and 2030: they fit 32 bits */
static const uint8_t small_idx[] = {1, 0};
static const ttinfo_t small_types[] = {{3600, 0, 0}, {7200, 1, 4}};
static const char small_chars[] = "AAA\0BBB";

static tzif_t
small(char version)
{
    return (tzif_t){
        version, small_times, small_idx, 2, small_types, 2, small_chars, 8, "AAA-1BBB,M3.5.0,M10.5.0/3"};
}

static sl_tz_t *
parse(const built_t *b, char *err, size_t err_size)
{
    return sl_tz_parse_tzif(b->bytes, b->len, err, err_size);
}

Test(tz, built_files_of_every_version_parse)
{
    static const char versions[] = {0, '2', '3', '4'};
    for (size_t v = 0; v < N(versions); v++) {
        tzif_t z = small(versions[v]);
        built_t b = build(&z);
        char err[128] = "";
        sl_tz_t *tz = parse(&b, err, sizeof err);
        cr_assert_not_null(tz, "version %d: %s", versions[v], err);
        cr_assert_eq(tz->n_times, 2);
        cr_assert_eq(tz->n_types, 2);
        cr_assert_str_eq(local(tz, 946684799), "2000-01-01 00:59:59 AAA +3600");
        cr_assert_str_eq(local(tz, 946684800), "2000-01-01 02:00:00 BBB +7200 dst");
        cr_assert_str_eq(local(tz, 1893456000), "2030-01-01 01:00:00 AAA +3600");
        cr_assert_eq(tz->has_rule, versions[v] != 0);
        if (versions[v] != 0)
            cr_assert_str_eq(local(tz, 4102444800 + 180 * 86400), "2100-06-30 02:00:00 BBB +7200 dst");
        else
            cr_assert_str_eq(local(tz, 4102444800 + 180 * 86400), "2100-06-30 01:00:00 AAA +3600");
        sl_tz_free(tz);
    }
}

Test(tz, an_empty_footer_keeps_the_last_type_and_no_transitions_use_the_rule)
{
    tzif_t z = small('2');
    z.footer = "";
    built_t b = build(&z);
    sl_tz_t *tz = parse(&b, NULL, 0);
    cr_assert_not_null(tz);
    cr_assert_not(tz->has_rule);
    cr_assert_str_eq(local(tz, 4102444800 + 180 * 86400), "2100-06-30 01:00:00 AAA +3600");
    sl_tz_free(tz);
    z = (tzif_t){'2', NULL, NULL, 0, small_types, 1, "AAA", 4, "AAA-1BBB,M3.5.0,M10.5.0/3"};
    b = build(&z);
    tz = parse(&b, NULL, 0);
    cr_assert_not_null(tz);
    cr_assert_str_eq(local(tz, 1780272000), "2026-06-01 02:00:00 BBB +7200 dst");
    cr_assert_str_eq(local(tz, 1767225600), "2026-01-01 01:00:00 AAA +3600");
    sl_tz_free(tz);
}

/* Where a spoil lands in small('2')'s bytes. */
typedef enum {
    AT_START,  /* the first header */
    AT_HEADER, /* the second header, the one that counts */
    AT_TIMES,  /* its transition times: 2 x 8 bytes */
    AT_IDX,    /* their type indices: 2 bytes */
    AT_TTINFO, /* the types (2 x 6 bytes), then the abbreviations (8), then isstd (2) */
    AT_END,    /* the last byte + 1 (the footer ends "...M10.5.0/3\n") */
} place_t;

static size_t
place(const built_t *b, place_t p)
{
    size_t h = b->header;
    size_t at[] = {[AT_START] = 0,         [AT_HEADER] = h,           [AT_TIMES] = h + 44,
                   [AT_IDX] = h + 44 + 16, [AT_TTINFO] = h + 44 + 18, [AT_END] = b->len};
    return at[p];
}

Test(tz, spoiled_files_are_refused_with_a_reason)
{
    /* One field set to value (width 1 or 4 bytes, big-endian), or the last cut bytes cut off. */
    static const struct {
        const char *what;
        place_t place;
        int off, width;
        uint32_t value;
        size_t cut;
    } rows[] = {
        {"wrong magic", AT_START, 0, 1, 'X', 0},
        {"wrong magic in the second header", AT_HEADER, 3, 1, 'F', 0},
        {"version 5", AT_START, 4, 1, '5', 0},
        {"version '1'", AT_START, 4, 1, '1', 0},
        {"isutcnt neither 0 nor typecnt", AT_HEADER, 20, 4, 1, 0},
        {"isstdcnt neither 0 nor typecnt", AT_HEADER, 24, 4, 3, 0},
        {"leap seconds", AT_HEADER, 28, 4, 1, 0},
        {"4 G transitions", AT_HEADER, 32, 4, 0xffffffffu, 0},
        {"2 G transitions in the version 1 block", AT_START, 32, 4, 0x7fffffffu, 0},
        {"no types", AT_HEADER, 36, 4, 0, 0},
        {"257 types", AT_HEADER, 36, 4, 257, 0},
        {"no abbreviation bytes", AT_HEADER, 40, 4, 0, 0},
        {"4 GB of abbreviations", AT_HEADER, 40, 4, 0xfffffff0u, 0},
        {"transitions out of order", AT_TIMES, 12, 4, 946684800, 0}, /* the second now equals the first */
        {"a type index past the types", AT_IDX, 1, 1, 2, 0},
        {"an offset of 26 hours", AT_TTINFO, 0, 4, 93600, 0},
        {"an offset of -2^31", AT_TTINFO, 0, 4, 0x80000000u, 0},
        {"is_dst 2", AT_TTINFO, 4, 1, 2, 0},
        {"an abbreviation index past the bytes", AT_TTINFO, 5, 1, 8, 0},
        {"an abbreviation without its NUL", AT_TTINFO, 12 + 7, 1, 'C', 0}, /* "BBB\0" becomes "BBBC" */
        {"an isstd flag of 2", AT_TTINFO, 12 + 8, 1, 2, 0},
        {"a footer that is no TZ string", AT_END, -2, 1, 'x', 0}, /* ...M10.5.0/x */
        {"no footer", AT_END, 0, 0, 0, sizeof("\nAAA-1BBB,M3.5.0,M10.5.0/3\n") - 1},
        {"an unterminated footer", AT_END, 0, 0, 0, 1},
    };
    for (size_t i = 0; i < N(rows); i++) {
        tzif_t z = small('2');
        built_t b = build(&z);
        uint8_t *p = b.bytes + place(&b, rows[i].place) + rows[i].off;
        if (rows[i].width == 4)
            put32(p, rows[i].value);
        else if (rows[i].width == 1)
            *p = (uint8_t)rows[i].value;
        b.len -= rows[i].cut;
        char err[128] = "";
        cr_assert_null(parse(&b, err, sizeof err), "%s: parsed", rows[i].what);
        cr_assert_neq(err[0], '\0', "%s: no reason", rows[i].what);
    }
}

Test(tz, a_long_abbreviation_is_refused)
{
    static const char chars[] = "ABCDEFGHIJKLMNOPQ";
    static const ttinfo_t t[] = {{0, 0, 0}};
    tzif_t z = {'2', NULL, NULL, 0, t, 1, chars, sizeof chars, "UTC0"};
    built_t b = build(&z);
    char err[128] = "";
    cr_assert_null(parse(&b, err, sizeof err));
    cr_assert_not_null(strstr(err, "abbreviation"), "%s", err);
}

Test(tz, every_truncation_of_a_real_file_is_refused)
{
    char *bytes;
    size_t len;
    cr_assert_not_null(bytes = test_read_file(ZONEINFO "/Europe/Berlin", &len));
    /* The footer's closing newline is the last byte: every shorter prefix lacks something. */
    for (size_t n = 0; n < len; n++) {
        char err[128] = "";
        sl_tz_t *tz = sl_tz_parse_tzif(bytes, n, err, sizeof err);
        cr_assert_null(tz, "a prefix of %zu bytes parsed", n);
        cr_assert_neq(err[0], '\0');
    }
    cr_assert_null(sl_tz_parse_tzif(NULL, 0, NULL, 0));
    free(bytes);
}

Test(tz, every_byte_of_a_real_file_spoiled_is_an_error_or_a_zone_that_converts)
{
    char *bytes;
    size_t len;
    cr_assert_not_null(bytes = test_read_file(ZONEINFO "/Australia/Lord_Howe", &len));
    static const uint8_t spoils[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    for (size_t at = 0; at < len; at++) {
        char keep = bytes[at];
        for (size_t s = 0; s < N(spoils); s++) {
            bytes[at] = (char)(keep ^ spoils[s]);
            sl_tz_t *tz = sl_tz_parse_tzif(bytes, len, NULL, 0);
            if (tz == NULL)
                continue;
            sl_tz_local_t l;
            int64_t t;
            cr_assert(sl_tz_local(tz, 1780272000, &l));
            cr_assert(sl_tz_utc_of_local(tz, 2026, 10, 4, 0, &t));
            cr_assert(sl_tz_local(tz, t, &l));
            sl_tz_free(tz);
        }
        bytes[at] = keep;
    }
    free(bytes);
}

/* ---- every zone of the system against the C library ----------------------------------------------- */

typedef struct {
    size_t zones, instants, midnights;
} tally_t;

/* Every local time at instants 1900..2200 (a week apart, at varying times of day), and every midnight of
 * the days around each change of offset in 1970..2100, as glibc's localtime_r and mktime give them. */
static void
compare_zone(const char *name, tally_t *tally)
{
    sl_tz_t *tz = test_zone(name);
    setenv("TZ", name, 1);
    tzset();
    for (int64_t t = -2208988800; t < 7258118400; t += 7 * 86400 + 3607) {
        time_t tt = (time_t)t;
        struct tm tm;
        cr_assert_not_null(localtime_r(&tt, &tm));
        sl_tz_local_t l;
        cr_assert(sl_tz_local(tz, t, &l));
        cr_assert(l.year == tm.tm_year + 1900 && l.month == tm.tm_mon + 1 && l.mday == tm.tm_mday &&
                      l.hour == tm.tm_hour && l.min == tm.tm_min && l.sec == tm.tm_sec &&
                      l.wday == tm.tm_wday && l.utoff == tm.tm_gmtoff && l.is_dst == (tm.tm_isdst > 0) &&
                      strcmp(l.abbr, tm.tm_zone) == 0,
                  "%s at %lld: %s, glibc %d-%02d-%02d %02d:%02d:%02d %s %ld", name, (long long)t,
                  local(tz, t), tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                  tm.tm_sec, tm.tm_zone, tm.tm_gmtoff);
        tally->instants++;
    }
    int64_t first = 0, last = 4133980800; /* 1970-01-01 .. 2101-01-01 */
    sl_tz_local_t before, after;
    cr_assert(sl_tz_local(tz, first, &before));
    for (int64_t day = first; day < last; day += 86400, before = after) {
        cr_assert(sl_tz_local(tz, day + 86400, &after));
        if (after.utoff == before.utoff)
            continue;
        for (int64_t d = -1; d <= 2; d++) {
            sl_tz_local_t l;
            cr_assert(sl_tz_local(tz, day + d * 86400, &l));
            struct tm tm = {
                .tm_year = (int)l.year - 1900, .tm_mon = l.month - 1, .tm_mday = l.mday, .tm_isdst = -1};
            time_t want = mktime(&tm);
            int64_t got = midnight(tz, l.year, l.month, l.mday);
            cr_assert_eq(got, (int64_t)want, "%s: midnight of %lld-%02d-%02d at %lld, glibc %lld", name,
                         (long long)l.year, l.month, l.mday, (long long)got, (long long)want);
            tally->midnights++;
        }
    }
    sl_tz_free(tz);
    tally->zones++;
}

static void
walk(const char *dir, tally_t *tally)
{
    char path[1024];
    snprintf(path, sizeof path, ZONEINFO "/%s", dir);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "%s", path);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char name[512];
        snprintf(name, sizeof name, "%s%s%s", dir, *dir ? "/" : "", e->d_name);
        snprintf(path, sizeof path, ZONEINFO "/%s", name);
        struct stat st;
        if (lstat(path, &st) != 0 || S_ISLNK(st.st_mode))
            continue;
        if (S_ISDIR(st.st_mode)) {
            /* right/ counts leap seconds (refused by design); posix/ repeats the zones. */
            if (strcmp(name, "right") != 0 && strcmp(name, "posix") != 0)
                walk(name, tally);
            continue;
        }
        size_t len;
        char *bytes = test_read_file(path, &len);
        bool tzif = bytes != NULL && len >= 4 && memcmp(bytes, "TZif", 4) == 0;
        free(bytes);
        if (tzif)
            compare_zone(name, tally);
    }
    closedir(d);
}

Test(tz, every_zone_of_the_system_agrees_with_the_c_library, .timeout = 50)
{
    tally_t tally = {0};
    walk("", &tally);
    cr_log_info("%zu zones, %zu instants, %zu midnights", tally.zones, tally.instants, tally.midnights);
    cr_assert_gt(tally.zones, 300, "tzdata has more zones than %zu", tally.zones);
    cr_assert_gt(tally.midnights, 10000);
}
