/*
 * The rate-limit rules of behaviour.md §6 (and §2's "send now, else wait"):
 * the per-upstream throttle driven with explicit times, the decision of
 * one request over its candidates with the final 429's code and headers,
 * and the arrival-ordered queue checked against a reference.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "core/hints.h"
#include "core/throttle.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

#define SEC   1000
#define T0    ((int64_t)1795969439000) /* any monotonic time in ms */
#define CAP   3600                     /* failover.rate_limit_max_pause_secs' default */
#define NEVER SL_THROTTLE_NEVER

static const sl_retry_params_t real = {0};
static const sl_retry_params_t fast = {.time_scale = 0.01, .no_jitter = true};

/* ---- helpers --------------------------------------------------------------------------------- */

static void
expect_admit(sl_throttle_t *t, int64_t now, bool head, bool admitted, bool probe)
{
    bool is_probe = !probe;
    cr_expect_eq(sl_throttle_admit(t, now, head, &is_probe), admitted, "admitted (%s) at +%lld",
                 head ? "head" : "not head", (long long)(now - T0));
    cr_expect_eq(is_probe, probe, "probe (%s) at +%lld", head ? "head" : "not head", (long long)(now - T0));
}

/* A 429 at now; asserts the pause it starts. */
static void
pause_by_429(sl_throttle_t *t, int64_t now, int64_t hint, const sl_retry_params_t *p, int64_t pause)
{
    cr_expect(sl_throttle_on_429(t, now, hint, CAP, p), "a 429 at +%lld is a visible change",
              (long long)(now - T0));
    cr_expect_eq(t->state, SL_THROTTLE_PAUSED);
    cr_expect_eq(t->pause_until_ms, now + pause, "pause at +%lld: %lld ms", (long long)(now - T0),
                 (long long)(t->pause_until_ms - now));
}

/* Runs a pause out: check at its end turns it to probing, and the head takes the probe. */
static int64_t
probe_at_end(sl_throttle_t *t)
{
    int64_t end = t->pause_until_ms;
    cr_expect_not(sl_throttle_check(t, end - 1), "still paused 1 ms before the end");
    cr_expect(sl_throttle_check(t, end), "probing at the end");
    cr_expect_eq(t->state, SL_THROTTLE_PROBING);
    expect_admit(t, end, true, true, true);
    return end;
}

/* ---- the throttle ------------------------------------------------------------------------------ */

Test(throttle, zeroed_is_free_and_admits_everyone)
{
    sl_throttle_t t = {0};
    expect_admit(&t, T0, false, true, false);
    expect_admit(&t, T0, true, true, false);
    cr_expect_not(sl_throttle_check(&t, T0));
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_FREE);
    cr_expect_null(sl_throttle_kind_slug(SL_THROTTLE_FREE));
    cr_expect_null(sl_throttle_reason_slug(&t));
    cr_expect_eq(sl_throttle_shown_until_ms(&t), -1);
    cr_expect_eq(sl_throttle_next_change_ms(&t, T0), NEVER);
    cr_expect_eq(sl_throttle_recovery_ms(&t, T0), T0);
    cr_expect_not(sl_throttle_on_answer(&t, T0), "an answer while free shows nothing");
}

Test(throttle, a_429_pauses_the_whole_upstream_for_5_s_without_a_hint)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    cr_expect_eq(t.consecutive, 1);
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_PAUSED);
    cr_expect_str_eq(sl_throttle_kind_slug(sl_throttle_kind(&t)), "paused");
    cr_expect_str_eq(sl_throttle_reason_slug(&t), "gw.upstream.paused");
    cr_expect_eq(sl_throttle_shown_until_ms(&t), T0 + 5 * SEC);
    for (int64_t at = T0; at < T0 + 5 * SEC; at += SEC) {
        cr_expect_not(sl_throttle_check(&t, at));
        expect_admit(&t, at, true, false, false);
        expect_admit(&t, at, false, false, false);
    }
    cr_expect_eq(sl_throttle_next_change_ms(&t, T0), T0 + 5 * SEC);
    cr_expect_eq(sl_throttle_recovery_ms(&t, T0 + 1), T0 + 5 * SEC);
}

