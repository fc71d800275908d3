/*
 * Usage of whole (non-streamed) answers (answer_usage.h): each dialect's
 * real-shaped answer read from every tail of it; which "usage" key is taken
 * (top-level only: not one inside a string, behind an escaped quote, or
 * nested in a later object); bodies that are cut, absent or not JSON; and the
 * mapping checked against the stream classifiers, so that a count reads the
 * same streamed or whole.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/answer_usage.h"
#include "core/stream_bedrock.h"
#include "core/dialect.h"
#include "core/stream_class.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const sl_usage_t untouched = {7, 7, 7, 7};

static void
assert_usage(const sl_usage_t *got, const sl_usage_t *want, const char *what)
{
    cr_assert_eq(got->input, want->input, "%s: input %ld", what, (long)got->input);
    cr_assert_eq(got->output, want->output, "%s: output %ld", what, (long)got->output);
    cr_assert_eq(got->cache_read, want->cache_read, "%s: cache_read %ld", what, (long)got->cache_read);
    cr_assert_eq(got->cache_write, want->cache_write, "%s: cache_write %ld", what, (long)got->cache_write);
}

/* sl_answer_usage over a copy of tail[0..len) in a buffer of exactly len bytes, so that ASan sees any
 * read outside it. *out starts as `untouched`. */
static bool
answer(sl_dialect_t d, const char *tail, size_t len, sl_usage_t *out)
{
    char *copy = malloc(len ? len : 1);
    cr_assert_not_null(copy);
    memcpy(copy, tail, len);
    *out = untouched;
    bool ok = sl_answer_usage(d, copy, len, out);
    free(copy);
    return ok;
}

static void
expect_none(sl_dialect_t d, const char *body, const char *what)
{
    sl_usage_t u;
    cr_assert_not(answer(d, body, strlen(body), &u), "%s: read from %s", what, body);
    assert_usage(&u, &untouched, what);
}

static void
expect_usage(sl_dialect_t d, const char *body, sl_usage_t want, const char *what)
{
    sl_usage_t u;
    cr_assert(answer(d, body, strlen(body), &u), "%s: nothing read from %s", what, body);
    assert_usage(&u, &want, what);
}

/* ---- each dialect's answer, from every tail ------------------------------------------------- */

typedef struct {
    const char *name;
    sl_dialect_t dialect;
    const char *body;
    /* Where the top-level key starts (its opening quote): unique in body. */
    const char *key_at;
    sl_usage_t want;
} answer_t;

