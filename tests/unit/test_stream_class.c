/*
 * Stream classification (formats.md, behaviour.md §4-§5): every fixture of the
 * Anthropic, Chat and Responses dialects event by event, whole and split at
 * every byte; the opening/content/error/end rules as tables; usage; and
 * completeness of a stream that ended.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dialect.h"
#include "core/stream_class.h"
#include "test_fixture.h"

#define MAX_EVENTS 64

static const sl_stream_class_vtable_t *
vt_of(sl_dialect_t d)
{
    const sl_stream_class_vtable_t *vt = sl_dialect_def(d)->stream;
    cr_assert_not_null(vt);
    return vt;
}

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
    char kinds[MAX_EVENTS + 1];
    sl_stream_verdict_t last_error;
    sl_stream_t st;
    size_t events;
} outcome_t;

/* Runs in[0..len) read in two parts (cut at `cut`) through the SSE scanner and sl_stream_feed. */
static void
run_stream(const sl_stream_class_vtable_t *vt, const char *in, size_t len, size_t cut, outcome_t *o)
{
    static char scratch[4096];
    memset(o, 0, sizeof *o);
    sl_stream_init(&o->st, vt);
    sl_sse_scanner_t s;
    sl_sse_init(&s, SL_SSE_MAX_EVENT_DEFAULT, scratch, sizeof scratch);
    char *buf = malloc(len + 1);
    size_t have = 0;
    size_t parts[2] = {cut, len};
    size_t from = 0;
    for (size_t p = 0; p < 2; p++) {
        memcpy(buf + have, in + from, parts[p] - from);
        have += parts[p] - from;
        from = parts[p];
        sl_sse_event_t ev;
        sl_sse_status_t r;
        while ((r = sl_sse_next(&s, buf, have, &ev)) == SL_SSE_EVENT) {
            sl_stream_verdict_t v;
            sl_stream_feed(&o->st, &ev, &v);
            cr_assert_lt(o->events, MAX_EVENTS);
            o->kinds[o->events++] = letter(v.kind);
            if (v.kind == SL_STREAM_ERROR)
                o->last_error = v;
            memmove(buf, buf + ev.len, have - ev.len);
            have -= ev.len;
        }
        cr_assert_eq(r, SL_SSE_MORE);
    }
    free(buf);
}

static const struct {
    const char *file;
    sl_dialect_t dialect;
    const char *kinds; /* I ignore, O opening, C content, X error, E end */
    const char *code;  /* of the error, "" when none */
    const char *message;
    sl_usage_t usage;
    bool complete;
    sl_stream_phase_t phase;   /* at the end: still held = nothing was released */
    const char *finish_reason; /* the stream's, "" for none */
} fixtures[] = {
    {"anthropic-ok.sse",
     SL_DIALECT_ANTHROPIC,
     "OOCCCCCCCCE",
     "",
     "",
     {10, 5, 0, 0},
     true,
     SL_STREAM_FLOWING,
     "end_turn"},
    {"anthropic-overloaded-before-content.sse",
     SL_DIALECT_ANTHROPIC,
     "OOX",
     "overloaded_error",
     "Overloaded",
     {10, 1, 0, 0},
     false,
     SL_STREAM_HELD,
     ""},
    {"anthropic-error-after-content.sse",
     SL_DIALECT_ANTHROPIC,
     "OOCCCX",
     "overloaded_error",
     "Overloaded",
     {10, 1, 0, 0},
     false,
     SL_STREAM_FLOWING,
     ""},
    {"anthropic-opening-only.sse",
     SL_DIALECT_ANTHROPIC,
     "OO",
     "",
     "",
     {10, 1, 0, 0},
     false,
     SL_STREAM_HELD,
     ""},
    {"chat-ok.sse",
     SL_DIALECT_OPENAI_CHAT,
     "OCCCCCCCE",
     "",
     "",
     {10, 5, 0, 0},
     true,
     SL_STREAM_FLOWING,
     "stop"},
    {"chat-server-error-before-content.sse",
     SL_DIALECT_OPENAI_CHAT,
     "OX",
     "server_error",
     "The server had an error while processing your request.",
     {0, 0, 0, 0},
     false,
     SL_STREAM_HELD,
     ""},
    {"responses-ok.sse",
     SL_DIALECT_OPENAI_RESPONSES,
     "OOCCCCCCCCCCE",
     "",
     "",
     {10, 5, 0, 0},
     true,
     SL_STREAM_FLOWING,
     "completed"},
    {"responses-failed-overloaded.sse",
     SL_DIALECT_OPENAI_RESPONSES,
     "OOX",
     "server_is_overloaded",
     "fake server_is_overloaded",
     {0, 0, 0, 0},
     false,
     SL_STREAM_HELD,
     ""},
    {"responses-error-event-slow-down.sse",
     SL_DIALECT_OPENAI_RESPONSES,
     "X",
     "slow_down",
     "fake slow_down",
     {0, 0, 0, 0},
     false,
     SL_STREAM_HELD,
     ""},
    {"responses-failed-invalid-encrypted-content.sse",
     SL_DIALECT_OPENAI_RESPONSES,
     "OOX",
     "invalid_encrypted_content",
     "fake invalid_encrypted_content",
     {0, 0, 0, 0},
     false,
     SL_STREAM_HELD,
     ""},
};
#define NFIXTURES (sizeof fixtures / sizeof fixtures[0])

