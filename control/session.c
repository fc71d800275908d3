#include "session.h"

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "core/xalloc.h"

/* ---- the handshake ---------------------------------------------------------------------------- */

bool
sl_control_keys_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    /* Every byte of the longer is looked at, whatever differs first. */
    size_t n = la > lb ? la : lb;
    unsigned char diff = la != lb;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < la ? (unsigned char)a[i] : 0;
        unsigned char y = i < lb ? (unsigned char)b[i] : 0;
        diff |= x ^ y;
    }
    return diff == 0;
}

sl_hello_verdict_t
sl_control_check_hello(const sl_proto_hello_msg_t *hello, const char *key, uint32_t ours)
{
    if (hello->protocol != ours)
        return SL_HELLO_MISMATCH;
    if (key == NULL || hello->key == NULL || !sl_control_keys_equal(hello->key, key))
        return SL_HELLO_BAD_KEY;
    return SL_HELLO_OK;
}

/* ---- slowing failed attempts ------------------------------------------------------------------ */

typedef struct {
    char addr[64];
    uint32_t failures;
    int64_t last_ms;
} guard_entry_t;

struct sl_auth_guard {
    guard_entry_t entries[SL_AUTH_GUARD_ADDRESSES];
    size_t n;
};

sl_auth_guard_t *
sl_auth_guard_new(void)
{
    return sl_xcalloc(1, sizeof(sl_auth_guard_t));
}

void
sl_auth_guard_free(sl_auth_guard_t *g)
{
    free(g);
}

static guard_entry_t *
guard_find(sl_auth_guard_t *g, const char *addr)
{
    for (size_t i = 0; i < g->n; i++)
        if (strncmp(g->entries[i].addr, addr, sizeof(g->entries[i].addr) - 1) == 0)
            return &g->entries[i];
    return NULL;
}

int64_t
sl_auth_guard_delay_ms(sl_auth_guard_t *g, const char *addr, int64_t now_ms)
{
    guard_entry_t *e = guard_find(g, addr);
    if (e == NULL || e->failures == 0 || now_ms - e->last_ms > SL_AUTH_GUARD_FORGET_MS)
        return 0;
    int64_t delay = 250;
    for (uint32_t i = 1; i < e->failures && delay < SL_AUTH_GUARD_MAX_DELAY_MS; i++)
        delay *= 2;
    return delay < SL_AUTH_GUARD_MAX_DELAY_MS ? delay : SL_AUTH_GUARD_MAX_DELAY_MS;
}

void
sl_auth_guard_failed(sl_auth_guard_t *g, const char *addr, int64_t now_ms)
{
    guard_entry_t *e = guard_find(g, addr);
    if (e == NULL) {
        if (g->n < SL_AUTH_GUARD_ADDRESSES) {
            e = &g->entries[g->n++];
        } else {
            /* Full: the address that failed longest ago makes room. */
            e = &g->entries[0];
            for (size_t i = 1; i < g->n; i++)
                if (g->entries[i].last_ms < e->last_ms)
                    e = &g->entries[i];
        }
        memset(e, 0, sizeof(*e));
        strncpy(e->addr, addr, sizeof(e->addr) - 1);
    }
    if (now_ms - e->last_ms > SL_AUTH_GUARD_FORGET_MS)
        e->failures = 0;
    e->failures++;
    e->last_ms = now_ms;
}

void
sl_auth_guard_succeeded(sl_auth_guard_t *g, const char *addr)
{
    guard_entry_t *e = guard_find(g, addr);
    if (e != NULL)
        *e = g->entries[--g->n];
}

/* ---- shared encoded bytes --------------------------------------------------------------------- */

sl_blob_t *
sl_blob_new(void)
{
    sl_blob_t *b = sl_xcalloc(1, sizeof(*b));
    b->refs = 1;
    return b;
}

/* Records that a message ends where the bytes end now. */
static void
blob_end_message(sl_blob_t *b)
{
    if (b->n == b->ends_cap) {
        b->ends_cap = b->ends_cap ? b->ends_cap * 2 : 16;
        b->ends = sl_xrealloc(b->ends, b->ends_cap * sizeof(*b->ends));
    }
    b->ends[b->n++] = b->bytes.size;
}

void
sl_blob_add(sl_blob_t *b, const char *data, size_t len)
{
    if (sl__proto_put(&b->bytes, data, len) != 0)
        abort();
    blob_end_message(b);
}

int
sl_blob_add_event(sl_blob_t *b, const sl_proto_event_t *ev)
{
    if (sl_proto_encode_event(ev, &b->bytes) != 0)
        return -1;
    blob_end_message(b);
    return 0;
}

