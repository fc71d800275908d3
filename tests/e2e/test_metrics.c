/*
 * GET /metrics on the control listener (observability.md), end to end:
 * the key, the families, requests rescued after a failover and after a
 * wait behind a 429, counters that stay exact while the request DB's
 * writer is blocked, label sets bounded against 1 000 model names,
 * `promtool check metrics` on the text, and a real Prometheus scraping it
 * with the key.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_upstream.h"
#include "harness.h"

static proc_t proc, prom;
static fake_upstream_t *primary, *fallback, *solo;
static http_response_t res;
static uint16_t port, control_port;
static char prom_dir[64] = "";

static void
setup(void)
{
    unsetenv("SLUICE_TEST_TIME_SCALE");
    primary = fake_start(NULL, NULL, false);
    fallback = fake_start(NULL, NULL, false);
    solo = fake_start(NULL, NULL, false);
}

static void
teardown(void)
{
    proc_kill(&proc);
    proc_kill(&prom);
    fake_stop(primary);
    fake_stop(fallback);
    fake_stop(solo);
    http_response_free(&res);
    remove_temp_files();
    if (prom_dir[0] != '\0') {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", prom_dir);
        cr_assert_eq(system(cmd), 0);
    }
}

TestSuite(metrics, .init = setup, .fini = teardown, .timeout = 90);

#define GATEWAY_KEY  "gw-test-key-0001"
#define CONTROL_KEY  "ctl-test-key-0000000000000001"
#define CHAT_HEADERS "authorization: Bearer " GATEWAY_KEY "\r\n"
#define JSON_HEADER  "content-type: application/json\r\n"

/* Routes: "gpt-a*" fails over [primary, fallback]; "gpt-q*" has solo alone (its 429s queue). */
static void
start(const char *control_extra)
{
    char yaml[4096];
    snprintf(yaml, sizeof(yaml),
             "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0, key: \"" CONTROL_KEY "\"%s}}\n"
             "clients: [{name: tester, key: \"" GATEWAY_KEY "\"}]\n"
             "providers:\n"
             "  - {name: primary, protocol: openai-chat, base_url: \"http://127.0.0.1:%u\", key: k1}\n"
             "  - {name: fallback, protocol: openai-chat, base_url: \"http://127.0.0.1:%u\", key: k2}\n"
             "  - {name: solo, protocol: openai-chat, base_url: \"http://127.0.0.1:%u\", key: k3}\n"
             "routes:\n"
             "  - {match: \"gpt-a*\", failover: [primary, fallback]}\n"
             "  - {match: \"gpt-q*\", failover: [solo]}\n"
             "  - {match: \"*\", failover: [primary]}\n"
             "store: {path: %s}\n",
             control_extra != NULL ? control_extra : "", fake_port(primary), fake_port(fallback),
             fake_port(solo), write_temp_file(1, ""));
    port = sluice_start(&proc, write_temp_file(0, yaml), "info", NULL);
    cr_assert_neq(port, 0, "sluice did not start:\n%s", proc.log);
    const char *at = strstr(proc.log, "control endpoint on ws://127.0.0.1:");
    cr_assert_not_null(at, "%s", proc.log);
    control_port = (uint16_t)atoi(at + strlen("control endpoint on ws://127.0.0.1:"));
    cr_assert_neq(control_port, 0);
}

static fake_reply_t
chat_ok(void)
{
    return (fake_reply_t){.status = 200,
                          .headers = "content-type: text/event-stream\r\n",
                          .body = fixture("chat-ok.sse", NULL),
                          .chunked = true};
}

static void
post_chat(const char *model)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi %s\"}]}",
             model, model);
    cr_assert(http_request_h(port, "POST", "/v1/chat/completions", CHAT_HEADERS, body, &res));
}

/* GET /metrics with the key (or without, key NULL); the text stays in res. */
static void
scrape(const char *key)
{
    char headers[256] = "";
    if (key != NULL)
        snprintf(headers, sizeof headers, "authorization: Bearer %s\r\n", key);
    cr_assert(http_request_h(control_port, "GET", "/metrics", headers, NULL, &res));
}

/* The value of the scraped sample line that starts with series (name and labels as written), or -1. */
static long long
sample(const char *series)
{
    return prom_sample(res.body, series);
}

static size_t
count_lines(const char *prefix)
{
    size_t n = 0, len = strlen(prefix);
    for (const char *p = res.body; p != NULL && *p; p = strchr(p, '\n'), p = p != NULL ? p + 1 : NULL)
        n += strncmp(p, prefix, len) == 0;
    return n;
}

