/*
 * The one classification order (formats.md, "Error classification") and
 * behaviour.md §3, §5, §6: tables over statuses x bodies x dialects, every
 * source kind, the fixtures, and what each class means for the caller.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/classify.h"
#include "core/codes.h"
#include "test_fixture.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

#define ANT   SL_DIALECT_ANTHROPIC
#define CHAT  SL_DIALECT_OPENAI_CHAT
#define RESP  SL_DIALECT_OPENAI_RESPONSES
#define GEM   SL_DIALECT_GEMINI
#define BED   SL_DIALECT_BEDROCK
#define QUOTA SL_FAILURE_QUOTA
#define NOBAL SL_FAILURE_NO_BALANCE
#define RATE  SL_FAILURE_RATE_LIMITED
#define AUTH  SL_FAILURE_AUTH
#define MISS  SL_FAILURE_MISSING_MODEL
#define REQ   SL_FAILURE_REQUEST_ERROR
#define CTX   SL_FAILURE_CONTEXT_LENGTH
#define TEMP  SL_FAILURE_TEMPORARY
#define OTHER SL_FAILURE_OTHER

typedef struct {
    const char *name;
    sl_dialect_t dialect;
    int status;       /* status answers */
    const char *body; /* NULL = no body */
    const char *code; /* extracted type/code or x-amzn-errortype */
    sl_failure_class_t want;
} row_t;

static const char *
class_name(sl_failure_class_t c)
{
    return sl_failure_class_info(c)->name;
}

static sl_failure_class_t
classify(sl_failure_source_t source, const row_t *r, bool after_content)
{
    sl_failure_t f = {
        .source = source,
        .dialect = r->dialect,
        .status = r->status,
        .body = r->body,
        .body_len = r->body ? strlen(r->body) : 0,
        .code = r->code,
        .after_content = after_content,
    };
    return sl_classify_failure(&f);
}

static void
expect_rows(sl_failure_source_t source, const row_t *rows, size_t n, bool after_content)
{
    for (size_t i = 0; i < n; i++) {
        sl_failure_class_t got = classify(source, &rows[i], after_content);
        cr_expect_eq(got, rows[i].want, "%s: got %s, want %s", rows[i].name, class_name(got),
                     class_name(rows[i].want));
    }
}

#define EXPECT_STATUS(rows)       expect_rows(SL_FAILURE_STATUS, rows, N(rows), false)
#define EXPECT_STREAM(rows)       expect_rows(SL_FAILURE_STREAM_ERROR, rows, N(rows), false)
#define EXPECT_STREAM_AFTER(rows) expect_rows(SL_FAILURE_STREAM_ERROR, rows, N(rows), true)

/* Real-shaped bodies, shared by several tables. */
#define ANT_ERR(type, msg) "{\"type\":\"error\",\"error\":{\"type\":\"" type "\",\"message\":\"" msg "\"}}"
#define OAI_ERR(type, code)                                                                                  \
    "{\"error\":{\"message\":\"fake\",\"type\":\"" type "\",\"param\":null,\"code\":" code "}}"
#define GEM_ERR(code, status, msg, details)                                                                  \
    "{\"error\":{\"code\":" #code ",\"message\":\"" msg "\",\"status\":\"" status "\",\"details\":[" details \
    "]}}"
#define BED_MSG "{\"message\":\"fake\"}"
#define HTML    "<html><head><title>error</title></head><body>cloudflare</body></html>"

#define GEM_QUOTA_PROSE                                                                                      \
    "You exceeded your current quota, please check your plan and billing details. For more information "     \
    "on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
#define GEM_QUOTA_FAILURE(id)                                                                                \
    "{\"@type\":\"type.googleapis.com/google.rpc.QuotaFailure\",\"violations\":[{\"quotaMetric\":"           \
    "\"generativelanguage.googleapis.com/generate_content_free_tier_requests\",\"quotaId\":\"" id "\","      \
    "\"quotaValue\":\"250\"}]}"
#define GEM_RETRY_INFO "{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"33s\"}"

Test(classify_status, allowlisted_5xx_are_temporary)
{
    static const row_t rows[] = {
        {"500 empty", ANT, 500, NULL, NULL, TEMP},
        {"500 api_error", ANT, 500, ANT_ERR("api_error", "Internal server error"), NULL, TEMP},
        {"502 html", CHAT, 502, HTML, NULL, TEMP},
        {"503 gemini UNAVAILABLE", GEM, 503, GEM_ERR(503, "UNAVAILABLE", "The model is overloaded.", ""),
         NULL, TEMP},
        {"504 plain text", RESP, 504, "upstream request timeout", NULL, TEMP},
        {"529 overloaded_error", ANT, 529, ANT_ERR("overloaded_error", "Overloaded"), NULL, TEMP},
        {"503 bedrock header", BED, 503, BED_MSG, "ServiceUnavailableException", TEMP},
        {"500 bedrock header", BED, 500, BED_MSG, "InternalServerException", TEMP},
        {"500 error null", CHAT, 500, "{\"error\":null}", NULL, TEMP},
    };
    EXPECT_STATUS(rows);
}

