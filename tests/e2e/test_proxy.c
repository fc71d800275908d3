#define _GNU_SOURCE /* memmem */
/*
 * The data plane end to end: the real sluice between a client on 127.0.0.1
 * and scriptable fake upstreams. Asserts the bytes the client got and what
 * the upstreams received.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake_upstream.h"
#include "harness.h"

static proc_t proc;
static fake_upstream_t *up1, *up2;

static http_response_t res;
static uint16_t port;

static void
setup(void)
{
    up1 = fake_start(NULL, NULL, false);
    up2 = fake_start(NULL, NULL, false);
}

static void
teardown(void)
{
    proc_kill(&proc);
    if (up1 != NULL)
        fake_stop(up1);
    fake_stop(up2);
    http_response_free(&res);
    remove_temp_files();
}

TestSuite(proxy, .init = setup, .fini = teardown, .timeout = 60);

#define GATEWAY_KEY       "gw-test-key-0001"
#define ANTHROPIC_HEADERS "x-api-key: " GATEWAY_KEY "\r\nanthropic-version: 2023-06-01\r\n"
#define BEARER_HEADERS    "authorization: Bearer " GATEWAY_KEY "\r\n"

/* Starts sluice with two upstreams of one protocol, in failover order unless routes say otherwise. */
static void
start_gateway_full(const char *protocol, const char *up1_fields, const char *failover_fields,
                   const char *extra)
{
    char yaml[4096];
    snprintf(
        yaml, sizeof(yaml),
        "listen:\n"
        "  gateway: {bind: 127.0.0.1, port: 0}\n"
        "  control: {port: 0}\n"
        "clients:\n"
        "  - {name: tester, key: \"" GATEWAY_KEY "\"}\n"
        "providers:\n"
        "  - {name: up1, protocol: %s, base_url: \"http://127.0.0.1:%u/prefix\", key: upstream-key-one%s}\n"
        "  - {name: up2, protocol: %s, base_url: \"http://127.0.0.1:%u\", key: upstream-key-two}\n"
        "failover: {wait_secs: 0%s}\n"
        "store: {path: %s}\n"
        "%s",
        protocol, fake_port(up1), up1_fields, protocol, fake_port(up2), failover_fields,
        write_temp_file(1, ""), extra ? extra : "");
    const char *path = write_temp_file(0, yaml);
    /* At debug level sluice logs every event of its bus: the tests read them there. */
    const char *args[] = {"--config", path, "--threads", "2", "--log-level", "debug", NULL};
    proc_start(&proc, args);
    port = proc_wait_port(&proc, 5000);
    cr_assert_neq(port, 0, "sluice did not start:\n%s", proc.log);
}

static void
start_gateway_with(const char *protocol, const char *up1_fields, const char *extra)
{
    start_gateway_full(protocol, up1_fields, "", extra);
}

static void
start_gateway(const char *protocol, const char *extra)
{
    start_gateway_full(protocol, "", "", extra);
}

static fake_reply_t
sse_reply(const char *fixture_name)
{
    return (fake_reply_t){
        .status = 200,
        .headers = "content-type: text/event-stream; charset=utf-8\r\nrequest-id: req_fake\r\n",
        .body = fixture(fixture_name, NULL),
        .chunked = true,
    };
}

static const char anthropic_body[] = "{\"model\":\"claude-x\",\"max_tokens\":64,\"stream\":true,\"messages\":"
                                     "[{\"role\":\"user\",\"content\":\"hi\"}]}";

/* A body that starts its own conversation (affinity keys on the first user message). */
static const char *
fresh_body(int i)
{
    static char body[256];
    snprintf(body, sizeof(body),
             "{\"model\":\"claude-x\",\"max_tokens\":64,\"stream\":true,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"question %d\"}]}",
             i);
    return body;
}

