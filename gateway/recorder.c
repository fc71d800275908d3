#include "recorder.h"

#include "core/dialect.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/mask.h"
#include "core/text.h"
#include "core/xalloc.h"

#define DAY_MS    86400000LL
#define MINUTE_MS 60000LL

/* ---- names stored in the DB: the protocol's spellings ---------------------- */

static const char *const dialect_names[SL_DIALECT_COUNT] = {"anthropic", "openai_chat", "openai_responses",
                                                            "gemini", "bedrock"};
static const char *const bucket_kind_names[SL_BUCKET_KIND_COUNT] = {"provider", "client"};

static int
name_index(const char *const *names, int count, const char *s)
{
    for (int i = 0; s != NULL && i < count; i++) {
        if (names[i] != NULL && strcmp(names[i], s) == 0)
            return i;
    }
    return -1;
}

/* ---- the rules, pure ------------------------------------------------------- */

static int64_t
min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

sl_recorder_plan_t
sl_recorder_plan(const sl_recorder_state_t *s, int64_t now_ms, size_t batch_max)
{
    sl_recorder_plan_t p = {.wake_ms = INT64_MAX};
    int64_t batch_due = s->oldest_ms + SL_RECORDER_BATCH_DELAY_MS;
    int64_t usage_due = s->usage_flushed_ms + SL_RECORDER_USAGE_FLUSH_MS;
    if (s->queued > 0 && (s->flush_wanted || s->queued >= batch_max || now_ms >= batch_due))
        p.write_rows = s->queued < batch_max ? s->queued : batch_max;
    p.flush_usage = s->usage_pending && (s->flush_wanted || now_ms >= usage_due);
    p.sweep = !s->closing && now_ms >= s->sweep_at_ms;
    if (s->queued > 0)
        p.wake_ms = min64(p.wake_ms, batch_due);
    if (s->usage_pending)
        p.wake_ms = min64(p.wake_ms, usage_due);
    if (!s->closing)
        p.wake_ms = min64(p.wake_ms, s->sweep_at_ms);
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

sl_request_row_t *
sl_request_row_new(size_t n_attempts)
{
    sl_request_row_t *row = sl_xcalloc(1, sizeof *row);
    row->ttfb_ms = row->ttft_ms = row->cost_micros = SL_ROW_ABSENT;
    row->n_attempts = n_attempts;
    row->attempts = n_attempts > 0 ? sl_xcalloc(n_attempts, sizeof *row->attempts) : NULL;
    for (size_t i = 0; i < n_attempts; i++)
        row->attempts[i].pause_ms = row->attempts[i].backoff_ms = SL_ROW_ABSENT;
    return row;
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
        free(a->provider);
        free(a->model);
        sl_row_msg_clear(&a->error);
    }
    free(row->attempts);
    free(row->client);
    free(row->model);
    free(row->provider);
    free(row->path);
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
    if (row->path != NULL) {
        sl_strbuf_t clean = {0};
        sl_path_strip_key(row->path, strlen(row->path), &clean);
        free(row->path);
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

/* ---- the schema -------------------------------------------------------------- */

/*
 * migrations[v] takes a DB from user_version v to v + 1. `row` is the DB's own
 * key: request ids restart with the process, so they may repeat across runs.
 */
static const char *const migrations[SL_RECORDER_SCHEMA_VERSION] = {
    "CREATE TABLE requests ("
    "  row INTEGER PRIMARY KEY,"
    "  id INTEGER NOT NULL,"
    "  started_at_ms INTEGER NOT NULL,"
    "  client TEXT NOT NULL,"
    "  dialect TEXT NOT NULL,"
    "  model TEXT NOT NULL,"
    "  provider TEXT,"
    "  path TEXT NOT NULL,"
    "  status INTEGER NOT NULL,"
    "  outcome TEXT NOT NULL,"
    "  error_code TEXT, error_text TEXT, error_args TEXT,"
    "  duration_ms INTEGER NOT NULL,"
    "  ttfb_ms INTEGER, ttft_ms INTEGER,"
    "  usage_input INTEGER, usage_output INTEGER, usage_cache_read INTEGER, usage_cache_write INTEGER,"
    "  usage_estimated INTEGER,"
    "  cost_micros INTEGER);"
    "CREATE INDEX requests_by_time ON requests (started_at_ms, row);"
    "CREATE TABLE attempts ("
    "  request_row INTEGER NOT NULL,"
    "  n INTEGER NOT NULL,"
    "  provider TEXT NOT NULL,"
    "  model TEXT,"
    "  outcome TEXT NOT NULL,"
    "  status INTEGER,"
    "  error_code TEXT, error_text TEXT, error_args TEXT,"
    "  ms INTEGER NOT NULL,"
    "  pause_ms INTEGER, retry INTEGER, backoff_ms INTEGER,"
    "  skipped TEXT,"
    "  PRIMARY KEY (request_row, n)) WITHOUT ROWID;"
    "CREATE TABLE usage_buckets ("
    "  kind TEXT NOT NULL,"
    "  name TEXT NOT NULL,"
    "  minute INTEGER NOT NULL,"
    "  requests INTEGER NOT NULL,"
    "  tokens INTEGER NOT NULL,"
    "  cost_micros INTEGER NOT NULL,"
    "  PRIMARY KEY (kind, name, minute)) WITHOUT ROWID;"
    "CREATE INDEX usage_by_minute ON usage_buckets (minute);",
    /* 2: why a request went on as it did after a failed hop (core/next_step.h). */
    "ALTER TABLE attempts ADD COLUMN reason TEXT;",
};

static bool
exec_sql(sqlite3 *db, const char *sql, const char *path, char *err, size_t err_size)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK)
        return true;
    sl_text_reason(err, err_size, "request DB %s: %s", path, msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return false;
}

/* Returns the DB's user_version, or -1 with a reason in err. */
static int
read_user_version(sqlite3 *db, const char *path, char *err, size_t err_size)
{
    sqlite3_stmt *st = NULL;
    int version = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    else
        sl_text_reason(err, err_size, "request DB %s is not readable: %s", path, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return version;
}

static bool
refuse_newer(int version, const char *path, char *err, size_t err_size)
{
    if (version <= SL_RECORDER_SCHEMA_VERSION)
        return false;
    sl_text_reason(err, err_size,
                   "request DB %s has schema version %d, newer than the version %d this sluice reads; "
                   "refusing to touch it",
                   path, version, SL_RECORDER_SCHEMA_VERSION);
    return true;
}

/* One transaction: a crash mid-way leaves the old version, never half a schema. */
static bool
migrate(sqlite3 *db, const char *path, char *err, size_t err_size)
{
    if (!exec_sql(db, "BEGIN IMMEDIATE", path, err, err_size))
        return false;
    int version = read_user_version(db, path, err, err_size);
    bool ok = version >= 0 && !refuse_newer(version, path, err, err_size);
    for (int v = version; ok && v < SL_RECORDER_SCHEMA_VERSION; v++)
        ok = exec_sql(db, migrations[v], path, err, err_size);
    if (ok && version < SL_RECORDER_SCHEMA_VERSION) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", SL_RECORDER_SCHEMA_VERSION);
        ok = exec_sql(db, sql, path, err, err_size);
    }
    if (ok)
        return exec_sql(db, "COMMIT", path, err, err_size);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return false;
}

/*
 * SQLite would create the file with the process umask; the DB names clients
 * and models, so it is private from the first byte. The WAL and shm files
 * take the main file's mode; old ones are tightened as well.
 */
static bool
create_private(const char *path, char *err, size_t err_size)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        sl_text_reason(err, err_size, "cannot create request DB %s: %s", path, strerror(errno));
        return false;
    }
    bool ok = fchmod(fd, 0600) == 0;
    if (!ok)
        sl_text_reason(err, err_size, "cannot make request DB %s private: %s", path, strerror(errno));
    close(fd);
    static const char *const sidecars[] = {"-wal", "-shm"};
    for (size_t i = 0; ok && i < sizeof sidecars / sizeof sidecars[0]; i++) {
        char side[4096];
        if (snprintf(side, sizeof side, "%s%s", path, sidecars[i]) < (int)sizeof side &&
            chmod(side, 0600) != 0 && errno != ENOENT) {
            sl_text_reason(err, err_size, "cannot make %s private: %s", side, strerror(errno));
            ok = false;
        }
    }
    return ok;
}

