#include "classify.h"

#include <assert.h>
#include <ctype.h>
#include <string.h>

#define BIT(cls) (1u << (cls))

/* Word flags. Default: case-sensitive, and a whole token (not inside a longer [A-Za-z0-9_] run). */
enum {
    FOLD = 1u << 0,  /* ASCII case-insensitive: providers vary the case (Bedrock) or it is prose */
    INNER = 1u << 1, /* may sit inside a longer token (Gemini quota ids) */
};

typedef struct {
    const char *text;
    size_t len;
    unsigned flags;
    sl_failure_class_t cls;
    unsigned dialects; /* bit per sl_dialect_t where the word counts; 0 = every dialect */
} word_t;

#define W(text, flags, cls, dialects)                                                                        \
    {                                                                                                        \
        text, sizeof(text) - 1, flags, SL_FAILURE_##cls, dialects                                            \
    }
#define GEMINI_ONLY  (1u << SL_DIALECT_GEMINI)
#define BEDROCK_ONLY (1u << SL_DIALECT_BEDROCK)

/*
 * The words of formats.md's classification, plus the real-world shapes that
 * would otherwise land in the wrong step: OpenAI answers a bad key with a 401
 * typed invalid_request_error (code invalid_api_key), Gemini with a 400
 * INVALID_ARGUMENT whose reason is API_KEY_INVALID; Gemini's per-minute and
 * per-day 429s share their prose ("You exceeded your current quota, please
 * check your plan and billing details") and differ only in the quota id, so
 * that prose is not a quota word, and neither is a bare "billing" (OpenAI
 * rate-limit messages link to the billing page). "per day" counts for Gemini
 * only: OpenAI's requests-per-day limits are rate limits with a short hint.
 * A context-length error is a request error in each dialect's own wording
 * (the fixtures): OpenAI's code (and the prose OpenAI-compatible servers
 * send without it), Anthropic's "prompt is too long", Gemini's "input token
 * count ... exceeds", Bedrock's "Input is too long" / "Too many input tokens".
 */
static const word_t words[] = {
    W("insufficient_quota", 0, QUOTA, 0),
    W("usage_limit_reached", 0, QUOTA, 0),
    W("billing_hard_limit_reached", 0, QUOTA, 0),
    W("PerDay", INNER, QUOTA, 0),
    W("per day", FOLD, QUOTA, GEMINI_ONLY),
    W("credit balance is too low", FOLD, NO_BALANCE, 0),
    W("insufficient_balance", FOLD, NO_BALANCE, 0),
    W("insufficient balance", FOLD, NO_BALANCE, 0),
    W("insufficient_credits", FOLD, NO_BALANCE, 0),
    W("insufficient credits", FOLD, NO_BALANCE, 0),
    W("billing_not_active", 0, NO_BALANCE, 0),
    W("enable billing", FOLD, NO_BALANCE, 0),
    W("rate_limit_error", 0, RATE_LIMITED, 0),
    W("rate_limit_exceeded", 0, RATE_LIMITED, 0),
    W("RESOURCE_EXHAUSTED", 0, RATE_LIMITED, 0),
    W("throttlingException", FOLD, RATE_LIMITED, 0),
    W("authentication_error", 0, AUTH, 0),
    W("permission_error", 0, AUTH, 0),
    W("invalid_api_key", 0, AUTH, 0),
    W("UNAUTHENTICATED", 0, AUTH, 0),
    W("PERMISSION_DENIED", 0, AUTH, 0),
    W("API_KEY_INVALID", 0, AUTH, 0),
    W("accessDeniedException", FOLD, AUTH, 0),
    W("unrecognizedClientException", FOLD, AUTH, 0),
    W("not_found_error", 0, MISSING_MODEL, 0),
    W("model_not_found", 0, MISSING_MODEL, 0),
    W("NOT_FOUND", 0, MISSING_MODEL, 0),
    W("resourceNotFoundException", FOLD, MISSING_MODEL, 0),
    W("context_length_exceeded", 0, CONTEXT_LENGTH, 0),
    W("prompt is too long", FOLD, CONTEXT_LENGTH, 0),
    W("maximum context length", FOLD, CONTEXT_LENGTH, 0),
    W("input token count", FOLD, CONTEXT_LENGTH, GEMINI_ONLY),
    W("input is too long", FOLD, CONTEXT_LENGTH, BEDROCK_ONLY),
    W("too many input tokens", FOLD, CONTEXT_LENGTH, BEDROCK_ONLY),
    W("invalid_request_error", 0, REQUEST_ERROR, 0),
    W("invalid_request", 0, REQUEST_ERROR, 0),
    W("request_too_large", 0, REQUEST_ERROR, 0),
    W("invalid_prompt", 0, REQUEST_ERROR, 0),
    W("invalid_encrypted_content", 0, REQUEST_ERROR, 0),
    W("INVALID_ARGUMENT", 0, REQUEST_ERROR, 0),
    W("validationException", FOLD, REQUEST_ERROR, 0),
    W("server_error", 0, TEMPORARY, 0),
    W("api_error", 0, TEMPORARY, 0),
    W("overloaded_error", 0, TEMPORARY, 0),
    W("server_is_overloaded", 0, TEMPORARY, 0),
    W("slow_down", 0, TEMPORARY, 0),
    W("UNAVAILABLE", 0, TEMPORARY, 0),
    W("INTERNAL", 0, TEMPORARY, 0),
    W("serviceUnavailableException", FOLD, TEMPORARY, 0),
    W("internalServerException", FOLD, TEMPORARY, 0),
};