Test(proxy, anthropic_stream_passes_through_byte_for_byte)
{
    start_gateway("anthropic", NULL);
    fake_push(up1, sse_reply("anthropic-ok.sse"));
    cr_assert(
        http_request_h(port, "POST", "/v1/messages?beta=true", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert_eq(res.status, 200, "%s\n%s", res.headers, res.body);
    cr_assert_str_eq(res.body, fixture("anthropic-ok.sse", NULL));
    cr_assert(res.complete);

    fake_request_t r;
    cr_assert(fake_request(up1, 0, &r));
    cr_assert_str_eq(r.path, "/prefix/v1/messages?beta=true", "the relay prefix and the query are kept");
    cr_assert_str_eq(r.body, anthropic_body);
    char v[256];
    cr_assert(fake_header(up1, 0, "x-api-key", v, sizeof(v)));
    cr_assert_str_eq(v, "upstream-key-one", "the upstream gets its own key, never the client's");
    cr_assert(fake_header(up1, 0, "anthropic-version", v, sizeof(v)));
    cr_assert(fake_header(up1, 0, "accept-encoding", v, sizeof(v)));
    cr_assert_str_eq(v, "identity");
    cr_assert_eq(fake_count(up2), 0);
}

Test(proxy, chat_and_responses_streams_pass_through)
{
    start_gateway("openai-chat", NULL);
    fake_push(up1, sse_reply("chat-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/chat/completions", BEARER_HEADERS,
                             "{\"model\":\"gpt-x\",\"stream\":true,\"messages\":[]}", &res));
    cr_assert_eq(res.status, 200, "%s", res.body);
    cr_assert_str_eq(res.body, fixture("chat-ok.sse", NULL));
    char v[256];
    cr_assert(fake_header(up1, 0, "authorization", v, sizeof(v)));
    cr_assert_str_eq(v, "Bearer upstream-key-one");
}

Test(proxy, responses_stream_passes_through)
{
    start_gateway("openai-responses", NULL);
    fake_push(up1, sse_reply("responses-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/responses", BEARER_HEADERS,
                             "{\"model\":\"gpt-x\",\"stream\":true,\"input\":\"hi\"}", &res));
    cr_assert_eq(res.status, 200, "%s", res.body);
    cr_assert_str_eq(res.body, fixture("responses-ok.sse", NULL));
}

Test(proxy, whole_json_answer_passes_through)
{
    start_gateway("anthropic", NULL);
    const char *answer =
        "{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}";
    fake_push(up1, (fake_reply_t){.status = 200,
                                  .headers = "content-type: application/json\r\nserver: upstream/1.0\r\n",
                                  .body = answer});
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS,
                             "{\"model\":\"claude-x\",\"max_tokens\":5,\"messages\":[]}", &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(res.body, answer);
    char v[64];
    cr_assert(http_header(&res, "content-type", v, sizeof(v)));
    cr_assert_str_eq(v, "application/json");
    cr_assert_not(http_header(&res, "server", v, sizeof(v)), "neither the upstream's nor a gateway's: %s", v);
}

Test(proxy, fails_over_on_503)
{
    start_gateway("anthropic", NULL);
    fake_push(up1,
              (fake_reply_t){
                  .status = 503,
                  .headers = "content-type: application/json\r\n",
                  .body = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"down\"}}"});
    fake_push(up2, sse_reply("anthropic-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert_eq(res.status, 200, "%s", res.body);
    cr_assert_str_eq(res.body, fixture("anthropic-ok.sse", NULL));
    cr_assert_eq(fake_count(up1), 1);
    cr_assert_eq(fake_count(up2), 1);
    cr_assert(proc_wait_log(&proc, "event request_finished id=1 status=200", 2000), "%s", proc.log);
    cr_assert(strstr(proc.log, "event attempt id=1 provider=up1 outcome=status status=503") != NULL, "%s",
              proc.log);
    cr_assert(strstr(proc.log, "event attempt id=1 provider=up2 outcome=served status=200") != NULL, "%s",
              proc.log);
}

Test(proxy, fails_over_when_the_connection_is_refused)
{
    /* A port that refuses connections, held for the whole test. */
    uint16_t closed;
    int held = hold_refusing_port(&closed);
    cr_assert_geq(held, 0);
    char extra[256];
    snprintf(extra, sizeof(extra), "routes:\n  - {match: \"*\", failover: [dead, up2]}\n");
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
             "clients: [{name: tester, key: \"" GATEWAY_KEY "\"}]\n"
             "providers:\n"
             "  - {name: dead, protocol: anthropic, base_url: \"http://127.0.0.1:%u\", key: k}\n"
             "  - {name: up2, protocol: anthropic, base_url: \"http://127.0.0.1:%u\", key: k}\n"
             "store: {path: %s}\n%s",
             closed, fake_port(up2), write_temp_file(1, ""), extra);
    const char *args[] = {"--config", write_temp_file(0, yaml), NULL};
    proc_start(&proc, args);
    port = proc_wait_port(&proc, 5000);
    fake_push(up2, sse_reply("anthropic-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert_eq(res.status, 200, "%s", res.body);
    cr_assert_str_eq(res.body, fixture("anthropic-ok.sse", NULL));
    close(held);
}

Test(proxy, fails_over_on_an_overload_inside_the_stream_before_content)
{
    start_gateway("anthropic", NULL);
    fake_push(up1, sse_reply("anthropic-overloaded-before-content.sse"));
    fake_push(up2, sse_reply("anthropic-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(res.body, fixture("anthropic-ok.sse", NULL), "the client never sees the first upstream");
}

Test(proxy, fails_over_when_a_stream_ends_after_opening_events_only)
{
    start_gateway("anthropic", NULL);
    fake_push(up1, sse_reply("anthropic-opening-only.sse"));
    fake_push(up2, sse_reply("anthropic-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert_str_eq(res.body, fixture("anthropic-ok.sse", NULL));
}

Test(proxy, request_errors_are_handed_back_without_failover)
{
    start_gateway("anthropic", NULL);
    const char *err =
        "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"bad\"}}";
    fake_push(up1, (fake_reply_t){.status = 400,
                                  .headers = "content-type: application/json\r\nx-up: 1\r\n",
                                  .body = err});
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert_eq(res.status, 400);
    cr_assert_str_eq(res.body, err);
    char v[64];
    cr_assert(http_header(&res, "x-up", v, sizeof(v)), "the upstream's own headers come along");
    cr_assert_eq(fake_count(up2), 0);
}

Test(proxy, the_last_candidates_error_is_handed_over_unchanged)
{
    start_gateway("anthropic", NULL);
    const char *e1 = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"one\"}}";
    const char *e2 = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"two\"}}";
    fake_push(up1,
              (fake_reply_t){.status = 500, .headers = "content-type: application/json\r\n", .body = e1});
    fake_push(up2,
              (fake_reply_t){.status = 502, .headers = "content-type: application/json\r\n", .body = e2});
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert_eq(res.status, 502);
    cr_assert_str_eq(res.body, e2);
}

Test(proxy, a_stream_cut_after_content_ends_with_an_in_stream_error)
{
    start_gateway("anthropic", NULL);
    size_t len;
    const char *ok = fixture("anthropic-ok.sse", &len);
    fake_reply_t r = sse_reply("anthropic-ok.sse");
    r.cut_after = (size_t)(strstr(ok, " from") - ok) + 40;
    fake_push(up1, r);
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert_eq(res.status, 200);
    cr_assert(strstr(res.body, "Hello") != NULL);
    cr_assert(strstr(res.body, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"") !=
                  NULL,
              "%s", res.body);
    cr_assert(strstr(res.body, "gw.upstream.broken_after_content") != NULL, "%s", res.body);
    cr_assert(res.complete, "the gateway ends its own stream properly");
    cr_assert_eq(fake_count(up2), 0, "nothing after content is failed over");
    cr_assert(proc_wait_log(&proc, "event request_failed id=1 code=gw.upstream.broken_after_content", 2000),
              "%s", proc.log);
}

Test(proxy, bad_key_malformed_json_and_oversize_bodies_get_errors_in_the_clients_format)
{
    start_gateway("anthropic", "limits: {max_body_bytes: 2048}\n");
    cr_assert(http_request_h(port, "POST", "/v1/messages", "x-api-key: wrong\r\n", anthropic_body, &res));
    cr_assert_eq(res.status, 401);
    cr_assert(strstr(res.body, "\"type\":\"error\",\"error\":{\"type\":\"authentication_error\"") != NULL,
              "%s", res.body);
    char v[128];
    cr_assert(http_header(&res, "x-sluice-error", v, sizeof(v)));

    cr_assert(
        http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, "{\"model\": \"claude-x\",", &res));
    cr_assert_eq(res.status, 400);
    cr_assert(strstr(res.body, "invalid_request_error") != NULL, "%s", res.body);

    cr_assert(http_request_h(port, "POST", "/v1/chat/completions", BEARER_HEADERS, "[1,2", &res));
    cr_assert_eq(res.status, 400);
    cr_assert(strstr(res.body, "{\"error\":{\"message\":\"sluice: ") != NULL, "OpenAI shape: %s", res.body);

    static char big[4096];
    memset(big, ' ', sizeof(big) - 1);
    big[0] = '{';
    big[sizeof(big) - 2] = '}';
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, big, &res));
    cr_assert_eq(res.status, 413);
    cr_assert(strstr(res.body, "request_too_large") != NULL, "%s", res.body);
    cr_assert_eq(fake_count(up1) + fake_count(up2), 0, "nothing bad reaches an upstream");
}

Test(proxy, model_map_rewrites_the_model_for_that_upstream_only)
{
    start_gateway_with("anthropic", ", model_map: {claude-x: claude-x-20250101}", NULL);
    fake_push(up1, (fake_reply_t){.status = 529,
                                  .headers = "content-type: application/json\r\n",
                                  .body = "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}"});
    fake_push(up2, sse_reply("anthropic-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert_eq(res.status, 200);
    fake_request_t r1, r2;
    cr_assert(fake_request(up1, 0, &r1));
    cr_assert(fake_request(up2, 0, &r2));
    cr_assert(strstr(r1.body, "\"model\":\"claude-x-20250101\"") != NULL, "%s", r1.body);
    cr_assert_str_eq(r2.body, anthropic_body, "the other upstream gets the client's body untouched");
}

Test(proxy, models_list_answers_in_the_clients_shape)
{
    start_gateway_with("anthropic", ", models: [claude-x, \"claude-y-*\"]", NULL);
    cr_assert(http_request_h(port, "GET", "/v1/models", ANTHROPIC_HEADERS, NULL, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(res.body,
                     "{\"data\":[{\"type\":\"model\",\"id\":\"claude-x\",\"display_name\":\"claude-x\"}],"
                     "\"has_more\":false}");
}

Test(proxy, breaker_opens_after_three_failures_and_the_next_request_skips_the_upstream)
{
    start_gateway("anthropic", NULL);
    const char *down = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"down\"}}";
    fake_set_default(
        up1, (fake_reply_t){.status = 500, .headers = "content-type: application/json\r\n", .body = down});
    fake_set_default(up2, sse_reply("anthropic-ok.sse"));
    for (int i = 0; i < 3; i++) {
        cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, fresh_body(i), &res));
        cr_assert_eq(res.status, 200);
    }
    cr_assert_eq(fake_count(up1), 3);
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, fresh_body(3), &res));
    cr_assert_eq(res.status, 200);
    cr_assert_eq(fake_count(up1), 3, "the cooling upstream is skipped");
    cr_assert_eq(fake_count(up2), 4);
    cr_assert(proc_wait_log(&proc, "upstream up1: breaker open", 2000), "%s", proc.log);
}

Test(proxy, all_cooling_fails_open)
{
    start_gateway("anthropic", NULL);
    const char *down = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"down\"}}";
    fake_set_default(
        up1, (fake_reply_t){.status = 500, .headers = "content-type: application/json\r\n", .body = down});
    fake_set_default(
        up2, (fake_reply_t){.status = 502, .headers = "content-type: application/json\r\n", .body = down});
    for (int i = 0; i < 3; i++)
        cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, fresh_body(i), &res));
    cr_assert_eq(fake_count(up1), 3);
    cr_assert_eq(fake_count(up2), 3);
    fake_set_default(up1, sse_reply("anthropic-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, fresh_body(3), &res));
    cr_assert_eq(res.status, 200, "both cooling: both are tried, and the first one now serves");
    cr_assert_eq(fake_count(up1), 4);
}

Test(proxy, load_balance_spreads_by_weight)
{
    start_gateway("anthropic", "routes:\n  - {match: \"*\", load_balance: [up1, {name: up2, weight: 3}]}\n");
    fake_set_default(up1, sse_reply("anthropic-ok.sse"));
    fake_set_default(up2, sse_reply("anthropic-ok.sse"));
    for (int i = 0; i < 8; i++) {
        cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, fresh_body(i), &res));
        cr_assert_eq(res.status, 200);
    }
    cr_assert_eq(fake_count(up1), 2);
    cr_assert_eq(fake_count(up2), 6);
}

Test(proxy, http2_clients_are_served)
{
    start_gateway("anthropic", NULL);
    fake_push(up1, sse_reply("anthropic-ok.sse"));
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 10 --http2-prior-knowledge -o - -w '\\n%%{http_version} %%{http_code}' "
             "-H 'x-api-key: " GATEWAY_KEY "' -d '%s' http://127.0.0.1:%u/v1/messages",
             anthropic_body, port);
    FILE *p = popen(cmd, "r");
    static char out[1 << 16];
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    pclose(p);
    cr_assert(strstr(out, fixture("anthropic-ok.sse", NULL)) != NULL, "%s", out);
    cr_assert(strstr(out, "\n2 200") != NULL, "%s", out);
}

Test(proxy, a_conversation_sticks_to_the_upstream_that_served_it_until_its_first_can_take_it_again)
{
    start_gateway("anthropic", NULL);
    const char *limited =
        "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow\"}}";
    fake_push(up1, (fake_reply_t){.status = 429,
                                  .headers = "content-type: application/json\r\nretry-after: 1\r\n",
                                  .body = limited});
    fake_set_default(up1, sse_reply("anthropic-ok.sse"));
    fake_set_default(up2, sse_reply("anthropic-ok.sse"));
    const char *session = ANTHROPIC_HEADERS "x-claude-code-session-id: conv-42\r\n";
    cr_assert(http_request_h(port, "POST", "/v1/messages", session, anthropic_body, &res));
    cr_assert_eq(fake_count(up2), 1, "the first turn failed over to up2");
    cr_assert(http_request_h(port, "POST", "/v1/messages", session, anthropic_body, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_eq(fake_count(up2), 2, "the conversation stays on up2 while up1 is paused");
    cr_assert_eq(fake_count(up1), 1);
    /* behaviour.md §1.5: once up1 can take it again, the conversation goes back. */
    usleep(1200 * 1000);
    cr_assert(http_request_h(port, "POST", "/v1/messages", session, anthropic_body, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_eq(fake_count(up1), 2, "back on up1");
    cr_assert_eq(fake_count(up2), 2);
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS "x-sluice-session: other\r\n",
                             anthropic_body, &res));
    cr_assert_eq(fake_count(up1), 3, "another conversation starts on the first candidate");
}

Test(proxy, every_request_leaves_one_row_with_its_attempts)
{
    start_gateway("anthropic", NULL);
    fake_push(up1, (fake_reply_t){.status = 503,
                                  .body = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\"}}"});
    fake_push(up2, sse_reply("anthropic-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert(http_request_h(port, "POST", "/v1/messages", "x-api-key: nope\r\n", anthropic_body, &res));
    cr_assert_eq(res.status, 401);
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);

    const char *db = temp_file_path(1);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM requests"), 2);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM requests WHERE outcome = 'served' AND status = 200 "
                            "AND provider = 'up2' AND ttft_ms IS NOT NULL"),
                 1);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM requests WHERE status = 401 AND outcome = 'failed'"), 1);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM attempts"), 2);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM attempts WHERE provider = 'up1' AND status = 503"), 1);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM attempts WHERE error_text = 'sluice: up1 answered 503'"), 1,
                 "the attempt's message is filled in");
    cr_assert_eq(db_int(db, "SELECT count(*) FROM requests WHERE usage_output = 5"), 1,
                 "usage from the stream is recorded");
}

