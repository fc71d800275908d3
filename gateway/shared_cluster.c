/*
 * The shared state of an instance of a cluster (cluster.md): this process's
 * own state (shared_local.c) for what it decides alone, kept in step with
 * the other instances through Redis (cluster.h) for an upstream's pause and
 * the one probe that ends it.
 *
 *   - A pause of any instance (a 429's, an operator's) and its end (the
 *     probe's verdict, a resume) are published on the events channel and
 *     kept in a key until they end; every instance applies what another
 *     published to its own throttle (sl_throttle_adopt_pause & co.), and
 *     reads the keys when it joins.
 *   - The probe after a pause is a lease: the request this instance would
 *     send as the probe goes only if it takes `probe:UPSTREAM` (set if
 *     absent, for the probe's grace); else the probe is out elsewhere and
 *     the request waits for its verdict like the rest of the line.
 *
 * Not joined (Redis down or slow), every decision is this instance's own,
 * as in one process. Nothing else makes a Redis round trip.
 */
#include "shared_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "core/cluster_msg.h"
#include "core/xalloc.h"
#include "log.h"
#include "worker.h"

/* Upstreams whose lines are woken at a heartbeat, at most. */
#define SL_CONTENDED_MAX 64

typedef struct {
    sl_shared_state_t base;
    sl_shared_state_t *local;
    sl_cluster_t *cluster;
    sl_shared_cluster_hooks_t hooks;
    atomic_uint_fast64_t next_token; /* names a probe's lease and a slot */
    pthread_mutex_t slots_lock;      /* guards what follows */
    struct held_slot *held;          /* the slots this instance holds */
    size_t n_held, cap_held;
    sl_upstream_t
        *contended[SL_CONTENDED_MAX]; /* lines that found every slot taken since the last heartbeat */
    size_t n_contended;
} cluster_state_t;

static cluster_state_t *
state_of(sl_shared_state_t *ss)
{
    return (cluster_state_t *)ss;
}

/* ---- publishing this instance's changes ------------------------------------------------------- */

static void
publish(cluster_state_t *s, sl_cluster_op_t op, sl_upstream_t *up, int64_t until_mono, const sl_throttle_t *t)
{
    if (!sl_cluster_joined(s->cluster))
        return;
    int64_t mono = sl_now_ms(), wall = sl_wall_ms(), offset = sl_cluster_clock_offset_ms(s->cluster);
    const char *instance = sl_cluster_instance(s->cluster);
    sl_cluster_msg_t m = {
        .op = op,
        .origin = instance,
        .origin_len = strlen(instance),
        .upstream = up->name,
        .upstream_len = strlen(up->name),
        .until_ms = until_mono < 0 ? -1 : sl_cluster_redis_ms_of(until_mono, mono, wall, offset),
        .consecutive = t != NULL ? t->consecutive : 0,
        .grace_ms = t != NULL ? t->grace_ms : 0,
    };
    char line[512];
    size_t len = sl_cluster_msg_encode(&m, line, sizeof(line));
    if (len == 0)
        return;
    /* The pause is also kept in a key until it ends, for instances that join later. */
    char key[400];
    const char *kind = op == SL_CLUSTER_PAUSE_MANUAL ? "manual" : "pause";
    sl_cluster_key(key, sizeof(key), sl_cluster_name(s->cluster), kind, up->name);
    if (op == SL_CLUSTER_PAUSE_429 || (op == SL_CLUSTER_PAUSE_MANUAL && until_mono != SL_THROTTLE_NEVER)) {
        char px[24];
        snprintf(px, sizeof(px), "%lld", (long long)(until_mono - mono > 1 ? until_mono - mono : 1));
        sl_cluster_commandv(s->cluster, NULL, NULL, 5, (const char *[]){"SET", key, line, "PX", px});
    } else if (op == SL_CLUSTER_PAUSE_MANUAL) {
        sl_cluster_commandv(s->cluster, NULL, NULL, 3, (const char *[]){"SET", key, line});
    } else if (op == SL_CLUSTER_RESUME) {
        char pause_key[400];
        sl_cluster_key(pause_key, sizeof(pause_key), sl_cluster_name(s->cluster), "pause", up->name);
        sl_cluster_key(key, sizeof(key), sl_cluster_name(s->cluster), "manual", up->name);
        sl_cluster_commandv(s->cluster, NULL, NULL, 3, (const char *[]){"DEL", key, pause_key});
    }
    if (op == SL_CLUSTER_ANSWERED || op == SL_CLUSTER_PROBE_ABANDONED || op == SL_CLUSTER_RESUME) {
        /* The probe is over: the next pause's probe takes the lease afresh. */
        char probe_key[400];
        sl_cluster_key(probe_key, sizeof(probe_key), sl_cluster_name(s->cluster), "probe", up->name);
        sl_cluster_commandv(s->cluster, NULL, NULL, 2, (const char *[]){"DEL", probe_key});
    }
    sl_cluster_publish(s->cluster, line, len);
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
        sl_waitq_wake(&up->waitq, 1);
        break;
    case SL_CLUSTER_OP_COUNT:
        break;
    }
    news.throttle = up->throttle;
    sl_waitq_unlock();
    return news;
}

