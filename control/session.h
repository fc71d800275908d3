/*
 * The rules of one control connection, without IO (protocol.md): the
 * handshake's verdict, the slowing of failed attempts per address, and the
 * outbound queue — replies in order, events numbered per subscription,
 * bounded, oldest events dropped first and announced with events_dropped.
 * The endpoint (endpoint.c) moves bytes; everything here is testable with
 * plain values and a clock passed in.
 */
#ifndef SL_CONTROL_SESSION_H
#define SL_CONTROL_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sl_proto.h"

/* ---- the handshake ---------------------------------------------------------------------------- */

typedef enum { SL_HELLO_OK, SL_HELLO_BAD_KEY, SL_HELLO_MISMATCH } sl_hello_verdict_t;

/* Whether two keys are equal, in time that depends on their lengths only (not on where they differ). */
bool sl_control_keys_equal(const char *a, const char *b);

/* The verdict on a hello: the version first (a client of another version learns that, whatever its key). */
sl_hello_verdict_t sl_control_check_hello(const sl_proto_hello_msg_t *hello, const char *key, uint32_t ours);

/* ---- slowing failed attempts ------------------------------------------------------------------ */

/* Per address: failures in a row. Bounded; the oldest address is forgotten first. */
typedef struct sl_auth_guard sl_auth_guard_t;

#define SL_AUTH_GUARD_ADDRESSES    1024
#define SL_AUTH_GUARD_FORGET_MS    (10 * 60 * 1000)
#define SL_AUTH_GUARD_MAX_DELAY_MS 10000

sl_auth_guard_t *sl_auth_guard_new(void);
void sl_auth_guard_free(sl_auth_guard_t *g);

/*
 * How long to wait before answering a hello from addr at now_ms: 0 with no
 * recent failure, then 250 ms doubling per failure in a row, at most
 * SL_AUTH_GUARD_MAX_DELAY_MS. Failures older than SL_AUTH_GUARD_FORGET_MS are
 * forgotten.
 */
int64_t sl_auth_guard_delay_ms(sl_auth_guard_t *g, const char *addr, int64_t now_ms);
void sl_auth_guard_failed(sl_auth_guard_t *g, const char *addr, int64_t now_ms);
void sl_auth_guard_succeeded(sl_auth_guard_t *g, const char *addr);

/* ---- shared encoded bytes --------------------------------------------------------------------- */

/* The widths a seq takes after its msgpack marker: 0 (a positive fixint), 1, 2, 4 or 8 bytes. */
#define SL_SEQ_WIDTHS 5

/* Writable bytes before every frame sl_outq_take returns: room for the WebSocket header (lws's LWS_PRE). */
#define SL_OUTQ_HEADROOM 16

/*
 * Encoded messages back to back, shared by several queues: one drain's
 * events, each encoded once, queued for every subscriber. Control thread only.
 */
typedef struct {
    size_t refs;
    size_t n;     /* messages */
    size_t *ends; /* ends[i]: where message i ends in bytes; it starts where i - 1 ends (0 for the first) */
    size_t ends_cap;
    msgpack_sbuffer bytes;
    /*
     * The events as whole `event {seq, event}` messages whose seqs all take
     * width w, laid out once when a queue first sends them (SL_OUTQ_HEADROOM
     * bytes, then the messages); each queue writes its own seqs in before it
     * sends them. NULL until then.
     */
    char *framed[SL_SEQ_WIDTHS];
    /*
     * A frame that starts past a layout's first message lends the end of the
     * message before it as headroom: its bytes are kept here (at
     * lent_at[w], 0 = nothing lent) and put back at the next take.
     */
    size_t lent_at[SL_SEQ_WIDTHS];
    char lent_bytes[SL_SEQ_WIDTHS][SL_OUTQ_HEADROOM];
} sl_blob_t;

