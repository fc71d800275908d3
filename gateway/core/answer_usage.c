/*
 * Usage per dialect (answer_usage.h): one row per dialect says where its
 * usage object is, which counts it reads and the one rule that maps them
 * onto sl_usage_t. The counts are extracted either from a parsed object (the
 * stream classifiers that parse their events) or by a walk over its bytes
 * (whole answers, Gemini chunks), and both feed the same rule.
 */
#include <jansson.h>

#include "core/answer_usage.h"
#include "core/jwalk.h"

/* The most counts a dialect reads. */
#define MAX_COUNTS 5

/* A count: the member key of the usage object, or (sub not NULL) the member sub of the object at key. */
typedef struct {
    const char *key, *sub;
} count_at_t;

/* Where each rule finds its counts in its row's list. */
enum { DIRECT_INPUT, DIRECT_OUTPUT, DIRECT_CACHE_READ, DIRECT_CACHE_WRITE };
enum { OPENAI_INPUT, OPENAI_OUTPUT, OPENAI_CACHED };
enum { GEMINI_PROMPT, GEMINI_CACHED, GEMINI_TOOL_PROMPT, GEMINI_CANDIDATES, GEMINI_THOUGHTS };

typedef struct {
    const char *member;            /* the answer's top-level member holding the usage object */
    count_at_t counts[MAX_COUNTS]; /* key NULL past the last */
    /* c[i] is counts[i] read, -1 when absent or not a count. Writes only the fields the counts report. */
    void (*rule)(const int64_t *c, sl_usage_t *usage);
} dialect_usage_t;

/* Input already excludes the cache: each count lands in its field as it is. */
static void
do_direct(const int64_t *c, sl_usage_t *usage)
{
    if (c[DIRECT_INPUT] >= 0)
        usage->input = c[DIRECT_INPUT];
    if (c[DIRECT_OUTPUT] >= 0)
        usage->output = c[DIRECT_OUTPUT];
    if (c[DIRECT_CACHE_READ] >= 0)
        usage->cache_read = c[DIRECT_CACHE_READ];
    if (c[DIRECT_CACHE_WRITE] >= 0)
        usage->cache_write = c[DIRECT_CACHE_WRITE];
}

/* The input includes the cached part; without an input count the cached one means nothing. */
static void
do_openai(const int64_t *c, sl_usage_t *usage)
{
    if (c[OPENAI_INPUT] >= 0) {
        int64_t cached = c[OPENAI_CACHED] > 0 ? c[OPENAI_CACHED] : 0;
        if (cached > c[OPENAI_INPUT])
            cached = c[OPENAI_INPUT];
        usage->input = c[OPENAI_INPUT] - cached;
        usage->cache_read = cached;
    }
    if (c[OPENAI_OUTPUT] >= 0)
        usage->output = c[OPENAI_OUTPUT];
}

/*
 * promptTokenCount includes the cached part; thoughts and tool-use prompts
 * are billed like output and input but counted apart (totalTokenCount is
 * the sum of prompt, candidates, thoughts and tool-use prompt). Each
 * usageMetadata is a whole snapshot: a count it leaves out is zero, except
 * that a snapshot without a prompt or output count says nothing about that
 * side.
 */
static void
do_gemini(const int64_t *c, sl_usage_t *usage)
{
    if (c[GEMINI_PROMPT] >= 0) {
        int64_t input = c[GEMINI_PROMPT] + (c[GEMINI_TOOL_PROMPT] > 0 ? c[GEMINI_TOOL_PROMPT] : 0);
        int64_t cached = c[GEMINI_CACHED] > 0 ? c[GEMINI_CACHED] : 0;
        if (cached > input)
            cached = input;
        usage->input = input - cached;
        usage->cache_read = cached;
    }
    if (c[GEMINI_CANDIDATES] >= 0 || c[GEMINI_THOUGHTS] >= 0)
        usage->output = (c[GEMINI_CANDIDATES] > 0 ? c[GEMINI_CANDIDATES] : 0) +
                        (c[GEMINI_THOUGHTS] > 0 ? c[GEMINI_THOUGHTS] : 0);
}

static const dialect_usage_t dialects[SL_DIALECT_COUNT] = {
    [SL_DIALECT_ANTHROPIC] = {"usage",
                              {[DIRECT_INPUT] = {"input_tokens", NULL},
                               [DIRECT_OUTPUT] = {"output_tokens", NULL},
                               [DIRECT_CACHE_READ] = {"cache_read_input_tokens", NULL},
                               [DIRECT_CACHE_WRITE] = {"cache_creation_input_tokens", NULL}},
                              do_direct},
    [SL_DIALECT_OPENAI_CHAT] = {"usage",
                                {[OPENAI_INPUT] = {"prompt_tokens", NULL},
                                 [OPENAI_OUTPUT] = {"completion_tokens", NULL},
                                 [OPENAI_CACHED] = {"prompt_tokens_details", "cached_tokens"}},
                                do_openai},
    [SL_DIALECT_OPENAI_RESPONSES] = {"usage",
                                     {[OPENAI_INPUT] = {"input_tokens", NULL},
                                      [OPENAI_OUTPUT] = {"output_tokens", NULL},
                                      [OPENAI_CACHED] = {"input_tokens_details", "cached_tokens"}},
                                     do_openai},
    [SL_DIALECT_GEMINI] = {"usageMetadata",
                           {[GEMINI_PROMPT] = {"promptTokenCount", NULL},
                            [GEMINI_CACHED] = {"cachedContentTokenCount", NULL},
                            [GEMINI_TOOL_PROMPT] = {"toolUsePromptTokenCount", NULL},
                            [GEMINI_CANDIDATES] = {"candidatesTokenCount", NULL},
                            [GEMINI_THOUGHTS] = {"thoughtsTokenCount", NULL}},
                           do_gemini},
    [SL_DIALECT_BEDROCK] = {"usage",
                            {[DIRECT_INPUT] = {"inputTokens", NULL},
                             [DIRECT_OUTPUT] = {"outputTokens", NULL},
                             [DIRECT_CACHE_READ] = {"cacheReadInputTokens", NULL},
                             [DIRECT_CACHE_WRITE] = {"cacheWriteInputTokens", NULL}},
                            do_direct},
};

