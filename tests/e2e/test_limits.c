/*
 * Usage limits end to end (behaviour.md §7): an upstream's or a key's
 * rolling window holds requests until it has room, a used-up calendar
 * period skips the upstream or answers 429 at once, a request too large for
 * a whole window gets a final 429, reported usage replaces the estimate,
 * and a restart or a reload keeps what was counted. Time is scaled with
 * SLUICE_TEST_TIME_SCALE=0.01: a minute window is 600 ms, an hour 36 s;
 * calendar periods are not scaled.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

TestSuite(limits, .init = setup, .fini = teardown, .timeout = 60);

#define GATEWAY_KEY       "gw-test-key-0001"
#define ANTHROPIC_HEADERS "x-api-key: " GATEWAY_KEY "\r\nanthropic-version: 2023-06-01\r\n"
/* A whole answer that reports 15 tokens (10 in, 5 out). */
#define JSON_ANSWER                                                                                          \
    "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[{"    \
    "\"type\":\"text\",\"text\":\"Hi\"}],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{"    \
    "\"input_tokens\":10,\"output_tokens\":5}}"

/* YAML pieces of a test's config: limits of the provider "one", of the key, and of a second provider "two".
 */
typedef struct {
    const char *one_limits, *key_limits, *two_limits;
    const char *failover;
    bool chat;         /* "one" speaks OpenAI Chat */
    const char *extra; /* more top-level YAML */
} setup_t;

static char config_yaml[4096];

static void
write_config(const setup_t *s)
{
    char two[512] = "";
    if (s->two_limits != NULL)
        snprintf(
            two, sizeof(two),
            "  - {name: two, protocol: anthropic, base_url: \"http://127.0.0.1:%u\", key: k2, limits: %s}\n",
            fake_port(up2), s->two_limits);
    snprintf(config_yaml, sizeof(config_yaml),
             "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
             "clients: [{name: tester, key: \"" GATEWAY_KEY "\", limits: %s}]\n"
             "providers:\n"
             "  - {name: one, protocol: %s, base_url: \"http://127.0.0.1:%u%s\", key: k1, limits: %s}\n"
             "%s"
             "failover: {%s}\n"
             "store: {path: %s}\n%s",
             s->key_limits != NULL ? s->key_limits : "[]", s->chat ? "openai-chat" : "anthropic",
             fake_port(up), s->chat ? "/v1" : "", s->one_limits != NULL ? s->one_limits : "[]", two,
             s->failover != NULL ? s->failover : "wait_secs: 600", temp_file_path(1),
             s->extra != NULL ? s->extra : "");
    write_temp_file(0, config_yaml);
}

static void
start(const setup_t *s)
{
    write_temp_file(1, "");
    write_config(s);
    port = sluice_start(&proc, temp_file_path(0), "debug", "2");
    cr_assert_neq(port, 0, "%s", proc.log);
}

/* Starts sluice again on the same config and DB. */
static void
restart(void)
{
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);
    port = sluice_start(&proc, temp_file_path(0), "debug", "2");
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
ok_json(void)
{
    return (fake_reply_t){
        .status = 200, .headers = "content-type: application/json\r\n", .body = JSON_ANSWER};
}

/* A request of about 20 tokens in, with max_tokens out (the estimate: bytes / 4 + max_tokens). */
static const char *
body(int i, int max_tokens, bool stream)
{
    static char b[8][256];
    snprintf(b[i % 8], sizeof(b[0]),
             "{\"model\":\"claude-x\",\"max_tokens\":%d,\"stream\":%s,\"messages\":[{\"role\":\"user\","
             "\"content\":\"turn %d\"}]}",
             max_tokens, stream ? "true" : "false", i);
    return b[i % 8];
}

static void
post(const char *b)
{
    http_response_free(&res);
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, b, &res));
}

static int64_t
sent_at(fake_upstream_t *f, size_t i)
{
    fake_request_t r;
    cr_assert(fake_request(f, i, &r), "request %zu never reached the upstream", i);
    return r.at_ms;
}

static void
expect_header(const char *name, const char *want)
{
    char v[64];
    cr_assert(http_header(&res, name, v, sizeof(v)), "no %s in\n%s", name, res.headers);
    if (want != NULL)
        cr_assert_str_eq(v, want, "%s", name);
}