Test(proxy, a_slow_client_holds_back_the_upstream_and_loses_nothing)
{
    start_gateway("anthropic", NULL);
    /* 64 MiB of stream: far more than the gateway may buffer for one client (4 MiB held, 4 MiB being written;
     * the kernel's socket buffers on both sides take more, as much as the machine's TCP settings allow). */
    const char *start =
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{}}}\n\n";
    const char *stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    char delta[1024];
    int n = snprintf(delta, sizeof(delta),
                     "event: content_block_delta\ndata: "
                     "{\"type\":\"content_block_delta\",\"delta\":{\"text\":\"%0900d\"}}\n\n",
                     7);
    size_t events = (64u << 20) / (size_t)n, total = strlen(start) + events * (size_t)n + strlen(stop);
    char *body = malloc(total + 1), *w = body;
    w += sprintf(w, "%s", start);
    for (size_t i = 0; i < events; i++) {
        memcpy(w, delta, (size_t)n);
        w += n;
    }
    sprintf(w, "%s", stop);
    fake_reply_t r = sse_reply("anthropic-ok.sse");
    r.body = body;
    r.body_len = total;
    fake_push(up1, r);

    long rss_before = proc_rss_kib(proc.pid);
    int fd =
        raw_post(port, 64 << 10, "/v1/messages", "Connection: close\r\n" ANTHROPIC_HEADERS, anthropic_body);
    cr_assert_geq(fd, 0);
    /* Read nothing for a while: the upstream must be held back, not drained into memory. */
    usleep(1500 * 1000);
    size_t sent = fake_bytes_sent(up1);
    cr_assert_lt(sent, total, "the upstream sent %zu of %zu bytes to a client that reads nothing", sent,
                 total);
    /* What sluice holds is bounded whatever the kernel buffers: not the stream drained into its memory (64
     * MiB). Its two 4 MiB parts sit in buffers whose capacity doubles as they grow, and meson's random
     * MALLOC_PERTURB_ writes every allocated byte, so RSS counts whole capacities: 25 MiB seen once. */
    long grown = proc_rss_kib(proc.pid) - rss_before;
    cr_assert_lt(grown, 32 * 1024, "sluice grew by %ld KiB while its client read nothing (upstream sent %zu)",
                 grown, sent);

    size_t got = 0;
    char buf[1 << 16];
    ssize_t k;
    bool saw_stop = false;
    while ((k = read(fd, buf, sizeof(buf))) > 0) {
        got += (size_t)k;
        saw_stop = memmem(buf, (size_t)k, "message_stop", 12) != NULL || saw_stop;
    }
    close(fd);
    cr_assert_gt(got, total, "every byte arrives in the end (%zu of %zu, plus framing)", got, total);
    cr_assert(saw_stop);
    free(body);
}