/* One request rescued by a failover, one by a wait behind a 429. */
static void
rescue_two(void)
{
    fake_push(primary,
              (fake_reply_t){.status = 503,
                             .headers = JSON_HEADER,
                             .body = "{\"error\":{\"message\":\"down\",\"type\":\"server_error\"}}"});
    fake_set_default(primary, chat_ok());
    fake_set_default(fallback, chat_ok());
    post_chat("gpt-a1");
    cr_assert_eq(res.status, 200);
    fake_push(solo, (fake_reply_t){.status = 429,
                                   .headers = JSON_HEADER "retry-after: 1\r\n",
                                   .body = "{\"error\":{\"message\":\"slow down\",\"type\":\"requests\","
                                           "\"code\":\"rate_limit_exceeded\"}}"});
    fake_set_default(solo, chat_ok());
    post_chat("gpt-q1");
    cr_assert_eq(res.status, 200, "%d %s", res.status, res.body);
    cr_assert_eq(fake_count(solo), 2, "the 429, then the probe after the pause");
}

Test(metrics, the_control_key_guards_metrics)
{
    start(NULL);
    scrape(NULL);
    cr_assert_eq(res.status, 401);
    char value[64];
    cr_assert(http_header(&res, "www-authenticate", value, sizeof value));
    scrape("wrong-key");
    cr_assert_eq(res.status, 401);
    scrape(CONTROL_KEY);
    cr_assert_eq(res.status, 200);
    cr_assert(http_header(&res, "content-type", value, sizeof value));
    cr_assert_not_null(strstr(value, "text/plain; version=0.0.4"), "%s", value);
    cr_assert_not_null(strstr(res.body, "# TYPE sluice_requests_rescued_total counter\n"));
}

Test(metrics, metrics_open_needs_no_key)
{
    start(", metrics: open");
    scrape(NULL);
    cr_assert_eq(res.status, 200);
    cr_assert_not_null(strstr(res.body, "# TYPE sluice_requests_total counter\n"));
}

Test(metrics, rescued_requests_are_counted_by_cause)
{
    start(NULL);
    rescue_two();
    post_chat("gpt-a2");
    cr_assert_eq(res.status, 200);
    scrape(CONTROL_KEY);
    cr_assert_eq(sample("sluice_requests_rescued_total{route=\"gpt-a*\",cause=\"failed_over\"}"), 1, "%s",
                 res.body);
    cr_assert_eq(sample("sluice_requests_rescued_total{route=\"gpt-q*\",cause=\"queued_429\"}"), 1);
    cr_assert_eq(sample("sluice_requests_rescued_total{route=\"gpt-a*\",cause=\"retried\"}"), 0);
    cr_assert_eq(sample("sluice_requests_lost_to_trouble_total{route=\"gpt-a*\",cause=\"failed_over\"}"), 0);
    cr_assert_eq(
        sample("sluice_requests_total{dialect=\"openai-chat\",route=\"gpt-a*\",status_class=\"2xx\"}"), 2);
    cr_assert_eq(sample("sluice_upstream_attempts_total{provider=\"primary\",outcome=\"temporary\"}"), 1);
    cr_assert_eq(sample("sluice_upstream_attempts_total{provider=\"primary\",outcome=\"ok\"}"), 1,
                 "the next request is the primary's");
    cr_assert_eq(sample("sluice_upstream_attempts_total{provider=\"solo\",outcome=\"rate_limited\"}"), 1);
    cr_assert_eq(sample("sluice_wait_seconds_count{gate=\"throttled\"}"), 1);
    cr_assert_eq(sample("sluice_tokens_total{provider=\"fallback\",model=\"gpt-a1\",type=\"output\"}"), 5);
    cr_assert_eq(sample("sluice_upstream_health{provider=\"primary\"}"), 0);
    cr_assert_eq(sample("sluice_db_rows_dropped_total"), 0);
    cr_assert_geq(sample("sluice_overhead_seconds_count"), 1);
    cr_assert(http_request_h(port, "POST", "/v1/chat/completions", "authorization: Bearer nope\r\n",
                             "{\"model\":\"gpt-a1\",\"messages\":[]}", &res));
    cr_assert_eq(res.status, 401);
    scrape(CONTROL_KEY);
    cr_assert_eq(sample("sluice_requests_total{dialect=\"openai-chat\",route=\"none\",status_class=\"4xx\"}"),
                 1, "refused before routing: route none");
}

