/*
 * The shared state of a cluster's instance (shared_cluster.h): the
 * interface held together, and an upstream's pause kept in step across
 * instances.
 *
 *   - A pause of any instance (a 429's, an operator's) and its end (the
 *     probe's verdict, a resume) are published on the events channel and
 *     kept in a key until they end; every instance applies what another
 *     published to its own throttle (sl_throttle_adopt_pause & co.), and
 *     reads the keys when it joins. Redis restarted empty: each instance
 *     announces its own pauses again.
 *   - The probe after a pause is a lease, a slot under max_concurrent a
 *     lease too, room in usage limits a reservation: cluster_claims.c.
 *
 * Not joined (Redis down or slow), every decision is this instance's own.
 */
#include "shared_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_view.h"
#include "core/cluster_msg.h"
#include "core/xalloc.h"
#include "log.h"
#include "worker.h"

static sl_cluster_shared_t *
state_of(sl_shared_state_t *ss)
{
    return (sl_cluster_shared_t *)ss;
}

/* ---- publishing this instance's changes ------------------------------------------------------- */

/* The key that keeps a change until its end, for instances that join later: its kind, or NULL. */
static const char *
kept_in(sl_cluster_op_t op)
{
    switch (op) {
    case SL_CLUSTER_PAUSE_429:
        return "pause";
    case SL_CLUSTER_PAUSE_MANUAL:
        return "manual";
    case SL_CLUSTER_BREAKER_OPEN:
        return "breaker";
    default:
        return NULL;
    }
}

/*
 * Publishes a change this instance made to up (until_mono: its end on this
 * instance's clock, SL_THROTTLE_NEVER, or -1 for none), and keeps a pause in
 * its key until it ends; an end of a pause or probe clears their keys.
 */
static void
publish(sl_cluster_shared_t *s, sl_cluster_op_t op, sl_upstream_t *up, int64_t until_mono,
        uint32_t consecutive, int64_t grace_ms)
{
    if (!sl_cluster_joined(s->cluster))
        return;
    int64_t mono = sl_now_ms(), wall = sl_wall_ms(), offset = sl_cluster_clock_offset_ms(s->cluster);
    const char *instance = sl_cluster_instance(s->cluster), *name = sl_cluster_name(s->cluster);
    sl_cluster_msg_t m = {
        .op = op,
        .origin = instance,
        .origin_len = strlen(instance),
        .upstream = up->name,
        .upstream_len = strlen(up->name),
        .until_ms = until_mono < 0 ? -1 : sl_cluster_redis_ms_of(until_mono, mono, wall, offset),
        .consecutive = consecutive,
        .grace_ms = grace_ms,
    };
    char line[512], key[400];
    size_t len = sl_cluster_msg_encode(&m, line, sizeof(line));
    if (len == 0)
        return;
    const char *kind = kept_in(op);
    if (kind != NULL) {
        sl_cluster_key(key, sizeof(key), name, kind, up->name);
        if (until_mono == SL_THROTTLE_NEVER) {
            sl_cluster_commandv(s->cluster, NULL, NULL, 3, (const char *[]){"SET", key, line});
        } else {
            char px[24];
            snprintf(px, sizeof(px), "%lld", (long long)(until_mono - mono > 1 ? until_mono - mono : 1));
            sl_cluster_commandv(s->cluster, NULL, NULL, 5, (const char *[]){"SET", key, line, "PX", px});
        }
    }
    if (op == SL_CLUSTER_RESUME) {
        char pause_key[400];
        sl_cluster_key(pause_key, sizeof(pause_key), name, "pause", up->name);
        sl_cluster_key(key, sizeof(key), name, "manual", up->name);
        sl_cluster_commandv(s->cluster, NULL, NULL, 3, (const char *[]){"DEL", key, pause_key});
    }
    if (op == SL_CLUSTER_BREAKER_CLOSED) {
        sl_cluster_key(key, sizeof(key), name, "breaker", up->name);
        sl_cluster_commandv(s->cluster, NULL, NULL, 2, (const char *[]){"DEL", key});
    }
    if (op == SL_CLUSTER_ANSWERED || op == SL_CLUSTER_PROBE_ABANDONED || op == SL_CLUSTER_RESUME) {
        /* The probe is over: the next pause's probe takes the lease afresh. */
        sl_cluster_key(key, sizeof(key), name, "probe", up->name);
        sl_cluster_commandv(s->cluster, NULL, NULL, 2, (const char *[]){"DEL", key});
    }
    sl_cluster_publish(s->cluster, line, len);
}