Test(throttle, the_pause_follows_the_hint_capped_and_hints_under_their_threshold_count_as_missing)
{
    static const struct {
        const char *what;
        const char *retry_after_ms, *retry_after; /* NULL: header absent */
        int64_t pause;
    } rows[] = {
        {"retry-after-ms", "1500", NULL, 1500},
        {"a hint shorter than the backoff still wins", "200", NULL, 200},
        {"Retry-After seconds", NULL, "20", 20 * SEC},
        {"a hint longer than the backoff", NULL, "90", 90 * SEC},
        {"an absurd hint is capped at rate_limit_max_pause_secs", NULL, "99999999", CAP * SEC},
        {"retry-after-ms under 1 ms is missing: backoff", "0.5", NULL, 5 * SEC},
        {"Retry-After under 1 s is missing: backoff", NULL, "0.5", 5 * SEC},
        {"garbage is missing: backoff", "soon", NULL, 5 * SEC},
        {"no hint at all: backoff", NULL, NULL, 5 * SEC},
    };
    for (size_t i = 0; i < N(rows); i++) {
        int64_t hint = -1;
        if (rows[i].retry_after_ms != NULL)
            hint = sl_hint_parse_retry_after_ms(rows[i].retry_after_ms, strlen(rows[i].retry_after_ms));
        else if (rows[i].retry_after != NULL)
            hint = sl_hint_parse_retry_after(rows[i].retry_after, strlen(rows[i].retry_after), T0);
        sl_throttle_t t = {0};
        cr_expect(sl_throttle_on_429(&t, T0, hint, CAP, &real), "%s", rows[i].what);
        cr_expect_eq(t.pause_until_ms, T0 + rows[i].pause, "%s: paused %lld ms", rows[i].what,
                     (long long)(t.pause_until_ms - T0));
    }
}

Test(throttle, consecutive_429s_grow_the_pause_5_10_20_40_then_60_s)
{
    static const int64_t pauses[] = {5 * SEC, 10 * SEC, 20 * SEC, 40 * SEC, 60 * SEC, 60 * SEC, 60 * SEC};
    sl_throttle_t t = {0};
    int64_t now = T0;
    for (size_t i = 0; i < N(pauses); i++) {
        pause_by_429(&t, now, -1, &real, pauses[i]);
        cr_expect_eq(t.consecutive, i + 1);
        now = probe_at_end(&t) + 300; /* the probe's own 429 */
    }
}

Test(throttle, an_answer_resets_the_streak)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    int64_t now = probe_at_end(&t);
    pause_by_429(&t, now, -1, &real, 10 * SEC);
    now = probe_at_end(&t);
    cr_expect(sl_throttle_on_answer(&t, now + 100), "the probe passed");
    cr_expect_eq(t.consecutive, 0);
    pause_by_429(&t, now + 200, -1, &real, 5 * SEC);
}

Test(throttle, when_the_pause_ends_only_the_queue_head_goes_as_the_probe)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    int64_t end = T0 + 5 * SEC;
    cr_expect(sl_throttle_check(&t, end));
    cr_expect_str_eq(sl_throttle_kind_slug(sl_throttle_kind(&t)), "probing");
    cr_expect_str_eq(sl_throttle_reason_slug(&t), "gw.upstream.probing");
    cr_expect_eq(sl_throttle_shown_until_ms(&t), -1);
    cr_expect_eq(sl_throttle_recovery_ms(&t, end), end, "the probe may go now");
    cr_expect_eq(sl_throttle_next_change_ms(&t, end), NEVER, "only the head taking it changes things");
    expect_admit(&t, end, false, false, false); /* not the head: waits even before the probe is out */
    expect_admit(&t, end, true, true, true);
    expect_admit(&t, end, true, false, false); /* exactly one probe */
    expect_admit(&t, end + 1, false, false, false);
    cr_expect_not(sl_throttle_check(&t, end + 1), "handing out the probe is not a visible change");
}

Test(throttle, a_429_on_the_probe_starts_the_next_longer_pause)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, 1500, &real, 1500);
    int64_t end = probe_at_end(&t);
    pause_by_429(&t, end + 400, -1, &real, 10 * SEC);
    cr_expect_eq(t.consecutive, 2);
    cr_expect_not(t.probe_out, "the probe is over");
    expect_admit(&t, end + 500, true, false, false);
    end = probe_at_end(&t);
    cr_expect_eq(end, T0 + 1500 + 400 + 10 * SEC);
}

Test(throttle, the_probe_passing_frees_the_upstream_for_everyone)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    int64_t end = probe_at_end(&t);
    cr_expect(sl_throttle_on_answer(&t, end + 700), "recovery is a visible change");
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_FREE);
    cr_expect_eq(t.consecutive, 0);
    expect_admit(&t, end + 701, false, true, false);
    expect_admit(&t, end + 701, true, true, false);
    cr_expect_eq(sl_throttle_next_change_ms(&t, end + 701), NEVER);
}

Test(throttle, the_10_s_grace_releases_everyone_when_the_probe_hangs)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    int64_t end = T0 + 5 * SEC;
    sl_throttle_check(&t, end);
    expect_admit(&t, end + 250, true, true, true); /* the head asked a little later */
    int64_t grace_end = end + 250 + 10 * SEC;
    cr_expect_eq(sl_throttle_next_change_ms(&t, end + 300), grace_end);
    cr_expect_eq(sl_throttle_recovery_ms(&t, end + 300), grace_end);
    expect_admit(&t, grace_end - 1, false, false, false);
    expect_admit(&t, grace_end - 1, true, false, false);
    expect_admit(&t, grace_end, false, true, false);
    expect_admit(&t, grace_end, true, true, false);
    cr_expect_eq(sl_throttle_next_change_ms(&t, grace_end), NEVER);
    cr_expect_eq(sl_throttle_recovery_ms(&t, grace_end + 5), grace_end + 5);
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_PROBING, "still probing until an answer");
    cr_expect(sl_throttle_on_answer(&t, grace_end + 9 * SEC));
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_FREE);
}

