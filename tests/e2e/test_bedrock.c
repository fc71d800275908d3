/*
 * Bedrock Converse end to end (formats.md, Bedrock): a client with its
 * gateway key as Bearer, the upstream request signed with SigV4, eventstream
 * answers passed through frame for frame, a frame with a bad CRC before
 * content treated as a broken stream (retried), an exception frame before
 * content retried, usage from the metadata event and from a whole answer
 * in the request DB, and a provider without credentials of its own signed
 * with the AWS_* variables. Time is scaled (SLUICE_TEST_TIME_SCALE).
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

#define GATEWAY_KEY   "gw-test-key-0001"
#define AUTH          "authorization: Bearer " GATEWAY_KEY "\r\n"
#define BODY          "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"hi\"}]}]}"
#define STREAM_PATH   "/model/anthropic.claude-x/converse-stream"
#define WHOLE_PATH    "/model/anthropic.claude-x/converse"
#define FRAMES_HEADER "content-type: application/vnd.amazon.eventstream\r\n"
#define WHOLE_ANSWER                                                                                         \
    "{\"output\":{\"message\":{\"role\":\"assistant\",\"content\":[{\"text\":\"Hello whole\"}]}},"           \
    "\"stopReason\":\"end_turn\",\"usage\":{\"inputTokens\":7,\"outputTokens\":3,\"totalTokens\":10},"       \
    "\"metrics\":{\"latencyMs\":5}}"

/* Sluice with one Bedrock provider; aws is its credentials' YAML (", aws: {…}") or "" for none. */
static void
start_with(const char *aws)
{
    setenv("SLUICE_TEST_TIME_SCALE", "0.01", 1);
    up = fake_start(NULL, NULL, false);
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "listen: {gateway: {bind: 127.0.0.1, port: 0}, control: {port: 0}}\n"
             "clients: [{name: tester, key: \"" GATEWAY_KEY "\"}]\n"
             "providers:\n"
             "  - {name: br, protocol: bedrock, region: eu-west-1, base_url: \"http://127.0.0.1:%u\"%s}\n"
             "failover: {wait_secs: 120}\n"
             "store: {path: %s}\n",
             fake_port(up), aws, write_temp_file(1, ""));
    port = sluice_start(&proc, write_temp_file(0, yaml), "info", "2");
    cr_assert_neq(port, 0, "%s", proc.log);
}

static void
setup(void)
{
    start_with(
        ", aws: {access_key_id: AKIDEXAMPLE, secret_access_key: test-secret, session_token: test-token}");
}

static void
teardown(void)
{
    proc_kill(&proc);
    fake_stop(up);
    http_response_free(&res);
    remove_temp_files();
}

TestSuite(bedrock, .init = setup, .fini = teardown, .timeout = 60);

static fake_reply_t
frames(const char *name, size_t *len)
{
    size_t n = 0;
    const char *body = fixture(name, &n);
    if (len != NULL)
        *len = n;
    return (fake_reply_t){.status = 200, .headers = FRAMES_HEADER, .body = body, .body_len = n};
}

static void
stop_and_flush(void)
{
    kill(proc.pid, SIGTERM);
    cr_assert_eq(proc_wait_exit(&proc, 5000), 0, "%s", proc.log);
}

