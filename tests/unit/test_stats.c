/* The stats topic's intervals (gateway/stats.h): differences of the metrics' counters, pauses, the kept hour.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "stats.h"

#define T0 1700000003000LL /* 3 s after a boundary */

static sl_metrics_provider_counts_t *
provider(sl_metrics_counts_t *c, size_t k, const char *name)
{
    snprintf(c->providers[k].name, sizeof(c->providers[k].name), "%s", name);
    return &c->providers[k];
}

/* Two named providers and "other", all zero. */
static void
counts_init(sl_metrics_counts_t *c)
{
    memset(c, 0, sizeof(*c));
    provider(c, 0, "a");
    provider(c, 1, "b");
    provider(c, 2, "other");
    c->n_providers = 3;
}

static const sl_proto_provider_stats_t *
find(const sl_proto_stats_interval_t *iv, const char *name)
{
    for (size_t i = 0; i < iv->providers_len; i++)
        if (strcmp(iv->providers[i].name, name) == 0)
            return &iv->providers[i];
    return NULL;
}

static uint64_t
count_of(const sl_proto_trouble_count_t *tc, size_t n, sl_proto_trouble_cause_t cause)
{
    for (size_t i = 0; i < n; i++)
        if (tc[i].cause == cause)
            return tc[i].count;
    return 0;
}

Test(stats, intervals_end_on_ten_second_boundaries_and_the_first_counts_from_start)
{
    sl_stats_t *st = sl_stats_new(T0);
    cr_expect_eq(sl_stats_due_ms(st), T0 - 3000 + SL_STATS_INTERVAL_MS);
    sl_metrics_counts_t c;
    counts_init(&c);
    cr_expect_null(sl_stats_close(st, &c, T0 + 6999), "not before its end");
    const sl_proto_stats_interval_t *iv = sl_stats_close(st, &c, T0 + 7010);
    cr_assert_not_null(iv);
    cr_expect_eq(iv->start_ms, (uint64_t)T0);
    cr_expect_eq(iv->ms, 7000u);
    cr_expect_eq(sl_stats_due_ms(st), T0 + 17000);
    iv = sl_stats_close(st, &c, T0 + 17000);
    cr_assert_not_null(iv);
    cr_expect_eq(iv->start_ms, (uint64_t)(T0 + 7000));
    cr_expect_eq(iv->ms, 10000u);
    /* Closed 25 s late: one interval up to the last boundary before now. */
    iv = sl_stats_close(st, &c, T0 + 17000 + 25000);
    cr_assert_not_null(iv);
    cr_expect_eq(iv->ms, 20000u);
    cr_expect_eq(sl_stats_due_ms(st), T0 + 47000);
    sl_stats_free(st);
}

Test(stats, an_interval_holds_the_difference_of_the_counters_since_the_last_close)
{
    sl_stats_t *st = sl_stats_new(T0);
    sl_metrics_counts_t c;
    counts_init(&c);
    c.providers[0].requests = 5;
    c.providers[0].temporary = 2;
    c.providers[0].rate_limited = 1;
    c.providers[0].input_tokens = 100;
    c.providers[0].output_tokens = 40;
    c.rescued[SL_TROUBLE_RETRIED] = 2;
    c.lost[SL_TROUBLE_QUEUED_429] = 1;
    const sl_proto_stats_interval_t *iv = sl_stats_close(st, &c, T0 + 7000);
    cr_assert_not_null(iv);
    const sl_proto_provider_stats_t *a = find(iv, "a");
    cr_assert_not_null(a);
    cr_expect_eq(a->requests, 5u);
    cr_expect_eq(a->temporary, 2u);
    cr_expect_eq(a->rate_limited, 1u);
    cr_expect_eq(a->input_tokens, 100u);
    cr_expect_eq(a->output_tokens, 40u);
    cr_expect_not_null(find(iv, "b"), "a named provider is listed with zeros");
    cr_expect_null(find(iv, "other"), "\"other\" only when something counted under it");
    cr_expect_eq(iv->rescued_len, 1u, "only non-zero causes");
    cr_expect_eq(count_of(iv->rescued, iv->rescued_len, SL_PROTO_TROUBLE_CAUSE_RETRIED), 2u);
    cr_expect_eq(count_of(iv->lost, iv->lost_len, SL_PROTO_TROUBLE_CAUSE_QUEUED_429), 1u);

    c.providers[0].requests = 8;
    c.providers[1].requests = 1;
    c.rescued[SL_TROUBLE_RETRIED] = 3;
    c.rescued[SL_TROUBLE_FAILED_OVER] = 4;
    iv = sl_stats_close(st, &c, T0 + 17000);
    cr_expect_eq(find(iv, "a")->requests, 3u);
    cr_expect_eq(find(iv, "a")->temporary, 0u);
    cr_expect_eq(find(iv, "b")->requests, 1u);
    cr_expect_eq(count_of(iv->rescued, iv->rescued_len, SL_PROTO_TROUBLE_CAUSE_RETRIED), 1u);
    cr_expect_eq(count_of(iv->rescued, iv->rescued_len, SL_PROTO_TROUBLE_CAUSE_FAILED_OVER), 4u);
    cr_expect_eq(iv->lost_len, 0u);

    /* Since start: the counts at the last close. */
    sl_proto_stats_totals_t t;
    sl_stats_totals(st, &t);
    cr_expect_eq(t.since_ms, (uint64_t)T0);
    cr_expect_eq(count_of(t.rescued, t.rescued_len, SL_PROTO_TROUBLE_CAUSE_RETRIED), 3u);
    cr_expect_eq(count_of(t.rescued, t.rescued_len, SL_PROTO_TROUBLE_CAUSE_FAILED_OVER), 4u);
    cr_expect_eq(count_of(t.lost, t.lost_len, SL_PROTO_TROUBLE_CAUSE_QUEUED_429), 1u);
    sl_proto_stats_totals_free(&t);
    sl_stats_free(st);
}

