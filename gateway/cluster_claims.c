/*
 * Claims that ask the cluster (shared_cluster.h): the local claim first,
 * then, when it took something the cluster shares — the probe after a
 * pause, a max_concurrent slot, room in usage limits — one script in Redis
 * (SL_CLUSTER_CLAIM_LUA) checks and takes all of it or nothing. A claim
 * that needs none of these makes no round trip.
 *
 * The script goes on the claim's worker's own connection (cluster_lane.h),
 * so the answer comes on that worker; while that connection is down it goes
 * through the cluster's thread, and the answer is handed to the worker (its
 * inbox). There the claim is delivered as taken, or given back and
 * delivered as skipped. No answer within timeout_ms: the instance decides
 * alone, and a late answer is undone.
 */
#include "shared_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_lane.h"
#include "cluster_scripts.h"
#include "core/cluster_msg.h"
#include "core/xalloc.h"
#include "log.h"
#include "worker.h"

/* A slot's lease ends this long after the last heartbeat of the instance that holds it. */
#define SL_SLOT_LEASE_MS SL_CLUSTER_HEARTBEAT_TTL_MS

static bool
has_limits(const sl_limit_set_t *set)
{
    return set != NULL && set->n > 0;
}

/* ---- slots held here ----------------------------------------------------------------------------- */

/* A max_concurrent slot this instance holds as a lease (renewed with each heartbeat). */
typedef struct held_slot {
    sl_upstream_t *up;
    uint64_t token;
} held_slot_t;

/* A claim's name in Redis: its probe's lease value, its slot's member. */
static void
claim_name(sl_cluster_shared_t *s, uint64_t token, char *out, size_t size)
{
    snprintf(out, size, "%s:%llu", sl_cluster_instance(s->cluster), (unsigned long long)token);
}

static void
hold_slot(sl_cluster_shared_t *s, sl_upstream_t *up, uint64_t token)
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
drop_slot(sl_cluster_shared_t *s, uint64_t token)
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
release_slot(sl_cluster_shared_t *s, sl_upstream_t *up, uint64_t token)
{
    drop_slot(s, token);
    const char *name = sl_cluster_name(s->cluster), *instance = sl_cluster_instance(s->cluster);
    char member[192], slots[400], busy[400], channel[200], line[512];
    claim_name(s, token, member, sizeof(member));
    sl_cluster_key(slots, sizeof(slots), name, "slots", up->name);
    sl_cluster_key(busy, sizeof(busy), name, "busy", up->name);
    sl_cluster_key(channel, sizeof(channel), name, "events", NULL);
    sl_cluster_msg_t m = {.op = SL_CLUSTER_SLOT_FREED,
                          .origin = instance,
                          .origin_len = strlen(instance),
                          .upstream = up->name,
                          .upstream_len = strlen(up->name),
                          .until_ms = -1};
    if (sl_cluster_msg_encode(&m, line, sizeof(line)) == 0)
        return;
    sl_cluster_commandv(
        s->cluster, NULL, NULL, 8,
        (const char *[]){"EVAL", SL_CLUSTER_RELEASE_SLOT_LUA, "2", slots, busy, member, line, channel});
}

static int
by_upstream(const void *a, const void *b)
{
    const held_slot_t *x = a, *y = b;
    return x->up < y->up ? -1 : x->up > y->up;
}

/* Every slot held here is renewed, one ZADD per upstream. */
static void
renew_slots(sl_cluster_shared_t *s)
{
    pthread_mutex_lock(&s->slots_lock);
    size_t n = s->n_held;
    if (n == 0) {
        pthread_mutex_unlock(&s->slots_lock);
        return;
    }
    held_slot_t *held = sl_xcalloc(n, sizeof(*held));
    memcpy(held, s->held, n * sizeof(*held));
    pthread_mutex_unlock(&s->slots_lock);
    qsort(held, n, sizeof(*held), by_upstream);
    int64_t mono = sl_now_ms();
    int64_t until = sl_cluster_redis_ms_of(mono + SL_SLOT_LEASE_MS, mono, sl_wall_ms(),
                                           sl_cluster_clock_offset_ms(s->cluster));
    for (size_t i = 0; i < n;) {
        sl_cluster_args_t a = {0};
        char key[400];
        sl_cluster_key(key, sizeof(key), sl_cluster_name(s->cluster), "slots", held[i].up->name);
        sl_cluster_args_add(&a, "ZADD");
        sl_cluster_args_add(&a, key);
        sl_cluster_args_add(&a, "XX");
        size_t j = i;
        for (; j < n && held[j].up == held[i].up; j++) {
            char member[192];
            claim_name(s, held[j].token, member, sizeof(member));
            sl_cluster_args_addf(&a, "%lld", (long long)until);
            sl_cluster_args_add(&a, member);
        }
        sl_cluster_send(s->cluster, &a, NULL, NULL);
        i = j;
    }
    free(held);
}

