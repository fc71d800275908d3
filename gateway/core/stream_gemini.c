/*
 * Gemini streamGenerateContent?alt=sse streams (formats.md): unnamed
 * `data: <GenerateContentResponse>` chunks, no end marker, and every chunk
 * carries running usageMetadata. A jansson parse per chunk would be a parse
 * per token, so both phases decide with one bounded walk over the chunk's
 * members (strings skipped with their escapes, no allocation, no recursion);
 * only an error object is parsed.
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

#include "core/stream_class.h"

/* A JSON value's bytes, [p, end). */
typedef struct {
    const char *p, *end;
} span_t;

/* A walk over the members of an object or the elements of an array. */
typedef struct {
    const char *p, *end;
    char close; /* '}' or ']' */
    bool first; /* nothing read yet: no comma expected */
    bool bad;   /* stopped at bytes that are not JSON (or ran out of them) */
} walk_t;

static const char *
skip_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* p at an opening quote: returns just past the closing one, or NULL when the string is cut. */
static const char *
skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\') {
            if (++p == end)
                return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

static bool
is_scalar_byte(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
           c == '+' || c == '.';
}

/*
 * Returns the end of the value starting at p, or NULL when there is none or
 * it is cut. Containers are matched by depth only: a hint for the walk, not
 * a validation, which is all a classification needs.
 */
static const char *
skip_value(const char *p, const char *end)
{
    if (p >= end)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        size_t depth = 0;
        while (p < end) {
            if (*p == '"') {
                if ((p = skip_string(p, end)) == NULL)
                    return NULL;
                continue;
            }
            if (*p == '{' || *p == '[')
                depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0)
                return p + 1;
            p++;
        }
        return NULL;
    }
    const char *q = p;
    while (q < end && is_scalar_byte(*q))
        q++;
    return q > p ? q : NULL;
}

/* Starts a walk over the container v when it opens with `open`; false when it does not. */
static bool
walk_open(span_t v, char open, walk_t *w)
{
    const char *p = skip_space(v.p, v.end);
    if (p >= v.end || *p != open)
        return false;
    *w = (walk_t){.p = p + 1, .end = v.end, .close = open == '{' ? '}' : ']', .first = true};
    return true;
}

/*
 * The next member (key: the raw bytes between its quotes; pass NULL for an
 * array) or element. False at the container's end, or with w->bad set when
 * the bytes stop being JSON.
 */
static bool
walk_next(walk_t *w, span_t *key, span_t *value)
{
    const char *p = skip_space(w->p, w->end);
    if (p < w->end && *p == w->close) {
        w->p = p + 1;
        return false;
    }
    if (!w->first) {
        if (p >= w->end || *p != ',')
            goto bad;
        p = skip_space(p + 1, w->end);
    }
    if (key != NULL) {
        const char *k = p;
        if (p >= w->end || *p != '"' || (p = skip_string(p, w->end)) == NULL)
            goto bad;
        *key = (span_t){k + 1, p - 1};
        p = skip_space(p, w->end);
        if (p >= w->end || *p != ':')
            goto bad;
        p = skip_space(p + 1, w->end);
    }
    const char *v_end = skip_value(p, w->end);
    if (v_end == NULL)
        goto bad;
    *value = (span_t){p, v_end};
    w->p = v_end;
    w->first = false;
    return true;
bad:
    w->bad = true;
    return false;
}

static bool
span_is(span_t s, const char *lit)
{
    size_t n = strlen(lit);
    return (size_t)(s.end - s.p) == n && memcmp(s.p, lit, n) == 0;
}

/* null, false, "", [] and {}: what an opening chunk may hold in a part. */
static bool
is_empty_value(span_t v)
{
    if (span_is(v, "null") || span_is(v, "false") || span_is(v, "\"\""))
        return true;
    if (*v.p != '[' && *v.p != '{')
        return false;
    return skip_space(v.p + 1, v.end) == v.end - 1;
}

/* A token count: plain digits that fit int64 comfortably; -1 for anything else. */
static int64_t
count_of(span_t v)
{
    size_t n = (size_t)(v.end - v.p);
    if (n == 0 || n > 18)
        return -1;
    int64_t x = 0;
    for (const char *p = v.p; p < v.end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        x = x * 10 + (*p - '0');
    }
    return x;
}

/* What the walk found in one chunk. */
typedef struct {
    span_t error;  /* the top-level error value when not null; p NULL otherwise */
    bool has_part; /* a candidate part with something in it */
    bool finished; /* a finishReason or a blockReason */
    bool unknown;  /* a top-level member that may carry an answer the gateway cannot judge */
    bool bad;      /* not a JSON object, or it stops being one */
} chunk_t;

enum { U_PROMPT, U_CACHED, U_TOOL_PROMPT, U_CANDIDATES, U_THOUGHTS, U_COUNT };

/*
 * promptTokenCount includes the cached part; thoughts and tool-use prompts
 * are billed like output and input but counted apart (totalTokenCount is
 * the sum of prompt, candidates, thoughts and tool-use prompt).
 */