Test(limits, a_third_request_in_a_minute_waits_until_the_window_has_room)
{
    start(&(setup_t){.one_limits = "[{per: minute, requests: 2}]"});
    fake_set_default(up, ok());
    for (int i = 0; i < 3; i++) {
        post(body(i, 8, true));
        cr_assert_eq(res.status, 200, "%d %s", res.status, res.body);
    }
    cr_assert_eq(fake_count(up), 3);
    cr_assert_lt(sent_at(up, 1) - sent_at(up, 0), 500, "the second fits at once (a wait would be ~600 ms)");
    /* The window counts in 60 slots (10 ms scaled): the first leaves it with its slot, up to one slot early.
     * And it counts from admission, the fake from arrival: on a loaded machine the first can arrive up to
     * ~200 ms later after its admission than the third does. Not waiting, the third would come at once. */
    cr_assert_geq(sent_at(up, 2) - sent_at(up, 0), 600 - 10 - 200,
                  "the third only once the first left the minute (scaled)");
    cr_assert(proc_wait_log(&proc, "event request_queued id=3 gates=1 first=one:window_full", 2000), "%s",
              proc.log);
    cr_assert(proc_wait_log(&proc, "event throttle_changed provider=one throttle=window_full", 2000), "%s",
              proc.log);
    cr_assert(proc_wait_log(&proc, "upstream one: window full (2 requests per minute) until", 2000), "%s",
              proc.log);
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);
    const char *db = temp_file_path(1);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM attempts WHERE skipped = 'window_full'"), 1,
                 "one skip row");
    /* It waited what was left of the first's minute: less the time the first two took (up to ~500 ms on a
     * loaded machine); a hop that did not wait says about 0. */
    cr_assert_geq(db_int(db, "SELECT max(pause_ms) FROM attempts WHERE status = 200"), 80,
                  "the served hop says how long it waited");
    cr_assert_eq(
        db_int(db, "SELECT sum(requests) FROM usage_buckets WHERE kind = 'provider' AND name = 'one'"), 3,
        "usage persisted");
}

Test(limits, reported_usage_replaces_the_estimate_in_a_tokens_window)
{
    /* Estimate: ~25 bytes/4 + 40 = about 65 tokens; the upstream reports 15 per answer. */
    start(&(setup_t){.one_limits = "[{per: hour, tokens: 130}]"});
    fake_set_default(up, ok_json());
    /* Charged by estimate alone, two would fill the window; settled at 15 each, seven fit (7 x 15 + 65 > 130
     * only at the eighth: 105 + 65 = 170). */
    for (int i = 0; i < 4; i++) {
        post(body(i, 40, false));
        cr_assert_eq(res.status, 200, "request %d: %d %s", i, res.status, res.body);
        cr_assert_str_eq(res.body, JSON_ANSWER);
    }
    cr_assert_eq(fake_count(up), 4, "every one went at once: the real 15 tokens replaced each estimate");
    cr_assert_null(strstr(proc.log, "window full"), "%s", proc.log);
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);
    cr_assert_eq(db_int(temp_file_path(1), "SELECT sum(tokens) FROM usage_buckets WHERE name = 'one'"), 60,
                 "the DB holds what the upstream reported, not the estimates");
}

Test(limits, an_estimate_too_large_for_the_whole_window_gets_a_final_429_at_once)
{
    start(&(setup_t){.one_limits = "[{per: minute, tokens: 100}]"});
    fake_set_default(up, ok());
    post(body(0, 1000, true));
    cr_assert_eq(res.status, 429, "%d %s", res.status, res.body);
    expect_header("x-should-retry", "false");
    expect_header("x-sluice-error", "gw.limit.too_large");
    cr_assert_not_null(strstr(res.body, "rate_limit_error"), "in the client's format: %s", res.body);
    cr_assert_not_null(strstr(res.body, "100 tokens per minute"), "names the limit: %s", res.body);
    cr_assert_eq(fake_count(up), 0);
}

Test(limits, a_used_up_period_skips_the_upstream_for_the_next_candidate)
{
    start(&(setup_t){.one_limits = "[{per: day, requests: 1}]", .two_limits = "[]"});
    fake_set_default(up, ok());
    fake_set_default(up2, ok());
    post(body(0, 8, true));
    cr_assert_eq(res.status, 200);
    post(body(1, 8, true));
    cr_assert_eq(res.status, 200);
    cr_assert_eq(fake_count(up), 1, "one has used up its day");
    cr_assert_eq(fake_count(up2), 1, "the second went to two at once");
    cr_assert(proc_wait_log(&proc, "event throttle_changed provider=one throttle=period_used_up", 2000), "%s",
              proc.log);
    cr_assert_null(strstr(proc.log, "request_queued"), "a used-up period is never waited for");
}

Test(limits, every_candidate_used_up_answers_429_with_the_reset_and_no_retry)
{
    start(&(setup_t){.one_limits = "[{per: day, requests: 1}]"});
    fake_set_default(up, ok());
    post(body(0, 8, false));
    cr_assert_eq(res.status, 200);
    post(body(1, 8, false));
    cr_assert_eq(res.status, 429, "%d %s", res.status, res.body);
    expect_header("x-should-retry", "false");
    expect_header("x-sluice-error", "gw.wait.used_up");
    char v[32];
    cr_assert(http_header(&res, "retry-after", v, sizeof(v)), "%s", res.headers);
    long secs = atol(v);
    cr_assert(secs > 0 && secs <= 25 * 3600, "Retry-After is the reset, at the next local midnight: %s", v);
    cr_assert_eq(fake_count(up), 1);
}