static void
publish_throttle(sl_cluster_shared_t *s, sl_cluster_op_t op, sl_upstream_t *up, int64_t until_mono,
                 const sl_throttle_t *t)
{
    publish(s, op, up, until_mono, t != NULL ? t->consecutive : 0, t != NULL ? t->grace_ms : 0);
}

/* ---- what other instances published ------------------------------------------------------------ */

/* Applies another instance's change to up's throttle here; returns the news for ThrottleChanged. */
static sl_throttle_news_t
apply(const sl_cluster_msg_t *m, sl_upstream_t *up, int64_t until_mono, int64_t now)
{
    sl_throttle_news_t news = {.up = up};
    sl_waitq_lock();
    switch (m->op) {
    case SL_CLUSTER_PAUSE_429:
        news.changed = sl_throttle_adopt_pause(&up->throttle, now, until_mono, m->consecutive, m->grace_ms);
        break;
    case SL_CLUSTER_PAUSE_MANUAL:
        news.changed = sl_throttle_pause_manual(&up->throttle, until_mono, now);
        sl_waitq_wake(&up->waitq, SIZE_MAX);
        break;
    case SL_CLUSTER_RESUME:
        news.changed = sl_throttle_resume(&up->throttle, now);
        sl_waitq_wake(&up->waitq, 1);
        break;
    case SL_CLUSTER_ANSWERED:
        news.changed = sl_throttle_on_answer(&up->throttle, now);
        if (news.changed)
            sl_waitq_wake(&up->waitq, 1);
        break;
    case SL_CLUSTER_PROBE_ABANDONED:
        sl_throttle_probe_abandoned(&up->throttle);
        sl_waitq_wake(&up->waitq, 1);
        break;
    case SL_CLUSTER_SLOT_FREED:
        /* Nothing of the throttle: whoever waits for a slot looks again. */
        sl_waitq_wake(&up->waitq, 1);
        break;
    case SL_CLUSTER_LIMITS:
    case SL_CLUSTER_CONFIG:
    case SL_CLUSTER_BREAKER_OPEN:
    case SL_CLUSTER_BREAKER_CLOSED:
    case SL_CLUSTER_OP_COUNT:
        break;
    }
    news.throttle = up->throttle;
    sl_waitq_unlock();
    return news;
}

/* Another instance's breaker verdict: open until its end, or closed again; HealthChanged when it moved here.
 */
static void
apply_breaker(sl_cluster_shared_t *s, const sl_cluster_msg_t *m, sl_upstream_t *up, int64_t now)
{
    bool changed;
    pthread_mutex_lock(&up->lock);
    if (m->op == SL_CLUSTER_BREAKER_CLOSED) {
        changed = sl_breaker_on_success(&up->breaker);
    } else {
        int64_t until = m->until_ms == SL_CLUSTER_NEVER
                            ? SL_BREAKER_UNTIL_CLEARED
                            : sl_cluster_mono_ms_of(m->until_ms, now, sl_wall_ms(),
                                                    sl_cluster_clock_offset_ms(s->cluster));
        sl_breaker_cause_t cause = m->grace_ms > 0 && m->grace_ms < SL_BREAKER_CAUSE_COUNT
                                       ? (sl_breaker_cause_t)m->grace_ms
                                       : SL_BREAKER_CAUSE_UNEXPLAINED;
        changed = sl_breaker_adopt_open(&up->breaker, cause, until, m->consecutive, now);
    }
    sl_breaker_t b = up->breaker;
    pthread_mutex_unlock(&up->lock);
    if (changed && s->hooks.announce_health != NULL)
        s->hooks.announce_health(s->hooks.ctx, up, &b);
}

