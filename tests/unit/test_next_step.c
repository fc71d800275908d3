/*
 * What a request does after a failed hop (core/next_step.h), one row per
 * decision of behaviour.md §3 (failover, request errors, the stale
 * keep-alive resend), §5 (retry rounds: schedule, hint, deadline, rounds,
 * cooling), §1.5 (a conversation that stays on its upstream) and §6 (429s).
 * "Why was this request retried?" is answered here.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "core/next_step.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define NOW  1000000
#define SEC  1000

/* Real time, no jitter: the schedule's nominal pauses (2, 4, 8, 16 s). */
static const sl_retry_params_t nominal = {.time_scale = 1, .no_jitter = true};

typedef struct {
    const char *rule; /* what behaviour.md says, in a few words */
    sl_failure_class_t cls;
    bool stale, has_answer, has_next, pinned_here, may_wait;
    /* The round, as candidates 0..n-1: temporary and cooling; the failed one is `at`. */
    const char *temporary, *cooling; /* one char per candidate: 't'/'.' and 'c'/'.' */
    size_t pinned;                   /* SL_RETRY_UNPINNED or an index */
    uint32_t next_round;
    int64_t hint_ms, deadline_in_ms;
    /* The step. */
    sl_step_kind_t kind;
    sl_step_reason_t reason;
    int64_t pause_ms;    /* RETRY_ROUND */
    bool by_hint;        /* RETRY_ROUND */
    const char *retried; /* RETRY_ROUND: 'x' for each candidate in the next round */
    bool has_context_fallback;
} row_t;

#define UNPINNED SL_RETRY_UNPINNED
/* The tail of a row whose step is not a retry round. */
#define NO_ROUND 0, false, "", false
/* The same for a row whose route has a context_fallback. */
#define NO_ROUND_CONTEXT_FALLBACK 0, false, "", true

