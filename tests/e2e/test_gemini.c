/*
 * The Gemini dialect end to end (formats.md, Gemini): streams and whole
 * answers pass through with the upstream's key and model in the path, an
 * error sent as bare JSON (no `data:`) is framed as the event it stands for
 * (retried before content, told to the client after), and usage reaches
 * the request DB from both shapes. Time is scaled (SLUICE_TEST_TIME_SCALE).
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_upstream.h"
#include "harness.h"

static proc_t proc;
static fake_upstream_t *up;
static http_response_t res;
static uint16_t port;

#define GATEWAY_KEY "gw-test-key-0001"
#define BODY        "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"hi\"}]}]}"
#define STREAM_PATH "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
#define WHOLE_PATH  "/v1beta/models/gemini-x:generateContent"
#define KEY_HEADER  "x-goog-api-key: " GATEWAY_KEY "\r\n"
#define WHOLE_ANSWER                                                                                         \
    "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hello whole\"}]},"             \
    "\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":7,"                     \
    "\"candidatesTokenCount\":3,\"totalTokenCount\":10},\"modelVersion\":\"gemini-fake\"}"
#define BARE_UNAVAILABLE                                                                                     \
    "{\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}"

static void
setup(void)
{
    setenv("SLUICE_TEST_TIME_SCALE", "0.01", 1);
    up = fake_start(NULL, NULL, false);
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
             "clients: [{name: tester, key: \"" GATEWAY_KEY "\"}]\n"
             "providers:\n"
             "  - {name: gem, protocol: gemini, base_url: \"http://127.0.0.1:%u\", key: upstream-key,"
             " model_map: {\"gemini-x\": \"gemini-2.5-flash\"}}\n"
             "failover: {wait_secs: 120}\n"
             "store: {path: %s}\n",
             fake_port(up), write_temp_file(1, ""));
    port = sluice_start(&proc, write_temp_file(0, yaml), "info", "2");
    cr_assert_neq(port, 0, "%s", proc.log);
}

static void
teardown(void)
{
    proc_kill(&proc);
    fake_stop(up);
    http_response_free(&res);
    remove_temp_files();
}

TestSuite(gemini, .init = setup, .fini = teardown, .timeout = 60);

static fake_reply_t
sse(const char *body)
{
    return (fake_reply_t){
        .status = 200, .headers = "content-type: text/event-stream\r\n", .body = body, .chunked = true};
}

static void
stop_and_flush(void)
{
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);
}

Test(gemini, a_stream_passes_through_with_the_upstreams_key_and_model)
{
    const char *ok = fixture("gemini-ok.sse", NULL);
    fake_push(up, sse(ok));
    cr_assert(http_request_h(port, "POST", STREAM_PATH, KEY_HEADER, BODY, &res));
    cr_assert_eq(res.status, 200, "%d %s", res.status, res.body);
    cr_assert_str_eq(after_gemini_keepalives(res.body), ok, "byte for byte");
    fake_request_t sent;
    cr_assert(fake_request(up, 0, &sent));
    cr_assert_str_eq(sent.path, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
    char key[64];
    cr_assert(fake_header(up, 0, "x-goog-api-key", key, sizeof(key)));
    cr_assert_str_eq(key, "upstream-key");
    stop_and_flush();
    cr_assert_eq(db_int(temp_file_path(1), "SELECT count(*) FROM requests WHERE usage_input = 10 AND "
                                           "usage_output = 5 AND dialect = 'gemini'"),
                 1, "usage from usageMetadata");
}

Test(gemini, a_whole_answer_passes_through_and_a_query_key_is_not_forwarded)
{
    fake_push(up, (fake_reply_t){
                      .status = 200, .headers = "content-type: application/json\r\n", .body = WHOLE_ANSWER});
    cr_assert(http_request_h(port, "POST", WHOLE_PATH "?key=" GATEWAY_KEY, "", BODY, &res));
    cr_assert_eq(res.status, 200, "%d %s", res.status, res.body);
    cr_assert_str_eq(res.body, WHOLE_ANSWER);
    fake_request_t sent;
    cr_assert(fake_request(up, 0, &sent));
    cr_assert_str_eq(sent.path, "/v1beta/models/gemini-2.5-flash:generateContent", "the client's key stays");
    stop_and_flush();
    cr_assert_eq(db_int(temp_file_path(1), "SELECT count(*) FROM requests WHERE usage_input = 7 AND "
                                           "usage_output = 3"),
                 1, "usage from the whole answer's usageMetadata");
}

Test(gemini, every_api_version_is_served_and_the_hop_keeps_the_clients)
{
    /* @google/genai 2.x sends v1beta, 3.x v1; the Gemini API also serves v1alpha (formats.md). */
    static const char *const versions[] = {"v1beta", "v1", "v1alpha"};
    const char *ok = fixture("gemini-ok.sse", NULL);
    for (size_t i = 0; i < 3; i++) {
        char path[128], want[128];
        struct {
            const char *action;
            fake_reply_t reply;
            const char *answer;
        } calls[] = {
            {"streamGenerateContent?alt=sse", sse(ok), ok},
            {"generateContent",
             {.status = 200, .headers = "content-type: application/json\r\n", .body = WHOLE_ANSWER},
             WHOLE_ANSWER},
            {"countTokens",
             {.status = 200, .headers = "content-type: application/json\r\n", .body = "{\"totalTokens\":4}"},
             "{\"totalTokens\":4}"},
        };
        for (size_t j = 0; j < 3; j++) {
            size_t n = fake_count(up);
            fake_push(up, calls[j].reply);
            snprintf(path, sizeof(path), "/%s/models/gemini-x:%s", versions[i], calls[j].action);
            http_response_free(&res);
            cr_assert(http_request_h(port, "POST", path, KEY_HEADER, BODY, &res));
            cr_assert_eq(res.status, 200, "%s: %d %s", path, res.status, res.body);
            cr_assert_str_eq(after_gemini_keepalives(res.body), calls[j].answer, "%s", path);
            fake_request_t sent;
            cr_assert(fake_request(up, n, &sent), "%s", path);
            snprintf(want, sizeof(want), "/%s/models/gemini-2.5-flash:%s", versions[i], calls[j].action);
            cr_assert_str_eq(sent.path, want);
        }
    }
}

