/*
 * W3C Trace Context (traceparent) and the ids of a request's spans
 * (observability.md, "OpenTelemetry traces"): parsing what a client sent,
 * formatting what each hop sends upstream, the sampling decision, and the
 * span id of a request's n-th attempt. Pure: the random ids come from the
 * caller.
 */
#ifndef SL_TRACE_CONTEXT_H
#define SL_TRACE_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_TRACEPARENT_LEN 55 /* "00-" 32 hex "-" 16 hex "-" 2 hex */

typedef struct {
    uint8_t trace_id[16];
    uint8_t span_id[8]; /* the parent span's: the client's own span */
    bool sampled;       /* trace-flags bit 0 */
} sl_trace_parent_t;

/*
 * Parses a traceparent header value: version 00 exactly, or a later
 * version (not ff) whose first 55 characters have version 00's layout and
 * which continues with '-' if longer. Lowercase hex only; an all-zero
 * trace or span id is invalid. Returns false (and leaves *out) when it is
 * not a valid traceparent: the request then starts a trace of its own.
 */
bool sl_traceparent_parse(const char *s, size_t n, sl_trace_parent_t *out);

/* Writes "00-{trace}-{span}-{01|00}" and a NUL into out. */
void sl_traceparent_format(const uint8_t trace_id[16], const uint8_t span_id[8], bool sampled,
                           char out[SL_TRACEPARENT_LEN + 1]);

/*
 * Whether a new trace (no sampled parent) is recorded at sample_ppm
 * millionths: its trace id's last 8 bytes (the random part), read as a
 * number, fall below sample_ppm / 10^6 of their range. 0 never, 10^6
 * always; the same trace id always gets the same answer.
 */
bool sl_trace_ratio_sampled(const uint8_t trace_id[16], uint32_t sample_ppm);

/*
 * The span id of the request's attempt number index (0 = its first hop):
 * derived from the request's span id, so a hop's traceparent and its span
 * agree without storing an id per attempt. Never all zero, never the
 * request's own id.
 */
void sl_trace_attempt_span_id(const uint8_t request_span[8], size_t index, uint8_t out[8]);

/* Lowercase hex of n bytes into out (2n characters and a NUL). */
void sl_trace_hex(const uint8_t *bytes, size_t n, char *out);

#endif
