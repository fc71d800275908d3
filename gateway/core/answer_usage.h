/*
 * Token usage as each dialect reports it (formats.md), in one place: the
 * mapping of a provider's usage object onto sl_usage_t, one rule per dialect
 * read either from a parsed object (the stream classifiers that parse their
 * events: stream_anthropic.c, stream_openai_chat.c,
 * stream_openai_responses.c, stream_bedrock.c) or from the object's bytes by
 * a walk (jwalk.h; stream_gemini.c, which parses no chunk), and the reading
 * of usage (and of the finish reason) from the tail of a whole
 * (non-streamed) JSON answer, whose body the gateway forwards without keeping
 * it.
 */
#ifndef SL_ANSWER_USAGE_H
#define SL_ANSWER_USAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/types.h"
#include "core/stream_class.h"

struct json_t;

/*
 * Takes the counts of the usage object u of dialect (Anthropic's or
 * Bedrock's "usage", OpenAI Chat's or Responses' "usage", Gemini's
 * "usageMetadata") into *usage, normalised as sl_usage_t says:
 *
 *   Anthropic  input_tokens, output_tokens, cache_read_input_tokens,
 *              cache_creation_input_tokens (input already excludes the cache)
 *   Chat       prompt_tokens minus prompt_tokens_details.cached_tokens,
 *              completion_tokens; the cached part is cache_read
 *   Responses  input_tokens minus input_tokens_details.cached_tokens,
 *              output_tokens; the cached part is cache_read
 *   Gemini     promptTokenCount + toolUsePromptTokenCount minus
 *              cachedContentTokenCount, candidatesTokenCount +
 *              thoughtsTokenCount (a whole snapshot: a count left out of a
 *              side it reports is 0)
 *   Bedrock    inputTokens, outputTokens, cacheReadInputTokens,
 *              cacheWriteInputTokens (input already excludes the cache)
 *
 * A count is a non-negative JSON integer; anything else is no count. The
 * cached part is clamped to the input it is part of. Overwrites the fields
 * of *usage the object reports (providers send running totals) and leaves
 * the others; does nothing when u is NULL or not an object, or dialect is
 * not one of the five. Pure; u is only read.
 */
void sl_usage_from_json(sl_dialect_t dialect, const struct json_t *u, sl_usage_t *usage);

/*
 * The same mapping as sl_usage_from_json, over the bytes obj[0..len) of a
 * usage object instead of a parsed one, read by one walk (jwalk.h) with no
 * allocation. A count is a member whose value is 1 to 18 plain digits
 * (sl_jval_count); keys are compared as raw bytes, unescaped; the last of a
 * duplicated key wins, as in jansson.
 *
 * Returns true, having overwritten the fields of *usage the object reports
 * and left the others, when obj[0..len) is one object per the walk
 * (whitespace allowed around it). Returns false, leaving *usage untouched,
 * when it is not: not an object, cut, bytes that stop the walk (in the
 * object or in a nested object a count is read from), anything after its
 * closing brace; or when obj is NULL or dialect is not one of the five. The
 * walk matches the containers it skips by depth only: it is no validation.
 * Pure; obj is only read.
 */
bool sl_usage_from_span(sl_dialect_t dialect, const char *obj, size_t len, sl_usage_t *usage);

/*
 * Usage from the tail of a whole (non-streamed) JSON answer of dialect: the
 * "usage" (Gemini: "usageMetadata") object that is a member of the answer's
 * top-level object, mapped as sl_usage_from_json says (counts as
 * sl_usage_from_span reads them).
 *
 * tail[0..len) must be the last bytes of the body (trailing whitespace
 * allowed); it may start anywhere. The tail is read backwards from its end,
 * where no string is open, so quotes and braces are told apart from text
 * exactly (a quote inside a string is always escaped: an odd run of
 * backslashes before it). The member found is the last of the top-level
 * object whose value is an object; a "usage" key nested deeper (in a tool's
 * input, Bedrock's guardrail trace, metadata) or written inside a string is
 * never taken, wherever it is. A body that is an array (Gemini's
 * streamGenerateContent without alt=sse answers an array of chunks, each
 * with running totals) is read from the last of its objects that has one.
 * Only that object is read (sl_usage_from_span: a walk, no parse); nothing
 * is read outside tail[0..len).
 *
 * Returns true and sets every field of *out (counts the object does not
 * report are 0) when the object reports at least one count. Returns false,
 * leaving *out untouched, when none can be read: the body does not end as a
 * JSON object or array would, the tail starts after the usage key's opening
 * quote (or with it, or with only backslashes before it: an escaped quote
 * cannot be ruled out), the member is absent, null or not an object, its
 * bytes are not one object per sl_usage_from_span, or it holds no count.
 * Pure.
 */
bool sl_answer_usage(sl_dialect_t dialect, const char *tail, size_t len, sl_usage_t *out);

/*
 * The finish reason of a whole answer from its tail, into out (as
 * sl__finish_reason_copy takes it): the last `"key": "value"` in
 * tail[0..len) whose key is the dialect's (Anthropic stop_reason, Chat
 * finish_reason, Gemini finishReason, Bedrock stopReason) and whose quotes
 * are not escaped text. Responses names its status at the start of the
 * answer, outside any tail: none. Returns whether a reason was set. Pure.
 */
bool sl_answer_finish_reason(sl_dialect_t dialect, const char *tail, size_t len,
                             char out[SL_FINISH_REASON_MAX]);

#endif
