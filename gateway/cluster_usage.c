#include "cluster_usage.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_scripts.h"
#include "core/cluster_msg.h"
#include "core/civil.h"
#include "core/xalloc.h"
#include "log.h"
#include "worker.h"

/* One change of one counter: a window's slot (field >= 0) or a period's count (field -1). */
typedef struct {
    char key[320];
    int64_t field;
    int64_t delta;
    int64_t expire_ms; /* Redis's clock */
} usage_op_t;

/* Changes waiting for the next batch, at most; past it they are dropped (and logged once). */
#define SL_USAGE_BATCH_CAP 8192
/* Changes sent in one script. */
#define SL_USAGE_BATCH_SEND 256
/* A period's counter outlives the period by this much (a settlement may come late). */
#define SL_PERIOD_GRACE_MS 60000

struct sl_cluster_usage {
    sl_cluster_t *cluster;
    pthread_mutex_t lock; /* guards the batch */
    usage_op_t *ops;
    size_t n, cap;
    bool dropped_logged;
};

sl_cluster_usage_t *
sl_cluster_usage_new(sl_cluster_t *cluster)
{
    sl_cluster_usage_t *u = sl_xcalloc(1, sizeof(*u));
    u->cluster = cluster;
    pthread_mutex_init(&u->lock, NULL);
    return u;
}

void
sl_cluster_usage_free(sl_cluster_usage_t *u)
{
    if (u == NULL)
        return;
    pthread_mutex_destroy(&u->lock);
    free(u->ops);
    free(u);
}

int64_t
sl_cluster_usage_shared_time(sl_cluster_usage_t *u, int64_t wall_ms)
{
    return wall_ms + sl_cluster_clock_offset_ms(u->cluster);
}

static bool
is_rolling(const sl_limit_t *limit)
{
    return limit->per == SL_PER_MINUTE || limit->per == SL_PER_HOUR;
}

static char
subject_kind(const sl_limit_set_t *set)
{
    return set->kind == SL_BUCKET_PROVIDER ? 'p' : 'k';
}

/* The counter of a set's limit; a period's is the one holding wall_ms. False when it has none. */
static bool
counter_key(sl_cluster_usage_t *u, const sl_limit_set_t *set, const sl_limit_state_t *st, int64_t wall_ms,
            char *key, size_t size, int64_t *period_end_ms)
{
    int64_t start = 0, end = 0;
    if (!is_rolling(&st->limit) && !sl_calendar_period(st->limit.per, st->tz, wall_ms, &start, &end))
        return false;
    if (period_end_ms != NULL)
        *period_end_ms = end;
    return sl_cluster_limit_key(key, size, sl_cluster_name(u->cluster), subject_kind(set), set->name,
                                &st->limit, start) > 0;
}

size_t
sl_cluster_usage_claim_args(sl_cluster_usage_t *u, sl_limit_set_t *set, const sl_amounts_t *need,
                            int64_t wall_ms, sl_cluster_args_t *keys, sl_cluster_args_t *args)
{
    size_t n = 0;
    int64_t offset = sl_cluster_clock_offset_ms(u->cluster);
    for (size_t i = 0; set != NULL && i < set->n; i++) {
        const sl_limit_state_t *st = &set->states[i];
        char key[320];
        int64_t end;
        if (!counter_key(u, set, st, wall_ms, key, sizeof(key), &end))
            continue;
        sl_cluster_args_add(keys, key);
        bool rolling = is_rolling(&st->limit);
        sl_cluster_args_add(args, rolling ? "w" : "p");
        sl_cluster_args_addf(args, "%lld", (long long)st->limit.amount);
        sl_cluster_args_addf(args, "%lld", (long long)sl_limit_measure(&st->limit, need));
        if (rolling) {
            sl_cluster_args_addf(args, "%lld", (long long)st->slot_ms);
            sl_cluster_args_addf(args, "%lld", (long long)st->window_ms);
        } else {
            sl_cluster_args_add(args, "-");
            sl_cluster_args_addf(args, "%lld", (long long)(end + offset + SL_PERIOD_GRACE_MS));
        }
        n++;
    }
    return n;
}

