/*
 * Gemini streamGenerateContent?alt=sse streams (formats.md): unnamed
 * `data: <GenerateContentResponse>` chunks, no end marker, and every chunk
 * carries running usageMetadata. A jansson parse per chunk would be a parse
 * per token, so both phases decide with one bounded walk over the chunk's
 * members (jwalk.h: strings skipped with their escapes, no allocation, no
 * recursion); only an error object is parsed. usageMetadata goes through
 * sl_usage_from_span, the rule whole answers are read by.
 *
 * What a chunk is:
 *   - error: a top-level "error" that is not null;
 *   - content: a candidate with a non-empty part, or anything that says the
 *     answer is over (below), or a top-level member the gateway does not know
 *     (never hold what is not understood), or data that is not a JSON object;
 *   - opening: the rest, i.e. chunks with only usageMetadata, modelVersion,
 *     responseId, createTime, empty candidates (no parts, or parts that are
 *     all empty: {} or {"text":""}), or promptFeedback without a blockReason.
 *
 * Completeness: Gemini has no end marker, so the answer is whole once a
 * candidate carries a non-null finishReason (STOP, MAX_TOKENS, SAFETY, …) or
 * promptFeedback a blockReason (the prompt was refused: no candidate
 * follows). A stream that closes before either was cut short.
 *
 * Some servers send an error after earlier chunks as bare JSON, without
 * `data:` and often without the blank line: the SSE scanner cannot frame it,
 * so the shell asks sl_gemini_bare_error first (see there).
 */
#include <jansson.h>

#include "core/answer_usage.h"
#include "core/jwalk.h"
#include "core/stream_class.h"

/* null, false, "", [] and {}: what an opening chunk may hold in a part. */
static bool
is_empty_value(sl_jval_t v)
{
    if (sl_jval_is(v, "null") || sl_jval_is(v, "false") || sl_jval_is(v, "\"\""))
        return true;
    if (*v.p != '[' && *v.p != '{')
        return false;
    return sl_jval_skip_space(v.p + 1, v.end) == v.end - 1;
}

/* What the walk found in one chunk. */
typedef struct {
    sl_jval_t error;  /* the top-level error value when not null; p NULL otherwise */
    bool has_part;    /* a candidate part with something in it */
    bool finished;    /* a finishReason or a blockReason */
    sl_jval_t reason; /* the first finishReason or blockReason string (quotes included); p NULL: none */
    bool unknown;     /* a top-level member that may carry an answer the gateway cannot judge */
    bool bad;         /* not a JSON object, or it stops being one */
} chunk_t;

static bool
parts_have_content(sl_jval_t parts)
{
    sl_jwalk_t w, pw;
    sl_jval_t part, key, value;
    if (!sl_jwalk_open(parts, '[', &w))
        return false;
    while (sl_jwalk_next(&w, NULL, &part)) {
        if (!sl_jwalk_open(part, '{', &pw))
            return true; /* a part that is not an object: not understood */
        while (sl_jwalk_next(&pw, &key, &value)) {
            if (!is_empty_value(value))
                return true;
        }
    }
    return false;
}

/* One candidate: whether it is over, and (when the phase still tells opening from content) its parts. */
static void
read_candidate(sl_jval_t cand, bool look_at_parts, chunk_t *c)
{
    sl_jwalk_t w, cw;
    sl_jval_t key, value, ckey, cvalue;
    if (!sl_jwalk_open(cand, '{', &w))
        return;
    while (sl_jwalk_next(&w, &key, &value)) {
        if (sl_jval_is(key, "finishReason")) {
            c->finished = c->finished || !sl_jval_is(value, "null");
            if (c->reason.p == NULL && *value.p == '"')
                c->reason = value;
        } else if (look_at_parts && !c->has_part && sl_jval_is(key, "content") &&
                   sl_jwalk_open(value, '{', &cw)) {
            while (sl_jwalk_next(&cw, &ckey, &cvalue)) {
                if (sl_jval_is(ckey, "parts") && parts_have_content(cvalue))
                    c->has_part = true;
            }
        }
    }
}

static void
read_feedback(sl_jval_t v, chunk_t *c)
{
    sl_jwalk_t w;
    sl_jval_t key, value;
    if (!sl_jwalk_open(v, '{', &w))
        return;
    while (sl_jwalk_next(&w, &key, &value)) {
        if (sl_jval_is(key, "blockReason") && !sl_jval_is(value, "null")) {
            c->finished = true;
            if (c->reason.p == NULL && *value.p == '"')
                c->reason = value;
        }
    }
}

typedef enum { M_UNKNOWN, M_ERROR, M_USAGE, M_CANDIDATES, M_FEEDBACK, M_QUIET } member_t;