static void
on_line(cluster_state_t *s, const char *line, size_t len)
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
    sl_upstream_t *up = s->hooks.find(s->hooks.ctx, name);
    if (up == NULL)
        return;
    int64_t now = sl_now_ms();
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
    cluster_state_t *s;
    bool redis_restarted;
    const char **keys; /* MGET's arguments */
    char (*names)[400];
    size_t n, cap;
} join_t;

static void
on_join_upstream(void *ctx, sl_upstream_t *up)
{
    join_t *j = ctx;
    if (j->n + 2 > j->cap) {
        j->cap = j->cap * 2 + 8;
        j->names = sl_xrealloc(j->names, j->cap * sizeof(*j->names));
    }
    sl_cluster_key(j->names[j->n++], sizeof(*j->names), sl_cluster_name(j->s->cluster), "pause", up->name);
    sl_cluster_key(j->names[j->n++], sizeof(*j->names), sl_cluster_name(j->s->cluster), "manual", up->name);
    if (!j->redis_restarted)
        return;
    /* Redis lost its data: this instance's own pauses are announced again. */
    int64_t now = sl_now_ms();
    sl_waitq_lock();
    sl_throttle_t t = up->throttle;
    sl_waitq_unlock();
    if (t.state == SL_THROTTLE_PAUSED && t.pause_until_ms > now)
        publish(j->s, SL_CLUSTER_PAUSE_429, up, t.pause_until_ms, &t);
    if (t.manual_until_ms != 0 && t.manual_until_ms > now)
        publish(j->s, SL_CLUSTER_PAUSE_MANUAL, up, t.manual_until_ms, &t);
}

