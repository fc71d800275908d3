/*
 * The Failover Bench's sixteen faults (issue 26), each against a route
 * [primary, fallback] of OpenAI-compatible upstreams with streamed Chat
 * requests: what the client receives (complete content, or a clean error,
 * never a truncated success), how many attempts each upstream saw, the gap
 * between them and a wall-clock bound. S12 (context_fallback, behaviour.md
 * §1.6) and S15 (back to the primary once it is healthy, §1.5) are the two
 * behaviours the bench found missing; the others pin what works.
 */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_upstream.h"
#include "harness.h"

static proc_t proc;
static fake_upstream_t *primary, *fallback, *big;
/* More of the route's fields (", first_token_secs: 1") and of the fallback provider's (", limits: [...]"). */
static const char *route_extra = "", *fallback_extra = "";
static http_response_t res;
static uint16_t port;

static void
setup(void)
{
    primary = fake_start(NULL, NULL, false);
    fallback = fake_start(NULL, NULL, false);
    big = fake_start(NULL, NULL, false);
}

static void
teardown(void)
{
    proc_kill(&proc);
    fake_stop(primary);
    fake_stop(fallback);
    fake_stop(big);
    http_response_free(&res);
    remove_temp_files();
    route_extra = fallback_extra = "";
}

TestSuite(failover_bench, .init = setup, .fini = teardown, .timeout = 60);

#define GATEWAY_KEY  "gw-test-key-0001"
#define CHAT_HEADERS "authorization: Bearer " GATEWAY_KEY "\r\n"
#define JSON_HEADER  "content-type: application/json\r\n"
#define SSE_HEADER   "content-type: text/event-stream\r\n"

/* A streamed Chat request that asks for usage itself, so the upstream's stream reaches it unchanged. */
static const char chat_body[] =
    "{\"model\":\"gpt-x\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

/*
 * Starts sluice with the route [primary, fallback] (and, with context_fallback, the route's
 * context_fallback: [big], big mapping gpt-x to gpt-x-1m). time_scale: SLUICE_TEST_TIME_SCALE, or NULL for
 * real time (the breaker's pauses and the idle timeout are never scaled).
 */
static void
start(const char *failover, bool context_fallback, const char *time_scale)
{
    if (time_scale != NULL)
        setenv("SLUICE_TEST_TIME_SCALE", time_scale, 1);
    else
        unsetenv("SLUICE_TEST_TIME_SCALE");
    char yaml[4096];
    snprintf(
        yaml, sizeof(yaml),
        "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
        "clients: [{name: tester, key: \"" GATEWAY_KEY "\"}]\n"
        "providers:\n"
        "  - {name: primary, protocol: openai-chat, base_url: \"http://127.0.0.1:%u\", key: k1}\n"
        "  - {name: fallback, protocol: openai-chat, base_url: \"http://127.0.0.1:%u\", key: k2%s}\n"
        "  - {name: big, protocol: openai-chat, base_url: \"http://127.0.0.1:%u\", key: k3, models: [none],"
        " model_map: {gpt-x: gpt-x-1m}}\n"
        "routes:\n"
        "  - {match: \"gpt-*\", failover: [primary, fallback]%s%s}\n"
        "failover: {%s}\n"
        "store: {path: %s}\n",
        fake_port(primary), fake_port(fallback), fallback_extra, fake_port(big),
        context_fallback ? ", context_fallback: [big]" : "", route_extra,
        failover != NULL ? failover : "wait_secs: 120", write_temp_file(1, ""));
    port = sluice_start(&proc, write_temp_file(0, yaml), "debug", NULL);
    cr_assert_neq(port, 0, "sluice did not start:\n%s", proc.log);
}

static int64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One streamed Chat request (headers: extra lines); returns how long it took in ms. */
static int64_t
post_chat(const char *headers)
{
    char all[512];
    snprintf(all, sizeof(all), CHAT_HEADERS "%s", headers != NULL ? headers : "");
    int64_t t0 = now_ms();
    cr_assert(http_request_h(port, "POST", "/v1/chat/completions", all, chat_body, &res));
    return now_ms() - t0;
}

static fake_reply_t
sse_body(const char *body)
{
    return (fake_reply_t){.status = 200, .headers = SSE_HEADER, .body = body, .chunked = true};
}

static fake_reply_t
chat_ok(void)
{
    return sse_body(fixture("chat-ok.sse", NULL));
}

static fake_reply_t
status(int code, const char *headers, const char *body)
{
    return (fake_reply_t){.status = code, .headers = headers, .body = body};
}

#define SERVER_ERROR                                                                                         \
    "{\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\",\"code\":null}}"