Test(bedrock, a_stream_passes_through_frame_for_frame_and_is_signed_upstream)
{
    size_t n;
    fake_reply_t ok = frames("bedrock-ok.eventstream", &n);
    fake_push(up, ok);
    cr_assert(http_request_h(port, "POST", STREAM_PATH, AUTH, BODY, &res));
    cr_assert_eq(res.status, 200, "%d %s", res.status, res.body);
    cr_assert_eq(res.body_len, n);
    cr_assert(memcmp(res.body, ok.body, n) == 0, "byte for byte");
    char v[512];
    cr_assert(fake_header(up, 0, "authorization", v, sizeof(v)));
    cr_assert(strncmp(v, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/", 40) == 0, "%s", v);
    cr_assert_not_null(strstr(v, "/eu-west-1/bedrock/aws4_request"), "%s", v);
    cr_assert(fake_header(up, 0, "x-amz-security-token", v, sizeof(v)));
    cr_assert_str_eq(v, "test-token");
    stop_and_flush();
    cr_assert_eq(db_int(temp_file_path(1), "SELECT count(*) FROM requests WHERE status = 200 AND "
                                           "usage_input > 0 AND dialect = 'bedrock'"),
                 1, "usage from the metadata event");
}

Test(bedrock, a_whole_answer_passes_through_with_its_usage)
{
    fake_push(up, (fake_reply_t){
                      .status = 200, .headers = "content-type: application/json\r\n", .body = WHOLE_ANSWER});
    cr_assert(http_request_h(port, "POST", WHOLE_PATH, AUTH, BODY, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(res.body, WHOLE_ANSWER);
    stop_and_flush();
    cr_assert_eq(db_int(temp_file_path(1), "SELECT count(*) FROM requests WHERE usage_input = 7 AND "
                                           "usage_output = 3"),
                 1);
}

Test(bedrock, an_exception_frame_before_content_is_retried)
{
    fake_push(up, frames("bedrock-service-unavailable.eventstream", NULL));
    size_t n;
    fake_reply_t ok = frames("bedrock-ok.eventstream", &n);
    fake_push(up, ok);
    cr_assert(http_request_h(port, "POST", STREAM_PATH, AUTH, BODY, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_eq(res.body_len, n, "only the good stream reached the client");
    cr_assert_eq(fake_count(up), 2);
}

Test(bedrock, a_frame_with_a_bad_crc_before_content_is_a_broken_stream_and_retried)
{
    size_t n;
    fake_reply_t ok = frames("bedrock-ok.eventstream", &n);
    static char bad[65536];
    cr_assert_lt(n, sizeof(bad));
    memcpy(bad, ok.body, n);
    bad[20] ^= 0x01; /* inside the first frame's headers: its message CRC no longer matches */
    fake_push(up, (fake_reply_t){.status = 200, .headers = FRAMES_HEADER, .body = bad, .body_len = n});
    fake_push(up, ok);
    cr_assert(http_request_h(port, "POST", STREAM_PATH, AUTH, BODY, &res));
    cr_assert_eq(res.status, 200);
    cr_assert_eq(res.body_len, n);
    cr_assert(memcmp(res.body, ok.body, n) == 0);
    cr_assert_eq(fake_count(up), 2);
}

Test(bedrock, an_unknown_key_gets_the_error_type_header_the_sdk_reads)
{
    cr_assert(http_request_h(port, "POST", WHOLE_PATH, "authorization: Bearer nope\r\n", BODY, &res));
    cr_assert_eq(res.status, 401);
    char v[64];
    cr_assert(http_header(&res, "x-amzn-errortype", v, sizeof(v)), "%s", res.headers);
    cr_assert_str_eq(v, "AccessDeniedException");
    cr_assert_eq(fake_count(up), 0);
}

/* ---- credentials from the AWS_* variables ----------------------------------------------------------- */

static void
setup_env_credentials(void)
{
    setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "env-secret", 1);
    unsetenv("AWS_SESSION_TOKEN");
    start_with("");
}

TestSuite(bedrock_env, .init = setup_env_credentials, .fini = teardown, .timeout = 60);

Test(bedrock_env, without_key_or_aws_the_aws_variables_read_at_start_sign_every_hop)
{
    for (int i = 0; i < 2; i++) {
        fake_push(up, frames("bedrock-ok.eventstream", NULL));
        cr_assert(http_request_h(port, "POST", STREAM_PATH, AUTH, BODY, &res));
        cr_assert_eq(res.status, 200, "%d %s", res.status, res.body);
        http_response_free(&res);
        char v[512];
        cr_assert(fake_header(up, (size_t)i, "authorization", v, sizeof(v)));
        cr_assert(strncmp(v, "AWS4-HMAC-SHA256 Credential=AKIDFROMENV/", 40) == 0, "%s", v);
        cr_assert_not(fake_header(up, (size_t)i, "x-amz-security-token", v, sizeof(v)), "no session token");
    }
}