/* Adds a change to the batch, merged with one of the same counter and slot. With u->lock held. */
static void
queue_op(sl_cluster_usage_t *u, const usage_op_t *op)
{
    for (size_t i = 0; i < u->n; i++) {
        usage_op_t *o = &u->ops[i];
        if (o->field == op->field && strcmp(o->key, op->key) == 0) {
            o->delta += op->delta;
            if (op->expire_ms > o->expire_ms)
                o->expire_ms = op->expire_ms;
            return;
        }
    }
    if (u->n == SL_USAGE_BATCH_CAP) {
        if (!u->dropped_logged)
            sl_log_warn("cluster %s: more than %d usage changes wait for Redis: the newest are dropped",
                        sl_cluster_name(u->cluster), SL_USAGE_BATCH_CAP);
        u->dropped_logged = true;
        return;
    }
    if (u->n == u->cap) {
        u->cap = u->cap * 2 + 64;
        u->ops = sl_xrealloc(u->ops, u->cap * sizeof(*u->ops));
    }
    u->ops[u->n++] = *op;
}

/* delta (in each limit's measure) for every limit of charge's set, at the charge's times. */
static void
queue_charge(sl_cluster_usage_t *u, const sl_charge_t *charge, const sl_amounts_t *delta)
{
    sl_limit_set_t *set = charge->set;
    int64_t offset = sl_cluster_clock_offset_ms(u->cluster);
    usage_op_t ops[32];
    size_t n = 0;
    sl_waitq_lock();
    for (size_t i = 0; i < set->n && n < sizeof(ops) / sizeof(ops[0]); i++) {
        const sl_limit_state_t *st = &set->states[i];
        int64_t d = sl_limit_measure(&st->limit, delta), end;
        usage_op_t *op = &ops[n];
        if (d == 0 || !counter_key(u, set, st, charge->at_ms, op->key, sizeof(op->key), &end))
            continue;
        op->delta = d;
        if (is_rolling(&st->limit)) {
            op->field = sl_floor_div(charge->shared_at_ms, st->slot_ms);
            op->expire_ms = (op->field + 2) * st->slot_ms + st->window_ms;
        } else {
            op->field = -1;
            op->expire_ms = end + offset + SL_PERIOD_GRACE_MS;
        }
        n++;
    }
    sl_waitq_unlock();
    pthread_mutex_lock(&u->lock);
    for (size_t i = 0; i < n; i++)
        queue_op(u, &ops[i]);
    pthread_mutex_unlock(&u->lock);
}

void
sl_cluster_usage_settle(sl_cluster_usage_t *u, const sl_charge_t *charge, const sl_amounts_t *used)
{
    if (charge->set == NULL || charge->shared_at_ms == 0)
        return;
    sl_amounts_t delta = {used->requests - charge->amounts.requests, used->tokens - charge->amounts.tokens,
                          used->cost_micros - charge->amounts.cost_micros};
    queue_charge(u, charge, &delta);
}

int64_t
sl_cluster_usage_move(sl_cluster_usage_t *u, const sl_charge_t *was, int64_t at_ms)
{
    if (was->set == NULL || was->shared_at_ms == 0 || at_ms <= was->at_ms)
        return was->shared_at_ms;
    /* Moved by the same span on both clocks: the offset between them plays no part. */
    sl_charge_t moved = *was;
    moved.at_ms = at_ms;
    moved.shared_at_ms = was->shared_at_ms + (at_ms - was->at_ms);
    sl_amounts_t back = {-was->amounts.requests, -was->amounts.tokens, -was->amounts.cost_micros};
    queue_charge(u, was, &back);
    queue_charge(u, &moved, &was->amounts);
    return moved.shared_at_ms;
}

