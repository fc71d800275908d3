/*
 * Upstream 429s end to end (behaviour.md §6): the upstream pauses, requests
 * wait in arrival order, a probe goes first, and a final 429 comes as soon as
 * nothing can be sent before the deadline. Waits are scaled down with
 * SLUICE_TEST_TIME_SCALE=0.01 (a 5 s pause is 50 ms, wait_secs 120 is 1.2 s).
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake_upstream.h"
#include "harness.h"

static proc_t proc;
static fake_upstream_t *up, *up2;
static http_response_t res;
static uint16_t port;

static void
setup(void)
{
    setenv("SLUICE_TEST_TIME_SCALE", "0.01", 1);
    up = fake_start(NULL, NULL, false);
    up2 = fake_start(NULL, NULL, false);
}

static void
teardown(void)
{
    proc_kill(&proc);
    fake_stop(up);
    fake_stop(up2);
    http_response_free(&res);
    remove_temp_files();
}

TestSuite(throttle, .init = setup, .fini = teardown, .timeout = 60);

#define GATEWAY_KEY       "gw-test-key-0001"
#define ANTHROPIC_HEADERS "x-api-key: " GATEWAY_KEY "\r\nanthropic-version: 2023-06-01\r\n"
#define RATE_LIMITED                                                                                         \
    "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow down\"}}"

static const char *threads = "2";
/* debug prints every event; a test with many requests keeps to info, or the unread log pipe fills and blocks
 * sluice's writes. */
static const char *log_level = "debug";
/* A second upstream, "two" on up2, after "one" in failover order. */
static bool second;
/* More top-level YAML. */
static const char *extra_yaml = "";

static void
start(const char *provider_extra, const char *failover)
{
    char two[256] = "";
    if (second)
        snprintf(two, sizeof(two),
                 "  - {name: two, protocol: anthropic, base_url: \"http://127.0.0.1:%u\", key: k2}\n",
                 fake_port(up2));
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
             "clients: [{name: tester, key: \"" GATEWAY_KEY "\"}]\n"
             "providers:\n"
             "  - {name: one, protocol: anthropic, base_url: \"http://127.0.0.1:%u\", key: k1%s}\n"
             "%s"
             "failover: {%s}\n"
             "store: {path: %s}\n"
             "%s",
             fake_port(up), provider_extra != NULL ? provider_extra : "", two,
             failover != NULL ? failover : "wait_secs: 120", write_temp_file(1, ""), extra_yaml);
    port = sluice_start(&proc, write_temp_file(0, yaml), log_level, threads);
    cr_assert_neq(port, 0, "%s", proc.log);
}

static fake_reply_t
ok(void)
{
    return (fake_reply_t){.status = 200,
                          .headers = "content-type: text/event-stream\r\n",
                          .body = fixture("anthropic-ok.sse", NULL),
                          .chunked = true};
}

static fake_reply_t
limited(const char *headers)
{
    return (fake_reply_t){.status = 429, .headers = headers, .body = RATE_LIMITED};
}

static fake_reply_t
limited_with(const char *headers, const char *body)
{
    return (fake_reply_t){.status = 429, .headers = headers, .body = body};
}

#define BODY_FORMAT                                                                                          \
    "{\"model\":\"claude-x\",\"max_tokens\":8,\"stream\":true,\"messages\":[{\"role\":\"user\","             \
    "\"content\":\"turn %d\"}]}"

/* For the test's own thread: a ring of 8, so that a few calls' results can be held at once. */
static const char *
body(int i)
{
    static char b[8][256];
    snprintf(b[i % 8], sizeof(b[0]), BODY_FORMAT, i);
    return b[i % 8];
}

static int64_t
gap_ms(size_t i)
{
    fake_request_t a, b;
    cr_assert(fake_request(up, i - 1, &a));
    cr_assert(fake_request(up, i, &b));
    return b.at_ms - a.at_ms;
}

