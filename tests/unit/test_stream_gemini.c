/*
 * Gemini stream classification (formats.md, Gemini; stream_gemini.c): the
 * fixtures event by event, whole and split at every byte, through the SSE
 * scanner and the bare-error check the way the shell runs them; the opening /
 * content / error rules as tables; usage; completeness by finishReason; the
 * bare JSON error; and the classes its errors land in.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/classify.h"
#include "core/hints.h"
#include "core/dialect.h"
#include "core/stream_class.h"
#include "test_fixture.h"

#define MAX_EVENTS 64

static char
letter(sl_stream_kind_t k)
{
    static const char letters[] = {
        [SL_STREAM_IGNORE] = 'I', [SL_STREAM_OPENING] = 'O', [SL_STREAM_CONTENT] = 'C',
        [SL_STREAM_ERROR] = 'X',  [SL_STREAM_END] = 'E',
    };
    return letters[k];
}

typedef struct {
    char kinds[MAX_EVENTS + 1]; /* one letter per verdict; a bare error is 'B' */
    sl_stream_verdict_t last_error;
    sl_stream_t st;
    size_t events;
    size_t left; /* bytes never consumed, the ones after a bare error included */
} outcome_t;

/*
 * The shell's loop for a Gemini stream: in[0..len) arrives in two reads cut
 * at `cut`; before each SSE scan the unconsumed bytes are checked for a bare
 * error, which ends the stream.
 */
static void
run_stream(const char *in, size_t len, size_t cut, outcome_t *o)
{
    static char scratch[4096];
    memset(o, 0, sizeof *o);
    sl_stream_init(&o->st, sl_dialect_def(SL_DIALECT_GEMINI)->stream);
    sl_sse_scanner_t s;
    sl_sse_init(&s, SL_SSE_MAX_EVENT_DEFAULT, scratch, sizeof scratch);
    char *buf = malloc(len + 1);
    size_t have = 0, from = 0;
    size_t parts[2] = {cut, len};
    bool over = false;
    for (size_t p = 0; p < 2 && !over; p++) {
        memcpy(buf + have, in + from, parts[p] - from);
        have += parts[p] - from;
        from = parts[p];
        for (;;) {
            sl_stream_verdict_t v;
            size_t taken = 0;
            sl_gemini_bare_t b = sl_gemini_bare_error(buf, have, &taken, &v);
            if (b == SL_GEMINI_BARE_MORE)
                break;
            if (b == SL_GEMINI_BARE_ERROR) {
                cr_assert(taken > 0 && taken <= have);
                o->kinds[o->events++] = 'B';
                o->last_error = v;
                memmove(buf, buf + taken, have - taken);
                have -= taken;
                over = true;
                break;
            }
            sl_sse_event_t ev;
            sl_sse_status_t r = sl_sse_next(&s, buf, have, &ev);
            if (r != SL_SSE_EVENT) {
                cr_assert_eq(r, SL_SSE_MORE);
                break;
            }
            sl_stream_feed(&o->st, &ev, &v);
            cr_assert_lt(o->events, MAX_EVENTS);
            o->kinds[o->events++] = letter(v.kind);
            if (v.kind == SL_STREAM_ERROR)
                o->last_error = v;
            memmove(buf, buf + ev.len, have - ev.len);
            have -= ev.len;
        }
    }
    o->left = have + (len - from);
    free(buf);
}

#define HELLO_CHUNK                                                                                          \
    "data: "                                                                                                 \
    "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hello\"}]},\"index\":0}],"     \
    "\"usageMetadata\":{\"promptTokenCount\":12,\"candidatesTokenCount\":1,\"totalTokenCount\":13}}\n\n"
#define USAGE_CHUNK "data: {\"usageMetadata\":{\"promptTokenCount\":12,\"totalTokenCount\":12}}\n\n"
/* As Google's front ends print errors: pretty, bare, no blank line after it. */
#define BARE_429                                                                                             \
    "{\n  \"error\": {\n    \"code\": 429,\n    \"message\": \"You exceeded your current quota. Please "     \
    "retry in "                                                                                              \
    "33.1s.\",\n    \"status\": \"RESOURCE_EXHAUSTED\",\n    \"details\": [\n      {\n        \"@type\": "   \
    "\"type.googleapis.com/google.rpc.RetryInfo\",\n        \"retryDelay\": \"33s\"\n      }\n    ]\n  "     \
    "}\n}\n"

typedef struct {
    const char *name; /* a fixture file, or NULL for text */
    const char *text;
    const char *kinds; /* I ignore, O opening, C content, X error, B bare error */
    const char *code;
    int status;
    const char *message;
    sl_usage_t usage;
    bool complete;
    sl_stream_phase_t phase;
    size_t left;
    const char *finish_reason; /* NULL: none */
} stream_case_t;