/* The client got chat-ok.sse whole: every event, the usage, the terminator. */
static void
assert_complete_chat(void)
{
    cr_assert_eq(res.status, 200, "%d %s", res.status, res.body);
    cr_assert(res.complete, "the stream ended with its last chunk");
    cr_assert_str_eq(after_keepalives(res.body), fixture("chat-ok.sse", NULL));
}

/* A Chat stream of n content chunks ("t0 ", "t1 ", …), then its finish, usage and [DONE]. Owned by caller. */
static char *
token_stream(int n, size_t *cut_after_40)
{
    size_t cap = (size_t)n * 256 + 1024, len = 0;
    char *s = malloc(cap);
    len += (size_t)snprintf(
        s + len, cap - len,
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-x\","
        "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n");
    for (int i = 0; i < n; i++) {
        len +=
            (size_t)snprintf(s + len, cap - len,
                             "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-x\","
                             "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n",
                             i);
        if (i == 39 && cut_after_40 != NULL)
            *cut_after_40 = len;
    }
    snprintf(s + len, cap - len,
             "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-x\","
             "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
             "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-x\",\"choices\":[],"
             "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n"
             "data: [DONE]\n\n",
             n, n + 3);
    return s;
}

static int64_t
arrival(fake_upstream_t *f, size_t i)
{
    fake_request_t r;
    cr_assert(fake_request(f, i, &r));
    return r.at_ms;
}

/* Stops sluice (its rows are written on the way out) so the request DB can be read. */
static void
stop_sluice(void)
{
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 10000), 0, "%s", proc.log);
}

static int
db(const char *sql)
{
    return db_int(temp_file_path(1), sql);
}

/* ---- S01-S05: errors before the head -------------------------------------------------------- */

#define RATE_LIMITED                                                                                         \
    "{\"error\":{\"message\":\"Rate limit "                                                                  \
    "reached\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}"

/*
 * One fault on the primary, healthy after: the request fails over at once (no pause between the two
 * attempts) and the client gets the fallback's stream whole, within 1.5 s.
 */
static void
fault_fails_over_at_once(fake_reply_t fault)
{
    start(NULL, false, NULL);
    fake_push(primary, fault);
    fake_set_default(primary, chat_ok());
    fake_set_default(fallback, chat_ok());
    int64_t ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_eq(fake_count(primary), 1);
    cr_assert_eq(fake_count(fallback), 1);
    cr_assert_lt(arrival(fallback, 0) - arrival(primary, 0), 500, "no wait before the failover");
    cr_assert_lt(ms, 1500);
}

Test(failover_bench, s01_a_429_with_retry_after_fails_over_at_once_and_pauses_the_primary)
{
    fault_fails_over_at_once(status(429, JSON_HEADER "retry-after: 2\r\n", RATE_LIMITED));
    /* While the 2 s pause runs, the next request goes straight to the fallback. */
    post_chat(NULL);
    assert_complete_chat();
    cr_assert_eq(fake_count(primary), 1, "paused: not asked again");
    cr_assert_eq(fake_count(fallback), 2);
}

Test(failover_bench, s02_a_persistent_429_without_retry_after_keeps_the_fallback_serving)
{
    start(NULL, false, NULL);
    fake_set_default(primary, status(429, JSON_HEADER, RATE_LIMITED));
    fake_set_default(fallback, chat_ok());
    for (int i = 0; i < 3; i++) {
        int64_t ms = post_chat(NULL);
        assert_complete_chat();
        cr_assert_lt(ms, 1500);
    }
    cr_assert_eq(fake_count(primary), 1, "paused after its 429: the others skip it");
    cr_assert_eq(fake_count(fallback), 3);
}

Test(failover_bench, s03_a_500_once_fails_over_without_a_pause)
{
    fault_fails_over_at_once(status(500, JSON_HEADER, SERVER_ERROR));
}

Test(failover_bench, s04_a_persistent_503_opens_the_primarys_breaker)
{
    start(NULL, false, NULL);
    fake_set_default(primary, status(503, JSON_HEADER, SERVER_ERROR));
    fake_set_default(fallback, chat_ok());
    for (int i = 0; i < 5; i++) {
        int64_t ms = post_chat(NULL);
        assert_complete_chat();
        cr_assert_lt(ms, 1500, "request %d", i);
    }
    cr_assert_eq(fake_count(primary), 3, "three failures open the breaker; then it is skipped");
    cr_assert_eq(fake_count(fallback), 5);
}

Test(failover_bench, s05_a_reset_before_the_head_fails_over)
{
    fault_fails_over_at_once((fake_reply_t){.action = FAKE_RESET_BEFORE_HEAD});
}

