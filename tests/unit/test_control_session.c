/* control/session.c: the handshake verdict, the slowing of failed attempts, and the outbound queue. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "session.h"

/* ---- keys and hello ----------------------------------------------------------------------------- */

Test(keys, equal_only_when_every_byte_and_the_length_match)
{
    cr_assert(sl_control_keys_equal("secret-key", "secret-key"));
    cr_assert(sl_control_keys_equal("", ""));
    cr_assert_not(sl_control_keys_equal("secret-key", "Secret-key"), "first byte");
    cr_assert_not(sl_control_keys_equal("secret-key", "secret-kez"), "last byte");
    cr_assert_not(sl_control_keys_equal("secret-key", "secret-key2"), "longer");
    cr_assert_not(sl_control_keys_equal("secret-key", "secret"), "a prefix");
    cr_assert_not(sl_control_keys_equal("", "x"));
}

static sl_proto_hello_msg_t
hello(uint32_t protocol, const char *key)
{
    return (sl_proto_hello_msg_t){.protocol = protocol, .key = (char *)key, .client = (char *)"test"};
}

Test(hello, the_version_is_checked_before_the_key)
{
    sl_proto_hello_msg_t h = hello(2, "wrong");
    cr_assert_eq(sl_control_check_hello(&h, "right", 1), SL_HELLO_MISMATCH);
    h = hello(1, "wrong");
    cr_assert_eq(sl_control_check_hello(&h, "right", 1), SL_HELLO_BAD_KEY);
    h = hello(1, "right");
    cr_assert_eq(sl_control_check_hello(&h, "right", 1), SL_HELLO_OK);
    cr_assert_eq(sl_control_check_hello(&h, NULL, 1), SL_HELLO_BAD_KEY, "no key configured: nobody gets in");
}

/* ---- the auth guard ----------------------------------------------------------------------------- */

Test(guard, failures_in_a_row_double_the_wait_up_to_the_cap)
{
    sl_auth_guard_t *g = sl_auth_guard_new();
    cr_assert_eq(sl_auth_guard_delay_ms(g, "10.0.0.1", 1000), 0);
    sl_auth_guard_failed(g, "10.0.0.1", 1000);
    cr_assert_eq(sl_auth_guard_delay_ms(g, "10.0.0.1", 1001), 250);
    sl_auth_guard_failed(g, "10.0.0.1", 1002);
    cr_assert_eq(sl_auth_guard_delay_ms(g, "10.0.0.1", 1003), 500);
    for (int i = 0; i < 20; i++)
        sl_auth_guard_failed(g, "10.0.0.1", 1004 + i);
    cr_assert_eq(sl_auth_guard_delay_ms(g, "10.0.0.1", 1100), SL_AUTH_GUARD_MAX_DELAY_MS);
    cr_assert_eq(sl_auth_guard_delay_ms(g, "10.0.0.2", 1100), 0, "another address is not slowed");
    sl_auth_guard_free(g);
}

Test(guard, a_success_or_a_long_quiet_forgets_the_failures)
{
    sl_auth_guard_t *g = sl_auth_guard_new();
    sl_auth_guard_failed(g, "a", 0);
    sl_auth_guard_failed(g, "a", 10);
    sl_auth_guard_succeeded(g, "a");
    cr_assert_eq(sl_auth_guard_delay_ms(g, "a", 20), 0);
    sl_auth_guard_failed(g, "b", 0);
    cr_assert_eq(sl_auth_guard_delay_ms(g, "b", SL_AUTH_GUARD_FORGET_MS), 250);
    cr_assert_eq(sl_auth_guard_delay_ms(g, "b", SL_AUTH_GUARD_FORGET_MS + 1), 0);
    sl_auth_guard_failed(g, "b", SL_AUTH_GUARD_FORGET_MS + 2);
    cr_assert_eq(sl_auth_guard_delay_ms(g, "b", SL_AUTH_GUARD_FORGET_MS + 3), 250, "the old streak is gone");
    sl_auth_guard_free(g);
}