/* ---- the recorder ------------------------------------------------------------ */

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_INSERT_REQUEST,
    ST_INSERT_ATTEMPT,
    ST_UPSERT_BUCKET,
    ST_SWEEP_ATTEMPTS,
    ST_SWEEP_REQUESTS,
    ST_SWEEP_BUCKETS,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_INSERT_REQUEST] =
        "INSERT INTO requests (id, started_at_ms, client, dialect, model, provider, path, status,"
        " outcome, error_code, error_text, error_args, duration_ms, ttfb_ms, ttft_ms,"
        " usage_input, usage_output, usage_cache_read, usage_cache_write, usage_estimated,"
        " cost_micros)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,"
        " ?18, ?19, ?20, ?21)",
    [ST_INSERT_ATTEMPT] =
        "INSERT INTO attempts (request_row, n, provider, model, outcome, status, error_code,"
        " error_text, error_args, ms, pause_ms, retry, backoff_ms, skipped, reason)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    [ST_UPSERT_BUCKET] = "INSERT INTO usage_buckets (kind, name, minute, requests, tokens, cost_micros)"
                         " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (kind, name, minute) DO UPDATE SET"
                         " requests = requests + excluded.requests, tokens = tokens + excluded.tokens,"
                         " cost_micros = cost_micros + excluded.cost_micros",
    /* The same subquery twice in one transaction selects the same chunk for both deletes. */
    [ST_SWEEP_ATTEMPTS] = "DELETE FROM attempts WHERE request_row IN (SELECT row FROM requests"
                          " WHERE started_at_ms < ?1 ORDER BY started_at_ms, row LIMIT ?2)",
    [ST_SWEEP_REQUESTS] = "DELETE FROM requests WHERE row IN (SELECT row FROM requests"
                          " WHERE started_at_ms < ?1 ORDER BY started_at_ms, row LIMIT ?2)",
    [ST_SWEEP_BUCKETS] = "DELETE FROM usage_buckets WHERE (kind, name, minute) IN (SELECT kind, name, minute"
                         " FROM usage_buckets WHERE minute < ?1 LIMIT ?2)",
};

