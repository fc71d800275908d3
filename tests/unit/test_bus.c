#define _GNU_SOURCE /* pthread_timedjoin_np */

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bus.h"
#include "core/xalloc.h"

/* ---- helpers ------------------------------------------------------------------------------------ */

/* A cheap event that carries who made it (id) and its place in that producer's order (ttft_ms). */
static void
emit_mark(sl_bus_batch_t *b, uint64_t producer, uint64_t seq)
{
    sl_proto_event_t ev;
    sl_bus_emit(b, sl_bus_request_first_token(&ev, 1000, producer, (int64_t)seq));
}

/* An event that owns heap strings, so a leak or a double free shows under ASan. */
static void
emit_started(sl_bus_batch_t *b, uint64_t id)
{
    sl_proto_event_t ev;
    const char path[] = "/v1/messages";
    sl_bus_started_t s = {.id = id,
                          .client = "alice",
                          .key = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
                          .dialect = SL_DIALECT_ANTHROPIC,
                          .model = "claude-sonnet-4-5",
                          .stream = true,
                          .path = path,
                          .path_len = sizeof(path) - 1,
                          .session = "conv-1"};
    sl_bus_emit(b, sl_bus_request_started(&ev, 1000, &s));
}

typedef struct {
    size_t n, cap;
    uint64_t *ids, *seqs;
    sl_proto_event_kind_t *kinds;
} seen_t;

static void
on_seen(void *ctx, sl_proto_event_t *ev)
{
    seen_t *s = ctx;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->ids = sl_xrealloc(s->ids, s->cap * sizeof(*s->ids));
        s->seqs = sl_xrealloc(s->seqs, s->cap * sizeof(*s->seqs));
        s->kinds = sl_xrealloc(s->kinds, s->cap * sizeof(*s->kinds));
    }
    s->kinds[s->n] = ev->kind;
    s->ids[s->n] =
        ev->kind == SL_PROTO_EVENT_REQUEST_FIRST_TOKEN ? ev->request_first_token.id : ev->request_started.id;
    s->seqs[s->n] = ev->kind == SL_PROTO_EVENT_REQUEST_FIRST_TOKEN ? ev->request_first_token.ttft_ms : 0;
    s->n++;
}

static void
seen_free(seen_t *s)
{
    free(s->ids);
    free(s->seqs);
    free(s->kinds);
    *s = (seen_t){0};
}

static void
count_wake(void *ctx)
{
    atomic_fetch_add((atomic_int *)ctx, 1);
}

/* ---- the batch and the bus ------------------------------------------------------------------------ */

Test(bus, emit_moves_the_event_and_leaves_it_empty)
{
    sl_bus_batch_t b = {0};
    sl_proto_event_t ev;
    sl_bus_request_started(&ev, 1, &(sl_bus_started_t){.id = 7, .client = "c", .model = "m"});
    char *client = ev.request_started.client;
    sl_bus_emit(&b, &ev);
    cr_assert_null(ev.request_started.client);
    cr_assert_eq(b.len, 1);
    cr_assert_eq(b.items[0].request_started.client, client, "the string moved, not copied");
    sl_bus_batch_clear(&b);
    cr_assert_eq(b.len, 0);
    cr_assert_null(b.items);
}

Test(bus, flush_keeps_each_workers_order_and_the_flush_order)
{
    sl_bus_t *bus = sl_bus_new(SL_BUS_DEFAULT_CAP);
    sl_bus_set_active(bus, true);
    sl_bus_batch_t a = {0}, b = {0};
    emit_mark(&a, 1, 1);
    emit_mark(&a, 1, 2);
    emit_mark(&b, 2, 1);
    emit_mark(&b, 2, 2);
    sl_bus_flush(bus, &a);
    sl_bus_flush(bus, &b);
    cr_assert_eq(a.len, 0, "a flushed batch is empty");
    emit_mark(&a, 1, 3);
    sl_bus_flush(bus, &a);

    seen_t s = {0};
    uint64_t dropped = 99;
    cr_assert_eq(sl_bus_drain(bus, on_seen, &s, &dropped), 5);
    cr_assert_eq(dropped, 0);
    const uint64_t want_ids[] = {1, 1, 2, 2, 1}, want_seqs[] = {1, 2, 1, 2, 3};
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(s.ids[i], want_ids[i], "event %zu", i);
        cr_assert_eq(s.seqs[i], want_seqs[i], "event %zu", i);
    }
    cr_assert_eq(sl_bus_drain(bus, on_seen, &s, NULL), 0, "a drain takes everything");
    seen_free(&s);
    sl_bus_batch_clear(&a);
    sl_bus_batch_clear(&b);
    sl_bus_free(bus);
}

Test(bus, wake_rule_eager_on_first_event_lazy_at_a_quarter_of_the_cap)
{
    cr_assert(sl_bus_wants_wake(true, 0, 1, 100), "eager: empty to non-empty");
    cr_assert_not(sl_bus_wants_wake(true, 1, 2, 100), "eager: already waiting to be drained");
    cr_assert_not(sl_bus_wants_wake(true, 0, 0, 100), "eager: nothing came");
    cr_assert_not(sl_bus_wants_wake(false, 0, 1, 100), "lazy: the tick drains it");
    cr_assert_not(sl_bus_wants_wake(false, 0, 24, 100));
    cr_assert(sl_bus_wants_wake(false, 24, 25, 100), "lazy: the queue reached a quarter of its cap");
    cr_assert(sl_bus_wants_wake(false, 0, 100, 100), "lazy: one big batch crossing the mark");
    cr_assert_not(sl_bus_wants_wake(false, 25, 30, 100), "lazy: once per crossing");
    cr_assert(sl_bus_wants_wake(false, 0, 1, 2), "a tiny cap still wakes");
}