Test(guard, a_full_table_forgets_the_address_that_failed_longest_ago)
{
    sl_auth_guard_t *g = sl_auth_guard_new();
    char addr[32];
    for (int i = 0; i < SL_AUTH_GUARD_ADDRESSES; i++) {
        snprintf(addr, sizeof(addr), "10.1.%d.%d", i / 256, i % 256);
        sl_auth_guard_failed(g, addr, 100 + i);
    }
    sl_auth_guard_failed(g, "192.168.0.1", 5000);
    cr_assert_eq(sl_auth_guard_delay_ms(g, "10.1.0.0", 5001), 0, "the oldest made room");
    cr_assert_eq(sl_auth_guard_delay_ms(g, "10.1.0.1", 5001), 250);
    cr_assert_eq(sl_auth_guard_delay_ms(g, "192.168.0.1", 5001), 250);
    sl_auth_guard_free(g);
}

/* ---- the outbound queue ------------------------------------------------------------------------- */

static void
event_cancelled(sl_proto_event_t *ev, uint64_t id, size_t pad)
{
    sl_proto_event_init(ev, SL_PROTO_EVENT_REQUEST_CANCELLED);
    ev->request_cancelled.id = id;
    ev->request_cancelled.duration_ms = pad;
}

static sl_blob_t *
encoded_event(uint64_t id, size_t pad)
{
    sl_proto_event_t ev;
    event_cancelled(&ev, id, pad);
    sl_blob_t *b = sl_blob_new();
    cr_assert_eq(sl_blob_add_event(b, &ev), 0);
    return b;
}

/* A blob of n events, ids from first_id on: one drain's batch. */
static sl_blob_t *
encoded_batch(uint64_t first_id, size_t n)
{
    sl_blob_t *batch = sl_blob_new();
    for (size_t i = 0; i < n; i++) {
        sl_proto_event_t ev;
        event_cancelled(&ev, first_id + i, 0);
        cr_assert_eq(sl_blob_add_event(batch, &ev), 0);
    }
    return batch;
}

Test(blob, events_are_encoded_back_to_back_and_one_that_cannot_be_sent_leaves_it_unchanged)
{
    sl_blob_t *b = encoded_batch(1, 2);
    size_t two = b->bytes.size;
    sl_proto_event_t bad;
    sl_proto_event_init(&bad, SL_PROTO_EVENT_REQUEST_FAILED);
    bad.request_failed.id = 3;
    bad.request_failed.source = (sl_proto_failure_source_t)99; /* written after id and at_ms */
    cr_assert_eq(sl_blob_add_event(b, &bad), -1);
    cr_assert_eq(b->n, 2);
    cr_assert_eq(b->bytes.size, two);
    cr_assert_eq(b->ends[1], two);
    cr_assert_eq(b->ends[0] * 2, two, "two events of the same size");
    sl_blob_unref(b);
}

/* Every message of a frame, decoded. */
static size_t
decode_all(const char *buf, size_t len, sl_proto_message_t *out, size_t cap)
{
    size_t n = 0, off = 0;
    while (off < len) {
        cr_assert_lt(n, cap);
        sl_proto_error_t err;
        size_t used;
        cr_assert_eq(sl_proto_decode(buf + off, len - off, &out[n], &used, &err), 0, "%s: %s", err.path,
                     err.detail);
        off += used;
        n++;
    }
    return n;
}

static void
free_all(sl_proto_message_t *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sl_proto_message_free(&m[i]);
}

Test(outq, the_event_envelope_is_what_the_codec_writes_for_the_whole_message)
{
    const uint64_t seqs[] = {0,
                             1,
                             127,
                             128,
                             255,
                             256,
                             65535,
                             65536,
                             70000,
                             0xffffffffu,
                             UINT64_C(1) << 32,
                             UINT64_C(1) << 40,
                             UINT64_MAX};
    for (size_t i = 0; i < sizeof(seqs) / sizeof(seqs[0]); i++) {
        sl_proto_message_t m;
        sl_proto_message_init(&m, SL_PROTO_MESSAGE_EVENT);
        m.event.seq = seqs[i];
        sl_proto_event_init(&m.event.event, SL_PROTO_EVENT_ROWS_DROPPED);
        m.event.event.rows_dropped.count = 3;
        msgpack_sbuffer whole, body;
        msgpack_sbuffer_init(&whole);
        msgpack_sbuffer_init(&body);
        cr_assert_eq(sl_proto_encode(&m, &whole), 0);
        cr_assert_eq(sl_proto_encode_event(&m.event.event, &body), 0);
        unsigned char head[SL_OUTQ_EVENT_HEAD_MAX];
        size_t head_len = sl_outq_event_head(seqs[i], head);
        cr_assert_eq(head_len + body.size, whole.size);
        cr_assert_eq(memcmp(whole.data, head, head_len), 0, "seq %llu", (unsigned long long)seqs[i]);
        cr_assert_eq(memcmp(whole.data + head_len, body.data, body.size), 0);
        msgpack_sbuffer_destroy(&whole);
        msgpack_sbuffer_destroy(&body);
        sl_proto_message_free(&m);
    }
}