void
sl_blob_unref(sl_blob_t *b)
{
    if (b != NULL && --b->refs == 0) {
        free(b->ends);
        msgpack_sbuffer_destroy(&b->bytes);
        for (int w = 0; w < SL_SEQ_WIDTHS; w++)
            free(b->framed[w]);
        free(b);
    }
}

/* Where message i of b starts, and its length. */
static size_t
blob_start(const sl_blob_t *b, size_t i)
{
    return i > 0 ? b->ends[i - 1] : 0;
}

static size_t
blob_len(const sl_blob_t *b, size_t i)
{
    return b->ends[i] - blob_start(b, i);
}

/* ---- the outbound queue ----------------------------------------------------------------------- */

/*
 * A reply (one message of body), or a run of events: body's messages from
 * first on, numbered from seq. One run per subscriber per drain, however
 * many events it holds.
 */
typedef struct item {
    struct item *next;
    sl_blob_t *body;
    size_t first;
    uint64_t seq;
    size_t bytes; /* what is left to send, envelopes included */
    bool is_event;
} item_t;

/* Items freed are kept for reuse, up to this many. */
#define SPARE_ITEMS_MAX 256

struct sl_outq {
    item_t *head, *tail;
    item_t *spare; /* reusable items, linked by next */
    size_t n_spare;
    size_t event_bytes, reply_bytes;
    uint64_t seq;
    uint64_t dropped_pending; /* to announce with events_dropped */
    uint64_t dropped_total;
    sl_blob_t *lent; /* the batch the last frame taken points into: kept until the next take */
};

sl_outq_t *
sl_outq_new(void)
{
    return sl_xcalloc(1, sizeof(sl_outq_t));
}

static item_t *
item_new(sl_outq_t *q)
{
    item_t *it = q->spare;
    if (it == NULL)
        return sl_xcalloc(1, sizeof(*it));
    q->spare = it->next;
    q->n_spare--;
    memset(it, 0, sizeof(*it));
    return it;
}

static void
item_free(sl_outq_t *q, item_t *it)
{
    sl_blob_unref(it->body);
    if (q->n_spare < SPARE_ITEMS_MAX) {
        it->next = q->spare;
        q->spare = it;
        q->n_spare++;
    } else {
        free(it);
    }
}

void
sl_outq_free(sl_outq_t *q)
{
    if (q == NULL)
        return;
    for (item_t *it = q->head, *next; it != NULL; it = next) {
        next = it->next;
        sl_blob_unref(it->body);
        free(it);
    }
    sl_blob_unref(q->lent);
    for (item_t *it = q->spare, *next; it != NULL; it = next) {
        next = it->next;
        free(it);
    }
    free(q);
}

static void
append(sl_outq_t *q, item_t *it)
{
    if (q->tail != NULL)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    if (it->is_event)
        q->event_bytes += it->bytes;
    else
        q->reply_bytes += it->bytes;
}

/* Unlinks it (whose predecessor is prev, NULL at the head) and frees it. */
static void
remove_item(sl_outq_t *q, item_t *prev, item_t *it)
{
    if (prev != NULL)
        prev->next = it->next;
    else
        q->head = it->next;
    if (q->tail == it)
        q->tail = prev;
    if (it->is_event)
        q->event_bytes -= it->bytes;
    else
        q->reply_bytes -= it->bytes;
    item_free(q, it);
}

bool
sl_outq_push_reply(sl_outq_t *q, const char *data, size_t len)
{
    if (q->reply_bytes + len > SL_OUTQ_MAX_REPLY_BYTES)
        return false;
    item_t *it = item_new(q);
    it->body = sl_blob_new();
    sl_blob_add(it->body, data, len);
    it->bytes = len;
    append(q, it);
    return true;
}

/*
 * The map of sl_proto's `event` message, {kind: "event", seq, event}, around
 * the event's own bytes, written by hand: the packer's calls cost more than
 * the event's copy, once per event per subscriber. seq takes msgpack's
 * shortest unsigned form, as msgpack_pack_uint64 writes it (the unit test
 * compares with sl_proto_encode).
 */
static const unsigned char event_head_prefix[] = "\x83\xa4kind\xa5"
                                                 "event\xa3seq";
static const unsigned char event_head_suffix[] = "\xa5"
                                                 "event";

/* Which of the SL_SEQ_WIDTHS seq takes, and how many bytes each is after the marker byte. */
static const int width_bytes[SL_SEQ_WIDTHS] = {0, 1, 2, 4, 8};
/* The first seq too large for each width but the last. */
static const uint64_t width_end[SL_SEQ_WIDTHS - 1] = {0x80, 0x100, 0x10000, UINT64_C(0x100000000)};

static int
seq_width(uint64_t seq)
{
    int w = 0;
    while (w < SL_SEQ_WIDTHS - 1 && seq >= width_end[w])
        w++;
    return w;
}

