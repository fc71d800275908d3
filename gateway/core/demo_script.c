/*
 * The demo upstream's behaviour: the trouble schedule, the plan of each
 * answer, and the bytes of every dialect's answers and errors (see
 * demo_script.h). The dialects differ only in their bytes, so each is a row
 * of script functions; the shape of an answer (which pieces, which delays,
 * where it is cut) is written once, in sl_demo_answer_build.
 */
#include "core/demo_script.h"

#include <ctype.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/eventstream.h"
#include "core/route.h"

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the trouble schedule ------------------------------------------------------------------------ */

static const char *const trouble_names[SL_DEMO_TROUBLE_COUNT] = {
    [SL_DEMO_CALM] = "calm", [SL_DEMO_OVERLOAD] = "overload", [SL_DEMO_RATE_LIMIT] = "rate-limit",
    [SL_DEMO_DROP] = "drop", [SL_DEMO_SLOW] = "slow",
};

static const char *const trouble_texts[SL_DEMO_TROUBLE_COUNT] = {
    [SL_DEMO_CALM] = "calm: the upstreams answer (a rare overload on 'a')",
    [SL_DEMO_OVERLOAD] = "overload burst on the 'a' upstreams (529/503 and overloaded errors before content)",
    [SL_DEMO_RATE_LIMIT] = "429 storm on the 'a' upstreams",
    [SL_DEMO_DROP] = "dropped streams on the 'a' upstreams (cut before and after content)",
    [SL_DEMO_SLOW] = "slow first tokens (3-10 s) on the 'a' upstreams",
};

const char *
sl_demo_trouble_name(sl_demo_trouble_t mode)
{
    return (unsigned)mode < SL_DEMO_TROUBLE_COUNT ? trouble_names[mode] : "?";
}

const char *
sl_demo_trouble_describe(sl_demo_trouble_t mode)
{
    return (unsigned)mode < SL_DEMO_TROUBLE_COUNT ? trouble_texts[mode] : "?";
}

bool
sl_demo_trouble_parse(const char *name, sl_demo_trouble_t *out)
{
    static const struct {
        const char *alias;
        sl_demo_trouble_t mode;
    } aliases[] = {
        {"ratelimit", SL_DEMO_RATE_LIMIT},
        {"rate_limit", SL_DEMO_RATE_LIMIT},
        {"429", SL_DEMO_RATE_LIMIT},
    };
    if (name == NULL)
        return false;
    for (int m = 0; m < SL_DEMO_TROUBLE_COUNT; m++) {
        if (strcasecmp(name, trouble_names[m]) == 0) {
            *out = (sl_demo_trouble_t)m;
            return true;
        }
    }
    for (size_t i = 0; i < NELEMS(aliases); i++) {
        if (strcasecmp(name, aliases[i].alias) == 0) {
            *out = aliases[i].mode;
            return true;
        }
    }
    return false;
}

/*
 * Overload comes last: it opens the "a" upstreams' breakers, and the calm
 * that follows lets them close again, so the storm and the drops after the
 * calm reach "a" instead of finding it cooling.
 */
const sl_demo_step_t sl_demo_cycle[] = {
    {SL_DEMO_CALM, 20}, {SL_DEMO_RATE_LIMIT, 20}, {SL_DEMO_DROP, 15},
    {SL_DEMO_SLOW, 15}, {SL_DEMO_OVERLOAD, 15},
};
const size_t sl_demo_cycle_len = NELEMS(sl_demo_cycle);

sl_demo_phase_t
sl_demo_phase_at(int64_t ms_since_start, bool pinned, sl_demo_trouble_t pin)
{
    if (pinned)
        return (sl_demo_phase_t){.mode = pin, .start_ms = 0, .end_ms = INT64_MAX, .number = 0};
    int64_t cycle_ms = 0;
    for (size_t i = 0; i < sl_demo_cycle_len; i++)
        cycle_ms += (int64_t)sl_demo_cycle[i].secs * 1000;
    int64_t t = ms_since_start > 0 ? ms_since_start : 0;
    int64_t cycles = t / cycle_ms;
    int64_t start = cycles * cycle_ms;
    for (size_t i = 0;; i++) {
        int64_t end = start + (int64_t)sl_demo_cycle[i].secs * 1000;
        if (t < end || i + 1 == sl_demo_cycle_len) {
            return (sl_demo_phase_t){.mode = sl_demo_cycle[i].mode,
                                     .start_ms = start,
                                     .end_ms = end,
                                     .number = (uint64_t)cycles * sl_demo_cycle_len + i};
        }
        start = end;
    }
}

/* ---- one request ---------------------------------------------------------------------------------- */

/* Keeps bytes that are safe unescaped in JSON strings and header values; others become '_'. */
static void
set_model(sl_demo_request_t *out, const char *model, size_t len)
{
    if (len >= SL_DEMO_MODEL_MAX)
        len = SL_DEMO_MODEL_MAX - 1;
    for (size_t i = 0; i < len; i++) {
        char c = model[i];
        out->model[i] = isalnum((unsigned char)c) || (c != '\0' && strchr("._-:/@+", c) != NULL) ? c : '_';
    }
    out->model[len] = '\0';
    if (len == 0)
        strcpy(out->model, "demo-model");
}

