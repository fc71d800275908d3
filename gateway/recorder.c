#define _GNU_SOURCE /* pthread_setname_np */
#include "recorder.h"

#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/dialect.h"
#include "core/mask.h"
#include "core/text.h"
#include "core/xalloc.h"
#include "store.h"

#define DAY_MS    86400000LL
#define MINUTE_MS 60000LL

/* ---- the rules, pure ------------------------------------------------------- */

static int64_t
min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

bool
sl_recorder_behind(size_t queued, size_t capacity)
{
    return queued > capacity / 2;
}

sl_recorder_plan_t
sl_recorder_plan(const sl_recorder_state_t *s, int64_t now_ms, size_t batch_max)
{
    sl_recorder_plan_t p = {.wake_ms = INT64_MAX};
    int64_t batch_due = s->oldest_ms + SL_RECORDER_BATCH_DELAY_MS;
    int64_t usage_due = s->usage_flushed_ms + SL_RECORDER_USAGE_FLUSH_MS;
    if (s->queued > 0 && (s->flush_wanted || s->queued >= batch_max || now_ms >= batch_due))
        p.write_rows = s->queued < batch_max ? s->queued : batch_max;
    p.behind = p.write_rows > 0 && !s->closing && sl_recorder_behind(s->queued, s->capacity);
    p.flush_usage = s->usage_pending && (s->flush_wanted || now_ms >= usage_due);
    p.sweep = !s->closing && now_ms >= s->sweep_at_ms;
    if (s->queued > 0)
        p.wake_ms = min64(p.wake_ms, batch_due);
    if (s->usage_pending)
        p.wake_ms = min64(p.wake_ms, usage_due);
    if (!s->closing)
        p.wake_ms = min64(p.wake_ms, s->sweep_at_ms);
    p.tend = now_ms >= s->tend_at_ms;
    p.wake_ms = min64(p.wake_ms, s->tend_at_ms);
    return p;
}

/* A full chunk means more old rows wait: go on at once, between batches. */
static const int64_t sweep_delay_ms[SL_SWEEP_RESULT_COUNT] = {
    [SL_SWEEP_DONE] = SL_RECORDER_SWEEP_EVERY_MS,
    [SL_SWEEP_MORE] = 0,
    [SL_SWEEP_FAILED] = SL_RECORDER_SWEEP_RETRY_MS,
};

int64_t
sl_recorder_sweep_next(int64_t now_ms, sl_sweep_result_t result)
{
    return now_ms + sweep_delay_ms[result];
}

int64_t
sl_retention_cutoff_ms(int64_t now_ms, uint32_t retention_days)
{
    return now_ms - (int64_t)retention_days * DAY_MS;
}

int64_t
sl_bucket_cutoff_minute(int64_t now_ms, uint32_t retention_days)
{
    uint32_t days =
        retention_days > SL_RECORDER_BUCKET_KEEP_DAYS ? retention_days : SL_RECORDER_BUCKET_KEEP_DAYS;
    return (now_ms - (int64_t)days * DAY_MS) / MINUTE_MS;
}

/* ---- rows ------------------------------------------------------------------ */

static void
set_absent(sl_request_row_t *row)
{
    row->ttfb_ms = row->ttft_ms = row->cost_micros = SL_ROW_ABSENT;
    for (size_t i = 0; i < row->n_attempts; i++)
        row->attempts[i].pause_ms = row->attempts[i].backoff_ms = SL_ROW_ABSENT;
}

sl_request_row_t *
sl_request_row_new(size_t n_attempts)
{
    sl_request_row_t *row = sl_xcalloc(1, sizeof *row);
    row->n_attempts = n_attempts;
    row->attempts = n_attempts > 0 ? sl_xcalloc(n_attempts, sizeof *row->attempts) : NULL;
    set_absent(row);
    return row;
}

sl_request_row_t *
sl_request_row_new_packed(size_t n_attempts, size_t text_bytes)
{
    size_t head = sizeof(sl_request_row_t) + n_attempts * sizeof(sl_attempt_row_t);
    sl_request_row_t *row = sl_xmalloc(head + text_bytes);
    memset(row, 0, head);
    row->n_attempts = n_attempts;
    row->attempts = n_attempts > 0 ? (sl_attempt_row_t *)(row + 1) : NULL;
    row->text_next = (char *)row + head;
    row->block_end = row->text_next + text_bytes;
    set_absent(row);
    return row;
}

