/*
 * The SSE scanner and the per-dialect classifiers, as the hop drives them:
 * the upstream's bytes arrive in two reads split where the fuzzer says, each
 * complete event is dropped from the front of the held bytes and classified
 * by sl_stream_feed, and a Gemini stream is first checked for a bare JSON
 * error. Every held buffer is an exact-size copy, so a read past the bytes
 * that have arrived is caught by ASan.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dialect.h"
#include "core/sse.h"
#include "core/stream_class.h"
#include "fuzz_check.h"

static void
check_verdict(const sl_stream_verdict_t *v)
{
    CHECK(v->kind <= SL_STREAM_END);
    CHECK(v->status == 0 || (v->status >= 400 && v->status <= 599));
    CHECK(memchr(v->code, '\0', sizeof v->code) != NULL);
    CHECK(memchr(v->message, '\0', sizeof v->message) != NULL);
}

/* Scans the held bytes held[0..*len) for events until more are needed; false once the stream is over. */
static bool
drain(sl_dialect_t dialect, sl_sse_scanner_t *s, sl_stream_t *st, const char *bytes, size_t *off,
      size_t avail)
{
    for (;;) {
        size_t len = avail - *off;
        char *held = malloc(len ? len : 1);
        memcpy(held, bytes + *off, len);
        if (dialect == SL_DIALECT_GEMINI) {
            size_t taken = 0;
            sl_stream_verdict_t v;
            sl_gemini_bare_t b = sl_gemini_bare_error(held, len, &taken, &v);
            if (b == SL_GEMINI_BARE_ERROR) {
                CHECK(taken > 0 && taken <= len);
                check_verdict(&v);
                CHECK(v.kind == SL_STREAM_ERROR);
                free(held);
                return false;
            }
            if (b == SL_GEMINI_BARE_MORE) {
                free(held);
                return true;
            }
        }
        sl_sse_event_t ev;
        sl_sse_status_t r = sl_sse_next(s, held, len, &ev);
        if (r != SL_SSE_EVENT) {
            free(held);
            return r == SL_SSE_MORE;
        }
        CHECK(ev.len > 0 && ev.len <= len);
        CHECK(ev.name == NULL || ev.name_len > 0);
        if (ev.data != NULL && dialect == SL_DIALECT_OPENAI_CHAT)
            (void)sl_openai_chat_usage_only(ev.data, ev.data_len);
        (void)sl_sse_event_is(&ev, "message_stop");
        sl_stream_verdict_t v;
        sl_stream_phase_t before = st->phase;
        sl_stream_feed(st, &ev, &v);
        check_verdict(&v);
        CHECK(st->phase == SL_STREAM_FLOWING || before == SL_STREAM_HELD);
        CHECK(st->usage.input >= 0 && st->usage.output >= 0 && st->usage.cache_read >= 0 &&
              st->usage.cache_write >= 0);
        *off += ev.len;
        free(held);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t split = ((size_t)data[0] << 8 | data[1]);
    const char *bytes = (const char *)data + 2;
    size_t len = size - 2;
    if (split > len)
        split = len;
    static char scratch[512];
    static const sl_dialect_t dialects[] = {SL_DIALECT_ANTHROPIC, SL_DIALECT_OPENAI_CHAT,
                                            SL_DIALECT_OPENAI_RESPONSES, SL_DIALECT_GEMINI};
    for (size_t i = 0; i < sizeof dialects / sizeof dialects[0]; i++) {
        sl_sse_scanner_t s;
        sl_sse_init(&s, 4096, scratch, sizeof scratch);
        sl_stream_t st;
        sl_stream_init(&st, sl_dialect_def(dialects[i])->stream);
        size_t off = 0;
        if (drain(dialects[i], &s, &st, bytes, &off, split))
            (void)drain(dialects[i], &s, &st, bytes, &off, len);
        (void)sl_stream_complete(&st);
    }
    /* The byte scans on raw data too, not only on what the scanner frames. */
    (void)sl_openai_chat_usage_only(bytes, len);
    return 0;
}
