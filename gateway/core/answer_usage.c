/*
 * Usage per dialect (answer_usage.h): one row per dialect says where its
 * usage object is and how its counts map onto sl_usage_t; the stream
 * classifiers and the whole-answer reader both go through it.
 */
#include <jansson.h>

#include "core/answer_usage.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* A count named by the provider that lands in one field as it is. */
typedef struct {
    const char *key;
    size_t field;
} count_key_t;

static const count_key_t anthropic_counts[] = {
    {"input_tokens", offsetof(sl_usage_t, input)},
    {"output_tokens", offsetof(sl_usage_t, output)},
    {"cache_read_input_tokens", offsetof(sl_usage_t, cache_read)},
    {"cache_creation_input_tokens", offsetof(sl_usage_t, cache_write)},
};

static const count_key_t bedrock_counts[] = {
    {"inputTokens", offsetof(sl_usage_t, input)},
    {"outputTokens", offsetof(sl_usage_t, output)},
    {"cacheReadInputTokens", offsetof(sl_usage_t, cache_read)},
    {"cacheWriteInputTokens", offsetof(sl_usage_t, cache_write)},
};

typedef struct dialect_usage dialect_usage_t;

struct dialect_usage {
    const char *member; /* the answer's top-level member holding the usage object */
    void (*take)(const dialect_usage_t *d, const json_t *u, sl_usage_t *usage);
    const count_key_t *counts; /* do_take_counts */
    size_t n_counts;
    const char *input, *output, *details; /* do_take_openai: the API's key names */
};

/* -1 when the member is absent or not a count. */
static int64_t
count_of(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? json_integer_value(v) : -1;
}

static void
do_take_counts(const dialect_usage_t *d, const json_t *u, sl_usage_t *usage)
{
    for (size_t i = 0; i < d->n_counts; i++) {
        int64_t n = count_of(u, d->counts[i].key);
        if (n >= 0)
            *(int64_t *)((char *)usage + d->counts[i].field) = n;
    }
}

static void
do_take_openai(const dialect_usage_t *d, const json_t *u, sl_usage_t *usage)
{
    sl__openai_usage(u, d->input, d->output, d->details, usage);
}

/* The rule of stream_gemini.c's take_usage, over a parsed object: keep the two in step. */
static void
do_take_gemini(const dialect_usage_t *d, const json_t *u, sl_usage_t *usage)
{
    (void)d;
    int64_t prompt = count_of(u, "promptTokenCount");
    int64_t cached = count_of(u, "cachedContentTokenCount");
    int64_t tool_prompt = count_of(u, "toolUsePromptTokenCount");
    int64_t candidates = count_of(u, "candidatesTokenCount");
    int64_t thoughts = count_of(u, "thoughtsTokenCount");
    if (prompt >= 0) {
        int64_t input = prompt + (tool_prompt > 0 ? tool_prompt : 0);
        if (cached < 0)
            cached = 0;
        if (cached > input)
            cached = input;
        usage->input = input - cached;
        usage->cache_read = cached;
    }
    if (candidates >= 0 || thoughts >= 0)
        usage->output = (candidates > 0 ? candidates : 0) + (thoughts > 0 ? thoughts : 0);
}

static const dialect_usage_t dialects[SL_DIALECT_COUNT] = {
    [SL_DIALECT_ANTHROPIC] = {"usage", do_take_counts, anthropic_counts, N(anthropic_counts)},
    [SL_DIALECT_OPENAI_CHAT] = {"usage", do_take_openai, .input = "prompt_tokens",
                                .output = "completion_tokens", .details = "prompt_tokens_details"},
    [SL_DIALECT_OPENAI_RESPONSES] = {"usage", do_take_openai, .input = "input_tokens",
                                     .output = "output_tokens", .details = "input_tokens_details"},
    [SL_DIALECT_GEMINI] = {"usageMetadata", do_take_gemini},
    [SL_DIALECT_BEDROCK] = {"usage", do_take_counts, bedrock_counts, N(bedrock_counts)},
};

void
sl_usage_from_json(sl_dialect_t dialect, const json_t *u, sl_usage_t *usage)
{
    if ((unsigned)dialect >= SL_DIALECT_COUNT || !json_is_object(u))
        return;
    dialects[dialect].take(&dialects[dialect], u, usage);
}

/* ---- the whole answer's tail ---- */

static bool
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

typedef enum { QUOTE_PLAIN, QUOTE_ESCAPED, QUOTE_UNKNOWN } quote_t;