Test(bus, a_lazy_bus_wakes_only_when_its_queue_fills)
{
    sl_bus_t *bus = sl_bus_new(8);
    atomic_int wakes = 0;
    sl_bus_set_wake(bus, count_wake, &wakes);
    sl_bus_set_active(bus, true);
    sl_bus_set_eager(bus, false);
    sl_bus_batch_t b = {0};
    emit_mark(&b, 1, 1);
    sl_bus_flush(bus, &b);
    cr_assert_eq(atomic_load(&wakes), 0, "one event: left for the tick");
    emit_mark(&b, 1, 2);
    sl_bus_flush(bus, &b);
    cr_assert_eq(atomic_load(&wakes), 1, "a quarter of the cap (2 of 8): woken");
    emit_mark(&b, 1, 3);
    sl_bus_flush(bus, &b);
    cr_assert_eq(atomic_load(&wakes), 1);

    seen_t s = {0};
    cr_assert_eq(sl_bus_drain(bus, on_seen, &s, NULL), 3, "nothing was lost while lazy");
    sl_bus_set_eager(bus, true);
    emit_mark(&b, 1, 4);
    sl_bus_flush(bus, &b);
    cr_assert_eq(atomic_load(&wakes), 2, "eager again: the first event wakes");
    sl_bus_set_wake(bus, NULL, NULL);
    seen_free(&s);
    sl_bus_batch_clear(&b);
    sl_bus_free(bus);
}

/* Without a consumer that says otherwise (a control endpoint), every producer builds its events at once. */
Test(bus, a_new_bus_is_watched_until_its_consumer_says_nobody_watches)
{
    sl_bus_t *bus = sl_bus_new(8);
    cr_assert(sl_bus_is_watched(bus));
    sl_bus_set_watched(bus, false);
    cr_assert_not(sl_bus_is_watched(bus));
    sl_bus_set_eager(bus, true);
    cr_assert_not(sl_bus_is_watched(bus), "eager (wake the consumer per batch) is not watched");
    sl_bus_set_watched(bus, true);
    cr_assert(sl_bus_is_watched(bus));
    sl_bus_free(bus);
}

Test(bus, wakes_once_per_empty_to_non_empty_transition)
{
    sl_bus_t *bus = sl_bus_new(SL_BUS_DEFAULT_CAP);
    atomic_int wakes = 0;
    sl_bus_set_wake(bus, count_wake, &wakes);
    sl_bus_set_active(bus, true);
    sl_bus_batch_t b = {0};

    sl_bus_flush(bus, &b);
    cr_assert_eq(atomic_load(&wakes), 0, "an empty batch wakes nobody");
    emit_mark(&b, 1, 1);
    sl_bus_flush(bus, &b);
    cr_assert_eq(atomic_load(&wakes), 1);
    emit_mark(&b, 1, 2);
    emit_mark(&b, 1, 3);
    sl_bus_flush(bus, &b);
    cr_assert_eq(atomic_load(&wakes), 1, "the queue was not empty: no second wake-up");

    seen_t s = {0};
    sl_bus_drain(bus, on_seen, &s, NULL);
    emit_mark(&b, 1, 4);
    sl_bus_flush(bus, &b);
    cr_assert_eq(atomic_load(&wakes), 2, "drained, then non-empty again");

    sl_bus_set_wake(bus, NULL, NULL);
    sl_bus_drain(bus, on_seen, &s, NULL);
    emit_mark(&b, 1, 5);
    sl_bus_flush(bus, &b);
    cr_assert_eq(atomic_load(&wakes), 2, "no hook, no wake-up");
    seen_free(&s);
    sl_bus_batch_clear(&b);
    sl_bus_free(bus);
}

typedef struct {
    sl_bus_t *bus;
    seen_t seen;
    bool drained_in_time;
} sync_consumer_t;

static void *
drain_thread(void *arg)
{
    sync_consumer_t *c = arg;
    sl_bus_drain(c->bus, on_seen, &c->seen, NULL);
    return NULL;
}

/* Drains from another thread: were the bus lock still held, that drain could not finish. */
static void
drain_in_wake(void *ctx)
{
    sync_consumer_t *c = ctx;
    pthread_t t;
    if (pthread_create(&t, NULL, drain_thread, c) != 0)
        return;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 5;
    c->drained_in_time = pthread_timedjoin_np(t, NULL, &deadline) == 0;
    if (!c->drained_in_time)
        pthread_detach(t);
}

Test(bus, wake_hook_runs_outside_the_lock)
{
    sync_consumer_t c = {.bus = sl_bus_new(8)};
    sl_bus_set_wake(c.bus, drain_in_wake, &c);
    sl_bus_set_active(c.bus, true);
    sl_bus_batch_t b = {0};
    emit_mark(&b, 1, 1);
    emit_mark(&b, 1, 2);
    sl_bus_flush(c.bus, &b);
    cr_assert(c.drained_in_time, "the hook's drain was not blocked by the flush");
    cr_assert_eq(c.seen.n, 2);
    emit_mark(&b, 1, 3);
    sl_bus_flush(c.bus, &b);
    cr_assert_eq(c.seen.n, 3, "drained to empty, so the next flush woke again");
    seen_free(&c.seen);
    sl_bus_batch_clear(&b);
    sl_bus_free(c.bus);
}

Test(bus, inactive_bus_frees_flushed_events_and_wakes_nobody)
{
    sl_bus_t *bus = sl_bus_new(SL_BUS_DEFAULT_CAP);
    atomic_int wakes = 0;
    sl_bus_set_wake(bus, count_wake, &wakes);
    cr_assert_not(sl_bus_is_active(bus), "a new bus is inactive");
    sl_bus_batch_t b = {0};
    for (uint64_t i = 1; i <= 100; i++)
        emit_started(&b, i);
    sl_bus_flush(bus, &b);
    cr_assert_eq(b.len, 0);
    seen_t s = {0};
    cr_assert_eq(sl_bus_drain(bus, on_seen, &s, NULL), 0);
    cr_assert_eq(atomic_load(&wakes), 0);
    cr_assert_eq(sl_bus_dropped(bus), 0, "freed for want of a consumer is not dropped");
    seen_free(&s);
    sl_bus_batch_clear(&b);
    sl_bus_free(bus);
}