Test(throttle, an_abandoned_probe_goes_to_the_next_head_with_a_grace_of_its_own)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    int64_t end = probe_at_end(&t);
    sl_throttle_probe_abandoned(&t);
    cr_expect_not(t.probe_out);
    cr_expect_eq(sl_throttle_next_change_ms(&t, end + 3 * SEC), NEVER);
    expect_admit(&t, end + 3 * SEC, false, false, false);
    expect_admit(&t, end + 3 * SEC, true, true, true);
    expect_admit(&t, end + 10 * SEC, false, false, false); /* the first probe's grace would be over */
    expect_admit(&t, end + 13 * SEC, false, true, false);
    sl_throttle_t free_one = {0};
    sl_throttle_probe_abandoned(&free_one);
    cr_expect_eq(free_one.state, SL_THROTTLE_FREE, "no-op unless probing");
}

Test(throttle, a_429_during_a_running_pause_is_not_counted_again_and_only_a_later_hint_lengthens_it)
{
    static const struct {
        const char *what;
        int64_t hint;
        int64_t until;
        bool changed;
    } rows[] = {
        {"no hint: the pause stands", -1, T0 + 5 * SEC, false},
        {"a hint ending earlier: the pause stands", 2 * SEC, T0 + 5 * SEC, false},
        {"a hint ending later lengthens it", 8 * SEC, T0 + SEC + 8 * SEC, true},
        {"the hint is capped too", (int64_t)CAP * 10 * SEC, T0 + SEC + CAP * SEC, true},
    };
    for (size_t i = 0; i < N(rows); i++) {
        sl_throttle_t t = {0};
        pause_by_429(&t, T0, -1, &real, 5 * SEC);
        cr_expect_eq(sl_throttle_on_429(&t, T0 + SEC, rows[i].hint, CAP, &real), rows[i].changed, "%s",
                     rows[i].what);
        cr_expect_eq(t.consecutive, 1, "%s: a burst of 429s is one", rows[i].what);
        cr_expect_eq(t.pause_until_ms, rows[i].until, "%s", rows[i].what);
    }
}

Test(throttle, an_answer_during_a_pause_resets_the_streak_but_keeps_the_pause)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    cr_expect(sl_throttle_on_answer(&t, T0 + SEC), "consecutive is shown");
    cr_expect_eq(t.consecutive, 0);
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_PAUSED);
    expect_admit(&t, T0 + SEC, true, false, false);
    probe_at_end(&t);
    pause_by_429(&t, T0 + 6 * SEC, -1, &real, 5 * SEC);
}

Test(throttle, an_answer_after_the_pause_ended_counts_as_the_probe_passing)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    cr_expect(sl_throttle_on_answer(&t, T0 + 6 * SEC), "due states move first");
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_FREE);
}

Test(throttle, a_manual_pause_without_an_end_holds_until_resumed)
{
    sl_throttle_t t = {0};
    cr_expect(sl_throttle_pause_manual(&t, 0, T0));
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_MANUAL);
    cr_expect_str_eq(sl_throttle_kind_slug(SL_THROTTLE_MANUAL), "manual");
    cr_expect_str_eq(sl_throttle_reason_slug(&t), "gw.upstream.paused_manually");
    cr_expect_eq(sl_throttle_shown_until_ms(&t), -1);
    cr_expect_eq(sl_throttle_next_change_ms(&t, T0), NEVER);
    cr_expect_eq(sl_throttle_recovery_ms(&t, T0), NEVER);
    cr_expect_not(sl_throttle_check(&t, T0 + 86400 * (int64_t)SEC));
    expect_admit(&t, T0 + SEC, true, false, false);
    cr_expect_not(sl_throttle_pause_manual(&t, 0, T0 + SEC), "the same pause again shows nothing new");
    cr_expect(sl_throttle_resume(&t, T0 + 2 * SEC));
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_FREE, "nothing ran below it");
    expect_admit(&t, T0 + 2 * SEC, false, true, false);
    cr_expect_not(sl_throttle_resume(&t, T0 + 3 * SEC), "resuming a free upstream changes nothing");
}

Test(throttle, a_manual_pause_with_an_end_ends_by_itself)
{
    sl_throttle_t t = {0};
    cr_expect(sl_throttle_pause_manual(&t, T0 + 30 * SEC, T0));
    cr_expect_eq(sl_throttle_shown_until_ms(&t), T0 + 30 * SEC);
    cr_expect_eq(sl_throttle_next_change_ms(&t, T0), T0 + 30 * SEC);
    cr_expect_eq(sl_throttle_recovery_ms(&t, T0), T0 + 30 * SEC);
    cr_expect(sl_throttle_pause_manual(&t, T0 + 40 * SEC, T0 + SEC), "a new end replaces the old");
    cr_expect_not(sl_throttle_check(&t, T0 + 40 * SEC - 1));
    expect_admit(&t, T0 + 40 * SEC - 1, true, false, false);
    cr_expect(sl_throttle_check(&t, T0 + 40 * SEC));
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_FREE);
    expect_admit(&t, T0 + 40 * SEC, false, true, false);
}

