/*
 * Rate limits (behaviour.md §6, with the candidate filter of §2): the pure
 * rules, as plain data with the time passed in (int64 ms, one monotonic
 * clock for all of them). No locks: the shell keeps one sl_throttle_t and
 * its wait queue (gateway/waitq.h) under the wait lock.
 *
 *   1. sl_throttle_t, one upstream's throttle:
 *
 *        free    --429-->                     paused (until the hint, else 5/10/20/40/60 s)
 *        paused  --its time has come (check)--> probing
 *        probing --the queue head is admitted--> probing, probe out (only it goes)
 *        probing --any non-429 answer-->       free   (the rest follow)
 *        probing --429-->                      paused, the next, longer pause
 *        probing --10 s grace after the probe went out--> everyone is admitted again
 *        any     --operator pause-->           manual --its time has come--> the 429 state below it
 *        manual or paused --resume-->          the 429 state, a running 429 pause ended into probing
 *
 *   2. sl_wait_decide: send now, else wait, else the final 429, for one
 *      request over its candidates.
 *
 *   The waiters themselves queue in gateway/waitq.h, in arrival order.
 *
 * Time scale: every duration this file derives (the 429 pause, the probe's
 * grace) goes through sl_retry_scaled_ms with the caller's
 * sl_retry_params_t, so tests shrink the whole timeline at once.
 */
#ifndef SL_THROTTLE_H
#define SL_THROTTLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/outcome.h"
#include "core/retry.h"

/* "Never" as a time: an indefinite manual pause, a candidate that cannot recover by waiting. */
#define SL_THROTTLE_NEVER INT64_MAX

/* How long the rest of a queue waits for the probe's verdict before following it anyway (unscaled). */
#define SL_THROTTLE_PROBE_GRACE_MS 10000

/* ---- 1. the throttle ------------------------------------------------------------------------------ */

/*
 * The 429 state of an upstream (FREE, PAUSED, PROBING), and the kinds a
 * Throttle shows (ThrottleKind paused, probing, manual; free = absent): an
 * operator's pause shows as MANUAL over whatever 429 state runs below it.
 */
typedef enum {
    SL_THROTTLE_FREE = 0,
    SL_THROTTLE_PAUSED,  /* after a 429, until pause_until_ms */
    SL_THROTTLE_PROBING, /* the pause is over: one probe, then everyone */
    SL_THROTTLE_MANUAL,  /* only as sl_throttle_kind: an operator's pause */
    SL_THROTTLE_STATE_COUNT
} sl_throttle_state_t;

/*
 * One upstream's throttle. A zero-initialised sl_throttle_t is free with
 * nothing counted. The fields are the caller's to read, not to write: only
 * the functions below move them.
 */
typedef struct {
    sl_throttle_state_t state; /* FREE, PAUSED or PROBING; runs on under a manual pause */
    uint32_t consecutive;      /* 429s since the last other answer: Throttle.consecutive */
    int64_t pause_until_ms;    /* end of the latest 429 pause */
    int64_t grace_ms;          /* the probe's grace, time-scaled when the pause began */
    bool probe_out;            /* probing: the probe has been handed out ... */
    int64_t probe_at_ms;       /* ... at this time; the grace runs from here */
    int64_t manual_until_ms;   /* 0: no operator pause; its end, SL_THROTTLE_NEVER for "until resumed" */
} sl_throttle_t;

/* What a Throttle shows: MANUAL under an operator's pause, else the 429 state. */
sl_throttle_state_t sl_throttle_kind(const sl_throttle_t *t);

/*
 * An upstream answered a 429 that is not "quota used up" (classify.h tells
 * them apart). hint_ms is sl_hint_find's hint (unscaled, -1 or <= 0 for
 * none; its "under 1 ms / under 1 s counts as missing" rules are hints.h's).
 *
 * When no 429 pause is running, this one counts: the streak grows
 * (sl_ratelimit_streak_next) and the upstream pauses for
 * sl_ratelimit_pause_ms (the hint capped at max_pause_secs, else 5, 10, 20,
 * 40, then 60 s) — also when the 429 is the probe's answer, which ends the
 * probe. A 429 that arrives while a pause runs comes from a hop sent before
 * the pause: it is not counted again (a burst of concurrent 429s is one
 * pause, not a jump to 60 s), and only its hint, when it asks for a later
 * end, lengthens the pause. Under a manual pause the same happens below it.
 *
 * Returns whether the visible state (state, shown until, consecutive)
 * changed: emit ThrottleChanged.
 */
bool sl_throttle_on_429(sl_throttle_t *t, int64_t now_ms, int64_t hint_ms, uint32_t max_pause_secs,
                        const sl_retry_params_t *params);