/* The length of the envelope around an event whose seq takes width w. */
static size_t
width_head_len(int w)
{
    return sizeof(event_head_prefix) - 1 + 1 + (size_t)width_bytes[w] + sizeof(event_head_suffix) - 1;
}

/* The length of the envelope sl_outq_event_head writes for seq. */
static size_t
event_head_len(uint64_t seq)
{
    return width_head_len(seq_width(seq));
}

/* The envelopes of n events numbered from seq, together: per width, not per event. */
static size_t
heads_len(uint64_t seq, size_t n)
{
    size_t total = 0;
    while (n > 0) {
        int w = seq_width(seq);
        size_t k = n;
        if (w < SL_SEQ_WIDTHS - 1 && width_end[w] - seq < k)
            k = (size_t)(width_end[w] - seq);
        total += k * width_head_len(w);
        seq += k;
        n -= k;
    }
    return total;
}

/* Writes seq, which takes width w, where the envelope has it: its marker byte (or the fixint), then
 * big-endian. */
static void
write_seq(unsigned char *at, uint64_t seq, int w)
{
    static const unsigned char marker[SL_SEQ_WIDTHS] = {0, 0xcc, 0xcd, 0xce, 0xcf};
    int extra = width_bytes[w];
    at[0] = w == 0 ? (unsigned char)seq : marker[w];
    for (int i = 0; i < extra; i++)
        at[1 + i] = (unsigned char)(seq >> (8 * (extra - 1 - i)));
}

/* Takes the first event off a run (sent or dropped): what it was worth in bytes. */
static size_t
run_pop(item_t *it)
{
    size_t n = event_head_len(it->seq) + blob_len(it->body, it->first);
    it->first++;
    it->seq++;
    it->bytes -= n;
    return n;
}

size_t
sl_outq_event_head(uint64_t seq, unsigned char out[SL_OUTQ_EVENT_HEAD_MAX])
{
    int w = seq_width(seq);
    size_t n = sizeof(event_head_prefix) - 1;
    memcpy(out, event_head_prefix, n);
    write_seq(out + n, seq, w);
    n += 1 + (size_t)width_bytes[w];
    memcpy(out + n, event_head_suffix, sizeof(event_head_suffix) - 1);
    return n + sizeof(event_head_suffix) - 1;
}

/*
 * b's events as whole messages for seqs of width w, laid out once: message
 * i starts at SL_OUTQ_HEADROOM + blob_start(b, i) + i * width_head_len(w),
 * its seq sizeof(event_head_prefix) - 1 bytes in (written by each sender).
 */
static char *
framed_layout(sl_blob_t *b, int w)
{
    if (b->framed[w] != NULL)
        return b->framed[w];
    size_t head = width_head_len(w);
    uint64_t placeholder = w == 0 ? 0 : width_end[w - 1]; /* a seq of width w */
    char *f = sl_xmalloc(SL_OUTQ_HEADROOM + b->bytes.size + b->n * head);
    unsigned char *at = (unsigned char *)f + SL_OUTQ_HEADROOM;
    for (size_t i = 0; i < b->n; i++) {
        size_t body_len = blob_len(b, i);
        sl_outq_event_head(placeholder, at);
        memcpy(at + head, b->bytes.data + blob_start(b, i), body_len);
        at += head + body_len;
    }
    b->framed[w] = f;
    return f;
}

void
sl_outq_push_event(sl_outq_t *q, sl_blob_t *body)
{
    if (body->n == 0)
        return;
    item_t *it = item_new(q);
    body->refs++;
    it->body = body;
    it->is_event = true;
    it->seq = q->seq + 1;
    it->bytes = body->bytes.size + heads_len(it->seq, body->n);
    q->seq += body->n;
    append(q, it);
    /* Oldest events go first; replies stay where they are. */
    item_t *prev = NULL, *cur = q->head;
    while (q->event_bytes > SL_OUTQ_MAX_EVENT_BYTES && cur != NULL) {
        item_t *next = cur->next;
        if (!cur->is_event) {
            prev = cur;
            cur = next;
            continue;
        }
        q->event_bytes -= run_pop(cur);
        q->dropped_pending++;
        q->dropped_total++;
        if (cur->first == cur->body->n) {
            remove_item(q, prev, cur);
            cur = next;
        }
    }
}

void
sl_outq_restart(sl_outq_t *q)
{
    item_t *prev = NULL, *cur = q->head;
    while (cur != NULL) {
        item_t *next = cur->next;
        if (cur->is_event)
            remove_item(q, prev, cur);
        else
            prev = cur;
        cur = next;
    }
    q->seq = 0;
    q->dropped_pending = 0;
}

void
sl_outq_note_dropped(sl_outq_t *q, uint64_t count)
{
    q->dropped_pending += count;
    q->dropped_total += count;
}