Test(classify_status, other_5xx_are_not_temporary)
{
    static const row_t rows[] = {
        {"501", CHAT, 501, NULL, NULL, OTHER},
        {"501 saying server_error", CHAT, 501, OAI_ERR("server_error", "null"), NULL, OTHER},
        {"505", ANT, 505, HTML, NULL, OTHER},
        {"507 gemini status answer", GEM, 507, GEM_ERR(507, "INTERNAL", "x", ""), NULL, OTHER},
        {"599", ANT, 599, NULL, NULL, OTHER},
    };
    EXPECT_STATUS(rows);
    for (int status = 520; status <= 527; status++) {
        row_t r = {"cloudflare 52x", CHAT, status, HTML, NULL, OTHER};
        sl_failure_class_t got = classify(SL_FAILURE_STATUS, &r, false);
        cr_expect_eq(got, OTHER, "status %d: got %s", status, class_name(got));
    }
}

Test(classify_status, body_words_win_over_status)
{
    static const row_t rows[] = {
        {"500 invalid_request_error", ANT, 500, ANT_ERR("invalid_request_error", "bad"), NULL, REQ},
        {"503 invalid_request", CHAT, 503, OAI_ERR("invalid_request", "null"), NULL, REQ},
        {"529 request_too_large", ANT, 529, ANT_ERR("request_too_large", "too big"), NULL, REQ},
        {"429 insufficient_quota", CHAT, 429, OAI_ERR("insufficient_quota", "\"insufficient_quota\""), NULL,
         QUOTA},
        {"500 rate_limit_error", ANT, 500, ANT_ERR("rate_limit_error", "slow down"), NULL, RATE},
        {"400 credit balance", ANT, 400,
         ANT_ERR("invalid_request_error", "Your credit balance is too low to access the Anthropic API."),
         NULL, NOBAL},
    };
    EXPECT_STATUS(rows);
}

Test(classify_status, quota_used_up_even_with_400_402_429)
{
    static const row_t rows[] = {
        {"openai insufficient_quota 429", CHAT, 429,
         "{\"error\":{\"message\":\"You exceeded your current quota, please check your plan and billing "
         "details.\",\"type\":\"insufficient_quota\",\"param\":null,\"code\":\"insufficient_quota\"}}",
         NULL, QUOTA},
        {"insufficient_quota 400", RESP, 400, OAI_ERR("insufficient_quota", "null"), NULL, QUOTA},
        {"codex usage_limit_reached", RESP, 429,
         "{\"error\":{\"type\":\"usage_limit_reached\",\"message\":\"The usage limit has been "
         "reached\",\"resets_at\":1795970000}}",
         NULL, QUOTA},
        {"billing_hard_limit_reached", CHAT, 400,
         OAI_ERR("invalid_request_error", "\"billing_hard_limit_reached\""), NULL, QUOTA},
        {"gemini per-day quota id", GEM, 429,
         GEM_ERR(429, "RESOURCE_EXHAUSTED", GEM_QUOTA_PROSE,
                 GEM_QUOTA_FAILURE("GenerateRequestsPerDayPerProjectPerModel-FreeTier") "," GEM_RETRY_INFO),
         NULL, QUOTA},
        {"gemini per-day prose", GEM, 429,
         GEM_ERR(429, "RESOURCE_EXHAUSTED",
                 "Quota exceeded for quota metric 'Generate Content API requests per day'", ""),
         NULL, QUOTA},
        {"anthropic credit balance 400", ANT, 400,
         ANT_ERR("invalid_request_error",
                 "Your credit balance is too low to access the Anthropic API. Please "
                 "go to Plans & Billing to upgrade or purchase credits."),
         NULL, NOBAL},
        {"credit balance case", ANT, 400, ANT_ERR("invalid_request_error", "Credit Balance Is Too Low"), NULL,
         NOBAL},
        {"bare 402", CHAT, 402, NULL, NULL, NOBAL},
        {"relay 402 insufficient credits", CHAT, 402,
         "{\"error\":{\"code\":402,\"message\":\"Insufficient credits. Add more using the dashboard\"}}",
         NULL, NOBAL},
        {"insufficient balance 402", CHAT, 402,
         "{\"error\":{\"message\":\"Insufficient "
         "Balance\",\"type\":\"unknown_error\",\"param\":null,\"code\":"
         "\"invalid_request_error\"}}",
         NULL, NOBAL},
        {"billing_not_active 429", CHAT, 429, OAI_ERR("billing_not_active", "\"billing_not_active\""), NULL,
         NOBAL},
    };
    EXPECT_STATUS(rows);
}