static const row_t rows[] = {
    /* §3: a reused kept-alive connection that the server had closed: resent fresh, whatever else holds. */
    {"a stale keep-alive is resent on a fresh connection", SL_FAILURE_TEMPORARY, true, false, true, false,
     true, "t.", "..", UNPINNED, 1, 0, 120 * SEC, SL_STEP_RESEND_FRESH, SL_STEP_REASON_STALE_CONNECTION,
     NO_ROUND},
    {"a stale keep-alive is resent even with no time left to wait", SL_FAILURE_TEMPORARY, true, false, false,
     false, false, "t", ".", UNPINNED, 1, 0, 0, SL_STEP_RESEND_FRESH, SL_STEP_REASON_STALE_CONNECTION,
     NO_ROUND},

    /* §3: every failure fails over, temporary or not... */
    {"a temporary failure fails over to the next candidate", SL_FAILURE_TEMPORARY, false, true, true, false,
     true, "t.", "..", UNPINNED, 1, 0, 120 * SEC, SL_STEP_FAILOVER, SL_STEP_REASON_NEXT_CANDIDATE, NO_ROUND},
    {"a failure that is not temporary fails over too", SL_FAILURE_OTHER, false, true, true, false, true, "..",
     "..", UNPINNED, 1, 0, 120 * SEC, SL_STEP_FAILOVER, SL_STEP_REASON_NEXT_CANDIDATE, NO_ROUND},
    {"rejected credentials fail over", SL_FAILURE_AUTH, false, true, true, false, true, "..", "..", UNPINNED,
     1, 0, 120 * SEC, SL_STEP_FAILOVER, SL_STEP_REASON_NEXT_CANDIDATE, NO_ROUND},
    {"a missing model fails over", SL_FAILURE_MISSING_MODEL, false, true, true, false, true, "..", "..",
     UNPINNED, 1, 0, 120 * SEC, SL_STEP_FAILOVER, SL_STEP_REASON_NEXT_CANDIDATE, NO_ROUND},
    {"used-up quota fails over", SL_FAILURE_QUOTA, false, true, true, false, true, "..", "..", UNPINNED, 1, 0,
     120 * SEC, SL_STEP_FAILOVER, SL_STEP_REASON_NEXT_CANDIDATE, NO_ROUND},
    /* ...except a request error: the client's own, handed back at once. */
    {"a request error is handed back at once, next candidate or not", SL_FAILURE_REQUEST_ERROR, false, true,
     true, false, true, "..", "..", UNPINNED, 1, 0, 120 * SEC, SL_STEP_HAND_OVER,
     SL_STEP_REASON_REQUEST_ERROR, NO_ROUND},
    /* §1.6: a context-length error, handed back like any request error unless the route has a fallback. */
    {"a context-length error is a request error without context_fallback", SL_FAILURE_CONTEXT_LENGTH, false,
     true, true, false, true, "..", "..", UNPINNED, 1, 0, 120 * SEC, SL_STEP_HAND_OVER,
     SL_STEP_REASON_REQUEST_ERROR, NO_ROUND},
    {"with context_fallback it goes on there, even from the last candidate", SL_FAILURE_CONTEXT_LENGTH, false,
     true, false, false, false, ".", ".", UNPINNED, 1, 0, 0, SL_STEP_CONTEXT_FALLBACK,
     SL_STEP_REASON_CONTEXT_FALLBACK, NO_ROUND_CONTEXT_FALLBACK},
    {"another request error is still handed back with context_fallback", SL_FAILURE_REQUEST_ERROR, false,
     true, true, false, true, "..", "..", UNPINNED, 1, 0, 120 * SEC, SL_STEP_HAND_OVER,
     SL_STEP_REASON_REQUEST_ERROR, NO_ROUND_CONTEXT_FALLBACK},

    /* §6: a 429 is not a failure: the upstream pauses and the request goes elsewhere or waits. */
    {"a 429 fails over while others remain", SL_FAILURE_RATE_LIMITED, false, true, true, false, true, "..",
     "..", UNPINNED, 1, 0, 120 * SEC, SL_STEP_FAILOVER, SL_STEP_REASON_RATE_LIMITED, NO_ROUND},
    {"a 429 on the last candidate goes on too (to its queue)", SL_FAILURE_RATE_LIMITED, false, true, false,
     false, true, ".", ".", UNPINNED, 1, 0, 120 * SEC, SL_STEP_FAILOVER, SL_STEP_REASON_RATE_LIMITED,
     NO_ROUND},

    /* §5: the last candidate failed: a retry round of the temporary failures, after its pause. */
    {"round 1 waits 2 s", SL_FAILURE_TEMPORARY, false, true, false, false, true, "t", ".", UNPINNED, 1, 0,
     120 * SEC, SL_STEP_RETRY_ROUND, SL_STEP_REASON_RETRY_ROUND, 2 * SEC, false, "x", false},
    {"round 2 waits 4 s", SL_FAILURE_TEMPORARY, false, true, false, false, true, "t", ".", UNPINNED, 2, 0,
     120 * SEC, SL_STEP_RETRY_ROUND, SL_STEP_REASON_RETRY_ROUND, 4 * SEC, false, "x", false},
    {"round 3 waits 8 s", SL_FAILURE_TEMPORARY, false, true, false, false, true, "t", ".", UNPINNED, 3, 0,
     120 * SEC, SL_STEP_RETRY_ROUND, SL_STEP_REASON_RETRY_ROUND, 8 * SEC, false, "x", false},
    {"round 9 waits 16 s", SL_FAILURE_TEMPORARY, false, true, false, false, true, "t", ".", UNPINNED, 9, 0,
     120 * SEC, SL_STEP_RETRY_ROUND, SL_STEP_REASON_RETRY_ROUND, 16 * SEC, false, "x", false},
    {"an upstream's hint lengthens the pause", SL_FAILURE_TEMPORARY, false, true, false, false, true, "t",
     ".", UNPINNED, 1, 11054, 120 * SEC, SL_STEP_RETRY_ROUND, SL_STEP_REASON_RETRY_ROUND, 11054, true, "x",
     false},
    {"a shorter hint never shortens it", SL_FAILURE_TEMPORARY, false, true, false, false, true, "t", ".",
     UNPINNED, 3, 1500, 120 * SEC, SL_STEP_RETRY_ROUND, SL_STEP_REASON_RETRY_ROUND, 8 * SEC, false, "x",
     false},
    {"the round retries only the candidates that failed temporarily", SL_FAILURE_TEMPORARY, false, true,
     false, false, true, "t.t", "...", UNPINNED, 1, 0, 120 * SEC, SL_STEP_RETRY_ROUND,
     SL_STEP_REASON_RETRY_ROUND, 2 * SEC, false, "x.x", false},
    {"cooling candidates are left out of the round", SL_FAILURE_TEMPORARY, false, true, false, false, true,
     "tt", "c.", UNPINNED, 1, 0, 120 * SEC, SL_STEP_RETRY_ROUND, SL_STEP_REASON_RETRY_ROUND, 2 * SEC, false,
     ".x", false},
    {"unless all of them are cooling", SL_FAILURE_TEMPORARY, false, true, false, false, true, "tt", "cc",
     UNPINNED, 1, 0, 120 * SEC, SL_STEP_RETRY_ROUND, SL_STEP_REASON_RETRY_ROUND, 2 * SEC, false, "xx", false},
    {"a pause that ends exactly at the deadline still fits", SL_FAILURE_TEMPORARY, false, true, false, false,
     true, "t", ".", UNPINNED, 1, 0, 2 * SEC, SL_STEP_RETRY_ROUND, SL_STEP_REASON_RETRY_ROUND, 2 * SEC, false,
     "x", false},
    {"a pause past the deadline: the failure is handed over", SL_FAILURE_TEMPORARY, false, true, false, false,
     true, "t", ".", UNPINNED, 1, 0, 2 * SEC - 1, SL_STEP_HAND_OVER, SL_STEP_REASON_DEADLINE, NO_ROUND},
    {"a hint past the deadline too", SL_FAILURE_TEMPORARY, false, true, false, false, true, "t", ".",
     UNPINNED, 1, 60 * SEC, 30 * SEC, SL_STEP_HAND_OVER, SL_STEP_REASON_DEADLINE, NO_ROUND},
    {"wait_secs 0 (or counting tokens) never retries", SL_FAILURE_TEMPORARY, false, true, false, false, false,
     "t", ".", UNPINNED, 1, 0, 120 * SEC, SL_STEP_HAND_OVER, SL_STEP_REASON_NO_WAITING, NO_ROUND},
    {"no temporary failure in the round: handed over", SL_FAILURE_OTHER, false, true, false, false, true,
     "..", "..", UNPINNED, 1, 0, 120 * SEC, SL_STEP_HAND_OVER, SL_STEP_REASON_NOT_RETRIED, NO_ROUND},
    {"used-up quota is never retried", SL_FAILURE_QUOTA, false, true, false, false, true, ".", ".", UNPINNED,
     1, 0, 120 * SEC, SL_STEP_HAND_OVER, SL_STEP_REASON_NOT_RETRIED, NO_ROUND},
    {"with no upstream answer to hand over, the gateway's error", SL_FAILURE_TEMPORARY, false, false, false,
     false, false, "t", ".", UNPINNED, 1, 0, 120 * SEC, SL_STEP_GATEWAY_ERROR, SL_STEP_REASON_NO_WAITING,
     NO_ROUND},
    {"a connection that cannot be made is retried like any temporary failure", SL_FAILURE_TEMPORARY, false,
     false, false, false, true, "t", ".", UNPINNED, 1, 0, 120 * SEC, SL_STEP_RETRY_ROUND,
     SL_STEP_REASON_RETRY_ROUND, 2 * SEC, false, "x", false},

    /* §1.5: a conversation that stays on its upstream waits for it while it can serve before the deadline. */
    {"a pinned conversation retries its own upstream before any other", SL_FAILURE_TEMPORARY, false, true,
     true, true, true, "t.", "..", 0, 1, 0, 120 * SEC, SL_STEP_RETRY_ROUND, SL_STEP_REASON_PINNED_RETRY,
     2 * SEC, false, "x.", false},
    {"and lets go when the pause does not fit", SL_FAILURE_TEMPORARY, false, true, true, true, true, "t.",
     "..", 0, 1, 0, SEC, SL_STEP_FAILOVER, SL_STEP_REASON_NEXT_CANDIDATE, NO_ROUND},
    {"and lets go when its upstream's breaker has just opened", SL_FAILURE_TEMPORARY, false, true, true, true,
     true, "t.", "c.", 0, 3, 0, 120 * SEC, SL_STEP_FAILOVER, SL_STEP_REASON_NEXT_CANDIDATE, NO_ROUND},
    {"a pinned conversation's failure that is not temporary fails over", SL_FAILURE_OTHER, false, true, true,
     true, true, "..", "..", 0, 1, 0, 120 * SEC, SL_STEP_FAILOVER, SL_STEP_REASON_NEXT_CANDIDATE, NO_ROUND},
};