static void
assert_usage(const sl_usage_t *got, const sl_usage_t *want, const char *what)
{
    cr_assert_eq(got->input, want->input, "%s: input %ld", what, (long)got->input);
    cr_assert_eq(got->output, want->output, "%s: output %ld", what, (long)got->output);
    cr_assert_eq(got->cache_read, want->cache_read, "%s: cache_read %ld", what, (long)got->cache_read);
    cr_assert_eq(got->cache_write, want->cache_write, "%s: cache_write %ld", what, (long)got->cache_write);
}

static void
assert_fixture(size_t f, const outcome_t *o, const char *what)
{
    cr_assert_str_eq(o->kinds, fixtures[f].kinds, "%s %s", fixtures[f].file, what);
    cr_assert_str_eq(o->last_error.code, fixtures[f].code, "%s %s", fixtures[f].file, what);
    cr_assert_str_eq(o->last_error.message, fixtures[f].message, "%s %s", fixtures[f].file, what);
    cr_assert_eq(o->last_error.status, 0, "%s: no fixture error names a status", fixtures[f].file);
    assert_usage(&o->st.usage, &fixtures[f].usage, fixtures[f].file);
    cr_assert_eq(sl_stream_complete(&o->st), fixtures[f].complete, "%s %s", fixtures[f].file, what);
    cr_assert_eq(o->st.phase, fixtures[f].phase, "%s %s", fixtures[f].file, what);
    cr_assert_str_eq(o->st.finish_reason, fixtures[f].finish_reason, "%s %s", fixtures[f].file, what);
}

Test(stream_fixtures, each_event_is_classified_as_formats_md_says)
{
    for (size_t f = 0; f < NFIXTURES; f++) {
        size_t len;
        char *text = fixture_read(fixtures[f].file, &len);
        outcome_t o;
        run_stream(vt_of(fixtures[f].dialect), text, len, len, &o);
        assert_fixture(f, &o, "whole");
        free(text);
    }
}

Test(stream_fixtures, a_split_at_any_byte_classifies_the_same)
{
    outcome_t *o = malloc(sizeof *o);
    for (size_t f = 0; f < NFIXTURES; f++) {
        size_t len;
        char *text = fixture_read(fixtures[f].file, &len);
        for (size_t cut = 0; cut <= len; cut++) {
            run_stream(vt_of(fixtures[f].dialect), text, len, cut, o);
            assert_fixture(f, o, "split");
        }
        free(text);
    }
    free(o);
}

/* The flowing phase decides by name or byte scan: it must agree with the full
 * classification on everything that still matters after content. */