Test(classify_status, rate_limits_go_to_the_throttle)
{
    static const row_t rows[] = {
        {"bare 429", ANT, 429, NULL, NULL, RATE},
        {"anthropic rate_limit_error", ANT, 429, ANT_ERR("rate_limit_error", "Number of requests exceeded"),
         NULL, RATE},
        {"openai rate_limit_exceeded with a billing link", CHAT, 429,
         "{\"error\":{\"message\":\"Rate limit reached for gpt-x on requests per min. Please try again in "
         "20s. "
         "Visit https://platform.openai.com/account/billing to add a payment "
         "method.\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}",
         NULL, RATE},
        {"openai requests per day is a rate limit", CHAT, 429,
         "{\"error\":{\"message\":\"Rate limit reached on requests per day (RPD): Limit 10000. Please try "
         "again "
         "in 8.64s.\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}",
         NULL, RATE},
        {"gemini RESOURCE_EXHAUSTED with retryDelay", GEM, 429,
         GEM_ERR(
             429, "RESOURCE_EXHAUSTED", GEM_QUOTA_PROSE,
             GEM_QUOTA_FAILURE("GenerateRequestsPerMinutePerProjectPerModel-FreeTier") "," GEM_RETRY_INFO),
         NULL, RATE},
        {"bedrock ThrottlingException", BED, 429, BED_MSG, "ThrottlingException", RATE},
        {"bedrock header with suffix", BED, 429, BED_MSG,
         "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/", RATE},
    };
    EXPECT_STATUS(rows);
}

Test(classify_status, rejected_credentials_are_auth)
{
    static const row_t rows[] = {
        {"bare 401", CHAT, 401, NULL, NULL, AUTH},
        {"bare 403", CHAT, 403, HTML, NULL, AUTH},
        {"anthropic authentication_error", ANT, 401, ANT_ERR("authentication_error", "invalid x-api-key"),
         NULL, AUTH},
        {"anthropic permission_error", ANT, 403, ANT_ERR("permission_error", "not allowed"), NULL, AUTH},
        {"openai 401 typed invalid_request_error", CHAT, 401,
         OAI_ERR("invalid_request_error", "\"invalid_api_key\""), NULL, AUTH},
        {"gemini API_KEY_INVALID under INVALID_ARGUMENT", GEM, 400,
         GEM_ERR(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
                 "{\"@type\":\"type.googleapis.com/google.rpc.ErrorInfo\",\"reason\":\"API_KEY_INVALID\"}"),
         NULL, AUTH},
        {"gemini UNAUTHENTICATED", GEM, 401, GEM_ERR(401, "UNAUTHENTICATED", "x", ""), NULL, AUTH},
        {"gemini PERMISSION_DENIED", GEM, 403, GEM_ERR(403, "PERMISSION_DENIED", "x", ""), NULL, AUTH},
        {"bedrock AccessDeniedException", BED, 403, BED_MSG, "AccessDeniedException", AUTH},
        {"bedrock UnrecognizedClientException", BED, 403, BED_MSG, "UnrecognizedClientException", AUTH},
    };
    EXPECT_STATUS(rows);
}

Test(classify_status, missing_model_fails_over)
{
    static const row_t rows[] = {
        {"bare 404", ANT, 404, HTML, NULL, MISS},
        {"anthropic not_found_error", ANT, 404, ANT_ERR("not_found_error", "model: claude-x"), NULL, MISS},
        {"openai model_not_found typed invalid_request_error", CHAT, 404,
         OAI_ERR("invalid_request_error", "\"model_not_found\""), NULL, MISS},
        {"openai wrong path", CHAT, 404, OAI_ERR("invalid_request_error", "null"), NULL, MISS},
        {"gemini NOT_FOUND", GEM, 404, GEM_ERR(404, "NOT_FOUND", "models/x is not found", ""), NULL, MISS},
        {"bedrock ResourceNotFoundException", BED, 404, BED_MSG, "ResourceNotFoundException", MISS},
    };
    EXPECT_STATUS(rows);
}

Test(classify_status, named_request_errors_are_handed_back)
{
    static const row_t rows[] = {
        {"anthropic invalid_request_error", ANT, 400, ANT_ERR("invalid_request_error", "messages: required"),
         NULL, REQ},
        {"anthropic request_too_large", ANT, 413, ANT_ERR("request_too_large", "Request exceeds the maximum"),
         NULL, REQ},
        {"openai context_length_exceeded", CHAT, 400,
         OAI_ERR("invalid_request_error", "\"context_length_exceeded\""), NULL, CTX},
        {"openai invalid_prompt", RESP, 400, OAI_ERR("invalid_request_error", "\"invalid_prompt\""), NULL,
         REQ},
        {"openai invalid_encrypted_content", RESP, 400,
         OAI_ERR("invalid_request_error", "\"invalid_encrypted_content\""), NULL, REQ},
        {"422 invalid_request_error", CHAT, 422, OAI_ERR("invalid_request_error", "null"), NULL, REQ},
        {"gemini INVALID_ARGUMENT", GEM, 400, GEM_ERR(400, "INVALID_ARGUMENT", "bad field", ""), NULL, REQ},
        {"bedrock ValidationException header", BED, 400, BED_MSG, "ValidationException", REQ},
        {"bedrock validationException camel", BED, 400, BED_MSG, "validationException", REQ},
    };
    EXPECT_STATUS(rows);
}