static const answer_t answers[] = {
    {"anthropic",
     SL_DIALECT_ANTHROPIC,
     "{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\","
     "\"model\":\"claude-sonnet-4-20250514\",\"content\":[{\"type\":\"text\",\"text\":\"I'll check the "
     "weather.\"},{\"type\":\"tool_use\",\"id\":\"toolu_01A09q90qw90lq917835lq9\",\"name\":\"get_weather\","
     "\"input\":{\"location\":\"San Francisco, CA\",\"unit\":\"celsius\"}}],\"stop_reason\":\"tool_use\","
     "\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":2048,"
     "\"cache_read_input_tokens\":4096,\"cache_creation\":{\"ephemeral_5m_input_tokens\":2048,"
     "\"ephemeral_1h_input_tokens\":0},\"output_tokens\":71,\"service_tier\":\"standard\"}}",
     "\"usage\":{\"input_tokens\":12",
     {12, 71, 4096, 2048}},
    {"openai chat, pretty-printed",
     SL_DIALECT_OPENAI_CHAT,
     "{\n"
     "  \"id\": \"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\n"
     "  \"object\": \"chat.completion\",\n"
     "  \"created\": 1741570283,\n"
     "  \"model\": \"gpt-4o-2024-08-06\",\n"
     "  \"choices\": [\n"
     "    {\n"
     "      \"index\": 0,\n"
     "      \"message\": {\n"
     "        \"role\": \"assistant\",\n"
     "        \"content\": \"The image shows a wooden boardwalk extending through a lush green "
     "marshland.\",\n"
     "        \"refusal\": null,\n"
     "        \"annotations\": []\n"
     "      },\n"
     "      \"logprobs\": null,\n"
     "      \"finish_reason\": \"stop\"\n"
     "    }\n"
     "  ],\n"
     "  \"usage\": {\n"
     "    \"prompt_tokens\": 1117,\n"
     "    \"completion_tokens\": 46,\n"
     "    \"total_tokens\": 1163,\n"
     "    \"prompt_tokens_details\": {\n"
     "      \"cached_tokens\": 1024,\n"
     "      \"audio_tokens\": 0\n"
     "    },\n"
     "    \"completion_tokens_details\": {\n"
     "      \"reasoning_tokens\": 0,\n"
     "      \"audio_tokens\": 0,\n"
     "      \"accepted_prediction_tokens\": 0,\n"
     "      \"rejected_prediction_tokens\": 0\n"
     "    }\n"
     "  },\n"
     "  \"service_tier\": \"default\",\n"
     "  \"system_fingerprint\": \"fp_fc9f1d7035\"\n"
     "}\n",
     "\"usage\": {\n    \"prompt_tokens\": 1117",
     {93, 46, 1024, 0}},
    {"openai responses",
     SL_DIALECT_OPENAI_RESPONSES,
     "{\"id\":\"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b\",\"object\":\"response\","
     "\"created_at\":1741476542,\"status\":\"completed\",\"error\":null,\"incomplete_details\":null,"
     "\"instructions\":null,\"max_output_tokens\":null,\"model\":\"gpt-4.1-2025-04-14\",\"output\":[{"
     "\"type\":\"message\",\"id\":\"msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b\",\"status\":"
     "\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"In a peaceful "
     "grove beneath a silver moon, a unicorn named Lumina discovered a hidden pool.\",\"annotations\":[]}]}],"
     "\"parallel_tool_calls\":true,\"previous_response_id\":null,\"reasoning\":{\"effort\":null,\"summary\":"
     "null},\"store\":true,\"temperature\":1.0,\"text\":{\"format\":{\"type\":\"text\"}},\"tool_choice\":"
     "\"auto\",\"tools\":[],\"top_p\":1.0,\"truncation\":\"disabled\",\"usage\":{\"input_tokens\":36,"
     "\"input_tokens_details\":{\"cached_tokens\":30},\"output_tokens\":87,\"output_tokens_details\":{"
     "\"reasoning_tokens\":0},\"total_tokens\":123},\"user\":null,\"metadata\":{}}",
     "\"usage\":{\"input_tokens\":36",
     {6, 87, 30, 0}},
    {"gemini",
     SL_DIALECT_GEMINI,
     "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"AI learns patterns from data to make "
     "predictions.\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"avgLogprobs\":-0.1274}],"
     "\"usageMetadata\":{\"promptTokenCount\":2100,\"candidatesTokenCount\":50,\"totalTokenCount\":2370,"
     "\"cachedContentTokenCount\":2048,\"promptTokensDetails\":[{\"modality\":\"TEXT\",\"tokenCount\":2100}],"
     "\"cacheTokensDetails\":[{\"modality\":\"TEXT\",\"tokenCount\":2048}],\"thoughtsTokenCount\":220},"
     "\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"v3fRaO-OAcGnvdIPqLar8AI\"}\r\n",
     "\"usageMetadata\":{\"promptTokenCount\":2100",
     {52, 270, 2048, 0}},
    {"bedrock converse, with a guardrail trace after the usage",
     SL_DIALECT_BEDROCK,
     "{\"metrics\":{\"latencyMs\":1275},\"output\":{\"message\":{\"content\":[{\"text\":\"Hello! How can I "
     "help?\"}],\"role\":\"assistant\"}},\"stopReason\":\"end_turn\",\"usage\":{\"cacheReadInputTokens\":"
     "1200,"
     "\"cacheWriteInputTokens\":300,\"inputTokens\":30,\"outputTokens\":628,\"totalTokens\":2158},"
     "\"trace\":{\"guardrail\":{\"inputAssessment\":{\"4p8vp1n7ckvr\":{\"invocationMetrics\":{"
     "\"guardrailProcessingLatency\":120,\"usage\":{\"topicPolicyUnits\":1,\"contentPolicyUnits\":1,"
     "\"wordPolicyUnits\":0,\"sensitiveInformationPolicyUnits\":0,\"sensitiveInformationPolicyFreeUnits\":0,"
     "\"contextualGroundingPolicyUnits\":0},\"guardrailCoverage\":{\"textCharacters\":{\"guarded\":20,"
     "\"total\":20}}}}}}}}",
     "\"usage\":{\"cacheReadInputTokens\"",
     {30, 628, 1200, 300}},
};

Test(answer_usage, each_dialect_reads_its_real_shaped_answer)
{
    for (size_t i = 0; i < N(answers); i++)
        expect_usage(answers[i].dialect, answers[i].body, answers[i].want, answers[i].name);
}

/* A tail that starts before the key's opening quote has the whole object and reads it; one that starts
 * at the quote (an escaped quote cannot be ruled out) or anywhere after it reads nothing. */
Test(answer_usage, every_tail_reads_the_usage_until_the_key_is_cut)
{
    for (size_t i = 0; i < N(answers); i++) {
        const char *body = answers[i].body;
        size_t len = strlen(body);
        const char *key = strstr(body, answers[i].key_at);
        cr_assert_not_null(key, "%s: key_at", answers[i].name);
        cr_assert_null(strstr(key + 1, answers[i].key_at), "%s: key_at is unique", answers[i].name);
        size_t key_at = (size_t)(key - body);
        for (size_t from = 0; from <= len; from++) {
            sl_usage_t u;
            bool ok = answer(answers[i].dialect, body + from, len - from, &u);
            cr_assert_eq(ok, from < key_at, "%s: tail from byte %zu of %zu (key at %zu)", answers[i].name,
                         from, len, key_at);
            assert_usage(&u, ok ? &answers[i].want : &untouched, answers[i].name);
        }
    }
}

/* A body cut short (the upstream closed mid-answer) does not end as the answer's object does: never read,
 * whatever inner object the cut happens to close. */