Test(throttle, a_manual_end_already_past_is_a_resume)
{
    sl_throttle_t t = {0};
    cr_expect_not(sl_throttle_pause_manual(&t, T0 - 1, T0), "free stays free");
    cr_expect_not(sl_throttle_pause_manual(&t, T0, T0));
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_FREE);
    sl_throttle_pause_manual(&t, 0, T0);
    cr_expect(sl_throttle_pause_manual(&t, T0 + 1, T0 + 5));
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_FREE);
}

Test(throttle, the_429_state_runs_on_below_a_manual_pause)
{
    /* A 429 pause that outlasts the operator's: paused after it. */
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, 60 * SEC, &real, 60 * SEC);
    cr_expect(sl_throttle_pause_manual(&t, T0 + 20 * SEC, T0 + SEC));
    cr_expect_eq(t.consecutive, 1, "shown under the manual pause too");
    cr_expect_eq(sl_throttle_recovery_ms(&t, T0 + SEC), T0 + 60 * SEC);
    cr_expect(sl_throttle_check(&t, T0 + 20 * SEC));
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_PAUSED);
    cr_expect_eq(sl_throttle_shown_until_ms(&t), T0 + 60 * SEC);

    /* One that ends under it: probing after it, the head goes first. */
    sl_throttle_t u = {0};
    pause_by_429(&u, T0, -1, &real, 5 * SEC);
    sl_throttle_pause_manual(&u, T0 + 20 * SEC, T0 + SEC);
    cr_expect_not(sl_throttle_check(&u, T0 + 6 * SEC), "the pause ending below shows nothing");
    cr_expect_eq(u.state, SL_THROTTLE_PROBING);
    expect_admit(&u, T0 + 6 * SEC, true, false, false);
    cr_expect_eq(sl_throttle_recovery_ms(&u, T0 + 6 * SEC), T0 + 20 * SEC);
    cr_expect(sl_throttle_check(&u, T0 + 20 * SEC));
    cr_expect_eq(sl_throttle_kind(&u), SL_THROTTLE_PROBING);
    expect_admit(&u, T0 + 20 * SEC, false, false, false);
    expect_admit(&u, T0 + 20 * SEC, true, true, true);

    /* A 429 arriving under it (a hop sent before) pauses below it. */
    sl_throttle_t v = {0};
    sl_throttle_pause_manual(&v, 0, T0);
    cr_expect(sl_throttle_on_429(&v, T0 + SEC, -1, CAP, &real), "consecutive is shown");
    cr_expect_eq(sl_throttle_kind(&v), SL_THROTTLE_MANUAL);
    cr_expect_eq(v.state, SL_THROTTLE_PAUSED);
    cr_expect_eq(v.pause_until_ms, T0 + 6 * SEC);
    cr_expect(sl_throttle_resume(&v, T0 + 2 * SEC));
    cr_expect_eq(sl_throttle_kind(&v), SL_THROTTLE_PROBING, "resume ends the 429 pause into a probe");
}

Test(throttle, resume_ends_a_429_pause_into_probing_and_keeps_the_streak)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    int64_t end = probe_at_end(&t);
    pause_by_429(&t, end + 1, -1, &real, 10 * SEC);
    cr_expect(sl_throttle_resume(&t, end + 2 * SEC));
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_PROBING);
    expect_admit(&t, end + 2 * SEC, false, false, false);
    expect_admit(&t, end + 2 * SEC, true, true, true);
    pause_by_429(&t, end + 3 * SEC, -1, &real, 20 * SEC);
    cr_expect_eq(t.consecutive, 3);
    sl_throttle_check(&t, end + 23 * SEC);
    cr_expect_not(sl_throttle_resume(&t, end + 24 * SEC),
                  "probing without a manual pause: nothing to resume");
}

Test(throttle, the_time_scale_shrinks_the_pause_the_hint_and_the_grace)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &fast, 50);
    int64_t end = probe_at_end(&t);
    cr_expect_eq(sl_throttle_next_change_ms(&t, end), end + 100, "10 s grace scaled by 0.01");
    expect_admit(&t, end + 99, false, false, false);
    expect_admit(&t, end + 100, false, true, false);
    pause_by_429(&t, end + 100, -1, &fast, 100);
    sl_throttle_t u = {0};
    pause_by_429(&u, T0, 1500, &fast, 15);
    sl_throttle_t v = {0};
    pause_by_429(&v, T0, SL_HINT_MAX_MS, &fast, CAP * 10);
}

Test(throttle, a_hand_made_probing_state_uses_the_default_grace)
{
    sl_throttle_t t = {.state = SL_THROTTLE_PROBING};
    expect_admit(&t, T0, true, true, true);
    cr_expect_eq(sl_throttle_next_change_ms(&t, T0), T0 + SL_THROTTLE_PROBE_GRACE_MS);
}