/* ---- S06-S11: slow, cut and odd streams ----------------------------------------------------- */

Test(failover_bench, s06_a_primary_that_never_answers_is_bounded_by_the_idle_timeout)
{
    start("wait_secs: 120, idle_timeout_secs: 1", false, NULL);
    fake_push(primary, (fake_reply_t){.action = FAKE_HANG});
    fake_set_default(fallback, chat_ok());
    int64_t sent = now_ms();
    int64_t ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_eq(fake_count(primary), 1);
    cr_assert_eq(fake_count(fallback), 1);
    /* As in the hedge's test below: the fake may read the primary late, so the bound below is from the send.
     */
    int64_t after_sent = arrival(fallback, 0) - sent, gap = arrival(fallback, 0) - arrival(primary, 0);
    cr_assert_geq(after_sent, 990, "the fallback was asked %lld ms after the client sent",
                  (long long)after_sent);
    cr_assert_lt(gap, 2500, "the fallback was asked %lld ms after the primary", (long long)gap);
    cr_assert_lt(ms, 3000);
}

Test(failover_bench, s07_a_slow_first_token_is_waited_for_and_served_whole)
{
    start(NULL, false, NULL);
    /* 300 ms before the head and between events: the first content comes after about 0.9 s. */
    fake_reply_t slow = chat_ok();
    slow.delay_ms = 300;
    fake_push(primary, slow);
    fake_set_default(fallback, chat_ok());
    int64_t ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_eq(fake_count(primary), 1);
    cr_assert_eq(fake_count(fallback), 0, "no hedge unless first_token_secs asks for it");
    cr_assert_geq(ms, 800);
}

Test(failover_bench, s08_a_stream_cut_after_content_ends_with_an_error_never_a_clean_end)
{
    start(NULL, false, NULL);
    size_t cut = 0;
    char *stream = token_stream(60, &cut);
    fake_reply_t r = sse_body(stream);
    r.cut_after = cut;
    fake_push(primary, r);
    fake_set_default(fallback, chat_ok());
    int64_t ms = post_chat(NULL);
    cr_assert_eq(res.status, 200);
    cr_assert_not_null(memmem(res.body, res.body_len, "\"t39 \"", 6), "the 40 tokens reached the client");
    cr_assert_null(memmem(res.body, res.body_len, "\"t40 \"", 6));
    cr_assert_null(memmem(res.body, res.body_len, "[DONE]", 6), "no clean end");
    cr_assert_not_null(memmem(res.body, res.body_len, "data: {\"error\"", 14), "an error event: %s",
                       res.body + (res.body_len > 600 ? res.body_len - 600 : 0));
    cr_assert_eq(fake_count(fallback), 0, "content went out: nothing to fail over");
    cr_assert_lt(ms, 2000);
    free(stream);
}

Test(failover_bench, s09_a_stream_silent_after_content_ends_with_an_error_at_the_idle_timeout)
{
    start("wait_secs: 120, idle_timeout_secs: 1", false, NULL);
    char *stream = token_stream(60, NULL);
    /* The opening and the first 20 tokens, then silence. */
    char *twentieth = strstr(stream, "\"t19 \"");
    cr_assert_not_null(twentieth);
    strstr(twentieth, "\n\n")[2] = '\0';
    fake_push(primary, (fake_reply_t){.action = FAKE_SILENT_AFTER_HEAD,
                                      .status = 200,
                                      .headers = SSE_HEADER,
                                      .body = stream,
                                      .chunked = true});
    fake_set_default(fallback, chat_ok());
    int64_t ms = post_chat(NULL);
    cr_assert_eq(res.status, 200);
    cr_assert_not_null(memmem(res.body, res.body_len, "\"t19 \"", 6), "%s", res.body);
    cr_assert_null(memmem(res.body, res.body_len, "[DONE]", 6));
    cr_assert_not_null(memmem(res.body, res.body_len, "data: {\"error\"", 14));
    cr_assert(ms >= 950 && ms < 3000, "%lld ms", (long long)ms);
    cr_assert_eq(fake_count(fallback), 0);
    free(stream);
}

Test(failover_bench, s10_an_invalid_json_event_passes_through_and_harms_nothing)
{
    start(NULL, false, NULL);
    char *stream = token_stream(12, NULL);
    /* The tenth event (the ninth content chunk) becomes invalid JSON; the rest is as it was. */
    char *tenth = strstr(stream, "\"t8 \"");
    cr_assert_not_null(tenth);
    memcpy(tenth - 12, "{{{{{{{{{{{{", 12);
    fake_push(primary, sse_body(stream));
    fake_set_default(primary, chat_ok());
    post_chat(NULL);
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(res.body, stream, "passed through as sent");
    post_chat(NULL);
    assert_complete_chat();
    free(stream);
}