char *
sl_request_row_text(sl_request_row_t *row, const char *s, size_t n)
{
    assert(row->text_next != NULL && (size_t)(row->block_end - row->text_next) > n);
    char *out = row->text_next;
    memcpy(out, s, n);
    out[n] = '\0';
    row->text_next += n + 1;
    return out;
}

/* Frees p unless it lies in row's own allocation (a packed row's attempts and text). */
static void
free_unless_packed(const sl_request_row_t *row, void *p)
{
    /* As addresses: p may belong to another allocation, which C's pointer order does not cover. */
    uintptr_t at = (uintptr_t)p;
    if (at < (uintptr_t)row || at >= (uintptr_t)row->block_end)
        free(p);
}

void
sl_row_msg_clear(sl_row_msg_t *msg)
{
    free(msg->code);
    free(msg->text);
    for (size_t i = 0; i < msg->nargs; i++) {
        free(msg->args[i].name);
        free(msg->args[i].value);
    }
    free(msg->args);
    *msg = (sl_row_msg_t){0};
}

sl_row_msg_t
sl_row_msg_from(const sl_msg_t *msg)
{
    sl_row_msg_t m = {
        .code = sl_xstrdup(sl_code_slug(msg->code)),
        .text = sl_xstrdup(msg->text ? msg->text : ""),
        .nargs = msg->nargs,
        .args = msg->nargs > 0 ? sl_xcalloc(msg->nargs, sizeof(sl_row_arg_t)) : NULL,
    };
    for (size_t i = 0; i < msg->nargs; i++) {
        m.args[i].name = sl_xstrdup(msg->args[i].name);
        m.args[i].value = sl_xstrdup(msg->args[i].value ? msg->args[i].value : "");
    }
    return m;
}

void
sl_request_row_free(sl_request_row_t *row)
{
    if (row == NULL)
        return;
    for (size_t i = 0; i < row->n_attempts; i++) {
        sl_attempt_row_t *a = &row->attempts[i];
        free_unless_packed(row, a->provider);
        free_unless_packed(row, a->model);
        sl_row_msg_clear(&a->error);
    }
    free_unless_packed(row, row->attempts);
    free_unless_packed(row, row->client);
    free_unless_packed(row, row->model);
    free_unless_packed(row, row->provider);
    free_unless_packed(row, row->path);
    sl_row_msg_clear(&row->error);
    free(row);
}

/* Enums come from callers; a row that would fail its INSERT must not take its batch down with it. */
static bool
row_is_valid(const sl_request_row_t *row)
{
    if ((unsigned)row->dialect >= SL_DIALECT_COUNT || (unsigned)row->outcome >= SL_ROW_OUTCOME_COUNT)
        return false;
    for (size_t i = 0; i < row->n_attempts; i++) {
        if ((unsigned)row->attempts[i].outcome >= SL_HOP_OUTCOME_COUNT ||
            (unsigned)row->attempts[i].skipped >= SL_SKIP_COUNT)
            return false;
    }
    return true;
}

static void
scrub(char *s)
{
    if (s != NULL)
        sl_scrub_secrets(s, strlen(s));
}

static void
scrub_msg(sl_row_msg_t *m)
{
    scrub(m->text);
    for (size_t i = 0; i < m->nargs; i++)
        scrub(m->args[i].value);
}

/* Every free-text field a client or an upstream could have put a credential in. */
static void
redact_row(sl_request_row_t *row)
{
    size_t path_len = row->path != NULL ? strlen(row->path) : 0;
    if (path_len > 0 && sl_path_has_query(row->path, path_len)) {
        sl_strbuf_t clean = {0};
        sl_path_strip_key(row->path, path_len, &clean);
        free_unless_packed(row, row->path);
        row->path = sl_strbuf_finish(&clean);
    }
    scrub(row->path);
    scrub(row->model);
    scrub_msg(&row->error);
    for (size_t i = 0; i < row->n_attempts; i++) {
        scrub(row->attempts[i].model);
        scrub_msg(&row->attempts[i].error);
    }
}

/* ---- pending usage: an open-addressing map keyed by (kind, name, minute) --- */