Test(classify_status, unnamed_4xx_fail_over_as_other)
{
    static const row_t rows[] = {
        {"bare 400", ANT, 400, NULL, NULL, OTHER},
        {"400 html from a proxy", CHAT, 400, HTML, NULL, OTHER},
        {"413 from nginx", CHAT, 413, "<html>413 Request Entity Too Large</html>", NULL, OTHER},
        {"422 unnamed", CHAT, 422, "{\"detail\":\"bad\"}", NULL, OTHER},
        {"408", BED, 408, BED_MSG, "ModelTimeoutException", OTHER},
        {"424", BED, 424, BED_MSG, "ModelErrorException", OTHER},
        {"gemini FAILED_PRECONDITION", GEM, 400, GEM_ERR(400, "FAILED_PRECONDITION", "location", ""), NULL,
         OTHER},
    };
    EXPECT_STATUS(rows);
}

Test(classify_stream, allowlisted_codes_before_content_are_temporary)
{
    static const row_t rows[] = {
        {"chat server_error", CHAT, 0, OAI_ERR("server_error", "null"), NULL, TEMP},
        {"anthropic api_error", ANT, 0, ANT_ERR("api_error", "x"), NULL, TEMP},
        {"anthropic overloaded_error", ANT, 0, ANT_ERR("overloaded_error", "Overloaded"), "overloaded_error",
         TEMP},
        {"responses failed server_is_overloaded", RESP, 0,
         "{\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"server_is_"
         "overloaded\",\"message\":\"x\"}}}",
         NULL, TEMP},
        {"responses error event slow_down", RESP, 0,
         "{\"type\":\"error\",\"code\":\"slow_down\",\"message\":\"x\",\"param\":null,\"sequence_number\":1}",
         NULL, TEMP},
        {"code only", RESP, 0, NULL, "server_error", TEMP},
        {"gemini UNAVAILABLE", GEM, 0, GEM_ERR(503, "UNAVAILABLE", "The model is overloaded.", ""), NULL,
         TEMP},
        {"gemini INTERNAL", GEM, 0, GEM_ERR(500, "INTERNAL", "Internal error encountered.", ""), NULL, TEMP},
        {"gemini numeric 507 only", GEM, 0, "{\"error\":{\"code\":507,\"message\":\"x\"}}", NULL, TEMP},
        {"gemini numeric code as extracted string", GEM, 0, NULL, "503", TEMP},
        {"numeric code extracted by the dialect", CHAT, 503, "{\"error\":{\"message\":\"x\"}}", "x", TEMP},
        {"the stream's own 200 is not a code", CHAT, 200, NULL, "server_error", TEMP},
        {"chat numeric 502", CHAT, 0, "{\"error\":{\"message\":\"bad gateway\",\"type\":null,\"code\":502}}",
         NULL, TEMP},
        {"bedrock serviceUnavailableException", BED, 0, BED_MSG, "serviceUnavailableException", TEMP},
        {"bedrock internalServerException", BED, 0, BED_MSG, "internalServerException", TEMP},
    };
    EXPECT_STREAM(rows);
}

Test(classify_stream, unlisted_codes_fail_over_but_are_not_retried)
{
    static const row_t rows[] = {
        {"invalid_image", CHAT, 0, OAI_ERR("invalid_request_error", "\"invalid_image\""), NULL, OTHER},
        {"content_filter", RESP, 0, "{\"type\":\"error\",\"code\":\"content_filter\",\"message\":\"x\"}",
         NULL, OTHER},
        {"invalid_encrypted_content", RESP, 0,
         "{\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"invalid_encrypted_content\"}}}",
         NULL, OTHER},
        {"context_length_exceeded", RESP, 0, NULL, "context_length_exceeded", OTHER},
        {"request error word with a 500 code", CHAT, 0,
         "{\"error\":{\"type\":\"invalid_request_error\",\"code\":500}}", NULL, OTHER},
        {"gemini numeric 501", GEM, 0, "{\"error\":{\"code\":501,\"message\":\"x\"}}", NULL, OTHER},
        {"chat numeric 520 is only a status", CHAT, 0, "{\"error\":{\"type\":null,\"code\":520}}", NULL,
         OTHER},
        {"bedrock modelStreamErrorException", BED, 0, BED_MSG, "modelStreamErrorException", OTHER},
        {"bedrock validationException", BED, 0, BED_MSG, "validationException", OTHER},
        {"no body, no code", ANT, 0, NULL, NULL, OTHER},
        {"the stream's 200 and nothing else", ANT, 200, NULL, NULL, OTHER},
        {"extracted 501 from gemini", GEM, 501, NULL, "UNIMPLEMENTED", OTHER},
    };
    EXPECT_STREAM(rows);
}

