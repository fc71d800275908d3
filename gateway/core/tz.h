/*
 * Time zones as plain data (config.md `timezone`): a zone parsed from the
 * bytes of a TZif file (RFC 8536, versions 1 to 4: what /usr/share/zoneinfo
 * holds) or from a POSIX TZ string, and the conversions the calendar periods
 * of limits and the texts people read need: the local time at an instant,
 * and the instant a local time begins.
 *
 * Pure: the shell reads the file once (at config load) and hands over its
 * bytes; nothing here reads TZ, the clock or the file system, and a zone is
 * never written after parsing, so any number of threads may convert with it
 * at once. Leap seconds are not counted (sluice's clock is POSIX time), so a
 * TZif file that lists them (the right/ zones) is refused.
 *
 * Instants are seconds since the epoch (UTC). A zone answers for instants
 * within SL_TZ_RANGE_SECS of the epoch (about 34 800 years either way).
 */
#ifndef SL_TZ_H
#define SL_TZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Room for a zone abbreviation ("CET", "+0530") and its NUL; a longer one is refused. */
#define SL_TZ_ABBR_MAX 16

/* The instants a zone converts: [-SL_TZ_RANGE_SECS, SL_TZ_RANGE_SECS]. */
#define SL_TZ_RANGE_SECS ((int64_t)1 << 40)

/* One kind of local time: its offset, whether it is daylight saving time, its abbreviation. */
typedef struct {
    int32_t utoff; /* seconds east of UTC, within ±25:59:59 */
    bool is_dst;
    char abbr[SL_TZ_ABBR_MAX];
} sl_tz_type_t;

typedef enum {
    SL_TZ_JULIAN_NO_LEAP, /* Jn: day n of 1..365, February 29 never counted */
    SL_TZ_JULIAN,         /* n: day n of 0..365, February 29 counted */
    SL_TZ_MONTH_WEEK_DAY, /* Mm.w.d: weekday d (0 = Sunday) of week w (1..5, 5 = the last) of month m */
} sl_tz_date_form_t;

/* The day and local time at which a POSIX rule switches, the same every year. */
typedef struct {
    sl_tz_date_form_t form;
    int day;      /* Jn, n: n; Mm.w.d: d */
    int month;    /* Mm.w.d only: 1..12 */
    int week;     /* Mm.w.d only: 1..5 */
    int32_t secs; /* the local time of the switch, -167 h to 167 h (RFC 8536 3.3.1; POSIX: 0 to 24 h) */
} sl_tz_change_t;

/*
 * A POSIX TZ rule ("CET-1CEST,M3.5.0,M10.5.0/3"): standard time, and
 * without has_dst nothing else; with it, daylight saving time from start
 * (a local time in standard time) to end (a local time in daylight saving
 * time) every year.
 */
typedef struct {
    sl_tz_type_t std, dst;
    bool has_dst;
    sl_tz_change_t start, end;
} sl_tz_rule_t;

/*
 * A zone: a table of transitions, then the rule. Before the first
 * transition types[0] holds; from times[i] on, types[types_at[i]]; after
 * the last transition the rule (or, without one, the last transition's
 * type). With no transitions the rule holds throughout, or types[0] when
 * there is no rule. Owned by whoever parsed it; free with sl_tz_free.
 */
typedef struct {
    const int64_t *times; /* n_times instants, strictly ascending */
    const uint8_t *types_at;
    size_t n_times;
    const sl_tz_type_t *types; /* n_types >= 1 */
    size_t n_types;
    bool has_rule;
    sl_tz_rule_t rule;
    int32_t min_utoff, max_utoff; /* over every type and the rule */
} sl_tz_t;

/* A local time: the wall clock and calendar in a zone at an instant. */
typedef struct {
    int64_t year;
    int month, mday; /* 1..12, 1..31 */
    int hour, min, sec;
    int wday; /* 0 = Sunday */
    int32_t utoff;
    bool is_dst;
    const char *abbr; /* the zone's own; valid as long as the zone */
} sl_tz_local_t;

/*
 * Parses the bytes of a TZif file (version 1, or the 64-bit data and the
 * footer's TZ string of versions 2 to 4). Returns the zone (free it with
 * sl_tz_free), or NULL with a one-line reason in err[0..err_size) (err may
 * be NULL) when the bytes are not a well-formed TZif file: too short or
 * truncated, another magic or version, counts that do not fit the bytes or
 * each other, transitions out of order, an index, offset or abbreviation
 * out of range, leap-second records, or a footer that is missing or not a
 * valid TZ string. Never reads past data[len).
 */
sl_tz_t *sl_tz_parse_tzif(const void *data, size_t len, char *err, size_t err_size);

/*
 * Parses a POSIX TZ string as TZif footers write it: std offset [dst
 * [offset] [,start[/time],end[/time]]], names of 3 or more letters or
 * <quoted> with digits and signs too, offsets west-positive up to 24 h,
 * dates as Jn, n or Mm.w.d, times up to ±167 h (RFC 8536's extension).
 * Daylight saving time without dates switches as the US does (M3.2.0,
 * M11.1.0), as glibc does when TZ names no such dates. Returns the zone
 * (no transitions, only the rule), or NULL with a reason as above.
 */
sl_tz_t *sl_tz_parse_posix(const char *spec, char *err, size_t err_size);

/* Frees a zone sl_tz_parse_tzif or sl_tz_parse_posix returned; NULL is ignored. */
void sl_tz_free(sl_tz_t *tz);

/*
 * The local time in tz at instant t (seconds since the epoch). Returns
 * false, *out untouched, when t is outside ±SL_TZ_RANGE_SECS.
 */
bool sl_tz_local(const sl_tz_t *tz, int64_t t, sl_tz_local_t *out);

/*
 * The instant a local time begins in tz: the earliest instant at which the
 * zone's clock reads year-month-mday secs (seconds into the day) or later.
 * month and mday may run past their ends or below 1 and are carried over
 * as mktime does (month 13 is January of the next year, day 0 the last of
 * the month before). So a time the clock shows twice (a change back)
 * begins at its first showing, and a time the clock skips (a change
 * forward) begins at the change itself: a midnight skipped by a DST change
 * at 00:00 begins at 01:00 DST, as mktime with tm_isdst = -1 has it.
 * Returns false, *t untouched, when the time is outside the zone's range.
 */
bool sl_tz_utc_of_local(const sl_tz_t *tz, int64_t year, int64_t month, int64_t mday, int64_t secs,
                        int64_t *t);

#endif