typedef struct {
    char *name; /* owned; NULL = empty slot */
    sl_bucket_kind_t kind;
    int64_t minute, requests, tokens, cost_micros;
} bucket_t;

typedef struct {
    bucket_t *slots;
    size_t cap, len; /* cap is 0 or a power of two */
} bucket_map_t;

static uint64_t
bucket_hash(sl_bucket_kind_t kind, const char *name, int64_t minute)
{
    uint64_t h = 14695981039346656037ULL ^ (uint64_t)kind;
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++)
        h = (h ^ *p) * 1099511628211ULL;
    h = (h ^ (uint64_t)minute) * 1099511628211ULL;
    return h ^ (h >> 31);
}

static bucket_t *
bucket_slot(const bucket_map_t *m, sl_bucket_kind_t kind, const char *name, int64_t minute)
{
    size_t mask = m->cap - 1;
    for (size_t i = bucket_hash(kind, name, minute) & mask;; i = (i + 1) & mask) {
        bucket_t *b = &m->slots[i];
        if (b->name == NULL || (b->kind == kind && b->minute == minute && strcmp(b->name, name) == 0))
            return b;
    }
}

static void
bucket_grow(bucket_map_t *m)
{
    bucket_map_t bigger = {.cap = m->cap > 0 ? m->cap * 2 : 64, .len = m->len};
    bigger.slots = sl_xcalloc(bigger.cap, sizeof *bigger.slots);
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].name != NULL)
            *bucket_slot(&bigger, m->slots[i].kind, m->slots[i].name, m->slots[i].minute) = m->slots[i];
    }
    free(m->slots);
    *m = bigger;
}

/* Returns false, changing nothing, when the bucket is new and the map already holds the maximum. */
static bool
bucket_add(bucket_map_t *m, sl_bucket_kind_t kind, const char *name, int64_t minute, int64_t requests,
           int64_t tokens, int64_t cost_micros)
{
    bucket_t *b = m->cap > 0 ? bucket_slot(m, kind, name, minute) : NULL;
    if (b == NULL || b->name == NULL) {
        if (m->len >= SL_RECORDER_MAX_BUCKETS)
            return false;
        if ((m->len + 1) * 10 > m->cap * 7)
            bucket_grow(m);
        b = bucket_slot(m, kind, name, minute);
        *b = (bucket_t){.name = sl_xstrdup(name), .kind = kind, .minute = minute};
        m->len++;
    }
    b->requests += requests;
    b->tokens += tokens;
    b->cost_micros += cost_micros;
    return true;
}

static void
bucket_map_free(bucket_map_t *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->slots[i].name);
    free(m->slots);
    *m = (bucket_map_t){0};
}

/* ---- the recorder ------------------------------------------------------------ */

struct sl_recorder {
    sl_store_t *store; /* written by the writer thread alone once it runs */
    size_t batch_max;
    uint32_t retention_days;
    pthread_t thread;
    void (*on_dropped)(void *ctx, uint64_t rows, const char *reason);
    void *on_dropped_ctx;
    void (*on_state)(void *ctx, const sl_store_status_t *now);
    void *on_state_ctx;
    bool was_degraded;        /* the writer's: what on_state was last told */
    sl_request_row_t **aside; /* the writer's: a batch set aside while the store waits (batch_max rows) */

    pthread_mutex_t lock; /* guards everything below; never held across IO */
    pthread_cond_t wake;  /* the writer sleeps here */
    pthread_cond_t done;  /* sl_recorder_flush sleeps here */
    sl_request_row_t **queue;
    size_t cap, head, len;
    int64_t oldest_ms;
    bucket_map_t buckets;
    int64_t usage_flushed_ms;
    uint64_t usage_seq; /* flushes handed to the store */
    int64_t sweep_at_ms;
    int64_t tend_at_ms;
    uint64_t flush_seq, flush_done;
    bool closing;
    sl_recorder_stats_t stats;
    uint64_t refused_untold; /* rows a full queue refused since on_dropped was last told of them */
    int64_t refused_told_ms; /* when it was (monotonic) */
};

static int64_t
clock_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool
flush_wanted(const sl_recorder_t *rec)
{
    return rec->closing || rec->flush_seq > rec->flush_done;
}