/*
 * The heads of lines this instance found all slots taken for look again, in
 * case news of a slot freed came before they were in line to hear it.
 */
static void
wake_contended(sl_cluster_shared_t *s)
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
note_contended(sl_cluster_shared_t *s, sl_upstream_t *up)
{
    pthread_mutex_lock(&s->slots_lock);
    size_t i = 0;
    while (i < s->n_contended && s->contended[i] != up)
        i++;
    if (i == s->n_contended && i < SL_CONTENDED_MAX)
        s->contended[s->n_contended++] = up;
    pthread_mutex_unlock(&s->slots_lock);
}

void
sl__cluster_on_heartbeat(sl_cluster_shared_t *s)
{
    renew_slots(s);
    wake_contended(s);
}

/* ---- asking ----------------------------------------------------------------------------------------- */

/* What the cluster said of a claim (SL_CLUSTER_CLAIM_LUA's first number). */
typedef enum {
    ASKED_NO_ANSWER = -1,
    ASKED_ELSEWHERE = 0,
    ASKED_TAKEN = 1,
    ASKED_FULL = 2,
    ASKED_NO_ROOM = 3,
    ASKED_OLDER_ELSEWHERE = 4,
    ASKED_ROOM_OLDER_ELSEWHERE = 5
} asked_t;

typedef enum { ASK_WAITING, ASK_DECIDED_HERE, ASK_CANCELLED } ask_wait_t;

/* A claim this instance took, waiting for the cluster's word. */
typedef struct {
    sl_shared_letter_t letter; /* Redis's answer, handed to the claim's worker */
    sl_timer_t timeout;        /* timeout_ms: then this instance decides alone */
    sl_cluster_shared_t *s;
    sl_shared_call_t *call;
    sl_shared_inbox_t *inbox; /* the call's, as it was when the claim was made */
    void *ctx;
    bool is_key; /* a client key's claim, else an upstream's */
    struct {
        sl_upstream_claim_cb done;
        sl_upstream_claim_result_t result;
        sl_upstream_t *up;
        bool wants_slot;
    } upstream;
    struct {
        sl_key_claim_cb done;
        sl_key_claim_result_t result;
    } key;
    ask_wait_t wait;
    /* the answer, written on the cluster's thread before the letter goes */
    asked_t outcome;
    int64_t taken_at_ms; /* Redis's clock */
    sl_limit_verdict_t verdict;
    size_t which;
    int64_t recovery_ms; /* Redis's clock */
    /* the probe's and the slot's turns defer to an older waiter elsewhere until then (sl_now_ms) */
    int64_t defer_until_ms, room_defer_until_ms;
    uint64_t token;
    char lease_key[400], name[192];
} ask_t;

static sl_charge_t *
charge_of(ask_t *a)
{
    return a->is_key ? &a->key.result.charge : &a->upstream.result.charge;
}

static void
deliver(ask_t *a)
{
    if (a->is_key)
        a->key.done(a->ctx, &a->key.result);
    else
        a->upstream.done(a->ctx, &a->upstream.result);
}

static void
capture_claim(void *ctx, const sl_upstream_claim_result_t *result)
{
    *(sl_upstream_claim_result_t *)ctx = *result;
}

static void
capture_key(void *ctx, const sl_key_claim_result_t *result)
{
    *(sl_key_claim_result_t *)ctx = *result;
}

/*
 * Gives back what the local claim took: the slot, the reservation, its
 * place at the line's head (the probe). unused: the cluster had no room,
 * so nobody in line is woken for it (nobody else could take it either).
 */
static void
give_back(sl_cluster_shared_t *s, sl_upstream_t *up, sl_upstream_claim_result_t *res, bool probe_too,
          bool unused)
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