Test(limits, a_full_key_window_holds_the_request_in_the_keys_queue)
{
    start(&(setup_t){.key_limits = "[{per: minute, requests: 1}]"});
    fake_set_default(up, ok());
    post(body(0, 8, true));
    cr_assert_eq(res.status, 200);
    post(body(1, 8, true));
    cr_assert_eq(res.status, 200, "%d %s", res.status, res.body);
    /*
     * The window counts from request 1's admission, the fake from its arrival: on a loaded machine the first
     * arrival can lag its admission by more than the second's, so a little less than the 600 ms shows.
     */
    cr_assert_geq(sent_at(up, 1) - sent_at(up, 0), 400, "sent once the key's minute had room (scaled)");
    cr_assert(proc_wait_log(&proc, "event request_queued id=2 gates=1 first=tester:key_window", 2000), "%s",
              proc.log);
    cr_assert(proc_wait_log(&proc, "event request_dequeued id=2", 2000), "%s", proc.log);
}

Test(limits, a_used_up_key_period_answers_429_at_once_without_a_retry)
{
    start(&(setup_t){.key_limits = "[{per: month, requests: 1}]"});
    fake_set_default(up, ok());
    post(body(0, 8, false));
    cr_assert_eq(res.status, 200);
    post(body(1, 8, false));
    cr_assert_eq(res.status, 429, "%d %s", res.status, res.body);
    expect_header("x-should-retry", "false");
    expect_header("x-sluice-error", "gw.key.used_up");
    expect_header("retry-after", NULL);
    cr_assert_not_null(strstr(res.body, "1 requests per month"), "%s", res.body);
    cr_assert_eq(fake_count(up), 1, "never sent");
}

Test(limits, sluices_own_retries_are_not_charged_to_the_key)
{
    start(&(setup_t){.key_limits = "[{per: day, requests: 2}]"});
    fake_push(up, (fake_reply_t){.status = 503,
                                 .headers = "content-type: application/json\r\n",
                                 .body = "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}"});
    fake_set_default(up, ok());
    post(body(0, 8, true));
    cr_assert_eq(res.status, 200);
    post(body(1, 8, true));
    cr_assert_eq(res.status, 200, "the retry of the first was not the key's second request: %s", res.body);
    cr_assert_eq(fake_count(up), 3);
}

Test(limits, a_restart_keeps_a_full_window_full)
{
    /* An hour window (36 s scaled) outlives the restart; the deadline (wait_secs 1 = 10 ms) does not. */
    start(&(setup_t){.one_limits = "[{per: hour, requests: 2}]", .failover = "wait_secs: 1"});
    fake_set_default(up, ok());
    post(body(0, 8, false));
    cr_assert_eq(res.status, 200);
    post(body(1, 8, false));
    cr_assert_eq(res.status, 200);
    restart();
    post(body(2, 8, false));
    cr_assert_eq(res.status, 429, "the window is still full after the restart: %d %s", res.status, res.body);
    expect_header("x-sluice-error", "gw.wait.window_full");
    expect_header("x-should-retry", "true");
    cr_assert_eq(fake_count(up), 2);
}

Test(limits, a_changed_limit_takes_effect_at_the_next_request_and_keeps_the_count)
{
    setup_t s = {.one_limits = "[{per: day, requests: 1}]"};
    start(&s);
    fake_set_default(up, ok());
    post(body(0, 8, false));
    cr_assert_eq(res.status, 200);
    post(body(1, 8, false));
    cr_assert_eq(res.status, 429);
    s.one_limits = "[{per: day, requests: 2}]";
    write_config(&s);
    kill(proc.pid, SIGHUP);
    cr_assert(proc_wait_log(&proc, "config.reloaded", 3000), "%s", proc.log);
    cr_assert(proc_wait_log(&proc, "event limits_changed target=provider name=one limits=1", 2000), "%s",
              proc.log);
    post(body(2, 8, false));
    cr_assert_eq(res.status, 200, "room for one more: %d %s", res.status, res.body);
    post(body(3, 8, false));
    cr_assert_eq(res.status, 429, "the first still counts under the new limit");
    cr_assert_eq(fake_count(up), 2);
}

#define CHAT_HEADERS "authorization: Bearer " GATEWAY_KEY "\r\n"