Test(outq, replies_and_events_go_in_order_in_one_frame_with_seq_counting_from_one)
{
    sl_outq_t *q = sl_outq_new();
    cr_assert_not(sl_outq_pending(q));
    sl_proto_message_t ok;
    sl_proto_message_init(&ok, SL_PROTO_MESSAGE_OK);
    ok.ok.req = 4;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    sl_proto_encode(&ok, &sb);
    cr_assert(sl_outq_push_reply(q, sb.data, sb.size));
    for (uint64_t id = 1; id <= 3; id++) {
        sl_blob_t *b = encoded_event(id, 0);
        sl_outq_push_event(q, b);
        sl_blob_unref(b);
    }
    cr_assert_eq(sl_outq_seq(q), 3);
    char frame[SL_OUTQ_FRAME_BYTES];
    size_t big;
    size_t len;
    const char *f = sl_outq_take(q, frame, sizeof(frame), &len, &big);
    cr_assert_eq(big, 0);
    cr_assert_eq(f, frame, "a reply first: copied");
    sl_proto_message_t got[8];
    size_t n = decode_all(f, len, got, 8);
    cr_assert_eq(n, 4);
    cr_assert_eq(got[0].kind, SL_PROTO_MESSAGE_OK);
    cr_assert_eq(got[0].ok.req, 4);
    for (size_t i = 1; i < 4; i++) {
        cr_assert_eq(got[i].kind, SL_PROTO_MESSAGE_EVENT);
        cr_assert_eq(got[i].event.seq, i);
        cr_assert_eq(got[i].event.event.request_cancelled.id, i);
    }
    cr_assert_not(sl_outq_pending(q));
    free_all(got, n);
    msgpack_sbuffer_destroy(&sb);
    sl_proto_message_free(&ok);
    sl_outq_free(q);
}

Test(outq, a_restart_drops_the_old_subscriptions_events_but_keeps_replies)
{
    sl_outq_t *q = sl_outq_new();
    sl_blob_t *b = encoded_event(9, 0);
    sl_outq_push_event(q, b);
    cr_assert(sl_outq_push_reply(q, "\x80", 1)); /* an empty map stands for a reply */
    sl_outq_push_event(q, b);
    sl_outq_restart(q);
    cr_assert_eq(sl_outq_seq(q), 0);
    sl_outq_push_event(q, b);
    sl_blob_unref(b);
    char frame[SL_OUTQ_FRAME_BYTES];
    size_t big;
    size_t len;
    const char *f = sl_outq_take(q, frame, sizeof(frame), &len, &big);
    cr_assert_eq((unsigned char)f[0], 0x80, "the reply stayed, first");
    sl_proto_message_t got[4];
    size_t n = decode_all(f + 1, len - 1, got, 4);
    cr_assert_eq(n, 1);
    cr_assert_eq(got[0].event.seq, 1, "the new subscription counts from 1");
    free_all(got, n);
    sl_outq_free(q);
}

