/*
 * The shared state's contract (gateway/shared_state.h), on the local
 * implementation: a claim takes an upstream's line, throttle, limits, slot
 * and breaker in that order; what it took comes back on release; lines keep
 * arrival order and shut at a drain; a key is admitted only with room and
 * first in its line; operator pauses and resumes. Every answer comes through
 * the callback, before the call returns.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "shared_state.h"
#include "core/xalloc.h"
#include "test_config_env.h"

#define SEC  ((int64_t)1000)
#define NOW  ((int64_t)1000000)       /* sl_now_ms's clock */
#define WALL ((int64_t)1795969439000) /* the wall clock at NOW */

static sl_config_t *config;
static sl_upstreams_t *reg;
static sl_upstream_t **ups;
static sl_shared_state_t *ss;
static atomic_bool stopping;
static h2o_evloop_t *loop;
static sl_waitq_inbox_t *inbox;
static sl_shared_call_t call;

static void
on_wake(void *owner)
{
    (void)owner;
}

static void
setup(void)
{
    static const char yaml[] = "providers:\n"
                               "  - {name: a, protocol: anthropic, base_url: \"http://127.0.0.1:9/\"}\n"
                               "  - {name: b, protocol: anthropic, base_url: \"https://example.com/\"}\n";
    config = test_config_of(yaml);
    cr_assert_not_null(config);
    reg = sl_upstreams_new();
    ups = sl_upstreams_bind(reg, config);
    cr_assert_not_null(ups);
    atomic_init(&stopping, false);
    ss = sl_shared_local_new(&stopping, false);
    loop = h2o_evloop_create();
    inbox = sl_waitq_inbox_new(h2o_multithread_create_queue(loop), on_wake);
    call = (sl_shared_call_t){0};
}

static void
teardown(void)
{
    sl_shared_state_free(ss);
    free(ups);
    sl_upstreams_free(reg);
    sl_config_free(config);
}

TestSuite(shared_local, .init = setup, .fini = teardown);

/* ---- answers, caught ------------------------------------------------------------------------------ */

static struct {
    int calls;
    sl_upstream_claim_result_t claim;
    sl_key_claim_result_t key;
    sl_throttle_news_t news;
    sl_lines_joined_t joined;
} got;

static void
on_claim(void *ctx, const sl_upstream_claim_result_t *r)
{
    cr_assert_eq(ctx, &got);
    got.calls++;
    got.claim = *r;
}

static void
on_key(void *ctx, const sl_key_claim_result_t *r)
{
    cr_assert_eq(ctx, &got);
    got.calls++;
    got.key = *r;
}

static void
on_news(void *ctx, const sl_throttle_news_t *n)
{
    cr_assert_eq(ctx, &got);
    got.calls++;
    got.news = *n;
}

static void
on_joined(void *ctx, const sl_lines_joined_t *r)
{
    cr_assert_eq(ctx, &got);
    got.calls++;
    got.joined = *r;
}

/* Claims up as the request path does; the answer came before the call returned. */
static sl_upstream_claim_result_t
claim(sl_upstream_claim_t c)
{
    int before = got.calls;
    if (c.now_ms == 0)
        c.now_ms = NOW;
    if (c.wall_ms == 0)
        c.wall_ms = WALL;
    sl_shared_claim_upstream(ss, &c, &call, on_claim, &got);
    cr_assert_eq(got.calls, before + 1, "answered once, at once");
    cr_assert_null(call.pending);
    return got.claim;
}

static void
release(sl_upstream_t *up, sl_upstream_claim_result_t *taken, sl_amounts_t used)
{
    sl_shared_release_upstream(ss, &(sl_upstream_release_t){.up = up,
                                                            .charge = &taken->charge,
                                                            .used = used,
                                                            .throttle_probe = taken->throttle_probe,
                                                            .breaker_probe = taken->breaker_probe,
                                                            .wall_ms = WALL});
}

/* A limit set of one rolling limit of amount requests per minute. */
static sl_limit_set_t *
requests_per_minute(int64_t amount)
{
    sl_limit_set_t *set = sl_xcalloc(1, sizeof(*set));
    set->kind = SL_BUCKET_PROVIDER;
    set->n = 1;
    set->states = sl_xcalloc(1, sizeof(*set->states));
    sl_limit_t limit = {.per = SL_PER_MINUTE, .every = 1, .measure = SL_MEASURE_REQUESTS, .amount = amount};
    sl_limit_state_init(&set->states[0], &limit, sl_limit_window_ms(&limit), NULL);
    return set;
}