/* The client's view of chat-ok.sse: every event but the usage-only chunk. */
static char *
chat_without_usage_chunk(void)
{
    const char *all = fixture("chat-ok.sse", NULL);
    const char *usage = strstr(all, "data: {\"id\":\"chatcmpl-fake5\",\"object\":\"chat.completion.chunk\","
                                    "\"created\":1795969439,\"model\":\"gpt-x\",\"system_fingerprint\":null,"
                                    "\"choices\":[]");
    cr_assert_not_null(usage);
    const char *after = strstr(usage, "\n\n") + 2;
    size_t head = (size_t)(usage - all);
    char *out = malloc(strlen(all) + 1);
    memcpy(out, all, head);
    strcpy(out + head, after);
    return out;
}

Test(limits, a_chat_stream_is_asked_for_its_usage_and_the_extra_chunk_dropped)
{
    start(&(setup_t){.one_limits = "[{per: hour, tokens: 100000}]", .chat = true});
    fake_set_default(up, (fake_reply_t){.status = 200,
                                        .headers = "content-type: text/event-stream\r\n",
                                        .body = fixture("chat-ok.sse", NULL),
                                        .chunked = true});
    cr_assert(http_request_h(
        port, "POST", "/v1/chat/completions", CHAT_HEADERS,
        "{\"model\":\"gpt-x\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &res));
    cr_assert_eq(res.status, 200, "%d %s", res.status, res.body);
    char *want = chat_without_usage_chunk();
    cr_assert_str_eq(after_keepalives(res.body), want, "the client did not ask for the usage chunk");
    free(want);
    fake_request_t sent;
    cr_assert(fake_request(up, 0, &sent));
    cr_assert_str_eq(
        sent.body,
        "{\"model\":\"gpt-x\",\"stream\":true,"
        "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream_options\":{\"include_usage\":true}}");

    /* A client that asks gets the chunk, and its body goes unchanged. */
    const char *asking = "{\"model\":\"gpt-x\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                         "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    http_response_free(&res);
    cr_assert(http_request_h(port, "POST", "/v1/chat/completions", CHAT_HEADERS, asking, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(after_keepalives(res.body), fixture("chat-ok.sse", NULL));
    cr_assert(fake_request(up, 1, &sent));
    cr_assert_str_eq(sent.body, asking);

    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);
    cr_assert_eq(db_int(temp_file_path(1), "SELECT sum(tokens) FROM usage_buckets WHERE name = 'one'"), 30,
                 "15 reported tokens each, read from the chunk either way");
}

Test(limits, a_request_the_gateway_answered_alone_costs_the_key_nothing)
{
    setup_t s = {.key_limits = "[{per: day, requests: 2}]",
                 .one_limits = "[{per: hour, requests: 1}]",
                 .failover = "wait_secs: 1"};
    start(&s);
    fake_set_default(up, ok());
    post(body(0, 8, false));
    cr_assert_eq(res.status, 200);
    post(body(1, 8, false));
    cr_assert_eq(res.status, 429);
    expect_header("x-sluice-error", "gw.wait.window_full");
    /* The upstream's hour gets room: the key still has its second request. */
    s.one_limits = "[{per: hour, requests: 10}]";
    write_config(&s);
    kill(proc.pid, SIGHUP);
    cr_assert(proc_wait_log(&proc, "config.reloaded", 3000), "%s", proc.log);
    post(body(2, 8, false));
    cr_assert_eq(res.status, 200, "the final 429 was not charged to the key: %d %s", res.status, res.body);
    post(body(3, 8, false));
    cr_assert_eq(res.status, 429);
    expect_header("x-sluice-error", "gw.key.used_up");
    cr_assert_eq(fake_count(up), 2);
}

Test(limits, a_cost_limit_counts_micro_dollars_at_the_configured_prices)
{
    /* $3 / $15 per million tokens: each answer reports 10 in + 5 out = 105 micro-dollars; the estimate (25
     * tokens in from 97 bytes, 8 out) reserves 195. 400 micro-dollars take two answers, not a third. */
    start(&(setup_t){.one_limits = "[{per: day, cost: 0.0004}]",
                     .extra = "pricing: {\"claude-*\": {input: 3, output: 15}}\n"});
    fake_set_default(up, ok());
    post(body(0, 8, true));
    cr_assert_eq(res.status, 200);
    post(body(1, 8, true));
    cr_assert_eq(res.status, 200, "105 spent + 195 reserved fit in 400");
    post(body(2, 8, true));
    cr_assert_eq(res.status, 429, "210 spent + 195 reserved do not");
    expect_header("x-sluice-error", "gw.wait.used_up");
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);
    const char *db = temp_file_path(1);
    cr_assert_eq(db_int(db, "SELECT sum(cost_micros) FROM usage_buckets WHERE name = 'one'"), 210);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM requests WHERE cost_micros = 105"), 2,
                 "each row has its cost");
}