Test(throttle, a_429_with_retry_after_ms_pauses_then_the_request_goes_through)
{
    start(NULL, NULL);
    fake_push(up, limited("content-type: application/json\r\nretry-after-ms: 3000\r\n"));
    fake_push(up, ok());
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, body(0), &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(after_keepalives(res.body), fixture("anthropic-ok.sse", NULL),
                     "the client never sees the 429");
    cr_assert_geq(gap_ms(1), 30, "the 3 s hint (scaled)");
    cr_assert(proc_wait_log(&proc, "upstream one: paused", 2000), "%s", proc.log);
    cr_assert(proc_wait_log(&proc, "event request_queued", 2000), "%s", proc.log);
    cr_assert(proc_wait_log(&proc, "upstream one: rate limit over", 2000), "%s", proc.log);
    /* The events tell the story in order. */
    cr_assert(proc_wait_log(&proc, "event request_finished id=1", 2000), "%s", proc.log);
    static const char *const story[] = {
        "event throttle_changed provider=one throttle=paused consecutive=1",
        "event request_queued id=1 gates=1 first=one:throttled",
        "event throttle_changed provider=one throttle=probing",
        "event request_dequeued id=1",
        "event throttle_changed provider=one throttle=free consecutive=0",
        "event request_finished id=1 status=200",
    };
    const char *at = proc.log;
    for (size_t i = 0; i < sizeof(story) / sizeof(story[0]); i++) {
        const char *found = strstr(at, story[i]);
        cr_assert_not_null(found, "'%s' not after the one before:\n%s", story[i], proc.log);
        at = found;
    }
}

Test(throttle, without_a_hint_the_pause_is_5_s_and_grows_with_each_429)
{
    start(NULL, NULL);
    fake_push(up, limited("content-type: application/json\r\n"));
    fake_push(up, limited("content-type: application/json\r\n"));
    fake_push(up, ok());
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, body(0), &res));
    cr_assert_eq(res.status, 200);
    cr_assert_geq(gap_ms(1), 50, "5 s (scaled)");
    cr_assert_geq(gap_ms(2), 100, "then 10 s (scaled)");
    cr_assert_eq(strstr(proc.log, "breaker open"), NULL, "a 429 is not a failure");
}

typedef struct {
    int i;
    char body[256]; /* its own: body()'s ring is too small for many clients at once */
    http_response_t res;
} client_t;

static void *
client_main(void *arg)
{
    client_t *c = arg;
    /* Not body(): its ring is shared, and client i + 8 would write i's buffer while i copies it. */
    snprintf(c->body, sizeof(c->body), BODY_FORMAT, c->i);
    http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, c->body, &c->res);
    return NULL;
}

/*
 * Starts clients 0..n-1 in that order. after_first (may be NULL) is a log
 * line to await once the first has started (the pause its 429 causes). With
 * the debug log each later client starts once the one before has arrived
 * (its RequestStarted), so sluice's arrival order is theirs.
 */
static void
clients_start(client_t *c, pthread_t *t, int n, const char *after_first)
{
    for (int i = 0; i < n; i++) {
        c[i] = (client_t){.i = i};
        pthread_create(&t[i], NULL, client_main, &c[i]);
        char arrived[64];
        snprintf(arrived, sizeof(arrived), "event request_started id=%d ", i + 1);
        if (i == 0 && after_first != NULL)
            cr_assert(proc_wait_log(&proc, after_first, 3000), "%s", proc.log);
        else if (strcmp(log_level, "debug") == 0)
            cr_assert(proc_wait_log(&proc, arrived, 3000), "%s", proc.log);
    }
}

/* Waits for clients 0..n-1; each must have been answered 200. */
static void
clients_join_ok(client_t *c, pthread_t *t, int n)
{
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(c[i].res.status, 200, "client %d: %d %s", i, c[i].res.status, c[i].res.body);
        http_response_free(&c[i].res);
    }
}

Test(throttle, requests_behind_a_pause_go_in_arrival_order_after_one_probe)
{
    /* One worker: the event log's order is then the order things happened in. */
    threads = "1";
    start(NULL, NULL);
    fake_push(up,
              limited("content-type: application/json\r\nretry-after-ms: 100000\r\n")); /* 1 s: all arrive */
    fake_set_default(up, ok());
    client_t c[5];
    pthread_t t[5];
    clients_start(c, t, 5, "upstream one: paused");
    clients_join_ok(c, t, 5);
    cr_assert_eq(fake_count(up), 6, "each request reached the upstream once, after the first 429");
    /* The probe (the first request, back in its place at the head) went alone, before the rest. */
    fake_request_t probe, next;
    cr_assert(fake_request(up, 1, &probe));
    cr_assert(strstr(probe.body, "turn 0") != NULL, "the probe was %s", probe.body);
    cr_assert(fake_request(up, 2, &next));
    cr_assert_geq(next.at_ms, probe.at_ms);
    /* The queue released them in arrival order. */
    cr_assert(proc_wait_log(&proc, "event request_dequeued id=5", 2000), "%s", proc.log);
    const char *at = proc.log;
    for (int id = 1; id <= 5; id++) {
        char want[48];
        snprintf(want, sizeof(want), "event request_dequeued id=%d", id);
        const char *found = strstr(at, want);
        cr_assert_not_null(found, "%s not after the previous one:\n%s", want, proc.log);
        at = found;
    }
}