static void
set_free(sl_limit_set_t *set)
{
    free(set->states);
    free(set);
}

static const sl_amounts_t one_request = {.requests = 1};

/* ---- claims ------------------------------------------------------------------------------------------ */

Test(shared_local, a_slot_under_max_concurrent_is_taken_until_released)
{
    sl_upstream_claim_result_t first = claim((sl_upstream_claim_t){.up = ups[0], .max_concurrent = 1});
    cr_assert_eq(first.skip, SL_SKIP_NONE);
    cr_assert_eq(sl_shared_upstream_view(ss, ups[0], NULL).in_flight, 1);
    cr_assert_eq(claim((sl_upstream_claim_t){.up = ups[0], .max_concurrent = 1}).skip, SL_SKIP_BUSY);
    cr_assert_eq(claim((sl_upstream_claim_t){.up = ups[1], .max_concurrent = 1}).skip, SL_SKIP_NONE,
                 "another upstream has slots of its own");
    release(ups[0], &first, one_request);
    cr_assert_eq(sl_shared_upstream_view(ss, ups[0], NULL).in_flight, 0);
    cr_assert_eq(claim((sl_upstream_claim_t){.up = ups[0], .max_concurrent = 1}).skip, SL_SKIP_NONE);
}

Test(shared_local, a_429_pauses_the_upstream_and_its_claims_are_skipped_as_throttled)
{
    sl_retry_params_t params = {.time_scale = 1, .no_jitter = true};
    sl_shared_upstream_rate_limited(ss, ups[0], NOW, 5 * SEC, 60, &params, &call, on_news, &got);
    cr_assert_eq(got.calls, 1);
    cr_assert(got.news.changed);
    cr_assert_eq(got.news.up, ups[0]);
    cr_assert_eq(sl_throttle_kind(&got.news.throttle), SL_THROTTLE_PAUSED);
    sl_pause_t p = sl_shared_pause_of(ss, ups[0], NOW);
    cr_assert_eq(p.kind, SL_THROTTLE_PAUSED);
    cr_assert_eq(p.recovery_ms, NOW + 5 * SEC);
    sl_upstream_claim_result_t r = claim((sl_upstream_claim_t){.up = ups[0]});
    cr_assert_eq(r.skip, SL_SKIP_THROTTLED);
    cr_assert_not(r.reached_limits, "limits are not asked while the throttle says no");
    /* At the pause's end the first to ask is the probe; an answer ends the probing. */
    r = claim((sl_upstream_claim_t){.up = ups[0], .now_ms = NOW + 5 * SEC});
    cr_assert_eq(r.skip, SL_SKIP_NONE);
    cr_assert(r.throttle_probe);
    cr_assert(r.throttle_changed);
    sl_shared_upstream_answered(ss, ups[0], NOW + 6 * SEC, &call, on_news, &got);
    cr_assert(got.news.changed);
    cr_assert_eq(sl_throttle_kind(&got.news.throttle), SL_THROTTLE_FREE);
}

Test(shared_local, a_probe_that_got_no_answer_is_handed_back_on_release)
{
    sl_retry_params_t params = {.time_scale = 1, .no_jitter = true};
    sl_shared_upstream_rate_limited(ss, ups[0], NOW, 1 * SEC, 60, &params, &call, on_news, &got);
    sl_upstream_claim_result_t probe = claim((sl_upstream_claim_t){.up = ups[0], .now_ms = NOW + SEC});
    cr_assert(probe.throttle_probe);
    cr_assert_eq(claim((sl_upstream_claim_t){.up = ups[0], .now_ms = NOW + SEC}).skip, SL_SKIP_THROTTLED,
                 "one probe at a time");
    release(ups[0], &probe, one_request);
    sl_upstream_claim_result_t next = claim((sl_upstream_claim_t){.up = ups[0], .now_ms = NOW + SEC});
    cr_assert_eq(next.skip, SL_SKIP_NONE);
    cr_assert(next.throttle_probe, "the next to ask is the probe");
}