Test(outq, overflow_drops_the_oldest_events_and_says_so_first)
{
    sl_outq_t *q = sl_outq_new();
    sl_blob_t *b = encoded_event(1, 0);
    size_t per = b->bytes.size + 11; /* the envelope is at most 11 bytes for these seqs */
    size_t fill = SL_OUTQ_MAX_EVENT_BYTES / per + 50;
    cr_assert(sl_outq_push_reply(q, "\x80", 1));
    for (size_t i = 0; i < fill; i++)
        sl_outq_push_event(q, b);
    sl_blob_unref(b);
    uint64_t dropped = sl_outq_dropped_total(q);
    cr_assert_gt(dropped, 0);
    cr_assert_eq(sl_outq_seq(q), fill);
    char *frame = malloc(SL_OUTQ_FRAME_BYTES);
    size_t big;
    size_t len;
    const char *f = sl_outq_take(q, frame, SL_OUTQ_FRAME_BYTES, &len, &big);
    sl_proto_message_t first;
    sl_proto_error_t err;
    size_t used;
    cr_assert_eq(sl_proto_decode(f, len, &first, &used, &err), 0);
    cr_assert_eq(first.kind, SL_PROTO_MESSAGE_EVENTS_DROPPED);
    cr_assert_eq(first.events_dropped.count, dropped);
    cr_assert_eq((unsigned char)f[used], 0x80, "the reply was not dropped");
    sl_proto_message_t next;
    cr_assert_eq(sl_proto_decode(f + used + 1, len - used - 1, &next, NULL, &err), 0);
    cr_assert_eq(next.event.seq, dropped + 1, "the oldest went; the survivors keep their seq");
    sl_proto_message_free(&first);
    sl_proto_message_free(&next);
    free(frame);
    sl_outq_free(q);
}

Test(outq, one_batch_goes_to_every_queue_in_runs_split_across_frames_with_seq_continuous)
{
    /* More than a frame's worth: the run goes out in several takes, each frame whole messages. */
    sl_blob_t *batch = encoded_batch(1, 5000);
    cr_assert_gt(batch->bytes.size, SL_OUTQ_FRAME_BYTES);
    sl_outq_t *a = sl_outq_new(), *b = sl_outq_new();
    sl_blob_t *earlier = encoded_event(99, 0);
    sl_outq_push_event(b, earlier); /* b's subscription is one event older: its seqs are shifted */
    sl_blob_unref(earlier);
    sl_outq_push_event(a, batch);
    sl_outq_push_event(b, batch);
    cr_assert_eq(batch->refs, 3, "shared, not copied");
    sl_blob_unref(batch);
    cr_assert_eq(sl_outq_seq(a), 5000);
    cr_assert_eq(sl_outq_seq(b), 5001);
    sl_outq_t *qs[] = {a, b};
    char *frame = malloc(SL_OUTQ_FRAME_BYTES);
    sl_proto_message_t *got = calloc(6000, sizeof(*got));
    for (size_t k = 0; k < 2; k++) {
        size_t total = 0, frames = 0, big;
        size_t len;
        const char *f;
        while ((f = sl_outq_take(qs[k], frame, SL_OUTQ_FRAME_BYTES, &len, &big)) != NULL) {
            size_t n = decode_all(f, len, got + total, 6000 - total);
            total += n;
            frames++;
        }
        cr_assert_eq(big, 0);
        cr_assert_eq(total, 5000 + k);
        cr_assert_gt(frames, 1);
        for (size_t i = 0; i < total; i++) {
            cr_assert_eq(got[i].event.seq, i + 1);
            cr_assert_eq(got[i].event.event.request_cancelled.id, k == 1 && i == 0 ? 99 : i + 1 - k);
        }
        cr_assert_not(sl_outq_pending(qs[k]));
        free_all(got, total);
    }
    free(got);
    free(frame);
    sl_outq_free(a);
    sl_outq_free(b);
}

/* What sl_proto_encode makes of events ids first_id.. numbered from seq, back to back. */
static void
expected_events(msgpack_sbuffer *out, uint64_t first_id, uint64_t seq, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sl_proto_message_t m;
        sl_proto_message_init(&m, SL_PROTO_MESSAGE_EVENT);
        m.event.seq = seq + i;
        event_cancelled(&m.event.event, first_id + i, 0);
        cr_assert_eq(sl_proto_encode(&m, out), 0);
    }
}