Test(answer_usage, a_body_cut_short_is_not_read)
{
    for (size_t i = 0; i < N(answers); i++) {
        const char *body = answers[i].body;
        size_t len = strlen(body);
        while (len > 0 && strchr(" \r\n", body[len - 1]))
            len--;
        for (size_t n = 0; n < len; n++) {
            sl_usage_t u;
            cr_assert_not(answer(answers[i].dialect, body, n, &u), "%s: cut at %zu of %zu", answers[i].name,
                          n, len);
            assert_usage(&u, &untouched, answers[i].name);
        }
    }
}

Test(answer_usage, each_dialect_reads_only_its_own_key)
{
    static const char chat_usage[] =
        "{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}";
    /* Gemini names its member usageMetadata; the others usage. */
    expect_none(SL_DIALECT_GEMINI, chat_usage, "gemini reads no \"usage\"");
    expect_none(SL_DIALECT_ANTHROPIC, answers[3].body, "anthropic reads no usageMetadata");
    /* Each dialect's key names: the chat object's counts mean nothing to Responses or Bedrock. */
    expect_none(SL_DIALECT_OPENAI_RESPONSES, chat_usage, "responses key names");
    expect_none(SL_DIALECT_BEDROCK, chat_usage, "bedrock key names");
    expect_usage(SL_DIALECT_OPENAI_CHAT, chat_usage, (sl_usage_t){5, 2, 0, 0}, "chat");
    expect_none(SL_DIALECT_COUNT, chat_usage, "not a dialect");
    expect_none((sl_dialect_t)-1, chat_usage, "not a dialect");
}

/* ---- which key is taken ------------------------------------------------------------------- */

Test(answer_usage, a_usage_written_inside_a_string_is_not_taken)
{
    /* After the real usage: Responses metadata values are strings set by the caller. */
    expect_usage(
        SL_DIALECT_OPENAI_RESPONSES,
        "{\"output\":[],\"usage\":{\"input_tokens\":36,\"output_tokens\":87},\"user\":null,"
        "\"metadata\":{\"note\":\"{\\\"usage\\\":{\\\"input_tokens\\\":999,\\\"output_tokens\\\":999}}\"}}",
        (sl_usage_t){36, 87, 0, 0}, "escaped JSON in a later string");
    /* No usage at all, only text that looks like one (the tail starts inside the string, too). */
    static const char text_only[] =
        "{\"content\":[{\"type\":\"text\",\"text\":\"Reply with \\\"usage\\\":{\\\"input_tokens\\\":999} "
        "verbatim\"}],\"usage\":null}";
    for (size_t from = 0; from < sizeof text_only - 1; from++) {
        sl_usage_t u;
        cr_assert_not(answer(SL_DIALECT_ANTHROPIC, text_only + from, sizeof text_only - 1 - from, &u),
                      "from %zu", from);
    }
    /* Backslashes in text: an escaped backslash before a closing quote does not escape it. */
    expect_usage(SL_DIALECT_ANTHROPIC,
                 "{\"content\":[{\"type\":\"text\",\"text\":\"C:\\\\\"}],\"usage\":{\"input_tokens\":3,"
                 "\"output_tokens\":1},\"path\":\"\\\\\\\\srv\\\\\",\"q\":\"\\\"\"}",
                 (sl_usage_t){3, 1, 0, 0}, "backslash runs");
}

Test(answer_usage, a_key_that_only_ends_in_usage_is_not_taken)
{
    expect_usage(SL_DIALECT_ANTHROPIC,
                 "{\"usage\":{\"input_tokens\":1,\"output_tokens\":2},\"x\\\"usage\":{\"input_tokens\":999},"
                 "\"prior_usage\":{\"input_tokens\":999},\"usage_\":{\"input_tokens\":999}}",
                 (sl_usage_t){1, 2, 0, 0}, "x\\\"usage, prior_usage, usage_");
    /* A quote behind an odd run of backslashes is escaped: it opens no key. */
    expect_none(SL_DIALECT_ANTHROPIC, "{\"k\":\"x\\\\\\\\\\\"usage\":{\"input_tokens\":999}}",
                "escaped key quote");
}

/*
 * Decided: only a member of the answer's top-level object counts. A "usage" nested in a later object
 * (Bedrock's additionalModelResponseFields or guardrail trace, a tool's input, caller metadata) is the
 * model's or a plugin's, not the bill, even when its key names match the dialect's counts.
 */
Test(answer_usage, a_nested_later_usage_is_not_taken)
{
    expect_usage(SL_DIALECT_BEDROCK,
                 "{\"output\":{\"message\":{\"content\":[{\"text\":\"hi\"}],\"role\":\"assistant\"}},"
                 "\"stopReason\":\"end_turn\",\"usage\":{\"inputTokens\":30,\"outputTokens\":8},"
                 "\"additionalModelResponseFields\":{\"usage\":{\"inputTokens\":999,\"outputTokens\":999}}}",
                 (sl_usage_t){30, 8, 0, 0}, "additionalModelResponseFields");
    expect_usage(SL_DIALECT_OPENAI_CHAT,
                 "{\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":4},\"choices\":[{\"message\":{"
                 "\"tool_calls\":[],\"usage\":{\"prompt_tokens\":999}}}],\"extra\":[{\"usage\":{"
                 "\"prompt_tokens\":999}}]}",
                 (sl_usage_t){10, 4, 0, 0}, "nested in arrays after the top-level one");
    /* Only nested ones: nothing to read. */
    expect_none(SL_DIALECT_ANTHROPIC,
                "{\"content\":[{\"type\":\"tool_use\",\"input\":{\"usage\":{\"input_tokens\":999}}}]}",
                "usage only in a tool's input");
}