Test(bus, going_inactive_frees_what_is_pending)
{
    sl_bus_t *bus = sl_bus_new(SL_BUS_DEFAULT_CAP);
    sl_bus_set_active(bus, true);
    sl_bus_batch_t b = {0};
    emit_started(&b, 1);
    emit_started(&b, 2);
    sl_bus_flush(bus, &b);
    sl_bus_set_active(bus, false);
    sl_bus_set_active(bus, true);
    seen_t s = {0};
    cr_assert_eq(sl_bus_drain(bus, on_seen, &s, NULL), 0);
    seen_free(&s);
    sl_bus_batch_clear(&b);
    sl_bus_free(bus);
}

Test(bus, free_releases_pending_events_and_batch_clear_its_own)
{
    sl_bus_t *bus = sl_bus_new(SL_BUS_DEFAULT_CAP);
    sl_bus_set_active(bus, true);
    sl_bus_batch_t b = {0};
    emit_started(&b, 1);
    sl_bus_flush(bus, &b);
    emit_started(&b, 2);
    sl_bus_batch_clear(&b); /* ASan's leak check is the assertion */
    sl_bus_free(bus);
    sl_bus_free(NULL);
}

static void
take_event(void *ctx, sl_proto_event_t *ev)
{
    sl_proto_event_t *kept = ctx;
    sl_proto_event_free(kept);
    *kept = *ev;
    memset(ev, 0, sizeof(*ev));
}

Test(bus, drain_callback_may_take_the_event)
{
    sl_bus_t *bus = sl_bus_new(SL_BUS_DEFAULT_CAP);
    sl_bus_set_active(bus, true);
    sl_bus_batch_t b = {0};
    emit_started(&b, 1);
    emit_started(&b, 2);
    sl_bus_flush(bus, &b);
    sl_proto_event_t kept = {0};
    cr_assert_eq(sl_bus_drain(bus, take_event, &kept, NULL), 2);
    cr_assert_eq(kept.request_started.id, 2);
    cr_assert_str_eq(kept.request_started.client, "alice", "the taken event was not freed under it");
    sl_proto_event_free(&kept);
    sl_bus_batch_clear(&b);
    sl_bus_free(bus);
}

/* ---- the cap ------------------------------------------------------------------------------------ */

Test(bus, full_queue_drops_the_oldest_and_counts_them)
{
    static const struct {
        size_t cap;
        size_t flushes[3]; /* batch sizes, 0 = none */
        uint64_t first_kept;
    } cases[] = {
        {4, {3, 3, 0}, 3},  /* two displaced from the queue */
        {3, {10, 0, 0}, 8}, /* a batch larger than the queue keeps its newest */
        {4, {2, 9, 1}, 9},  /* queue and batch both lose their oldest */
        {5, {5, 0, 0}, 1},  /* exactly full: nothing lost */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        sl_bus_t *bus = sl_bus_new(cases[c].cap);
        sl_bus_set_active(bus, true);
        sl_bus_batch_t b = {0};
        uint64_t seq = 0;
        for (size_t f = 0; f < 3 && cases[c].flushes[f] > 0; f++) {
            for (size_t i = 0; i < cases[c].flushes[f]; i++)
                emit_mark(&b, 1, ++seq);
            sl_bus_flush(bus, &b);
        }
        uint64_t lost = cases[c].first_kept - 1;
        cr_assert_eq(sl_bus_dropped(bus), lost, "case %zu", c);
        seen_t s = {0};
        uint64_t dropped = 0;
        size_t n = sl_bus_drain(bus, on_seen, &s, &dropped);
        cr_assert_eq(dropped, lost, "case %zu: the drain reports the gap", c);
        cr_assert_eq(n, seq - lost, "case %zu", c);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(s.seqs[i], cases[c].first_kept + i, "case %zu event %zu: newest kept in order", c,
                         i);
        sl_bus_drain(bus, on_seen, &s, &dropped);
        cr_assert_eq(dropped, 0, "case %zu: a gap is reported once", c);
        seen_free(&s);
        sl_bus_batch_clear(&b);
        sl_bus_free(bus);
    }
}

typedef struct {
    sl_bus_t *bus;
    uint64_t producer;
    uint64_t events;
    size_t per_flush;
    atomic_int *finished; /* NULL = nobody waits */
} producer_t;

static void *
produce(void *arg)
{
    producer_t *p = arg;
    sl_bus_batch_t b = {0};
    for (uint64_t seq = 1; seq <= p->events; seq++) {
        emit_mark(&b, p->producer, seq);
        if (seq % p->per_flush == 0 || seq == p->events)
            sl_bus_flush(p->bus, &b);
    }
    sl_bus_batch_clear(&b);
    if (p->finished != NULL)
        atomic_fetch_add(p->finished, 1);
    return NULL;
}

Test(bus, producer_never_blocks_when_nobody_drains)
{
    sl_bus_t *bus = sl_bus_new(1000);
    sl_bus_set_active(bus, true);
    producer_t p = {.bus = bus, .producer = 1, .events = 200000, .per_flush = 37};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, produce, &p), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(sl_bus_dropped(bus), 200000 - 1000);
    seen_t s = {0};
    cr_assert_eq(sl_bus_drain(bus, on_seen, &s, NULL), 1000);
    cr_assert_eq(s.seqs[0], 200000 - 999, "the newest cap events stay");
    cr_assert_eq(s.seqs[999], 200000);
    seen_free(&s);
    sl_bus_free(bus);
}