/* ---- send now, else wait, else the final 429 --------------------------------------------------- */

#define NOW      (T0 + 10 * SEC)
#define DEADLINE (T0 + 120 * SEC)

#define FREE_()                                                                                              \
    {                                                                                                        \
        .skip = SL_SKIP_NONE, .recovery_ms = NOW                                                             \
    }
#define THR(at)                                                                                              \
    {                                                                                                        \
        .skip = SL_SKIP_THROTTLED, .recovery_ms = (at)                                                       \
    }
#define BUSY_()                                                                                              \
    {                                                                                                        \
        .skip = SL_SKIP_BUSY, .recovery_ms = NOW                                                             \
    }
#define WIN(at)                                                                                              \
    {                                                                                                        \
        .skip = SL_SKIP_WINDOW_FULL, .recovery_ms = (at)                                                     \
    }
#define USED(at)                                                                                             \
    {                                                                                                        \
        .skip = SL_SKIP_PERIOD_USED_UP, .recovery_ms = (at)                                                  \
    }
#define OTHER_()                                                                                             \
    {                                                                                                        \
        .skip = SL_SKIP_COOLING, .recovery_ms = NOW                                                          \
    }
#define MAXC 4

static const sl_wait_request_t plain = {.now_ms = NOW, .deadline_ms = DEADLINE, .own = SL_WAIT_NO_OWN};

static sl_wait_decision_t
decide(const sl_wait_gate_t *g, size_t n, const sl_wait_request_t *req, bool *wait_on)
{
    for (size_t i = 0; i < MAXC; i++)
        wait_on[i] = true; /* every entry must be written */
    return sl_wait_decide(g, n, req, wait_on);
}

Test(wait, a_request_sends_now_to_the_first_candidate_that_can_take_it)
{
    static const struct {
        const char *what;
        sl_wait_gate_t g[MAXC];
        size_t n, send;
    } rows[] = {
        {"the first", {FREE_(), FREE_()}, 2, 0},
        {"past a throttled one", {THR(NOW + SEC), FREE_()}, 2, 1},
        {"past busy, full, used up and other", {BUSY_(), WIN(NOW + SEC), USED(NOW + SEC), FREE_()}, 4, 3},
        {"rather than wait for one that recovers sooner", {THR(NOW + 1), OTHER_(), FREE_()}, 3, 2},
    };
    for (size_t i = 0; i < N(rows); i++) {
        bool wait_on[MAXC];
        sl_wait_decision_t d = decide(rows[i].g, rows[i].n, &plain, wait_on);
        cr_expect_eq(d.action, SL_WAIT_SEND_NOW, "%s", rows[i].what);
        cr_expect_eq(d.send, rows[i].send, "%s", rows[i].what);
        for (size_t k = 0; k < rows[i].n; k++)
            cr_expect_not(wait_on[k], "%s: waits on nothing", rows[i].what);
    }
}

Test(wait, otherwise_it_waits_on_every_candidate_that_can_recover_by_the_deadline)
{
    static const struct {
        const char *what;
        sl_wait_gate_t g[MAXC];
        size_t n;
        bool wait_on[MAXC];
        int64_t wake;
    } rows[] = {
        {"two paused: the earlier end wakes it",
         {THR(NOW + 9 * SEC), THR(NOW + 3 * SEC)},
         2,
         {true, true},
         NOW + 3 * SEC},
        {"paused, busy and full together; the others are left out",
         {THR(NOW + 9 * SEC), OTHER_(), BUSY_(), WIN(NOW + 30 * SEC)},
         4,
         {true, false, true, true},
         NOW + 9 * SEC},
        {"one recovering after the deadline is not waited on",
         {THR(DEADLINE + 1), WIN(NOW + 4 * SEC), USED(NOW + SEC)},
         3,
         {false, true, false},
         NOW + 4 * SEC},
        {"a recovery exactly at the deadline still counts", {THR(DEADLINE)}, 1, {true}, DEADLINE},
        {"busy only: woken by a freed slot, the timer only at the deadline",
         {BUSY_(), BUSY_()},
         2,
         {true, true},
         DEADLINE},
        {"a probe that may go now: woken by the throttle, not a timer",
         {THR(NOW), THR(NOW + 50 * SEC)},
         2,
         {true, true},
         NOW + 50 * SEC},
    };
    for (size_t i = 0; i < N(rows); i++) {
        bool wait_on[MAXC];
        sl_wait_decision_t d = decide(rows[i].g, rows[i].n, &plain, wait_on);
        cr_expect_eq(d.action, SL_WAIT_WAIT, "%s", rows[i].what);
        size_t count = 0;
        for (size_t k = 0; k < rows[i].n; k++) {
            cr_expect_eq(wait_on[k], rows[i].wait_on[k], "%s: candidate %zu", rows[i].what, k);
            count += rows[i].wait_on[k];
        }
        cr_expect_eq(d.n_wait, count, "%s", rows[i].what);
        cr_expect_eq(d.wake_ms, rows[i].wake, "%s: wake at +%lld", rows[i].what,
                     (long long)(d.wake_ms - NOW));
    }
}

