/*
 * The demo upstream's behaviour (`sluice --demo`, config.md): what the
 * simulated provider of each dialect answers, and when it misbehaves. Pure:
 * no IO, no clock (times are passed in), no randomness of its own (the
 * caller draws one number per request). The shell that serves it is
 * gateway/demo.c.
 *
 * Each dialect has two demo upstreams, "a" and "b", told apart by the first
 * path segment of the request (`/a/v1/messages`, `/b/v1/messages`). Trouble
 * comes in phases that cycle on their own (sl_demo_phase_at) or one mode
 * pinned for good; it hits the "a" upstreams mostly, so that sluice's
 * failover to "b" shows.
 *
 *   mode        "a" upstreams                              "b" upstreams
 *   calm        a rare overload (3 %)                      fine
 *   overload    60 %: 529/503, or for streams an in-stream 10 %
 *               overloaded error before any content
 *   rate-limit  85 %: 429 with a retry hint of 2-6 s       25 % (so that requests queue when
 *                                                          both are paused)
 *   drop        50 % of streams cut (half before content,   5 %
 *               half after); 30 % of non-streamed requests
 *               closed before the head
 *   slow        85 %: the first token after 3-10 s         fine
 *
 * An answer is a status head and a list of pieces, each sent after its own
 * delay (one chunk each in a streamed answer), so the shell only needs a
 * timer per connection: sl_demo_answer_build writes the bytes of every
 * dialect in its real shape (formats.md; checked against the fixtures of
 * shared/fixtures/streams by the gateway's own parsers in the tests).
 */
#ifndef SL_DEMO_SCRIPT_H
#define SL_DEMO_SCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/types.h"
#include "core/xalloc.h"

/* ---- the trouble schedule ------------------------------------------------------------------------ */

typedef enum {
    SL_DEMO_CALM,
    SL_DEMO_OVERLOAD,   /* 529/503 answers, in-stream overloaded errors before content */
    SL_DEMO_RATE_LIMIT, /* a 429 storm with Retry-After on the "a" upstreams */
    SL_DEMO_DROP,       /* streams cut before or after content */
    SL_DEMO_SLOW,       /* first tokens after 3-10 s */
    SL_DEMO_TROUBLE_COUNT
} sl_demo_trouble_t;

/* "calm", "overload", "rate-limit", "drop", "slow": the names --demo takes. Never NULL. */
const char *sl_demo_trouble_name(sl_demo_trouble_t mode);

/* The demo's draws (splitmix64): advances *state and returns a well-spread 64-bit value. */
uint64_t sl_demo_draw(uint64_t *state);

/*
 * What the mode does, for a log line: "429 storm on the 'a' upstreams".
 * Static, never NULL.
 */
const char *sl_demo_trouble_describe(sl_demo_trouble_t mode);

/*
 * Reads a mode name as --demo takes it: one of sl_demo_trouble_name's (case
 * does not matter), "ratelimit", "rate_limit" or "429" for the rate-limit
 * storm. Returns true and sets *out, or returns false (*out untouched).
 * "cycle" is not a mode: the caller treats it as "not pinned".
 */
bool sl_demo_trouble_parse(const char *name, sl_demo_trouble_t *out);

/* One step of the automatic cycle. */
typedef struct {
    sl_demo_trouble_t mode;
    uint32_t secs;
} sl_demo_step_t;

/* The cycle: 20 s calm, 20 s rate-limit storm, 15 s drops, 15 s slow, 15 s overload; then again. */
extern const sl_demo_step_t sl_demo_cycle[];
extern const size_t sl_demo_cycle_len;

typedef struct {
    sl_demo_trouble_t mode;
    int64_t start_ms; /* since the demo started; 0 for a pinned mode */
    int64_t end_ms;   /* when the next phase begins; INT64_MAX for a pinned mode */
    uint64_t number;  /* counts phases from 0 across cycles, so a change is seen even to the same mode */
} sl_demo_phase_t;

/*
 * The phase at ms_since_start (negative is read as 0): with pinned, pin
 * for good; else the step of sl_demo_cycle it falls in, cycle after cycle.
 */
