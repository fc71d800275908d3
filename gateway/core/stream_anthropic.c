/*
 * Anthropic Messages streams (formats.md): every event is named, so the name
 * decides in both phases. Only message_start, message_delta (usage, stop reason) and error
 * are parsed, once or twice per stream.
 */
#include <jansson.h>
#include <string.h>

#include "core/answer_usage.h"
#include "core/stream_class.h"

typedef enum { READ_NOTHING, READ_START_USAGE, READ_DELTA_USAGE, READ_ERROR } reading_t;

static const struct {
    const char *name;
    sl_stream_kind_t kind;
    reading_t read;
} events[] = {
    {"message_start", SL_STREAM_OPENING, READ_START_USAGE},
    {"ping", SL_STREAM_OPENING, READ_NOTHING},
    {"content_block_start", SL_STREAM_CONTENT, READ_NOTHING},
    {"content_block_delta", SL_STREAM_CONTENT, READ_NOTHING},
    {"content_block_stop", SL_STREAM_CONTENT, READ_NOTHING},
    {"message_delta", SL_STREAM_CONTENT, READ_DELTA_USAGE},
    {"message_stop", SL_STREAM_END, READ_NOTHING},
    {"error", SL_STREAM_ERROR, READ_ERROR},
};

static void
read_event(reading_t read, const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    json_t *root = ev->data ? json_loadb(ev->data, ev->data_len, 0, NULL) : NULL;
    if (read == READ_ERROR) {
        const json_t *err = json_object_get(root, "error");
        sl__stream_error(out, json_string_value(json_object_get(err, "type")),
                         json_string_value(json_object_get(err, "message")), 0);
    } else if (read == READ_START_USAGE) {
        sl_usage_from_json(SL_DIALECT_ANTHROPIC, json_object_get(json_object_get(root, "message"), "usage"),
                           usage);
    } else {
        sl_usage_from_json(SL_DIALECT_ANTHROPIC, json_object_get(root, "usage"), usage);
        const char *stop = json_string_value(json_object_get(json_object_get(root, "delta"), "stop_reason"));
        sl__stream_finish_reason(out, stop, stop != NULL ? strlen(stop) : 0);
    }
    json_decref(root);
}

static void
do_classify(sl_stream_phase_t phase, const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    (void)phase;
    *out = (sl_stream_verdict_t){.kind = SL_STREAM_CONTENT};
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++) {
        if (!sl_sse_event_is(ev, events[i].name))
            continue;
        out->kind = events[i].kind;
        out->finished = events[i].kind == SL_STREAM_END;
        if (events[i].read != READ_NOTHING)
            read_event(events[i].read, ev, out, usage);
        return;
    }
}

const sl_stream_class_vtable_t sl__stream_anthropic = {
    .dialect = SL_DIALECT_ANTHROPIC,
    .end_is_content = true,
    .classify = do_classify,
};