Test(shared_local, nobody_overtakes_the_head_of_a_line_and_the_head_goes_once_the_one_before_is_sent)
{
    static int ids[2];
    sl_waiter_t *early = sl_waiter_new(inbox, &ids[0], 10, 0), *late = sl_waiter_new(inbox, &ids[1], 20, 0);
    sl_line_t line = {.up = ups[0]};
    sl_shared_join_lines(ss, late, &line, 1, &call, on_joined, &got);
    cr_assert(got.joined.joined);
    sl_shared_join_lines(ss, early, &line, 1, &call, on_joined, &got);
    cr_assert_eq(sl_shared_upstream_view(ss, ups[0], NULL).queued, 2);
    cr_assert_eq(claim((sl_upstream_claim_t){.up = ups[0]}).skip, SL_SKIP_BUSY,
                 "a newcomer waits behind the line");
    cr_assert_eq(claim((sl_upstream_claim_t){.up = ups[0], .waiter = late}).skip, SL_SKIP_BUSY);
    sl_upstream_claim_result_t head = claim((sl_upstream_claim_t){.up = ups[0], .waiter = early});
    cr_assert_eq(head.skip, SL_SKIP_NONE);
    cr_assert(head.dispatching);
    sl_shared_leave_lines(ss, early, NULL, 0);
    cr_assert_eq(claim((sl_upstream_claim_t){.up = ups[0], .waiter = late}).skip, SL_SKIP_BUSY,
                 "the next head waits until the one released before it is sent");
    sl_shared_hop_sent(ss, ups[0], true, &head.charge, WALL);
    cr_assert_eq(claim((sl_upstream_claim_t){.up = ups[0], .waiter = late}).skip, SL_SKIP_NONE);
    sl_shared_leave_lines(ss, late, NULL, 0);
}

Test(shared_local, a_full_window_skips_with_its_recovery_and_a_settled_charge_makes_room)
{
    sl_limit_set_t *set = requests_per_minute(2);
    sl_upstream_claim_t c = {.up = ups[0], .limits = set, .need = one_request};
    sl_upstream_claim_result_t a = claim(c), b = claim(c);
    cr_assert_eq(a.skip, SL_SKIP_NONE);
    cr_assert_eq(a.charge.set, set);
    cr_assert_eq(a.charge.at_ms, WALL);
    cr_assert_eq(b.skip, SL_SKIP_NONE);
    sl_upstream_claim_result_t full = claim(c);
    cr_assert_eq(full.skip, SL_SKIP_WINDOW_FULL);
    /* When the window has room (core/limits.h), on sl_now_ms's clock. */
    sl_limits_check_t room = sl_limits_check(set->states, set->n, WALL, &one_request);
    cr_assert_gt(room.recovery_ms, WALL);
    cr_assert_eq(full.recovery_ms, NOW + (room.recovery_ms - WALL));
    cr_assert(full.limits_changed, "ThrottleChanged shows the full window once");
    cr_assert_eq(full.shown, SL_LIMIT_WINDOW_FULL);
    cr_assert_eq(full.limit.amount, 2);
    cr_assert_eq(sl_shared_upstream_view(ss, ups[0], set).shown, SL_LIMIT_WINDOW_FULL);
    cr_assert_not(claim(c).limits_changed);
    /* A hop the upstream never counted (a 429) gives its request back. */
    release(ups[0], &a, (sl_amounts_t){0});
    cr_assert_null(a.charge.set, "a settled charge is cleared");
    sl_upstream_claim_result_t again = claim(c);
    cr_assert_eq(again.skip, SL_SKIP_NONE);
    cr_assert(again.limits_changed, "room again: the full window is no longer shown");
    cr_assert_eq(again.shown, SL_LIMIT_OK);
    set_free(set);
}

Test(shared_local, a_hop_larger_than_a_whole_limit_can_never_be_taken)
{
    sl_limit_set_t *set = requests_per_minute(2);
    sl_upstream_claim_result_t r =
        claim((sl_upstream_claim_t){.up = ups[0], .limits = set, .need = {.requests = 3}});
    cr_assert_eq(r.skip, SL_SKIP_WINDOW_FULL);
    cr_assert_eq(r.recovery_ms, SL_THROTTLE_NEVER);
    cr_assert_eq(r.limit.amount, 2, "the limit it met, for the message");
    cr_assert_not(r.limits_changed, "too large is not a full window: nothing is shown");
    cr_assert_eq(sl_shared_upstream_view(ss, ups[0], NULL).in_flight, 0, "nothing was taken");
    set_free(set);
}