Test(throttle, a_long_line_behind_a_pause_is_served_whole)
{
    /* A line of 300 behind one pause: each is served whole and once, and leaves its few rows. (The line
     * that moves while answers come back, where a wake-up once cost an attempt, is bench-queue-smoke.) */
    enum { CLIENTS = 300 };
    log_level = "info";
    start(NULL, NULL);
    fake_push(up, limited("content-type: application/json\r\nretry-after-ms: 50000\r\n")); /* 500 ms */
    fake_set_default(up, ok());
    static client_t c[CLIENTS];
    static pthread_t t[CLIENTS];
    clients_start(c, t, CLIENTS, "upstream one: paused");
    int served = 0;
    const char *want = fixture("anthropic-ok.sse", NULL);
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(t[i], NULL);
        const char *got = after_keepalives(c[i].res.body);
        bool whole = c[i].res.status == 200 && strcmp(got, want) == 0;
        served += whole;
        if (!whole && served + 3 > i)
            fprintf(stderr, "client %d: %d %s\n", i, c[i].res.status, c[i].res.body ? c[i].res.body : "");
        http_response_free(&c[i].res);
    }
    cr_assert_eq(served, CLIENTS);
    cr_assert_eq(fake_count(up), CLIENTS + 1, "each reached the upstream once, after the first 429 (%zu)",
                 (size_t)fake_count(up));
    /* Rows: the hop that got the 429, one skip per reason it waited for (throttled, busy), the hop served. */
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0);
    cr_assert_eq(db_int(temp_file_path(1), "SELECT count(*) FROM requests"), CLIENTS);
    cr_assert_leq(db_int(temp_file_path(1),
                         "SELECT max(n) FROM (SELECT count(*) AS n FROM attempts GROUP BY request_row)"),
                  4, "one row per reason it waited, not per wake-up");
}

Test(throttle, the_deadline_gives_a_final_429_with_its_three_headers)
{
    /* Unscaled: the 600 s hint is past wait_secs 5 at once, and a held stream's keep-alive (150 ms at 0.01)
     * cannot come before the 429 is read on a loaded machine. */
    setenv("SLUICE_TEST_TIME_SCALE", "1", 1);
    start(NULL, "wait_secs: 5");
    fake_push(up, limited("content-type: application/json\r\nretry-after: 600\r\n"));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, body(0), &res));
    cr_assert_eq(res.status, 429);
    char v[32];
    cr_assert(http_header(&res, "retry-after", v, sizeof(v)), "%s", res.headers);
    cr_assert(http_header(&res, "retry-after-ms", v, sizeof(v)), "%s", res.headers);
    cr_assert(http_header(&res, "x-should-retry", v, sizeof(v)));
    cr_assert_str_eq(v, "true");
    cr_assert(http_header(&res, "x-sluice-error", v, sizeof(v)));
    cr_assert_str_eq(v, "gw.wait.rate_limited");
    cr_assert(strstr(res.body, "\"type\":\"rate_limit_error\"") != NULL, "%s", res.body);
    cr_assert_eq(fake_count(up), 1);
}

Test(throttle, count_tokens_is_estimated_while_the_upstream_is_paused)
{
    start(NULL, "wait_secs: 5"); /* 50 ms: the first request gets its final 429, the upstream stays paused */
    fake_push(up, limited("content-type: application/json\r\nretry-after-ms: 60000\r\n"));
    /* A whole answer: a held stream's first keep-alive (150 ms scaled) may come first on a loaded machine. */
    static const char whole[] =
        "{\"model\":\"claude-x\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"turn 0\"}]}";
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, whole, &res));
    cr_assert_eq(res.status, 429, "%d: %s", res.status, res.body);
    cr_assert(http_request_h(port, "POST", "/v1/messages/count_tokens", ANTHROPIC_HEADERS, body(1), &res));
    cr_assert_eq(res.status, 200);
    char v[16];
    cr_assert(http_header(&res, "x-sluice-estimated", v, sizeof(v)));
}

Test(throttle, busy_slots_queue_and_release_in_order)
{
    start(", max_concurrent: 1", NULL);
    fake_reply_t slow = ok();
    slow.delay_ms = 150; /* before the head; the body follows in one piece */
    slow.chunked = false;
    fake_set_default(up, slow);
    client_t c[3];
    pthread_t t[3];
    clients_start(c, t, 3, NULL);
    clients_join_ok(c, t, 3);
    for (int i = 0; i < 3; i++) {
        fake_request_t r;
        cr_assert(fake_request(up, (size_t)i, &r));
        char want[32];
        snprintf(want, sizeof(want), "turn %d", i);
        cr_assert(strstr(r.body, want) != NULL, "slot %d went to %s", i, r.body);
    }
}

