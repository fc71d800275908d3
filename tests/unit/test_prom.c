/* The Prometheus text exposition format (core/prom.h): what promtool and Prometheus read. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "core/prom.h"

static char *
text_of(sl_strbuf_t *b)
{
    return sl_strbuf_finish(b);
}

Test(prom, a_family_and_its_samples)
{
    sl_strbuf_t b = {0};
    sl_prom_family(&b, "sluice_requests_total", SL_PROM_COUNTER, "Requests answered.\nBy dialect \\ route.");
    sl_prom_label_t l[] = {{"dialect", "anthropic"}, {"route", "claude-*"}, {"status_class", "2xx"}};
    sl_prom_sample_u64(&b, "sluice_requests_total", l, 3, 42);
    sl_prom_sample_u64(&b, "sluice_control_subscribers", NULL, 0, 3);
    sl_prom_sample_f64(&b, "sluice_limit_used_ratio", l, 1, 0.25);
    char *t = text_of(&b);
    cr_assert_str_eq(
        t, "# HELP sluice_requests_total Requests answered.\\nBy dialect \\\\ route.\n"
           "# TYPE sluice_requests_total counter\n"
           "sluice_requests_total{dialect=\"anthropic\",route=\"claude-*\",status_class=\"2xx\"} 42\n"
           "sluice_control_subscribers 3\n"
           "sluice_limit_used_ratio{dialect=\"anthropic\"} 0.25\n");
    free(t);
}

Test(prom, label_values_are_escaped)
{
    sl_strbuf_t b = {0};
    sl_prom_label_t l[] = {{"route", "a\"b\\c\nd"}};
    sl_prom_sample_u64(&b, "x_total", l, 1, 1);
    sl_prom_sample_f64(&b, "y", NULL, 0, INFINITY);
    sl_prom_sample_f64(&b, "z", NULL, 0, NAN);
    char *t = text_of(&b);
    cr_assert_str_eq(t, "x_total{route=\"a\\\"b\\\\c\\nd\"} 1\ny +Inf\nz NaN\n");
    free(t);
}

Test(prom, histograms_are_cumulative_with_inf_sum_and_count)
{
    static const double bounds[] = {0.1, 0.5, 1};
    uint64_t counts[4] = {0};
    double sum = 0;
    const double seen[] = {0.0625, 0.125, 0.25, 2, 0.5}; /* exact in binary: the sum prints as written */
    for (size_t i = 0; i < 5; i++) {
        counts[sl_prom_bucket(bounds, 3, seen[i])]++;
        sum += seen[i];
    }
    sl_strbuf_t b = {0};
    sl_prom_label_t l[] = {{"gate", "slots"}};
    sl_prom_histogram(&b, "sluice_wait_seconds", l, 1, bounds, 3, counts, sum);
    char *t = text_of(&b);
    cr_assert_str_eq(t, "sluice_wait_seconds_bucket{gate=\"slots\",le=\"0.1\"} 1\n"
                        "sluice_wait_seconds_bucket{gate=\"slots\",le=\"0.5\"} 4\n"
                        "sluice_wait_seconds_bucket{gate=\"slots\",le=\"1\"} 4\n"
                        "sluice_wait_seconds_bucket{gate=\"slots\",le=\"+Inf\"} 5\n"
                        "sluice_wait_seconds_sum{gate=\"slots\"} 2.9375\n"
                        "sluice_wait_seconds_count{gate=\"slots\"} 5\n");
    free(t);
}

Test(prom, bucket_bounds_are_inclusive)
{
    static const double bounds[] = {0.00001, 0.001};
    cr_assert_eq(sl_prom_bucket(bounds, 2, 0.00001), 0);
    cr_assert_eq(sl_prom_bucket(bounds, 2, 0.0000100001), 1);
    cr_assert_eq(sl_prom_bucket(bounds, 2, 5), 2);
}

/* histogram_quantile's estimate: linear within the bucket the rank falls in. */
Test(prom, quantiles_interpolate_within_the_bucket_of_the_rank)
{
    const double bounds[] = {0.1, 0.5, 1};
    uint64_t none[4] = {0};
    cr_expect(sl_prom_quantile(bounds, 3, none, 0.5) < 0, "no observation: no quantile");
    /* 10 at or below 0.1, 10 in (0.1, 0.5]: the median is the first bucket's top, p75 halfway up the next. */
    uint64_t two[4] = {10, 10, 0, 0};
    cr_expect(fabs(sl_prom_quantile(bounds, 3, two, 0.5) - 0.1) < 1e-9);
    cr_expect(fabs(sl_prom_quantile(bounds, 3, two, 0.75) - 0.3) < 1e-9);
    /* Only the first bucket: from 0. */
    uint64_t first[4] = {4, 0, 0, 0};
    cr_expect(fabs(sl_prom_quantile(bounds, 3, first, 0.5) - 0.05) < 1e-9);
    /* Empty buckets below are skipped: everything in (0.5, 1]. */
    uint64_t third[4] = {0, 0, 2, 0};
    cr_expect(fabs(sl_prom_quantile(bounds, 3, third, 0.5) - 0.75) < 1e-9);
    /* In +Inf: the last bound. */
    uint64_t inf[4] = {1, 0, 0, 9};
    cr_expect(fabs(sl_prom_quantile(bounds, 3, inf, 0.95) - 1) < 1e-9);
}