/* Not taken after all: skipped, with what the local claim showed (ThrottleChanged, HealthChanged) kept. */
static void
skip_as(sl_upstream_claim_result_t *r, sl_skip_t skip)
{
    *r = (sl_upstream_claim_result_t){
        .skip = skip,
        .throttle_changed = r->throttle_changed,
        .throttle = r->throttle,
        .limits_changed = r->limits_changed,
        .shown = r->shown,
        .shown_until_ms = r->shown_until_ms,
        .limit = r->limit,
        .breaker_changed = r->breaker_changed,
        .breaker = r->breaker,
    };
}

static void
release_lease(sl_cluster_shared_t *s, const char *key, const char *name)
{
    sl_cluster_commandv(s->cluster, NULL, NULL, 5,
                        (const char *[]){"EVAL", SL_CLUSTER_RELEASE_LEASE_LUA, "1", key, name});
}

/*
 * A recovery time Redis named, on this instance's clocks. The clocks' offset
 * is known to within half a heartbeat's round trip: a time that comes out
 * as past here is not past in Redis, so it is looked at again a little
 * later — never taken as "any moment", which only a line's movement would
 * end.
 */
#define SL_CLUSTER_RECHECK_MS 10

/* Room deferred to an older waiter elsewhere is looked at again this much later, once that one took its
 * share. */
#define SL_CLUSTER_TURN_RECHECK_MS 20

static int64_t
recovery_mono(sl_cluster_shared_t *s, int64_t redis_ms)
{
    int64_t now = sl_now_ms();
    int64_t at = sl_cluster_mono_ms_of(redis_ms, now, sl_wall_ms(), sl_cluster_clock_offset_ms(s->cluster));
    return at > now + SL_CLUSTER_RECHECK_MS ? at : now + SL_CLUSTER_RECHECK_MS;
}

static int64_t
recovery_wall(sl_cluster_shared_t *s, int64_t redis_ms)
{
    int64_t now = sl_wall_ms(), at = redis_ms - sl_cluster_clock_offset_ms(s->cluster);
    return at > now + SL_CLUSTER_RECHECK_MS ? at : now + SL_CLUSTER_RECHECK_MS;
}

/* The cluster's limits had no room: what ThrottleChanged shows for an upstream's limits moves with it. */
static void
no_room_upstream(ask_t *a)
{
    sl_upstream_claim_result_t *r = &a->upstream.result;
    sl_limit_set_t *set = r->charge.set;
    give_back(a->s, a->upstream.up, r, r->throttle_probe, true);
    skip_as(r, a->verdict == SL_LIMIT_PERIOD_USED_UP ? SL_SKIP_PERIOD_USED_UP : SL_SKIP_WINDOW_FULL);
    r->recovery_ms = a->verdict == SL_LIMIT_NEVER ? SL_THROTTLE_NEVER : recovery_mono(a->s, a->recovery_ms);
    r->reached_limits = true;
    sl_waitq_lock();
    if (a->which < set->n) {
        r->limit = set->states[a->which].limit;
        sl_limit_verdict_t shown = a->verdict == SL_LIMIT_NEVER ? set->shown : a->verdict;
        if (shown != set->shown) {
            set->shown = shown;
            set->shown_until_ms = recovery_wall(a->s, a->recovery_ms);
            set->shown_limit = r->limit;
            r->limits_changed = true;
            r->shown = shown;
            r->shown_until_ms = set->shown_until_ms;
        }
    }
    sl_waitq_unlock();
}

/* The cluster's limits had no room for a key's claim: not admitted, as if the local counts had said so. */
static void
no_room_key(ask_t *a)
{
    sl_key_claim_result_t *r = &a->key.result;
    sl_limit_set_t *set = r->charge.set;
    sl_shared_settle(a->s->local, &r->charge, &(sl_amounts_t){0}, false, sl_wall_ms());
    *r = (sl_key_claim_result_t){.check = {.verdict = a->verdict,
                                           .recovery_ms = recovery_wall(a->s, a->recovery_ms),
                                           .which = a->which}};
    sl_waitq_lock();
    if (a->which < set->n)
        r->limit = set->states[a->which].limit;
    sl_waitq_unlock();
}

