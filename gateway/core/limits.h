/*
 * Usage limits (behaviour.md §7): the pure accounting of "N requests /
 * tokens / micro-dollars per M minutes" for one upstream or one client key.
 * Plain data, time passed in, no locks: the shell keeps one sl_limits_t per
 * upstream and per key under the wait lock (gateway/waitq.h).
 *
 * All times are wall-clock epoch milliseconds (calendar periods are days in
 * a time zone, and usage persists per epoch minute).
 *
 *   - minute / hour: a rolling window of `every` units. Usage charged at t
 *     counts while now < end of t's slot + one more slot + window: a window
 *     is cut into SL_LIMIT_SLOTS slots, and a charge leaves the window with
 *     its slot, one to two slots late, never early. The extra slot is for
 *     the upstream, which counts a request from when it reads it: a cold
 *     connection or its own backlog may put that tens of milliseconds after
 *     sluice sent it, while the request let in when the charge expires may
 *     arrive at once over a warm one. Both would then be in the upstream's
 *     window together.
 *   - day / week / month: the calendar period holding now, in the limit's
 *     time zone (given at sl_limit_state_init: the shell passes the config's
 *     `timezone`); weeks start on Monday. Usage charged inside the period
 *     counts until it ends.
 *
 * The wall clock may step back: a window then expires nothing until the
 * clock catches up with its newest slot, and a calendar period is kept (not
 * reset) while now is before its start.
 *
 * A request is admitted against every limit of its subject with `need` (its
 * estimate in each measure), charged at admission, and settled later: the
 * difference between the real figure and the estimate is added at the
 * charge's own time (sl_limits_add with a negative or positive delta).
 */
#ifndef SL_LIMITS_H
#define SL_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/types.h"
#include "core/tz.h"

/* Slots a rolling window is cut into. */
#define SL_LIMIT_SLOTS 60

/* The three measures of one charge. */
typedef struct {
    int64_t requests, tokens, cost_micros;
} sl_amounts_t;

/* One limit and what it has counted. Fields are read by the caller, moved only by the functions below. */
typedef struct {
    sl_limit_t limit;
    int64_t window_ms; /* rolling: the window's length; 0 for a calendar period */
    int64_t slot_ms;   /* rolling: the length of one slot (window_ms / SL_LIMIT_SLOTS, rounded up, >= 1) */
    int64_t head_slot; /* rolling: the number (time / slot_ms) of the newest slot the ring holds */
    int64_t ring[SL_LIMIT_SLOTS + 3]; /* rolling: the amount per slot, indexed slot number mod its length */
    int64_t period_start_ms, period_end_ms; /* calendar: the current period, [start, end) */
    int64_t period_used;                    /* calendar: the amount counted in it */
    const sl_tz_t *tz; /* calendar: the zone of its days (not owned; the caller keeps it alive and may
                          replace it between calls, as a reload does) */
} sl_limit_state_t;

/* Why a subject cannot take a request now (the worst over its limits). */
typedef enum {
    SL_LIMIT_OK = 0,
    SL_LIMIT_WINDOW_FULL,    /* a rolling window has no room for the need: wait, or go elsewhere */
    SL_LIMIT_PERIOD_USED_UP, /* a calendar period has no room: never waited for */
    SL_LIMIT_NEVER,          /* the need exceeds a whole limit: it can never fit */
} sl_limit_verdict_t;

/*
 * The rolling window of limit, unscaled: every × one minute or one hour; 0
 * for a calendar period. The shell scales it for tests before
 * sl_limit_state_init.
 */
int64_t sl_limit_window_ms(const sl_limit_t *limit);

/*
 * A limit with nothing counted. window_ms: the rolling window
 * (sl_limit_window_ms, maybe scaled); ignored for calendar periods. tz: the
 * zone of calendar periods (kept by pointer; ignored for rolling windows).
 */
void sl_limit_state_init(sl_limit_state_t *s, const sl_limit_t *limit, int64_t window_ms, const sl_tz_t *tz);

/* The part of amounts that limit counts: requests, tokens or cost_micros. */
int64_t sl_limit_measure(const sl_limit_t *limit, const sl_amounts_t *amounts);

/*
 * Whether need (in the limit's measure) fits now: OK; WINDOW_FULL with
 * *recovery_ms the earliest time enough of the counted usage has left the
 * window for need to fit; PERIOD_USED_UP with *recovery_ms the period's end;
 * NEVER (need larger than the whole limit, or a limit amount <= 0;
 * *recovery_ms untouched). *recovery_ms is also untouched on OK. A limit
 * whose counted usage already reaches its amount is full even for a need of
 * 0; a negative need counts as 0. Moves the window (and the period) to now
 * first; nothing is charged.
 */
sl_limit_verdict_t sl_limit_check(sl_limit_state_t *s, int64_t now_ms, int64_t need, int64_t *recovery_ms);