Test(answer_usage, the_last_top_level_usage_object_wins)
{
    /* As jansson keeps the last of a duplicated key. */
    expect_usage(SL_DIALECT_ANTHROPIC,
                 "{\"usage\":{\"input_tokens\":1},\"usage\":{\"input_tokens\":2,\"output_tokens\":5}}",
                 (sl_usage_t){2, 5, 0, 0}, "duplicate key");
}

Test(answer_usage, whitespace_around_the_colon_and_after_the_body)
{
    expect_usage(SL_DIALECT_ANTHROPIC, "{ \"usage\" \n\t:\r\n { \"output_tokens\" : 9 } } \r\n\n",
                 (sl_usage_t){0, 9, 0, 0}, "spaces");
}

/* Gemini's streamGenerateContent without alt=sse answers one JSON array of chunks with running totals. */
Test(answer_usage, an_array_of_chunks_is_read_from_its_last_usage)
{
    expect_usage(SL_DIALECT_GEMINI,
                 "[{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"AI\"}],\"role\":\"model\"}}],"
                 "\"usageMetadata\":{\"promptTokenCount\":9,\"totalTokenCount\":9}},\r\n"
                 "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\" learns\"}],\"role\":\"model\"},"
                 "\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":9,"
                 "\"candidatesTokenCount\":4,\"totalTokenCount\":13},\"modelVersion\":\"gemini-2.5-flash\"}]",
                 (sl_usage_t){9, 4, 0, 0}, "last chunk");
    expect_usage(SL_DIALECT_GEMINI,
                 "[{\"usageMetadata\":{\"promptTokenCount\":9,\"candidatesTokenCount\":1}},"
                 "{\"candidates\":[]}]",
                 (sl_usage_t){9, 1, 0, 0}, "the last chunk that has one");
    expect_none(SL_DIALECT_GEMINI, "[[{\"usageMetadata\":{\"promptTokenCount\":9}}]]", "deeper than a chunk");
}

/* ---- nothing to read ----------------------------------------------------------------------- */

Test(answer_usage, bodies_without_a_readable_usage_read_nothing)
{
    static const char *const bodies[] = {
        "",
        " \r\n",
        "}",
        "]",
        "{}",
        "[]",
        "Internal Server Error",
        "<html><body><h1>502 Bad Gateway</h1></body></html>\n",
        "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}",
        "{\"usage\":{\"input_tokens\":1,\"output_tokens\":2}",   /* not closed */
        "{\"usage\":{\"input_tokens\":1,\"output_tokens\":2}},", /* trailing garbage */
        "{\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}", /* more closed than opened */
        "{\"usage\":{\"input_tokens\":1,\"output_tokens\":}}",   /* the object does not parse */
        "{\"usage\":{\"input_tokens\":1 \"output_tokens\":2}}",  /* nor this */
        "{\"usage\":{\"input_tokens\":1]}",                      /* mismatched */
        "{\"usage\":null}",
        "{\"usage\":[{\"input_tokens\":1}]}",
        "{\"usage\":\"{\\\"input_tokens\\\":1}\"}",
        "{\"usage\":{}}", /* no count */
        "{\"usage\":{\"total_tokens\":3,\"service_tier\":\"standard\"}}",
        "{\"usage\":{\"input_tokens\":-1,\"output_tokens\":1.5,\"cache_read_input_tokens\":\"2\"}}",
        "{\"usage\":{\"input_tokens\":null,\"output_tokens\":true}}",
        "{\"usage\"{\"input_tokens\":1}}",     /* no colon */
        "{usage:{\"input_tokens\":1}}",        /* not a JSON key */
        "\"usage\":{\"input_tokens\":1}}",     /* the key's quote is the first byte */
        "\\\"usage\":{\"input_tokens\":1}}",   /* a backslash before it, maybe escaped */
        "\\\\\"usage\":{\"input_tokens\":1}}", /* a run of them reaching the start */
        "abc\"}",                              /* a string opened before the tail */
        "{\"a\":\"x\\\"}",                     /* an escaped quote outside a string */
    };
    for (size_t i = 0; i < N(bodies); i++)
        expect_none(SL_DIALECT_ANTHROPIC, bodies[i], "bad body");
    sl_usage_t u = untouched;
    cr_assert_not(sl_answer_usage(SL_DIALECT_ANTHROPIC, NULL, 0, &u), "NULL tail");
    assert_usage(&u, &untouched, "NULL tail");
}

Test(answer_usage, counts_left_out_are_zero)
{
    expect_usage(SL_DIALECT_ANTHROPIC, "{\"usage\":{\"input_tokens\":4}}", (sl_usage_t){4, 0, 0, 0},
                 "input only");
    expect_usage(SL_DIALECT_OPENAI_CHAT,
                 "{\"usage\":{\"completion_tokens\":4,\"prompt_tokens_details\":null}}",
                 (sl_usage_t){0, 4, 0, 0}, "output only");
    expect_usage(SL_DIALECT_OPENAI_CHAT,
                 "{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"prompt_tokens_details\":{"
                 "\"cached_tokens\":8}}}",
                 (sl_usage_t){0, 2, 3, 0}, "cached clamped to the prompt");
    expect_usage(SL_DIALECT_GEMINI, "{\"usageMetadata\":{\"promptTokenCount\":12,\"totalTokenCount\":12}}",
                 (sl_usage_t){12, 0, 0, 0}, "gemini prompt only");
}