Test(shared_local, a_charge_moves_to_when_its_hop_is_sent)
{
    sl_limit_set_t *set = requests_per_minute(10);
    sl_upstream_claim_result_t r =
        claim((sl_upstream_claim_t){.up = ups[0], .limits = set, .need = one_request});
    sl_shared_hop_sent(ss, ups[0], false, &r.charge, WALL + 30 * SEC);
    cr_assert_eq(r.charge.at_ms, WALL + 30 * SEC);
    int64_t recovery = 0;
    /* Counted at the send: 59 s after it the request is still in the window. */
    cr_assert_eq(sl_limit_check(&set->states[0], WALL + 89 * SEC, 10, &recovery), SL_LIMIT_WINDOW_FULL);
    release(ups[0], &r, one_request);
    set_free(set);
}

Test(shared_local, an_open_breaker_skips_as_cooling_unless_bypassed)
{
    ups[0]->breaker = (sl_breaker_t){.state = SL_BREAKER_OPEN, .until_ms = NOW + 30 * SEC};
    cr_assert_eq(claim((sl_upstream_claim_t){.up = ups[0]}).skip, SL_SKIP_COOLING);
    cr_assert_eq(sl_shared_upstream_view(ss, ups[0], NULL).in_flight, 0);
    sl_upstream_claim_result_t r = claim((sl_upstream_claim_t){.up = ups[0], .bypass_breaker = true});
    cr_assert_eq(r.skip, SL_SKIP_NONE);
    cr_assert_not(r.breaker_probe);
    /* Once its pause is over, one hop is the half-open probe. */
    sl_upstream_claim_result_t probe = claim((sl_upstream_claim_t){.up = ups[0], .now_ms = NOW + 30 * SEC});
    cr_assert_eq(probe.skip, SL_SKIP_NONE);
    cr_assert(probe.breaker_probe);
    cr_assert(probe.breaker_changed);
    cr_assert_eq(probe.breaker.state, SL_BREAKER_HALF_OPEN);
}

/* ---- a client key ---------------------------------------------------------------------------------- */

static sl_key_claim_result_t
claim_key(sl_key_claim_t c)
{
    int before = got.calls;
    if (c.wall_ms == 0)
        c.wall_ms = WALL;
    sl_shared_claim_key(ss, &c, &call, on_key, &got);
    cr_assert_eq(got.calls, before + 1, "answered once, at once");
    return got.key;
}

Test(shared_local, a_key_is_admitted_with_room_and_settling_gives_room_back)
{
    sl_limit_set_t *key = requests_per_minute(1);
    key->kind = SL_BUCKET_CLIENT;
    sl_key_claim_result_t a = claim_key((sl_key_claim_t){.key = key, .need = one_request});
    cr_assert(a.admitted);
    cr_assert_eq(a.charge.set, key);
    sl_key_claim_result_t b = claim_key((sl_key_claim_t){.key = key, .need = one_request});
    cr_assert_not(b.admitted);
    cr_assert_eq(b.check.verdict, SL_LIMIT_WINDOW_FULL);
    cr_assert_eq(b.limit.amount, 1);
    sl_shared_settle(ss, &a.charge, &(sl_amounts_t){0}, true, WALL);
    cr_assert(claim_key((sl_key_claim_t){.key = key, .need = one_request}).admitted);
    set_free(key);
}

Test(shared_local, a_key_without_limits_admits_without_a_charge)
{
    sl_limit_set_t key = {.kind = SL_BUCKET_CLIENT};
    sl_key_claim_result_t r = claim_key((sl_key_claim_t){.key = &key, .need = one_request});
    cr_assert(r.admitted);
    cr_assert_null(r.charge.set);
}