static const stream_case_t streams[] = {
    {.name = "gemini-ok.sse",
     .kinds = "CCCCC",
     .code = "",
     .usage = {10, 5, 0, 0},
     .complete = true,
     .phase = SL_STREAM_FLOWING,
     .finish_reason = "STOP"},
    {.name = "gemini-unavailable.sse",
     .kinds = "X",
     .code = "UNAVAILABLE",
     .status = 503,
     .message = "The model is overloaded. Please try again later.",
     .phase = SL_STREAM_HELD},
    {.text = HELLO_CHUNK BARE_429,
     .kinds = "CB",
     .code = "RESOURCE_EXHAUSTED",
     .status = 429,
     .message = "You exceeded your current quota. Please retry in 33.1s.",
     .usage = {12, 1, 0, 0},
     .phase = SL_STREAM_FLOWING,
     .left = 1},
    {.text = USAGE_CHUNK "\n\n" BARE_429,
     .kinds = "OB",
     .code = "RESOURCE_EXHAUSTED",
     .status = 429,
     .message = "You exceeded your current quota. Please retry in 33.1s.",
     .usage = {12, 0, 0, 0},
     .phase = SL_STREAM_HELD,
     .left = 1},
    {.text = USAGE_CHUNK "{\"error\":{\"code\":500,\"message\":\"Internal error encountered.\",\"status\":"
                         "\"INTERNAL\"}}",
     .kinds = "OB",
     .code = "INTERNAL",
     .status = 500,
     .message = "Internal error encountered.",
     .usage = {12, 0, 0, 0},
     .phase = SL_STREAM_HELD},
    {.text = USAGE_CHUNK ": keep-alive\n\n" USAGE_CHUNK,
     .kinds = "OIO",
     .code = "",
     .usage = {12, 0, 0, 0},
     .phase = SL_STREAM_HELD},
};
#define NSTREAMS (sizeof streams / sizeof streams[0])

static char *
case_text(const stream_case_t *c, size_t *len)
{
    if (c->name != NULL)
        return fixture_read(c->name, len);
    *len = strlen(c->text);
    char *t = malloc(*len + 1);
    memcpy(t, c->text, *len + 1);
    return t;
}

static void
assert_usage(const sl_usage_t *got, const sl_usage_t *want, const char *what)
{
    cr_assert_eq(got->input, want->input, "%s: input %ld", what, (long)got->input);
    cr_assert_eq(got->output, want->output, "%s: output %ld", what, (long)got->output);
    cr_assert_eq(got->cache_read, want->cache_read, "%s: cache_read %ld", what, (long)got->cache_read);
    cr_assert_eq(got->cache_write, want->cache_write, "%s: cache_write %ld", what, (long)got->cache_write);
}

static void
assert_case(size_t i, const outcome_t *o, size_t cut)
{
    const stream_case_t *c = &streams[i];
    cr_assert_str_eq(o->kinds, c->kinds, "stream %zu cut %zu", i, cut);
    cr_assert_str_eq(o->last_error.code, c->code, "stream %zu cut %zu", i, cut);
    cr_assert_eq(o->last_error.status, c->status, "stream %zu cut %zu", i, cut);
    cr_assert_str_eq(o->last_error.message, c->message ? c->message : "", "stream %zu cut %zu", i, cut);
    assert_usage(&o->st.usage, &c->usage, c->name ? c->name : "text");
    cr_assert_eq(sl_stream_complete(&o->st), c->complete, "stream %zu cut %zu", i, cut);
    cr_assert_eq(o->st.phase, c->phase, "stream %zu cut %zu", i, cut);
    cr_assert_eq(o->left, c->left, "stream %zu cut %zu: %zu bytes left", i, cut, o->left);
    cr_assert_str_eq(o->st.finish_reason, c->finish_reason ? c->finish_reason : "", "stream %zu cut %zu", i,
                     cut);
}

Test(gemini_streams, each_event_is_classified_as_formats_md_says)
{
    for (size_t i = 0; i < NSTREAMS; i++) {
        size_t len;
        char *text = case_text(&streams[i], &len);
        outcome_t o;
        run_stream(text, len, len, &o);
        assert_case(i, &o, len);
        free(text);
    }
}

Test(gemini_streams, a_split_at_any_byte_classifies_the_same)
{
    outcome_t *o = malloc(sizeof *o);
    for (size_t i = 0; i < NSTREAMS; i++) {
        size_t len;
        char *text = case_text(&streams[i], &len);
        for (size_t cut = 0; cut <= len; cut++) {
            run_stream(text, len, cut, o);
            assert_case(i, o, cut);
        }
        free(text);
    }
    free(o);
}

/* The flowing phase skips the parts: it must agree on everything that still matters after content. */
Test(gemini_streams, the_flowing_phase_agrees_on_errors_completeness_and_usage)
{
    for (size_t i = 0; i < NSTREAMS; i++) {
        size_t len;
        char *text = case_text(&streams[i], &len);
        sl_sse_scanner_t s;
        sl_sse_init(&s, SL_SSE_MAX_EVENT_DEFAULT, NULL, 0);
        sl_sse_event_t ev;
        for (size_t off = 0; sl_sse_next(&s, text + off, len - off, &ev) == SL_SSE_EVENT; off += ev.len) {
            if (ev.comment_only)
                continue;
            sl_stream_verdict_t held, flowing;
            sl_usage_t u_held = {0}, u_flowing = {0};
            sl__stream_gemini.classify(SL_STREAM_HELD, &ev, &held, &u_held);
            sl__stream_gemini.classify(SL_STREAM_FLOWING, &ev, &flowing, &u_flowing);
            if (held.kind == SL_STREAM_OPENING)
                cr_assert_eq(flowing.kind, SL_STREAM_CONTENT, "stream %zu at %zu", i, off);
            else
                cr_assert_eq(flowing.kind, held.kind, "stream %zu at %zu", i, off);
            cr_assert_eq(flowing.finished, held.finished, "stream %zu at %zu", i, off);
            cr_assert_str_eq(flowing.code, held.code);
            cr_assert_str_eq(flowing.message, held.message);
            cr_assert_eq(flowing.status, held.status);
            assert_usage(&u_flowing, &u_held, "flowing vs held");
        }
        free(text);
    }
}

