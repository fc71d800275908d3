/*
 * The data plane's metrics (metrics.h): counters per worker summed at a
 * scrape, label values bounded, every family of observability.md listed.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

static char *
scrape(sl_metrics_t *m, const sl_metrics_scrape_t *s)
{
    sl_strbuf_t b = {0};
    sl_metrics_render(m, s, &b);
    return sl_strbuf_finish(&b);
}

static size_t
lines_starting(const char *text, const char *prefix)
{
    size_t n = 0, len = strlen(prefix);
    for (const char *p = text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        n += strncmp(p, prefix, len) == 0;
    return n;
}

Test(metrics, every_family_of_observability_md_has_help_and_type)
{
    sl_metrics_t *m = sl_metrics_new();
    char *t = scrape(m, &(sl_metrics_scrape_t){.cluster = true});
    static const char *const families[] = {
        "sluice_requests_total counter",
        "sluice_requests_rescued_total counter",
        "sluice_requests_lost_to_trouble_total counter",
        "sluice_upstream_attempts_total counter",
        "sluice_hedges_total counter",
        "sluice_retry_rounds_total counter",
        "sluice_waiting_requests gauge",
        "sluice_wait_seconds histogram",
        "sluice_upstream_paused gauge",
        "sluice_upstream_health gauge",
        "sluice_limit_used_ratio gauge",
        "sluice_time_to_first_token_seconds histogram",
        "sluice_request_duration_seconds histogram",
        "sluice_overhead_seconds histogram",
        "sluice_tokens_total counter",
        "sluice_cost_usd_total counter",
        "sluice_in_flight_requests gauge",
        "sluice_control_subscribers gauge",
        "sluice_events_dropped_total counter",
        "sluice_db_rows_dropped_total counter",
        "sluice_cluster_state gauge",
    };
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        char type[128], help[128];
        snprintf(type, sizeof type, "# TYPE %s\n", families[i]);
        snprintf(help, sizeof help, "# HELP %.*s ", (int)strcspn(families[i], " "), families[i]);
        cr_expect_not_null(strstr(t, type), "%s", type);
        cr_expect_not_null(strstr(t, help), "%s", help);
    }
    free(t);
    sl_metrics_free(m);
}

Test(metrics, workers_are_summed_at_the_scrape)
{
    sl_metrics_t *m = sl_metrics_new();
    sl_metrics_worker_t *a = sl_metrics_add_worker(m), *b = sl_metrics_add_worker(m);
    uint16_t route = sl_metrics_route_slot(m, "gpt-*");
    uint16_t up = sl_metrics_provider_slot(m, "primary");
    sl_metrics_request_t served = {.dialect = SL_DIALECT_OPENAI_CHAT,
                                   .route = route,
                                   .status = 200,
                                   .verdict = SL_RESCUE_RESCUED,
                                   .trouble = SL_TROUBLE_RETRIED,
                                   .duration_us = 300000};
    sl_metrics_request(a, &served);
    sl_metrics_request(b, &served);
    sl_metrics_request(b, &(sl_metrics_request_t){.dialect = SL_DIALECT_OPENAI_CHAT,
                                                  .route = route,
                                                  .status = 429,
                                                  .verdict = SL_RESCUE_LOST,
                                                  .trouble = SL_TROUBLE_QUEUED_429});
    sl_metrics_attempt(a, up, SL_ATTEMPT_TEMPORARY);
    sl_metrics_attempt(b, up, SL_ATTEMPT_OK);
    sl_metrics_attempt(b, up, SL_ATTEMPT_OK);
    sl_metrics_hedge(a, up, true);
    sl_metrics_hedge(b, up, true);
    sl_metrics_hedge(b, up, false);
    char *t = scrape(m, &(sl_metrics_scrape_t){0});
    cr_expect_not_null(
        strstr(t, "sluice_requests_total{dialect=\"openai-chat\",route=\"gpt-*\",status_class=\"2xx\"} 2\n"),
        "%s", t);
    cr_expect_not_null(
        strstr(t, "sluice_requests_total{dialect=\"openai-chat\",route=\"gpt-*\",status_class=\"429\"} 1\n"));
    cr_expect_not_null(strstr(t, "sluice_requests_rescued_total{route=\"gpt-*\",cause=\"retried\"} 2\n"));
    cr_expect_not_null(strstr(t, "sluice_requests_rescued_total{route=\"gpt-*\",cause=\"queued_slot\"} 0\n"),
                       "a route's causes show zeros once it has answered");
    cr_expect_not_null(
        strstr(t, "sluice_requests_lost_to_trouble_total{route=\"gpt-*\",cause=\"queued_429\"} 1\n"));
    cr_expect_not_null(strstr(t, "sluice_upstream_attempts_total{provider=\"primary\",outcome=\"ok\"} 2\n"));
    cr_expect_not_null(
        strstr(t, "sluice_upstream_attempts_total{provider=\"primary\",outcome=\"temporary\"} 1\n"));
    cr_expect_not_null(strstr(t, "sluice_hedges_total{provider=\"primary\",result=\"won\"} 2\n"), "%s", t);
    cr_expect_not_null(strstr(t, "sluice_hedges_total{provider=\"primary\",result=\"lost\"} 1\n"));
    cr_expect_not_null(
        strstr(t, "sluice_request_duration_seconds_bucket{dialect=\"openai-chat\",route=\"gpt-*\","
                  "le=\"0.5\"} 3\n"),
        "the two served and the 429 at 0 s");
    free(t);
    sl_metrics_free(m);
}

Test(metrics, names_past_the_cap_count_as_other)
{
    sl_metrics_t *m = sl_metrics_new();
    char name[32];
    for (int i = 0; i < SL_METRICS_NAMES; i++) {
        snprintf(name, sizeof name, "p%d", i);
        cr_assert_eq(sl_metrics_provider_slot(m, name), i);
    }
    cr_assert_eq(sl_metrics_provider_slot(m, "one-too-many"), SL_METRICS_NAMES);
    cr_assert_eq(sl_metrics_provider_slot(m, "p7"), 7, "a name keeps its slot");
    sl_metrics_free(m);
}

/* observability.md: the first 64 distinct upstream models keep their own series, later ones count as other.
 */