/* The answer while the claim waits for it. */
static void
answered(ask_t *a)
{
    sl_cluster_shared_t *s = a->s;
    sl_charge_t *charge = charge_of(a);
    switch (a->outcome) {
    case ASKED_TAKEN:
        if (charge->set != NULL)
            charge->shared_at_ms = a->taken_at_ms;
        if (!a->is_key && a->upstream.wants_slot) {
            a->upstream.result.slot = a->token;
            hold_slot(s, a->upstream.up, a->token);
        }
        if (!a->is_key) {
            sl_waitq_lock();
            sl_claim_turn_taken(&a->upstream.up->claim_turn);
            sl_waitq_unlock();
        }
        break;
    case ASKED_ELSEWHERE:
        /* Another instance's probe is out: this request waits for its verdict, as the rest do here. */
        give_back(s, a->upstream.up, &a->upstream.result, false, false);
        skip_as(&a->upstream.result, SL_SKIP_THROTTLED);
        break;
    case ASKED_OLDER_ELSEWHERE:
        /*
         * An older waiter on another instance has the probe's turn: this one
         * waits as for another's probe, and asks again when the turn is over
         * if no verdict came (core/probe_turn.h).
         */
        give_back(s, a->upstream.up, &a->upstream.result, false, false);
        sl_waitq_lock();
        sl_probe_turn_deferred(&a->upstream.up->probe_turn, &a->upstream.up->throttle, a->defer_until_ms);
        sl_waitq_unlock();
        skip_as(&a->upstream.result, SL_SKIP_THROTTLED);
        break;
    case ASKED_ROOM_OLDER_ELSEWHERE:
        if (charge->set != NULL) {
            /*
             * The room in its limits is an older waiter's turn elsewhere: it
             * looks again shortly, when that one has taken its share.
             */
            give_back(s, a->upstream.up, &a->upstream.result, a->upstream.result.throttle_probe, true);
            skip_as(&a->upstream.result, SL_SKIP_WINDOW_FULL);
            a->upstream.result.recovery_ms = sl_now_ms() + SL_CLUSTER_TURN_RECHECK_MS;
            a->upstream.result.reached_limits = true;
            break;
        }
        /* Only a slot: it waits in line as for a slot taken, woken when one is freed. */
        /* fall through */
    case ASKED_FULL:
        /*
         * Every slot is taken across the cluster (or the free one is an older
         * waiter's turn elsewhere): it waits in line as for a slot here.
         */
        give_back(s, a->upstream.up, &a->upstream.result, a->upstream.result.throttle_probe, true);
        skip_as(&a->upstream.result, SL_SKIP_BUSY);
        note_contended(s, a->upstream.up);
        break;
    case ASKED_NO_ROOM:
        if (a->is_key)
            no_room_key(a);
        else
            no_room_upstream(a);
        break;
    case ASKED_NO_ANSWER:
        /* The instance decides alone: its usage joins the counters once it can. */
        if (charge->set != NULL) {
            charge->shared_at_ms = sl_cluster_usage_shared_time(s->usage, charge->at_ms);
            sl_cluster_usage_count_alone(s->usage, charge);
        }
        break;
    }
    deliver(a);
}

/* An answer that came too late, or to a claim given up: what Redis took for it is given back. */
static void
undo(ask_t *a)
{
    if (a->outcome != ASKED_TAKEN)
        return;
    sl_cluster_shared_t *s = a->s;
    if (a->wait == ASK_CANCELLED && !a->is_key && a->upstream.result.throttle_probe)
        release_lease(s, a->lease_key, a->name);
    if (!a->is_key && a->upstream.wants_slot)
        release_slot(s, a->upstream.up, a->token);
    /* The reservation: taken back at the slot Redis counted it in. */
    sl_charge_t taken = *charge_of(a);
    if (taken.set != NULL) {
        taken.shared_at_ms = a->taken_at_ms;
        sl_cluster_usage_settle(s->usage, &taken, &(sl_amounts_t){0});
    }
}

/* The cluster's word, on the claim's worker. */
static void
on_ask_letter(sl_shared_letter_t *letter)
{
    ask_t *a = (ask_t *)letter;
    if (a->wait == ASK_WAITING) {
        sl_timer_cancel(a->call->timers, &a->timeout);
        a->call->pending = NULL;
        answered(a);
    } else {
        undo(a);
    }
    free(a);
}

