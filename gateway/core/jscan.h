/*
 * jscan: one pass over a request body that both validates it (RFC 8259, the
 * whole body one JSON object) and picks out the few top-level members the
 * gateway acts on. No allocation, no recursion: bodies may be 32 MiB and
 * their nesting is the client's choice, so depth is capped and the state
 * lives in fixed arrays on the stack.
 *
 * Results are spans (byte offsets into the body), never copies; the body
 * must outlive them. sl_jscan_string decodes a string span into a caller
 * buffer when the text itself is needed.
 *
 * Duplicate member names: the LAST one wins, as in jansson, JSON.parse,
 * Python and Go — the gateway routes by the value the upstream will read.
 */
#ifndef SL_JSCAN_H
#define SL_JSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Containers nested deeper than this (the body's own object counts as 1) are an error. */
#define SL_JSCAN_MAX_DEPTH 128

/* A value in the body: [off, off + len). len == 0 means absent (no JSON value is empty). */
typedef struct {
    size_t off, len;
} sl_jspan_t;

typedef enum {
    SL_JSCAN_OK,
    SL_JSCAN_E_TRUNCATED,     /* the body ends inside a value */
    SL_JSCAN_E_NOT_OBJECT,    /* the body is not a JSON object */
    SL_JSCAN_E_UNEXPECTED,    /* a byte that cannot start or continue what is expected */
    SL_JSCAN_E_BAD_ESCAPE,    /* a backslash escape that RFC 8259 does not define */
    SL_JSCAN_E_CONTROL_CHAR,  /* a raw byte below 0x20 inside a string */
    SL_JSCAN_E_BAD_UTF8,      /* string bytes that are not UTF-8 */
    SL_JSCAN_E_BAD_NUMBER,    /* leading zeros, a bare sign or dot, an empty exponent */
    SL_JSCAN_E_TOO_DEEP,      /* nesting beyond SL_JSCAN_MAX_DEPTH */
    SL_JSCAN_E_TRAILING,      /* something other than whitespace after the object */
    SL_JSCAN_E_MODEL_TYPE,    /* "model" is neither a string nor null */
    SL_JSCAN_E_STREAM_TYPE,   /* "stream" is neither true, false nor null */
    SL_JSCAN_E_PREVIOUS_TYPE, /* "previous_response_id" is neither a string nor null */
    SL_JSCAN_E_COUNT
} sl_jscan_err_t;

typedef struct {
    /* String tokens, quotes included; absent when missing or null. */
    sl_jspan_t model;
    sl_jspan_t previous_response_id;
    /*
     * The conversation's first user message, as a stable input for the
     * affinity key: in the last top-level `messages` (Anthropic, Chat,
     * Bedrock), `input` (Responses) or `contents` (Gemini) array, the first
     * element object whose `role` is "user" (in `contents` a missing role
     * counts as user, as Gemini reads it); the span is that element's
     * `content` (or Gemini `parts`) value, whatever its type. When `input` is
     * a plain string, the span is that string. Absent when there is none.
     */
    sl_jspan_t first_user;
    /*
     * The output cap, from `max_tokens`, `max_completion_tokens`,
     * `max_output_tokens`, Gemini's `generationConfig.maxOutputTokens` or
     * Bedrock's `inferenceConfig.maxTokens` (the last present wins). Only a plain non-negative
     * integer that fits int64 counts; any other value leaves has_max_tokens
     * false, because the figure only sizes a usage reservation and the
     * upstream, not the gateway, judges the request.
     */
    bool has_max_tokens;
    int64_t max_tokens;
    bool has_stream, stream; /* `stream`: null counts as absent */
    /*
     * OpenAI Chat streams report usage only when asked: the top-level
     * `stream_options` object (absent when missing or not an object) and
     * the value of its `include_usage` member, whatever its type.
     */
    sl_jspan_t stream_options;
    sl_jspan_t include_usage;
    /*
     * History bound to one upstream account (behaviour.md §1.5, sealed):
     * a member `encrypted_content` anywhere whose value is a non-empty
     * string (Responses reasoning items), and an object anywhere holding
     * both "type": "thinking" and a non-empty string `signature` (Anthropic
     * thinking blocks; a tool argument merely named signature does not count).
     */
    bool encrypted_content;
    bool thinking_signature;
    /* On failure: what and where (a byte offset into the body; the body's length when it ended early). */
    sl_jscan_err_t err;
    size_t err_off;
} sl_jscan_t;

/*
 * Scans body[0..len). Returns true when the body is one well-formed JSON
 * object with well-typed fields; out then holds the members found. Returns
 * false otherwise with out->err and out->err_off set and every other field
 * of out zeroed (nothing half-filled). Never reads outside body[0..len).
 */
bool sl_jscan(const char *body, size_t len, sl_jscan_t *out);

/* A short English reason for an error ("unexpected end of body", …); never NULL. */
const char *sl_jscan_reason(sl_jscan_err_t err);

/*
 * Decodes the string token at span (as reported by sl_jscan over the same
 * body: quotes included) into out, NUL-terminated, and stores the decoded
 * length (without the NUL) in *out_len. Escapes become UTF-8; an unpaired
 * \uD800-\uDFFF becomes U+FFFD. The text may contain NUL bytes (\u0000),
 * so use *out_len, not strlen. Returns false, leaving out and *out_len
 * untouched, when the span is absent or not a string token, or when cap is
 * smaller than the decoded length + 1. The decoded text is never longer
 * than the token.
 */
bool sl_jscan_string(const char *body, sl_jspan_t span, char *out, size_t cap, size_t *out_len);

/*
 * Whether the string token at span decodes to exactly lit[0..lit_len).
 * False for an absent span or a non-string.
 */
bool sl_jscan_string_equals(const char *body, sl_jspan_t span, const char *lit, size_t lit_len);

/*
 * Iterates over the text of a message content value (first_user above):
 * when span is a string token, yields it once; otherwise yields, in body
 * order, every string value of a member named `text` at any depth inside
 * span (Anthropic and Bedrock text blocks, Responses input_text, Gemini
 * parts), skipping images, cache_control markers and other members whose
 * bytes change between turns or carry no words. Start with *cursor = 0.
 * Returns true and sets *text (a string token, quotes included) for each
 * piece; returns false when there are no more, leaving *text untouched.
 * span must come from a successful sl_jscan over the same body.
 */
bool sl_jscan_next_text(const char *body, sl_jspan_t span, size_t *cursor, sl_jspan_t *text);

#endif
