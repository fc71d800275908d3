#define _GNU_SOURCE /* pthread_setname_np */
#include "endpoint.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <time.h>

#include <libwebsockets.h>
#include <msgpack.h>

#include "assets.h"
#include "core/cidr.h"
#include "core/xalloc.h"
#include "eventlog.h"
#include "log.h"
#include "worker.h"
#include "session.h"
#include "stats.h"

_Static_assert(LWS_PRE <= SL_OUTQ_HEADROOM, "lws writes a frame's header into the headroom before it");

typedef enum { CONN_AWAIT_HELLO, CONN_HELLO_DELAYED, CONN_READY, CONN_CLOSING } conn_state_t;

/* One WebSocket connection. */
typedef struct conn {
    struct conn *next, *prev;
    struct lws *wsi;
    conn_state_t state;
    char peer[64];
    bool topics[SL_PROTO_TOPIC_COUNT];
    sl_outq_t *out;
    bool wants_write; /* events were queued since the last request_writes */
    /* The message being received (fragments joined); discarded past SL_CONTROL_MAX_MESSAGE. */
    char *rx;
    size_t rx_len, rx_cap;
    bool rx_too_large, rx_text;
    sl_hello_verdict_t delayed_verdict; /* CONN_HELLO_DELAYED: the answer to send when the timer fires */
    uint32_t delayed_theirs;
} conn_t;

/* lws's per-connection user data: a WebSocket's session, or an HTTP GET's progress. */
typedef struct {
    conn_t *conn;
    const char *body; /* the HTTP answer's body being sent: a web app file, or owned */
    size_t body_len, sent;
    char *owned; /* the body when it was made for this answer (/metrics); freed once sent or closed */
} pss_t;

/* What ProviderChanged last showed for one upstream. */
typedef struct {
    char *name;
    char *bytes; /* the encoded ProviderView */
    size_t len;
} shown_view_t;

struct sl_control {
    struct lws_context *ctx;
    struct lws_vhost *vhost;
    pthread_t tid;
    atomic_bool stopping;
    char *key;
    char *server_name;
    sl_runtime_t *runtime;
    sl_bus_t *bus;
    sl_control_cancel_fn cancel;
    void *cancel_ctx;
    uint16_t port;
    sl_cidr_t *allow_from;
    size_t n_allow_from;
    /* The control thread's own; nothing else touches them. */
    sl_inflight_t *inflight;
    sl_auth_guard_t *guard;
    conn_t *conns;
    /*
     * This thread's own ticks, as monotonic ms deadlines, run off one timerfd
     * in lws's poll set rather than lws's sul timers: lws 4.1 rounds a timer's
     * wait down to whole ms, so the last fraction of a ms before each one is
     * spent in poll(0) calls (17 000 a second with one subscriber at 3 400
     * req/s: most of the control thread's CPU).
     */
    int timer_fd; /* lws's once adopted as timer_wsi: it closes it */
    struct lws *timer_wsi;
    int64_t delivery_due; /* the SL_CONTROL_DELIVERY_MS drain while anyone watches; 0 = off */
    int64_t providers_due, stats_due;
    shown_view_t *shown;
    size_t n_shown;
    int64_t last_expire_ms;
    uint64_t events_dropped_gone; /* events the subscribers that disconnected did not get */
    bool metrics_open;            /* GET /metrics without the key (listen.control.metrics: open) */
    char *frame;                  /* SL_OUTQ_HEADROOM (>= LWS_PRE) + one frame */
    size_t frame_cap;
    sl_blob_t *drained; /* the events of the drain under way, for the events topic; NULL = nobody watches */
    sl_stats_t *stats;  /* the stats topic's intervals */
    sl_metrics_counts_t *counts; /* scratch for each close */
};

static sl_control_t *
control_of(struct lws *wsi)
{
    return lws_context_user(lws_get_context(wsi));
}

/* ---- sending ------------------------------------------------------------------------------------ */

/* Queues an encoded message for conn and asks for a writable callback. */
static void
send_message(conn_t *c, const sl_proto_message_t *m)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (sl_proto_encode(m, &sb) != 0) {
        sl_log_error("control: a %s message could not be encoded", sl_proto_message_kind_slug(m->kind));
    } else if (!sl_outq_push_reply(c->out, sb.data, sb.size)) {
        sl_log_warn("control: %s asks without reading its replies; closing", c->peer);
        c->state = CONN_CLOSING;
    }
    msgpack_sbuffer_destroy(&sb);
    lws_callback_on_writable(c->wsi);
}

static void
send_error(conn_t *c, uint32_t req, sl_msg_t message)
{
    sl_proto_message_t m;
    sl_control_error(&m, req, &message);
    send_message(c, &m);
    sl_proto_message_free(&m);
    sl_msg_free(&message);
}

static int
write_pending(sl_control_t *ctl, conn_t *c)
{
    size_t big = 0, len;
    char *frame = sl_outq_take(c->out, ctl->frame + SL_OUTQ_HEADROOM, ctl->frame_cap, &len, &big);
    if (big > 0) {
        ctl->frame_cap = big;
        ctl->frame = sl_xrealloc(ctl->frame, SL_OUTQ_HEADROOM + big);
        frame = sl_outq_take(c->out, ctl->frame + SL_OUTQ_HEADROOM, ctl->frame_cap, &len, &big);
    }
    /* lws writes the frame's header into the headroom; what it cannot send now it copies. */
    if (frame != NULL && lws_write(c->wsi, (unsigned char *)frame, len, LWS_WRITE_BINARY) < (int)len)
        return -1;
    if (sl_outq_pending(c->out)) {
        lws_callback_on_writable(c->wsi);
        return 0;
    }
    if (c->state == CONN_CLOSING) {
        lws_close_reason(c->wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION, NULL, 0);
        return -1;
    }
    return 0;
}