/* ---- rule tables ---- */

typedef struct {
    const char *rule;
    sl_stream_phase_t phase;
    const char *sse; /* one whole event */
    sl_stream_kind_t kind;
    bool finished;
    const char *code;
    int status;
    const char *message;
} row_t;

#define ROW(rule_, phase_, sse_, kind_, ...)                                                                 \
    {                                                                                                        \
        .rule = rule_, .phase = phase_, .sse = sse_, .kind = kind_, __VA_ARGS__                              \
    }
#define H            SL_STREAM_HELD
#define F            SL_STREAM_FLOWING
#define CAND(body)   "data: {\"candidates\":[" body "]}\n\n"
#define PARTS(parts) CAND("{\"content\":{\"role\":\"model\",\"parts\":" parts "},\"index\":0}")

static const row_t rows[] = {
    ROW("a text part is content", H, PARTS("[{\"text\":\"Hi\"}]"), SL_STREAM_CONTENT),
    ROW("a thought part is content", H, PARTS("[{\"text\":\"Let me think\",\"thought\":true}]"),
        SL_STREAM_CONTENT),
    ROW("a function call is content", H,
        PARTS("[{\"functionCall\":{\"name\":\"get_weather\",\"args\":{\"city\":\"Oslo\"}}}]"),
        SL_STREAM_CONTENT),
    ROW("inline data is content", H,
        PARTS("[{\"inlineData\":{\"mimeType\":\"image/png\",\"data\":\"iVBO\"}}]"), SL_STREAM_CONTENT),
    ROW("a signature beside empty text is content", H,
        PARTS("[{\"text\":\"\",\"thoughtSignature\":\"c2ln\"}]"), SL_STREAM_CONTENT),
    ROW("any candidate's part counts", H,
        CAND("{\"content\":{\"parts\":[]},\"index\":0},{\"content\":{\"parts\":[{\"text\":\"b\"}]},\"index\":"
             "1}"),
        SL_STREAM_CONTENT),
    ROW("a usage-only chunk is opening", H,
        "data: "
        "{\"usageMetadata\":{\"promptTokenCount\":8,\"totalTokenCount\":8},\"modelVersion\":\"gemini-2.5-"
        "flash\",\"responseId\":\"abc\"}\n\n",
        SL_STREAM_OPENING),
    ROW("empty candidates are opening", H, "data: {\"candidates\":[],\"usageMetadata\":{}}\n\n",
        SL_STREAM_OPENING),
    ROW("a candidate without content is opening", H, CAND("{\"index\":0,\"safetyRatings\":[]}"),
        SL_STREAM_OPENING),
    ROW("empty parts are opening", H, PARTS("[]"), SL_STREAM_OPENING),
    ROW("an empty text part is opening", H, PARTS("[{\"text\":\"\"}]"), SL_STREAM_OPENING),
    ROW("an empty part object is opening", H, PARTS("[{ }]"), SL_STREAM_OPENING),
    ROW("content without parts is opening", H, CAND("{\"content\":{\"role\":\"model\"}}"), SL_STREAM_OPENING),
    ROW("candidates null is opening", H, "data: {\"candidates\":null}\n\n", SL_STREAM_OPENING),
    ROW("promptFeedback without a blockReason is opening", H,
        "data: {\"promptFeedback\":{\"safetyRatings\":[]}}\n\n", SL_STREAM_OPENING),
    ROW("an empty object is opening", H, "data: {}\n\n", SL_STREAM_OPENING),
    ROW("error null is not an error", H, "data: {\"error\":null,\"usageMetadata\":{}}\n\n",
        SL_STREAM_OPENING),
    ROW("an unknown top-level member is content", H, "data: {\"usageMetadata\":{},\"somethingNew\":{}}\n\n",
        SL_STREAM_CONTENT),
    ROW("an unknown member that is null is not", H, "data: {\"somethingNew\":null}\n\n", SL_STREAM_OPENING),
    ROW("a finishReason finishes and is content", H, CAND("{\"finishReason\":\"STOP\",\"index\":0}"),
        SL_STREAM_CONTENT, .finished = true),
    ROW("a SAFETY stop without parts is a whole answer", H,
        CAND("{\"finishReason\":\"SAFETY\",\"safetyRatings\":[{\"category\":\"HARM_CATEGORY_HARASSMENT\","
             "\"probability\":\"HIGH\"}]}"),
        SL_STREAM_CONTENT, .finished = true),
    ROW("finishReason null does not finish", H, CAND("{\"finishReason\":null}"), SL_STREAM_OPENING),
    ROW("a later candidate can finish", H,
        CAND("{\"index\":0},{\"index\":1,\"finishReason\":\"MAX_TOKENS\"}"), SL_STREAM_CONTENT,
        .finished = true),
    ROW("a blocked prompt is a whole answer", H,
        "data: "
        "{\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":4}}\n\n",
        SL_STREAM_CONTENT, .finished = true),
    ROW("finishReason words inside text are text", H,
        PARTS("[{\"text\":\"\\\"finishReason\\\":\\\"STOP\\\", \\\"error\\\":{}\"}]"), SL_STREAM_CONTENT),
    ROW("finishReason inside function args is not the candidate's", H,
        PARTS("[{\"functionCall\":{\"name\":\"f\",\"args\":{\"finishReason\":\"STOP\"}}}]"),
        SL_STREAM_CONTENT),
    ROW("an error nested in a part is not the chunk's", H,
        PARTS("[{\"functionResponse\":{\"name\":\"f\",\"response\":{\"error\":{\"code\":503}}}}]"),
        SL_STREAM_CONTENT),
    ROW("the UNAVAILABLE error", H,
        "data: {\"error\":{\"code\":503,\"message\":\"The model is "
        "overloaded.\",\"status\":\"UNAVAILABLE\"}}\n\n",
        SL_STREAM_ERROR, .code = "UNAVAILABLE", .status = 503, .message = "The model is overloaded."),
    ROW("RESOURCE_EXHAUSTED with details", H,
        "data: "
        "{\"error\":{\"code\":429,\"message\":\"Quota\",\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{"
        "\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"33s\"}]}}\n\n",
        SL_STREAM_ERROR, .code = "RESOURCE_EXHAUSTED", .status = 429, .message = "Quota"),
    ROW("an error without a status string", H, "data: {\"error\":{\"code\":500,\"message\":\"m\"}}\n\n",
        SL_STREAM_ERROR, .status = 500, .message = "m"),
    ROW("a code outside 400-599 is no status", H,
        "data: {\"error\":{\"code\":14,\"status\":\"UNAVAILABLE\"}}\n\n", SL_STREAM_ERROR,
        .code = "UNAVAILABLE"),
    ROW("a bare string error", H, "data: {\"error\":\"boom\"}\n\n", SL_STREAM_ERROR, .message = "boom"),
    ROW("an error beside candidates wins", H,
        "data: "
        "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]}}],\"error\":{\"status\":\"INTERNAL\"}}"
        "\n\n",
        SL_STREAM_ERROR, .code = "INTERNAL"),
    ROW("an error that is not JSON inside is still an error", H, "data: {\"error\":{\"code\":5,}}\n\n",
        SL_STREAM_ERROR),
    ROW("not JSON is content", H, "data: hello\n\n", SL_STREAM_CONTENT),
    ROW("JSON that is not an object is content", H, "data: [1,2]\n\n", SL_STREAM_CONTENT),
    ROW("an empty data line is content", H, "data:\n\n", SL_STREAM_CONTENT),
    ROW("a chunk cut short is content", H, "data: {\"usageMetadata\":{\"promptTokenCount\":1}\n\n",
        SL_STREAM_CONTENT),
    ROW("a chunk cut short does not finish", H, "data: {\"candidates\":[{\"finishReason\":\"STOP\"}]\n\n",
        SL_STREAM_CONTENT),
    ROW("a trailing comma is content", H, "data: {\"usageMetadata\":{},}\n\n", SL_STREAM_CONTENT),
    ROW("a comment is ignored", H, ": keep-alive\n\n", SL_STREAM_IGNORE),
    ROW("a named event without data is ignored", H, "event: ping\n\n", SL_STREAM_IGNORE),
    ROW("CRLF framing and spaces", H,
        "data: { \"candidates\" : [ { \"content\" : { \"parts\" : [ { \"text\" : \"x\" } ] } } ] }\r\n\r\n",
        SL_STREAM_CONTENT),
    ROW("data split over lines", H,
        "data: {\"candidates\":[{\"content\":\ndata: {\"parts\":[{\"text\":\"x\"}]}}]}\n\n",
        SL_STREAM_CONTENT),

    ROW("flowing: a usage-only chunk is not told apart", F, USAGE_CHUNK, SL_STREAM_CONTENT),
    ROW("flowing: a text chunk", F, PARTS("[{\"text\":\"x\"}]"), SL_STREAM_CONTENT),
    ROW("flowing: finishReason finishes", F, CAND("{\"content\":{\"parts\":[]},\"finishReason\":\"STOP\"}"),
        SL_STREAM_CONTENT, .finished = true),
    ROW("flowing: finishReason in text does not", F, PARTS("[{\"text\":\"{\\\"finishReason\\\":1}\"}]"),
        SL_STREAM_CONTENT),
    ROW("flowing: the error", F, "data: {\"error\" : {\"code\" : 503, \"status\" : \"UNAVAILABLE\"}}\n\n",
        SL_STREAM_ERROR, .code = "UNAVAILABLE", .status = 503),
    ROW("flowing: error null", F, "data: {\"error\":null}\n\n", SL_STREAM_CONTENT),
    ROW("flowing: a comment", F, ":\n\n", SL_STREAM_IGNORE),
};