/* Takes every frame of q into one buffer (the shared ones last only until the next take). */
static void
take_all(sl_outq_t *q, msgpack_sbuffer *out, size_t *frames)
{
    char *frame = malloc(SL_OUTQ_FRAME_BYTES);
    size_t len, big;
    const char *f;
    while ((f = sl_outq_take(q, frame, SL_OUTQ_FRAME_BYTES, &len, &big)) != NULL) {
        msgpack_sbuffer_write(out, f, len);
        (*frames)++;
    }
    cr_assert_eq(big, 0);
    free(frame);
}

Test(outq, a_batch_from_its_start_is_sent_from_shared_bytes_with_each_queues_seqs_written_in)
{
    sl_outq_t *fresh = sl_outq_new(), *older = sl_outq_new(), *oldest = sl_outq_new();
    msgpack_sbuffer got, want;
    msgpack_sbuffer_init(&got);
    msgpack_sbuffer_init(&want);
    size_t frames = 0;
    /* older has sent 10 events (its seqs stay one byte), oldest 300 (its seqs take two after the marker). */
    sl_blob_t *before = encoded_batch(1000, 300);
    sl_outq_push_event(oldest, before);
    sl_blob_unref(before);
    before = encoded_batch(1000, 10);
    sl_outq_push_event(older, before);
    sl_blob_unref(before);
    take_all(older, &got, &frames);
    take_all(oldest, &got, &frames);
    msgpack_sbuffer_clear(&got);

    sl_blob_t *batch = encoded_batch(1, 50);
    sl_outq_push_event(fresh, batch);
    sl_outq_push_event(older, batch);
    sl_outq_push_event(oldest, batch);
    sl_blob_unref(batch);
    char *frame = malloc(SL_OUTQ_FRAME_BYTES);
    size_t len, big;
    const struct {
        sl_outq_t *q;
        uint64_t seq;
    } subs[] = {{fresh, 1}, {older, 11}, {oldest, 301}};
    const char *shared_small = NULL;
    for (size_t k = 0; k < 3; k++) {
        const char *f = sl_outq_take(subs[k].q, frame, SL_OUTQ_FRAME_BYTES, &len, &big);
        cr_assert_not_null(f);
        cr_assert_neq(f, frame, "not copied");
        if (k == 0)
            shared_small = f;
        if (k == 1)
            cr_assert_eq(f, shared_small, "seqs of the same width share one layout");
        if (k == 2)
            cr_assert_neq(f, shared_small, "wider seqs have their own");
        msgpack_sbuffer_clear(&want);
        expected_events(&want, 1, subs[k].seq, 50);
        cr_assert_eq(len, want.size, "queue %zu", k);
        cr_assert(memcmp(f, want.data, len) == 0, "queue %zu: what sl_proto_encode writes", k);
        cr_assert_not(sl_outq_pending(subs[k].q));
        cr_assert_null(sl_outq_take(subs[k].q, frame, SL_OUTQ_FRAME_BYTES, &len, &big));
    }
    free(frame);
    msgpack_sbuffer_destroy(&got);
    msgpack_sbuffer_destroy(&want);
    sl_outq_free(fresh);
    sl_outq_free(older);
    sl_outq_free(oldest);
}

Test(outq, frames_past_a_batchs_start_are_shared_too_and_a_header_written_before_one_harms_no_other_queue)
{
    /* More than a frame's worth for two queues, one after the other; each frame's headroom is scribbled on,
     * as lws writes the WebSocket header there, which past the first frame is the previous message's tail. */
    sl_blob_t *batch = encoded_batch(1, 5000);
    cr_assert_gt(batch->bytes.size, 2 * SL_OUTQ_FRAME_BYTES);
    sl_outq_t *qs[2] = {sl_outq_new(), sl_outq_new()};
    for (size_t k = 0; k < 2; k++)
        sl_outq_push_event(qs[k], batch);
    sl_blob_unref(batch);
    msgpack_sbuffer got[2], want;
    msgpack_sbuffer_init(&got[0]);
    msgpack_sbuffer_init(&got[1]);
    msgpack_sbuffer_init(&want);
    char *frame = malloc(SL_OUTQ_FRAME_BYTES);
    size_t frames = 0, len, big;
    for (size_t k = 0; k < 2; k++) {
        char *f;
        while ((f = sl_outq_take(qs[k], frame, SL_OUTQ_FRAME_BYTES, &len, &big)) != NULL) {
            cr_assert_neq(f, frame, "frame %zu of queue %zu is not copied", frames, k);
            memset(f - SL_OUTQ_HEADROOM, 0xee, SL_OUTQ_HEADROOM);
            msgpack_sbuffer_write(&got[k], f, len);
            frames++;
        }
    }
    cr_assert_gt(frames, 4, "several frames each");
    /* seqs 1..5000 take three widths: each queue's frames are whole messages in any case. */
    expected_events(&want, 1, 1, 5000);
    for (size_t k = 0; k < 2; k++) {
        cr_assert_eq(got[k].size, want.size, "queue %zu", k);
        cr_assert(memcmp(got[k].data, want.data, want.size) == 0, "queue %zu: what sl_proto_encode writes",
                  k);
        msgpack_sbuffer_destroy(&got[k]);
        sl_outq_free(qs[k]);
    }
    free(frame);
    msgpack_sbuffer_destroy(&want);
}