/* The config key's value (a pushed config): handed to the runtime, applied or, at the first join, noted. */
static void
read_config_record(sl_cluster_shared_t *s, const redisReply *r, bool apply)
{
    uint64_t revision;
    const char *origin, *text;
    size_t origin_len, text_len;
    if (r == NULL || r->type != REDIS_REPLY_STRING || s->hooks.adopt_config == NULL ||
        !sl_cluster_config_parse(r->str, r->len, &revision, &origin, &origin_len, &text, &text_len))
        return;
    const char *self = sl_cluster_instance(s->cluster);
    if (origin_len == strlen(self) && memcmp(origin, self, origin_len) == 0)
        return;
    s->hooks.adopt_config(s->hooks.ctx, origin, origin_len, revision, text, text_len, apply);
}

static void
on_config_pushed(void *ctx, const redisReply *r)
{
    read_config_record(ctx, r, true);
}

static void
on_config_at_first_join(void *ctx, const redisReply *r)
{
    read_config_record(ctx, r, false);
}

static void
read_config_key(sl_cluster_shared_t *s, sl_cluster_reply_cb done)
{
    char key[400];
    sl_cluster_key(key, sizeof(key), sl_cluster_name(s->cluster), "config", NULL);
    sl_cluster_commandv(s->cluster, done, s, 2, (const char *[]){"GET", key});
}

static void
on_line(sl_cluster_shared_t *s, const char *line, size_t len)
{
    sl_cluster_msg_t m;
    if (!sl_cluster_msg_decode(line, len, &m))
        return;
    const char *self = sl_cluster_instance(s->cluster);
    if (m.origin_len == strlen(self) && memcmp(m.origin, self, m.origin_len) == 0)
        return;
    char name[256];
    if (m.upstream_len >= sizeof(name))
        return;
    memcpy(name, m.upstream, m.upstream_len);
    name[m.upstream_len] = '\0';
    if (m.op == SL_CLUSTER_CONFIG) {
        read_config_key(s, on_config_pushed);
        return;
    }
    if (m.op == SL_CLUSTER_LIMITS) {
        s->hooks.apply_limits(s->hooks.ctx, m.subject_kind == 'k' ? SL_BUCKET_CLIENT : SL_BUCKET_PROVIDER,
                              name, m.limits, m.n_limits);
        return;
    }
    sl_upstream_t *up = s->hooks.find(s->hooks.ctx, name);
    if (up == NULL)
        return;
    int64_t now = sl_now_ms();
    if (m.op == SL_CLUSTER_BREAKER_OPEN || m.op == SL_CLUSTER_BREAKER_CLOSED) {
        apply_breaker(s, &m, up, now);
        return;
    }
    int64_t until = m.until_ms < 0 ? 0
                                   : sl_cluster_mono_ms_of(m.until_ms, now, sl_wall_ms(),
                                                           sl_cluster_clock_offset_ms(s->cluster));
    sl_throttle_news_t news = apply(&m, up, until, now);
    if (news.changed && s->hooks.announce != NULL)
        s->hooks.announce(s->hooks.ctx, &news);
}

static void
on_message(void *ctx, const char *line, size_t len)
{
    on_line(ctx, line, len);
}

/* The pause keys read at a join: each holds the line that started the pause. */
static void
on_pause_keys(void *ctx, const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type == REDIS_REPLY_STRING)
            on_line(ctx, r->element[i]->str, r->element[i]->len);
    }
}

typedef struct {
    sl_cluster_shared_t *s;
    bool redis_restarted;
    const char **keys; /* MGET's arguments */
    char (*names)[400];
    size_t n, cap;
} join_t;