static sl_stream_verdict_t
classify_one(sl_stream_phase_t phase, const char *sse, sl_usage_t *usage, sl_stream_t *st)
{
    static char scratch[1024];
    sl_sse_scanner_t s;
    sl_sse_init(&s, 65536, scratch, sizeof scratch);
    sl_sse_event_t ev;
    cr_assert_eq(sl_sse_next(&s, sse, strlen(sse), &ev), SL_SSE_EVENT, "%s", sse);
    sl_stream_init(st, sl_dialect_def(SL_DIALECT_GEMINI)->stream);
    st->phase = phase;
    st->usage = *usage;
    sl_stream_verdict_t v;
    memset(&v, 0x5A, sizeof v); /* every field must be set */
    sl_stream_feed(st, &ev, &v);
    *usage = st->usage;
    return v;
}

Test(gemini_rules, each_chunk_is_opening_content_or_error_as_formats_md_says)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        sl_usage_t usage = {0};
        sl_stream_t st;
        sl_stream_verdict_t v = classify_one(rows[i].phase, rows[i].sse, &usage, &st);
        cr_assert_eq(v.kind, rows[i].kind, "%s: kind %c", rows[i].rule, letter(v.kind));
        cr_assert_eq(v.finished, rows[i].finished, "%s: finished", rows[i].rule);
        cr_assert_str_eq(v.code, rows[i].code ? rows[i].code : "", "%s", rows[i].rule);
        cr_assert_eq(v.status, rows[i].status, "%s: status %d", rows[i].rule, v.status);
        cr_assert_str_eq(v.message, rows[i].message ? rows[i].message : "", "%s", rows[i].rule);
        cr_assert_eq(st.finished, v.finished, "%s", rows[i].rule);
    }
}