/*
 * Adds amount (negative to take back; the counted total of a slot or a
 * period never drops below 0) as charged at at_ms: into at_ms's slot if
 * that slot is still in the window at now_ms, into the period if at_ms is
 * in the current one; otherwise it no longer counts and is dropped. at_ms
 * after now_ms counts as now_ms. Moves the window to now first.
 */
void sl_limit_add(sl_limit_state_t *s, int64_t at_ms, int64_t now_ms, int64_t amount);

/* What counts at now_ms (LimitView.used). Moves the window to now first. */
int64_t sl_limit_used(sl_limit_state_t *s, int64_t now_ms);

/*
 * The slots of a rolling window that hold usage still counting at now_ms,
 * newest first: each slot's start (wall clock) and amount, at most cap of
 * them (SL_LIMIT_SLOTS + 2 is always enough). Returns how many; 0 for a
 * calendar period. Moves the window to now first.
 */
size_t sl_limit_counted_slots(sl_limit_state_t *s, int64_t now_ms, int64_t *starts, int64_t *amounts,
                              size_t cap);

/*
 * The earliest charge time that can still count at now_ms: for a rolling
 * window, the start of the oldest slot not yet expired (margin included);
 * for a calendar period, the period's start. Stored usage from before it
 * no longer matters. Moves the period to now first.
 */
int64_t sl_limit_counts_since_ms(sl_limit_state_t *s, int64_t now_ms);

/*
 * LimitView.resets_at_ms: for a rolling window, when everything counted at
 * now_ms will have left it (now_ms when nothing counts); for a calendar
 * period, its end. Moves the window to now first.
 */
int64_t sl_limit_resets_at_ms(sl_limit_state_t *s, int64_t now_ms);

/*
 * The calendar period of per (day, week from Monday, month) holding
 * wall_ms, in zone tz, as [*start_ms, *end_ms): each bound is the instant
 * its midnight begins (sl_tz_utc_of_local), so a day across a DST change is
 * 23 or 25 hours long (23.5 or 24.5 on Lord Howe Island). Returns false,
 * the outputs untouched, for minute and hour, for a time the zone cannot
 * convert, and when no such period holds wall_ms.
 */
bool sl_calendar_period(sl_limit_per_t per, const sl_tz_t *tz, int64_t wall_ms, int64_t *start_ms,
                        int64_t *end_ms);

/* ---- a subject: all limits of one upstream or one key ---------------------------------------------- */

typedef struct {
    sl_limit_verdict_t verdict;
    /*
     * WINDOW_FULL / PERIOD_USED_UP: the earliest time every limit could take
     * the need (the latest recovery among those without room). NEVER: the
     * same over the other limits, now_ms if none of them lacks room. OK:
     * now_ms.
     */
    int64_t recovery_ms;
    /*
     * The limit that decided (for messages): the first NEVER, else the one
     * without room that recovers last; 0 when all have room.
     */
    size_t which;
} sl_limits_check_t;

/*
 * need against every limit of states (n entries): the worst verdict (NEVER
 * over PERIOD_USED_UP over WINDOW_FULL over OK), and when all could take
 * it. Nothing is charged.
 */
sl_limits_check_t sl_limits_check(sl_limit_state_t *states, size_t n, int64_t now_ms,
                                  const sl_amounts_t *need);

/*
 * The same for one of parts instances of a cluster that go on alone
 * (cluster.md, "Redis down"): each limit's amount counts as amount / parts,
 * except that a need the whole amount could take still fits an empty window
 * or period (so a large request is not refused for good). parts <= 1: the
 * whole amounts.
 */
sl_limits_check_t sl_limits_check_share(sl_limit_state_t *states, size_t n, int64_t now_ms,
                                        const sl_amounts_t *need, uint32_t parts);

/* sl_limit_add for every limit, each with its measure of delta; a limit whose measure of delta is 0 is left
 * untouched. */
void sl_limits_add(sl_limit_state_t *states, size_t n, int64_t at_ms, int64_t now_ms,
                   const sl_amounts_t *delta);

/* Room for sl_limit_describe's text. */
#define SL_LIMIT_TEXT_MAX 96

/*
 * A limit for people, as an operator would write it: "30 requests per
 * minute", "10000000 tokens per 5 minutes", "$20.00 per day" (cost to the
 * micro-dollar, trailing zeros after the cents dropped). Always
 * NUL-terminated, cut to size.
 */
void sl_limit_describe(const sl_limit_t *limit, char *out, size_t size);

/* One limit as a view shows it (LimitView): the limit, what counts now, when it resets. */
typedef struct {
    sl_limit_t limit;
    int64_t used;         /* in the limit's measure */
    int64_t resets_at_ms; /* wall clock (sl_limit_resets_at_ms) */
} sl_limit_view_t;

#endif