Test(failover_bench, s11_a_complete_stream_without_done_is_finalised_promptly_with_usage)
{
    start(NULL, false, NULL);
    const char *ok = fixture("chat-ok.sse", NULL);
    const char *done = strstr(ok, "data: [DONE]");
    cr_assert_not_null(done);
    char *without = strndup(ok, (size_t)(done - ok));
    fake_push(primary, sse_body(without));
    int64_t ms = post_chat(NULL);
    cr_assert_eq(res.status, 200);
    cr_assert_eq(strncmp(res.body, without, strlen(without)), 0, "every event reached the client: %s",
                 res.body);
    cr_assert_lt(ms, 1000, "finalised when the upstream ended, not at a timeout");
    stop_sluice();
    cr_assert_eq(db("SELECT usage_output FROM requests"), 5, "the usage of its last chunk");
    cr_assert_eq(db("SELECT count(*) FROM requests WHERE outcome = 'served'"), 1);
    free(without);
}

/* ---- S12-S14: the client's own errors ------------------------------------------------------- */

Test(failover_bench, s12_a_context_length_error_is_handed_back_without_context_fallback)
{
    start(NULL, false, NULL);
    const char *ctx = fixture("chat-400-context-length.json", NULL);
    fake_push(primary, status(400, JSON_HEADER, ctx));
    fake_set_default(fallback, chat_ok());
    post_chat(NULL);
    cr_assert_eq(res.status, 400);
    cr_assert_str_eq(res.body, ctx, "unchanged");
    cr_assert_eq(fake_count(fallback), 0);
    cr_assert_eq(fake_count(big), 0);
}

Test(failover_bench, s12_a_context_length_error_goes_on_to_the_routes_context_fallback)
{
    start(NULL, true, NULL);
    fake_push(primary, status(400, JSON_HEADER, fixture("chat-400-context-length.json", NULL)));
    fake_set_default(fallback, chat_ok());
    fake_set_default(big, chat_ok());
    int64_t ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_lt(ms, 1500);
    cr_assert_eq(fake_count(primary), 1);
    cr_assert_eq(fake_count(fallback), 0, "the context_fallback replaces the rest of the route");
    cr_assert_eq(fake_count(big), 1);
    fake_request_t sent;
    cr_assert(fake_request(big, 0, &sent));
    cr_assert_not_null(strstr(sent.body, "\"model\":\"gpt-x-1m\""), "the larger model: %s", sent.body);
    /* Any other request error is still handed back at once. */
    const char *bad =
        "{\"error\":{\"message\":\"Invalid value for 'temperature'\",\"type\":\"invalid_request_error\","
        "\"param\":\"temperature\",\"code\":\"invalid_value\"}}";
    fake_push(primary, status(400, JSON_HEADER, bad));
    post_chat("x-sluice-session: another\r\n");
    cr_assert_eq(res.status, 400);
    cr_assert_str_eq(res.body, bad);
    cr_assert_eq(fake_count(big), 1);
    stop_sluice();
    cr_assert_eq(
        db("SELECT count(*) FROM attempts WHERE provider = 'primary' AND reason = 'context_fallback'"), 1);
    cr_assert_eq(db("SELECT count(*) FROM requests WHERE provider = 'big' AND status = 200"), 1);
}

Test(failover_bench, s12_the_context_fallbacks_own_context_error_is_handed_back)
{
    start(NULL, true, NULL);
    const char *ctx = fixture("chat-400-context-length.json", NULL);
    fake_set_default(primary, status(400, JSON_HEADER, ctx));
    fake_set_default(big, status(400, JSON_HEADER, ctx));
    post_chat(NULL);
    cr_assert_eq(res.status, 400);
    cr_assert_str_eq(res.body, ctx);
    cr_assert_eq(fake_count(primary), 1);
    cr_assert_eq(fake_count(big), 1, "tried once, not again");
    cr_assert_eq(fake_count(fallback), 0);
}

Test(failover_bench, s13_a_content_policy_refusal_is_handed_back_once_with_its_reason)
{
    start(NULL, true, NULL);
    const char *policy =
        "{\"error\":{\"message\":\"Your request was rejected as a result of our safety system.\","
        "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"content_policy_violation\"}}";
    fake_push(primary, status(400, JSON_HEADER, policy));
    fake_set_default(fallback, chat_ok());
    post_chat(NULL);
    cr_assert_eq(res.status, 400);
    cr_assert_str_eq(res.body, policy);
    cr_assert_eq(fake_count(primary), 1);
    cr_assert_eq(fake_count(fallback), 0);
    cr_assert_eq(fake_count(big), 0, "not a context-length error");
}