static void
on_join_upstream(void *ctx, sl_upstream_t *up)
{
    join_t *j = ctx;
    if (j->n + 3 > j->cap) {
        j->cap = j->cap * 2 + 8;
        j->names = sl_xrealloc(j->names, j->cap * sizeof(*j->names));
    }
    sl_cluster_key(j->names[j->n++], sizeof(*j->names), sl_cluster_name(j->s->cluster), "pause", up->name);
    sl_cluster_key(j->names[j->n++], sizeof(*j->names), sl_cluster_name(j->s->cluster), "manual", up->name);
    sl_cluster_key(j->names[j->n++], sizeof(*j->names), sl_cluster_name(j->s->cluster), "breaker", up->name);
    if (!j->redis_restarted)
        return;
    /* Redis lost its data: this instance's own pauses are announced again. */
    int64_t now = sl_now_ms();
    sl_waitq_lock();
    sl_throttle_t t = up->throttle;
    sl_waitq_unlock();
    if (t.state == SL_THROTTLE_PAUSED && t.pause_until_ms > now)
        publish_throttle(j->s, SL_CLUSTER_PAUSE_429, up, t.pause_until_ms, &t);
    if (t.manual_until_ms != 0 && t.manual_until_ms > now)
        publish_throttle(j->s, SL_CLUSTER_PAUSE_MANUAL, up, t.manual_until_ms, &t);
}

static void
on_joined(void *ctx, bool redis_restarted)
{
    sl_cluster_shared_t *s = ctx;
    if (redis_restarted)
        sl__cluster_readd_usage(s);
    sl_cluster_tickets_readd(s->tickets, s->cluster);
    /* A config pushed while this instance was away applies now; at the first join it keeps its own file. */
    read_config_key(s, s->joined_before ? on_config_pushed : on_config_at_first_join);
    s->joined_before = true;
    join_t j = {.s = s, .redis_restarted = redis_restarted};
    s->hooks.each(s->hooks.ctx, on_join_upstream, &j);
    if (j.n > 0) {
        const char **argv = sl_xcalloc(j.n + 1, sizeof(*argv));
        argv[0] = "MGET";
        for (size_t i = 0; i < j.n; i++)
            argv[i + 1] = j.names[i];
        size_t *lens = sl_xcalloc(j.n + 1, sizeof(*lens));
        for (size_t i = 0; i <= j.n; i++)
            lens[i] = strlen(argv[i]);
        sl_cluster_command(s->cluster, (int)j.n + 1, argv, lens, on_pause_keys, s);
        free(argv);
        free(lens);
    }
    free(j.names);
}

/* ---- the rest: this instance's own decisions, and what others need to know of them ----------------- */

static void
cluster_claim_upstream(sl_shared_state_t *ss, const sl_upstream_claim_t *c, sl_shared_call_t *call,
                       sl_upstream_claim_cb done, void *ctx)
{
    sl__cluster_claim_upstream(state_of(ss), c, call, done, ctx);
}

static void
cluster_release_upstream(sl_shared_state_t *ss, const sl_upstream_release_t *rel)
{
    sl__cluster_release_upstream(state_of(ss), rel);
}

void
sl__cluster_publish_abandoned(sl_cluster_shared_t *s, sl_upstream_t *up)
{
    publish(s, SL_CLUSTER_PROBE_ABANDONED, up, -1, 0, 0);
}

static void
cluster_hop_sent(sl_shared_state_t *ss, sl_upstream_t *up, bool dispatching, sl_charge_t *charge,
                 int64_t wall_ms)
{
    sl_cluster_shared_t *s = state_of(ss);
    sl_charge_t was = charge != NULL ? *charge : (sl_charge_t){0};
    sl_shared_hop_sent(s->local, up, dispatching, charge, wall_ms);
    if (charge != NULL && charge->set != NULL)
        charge->shared_at_ms = sl_cluster_usage_move(s->usage, &was, charge->at_ms);
}