static void
note_failure(sl_recorder_t *rec, bool ok, const char *why)
{
    if (!ok)
        snprintf(rec->stats.last_error, sizeof rec->stats.last_error, "%s", why);
}

static int64_t
store_tend_at(sl_recorder_t *rec)
{
    return rec->store->ops->tend_at != NULL ? rec->store->ops->tend_at(rec->store) : INT64_MAX;
}

/* on_state when the store turned degraded or ok since it was last told; on the writer, no lock held. */
static void
tell_state(sl_recorder_t *rec)
{
    if (rec->on_state == NULL)
        return;
    sl_store_status_t now;
    rec->store->ops->status(rec->store, &now);
    if (now.degraded != rec->was_degraded) {
        rec->was_degraded = now.degraded;
        rec->on_state(rec->on_state_ctx, &now);
    }
}

/* The do_ steps below run with rec->lock held and drop it around their IO. */

/* Takes the n oldest rows off the queue into batch; lock held. */
static void
take_rows(sl_recorder_t *rec, sl_request_row_t **batch, size_t n)
{
    for (size_t i = 0; i < n; i++)
        batch[i] = rec->queue[(rec->head + i) % rec->cap];
    rec->head = (rec->head + n) % rec->cap;
    rec->len -= n;
}

/* Rows handed to the store, stored (or kept to be) or lost; lock held. */
static void
count_handed(sl_recorder_t *rec, size_t n, bool ok, const char *why)
{
    if (ok)
        rec->stats.written += n;
    else
        rec->stats.dropped += n;
    note_failure(rec, ok, why);
}

/* Frees a batch handed to the store, telling on_dropped when it was lost; no lock held. */
static void
release_rows(sl_recorder_t *rec, sl_request_row_t **batch, size_t n, bool ok, const char *why)
{
    for (size_t i = 0; i < n; i++)
        sl_request_row_free(batch[i]);
    if (!ok && rec->on_dropped != NULL)
        rec->on_dropped(rec->on_dropped_ctx, n, why);
}

/* Behind, a store that can sets the batch aside (store.h); when it has no room, the batch is written. */
static void
do_write(sl_recorder_t *rec, sl_request_row_t **batch, size_t n, bool behind)
{
    take_rows(rec, batch, n);
    pthread_mutex_unlock(&rec->lock);
    for (size_t i = 0; i < n; i++)
        redact_row(batch[i]);
    char why[256] = "";
    sl_store_t *st = rec->store;
    bool ok = (behind && st->ops->set_aside_rows != NULL &&
               st->ops->set_aside_rows(st, batch, n, why, sizeof why)) ||
              st->ops->write_rows(st, batch, n, why, sizeof why);
    release_rows(rec, batch, n, ok, why);
    tell_state(rec);
    int64_t tend_at = store_tend_at(rec);
    pthread_mutex_lock(&rec->lock);
    rec->tend_at_ms = tend_at;
    count_handed(rec, n, ok, why);
}

/*
 * The store's while_waiting (store.h): while one of its writes waits on its
 * server, batches of a queue more than half full are set aside, so that a
 * slow or stalled server delays rows instead of making the queue refuse
 * them. A batch there is no room for is lost, and counted: the store is at
 * its cap. On the writer's thread, between its own steps' IO (no lock held).
 */
static void
set_aside_while_waiting(void *arg)
{
    sl_recorder_t *rec = arg;
    pthread_mutex_lock(&rec->lock);
    while (!rec->closing && sl_recorder_behind(rec->len, rec->cap)) {
        size_t n = rec->len < rec->batch_max ? rec->len : rec->batch_max;
        take_rows(rec, rec->aside, n);
        pthread_mutex_unlock(&rec->lock);
        for (size_t i = 0; i < n; i++)
            redact_row(rec->aside[i]);
        char why[256] = "";
        bool ok = rec->store->ops->set_aside_rows(rec->store, rec->aside, n, why, sizeof why);
        release_rows(rec, rec->aside, n, ok, why);
        pthread_mutex_lock(&rec->lock);
        count_handed(rec, n, ok, why);
    }
    pthread_mutex_unlock(&rec->lock);
}