Test(classify_stream, known_causes_count_in_stream_too)
{
    static const row_t rows[] = {
        {"responses rate_limit_exceeded", RESP, 0,
         "{\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"Rate limit reached. Please try "
         "again "
         "in 11.054s.\"}",
         NULL, RATE},
        {"bedrock throttlingException", BED, 0, BED_MSG, "throttlingException", RATE},
        {"gemini numeric 429", GEM, 0, GEM_ERR(429, "RESOURCE_EXHAUSTED", "x", GEM_RETRY_INFO), NULL, RATE},
        {"responses insufficient_quota", RESP, 0,
         "{\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"insufficient_quota\"}}}", NULL,
         QUOTA},
        {"usage_limit_reached", RESP, 0, NULL, "usage_limit_reached", QUOTA},
        {"anthropic authentication_error", ANT, 0, ANT_ERR("authentication_error", "x"), NULL, AUTH},
        {"chat numeric 401", CHAT, 0, "{\"error\":{\"type\":null,\"code\":401}}", NULL, AUTH},
        {"anthropic not_found_error", ANT, 0, ANT_ERR("not_found_error", "x"), NULL, MISS},
    };
    EXPECT_STREAM(rows);
}

Test(classify_stream, nothing_after_content_is_retried)
{
    static const row_t rows[] = {
        {"overloaded_error", ANT, 0, ANT_ERR("overloaded_error", "Overloaded"), NULL, OTHER},
        {"server_error", CHAT, 0, OAI_ERR("server_error", "null"), NULL, OTHER},
        {"gemini 503", GEM, 0, GEM_ERR(503, "UNAVAILABLE", "x", ""), NULL, OTHER},
        {"bedrock serviceUnavailableException", BED, 0, BED_MSG, "serviceUnavailableException", OTHER},
        /* The throttle still learns about a 429, even if this request cannot be retried. */
        {"rate limit still a rate limit", RESP, 0, NULL, "rate_limit_exceeded", RATE},
        {"quota still quota", CHAT, 0, OAI_ERR("insufficient_quota", "null"), NULL, QUOTA},
    };
    EXPECT_STREAM_AFTER(rows);
}

Test(classify_body, error_null_is_not_an_error)
{
    static const row_t stream_rows[] = {
        {"a null error before the real one", RESP, 0,
         "{\"error\":null,\"response\":{\"error\":{\"code\":\"server_error\"}}}", NULL, TEMP},
        {"only a null error", RESP, 0, "{\"type\":\"response.failed\",\"response\":{\"error\":null}}", NULL,
         OTHER},
        {"null with spaces", CHAT, 0, "{\"error\" : null , \"x\":{\"error\" :\t{\"type\":\"server_error\"}}}",
         NULL, TEMP},
    };
    EXPECT_STREAM(stream_rows);
}

Test(classify_body, only_the_error_object_is_read)
{
    static const row_t rows[] = {
        /* Responses events echo the instructions and tools: their words are the client's, not the error. */
        {"words in echoed instructions", RESP, 0,
         "{\"type\":\"response.failed\",\"response\":{\"instructions\":\"on insufficient_quota or "
         "rate_limit_exceeded, stop\",\"error\":{\"code\":\"server_error\",\"message\":\"x\"}}}",
         NULL, TEMP},
        {"an error key inside a string", RESP, 0,
         "{\"response\":{\"instructions\":\"say \\\"error\\\": {\\\"code\\\":\\\"insufficient_quota\\\"}\","
         "\"error\":{\"code\":\"server_error\"}}}",
         NULL, TEMP},
        {"a deeper error property in a tool schema", RESP, 0,
         "{\"response\":{\"error\":{\"code\":\"server_is_overloaded\"},\"tools\":[{\"parameters\":{"
         "\"properties\":{\"error\":{\"type\":\"string\",\"description\":\"insufficient_quota\"}}}}]}}",
         NULL, TEMP},
        {"the shallowest error wins even when it comes last", RESP, 0,
         "{\"response\":{\"tools\":[{\"properties\":{\"error\":{\"description\":\"rate_limit_exceeded\"}}}],"
         "\"error\":{\"code\":\"slow_down\"}}}",
         NULL, TEMP},
        {"an error given as a string", CHAT, 0, "{\"error\":\"server_error\"}", NULL, TEMP},
        {"a nested numeric code is not the error's code", GEM, 0,
         "{\"error\":{\"message\":\"x\",\"details\":[{\"code\":503}]}}", NULL, OTHER},
        {"gemini bare array-wrapped error", GEM, 0, "[{\"error\":{\"code\":503,\"status\":\"UNAVAILABLE\"}}]",
         NULL, TEMP},
    };
    EXPECT_STREAM(rows);
}

