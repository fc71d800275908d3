/*
 * The trouble sluice absorbed (observability.md, "Rescued and lost"): a
 * request counts once, under the first trouble it met on its way, and at
 * its end it was rescued (answered 2xx anyway), lost to that trouble (the
 * client got an upstream's temporary error, or sluice's final 429 / 503), or
 * neither (its own request error, rejected credentials, the client left).
 * Pure: the shell notes the first trouble as it happens and asks for the
 * verdict once, at the end.
 */
#ifndef SL_RESCUE_H
#define SL_RESCUE_H

#include <stdbool.h>

#include "classify.h"
#include "next_step.h"
#include "outcome.h"

/* The causes, as sluice_requests_rescued_total's and _lost_to_trouble_total's `cause` label. */
#define SL_TROUBLE_CAUSES(X)                                                                                 \
    X(RETRIED, "retried")             /* a failed attempt, then a retry round */                             \
    X(FAILED_OVER, "failed_over")     /* a failed or 429'd attempt, or a cooling or throttled candidate */   \
    X(QUEUED_429, "queued_429")       /* a wait behind an upstream paused after a 429 */                     \
    X(QUEUED_WINDOW, "queued_window") /* a wait for a usage window (an upstream's or the key's) */           \
    X(QUEUED_SLOT, "queued_slot")     /* a wait for a max_concurrent slot */

typedef enum {
    SL_TROUBLE_NONE = -1,
#define SL_TROUBLE_ENUM(name, slug) SL_TROUBLE_##name,
    SL_TROUBLE_CAUSES(SL_TROUBLE_ENUM)
#undef SL_TROUBLE_ENUM
        SL_TROUBLE_COUNT
} sl_trouble_t;

/* "retried", …; "" for NONE or out of range. Never NULL. */
const char *sl_trouble_slug(sl_trouble_t t);

/*
 * The trouble a failed hop is, by the step the request took after it
 * (next_step.h): a retry round is `retried`; a failover, or a 429 that sent
 * the request elsewhere, `failed_over` (a 429 that leaves it waiting is
 * noted again, as queued_429, when the wait starts — the first trouble
 * stands). A stale keep-alive resend is sluice's own connection upkeep, and
 * a request error the client's: NONE.
 */
sl_trouble_t sl_trouble_of_step(sl_step_reason_t reason);

/* The trouble a candidate skipped at routing or claim time is: cooling or throttled fail over; NONE else. */
sl_trouble_t sl_trouble_of_skip(sl_skip_t skip);

/* The trouble a wait is, by the gate it waits at (throttled, window_full, busy, key_window); NONE else. */
sl_trouble_t sl_trouble_of_wait(sl_skip_t gate);

/* Keeps the first trouble: noting more changes nothing. */
static inline void
sl_trouble_note(sl_trouble_t *first, sl_trouble_t t)
{
    if (*first == SL_TROUBLE_NONE)
        *first = t;
}

typedef enum { SL_RESCUE_NEITHER, SL_RESCUE_RESCUED, SL_RESCUE_LOST } sl_rescue_verdict_t;

/* How a request ended, as the verdict needs it. */
typedef struct {
    sl_trouble_t trouble;     /* the first it met; NONE: it met none */
    sl_row_outcome_t outcome; /* the request row's */
    int status;        /* what the client got: the status of the answer (or of its head, for a stream) */
    bool stream_error; /* a 2xx stream that ended with an error in it */
    /* The last failed hop's class, when the answer is an upstream's failure or the gateway's error from one.
     */
    bool has_failure;
    sl_failure_class_t failure;
} sl_rescue_facts_t;

/*
 * Rescued: it met trouble and was answered 2xx whole. Lost: it met trouble
 * and the client got a temporary failure (an upstream's temporary error or a
 * rate limit, handed over or as sluice's error, in the head or in the
 * stream) or sluice's own 429 or 503. Neither: no trouble; the client left
 * or was cancelled; or it ended on an error of another kind (a request
 * error, rejected credentials, a missing model, used-up quota).
 */
sl_rescue_verdict_t sl_rescue_verdict(const sl_rescue_facts_t *f);

#endif