Test(throttle, an_in_stream_rate_limit_reaches_the_throttle)
{
    start(NULL, NULL);
    fake_push(up, (fake_reply_t){
                      .status = 200,
                      .headers = "content-type: text/event-stream\r\n",
                      .chunked = true,
                      .body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n"
                              "event: error\ndata: " RATE_LIMITED "\n\n"});
    fake_push(up, ok());
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, body(0), &res));
    cr_assert_str_eq(after_keepalives(res.body), fixture("anthropic-ok.sse", NULL));
    cr_assert(proc_wait_log(&proc, "upstream one: paused", 2000), "%s", proc.log);
}

Test(throttle, a_queued_client_that_leaves_is_never_sent)
{
    start(NULL, NULL);
    fake_push(up, limited("content-type: application/json\r\nretry-after-ms: 50000\r\n")); /* 500 ms */
    fake_set_default(up, ok());
    int fd = raw_post(port, 0, "/v1/messages", ANTHROPIC_HEADERS, body(0));
    cr_assert_geq(fd, 0);
    cr_assert(proc_wait_log(&proc, "event request_queued", 2000), "%s", proc.log);
    close(fd);
    cr_assert(proc_wait_log(&proc, "event request_cancelled id=1", 2000), "%s", proc.log);
    usleep(700 * 1000);
    cr_assert_eq(fake_count(up), 1, "no hop for a client that left");
}

Test(throttle, a_quota_used_up_429_fails_over_instead_of_pausing)
{
    second = true;
    start(NULL, NULL);
    fake_push(up, limited_with("content-type: application/json\r\n",
                               "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\","
                               "\"message\":\"usage_limit_reached for this month\"}}"));
    fake_push(up2, ok());
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, body(0), &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(after_keepalives(res.body), fixture("anthropic-ok.sse", NULL));
    cr_assert_eq(fake_count(up), 1);
    cr_assert_eq(fake_count(up2), 1, "sent on to the next upstream at once");
    cr_assert(proc_wait_log(&proc, "event request_finished id=1", 2000), "%s", proc.log);
    cr_assert_null(strstr(proc.log, "upstream one: paused"), "used-up quota is not a rate-limit pause");
    cr_assert_null(strstr(proc.log, "event request_queued"), "nothing waited:\n%s", proc.log);
}

Test(throttle, a_request_waiting_on_two_paused_upstreams_goes_to_the_first_to_recover)
{
    second = true;
    start(NULL, NULL);
    fake_push(up, limited("content-type: application/json\r\nretry-after-ms: 60000\r\n"));  /* 600 ms */
    fake_push(up2, limited("content-type: application/json\r\nretry-after-ms: 10000\r\n")); /* 100 ms */
    fake_push(up2, ok());
    fake_set_default(up, ok());
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, body(0), &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(after_keepalives(res.body), fixture("anthropic-ok.sse", NULL));
    cr_assert_eq(fake_count(up), 1, "one was still paused");
    cr_assert_eq(fake_count(up2), 2, "two recovered first and took it");
    fake_request_t a, b;
    cr_assert(fake_request(up2, 0, &a));
    cr_assert(fake_request(up2, 1, &b));
    cr_assert_geq(b.at_ms - a.at_ms, 100, "after two's pause");
    cr_assert_lt(b.at_ms - a.at_ms, 600, "before one's");
}

Test(throttle, past_max_waiting_bytes_a_request_is_turned_away_with_503)
{
    /* Two bodies (97 bytes each) fit in 250 bytes, not three. */
    extra_yaml = "limits: {max_waiting_bytes: 250}\n";
    start(NULL, "wait_secs: 600"); /* 6 s */
    /* 3 s: the third surely arrives while the first two wait, even on a loaded machine. */
    fake_push(up, limited("content-type: application/json\r\nretry-after-ms: 300000\r\n"));
    fake_set_default(up, ok());
    client_t c[2];
    pthread_t t[2];
    clients_start(c, t, 2, "upstream one: paused");
    /* Both must be waiting (counted) before the third: the first re-queues only after its 429. */
    cr_assert(proc_wait_log(&proc, "event request_queued id=1", 2000), "%s", proc.log);
    /* Behind the first in the paused upstream's line, what holds it is still the pause. */
    cr_assert(proc_wait_log(&proc, "event request_queued id=2 gates=1 first=one:throttled", 2000), "%s",
              proc.log);
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, body(2), &res));
    cr_assert_eq(res.status, 503, "%d %s\n%s", res.status, res.body, proc.log);
    char v[32];
    cr_assert(http_header(&res, "x-sluice-error", v, sizeof(v)), "%s", res.headers);
    cr_assert_str_eq(v, "gw.wait.overloaded");
    cr_assert(http_header(&res, "retry-after", v, sizeof(v)), "%s", res.headers);
    clients_join_ok(c, t, 2); /* both waited and were served */
    cr_assert_eq(fake_count(up), 3, "the turned-away request never reached the upstream");
}