Test(failover_bench, s14_a_cut_stream_never_turns_into_a_prefill_request)
{
    start(NULL, false, NULL);
    /* Cut before content: the fallback gets the client's own request, no assistant prefill added. */
    size_t cut = 0;
    char *stream = token_stream(60, &cut);
    fake_reply_t opening = sse_body(stream);
    opening.cut_after = strstr(stream, "\n\n") - stream + 2;
    fake_push(primary, opening);
    fake_set_default(fallback, chat_ok());
    post_chat(NULL);
    assert_complete_chat();
    fake_request_t sent;
    cr_assert(fake_request(fallback, 0, &sent));
    cr_assert_str_eq(sent.body, chat_body);
    /* Cut after content: the client gets the real error in its stream; nothing goes to the fallback. */
    fake_reply_t late = sse_body(stream);
    late.cut_after = cut;
    fake_push(primary, late);
    post_chat("x-sluice-session: s14-late\r\n");
    cr_assert_eq(res.status, 200);
    cr_assert_not_null(memmem(res.body, res.body_len, "data: {\"error\"", 14));
    cr_assert_eq(fake_count(fallback), 1, "no continuation request");
    free(stream);
}

/* ---- S15, S16: the outage and after ---------------------------------------------------------- */

/*
 * S15, scaled: a conversation on the primary; the primary answers 503 (its breaker opens after three
 * failures, for 1 s); then it is healthy, and the conversation's first request after the pause goes back to
 * it (as the half-open breaker's probe). A probe that fails still fails over invisibly.
 */
Test(failover_bench, s15_a_conversation_goes_back_to_the_primary_after_its_outage)
{
    start("wait_secs: 120, failures_to_pause: 3, pause_secs: 1, max_pause_secs: 2", false, "0.01");
    const char *conv = "x-sluice-session: s15\r\n";
    fake_set_default(primary, chat_ok());
    fake_set_default(fallback, chat_ok());
    post_chat(conv);
    assert_complete_chat();
    cr_assert_eq(fake_count(primary), 1, "the conversation starts on the primary");

    /*
     * The outage: the conversation stays on the primary and retries it (20 and 40 ms, scaled) until its
     * third failure opens the breaker; then it lets go, the fallback serves, and it stays there.
     */
    fake_set_default(primary, status(503, JSON_HEADER, SERVER_ERROR));
    for (int i = 0; i < 5; i++) {
        post_chat(conv);
        assert_complete_chat();
    }
    cr_assert_eq(fake_count(primary), 4, "three failures open the breaker; then the conversation stays put");
    cr_assert_eq(fake_count(fallback), 5);

    /* The pause ends while the primary still fails: the request is its probe, held, and fails over. */
    usleep(1100 * 1000);
    post_chat(conv);
    assert_complete_chat();
    cr_assert_eq(fake_count(primary), 5, "the probe");
    cr_assert_eq(fake_count(fallback), 6);
    post_chat(conv);
    cr_assert_eq(fake_count(primary), 5, "open again (2 s): not asked");

    /* Healthy again: the first request after the pause is back on the primary, and stays there. */
    fake_set_default(primary, chat_ok());
    usleep(2100 * 1000);
    post_chat(conv);
    assert_complete_chat();
    cr_assert_eq(fake_count(primary), 6, "back on the primary within one request of the pause's end");
    cr_assert_eq(fake_count(fallback), 7);
    post_chat(conv);
    assert_complete_chat();
    cr_assert_eq(fake_count(primary), 7);
    cr_assert_eq(fake_count(fallback), 7, "it stays on the primary");

    stop_sluice();
    char trail[1024];
    cr_assert(
        db_text(temp_file_path(1),
                "SELECT group_concat(provider || ':' || outcome || ':' || coalesce(reason, '-'), ' ') FROM "
                "(SELECT * FROM attempts ORDER BY request_row, n)",
                trail, sizeof(trail)));
    cr_log_info("attempts: %s", trail);
    cr_assert_eq(db("SELECT count(*) FROM attempts WHERE provider = 'primary' AND reason = 'back_to_earlier' "
                    "AND outcome = 'served'"),
                 1, "the row says why it went back");
    cr_assert_eq(db("SELECT count(*) FROM attempts WHERE provider = 'primary' AND reason = 'pinned_retry'"),
                 2, "%s", trail);
    cr_assert_eq(db("SELECT count(*) FROM attempts WHERE provider = 'primary' AND reason = 'next_candidate'"),
                 2, "the outage's third failure, and the failed probe");
    cr_assert_eq(db("SELECT count(*) FROM requests WHERE status = 200"), 10);
}

