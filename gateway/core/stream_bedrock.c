/*
 * Bedrock ConverseStream messages (formats.md; the table is in
 * stream_bedrock.h). Every message is named by its headers, so the names
 * decide in both phases; a JSON payload is parsed only for exceptions and for
 * the one metadata event of a stream.
 */
#include <jansson.h>
#include <strings.h>

#include "core/answer_usage.h"
#include "core/stream_bedrock.h"

#include "core/eventstream.h"

typedef enum { READ_NOTHING, READ_USAGE, READ_STOP } reading_t;

static const struct {
    const char *name;
    sl_stream_kind_t kind;
    reading_t read;
} events[] = {
    {"messageStart", SL_STREAM_OPENING, READ_NOTHING},
    {"contentBlockStart", SL_STREAM_CONTENT, READ_NOTHING},
    {"contentBlockDelta", SL_STREAM_CONTENT, READ_NOTHING},
    {"contentBlockStop", SL_STREAM_CONTENT, READ_NOTHING},
    {"messageStop", SL_STREAM_END, READ_STOP},
    {"metadata", SL_STREAM_OPENING, READ_USAGE},
};

/* The in-stream exceptions of ConverseStream and the statuses they stand for. */
static const struct {
    const char *name;
    int status;
} exceptions[] = {
    {"throttlingException", 429},     {"serviceUnavailableException", 503},
    {"internalServerException", 500}, {"modelStreamErrorException", 424},
    {"validationException", 400},
};

static bool
span_is(const char *p, size_t n, const char *lit)
{
    return p != NULL && strlen(lit) == n && memcmp(p, lit, n) == 0;
}

/* The status an exception type stands for. Exception frames name it in camelCase, x-amzn-errortype
 * and some :error-code values in PascalCase: case does not matter. */
static int
status_of(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof exceptions / sizeof exceptions[0]; i++) {
        if (name != NULL && strlen(exceptions[i].name) == n && strncasecmp(name, exceptions[i].name, n) == 0)
            return exceptions[i].status;
    }
    return 0;
}

static void
take_usage(const sl_bedrock_message_t *m, sl_usage_t *usage)
{
    json_t *root = json_loadb(m->payload, m->payload_len, 0, NULL);
    sl_usage_from_json(SL_DIALECT_BEDROCK, json_object_get(root, "usage"), usage);
    json_decref(root);
}

/* messageStop's {"stopReason":"end_turn"}: once per stream. */
static void
take_stop_reason(const sl_bedrock_message_t *m, sl_stream_verdict_t *out)
{
    json_t *root = json_loadb(m->payload, m->payload_len, 0, NULL);
    const json_t *stop = json_object_get(root, "stopReason");
    if (json_is_string(stop))
        sl__stream_finish_reason(out, json_string_value(stop), json_string_length(stop));
    json_decref(root);
}

/* The header spans are not NUL-terminated: cut them into buffers the size of the verdict's fields. */
static void
error_of(const char *code, size_t code_len, const char *message, size_t message_len, sl_stream_verdict_t *out)
{
    char c[SL_STREAM_CODE_MAX], msg[SL_STREAM_MESSAGE_MAX];
    sl__stream_copy(c, sizeof c, code ? code : "", code_len);
    sl__stream_copy(msg, sizeof msg, message ? message : "", message_len);
    sl__stream_error(out, c, msg, status_of(code, code_len));
}

static void
read_exception(const sl_bedrock_message_t *m, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    (void)usage;
    json_t *root = json_loadb(m->payload, m->payload_len, 0, NULL);
    const char *message = json_string_value(json_object_get(root, "message"));
    if (message == NULL)
        message = json_string_value(json_object_get(root, "Message"));
    error_of(m->exception_type, m->exception_type_len, message, message ? strlen(message) : 0, out);
    json_decref(root);
}

static void
read_error(const sl_bedrock_message_t *m, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    (void)usage;
    error_of(m->error_code, m->error_code_len, m->error_message, m->error_message_len, out);
}

static void
read_event(const sl_bedrock_message_t *m, sl_stream_verdict_t *out, sl_usage_t *usage)
{
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++) {
        if (!span_is(m->event_type, m->event_type_len, events[i].name))
            continue;
        out->kind = events[i].kind;
        out->finished = events[i].kind == SL_STREAM_END;
        if (events[i].read == READ_USAGE)
            take_usage(m, usage);
        else if (events[i].read == READ_STOP)
            take_stop_reason(m, out);
        return;
    }
}

static const struct {
    const char *name;
    void (*read)(const sl_bedrock_message_t *m, sl_stream_verdict_t *out, sl_usage_t *usage);
} message_types[] = {
    {"event", read_event},
    {"exception", read_exception},
    {"error", read_error},
};

void
sl_bedrock_classify(sl_stream_phase_t phase, const sl_bedrock_message_t *m, sl_stream_verdict_t *out,
                    sl_usage_t *usage)
{
    (void)phase;
    *out = (sl_stream_verdict_t){.kind = SL_STREAM_CONTENT};
    for (size_t i = 0; i < sizeof message_types / sizeof message_types[0]; i++) {
        if (span_is(m->message_type, m->message_type_len, message_types[i].name)) {
            message_types[i].read(m, out, usage);
            return;
        }
    }
    /* The AWS SDK raises on a message type it does not know: so does the gateway. */
    sl__stream_error(out, NULL, NULL, 0);
}

void
sl_bedrock_stream_init(sl_stream_t *st)
{
    *st = (sl_stream_t){.vt = NULL, .phase = SL_STREAM_HELD};
}

void
sl_bedrock_stream_feed(sl_stream_t *st, const sl_bedrock_message_t *m, sl_stream_verdict_t *out)
{
    sl_bedrock_classify(st->phase, m, out, &st->usage);
    if (out->finish_reason[0] != '\0')
        memcpy(st->finish_reason, out->finish_reason, sizeof(st->finish_reason));
    if (out->kind == SL_STREAM_CONTENT || out->kind == SL_STREAM_END)
        st->phase = SL_STREAM_FLOWING;
    st->finished = st->finished || out->finished;
}

void
sl_bedrock_message_from(const sl_es_message_t *frame, sl_bedrock_message_t *out)
{
    *out = (sl_bedrock_message_t){.payload = frame->payload, .payload_len = frame->payload_len};
    sl_es_header_string(frame, ":message-type", &out->message_type, &out->message_type_len);
    sl_es_header_string(frame, ":event-type", &out->event_type, &out->event_type_len);
    sl_es_header_string(frame, ":exception-type", &out->exception_type, &out->exception_type_len);
    sl_es_header_string(frame, ":error-code", &out->error_code, &out->error_code_len);
    sl_es_header_string(frame, ":error-message", &out->error_message, &out->error_message_len);
}
