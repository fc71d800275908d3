#include "core/probe_turn.h"

/* Whether the throttle is still in the probing p was measured in. */
static bool
same_probing(const sl_probe_turn_t *p, const sl_throttle_t *t)
{
    return t->state == SL_THROTTLE_PROBING && p->pause_until_ms == t->pause_until_ms &&
           p->manual_until_ms == t->manual_until_ms;
}

/* Whether the probe held out here is still the one a deferred claim left out. */
static bool
still_deferred(const sl_probe_turn_t *p, const sl_throttle_t *t)
{
    return p->deferred && same_probing(p, t) && t->probe_out && t->probe_at_ms == p->deferred_at_ms;
}

int64_t
sl_probe_turn_ms(const sl_throttle_t *t)
{
    int64_t turn = t->grace_ms / 10;
    return turn > 0 ? turn : 1;
}

int64_t
sl_probe_turn_defer_until(sl_probe_turn_t *p, const sl_throttle_t *t, int64_t now_ms)
{
    if (t->state != SL_THROTTLE_PROBING)
        return now_ms;
    if (!same_probing(p, t) || !p->asked)
        *p = (sl_probe_turn_t){.pause_until_ms = t->pause_until_ms,
                               .manual_until_ms = t->manual_until_ms,
                               .asked = true,
                               .first_asked_ms = now_ms};
    return p->first_asked_ms + sl_probe_turn_ms(t);
}

void
sl_probe_turn_deferred(sl_probe_turn_t *p, const sl_throttle_t *t, int64_t until_ms)
{
    if (!same_probing(p, t) || !t->probe_out)
        return;
    p->deferred = true;
    p->deferred_at_ms = t->probe_at_ms;
    p->deferred_until_ms = until_ms;
}

bool
sl_probe_turn_due(sl_probe_turn_t *p, const sl_throttle_t *t, int64_t now_ms)
{
    if (!still_deferred(p, t)) {
        p->deferred = false;
        return false;
    }
    if (now_ms < p->deferred_until_ms)
        return false;
    p->deferred = false;
    return true;
}

int64_t
sl_probe_turn_recovery(const sl_probe_turn_t *p, const sl_throttle_t *t, int64_t recovery_ms)
{
    if (still_deferred(p, t) && p->deferred_until_ms < recovery_ms)
        return p->deferred_until_ms;
    return recovery_ms;
}

int64_t
sl_claim_turn_defer_until(sl_claim_turn_t *p, int64_t now_ms)
{
    if (!p->asking || now_ms >= p->first_asked_ms + 2 * SL_CLAIM_TURN_MS)
        *p = (sl_claim_turn_t){.asking = true, .first_asked_ms = now_ms};
    return p->first_asked_ms + SL_CLAIM_TURN_MS;
}

void
sl_claim_turn_taken(sl_claim_turn_t *p)
{
    p->asking = false;
}