/* ---- the counts from a parsed object ---- */

void
sl_usage_from_json(sl_dialect_t dialect, const json_t *u, sl_usage_t *usage)
{
    if ((unsigned)dialect >= SL_DIALECT_COUNT || !json_is_object(u))
        return;
    const dialect_usage_t *d = &dialects[dialect];
    int64_t c[MAX_COUNTS];
    for (size_t i = 0; i < MAX_COUNTS; i++) {
        c[i] = -1;
        if (d->counts[i].key == NULL)
            continue;
        /* json_object_get of a NULL or non-object is NULL: an absent count. */
        const json_t *v = json_object_get(u, d->counts[i].key);
        if (d->counts[i].sub != NULL)
            v = json_object_get(v, d->counts[i].sub);
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            c[i] = json_integer_value(v);
    }
    d->rule(c, usage);
}

/* ---- the counts from an object's bytes ---- */

/* The member sub of the object v, as a count; -1 when v is not an object or has no such count. The
 * last of a duplicated key wins, as in jansson. False when the walk goes bad. */
static bool
sub_count(sl_jval_t v, const char *sub, int64_t *n)
{
    sl_jwalk_t w;
    sl_jval_t key, value;
    *n = -1;
    if (!sl_jwalk_open(v, '{', &w))
        return true;
    while (sl_jwalk_next(&w, &key, &value)) {
        if (sl_jval_is(key, sub))
            *n = sl_jval_count(value);
    }
    return !w.bad;
}

bool
sl_usage_from_span(sl_dialect_t dialect, const char *obj, size_t len, sl_usage_t *usage)
{
    if ((unsigned)dialect >= SL_DIALECT_COUNT || obj == NULL)
        return false;
    const dialect_usage_t *d = &dialects[dialect];
    int64_t c[MAX_COUNTS] = {-1, -1, -1, -1, -1};
    sl_jwalk_t w;
    sl_jval_t key, value;
    if (!sl_jwalk_open((sl_jval_t){obj, obj + len}, '{', &w))
        return false;
    while (sl_jwalk_next(&w, &key, &value)) {
        /* Every member is matched against every count, so the last of a duplicated key wins. */
        for (size_t i = 0; i < MAX_COUNTS && d->counts[i].key != NULL; i++) {
            if (!sl_jval_is(key, d->counts[i].key))
                continue;
            if (d->counts[i].sub == NULL)
                c[i] = sl_jval_count(value);
            else if (!sub_count(value, d->counts[i].sub, &c[i]))
                return false;
        }
    }
    /* Past the closing brace only whitespace: one object, whole. */
    if (w.bad || sl_jval_skip_space(w.p, w.end) != w.end)
        return false;
    d->rule(c, usage);
    return true;
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
    /* -1 marks a count not reported: the rule only ever writes counts it read, never negative. */
    sl_usage_t got = {-1, -1, -1, -1};
    if (!sl_usage_from_span(dialect, obj, obj_len, &got))
        return false;
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

/* The key of a whole answer's finish reason, per dialect: the one member near its end that says it. */
static const char *const finish_keys[SL_DIALECT_COUNT] = {
    [SL_DIALECT_ANTHROPIC] = "stop_reason",
    [SL_DIALECT_OPENAI_CHAT] = "finish_reason",
    [SL_DIALECT_GEMINI] = "finishReason",
    [SL_DIALECT_BEDROCK] = "stopReason",
};

bool
sl_answer_finish_reason(sl_dialect_t dialect, const char *tail, size_t len, char out[SL_FINISH_REASON_MAX])
{
    const char *key = (unsigned)dialect < SL_DIALECT_COUNT ? finish_keys[dialect] : NULL;
    if (key == NULL || tail == NULL)
        return false;
    size_t n = strlen(key);
    for (const char *k = tail + len; k-- > tail;) {
        /* `"key"` whose quotes are plain (an escaped one is text inside a string), then `: "value"`. */
        if (*k != '"' || (size_t)(tail + len - k) < n + 2 || k[n + 1] != '"' || memcmp(k + 1, key, n) != 0 ||
            quote_at(tail, k) != QUOTE_PLAIN)
            continue;
        const char *end = tail + len, *v = k + n + 2;
        while (v < end && is_space(*v))
            v++;
        if (v == end || *v++ != ':')
            continue;
        while (v < end && is_space(*v))
            v++;
        if (v == end || *v != '"')
            return false; /* null: no reason */
        const char *close = memchr(v + 1, '"', (size_t)(end - v - 1));
        return close != NULL && sl__finish_reason_copy(out, v + 1, (size_t)(close - v - 1));
    }
    return false;
}