static void
do_flush_usage(sl_recorder_t *rec, int64_t now_ms)
{
    bucket_map_t taken = rec->buckets;
    rec->buckets = (bucket_map_t){0};
    rec->usage_flushed_ms = now_ms;
    uint64_t seq = ++rec->usage_seq;
    pthread_mutex_unlock(&rec->lock);
    sl_usage_delta_t *deltas = sl_xcalloc(taken.len > 0 ? taken.len : 1, sizeof *deltas);
    size_t n = 0;
    for (size_t i = 0; i < taken.cap; i++) {
        const bucket_t *b = &taken.slots[i];
        if (b->name != NULL)
            deltas[n++] =
                (sl_usage_delta_t){b->kind, b->name, b->minute, b->requests, b->tokens, b->cost_micros};
    }
    char why[256] = "";
    bool ok = rec->store->ops->write_usage(rec->store, deltas, n, seq, why, sizeof why);
    free(deltas);
    tell_state(rec);
    int64_t tend_at = store_tend_at(rec);
    pthread_mutex_lock(&rec->lock);
    rec->tend_at_ms = tend_at;
    note_failure(rec, ok, why);
    /* Kept for the next second's try; but a flush or close must end, so then they are lost and counted. */
    for (size_t i = 0; !ok && i < taken.cap; i++) {
        const bucket_t *b = &taken.slots[i];
        if (b->name != NULL && (flush_wanted(rec) || !bucket_add(&rec->buckets, b->kind, b->name, b->minute,
                                                                 b->requests, b->tokens, b->cost_micros)))
            rec->stats.usage_dropped++;
    }
    bucket_map_free(&taken);
}

static void
do_sweep(sl_recorder_t *rec)
{
    pthread_mutex_unlock(&rec->lock);
    uint64_t swept = 0;
    char why[256] = "";
    sl_sweep_result_t result = rec->store->ops->sweep(rec->store, clock_ms(CLOCK_REALTIME),
                                                      rec->retention_days, &swept, why, sizeof why);
    int64_t next = sl_recorder_sweep_next(clock_ms(CLOCK_MONOTONIC), result);
    tell_state(rec);
    int64_t tend_at = store_tend_at(rec);
    pthread_mutex_lock(&rec->lock);
    rec->tend_at_ms = tend_at;
    rec->stats.swept += swept;
    rec->sweep_at_ms = next;
    note_failure(rec, result != SL_SWEEP_FAILED, why);
}

static void
do_tend(sl_recorder_t *rec, int64_t now_ms)
{
    pthread_mutex_unlock(&rec->lock);
    if (rec->store->ops->tend != NULL)
        rec->store->ops->tend(rec->store, now_ms);
    tell_state(rec);
    int64_t tend_at = store_tend_at(rec);
    pthread_mutex_lock(&rec->lock);
    rec->tend_at_ms = tend_at;
}

static void
sleep_until(sl_recorder_t *rec, int64_t wake_ms)
{
    if (wake_ms == INT64_MAX) {
        pthread_cond_wait(&rec->wake, &rec->lock);
        return;
    }
    struct timespec ts = {.tv_sec = wake_ms / 1000, .tv_nsec = (wake_ms % 1000) * 1000000};
    pthread_cond_timedwait(&rec->wake, &rec->lock, &ts);
}

/*
 * Rows a full queue refused are counted drops (behaviour.md §10) and told through on_dropped: at once, then
 * at most once per SL_RECORDER_DROPS_TOLD_MS while the writer stays behind. Drops the lock around the call.
 */
static void
tell_refused(sl_recorder_t *rec, int64_t now)
{
    uint64_t n = rec->refused_untold;
    size_t cap = rec->cap;
    rec->refused_untold = 0;
    rec->refused_told_ms = now;
    if (rec->on_dropped == NULL)
        return;
    pthread_mutex_unlock(&rec->lock);
    char why[160];
    snprintf(why, sizeof why, "the writer fell behind the database: its queue of %zu rows was full", cap);
    rec->on_dropped(rec->on_dropped_ctx, n, why);
    pthread_mutex_lock(&rec->lock);
}

