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

/* The bytes after seq's marker byte (0 when seq is a positive fixint). */
static int
seq_extra_bytes(uint64_t seq)
{
    return seq < 0x80 ? 0 : seq <= 0xff ? 1 : seq <= 0xffff ? 2 : seq <= 0xffffffffu ? 4 : 8;
}

/* The length of the envelope sl_outq_event_head writes for seq. */
static size_t
event_head_len(uint64_t seq)
{
    return sizeof(event_head_prefix) - 1 + 1 + (size_t)seq_extra_bytes(seq) + sizeof(event_head_suffix) - 1;
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
    static const unsigned char marker[9] = {[1] = 0xcc, [2] = 0xcd, [4] = 0xce, [8] = 0xcf};
    size_t n = sizeof(event_head_prefix) - 1;
    memcpy(out, event_head_prefix, n);
    int extra = seq_extra_bytes(seq);
    out[n++] = extra == 0 ? (unsigned char)seq : marker[extra];
    for (int i = extra - 1; i >= 0; i--)
        out[n++] = (unsigned char)(seq >> (8 * i));
    memcpy(out + n, event_head_suffix, sizeof(event_head_suffix) - 1);
    return n + sizeof(event_head_suffix) - 1;
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
    it->bytes = body->bytes.size;
    for (size_t i = 0; i < body->n; i++)
        it->bytes += event_head_len(it->seq + i);
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

size_t
sl_outq_take(sl_outq_t *q, char *out, size_t cap, size_t *big)
{
    size_t len = 0;
    *big = 0;
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
                return len;
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
                return len;
            }
            unsigned char *at = (unsigned char *)out + len;
            size_t head = sl_outq_event_head(it->seq, at);
            memcpy(at + head, it->body->bytes.data + blob_start(it->body, it->first), body_len);
            len += n;
            q->event_bytes -= run_pop(it);
        }
        remove_item(q, NULL, it);
    }
    return len;
}