/* ---- one rule, streamed or whole ---------------------------------------------------------- */

/* The usage a stream classifier takes from the object u, starting from zeros. */
static sl_usage_t
streamed(sl_dialect_t d, const char *u)
{
    char text[2048];
    sl_usage_t usage = {0};
    sl_stream_verdict_t v;
    if (d == SL_DIALECT_BEDROCK) {
        snprintf(text, sizeof text, "{\"usage\":%s,\"metrics\":{\"latencyMs\":1}}", u);
        sl_bedrock_message_t m = {.message_type = "event",
                                  .message_type_len = 5,
                                  .event_type = "metadata",
                                  .event_type_len = 8,
                                  .payload = text,
                                  .payload_len = strlen(text)};
        sl_bedrock_classify(SL_STREAM_FLOWING, &m, &v, &usage);
        return usage;
    }
    static const char *const frames[SL_DIALECT_COUNT] = {
        [SL_DIALECT_ANTHROPIC] = "event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"end_turn\"},"
                                 "\"usage\":%s}\n\n",
        [SL_DIALECT_OPENAI_CHAT] = "data: {\"choices\":[],\"usage\":%s}\n\n",
        [SL_DIALECT_OPENAI_RESPONSES] = "event: response.completed\ndata: {\"type\":\"response.completed\","
                                        "\"response\":{\"status\":\"completed\",\"usage\":%s}}\n\n",
        [SL_DIALECT_GEMINI] = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]}}],"
                              "\"usageMetadata\":%s}\n\n",
    };
    snprintf(text, sizeof text, frames[d], u);
    static char scratch[4096];
    sl_sse_scanner_t s;
    sl_sse_init(&s, 65536, scratch, sizeof scratch);
    sl_sse_event_t ev;
    cr_assert_eq(sl_sse_next(&s, text, strlen(text), &ev), SL_SSE_EVENT, "%s", text);
    sl_stream_t st;
    sl_stream_init(&st, sl_dialect_def(d)->stream);
    sl_stream_feed(&st, &ev, &v);
    return st.usage;
}

static const struct {
    sl_dialect_t dialect;
    const char *usage;
} usage_objects[] = {
    {SL_DIALECT_ANTHROPIC, "{\"input_tokens\":12,\"cache_creation_input_tokens\":2048,"
                           "\"cache_read_input_tokens\":4096,\"output_tokens\":71}"},
    {SL_DIALECT_ANTHROPIC, "{\"output_tokens\":71,\"input_tokens\":null}"},
    {SL_DIALECT_ANTHROPIC, "{\"input_tokens\":-3,\"output_tokens\":2.5,\"cache_read_input_tokens\":\"1\"}"},
    {SL_DIALECT_OPENAI_CHAT, "{\"prompt_tokens\":1117,\"completion_tokens\":46,\"total_tokens\":1163,"
                             "\"prompt_tokens_details\":{\"cached_tokens\":1024,\"audio_tokens\":0}}"},
    {SL_DIALECT_OPENAI_CHAT, "{\"prompt_tokens\":3,\"completion_tokens\":2,\"prompt_tokens_details\":{"
                             "\"cached_tokens\":8}}"},
    {SL_DIALECT_OPENAI_CHAT, "{\"prompt_tokens\":3,\"prompt_tokens_details\":null}"},
    {SL_DIALECT_OPENAI_CHAT, "{\"completion_tokens\":5}"},
    {SL_DIALECT_OPENAI_RESPONSES,
     "{\"input_tokens\":36,\"input_tokens_details\":{\"cached_tokens\":30},"
     "\"output_tokens\":87,\"output_tokens_details\":{\"reasoning_tokens\":10}}"},
    {SL_DIALECT_OPENAI_RESPONSES, "{\"input_tokens\":36,\"output_tokens\":null}"},
    {SL_DIALECT_GEMINI, "{\"promptTokenCount\":2100,\"candidatesTokenCount\":50,\"totalTokenCount\":2370,"
                        "\"cachedContentTokenCount\":2048,\"thoughtsTokenCount\":220}"},
    {SL_DIALECT_GEMINI, "{\"promptTokenCount\":10,\"toolUsePromptTokenCount\":5,\"candidatesTokenCount\":3,"
                        "\"thoughtsTokenCount\":20,\"totalTokenCount\":38}"},
    {SL_DIALECT_GEMINI, "{\"promptTokenCount\":3,\"cachedContentTokenCount\":9}"},
    {SL_DIALECT_GEMINI, "{\"thoughtsTokenCount\":7}"},
    {SL_DIALECT_GEMINI,
     "{\"promptTokenCount\":-1,\"candidatesTokenCount\":\"4\",\"cachedContentTokenCount\":1}"},
    {SL_DIALECT_BEDROCK, "{\"inputTokens\":4,\"outputTokens\":264,\"totalTokens\":5396,"
                         "\"cacheReadInputTokens\":0,\"cacheWriteInputTokens\":5128}"},
    {SL_DIALECT_BEDROCK, "{\"outputTokens\":7,\"inputTokens\":1.0}"},
};