/* The news of a change this instance made, published when the 429 state moved. */
typedef struct {
    sl_cluster_shared_t *s;
    sl_cluster_op_t op;
    sl_throttle_news_cb done;
    void *ctx;
    sl_throttle_state_t before;
} news_relay_t;

static void
relay_news(void *ctx, const sl_throttle_news_t *news)
{
    news_relay_t *n = ctx;
    if (news->changed) {
        const sl_throttle_t *t = &news->throttle;
        switch (n->op) {
        case SL_CLUSTER_PAUSE_429:
            if (t->state == SL_THROTTLE_PAUSED)
                publish_throttle(n->s, n->op, news->up, t->pause_until_ms, t);
            break;
        case SL_CLUSTER_ANSWERED:
            /* Only the probe's verdict is news to the others; a reset streak elsewhere is theirs to count. */
            if (n->before == SL_THROTTLE_PROBING && t->state == SL_THROTTLE_FREE)
                publish_throttle(n->s, n->op, news->up, -1, t);
            break;
        case SL_CLUSTER_PAUSE_MANUAL:
            publish_throttle(n->s, n->op, news->up, t->manual_until_ms, t);
            break;
        default:
            publish_throttle(n->s, n->op, news->up, -1, t);
            break;
        }
    }
    n->done(n->ctx, news);
}

static sl_throttle_state_t
state_now(sl_upstream_t *up)
{
    sl_waitq_lock();
    sl_throttle_state_t st = up->throttle.state;
    sl_waitq_unlock();
    return st;
}

static void
cluster_upstream_answered(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, sl_shared_call_t *call,
                          sl_throttle_news_cb done, void *ctx)
{
    sl_cluster_shared_t *s = state_of(ss);
    (void)call;
    news_relay_t n = {s, SL_CLUSTER_ANSWERED, done, ctx, state_now(up)};
    sl_shared_call_t here = {0};
    sl_shared_upstream_answered(s->local, up, now_ms, &here, relay_news, &n);
}

static void
cluster_upstream_rate_limited(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, int64_t hint_ms,
                              uint32_t max_pause_secs, const sl_retry_params_t *params,
                              sl_shared_call_t *call, sl_throttle_news_cb done, void *ctx)
{
    sl_cluster_shared_t *s = state_of(ss);
    (void)call;
    news_relay_t n = {s, SL_CLUSTER_PAUSE_429, done, ctx, state_now(up)};
    sl_shared_call_t here = {0};
    sl_shared_upstream_rate_limited(s->local, up, now_ms, hint_ms, max_pause_secs, params, &here, relay_news,
                                    &n);
}

static void
cluster_pause_upstream(sl_shared_state_t *ss, sl_upstream_t *up, int64_t until_ms, int64_t now_ms,
                       sl_shared_call_t *call, sl_throttle_news_cb done, void *ctx)
{
    sl_cluster_shared_t *s = state_of(ss);
    (void)call;
    news_relay_t n = {s, SL_CLUSTER_PAUSE_MANUAL, done, ctx, state_now(up)};
    sl_shared_call_t here = {0};
    sl_shared_pause_upstream(s->local, up, until_ms, now_ms, &here, relay_news, &n);
}

static void
cluster_resume_upstream(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, sl_shared_call_t *call,
                        sl_throttle_news_cb done, void *ctx)
{
    sl_cluster_shared_t *s = state_of(ss);
    (void)call;
    news_relay_t n = {s, SL_CLUSTER_RESUME, done, ctx, state_now(up)};
    sl_shared_call_t here = {0};
    sl_shared_resume_upstream(s->local, up, now_ms, &here, relay_news, &n);
}

static void
cluster_claim_key(sl_shared_state_t *ss, const sl_key_claim_t *c, sl_shared_call_t *call,
                  sl_key_claim_cb done, void *ctx)
{
    sl__cluster_claim_key(state_of(ss), c, call, done, ctx);
}

