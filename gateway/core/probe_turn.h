/*
 * Whose turn the probe after a pause is, across a cluster (cluster.md,
 * "queue order"): the globally oldest waiter's. An instance whose own line
 * head asks for the probe while an older waiter waits on another live
 * instance defers to it — but only for a short turn from the moment this
 * instance first asked in this pause's probing, so a waiter elsewhere that
 * never asks (it went to another upstream, its instance is stuck) cannot
 * hold the probe back: it goes within the turn of the pause's end.
 *
 * Pure, with time passed in; the caller keeps one per upstream under the
 * wait lock, next to its throttle.
 */
#ifndef SL_PROBE_TURN_H
#define SL_PROBE_TURN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/throttle.h"

typedef struct {
    /* The probing this was measured in: a new 429 pause or manual pause starts another. */
    int64_t pause_until_ms, manual_until_ms;
    bool asked;             /* a head here asked for the probe in it ... */
    int64_t first_asked_ms; /* ... first at this time */
    bool deferred;          /* the claim deferred: the throttle's probe_at_ms as it left it, and until when */
    int64_t deferred_at_ms, deferred_until_ms;
} sl_probe_turn_t;

/*
 * How long an instance defers to an older waiter elsewhere: a tenth of the
 * probe's grace (1 s at the unscaled 10 s grace), so the turn scales with
 * the test time scale like the grace does.
 */
int64_t sl_probe_turn_ms(const sl_throttle_t *t);

/*
 * A head here asks for the probe at now_ms (t is probing): until when it
 * defers to an older waiter on another instance; at or before now_ms: it
 * defers to nobody.
 */
int64_t sl_probe_turn_defer_until(sl_probe_turn_t *p, const sl_throttle_t *t, int64_t now_ms);

/*
 * The claim deferred until until_ms. The local throttle keeps the probe
 * out (as when another instance holds it), so nobody else here asks before
 * then.
 */
void sl_probe_turn_deferred(sl_probe_turn_t *p, const sl_throttle_t *t, int64_t until_ms);

/*
 * Before a claim: whether the probe this instance deferred is its own to
 * ask for again (the turn is over and no verdict came meanwhile): the
 * caller hands the local probe back (sl_throttle_probe_abandoned), and the
 * deferral is forgotten. A verdict, a new pause, or another probe out
 * forget it too.
 */
bool sl_probe_turn_due(sl_probe_turn_t *p, const sl_throttle_t *t, int64_t now_ms);

/* When a request waiting on the throttle looks again: recovery_ms, or the deferral's end if sooner. */
int64_t sl_probe_turn_recovery(const sl_probe_turn_t *p, const sl_throttle_t *t, int64_t recovery_ms);

/*
 * The same for room that frees up, a max_concurrent slot or room in usage
 * limits (cluster.md: no instance releases a ticket ahead of an older
 * waiting ticket elsewhere): a claim here defers to an older waiter
 * elsewhere for one turn (SL_CLAIM_TURN_MS) from the first claim that could
 * have deferred, until a claim is taken here. A turn left unused for two
 * turns starts afresh.
 */
typedef struct {
    bool asking;
    int64_t first_asked_ms;
} sl_claim_turn_t;

#define SL_CLAIM_TURN_MS 1000

/* A claim for a slot or room at now_ms: until when it defers to an older waiter elsewhere. */
int64_t sl_claim_turn_defer_until(sl_claim_turn_t *p, int64_t now_ms);

/* A claim was taken here: the next one's turn starts afresh. */
void sl_claim_turn_taken(sl_claim_turn_t *p);

#endif