struct sl_recorder {
    sqlite3 *db; /* the writer thread's alone once it runs */
    sqlite3_stmt *stmts[ST_COUNT];
    size_t batch_max;
    uint32_t retention_days;
    pthread_t thread;
    void (*on_dropped)(void *ctx, uint64_t rows, const char *reason);
    void *on_dropped_ctx;

    pthread_mutex_t lock; /* guards everything below; never held across IO */
    pthread_cond_t wake;  /* the writer sleeps here */
    pthread_cond_t done;  /* sl_recorder_flush sleeps here */
    sl_request_row_t **queue;
    size_t cap, head, len;
    int64_t oldest_ms;
    bucket_map_t buckets;
    int64_t usage_flushed_ms;
    int64_t sweep_at_ms;
    uint64_t flush_seq, flush_done;
    bool closing;
    sl_recorder_stats_t stats;
};

static int64_t
clock_ms(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Steps a statement to its end and resets it; returns SQLITE_OK or the failure. */
static int
run(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static void
bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s != NULL)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static void
bind_opt(sqlite3_stmt *st, int i, int64_t v, int64_t absent)
{
    if (v != absent)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

static char *
args_json(const sl_row_msg_t *m)
{
    if (m->nargs == 0)
        return NULL;
    json_t *obj = json_object();
    for (size_t i = 0; i < m->nargs; i++) {
        /* An upstream's text may not be UTF-8, which JSON cannot carry: U+FFFD stands in for it. */
        json_t *v = json_string(m->args[i].value);
        json_object_set_new(obj, m->args[i].name, v != NULL ? v : json_string("\xef\xbf\xbd"));
    }
    char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    return s;
}

/* Binds code, text and args at i, i+1, i+2; returns the args text, which must outlive the step. */
static char *
bind_msg(sqlite3_stmt *st, int i, const sl_row_msg_t *m)
{
    char *args = m->code != NULL ? args_json(m) : NULL;
    bind_text(st, i, m->code);
    bind_text(st, i + 1, m->code != NULL ? m->text : NULL);
    bind_text(st, i + 2, args);
    return args;
}

static const char *
or_empty(const char *s)
{
    return s != NULL ? s : "";
}

static int
insert_attempt(sl_recorder_t *rec, sqlite3_int64 request_row, size_t n, const sl_attempt_row_t *a)
{
    sqlite3_stmt *st = rec->stmts[ST_INSERT_ATTEMPT];
    sqlite3_bind_int64(st, 1, request_row);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)n);
    bind_text(st, 3, or_empty(a->provider));
    bind_text(st, 4, a->model);
    bind_text(st, 5, sl_hop_outcome_slug(a->outcome));
    bind_opt(st, 6, a->status, 0);
    char *args = bind_msg(st, 7, &a->error);
    sqlite3_bind_int64(st, 10, a->ms);
    bind_opt(st, 11, a->pause_ms, SL_ROW_ABSENT);
    bind_opt(st, 12, a->retry, 0);
    bind_opt(st, 13, a->backoff_ms, SL_ROW_ABSENT);
    bind_text(st, 14, a->skipped != SL_SKIP_NONE ? sl_skip_slug(a->skipped) : NULL);
    bind_text(st, 15, a->has_reason ? sl_step_reason_slug(a->reason) : NULL);
    int rc = run(st);
    free(args);
    return rc;
}

static int
insert_row(sl_recorder_t *rec, const sl_request_row_t *r)
{
    sqlite3_stmt *st = rec->stmts[ST_INSERT_REQUEST];
    sqlite3_bind_int64(st, 1, (sqlite3_int64)r->id);
    sqlite3_bind_int64(st, 2, r->started_at_ms);
    bind_text(st, 3, or_empty(r->client));
    bind_text(st, 4, dialect_names[r->dialect]);
    bind_text(st, 5, or_empty(r->model));
    bind_text(st, 6, r->provider);
    bind_text(st, 7, or_empty(r->path));
    sqlite3_bind_int64(st, 8, r->status);
    bind_text(st, 9, sl_row_outcome_slug(r->outcome));
    char *args = bind_msg(st, 10, &r->error);
    sqlite3_bind_int64(st, 13, r->duration_ms);
    bind_opt(st, 14, r->ttfb_ms, SL_ROW_ABSENT);
    bind_opt(st, 15, r->ttft_ms, SL_ROW_ABSENT);
    const sl_row_usage_t *u = &r->usage;
    const int64_t usage[] = {(int64_t)u->input, (int64_t)u->output, (int64_t)u->cache_read,
                             (int64_t)u->cache_write, u->estimated};
    for (int k = 0; k < 5; k++) {
        if (r->has_usage)
            sqlite3_bind_int64(st, 16 + k, usage[k]);
        else
            sqlite3_bind_null(st, 16 + k);
    }
    bind_opt(st, 21, r->cost_micros, SL_ROW_ABSENT);
    int rc = run(st);
    free(args);
    sqlite3_int64 request_row = sqlite3_last_insert_rowid(rec->db);
    for (size_t i = 0; rc == SQLITE_OK && i < r->n_attempts; i++)
        rc = insert_attempt(rec, request_row, i, &r->attempts[i]);
    return rc;
}

/* A failed statement may already have rolled the transaction back; only then is ROLLBACK an error. */
static void
rollback(sl_recorder_t *rec)
{
    if (!sqlite3_get_autocommit(rec->db))
        run(rec->stmts[ST_ROLLBACK]);
}