/* Each usage object placed as a whole answer's member and in the dialect's stream event reads the same. */
Test(answer_usage, whole_and_streamed_answers_read_the_same_counts)
{
    for (size_t i = 0; i < N(usage_objects); i++) {
        sl_dialect_t d = usage_objects[i].dialect;
        char body[2048];
        snprintf(body, sizeof body, "{\"id\":\"x\",\"%s\":%s,\"model\":\"m\"}",
                 d == SL_DIALECT_GEMINI ? "usageMetadata" : "usage", usage_objects[i].usage);
        sl_usage_t want = streamed(d, usage_objects[i].usage), got;
        bool any = want.input || want.output || want.cache_read || want.cache_write;
        if (answer(d, body, strlen(body), &got))
            assert_usage(&got, &want, usage_objects[i].usage);
        else
            cr_assert_not(any, "%s: the stream read counts, the whole answer none", usage_objects[i].usage);
    }
}

/* The shared mapping keeps the stream contract: it overwrites what the object reports, nothing else. */
Test(answer_usage, the_mapping_leaves_what_is_not_reported)
{
    json_t *u = json_loads("{\"output_tokens\":5}", 0, NULL);
    sl_usage_t got = {1, 2, 3, 4};
    sl_usage_from_json(SL_DIALECT_ANTHROPIC, u, &got);
    assert_usage(&got, &(sl_usage_t){1, 5, 3, 4}, "anthropic output only");
    got = (sl_usage_t){1, 2, 3, 4};
    sl_usage_from_json(SL_DIALECT_COUNT, u, &got);
    sl_usage_from_json(SL_DIALECT_ANTHROPIC, NULL, &got);
    sl_usage_from_json(SL_DIALECT_ANTHROPIC, json_null(), &got);
    assert_usage(&got, &(sl_usage_t){1, 2, 3, 4}, "nothing to take");
    json_decref(u);
}

/* ---- two extractors, one rule --------------------------------------------------------------- */

/* Usage objects that are JSON, so that jansson and the walk both read them; each is read as every
 * dialect (the other dialects' key names must be ignored alike). */
static const char *const objects_both_read[] = {
    "{}",
    "{\"input_tokens\":12,\"cache_creation_input_tokens\":2048,\"cache_read_input_tokens\":4096,"
    "\"cache_creation\":{\"ephemeral_5m_input_tokens\":2048,\"ephemeral_1h_input_tokens\":0},"
    "\"output_tokens\":71,\"service_tier\":\"standard\",\"server_tool_use\":{\"web_search_requests\":1}}",
    "{\"prompt_tokens\":1117,\"completion_tokens\":46,\"total_tokens\":1163,\"prompt_tokens_details\":{"
    "\"cached_tokens\":1024,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0,"
    "\"cached_tokens\":999}}",
    "{\"input_tokens\":36,\"input_tokens_details\":{\"cached_tokens\":30},\"output_tokens\":87,"
    "\"output_tokens_details\":{\"reasoning_tokens\":10},\"total_tokens\":123}",
    "{\"promptTokenCount\":2100,\"candidatesTokenCount\":50,\"totalTokenCount\":2370,"
    "\"cachedContentTokenCount\":2048,\"promptTokensDetails\":[{\"modality\":\"TEXT\",\"tokenCount\":2100}],"
    "\"thoughtsTokenCount\":220,\"toolUsePromptTokenCount\":7}",
    "{\"inputTokens\":4,\"outputTokens\":264,\"totalTokens\":5396,\"cacheReadInputTokens\":0,"
    "\"cacheWriteInputTokens\":5128}",
    /* absent counts, and details that are absent, null, not an object, or without the count */
    "{\"prompt_tokens\":3,\"input_tokens\":3}",
    "{\"completion_tokens\":5,\"output_tokens\":5,\"candidatesTokenCount\":5,\"outputTokens\":5}",
    "{\"prompt_tokens\":3,\"prompt_tokens_details\":null,\"input_tokens\":3,\"input_tokens_details\":null}",
    "{\"prompt_tokens\":3,\"prompt_tokens_details\":[{\"cached_tokens\":2}],\"input_tokens\":3,"
    "\"input_tokens_details\":\"{\\\"cached_tokens\\\":2}\"}",
    "{\"prompt_tokens\":9,\"prompt_tokens_details\":{\"audio_tokens\":2},\"input_tokens\":9,"
    "\"input_tokens_details\":{}}",
    "{\"prompt_tokens_details\":{\"cached_tokens\":2},\"input_tokens_details\":{\"cached_tokens\":2},"
    "\"cachedContentTokenCount\":2,\"thoughtsTokenCount\":7}",
    /* counts that are no count */
    "{\"input_tokens\":-3,\"output_tokens\":2.5,\"cache_read_input_tokens\":\"1\","
    "\"cache_creation_input_tokens\":true,\"prompt_tokens\":1.0,\"completion_tokens\":1e3,"
    "\"promptTokenCount\":-1,\"candidatesTokenCount\":null,\"inputTokens\":[],\"outputTokens\":{}}",
    "{\"prompt_tokens\":8,\"prompt_tokens_details\":{\"cached_tokens\":-2},\"input_tokens\":8,"
    "\"input_tokens_details\":{\"cached_tokens\":2.0}}",
    "{\"prompt_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":9},\"promptTokenCount\":3,"
    "\"cachedContentTokenCount\":9}",
    "{\"input_tokens\":999999999999999999,\"prompt_tokens\":0,\"promptTokenCount\":0,\"inputTokens\":0}",
    /* duplicate keys: the last wins, at the top and in the details */
    "{\"input_tokens\":5,\"input_tokens\":7,\"output_tokens\":1,\"output_tokens\":null,"
    "\"promptTokenCount\":1,\"promptTokenCount\":\"2\",\"inputTokens\":1,\"inputTokens\":3}",
    "{\"prompt_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":5},\"prompt_tokens_details\":{"
    "\"audio_tokens\":1},\"input_tokens_details\":{\"cached_tokens\":5,\"cached_tokens\":2}}",
    /* whitespace everywhere, and counts' names inside strings */
    " {\n\t\"prompt_tokens\" :\r\n 12 ,\n \"prompt_tokens_details\" : { \"cached_tokens\" : 4 } ,"
    "\"input_tokens\"\t:\t6 , \"promptTokenCount\" : 6 ,\"outputTokens\" :2 }\n",
    "{\"note\":\"\\\"input_tokens\\\":999,\\\"prompt_tokens\\\":999 }\",\"input_tokens\":3,\"x\":{"
    "\"prompt_tokens\":999,\"promptTokenCount\":999},\"y\":[{\"inputTokens\":999}],\"prompt_tokens\":3}",
};