uint64_t
sl_outq_seq(const sl_outq_t *q)
{
    return q->seq;
}

bool
sl_outq_pending(const sl_outq_t *q)
{
    return q->head != NULL || q->dropped_pending > 0;
}

uint64_t
sl_outq_dropped_total(const sl_outq_t *q)
{
    return q->dropped_total;
}

/* Puts back the bytes a frame of b's layout for width w borrowed as its headroom (lws wrote its header
 * there). */
static void
return_headroom(sl_blob_t *b, int w)
{
    if (b->lent_at[w] == 0)
        return;
    memcpy(b->framed[w] + b->lent_at[w], b->lent_bytes[w], SL_OUTQ_HEADROOM);
    b->lent_at[w] = 0;
}

/*
 * The run at the head as a frame of its batch's laid-out messages with this
 * queue's seqs written in: as many events as fit in cap and keep the first
 * one's seq width. NULL when not even one does (the copy path then says how
 * big it is).
 */
static char *
take_shared(sl_outq_t *q, item_t *it, size_t cap, size_t *len)
{
    sl_blob_t *b = it->body;
    int w = seq_width(it->seq);
    size_t head = width_head_len(w), first = it->first, k = first, n = b->n;
    if (w < SL_SEQ_WIDTHS - 1 && width_end[w] - it->seq < n - first)
        n = first + (size_t)(width_end[w] - it->seq); /* the seqs of this width left */
    /* Message i starts at blob_start(b, i) + i * head past the layout's headroom. */
    size_t start = blob_start(b, first) + first * head;
    while (k < n && b->ends[k] + (k + 1) * head - start <= cap)
        k++;
    if (k == first)
        return NULL;
    char *layout = framed_layout(b, w);
    return_headroom(b, w);
    if (start > 0) {
        b->lent_at[w] = start;
        memcpy(b->lent_bytes[w], layout + start, SL_OUTQ_HEADROOM);
    }
    char *frame = layout + SL_OUTQ_HEADROOM + start;
    unsigned char *seq_at = (unsigned char *)layout + SL_OUTQ_HEADROOM + sizeof(event_head_prefix) - 1;
    for (size_t i = first; i < k; i++)
        write_seq(seq_at + blob_start(b, i) + i * head, it->seq + (i - first), w);
    *len = b->ends[k - 1] + k * head - start;
    b->refs++;
    q->lent = b;
    it->first = k;
    it->seq += k - first;
    it->bytes -= *len;
    q->event_bytes -= *len;
    if (it->first == b->n)
        remove_item(q, NULL, it);
    return frame;
}

static char *
copied_frame(char *out, size_t len, size_t *len_out)
{
    *len_out = len;
    return len > 0 ? out : NULL;
}

char *
sl_outq_take(sl_outq_t *q, char *out, size_t cap, size_t *len_out, size_t *big)
{
    size_t len = 0;
    *big = 0;
    *len_out = 0;
    sl_blob_unref(q->lent);
    q->lent = NULL;
    if (q->dropped_pending == 0 && q->head != NULL && q->head->is_event) {
        char *frame = take_shared(q, q->head, cap, len_out);
        if (frame != NULL)
            return frame;
    }
    if (q->dropped_pending > 0) {
        sl_proto_message_t m;
        sl_proto_message_init(&m, SL_PROTO_MESSAGE_EVENTS_DROPPED);
        m.events_dropped.count = q->dropped_pending;
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        if (sl_proto_encode(&m, &sb) == 0 && sb.size <= cap) {
            memcpy(out, sb.data, sb.size);
            len = sb.size;
            q->dropped_pending = 0;
        }
        msgpack_sbuffer_destroy(&sb);
    }
    while (q->head != NULL) {
        item_t *it = q->head;
        if (!it->is_event) {
            if (len + it->bytes > cap) {
                if (len == 0)
                    *big = it->bytes;
                return copied_frame(out, len, len_out);
            }
            memcpy(out + len, it->body->bytes.data, it->bytes);
            len += it->bytes;
            remove_item(q, NULL, it);
            continue;
        }
        while (it->first < it->body->n) {
            size_t body_len = blob_len(it->body, it->first);
            size_t n = event_head_len(it->seq) + body_len;
            if (len + n > cap) {
                if (len == 0)
                    *big = n;
                return copied_frame(out, len, len_out);
            }
            unsigned char *at = (unsigned char *)out + len;
            size_t head = sl_outq_event_head(it->seq, at);
            memcpy(at + head, it->body->bytes.data + blob_start(it->body, it->first), body_len);
            len += n;
            q->event_bytes -= run_pop(it);
        }
        remove_item(q, NULL, it);
    }
    return copied_frame(out, len, len_out);
}