static void
flags(const char *s, char on, bool *out)
{
    for (size_t i = 0; s[i] != '\0'; i++)
        out[i] = s[i] == on;
}

Test(next_step, every_decision_of_behaviour_md_sections_3_to_6)
{
    for (size_t i = 0; i < N(rows); i++) {
        const row_t *w = &rows[i];
        size_t n = strlen(w->temporary);
        bool temporary[8] = {0}, cooling[8] = {0}, next[8];
        flags(w->temporary, 't', temporary);
        flags(w->cooling, 'c', cooling);
        memset(next, 0x5A, sizeof(next));
        sl_step_facts_t f = {
            .cls = w->cls,
            .stale = w->stale,
            .has_answer = w->has_answer,
            .has_next = w->has_next,
            .pinned_here = w->pinned_here,
            .may_wait = w->may_wait,
            .has_context_fallback = w->has_context_fallback,
            .temporary = temporary,
            .cooling = cooling,
            .n = n,
            .pinned = w->pinned,
            .next_round = w->next_round,
            .hint_ms = w->hint_ms,
            .jitter_unit = 0.9,
            .params = &nominal,
            .now_ms = NOW,
            .deadline_ms = NOW + w->deadline_in_ms,
        };
        sl_step_t s = sl_next_step(&f, next);
        cr_assert_eq(s.kind, w->kind, "%s: kind %d", w->rule, s.kind);
        cr_assert_eq(s.reason, w->reason, "%s: reason %s", w->rule, sl_step_reason_slug(s.reason));
        if (w->kind == SL_STEP_RETRY_ROUND) {
            cr_assert_eq(s.pause_ms, w->pause_ms, "%s: pause %lld", w->rule, (long long)s.pause_ms);
            cr_assert_eq(s.by_hint, w->by_hint, "%s", w->rule);
            for (size_t k = 0; k < n; k++)
                cr_assert_eq(next[k], w->retried[k] == 'x', "%s: candidate %zu", w->rule, k);
        } else {
            for (size_t k = 0; k < n; k++)
                cr_assert_eq(((unsigned char *)next)[k], 0x5A, "%s: next_round untouched", w->rule);
        }
    }
}