sl_demo_phase_t sl_demo_phase_at(int64_t ms_since_start, bool pinned, sl_demo_trouble_t pin);

/* ---- one request ---------------------------------------------------------------------------------- */

typedef enum {
    SL_DEMO_OP_GENERATE,     /* messages, chat completions, responses, generateContent, converse */
    SL_DEMO_OP_COUNT_TOKENS, /* count_tokens, input_tokens, countTokens: always answered at once */
} sl_demo_op_t;

#define SL_DEMO_MODEL_MAX 96

typedef struct {
    sl_dialect_t dialect;
    sl_demo_op_t op;
    char upstream; /* 'a' or 'b' */
    bool stream;
    /* The model the request names, kept to characters safe in JSON and headers; "demo-model" if none. */
    char model[SL_DEMO_MODEL_MAX];
    int64_t input_tokens; /* an estimate: body bytes / 4, at least 1 */
    /* Filled by the caller: Unix seconds (the "created" fields) and a request number (the ids). */
    int64_t unix_secs;
    uint64_t serial;
} sl_demo_request_t;

typedef enum {
    SL_DEMO_PARSE_OK,
    SL_DEMO_PARSE_NOT_FOUND, /* not /a or /b, or not a path of formats.md: out->dialect may be anything */
    SL_DEMO_PARSE_BAD_BODY,  /* a generate path whose body is not a JSON object: out->dialect is set */
} sl_demo_parse_t;

/*
 * Reads a request the demo upstream got: method (e.g. "POST"), target
 * (path and query, as on the request line) and body. Strips the /a or /b
 * segment, recognises the rest as sl_endpoint_parse does (formats.md
 * paths), and reads `stream` and `model` from the body where the dialect
 * keeps them there. Fills *out on every status but NOT_FOUND (then only
 * possibly dialect); unix_secs and serial are left 0. Nothing allocated.
 */
sl_demo_parse_t sl_demo_request_parse(const char *method, const char *target, size_t target_len,
                                      const char *body, size_t body_len, sl_demo_request_t *out);

/* ---- the plan ------------------------------------------------------------------------------------- */

typedef enum {
    SL_DEMO_ANSWER,             /* 200: the whole answer, streamed or not */
    SL_DEMO_OVERLOADED,         /* a 529 (Anthropic) / 503 status answer in the dialect's error shape */
    SL_DEMO_RATE_LIMITED,       /* a 429 status answer with a retry hint */
    SL_DEMO_STREAM_OVERLOADED,  /* 200, the opening events, then an in-stream overloaded error */
    SL_DEMO_CUT_BEFORE_CONTENT, /* 200, the opening events, then the connection closes */
    SL_DEMO_CUT_AFTER_CONTENT,  /* 200, some content, then the connection closes mid-event */
    SL_DEMO_CLOSE_BEFORE_HEAD,  /* the connection closes without an answer */
    SL_DEMO_OUTCOME_COUNT
} sl_demo_outcome_t;

/* "answer", "overloaded", "rate_limited", "stream_overloaded", "cut_before_content", … Never NULL. */
const char *sl_demo_outcome_name(sl_demo_outcome_t outcome);

typedef struct {
    sl_demo_outcome_t outcome;
    int status;                /* of the head; 0 for SL_DEMO_CLOSE_BEFORE_HEAD */
    uint32_t retry_after_secs; /* the hint of a 429 (header, or Gemini's retryDelay); 0 otherwise */
    bool stream;               /* as the request asked */
    uint32_t words;            /* of the answer's text, at least (sl_demo_text ends it with a sentence) */
    uint32_t head_delay_ms;    /* before the head (streams: with the opening events) */
    uint32_t first_token_ms;   /* streams: from the head to the first content (or the error / cut) */
    uint32_t token_delay_ms;   /* streams: between content events */
    uint32_t cut_after_events; /* SL_DEMO_CUT_AFTER_CONTENT: content events sent whole before the cut */
    uint64_t text_seed;        /* which sentences, and how many words per event */
} sl_demo_plan_t;

/*
 * What the upstream req->upstream does with req in mode (the table at the
 * top), every choice drawn from rand (any value: it is mixed first, so
 * consecutive numbers give unrelated plans). Token counting is always
 * answered, at once. Pure.
 */