Test(proxy, count_tokens_is_forwarded_or_estimated)
{
    start_gateway("anthropic", NULL);
    const char *body = "{\"model\":\"claude-x\",\"messages\":[{\"role\":\"user\",\"content\":\"count me\"}]}";
    fake_push(up1, (fake_reply_t){.status = 200,
                                  .headers = "content-type: application/json\r\n",
                                  .body = "{\"input_tokens\":12}"});
    cr_assert(http_request_h(port, "POST", "/v1/messages/count_tokens", ANTHROPIC_HEADERS, body, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(res.body, "{\"input_tokens\":12}");
    fake_request_t r;
    cr_assert(fake_request(up1, 0, &r));
    cr_assert_str_eq(r.path, "/prefix/v1/messages/count_tokens");

    /* An upstream without the endpoint: the gateway estimates, about a token per 4 bytes. */
    fake_push(up1, (fake_reply_t){.status = 404, .body = "not here"});
    cr_assert(http_request_h(port, "POST", "/v1/messages/count_tokens", ANTHROPIC_HEADERS, body, &res));
    cr_assert_eq(res.status, 200);
    char v[16];
    cr_assert(http_header(&res, "x-sluice-estimated", v, sizeof(v)));
    char expected[64];
    snprintf(expected, sizeof(expected), "{\"input_tokens\":%zu}", (strlen(body) + 3) / 4);
    cr_assert_str_eq(res.body, expected);
    cr_assert_eq(fake_count(up2), 0, "count-tokens is estimated, not failed over on 404");
}

typedef struct {
    uint16_t port;
    const char *body;
    http_response_t res;
} background_request_t;

static void *
send_in_background(void *arg)
{
    background_request_t *b = arg;
    http_request_h(b->port, "POST", "/v1/messages", ANTHROPIC_HEADERS, b->body, &b->res);
    return NULL;
}

Test(proxy, max_concurrent_sends_the_overflow_to_the_next_candidate)
{
    start_gateway_with("anthropic", ", max_concurrent: 1", NULL);
    fake_reply_t slow = sse_reply("anthropic-ok.sse");
    slow.delay_ms = 1000;
    fake_push(up1, slow);
    fake_set_default(up2, sse_reply("anthropic-ok.sse"));
    background_request_t first = {.port = port, .body = fresh_body(1)};
    pthread_t tid;
    pthread_create(&tid, NULL, send_in_background, &first);
    cr_assert(fake_wait_count(up1, 1, 3000));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, fresh_body(2), &res));
    cr_assert_eq(res.status, 200);
    cr_assert_eq(fake_count(up2), 1, "up1's only slot is taken: the second request goes to up2");
    pthread_join(tid, NULL);
    cr_assert_eq(first.res.status, 200);
    cr_assert_str_eq(first.res.body, fixture("anthropic-ok.sse", NULL));
    http_response_free(&first.res);
    cr_assert_eq(fake_count(up1), 1);
}