Test(outq, a_run_across_a_seq_width_is_sent_whole_and_as_sl_proto_encode_writes_it)
{
    /* seqs 1..300: one byte up to 127, two up to 255, three after; frames split where the width changes. */
    sl_outq_t *q = sl_outq_new();
    sl_blob_t *batch = encoded_batch(1, 300);
    sl_outq_push_event(q, batch);
    sl_blob_unref(batch);
    msgpack_sbuffer got, want;
    msgpack_sbuffer_init(&got);
    msgpack_sbuffer_init(&want);
    size_t frames = 0;
    take_all(q, &got, &frames);
    expected_events(&want, 1, 1, 300);
    cr_assert_eq(got.size, want.size);
    cr_assert(memcmp(got.data, want.data, got.size) == 0);
    cr_assert_eq(frames, 3, "a frame per seq width (127, 128, 45), each from that width's shared layout");
    msgpack_sbuffer_destroy(&got);
    msgpack_sbuffer_destroy(&want);
    sl_outq_free(q);
}

Test(outq, a_batch_over_the_bound_loses_its_oldest_events_and_the_rest_keep_their_seq)
{
    sl_blob_t *one = encoded_event(1, 0);
    size_t per = one->bytes.size + 28; /* a little more than an event with its envelope: enough to overflow */
    sl_blob_unref(one);
    size_t n = SL_OUTQ_MAX_EVENT_BYTES / per * 2;
    sl_blob_t *batch = encoded_batch(1, n);
    sl_outq_t *q = sl_outq_new();
    sl_outq_push_event(q, batch);
    sl_blob_unref(batch);
    uint64_t dropped = sl_outq_dropped_total(q);
    cr_assert_gt(dropped, n / 3);
    cr_assert_lt(dropped, n);
    char *frame = malloc(SL_OUTQ_FRAME_BYTES);
    size_t big;
    size_t len;
    const char *f = sl_outq_take(q, frame, SL_OUTQ_FRAME_BYTES, &len, &big);
    sl_proto_message_t got[1];
    sl_proto_error_t err;
    size_t used;
    cr_assert_eq(sl_proto_decode(f, len, &got[0], &used, &err), 0);
    cr_assert_eq(got[0].kind, SL_PROTO_MESSAGE_EVENTS_DROPPED);
    cr_assert_eq(got[0].events_dropped.count, dropped);
    sl_proto_message_t *rest = calloc(n, sizeof(*rest));
    size_t events = decode_all(f + used, len - used, rest, n);
    cr_assert_eq(rest[0].event.seq, dropped + 1);
    cr_assert_eq(rest[0].event.event.request_cancelled.id, dropped + 1);
    free_all(rest, events);
    while ((f = sl_outq_take(q, frame, SL_OUTQ_FRAME_BYTES, &len, &big)) != NULL) {
        size_t k = decode_all(f, len, rest, n);
        cr_assert_eq(rest[k - 1].event.seq, dropped + events + k);
        free_all(rest, k);
        events += k;
    }
    cr_assert_eq(events, n - dropped, "every survivor is sent");
    cr_assert_not(sl_outq_pending(q));
    free(rest);
    free_all(got, 1);
    free(frame);
    sl_outq_free(q);
}