/* What Redis said of the claim (NULL: nothing, in time or at all). */
static void
read_ask_reply(ask_t *a, const redisReply *r)
{
    a->outcome = ASKED_NO_ANSWER;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER) {
        long long code = r->element[0]->integer;
        if (code == ASKED_TAKEN && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER) {
            a->outcome = ASKED_TAKEN;
            a->taken_at_ms = r->element[1]->integer;
        } else if (code == ASKED_NO_ROOM && r->elements == 4) {
            a->outcome = ASKED_NO_ROOM;
            a->verdict = (sl_limit_verdict_t)r->element[1]->integer;
            a->which = (size_t)r->element[2]->integer;
            a->recovery_ms = r->element[3]->integer;
        } else if (code == ASKED_ELSEWHERE || code == ASKED_FULL || code == ASKED_OLDER_ELSEWHERE ||
                   code == ASKED_ROOM_OLDER_ELSEWHERE) {
            a->outcome = (asked_t)code;
        }
    } else if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        sl_log_warn("cluster %s: claim refused by Redis: %.*s", sl_cluster_name(a->s->cluster), (int)r->len,
                    r->str);
    }
}

/* Sent through the cluster's thread: the answer comes there, and goes on to the claim's worker. */
static void
on_ask_reply_elsewhere(void *ctx, const redisReply *r)
{
    ask_t *a = ctx;
    read_ask_reply(a, r);
    sl_shared_inbox_post(a->inbox, &a->letter);
}

/* Sent on the worker's own lane: the answer is already on the claim's worker. */
static void
on_ask_reply_here(void *ctx, const redisReply *r)
{
    ask_t *a = ctx;
    read_ask_reply(a, r);
    on_ask_letter(&a->letter);
}

/* No answer within timeout_ms: this instance decides alone, as if not joined. */
static void
on_ask_timeout(sl_timer_t *t)
{
    ask_t *a = H2O_STRUCT_FROM_MEMBER(ask_t, timeout, t);
    sl_charge_t *charge = charge_of(a);
    a->wait = ASK_DECIDED_HERE;
    a->call->pending = NULL;
    if (charge->set != NULL) {
        charge->shared_at_ms = sl_cluster_usage_shared_time(a->s->usage, charge->at_ms);
        sl_cluster_usage_count_alone(a->s->usage, charge);
    }
    deliver(a);
}

static ask_t *
ask_new(sl_cluster_shared_t *s, sl_shared_call_t *call, void *ctx)
{
    ask_t *a = sl_xcalloc(1, sizeof(*a));
    a->letter.open = on_ask_letter;
    a->s = s;
    a->call = call;
    a->inbox = call->inbox;
    a->ctx = ctx;
    a->token = atomic_fetch_add(&s->next_token, 1) + 1;
    claim_name(s, a->token, a->name, sizeof(a->name));
    return a;
}

/*
 * Sends the claim script for a: the probe's lease (grace_ms > 0; deferring
 * to an older waiter elsewhere until a->defer_until_ms), a slot (max > 0),
 * room in set for need.
 */