static void *
writer_main(void *arg)
{
    sl_recorder_t *rec = arg;
    pthread_setname_np(pthread_self(), "sl-writer");
    sl_request_row_t **batch = sl_xmalloc(rec->batch_max * sizeof *batch);
    pthread_mutex_lock(&rec->lock);
    for (;;) {
        int64_t now = clock_ms(CLOCK_MONOTONIC);
        int64_t tell_at =
            rec->refused_untold > 0 ? rec->refused_told_ms + SL_RECORDER_DROPS_TOLD_MS : INT64_MAX;
        if (now >= tell_at || (rec->refused_untold > 0 && rec->closing)) {
            tell_refused(rec, now);
            continue;
        }
        sl_recorder_state_t st = {
            .queued = rec->len,
            .capacity = rec->cap,
            .oldest_ms = rec->oldest_ms,
            .usage_pending = rec->buckets.len > 0,
            .usage_flushed_ms = rec->usage_flushed_ms,
            .sweep_at_ms = rec->sweep_at_ms,
            .tend_at_ms = rec->tend_at_ms,
            .flush_wanted = flush_wanted(rec),
            .closing = rec->closing,
        };
        sl_recorder_plan_t plan = sl_recorder_plan(&st, now, rec->batch_max);
        if (plan.write_rows > 0) {
            do_write(rec, batch, plan.write_rows, plan.behind);
        } else if (plan.flush_usage) {
            do_flush_usage(rec, now);
        } else if (plan.sweep) {
            do_sweep(rec);
        } else if (plan.tend && !st.closing) {
            do_tend(rec, now);
        } else if (st.flush_wanted) {
            rec->flush_done = rec->flush_seq;
            pthread_cond_broadcast(&rec->done);
            if (rec->closing)
                break;
        } else {
            sleep_until(rec, plan.wake_ms < tell_at ? plan.wake_ms : tell_at);
        }
    }
    pthread_mutex_unlock(&rec->lock);
    free(batch);
    return NULL;
}

static void
options_or_defaults(const sl_recorder_options_t *in, sl_recorder_options_t *o)
{
    *o = in != NULL ? *in : (sl_recorder_options_t){0};
    if (o->queue_capacity == 0)
        o->queue_capacity = SL_RECORDER_DEFAULT_QUEUE;
    if (o->batch_max == 0)
        o->batch_max = SL_RECORDER_DEFAULT_BATCH;
    if (o->busy_timeout_ms == 0)
        o->busy_timeout_ms = SL_RECORDER_DEFAULT_BUSY_MS;
    if (o->retention_days == 0)
        o->retention_days = SL_RECORDER_DEFAULT_RETENTION;
}

sl_recorder_t *
sl_recorder_open(const sl_store_where_t *where, const sl_recorder_options_t *opts, char *err, size_t err_size)
{
    sl_recorder_options_t o;
    options_or_defaults(opts, &o);
    sl_store_t *store = where->url != NULL ? sl_store_pg_open(where, &o, err, err_size)
                                           : sl_store_sqlite_open(where->path, &o, err, err_size);
    if (store == NULL)
        return NULL;
    sl_recorder_t *rec = sl_xcalloc(1, sizeof *rec);
    rec->store = store;
    rec->batch_max = o.batch_max;
    rec->retention_days = o.retention_days;
    rec->on_dropped = o.on_dropped;
    rec->on_dropped_ctx = o.on_dropped_ctx;
    rec->on_state = o.on_state;
    rec->on_state_ctx = o.on_state_ctx;
    rec->cap = o.queue_capacity;
    rec->queue = sl_xmalloc(rec->cap * sizeof *rec->queue);
    rec->aside = sl_xmalloc(rec->batch_max * sizeof *rec->aside);
    if (store->ops->set_aside_rows != NULL) {
        store->while_waiting = set_aside_while_waiting;
        store->while_waiting_ctx = rec;
    }
    rec->refused_told_ms = INT64_MIN / 2;
    rec->usage_flushed_ms = rec->sweep_at_ms = clock_ms(CLOCK_MONOTONIC);
    rec->tend_at_ms = store_tend_at(rec);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rec->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&rec->done, NULL);
    pthread_mutex_init(&rec->lock, NULL);
    int rc = pthread_create(&rec->thread, NULL, writer_main, rec);
    if (rc != 0) {
        sl_text_reason(err, err_size, "request DB: cannot start the writer thread: %s", strerror(rc));
        pthread_mutex_destroy(&rec->lock);
        pthread_cond_destroy(&rec->wake);
        pthread_cond_destroy(&rec->done);
        free(rec->queue);
        free(rec->aside);
        store->ops->close(store);
        free(rec);
        return NULL;
    }
    return rec;
}