sl_demo_parse_t
sl_demo_request_parse(const char *method, const char *target, size_t target_len, const char *body,
                      size_t body_len, sl_demo_request_t *out)
{
    if (target_len < 3 || target[0] != '/' || (target[1] != 'a' && target[1] != 'b') || target[2] != '/')
        return SL_DEMO_PARSE_NOT_FOUND;
    sl_endpoint_t ep;
    if (!sl_endpoint_parse(method, strlen(method), target + 2, target_len - 2, &ep))
        return SL_DEMO_PARSE_NOT_FOUND;
    out->dialect = ep.dialect;
    if (ep.op != SL_OP_GENERATE && ep.op != SL_OP_COUNT_TOKENS)
        return SL_DEMO_PARSE_NOT_FOUND;
    *out = (sl_demo_request_t){
        .dialect = ep.dialect,
        .op = ep.op == SL_OP_GENERATE ? SL_DEMO_OP_GENERATE : SL_DEMO_OP_COUNT_TOKENS,
        .upstream = target[1],
        .stream = ep.op == SL_OP_GENERATE && ep.stream_by_path,
        .input_tokens = body_len / 4 > 0 ? (int64_t)(body_len / 4) : 1,
    };
    json_t *root = body_len > 0 ? json_loadb(body, body_len, 0, NULL) : NULL;
    if (!json_is_object(root)) {
        json_decref(root);
        set_model(out, ep.model, strlen(ep.model));
        return SL_DEMO_PARSE_BAD_BODY;
    }
    const json_t *model = json_object_get(root, "model");
    if (ep.model[0] != '\0')
        set_model(out, ep.model, strlen(ep.model));
    else
        set_model(out, json_string_value(model) ? json_string_value(model) : "",
                  json_string_value(model) ? json_string_length(model) : 0);
    /* Where the path names the model (Gemini, Bedrock) it also says whether to stream; elsewhere the body
     * does. */
    if (out->op == SL_DEMO_OP_GENERATE && ep.model[0] == '\0' &&
        json_is_true(json_object_get(root, "stream")))
        out->stream = true;
    json_decref(root);
    return SL_DEMO_PARSE_OK;
}

/* ---- the plan ------------------------------------------------------------------------------------- */

static const char *const outcome_names[SL_DEMO_OUTCOME_COUNT] = {
    [SL_DEMO_ANSWER] = "answer",
    [SL_DEMO_OVERLOADED] = "overloaded",
    [SL_DEMO_RATE_LIMITED] = "rate_limited",
    [SL_DEMO_STREAM_OVERLOADED] = "stream_overloaded",
    [SL_DEMO_CUT_BEFORE_CONTENT] = "cut_before_content",
    [SL_DEMO_CUT_AFTER_CONTENT] = "cut_after_content",
    [SL_DEMO_CLOSE_BEFORE_HEAD] = "close_before_head",
};

const char *
sl_demo_outcome_name(sl_demo_outcome_t outcome)
{
    return (unsigned)outcome < SL_DEMO_OUTCOME_COUNT ? outcome_names[outcome] : "?";
}

/*
 * Percent of requests each kind of trouble hits, per mode, for the "a" and the "b" upstreams. A mode
 * sets one kind only, so sl_demo_decide compares one roll with each figure, no running sum.
 */
typedef struct {
    uint8_t overload, rate_limit, drop_stream, drop_whole, slow;
} odds_t;

static const odds_t odds[SL_DEMO_TROUBLE_COUNT][2] = {
    [SL_DEMO_CALM] = {{.overload = 3}, {0}},
    [SL_DEMO_OVERLOAD] = {{.overload = 60}, {.overload = 10}},
    [SL_DEMO_RATE_LIMIT] = {{.rate_limit = 85}, {.rate_limit = 25}},
    [SL_DEMO_DROP] = {{.drop_stream = 50, .drop_whole = 30}, {.drop_stream = 5, .drop_whole = 3}},
    [SL_DEMO_SLOW] = {{.slow = 85}, {0}},
};