Test(classify_body, words_are_whole_tokens_with_the_right_case)
{
    static const row_t rows[] = {
        {"inside a longer token", CHAT, 0, "{\"error\":{\"type\":\"my_server_error_kind\"}}", NULL, OTHER},
        {"gemini statuses are upper case", GEM, 0, "{\"error\":{\"message\":\"model unavailable\"}}", NULL,
         OTHER},
        {"bedrock case varies", BED, 0, BED_MSG, "ServiceUnavailableException", TEMP},
        {"quota ids match inside", GEM, 0,
         "{\"error\":{\"details\":[{\"quotaId\":\"GenerateContentInputTokensPerModelPerDay-FreeTier\"}]}}",
         NULL, QUOTA},
    };
    EXPECT_STREAM(rows);
    static const row_t status_rows[] = {
        {"per day is gemini wording only", CHAT, 429, "{\"error\":{\"message\":\"tokens per day\"}}", NULL,
         RATE},
        {"per day in gemini", GEM, 429, "{\"error\":{\"message\":\"tokens per day\"}}", NULL, QUOTA},
        {"a bare billing mention is not quota", CHAT, 429, "{\"error\":{\"message\":\"see billing\"}}", NULL,
         RATE},
    };
    EXPECT_STATUS(status_rows);
}

Test(classify_body, scan_stops_at_the_cap)
{
    static const char word[] = "\"invalid_request_error\"";
    size_t len = SL_CLASSIFY_MAX_BODY + sizeof(word);
    char *body = malloc(len);
    cr_assert_not_null(body);
    memset(body, ' ', len);

    memcpy(body + SL_CLASSIFY_MAX_BODY - (sizeof(word) - 1), word, sizeof(word) - 1);
    sl_failure_t f = {
        .source = SL_FAILURE_STATUS, .dialect = ANT, .status = 400, .body = body, .body_len = len};
    cr_expect_eq(sl_classify_failure(&f), REQ, "a word that ends at the cap is read");

    memset(body, ' ', len);
    memcpy(body + SL_CLASSIFY_MAX_BODY, word, sizeof(word) - 1);
    cr_expect_eq(sl_classify_failure(&f), OTHER, "a word past the cap is not read");

    /* An unterminated string or object at the cap must not run past it. */
    memset(body, '{', len);
    body[0] = '"';
    cr_expect_eq(sl_classify_failure(&f), OTHER);
    free(body);
}

Test(classify_source, every_source_kind)
{
    static const struct {
        sl_failure_source_t source;
        sl_failure_class_t want;
        const char *slug;
    } rows[] = {
        {SL_FAILURE_CONNECT_FAILED, TEMP, "gw.upstream.connect_failed"},
        {SL_FAILURE_BROKEN_BEFORE_HEAD, TEMP, "gw.upstream.broken_before_head"},
        {SL_FAILURE_BROKEN_BEFORE_CONTENT, TEMP, "gw.upstream.broken_before_content"},
        {SL_FAILURE_ENDED_EARLY, TEMP, "gw.upstream.stream_ended_early"},
        {SL_FAILURE_IDLE_TIMEOUT, OTHER, "gw.upstream.idle_timeout"},
        {SL_FAILURE_TOTAL_TIMEOUT, OTHER, "gw.upstream.total_timeout"},
        {SL_FAILURE_BROKEN_AFTER_CONTENT, OTHER, "gw.upstream.broken_after_content"},
    };
    for (size_t i = 0; i < N(rows); i++) {
        /* No answer was read, so a stray body or status must not change the class. */
        sl_failure_t f = {.source = rows[i].source,
                          .dialect = ANT,
                          .status = 429,
                          .body = ANT_ERR("insufficient_quota", "x"),
                          .body_len = strlen(ANT_ERR("insufficient_quota", "x")),
                          .code = "overloaded_error"};
        sl_failure_class_t got = sl_classify_failure(&f);
        cr_expect_eq(got, rows[i].want, "%s: got %s", rows[i].slug, class_name(got));
        cr_expect_str_eq(sl_code_slug(sl_failure_code(&f, got)), rows[i].slug);
    }
}

Test(classify_source, answer_codes_name_the_source_or_the_hold)
{
    sl_failure_t status = {.source = SL_FAILURE_STATUS, .dialect = CHAT, .status = 503};
    sl_failure_t stream = {.source = SL_FAILURE_STREAM_ERROR, .dialect = CHAT, .code = "server_error"};
    cr_expect_str_eq(sl_code_slug(sl_failure_code(&status, TEMP)), "gw.upstream.status");
    cr_expect_str_eq(sl_code_slug(sl_failure_code(&stream, TEMP)), "gw.upstream.stream_error");
    cr_expect_str_eq(sl_code_slug(sl_failure_code(&status, RATE)), "gw.upstream.status");
    cr_expect_str_eq(sl_code_slug(sl_failure_code(&status, REQ)), "gw.upstream.status");
    cr_expect_str_eq(sl_code_slug(sl_failure_code(&stream, QUOTA)), "gw.upstream.quota_used_up");
    cr_expect_str_eq(sl_code_slug(sl_failure_code(&status, NOBAL)), "gw.upstream.no_balance");
    cr_expect_str_eq(sl_code_slug(sl_failure_code(&status, AUTH)), "gw.upstream.auth_rejected");
}