static void
on_joined(void *ctx, bool redis_restarted)
{
    cluster_state_t *s = ctx;
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

/* ---- slots held here ----------------------------------------------------------------------------- */

/* A max_concurrent slot this instance holds as a lease (renewed with each heartbeat). */
typedef struct held_slot {
    sl_upstream_t *up;
    uint64_t token;
} held_slot_t;

static void
slot_member(cluster_state_t *s, uint64_t token, char *out, size_t size)
{
    snprintf(out, size, "%s:%llu", sl_cluster_instance(s->cluster), (unsigned long long)token);
}

static void
hold_slot(cluster_state_t *s, sl_upstream_t *up, uint64_t token)
{
    pthread_mutex_lock(&s->slots_lock);
    if (s->n_held == s->cap_held) {
        s->cap_held = s->cap_held * 2 + 16;
        s->held = sl_xrealloc(s->held, s->cap_held * sizeof(*s->held));
    }
    s->held[s->n_held++] = (held_slot_t){up, token};
    pthread_mutex_unlock(&s->slots_lock);
}

static void
drop_slot(cluster_state_t *s, uint64_t token)
{
    pthread_mutex_lock(&s->slots_lock);
    for (size_t i = 0; i < s->n_held; i++) {
        if (s->held[i].token == token) {
            s->held[i] = s->held[--s->n_held];
            break;
        }
    }
    pthread_mutex_unlock(&s->slots_lock);
}

/* Gives a slot back to the cluster; whoever found the slots all taken hears of it. */
static void
release_slot(cluster_state_t *s, sl_upstream_t *up, uint64_t token)
{
    static const char script[] = "redis.call('ZREM', KEYS[1], ARGV[1])\n"
                                 "if redis.call('EXISTS', KEYS[2]) == 1 then\n"
                                 "  redis.call('PUBLISH', ARGV[3], ARGV[2])\n"
                                 "end\n"
                                 "return 1\n";
    drop_slot(s, token);
    char member[192], slots[400], busy[400], channel[200], line[512];
    slot_member(s, token, member, sizeof(member));
    sl_cluster_key(slots, sizeof(slots), sl_cluster_name(s->cluster), "slots", up->name);
    sl_cluster_key(busy, sizeof(busy), sl_cluster_name(s->cluster), "busy", up->name);
    sl_cluster_key(channel, sizeof(channel), sl_cluster_name(s->cluster), "events", NULL);
    const char *instance = sl_cluster_instance(s->cluster);
    sl_cluster_msg_t m = {.op = SL_CLUSTER_SLOT_FREED,
                          .origin = instance,
                          .origin_len = strlen(instance),
                          .upstream = up->name,
                          .upstream_len = strlen(up->name),
                          .until_ms = -1};
    if (sl_cluster_msg_encode(&m, line, sizeof(line)) == 0)
        return;
    sl_cluster_commandv(s->cluster, NULL, NULL, 8,
                        (const char *[]){"EVAL", script, "2", slots, busy, member, line, channel});
}

/* The slots' leases end SL_SLOT_LEASE_MS after the last heartbeat of the instance that holds them. */
#define SL_SLOT_LEASE_MS SL_CLUSTER_HEARTBEAT_TTL_MS

static int
by_upstream(const void *a, const void *b)
{
    const held_slot_t *x = a, *y = b;
    return x->up < y->up ? -1 : x->up > y->up;
}

/* Each heartbeat: every slot held here is renewed, one ZADD per upstream. */
static void
renew_slots(cluster_state_t *s)
{
    pthread_mutex_lock(&s->slots_lock);
    size_t n = s->n_held;
    held_slot_t *held = n > 0 ? sl_xcalloc(n, sizeof(*held)) : NULL;
    if (n > 0)
        memcpy(held, s->held, n * sizeof(*held));
    pthread_mutex_unlock(&s->slots_lock);
    qsort(held, n, sizeof(*held), by_upstream);
    int64_t until = sl_cluster_redis_ms_of(sl_now_ms() + SL_SLOT_LEASE_MS, sl_now_ms(), sl_wall_ms(),
                                           sl_cluster_clock_offset_ms(s->cluster));
    char score[24];
    snprintf(score, sizeof(score), "%lld", (long long)until);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && held[j].up == held[i].up)
            j++;
        size_t argc = 3 + 2 * (j - i);
        const char **argv = sl_xcalloc(argc, sizeof(*argv));
        size_t *lens = sl_xcalloc(argc, sizeof(*lens));
        char key[400];
        char(*members)[192] = sl_xcalloc(j - i, sizeof(*members));
        sl_cluster_key(key, sizeof(key), sl_cluster_name(s->cluster), "slots", held[i].up->name);
        argv[0] = "ZADD";
        argv[1] = key;
        argv[2] = "XX";
        for (size_t k = i; k < j; k++) {
            slot_member(s, held[k].token, members[k - i], sizeof(members[0]));
            argv[3 + 2 * (k - i)] = score;
            argv[4 + 2 * (k - i)] = members[k - i];
        }
        for (size_t k = 0; k < argc; k++)
            lens[k] = strlen(argv[k]);
        sl_cluster_command(s->cluster, (int)argc, argv, lens, NULL, NULL);
        free(argv);
        free(lens);
        free(members);
        i = j;
    }
    free(held);
}