Test(throttle, an_absurd_hint_is_capped_by_rate_limit_max_pause_secs)
{
    start(NULL, "wait_secs: 120, rate_limit_max_pause_secs: 10"); /* 100 ms */
    fake_push(up, limited("content-type: application/json\r\nretry-after-ms: 86400000\r\n"));
    fake_push(up, ok());
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, body(0), &res));
    cr_assert_eq(res.status, 200);
    cr_assert_geq(gap_ms(1), 100, "the cap (scaled)");
    cr_assert_lt(gap_ms(1), 1000, "not the day the upstream asked for");
}

Test(throttle, a_hint_under_1_s_counts_as_missing)
{
    start(NULL, NULL);
    fake_push(up, limited("content-type: application/json\r\nretry-after: 0\r\n"));
    fake_push(up, ok());
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, body(0), &res));
    cr_assert_eq(res.status, 200);
    cr_assert_geq(gap_ms(1), 50, "the 5 s pause without a hint (scaled), not an instant resend");
}

Test(throttle, a_probe_that_hangs_lets_the_rest_go_after_the_grace)
{
    threads = "1";
    start(NULL, NULL);
    fake_push(up, limited("content-type: application/json\r\nretry-after-ms: 10000\r\n")); /* 100 ms */
    fake_reply_t hanging = ok();
    hanging.chunked = false;
    hanging.delay_ms = 1500;
    fake_push(up, hanging);
    fake_set_default(up, ok());
    client_t c[2];
    pthread_t t[2];
    clients_start(c, t, 2, "upstream one: paused");
    clients_join_ok(c, t, 2);
    fake_request_t limited_at, probe, after;
    cr_assert(fake_request(up, 0, &limited_at));
    cr_assert(fake_request(up, 1, &probe));
    cr_assert(strstr(probe.body, "turn 0") != NULL, "the probe was %s", probe.body);
    cr_assert(fake_request(up, 2, &after));
    /* The pause (100 ms scaled) runs from the 429, the grace (10 s, 100 ms scaled) from the probe's release
     * at the pause's end: the second went out no sooner than 200 ms after the 429 reached the fake, whatever
     * a busy machine delays (delays only push it later), and not after the probe's 1.5 s answer. */
    cr_assert_geq(after.at_ms - limited_at.at_ms, 190, "it waited for the pause and the grace");
    cr_assert_lt(after.at_ms - probe.at_ms, 1000, "not for the probe's answer");
}

Test(throttle, on_shutdown_a_queued_request_is_answered_at_once_and_recorded)
{
    /* Unscaled: the pause (100 s) outlasts the test, and no keep-alive (150 ms at 0.01) goes out before
     * the SIGTERM. */
    setenv("SLUICE_TEST_TIME_SCALE", "1", 1);
    start(NULL, NULL);
    fake_push(up, limited("content-type: application/json\r\nretry-after-ms: 100000\r\n"));
    client_t c = {.i = 0};
    pthread_t t;
    pthread_create(&t, NULL, client_main, &c);
    cr_assert(proc_wait_log(&proc, "event request_queued id=1", 3000), "%s", proc.log);
    kill(proc.pid, SIGTERM);
    pthread_join(t, NULL);
    cr_assert_eq(c.res.status, 503, "%s", c.res.body);
    char v[32];
    cr_assert(http_header(&c.res, "x-sluice-error", v, sizeof(v)), "%s", c.res.headers);
    cr_assert_str_eq(v, "gw.shutting_down");
    cr_assert(http_header(&c.res, "retry-after", v, sizeof(v)), "%s", c.res.headers);
    http_response_free(&c.res);
    cr_assert_eq(proc_wait_exit(&proc, 2000), 0, "drained at once, not after the grace:\n%s", proc.log);
    cr_assert_eq(db_int(temp_file_path(1), "SELECT count(*) FROM requests WHERE status = 503"), 1,
                 "its row is recorded");
}