/* ---- the handshake ------------------------------------------------------------------------------ */

static void
answer_hello(sl_control_t *ctl, conn_t *c, sl_hello_verdict_t verdict, uint32_t theirs)
{
    sl_proto_message_t m;
    if (verdict == SL_HELLO_OK) {
        sl_auth_guard_succeeded(ctl->guard, c->peer);
        c->state = CONN_READY;
        lws_set_timeout(c->wsi, NO_PENDING_TIMEOUT, 0);
        sl_proto_message_init(&m, SL_PROTO_MESSAGE_WELCOME);
        m.welcome.protocol = SL_PROTO_VERSION;
        m.welcome.server = sl_xstrdup(ctl->server_name);
        m.welcome.now_ms = (uint64_t)sl_wall_ms();
        send_message(c, &m);
        sl_proto_message_free(&m);
        sl_log_info("control: %s connected", c->peer);
        return;
    }
    sl_msg_t why;
    if (verdict == SL_HELLO_MISMATCH) {
        char ours[16], other[16];
        snprintf(ours, sizeof(ours), "%u", SL_PROTO_VERSION);
        snprintf(other, sizeof(other), "%u", theirs);
        why = sl_msg_make(SL_CODE_CONTROL_PROTOCOL_MISMATCH, "ours", ours, "theirs", other, NULL);
    } else {
        sl_auth_guard_failed(ctl->guard, c->peer, sl_wall_ms());
        why = sl_msg_make(SL_CODE_CONTROL_AUTH_REJECTED, NULL);
    }
    sl_log_warn("control: refused %s: %s [%s]", c->peer, why.text, sl_code_slug(why.code));
    sl_proto_message_init(&m, SL_PROTO_MESSAGE_REFUSED);
    m.refused.message = sl_bus_msg_from(&why);
    sl_msg_free(&why);
    send_message(c, &m);
    sl_proto_message_free(&m);
    c->state = CONN_CLOSING;
}

static void
on_hello(sl_control_t *ctl, conn_t *c, const sl_proto_hello_msg_t *hello)
{
    sl_hello_verdict_t verdict = sl_control_check_hello(hello, ctl->key, SL_PROTO_VERSION);
    /* An address that failed before waits for its answer, right or wrong: guessing gets slow. */
    int64_t delay = sl_auth_guard_delay_ms(ctl->guard, c->peer, sl_wall_ms());
    if (delay > 0) {
        c->state = CONN_HELLO_DELAYED;
        c->delayed_verdict = verdict;
        c->delayed_theirs = hello->protocol;
        lws_set_timer_usecs(c->wsi, (lws_usec_t)delay * 1000);
        return;
    }
    answer_hello(ctl, c, verdict, hello->protocol);
}

/* ---- subscriptions ------------------------------------------------------------------------------ */

static size_t drain_bus(sl_control_t *ctl);

/* Sets the timerfd to the earliest of the ticks' deadlines. */
static void
arm_timer(sl_control_t *ctl)
{
    int64_t due = ctl->providers_due;
    if (ctl->stats_due < due)
        due = ctl->stats_due;
    if (ctl->delivery_due != 0 && ctl->delivery_due < due)
        due = ctl->delivery_due;
    struct itimerspec at = {.it_value = {.tv_sec = due / 1000, .tv_nsec = (due % 1000) * 1000000}};
    if (at.it_value.tv_sec == 0 && at.it_value.tv_nsec == 0)
        at.it_value.tv_nsec = 1; /* zero would disarm it */
    timerfd_settime(ctl->timer_fd, TFD_TIMER_ABSTIME, &at, NULL);
}

/* Whether anyone watches events as they happen: a subscriber, or the debug log (which writes each one). */
static bool
anyone_watches(const sl_control_t *ctl)
{
    bool watched = sl_log_enabled(SL_LOG_DEBUG);
    for (const conn_t *c = ctl->conns; c != NULL && !watched; c = c->next) {
        /* The stats topic is sent on its own tick: it needs no drain of the bus. */
        watched = c->state == CONN_READY &&
                  (c->topics[SL_PROTO_TOPIC_EVENTS] || c->topics[SL_PROTO_TOPIC_PROVIDERS]);
    }
    return watched;
}

/*
 * Schedules a delivery SL_CONTROL_DELIVERY_MS from now, unless one is due
 * already. Until it runs no flush needs to wake this thread: the bus is lazy.
 */
static void
schedule_delivery(sl_control_t *ctl)
{
    if (ctl->delivery_due == 0) {
        ctl->delivery_due = sl_now_ms() + SL_CONTROL_DELIVERY_MS;
        arm_timer(ctl);
    }
    sl_bus_set_eager(ctl->bus, false);
}

/*
 * A delivery that found events schedules the next one: under steady
 * traffic the timer alone wakes this thread, once per delivery. One that
 * found none stops, leaving the bus eager: its first flush wakes this
 * thread, which schedules a delivery. The bus turns eager before the drain,
 * so a flush right after it is not missed.
 */