Test(stream_fixtures, the_flowing_phase_agrees_on_errors_ends_and_usage)
{
    for (size_t f = 0; f < NFIXTURES; f++) {
        size_t len;
        char *text = fixture_read(fixtures[f].file, &len);
        const sl_stream_class_vtable_t *vt = vt_of(fixtures[f].dialect);
        sl_sse_scanner_t s;
        sl_sse_init(&s, SL_SSE_MAX_EVENT_DEFAULT, NULL, 0);
        sl_sse_event_t ev;
        for (size_t off = 0; sl_sse_next(&s, text + off, len - off, &ev) == SL_SSE_EVENT; off += ev.len) {
            sl_stream_verdict_t held, flowing;
            sl_usage_t u_held = {0}, u_flowing = {0};
            vt->classify(SL_STREAM_HELD, &ev, &held, &u_held);
            vt->classify(SL_STREAM_FLOWING, &ev, &flowing, &u_flowing);
            if (held.kind == SL_STREAM_OPENING)
                cr_assert(flowing.kind == SL_STREAM_OPENING || flowing.kind == SL_STREAM_CONTENT);
            else
                cr_assert_eq(flowing.kind, held.kind, "%s at %zu", fixtures[f].file, off);
            cr_assert_eq(flowing.finished, held.finished, "%s at %zu", fixtures[f].file, off);
            cr_assert_str_eq(flowing.code, held.code);
            cr_assert_str_eq(flowing.message, held.message);
            cr_assert_eq(flowing.status, held.status);
            assert_usage(&u_flowing, &u_held, fixtures[f].file);
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
} row_t;

static sl_stream_verdict_t
classify_one(sl_dialect_t d, sl_stream_phase_t phase, const char *sse, sl_usage_t *usage, sl_stream_t *st)
{
    static char scratch[1024];
    sl_sse_scanner_t s;
    sl_sse_init(&s, 65536, scratch, sizeof scratch);
    sl_sse_event_t ev;
    cr_assert_eq(sl_sse_next(&s, sse, strlen(sse), &ev), SL_SSE_EVENT, "%s", sse);
    sl_stream_init(st, vt_of(d));
    st->phase = phase;
    st->usage = *usage;
    sl_stream_verdict_t v;
    memset(&v, 0x5A, sizeof v); /* every field must be set */
    sl_stream_feed(st, &ev, &v);
    *usage = st->usage;
    return v;
}

static void
check_rows(sl_dialect_t d, const row_t *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sl_usage_t usage = {0};
        sl_stream_t st;
        sl_stream_verdict_t v = classify_one(d, rows[i].phase, rows[i].sse, &usage, &st);
        cr_assert_eq(v.kind, rows[i].kind, "%s: kind %c", rows[i].rule, letter(v.kind));
        cr_assert_eq(v.finished, rows[i].finished, "%s: finished", rows[i].rule);
        cr_assert_str_eq(v.code, rows[i].code ? rows[i].code : "", "%s", rows[i].rule);
        cr_assert_eq(v.status, rows[i].status, "%s: status %d", rows[i].rule, v.status);
        if (v.kind != SL_STREAM_ERROR)
            cr_assert_str_eq(v.message, "", "%s", rows[i].rule);
        cr_assert_eq(st.finished, v.finished, "%s", rows[i].rule);
    }
}

/* Rows name the kind and then only what differs from not finished, no code, no status. */
#define ROW(rule_, phase_, sse_, kind_, ...)                                                                 \
    {                                                                                                        \
        .rule = rule_, .phase = phase_, .sse = sse_, .kind = kind_, __VA_ARGS__                              \
    }

#define H SL_STREAM_HELD
#define F SL_STREAM_FLOWING

#define ROLE "\"role\":\"assistant\""
static const row_t chat_rows[] = {
    ROW("the role chunk with empty and null fields is opening", H,
        "data: {\"choices\":[{\"index\":0,\"delta\":{" ROLE ",\"content\":\"\",\"refusal\":null},"
        "\"logprobs\":null,\"finish_reason\":null}]}\n\n",
        SL_STREAM_OPENING),
    ROW("empty choices without usage are opening", H, "data: {\"choices\":[]}\n\n", SL_STREAM_OPENING),
    ROW("usage null is no usage", H, "data: {\"choices\":[],\"usage\":null}\n\n", SL_STREAM_OPENING),
    ROW("missing choices count as empty", H, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\"}\n\n",
        SL_STREAM_OPENING),
    ROW("empty choices with usage are not opening", H,
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":0}}\n\n",
        SL_STREAM_CONTENT),
    ROW("a role chunk with running usage is still opening", H,
        "data: {\"choices\":[{\"delta\":{" ROLE ",\"content\":\"\"}}],\"usage\":{\"prompt_tokens\":3,"
        "\"completion_tokens\":0}}\n\n",
        SL_STREAM_OPENING),
    ROW("a non-empty content string is content", H,
        "data: {\"choices\":[{\"delta\":{\"content\":\" \"}}]}\n\n", SL_STREAM_CONTENT),
    ROW("a non-empty refusal is content", H,
        "data: {\"choices\":[{\"delta\":{" ROLE ",\"content\":null,\"refusal\":\"I can't\"}}]}\n\n",
        SL_STREAM_CONTENT),
    ROW("reasoning_content is content", H,
        "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n", SL_STREAM_CONTENT),
    ROW("non-empty tool_calls are content", H,
        "data: {\"choices\":[{\"delta\":{" ROLE
        ",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_1\","
        "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n",
        SL_STREAM_CONTENT),
    ROW("empty tool_calls are opening", H,
        "data: {\"choices\":[{\"delta\":{" ROLE ",\"tool_calls\":[]}}]}\n\n", SL_STREAM_OPENING),
    ROW("null fields are opening", H,
        "data: "
        "{\"choices\":[{\"delta\":{\"content\":null,\"function_call\":null},\"finish_reason\":null}]}\n\n",
        SL_STREAM_OPENING),
    ROW("an unknown non-empty delta field is content", H,
        "data: {\"choices\":[{\"delta\":{\"audio\":{\"id\":\"a\"}}}]}\n\n", SL_STREAM_CONTENT),
    ROW("a non-null finish_reason is content and finishes", H,
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", SL_STREAM_CONTENT,
        .finished = true),
    ROW("a later choice can finish", H,
        "data: "
        "{\"choices\":[{\"delta\":{},\"finish_reason\":null},{\"delta\":{},\"finish_reason\":\"length\"}]}"
        "\n\n",
        SL_STREAM_CONTENT, .finished = true),
    ROW("error null is not an error", H,
        "data: {\"error\":null,\"choices\":[{\"delta\":{" ROLE ",\"content\":\"\"}}]}\n\n",
        SL_STREAM_OPENING),
    ROW("a server_error", H,
        "data: {\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n",
        SL_STREAM_ERROR, .code = "server_error"),
    ROW("a string code wins over the type", H,
        "data: {\"error\":{\"message\":\"m\",\"type\":\"requests\",\"code\":\"rate_limit_exceeded\"}}\n\n",
        SL_STREAM_ERROR, .code = "rate_limit_exceeded"),
    ROW("the request-error code", H,
        "data: {\"error\":{\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\"}}\n\n",
        SL_STREAM_ERROR, .code = "context_length_exceeded"),
    ROW("an empty code falls back to the type", H,
        "data: {\"error\":{\"type\":\"server_error\",\"code\":\"\"}}\n\n", SL_STREAM_ERROR,
        .code = "server_error"),
    ROW("a numeric code 400-599 is the status", H,
        "data: {\"error\":{\"code\":503,\"message\":\"unavailable\"}}\n\n", SL_STREAM_ERROR, .status = 503),
    ROW("a numeric code outside 400-599 is no status", H, "data: {\"error\":{\"code\":200}}\n\n",
        SL_STREAM_ERROR, .status = 0),
    ROW("a bare string error is an error", H, "data: {\"error\":\"boom\"}\n\n", SL_STREAM_ERROR),
    ROW("an escaped role key is still the role", H,
        "data: {\"choices\":[{\"delta\":{\"r\\u006fle\":\"assistant\",\"content\":\"\"}}]}\n\n",
        SL_STREAM_OPENING),
    ROW("empty fields in every shape, spaced, are opening", H,
        "data: {\"choices\":[{\"delta\":{" ROLE ",\"content\":\"\",\"tool_calls\":[ ],\"audio\":{ },"
        "\"refusal\":null,\"x\":false}}]}\n\n",
        SL_STREAM_OPENING),
    ROW("a number in a delta is content", H, "data: {\"choices\":[{\"delta\":{\"n\":0}}]}\n\n",
        SL_STREAM_CONTENT),
    ROW("choices that are not objects add nothing", H, "data: {\"choices\":[1,\"x\",null]}\n\n",
        SL_STREAM_OPENING),
    ROW("bytes after the chunk make it no JSON: content", H, "data: {\"choices\":[]} x\n\n",
        SL_STREAM_CONTENT),
    ROW("a chunk cut short is no JSON: content", H, "data: {\"choices\":[{\"delta\":{" ROLE "\n\n",
        SL_STREAM_CONTENT),
    ROW("an error beside choices is an error", H,
        "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"error\":{\"type\":\"server_error\"}}\n\n",
        SL_STREAM_ERROR, .code = "server_error"),
    ROW("DONE ends the stream", H, "data: [DONE]\n\n", SL_STREAM_END, .finished = true),
    ROW("not JSON is content", H, "data: hello\n\n", SL_STREAM_CONTENT),
    ROW("JSON that is not an object is content", H, "data: [1,2]\n\n", SL_STREAM_CONTENT),
    ROW("a comment is ignored", H, ": keep-alive\n\n", SL_STREAM_IGNORE),
    ROW("a named event without data is ignored", H, "event: ping\n\n", SL_STREAM_IGNORE),
    ROW("CRLF framing", H, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\r\n\r\n",
        SL_STREAM_CONTENT),

    ROW("flowing: a content chunk", F, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n",
        SL_STREAM_CONTENT),
    ROW("flowing: opening is not told apart", F,
        "data: {\"choices\":[{\"delta\":{" ROLE ",\"content\":\"\"}}]}\n\n", SL_STREAM_CONTENT),
    ROW("flowing: usage null", F, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}\n\n",
        SL_STREAM_CONTENT),
    ROW("flowing: a nested error object is not the chunk's error", F,
        "data: "
        "{\"choices\":[{\"delta\":{\"content\":\"x\"},\"content_filter_results\":{\"error\":{\"code\":\"x\","
        "\"message\":\"y\"}}}]}\n\n",
        SL_STREAM_CONTENT),
    ROW("flowing: error words inside text are text", F,
        "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"error\\\": {\\\"type\\\":1}\"}}]}\n\n",
        SL_STREAM_CONTENT),
    ROW("flowing: error null with spaces", F, "data: {\"error\" :  null, \"choices\":[]}\n\n",
        SL_STREAM_CONTENT),
    ROW("flowing: a top-level error", F, "data: {\"error\":{\"type\":\"server_error\",\"code\":null}}\n\n",
        SL_STREAM_ERROR, .code = "server_error"),
    ROW("flowing: a numeric code", F, "data: {\"error\" : {\"code\": 529}}\n\n", SL_STREAM_ERROR,
        .status = 529),
    ROW("flowing: finish_reason finishes", F,
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n", SL_STREAM_CONTENT,
        .finished = true),
    ROW("flowing: finish_reason null does not", F,
        "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n",
        SL_STREAM_CONTENT),
    ROW("flowing: DONE", F, "data: [DONE]\n\n", SL_STREAM_END, .finished = true),
    ROW("flowing: a comment", F, ": ping\n\n", SL_STREAM_IGNORE),
};