/*
 * Each heartbeat: the heads of lines this instance found all slots taken
 * for look again, in case news of a slot freed came before they were in
 * line to hear it.
 */
static void
wake_contended(cluster_state_t *s)
{
    pthread_mutex_lock(&s->slots_lock);
    size_t n = s->n_contended;
    sl_upstream_t *ups[SL_CONTENDED_MAX];
    memcpy(ups, s->contended, n * sizeof(ups[0]));
    s->n_contended = 0;
    pthread_mutex_unlock(&s->slots_lock);
    sl_waitq_lock();
    for (size_t i = 0; i < n; i++)
        sl_waitq_wake(&ups[i]->waitq, 1);
    sl_waitq_unlock();
}

static void
note_contended(cluster_state_t *s, sl_upstream_t *up)
{
    pthread_mutex_lock(&s->slots_lock);
    size_t i = 0;
    while (i < s->n_contended && s->contended[i] != up)
        i++;
    if (i == s->n_contended && i < SL_CONTENDED_MAX)
        s->contended[s->n_contended++] = up;
    pthread_mutex_unlock(&s->slots_lock);
}

static void
on_heartbeat(void *ctx)
{
    renew_slots(ctx);
    wake_contended(ctx);
}

/* ---- claims that ask the cluster: the probe's lease, a slot ------------------------------------------ */

static const char claim_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local max = tonumber(ARGV[3])\n"
    "if max > 0 then\n"
    "  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
    "  if redis.call('ZCARD', KEYS[2]) >= max then\n"
    "    redis.call('SET', KEYS[3], '1', 'PX', 10000)\n"
    "    return 2\n"
    "  end\n"
    "end\n"
    "if tonumber(ARGV[2]) > 0 then\n"
    "  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end\n"
    "end\n"
    "if max > 0 then\n"
    "  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[1])\n"
    "  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[4]) * 2)\n"
    "end\n"
    "return 1\n";

/* What the cluster said of a claim. */
typedef enum { ASKED_NO_ANSWER = -1, ASKED_ELSEWHERE = 0, ASKED_TAKEN = 1, ASKED_FULL = 2 } asked_t;

typedef enum { ASK_WAITING, ASK_DECIDED_HERE, ASK_CANCELLED } ask_wait_t;

/* A claim this instance took, waiting for the cluster's word on its probe's lease and its slot. */
typedef struct {
    sl_shared_letter_t letter; /* Redis's answer, handed to the claim's worker */
    sl_timer_t timeout;        /* timeout_ms: then this instance decides alone */
    cluster_state_t *s;
    sl_shared_call_t *call;
    sl_shared_inbox_t *inbox; /* the call's, as it was when the claim was made */
    sl_upstream_claim_cb done;
    void *ctx;
    sl_upstream_claim_result_t result;
    sl_upstream_t *up;
    bool wants_slot;
    ask_wait_t wait;
    asked_t outcome;
    uint64_t token;
    char lease_key[400], member[192];
} ask_t;

static void
capture_claim(void *ctx, const sl_upstream_claim_result_t *result)
{
    *(sl_upstream_claim_result_t *)ctx = *result;
}

/*
 * Gives back what the local claim took: the slot, the reservation, its
 * place at the line's head (the probe). unused: the cluster had no slot,
 * so nobody in line is woken for it.
 */
static void
give_back(cluster_state_t *s, sl_upstream_t *up, sl_upstream_claim_result_t *res, bool probe_too, bool unused)
{
    if (res->dispatching && !unused)
        sl_shared_end_dispatch(s->local, up);
    sl_shared_release_upstream(s->local, &(sl_upstream_release_t){.up = up,
                                                                  .charge = &res->charge,
                                                                  .throttle_probe = probe_too,
                                                                  .breaker_probe = res->breaker_probe,
                                                                  .unused = unused,
                                                                  .dispatching = res->dispatching,
                                                                  .wall_ms = res->charge.at_ms});
}