Test(stats, a_new_provider_slot_counts_from_zero_and_other_keeps_its_own_baseline)
{
    sl_stats_t *st = sl_stats_new(T0);
    sl_metrics_counts_t c;
    counts_init(&c);
    c.providers[2].requests = 7; /* "other" */
    sl_stats_close(st, &c, T0 + 7000);
    /* A reload named a third provider: "other" moves one slot on. */
    provider(&c, 2, "c")->requests = 2;
    provider(&c, 3, "other")->requests = 9;
    c.n_providers = 4;
    const sl_proto_stats_interval_t *iv = sl_stats_close(st, &c, T0 + 17000);
    cr_expect_eq(find(iv, "c")->requests, 2u);
    cr_expect_eq(find(iv, "other")->requests, 2u);
    sl_stats_free(st);
}

Test(stats, first_token_quantiles_come_from_the_intervals_buckets)
{
    sl_stats_t *st = sl_stats_new(T0);
    sl_metrics_counts_t c;
    counts_init(&c);
    /* Bounds 0.05, 0.1, 0.25, 0.5, 1, …: 10 first tokens in (0.25, 0.5] s, 10 in (0.5, 1] s. */
    c.providers[0].ttft[3] = 10;
    c.providers[0].ttft[4] = 10;
    const sl_proto_stats_interval_t *iv = sl_stats_close(st, &c, T0 + 7000);
    const sl_proto_provider_stats_t *a = find(iv, "a");
    cr_expect_eq(a->first_tokens, 20u);
    cr_expect(a->has_ttft_p50_ms && a->has_ttft_p95_ms);
    cr_expect_eq(a->ttft_p50_ms, 500u);
    cr_expect_eq(a->ttft_p95_ms, 950u);
    cr_expect(!find(iv, "b")->has_ttft_p50_ms, "no first token: no quantile");
    /* The next interval sees only its own: 1 more, in (0.05, 0.1]. */
    c.providers[0].ttft[1] = 1;
    iv = sl_stats_close(st, &c, T0 + 17000);
    a = find(iv, "a");
    cr_expect_eq(a->first_tokens, 1u);
    cr_expect_eq(a->ttft_p50_ms, 75u);
    sl_stats_free(st);
}

Test(stats, paused_time_is_cut_at_interval_ends_and_counts_only_pauses)
{
    sl_stats_t *st = sl_stats_new(T0); /* the first interval: T0 .. T0 + 7000 */
    sl_metrics_counts_t c;
    counts_init(&c);
    sl_stats_note_throttle(st, "a", true, T0 + 1000);
    sl_stats_note_throttle(st, "a", true, T0 + 2000); /* still paused (probing): no restart */
    sl_stats_note_throttle(st, "a", false, T0 + 3000);
    sl_stats_note_throttle(st, "a", true, T0 + 5000);  /* paused across the boundary */
    sl_stats_note_throttle(st, "b", false, T0 + 4000); /* a recovery without a pause: nothing */
    const sl_proto_stats_interval_t *iv = sl_stats_close(st, &c, T0 + 7000);
    cr_expect_eq(find(iv, "a")->paused_ms, 4000u);
    cr_expect_eq(find(iv, "b")->paused_ms, 0u);
    sl_stats_note_throttle(st, "a", false, T0 + 9500);
    iv = sl_stats_close(st, &c, T0 + 17000);
    cr_expect_eq(find(iv, "a")->paused_ms, 2500u);
    /* A pause told late (its time before the interval) counts from the interval's start, never more than it.
     */
    sl_stats_note_throttle(st, "b", true, T0 + 12000);
    iv = sl_stats_close(st, &c, T0 + 27000);
    cr_expect_eq(find(iv, "b")->paused_ms, 10000u);
    sl_stats_free(st);
}

Test(stats, the_last_hour_is_kept_oldest_first)
{
    sl_stats_t *st = sl_stats_new(T0);
    sl_metrics_counts_t c;
    counts_init(&c);
    sl_proto_stats_interval_t *h;
    cr_expect_eq(sl_stats_history(st, &h), 0u);
    cr_expect_null(h);
    int64_t now = T0 + 7000;
    for (int i = 0; i < SL_STATS_KEPT + 5; i++, now += SL_STATS_INTERVAL_MS) {
        c.providers[0].requests = (uint64_t)i;
        cr_assert_not_null(sl_stats_close(st, &c, now));
    }
    size_t n = sl_stats_history(st, &h);
    cr_assert_eq(n, (size_t)SL_STATS_KEPT);
    for (size_t i = 1; i < n; i++)
        cr_expect_eq(h[i].start_ms, h[i - 1].start_ms + SL_STATS_INTERVAL_MS);
    cr_expect_eq(h[n - 1].start_ms + h[n - 1].ms, (uint64_t)(now - SL_STATS_INTERVAL_MS));
    free(h);
    sl_stats_free(st);
}