Test(next_step, the_pause_has_its_jitter_within_twenty_percent)
{
    static const sl_retry_params_t jittered = {.time_scale = 1};
    bool temporary[1] = {true}, cooling[1] = {false}, next[1];
    for (double u = 0; u < 1; u += 0.125) {
        sl_step_facts_t f = {.cls = SL_FAILURE_TEMPORARY,
                             .has_answer = true,
                             .may_wait = true,
                             .temporary = temporary,
                             .cooling = cooling,
                             .n = 1,
                             .pinned = SL_RETRY_UNPINNED,
                             .next_round = 1,
                             .jitter_unit = u,
                             .params = &jittered,
                             .now_ms = NOW,
                             .deadline_ms = NOW + 120 * SEC};
        sl_step_t s = sl_next_step(&f, next);
        cr_assert_eq(s.kind, SL_STEP_RETRY_ROUND);
        cr_assert(s.pause_ms >= 1600 && s.pause_ms < 2400, "u %.3f: %lld ms", u, (long long)s.pause_ms);
    }
}

Test(next_step, a_stale_keep_alive_is_a_reused_connection_closed_quietly_within_a_second)
{
    static const struct {
        sl_connection_facts_t c;
        bool stale;
        const char *why;
    } cases[] = {
        {{.reused = true, .any_byte = false, .ms_after_write = 0}, true, "failed on write"},
        {{.reused = true, .any_byte = false, .ms_after_write = 999}, true, "closed within 1 s"},
        {{.reused = true, .any_byte = false, .ms_after_write = 1000}, false, "held it for a second"},
        {{.reused = true, .any_byte = false, .ms_after_write = 120000}, false, "held it for two minutes"},
        {{.reused = true, .any_byte = true, .ms_after_write = 5}, false, "a byte came back"},
        {{.reused = false, .any_byte = false, .ms_after_write = 0}, false, "opened for this hop"},
        {{.reused = true, .any_byte = false, .ms_after_write = -1}, false, "never written"},
    };
    for (size_t i = 0; i < N(cases); i++)
        cr_assert_eq(sl_connection_was_stale(&cases[i].c), cases[i].stale, "%s", cases[i].why);
}

Test(next_step, reasons_have_one_slug_each_both_ways)
{
    for (int i = 0; i < SL_STEP_REASON_COUNT; i++) {
        const char *slug = sl_step_reason_slug((sl_step_reason_t)i);
        cr_assert_neq(slug[0], '\0');
        sl_step_reason_t back;
        cr_assert(sl_step_reason_from_slug(slug, &back), "%s", slug);
        cr_assert_eq(back, (sl_step_reason_t)i);
    }
    sl_step_reason_t untouched = SL_STEP_REASON_DEADLINE;
    cr_assert_not(sl_step_reason_from_slug("nope", &untouched));
    cr_assert_eq(untouched, SL_STEP_REASON_DEADLINE);
    cr_assert_str_eq(sl_step_reason_slug(SL_STEP_REASON_COUNT), "");
}