/* ---- usage ---- */

Test(gemini_usage, prompt_includes_the_cached_part_which_is_taken_out)
{
    sl_usage_t u = {.cache_write = 9};
    sl_stream_t st;
    classify_one(H,
                 "data: {\"usageMetadata\":{\"promptTokenCount\":100,\"cachedContentTokenCount\":40,"
                 "\"candidatesTokenCount\":7,\"totalTokenCount\":107,\"promptTokensDetails\":[{\"modality\":"
                 "\"TEXT\",\"tokenCount\":100}]}}\n\n",
                 &u, &st);
    assert_usage(&u, &(sl_usage_t){60, 7, 40, 9}, "cached taken out; cache_write untouched");
}

Test(gemini_usage, thoughts_count_as_output_and_tool_use_prompts_as_input)
{
    sl_usage_t u = {0};
    sl_stream_t st;
    classify_one(
        F,
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]},\"finishReason\":\"STOP\"}],"
        "\"usageMetadata\":{\"promptTokenCount\":10,\"toolUsePromptTokenCount\":5,"
        "\"candidatesTokenCount\":3,\"thoughtsTokenCount\":20,\"totalTokenCount\":38}}\n\n",
        &u, &st);
    assert_usage(&u, &(sl_usage_t){15, 23, 0, 0}, "the four add up to totalTokenCount");
}

Test(gemini_usage, running_totals_replace_the_ones_before)
{
    sl_usage_t u = {0};
    sl_stream_t st;
    classify_one(H, USAGE_CHUNK, &u, &st);
    assert_usage(&u, &(sl_usage_t){12, 0, 0, 0}, "prompt only: output not reported yet");
    classify_one(F, HELLO_CHUNK, &u, &st);
    assert_usage(&u, &(sl_usage_t){12, 1, 0, 0}, "first output");
    classify_one(
        F,
        "data: {\"candidates\":[],\"usageMetadata\":{\"promptTokenCount\":12,\"candidatesTokenCount\":"
        "9}}\n\n",
        &u, &st);
    assert_usage(&u, &(sl_usage_t){12, 9, 0, 0}, "replaced, not added");
}

Test(gemini_usage, garbage_counts_and_chunks_without_usage_leave_it_alone)
{
    static const char *chunks[] = {
        PARTS("[{\"text\":\"x\"}]"),
        "data: {\"usageMetadata\":null}\n\n",
        "data: {\"usageMetadata\":{\"promptTokenCount\":-3,\"candidatesTokenCount\":\"7\"}}\n\n",
        "data: {\"usageMetadata\":{\"promptTokenCount\":1.5,\"candidatesTokenCount\":1e3}}\n\n",
        "data: {\"usageMetadata\":{\"promptTokenCount\":99999999999999999999999}}\n\n",
        "data: {\"usageMetadata\":{\"totalTokenCount\":50}}\n\n",
        "data: {\"error\":{\"code\":503},\"usageMetadata\":{\"promptTokenCount\":1}}\n\n",
        "data: {\"usageMetadata\":{\"promptTokenCount\":1}\n\n",
    };
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        for (int phase = H; phase <= F; phase++) {
            sl_usage_t u = {1, 2, 3, 4};
            sl_stream_t st;
            classify_one((sl_stream_phase_t)phase, chunks[i], &u, &st);
            assert_usage(&u, &(sl_usage_t){1, 2, 3, 4}, chunks[i]);
        }
    }
}