Test(classify_classes, what_each_class_means)
{
    static const struct {
        sl_failure_class_t cls;
        const char *name;
        bool fails_over, retried, answer;
        sl_breaker_cause_t cause;
    } rows[] = {
        {QUOTA, "quota", true, false, false, SL_BREAKER_CAUSE_QUOTA},
        {NOBAL, "no_balance", true, false, false, SL_BREAKER_CAUSE_NO_BALANCE},
        {RATE, "rate_limited", true, false, false, SL_BREAKER_CAUSE_NONE},
        {AUTH, "auth", true, false, false, SL_BREAKER_CAUSE_AUTH},
        {MISS, "missing_model", true, false, true, SL_BREAKER_CAUSE_NONE},
        {CTX, "context_length", false, false, true, SL_BREAKER_CAUSE_NONE},
        {REQ, "request_error", false, false, true, SL_BREAKER_CAUSE_NONE},
        {TEMP, "temporary", true, true, false, SL_BREAKER_CAUSE_UNEXPLAINED},
        {OTHER, "other", true, false, false, SL_BREAKER_CAUSE_UNEXPLAINED},
    };
    cr_assert_eq(N(rows), SL_FAILURE_CLASS_COUNT);
    for (size_t i = 0; i < N(rows); i++) {
        const sl_failure_class_info_t *info = sl_failure_class_info(rows[i].cls);
        cr_expect_str_eq(info->name, rows[i].name);
        cr_expect_eq(info->fails_over, rows[i].fails_over, "%s fails over", rows[i].name);
        cr_expect_eq(info->retried, rows[i].retried, "%s retried", rows[i].name);
        cr_expect_eq(info->breaker_answer, rows[i].answer, "%s breaker answer", rows[i].name);
        cr_expect_eq(info->breaker_cause, rows[i].cause, "%s breaker cause", rows[i].name);
        cr_expect(!(info->breaker_answer && info->breaker_cause != SL_BREAKER_CAUSE_NONE),
                  "%s: an answer is never also a breaker failure", rows[i].name);
    }
}

/* ---- fixtures ---- */

static int
fixture_status(const char *name)
{
    char head[256];
    snprintf(head, sizeof(head), "%s.head", name);
    size_t len;
    char *text = fixture_read(head, &len);
    int status = 0;
    cr_assert_eq(sscanf(text, "HTTP/1.1 %d", &status), 1, "%s: no status line", head);
    free(text);
    return status;
}

static sl_failure_class_t
classify_status_fixture(const char *name, sl_dialect_t dialect)
{
    size_t len;
    char *body = fixture_read(name, &len);
    sl_failure_t f = {.source = SL_FAILURE_STATUS,
                      .dialect = dialect,
                      .status = fixture_status(name),
                      .body = body,
                      .body_len = len};
    sl_failure_class_t got = sl_classify_failure(&f);
    free(body);
    return got;
}

/* The data of the last SSE event, the one a stream's error arrives in. */
static sl_failure_class_t
classify_sse_fixture(const char *name, sl_dialect_t dialect, bool after_content)
{
    size_t len;
    char *text = fixture_read(name, &len);
    cr_assert_eq(fixture_status(name), 200);
    char *data = NULL;
    for (char *p = strstr(text, "data: "); p; p = strstr(p + 1, "\ndata: "))
        data = p[0] == '\n' ? p + 7 : p + 6;
    cr_assert_not_null(data, "%s has no data line", name);
    sl_failure_t f = {.source = SL_FAILURE_STREAM_ERROR,
                      .dialect = dialect,
                      .body = data,
                      .body_len = strcspn(data, "\n"),
                      .after_content = after_content};
    sl_failure_class_t got = sl_classify_failure(&f);
    free(text);
    return got;
}

Test(classify_fixtures, anthropic_429_is_a_rate_limit)
{
    cr_expect_eq(classify_status_fixture("anthropic-429.json", ANT), RATE);
}

Test(classify_fixtures, chat_429_insufficient_quota_is_quota_not_a_rate_limit)
{
    cr_expect_eq(classify_status_fixture("chat-429-insufficient-quota.json", CHAT), QUOTA);
}

/* behaviour.md §1.6: each dialect's context-length error, in the providers' own wording. */
Test(classify_fixtures, context_length_errors_in_each_dialects_wording)
{
    cr_expect_eq(classify_status_fixture("chat-400-context-length.json", CHAT), CTX);
    cr_expect_eq(classify_status_fixture("responses-400-context-length.json", RESP), CTX);
    cr_expect_eq(classify_status_fixture("anthropic-400-prompt-too-long.json", ANT), CTX);
    cr_expect_eq(classify_status_fixture("gemini-400-input-too-long.json", GEM), CTX);
    cr_expect_eq(classify_status_fixture("bedrock-400-input-too-long.json", BED), CTX);
}

