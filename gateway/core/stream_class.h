/*
 * What each upstream SSE event means for the opening hold (behaviour.md §4)
 * and for retry (§5): opening, content, error, end of stream, or nothing, per
 * dialect (formats.md), plus the usage the stream reports.
 *
 * One vtable per dialect (stream_anthropic.c, stream_openai_chat.c,
 * stream_openai_responses.c, stream_gemini.c; Bedrock's eventstream messages
 * have their own entry points in stream_bedrock.h). Two phases, because of
 * the hot path: while the answer is held, events are few and are classified
 * fully (parsed as JSON where the dialect needs it); once content flows, an
 * event is decided by its name or a byte scan, and only the rare events that
 * carry an error or usage are parsed.
 *
 * The caller feeds every complete event of one upstream stream, in order,
 * to sl_stream_feed, which keeps the phase, the usage and completeness.
 */
#ifndef SL_STREAM_CLASS_H
#define SL_STREAM_CLASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/types.h"
#include "core/mask.h"
#include "core/sse.h"

typedef enum {
    SL_STREAM_IGNORE,  /* a keep-alive: carries nothing, neither opens nor releases */
    SL_STREAM_OPENING, /* may precede content and be held */
    SL_STREAM_CONTENT, /* releases the hold; anything unknown is content */
    SL_STREAM_ERROR,   /* the provider reports a failure inside the stream */
    SL_STREAM_END,     /* the completion marker: the stream is whole */
} sl_stream_kind_t;

typedef enum {
    SL_STREAM_HELD,    /* no content yet: classify fully */
    SL_STREAM_FLOWING, /* content has been seen: only errors, the end and usage matter */
} sl_stream_phase_t;

/*
 * Token counts, normalised so that the four add up to what was billed:
 * input excludes the cached part (OpenAI's prompt/input tokens include it,
 * Anthropic's input_tokens do not), cache_read is the cached part, cache_write
 * what was written to the cache (Anthropic only).
 */
typedef struct {
    int64_t input, output, cache_read, cache_write;
} sl_usage_t;

#define SL_STREAM_CODE_MAX    64
#define SL_STREAM_MESSAGE_MAX 256
#define SL_FINISH_REASON_MAX  32

typedef struct {
    sl_stream_kind_t kind;
    /* The answer is whole once this event has arrived: the completion marker,
     * or (Chat) a choice's non-null finish_reason. */
    bool finished;
    /* For errors: the HTTP status the event names (a numeric code 400-599), else 0. */
    int status;
    /* For errors: the provider's code or type ("overloaded_error", "server_is_overloaded"),
     * "" when it gives none. Cut at a UTF-8 boundary when longer. */
    char code[SL_STREAM_CODE_MAX];
    /* For errors: the provider's message, credentials masked (mask.h), cut when longer. */
    char message[SL_STREAM_MESSAGE_MAX];
    /* Why the answer ended, as the event says it (Anthropic's and Bedrock's stop reason, Chat's
     * finish_reason, Gemini's finishReason, Responses' status or incomplete reason); "" when it says none. */
    char finish_reason[SL_FINISH_REASON_MAX];
} sl_stream_verdict_t;

typedef struct sl_stream_class_vtable {
    sl_dialect_t dialect;
    /* Whether the completion marker counts as content when it arrives while
     * held: formats.md lists message_stop and response.completed as content,
     * while a Chat [DONE] after opening chunks only is a stream that ended early. */
    bool end_is_content;
    /*
     * Classifies one event that is not comment_only. Fills every field of
     * *out; on an event that reports usage, overwrites the fields of *usage it
     * reports (providers send running totals) and leaves the others. Pure.
     */
    void (*classify)(sl_stream_phase_t phase, const sl_sse_event_t *ev, sl_stream_verdict_t *out,
                     sl_usage_t *usage);
} sl_stream_class_vtable_t;

extern const sl_stream_class_vtable_t sl__stream_anthropic;
extern const sl_stream_class_vtable_t sl__stream_openai_chat;
extern const sl_stream_class_vtable_t sl__stream_openai_responses;
extern const sl_stream_class_vtable_t sl__stream_gemini;