Test(gemini_usage, cached_beyond_the_prompt_is_clamped)
{
    sl_usage_t u = {0};
    sl_stream_t st;
    classify_one(H, "data: {\"usageMetadata\":{\"promptTokenCount\":3,\"cachedContentTokenCount\":9}}\n\n",
                 &u, &st);
    assert_usage(&u, &(sl_usage_t){0, 0, 3, 0}, "clamped");
}

/* ---- completeness ---- */

static outcome_t *
run_text(const char *text)
{
    static outcome_t o;
    run_stream(text, strlen(text), strlen(text), &o);
    return &o;
}

Test(gemini_complete, a_stream_is_whole_once_a_candidate_has_a_finish_reason)
{
    outcome_t *o =
        run_text(HELLO_CHUNK CAND("{\"content\":{\"parts\":[{\"text\":\"!\"}]},\"finishReason\":\"STOP\"}"));
    cr_assert_str_eq(o->kinds, "CC");
    cr_assert(sl_stream_complete(&o->st));
    o = run_text(HELLO_CHUNK HELLO_CHUNK);
    cr_assert_not(sl_stream_complete(&o->st), "content without a finishReason was cut short");
    o = run_text(HELLO_CHUNK "data: {\"candidates\":[{\"content\":{\"parts\":[]},\"finishReason\":\"ST");
    cr_assert_not(sl_stream_complete(&o->st), "an event cut before its blank line never counts");
}

Test(gemini_complete, usage_after_the_finish_keeps_it_whole)
{
    outcome_t *o =
        run_text(CAND("{\"content\":{\"parts\":[{\"text\":\"a\"}]},\"finishReason\":\"STOP\"}") USAGE_CHUNK);
    cr_assert_str_eq(o->kinds, "CC");
    cr_assert(sl_stream_complete(&o->st));
}

Test(gemini_complete, usage_only_chunks_then_the_end_is_a_stream_that_ended_early)
{
    outcome_t *o = run_text(USAGE_CHUNK USAGE_CHUNK);
    cr_assert_str_eq(o->kinds, "OO");
    cr_assert_not(sl_stream_complete(&o->st));
    cr_assert_eq(o->st.phase, SL_STREAM_HELD, "nothing to release: retry");
}

Test(gemini_complete, a_blocked_prompt_is_whole_and_released)
{
    outcome_t *o = run_text("data: {\"promptFeedback\":{\"blockReason\":\"PROHIBITED_CONTENT\"}}\n\n");
    cr_assert(sl_stream_complete(&o->st));
    cr_assert_eq(o->st.phase, SL_STREAM_FLOWING);
}

Test(gemini_complete, an_error_never_completes)
{
    outcome_t *o = run_text(HELLO_CHUNK "data: {\"error\":{\"code\":500,\"status\":\"INTERNAL\"}}\n\n");
    cr_assert_str_eq(o->kinds, "CX");
    cr_assert_not(sl_stream_complete(&o->st));
}

/* ---- the bare JSON error ---- */

typedef struct {
    const char *rule;
    const char *bytes;
    sl_gemini_bare_t want;
    size_t taken; /* for errors; ALL: the whole of bytes */
    const char *code;
    int status;
} bare_row_t;

#define ALL    ((size_t)-1)
#define OBJ503 "{\"error\":{\"code\":503,\"message\":\"m\",\"status\":\"UNAVAILABLE\"}}"