/* splitmix64: turns any counter or seed into well-spread draws. */
uint64_t
sl_demo_draw(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A draw in [lo, hi]. */
static uint32_t
between(uint64_t *state, uint32_t lo, uint32_t hi)
{
    return lo + (uint32_t)(sl_demo_draw(state) % ((uint64_t)hi - lo + 1));
}

sl_demo_plan_t
sl_demo_decide(const sl_demo_request_t *req, sl_demo_trouble_t mode, uint64_t rand)
{
    uint64_t s = rand;
    /* Every draw is taken, in this order, whatever the outcome: a plan depends on rand alone. */
    uint32_t roll = between(&s, 0, 99);
    uint32_t variant = between(&s, 0, 1);
    sl_demo_plan_t p = {
        .outcome = SL_DEMO_ANSWER,
        .status = 200,
        .stream = req->stream,
        .words = between(&s, 12, 60),
        .head_delay_ms = between(&s, 30, 150),
        .first_token_ms = between(&s, 150, 700),
        .token_delay_ms = between(&s, 20, 70),
        .cut_after_events = between(&s, 1, 6),
        .text_seed = sl_demo_draw(&s),
    };
    uint32_t slow_ms = between(&s, 3000, 10000);
    uint32_t retry_after = between(&s, 2, 6);
    uint32_t trouble_ms = between(&s, 100, 1500);

    if (req->op == SL_DEMO_OP_COUNT_TOKENS) {
        p.stream = false;
        p.words = 0;
        return p;
    }
    const odds_t *o =
        &odds[(unsigned)mode < SL_DEMO_TROUBLE_COUNT ? mode : SL_DEMO_CALM][req->upstream == 'a' ? 0 : 1];
    if (roll < o->overload) {
        p.outcome = req->stream && variant ? SL_DEMO_STREAM_OVERLOADED : SL_DEMO_OVERLOADED;
        if (p.outcome == SL_DEMO_OVERLOADED)
            p.status = req->dialect == SL_DIALECT_ANTHROPIC ? 529 : 503;
        p.first_token_ms = trouble_ms;
    } else if (roll < o->rate_limit) {
        p.outcome = SL_DEMO_RATE_LIMITED;
        p.status = 429;
        p.retry_after_secs = retry_after;
    } else if (req->stream && roll < o->drop_stream) {
        p.outcome = variant ? SL_DEMO_CUT_AFTER_CONTENT : SL_DEMO_CUT_BEFORE_CONTENT;
        if (p.outcome == SL_DEMO_CUT_BEFORE_CONTENT)
            p.first_token_ms = trouble_ms;
    } else if (!req->stream && roll < o->drop_whole) {
        p.outcome = SL_DEMO_CLOSE_BEFORE_HEAD;
        p.status = 0;
        p.head_delay_ms = trouble_ms;
    } else if (roll < o->slow) {
        p.first_token_ms = slow_ms;
    }
    /* A whole answer is sent when it has been "generated": the first token plus every other. */
    if (!p.stream && p.outcome == SL_DEMO_ANSWER)
        p.head_delay_ms += p.first_token_ms + p.words * p.token_delay_ms;
    return p;
}

/* ---- text ----------------------------------------------------------------------------------------- */

static const char *const sentences[] = {
    "A sluice is a gate that lets water through at the rate the channel below can take.",
    "When one provider has a bad minute, the gateway tries the next one before you notice.",
    "Retries wait two, four, then eight seconds, with a little jitter so clients do not march in step.",
    "A rate limit is not a failure: the upstream pauses, and requests queue in arrival order.",
    "The first token is held until real content arrives, so an early error can fail over invisibly.",
    "Every request leaves one row in the request database, with each attempt and its timing.",
    "Usage windows roll by the minute and the hour, and calendar periods reset at midnight.",
    "The breaker opens after three unexplained failures and lets one probe through later.",
    "Streams are read event by event, and anything unknown counts as content.",
    "This answer comes from the built-in demo upstream, so no provider key was spent on it.",
    "Watch the board: queued requests show which gate holds them and for how long.",
    "A dropped stream before content is retried; after content the client is told in the stream.",
    "Keep-alive comments every fifteen seconds stop a client from giving up on a long wait.",
    "Mills along a river share its water, and each one takes only what its wheel can turn.",
    "A good gateway makes a provider outage look like a slightly slower answer.",
    "Limits can be changed live from the control app, and the next admission uses them at once.",
};

uint32_t
sl_demo_text(uint64_t seed, uint32_t words, sl_strbuf_t *out)
{
    size_t s = (size_t)(seed % NELEMS(sentences));
    const char *p = sentences[s];
    uint32_t w = 0;
    /* Every sentence ends with a period: going on to one ends the answer where a sentence does. */
    while (w < words || (w > 0 && out->data[out->len - 1] != '.')) {
        while (*p == ' ')
            p++;
        if (*p == '\0') {
            s = (s + 1 + (size_t)((seed >> 8) % 3)) % NELEMS(sentences);
            p = sentences[s];
        }
        size_t n = strcspn(p, " ");
        if (w++ > 0)
            sl_strbuf_append(out, " ", 1);
        sl_strbuf_append(out, p, n);
        p += n;
    }
    return w;
}

/* ---- bytes ---------------------------------------------------------------------------------------- */

/* Appends s[0..n) as a JSON string, quotes included. */
static void
json_str(sl_strbuf_t *b, const char *s, size_t n)
{
    sl_strbuf_append(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            sl_strbuf_appendf(b, "\\%c", c);
        else if (c < 0x20)
            sl_strbuf_appendf(b, "\\u%04x", c);
        else
            sl_strbuf_append(b, (const char *)&c, 1);
    }
    sl_strbuf_append(b, "\"", 1);
}

typedef struct {
    const sl_demo_request_t *req;
    const sl_demo_plan_t *plan;
    const char *text; /* the whole answer's text */
    size_t text_len;
    char id[24];  /* the request's serial in hex, for ids */
    uint32_t seq; /* Responses sequence_number */
    int64_t output_tokens;
} ctx_t;

typedef enum {
    ERR_OVERLOADED,
    ERR_RATE_LIMITED,
    ERR_BAD_REQUEST,
    ERR_UNAUTHORIZED,
    ERR_NOT_FOUND,
    ERR_COUNT
} err_t;

/* The status each kind of error is answered with (Anthropic's overload is 529, see its row). */
static const int err_status[ERR_COUNT] = {503, 429, 400, 401, 404};

/* One dialect's bytes. Stream functions append whole events (SSE) or frames (Bedrock). */
typedef struct {
    const char *stream_type;
    /* Whether an in-stream overload follows the opening events (Bedrock's exception comes first). */
    bool opening_before_error;
    void (*opening)(sl_strbuf_t *b, ctx_t *c);
    void (*first)(sl_strbuf_t *b, ctx_t *c); /* what goes before the first text delta */
    void (*delta)(sl_strbuf_t *b, ctx_t *c, const char *t, size_t n);
    void (*closing)(sl_strbuf_t *b, ctx_t *c);
    void (*whole)(sl_strbuf_t *b, ctx_t *c);
    void (*count)(sl_strbuf_t *b, ctx_t *c);
    void (*stream_overloaded)(sl_strbuf_t *b, ctx_t *c);
    /* The body of a status error; may add header lines to a->headers. message NULL = the dialect's own. */
    void (*error)(sl_demo_answer_t *a, ctx_t *c, err_t kind, const char *message, uint32_t retry_after);
} script_t;

static void
sse_event(sl_strbuf_t *b, const char *name)
{
    sl_strbuf_appendf(b, "event: %s\ndata: ", name);
}

static void
sse_end(sl_strbuf_t *b)
{
    sl_strbuf_append(b, "\n\n", 2);
}

/* -- Anthropic -- */

static void
anthropic_opening(sl_strbuf_t *b, ctx_t *c)
{
    sse_event(b, "message_start");
    sl_strbuf_appendf(
        b,
        "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_demo_%s\",\"type\":\"message\","
        "\"role\":\"assistant\",\"content\":[],\"model\":\"%s\",\"stop_reason\":null,"
        "\"stop_sequence\":null,\"usage\":{\"input_tokens\":%" PRId64 ","
        "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}",
        c->id, c->req->model, c->req->input_tokens);
    sse_end(b);
    sse_event(b, "ping");
    sl_strbuf_appendf(b, "{\"type\":\"ping\"}");
    sse_end(b);
}

static void
anthropic_first(sl_strbuf_t *b, ctx_t *c)
{
    (void)c;
    sse_event(b, "content_block_start");
    sl_strbuf_appendf(b, "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\","
                         "\"text\":\"\"}}");
    sse_end(b);
}

static void
anthropic_delta(sl_strbuf_t *b, ctx_t *c, const char *t, size_t n)
{
    (void)c;
    sse_event(b, "content_block_delta");
    sl_strbuf_appendf(b, "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
                         "\"text\":");
    json_str(b, t, n);
    sl_strbuf_appendf(b, "}}");
    sse_end(b);
}

static void
anthropic_closing(sl_strbuf_t *b, ctx_t *c)
{
    sse_event(b, "content_block_stop");
    sl_strbuf_appendf(b, "{\"type\":\"content_block_stop\",\"index\":0}");
    sse_end(b);
    sse_event(b, "message_delta");
    sl_strbuf_appendf(
        b,
        "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},"
        "\"usage\":{\"output_tokens\":%" PRId64 "}}",
        c->output_tokens);
    sse_end(b);
    sse_event(b, "message_stop");
    sl_strbuf_appendf(b, "{\"type\":\"message_stop\"}");
    sse_end(b);
}

static void
anthropic_whole(sl_strbuf_t *b, ctx_t *c)
{
    sl_strbuf_appendf(b,
                      "{\"id\":\"msg_demo_%s\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"%s\","
                      "\"content\":[{\"type\":\"text\",\"text\":",
                      c->id, c->req->model);
    json_str(b, c->text, c->text_len);
    sl_strbuf_appendf(
        b,
        "}],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":%" PRId64
        ",\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":%" PRId64 "}}",
        c->req->input_tokens, c->output_tokens);
}