Test(stream_chat, rules)
{
    check_rows(SL_DIALECT_OPENAI_CHAT, chat_rows, sizeof chat_rows / sizeof chat_rows[0]);
}

Test(stream_chat, a_held_finish_reason_is_read_escaped_or_not)
{
    static const struct {
        const char *sse, *reason;
    } cases[] = {
        {"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n", "length"},
        {"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"st\\u006fp\"}]}\n\n", "stop"},
        {"data: {\"choices\":[{\"delta\":{},\"finish_reason\":7}]}\n\n", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_usage_t u = {0};
        sl_stream_t st;
        sl_stream_verdict_t v = classify_one(SL_DIALECT_OPENAI_CHAT, H, cases[i].sse, &u, &st);
        cr_assert_eq(v.kind, SL_STREAM_CONTENT, "%s", cases[i].sse);
        cr_assert(v.finished, "%s", cases[i].sse);
        cr_assert_str_eq(v.finish_reason, cases[i].reason, "%s", cases[i].sse);
    }
}

/* The walk and the parse of a held Chat chunk give one verdict wherever the walk decides. */
static void
assert_readers_agree(const char *sse, bool *walked)
{
    static char scratch[1024];
    sl_sse_scanner_t s;
    sl_sse_init(&s, 65536, scratch, sizeof scratch);
    sl_sse_event_t ev;
    cr_assert_eq(sl_sse_next(&s, sse, strlen(sse), &ev), SL_SSE_EVENT, "%s", sse);
    sl_stream_verdict_t walk = {.kind = SL_STREAM_CONTENT}, parse = walk;
    sl_usage_t usage = {0};
    *walked = sl__chat_held_walked(&ev, &walk);
    if (!*walked)
        return;
    sl__chat_held_parsed(&ev, &parse, &usage);
    cr_assert_eq(walk.kind, parse.kind, "%s: kind %c, parse %c", sse, letter(walk.kind), letter(parse.kind));
    cr_assert_eq(walk.finished, parse.finished, "%s: finished", sse);
    cr_assert_str_eq(walk.finish_reason, parse.finish_reason, "%s", sse);
}

Test(stream_chat, the_walk_and_the_parse_agree_where_the_walk_decides)
{
    size_t decided = 0;
    bool walked;
    for (size_t i = 0; i < sizeof chat_rows / sizeof chat_rows[0]; i++) {
        if (chat_rows[i].phase != H || strncmp(chat_rows[i].sse, "data: ", 6) != 0 ||
            strncmp(chat_rows[i].sse, "data: [DONE]", 12) == 0)
            continue;
        assert_readers_agree(chat_rows[i].sse, &walked);
        decided += walked;
    }
    cr_assert_geq(decided, 10, "the walk decided %zu of the rows", decided);
    /* A key given twice counts by its last value in the parse: the walk agrees, or leaves it to the parse. */
    static const char *const twice[] = {
        "data: {\"choices\":[{\"delta\":{\"content\":\"x\",\"content\":\"\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"\",\"content\":\"x\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"delta\":{}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"delta\":{\"content\":\"x\"}}]}\n\n",
        "data: {\"choices\":[{\"finish_reason\":\"stop\",\"finish_reason\":null,\"delta\":{}}]}\n\n",
        "data: {\"choices\":[{\"finish_reason\":null,\"finish_reason\":\"length\",\"delta\":{}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"choices\":[]}\n\n",
        "data: {\"usage\":{\"prompt_tokens\":1},\"usage\":null,\"choices\":[]}\n\n",
    };
    for (size_t i = 0; i < sizeof twice / sizeof twice[0]; i++)
        assert_readers_agree(twice[i], &walked);
}

static const row_t anthropic_rows[] = {
    ROW("message_start opens", H,
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n", SL_STREAM_OPENING),
    ROW("ping opens", H, "event: ping\ndata: {\"type\":\"ping\"}\n\n", SL_STREAM_OPENING),
    ROW("ping without data opens", H, "event: ping\n\n", SL_STREAM_OPENING),
    ROW("content_block_start is content", H, "event: content_block_start\ndata: {}\n\n", SL_STREAM_CONTENT),
    ROW("message_delta is content", H, "event: message_delta\ndata: {\"usage\":{\"output_tokens\":1}}\n\n",
        SL_STREAM_CONTENT),
    ROW("message_stop ends", H, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", SL_STREAM_END,
        .finished = true),
    ROW("an unknown event type is content", H, "event: thinking_budget\ndata: {}\n\n", SL_STREAM_CONTENT),
    ROW("an unnamed event is content", H, "data: {\"type\":\"message_start\"}\n\n", SL_STREAM_CONTENT),
    ROW("the error event", H,
        "event: error\ndata: "
        "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal\"}}\n\n",
        SL_STREAM_ERROR, .code = "api_error"),
    ROW("an error event without JSON is still an error", H, "event: error\ndata: oops\n\n", SL_STREAM_ERROR),
    ROW("a comment is ignored", H, ":\n\n", SL_STREAM_IGNORE),
    ROW("flowing: message_stop ends", F, "event: message_stop\ndata: {}\n\n", SL_STREAM_END,
        .finished = true),
    ROW("flowing: the error event", F,
        "event: error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\r\n\r\n",
        SL_STREAM_ERROR, .code = "overloaded_error"),
    ROW("flowing: content", F, "event: content_block_delta\ndata: {\"delta\":{\"text\":\"error\"}}\n\n",
        SL_STREAM_CONTENT),
};

Test(stream_anthropic, rules)
{
    check_rows(SL_DIALECT_ANTHROPIC, anthropic_rows, sizeof anthropic_rows / sizeof anthropic_rows[0]);
}

static const row_t responses_rows[] = {
    ROW("response.created with error null opens", H,
        "event: response.created\ndata: "
        "{\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\","
        "\"error\":null,\"usage\":null}}\n\n",
        SL_STREAM_OPENING),
    ROW("response.in_progress opens", H, "event: response.in_progress\ndata: {}\n\n", SL_STREAM_OPENING),
    ROW("response.queued opens", H, "event: response.queued\ndata: {}\n\n", SL_STREAM_OPENING),
    ROW("output_item.added is content", H, "event: response.output_item.added\ndata: {}\n\n",
        SL_STREAM_CONTENT),
    ROW("reasoning events are content", H, "event: response.reasoning_summary_text.delta\ndata: {}\n\n",
        SL_STREAM_CONTENT),
    ROW("function-call arguments are content", H,
        "event: response.function_call_arguments.delta\ndata: {\"delta\":\"{\\\"error\\\":1}\"}\n\n",
        SL_STREAM_CONTENT),
    ROW("an unknown event type is content", H, "event: response.something_new\ndata: {}\n\n",
        SL_STREAM_CONTENT),
    ROW("response.completed ends", H, "event: response.completed\ndata: {\"response\":{\"error\":null}}\n\n",
        SL_STREAM_END, .finished = true),
    ROW("response.incomplete ends too", H, "event: response.incomplete\ndata: {}\n\n", SL_STREAM_END,
        .finished = true),
    ROW("response.failed", H,
        "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\","
        "\"error\":{\"code\":\"server_error\",\"message\":\"m\"}}}\n\n",
        SL_STREAM_ERROR, .code = "server_error"),
    ROW("response.failed without an error object", H,
        "event: response.failed\ndata: {\"response\":{\"error\":null}}\n\n", SL_STREAM_ERROR),
    ROW("the flat error event", H,
        "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"try again in "
        "11.054s\",\"param\":null,\"sequence_number\":3}\n\n",
        SL_STREAM_ERROR, .code = "rate_limit_exceeded"),
    ROW("the flat error event with code null", H,
        "event: error\ndata: {\"type\":\"error\",\"code\":null,\"message\":\"m\"}\n\n", SL_STREAM_ERROR),
    ROW("the nested error event with a status", H,
        "event: error\ndata: {\"type\":\"error\",\"status\":429,\"error\":{\"type\":\"tokens\",\"code\":"
        "\"rate_limit_exceeded\",\"message\":\"m\"}}\n\n",
        SL_STREAM_ERROR, .code = "rate_limit_exceeded", .status = 429),
    ROW("any event with a top-level error is an error", H,
        "event: response.output_text.delta\ndata: "
        "{\"error\":{\"type\":\"server_error\",\"message\":\"m\"}}\n\n",
        SL_STREAM_ERROR, .code = "server_error"),
    ROW("a nested error field is not an error", H,
        "event: response.output_item.done\ndata: {\"item\":{\"type\":\"mcp_call\",\"error\":\"tool "
        "failed\"}}\n\n",
        SL_STREAM_CONTENT),
    ROW("a comment is ignored", H, ": keep-alive\n\n", SL_STREAM_IGNORE),
    ROW("flowing: a delta", F, "event: response.output_text.delta\ndata: {\"delta\":\"x\"}\n\n",
        SL_STREAM_CONTENT),
    ROW("flowing: response.failed", F,
        "event: response.failed\ndata: {\"response\":{\"error\":{\"code\":\"server_is_overloaded\"}}}\n\n",
        SL_STREAM_ERROR, .code = "server_is_overloaded"),
    ROW("flowing: the error event", F, "event: error\ndata: {\"type\":\"error\",\"code\":\"slow_down\"}\n\n",
        SL_STREAM_ERROR, .code = "slow_down"),
    ROW("flowing: completed", F, "event: response.completed\ndata: {}\n\n", SL_STREAM_END, .finished = true),
};

Test(stream_responses, rules)
{
    check_rows(SL_DIALECT_OPENAI_RESPONSES, responses_rows, sizeof responses_rows / sizeof responses_rows[0]);
}

/* ---- usage ---- */

Test(stream_usage, anthropic_takes_message_start_then_message_delta_totals)
{
    sl_usage_t u = {0};
    sl_stream_t st;
    classify_one(
        SL_DIALECT_ANTHROPIC, H,
        "event: message_start\ndata: {\"message\":{\"usage\":{\"input_tokens\":5,"
        "\"cache_creation_input_tokens\":20,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}\n\n",
        &u, &st);
    assert_usage(&u, &(sl_usage_t){5, 1, 100, 20}, "message_start");
    classify_one(SL_DIALECT_ANTHROPIC, F,
                 "event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{"
                 "\"output_tokens\":42,\"cache_read_input_tokens\":null}}\n\n",
                 &u, &st);
    assert_usage(&u, &(sl_usage_t){5, 42, 100, 20}, "message_delta: a null count is no count");
    classify_one(SL_DIALECT_ANTHROPIC, F,
                 "event: message_delta\ndata: {\"usage\":{\"input_tokens\":7,\"output_tokens\":50}}\n\n", &u,
                 &st);
    assert_usage(&u, &(sl_usage_t){7, 50, 100, 20}, "message_delta with input totals");
}

Test(stream_usage, chat_input_excludes_the_cached_part)
{
    static const char *chunk =
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":7,"
        "\"total_tokens\":107,\"prompt_tokens_details\":{\"cached_tokens\":40}}}\n\n";
    for (int phase = H; phase <= F; phase++) {
        sl_usage_t u = {.cache_write = 9};
        sl_stream_t st;
        classify_one(SL_DIALECT_OPENAI_CHAT, (sl_stream_phase_t)phase, chunk, &u, &st);
        assert_usage(&u, &(sl_usage_t){60, 7, 40, 9}, "chat usage; cache_write untouched");
    }
}

Test(stream_usage, chat_usage_beside_a_finish_reason_and_details_null)
{
    sl_usage_t u = {0};
    sl_stream_t st;
    sl_stream_verdict_t v = classify_one(
        SL_DIALECT_OPENAI_CHAT, F,
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,"
        "\"completion_tokens\":2,\"prompt_tokens_details\":null}}\n\n",
        &u, &st);
    cr_assert(v.finished);
    assert_usage(&u, &(sl_usage_t){3, 2, 0, 0}, "usage in the finish chunk");
}

Test(stream_usage, chat_cached_beyond_the_prompt_is_clamped)
{
    sl_usage_t u = {0};
    sl_stream_t st;
    classify_one(SL_DIALECT_OPENAI_CHAT, F,
                 "data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"prompt_tokens_details\":{"
                 "\"cached_tokens\":9}}}\n\n",
                 &u, &st);
    assert_usage(&u, &(sl_usage_t){0, 2, 3, 0}, "clamped");
}

Test(stream_usage, responses_completed_and_incomplete_report_usage)
{
    static const char *events[] = {"response.completed", "response.incomplete"};
    for (size_t i = 0; i < 2; i++) {
        char sse[512];
        snprintf(sse, sizeof sse,
                 "event: %s\ndata: {\"response\":{\"usage\":{\"input_tokens\":10,\"input_tokens_details\":{"
                 "\"cached_tokens\":4},\"output_tokens\":5,\"total_tokens\":15}}}\n\n",
                 events[i]);
        sl_usage_t u = {0};
        sl_stream_t st;
        classify_one(SL_DIALECT_OPENAI_RESPONSES, F, sse, &u, &st);
        assert_usage(&u, &(sl_usage_t){6, 5, 4, 0}, events[i]);
    }
}

Test(stream_usage, an_event_without_usage_leaves_it_alone)
{
    sl_usage_t u = {1, 2, 3, 4};
    sl_stream_t st;
    classify_one(SL_DIALECT_OPENAI_RESPONSES, H,
                 "event: response.created\ndata: {\"response\":{\"usage\":null}}\n\n", &u, &st);
    classify_one(SL_DIALECT_OPENAI_CHAT, H, "data: {\"choices\":[],\"usage\":null}\n\n", &u, &st);
    classify_one(SL_DIALECT_ANTHROPIC, H, "event: message_start\ndata: {\"message\":{}}\n\n", &u, &st);
    assert_usage(&u, &(sl_usage_t){1, 2, 3, 4}, "untouched");
}

/* ---- completeness and the hold ---- */

static outcome_t *
run_text(sl_dialect_t d, const char *text)
{
    static outcome_t o;
    run_stream(vt_of(d), text, strlen(text), strlen(text), &o);
    return &o;
}

Test(stream_complete, chat_is_complete_at_done_or_a_finish_reason)
{
    const char *cut_after_finish = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
                                   "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    cr_assert(sl_stream_complete(&run_text(SL_DIALECT_OPENAI_CHAT, cut_after_finish)->st));
    const char *cut_in_content = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
                                 "data: {\"choices\":[{\"delta\":{\"content\":\"there\"}}]}\n\n";
    cr_assert_not(sl_stream_complete(&run_text(SL_DIALECT_OPENAI_CHAT, cut_in_content)->st));
    const char *cut_mid_event = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
                                "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"st";
    cr_assert_not(sl_stream_complete(&run_text(SL_DIALECT_OPENAI_CHAT, cut_mid_event)->st),
                  "an event cut before its blank line never counts");
}

Test(stream_complete, chat_done_after_opening_only_is_complete_but_still_held)
{
    outcome_t *o = run_text(SL_DIALECT_OPENAI_CHAT,
                            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
                            "data: [DONE]\n\n");
    cr_assert_str_eq(o->kinds, "OE");
    cr_assert(sl_stream_complete(&o->st));
    cr_assert_eq(o->st.phase, SL_STREAM_HELD, "nothing to release: the stream ended early");
}

Test(stream_complete, anthropic_needs_message_stop)
{
    outcome_t *o = run_text(SL_DIALECT_ANTHROPIC, "event: message_start\ndata: {}\n\n"
                                                  "event: content_block_delta\ndata: {}\n\n"
                                                  "event: message_delta\ndata: {}\n\n");
    cr_assert_not(sl_stream_complete(&o->st));
    o = run_text(SL_DIALECT_ANTHROPIC, "event: message_start\ndata: {}\n\nevent: message_stop\ndata: {}\n\n");
    cr_assert(sl_stream_complete(&o->st));
    cr_assert_eq(o->st.phase, SL_STREAM_FLOWING, "message_stop is content per formats.md");
}

Test(stream_complete, responses_end_at_completed_or_incomplete_not_failed)
{
    cr_assert(sl_stream_complete(
        &run_text(SL_DIALECT_OPENAI_RESPONSES, "event: response.incomplete\ndata: {}\n\n")->st));
    cr_assert_not(sl_stream_complete(&run_text(SL_DIALECT_OPENAI_RESPONSES,
                                               "event: response.created\ndata: {}\n\n"
                                               "event: response.output_text.delta\ndata: {}\n\n")
                                          ->st));
    cr_assert_not(sl_stream_complete(
        &run_text(SL_DIALECT_OPENAI_RESPONSES, "event: response.failed\ndata: {}\n\n")->st));
}

Test(stream_complete, keep_alives_neither_release_nor_finish)
{
    outcome_t *o =
        run_text(SL_DIALECT_ANTHROPIC, ": keep-alive\n\nevent: ping\ndata: {}\n\n: keep-alive\n\n");
    cr_assert_str_eq(o->kinds, "IOI");
    cr_assert_eq(o->st.phase, SL_STREAM_HELD);
    cr_assert_not(sl_stream_complete(&o->st));
}

/* ---- the verdict's texts ---- */

Test(stream_verdict, long_codes_and_messages_are_cut_at_a_character_boundary)
{
    char sse[2048];
    char code[101], message[601];
    memset(code, 'c', 100);
    code[100] = '\0';
    for (size_t i = 0; i < 300; i++)
        memcpy(message + 2 * i, "\xC3\xA9", 2); /* é */
    message[600] = '\0';
    snprintf(sse, sizeof sse, "event: error\ndata: {\"error\":{\"type\":\"%s\",\"message\":\"%s\"}}\n\n",
             code, message);
    sl_usage_t u = {0};
    sl_stream_t st;
    sl_stream_verdict_t v = classify_one(SL_DIALECT_ANTHROPIC, H, sse, &u, &st);
    cr_assert_eq(strlen(v.code), SL_STREAM_CODE_MAX - 1);
    cr_assert_eq(strlen(v.message), 254, "127 whole characters, not 127 and a half");
    cr_assert_eq(memcmp(v.message, message, 254), 0);
}

Test(stream_verdict, credentials_in_an_error_message_are_masked)
{
    sl_usage_t u = {0};
    sl_stream_t st;
    sl_stream_verdict_t v = classify_one(
        SL_DIALECT_OPENAI_CHAT, H,
        "data: {\"error\":{\"message\":\"Incorrect API key provided: sk-proj-abcdefghijklmnop1234.\","
        "\"type\":\"invalid_request_error\",\"code\":\"invalid_api_key\"}}\n\n",
        &u, &st);
    cr_assert_str_eq(v.message, "Incorrect API key provided: sk-proj-…1234.");
    cr_assert_str_eq(v.code, "invalid_api_key");
}

/* ---- the vtable ---- */

Test(stream_class_for, the_four_sse_dialects_and_nothing_else)
{
    static const sl_dialect_t done[] = {SL_DIALECT_ANTHROPIC, SL_DIALECT_OPENAI_CHAT,
                                        SL_DIALECT_OPENAI_RESPONSES, SL_DIALECT_GEMINI};
    for (size_t i = 0; i < 4; i++) {
        const sl_stream_class_vtable_t *vt = sl_dialect_def(done[i])->stream;
        cr_assert_not_null(vt);
        cr_assert_eq(vt->dialect, done[i]);
        cr_assert_not_null(vt->classify);
    }
    cr_assert_null(sl_dialect_def(SL_DIALECT_BEDROCK)->stream, "Bedrock streams eventstream frames, not SSE");
}

/* ---- the flowing phase's key scan ---- */

Test(json_scan, keys_with_a_value_other_than_null_in_one_pass)
{
    static const char *const keys[] = {"\"error\"", "\"usage\"", "\"finish_reason\""};
    static const struct {
        const char *json;
        bool error, usage, finish;
    } rows[] = {
        {"{\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}", false, false, false},
        {"{\"choices\":[{\"finish_reason\":\"stop\"}],\"usage\":null}", false, false, true},
        {"{\"usage\" : {\"prompt_tokens\":1}}", false, true, false},
        {"{\"error\":{\"type\":\"overloaded\"}}", true, false, false},
        {"{\"error\":\n\tnull,\"usage\":null}", false, false, false},
        /* the words inside strings: escaped quotes, so never a key */
        {"{\"content\":\"say \\\"error\\\": 1 and \\\"usage\\\":{}\"}", false, false, false},
        {"{\"content\":\"error: usage: finish_reason:\"}", false, false, false},
        /* a key that ends like one of ours is another key */
        {"{\"my_error\":1,\"xusage\":2}", false, false, false},
        /* a colon at the very start or end */
        {":\"error\":", false, false, false},
        {"\"usage\":1", false, true, false},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        bool found[3] = {true, true, true};
        sl__json_keys_non_null(rows[i].json, strlen(rows[i].json), keys, 3, found);
        cr_assert_eq(found[0], rows[i].error, "%s", rows[i].json);
        cr_assert_eq(found[1], rows[i].usage, "%s", rows[i].json);
        cr_assert_eq(found[2], rows[i].finish, "%s", rows[i].json);
        cr_assert_eq(sl__json_has_non_null(rows[i].json, strlen(rows[i].json), "\"usage\""), rows[i].usage,
                     "%s", rows[i].json);
    }
}

Test(json_scan, value_of_finds_the_first_member_of_that_name_and_not_words_in_strings)
{
    static const char json[] = "{\"content\":\"\\\"choices\\\": 1\",\"choices\" : [],\"n\":\"choices\"}";
    const char *end = json + sizeof(json) - 1;
    const char *v = sl__json_value_of(json, end, "\"choices\"");
    cr_assert_not_null(v);
    cr_assert_eq(*v, '[', "the member's value, past the spaces: %s", v);
    cr_assert_null(sl__json_value_of(json, end, "\"usage\""));
    static const char cut[] = "{\"choices\": ";
    cr_assert_null(sl__json_value_of(cut, cut + sizeof(cut) - 1, "\"choices\""), "no value after the colon");
}

/* gen_ai.response.finish_reasons comes from here: the reason as each dialect's last events give it. */
Test(stream_rules, the_finish_reason_is_the_providers_own_word)
{
    static const struct {
        sl_dialect_t dialect;
        sl_stream_phase_t phase;
        const char *sse, *reason;
    } rows[] = {
        {SL_DIALECT_ANTHROPIC, SL_STREAM_FLOWING,
         "event: message_delta\ndata: "
         "{\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n",
         "tool_use"},
        {SL_DIALECT_ANTHROPIC, SL_STREAM_FLOWING,
         "event: message_delta\ndata: {\"delta\":{\"stop_reason\":null},\"usage\":{\"output_tokens\":3}}\n\n",
         ""},
        {SL_DIALECT_OPENAI_CHAT, SL_STREAM_HELD,
         "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"length\"}]}\n\n", "length"},
        /* After content Chat chunks are only scanned: the reason is read by the scan. */
        {SL_DIALECT_OPENAI_CHAT, SL_STREAM_FLOWING,
         "data: {\"choices\":[{\"delta\":{},\"finish_reason\": \"tool_calls\"}]}\n\n", "tool_calls"},
        {SL_DIALECT_OPENAI_CHAT, SL_STREAM_FLOWING,
         "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n", ""},
        {SL_DIALECT_OPENAI_RESPONSES, SL_STREAM_FLOWING,
         "event: response.incomplete\ndata: {\"response\":{\"status\":\"incomplete\",\"incomplete_details\":{"
         "\"reason\":\"max_output_tokens\"}}}\n\n",
         "max_output_tokens"},
        /* Not a provider's token (quotes, spaces): no reason rather than text in a trace. */
        {SL_DIALECT_ANTHROPIC, SL_STREAM_FLOWING,
         "event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"a b\\\"c\"}}\n\n", ""},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        sl_usage_t usage = {0};
        sl_stream_t st;
        sl_stream_verdict_t v = classify_one(rows[i].dialect, rows[i].phase, rows[i].sse, &usage, &st);
        cr_assert_str_eq(v.finish_reason, rows[i].reason, "row %zu", i);
        cr_assert_str_eq(st.finish_reason, rows[i].reason, "row %zu", i);
    }
}