Test(outq, a_message_larger_than_the_frame_is_asked_for_with_its_size)
{
    sl_outq_t *q = sl_outq_new();
    size_t size = SL_OUTQ_FRAME_BYTES + 100;
    char *reply = calloc(1, size);
    cr_assert(sl_outq_push_reply(q, "\x80", 1));
    cr_assert(sl_outq_push_reply(q, reply, size));
    char *frame = malloc(size);
    size_t big, len;
    cr_assert_not_null(sl_outq_take(q, frame, SL_OUTQ_FRAME_BYTES, &len, &big));
    cr_assert_eq(len, 1, "the small one goes alone");
    cr_assert_eq(big, 0);
    cr_assert_null(sl_outq_take(q, frame, SL_OUTQ_FRAME_BYTES, &len, &big));
    cr_assert_eq(big, size);
    cr_assert_not_null(sl_outq_take(q, frame, size, &len, &big));
    cr_assert_eq(len, size);
    cr_assert_not(sl_outq_pending(q));
    free(frame);
    free(reply);
    sl_outq_free(q);
}

Test(outq, replies_past_their_cap_are_refused)
{
    sl_outq_t *q = sl_outq_new();
    size_t chunk = 1u << 20;
    char *reply = calloc(1, chunk);
    size_t pushed = 0;
    while (sl_outq_push_reply(q, reply, chunk))
        pushed++;
    cr_assert_eq(pushed, SL_OUTQ_MAX_REPLY_BYTES / chunk);
    free(reply);
    sl_outq_free(q);
}

Test(outq, drops_before_the_queue_are_announced_too)
{
    sl_outq_t *q = sl_outq_new();
    sl_outq_note_dropped(q, 7);
    cr_assert(sl_outq_pending(q));
    char frame[SL_OUTQ_FRAME_BYTES];
    size_t big;
    size_t len;
    const char *f = sl_outq_take(q, frame, sizeof(frame), &len, &big);
    sl_proto_message_t m;
    sl_proto_error_t err;
    cr_assert_eq(sl_proto_decode(f, len, &m, NULL, &err), 0);
    cr_assert_eq(m.kind, SL_PROTO_MESSAGE_EVENTS_DROPPED);
    cr_assert_eq(m.events_dropped.count, 7);
    cr_assert_eq(sl_outq_dropped_total(q), 7);
    sl_proto_message_free(&m);
    sl_outq_free(q);
}

/* ---- limits from the protocol ------------------------------------------------------------------- */

Test(limits, exactly_one_measure_and_every_at_least_one)
{
    sl_limit_t out;
    const char *why;
    sl_proto_limit_t in = {.per = SL_PROTO_PERIOD_MINUTE, .every = 5, .has_tokens = true, .tokens = 10000000};
    cr_assert(sl_control_limit_from(&in, &out, &why));
    cr_assert_eq(out.per, SL_PER_MINUTE);
    cr_assert_eq(out.every, 5);
    cr_assert_eq(out.measure, SL_MEASURE_TOKENS);
    cr_assert_eq(out.amount, 10000000);
    in = (sl_proto_limit_t){
        .per = SL_PROTO_PERIOD_MONTH, .every = 1, .has_cost_micros = true, .cost_micros = 20};
    cr_assert(sl_control_limit_from(&in, &out, &why));
    cr_assert_eq(out.per, SL_PER_MONTH);
    cr_assert_eq(out.measure, SL_MEASURE_COST);
    in.has_requests = true;
    cr_assert_not(sl_control_limit_from(&in, &out, &why), "two measures");
    in = (sl_proto_limit_t){.per = SL_PROTO_PERIOD_DAY, .every = 1};
    cr_assert_not(sl_control_limit_from(&in, &out, &why), "no measure");
    in = (sl_proto_limit_t){.per = SL_PROTO_PERIOD_DAY, .every = 0, .has_requests = true, .requests = 1};
    cr_assert_not(sl_control_limit_from(&in, &out, &why), "every 0");
    in = (sl_proto_limit_t){
        .per = SL_PROTO_PERIOD_DAY, .every = 1, .has_requests = true, .requests = UINT64_MAX};
    cr_assert_not(sl_control_limit_from(&in, &out, &why), "past int64");
}