static void
anthropic_count(sl_strbuf_t *b, ctx_t *c)
{
    sl_strbuf_appendf(b, "{\"input_tokens\":%" PRId64 "}", c->req->input_tokens);
}

static void
anthropic_stream_overloaded(sl_strbuf_t *b, ctx_t *c)
{
    (void)c;
    sse_event(b, "error");
    sl_strbuf_appendf(
        b, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}");
    sse_end(b);
}

static void
anthropic_error(sl_demo_answer_t *a, ctx_t *c, err_t kind, const char *message, uint32_t retry_after)
{
    static const char *const types[ERR_COUNT] = {"overloaded_error", "rate_limit_error",
                                                 "invalid_request_error", "authentication_error",
                                                 "not_found_error"};
    static const char *const texts[ERR_COUNT] = {
        "Overloaded", "This request would exceed the rate limit of the demo upstream. Please slow down.",
        "invalid request", "invalid x-api-key", "model not found"};
    if (kind == ERR_OVERLOADED)
        a->status = 529;
    if (retry_after > 0)
        sl_strbuf_appendf(&a->headers, "retry-after: %u\r\n", retry_after);
    sl_strbuf_appendf(&a->body,
                      "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"%s\"},"
                      "\"request_id\":\"req_demo_%s\"}",
                      types[kind], message ? message : texts[kind], c->id);
}

/* -- OpenAI, both APIs -- */

static void
openai_error(sl_demo_answer_t *a, ctx_t *c, err_t kind, const char *message, uint32_t retry_after)
{
    static const char *const types[ERR_COUNT] = {"server_error", "requests", "invalid_request_error",
                                                 "invalid_request_error", "invalid_request_error"};
    static const char *const codes[ERR_COUNT] = {NULL, "rate_limit_exceeded", NULL, "invalid_api_key",
                                                 "model_not_found"};
    (void)c;
    if (retry_after > 0)
        sl_strbuf_appendf(&a->headers, "retry-after: %u\r\n", retry_after);
    sl_strbuf_appendf(&a->body, "{\"error\":{\"message\":\"");
    if (message != NULL)
        sl_strbuf_appendf(&a->body, "%s", message);
    else if (kind == ERR_OVERLOADED)
        sl_strbuf_appendf(&a->body, "The server is overloaded or not ready yet.");
    else if (kind == ERR_RATE_LIMITED)
        sl_strbuf_appendf(&a->body,
                          "Rate limit reached for requests on the demo upstream. Please try again in %us.",
                          retry_after);
    else
        sl_strbuf_appendf(&a->body, "Incorrect API key provided.");
    sl_strbuf_appendf(&a->body, "\",\"type\":\"%s\",\"param\":null,\"code\":", types[kind]);
    if (codes[kind] != NULL)
        sl_strbuf_appendf(&a->body, "\"%s\"}}", codes[kind]);
    else
        sl_strbuf_appendf(&a->body, "null}}");
}

static void
chat_chunk_start(sl_strbuf_t *b, ctx_t *c)
{
    sl_strbuf_appendf(
        b,
        "data: {\"id\":\"chatcmpl-demo%s\",\"object\":\"chat.completion.chunk\",\"created\":%" PRId64
        ",\"model\":\"%s\",\"system_fingerprint\":null,\"choices\":",
        c->id, c->req->unix_secs, c->req->model);
}

static void
chat_opening(sl_strbuf_t *b, ctx_t *c)
{
    chat_chunk_start(b, c);
    sl_strbuf_appendf(b, "[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},"
                         "\"logprobs\":null,\"finish_reason\":null}]}");
    sse_end(b);
}

static void
no_first(sl_strbuf_t *b, ctx_t *c)
{
    (void)b;
    (void)c;
}

static void
chat_delta(sl_strbuf_t *b, ctx_t *c, const char *t, size_t n)
{
    chat_chunk_start(b, c);
    sl_strbuf_appendf(b, "[{\"index\":0,\"delta\":{\"content\":");
    json_str(b, t, n);
    sl_strbuf_appendf(b, "},\"logprobs\":null,\"finish_reason\":null}]}");
    sse_end(b);
}

