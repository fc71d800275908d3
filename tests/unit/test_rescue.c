/*
 * "Rescued" and "lost to trouble" (observability.md): one table per rule,
 * the first trouble a request met, and the verdict at its end.
 */
#include <criterion/criterion.h>

#include "core/rescue.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

Test(rescue, the_first_trouble_is_the_one_that_counts)
{
    sl_trouble_t t = SL_TROUBLE_NONE;
    sl_trouble_note(&t, sl_trouble_of_step(SL_STEP_REASON_RATE_LIMITED));
    sl_trouble_note(&t, sl_trouble_of_wait(SL_SKIP_THROTTLED));
    sl_trouble_note(&t, sl_trouble_of_step(SL_STEP_REASON_RETRY_ROUND));
    cr_assert_eq(t, SL_TROUBLE_FAILED_OVER);
    t = SL_TROUBLE_NONE;
    sl_trouble_note(&t, sl_trouble_of_step(SL_STEP_REASON_STALE_CONNECTION));
    cr_assert_eq(t, SL_TROUBLE_NONE, "a stale keep-alive resend is no trouble");
    sl_trouble_note(&t, sl_trouble_of_wait(SL_SKIP_BUSY));
    cr_assert_eq(t, SL_TROUBLE_QUEUED_SLOT);
}

Test(rescue, what_each_event_is)
{
    static const struct {
        sl_step_reason_t reason;
        sl_trouble_t want;
    } steps[] = {
        {SL_STEP_REASON_STALE_CONNECTION, SL_TROUBLE_NONE},
        {SL_STEP_REASON_RATE_LIMITED, SL_TROUBLE_FAILED_OVER},
        {SL_STEP_REASON_NEXT_CANDIDATE, SL_TROUBLE_FAILED_OVER},
        {SL_STEP_REASON_PINNED_RETRY, SL_TROUBLE_RETRIED},
        {SL_STEP_REASON_RETRY_ROUND, SL_TROUBLE_RETRIED},
        {SL_STEP_REASON_REQUEST_ERROR, SL_TROUBLE_NONE},
        {SL_STEP_REASON_CONTEXT_FALLBACK, SL_TROUBLE_NONE},
        {SL_STEP_REASON_DEADLINE, SL_TROUBLE_FAILED_OVER},
    };
    for (size_t i = 0; i < N(steps); i++)
        cr_expect_eq(sl_trouble_of_step(steps[i].reason), steps[i].want, "%s",
                     sl_step_reason_slug(steps[i].reason));
    static const struct {
        sl_skip_t skip;
        sl_trouble_t skipped, waited;
    } gates[] = {
        {SL_SKIP_COOLING, SL_TROUBLE_FAILED_OVER, SL_TROUBLE_NONE},
        {SL_SKIP_THROTTLED, SL_TROUBLE_FAILED_OVER, SL_TROUBLE_QUEUED_429},
        {SL_SKIP_BUSY, SL_TROUBLE_NONE, SL_TROUBLE_QUEUED_SLOT},
        {SL_SKIP_WINDOW_FULL, SL_TROUBLE_NONE, SL_TROUBLE_QUEUED_WINDOW},
        {SL_SKIP_KEY_WINDOW, SL_TROUBLE_NONE, SL_TROUBLE_QUEUED_WINDOW},
        {SL_SKIP_DISABLED, SL_TROUBLE_NONE, SL_TROUBLE_NONE},
        {SL_SKIP_NOT_OFFERED, SL_TROUBLE_NONE, SL_TROUBLE_NONE},
        {SL_SKIP_PINNED_ELSEWHERE, SL_TROUBLE_NONE, SL_TROUBLE_NONE},
    };
    for (size_t i = 0; i < N(gates); i++) {
        cr_expect_eq(sl_trouble_of_skip(gates[i].skip), gates[i].skipped, "skip %s",
                     sl_skip_slug(gates[i].skip));
        cr_expect_eq(sl_trouble_of_wait(gates[i].skip), gates[i].waited, "wait %s",
                     sl_skip_slug(gates[i].skip));
    }
}

