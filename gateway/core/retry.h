/*
 * The pure rules of waiting (behaviour.md §4, §5, §6): the backoff schedule
 * of retry rounds and its jitter, the hint floor, the deadline decision,
 * which candidates a retry round tries, the pause after an upstream 429,
 * and when the next keep-alive is due. Plain data in, plain data out: no
 * clock (times are Unix ms passed in), no randomness (the caller draws the
 * jitter), no state.
 *
 * Time scale: every duration here is multiplied by
 * sl_retry_params_t.time_scale, a test hook that shrinks the whole waiting
 * timeline at once so the suite stays fast: the retry schedule, upstream
 * hints, the deadline (wait_secs), the 429 backoff and its cap, the
 * keep-alive interval. Scaling all of them keeps their proportions, so
 * "the hint is longer than the pause" or "the pause ends after the
 * deadline" mean the same in a test as in production. A hint is scaled
 * after parsing, so its "counts as missing" thresholds stay the
 * upstream's real ones.
 */
#ifndef SL_RETRY_H
#define SL_RETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "Never" as a time: the keep-alive of a non-streamed request. Sorts after every real time. */
#define SL_RETRY_NEVER INT64_MAX

/* A zero-initialised sl_retry_params_t is production's: real time, jitter on. */
typedef struct {
    /*
     * Every duration is multiplied by this (e.g. 0.01 in tests).
     * Values outside (0, 1], NaN included, are read as 1. A scaled duration
     * is never below 1 ms, so a tiny scale cannot turn a pause into a spin.
     */
    double time_scale;
    bool no_jitter; /* every retry pause is its nominal value (tests) */
} sl_retry_params_t;

/* A duration under p's time scale (ms <= 0 is returned as is). */
int64_t sl_retry_scaled_ms(int64_t ms, const sl_retry_params_t *p);

/* ---- schedule (§5) --------------------------------------------------------------------------------- */

/*
 * The pause before retry round `round` (1-based; 0 is read as 1): nominal
 * 2 s, 4 s, 8 s, then 16 s for every later round, with ±20 % uniform
 * jitter: nominal * (0.8 + 0.4 * jitter_unit), the draw read to 32 bits
 * and the product rounded down, so the result lies in [0.8, 1.2) * nominal
 * — exactly 0.8 * nominal at jitter_unit 0. jitter_unit is the caller's
 * draw from [0, 1); anything else (NaN included) is read as 0.5, as is
 * every draw when p->no_jitter is set, giving the nominal pause. Then
 * time-scaled. Never below 1 ms.
 */
int64_t sl_retry_pause_ms(uint32_t round, double jitter_unit, const sl_retry_params_t *p);

/*
 * The hint floor: an upstream's hint (sl_hint_find, unscaled; <= 0 = none)
 * lengthens a pause, never shortens it. Returns the larger of pause_ms (as
 * sl_retry_pause_ms gave it) and the time-scaled hint. *by_hint (may be
 * NULL) is set when the hint decided the pause (present and not shorter),
 * which RequestRetrying reports.
 */
int64_t sl_retry_hint_floor(int64_t pause_ms, int64_t hint_ms, const sl_retry_params_t *p, bool *by_hint);

/*
 * Whether a request may wait or retry at all: not when wait_secs is 0
 * (config.md: "0 = never wait or retry"), and never a token-counting
 * request (retried never, queued never: it is answered locally instead).
 */
bool sl_retry_may_wait(uint32_t wait_secs, bool count_tokens);

/* The request's wait deadline: arrival + wait_secs, time-scaled. Shared with queueing (§6). */
int64_t sl_retry_deadline_ms(int64_t arrival_ms, uint32_t wait_secs, const sl_retry_params_t *p);

/*
 * The deadline rule: a backoff may start only when its pause, started at
 * now, ends no later than the deadline (now + pause == deadline still
 * fits). Overflow safe for any inputs. The same check decides whether a
 * held in-stream error may be discarded for a retry. A hop already in
 * flight is the caller's: this is only asked before a pause starts.
 */
bool sl_retry_fits(int64_t now_ms, int64_t pause_ms, int64_t deadline_ms);

/* ---- rounds (§5) ----------------------------------------------------------------------------------- */

/* sl_retry_select's `pinned` for a conversation that is not held to one upstream (any index >= n does). */
#define SL_RETRY_UNPINNED SIZE_MAX

/*
 * The candidates the next retry round tries, from the previous round's
 * results per candidate: temporary[i], its hop failed temporarily
 * (sl_failure_class_info()->retried, before content; false for a candidate
 * that was skipped, not reached, or failed otherwise), and cooling[i], its
 * breaker is cooling now (sl_breaker_is_cooling). Sets next[i] for each of
 * the n candidates (true = retried; the round runs them in candidate
 * order) and returns how many are set (0: no round, hand over the last
 * error).
 *
 * Only candidates whose failure was temporary; of those, cooling ones are
 * left out unless all of them are cooling (then all are tried, as the
 * candidate filter fails open). A conversation that stays on an upstream
 * (sticky affinity or sealed history, behaviour.md §1.5) passes that
 * candidate's index as pinned and retries only it, cooling or not, when its
 * failure was temporary. Token-counting requests never get here
 * (sl_retry_may_wait). The arrays are only read, except next.
 */
size_t sl_retry_select(const bool *temporary, const bool *cooling, size_t n, size_t pinned, bool *next);

/* ---- upstream 429s (§6) ---------------------------------------------------------------------------- */

/*
 * The consecutive-429 count after an answer: one more after a 429
 * (saturating), back to 0 after any other answer (a success resets it).
 */
uint32_t sl_ratelimit_streak_next(uint32_t streak, bool got_429);

/*
 * The pause an upstream takes after the streak-th consecutive 429 (1-based,
 * 0 is read as 1). With a hint (sl_hint_find, unscaled; <= 0 = none) the
 * pause is the hint, capped at max_pause_secs
 * (failover.rate_limit_max_pause_secs; 0 is read as 1) — a hint replaces
 * the backoff, whether shorter or longer. Without one: 5 s, 10 s, 20 s,
 * 40 s, then 60 s for every later 429, no jitter. Everything time-scaled.
 */
int64_t sl_ratelimit_pause_ms(uint32_t streak, int64_t hint_ms, uint32_t max_pause_secs,
                              const sl_retry_params_t *p);

/* ---- keep-alive (§4, the 15 s rule) ---------------------------------------------------------------- */

/* The silence after which a held or waiting stream gets a keep-alive, and between keep-alives. */
#define SL_KEEPALIVE_INTERVAL_MS 15000

/*
 * When the next keep-alive of a request is due: SL_KEEPALIVE_INTERVAL_MS
 * (time-scaled) after last_sent_ms, the last time anything was written to
 * the client (its arrival while nothing has been), but never before now_ms
 * — one overdue keep-alive is due now, missed ones are not caught up in a
 * burst. The caller writes one when the result is <= now and then moves
 * last_sent_ms to now, giving "at 15 s, then every 15 s". A non-streamed
 * request never gets one: SL_RETRY_NEVER.
 */
int64_t sl_keepalive_due_ms(bool stream, int64_t last_sent_ms, int64_t now_ms, const sl_retry_params_t *p);

#endif