/* A starting usage for each extractor run: zeros, and values a report must overwrite or leave. */
static const sl_usage_t starts[] = {{0, 0, 0, 0}, {1, 2, 3, 4}};

static void
expect_extractors_agree(sl_dialect_t d, const char *text)
{
    json_error_t err;
    json_t *u = json_loads(text, 0, &err);
    cr_assert_not_null(u, "not JSON (%s): %s", err.text, text);
    size_t len = strlen(text);
    char *copy = malloc(len);
    cr_assert_not_null(copy);
    memcpy(copy, text, len);
    for (size_t s = 0; s < N(starts); s++) {
        sl_usage_t from_json = starts[s], from_span = starts[s];
        sl_usage_from_json(d, u, &from_json);
        cr_assert(sl_usage_from_span(d, copy, len, &from_span), "dialect %d: span refused %s", (int)d, text);
        char what[64];
        snprintf(what, sizeof what, "dialect %d, object at %p", (int)d, (const void *)text);
        assert_usage(&from_span, &from_json, what);
    }
    free(copy);
    json_decref(u);
}

Test(answer_usage, the_span_and_json_extractors_agree)
{
    for (int d = 0; d < SL_DIALECT_COUNT; d++) {
        for (size_t i = 0; i < N(objects_both_read); i++)
            expect_extractors_agree((sl_dialect_t)d, objects_both_read[i]);
        for (size_t i = 0; i < N(usage_objects); i++)
            expect_extractors_agree((sl_dialect_t)d, usage_objects[i].usage);
    }
}

/* Pins of the rule itself over the span extractor, from {1, 2, 3, 4}. */
Test(answer_usage, the_span_extractor_overwrites_what_is_reported)
{
    static const struct {
        sl_dialect_t dialect;
        const char *u;
        sl_usage_t want;
    } rows[] = {
        {SL_DIALECT_ANTHROPIC, "{\"output_tokens\":5}", {1, 5, 3, 4}},
        {SL_DIALECT_OPENAI_CHAT, "{\"prompt_tokens\":10}", {10, 2, 0, 4}},
        {SL_DIALECT_OPENAI_CHAT,
         "{\"prompt_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":4},\"completion_tokens\":6}",
         {6, 6, 4, 4}},
        {SL_DIALECT_OPENAI_CHAT, "{\"prompt_tokens_details\":{\"cached_tokens\":4}}", {1, 2, 3, 4}},
        {SL_DIALECT_OPENAI_RESPONSES,
         "{\"input_tokens\":3,\"input_tokens_details\":{\"cached_tokens\":9}}",
         {0, 2, 3, 4}},
        {SL_DIALECT_GEMINI, "{\"thoughtsTokenCount\":7}", {1, 7, 3, 4}},
        {SL_DIALECT_GEMINI,
         "{\"promptTokenCount\":10,\"toolUsePromptTokenCount\":5,\"cachedContentTokenCount\":4}",
         {11, 2, 4, 4}},
        {SL_DIALECT_BEDROCK, "{\"cacheWriteInputTokens\":9}", {1, 2, 3, 9}},
        {SL_DIALECT_BEDROCK, "{\"totalTokens\":9}", {1, 2, 3, 4}},
    };
    for (size_t i = 0; i < N(rows); i++) {
        sl_usage_t got = {1, 2, 3, 4};
        cr_assert(sl_usage_from_span(rows[i].dialect, rows[i].u, strlen(rows[i].u), &got), "%s", rows[i].u);
        assert_usage(&got, &rows[i].want, rows[i].u);
    }
}