static void
ask(ask_t *a, const char *upstream, int64_t grace_ms, uint32_t max, sl_limit_set_t *set,
    const sl_amounts_t *need, int64_t wall_ms)
{
    sl_cluster_shared_t *s = a->s;
    const char *name = sl_cluster_name(s->cluster);
    char slots[400] = "-", busy[400] = "-", tickets[400] = "-";
    if (upstream != NULL) {
        sl_cluster_key(a->lease_key, sizeof(a->lease_key), name, "probe", upstream);
        sl_cluster_key(slots, sizeof(slots), name, "slots", upstream);
        sl_cluster_key(busy, sizeof(busy), name, "busy", upstream);
        sl_cluster_key(tickets, sizeof(tickets), name, "tickets", upstream);
    } else {
        snprintf(a->lease_key, sizeof(a->lease_key), "-");
    }
    sl_cluster_args_t keys = {0}, args = {0};
    sl_waitq_lock();
    size_t n = set != NULL ? sl_cluster_usage_claim_args(s->usage, set, need, wall_ms, &keys, &args) : 0;
    sl_waitq_unlock();
    sl_cluster_args_t cmd = {0};
    sl_cluster_args_add_static(&cmd, "EVAL");
    sl_cluster_args_add_static(&cmd, SL_CLUSTER_CLAIM_LUA);
    sl_cluster_args_addf(&cmd, "%zu", 4 + n);
    sl_cluster_args_add(&cmd, a->lease_key);
    sl_cluster_args_add(&cmd, slots);
    sl_cluster_args_add(&cmd, busy);
    sl_cluster_args_add(&cmd, tickets);
    for (int i = 0; i < keys.argc; i++)
        sl_cluster_args_add(&cmd, keys.argv[i]);
    sl_cluster_args_add(&cmd, a->name);
    sl_cluster_args_addf(&cmd, "%lld", (long long)grace_ms);
    sl_cluster_args_addf(&cmd, "%u", max);
    sl_cluster_args_addf(&cmd, "%d", SL_SLOT_LEASE_MS);
    sl_cluster_args_addf(&cmd, "%zu", n);
    sl_cluster_args_add(&cmd, sl_cluster_instance(s->cluster));
    int64_t mono = sl_now_ms();
    sl_cluster_args_addf(&cmd, "%lld",
                         a->defer_until_ms > mono
                             ? (long long)sl_cluster_redis_ms_of(a->defer_until_ms, mono, sl_wall_ms(),
                                                                 sl_cluster_clock_offset_ms(s->cluster))
                             : 0LL);
    sl_cluster_args_add(&cmd, sl_cluster_hb_prefix(s->cluster));
    sl_cluster_args_addf(&cmd, "%lld",
                         a->room_defer_until_ms > mono
                             ? (long long)sl_cluster_redis_ms_of(a->room_defer_until_ms, mono, sl_wall_ms(),
                                                                 sl_cluster_clock_offset_ms(s->cluster))
                             : 0LL);
    for (int i = 0; i < args.argc; i++)
        sl_cluster_args_add(&cmd, args.argv[i]);
    sl_cluster_args_free(&keys);
    sl_cluster_args_free(&args);
    a->call->pending = a;
    sl_timer_arm(a->call->timers, &a->timeout, sl_now_ms() + sl_cluster_timeout_ms(s->cluster),
                 on_ask_timeout);
    if (!sl_cluster_lane_send(a->call->lane, &cmd, on_ask_reply_here, a))
        sl_cluster_send(s->cluster, &cmd, on_ask_reply_elsewhere, a);
}

/*
 * Alone (not joined), an instance takes its part of max_concurrent and of
 * each limit (cluster.md, "Redis down"): the live instances as last seen, a
 * count never seen counting as 2.
 */
static uint32_t
alone_parts(sl_cluster_shared_t *s)
{
    uint32_t n = sl_cluster_instances(s->cluster);
    return n == 0 ? 2 : n;
}

void
sl__cluster_claim_upstream(sl_cluster_shared_t *s, const sl_upstream_claim_t *c, sl_shared_call_t *call,
                           sl_upstream_claim_cb done, void *ctx)
{
    bool joined = sl_cluster_joined(s->cluster);
    if (s->closed_when_alone && sl_cluster_state(s->cluster) == SL_CLUSTER_DEGRADED &&
        (c->max_concurrent > 0 || has_limits(c->limits))) {
        done(ctx, &(sl_upstream_claim_result_t){.skip = SL_SKIP_BUSY, .unavailable = true});
        return;
    }
    sl_upstream_claim_t claim = *c;
    /* This instance's probe waited for an older waiter elsewhere, whose turn is over: its own again. */
    sl_waitq_lock();
    if (sl_probe_turn_due(&c->up->probe_turn, &c->up->throttle, c->now_ms))
        sl_throttle_probe_abandoned(&c->up->throttle);
    sl_waitq_unlock();
    if (!joined) {
        claim.limit_parts = alone_parts(s);
        if (c->max_concurrent > 0) {
            uint32_t share = c->max_concurrent / claim.limit_parts;
            claim.max_concurrent = share > 0 ? share : 1;
        }
    }
    sl_upstream_claim_result_t res;
    sl_shared_call_t here = {0};
    sl_shared_claim_upstream(s->local, &claim, &here, capture_claim, &res);
    bool wants_slot = c->max_concurrent > 0;
    bool reserved = res.charge.set != NULL && has_limits(res.charge.set);
    bool asks = res.skip == SL_SKIP_NONE && (res.throttle_probe || wants_slot || reserved);
    if (asks && (!joined || call->inbox == NULL || call->timers == NULL)) {
        if (reserved) {
            res.charge.shared_at_ms = sl_cluster_usage_shared_time(s->usage, res.charge.at_ms);
            sl_cluster_usage_count_alone(s->usage, &res.charge);
        }
        asks = false;
    }
    if (!asks) {
        done(ctx, &res);
        return;
    }
    ask_t *a = ask_new(s, call, ctx);
    a->upstream.done = done;
    a->upstream.result = res;
    a->upstream.up = c->up;
    a->upstream.wants_slot = wants_slot;
    int64_t grace = !res.throttle_probe ? 0 : res.throttle.grace_ms > 0 ? res.throttle.grace_ms : 1;
    sl_waitq_lock();
    if (res.throttle_probe)
        a->defer_until_ms = sl_probe_turn_defer_until(&c->up->probe_turn, &c->up->throttle, c->now_ms);
    /* Deferring costs the script a read of the tickets: only when others wait, as their heartbeats say. */
    if ((wants_slot || reserved) && c->up->waiting_elsewhere)
        a->room_defer_until_ms = sl_claim_turn_defer_until(&c->up->claim_turn, c->now_ms);
    sl_waitq_unlock();
    ask(a, c->up->name, grace, c->max_concurrent, reserved ? res.charge.set : NULL, &c->need, c->wall_ms);
}