static int
commit_or_rollback(sl_recorder_t *rec, int rc)
{
    if (rc == SQLITE_OK)
        rc = run(rec->stmts[ST_COMMIT]);
    if (rc != SQLITE_OK)
        rollback(rec);
    return rc;
}

/* All rows or none: the caller counts the whole batch as written or as dropped. */
static int
write_batch(sl_recorder_t *rec, sl_request_row_t **rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        redact_row(rows[i]);
    int rc = run(rec->stmts[ST_BEGIN]);
    if (rc != SQLITE_OK)
        return rc;
    for (size_t i = 0; rc == SQLITE_OK && i < n; i++)
        rc = insert_row(rec, rows[i]);
    return commit_or_rollback(rec, rc);
}

static int
write_buckets(sl_recorder_t *rec, const bucket_map_t *m)
{
    int rc = run(rec->stmts[ST_BEGIN]);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_stmt *st = rec->stmts[ST_UPSERT_BUCKET];
    for (size_t i = 0; rc == SQLITE_OK && i < m->cap; i++) {
        const bucket_t *b = &m->slots[i];
        if (b->name == NULL)
            continue;
        bind_text(st, 1, bucket_kind_names[b->kind]);
        bind_text(st, 2, b->name);
        sqlite3_bind_int64(st, 3, b->minute);
        sqlite3_bind_int64(st, 4, b->requests);
        sqlite3_bind_int64(st, 5, b->tokens);
        sqlite3_bind_int64(st, 6, b->cost_micros);
        rc = run(st);
    }
    return commit_or_rollback(rec, rc);
}

static int
sweep_delete(sl_recorder_t *rec, int stmt, int64_t cutoff, int *changed)
{
    sqlite3_stmt *st = rec->stmts[stmt];
    sqlite3_bind_int64(st, 1, cutoff);
    sqlite3_bind_int(st, 2, SL_RECORDER_SWEEP_CHUNK);
    int rc = run(st);
    *changed = sqlite3_changes(rec->db);
    return rc;
}

static sl_sweep_result_t
sweep_step(sl_recorder_t *rec, int64_t wall_ms, int *swept, int *rc_out)
{
    int64_t cutoff = sl_retention_cutoff_ms(wall_ms, rec->retention_days);
    int attempts = 0, requests = 0, buckets = 0;
    int rc = run(rec->stmts[ST_BEGIN]);
    if (rc == SQLITE_OK) {
        rc = sweep_delete(rec, ST_SWEEP_ATTEMPTS, cutoff, &attempts);
        if (rc == SQLITE_OK)
            rc = sweep_delete(rec, ST_SWEEP_REQUESTS, cutoff, &requests);
        if (rc == SQLITE_OK)
            rc = sweep_delete(rec, ST_SWEEP_BUCKETS, sl_bucket_cutoff_minute(wall_ms, rec->retention_days),
                              &buckets);
        rc = commit_or_rollback(rec, rc);
    }
    *rc_out = rc;
    *swept = rc == SQLITE_OK ? requests : 0;
    if (rc != SQLITE_OK)
        return SL_SWEEP_FAILED;
    return requests == SL_RECORDER_SWEEP_CHUNK || buckets == SL_RECORDER_SWEEP_CHUNK ? SL_SWEEP_MORE
                                                                                     : SL_SWEEP_DONE;
}

static bool
flush_wanted(const sl_recorder_t *rec)
{
    return rec->closing || rec->flush_seq > rec->flush_done;
}

static void
note_failure(sl_recorder_t *rec, int rc)
{
    if (rc != SQLITE_OK)
        rec->stats.last_error = rc;
}

/* The next three run with rec->lock held and drop it around their IO. */

static void
do_write(sl_recorder_t *rec, sl_request_row_t **batch, size_t n)
{
    for (size_t i = 0; i < n; i++)
        batch[i] = rec->queue[(rec->head + i) % rec->cap];
    rec->head = (rec->head + n) % rec->cap;
    rec->len -= n;
    pthread_mutex_unlock(&rec->lock);
    int rc = write_batch(rec, batch, n);
    for (size_t i = 0; i < n; i++)
        sl_request_row_free(batch[i]);
    if (rc != SQLITE_OK && rec->on_dropped != NULL)
        rec->on_dropped(rec->on_dropped_ctx, n, sqlite3_errstr(rc));
    pthread_mutex_lock(&rec->lock);
    if (rc == SQLITE_OK)
        rec->stats.written += n;
    else
        rec->stats.dropped += n;
    note_failure(rec, rc);
}

