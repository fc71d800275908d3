/*
 * The per-upstream breaker (behaviour.md §8): plain data, time passed in.
 *
 *   closed --(failures_to_pause consecutive unexplained failures)--> open
 *   open   --(its time has passed; the next check hands out the probe)--> half_open
 *   half_open --(success)--> closed        (trip count reset)
 *   half_open --(unexplained failure)--> open again, the pause doubled per trip (capped)
 *
 * Failures with a known cause hold the upstream for their own time instead
 * of counting: no balance, quota used up (until its reset), credentials
 * rejected (until the config changes: sl_breaker_clear_auth).
 *
 * Rate limits (429) never touch the breaker: the caller must not call
 * sl_breaker_on_failure for them (throttle.c owns 429s); when the hop that
 * got the 429 was the probe, it hands the probe back with
 * sl_breaker_release_probe.
 *
 * The caller keeps one sl_breaker_t per upstream behind its own lock; a
 * zero-initialised sl_breaker_t is a closed breaker with nothing counted.
 */
#ifndef SL_BREAKER_H
#define SL_BREAKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/types.h"

typedef enum {
    SL_BREAKER_CLOSED = 0, /* "ok" */
    SL_BREAKER_OPEN,
    SL_BREAKER_HALF_OPEN,
    SL_BREAKER_STATE_COUNT
} sl_breaker_state_t;

/* Why a failure counts against an upstream; classify.c maps each failure class to one. */
typedef enum {
    SL_BREAKER_CAUSE_NONE = 0,    /* not a breaker matter (rate limits, the client's own errors) */
    SL_BREAKER_CAUSE_UNEXPLAINED, /* counts towards a trip; the pause doubles per trip */
    SL_BREAKER_CAUSE_QUOTA,       /* held until the reset time, else quota_pause */
    SL_BREAKER_CAUSE_NO_BALANCE,  /* held for no_balance_pause */
    SL_BREAKER_CAUSE_AUTH,        /* held until cleared (config reload) */
    SL_BREAKER_CAUSE_COUNT
} sl_breaker_cause_t;

/* until_ms of a hold that only sl_breaker_clear_auth (or a success) ends. */
#define SL_BREAKER_UNTIL_CLEARED INT64_MAX

typedef struct {
    uint32_t failures_to_pause; /* 0 is read as 1 */
    int64_t pause_ms;           /* first unexplained trip */
    int64_t max_pause_ms;       /* cap of the doubling */
    int64_t no_balance_pause_ms;
    int64_t quota_pause_ms; /* when the upstream gave no reset time */
} sl_breaker_params_t;

typedef struct {
    sl_breaker_state_t state;
    sl_breaker_cause_t cause; /* why it is (or, half-open, was) open; NONE when closed */
    uint32_t failures;        /* consecutive unexplained failures while closed */
    uint32_t trips;           /* unexplained trips since the last success: the doubling exponent */
    int64_t until_ms;         /* open: when the probe may go (SL_BREAKER_UNTIL_CLEARED for auth) */
    bool probe_out;           /* half-open: the one probe has been handed out */
} sl_breaker_t;

/* The breaker's settings from config.md's failover section (seconds -> ms). */
sl_breaker_params_t sl_breaker_params_from_failover(const sl_failover_t *failover);

/*
 * Whether a hop may go to this upstream now, and whether it is the probe.
 * Moves open -> half_open once now >= until_ms and hands out the one probe:
 * *is_probe is true for exactly one caller until that probe's verdict comes
 * back (on_success / on_failure) or it is released. Returns the state after
 * the call: CLOSED (send), HALF_OPEN with *is_probe (send, as the probe),
 * HALF_OPEN without it or OPEN (cooling: do not send unless the candidate
 * filter bypasses the breaker). *changed (may be NULL) is set when the state
 * moved, so the caller emits HealthChanged. is_probe must not be NULL.
 */
sl_breaker_state_t sl_breaker_check(sl_breaker_t *b, int64_t now_ms, bool *is_probe, bool *changed);

/*
 * Whether the upstream is cooling at now_ms, without handing out a probe:
 * open and not yet due, held until cleared, or half-open with its probe
 * already out. For the candidate filter; does not modify b.
 */
bool sl_breaker_is_cooling(const sl_breaker_t *b, int64_t now_ms);

/*
 * A hop to this upstream got an answer that proves it works (including a
 * bypassing or fail-open hop). Closes the breaker and resets the failure and
 * trip counts. Returns whether the state changed (it was not closed).
 */
bool sl_breaker_on_success(sl_breaker_t *b);

/*
 * A hop to this upstream failed with a breaker cause (classify.h gives the
 * cause per failure class). reset_at_ms is the quota's reset time when the
 * upstream named one (0 = none; used for SL_BREAKER_CAUSE_QUOTA only).
 *   UNEXPLAINED: closed -> counts, opens at failures_to_pause; half-open ->
 *     open again for the doubled pause; open -> nothing (the pause stands,
 *     so fail-open hops cannot stretch it).
 *   QUOTA / NO_BALANCE / AUTH: open with that cause's hold from any state,
 *     replacing an earlier hold (the latest answer is the best evidence).
 *   NONE: nothing.
 * Returns whether the state, its hold time or its cause changed (emit
 * HealthChanged); a failure that only counts returns false.
 */
bool sl_breaker_on_failure(sl_breaker_t *b, sl_breaker_cause_t cause, int64_t now_ms,
                           const sl_breaker_params_t *params, int64_t reset_at_ms);

/*
 * Another instance of the cluster opened the breaker (cluster.md: only the
 * verdict is shared, each instance counts its own failures): open with its
 * cause until until_ms (this instance's clock; SL_BREAKER_UNTIL_CLEARED:
 * held until cleared), its trip count kept. A hold here that ends later
 * stays. Returns whether the state, its hold or its cause changed.
 */
bool sl_breaker_adopt_open(sl_breaker_t *b, sl_breaker_cause_t cause, int64_t until_ms, uint32_t trips,
                           int64_t now_ms);

/*
 * Hands an unused probe back (the probe hop was cancelled, got a 429, or
 * was never sent), so the next sl_breaker_check hands it out again. No-op
 * unless half-open with the probe out; never changes the state.
 */
void sl_breaker_release_probe(sl_breaker_t *b);

/*
 * The config was reloaded: an upstream held because its credentials were
 * rejected is closed (trip count reset) so the new credentials are tried.
 * Other holds are left as they are. Returns whether the state changed.
 */
bool sl_breaker_clear_auth(sl_breaker_t *b);

/*
 * The candidate filter's breaker rule (behaviour.md §2). cooling[i] says
 * whether candidate i is cooling (sl_breaker_is_cooling). Sets skip[i] for
 * the candidates to skip as `cooling` and returns how many: none when there
 * is a single candidate (it bypasses the breaker) or when all are cooling
 * (fail open: all are tried); otherwise exactly the cooling ones. n is the
 * count of candidates still in the list after `disabled` / `not_offered`.
 * skip must have room for n entries; every one of them is written.
 */
size_t sl_breaker_filter(const bool *cooling, size_t n, bool *skip);

/* "ok", "open", "half_open": HealthChanged.state. */
const char *sl_breaker_state_slug(sl_breaker_state_t state);

/*
 * The message-code slug of HealthChanged.reason for the breaker's current
 * state: gw.breaker.recovered when closed, else the cause that opened it
 * (gw.breaker.failures, gw.breaker.quota_used_up, gw.breaker.no_balance,
 * gw.breaker.auth_rejected). Never NULL.
 */
const char *sl_breaker_reason_slug(const sl_breaker_t *b);

#endif
