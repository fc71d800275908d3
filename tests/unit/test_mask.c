/* Credential masking: what is masked, what is left alone, and that output never grows. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/mask.h"

static char masked[SL_MASKED_KEY_MAX];

Test(mask_key, keeps_known_prefix_and_last_four)
{
    cr_assert_str_eq(sl_mask_key("sk-ant-api03-abcdefghijklmnopqrstuvwxyz-abcd", masked), "sk-ant-…abcd");
    cr_assert_str_eq(sl_mask_key("sk-proj-0123456789abcdefWXYZ", masked), "sk-proj-…WXYZ");
    cr_assert_str_eq(sl_mask_key("sk-0123456789abcdef9876", masked), "sk-…9876");
    cr_assert_str_eq(sl_mask_key("AIzaSyA-0123456789abcdefghijklmnopq", masked), "AIza…nopq");
    cr_assert_str_eq(sl_mask_key("AKIAIOSFODNN7EXAMPLE", masked), "AKIA…MPLE");
}

Test(mask_key, unknown_shape_shows_only_the_tail)
{
    cr_assert_str_eq(sl_mask_key("relay-secret-123456", masked), "…3456");
}

Test(mask_key, short_keys_show_nothing)
{
    cr_assert_str_eq(sl_mask_key("abc", masked), "…");
    cr_assert_str_eq(sl_mask_key("", masked), "…");
    cr_assert_str_eq(sl_mask_key("sk-ant-12345", masked), "…", "a prefix with too little after it");
}

static char *
scrub(const char *in)
{
    static char buf[1024];
    size_t len = strlen(in);
    memcpy(buf, in, len + 1);
    size_t out = sl_scrub_secrets(buf, len);
    cr_assert_leq(out, len, "scrubbing never grows the text");
    buf[out] = '\0';
    return buf;
}

Test(scrub, masks_keys_in_an_error_body)
{
    cr_assert_str_eq(scrub("{\"error\":\"invalid x-api-key: sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA-wxyz\"}"),
                     "{\"error\":\"invalid x-api-key: sk-ant-…wxyz\"}");
    cr_assert_str_eq(scrub("Incorrect API key provided: sk-proj-abcdefghijklmnop1234."),
                     "Incorrect API key provided: sk-proj-…1234.");
    cr_assert_str_eq(scrub("?key=AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"), "?key=AIza…ewQe");
    cr_assert_str_eq(scrub("bad AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"), "bad AIza…ewQe");
}

Test(scrub, masks_bearer_tokens_and_aws_ids)
{
    cr_assert_str_eq(scrub("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig12345"),
                     "Authorization: Bearer …2345");
    cr_assert_str_eq(scrub("credential AKIAIOSFODNN7EXAMPLE/20260101"), "credential AKIA…MPLE/20260101");
}

Test(scrub, masks_long_tokens_after_secret_words)
{
    cr_assert_str_eq(scrub("{\"access_token\": \"abcdefghijklmnopqrstuvwxyz\"}"),
                     "{\"access_token\": \"…wxyz\"}");
    cr_assert_str_eq(scrub("client_secret=0123456789012345678901234"), "client_secret=…1234");
    /* Every word, in any case, anywhere in the name. */
    cr_assert_str_eq(scrub("X_API_KEY=abcdefghijklmnopqrstuvwxyz"), "X_API_KEY=…wxyz");
    cr_assert_str_eq(scrub("proxy-Authorization: abcdefghijklmnopqrstuvwxyz"), "proxy-Authorization: …wxyz");
    cr_assert_str_eq(scrub("MyTokenValue abcdefghijklmnopqrstuvwxyz"), "MyTokenValue …wxyz");
    /* A secret's name inside another word ("monkey") with a short word after it: nothing to mask. */
    cr_assert_str_eq(scrub("monkey business abcdefghijklmnopqrstuvwxyz0"),
                     "monkey business abcdefghijklmnopqrstuvwxyz0");
    /* Only the token right after the name: a word between them is prose. */
    cr_assert_str_eq(scrub("api_key is abcdefghijklmnopqrstuvwxyz"), "api_key is abcdefghijklmnopqrstuvwxyz");
}

Test(scrub, masks_the_password_of_a_url)
{
    cr_assert_str_eq(scrub("redis: cannot connect to redis://:hunter2@127.0.0.1:6379/0 (refused)"),
                     "redis: cannot connect to redis://:…@127.0.0.1:6379/0 (refused)");
    cr_assert_str_eq(scrub("\"url\":\"postgres://sluice:pg-secret@db/sluice\""),
                     "\"url\":\"postgres://sluice:…@db/sluice\"");
    /* To the last '@' of the URL: a password may hold '@', '/' and ':'. */
    cr_assert_str_eq(scrub("redis://app:p@ss:w/rd@h:1 then"), "redis://app:…@h:1 then");
    cr_assert_str_eq(scrub("unix://:sockpass@/run/redis.sock?db=1"), "unix://:…@/run/redis.sock?db=1");
    cr_assert_str_eq(scrub("REDIS://:ab@h"), "REDIS://:**@h", "a short one does not grow");
    cr_assert_str_eq(scrub("'redis://:sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA@h'"), "'redis://:…@h'");
}

Test(scrub, leaves_urls_without_a_password_and_masked_ones_alone)
{
    const char *plain[] = {
        "https://api.anthropic.com/v1/messages",
        "redis://127.0.0.1:6379/0",
        "unix:///tmp/a@b.sock",
        "mailto://someone@example.com",
        "redis://:@h",
        "redis://:***@127.0.0.1:6379/0",
        "redis://:${REDIS_PASSWORD}@127.0.0.1:6379/0",
        "://:x@h",
        "see: //:x@h",
    };
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        cr_assert_str_eq(scrub(plain[i]), plain[i]);
}

Test(scrub, leaves_ordinary_text_alone)
{
    const char *plain[] = {
        "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}",
        "the task-abcdefghijklmnop ran", /* "sk-" inside a word is not a key */
        "token: short",
        "max_tokens: 4096",
        "",
    };
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        cr_assert_str_eq(scrub(plain[i]), plain[i]);
}

/* Fields with no separator (paths, model names) take the quick pass: only a long prefixed run is masked. */
Test(scrub, masks_keys_in_text_without_separators)
{
    cr_assert_str_eq(scrub("/v1/sk-ant-api03-abcdefghijkl/models"), "/v1/sk-ant-…ijkl/models");
    cr_assert_str_eq(scrub("sk-abcdefgh"), "…",
                     "the shortest prefix and 8 more: masked, too short for a tail");
    cr_assert_str_eq(scrub("models/AIzaSyDaGmWKa4JsXZ"), "models/AIza…JsXZ");
    const char *plain[] = {"/v1/chat/completions", "claude-sonnet-4-5-20250929", "sk-abcdefg",
                           "x_sk-abcdefghijkl", "gpt-4o-mini"};
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        cr_assert_str_eq(scrub(plain[i]), plain[i]);
}

Test(scrub, is_idempotent)
{
    char once[256];
    strcpy(once, scrub("x-api-key sk-ant-api03-ZZZZZZZZZZZZZZZZZZZZ-abcd and Bearer sk-abcdefghijklmnopq "
                       "redis://:hunter2@h redis://:ab@h"));
    cr_assert_str_eq(scrub(once), once);
}
