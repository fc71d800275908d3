/*
 * OpenAI Chat Completions streams (formats.md): unnamed `data:` chunks ending
 * with `data: [DONE]`. While held, a chunk is parsed to tell the opening role
 * chunk from content. Once flowing, byte scans for "error", "usage" and
 * "finish_reason" decide, and only a chunk with a non-null error or usage is
 * parsed (OpenAI sends "usage":null on every chunk when usage is asked for).
 *
 * Also the readers shared with the Responses dialect (declared in stream_class.h).
 */
#include <jansson.h>

#include "core/answer_usage.h"
#include "core/stream_class.h"

static bool
is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/*
 * Keys are found at colons (a member has one, and two to four quotes): the
 * quoted text just before a colon is a member's key. An escaped key inside a
 * string ends in a backslash before its quote and never matches. Returns
 * where the value after colon starts when that key is quoted_key (kn bytes),
 * else NULL.
 */
static const char *
value_at_colon(const char *start, const char *end, const char *colon, const char *quoted_key, size_t kn)
{
    const char *q = colon;
    while (q > start && is_json_space(q[-1]))
        q--;
    if ((size_t)(q - start) < kn || memcmp(q - kn, quoted_key, kn) != 0)
        return NULL;
    const char *v = colon + 1;
    while (v < end && is_json_space(*v))
        v++;
    return v < end ? v : NULL;
}

const char *
sl__json_value_of(const char *p, const char *end, const char *quoted_key)
{
    const char *start = p;
    size_t kn = strlen(quoted_key);
    while (p < end && (p = memchr(p, ':', (size_t)(end - p))) != NULL) {
        const char *v = value_at_colon(start, end, p, quoted_key, kn);
        if (v != NULL)
            return v;
        p++;
    }
    return NULL;
}

void
sl__json_keys_non_null(const char *p, size_t len, const char *const *quoted_keys, size_t n, bool *found)
{
    const char *start = p, *end = p + len;
    size_t left = n;
    for (size_t k = 0; k < n; k++)
        found[k] = false;
    while (left > 0 && p < end && (p = memchr(p, ':', (size_t)(end - p))) != NULL) {
        for (size_t k = 0; k < n; k++) {
            const char *v =
                found[k] ? NULL : value_at_colon(start, end, p, quoted_keys[k], strlen(quoted_keys[k]));
            if (v != NULL && ((size_t)(end - v) < 4 || memcmp(v, "null", 4) != 0)) {
                found[k] = true;
                left--;
            }
        }
        p++;
    }
}

bool
sl__json_has_non_null(const char *p, size_t len, const char *quoted_key)
{
    bool found;
    sl__json_keys_non_null(p, len, &quoted_key, 1, &found);
    return found;
}

void
sl__openai_error(const json_t *error, sl_stream_verdict_t *out)
{
    const json_t *code = json_object_get(error, "code");
    const char *name = json_string_value(code);
    if (name == NULL || name[0] == '\0')
        name = json_string_value(json_object_get(error, "type"));
    const char *message = json_is_string(error) ? json_string_value(error)
                                                : json_string_value(json_object_get(error, "message"));
    sl__stream_error(out, name, message, json_is_integer(code) ? json_integer_value(code) : 0);
}

static void
take_usage(const json_t *root, sl_usage_t *usage)
{
    sl_usage_from_json(SL_DIALECT_OPENAI_CHAT, json_object_get(root, "usage"), usage);
}

/* Opening fields are null, "", [], {} or false: a delta with anything else is content. */
static bool
is_empty(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
    case JSON_FALSE:
        return true;
    case JSON_STRING:
        return json_string_length(v) == 0;
    case JSON_ARRAY:
        return json_array_size(v) == 0;
    case JSON_OBJECT:
        return json_object_size(v) == 0;
    default:
        return false;
    }
}

static bool
delta_has_content(const json_t *delta)
{
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)delta, key, value)
    {
        if (strcmp(key, "role") != 0 && !is_empty(value))
            return true;
    }
    return false;
}