static void
cluster_settle(sl_shared_state_t *ss, sl_charge_t *charge, const sl_amounts_t *used, bool wake_line,
               int64_t wall_ms)
{
    sl__cluster_settle(state_of(ss), charge, used, wake_line, wall_ms);
}

static void
cluster_cancel(sl_shared_state_t *ss, sl_shared_call_t *call)
{
    sl__cluster_cancel(state_of(ss), call);
}

static void
cluster_join_lines(sl_shared_state_t *ss, sl_waiter_t *waiter, const sl_line_t *lines, size_t n,
                   sl_shared_call_t *call, sl_lines_joined_cb done, void *ctx)
{
    (void)call;
    sl_cluster_shared_t *s = state_of(ss);
    for (size_t i = 0; i < n; i++) {
        if (lines[i].up != NULL)
            sl_cluster_tickets_join(s->tickets, s->cluster, waiter, lines[i].up);
    }
    sl_shared_call_t here = {0};
    sl_shared_join_lines(s->local, waiter, lines, n, &here, done, ctx);
}

static void
cluster_leave_lines(sl_shared_state_t *ss, sl_waiter_t *waiter, const sl_line_t *wake, size_t n)
{
    sl_cluster_tickets_leave(state_of(ss)->tickets, state_of(ss)->cluster, waiter);
    sl_shared_leave_lines(state_of(ss)->local, waiter, wake, n);
}

static void
cluster_end_dispatch(sl_shared_state_t *ss, sl_upstream_t *up)
{
    sl_shared_end_dispatch(state_of(ss)->local, up);
}

/* As this instance knows it; a probe that waits for an older waiter's turn elsewhere looks again at its end.
 */
static sl_pause_t
cluster_pause_of(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms)
{
    sl_pause_t p = sl_shared_pause_of(state_of(ss)->local, up, now_ms);
    sl_waitq_lock();
    p.recovery_ms = sl_probe_turn_recovery(&up->probe_turn, &up->throttle, p.recovery_ms);
    sl_waitq_unlock();
    return p;
}

static sl_upstream_view_t
cluster_upstream_view(sl_shared_state_t *ss, sl_upstream_t *up, sl_limit_set_t *limits)
{
    return sl_shared_upstream_view(state_of(ss)->local, up, limits);
}

static void
cluster_limits_replaced(sl_shared_state_t *ss, sl_bucket_kind_t kind, const char *name,
                        const sl_limit_t *limits, size_t n)
{
    sl_cluster_shared_t *s = state_of(ss);
    const char *instance = sl_cluster_instance(s->cluster);
    sl_cluster_msg_t m = {.op = SL_CLUSTER_LIMITS,
                          .origin = instance,
                          .origin_len = strlen(instance),
                          .upstream = name,
                          .upstream_len = strlen(name),
                          .subject_kind = kind == SL_BUCKET_CLIENT ? 'k' : 'p',
                          .n_limits = n};
    if (n > SL_CLUSTER_MAX_LIMITS) {
        sl_log_warn("cluster %s: the %zu limits of %s are more than %d: not sent to the other instances",
                    sl_cluster_name(s->cluster), n, name, SL_CLUSTER_MAX_LIMITS);
        return;
    }
    memcpy(m.limits, limits, n * sizeof(*limits));
    char line[1024];
    size_t len = sl_cluster_msg_encode(&m, line, sizeof(line));
    if (len > 0)
        sl_cluster_publish(s->cluster, line, len);
}

