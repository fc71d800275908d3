/*
 * The one failure classifier (formats.md, "Error classification"). A hop's
 * failure comes in as plain data; out comes its class, checked in this order,
 * the first match winning, the body's words winning over the status:
 *
 *   1. quota used up   insufficient_quota, usage_limit_reached, billing and
 *                      balance wording, Gemini per-day quota; status 402
 *   2. rate limited    429, rate_limit_error, rate_limit_exceeded,
 *                      RESOURCE_EXHAUSTED, throttlingException
 *   3. auth            401, 403, authentication_error, permission_error, …
 *   4. missing model   404, not_found_error, model_not_found, NOT_FOUND
 *   5. request error   a status answer whose body names a request error;
 *                      first its context-length kind, which a route may
 *                      send on to its context_fallback (behaviour.md §1.6)
 *   6. temporary       status 500 502 503 504 529; the in-stream allowlist
 *                      before content; connect failures; breaks before the
 *                      head or before content; streams that end early
 *   7. other           everything else (501, 505, 520-527, unlisted
 *                      in-stream codes, timeouts, anything after content)
 *
 * What a class means for the caller (fail over, retry, breaker) is data:
 * sl_failure_class_info.
 */
#ifndef SL_CLASSIFY_H
#define SL_CLASSIFY_H

#include <stdbool.h>
#include <stddef.h>

#include "breaker.h"
#include "codes.h"
#include "core/types.h"

/* Bytes of an error body the classifier reads; the rest is ignored. Matches the 64 KiB read cap of §4. */
#define SL_CLASSIFY_MAX_BODY (64 * 1024)

/* Where a hop's failure came from. */
typedef enum {
    SL_FAILURE_STATUS,                /* a non-2xx answer: status, body, maybe a type header */
    SL_FAILURE_STREAM_ERROR,          /* an error event inside a 2xx answer */
    SL_FAILURE_CONNECT_FAILED,        /* no connection (refused, DNS, TLS, connect timeout) */
    SL_FAILURE_BROKEN_BEFORE_HEAD,    /* the connection broke before the response head */
    SL_FAILURE_BROKEN_BEFORE_CONTENT, /* the stream broke before its first content event */
    SL_FAILURE_ENDED_EARLY,           /* the stream ended cleanly after only opening events */
    SL_FAILURE_IDLE_TIMEOUT,          /* nothing arrived for idle_timeout_secs */
    SL_FAILURE_TOTAL_TIMEOUT,         /* the hop outlived total_timeout_secs */
    SL_FAILURE_BROKEN_AFTER_CONTENT,  /* the stream broke after content had been seen */
    SL_FAILURE_SOURCE_COUNT
} sl_failure_source_t;

/* The failure, as the hop saw it. Nothing here is owned by the classifier. */
typedef struct {
    sl_failure_source_t source;
    sl_dialect_t dialect; /* the upstream's protocol */
    /*
     * STATUS: the HTTP status. STREAM_ERROR: the numeric code the event
     * named (400-599) when the dialect extracted it; anything else here
     * (0, the stream's 200) means "look in code and the body". Otherwise
     * ignored.
     */
    int status;
    /*
     * The error body (STATUS) or the error event's data (STREAM_ERROR): any
     * of the five dialects' JSON error shapes, or anything else (HTML from a
     * proxy). Not NUL-terminated; NULL when len is 0. Only the first
     * SL_CLASSIFY_MAX_BODY bytes are read.
     */
    const char *body;
    size_t body_len;
    /*
     * The error's type or code when the dialect already extracted it
     * (NUL-terminated, NULL if none): the in-stream error's type/code, a
     * Bedrock exception frame's :exception-type, or a Bedrock status
     * answer's x-amzn-errortype header (case and ":…" suffix do not matter).
     * A string of digits is read as a numeric code (Gemini "503").
     */
    const char *code;
    /* STREAM_ERROR: content had already been seen when the error arrived. */
    bool after_content;
} sl_failure_t;

/*
 * The classes, in the order they are checked. QUOTA and NO_BALANCE are the
 * two sub-causes of step 1 (quota used up / no balance), so each can carry
 * its own breaker hold; CONTEXT_LENGTH is the one request error of step 5
 * that a route's context_fallback takes on (otherwise it is handed back as
 * every request error is).
 */
typedef enum {
    SL_FAILURE_QUOTA,
    SL_FAILURE_NO_BALANCE,
    SL_FAILURE_RATE_LIMITED,
    SL_FAILURE_AUTH,
    SL_FAILURE_MISSING_MODEL,
    SL_FAILURE_CONTEXT_LENGTH, /* a request error: the request is longer than the model's context */
    SL_FAILURE_REQUEST_ERROR,
    SL_FAILURE_TEMPORARY,
    SL_FAILURE_OTHER,
    SL_FAILURE_CLASS_COUNT
} sl_failure_class_t;

/* What a class means for the caller. */
typedef struct {
    const char *name;    /* "quota", "rate_limited", …: for logs and tests */
    bool fails_over;     /* try the next candidate (only before content reached the client) */
    bool retried;        /* eligible for a retry round (§5) */
    bool breaker_answer; /* the upstream answered sensibly: report sl_breaker_on_success */
    /*
     * The cause for sl_breaker_on_failure; NONE = do not call it. Rate
     * limits leave the breaker alone entirely (a probe they used is handed
     * back with sl_breaker_release_probe).
     */
    sl_breaker_cause_t breaker_cause;
} sl_failure_class_info_t;

/*
 * Classifies a failure. Pure and bounded: reads at most
 * SL_CLASSIFY_MAX_BODY bytes of the body (a string-aware byte scan that
 * finds the error object, never a JSON parse), does not allocate, and
 * leaves f untouched.
 */
sl_failure_class_t sl_classify_failure(const sl_failure_t *f);

/* The meaning of a class (a row of a const table). Never NULL for a valid class. */
const sl_failure_class_info_t *sl_failure_class_info(sl_failure_class_t cls);

/*
 * The message code to report a classified failure under: the class's own
 * code for quota, no balance and rejected credentials (they hold the
 * upstream), else the code of where the failure came from.
 */
sl_code_t sl_failure_code(const sl_failure_t *f, sl_failure_class_t cls);

#endif