Test(proxy, an_upstream_that_goes_silent_is_left_after_the_idle_timeout)
{
    start_gateway_full("anthropic", "", ", idle_timeout_secs: 1", NULL);
    fake_push(up1, (fake_reply_t){.action = FAKE_HANG});
    fake_push(up2, sse_reply("anthropic-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(res.body, fixture("anthropic-ok.sse", NULL));
    cr_assert(proc_wait_log(&proc, "backoff_ms=-1 error=gw.upstream.idle_timeout", 2000), "%s", proc.log);
}

Test(proxy, a_responses_turn_with_previous_response_id_goes_only_to_the_upstream_that_holds_it)
{
    start_gateway("openai-responses", NULL);
    /* The first turn fails over to up2, which creates resp_fake7. */
    fake_push(up1, (fake_reply_t){.status = 503,
                                  .body = "{\"error\":{\"type\":\"server_error\",\"message\":\"x\"}}"});
    fake_push(up2, sse_reply("responses-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/responses", BEARER_HEADERS,
                             "{\"model\":\"gpt-x\",\"stream\":true,\"input\":\"first\"}", &res));
    cr_assert_eq(res.status, 200);
    /* The next turn names it: sealed history, so up1 is not even tried, though it is first and healthy. */
    fake_set_default(up1, sse_reply("responses-ok.sse"));
    fake_push(up2, sse_reply("responses-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/responses", BEARER_HEADERS,
                             "{\"model\":\"gpt-x\",\"stream\":true,\"previous_response_id\":\"resp_fake7\","
                             "\"input\":\"second\"}",
                             &res));
    cr_assert_eq(res.status, 200);
    cr_assert_eq(fake_count(up1), 1);
    cr_assert_eq(fake_count(up2), 2);
}

Test(proxy, rejected_credentials_hold_an_upstream_until_the_config_changes)
{
    start_gateway("anthropic", NULL);
    const char *denied =
        "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"bad key\"}}";
    fake_push(up1,
              (fake_reply_t){.status = 401, .headers = "content-type: application/json\r\n", .body = denied});
    fake_set_default(up2, sse_reply("anthropic-ok.sse"));
    fake_set_default(up1, sse_reply("anthropic-ok.sse"));
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, fresh_body(1), &res));
    cr_assert_eq(res.status, 200, "up2 served after up1's 401");
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, fresh_body(2), &res));
    cr_assert_eq(fake_count(up1), 1, "up1 is held: its credentials were rejected");
    kill(proc.pid, SIGHUP);
    cr_assert(proc_wait_log(&proc, "upstream up1: the config changed", 5000), "%s", proc.log);
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, fresh_body(3), &res));
    cr_assert_eq(fake_count(up1), 2, "after a reload up1 is tried again");
}