/* Statuses (HTTP, or an in-stream numeric code) that decide a class on their own. */
static const struct {
    int status;
    sl_failure_class_t cls;
} statuses[] = {
    {402, SL_FAILURE_NO_BALANCE}, {429, SL_FAILURE_RATE_LIMITED},  {401, SL_FAILURE_AUTH},
    {403, SL_FAILURE_AUTH},       {404, SL_FAILURE_MISSING_MODEL}, {500, SL_FAILURE_TEMPORARY},
    {502, SL_FAILURE_TEMPORARY},  {503, SL_FAILURE_TEMPORARY},     {504, SL_FAILURE_TEMPORARY},
    {529, SL_FAILURE_TEMPORARY},
};

/* Gemini's in-stream numeric codes: any 5xx but 501 is temporary (formats.md, Gemini). */
static const bool instream_any_5xx[SL_DIALECT_COUNT] = {[SL_DIALECT_GEMINI] = true};

/*
 * Per source: the message code, whether the answer (status, body, code) is
 * read, and the class when it is not read or nothing in it matched.
 */
static const struct {
    sl_code_t code;
    bool reads_answer;
    sl_failure_class_t fallback;
} sources[SL_FAILURE_SOURCE_COUNT] = {
    [SL_FAILURE_STATUS] = {SL_CODE_GW_UPSTREAM_STATUS, true, SL_FAILURE_OTHER},
    [SL_FAILURE_STREAM_ERROR] = {SL_CODE_GW_UPSTREAM_STREAM_ERROR, true, SL_FAILURE_OTHER},
    [SL_FAILURE_CONNECT_FAILED] = {SL_CODE_GW_UPSTREAM_CONNECT_FAILED, false, SL_FAILURE_TEMPORARY},
    [SL_FAILURE_BROKEN_BEFORE_HEAD] = {SL_CODE_GW_UPSTREAM_BROKEN_BEFORE_HEAD, false, SL_FAILURE_TEMPORARY},
    [SL_FAILURE_BROKEN_BEFORE_CONTENT] = {SL_CODE_GW_UPSTREAM_BROKEN_BEFORE_CONTENT, false,
                                          SL_FAILURE_TEMPORARY},
    [SL_FAILURE_ENDED_EARLY] = {SL_CODE_GW_UPSTREAM_STREAM_ENDED_EARLY, false, SL_FAILURE_TEMPORARY},
    [SL_FAILURE_IDLE_TIMEOUT] = {SL_CODE_GW_UPSTREAM_IDLE_TIMEOUT, false, SL_FAILURE_OTHER},
    [SL_FAILURE_TOTAL_TIMEOUT] = {SL_CODE_GW_UPSTREAM_TOTAL_TIMEOUT, false, SL_FAILURE_OTHER},
    [SL_FAILURE_BROKEN_AFTER_CONTENT] = {SL_CODE_GW_UPSTREAM_BROKEN_AFTER_CONTENT, false, SL_FAILURE_OTHER},
};

static const sl_failure_class_info_t class_info[SL_FAILURE_CLASS_COUNT] = {
    [SL_FAILURE_QUOTA] = {"quota", true, false, false, SL_BREAKER_CAUSE_QUOTA},
    [SL_FAILURE_NO_BALANCE] = {"no_balance", true, false, false, SL_BREAKER_CAUSE_NO_BALANCE},
    [SL_FAILURE_RATE_LIMITED] = {"rate_limited", true, false, false, SL_BREAKER_CAUSE_NONE},
    [SL_FAILURE_AUTH] = {"auth", true, false, false, SL_BREAKER_CAUSE_AUTH},
    /* A missing model is about the model, not the upstream: its other models still work. */
    [SL_FAILURE_MISSING_MODEL] = {"missing_model", true, false, true, SL_BREAKER_CAUSE_NONE},
    [SL_FAILURE_CONTEXT_LENGTH] = {"context_length", false, false, true, SL_BREAKER_CAUSE_NONE},
    [SL_FAILURE_REQUEST_ERROR] = {"request_error", false, false, true, SL_BREAKER_CAUSE_NONE},
    [SL_FAILURE_TEMPORARY] = {"temporary", true, true, false, SL_BREAKER_CAUSE_UNEXPLAINED},
    [SL_FAILURE_OTHER] = {"other", true, false, false, SL_BREAKER_CAUSE_UNEXPLAINED},
};