/*
 * Another instance of the cluster paused the upstream after a 429
 * (cluster.md): its end (until_ms, on this instance's clock), its streak and
 * its grace, as that instance counted them, hold here too. A pause that ends
 * later than the one running here replaces it (the probe not out, so the
 * probe is asked for again when it ends); one that ends sooner is older
 * news and only its streak counts. Under a manual pause the same happens
 * below it. Returns whether the visible state changed.
 */
bool sl_throttle_adopt_pause(sl_throttle_t *t, int64_t now_ms, int64_t until_ms, uint32_t consecutive,
                             int64_t grace_ms);

/*
 * Any answer from the upstream that is not a 429 (a success or another
 * failure; for a held stream, its first content). Resets the streak, and
 * while probing the upstream is free again: the probe passed, the rest of
 * the queue follows. A pause still running stays (the answer came from a
 * hop sent before it) but the next 429 starts again at 5 s. Moves due
 * states first, as sl_throttle_check. Returns whether the visible state
 * changed.
 */
bool sl_throttle_on_answer(sl_throttle_t *t, int64_t now_ms);

/*
 * Moves what is due at now_ms: a manual pause whose end has passed ends
 * (the 429 state below it shows again), and a 429 pause that has ended
 * turns to probing with the probe not yet out (also below a manual pause,
 * so the probe is ready when the operator's pause ends). Call it under the
 * lock before sl_throttle_admit, with the same now. Returns whether the
 * visible state changed.
 */
bool sl_throttle_check(sl_throttle_t *t, int64_t now_ms);

/*
 * May a request be sent to this upstream now? Free: yes. Probing: the
 * first queue head to ask becomes the probe (*is_probe set, the grace
 * starts) and the others wait, until the probe's verdict or until the grace
 * has run out, after which everyone is admitted (not as the probe). Paused
 * and manual: no. is_queue_head is whether the request is first in this
 * upstream's arrival queue (or would be: the queue is empty). *is_probe
 * must not be NULL and is always written; it is set for exactly one caller
 * per probe. Does not move time-based states: call sl_throttle_check first.
 */
bool sl_throttle_admit(sl_throttle_t *t, int64_t now_ms, bool is_queue_head, bool *is_probe);

/*
 * The probe request went away without an answer (client gone, deadline,
 * sent elsewhere, hop cancelled): the probe is handed back, and the next
 * queue head to ask becomes the probe with a grace of its own. No-op
 * unless probing with the probe out; never a visible change.
 */
void sl_throttle_probe_abandoned(sl_throttle_t *t);

/*
 * An operator pauses the upstream (pause_provider): until until_ms, or
 * until resumed when until_ms is 0; a later call replaces the end. The 429
 * state keeps running below it. An end at or before now_ms has already
 * passed: the call is sl_throttle_resume. Returns whether the visible
 * state changed.
 */
bool sl_throttle_pause_manual(sl_throttle_t *t, int64_t until_ms, int64_t now_ms);

/*
 * An operator resumes the upstream (resume_provider): a manual pause ends,
 * and so does a running 429 pause — the operator's word says the upstream
 * may take traffic again — into probing with the streak kept, so an
 * upstream that is still limited costs one request, not its whole queue.
 * Free or probing without a manual pause: nothing changes. Returns whether
 * the visible state changed.
 */
bool sl_throttle_resume(sl_throttle_t *t, int64_t now_ms);

/*
 * When a waiter should look again: the pause's end (manual or 429), the
 * probe's grace end, or SL_THROTTLE_NEVER when only an event can change
 * the throttle (an answer, a probe taken or handed back, an operator).
 * Does not modify t.
 */
int64_t sl_throttle_next_change_ms(const sl_throttle_t *t, int64_t now_ms);

/*
 * The earliest time any request could be sent to this upstream, for the
 * final-429 decision and the gates of RequestQueued: now when free or when
 * a probe may go, the pause's end, the grace end while the probe is out,
 * the later of a manual pause's end and a 429 pause running below it, or
 * SL_THROTTLE_NEVER under a manual pause without an end. Does not modify t.
 */
int64_t sl_throttle_recovery_ms(const sl_throttle_t *t, int64_t now_ms);

/* Throttle.until_ms as shown: the pause's end (manual or 429), or -1 when absent (probing, no end). */
int64_t sl_throttle_shown_until_ms(const sl_throttle_t *t);

/* ThrottleKind: "paused", "probing", "manual"; NULL for free (the Throttle is absent). */
const char *sl_throttle_kind_slug(sl_throttle_state_t state);

/*
 * The message-code slug of Throttle.reason: gw.upstream.paused,
 * gw.upstream.probing, gw.upstream.paused_manually; NULL when free.
 */
const char *sl_throttle_reason_slug(const sl_throttle_t *t);

/* ---- 2. send now, else wait, else the final 429 ---------------------------------------------------- */

/*
 * Why a candidate cannot take the request now, as far as waiting is
 * concerned: throttled, busy and window_full can be waited out;
 * period_used_up is counted for the final answer but never waited for;
 * every other skip (and a candidate outside the retry round) concerns
 * waiting not at all.
 */