/* The top-level members an opening chunk may hold; any other that is not null counts as content. */
static const struct {
    const char *key;
    member_t role;
} members[] = {
    {"error", M_ERROR},           {"usageMetadata", M_USAGE},
    {"candidates", M_CANDIDATES}, {"promptFeedback", M_FEEDBACK},
    {"modelVersion", M_QUIET},    {"responseId", M_QUIET},
    {"createTime", M_QUIET},
};

static member_t
role_of(sl_jval_t key)
{
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++) {
        if (sl_jval_is(key, members[i].key))
            return members[i].role;
    }
    return M_UNKNOWN;
}

static void
read_chunk(sl_jval_t data, bool look_at_parts, chunk_t *c, sl_usage_t *usage)
{
    *c = (chunk_t){.bad = true};
    sl_jwalk_t w, cw;
    sl_jval_t key, value, cand;
    if (!sl_jwalk_open(data, '{', &w))
        return;
    while (sl_jwalk_next(&w, &key, &value)) {
        switch (role_of(key)) {
        case M_UNKNOWN:
            c->unknown = c->unknown || !sl_jval_is(value, "null");
            break;
        case M_ERROR:
            if (!sl_jval_is(value, "null"))
                c->error = value;
            break;
        case M_USAGE:
            sl_usage_from_span(SL_DIALECT_GEMINI, value.p, (size_t)(value.end - value.p), usage);
            break;
        case M_CANDIDATES:
            if (sl_jwalk_open(value, '[', &cw)) {
                while (sl_jwalk_next(&cw, NULL, &cand))
                    read_candidate(cand, look_at_parts, c);
            }
            break;
        case M_FEEDBACK:
            read_feedback(value, c);
            break;
        case M_QUIET:
            break;
        }
    }
    c->bad = w.bad;
}

/* google.rpc.Status: {"code":503,"message":"…","status":"UNAVAILABLE","details":[…]}, or a bare string. */
static void
read_error(sl_jval_t v, sl_stream_verdict_t *out)
{
    json_t *err = json_loadb(v.p, (size_t)(v.end - v.p), JSON_DECODE_ANY, NULL);
    const json_t *code = json_object_get(err, "code");
    const char *message =
        json_is_string(err) ? json_string_value(err) : json_string_value(json_object_get(err, "message"));
    sl__stream_error(out, json_string_value(json_object_get(err, "status")), message,
                     json_is_integer(code) ? json_integer_value(code) : 0);
    json_decref(err);
}

static void
do_classify(sl_stream_phase_t phase, const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    *out = (sl_stream_verdict_t){.kind = SL_STREAM_CONTENT};
    if (ev->data == NULL) {
        /* a named event without data: the SDK dispatches nothing for it either */
        out->kind = SL_STREAM_IGNORE;
        return;
    }
    bool held = phase == SL_STREAM_HELD;
    chunk_t c;
    /* Counts and the finish are kept only from a chunk that is all JSON and no error: the SDK
     * would not read the others either. The counts go to a copy until that is known. */
    sl_usage_t seen = *usage;
    read_chunk((sl_jval_t){ev->data, ev->data + ev->data_len}, held, &c, &seen);
    if (c.error.p != NULL) {
        read_error(c.error, out);
        return;
    }
    if (c.bad)
        return;
    *usage = seen;
    out->finished = c.finished;
    if (c.reason.p != NULL && c.reason.end - c.reason.p >= 2)
        sl__stream_finish_reason(out, c.reason.p + 1, (size_t)(c.reason.end - c.reason.p - 2));
    if (held && !c.unknown && !c.has_part && !c.finished)
        out->kind = SL_STREAM_OPENING;
}

const sl_stream_class_vtable_t sl__stream_gemini = {
    .dialect = SL_DIALECT_GEMINI,
    /* No end marker: the chunk with the finishReason is content and finishes. */
    .end_is_content = true,
    .classify = do_classify,
};

sl_gemini_bare_t
sl_gemini_bare_error(const char *buf, size_t len, size_t *taken, sl_stream_verdict_t *out)
{
    const char *end = buf + len;
    const char *p = sl_jval_skip_space(buf, end);
    sl_jwalk_t w;
    sl_jval_t key, value;
    if (!sl_jwalk_open((sl_jval_t){p, end}, '{', &w))
        return SL_GEMINI_BARE_NONE;
    const char *obj_end = sl_jval_skip_value(p, end);
    if (obj_end == NULL)
        return len < SL_GEMINI_BARE_MAX ? SL_GEMINI_BARE_MORE : SL_GEMINI_BARE_NONE;
    /* The object is whole, so the walk ends at its closing brace. */
    while (sl_jwalk_next(&w, &key, &value)) {
        if (sl_jval_is(key, "error") && !sl_jval_is(value, "null")) {
            read_error(value, out);
            *taken = (size_t)(obj_end - buf);
            return SL_GEMINI_BARE_ERROR;
        }
    }
    return SL_GEMINI_BARE_NONE;
}