/* Classes that hold the upstream report under their own code, not the source's. */
static const struct {
    bool own;
    sl_code_t code;
} class_codes[SL_FAILURE_CLASS_COUNT] = {
    [SL_FAILURE_QUOTA] = {true, SL_CODE_GW_UPSTREAM_QUOTA_USED_UP},
    [SL_FAILURE_NO_BALANCE] = {true, SL_CODE_GW_UPSTREAM_NO_BALANCE},
    [SL_FAILURE_AUTH] = {true, SL_CODE_GW_UPSTREAM_AUTH_REJECTED},
};

typedef struct {
    const char *s;
    size_t n;
} span_t;

/* Index of the closing quote of a JSON string whose text starts at i; n when cut off. */
static size_t
string_end(span_t j, size_t i)
{
    while (i < j.n && j.s[i] != '"')
        i += j.s[i] == '\\' ? 2 : 1;
    return i < j.n ? i : j.n;
}

static size_t
skip_ws(span_t j, size_t i)
{
    while (i < j.n && (j.s[i] == ' ' || j.s[i] == '\t' || j.s[i] == '\n' || j.s[i] == '\r'))
        i++;
    return i;
}

/* One past the end of the object or string that starts at v; j.n when cut off. */
static size_t
value_end(span_t j, size_t v)
{
    if (j.s[v] == '"') {
        size_t e = string_end(j, v + 1);
        return e < j.n ? e + 1 : j.n;
    }
    size_t depth = 0;
    for (size_t i = v; i < j.n; i++) {
        char c = j.s[i];
        if (c == '"')
            i = string_end(j, i + 1);
        else if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && --depth == 0)
            return i + 1;
    }
    return j.n;
}

typedef void (*on_key_fn)(void *ctx, span_t json, span_t key, size_t depth, size_t value);

/*
 * Calls on_key for each object key in json with its nesting depth (1 = a
 * key of the outermost object) and the index of its value. Strings are
 * skipped whole, so words and braces inside them are never taken for keys.
 */
static void
each_key(span_t j, on_key_fn on_key, void *ctx)
{
    size_t depth = 0;
    for (size_t i = 0; i < j.n; i++) {
        char c = j.s[i];
        if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth -= depth > 0;
        } else if (c == '"') {
            size_t end = string_end(j, i + 1);
            size_t after = skip_ws(j, end + 1);
            if (after < j.n && j.s[after] == ':')
                on_key(ctx, j, (span_t){j.s + i + 1, end - i - 1}, depth, skip_ws(j, after + 1));
            i = end;
        }
    }
}

static bool
key_is(span_t key, const char *name)
{
    size_t n = strlen(name);
    return key.n == n && memcmp(key.s, name, n) == 0;
}

typedef struct {
    span_t found;
    size_t depth;
} error_find_t;

/* Keeps the shallowest "error" whose value is an object or a string: "error": null is not an error. */
static void
on_error_key(void *ctx, span_t j, span_t key, size_t depth, size_t v)
{
    error_find_t *ef = ctx;
    if (depth >= ef->depth || !key_is(key, "error") || v >= j.n || (j.s[v] != '{' && j.s[v] != '"'))
        return;
    ef->depth = depth;
    ef->found = (span_t){j.s + v, value_end(j, v) - v};
}

/*
 * The part of a body that describes the error: the shallowest "error"
 * object (Anthropic, OpenAI, Gemini, Responses' response.error), else the
 * whole body (Bedrock's {"message"}, Responses' top-level error event, HTML).
 * Scanning only the error keeps words in echoed instructions or tool
 * schemas (Responses events carry the whole response) from counting.
 */
static span_t
error_part(span_t body)
{
    error_find_t ef = {body, SIZE_MAX};
    each_key(body, on_error_key, &ef);
    return ef.found;
}

static int
parse_code(const char *s, size_t n)
{
    int v = 0;
    if (n == 0 || n > 3)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    return v >= 100 ? v : 0;
}

