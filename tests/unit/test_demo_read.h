/*
 * Reading the demo upstream's answers back with the gateway's own parsers
 * (SSE or eventstream, then the dialect's stream classifier): the kind of
 * every event, the first error, the text of the content events. Shared by
 * test_demo_script.c (the answers as built) and test_demo.c (as served).
 */
#ifndef TEST_DEMO_READ_H
#define TEST_DEMO_READ_H

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dialect.h"
#include "core/eventstream.h"
#include "core/sse.h"
#include "core/stream_bedrock.h"
#include "core/stream_class.h"
#include "core/xalloc.h"

typedef struct {
    char kinds[1024]; /* I O C X E per event */
    size_t n;
    sl_stream_t st;
    bool has_error;
    sl_stream_verdict_t error;
    char error_data[2048]; /* the error event's data, or the exception frame's payload */
    sl_strbuf_t text;      /* the text of the content events, joined */
    char names[64][48];    /* distinct event names (SSE name, Bedrock :event-type) */
    size_t n_names;
    size_t leftover; /* bytes that do not make a whole event */
} seen_t;

static char
letter(sl_stream_kind_t k)
{
    return "IOCXE"[k];
}

static void
note_name(seen_t *o, const char *name, size_t len)
{
    char n[48] = "";
    snprintf(n, sizeof n, "%.*s", (int)len, name);
    for (size_t i = 0; i < o->n_names; i++) {
        if (strcmp(o->names[i], n) == 0)
            return;
    }
    if (o->n_names < sizeof o->names / sizeof o->names[0])
        strcpy(o->names[o->n_names++], n);
}

/* The text an SSE event carries, per dialect (formats.md's content fields). */
static void
take_text(sl_dialect_t d, const sl_sse_event_t *ev, seen_t *o)
{
    json_t *j = ev->data ? json_loadb(ev->data, ev->data_len, 0, NULL) : NULL;
    const json_t *t = NULL;
    switch (d) {
    case SL_DIALECT_ANTHROPIC:
        if (sl_sse_event_is(ev, "content_block_delta"))
            t = json_object_get(json_object_get(j, "delta"), "text");
        break;
    case SL_DIALECT_OPENAI_CHAT:
        t = json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta"),
                            "content");
        break;
    case SL_DIALECT_OPENAI_RESPONSES:
        if (sl_sse_event_is(ev, "response.output_text.delta"))
            t = json_object_get(j, "delta");
        break;
    default:
        t = json_object_get(
            json_array_get(
                json_object_get(
                    json_object_get(json_array_get(json_object_get(j, "candidates"), 0), "content"), "parts"),
                0),
            "text");
        break;
    }
    if (json_is_string(t))
        sl_strbuf_append(&o->text, json_string_value(t), json_string_length(t));
    json_decref(j);
}

static void
feed_sse(sl_dialect_t d, const char *in, size_t len, seen_t *o)
{
    static char scratch[8192];
    sl_sse_scanner_t s;
    sl_sse_init(&s, SL_SSE_MAX_EVENT_DEFAULT, scratch, sizeof scratch);
    sl_stream_init(&o->st, sl_dialect_def(d)->stream);
    size_t at = 0;
    sl_sse_event_t ev;
    while (sl_sse_next(&s, in + at, len - at, &ev) == SL_SSE_EVENT) {
        sl_stream_verdict_t v;
        sl_stream_feed(&o->st, &ev, &v);
        cr_assert_lt(o->n, sizeof o->kinds - 1);
        o->kinds[o->n++] = letter(v.kind);
        if (ev.name)
            note_name(o, ev.name, ev.name_len);
        if (v.kind == SL_STREAM_ERROR && !o->has_error) {
            o->has_error = true;
            o->error = v;
            snprintf(o->error_data, sizeof o->error_data, "%.*s", (int)ev.data_len, ev.data ? ev.data : "");
        }
        if (v.kind == SL_STREAM_CONTENT)
            take_text(d, &ev, o);
        at += ev.len;
    }
    o->leftover = len - at;
}

static void
feed_bedrock(const char *in, size_t len, seen_t *o)
{
    sl_bedrock_stream_init(&o->st);
    size_t at = 0;
    sl_es_message_t m;
    sl_es_status_t st;
    while ((st = sl_es_next(in + at, len - at, SL_ES_MAX_MESSAGE_DEFAULT, &m)) == SL_ES_MESSAGE) {
        sl_bedrock_message_t bm;
        sl_bedrock_message_from(&m, &bm);
        sl_stream_verdict_t v;
        sl_bedrock_stream_feed(&o->st, &bm, &v);
        o->kinds[o->n++] = letter(v.kind);
        if (bm.event_type)
            note_name(o, bm.event_type, bm.event_type_len);
        if (v.kind == SL_STREAM_ERROR && !o->has_error) {
            o->has_error = true;
            o->error = v;
            snprintf(o->error_data, sizeof o->error_data, "%.*s", (int)bm.payload_len, bm.payload);
        }
        if (v.kind == SL_STREAM_CONTENT && bm.event_type && bm.event_type_len == 17 &&
            memcmp(bm.event_type, "contentBlockDelta", 17) == 0) {
            json_t *j = json_loadb(bm.payload, bm.payload_len, 0, NULL);
            const json_t *t = json_object_get(json_object_get(j, "delta"), "text");
            if (json_is_string(t))
                sl_strbuf_append(&o->text, json_string_value(t), json_string_length(t));
            json_decref(j);
        }
        at += m.len;
    }
    cr_assert_eq(st, SL_ES_NEED_MORE, "a broken frame (status %d)", (int)st);
    o->leftover = len - at;
}

static void
feed(sl_dialect_t d, const char *in, size_t len, seen_t *o)
{
    memset(o, 0, sizeof *o);
    if (d == SL_DIALECT_BEDROCK)
        feed_bedrock(in, len, o);
    else
        feed_sse(d, in, len, o);
}

static void
seen_free(seen_t *o)
{
    free(o->text.data);
    o->text = (sl_strbuf_t){0};
}

#endif