Test(wait, a_single_candidate_is_waited_for_never_bypassed)
{
    bool wait_on[MAXC];
    sl_wait_gate_t g[] = {THR(NOW + 40 * SEC)};
    sl_wait_decision_t d = decide(g, 1, &plain, wait_on);
    cr_expect_eq(d.action, SL_WAIT_WAIT);
    cr_expect(wait_on[0]);
    cr_expect_eq(d.wake_ms, NOW + 40 * SEC);
}

Test(wait, final_429_as_soon_as_nothing_can_be_sent_before_the_deadline)
{
    static const struct {
        const char *what;
        sl_wait_gate_t g[MAXC];
        size_t n;
        const char *code;
        int64_t ms, secs;
        bool should_retry;
    } rows[] = {
        {"one pause past the deadline", {THR(DEADLINE + 1500)}, 1, "gw.wait.rate_limited", 111500, 112, true},
        {"two pauses: the earliest end",
         {THR(DEADLINE + 30 * SEC), THR(DEADLINE + 1)},
         2,
         "gw.wait.rate_limited",
         110001,
         111,
         true},
        {"windows",
         {WIN(DEADLINE + 2000), OTHER_(), WIN(DEADLINE + 9000)},
         3,
         "gw.wait.window_full",
         112000,
         112,
         true},
        {"used up everywhere: the earliest reset, do not retry",
         {USED(NOW + 3600 * SEC), USED(NOW + 7200 * SEC)},
         2,
         "gw.wait.used_up",
         3600 * SEC,
         3600,
         false},
        {"used up and paused: mixed, the pause's end",
         {USED(NOW + 3600 * SEC), THR(DEADLINE + 500)},
         2,
         "gw.wait.mixed",
         110500,
         111,
         true},
        {"paused and full: mixed",
         {THR(DEADLINE + 1), WIN(DEADLINE + 1)},
         2,
         "gw.wait.mixed",
         110001,
         111,
         true},
        {"a window the estimate can never fit: no time, do not retry",
         {WIN(NEVER)},
         1,
         "gw.wait.window_full",
         -1,
         -1,
         false},
        {"an indefinite manual pause beside a used-up period",
         {THR(NEVER), USED(NOW + 60 * SEC)},
         2,
         "gw.wait.mixed",
         60 * SEC,
         60,
         false},
        {"a whole second is not rounded up",
         {THR(NOW + 200 * SEC)},
         1,
         "gw.wait.rate_limited",
         200 * SEC,
         200,
         true},
    };
    for (size_t i = 0; i < N(rows); i++) {
        bool wait_on[MAXC];
        sl_wait_decision_t d = decide(rows[i].g, rows[i].n, &plain, wait_on);
        cr_expect_eq(d.action, SL_WAIT_FINAL_429, "%s", rows[i].what);
        cr_expect_str_eq(sl_wait_code_slug(d.code), rows[i].code, "%s", rows[i].what);
        cr_expect_eq(d.retry_after_ms, rows[i].ms, "%s: retry-after-ms %lld", rows[i].what,
                     (long long)d.retry_after_ms);
        cr_expect_eq(d.retry_after_secs, rows[i].secs, "%s: Retry-After %lld", rows[i].what,
                     (long long)d.retry_after_secs);
        cr_expect_eq(d.should_retry, rows[i].should_retry, "%s", rows[i].what);
        for (size_t k = 0; k < rows[i].n; k++)
            cr_expect_not(wait_on[k], "%s: waits on nothing", rows[i].what);
    }
}

Test(wait, at_the_deadline_waiting_ends_in_the_final_429)
{
    sl_wait_request_t at = plain;
    at.now_ms = DEADLINE;
    bool wait_on[MAXC];
    sl_wait_gate_t busy[] = {BUSY_(), BUSY_()};
    sl_wait_decision_t d = decide(busy, 2, &at, wait_on);
    cr_expect_eq(d.action, SL_WAIT_FINAL_429, "nothing is admitted after the deadline");
    cr_expect_str_eq(sl_wait_code_slug(d.code), "gw.wait.mixed", "busy slots are not a rate limit");
    cr_expect_eq(d.retry_after_ms, 1, "a slot may free any moment: at least 1 ms");
    cr_expect_eq(d.retry_after_secs, 1);
    cr_expect(d.should_retry);

    sl_wait_gate_t paused[] = {THR(DEADLINE + 2500)};
    d = decide(paused, 1, &at, wait_on);
    cr_expect_eq(d.action, SL_WAIT_FINAL_429);
    cr_expect_eq(d.retry_after_ms, 2500);
    cr_expect_eq(d.retry_after_secs, 3, "rounded up");

    sl_wait_request_t late = plain;
    late.now_ms = DEADLINE + 1;
    sl_wait_gate_t soon[] = {THR(DEADLINE)};
    d = decide(soon, 1, &late, wait_on);
    cr_expect_eq(d.action, SL_WAIT_FINAL_429, "wait_secs spent");
    cr_expect_eq(d.retry_after_ms, 1);

    sl_wait_request_t no_wait = {.now_ms = NOW, .deadline_ms = NOW, .own = SL_WAIT_NO_OWN};
    sl_wait_gate_t slot[] = {BUSY_()};
    d = decide(slot, 1, &no_wait, wait_on);
    cr_expect_eq(d.action, SL_WAIT_FINAL_429, "wait_secs 0: never wait");

    sl_wait_gate_t open[] = {THR(NOW + SEC), FREE_()};
    d = decide(open, 2, &late, wait_on);
    cr_expect_eq(d.action, SL_WAIT_SEND_NOW, "a candidate free now is sent to whatever the deadline");
    cr_expect_eq(d.send, 1);
}