Test(failover_bench, s16_the_client_sees_the_fallbacks_model_and_usage_and_failures_are_not_billed)
{
    start("wait_secs: 120", false, NULL);
    const char *ok = fixture("chat-ok.sse", NULL);
    /* The fallback names its own model in every chunk. */
    size_t len = strlen(ok);
    char *mini = malloc(len * 2);
    size_t at = 0;
    for (const char *p = ok; *p;) {
        if (strncmp(p, "\"model\":\"gpt-x\"", 15) == 0) {
            at += (size_t)sprintf(mini + at, "\"model\":\"gpt-x-mini\"");
            p += 15;
        } else {
            mini[at++] = *p++;
        }
    }
    mini[at] = '\0';
    fake_set_default(primary, status(503, JSON_HEADER, SERVER_ERROR));
    fake_set_default(fallback, sse_body(mini));
    post_chat(NULL);
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(res.body, mini, "the fallback's model name and usage, as it sent them");
    stop_sluice();
    cr_assert_eq(db("SELECT count(*) FROM requests WHERE provider = 'fallback' AND usage_output = 5"), 1);
    cr_assert_eq(db("SELECT count(*) FROM attempts WHERE provider = 'primary' AND status = 503"), 1);
    cr_assert_eq(db("SELECT coalesce(sum(tokens), 0) FROM usage_buckets WHERE name = 'primary'"), 0,
                 "the failed attempt used no tokens");
    free(mini);
}

/* ---- the first-token hedge (behaviour.md §4): S06 and S07 with failover.first_token_secs ----------- */

/* Every attempt of every request, in order, as "provider:outcome:reason" (after stop_sluice). */
static const char *
attempt_trail(void)
{
    static char trail[1024];
    cr_assert(
        db_text(temp_file_path(1),
                "SELECT group_concat(provider || ':' || outcome || ':' || coalesce(reason, '-'), ' ') FROM "
                "(SELECT * FROM attempts ORDER BY request_row, n)",
                trail, sizeof(trail)));
    return trail;
}

/* A Chat stream's head and opening chunk (no content yet), then silence. */
static fake_reply_t
opening_then_silence(void)
{
    static char opening[1024];
    const char *ok = fixture("chat-ok.sse", NULL);
    const char *end = strstr(ok, "\n\n");
    snprintf(opening, sizeof(opening), "%.*s", (int)(end + 2 - ok), ok);
    return (fake_reply_t){.action = FAKE_SILENT_AFTER_HEAD,
                          .status = 200,
                          .headers = SSE_HEADER,
                          .body = opening,
                          .chunked = true};
}

Test(failover_bench, s06_hedged_a_silent_primary_costs_first_token_secs_not_the_idle_timeout)
{
    start("wait_secs: 120, first_token_secs: 1", false, NULL);
    fake_push(primary, (fake_reply_t){.action = FAKE_HANG});
    fake_set_default(fallback, chat_ok());
    int64_t sent = now_ms();
    int64_t ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_eq(fake_count(primary), 1);
    cr_assert_eq(fake_count(fallback), 1);
    /*
     * Not sooner than first_token_secs after the client sent it (its hop
     * started later still); not much later than that after the first hop
     * came. The fake may read the first hop late on a loaded machine (a
     * sanitizer run in CI read it 81 ms late), so that gap is no lower bound.
     */
    int64_t after_sent = arrival(fallback, 0) - sent, gap = arrival(fallback, 0) - arrival(primary, 0);
    cr_assert_geq(after_sent, 990, "the hedge went out %lld ms after the client sent", (long long)after_sent);
    cr_assert_lt(gap, 1600, "the hedge went out %lld ms after the first hop", (long long)gap);
    cr_assert_lt(ms, 2000, "within first_token_secs + 1 s");
    stop_sluice();
    cr_assert_str_eq(attempt_trail(), "primary:hedge_lost:- fallback:served:-");
    cr_assert_eq(db("SELECT count(*) FROM requests WHERE provider = 'fallback' AND status = 200"), 1);
    cr_assert_eq(db("SELECT count(*) FROM attempts WHERE provider = 'fallback' AND hedge = 1"), 1,
                 "the row says the second hop was the hedge");
    cr_assert_eq(db("SELECT count(*) FROM attempts WHERE hedge IS NULL"), 1, "and the first one was not");
}