void
sl__cluster_claim_key(sl_cluster_shared_t *s, const sl_key_claim_t *c, sl_shared_call_t *call,
                      sl_key_claim_cb done, void *ctx)
{
    bool joined = sl_cluster_joined(s->cluster);
    if (s->closed_when_alone && sl_cluster_state(s->cluster) == SL_CLUSTER_DEGRADED && has_limits(c->key)) {
        done(ctx, &(sl_key_claim_result_t){.unavailable = true});
        return;
    }
    sl_key_claim_t claim = *c;
    if (!joined)
        claim.limit_parts = alone_parts(s);
    sl_key_claim_result_t res;
    sl_shared_call_t here = {0};
    sl_shared_claim_key(s->local, &claim, &here, capture_key, &res);
    bool reserved = res.admitted && res.charge.set != NULL && has_limits(res.charge.set);
    if (reserved && (!joined || call->inbox == NULL || call->timers == NULL)) {
        res.charge.shared_at_ms = sl_cluster_usage_shared_time(s->usage, res.charge.at_ms);
        sl_cluster_usage_count_alone(s->usage, &res.charge);
        reserved = false;
    }
    if (!reserved) {
        done(ctx, &res);
        return;
    }
    ask_t *a = ask_new(s, call, ctx);
    a->is_key = true;
    a->key.done = done;
    a->key.result = res;
    ask(a, NULL, 0, 0, res.charge.set, &c->need, c->wall_ms);
}

void
sl__cluster_cancel(sl_cluster_shared_t *s, sl_shared_call_t *call)
{
    ask_t *a = call->pending;
    call->pending = NULL;
    sl_timer_cancel(call->timers, &a->timeout);
    a->wait = ASK_CANCELLED;
    /* What the local claim took is given back (the probe too: it will not go from here); Redis's, once it
     * says. */
    if (a->is_key)
        sl_shared_settle(s->local, &a->key.result.charge, &(sl_amounts_t){0}, true, sl_wall_ms());
    else
        give_back(s, a->upstream.up, &a->upstream.result, a->upstream.result.throttle_probe, false);
}

/* ---- after the hop --------------------------------------------------------------------------------- */

void
sl__cluster_release_upstream(sl_cluster_shared_t *s, const sl_upstream_release_t *rel)
{
    sl_charge_t charge = rel->charge != NULL ? *rel->charge : (sl_charge_t){0};
    sl_shared_release_upstream(s->local, rel);
    if (charge.set != NULL)
        sl_cluster_usage_settle(s->usage, &charge, &rel->used);
    if (rel->slot != 0)
        release_slot(s, rel->up, rel->slot);
    if (rel->throttle_probe)
        sl__cluster_publish_abandoned(s, rel->up);
}

void
sl__cluster_settle(sl_cluster_shared_t *s, sl_charge_t *charge, const sl_amounts_t *used, bool wake_line,
                   int64_t wall_ms)
{
    sl_charge_t was = *charge;
    sl_shared_settle(s->local, charge, used, wake_line, wall_ms);
    if (was.set != NULL)
        sl_cluster_usage_settle(s->usage, &was, used);
}

static void
readd_set(void *ctx, sl_limit_set_t *set)
{
    sl_cluster_shared_t *s = ctx;
    if (set != NULL && set->n > 0)
        sl_cluster_usage_readd(s->usage, set);
}

void
sl__cluster_readd_usage(sl_cluster_shared_t *s)
{
    sl_cluster_usage_forget_batch(s->usage);
    s->hooks.each_set(s->hooks.ctx, readd_set, s);
}