void
sl_cluster_usage_count_alone(sl_cluster_usage_t *u, const sl_charge_t *charge)
{
    if (charge->set != NULL && charge->shared_at_ms != 0)
        queue_charge(u, charge, &charge->amounts);
}

/* A batch in flight: kept to go again if it gets no answer. */
typedef struct {
    sl_cluster_usage_t *u;
    usage_op_t *ops;
    size_t n;
} batch_t;

static void
on_batch_reply(void *ctx, const redisReply *r)
{
    batch_t *b = ctx;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        if (r != NULL)
            sl_log_warn("cluster %s: usage batch refused: %.*s", sl_cluster_name(b->u->cluster), (int)r->len,
                        r->str);
        else {
            pthread_mutex_lock(&b->u->lock);
            for (size_t i = 0; i < b->n; i++)
                queue_op(b->u, &b->ops[i]);
            pthread_mutex_unlock(&b->u->lock);
        }
    }
    free(b->ops);
    free(b);
}

void
sl_cluster_usage_flush(sl_cluster_usage_t *u)
{
    pthread_mutex_lock(&u->lock);
    size_t n = u->n < SL_USAGE_BATCH_SEND ? u->n : SL_USAGE_BATCH_SEND;
    if (n == 0) {
        pthread_mutex_unlock(&u->lock);
        return;
    }
    batch_t *b = sl_xcalloc(1, sizeof(*b));
    b->u = u;
    b->n = n;
    b->ops = sl_xcalloc(n, sizeof(*b->ops));
    memcpy(b->ops, u->ops, n * sizeof(*b->ops));
    memmove(u->ops, u->ops + n, (u->n - n) * sizeof(*u->ops));
    u->n -= n;
    pthread_mutex_unlock(&u->lock);
    sl_cluster_args_t a = {0};
    sl_cluster_args_add(&a, "EVAL");
    sl_cluster_args_add(&a, SL_CLUSTER_SETTLE_LUA);
    sl_cluster_args_addf(&a, "%zu", n);
    for (size_t i = 0; i < n; i++)
        sl_cluster_args_add(&a, b->ops[i].key);
    for (size_t i = 0; i < n; i++) {
        if (b->ops[i].field < 0)
            sl_cluster_args_add(&a, "-");
        else
            sl_cluster_args_addf(&a, "%lld", (long long)b->ops[i].field);
        sl_cluster_args_addf(&a, "%lld", (long long)b->ops[i].delta);
        sl_cluster_args_addf(&a, "%lld", (long long)b->ops[i].expire_ms);
    }
    sl_cluster_send(u->cluster, &a, on_batch_reply, b);
}

void
sl_cluster_usage_forget_batch(sl_cluster_usage_t *u)
{
    pthread_mutex_lock(&u->lock);
    u->n = 0;
    pthread_mutex_unlock(&u->lock);
}

void
sl_cluster_usage_readd(sl_cluster_usage_t *u, sl_limit_set_t *set)
{
    int64_t wall = sl_wall_ms(), offset = sl_cluster_clock_offset_ms(u->cluster);
    sl_waitq_lock();
    for (size_t i = 0; i < set->n; i++) {
        sl_limit_state_t *st = &set->states[i];
        usage_op_t op;
        int64_t end;
        if (!counter_key(u, set, st, wall, op.key, sizeof(op.key), &end))
            continue;
        if (!is_rolling(&st->limit)) {
            op.field = -1;
            op.delta = sl_limit_used(st, wall);
            op.expire_ms = end + offset + SL_PERIOD_GRACE_MS;
            if (op.delta > 0) {
                pthread_mutex_lock(&u->lock);
                queue_op(u, &op);
                pthread_mutex_unlock(&u->lock);
            }
            continue;
        }
        /* Every slot that still counts, in Redis's slots (the same length, shifted by the clocks' offset). */
        int64_t starts[SL_LIMIT_SLOTS + 2], amounts[SL_LIMIT_SLOTS + 2];
        size_t n = sl_limit_counted_slots(st, wall, starts, amounts, SL_LIMIT_SLOTS + 2);
        pthread_mutex_lock(&u->lock);
        for (size_t j = 0; j < n; j++) {
            op.field = sl_floor_div(starts[j] + offset, st->slot_ms);
            op.delta = amounts[j];
            op.expire_ms = (op.field + 2) * st->slot_ms + st->window_ms;
            queue_op(u, &op);
        }
        pthread_mutex_unlock(&u->lock);
    }
    sl_waitq_unlock();
}