Test(metrics, a_thousand_models_keep_the_token_series_bounded)
{
    sl_metrics_t *m = sl_metrics_new();
    sl_metrics_worker_t *w = sl_metrics_add_worker(m);
    uint16_t up = sl_metrics_provider_slot(m, "openai");
    char model[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(model, sizeof model, "gpt-x-%d", i);
        sl_metrics_usage(w, sl_metrics_model_slot(m, up, model), (const uint64_t[4]){10, 1, 0, 0}, 0);
    }
    char *t = scrape(m, &(sl_metrics_scrape_t){0});
    cr_expect_eq(lines_starting(t, "sluice_tokens_total{"), 2 * 65, "64 models and other, input and output");
    cr_expect_not_null(
        strstr(t, "sluice_tokens_total{provider=\"openai\",model=\"other\",type=\"input\"} 9360\n"));
    free(t);
    sl_metrics_free(m);
}

Test(metrics, the_spool_gauges_show_with_a_postgresql_request_db_only)
{
    sl_metrics_t *m = sl_metrics_new();
    char *t =
        scrape(m, &(sl_metrics_scrape_t){.db_spool = true, .db_rows_spooled = 20, .db_spool_bytes = 4210});
    cr_expect_not_null(strstr(t, "# TYPE sluice_db_rows_spooled gauge\n"), "%s", t);
    cr_expect_not_null(strstr(t, "\nsluice_db_rows_spooled 20\n"), "%s", t);
    cr_expect_not_null(strstr(t, "# TYPE sluice_db_spool_bytes gauge\n"), "%s", t);
    cr_expect_not_null(strstr(t, "\nsluice_db_spool_bytes 4210\n"), "%s", t);
    free(t);
    /* SQLite has no spool: no series that would always read 0. */
    t = scrape(m, &(sl_metrics_scrape_t){0});
    cr_expect_eq(lines_starting(t, "sluice_db_rows_spooled"), 0, "%s", t);
    cr_expect_eq(lines_starting(t, "# TYPE sluice_db_spool_bytes"), 0, "%s", t);
    free(t);
    sl_metrics_free(m);
}