static void
delivery_tick(sl_control_t *ctl)
{
    ctl->delivery_due = 0;
    bool watched = anyone_watches(ctl);
    sl_bus_set_watched(ctl->bus, watched);
    sl_bus_set_eager(ctl->bus, watched);
    if (drain_bus(ctl) > 0 && watched)
        schedule_delivery(ctl);
}

/*
 * While anyone watches, what comes in goes out every SL_CONTROL_DELIVERY_MS
 * in one drain (delivery_tick): one frame per subscriber per delivery, and
 * no tick at all without events. Otherwise the bus is drained on the
 * provider tick, and before any request reads the in-flight table, and
 * wakes this thread early only when a quarter full (sl_bus_wants_wake),
 * never per event.
 */
static void
update_eagerness(sl_control_t *ctl)
{
    bool watched = anyone_watches(ctl);
    sl_bus_set_watched(ctl->bus, watched);
    if (watched)
        schedule_delivery(ctl); /* for what is pending already: it woke nobody */
    else
        sl_bus_set_eager(ctl->bus, false);
}

static void
subscribe(sl_control_t *ctl, conn_t *c, const sl_proto_subscribe_msg_t *m)
{
    for (size_t i = 0; i < m->topics_len; i++)
        c->topics[m->topics[i]] = true;
    /* Before the snapshot: a request that ends after it must not end with its events unbuilt (telemetry.c).
     */
    sl_bus_set_watched(ctl->bus, anyone_watches(ctl));
    /* A new subscription (or a resync): events still queued belong to the old one. */
    sl_outq_restart(c->out);
    sl_proto_message_t s;
    sl_proto_message_init(&s, SL_PROTO_MESSAGE_SNAPSHOT);
    s.snapshot.req = m->req;
    s.snapshot.now_ms = (uint64_t)sl_wall_ms();
    s.snapshot.providers_len = sl_runtime_provider_views(ctl->runtime, &s.snapshot.providers);
    s.snapshot.in_flight_len = sl_inflight_view(ctl->inflight, &s.snapshot.in_flight);
    s.snapshot.seq = sl_outq_seq(c->out);
    if (c->topics[SL_PROTO_TOPIC_STATS]) {
        s.snapshot.has_stats = true;
        s.snapshot.stats_len = sl_stats_history(ctl->stats, &s.snapshot.stats);
        s.snapshot.stats_totals = sl_xcalloc(1, sizeof(*s.snapshot.stats_totals));
        sl_stats_totals(ctl->stats, s.snapshot.stats_totals);
    }
    send_message(c, &s);
    /* The in-flight events are the log's and the intervals the stats': only the arrays around them are this
     * message's. */
    free(s.snapshot.in_flight);
    s.snapshot.in_flight = NULL;
    s.snapshot.in_flight_len = 0;
    free(s.snapshot.stats);
    s.snapshot.stats = NULL;
    s.snapshot.stats_len = 0;
    sl_proto_message_free(&s);
}

static void
unsubscribe(conn_t *c, const sl_proto_unsubscribe_msg_t *m)
{
    for (size_t i = 0; i < m->topics_len; i++)
        c->topics[m->topics[i]] = false;
    sl_proto_message_t r;
    sl_proto_message_init(&r, SL_PROTO_MESSAGE_OK);
    r.ok.req = m->req;
    send_message(c, &r);
    sl_proto_message_free(&r);
}

static bool
topic_watched(const sl_control_t *ctl, sl_proto_topic_t topic)
{
    for (const conn_t *c = ctl->conns; c != NULL; c = c->next)
        if (c->state == CONN_READY && c->topics[topic])
            return true;
    return false;
}

/* Encodes ev once and appends it to batch. */
static void
batch_add(sl_blob_t *batch, const sl_proto_event_t *ev)
{
    if (sl_blob_add_event(batch, ev) != 0)
        sl_log_error("control: a %s event could not be encoded", sl_proto_event_kind_slug(ev->kind));
}

/* Queues batch's events, in one run, for every ready subscriber of topic. */
static void
fan_out(sl_control_t *ctl, sl_proto_topic_t topic, sl_blob_t *batch)
{
    if (batch->n == 0)
        return;
    for (conn_t *c = ctl->conns; c != NULL; c = c->next) {
        if (c->state == CONN_READY && c->topics[topic]) {
            sl_outq_push_event(c->out, batch);
            c->wants_write = true;
        }
    }
}

/* One event for topic's subscribers (ProviderChanged, StatsReported: a few a second). */
static void
fan_out_one(sl_control_t *ctl, sl_proto_topic_t topic, const sl_proto_event_t *ev)
{
    if (!topic_watched(ctl, topic))
        return;
    sl_blob_t *batch = sl_blob_new();
    batch_add(batch, ev);
    fan_out(ctl, topic, batch);
    sl_blob_unref(batch);
}

/* Asks lws once per connection for what fan_out queued: a drain queues hundreds of events each. */
static void
request_writes(sl_control_t *ctl)
{
    for (conn_t *c = ctl->conns; c != NULL; c = c->next) {
        if (c->wants_write) {
            c->wants_write = false;
            lws_callback_on_writable(c->wsi);
        }
    }
}