/* An empty blob with one reference (the caller's). */
sl_blob_t *sl_blob_new(void);
/* Appends a copy of one encoded message. */
void sl_blob_add(sl_blob_t *b, const char *data, size_t len);
/* Encodes ev straight into the blob as one more message; -1 (the blob unchanged) when it cannot be sent. */
int sl_blob_add_event(sl_blob_t *b, const sl_proto_event_t *ev);
void sl_blob_unref(sl_blob_t *b);

/* ---- the outbound queue ----------------------------------------------------------------------- */

/* Queued events above this many bytes lose the oldest (protocol.md "Streams"). */
#define SL_OUTQ_MAX_EVENT_BYTES (4u << 20)
/* Replies (which are never dropped) above this many bytes: the client asks without reading; close it. */
#define SL_OUTQ_MAX_REPLY_BYTES (64u << 20)
/*
 * What one frame carries at most, unless a single message is larger. Measured
 * with 10 subscribers at 3 400 req/s (A/B, 8-10 rounds): 32 KiB and 256 KiB
 * frames both cost the control thread more than 64 KiB (+0.8 and +0.5 µs per
 * request).
 */
#define SL_OUTQ_FRAME_BYTES (64u << 10)

typedef struct sl_outq sl_outq_t;

sl_outq_t *sl_outq_new(void);
void sl_outq_free(sl_outq_t *q);

/* Queues an encoded reply (copied). Returns false when replies exceed SL_OUTQ_MAX_REPLY_BYTES. */
bool sl_outq_push_reply(sl_outq_t *q, const char *data, size_t len);

/*
 * Queues body's encoded events (each an Event alone, sl_proto_encode_event)
 * as the next `event {seq, event}` messages of this subscription, taking a
 * reference on body (nothing for an empty one). When queued events then
 * exceed SL_OUTQ_MAX_EVENT_BYTES, the oldest are dropped (counted for the
 * next events_dropped).
 */
void sl_outq_push_event(sl_outq_t *q, sl_blob_t *body);

/*
 * A new subscription starts (subscribe, also to resync): queued events of
 * the old one are dropped without being counted, seq restarts at 0.
 */
void sl_outq_restart(sl_outq_t *q);

/* count events of this subscription were lost before they reached the queue (the bus dropped them). */
void sl_outq_note_dropped(sl_outq_t *q, uint64_t count);

/* The seq of the last event queued in this subscription (what a snapshot taken now reflects). */
uint64_t sl_outq_seq(const sl_outq_t *q);

/* Whether anything waits to be sent. */
bool sl_outq_pending(const sl_outq_t *q);

/*
 * The next frame, removed from the queue: events_dropped first when events
 * were dropped, then messages in order, back to back, while they fit in cap
 * (>= SL_OUTQ_FRAME_BYTES). A run of events of one drain's batch whose seqs
 * all take the same width is not copied: the frame is the batch's own
 * laid-out messages with this queue's seqs written in, shared with the other
 * queues and valid until the next take on any of them.
 * Anything else is written into out (cap bytes, with SL_OUTQ_HEADROOM
 * before it). Returns the frame with SL_OUTQ_HEADROOM writable bytes before
 * it and *len its length, or NULL when nothing waits or when the next
 * message is larger than cap: then *big is its size and the caller calls
 * again with that much room.
 */
char *sl_outq_take(sl_outq_t *q, char *out, size_t cap, size_t *len, size_t *big);

/* Events dropped since the queue was made (for logs and tests). */
uint64_t sl_outq_dropped_total(const sl_outq_t *q);

/* The longest envelope: map header, "kind" "event" "seq" <uint64> "event". */
#define SL_OUTQ_EVENT_HEAD_MAX 32

/* Writes the `event {seq, event}` envelope around an encoded Event, as sl_proto_encode would; returns its
 * length. */
size_t sl_outq_event_head(uint64_t seq, unsigned char out[SL_OUTQ_EVENT_HEAD_MAX]);

#endif