Test(shared_local, a_key_with_room_admits_only_the_head_of_its_line)
{
    static int ids[2];
    sl_limit_set_t *key = requests_per_minute(5);
    sl_waiter_t *early = sl_waiter_new(inbox, &ids[0], 10, 0), *late = sl_waiter_new(inbox, &ids[1], 20, 0);
    sl_line_t line = {.key = key};
    sl_shared_join_lines(ss, early, &line, 1, &call, on_joined, &got);
    sl_shared_join_lines(ss, late, &line, 1, &call, on_joined, &got);
    sl_key_claim_result_t r = claim_key((sl_key_claim_t){.key = key, .need = one_request, .waiter = late});
    cr_assert_not(r.admitted);
    cr_assert_eq(r.check.verdict, SL_LIMIT_OK, "room, but others are first");
    r = claim_key((sl_key_claim_t){.key = key, .need = one_request, .waiter = early});
    cr_assert(r.admitted);
    cr_assert_eq(key->queue.len, 1, "the admitted one left the line");
    cr_assert(claim_key((sl_key_claim_t){.key = key, .need = one_request, .waiter = late}).admitted);
    sl_shared_leave_lines(ss, early, NULL, 0);
    sl_shared_leave_lines(ss, late, NULL, 0);
    set_free(key);
}

/* ---- draining ---------------------------------------------------------------------------------------- */

Test(shared_local, once_draining_nobody_joins_a_line_and_no_key_is_admitted)
{
    static int id;
    sl_limit_set_t *key = requests_per_minute(5);
    sl_waiter_t *w = sl_waiter_new(inbox, &id, 10, 0);
    atomic_store(&stopping, true);
    sl_line_t line = {.up = ups[0]};
    sl_shared_join_lines(ss, w, &line, 1, &call, on_joined, &got);
    cr_assert_not(got.joined.joined);
    cr_assert(got.joined.draining);
    cr_assert_eq(sl_shared_upstream_view(ss, ups[0], NULL).queued, 0);
    sl_key_claim_result_t r = claim_key((sl_key_claim_t){.key = key, .need = one_request});
    cr_assert(r.draining);
    cr_assert_not(r.admitted);
    sl_shared_leave_lines(ss, w, NULL, 0);
    set_free(key);
}

/* ---- an operator's pause ------------------------------------------------------------------------------ */

Test(shared_local, a_pause_shows_as_manual_until_its_end_then_resume_frees_it)
{
    sl_shared_pause_upstream(ss, ups[0], 61000, 1000, &call, on_news, &got);
    cr_assert(got.news.changed);
    cr_assert_eq(sl_throttle_kind(&got.news.throttle), SL_THROTTLE_MANUAL);
    cr_assert_eq(sl_shared_pause_of(ss, ups[0], 2000).recovery_ms, 61000);
    cr_assert_eq(sl_shared_pause_of(ss, ups[1], 2000).kind, SL_THROTTLE_FREE, "only that upstream pauses");
    sl_shared_resume_upstream(ss, ups[0], 2000, &call, on_news, &got);
    cr_assert(got.news.changed);
    cr_assert_eq(sl_throttle_kind(&got.news.throttle), SL_THROTTLE_FREE);
    sl_shared_resume_upstream(ss, ups[0], 3000, &call, on_news, &got);
    cr_assert_not(got.news.changed, "resuming a free upstream changes nothing");
}

Test(shared_local, a_pause_without_an_end_lasts_until_resumed)
{
    sl_shared_pause_upstream(ss, ups[1], SL_THROTTLE_NEVER, 1000, &call, on_news, &got);
    cr_assert(got.news.changed);
    cr_assert_eq(sl_shared_pause_of(ss, ups[1], 999999).recovery_ms, SL_THROTTLE_NEVER);
    sl_shared_resume_upstream(ss, ups[1], 5000, &call, on_news, &got);
    cr_assert_eq(sl_throttle_kind(&got.news.throttle), SL_THROTTLE_FREE);
}

Test(shared_local, a_resume_ends_a_running_429_pause_into_one_probe)
{
    sl_retry_params_t params = {0};
    sl_shared_upstream_rate_limited(ss, ups[0], 1000, -1, 60, &params, &call, on_news, &got);
    sl_shared_resume_upstream(ss, ups[0], 2000, &call, on_news, &got);
    cr_assert(got.news.changed);
    cr_assert_eq(sl_throttle_kind(&got.news.throttle), SL_THROTTLE_PROBING);
    cr_assert_eq(got.news.throttle.consecutive, 1, "the streak is kept");
}