/* One upstream stream as seen so far. Zero-initialise except vt (sl_stream_init). */
typedef struct {
    const sl_stream_class_vtable_t *vt;
    sl_stream_phase_t phase; /* SL_STREAM_FLOWING from the first content event on */
    bool finished;           /* an event said the answer is whole */
    sl_usage_t usage;
    char finish_reason[SL_FINISH_REASON_MAX]; /* the last one an event gave; "" = none yet */
} sl_stream_t;

/* Starts tracking a stream of the dialect vt classifies (vt must not be NULL). */
static inline void
sl_stream_init(sl_stream_t *st, const sl_stream_class_vtable_t *vt)
{
    *st = (sl_stream_t){.vt = vt, .phase = SL_STREAM_HELD};
}

/*
 * Classifies the next event of the stream into *out (every field set) and
 * updates st: the phase moves to flowing at the first content, usage and
 * finished accumulate. The caller releases its hold when out->kind is content
 * (or the end of a dialect whose end is content): that is exactly when
 * st->phase turns to SL_STREAM_FLOWING.
 */
static inline void
sl_stream_feed(sl_stream_t *st, const sl_sse_event_t *ev, sl_stream_verdict_t *out)
{
    if (ev->comment_only) {
        *out = (sl_stream_verdict_t){.kind = SL_STREAM_IGNORE};
        return;
    }
    st->vt->classify(st->phase, ev, out, &st->usage);
    if (out->finish_reason[0] != '\0')
        memcpy(st->finish_reason, out->finish_reason, sizeof(st->finish_reason));
    if (out->kind == SL_STREAM_CONTENT || (out->kind == SL_STREAM_END && st->vt->end_is_content))
        st->phase = SL_STREAM_FLOWING;
    st->finished = st->finished || out->finished;
}

/*
 * Whether a stream whose body ended (its HTTP framing's end, or the upstream
 * closing a body without one) was whole rather than cut: its completion
 * marker arrived (Anthropic message_stop, Responses response.completed or
 * response.incomplete, Chat [DONE], Bedrock messageStop) or, for Chat, a
 * finish_reason did; Gemini has no marker, so there a candidate's
 * finishReason or promptFeedback's blockReason does. A body that ends
 * cleanly can still be a stream cut short upstream, so this is the check
 * that counts.
 * A whole stream may still hold no content (st->phase is then still held):
 * that is a stream that ended early (behaviour.md §5).
 */
static inline bool
sl_stream_complete(const sl_stream_t *st)
{
    return st->finished;
}

/* ---- shared by the dialect files ---- */

/* Copies s[0..n) into dst[cap] NUL-terminated, cut back to a UTF-8 character boundary. */
static inline void
sl__stream_copy(char *dst, size_t cap, const char *s, size_t n)
{
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, s, n);
    dst[n] = '\0';
}

/*
 * Copies the finish reason s[0..n) into dst when it is a plain token (letters, digits, '_', '-', '.': every
 * provider's reasons are), cut to size, and returns true; anything else is no reason (it goes into traces
 * as it is) and leaves dst.
 */
static inline bool
sl__finish_reason_copy(char dst[SL_FINISH_REASON_MAX], const char *s, size_t n)
{
    if (s == NULL || n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.'))
            return false;
    }
    sl__stream_copy(dst, SL_FINISH_REASON_MAX, s, n);
    return true;
}

/* The event's finish reason (sl__finish_reason_copy's rule). */
static inline void
sl__stream_finish_reason(sl_stream_verdict_t *out, const char *s, size_t n)
{
    sl__finish_reason_copy(out->finish_reason, s, n);
}

/* Makes *out an error verdict; code and message may be NULL. status outside 400-599 is dropped. */
static inline void
sl__stream_error(sl_stream_verdict_t *out, const char *code, const char *message, int64_t status)
{
    *out = (sl_stream_verdict_t){.kind = SL_STREAM_ERROR};
    if (status >= 400 && status <= 599)
        out->status = (int)status;
    if (code)
        sl__stream_copy(out->code, sizeof out->code, code, strlen(code));
    if (message) {
        sl__stream_copy(out->message, sizeof out->message, message, strlen(message));
        sl_scrub_secrets(out->message, strlen(out->message));
    }
}

