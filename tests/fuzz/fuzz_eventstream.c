/*
 * The AWS eventstream decoder and the Bedrock classifier.
 *
 * 1. The input as a stream: sl_es_next in a loop, every header walked, each
 *    frame classified by sl_bedrock_stream_feed; every strict prefix of a
 *    frame must ask for more.
 * 2. A round trip: the input cut at NUL bytes into name, value, name,
 *    value, …, payload is encoded with sl_es_encode; the frame must decode to
 *    the same headers and payload, and is classified too (so the classifier
 *    sees frames whose CRCs hold).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/eventstream.h"
#include "core/stream_bedrock.h"
#include "fuzz_check.h"

#define MAX_MESSAGE (64 * 1024)
#define MAX_HEADERS 16

static void
check_verdict(const sl_stream_verdict_t *v)
{
    CHECK(v->kind <= SL_STREAM_END);
    CHECK(v->status == 0 || (v->status >= 400 && v->status <= 599));
    CHECK(memchr(v->code, '\0', sizeof v->code) != NULL);
    CHECK(memchr(v->message, '\0', sizeof v->message) != NULL);
}

static void
classify(sl_stream_t *st, const sl_es_message_t *msg)
{
    uint32_t count = 0;
    size_t pos = 0;
    sl_es_header_t h;
    while (sl_es_header_next(msg, &pos, &h)) {
        CHECK(h.type < SL_ES_TYPE_COUNT);
        CHECK(h.name >= msg->headers && h.name + h.name_len <= msg->headers + msg->headers_len);
        CHECK(h.value_len == 0 || h.value + h.value_len <= msg->headers + msg->headers_len);
        CHECK(++count <= msg->header_count);
    }
    CHECK(count == msg->header_count);
    (void)sl_es_message_kind(msg);
    const char *v;
    size_t vl;
    (void)sl_es_header_string(msg, ":event-type", &v, &vl);
    sl_bedrock_message_t m;
    sl_bedrock_message_from(msg, &m);
    sl_stream_verdict_t out;
    sl_bedrock_stream_feed(st, &m, &out);
    check_verdict(&out);
    CHECK(st->usage.input >= 0 && st->usage.output >= 0 && st->usage.cache_read >= 0 &&
          st->usage.cache_write >= 0);
}

static void
decode_stream(const char *buf, size_t len)
{
    sl_stream_t st;
    sl_bedrock_stream_init(&st);
    size_t off = 0;
    for (;;) {
        sl_es_message_t msg = {0};
        sl_es_status_t r = sl_es_next(buf + off, len - off, MAX_MESSAGE, &msg);
        if (r == SL_ES_NEED_MORE) {
            CHECK(msg.len == 0 || msg.len > len - off);
            break;
        }
        if (r != SL_ES_MESSAGE)
            break;
        CHECK(msg.len >= SL_ES_OVERHEAD && msg.len <= len - off);
        CHECK(msg.payload != NULL);
        /* A frame cut short is never a frame. */
        sl_es_message_t cut = {0};
        CHECK(sl_es_next(buf + off, msg.len - 1, MAX_MESSAGE, &cut) == SL_ES_NEED_MORE);
        classify(&st, &msg);
        off += msg.len;
    }
    (void)sl_stream_complete(&st);
}

static void
round_trip(const char *buf, size_t len)
{
    /* Pieces at NUL bytes: name, value pairs, the rest the payload. */
    sl_es_string_header_t hs[MAX_HEADERS];
    char *pieces[2 * MAX_HEADERS] = {0};
    size_t n = 0, off = 0, np = 0;
    while (n < MAX_HEADERS) {
        const char *a = memchr(buf + off, '\0', len - off);
        if (a == NULL)
            break;
        const char *b = memchr(a + 1, '\0', len - (size_t)(a + 1 - buf));
        if (b == NULL)
            break;
        pieces[np] = strndup(buf + off, (size_t)(a - (buf + off)));
        pieces[np + 1] = strndup(a + 1, (size_t)(b - (a + 1)));
        hs[n].name = pieces[np];
        hs[n].value = pieces[np + 1];
        np += 2;
        n++;
        off = (size_t)(b + 1 - buf);
    }
    const char *payload = buf + off;
    size_t payload_len = len - off;

    bool valid = true;
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(hs[i].name), vl = strlen(hs[i].value);
        if (nl == 0 || nl > SL_ES_MAX_NAME_LEN || vl > SL_ES_MAX_VALUE_LEN)
            valid = false;
    }
    sl_strbuf_t out = {0};
    bool ok = sl_es_encode(&out, hs, n, payload, payload_len);
    CHECK(ok == valid);
    if (ok) {
        sl_es_message_t msg;
        CHECK(sl_es_next(out.data, out.len, SL_ES_MAX_MESSAGE_DEFAULT, &msg) == SL_ES_MESSAGE);
        CHECK(msg.len == out.len && msg.header_count == n);
        CHECK(msg.payload_len == payload_len && memcmp(msg.payload, payload, payload_len) == 0);
        size_t pos = 0;
        sl_es_header_t h;
        for (size_t i = 0; i < n; i++) {
            CHECK(sl_es_header_next(&msg, &pos, &h));
            CHECK(h.type == SL_ES_STRING);
            CHECK(h.name_len == strlen(hs[i].name) && memcmp(h.name, hs[i].name, h.name_len) == 0);
            CHECK(h.value_len == strlen(hs[i].value) && memcmp(h.value, hs[i].value, h.value_len) == 0);
        }
        CHECK(!sl_es_header_next(&msg, &pos, &h));
        sl_stream_t st;
        sl_bedrock_stream_init(&st);
        classify(&st, &msg);
    } else {
        CHECK(out.len == 0);
    }
    free(out.data);
    for (size_t i = 0; i < np; i++)
        free(pieces[i]);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    decode_stream((const char *)data, size);
    round_trip((const char *)data, size);
    return 0;
}