Test(wait, a_sticky_conversation_waits_for_its_own_upstream_when_it_recovers_in_time)
{
    bool wait_on[MAXC];
    sl_wait_request_t sticky = plain;
    sticky.own = 1;
    sl_wait_gate_t in_time[] = {FREE_(), THR(NOW + 20 * SEC), FREE_()};
    sl_wait_decision_t d = decide(in_time, 3, &sticky, wait_on);
    cr_expect_eq(d.action, SL_WAIT_WAIT, "it waits for its own upstream");
    cr_expect(!wait_on[0] && wait_on[1] && !wait_on[2], "and only for it");
    cr_expect_eq(d.n_wait, 1);
    cr_expect_eq(d.wake_ms, NOW + 20 * SEC);

    sl_wait_gate_t free_own[] = {FREE_(), FREE_()};
    d = decide(free_own, 2, &sticky, wait_on);
    cr_expect_eq(d.action, SL_WAIT_SEND_NOW);
    cr_expect_eq(d.send, 1, "its own upstream first");

    sl_wait_gate_t too_late[] = {THR(NOW + 5 * SEC), THR(DEADLINE + 1), FREE_()};
    d = decide(too_late, 3, &sticky, wait_on);
    cr_expect_eq(d.action, SL_WAIT_SEND_NOW, "it lets go");
    cr_expect_eq(d.send, 2);

    sl_wait_gate_t gone[] = {THR(NOW + 5 * SEC), OTHER_()};
    d = decide(gone, 2, &sticky, wait_on);
    cr_expect_eq(d.action, SL_WAIT_WAIT, "lets go of a cooling upstream and waits elsewhere");
    cr_expect(wait_on[0] && !wait_on[1]);

    sl_wait_gate_t none[] = {THR(DEADLINE + 3 * SEC), USED(DEADLINE + 2 * SEC)};
    d = decide(none, 2, &sticky, wait_on);
    cr_expect_eq(d.action, SL_WAIT_FINAL_429, "every candidate counts once it let go");
    cr_expect_str_eq(sl_wait_code_slug(d.code), "gw.wait.mixed");
    cr_expect_eq(d.retry_after_ms, 112 * SEC);
}

Test(wait, sealed_history_never_lets_go)
{
    bool wait_on[MAXC];
    sl_wait_request_t sealed = plain;
    sealed.own = 0;
    sealed.sealed = true;
    sl_wait_gate_t too_late[] = {THR(DEADLINE + 4 * SEC), FREE_()};
    sl_wait_decision_t d = decide(too_late, 2, &sealed, wait_on);
    cr_expect_eq(d.action, SL_WAIT_FINAL_429, "no other upstream can read its history");
    cr_expect_str_eq(sl_wait_code_slug(d.code), "gw.wait.rate_limited");
    cr_expect_eq(d.retry_after_ms, 114 * SEC);

    sl_wait_gate_t in_time[] = {BUSY_(), FREE_()};
    d = decide(in_time, 2, &sealed, wait_on);
    cr_expect_eq(d.action, SL_WAIT_WAIT);
    cr_expect(wait_on[0] && !wait_on[1]);

    sl_wait_gate_t unusable[] = {OTHER_(), FREE_()};
    d = decide(unusable, 2, &sealed, wait_on);
    cr_expect_eq(d.action, SL_WAIT_UNUSABLE, "disabled: not a waiting matter");
}

Test(wait, no_candidate_that_waiting_concerns_is_unusable)
{
    bool wait_on[MAXC];
    sl_wait_gate_t others[] = {OTHER_(), OTHER_()};
    sl_wait_decision_t d = decide(others, 2, &plain, wait_on);
    cr_expect_eq(d.action, SL_WAIT_UNUSABLE);
    cr_expect_not(wait_on[0] || wait_on[1]);
    d = decide(NULL, 0, &plain, wait_on);
    cr_expect_eq(d.action, SL_WAIT_UNUSABLE, "no candidates at all");
}