static void
stress(size_t cap, size_t per_flush, bool expect_no_drop)
{
    enum { PRODUCERS = 4, EVENTS = 10000 };
    sl_bus_t *bus = sl_bus_new(cap);
    atomic_int wakes = 0, finished = 0;
    sl_bus_set_wake(bus, count_wake, &wakes);
    sl_bus_set_active(bus, true);
    producer_t ps[PRODUCERS];
    pthread_t ts[PRODUCERS];
    for (size_t i = 0; i < PRODUCERS; i++) {
        ps[i] = (producer_t){.bus = bus,
                             .producer = i + 1,
                             .events = EVENTS,
                             .per_flush = per_flush + i,
                             .finished = &finished};
        cr_assert_eq(pthread_create(&ts[i], NULL, produce, &ps[i]), 0);
    }
    seen_t s = {0};
    uint64_t drained = 0, reported = 0;
    for (bool last = false; !last;) {
        /* Read before draining: a drain after every producer finished takes their last events. */
        last = atomic_load(&finished) == PRODUCERS;
        uint64_t dropped = 0;
        drained += sl_bus_drain(bus, on_seen, &s, &dropped);
        reported += dropped;
    }
    for (size_t i = 0; i < PRODUCERS; i++)
        pthread_join(ts[i], NULL);
    cr_assert_eq(drained + sl_bus_dropped(bus), (uint64_t)PRODUCERS * EVENTS,
                 "drained + dropped == produced");
    cr_assert_eq(reported, sl_bus_dropped(bus), "every drop is reported to the consumer");
    if (expect_no_drop)
        cr_assert_eq(drained, (uint64_t)PRODUCERS * EVENTS);
    uint64_t last_seq[PRODUCERS + 1] = {0};
    for (size_t i = 0; i < s.n; i++) {
        cr_assert(s.seqs[i] > last_seq[s.ids[i]], "producer %llu out of order", (unsigned long long)s.ids[i]);
        last_seq[s.ids[i]] = s.seqs[i];
    }
    cr_assert_geq(atomic_load(&wakes), 1);
    seen_free(&s);
    sl_bus_free(bus);
}

Test(bus, stress_four_producers_one_consumer_counts_match)
{
    stress(SL_BUS_DEFAULT_CAP, 16, true);
}

Test(bus, stress_with_a_small_cap_drops_but_counts_match)
{
    stress(64, 50, false);
}

/* ---- building events ---------------------------------------------------------------------------- */

/* Encodes ev as an `event` message, decodes it, and checks the decoded value encodes to the same bytes. */
static void
assert_round_trip(sl_proto_event_t *ev, sl_proto_message_t *decoded)
{
    sl_proto_message_t m;
    sl_proto_message_init(&m, SL_PROTO_MESSAGE_EVENT);
    m.event.seq = 1;
    m.event.event = *ev;
    msgpack_sbuffer a, b;
    msgpack_sbuffer_init(&a);
    msgpack_sbuffer_init(&b);
    cr_assert_eq(sl_proto_encode(&m, &a), 0, "%s encodes", sl_proto_event_kind_slug(ev->kind));
    sl_proto_error_t err;
    size_t used = 0;
    cr_assert_eq(sl_proto_decode(a.data, a.size, decoded, &used, &err), 0, "%s decodes: %s at %s",
                 sl_proto_event_kind_slug(ev->kind), err.detail, err.path);
    cr_assert_eq(used, a.size);
    cr_assert_eq(decoded->kind, SL_PROTO_MESSAGE_EVENT);
    cr_assert_eq(decoded->event.event.kind, ev->kind);
    cr_assert_eq(sl_proto_encode(decoded, &b), 0);
    cr_assert_eq(a.size, b.size, "%s: the decoded value encodes the same",
                 sl_proto_event_kind_slug(ev->kind));
    cr_assert_eq(memcmp(a.data, b.data, a.size), 0);
    msgpack_sbuffer_destroy(&a);
    msgpack_sbuffer_destroy(&b);
}

Test(bus_events, every_builder_round_trips_through_the_codec)
{
    sl_msg_t err =
        sl_msg_make(SL_CODE_GW_UPSTREAM_CONNECT_FAILED, "provider", "up1", "reason", "refused", NULL);
    sl_msg_t reason = sl_msg_make(SL_CODE_GW_BREAKER_RECOVERED, "provider", "up1", NULL);
    const char *cands[] = {"up1", "up2"};
    sl_proto_affinity_t sticky = SL_PROTO_AFFINITY_STICKY;
    sl_proto_usage_t usage = {
        .input = 10, .output = 20, .cache_read = 3, .cache_write = 4, .estimated = true};
    const char path[] = "/v1/chat/completions";
    sl_proto_event_t all[16];
    size_t n = 0;
    sl_bus_request_started(&all[n++], 1700000000000,
                           &(sl_bus_started_t){.id = 1,
                                               .client = "alice",
                                               .key = "sk-proj-0123456789abcdefghij",
                                               .dialect = SL_DIALECT_OPENAI_CHAT,
                                               .model = "gpt-5",
                                               .stream = true,
                                               .path = path,
                                               .path_len = sizeof(path) - 1,
                                               .session = "s1"});
    sl_bus_request_started(&all[n++], 1700000000000,
                           &(sl_bus_started_t){.id = 2,
                                               .client = "bob",
                                               .dialect = SL_DIALECT_BEDROCK,
                                               .model = "m",
                                               .path = "/x",
                                               .path_len = 2});
    sl_bus_request_routed(&all[n++], 1700000000001, 1, "default", cands, 2, &sticky);
    sl_bus_request_routed(&all[n++], 1700000000001, 2, "r", NULL, 0, NULL);
    sl_bus_attempt(&all[n++], 1700000000002, 1,
                   &(sl_bus_attempt_t){.provider = "up1",
                                       .model = "gpt-5",
                                       .outcome = SL_HOP_ERROR,
                                       .status = 0,
                                       .error = &err,
                                       .ms = 12,
                                       .pause_ms = 5,
                                       .retry = 1,
                                       .backoff_ms = 250});
    sl_bus_attempt(&all[n++], 1700000000002, 1,
                   &(sl_bus_attempt_t){.provider = "up2",
                                       .outcome = SL_HOP_SKIPPED,
                                       .skip = SL_SKIP_COOLING,
                                       .pause_ms = SL_BUS_ABSENT,
                                       .retry = SL_BUS_ABSENT,
                                       .backoff_ms = SL_BUS_ABSENT});
    sl_bus_request_headers(&all[n++], 1700000000003, 1, 200, 40);
    sl_bus_request_first_token(&all[n++], 1700000000004, 1, 55);
    sl_bus_request_finished(&all[n++], 1700000000005, 1, 200, 4096, 900, &usage, 1234);
    sl_bus_request_finished(&all[n++], 1700000000005, 2, 200, 0, 1, NULL, SL_BUS_ABSENT);
    sl_bus_request_failed(&all[n++], 1700000000006, 3, SL_PROTO_FAILURE_SOURCE_UPSTREAM, &err, 77);
    sl_bus_request_cancelled(&all[n++], 1700000000007, 4, 8);
    sl_bus_health_changed(&all[n++], 1700000000008, "up1", SL_BREAKER_CLOSED, SL_BUS_ABSENT, &reason);
    sl_bus_rows_dropped(&all[n++], 1700000000009, 3);
    sl_bus_store_changed(&all[n++], 1700000000010, true, true, "connection refused", 120);
    sl_bus_store_changed(&all[n++], 1700000000011, false, false, NULL, SL_BUS_ABSENT);
    for (size_t i = 0; i < n; i++) {
        sl_proto_message_t decoded;
        assert_round_trip(&all[i], &decoded);
        cr_assert_eq(decoded.event.event.request_started.at_ms, all[i].request_started.at_ms);
        sl_proto_message_free(&decoded);
        sl_proto_event_free(&all[i]);
    }
    sl_msg_free(&err);
    sl_msg_free(&reason);
}