/* §4: whether a hop gets a first-token hedge now; each row changes one fact of a hop that gets one. */
typedef enum { H_NONE, H_OFF, H_EARLY, H_LAST, H_SEALED, H_CONTENT, H_HEDGED, H_DEADLINE } hedge_change_t;

Test(next_step, the_first_token_hedge_starts_only_when_every_rule_allows_it)
{
    static const struct {
        const char *rule;
        hedge_change_t change;
        sl_hedge_verdict_t verdict;
    } rows[] = {
        {"no content after first_token_secs, a later candidate, time left: hedge", H_NONE, SL_HEDGE_START},
        {"first_token_secs 0 (the default) is off", H_OFF, SL_HEDGE_OFF},
        {"before first_token_secs: not yet", H_EARLY, SL_HEDGE_NOT_YET},
        {"the last candidate is never hedged", H_LAST, SL_HEDGE_LAST},
        {"sealed history pins the request: never hedged", H_SEALED, SL_HEDGE_SEALED},
        {"content came (a whole answer's 2xx head counts): no hedge", H_CONTENT, SL_HEDGE_HAS_CONTENT},
        {"one hedge per hop, at most one at a time", H_HEDGED, SL_HEDGE_ALREADY},
        {"no hedge starts after the request's deadline", H_DEADLINE, SL_HEDGE_PAST_DEADLINE},
    };
    for (size_t i = 0; i < N(rows); i++) {
        sl_hedge_facts_t f = {.first_token_secs = 2,
                              .has_later = true,
                              .sent_ms = NOW - 2 * SEC,
                              .now_ms = NOW,
                              .deadline_ms = NOW + 60 * SEC};
        switch (rows[i].change) {
        case H_OFF:
            f.first_token_secs = 0;
            break;
        case H_EARLY:
            f.sent_ms = NOW - 2 * SEC + 1;
            break;
        case H_LAST:
            f.has_later = false;
            break;
        case H_SEALED:
            f.sealed_history = true;
            break;
        case H_CONTENT:
            f.has_content = true;
            break;
        case H_HEDGED:
            f.hedged = true;
            break;
        case H_DEADLINE:
            f.deadline_ms = NOW;
            break;
        case H_NONE:
            break;
        }
        sl_hedge_verdict_t v = sl_hedge_decide(&f);
        cr_assert_eq(v, rows[i].verdict, "%s: %s", rows[i].rule, sl_hedge_verdict_name(v));
    }
}

/* §4: a hop of a hedge failed while the other is out. */
Test(next_step, a_failed_hop_of_a_hedge_lets_the_other_go_on_unless_the_client_erred)
{
    bool temporary[2] = {true, true}, cooling[2] = {false, false}, next[2];
    sl_step_facts_t f = {.cls = SL_FAILURE_TEMPORARY,
                         .has_answer = true,
                         .has_next = true,
                         .may_wait = true,
                         .temporary = temporary,
                         .cooling = cooling,
                         .n = 2,
                         .pinned = UNPINNED,
                         .next_round = 1,
                         .params = &nominal,
                         .now_ms = NOW,
                         .deadline_ms = NOW + 120 * SEC};
    sl_step_t s = sl_next_step_hedged(&f, true, next);
    cr_assert_eq(s.kind, SL_STEP_OTHER_HOP, "the hedge failed: the first hop goes on");
    cr_assert_eq(s.reason, SL_STEP_REASON_HEDGE_FAILED);
    s = sl_next_step_hedged(&f, false, next);
    cr_assert_eq(s.kind, SL_STEP_OTHER_HOP, "the first hop failed: its hedge goes on");
    cr_assert_eq(s.reason, SL_STEP_REASON_HEDGE_GOES_ON);
    f.cls = SL_FAILURE_RATE_LIMITED;
    cr_assert_eq(sl_next_step_hedged(&f, false, next).kind, SL_STEP_OTHER_HOP,
                 "a 429 pauses, the other goes on");
    f.stale = true;
    f.cls = SL_FAILURE_TEMPORARY;
    cr_assert_eq(sl_next_step_hedged(&f, false, next).kind, SL_STEP_OTHER_HOP,
                 "no fresh resend: the other goes on");
    f.stale = false;
    f.cls = SL_FAILURE_REQUEST_ERROR;
    s = sl_next_step_hedged(&f, true, next);
    cr_assert_eq(s.kind, SL_STEP_HAND_OVER, "the client's own error is handed back as ever");
    cr_assert_eq(s.reason, SL_STEP_REASON_REQUEST_ERROR);
}