/* A config pushed here, for the others: kept in the config key (for those away now), then announced. */
static void
cluster_config_replaced(sl_shared_state_t *ss, const char *redacted, size_t len, uint64_t revision)
{
    sl_cluster_shared_t *s = state_of(ss);
    const char *instance = sl_cluster_instance(s->cluster);
    size_t record_len;
    char *record = sl_cluster_config_record(revision, instance, redacted, len, &record_len);
    char key[400];
    sl_cluster_key(key, sizeof(key), sl_cluster_name(s->cluster), "config", NULL);
    sl_cluster_command(s->cluster, 3, (const char *[]){"SET", key, record},
                       (const size_t[]){3, strlen(key), record_len}, NULL, NULL);
    free(record);
    sl_cluster_msg_t m = {.op = SL_CLUSTER_CONFIG,
                          .origin = instance,
                          .origin_len = strlen(instance),
                          .upstream = "-",
                          .upstream_len = 1,
                          .until_ms = (int64_t)revision};
    char line[512];
    size_t line_len = sl_cluster_msg_encode(&m, line, sizeof(line));
    if (line_len > 0)
        sl_cluster_publish(s->cluster, line, line_len);
}

/* The breaker's verdict, for the others: open (with its cause as the GRACE field) or closed again. */
static void
cluster_health_changed(sl_shared_state_t *ss, sl_upstream_t *up, const sl_breaker_t *b, int64_t now_ms)
{
    (void)now_ms;
    sl_cluster_shared_t *s = state_of(ss);
    if (b->state == SL_BREAKER_OPEN)
        publish(s, SL_CLUSTER_BREAKER_OPEN, up,
                b->until_ms == SL_BREAKER_UNTIL_CLEARED ? SL_THROTTLE_NEVER : b->until_ms, b->trips,
                (int64_t)b->cause);
    else if (b->state == SL_BREAKER_CLOSED)
        publish(s, SL_CLUSTER_BREAKER_CLOSED, up, -1, 0, 0);
}

static void
cluster_free(sl_shared_state_t *ss)
{
    sl_cluster_shared_t *s = state_of(ss);
    sl_cluster_stop(s->cluster);
    sl_cluster_usage_free(s->usage);
    sl_cluster_tickets_free(s->tickets);
    sl_shared_state_free(s->local);
    pthread_mutex_destroy(&s->slots_lock);
    free(s->held);
    free(s);
}

static const sl_shared_state_ops_t cluster_ops = {
    .claim_upstream = cluster_claim_upstream,
    .release_upstream = cluster_release_upstream,
    .hop_sent = cluster_hop_sent,
    .upstream_answered = cluster_upstream_answered,
    .upstream_rate_limited = cluster_upstream_rate_limited,
    .pause_upstream = cluster_pause_upstream,
    .resume_upstream = cluster_resume_upstream,
    .claim_key = cluster_claim_key,
    .settle = cluster_settle,
    .join_lines = cluster_join_lines,
    .leave_lines = cluster_leave_lines,
    .end_dispatch = cluster_end_dispatch,
    .pause_of = cluster_pause_of,
    .upstream_view = cluster_upstream_view,
    .limits_replaced = cluster_limits_replaced,
    .config_replaced = cluster_config_replaced,
    .health_changed = cluster_health_changed,
    .cancel = cluster_cancel,
    .free = cluster_free,
};

/* Upstreams or limit sets, collected from the hooks' walks. */
typedef struct {
    void **items;
    size_t n, cap;
} ptr_list_t;

static void
ptr_list_push(ptr_list_t *l, void *p)
{
    if (l->n == l->cap) {
        l->cap = l->cap * 2 + 16;
        l->items = sl_xrealloc(l->items, l->cap * sizeof(*l->items));
    }
    l->items[l->n++] = p;
}

static void
list_set(void *ctx, sl_limit_set_t *set)
{
    if (set != NULL && set->n > 0)
        ptr_list_push(ctx, set);
}

static void
list_upstream(void *ctx, sl_upstream_t *up)
{
    ptr_list_push(ctx, up);
}

