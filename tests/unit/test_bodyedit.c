/*
 * Body edits before a hop (core/bodyedit.h): spans replaced and text
 * inserted without a parse, and the one edit that makes an OpenAI Chat
 * stream report its usage (behaviour.md §7), checked by parsing the result.
 * Also the scan of stream_options (core/jscan.h) and the usage-only chunk
 * that the gateway drops again on the way back (core/stream_class.h).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/bodyedit.h"
#include "core/jscan.h"
#include "core/stream_class.h"

/* The body after asking for usage; NULL when nothing had to change. Caller frees. */
static char *
asked(const char *body)
{
    sl_jscan_t f;
    cr_assert(sl_jscan(body, strlen(body), &f), "%s", body);
    sl_body_edit_t e;
    if (!sl_body_ask_for_usage(body, strlen(body), &f, &e))
        return NULL;
    size_t len;
    char *out = sl_body_apply(body, strlen(body), &e, 1, &len);
    cr_assert_eq(strlen(out), len);
    return out;
}

/* The body parses and says stream_options.include_usage: true; other members are kept. */
static void
expect_asks(const char *body, const char *keep_key)
{
    char *out = asked(body);
    cr_assert_not_null(out, "%s needed an edit", body);
    json_error_t err;
    json_t *root = json_loads(out, 0, &err);
    cr_assert_not_null(root, "%s -> %s: %s", body, out, err.text);
    cr_assert(json_is_true(json_object_get(json_object_get(root, "stream_options"), "include_usage")), "%s",
              out);
    if (keep_key != NULL)
        cr_assert_not_null(json_object_get(root, keep_key), "%s lost %s: %s", body, keep_key, out);
    json_decref(root);
    free(out);
}

Test(bodyedit, a_body_without_stream_options_gets_them_before_its_closing_brace)
{
    expect_asks("{\"model\":\"gpt-x\",\"stream\":true,\"messages\":[]}", "messages");
    expect_asks("  {\n \"model\": \"gpt-x\"}", "model");
    expect_asks("{\"model\": \"gpt-x\"\n} \n", "model");
    expect_asks("{}", NULL);
    expect_asks("{ }", NULL);
    char *out = asked("{\"model\":\"m\"}");
    cr_assert_str_eq(out, "{\"model\":\"m\",\"stream_options\":{\"include_usage\":true}}");
    free(out);
}

/* Found by tests/fuzz/fuzz_jscan (corpus chat-stream-options-null): inserted after the opening brace,
 * the member lost to a later "stream_options": null, the value the upstream reads. */
Test(bodyedit, a_stream_options_that_is_not_an_object_is_outvoted)
{
    expect_asks("{\"model\":\"gpt-4o\",\"stream\":true,\"stream_options\":null}", "model");
    expect_asks("{\"stream_options\":null}", NULL);
    expect_asks("{\"stream_options\":{\"include_usage\":true},\"stream_options\":false}", NULL);
}

Test(bodyedit, stream_options_without_include_usage_get_the_member)
{
    char *out = asked("{\"stream_options\":{\"include_obfuscation\":false},\"stream\":true}");
    cr_assert_str_eq(
        out, "{\"stream_options\":{\"include_usage\":true,\"include_obfuscation\":false},\"stream\":true}");
    free(out);
    expect_asks("{\"stream_options\":{ },\"stream\":true}", "stream");
}

Test(bodyedit, an_include_usage_that_is_not_true_is_replaced)
{
    char *out = asked("{\"stream_options\":{\"include_usage\":false},\"model\":\"m\"}");
    cr_assert_str_eq(out, "{\"stream_options\":{\"include_usage\":true},\"model\":\"m\"}");
    free(out);
    expect_asks("{\"stream_options\":{\"include_usage\":null}}", NULL);
    expect_asks("{\"stream_options\":{\"include_usage\":\"yes\"}}", NULL);
}

Test(bodyedit, a_client_that_asked_already_is_left_alone)
{
    cr_assert_null(asked("{\"stream_options\":{\"include_usage\":true},\"model\":\"m\"}"));
}

Test(bodyedit, only_the_top_level_stream_options_count)
{
    /* A nested object of that name (in a tool schema) is not the request's. */
    const char *body = "{\"tools\":[{\"stream_options\":{\"include_usage\":true}}],\"model\":\"m\"}";
    sl_jscan_t f;
    cr_assert(sl_jscan(body, strlen(body), &f));
    cr_assert_eq(f.stream_options.len, 0);
    cr_assert_eq(f.include_usage.len, 0);
    expect_asks(body, "tools");
    /* Nor an include_usage deeper inside stream_options. */
    body = "{\"stream_options\":{\"x\":{\"include_usage\":true}}}";
    cr_assert(sl_jscan(body, strlen(body), &f));
    cr_assert_neq(f.stream_options.len, 0);
    cr_assert_eq(f.include_usage.len, 0);
}

Test(bodyedit, a_later_stream_options_replaces_an_earlier_one)
{
    const char *body = "{\"stream_options\":{\"include_usage\":true},\"stream_options\":{}}";
    sl_jscan_t f;
    cr_assert(sl_jscan(body, strlen(body), &f));
    cr_assert_eq(f.include_usage.len, 0, "the last one wins, as the upstream reads it");
    body = "{\"stream_options\":{\"include_usage\":true},\"stream_options\":null}";
    cr_assert(sl_jscan(body, strlen(body), &f));
    cr_assert_eq(f.stream_options.len, 0);
    cr_assert_eq(f.include_usage.len, 0);
}

Test(bodyedit, edits_apply_in_offset_order_whatever_their_order)
{
    const char *body = "{\"model\":\"a\",\"x\":1}";
    sl_body_edit_t e[2] = {
        {13, 0, "\"y\":2,", 6},
        {9, 3, "\"bb\"", 4},
    };
    size_t len;
    char *out = sl_body_apply(body, strlen(body), e, 2, &len);
    cr_assert_str_eq(out, "{\"model\":\"bb\",\"y\":2,\"x\":1}");
    free(out);
    cr_assert_null(sl_body_apply(body, strlen(body), e, 0, &len), "no edits, no copy");
}

Test(bodyedit, the_usage_only_chunk_is_told_from_content_chunks)
{
    const char *usage =
        "{\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5}}";
    cr_assert(sl_openai_chat_usage_only(usage, strlen(usage)));
    const char *spaced = "{\"choices\": [ ] ,\"usage\" : {\"prompt_tokens\":1}}";
    cr_assert(sl_openai_chat_usage_only(spaced, strlen(spaced)));
    const char *content = "{\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}";
    cr_assert_not(sl_openai_chat_usage_only(content, strlen(content)));
    const char *last =
        "{\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1}}";
    cr_assert_not(sl_openai_chat_usage_only(last, strlen(last)), "usage on a choice chunk is content's");
    const char *nothing = "{\"choices\":[],\"usage\":null}";
    cr_assert_not(sl_openai_chat_usage_only(nothing, strlen(nothing)));
}