Test(wait, the_throttles_recovery_feeds_the_decision)
{
    /* Two upstreams 429 at once; the one with the shorter hint takes the request. */
    sl_throttle_t a = {0}, b = {0};
    sl_throttle_on_429(&a, T0, 8 * SEC, CAP, &real);
    sl_throttle_on_429(&b, T0, 1500, CAP, &real);
    sl_wait_request_t req = {.now_ms = T0 + 100, .deadline_ms = T0 + 120 * SEC, .own = SL_WAIT_NO_OWN};
    sl_wait_gate_t g[] = {
        {.skip = SL_SKIP_THROTTLED, .recovery_ms = sl_throttle_recovery_ms(&a, req.now_ms)},
        {.skip = SL_SKIP_THROTTLED, .recovery_ms = sl_throttle_recovery_ms(&b, req.now_ms)},
    };
    bool wait_on[MAXC];
    sl_wait_decision_t d = decide(g, 2, &req, wait_on);
    cr_expect_eq(d.action, SL_WAIT_WAIT);
    cr_expect_eq(d.wake_ms, T0 + 1500);
    cr_expect_eq(d.wake_ms, sl_throttle_next_change_ms(&b, req.now_ms));
    sl_throttle_check(&b, d.wake_ms);
    bool probe;
    cr_expect(sl_throttle_admit(&b, d.wake_ms, true, &probe) && probe);
}

/* ---- another instance's pause (cluster.md) ------------------------------------------------------ */

Test(throttle, another_instances_pause_holds_here_with_its_end_streak_and_grace)
{
    sl_throttle_t t = {0};
    cr_expect(sl_throttle_adopt_pause(&t, T0, T0 + 7 * SEC, 3, 2 * SEC), "a pause is a visible change");
    cr_expect_eq(t.state, SL_THROTTLE_PAUSED);
    cr_expect_eq(t.consecutive, 3, "the streak as the other instance counted it");
    cr_expect_eq(sl_throttle_shown_until_ms(&t), T0 + 7 * SEC);
    expect_admit(&t, T0 + SEC, true, false, false);
    /* At its end the probe is asked for here too (the lease decides whose goes), with the other's grace. */
    cr_expect(sl_throttle_check(&t, T0 + 7 * SEC));
    expect_admit(&t, T0 + 7 * SEC, true, true, true);
    expect_admit(&t, T0 + 7 * SEC + 2 * SEC - 1, true, false, false);
    expect_admit(&t, T0 + 7 * SEC + 2 * SEC, true, true, false);
}

Test(throttle, an_older_pause_from_another_instance_changes_only_the_streak)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    cr_expect_not(sl_throttle_adopt_pause(&t, T0 + 100, T0 + 3 * SEC, 1, 10 * SEC),
                  "ends sooner: older news");
    cr_expect_eq(t.pause_until_ms, T0 + 5 * SEC);
    cr_expect(sl_throttle_adopt_pause(&t, T0 + 100, T0 + 3 * SEC, 4, 10 * SEC), "a longer streak shows");
    cr_expect_eq(t.consecutive, 4);
    cr_expect_eq(t.pause_until_ms, T0 + 5 * SEC, "the later end stays");
    cr_expect(sl_throttle_adopt_pause(&t, T0 + 200, T0 + 9 * SEC, 2, 10 * SEC), "ends later: replaces it");
    cr_expect_eq(t.pause_until_ms, T0 + 9 * SEC);
    cr_expect_eq(t.consecutive, 4, "a streak never goes back");
}

Test(throttle, a_pause_from_another_instance_that_already_ended_does_not_pause)
{
    sl_throttle_t t = {0};
    cr_expect_not(sl_throttle_adopt_pause(&t, T0, T0 - 1, 0, 10 * SEC));
    cr_expect_eq(t.state, SL_THROTTLE_FREE);
    expect_admit(&t, T0, false, true, false);
}

Test(throttle, another_instances_pause_ends_a_probe_running_here_into_a_new_one)
{
    sl_throttle_t t = {0};
    pause_by_429(&t, T0, -1, &real, 5 * SEC);
    int64_t end = probe_at_end(&t);
    cr_expect(t.probe_out);
    /* The other instance's probe got a 429 and paused again: this one's probe is no longer the one. */
    cr_expect(sl_throttle_adopt_pause(&t, end + 10, end + 10 * SEC, 2, 10 * SEC));
    cr_expect_not(t.probe_out);
    expect_admit(&t, end + 20, true, false, false);
}

Test(throttle, another_instances_pause_runs_below_a_manual_pause)
{
    sl_throttle_t t = {0};
    cr_expect(sl_throttle_pause_manual(&t, T0 + 2 * SEC, T0));
    sl_throttle_adopt_pause(&t, T0, T0 + 4 * SEC, 1, 10 * SEC);
    cr_expect_eq(sl_throttle_kind(&t), SL_THROTTLE_MANUAL);
    cr_expect_eq(sl_throttle_recovery_ms(&t, T0), T0 + 4 * SEC, "the later of the two ends");
}