Test(bus_events, started_strips_the_gemini_key_and_masks_the_client_key)
{
    /* cut: path_len ends that many bytes before the string does (what follows is not the request's). */
    static const struct {
        const char *path, *want;
        size_t cut;
    } cases[] = {
        {"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=AIzaSyA-secret-secret-secret",
         "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", 0},
        {"/v1beta/models/g:generateContent?key=AIzaSyA-secret", "/v1beta/models/g:generateContent", 0},
        {"/v1beta/models/g:generateContent?%6Bey=AIzaSyA-secret&x=1", "/v1beta/models/g:generateContent?x=1",
         0},
        {"/v1/messages?beta=true", "/v1/messages?beta=true", 0},
        {"/v1/messages", "/v1/messages", 0},
        {"/v1/messages?key=AIzaSyA-secret", "/v1/messages", 19},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_proto_event_t ev;
        const char *key = "AIzaSyA-client-secret-0123456789";
        sl_bus_request_started(&ev, 1,
                               &(sl_bus_started_t){.id = 1,
                                                   .client = "c",
                                                   .key = key,
                                                   .dialect = SL_DIALECT_GEMINI,
                                                   .model = "g",
                                                   .path = cases[i].path,
                                                   .path_len = strlen(cases[i].path) - cases[i].cut});
        cr_assert_str_eq(ev.request_started.path, cases[i].want, "case %zu", i);
        cr_assert_not_null(ev.request_started.key_masked);
        cr_assert_null(strstr(ev.request_started.key_masked, "client-secret"), "case %zu: key masked", i);
        cr_assert_eq(ev.request_started.dialect, SL_PROTO_DIALECT_GEMINI);
        cr_assert_null(ev.request_started.session, "no session given: absent");
        sl_proto_event_free(&ev);
    }
}

Test(bus_events, client_bytes_become_valid_utf8)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"plain", "plain"},
        {"caf\xc3\xa9", "caf\xc3\xa9"},
        {"bad\xff", "bad?"},
        {"\xc0\xaf", "??"},        /* overlong '/' */
        {"\xed\xa0\x80x", "???x"}, /* a surrogate */
        {"\xe2\x82", "??"},        /* cut short */
        {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
        {"\xf4\x90\x80\x80", "????"}, /* above U+10FFFF */
        /* Eight bytes at a time while all are ASCII: the words around and after a byte that is not. */
        {"a-model-name-of-31-bytes-or-so!", "a-model-name-of-31-bytes-or-so!"},
        {"01234567\xff"
         "9abcdefghij",
         "01234567?9abcdefghij"},
        {"0123456\xc3\xa9"
         "789abcdef\x80",
         "0123456\xc3\xa9"
         "789abcdef?"},
        {"\x7f\x01\x7f\x01\x7f\x01\x7f\x01\x7f", "\x7f\x01\x7f\x01\x7f\x01\x7f\x01\x7f"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_proto_event_t ev;
        sl_bus_request_started(&ev, 1,
                               &(sl_bus_started_t){.id = 1,
                                                   .client = "c",
                                                   .model = cases[i].in,
                                                   .path = cases[i].in,
                                                   .path_len = strlen(cases[i].in)});
        cr_assert_str_eq(ev.request_started.model, cases[i].want, "case %zu", i);
        sl_proto_message_t decoded;
        assert_round_trip(&ev, &decoded);
        cr_assert_str_eq(decoded.event.event.request_started.model, cases[i].want, "case %zu", i);
        sl_proto_message_free(&decoded);
        sl_proto_event_free(&ev);
    }
}

Test(bus_events, msg_keeps_only_the_args_its_template_names_and_scrubs_secrets)
{
    sl_msg_t m = sl_msg_make(SL_CODE_GW_UPSTREAM_CONNECT_FAILED, "provider", "up1", "status", "502", "reason",
                             "bad key sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAA", "provider", "other", NULL);
    sl_proto_msg_t p = sl_bus_msg_from(&m);
    cr_assert_str_eq(p.code, "gw.upstream.connect_failed");
    cr_assert_eq(p.args_len, 2, "status is not in the template; the repeated provider is dropped");
    cr_assert_str_eq(p.args[0].key, "provider");
    cr_assert_str_eq(p.args[0].value, "up1");
    cr_assert_str_eq(p.args[1].key, "reason");
    cr_assert_null(strstr(p.args[1].value, "AAAAAAAAAAAA"), "arg scrubbed: %s", p.args[1].value);
    cr_assert_null(strstr(p.text, "AAAAAAAAAAAA"), "text scrubbed: %s", p.text);
    cr_assert_not_null(strstr(p.text, "up1"));
    sl_proto_msg_free(&p);
    sl_msg_free(&m);

    sl_msg_t bare = sl_msg_make(SL_CODE_GW_SAFE_MODE, "provider", "x", NULL);
    p = sl_bus_msg_from(&bare);
    cr_assert_eq(p.args_len, 0);
    cr_assert_null(p.args);
    sl_proto_msg_free(&p);
    sl_msg_free(&bare);
}