static void
on_bus_event(void *ctx, sl_proto_event_t *ev)
{
    sl_control_t *ctl = ctx;
    sl_eventlog_write(ev);
    if (ev->kind == SL_PROTO_EVENT_THROTTLE_CHANGED)
        sl_stats_note_throttle(ctl->stats, ev->throttle_changed.provider,
                               sl_bus_throttle_is_pause(ev->throttle_changed.throttle),
                               (int64_t)ev->throttle_changed.at_ms);
    /* The bus carries the events topic's events (ProviderChanged comes from providers_tick). */
    if (ctl->drained != NULL)
        batch_add(ctl->drained, ev);
    sl_inflight_apply(ctl->inflight, ev);
}

/* Returns how many events the bus held. */
static size_t
drain_bus(sl_control_t *ctl)
{
    uint64_t dropped = 0;
    /* Each event is encoded once, into one batch queued whole for every subscriber: a run per subscriber. */
    ctl->drained = topic_watched(ctl, SL_PROTO_TOPIC_EVENTS) ? sl_blob_new() : NULL;
    size_t n = sl_bus_drain(ctl->bus, on_bus_event, ctl, &dropped);
    if (ctl->drained != NULL) {
        fan_out(ctl, SL_PROTO_TOPIC_EVENTS, ctl->drained);
        sl_blob_unref(ctl->drained);
        ctl->drained = NULL;
    }
    request_writes(ctl);
    if (dropped == 0)
        return n;
    sl_log_warn("control: %llu event(s) dropped before they reached the subscribers",
                (unsigned long long)dropped);
    for (conn_t *c = ctl->conns; c != NULL; c = c->next) {
        if (c->state == CONN_READY && c->topics[SL_PROTO_TOPIC_EVENTS]) {
            sl_outq_note_dropped(c->out, dropped);
            lws_callback_on_writable(c->wsi);
        }
    }
    return n;
}

/* ---- ProviderChanged ---------------------------------------------------------------------------- */

static shown_view_t *
shown_for(sl_control_t *ctl, const char *name)
{
    for (size_t i = 0; i < ctl->n_shown; i++)
        if (strcmp(ctl->shown[i].name, name) == 0)
            return &ctl->shown[i];
    ctl->shown = sl_xrealloc(ctl->shown, (ctl->n_shown + 1) * sizeof(*ctl->shown));
    shown_view_t *s = &ctl->shown[ctl->n_shown++];
    *s = (shown_view_t){.name = sl_xstrdup(name)};
    return s;
}

/* Every SL_CONTROL_PROVIDER_MS: a ProviderChanged for each upstream whose view changed since the last one. */
static void
providers_tick(sl_control_t *ctl, int64_t mono)
{
    drain_bus(ctl);
    update_eagerness(ctl); /* the log level may have changed with the config */
    bool wanted = false;
    for (conn_t *c = ctl->conns; c != NULL && !wanted; c = c->next)
        wanted = c->state == CONN_READY && c->topics[SL_PROTO_TOPIC_PROVIDERS];
    if (wanted) {
        sl_proto_provider_view_t *views;
        size_t n = sl_runtime_provider_views(ctl->runtime, &views);
        for (size_t i = 0; i < n; i++) {
            sl_proto_event_t ev;
            sl_proto_event_init(&ev, SL_PROTO_EVENT_PROVIDER_CHANGED);
            ev.provider_changed.view = views[i];
            /* Encoded with at_ms 0, the bytes say whether the view changed. */
            msgpack_sbuffer sb;
            msgpack_sbuffer_init(&sb);
            shown_view_t *s = shown_for(ctl, views[i].name);
            if (sl_proto_encode_event(&ev, &sb) == 0 &&
                (s->bytes == NULL || s->len != sb.size || memcmp(s->bytes, sb.data, sb.size) != 0)) {
                free(s->bytes);
                s->bytes = sl_xmalloc(sb.size);
                memcpy(s->bytes, sb.data, sb.size);
                s->len = sb.size;
                ev.provider_changed.at_ms = (uint64_t)sl_wall_ms();
                fan_out_one(ctl, SL_PROTO_TOPIC_PROVIDERS, &ev);
            }
            msgpack_sbuffer_destroy(&sb);
        }
        sl_runtime_provider_views_free(views, n);
    }
    /* A request whose end was lost with dropped events lingers at most this long. */
    int64_t now = sl_wall_ms();
    if (now - ctl->last_expire_ms > 60 * 1000) {
        ctl->last_expire_ms = now;
        sl_inflight_expire(ctl->inflight, now - 3 * 3600 * 1000);
    }
    ctl->providers_due = mono + SL_CONTROL_PROVIDER_MS;
}

/* ---- the stats topic ---------------------------------------------------------------------------- */

/* The intervals end on the wall clock: the next end, as a monotonic deadline. */
static void
schedule_stats(sl_control_t *ctl, int64_t mono)
{
    int64_t wait_ms = sl_stats_due_ms(ctl->stats) - sl_wall_ms();
    ctl->stats_due = mono + (wait_ms > 0 ? wait_ms : 0);
}

/* At each interval's end (wall clock): close it and send it to the stats subscribers. */
static void
stats_tick(sl_control_t *ctl, int64_t mono)
{
    drain_bus(ctl); /* the ThrottleChanged events so far count in this interval */
    int64_t now = sl_wall_ms();
    sl_runtime_stats_counts(ctl->runtime, ctl->counts);
    const sl_proto_stats_interval_t *iv = sl_stats_close(ctl->stats, ctl->counts, now);
    if (iv != NULL) {
        sl_proto_event_t ev;
        sl_proto_event_init(&ev, SL_PROTO_EVENT_STATS_REPORTED);
        ev.stats_reported.at_ms = (uint64_t)now;
        ev.stats_reported.interval = *iv; /* borrowed: ev is not freed */
        fan_out_one(ctl, SL_PROTO_TOPIC_STATS, &ev);
    }
    schedule_stats(ctl, mono);
}