Test(metrics, labels_and_gates)
{
    cr_expect_eq(sl_status_class(200, false), SL_STATUS_CLASS_2XX);
    cr_expect_eq(sl_status_class(429, false), SL_STATUS_CLASS_429);
    cr_expect_eq(sl_status_class(404, false), SL_STATUS_CLASS_4XX);
    cr_expect_eq(sl_status_class(502, false), SL_STATUS_CLASS_5XX);
    cr_expect_eq(sl_status_class(200, true), SL_STATUS_CLASS_ABORTED);
    cr_expect_eq(sl_attempt_label_of_failure(SL_FAILURE_TEMPORARY, SL_FAILURE_STATUS, false),
                 SL_ATTEMPT_TEMPORARY);
    cr_expect_eq(sl_attempt_label_of_failure(SL_FAILURE_TEMPORARY, SL_FAILURE_CONNECT_FAILED, false),
                 SL_ATTEMPT_CONNECT);
    cr_expect_eq(sl_attempt_label_of_failure(SL_FAILURE_TEMPORARY, SL_FAILURE_BROKEN_BEFORE_HEAD, true),
                 SL_ATTEMPT_STALE_CONNECTION);
    cr_expect_eq(sl_attempt_label_of_failure(SL_FAILURE_OTHER, SL_FAILURE_IDLE_TIMEOUT, false),
                 SL_ATTEMPT_TIMEOUT);
    cr_expect_eq(sl_attempt_label_of_failure(SL_FAILURE_RATE_LIMITED, SL_FAILURE_STATUS, false),
                 SL_ATTEMPT_RATE_LIMITED);
    cr_expect_eq(sl_attempt_label_of_failure(SL_FAILURE_CONTEXT_LENGTH, SL_FAILURE_STATUS, false),
                 SL_ATTEMPT_REQUEST_ERROR);
    cr_expect_eq(sl_attempt_label_of_failure(SL_FAILURE_NO_BALANCE, SL_FAILURE_STATUS, false),
                 SL_ATTEMPT_QUOTA);
    cr_expect_eq(sl_attempt_label_of_failure(SL_FAILURE_MISSING_MODEL, SL_FAILURE_STATUS, false),
                 SL_ATTEMPT_NOT_FOUND);
    cr_expect_eq(sl_gate_of_skip(SL_SKIP_BUSY), SL_GATE_SLOTS);
    cr_expect_eq(sl_gate_of_skip(SL_SKIP_COOLING), SL_GATE_COUNT);
    cr_expect_str_eq(sl_attempt_label_slug(SL_ATTEMPT_HEDGE_LOST), "hedge_lost");
}

/* What the stats topic reads (stats.h): per provider slot its hops by kind, TTFT buckets and tokens. */
Test(metrics, the_stats_counts_sum_the_workers_per_provider)
{
    sl_metrics_t *m = sl_metrics_new();
    sl_metrics_worker_t *a = sl_metrics_add_worker(m), *b = sl_metrics_add_worker(m);
    uint16_t one = sl_metrics_provider_slot(m, "one"), two = sl_metrics_provider_slot(m, "two");
    uint16_t route = sl_metrics_route_slot(m, "claude-*");
    sl_metrics_attempt(a, one, SL_ATTEMPT_OK);
    sl_metrics_attempt(b, one, SL_ATTEMPT_TEMPORARY);
    sl_metrics_attempt(b, one, SL_ATTEMPT_TIMEOUT);
    sl_metrics_attempt(a, one, SL_ATTEMPT_RATE_LIMITED);
    sl_metrics_attempt(a, two, SL_ATTEMPT_REQUEST_ERROR);
    sl_metrics_ttft(a, one, 300000); /* 0.3 s: bucket (0.25, 0.5] */
    sl_metrics_ttft(b, one, 300000);
    sl_metrics_usage(a, sl_metrics_model_slot(m, one, "m1"), (const uint64_t[4]){10, 3, 0, 0}, 0);
    sl_metrics_usage(b, sl_metrics_model_slot(m, one, "m2"), (const uint64_t[4]){5, 1, 0, 0}, 0);
    sl_metrics_usage(b, sl_metrics_model_slot(m, two, "m1"), (const uint64_t[4]){7, 0, 0, 0}, 0);
    sl_metrics_request(a, &(sl_metrics_request_t){.route = route,
                                                  .status = 200,
                                                  .verdict = SL_RESCUE_RESCUED,
                                                  .trouble = SL_TROUBLE_FAILED_OVER});
    sl_metrics_request(
        b, &(sl_metrics_request_t){
               .route = route, .status = 503, .verdict = SL_RESCUE_LOST, .trouble = SL_TROUBLE_RETRIED});
    sl_metrics_counts_t *c = malloc(sizeof(*c));
    sl_metrics_counts(m, c);
    cr_assert_eq(c->n_providers, 3u, "two named, then other");
    cr_expect_str_eq(c->providers[0].name, "one");
    cr_expect_str_eq(c->providers[2].name, "other");
    cr_expect_eq(c->providers[0].requests, 4u);
    cr_expect_eq(c->providers[0].temporary, 2u, "a timeout is a temporary failure");
    cr_expect_eq(c->providers[0].rate_limited, 1u);
    cr_expect_eq(c->providers[0].ttft[3], 2u);
    cr_expect_eq(c->providers[0].input_tokens, 15u, "both models of the provider");
    cr_expect_eq(c->providers[0].output_tokens, 4u);
    cr_expect_eq(c->providers[1].requests, 1u);
    cr_expect_eq(c->providers[1].temporary, 0u);
    cr_expect_eq(c->providers[1].input_tokens, 7u);
    cr_expect_eq(c->rescued[SL_TROUBLE_FAILED_OVER], 1u);
    cr_expect_eq(c->lost[SL_TROUBLE_RETRIED], 1u);
    free(c);
    sl_metrics_free(m);
}