static const struct {
    const char *key;
    int slot;
} usage_keys[] = {
    {"promptTokenCount", U_PROMPT},
    {"cachedContentTokenCount", U_CACHED},
    {"toolUsePromptTokenCount", U_TOOL_PROMPT},
    {"candidatesTokenCount", U_CANDIDATES},
    {"thoughtsTokenCount", U_THOUGHTS},
};

/* Each usageMetadata is a whole snapshot: a count it leaves out is zero, except
 * that a snapshot without a prompt or output count says nothing about that side. */
static void
take_usage(span_t v, sl_usage_t *usage)
{
    int64_t c[U_COUNT] = {-1, -1, -1, -1, -1};
    walk_t w;
    span_t key, value;
    if (!walk_open(v, '{', &w))
        return;
    while (walk_next(&w, &key, &value)) {
        for (size_t i = 0; i < sizeof usage_keys / sizeof usage_keys[0]; i++) {
            if (span_is(key, usage_keys[i].key))
                c[usage_keys[i].slot] = count_of(value);
        }
    }
    if (c[U_PROMPT] >= 0) {
        int64_t input = c[U_PROMPT] + (c[U_TOOL_PROMPT] > 0 ? c[U_TOOL_PROMPT] : 0);
        int64_t cached = c[U_CACHED] > 0 ? c[U_CACHED] : 0;
        if (cached > input)
            cached = input;
        usage->input = input - cached;
        usage->cache_read = cached;
    }
    if (c[U_CANDIDATES] >= 0 || c[U_THOUGHTS] >= 0)
        usage->output = (c[U_CANDIDATES] > 0 ? c[U_CANDIDATES] : 0) + (c[U_THOUGHTS] > 0 ? c[U_THOUGHTS] : 0);
}

static bool
parts_have_content(span_t parts)
{
    walk_t w, pw;
    span_t part, key, value;
    if (!walk_open(parts, '[', &w))
        return false;
    while (walk_next(&w, NULL, &part)) {
        if (!walk_open(part, '{', &pw))
            return true; /* a part that is not an object: not understood */
        while (walk_next(&pw, &key, &value)) {
            if (!is_empty_value(value))
                return true;
        }
    }
    return false;
}

/* One candidate: whether it is over, and (when the phase still tells opening from content) its parts. */
static void
read_candidate(span_t cand, bool look_at_parts, chunk_t *c)
{
    walk_t w, cw;
    span_t key, value, ckey, cvalue;
    if (!walk_open(cand, '{', &w))
        return;
    while (walk_next(&w, &key, &value)) {
        if (span_is(key, "finishReason")) {
            c->finished = c->finished || !span_is(value, "null");
        } else if (look_at_parts && !c->has_part && span_is(key, "content") && walk_open(value, '{', &cw)) {
            while (walk_next(&cw, &ckey, &cvalue)) {
                if (span_is(ckey, "parts") && parts_have_content(cvalue))
                    c->has_part = true;
            }
        }
    }
}

static void
read_feedback(span_t v, chunk_t *c)
{
    walk_t w;
    span_t key, value;
    if (!walk_open(v, '{', &w))
        return;
    while (walk_next(&w, &key, &value)) {
        if (span_is(key, "blockReason") && !span_is(value, "null"))
            c->finished = true;
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
role_of(span_t key)
{
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++) {
        if (span_is(key, members[i].key))
            return members[i].role;
    }
    return M_UNKNOWN;
}

static void
read_chunk(span_t data, bool look_at_parts, chunk_t *c, sl_usage_t *usage)
{
    *c = (chunk_t){.bad = true};
    walk_t w, cw;
    span_t key, value, cand;
    if (!walk_open(data, '{', &w))
        return;
    while (walk_next(&w, &key, &value)) {
        switch (role_of(key)) {
        case M_UNKNOWN:
            c->unknown = c->unknown || !span_is(value, "null");
            break;
        case M_ERROR:
            if (!span_is(value, "null"))
                c->error = value;
            break;
        case M_USAGE:
            take_usage(value, usage);
            break;
        case M_CANDIDATES:
            if (walk_open(value, '[', &cw)) {
                while (walk_next(&cw, NULL, &cand))
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
read_error(span_t v, sl_stream_verdict_t *out)
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
    read_chunk((span_t){ev->data, ev->data + ev->data_len}, held, &c, &seen);
    if (c.error.p != NULL) {
        read_error(c.error, out);
        return;
    }
    if (c.bad)
        return;
    *usage = seen;
    out->finished = c.finished;
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
    const char *p = skip_space(buf, end);
    walk_t w;
    span_t key, value;
    if (!walk_open((span_t){p, end}, '{', &w))
        return SL_GEMINI_BARE_NONE;
    const char *obj_end = skip_value(p, end);
    if (obj_end == NULL)
        return len < SL_GEMINI_BARE_MAX ? SL_GEMINI_BARE_MORE : SL_GEMINI_BARE_NONE;
    /* The object is whole, so the walk ends at its closing brace. */
    while (walk_next(&w, &key, &value)) {
        if (span_is(key, "error") && !span_is(value, "null")) {
            read_error(value, out);
            *taken = (size_t)(obj_end - buf);
            return SL_GEMINI_BARE_ERROR;
        }
    }
    return SL_GEMINI_BARE_NONE;
}