Test(bus_events, attempt_optionals_follow_their_sentinels)
{
    sl_proto_event_t ev;
    sl_bus_attempt(&ev, 1, 9,
                   &(sl_bus_attempt_t){.provider = "p",
                                       .outcome = SL_HOP_STATUS,
                                       .status = 503,
                                       .ms = 4,
                                       .pause_ms = SL_BUS_ABSENT,
                                       .retry = SL_BUS_ABSENT,
                                       .backoff_ms = SL_BUS_ABSENT,
                                       .skip = SL_SKIP_BUSY});
    const sl_proto_attempt_view_t *v = &ev.attempt.view;
    cr_assert(v->has_status);
    cr_assert_eq(v->status, 503);
    cr_assert_null(v->model);
    cr_assert_null(v->error);
    cr_assert_not(v->has_pause_ms || v->has_retry || v->has_backoff_ms);
    cr_assert_not(v->has_skipped, "skip is read only for a skipped outcome");
    sl_proto_event_free(&ev);

    sl_bus_attempt(&ev, 1, 9,
                   &(sl_bus_attempt_t){.provider = "p",
                                       .outcome = SL_HOP_ERROR,
                                       .status = 0,
                                       .pause_ms = 0,
                                       .retry = 2,
                                       .backoff_ms = 0});
    cr_assert_not(ev.attempt.view.has_status, "no head, no status");
    cr_assert(ev.attempt.view.has_pause_ms && ev.attempt.view.has_retry && ev.attempt.view.has_backoff_ms);
    cr_assert_eq(ev.attempt.view.retry, 2);
    sl_proto_event_free(&ev);
}

Test(bus_events, health_maps_breaker_states_and_drops_an_until_that_never_comes)
{
    static const struct {
        sl_breaker_state_t state;
        int64_t until;
        sl_proto_health_state_t want;
        bool has_until;
    } cases[] = {
        {SL_BREAKER_CLOSED, SL_BUS_ABSENT, SL_PROTO_HEALTH_STATE_OK, false},
        {SL_BREAKER_OPEN, 1700000060000, SL_PROTO_HEALTH_STATE_OPEN, true},
        {SL_BREAKER_OPEN, SL_BREAKER_UNTIL_CLEARED, SL_PROTO_HEALTH_STATE_OPEN, false},
        {SL_BREAKER_HALF_OPEN, SL_BUS_ABSENT, SL_PROTO_HEALTH_STATE_HALF_OPEN, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_proto_event_t ev;
        sl_bus_health_changed(&ev, 1, "up", cases[i].state, cases[i].until, NULL);
        cr_assert_eq(ev.health_changed.state, cases[i].want, "case %zu", i);
        cr_assert_eq(ev.health_changed.has_until_ms, cases[i].has_until, "case %zu", i);
        cr_assert_null(ev.health_changed.reason);
        sl_proto_event_free(&ev);
    }
}

Test(bus_events, failure_source_follows_the_code_family)
{
    static const struct {
        sl_code_t code;
        sl_proto_failure_source_t want;
    } cases[] = {
        {SL_CODE_GW_AUTH_UNKNOWN_KEY, SL_PROTO_FAILURE_SOURCE_AUTH},
        {SL_CODE_GW_AUTH_LOCAL_ONLY, SL_PROTO_FAILURE_SOURCE_AUTH},
        {SL_CODE_GW_REQUEST_TOO_LARGE, SL_PROTO_FAILURE_SOURCE_REQUEST},
        {SL_CODE_GW_DIALECT_NOT_SERVED, SL_PROTO_FAILURE_SOURCE_REQUEST},
        {SL_CODE_GW_NOT_FOUND, SL_PROTO_FAILURE_SOURCE_REQUEST},
        {SL_CODE_GW_ROUTE_NO_MATCH, SL_PROTO_FAILURE_SOURCE_CONFIG},
        {SL_CODE_GW_SAFE_MODE, SL_PROTO_FAILURE_SOURCE_CONFIG},
        {SL_CODE_GW_UPSTREAM_IDLE_TIMEOUT, SL_PROTO_FAILURE_SOURCE_UPSTREAM},
        {SL_CODE_GW_UPSTREAM_UNUSABLE, SL_PROTO_FAILURE_SOURCE_UPSTREAM},
        {SL_CODE_GW_SHUTTING_DOWN, SL_PROTO_FAILURE_SOURCE_INTERNAL},
        {SL_CODE_CONFIG_RELOADED, SL_PROTO_FAILURE_SOURCE_INTERNAL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_assert_eq(sl_bus_failure_source(cases[i].code), cases[i].want, "%s", sl_code_slug(cases[i].code));
}

Test(bus_events, store_changed_maps_its_flags_copies_and_scrubs_the_reason)
{
    sl_proto_event_t ev;
    char reason[] = "could not connect to postgresql://sluice:hunter2-secret@db:5432/sluice: refused";
    sl_bus_store_changed(&ev, 1700000000000, true, true, reason, 120);
    cr_assert_eq(ev.kind, SL_PROTO_EVENT_STORE_CHANGED);
    cr_assert_eq(ev.store_changed.at_ms, 1700000000000);
    cr_assert_eq(ev.store_changed.state, SL_PROTO_STORE_STATE_DEGRADED);
    cr_assert_eq(ev.store_changed.store_kind, SL_PROTO_STORE_KIND_POSTGRES);
    cr_assert(ev.store_changed.has_spooled_rows);
    cr_assert_eq(ev.store_changed.spooled_rows, 120);
    cr_assert_not_null(ev.store_changed.reason);
    cr_assert_neq(ev.store_changed.reason, reason, "copied");
    cr_assert_null(strstr(ev.store_changed.reason, "hunter2"), "%s", ev.store_changed.reason);
    cr_assert_not_null(strstr(ev.store_changed.reason, "refused"), "%s", ev.store_changed.reason);
    cr_assert_not_null(strstr(reason, "hunter2"), "the caller's string is left alone");
    sl_proto_event_free(&ev);

    sl_bus_store_changed(&ev, 5, false, false, NULL, SL_BUS_ABSENT);
    cr_assert_eq(ev.store_changed.state, SL_PROTO_STORE_STATE_OK);
    cr_assert_eq(ev.store_changed.store_kind, SL_PROTO_STORE_KIND_SQLITE);
    cr_assert_null(ev.store_changed.reason);
    cr_assert_not(ev.store_changed.has_spooled_rows);
    sl_proto_event_free(&ev);

    /* 0 spooled rows is present, not absent */
    sl_bus_store_changed(&ev, 5, false, true, NULL, 0);
    cr_assert(ev.store_changed.has_spooled_rows);
    cr_assert_eq(ev.store_changed.spooled_rows, 0);
    sl_proto_event_free(&ev);
}

/* ---- the in-flight log -------------------------------------------------------------------------- */

static void
apply_started(sl_inflight_t *log, uint64_t id, int64_t at_ms)
{
    sl_proto_event_t ev;
    sl_bus_request_started(&ev, at_ms, &(sl_bus_started_t){.id = id, .client = "c", .model = "m"});
    cr_assert(sl_inflight_apply(log, &ev), "request %llu starts", (unsigned long long)id);
    cr_assert_null(ev.request_started.client, "the log took the event");
}

static bool
apply_built(sl_inflight_t *log, sl_proto_event_t *ev)
{
    bool kept = sl_inflight_apply(log, ev);
    sl_proto_event_free(ev);
    return kept;
}

static const sl_proto_in_flight_request_t *
view_find(const sl_proto_in_flight_request_t *reqs, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].id == id)
            return &reqs[i];
    }
    return NULL;
}