Test(gemini, a_bare_json_error_before_content_is_retried)
{
    fake_push(up, sse(BARE_UNAVAILABLE));
    const char *ok = fixture("gemini-ok.sse", NULL);
    fake_push(up, sse(ok));
    cr_assert(http_request_h(port, "POST", STREAM_PATH, KEY_HEADER, BODY, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(after_gemini_keepalives(res.body), ok, "the client never sees the error");
    cr_assert_eq(fake_count(up), 2);
}

Test(gemini, a_bare_json_error_after_content_reaches_the_client_as_an_event)
{
    static char body[4096];
    const char *ok = fixture("gemini-ok.sse", NULL);
    const char *second = strstr(strstr(ok, "\n\n") + 2, "\n\n") + 2; /* after two chunks */
    snprintf(body, sizeof(body), "%.*s" BARE_UNAVAILABLE, (int)(second - ok), ok);
    fake_push(up, sse(body));
    cr_assert(http_request_h(port, "POST", STREAM_PATH, KEY_HEADER, BODY, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_not_null(strstr(res.body, "Hello"), "content first: %s", res.body);
    cr_assert_not_null(strstr(res.body, "\ndata: " BARE_UNAVAILABLE "\n\n"), "then the error, framed: %s",
                       res.body);
    cr_assert_eq(fake_count(up), 1, "after content nothing is retried");
}

Test(gemini, a_429_resource_exhausted_waits_for_its_retry_delay)
{
    fake_push(up,
              (fake_reply_t){.status = 429,
                             .headers = "content-type: application/json\r\n",
                             .body = "{\"error\":{\"code\":429,\"message\":\"exhausted\",\"status\":"
                                     "\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":\"type.googleapis.com/"
                                     "google.rpc.RetryInfo\",\"retryDelay\":\"20s\"}]}}"});
    fake_push(up, sse(fixture("gemini-ok.sse", NULL)));
    cr_assert(http_request_h(port, "POST", STREAM_PATH, KEY_HEADER, BODY, &res));
    cr_assert_eq(res.status, 200);
    fake_request_t a, b;
    cr_assert(fake_request(up, 0, &a));
    cr_assert(fake_request(up, 1, &b));
    cr_assert_geq(b.at_ms - a.at_ms, 200, "20 s hint, scaled");
    cr_assert(proc_wait_log(&proc, "upstream gem: paused", 2000), "%s", proc.log);
}
