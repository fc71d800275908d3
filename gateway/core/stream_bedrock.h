/*
 * What each message of a Bedrock ConverseStream answer means for the opening
 * hold and for retry (formats.md, Bedrock): the eventstream counterpart of the
 * SSE classifiers of stream_class.h, with the same verdicts, usage and
 * stream state. The frames are decoded elsewhere (eventstream.h); this file
 * only reads the few headers that name a message, and its JSON payload.
 *
 *   :message-type  named by                      kind
 *   event          messageStart                  opening
 *   event          contentBlockStart/Delta/Stop  content, like any event not listed here
 *   event          messageStop                   the end: content, and the answer is whole
 *   event          metadata                      opening, with the usage: it carries no answer
 *                                                and follows messageStop in a whole stream
 *   exception      :exception-type               error, payload {"message":"…"}
 *   error          :error-code                   error, :error-message says what
 *   anything else, or none                       error: the AWS SDK raises on it
 */
#ifndef SL_STREAM_BEDROCK_H
#define SL_STREAM_BEDROCK_H

#include <stddef.h>

#include "core/stream_class.h"

/*
 * One decoded message, as spans into the caller's frame (not NUL-terminated).
 * A header that is absent is NULL with length 0. Nothing is owned.
 */
typedef struct {
    const char *message_type; /* :message-type: event, exception or error */
    size_t message_type_len;
    const char *event_type; /* :event-type, for events */
    size_t event_type_len;
    const char *exception_type; /* :exception-type, for exceptions (camelCase) */
    size_t exception_type_len;
    const char *error_code; /* :error-code, for errors */
    size_t error_code_len;
    const char *error_message; /* :error-message, for errors */
    size_t error_message_len;
    const char *payload; /* JSON for events and exceptions; may be empty */
    size_t payload_len;
} sl_bedrock_message_t;

/*
 * Classifies one message, with the contract of sl_stream_class_vtable_t's
 * classify: fills every field of *out; on a metadata event overwrites the
 * fields of *usage it reports (inputTokens, outputTokens,
 * cacheReadInputTokens, cacheWriteInputTokens: Bedrock's input already
 * excludes the cached part) and leaves the others. An error's status is the
 * one its exception type stands for (throttlingException 429,
 * serviceUnavailableException 503, internalServerException 500,
 * modelStreamErrorException 424, validationException 400, names matched in
 * any case), else 0; its code is the exception type or :error-code as sent.
 * Names decide in both phases; only exception and metadata payloads are
 * parsed. Pure.
 */
void sl_bedrock_classify(sl_stream_phase_t phase, const sl_bedrock_message_t *m, sl_stream_verdict_t *out,
                         sl_usage_t *usage);

/* The message of a decoded eventstream frame: its naming headers (absent: NULL, 0) and payload. */
struct sl_es_message;
void sl_bedrock_message_from(const struct sl_es_message *frame, sl_bedrock_message_t *out);

/*
 * Starts tracking a Bedrock stream in st. st->vt stays NULL: feed it with
 * sl_bedrock_stream_feed, never sl_stream_feed; sl_stream_complete applies.
 */
void sl_bedrock_stream_init(sl_stream_t *st);

/*
 * sl_stream_feed for a Bedrock stream: classifies the next message into *out
 * (every field set) and updates st the same way — the phase turns to
 * SL_STREAM_FLOWING at the first content or messageStop (the end is content
 * here), usage and finished accumulate.
 */
void sl_bedrock_stream_feed(sl_stream_t *st, const sl_bedrock_message_t *m, sl_stream_verdict_t *out);

#endif