static void
chat_closing(sl_strbuf_t *b, ctx_t *c)
{
    chat_chunk_start(b, c);
    sl_strbuf_appendf(b, "[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}");
    sse_end(b);
    /* The usage chunk of stream_options.include_usage, sent always (the gateway strips it if unasked). */
    chat_chunk_start(b, c);
    sl_strbuf_appendf(b,
                      "[],\"usage\":{\"prompt_tokens\":%" PRId64 ",\"completion_tokens\":%" PRId64
                      ",\"total_tokens\":%" PRId64 "}}",
                      c->req->input_tokens, c->output_tokens, c->req->input_tokens + c->output_tokens);
    sse_end(b);
    sl_strbuf_appendf(b, "data: [DONE]");
    sse_end(b);
}

static void
chat_whole(sl_strbuf_t *b, ctx_t *c)
{
    sl_strbuf_appendf(b,
                      "{\"id\":\"chatcmpl-demo%s\",\"object\":\"chat.completion\",\"created\":%" PRId64
                      ",\"model\":\"%s\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                      "\"content\":",
                      c->id, c->req->unix_secs, c->req->model);
    json_str(b, c->text, c->text_len);
    sl_strbuf_appendf(b,
                      ",\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_"
                      "tokens\":%" PRId64 ",\"completion_tokens\":%" PRId64 ",\"total_tokens\":%" PRId64
                      "},\"system_fingerprint\":null}",
                      c->req->input_tokens, c->output_tokens, c->req->input_tokens + c->output_tokens);
}

static void
chat_stream_overloaded(sl_strbuf_t *b, ctx_t *c)
{
    (void)c;
    sl_strbuf_appendf(
        b, "data: {\"error\":{\"message\":\"The server had an error while processing your request.\","
           "\"type\":\"server_error\",\"param\":null,\"code\":null}}");
    sse_end(b);
}

static void
openai_count(sl_strbuf_t *b, ctx_t *c)
{
    sl_strbuf_appendf(b, "{\"object\":\"response.input_tokens\",\"input_tokens\":%" PRId64 "}",
                      c->req->input_tokens);
}

/* -- OpenAI Responses -- */

static void
responses_object(sl_strbuf_t *b, ctx_t *c, const char *status)
{
    sl_strbuf_appendf(b,
                      "{\"id\":\"resp_demo%s\",\"object\":\"response\",\"created_at\":%" PRId64
                      ",\"status\":\"%s\",\"model\":\"%s\",\"output\":[",
                      c->id, c->req->unix_secs, status, c->req->model);
    if (strcmp(status, "completed") == 0) {
        sl_strbuf_appendf(b,
                          "{\"id\":\"msg_demo%s\",\"type\":\"message\",\"status\":\"completed\",\"role\":"
                          "\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":",
                          c->id);
        json_str(b, c->text, c->text_len);
        sl_strbuf_appendf(b, ",\"annotations\":[]}]}");
    }
    sl_strbuf_appendf(b, "],\"error\":null,\"incomplete_details\":null,\"usage\":");
    if (strcmp(status, "completed") == 0)
        sl_strbuf_appendf(b,
                          "{\"input_tokens\":%" PRId64 ",\"input_tokens_details\":{\"cached_tokens\":0},"
                          "\"output_tokens\":%" PRId64 ",\"output_tokens_details\":{\"reasoning_tokens\":0},"
                          "\"total_tokens\":%" PRId64 "}}",
                          c->req->input_tokens, c->output_tokens, c->req->input_tokens + c->output_tokens);
    else
        sl_strbuf_appendf(b, "null}");
}

static void
responses_opening(sl_strbuf_t *b, ctx_t *c)
{
    static const char *const names[] = {"response.created", "response.in_progress"};
    for (size_t i = 0; i < NELEMS(names); i++) {
        sse_event(b, names[i]);
        sl_strbuf_appendf(b, "{\"type\":\"%s\",\"response\":", names[i]);
        responses_object(b, c, "in_progress");
        sl_strbuf_appendf(b, ",\"sequence_number\":%u}", c->seq++);
        sse_end(b);
    }
}

static void
responses_first(sl_strbuf_t *b, ctx_t *c)
{
    sse_event(b, "response.output_item.added");
    sl_strbuf_appendf(
        b,
        "{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"msg_demo%s\","
        "\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]},"
        "\"sequence_number\":%u}",
        c->id, c->seq++);
    sse_end(b);
    sse_event(b, "response.content_part.added");
    sl_strbuf_appendf(
        b,
        "{\"type\":\"response.content_part.added\",\"item_id\":\"msg_demo%s\",\"output_index\":0,"
        "\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]},"
        "\"sequence_number\":%u}",
        c->id, c->seq++);
    sse_end(b);
}

static void
responses_delta(sl_strbuf_t *b, ctx_t *c, const char *t, size_t n)
{
    sse_event(b, "response.output_text.delta");
    sl_strbuf_appendf(
        b,
        "{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_demo%s\",\"output_index\":0,"
        "\"content_index\":0,\"delta\":",
        c->id);
    json_str(b, t, n);
    sl_strbuf_appendf(b, ",\"logprobs\":[],\"sequence_number\":%u}", c->seq++);
    sse_end(b);
}

static void
responses_closing(sl_strbuf_t *b, ctx_t *c)
{
    sse_event(b, "response.output_text.done");
    sl_strbuf_appendf(b,
                      "{\"type\":\"response.output_text.done\",\"item_id\":\"msg_demo%s\",\"output_index\":0,"
                      "\"content_index\":0,\"text\":",
                      c->id);
    json_str(b, c->text, c->text_len);
    sl_strbuf_appendf(b, ",\"logprobs\":[],\"sequence_number\":%u}", c->seq++);
    sse_end(b);
    sse_event(b, "response.content_part.done");
    sl_strbuf_appendf(
        b,
        "{\"type\":\"response.content_part.done\",\"item_id\":\"msg_demo%s\",\"output_index\":0,"
        "\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":",
        c->id);
    json_str(b, c->text, c->text_len);
    sl_strbuf_appendf(b, ",\"annotations\":[]},\"sequence_number\":%u}", c->seq++);
    sse_end(b);
    sse_event(b, "response.output_item.done");
    sl_strbuf_appendf(
        b,
        "{\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"msg_demo%s\","
        "\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":"
        "\"output_text\",\"text\":",
        c->id);
    json_str(b, c->text, c->text_len);
    sl_strbuf_appendf(b, ",\"annotations\":[]}]},\"sequence_number\":%u}", c->seq++);
    sse_end(b);
    sse_event(b, "response.completed");
    sl_strbuf_appendf(b, "{\"type\":\"response.completed\",\"response\":");
    responses_object(b, c, "completed");
    sl_strbuf_appendf(b, ",\"sequence_number\":%u}", c->seq++);
    sse_end(b);
}