typedef struct {
    sl_skip_t skip; /* SL_SKIP_NONE: it can be sent now */
    /*
     * The earliest time it could take the request: sl_throttle_recovery_ms,
     * the time a window has room, a period's reset; SL_THROTTLE_NEVER when
     * waiting cannot help (an indefinite manual pause, an estimate larger
     * than a whole window). A time not after now means "any moment" (a busy
     * slot, a probe that may go): such a candidate is waited for until the
     * deadline and wakes its waiters by an event, not a timer.
     */
    int64_t recovery_ms;
    bool out_of_round; /* not in the round being tried: neither waited for nor counted */
} sl_wait_gate_t;

/* sl_wait_request_t.own for a request whose conversation is not held to an upstream. */
#define SL_WAIT_NO_OWN SIZE_MAX

typedef struct {
    int64_t now_ms;
    int64_t deadline_ms; /* arrival + wait_secs (sl_retry_deadline_ms): no waiting past it */
    size_t own;          /* the conversation's upstream (sticky or sealed affinity), or SL_WAIT_NO_OWN */
    bool sealed;         /* own is pinned by sealed history: it never lets go */
} sl_wait_request_t;

typedef enum {
    SL_WAIT_SEND_NOW,  /* send to candidate .send */
    SL_WAIT_WAIT,      /* queue on the candidates set in wait_on, look again at .wake_ms at the latest */
    SL_WAIT_FINAL_429, /* nothing can be sent before the deadline: answer 429 with .code and the headers */
    SL_WAIT_UNUSABLE,  /* no candidate that waiting concerns (all skipped as other): the caller's own error */
    SL_WAIT_ACTION_COUNT
} sl_wait_action_t;

/* The final 429's message code. */
typedef enum {
    SL_WAIT_CODE_RATE_LIMITED = 0, /* every candidate counted is throttled */
    SL_WAIT_CODE_WINDOW_FULL,      /* every one has a full window */
    SL_WAIT_CODE_USED_UP,          /* every one has used up its period */
    SL_WAIT_CODE_MIXED,            /* anything else, busy slots included */
    SL_WAIT_CODE_COUNT
} sl_wait_code_t;

typedef struct {
    sl_wait_action_t action;
    size_t send;              /* SEND_NOW: the candidate's index */
    size_t n_wait;            /* WAIT: how many candidates are set in wait_on */
    int64_t wake_ms;          /* WAIT: the earliest recovery still ahead among them, capped at the deadline */
    sl_wait_code_t code;      /* FINAL_429 */
    int64_t retry_after_ms;   /* FINAL_429: retry-after-ms, >= 1; -1: no recovery known, send neither */
    int64_t retry_after_secs; /* FINAL_429: Retry-After, the same in whole seconds rounded up; -1 with it */
    bool should_retry;        /* FINAL_429: x-should-retry */
} sl_wait_decision_t;

/*
 * Where a request goes now, given per candidate (in candidate order) why
 * it cannot be sent now and when it could be (behaviour.md §2 "send now,
 * else wait", §6):
 *
 *   - Sealed (req->own pinned): only own is considered, ever.
 *   - Sticky (req->own, not sealed): own is sent to when it can be; when it
 *     can recover before the deadline, the request waits for it alone;
 *     otherwise it lets go and every candidate is considered as below.
 *   - SEND_NOW: the first candidate with no skip, deadline or not (a
 *     request that can be sent is never refused for the time it took).
 *   - WAIT: while now is before the deadline, on every throttled, busy or
 *     window_full candidate that can recover by the deadline (a recovery at
 *     the deadline still counts); the request goes to whichever recovers
 *     first. wake_ms is when to decide again without an event.
 *   - FINAL_429: nothing can be sent before the deadline (it has passed, or
 *     every waitable candidate recovers after it, or every one has used up
 *     its period). The code names what held the counted candidates (all but
 *     those skipped as other); retry-after-ms is the time from now to the
 *     earliest recovery among them (at least 1 ms), Retry-After the same in
 *     whole seconds rounded up; x-should-retry is true unless no counted
 *     candidate can recover by waiting (every one used up its period, then
 *     Retry-After is the earliest reset, or recovers never).
 *   - UNUSABLE: no candidate at all, or all skipped as other.
 *
 * A single candidate needs no flag: with nothing to bypass it with, it is
 * sent to, waited for, or answered for by the same rules. gates (n
 * entries) is only read. wait_on must have room for n entries; every one
 * is written (all false unless WAIT). Fields of the result that its action
 * does not name are zero.
 */
sl_wait_decision_t sl_wait_decide(const sl_wait_gate_t *gates, size_t n, const sl_wait_request_t *req,
                                  bool *wait_on);

/* The final 429's message-code slug: gw.wait.rate_limited, .window_full, .used_up, .mixed. */
const char *sl_wait_code_slug(sl_wait_code_t code);

#endif