/* Whether the quote at p is escaped: an odd run of backslashes before it. Unknown when the run
 * reaches the start of the tail, for a backslash may have been cut off before it. */
static quote_t
quote_at(const char *tail, const char *p)
{
    const char *q = p;
    while (q > tail && q[-1] == '\\')
        q--;
    if (q == tail)
        return QUOTE_UNKNOWN;
    return (p - q) % 2 ? QUOTE_ESCAPED : QUOTE_PLAIN;
}

/* close is the closing quote of a string (read backwards): returns its opening quote, or NULL when the
 * string starts before the tail, cannot be told from one that does, or the bytes are not JSON. */
static const char *
string_start(const char *tail, const char *close)
{
    if (quote_at(tail, close) != QUOTE_PLAIN)
        return NULL; /* outside a string, no quote is escaped */
    for (const char *q = close; q > tail;) {
        q--;
        if (*q != '"')
            continue;
        switch (quote_at(tail, q)) {
        case QUOTE_PLAIN:
            return q;
        case QUOTE_ESCAPED:
            break;
        case QUOTE_UNKNOWN:
            return NULL;
        }
    }
    return NULL;
}

/* Whether the object opening at open is the value of the member `"key":` (whitespace allowed around the
 * colon), the key's opening quote plainly not escaped. */
static bool
is_value_of(const char *tail, const char *open, const char *key)
{
    const char *q = open;
    while (q > tail && is_space(q[-1]))
        q--;
    if (q == tail || q[-1] != ':')
        return false;
    for (q--; q > tail && is_space(q[-1]); q--)
        ;
    size_t n = strlen(key);
    if ((size_t)(q - tail) < n + 2)
        return false;
    const char *k = q - n - 2;
    return k[0] == '"' && memcmp(k + 1, key, n) == 0 && q[-1] == '"' && quote_at(tail, k) == QUOTE_PLAIN;
}

/*
 * Reads backwards from the end of the body, where no string is open: each string is skipped whole, so
 * only structural braces are counted. Depth counts the containers entered from the end; the members
 * of the top-level object are at depth 1 (2 in an array body's objects), so a member's object value
 * spans from the `{` met at depth level + 1 to the `}` that entered that depth.
 */
static bool
find_member(const char *tail, size_t len, const char *key, const char **obj, size_t *obj_len)
{
    const char *p = tail + len;
    while (p > tail && is_space(p[-1]))
        p--;
    if (p == tail || (p[-1] != '}' && p[-1] != ']'))
        return false; /* cut, or not JSON: a whole body ends by closing its object (or array) */
    size_t level = p[-1] == '}' ? 1 : 2;
    size_t depth = 0;
    const char *close = NULL;
    while (p > tail) {
        p--;
        switch (*p) {
        case '"':
            if ((p = string_start(tail, p)) == NULL)
                return false;
            break;
        case '}':
        case ']':
            if (++depth == level + 1)
                close = p;
            break;
        case '{':
        case '[':
            if (depth == 0)
                return false; /* more opened than closed: not JSON */
            if (depth == level + 1 && *p == '{' && *close == '}' && is_value_of(tail, p, key)) {
                *obj = p;
                *obj_len = (size_t)(close - p) + 1;
                return true;
            }
            if (--depth == 0)
                return false; /* the body's own start: no such member */
            break;
        default:
            break;
        }
    }
    return false;
}

bool
sl_answer_usage(sl_dialect_t dialect, const char *tail, size_t len, sl_usage_t *out)
{
    const char *obj;
    size_t obj_len;
    if ((unsigned)dialect >= SL_DIALECT_COUNT || tail == NULL ||
        !find_member(tail, len, dialects[dialect].member, &obj, &obj_len))
        return false;
    json_t *u = json_loadb(obj, obj_len, 0, NULL);
    /* -1 marks a count not reported: the mapping only ever writes counts it read, never negative. */
    sl_usage_t got = {-1, -1, -1, -1};
    sl_usage_from_json(dialect, u, &got);
    json_decref(u);
    if (got.input < 0 && got.output < 0 && got.cache_read < 0 && got.cache_write < 0)
        return false;
    *out = (sl_usage_t){
        .input = got.input > 0 ? got.input : 0,
        .output = got.output > 0 ? got.output : 0,
        .cache_read = got.cache_read > 0 ? got.cache_read : 0,
        .cache_write = got.cache_write > 0 ? got.cache_write : 0,
    };
    return true;
}