Test(failover_bench, s07_hedged_a_20_s_first_token_loses_to_the_fallback)
{
    start("wait_secs: 120, first_token_secs: 1", false, NULL);
    /* The head after 10 s, the first content after 20 s. */
    fake_reply_t slow = chat_ok();
    slow.delay_ms = 10000;
    fake_push(primary, slow);
    fake_set_default(fallback, chat_ok());
    int64_t ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_lt(ms, 2000, "within first_token_secs + 1 s");
    stop_sluice();
    cr_assert_str_eq(attempt_trail(), "primary:hedge_lost:- fallback:served:-");
}

Test(failover_bench, hedge_an_opening_without_content_is_not_content_and_the_client_sees_one_stream)
{
    start("wait_secs: 120, first_token_secs: 1", false, NULL);
    fake_push(primary, opening_then_silence());
    fake_set_default(fallback, chat_ok());
    int64_t ms = post_chat(NULL);
    /* Exactly the fallback's stream: the primary's held opening chunk never reached the client. */
    assert_complete_chat();
    cr_assert(ms >= 950 && ms < 2000, "%lld ms", (long long)ms);
    stop_sluice();
    cr_assert_str_eq(attempt_trail(), "primary:hedge_lost:- fallback:served:-");
}

Test(failover_bench, hedge_a_slow_first_hop_that_is_faster_than_its_hedge_wins)
{
    start("wait_secs: 120, first_token_secs: 1", false, NULL);
    /* Content after 1.8 s from the primary; after 5 s from the hedge (sent at 1 s). */
    fake_reply_t slow = chat_ok();
    slow.delay_ms = 900;
    fake_push(primary, slow);
    fake_reply_t slower = chat_ok();
    slower.delay_ms = 2500;
    fake_set_default(fallback, slower);
    post_chat(NULL);
    assert_complete_chat();
    cr_assert_eq(fake_count(fallback), 1, "the hedge went out");
    stop_sluice();
    cr_assert_str_eq(attempt_trail(), "primary:served:- fallback:hedge_lost:-");
    cr_assert_eq(db("SELECT count(*) FROM requests WHERE provider = 'primary' AND status = 200"), 1);
}

Test(failover_bench, hedge_none_when_the_later_candidate_is_paused)
{
    start("wait_secs: 120, first_token_secs: 1", false, NULL);
    /* First the fallback answers a 429 (after the primary's 500): it pauses for a minute. */
    fake_push(primary, status(500, JSON_HEADER, SERVER_ERROR));
    fake_push(fallback, status(429, JSON_HEADER "retry-after: 60\r\n", RATE_LIMITED));
    fake_push(primary, chat_ok());
    post_chat(NULL);
    assert_complete_chat();
    cr_assert_eq(fake_count(fallback), 1);
    /* Then a slow primary (content after 1.6 s): the paused fallback cannot take a hedge now. */
    fake_reply_t slow = chat_ok();
    slow.delay_ms = 800;
    fake_push(primary, slow);
    fake_set_default(fallback, chat_ok());
    int64_t ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_geq(ms, 1500);
    cr_assert_eq(fake_count(fallback), 1, "no hedge to a paused upstream");
    stop_sluice();
    cr_assert_eq(db("SELECT count(*) FROM attempts WHERE outcome = 'hedge_lost'"), 0, "%s", attempt_trail());
}

Test(failover_bench, hedge_never_for_the_last_candidate)
{
    start("wait_secs: 120, first_token_secs: 1", false, NULL);
    fake_push(primary, status(500, JSON_HEADER, SERVER_ERROR));
    fake_reply_t slow = chat_ok();
    slow.delay_ms = 800;
    fake_push(fallback, slow);
    int64_t ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_geq(ms, 1500);
    cr_assert_eq(fake_count(primary), 1, "the last candidate is not hedged (not even back to the first)");
    cr_assert_eq(fake_count(fallback), 1);
}

Test(failover_bench, hedge_both_hops_failing_go_on_to_the_usual_retry_round)
{
    start("wait_secs: 120, first_token_secs: 1", false, NULL);
    /* The primary fails at 1.5 s (its hedge is out), the hedge at 1.8 s after it went out: a retry round. */
    fake_reply_t late_503 = status(503, JSON_HEADER, SERVER_ERROR);
    late_503.delay_ms = 1500;
    fake_push(primary, late_503);
    fake_reply_t later_503 = status(503, JSON_HEADER, SERVER_ERROR);
    later_503.delay_ms = 1800;
    fake_push(fallback, later_503);
    fake_set_default(primary, chat_ok());
    fake_set_default(fallback, chat_ok());
    post_chat(NULL);
    assert_complete_chat();
    cr_assert_eq(fake_count(primary), 2);
    cr_assert_eq(fake_count(fallback), 1);
    stop_sluice();
    cr_assert_str_eq(attempt_trail(),
                     "primary:status:hedge_goes_on fallback:status:retry_round primary:served:-");
}