/* The counters are the data plane's own: a request DB whose writer cannot write changes nothing. */
Test(metrics, counters_stay_exact_while_the_db_writer_is_blocked)
{
    start(NULL);
    fake_set_default(primary, chat_ok());
    sqlite3 *locker;
    cr_assert_eq(sqlite3_open(temp_file_path(1), &locker), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(locker, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    for (int i = 0; i < 40; i++) {
        post_chat("other-model");
        cr_assert_eq(res.status, 200);
    }
    scrape(CONTROL_KEY);
    cr_assert_eq(sample("sluice_requests_total{dialect=\"openai-chat\",route=\"*\",status_class=\"2xx\"}"),
                 40);
    cr_assert_eq(sample("sluice_upstream_attempts_total{provider=\"primary\",outcome=\"ok\"}"), 40);
    cr_assert_eq(sample("sluice_tokens_total{provider=\"primary\",model=\"other-model\",type=\"input\"}"),
                 400);
    sqlite3_exec(locker, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(locker);
}

/* observability.md: a client-chosen model is never a label, and upstream models are bounded. */
Test(metrics, a_thousand_model_names_keep_the_series_bounded)
{
    start(NULL);
    fake_set_default(primary, chat_ok());
    char model[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(model, sizeof model, "m-%d", i);
        post_chat(model);
        cr_assert_eq(res.status, 200);
    }
    scrape(CONTROL_KEY);
    cr_assert_eq(count_lines("sluice_tokens_total{"), 65 * 2, "64 models and other, for input and output");
    cr_assert_eq(sample("sluice_tokens_total{provider=\"primary\",model=\"other\",type=\"output\"}"),
                 936 * 5);
    cr_assert_leq(count_lines("sluice_requests_total{"), 5, "no model in the request families");
    cr_assert_lt(res.body_len, 200000, "%zu bytes", res.body_len);
}

static int
run_shell(const char *cmd, char *out, size_t size)
{
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    return pclose(p);
}

Test(metrics, sluicectl_metrics_prints_the_trouble_absorbed)
{
    start(NULL);
    rescue_two();
    char cmd[512], out[8192];
    snprintf(cmd, sizeof cmd, "%s --url ws://127.0.0.1:%u/control --key %s metrics 2>&1", getenv("SLUICECTL"),
             control_port, CONTROL_KEY);
    cr_assert_eq(run_shell(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(
        strstr(out, "trouble absorbed:  100.0% rescued\n  rescued: 2 (failed_over 1, queued_429 1)\n"), "%s",
        out);
    snprintf(cmd, sizeof cmd, "%s --url ws://127.0.0.1:%u/control --key wrong metrics 2>&1",
             getenv("SLUICECTL"), control_port);
    int rc = run_shell(cmd, out, sizeof out);
    cr_assert_eq(WEXITSTATUS(rc), 1, "%s", out);
    cr_assert_not_null(strstr(out, "refused the control key"), "%s", out);
}

Test(metrics, promtool_finds_no_problem)
{
    start(NULL);
    rescue_two();
    scrape(CONTROL_KEY);
    const char *path = write_temp_file(2, res.body);
    char cmd[512], out[8192];
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
    int rc = run_shell(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "promtool: %s", out);
    cr_assert_eq(out[0], '\0', "promtool: %s", out);
}

/* A real Prometheus scrapes sluice with the key and answers a query for the rescued requests. */
Test(metrics, prometheus_scrapes_with_the_key)
{
    start(NULL);
    rescue_two();
    snprintf(prom_dir, sizeof prom_dir, "/tmp/sluice-prom-XXXXXX");
    cr_assert_not_null(mkdtemp(prom_dir));
    char config[512], cfg_path[128];
    snprintf(config, sizeof config,
             "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
             "scrape_configs:\n"
             "  - job_name: sluice\n"
             "    authorization: {type: Bearer, credentials: \"" CONTROL_KEY "\"}\n"
             "    static_configs: [{targets: [\"127.0.0.1:%u\"]}]\n",
             control_port);
    snprintf(cfg_path, sizeof cfg_path, "%s/prometheus.yml", prom_dir);
    FILE *f = fopen(cfg_path, "w");
    cr_assert_not_null(f);
    fputs(config, f);
    fclose(f);
    uint16_t web_port;
    int hold = hold_refusing_port(&web_port);
    cr_assert_geq(hold, 0);
    close(
        hold); /* Prometheus binds it itself; a race with another test is unlikely and only fails this one */
    char listen[64], storage[128], cfg_flag[160];
    snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%u", web_port);
    snprintf(storage, sizeof storage, "--storage.tsdb.path=%s/data", prom_dir);
    snprintf(cfg_flag, sizeof cfg_flag, "--config.file=%s", cfg_path);
    const char *args[] = {cfg_flag, storage, listen, "--log.level=warn", NULL};
    proc_start_program(&prom, "/usr/bin/prometheus", args);
    long long rescued = -1;
    for (int i = 0; i < 200 && rescued <= 0; i++) {
        usleep(100 * 1000);
        http_response_t q = {0};
        if (http_request(web_port, "GET", "/api/v1/query?query=sum(sluice_requests_rescued_total)", NULL,
                         &q) &&
            q.status == 200 && q.body != NULL) {
            /* {"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[t,"2"]}]}} */
            const char *v = strstr(q.body, "\"value\":[");
            const char *quote = v != NULL ? strchr(strchr(v, ',') + 1, '"') : NULL;
            if (quote != NULL)
                rescued = atoll(quote + 1);
        }
        http_response_free(&q);
    }
    cr_assert_eq(rescued, 2, "Prometheus's answer for sum(sluice_requests_rescued_total): %lld\n%s", rescued,
                 prom.log);
}