#define RESCUED SL_RESCUE_RESCUED
#define LOST    SL_RESCUE_LOST
#define NEITHER SL_RESCUE_NEITHER
#define NO_FAIL false, SL_FAILURE_OTHER

Test(rescue, the_verdict_at_the_end)
{
    static const struct {
        const char *rule;
        sl_rescue_facts_t facts;
        sl_rescue_verdict_t want;
    } rows[] = {
        {"no trouble, served: neither", {SL_TROUBLE_NONE, SL_ROW_SERVED, 200, false, NO_FAIL}, NEITHER},
        {"no trouble, a 503 handed over: neither (nothing was absorbed or lost to it)",
         {SL_TROUBLE_NONE, SL_ROW_FAILED, 503, false, true, SL_FAILURE_TEMPORARY},
         NEITHER},
        {"retried, then 200", {SL_TROUBLE_RETRIED, SL_ROW_SERVED, 200, false, NO_FAIL}, RESCUED},
        {"failed over, then 200", {SL_TROUBLE_FAILED_OVER, SL_ROW_SERVED, 200, false, NO_FAIL}, RESCUED},
        {"waited behind a 429, then 200",
         {SL_TROUBLE_QUEUED_429, SL_ROW_SERVED, 200, false, NO_FAIL},
         RESCUED},
        {"waited for a window, then 200",
         {SL_TROUBLE_QUEUED_WINDOW, SL_ROW_SERVED, 200, false, NO_FAIL},
         RESCUED},
        {"a 2xx stream that broke later is not a rescue",
         {SL_TROUBLE_RETRIED, SL_ROW_FAILED, 200, true, true, SL_FAILURE_OTHER},
         NEITHER},
        {"retried, and the last 503 handed over: lost",
         {SL_TROUBLE_RETRIED, SL_ROW_FAILED, 503, false, true, SL_FAILURE_TEMPORARY},
         LOST},
        {"a temporary error inside a held stream: lost",
         {SL_TROUBLE_RETRIED, SL_ROW_FAILED, 200, true, true, SL_FAILURE_TEMPORARY},
         LOST},
        {"failed over to a 429 handed over: lost",
         {SL_TROUBLE_FAILED_OVER, SL_ROW_FAILED, 429, false, true, SL_FAILURE_RATE_LIMITED},
         LOST},
        {"sluice's final 429 after waiting: lost",
         {SL_TROUBLE_QUEUED_429, SL_ROW_FAILED, 429, false, NO_FAIL},
         LOST},
        {"sluice's 503 (waiting overloaded): lost",
         {SL_TROUBLE_QUEUED_SLOT, SL_ROW_FAILED, 503, false, NO_FAIL},
         LOST},
        {"failed over, then the client's own request error: neither",
         {SL_TROUBLE_FAILED_OVER, SL_ROW_FAILED, 400, false, true, SL_FAILURE_REQUEST_ERROR},
         NEITHER},
        {"failed over, then rejected credentials: neither",
         {SL_TROUBLE_FAILED_OVER, SL_ROW_FAILED, 401, false, true, SL_FAILURE_AUTH},
         NEITHER},
        {"retried, then the client left: neither",
         {SL_TROUBLE_RETRIED, SL_ROW_CANCELLED, 200, false, true, SL_FAILURE_TEMPORARY},
         NEITHER},
    };
    for (size_t i = 0; i < N(rows); i++)
        cr_expect_eq(sl_rescue_verdict(&rows[i].facts), rows[i].want, "%s", rows[i].rule);
}

Test(rescue, cause_slugs_are_the_metric_labels)
{
    static const char *const want[] = {"retried", "failed_over", "queued_429", "queued_window",
                                       "queued_slot"};
    cr_assert_eq(N(want), SL_TROUBLE_COUNT);
    for (int i = 0; i < SL_TROUBLE_COUNT; i++)
        cr_expect_str_eq(sl_trouble_slug((sl_trouble_t)i), want[i]);
    cr_expect_str_eq(sl_trouble_slug(SL_TROUBLE_NONE), "");
}