static void
do_flush_usage(sl_recorder_t *rec, int64_t now_ms)
{
    bucket_map_t taken = rec->buckets;
    rec->buckets = (bucket_map_t){0};
    rec->usage_flushed_ms = now_ms;
    pthread_mutex_unlock(&rec->lock);
    int rc = write_buckets(rec, &taken);
    pthread_mutex_lock(&rec->lock);
    note_failure(rec, rc);
    /* Kept for the next second's try; but a flush or close must end, so then they are lost and counted. */
    for (size_t i = 0; rc != SQLITE_OK && i < taken.cap; i++) {
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
    int swept, rc;
    sl_sweep_result_t result = sweep_step(rec, clock_ms(CLOCK_REALTIME), &swept, &rc);
    int64_t next = sl_recorder_sweep_next(clock_ms(CLOCK_MONOTONIC), result);
    pthread_mutex_lock(&rec->lock);
    rec->stats.swept += (uint64_t)swept;
    rec->sweep_at_ms = next;
    note_failure(rec, rc);
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

static void *
writer_main(void *arg)
{
    sl_recorder_t *rec = arg;
    sl_request_row_t **batch = sl_xmalloc(rec->batch_max * sizeof *batch);
    pthread_mutex_lock(&rec->lock);
    for (;;) {
        int64_t now = clock_ms(CLOCK_MONOTONIC);
        sl_recorder_state_t st = {
            .queued = rec->len,
            .oldest_ms = rec->oldest_ms,
            .usage_pending = rec->buckets.len > 0,
            .usage_flushed_ms = rec->usage_flushed_ms,
            .sweep_at_ms = rec->sweep_at_ms,
            .flush_wanted = flush_wanted(rec),
            .closing = rec->closing,
        };
        sl_recorder_plan_t plan = sl_recorder_plan(&st, now, rec->batch_max);
        if (plan.write_rows > 0) {
            do_write(rec, batch, plan.write_rows);
        } else if (plan.flush_usage) {
            do_flush_usage(rec, now);
        } else if (plan.sweep) {
            do_sweep(rec);
        } else if (st.flush_wanted) {
            rec->flush_done = rec->flush_seq;
            pthread_cond_broadcast(&rec->done);
            if (rec->closing)
                break;
        } else {
            sleep_until(rec, plan.wake_ms);
        }
    }
    pthread_mutex_unlock(&rec->lock);
    free(batch);
    return NULL;
}

static bool
configure(sqlite3 *db, const char *path, const sl_recorder_options_t *o, char *err, size_t err_size)
{
    sqlite3_stmt *st = NULL;
    bool wal = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL) == SQLITE_OK &&
               sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL &&
               strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0;
    sqlite3_finalize(st);
    if (!wal) {
        sl_text_reason(err, err_size, "request DB %s: cannot switch to WAL journal: %s", path,
                       sqlite3_errmsg(db));
        return false;
    }
    if (!exec_sql(db, "PRAGMA synchronous = NORMAL", path, err, err_size))
        return false;
    if (o->max_db_bytes == 0)
        return true;
    uint64_t page_size = 4096;
    if (sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        page_size = (uint64_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    /* 0 would only query the limit; SQLite raises a limit below the current size to that size. */
    uint64_t pages = o->max_db_bytes / page_size > 0 ? o->max_db_bytes / page_size : 1;
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %llu", (unsigned long long)pages);
    return exec_sql(db, sql, path, err, err_size);
}

static bool
prepare_all(sl_recorder_t *rec, const char *path, char *err, size_t err_size)
{
    for (int i = 0; i < ST_COUNT; i++) {
        if (sqlite3_prepare_v3(rec->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &rec->stmts[i], NULL) !=
            SQLITE_OK) {
            sl_text_reason(err, err_size, "request DB %s: %s", path, sqlite3_errmsg(rec->db));
            return false;
        }
    }
    return true;
}

static void
close_db(sl_recorder_t *rec)
{
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(rec->stmts[i]);
    sqlite3_close(rec->db);
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
sl_recorder_open(const char *path, const sl_recorder_options_t *opts, char *err, size_t err_size)
{
    sl_recorder_options_t o;
    options_or_defaults(opts, &o);
    if (path == NULL || *path == '\0') {
        sl_text_reason(err, err_size, "request DB: no path given");
        return NULL;
    }
    if (!create_private(path, err, err_size))
        return NULL;
    sqlite3 *db = NULL;
    /* One thread at a time uses it (opened here, then only the writer): SQLite need not lock per call. */
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sl_text_reason(err, err_size, "cannot open request DB %s: %s", path,
                       db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return NULL;
    }
    /* A newer schema is refused before WAL or any pragma writes to the file. */
    sqlite3_busy_timeout(db, (int)o.busy_timeout_ms);
    int version = read_user_version(db, path, err, err_size);
    if (version < 0 || refuse_newer(version, path, err, err_size) ||
        !configure(db, path, &o, err, err_size) || !migrate(db, path, err, err_size)) {
        sqlite3_close(db);
        return NULL;
    }
    sl_recorder_t *rec = sl_xcalloc(1, sizeof *rec);
    rec->db = db;
    if (!prepare_all(rec, path, err, err_size)) {
        close_db(rec);
        free(rec);
        return NULL;
    }
    rec->batch_max = o.batch_max;
    rec->retention_days = o.retention_days;
    rec->on_dropped = o.on_dropped;
    rec->on_dropped_ctx = o.on_dropped_ctx;
    rec->cap = o.queue_capacity;
    rec->queue = sl_xmalloc(rec->cap * sizeof *rec->queue);
    rec->usage_flushed_ms = rec->sweep_at_ms = clock_ms(CLOCK_MONOTONIC);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rec->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&rec->done, NULL);
    pthread_mutex_init(&rec->lock, NULL);
    int rc = pthread_create(&rec->thread, NULL, writer_main, rec);
    if (rc != 0) {
        sl_text_reason(err, err_size, "request DB %s: cannot start the writer thread: %s", path,
                       strerror(rc));
        pthread_mutex_destroy(&rec->lock);
        pthread_cond_destroy(&rec->wake);
        pthread_cond_destroy(&rec->done);
        free(rec->queue);
        close_db(rec);
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
    close_db(rec);
    bucket_map_free(&rec->buckets);
    free(rec->queue);
    pthread_mutex_destroy(&rec->lock);
    pthread_cond_destroy(&rec->wake);
    pthread_cond_destroy(&rec->done);
    free(rec);
}

/* ---- reading back -------------------------------------------------------------- */

/*
 * A read-only connection of the caller's own. With empty non-NULL, a file that
 * does not exist, or that the recorder has created but not yet migrated
 * (user_version 0), returns NULL with *empty set and no error: nothing was
 * recorded yet.
 */
static sqlite3 *
open_reader(const char *path, bool *empty, char *err, size_t err_size)
{
    if (empty != NULL) {
        struct stat st;
        *empty = stat(path, &st) != 0 && errno == ENOENT;
        if (*empty)
            return NULL;
    }
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sl_text_reason(err, err_size, "cannot open request DB %s: %s", path,
                       db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, SL_RECORDER_DEFAULT_BUSY_MS);
    int version = read_user_version(db, path, err, err_size);
    if (version == 0 && empty != NULL) {
        *empty = true;
        version = -1;
    } else if (version >= 0 && version != SL_RECORDER_SCHEMA_VERSION) {
        sl_text_reason(err, err_size, "request DB %s has schema version %d; this sluice reads version %d",
                       path, version, SL_RECORDER_SCHEMA_VERSION);
        version = -1;
    }
    if (version < 0) {
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

static char *
col_str(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s != NULL ? sl_xstrdup((const char *)s) : NULL;
}

/* For NOT NULL columns: the protocol's required strings are never NULL. */
static char *
col_text(sqlite3_stmt *st, int i)
{
    char *s = col_str(st, i);
    return s != NULL ? s : sl_xstrdup("");
}

/* Sets *v and returns true when column i is not NULL. Stored numbers are never negative. */
static bool
col_u64(sqlite3_stmt *st, int i, uint64_t *v)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return false;
    sqlite3_int64 x = sqlite3_column_int64(st, i);
    *v = x > 0 ? (uint64_t)x : 0;
    return true;
}

static uint32_t
col_u32(sqlite3_stmt *st, int i, bool *has)
{
    uint64_t v = 0;
    bool present = col_u64(st, i, &v);
    if (has != NULL)
        *has = present;
    return v <= UINT32_MAX ? (uint32_t)v : UINT32_MAX;
}

/* The Msg stored at columns i (code), i + 1 (text) and i + 2 (args, a JSON object); NULL when code is. */
static sl_proto_msg_t *
col_msg(sqlite3_stmt *st, int i)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return NULL;
    sl_proto_msg_t *m = sl_xcalloc(1, sizeof *m);
    m->code = col_text(st, i);
    m->text = col_text(st, i + 1);
    const char *args = (const char *)sqlite3_column_text(st, i + 2);
    json_t *obj = args != NULL ? json_loads(args, 0, NULL) : NULL;
    if (json_is_object(obj) && json_object_size(obj) > 0) {
        m->args = sl_xcalloc(json_object_size(obj), sizeof *m->args);
        const char *name;
        json_t *value;
        json_object_foreach(obj, name, value)
        {
            if (json_is_string(value)) {
                m->args[m->args_len].key = sl_xstrdup(name);
                m->args[m->args_len].value = sl_xstrdup(json_string_value(value));
                m->args_len++;
            }
        }
    }
    json_decref(obj);
    return m;
}

/* Returns the enum value stored in column i, or -1 (with a reason in err) for a name this code does not know.
 */
static int
col_enum(sqlite3_stmt *st, int i, const char *const *names, int count, int null_value, char *err,
         size_t err_size)
{
    const char *s = (const char *)sqlite3_column_text(st, i);
    if (s == NULL && null_value >= 0)
        return null_value;
    int v = name_index(names, count, s);
    if (v < 0)
        sl_text_reason(err, err_size, "request DB: unknown %s '%s'", sqlite3_column_name(st, i),
                       s ? s : "NULL");
    return v;
}

/*
 * The stored names are the protocol's slugs, so the generated parsers read
 * them back. Each returns false for NULL or a name this code does not know.
 */
static bool
col_dialect(sqlite3_stmt *st, int i, sl_proto_dialect_t *out)
{
    const char *s = (const char *)sqlite3_column_text(st, i);
    return s != NULL && sl_proto_dialect_parse(s, out) == 0;
}

static bool
col_outcome(sqlite3_stmt *st, int i, sl_proto_outcome_t *out)
{
    const char *s = (const char *)sqlite3_column_text(st, i);
    return s != NULL && sl_proto_outcome_parse(s, out) == 0;
}

static bool
col_skip(sqlite3_stmt *st, int i, sl_proto_serve_skip_t *out)
{
    const char *s = (const char *)sqlite3_column_text(st, i);
    return s != NULL && sl_proto_serve_skip_parse(s, out) == 0;
}

static bool
col_reason(sqlite3_stmt *st, int i, sl_proto_step_reason_t *out)
{
    const char *s = (const char *)sqlite3_column_text(st, i);
    return s != NULL && sl_proto_step_reason_parse(s, out) == 0;
}

/*
 * Keyset pagination on requests_by_time: (?2, ?3) is the (started_at_ms, row)
 * of the previous page's last row, the largest values without a cursor. A
 * row value keeps the bound usable by the index, where an OR would scan from
 * the newest row on every page. The filters are checked on the rows the index
 * walk finds, within since_ms.
 */
static const char history_sql[] =
    "SELECT row, id, started_at_ms, client, dialect, model, provider, status, duration_ms, ttft_ms,"
    " usage_input, usage_output, usage_cache_read, usage_cache_write, usage_estimated, cost_micros"
    " FROM requests INDEXED BY requests_by_time"
    " WHERE started_at_ms >= ?1 AND (started_at_ms, row) < (?2, ?3)"
    " AND (?4 IS NULL OR client = ?4) AND (?5 IS NULL OR provider = ?5) AND (?6 IS NULL OR model = ?6)"
    " AND (?7 IS NULL OR status = ?7)"
    " ORDER BY started_at_ms DESC, row DESC LIMIT ?8";

enum {
    HC_ROW,
    HC_ID,
    HC_AT,
    HC_CLIENT,
    HC_DIALECT,
    HC_MODEL,
    HC_PROVIDER,
    HC_STATUS,
    HC_DURATION,
    HC_TTFT,
    HC_USAGE_INPUT,
    HC_USAGE_OUTPUT,
    HC_USAGE_CACHE_READ,
    HC_USAGE_CACHE_WRITE,
    HC_USAGE_ESTIMATED,
    HC_COST
};

static const char attempts_sql[] =
    "SELECT provider, model, outcome, status, error_code, error_text, error_args, ms,"
    " pause_ms, retry, backoff_ms, skipped, reason FROM attempts WHERE request_row = ?1"
    " ORDER BY n";

enum {
    AC_PROVIDER,
    AC_MODEL,
    AC_OUTCOME,
    AC_STATUS,
    AC_ERROR, /* code, text, args */
    AC_MS = AC_ERROR + 3,
    AC_PAUSE,
    AC_RETRY,
    AC_BACKOFF,
    AC_SKIPPED,
    AC_REASON
};

/* Appends the attempts of request_row to row; returns SQLITE_DONE or the failure. */
static int
read_attempts(sqlite3_stmt *st, sqlite3_int64 request_row, sl_proto_history_row_t *row)
{
    sqlite3_bind_int64(st, 1, request_row);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        sl_proto_outcome_t outcome;
        if (!col_outcome(st, AC_OUTCOME, &outcome))
            continue; /* a view cannot hold an outcome it has no name for */
        if (row->attempts_len == cap) {
            cap = cap ? cap * 2 : 4;
            row->attempts = sl_xrealloc(row->attempts, cap * sizeof *row->attempts);
        }
        sl_proto_attempt_view_t *a = &row->attempts[row->attempts_len++];
        *a = (sl_proto_attempt_view_t){.outcome = outcome};
        a->provider = col_text(st, AC_PROVIDER);
        a->model = col_str(st, AC_MODEL);
        a->status = col_u32(st, AC_STATUS, &a->has_status);
        a->error = col_msg(st, AC_ERROR);
        col_u64(st, AC_MS, &a->ms);
        a->has_pause_ms = col_u64(st, AC_PAUSE, &a->pause_ms);
        a->retry = col_u32(st, AC_RETRY, &a->has_retry);
        a->has_backoff_ms = col_u64(st, AC_BACKOFF, &a->backoff_ms);
        a->has_skipped = col_skip(st, AC_SKIPPED, &a->skipped);
        a->has_reason = col_reason(st, AC_REASON, &a->reason);
    }
    sqlite3_reset(st);
    return rc;
}

/* The current result row without its attempts; false (row untouched) for a dialect this code does not know.
 */
static bool
read_row(sqlite3_stmt *st, sl_proto_history_row_t *row)
{
    sl_proto_dialect_t dialect;
    if (!col_dialect(st, HC_DIALECT, &dialect))
        return false;
    *row = (sl_proto_history_row_t){.dialect = dialect};
    col_u64(st, HC_ID, &row->id);
    col_u64(st, HC_AT, &row->at_ms);
    row->client = col_text(st, HC_CLIENT);
    row->model = col_text(st, HC_MODEL);
    row->provider = col_str(st, HC_PROVIDER);
    row->status = col_u32(st, HC_STATUS, NULL);
    col_u64(st, HC_DURATION, &row->duration_ms);
    row->has_ttft_ms = col_u64(st, HC_TTFT, &row->ttft_ms);
    sl_proto_usage_t u = {0};
    if (col_u64(st, HC_USAGE_INPUT, &u.input)) {
        col_u64(st, HC_USAGE_OUTPUT, &u.output);
        col_u64(st, HC_USAGE_CACHE_READ, &u.cache_read);
        col_u64(st, HC_USAGE_CACHE_WRITE, &u.cache_write);
        u.estimated = sqlite3_column_int64(st, HC_USAGE_ESTIMATED) != 0;
        row->usage = sl_xmalloc(sizeof *row->usage);
        *row->usage = u;
    }
    row->has_cost_micros = col_u64(st, HC_COST, &row->cost_micros);
    return true;
}

/* "<started_at_ms>.<row>" of a page's last row: two decimal numbers within int64, nothing else. */
static bool
parse_cursor(const char *s, int64_t *at_ms, int64_t *row)
{
    int64_t v[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        const char *start = s;
        for (; *s >= '0' && *s <= '9'; s++) {
            int d = *s - '0';
            if (v[k] > (INT64_MAX - d) / 10)
                return false;
            v[k] = v[k] * 10 + d;
        }
        if (s == start || *s != (k == 0 ? '.' : '\0'))
            return false;
        s++;
    }
    *at_ms = v[0];
    *row = v[1];
    return true;
}

static void
free_rows(sl_proto_history_row_t *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sl_proto_history_row_free(&rows[i]);
    free(rows);
}

static void
bind_filter(sqlite3_stmt *st, int i, const sl_proto_history_filter_t *f)
{
    bind_text(st, i, f != NULL ? f->client : NULL);
    bind_text(st, i + 1, f != NULL ? f->provider : NULL);
    bind_text(st, i + 2, f != NULL ? f->model : NULL);
    if (f != NULL && f->has_status)
        sqlite3_bind_int64(st, i + 3, f->status);
    else
        sqlite3_bind_null(st, i + 3);
}

int
sl_recorder_history(const char *db_path, const sl_recorder_history_query_t *q, sl_proto_history_row_t **rows,
                    size_t *n_rows, char **next_cursor, char *err, size_t err_size)
{
    *rows = NULL;
    *n_rows = 0;
    *next_cursor = NULL;
    int64_t cur_at = INT64_MAX, cur_row = INT64_MAX;
    if (q->cursor != NULL && !parse_cursor(q->cursor, &cur_at, &cur_row)) {
        sl_text_reason(err, err_size, "bad cursor");
        return -1;
    }
    uint32_t limit = q->limit == 0 ? SL_HISTORY_DEFAULT_LIMIT : q->limit;
    if (limit > SL_HISTORY_MAX_LIMIT)
        limit = SL_HISTORY_MAX_LIMIT;
    bool empty = false;
    sqlite3 *db = open_reader(db_path, &empty, err, err_size);
    if (db == NULL)
        return empty ? 0 : -1;

    sqlite3_stmt *st = NULL, *attempts = NULL;
    int rc = sqlite3_prepare_v2(db, history_sql, -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, attempts_sql, -1, &attempts, NULL);
    sl_proto_history_row_t *out = NULL;
    size_t n = 0;
    bool more = false;
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, q->since_ms < INT64_MAX ? (sqlite3_int64)q->since_ms : INT64_MAX);
        sqlite3_bind_int64(st, 2, cur_at);
        sqlite3_bind_int64(st, 3, cur_row);
        bind_filter(st, 4, q->filter);
        /* One row past the page says whether a next page exists. */
        sqlite3_bind_int64(st, 8, (sqlite3_int64)limit + 1);
        out = sl_xcalloc(limit, sizeof *out);
        /*
         * The cursor is the last row looked at, kept or not, so that rows left
         * out for an unknown name are not looked at again on the next page.
         */
        int64_t last_at = 0, last_row = 0;
        uint32_t seen = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (seen == limit) {
                more = true;
                rc = SQLITE_DONE;
                break;
            }
            seen++;
            last_row = sqlite3_column_int64(st, HC_ROW);
            last_at = sqlite3_column_int64(st, HC_AT);
            if (!read_row(st, &out[n]))
                continue;
            /* The attempts are read inside the row statement's read transaction: the same snapshot. */
            rc = read_attempts(attempts, last_row, &out[n++]);
            if (rc != SQLITE_DONE)
                break;
        }
        if (more) {
            char cursor[48];
            snprintf(cursor, sizeof cursor, "%lld.%lld", (long long)last_at, (long long)last_row);
            *next_cursor = sl_xstrdup(cursor);
        }
    }
    if (rc != SQLITE_DONE)
        sl_text_reason(err, err_size, "request DB %s: %s", db_path, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_finalize(attempts);
    sqlite3_close(db);
    if (rc != SQLITE_DONE) {
        free_rows(out, n);
        free(*next_cursor);
        *next_cursor = NULL;
        return -1;
    }
    if (n == 0) {
        free(out);
        out = NULL;
    }
    *rows = out;
    *n_rows = n;
    return 0;
}

int64_t
sl_recorder_load_usage(const char *path, int64_t since_ms, sl_usage_cb cb, void *ctx, char *err,
                       size_t err_size)
{
    sqlite3 *db = open_reader(path, NULL, err, err_size);
    if (db == NULL)
        return -1;
    sqlite3_stmt *st = NULL;
    int64_t count = 0;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT kind, name, minute, requests, tokens, cost_micros FROM usage_buckets"
                                " WHERE minute >= ?1 ORDER BY minute",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, since_ms / MINUTE_MS);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            int kind = col_enum(st, 0, bucket_kind_names, SL_BUCKET_KIND_COUNT, -1, err, err_size);
            if (kind < 0)
                break;
            cb(ctx, (sl_bucket_kind_t)kind, (const char *)sqlite3_column_text(st, 1),
               sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4),
               sqlite3_column_int64(st, 5));
            count++;
        }
    }
    if (rc != SQLITE_DONE) {
        if (rc != SQLITE_ROW)
            sl_text_reason(err, err_size, "request DB %s: %s", path, sqlite3_errmsg(db));
        count = -1;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return count;
}