/*
 * Shared by the two OpenAI dialects (defined in stream_openai_chat.c).
 *
 * sl__json_value_of: a byte scan of JSON text p[0..end) for the key `"key"`
 * (quoted_key includes the quotes) followed by a colon; returns where its value
 * starts, or NULL. Any nesting depth: a hit is a hint to parse, not a verdict.
 * Inside a string a quote is escaped, so a string value never matches. The
 * scan goes from colon to colon: fewer stops than quotes.
 */
const char *sl__json_value_of(const char *p, const char *end, const char *quoted_key);
/* Whether the JSON text has the key with a value other than null, at any depth. */
bool sl__json_has_non_null(const char *p, size_t len, const char *quoted_key);
/* The same for several keys (n <= SL_JSON_KEYS_MAX) in one pass over the text: found[k] for quoted_keys[k].
 */
#define SL_JSON_KEYS_MAX 4
void sl__json_keys_non_null(const char *p, size_t len, const char *const *quoted_keys, size_t n, bool *found);

/*
 * The Chat held phase's two readers of one opening rule (stream_openai_chat.c): the walk, which returns
 * false (out untouched) for a chunk it leaves to the parse, and the parse. Declared for the test that they
 * agree wherever the walk decides.
 */
bool sl__chat_held_walked(const sl_sse_event_t *ev, sl_stream_verdict_t *out);
void sl__chat_held_parsed(const sl_sse_event_t *ev, sl_stream_verdict_t *out, sl_usage_t *usage);

struct json_t;
/* Fills an error verdict from an OpenAI error value ({"code","type","message"} or a bare string):
 * code is error.code when a string, else error.type; a numeric code 400-599 is the status. */
void sl__openai_error(const struct json_t *error, sl_stream_verdict_t *out);

/* ---- Gemini's bare JSON error (stream_gemini.c) ---- */

/* How long a bare object may grow before it is no longer awaited: the 64 KiB error-body cap of §4. */
#define SL_GEMINI_BARE_MAX (64 * 1024)

typedef enum {
    SL_GEMINI_BARE_NONE,  /* the bytes do not start a bare JSON error: scan them as SSE */
    SL_GEMINI_BARE_MORE,  /* they start a JSON object that has not closed yet: read more, do not scan */
    SL_GEMINI_BARE_ERROR, /* a whole object with a non-null top-level "error": *out and *taken are set */
} sl_gemini_bare_t;

/*
 * Some Gemini servers send an in-stream error as bare JSON, without `data:`
 * and often without the blank line, so the SSE scanner cannot frame it; the
 * official SDK accepts it. Call this on a Gemini stream's unconsumed bytes
 * buf[0..len) before each sl_sse_next over them. Leading whitespace is
 * skipped (the blank lines an SSE stream may hold between events).
 *
 * SL_GEMINI_BARE_ERROR: *out is an error verdict filled as for a `data:`
 * error chunk, and *taken the bytes up to and including the object's
 * closing brace (whitespace before it included); the stream is over and the
 * hint is sl_hint_from_body over those bytes (details[].retryDelay).
 * SL_GEMINI_BARE_MORE: do not call sl_sse_next yet; call again with the
 * same bytes and more appended (an object still open at SL_GEMINI_BARE_MAX
 * bytes turns into SL_GEMINI_BARE_NONE, so the SSE scanner's own bound ends
 * the stream). SL_GEMINI_BARE_NONE: scan the bytes as SSE (a whole object
 * without an error is only lines the SSE scanner ignores). On NONE and MORE,
 * *out and *taken are untouched. Pure; parses only the error object.
 */
sl_gemini_bare_t sl_gemini_bare_error(const char *buf, size_t len, size_t *taken, sl_stream_verdict_t *out);

/*
 * Whether a Chat stream chunk's data is the usage-only chunk that
 * `stream_options.include_usage` adds before [DONE] (`"choices":[]` and a
 * non-null usage): the gateway drops it when it asked for usage and the
 * client did not (behaviour.md §7). A byte scan, no parse.
 */
bool sl_openai_chat_usage_only(const char *data, size_t len);

#endif