sl_demo_plan_t sl_demo_decide(const sl_demo_request_t *req, sl_demo_trouble_t mode, uint64_t rand);

/* ---- the answer ----------------------------------------------------------------------------------- */

/* Bytes body[off .. off+len) are sent delay_ms after the previous piece (the first: after the head). */
typedef struct {
    size_t off, len;
    uint32_t delay_ms;
} sl_demo_piece_t;

typedef enum {
    SL_DEMO_END_FINISH,            /* the answer is whole: the last chunk, keep the connection */
    SL_DEMO_END_CUT,               /* close after the last piece, without the last chunk */
    SL_DEMO_END_CLOSE_BEFORE_HEAD, /* close after head_delay_ms; no head, no pieces */
} sl_demo_end_t;

typedef struct {
    int status;               /* 0 with SL_DEMO_END_CLOSE_BEFORE_HEAD */
    const char *reason;       /* "OK", "Too Many Requests", …: static */
    const char *content_type; /* static */
    sl_strbuf_t headers;      /* extra header lines, each ending in \r\n ("retry-after: 4\r\n") */
    bool chunked;             /* a stream: transfer-encoding chunked, one chunk per non-empty piece */
    uint32_t head_delay_ms;
    sl_strbuf_t body;
    sl_demo_piece_t *pieces; /* owned */
    size_t n_pieces;
    sl_demo_end_t end;
} sl_demo_answer_t;

/*
 * Writes the answer plan makes of req into *out (zero-initialised by this
 * call; free with sl_demo_answer_free), in req->dialect's wire format:
 *
 *   Anthropic   message_start, ping | content_block_start + text_delta |
 *               text_delta … | content_block_stop, message_delta (usage),
 *               message_stop; or the whole message JSON
 *   Chat        the role chunk | content chunks … | finish_reason chunk,
 *               usage chunk, [DONE]; or the chat.completion JSON
 *   Responses   response.created, response.in_progress | output item and
 *               part added + output_text.delta | deltas … | the done events,
 *               response.completed (usage); or the response JSON
 *   Gemini      `data:` chunks with candidates[0].content.parts[0].text and
 *               usageMetadata, finishReason on the last; or the whole JSON
 *   Bedrock     eventstream frames messageStart | contentBlockDelta … |
 *               contentBlockStop, messageStop, metadata (usage); or the
 *               Converse JSON
 *
 * ("|" separates pieces.) Errors in each dialect's own shape: Anthropic
 * overloaded_error 529 / rate_limit_error 429; OpenAI 503 server_error /
 * 429 rate_limit_exceeded; Gemini 503 UNAVAILABLE / 429 RESOURCE_EXHAUSTED
 * with details[].retryDelay; Bedrock ServiceUnavailableException /
 * ThrottlingException in x-amzn-errortype with {"message"}. A 429 carries
 * `retry-after` (not Gemini, whose hint is in the body). In-stream errors
 * as formats.md shows them (Bedrock: a serviceUnavailableException frame).
 */
void sl_demo_answer_build(const sl_demo_request_t *req, const sl_demo_plan_t *plan, sl_demo_answer_t *out);

/*
 * An error answer of the demo upstream itself, not part of a plan: status
 * 400 (a body that is not JSON), 401 (a wrong upstream key) or 404 (a model
 * or path it does not serve), in dialect's error shape with message (plain
 * ASCII without quotes or backslashes; it is written as is). *out as for
 * sl_demo_answer_build.
 */
void sl_demo_answer_error(sl_dialect_t dialect, int status, const char *message, sl_demo_answer_t *out);

/* Frees what an answer owns; *a is zeroed. */
void sl_demo_answer_free(sl_demo_answer_t *a);

/*
 * The text of an answer, appended to out: at least `words` words from the
 * built-in sentences, on to the end of the sentence the last of them is in,
 * starting where seed says (no leading space). Returns how many words it
 * wrote: the answer's output tokens. 0 words writes nothing.
 */
uint32_t sl_demo_text(uint64_t seed, uint32_t words, sl_strbuf_t *out);

#endif