/* Which upstreams have requests waiting on other instances, as their last heartbeats say. */
static void
note_waiting_elsewhere(sl_cluster_shared_t *s)
{
    ptr_list_t l = {0};
    s->hooks.each(s->hooks.ctx, list_upstream, &l);
    if (l.n == 0)
        return;
    sl_upstream_t **ups = (sl_upstream_t **)l.items;
    sl_cluster_count_t *others = sl_xcalloc(l.n, sizeof(*others));
    for (size_t i = 0; i < l.n; i++)
        others[i].name = ups[i]->name;
    sl_cluster_member_t *roster;
    size_t n_roster = sl_cluster_roster(s->cluster, &roster);
    sl_cluster_others_counts(roster, n_roster, sl_cluster_instance(s->cluster), others, l.n);
    sl_cluster_roster_free(roster, n_roster);
    sl_waitq_lock();
    for (size_t i = 0; i < l.n; i++)
        ups[i]->waiting_elsewhere = others[i].queued > 0;
    sl_waitq_unlock();
    free(others);
    free(l.items);
}

/*
 * Each heartbeat: the slots held here are renewed, the claims learn where
 * others wait, and the views learn the cluster's use of every limit.
 */
static void
on_heartbeat(void *ctx)
{
    sl_cluster_shared_t *s = ctx;
    sl__cluster_on_heartbeat(s);
    note_waiting_elsewhere(s);
    ptr_list_t l = {0};
    s->hooks.each_set(s->hooks.ctx, list_set, &l);
    sl_cluster_usage_refresh(s->usage, (sl_limit_set_t **)l.items, l.n);
    free(l.items);
}

sl_cluster_part_t
sl_cluster_part(const sl_cluster_t *cluster)
{
    if (sl_cluster_state(cluster) == SL_CLUSTER_JOINED)
        return SL_CLUSTER_PART_JOINED;
    return sl_cluster_ever_joined(cluster) ? SL_CLUSTER_PART_DEGRADED : SL_CLUSTER_PART_ALONE;
}

/* The state is stored before this is called: the part read now is the one it changed to. */
static void
on_state(void *ctx, sl_cluster_state_t state, const char *reason, uint32_t instances)
{
    (void)state;
    sl_cluster_shared_t *s = ctx;
    if (s->hooks.announce_cluster != NULL)
        s->hooks.announce_cluster(s->hooks.ctx, sl_cluster_part(s->cluster), reason, instances);
}

static void
describe(void *ctx, char *out, size_t size)
{
    sl_cluster_shared_t *s = ctx;
    s->hooks.describe(s->hooks.ctx, out, size);
}

static void
on_tick(void *ctx)
{
    sl_cluster_shared_t *s = ctx;
    sl_cluster_usage_flush(s->usage);
}

sl_shared_state_t *
sl_shared_cluster_new(sl_shared_state_t *local, const sl_cluster_config_t *config, const char *instance,
                      const sl_shared_cluster_hooks_t *hooks, sl_cluster_t **cluster)
{
    sl_cluster_shared_t *s = sl_xcalloc(1, sizeof(*s));
    s->base.ops = &cluster_ops;
    s->local = local;
    s->hooks = *hooks;
    s->closed_when_alone = config->when_redis_down == SL_REDIS_DOWN_CLOSED;
    pthread_mutex_init(&s->slots_lock, NULL);
    s->tickets = sl_cluster_tickets_new();
    s->cluster = sl_cluster_start(config, instance,
                                  &(sl_cluster_hooks_t){.on_message = on_message,
                                                        .on_joined = on_joined,
                                                        .on_heartbeat = on_heartbeat,
                                                        .on_tick = on_tick,
                                                        .on_state = on_state,
                                                        .describe = hooks->describe != NULL ? describe : NULL,
                                                        .ctx = s});
    if (s->cluster == NULL) {
        sl_cluster_tickets_free(s->tickets);
        pthread_mutex_destroy(&s->slots_lock);
        free(s);
        return NULL;
    }
    s->usage = sl_cluster_usage_new(s->cluster);
    *cluster = s->cluster;
    return &s->base;
}