static const bare_row_t bare_rows[] = {
    {"a bare error object", OBJ503, SL_GEMINI_BARE_ERROR, ALL, "UNAVAILABLE", 503},
    {"the line break after it is not taken", OBJ503 "\n", SL_GEMINI_BARE_ERROR, sizeof OBJ503 - 1,
     "UNAVAILABLE", 503},
    {"blank lines before it are taken", "\r\n\n" OBJ503 "\n\n", SL_GEMINI_BARE_ERROR, sizeof OBJ503 + 2,
     "UNAVAILABLE", 503},
    {"bytes after it are not taken", OBJ503 "data: {}\n\n", SL_GEMINI_BARE_ERROR, sizeof OBJ503 - 1,
     "UNAVAILABLE", 503},
    {"pretty-printed", BARE_429, SL_GEMINI_BARE_ERROR, sizeof BARE_429 - 2, "RESOURCE_EXHAUSTED", 429},
    {"a brace inside a string does not close it", "{\"error\":{\"message\":\"}{\\\"}\",\"code\":500}}",
     SL_GEMINI_BARE_ERROR, ALL, "", 500},
    {"a bare string error", "{\"error\":\"boom\"}", SL_GEMINI_BARE_ERROR, ALL, "", 0},
    {"an open object waits", "{\"error\":{\"code\":503,", SL_GEMINI_BARE_MORE, 0, NULL, 0},
    {"an open string waits", "{\"error\":{\"message\":\"a}", SL_GEMINI_BARE_MORE, 0, NULL, 0},
    {"an escape at the end waits", "{\"error\":{\"message\":\"a\\", SL_GEMINI_BARE_MORE, 0, NULL, 0},
    {"a lone brace waits", "\n{", SL_GEMINI_BARE_MORE, 0, NULL, 0},
    {"an SSE event is not bare", "data: " OBJ503 "\n\n", SL_GEMINI_BARE_NONE, 0, NULL, 0},
    {"a comment is not bare", ": {\"error\":1}\n\n", SL_GEMINI_BARE_NONE, 0, NULL, 0},
    {"nothing is not bare", "", SL_GEMINI_BARE_NONE, 0, NULL, 0},
    {"only blank lines are not bare yet", "\n\r\n", SL_GEMINI_BARE_NONE, 0, NULL, 0},
    {"error null is not an error", "{\"error\":null}", SL_GEMINI_BARE_NONE, 0, NULL, 0},
    {"a bare chunk is not an error", "{\"candidates\":[],\"usageMetadata\":{}}", SL_GEMINI_BARE_NONE, 0, NULL,
     0},
    {"a nested error is not the object's", "{\"candidates\":[{\"error\":{\"code\":503}}]}",
     SL_GEMINI_BARE_NONE, 0, NULL, 0},
    {"an array is not an object", "[{\"error\":{\"code\":503}}]", SL_GEMINI_BARE_NONE, 0, NULL, 0},
};

Test(gemini_bare, a_bare_error_object_is_found_at_the_start_of_the_unconsumed_bytes)
{
    for (size_t i = 0; i < sizeof bare_rows / sizeof bare_rows[0]; i++) {
        const bare_row_t *r = &bare_rows[i];
        sl_stream_verdict_t v;
        memset(&v, 0x5A, sizeof v);
        sl_stream_verdict_t untouched = v;
        size_t taken = 12345;
        sl_gemini_bare_t got = sl_gemini_bare_error(r->bytes, strlen(r->bytes), &taken, &v);
        cr_assert_eq(got, r->want, "%s: %d", r->rule, got);
        if (got != SL_GEMINI_BARE_ERROR) {
            cr_assert_eq(taken, 12345, "%s: taken untouched", r->rule);
            cr_assert_eq(memcmp(&v, &untouched, sizeof v), 0, "%s: verdict untouched", r->rule);
            continue;
        }
        cr_assert_eq(taken, r->taken == ALL ? strlen(r->bytes) : r->taken, "%s: taken %zu", r->rule, taken);
        cr_assert_eq(r->bytes[taken - 1], '}', "%s", r->rule);
        cr_assert_eq(v.kind, SL_STREAM_ERROR, "%s", r->rule);
        cr_assert_not(v.finished, "%s", r->rule);
        cr_assert_str_eq(v.code, r->code, "%s", r->rule);
        cr_assert_eq(v.status, r->status, "%s", r->rule);
    }
}

Test(gemini_bare, an_object_still_open_at_the_cap_is_left_to_the_sse_scanner)
{
    size_t n = SL_GEMINI_BARE_MAX + 10;
    char *big = malloc(n);
    memset(big, ' ', n);
    memcpy(big, "{\"error\":{\"message\":\"", 21);
    memset(big + 21, 'a', n - 21);
    sl_stream_verdict_t v;
    size_t taken = 0;
    cr_assert_eq(sl_gemini_bare_error(big, SL_GEMINI_BARE_MAX - 1, &taken, &v), SL_GEMINI_BARE_MORE);
    cr_assert_eq(sl_gemini_bare_error(big, SL_GEMINI_BARE_MAX, &taken, &v), SL_GEMINI_BARE_NONE);
    cr_assert_eq(sl_gemini_bare_error(big, n, &taken, &v), SL_GEMINI_BARE_NONE);
    free(big);
}

/* The hint is read from the error's own bytes (the event data, or the bare object as taken). */
Test(gemini_bare, the_retry_delay_in_details_is_the_hint)
{
    sl_stream_verdict_t v;
    size_t taken = 0;
    cr_assert_eq(sl_gemini_bare_error(BARE_429, strlen(BARE_429), &taken, &v), SL_GEMINI_BARE_ERROR);
    cr_assert_eq(sl_hint_from_body(BARE_429, taken), 33000);
}

/* ---- what the verdicts mean to the classifier (formats.md, Gemini) ---- */

typedef struct {
    const char *rule;
    const char *data; /* an in-stream error chunk's data */
    sl_failure_class_t cls;
} class_row_t;