/* The timerfd fired: runs every tick that is due and sets it to the next one. */
static void
on_timer(sl_control_t *ctl)
{
    uint64_t expirations; /* not needed: the deadlines decide (EAGAIN when a re-arm came first) */
    if (read(ctl->timer_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
        sl_log_warn("control: its timer could not be read: %s", strerror(errno));
    int64_t now = sl_now_ms();
    if (ctl->delivery_due != 0 && now >= ctl->delivery_due)
        delivery_tick(ctl);
    if (now >= ctl->providers_due)
        providers_tick(ctl, now);
    if (now >= ctl->stats_due)
        stats_tick(ctl, now);
    request_writes(ctl); /* ProviderChanged and StatsReported */
    arm_timer(ctl);
}

/* ---- receiving ---------------------------------------------------------------------------------- */

/* The `req` of a message that could not be decoded, when its map has an integer one; else 0. */
static uint32_t
peek_req(const char *buf, size_t len)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    uint32_t req = 0;
    size_t off = 0;
    if (msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP) {
        const msgpack_object_map *map = &u.data.via.map;
        for (uint32_t i = 0; i < map->size; i++) {
            const msgpack_object *k = &map->ptr[i].key, *v = &map->ptr[i].val;
            if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == 3 &&
                memcmp(k->via.str.ptr, "req", 3) == 0 && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
                v->via.u64 <= UINT32_MAX)
                req = (uint32_t)v->via.u64;
        }
    }
    msgpack_unpacked_destroy(&u);
    return req;
}

static void
dispatch(sl_control_t *ctl, conn_t *c, const sl_proto_message_t *m)
{
    if (c->state == CONN_AWAIT_HELLO) {
        if (m->kind == SL_PROTO_MESSAGE_HELLO) {
            on_hello(ctl, c, &m->hello);
        } else {
            send_error(
                c, 0,
                sl_msg_make(SL_CODE_CONTROL_HELLO_FIRST, "kind", sl_proto_message_kind_slug(m->kind), NULL));
            c->state = CONN_CLOSING;
        }
        return;
    }
    if (c->state != CONN_READY)
        return;
    /* Whatever the request reads (a snapshot, the in-flight table, a request to cancel) is current. */
    drain_bus(ctl);
    switch (m->kind) {
    case SL_PROTO_MESSAGE_SUBSCRIBE:
        subscribe(ctl, c, &m->subscribe);
        update_eagerness(ctl);
        break;
    case SL_PROTO_MESSAGE_UNSUBSCRIBE:
        unsubscribe(c, &m->unsubscribe);
        update_eagerness(ctl);
        break;
    default: {
        sl_control_ctx_t cmd = {
            .runtime = ctl->runtime,
            .inflight = ctl->inflight,
            .cancel = ctl->cancel,
            .cancel_ctx = ctl->cancel_ctx,
        };
        sl_proto_message_t reply;
        sl_control_handle(&cmd, m, &reply);
        send_message(c, &reply);
        sl_control_reply_free(&reply);
        break;
    }
    }
}

/* One whole received message payload: every message in it, in order. */
static void
on_payload(sl_control_t *ctl, conn_t *c, const char *buf, size_t len)
{
    size_t off = 0;
    while (off < len && (c->state == CONN_AWAIT_HELLO || c->state == CONN_READY)) {
        sl_proto_message_t m;
        sl_proto_error_t err;
        size_t used = 0;
        if (sl_proto_decode(buf + off, len - off, &m, &used, &err) != 0) {
            char detail[SL_PROTO_PATH_MAX + SL_PROTO_DETAIL_MAX + 8];
            snprintf(detail, sizeof(detail), "%s%s%s", err.path, err.path[0] ? ": " : "", err.detail);
            send_error(c, peek_req(buf + off, len - off),
                       sl_msg_make(SL_CODE_CONTROL_BAD_MESSAGE, "detail", detail, NULL));
            /* Where the next message would start is unknown: the rest of the frame goes too. */
            return;
        }
        dispatch(ctl, c, &m);
        sl_proto_message_free(&m);
        off += used;
    }
}

static void
on_receive(sl_control_t *ctl, conn_t *c, const char *in, size_t len)
{
    struct lws *wsi = c->wsi;
    if (lws_is_first_fragment(wsi)) {
        c->rx_len = 0;
        c->rx_too_large = false;
        c->rx_text = !lws_frame_is_binary(wsi);
    }
    if (!c->rx_too_large && c->rx_len + len > SL_CONTROL_MAX_MESSAGE)
        c->rx_too_large = true;
    if (!c->rx_too_large) {
        if (c->rx_len + len > c->rx_cap) {
            c->rx_cap = c->rx_len + len + lws_remaining_packet_payload(wsi);
            c->rx = sl_xrealloc(c->rx, c->rx_cap);
        }
        memcpy(c->rx + c->rx_len, in, len);
        c->rx_len += len;
    }
    if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) > 0)
        return;
    if (c->rx_too_large) {
        char max[24];
        snprintf(max, sizeof(max), "%u", SL_CONTROL_MAX_MESSAGE);
        send_error(c, 0, sl_msg_make(SL_CODE_CONTROL_TOO_LARGE, "max", max, NULL));
    } else if (c->rx_text) {
        send_error(c, 0, sl_msg_make(SL_CODE_CONTROL_BAD_FRAME, "detail", "a text frame", NULL));
    } else {
        on_payload(ctl, c, c->rx, c->rx_len);
    }
    c->rx_len = 0;
    /* A big message's buffer is not kept for the life of the connection. */
    if (c->rx_cap > 64 * 1024) {
        free(c->rx);
        c->rx = NULL;
        c->rx_cap = 0;
    }
}