/* Posts body to /v1/messages with a 64 KiB receive window and returns the socket, left unread. */
static int
post_from_a_reader_that_never_reads(const char *body)
{
    int fd = raw_post(port, 64 << 10, "/v1/messages", ANTHROPIC_HEADERS, body);
    cr_assert_geq(fd, 0);
    return fd;
}

Test(proxy, a_client_that_stops_reading_lets_its_upstream_go_after_the_idle_timeout)
{
    start_gateway_full("anthropic", "", ", idle_timeout_secs: 1", NULL);
    char delta[1024];
    int n = snprintf(
        delta, sizeof(delta),
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"%0900d\"}}"
        "\n\n",
        7);
    size_t events = (48u << 20) / (size_t)n, total = events * (size_t)n;
    char *body = malloc(total + 1), *w = body;
    for (size_t i = 0; i < events; i++) {
        memcpy(w, delta, (size_t)n);
        w += n;
    }
    *w = '\0';
    fake_reply_t r = sse_reply("anthropic-ok.sse");
    r.body = body;
    r.body_len = total;
    fake_push(up1, r);
    int fd = post_from_a_reader_that_never_reads(anthropic_body);
    cr_assert(proc_wait_log(&proc, "the client read nothing for 1 s", 5000), "%s", proc.log);
    cr_assert(proc_wait_log(&proc, "event request_cancelled id=1", 2000), "%s", proc.log);
    close(fd);
    /* The fake may still be writing the body: it is freed only once the fake has stopped. */
    proc_kill(&proc);
    fake_stop(up1);
    up1 = NULL;
    free(body);
}

/*
 * A client that reads nothing of a 6 MiB answer: what the kernel's buffers do
 * not take waits in the gateway (at most 4 MiB of it before the upstream is
 * paused), and a send never completes, the answer's last one when all of it
 * came in. After the idle timeout the connection is shut down, so the request
 * and its buffers do not stay for as long as the client keeps its socket open.
 */