Test(failover_bench, hedge_that_fails_leaves_the_first_hop_running)
{
    start("wait_secs: 120, first_token_secs: 1", false, NULL);
    fake_reply_t slow = chat_ok();
    slow.delay_ms = 1000;
    fake_push(primary, slow);
    fake_push(fallback, status(503, JSON_HEADER, SERVER_ERROR));
    int64_t ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_geq(ms, 1900);
    cr_assert_eq(fake_count(primary), 1);
    cr_assert_eq(fake_count(fallback), 1, "no second hedge");
    stop_sluice();
    cr_assert_str_eq(attempt_trail(), "primary:served:- fallback:status:hedge_failed");
}

Test(failover_bench, hedge_a_routes_own_first_token_secs_overrides_failovers)
{
    route_extra = ", first_token_secs: 1";
    start("wait_secs: 120", false, NULL);
    fake_push(primary, (fake_reply_t){.action = FAKE_HANG});
    fake_set_default(fallback, chat_ok());
    int64_t ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_lt(ms, 2000);
    proc_kill(&proc);

    route_extra = ", first_token_secs: 0";
    start("wait_secs: 120, first_token_secs: 1, idle_timeout_secs: 2", false, NULL);
    fake_push(primary, (fake_reply_t){.action = FAKE_HANG});
    ms = post_chat(NULL);
    assert_complete_chat();
    cr_assert_geq(ms, 1900, "the route turned the hedge off: the idle timeout decides");
}

Test(failover_bench, hedge_of_a_whole_answer_is_won_by_the_first_2xx_head)
{
    start("wait_secs: 120, first_token_secs: 1", false, NULL);
    fake_push(primary, (fake_reply_t){.action = FAKE_HANG});
    static const char whole[] =
        "{\"id\":\"c2\",\"object\":\"chat.completion\",\"model\":\"gpt-x\",\"choices\":[{"
        "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},"
        "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,"
        "\"completion_tokens\":1,\"total_tokens\":4}}";
    fake_set_default(fallback, status(200, JSON_HEADER, whole));
    int64_t t0 = now_ms();
    cr_assert(http_request_h(port, "POST", "/v1/chat/completions", CHAT_HEADERS,
                             "{\"model\":\"gpt-x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                             &res));
    int64_t ms = now_ms() - t0;
    cr_assert_eq(res.status, 200, "%s", res.body);
    cr_assert_str_eq(res.body, whole);
    cr_assert_lt(ms, 2000);
    stop_sluice();
    cr_assert_str_eq(attempt_trail(), "primary:hedge_lost:- fallback:served:-");
}

Test(failover_bench, hedge_the_losers_reservation_is_released)
{
    /* Room for one request's estimate (about 1 030 tokens) a minute, not for two. */
    fallback_extra = ", limits: [{per: minute, tokens: 1500}]";
    start("wait_secs: 120, first_token_secs: 1", false, NULL);
    static const char body[] =
        "{\"model\":\"gpt-x\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"max_tokens\":1000,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    fake_reply_t slow = chat_ok();
    slow.delay_ms = 900;
    fake_push(primary, slow);
    fake_reply_t slower = chat_ok();
    slower.delay_ms = 3000;
    fake_push(fallback, slower);
    cr_assert(http_request_h(port, "POST", "/v1/chat/completions", CHAT_HEADERS, body, &res));
    assert_complete_chat();
    cr_assert_eq(fake_count(fallback), 1, "the hedge went out, with its own reservation");
    /* The next request (another conversation) fails over to the fallback: the losing hedge's estimate no
     * longer holds its window. */
    static const char other[] =
        "{\"model\":\"gpt-x\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"max_tokens\":1000,\"messages\":[{\"role\":\"user\",\"content\":\"hey\"}]}";
    fake_push(primary, status(500, JSON_HEADER, SERVER_ERROR));
    fake_set_default(fallback, chat_ok());
    http_response_free(&res);
    int64_t t0 = now_ms();
    cr_assert(http_request_h(port, "POST", "/v1/chat/completions", CHAT_HEADERS, other, &res));
    assert_complete_chat();
    cr_assert_lt(now_ms() - t0, 1500, "admitted at once, not held for a full window");
    cr_assert_eq(fake_count(fallback), 2);
}
