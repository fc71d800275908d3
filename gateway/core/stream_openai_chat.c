/*
 * OpenAI Chat Completions streams (formats.md): unnamed `data:` chunks ending
 * with `data: [DONE]`. While held, a walk over the chunk (jwalk.h) tells the
 * opening role chunk from content; a chunk with an error or usage, or one the
 * walk cannot follow, is parsed. Once flowing, byte scans for "error",
 * "usage" and "finish_reason" decide, and only a chunk with a non-null error
 * or usage is parsed (OpenAI sends "usage":null on every chunk when usage is
 * asked for).
 *
 * Also the readers shared with the Responses dialect (declared in stream_class.h).
 */
#include <assert.h>
#include <jansson.h>

#include "core/answer_usage.h"
#include "core/jwalk.h"
#include "core/stream_class.h"

static bool
is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/*
 * Keys are found at colons (a member has one, and two to four quotes): the
 * quoted text just before a colon is a member's key. An escaped key inside a
 * string ends in a backslash before its quote and never matches. Most colons
 * of a chunk are no key asked for: the key's last letter, before its closing
 * quote, is compared before the whole key.
 */
static bool
key_before_colon(const char *start, const char *colon, const char *quoted_key, size_t kn)
{
    const char *q = colon;
    while (q > start && is_json_space(q[-1]))
        q--;
    return (size_t)(q - start) >= kn && q[-1] == '"' && q[-2] == quoted_key[kn - 2] &&
           memcmp(q - kn, quoted_key, kn) == 0;
}

/* Where the value after colon starts, or NULL when the text ends first. */
static const char *
value_after(const char *colon, const char *end)
{
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
        if (key_before_colon(start, p, quoted_key, kn))
            return value_after(p, end);
        p++;
    }
    return NULL;
}

void
sl__json_keys_non_null(const char *p, size_t len, const char *const *quoted_keys, size_t n, bool *found)
{
    const char *start = p, *end = p + len;
    size_t kn[SL_JSON_KEYS_MAX];
    size_t left = n;
    assert(n <= SL_JSON_KEYS_MAX);
    for (size_t k = 0; k < n; k++) {
        found[k] = false;
        kn[k] = strlen(quoted_keys[k]);
    }
    while (left > 0 && p < end && (p = memchr(p, ':', (size_t)(end - p))) != NULL) {
        for (size_t k = 0; k < n; k++) {
            if (found[k] || !key_before_colon(start, p, quoted_keys[k], kn[k]))
                continue;
            const char *v = value_after(p, end);
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

/* The held phase: formats.md's opening rule, applied to the whole chunk parsed. */
void
sl__chat_held_parsed(const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage)
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

static bool
has_escape(sl_jval_t v)
{
    return memchr(v.p, '\\', (size_t)(v.end - v.p)) != NULL;
}

/* Whether key is one of keys[0..n), byte for byte. */
static bool
jval_in(sl_jval_t key, const sl_jval_t *keys, size_t n)
{
    size_t len = (size_t)(key.end - key.p);
    for (size_t i = 0; i < n; i++) {
        if ((size_t)(keys[i].end - keys[i].p) == len && memcmp(keys[i].p, key.p, len) == 0)
            return true;
    }
    return false;
}

/* An opening field's value, as is_empty: null, false, "", [] or {}. */
static bool
jval_is_empty(sl_jval_t v)
{
    if (sl_jval_is(v, "null") || sl_jval_is(v, "false") || sl_jval_is(v, "\"\""))
        return true;
    if (v.p == v.end || (*v.p != '[' && *v.p != '{'))
        return false;
    const char *in = sl_jval_skip_space(v.p + 1, v.end);
    return in < v.end && *in == (*v.p == '[' ? ']' : '}');
}

/*
 * The walk's verdict on one choice: false when jansson must decide (an escaped key or reason). A key given
 * twice counts by its last value, as in the parse.
 */
static bool
walk_choice(sl_jval_t item, sl_stream_verdict_t *out, bool *content)
{
    sl_jwalk_t choice, delta;
    sl_jval_t key, value, finish = {NULL, NULL}, delta_v = {NULL, NULL};
    if (!sl_jwalk_open(item, '{', &choice))
        return true;
    while (sl_jwalk_next(&choice, &key, &value)) {
        if (has_escape(key))
            return false;
        if (sl_jval_is(key, "finish_reason"))
            finish = value;
        else if (sl_jval_is(key, "delta"))
            delta_v = value;
    }
    if (choice.bad)
        return false;
    if (finish.p != NULL && !sl_jval_is(finish, "null")) {
        *content = out->finished = true;
        if (*finish.p == '"') {
            if (has_escape(finish))
                return false;
            sl__stream_finish_reason(out, finish.p + 1, (size_t)(finish.end - finish.p - 2));
        }
    }
    if (delta_v.p != NULL && sl_jwalk_open(delta_v, '{', &delta)) {
        /* A field given twice goes to the parse, which keeps its last value; a delta has a few fields. */
        sl_jval_t field, seen[8];
        size_t n_seen = 0;
        while (sl_jwalk_next(&delta, &key, &field)) {
            if (has_escape(key) || n_seen == sizeof seen / sizeof seen[0] || jval_in(key, seen, n_seen))
                return false;
            seen[n_seen++] = key;
            if (!sl_jval_is(key, "role") && !jval_is_empty(field))
                *content = true;
        }
        if (delta.bad)
            return false;
    }
    return true;
}

/*
 * The held phase without a parse, for the chunks a working upstream sends while held (the opening role
 * chunk, then content): the opening rule over a walk of the chunk. Returns false, *out untouched, for what
 * the parse must decide: an error or usage that is not null, an escaped key or reason (jansson unescapes
 * them), bytes the walk cannot follow.
 */
bool
sl__chat_held_walked(const sl_sse_event_t *ev, sl_stream_verdict_t *out)
{
    sl_jval_t all = {ev->data, ev->data + ev->data_len}, key, value, choices = {NULL, NULL};
    sl_jwalk_t root, list;
    if (!sl_jwalk_open(all, '{', &root))
        return false;
    while (sl_jwalk_next(&root, &key, &value)) {
        if (has_escape(key))
            return false;
        if ((sl_jval_is(key, "error") || sl_jval_is(key, "usage")) && !sl_jval_is(value, "null"))
            return false;
        if (sl_jval_is(key, "choices"))
            choices = value;
    }
    if (root.bad || sl_jval_skip_space(root.p, all.end) != all.end)
        return false;
    sl_stream_verdict_t v = *out;
    bool content = false;
    if (choices.p != NULL && sl_jwalk_open(choices, '[', &list)) {
        sl_jval_t item;
        while (sl_jwalk_next(&list, NULL, &item)) {
            if (!walk_choice(item, &v, &content))
                return false;
        }
        if (list.bad)
            return false;
    }
    v.kind = content ? SL_STREAM_CONTENT : SL_STREAM_OPENING;
    *out = v;
    return true;
}

static void
classify_held(const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    if (!sl__chat_held_walked(ev, out))
        sl__chat_held_parsed(ev, out, usage);
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