static void
expect_span_refused(sl_dialect_t d, const char *text)
{
    size_t len = strlen(text);
    char *copy = malloc(len ? len : 1);
    cr_assert_not_null(copy);
    memcpy(copy, text, len);
    sl_usage_t u = untouched;
    cr_assert_not(sl_usage_from_span(d, copy, len, &u), "dialect %d: %s", (int)d, text);
    assert_usage(&u, &untouched, text);
    free(copy);
}

/* Bytes that are not one object per the walk give no count at all, as a failed parse did. */
Test(answer_usage, a_broken_object_gives_nothing)
{
    static const char *const broken[] = {
        "",
        "   ",
        "null",
        "[{\"input_tokens\":1}]",
        "\"{\\\"input_tokens\\\":1}\"",
        "{\"input_tokens\":1",
        "{\"input_tokens\":1,",
        "{\"input_tokens\":1,}",
        "{\"input_tokens\" 1}",
        "{\"input_tokens\":1 \"output_tokens\":2}",
        "{\"input_tokens\":}",
        "{\"input_tokens\":1]",
        "{input_tokens:1}",
        "{\"input_tokens\":\"1}",
        "{\"input_tokens\":1}}",
        "{\"input_tokens\":1} {\"output_tokens\":2}",
        "{\"input_tokens\":1}x",
    };
    for (int d = 0; d < SL_DIALECT_COUNT; d++) {
        for (size_t i = 0; i < N(broken); i++)
            expect_span_refused((sl_dialect_t)d, broken[i]);
    }
    /* A nested object a count is read from is walked too; one the dialect does not read is only
     * skipped (matched by depth: the walk is no validation). */
    static const char *const broken_details[] = {
        "{\"prompt_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\" 4},\"input_tokens\":10,"
        "\"input_tokens_details\":{\"cached_tokens\" 4}}",
        "{\"prompt_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":4,},\"input_tokens\":10,"
        "\"input_tokens_details\":{\"cached_tokens\":4,}}",
    };
    for (size_t i = 0; i < N(broken_details); i++) {
        expect_span_refused(SL_DIALECT_OPENAI_CHAT, broken_details[i]);
        expect_span_refused(SL_DIALECT_OPENAI_RESPONSES, broken_details[i]);
    }
    /* Whitespace around the one object is allowed. */
    sl_usage_t u = untouched;
    cr_assert(sl_usage_from_span(SL_DIALECT_ANTHROPIC, " \n{\"input_tokens\":1}\r\n ", 23, &u));
    assert_usage(&u, &(sl_usage_t){1, 7, 7, 7}, "spaced");
    u = untouched;
    cr_assert_not(sl_usage_from_span(SL_DIALECT_ANTHROPIC, NULL, 0, &u), "NULL");
    cr_assert_not(sl_usage_from_span(SL_DIALECT_COUNT, "{\"input_tokens\":1}", 18, &u), "not a dialect");
    cr_assert_not(sl_usage_from_span((sl_dialect_t)-1, "{\"input_tokens\":1}", 18, &u), "not a dialect");
    assert_usage(&u, &untouched, "nothing to take");
}

/* The trace's gen_ai.response.finish_reasons of a whole answer: the dialect's key, read from the tail. */
Test(answer_usage, each_dialect_reads_its_finish_reason_from_the_tail)
{
    static const char *const want[] = {"tool_use", "stop", "", "STOP", "end_turn"};
    cr_assert_eq(N(answers), 5);
    for (size_t i = 0; i < N(answers); i++) {
        char reason[SL_FINISH_REASON_MAX] = "";
        bool got =
            sl_answer_finish_reason(answers[i].dialect, answers[i].body, strlen(answers[i].body), reason);
        cr_assert_eq(got, want[i][0] != '\0', "%s", answers[i].name);
        cr_assert_str_eq(reason, want[i], "%s", answers[i].name);
    }
}

Test(answer_usage, a_finish_reason_in_text_or_null_is_none)
{
    char reason[SL_FINISH_REASON_MAX] = "";
    const char *in_text =
        "{\"content\":[{\"text\":\"say \\\"stop_reason\\\": \\\"end_turn\\\"\"}],\"stop_reason\":null}";
    cr_assert_not(sl_answer_finish_reason(SL_DIALECT_ANTHROPIC, in_text, strlen(in_text), reason));
    const char *odd = "{\"stop_reason\":\"a b\"}";
    cr_assert_not(sl_answer_finish_reason(SL_DIALECT_ANTHROPIC, odd, strlen(odd), reason), "not a token");
    const char *last = "{\"content\":[{\"type\":\"tool_use\",\"input\":{\"stop_reason\":\"x\"}}],"
                       "\"stop_reason\" : \"tool_use\"}";
    cr_assert(sl_answer_finish_reason(SL_DIALECT_ANTHROPIC, last, strlen(last), reason));
    cr_assert_str_eq(reason, "tool_use", "the last one, the top-level one, wins");
    cr_assert_not(sl_answer_finish_reason(SL_DIALECT_OPENAI_RESPONSES, last, strlen(last), reason));
}