/* ---- the web app's files ------------------------------------------------------------------------ */

static const sl_asset_t *
find_asset(const char *uri)
{
    size_t len = strcspn(uri, "?#");
    for (size_t i = 0; i < sl_assets_count; i++)
        if (strlen(sl_assets[i].path) == len && memcmp(sl_assets[i].path, uri, len) == 0)
            return &sl_assets[i];
    return NULL;
}

/* Whether the connection ends after an HTTP answer (lws may keep it alive for the next request). */
static int
http_done(struct lws *wsi)
{
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static int
add_header(struct lws *wsi, const char *name, const char *value, unsigned char **p, unsigned char *end)
{
    return lws_add_http_header_by_name(wsi, (const unsigned char *)name, (const unsigned char *)value,
                                       (int)strlen(value), p, end);
}

/* Starts an HTTP answer of status with its body (sent from the writeable callback); owned is freed after. */
static int
start_answer(struct lws *wsi, pss_t *pss, unsigned status, const char *type, const char *body, size_t len,
             char *owned, const char *extra_name, const char *extra_value)
{
    unsigned char buf[LWS_PRE + 1024], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf) - 1;
    if (lws_add_http_common_headers(wsi, status, type, len, &p, end) ||
        add_header(wsi, "cache-control:", "no-cache", &p, end) ||
        add_header(wsi, "x-content-type-options:", "nosniff", &p, end) ||
        add_header(
            wsi, "content-security-policy:",
            "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'",
            &p, end) ||
        (extra_name != NULL && add_header(wsi, extra_name, extra_value, &p, end)) ||
        lws_finalize_write_http_header(wsi, start, &p, end)) {
        free(owned);
        return -1;
    }
    pss->body = body;
    pss->body_len = len;
    pss->owned = owned;
    pss->sent = 0;
    lws_callback_on_writable(wsi);
    return 0;
}

/*
 * GET /metrics (observability.md): the Prometheus text, for the control key as `Authorization: Bearer`
 * unless listen.control.metrics is open.
 */
static int
serve_metrics(sl_control_t *ctl, struct lws *wsi, pss_t *pss)
{
    if (!ctl->metrics_open) {
        char auth[512] = "";
        int n = lws_hdr_copy(wsi, auth, sizeof(auth), WSI_TOKEN_HTTP_AUTHORIZATION);
        bool ok = n > 7 && strncasecmp(auth, "Bearer ", 7) == 0 && sl_control_keys_equal(auth + 7, ctl->key);
        if (!ok) {
            static const char denied[] = "the control key is needed as Authorization: Bearer\n";
            return start_answer(wsi, pss, HTTP_STATUS_UNAUTHORIZED, "text/plain; charset=utf-8", denied,
                                sizeof(denied) - 1, NULL, "www-authenticate:", "Bearer realm=\"sluice\"");
        }
    }
    uint32_t subscribers = 0;
    uint64_t dropped = ctl->events_dropped_gone;
    for (conn_t *c = ctl->conns; c != NULL; c = c->next) {
        bool subscribed = false;
        for (size_t t = 0; t < SL_PROTO_TOPIC_COUNT; t++)
            subscribed |= c->topics[t];
        subscribers += c->state == CONN_READY && subscribed;
        dropped += sl_outq_dropped_total(c->out);
    }
    sl_strbuf_t text = {0};
    sl_runtime_metrics(ctl->runtime, subscribers, dropped, &text);
    size_t len = text.len;
    char *body = sl_strbuf_finish(&text);
    return start_answer(wsi, pss, HTTP_STATUS_OK, "text/plain; version=0.0.4; charset=utf-8", body, len, body,
                        NULL, NULL);
}

/* A GET on the control port: /metrics, the web app's files; anything else 404. */
static int
serve_http(sl_control_t *ctl, struct lws *wsi, pss_t *pss, const char *uri)
{
    if (strncmp(uri, "/metrics", 8) == 0 && (uri[8] == '\0' || uri[8] == '?'))
        return serve_metrics(ctl, wsi, pss);
    const sl_asset_t *a = find_asset(uri);
    if (a == NULL) {
        lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, NULL);
        return http_done(wsi);
    }
    return start_answer(wsi, pss, HTTP_STATUS_OK, a->content_type, (const char *)a->data, a->len, NULL, NULL,
                        NULL);
}