Test(classify_status, context_length_wording_and_its_limits)
{
    static const row_t rows[] = {
        {"openai-compatible prose without a code", CHAT, 400,
         "{\"object\":\"error\",\"message\":\"This model's maximum context length is 4096 tokens. However, "
         "you requested 5000 tokens.\",\"type\":\"BadRequestError\",\"code\":400}",
         NULL, CTX},
        {"anthropic on bedrock", BED, 400,
         "{\"message\":\"prompt is too long: 210000 tokens > 200000 maximum\"}", "ValidationException", CTX},
        {"bedrock too many input tokens", BED, 400,
         "{\"message\":\"Too many input tokens. Max input tokens: 8192\"}", "ValidationException", CTX},
        /* Gemini's and Bedrock's prose counts in their own dialect only. */
        {"input token count elsewhere", CHAT, 400,
         "{\"error\":{\"message\":\"The input token count (5) exceeds "
         "4\",\"type\":\"invalid_request_error\"}}",
         NULL, REQ},
        {"bedrock prose in a chat answer", CHAT, 400,
         "{\"error\":{\"message\":\"Input is too long\",\"type\":\"invalid_request_error\"}}", NULL, REQ},
        /* Rate limits and quota are checked first, whatever else the body says. */
        {"429 saying context_length_exceeded", CHAT, 429,
         OAI_ERR("rate_limit_exceeded", "\"context_length_exceeded\""), NULL, RATE},
        {"another request error", ANT, 400, ANT_ERR("invalid_request_error", "max_tokens: too large"), NULL,
         REQ},
    };
    EXPECT_STATUS(rows);
}

Test(classify_stream, a_context_length_error_inside_a_stream_fails_over_as_other)
{
    static const row_t r = {
        "in-stream context_length_exceeded",
        CHAT,
        0,
        "{\"error\":{\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\"}}",
        NULL,
        OTHER};
    cr_expect_eq(classify(SL_FAILURE_STREAM_ERROR, &r, false), OTHER);
}

Test(classify_fixtures, in_stream_errors_before_content)
{
    cr_expect_eq(classify_sse_fixture("anthropic-overloaded-before-content.sse", ANT, false), TEMP);
    cr_expect_eq(classify_sse_fixture("chat-server-error-before-content.sse", CHAT, false), TEMP);
    cr_expect_eq(classify_sse_fixture("responses-failed-overloaded.sse", RESP, false), TEMP);
    cr_expect_eq(classify_sse_fixture("responses-error-event-slow-down.sse", RESP, false), TEMP);
    cr_expect_eq(classify_sse_fixture("gemini-unavailable.sse", GEM, false), TEMP);
    /* behaviour.md §3: in-stream codes that are not temporary fail over but are not retried. */
    cr_expect_eq(classify_sse_fixture("responses-failed-invalid-encrypted-content.sse", RESP, false), OTHER);
}

Test(classify_fixtures, in_stream_error_after_content)
{
    cr_expect_eq(classify_sse_fixture("anthropic-error-after-content.sse", ANT, true), OTHER);
}

/*
 * Bedrock: the exception type travels in the frame's :exception-type header
 * (name-len u8, name, type 7 = string, value-len u16 BE, value); the payload
 * is {"message"}.
 */
Test(classify_fixtures, bedrock_service_unavailable_frame)
{
    size_t len;
    unsigned char *frame = (unsigned char *)fixture_read("bedrock-service-unavailable.eventstream", &len);
    cr_assert_gt(len, 16u);
    size_t headers_len = (size_t)frame[4] << 24 | (size_t)frame[5] << 16 | (size_t)frame[6] << 8 | frame[7];
    size_t total_len = (size_t)frame[0] << 24 | (size_t)frame[1] << 16 | (size_t)frame[2] << 8 | frame[3];
    cr_assert_eq(total_len, len);
    char type[128] = "";
    for (size_t i = 12; i < 12 + headers_len;) {
        size_t name_len = frame[i];
        const char *name = (const char *)frame + i + 1;
        cr_assert_eq(frame[i + 1 + name_len], 7, "string headers only in this fixture");
        size_t value_len = (size_t)frame[i + 2 + name_len] << 8 | frame[i + 3 + name_len];
        const char *value = (const char *)frame + i + 4 + name_len;
        if (name_len == 15 && memcmp(name, ":exception-type", 15) == 0 && value_len < sizeof(type)) {
            memcpy(type, value, value_len);
            type[value_len] = '\0';
        }
        i += 4 + name_len + value_len;
    }
    cr_assert_str_eq(type, "serviceUnavailableException");
    sl_failure_t f = {.source = SL_FAILURE_STREAM_ERROR,
                      .dialect = BED,
                      .body = (const char *)frame + 12 + headers_len,
                      .body_len = total_len - 12 - headers_len - 4,
                      .code = type};
    cr_expect_eq(sl_classify_failure(&f), TEMP);
    free(frame);
}
