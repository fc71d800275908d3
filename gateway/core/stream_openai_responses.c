/*
 * OpenAI Responses streams (formats.md): every event is named, so the name
 * decides in both phases. Parsed: the terminal events (usage, errors) and,
 * found by a byte scan, any event whose top-level "error" is not null — the
 * openai SDK raises on those whatever their name, and response.created
 * carries "error":null, which is not an error.
 */
#include <jansson.h>

#include "core/answer_usage.h"
#include "core/stream_class.h"

typedef enum { READ_NOTHING, READ_USAGE, READ_FAILED, READ_ERROR_EVENT, READ_TOP_ERROR } reading_t;

static const struct {
    const char *name;
    sl_stream_kind_t kind;
    reading_t read;
} events[] = {
    {"response.created", SL_STREAM_OPENING, READ_NOTHING},
    {"response.in_progress", SL_STREAM_OPENING, READ_NOTHING},
    {"response.queued", SL_STREAM_OPENING, READ_NOTHING},
    {"response.completed", SL_STREAM_END, READ_USAGE},
    /* Terminal as well (max_output_tokens reached): the answer is whole, if short. */
    {"response.incomplete", SL_STREAM_END, READ_USAGE},
    {"response.failed", SL_STREAM_ERROR, READ_FAILED},
    {"error", SL_STREAM_ERROR, READ_ERROR_EVENT},
};

/* The top-level error event: flat {"code","message"} from the HTTP API, or
 * {"status":429,"error":{…}} as in WebSocket mode. */
static void
read_error_event(const json_t *root, sl_stream_verdict_t *out)
{
    const json_t *code = json_object_get(root, "code");
    const json_t *nested = json_object_get(root, "error");
    if (json_is_object(nested) && !json_is_string(code)) {
        sl__openai_error(nested, out);
    } else {
        sl__stream_error(out, json_string_value(code), json_string_value(json_object_get(root, "message")),
                         json_is_integer(code) ? json_integer_value(code) : 0);
    }
    const json_t *status = json_object_get(root, "status");
    if (out->status == 0 && json_is_integer(status) && json_integer_value(status) >= 400 &&
        json_integer_value(status) <= 599)
        out->status = (int)json_integer_value(status);
}

static void
read_event(reading_t read, const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    json_t *root = ev->data ? json_loadb(ev->data, ev->data_len, 0, NULL) : NULL;
    const json_t *response = json_object_get(root, "response");
    const json_t *error = json_object_get(root, "error");
    switch (read) {
    case READ_USAGE: {
        sl_usage_from_json(SL_DIALECT_OPENAI_RESPONSES, json_object_get(response, "usage"), usage);
        /* "completed", or why it is incomplete ("max_output_tokens", "content_filter"). */
        const char *why =
            json_string_value(json_object_get(json_object_get(response, "incomplete_details"), "reason"));
        if (why == NULL)
            why = json_string_value(json_object_get(response, "status"));
        sl__stream_finish_reason(out, why, why != NULL ? strlen(why) : 0);
        break;
    }
    case READ_FAILED:
        sl__openai_error(json_object_get(response, "error"), out);
        break;
    case READ_ERROR_EVENT:
        read_error_event(root, out);
        break;
    case READ_TOP_ERROR:
        if (error && !json_is_null(error))
            sl__openai_error(error, out);
        break;
    case READ_NOTHING:
        break;
    }
    json_decref(root);
}

static void
do_classify(sl_stream_phase_t phase, const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    (void)phase;
    *out = (sl_stream_verdict_t){.kind = SL_STREAM_CONTENT};
    reading_t read = READ_NOTHING;
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++) {
        if (sl_sse_event_is(ev, events[i].name)) {
            out->kind = events[i].kind;
            read = events[i].read;
            break;
        }
    }
    out->finished = out->kind == SL_STREAM_END;
    if (read == READ_NOTHING && ev->data && sl__json_has_non_null(ev->data, ev->data_len, "\"error\""))
        read = READ_TOP_ERROR;
    if (read != READ_NOTHING)
        read_event(read, ev, out, usage);
}

const sl_stream_class_vtable_t sl__stream_openai_responses = {
    .dialect = SL_DIALECT_OPENAI_RESPONSES,
    .end_is_content = true,
    .classify = do_classify,
};