/* Not taken after all: skip, with what the claim showed (ThrottleChanged, HealthChanged) kept. */
static void
skip_as(ask_t *a, sl_skip_t skip)
{
    a->result = (sl_upstream_claim_result_t){
        .skip = skip,
        .throttle_changed = a->result.throttle_changed,
        .throttle = a->result.throttle,
        .limits_changed = a->result.limits_changed,
        .shown = a->result.shown,
        .shown_until_ms = a->result.shown_until_ms,
        .limit = a->result.limit,
        .breaker_changed = a->result.breaker_changed,
        .breaker = a->result.breaker,
    };
}

static void
release_lease(cluster_state_t *s, const char *key, const char *member)
{
    static const char script[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                                 "return redis.call('DEL', KEYS[1]) end return 0";
    sl_cluster_commandv(s->cluster, NULL, NULL, 5, (const char *[]){"EVAL", script, "1", key, member});
}

/* The cluster's word, on the claim's worker. */
static void
on_ask_letter(sl_shared_letter_t *letter)
{
    ask_t *a = (ask_t *)letter;
    cluster_state_t *s = a->s;
    switch (a->wait) {
    case ASK_WAITING:
        sl_timer_cancel(a->call->timers, &a->timeout);
        a->call->pending = NULL;
        if (a->outcome == ASKED_ELSEWHERE) {
            /* Another instance's probe is out: this request waits for its verdict, as the rest do here. */
            give_back(s, a->up, &a->result, false, false);
            skip_as(a, SL_SKIP_THROTTLED);
        } else if (a->outcome == ASKED_FULL) {
            /* Every slot is taken across the cluster: it waits in line as for a slot here. */
            give_back(s, a->up, &a->result, a->result.throttle_probe, true);
            skip_as(a, SL_SKIP_BUSY);
            note_contended(s, a->up);
        } else if (a->outcome == ASKED_TAKEN && a->wants_slot) {
            a->result.slot = a->token;
            hold_slot(s, a->up, a->token);
        }
        a->done(a->ctx, &a->result);
        break;
    case ASK_DECIDED_HERE:
        /* It went on this instance's word; a slot leased late is not its to hold (a probe's lease is). */
        if (a->outcome == ASKED_TAKEN && a->wants_slot)
            release_slot(s, a->up, a->token);
        break;
    case ASK_CANCELLED:
        if (a->outcome == ASKED_TAKEN) {
            if (a->result.throttle_probe)
                release_lease(s, a->lease_key, a->member);
            if (a->wants_slot)
                release_slot(s, a->up, a->token);
        }
        break;
    }
    free(a);
}

/* On the cluster's thread. */
static void
on_ask_reply(void *ctx, const redisReply *r)
{
    ask_t *a = ctx;
    a->outcome = r == NULL || r->type != REDIS_REPLY_INTEGER ? ASKED_NO_ANSWER : (asked_t)r->integer;
    sl_shared_inbox_post(a->inbox, &a->letter);
}

/* No answer within timeout_ms: this instance decides alone (as if not joined). */
static void
on_ask_timeout(sl_timer_t *t)
{
    ask_t *a = H2O_STRUCT_FROM_MEMBER(ask_t, timeout, t);
    a->wait = ASK_DECIDED_HERE;
    a->call->pending = NULL;
    a->done(a->ctx, &a->result);
}

/*
 * Not joined, max_concurrent is shared out: each instance takes its part of
 * it as last seen (cluster.md, "Redis down"; a count never seen counts as 2).
 */
static uint32_t
alone_share(cluster_state_t *s, uint32_t max_concurrent)
{
    uint32_t n = sl_cluster_instances(s->cluster);
    if (n == 0)
        n = 2;
    uint32_t share = max_concurrent / n;
    return share > 0 ? share : 1;
}

static void
cluster_claim_upstream(sl_shared_state_t *ss, const sl_upstream_claim_t *c, sl_shared_call_t *call,
                       sl_upstream_claim_cb done, void *ctx)
{
    cluster_state_t *s = state_of(ss);
    bool joined = sl_cluster_joined(s->cluster);
    sl_upstream_claim_t claim = *c;
    if (!joined && c->max_concurrent > 0)
        claim.max_concurrent = alone_share(s, c->max_concurrent);
    sl_upstream_claim_result_t res;
    sl_shared_call_t here = {0};
    sl_shared_claim_upstream(s->local, &claim, &here, capture_claim, &res);
    bool wants_slot = c->max_concurrent > 0;
    bool asks = res.skip == SL_SKIP_NONE && (res.throttle_probe || wants_slot);
    if (!asks || !joined || call->inbox == NULL || call->timers == NULL) {
        done(ctx, &res);
        return;
    }
    ask_t *a = sl_xcalloc(1, sizeof(*a));
    a->letter.open = on_ask_letter;
    a->s = s;
    a->call = call;
    a->inbox = call->inbox;
    a->done = done;
    a->ctx = ctx;
    a->result = res;
    a->up = c->up;
    a->wants_slot = wants_slot;
    a->token = atomic_fetch_add(&s->next_token, 1) + 1;
    slot_member(s, a->token, a->member, sizeof(a->member));
    const char *name = sl_cluster_name(s->cluster);
    char slots[400], busy[400], grace[24], max[16], lease[16];
    sl_cluster_key(a->lease_key, sizeof(a->lease_key), name, "probe", c->up->name);
    sl_cluster_key(slots, sizeof(slots), name, "slots", c->up->name);
    sl_cluster_key(busy, sizeof(busy), name, "busy", c->up->name);
    snprintf(grace, sizeof(grace), "%lld",
             (long long)(!res.throttle_probe         ? 0
                         : res.throttle.grace_ms > 0 ? res.throttle.grace_ms
                                                     : 1));
    snprintf(max, sizeof(max), "%u", c->max_concurrent);
    snprintf(lease, sizeof(lease), "%d", SL_SLOT_LEASE_MS);
    call->pending = a;
    sl_timer_arm(call->timers, &a->timeout, sl_now_ms() + sl_cluster_timeout_ms(s->cluster), on_ask_timeout);
    sl_cluster_commandv(
        s->cluster, on_ask_reply, a, 10,
        (const char *[]){"EVAL", claim_script, "3", a->lease_key, slots, busy, a->member, grace, max, lease});
}

static void
cluster_cancel(sl_shared_state_t *ss, sl_shared_call_t *call)
{
    cluster_state_t *s = state_of(ss);
    ask_t *a = call->pending;
    call->pending = NULL;
    sl_timer_cancel(call->timers, &a->timeout);
    a->wait = ASK_CANCELLED;
    /* What the claim took is given back, the probe too: it will not go from here. */
    give_back(s, a->up, &a->result, a->result.throttle_probe, false);
}

/* ---- the rest: this instance's own decisions, and what others need to know of them ----------------- */

static void
cluster_release_upstream(sl_shared_state_t *ss, const sl_upstream_release_t *rel)
{
    cluster_state_t *s = state_of(ss);
    sl_shared_release_upstream(s->local, rel);
    if (rel->slot != 0)
        release_slot(s, rel->up, rel->slot);
    if (rel->throttle_probe)
        publish(s, SL_CLUSTER_PROBE_ABANDONED, rel->up, -1, NULL);
}

static void
cluster_hop_sent(sl_shared_state_t *ss, sl_upstream_t *up, bool dispatching, sl_charge_t *charge,
                 int64_t wall_ms)
{
    sl_shared_hop_sent(state_of(ss)->local, up, dispatching, charge, wall_ms);
}

/* The news of a change this instance made, published when the 429 state moved. */
typedef struct {
    cluster_state_t *s;
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
                publish(n->s, n->op, news->up, t->pause_until_ms, t);
            break;
        case SL_CLUSTER_ANSWERED:
            /* Only the probe's verdict is news to the others; a reset streak elsewhere is theirs to count. */
            if (n->before == SL_THROTTLE_PROBING && t->state == SL_THROTTLE_FREE)
                publish(n->s, n->op, news->up, -1, t);
            break;
        case SL_CLUSTER_PAUSE_MANUAL:
            publish(n->s, n->op, news->up, t->manual_until_ms, t);
            break;
        default:
            publish(n->s, n->op, news->up, -1, t);
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
    cluster_state_t *s = state_of(ss);
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
    cluster_state_t *s = state_of(ss);
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
    cluster_state_t *s = state_of(ss);
    (void)call;
    news_relay_t n = {s, SL_CLUSTER_PAUSE_MANUAL, done, ctx, state_now(up)};
    sl_shared_call_t here = {0};
    sl_shared_pause_upstream(s->local, up, until_ms, now_ms, &here, relay_news, &n);
}

static void
cluster_resume_upstream(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms, sl_shared_call_t *call,
                        sl_throttle_news_cb done, void *ctx)
{
    cluster_state_t *s = state_of(ss);
    (void)call;
    news_relay_t n = {s, SL_CLUSTER_RESUME, done, ctx, state_now(up)};
    sl_shared_call_t here = {0};
    sl_shared_resume_upstream(s->local, up, now_ms, &here, relay_news, &n);
}

static void
cluster_claim_key(sl_shared_state_t *ss, const sl_key_claim_t *c, sl_shared_call_t *call,
                  sl_key_claim_cb done, void *ctx)
{
    (void)call;
    sl_shared_call_t here = {0};
    sl_shared_claim_key(state_of(ss)->local, c, &here, done, ctx);
}

static void
cluster_settle(sl_shared_state_t *ss, sl_charge_t *charge, const sl_amounts_t *used, bool wake_line,
               int64_t wall_ms)
{
    sl_shared_settle(state_of(ss)->local, charge, used, wake_line, wall_ms);
}

static void
cluster_join_lines(sl_shared_state_t *ss, sl_waiter_t *waiter, const sl_line_t *lines, size_t n,
                   sl_shared_call_t *call, sl_lines_joined_cb done, void *ctx)
{
    (void)call;
    sl_shared_call_t here = {0};
    sl_shared_join_lines(state_of(ss)->local, waiter, lines, n, &here, done, ctx);
}

static void
cluster_leave_lines(sl_shared_state_t *ss, sl_waiter_t *waiter, const sl_line_t *wake, size_t n)
{
    sl_shared_leave_lines(state_of(ss)->local, waiter, wake, n);
}

static void
cluster_end_dispatch(sl_shared_state_t *ss, sl_upstream_t *up)
{
    sl_shared_end_dispatch(state_of(ss)->local, up);
}

static sl_pause_t
cluster_pause_of(sl_shared_state_t *ss, sl_upstream_t *up, int64_t now_ms)
{
    return sl_shared_pause_of(state_of(ss)->local, up, now_ms);
}

static sl_upstream_view_t
cluster_upstream_view(sl_shared_state_t *ss, sl_upstream_t *up, sl_limit_set_t *limits)
{
    return sl_shared_upstream_view(state_of(ss)->local, up, limits);
}

static void
cluster_free(sl_shared_state_t *ss)
{
    cluster_state_t *s = state_of(ss);
    sl_cluster_stop(s->cluster);
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
    .cancel = cluster_cancel,
    .free = cluster_free,
};

sl_shared_state_t *
sl_shared_cluster_new(sl_shared_state_t *local, const sl_cluster_config_t *config, const char *instance,
                      const sl_shared_cluster_hooks_t *hooks, sl_cluster_t **cluster)
{
    cluster_state_t *s = sl_xcalloc(1, sizeof(*s));
    s->base.ops = &cluster_ops;
    s->local = local;
    s->hooks = *hooks;
    pthread_mutex_init(&s->slots_lock, NULL);
    s->cluster = sl_cluster_start(
        config, instance,
        &(sl_cluster_hooks_t){
            .on_message = on_message, .on_joined = on_joined, .on_heartbeat = on_heartbeat, .ctx = s});
    if (s->cluster == NULL) {
        free(s);
        return NULL;
    }
    *cluster = s->cluster;
    return &s->base;
}