Test(inflight, keeps_request_started_first_and_every_step_in_order)
{
    sl_inflight_t *log = sl_inflight_new();
    sl_proto_event_t ev;
    cr_assert_not(apply_built(log, sl_bus_request_headers(&ev, 1, 5, 200, 3)), "no start yet: not kept");
    apply_started(log, 5, 10);
    const char *cands[] = {"a"};
    cr_assert(apply_built(log, sl_bus_request_routed(&ev, 11, 5, "r", cands, 1, NULL)));
    sl_proto_event_init(&ev, SL_PROTO_EVENT_REQUEST_RETRYING);
    ev.request_retrying = (sl_proto_request_retrying_t){.at_ms = 12, .id = 5, .attempt = 1};
    cr_assert(apply_built(log, &ev));
    sl_proto_event_init(&ev, SL_PROTO_EVENT_REQUEST_QUEUED);
    ev.request_queued = (sl_proto_request_queued_t){.at_ms = 13, .id = 5};
    cr_assert(apply_built(log, &ev));
    sl_proto_event_init(&ev, SL_PROTO_EVENT_REQUEST_DEQUEUED);
    ev.request_dequeued = (sl_proto_request_dequeued_t){.at_ms = 14, .id = 5};
    cr_assert(apply_built(log, &ev));
    cr_assert(apply_built(log, sl_bus_request_first_token(&ev, 15, 5, 4)));
    cr_assert_not(apply_built(log, sl_bus_rows_dropped(&ev, 16, 1)), "not a request event");
    cr_assert_not(apply_built(log, sl_bus_health_changed(&ev, 16, "a", SL_BREAKER_OPEN, 1, NULL)));
    cr_assert_not(apply_built(log, sl_bus_request_first_token(&ev, 16, 0, 4)), "id 0 is no request");
    sl_bus_request_started(&ev, 17, &(sl_bus_started_t){.id = 5, .client = "again", .model = "m"});
    cr_assert_not(apply_built(log, &ev), "a repeated start is not kept");

    sl_proto_in_flight_request_t *reqs;
    cr_assert_eq(sl_inflight_view(log, &reqs), 1);
    const sl_proto_event_kind_t want[] = {
        SL_PROTO_EVENT_REQUEST_STARTED, SL_PROTO_EVENT_REQUEST_ROUTED,   SL_PROTO_EVENT_REQUEST_RETRYING,
        SL_PROTO_EVENT_REQUEST_QUEUED,  SL_PROTO_EVENT_REQUEST_DEQUEUED, SL_PROTO_EVENT_REQUEST_FIRST_TOKEN,
    };
    cr_assert_eq(reqs[0].id, 5);
    cr_assert_eq(reqs[0].events_len, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < reqs[0].events_len; i++)
        cr_assert_eq(reqs[0].events[i].kind, want[i], "event %zu", i);
    cr_assert_str_eq(reqs[0].events[0].request_started.client, "c", "the first start stays");
    free(reqs);
    sl_inflight_free(log);
}

Test(inflight, forgets_a_request_at_its_end)
{
    sl_msg_t m = sl_msg_make(SL_CODE_GW_SAFE_MODE, NULL);
    for (int end = 0; end < 3; end++) {
        sl_inflight_t *log = sl_inflight_new();
        apply_started(log, 1, 1);
        apply_started(log, 2, 1);
        sl_proto_event_t ev;
        if (end == 0)
            sl_bus_request_finished(&ev, 2, 1, 200, 10, 1, NULL, SL_BUS_ABSENT);
        else if (end == 1)
            sl_bus_request_failed(&ev, 2, 1, SL_PROTO_FAILURE_SOURCE_CONFIG, &m, 1);
        else
            sl_bus_request_cancelled(&ev, 2, 1, 1);
        cr_assert_not(sl_inflight_apply(log, &ev), "the end is left to the caller");
        cr_assert_eq(ev.request_started.id, 1, "untouched");
        sl_proto_event_free(&ev);
        cr_assert_eq(sl_inflight_count(log), 1, "end kind %d", end);
        cr_assert_not(apply_built(log, sl_bus_request_headers(&ev, 3, 1, 200, 1)),
                      "a finished id is unknown");
        sl_proto_in_flight_request_t *reqs;
        cr_assert_eq(sl_inflight_view(log, &reqs), 1);
        cr_assert_eq(reqs[0].id, 2);
        free(reqs);
        sl_inflight_free(log);
    }
    sl_msg_free(&m);
}

