/*
 * Incremental Server-Sent Events framing (the WHATWG event-stream format), as
 * the upstream streams of Anthropic, OpenAI and Gemini use it.
 *
 * The caller keeps the bytes it has not consumed yet in one contiguous buffer
 * (the hold buffer, or the socket buffer) and asks for the first complete
 * event in it. Nothing is allocated and nothing is copied for the usual event
 * (one `event:` line, one `data:` line): the event is described by spans into
 * the caller's buffer. The scanner remembers how far it searched, so an event
 * that arrives in many reads is searched once, not once per read.
 */
#ifndef SL_SSE_H
#define SL_SSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A sensible bound for one upstream event; the opening hold is capped at the same size. */
#define SL_SSE_MAX_EVENT_DEFAULT (1024 * 1024)

typedef enum {
    SL_SSE_MORE,      /* no complete event yet: call again with more bytes appended */
    SL_SSE_EVENT,     /* *ev describes the first event; the caller drops ev->len bytes */
    SL_SSE_TOO_LARGE, /* the event exceeds max_event (or its joined data the scratch): a broken stream */
} sl_sse_status_t;

/* Where the search for the end of the pending event stopped. */
typedef enum { SL_SSE_AT_LINE_START, SL_SSE_IN_LINE, SL_SSE_AFTER_CR } sl_sse_line_t;

/*
 * Per-stream state. Fill it with sl_sse_init; the fields are the scanner's
 * own and are only read by tests. It holds offsets, never pointers, so the
 * caller may move or grow its buffer between calls.
 */
typedef struct {
    size_t max_event;   /* bytes, blank lines and BOM included */
    char *scratch;      /* where the data lines of a multi-line event are joined; may be NULL */
    size_t scratch_cap; /* bytes */
    size_t scanned;     /* bytes of the pending event already searched */
    size_t first_line;  /* offset of the pending event's first non-blank line */
    sl_sse_line_t line;
    bool seen_line; /* the pending event has a non-blank line: the next blank line ends it */
    bool started;   /* past the stream's first bytes, where a UTF-8 BOM may sit */
} sl_sse_scanner_t;

/*
 * One event. The spans point into the caller's buffer (or into the scanner's
 * scratch for joined data) and stay valid until the caller drops or changes
 * those bytes, or makes the next call.
 */
typedef struct {
    size_t len;          /* bytes of the buffer this event took, through its blank line */
    const char *name;    /* the last `event:` value; NULL when absent or empty */
    size_t name_len;     /* its bytes; 0 when absent */
    const char *data;    /* the `data:` values joined with "\n"; NULL when there is no data line */
    size_t data_len;     /* its bytes (a data line may be empty: data != NULL, data_len 0) */
    uint32_t data_lines; /* number of `data:` lines */
    bool comment_only;   /* neither a data line nor an event name: a keep-alive (`: ping`), id:/retry: only */
} sl_sse_event_t;

/*
 * Prepares a scanner for a new stream. Events longer than max_event bytes are
 * reported as SL_SSE_TOO_LARGE, so a caller never buffers more than max_event
 * plus one read. scratch (caller-owned, may be NULL with cap 0) is only used
 * when an event has several data lines; providers send one, so a few KiB are
 * plenty, and a longer join is reported as SL_SSE_TOO_LARGE rather than cut.
 * Joined data lives in the scratch only until the next sl_sse_next call, so
 * the scanners of one thread may share one scratch when each event is used
 * before the next call on any of them.
 */
void sl_sse_init(sl_sse_scanner_t *s, size_t max_event, char *scratch, size_t scratch_cap);

/*
 * Looks for the first complete event in buf[0..len), the stream's unconsumed
 * bytes. Blank lines before an event belong to it (they dispatch nothing in
 * SSE), and so does a UTF-8 BOM at the very start of the stream.
 *
 * SL_SSE_EVENT: *ev is filled; the caller must drop ev->len bytes from the
 * front before the next call. SL_SSE_MORE: *ev is untouched; the next call
 * must pass the same bytes with more appended. SL_SSE_TOO_LARGE: *ev is
 * untouched and the stream cannot go on (the scanner must not be used again
 * without sl_sse_init). Bytes still unconsumed when the stream ends are an
 * event cut short, or only blank lines.
 */
sl_sse_status_t sl_sse_next(sl_sse_scanner_t *s, const char *buf, size_t len, sl_sse_event_t *ev);

/* Whether the event's name is exactly name (a NUL-terminated literal). False when it has none. */
bool sl_sse_event_is(const sl_sse_event_t *ev, const char *name);

#endif