static const class_row_t class_rows[] = {
    {"UNAVAILABLE is temporary", "{\"error\":{\"code\":503,\"status\":\"UNAVAILABLE\"}}",
     SL_FAILURE_TEMPORARY},
    {"INTERNAL is temporary", "{\"error\":{\"code\":500,\"status\":\"INTERNAL\"}}", SL_FAILURE_TEMPORARY},
    {"a 5xx code is temporary", "{\"error\":{\"code\":504,\"message\":\"Deadline\"}}", SL_FAILURE_TEMPORARY},
    {"another 5xx code is temporary", "{\"error\":{\"code\":599}}", SL_FAILURE_TEMPORARY},
    {"501 is not", "{\"error\":{\"code\":501,\"status\":\"UNIMPLEMENTED\"}}", SL_FAILURE_OTHER},
    {"429 RESOURCE_EXHAUSTED is a rate limit",
     "{\"error\":{\"code\":429,\"status\":\"RESOURCE_EXHAUSTED\",\"message\":\"Resource has been "
     "exhausted\"}}",
     SL_FAILURE_RATE_LIMITED},
    {"INVALID_ARGUMENT in a stream fails over unretried",
     "{\"error\":{\"code\":400,\"status\":\"INVALID_ARGUMENT\"}}", SL_FAILURE_OTHER},
};

Test(gemini_class, in_stream_errors_land_in_the_classes_formats_md_names)
{
    for (size_t i = 0; i < sizeof class_rows / sizeof class_rows[0]; i++) {
        char sse[512];
        snprintf(sse, sizeof sse, "data: %s\n\n", class_rows[i].data);
        sl_usage_t u = {0};
        sl_stream_t st;
        sl_stream_verdict_t v = classify_one(H, sse, &u, &st);
        cr_assert_eq(v.kind, SL_STREAM_ERROR, "%s", class_rows[i].rule);
        sl_failure_t f = {.source = SL_FAILURE_STREAM_ERROR,
                          .dialect = SL_DIALECT_GEMINI,
                          .status = v.status,
                          .code = v.code,
                          .body = class_rows[i].data,
                          .body_len = strlen(class_rows[i].data)};
        cr_assert_eq(sl_classify_failure(&f), class_rows[i].cls, "%s: %s", class_rows[i].rule,
                     sl_failure_class_info(sl_classify_failure(&f))->name);
    }
}

/* ---- robustness: the walk never reads past the data and never trusts what it cannot frame ---- */

Test(gemini_walk, every_prefix_of_every_chunk_is_classified_without_reading_past_it)
{
    static const char *chunks[] = {
        "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"a\\\"b\\\\\"}]},"
        "\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":10,"
        "\"candidatesTokenCount\":5},\"modelVersion\":\"m\"}",
        "{\"error\":{\"code\":503,\"message\":\"m\",\"status\":\"UNAVAILABLE\"}}",
        BARE_429,
    };
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        size_t len = strlen(chunks[i]);
        for (size_t n = 0; n <= len; n++) {
            /* a copy of exactly n bytes, so ASan sees any read past them */
            char *data = malloc(n ? n : 1);
            memcpy(data, chunks[i], n);
            sl_sse_event_t ev = {.data = data, .data_len = n};
            for (int phase = H; phase <= F; phase++) {
                sl_stream_verdict_t v;
                sl_usage_t u = {0};
                sl__stream_gemini.classify((sl_stream_phase_t)phase, &ev, &v, &u);
                if (n < len && i == 0)
                    cr_assert_eq(v.kind, SL_STREAM_CONTENT, "a chunk cut at %zu is not understood", n);
            }
            /* the bare check waits for the object to close, then names what it is */
            size_t closes = (size_t)(strrchr(chunks[i], '}') - chunks[i]) + 1;
            sl_gemini_bare_t want = i == 0 ? SL_GEMINI_BARE_NONE : SL_GEMINI_BARE_ERROR;
            sl_stream_verdict_t v;
            size_t taken = 0;
            if (n > 0)
                cr_assert_eq(sl_gemini_bare_error(data, n, &taken, &v),
                             n < closes ? SL_GEMINI_BARE_MORE : want, "%zu at %zu", i, n);
            free(data);
        }
    }
}

Test(gemini_walk, random_bytes_never_crash)
{
    static const char alphabet[] = "{}[]\":,\\ \n0a-.nulltrue\"error\"\"candidates\"\"parts\"";
    unsigned seed = 12345;
    for (int round = 0; round < 20000; round++) {
        char data[64];
        size_t n = (size_t)(round % 64);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            data[i] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
        }
        char *copy = malloc(n ? n : 1);
        memcpy(copy, data, n);
        sl_sse_event_t ev = {.data = copy, .data_len = n};
        sl_stream_verdict_t v;
        sl_usage_t u = {0};
        sl__stream_gemini.classify(SL_STREAM_HELD, &ev, &v, &u);
        cr_assert(v.kind == SL_STREAM_OPENING || v.kind == SL_STREAM_CONTENT || v.kind == SL_STREAM_ERROR);
        size_t taken = 0;
        if (sl_gemini_bare_error(copy, n, &taken, &v) == SL_GEMINI_BARE_ERROR)
            cr_assert(taken <= n);
        free(copy);
    }
}

/* ---- the vtable ---- */

Test(gemini_vtable, gemini_has_an_sse_classifier)
{
    const sl_stream_class_vtable_t *vt = sl_dialect_def(SL_DIALECT_GEMINI)->stream;
    cr_assert_eq(vt, &sl__stream_gemini);
    cr_assert_eq(vt->dialect, SL_DIALECT_GEMINI);
    cr_assert_not_null(vt->classify);
}