static int
write_body(sl_control_t *ctl, struct lws *wsi, pss_t *pss)
{
    if (pss->body == NULL)
        return 0;
    size_t n = pss->body_len - pss->sent;
    if (n > ctl->frame_cap)
        n = ctl->frame_cap;
    bool last = pss->sent + n == pss->body_len;
    memcpy(ctl->frame + LWS_PRE, pss->body + pss->sent, n);
    if (lws_write(wsi, (unsigned char *)ctl->frame + LWS_PRE, n,
                  last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int)n)
        return -1;
    pss->sent += n;
    if (!last) {
        lws_callback_on_writable(wsi);
        return 0;
    }
    pss->body = NULL;
    free(pss->owned);
    pss->owned = NULL;
    return http_done(wsi);
}

/* ---- the lws callback --------------------------------------------------------------------------- */

static bool
peer_allowed(const sl_control_t *ctl, const struct lws_filter_network_conn_args *a)
{
    return ctl->n_allow_from == 0 ||
           sl_cidr_allows(ctl->allow_from, ctl->n_allow_from, (const struct sockaddr *)&a->cli_addr);
}

static void
conn_open(sl_control_t *ctl, struct lws *wsi, conn_t **slot)
{
    conn_t *c = sl_xcalloc(1, sizeof(*c));
    c->wsi = wsi;
    c->out = sl_outq_new();
    if (lws_get_peer_simple(wsi, c->peer, sizeof(c->peer)) == NULL)
        snprintf(c->peer, sizeof(c->peer), "?");
    c->next = ctl->conns;
    if (ctl->conns != NULL)
        ctl->conns->prev = c;
    ctl->conns = c;
    *slot = c;
    /*
     * A subscriber that stops reading is held to our bounded queue (and its
     * events_dropped), not to megabytes the kernel would buffer first.
     */
    int sndbuf = SL_CONTROL_SOCKET_BUFFER;
    setsockopt(lws_get_socket_fd(wsi), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    /* The hello must come soon; lws closes the connection otherwise. */
    lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, SL_CONTROL_HELLO_SECS);
}

static void
conn_close(sl_control_t *ctl, conn_t **slot)
{
    conn_t *c = *slot;
    if (c == NULL)
        return;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        ctl->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    if (c->state == CONN_READY)
        sl_log_info("control: %s disconnected", c->peer);
    ctl->events_dropped_gone += sl_outq_dropped_total(c->out);
    sl_outq_free(c->out);
    free(c->rx);
    free(c);
    *slot = NULL;
    update_eagerness(ctl);
}

static int
callback_control(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    sl_control_t *ctl = control_of(wsi);
    pss_t *pss = reason == LWS_CALLBACK_FILTER_NETWORK_CONNECTION ? NULL : user;
    conn_t **slot = pss != NULL ? &pss->conn : NULL;
    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
        return ctl != NULL && !peer_allowed(ctl, user) ? -1 : 0;
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
        char uri[64];
        if (lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI) <= 0 || strcmp(uri, "/control") != 0)
            return -1;
        return 0;
    }
    case LWS_CALLBACK_HTTP:
        return pss != NULL ? serve_http(ctl, wsi, pss, in) : -1;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return pss != NULL ? write_body(ctl, wsi, pss) : -1;
    case LWS_CALLBACK_CLOSED_HTTP:
        if (pss != NULL) {
            free(pss->owned);
            pss->owned = NULL;
            pss->body = NULL;
        }
        return 0;
    case LWS_CALLBACK_ESTABLISHED:
        if (slot == NULL)
            return -1;
        conn_open(ctl, wsi, slot);
        return 0;
    case LWS_CALLBACK_RECEIVE:
        if (slot != NULL && *slot != NULL)
            on_receive(ctl, *slot, in, len);
        return 0;
    case LWS_CALLBACK_TIMER:
        if (slot != NULL && *slot != NULL && (*slot)->state == CONN_HELLO_DELAYED)
            answer_hello(ctl, *slot, (*slot)->delayed_verdict, (*slot)->delayed_theirs);
        return 0;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return slot != NULL && *slot != NULL ? write_pending(ctl, *slot) : 0;
    case LWS_CALLBACK_CLOSED:
        if (slot != NULL)
            conn_close(ctl, slot);
        return 0;
    case LWS_CALLBACK_RAW_RX_FILE:
        if (ctl != NULL && wsi == ctl->timer_wsi)
            on_timer(ctl);
        return 0;
    case LWS_CALLBACK_RAW_ADOPT_FILE:
        return 0;
    case LWS_CALLBACK_RAW_CLOSE_FILE:
        if (ctl != NULL && wsi == ctl->timer_wsi)
            ctl->timer_wsi = NULL;
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        /* The bus woke us (or a stop): events to gather for a delivery, or a lazy bus filling up. */
        if (ctl != NULL && anyone_watches(ctl))
            schedule_delivery(ctl);
        else if (ctl != NULL)
            drain_bus(ctl);
        return 0;
    default:
        return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

