/*
 * Whose turn the probe after a pause is across a cluster (cluster.md, queue
 * order): an instance defers to an older waiter elsewhere for one turn (a
 * tenth of the grace) from its first ask in that probing, asks again once
 * the turn is over, and forgets the deferral on a verdict or a new pause.
 */
#include <criterion/criterion.h>

#include "core/probe_turn.h"

#define SEC 1000
#define T0  ((int64_t)1795969439000)

static const sl_retry_params_t real = {.no_jitter = true};

/* A throttle paused by a 429 at T0 for 2 s, now probing (the pause is over). */
static sl_throttle_t
probing(void)
{
    sl_throttle_t t = {0};
    sl_throttle_on_429(&t, T0, 2 * SEC, 3600, &real);
    sl_throttle_check(&t, T0 + 2 * SEC);
    cr_assert_eq(t.state, SL_THROTTLE_PROBING);
    return t;
}

/* The head here takes the local probe at now (as the local claim does before it asks the cluster). */
static void
take_local_probe(sl_throttle_t *t, int64_t now)
{
    bool is_probe = false;
    cr_assert(sl_throttle_admit(t, now, true, &is_probe));
    cr_assert(is_probe);
}

Test(probe_turn, the_turn_is_a_tenth_of_the_grace_one_second_unscaled)
{
    sl_throttle_t t = probing();
    cr_expect_eq(sl_probe_turn_ms(&t), 1 * SEC);
    t.grace_ms = 100;
    cr_expect_eq(sl_probe_turn_ms(&t), 10);
}

Test(probe_turn, an_instance_defers_for_one_turn_from_its_first_ask_however_often_it_asks)
{
    sl_throttle_t t = probing();
    sl_probe_turn_t p = {0};
    int64_t first = T0 + 2 * SEC + 5;
    cr_expect_eq(sl_probe_turn_defer_until(&p, &t, first), first + SEC);
    cr_expect_eq(sl_probe_turn_defer_until(&p, &t, first + 400), first + SEC,
                 "the turn runs from the first ask");
    cr_expect_leq(sl_probe_turn_defer_until(&p, &t, first + SEC), first + SEC, "over: it defers to nobody");
}

Test(probe_turn, a_throttle_not_probing_defers_to_nobody)
{
    sl_throttle_t t = {0};
    sl_probe_turn_t p = {0};
    cr_expect_eq(sl_probe_turn_defer_until(&p, &t, T0), T0);
    sl_throttle_on_429(&t, T0, 2 * SEC, 3600, &real);
    cr_expect_eq(sl_probe_turn_defer_until(&p, &t, T0 + 10), T0 + 10, "paused: nobody probes yet");
}

Test(probe_turn, a_deferred_probe_is_asked_for_again_once_the_turn_is_over)
{
    sl_throttle_t t = probing();
    sl_probe_turn_t p = {0};
    int64_t first = T0 + 2 * SEC;
    take_local_probe(&t, first);
    int64_t until = sl_probe_turn_defer_until(&p, &t, first);
    sl_probe_turn_deferred(&p, &t, until);
    cr_expect_eq(sl_probe_turn_recovery(&p, &t, first + 10 * SEC), until,
                 "the waiters look again at its end");
    cr_expect_not(sl_probe_turn_due(&p, &t, until - 1));
    cr_expect(sl_probe_turn_due(&p, &t, until));
    cr_expect_not(sl_probe_turn_due(&p, &t, until + 1), "due once");
    cr_expect_eq(sl_probe_turn_recovery(&p, &t, first + 10 * SEC), first + 10 * SEC);
}

Test(probe_turn, a_verdict_forgets_the_deferral)
{
    sl_throttle_t t = probing();
    sl_probe_turn_t p = {0};
    int64_t first = T0 + 2 * SEC;
    take_local_probe(&t, first);
    sl_probe_turn_deferred(&p, &t, sl_probe_turn_defer_until(&p, &t, first));
    sl_throttle_on_answer(&t, first + 300);
    cr_expect_not(sl_probe_turn_due(&p, &t, first + 2 * SEC));
    cr_expect_eq(sl_probe_turn_recovery(&p, &t, 77), 77);
}

Test(probe_turn, a_new_pause_starts_a_new_turn)
{
    sl_throttle_t t = probing();
    sl_probe_turn_t p = {0};
    int64_t first = T0 + 2 * SEC;
    take_local_probe(&t, first);
    sl_probe_turn_deferred(&p, &t, sl_probe_turn_defer_until(&p, &t, first));
    /* The probe elsewhere got a 429: a longer pause, then probing again much later. */
    sl_throttle_adopt_pause(&t, first + 100, first + 5 * SEC, 2, t.grace_ms);
    sl_throttle_check(&t, first + 5 * SEC);
    cr_assert_eq(t.state, SL_THROTTLE_PROBING);
    cr_expect_not(sl_probe_turn_due(&p, &t, first + 5 * SEC), "that deferral was of another probing");
    int64_t again = first + 5 * SEC + 3;
    cr_expect_eq(sl_probe_turn_defer_until(&p, &t, again), again + SEC, "a turn of its own");
}

Test(probe_turn, another_probe_out_here_is_not_the_deferred_one)
{
    sl_throttle_t t = probing();
    sl_probe_turn_t p = {0};
    int64_t first = T0 + 2 * SEC;
    take_local_probe(&t, first);
    int64_t until = sl_probe_turn_defer_until(&p, &t, first);
    sl_probe_turn_deferred(&p, &t, until);
    /* Handed back and taken again (the probe another instance held went away). */
    sl_throttle_probe_abandoned(&t);
    take_local_probe(&t, first + 200);
    cr_expect_not(sl_probe_turn_due(&p, &t, until), "the probe out now is not the one deferred");
}

Test(probe_turn, a_slot_claim_defers_for_one_turn_until_a_slot_is_taken_here)
{
    sl_claim_turn_t p = {0};
    cr_expect_eq(sl_claim_turn_defer_until(&p, T0), T0 + SL_CLAIM_TURN_MS);
    cr_expect_eq(sl_claim_turn_defer_until(&p, T0 + 700), T0 + SL_CLAIM_TURN_MS,
                 "the turn runs from the first");
    cr_expect_eq(sl_claim_turn_defer_until(&p, T0 + SL_CLAIM_TURN_MS), T0 + SL_CLAIM_TURN_MS,
                 "over: no deferring");
    sl_claim_turn_taken(&p);
    cr_expect_eq(sl_claim_turn_defer_until(&p, T0 + 1500), T0 + 1500 + SL_CLAIM_TURN_MS, "taken: a new turn");
}

Test(probe_turn, a_claim_turn_left_unused_starts_afresh)
{
    sl_claim_turn_t p = {0};
    sl_claim_turn_defer_until(&p, T0);
    int64_t later = T0 + 2 * SL_CLAIM_TURN_MS;
    cr_expect_eq(sl_claim_turn_defer_until(&p, later), later + SL_CLAIM_TURN_MS);
}