/* ---- answers a loop turn late, as a remote store's ----------------------------------------------------- */

static sl_timerheap_t turn; /* the caller's loop: its next turn runs what is due */

static void
deferred_setup(void)
{
    setup();
    sl_shared_state_free(ss);
    ss = sl_shared_local_new(&stopping, true);
    turn = (sl_timerheap_t){0};
    call = (sl_shared_call_t){.timers = &turn};
    got.calls = 0;
}

static void
deferred_teardown(void)
{
    free(turn.items);
    teardown();
}

TestSuite(shared_deferred, .init = deferred_setup, .fini = deferred_teardown);

static void
next_turn(void)
{
    sl_timerheap_run(&turn, NOW);
}

Test(shared_deferred, a_claim_is_carried_out_at_once_and_answered_at_the_next_turn)
{
    sl_upstream_claim_t c = {.up = ups[0], .max_concurrent = 1, .now_ms = NOW, .wall_ms = WALL};
    sl_shared_claim_upstream(ss, &c, &call, on_claim, &got);
    cr_assert_eq(got.calls, 0, "no answer before the call returns");
    cr_assert_not_null(call.pending);
    cr_assert_eq(sl_shared_upstream_view(ss, ups[0], NULL).in_flight, 1, "the slot is taken already");
    next_turn();
    cr_assert_eq(got.calls, 1);
    cr_assert_null(call.pending);
    cr_assert_eq(got.claim.skip, SL_SKIP_NONE);
}

Test(shared_deferred, a_cancelled_claim_is_never_answered_and_gives_back_its_slot_and_reservation)
{
    sl_limit_set_t *set = requests_per_minute(1);
    sl_upstream_claim_t c = {.up = ups[0],
                             .limits = set,
                             .need = one_request,
                             .max_concurrent = 1,
                             .now_ms = NOW,
                             .wall_ms = WALL};
    sl_shared_claim_upstream(ss, &c, &call, on_claim, &got);
    sl_shared_cancel(ss, &call);
    cr_assert_null(call.pending);
    next_turn();
    cr_assert_eq(got.calls, 0, "a cancelled call is never answered");
    cr_assert_eq(sl_shared_upstream_view(ss, ups[0], NULL).in_flight, 0, "its slot is free");
    sl_shared_claim_upstream(ss, &c, &call, on_claim, &got);
    next_turn();
    cr_assert_eq(got.claim.skip, SL_SKIP_NONE, "its request is back in the window");
    set_free(set);
}

Test(shared_deferred, a_cancelled_key_admission_gives_back_its_reservation)
{
    sl_limit_set_t *key = requests_per_minute(1);
    key->kind = SL_BUCKET_CLIENT;
    sl_key_claim_t c = {.key = key, .need = one_request, .wall_ms = WALL};
    sl_shared_claim_key(ss, &c, &call, on_key, &got);
    sl_shared_cancel(ss, &call);
    sl_shared_claim_key(ss, &c, &call, on_key, &got);
    next_turn();
    cr_assert_eq(got.calls, 1);
    cr_assert(got.key.admitted);
    set_free(key);
}

Test(shared_deferred, a_cancelled_join_leaves_the_lines)
{
    static int id;
    sl_waiter_t *w = sl_waiter_new(inbox, &id, 10, 0);
    sl_line_t lines[] = {{.up = ups[0]}, {.up = ups[1]}};
    sl_shared_join_lines(ss, w, lines, 2, &call, on_joined, &got);
    cr_assert_eq(sl_shared_upstream_view(ss, ups[1], NULL).queued, 1);
    sl_shared_cancel(ss, &call);
    cr_assert_eq(sl_shared_upstream_view(ss, ups[0], NULL).queued, 0);
    cr_assert_eq(sl_shared_upstream_view(ss, ups[1], NULL).queued, 0);
    next_turn();
    cr_assert_eq(got.calls, 0);
    sl_shared_leave_lines(ss, w, NULL, 0);
}

Test(shared_deferred, a_caller_without_a_loop_is_answered_at_once)
{
    sl_shared_call_t control = {0};
    sl_shared_pause_upstream(ss, ups[0], NOW + SEC, NOW, &control, on_news, &got);
    cr_assert_eq(got.calls, 1);
    cr_assert_null(control.pending);
}