/* ---- the views' use ------------------------------------------------------------------------------- */

/* A limit read for the views: its set and which limit (matched again on the answer: states may change). */
typedef struct {
    sl_limit_set_t *set;
    sl_limit_t limit;
} seen_ref_t;

typedef struct {
    seen_ref_t *refs;
    size_t n;
} refresh_t;

static void
on_usage(void *ctx, const redisReply *r)
{
    refresh_t *rf = ctx;
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == rf->n) {
        int64_t wall = sl_wall_ms();
        sl_waitq_lock();
        for (size_t i = 0; i < rf->n; i++)
            rf->refs[i].set->n_cluster_seen = 0;
        for (size_t i = 0; i < rf->n; i++) {
            sl_limit_set_t *set = rf->refs[i].set;
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_INTEGER || set->n_cluster_seen == SL_LIMIT_SEEN_MAX)
                continue;
            set->cluster_seen[set->n_cluster_seen++] =
                (sl_limit_seen_t){rf->refs[i].limit, e->integer > 0 ? (uint64_t)e->integer : 0};
            set->cluster_seen_at_ms = wall;
        }
        sl_waitq_unlock();
    }
    free(rf->refs);
    free(rf);
}

void
sl_cluster_usage_refresh(sl_cluster_usage_t *u, sl_limit_set_t *const *sets, size_t n)
{
    int64_t wall = sl_wall_ms();
    sl_cluster_args_t keys = {0}, args = {0};
    refresh_t *rf = sl_xcalloc(1, sizeof(*rf));
    size_t cap = 0;
    sl_waitq_lock();
    for (size_t s = 0; s < n; s++) {
        for (size_t i = 0; i < sets[s]->n && i < SL_LIMIT_SEEN_MAX; i++) {
            const sl_limit_state_t *st = &sets[s]->states[i];
            char key[320];
            if (!counter_key(u, sets[s], st, wall, key, sizeof(key), NULL))
                continue;
            if (rf->n == cap) {
                cap = cap * 2 + 8;
                rf->refs = sl_xrealloc(rf->refs, cap * sizeof(*rf->refs));
            }
            rf->refs[rf->n++] = (seen_ref_t){sets[s], st->limit};
            sl_cluster_args_add(&keys, key);
            if (is_rolling(&st->limit)) {
                sl_cluster_args_add(&args, "w");
                sl_cluster_args_addf(&args, "%lld", (long long)st->slot_ms);
                sl_cluster_args_addf(&args, "%lld", (long long)st->window_ms);
            } else {
                sl_cluster_args_add(&args, "p");
                sl_cluster_args_add(&args, "-");
                sl_cluster_args_add(&args, "-");
            }
        }
    }
    sl_waitq_unlock();
    if (rf->n == 0) {
        free(rf);
        return;
    }
    sl_cluster_args_t cmd = {0};
    sl_cluster_args_add(&cmd, "EVAL");
    sl_cluster_args_add(&cmd, SL_CLUSTER_USAGE_LUA);
    sl_cluster_args_addf(&cmd, "%zu", rf->n);
    for (int i = 0; i < keys.argc; i++)
        sl_cluster_args_add(&cmd, keys.argv[i]);
    for (int i = 0; i < args.argc; i++)
        sl_cluster_args_add(&cmd, args.argv[i]);
    sl_cluster_args_free(&keys);
    sl_cluster_args_free(&args);
    sl_cluster_send(u->cluster, &cmd, on_usage, rf);
}