/* Scattered ids, so that probe runs in the log's table collide and grow long. */
static uint64_t
scattered_id(uint64_t k)
{
    uint64_t z = k * UINT64_C(0x9e3779b97f4a7c15) + 1;
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return ((z ^ (z >> 31)) & ((UINT64_C(1) << 53) - 1)) | 1;
}

Test(inflight, survives_growth_and_removals_in_any_order)
{
    enum { N = 3000 };
    sl_inflight_t *log = sl_inflight_new();
    for (uint64_t k = 0; k < N; k++)
        apply_started(log, scattered_id(k), 1);
    /* Remove every third request, in a scrambled order, so probe runs get holes everywhere. */
    for (uint64_t j = 0; j < N; j++) {
        uint64_t k = (j * 7919) % N;
        if (k % 3 != 0)
            continue;
        sl_proto_event_t ev;
        apply_built(log, sl_bus_request_cancelled(&ev, 2, scattered_id(k), 1));
    }
    cr_assert_eq(sl_inflight_count(log), N - N / 3);
    for (uint64_t k = 0; k < N; k++) {
        sl_proto_event_t ev;
        bool kept = apply_built(log, sl_bus_request_first_token(&ev, 3, scattered_id(k), 1));
        cr_assert_eq(kept, k % 3 != 0, "request %llu", (unsigned long long)k);
    }
    sl_proto_in_flight_request_t *reqs;
    size_t n = sl_inflight_view(log, &reqs);
    cr_assert_eq(n, N - N / 3);
    for (size_t i = 1; i < n; i++)
        cr_assert(reqs[i - 1].id < reqs[i].id, "the view is by id");
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(reqs[i].events_len, 2);
    free(reqs);
    sl_inflight_free(log);
}

Test(inflight, expire_forgets_requests_whose_newest_event_is_old)
{
    sl_inflight_t *log = sl_inflight_new();
    for (uint64_t id = 1; id <= 200; id++)
        apply_started(log, id, (int64_t)id * 10);
    sl_proto_event_t ev;
    apply_built(log, sl_bus_request_first_token(&ev, 5000, 3, 1)); /* an old request that is still moving */
    cr_assert_eq(sl_inflight_expire(log, 1000), 98, "ids 1..99 except 3");
    cr_assert_eq(sl_inflight_count(log), 102);
    sl_proto_in_flight_request_t *reqs;
    size_t n = sl_inflight_view(log, &reqs);
    cr_assert_not_null(view_find(reqs, n, 3));
    cr_assert_null(view_find(reqs, n, 99));
    cr_assert_not_null(view_find(reqs, n, 100));
    free(reqs);
    cr_assert_eq(sl_inflight_expire(log, 0), 0);
    sl_inflight_free(log);
}

Test(inflight, view_encodes_as_a_snapshot_without_copying)
{
    sl_inflight_t *log = sl_inflight_new();
    sl_proto_in_flight_request_t *reqs;
    cr_assert_eq(sl_inflight_view(log, &reqs), 0);
    cr_assert_null(reqs);
    apply_started(log, 4, 1);
    apply_started(log, 2, 1);
    sl_proto_event_t ev;
    apply_built(log, sl_bus_request_headers(&ev, 2, 4, 200, 1));

    sl_proto_message_t m;
    sl_proto_message_init(&m, SL_PROTO_MESSAGE_SNAPSHOT);
    m.snapshot.req = 1;
    m.snapshot.in_flight_len = sl_inflight_view(log, &m.snapshot.in_flight);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    cr_assert_eq(sl_proto_encode(&m, &buf), 0);
    free(m.snapshot.in_flight); /* borrowed events: only the array is ours */

    sl_proto_message_t d;
    sl_proto_error_t err;
    cr_assert_eq(sl_proto_decode(buf.data, buf.size, &d, NULL, &err), 0, "%s at %s", err.detail, err.path);
    cr_assert_eq(d.snapshot.in_flight_len, 2);
    cr_assert_eq(d.snapshot.in_flight[0].id, 2);
    cr_assert_eq(d.snapshot.in_flight[1].id, 4);
    cr_assert_eq(d.snapshot.in_flight[1].events_len, 2);
    cr_assert_eq(d.snapshot.in_flight[1].events[0].kind, SL_PROTO_EVENT_REQUEST_STARTED);
    cr_assert_eq(d.snapshot.in_flight[1].events[1].kind, SL_PROTO_EVENT_REQUEST_HEADERS);
    sl_proto_message_free(&d);
    msgpack_sbuffer_destroy(&buf);
    sl_inflight_free(log);
}

/* A pause (the stats' shaded spans, the throttled gate): after a 429, probing, or by hand; not a limit's
 * hold. */
Test(bus, a_pause_is_a_429_pause_its_probe_or_a_manual_one)
{
    cr_expect(!sl_bus_throttle_is_pause(NULL));
    const struct {
        sl_proto_throttle_kind_t kind;
        bool pause;
    } rows[] = {
        {SL_PROTO_THROTTLE_KIND_PAUSED, true},          {SL_PROTO_THROTTLE_KIND_PROBING, true},
        {SL_PROTO_THROTTLE_KIND_MANUAL, true},          {SL_PROTO_THROTTLE_KIND_WINDOW_FULL, false},
        {SL_PROTO_THROTTLE_KIND_PERIOD_USED_UP, false},
    };
    _Static_assert(sizeof(rows) / sizeof(rows[0]) == SL_PROTO_THROTTLE_KIND_COUNT, "every kind");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        sl_proto_throttle_t t = {.kind = rows[i].kind};
        cr_expect_eq(sl_bus_throttle_is_pause(&t), rows[i].pause, "%s",
                     sl_proto_throttle_kind_slug(rows[i].kind));
    }
}