static void
responses_whole(sl_strbuf_t *b, ctx_t *c)
{
    responses_object(b, c, "completed");
}

static void
responses_stream_overloaded(sl_strbuf_t *b, ctx_t *c)
{
    sse_event(b, "response.failed");
    sl_strbuf_appendf(
        b,
        "{\"type\":\"response.failed\",\"response\":{\"id\":\"resp_demo%s\",\"object\":\"response\","
        "\"created_at\":%" PRId64 ",\"status\":\"failed\",\"model\":\"%s\",\"output\":[],"
        "\"error\":{\"code\":\"server_is_overloaded\",\"message\":\"Our servers are currently "
        "overloaded. Please try again later.\"},\"incomplete_details\":null,\"usage\":null},"
        "\"sequence_number\":%u}",
        c->id, c->req->unix_secs, c->req->model, c->seq++);
    sse_end(b);
}

/* -- Gemini -- */

static void
gemini_chunk(sl_strbuf_t *b, ctx_t *c, const char *t, size_t n, int64_t tokens, bool last)
{
    sl_strbuf_appendf(b, "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":");
    json_str(b, t, n);
    sl_strbuf_appendf(b,
                      "}]},\"index\":0%s}],\"usageMetadata\":{\"promptTokenCount\":%" PRId64
                      ",\"candidatesTokenCount\":%" PRId64 ",\"totalTokenCount\":%" PRId64
                      "},\"modelVersion\":\"%s\",\"responseId\":\"gem_demo%s\"}",
                      last ? ",\"finishReason\":\"STOP\"" : "", c->req->input_tokens, tokens,
                      c->req->input_tokens + tokens, c->req->model, c->id);
    sse_end(b);
}

static void
gemini_delta(sl_strbuf_t *b, ctx_t *c, const char *t, size_t n)
{
    gemini_chunk(b, c, t, n, c->output_tokens, false);
}

static void
gemini_closing(sl_strbuf_t *b, ctx_t *c)
{
    gemini_chunk(b, c, "", 0, c->output_tokens, true);
}

static void
gemini_whole(sl_strbuf_t *b, ctx_t *c)
{
    sl_strbuf_appendf(b, "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":");
    json_str(b, c->text, c->text_len);
    sl_strbuf_appendf(
        b,
        "}]},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":%" PRId64
        ",\"candidatesTokenCount\":%" PRId64 ",\"totalTokenCount\":%" PRId64
        "},\"modelVersion\":\"%s\",\"responseId\":\"gem_demo%s\"}",
        c->req->input_tokens, c->output_tokens, c->req->input_tokens + c->output_tokens, c->req->model,
        c->id);
}

static void
gemini_count(sl_strbuf_t *b, ctx_t *c)
{
    sl_strbuf_appendf(b, "{\"totalTokens\":%" PRId64 "}", c->req->input_tokens);
}

static void
gemini_stream_overloaded(sl_strbuf_t *b, ctx_t *c)
{
    (void)c;
    sl_strbuf_appendf(
        b, "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded. Please try again "
           "later.\",\"status\":\"UNAVAILABLE\"}}");
    sse_end(b);
}

static void
gemini_error(sl_demo_answer_t *a, ctx_t *c, err_t kind, const char *message, uint32_t retry_after)
{
    static const char *const statuses[ERR_COUNT] = {"UNAVAILABLE", "RESOURCE_EXHAUSTED", "INVALID_ARGUMENT",
                                                    "UNAUTHENTICATED", "NOT_FOUND"};
    static const char *const texts[ERR_COUNT] = {"The model is overloaded. Please try again later.", NULL,
                                                 "Invalid JSON payload received.", "API key not valid.",
                                                 "The model is not found."};
    (void)c;
    sl_strbuf_appendf(&a->body, "{\"error\":{\"code\":%d,\"message\":\"", a->status);
    if (message != NULL)
        sl_strbuf_appendf(&a->body, "%s", message);
    else if (kind == ERR_RATE_LIMITED)
        sl_strbuf_appendf(&a->body, "Resource has been exhausted on the demo upstream. Please retry in %us.",
                          retry_after);
    else
        sl_strbuf_appendf(&a->body, "%s", texts[kind]);
    sl_strbuf_appendf(&a->body, "\",\"status\":\"%s\"", statuses[kind]);
    /* Gemini gives its hint in the body only. */
    if (retry_after > 0)
        sl_strbuf_appendf(&a->body,
                          ",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\","
                          "\"retryDelay\":\"%us\"}]",
                          retry_after);
    sl_strbuf_appendf(&a->body, "}}");
}

/* -- Bedrock -- */

static void
bedrock_frame(sl_strbuf_t *b, const char *event, const sl_strbuf_t *payload)
{
    const sl_es_string_header_t h[] = {
        {":event-type", event}, {":content-type", "application/json"}, {":message-type", "event"}};
    bool ok = sl_es_encode(b, h, NELEMS(h), payload->data ? payload->data : "", payload->len);
    (void)ok; /* the names and values are short constants: the encoder cannot refuse them */
}

static void
bedrock_opening(sl_strbuf_t *b, ctx_t *c)
{
    (void)c;
    sl_strbuf_t p = {0};
    sl_strbuf_appendf(&p, "{\"role\":\"assistant\"}");
    bedrock_frame(b, "messageStart", &p);
    free(p.data);
}

static void
bedrock_delta(sl_strbuf_t *b, ctx_t *c, const char *t, size_t n)
{
    (void)c;
    sl_strbuf_t p = {0};
    sl_strbuf_appendf(&p, "{\"contentBlockIndex\":0,\"delta\":{\"text\":");
    json_str(&p, t, n);
    sl_strbuf_appendf(&p, "}}");
    bedrock_frame(b, "contentBlockDelta", &p);
    free(p.data);
}

static void
bedrock_usage(sl_strbuf_t *p, ctx_t *c)
{
    sl_strbuf_appendf(p,
                      "\"usage\":{\"inputTokens\":%" PRId64 ",\"outputTokens\":%" PRId64
                      ",\"totalTokens\":%" PRId64 "},\"metrics\":{\"latencyMs\":%u}",
                      c->req->input_tokens, c->output_tokens, c->req->input_tokens + c->output_tokens,
                      c->plan->first_token_ms + (uint32_t)c->output_tokens * c->plan->token_delay_ms);
}

static void
bedrock_closing(sl_strbuf_t *b, ctx_t *c)
{
    sl_strbuf_t p = {0};
    sl_strbuf_appendf(&p, "{\"contentBlockIndex\":0}");
    bedrock_frame(b, "contentBlockStop", &p);
    p.len = 0;
    sl_strbuf_appendf(&p, "{\"stopReason\":\"end_turn\"}");
    bedrock_frame(b, "messageStop", &p);
    p.len = 0;
    sl_strbuf_appendf(&p, "{");
    bedrock_usage(&p, c);
    sl_strbuf_appendf(&p, "}");
    bedrock_frame(b, "metadata", &p);
    free(p.data);
}

static void
bedrock_whole(sl_strbuf_t *b, ctx_t *c)
{
    sl_strbuf_appendf(b, "{\"output\":{\"message\":{\"role\":\"assistant\",\"content\":[{\"text\":");
    json_str(b, c->text, c->text_len);
    sl_strbuf_appendf(b, "}]}},\"stopReason\":\"end_turn\",");
    bedrock_usage(b, c);
    sl_strbuf_appendf(b, "}");
}

static void
bedrock_count(sl_strbuf_t *b, ctx_t *c)
{
    sl_strbuf_appendf(b, "{\"inputTokens\":%" PRId64 "}", c->req->input_tokens);
}

static void
bedrock_stream_overloaded(sl_strbuf_t *b, ctx_t *c)
{
    (void)c;
    static const char payload[] = "{\"message\":\"Bedrock is unable to process your request.\"}";
    bool ok = sl_es_encode_exception(b, "serviceUnavailableException", payload, sizeof payload - 1);
    (void)ok;
}

static void
bedrock_error(sl_demo_answer_t *a, ctx_t *c, err_t kind, const char *message, uint32_t retry_after)
{
    /* PascalCase in the header, with the service suffix Bedrock sends. */
    static const char *const types[ERR_COUNT] = {"ServiceUnavailableException", "ThrottlingException",
                                                 "ValidationException", "AccessDeniedException",
                                                 "ResourceNotFoundException"};
    static const char *const texts[ERR_COUNT] = {
        "Bedrock is unable to process your request.", "Too many requests, please wait before trying again.",
        "Malformed input request, please reformat your input and try again.",
        "Authentication failed: the demo upstream key is wrong.",
        "The provided model identifier is invalid."};
    (void)c;
    if (retry_after > 0)
        sl_strbuf_appendf(&a->headers, "retry-after: %u\r\n", retry_after);
    sl_strbuf_appendf(&a->headers,
                      "x-amzn-errortype: %s:http://internal.amazon.com/coral/com.amazon.bedrock/\r\n",
                      types[kind]);
    sl_strbuf_appendf(&a->body, "{\"message\":\"%s\"}", message ? message : texts[kind]);
}

static const script_t scripts[SL_DIALECT_COUNT] = {
    [SL_DIALECT_ANTHROPIC] = {"text/event-stream; charset=utf-8", true, anthropic_opening, anthropic_first,
                              anthropic_delta, anthropic_closing, anthropic_whole, anthropic_count,
                              anthropic_stream_overloaded, anthropic_error},
    [SL_DIALECT_OPENAI_CHAT] = {"text/event-stream; charset=utf-8", true, chat_opening, no_first, chat_delta,
                                chat_closing, chat_whole, openai_count, chat_stream_overloaded, openai_error},
    [SL_DIALECT_OPENAI_RESPONSES] = {"text/event-stream; charset=utf-8", true, responses_opening,
                                     responses_first, responses_delta, responses_closing, responses_whole,
                                     openai_count, responses_stream_overloaded, openai_error},
    [SL_DIALECT_GEMINI] = {"text/event-stream; charset=utf-8", true, no_first, no_first, gemini_delta,
                           gemini_closing, gemini_whole, gemini_count, gemini_stream_overloaded,
                           gemini_error},
    [SL_DIALECT_BEDROCK] = {"application/vnd.amazon.eventstream", false, bedrock_opening, no_first,
                            bedrock_delta, bedrock_closing, bedrock_whole, bedrock_count,
                            bedrock_stream_overloaded, bedrock_error},
};

/* ---- the answer ----------------------------------------------------------------------------------- */

static const char *
reason_of(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 429:
        return "Too Many Requests";
    case 503:
        return "Service Unavailable";
    case 529:
        return "Overloaded";
    default:
        return "Error";
    }
}

/* Ends the piece that started at body offset `from` (possibly empty), to be sent delay_ms after the last. */
static void
add_piece(sl_demo_answer_t *a, size_t from, uint32_t delay_ms)
{
    a->pieces = sl_xrealloc(a->pieces, (a->n_pieces + 1) * sizeof *a->pieces);
    a->pieces[a->n_pieces++] = (sl_demo_piece_t){from, a->body.len - from, delay_ms};
}

static void
status_error(sl_demo_answer_t *a, const script_t *s, ctx_t *c, err_t kind, const char *message,
             uint32_t retry_after)
{
    a->status = err_status[kind];
    a->content_type = "application/json";
    s->error(a, c, kind, message, retry_after);
    a->reason = reason_of(a->status);
    add_piece(a, 0, 0);
}

/* The text's events: one or two words each, by the seed. *n_out events; offsets into text. */
typedef struct {
    size_t off, len;
} span_t;

static span_t *
split_events(const char *text, size_t len, uint64_t seed, size_t *n_out)
{
    span_t *ev = NULL;
    size_t n = 0;
    uint64_t s = seed;
    size_t at = 0;
    while (at < len) {
        uint32_t words = between(&s, 1, 2);
        size_t end = at;
        for (uint32_t w = 0; w < words && end < len; w++) {
            if (w > 0 || end > 0)
                end += text[end] == ' ';
            end += strcspn(text + end, " ");
        }
        ev = sl_xrealloc(ev, (n + 1) * sizeof *ev);
        ev[n++] = (span_t){at, end - at};
        at = end;
    }
    *n_out = n;
    return ev;
}

void
sl_demo_answer_build(const sl_demo_request_t *req, const sl_demo_plan_t *plan, sl_demo_answer_t *out)
{
    *out = (sl_demo_answer_t){.status = 200, .reason = "OK", .end = SL_DEMO_END_FINISH};
    const script_t *s =
        &scripts[(unsigned)req->dialect < SL_DIALECT_COUNT ? req->dialect : SL_DIALECT_ANTHROPIC];
    sl_strbuf_t text = {0};
    uint32_t words = sl_demo_text(plan->text_seed, plan->words, &text);
    ctx_t c = {.req = req,
               .plan = plan,
               .text = text.data ? text.data : "",
               .text_len = text.len,
               .output_tokens = words};
    snprintf(c.id, sizeof c.id, "%" PRIx64, req->serial);
    out->head_delay_ms = plan->head_delay_ms;

    switch (plan->outcome) {
    case SL_DEMO_CLOSE_BEFORE_HEAD:
        out->status = 0;
        out->reason = "";
        out->content_type = "";
        out->end = SL_DEMO_END_CLOSE_BEFORE_HEAD;
        goto done;
    case SL_DEMO_OVERLOADED:
        status_error(out, s, &c, ERR_OVERLOADED, NULL, 0);
        goto done;
    case SL_DEMO_RATE_LIMITED:
        status_error(out, s, &c, ERR_RATE_LIMITED, NULL, plan->retry_after_secs);
        goto done;
    default:
        break;
    }
    if (req->op == SL_DEMO_OP_COUNT_TOKENS || !plan->stream) {
        out->content_type = "application/json";
        (req->op == SL_DEMO_OP_COUNT_TOKENS ? s->count : s->whole)(&out->body, &c);
        add_piece(out, 0, 0);
        goto done;
    }

    out->content_type = s->stream_type;
    out->chunked = true;
    if (plan->outcome != SL_DEMO_STREAM_OVERLOADED || s->opening_before_error)
        s->opening(&out->body, &c);
    add_piece(out, 0, 0);
    size_t from = out->body.len;
    if (plan->outcome == SL_DEMO_STREAM_OVERLOADED) {
        s->stream_overloaded(&out->body, &c);
        add_piece(out, from, plan->first_token_ms);
        goto done;
    }
    if (plan->outcome == SL_DEMO_CUT_BEFORE_CONTENT) {
        add_piece(out, from, plan->first_token_ms);
        out->end = SL_DEMO_END_CUT;
        goto done;
    }
    size_t n_events;
    span_t *ev = split_events(c.text, c.text_len, plan->text_seed ^ 0x5EED, &n_events);
    /* A cut lands inside a text event, never in the closing events: a Chat finish_reason would make it whole.
     */
    size_t cut_at = SIZE_MAX;
    if (plan->outcome == SL_DEMO_CUT_AFTER_CONTENT && n_events >= 2)
        cut_at = plan->cut_after_events < n_events ? plan->cut_after_events : n_events - 1;
    for (size_t i = 0; i < n_events; i++) {
        from = out->body.len;
        if (i == 0)
            s->first(&out->body, &c);
        s->delta(&out->body, &c, c.text + ev[i].off, ev[i].len);
        uint32_t delay = i == 0 ? plan->first_token_ms : plan->token_delay_ms;
        if (i == cut_at) {
            /* Half an event, then the connection closes. */
            out->body.len = from + (out->body.len - from) / 2;
            add_piece(out, from, delay);
            out->end = SL_DEMO_END_CUT;
            free(ev);
            goto done;
        }
        add_piece(out, from, delay);
    }
    free(ev);
    from = out->body.len;
    s->closing(&out->body, &c);
    add_piece(out, from, n_events > 0 ? plan->token_delay_ms : plan->first_token_ms);

done:
    free(text.data);
}

void
sl_demo_answer_error(sl_dialect_t dialect, int status, const char *message, sl_demo_answer_t *out)
{
    *out = (sl_demo_answer_t){.end = SL_DEMO_END_FINISH};
    const script_t *s = &scripts[(unsigned)dialect < SL_DIALECT_COUNT ? dialect : SL_DIALECT_ANTHROPIC];
    sl_demo_request_t req = {.dialect = dialect};
    strcpy(req.model, "demo-model");
    sl_demo_plan_t plan = {0};
    ctx_t c = {.req = &req, .plan = &plan, .text = "", .id = "0"};
    err_t kind = status == 401 ? ERR_UNAUTHORIZED : status == 404 ? ERR_NOT_FOUND : ERR_BAD_REQUEST;
    status_error(out, s, &c, kind, message, 0);
}

void
sl_demo_answer_free(sl_demo_answer_t *a)
{
    free(a->headers.data);
    free(a->body.data);
    free(a->pieces);
    *a = (sl_demo_answer_t){0};
}