Test(proxy, a_client_that_never_reads_its_answer_is_disconnected_after_the_idle_timeout)
{
    start_gateway_full("anthropic", "", ", idle_timeout_secs: 1", NULL);
    size_t total = 6u << 20;
    char *body = malloc(total + 1);
    memset(body, ' ', total);
    static const char json[] = "{\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\"ok\"}],"
                               "\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}";
    memcpy(body + total - (sizeof(json) - 1), json, sizeof(json) - 1);
    body[total] = '\0';
    fake_push(up1, (fake_reply_t){.status = 200,
                                  .headers = "content-type: application/json\r\n",
                                  .body = body,
                                  .body_len = total});
    static const char whole[] = "{\"model\":\"claude-x\",\"max_tokens\":64,\"messages\":"
                                "[{\"role\":\"user\",\"content\":\"hi\"}]}";
    int fd = post_from_a_reader_that_never_reads(whole);
    cr_assert(proc_wait_log(&proc, "the client read nothing for 1 s", 5000), "%s", proc.log);
    /* Now read: what the kernel holds comes, then the end of the connection, not the rest of the answer. */
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    static char buf[1 << 16];
    size_t got = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        got += (size_t)n;
    cr_assert(n == 0 || errno == ECONNRESET, "the connection ended (read %zd, errno %d) after %zu bytes", n,
              errno, got);
    cr_assert_lt(got, total, "the answer was cut, not delivered late");
    close(fd);
    http_response_t res = {0};
    cr_assert(http_request(port, "GET", "/healthz", NULL, &res), "the gateway still serves");
    http_response_free(&res);
    proc_kill(&proc);
    fake_stop(up1);
    up1 = NULL;
    free(body);
}

/* ---- the upstream client's connections (hop.c, keepalive.h) ------------------------------------------ */

static const char json_answer[] =
    "{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}";
static const char json_body[] = "{\"model\":\"claude-x\",\"max_tokens\":5,\"messages\":[]}";

/* After requests 1..last finished: every request took one attempt, none on a stale connection. Each id is
 * waited for: two workers hand their events to the bus in their own batches, so the last request's finish
 * can be logged before an earlier one's from the other worker. */
static void
assert_one_attempt_each(int last)
{
    for (int id = 1; id <= last; id++) {
        char finished[64];
        snprintf(finished, sizeof(finished), "event request_finished id=%d status=200", id);
        cr_assert(proc_wait_log(&proc, finished, 2000), "%s", proc.log);
    }
    size_t attempts = 0;
    for (const char *at = proc.log; (at = strstr(at, "event attempt id=")) != NULL; at++)
        attempts++;
    cr_assert_eq(attempts, (size_t)last, "%s", proc.log);
    cr_assert_null(strstr(proc.log, "stale_connection"), "%s", proc.log);
}

/* Sends one whole-answer request and asserts it was answered 200 with json_answer. */
static void
assert_json_served(int i)
{
    cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, json_body, &res), "request %d",
              i);
    cr_assert_eq(res.status, 200, "request %d: %s", i, res.body);
    cr_assert_str_eq(res.body, json_answer, "request %d", i);
}

Test(proxy, kept_alive_connections_carry_the_next_requests)
{
    start_gateway("anthropic", NULL);
    fake_reply_t whole = {
        .status = 200, .headers = "content-type: application/json\r\n", .body = json_answer};
    for (int i = 0; i < 4; i++) {
        fake_push(up1, whole);
        fake_push(up1, sse_reply("anthropic-ok.sse"));
    }
    for (int i = 0; i < 4; i++) {
        assert_json_served(i);
        cr_assert(http_request_h(port, "POST", "/v1/messages", ANTHROPIC_HEADERS, anthropic_body, &res));
        cr_assert_eq(res.status, 200, "%s", res.body);
        cr_assert_str_eq(res.body, fixture("anthropic-ok.sse", NULL));
    }
    cr_assert_eq(fake_count(up1), 8);
    /* Each of the two workers keeps its own: content-length and chunked answers both leave it reusable. */
    cr_assert_leq(fake_connections(up1), 2, "8 requests on %zu connections", fake_connections(up1));
    assert_one_attempt_each(8);
}

/*
 * A client's next request that arrives while the gateway serves its previous
 * one on the same connection: the worker's loop keeps the socket registered
 * past h2o's stop of reading (lazy_epoll.h), so this is the event that must
 * delete it for real and let h2o's next start register it again. Pipelined in
 * one write, and sent during the first answer's wait.
 */
static size_t
read_answers(int fd, size_t want, char *buf, size_t size)
{
    size_t got = 0, answers = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (answers < want && got + 1 < size && poll(&p, 1, 5000) == 1) {
        ssize_t k = read(fd, buf + got, size - 1 - got);
        if (k <= 0)
            break;
        got += (size_t)k;
        buf[got] = '\0';
        answers = 0;
        for (const char *at = buf; (at = strstr(at, json_answer)) != NULL; at++)
            answers++;
    }
    return answers;
}

Test(proxy, requests_that_come_while_the_previous_one_is_served_are_answered_in_turn)
{
    start_gateway("anthropic", NULL);
    fake_reply_t slow = {
        .status = 200, .headers = "content-type: application/json\r\n", .body = json_answer, .delay_ms = 300};
    for (int i = 0; i < 4; i++)
        fake_push(up1, slow);
    char req[512], two[1024], buf[8192];
    int n =
        snprintf(req, sizeof(req), "POST /v1/messages HTTP/1.1\r\nHost: x\r\n%scontent-length: %zu\r\n\r\n%s",
                 ANTHROPIC_HEADERS, strlen(json_body), json_body);
    snprintf(two, sizeof(two), "%s%s", req, req);

    int fd = raw_post(port, 0, "/v1/messages", ANTHROPIC_HEADERS, json_body);
    cr_assert_geq(fd, 0);
    cr_assert(proc_wait_log(&proc, "event request_started id=1", 2000), "%s", proc.log);
    cr_assert_eq(write(fd, req, (size_t)n), n, "the second request, while the first waits for its answer");
    cr_assert_eq(read_answers(fd, 2, buf, sizeof(buf)), 2, "%s", buf);
    close(fd);

    fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    cr_assert_eq(write(fd, two, strlen(two)), (ssize_t)strlen(two), "two requests in one write");
    cr_assert_eq(read_answers(fd, 2, buf, sizeof(buf)), 2, "%s", buf);
    close(fd);
    cr_assert_eq(fake_count(up1), 4);
    assert_one_attempt_each(4);
}