static const struct lws_protocols protocols[] = {
    {"sluice-control", callback_control, sizeof(pss_t), 64 * 1024, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- the thread --------------------------------------------------------------------------------- */

static void
wake(void *ctx)
{
    sl_control_t *ctl = ctx;
    lws_cancel_service(ctl->ctx);
}

static void *
control_main(void *arg)
{
    sl_control_t *ctl = arg;
    pthread_setname_np(pthread_self(), "sl-control");
    while (!atomic_load(&ctl->stopping))
        lws_service(ctl->ctx, 0);
    drain_bus(ctl); /* the last requests' events, for the debug log: the workers have stopped */
    return NULL;
}

static void
log_lws(int level, const char *line)
{
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == '\n')
        n--;
    if (level & LLL_ERR)
        sl_log_error("control (lws): %.*s", (int)n, line);
    else
        sl_log_warn("control (lws): %.*s", (int)n, line);
}

sl_control_t *
sl_control_start(const sl_control_options_t *o, char *err, size_t err_size)
{
    const sl_listen_t *l = o->listen;
    bool tls = l->tls_cert != NULL && l->tls_key != NULL;
    if (!tls && !sl_ip_is_loopback(l->bind)) {
        snprintf(err, err_size,
                 "control endpoint: %s is not a loopback address and listen.control has no tls", l->bind);
        return NULL;
    }
    lws_set_log_level(LLL_ERR | LLL_WARN, log_lws);
    sl_control_t *ctl = sl_xcalloc(1, sizeof(*ctl));
    ctl->timer_fd = -1;
    ctl->key = sl_xstrdup(o->key);
    ctl->metrics_open = o->listen->metrics_open;
    ctl->server_name = sl_xstrdup(o->server_name != NULL ? o->server_name : "sluice");
    ctl->runtime = o->runtime;
    ctl->bus = o->bus;
    ctl->cancel = o->cancel;
    ctl->cancel_ctx = o->cancel_ctx;
    ctl->stats = sl_stats_new(sl_wall_ms());
    ctl->counts = sl_xmalloc(sizeof(*ctl->counts));
    ctl->inflight = sl_inflight_new();
    ctl->guard = sl_auth_guard_new();
    ctl->frame_cap = SL_OUTQ_FRAME_BYTES;
    ctl->frame = sl_xmalloc(SL_OUTQ_HEADROOM + ctl->frame_cap);
    if (l->n_allow_from > 0) {
        ctl->allow_from = sl_xcalloc(l->n_allow_from, sizeof(*ctl->allow_from));
        memcpy(ctl->allow_from, l->allow_from, l->n_allow_from * sizeof(*ctl->allow_from));
        ctl->n_allow_from = l->n_allow_from;
    }
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.port = l->port;
    info.iface = l->bind;
    info.protocols = protocols;
    info.user = ctl;
    info.gid = -1;
    info.uid = -1;
    info.options = LWS_SERVER_OPTION_VALIDATE_UTF8;
    if (strchr(l->bind, ':') == NULL)
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    if (tls) {
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = l->tls_cert;
        info.ssl_private_key_filepath = l->tls_key;
    }
    ctl->ctx = lws_create_context(&info);
    if (ctl->ctx == NULL) {
        snprintf(err, err_size, "control endpoint: cannot listen on %s:%u", l->bind, l->port);
        sl_control_stop(ctl);
        return NULL;
    }
    ctl->vhost = lws_get_vhost_by_name(ctl->ctx, "default");
    ctl->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ctl->timer_fd >= 0 && ctl->vhost != NULL)
        ctl->timer_wsi = lws_adopt_descriptor_vhost(ctl->vhost, LWS_ADOPT_RAW_FILE_DESC,
                                                    (lws_sock_file_fd_type){.filefd = ctl->timer_fd},
                                                    "sluice-control", NULL);
    if (ctl->timer_wsi == NULL) {
        snprintf(err, err_size, "control endpoint: cannot make its timer: %s", strerror(errno));
        if (ctl->timer_fd >= 0)
            close(ctl->timer_fd);
        sl_control_stop(ctl);
        return NULL;
    }
    int64_t mono = sl_now_ms();
    ctl->providers_due = mono + SL_CONTROL_PROVIDER_MS;
    schedule_stats(ctl, mono);
    arm_timer(ctl);
    int port = ctl->vhost != NULL ? lws_get_vhost_listen_port(ctl->vhost) : l->port;
    ctl->port = port > 0 ? (uint16_t)port : l->port;
    /* The bus is consumed from before the first connection: the in-flight log must see every start. */
    update_eagerness(ctl); /* nobody watches yet but the debug log: lazy */
    sl_bus_set_wake(o->bus, wake, ctl);
    sl_bus_set_active(o->bus, true);
    if (pthread_create(&ctl->tid, NULL, control_main, ctl) != 0) {
        snprintf(err, err_size, "control endpoint: cannot start its thread");
        sl_control_stop(ctl);
        return NULL;
    }
    return ctl;
}

uint16_t
sl_control_port(const sl_control_t *c)
{
    return c->port;
}

void
sl_control_stop(sl_control_t *ctl)
{
    if (ctl == NULL)
        return;
    if (ctl->tid != 0) {
        atomic_store(&ctl->stopping, true);
        lws_cancel_service(ctl->ctx);
        pthread_join(ctl->tid, NULL);
    }
    if (ctl->tid != 0) {
        sl_bus_set_wake(ctl->bus, NULL, NULL);
        sl_bus_set_active(ctl->bus, false);
        sl_bus_set_eager(ctl->bus, true);
    }
    if (ctl->ctx != NULL)
        lws_context_destroy(ctl->ctx);
    for (size_t i = 0; i < ctl->n_shown; i++) {
        free(ctl->shown[i].name);
        free(ctl->shown[i].bytes);
    }
    free(ctl->shown);
    sl_inflight_free(ctl->inflight);
    sl_auth_guard_free(ctl->guard);
    sl_stats_free(ctl->stats);
    free(ctl->counts);
    free(ctl->frame);
    free(ctl->allow_from);
    free(ctl->key);
    free(ctl->server_name);
    free(ctl);
}