/* The held phase: formats.md's opening rule, applied to the whole chunk. */
static void
classify_held(const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    json_t *root = json_loadb(ev->data, ev->data_len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return;
    }
    const json_t *error = json_object_get(root, "error");
    if (error && !json_is_null(error)) {
        sl__openai_error(error, out);
        json_decref(root);
        return;
    }
    take_usage(root, usage);
    /* Usage makes a chunk content only when it has no choices: some servers
     * send running usage on every chunk, the opening role chunk included. */
    const json_t *u = json_object_get(root, "usage");
    const json_t *choices = json_object_get(root, "choices");
    bool content = json_array_size(choices) == 0 && u != NULL && !json_is_null(u);
    size_t i;
    const json_t *choice;
    json_array_foreach(choices, i, choice)
    {
        const json_t *finish = json_object_get(choice, "finish_reason");
        if (finish && !json_is_null(finish))
            out->finished = content = true;
        if (json_is_string(finish))
            sl__stream_finish_reason(out, json_string_value(finish), json_string_length(finish));
        if (delta_has_content(json_object_get(choice, "delta")))
            content = true;
    }
    out->kind = content ? SL_STREAM_CONTENT : SL_STREAM_OPENING;
    json_decref(root);
}

/* The reason of a chunk that has a finish_reason, by a scan: "stop", "length", "tool_calls". */
static void
finish_reason_of(const sl_sse_event_t *ev, sl_stream_verdict_t *out)
{
    const char *end = ev->data + ev->data_len;
    const char *v = sl__json_value_of(ev->data, end, "\"finish_reason\"");
    if (v == NULL || *v != '"')
        return;
    const char *close = memchr(v + 1, '"', (size_t)(end - v - 1));
    if (close != NULL)
        sl__stream_finish_reason(out, v + 1, (size_t)(close - v - 1));
}

/* The flowing phase: everything is content unless a scan finds an error. */
static void
classify_flowing(const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    static const char *const keys[] = {"\"error\"", "\"usage\"", "\"finish_reason\""};
    bool found[3];
    sl__json_keys_non_null(ev->data, ev->data_len, keys, 3, found);
    bool has_error = found[0], has_usage = found[1];
    out->finished = found[2];
    if (found[2])
        finish_reason_of(ev, out);
    if (!has_error && !has_usage)
        return;
    json_t *root = json_loadb(ev->data, ev->data_len, 0, NULL);
    const json_t *error = json_object_get(root, "error");
    if (error && !json_is_null(error))
        sl__openai_error(error, out);
    else
        take_usage(root, usage);
    json_decref(root);
}

static void
do_classify(sl_stream_phase_t phase, const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    *out = (sl_stream_verdict_t){.kind = SL_STREAM_CONTENT};
    if (ev->data == NULL) {
        /* a named event without data: the SDKs dispatch nothing for it either */
        out->kind = SL_STREAM_IGNORE;
        return;
    }
    if (ev->data_len >= 6 && memcmp(ev->data, "[DONE]", 6) == 0) {
        out->kind = SL_STREAM_END;
        out->finished = true;
        return;
    }
    if (phase == SL_STREAM_HELD)
        classify_held(ev, out, usage);
    else
        classify_flowing(ev, out, usage);
}

const sl_stream_class_vtable_t sl__stream_openai_chat = {
    .dialect = SL_DIALECT_OPENAI_CHAT,
    .end_is_content = false,
    .classify = do_classify,
};

bool
sl_openai_chat_usage_only(const char *data, size_t len)
{
    const char *end = data + len;
    const char *v = sl__json_value_of(data, end, "\"choices\"");
    if (v == NULL || *v != '[')
        return false;
    for (v++; v < end && is_json_space(*v); v++)
        ;
    return v < end && *v == ']' && sl__json_has_non_null(data, len, "\"usage\"");
}