Test(proxy, a_connection_the_answer_closes_is_not_used_again)
{
    start_gateway("anthropic", NULL);
    /* It says close but keeps the connection open: only sluice's reading of the head keeps it from reuse. */
    fake_reply_t closing = {.status = 200,
                            .headers = "content-type: application/json\r\nconnection: close\r\n",
                            .body = json_answer};
    fake_reply_t until_close = {.status = 200,
                                .headers = "content-type: application/json\r\n",
                                .body = json_answer,
                                .until_close = true};
    fake_push(up1, closing);
    fake_push(up1, until_close);
    fake_push(up1, closing);
    for (int i = 0; i < 3; i++)
        assert_json_served(i);
    cr_assert_eq(fake_connections(up1), 3);
    assert_one_attempt_each(3);
}

Test(proxy, an_upstream_that_drops_an_idle_connection_costs_the_next_request_nothing)
{
    start_gateway("anthropic", NULL);
    /* Closed after the answer without a word, as an upstream's own keep-alive timeout does. */
    fake_set_default(up1, (fake_reply_t){.status = 200,
                                         .headers = "content-type: application/json\r\n",
                                         .body = json_answer,
                                         .close_after = true});
    for (int i = 0; i < 3; i++) {
        assert_json_served(i);
        /* Time for the close to arrive: the idle connection is dropped before anything is sent on it. */
        usleep(100 * 1000);
    }
    cr_assert_eq(fake_count(up1), 3, "every request went out once");
    cr_assert_eq(fake_connections(up1), 3);
    assert_one_attempt_each(3);
}

/* An upstream's raw answer (FAKE_GARBAGE sends the bytes as they are, then closes). */
static fake_reply_t
raw_answer(const char *bytes)
{
    return (fake_reply_t){.action = FAKE_GARBAGE, .body = bytes};
}

Test(proxy, interim_heads_chunk_extensions_and_trailers_are_read_through)
{
    start_gateway("anthropic", NULL);
    static const char answer[] = "HTTP/1.1 100 Continue\r\n\r\n"
                                 "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                 "Transfer-Encoding: chunked\r\n\r\n"
                                 "11;ext=1\r\n{\"id\":\"msg_1\",\"ty\r\n"
                                 "2f\r\npe\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\r\n"
                                 "6\r\n\"hi\"}]\r\n1\r\n}\r\n"
                                 "0\r\nx-checksum: abc\r\n\r\n";
    fake_push(up1, raw_answer(answer));
    assert_json_served(0);
    cr_assert_eq(fake_count(up2), 0);
}

Test(proxy, a_response_head_that_cannot_be_read_safely_fails_over_before_anything_is_sent)
{
    start_gateway("anthropic", NULL);
    static const char *const heads[] = {
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello",
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-folded: a\r\n  b\r\ncontent-length: "
        "2\r\n\r\n{}",
        "HTTP/1.1 200 OK\r\ncontent-length: 12abc\r\n\r\n{}",
    };
    fake_reply_t whole = {
        .status = 200, .headers = "content-type: application/json\r\n", .body = json_answer};
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
        fake_push(up1, raw_answer(heads[i]));
        fake_push(up2, whole);
        assert_json_served((int)i);
    }
    cr_assert_eq(fake_count(up2), 3, "each was served by the next candidate");
    cr_assert(proc_wait_log(&proc, "event request_finished id=3 status=200", 2000), "%s", proc.log);
    for (int id = 1; id <= 3; id++) {
        char line[96];
        snprintf(line, sizeof(line), "event attempt id=%d provider=up1 outcome=error", id);
        cr_assert(strstr(proc.log, line) != NULL, "request %d: %s", id, proc.log);
    }
}

Test(proxy, http_1_0_answers_and_bytes_past_a_body_end_the_connection_but_not_the_answer)
{
    start_gateway("anthropic", NULL);
    static char until_close[512], extra[512];
    snprintf(until_close, sizeof(until_close), "HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n%s",
             json_answer);
    snprintf(extra, sizeof(extra),
             "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n\r\n%sHTTP/1.1 200 "
             "OK\r\n",
             strlen(json_answer), json_answer);
    fake_push(up1, raw_answer(until_close));
    fake_push(up1, raw_answer(extra));
    fake_push(up1, (fake_reply_t){
                       .status = 200, .headers = "content-type: application/json\r\n", .body = json_answer});
    for (int i = 0; i < 3; i++)
        assert_json_served(i);
    cr_assert_eq(fake_connections(up1), 3, "neither of the first two connections carried another request");
    assert_one_attempt_each(3);
}