/* The error object's own numeric "code" (Gemini 503, a Chat error's 429); 0 when absent. */
static void
on_code_key(void *ctx, span_t j, span_t key, size_t depth, size_t v)
{
    int *code = ctx;
    if (depth != 1 || !key_is(key, "code") || *code)
        return;
    size_t e = v;
    while (e < j.n && j.s[e] >= '0' && j.s[e] <= '9')
        e++;
    *code = parse_code(j.s + v, e - v);
}

static bool
is_token_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

static bool
same_text(const char *a, const char *b, size_t n, bool fold)
{
    if (!fold)
        return memcmp(a, b, n) == 0;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)a[i]) != tolower((unsigned char)b[i]))
            return false;
    return true;
}

static bool
has_word(span_t text, const word_t *w)
{
    bool token = !(w->flags & INNER);
    for (size_t i = 0; i + w->len <= text.n; i++) {
        if (token && i > 0 && is_token_char(text.s[i - 1]))
            continue;
        if (!same_text(text.s + i, w->text, w->len, w->flags & FOLD))
            continue;
        if (token && i + w->len < text.n && is_token_char(text.s[i + w->len]))
            continue;
        return true;
    }
    return false;
}

/* A bit per class whose words appear in any of the texts. */
static unsigned
word_hits(const span_t *texts, size_t n_texts, sl_dialect_t dialect)
{
    unsigned hits = 0;
    for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
        if ((hits & BIT(words[w].cls)) || (words[w].dialects && !(words[w].dialects & (1u << dialect))))
            continue;
        for (size_t t = 0; t < n_texts; t++) {
            if (has_word(texts[t], &words[w])) {
                hits |= BIT(words[w].cls);
                break;
            }
        }
    }
    return hits;
}

static unsigned
status_hits(int status, bool any_5xx)
{
    if (any_5xx && status >= 500 && status <= 599 && status != 501)
        return BIT(SL_FAILURE_TEMPORARY);
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
        if (statuses[i].status == status)
            return BIT(statuses[i].cls);
    return 0;
}

/* Steps 1-7 over a status answer or an in-stream error. */
static sl_failure_class_t
classify_answer(const sl_failure_t *f)
{
    bool in_stream = f->source == SL_FAILURE_STREAM_ERROR;
    span_t body = {f->body ? f->body : "", f->body ? f->body_len : 0};
    if (body.n > SL_CLASSIFY_MAX_BODY)
        body.n = SL_CLASSIFY_MAX_BODY;
    span_t err = error_part(body);
    span_t code = {f->code ? f->code : "", f->code ? strlen(f->code) : 0};

    int status = f->status;
    if (in_stream && (status < 400 || status > 599)) {
        status = parse_code(code.s, code.n);
        if (!status)
            each_key(err, on_code_key, &status);
    }

    span_t texts[] = {code, err};
    unsigned words_found = word_hits(texts, 2, f->dialect);
    /* A status answer is temporary by its status alone (§5): a 501 saying server_error is not. */
    if (!in_stream)
        words_found &= ~BIT(SL_FAILURE_TEMPORARY);
    unsigned hits = words_found | status_hits(status, in_stream && instream_any_5xx[f->dialect]);

    for (sl_failure_class_t c = 0; c < SL_FAILURE_OTHER; c++) {
        if (!(hits & BIT(c)))
            continue;
        /*
         * Only a status answer is the client's fault to hand back; in-stream
         * request errors fail over (§3), and a named request error is never
         * temporary, whatever the status says (§5).
         */
        if (c == SL_FAILURE_CONTEXT_LENGTH || c == SL_FAILURE_REQUEST_ERROR)
            return in_stream ? SL_FAILURE_OTHER : c;
        /* After content the client has bytes already: nothing can be retried. */
        if (c == SL_FAILURE_TEMPORARY && f->after_content)
            return SL_FAILURE_OTHER;
        return c;
    }
    return sources[f->source].fallback;
}

sl_failure_class_t
sl_classify_failure(const sl_failure_t *f)
{
    assert(f->source < SL_FAILURE_SOURCE_COUNT && f->dialect < SL_DIALECT_COUNT);
    return sources[f->source].reads_answer ? classify_answer(f) : sources[f->source].fallback;
}

const sl_failure_class_info_t *
sl_failure_class_info(sl_failure_class_t cls)
{
    assert(cls < SL_FAILURE_CLASS_COUNT);
    return &class_info[cls];
}

sl_code_t
sl_failure_code(const sl_failure_t *f, sl_failure_class_t cls)
{
    assert(f->source < SL_FAILURE_SOURCE_COUNT && cls < SL_FAILURE_CLASS_COUNT);
    return class_codes[cls].own ? class_codes[cls].code : sources[f->source].code;
}