bool
sl_recorder_submit(sl_recorder_t *rec, sl_request_row_t *row)
{
    bool valid = row_is_valid(row);
    pthread_mutex_lock(&rec->lock);
    bool queued = valid && !rec->closing && rec->len < rec->cap;
    if (queued) {
        if (rec->len == 0)
            rec->oldest_ms = clock_ms(CLOCK_MONOTONIC);
        rec->queue[(rec->head + rec->len) % rec->cap] = row;
        rec->len++;
        /* The writer only needs to learn of a new deadline or of a full batch. */
        if (rec->len == 1 || rec->len == rec->batch_max)
            pthread_cond_signal(&rec->wake);
    } else {
        rec->stats.dropped++;
        /* A full queue means the writer fell behind (a slow DB): the writer tells of it, off this thread. */
        if (valid && !rec->closing && rec->refused_untold++ == 0)
            pthread_cond_signal(&rec->wake);
    }
    pthread_mutex_unlock(&rec->lock);
    if (!queued)
        sl_request_row_free(row);
    return queued;
}

bool
sl_recorder_add_usage(sl_recorder_t *rec, sl_bucket_kind_t kind, const char *name, int64_t minute,
                      int64_t requests, int64_t tokens, int64_t cost_micros)
{
    pthread_mutex_lock(&rec->lock);
    bool was_empty = rec->buckets.len == 0;
    bool ok = !rec->closing && (unsigned)kind < SL_BUCKET_KIND_COUNT &&
              bucket_add(&rec->buckets, kind, name, minute, requests, tokens, cost_micros);
    if (!ok)
        rec->stats.usage_dropped++;
    else if (was_empty)
        pthread_cond_signal(&rec->wake);
    pthread_mutex_unlock(&rec->lock);
    return ok;
}

void
sl_recorder_stats(sl_recorder_t *rec, sl_recorder_stats_t *out)
{
    pthread_mutex_lock(&rec->lock);
    *out = rec->stats;
    pthread_mutex_unlock(&rec->lock);
}

void
sl_recorder_status(sl_recorder_t *rec, sl_store_status_t *out)
{
    rec->store->ops->status(rec->store, out);
}

void
sl_recorder_flush(sl_recorder_t *rec)
{
    pthread_mutex_lock(&rec->lock);
    uint64_t mine = ++rec->flush_seq;
    pthread_cond_signal(&rec->wake);
    while (rec->flush_done < mine)
        pthread_cond_wait(&rec->done, &rec->lock);
    pthread_mutex_unlock(&rec->lock);
}

void
sl_recorder_close(sl_recorder_t *rec)
{
    if (rec == NULL)
        return;
    pthread_mutex_lock(&rec->lock);
    rec->closing = true;
    pthread_cond_signal(&rec->wake);
    pthread_mutex_unlock(&rec->lock);
    pthread_join(rec->thread, NULL);
    assert(rec->len == 0 && rec->buckets.len == 0);
    rec->store->ops->close(rec->store);
    bucket_map_free(&rec->buckets);
    free(rec->queue);
    free(rec->aside);
    pthread_mutex_destroy(&rec->lock);
    pthread_cond_destroy(&rec->wake);
    pthread_cond_destroy(&rec->done);
    free(rec);
}

/* ---- reading back ------------------------------------------------------------ */

int
sl_recorder_history(const sl_store_where_t *where, const sl_recorder_history_query_t *q,
                    sl_proto_history_row_t **rows, size_t *n_rows, char **next_cursor, char *err,
                    size_t err_size)
{
    if (where->url != NULL)
        return sl_store_pg_history(where, q, rows, n_rows, next_cursor, err, err_size);
    return sl_store_sqlite_history(where->path, q, rows, n_rows, next_cursor, err, err_size);
}

int64_t
sl_recorder_load_usage(const sl_store_where_t *where, int64_t since_ms, sl_usage_cb cb, void *ctx, char *err,
                       size_t err_size)
{
    if (where->url != NULL)
        return sl_store_pg_load_usage(where, since_ms, cb, ctx, err, err_size);
    return sl_store_sqlite_load_usage(where->path, since_ms, cb, ctx, err, err_size);
}
